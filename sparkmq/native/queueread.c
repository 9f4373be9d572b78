/* sparkmq.native._queueread: one queue read of the store (store/reads.py read_queue) in C.
 *
 * gather() walks a read's ConsumeQueue units (20 bytes: physical offset, size, tags code, big
 * endian), applies read_queue's rules (blank units skipped, units below the CommitLog's minimum
 * counted as removed, the tags filter, the count and byte limits, one record always) and copies
 * the records it takes, run by run, from one CommitLog segment into one bytes. read_queue's numpy
 * path is the reference; tests/native/test_queueread.py compares both. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define UNIT 20
#define BLANK_UNIT_SIZE 2147483647

static int64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t get32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static PyObject *int64_bytes(const int64_t *values, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)values, n * (Py_ssize_t)sizeof(int64_t));
}

/* gather(units, offset, cl_min, tags_codes | None, max_count, max_bytes, segment_base, segment | None,
 *        segment_write_position)
 * -> (scanned, removed, taken, body | None, queue_offsets, physical_offsets, sizes)  the read
 *  | int: the physical offset of the first record taken, when ``segment`` does not hold it
 *  | None: the records span segments (read_queue's numpy path serves that read) */
static PyObject *gather(PyObject *module, PyObject *args) {
    Py_buffer units, segment = {0};
    long long offset, cl_min, segment_base, write_position;
    Py_ssize_t max_count, max_bytes;
    PyObject *tags, *segment_obj;
    if (!PyArg_ParseTuple(args, "y*LLOnnLOL", &units, &offset, &cl_min, &tags, &max_count, &max_bytes, &segment_base,
                          &segment_obj, &write_position))
        return NULL;
    PyObject *result = NULL, *tag_list = NULL;
    int64_t *columns = NULL;
    int64_t *tag_values = NULL;
    Py_ssize_t tag_count = 0;
    if (segment_obj != Py_None && PyObject_GetBuffer(segment_obj, &segment, PyBUF_SIMPLE) < 0) goto done;
    if (tags != Py_None) {
        tag_list = PySequence_Fast(tags, "tags_codes must be iterable");
        if (tag_list == NULL) goto done;
        tag_count = PySequence_Fast_GET_SIZE(tag_list);
        tag_values = PyMem_Malloc((size_t)(tag_count + 1) * sizeof(int64_t));
        if (tag_values == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t t = 0; t < tag_count; t++) {
            tag_values[t] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(tag_list, t));
            if (tag_values[t] == -1 && PyErr_Occurred()) goto done;
        }
    }
    const unsigned char *u = units.buf;
    Py_ssize_t count = units.len / UNIT, limit = max_count < count ? max_count : count;
    if (limit <= 0) { /* nothing to take: read_queue's own path says what that means */
        result = Py_NewRef(Py_None);
        goto done;
    }
    columns = PyMem_Malloc((size_t)(3 * (limit + 1)) * sizeof(int64_t));
    if (columns == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *rows = columns, *physical = columns + limit + 1, *sizes = columns + 2 * (limit + 1);
    int removed = 0;
    Py_ssize_t taken = 0, matched_more = 0, scanned = count;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *unit = u + i * UNIT;
        int32_t size = get32(unit + 8);
        if (size == BLANK_UNIT_SIZE) continue;
        int64_t at = get64(unit);
        if (at < cl_min) {
            removed = 1;
            continue;
        }
        if (tag_values != NULL) {
            int64_t code = get64(unit + 12);
            Py_ssize_t t = 0;
            while (t < tag_count && tag_values[t] != code) t++;
            if (t == tag_count) continue;
        }
        if (taken < limit && (taken == 0 || total + size <= max_bytes) && !matched_more) {
            rows[taken] = i;
            physical[taken] = at;
            sizes[taken] = size;
            total += size;
            taken++;
        } else if (!matched_more) {
            matched_more = 1; /* stopped by a limit: the read resumes right after the last record taken */
            scanned = (Py_ssize_t)rows[taken - 1] + 1;
        }
        /* go on: ``removed`` looks at every unit read, as read_queue's does */
    }
    if (taken == 0) {
        result = Py_BuildValue("(ninOOOO)", scanned, removed, (Py_ssize_t)0, Py_None, Py_None, Py_None, Py_None);
        goto done;
    }
    if (segment_obj == Py_None || physical[0] < segment_base || physical[0] >= segment_base + segment.len) {
        result = PyLong_FromLongLong(physical[0]);
        goto done;
    }
    for (Py_ssize_t k = 0; k < taken; k++)
        if (physical[k] < segment_base || physical[k] + sizes[k] - segment_base > write_position ||
            physical[k] + sizes[k] - segment_base > segment.len) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    PyObject *body = PyBytes_FromStringAndSize(NULL, total);
    if (body == NULL) goto done;
    char *w = PyBytes_AS_STRING(body);
    const char *base = (const char *)segment.buf;
    for (Py_ssize_t k = 0; k < taken;) {
        Py_ssize_t stop = k + 1;
        while (stop < taken && physical[stop] == physical[stop - 1] + sizes[stop - 1]) stop++;
        int64_t from = physical[k] - segment_base, to = physical[stop - 1] + sizes[stop - 1] - segment_base;
        memcpy(w, base + from, (size_t)(to - from));
        w += to - from;
        k = stop;
    }
    for (Py_ssize_t k = 0; k < taken; k++) rows[k] += offset;
    result = Py_BuildValue("(ninNNNN)", scanned, removed, taken, body, int64_bytes(rows, taken),
                           int64_bytes(physical, taken), int64_bytes(sizes, taken));
done:
    PyMem_Free(columns);
    PyMem_Free(tag_values);
    Py_XDECREF(tag_list);
    if (segment.obj != NULL) PyBuffer_Release(&segment);
    PyBuffer_Release(&units);
    return result;
}

PyObject *sl_index_put(PyObject *self, PyObject *args); /* indexput.c */

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS,
     "gather(units, offset, cl_min, tags_codes, max_count, max_bytes, segment_base, segment, write_position)"},
    {"index_put", sl_index_put, METH_VARARGS,
     "index_put(mapping, slots, index_count, begin_timestamp, hashes, phy_offsets, store_timestamps) -> new slots"},
    {NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_queueread",
                                        "The store's native parts: a ConsumeQueue read, an index put "
                                        "(see sparkmq.native).",
                                        -1, methods};

PyMODINIT_FUNC PyInit__queueread(void) { return PyModule_Create(&module_def); }
