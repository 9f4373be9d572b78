/* The send lane's reading of a parsed SEND_MESSAGE_V2 / SEND_MESSAGE header: its fields as a plain
 * single send, read exactly as the Python path reads them, or 0 to leave the request to it.
 *
 * - SEND_MESSAGE_V2 (310): string values of the V2 keys a..n (plain digits for numbers);
 * - SEND_MESSAGE (10) as the C++ client sends it: the long V1 names, values that are strings,
 *   integers, true/false or null (the Python decoder turns them into the strings it parses),
 *   a "remark", keys the V1 header does not know (AccessKey, OnsChannel, Signature, ...: ignored,
 *   as ``CommandHeader.from_fields`` ignores them) and the newline jsoncpp ends the header with.
 * - SEND_BATCH_MESSAGE (320) with V2's shape (the Java client's batch), its items walked here.
 * Either way: no transaction, no batch-as-send, no retry/DLQ/system topic, no delay (docs/native.md). */
#include "sendlane.h"

/* An extFields number the Python path reads as its value: ASCII digits only (leading zeros too),
 * within the field's range (int32, or int64 for the born timestamp), no escape. */
int sl_plain_number(const sl_str *s, int wide, int64_t *out) {
    if (!s->present || s->escaped || s->raw_len < 1 || s->raw_len > 24) return 0;
    uint64_t v = 0, most = wide ? (uint64_t)INT64_MAX : (uint64_t)INT32_MAX;
    for (Py_ssize_t i = 0; i < s->raw_len; i++) {
        unsigned char ch = s->raw[i];
        if (ch < '0' || ch > '9') return 0;
        if (v > (most - (uint64_t)(ch - '0')) / 10) return 0;
        v = v * 10 + (uint64_t)(ch - '0');
    }
    *out = (int64_t)v;
    return 1;
}

static int starts_with(const sl_str *s, const char *text) {
    size_t n = strlen(text);
    return (size_t)s->raw_len >= n && memcmp(s->raw, text, n) == 0;
}

/* The topic and properties of a plain single send (both strings): 1, or 0 to leave the request to the reference. */
static int plain_topic_and_props(const sl_str *topic, const sl_str *props, sl_request *out) {
    if (topic->kind != SL_TEXT || (props->present && props->kind != SL_TEXT)) return 0;
    out->topic = *topic;
    if (out->topic.escaped || out->topic.len == 0 || out->topic.len > SL_MAX_TOPIC) return 0;
    if (starts_with(&out->topic, "%RETRY%") || starts_with(&out->topic, "%DLQ%")) return 0;
    if (starts_with(&out->topic, "SCHEDULE_TOPIC_XXXX") || starts_with(&out->topic, "RMQ_SYS_")) return 0;
    out->props = *props;
    return out->props.len <= SL_MAX_PROPS; /* a delay level is checked on the decoded text */
}

/* A V1 integer as ``schema._parse`` reads the string the decoder made of it: a string or JSON integer of
 * Java's syntax [+-]?[0-9]+ (leading zeros too) within int32 (``wide``: int64), no escape. */
static int java_int(const sl_str *s, int wide, int64_t *out) {
    if (!s->present || s->escaped || (s->kind != SL_TEXT && s->kind != SL_NUMBER) || s->raw_len < 1) return 0;
    const unsigned char *p = s->raw, *end = s->raw + s->raw_len;
    int neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    if (p == end) return 0;
    uint64_t v = 0, most = wide ? (uint64_t)INT64_MAX + (uint64_t)neg : (uint64_t)INT32_MAX + (uint64_t)neg;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return 0;
        if (v > (most - (uint64_t)(*p - '0')) / 10) return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* A V1 boolean as ``parse_bool`` reads the decoder's string: true/1/false/0, any case, or JSON true/false/0/1. */
static int java_bool(const sl_str *s, int *out) {
    if (s->kind == SL_TRUE || s->kind == SL_FALSE) {
        *out = s->kind == SL_TRUE;
        return 1;
    }
    if (s->escaped || s->raw_len < 1 || s->raw_len > 5) return 0;
    char low[6];
    for (Py_ssize_t i = 0; i < s->raw_len; i++) {
        unsigned char ch = s->raw[i];
        low[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
    low[s->raw_len] = 0;
    if (strcmp(low, "true") == 0 || strcmp(low, "1") == 0) *out = 1;
    else if (strcmp(low, "false") == 0 || strcmp(low, "0") == 0) *out = 0;
    else return 0;
    return 1;
}

/* The V2 reading of a boolean: the literal strings "true" and "false" (what ``_v2_as_v1`` reads the
 * same way without its own checks; anything else is the reference's). */
static int v2_bool(const sl_str *s, int *out) {
    if (sl_is_literal(s, "true")) *out = 1;
    else if (sl_is_literal(s, "false")) *out = 0;
    else return 0;
    return 1;
}

typedef int (*number_reader)(const sl_str *s, int wide, int64_t *out);
typedef int (*bool_reader)(const sl_str *s, int *out);

/* The fields (V2's order: a=producerGroup b=topic c=defaultTopic d=queueNums e=queueId f=sysFlag
 * g=bornTimestamp h=flag i=properties j=reconsumeTimes k=unitMode l=maxReconsumeTimes m=batch n=bname)
 * as a plain single send, numbers and booleans read by ``number`` and ``boolean``: 1, or 0 to leave the
 * request to the reference. producerGroup, defaultTopic and bname are any value (the lane does not use
 * them); a negative queue id (a random queue) or sysFlag, a transaction and a batch go to the reference. */
static int read_send(sl_str f[14], number_reader number, bool_reader boolean, int batch, sl_request *out) {
    int64_t v;
    int b;
    if (!f[0].present || !f[1].present || !f[2].present) return 0;
    if (!number(&f[3], 0, &v)) return 0;
    if (!number(&f[4], 0, &v) || v < 0) return 0;
    out->queue_id = (int32_t)v;
    if (!number(&f[5], 0, &v) || v < 0 || (v & 0xC)) return 0; /* 0xC: the transaction type bits */
    out->sys_flag = (int32_t)v;
    if (!number(&f[6], 1, &v)) return 0;
    out->born_timestamp = v;
    if (!number(&f[7], 0, &v)) return 0;
    out->flag = (int32_t)v;
    out->reconsume_times = 0;
    if (f[9].present) {
        if (!number(&f[9], 0, &v)) return 0;
        out->reconsume_times = (int32_t)v;
    }
    if (f[10].present && !boolean(&f[10], &b)) return 0;
    if (f[11].present && !number(&f[11], 0, &v)) return 0;
    if (f[12].present && (!boolean(&f[12], &b) || (b && !batch))) return 0;
    return plain_topic_and_props(&f[1], &f[8], out);
}

/* The V2 keys a..n, then the V1 names of the same fields in the same order. */
static const char *const SEND_KEYS[28] = {
    "a",        "b",          "c",       "d",         "e",           "f",          "g",
    "h",        "i",          "j",       "k",         "l",           "m",          "n",
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag",     "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch", "bname"};

/* Whether the JSON header of the frame at buf[pos:len] opens with {"code":N (as sparkmq's, the Java and
 * the Go clients write it) for an N that is no send: such a frame (a pull, a ping, a heartbeat) is refused
 * before its whole header is parsed. 0 for anything else: the full parse decides, as before. */
static int other_code(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len) {
    static const char OPEN[] = "{\"code\":";
    const Py_ssize_t open = (Py_ssize_t)sizeof(OPEN) - 1;
    if (len - pos < 8 + open + 2 || buf[pos + 4] != 0) return 0;
    Py_ssize_t header_len = ((Py_ssize_t)buf[pos + 5] << 16) | ((Py_ssize_t)buf[pos + 6] << 8) | buf[pos + 7];
    if (header_len > len - pos - 8) header_len = len - pos - 8;
    const unsigned char *h = buf + pos + 8;
    if (header_len < open + 2 || memcmp(h, OPEN, (size_t)open) != 0) return 0;
    int32_t code = 0;
    Py_ssize_t i = open;
    while (i < header_len && i < open + 9 && h[i] >= '0' && h[i] <= '9') code = code * 10 + (h[i++] - '0');
    if (i == open || i >= header_len || (h[i] != ',' && h[i] != '}')) return 0;
    return code != 10 && code != 310 && code != 320;
}

int sl_parse_frame(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_frame, sl_request *out) {
    sl_str ext[28];
    sl_command command;
    int32_t code = 0;
    int odd;
    uint32_t seen;
    if (other_code(buf, pos, len)) return 0;
    if (!sl_parse_command_ex(buf, pos, len, max_frame, SEND_KEYS, 28, ext, 1, &code, &odd, &seen, &command))
        return 0;
    if (code == 310 || code == 320) { /* V2 keeps its strict shape: string values, the keys a..n only, no remark */
        if (odd || (seen >> 14) || !read_send(ext, sl_plain_number, v2_bool, code == 320, out)) return 0;
    } else if (code == 10) { /* the keys a..n are unknown to V1: ignored */
        if (!read_send(ext + 14, java_int, java_bool, 0, out)) return 0;
    } else {
        return 0;
    }
    out->code = code;
    out->opaque = command.opaque;
    out->body = command.body;
    out->body_len = command.body_len;
    out->frame_end = command.frame_end;
    out->items = 1;
    out->record_bytes = SL_RECORD_FIXED + out->body_len + out->topic.len + (out->props.present ? out->props.len : 0);
    return 1;
}

static int32_t get32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

#define ITEM_FIXED 22 /* batch.ITEM_FIXED_BYTES: size, magic, body crc, flag, body length, properties length */

Py_ssize_t sl_batch_item(const unsigned char *b, Py_ssize_t at, int32_t *flag, const unsigned char **body,
                         Py_ssize_t *body_len, const unsigned char **props, Py_ssize_t *props_len) {
    *flag = get32(b + at + 12);
    *body_len = get32(b + at + 16);
    *body = b + at + 20;
    *props_len = ((Py_ssize_t)b[at + 20 + *body_len] << 8) | b[at + 21 + *body_len];
    *props = b + at + ITEM_FIXED + *body_len;
    return at + get32(b + at);
}

int sl_walk_batch(sl_request *r, Py_ssize_t max_message) {
    if (r->sys_flag & 1) return 0; /* COMPRESSED_FLAG: inflated by the reference */
    const unsigned char *b = r->body;
    Py_ssize_t end = r->body_len, at = 0, items = 0, bytes = 0, extra = r->props.present ? r->props.len : 0;
    while (at < end) {
        if (end - at < ITEM_FIXED) return 0;
        Py_ssize_t size = get32(b + at), body_len = get32(b + at + 16);
        if (size < ITEM_FIXED || size > end - at || body_len < 0 || ITEM_FIXED + body_len > size) return 0;
        const unsigned char *p = b + at + 20 + body_len;
        Py_ssize_t props_len = (Py_ssize_t)((int16_t)(((unsigned)p[0] << 8) | p[1]));
        if (props_len < 0 || ITEM_FIXED + body_len + props_len != size) return 0;
        if (!sl_valid_utf8(p + 2, props_len)) return 0; /* its keys' hashes: the reference decodes with replacement */
        Py_ssize_t joined = props_len + extra + (props_len > 0 && extra > 0 && p[1 + props_len] != 0x02);
        Py_ssize_t record = SL_RECORD_FIXED + body_len + r->topic.len + joined;
        if (joined > SL_MAX_PROPS || record > max_message || record > INT32_MAX) return 0;
        bytes += record;
        items++;
        at += size;
    }
    if (items == 0) return 0;
    r->items = items;
    r->record_bytes = bytes;
    return 1;
}
