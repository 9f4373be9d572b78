/* The native bases of MappedFile (Segment), MappedFileQueue (FileList) and ConsumeQueue
 * (QueueBase): see segment.h. Python subclasses keep their other attributes in a __dict__. */
#include "segment.h"

#include <structmember.h>

static unsigned long long ticks;

static void segment_dealloc(SegmentObject *s) {
    Py_CLEAR(s->mapping);
    Py_TYPE(s)->tp_free((PyObject *)s);
}
static PyObject *segment_get_mmap(SegmentObject *s, void *closure) {
    return Py_NewRef(s->mapping != NULL ? s->mapping : Py_None);
}
static int segment_set_mmap(SegmentObject *s, PyObject *value, void *closure) {
    if (value == NULL || value == Py_None) {
        Py_CLEAR(s->mapping);
        s->addr = NULL;
        s->addr_len = 0;
        return 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(value, &view, PyBUF_WRITABLE) < 0) return -1;
    char *addr = view.buf;
    Py_ssize_t len = view.len;
    PyBuffer_Release(&view);
    Py_XSETREF(s->mapping, Py_NewRef(value));
    s->addr = addr;
    s->addr_len = len;
    return 0;
}
static PyMemberDef segment_members[] = {
    {"write_position", T_LONGLONG, offsetof(SegmentObject, write_position), 0, NULL},
    {"flushed_position", T_LONGLONG, offsetof(SegmentObject, flushed_position), 0, NULL},
    {"file_bytes", T_LONGLONG, offsetof(SegmentObject, file_bytes), 0, NULL},
    {"start_offset", T_LONGLONG, offsetof(SegmentObject, start_offset), 0, NULL},
    {"tick", T_ULONGLONG, offsetof(SegmentObject, tick), 0, NULL},
    {NULL},
};
static PyGetSetDef segment_getset[] = {
    {"_mmap", (getter)segment_get_mmap, (setter)segment_set_mmap, "the mapping, or None while unmapped", NULL},
    {NULL},
};
static PyTypeObject SegmentType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.native._queueread.Segment",
    .tp_basicsize = sizeof(SegmentObject),
    .tp_dealloc = (destructor)segment_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "MappedFile's native fields (segment.h).",
    .tp_members = segment_members,
    .tp_getset = segment_getset,
    .tp_new = PyType_GenericNew,
};

static int file_list_traverse(FileListObject *f, visitproc visit, void *arg) {
    Py_VISIT(f->files);
    return 0;
}
static int file_list_clear(FileListObject *f) {
    Py_CLEAR(f->files);
    return 0;
}
static void file_list_dealloc(FileListObject *f) {
    PyObject_GC_UnTrack(f);
    file_list_clear(f);
    Py_TYPE(f)->tp_free((PyObject *)f);
}
static PyMemberDef file_list_members[] = {
    {"files", T_OBJECT_EX, offsetof(FileListObject, files), 0, NULL},
    {NULL},
};
static PyTypeObject FileListType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.native._queueread.FileList",
    .tp_basicsize = sizeof(FileListObject),
    .tp_dealloc = (destructor)file_list_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "MappedFileQueue's native field (segment.h).",
    .tp_traverse = (traverseproc)file_list_traverse,
    .tp_clear = (inquiry)file_list_clear,
    .tp_members = file_list_members,
    .tp_new = PyType_GenericNew,
};

static int queue_base_traverse(QueueBaseObject *q, visitproc visit, void *arg) {
    Py_VISIT(q->files);
    return 0;
}
static int queue_base_clear(QueueBaseObject *q) {
    Py_CLEAR(q->files);
    return 0;
}
static void queue_base_dealloc(QueueBaseObject *q) {
    PyObject_GC_UnTrack(q);
    queue_base_clear(q);
    Py_TYPE(q)->tp_free((PyObject *)q);
}
static PyMemberDef queue_base_members[] = {
    {"max_physical_offset", T_LONGLONG, offsetof(QueueBaseObject, max_physical_offset), 0, NULL},
    {"files", T_OBJECT_EX, offsetof(QueueBaseObject, files), 0, NULL},
    {NULL},
};
static PyTypeObject QueueBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sparkmq.native._queueread.QueueBase",
    .tp_basicsize = sizeof(QueueBaseObject),
    .tp_dealloc = (destructor)queue_base_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "ConsumeQueue's native fields (segment.h).",
    .tp_traverse = (traverseproc)queue_base_traverse,
    .tp_clear = (inquiry)queue_base_clear,
    .tp_members = queue_base_members,
    .tp_new = PyType_GenericNew,
};

static SegmentAPI api = {&SegmentType, &FileListType, &QueueBaseType, &ticks};

PyObject *segment_next_tick(PyObject *module, PyObject *unused) { return PyLong_FromUnsignedLongLong(++ticks); }

int segment_add_types(PyObject *module) {
    PyTypeObject *types[] = {&SegmentType, &FileListType, &QueueBaseType};
    const char *names[] = {"Segment", "FileList", "QueueBase"};
    for (int i = 0; i < 3; i++) {
        if (PyType_Ready(types[i]) < 0) return -1;
        if (PyModule_AddObjectRef(module, names[i], (PyObject *)types[i]) < 0) return -1;
    }
    PyObject *capsule = PyCapsule_New(&api, SEGMENT_API_CAPSULE, NULL);
    if (capsule == NULL) return -1;
    if (PyModule_AddObject(module, "_segment_api", capsule) < 0) {
        Py_DECREF(capsule);
        return -1;
    }
    return 0;
}
