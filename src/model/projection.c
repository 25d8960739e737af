/*
 * projection.c - the NGSI-LD Attribute Projection Language (4.21) of the
 * pick and omit parameters, parsed once per request into a tree
 * (projection_t, model.h) that the renderer and the linked entity retrieval
 * of 4.5.23 read:
 *
 *   orOp             = "|" / ","
 *   ProjectionTerm   = AttrName *1(LinkedEntityTerm) *(orOp ProjectionTerm)
 *   LinkedEntityTerm = "{" ProjectionTerm "}"
 *
 * A term with braces names a Relationship and projects the entities linked
 * through it; with pick it also picks the Relationship itself. Names are
 * expanded with the request's @context and interned; id, type and scope
 * name the entity members ("@id", "@type", MN.scope).
 */
#include "model.h"

#include <string.h>

typedef struct pstate {
    arena_t            *a;
    const ld_context_t *ctx;
    const char         *text, *s;
    bool                omit;
    problem_t          *p;
} pstate_t;

static bool syntax(pstate_t *ps, const char *what)
{
    return problem_set(ps->p, PB_BAD_REQUEST_DATA, "%s '%s' at offset %zu: %s (4.21)",
                       ps->omit ? "omit" : "pick", ps->text, (size_t)(ps->s - ps->text), what);
}

static const char *member_name(pstate_t *ps, const char *s, size_t l)
{
    char *name = arena_strndup(ps->a, s, l);

    if (!strcmp(name, "id") || !strcmp(name, "@id"))
        return "@id";
    if (!strcmp(name, "type") || !strcmp(name, "@type"))
        return "@type";
    if (!strcmp(name, "scope"))
        return MN.scope;
    if (!model_valid_name(name) && !strchr(name, ':')) {
        problem_set(ps->p, PB_BAD_REQUEST_DATA, "%s: invalid attribute name '%s' (4.21)",
                    ps->omit ? "omit" : "pick", name);
        return NULL;
    }
    return ld_expand_lookup(ps->ctx, name, ps->a);   /* a read: interns nothing */
}

/* Interned names compare by pointer; "@id" / "@type" by text (the
 * renderer's literals need not be this file's). */
static bool in(const char **v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == name || (name[0] == '@' && v[i][0] == '@' && !strcmp(v[i], name)))
            return true;
    return false;
}

/* ProjectionTerm *(orOp ProjectionTerm), up to `close` ('}' or NUL). The
 * arrays are sized by a count of the separators ahead (an upper bound). */
static projection_t *parse_list(pstate_t *ps, unsigned level)
{
    size_t        cap = 1;
    int           nest = 0;
    projection_t *pr = arena_calloc(ps->a, sizeof *pr);

    if (level > PROJECTION_MAX_DEPTH) {
        syntax(ps, "nested too deep");
        return NULL;
    }
    for (const char *c = ps->s; *c && nest >= 0; c++) {
        if (*c == '{') nest++;
        else if (*c == '}') nest--;
        else if (nest == 0 && (*c == ',' || *c == '|')) cap++;
    }
    pr->names = arena_alloc(ps->a, cap * sizeof *pr->names);
    pr->links = arena_alloc(ps->a, cap * sizeof *pr->links);
    pr->sub   = arena_alloc(ps->a, cap * sizeof *pr->sub);
    for (;;) {
        size_t l = strcspn(ps->s, ",|{}");

        if (l == 0) {
            syntax(ps, "an attribute name is expected");
            return NULL;
        }
        const char *name = member_name(ps, ps->s, l);
        if (!name)
            return NULL;
        ps->s += l;
        if (*ps->s == '{') {
            ps->s++;
            projection_t *sub = parse_list(ps, level + 1);
            if (!sub)
                return NULL;
            if (*ps->s != '}') {
                syntax(ps, "'}' is expected");
                return NULL;
            }
            ps->s++;
            if (sub->depth + 1 > pr->depth)
                pr->depth = sub->depth + 1;
            pr->links[pr->n_links] = name;
            pr->sub[pr->n_links++] = sub;
            if (!ps->omit && !in(pr->names, pr->n, name))
                pr->names[pr->n++] = name;
        } else if (!in(pr->names, pr->n, name)) {
            pr->names[pr->n++] = name;
        }
        if (*ps->s != ',' && *ps->s != '|')
            return pr;
        ps->s++;
    }
}

/* omit: every node falls back to the root's own names. */
static void set_base(projection_t *pr, const projection_t *base)
{
    pr->base = base;
    for (size_t i = 0; i < pr->n_links; i++)
        set_base(pr->sub[i], base);
}

projection_t *projection_parse(arena_t *a, const char *text, const ld_context_t *ctx, bool omit,
                               problem_t *p)
{
    pstate_t      ps = {.a = a, .ctx = ctx, .text = text, .s = text, .omit = omit, .p = p};
    projection_t *pr = parse_list(&ps, 0);

    if (!pr)
        return NULL;
    if (*ps.s) {
        syntax(&ps, *ps.s == '}' ? "'}' without '{'" : "unexpected character");
        return NULL;
    }
    if (omit) {
        /* The root's own names reach every entity of the payload (5.7.1.5),
         * except id and type: 4.21 projects Attributes of the linked
         * entities, and a linked entity keeps what identifies it. */
        projection_t *base = arena_calloc(a, sizeof *base);

        base->names = arena_alloc(a, (pr->n ? pr->n : 1) * sizeof *base->names);
        for (size_t i = 0; i < pr->n; i++)
            if (strcmp(pr->names[i], "@id") && strcmp(pr->names[i], "@type"))
                base->names[base->n++] = pr->names[i];
        base->base  = base;
        set_base(pr, base);
    }
    return pr;
}

const projection_t *projection_link(const projection_t *pr, const char *rel, bool omit)
{
    if (!pr)
        return NULL;
    for (size_t i = 0; i < pr->n_links; i++)
        if (pr->links[i] == rel)
            return pr->sub[i];
    return omit ? pr->base : pr;
}

bool projection_keeps(const projection_t *pr, const char *name, bool omit)
{
    if (!pr)
        return true;
    if (!omit)
        return in(pr->names, pr->n, name);
    return !in(pr->names, pr->n, name) && !(pr->base && in(pr->base->names, pr->base->n, name));
}
