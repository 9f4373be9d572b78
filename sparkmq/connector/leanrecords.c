/* The source's lean columns straight from a PULL body: one walk of the records (filling the fixed-width
 * columns while each head is in cache), then one pass copying the four string columns side by side.
 *
 * decode(buffer, properties=False) -> tuple of bytes (Arrow buffers, little-endian) or None; with
 * properties, the map<string,string> column's buffers follow the lean ones.
 * The reference is records_to_arrow's numpy path (sparkmq/connector/arrow.py); tests compare both.
 * None means "not for this path": an empty buffer, a record chain that does not parse exactly (the
 * numpy path then raises its precise CorruptRecordError), a compressed body, IPv6 hosts, or a KEYS,
 * TAGS or UNIQ_KEY value (or with properties, a map key or value) that is not valid UTF-8 (the numpy
 * path replaces its bad bytes with U+FFFD), or a row with more than MAX_ROW_ENTRIES properties.
 * Record layout: sparkmq/message/layout.py (v1 records, IPv4 hosts, big-endian integers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

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
    Py_ssize_t start;
    Span body, keys, tags, uniq, props;
} Record;

/* The fixed-width columns, filled by the walk while each record's head is in cache. */
typedef struct {
    int32_t *queue_ids;
    int64_t *offsets, *born, *stored;
} Fixed;

static int32_t be32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return (int32_t)__builtin_bswap32(v);
}

static int64_t be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (int64_t)__builtin_bswap64(v);
}

/* The property name\1value in [p, stop) when it is KEYS, TAGS or UNIQ_KEY: its value's span. */
static inline void property(const uint8_t *buf, const uint8_t *p, const uint8_t *stop, Record *r) {
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
}

/* The values of KEYS, TAGS and UNIQ_KEY in name\1value\2name\1value... (``length`` bytes at ``props``
 * of the ``size`` bytes of ``buf``): the last non-empty one wins. The \2 separators are found 16
 * bytes at a time where SSE2 is there (never reading past ``buf``'s end). Returns nonzero when the
 * properties hold a byte past ASCII (their values then need a UTF-8 check). */
static int scan_properties(const uint8_t *buf, Py_ssize_t size, Py_ssize_t props, int32_t length, Record *r) {
    const uint8_t *item = buf + props, *end = item + length;
    unsigned high = 0;
    r->keys.length = r->tags.length = r->uniq.length = -1;
#ifdef __SSE2__
    const __m128i twos = _mm_set1_epi8(2);
    const uint8_t *chunk = item;
    for (; chunk + 16 <= end || (chunk < end && chunk + 16 <= buf + size); chunk += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)chunk);
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, twos));
        unsigned top = (unsigned)_mm_movemask_epi8(bytes);
        if (chunk + 16 > end) {
            unsigned inside = (1u << (end - chunk)) - 1;
            mask &= inside, top &= inside;
        }
        high |= top;
        while (mask) {
            const uint8_t *stop = chunk + __builtin_ctz(mask);
            mask &= mask - 1;
            property(buf, item, stop, r);
            item = stop + 1;
        }
    }
    for (; chunk < end; chunk++) { /* the last bytes of the buffer */
        high |= *chunk & 0x80;
        if (*chunk == 2) property(buf, item, chunk, r), item = chunk + 1;
    }
#else
    for (const uint8_t *p = item; p < end; p++) high |= *p & 0x80;
    while (item < end) {
        const uint8_t *stop = memchr(item, 2, (size_t)(end - item));
        if (stop == NULL) break;
        property(buf, item, stop, r);
        item = stop + 1;
    }
#endif
    if (item < end) property(buf, item, end, r);
    return high != 0;
}

/* Walk the TOTALSIZE chain with decode_columns' checks, filling ``out`` and ``fixed`` (and setting
 * ``non_ascii`` when a record's properties hold a byte past ASCII); the number of records, or -1 (not ours). */
static Py_ssize_t walk(const uint8_t *buf, Py_ssize_t size, Record *out, Py_ssize_t capacity, const Fixed *fixed,
                       int *non_ascii) {
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
        fixed->queue_ids[count] = be32(r + POS_QUEUE_ID);
        fixed->offsets[count] = be64(r + POS_QUEUE_OFFSET);
        /* ms → Arrow µs, wrapping as numpy's int64 product does (a damaged stamp must not be UB) */
        fixed->born[count] = (int64_t)((uint64_t)be64(r + POS_BORN_TIMESTAMP) * 1000u);
        fixed->stored[count] = (int64_t)((uint64_t)be64(r + POS_STORE_TIMESTAMP) * 1000u);
        Record *rec = &out[count++];
        rec->start = pos;
        rec->body.at = pos + POS_BODY;
        rec->body.length = body_length;
        rec->props.at = pos + props_at + 2;
        rec->props.length = props_length;
        *non_ascii |= scan_properties(buf, size, pos + props_at + 2, props_length, rec);
        pos += total;
    }
    return count;
}

/* An Arrow string/binary column under construction: int32 offsets, the data, an optional validity bitmap. */
typedef struct {
    PyObject *offsets, *data, *valid;
    int32_t *off;
    uint8_t *dst, *bits;
    int32_t at;
} Column;

#define SHORT_VALUE 32 /* values up to this long are copied as a fixed 32 bytes (the data has that slack) */

static int column_new(Column *c, Py_ssize_t n, Py_ssize_t data_bytes, int with_validity) {
    c->offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    c->data = PyBytes_FromStringAndSize(NULL, data_bytes + SHORT_VALUE);
    c->valid = with_validity ? PyBytes_FromStringAndSize(NULL, (n + 7) / 8) : NULL;
    if (c->offsets == NULL || c->data == NULL || (with_validity && c->valid == NULL)) return -1;
    c->off = (int32_t *)PyBytes_AS_STRING(c->offsets);
    c->dst = (uint8_t *)PyBytes_AS_STRING(c->data);
    c->bits = c->valid ? (uint8_t *)PyBytes_AS_STRING(c->valid) : NULL;
    if (c->bits) memset(c->bits, 0, (size_t)((n + 7) / 8));
    c->at = 0;
    return 0;
}

/* Row ``i``'s value: the span's bytes of ``buf`` (``size`` bytes; null when absent and the column
 * has validity). A short value is copied as a fixed SHORT_VALUE bytes (no call) where ``buf`` has them:
 * the bytes past it land in the slack and are overwritten by the next value. */
static inline void column_put(Column *c, Py_ssize_t i, const uint8_t *buf, Py_ssize_t size, const Span *s) {
    c->off[i] = c->at;
    if (s->length > 0) {
        if (s->length <= SHORT_VALUE && s->at + SHORT_VALUE <= size)
            memcpy(c->dst + c->at, buf + s->at, SHORT_VALUE);
        else
            memcpy(c->dst + c->at, buf + s->at, (size_t)s->length);
        c->at += s->length;
    }
    if (c->bits && s->length >= 0) c->bits[i >> 3] |= (uint8_t)(1u << (i & 7));
}

/* msgId of row ``i`` without UNIQ_KEY: RocketMQ's offset message id (hex of store host and physical offset). */
static inline void column_put_offset_id(Column *c, Py_ssize_t i, const uint8_t *record) {
    static const char hex[] = "0123456789ABCDEF";
    uint8_t raw[16];
    memcpy(raw, record + POS_STORE_HOST, 8); /* IPv4 address, then the port as a big-endian int */
    memcpy(raw + 8, record + POS_PHYSICAL_OFFSET, 8);
    c->off[i] = c->at;
    for (int k = 0; k < 16; k++) {
        c->dst[c->at++] = (uint8_t)hex[raw[k] >> 4];
        c->dst[c->at++] = (uint8_t)hex[raw[k] & 15];
    }
}

/* Whether each of the ``n`` values of ``c`` is valid UTF-8 (as Arrow's full validation of a string
 * column judges: no overlong forms, surrogates or code points past U+10FFFF), value by value. */
static int column_utf8(const Column *c, Py_ssize_t n) {
    for (Py_ssize_t v = 0; v < n; v++) {
        const uint8_t *s = c->dst + c->off[v], *end = c->dst + c->off[v + 1];
        while (s < end) {
            uint64_t word;
            if (end - s >= 8 && (memcpy(&word, s, 8), !(word & 0x8080808080808080ULL))) {
                s += 8; /* eight ASCII bytes */
                continue;
            }
            uint8_t lead = *s;
            if (lead < 0x80) {
                s++;
                continue;
            }
            int length;
            uint32_t point;
            if (lead >= 0xC2 && lead <= 0xDF) length = 2, point = lead & 0x1F;
            else if (lead >= 0xE0 && lead <= 0xEF) length = 3, point = lead & 0x0F;
            else if (lead >= 0xF0 && lead <= 0xF4) length = 4, point = lead & 0x07;
            else return 0;
            if (end - s < length) return 0;
            for (int k = 1; k < length; k++) {
                if ((s[k] & 0xC0) != 0x80) return 0;
                point = point << 6 | (s[k] & 0x3F);
            }
            if (length == 3 && (point < 0x800 || (point >= 0xD800 && point <= 0xDFFF))) return 0;
            if (length == 4 && (point < 0x10000 || point > 0x10FFFF)) return 0;
            s += length;
        }
    }
    return 1;
}

/* body, keys, tags and msgId (UNIQ_KEY where present, else the offset message id) in one pass over
 * the records; 1 with items[5..14] as decode returns them, 0 when a property value is not valid UTF-8
 * (not for this path: checked only when ``non_ascii``, the walk having seen a byte past ASCII), or -1 (an error set); nothing is left to release unless 1. */
static int string_columns(const uint8_t *buf, Py_ssize_t size, const Record *recs, Py_ssize_t n, int non_ascii,
                          PyObject **items) {
    Py_ssize_t totals[4] = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        totals[0] += recs[i].body.length;
        totals[1] += recs[i].keys.length > 0 ? recs[i].keys.length : 0;
        totals[2] += recs[i].tags.length > 0 ? recs[i].tags.length : 0;
        totals[3] += recs[i].uniq.length > 0 ? recs[i].uniq.length : MSG_ID_CHARS;
    }
    Column body = {0}, keys = {0}, tags = {0}, ids = {0};
    if (column_new(&body, n, totals[0], 0) < 0 || column_new(&keys, n, totals[1], 1) < 0 ||
        column_new(&tags, n, totals[2], 1) < 0 || column_new(&ids, n, totals[3], 0) < 0) {
        Column *all[4] = {&body, &keys, &tags, &ids};
        for (int k = 0; k < 4; k++) Py_XDECREF(all[k]->offsets), Py_XDECREF(all[k]->data), Py_XDECREF(all[k]->valid);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const Record *r = &recs[i];
        column_put(&body, i, buf, size, &r->body);
        column_put(&keys, i, buf, size, &r->keys);
        column_put(&tags, i, buf, size, &r->tags);
        if (r->uniq.length > 0) column_put(&ids, i, buf, size, &r->uniq);
        else column_put_offset_id(&ids, i, buf + r->start);
    }
    body.off[n] = body.at, keys.off[n] = keys.at, tags.off[n] = tags.at, ids.off[n] = ids.at;
    Column *all[4] = {&body, &keys, &tags, &ids};
    int valid = !non_ascii || (column_utf8(&keys, n) && column_utf8(&tags, n) && column_utf8(&ids, n));
    for (int k = 0; k < 4; k++)
        if (!valid || _PyBytes_Resize(&all[k]->data, all[k]->at) < 0) { /* drops the slack; frees data on failure */
            for (int j = 0; j < 4; j++) Py_XDECREF(all[j]->offsets), Py_XDECREF(all[j]->data), Py_XDECREF(all[j]->valid);
            return valid ? -1 : 0;
        }
    PyObject *out[10] = {body.offsets, body.data, keys.offsets, keys.data, keys.valid,
                         tags.offsets, tags.data, tags.valid,  ids.offsets,  ids.data};
    memcpy(items + 5, out, sizeof(out));
    return 1;
}

#define MAX_ROW_ENTRIES 64 /* a row with more properties is left to the numpy path (its de-duplication is quadratic) */

typedef struct {
    Span key, value;
} Entry;

/* Row ``r``'s map entries (name\1value items of its properties, split at the first \1; an item without
 * \1 or with an empty name or value is no entry) into ``entries``, each name kept at its last
 * occurrence only, as the numpy path keeps them; the count, or -1 past MAX_ROW_ENTRIES. */
static int row_entries(const uint8_t *buf, const Record *r, Entry *entries) {
    const uint8_t *item = buf + r->props.at, *end = item + r->props.length;
    int count = 0;
    while (item < end) {
        const uint8_t *stop = memchr(item, 2, (size_t)(end - item));
        if (stop == NULL) stop = end;
        const uint8_t *split = memchr(item, 1, (size_t)(stop - item));
        if (split != NULL && split > item && split + 1 < stop) {
            if (count == MAX_ROW_ENTRIES) return -1;
            entries[count].key = (Span){item - buf, (int32_t)(split - item)};
            entries[count].value = (Span){split + 1 - buf, (int32_t)(stop - split - 1)};
            count++;
        }
        item = stop + 1;
    }
    int kept = 0;
    for (int i = 0; i < count; i++) {
        int repeated = 0;
        for (int j = i + 1; j < count && !repeated; j++)
            repeated = entries[j].key.length == entries[i].key.length &&
                       memcmp(buf + entries[j].key.at, buf + entries[i].key.at, (size_t)entries[i].key.length) == 0;
        if (!repeated) entries[kept++] = entries[i];
    }
    return kept;
}

/* The properties map column (map<string,string>: row offsets, then the keys' and the values' offsets and
 * data) into items[0..4]; 1, 0 when not for this path (a key or value not valid UTF-8, checked only when
 * ``non_ascii``, or a row past MAX_ROW_ENTRIES), or -1 (an error set); nothing is left to release unless 1. */
static int map_columns(const uint8_t *buf, Py_ssize_t size, const Record *recs, Py_ssize_t n, int non_ascii,
                       PyObject **items) {
    Py_ssize_t bytes = 0, bound = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        bytes += recs[i].props.length;
        bound += (recs[i].props.length + 1) / 4; /* an entry takes at least a\1b and a separator */
    }
    PyObject *rows = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    Column keys = {0}, values = {0};
    Entry entries[MAX_ROW_ENTRIES];
    int made = -1;
    if (rows == NULL || column_new(&keys, bound, bytes, 0) < 0 || column_new(&values, bound, bytes, 0) < 0) goto fail;
    int32_t *row_at = (int32_t *)PyBytes_AS_STRING(rows);
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        row_at[i] = (int32_t)m;
        int count = row_entries(buf, &recs[i], entries);
        if (count < 0) {
            made = 0;
            goto fail;
        }
        for (int k = 0; k < count; k++, m++) {
            column_put(&keys, m, buf, size, &entries[k].key);
            column_put(&values, m, buf, size, &entries[k].value);
        }
    }
    row_at[n] = (int32_t)m;
    keys.off[m] = keys.at, values.off[m] = values.at;
    if (non_ascii && !(column_utf8(&keys, m) && column_utf8(&values, m))) {
        made = 0;
        goto fail;
    }
    if (_PyBytes_Resize(&keys.offsets, (m + 1) * 4) < 0 || _PyBytes_Resize(&keys.data, keys.at) < 0 ||
        _PyBytes_Resize(&values.offsets, (m + 1) * 4) < 0 || _PyBytes_Resize(&values.data, values.at) < 0)
        goto fail; /* a failed resize frees its object and sets it to NULL */
    PyObject *out[5] = {rows, keys.offsets, keys.data, values.offsets, values.data};
    memcpy(items, out, sizeof(out));
    return 1;
fail:
    Py_XDECREF(rows);
    Py_XDECREF(keys.offsets), Py_XDECREF(keys.data), Py_XDECREF(values.offsets), Py_XDECREF(values.data);
    return made;
}

#define LEAN_ITEMS 15
#define MAP_ITEMS 5

static PyObject *decode(PyObject *module, PyObject *args) {
    PyObject *arg;
    int with_properties = 0;
    if (!PyArg_ParseTuple(args, "O|p:decode", &arg, &with_properties)) return NULL;

    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t size = view.len, capacity = size / FIXED_BYTES;
    PyObject *result = NULL, *items[LEAN_ITEMS + MAP_ITEMS] = {NULL};
    int total = with_properties ? LEAN_ITEMS + MAP_ITEMS : LEAN_ITEMS;
    Record *recs = NULL;
    if (size == 0 || size >= INT32_MAX) goto not_ours;
    recs = PyMem_Malloc((size_t)capacity * sizeof(Record));
    items[1] = PyBytes_FromStringAndSize(NULL, capacity * 4);
    for (int k = 2; k <= 4; k++) items[k] = PyBytes_FromStringAndSize(NULL, capacity * 8);
    if (recs == NULL || items[1] == NULL || items[2] == NULL || items[3] == NULL || items[4] == NULL) {
        if (recs == NULL) PyErr_NoMemory();
        goto done;
    }
    Fixed fixed = {(int32_t *)PyBytes_AS_STRING(items[1]), (int64_t *)PyBytes_AS_STRING(items[2]),
                   (int64_t *)PyBytes_AS_STRING(items[3]), (int64_t *)PyBytes_AS_STRING(items[4])};
    Py_ssize_t n;
    int non_ascii = 0;
    Py_BEGIN_ALLOW_THREADS n = walk(buf, size, recs, capacity, &fixed, &non_ascii);
    Py_END_ALLOW_THREADS if (n <= 0) goto not_ours;
    if ((items[0] = PyLong_FromSsize_t(n)) == NULL || _PyBytes_Resize(&items[1], n * 4) < 0) goto done;
    for (int k = 2; k <= 4; k++)
        if (_PyBytes_Resize(&items[k], n * 8) < 0) goto done;
    int strings_made = string_columns(buf, size, recs, n, non_ascii, items);
    if (strings_made < 0) goto done;
    if (strings_made == 0) goto not_ours;
    if (with_properties) {
        int map_made = map_columns(buf, size, recs, n, non_ascii, items + LEAN_ITEMS);
        if (map_made < 0) goto done;
        if (map_made == 0) goto not_ours;
    }
    if ((result = PyTuple_New(total)) == NULL) goto done;
    for (int i = 0; i < total; i++) PyTuple_SET_ITEM(result, i, items[i]), items[i] = NULL;
    goto done;
not_ours:
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < LEAN_ITEMS + MAP_ITEMS; i++) Py_XDECREF(items[i]);
    PyMem_Free(recs);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(buffer, properties=False) -> (count, queueId, queueOffset, bornTimestamp, storeTimestamp, body offsets, "
     "body data, keys offsets, keys data, keys validity, tags offsets, tags data, tags validity, msgId offsets, "
     "msgId data[, map offsets, map keys offsets, map keys data, map values offsets, map values data]) as bytes "
     "(Arrow buffers), or None when the buffer is not a plain chain of uncompressed IPv4 records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_leanrecords", "The source's lean columns in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__leanrecords(void) { return PyModule_Create(&module); }
