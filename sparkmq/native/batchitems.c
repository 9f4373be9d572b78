/* The SEND_BATCH_MESSAGE body's items (size | magic 0 | crc 0 | flag | body length | body | int16 properties
 * length | properties) in one call each way: the producer's encode and the broker's decode of a batch.
 *
 * The reference is sparkmq/message/batch.py (encode_batch_items, decode_batch_items): these return the same
 * bytes and columns, and None for anything they do not handle (a non-bytes item, properties over the limit,
 * a malformed item), so that the Python path raises its precise error. tests/native/test_batch_items.py
 * compares both under hypothesis. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ITEM_FIXED_BYTES 22 /* the 20-byte head and the int16 properties length */

static long max_properties_bytes = 32767;

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static int32_t get_be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

/* encode(bodies, properties, flags or None) -> bytes | None */
static PyObject *encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "encode(bodies, properties, flags)");
        return NULL;
    }
    PyObject *bodies = args[0], *props = args[1], *flags = args[2];
    if (!(PyList_CheckExact(bodies) || PyTuple_CheckExact(bodies)) ||
        !(PyList_CheckExact(props) || PyTuple_CheckExact(props)) ||
        !(flags == Py_None || PyList_CheckExact(flags) || PyTuple_CheckExact(flags)))
        Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bodies);
    if (PySequence_Fast_GET_SIZE(props) < n || (flags != Py_None && PySequence_Fast_GET_SIZE(flags) < n))
        Py_RETURN_NONE; /* the reference raises IndexError */
    PyObject **body_items = PySequence_Fast_ITEMS(bodies), **prop_items = PySequence_Fast_ITEMS(props);
    PyObject **flag_items = flags == Py_None ? NULL : PySequence_Fast_ITEMS(flags);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = body_items[i], *prop = prop_items[i];
        if (!PyBytes_CheckExact(body) || !PyBytes_CheckExact(prop))
            Py_RETURN_NONE;
        Py_ssize_t size = ITEM_FIXED_BYTES + PyBytes_GET_SIZE(body) + PyBytes_GET_SIZE(prop);
        if (PyBytes_GET_SIZE(prop) > max_properties_bytes || size > INT32_MAX)
            Py_RETURN_NONE;
        if (flag_items != NULL && !PyLong_CheckExact(flag_items[i]))
            Py_RETURN_NONE;
        total += size;
        if (total > PY_SSIZE_T_MAX / 2)
            Py_RETURN_NONE;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = body_items[i], *prop = prop_items[i];
        Py_ssize_t body_len = PyBytes_GET_SIZE(body), prop_len = PyBytes_GET_SIZE(prop);
        long flag = 0;
        if (flag_items != NULL) {
            int overflow = 0;
            flag = PyLong_AsLongAndOverflow(flag_items[i], &overflow);
            if (overflow || flag < INT32_MIN || flag > INT32_MAX) {
                Py_DECREF(out);
                Py_RETURN_NONE; /* struct.error in the reference */
            }
        }
        put_be32(p, (uint32_t)(ITEM_FIXED_BYTES + body_len + prop_len));
        memset(p + 4, 0, 8); /* magic, body crc */
        put_be32(p + 12, (uint32_t)(int32_t)flag);
        put_be32(p + 16, (uint32_t)body_len);
        memcpy(p + 20, PyBytes_AS_STRING(body), body_len);
        p += 20 + body_len;
        p[0] = (unsigned char)(prop_len >> 8);
        p[1] = (unsigned char)prop_len;
        memcpy(p + 2, PyBytes_AS_STRING(prop), prop_len);
        p += 2 + prop_len;
    }
    return out;
}

/* decode(data) -> (bodies, properties, flags) | None (a malformed item: the reference raises) */
static PyObject *decode(PyObject *self, PyObject *data) {
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *base = view.buf;
    Py_ssize_t end = view.len, pos = 0, count = 0;
    PyObject *result = NULL, *bodies = NULL, *props = NULL, *flags = NULL;
    /* first pass: validate and count, exactly as the reference checks */
    while (pos < end) {
        if (end - pos < ITEM_FIXED_BYTES)
            goto decline;
        int32_t size = get_be32(base + pos), body_len = get_be32(base + pos + 16);
        if (size < ITEM_FIXED_BYTES || size > end - pos || body_len < 0 || ITEM_FIXED_BYTES + (int64_t)body_len > size)
            goto decline;
        Py_ssize_t body_end = pos + 20 + body_len;
        int16_t prop_len = (int16_t)(((unsigned)base[body_end] << 8) | base[body_end + 1]);
        if (prop_len < 0 || ITEM_FIXED_BYTES + (int64_t)body_len + prop_len != size)
            goto decline;
        pos += size;
        count++;
    }
    if ((bodies = PyList_New(count)) == NULL || (props = PyList_New(count)) == NULL ||
        (flags = PyList_New(count)) == NULL)
        goto done;
    pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t size = get_be32(base + pos), flag = get_be32(base + pos + 12), body_len = get_be32(base + pos + 16);
        Py_ssize_t body_end = pos + 20 + body_len;
        PyObject *item = PyBytes_FromStringAndSize((const char *)base + pos + 20, body_len);
        if (item == NULL)
            goto done;
        PyList_SET_ITEM(bodies, i, item);
        if ((item = PyBytes_FromStringAndSize((const char *)base + body_end + 2, size - ITEM_FIXED_BYTES - body_len)) ==
            NULL)
            goto done;
        PyList_SET_ITEM(props, i, item);
        if ((item = PyLong_FromLong(flag)) == NULL)
            goto done;
        PyList_SET_ITEM(flags, i, item);
        pos += size;
    }
    result = PyTuple_Pack(3, bodies, props, flags);
done:
    Py_XDECREF(bodies);
    Py_XDECREF(props);
    Py_XDECREF(flags);
    PyBuffer_Release(&view);
    return result;
decline:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* configure(max_properties_bytes): the limit encode declines above (the reference raises) */
static PyObject *configure(PyObject *self, PyObject *limit) {
    long value = PyLong_AsLong(limit);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    max_properties_bytes = value;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(bodies, properties, flags) -> bytes | None: encode_batch_items' bytes, or None to leave it to Python"},
    {"decode", (PyCFunction)decode, METH_O,
     "decode(data) -> (bodies, properties, flags) | None: decode_batch_items' columns, None for a malformed body"},
    {"configure", (PyCFunction)configure, METH_O, "configure(max_properties_bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batchitems", NULL, -1, methods};

PyMODINIT_FUNC PyInit__batchitems(void) { return PyModule_Create(&module); }
