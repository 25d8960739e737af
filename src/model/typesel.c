/*
 * typesel.c - the entity type selection language (clause 4.17), on the
 * boolean selection grammar of boolsel.h: an atom is an EntityType, a name
 * of 4.6.2 or a URI.
 *
 * 4.17 only writes AND inside parentheses, "(Home;Vehicle)|Motorhome"; the
 * parser also takes "Home;Vehicle" bare, with the precedence of 4.9, and
 * nested parentheses. Type names are expanded with the request's @context
 * and interned when parsing, so matching compares pointers. A selection
 * that is a plain list of types ("A", "A,B", "A|B|C") also keeps the list,
 * for typesel_types(): the store then walks its type index instead of
 * filtering every entity.
 */
#include "boolsel.h"

#include <string.h>

struct typesel {
    bs_node_t   *root;       /* atoms: expanded, interned type names */
    const char **list;       /* plain disjunction: its types; else NULL */
    size_t       n_list;
};

/* Characters that end a type name, or may never appear in one (a name of
 * 4.6.2 or a URI; 4.17 recommends short names since ",;()" are legal URI
 * characters). */
static inline bool ts_stop(unsigned char c)
{
    return c == ',' || c == '|' || c == ';' || c == '(' || c == ')' || c <= ' ' ||
           c == '"' || c == '<' || c == '>' || c == '\\' || c == '`' || c == '{' ||
           c == '}' || c == '^' || c == 0x7f;
}

static void *ts_atom_names(bs_parser_t *bp, bool intern)
{
    size_t start = bp->pos;
    while (bp->pos < bp->len && !ts_stop((unsigned char)bp->s[bp->pos]))
        bp->pos++;
    if (bp->pos == start) {
        bs_fail(bp, PB_BAD_REQUEST_DATA, start,
                bp->pos < bp->len ? "expected an entity type" : "expected an entity type, found the end");
        return NULL;
    }
    /* a request's selection looks names up only (an unknown type matches
     * nothing and is not remembered); a stored one interns them */
    const char *name = intern ? ld_expandn(bp->ud, bp->s + start, bp->pos - start)
                              : ld_expandn_lookup(bp->ud, bp->s + start, bp->pos - start, bp->a);
    if (!name)
        bs_fail(bp, PB_BAD_REQUEST_DATA, start, "cannot expand the entity type");
    return (void *)name;
}

static void *ts_atom(bs_parser_t *bp)
{
    return ts_atom_names(bp, false);
}

static void *ts_atom_stored(bs_parser_t *bp)
{
    return ts_atom_names(bp, true);
}

static typesel_t *typesel_parse_with(arena_t *a, const char *text, const ld_context_t *ctx,
                                     void *(*atom)(bs_parser_t *), problem_t *p)
{
    bs_parser_t bp = {.a = a, .p = p, .what = "type", .atom = atom, .ud = (void *)(ctx ? ctx : ld_core())};
    typesel_t  *t = arena_calloc(a, sizeof(*t));

    t->root = bs_parse(&bp, text);
    if (!t->root)
        return NULL;

    /* A plain disjunction: keep its list for the type index. */
    if (t->root->type == BS_ATOM) {
        t->list = arena_alloc(a, sizeof(char *));
        t->list[0] = t->root->atom;
        t->n_list = 1;
    } else if (t->root->type == BS_OR) {
        uint32_t i;
        for (i = 0; i < t->root->n; i++)
            if (t->root->kids[i]->type != BS_ATOM)
                break;
        if (i == t->root->n) {
            t->list = arena_alloc(a, t->root->n * sizeof(char *));
            for (i = 0; i < t->root->n; i++) {
                const char *nm = t->root->kids[i]->atom;
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

typesel_t *typesel_parse(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p)
{
    return typesel_parse_with(a, text, ctx, ts_atom, p);
}

typesel_t *typesel_parse_stored(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p)
{
    return typesel_parse_with(a, text, ctx, ts_atom_stored, p);
}

static bool ts_has_type(const void *type, const void *entity)
{
    return entity_has_type(entity, type);
}

bool typesel_match(const typesel_t *t, const cr_entity_t *e)
{
    if (!t)
        return true;
    if (!e)
        return false;
    return bs_eval(t->root, ts_has_type, e);
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
