/* Frame split and SEND_MESSAGE / SEND_MESSAGE_V2 JSON header parse of the native send lane.
 *
 * Accepts two shapes of a whole JSON-header frame with flag 0 and int32 numbers:
 * - SEND_MESSAGE_V2 (310), string language / serializeTypeCurrentRPC, and extFields of the V2 keys
 *   a..n whose values are strings the Python path reads the same way (plain digits for numbers);
 * - SEND_MESSAGE (10) as the C++ client sends it: the long V1 names, values that are strings,
 *   integers, true/false or null (the Python decoder turns them into the strings it parses),
 *   a "remark", keys the V1 header does not know (AccessKey, OnsChannel, Signature, ...: ignored,
 *   as ``CommandHeader.from_fields`` ignores them) and the newline jsoncpp ends the header with.
 * Either way: no transaction, no batch, no retry/DLQ/system topic, no delay. Anything else returns
 * 0: the reference path decides. Every read is bounds-checked against the buffer's length. */
#include "sendlane.h"

#define WS(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r')

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && WS(*c->p)) c->p++;
}

static int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Length of a valid UTF-8 sequence at p (strict, as Python's decoder), 0 if invalid. */
static int utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned char b0 = p[0];
    Py_ssize_t left = end - p;
    if (b0 >= 0xC2 && b0 <= 0xDF) return (left >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (left < 3 || (p[2] & 0xC0) != 0x80) return 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
        return (p[1] >= lo && p[1] <= hi) ? 3 : 0;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (left < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
        return (p[1] >= lo && p[1] <= hi) ? 4 : 0;
    }
    return 0;
}

/* A JSON string at c->p (on its opening quote). 1 and *s filled, or 0 for anything the lane leaves
 * to the reference (a NUL or surrogate escape, a control character, bad UTF-8, no closing quote). */
static int parse_string(cursor *c, sl_str *s) {
    if (c->p >= c->end || *c->p != '"') return 0;
    const unsigned char *p = c->p + 1, *end = c->end;
    s->raw = p;
    s->len = 0;
    s->escaped = 0;
    s->kind = SL_TEXT;
    while (p < end) {
        unsigned char ch = *p;
        if (ch == '"') {
            s->raw_len = p - s->raw;
            s->present = 1;
            c->p = p + 1;
            return 1;
        }
        if (ch == '\\') {
            if (p + 1 >= end) return 0;
            unsigned char e = p[1];
            s->escaped = 1;
            if (e == 'u') {
                if (p + 6 > end) return 0;
                int h0 = hexval(p[2]), h1 = hexval(p[3]), h2 = hexval(p[4]), h3 = hexval(p[5]);
                if ((h0 | h1 | h2 | h3) < 0) return 0;
                unsigned cp = (unsigned)((h0 << 12) | (h1 << 8) | (h2 << 4) | h3);
                if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) return 0; /* defects, or pairs: the reference */
                s->len += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
                p += 6;
                continue;
            }
            if (!(e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't'))
                return 0;
            s->len += 1;
            p += 2;
            continue;
        }
        if (ch < 0x20) return 0;
        if (ch < 0x80) {
            s->len += 1;
            p += 1;
            continue;
        }
        int n = utf8_seq(p, end);
        if (n == 0) return 0;
        s->len += n;
        p += n;
    }
    return 0;
}

void sl_unescape(const sl_str *s, unsigned char *dst) {
    if (!s->escaped) {
        memcpy(dst, s->raw, (size_t)s->raw_len);
        return;
    }
    const unsigned char *p = s->raw, *end = s->raw + s->raw_len;
    while (p < end) {
        unsigned char ch = *p;
        if (ch != '\\') {
            *dst++ = ch;
            p++;
            continue;
        }
        unsigned char e = p[1];
        if (e == 'u') {
            unsigned cp = (unsigned)((hexval(p[2]) << 12) | (hexval(p[3]) << 8) | (hexval(p[4]) << 4) | hexval(p[5]));
            if (cp < 0x80) {
                *dst++ = (unsigned char)cp;
            } else if (cp < 0x800) {
                *dst++ = (unsigned char)(0xC0 | (cp >> 6));
                *dst++ = (unsigned char)(0x80 | (cp & 0x3F));
            } else {
                *dst++ = (unsigned char)(0xE0 | (cp >> 12));
                *dst++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                *dst++ = (unsigned char)(0x80 | (cp & 0x3F));
            }
            p += 6;
            continue;
        }
        switch (e) {
            case 'b': *dst++ = '\b'; break;
            case 'f': *dst++ = '\f'; break;
            case 'n': *dst++ = '\n'; break;
            case 'r': *dst++ = '\r'; break;
            case 't': *dst++ = '\t'; break;
            default: *dst++ = e; break; /* " \ / */
        }
        p += 2;
    }
}

/* A JSON integer in int32 range (no fraction, exponent or leading zero). */
static int parse_int32(cursor *c, int32_t *out) {
    const unsigned char *p = c->p, *end = c->end;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') return 0;
    if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return 0;
    int64_t v = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        if (++digits > 10) return 0;
        p++;
    }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return 0;
    if (neg) v = -v;
    if (v < INT32_MIN || v > INT32_MAX) return 0;
    *out = (int32_t)v;
    c->p = p;
    return 1;
}

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

static int is_literal(const sl_str *s, const char *text) {
    size_t n = strlen(text);
    return !s->escaped && (size_t)s->raw_len == n && memcmp(s->raw, text, n) == 0;
}

static int starts_with(const sl_str *s, const char *text) {
    size_t n = strlen(text);
    return (size_t)s->raw_len >= n && memcmp(s->raw, text, n) == 0;
}

/* A JSON integer as a value of the loose extFields: -?(0|[1-9][0-9]*), at most 19 digits, no fraction or exponent
 * (so the Python decoder's ``str(int)`` is its text, "-0" aside). */
static int parse_integer_token(cursor *c, sl_str *s) {
    const unsigned char *p = c->p, *end = c->end;
    if (p < end && *p == '-') p++;
    const unsigned char *digits = p;
    while (p < end && *p >= '0' && *p <= '9') p++;
    if (p == digits || p - digits > 19 || (*digits == '0' && p - digits > 1)) return 0;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return 0;
    s->raw = c->p;
    s->raw_len = p - c->p;
    s->len = s->raw_len;
    s->escaped = 0;
    s->kind = SL_NUMBER;
    s->present = 1;
    c->p = p;
    return 1;
}

static int take_word(cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* One extFields value: a string; with ``loose`` also an integer, true, false or null (s->present 0). */
static int parse_value(cursor *c, sl_str *s, int loose) {
    memset(s, 0, sizeof(*s));
    if (c->p < c->end && *c->p == '"') return parse_string(c, s);
    if (!loose || c->p >= c->end) return 0;
    switch (*c->p) {
        case 't':
        case 'f':
            s->raw = c->p;
            s->kind = *c->p == 't' ? SL_TRUE : SL_FALSE;
            if (!take_word(c, s->kind == SL_TRUE ? "true" : "false")) return 0;
            s->raw_len = s->len = c->p - s->raw;
            s->present = 1;
            return 1;
        case 'n':
            return take_word(c, "null");
        default:
            return parse_integer_token(c, s);
    }
}

/* extFields whose keys are all in ``keys`` (each at most once, at most 32 keys) and whose values are strings.
 * With ``loose``, also values parse_value takes and keys outside ``keys`` (their values checked, then ignored);
 * *odd is then set when the object holds any of those (an unknown key, a value that is not a string). */
static int parse_ext_fields(cursor *c, const char *const *keys, int nkeys, sl_str *fields, int loose, int *odd,
                            uint32_t *seen) {
    memset(fields, 0, (size_t)nkeys * sizeof(sl_str));
    *seen = 0;
    if (c->p >= c->end || *c->p != '{') return 0;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 1;
    }
    for (;;) {
        sl_str key, value;
        skip_ws(c);
        if (!parse_string(c, &key) || key.escaped) return 0;
        int k = 0;
        while (k < nkeys && !is_literal(&key, keys[k])) k++;
        if (k == nkeys && !loose) return 0;
        if (k < nkeys && (*seen >> k) & 1) return 0;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return 0;
        c->p++;
        skip_ws(c);
        if (!parse_value(c, &value, loose)) return 0;
        if (k == nkeys || value.kind != SL_TEXT || !value.present) *odd = 1;
        if (k < nkeys) {
            *seen |= 1u << k;
            fields[k] = value;
        }
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == '}') {
            c->p++;
            return 1;
        }
        return 0;
    }
}

enum {
    K_CODE = 1,
    K_OPAQUE = 2,
    K_FLAG = 4,
    K_VERSION = 8,
    K_LANGUAGE = 16,
    K_SERIALIZE = 32,
    K_EXT = 64,
    K_REMARK = 128
};

static int header_key(const sl_str *key, int loose) {
    if (key->escaped) return 0;
    if (is_literal(key, "code")) return K_CODE;
    if (is_literal(key, "opaque")) return K_OPAQUE;
    if (is_literal(key, "flag")) return K_FLAG;
    if (is_literal(key, "version")) return K_VERSION;
    if (is_literal(key, "language")) return K_LANGUAGE;
    if (is_literal(key, "serializeTypeCurrentRPC")) return K_SERIALIZE;
    if (is_literal(key, "extFields")) return K_EXT;
    if (loose && is_literal(key, "remark")) return K_REMARK;
    return 0;
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

/* The V2 fields as a plain single send: 1, or 0 to leave the request to the reference. */
static int read_v2(sl_str f[14], sl_request *out) {
    int64_t v;
    /* a=producerGroup b=topic c=defaultTopic d=queueNums e=queueId f=sysFlag g=bornTimestamp
       h=flag i=properties j=reconsumeTimes k=unitMode l=maxReconsumeTimes m=batch n=bname */
    if (!f[0].present || !f[1].present || !f[2].present) return 0;
    if (!sl_plain_number(&f[3], 0, &v)) return 0;
    if (!sl_plain_number(&f[4], 0, &v)) return 0;
    out->queue_id = (int32_t)v;
    if (!sl_plain_number(&f[5], 0, &v)) return 0;
    out->sys_flag = (int32_t)v;
    if (out->sys_flag & 0xC) return 0; /* transactions: prepared/commit/rollback handling is Python's */
    if (!sl_plain_number(&f[6], 1, &v)) return 0;
    out->born_timestamp = v;
    if (!sl_plain_number(&f[7], 0, &v)) return 0;
    out->flag = (int32_t)v;
    out->reconsume_times = 0;
    if (f[9].present) {
        if (!sl_plain_number(&f[9], 0, &v)) return 0;
        out->reconsume_times = (int32_t)v;
    }
    if (f[10].present && !is_literal(&f[10], "false") && !is_literal(&f[10], "true")) return 0;
    if (f[11].present && !sl_plain_number(&f[11], 0, &v)) return 0;
    if (f[12].present && !is_literal(&f[12], "false")) return 0;
    return plain_topic_and_props(&f[1], &f[8], out);
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

/* The V1 fields (same order as V2's) as a plain single send: 1, or 0 to leave the request to the reference.
 * producerGroup, defaultTopic and bname are any value (the lane does not use them); a negative queue id (a
 * random queue) or sysFlag, and a batch, go to the reference. */
static int read_v1(sl_str f[14], sl_request *out) {
    int64_t v;
    int b;
    if (!f[0].present || !f[1].present || !f[2].present) return 0;
    if (!java_int(&f[3], 0, &v)) return 0;
    if (!java_int(&f[4], 0, &v) || v < 0) return 0;
    out->queue_id = (int32_t)v;
    if (!java_int(&f[5], 0, &v) || v < 0 || (v & 0xC)) return 0;
    out->sys_flag = (int32_t)v;
    if (!java_int(&f[6], 1, &v)) return 0;
    out->born_timestamp = v;
    if (!java_int(&f[7], 0, &v)) return 0;
    out->flag = (int32_t)v;
    out->reconsume_times = 0;
    if (f[9].present) {
        if (!java_int(&f[9], 0, &v)) return 0;
        out->reconsume_times = (int32_t)v;
    }
    if (f[10].present && !java_bool(&f[10], &b)) return 0;
    if (f[11].present && !java_int(&f[11], 0, &v)) return 0;
    if (f[12].present && (!java_bool(&f[12], &b) || b)) return 0;
    return plain_topic_and_props(&f[1], &f[8], out);
}

/* The JSON-header request frame at buf[pos:len] (see sl_parse_command); with ``loose``, the extFields as
 * parse_ext_fields reads them loosely, a "remark" string or null, *odd set by either. */
static int parse_command(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_frame,
                         const char *const *keys, int nkeys, sl_str *ext, int loose, int32_t *code, int *odd,
                         uint32_t *ext_seen, sl_command *out) {
    if (len - pos < 8) return 0;
    const unsigned char *b = buf + pos;
    uint32_t length = ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
    if (length < 4 || (int64_t)length > (int64_t)max_frame - 4) return 0;
    if ((int64_t)(len - pos) < (int64_t)length + 4) return 0;
    if (b[4] != 0) return 0; /* serialize type: JSON only */
    uint32_t header_len = ((uint32_t)b[5] << 16) | ((uint32_t)b[6] << 8) | b[7];
    if (header_len > SL_MAX_HEADER || header_len + 4 > length) return 0;
    cursor c = {b + 8, b + 8 + header_len};
    int seen = 0;
    int32_t flag = 0, number = 0;
    *odd = 0;
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') return 0;
    c.p++;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') return 0;
    for (;;) {
        sl_str key, text;
        skip_ws(&c);
        if (!parse_string(&c, &key)) return 0;
        int k = header_key(&key, loose);
        if (k == 0 || (seen & k)) return 0;
        seen |= k;
        skip_ws(&c);
        if (c.p >= c.end || *c.p != ':') return 0;
        c.p++;
        skip_ws(&c);
        switch (k) {
            case K_CODE:
                if (!parse_int32(&c, code)) return 0;
                break;
            case K_OPAQUE:
                if (!parse_int32(&c, &out->opaque)) return 0;
                break;
            case K_FLAG:
                if (!parse_int32(&c, &flag)) return 0;
                break;
            case K_VERSION:
                if (!parse_int32(&c, &number)) return 0;
                break;
            case K_EXT:
                if (!parse_ext_fields(&c, keys, nkeys, ext, loose, odd, ext_seen)) return 0;
                break;
            case K_REMARK: /* a string or null; the Python path ignores it on a send */
                *odd = 1;
                if (!(c.p < c.end && *c.p == 'n' ? take_word(&c, "null") : parse_string(&c, &text))) return 0;
                break;
            default:
                if (!parse_string(&c, &text)) return 0;
        }
        skip_ws(&c);
        if (c.p >= c.end) return 0;
        if (*c.p == ',') {
            c.p++;
            continue;
        }
        if (*c.p != '}') return 0;
        c.p++;
        break;
    }
    skip_ws(&c); /* jsoncpp ends the header with a newline: JSON whitespace, as json.loads allows */
    if (c.p != c.end) return 0;
    if ((seen & (K_CODE | K_OPAQUE | K_EXT)) != (K_CODE | K_OPAQUE | K_EXT) || flag != 0) return 0;
    out->body = b + 8 + header_len;
    out->body_len = (Py_ssize_t)length - 4 - header_len;
    out->frame_end = pos + 4 + (Py_ssize_t)length;
    return 1;
}

int sl_parse_command(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_frame, int32_t want_code,
                     const char *const *keys, int nkeys, sl_str *ext, sl_command *out) {
    int32_t code = 0;
    int odd;
    uint32_t seen;
    return parse_command(buf, pos, len, max_frame, keys, nkeys, ext, 0, &code, &odd, &seen, out) && code == want_code;
}

/* The V2 keys a..n, then the V1 names of the same fields in the same order. */
static const char *const SEND_KEYS[28] = {
    "a",        "b",          "c",       "d",         "e",           "f",          "g",
    "h",        "i",          "j",       "k",         "l",           "m",          "n",
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag",     "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch", "bname"};

int sl_parse_frame(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_frame, sl_request *out) {
    sl_str ext[28];
    sl_command command;
    int32_t code = 0;
    int odd;
    uint32_t seen;
    if (!parse_command(buf, pos, len, max_frame, SEND_KEYS, 28, ext, 1, &code, &odd, &seen, &command)) return 0;
    if (code == 310) { /* V2 keeps its strict shape: string values, the keys a..n only, no remark */
        if (odd || (seen >> 14) || !read_v2(ext, out)) return 0;
    } else if (code == 10) { /* the keys a..n are unknown to V1: ignored */
        if (!read_v1(ext + 14, out)) return 0;
    } else {
        return 0;
    }
    out->code = code;
    out->opaque = command.opaque;
    out->body = command.body;
    out->body_len = command.body_len;
    out->frame_end = command.frame_end;
    return 1;
}

uint32_t sl_java_hash(uint32_t h, const unsigned char *s, Py_ssize_t n) {
    const unsigned char *p = s, *end = s + n;
    while (p < end) {
        unsigned char b0 = *p;
        uint32_t cp;
        if (b0 < 0x80) {
            cp = b0;
            p += 1;
        } else if (b0 < 0xE0) {
            cp = ((uint32_t)(b0 & 0x1F) << 6) | (p[1] & 0x3F);
            p += 2;
        } else if (b0 < 0xF0) {
            cp = ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
            p += 3;
        } else {
            cp = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
                 (p[3] & 0x3F);
            p += 4;
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            cp = 0xDC00 + (cp & 0x3FF);
        }
        h = 31 * h + cp;
    }
    return h;
}

static uint32_t crc_table[8][256];
static int crc_ready = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    crc_ready = 1;
}

/* zlib.crc32 (slicing by 8). */
uint32_t sl_crc32(const unsigned char *p, Py_ssize_t n) {
    if (!crc_ready) crc_init();
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

void sl_put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

void sl_put64(unsigned char *p, uint64_t v) {
    sl_put32(p, (uint32_t)(v >> 32));
    sl_put32(p + 4, (uint32_t)v);
}

Py_ssize_t sl_put_decimal(char *out, long long v) {
    char tmp[24];
    int n = 0, neg = v < 0;
    unsigned long long u = neg ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    Py_ssize_t k = 0;
    if (neg) out[k++] = '-';
    while (n) out[k++] = tmp[--n];
    return k;
}
