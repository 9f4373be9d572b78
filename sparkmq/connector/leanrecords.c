/* The source's lean columns straight from a PULL body: one walk of the records, one copy of each field.
 *
 * decode(buffer) -> tuple of bytes (Arrow buffers, little-endian) or None.
 * The reference is records_to_arrow's numpy path (sparkmq/connector/arrow.py); tests compare both.
 * None means "not for this path": an empty buffer, a record chain that does not parse exactly (the
 * numpy path then raises its precise CorruptRecordError), a compressed body or IPv6 hosts.
 * Record layout: sparkmq/message/layout.py (v1 records, IPv4 hosts, big-endian integers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#define MAGIC ((int32_t)0xDAA320A7)
#define FIXED_BYTES 91 /* 88-byte head + topic length byte + properties length (2 bytes) */
#define POS_MAGIC 4
#define POS_QUEUE_ID 12
#define POS_QUEUE_OFFSET 20
#define POS_PHYSICAL_OFFSET 28
#define POS_SYS_FLAG 36
#define POS_BORN_TIMESTAMP 40
#define POS_STORE_TIMESTAMP 56
#define POS_STORE_HOST 64
#define POS_BODY_LENGTH 84
#define POS_BODY 88
#define COMPRESSED_FLAG 0x1
#define V6_FLAGS 0x30
#define MSG_ID_CHARS 32 /* storeIP(4) + storePort(4) + physicalOffset(8), as hex */

typedef struct {
    Py_ssize_t at;
    int32_t length; /* -1: absent (or empty) */
} Span;

typedef struct {
    Py_ssize_t start, props;
    int32_t props_length;
    Span body, keys, tags, uniq;
} Record;

static int32_t be32(const uint8_t *p) { return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]); }

static int64_t be64(const uint8_t *p) { return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint32_t)be32(p + 4)); }

/* The values of KEYS, TAGS and UNIQ_KEY in name\1value\2name\1value...: the last non-empty one wins. */
static void scan_properties(const uint8_t *buf, Record *r) {
    const uint8_t *p = buf + r->props, *end = p + r->props_length;
    r->keys.length = r->tags.length = r->uniq.length = -1;
    while (p < end) {
        const uint8_t *stop = memchr(p, 2, (size_t)(end - p));
        if (stop == NULL) stop = end;
        Py_ssize_t n = stop - p;
        Span *hit = NULL;
        Py_ssize_t skip = 0;
        if (n > 5 && memcmp(p, "KEYS\1", 5) == 0) hit = &r->keys, skip = 5;
        else if (n > 5 && memcmp(p, "TAGS\1", 5) == 0) hit = &r->tags, skip = 5;
        else if (n > 9 && memcmp(p, "UNIQ_KEY\1", 9) == 0) hit = &r->uniq, skip = 9;
        if (hit != NULL) {
            hit->at = (p - buf) + skip;
            hit->length = (int32_t)(n - skip);
        }
        p = stop + 1;
    }
}

/* Walk the TOTALSIZE chain with decode_columns' checks; the number of records, or -1 (not ours). */
static Py_ssize_t walk(const uint8_t *buf, Py_ssize_t size, Record *out, Py_ssize_t capacity) {
    Py_ssize_t pos = 0, count = 0;
    while (pos < size) {
        if (size - pos < FIXED_BYTES || count == capacity) return -1;
        const uint8_t *r = buf + pos;
        int32_t total = be32(r), body_length = be32(r + POS_BODY_LENGTH);
        if (be32(r + POS_MAGIC) != MAGIC || total < FIXED_BYTES || total > size - pos) return -1;
        if (body_length < 0 || (int64_t)POS_BODY + body_length + 3 > total) return -1;
        if (be32(r + POS_SYS_FLAG) & (COMPRESSED_FLAG | V6_FLAGS)) return -1;
        int32_t topic_length = r[POS_BODY + body_length];
        int64_t props_at = (int64_t)POS_BODY + body_length + 1 + topic_length;
        if (props_at + 2 > total) return -1;
        int32_t props_length = (int32_t)r[props_at] << 8 | r[props_at + 1];
        if (props_length > 0x7FFF || FIXED_BYTES + body_length + topic_length + props_length != total) return -1;
        Record *rec = &out[count++];
        rec->start = pos;
        rec->body.at = pos + POS_BODY;
        rec->body.length = body_length;
        rec->props = pos + props_at + 2;
        rec->props_length = props_length;
        scan_properties(buf, rec);
        pos += total;
    }
    return count;
}

/* An Arrow string/binary column of the Span at ``field`` of each record: int32 offsets and the data copied
 * from buf; with ``valid_out`` a validity bitmap where length -1 (absent) is null. Empty spans stay valid. */
static int strings(const uint8_t *buf, const Record *recs, Py_ssize_t n, size_t field, PyObject **offsets_out,
                   PyObject **data_out, PyObject **valid_out) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Span *s = (const Span *)((const char *)&recs[i] + field);
        if (s->length > 0) total += s->length;
    }
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    PyObject *valid = valid_out ? PyBytes_FromStringAndSize(NULL, (n + 7) / 8) : NULL;
    if (offsets == NULL || data == NULL || (valid_out && valid == NULL)) {
        Py_XDECREF(offsets), Py_XDECREF(data), Py_XDECREF(valid);
        return -1;
    }
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(data), *bits = valid ? (uint8_t *)PyBytes_AS_STRING(valid) : NULL;
    if (bits) memset(bits, 0, (size_t)((n + 7) / 8));
    int32_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Span *s = (const Span *)((const char *)&recs[i] + field);
        off[i] = at;
        if (s->length > 0) {
            memcpy(dst + at, buf + s->at, (size_t)s->length);
            at += s->length;
        }
        if (bits && s->length >= 0) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    }
    off[n] = at;
    *offsets_out = offsets, *data_out = data;
    if (valid_out) *valid_out = valid;
    return 0;
}

/* msgId: UNIQ_KEY where present, else RocketMQ's offset message id (hex of store host and physical offset). */
static int msg_ids(const uint8_t *buf, const Record *recs, Py_ssize_t n, PyObject **offsets_out, PyObject **data_out) {
    static const char hex[] = "0123456789ABCDEF";
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) total += recs[i].uniq.length > 0 ? recs[i].uniq.length : MSG_ID_CHARS;
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4), *data = PyBytes_FromStringAndSize(NULL, total);
    if (offsets == NULL || data == NULL) {
        Py_XDECREF(offsets), Py_XDECREF(data);
        return -1;
    }
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(data);
    int32_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        off[i] = at;
        if (recs[i].uniq.length > 0) {
            memcpy(dst + at, buf + recs[i].uniq.at, (size_t)recs[i].uniq.length);
            at += recs[i].uniq.length;
            continue;
        }
        const uint8_t *r = buf + recs[i].start;
        uint8_t raw[16];
        memcpy(raw, r + POS_STORE_HOST, 8); /* IPv4 address, then the port as a big-endian int */
        memcpy(raw + 8, r + POS_PHYSICAL_OFFSET, 8);
        for (int k = 0; k < 16; k++) {
            dst[at++] = (uint8_t)hex[raw[k] >> 4];
            dst[at++] = (uint8_t)hex[raw[k] & 15];
        }
    }
    off[n] = at;
    *offsets_out = offsets, *data_out = data;
    return 0;
}

static PyObject *fixed(const uint8_t *buf, const Record *recs, Py_ssize_t n, int pos, int width, int64_t scale) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * width);
    if (out == NULL) return NULL;
    char *dst = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *p = buf + recs[i].start + pos;
        if (width == 4) {
            int32_t v = be32(p);
            memcpy(dst + i * 4, &v, 4);
        } else {
            int64_t v = be64(p) * scale;
            memcpy(dst + i * 8, &v, 8);
        }
    }
    return out;
}

static PyObject *decode(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t size = view.len, capacity = size / FIXED_BYTES;
    PyObject *result = NULL;
    Record *recs = NULL;
    if (size == 0 || size >= INT32_MAX) goto not_ours;
    recs = PyMem_Malloc((size_t)capacity * sizeof(Record));
    if (recs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n;
    Py_BEGIN_ALLOW_THREADS n = walk(buf, size, recs, capacity);
    Py_END_ALLOW_THREADS if (n <= 0) goto not_ours;
    PyObject *items[15] = {NULL};
    items[0] = PyLong_FromSsize_t(n);
    items[1] = fixed(buf, recs, n, POS_QUEUE_ID, 4, 1);
    items[2] = fixed(buf, recs, n, POS_QUEUE_OFFSET, 8, 1);
    items[3] = fixed(buf, recs, n, POS_BORN_TIMESTAMP, 8, 1000); /* ms → Arrow µs */
    items[4] = fixed(buf, recs, n, POS_STORE_TIMESTAMP, 8, 1000);
    int failed = items[0] == NULL || items[1] == NULL || items[2] == NULL || items[3] == NULL || items[4] == NULL;
    failed = failed || strings(buf, recs, n, offsetof(Record, body), &items[5], &items[6], NULL) < 0;
    failed = failed || strings(buf, recs, n, offsetof(Record, keys), &items[7], &items[8], &items[9]) < 0;
    failed = failed || strings(buf, recs, n, offsetof(Record, tags), &items[10], &items[11], &items[12]) < 0;
    failed = failed || msg_ids(buf, recs, n, &items[13], &items[14]) < 0;
    if (failed) {
        for (int i = 0; i < 15; i++) Py_XDECREF(items[i]);
        goto done;
    }
    result = PyTuple_New(15);
    if (result != NULL)
        for (int i = 0; i < 15; i++) PyTuple_SET_ITEM(result, i, items[i]);
    else
        for (int i = 0; i < 15; i++) Py_XDECREF(items[i]);
    goto done;
not_ours:
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(recs);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_O,
     "decode(buffer) -> (count, queueId, queueOffset, bornTimestamp, storeTimestamp, body offsets, body data, "
     "keys offsets, keys data, keys validity, tags offsets, tags data, tags validity, msgId offsets, msgId data) "
     "as bytes (Arrow buffers), or None when the buffer is not a plain chain of uncompressed IPv4 records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_leanrecords", "The source's lean columns in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__leanrecords(void) { return PyModule_Create(&module); }
