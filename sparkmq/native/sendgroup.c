/* SendGroup: the sends one scan of the native lane took (sendlane.c builds it), their records
 * placed in the log (place), their ConsumeQueue units and index entries (queue_units, index_entries) and
 * their responses (responses). */
#include "sendlane.h"
#include "segment.h"
#include "indexput.h"

static void group_dealloc(SendGroup *g) {
    PyMem_Free(g->opaque);
    PyMem_Free(g->records);
    PyMem_Free(g->index_hash);
    PyMem_Free(g->index_row);
    PyMem_Free(g->key_topic);
    Py_XDECREF(g->topics);
    Py_XDECREF(g->keys);
    Py_TYPE(g)->tp_free((PyObject *)g);
}
/* The records' queue offsets, log positions and store time patched in (place()'s work); -1 with an exception. */
static int place_records(SendGroup *g, long long physical_start, long long store_timestamp, PyObject *bases) {
    if (PyList_GET_SIZE(bases) != g->key_count) {
        PyErr_SetString(PyExc_ValueError, "one base queue offset per key");
        return -1;
    }
    int64_t next[MAX_KEYS];
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        next[k] = PyLong_AsLongLong(PyList_GET_ITEM(bases, k));
        if (next[k] == -1 && PyErr_Occurred()) return -1;
    }
    int64_t position = physical_start;
    for (Py_ssize_t i = 0; i < g->count; i++) {
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

static PyObject *group_place(SendGroup *g, PyObject *args) {
    long long physical_start, store_timestamp;
    PyObject *bases;
    if (!PyArg_ParseTuple(args, "LLO!", &physical_start, &store_timestamp, &PyList_Type, &bases)) return NULL;
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
    for (Py_ssize_t i = 0; i < g->count; i++) {
        int32_t k = g->key_of[i];
        int64_t physical = g->physical_start + g->record_at[i];
        sl_put64(cursor[k], (uint64_t)physical);
        sl_put32(cursor[k] + 8, (uint32_t)g->record_size[i]);
        sl_put64(cursor[k] + 12, (uint64_t)(int64_t)g->tags_code[i]);
        cursor[k] += 20;
        end[k] = physical + g->record_size[i];
    }
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        PyObject *pair = Py_BuildValue("(OL)", PyList_GET_ITEM(list, k), (long long)end[k]);
        if (pair == NULL) goto fail;
        PyList_SetItem(list, k, pair); /* steals pair, drops the bare units */
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

static const char HEX[] = "0123456789ABCDEF";

/* The response frames: header = p0 opaque p1 msgId p2 queueId p3 queueOffset p4, no body. */
static PyObject *group_responses(SendGroup *g, PyObject *args) {
    Py_buffer part[5], store;
    int store_port;
    Py_ssize_t first = 0, stop = -1;
    if (!check_placed(g)) return NULL;
    if (!PyArg_ParseTuple(args, "(y*y*y*y*y*)y*i|nn", &part[0], &part[1], &part[2], &part[3], &part[4], &store,
                          &store_port, &first, &stop))
        return NULL;
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
    /* 8 frame bytes + parts + opaque (11) + msgId (32) + queueId (11) + queueOffset (20) */
    Py_ssize_t most = (stop - first) * (8 + fixed + 11 + 32 + 11 + 20);
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
        sl_put64(id + 8, (uint64_t)(g->physical_start + g->record_at[i]));
        for (int b = 0; b < 16; b++) {
            *w++ = HEX[id[b] >> 4];
            *w++ = HEX[id[b] & 15];
        }
        memcpy(w, part[2].buf, (size_t)part[2].len);
        w += part[2].len;
        w += sl_put_decimal(w, g->queue_id[i]);
        memcpy(w, part[3].buf, (size_t)part[3].len);
        w += part[3].len;
        w += sl_put_decimal(w, g->queue_offset[i]);
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
    if (!PyList_Check(limits) || PyList_GET_SIZE(limits) != g->topic_count) {
        PyErr_SetString(PyExc_ValueError, "one limit per topic");
        return NULL;
    }
    long limit[MAX_TOPICS];
    for (Py_ssize_t t = 0; t < g->topic_count; t++) {
        limit[t] = PyLong_AsLong(PyList_GET_ITEM(limits, t));
        if (limit[t] == -1 && PyErr_Occurred()) return NULL;
    }
    Py_ssize_t i = 0;
    while (i < g->count && g->queue_id[i] < limit[g->topic_of[i]]) i++;
    return PyLong_FromSsize_t(i);
}

/* first_refused with each topic's limit read from ``known`` (topic -> (its config, its limit), the
 * lane's cache) where that entry's config is the one ``configs`` (topic -> config) holds now, by
 * identity: the lane's _queue_limits without its Python steps. None (nothing read but the dicts)
 * when a topic misses or either is not an exact dict: the caller works the limits out itself. */
static PyObject *group_first_refused_known(SendGroup *g, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "first_refused_known(configs, known)");
        return NULL;
    }
    PyObject *configs = args[0], *known = args[1];
    if (!PyDict_CheckExact(configs) || !PyDict_CheckExact(known) || !PyList_Check(g->topics) ||
        PyList_GET_SIZE(g->topics) != g->topic_count)
        Py_RETURN_NONE;
    long limit[MAX_TOPICS];
    for (Py_ssize_t t = 0; t < g->topic_count; t++) {
        PyObject *topic = PyList_GET_ITEM(g->topics, t);
        PyObject *config = PyDict_GetItemWithError(configs, topic); /* borrowed */
        if (config == NULL) {
            if (PyErr_Occurred()) return NULL;
            config = Py_None;
        }
        PyObject *cached = PyDict_GetItemWithError(known, topic);
        if (cached == NULL) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
        if (!PyTuple_CheckExact(cached) || PyTuple_GET_SIZE(cached) != 2 || PyTuple_GET_ITEM(cached, 0) != config ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(cached, 1)))
            Py_RETURN_NONE;
        limit[t] = PyLong_AsLong(PyTuple_GET_ITEM(cached, 1));
        if (limit[t] == -1 && PyErr_Occurred()) return NULL;
    }
    Py_ssize_t i = 0;
    while (i < g->count && g->queue_id[i] < limit[g->topic_of[i]]) i++;
    return PyLong_FromSsize_t(i);
}

/* [(opaque, physical offset, queue id, queue offset, waits for its flush)] after place() */
static PyObject *group_answers(SendGroup *g, PyObject *unused) {
    if (!check_placed(g)) return NULL;
    PyObject *list = PyList_New(g->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < g->count; i++) {
        PyObject *item = Py_BuildValue("(iLiLO)", g->opaque[i], (long long)(g->physical_start + g->record_at[i]),
                                       g->queue_id[i], (long long)g->queue_offset[i], g->wait[i] ? Py_True : Py_False);
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

static PyObject *get_topics(SendGroup *g, void *closure) { return Py_NewRef(g->topics); }

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
        PyObject *row = Py_BuildValue("(OLL)", PyList_GET_ITEM(g->topics, t), (long long)g->topic_messages[t],
                                      (long long)g->topic_bytes[t]);
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
static PyObject *get_code(SendGroup *g, void *c) { return PyLong_FromLong(g->code); }
static PyObject *get_end(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->end); }
static PyObject *get_record_bytes(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->records_len); }
static PyObject *get_index_count(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->index_count); }


static SegmentAPI *segment_api;

/* The native bases of the store's objects (segment.h), imported once. */
static int load_segment_api(void) {
    if (segment_api == NULL) segment_api = PyCapsule_Import(SEGMENT_API_CAPSULE, 0);
    return segment_api != NULL ? 0 : -1;
}

/* Each key is hashed once for reserve's three dict operations (a tuple's hash is not cached, and at 1,000
 * queues ~128 keys a read each hashed three times showed in profiles); 3.11 and 3.12 export the known-hash
 * calls, later versions hash per call. */
#if PY_VERSION_HEX < 0x030D0000
#define DICT_GET(d, key, hash) _PyDict_GetItem_KnownHash((d), (key), (hash))
#define DICT_SET(d, key, value, hash) _PyDict_SetItem_KnownHash((d), (key), (value), (hash))
#else
#define DICT_GET(d, key, hash) PyDict_GetItemWithError((d), (key))
#define DICT_SET(d, key, value, hash) PyDict_SetItem((d), (key), (value))
#endif

/* queue's max_physical_offset: its native field (any other object: the attribute) */
static PyObject *queue_end(PyObject *queue) {
    if (PyObject_TypeCheck(queue, segment_api->queue_base))
        return PyLong_FromLongLong(((QueueBaseObject *)queue)->max_physical_offset);
    return PyObject_GetAttrString(queue, "max_physical_offset");
}

/* reserve(queued, queues) -> (bases, targets, ends) | None: MessageStore.put_lane_groups' per-key
 * planning in one call: each key's base queue offset (queued.get(key, 0)), its ConsumeQueue
 * (queues[key]) and that queue's max_physical_offset; queued[key] moves on by the key's count.
 * None, with nothing changed, when a key has no ConsumeQueue yet (the caller's Python path). */
static PyObject *group_reserve(SendGroup *g, PyObject *args) {
    PyObject *queued, *queues;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &queued, &PyDict_Type, &queues)) return NULL;
    if (load_segment_api() < 0) return NULL;
    PyObject *keys = get_keys(g, NULL);
    if (keys == NULL) return NULL;
    PyObject *bases = PyList_New(g->key_count), *targets = PyList_New(g->key_count), *ends = PyList_New(g->key_count);
    PyObject *result = NULL;
    Py_hash_t hashes[MAX_KEYS];
    if (bases == NULL || targets == NULL || ends == NULL) goto done;
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        PyObject *key = PyList_GET_ITEM(keys, k);
        if ((hashes[k] = PyObject_Hash(key)) == -1) goto done;
        PyObject *queue = DICT_GET(queues, key, hashes[k]);
        if (queue == NULL || queue == Py_None) {
            if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
            goto done;
        }
        PyList_SET_ITEM(targets, k, Py_NewRef(queue));
        PyObject *end = queue_end(queue);
        if (end == NULL) goto done;
        PyList_SET_ITEM(ends, k, end);
        PyObject *base = DICT_GET(queued, key, hashes[k]);
        if (base == NULL) {
            if (PyErr_Occurred()) goto done;
            base = PyLong_FromLong(0);
        } else
            Py_INCREF(base);
        if (base == NULL) goto done;
        PyList_SET_ITEM(bases, k, base);
    }
    for (Py_ssize_t k = 0; k < g->key_count; k++) { /* all found: now move the offsets on */
        long long base = PyLong_AsLongLong(PyList_GET_ITEM(bases, k));
        if (base == -1 && PyErr_Occurred()) goto done;
        PyObject *next = PyLong_FromLongLong(base + g->key_messages[k]);
        if (next == NULL) goto done;
        int rc = DICT_SET(queued, PyList_GET_ITEM(keys, k), next, hashes[k]);
        Py_DECREF(next);
        if (rc < 0) goto done;
    }
    result = Py_BuildValue("(OOO)", bases, targets, ends);
done:
    Py_DECREF(keys);
    Py_XDECREF(bases);
    Py_XDECREF(targets);
    Py_XDECREF(ends);
    return result;
}

/* 1: the units went into the queue's last file as ConsumeQueue.append_units' first branch would
 * put them (MappedFile.append included: the pool touch, the copy, the write position), reading and
 * writing only the native fields of the queue, its file list and the segment (segment.h); 0: not
 * the common case (or not those native objects), nothing done. A mapped segment of a pool is in
 * the pool (MapPool.touch), so the touch is its tick. */
static int append_fast(PyObject *queue, int64_t base, const unsigned char *units, Py_ssize_t len, int64_t end) {
    if (!PyObject_TypeCheck(queue, segment_api->queue_base)) return 0;
    PyObject *mfq = ((QueueBaseObject *)queue)->files;
    if (mfq == NULL || !PyObject_TypeCheck(mfq, segment_api->file_list)) return 0;
    PyObject *files = ((FileListObject *)mfq)->files;
    if (files == NULL || !PyList_CheckExact(files) || PyList_GET_SIZE(files) == 0) return 0;
    PyObject *last = PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1);
    if (!PyObject_TypeCheck(last, segment_api->segment)) return 0;
    SegmentObject *s = (SegmentObject *)last;
    long long at = s->write_position;
    if (s->start_offset + at != base * 20 || at == 0 || at + len >= s->file_bytes) return 0;
    if (s->addr == NULL || s->addr_len < at + len) return 0; /* unmapped by the pool: append_units maps it again */
    s->tick = ++*segment_api->ticks;
    memcpy(s->addr + at, units, (size_t)len);
    s->write_position = at + len;
    ((QueueBaseObject *)queue)->max_physical_offset = end;
    return 1;
}

/* append_units(bases, targets): queue_units() written to each key's ConsumeQueue as
 * ``targets[k].append_units(bases[k], units, end)`` would, the common case (the units continue
 * the queue inside its mapped last file) without a Python call per key; any other case calls
 * append_units itself. */
static PyObject *group_append_units(SendGroup *g, PyObject *args) {
    PyObject *bases, *targets;
    if (!check_placed(g)) return NULL;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &bases, &PyList_Type, &targets)) return NULL;
    if (PyList_GET_SIZE(bases) != g->key_count || PyList_GET_SIZE(targets) != g->key_count) {
        PyErr_SetString(PyExc_ValueError, "one base and one target per key");
        return NULL;
    }
    if (load_segment_api() < 0) return NULL;
    Py_ssize_t offset[MAX_KEYS + 1];
    int64_t end[MAX_KEYS];
    offset[0] = 0;
    for (Py_ssize_t k = 0; k < g->key_count; k++) offset[k + 1] = offset[k] + (Py_ssize_t)g->key_messages[k] * 20;
    unsigned char *units = PyMem_Malloc((size_t)offset[g->key_count] + 1);
    if (units == NULL) return PyErr_NoMemory();
    Py_ssize_t cursor[MAX_KEYS];
    memcpy(cursor, offset, sizeof(Py_ssize_t) * (size_t)g->key_count);
    for (Py_ssize_t i = 0; i < g->count; i++) {
        int32_t k = g->key_of[i];
        unsigned char *u = units + cursor[k];
        int64_t physical = g->physical_start + g->record_at[i];
        sl_put64(u, (uint64_t)physical);
        sl_put32(u + 8, (uint32_t)g->record_size[i]);
        sl_put64(u + 12, (uint64_t)(int64_t)g->tags_code[i]);
        cursor[k] += 20;
        end[k] = physical + g->record_size[i];
    }
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        PyObject *queue = PyList_GET_ITEM(targets, k), *base_obj = PyList_GET_ITEM(bases, k);
        long long base = PyLong_AsLongLong(base_obj);
        if (base == -1 && PyErr_Occurred()) goto fail;
        Py_ssize_t len = offset[k + 1] - offset[k];
        if (!append_fast(queue, base, units + offset[k], len, end[k])) {
            PyObject *r = PyObject_CallMethod(queue, "append_units", "Oy#L", base_obj, (const char *)units + offset[k],
                                              len, (long long)end[k]);
            if (r == NULL) goto fail;
            Py_DECREF(r);
        }
    }
    PyMem_Free(units);
    Py_RETURN_NONE;
fail:
    PyMem_Free(units);
    return NULL;
}

/* write_into(segment, store_timestamp, bases) -> physical start | None: place() at the segment's write
 * position, the records copied into its mapping as ``segment.append(place(...))`` would (the pool touch,
 * the copy, the write position), without the records' bytes object or a Python call. None, nothing done,
 * when the segment is not a mapped native one with room for them (the caller places and appends). */
static PyObject *group_write_into(SendGroup *g, PyObject *args) {
    PyObject *segment, *bases;
    long long store_timestamp;
    if (!PyArg_ParseTuple(args, "OLO!", &segment, &store_timestamp, &PyList_Type, &bases)) return NULL;
    if (load_segment_api() < 0) return NULL;
    if (!PyObject_TypeCheck(segment, segment_api->segment)) Py_RETURN_NONE;
    SegmentObject *s = (SegmentObject *)segment;
    long long at = s->write_position;
    if (s->addr == NULL || at < 0 || at + g->records_len > s->file_bytes || at + g->records_len > s->addr_len)
        Py_RETURN_NONE;
    if (place_records(g, s->start_offset + at, store_timestamp, bases) < 0) return NULL;
    s->tick = ++*segment_api->ticks;
    memcpy(s->addr + at, g->records, (size_t)g->records_len);
    s->write_position = at + g->records_len;
    return PyLong_FromLongLong(s->start_offset + at);
}

/* index_into(mapping, slots, index_count, begin_timestamp, begin_phy_offset, hash_slot_count, store_timestamp)
 * -> (hash slot count, index count, first offset, last offset) | None: after place(), index_entries() written
 * into an index file's mapping as IndexFile.put_plain writes them (every entry stored at store_timestamp;
 * indexput.h), without their lists, then the header as IndexFile.put leaves it (begin_phy_offset None: the
 * first entry's, for a file without entries). None, nothing written: the group has no index entries. */
static PyObject *group_index_into(SendGroup *g, PyObject *args) {
    Py_buffer mm;
    Py_ssize_t slots, before;
    long long begin, store_timestamp, slot_count;
    PyObject *begin_phy_obj;
    if (!check_placed(g)) return NULL;
    if (!PyArg_ParseTuple(args, "w*nnLOLL", &mm, &slots, &before, &begin, &begin_phy_obj, &slot_count,
                          &store_timestamp))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = g->index_count;
    int64_t *phys = NULL;
    if (n == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (!ix_fits(mm.len, slots, before, n)) {
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
    result = Py_BuildValue("(LnLL)", slot_count, before + n, (long long)phys[0], (long long)phys[n - 1]);
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
PyObject *sl_merge_groups(PyObject *module, PyObject *groups) {
    if (!PyList_Check(groups) || PyList_GET_SIZE(groups) == 0) {
        PyErr_SetString(PyExc_TypeError, "merge takes a non-empty list of SendGroups");
        return NULL;
    }
    Py_ssize_t ngroups = PyList_GET_SIZE(groups), n = 0, record_bytes = 0, index_count = 0;
    SendGroup *first = NULL;
    for (Py_ssize_t j = 0; j < ngroups; j++) {
        PyObject *item = PyList_GET_ITEM(groups, j);
        if (Py_TYPE(item) != &SendGroupType) {
            PyErr_SetString(PyExc_TypeError, "merge takes a non-empty list of SendGroups");
            return NULL;
        }
        SendGroup *g = (SendGroup *)item;
        if (first == NULL) first = g;
        if (g->placed || g->code != first->code) Py_RETURN_NONE;
        n += g->count;
        record_bytes += g->records_len;
        index_count += g->index_count;
    }
    SendGroup *m = PyObject_New(SendGroup, &SendGroupType);
    if (m == NULL) return NULL;
    memset((char *)m + sizeof(PyObject), 0, sizeof(SendGroup) - sizeof(PyObject));
    m->topics = PyList_New(0);
    unsigned char *block = PyMem_Malloc((size_t)n * (2 * sizeof(int64_t) + 8 * sizeof(int32_t)) + 8);
    m->opaque = (int32_t *)block; /* as scan: freed through opaque */
    m->records = PyMem_Malloc((size_t)record_bytes + 1);
    m->key_topic = PyMem_Malloc(MAX_KEYS * (2 * sizeof(int32_t) + sizeof(int64_t)));
    m->index_hash = PyMem_Malloc((size_t)index_count * sizeof(int64_t) + 8);
    m->index_row = PyMem_Malloc((size_t)index_count * sizeof(int32_t) + 4);
    if (m->topics == NULL) goto fail;
    if (block == NULL || m->records == NULL || m->key_topic == NULL || m->index_hash == NULL || m->index_row == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    m->queue_id = m->opaque + n;
    m->topic_of = m->queue_id + n;
    m->key_of = m->topic_of + n;
    m->record_size = m->key_of + n;
    m->body_len = m->record_size + n;
    m->tags_code = m->body_len + n;
    m->wait = m->tags_code + n;
    m->record_at = (int64_t *)(m->wait + n);
    m->queue_offset = m->record_at + n;
    m->key_queue = m->key_topic + MAX_KEYS;
    m->key_messages = (int64_t *)(m->key_queue + MAX_KEYS);
    Py_ssize_t at = 0; /* requests so far */
    for (Py_ssize_t j = 0; j < ngroups; j++) {
        SendGroup *g = (SendGroup *)PyList_GET_ITEM(groups, j);
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
            m->topic_of[r] = topic_map[g->topic_of[i]];
            m->key_of[r] = key_map[g->key_of[i]];
            m->record_size[r] = g->record_size[i];
            m->body_len[r] = g->body_len[i];
            m->tags_code[r] = g->tags_code[i];
            m->wait[r] = g->wait[i];
            m->record_at[r] = m->records_len + g->record_at[i];
        }
        memcpy(m->records + m->records_len, g->records, (size_t)g->records_len);
        m->records_len += g->records_len;
        for (Py_ssize_t x = 0; x < g->index_count; x++) {
            m->index_hash[m->index_count] = g->index_hash[x];
            m->index_row[m->index_count++] = (int32_t)(at + g->index_row[x]);
        }
        at += g->count;
    }
    m->count = n;
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

static PyGetSetDef group_getset[] = {
    {"count", (getter)get_count, NULL, "requests in the group", NULL},
    {"code", (getter)get_code, NULL, "the request code of the group's requests (10 or 310)", NULL},
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
    {"place", (PyCFunction)group_place, METH_VARARGS,
     "place(physical_start, store_timestamp, bases) -> bytes: the records at their log position"},
    {"index_entries", (PyCFunction)group_index_entries, METH_NOARGS,
     "index_entries() -> (index key hashes, their records' physical offsets) after place()"},
    {"queue_units", (PyCFunction)group_queue_units, METH_NOARGS,
     "queue_units() -> [(ConsumeQueue units, end of the last record) per key] after place()"},
    {"reserve", (PyCFunction)group_reserve, METH_VARARGS,
     "reserve(queued, queues) -> (bases, targets, ends) | None: each key's base offset, queue and its end"},
    {"append_units", (PyCFunction)group_append_units, METH_VARARGS,
     "append_units(bases, targets): queue_units() appended to each key's ConsumeQueue (after place())"},
    {"write_into", (PyCFunction)group_write_into, METH_VARARGS,
     "write_into(segment, store_timestamp, bases) -> physical start | None: placed and copied into the segment"},
    {"index_into", (PyCFunction)group_index_into, METH_VARARGS,
     "index_into(mapping, slots, index_count, begin_timestamp, begin_phy_offset, hash_slot_count, store_timestamp)"
     " -> (hash slot count, index count, first offset, last offset) | None: the index entries and header written"
     " into an index file (after place())"},
    {"responses", (PyCFunction)group_responses, METH_VARARGS,
     "responses(parts, store_ip, store_port[, first, stop]) -> bytes: the response frames of requests"
     " first..stop-1 (default: all)"},
    {"answers", (PyCFunction)group_answers, METH_NOARGS,
     "answers() -> [(opaque, physical offset, queue id, queue offset, waits)] after place()"},
    {"first_refused", (PyCFunction)group_first_refused, METH_O,
     "first_refused(limits) -> int: the first request over its topic's queue limit (count: none)"},
    {"first_refused_known", (PyCFunction)(void (*)(void))group_first_refused_known, METH_FASTCALL,
     "first_refused_known(configs, known) -> int | None: first_refused with the limits the lane's cache"
     " {topic: (config, limit)} holds for the configs in configs; None when a topic misses"},
    {NULL},
};

PyTypeObject SendGroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.native._sendlane.SendGroup",
    .tp_basicsize = sizeof(SendGroup),
    .tp_dealloc = (destructor)group_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Plain single sends scanned from a read buffer, their records encoded (see scan).",
    .tp_methods = group_methods,
    .tp_getset = group_getset,
};
