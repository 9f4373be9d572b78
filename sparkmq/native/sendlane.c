/* sparkmq.native._sendlane: the native lane of plain single sends (see docs/native.md).
 *
 * scan() takes the whole SEND_MESSAGE_V2 frames at the front of a read buffer and returns a
 * SendGroup: their CommitLog records already encoded (queue offset, physical offset and store
 * timestamp left to place()), the distinct topics and (topic, queue) keys for the broker's checks,
 * each record's tags code and index keys hashed, and the responses encoded on demand. The Python
 * encoders (message/record.py, store/dispatch.py, protocol/command.py) are the reference; the
 * tests in tests/native/ compare both byte for byte. */
#include "sendlane.h"

#define MAX_TOPICS 64
#define MAX_KEYS 1024

typedef struct {
    PyObject_HEAD Py_ssize_t count;
    Py_ssize_t end;
    int32_t *opaque;
    int32_t *queue_id;
    int32_t *topic_of;
    int32_t *key_of;
    int64_t *record_at; /* offset of each record in records */
    int32_t *record_size;
    int32_t *body_len;
    int32_t *tags_code;
    int32_t *wait; /* WAIT is not "false": the send waits for its flush (SYNC_FLUSH) */
    int64_t *queue_offset; /* after place() */
    unsigned char *records;
    Py_ssize_t records_len;
    int64_t *index_hash;
    int32_t *index_row;
    Py_ssize_t index_count;
    Py_ssize_t topic_count;
    PyObject *topics; /* list[str] */
    int32_t topic_max_queue[MAX_TOPICS];
    int64_t topic_messages[MAX_TOPICS];
    int64_t topic_bytes[MAX_TOPICS];
    Py_ssize_t key_count;
    int32_t *key_topic;
    int32_t *key_queue;
    int64_t *key_messages;
    int64_t physical_start;
    int placed;
} SendGroup;

static void group_dealloc(SendGroup *g) {
    PyMem_Free(g->opaque);
    PyMem_Free(g->records);
    PyMem_Free(g->index_hash);
    PyMem_Free(g->index_row);
    PyMem_Free(g->key_topic);
    Py_XDECREF(g->topics);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* find_property: the last item "key\x01value" (at the start or after \x02) with a non-empty value. */
static int find_property(const unsigned char *raw, Py_ssize_t n, const char *key, const unsigned char **value,
                         Py_ssize_t *value_len) {
    size_t klen = strlen(key);
    int found = 0;
    Py_ssize_t item = 0;
    while (item <= n) {
        Py_ssize_t stop = item;
        while (stop < n && raw[stop] != 0x02) stop++;
        if ((size_t)(stop - item) > klen && memcmp(raw + item, key, klen) == 0 && raw[item + klen] == 0x01) {
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
    for (Py_ssize_t i = 0; i + (Py_ssize_t)m <= n; i++)
        if (raw[i] == (unsigned char)needle[0] && memcmp(raw + i, needle, m) == 0) return 1;
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

static PyTypeObject SendGroupType;

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

static int key_index(SendGroup *g, int32_t topic, int32_t queue) {
    for (Py_ssize_t k = g->key_count - 1; k >= 0; k--)
        if (g->key_topic[k] == topic && g->key_queue[k] == queue) return (int)k;
    if (g->key_count == MAX_KEYS) return -1;
    g->key_topic[g->key_count] = topic;
    g->key_queue[g->key_count] = queue;
    g->key_messages[g->key_count] = 0;
    return (int)g->key_count++;
}

/* Encode request r as record i of g (at g->records_len); 0: done, 1: the lane stops here, -1: error. */
static int encode_one(SendGroup *g, const sl_request *r, Py_ssize_t i, const unsigned char *born_ip, int32_t born_port,
                      const unsigned char *store_ip, int32_t store_port, const unsigned char **topic_ptrs,
                      Py_ssize_t *topic_lens, Py_ssize_t *index_cap) {
    unsigned char *rec = g->records + g->records_len;
    Py_ssize_t topic_len = r->topic.len, props_len = r->props.present ? r->props.len : 0;
    Py_ssize_t size = SL_RECORD_FIXED + r->body_len + topic_len + props_len;
    unsigned char *props = rec + SL_HEAD + r->body_len + 1 + topic_len + 2;
    if (r->props.present) sl_unescape(&r->props, props);
    /* a delay level (redirect_if_delayed) or a transaction (is_prepared): the Python path's business */
    if (contains(props, props_len, "DELAY\x01", 6) || contains(props, props_len, "TRAN_MSG\x01", 9)) return 1;
    const unsigned char *topic = rec + SL_HEAD + r->body_len + 1;
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
    put32(rec, (uint32_t)size);
    put32(rec + 4, 0xDAA320A7u);
    put32(rec + 8, sl_crc32(r->body, r->body_len) & 0x7FFFFFFFu);
    put32(rec + 12, (uint32_t)r->queue_id);
    put32(rec + 16, (uint32_t)r->flag);
    put64(rec + 20, 0); /* queue offset: place() */
    put64(rec + 28, 0); /* physical offset: place() */
    put32(rec + 36, (uint32_t)r->sys_flag & ~0x30u); /* hosts are always IPv4 */
    put64(rec + 40, (uint64_t)r->born_timestamp);
    memcpy(rec + 48, born_ip, 4);
    put32(rec + 52, (uint32_t)born_port);
    put64(rec + 56, 0); /* store timestamp: place() */
    memcpy(rec + 64, store_ip, 4);
    put32(rec + 68, (uint32_t)store_port);
    put32(rec + 72, (uint32_t)r->reconsume_times);
    put64(rec + 76, 0); /* prepared transaction offset */
    put32(rec + 84, (uint32_t)r->body_len);
    memcpy(rec + SL_HEAD, r->body, (size_t)r->body_len);
    rec[SL_HEAD + r->body_len] = (unsigned char)topic_len;
    props[-2] = (unsigned char)(props_len >> 8);
    props[-1] = (unsigned char)props_len;

    /* dispatch columns: tags code, then the index keys topic#UNIQ_KEY and topic#<each KEYS token> */
    const unsigned char *value;
    Py_ssize_t value_len;
    g->tags_code[i] = find_property(props, props_len, "TAGS", &value, &value_len)
                          ? (int32_t)sl_java_hash(0, value, value_len)
                          : 0;
    Py_ssize_t index_start = g->index_count;
    uint32_t prefix = sl_java_hash(sl_java_hash(0, topic, topic_len), (const unsigned char *)"#", 1);
    if (find_property(props, props_len, "UNIQ_KEY", &value, &value_len) &&
        add_index(g, index_cap, sl_java_hash(prefix, value, value_len), (int32_t)i) < 0)
        goto nomem;
    if (find_property(props, props_len, "KEYS", &value, &value_len)) {
        Py_ssize_t a = 0;
        while (a < value_len) {
            Py_ssize_t b = a;
            while (b < value_len && value[b] != ' ') b++;
            if (b > a && add_index(g, index_cap, sl_java_hash(prefix, value + a, b - a), (int32_t)i) < 0) goto nomem;
            a = b + 1;
        }
    }
    g->wait[i] = !(find_property(props, props_len, "WAIT", &value, &value_len) && value_len == 5 &&
                   memcmp(value, "false", 5) == 0);
    g->opaque[i] = r->opaque;
    g->queue_id[i] = r->queue_id;
    g->topic_of[i] = t;
    g->key_of[i] = k;
    g->record_at[i] = g->records_len;
    g->record_size[i] = (int32_t)size;
    g->body_len[i] = (int32_t)r->body_len;
    if (r->queue_id > g->topic_max_queue[t]) g->topic_max_queue[t] = r->queue_id;
    g->topic_messages[t] += 1;
    g->topic_bytes[t] += r->body_len;
    g->key_messages[k] += 1;
    g->records_len += size;
    return 0;
nomem:
    g->index_count = index_start;
    PyErr_NoMemory();
    return -1;
}

static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer view, born, store;
    Py_ssize_t start, limit, max_frame, max_message;
    int born_port, store_port;
    if (!PyArg_ParseTuple(args, "y*nnnny*iy*i", &view, &start, &limit, &max_frame, &max_message, &born, &born_port,
                          &store, &store_port))
        return NULL;
    PyObject *result = NULL;
    sl_request *requests = NULL;
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
    Py_ssize_t cap = 0, n = 0, record_bytes = 0, pos = start;
    while (n < limit) {
        sl_request r;
        if (!sl_parse_frame(buf, pos, view.len, max_frame, &r)) break;
        Py_ssize_t size = SL_RECORD_FIXED + r.body_len + r.topic.len + (r.props.present ? r.props.len : 0);
        if (size > max_message || size > INT32_MAX) break;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            sl_request *grown = PyMem_Realloc(requests, (size_t)cap * sizeof(sl_request));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            requests = grown;
        }
        requests[n++] = r;
        record_bytes += size;
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
    /* per-request columns: 2 int64 + 8 int32 */
    unsigned char *block = PyMem_Malloc((size_t)n * (2 * sizeof(int64_t) + 8 * sizeof(int32_t)) + 8);
    g->records = PyMem_Malloc((size_t)record_bytes + 1);
    g->key_topic = PyMem_Malloc(MAX_KEYS * (2 * sizeof(int32_t) + sizeof(int64_t)));
    g->opaque = (int32_t *)block; /* freed through opaque: keep it the block's start */
    if (block == NULL || g->records == NULL || g->key_topic == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    g->queue_id = g->opaque + n;
    g->topic_of = g->queue_id + n;
    g->key_of = g->topic_of + n;
    g->record_size = g->key_of + n;
    g->body_len = g->record_size + n;
    g->tags_code = g->body_len + n;
    g->wait = g->tags_code + n;
    g->record_at = (int64_t *)(g->wait + n); /* 8-byte aligned: 8n int32s before */
    g->queue_offset = g->record_at + n;
    g->key_queue = g->key_topic + MAX_KEYS;
    g->key_messages = (int64_t *)(g->key_queue + MAX_KEYS);
    const unsigned char *topic_ptrs[MAX_TOPICS];
    Py_ssize_t topic_lens[MAX_TOPICS], index_cap = 0;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        int rc = encode_one(g, &requests[i], i, born.buf, born_port, store.buf, store_port, topic_ptrs, topic_lens,
                            &index_cap);
        if (rc < 0) goto done;
        if (rc > 0) break;
    }
    if (i == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    g->count = i;
    g->end = requests[i - 1].frame_end;
    result = (PyObject *)g;
    g = NULL;
done:
    Py_XDECREF(g);
    PyMem_Free(requests);
    PyBuffer_Release(&view);
    PyBuffer_Release(&born);
    PyBuffer_Release(&store);
    return result;
}

static PyObject *group_place(SendGroup *g, PyObject *args) {
    long long physical_start, store_timestamp;
    PyObject *bases;
    if (!PyArg_ParseTuple(args, "LLO!", &physical_start, &store_timestamp, &PyList_Type, &bases)) return NULL;
    if (PyList_GET_SIZE(bases) != g->key_count) {
        PyErr_SetString(PyExc_ValueError, "one base queue offset per key");
        return NULL;
    }
    int64_t next[MAX_KEYS];
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        next[k] = PyLong_AsLongLong(PyList_GET_ITEM(bases, k));
        if (next[k] == -1 && PyErr_Occurred()) return NULL;
    }
    int64_t position = physical_start;
    for (Py_ssize_t i = 0; i < g->count; i++) {
        unsigned char *rec = g->records + g->record_at[i];
        int64_t queue_offset = next[g->key_of[i]]++;
        g->queue_offset[i] = queue_offset;
        put64(rec + 20, (uint64_t)queue_offset);
        put64(rec + 28, (uint64_t)position);
        put64(rec + 56, (uint64_t)store_timestamp);
        position += g->record_size[i];
    }
    g->physical_start = physical_start;
    g->placed = 1;
    return PyBytes_FromStringAndSize((const char *)g->records, g->records_len);
}

static int check_placed(SendGroup *g) {
    if (!g->placed) PyErr_SetString(PyExc_RuntimeError, "the group is not placed yet");
    return g->placed;
}

static int append_int(PyObject *list, long long value) {
    PyObject *number = PyLong_FromLongLong(value);
    if (number == NULL) return -1;
    int rc = PyList_Append(list, number);
    Py_DECREF(number);
    return rc;
}

/* ([(physical offsets, sizes, tags codes) per key], index hashes, index physical offsets) */
static PyObject *group_dispatch(SendGroup *g, PyObject *unused) {
    if (!check_placed(g)) return NULL;
    PyObject *queues = PyList_New(g->key_count), *hashes = PyList_New(g->index_count),
             *offsets = PyList_New(g->index_count);
    if (queues == NULL || hashes == NULL || offsets == NULL) goto fail;
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        PyObject *column = Py_BuildValue("([][][])");
        if (column == NULL) goto fail;
        PyList_SET_ITEM(queues, k, column);
    }
    for (Py_ssize_t i = 0; i < g->count; i++) {
        PyObject *column = PyList_GET_ITEM(queues, g->key_of[i]);
        if (append_int(PyTuple_GET_ITEM(column, 0), g->physical_start + g->record_at[i]) < 0 ||
            append_int(PyTuple_GET_ITEM(column, 1), g->record_size[i]) < 0 ||
            append_int(PyTuple_GET_ITEM(column, 2), g->tags_code[i]) < 0)
            goto fail;
    }
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
    return Py_BuildValue("(NNN)", queues, hashes, offsets);
fail:
    Py_XDECREF(queues);
    Py_XDECREF(hashes);
    Py_XDECREF(offsets);
    return NULL;
}

static const char HEX[] = "0123456789ABCDEF";

static Py_ssize_t put_decimal(char *out, long long v) {
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

/* The response frames: header = p0 opaque p1 msgId p2 queueId p3 queueOffset p4, no body. */
static PyObject *group_responses(SendGroup *g, PyObject *args) {
    Py_buffer part[5], store;
    int store_port;
    if (!check_placed(g)) return NULL;
    if (!PyArg_ParseTuple(args, "(y*y*y*y*y*)y*i", &part[0], &part[1], &part[2], &part[3], &part[4], &store,
                          &store_port))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t fixed = 0;
    for (int k = 0; k < 5; k++) fixed += part[k].len;
    if (store.len != 4) {
        PyErr_SetString(PyExc_ValueError, "the store host must be a 4-byte IPv4 address");
        goto done;
    }
    /* 8 frame bytes + parts + opaque (11) + msgId (32) + queueId (11) + queueOffset (20) */
    Py_ssize_t most = g->count * (8 + fixed + 11 + 32 + 11 + 20);
    out = PyBytes_FromStringAndSize(NULL, most);
    if (out == NULL) goto done;
    char *base = PyBytes_AS_STRING(out), *w = base;
    unsigned char id[16];
    memcpy(id, store.buf, 4);
    put32(id + 4, (uint32_t)store_port);
    for (Py_ssize_t i = 0; i < g->count; i++) {
        char *frame = w;
        w += 8;
        memcpy(w, part[0].buf, (size_t)part[0].len);
        w += part[0].len;
        w += put_decimal(w, g->opaque[i]);
        memcpy(w, part[1].buf, (size_t)part[1].len);
        w += part[1].len;
        put64(id + 8, (uint64_t)(g->physical_start + g->record_at[i]));
        for (int b = 0; b < 16; b++) {
            *w++ = HEX[id[b] >> 4];
            *w++ = HEX[id[b] & 15];
        }
        memcpy(w, part[2].buf, (size_t)part[2].len);
        w += part[2].len;
        w += put_decimal(w, g->queue_id[i]);
        memcpy(w, part[3].buf, (size_t)part[3].len);
        w += part[3].len;
        w += put_decimal(w, g->queue_offset[i]);
        memcpy(w, part[4].buf, (size_t)part[4].len);
        w += part[4].len;
        uint32_t header_len = (uint32_t)(w - frame - 8);
        put32((unsigned char *)frame, header_len + 4);
        put32((unsigned char *)frame + 4, header_len); /* serialize type 0: JSON */
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

static PyObject *get_keys(SendGroup *g, void *closure) {
    PyObject *keys = PyList_New(g->key_count);
    if (keys == NULL) return NULL;
    for (Py_ssize_t k = 0; k < g->key_count; k++) {
        PyObject *key = Py_BuildValue("(Oi)", PyList_GET_ITEM(g->topics, g->key_topic[k]), g->key_queue[k]);
        if (key == NULL) {
            Py_DECREF(keys);
            return NULL;
        }
        PyList_SET_ITEM(keys, k, key);
    }
    return keys;
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
static PyObject *get_topic_messages(SendGroup *g, void *c) { return int64_list(g->topic_messages, g->topic_count); }
static PyObject *get_topic_bytes(SendGroup *g, void *c) { return int64_list(g->topic_bytes, g->topic_count); }
static PyObject *get_topic_max_queue(SendGroup *g, void *c) {
    int64_t v[MAX_TOPICS];
    for (Py_ssize_t t = 0; t < g->topic_count; t++) v[t] = g->topic_max_queue[t];
    return int64_list(v, g->topic_count);
}
static PyObject *get_count(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->count); }
static PyObject *get_end(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->end); }
static PyObject *get_record_bytes(SendGroup *g, void *c) { return PyLong_FromSsize_t(g->records_len); }

static PyGetSetDef group_getset[] = {
    {"count", (getter)get_count, NULL, "requests in the group", NULL},
    {"end", (getter)get_end, NULL, "buffer position after the group's last frame", NULL},
    {"record_bytes", (getter)get_record_bytes, NULL, "bytes of the group's CommitLog records", NULL},
    {"topics", (getter)get_topics, NULL, "distinct topics, in order of first appearance", NULL},
    {"keys", (getter)get_keys, NULL, "distinct (topic, queue id), in order of first appearance", NULL},
    {"key_counts", (getter)get_key_counts, NULL, "messages per key", NULL},
    {"topic_messages", (getter)get_topic_messages, NULL, "messages per topic", NULL},
    {"topic_bytes", (getter)get_topic_bytes, NULL, "body bytes per topic", NULL},
    {"topic_max_queue", (getter)get_topic_max_queue, NULL, "highest queue id per topic", NULL},
    {"waits", (getter)get_waits, NULL, "whether any request waits for its flush (WAIT is not false)", NULL},
    {NULL},
};

static PyMethodDef group_methods[] = {
    {"place", (PyCFunction)group_place, METH_VARARGS,
     "place(physical_start, store_timestamp, bases) -> bytes: the records at their log position"},
    {"dispatch", (PyCFunction)group_dispatch, METH_NOARGS,
     "dispatch() -> (per-key (physical, sizes, tags codes), index hashes, index physical offsets)"},
    {"responses", (PyCFunction)group_responses, METH_VARARGS,
     "responses(parts, store_ip, store_port) -> bytes: every request's response frame"},
    {"answers", (PyCFunction)group_answers, METH_NOARGS,
     "answers() -> [(opaque, physical offset, queue id, queue offset, waits)] after place()"},
    {"first_refused", (PyCFunction)group_first_refused, METH_O,
     "first_refused(limits) -> int: the first request over its topic's queue limit (count: none)"},
    {NULL},
};

static PyTypeObject SendGroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.native._sendlane.SendGroup",
    .tp_basicsize = sizeof(SendGroup),
    .tp_dealloc = (destructor)group_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Plain single sends scanned from a read buffer, their records encoded (see scan).",
    .tp_methods = group_methods,
    .tp_getset = group_getset,
};

static PyMethodDef module_methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, start, limit, max_frame_bytes, max_message_bytes, born_ip, born_port, store_ip, store_port)"
     " -> SendGroup | None"},
    {"scan_pulls", sl_scan_pulls, METH_VARARGS,
     "scan_pulls(buffer, start, limit, max_frame_bytes) -> list of the leading plain PULL_MESSAGE requests"},
    {"pull_responses", sl_pull_responses, METH_VARARGS,
     "pull_responses(parts, answers) -> bytes: SUCCESS response frames with their bodies"},
    {NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_sendlane",
                                        "The native lane of plain single sends (see sparkmq.native).", -1,
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
