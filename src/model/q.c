/*
 * q.c - the NGSI-LD query language (clause 4.9): parser and evaluator.
 *
 * q_parse() turns the (already URL-decoded) q text into a tree in the
 * request arena; q_match() evaluates it on an entity, draft or frozen, from
 * any number of threads at once (the tree is read-only after parsing).
 * Everything that can be decided once is decided at parse time, so a match
 * does no allocation and no parsing beyond reading a DateTime string:
 *  - attribute names (and sub-attribute names) are expanded with the
 *    request's @context and interned: attributes are found by pointer;
 *  - a trailing member (observedAt, createdAt, modifiedAt, unitCode,
 *    datasetId, objectType) is recognised once and read from the attribute's
 *    typed fields;
 *  - literals are typed (number, string, boolean, DateTime, Date, Time) and
 *    numbers converted; ~= patterns are compiled (PCRE2, filter.c) once.
 *
 * Grammar (4.9, AND binds tighter than OR; parentheses nest):
 *   Query   = Or
 *   Or      = And *( "|" And )
 *   And     = Primary *( ";" Primary )
 *   Primary = "(" Or ")" / Term
 *   Term    = ["!"] Path                  existence ("!": absence; coraine extension)
 *           / Path Op Value               Op: == != > >= < <=
 *           / Path ("~=" / "!~=") RegExp  ("=~" is accepted for "~=")
 *   Path    = Name *("." Name) ["[" Key *("." Key) "]"]
 *   Value   = Literal / Literal ".." Literal / Literal 1*("," Literal)
 * A Literal is a JSON string, a JSON number, true/false, a DateTime, Date
 * or Time (4.6.3), or a bare word (a URI, or a term such as a vocab value).
 * Ranges and lists only go with == and !=. A RegExp is a JSON string, or the
 * raw text up to the first ';' or '|' outside parentheses and brackets.
 * Blanks around values and separators are ignored.
 *
 * Semantics (4.9), for one target value: == is true when the value equals
 * the literal (any literal of a list; inside a range, both ends included),
 * or, when the value is an array, when an element does; different types
 * never compare equal. Numbers compare numerically, strings bytewise (code
 * point order, RFC 8259 8.3), DateTime/Date/Time literals as times (a
 * string value is read as one), a quoted literal that reads as a DateTime
 * also compares as a time against DateTime strings and observedAt & co.
 * Relationships (object, objectList) only answer == and !=. A
 * LanguageProperty's target values are its languageMap values ("[en]" picks
 * one language, "[*]" any); a VocabProperty's values are expanded IRIs, so
 * a bare literal (gender==Male) also matches through its expansion with the
 * request's @context. A value {"@type": ..., "@value": v} is compared as v.
 * Several instances of an attribute (datasetIds) are several targets:
 * ==, >, ~=, ... hold when they hold for one of them; != holds when the
 * target exists and == holds for none, !~= when there is a string target
 * and the pattern matches none.
 *
 * Linked entities (4.9, EXAMPLES 13 and 14): rel{[Type,...:]path op value}
 * holds when one of rel's objects is an entity matching the inner term
 * (q_link_*: the operation resolves the targets before the query; or
 * q_match_linked follows the objects of one entity, for a subscription's q
 * at match time, without touching the shared tree). A ':' after a leading
 * run of names and commas inside the braces ends a type hint, as the
 * grammar reads it.
 * Names are expanded lookup-only (ld_expandn_lookup): a query interns
 * nothing, and a name no entity was ever written with is a copy that equals
 * no stored (interned) name, so it matches as an absent attribute.
 */
#include "model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define Q_MAX_TEXT   8192    /* bytes of q text */
#define Q_MAX_DEPTH  32      /* nested parentheses */
#define Q_MAX_PATH   64      /* names in a path, keys in a trailing path */

/* The node, operator, value, shape and member kinds are model.h's public
 * q_kind_t, q_opkind_t, q_valkind_t, q_shapekind_t and q_memberkind_t (the
 * read-only view hands them out as they are). */

typedef struct q_val {
    uint8_t     kind;        /* q_valkind_t */
    uint8_t     is_int;      /* QVK_NUM: i holds it */
    uint8_t     has_time;    /* QVK_STR that reads as a DateTime: ms holds it */
    uint8_t     bare;        /* written without quotes */
    bool        b;           /* QVK_BOOL */
    int64_t     i;
    double      num;         /* QVK_NUM (always set, also for integers) */
    int64_t     ms;          /* DATETIME: µs since the epoch; DATE: its midnight; TIME: µs of day */
    const char *s;           /* QVK_STR: decoded, NUL-terminated */
    size_t      len;
    const char *expanded;    /* QVK_STR that is a term: its IRI (for VocabProperty), or NULL */
    uint8_t     expand_any;  /* expandValues (4.9): compared in its expanded form, whatever the kind */
} q_val_t;

typedef struct q_step {
    const char *name;        /* expanded, interned */
    uint8_t     member;      /* q_memberkind_t */
} q_step_t;

typedef struct q_term {
    const char  *attr;       /* expanded, interned */
    q_step_t    *steps;      /* after the first name */
    const char **keys;       /* the trailing [a.b] path, not expanded */
    q_val_t     *vals;
    const void  *re;         /* QO_MATCH / QO_NOT_MATCH */
    const char  *re_text;    /* its pattern (q_term_get) */
    size_t       re_len;
    uint32_t     n_vals;
    uint16_t     n_steps;
    uint16_t     n_keys;
    uint8_t      op;         /* q_opkind_t */
    uint8_t      shape;      /* q_shapekind_t */
    uint8_t      numeric;    /* attr <op> number, nothing else: q_term_numeric() */
    struct q_link *link;     /* attr{...}: attr is a Relationship, the term applies to its targets */
} q_term_t;

/* A term into linked entities (4.9, attr{[Type,...:]path}): the entity
 * matches when one of attr's objects is among the ids that the inner
 * expression matched, which the operation resolves before the query
 * (q_link_resolve); unresolved, it matches nothing. */
typedef struct q_link {
    const char  *types;      /* the entity type hint (4.9 EXAMPLE 14) as given, or NULL */
    typesel_t   *tsel;       /* types parsed (in the parser's mode), or NULL: for q_match_linked */
    q_expr_t    *inner;      /* a QK_TERM: the path (maybe linked again), the operator and values */
    const char **ids;        /* sorted (strcmp) */
    size_t       n_ids;
    bool         resolved;
} q_link_t;

struct q_expr {
    uint8_t    type;         /* q_kind_t */
    uint32_t   n;            /* QK_AND / QK_OR: children */
    q_expr_t **kids;
    q_term_t  *term;         /* QK_TERM */
};

/* ================================================================ parser */

typedef struct q_parser {
    arena_t            *a;
    const char         *s;
    size_t              pos;
    size_t              len;
    const ld_context_t *ctx;
    problem_t          *p;
    int                 depth;
    bool                failed;
    bool                intern;     /* a stored filter: names interned (else looked up only) */
} q_parser_t;

/* A name of the query: looked up only for a request's query (an unknown name
 * matches nothing and is not remembered), interned for a stored filter
 * (q_parse_stored), which must match entities written later. */
static const char *qp_expand(const q_parser_t *qp, const char *s, size_t n)
{
    return qp->intern ? ld_expandn(qp->ctx, s, n) : ld_expandn_lookup(qp->ctx, s, n, qp->a);
}

static bool qp_fail_kind(q_parser_t *qp, problem_kind_t kind, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool qp_fail_kind(q_parser_t *qp, problem_kind_t kind, size_t at, const char *fmt, ...)
{
    char    why[256];
    va_list ap;

    if (qp->failed)          /* keep the first (innermost) reason */
        return false;
    qp->failed = true;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    problem_set(qp->p, kind, "q: at offset %zu: %s", at, why);
    return false;
}

#define qp_fail(qp, at, ...) qp_fail_kind((qp), PB_BAD_REQUEST_DATA, (at), __VA_ARGS__)

static inline char qp_peek(const q_parser_t *qp)
{
    return qp->pos < qp->len ? qp->s[qp->pos] : '\0';
}

static inline char qp_peek_at(const q_parser_t *qp, size_t k)
{
    return qp->pos + k < qp->len ? qp->s[qp->pos + k] : '\0';
}

static void qp_blank(q_parser_t *qp)
{
    while (qp->pos < qp->len && (qp->s[qp->pos] == ' ' || qp->s[qp->pos] == '\t'))
        qp->pos++;
}

/* A readable rendering of the byte at pos, for error details. */
static const char *qp_what(const q_parser_t *qp, char buf[8])
{
    unsigned char c = (unsigned char)qp_peek(qp);

    if (qp->pos >= qp->len)
        return "end of text";
    if (c < 0x20 || c >= 0x7f)
        snprintf(buf, 8, "0x%02x", c);
    else
        snprintf(buf, 8, "'%c'", c);
    return buf;
}

/* AttrName = unicodeLetter *TermChar. Bytes >= 0x80 (UTF-8, validated on
 * entry) count as letters; '_' is accepted first, ':' and '-' inside (compact
 * IRIs, names with dashes) as other brokers do. */
static inline bool q_name_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

static inline bool q_name_char(unsigned char c)
{
    return q_name_start(c) || (c >= '0' && c <= '9') || c == ':' || c == '-';
}

static inline bool q_is_delim(char c)
{
    return c == ';' || c == '|' || c == ')' || c == '\0';
}

/* Grows an arena array of pointers (cap doubles). */
static void *q_grow(arena_t *a, void *old, size_t elem, uint32_t n, uint32_t *cap)
{
    uint32_t ncap = *cap ? *cap * 2 : 4;
    void    *nv = arena_alloc(a, (size_t)ncap * elem);

    if (n)
        memcpy(nv, old, (size_t)n * elem);
    *cap = ncap;
    return nv;
}

static void q_utf8_put(char *out, size_t *o, uint32_t cp)
{
    if (cp < 0x80) {
        out[(*o)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*o)++] = (char)(0xc0 | (cp >> 6));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xe0 | (cp >> 12));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*o)++] = (char)(0xf0 | (cp >> 18));
        out[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static bool q_hex4(const char *s, uint32_t *v)
{
    uint32_t x = 0;

    for (int i = 0; i < 4; i++) {
        char c = s[i];
        x <<= 4;
        if (c >= '0' && c <= '9')      x |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') x |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') x |= (uint32_t)(c - 'A' + 10);
        else return false;
    }
    *v = x;
    return true;
}

/* A JSON string (RFC 8259 7) at pos (on the '"'); decoded into the arena. */
static bool qp_string(q_parser_t *qp, const char **out, size_t *out_len)
{
    size_t start = qp->pos;
    size_t i = qp->pos + 1;
    size_t o = 0;
    char  *buf;

    /* The decoded text is never longer than the escaped one. */
    buf = arena_alloc(qp->a, qp->len - qp->pos + 1);
    for (;;) {
        unsigned char c;

        if (i >= qp->len)
            return qp_fail(qp, start, "unterminated string");
        c = (unsigned char)qp->s[i];
        if (c == '"')
            break;
        if (c < 0x20)
            return qp_fail(qp, i, "control character in a string");
        if (c != '\\') {
            buf[o++] = (char)c;
            i++;
            continue;
        }
        if (i + 1 >= qp->len)
            return qp_fail(qp, start, "unterminated string");
        c = (unsigned char)qp->s[i + 1];
        switch (c) {
        case '"':  buf[o++] = '"';  i += 2; break;
        case '\\': buf[o++] = '\\'; i += 2; break;
        case '/':  buf[o++] = '/';  i += 2; break;
        case 'b':  buf[o++] = '\b'; i += 2; break;
        case 'f':  buf[o++] = '\f'; i += 2; break;
        case 'n':  buf[o++] = '\n'; i += 2; break;
        case 'r':  buf[o++] = '\r'; i += 2; break;
        case 't':  buf[o++] = '\t'; i += 2; break;
        case 'u': {
            uint32_t cp, lo;

            if (i + 6 > qp->len || !q_hex4(qp->s + i + 2, &cp))
                return qp_fail(qp, i, "bad \\u escape");
            i += 6;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (i + 6 > qp->len || qp->s[i] != '\\' || qp->s[i + 1] != 'u' ||
                    !q_hex4(qp->s + i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return qp_fail(qp, i, "unpaired surrogate in \\u escape");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                i += 6;
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return qp_fail(qp, i - 6, "unpaired surrogate in \\u escape");
            }
            if (cp == 0)
                return qp_fail(qp, i - 6, "\\u0000 is not allowed");
            q_utf8_put(buf, &o, cp);
            break;
        }
        default:
            return qp_fail(qp, i, "bad escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
        }
    }
    buf[o] = '\0';
    qp->pos = i + 1;
    *out = buf;
    *out_len = o;
    return true;
}

/* The whole of s is a JSON number (RFC 8259 6)? *integral: no fraction or exponent. */
static bool q_json_number(const char *s, size_t n, bool *integral)
{
    size_t i = 0;

    *integral = true;
    if (i < n && s[i] == '-')
        i++;
    if (i >= n)
        return false;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    } else {
        return false;
    }
    if (i < n && s[i] == '.') {
        *integral = false;
        i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return false;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        *integral = false;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || s[i] < '0' || s[i] > '9') return false;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    return i == n;
}

/* A bare literal that looks like a term (a name, no scheme) gets its
 * expanded IRI, for comparing with VocabProperty values (stored expanded;
 * 4.9 example 12: gender==Male). Only short bare names are expanded (lookup
 * only: nothing is interned); a quoted literal is a string and is compared
 * as written. */
static const char *q_expand_value(const q_parser_t *qp, const char *s, size_t n)
{
    if (n == 0 || n > 128 || !q_name_start((unsigned char)s[0]))
        return NULL;
    for (size_t i = 1; i < n; i++)
        if (!q_name_char((unsigned char)s[i]))
            return NULL;
    return qp_expand(qp, s, n);
}

/* One literal at pos. */
static bool qp_literal(q_parser_t *qp, q_val_t *v)
{
    size_t start, n;
    char  *tok;
    bool   integral;

    qp_blank(qp);
    memset(v, 0, sizeof(*v));
    start = qp->pos;

    if (qp_peek(qp) == '"') {
        if (!qp_string(qp, &v->s, &v->len))
            return false;
        v->kind = QVK_STR;
        v->has_time = cr_datetime_parse(v->s, &v->ms);
        return true;
    }

    /* A bare token runs to a separator, a blank, or "..". */
    while (qp->pos < qp->len) {
        char c = qp->s[qp->pos];
        if (c == ';' || c == '|' || c == ')' || c == ',' || c == ' ' || c == '\t' || c == '"')
            break;
        if (c == '.' && qp_peek_at(qp, 1) == '.')
            break;
        qp->pos++;
    }
    n = qp->pos - start;
    if (n == 0) {
        char w[8];
        return qp_fail(qp, start, "expected a value, found %s", qp_what(qp, w));
    }
    tok = arena_strndup(qp->a, qp->s + start, n);

    if (strcmp(tok, "true") == 0 || strcmp(tok, "false") == 0) {
        v->kind = QVK_BOOL;
        v->b = tok[0] == 't';
        return true;
    }
    if (q_json_number(tok, n, &integral)) {
        v->kind = QVK_NUM;
        errno = 0;
        v->num = strtod(tok, NULL);
        if (integral) {
            long long ll;
            errno = 0;
            ll = strtoll(tok, NULL, 10);
            if (errno == 0) {
                v->is_int = 1;
                v->i = ll;
            }
        }
        return true;
    }
    if (cr_datetime_parse(tok, &v->ms)) { v->kind = QVK_DATETIME; return true; }
    if (cr_date_parse(tok, &v->ms))     { v->kind = QVK_DATE;     return true; }
    if (cr_time_parse(tok, &v->ms))     { v->kind = QVK_TIME;     return true; }

    /* A URI (4.9 CompEqualityValue), or a plain word taken as a string. */
    v->kind = QVK_STR;
    v->bare = 1;
    v->s = tok;
    v->len = n;
    v->expanded = q_expand_value(qp, tok, n);
    return true;
}

static bool q_same_family(const q_val_t *a, const q_val_t *b)
{
    return a->kind == b->kind;
}

static bool qp_values(q_parser_t *qp, q_term_t *t)
{
    q_val_t  first;
    size_t   at = qp->pos;
    bool     ordering = t->op >= QO_GT && t->op <= QO_LE;

    if (!qp_literal(qp, &first))
        return false;
    qp_blank(qp);

    if (qp_peek(qp) == '.' && qp_peek_at(qp, 1) == '.') {
        if (ordering)
            return qp_fail(qp, qp->pos, "a range (a..b) goes with == or != only");
        qp->pos += 2;
        t->vals = arena_alloc(qp->a, 2 * sizeof(q_val_t));
        t->vals[0] = first;
        if (!qp_literal(qp, &t->vals[1]))
            return false;
        if (first.kind == QVK_BOOL || !q_same_family(&t->vals[0], &t->vals[1]))
            return qp_fail(qp, at, "the ends of a range must be two numbers, strings, "
                                   "DateTimes, Dates or Times of the same kind");
        t->n_vals = 2;
        t->shape = QSH_RANGE;
        return true;
    }

    if (qp_peek(qp) == ',') {
        uint32_t cap = 0;

        if (ordering)
            return qp_fail(qp, qp->pos, "a list of values goes with == or != only");
        t->vals = q_grow(qp->a, NULL, sizeof(q_val_t), 0, &cap);
        t->vals[0] = first;
        t->n_vals = 1;
        while (qp_peek(qp) == ',') {
            qp->pos++;
            if (t->n_vals == cap)
                t->vals = q_grow(qp->a, t->vals, sizeof(q_val_t), t->n_vals, &cap);
            if (!qp_literal(qp, &t->vals[t->n_vals]))
                return false;
            t->n_vals++;
            qp_blank(qp);
        }
        t->shape = QSH_LIST;
        return true;
    }

    if (ordering && (first.kind == QVK_BOOL || (first.kind == QVK_STR && first.bare)))
        return qp_fail(qp, at, "%s needs a number, a quoted string, a DateTime, a Date or a Time",
                       t->op == QO_GT ? ">" : t->op == QO_GE ? ">=" : t->op == QO_LT ? "<" : "<=");
    t->vals = arena_alloc(qp->a, sizeof(q_val_t));
    t->vals[0] = first;
    t->n_vals = 1;
    t->shape = QSH_SINGLE;
    return true;
}

/* RegExp after ~= / !~=: a JSON string, or raw text up to ';' / '|' / an
 * unmatched ')' outside parentheses and character classes. */
static bool qp_regex(q_parser_t *qp, q_term_t *t)
{
    const char *pat;
    size_t      n, start = qp->pos;

    if (qp_peek(qp) == '"') {
        if (!qp_string(qp, &pat, &n))
            return false;
    } else {
        int  depth = 0;
        bool in_class = false;

        while (qp->pos < qp->len) {
            char c = qp->s[qp->pos];
            if (c == '\\') {
                qp->pos += qp->pos + 1 < qp->len ? 2 : 1;
                continue;
            }
            if (in_class) {
                if (c == ']')
                    in_class = false;
            } else if (c == '[') {
                in_class = true;
            } else if (c == '(') {
                depth++;
            } else if (c == ')') {
                if (depth == 0)
                    break;
                depth--;
            } else if (depth == 0 && (c == ';' || c == '|')) {
                break;
            }
            qp->pos++;
        }
        pat = qp->s + start;
        n = qp->pos - start;
    }
    if (n == 0)
        return qp_fail(qp, start, "empty regular expression");

    t->re_text = pat;
    t->re_len  = n;
    t->re = filter_regex_compile(qp->a, pat, n, "q", qp->p);
    if (!t->re) {
        qp->failed = true;       /* filter_regex_compile set the problem */
        return false;
    }
    return true;
}

static const char *q_iri(const char *short_name)
{
    /* The core @context maps these terms to ngsi-ld: IRIs, and core terms
     * cannot be overridden (ld.h): their expansion is fixed (objectType's is
     * ngsi-ld:hasObjectType). */
    char buf[96];
    snprintf(buf, sizeof(buf), LD_NGSI_LD_PREFIX "%s", short_name);
    return intern_cstr(buf);
}

static uint8_t q_member_of(const char *iri)
{
    static const char *observed, *created, *modified, *unit, *dataset, *otype;

    /* Interned pointers are stable for the process: racing threads store the
     * same values, so the lazy fill is benign; the relaxed atomics keep it
     * well defined. */
    if (!__atomic_load_n(&otype, __ATOMIC_RELAXED)) {
        __atomic_store_n(&observed, q_iri("observedAt"), __ATOMIC_RELAXED);
        __atomic_store_n(&created,  q_iri("createdAt"),  __ATOMIC_RELAXED);
        __atomic_store_n(&modified, q_iri("modifiedAt"), __ATOMIC_RELAXED);
        __atomic_store_n(&unit,     q_iri("unitCode"),   __ATOMIC_RELAXED);
        __atomic_store_n(&dataset,  q_iri("datasetId"),  __ATOMIC_RELAXED);
        __atomic_store_n(&otype,    q_iri("hasObjectType"), __ATOMIC_RELAXED);
    }
    if (iri == __atomic_load_n(&observed, __ATOMIC_RELAXED)) return QMK_OBSERVED_AT;
    if (iri == __atomic_load_n(&created,  __ATOMIC_RELAXED)) return QMK_CREATED_AT;
    if (iri == __atomic_load_n(&modified, __ATOMIC_RELAXED)) return QMK_MODIFIED_AT;
    if (iri == __atomic_load_n(&unit,     __ATOMIC_RELAXED)) return QMK_UNIT_CODE;
    if (iri == __atomic_load_n(&dataset,  __ATOMIC_RELAXED)) return QMK_DATASET_ID;
    if (iri == __atomic_load_n(&otype,    __ATOMIC_RELAXED)) return QMK_OBJECT_TYPE;
    return QMK_SUBATTR;
}

/* A name at pos, expanded. */
static const char *qp_name(q_parser_t *qp)
{
    size_t      start = qp->pos;
    const char *iri;
    char        w[8];

    if (!q_name_start((unsigned char)qp_peek(qp))) {
        qp_fail(qp, start, "expected an attribute name, found %s", qp_what(qp, w));
        return NULL;
    }
    while (qp->pos < qp->len && q_name_char((unsigned char)qp->s[qp->pos]))
        qp->pos++;
    iri = qp_expand(qp, qp->s + start, qp->pos - start);
    if (!iri)
        qp_fail(qp, start, "cannot expand attribute name");
    return iri;
}

static bool qp_link(q_parser_t *qp, q_term_t *t);

static bool qp_path(q_parser_t *qp, q_term_t *t)
{
    q_step_t    steps[Q_MAX_PATH];
    const char *keys[Q_MAX_PATH];
    uint16_t    ns = 0, nk = 0;
    size_t      member_at = 0;

    t->attr = qp_name(qp);
    if (!t->attr)
        return false;

    while (qp_peek(qp) == '.') {
        size_t at = ++qp->pos;
        if (ns && steps[ns - 1].member != QMK_SUBATTR)
            return qp_fail(qp, member_at, "a member such as observedAt ends an attribute path");
        if (ns == Q_MAX_PATH)
            return qp_fail_kind(qp, PB_TOO_COMPLEX_QUERY, at, "attribute path too long");
        steps[ns].name = qp_name(qp);
        if (!steps[ns].name)
            return false;
        steps[ns].member = q_member_of(steps[ns].name);
        member_at = at;
        ns++;
    }

    if (qp_peek(qp) == '[') {
        if (ns && steps[ns - 1].member != QMK_SUBATTR)
            return qp_fail(qp, qp->pos, "a member such as observedAt has no compound value");
        qp->pos++;
        for (;;) {
            size_t start = qp->pos;
            while (qp->pos < qp->len) {
                unsigned char c = (unsigned char)qp->s[qp->pos];
                if (c == '.' || c == '[' || c == ']' || c < 0x20)
                    break;
                qp->pos++;
            }
            if (qp->pos == start) {
                char w[8];
                return qp_fail(qp, start, "expected a member name inside [ ], found %s",
                               qp_what(qp, w));
            }
            if (nk == Q_MAX_PATH)
                return qp_fail_kind(qp, PB_TOO_COMPLEX_QUERY, start, "trailing path too long");
            keys[nk++] = arena_strndup(qp->a, qp->s + start, qp->pos - start);
            if (qp_peek(qp) == '.') {
                qp->pos++;
                continue;
            }
            if (qp_peek(qp) == ']') {
                qp->pos++;
                break;
            }
            return qp_fail(qp, qp->pos, "expected ']' to close the trailing path");
        }
    }

    if (qp_peek(qp) == '{') {
        if (ns || nk)
            return qp_fail(qp, qp->pos, "a linked entity term follows a Relationship name, not a path");
        return qp_link(qp, t);
    }

    if (ns) {
        t->steps = arena_alloc(qp->a, ns * sizeof(q_step_t));
        memcpy(t->steps, steps, ns * sizeof(q_step_t));
        t->n_steps = ns;
    }
    if (nk) {
        t->keys = arena_alloc(qp->a, nk * sizeof(char *));
        memcpy(t->keys, keys, nk * sizeof(char *));
        t->n_keys = nk;
    }
    return true;
}

/* "{" [Type *("," Type) ":"] (Link / ValuePath) "}" after a Relationship name. */
static bool qp_link(q_parser_t *qp, q_term_t *t)
{
    q_link_t *l = arena_calloc(qp->a, sizeof *l);
    q_term_t *in = arena_calloc(qp->a, sizeof *in);
    size_t    open_at = qp->pos++;

    if (++qp->depth > Q_MAX_DEPTH)
        return qp_fail_kind(qp, PB_TOO_COMPLEX_QUERY, open_at, "linked entity terms nested deeper than %d",
                            Q_MAX_DEPTH);
    /* a type hint: names and commas up to a ':' that comes before any other delimiter */
    size_t e = qp->pos;
    while (e < qp->len && ((q_name_char((unsigned char)qp->s[e]) && qp->s[e] != ':') || qp->s[e] == ','))
        e++;
    if (e < qp->len && qp->s[e] == ':' && e > qp->pos) {
        l->types = arena_strndup(qp->a, qp->s + qp->pos, e - qp->pos);
        l->tsel = qp->intern ? typesel_parse_stored(qp->a, l->types, qp->ctx, qp->p)
                             : typesel_parse(qp->a, l->types, qp->ctx, qp->p);
        if (!l->tsel) {
            qp->failed = true;
            return false;
        }
        qp->pos = e + 1;
    }
    if (!qp_path(qp, in))
        return false;
    if (qp_peek(qp) != '}')
        return qp_fail(qp, qp->pos, "expected '}' to close the linked entity term at offset %zu", open_at);
    qp->pos++;
    qp->depth--;
    l->inner = arena_calloc(qp->a, sizeof *l->inner);
    l->inner->type = QK_TERM;
    l->inner->term = in;
    t->link = l;
    return true;
}

/* The innermost term of a linked one: where its operator and values go. */
static q_term_t *q_innermost(q_term_t *t)
{
    while (t->link)
        t = t->link->inner->term;
    return t;
}

static q_expr_t *qp_term(q_parser_t *qp)
{
    q_term_t *t = arena_calloc(qp->a, sizeof(*t));
    q_expr_t *x;
    bool      neg = false;
    size_t    neg_at = qp->pos;
    char      c0, c1, c2;

    if (qp_peek(qp) == '!') {
        neg = true;
        qp->pos++;
    }
    q_term_t *outer = t;
    if (!qp_path(qp, outer))
        return NULL;
    t = q_innermost(outer);             /* the operator and values apply to the linked entities' path */
    qp_blank(qp);

    c0 = qp_peek(qp);
    c1 = qp_peek_at(qp, 1);
    c2 = qp_peek_at(qp, 2);
    if (c0 == '=' && c1 == '=')      { t->op = QO_EQ;        qp->pos += 2; }
    else if (c0 == '!' && c1 == '=') { t->op = QO_NE;        qp->pos += 2; }
    else if (c0 == '!' && c1 == '~' && c2 == '=') { t->op = QO_NOT_MATCH; qp->pos += 3; }
    else if (c0 == '~' && c1 == '=') { t->op = QO_MATCH;     qp->pos += 2; }
    else if (c0 == '=' && c1 == '~') { t->op = QO_MATCH;     qp->pos += 2; }
    else if (c0 == '>' && c1 == '=') { t->op = QO_GE;        qp->pos += 2; }
    else if (c0 == '>')              { t->op = QO_GT;        qp->pos += 1; }
    else if (c0 == '<' && c1 == '=') { t->op = QO_LE;        qp->pos += 2; }
    else if (c0 == '<')              { t->op = QO_LT;        qp->pos += 1; }
    else if (q_is_delim(c0))         { t->op = neg ? QO_NOT_EXISTS : QO_EXISTS; }
    else {
        char w[8];
        qp_fail(qp, qp->pos, "expected an operator (== != > >= < <= ~= !~=), ';', '|' or ')', "
                "found %s", qp_what(qp, w));
        return NULL;
    }

    if (neg && t->op != QO_NOT_EXISTS) {
        qp_fail(qp, neg_at, "'!' only negates the existence of an attribute (!attr)");
        return NULL;
    }
    if (t->op == QO_MATCH || t->op == QO_NOT_MATCH) {
        if (!qp_regex(qp, t))
            return NULL;
    } else if (t->op != QO_EXISTS && t->op != QO_NOT_EXISTS) {
        if (!qp_values(qp, t))
            return NULL;
    }
    /* The commonest term, "speed>50": an attribute (no path, no [keys]), one
     * number, an order or equality. It gets a direct evaluation. */
    t->numeric = t->n_steps == 0 && t->n_keys == 0 && t->shape == QSH_SINGLE && t->n_vals == 1 &&
                 t->vals[0].kind == QVK_NUM &&
                 (t->op == QO_EQ || t->op == QO_GT || t->op == QO_GE || t->op == QO_LT || t->op == QO_LE);

    for (q_term_t *o = outer; o->link; o = o->link->inner->term)
        o->op = QO_EXISTS;              /* a linked term: "has a target that matches" */
    x = arena_calloc(qp->a, sizeof(*x));
    x->type = QK_TERM;
    x->term = outer;
    return x;
}

static q_expr_t *qp_or(q_parser_t *qp);

static q_expr_t *qp_primary(q_parser_t *qp)
{
    q_expr_t *x;
    size_t    open_at;

    qp_blank(qp);
    if (qp_peek(qp) != '(')
        return qp_term(qp);

    open_at = qp->pos;
    if (++qp->depth > Q_MAX_DEPTH) {
        qp_fail_kind(qp, PB_TOO_COMPLEX_QUERY, open_at,
                     "parentheses nested deeper than %d", Q_MAX_DEPTH);
        return NULL;
    }
    qp->pos++;
    x = qp_or(qp);
    if (!x)
        return NULL;
    qp_blank(qp);
    if (qp_peek(qp) != ')') {
        char w[8];
        qp_fail(qp, qp->pos, "expected ')' to close the '(' at offset %zu, found %s",
                open_at, qp_what(qp, w));
        return NULL;
    }
    qp->pos++;
    qp->depth--;
    return x;
}

/* One level of the precedence ladder: sub (sep sub)*, flattened. */
static q_expr_t *qp_chain(q_parser_t *qp, char sep, q_kind_t type,
                          q_expr_t *(*sub)(q_parser_t *))
{
    q_expr_t  *first, *x;
    q_expr_t **kids;
    uint32_t   n = 0, cap = 0;

    first = sub(qp);
    if (!first)
        return NULL;
    qp_blank(qp);
    if (qp_peek(qp) != sep)
        return first;

    kids = q_grow(qp->a, NULL, sizeof(*kids), 0, &cap);
    kids[n++] = first;
    while (qp_peek(qp) == sep) {
        qp->pos++;
        if (n == cap)
            kids = q_grow(qp->a, kids, sizeof(*kids), n, &cap);
        kids[n] = sub(qp);
        if (!kids[n])
            return NULL;
        n++;
        qp_blank(qp);
    }
    x = arena_calloc(qp->a, sizeof(*x));
    x->type = type;
    x->n = n;
    x->kids = kids;
    return x;
}

static q_expr_t *qp_and(q_parser_t *qp)
{
    return qp_chain(qp, ';', QK_AND, qp_primary);
}

static q_expr_t *qp_or(q_parser_t *qp)
{
    return qp_chain(qp, '|', QK_OR, qp_and);
}

static q_expr_t *q_parse_names(arena_t *a, const char *text, const ld_context_t *ctx, bool intern,
                               problem_t *p)
{
    q_parser_t qp;
    q_expr_t  *x;
    size_t     len;

    if (!text) {
        problem_set(p, PB_BAD_REQUEST_DATA, "q: missing query");
        return NULL;
    }
    len = strlen(text);
    if (len > Q_MAX_TEXT) {
        problem_set(p, PB_TOO_COMPLEX_QUERY, "q: longer than %d bytes", Q_MAX_TEXT);
        return NULL;
    }
    if (!json_utf8_valid(text, len)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "q: not valid UTF-8");
        return NULL;
    }

    memset(&qp, 0, sizeof(qp));
    qp.a = a;
    qp.s = text;
    qp.len = len;
    qp.ctx = ctx ? ctx : ld_core();
    qp.p = p;
    qp.intern = intern;

    qp_blank(&qp);
    if (qp.pos == qp.len) {
        problem_set(p, PB_BAD_REQUEST_DATA, "q: empty query");
        return NULL;
    }
    x = qp_or(&qp);
    if (!x)
        return NULL;
    qp_blank(&qp);
    if (qp.pos != qp.len) {
        char w[8];
        qp_fail(&qp, qp.pos, "unexpected %s", qp_what(&qp, w));
        return NULL;
    }
    return x;
}

q_expr_t *q_parse(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p)
{
    return q_parse_names(a, text, ctx, false, p);
}

q_expr_t *q_parse_stored(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p)
{
    return q_parse_names(a, text, ctx, true, p);
}

/* ============================================================= evaluator */

#define Q_MISMATCH 2     /* q_cmp: the types do not compare */

/* One target value: a JSON value of the attribute, or a time member. */
typedef struct q_target {
    const json_t *v;         /* NULL for a time */
    int64_t       ms;
    uint8_t       kind;      /* attr_kind_t of the attribute it came from */
    uint8_t       member;    /* q_memberkind_t: QMK_SUBATTR for the attribute's own value */
} q_target_t;

typedef struct q_acc {
    const q_term_t *t;
    bool            exists;   /* a target was found */
    bool            hit;      /* the positive predicate held for one */
    bool            str_seen; /* a string was offered to a regex */
} q_acc_t;

static inline int q_sign64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

static inline int q_signd(double a, double b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

static int q_cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);

    if (c)
        return c < 0 ? -1 : 1;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

/* A time member (observedAt, ...) against a literal. */
static int q_cmp_time(int64_t ms, const q_val_t *l)
{
    switch (l->kind) {
    case QVK_DATETIME:
    case QVK_DATE:
        return q_sign64(ms, l->ms);
    case QVK_STR:
        return l->has_time ? q_sign64(ms, l->ms) : Q_MISMATCH;
    default:
        return Q_MISMATCH;
    }
}

/* A scalar JSON value against a literal: -1 / 0 / 1, or Q_MISMATCH. */
static int q_cmp(const json_t *v, const q_val_t *l, uint8_t kind)
{
    int64_t ms;

    switch (l->kind) {
    case QVK_NUM:
        if (v->type != JSON_NUMBER)
            return Q_MISMATCH;
        if (v->is_int && l->is_int)
            return q_sign64(v->i, l->i);
        return q_signd(v->is_int ? (double)v->i : v->num, l->num);

    case QVK_BOOL:
        if (v->type != JSON_TRUE && v->type != JSON_FALSE)
            return Q_MISMATCH;
        return q_sign64(v->type == JSON_TRUE, l->b);

    case QVK_STR: {
        int c;
        if (v->type != JSON_STRING)
            return Q_MISMATCH;
        if (l->has_time && cr_datetime_parse(v->str, &ms))
            return q_sign64(ms, l->ms);
        if (l->expand_any && l->expanded)
            return q_cmp_bytes(v->str, v->len, l->expanded, strlen(l->expanded));
        c = q_cmp_bytes(v->str, v->len, l->s, l->len);
        if (c != 0 && kind == ATTR_VOCABPROPERTY && l->expanded && strcmp(v->str, l->expanded) == 0)
            return 0;
        return c;
    }

    case QVK_DATETIME:
    case QVK_DATE:
        /* A DateTime value against a Date literal compares with its midnight (UTC). */
        if (v->type != JSON_STRING)
            return Q_MISMATCH;
        if (cr_datetime_parse(v->str, &ms) || cr_date_parse(v->str, &ms))
            return q_sign64(ms, l->ms);
        return Q_MISMATCH;

    case QVK_TIME:
        if (v->type != JSON_STRING || !cr_time_parse(v->str, &ms))
            return Q_MISMATCH;
        return q_sign64(ms, l->ms);
    }
    return Q_MISMATCH;
}

/* A typed value {"@type": "DateTime", "@value": "..."} stands for its @value. */
static const json_t *q_unwrap(const json_t *v)
{
    if (v && v->type == JSON_OBJECT) {
        const json_t *w = json_get(v, "@value");
        if (w)
            return w;
    }
    return v;
}

/* The positive predicate of the term on one scalar: equality (also for
 * !=), ordering, or the pattern (also for !~=). */
static bool q_test_scalar(const q_term_t *t, const json_t *v, uint8_t kind, q_acc_t *acc)
{
    int c;

    v = q_unwrap(v);
    if (!v)
        return false;

    switch (t->op) {
    case QO_EQ:
    case QO_NE:
        if (t->shape == QSH_RANGE) {
            int lo = q_cmp(v, &t->vals[0], kind), hi;
            if (lo == Q_MISMATCH || lo < 0)
                return false;
            hi = q_cmp(v, &t->vals[1], kind);
            return hi != Q_MISMATCH && hi <= 0;
        }
        for (uint32_t i = 0; i < t->n_vals; i++)
            if (q_cmp(v, &t->vals[i], kind) == 0)
                return true;
        return false;

    case QO_GT: c = q_cmp(v, &t->vals[0], kind); return c != Q_MISMATCH && c > 0;
    case QO_GE: c = q_cmp(v, &t->vals[0], kind); return c != Q_MISMATCH && c >= 0;
    case QO_LT: c = q_cmp(v, &t->vals[0], kind); return c != Q_MISMATCH && c < 0;
    case QO_LE: c = q_cmp(v, &t->vals[0], kind); return c != Q_MISMATCH && c <= 0;

    case QO_MATCH:
    case QO_NOT_MATCH:
        if (v->type != JSON_STRING)
            return false;
        acc->str_seen = true;
        return filter_regex_match(t->re, v->str, v->len);
    }
    return false;
}

static bool q_test(const q_term_t *t, const q_target_t *tg, q_acc_t *acc)
{
    bool rel = tg->member == QMK_SUBATTR &&
               (tg->kind == ATTR_RELATIONSHIP || tg->kind == ATTR_LISTRELATIONSHIP);

    /* 4.9: a Relationship with any operator but == and != does not match. */
    if (rel && t->op != QO_EQ && t->op != QO_NE)
        return false;

    if (!tg->v) {                                   /* a time member */
        int c = Q_MISMATCH;
        if (t->op == QO_MATCH || t->op == QO_NOT_MATCH)
            return false;
        if (t->shape == QSH_RANGE) {
            int lo = q_cmp_time(tg->ms, &t->vals[0]);
            int hi = q_cmp_time(tg->ms, &t->vals[1]);
            return lo != Q_MISMATCH && hi != Q_MISMATCH && lo >= 0 && hi <= 0;
        }
        if (t->op == QO_EQ || t->op == QO_NE) {
            for (uint32_t i = 0; i < t->n_vals; i++)
                if (q_cmp_time(tg->ms, &t->vals[i]) == 0)
                    return true;
            return false;
        }
        c = q_cmp_time(tg->ms, &t->vals[0]);
        if (c == Q_MISMATCH)
            return false;
        switch (t->op) {
        case QO_GT: return c > 0;
        case QO_GE: return c >= 0;
        case QO_LT: return c < 0;
        case QO_LE: return c <= 0;
        default:     return false;
        }
    }

    if (tg->v->type == JSON_ARRAY) {
        /* Any element (4.9: "is included in the target value"). A
         * ListRelationship's objectList holds {"object": uri} items. */
        json_foreach(el, tg->v) {
            const json_t *x = el;
            if (rel && x->type == JSON_OBJECT) {
                x = json_get(x, "object");
                if (!x)
                    continue;
            }
            if (x->type != JSON_ARRAY && q_test_scalar(t, x, tg->kind, acc))
                return true;
        }
        return false;
    }
    return q_test_scalar(t, tg->v, tg->kind, acc);
}

/* Feeds one target to the accumulator; true = the answer is known, stop. */
static bool q_visit(q_acc_t *acc, const q_target_t *tg)
{
    acc->exists = true;
    switch (acc->t->op) {
    case QO_EXISTS:
    case QO_NOT_EXISTS:
        return true;
    default:
        if (q_test(acc->t, tg, acc)) {
            acc->hit = true;
            return true;
        }
        return false;
    }
}

/* Into a compound value along the trailing [a.b] path (ECMA member access);
 * an array on the way is looked into element by element. */
static bool q_descend(q_acc_t *acc, const json_t *v, uint16_t k, uint8_t kind)
{
    const q_term_t *t = acc->t;

    if (k == t->n_keys) {
        q_target_t tg = { .v = v, .kind = kind, .member = QMK_SUBATTR };
        return q_visit(acc, &tg);
    }
    if (v->type == JSON_OBJECT) {
        const json_t *m = json_get(v, t->keys[k]);
        return m ? q_descend(acc, m, (uint16_t)(k + 1), kind) : false;
    }
    if (v->type == JSON_ARRAY) {
        json_foreach(el, v)
            if (el->type == JSON_OBJECT && q_descend(acc, el, k, kind))
                return true;
    }
    return false;
}

/* The target values of an attribute (the end of the dotted path). */
static bool q_values(q_acc_t *acc, const cr_attr_t *a)
{
    const q_term_t *t = acc->t;
    const json_t   *v = a->value;
    q_target_t      tg = { .v = v, .kind = a->kind, .member = QMK_SUBATTR };
    bool            existence = t->op == QO_EXISTS || t->op == QO_NOT_EXISTS;

    if (t->n_keys == 0) {
        if (existence || !v) {
            /* The attribute is the target element; a value-less attribute
             * (not built by entity_parse) only answers existence. */
            acc->exists = true;
            return existence;
        }
        if (a->kind == ATTR_LANGUAGEPROPERTY && v->type == JSON_OBJECT) {
            /* No language given: every languageMap value is a target. */
            acc->exists = true;
            json_foreach(m, v) {
                tg.v = m;
                if (q_visit(acc, &tg))
                    return true;
            }
            return false;
        }
        return q_visit(acc, &tg);
    }

    if (!v)
        return false;
    if (a->kind != ATTR_LANGUAGEPROPERTY)
        return q_descend(acc, v, 0, a->kind);

    /* A LanguageProperty: [lang] picks one language, [*] any. */
    if (t->n_keys != 1 || v->type != JSON_OBJECT)
        return false;
    json_foreach(m, v) {
        if ((t->keys[0][0] == '*' && t->keys[0][1] == '\0') || strcmp(m->key, t->keys[0]) == 0) {
            tg.v = m;
            if (q_visit(acc, &tg))
                return true;
        }
    }
    return false;
}

/* Along the dotted path from attribute a at step i. */
static bool q_walk(q_acc_t *acc, const cr_attr_t *a, uint16_t i)
{
    const q_term_t *t = acc->t;
    const q_step_t *st;
    q_target_t      tg = { .kind = a->kind };
    json_t          str;

    if (i == t->n_steps)
        return q_values(acc, a);

    st = &t->steps[i];
    tg.member = st->member;
    memset(&str, 0, sizeof(str));
    str.type = JSON_STRING;

    switch (st->member) {
    case QMK_SUBATTR:
        for (uint16_t k = 0; k < a->n_sub; k++)
            if (a->sub[k].name == st->name && q_walk(acc, &a->sub[k], (uint16_t)(i + 1)))
                return true;
        return false;
    case QMK_OBSERVED_AT:
        if (a->observed_at == CR_NO_TIME) return false;
        tg.ms = a->observed_at;
        return q_visit(acc, &tg);
    case QMK_CREATED_AT:
        if (a->created_at == CR_NO_TIME) return false;
        tg.ms = a->created_at;
        return q_visit(acc, &tg);
    case QMK_MODIFIED_AT:
        if (a->modified_at == CR_NO_TIME) return false;
        tg.ms = a->modified_at;
        return q_visit(acc, &tg);
    case QMK_UNIT_CODE:   str.str = a->unit_code;   break;
    case QMK_DATASET_ID:  str.str = a->dataset_id;  break;
    case QMK_OBJECT_TYPE:
        if (a->object_type && strchr(a->object_type, ' ')) {    /* several types: any of them */
            for (const char *o = a->object_type; *o;) {
                size_t l = strcspn(o, " ");
                str.str = intern(o, l);
                str.len = (uint32_t)l;
                tg.v = &str;
                if (q_visit(acc, &tg))
                    return true;
                o += l + (o[l] == ' ');
            }
            return false;
        }
        str.str = a->object_type;
        break;
    }
    if (!str.str)
        return false;
    str.len = (uint32_t)strlen(str.str);
    tg.v = &str;
    return q_visit(acc, &tg);
}

/* A numeric term (see qp_term) on the attribute's instances: the same answer
 * as the general walk for plain number values; 1 = match, 0 = no match,
 * -1 = a value that is not a plain number (an array, a typed @value ...):
 * the general walk decides. */
static int q_term_numeric(const q_term_t *t, const cr_entity_t *e)
{
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *a = &e->attrs[i];
        if (a->name != t->attr)
            continue;
        if (!a->value || a->value->type != JSON_NUMBER)
            return -1;
        int c = q_cmp(a->value, &t->vals[0], a->kind);
        bool hit = t->op == QO_EQ ? c == 0 : t->op == QO_GT ? c > 0 : t->op == QO_GE ? c >= 0
                 : t->op == QO_LT ? c < 0 : c <= 0;
        if (hit)
            return 1;
    }
    return 0;
}

static bool q_link_has(const q_link_t *l, const char *id)
{
    size_t lo = 0, hi = l->n_ids;
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        int    c = strcmp(l->ids[m], id);
        if (!c)
            return true;
        if (c < 0) lo = m + 1;
        else hi = m;
    }
    return false;
}

/* One of the objects of e's Relationship (or ListRelationship) t->attr is
 * an id for which hit(ud, id) holds. */
static bool q_rel_any(const q_term_t *t, const cr_entity_t *e, bool (*hit)(const void *ud, const char *id),
                      const void *ud)
{
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *a = &e->attrs[i];
        if (a->name != t->attr || (a->kind != ATTR_RELATIONSHIP && a->kind != ATTR_LISTRELATIONSHIP) || !a->value)
            continue;
        if (json_is_string(a->value) && hit(ud, a->value->str))
            return true;
        if (!json_is_array(a->value))
            continue;
        json_foreach(el, a->value) {
            const json_t *o = json_is_object(el) ? json_get(el, "object") : el;
            if (json_is_string(o) && hit(ud, o->str))
                return true;
        }
    }
    return false;
}

static bool q_link_has_id(const void *l, const char *id)
{
    return q_link_has(l, id);
}

/* attr{...}: one of the Relationship's (or ListRelationship's) objects is a target that matched. */
static bool __attribute__((noinline)) q_link_match(const q_term_t *t, const cr_entity_t *e)
{
    const q_link_t *l = t->link;

    if (!l->resolved || !l->n_ids)
        return false;
    return q_rel_any(t, e, q_link_has_id, l);
}

static bool q_term_match(const q_term_t *t, const cr_entity_t *e)
{
    q_acc_t acc = { .t = t };

    if (t->numeric) {
        int r = q_term_numeric(t, e);
        if (r >= 0)
            return r == 1;
    }
    if (CR_UNLIKELY(t->link != NULL))
        return q_link_match(t, e);

    for (uint16_t i = 0; i < e->n_attrs; i++)
        if (e->attrs[i].name == t->attr && q_walk(&acc, &e->attrs[i], 0))
            break;

    switch (t->op) {
    case QO_EXISTS:     return acc.exists;
    case QO_NOT_EXISTS: return !acc.exists;
    case QO_NE:         return acc.exists && !acc.hit;
    case QO_NOT_MATCH:  return acc.str_seen && !acc.hit;
    default:             return acc.hit;
    }
}

static bool q_names_have(const char *const *names, size_t n, const char *attr)
{
    for (size_t i = 0; i < n; i++)
        if (names[i] == attr || strcmp(names[i], attr) == 0)
            return true;
    return false;
}

void q_value_options(q_expr_t *q, arena_t *a, const ld_context_t *ctx, const char *const *expand, size_t n_expand,
                     const char *const *json_keys, size_t n_json)
{
    if (!q)
        return;
    if (q->type != QK_TERM) {
        for (uint32_t i = 0; i < q->n; i++)
            q_value_options(q->kids[i], a, ctx, expand, n_expand, json_keys, n_json);
        return;
    }
    q_term_t *t = q->term;
    bool      json = q_names_have(json_keys, n_json, t->attr);
    bool      exp = !json && q_names_have(expand, n_expand, t->attr);
    for (uint32_t i = 0; i < t->n_vals; i++) {
        q_val_t *v = &t->vals[i];
        if (v->kind != QVK_STR)
            continue;
        if (json) {
            v->expanded = NULL;         /* uninterpretable as JSON-LD: compared as written */
        } else if (exp && v->len) {
            v->expanded = ld_expandn_lookup(ctx, v->s, v->len, a);
            v->expand_any = 1;
        }
    }
}

bool q_match(const q_expr_t *q, const cr_entity_t *e)
{
    if (!q)
        return true;
    if (!e)
        return false;

    switch (q->type) {
    case QK_TERM:
        return q_term_match(q->term, e);
    case QK_AND:
        for (uint32_t i = 0; i < q->n; i++)
            if (!q_match(q->kids[i], e))
                return false;
        return true;
    case QK_OR:
        for (uint32_t i = 0; i < q->n; i++)
            if (q_match(q->kids[i], e))
                return true;
        return false;
    }
    return false;
}

/* ========================================================= read-only view */


q_kind_t q_node_kind(const q_expr_t *q)
{
    return (q_kind_t)q->type;
}

size_t q_node_count(const q_expr_t *q)
{
    return q->type == QK_TERM ? 0 : q->n;
}

const q_expr_t *q_node_child(const q_expr_t *q, size_t i)
{
    return q->type != QK_TERM && i < q->n ? q->kids[i] : NULL;
}

bool q_term_get(const q_expr_t *q, q_term_view_t *out)
{
    const q_term_t *t;

    if (q->type != QK_TERM || !q->term)
        return false;
    t = q->term;
    out->attr        = t->attr;
    out->linked      = t->link != NULL;
    out->n_steps     = t->n_steps;
    out->keys        = t->keys;
    out->n_keys      = t->n_keys;
    out->op          = (q_opkind_t)t->op;
    out->shape       = (q_shapekind_t)t->shape;
    out->n_values    = t->n_vals;
    out->pattern     = t->re_text;
    out->pattern_len = t->re_len;
    return true;
}

const char *q_term_step(const q_expr_t *q, size_t i, q_memberkind_t *kind)
{
    if (q->type != QK_TERM || !q->term || i >= q->term->n_steps)
        return NULL;
    if (kind)
        *kind = (q_memberkind_t)q->term->steps[i].member;
    return q->term->steps[i].name;
}

bool q_term_value(const q_expr_t *q, size_t i, q_value_view_t *out)
{
    const q_val_t *v;

    if (q->type != QK_TERM || !q->term || i >= q->term->n_vals)
        return false;
    v = &q->term->vals[i];
    out->kind     = (q_valkind_t)v->kind;
    out->is_int   = v->is_int;
    out->bare     = v->bare;
    out->b        = v->b;
    out->i        = v->i;
    out->num      = v->num;
    out->us       = v->ms;
    out->s        = v->s;
    out->len      = v->len;
    out->expanded = v->expanded;
    return true;
}

/* ====================================================== linked entities */

static unsigned q_depth_of(const q_expr_t *q)
{
    unsigned d = 0;
    if (!q)
        return 0;
    if (q->type == QK_TERM) {
        for (const q_term_t *t = q->term; t->link; t = t->link->inner->term)
            d++;
        return d;
    }
    for (uint32_t i = 0; i < q->n; i++) {
        unsigned k = q_depth_of(q->kids[i]);
        if (k > d)
            d = k;
    }
    return d;
}

unsigned q_link_depth(const q_expr_t *q)
{
    return q_depth_of(q);
}

static void q_links_of(q_expr_t *q, q_expr_t **out, size_t cap, size_t *n)
{
    if (!q)
        return;
    if (q->type != QK_TERM) {
        for (uint32_t i = 0; i < q->n; i++)
            q_links_of(q->kids[i], out, cap, n);
        return;
    }
    if (!q->term->link)
        return;
    q_links_of(q->term->link->inner, out, cap, n);     /* innermost first */
    if (*n < cap)
        out[*n] = q;
    (*n)++;
}

size_t q_links(q_expr_t *q, q_expr_t **out, size_t cap)
{
    size_t n = 0;
    q_links_of(q, out, cap, &n);
    return n;
}

bool q_link_get(const q_expr_t *link, q_link_view_t *v)
{
    if (!link || link->type != QK_TERM || !link->term->link)
        return false;
    v->rel   = link->term->attr;
    v->types = link->term->link->types;
    v->tsel  = link->term->link->tsel;
    v->inner = link->term->link->inner;
    return true;
}

static int q_cmp_ids(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void q_link_resolve(q_expr_t *link, const char **ids, size_t n)
{
    q_link_t *l = link->term->link;

    if (n > 1)
        qsort(ids, n, sizeof *ids, q_cmp_ids);
    l->ids      = ids;
    l->n_ids    = n;
    l->resolved = true;
}

/* Following the objects of one entity (q_match_linked): each linked entity
 * read costs one get(); Q_LINK_MAX_READS bound them per evaluation, so a
 * ListRelationship of thousands of objects, or nested terms fanning out,
 * cost a bounded time. Past the bound a target is not read, so it does not
 * match. */
#define Q_LINK_MAX_READS 256

typedef struct q_follow {
    const q_linker_t *lk;
    unsigned          left;
} q_follow_t;

static bool q_match_follow(const q_expr_t *q, const cr_entity_t *e, q_follow_t *f);

typedef struct q_follow_at {
    const q_link_t *l;
    q_follow_t     *f;
} q_follow_at_t;

/* The linked entity id matches l's inner expression (and type hint). */
static bool q_follow_target(const void *ud, const char *id)
{
    const q_follow_at_t *at = ud;
    q_follow_t          *f = at->f;
    if (!f->left)
        return false;
    f->left--;
    cr_entity_t *x = f->lk->get(f->lk->ud, id);
    if (!x)
        return false;           /* not held here: 4.5.23.1, only local entities are followed */
    bool hit = (!at->l->types || typesel_match(at->l->tsel, x)) && q_match_follow(at->l->inner, x, f);
    entity_unref(x);
    return hit;
}

/* attr{...}: one of the Relationship's (or ListRelationship's) objects is an entity that matches. */
static bool q_link_follow(const q_term_t *t, const cr_entity_t *e, q_follow_t *f)
{
    if (t->link->types && !t->link->tsel)
        return false;
    q_follow_at_t at = {.l = t->link, .f = f};
    return q_rel_any(t, e, q_follow_target, &at);
}

static bool q_match_follow(const q_expr_t *q, const cr_entity_t *e, q_follow_t *f)
{
    switch (q->type) {
    case QK_TERM:
        return q->term->link ? q_link_follow(q->term, e, f) : q_term_match(q->term, e);
    case QK_AND:
        for (uint32_t i = 0; i < q->n; i++)
            if (!q_match_follow(q->kids[i], e, f))
                return false;
        return true;
    case QK_OR:
        for (uint32_t i = 0; i < q->n; i++)
            if (q_match_follow(q->kids[i], e, f))
                return true;
        return false;
    }
    return false;
}

bool q_match_linked(const q_expr_t *q, const cr_entity_t *e, const q_linker_t *lk)
{
    if (!q)
        return true;
    if (!e)
        return false;
    if (!lk)
        return q_match(q, e);
    q_follow_t f = {.lk = lk, .left = Q_LINK_MAX_READS};
    return q_match_follow(q, e, &f);
}

q_expr_t *q_clone(arena_t *a, const q_expr_t *q)
{
    if (!q)
        return NULL;
    q_expr_t *x = arena_alloc(a, sizeof *x);
    *x = *q;
    if (q->type != QK_TERM) {
        x->kids = arena_alloc(a, (q->n ? q->n : 1) * sizeof *x->kids);
        for (uint32_t i = 0; i < q->n; i++)
            x->kids[i] = q_clone(a, q->kids[i]);
        return x;
    }
    if (!q->term->link)
        return x;               /* a plain term is never written after parsing: shared */
    q_term_t *t = arena_alloc(a, sizeof *t);
    q_link_t *l = arena_alloc(a, sizeof *l);
    *t = *q->term;
    *l = *q->term->link;
    l->inner    = q_clone(a, l->inner);
    l->ids      = NULL;
    l->n_ids    = 0;
    l->resolved = false;
    t->link = l;
    x->term = t;
    return x;
}
