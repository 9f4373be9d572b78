/* sparkmq.remoting._clientlane: the producer's lean send path in C (reference: the Python it replaces).
 *
 * frame()   : SendTemplate.frame (sparkmq/client/send_frames.py): one SEND_MESSAGE_V2 frame from the
 *             template's fixed parts and the send's own fields, properties JSON-escaped as
 *             json.encoder.encode_basestring does, in one allocation.
 * send_frame(): a plain send's unique id (SendIds.at: the head text of the millisecond and the counter's
 *             4 uppercase hex digits) and frame() of Message.properties_text's prefix + that id, in one call.
 * slotted() : cls(*values) of a class whose __init__ only stores its fields (SendResult, CallbackSend),
 *             without the Python __init__ frame; set_never_done(cls): deliver() does not ask such waiters done().
 * deliver() : the front of ClientConnection.data_received (sparkmq/remoting/client_connection.py): walks
 *             whole bodiless response frames whose JSON header is a SUCCESS answer of the strict compact
 *             shape below, pops each one's waiter from the lean table and calls waiter.set_result(
 *             (msgId, queueOffset)); it stops at the first frame it does not take, which the Python
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

/* The frame of start, opaque, middle, sys_flag, born_ms, flag and the properties (the text of p1 then p2,
 * UTF-8, JSON-escaped as encode_basestring does), then body; None when the Python path must render it. */
static PyObject *build_frame(PyObject *start, PyObject *middle, const long long numbers[4], const char *p1,
                             Py_ssize_t n1, const char *p2, Py_ssize_t n2, PyObject *body) {
    Py_ssize_t escaped = 0;
    for (int part = 0; part < 2; part++) {
        const char *props = part ? p2 : p1;
        Py_ssize_t props_len = part ? n2 : n1;
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
    Py_ssize_t start_len = PyBytes_GET_SIZE(start), middle_len = PyBytes_GET_SIZE(middle);
    Py_ssize_t body_len = PyBytes_GET_SIZE(body);
    Py_ssize_t most = start_len + middle_len + 4 * 21 + (sizeof G - 1) + (sizeof H - 1) + (sizeof I - 1) + escaped +
                      (sizeof END - 1);
    if (most + body_len > (Py_ssize_t)UINT32_MAX - 16)
        Py_RETURN_NONE; /* the Python path raises FrameTooLargeError */
    PyObject *result = PyBytes_FromStringAndSize(NULL, 8 + most + body_len);
    if (result == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(result), *p = out + 8;
    memcpy(p, PyBytes_AS_STRING(start), start_len);
    p += start_len;
    p += put_int(p, numbers[0]);
    memcpy(p, PyBytes_AS_STRING(middle), middle_len);
    p += middle_len;
    p += put_int(p, numbers[1]);
    memcpy(p, G, sizeof G - 1);
    p += sizeof G - 1;
    p += put_int(p, numbers[2]);
    memcpy(p, H, sizeof H - 1);
    p += sizeof H - 1;
    p += put_int(p, numbers[3]);
    memcpy(p, I, sizeof I - 1);
    p += sizeof I - 1;
    for (int part = 0; part < 2; part++) {
        const char *props = part ? p2 : p1;
        Py_ssize_t props_len = part ? n2 : n1;
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
    Py_ssize_t header_len = p - (out + 8);
    memcpy(p, PyBytes_AS_STRING(body), body_len);
    uint32_t length = (uint32_t)(LENGTH_FIELD + header_len + body_len), hl = (uint32_t)header_len;
    unsigned char *q = (unsigned char *)out;
    q[0] = (unsigned char)(length >> 24); q[1] = (unsigned char)(length >> 16);
    q[2] = (unsigned char)(length >> 8); q[3] = (unsigned char)length;
    q[4] = (unsigned char)(hl >> 24); q[5] = (unsigned char)(hl >> 16);
    q[6] = (unsigned char)(hl >> 8); q[7] = (unsigned char)hl;
    if (_PyBytes_Resize(&result, 8 + header_len + body_len) < 0)
        return NULL;
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
    return build_frame(args[0], args[1], numbers, props, props_len, NULL, 0, args[7]);
}

static const char UPPER_HEX[] = "0123456789ABCDEF";

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
    PyObject *head = args[7];
    if (!taken || !PyUnicode_IS_ASCII(head) || PyUnicode_GET_LENGTH(head) > 60)
        Py_RETURN_NONE;
    Py_ssize_t prefix_len;
    const char *prefix = PyUnicode_AsUTF8AndSize(args[6], &prefix_len);
    if (prefix == NULL)
        return NULL;
    /* the counter's low 16 bits, as `& 0xFFFF` of any int (two's complement) */
    unsigned long counter = PyLong_AsUnsignedLongMask(args[8]);
    if (counter == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t head_len = PyUnicode_GET_LENGTH(head);
    PyObject *unique_id = PyUnicode_New(head_len + 4, 127);
    if (unique_id == NULL)
        return NULL;
    char *id = (char *)PyUnicode_DATA(unique_id);
    memcpy(id, PyUnicode_DATA(head), head_len);
    for (int i = 0; i < 4; i++)
        id[head_len + i] = UPPER_HEX[(counter >> (12 - 4 * i)) & 15];
    PyObject *whole = build_frame(args[0], args[1], numbers, prefix, prefix_len, id, head_len + 4, args[9]);
    if (whole == NULL || whole == Py_None) {
        Py_DECREF(unique_id);
        return whole;
    }
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
static PyObject *slotted(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != nargs - 2) {
        PyErr_SetString(PyExc_TypeError, "slotted(cls, names: tuple, *values) takes one value per name");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs - 2; i++) {
        if (PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(args[1], i), args[2 + i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
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
    return PyLong_FromSsize_t(position);
fail:
    Py_DECREF(data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     "frame(start, middle, opaque, sys_flag, born_ms, flag, properties, body) -> bytes | None"},
    {"send_frame", (PyCFunction)(void (*)(void))send_frame, METH_FASTCALL,
     "send_frame(start, middle, opaque, sys_flag, born_ms, flag, prefix, head, counter, body)"
     " -> (unique_id, frame) | None"},
    {"slotted", (PyCFunction)(void (*)(void))slotted, METH_FASTCALL,
     "slotted(cls, names, *values) -> cls instance with those slots set, __init__ not called"},
    {"set_never_done", set_never_done, METH_O, "set_never_done(cls): deliver() skips done() for cls's waiters"},
    {"deliver", (PyCFunction)(void (*)(void))deliver, METH_FASTCALL,
     "deliver(data, position, lean) -> position after the SUCCESS answers delivered"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_clientlane", NULL, -1, methods};

PyMODINIT_FUNC PyInit__clientlane(void) {
    str_done = PyUnicode_InternFromString("done");
    str_set_result = PyUnicode_InternFromString("set_result");
    if (str_done == NULL || str_set_result == NULL)
        return NULL;
    return PyModule_Create(&module);
}
