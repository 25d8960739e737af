/*
 * typesel.c - the entity type selection language (clause 4.17).
 *
 *   Selection = And *( ("|" / ",") And )      "," is the older spelling of "|"
 *   And       = Primary *( ";" Primary )      AND binds tighter than OR
 *   Primary   = "(" Selection ")" / EntityType
 *
 * 4.17 only writes AND inside parentheses, "(Home;Vehicle)|Motorhome"; the
 * parser also takes "Home;Vehicle" bare, with the precedence of 4.9, and
 * nested parentheses. Type names are expanded with the request's @context
 * and interned when parsing, so matching compares pointers. A selection
 * that is a plain list of types ("A", "A,B", "A|B|C") also keeps the list,
 * for typesel_types(): the store then walks its type index instead of
 * filtering every entity.
 */
#include "model.h"

#include <string.h>

#define TS_MAX_TEXT  8192
#define TS_MAX_DEPTH 32

typedef enum { TS_TYPE = 0, TS_AND, TS_OR } ts_node_type_t;

typedef struct ts_node ts_node_t;
struct ts_node {
    uint8_t     type;        /* ts_node_type_t */
    uint32_t    n;           /* TS_AND / TS_OR: children */
    ts_node_t **kids;
    const char *name;        /* TS_TYPE: expanded, interned */
};

struct typesel {
    ts_node_t   *root;
    const char **list;       /* plain disjunction: its types; else NULL */
    size_t       n_list;
};

typedef struct ts_parser {
    arena_t            *a;
    const char         *s;
    size_t              pos, len;
    const ld_context_t *ctx;
    problem_t          *p;
    int                 depth;
    bool                failed;
} ts_parser_t;

static bool tsp_fail(ts_parser_t *tp, problem_kind_t kind, size_t at, const char *why)
{
    if (tp->failed)
        return false;
    tp->failed = true;
    problem_set(tp->p, kind, "type: at offset %zu: %s", at, why);
    return false;
}

static inline char tsp_peek(const ts_parser_t *tp)
{
    return tp->pos < tp->len ? tp->s[tp->pos] : '\0';
}

static void tsp_blank(ts_parser_t *tp)
{
    while (tp->pos < tp->len && (tp->s[tp->pos] == ' ' || tp->s[tp->pos] == '\t'))
        tp->pos++;
}

/* Characters that end a type name, or may never appear in one (a name of
 * 4.6.2 or a URI; 4.17 recommends short names since ",;()" are legal URI
 * characters). */
static inline bool ts_stop(unsigned char c)
{
    return c == ',' || c == '|' || c == ';' || c == '(' || c == ')' || c <= ' ' ||
           c == '"' || c == '<' || c == '>' || c == '\\' || c == '`' || c == '{' ||
           c == '}' || c == '^' || c == 0x7f;
}

static ts_node_t *tsp_or(ts_parser_t *tp);

static ts_node_t *tsp_primary(ts_parser_t *tp)
{
    ts_node_t *x;
    size_t     start;

    tsp_blank(tp);
    start = tp->pos;
    if (tsp_peek(tp) == '(') {
        if (++tp->depth > TS_MAX_DEPTH) {
            tsp_fail(tp, PB_TOO_COMPLEX_QUERY, start, "parentheses nested too deep");
            return NULL;
        }
        tp->pos++;
        x = tsp_or(tp);
        if (!x)
            return NULL;
        tsp_blank(tp);
        if (tsp_peek(tp) != ')') {
            tsp_fail(tp, PB_BAD_REQUEST_DATA, tp->pos, "expected ')'");
            return NULL;
        }
        tp->pos++;
        tp->depth--;
        return x;
    }

    while (tp->pos < tp->len && !ts_stop((unsigned char)tp->s[tp->pos]))
        tp->pos++;
    if (tp->pos == start) {
        tsp_fail(tp, PB_BAD_REQUEST_DATA, start,
                 tp->pos < tp->len ? "expected an entity type" : "expected an entity type, found the end");
        return NULL;
    }
    x = arena_calloc(tp->a, sizeof(*x));
    x->type = TS_TYPE;
    x->name = ld_expandn(tp->ctx, tp->s + start, tp->pos - start);
    if (!x->name) {
        tsp_fail(tp, PB_BAD_REQUEST_DATA, start, "cannot expand the entity type");
        return NULL;
    }
    return x;
}

static ts_node_t *tsp_chain(ts_parser_t *tp, bool is_or)
{
    ts_node_t  *first, *x;
    ts_node_t **kids = NULL;
    uint32_t    n = 0, cap = 0;

    first = is_or ? tsp_chain(tp, false) : tsp_primary(tp);
    if (!first)
        return NULL;
    for (;;) {
        char c;

        tsp_blank(tp);
        c = tsp_peek(tp);
        if (is_or ? (c != '|' && c != ',') : c != ';')
            break;
        tp->pos++;
        if (n + 1 >= cap) {
            uint32_t    ncap = cap ? cap * 2 : 8;
            ts_node_t **nk = arena_alloc(tp->a, ncap * sizeof(*nk));
            if (n)
                memcpy(nk, kids, n * sizeof(*nk));
            kids = nk;
            cap = ncap;
        }
        if (n == 0)
            kids[n++] = first;
        kids[n] = is_or ? tsp_chain(tp, false) : tsp_primary(tp);
        if (!kids[n])
            return NULL;
        n++;
    }
    if (n == 0)
        return first;
    x = arena_calloc(tp->a, sizeof(*x));
    x->type = is_or ? TS_OR : TS_AND;
    x->n = n;
    x->kids = kids;
    return x;
}

static ts_node_t *tsp_or(ts_parser_t *tp)
{
    return tsp_chain(tp, true);
}

typesel_t *typesel_parse(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p)
{
    ts_parser_t tp;
    typesel_t  *t;
    size_t      len;

    if (!text || !*text) {
        problem_set(p, PB_BAD_REQUEST_DATA, "type: empty type selection");
        return NULL;
    }
    len = strlen(text);
    if (len > TS_MAX_TEXT) {
        problem_set(p, PB_TOO_COMPLEX_QUERY, "type: longer than %d bytes", TS_MAX_TEXT);
        return NULL;
    }
    if (!json_utf8_valid(text, len)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "type: not valid UTF-8");
        return NULL;
    }

    memset(&tp, 0, sizeof(tp));
    tp.a = a;
    tp.s = text;
    tp.len = len;
    tp.ctx = ctx ? ctx : ld_core();
    tp.p = p;

    t = arena_calloc(a, sizeof(*t));
    t->root = tsp_or(&tp);
    if (!t->root)
        return NULL;
    tsp_blank(&tp);
    if (tp.pos != tp.len) {
        tsp_fail(&tp, PB_BAD_REQUEST_DATA, tp.pos,
                 tsp_peek(&tp) == ')' ? "unbalanced ')'" : "unexpected character");
        return NULL;
    }

    /* A plain disjunction: keep its list for the type index. */
    if (t->root->type == TS_TYPE) {
        t->list = arena_alloc(a, sizeof(char *));
        t->list[0] = t->root->name;
        t->n_list = 1;
    } else if (t->root->type == TS_OR) {
        uint32_t i;
        for (i = 0; i < t->root->n; i++)
            if (t->root->kids[i]->type != TS_TYPE)
                break;
        if (i == t->root->n) {
            t->list = arena_alloc(a, t->root->n * sizeof(char *));
            for (i = 0; i < t->root->n; i++) {
                const char *nm = t->root->kids[i]->name;
                size_t      j;
                for (j = 0; j < t->n_list; j++)      /* "A,A" lists A once */
                    if (t->list[j] == nm)
                        break;
                if (j == t->n_list)
                    t->list[t->n_list++] = nm;
            }
        }
    }
    return t;
}

static bool ts_has_type(const cr_entity_t *e, const char *type)
{
    for (uint16_t i = 0; i < e->n_types; i++)
        if (e->types[i] == type)
            return true;
    return false;
}

static bool ts_eval(const ts_node_t *x, const cr_entity_t *e)
{
    switch (x->type) {
    case TS_TYPE:
        return ts_has_type(e, x->name);
    case TS_AND:
        for (uint32_t i = 0; i < x->n; i++)
            if (!ts_eval(x->kids[i], e))
                return false;
        return true;
    case TS_OR:
        for (uint32_t i = 0; i < x->n; i++)
            if (ts_eval(x->kids[i], e))
                return true;
        return false;
    }
    return false;
}

bool typesel_match(const typesel_t *t, const cr_entity_t *e)
{
    if (!t)
        return true;
    if (!e)
        return false;
    return ts_eval(t->root, e);
}

size_t typesel_types(const typesel_t *t, const char *const **types)
{
    if (!t || !t->list) {
        if (types)
            *types = NULL;
        return 0;
    }
    if (types)
        *types = t->list;
    return t->n_list;
}
