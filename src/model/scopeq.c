/*
 * scopeq.c - the scope query language (clause 4.19).
 *
 *   ScopesQ = And *( ("|" / ",") And )        "," is the older spelling of "|"
 *   And     = Primary *( ";" Primary )        AND binds tighter than OR
 *   Primary = "(" ScopesQ ")" / Scope
 *   Scope   = "/#"                            any non-empty scope
 *           / 1*( "/" Level ) [ "/#" ]        "#": this scope and all below it
 *   Level   = Name / "+"                      "+": exactly one level, any name
 *
 * As with type selection, AND is also taken without parentheses and
 * parentheses nest. 4.19's own example 5 writes "|CompanyB" without the
 * leading '/'; a scope without one is read as if it had it.
 *
 * An entity's scope (cr_entity_t.scope) is NULL, a string, or an array of
 * strings. A pattern matches when one of the entity's scopes matches it;
 * an AND of patterns needs each pattern matched (by the same or different
 * scopes: "(/Madrid/Districts;/CompanyA)" selects an entity that has both).
 * Matching walks the scope string level by level without copying it.
 */
#include "model.h"

#include <string.h>

#define SQ_MAX_TEXT   8192
#define SQ_MAX_DEPTH  32
#define SQ_MAX_LEVELS 128

typedef enum { SQ_SCOPE = 0, SQ_AND, SQ_OR } sq_node_type_t;

typedef struct sq_level {
    const char *s;           /* NULL for '+' */
    uint32_t    len;
} sq_level_t;

typedef struct sq_node sq_node_t;
struct sq_node {
    uint8_t     type;        /* sq_node_type_t */
    bool        deep;        /* SQ_SCOPE: trailing "/#" (or the lone "/#") */
    uint16_t    n_levels;    /* SQ_SCOPE */
    uint32_t    n;           /* SQ_AND / SQ_OR */
    sq_level_t *levels;
    sq_node_t **kids;
};

struct scopeq {
    sq_node_t *root;
};

typedef struct sq_parser {
    arena_t    *a;
    const char *s;
    size_t      pos, len;
    problem_t  *p;
    int         depth;
    bool        failed;
} sq_parser_t;

static bool sqp_fail(sq_parser_t *sp, problem_kind_t kind, size_t at, const char *why)
{
    if (sp->failed)
        return false;
    sp->failed = true;
    problem_set(sp->p, kind, "scopeQ: at offset %zu: %s", at, why);
    return false;
}

static inline char sqp_peek(const sq_parser_t *sp, size_t k)
{
    return sp->pos + k < sp->len ? sp->s[sp->pos + k] : '\0';
}

static void sqp_blank(sq_parser_t *sp)
{
    while (sp->pos < sp->len && (sp->s[sp->pos] == ' ' || sp->s[sp->pos] == '\t'))
        sp->pos++;
}

/* ScopeQLevelChar: letters, digits, '_' (bytes >= 0x80 are UTF-8 letters);
 * '-' is taken too, as scope names commonly carry it. */
static inline bool sq_level_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c >= 0x80;
}

static sq_node_t *sqp_scope(sq_parser_t *sp)
{
    sq_level_t levels[SQ_MAX_LEVELS];
    uint16_t   n = 0;
    sq_node_t *x = arena_calloc(sp->a, sizeof(*x));
    size_t     start = sp->pos;

    x->type = SQ_SCOPE;

    if (sqp_peek(sp, 0) == '/' && sqp_peek(sp, 1) == '#') {
        sp->pos += 2;
        x->deep = true;
        return x;
    }

    for (;;) {
        size_t at;

        if (sqp_peek(sp, 0) == '/')
            sp->pos++;
        else if (n > 0 || !sq_level_char((unsigned char)sqp_peek(sp, 0)))
            break;                                  /* lenient: first '/' may be missing */
        at = sp->pos;

        if (sqp_peek(sp, 0) == '#') {
            if (n == 0) {
                sqp_fail(sp, PB_BAD_REQUEST_DATA, at, "'#' needs a scope before it, or is \"/#\" alone");
                return NULL;
            }
            sp->pos++;
            x->deep = true;
            break;
        }
        if (n == SQ_MAX_LEVELS) {
            sqp_fail(sp, PB_TOO_COMPLEX_QUERY, at, "too many scope levels");
            return NULL;
        }
        if (sqp_peek(sp, 0) == '+') {
            sp->pos++;
            levels[n].s = NULL;
            levels[n].len = 0;
        } else {
            while (sp->pos < sp->len && sq_level_char((unsigned char)sp->s[sp->pos]))
                sp->pos++;
            if (sp->pos == at) {
                sqp_fail(sp, PB_BAD_REQUEST_DATA, at, "expected a scope level name, '+' or '#'");
                return NULL;
            }
            levels[n].s = sp->s + at;
            levels[n].len = (uint32_t)(sp->pos - at);
        }
        n++;
    }
    if (n == 0) {
        sqp_fail(sp, PB_BAD_REQUEST_DATA, start, "expected a scope (/level/...)");
        return NULL;
    }
    x->levels = arena_alloc(sp->a, n * sizeof(sq_level_t));
    memcpy(x->levels, levels, n * sizeof(sq_level_t));
    x->n_levels = n;
    return x;
}

static sq_node_t *sqp_or(sq_parser_t *sp);

static sq_node_t *sqp_primary(sq_parser_t *sp)
{
    sq_node_t *x;
    size_t     start;

    sqp_blank(sp);
    start = sp->pos;
    if (sqp_peek(sp, 0) != '(')
        return sqp_scope(sp);

    if (++sp->depth > SQ_MAX_DEPTH) {
        sqp_fail(sp, PB_TOO_COMPLEX_QUERY, start, "parentheses nested too deep");
        return NULL;
    }
    sp->pos++;
    x = sqp_or(sp);
    if (!x)
        return NULL;
    sqp_blank(sp);
    if (sqp_peek(sp, 0) != ')') {
        sqp_fail(sp, PB_BAD_REQUEST_DATA, sp->pos, "expected ')'");
        return NULL;
    }
    sp->pos++;
    sp->depth--;
    return x;
}

static sq_node_t *sqp_chain(sq_parser_t *sp, bool is_or)
{
    sq_node_t  *first, *x;
    sq_node_t **kids = NULL;
    uint32_t    n = 0, cap = 0;

    first = is_or ? sqp_chain(sp, false) : sqp_primary(sp);
    if (!first)
        return NULL;
    for (;;) {
        char c;

        sqp_blank(sp);
        c = sqp_peek(sp, 0);
        if (is_or ? (c != '|' && c != ',') : c != ';')
            break;
        sp->pos++;
        if (n + 1 >= cap) {
            uint32_t    ncap = cap ? cap * 2 : 8;
            sq_node_t **nk = arena_alloc(sp->a, ncap * sizeof(*nk));
            if (n)
                memcpy(nk, kids, n * sizeof(*nk));
            kids = nk;
            cap = ncap;
        }
        if (n == 0)
            kids[n++] = first;
        kids[n] = is_or ? sqp_chain(sp, false) : sqp_primary(sp);
        if (!kids[n])
            return NULL;
        n++;
    }
    if (n == 0)
        return first;
    x = arena_calloc(sp->a, sizeof(*x));
    x->type = is_or ? SQ_OR : SQ_AND;
    x->n = n;
    x->kids = kids;
    return x;
}

static sq_node_t *sqp_or(sq_parser_t *sp)
{
    return sqp_chain(sp, true);
}

scopeq_t *scopeq_parse(arena_t *a, const char *text, problem_t *p)
{
    sq_parser_t sp;
    scopeq_t   *s;
    size_t      len;

    if (!text || !*text) {
        problem_set(p, PB_BAD_REQUEST_DATA, "scopeQ: empty scope query");
        return NULL;
    }
    len = strlen(text);
    if (len > SQ_MAX_TEXT) {
        problem_set(p, PB_TOO_COMPLEX_QUERY, "scopeQ: longer than %d bytes", SQ_MAX_TEXT);
        return NULL;
    }
    if (!json_utf8_valid(text, len)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "scopeQ: not valid UTF-8");
        return NULL;
    }

    memset(&sp, 0, sizeof(sp));
    sp.a = a;
    sp.s = text;
    sp.len = len;
    sp.p = p;

    s = arena_calloc(a, sizeof(*s));
    s->root = sqp_or(&sp);
    if (!s->root)
        return NULL;
    sqp_blank(&sp);
    if (sp.pos != sp.len) {
        sqp_fail(&sp, PB_BAD_REQUEST_DATA, sp.pos,
                 sqp_peek(&sp, 0) == ')' ? "unbalanced ')'" : "unexpected character");
        return NULL;
    }
    return s;
}

/* ------------------------------------------------------------- matching */

/* One scope string ("/Madrid/Gardens") against one pattern. */
static bool sq_scope_match(const sq_node_t *x, const char *s, size_t len)
{
    size_t i = 0;

    if (x->n_levels == 0)                       /* "/#": any non-empty scope */
        return len > 0;

    for (uint16_t k = 0; k < x->n_levels; k++) {
        size_t start;

        if (i >= len || s[i] != '/')
            return false;
        start = ++i;
        while (i < len && s[i] != '/')
            i++;
        if (i == start)                         /* an empty level ("//") */
            return false;
        if (x->levels[k].s &&
            (x->levels[k].len != i - start || memcmp(x->levels[k].s, s + start, i - start) != 0))
            return false;
    }
    if (i == len || (i + 1 == len && s[i] == '/'))   /* exact (a trailing '/' tolerated) */
        return true;
    return x->deep && s[i] == '/';
}

static bool sq_leaf_match(const sq_node_t *x, const json_t *scope)
{
    if (scope->type == JSON_STRING)
        return sq_scope_match(x, scope->str, scope->len);
    if (scope->type == JSON_ARRAY) {
        json_foreach(el, scope)
            if (el->type == JSON_STRING && sq_scope_match(x, el->str, el->len))
                return true;
    }
    return false;
}

static bool sq_eval(const sq_node_t *x, const json_t *scope)
{
    switch (x->type) {
    case SQ_SCOPE:
        return sq_leaf_match(x, scope);
    case SQ_AND:
        for (uint32_t i = 0; i < x->n; i++)
            if (!sq_eval(x->kids[i], scope))
                return false;
        return true;
    case SQ_OR:
        for (uint32_t i = 0; i < x->n; i++)
            if (sq_eval(x->kids[i], scope))
                return true;
        return false;
    }
    return false;
}

bool scopeq_match(const scopeq_t *s, const cr_entity_t *e)
{
    if (!s)
        return true;
    if (!e || !e->scope)
        return false;                           /* no scope: no pattern selects it */
    return sq_eval(s->root, e->scope);
}
