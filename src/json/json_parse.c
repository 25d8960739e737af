/*
 * json_parse.c - strict RFC 8259 parser, in situ, nodes on the arena.
 *
 * The input buffer is NUL-terminated at buf[len] first; that NUL is a
 * sentinel that every scanning loop stops at, so no loop needs a bounds
 * check. Strings are decoded in place: the write cursor trails the read
 * cursor (a decoded string is never longer than its escaped form) and the
 * terminating NUL lands at or before the closing quote, which the parser has
 * already consumed. A string without escapes is not moved at all.
 *
 * Strictness: no comments, no trailing commas, no leading zeros, no NaN or
 * Infinity, no raw control characters in strings, no byte-order mark, \u
 * escapes must form valid scalar values (surrogates only as pairs, no
 * \u0000 because strings are NUL-terminated), raw bytes must be well-formed
 * UTF-8, numbers that overflow a double are rejected.
 *
 * Duplicate member names are kept, in document order: the parser does not
 * judge them, the caller does (json_get returns the first).
 *
 * The grammar is parsed by recursive descent; recursion depth is bounded by
 * max_depth, itself clamped to JSON_DEPTH_MAX (json.h) so that a careless
 * limit cannot overflow the C stack, and the writer renders what was parsed.
 */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_DEPTH_DEFAULT  64

typedef struct jparser {
    arena_t       *a;
    unsigned char *p;           /* read cursor */
    unsigned char *start;
    unsigned char *end;         /* buf + len, holds the sentinel NUL */
    json_t        *slab;        /* nodes pre-allocated from the arena */
    json_t        *slab_end;
    uint32_t       slab_n;      /* size of the next slab */
    uint32_t       depth;
    uint32_t       max_depth;
    bool           failed;
    char          *err;
    size_t         errlen;
} jparser_t;

/* ------------------------------------------------------------ tables */

/* 1 for bytes that may appear raw in a string without further thought:
 * printable ASCII other than '"' and '\\'. */
static const uint8_t str_plain[256] = {
    ['\x20'] = 1, ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
    ['('] = 1, [')'] = 1, ['*'] = 1, ['+'] = 1, [','] = 1, ['-'] = 1, ['.'] = 1, ['/'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1, [':'] = 1, [';'] = 1, ['<'] = 1, ['='] = 1, ['>'] = 1, ['?'] = 1,
    ['@'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1,
    ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1,
    ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['['] = 1, [']'] = 1, ['^'] = 1, ['_'] = 1,
    ['`'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1,
    ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1,
    ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1,
    ['x'] = 1, ['y'] = 1, ['z'] = 1, ['{'] = 1, ['|'] = 1, ['}'] = 1, ['~'] = 1, ['\x7f'] = 1,
};

static const double pow10_exact[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* ------------------------------------------------------------ errors */

static void *jp_fail(jparser_t *P, const unsigned char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void *jp_fail(jparser_t *P, const unsigned char *at, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (P->failed)
        return NULL;
    P->failed = true;
    if (!P->err || P->errlen == 0)
        return NULL;
    n = snprintf(P->err, P->errlen, "at offset %zu: ", (size_t)(at - P->start));
    if (n < 0 || (size_t)n >= P->errlen)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(P->err + n, P->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return NULL;
}

/* Describes the byte at `at` for an error message. */
static const char *jp_what(const jparser_t *P, const unsigned char *at, char buf[16])
{
    if (at >= P->end)
        return "end of input";
    if (*at >= 0x21 && *at < 0x7f)
        snprintf(buf, 16, "'%c'", *at);
    else
        snprintf(buf, 16, "byte 0x%02x", *at);
    return buf;
}

static void *jp_expected(jparser_t *P, const unsigned char *at, const char *what)
{
    char b[16];
    return jp_fail(P, at, "expected %s, found %s", what, jp_what(P, at, b));
}

/* ------------------------------------------------------------ nodes */

static inline json_t *jp_node(jparser_t *P, uint8_t type)
{
    json_t *n;

    if (CR_UNLIKELY(P->slab == P->slab_end)) {
        P->slab = arena_alloc(P->a, (size_t)P->slab_n * sizeof(json_t));
        P->slab_end = P->slab + P->slab_n;
        if (P->slab_n < 256)
            P->slab_n *= 2;
    }
    n = P->slab++;
    n->type = type;
    n->is_int = 0;
    n->_reserved = 0;
    n->len = 0;
    n->key = NULL;
    n->next = NULL;
    return n;
}

static inline void jp_skip_ws(jparser_t *P)
{
    unsigned char *p = P->p;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    P->p = p;
}

/* ------------------------------------------------------------ UTF-8 */

/* Sequences are measured by cr_utf8_seq (core.h), shared with problem_set. */

bool json_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *end = p + len;

    while (p < end) {
        /* ASCII runs, 8 bytes at a time */
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (w & 0x8080808080808080ULL)
                break;
            p += 8;
        }
        if (p >= end)
            break;
        if (*p < 0x80) {
            p++;
            continue;
        }
        int n = cr_utf8_seq(p, end);
        if (n == 0)
            return false;
        p += n;
    }
    return true;
}

/* ------------------------------------------------------------ strings */

static inline int hex4(const unsigned char *s)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = (v << 4) | d;
    }
    return v;
}

static unsigned char *put_utf8(unsigned char *w, uint32_t cp)
{
    if (cp < 0x80) {
        *w++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *w++ = (unsigned char)(0xc0 | (cp >> 6));
        *w++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *w++ = (unsigned char)(0xe0 | (cp >> 12));
        *w++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        *w++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else {
        *w++ = (unsigned char)(0xf0 | (cp >> 18));
        *w++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        *w++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        *w++ = (unsigned char)(0x80 | (cp & 0x3f));
    }
    return w;
}

/* P->p is just past the opening quote. Decodes the string in place and
 * returns its start (NUL-terminated), or NULL on error. */
static char *jp_string(jparser_t *P, uint32_t *outlen)
{
    unsigned char *s = P->p;
    unsigned char *r = s;
    unsigned char *w;

    /* fast path: plain ASCII up to the closing quote */
    while (CR_LIKELY(str_plain[*r]))
        r++;
    if (CR_LIKELY(*r == '"') && CR_LIKELY((size_t)(r - s) <= UINT32_MAX)) {
        *r = '\0';
        P->p = r + 1;
        *outlen = (uint32_t)(r - s);
        return (char *)s;
    }

    /* slow path: escapes and non-ASCII; w trails r */
    w = r;
    for (;;) {
        unsigned char c = *r;
        if (str_plain[c]) {
            *w++ = *r++;
            continue;
        }
        if (c == '"')
            break;
        if (c == '\\') {
            unsigned char e = r[1];
            switch (e) {
            case '"':  *w++ = '"';  r += 2; continue;
            case '\\': *w++ = '\\'; r += 2; continue;
            case '/':  *w++ = '/';  r += 2; continue;
            case 'b':  *w++ = '\b'; r += 2; continue;
            case 'f':  *w++ = '\f'; r += 2; continue;
            case 'n':  *w++ = '\n'; r += 2; continue;
            case 'r':  *w++ = '\r'; r += 2; continue;
            case 't':  *w++ = '\t'; r += 2; continue;
            case 'u': {
                int cp = hex4(r + 2);
                if (cp < 0)
                    return jp_fail(P, r, "invalid \\u escape: expected 4 hex digits");
                if (cp == 0)
                    return jp_fail(P, r, "\\u0000 is not allowed in strings");
                if (cp >= 0xdc00 && cp <= 0xdfff)
                    return jp_fail(P, r, "lone low surrogate \\u%04x", (unsigned)cp);
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    int lo;
                    if (r[6] != '\\' || r[7] != 'u' || (lo = hex4(r + 8)) < 0 ||
                        lo < 0xdc00 || lo > 0xdfff)
                        return jp_fail(P, r, "high surrogate \\u%04x not followed by a low surrogate escape",
                                       (unsigned)cp);
                    uint32_t full = 0x10000 + (((uint32_t)cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
                    w = put_utf8(w, full);
                    r += 12;
                } else {
                    w = put_utf8(w, (uint32_t)cp);
                    r += 6;
                }
                continue;
            }
            default:
                if (r + 1 >= P->end)
                    return jp_fail(P, r + 1, "unterminated string");
                {
                    char b[16];
                    return jp_fail(P, r, "invalid escape '\\' followed by %s", jp_what(P, r + 1, b));
                }
            }
        }
        if (c >= 0x80) {
            int n = cr_utf8_seq(r, P->end);
            if (n == 0)
                return jp_fail(P, r, "invalid UTF-8 in string");
            memmove(w, r, (size_t)n);
            w += n;
            r += n;
            continue;
        }
        /* c < 0x20 */
        if (r >= P->end)
            return jp_fail(P, r, "unterminated string");
        return jp_fail(P, r, "control character 0x%02x in string (must be escaped)", c);
    }
    *w = '\0';
    P->p = r + 1;
    if ((size_t)(w - s) > UINT32_MAX)
        return jp_fail(P, s, "string too long");
    *outlen = (uint32_t)(w - s);
    return (char *)s;
}

/* ------------------------------------------------------------ numbers */

static json_t *jp_number(jparser_t *P)
{
    unsigned char *s = P->p;
    unsigned char *p = s;
    bool           neg = false;
    uint64_t       mant = 0;
    int            ndig = 0;        /* significant digits accumulated in mant */
    bool           mant_exact = true;
    int64_t        frac_digits = 0;
    bool           is_float = false;
    int64_t        exp10 = 0;
    json_t        *n;

    if (*p == '-') {
        neg = true;
        p++;
    }
    if (*p == '0') {
        p++;
        if (*p >= '0' && *p <= '9')
            return jp_fail(P, s, "leading zeros are not allowed in numbers");
    } else if (*p >= '1' && *p <= '9') {
        while (*p >= '0' && *p <= '9') {
            if (ndig < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                ndig++;
            } else {
                mant_exact = false;
                exp10++;
            }
            p++;
        }
    } else {
        return jp_expected(P, p, "a digit");
    }
    if (*p == '.') {
        p++;
        if (!(*p >= '0' && *p <= '9'))
            return jp_expected(P, p, "a digit after '.'");
        is_float = true;
        while (*p >= '0' && *p <= '9') {
            if (ndig < 19) {
                if (mant != 0 || *p != '0')
                    ndig++;
                mant = mant * 10 + (uint64_t)(*p - '0');
                frac_digits++;
            } else if (*p != '0') {
                mant_exact = false;
            }
            p++;
        }
    }
    if (*p == 'e' || *p == 'E') {
        bool    eneg = false;
        int64_t e = 0;
        p++;
        if (*p == '+' || *p == '-') {
            eneg = (*p == '-');
            p++;
        }
        if (!(*p >= '0' && *p <= '9'))
            return jp_expected(P, p, "a digit in the exponent");
        is_float = true;
        while (*p >= '0' && *p <= '9') {
            if (e < 1000000)
                e = e * 10 + (*p - '0');
            p++;
        }
        exp10 += eneg ? -e : e;
    }
    P->p = p;

    n = jp_node(P, JSON_NUMBER);
    if (!is_float && mant_exact) {
        if (!neg && mant <= (uint64_t)INT64_MAX) {
            n->is_int = 1;
            n->i = (int64_t)mant;
            return n;
        }
        if (neg && mant != 0 && mant <= (uint64_t)INT64_MAX + 1) {
            n->is_int = 1;
            n->i = (int64_t)(0 - mant);
            return n;
        }
        /* "-0" stays a double so that it renders back as -0 */
    }
    /* Clinger's fast path: exact mantissa and exact power of ten give a
     * correctly rounded quotient or product. */
    exp10 -= frac_digits;
    if (mant_exact && mant <= (1ULL << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)mant;
        d = exp10 < 0 ? d / pow10_exact[-exp10] : d * pow10_exact[exp10];
        n->num = neg ? -d : d;
        return n;
    }
    /* The token is validated and followed by a byte that cannot extend it
     * (the buffer is NUL-terminated), so strtod stops at p. The "C" locale
     * is assumed (the broker never calls setlocale). */
    {
        char  *ep;
        double d = strtod((const char *)s, &ep);
        if ((unsigned char *)ep != p)
            return jp_fail(P, s, "malformed number");
        if (isinf(d))
            return jp_fail(P, s, "number out of range (overflows a double)");
        n->num = d;
    }
    return n;
}

/* ------------------------------------------------------------ values */

static json_t *jp_value(jparser_t *P);

static json_t *jp_array(jparser_t *P)
{
    json_t  *arr = jp_node(P, JSON_ARRAY);
    json_t **link = &arr->child;
    uint32_t count = 0;

    arr->child = NULL;
    if (++P->depth > P->max_depth)
        return jp_fail(P, P->p, "nesting deeper than %u", P->max_depth);
    P->p++;                                     /* '[' */
    jp_skip_ws(P);
    if (*P->p == ']') {
        P->p++;
        P->depth--;
        return arr;
    }
    for (;;) {
        json_t *v = jp_value(P);
        if (!v)
            return NULL;
        *link = v;
        link = &v->next;
        if (CR_UNLIKELY(++count == UINT32_MAX))
            return jp_fail(P, P->p, "too many elements in array");
        jp_skip_ws(P);
        if (*P->p == ',') {
            P->p++;
            jp_skip_ws(P);
            if (*P->p == ']')
                return jp_fail(P, P->p, "trailing comma in array");
            continue;
        }
        if (*P->p == ']') {
            P->p++;
            break;
        }
        return jp_expected(P, P->p, "',' or ']'");
    }
    arr->len = count;
    P->depth--;
    return arr;
}

static json_t *jp_object(jparser_t *P)
{
    json_t  *obj = jp_node(P, JSON_OBJECT);
    json_t **link = &obj->child;
    uint32_t count = 0;

    obj->child = NULL;
    if (++P->depth > P->max_depth)
        return jp_fail(P, P->p, "nesting deeper than %u", P->max_depth);
    P->p++;                                     /* '{' */
    jp_skip_ws(P);
    if (*P->p == '}') {
        P->p++;
        P->depth--;
        return obj;
    }
    for (;;) {
        const char *key;
        uint32_t    klen;
        json_t     *v;

        if (*P->p != '"')
            return jp_expected(P, P->p, "'\"' (a member name)");
        P->p++;
        key = jp_string(P, &klen);
        if (!key)
            return NULL;
        jp_skip_ws(P);
        if (*P->p != ':')
            return jp_expected(P, P->p, "':'");
        P->p++;
        jp_skip_ws(P);
        v = jp_value(P);
        if (!v)
            return NULL;
        v->key = key;
        *link = v;
        link = &v->next;
        if (CR_UNLIKELY(++count == UINT32_MAX))
            return jp_fail(P, P->p, "too many members in object");
        jp_skip_ws(P);
        if (*P->p == ',') {
            P->p++;
            jp_skip_ws(P);
            if (*P->p == '}')
                return jp_fail(P, P->p, "trailing comma in object");
            continue;
        }
        if (*P->p == '}') {
            P->p++;
            break;
        }
        return jp_expected(P, P->p, "',' or '}'");
    }
    obj->len = count;
    P->depth--;
    return obj;
}

static json_t *jp_value(jparser_t *P)
{
    unsigned char *p = P->p;
    json_t        *n;

    switch (*p) {
    case '{':
        return jp_object(P);
    case '[':
        return jp_array(P);
    case '"': {
        uint32_t len;
        char    *s;
        P->p = p + 1;
        s = jp_string(P, &len);
        if (!s)
            return NULL;
        n = jp_node(P, JSON_STRING);
        n->str = s;
        n->len = len;
        return n;
    }
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        return jp_number(P);
    case 't':
        if (p[1] == 'r' && p[2] == 'u' && p[3] == 'e') {
            P->p = p + 4;
            return jp_node(P, JSON_TRUE);
        }
        break;
    case 'f':
        if (p[1] == 'a' && p[2] == 'l' && p[3] == 's' && p[4] == 'e') {
            P->p = p + 5;
            return jp_node(P, JSON_FALSE);
        }
        break;
    case 'n':
        if (p[1] == 'u' && p[2] == 'l' && p[3] == 'l') {
            P->p = p + 4;
            n = jp_node(P, JSON_NULL);
            return n;
        }
        break;
    default:
        break;
    }
    return jp_expected(P, p, "a value");
}

/* ------------------------------------------------------------ API */

json_t *json_parse(arena_t *a, char *buf, size_t len, const json_limits_t *lim,
                   char *err, size_t errlen)
{
    jparser_t P;
    json_t   *root;
    size_t    max_size = lim && lim->max_size && lim->max_size < JSON_DOC_MAX ? lim->max_size : JSON_DOC_MAX;
    uint32_t  max_depth = lim && lim->max_depth ? lim->max_depth : JSON_DEPTH_DEFAULT;

    if (err && errlen)
        err[0] = '\0';
    if (!buf) {
        if (err && errlen)
            snprintf(err, errlen, "at offset 0: no input");
        return NULL;
    }
    memset(&P, 0, sizeof P);
    P.a = a;
    P.start = P.p = (unsigned char *)buf;
    P.end = P.start + len;
    P.max_depth = max_depth > JSON_DEPTH_MAX ? JSON_DEPTH_MAX : max_depth;
    P.err = err;
    P.errlen = errlen;
    /* a first slab sized to the input: about one node per 12 bytes */
    P.slab_n = (uint32_t)(len / 12 < 8 ? 8 : len / 12 > 256 ? 256 : len / 12);

    if (len > max_size)
        return jp_fail(&P, P.start, "document of %zu bytes exceeds the limit of %zu bytes",
                       len, max_size);
    buf[len] = '\0';

    jp_skip_ws(&P);
    root = jp_value(&P);
    if (!root)
        return NULL;
    jp_skip_ws(&P);
    if (P.p != P.end) {
        char b[16];
        return jp_fail(&P, P.p, "unexpected %s after the JSON value", jp_what(&P, P.p, b));
    }
    return root;
}

json_t *json_parse_copy(arena_t *a, const char *s, size_t len, const json_limits_t *lim,
                        char *err, size_t errlen)
{
    char *buf;

    size_t max_size = lim && lim->max_size && lim->max_size < JSON_DOC_MAX ? lim->max_size : JSON_DOC_MAX;

    if (len > max_size) {
        if (err && errlen)
            snprintf(err, errlen, "at offset 0: document of %zu bytes exceeds the limit of %zu bytes",
                     len, max_size);
        return NULL;
    }
    buf = arena_alloc(a, len + 1);
    if (len)
        memcpy(buf, s, len);
    return json_parse(a, buf, len, lim, err, errlen);
}
