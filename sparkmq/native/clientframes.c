/* A producer's per-send frame work over buffers and values: a SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request frame
 * rendered from a topic's fixed header text, and a read's run of plain JSON response frames split into Answers.
 *
 * References (sparkmq/client/send_frames.py SendTemplate.frame, sparkmq/remoting/client_connection.py's loop over
 * its msgspec decode): render returns the same bytes or None (an int outside int64, a frame over the maximum:
 * Python renders it); answers returns, for the leading run of whole frames whose header has the plain shape in its
 * strictest form (compact ASCII JSON without escapes, only PlainHeader's keys and serializeTypeCurrentRPC, each
 * once, int32 numbers, the flag's response bit set), the fields that decode gives (a LeanResponse: PlainHeader's,
 * and a send answer's msg_id and queue_offset); it stops at the first frame it does not take, which the Python path
 * then reads, decodes or rejects as before. tests/native/test_client_frames.py compares both under hypothesis, on
 * good and damaged input. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* --- render ------------------------------------------------------------------------------------------------ */

typedef struct {
    char *p;
} out_t;

static void put(out_t *o, const char *s, size_t n) {
    memcpy(o->p, s, n);
    o->p += n;
}

#define PUT_LITERAL(o, s) put((o), (s), sizeof(s) - 1)

static const char digit_pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                  "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                  "8081828384858687888990919293949596979899";

static void put_int(out_t *o, long long v) {
    char digits[24];
    char *d = digits + sizeof(digits);
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    while (u >= 100) { /* two digits a step */
        unsigned pair = (unsigned)(u % 100) * 2;
        u /= 100;
        *--d = digit_pairs[pair + 1];
        *--d = digit_pairs[pair];
    }
    if (u >= 10) {
        *--d = digit_pairs[u * 2 + 1];
        *--d = digit_pairs[u * 2];
    } else {
        *--d = (char)('0' + u);
    }
    if (v < 0)
        *o->p++ = '-';
    size_t n = (size_t)(digits + sizeof(digits) - d);
    memcpy(o->p, d, n);
    o->p += n;
}

/* The characters put_int writes for v. */
static Py_ssize_t int_chars(long long v) {
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    Py_ssize_t n = v < 0 ? 2 : 1;
    while (u >= 10) {
        u /= 10;
        n++;
    }
    return n;
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* An int argument as long long; 0 with no error set for what Python renders itself (a bool, not an int, an int
 * outside int64: the caller returns None). */
static int as_int64(PyObject *value, long long *out) {
    if (!PyLong_Check(value) || PyBool_Check(value))
        return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    return overflow ? 0 : 1;
}

#define MAX_FRAME_BYTES (16 * 1024 * 1024) /* sparkmq.protocol.codes.MAX_FRAME_BYTES */

/* render(code, flag, opaque, fields, queue_id, sys_flag, born_ms, message_flag, properties_json, id_head, id_tail,
 *        batch, body) -> bytes | None (None also for a frame over MAX_FRAME_BYTES)
 * id_tail >= 0: properties_json is the JSON string's text up to a unique id, whose text is id_head's then id_tail's
 * four hex digits (at most 0xFFFF), followed by the closing quote. */
static PyObject *render(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError,
                        "render(code, flag, opaque, fields, queue_id, sys_flag, born_ms, message_flag, "
                        "properties_json, id_head, id_tail, batch, body)");
        return NULL;
    }
    static const int int_args[] = {0, 1, 2, 4, 5, 6, 7, 10};
    long long ints[11] = {0};
    for (size_t i = 0; i < sizeof(int_args) / sizeof(int_args[0]); i++) {
        int ok = as_int64(args[int_args[i]], &ints[int_args[i]]);
        if (ok < 0)
            return NULL;
        if (ok == 0)
            Py_RETURN_NONE;
    }
    PyObject *fields = args[3], *properties = args[8];
    if (!PyBytes_Check(fields) || !PyUnicode_Check(properties)) {
        PyErr_SetString(PyExc_TypeError, "render: fields must be bytes and properties_json a str");
        return NULL;
    }
    if (ints[10] > 0xFFFF)
        Py_RETURN_NONE; /* more than four digits: Python's */
    if (!PyUnicode_Check(args[9])) {
        PyErr_SetString(PyExc_TypeError, "render: id_head must be a str");
        return NULL;
    }
    Py_ssize_t head_len = 0;
    const char *head = "";
    if (ints[10] >= 0) {
        head = PyUnicode_AsUTF8AndSize(args[9], &head_len);
        if (head == NULL)
            return NULL;
    }
    int batch = PyObject_IsTrue(args[11]);
    if (batch < 0)
        return NULL;
    Py_ssize_t props_len;
    const char *props = PyUnicode_AsUTF8AndSize(properties, &props_len);
    if (props == NULL)
        return NULL; /* a lone surrogate: UnicodeEncodeError, as str.encode raises it */
    Py_buffer body;
    if (PyObject_GetBuffer(args[12], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    static const char head0[] = "{\"code\":", head1[] = ",\"flag\":", head2[] = ",\"language\":\"JAVA\",\"opaque\":",
                      mid0[] = "\",\"f\":\"", mid1[] = "\",\"g\":\"", mid2[] = "\",\"h\":\"", mid3[] = "\",\"i\":",
                      tail_false[] = ",\"j\":\"0\",\"k\":\"false\",\"m\":\"false\"}}",
                      tail_true[] = ",\"j\":\"0\",\"k\":\"false\",\"m\":\"true\"}}";
    Py_ssize_t fields_len = PyBytes_GET_SIZE(fields);
    /* the header's exact length (one allocation, no resize): the texts, the seven ints' characters, the id's */
    Py_ssize_t fixed = (Py_ssize_t)(sizeof(head0) + sizeof(head1) + sizeof(head2) + sizeof(mid0) + sizeof(mid1) +
                                    sizeof(mid2) + sizeof(mid3) + (batch ? sizeof(tail_true) : sizeof(tail_false)) -
                                    8) +
                       (ints[10] >= 0 ? 5 : 0);
    static const int rendered[] = {0, 1, 2, 4, 5, 6, 7};
    for (size_t i = 0; i < sizeof(rendered) / sizeof(rendered[0]); i++)
        fixed += int_chars(ints[rendered[i]]);
    PyObject *frame = NULL;
    if (fields_len > PY_SSIZE_T_MAX / 5 - fixed || props_len > PY_SSIZE_T_MAX / 5 - fixed ||
        head_len > PY_SSIZE_T_MAX / 5 - fixed || body.len > PY_SSIZE_T_MAX / 5 - fixed) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t header_len = fixed + fields_len + props_len + (ints[10] >= 0 ? head_len : 0);
    if (8 + header_len + body.len > MAX_FRAME_BYTES) {
        Py_INCREF(Py_None);
        frame = Py_None; /* over the protocol's maximum: Python renders it and refuses it by size */
        goto done;
    }
    /* the header is written after the 8 prefix bytes, then the body after it */
    frame = PyBytes_FromStringAndSize(NULL, 8 + header_len + body.len);
    if (frame == NULL)
        goto done;
    char *start = PyBytes_AS_STRING(frame);
    out_t o = {start + 8};
    PUT_LITERAL(&o, head0);
    put_int(&o, ints[0]);
    PUT_LITERAL(&o, head1);
    put_int(&o, ints[1]);
    PUT_LITERAL(&o, head2);
    put_int(&o, ints[2]);
    put(&o, PyBytes_AS_STRING(fields), (size_t)fields_len);
    put_int(&o, ints[4]);
    PUT_LITERAL(&o, mid0);
    put_int(&o, ints[5]);
    PUT_LITERAL(&o, mid1);
    put_int(&o, ints[6]);
    PUT_LITERAL(&o, mid2);
    put_int(&o, ints[7]);
    PUT_LITERAL(&o, mid3);
    put(&o, props, (size_t)props_len);
    if (ints[10] >= 0) {
        static const char hex[] = "0123456789ABCDEF";
        put(&o, head, (size_t)head_len);
        for (int shift = 12; shift >= 0; shift -= 4)
            *o.p++ = hex[(ints[10] >> shift) & 0xF];
        *o.p++ = '"';
    }
    if (batch)
        PUT_LITERAL(&o, tail_true);
    else
        PUT_LITERAL(&o, tail_false);
    if (body.len)
        memcpy(o.p, body.buf, (size_t)body.len);
    put_be32((unsigned char *)start, (uint32_t)(4 + header_len + body.len));
    put_be32((unsigned char *)start + 4, (uint32_t)header_len);
done:
    PyBuffer_Release(&body);
    return frame;
}

/* --- answers ------------------------------------------------------------------------------------------------ */

#define RESPONSE_FLAG 1 /* the flag's response bit (sparkmq.protocol.RESPONSE_FLAG) */

enum { F_CODE = 1, F_OPAQUE = 2, F_FLAG = 4, F_VERSION = 8, F_LANGUAGE = 16, F_REMARK = 32, F_EXT = 64, F_SER = 128 };

typedef struct {
    const unsigned char *p, *end;
} scan_t;

static int expect(scan_t *s, unsigned char c) {
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

/* The bytes a plain string's text may hold: printable ASCII but the quote and the backslash. */
static unsigned char text_byte[256];

static void init_text_bytes(void) {
    for (int c = 0x20; c <= 0x7e; c++)
        text_byte[c] = c != '"' && c != '\\';
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The eight bytes at c with the high bit of each byte that is not a text byte set: below 0x20, above 0x7e, a
 * backslash or a quote (the "has less / has more / has zero byte" word tests). A test may also flag a byte above
 * one it flags rightly, never one below: the lowest flag is the first such byte. */
static uint64_t odd8(const unsigned char *c) {
    uint64_t w, backslash, quote;
    memcpy(&w, c, 8);
    backslash = w ^ (ONES * '\\');
    quote = w ^ (ONES * '"');
    return (((w - ONES * 0x20) & ~w) | ((w + ONES) | w) | ((backslash - ONES) & ~backslash) |
            ((quote - ONES) & ~quote)) &
           HIGHS;
}

/* A string without escapes or control or non-ASCII bytes: its text's bounds, or 0. Its text runs to the first byte
 * that is not a text byte, which must be its closing quote: found eight bytes at a time (on a little-endian machine,
 * the lowest flag of odd8 is the first byte in memory) while eight are left before the end, then byte by byte. */
static int plain_string(scan_t *s, const unsigned char **text, Py_ssize_t *len) {
    if (!expect(s, '"'))
        return 0;
    const unsigned char *from = s->p, *c = from, *end = s->end;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (end - c >= 8) {
        uint64_t odd = odd8(c);
        if (odd) {
            c += __builtin_ctzll(odd) >> 3;
            goto stop;
        }
        c += 8;
    }
#endif
    while (c < end && text_byte[*c])
        c++;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
stop:
#endif
    if (c == end || *c != '"')
        return 0;
    *text = from;
    *len = c - from;
    s->p = c + 1;
    return 1;
}

/* A JSON integer without leading zeros, fraction or exponent, within int32, or 0. */
static int int32_number(scan_t *s, long *out) {
    int negative = expect(s, '-');
    const unsigned char *from = s->p;
    long long v = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        v = v * 10 + (*s->p - '0');
        s->p++;
        if (s->p - from > 10)
            return 0;
    }
    Py_ssize_t digits = s->p - from;
    if (digits == 0 || (digits > 1 && *from == '0'))
        return 0;
    if (negative)
        v = -v;
    if (v < INT32_MIN || v > INT32_MAX)
        return 0;
    *out = (long)v;
    return 1;
}

/* Short strings seen before (the answers' keys, "JAVA", "DefaultRegion", queue ids...) are shared, not made anew:
 * a direct-mapped table by a hash of the text; a str is immutable, so a hit is the same value. */
#define CACHE_SLOTS 64
#define CACHE_MAX_CHARS 24
static PyObject *str_cache[CACHE_SLOTS];

/* A str of text that plain_string proved printable ASCII: no decoder's checks. */
static PyObject *new_ascii(const unsigned char *text, Py_ssize_t len) {
    PyObject *str = PyUnicode_New(len, 127);
    if (str != NULL)
        memcpy(PyUnicode_1BYTE_DATA(str), text, (size_t)len);
    return str;
}

/* The text's first and last eight bytes (zero-padded below eight): for up to 16 bytes they hold the whole text. */
static void ends8(const unsigned char *text, Py_ssize_t len, uint64_t *first, uint64_t *last) {
    *first = *last = 0;
    if (len >= 8) {
        memcpy(first, text, 8);
        memcpy(last, text + len - 8, 8);
    } else {
        memcpy(first, text, (size_t)len);
    }
}

static PyObject *ascii_str(const unsigned char *text, Py_ssize_t len) {
    if (len > CACHE_MAX_CHARS)
        return new_ascii(text, len);
    uint64_t first, last;
    ends8(text, len, &first, &last);
    uint64_t hash = (first * 0x9E3779B97F4A7C15ULL) ^ (last * 0xC2B2AE3D27D4EB4FULL) ^ (uint64_t)len;
    PyObject **slot = &str_cache[(hash ^ (hash >> 29) ^ (hash >> 47)) % CACHE_SLOTS];
    PyObject *hit = *slot;
    if (hit != NULL && PyUnicode_GET_LENGTH(hit) == len) {
        const unsigned char *cached = PyUnicode_1BYTE_DATA(hit);
        uint64_t hit_first, hit_last;
        ends8(cached, len, &hit_first, &hit_last);
        if (hit_first == first && hit_last == last && (len <= 16 || memcmp(cached, text, (size_t)len) == 0)) {
            Py_INCREF(hit);
            return hit;
        }
    }
    PyObject *made = new_ascii(text, len);
    if (made != NULL) {
        Py_INCREF(made);
        Py_XSETREF(*slot, made);
    }
    return made;
}

/* The extFields object of plain strings as a dict (a repeated key keeps its last value), NULL with no error set
 * when it is not of that shape. */
static PyObject *string_map(scan_t *s) {
    if (!expect(s, '{'))
        return NULL;
    PyObject *map = PyDict_New();
    if (map == NULL)
        return NULL;
    if (expect(s, '}'))
        return map;
    do {
        const unsigned char *k, *v;
        Py_ssize_t kn, vn;
        if (!plain_string(s, &k, &kn) || !expect(s, ':') || !plain_string(s, &v, &vn))
            goto not_plain;
        PyObject *key = ascii_str(k, kn);
        if (key == NULL)
            goto not_plain;
        PyObject *value = ascii_str(v, vn);
        if (value == NULL) {
            Py_DECREF(key);
            goto not_plain;
        }
        int set = PyDict_SetItem(map, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (set < 0)
            goto not_plain;
    } while (expect(s, ','));
    if (expect(s, '}'))
        return map;
not_plain: /* or failed: the caller tells them apart by the error set */
    Py_DECREF(map);
    return NULL;
}

/* A span of the header's text: a string's value, or the extFields object. */
typedef struct {
    const unsigned char *text;
    Py_ssize_t length;
} span_t;

/* The extFields object checked to be of plain strings (string_map's shape) without building it: its span, and the
 * values of the keys a send answer needs (msgId, queueOffset; the last of a repeated key, as the dict keeps it;
 * length -1 when absent). 0 when it is not of that shape. */
static int scan_map(scan_t *s, span_t *map, span_t *msg_id, span_t *queue_offset) {
    map->text = s->p;
    msg_id->length = queue_offset->length = -1;
    if (!expect(s, '{'))
        return 0;
    if (!expect(s, '}')) {
        do {
            const unsigned char *k, *v;
            Py_ssize_t kn, vn;
            if (!plain_string(s, &k, &kn) || !expect(s, ':') || !plain_string(s, &v, &vn))
                return 0;
            span_t *wanted = kn == 5 && memcmp(k, "msgId", 5) == 0         ? msg_id
                             : kn == 11 && memcmp(k, "queueOffset", 11) == 0 ? queue_offset
                                                                             : NULL;
            if (wanted != NULL) {
                wanted->text = v;
                wanted->length = vn;
            }
        } while (expect(s, ','));
        if (!expect(s, '}'))
            return 0;
    }
    map->length = s->p - map->text;
    return 1;
}

/* The field a header key names (0: none of PlainHeader's keys nor serializeTypeCurrentRPC): by its length, then
 * a comparison of constant size. */
#define IS_KEY(text) (memcmp(key, text, sizeof(text) - 1) == 0)
static unsigned header_field(const unsigned char *key, Py_ssize_t n) {
    switch (n) {
    case 4:
        return IS_KEY("code") ? F_CODE : IS_KEY("flag") ? F_FLAG : 0;
    case 6:
        return IS_KEY("opaque") ? F_OPAQUE : IS_KEY("remark") ? F_REMARK : 0;
    case 7:
        return IS_KEY("version") ? F_VERSION : 0;
    case 8:
        return IS_KEY("language") ? F_LANGUAGE : 0;
    case 9:
        return IS_KEY("extFields") ? F_EXT : 0;
    case 23:
        return IS_KEY("serializeTypeCurrentRPC") ? F_SER : 0;
    default:
        return 0;
    }
}

/* The version number of the last answer (a broker gives the same in all): shared rather than made anew. */
static PyObject *last_version;

static PyObject *version_int(long version) {
    if (last_version == NULL || PyLong_AsLong(last_version) != version) {
        PyObject *made = PyLong_FromLong(version);
        if (made == NULL)
            return NULL;
        Py_XSETREF(last_version, made);
    }
    Py_INCREF(last_version);
    return last_version;
}

/* An answer's fields by PlainHeader's names and in its order: what a waiter reads of a PlainHeader, made without a
 * tuple and a PlainHeader per answer. Its members are read as an instance's slots are (T_OBJECT_EX: the
 * interpreter's specialised attribute read, which a struct sequence's T_OBJECT members do not get); a sequence of
 * its seven fields too. A send answer's two extFields values are members of their own (msg_id, queue_offset: the
 * str, or None when absent), and the ext_fields dict is built when first read, from the extFields text (a span of
 * the read's bytes, which the answer holds till then): a SUCCESS answer is read without it. Not tracked by the GC:
 * it holds ints, strs, None, bytes and a dict of strs, never a cycle. */
#define ANSWER_FIELDS 7
#define EXT_FIELDS 6
typedef struct {
    PyObject_HEAD PyObject *fields[ANSWER_FIELDS]; /* fields[EXT_FIELDS] NULL: not built yet, from ext_owner */
    PyObject *msg_id, *queue_offset;
    PyObject *ext_owner; /* the bytes holding the extFields text, until the dict is built */
    Py_ssize_t ext_start, ext_length;
} answer_t;

static void answer_dealloc(PyObject *self) {
    answer_t *answer = (answer_t *)self;
    for (int i = 0; i < ANSWER_FIELDS; i++)
        Py_XDECREF(answer->fields[i]);
    Py_XDECREF(answer->msg_id);
    Py_XDECREF(answer->queue_offset);
    Py_XDECREF(answer->ext_owner);
    PyObject_Free(self);
}

/* The ext_fields dict, built from the extFields text on first read (then the text's bytes are let go). */
static PyObject *answer_ext_fields(PyObject *self, void *closure) {
    (void)closure;
    answer_t *answer = (answer_t *)self;
    if (answer->fields[EXT_FIELDS] == NULL) {
        const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(answer->ext_owner) + answer->ext_start;
        scan_t s = {text, text + answer->ext_length};
        PyObject *map = string_map(&s);
        if (map == NULL) {
            if (!PyErr_Occurred()) /* the text was checked when the answer was made: never so */
                PyErr_SetString(PyExc_SystemError, "Answer: extFields text is not of the plain shape");
            return NULL;
        }
        answer->fields[EXT_FIELDS] = map;
        Py_CLEAR(answer->ext_owner);
    }
    Py_INCREF(answer->fields[EXT_FIELDS]);
    return answer->fields[EXT_FIELDS];
}

static Py_ssize_t answer_length(PyObject *self) {
    (void)self;
    return ANSWER_FIELDS;
}

static PyObject *answer_item(PyObject *self, Py_ssize_t i) {
    if (i < 0 || i >= ANSWER_FIELDS) {
        PyErr_SetString(PyExc_IndexError, "Answer index out of range");
        return NULL;
    }
    if (i == EXT_FIELDS)
        return answer_ext_fields(self, NULL);
    PyObject *field = ((answer_t *)self)->fields[i];
    Py_INCREF(field);
    return field;
}

static PyObject *answer_repr(PyObject *self) {
    PyObject **f = ((answer_t *)self)->fields, *ext = answer_ext_fields(self, NULL);
    if (ext == NULL)
        return NULL;
    PyObject *repr = PyUnicode_FromFormat("Answer(code=%R, opaque=%R, flag=%R, version=%R, language=%R, remark=%R, "
                                          "ext_fields=%R)",
                                          f[0], f[1], f[2], f[3], f[4], f[5], ext);
    Py_DECREF(ext);
    return repr;
}

/* Equal when every field is (== and != only; unhashable, as its ext_fields dict). */
static PyObject *answer_compare(PyObject *self, PyObject *other, int op) {
    if (Py_TYPE(other) != Py_TYPE(self) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    int equal = 1;
    for (int i = 0; i < ANSWER_FIELDS && equal == 1; i++) {
        PyObject *mine = answer_item(self, i), *theirs = answer_item(other, i);
        equal = mine == NULL || theirs == NULL ? -1 : PyObject_RichCompareBool(mine, theirs, Py_EQ);
        Py_XDECREF(mine);
        Py_XDECREF(theirs);
    }
    if (equal < 0)
        return NULL;
    return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

#define ANSWER_MEMBER(name, i)                                                                                         \
    {name, T_OBJECT_EX, offsetof(answer_t, fields) + (i) * sizeof(PyObject *), READONLY, NULL}
static PyMemberDef answer_members[] = {
    ANSWER_MEMBER("code", 0),
    ANSWER_MEMBER("opaque", 1),
    ANSWER_MEMBER("flag", 2),
    ANSWER_MEMBER("version", 3),
    ANSWER_MEMBER("language", 4),
    ANSWER_MEMBER("remark", 5),
    {"msg_id", T_OBJECT_EX, offsetof(answer_t, msg_id), READONLY, NULL},
    {"queue_offset", T_OBJECT_EX, offsetof(answer_t, queue_offset), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef answer_getset[] = {
    {"ext_fields", answer_ext_fields, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods answer_sequence = {.sq_length = answer_length, .sq_item = answer_item};

static PyTypeObject answer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.native._clientframes.Answer",
    .tp_basicsize = sizeof(answer_t),
    .tp_dealloc = answer_dealloc,
    .tp_repr = answer_repr,
    .tp_as_sequence = &answer_sequence,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_richcompare = answer_compare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A plain answer's header fields, as PlainHeader names them (read-only)",
    .tp_members = answer_members,
    .tp_getset = answer_getset,
};

/* A value's str, or None for a span of length -1 (absent). */
static PyObject *value_or_none(span_t value) {
    if (value.length < 0) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    return new_ascii(value.text, value.length);
}

/* One answer's header of the plain shape as an Answer (code, opaque, flag, version, language, remark, ext_fields;
 * msg_id, queue_offset), the fields of a PlainHeader in its order; its extFields text is a span of ``owner`` (a
 * bytes object holding ``header`` at ``header - base``), or of a copy when owner is NULL. None when it is not of
 * that shape or not a response (the flag's RESPONSE bit clear); NULL on an error (memory). */
static PyObject *plain_answer(const unsigned char *header, Py_ssize_t length, PyObject *owner,
                              const unsigned char *base) {
    scan_t s = {header, header + length};
    long code = 0, opaque = 0, flag = 0, version = 0;
    PyObject *language = NULL, *remark = NULL, *result = NULL;
    span_t ext = {NULL, -1}, msg_id = {NULL, -1}, queue_offset = {NULL, -1};
    unsigned seen = 0;
    if (!expect(&s, '{'))
        goto not_plain;
    do {
        const unsigned char *key;
        Py_ssize_t n;
        if (!plain_string(&s, &key, &n) || !expect(&s, ':'))
            goto not_plain;
        unsigned field = header_field(key, n);
        if (field == 0 || (seen & field))
            goto not_plain;
        seen |= field;
        const unsigned char *text;
        Py_ssize_t tn;
        switch (field) {
        case F_CODE:
        case F_OPAQUE:
        case F_FLAG:
        case F_VERSION:
            if (!int32_number(&s, field == F_CODE     ? &code
                                  : field == F_OPAQUE ? &opaque
                                  : field == F_FLAG   ? &flag
                                                      : &version))
                goto not_plain;
            break;
        case F_SER:
            if (!plain_string(&s, &text, &tn))
                goto not_plain;
            break;
        case F_EXT:
            if (!scan_map(&s, &ext, &msg_id, &queue_offset))
                goto not_plain;
            break;
        default: { /* F_LANGUAGE, F_REMARK */
            if (!plain_string(&s, &text, &tn))
                goto not_plain;
            PyObject *str = ascii_str(text, tn);
            if (str == NULL)
                goto failed;
            if (field == F_LANGUAGE)
                language = str;
            else
                remark = str;
        }
        }
    } while (expect(&s, ','));
    if (!expect(&s, '}') || s.p != s.end || (seen & (F_CODE | F_OPAQUE)) != (F_CODE | F_OPAQUE) ||
        !(flag & RESPONSE_FLAG))
        goto not_plain;
    answer_t *answer = PyObject_Malloc(sizeof(answer_t));
    if (answer == NULL) {
        PyErr_NoMemory();
        goto release;
    }
    PyObject_Init((PyObject *)answer, &answer_type);
    memset(answer->fields, 0, sizeof(answer->fields));
    answer->msg_id = answer->queue_offset = answer->ext_owner = NULL;
    result = (PyObject *)answer;
    long ints[] = {code, opaque, flag};
    for (int i = 0; i < 3; i++) {
        if ((answer->fields[i] = PyLong_FromLong(ints[i])) == NULL)
            goto drop;
    }
    if ((answer->fields[3] = version_int(version)) == NULL)
        goto drop;
    PyObject *objects[] = {language, remark};
    for (int i = 0; i < 2; i++) {
        PyObject *object = objects[i] ? objects[i] : Py_None;
        Py_INCREF(object);
        answer->fields[4 + i] = object;
    }
    answer->msg_id = value_or_none(msg_id);
    answer->queue_offset = value_or_none(queue_offset);
    if (answer->msg_id == NULL || answer->queue_offset == NULL)
        goto drop;
    if (ext.length < 0) {
        Py_INCREF(Py_None);
        answer->fields[EXT_FIELDS] = Py_None;
    } else if (owner != NULL) {
        Py_INCREF(owner);
        answer->ext_owner = owner;
        answer->ext_start = ext.text - base;
        answer->ext_length = ext.length;
    } else {
        answer->ext_owner = PyBytes_FromStringAndSize((const char *)ext.text, ext.length);
        if (answer->ext_owner == NULL)
            goto drop;
        answer->ext_start = 0;
        answer->ext_length = ext.length;
    }
    goto release;
drop:
    Py_CLEAR(result);
    goto release;
not_plain:
    Py_INCREF(Py_None);
    result = Py_None;
    goto release;
failed:
    result = NULL;
release:
    Py_XDECREF(language);
    Py_XDECREF(remark);
    return result;
}

static uint32_t get_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* answers(data, position) -> (end, [Answer(code, opaque, flag, version, language, remark, ext_fields), ...]): the
 * leading run of whole plain response frames from ``position`` on, and the offset where the last of them ends
 * (``position`` when none). */
static PyObject *answers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "answers(data, position)");
        return NULL;
    }
    Py_ssize_t position = PyLong_AsSsize_t(args[1]);
    if (position == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *list = PyList_New(0), *result = NULL;
    if (list == NULL)
        goto done;
    if (position >= 0 && position <= data.len) {
        const unsigned char *bytes = data.buf;
        /* immutable bytes are shared by the answers for their extFields text; anything else is copied */
        PyObject *owner = PyBytes_CheckExact(args[0]) ? args[0] : NULL;
        while (data.len - position >= 8) {
            uint32_t length = get_be32(bytes + position), header_length = get_be32(bytes + position + 4);
            if ((uint64_t)length != 4 + (uint64_t)header_length ||
                (uint64_t)header_length > (uint64_t)(data.len - position - 8))
                break; /* a body, a binary header, a bad length or an unfinished frame: Python's */
            PyObject *answer = plain_answer(bytes + position + 8, (Py_ssize_t)header_length, owner, bytes);
            if (answer == NULL)
                goto done;
            if (answer == Py_None) {
                Py_DECREF(answer);
                break;
            }
            int appended = PyList_Append(list, answer);
            Py_DECREF(answer);
            if (appended < 0)
                goto done;
            position += 8 + (Py_ssize_t)header_length;
        }
    }
    result = Py_BuildValue("(nO)", position, list);
done:
    Py_XDECREF(list);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"render", (PyCFunction)(void (*)(void))render, METH_FASTCALL,
     "render(code, flag, opaque, fields, queue_id, sys_flag, born_ms, message_flag, properties_json, id_head, id_tail,"
     " batch, body)"
     " -> bytes | None: SendTemplate.frame's bytes, or None to leave it to Python"},
    {"answers", (PyCFunction)(void (*)(void))answers, METH_FASTCALL,
     "answers(data, position) -> (end, list of Answer(code, opaque, flag, version, language, remark, ext_fields)) of"
     " the leading whole plain response frames, each with msg_id and queue_offset"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_clientframes", NULL, -1, methods};

PyMODINIT_FUNC PyInit__clientframes(void) {
    init_text_bytes();
    if (PyType_Ready(&answer_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&answer_type);
    if (PyModule_AddObject(m, "Answer", (PyObject *)&answer_type) < 0) {
        Py_DECREF(&answer_type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
