/* SendGroup: the sends one scan of the native lane took (sendlane.c builds it), their records
 * placed in the log (place), their ConsumeQueue units and index entries (queue_units, index_entries) and
 * their responses (responses). */
#include "sendlane.h"
#include "indexput.h"

static void group_dealloc(SendGroup *g) {
    PyMem_Free(g->opaque);
    PyMem_Free(g->record_at);
    PyMem_Free(g->records);
    PyMem_Free(g->index_hash);
    PyMem_Free(g->index_row);
    PyMem_Free(g->key_topic);
    Py_XDECREF(g->topics);
    Py_XDECREF(g->keys);
    Py_TYPE(g)->tp_free((PyObject *)g);
}
/* (first, values[0], ..., values[n - 1]) from ``first`` (a new reference, consumed; NULL: an error is set):
 * Py_BuildValue's tuple without its format walk (these run per read). */
static PyObject *row_of(PyObject *first, int n, const long long *values) {
    if (first == NULL) return NULL;
    PyObject *row = PyTuple_New(1 + n);
    if (row == NULL) {
        Py_DECREF(first);
        return NULL;
    }
    PyTuple_SET_ITEM(row, 0, first);
    for (int k = 0; k < n; k++) {
        PyObject *v = PyLong_FromLongLong(values[k]);
        if (v == NULL) {
            Py_DECREF(row);
            return NULL;
        }
        PyTuple_SET_ITEM(row, 1 + k, v);
    }
    return row;
}

/* ``values``' n ints into ``out``: a list of exactly n ints (no __index__ is called: no Python runs
 * while the list's items are read). -1 with an exception. */
static int int64_values(PyObject *values, Py_ssize_t n, int64_t *out, const char *what) {
    if (!PyList_Check(values) || PyList_GET_SIZE(values) != n) {
        PyErr_Format(PyExc_ValueError, "one %s per %s", what, n == 0 ? "item" : "entry");
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = PyList_GET_ITEM(values, k);
        if (!PyLong_Check(v)) {
            PyErr_Format(PyExc_TypeError, "%s must be ints", what);
            return -1;
        }
        out[k] = PyLong_AsLongLong(v);
        if (out[k] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

/* The records' queue offsets, log positions and store time patched in (place()'s work); -1 with an exception. */
static int place_records(SendGroup *g, long long physical_start, long long store_timestamp, PyObject *bases) {
    int64_t next[MAX_KEYS];
    if (int64_values(bases, g->key_count, next, "base queue offset") < 0) return -1;
    int64_t position = physical_start;
    for (Py_ssize_t i = 0; i < g->rows; i++) {
        unsigned char *rec = g->records + g->record_at[i];
        int64_t queue_offset = next[g->key_of[i]]++;
        g->queue_offset[i] = queue_offset;
        sl_put64(rec + 20, (uint64_t)queue_offset);
        sl_put64(rec + 28, (uint64_t)position);
        sl_put64(rec + 56, (uint64_t)store_timestamp);
        position += g->record_size[i];
    }
    g->physical_start = physical_start;
    g->placed = 1;
    return 0;
}

static PyObject *group_place(SendGroup *g, PyObject *const *args, Py_ssize_t nargs) {
    long long physical_start, store_timestamp;
    if (sl_nargs(nargs, 3, 3, "place(physical_start, store_timestamp, bases)") < 0 ||
        sl_ll_arg(args[0], &physical_start) < 0 || sl_ll_arg(args[1], &store_timestamp) < 0)
        return NULL;
    PyObject *bases = args[2];
    if (!PyList_Check(bases)) {
        PyErr_Format(PyExc_TypeError, "place: bases must be a list, not %.100s", Py_TYPE(bases)->tp_name);
        return NULL;
    }
    if (place_records(g, physical_start, store_timestamp, bases) < 0) return NULL;
    return PyBytes_FromStringAndSize((const char *)g->records, g->records_len);
}

static int check_placed(SendGroup *g) {
    if (!g->placed) PyErr_SetString(PyExc_RuntimeError, "the group is not placed yet");
    return g->placed;
}

/* (index key hashes, their records' physical offsets), in log order */
static PyObject *group_index_entries(SendGroup *g, PyObject *unused) {
    if (!check_placed(g)) return NULL;
    PyObject *hashes = PyList_New(g->index_count), *offsets = PyList_New(g->index_count);
    if (hashes == NULL || offsets == NULL) goto fail;
    for (Py_ssize_t j = 0; j < g->index_count; j++) {
        PyObject *h = PyLong_FromLongLong(g->index_hash[j]);
        PyObject *o = PyLong_FromLongLong(g->physical_start + g->record_at[g->index_row[j]]);
        if (h == NULL || o == NULL) {
            Py_XDECREF(h);
            Py_XDECREF(o);
            goto fail;
        }
        PyList_SET_ITEM(hashes, j, h);
        PyList_SET_ITEM(offsets, j, o);
    }
    return Py_BuildValue("(NN)", hashes, offsets);
fail:
    Py_XDECREF(hashes);
    Py_XDECREF(offsets);
    return NULL;
}

/* [(ConsumeQueue units, end of the last record) per key]: consume_queue.encode_units_plain of the
 * key's dispatch columns, and its last record's physical offset + size. */
static PyObject *group_queue_units(SendGroup *g, PyObject *unused) {
    if (!check_placed(g)) return NULL;
    PyObject *list = PyList_New(g->key_count);
    if (list == NULL) return NULL;
    unsigned char *cursor[MAX_KEYS];
    int64_t end[MAX_KEYS];
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        PyObject *units = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)g->key_messages[k] * 20);
        if (units == NULL) goto fail;
        PyList_SET_ITEM(list, k, units);
        cursor[k] = (unsigned char *)PyBytes_AS_STRING(units);
    }
    for (Py_ssize_t i = 0; i < g->rows; i++) {
        int32_t k = g->key_of[i];
        int64_t physical = g->physical_start + g->record_at[i];
        sl_put64(cursor[k], (uint64_t)physical);
        sl_put32(cursor[k] + 8, (uint32_t)g->record_size[i]);
        sl_put64(cursor[k] + 12, (uint64_t)(int64_t)g->tags_code[i]);
        cursor[k] += 20;
        end[k] = physical + g->record_size[i];
    }
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        long long stop = end[k];
        PyObject *pair = row_of(Py_NewRef(PyList_GET_ITEM(list, k)), 1, &stop);
        if (pair == NULL) goto fail;
        PyList_SetItem(list, k, pair); /* steals pair, drops the bare units */
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

static const char HEX[] = "0123456789ABCDEF";

/* The response frames: header = p0 opaque p1 msgId p2 queueId p3 queueOffset p4, no body; a batch's msgId is its
 * records' ids comma-joined (offset_msg_ids) and its queueOffset the first record's. */
/* responses' arguments ("(y*y*y*y*y*)y*i|nn"): 0 with part[5] and store exported, or -1 with an exception (no
 * buffer held). */
static int responses_args(PyObject *const *args, Py_ssize_t nargs, Py_buffer *part, Py_buffer *store,
                          Py_ssize_t *store_port, Py_ssize_t *first, Py_ssize_t *stop) {
    if (sl_nargs(nargs, 3, 5, "responses(parts, store_ip, store_port[, first, stop])") < 0 ||
        sl_ssize_arg(args[2], INT_MIN, INT_MAX, store_port) < 0 ||
        (nargs > 3 && sl_ssize_arg(args[3], PY_SSIZE_T_MIN, PY_SSIZE_T_MAX, first) < 0) ||
        (nargs > 4 && sl_ssize_arg(args[4], PY_SSIZE_T_MIN, PY_SSIZE_T_MAX, stop) < 0))
        return -1;
    PyObject *parts = PySequence_Fast(args[0], "responses: parts must be a sequence of 5 bytes-like objects");
    if (parts == NULL) return -1;
    int k = 0;
    if (PySequence_Fast_GET_SIZE(parts) != 5)
        PyErr_SetString(PyExc_TypeError, "responses: parts must be a sequence of 5 bytes-like objects");
    else
        while (k < 5 && sl_buffer_arg(PySequence_Fast_GET_ITEM(parts, k), &part[k], 0) == 0) k++;
    Py_DECREF(parts); /* the exports hold their objects */
    if (k == 5 && sl_buffer_arg(args[1], store, 0) == 0) return 0;
    while (k > 0 && k <= 5) PyBuffer_Release(&part[--k]);
    return -1;
}

static PyObject *group_responses(SendGroup *g, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer part[5], store;
    Py_ssize_t store_port, first = 0, stop = -1;
    if (!check_placed(g)) return NULL;
    if (responses_args(args, nargs, part, &store, &store_port, &first, &stop) < 0) return NULL;
    PyObject *out = NULL;
    Py_ssize_t fixed = 0;
    for (int k = 0; k < 5; k++) fixed += part[k].len;
    if (stop < 0) stop = g->count;
    if (store.len != 4) {
        PyErr_SetString(PyExc_ValueError, "the store host must be a 4-byte IPv4 address");
        goto done;
    }
    if (first < 0 || first > stop || stop > g->count) {
        PyErr_SetString(PyExc_ValueError, "first and stop must be 0 <= first <= stop <= count");
        goto done;
    }
    /* 8 frame bytes + parts + opaque (11) + msgIds (33 each) + queueId (11) + queueOffset (20) */
    Py_ssize_t rows = g->first_row[stop] - g->first_row[first];
    Py_ssize_t most = (stop - first) * (8 + fixed + 11 + 11 + 20) + rows * 33;
    out = PyBytes_FromStringAndSize(NULL, most);
    if (out == NULL) goto done;
    char *base = PyBytes_AS_STRING(out), *w = base;
    unsigned char id[16];
    memcpy(id, store.buf, 4);
    sl_put32(id + 4, (uint32_t)store_port);
    for (Py_ssize_t i = first; i < stop; i++) {
        char *frame = w;
        w += 8;
        memcpy(w, part[0].buf, (size_t)part[0].len);
        w += part[0].len;
        w += sl_put_decimal(w, g->opaque[i]);
        memcpy(w, part[1].buf, (size_t)part[1].len);
        w += part[1].len;
        for (int32_t row = g->first_row[i]; row < g->first_row[i + 1]; row++) {
            if (row > g->first_row[i]) *w++ = ',';
            sl_put64(id + 8, (uint64_t)(g->physical_start + g->record_at[row]));
            for (int b = 0; b < 16; b++) {
                *w++ = HEX[id[b] >> 4];
                *w++ = HEX[id[b] & 15];
            }
        }
        memcpy(w, part[2].buf, (size_t)part[2].len);
        w += part[2].len;
        w += sl_put_decimal(w, g->queue_id[i]);
        memcpy(w, part[3].buf, (size_t)part[3].len);
        w += part[3].len;
        w += sl_put_decimal(w, g->queue_offset[g->first_row[i]]);
        memcpy(w, part[4].buf, (size_t)part[4].len);
        w += part[4].len;
        uint32_t header_len = (uint32_t)(w - frame - 8);
        sl_put32((unsigned char *)frame, header_len + 4);
        sl_put32((unsigned char *)frame + 4, header_len); /* serialize type 0: JSON */
    }
    if (_PyBytes_Resize(&out, w - base) < 0) out = NULL;
done:
    for (int k = 0; k < 5; k++) PyBuffer_Release(&part[k]);
    PyBuffer_Release(&store);
    return out;
}

/* The first request whose topic is refused (limit < 0) or whose queue id is at or over its topic's limit. */
static PyObject *group_first_refused(SendGroup *g, PyObject *limits) {
    int64_t limit[MAX_TOPICS];
    if (int64_values(limits, g->topic_count, limit, "queue limit") < 0) return NULL;
    Py_ssize_t i = 0;
    while (i < g->count && g->queue_id[i] < limit[g->topic_of[g->first_row[i]]]) i++;
    return PyLong_FromSsize_t(i);
}

/* [(opaque, its records' physical offsets, queue id, first queue offset, waits for its flush)] after place() */
static PyObject *group_answers(SendGroup *g, PyObject *unused) {
    if (!check_placed(g)) return NULL;
    PyObject *list = PyList_New(g->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < g->count; i++) {
        int32_t row = g->first_row[i], rows = g->first_row[i + 1] - row;
        PyObject *physical = PyList_New(rows), *item = NULL;
        for (int32_t j = 0; physical != NULL && j < rows; j++) {
            PyObject *offset = PyLong_FromLongLong(g->physical_start + g->record_at[row + j]);
            if (offset == NULL) Py_CLEAR(physical);
            else PyList_SET_ITEM(physical, j, offset);
        }
        if (physical != NULL)
            item = Py_BuildValue("(iNiLO)", g->opaque[i], physical, g->queue_id[i], (long long)g->queue_offset[row],
                                 g->wait[i] ? Py_True : Py_False);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static PyObject *get_waits(SendGroup *g, void *closure) {
    for (Py_ssize_t i = 0; i < g->count; i++)
        if (g->wait[i]) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

/* a copy: the group's own list stays out of Python's reach (C reads its items between calls that allocate) */
static PyObject *get_topics(SendGroup *g, void *closure) { return PyList_GetSlice(g->topics, 0, g->topic_count); }

/* Canonical key tuples: topic -> list of (topic, queue id) by queue id, the same tuple object for
 * every group. The store's dicts keep the key object first inserted, which for queues the lane
 * created is this one: a lookup with it matches by identity (no tuple and string compares, no
 * read of the stored key). Only a cache (any equal tuple is a valid key): cleared past
 * CANON_TOPICS topics. */
#define CANON_TOPICS 4096
#define CANON_QUEUES 65536
static PyObject *canon;

/* canon[topic], made on first use (a borrowed reference: canon holds it) */
static PyObject *canonical_row(PyObject *topic) {
    if (canon == NULL && (canon = PyDict_New()) == NULL) return NULL;
    PyObject *row = PyDict_GetItemWithError(canon, topic);
    if (row != NULL || PyErr_Occurred()) return row;
    if (PyDict_GET_SIZE(canon) >= CANON_TOPICS) PyDict_Clear(canon);
    if ((row = PyList_New(0)) == NULL) return NULL;
    int rc = PyDict_SetItem(canon, topic, row);
    Py_DECREF(row);
    return rc < 0 ? NULL : row;
}

/* row[queue_id]: a new reference to the canonical (topic, queue_id), made on first use */
static PyObject *canonical_key(PyObject *row, PyObject *topic, int queue_id) {
    if (queue_id < 0 || queue_id >= CANON_QUEUES) return Py_BuildValue("(Oi)", topic, queue_id);
    while (PyList_GET_SIZE(row) <= queue_id)
        if (PyList_Append(row, Py_None) < 0) return NULL;
    PyObject *key = PyList_GET_ITEM(row, queue_id);
    if (key != Py_None) return Py_NewRef(key);
    if ((key = Py_BuildValue("(Oi)", topic, queue_id)) == NULL) return NULL;
    PyList_SetItem(row, queue_id, Py_NewRef(key)); /* steals the new reference, drops the None */
    return key;
}

static void release_rows(PyObject **rows, Py_ssize_t n) {
    for (Py_ssize_t t = 0; t < n; t++) Py_XDECREF(rows[t]);
    PyMem_Free(rows);
}

/* A new list of the group's key tuples (canonical, above), made once (reserve, the store's listeners and
 * the lane all want them). */
static PyObject *get_keys(SendGroup *g, void *closure) {
    if (g->keys != NULL) return PyList_GetSlice(g->keys, 0, g->key_count);
    Py_ssize_t topics = PyList_GET_SIZE(g->topics);
    PyObject **rows = PyMem_Calloc((size_t)topics + 1, sizeof(PyObject *));
    PyObject *keys = rows == NULL ? NULL : PyList_New(g->key_count);
    if (keys == NULL) goto fail;
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        int32_t t = g->key_topic[k];
        PyObject *topic = PyList_GET_ITEM(g->topics, t);
        if (rows[t] == NULL) { /* held: a clear of canon for a later topic must not free it */
            if ((rows[t] = canonical_row(topic)) == NULL) goto fail;
            Py_INCREF(rows[t]);
        }
        PyObject *key = canonical_key(rows[t], topic, g->key_queue[k]);
        if (key == NULL) goto fail;
        PyList_SET_ITEM(keys, k, key);
    }
    release_rows(rows, topics);
    g->keys = keys;
    return PyList_GetSlice(keys, 0, g->key_count);
fail:
    Py_XDECREF(keys);
    if (rows == NULL) return PyErr_NoMemory();
    release_rows(rows, topics);
    return NULL;
}

static PyObject *int64_list(const int64_t *values, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = PyLong_FromLongLong(values[k]);
        if (v == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, v);
    }
    return list;
}

static PyObject *get_key_counts(SendGroup *g, void *c) { return int64_list(g->key_messages, g->key_count); }
static PyObject *get_topic_stats(SendGroup *g, void *c) {
    PyObject *list = PyList_New(g->topic_count);
    if (list == NULL) return NULL;
    for (Py_ssize_t t = 0; t < g->topic_count; t++) {
        long long counts[2] = {(long long)g->topic_messages[t], (long long)g->topic_bytes[t]};
        PyObject *row = row_of(Py_NewRef(PyList_GET_ITEM(g->topics, t)), 2, counts);
        if (row == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, t, row);
    }
    return list;
}
static PyObject *get_topic_max_queue(SendGroup *g, void *c) {
    int64_t v[MAX_TOPICS];
    for (Py_ssize_t t = 0; t < g->topic_count; t++) v[t] = g->topic_max_queue[t];
    return int64_list(v, g->topic_count);
}
static PyObject *get_count(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->count); }
static PyObject *get_rows(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->rows); }
static PyObject *get_code(SendGroup *g, void *c) { return PyLong_FromLong(g->code); }
static PyObject *get_end(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->end); }
static PyObject *get_record_bytes(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->records_len); }
static PyObject *get_index_count(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->index_count); }


/* index_into(mapping, slots, index_count, begin_timestamp, begin_phy_offset, hash_slot_count, store_timestamp)
 * -> (hash slot count, index count, first offset, last offset) | None: after place(), index_entries() written
 * into an index file's mapping as IndexFile.put_plain writes them (every entry stored at store_timestamp;
 * indexput.h), without their lists, then the header as IndexFile.put leaves it (begin_phy_offset None: the
 * first entry's, for a file without entries). None, nothing written: the group has no index entries. */
static PyObject *group_index_into(SendGroup *g, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer mm;
    Py_ssize_t slots, before;
    long long begin, store_timestamp, slot_count;
    if (!check_placed(g)) return NULL;
    if (sl_nargs(nargs, 7, 7, "index_into(mapping, slots, before, begin, begin_phy, slot_count, store_timestamp)") <
            0 ||
        sl_ssize_arg(args[1], PY_SSIZE_T_MIN, PY_SSIZE_T_MAX, &slots) < 0 ||
        sl_ssize_arg(args[2], PY_SSIZE_T_MIN, PY_SSIZE_T_MAX, &before) < 0 || sl_ll_arg(args[3], &begin) < 0 ||
        sl_ll_arg(args[5], &slot_count) < 0 || sl_ll_arg(args[6], &store_timestamp) < 0 ||
        sl_buffer_arg(args[0], &mm, 1) < 0)
        return NULL;
    PyObject *begin_phy_obj = args[4];
    PyObject *result = NULL;
    Py_ssize_t n = g->index_count;
    int64_t *phys = NULL;
    if (n == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (slots > mm.len / IX_SLOT_BYTES || !ix_fits(mm.len, slots, before, n)) { /* the first: no overflow in ix_fits */
        PyErr_SetString(PyExc_ValueError, "the entries do not fit the mapping");
        goto done;
    }
    if ((phys = PyMem_Malloc((size_t)n * sizeof(int64_t))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < n; j++) phys[j] = g->physical_start + g->record_at[g->index_row[j]];
    long long begin_phy = phys[0];
    if (begin_phy_obj != Py_None && (begin_phy = PyLong_AsLongLong(begin_phy_obj)) == -1 && PyErr_Occurred()) goto done;
    long long fresh = ix_write(mm.buf, slots, before, begin, n, g->index_hash, phys, NULL, store_timestamp);
    if (fresh < 0) goto done;
    slot_count += fresh;
    unsigned char *h = mm.buf; /* _HEADER ">qqqqii" */
    sl_put64(h, (uint64_t)begin);
    sl_put64(h + 8, (uint64_t)store_timestamp);
    sl_put64(h + 16, (uint64_t)begin_phy);
    sl_put64(h + 24, (uint64_t)phys[n - 1]);
    sl_put32(h + 32, (uint32_t)slot_count);
    sl_put32(h + 36, (uint32_t)(before + n));
    long long rest[3] = {(long long)(before + n), (long long)phys[0], (long long)phys[n - 1]};
    result = row_of(PyLong_FromLongLong(slot_count), 3, rest);
done:
    PyMem_Free(phys);
    PyBuffer_Release(&mm);
    return result;
}

/* merge(groups) -> SendGroup | None: the unplaced groups (of one request code) as one group, their requests in
 * order, so that one place / reserve / append_units / index_entries call serves all of them; the same records,
 * queue offsets, ConsumeQueue units and index entries as placing them one after the other. None when they do not
 * fit one group (another code, over MAX_TOPICS topics or MAX_KEYS keys) or one is placed already. Each group's
 * requests stay a contiguous range (responses(..., first, stop)). */
static PyObject *merge_groups(PyObject *groups) {
    Py_ssize_t ngroups = PyTuple_GET_SIZE(groups), n = 0, rows = 0, record_bytes = 0, index_count = 0;
    SendGroup *first = NULL;
    for (Py_ssize_t j = 0; j < ngroups; j++) {
        PyObject *item = PyTuple_GET_ITEM(groups, j);
        if (Py_TYPE(item) != &SendGroupType) {
            PyErr_SetString(PyExc_TypeError, "merge takes a non-empty list of SendGroups");
            return NULL;
        }
        SendGroup *g = (SendGroup *)item;
        if (first == NULL) first = g;
        if (g->placed || g->code != first->code) Py_RETURN_NONE;
        n += g->count;
        rows += g->rows;
        record_bytes += g->records_len;
        index_count += g->index_count;
    }
    SendGroup *m = PyObject_New(SendGroup, &SendGroupType);
    if (m == NULL) return NULL;
    memset((char *)m + sizeof(PyObject), 0, sizeof(SendGroup) - sizeof(PyObject));
    m->topics = PyList_New(0);
    if (m->topics == NULL || sl_group_columns(m, n, rows) < 0) goto fail;
    m->records = PyMem_Malloc((size_t)record_bytes + 1);
    m->index_hash = PyMem_Malloc((size_t)index_count * sizeof(int64_t) + 8);
    m->index_row = PyMem_Malloc((size_t)index_count * sizeof(int32_t) + 4);
    if (m->records == NULL || m->index_hash == NULL || m->index_row == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t at = 0, row_at = 0; /* requests and records so far */
    for (Py_ssize_t j = 0; j < ngroups; j++) {
        SendGroup *g = (SendGroup *)PyTuple_GET_ITEM(groups, j);
        int32_t topic_map[MAX_TOPICS], key_map[MAX_KEYS];
        for (Py_ssize_t t = 0; t < g->topic_count; t++) {
            PyObject *name = PyList_GET_ITEM(g->topics, t);
            Py_ssize_t u;
            for (u = 0; u < m->topic_count; u++) {
                PyObject *known = PyList_GET_ITEM(m->topics, u);
                if (known == name) break;
                int eq = PyUnicode_Compare(known, name);
                if (eq == -1 && PyErr_Occurred()) goto fail;
                if (eq == 0) break;
            }
            if (u == m->topic_count) {
                if (m->topic_count == MAX_TOPICS) goto decline;
                if (PyList_Append(m->topics, name) < 0) goto fail;
                m->topic_max_queue[u] = -1;
                m->topic_count++;
            }
            topic_map[t] = (int32_t)u;
            if (g->topic_max_queue[t] > m->topic_max_queue[u]) m->topic_max_queue[u] = g->topic_max_queue[t];
            m->topic_messages[u] += g->topic_messages[t];
            m->topic_bytes[u] += g->topic_bytes[t];
        }
        for (Py_ssize_t k = 0; k < g->key_count; k++) {
            int32_t topic = topic_map[g->key_topic[k]], queue = g->key_queue[k];
            Py_ssize_t u;
            for (u = m->key_count - 1; u >= 0; u--)
                if (m->key_topic[u] == topic && m->key_queue[u] == queue) break;
            if (u < 0) {
                if (m->key_count == MAX_KEYS) goto decline;
                u = m->key_count++;
                m->key_topic[u] = topic;
                m->key_queue[u] = queue;
                m->key_messages[u] = 0;
            }
            key_map[k] = (int32_t)u;
            m->key_messages[u] += g->key_messages[k];
        }
        for (Py_ssize_t i = 0; i < g->count; i++) {
            Py_ssize_t r = at + i;
            m->opaque[r] = g->opaque[i];
            m->queue_id[r] = g->queue_id[i];
            m->wait[r] = g->wait[i];
            m->first_row[r + 1] = (int32_t)(row_at + g->first_row[i + 1]);
        }
        for (Py_ssize_t i = 0; i < g->rows; i++) {
            Py_ssize_t r = row_at + i;
            m->topic_of[r] = topic_map[g->topic_of[i]];
            m->key_of[r] = key_map[g->key_of[i]];
            m->record_size[r] = g->record_size[i];
            m->body_len[r] = g->body_len[i];
            m->tags_code[r] = g->tags_code[i];
            m->record_at[r] = m->records_len + g->record_at[i];
        }
        memcpy(m->records + m->records_len, g->records, (size_t)g->records_len);
        m->records_len += g->records_len;
        for (Py_ssize_t x = 0; x < g->index_count; x++) {
            m->index_hash[m->index_count] = g->index_hash[x];
            m->index_row[m->index_count++] = (int32_t)(row_at + g->index_row[x]);
        }
        at += g->count;
        row_at += g->rows;
    }
    m->count = n;
    m->rows = rows;
    m->code = first->code;
    m->end = 0; /* no one buffer: each group's own end applies */
    return (PyObject *)m;
decline:
    Py_DECREF(m);
    Py_RETURN_NONE;
fail:
    Py_DECREF(m);
    return NULL;
}

PyObject *sl_merge_groups(PyObject *module, PyObject *groups) {
    if (!PyList_Check(groups) || PyList_GET_SIZE(groups) == 0) {
        PyErr_SetString(PyExc_TypeError, "merge takes a non-empty list of SendGroups");
        return NULL;
    }
    PyObject *held = PyList_AsTuple(groups); /* the groups stay alive whatever runs while the merge allocates */
    if (held == NULL) return NULL;
    PyObject *merged = merge_groups(held);
    Py_DECREF(held);
    return merged;
}

static PyGetSetDef group_getset[] = {
    {"count", (getter)get_count, NULL, "requests in the group", NULL},
    {"rows", (getter)get_rows, NULL, "records in the group (a batch's items each one)", NULL},
    {"code", (getter)get_code, NULL, "the request code of the group's requests (10, 310 or 320)", NULL},
    {"end", (getter)get_end, NULL, "buffer position after the group's last frame", NULL},
    {"record_bytes", (getter)get_record_bytes, NULL, "bytes of the group's CommitLog records", NULL},
    {"index_count", (getter)get_index_count, NULL, "index entries of the group (its records' keys)", NULL},
    {"topics", (getter)get_topics, NULL, "distinct topics, in order of first appearance", NULL},
    {"keys", (getter)get_keys, NULL, "distinct (topic, queue id), in order of first appearance", NULL},
    {"key_counts", (getter)get_key_counts, NULL, "messages per key", NULL},
    {"topic_stats", (getter)get_topic_stats, NULL, "(topic, messages, body bytes) per topic", NULL},
    {"topic_max_queue", (getter)get_topic_max_queue, NULL, "highest queue id per topic", NULL},
    {"waits", (getter)get_waits, NULL, "whether any request waits for its flush (WAIT is not false)", NULL},
    {NULL},
};

static PyMethodDef group_methods[] = {
    {"place", (PyCFunction)(void (*)(void))group_place, METH_FASTCALL,
     "place(physical_start, store_timestamp, bases) -> bytes: the records at their log position"},
    {"index_entries", (PyCFunction)group_index_entries, METH_NOARGS,
     "index_entries() -> (index key hashes, their records' physical offsets) after place()"},
    {"queue_units", (PyCFunction)group_queue_units, METH_NOARGS,
     "queue_units() -> [(ConsumeQueue units, end of the last record) per key] after place()"},
    {"index_into", (PyCFunction)(void (*)(void))group_index_into, METH_FASTCALL,
     "index_into(mapping, slots, index_count, begin_timestamp, begin_phy_offset, hash_slot_count, store_timestamp)"
     " -> (hash slot count, index count, first offset, last offset) | None: the index entries and header written"
     " into an index file (after place())"},
    {"responses", (PyCFunction)(void (*)(void))group_responses, METH_FASTCALL,
     "responses(parts, store_ip, store_port[, first, stop]) -> bytes: the response frames of requests"
     " first..stop-1 (default: all)"},
    {"answers", (PyCFunction)group_answers, METH_NOARGS,
     "answers() -> [(opaque, physical offsets, queue id, first queue offset, waits)] after place()"},
    {"first_refused", (PyCFunction)group_first_refused, METH_O,
     "first_refused(limits) -> int: the first request over its topic's queue limit (count: none)"},
    {NULL},
};

PyTypeObject SendGroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.native._sendlane.SendGroup",
    .tp_basicsize = sizeof(SendGroup),
    .tp_dealloc = (destructor)group_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Plain sends scanned from a read buffer, their records encoded (see scan).",
    .tp_methods = group_methods,
    .tp_getset = group_getset,
};
