/* sparkmq.native._queueread.index_put: IndexFile.put_plain (store/index_file.py, the reference) in C.
 *
 * Writes a small batch of index entries into an index file's mapping (ix_write in indexput.h, shared
 * with the send lane's SendGroup.index_into). tests/native/test_index_put.py compares the bytes with
 * put_plain's. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "indexput.h"

/* Item i of a list as a long long. A non-int item's __index__ may run Python that shrinks the list, so
 * the size is checked on every call and the item held while it converts. */
static int item_ll(PyObject *list, Py_ssize_t i, long long *out) {
    if (i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_ValueError, "an index column changed while it was read");
        return -1;
    }
    PyObject *item = PyList_GET_ITEM(list, i);
    Py_INCREF(item);
    *out = PyLong_AsLongLong(item);
    Py_DECREF(item);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* index_put(mapping, slots, index_count, begin_timestamp, hashes, phy_offsets, store_timestamps)
 * -> the slots this batch used for the first time (what put_plain adds to hash_slot_count). */
PyObject *sl_index_put(PyObject *self, PyObject *args) {
    Py_buffer mm;
    Py_ssize_t slots, before;
    long long begin;
    PyObject *hashes, *offsets, *stamps;
    if (!PyArg_ParseTuple(args, "w*nnLO!O!O!", &mm, &slots, &before, &begin, &PyList_Type, &hashes, &PyList_Type,
                          &offsets, &PyList_Type, &stamps))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(hashes);
    int64_t *values = NULL; /* the columns as int64: hashes, then offsets, then timestamps */
    if (PyList_GET_SIZE(offsets) != n || PyList_GET_SIZE(stamps) != n) {
        PyErr_SetString(PyExc_ValueError, "hashes, offsets and timestamps differ in length");
        goto done;
    }
    if (!ix_fits(mm.len, slots, before, n)) {
        PyErr_SetString(PyExc_ValueError, "the entries do not fit the mapping");
        goto done;
    }
    values = PyMem_Malloc((size_t)(3 * n + 1) * sizeof(int64_t));
    if (values == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long hash, phy, stored;
        if (item_ll(hashes, i, &hash) < 0 || item_ll(offsets, i, &phy) < 0 || item_ll(stamps, i, &stored) < 0)
            goto done;
        values[i] = hash;
        values[n + i] = phy;
        values[2 * n + i] = stored;
    }
    long long fresh = ix_write(mm.buf, slots, before, begin, n, values, values + n, values + 2 * n, 0);
    if (fresh < 0) goto done;
    result = PyLong_FromLongLong(fresh);
done:
    PyMem_Free(values);
    PyBuffer_Release(&mm);
    return result;
}
