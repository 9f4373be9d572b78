/* The native send lane: shared declarations of sendlane.c (the module, the group object, records,
 * dispatch columns, responses), sendlane_parse.c (frame split, JSON header parse) and sendlane_fields.c
 * (a send header's fields).
 * Everything the lane cannot handle exactly as the Python path does makes it stop before that
 * request: the Python path (the reference) then serves it. */
#ifndef SPARKMQ_SENDLANE_H
#define SPARKMQ_SENDLANE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SL_MAX_HEADER 32767 /* wire_text.MAX_FIELD_CHARS: a longer header takes the checked path */
#define SL_MAX_PROPS 32767  /* layout.MAX_PROPERTIES_BYTES */
#define SL_MAX_TOPIC 127    /* layout.MAX_TOPIC_BYTES */
#define SL_RECORD_FIXED 91  /* layout.RECORD_FIXED_BYTES */
#define SL_HEAD 88          /* layout.HEADER_BYTES */

enum { SL_TEXT = 0, SL_NUMBER, SL_TRUE, SL_FALSE };

/* A value of the header: its raw JSON text (between the quotes for a string) and what it decodes to. */
typedef struct {
    const unsigned char *raw;
    Py_ssize_t raw_len;
    Py_ssize_t len; /* UTF-8 bytes once unescaped */
    int escaped;
    int present;
    int kind; /* SL_TEXT (a JSON string), or, in a V1 send's extFields, a JSON integer, true or false */
} sl_str;

/* One SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320) request as the lane accepts it. */
typedef struct {
    int32_t code;
    int32_t opaque;
    sl_str topic;
    sl_str props;
    int32_t queue_id;
    int32_t sys_flag;
    int32_t flag;
    int64_t born_timestamp;
    int32_t reconsume_times;
    const unsigned char *body;
    Py_ssize_t body_len;
    Py_ssize_t frame_end; /* offset just after the frame, relative to the scan's buffer */
    Py_ssize_t items;        /* records the request becomes: 1, or a batch's items */
    Py_ssize_t record_bytes; /* their CommitLog bytes */
} sl_request;

/* A request frame's opaque and body, and where it ends (relative to the scan's buffer). */
typedef struct {
    int32_t opaque;
    const unsigned char *body;
    Py_ssize_t body_len;
    Py_ssize_t frame_end;
} sl_command;

#define MAX_TOPICS 64
#define MAX_KEYS 1024

/* Columns per request (opaque, queue_id, wait, first_row) and per record (the rest): a single send is one
 * record, a batch's records are first_row[i] .. first_row[i + 1] - 1. */
typedef struct {
    PyObject_HEAD Py_ssize_t count; /* requests */
    Py_ssize_t rows;                /* records */
    int32_t code; /* the request code of every request of the group */
    Py_ssize_t end;
    int32_t *opaque;
    int32_t *queue_id;
    int32_t *first_row; /* count + 1 entries */
    int32_t *topic_of;
    int32_t *key_of;
    int64_t *record_at; /* offset of each record in records */
    int32_t *record_size;
    int32_t *body_len;
    int32_t *tags_code;
    int32_t *wait; /* WAIT is not "false": the send waits for its flush (SYNC_FLUSH) */
    int64_t *queue_offset; /* after place() */
    unsigned char *records;
    Py_ssize_t records_len;
    int64_t *index_hash;
    int32_t *index_row;
    Py_ssize_t index_count;
    Py_ssize_t topic_count;
    PyObject *topics; /* list[str] */
    int32_t topic_max_queue[MAX_TOPICS];
    int64_t topic_messages[MAX_TOPICS];
    int64_t topic_bytes[MAX_TOPICS];
    Py_ssize_t key_count;
    int32_t *key_topic;
    int32_t *key_queue;
    int64_t *key_messages;
    int64_t physical_start;
    int placed;
    PyObject *keys; /* list[(topic, queue id)], made at the first use */
    uint64_t key_bits[16]; /* key_index's filter: a clear bit is a (topic, queue) not among the keys yet */
} SendGroup;

extern PyTypeObject SendGroupType;

/* Room in g for n requests' and rows records' columns (group_dealloc frees it): 0, or -1 with an exception. */
int sl_group_columns(SendGroup *g, Py_ssize_t n, Py_ssize_t rows);

/* Arguments of a METH_FASTCALL function read as PyArg_ParseTuple's formats read them, without its format
 * walk (the lane's calls run per read): "n" (an index within [lo, hi], else OverflowError; "i": INT_MIN..INT_MAX),
 * "L", and "y*" / "w*" (``writable``: a failed export is a TypeError, as PyArg raises it). 0, or -1 with an
 * exception (no buffer held). */
int sl_ssize_arg(PyObject *arg, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t *out);
int sl_ll_arg(PyObject *arg, long long *out);
int sl_buffer_arg(PyObject *arg, Py_buffer *view, int writable);
/* nargs within [lo, hi], else TypeError naming ``signature``. */
int sl_nargs(Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char *signature);

/* Big-endian stores, and a decimal integer written at out (its length returned). */
void sl_put32(unsigned char *p, uint32_t v);
void sl_put64(unsigned char *p, uint64_t v);
Py_ssize_t sl_put_decimal(char *out, long long v);

/* Parse the JSON-header request frame at buf[pos:len] with code ``want_code`` and flag 0 whose
 * extFields keys are all among ``keys`` (values, in ``ext``, strings). 1: parsed; 0: not one the
 * lane takes (or incomplete). Never reads outside buf[0:len]. */
int sl_parse_command(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_frame, int32_t want_code,
                     const char *const *keys, int nkeys, sl_str *ext, sl_command *out);

/* sl_parse_command with any codes; with ``loose``, extFields values may also be integers, true/false or null
 * (null: absent) and keys outside ``keys`` are skipped (their values checked), and a "remark" string or null
 * is allowed: *odd is set when any of those occurs. *code: the frame's code; *ext_seen: bit k set when
 * keys[k] occurred (null too). */
int sl_parse_command_ex(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_frame,
                        const char *const *keys, int nkeys, sl_str *ext, int loose, int32_t *code, int *odd,
                        uint32_t *ext_seen, sl_command *out);

/* Whether the unescaped string ``s`` is exactly ``text``. Inline, the first byte compared first: a
 * header's keys are matched against lists of names, and most differ there (no strlen, no memcmp). */
static inline int sl_is_literal(const sl_str *s, const char *text) {
    if (s->escaped || (s->raw_len > 0 ? s->raw[0] != (unsigned char)text[0] : text[0] != 0)) return 0;
    size_t n = strlen(text);
    return (size_t)s->raw_len == n && memcmp(s->raw, text, n) == 0;
}

/* An extFields number as the Python path reads it: ASCII digits (leading zeros too) within int32
 * (``wide``: int64), no escape. */
int sl_plain_number(const sl_str *s, int wide, int64_t *out);

/* Parse the frame at buf[pos:len]. 1: a plain send, *out filled; 0: not one the lane takes (or
 * incomplete). Never reads outside buf[0:len]. */
int sl_parse_frame(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_frame, sl_request *out);

/* The items of a SEND_BATCH_MESSAGE body as ``message/batch.py``'s ``decode_batch_items`` reads them, each
 * one record of at most ``max_message`` bytes with the header's properties appended (``append_properties``):
 * 1 with r->items and r->record_bytes set, or 0 to leave the request to the reference (a compressed body,
 * no item, a malformed item, properties over the limit, a record over ``max_message``). */
int sl_walk_batch(sl_request *r, Py_ssize_t max_message);

/* Item ``at`` of a batch body that sl_walk_batch accepted: its flag, body and properties, and the next item's offset. */
Py_ssize_t sl_batch_item(const unsigned char *b, Py_ssize_t at, int32_t *flag, const unsigned char **body,
                         Py_ssize_t *body_len, const unsigned char **props, Py_ssize_t *props_len);

/* Whether p[0:n] is UTF-8 that Python's strict decoder takes. */
int sl_valid_utf8(const unsigned char *p, Py_ssize_t n);

/* Unescape a header string into dst (s->len bytes). */
void sl_unescape(const sl_str *s, unsigned char *dst);

/* Java's String.hashCode over prefix (UTF-8) then value (UTF-8), both valid UTF-8, continuing h. */
uint32_t sl_java_hash(uint32_t h, const unsigned char *s, Py_ssize_t n);

/* The pull lane (pulllane.c): scan_pulls() of the module. */
PyObject *sl_scan_pulls(PyObject *module, PyObject *args);

/* merge() of the module (sendgroup.c). */
PyObject *sl_merge_groups(PyObject *module, PyObject *groups);

uint32_t sl_crc32(const unsigned char *data, Py_ssize_t n);

#endif
