/* The index entries' writer shared by _queueread.index_put (indexput.c) and the send lane's
 * SendGroup.index_into (sendgroup.c): IndexFile.put_plain (store/index_file.py, the reference).
 *
 * Each entry chains to the previous entry of its hash slot (one this batch wrote, else the slot's
 * head when it names an entry written before the batch, else none) and becomes the slot's head.
 * Entry numbers count up from ``before`` (the file's index count); the caller checked that the
 * entries fit the mapping at ``base``. */
#ifndef SPARKMQ_INDEXPUT_H
#define SPARKMQ_INDEXPUT_H
#include <Python.h>
#include <stdint.h>

#define IX_HEADER_BYTES 40
#define IX_SLOT_BYTES 4
#define IX_ENTRY_BYTES 20
#define IX_INT_MAX32 2147483647LL

static inline void ix_put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline int32_t ix_read32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* Whether ``n`` entries after ``before`` fit a mapping of ``len`` bytes with ``slots`` slots. */
static inline int ix_fits(Py_ssize_t len, Py_ssize_t slots, Py_ssize_t before, Py_ssize_t n) {
    return slots >= 1 && before >= 0 && before <= IX_INT_MAX32 - n &&
           IX_HEADER_BYTES + slots * IX_SLOT_BYTES + (before + n) * IX_ENTRY_BYTES <= len;
}

/* Entry i is (hashes[i], phys[i], stamps ? stamps[i] : stamp). The slots this batch used for the
 * first time (what put_plain adds to hash_slot_count), or -1 with an exception set. */
static long long ix_write(unsigned char *base, Py_ssize_t slots, Py_ssize_t before, long long begin, Py_ssize_t n,
                          const int64_t *hashes, const int64_t *phys, const int64_t *stamps, int64_t stamp) {
    Py_ssize_t entries_at = IX_HEADER_BYTES + slots * IX_SLOT_BYTES;
    Py_ssize_t size = 8;
    while (size < 2 * n) size *= 2;
    Py_ssize_t stack[64], *table = stack; /* open addressing: slot -> this batch's last entry there, as pairs */
    if (size > 32 && (table = PyMem_Malloc((size_t)size * 2 * sizeof(Py_ssize_t))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < size; k++) table[2 * k] = -1;
    long long fresh = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long hash = hashes[i], phy = phys[i], stored = stamps != NULL ? stamps[i] : stamp;
        if (hash < -IX_INT_MAX32 - 1 || hash > IX_INT_MAX32) {
            PyErr_SetString(PyExc_OverflowError, "an index key hash is not an int32");
            fresh = -1;
            break;
        }
        Py_ssize_t slot = (Py_ssize_t)(((hash % slots) + slots) % slots); /* Python's modulo */
        Py_ssize_t probe = (Py_ssize_t)((uint64_t)slot * 0x9E3779B97F4A7C15ULL >> 32) & (size - 1);
        while (table[2 * probe] != -1 && table[2 * probe] != slot) probe = (probe + 1) & (size - 1);
        unsigned char *head = base + IX_HEADER_BYTES + slot * IX_SLOT_BYTES;
        long long prev;
        if (table[2 * probe] == slot) {
            prev = table[2 * probe + 1];
        } else {
            prev = ix_read32(head);
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
            diff = seconds > IX_INT_MAX32 ? IX_INT_MAX32 : seconds;
        }
        Py_ssize_t number = before + i;
        unsigned char *entry = base + entries_at + number * IX_ENTRY_BYTES;
        ix_put32(entry, (uint32_t)(int32_t)hash);
        ix_put32(entry + 4, (uint32_t)((uint64_t)phy >> 32));
        ix_put32(entry + 8, (uint32_t)phy);
        ix_put32(entry + 12, (uint32_t)diff);
        ix_put32(entry + 16, (uint32_t)prev);
        ix_put32(head, (uint32_t)number);
        table[2 * probe + 1] = number;
    }
    if (table != stack) PyMem_Free(table);
    return fresh;
}
#endif
