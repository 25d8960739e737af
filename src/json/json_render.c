/*
 * json_render.c - compact JSON text from trees (json_render) and from a
 * stream of calls (the jw_* writer), into an sbuf_t.
 *
 * Speed comes from writing straight into the buffer: jr_room() makes sure
 * there is space for the worst case of a small step (6 bytes per string
 * byte, 24 per number) and the step then stores bytes without further
 * checks. Strings are scanned 8 bytes at a time for the three things that
 * need escaping ('"', '\\', bytes below 0x20); runs in between are copied
 * with memcpy. UTF-8 is written as it is (the parser has validated it);
 * U+2028/2029 are not escaped.
 *
 * Numbers: integers exactly; doubles in the shortest of %.15g, %.16g, %.17g
 * that reads back equal, with a fast path for the common short decimals
 * (55.3, 13.3505); NaN and infinities, which JSON cannot carry, render null.
 */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ buffer */

/* Grows sb so that n more bytes (plus the NUL) fit, using only the public
 * sbuf API: append n bytes, then take them back. */
static void __attribute__((noinline)) jr_grow(sbuf_t *sb, size_t n)
{
    static const char pad[256];
    size_t            len = sb->len;
    size_t            left = n;

    while (left) {
        size_t k = left < sizeof pad ? left : sizeof pad;
        sb_add(sb, pad, k);
        left -= k;
    }
    sb->len = len;
    sb->p[len] = '\0';
}

static inline char *jr_room(sbuf_t *sb, size_t n)
{
    if (CR_UNLIKELY(!sb->p || sb->cap - sb->len < n + 1))
        jr_grow(sb, n);
    return sb->p + sb->len;
}

static inline void jr_putc(sbuf_t *sb, char c)
{
    char *w = jr_room(sb, 1);
    *w = c;
    sb->len++;
}

/* Keys and short values are a few bytes: two overlapping fixed-size copies
 * (inlined moves, reads within s[0..n)) instead of a call to memcpy. */
static inline void jr_copy(char *d, const char *s, size_t n)
{
    if (n >= 16 && n <= 32) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8 && n < 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4 && n < 8) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        memcpy(d, s, n);
    }
}

static inline void jr_put(sbuf_t *sb, const char *s, size_t n)
{
    char *w = jr_room(sb, n);
    jr_copy(w, s, n);
    sb->len += n;
}

static inline void jr_done(sbuf_t *sb)
{
    if (sb->p)
        sb->p[sb->len] = '\0';
}

/* ------------------------------------------------------------ strings */

/* 0: copied as is; else the letter after '\\' ('u' for \u00XX). */
static const char esc_tab[256] = {
    ['\0'] = 'u', ['\x01'] = 'u', ['\x02'] = 'u', ['\x03'] = 'u', ['\x04'] = 'u',
    ['\x05'] = 'u', ['\x06'] = 'u', ['\x07'] = 'u', ['\b'] = 'b', ['\t'] = 't',
    ['\n'] = 'n', ['\x0b'] = 'u', ['\f'] = 'f', ['\r'] = 'r', ['\x0e'] = 'u',
    ['\x0f'] = 'u', ['\x10'] = 'u', ['\x11'] = 'u', ['\x12'] = 'u', ['\x13'] = 'u',
    ['\x14'] = 'u', ['\x15'] = 'u', ['\x16'] = 'u', ['\x17'] = 'u', ['\x18'] = 'u',
    ['\x19'] = 'u', ['\x1a'] = 'u', ['\x1b'] = 'u', ['\x1c'] = 'u', ['\x1d'] = 'u',
    ['\x1e'] = 'u', ['\x1f'] = 'u', ['"'] = '"', ['\\'] = '\\',
};

#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Non-zero when one of the 8 bytes of x is '"', '\\' or below 0x20. */
static inline uint64_t swar_special(uint64_t x)
{
    uint64_t q = x ^ (ONES * '"');
    uint64_t b = x ^ (ONES * '\\');
    uint64_t lt = (x - ONES * 0x20) & ~x;
    uint64_t zq = (q - ONES) & ~q;
    uint64_t zb = (b - ONES) & ~b;
    return (lt | zq | zb) & HIGHS;
}

/* Writes the escaped body of s[0..n) at w (room for 6n bytes); returns the end. */
static char *jr_escape(char *w, const unsigned char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t            i = 0;

    while (i < n) {
        /* eight bytes at a time while none of them needs escaping (names,
         * ids, most values): one load, the test, one store (w has room for
         * 6n bytes, so the store never passes it) */
        while (n - i >= 8) {
            uint64_t x;
            memcpy(&x, s + i, 8);
            if (swar_special(x))
                break;
            memcpy(w, &x, 8);
            w += 8;
            i += 8;
        }
        /* a clean tail of a string of 8 bytes or more: the last eight bytes
         * in one overlapping load and store (the bytes before i in it are
         * clean too, so they were copied as they are: the store rewrites
         * them with themselves) */
        if (n - i < 8 && n >= 8 && i < n) {
            uint64_t x;
            memcpy(&x, s + n - 8, 8);
            if (!swar_special(x)) {
                memcpy(w - (8 - (n - i)), &x, 8);
                w += n - i;
                break;
            }
        }
        /* the tail, or the eight bytes that hold one to escape: byte by byte */
        for (size_t stop = n - i >= 8 ? i + 8 : n; i < stop; i++) {
            unsigned char c = s[i];
            char          e = esc_tab[c];
            if (CR_LIKELY(!e)) {
                *w++ = (char)c;
                continue;
            }
            *w++ = '\\';
            *w++ = e;
            if (e == 'u') {
                *w++ = '0';
                *w++ = '0';
                *w++ = hex[c >> 4];
                *w++ = hex[c & 15];
            }
        }
    }
    return w;
}

void json_render_string(sbuf_t *sb, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;

    jr_putc(sb, '"');
    /* chunks bound the worst-case reservation to 6 x 4 KiB */
    while (len) {
        size_t k = len < 4096 ? len : 4096;
        char  *w0 = jr_room(sb, 6 * k);
        char  *w = jr_escape(w0, u, k);
        sb->len += (size_t)(w - w0);
        u += k;
        len -= k;
    }
    jr_putc(sb, '"');
    jr_done(sb);
}

/* Quoted string at the current position, not yet NUL-terminated. */
static inline void jr_string(sbuf_t *sb, const char *s, size_t len)
{
    if (CR_LIKELY(len <= 4096)) {
        char *w0 = jr_room(sb, 6 * len + 2);
        char *w = w0;
        *w++ = '"';
        w = jr_escape(w, (const unsigned char *)s, len);
        *w++ = '"';
        sb->len += (size_t)(w - w0);
    } else {
        json_render_string(sb, s, len);
    }
}

/* ------------------------------------------------------------ numbers */

/* Writes v in decimal at w (room for 20 bytes); returns the end. */
static char *jr_u64(char *w, uint64_t v)
{
    static const char digits2[201] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char  tmp[20];
    char *t = tmp + sizeof tmp;
    size_t n;

    if (v < 10) {                       /* most counts, coordinates' integer parts */
        *w = (char)('0' + v);
        return w + 1;
    }
    if (v < 100) {
        memcpy(w, digits2 + 2 * v, 2);
        return w + 2;
    }

    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        t -= 2;
        memcpy(t, digits2 + 2 * r, 2);
    }
    if (v >= 10) {
        t -= 2;
        memcpy(t, digits2 + 2 * v, 2);
    } else {
        *--t = (char)('0' + v);
    }
    n = (size_t)(tmp + sizeof tmp - t);
    memcpy(w, t, n);
    return w + n;
}

static inline void jr_int(sbuf_t *sb, int64_t v)
{
    char *w0 = jr_room(sb, 21);
    char *w = w0;
    uint64_t u = (uint64_t)v;

    if (v < 0) {
        *w++ = '-';
        u = 0 - u;
    }
    w = jr_u64(w, u);
    sb->len += (size_t)(w - w0);
}

static const double pow10_tab[] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9 };

/* The shortest decimal that reads back as v, written at w (room for 32). */
static char *jr_double(char *w, double v)
{
    double a = fabs(v);
    char   buf[32];
    int    n;

    if (isnan(v) || isinf(v)) {
        memcpy(w, "null", 4);
        return w + 4;
    }
    if (v == 0) {
        if (signbit(v))
            *w++ = '-';
        *w++ = '0';
        return w;
    }
    /* integral and exact: plain digits */
    if (a < 9007199254740992.0 && a == (double)(uint64_t)a) {   /* floor without the libm call */
        if (v < 0)
            *w++ = '-';
        return jr_u64(w, (uint64_t)a);
    }
    /* Fast path: the fewest fraction digits k (1..9) such that the decimal
     * m / 10^k reads back as v. With m < 2^53 the division is correctly
     * rounded, as strtod would be, and with at most 15 significant digits
     * in [1e-4, 1e15) the text is exactly what %.15g would print. */
    if (a >= 1e-4 && a < 1e15) {
        for (int k = 1; k <= 9; k++) {
            double m = nearbyint(a * pow10_tab[k]);
            if (m >= 1e15)
                break;
            if (m / pow10_tab[k] == a) {
                uint64_t mi = (uint64_t)m;
                uint64_t ip = mi / (uint64_t)pow10_tab[k];
                uint64_t fp = mi % (uint64_t)pow10_tab[k];
                char     frac[10];
                int      fl = k;

                if (v < 0)
                    *w++ = '-';
                w = jr_u64(w, ip);
                *w++ = '.';
                for (int j = k - 1; j >= 0; j--) {
                    frac[j] = (char)('0' + fp % 10);
                    fp /= 10;
                }
                while (fl > 1 && frac[fl - 1] == '0')
                    fl--;                       /* cannot happen for minimal k; kept safe */
                memcpy(w, frac, (size_t)fl);
                return w + fl;
            }
        }
    }
    /* general case */
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (prec == 17 || strtod(buf, NULL) == v)
            break;
    }
    memcpy(w, buf, (size_t)n);
    return w + n;
}

void json_render_number(sbuf_t *sb, double v)
{
    char *w0 = jr_room(sb, 32);
    char *w = jr_double(w0, v);
    sb->len += (size_t)(w - w0);
    jr_done(sb);
}

/* ------------------------------------------------------------ trees */

static void jr_value(sbuf_t *sb, const json_t *n)
{
    switch (n->type) {
    case JSON_NULL:
        jr_put(sb, "null", 4);
        break;
    case JSON_TRUE:
        jr_put(sb, "true", 4);
        break;
    case JSON_FALSE:
        jr_put(sb, "false", 5);
        break;
    case JSON_NUMBER:
        if (n->is_int) {
            jr_int(sb, n->i);
        } else {
            char *w0 = jr_room(sb, 32);
            sb->len += (size_t)(jr_double(w0, n->num) - w0);
        }
        break;
    case JSON_STRING:
        jr_string(sb, n->str, n->len);
        break;
    case JSON_ARRAY:
        jr_putc(sb, '[');
        for (const json_t *c = n->child; c; c = c->next) {
            jr_value(sb, c);
            if (c->next)
                jr_putc(sb, ',');
        }
        jr_putc(sb, ']');
        break;
    case JSON_OBJECT:
        jr_putc(sb, '{');
        for (const json_t *c = n->child; c; c = c->next) {
            const char *k = c->key ? c->key : "";
            jr_string(sb, k, strlen(k));
            jr_putc(sb, ':');
            jr_value(sb, c);
            if (c->next)
                jr_putc(sb, ',');
        }
        jr_putc(sb, '}');
        break;
    default:
        jr_put(sb, "null", 4);
        break;
    }
}

void json_render(sbuf_t *sb, const json_t *n)
{
    if (!n)
        jr_put(sb, "null", 4);
    else
        jr_value(sb, n);
    jr_done(sb);
}

/* ------------------------------------------------------------ writer */

/* need_comma[] has one slot per level, set when the next value at that
 * level needs a comma; levels beyond JW_DEPTH_MAX share the last slot and
 * stay memory-safe. A level's slot is cleared when the level opens, so
 * jw_init clears only level 0 (the writer is on the stack of every render). */
static inline uint8_t *jw_slot(json_writer_t *w)
{
    return &w->need_comma[w->depth < JW_DEPTH_MAX ? w->depth : JW_DEPTH_MAX];
}

/* Before a value: the comma that separates it from the previous one. */
static inline void jw_pre(json_writer_t *w)
{
    if (*jw_slot(w))
        jr_putc(w->sb, ',');
}

static inline void jw_post(json_writer_t *w)
{
    *jw_slot(w) = 1;
    jr_done(w->sb);
}

void jw_init(json_writer_t *w, sbuf_t *sb)
{
    w->sb = sb;
    w->depth = 0;
    w->need_comma[0] = 0;
}

/* Opening and closing brackets: with room for a comma, the bracket and
 * the NUL (nearly always), stored without a call (no registers saved);
 * else through jr_room. */
static void __attribute__((noinline)) jw_begin_slow(json_writer_t *w, char c)
{
    jw_pre(w);
    jr_putc(w->sb, c);
    jr_done(w->sb);
}

static void __attribute__((noinline)) jw_end_slow(json_writer_t *w, char c)
{
    jr_putc(w->sb, c);
    jw_post(w);
}

static inline void jw_begin(json_writer_t *w, char c)
{
    sbuf_t *sb = w->sb;

    if (CR_LIKELY(sb->p && sb->cap - sb->len >= 3)) {
        char *d = sb->p + sb->len;
        if (*jw_slot(w))
            *d++ = ',';
        *d++ = c;
        *d = '\0';
        sb->len = (size_t)(d - sb->p);
    } else {
        jw_begin_slow(w, c);
    }
    w->depth++;
    *jw_slot(w) = 0;
}

static inline void jw_end(json_writer_t *w, char c)
{
    sbuf_t *sb = w->sb;

    if (w->depth > 0)
        w->depth--;
    if (CR_LIKELY(sb->p && sb->cap - sb->len >= 2)) {
        sb->p[sb->len++] = c;
        sb->p[sb->len] = '\0';
        *jw_slot(w) = 1;
    } else {
        jw_end_slow(w, c);
    }
}

void jw_object_begin(json_writer_t *w) { jw_begin(w, '{'); }
void jw_object_end(json_writer_t *w) { jw_end(w, '}'); }
void jw_array_begin(json_writer_t *w) { jw_begin(w, '['); }
void jw_array_end(json_writer_t *w) { jw_end(w, ']'); }

/* A pre-quoted piece (a key with its ':', or a whole member) after the
 * comma its level needs; `after` is the level's comma flag once it is
 * written (0 after a key: its value takes no comma). The common case, a
 * piece of 4..48 bytes with room in the buffer, calls nothing, so it runs
 * without saving registers; growing the buffer and other lengths go
 * through jw_piece_slow. */
static void __attribute__((noinline)) jw_piece_slow(json_writer_t *w, const char *s, size_t n, uint8_t after)
{
    uint8_t *slot = jw_slot(w);
    sbuf_t  *sb = w->sb;
    char    *d = jr_room(sb, n + 1);    /* the comma and the piece in one reservation */

    if (*slot)
        *d++ = ',';
    jr_copy(d, s, n);
    sb->len = (size_t)(d - sb->p) + n;
    *slot = after;
    jr_done(sb);
}

static inline void jw_piece(json_writer_t *w, const char *s, size_t n, uint8_t after)
{
    uint8_t *slot = jw_slot(w);
    sbuf_t  *sb = w->sb;
    char    *d;

    if (CR_UNLIKELY(!sb->p || sb->cap - sb->len < n + 2 || n < 4 || n > 48)) {
        jw_piece_slow(w, s, n, after);
        return;
    }
    d = sb->p + sb->len;
    if (*slot)
        *d++ = ',';
    if (n > 32) {                       /* two overlapping copies, as jr_copy does */
        memcpy(d, s, 32);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 16) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    }
    d += n;
    *d = '\0';
    sb->len = (size_t)(d - sb->p);
    *slot = after;
}

void jw_key_raw(json_writer_t *w, const char *quoted, size_t n)
{
    jw_piece(w, quoted, n, 0);
}

void jw_key(json_writer_t *w, const char *key)
{
    if (!key)
        key = "";
    jw_pre(w);
    jr_string(w->sb, key, strlen(key));
    jr_putc(w->sb, ':');
    *jw_slot(w) = 0;                    /* the value takes no comma */
    jr_done(w->sb);
}

void jw_string(json_writer_t *w, const char *s)
{
    jw_pre(w);
    if (s)
        jr_string(w->sb, s, strlen(s));
    else
        jr_put(w->sb, "null", 4);
    jw_post(w);
}

void jw_stringn(json_writer_t *w, const char *s, size_t n)
{
    jw_pre(w);
    jr_string(w->sb, s ? s : "", s ? n : 0);
    jw_post(w);
}

void jw_number(json_writer_t *w, double v)
{
    char *w0;

    jw_pre(w);
    w0 = jr_room(w->sb, 32);
    w->sb->len += (size_t)(jr_double(w0, v) - w0);
    jw_post(w);
}

void jw_int(json_writer_t *w, int64_t v)
{
    jw_pre(w);
    jr_int(w->sb, v);
    jw_post(w);
}

void jw_bool(json_writer_t *w, bool v)
{
    jw_pre(w);
    if (v)
        jr_put(w->sb, "true", 4);
    else
        jr_put(w->sb, "false", 5);
    jw_post(w);
}

void jw_null(json_writer_t *w)
{
    jw_pre(w);
    jr_put(w->sb, "null", 4);
    jw_post(w);
}

void jw_value(json_writer_t *w, const json_t *n)
{
    jw_pre(w);
    if (n)
        jr_value(w->sb, n);
    else
        jr_put(w->sb, "null", 4);
    jw_post(w);
}

void jw_raw(json_writer_t *w, const char *s, size_t n)
{
    jw_piece(w, s, n, 1);
}
