/* sparkmq.native._queueread.index_put: IndexFile.put_plain (store/index_file.py, the reference) in C.
 *
 * Writes a small batch of index entries into an index file's mapping: each entry chains to the
 * previous entry of its hash slot (one this batch wrote, else the slot's head when it names an
 * entry written before the batch, else none) and becomes the slot's head. Entry numbers count up
 * from the file's index count. tests/native/test_index_put.py compares the bytes with put_plain's. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_BYTES 40
#define SLOT_BYTES 4
#define ENTRY_BYTES 20
#define INT_MAX32 2147483647LL

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

static int32_t read32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static int item_ll(PyObject *list, Py_ssize_t i, long long *out) {
    *out = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
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
    Py_ssize_t *table = NULL; /* open addressing: slot -> this batch's last entry there, as (slot, number) pairs */
    Py_ssize_t entries_at = HEADER_BYTES + slots * SLOT_BYTES;
    if (PyList_GET_SIZE(offsets) != n || PyList_GET_SIZE(stamps) != n) {
        PyErr_SetString(PyExc_ValueError, "hashes, offsets and timestamps differ in length");
        goto done;
    }
    if (slots < 1 || before < 0 || before > INT_MAX32 - n || entries_at + (before + n) * ENTRY_BYTES > mm.len) {
        PyErr_SetString(PyExc_ValueError, "the entries do not fit the mapping");
        goto done;
    }
    Py_ssize_t size = 8;
    while (size < 2 * n) size *= 2;
    table = PyMem_Malloc((size_t)size * 2 * sizeof(Py_ssize_t));
    if (table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < size; k++) table[2 * k] = -1;
    unsigned char *base = mm.buf;
    long long fresh = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long hash, phy, stored;
        if (item_ll(hashes, i, &hash) < 0 || item_ll(offsets, i, &phy) < 0 || item_ll(stamps, i, &stored) < 0)
            goto done;
        if (hash < -INT_MAX32 - 1 || hash > INT_MAX32) {
            PyErr_SetString(PyExc_OverflowError, "an index key hash is not an int32");
            goto done;
        }
        Py_ssize_t slot = (Py_ssize_t)(((hash % slots) + slots) % slots); /* Python's modulo */
        Py_ssize_t probe = (Py_ssize_t)((uint64_t)slot * 0x9E3779B97F4A7C15ULL >> 32) & (size - 1);
        while (table[2 * probe] != -1 && table[2 * probe] != slot) probe = (probe + 1) & (size - 1);
        unsigned char *head = base + HEADER_BYTES + slot * SLOT_BYTES;
        long long prev;
        if (table[2 * probe] == slot) {
            prev = table[2 * probe + 1];
        } else {
            prev = read32(head);
            if (prev <= 0 || prev > before) {
                prev = 0;
                fresh++;
            }
            table[2 * probe] = slot;
        }
        long long diff = 0;
        if (begin > 0) {
            long long seconds = stored - begin;
            seconds = seconds < 0 ? 0 : seconds / 1000; /* floor division: negatives end at 0 either way */
            diff = seconds > INT_MAX32 ? INT_MAX32 : seconds;
        }
        Py_ssize_t number = before + i;
        unsigned char *entry = base + entries_at + number * ENTRY_BYTES;
        put32(entry, (uint32_t)(int32_t)hash);
        put64(entry + 4, (uint64_t)phy);
        put32(entry + 12, (uint32_t)diff);
        put32(entry + 16, (uint32_t)prev);
        put32(head, (uint32_t)number);
        table[2 * probe + 1] = number;
    }
    result = PyLong_FromLongLong(fresh);
done:
    PyMem_Free(table);
    PyBuffer_Release(&mm);
    return result;
}
