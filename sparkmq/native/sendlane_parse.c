/* Frame split and JSON header parse of the native lanes (the send lane's SEND_MESSAGE and
 * SEND_MESSAGE_V2, the pull lane's PULL_MESSAGE): a whole JSON-header frame with flag 0 and int32
 * numbers, its extFields values strings (with ``loose``, as a C++ client's SEND_MESSAGE writes them,
 * also integers, true/false/null, unknown keys, a remark). What the fields mean is
 * sendlane_fields.c's (sends) and pulllane.c's (pulls). Anything else returns 0: the reference path
 * decides. Every read is bounds-checked against the buffer's length. */
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

int sl_valid_utf8(const unsigned char *p, Py_ssize_t n) {
    const unsigned char *end = p + n;
    while (p < end) {
        if (*p < 0x80) {
            p++;
            continue;
        }
        int k = utf8_seq(p, end);
        if (k == 0) return 0;
        p += k;
    }
    return 1;
}

/* A JSON string at c->p (on its opening quote). 1 and *s filled, or 0 for anything the lane leaves
 * to the reference (a NUL or surrogate escape, a control character, bad UTF-8, no closing quote). */
static int parse_string(cursor *c, sl_str *s) {
    if (c->p >= c->end || *c->p != '"') return 0;
    /* Counted in locals, stored once: *s may alias the bytes read (char), which kept each count in memory. */
    const unsigned char *const raw = c->p + 1, *p = raw, *end = c->end;
    Py_ssize_t len = 0;
    int escaped = 0;
    while (p < end) {
        unsigned char ch = *p;
        if (ch == '"') {
            s->raw = raw;
            s->raw_len = p - raw;
            s->len = len;
            s->escaped = escaped;
            s->kind = SL_TEXT;
            s->present = 1;
            c->p = p + 1;
            return 1;
        }
        if (ch == '\\') {
            if (p + 1 >= end) return 0;
            unsigned char e = p[1];
            escaped = 1;
            if (e == 'u') {
                if (p + 6 > end) return 0;
                int h0 = hexval(p[2]), h1 = hexval(p[3]), h2 = hexval(p[4]), h3 = hexval(p[5]);
                if ((h0 | h1 | h2 | h3) < 0) return 0;
                unsigned cp = (unsigned)((h0 << 12) | (h1 << 8) | (h2 << 4) | h3);
                if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) return 0; /* defects, or pairs: the reference */
                len += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
                p += 6;
                continue;
            }
            if (!(e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't'))
                return 0;
            len += 1;
            p += 2;
            continue;
        }
        if (ch < 0x20) return 0;
        if (ch < 0x80) {
            len += 1;
            p += 1;
            continue;
        }
        int n = utf8_seq(p, end);
        if (n == 0) return 0;
        len += n;
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
        /* A one-letter key (SEND_MESSAGE_V2's a..n) where keys lists it at its place in the alphabet; else searched. */
        int k = key.raw_len == 1 ? key.raw[0] - 'a' : -1;
        if (k < 0 || k >= nkeys || keys[k][0] != key.raw[0] || keys[k][1] != 0)
            for (k = 0; k < nkeys && !sl_is_literal(&key, keys[k]); k++) continue;
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
    if (sl_is_literal(key, "code")) return K_CODE;
    if (sl_is_literal(key, "opaque")) return K_OPAQUE;
    if (sl_is_literal(key, "flag")) return K_FLAG;
    if (sl_is_literal(key, "version")) return K_VERSION;
    if (sl_is_literal(key, "language")) return K_LANGUAGE;
    if (sl_is_literal(key, "serializeTypeCurrentRPC")) return K_SERIALIZE;
    if (sl_is_literal(key, "extFields")) return K_EXT;
    if (loose && sl_is_literal(key, "remark")) return K_REMARK;
    return 0;
}

/* The JSON-header request frame at buf[pos:len] (see sl_parse_command); with ``loose``, the extFields as
 * parse_ext_fields reads them loosely, a "remark" string or null, *odd set by either. */
int sl_parse_command_ex(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t max_frame,
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
    return sl_parse_command_ex(buf, pos, len, max_frame, keys, nkeys, ext, 0, &code, &odd, &seen, out) &&
           code == want_code;
}
