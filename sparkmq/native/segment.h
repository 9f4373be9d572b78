/* Native bases of the store's MappedFile, MappedFileQueue and ConsumeQueue (segment.c, in
 * _queueread): the fields the send lane's group put reads and writes per queue, held in the
 * object itself rather than as Python ints in its dict, so a queue touched by a group costs a few
 * cache lines (store/native_bases.py has the pure-Python twins). _sendlane reaches them through
 * the capsule "sparkmq.native._queueread._segment_api". */
#ifndef SPARKMQ_SEGMENT_H
#define SPARKMQ_SEGMENT_H
#include <Python.h>

typedef struct {
    PyObject_HEAD
    long long write_position; /* long long members: their setters take any int-like (numpy's too) */
    long long flushed_position;
    long long file_bytes;
    long long start_offset;
    unsigned long long tick; /* MapPool: the last use */
    PyObject *mapping;       /* ``_mmap``: the mmap, or NULL while unmapped */
    char *addr;              /* its bytes while set (the buffer is not held: set ``_mmap`` to None before closing it) */
    Py_ssize_t addr_len;
} SegmentObject;

typedef struct {
    PyObject_HEAD
    PyObject *files; /* MappedFileQueue.files: the list of segments */
} FileListObject;

typedef struct {
    PyObject_HEAD
    long long max_physical_offset;
    PyObject *files; /* ConsumeQueue.files: its MappedFileQueue */
} QueueBaseObject;

typedef struct {
    PyTypeObject *segment, *file_list, *queue_base;
    unsigned long long *ticks; /* MapPool's clock, shared by the Python touch and the lane */
} SegmentAPI;

#define SEGMENT_API_CAPSULE "sparkmq.native._queueread._segment_api"

int segment_add_types(PyObject *module);
PyObject *segment_next_tick(PyObject *module, PyObject *unused); /* next_tick() */
#endif
