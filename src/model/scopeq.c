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
 * The AND/OR/parentheses part is the grammar of boolsel.h, shared with type
 * selection; this file reads and matches a Scope. 4.19's own example 5
 * writes "|CompanyB" without the leading '/'; a scope without one is read as
 * if it had it.
 *
 * An entity's scope (cr_entity_t.scope) is NULL, a string, or an array of
 * strings. A pattern matches when one of the entity's scopes matches it;
 * an AND of patterns needs each pattern matched (by the same or different
 * scopes: "(/Madrid/Districts;/CompanyA)" selects an entity that has both).
 * Matching walks the scope string level by level without copying it.
 */
#include "boolsel.h"

#include <string.h>

#define SQ_MAX_LEVELS 128

typedef struct sq_level {
    const char *s;           /* NULL for '+' */
    uint32_t    len;
} sq_level_t;

/* One Scope pattern (a boolsel atom). */
typedef struct sq_pattern {
    bool        deep;        /* trailing "/#" (or the lone "/#") */
    uint16_t    n_levels;
    sq_level_t *levels;
} sq_pattern_t;

struct scopeq {
    bs_node_t *root;
};

/* ScopeQLevelChar: letters, digits, '_' (bytes >= 0x80 are UTF-8 letters);
 * '-' is taken too, as scope names commonly carry it. */
static inline bool sq_level_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c >= 0x80;
}

static void *sq_atom(bs_parser_t *sp)
{
    sq_level_t levels[SQ_MAX_LEVELS];
    uint16_t   n = 0;
    sq_pattern_t *x = arena_calloc(sp->a, sizeof(*x));
    size_t     start = sp->pos;

    if (bs_peek(sp, 0) == '/' && bs_peek(sp, 1) == '#') {
        sp->pos += 2;
        x->deep = true;
        return x;
    }

    for (;;) {
        size_t at;

        if (bs_peek(sp, 0) == '/')
            sp->pos++;
        else if (n > 0 || !sq_level_char((unsigned char)bs_peek(sp, 0)))
            break;                                  /* lenient: first '/' may be missing */
        at = sp->pos;

        if (bs_peek(sp, 0) == '#') {
            if (n == 0) {
                bs_fail(sp, PB_BAD_REQUEST_DATA, at, "'#' needs a scope before it, or is \"/#\" alone");
                return NULL;
            }
            sp->pos++;
            x->deep = true;
            break;
        }
        if (n == SQ_MAX_LEVELS) {
            bs_fail(sp, PB_TOO_COMPLEX_QUERY, at, "too many scope levels");
            return NULL;
        }
        if (bs_peek(sp, 0) == '+') {
            sp->pos++;
            levels[n].s = NULL;
            levels[n].len = 0;
        } else {
            while (sp->pos < sp->len && sq_level_char((unsigned char)sp->s[sp->pos]))
                sp->pos++;
            if (sp->pos == at) {
                bs_fail(sp, PB_BAD_REQUEST_DATA, at, "expected a scope level name, '+' or '#'");
                return NULL;
            }
            levels[n].s = sp->s + at;
            levels[n].len = (uint32_t)(sp->pos - at);
        }
        n++;
    }
    if (n == 0) {
        bs_fail(sp, PB_BAD_REQUEST_DATA, start, "expected a scope (/level/...)");
        return NULL;
    }
    x->levels = arena_alloc(sp->a, n * sizeof(sq_level_t));
    memcpy(x->levels, levels, n * sizeof(sq_level_t));
    x->n_levels = n;
    return x;
}

scopeq_t *scopeq_parse(arena_t *a, const char *text, problem_t *p)
{
    bs_parser_t bp = {.a = a, .p = p, .what = "scopeQ", .atom = sq_atom};
    scopeq_t   *s = arena_calloc(a, sizeof(*s));

    s->root = bs_parse(&bp, text);
    return s->root ? s : NULL;
}

/* ------------------------------------------------------------- matching */

/* One scope string ("/Madrid/Gardens") against one pattern. */
static bool sq_scope_match(const sq_pattern_t *x, const char *s, size_t len)
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

/* A pattern (boolsel atom) against the entity's scope (a string or an array
 * of strings): one of them must match. */
static bool sq_atom_match(const void *atom, const void *ud)
{
    const sq_pattern_t *x = atom;
    const json_t       *scope = ud;
    if (scope->type == JSON_STRING)
        return sq_scope_match(x, scope->str, scope->len);
    if (scope->type == JSON_ARRAY) {
        json_foreach(el, scope)
            if (el->type == JSON_STRING && sq_scope_match(x, el->str, el->len))
                return true;
    }
    return false;
}

bool scopeq_match(const scopeq_t *s, const cr_entity_t *e)
{
    if (!s)
        return true;
    if (!e || !e->scope)
        return false;                           /* no scope: no pattern selects it */
    return bs_eval(s->root, sq_atom_match, e->scope);
}

/* ------------------------------------------------------ read-only view */

const void *scopeq_root(const scopeq_t *s)
{
    return s ? s->root : NULL;
}

scopeq_kind_t scopeq_node(const void *node, size_t *n_kids)
{
    const bs_node_t *n = node;

    if (n_kids)
        *n_kids = n->type == BS_ATOM ? 0 : n->n;
    return n->type == BS_AND ? SQK_AND : n->type == BS_OR ? SQK_OR : SQK_PATTERN;
}

const void *scopeq_child(const void *node, size_t i)
{
    const bs_node_t *n = node;

    return n->type != BS_ATOM && i < n->n ? n->kids[i] : NULL;
}

/* What sq_scope_match accepts, as a regex: "^" then "/name" or "/[^/]+"
 * ('+') per level, then "/?\z" (a trailing '/' tolerated) or, with '#',
 * "(/[\s\S]*)?\z"; the lone "/#" is "^[\s\S]" (any non-empty scope). Level
 * names hold no regex metacharacter (sq_level_char). */
bool scopeq_regex(const void *node, char *buf, size_t cap)
{
    const bs_node_t    *n = node;
    const sq_pattern_t *x;
    size_t              o = 0;

#define SQ_PUT(str, len)                                                                          \
    do {                                                                                          \
        if (o + (len) >= cap)                                                                     \
            return false;                                                                         \
        memcpy(buf + o, (str), (len));                                                            \
        o += (len);                                                                               \
    } while (0)
    if (!n || n->type != BS_ATOM || !cap)
        return false;
    x = n->atom;
    if (x->n_levels == 0) {
        SQ_PUT("^[\\s\\S]", 7);
    } else {
        SQ_PUT("^", 1);
        for (uint16_t k = 0; k < x->n_levels; k++) {
            SQ_PUT("/", 1);
            if (x->levels[k].s)
                SQ_PUT(x->levels[k].s, x->levels[k].len);
            else
                SQ_PUT("[^/]+", 5);
        }
        if (x->deep)
            SQ_PUT("(/[\\s\\S]*)?\\z", 13);
        else
            SQ_PUT("/?\\z", 4);
    }
#undef SQ_PUT
    buf[o] = '\0';
    return true;
}
