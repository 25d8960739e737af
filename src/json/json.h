/*
 * json.h - our JSON parser and renderer, built on the request arena.
 *
 * The parser works in situ: it decodes strings inside the buffer it is
 * given (a decoded string is never longer than its escaped form) and
 * NUL-terminates them there, so a string node points into the request body
 * and nothing is copied. Nodes come from the arena. Limits (depth, size) are
 * explicit and UTF-8 is validated; any violation is an error with a message
 * that says where.
 *
 * Trees are singly linked: a container's `child` is its first child, each
 * child's `next` the following one. Building long arrays: keep your own
 * tail and use json_push(); rendering large output: use the writer (jw_*),
 * which streams into an sbuf_t without building a tree.
 *
 * What the parser accepts is strict RFC 8259: no comments, trailing commas,
 * leading zeros, NaN/Infinity, byte-order mark, raw control characters in
 * strings; \u escapes must be scalar values (surrogates only as a pair) and
 * not \u0000; raw bytes must be well-formed UTF-8 (no overlongs, no
 * surrogates, nothing above U+10FFFF); a number that overflows a double
 * (1e400) is an error, one that underflows reads as 0.
 *
 * Duplicate member names are KEPT, in document order, and counted in len:
 * the parser does not judge them, the caller decides (json_get returns the
 * first one).
 *
 * Numbers: an integer literal (no fraction, no exponent) that fits int64 has
 * is_int = 1 and its value in `i`; anything else (1.0, 1e2, integers beyond
 * int64, and -0, kept as the double -0.0) has is_int = 0 and `num`. Use
 * json_number() to read either as a double.
 */
#ifndef CORAINE_JSON_H
#define CORAINE_JSON_H

#include "../core/core.h"

typedef enum {
    JSON_NULL = 0,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_type_t;

typedef struct json json_t;
struct json {
    uint8_t     type;       /* json_type_t */
    uint8_t     is_int;     /* JSON_NUMBER: 1 when `i` holds it (an integer literal
                               that fits int64), 0 when `num` does */
    uint16_t    _reserved;
    uint32_t    len;        /* STRING: bytes (excluding NUL); ARRAY/OBJECT: children */
    const char *key;        /* member name inside an object (NUL-terminated), else NULL */
    union {
        double      num;
        int64_t     i;
        const char *str;    /* NUL-terminated, may contain no NUL (rejected: \u0000) */
        json_t     *child;  /* first child of an array/object */
    };
    json_t     *next;
};

/* The deepest nesting the parser accepts and the writer renders correctly
 * (one constant: whatever was parsed can be written back), and the largest
 * document (string lengths and child counts are 32-bit). */
#define JSON_DEPTH_MAX CR_JSON_DEPTH_MAX
#define JSON_DOC_MAX   ((size_t)CR_JSON_DOC_MAX)

typedef struct json_limits {
    uint32_t max_depth;     /* nesting of arrays/objects; 0 = 64; values above
                               JSON_DEPTH_MAX are clamped (the parser recurses) */
    size_t   max_size;      /* bytes of input; 0 = JSON_DOC_MAX, larger is clamped */
} json_limits_t;

/* Parses buf[0..len) in situ (buf is modified; it needs len+1 bytes so that a
 * NUL can be written at buf[len]). Returns the root, or NULL with a message
 * in err ("at offset 17: expected ':'"). Trailing non-space is an error. */
json_t *json_parse(arena_t *a, char *buf, size_t len, const json_limits_t *lim,
                   char *err, size_t errlen);
/* Same, on a copy of s made in the arena (s is left as it is). */
json_t *json_parse_copy(arena_t *a, const char *s, size_t len, const json_limits_t *lim,
                        char *err, size_t errlen);

/* true when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates). */
bool json_utf8_valid(const char *s, size_t len);

/* ---- reading */
json_t *json_get(const json_t *obj, const char *key);   /* NULL if absent / not an object */
double  json_number(const json_t *n);                   /* a NUMBER as double */
static inline bool json_is_string(const json_t *n) { return n && n->type == JSON_STRING; }
static inline bool json_is_object(const json_t *n) { return n && n->type == JSON_OBJECT; }
static inline bool json_is_array(const json_t *n) { return n && n->type == JSON_ARRAY; }
static inline bool json_is_number(const json_t *n) { return n && n->type == JSON_NUMBER; }
static inline bool json_is_bool(const json_t *n) { return n && (n->type == JSON_TRUE || n->type == JSON_FALSE); }
#define json_foreach(c, parent) for (json_t *c = (parent)->child; c; c = c->next)
/* Deep equality (object members compared regardless of order, duplicates as
 * a multiset; an integer and a double are equal when the double is exactly
 * that integer). Same-order objects compare in O(n), others in O(n*m). */
bool json_equal(const json_t *a, const json_t *b);

/* ---- building (nodes and strings from the arena) */
json_t *json_new(arena_t *a, json_type_t t);
json_t *json_new_string(arena_t *a, const char *s);           /* no copy: s must outlive the tree */
json_t *json_new_stringn(arena_t *a, const char *s, size_t n);/* copies */
json_t *json_new_number(arena_t *a, double v);
json_t *json_new_int(arena_t *a, int64_t v);
json_t *json_new_bool(arena_t *a, bool v);
/* Appends child at the end (O(children)); sets child->key = key (not copied;
 * NULL for array elements, required for object members). */
void    json_add(json_t *container, const char *key, json_t *child);
/* O(1) append when the caller keeps the tail (*tail NULL for an empty container). */
void    json_push(json_t *container, json_t **tail, const char *key, json_t *child);
/* Removes the member named key; returns it or NULL. */
json_t *json_remove(json_t *obj, const char *key);
/* Deep copy into arena a (strings copied too). */
json_t *json_clone(arena_t *a, const json_t *n);

/* ---- rendering */
/* Appends the compact JSON text of n to sb (n NULL renders null). Strings
 * are escaped as json_render_string does; member order is kept. */
void json_render(sbuf_t *sb, const json_t *n);
/* Appends a JSON string literal (with quotes) of s[0..len): '"', '\\' and
 * bytes below 0x20 are escaped (\n, \t, ... or \u00XX), everything else,
 * UTF-8 included, is copied as is (U+2028/2029 are not escaped). */
void json_render_string(sbuf_t *sb, const char *s, size_t len);
/* Appends a number: integral values below 2^53 as plain digits, others in
 * the first of %.15g, %.16g, %.17g that reads back equal; NaN and the
 * infinities (which JSON cannot carry) render null. */
void json_render_number(sbuf_t *sb, double v);

/* Streaming writer: commas and nesting are handled for the caller. Inside an
 * object, call jw_key() before each value. It nests as deep as the parser
 * accepts plus the levels of a response around a value (JW_DEPTH_MAX);
 * deeper levels share one comma state: memory-safe, but commas may be
 * wrong. A NULL string renders null. */
#define JW_DEPTH_MAX (JSON_DEPTH_MAX + 64)
typedef struct json_writer {
    sbuf_t  *sb;
    uint32_t depth;
    uint8_t  need_comma[JW_DEPTH_MAX + 1];        /* per depth; only [0] set by jw_init */
} json_writer_t;

void jw_init(json_writer_t *w, sbuf_t *sb);
void jw_object_begin(json_writer_t *w);
void jw_object_end(json_writer_t *w);
void jw_array_begin(json_writer_t *w);
void jw_array_end(json_writer_t *w);
void jw_key(json_writer_t *w, const char *key);          /* next value is this member's */
/* A member name already rendered with its quotes and colon ("\"value\":"),
 * for names written again and again; JW_KEY_LIT for a string literal. */
void jw_key_raw(json_writer_t *w, const char *quoted, size_t n);
#define JW_KEY_LIT(w, lit) jw_key_raw((w), "\"" lit "\":", sizeof("\"" lit "\":") - 1)
void jw_string(json_writer_t *w, const char *s);
void jw_stringn(json_writer_t *w, const char *s, size_t n);
void jw_number(json_writer_t *w, double v);
void jw_int(json_writer_t *w, int64_t v);
void jw_bool(json_writer_t *w, bool v);
void jw_null(json_writer_t *w);
void jw_value(json_writer_t *w, const json_t *n);        /* a whole tree */
void jw_raw(json_writer_t *w, const char *s, size_t n);  /* pre-rendered JSON */

/* A ProblemDetails object (6.3.2) for p: type (about:blank for a plain HTTP
 * error), title (NULL: the title of p's kind), status, detail. */
void jw_problem(json_writer_t *w, const problem_t *p, const char *title);

#endif
