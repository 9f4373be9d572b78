/* sparkmq.native._sendlane: the native lane of plain sends (see docs/native.md).
 *
 * scan() takes the whole SEND_MESSAGE_V2 frames, SEND_MESSAGE frames (the C++ client's) or
 * SEND_BATCH_MESSAGE frames (the Java client's batches), at the front of a read buffer and returns a SendGroup (of one request code): their CommitLog records
 * already encoded (queue offset, physical offset and store timestamp left to place()), the
 * distinct topics and (topic, queue) keys for the broker's checks, each record's tags code and
 * index keys hashed, and the responses encoded on demand. The Python
 * encoders (message/record.py, store/dispatch.py, protocol/command.py) are the reference; the
 * tests in tests/native/ compare both byte for byte. */
#include "sendlane.h"
static inline int find_property(const unsigned char *raw, Py_ssize_t n, const char *key, const unsigned char **value,
                                Py_ssize_t *value_len) {
    size_t klen = strlen(key);
    int found = 0;
    Py_ssize_t item = 0;
    while (item <= n) {
        const unsigned char *sep = item < n ? memchr(raw + item, 0x02, (size_t)(n - item)) : NULL;
        Py_ssize_t stop = sep != NULL ? sep - raw : n;
        if ((size_t)(stop - item) > klen && raw[item] == (unsigned char)key[0] && memcmp(raw + item, key, klen) == 0 &&
            raw[item + klen] == 0x01) {
            Py_ssize_t start = item + (Py_ssize_t)klen + 1;
            if (stop > start) {
                *value = raw + start;
                *value_len = stop - start;
                found = 1;
            }
        }
        item = stop + 1;
    }
    return found;
}

static int contains(const unsigned char *raw, Py_ssize_t n, const char *needle, size_t m) {
    const unsigned char *p = raw, *end = raw + n;
    while ((size_t)(end - p) >= m && (p = memchr(p, needle[0], (size_t)(end - p) - m + 1)) != NULL) {
        if (memcmp(p, needle, m) == 0) return 1;
        p++;
    }
    return 0;
}

static int64_t positive_hash(uint32_t h) {
    int32_t s = (int32_t)h;
    if (s == INT32_MIN) return 0;
    return s < 0 ? -(int64_t)s : s;
}

static int add_index(SendGroup *g, Py_ssize_t *cap, uint32_t h, int32_t row) {
    if (g->index_count == *cap) {
        Py_ssize_t grown = *cap ? *cap * 2 : 256;
        int64_t *hashes = PyMem_Realloc(g->index_hash, (size_t)grown * sizeof(int64_t));
        if (hashes == NULL) return -1;
        g->index_hash = hashes;
        int32_t *rows = PyMem_Realloc(g->index_row, (size_t)grown * sizeof(int32_t));
        if (rows == NULL) return -1;
        g->index_row = rows;
        *cap = grown;
    }
    g->index_hash[g->index_count] = positive_hash(h);
    g->index_row[g->index_count++] = row;
    return 0;
}


/* The topic's index, adding it (its str made once); -1: too many topics; -2: error set. */
static int topic_index(SendGroup *g, const unsigned char *topic, Py_ssize_t n, const unsigned char **topic_ptrs,
                       Py_ssize_t *topic_lens) {
    for (Py_ssize_t t = 0; t < g->topic_count; t++)
        if (topic_lens[t] == n && memcmp(topic_ptrs[t], topic, (size_t)n) == 0) return (int)t;
    if (g->topic_count == MAX_TOPICS) return -1;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)topic, n, "strict");
    if (text == NULL) return -2;
    int rc = PyList_Append(g->topics, text);
    Py_DECREF(text);
    if (rc < 0) return -2;
    topic_ptrs[g->topic_count] = topic;
    topic_lens[g->topic_count] = n;
    g->topic_max_queue[g->topic_count] = -1;
    g->topic_messages[g->topic_count] = 0;
    g->topic_bytes[g->topic_count] = 0;
    return (int)g->topic_count++;
}

/* The key of (topic, queue), appended when new. A read round robin over 1,000 queues brings ~128 new keys,
 * each of which the scan below compared with every key before it (~8,000 compares a read); the filter's
 * clear bit says at once that a key is new. */
static int key_index(SendGroup *g, int32_t topic, int32_t queue) {
    uint32_t bit = ((uint32_t)queue * 0x9E3779B1u + (uint32_t)topic * 0x85EBCA77u) >> 22; /* 10 bits */
    if (g->key_bits[bit >> 6] & ((uint64_t)1 << (bit & 63)))
        for (Py_ssize_t k = g->key_count - 1; k >= 0; k--)
            if (g->key_topic[k] == topic && g->key_queue[k] == queue) return (int)k;
    if (g->key_count == MAX_KEYS) return -1;
    g->key_bits[bit >> 6] |= (uint64_t)1 << (bit & 63);
    g->key_topic[g->key_count] = topic;
    g->key_queue[g->key_count] = queue;
    g->key_messages[g->key_count] = 0;
    return (int)g->key_count++;
}

/* Row i's index entries of its KEYS tokens (topic#token), read from its encoded record; -1: no memory. */
static int add_key_entries(SendGroup *g, Py_ssize_t i, Py_ssize_t *index_cap) {
    const unsigned char *rec = g->records + g->record_at[i];
    Py_ssize_t body_len = g->body_len[i], topic_len = rec[SL_HEAD + body_len];
    const unsigned char *topic = rec + SL_HEAD + body_len + 1, *props = topic + topic_len + 2;
    Py_ssize_t props_len = ((Py_ssize_t)props[-2] << 8) | props[-1];
    const unsigned char *value = NULL;
    Py_ssize_t value_len = 0;
    if (!find_property(props, props_len, "KEYS", &value, &value_len)) return 0;
    uint32_t prefix = sl_java_hash(sl_java_hash(0, topic, topic_len), (const unsigned char *)"#", 1);
    Py_ssize_t a = 0;
    while (a < value_len) {
        Py_ssize_t b = a;
        while (b < value_len && value[b] != ' ') b++;
        if (b > a && add_index(g, index_cap, sl_java_hash(prefix, value + a, b - a), (int32_t)i) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        a = b + 1;
    }
    return 0;
}

/* Encode one record of request r (body, flag, and the item's own properties, which r's are appended to as
 * append_properties does) as row g->rows, at g->records_len; *wait: WAIT is not "false" in its properties.
 * Its index entries: topic#UNIQ_KEY, then (``keys``) topic#<each KEYS token>, as dispatch orders a request's
 * (a batch's KEYS entries follow all its UNIQ_KEY entries: add_key_entries). 0: done, 1: the lane stops before
 * this request, -1: error. */
static int encode_one(SendGroup *g, const sl_request *r, const unsigned char *body, Py_ssize_t body_len, int32_t flag,
                      const unsigned char *own, Py_ssize_t own_len, int keys, int *wait, const unsigned char *born_ip,
                      int32_t born_port, const unsigned char *store_ip, int32_t store_port,
                      const unsigned char **topic_ptrs, Py_ssize_t *topic_lens, Py_ssize_t *index_cap) {
    Py_ssize_t i = g->rows;
    unsigned char *rec = g->records + g->records_len;
    Py_ssize_t extra = r->props.present ? r->props.len : 0;
    Py_ssize_t sep = own_len > 0 && extra > 0 && own[own_len - 1] != 0x02;
    Py_ssize_t topic_len = r->topic.len, props_len = own_len + sep + extra;
    Py_ssize_t size = SL_RECORD_FIXED + body_len + topic_len + props_len;
    unsigned char *props = rec + SL_HEAD + body_len + 1 + topic_len + 2;
    if (own_len) memcpy(props, own, (size_t)own_len);
    if (sep) props[own_len] = 0x02;
    if (extra) sl_unescape(&r->props, props + own_len + sep);
    /* a delay level (redirect_if_delayed) or a transaction (is_prepared): the Python path's business */
    if (contains(props, props_len, "DELAY\x01", 6) || contains(props, props_len, "TRAN_MSG\x01", 9)) return 1;
    const unsigned char *topic = rec + SL_HEAD + body_len + 1;
    memcpy((unsigned char *)topic, r->topic.raw, (size_t)topic_len);
    Py_ssize_t topics_before = g->topic_count;
    int t = topic_index(g, topic, topic_len, topic_ptrs, topic_lens);
    if (t == -2) return -1;
    if (t < 0) return 1;
    int k = key_index(g, t, r->queue_id);
    if (k < 0) { /* too many keys: the lane stops here, and forgets the topic it just met */
        if (g->topic_count > topics_before) {
            g->topic_count = topics_before;
            if (PyList_SetSlice(g->topics, topics_before, topics_before + 1, NULL) < 0) return -1;
        }
        return 1;
    }
    sl_put32(rec, (uint32_t)size);
    sl_put32(rec + 4, 0xDAA320A7u);
    sl_put32(rec + 8, sl_crc32(body, body_len) & 0x7FFFFFFFu);
    sl_put32(rec + 12, (uint32_t)r->queue_id);
    sl_put32(rec + 16, (uint32_t)flag);
    sl_put64(rec + 20, 0); /* queue offset: place() */
    sl_put64(rec + 28, 0); /* physical offset: place() */
    sl_put32(rec + 36, (uint32_t)r->sys_flag & ~0x30u); /* hosts are always IPv4 */
    sl_put64(rec + 40, (uint64_t)r->born_timestamp);
    memcpy(rec + 48, born_ip, 4);
    sl_put32(rec + 52, (uint32_t)born_port);
    sl_put64(rec + 56, 0); /* store timestamp: place() */
    memcpy(rec + 64, store_ip, 4);
    sl_put32(rec + 68, (uint32_t)store_port);
    sl_put32(rec + 72, (uint32_t)r->reconsume_times);
    sl_put64(rec + 76, 0); /* prepared transaction offset */
    sl_put32(rec + 84, (uint32_t)body_len);
    if (body_len) memcpy(rec + SL_HEAD, body, (size_t)body_len);
    rec[SL_HEAD + body_len] = (unsigned char)topic_len;
    props[-2] = (unsigned char)(props_len >> 8);
    props[-1] = (unsigned char)props_len;

    /* dispatch columns: tags code, then the index key topic#UNIQ_KEY */
    const unsigned char *value = NULL;
    Py_ssize_t value_len = 0;
    g->tags_code[i] = find_property(props, props_len, "TAGS", &value, &value_len)
                          ? (int32_t)sl_java_hash(0, value, value_len)
                          : 0;
    Py_ssize_t index_start = g->index_count;
    uint32_t prefix = sl_java_hash(sl_java_hash(0, topic, topic_len), (const unsigned char *)"#", 1);
    if (find_property(props, props_len, "UNIQ_KEY", &value, &value_len) &&
        add_index(g, index_cap, sl_java_hash(prefix, value, value_len), (int32_t)i) < 0)
        goto nomem;
    *wait = !(find_property(props, props_len, "WAIT", &value, &value_len) && value_len == 5 &&
              memcmp(value, "false", 5) == 0);
    g->topic_of[i] = t;
    g->key_of[i] = k;
    g->record_at[i] = g->records_len;
    g->record_size[i] = (int32_t)size;
    g->body_len[i] = (int32_t)body_len;
    if (r->queue_id > g->topic_max_queue[t]) g->topic_max_queue[t] = r->queue_id;
    g->topic_messages[t] += 1;
    g->key_messages[k] += 1;
    g->records_len += size;
    g->rows = i + 1;
    if (keys && add_key_entries(g, i, index_cap) < 0) {
        g->index_count = index_start;
        return -1;
    }
    return 0;
nomem:
    g->index_count = index_start;
    PyErr_NoMemory();
    return -1;
}

/* Encode request r (its one record, or each item of a batch) as request n of g; 0, 1 or -1 as encode_one. A batch
 * the lane stops inside is undone: nothing of it stays in the group. */
static int encode_request(SendGroup *g, const sl_request *r, Py_ssize_t n, const unsigned char *born_ip,
                          int32_t born_port, const unsigned char *store_ip, int32_t store_port,
                          const unsigned char **topic_ptrs, Py_ssize_t *topic_lens, Py_ssize_t *index_cap) {
    int wait = 0, item_wait;
    Py_ssize_t rows = g->rows, records_len = g->records_len, index_count = g->index_count;
    Py_ssize_t topic_count = g->topic_count, key_count = g->key_count;
    int rc;
    if (r->code != 320) {
        rc = encode_one(g, r, r->body, r->body_len, r->flag, NULL, 0, 1, &wait, born_ip, born_port, store_ip, store_port,
                        topic_ptrs, topic_lens, index_cap);
        if (rc != 0) return rc;
    } else {
        int32_t max_queue[MAX_TOPICS];
        int64_t messages[MAX_TOPICS];
        memcpy(max_queue, g->topic_max_queue, sizeof(max_queue));
        memcpy(messages, g->topic_messages, sizeof(messages));
        Py_ssize_t at = 0;
        for (Py_ssize_t item = 0; item < r->items; item++) {
            int32_t flag;
            const unsigned char *body, *own;
            Py_ssize_t body_len, own_len;
            at = sl_batch_item(r->body, at, &flag, &body, &body_len, &own, &own_len);
            rc = encode_one(g, r, body, body_len, flag, own, own_len, 0, &item_wait, born_ip, born_port, store_ip,
                            store_port, topic_ptrs, topic_lens, index_cap);
            if (rc != 0) {
                if (g->rows > rows) { /* undo the items before this one */
                    g->key_messages[g->key_of[rows]] -= g->rows - rows;
                    memcpy(g->topic_max_queue, max_queue, sizeof(max_queue));
                    memcpy(g->topic_messages, messages, sizeof(messages));
                    if (g->topic_count > topic_count &&
                        PyList_SetSlice(g->topics, topic_count, g->topic_count, NULL) < 0)
                        return -1;
                    g->rows = rows;
                    g->records_len = records_len;
                    g->index_count = index_count;
                    g->topic_count = topic_count;
                    g->key_count = key_count;
                }
                return rc;
            }
            if (item == 0) wait = item_wait; /* the first item's WAIT decides (SendProcessor) */
        }
        for (Py_ssize_t row = rows; row < g->rows; row++)
            if (add_key_entries(g, row, index_cap) < 0) return -1;
    }
    g->topic_bytes[g->topic_of[rows]] += r->body_len; /* the request's body, as the processor counts it */
    g->opaque[n] = r->opaque;
    g->queue_id[n] = r->queue_id;
    g->wait[n] = wait;
    g->first_row[n] = (int32_t)rows;
    g->first_row[n + 1] = (int32_t)g->rows;
    return 0;
}

#define SCAN_LOCAL_REQUESTS 16

int sl_group_columns(SendGroup *g, Py_ssize_t n, Py_ssize_t rows) {
    g->opaque = PyMem_Malloc((size_t)(4 * n + 1) * sizeof(int32_t));
    g->record_at = PyMem_Malloc((size_t)rows * (2 * sizeof(int64_t) + 5 * sizeof(int32_t)) + 8);
    g->key_topic = PyMem_Malloc(MAX_KEYS * (2 * sizeof(int32_t) + sizeof(int64_t)));
    if (g->opaque == NULL || g->record_at == NULL || g->key_topic == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    g->queue_id = g->opaque + n;
    g->wait = g->queue_id + n;
    g->first_row = g->wait + n;
    g->first_row[0] = 0;
    g->queue_offset = g->record_at + rows;
    g->topic_of = (int32_t *)(g->queue_offset + rows);
    g->key_of = g->topic_of + rows;
    g->record_size = g->key_of + rows;
    g->body_len = g->record_size + rows;
    g->tags_code = g->body_len + rows;
    g->key_queue = g->key_topic + MAX_KEYS;
    g->key_messages = (int64_t *)(g->key_queue + MAX_KEYS);
    return 0;
}

int sl_ssize_arg(PyObject *arg, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t *out) {
    Py_ssize_t v = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < lo || v > hi) {
        PyErr_SetString(PyExc_OverflowError, "an integer argument is out of range");
        return -1;
    }
    *out = v;
    return 0;
}

int sl_ll_arg(PyObject *arg, long long *out) {
    *out = PyLong_AsLongLong(arg);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

int sl_buffer_arg(PyObject *arg, Py_buffer *view, int writable) {
    if (PyObject_GetBuffer(arg, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) == 0) return 0;
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "a %s bytes-like object is required, not '%.100s'",
                 writable ? "read-write" : "", Py_TYPE(arg)->tp_name);
    return -1;
}

int sl_nargs(Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char *signature) {
    if (nargs >= lo && nargs <= hi) return 0;
    PyErr_Format(PyExc_TypeError, "%s: %zd arguments given", signature, nargs);
    return -1;
}

/* scan's arguments ("y*nnnny*iy*i"): the buffers exported, ints = start, limit, max_frame, max_message,
 * born_port, store_port. 0, or -1 with an exception (no buffer held). */
static int scan_args(PyObject *const *args, Py_ssize_t nargs, Py_buffer *view, Py_ssize_t *ints, Py_buffer *born,
                     Py_buffer *store) {
    if (sl_nargs(nargs, 9, 9, "scan(buffer, start, limit, max_frame, max_message, born_ip, born_port, store_ip, "
                              "store_port)") < 0)
        return -1;
    static const int at[6] = {1, 2, 3, 4, 6, 8};
    for (int k = 0; k < 6; k++) {
        Py_ssize_t lo = k < 4 ? PY_SSIZE_T_MIN : INT_MIN, hi = k < 4 ? PY_SSIZE_T_MAX : INT_MAX;
        if (sl_ssize_arg(args[at[k]], lo, hi, &ints[k]) < 0) return -1;
    }
    if (sl_buffer_arg(args[0], view, 0) < 0) return -1;
    if (sl_buffer_arg(args[5], born, 0) < 0) {
        PyBuffer_Release(view);
        return -1;
    }
    if (sl_buffer_arg(args[7], store, 0) < 0) {
        PyBuffer_Release(view);
        PyBuffer_Release(born);
        return -1;
    }
    return 0;
}

static PyObject *scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view, born, store;
    Py_ssize_t ints[6];
    if (scan_args(args, nargs, &view, ints, &born, &store) < 0) return NULL;
    Py_ssize_t start = ints[0], limit = ints[1], max_frame = ints[2], max_message = ints[3];
    int born_port = (int)ints[4], store_port = (int)ints[5];
    PyObject *result = NULL;
    sl_request local[SCAN_LOCAL_REQUESTS], *requests = local; /* a read's few requests: no allocation */
    SendGroup *g = NULL;
    if (born.len != 4 || store.len != 4) {
        PyErr_SetString(PyExc_ValueError, "hosts must be 4-byte IPv4 addresses");
        goto done;
    }
    if (start < 0 || start > view.len) {
        PyErr_SetString(PyExc_ValueError, "start is outside the buffer");
        goto done;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t cap = SCAN_LOCAL_REQUESTS, n = 0, record_bytes = 0, rows = 0, pos = start;
    while (n < limit) {
        sl_request r;
        if (!sl_parse_frame(buf, pos, view.len, max_frame, &r)) break;
        if (n > 0 && r.code != requests[0].code) break; /* one request code per group: its statistics' */
        if (r.code == 320 ? !sl_walk_batch(&r, max_message) : r.record_bytes > max_message) break;
        if (r.record_bytes > INT32_MAX || rows + r.items > INT32_MAX) break;
        if (n == cap) {
            cap *= 4;
            sl_request *grown = PyMem_Realloc(requests == local ? NULL : requests, (size_t)cap * sizeof(sl_request));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            if (requests == local) memcpy(grown, local, sizeof(local));
            requests = grown;
        }
        requests[n++] = r;
        record_bytes += r.record_bytes;
        rows += r.items;
        pos = r.frame_end;
    }
    if (n == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    g = PyObject_New(SendGroup, &SendGroupType);
    if (g == NULL) goto done;
    memset((char *)g + sizeof(PyObject), 0, sizeof(SendGroup) - sizeof(PyObject));
    g->topics = PyList_New(0);
    if (g->topics == NULL) goto done;
    g->records = PyMem_Malloc((size_t)record_bytes + 1);
    if (g->records == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (sl_group_columns(g, n, rows) < 0) goto done;
    const unsigned char *topic_ptrs[MAX_TOPICS];
    Py_ssize_t topic_lens[MAX_TOPICS], index_cap = 0;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        int rc = encode_request(g, &requests[i], i, born.buf, born_port, store.buf, store_port, topic_ptrs, topic_lens,
                                &index_cap);
        if (rc < 0) goto done;
        if (rc > 0) break;
    }
    if (i == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    g->count = i;
    g->code = requests[0].code;
    g->end = requests[i - 1].frame_end;
    result = (PyObject *)g;
    g = NULL;
done:
    Py_XDECREF(g);
    if (requests != local) PyMem_Free(requests);
    PyBuffer_Release(&view);
    PyBuffer_Release(&born);
    PyBuffer_Release(&store);
    return result;
}
static PyMethodDef module_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(buffer, start, limit, max_frame_bytes, max_message_bytes, born_ip, born_port, store_ip, store_port)"
     " -> SendGroup | None"},
    {"merge", sl_merge_groups, METH_O,
     "merge(groups) -> SendGroup | None: unplaced groups of one request code as one group, requests in order"},
    {"scan_pulls", sl_scan_pulls, METH_VARARGS,
     "scan_pulls(buffer, start, limit, max_frame_bytes) -> list of the leading plain PULL_MESSAGE requests"},
    {NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_sendlane",
                                        "The native lane of plain sends (see sparkmq.native).", -1,
                                        module_methods};

PyMODINIT_FUNC PyInit__sendlane(void) {
    if (PyType_Ready(&SendGroupType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "SendGroup", (PyObject *)&SendGroupType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

uint32_t sl_java_hash(uint32_t h, const unsigned char *s, Py_ssize_t n) {
    const unsigned char *p = s, *end = s + n;
    while (p < end) {
        unsigned char b0 = *p;
        uint32_t cp;
        if (b0 < 0x80) {
            cp = b0;
            p += 1;
        } else if (b0 < 0xE0) {
            cp = ((uint32_t)(b0 & 0x1F) << 6) | (p[1] & 0x3F);
            p += 2;
        } else if (b0 < 0xF0) {
            cp = ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
            p += 3;
        } else {
            cp = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
                 (p[3] & 0x3F);
            p += 4;
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            cp = 0xDC00 + (cp & 0x3FF);
        }
        h = 31 * h + cp;
    }
    return h;
}

static uint32_t crc_table[8][256];
static int crc_ready = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    crc_ready = 1;
}

/* zlib.crc32 (slicing by 8). */
uint32_t sl_crc32(const unsigned char *p, Py_ssize_t n) {
    if (!crc_ready) crc_init();
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

void sl_put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

void sl_put64(unsigned char *p, uint64_t v) {
    sl_put32(p, (uint32_t)(v >> 32));
    sl_put32(p + 4, (uint32_t)v);
}

Py_ssize_t sl_put_decimal(char *out, long long v) {
    char tmp[24];
    int n = 0, neg = v < 0;
    unsigned long long u = neg ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    Py_ssize_t k = 0;
    if (neg) out[k++] = '-';
    while (n) out[k++] = tmp[--n];
    return k;
}
