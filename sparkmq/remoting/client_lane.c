/* sparkmq.remoting._clientlane: the producer's lean send path in C (reference: the Python it replaces).
 *
 * frame()   : SendTemplate.frame (sparkmq/client/send_frames.py): one SEND_MESSAGE_V2 frame from the
 *             template's fixed parts and the send's own fields, properties JSON-escaped as
 *             json.encoder.encode_basestring does, in one allocation.
 * send_frame(): a plain send's unique id (SendIds.at: the head text of the millisecond and the counter's
 *             4 uppercase hex digits) and frame() of Message.properties_text's prefix + that id, in one call.
 * slotted() : cls(*values) of a class whose __init__ only stores its fields (SendResult, CallbackSend),
 *             without the Python __init__ frame; set_never_done(cls): deliver() does not ask such waiters done().
 * Sender    : a producer's whole lean send of a plain message (AsyncProducer._lean_send, ClientConnection.send_lean)
 *             in one call per send, its Waiter in the connection's table: CallbackSend's behaviour, or (send())
 *             a future completed with the SendResult; configure() gives it the Python constants and hooks.
 * deliver() : the front of ClientConnection.data_received (sparkmq/remoting/client_connection.py): walks
 *             whole bodiless response frames whose JSON header is a SUCCESS answer of the strict compact
 *             shape below, pops each one's waiter from the lean table and calls waiter.set_result(
 *             (msgId, queueOffset)) (a Waiter's answer is taken in C, without the tuple); it stops at the first frame it does not take, which the Python
 *             path (msgspec, then the reference decoder) reads as before.
 *
 * The shape deliver() takes is a subset of what the msgspec decode of protocol/plain_header.py accepts:
 * printable ASCII only, no whitespace, no escapes; a flat object whose values are strings, integers
 * (no leading zero, no fraction or exponent) or null, and "extFields" an object of strings; "code" 0,
 * "opaque", "flag" (with the response bit) and "version" int32s; no key twice; extFields holding
 * "msgId" and a "queueOffset" of -?[0-9]{1,18}. Anything else stops the walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define RESPONSE_FLAG 1
#define LENGTH_FIELD 4

/* ---- frame ------------------------------------------------------------------------------------- */

static Py_ssize_t put_int(char *out, long long value) {
    char digits[24];
    int n = 0;
    unsigned long long v = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    Py_ssize_t written = 0;
    if (value < 0)
        out[written++] = '-';
    while (n)
        out[written++] = digits[--n];
    return written;
}

static const char HEX[] = "0123456789abcdef";

/* Eight bytes at a time: nonzero when some byte of v may be one of those named (never zero when one is). */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t zero_bytes(uint64_t x) { return (x - ONES) & ~x & HIGHS; }
/* '"', '\\' or a control character: what encode_basestring escapes (and what ends a plain JSON string) */
static inline uint64_t escape_bytes(uint64_t v) {
    return zero_bytes(v ^ (ONES * '"')) | zero_bytes(v ^ (ONES * '\\')) | ((v - ONES * 0x20) & ~v & HIGHS);
}

/* Whether text[0..n) holds a byte encode_basestring escapes. */
static int needs_escape(const char *text, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, text + i, 8);
        if (escape_bytes(v))
            break;
    }
    for (; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\' || c < 0x20)
            return 1;
    }
    return 0;
}

/* The frame of start, opaque, middle, sys_flag, born_ms, flag and the properties (the text of p1 then p2,
 * UTF-8, JSON-escaped as encode_basestring does), then body; None when the Python path must render it.
 * With queue_id >= 0, middle is SendTemplate.middle_head and the queue id's digits and MIDDLE_TAIL follow it
 * (SendTemplate._middle's text): no per-queue bytes to read, which at 1,000 queues were cold. */
static PyObject *build_frame(PyObject *start, PyObject *middle, long long queue_id, const long long numbers[4],
                             const char *p1, Py_ssize_t n1, const char *p2, Py_ssize_t n2, PyObject *body) {
    Py_ssize_t escaped = 0;
    int plain[2];
    for (int part = 0; part < 2; part++) {
        const char *props = part ? p2 : p1;
        Py_ssize_t props_len = part ? n2 : n1;
        plain[part] = !needs_escape(props, props_len);
        if (plain[part]) {
            escaped += props_len;
            continue;
        }
        for (Py_ssize_t i = 0; i < props_len; i++) {
            unsigned char c = (unsigned char)props[i];
            if (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f')
                escaped += 2;
            else if (c < 0x20)
                escaped += 6;
            else
                escaped += 1;
        }
    }
    static const char G[] = "\",\"g\":\"", H[] = "\",\"h\":\"", I[] = "\",\"i\":\"";
    static const char END[] = "\",\"j\":\"0\",\"k\":\"false\",\"m\":\"false\"}}";
    char digits[4][24];
    Py_ssize_t digits_len[4], numbers_len = 0;
    for (int i = 0; i < 4; i++)
        numbers_len += digits_len[i] = put_int(digits[i], numbers[i]);
    static const char MIDDLE_TAIL[] = "\",\"f\":\"";
    char queue_digits[24];
    Py_ssize_t queue_len = queue_id >= 0 ? put_int(queue_digits, queue_id) + (Py_ssize_t)(sizeof MIDDLE_TAIL - 1) : 0;
    Py_ssize_t start_len = PyBytes_GET_SIZE(start), middle_len = PyBytes_GET_SIZE(middle) + queue_len;
    Py_ssize_t body_len = PyBytes_GET_SIZE(body);
    /* the exact size: one allocation, no resize (a resize from over 512 bytes copied every frame) */
    Py_ssize_t header_len = start_len + middle_len + numbers_len + (sizeof G - 1) + (sizeof H - 1) +
                            (sizeof I - 1) + escaped + (sizeof END - 1);
    if (header_len + body_len > (Py_ssize_t)UINT32_MAX - 16)
        Py_RETURN_NONE; /* the Python path raises FrameTooLargeError */
    PyObject *result = PyBytes_FromStringAndSize(NULL, 8 + header_len + body_len);
    if (result == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(result), *p = out + 8;
    memcpy(p, PyBytes_AS_STRING(start), start_len);
    p += start_len;
    memcpy(p, digits[0], digits_len[0]);
    p += digits_len[0];
    memcpy(p, PyBytes_AS_STRING(middle), PyBytes_GET_SIZE(middle));
    p += PyBytes_GET_SIZE(middle);
    if (queue_id >= 0) {
        Py_ssize_t digits_n = queue_len - (Py_ssize_t)(sizeof MIDDLE_TAIL - 1);
        memcpy(p, queue_digits, digits_n);
        p += digits_n;
        memcpy(p, MIDDLE_TAIL, sizeof MIDDLE_TAIL - 1);
        p += sizeof MIDDLE_TAIL - 1;
    }
    memcpy(p, digits[1], digits_len[1]);
    p += digits_len[1];
    memcpy(p, G, sizeof G - 1);
    p += sizeof G - 1;
    memcpy(p, digits[2], digits_len[2]);
    p += digits_len[2];
    memcpy(p, H, sizeof H - 1);
    p += sizeof H - 1;
    memcpy(p, digits[3], digits_len[3]);
    p += digits_len[3];
    memcpy(p, I, sizeof I - 1);
    p += sizeof I - 1;
    for (int part = 0; part < 2; part++) {
        const char *props = part ? p2 : p1;
        Py_ssize_t props_len = part ? n2 : n1;
        if (plain[part]) {
            if (props_len)
                memcpy(p, props, props_len);
            p += props_len;
            continue;
        }
        for (Py_ssize_t i = 0; i < props_len; i++) {
            unsigned char c = (unsigned char)props[i];
            switch (c) {
            case '"': *p++ = '\\'; *p++ = '"'; break;
            case '\\': *p++ = '\\'; *p++ = '\\'; break;
            case '\n': *p++ = '\\'; *p++ = 'n'; break;
            case '\r': *p++ = '\\'; *p++ = 'r'; break;
            case '\t': *p++ = '\\'; *p++ = 't'; break;
            case '\b': *p++ = '\\'; *p++ = 'b'; break;
            case '\f': *p++ = '\\'; *p++ = 'f'; break;
            default:
                if (c < 0x20) {
                    memcpy(p, "\\u00", 4);
                    p[4] = HEX[c >> 4];
                    p[5] = HEX[c & 15];
                    p += 6;
                } else {
                    *p++ = (char)c;
                }
            }
        }
    }
    memcpy(p, END, sizeof END - 1);
    p += sizeof END - 1;
    if (p - out != 8 + header_len) { /* the escaping's count and its writing disagree: never */
        Py_DECREF(result);
        PyErr_SetString(PyExc_SystemError, "build_frame: header size mismatch");
        return NULL;
    }
    memcpy(p, PyBytes_AS_STRING(body), body_len);
    uint32_t length = (uint32_t)(LENGTH_FIELD + header_len + body_len), hl = (uint32_t)header_len;
    unsigned char *q = (unsigned char *)out;
    q[0] = (unsigned char)(length >> 24); q[1] = (unsigned char)(length >> 16);
    q[2] = (unsigned char)(length >> 8); q[3] = (unsigned char)length;
    q[4] = (unsigned char)(hl >> 24); q[5] = (unsigned char)(hl >> 16);
    q[6] = (unsigned char)(hl >> 8); q[7] = (unsigned char)hl;
    return result;
}

/* args[first..first+4): opaque, sys_flag, born_ms, flag as int64; 0 with no error when one is larger. */
static int take_numbers(PyObject *const *args, long long numbers[4]) {
    for (int i = 0; i < 4; i++) {
        int overflow = 0;
        numbers[i] = PyLong_AsLongLongAndOverflow(args[i], &overflow);
        if (numbers[i] == -1 && PyErr_Occurred())
            return -1;
        if (overflow)
            return 0;
    }
    return 1;
}

static PyObject *frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "frame() takes 8 arguments");
        return NULL;
    }
    /* start, middle, opaque, sys_flag, born_ms, flag, properties, body */
    if (!PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) || !PyUnicode_Check(args[6]) || !PyBytes_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "frame(): start, middle, body must be bytes and properties str");
        return NULL;
    }
    long long numbers[4];
    int taken = take_numbers(args + 2, numbers);
    if (taken < 0)
        return NULL;
    if (!taken)
        Py_RETURN_NONE; /* the Python path formats any int */
    Py_ssize_t props_len;
    const char *props = PyUnicode_AsUTF8AndSize(args[6], &props_len);
    if (props == NULL)
        return NULL; /* a lone surrogate: UnicodeEncodeError, as str.encode raises */
    return build_frame(args[0], args[1], -1, numbers, props, props_len, NULL, 0, args[7]);
}

static const char UPPER_HEX[] = "0123456789ABCDEF";

/* SendIds.at's id from its head text and counter, and frame() of the properties prefix + that id; *id_out and
 * *frame_out NULL with no error when the Python path must render it. 0 on success, -1 on error. */
static int id_and_frame(PyObject *start, PyObject *middle, long long queue_id, const long long numbers[4],
                        PyObject *prefix_text,
                        PyObject *head, PyObject *counter_obj, PyObject *body, PyObject **id_out,
                        PyObject **frame_out) {
    *id_out = *frame_out = NULL;
    if (!PyUnicode_IS_ASCII(head) || PyUnicode_GET_LENGTH(head) > 60)
        return 0;
    Py_ssize_t prefix_len;
    const char *prefix = PyUnicode_AsUTF8AndSize(prefix_text, &prefix_len);
    if (prefix == NULL)
        return -1;
    /* the counter's low 16 bits, as `& 0xFFFF` of any int (two's complement) */
    unsigned long counter = PyLong_AsUnsignedLongMask(counter_obj);
    if (counter == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    Py_ssize_t head_len = PyUnicode_GET_LENGTH(head);
    PyObject *unique_id = PyUnicode_New(head_len + 4, 127);
    if (unique_id == NULL)
        return -1;
    char *id = (char *)PyUnicode_DATA(unique_id);
    memcpy(id, PyUnicode_DATA(head), head_len);
    for (int i = 0; i < 4; i++)
        id[head_len + i] = UPPER_HEX[(counter >> (12 - 4 * i)) & 15];
    PyObject *whole = build_frame(start, middle, queue_id, numbers, prefix, prefix_len, id, head_len + 4, body);
    if (whole == NULL || whole == Py_None) {
        Py_DECREF(unique_id);
        Py_XDECREF(whole);
        return whole == NULL ? -1 : 0;
    }
    *id_out = unique_id;
    *frame_out = whole;
    return 0;
}

/* send_frame: SendIds.at's id from its head text and counter, then frame() of the properties prefix + that id:
 * the unique id and the frame of a plain send in one call. */
static PyObject *send_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "send_frame() takes 10 arguments");
        return NULL;
    }
    /* start, middle, opaque, sys_flag, born_ms, flag, prefix, head, counter, body */
    if (!PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) || !PyUnicode_Check(args[6]) ||
        !PyUnicode_Check(args[7]) || !PyLong_Check(args[8]) || !PyBytes_Check(args[9])) {
        PyErr_SetString(PyExc_TypeError,
                        "send_frame(): start, middle, body must be bytes, prefix and head str, counter int");
        return NULL;
    }
    long long numbers[4];
    int taken = take_numbers(args + 2, numbers);
    if (taken < 0)
        return NULL;
    if (!taken)
        Py_RETURN_NONE;
    PyObject *unique_id, *whole;
    if (id_and_frame(args[0], args[1], -1, numbers, args[6], args[7], args[8], args[9], &unique_id, &whole) < 0)
        return NULL;
    if (unique_id == NULL)
        Py_RETURN_NONE;
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(unique_id);
        Py_DECREF(whole);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, unique_id);
    PyTuple_SET_ITEM(pair, 1, whole);
    return pair;
}

/* ---- slotted ----------------------------------------------------------------------------------- */

/* slotted(cls, names, *values): an instance of cls with each name in the tuple names set to its value through
 * the generic setattr (the slot's own descriptor, past a frozen dataclass's __setattr__), without calling
 * cls's __init__: for classes whose __init__ only stores those fields in that order (SendResult, CallbackSend),
 * where it is cls(*values) without the Python __init__ frame. */
static PyObject *make_slotted(PyTypeObject *cls, PyObject *names, PyObject *const *values) {
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        if (PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(names, i), values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static PyObject *slotted(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != nargs - 2) {
        PyErr_SetString(PyExc_TypeError, "slotted(cls, names: tuple, *values) takes one value per name");
        return NULL;
    }
    return make_slotted((PyTypeObject *)args[0], args[1], args + 2);
}

/* The type whose waiters deliver() does not ask done(): their done() is always False (CallbackSend). */
static PyObject *never_done_type;

static PyObject *set_never_done(PyObject *self, PyObject *cls) {
    (void)self;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "set_never_done(cls): a type");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(never_done_type, cls);
    Py_RETURN_NONE;
}

/* ---- deliver ----------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p, *end;
} Cursor;

/* A string without escapes or non-printable bytes, its text at start (len bytes); 0 when not of that shape. */
static int take_string(Cursor *c, const unsigned char **start, Py_ssize_t *len) {
    if (c->p >= c->end || *c->p != '"')
        return 0;
    const unsigned char *s = ++c->p;
    while (c->end - c->p >= 8) { /* eight plain bytes at a time; the block holding the quote goes byte by byte */
        uint64_t v;
        memcpy(&v, c->p, 8);
        if (escape_bytes(v) | (v & HIGHS) | zero_bytes(v ^ (ONES * 0x7f)))
            break;
        c->p += 8;
    }
    while (c->p < c->end && *c->p != '"') {
        unsigned char b = *c->p;
        if (b == '\\' || b < 0x20 || b >= 0x7f)
            return 0;
        c->p++;
    }
    if (c->p >= c->end)
        return 0;
    *start = s;
    *len = c->p - s;
    c->p++;
    return 1;
}

/* An integer: -?(0|[1-9][0-9]*) of at most 18 digits, followed by ',' or '}'. */
static int take_int(Cursor *c, long long *value) {
    int negative = 0, digits = 0;
    long long v = 0;
    if (c->p < c->end && *c->p == '-') {
        negative = 1;
        c->p++;
    }
    const unsigned char *first = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (++digits > 18)
            return 0;
        v = v * 10 + (*c->p - '0');
        c->p++;
    }
    if (digits == 0 || (digits > 1 && *first == '0') || (negative && v == 0))
        return 0;
    if (c->p >= c->end || (*c->p != ',' && *c->p != '}'))
        return 0;
    *value = negative ? -v : v;
    return 1;
}

static int take_null(Cursor *c) {
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 1;
    }
    return 0;
}

static int key_is(const unsigned char *k, Py_ssize_t n, const char *name) {
    return (Py_ssize_t)strlen(name) == n && memcmp(k, name, n) == 0;
}

/* -?[0-9]{1,18}, leading zeros allowed (Python's int() of the text). */
static int digits_value(const unsigned char *s, Py_ssize_t n, long long *value) {
    Py_ssize_t i = 0;
    int negative = 0;
    if (n > 0 && s[0] == '-') {
        negative = 1;
        i = 1;
    }
    if (n - i < 1 || n - i > 18)
        return 0;
    long long v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    *value = negative ? -v : v;
    return 1;
}

#define K_CODE 1
#define K_OPAQUE 2
#define K_FLAG 4
#define K_VERSION 8
#define K_LANGUAGE 16
#define K_REMARK 32
#define K_EXT 64

static int in_int32(long long v) { return v >= INT32_MIN && v <= INT32_MAX; }

/* The header h[0..n) read as a SUCCESS answer: its opaque, msgId text and queueOffset. */
static int read_answer(const unsigned char *h, Py_ssize_t n, long long *opaque, const unsigned char **msg_id,
                       Py_ssize_t *msg_id_len, long long *queue_offset) {
    Cursor c = {h, h + n};
    unsigned seen = 0;
    long long code = -1, flag = 0;
    int have_msg_id = 0, have_offset = 0;
    if (n < 2 || h[0] != '{' || h[n - 1] != '}')
        return 0;
    c.p++;
    if (*c.p == '}')
        return 0;
    for (;;) {
        const unsigned char *key;
        Py_ssize_t key_len;
        if (!take_string(&c, &key, &key_len) || c.p >= c.end || *c.p++ != ':' || c.p >= c.end)
            return 0;
        unsigned which = key_is(key, key_len, "code")       ? K_CODE
                         : key_is(key, key_len, "opaque")   ? K_OPAQUE
                         : key_is(key, key_len, "flag")     ? K_FLAG
                         : key_is(key, key_len, "version")  ? K_VERSION
                         : key_is(key, key_len, "language") ? K_LANGUAGE
                         : key_is(key, key_len, "remark")   ? K_REMARK
                         : key_is(key, key_len, "extFields") ? K_EXT
                                                            : 0;
        if (which & seen)
            return 0;
        seen |= which;
        long long number;
        const unsigned char *text;
        Py_ssize_t text_len;
        if (which == K_CODE || which == K_OPAQUE || which == K_FLAG || which == K_VERSION) {
            if (!take_int(&c, &number) || !in_int32(number))
                return 0;
            if (which == K_CODE)
                code = number;
            else if (which == K_OPAQUE)
                *opaque = number;
            else if (which == K_FLAG)
                flag = number;
        } else if (which == K_EXT) {
            if (*c.p != '{')
                return 0; /* null extFields: no msgId to read */
            c.p++;
            if (c.p < c.end && *c.p == '}') {
                c.p++;
            } else {
                for (;;) {
                    if (!take_string(&c, &key, &key_len) || c.p >= c.end || *c.p++ != ':')
                        return 0;
                    if (!take_string(&c, &text, &text_len))
                        return 0;
                    if (key_is(key, key_len, "msgId")) {
                        if (have_msg_id)
                            return 0;
                        have_msg_id = 1;
                        *msg_id = text;
                        *msg_id_len = text_len;
                    } else if (key_is(key, key_len, "queueOffset")) {
                        if (have_offset || !digits_value(text, text_len, queue_offset))
                            return 0;
                        have_offset = 1;
                    }
                    if (c.p >= c.end)
                        return 0;
                    if (*c.p == '}') {
                        c.p++;
                        break;
                    }
                    if (*c.p++ != ',')
                        return 0;
                }
            }
        } else { /* language, remark, or a key the decode skips: a string or null */
            if (!take_null(&c) && !take_string(&c, &text, &text_len))
                return 0;
        }
        if (c.p >= c.end)
            return 0;
        if (*c.p == '}') {
            c.p++;
            break;
        }
        if (*c.p++ != ',')
            return 0;
    }
    return c.p == c.end && (seen & (K_CODE | K_OPAQUE)) == (K_CODE | K_OPAQUE) && code == 0 &&
           (flag & RESPONSE_FLAG) && have_msg_id && have_offset;
}

static PyObject *str_done, *str_set_result;
static PyTypeObject WaiterType;
typedef struct Waiter Waiter;
/* the wake-ups a read collects: the first (waiter, callback, context) alone, a list from the second on */
typedef struct {
    PyObject *first[3];
    PyObject *list;
} Wakeups;
static PyObject *waiter_answer(Waiter *w, PyObject *answer, PyObject *msg_id, PyObject *offset, Wakeups *wakeups);
static int schedule_wakeups(Wakeups *wakeups);

static PyObject *deliver(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "deliver(data: bytes, position: int, lean: dict)");
        return NULL;
    }
    PyObject *data = args[0], *lean = args[2];
    Py_ssize_t position = PyLong_AsSsize_t(args[1]);
    if (position == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if (position < 0 || position > size) {
        PyErr_SetString(PyExc_ValueError, "position outside the data");
        return NULL;
    }
    Py_INCREF(data); /* a waiter's callback cannot free it under us */
    Wakeups wakeups = {{NULL, NULL, NULL}, NULL}; /* the awaited waiters' done callbacks, run after the read */
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    while (size - position >= 8) {
        const unsigned char *f = d + position;
        uint32_t length = (uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 | (uint32_t)f[2] << 8 | f[3];
        uint32_t header_length = (uint32_t)f[4] << 24 | (uint32_t)f[5] << 16 | (uint32_t)f[6] << 8 | f[7];
        if (header_length > (uint32_t)(size - position - 8) || length != LENGTH_FIELD + header_length)
            break;
        long long opaque = 0, queue_offset = 0;
        const unsigned char *msg_id = NULL;
        Py_ssize_t msg_id_len = 0;
        if (!read_answer(f + 8, header_length, &opaque, &msg_id, &msg_id_len, &queue_offset))
            break;
        PyObject *key = PyLong_FromLongLong(opaque);
        if (key == NULL)
            goto fail;
        PyObject *waiter = PyDict_GetItemWithError(lean, key); /* borrowed */
        if (waiter == NULL) {
            Py_DECREF(key);
            if (PyErr_Occurred())
                goto fail;
            break; /* not awaited lean (or timed out): the Python path's */
        }
        Py_INCREF(waiter);
        int removed = PyDict_DelItem(lean, key);
        Py_DECREF(key);
        if (removed < 0) {
            Py_DECREF(waiter);
            goto fail;
        }
        position += 8 + header_length;
        if (Py_TYPE(waiter) == &WaiterType) { /* the Sender's: its SendResult made here, no answer tuple */
            PyObject *id_text = PyUnicode_DecodeASCII((const char *)msg_id, msg_id_len, NULL), *offset = NULL;
            PyObject *ignored = NULL;
            if (id_text != NULL && (offset = PyLong_FromLongLong(queue_offset)) != NULL)
                ignored = waiter_answer((Waiter *)waiter, NULL, id_text, offset, &wakeups);
            Py_XDECREF(id_text);
            Py_XDECREF(offset);
            Py_DECREF(waiter);
            if (ignored == NULL)
                goto fail;
            Py_DECREF(ignored);
            continue;
        }
        int is_done = 0;
        if ((PyObject *)Py_TYPE(waiter) != never_done_type) {
            PyObject *done = PyObject_CallMethodNoArgs(waiter, str_done);
            if (done == NULL) {
                Py_DECREF(waiter);
                goto fail;
            }
            is_done = PyObject_IsTrue(done);
            Py_DECREF(done);
            if (is_done < 0) {
                Py_DECREF(waiter);
                goto fail;
            }
        }
        if (!is_done) {
            PyObject *answer = Py_BuildValue("(s#L)", (const char *)msg_id, msg_id_len, queue_offset);
            if (answer == NULL) {
                Py_DECREF(waiter);
                goto fail;
            }
            PyObject *ignored = PyObject_CallMethodOneArg(waiter, str_set_result, answer);
            Py_DECREF(answer);
            if (ignored == NULL) {
                Py_DECREF(waiter);
                goto fail;
            }
            Py_DECREF(ignored);
        }
        Py_DECREF(waiter);
    }
    Py_DECREF(data);
    if (schedule_wakeups(&wakeups) < 0)
        return NULL;
    return PyLong_FromSsize_t(position);
fail:
    Py_DECREF(data);
    { /* the waiters are done: their Tasks still wake, the error goes on */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (schedule_wakeups(&wakeups) < 0)
            PyErr_WriteUnraisable(NULL);
        PyErr_Restore(type, value, traceback);
    }
    return NULL;
}

/* ---- Sender and Waiter: the whole lean send ---------------------------------------------------- */
/* Sender.send(message) / Sender.start(message, future, callback): AsyncProducer._lean_send (route, queue,
 * connection, id, frame) and ClientConnection.send_lean (table entry, deadline FIFO, coalesced write and its
 * chunk rule) in one call, the waiter a Waiter: CallbackSend's behaviour, or for send() the future it awaits. None when the Python path must do this send's lean attempt (nothing was touched: no route or lane,
 * a paused broker, a message that is not plain); False when that path would find no lean attempt (the
 * chosen queue's connection is missing or closed): the general path's. Attributes are read by name as the
 * Python reads them, so whatever Python changes them sees the same state. */

#include <time.h>

enum {
    S_TOPIC, S_BODY, S_PROPERTIES, S_TAGS, S_KEYS, S_DELAY_LEVEL, S_FLAG, S_WAIT_STORE_OK, S_LEAN, S_ROUTE,
    S_QUEUES, S_TEMPLATE, S_CONNECTIONS, S_BROKER_NAME, S_QUEUE_ID, S_TRANSPORT, S_IS_CLOSING, S_OPAQUES,
    S_HEAD_MS, S_HEAD, S_HEAD_AT, S_COUNTER, S_MIDDLE_BYTES, S_MIDDLE_OF, S_LOOP, S_CREATE_FUTURE,
    S_SEND_TIMEOUT_S, S_TIME, S_POPLEFT, S_APPEND, S_SWEEPER, S_SWEEPER_WHEN,
    S_ARM_SWEEPER, S_OUT, S_OUT_BYTES, S_WRITES_PAUSED, S_FLUSH_OUT, S_FLUSH_SCHEDULED, S_RECEIVING,
    S_CALL_SOON, S_PENDING, S_WRITE, S_SEND_LEAN, S_PAUSED, S_SUCCEEDED, S_DONE, S_SET_RESULT,
    S_SET_EXCEPTION, S_LEAN_REFS, S_MIDDLE_HEAD, S_LEAN_REST, S_SEND_REST, S_THROW, S_CLOSE, S_AWAIT, S_FORGET,
    S_COUNT
};
static const char *const NAMES[] = {
    "topic", "body", "properties", "tags", "keys", "delay_level", "flag", "wait_store_ok", "lean", "route",
    "queues", "template", "connections", "broker_name", "queue_id", "_transport", "is_closing", "_opaques",
    "head_ms", "head", "head_at", "counter", "middle_bytes", "middle_of", "_loop", "create_future",
    "send_timeout_s", "time", "popleft", "append", "_sweeper", "_sweeper_when",
    "_arm_sweeper", "_out", "_out_bytes", "_writes_paused", "_flush_out", "_flush_scheduled", "_receiving",
    "call_soon", "_pending", "write", "send_lean", "paused", "succeeded", "done", "set_result",
    "set_exception", "_lean_refs", "middle_head", "_lean_rest", "_send", "throw", "close", "__await__", "forget"};
_Static_assert(sizeof NAMES / sizeof *NAMES == S_COUNT, "one name per S_ constant");
static PyObject *S[S_COUNT];

/* configure(): the Python constants and hooks the C path shares with the reference */
static struct {
    PyObject *result_cls, *result_fields, *send_ok, *start, *wait_true, *wait_false, *code;
    PyObject *answered, *failed, *callback_raised;
    double first_pausing_ms;
    Py_ssize_t chunk_frames, busy_frames, coalesce_bytes, max_body;
    Py_ssize_t result_offsets[5]; /* where each SendResult slot lives (its member descriptor's), or none: -1 */
    int ready;
} cfg;

/* A SendResult of these values: its slots written as their member descriptors write them (no lookup per slot) */
static PyObject *new_result(PyObject *const values[5]) {
    if (cfg.result_offsets[0] < 0)
        return make_slotted((PyTypeObject *)cfg.result_cls, cfg.result_fields, values);
    PyTypeObject *cls = (PyTypeObject *)cfg.result_cls;
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (obj == NULL)
        return NULL;
    for (int i = 0; i < 5; i++) {
        Py_INCREF(values[i]);
        *(PyObject **)((char *)obj + cfg.result_offsets[i]) = values[i];
    }
    return obj;
}

static PyObject *configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "configure() takes 15 arguments");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != 5 ||
        !PyBytes_Check(args[3]) || !PyUnicode_Check(args[4]) || !PyUnicode_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "configure(): bad argument types");
        return NULL;
    }
    double first = PyFloat_AsDouble(args[10]);
    Py_ssize_t chunk = PyLong_AsSsize_t(args[11]), busy = PyLong_AsSsize_t(args[12]);
    Py_ssize_t coalesce = PyLong_AsSsize_t(args[13]), max_frame = PyLong_AsSsize_t(args[14]);
    if (PyErr_Occurred())
        return NULL;
    PyObject **slots[10] = {&cfg.result_cls, &cfg.result_fields, &cfg.send_ok, &cfg.start, &cfg.wait_true,
                            &cfg.wait_false, &cfg.code, &cfg.answered, &cfg.failed, &cfg.callback_raised};
    for (int i = 0; i < 10; i++) {
        Py_INCREF(args[i]);
        Py_XSETREF(*slots[i], args[i]);
    }
    cfg.first_pausing_ms = first;
    cfg.chunk_frames = chunk;
    cfg.busy_frames = busy;
    cfg.coalesce_bytes = coalesce;
    cfg.max_body = max_frame / 2; /* a body up to this leaves room for any header: the frame fits */
    cfg.result_offsets[0] = -1;
    Py_ssize_t offsets[5];
    int direct = 1;
    for (int i = 0; i < 5 && direct; i++) {
        PyObject *descr = PyObject_GetAttr(cfg.result_cls, PyTuple_GET_ITEM(cfg.result_fields, i));
        if (descr == NULL)
            return NULL;
        direct = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX &&
                 !(((PyMemberDescrObject *)descr)->d_member->flags & READONLY);
        if (direct)
            offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
    }
    if (direct)
        memcpy(cfg.result_offsets, offsets, sizeof offsets);
    cfg.ready = 1;
    Py_RETURN_NONE;
}

static double clock_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    /* as time.time() / time.monotonic(): nanoseconds as an int, then / 1e9 */
    return (double)((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec) / 1e9;
}

static int truth_of(PyObject *owner, int name) {
    PyObject *value = PyObject_GetAttr(owner, S[name]);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* obj's instance dict, when none of names is a data descriptor of its type (a property, a slot): there the
 * dict holds what getattr reads (or getattr finds the class's plain value). Else None: read by getattr. */
static PyObject *vars_of(PyObject *obj, const int *names, int n) {
    for (int i = 0; i < n; i++) {
        PyObject *attr = _PyType_Lookup(Py_TYPE(obj), S[names[i]]); /* borrowed, no error set */
        if (attr != NULL && Py_TYPE(attr)->tp_descr_set != NULL)
            Py_RETURN_NONE;
    }
    PyObject *vars = PyObject_GenericGetDict(obj, NULL);
    if (vars == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!PyDict_CheckExact(vars)) {
        Py_DECREF(vars);
        Py_RETURN_NONE;
    }
    return vars;
}

/* getattr(owner, name) through vars_of's dict (None: getattr itself) */
static PyObject *attr_of(PyObject *vars, PyObject *owner, int name) {
    if (vars != Py_None) {
        PyObject *value = PyDict_GetItemWithError(vars, S[name]);
        if (value != NULL) {
            Py_INCREF(value);
            return value;
        }
        if (PyErr_Occurred())
            return NULL;
    }
    return PyObject_GetAttr(owner, S[name]);
}

static int truth_in(PyObject *vars, PyObject *owner, int name) {
    PyObject *value = attr_of(vars, owner, name);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

static int set_in(PyObject *vars, PyObject *owner, int name, PyObject *value) {
    return vars != Py_None ? PyDict_SetItem(vars, S[name], value) : PyObject_SetAttr(owner, S[name], value);
}

/* -- Waiter -- */

/* An awaited waiter (send()'s) is the future itself, an asyncio-compatible one (the protocol a Task drives:
 * _asyncio_future_blocking, get_loop, add_done_callback with a context, result, cancel, done): no asyncio
 * Future and no FutureIter per send, two objects fewer for the garbage collector per send in flight. */
/* W_SUCCESS: a SUCCESS answer, its msgId the value and its offset kept aside; the SendResult is made when
 * result() is first read (in the Task's step), not in the read that delivers a burst of answers: a thousand
 * answers in one read would otherwise allocate a thousand tracked objects at once and trip collections */
enum { W_PENDING, W_RESULT, W_SUCCESS, W_EXCEPTION, W_CANCELLED };

struct Waiter {
    PyObject_HEAD
    PyObject *future, *callback, *producer, *message, *unique_id, *queue, *connection, *faults, *paused;
    /* awaited: the loop, the outcome (result, exception or cancel message), the first done callback and its
     * context (a Task's wake-up), any further (callback, context) pairs */
    PyObject *loop, *value, *offset, *done_callback, *done_context, *more_callbacks;
    /* coro: the waiter is iterated as send()'s coroutine (a SendCall's): an outcome other than a SendResult
     * (or an exception thrown in) goes on in producer._lean_rest(waiter, thrown), inner, which it delegates to */
    PyObject *inner;
    long long opaque;
    double started;
    int awaited; /* send(): the waiter gets the SendResult, the raw answer or the error; else CallbackSend's */
    int coro;
    int state;
    char blocking; /* _asyncio_future_blocking */
};

static int waiter_traverse(Waiter *w, visitproc visit, void *arg) {
    Py_VISIT(w->future);
    Py_VISIT(w->callback);
    Py_VISIT(w->producer);
    Py_VISIT(w->message);
    Py_VISIT(w->unique_id);
    Py_VISIT(w->queue);
    Py_VISIT(w->connection);
    Py_VISIT(w->faults);
    Py_VISIT(w->paused);
    Py_VISIT(w->loop);
    Py_VISIT(w->value);
    Py_VISIT(w->offset);
    Py_VISIT(w->done_callback);
    Py_VISIT(w->done_context);
    Py_VISIT(w->more_callbacks);
    Py_VISIT(w->inner);
    return 0;
}

static int waiter_clear(Waiter *w) {
    Py_CLEAR(w->future);
    Py_CLEAR(w->callback);
    Py_CLEAR(w->producer);
    Py_CLEAR(w->message);
    Py_CLEAR(w->unique_id);
    Py_CLEAR(w->queue);
    Py_CLEAR(w->connection);
    Py_CLEAR(w->faults);
    Py_CLEAR(w->paused);
    Py_CLEAR(w->loop);
    Py_CLEAR(w->value);
    Py_CLEAR(w->offset);
    Py_CLEAR(w->done_callback);
    Py_CLEAR(w->done_context);
    Py_CLEAR(w->more_callbacks);
    Py_CLEAR(w->inner);
    return 0;
}

static void waiter_dealloc(Waiter *w) {
    PyObject_GC_UnTrack(w);
    waiter_clear(w);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* future.set_result(value) / set_exception(value) unless future.done() */
static int settle_future(PyObject *future, int method, PyObject *value) {
    PyObject *done = PyObject_CallMethodNoArgs(future, S[S_DONE]);
    if (done == NULL)
        return -1;
    int is_done = PyObject_IsTrue(done);
    Py_DECREF(done);
    if (is_done)
        return is_done < 0 ? -1 : 0;
    PyObject *ignored = PyObject_CallMethodOneArg(future, S[method], value);
    if (ignored == NULL)
        return -1;
    Py_DECREF(ignored);
    return 0;
}

static PyObject *str_context, *context_kwnames, *cancelled_error, *invalid_state_error;

/* loop.call_soon(callback, w, context=context) */
static int schedule(Waiter *w, PyObject *callback, PyObject *context) {
    PyObject *call_args[4] = {w->loop, callback, (PyObject *)w, context};
    PyObject *ignored = PyObject_VectorcallMethod(S[S_CALL_SOON], call_args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                                  context_kwnames);
    if (ignored == NULL)
        return -1;
    Py_DECREF(ignored);
    return 0;
}

/* Wake-ups of one read. asyncio schedules every done callback of a future with a Handle of its own (a Handle
 * and an argument tuple, two GC-tracked objects per answer): a read delivering hundreds of answers made
 * hundreds of them before any Task ran and freed anything, and tripped the collector (docs/design-notes.md,
 * "The client's collector"). deliver() instead collects [loop, waiter, callback, context, waiter, callback, ...]
 * and schedules one loop callback, run_wakeups, which calls each in its context in order, as the Handles
 * would have. */
static PyObject *run_wakeups_fn;

/* to the read's wake-ups if it collects them (same loop, a real Context), else as Future does: call_soon */
static int wake(Waiter *w, PyObject *callback, PyObject *context, Wakeups *wakeups) {
    if (wakeups == NULL || w->loop == NULL || !PyContext_CheckExact(context))
        return schedule(w, callback, context);
    if (wakeups->first[0] == NULL && wakeups->list == NULL) {
        wakeups->first[0] = Py_NewRef(w);
        wakeups->first[1] = Py_NewRef(callback);
        wakeups->first[2] = Py_NewRef(context);
        return 0;
    }
    if (wakeups->list == NULL) {
        PyObject *loop = ((Waiter *)wakeups->first[0])->loop;
        if (loop != w->loop)
            return schedule(w, callback, context);
        if ((wakeups->list = PyList_New(4)) == NULL)
            return -1;
        PyList_SET_ITEM(wakeups->list, 0, Py_NewRef(loop));
        for (int i = 0; i < 3; i++) {
            PyList_SET_ITEM(wakeups->list, i + 1, wakeups->first[i]); /* the reference moves */
            wakeups->first[i] = NULL;
        }
    } else if (PyList_GET_ITEM(wakeups->list, 0) != w->loop) {
        return schedule(w, callback, context);
    }
    if (PyList_Append(wakeups->list, (PyObject *)w) < 0 || PyList_Append(wakeups->list, callback) < 0 ||
        PyList_Append(wakeups->list, context) < 0)
        return -1;
    return 0;
}

/* a lone wake-up as Future schedules it; two or more: loop.call_soon(run_wakeups, list); all references dropped */
static int schedule_wakeups(Wakeups *wakeups) {
    int failed = 0;
    if (wakeups->list != NULL) {
        PyObject *list = wakeups->list;
        wakeups->list = NULL;
        PyObject *ignored =
            PyObject_CallMethodObjArgs(PyList_GET_ITEM(list, 0), S[S_CALL_SOON], run_wakeups_fn, list, NULL);
        Py_DECREF(list);
        failed = ignored == NULL;
        Py_XDECREF(ignored);
    } else if (wakeups->first[0] != NULL) {
        failed = schedule((Waiter *)wakeups->first[0], wakeups->first[1], wakeups->first[2]) < 0;
        for (int i = 0; i < 3; i++)
            Py_CLEAR(wakeups->first[i]);
    }
    return failed ? -1 : 0;
}

/* run_wakeups([loop, waiter, callback, context, ...]): each callback(waiter) in its context, in order; if one
 * raises, the rest get a Handle each (as they would have had) and the error goes to this call's Handle, which
 * reports it (or re-raises SystemExit / KeyboardInterrupt) as it would have for that callback. Each entry is
 * let go (set to None) once its callback ran, as its Handle would have been: a Task that resumed and sent
 * again frees its finished send's waiter (and the message and callback it holds) at once, not when the
 * whole read's list goes, so a read answering thousands of sends does not keep thousands alive beside
 * their successors (docs/design-notes.md, "The client's collector"). */
static PyObject *run_wakeups(PyObject *self, PyObject *wakeups) {
    (void)self;
    if (!PyList_CheckExact(wakeups)) {
        PyErr_SetString(PyExc_TypeError, "run_wakeups(list)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(wakeups);
    for (Py_ssize_t i = 1; i + 2 < n && i + 2 < PyList_GET_SIZE(wakeups); i += 3) {
        PyObject *w = PyList_GET_ITEM(wakeups, i), *callback = PyList_GET_ITEM(wakeups, i + 1);
        PyObject *context = PyList_GET_ITEM(wakeups, i + 2);
        Py_INCREF(w);
        Py_INCREF(callback);
        Py_INCREF(context);
        for (Py_ssize_t k = i; k < i + 3; k++) /* the list's references go now: ours keep them for the call */
            if (PyList_SetItem(wakeups, k, Py_NewRef(Py_None)) < 0) {
                Py_DECREF(w);
                Py_DECREF(callback);
                Py_DECREF(context);
                return NULL;
            }
        PyObject *result = NULL;
        if (PyContext_Enter(context) == 0) {
            result = PyObject_CallOneArg(callback, w);
            if (PyContext_Exit(context) < 0)
                Py_CLEAR(result);
        }
        Py_DECREF(w);
        Py_DECREF(callback);
        Py_DECREF(context);
        if (result == NULL) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            for (Py_ssize_t j = i + 3; j + 2 < n && j + 2 < PyList_GET_SIZE(wakeups); j += 3)
                if (Py_IS_TYPE(PyList_GET_ITEM(wakeups, j), &WaiterType) &&
                    schedule((Waiter *)PyList_GET_ITEM(wakeups, j), PyList_GET_ITEM(wakeups, j + 1),
                             PyList_GET_ITEM(wakeups, j + 2)) < 0)
                    PyErr_WriteUnraisable(NULL);
            PyErr_Restore(type, value, traceback);
            return NULL;
        }
        Py_DECREF(result);
    }
    Py_RETURN_NONE;
}

/* An awaited waiter's outcome (its value a reference stolen), then its done callbacks scheduled, as
 * Future.set_result / set_exception / cancel (or added to the read's wake-ups); a waiter already done keeps
 * its outcome (0 too). */
static int waiter_finish(Waiter *w, int state, PyObject *value, Wakeups *wakeups) {
    if (w->state != W_PENDING) {
        Py_XDECREF(value);
        return 0;
    }
    w->state = state;
    Py_XSETREF(w->value, value);
    int failed = 0;
    PyObject *callback = w->done_callback, *context = w->done_context, *more = w->more_callbacks;
    w->done_callback = w->done_context = w->more_callbacks = NULL;
    if (callback != NULL && wake(w, callback, context, wakeups) < 0)
        failed = 1;
    for (Py_ssize_t i = 0; more != NULL && !failed && i < PyList_GET_SIZE(more); i++) {
        PyObject *pair = PyList_GET_ITEM(more, i);
        if (wake(w, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), wakeups) < 0)
            failed = 1;
    }
    Py_XDECREF(callback);
    Py_XDECREF(context);
    Py_XDECREF(more);
    return failed ? -1 : 0;
}

/* The broker answered: the latency bookkeeping of CallbackSend.set_result / send(), then a SUCCESS
 * (msg_id and offset given) completes the future with its SendResult (and calls the callback); any other
 * answer goes to the future (awaited) or to the Python hook answered(waiter, answer). */
static PyObject *waiter_answer(Waiter *w, PyObject *answer, PyObject *msg_id, PyObject *offset,
                               Wakeups *wakeups) {
    double latency_ms = (clock_seconds(CLOCK_MONOTONIC) - w->started) * 1000;
    if (latency_ms >= cfg.first_pausing_ms || PyDict_GET_SIZE(w->paused)) { /* faults.paused */
        PyObject *broker = PyObject_GetAttr(w->queue, S[S_BROKER_NAME]);
        if (broker == NULL)
            return NULL;
        PyObject *latency = PyFloat_FromDouble(latency_ms);
        if (latency == NULL) {
            Py_DECREF(broker);
            return NULL;
        }
        PyObject *call_args[3] = {w->faults, broker, latency};
        PyObject *ignored = PyObject_VectorcallMethod(S[S_SUCCEEDED], call_args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                                      NULL);
        Py_DECREF(broker);
        Py_DECREF(latency);
        if (ignored == NULL)
            return NULL;
        Py_DECREF(ignored);
    }
    if (msg_id == NULL) {
        if (w->awaited) {
            Py_INCREF(answer);
            if (waiter_finish(w, W_RESULT, answer, wakeups) < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        return PyObject_CallFunctionObjArgs(cfg.answered, (PyObject *)w, answer, NULL);
    }
    if (w->awaited) {
        if (w->state == W_PENDING)
            Py_XSETREF(w->offset, Py_NewRef(offset));
        return waiter_finish(w, W_SUCCESS, Py_NewRef(msg_id), wakeups) < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *values[5] = {cfg.send_ok, w->unique_id, msg_id, w->queue, offset};
    PyObject *result = new_result(values);
    if (result == NULL)
        return NULL;
    int settled = settle_future(w->future, S_SET_RESULT, result);
    Py_DECREF(result);
    if (settled < 0)
        return NULL;
    if (!w->awaited && w->callback != Py_None) {
        PyObject *ignored = PyObject_CallOneArg(w->callback, w->future);
        if (ignored == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return NULL;
            PyObject *type, *exc, *traceback;
            PyErr_Fetch(&type, &exc, &traceback);
            PyErr_NormalizeException(&type, &exc, &traceback);
            if (traceback != NULL)
                PyException_SetTraceback(exc, traceback);
            Py_XDECREF(type);
            Py_XDECREF(traceback);
            ignored = PyObject_CallFunctionObjArgs(cfg.callback_raised, w->callback, exc, NULL);
            Py_DECREF(exc);
            if (ignored == NULL)
                return NULL;
        }
        Py_DECREF(ignored);
    }
    Py_RETURN_NONE;
}

static PyObject *waiter_set_result(Waiter *w, PyObject *answer) {
    if (PyTuple_CheckExact(answer) && PyTuple_GET_SIZE(answer) == 2) /* a SUCCESS the C lane read */
        return waiter_answer(w, answer, PyTuple_GET_ITEM(answer, 0), PyTuple_GET_ITEM(answer, 1), NULL);
    return waiter_answer(w, answer, NULL, NULL, NULL);
}

static PyObject *waiter_set_exception(Waiter *w, PyObject *error) {
    if (w->awaited) {
        if (PyExceptionClass_Check(error)) { /* as Future.set_exception: a class is instantiated */
            if ((error = PyObject_CallNoArgs(error)) == NULL)
                return NULL;
        } else {
            Py_INCREF(error);
        }
        if (!PyExceptionInstance_Check(error)) {
            Py_DECREF(error);
            PyErr_SetString(PyExc_TypeError, "invalid exception object");
            return NULL;
        }
        if (waiter_finish(w, W_EXCEPTION, error, NULL) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return PyObject_CallFunctionObjArgs(cfg.failed, (PyObject *)w, error, NULL);
}

static PyObject *waiter_done(Waiter *w, PyObject *unused) {
    (void)unused;
    /* a send_async waiter: the connection holds it only until its one answer or failure */
    return PyBool_FromLong(w->awaited && w->state != W_PENDING);
}

/* result(): the outcome, as Future.result */
static PyObject *waiter_result(Waiter *w, PyObject *unused) {
    (void)unused;
    switch (w->awaited ? w->state : W_PENDING) {
    case W_SUCCESS: {
        PyObject *values[5] = {cfg.send_ok, w->unique_id, w->value, w->queue, w->offset};
        PyObject *result = new_result(values);
        if (result == NULL)
            return NULL;
        w->state = W_RESULT;
        Py_SETREF(w->value, result);
        Py_CLEAR(w->offset);
        return Py_NewRef(result);
    }
    case W_RESULT:
        return Py_NewRef(w->value);
    case W_EXCEPTION:
        PyErr_SetObject((PyObject *)Py_TYPE(w->value), w->value);
        return NULL;
    case W_CANCELLED: {
        PyObject *error = w->value == Py_None ? PyObject_CallNoArgs(cancelled_error)
                                              : PyObject_CallOneArg(cancelled_error, w->value);
        if (error != NULL) {
            PyErr_SetObject(cancelled_error, error);
            Py_DECREF(error);
        }
        return NULL;
    }
    default:
        PyErr_SetString(invalid_state_error, "Result is not ready.");
        return NULL;
    }
}

static PyObject *waiter_cancelled(Waiter *w, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(w->state == W_CANCELLED);
}

static PyObject *waiter_get_loop(Waiter *w, PyObject *unused) {
    (void)unused;
    return Py_NewRef(w->loop != NULL ? w->loop : Py_None);
}

/* the context keyword of add_done_callback / the msg of cancel: the one optional argument */
static int one_optional(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t positional,
                        const char *keyword, PyObject **value) {
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    *value = Py_None;
    if (nargs > positional + (keyword[0] == 'm') || nargs < positional || nkw > 1 ||
        (nkw == 1 && nargs > positional) ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), keyword) != 0)) {
        PyErr_Format(PyExc_TypeError, "bad arguments (optional: %s)", keyword);
        return -1;
    }
    if (nargs > positional)
        *value = args[positional];
    else if (nkw == 1)
        *value = args[nargs];
    return 0;
}

static PyObject *waiter_add_done_callback(Waiter *w, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *context;
    if (one_optional(args, nargs, kwnames, 1, "context", &context) < 0)
        return NULL;
    if (!w->awaited) {
        PyErr_SetString(PyExc_TypeError, "a send_async waiter is not a future");
        return NULL;
    }
    if (context == Py_None) {
        if ((context = PyContext_CopyCurrent()) == NULL)
            return NULL;
    } else {
        Py_INCREF(context);
    }
    int failed = 0;
    if (w->state != W_PENDING) {
        failed = schedule(w, args[0], context) < 0;
    } else if (w->done_callback == NULL) {
        w->done_callback = Py_NewRef(args[0]);
        w->done_context = Py_NewRef(context);
    } else {
        PyObject *pair = PyTuple_Pack(2, args[0], context);
        if (pair == NULL || (w->more_callbacks == NULL && (w->more_callbacks = PyList_New(0)) == NULL) ||
            PyList_Append(w->more_callbacks, pair) < 0)
            failed = 1;
        Py_XDECREF(pair);
    }
    Py_DECREF(context);
    return failed ? NULL : Py_NewRef(Py_None);
}

static PyObject *waiter_remove_done_callback(Waiter *w, PyObject *callback) {
    Py_ssize_t removed = 0;
    if (w->done_callback != NULL) {
        int same = PyObject_RichCompareBool(w->done_callback, callback, Py_EQ);
        if (same < 0)
            return NULL;
        if (same) {
            Py_CLEAR(w->done_callback);
            Py_CLEAR(w->done_context);
            removed++;
        }
    }
    if (w->more_callbacks != NULL) {
        PyObject *kept = PyList_New(0);
        if (kept == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(w->more_callbacks); i++) {
            PyObject *pair = PyList_GET_ITEM(w->more_callbacks, i);
            int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(pair, 0), callback, Py_EQ);
            if (same < 0 || (!same && PyList_Append(kept, pair) < 0)) {
                Py_DECREF(kept);
                return NULL;
            }
            removed += same;
        }
        Py_SETREF(w->more_callbacks, kept);
    }
    return PyLong_FromSsize_t(removed);
}

static PyObject *waiter_cancel(Waiter *w, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *msg;
    if (one_optional(args, nargs, kwnames, 0, "msg", &msg) < 0)
        return NULL;
    if (!w->awaited || w->state != W_PENDING)
        Py_RETURN_FALSE;
    if (waiter_finish(w, W_CANCELLED, Py_NewRef(msg), NULL) < 0)
        return NULL;
    Py_RETURN_TRUE;
}

/* await waiter (send()'s): the waiter is its own iterator, as a Future is with its FutureIter: pending, it
 * yields itself marked blocking (the Task adds its wake-up to it; Task.cancel cancels it); done, it returns
 * its result or raises its exception. */
static PyObject *waiter_await(Waiter *w) {
    if (!w->awaited) {
        PyErr_SetString(PyExc_TypeError, "a send_async waiter is not awaitable: await its future");
        return NULL;
    }
    return Py_NewRef(w);
}

/* a StopIteration being raised: its value (0, the error cleared); any other error: -1, left set (CPython's
 * _PyGen_FetchStopIterationValue, which is private, with the public API) */
static int fetch_stop_value(PyObject **pvalue) {
    if (!PyErr_ExceptionMatches(PyExc_StopIteration))
        return -1;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    PyObject *result = value == NULL ? Py_NewRef(Py_None) : PyObject_GetAttrString(value, "value");
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (result == NULL)
        return -1;
    *pvalue = result;
    return 0;
}

/* the continuation's step: sent a value (thrown NULL) or thrown an exception; done, the waiter lets it go */
static PySendResult delegate(Waiter *w, PyObject *value, PyObject *thrown, PyObject **presult) {
    PyObject *inner = Py_NewRef(w->inner);
    PySendResult r;
    if (thrown == NULL) {
        r = PyIter_Send(inner, value, presult);
    } else {
        *presult = PyObject_CallMethodOneArg(inner, S[S_THROW], thrown);
        r = PYGEN_NEXT;
        if (*presult == NULL) {
            r = fetch_stop_value(presult) == 0 ? PYGEN_RETURN : PYGEN_ERROR;
            if (r == PYGEN_ERROR)
                *presult = NULL;
        }
    }
    if (r != PYGEN_NEXT && w->inner == inner)
        Py_CLEAR(w->inner);
    Py_DECREF(inner);
    return r;
}

/* send()'s steps after the lean attempt came back with anything but a SendResult, or an exception was thrown
 * into the await: producer._lean_rest(waiter, thrown) (the retries, the forget on a cancel), then its steps */
static PySendResult waiter_continue(Waiter *w, PyObject *thrown, PyObject **presult) {
    PyObject *args[3] = {w->producer, (PyObject *)w, thrown == NULL ? Py_None : thrown};
    PyObject *coro = PyObject_VectorcallMethod(S[S_LEAN_REST], args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (coro == NULL) {
        *presult = NULL;
        return PYGEN_ERROR;
    }
    Py_XSETREF(w->inner, coro);
    return delegate(w, Py_None, NULL, presult);
}

static PySendResult waiter_send(Waiter *w, PyObject *value, PyObject **presult) {
    if (w->inner != NULL)
        return delegate(w, value, NULL, presult);
    /* else as FutureIter's send: the Task sends None */
    if (w->state == W_PENDING) {
        w->blocking = 1;
        *presult = Py_NewRef(w);
        return PYGEN_NEXT;
    }
    if (w->coro && w->state != W_SUCCESS &&
        !(w->state == W_RESULT && Py_IS_TYPE(w->value, (PyTypeObject *)cfg.result_cls)))
        return waiter_continue(w, NULL, presult);
    *presult = waiter_result(w, NULL);
    return *presult == NULL ? PYGEN_ERROR : PYGEN_RETURN;
}

/* throw(type[, value[, traceback]]) / throw(exception)'s exception instance, as a generator's throw makes it */
static PyObject *exception_of(PyObject *args) {
    PyObject *type, *value = Py_None, *traceback = Py_None, *exc;
    if (!PyArg_UnpackTuple(args, "throw", 1, 3, &type, &value, &traceback))
        return NULL;
    if (PyExceptionInstance_Check(type)) {
        if (value != Py_None) {
            PyErr_SetString(PyExc_TypeError, "instance exception may not have a separate value");
            return NULL;
        }
        exc = Py_NewRef(type);
    } else if (PyExceptionClass_Check(type)) {
        if (PyObject_TypeCheck(value, (PyTypeObject *)type))
            exc = Py_NewRef(value);
        else if (value == Py_None)
            exc = PyObject_CallNoArgs(type);
        else
            exc = PyObject_CallOneArg(type, value);
        if (exc == NULL)
            return NULL;
        if (!PyExceptionInstance_Check(exc)) {
            Py_DECREF(exc);
            PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
            return NULL;
        }
    } else {
        PyErr_SetString(PyExc_TypeError, "exceptions must be classes or instances deriving from BaseException");
        return NULL;
    }
    if (traceback != Py_None && PyException_SetTraceback(exc, traceback) < 0) {
        Py_DECREF(exc);
        return NULL;
    }
    return exc;
}

/* a step's outcome as a generator method returns it: the yielded value, StopIteration(value), or the error */
static PyObject *step_result(PySendResult r, PyObject *result) {
    if (r == PYGEN_RETURN) {
        PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result); /* a tuple result stays one value */
        if (stop != NULL) {
            PyErr_SetObject(PyExc_StopIteration, stop);
            Py_DECREF(stop);
        }
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

/* throw(): raised where the awaiting frame waits, as for a future; a coroutine's waiter (coro) goes on in
 * producer._lean_rest, which handles it as send() handles an exception at its await (a RemoteError retries,
 * anything else forgets the request and propagates) */
static PyObject *waiter_throw(Waiter *w, PyObject *args) {
    PyObject *exc = exception_of(args), *result = NULL;
    if (exc == NULL)
        return NULL;
    PySendResult r;
    if (w->inner != NULL) {
        r = delegate(w, NULL, exc, &result);
    } else if (w->coro) {
        r = waiter_continue(w, exc, &result);
    } else {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(exc);
    return step_result(r, result);
}

/* close(): a coroutine's waiter closed at its await forgets the request, as send() did on GeneratorExit */
static PyObject *waiter_close(Waiter *w, PyObject *unused) {
    (void)unused;
    if (w->inner != NULL) {
        PyObject *inner = w->inner;
        w->inner = NULL;
        PyObject *ignored = PyObject_CallMethodNoArgs(inner, S[S_CLOSE]);
        Py_DECREF(inner);
        if (ignored == NULL)
            return NULL;
        Py_DECREF(ignored);
    } else if (w->coro && w->state == W_PENDING && w->connection != NULL) {
        PyObject *opaque = PyLong_FromLongLong(w->opaque);
        if (opaque == NULL)
            return NULL;
        PyObject *ignored = PyObject_CallMethodOneArg(w->connection, S[S_FORGET], opaque);
        Py_DECREF(opaque);
        if (ignored == NULL)
            return NULL;
        Py_DECREF(ignored);
    }
    Py_RETURN_NONE;
}

static PyObject *waiter_next(Waiter *w) {
    PyObject *result;
    switch (waiter_send(w, Py_None, &result)) {
    case PYGEN_NEXT:
        return result;
    case PYGEN_RETURN: {
        PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
        Py_DECREF(result);
        if (stop != NULL) {
            PyErr_SetObject(PyExc_StopIteration, stop);
            Py_DECREF(stop);
        }
        return NULL;
    }
    default:
        return NULL;
    }
}

static PyAsyncMethods waiter_async = {
    .am_await = (unaryfunc)waiter_await,
    .am_send = (sendfunc)waiter_send,
};

static PyMethodDef waiter_methods[] = {
    {"set_result", (PyCFunction)waiter_set_result, METH_O, "the broker's answer"},
    {"set_exception", (PyCFunction)waiter_set_exception, METH_O, "the request failed"},
    {"done", (PyCFunction)waiter_done, METH_NOARGS, "awaited: as Future.done; else always False"},
    {"result", (PyCFunction)waiter_result, METH_NOARGS, "awaited: as Future.result"},
    {"cancelled", (PyCFunction)waiter_cancelled, METH_NOARGS, "as Future.cancelled"},
    {"get_loop", (PyCFunction)waiter_get_loop, METH_NOARGS, "awaited: the loop of the send"},
    {"add_done_callback", (PyCFunction)(void (*)(void))waiter_add_done_callback, METH_FASTCALL | METH_KEYWORDS,
     "awaited: as Future.add_done_callback"},
    {"remove_done_callback", (PyCFunction)waiter_remove_done_callback, METH_O,
     "as Future.remove_done_callback"},
    {"cancel", (PyCFunction)(void (*)(void))waiter_cancel, METH_FASTCALL | METH_KEYWORDS,
     "awaited: as Future.cancel"},
    {"throw", (PyCFunction)waiter_throw, METH_VARARGS, "as iterated by an awaiting frame (see waiter_throw)"},
    {"close", (PyCFunction)waiter_close, METH_NOARGS, "as iterated by an awaiting frame (see waiter_close)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef waiter_members[] = {
    {"future", T_OBJECT, offsetof(Waiter, future), READONLY, NULL},
    {"callback", T_OBJECT, offsetof(Waiter, callback), READONLY, NULL},
    {"producer", T_OBJECT, offsetof(Waiter, producer), READONLY, NULL},
    {"message", T_OBJECT, offsetof(Waiter, message), READONLY, NULL},
    {"unique_id", T_OBJECT, offsetof(Waiter, unique_id), READONLY, NULL},
    {"queue", T_OBJECT, offsetof(Waiter, queue), READONLY, NULL},
    {"connection", T_OBJECT, offsetof(Waiter, connection), READONLY, NULL},
    {"opaque", T_LONGLONG, offsetof(Waiter, opaque), READONLY, NULL},
    {"started", T_DOUBLE, offsetof(Waiter, started), READONLY, NULL},
    {"_asyncio_future_blocking", T_BOOL, offsetof(Waiter, blocking), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject WaiterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.remoting._clientlane.Waiter",
    .tp_basicsize = sizeof(Waiter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One lean send's waiter in the connection's table (CallbackSend's behaviour, or send()'s future).",
    .tp_dealloc = (destructor)waiter_dealloc,
    .tp_traverse = (traverseproc)waiter_traverse,
    .tp_clear = (inquiry)waiter_clear,
    .tp_methods = waiter_methods,
    .tp_members = waiter_members,
    .tp_as_async = &waiter_async,
    .tp_iternext = (iternextfunc)waiter_next,
};

/* -- Sender -- */

/* a lane's queue as first seen: the queue, its broker_name and queue_id, and the id as a C number when the
 * template's middle_head + its digits is its middle (-1: the middles dict's) */
typedef struct {
    PyObject *queue, *broker, *queue_id;
    long long id;
} SeenQueue;

typedef struct {
    PyObject_HEAD
    PyObject *producer, *lanes, *routes, *faults, *counter, *ids;
    PyObject *paused, *id_counter; /* faults.paused and ids.counter: made once, never replaced */
    PyObject *producer_vars, *ids_vars; /* vars_of(producer) for send_timeout_s, of ids for head_ms and head */
    PyTypeObject *conn_type; /* the connections' type whose attributes conn_names are plain (vars_of) */
    Py_ssize_t plain_below;
    /* the last lane's fields (a Lane's are set once, when it is made; its connections dict changes in place) */
    PyObject *lane, *route, *queues, *template, *connections, *middles, *middle_head;
    int lean;
    /* each of those queues as the lane was first seen: a queue at its index in queues is this one still
     * (pointer equal) or is read anew */
    SeenQueue *seen;
    Py_ssize_t seen_count;
} Sender;

static void forget_queues(Sender *s) {
    for (Py_ssize_t i = 0; i < s->seen_count; i++) {
        Py_XDECREF(s->seen[i].queue);
        Py_XDECREF(s->seen[i].broker);
        Py_XDECREF(s->seen[i].queue_id);
    }
    PyMem_Free(s->seen);
    s->seen = NULL;
    s->seen_count = 0;
}

static int sender_traverse(Sender *s, visitproc visit, void *arg) {
    Py_VISIT(s->producer);
    Py_VISIT(s->lanes);
    Py_VISIT(s->routes);
    Py_VISIT(s->faults);
    Py_VISIT(s->counter);
    Py_VISIT(s->ids);
    Py_VISIT(s->paused);
    Py_VISIT(s->id_counter);
    Py_VISIT(s->producer_vars);
    Py_VISIT(s->ids_vars);
    Py_VISIT(s->conn_type);
    Py_VISIT(s->lane);
    Py_VISIT(s->route);
    Py_VISIT(s->queues);
    Py_VISIT(s->template);
    Py_VISIT(s->connections);
    Py_VISIT(s->middles);
    Py_VISIT(s->middle_head);
    for (Py_ssize_t i = 0; i < s->seen_count; i++) {
        Py_VISIT(s->seen[i].queue);
        Py_VISIT(s->seen[i].broker);
        Py_VISIT(s->seen[i].queue_id);
    }
    return 0;
}

static int sender_clear(Sender *s) {
    Py_CLEAR(s->producer);
    Py_CLEAR(s->lanes);
    Py_CLEAR(s->routes);
    Py_CLEAR(s->faults);
    Py_CLEAR(s->counter);
    Py_CLEAR(s->ids);
    Py_CLEAR(s->paused);
    Py_CLEAR(s->id_counter);
    Py_CLEAR(s->producer_vars);
    Py_CLEAR(s->ids_vars);
    Py_CLEAR(s->conn_type);
    Py_CLEAR(s->lane);
    Py_CLEAR(s->route);
    Py_CLEAR(s->queues);
    Py_CLEAR(s->template);
    Py_CLEAR(s->connections);
    Py_CLEAR(s->middles);
    Py_CLEAR(s->middle_head);
    forget_queues(s);
    return 0;
}

static void sender_dealloc(Sender *s) {
    PyObject_GC_UnTrack(s);
    sender_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *sender_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *producer, *lanes, *routes, *faults, *counter, *ids;
    Py_ssize_t plain_below;
    static char *kwlist[] = {"producer", "lanes", "routes", "faults", "counter", "ids", "plain_below", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!OOOn:Sender", kwlist, &producer, &PyDict_Type, &lanes,
                                     &PyDict_Type, &routes, &faults, &counter, &ids, &plain_below))
        return NULL;
    if (!cfg.ready) {
        PyErr_SetString(PyExc_RuntimeError, "Sender before configure()");
        return NULL;
    }
    Sender *s = (Sender *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    PyObject *fields[6] = {producer, lanes, routes, faults, counter, ids};
    PyObject **slots[6] = {&s->producer, &s->lanes, &s->routes, &s->faults, &s->counter, &s->ids};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(fields[i]);
        *slots[i] = fields[i];
    }
    s->plain_below = plain_below;
    if ((s->paused = PyObject_GetAttr(faults, S[S_PAUSED])) == NULL ||
        (s->id_counter = PyObject_GetAttr(ids, S[S_COUNTER])) == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    static const int producer_names[1] = {S_SEND_TIMEOUT_S}, ids_names[2] = {S_HEAD_MS, S_HEAD};
    if ((s->producer_vars = vars_of(producer, producer_names, 1)) == NULL ||
        (s->ids_vars = vars_of(ids, ids_names, 2)) == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    if (!PyDict_Check(s->paused)) {
        PyErr_SetString(PyExc_TypeError, "Sender: faults.paused must be a dict");
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

typedef struct {
    PyObject *unique_id, *frame, *chosen, *connection, *opaque, *loop, *table, *deadlines, *vars;
} Prepared;

static void prepared_clear(Prepared *p) {
    Py_CLEAR(p->unique_id);
    Py_CLEAR(p->frame);
    Py_CLEAR(p->chosen);
    Py_CLEAR(p->connection);
    Py_CLEAR(p->opaque);
    Py_CLEAR(p->loop);
    Py_CLEAR(p->table);
    Py_CLEAR(p->deadlines);
    Py_CLEAR(p->vars);
}

/* next(iterator); StopIteration raised when it ends */
static PyObject *next_of(PyObject *iterator) {
    PyObject *value = PyIter_Next(iterator);
    if (value == NULL && !PyErr_Occurred())
        PyErr_SetNone(PyExc_StopIteration);
    return value;
}

#define DECLINE 0 /* the Python lean path's: nothing touched */
#define GENERAL 1 /* no lean attempt: the general path's */
#define READY 2

/* _lean_send for a plain message: READY with p filled, DECLINE, GENERAL, or -1 on error. */
/* The cached fields of lane (the lanes' value for the send's topic), read anew when it is another lane. */
static int use_lane(Sender *s, PyObject *lane) {
    if (lane == s->lane)
        return 0;
    PyObject *fields[5] = {NULL, NULL, NULL, NULL, NULL}, *middles = NULL, *middle_head = NULL;
    static const int names[5] = {S_ROUTE, S_QUEUES, S_TEMPLATE, S_CONNECTIONS, S_LEAN};
    for (int i = 0; i < 5; i++)
        if ((fields[i] = PyObject_GetAttr(lane, S[names[i]])) == NULL)
            goto fail;
    if ((middles = PyObject_GetAttr(fields[2], S[S_MIDDLE_BYTES])) == NULL)
        goto fail;
    if ((middle_head = PyObject_GetAttr(fields[2], S[S_MIDDLE_HEAD])) == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            goto fail;
        PyErr_Clear();
    }
    if (middle_head != NULL && !PyBytes_CheckExact(middle_head)) /* the middles dict's, then */
        Py_CLEAR(middle_head);
    int lean = PyObject_IsTrue(fields[4]);
    if (lean < 0)
        goto fail;
    /* a lane the C path cannot read the Python way is not lean here: the Python path serves it */
    if (!PyList_CheckExact(fields[1]) || !PyDict_CheckExact(fields[3]) || !PyDict_Check(middles))
        lean = 0;
    Py_DECREF(fields[4]);
    Py_INCREF(lane);
    Py_XSETREF(s->lane, lane);
    Py_XSETREF(s->route, fields[0]);
    Py_XSETREF(s->queues, fields[1]);
    Py_XSETREF(s->template, fields[2]);
    Py_XSETREF(s->connections, fields[3]);
    Py_XSETREF(s->middles, middles);
    Py_XSETREF(s->middle_head, middle_head);
    s->lean = lean;
    forget_queues(s);
    if (lean) {
        Py_ssize_t n = PyList_GET_SIZE(s->queues);
        if ((s->seen = PyMem_Calloc((size_t)(n ? n : 1), sizeof(SeenQueue))) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *queue = PyList_GET_ITEM(s->queues, i);
            PyObject *broker = PyObject_GetAttr(queue, S[S_BROKER_NAME]), *queue_id = NULL;
            if (broker == NULL || (queue_id = PyObject_GetAttr(queue, S[S_QUEUE_ID])) == NULL) {
                Py_XDECREF(broker);
                return -1;
            }
            Py_INCREF(queue);
            SeenQueue *seen = &s->seen[i];
            seen->queue = queue;
            seen->broker = broker;
            seen->queue_id = queue_id;
            seen->id = -1;
            s->seen_count = i + 1;
            if (i > 0 && broker != s->seen[i - 1].broker) { /* one object for equal names: a lookup by identity */
                int same = PyUnicode_CheckExact(broker) && PyUnicode_CheckExact(s->seen[i - 1].broker)
                               ? PyUnicode_Compare(broker, s->seen[i - 1].broker) == 0
                               : 0;
                if (PyErr_Occurred())
                    return -1;
                if (same) {
                    Py_INCREF(s->seen[i - 1].broker);
                    Py_SETREF(seen->broker, s->seen[i - 1].broker);
                }
            }
            if (s->middle_head != NULL && PyLong_CheckExact(queue_id)) { /* int(queue_id)'s digits, in C */
                int overflow = 0;
                long long id = PyLong_AsLongLongAndOverflow(queue_id, &overflow);
                if (id == -1 && PyErr_Occurred())
                    return -1;
                if (!overflow && id >= 0 && id <= 0x7FFFFFFF)
                    seen->id = id;
            }
        }
    }
    return 0;
fail:
    for (int i = 0; i < 5; i++)
        Py_XDECREF(fields[i]);
    Py_XDECREF(middles);
    Py_XDECREF(middle_head);
    return -1;
}

/* _lean_send for a plain message: READY with p filled, DECLINE, GENERAL, or -1 on error. */
static int prepare(Sender *s, PyObject *message, Prepared *p) {
    memset(p, 0, sizeof *p);
    int outcome = DECLINE;
    PyObject *topic = NULL, *body = NULL, *flag = NULL, *number = NULL, *broker = NULL, *transport = NULL,
             *refs = NULL, *head = NULL, *counter = NULL, *queue_id = NULL, *middle = NULL, *value = NULL,
             *queues = NULL, *template = NULL, *connections = NULL, *middles = NULL;
    long long numbers[4], fast_id = -1;
    int wait, truth;
#define GET(var, owner, name)                                                                                    \
    do {                                                                                                         \
        if ((var = PyObject_GetAttr(owner, S[name])) == NULL)                                                    \
            goto error;                                                                                          \
    } while (0)
#define FALSY(owner, name)                                                                                       \
    do {                                                                                                         \
        if ((truth = truth_of(owner, name)) < 0)                                                                 \
            goto error;                                                                                          \
        if (truth)                                                                                               \
            goto done;                                                                                           \
    } while (0)
    GET(topic, message, S_TOPIC);
    PyObject *lane = PyDict_GetItemWithError(s->lanes, topic); /* borrowed, as the route below */
    if (lane == NULL) {
        if (PyErr_Occurred())
            goto error;
        goto done;
    }
    if (use_lane(s, lane) < 0)
        goto error;
    if (!s->lean)
        goto done;
    PyObject *current = PyDict_GetItemWithError(s->routes, topic);
    if (current != s->route) {
        if (current == NULL && PyErr_Occurred())
            goto error;
        goto done;
    }
    if (PyDict_GET_SIZE(s->paused)) /* a broker is paused: _pick chooses, in Python */
        goto done;
    /* a plain message: no properties, tags, keys or delay level, a bytes body sent as is */
    FALSY(message, S_PROPERTIES);
    FALSY(message, S_TAGS);
    FALSY(message, S_KEYS);
    GET(value, message, S_DELAY_LEVEL);
    if (!PyLong_CheckExact(value) || PyLong_AsLong(value) > 0 || PyErr_Occurred()) {
        PyErr_Clear();
        goto done;
    }
    Py_CLEAR(value);
    GET(body, message, S_BODY);
    if (!PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) >= s->plain_below || PyBytes_GET_SIZE(body) > cfg.max_body)
        goto done;
    GET(flag, message, S_FLAG);
    if (!PyLong_CheckExact(flag))
        goto done;
    int overflow = 0;
    numbers[3] = PyLong_AsLongLongAndOverflow(flag, &overflow);
    if (overflow || (numbers[3] == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        goto done;
    }
    if ((wait = truth_of(message, S_WAIT_STORE_OK)) < 0)
        goto error;
    /* held for this call: a getattr below may run Python that sends on another lane (the cache moves) */
    queues = s->queues;
    template = s->template;
    connections = s->connections;
    middles = s->middles;
    Py_INCREF(queues);
    Py_INCREF(template);
    Py_INCREF(connections);
    Py_INCREF(middles);
    if (PyList_GET_SIZE(queues) == 0)
        goto done;
    /* from here on the state moves as _lean_send moves it */
    outcome = GENERAL;
    if ((number = next_of(s->counter)) == NULL)
        goto error;
    Py_ssize_t at;
    long long n = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (n == -1 && PyErr_Occurred())
        goto error;
    if (!overflow && n >= 0) {
        at = (Py_ssize_t)(n % PyList_GET_SIZE(queues));
    } else {
        PyObject *count = PyLong_FromSsize_t(PyList_GET_SIZE(queues));
        if (count == NULL)
            goto error;
        PyObject *index = PyNumber_Remainder(number, count);
        Py_DECREF(count);
        if (index == NULL)
            goto error;
        at = PyLong_AsSsize_t(index);
        Py_DECREF(index);
        if (at == -1 && PyErr_Occurred())
            goto error;
    }
    Py_CLEAR(number);
#if defined(__GNUC__)
    /* the next send's queue, round robin: its refcount is written then, and with many queues the object has
     * left the cache by its turn (at 1,000 queues the increment below was half of this function's time) */
    Py_ssize_t next = at + 1 < PyList_GET_SIZE(queues) ? at + 1 : 0;
    __builtin_prefetch(PyList_GET_ITEM(queues, next), 1, 3);
    if (next < s->seen_count)
        __builtin_prefetch(&s->seen[next], 0, 3);
#endif
    p->chosen = PyList_GET_ITEM(queues, at);
    Py_INCREF(p->chosen);
    if (at < s->seen_count && s->seen[at].queue == p->chosen) { /* frozen: its fields as first read */
        broker = s->seen[at].broker;
        Py_INCREF(broker);
        if ((fast_id = s->seen[at].id) < 0) { /* else the int (its own object from 256 up) stays untouched */
            queue_id = s->seen[at].queue_id;
            Py_INCREF(queue_id);
        }
    } else {
        GET(broker, p->chosen, S_BROKER_NAME);
        GET(queue_id, p->chosen, S_QUEUE_ID);
    }
    p->connection = PyDict_GetItemWithError(connections, broker);
    if (p->connection == NULL) {
        if (PyErr_Occurred())
            goto error;
        goto done;
    }
    Py_INCREF(p->connection);
    /* the connection's (opaques, loop, lean table, deadline queues, vars(connection)), made by ClientConnection */
    GET(refs, p->connection, S_LEAN_REFS);
    if (!PyTuple_CheckExact(refs) || PyTuple_GET_SIZE(refs) != 5) {
        PyErr_SetString(PyExc_TypeError, "Sender: the connection's _lean_refs must be a 5-tuple");
        goto error;
    }
    if (Py_TYPE(p->connection) != s->conn_type) { /* its attributes send_lean reads must be plain ones */
        static const int conn_names[9] = {S_TRANSPORT, S_SWEEPER, S_SWEEPER_WHEN, S_OUT, S_OUT_BYTES,
                                          S_WRITES_PAUSED, S_FLUSH_SCHEDULED, S_RECEIVING, S_PENDING};
        value = vars_of(p->connection, conn_names, 9);
        if (value == NULL)
            goto error;
        int plain = value != Py_None;
        Py_CLEAR(value);
        if (plain) {
            Py_INCREF(Py_TYPE(p->connection));
            Py_XSETREF(s->conn_type, Py_TYPE(p->connection));
        }
    }
    p->vars = Py_TYPE(p->connection) == s->conn_type && PyDict_CheckExact(PyTuple_GET_ITEM(refs, 4))
                  ? PyTuple_GET_ITEM(refs, 4)
                  : Py_None;
    Py_INCREF(p->vars);
    if ((transport = attr_of(p->vars, p->connection, S_TRANSPORT)) == NULL) /* is_open */
        goto error;
    if (transport == Py_None)
        goto done;
    value = PyObject_CallMethodNoArgs(transport, S[S_IS_CLOSING]);
    if (value == NULL)
        goto error;
    if ((truth = PyObject_IsTrue(value)) != 0) {
        if (truth < 0)
            goto error;
        goto done;
    }
    Py_CLEAR(value);
    numbers[1] = 0; /* sys_flag */
    numbers[2] = (long long)(clock_seconds(CLOCK_REALTIME) * 1000); /* int(time.time() * 1000) */
    number = next_of(PyTuple_GET_ITEM(refs, 0)); /* next_opaque() */
    if (number == NULL)
        goto error;
    numbers[0] = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (numbers[0] == -1 && PyErr_Occurred())
        goto error;
    if (overflow) {
        PyObject *mask = PyLong_FromLong(0x7FFFFFFF);
        if (mask == NULL)
            goto error;
        PyObject *masked = PyNumber_And(number, mask);
        Py_DECREF(mask);
        if (masked == NULL)
            goto error;
        numbers[0] = PyLong_AsLongLong(masked);
        Py_DECREF(masked);
    }
    numbers[0] &= 0x7FFFFFFF;
    Py_CLEAR(number);
    if ((p->opaque = PyLong_FromLongLong(numbers[0])) == NULL)
        goto error;
    if ((value = attr_of(s->ids_vars, s->ids, S_HEAD_MS)) == NULL)
        goto error;
    long long head_ms = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (head_ms == -1 && PyErr_Occurred())
        goto error;
    Py_CLEAR(value);
    if (!overflow && head_ms == numbers[2]) {
        if ((head = attr_of(s->ids_vars, s->ids, S_HEAD)) == NULL)
            goto error;
    } else {
        PyObject *born = PyLong_FromLongLong(numbers[2]);
        if (born == NULL)
            goto error;
        head = PyObject_CallMethodOneArg(s->ids, S[S_HEAD_AT], born);
        Py_DECREF(born);
        if (head == NULL)
            goto error;
    }
    if ((counter = next_of(s->id_counter)) == NULL)
        goto error;
    if (fast_id >= 0) { /* s->middle_head is set (a lane's queues are forgotten when it changes) */
        middle = s->middle_head;
        Py_INCREF(middle);
    } else if ((middle = PyDict_GetItemWithError(middles, queue_id)) != NULL && PyBytes_CheckExact(middle) &&
               PyBytes_GET_SIZE(middle) > 0) {
        Py_INCREF(middle);
    } else {
        if (PyErr_Occurred())
            goto error;
        if ((middle = PyObject_CallMethodOneArg(template, S[S_MIDDLE_OF], queue_id)) == NULL)
            goto error;
    }
    if (!PyUnicode_Check(head) || !PyLong_Check(counter) || !PyBytes_Check(middle)) {
        PyErr_SetString(PyExc_TypeError, "Sender: an id head str, a counter int and a middle bytes");
        goto error;
    }
    if (id_and_frame(cfg.start, middle, fast_id, numbers, wait ? cfg.wait_true : cfg.wait_false, head, counter, body,
                     &p->unique_id, &p->frame) < 0)
        goto error;
    if (p->unique_id == NULL) {
        PyErr_SetString(PyExc_ValueError, "Sender: an id head the C lane cannot render");
        goto error;
    }
    p->loop = PyTuple_GET_ITEM(refs, 1);
    p->table = PyTuple_GET_ITEM(refs, 2);
    p->deadlines = PyTuple_GET_ITEM(refs, 3);
    Py_INCREF(p->loop);
    Py_INCREF(p->table);
    Py_INCREF(p->deadlines);
    outcome = READY;
done:
    Py_XDECREF(queues);
    Py_XDECREF(template);
    Py_XDECREF(connections);
    Py_XDECREF(middles);
    Py_XDECREF(topic);
    Py_XDECREF(body);
    Py_XDECREF(flag);
    Py_XDECREF(number);
    Py_XDECREF(broker);
    Py_XDECREF(transport);
    Py_XDECREF(refs);
    Py_XDECREF(head);
    Py_XDECREF(counter);
    Py_XDECREF(queue_id);
    Py_XDECREF(middle);
    Py_XDECREF(value);
    if (outcome != READY)
        prepared_clear(p);
    return outcome;
error:
    outcome = -1;
    goto done;
#undef GET
#undef FALSY
}

/* queue.popleft() (append: 0) or queue.append(item) (1), a deque's through its method descriptors: no lookup */
static PyObject *deque_type, *deque_methods[2];

static int queue_call(PyObject *queue, int append, PyObject *item) {
    if (deque_type == NULL) {
        PyObject *collections = PyImport_ImportModule("collections");
        if (collections == NULL)
            return -1;
        PyObject *type = PyObject_GetAttrString(collections, "deque");
        Py_DECREF(collections);
        if (type == NULL)
            return -1;
        if ((deque_methods[0] = PyObject_GetAttr(type, S[S_POPLEFT])) == NULL ||
            (deque_methods[1] = PyObject_GetAttr(type, S[S_APPEND])) == NULL) {
            Py_CLEAR(deque_methods[0]);
            Py_DECREF(type);
            return -1;
        }
        deque_type = type;
    }
    PyObject *args[2] = {queue, item}, *ignored;
    if ((PyObject *)Py_TYPE(queue) == deque_type)
        ignored = PyObject_Vectorcall(deque_methods[append], args, 1 + append, NULL);
    else
        ignored = append ? PyObject_CallMethodOneArg(queue, S[S_APPEND], item)
                         : PyObject_CallMethodNoArgs(queue, S[S_POPLEFT]);
    Py_XDECREF(ignored);
    return ignored == NULL ? -1 : 0;
}

/* ClientConnection.send_lean(opaque, code, frame, waiter, timeout) for a connection whose deadline queue of
 * this timeout exists (else that Python method does it all). 0, or -1 on error. */
static int send_lean(PyObject *conn, Prepared *p, PyObject *waiter, PyObject *timeout) {
    int result = -1, truth;
    PyObject *now = NULL, *when = NULL, *value = NULL, *out = NULL, *ignored = NULL;
    PyObject *deadlines, *lean = p->table, *loop = p->loop, *opaque = p->opaque, *frame = p->frame;
#define GET(var, owner, name)                                                                                    \
    do {                                                                                                         \
        if ((var = PyObject_GetAttr(owner, S[name])) == NULL)                                                    \
            goto end;                                                                                            \
    } while (0)
    deadlines = PyDict_Check(p->deadlines) ? PyDict_GetItemWithError(p->deadlines, timeout) : NULL;
    if (deadlines != NULL) /* timeout → request code → queue */
        deadlines = PyDict_Check(deadlines) ? PyDict_GetItemWithError(deadlines, cfg.code) : NULL;
    if (deadlines == NULL || !PyDict_Check(lean)) { /* the first send of this timeout: the Python makes its queue */
        if (PyErr_Occurred())
            goto end;
        PyObject *call_args[6] = {conn, opaque, cfg.code, frame, waiter, timeout};
        ignored = PyObject_VectorcallMethod(S[S_SEND_LEAN], call_args, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        result = ignored == NULL ? -1 : 0;
        goto end;
    }
    /* (deadlines, opaques): two deques in step, of floats and ints the collector does not track */
    if (!PyTuple_CheckExact(deadlines) || PyTuple_GET_SIZE(deadlines) != 2) {
        PyErr_SetString(PyExc_TypeError, "a deadline queue must be a (deadlines, opaques) tuple");
        goto end;
    }
    Py_INCREF(deadlines);
    PyObject *whens = PyTuple_GET_ITEM(deadlines, 0), *opaques = PyTuple_GET_ITEM(deadlines, 1);
    if (PyDict_SetItem(lean, opaque, waiter) < 0)
        goto end_deadlines;
    if ((now = PyObject_CallMethodNoArgs(loop, S[S_TIME])) == NULL || (when = PyNumber_Add(now, timeout)) == NULL)
        goto end_deadlines;
    Py_ssize_t queued = PyObject_Length(opaques);
    if (queued < 0)
        goto end_deadlines;
    if (queued > 0) { /* one answered entry leaves per send: the queue holds ~ those in flight */
        PyObject *first = PySequence_GetItem(opaques, 0);
        if (first == NULL)
            goto end_deadlines;
        int contained = PyDict_Contains(lean, first);
        Py_DECREF(first);
        if (contained < 0 || (!contained && (queue_call(whens, 0, NULL) < 0 || queue_call(opaques, 0, NULL) < 0)))
            goto end_deadlines;
    }
    if (queue_call(whens, 1, when) < 0 || queue_call(opaques, 1, opaque) < 0)
        goto end_deadlines;
    if ((value = attr_of(p->vars, conn, S_SWEEPER)) == NULL)
        goto end_deadlines;
    int arm = value == Py_None;
    Py_CLEAR(value);
    if (!arm) {
        if ((value = attr_of(p->vars, conn, S_SWEEPER_WHEN)) == NULL)
            goto end_deadlines;
        if ((arm = PyObject_RichCompareBool(when, value, Py_LT)) < 0)
            goto end_deadlines;
        Py_CLEAR(value);
    }
    if (arm) {
        if ((value = PyObject_CallMethodOneArg(conn, S[S_ARM_SWEEPER], when)) == NULL)
            goto end_deadlines;
        Py_CLEAR(value);
    }
    if ((out = attr_of(p->vars, conn, S_OUT)) == NULL)
        goto end_deadlines;
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "the out list must be a list");
        goto end_deadlines;
    }
    if (PyList_GET_SIZE(out) == 0 && PyDict_GET_SIZE(lean) == 1) {
        if ((truth = truth_in(p->vars, conn, S_PENDING)) < 0)
            goto end_deadlines;
        if (!truth) { /* the only request in flight: now, not at the turn's end */
            if ((value = attr_of(p->vars, conn, S_TRANSPORT)) == NULL)
                goto end_deadlines;
            ignored = PyObject_CallMethodOneArg(value, S[S_WRITE], frame);
            result = ignored == NULL ? -1 : 0;
            goto end_deadlines;
        }
    }
    if (PyList_Append(out, frame) < 0)
        goto end_deadlines;
    if ((value = attr_of(p->vars, conn, S_OUT_BYTES)) == NULL)
        goto end_deadlines;
    Py_ssize_t out_bytes = PyLong_AsSsize_t(value);
    if (out_bytes == -1 && PyErr_Occurred())
        goto end_deadlines;
    Py_CLEAR(value);
    out_bytes += PyBytes_GET_SIZE(frame);
    if ((value = PyLong_FromSsize_t(out_bytes)) == NULL || set_in(p->vars, conn, S_OUT_BYTES, value) < 0)
        goto end_deadlines;
    Py_CLEAR(value);
    Py_ssize_t frames = PyList_GET_SIZE(out);
    int flush = (frames >= cfg.chunk_frames && PyDict_GET_SIZE(lean) - frames < cfg.busy_frames) ||
                out_bytes >= cfg.coalesce_bytes;
    if (!flush && (flush = truth_in(p->vars, conn, S_WRITES_PAUSED)) < 0)
        goto end_deadlines;
    if (flush) {
        ignored = PyObject_CallMethodNoArgs(conn, S[S_FLUSH_OUT]);
        result = ignored == NULL ? -1 : 0;
        goto end_deadlines;
    }
    if ((truth = truth_in(p->vars, conn, S_FLUSH_SCHEDULED)) < 0)
        goto end_deadlines;
    if (!truth) {
        if ((truth = truth_in(p->vars, conn, S_RECEIVING)) < 0)
            goto end_deadlines;
        if (!truth) {
            if (set_in(p->vars, conn, S_FLUSH_SCHEDULED, Py_True) < 0)
                goto end_deadlines;
            GET(value, conn, S_FLUSH_OUT);
            ignored = PyObject_CallMethodOneArg(loop, S[S_CALL_SOON], value);
            result = ignored == NULL ? -1 : 0;
            goto end_deadlines;
        }
    }
    result = 0;
end_deadlines:
    Py_DECREF(deadlines);
end:
    Py_XDECREF(now);
    Py_XDECREF(when);
    Py_XDECREF(value);
    Py_XDECREF(out);
    Py_XDECREF(ignored);
    return result;
#undef GET
}

/* prepare, then the waiter (awaited: a new future of the connection's loop) into the connection's table */
static PyObject *sender_go(Sender *s, PyObject *message, PyObject *future, PyObject *callback, int awaited) {
    Prepared p;
    int outcome = prepare(s, message, &p);
    if (outcome < 0)
        return NULL;
    if (outcome == DECLINE)
        Py_RETURN_NONE;
    if (outcome == GENERAL)
        Py_RETURN_FALSE;
    PyObject *timeout = NULL;
    Waiter *w = NULL;
    if (!awaited && future == Py_None) {
        if ((future = PyObject_CallMethodNoArgs(p.loop, S[S_CREATE_FUTURE])) == NULL)
            goto fail;
    } else {
        Py_INCREF(future);
    }
    if ((w = PyObject_GC_New(Waiter, &WaiterType)) == NULL) {
        Py_DECREF(future);
        goto fail;
    }
    w->future = future; /* awaited: None, the waiter is the future */
    w->loop = Py_NewRef(p.loop);
    w->value = w->offset = w->done_callback = w->done_context = w->more_callbacks = w->inner = NULL;
    w->coro = 0;
    w->state = W_PENDING;
    w->blocking = 0;
    Py_INCREF(callback);
    w->callback = callback;
    Py_INCREF(s->producer);
    w->producer = s->producer;
    Py_INCREF(message);
    w->message = message;
    w->unique_id = p.unique_id;
    w->queue = p.chosen;
    w->connection = p.connection;
    p.unique_id = p.chosen = p.connection = NULL;
    Py_INCREF(s->faults);
    w->faults = s->faults;
    Py_INCREF(s->paused);
    w->paused = s->paused;
    w->opaque = PyLong_AsLongLong(p.opaque);
    w->awaited = awaited;
    w->started = clock_seconds(CLOCK_MONOTONIC);
    PyObject_GC_Track(w);
    if ((timeout = attr_of(s->producer_vars, s->producer, S_SEND_TIMEOUT_S)) == NULL)
        goto fail;
    if (send_lean(w->connection, &p, (PyObject *)w, timeout) < 0)
        goto fail;
    Py_DECREF(timeout);
    prepared_clear(&p);
    if (awaited)
        return (PyObject *)w;
    Py_INCREF(w->future);
    Py_DECREF(w);
    return future;
fail:
    Py_XDECREF(timeout);
    Py_XDECREF(w);
    prepared_clear(&p);
    return NULL;
}

static PyObject *sender_send(Sender *s, PyObject *message) { return sender_go(s, message, Py_None, Py_None, 1); }

/* ---- SendCall: AsyncProducer.send()'s coroutine for a plain send ---------------------------------------
 * The lean attempt starts where a coroutine's body would: at the first step (the await, or the Task's first
 * send), not when send() is called. Awaited, it hands the awaiting frame the Waiter as its iterator and is
 * gone: the send in flight is the Waiter alone, with no coroutine of ~480 bytes beside it (a Task resumes
 * the caller's frame straight into the Waiter). A Task of its own (create_task, gather) drives it through
 * send / throw / close. When the C lane leaves the send to the Python steps (None, False), they run as
 * producer._send(message, ..., made) does, told what the lane found. */
typedef struct {
    PyObject_HEAD
    PyObject *sender, *message;
    PyObject *it; /* once started: the Waiter, or the Python steps' await iterator; NULL again when done */
    int started;
} SendCall;

static PyTypeObject SendCallType;

static int sendcall_traverse(SendCall *c, visitproc visit, void *arg) {
    Py_VISIT(c->sender);
    Py_VISIT(c->message);
    Py_VISIT(c->it);
    return 0;
}

static int sendcall_clear(SendCall *c) {
    Py_CLEAR(c->sender);
    Py_CLEAR(c->message);
    Py_CLEAR(c->it);
    return 0;
}

/* as a coroutine never awaited: nothing was sent, and the caller hears of it */
static void sendcall_finalize(SendCall *c) {
    if (c->started)
        return;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (PyErr_WarnEx(PyExc_RuntimeWarning, "coroutine 'AsyncProducer.send' was never awaited", 1) < 0)
        PyErr_WriteUnraisable((PyObject *)c);
    PyErr_Restore(type, value, traceback);
}

static void sendcall_dealloc(SendCall *c) {
    if (PyObject_CallFinalizerFromDealloc((PyObject *)c) < 0)
        return; /* the warning's handler kept it */
    PyObject_GC_UnTrack(c);
    sendcall_clear(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int sendcall_start(SendCall *c) {
    c->started = 1;
    Sender *s = (Sender *)c->sender;
    PyObject *made = sender_go(s, c->message, Py_None, Py_None, 1);
    if (made == NULL)
        return -1;
    if (Py_IS_TYPE(made, &WaiterType)) {
        ((Waiter *)made)->coro = 1;
        c->it = made;
        return 0;
    }
    PyObject *args[7] = {s->producer, c->message, Py_None, Py_None, Py_None, Py_False, made};
    PyObject *coro = PyObject_VectorcallMethod(S[S_SEND_REST], args, 7 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(made);
    if (coro == NULL)
        return -1;
    c->it = PyObject_CallMethodNoArgs(coro, S[S_AWAIT]);
    Py_DECREF(coro);
    return c->it == NULL ? -1 : 0;
}

static PyObject *sendcall_await(SendCall *c) {
    if (c->started) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return NULL;
    }
    if (sendcall_start(c) < 0)
        return NULL;
    PyObject *it = c->it;
    c->it = NULL; /* the awaiting frame drives it now */
    return it;
}

static PySendResult sendcall_send(SendCall *c, PyObject *value, PyObject **presult) {
    if (!c->started) {
        if (sendcall_start(c) < 0) {
            *presult = NULL;
            return PYGEN_ERROR;
        }
    } else if (c->it == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        *presult = NULL;
        return PYGEN_ERROR;
    }
    PyObject *it = Py_NewRef(c->it);
    PySendResult r = PyIter_Send(it, value, presult);
    if (r != PYGEN_NEXT && c->it == it)
        Py_CLEAR(c->it);
    Py_DECREF(it);
    return r;
}

static PyObject *sendcall_send_method(SendCall *c, PyObject *value) {
    PyObject *result = NULL;
    PySendResult r = sendcall_send(c, value, &result);
    return step_result(r, result);
}

static PyObject *sendcall_throw(SendCall *c, PyObject *args) {
    if (c->it == NULL) { /* not started (a coroutine's body never ran) or done: raised here */
        c->started = 1;
        PyObject *exc = exception_of(args);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    PyObject *it = Py_NewRef(c->it), *result = NULL;
    PyObject *throw = PyObject_GetAttr(it, S[S_THROW]);
    if (throw != NULL) {
        result = PyObject_Call(throw, args, NULL);
        Py_DECREF(throw);
    }
    if (result == NULL && c->it == it)
        Py_CLEAR(c->it);
    Py_DECREF(it);
    return result;
}

static PyObject *sendcall_close(SendCall *c, PyObject *unused) {
    (void)unused;
    c->started = 1;
    PyObject *it = c->it;
    if (it == NULL)
        Py_RETURN_NONE;
    c->it = NULL;
    PyObject *ignored = PyObject_CallMethodNoArgs(it, S[S_CLOSE]);
    Py_DECREF(it);
    if (ignored == NULL)
        return NULL;
    Py_DECREF(ignored);
    Py_RETURN_NONE;
}

static PyAsyncMethods sendcall_async = {
    .am_await = (unaryfunc)sendcall_await,
    .am_send = (sendfunc)sendcall_send,
};

static PyMethodDef sendcall_methods[] = {
    {"send", (PyCFunction)sendcall_send_method, METH_O, "as a coroutine's send"},
    {"throw", (PyCFunction)sendcall_throw, METH_VARARGS, "as a coroutine's throw"},
    {"close", (PyCFunction)sendcall_close, METH_NOARGS, "as a coroutine's close"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SendCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.remoting._clientlane.SendCall",
    .tp_basicsize = sizeof(SendCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "AsyncProducer.send()'s coroutine for a plain send (a collections.abc.Coroutine).",
    .tp_dealloc = (destructor)sendcall_dealloc,
    .tp_finalize = (destructor)sendcall_finalize,
    .tp_traverse = (traverseproc)sendcall_traverse,
    .tp_clear = (inquiry)sendcall_clear,
    .tp_methods = sendcall_methods,
    .tp_as_async = &sendcall_async,
};

static PyObject *sender_coroutine(Sender *s, PyObject *message) {
    SendCall *c = PyObject_GC_New(SendCall, &SendCallType);
    if (c == NULL)
        return NULL;
    c->sender = Py_NewRef(s);
    c->message = Py_NewRef(message);
    c->it = NULL;
    c->started = 0;
    PyObject_GC_Track(c);
    return (PyObject *)c;
}

static PyObject *sender_start(Sender *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "start(message, future, callback)");
        return NULL;
    }
    return sender_go(s, args[0], args[1], args[2], 0);
}

static PyObject *sender_prepare(Sender *s, PyObject *message) {
    Prepared p;
    int outcome = prepare(s, message, &p);
    if (outcome < 0)
        return NULL;
    if (outcome == DECLINE)
        Py_RETURN_NONE;
    if (outcome == GENERAL)
        Py_RETURN_FALSE;
    PyObject *made = PyTuple_Pack(5, p.unique_id, p.frame, p.chosen, p.connection, p.opaque);
    prepared_clear(&p);
    return made;
}

static PyMethodDef sender_methods[] = {
    {"coroutine", (PyCFunction)sender_coroutine, METH_O,
     "coroutine(message) -> AsyncProducer.send()'s coroutine: the lean attempt at its first step (see SendCall)"},
    {"send", (PyCFunction)sender_send, METH_O,
     "send(message) -> Waiter (a future: await it for a SendResult, another answer, or the request's error) | None | "
     "False"},
    {"start", (PyCFunction)(void (*)(void))sender_start, METH_FASTCALL,
     "start(message, future | None, callback | None) -> future | None | False"},
    {"prepare", (PyCFunction)sender_prepare, METH_O,
     "prepare(message) -> (unique_id, frame, queue, connection, opaque) | None | False, nothing sent"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.remoting._clientlane.Sender",
    .tp_basicsize = sizeof(Sender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Sender(producer, lanes, routes, faults, counter, ids, plain_below): a producer's lean sends in C.",
    .tp_new = sender_new,
    .tp_dealloc = (destructor)sender_dealloc,
    .tp_traverse = (traverseproc)sender_traverse,
    .tp_clear = (inquiry)sender_clear,
    .tp_methods = sender_methods,
};

static PyMethodDef methods[] = {
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     "frame(start, middle, opaque, sys_flag, born_ms, flag, properties, body) -> bytes | None"},
    {"send_frame", (PyCFunction)(void (*)(void))send_frame, METH_FASTCALL,
     "send_frame(start, middle, opaque, sys_flag, born_ms, flag, prefix, head, counter, body)"
     " -> (unique_id, frame) | None"},
    {"slotted", (PyCFunction)(void (*)(void))slotted, METH_FASTCALL,
     "slotted(cls, names, *values) -> cls instance with those slots set, __init__ not called"},
    {"set_never_done", set_never_done, METH_O, "set_never_done(cls): deliver() skips done() for cls's waiters"},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(result_cls, result_fields, send_ok, start, wait_true, wait_false, code, answered, failed, "
     "callback_raised, first_pausing_ms, chunk_frames, busy_frames, coalesce_bytes, max_frame_bytes)"},
    {"deliver", (PyCFunction)(void (*)(void))deliver, METH_FASTCALL,
     "deliver(data, position, lean) -> position after the SUCCESS answers delivered"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_clientlane", NULL, -1, methods};

PyMODINIT_FUNC PyInit__clientlane(void) {
    str_done = PyUnicode_InternFromString("done");
    str_set_result = PyUnicode_InternFromString("set_result");
    str_context = PyUnicode_InternFromString("context");
    if (str_done == NULL || str_set_result == NULL || str_context == NULL ||
        (context_kwnames = PyTuple_Pack(1, str_context)) == NULL)
        return NULL;
    PyObject *exceptions = PyImport_ImportModule("asyncio.exceptions");
    if (exceptions == NULL)
        return NULL;
    cancelled_error = PyObject_GetAttrString(exceptions, "CancelledError");
    invalid_state_error = PyObject_GetAttrString(exceptions, "InvalidStateError");
    Py_DECREF(exceptions);
    if (cancelled_error == NULL || invalid_state_error == NULL)
        return NULL;
    for (int i = 0; i < S_COUNT; i++)
        if ((S[i] = PyUnicode_InternFromString(NAMES[i])) == NULL)
            return NULL;
    if (PyType_Ready(&WaiterType) < 0 || PyType_Ready(&SenderType) < 0 || PyType_Ready(&SendCallType) < 0)
        return NULL;
    static PyMethodDef run_wakeups_def = {"run_wakeups", run_wakeups, METH_O,
                                          "run_wakeups([loop, waiter, callback, context, ...]): one read's wake-ups"};
    if ((run_wakeups_fn = PyCFunction_New(&run_wakeups_def, NULL)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WaiterType);
    Py_INCREF(&SenderType);
    Py_INCREF(&SendCallType);
    if (PyModule_AddObject(m, "Waiter", (PyObject *)&WaiterType) < 0 ||
        PyModule_AddObject(m, "Sender", (PyObject *)&SenderType) < 0 ||
        PyModule_AddObject(m, "SendCall", (PyObject *)&SendCallType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
