/* sparkmq.native._queueread: one queue read of the store (store/reads.py read_queue) in C.
 *
 * gather() walks a read's ConsumeQueue units (20 bytes: physical offset, size, tags code, big
 * endian), applies read_queue's rules (blank units skipped, units below the CommitLog's minimum
 * counted as removed, the tags filter, the count and byte limits, one record always) and copies
 * the records it takes, run by run, from the CommitLog segments given into one bytes (a run never
 * crosses a segment). Nothing read from the units is trusted: a unit whose size no record has or
 * whose offset is negative, or whose record's head is not the one it names (or whose lengths do not
 * add up to its size, or whose topic is not the queue's), stops the read with
 * that unit's index (the store repairs it from the CommitLog). read_queue's numpy path is the
 * reference; tests/native/test_queueread.py compares both, on damaged units too. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define UNIT 20
#define BLANK_UNIT_SIZE 2147483647
#define MAX_SEGMENTS 16 /* reads.MAX_READ_SEGMENTS: a read over more takes the numpy path */
#define MIN_RECORD_BYTES 91 /* layout.RECORD_FIXED_BYTES: no record is shorter */
#define MESSAGE_MAGIC ((int32_t)0xDAA320A7)
#define BODY_LENGTH_AT 84 /* layout.POS_BODY_LENGTH */
#define BODY_AT 88        /* layout.POS_BODY */

/* Big-endian loads (GCC left the byte loop a loop: 10 % of a local read's copy in perf). */
static int64_t get64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (int64_t)__builtin_bswap64(v);
}

static int32_t get32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return (int32_t)__builtin_bswap32(v);
}

static PyObject *int64_bytes(const int64_t *values, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)values, n * (Py_ssize_t)sizeof(int64_t));
}

/* One read's walk over its units: the arguments both functions share, the records taken (and
 * the segment holding each), and the buffers to release (walk_end). */
typedef struct {
    Py_buffer units, segment[MAX_SEGMENTS];
    long long offset, cl_min, segment_base[MAX_SEGMENTS], write_position[MAX_SEGMENTS];
    Py_ssize_t max_count, max_bytes, segment_count;
    PyObject *tags, *segments, *tag_list;
    int64_t *columns, *tag_values, *rows, *physical, *sizes, *held_by;
    Py_ssize_t tag_count, taken, scanned;
    int removed, queue_id;
    const char *topic; /* the queue's topic, as its records store it (UTF-8) */
    Py_ssize_t topic_len;
    int64_t total;
} walk_t;

static void walk_end(walk_t *w) {
    PyMem_Free(w->columns);
    PyMem_Free(w->tag_values);
    Py_XDECREF(w->tag_list);
    for (Py_ssize_t k = 0; k < w->segment_count; k++) PyBuffer_Release(&w->segment[k]);
    if (w->units.obj != NULL) PyBuffer_Release(&w->units);
}

/* ``segments``: a tuple of (base, buffer, write_position), at most MAX_SEGMENTS. 0: an error is set. */
static int walk_segments(walk_t *w) {
    if (!PyTuple_Check(w->segments) || PyTuple_GET_SIZE(w->segments) > MAX_SEGMENTS) {
        PyErr_SetString(PyExc_ValueError, "segments must be a tuple of at most 16 (base, buffer, write_position)");
        return 0;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(w->segments); k++) {
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(w->segments, k), "Ly*L", &w->segment_base[k], &w->segment[k],
                              &w->write_position[k]))
            return 0;
        w->segment_count = k + 1;
    }
    return 1;
}

/* Walk the units (arguments already parsed into ``w``). 1: walked; 0: an exception is set; -1:
 * nothing can be taken (max_count or units 0): read_queue's own path says what that means; 2: the
 * unit at w->scanned is damaged (queue_repair.field_fault: a size no record has, a negative offset;
 * or an offset below the CommitLog's minimum after a unit above it), nothing taken. */
static int walk(walk_t *w) {
    if (!walk_segments(w)) return 0;
    if (w->tags != Py_None) {
        /* a tuple of our own: converting an item may run Python (__index__), which cannot change it */
        w->tag_list = PySequence_Tuple(w->tags);
        if (w->tag_list == NULL) return 0;
        w->tag_count = PyTuple_GET_SIZE(w->tag_list);
        w->tag_values = PyMem_Malloc((size_t)(w->tag_count + 1) * sizeof(int64_t));
        if (w->tag_values == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        for (Py_ssize_t t = 0; t < w->tag_count; t++) {
            w->tag_values[t] = PyLong_AsLongLong(PyTuple_GET_ITEM(w->tag_list, t));
            if (w->tag_values[t] == -1 && PyErr_Occurred()) return 0;
        }
    }
    const unsigned char *u = w->units.buf;
    Py_ssize_t count = w->units.len / UNIT, limit = w->max_count < count ? w->max_count : count;
    if (limit <= 0) return -1;
    w->columns = PyMem_Malloc((size_t)(4 * (limit + 1)) * sizeof(int64_t));
    if (w->columns == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    int64_t *rows = w->rows = w->columns, *physical = w->physical = w->columns + limit + 1;
    int64_t *sizes = w->sizes = w->columns + 2 * (limit + 1);
    w->held_by = w->columns + 3 * (limit + 1);
    Py_ssize_t taken = 0, matched_more = 0, scanned = count;
    int64_t total = 0;
    int live = 0; /* a unit of a record still in the log was met */
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *unit = u + i * UNIT;
        int32_t size = get32(unit + 8);
        if (size == BLANK_UNIT_SIZE) continue;
        int64_t at = get64(unit);
        if (size < MIN_RECORD_BYTES || at < 0) {
            w->scanned = i;
            return 2;
        }
        if (at < w->cl_min) {
            if (live) { /* records go up the log with the queue: one below a live one is no removed record */
                w->scanned = i;
                return 2;
            }
            w->removed = 1;
            continue;
        }
        live = 1;
        if (w->tag_values != NULL) {
            int64_t code = get64(unit + 12);
            Py_ssize_t t = 0;
            while (t < w->tag_count && w->tag_values[t] != code) t++;
            if (t == w->tag_count) continue;
        }
        if (taken < limit && (taken == 0 || total + size <= w->max_bytes) && !matched_more) {
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
    w->taken = taken;
    w->scanned = scanned;
    w->total = total;
    return 1;
}

/* Whether the ``total`` bytes at ``record`` add up: body length, topic length and properties length
 * fill exactly TOTALSIZE (layout.record_size; queue_repair.lengths_fault is the reference). */
static int lengths_fit(const unsigned char *record, int64_t total) {
    int64_t body = get32(record + BODY_LENGTH_AT);
    if (body < 0 || MIN_RECORD_BYTES + body > total) return 0;
    int64_t topic = record[BODY_AT + body];
    int64_t properties_at = BODY_AT + body + 1 + topic;
    if (properties_at + 2 > total) return 0;
    int64_t properties = (int16_t)((record[properties_at] << 8) | record[properties_at + 1]);
    return properties >= 0 && MIN_RECORD_BYTES + body + topic + properties == total;
}

/* Whether the record at ``record`` (whose lengths fit) is of the walk's topic. */
static int topic_matches(const walk_t *w, const unsigned char *record) {
    const unsigned char *topic = record + BODY_AT + get32(record + BODY_LENGTH_AT);
    return topic[0] == w->topic_len && memcmp(topic + 1, w->topic, (size_t)w->topic_len) == 0;
}

/* Whether the record at ``head`` is the one unit k names (total size, magic, queue id, queue offset
 * and physical offset), its lengths add up and its topic is the queue's (queue_repair.record_fault).
 * The caller checked that the unit's size lies within the segment. */
static int head_matches(const walk_t *w, Py_ssize_t k, const unsigned char *head) {
    return get32(head) == w->sizes[k] && get32(head + 4) == MESSAGE_MAGIC && get32(head + 12) == w->queue_id &&
           get64(head + 20) == w->offset + w->rows[k] && get64(head + 28) == w->physical[k] &&
           lengths_fit(head, w->sizes[k]) && topic_matches(w, head);
}

/* NULL when the segments hold every record taken (an error is never set; w->held_by says which);
 * else what to return: the physical offset of the first record no segment given holds, None (a
 * record past its segment's write position or end: read_queue's numpy path serves that read), or
 * -1 - i when the record of unit i is not the one its unit names (a damaged unit). */
static PyObject *walk_misplaced(walk_t *w) {
    Py_ssize_t s = 0;
    for (Py_ssize_t k = 0; k < w->taken; k++) {
        int64_t at = w->physical[k];
        if (s >= w->segment_count || at < w->segment_base[s] || at >= w->segment_base[s] + w->segment[s].len) {
            for (s = 0; s < w->segment_count; s++)
                if (at >= w->segment_base[s] && at < w->segment_base[s] + w->segment[s].len) break;
            if (s == w->segment_count) return PyLong_FromLongLong(at);
        }
        int64_t end = at + w->sizes[k] - w->segment_base[s];
        if (end > w->write_position[s] || end > w->segment[s].len) return Py_NewRef(Py_None);
        if (!head_matches(w, k, (const unsigned char *)w->segment[s].buf + (at - w->segment_base[s])))
            return PyLong_FromSsize_t(-1 - (Py_ssize_t)w->rows[k]);
        w->held_by[k] = s;
    }
    return NULL;
}

/* Copy the records taken, run by run (contiguous in the log and in one segment), to ``out``
 * (w->total bytes). */
static void walk_copy(const walk_t *w, char *out) {
    for (Py_ssize_t k = 0; k < w->taken;) {
        Py_ssize_t stop = k + 1;
        while (stop < w->taken && w->held_by[stop] == w->held_by[k] &&
               w->physical[stop] == w->physical[stop - 1] + w->sizes[stop - 1])
            stop++;
        int64_t base = w->segment_base[w->held_by[k]];
        int64_t from = w->physical[k] - base, to = w->physical[stop - 1] + w->sizes[stop - 1] - base;
        memcpy(out, (const char *)w->segment[w->held_by[k]].buf + from, (size_t)(to - from));
        out += to - from;
        k = stop;
    }
}

/* What a gather returns when walk() did not walk: NULL (the error it set), None (nothing can be
 * taken) or -1 - i (unit i is damaged). */
static PyObject *walk_stopped(const walk_t *w, int walked) {
    if (walked == 0) return NULL;
    return walked == 2 ? PyLong_FromSsize_t(-1 - w->scanned) : Py_NewRef(Py_None);
}

#define WALK_FORMAT "y*LLOnnO!iy#"
#define WALK_ARGS(w)                                                                                           \
    &(w).units, &(w).offset, &(w).cl_min, &(w).tags, &(w).max_count, &(w).max_bytes, &PyTuple_Type, &(w).segments, \
        &(w).queue_id, &(w).topic, &(w).topic_len

/* gather(units, offset, cl_min, tags_codes | None, max_count, max_bytes, segments, queue_id, topic)
 *   segments: ((base, buffer, write_position), ...) the CommitLog segments the read may take from
 * -> (scanned, removed, taken, body | None, queue_offsets, physical_offsets, sizes)  the read
 *  | int >= 0: the physical offset of the first record taken that no segment given holds
 *  | int < 0: -1 - i, unit i of ``units`` is damaged (reads.unit_fault), nothing taken
 *  | None: a record lies past its segment's write position (read_queue's numpy path serves that) */
static PyObject *gather(PyObject *module, PyObject *args) {
    walk_t w = {0};
    if (!PyArg_ParseTuple(args, WALK_FORMAT, WALK_ARGS(w))) return NULL;
    PyObject *result = NULL;
    int walked = walk(&w);
    if (walked != 1) {
        result = walk_stopped(&w, walked);
        goto done;
    }
    if (w.taken == 0) {
        result = Py_BuildValue("(ninOOOO)", w.scanned, w.removed, (Py_ssize_t)0, Py_None, Py_None, Py_None, Py_None);
        goto done;
    }
    if ((result = walk_misplaced(&w)) != NULL) goto done;
    PyObject *body = PyBytes_FromStringAndSize(NULL, w.total);
    if (body == NULL) goto done;
    walk_copy(&w, PyBytes_AS_STRING(body));
    for (Py_ssize_t k = 0; k < w.taken; k++) w.rows[k] += w.offset;
    result = Py_BuildValue("(ninNNNN)", w.scanned, w.removed, w.taken, body, int64_bytes(w.rows, w.taken),
                           int64_bytes(w.physical, w.taken), int64_bytes(w.sizes, w.taken));
done:
    walk_end(&w);
    return result;
}

/* gather_into(units, offset, cl_min, tags_codes | None, max_count, max_bytes, segments, queue_id, topic, out)
 *   out: a writable buffer the records are copied to (when they fit; else into a new bytes)
 * -> (scanned, taken, written | body)  the read: the bytes written to ``out`` (or the bytes holding
 *    the records)
 *  | int | None: as gather's */
static PyObject *gather_into(PyObject *module, PyObject *args) {
    walk_t w = {0};
    Py_buffer out = {0};
    if (!PyArg_ParseTuple(args, WALK_FORMAT "w*", WALK_ARGS(w), &out)) return NULL;
    PyObject *result = NULL;
    int walked = walk(&w);
    if (walked != 1) {
        result = walk_stopped(&w, walked);
        goto done;
    }
    if (w.taken == 0) {
        result = Py_BuildValue("(nnn)", w.scanned, (Py_ssize_t)0, (Py_ssize_t)0);
        goto done;
    }
    if ((result = walk_misplaced(&w)) != NULL) goto done;
    if (w.total <= out.len) {
        walk_copy(&w, out.buf);
        result = Py_BuildValue("(nnL)", w.scanned, w.taken, (long long)w.total);
        goto done;
    }
    PyObject *body = PyBytes_FromStringAndSize(NULL, w.total); /* one record larger than ``out`` */
    if (body == NULL) goto done;
    walk_copy(&w, PyBytes_AS_STRING(body));
    result = Py_BuildValue("(nnN)", w.scanned, w.taken, body);
done:
    if (out.obj != NULL) PyBuffer_Release(&out);
    walk_end(&w);
    return result;
}

static void put32(char *p, uint32_t v) {
    for (int i = 3; i >= 0; i--, v >>= 8) p[i] = (char)(v & 0xff);
}

/* ``v`` in decimal at ``out`` (as "%lld" writes it, without the NUL); the length written. */
static Py_ssize_t put_decimal(char *out, long long v) {
    char digits[20];
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    int n = 0;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    Py_ssize_t len = 0;
    if (v < 0) out[len++] = '-';
    while (n > 0) out[len++] = digits[--n];
    return len;
}

/* The bytearray ``out`` with room for ``most`` more bytes past its length (its size unchanged), grown
 * to at least ``reserve`` and twice its length when it lacks room; its buffer, or NULL (error set). */
static char *frame_room(PyObject *out, Py_ssize_t most, Py_ssize_t reserve) {
    PyByteArrayObject *array = (PyByteArrayObject *)out;
    Py_ssize_t length = Py_SIZE(out), room = array->ob_alloc - (array->ob_start - array->ob_bytes) - 1;
    if (length + most > room) {
        Py_ssize_t want = length + most;
        if (want < reserve) want = reserve;
        if (want < 2 * length) want = 2 * length;
        if (PyByteArray_Resize(out, want) < 0) return NULL;
        Py_SET_SIZE(out, length);
        array->ob_start[length] = '\0';
    }
    return array->ob_start; /* not PyByteArray_AS_STRING: an empty one's is a shared static string */
}

/* gather_frame(units, offset, cl_min, tags_codes | None, max_count, max_bytes, segments, queue_id, topic,
 *              parts, opaque, suggest, slow_suggest, slow_below, min_offset, max_offset)
              [, out, reserve]
 * -> (frame, taken, body bytes): gather's read with records, as the whole response frame whose
 *    header is p0 opaque p1 suggestWhichBrokerId p2 nextBeginOffset p3 min p4 max p5 (``parts``, six
 *    bytes) and whose body is the records, copied once from the segments; the suggestion is
 *    ``slow_suggest`` when the last record taken lies below ``slow_below``, else ``suggest``
 *  | (end, taken, body bytes) with ``out`` (a bytearray): the frame appended to ``out`` instead, its
 *    new length ``end``; when out's allocation lacks room it grows to at least ``reserve`` bytes and
 *    twice its length, so a lane call's frames share one buffer without a join
 *  | int: as gather's | None: nothing taken, or as gather's None (read_queue answers those) */
static PyObject *gather_frame(PyObject *module, PyObject *args) {
    walk_t w = {0};
    Py_buffer part[6] = {{0}};
    long long value[5], slow_suggest, slow_below;
    PyObject *out = Py_None;
    Py_ssize_t reserve = 0;
    if (!PyArg_ParseTuple(args, WALK_FORMAT "(y*y*y*y*y*y*)LLLLLL|On", WALK_ARGS(w), &part[0], &part[1], &part[2],
                          &part[3], &part[4], &part[5], &value[0], &value[1], &slow_suggest, &slow_below, &value[3],
                          &value[4], &out, &reserve))
        return NULL;
    PyObject *result = NULL;
    int walked = walk(&w);
    if (walked != 1 || w.taken == 0) {
        result = walked == 1 ? Py_NewRef(Py_None) : walk_stopped(&w, walked);
        goto done;
    }
    if ((result = walk_misplaced(&w)) != NULL) goto done;
    value[2] = w.offset + w.scanned;
    if (w.physical[w.taken - 1] < slow_below) value[1] = slow_suggest;
    Py_ssize_t header_most = 5 * 21;
    for (int k = 0; k < 6; k++) header_most += part[k].len;
    Py_ssize_t most = 8 + header_most + w.total, at = 0;
    PyObject *frame = NULL;
    char *start;
    if (out == Py_None) {
        if ((frame = PyBytes_FromStringAndSize(NULL, most)) == NULL) goto done;
        start = PyBytes_AS_STRING(frame);
    } else {
        if (!PyByteArray_CheckExact(out)) {
            PyErr_SetString(PyExc_TypeError, "out must be a bytearray");
            goto done;
        }
        if ((start = frame_room(out, most, reserve)) == NULL) goto done;
        at = PyByteArray_GET_SIZE(out);
        start += at;
    }
    char *out_at = start + 8;
    for (int k = 0; k < 5; k++) {
        memcpy(out_at, part[k].buf, (size_t)part[k].len);
        out_at += part[k].len;
        out_at += put_decimal(out_at, value[k]);
    }
    memcpy(out_at, part[5].buf, (size_t)part[5].len);
    out_at += part[5].len;
    put32(start + 4, (uint32_t)(out_at - start - 8));
    walk_copy(&w, out_at);
    out_at += w.total;
    put32(start, (uint32_t)(out_at - start - 4));
    if (frame == NULL) {
        Py_SET_SIZE(out, at + (out_at - start)); /* within the allocation: as bytearray's own minor resize */
        ((PyByteArrayObject *)out)->ob_start[at + (out_at - start)] = '\0';
        result = Py_BuildValue("(nnL)", at + (out_at - start), w.taken, (long long)w.total);
        goto done;
    }
    if (_PyBytes_Resize(&frame, out_at - start) < 0) goto done;
    result = Py_BuildValue("(NnL)", frame, w.taken, (long long)w.total);
done:
    for (int k = 0; k < 6; k++)
        if (part[k].obj != NULL) PyBuffer_Release(&part[k]);
    walk_end(&w);
    return result;
}

PyObject *sl_index_put(PyObject *self, PyObject *args); /* indexput.c */

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS,
     "gather(units, offset, cl_min, tags_codes, max_count, max_bytes, segments, queue_id, topic)"},
    {"gather_into", gather_into, METH_VARARGS,
     "gather_into(units, offset, cl_min, tags_codes, max_count, max_bytes, segments, queue_id, topic, out)"},
    {"index_put", sl_index_put, METH_VARARGS,
     "index_put(mapping, slots, index_count, begin_timestamp, hashes, phy_offsets, store_timestamps) -> new slots"},
    {"gather_frame", gather_frame, METH_VARARGS,
     "gather_frame(units, offset, cl_min, tags_codes, max_count, max_bytes, segments, queue_id, topic, "
     "parts, opaque, suggest, slow_suggest, slow_below, min_offset, max_offset)"},
    {NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_queueread",
                                        "The store's native parts: a ConsumeQueue read, an index put "
                                        "(see sparkmq.native).",
                                        -1, methods};

PyMODINIT_FUNC PyInit__queueread(void) {
    return PyModule_Create(&module_def);
}
