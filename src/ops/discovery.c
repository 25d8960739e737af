/*
 * discovery.c - what the entities of a tenant say of their types and
 * attributes (5.7.5-5.7.10: EntityTypeList, EntityType, EntityTypeInfo,
 * AttributeList, Attribute), gathered in one pass over the entities
 * (store_foreach) into insertion-ordered sets of interned names in the
 * request arena. Cost: O(entities) per call; discovery is not a hot path.
 */
#include "ops.h"

#include <string.h>

static size_t names_probe(const ops_names_t *s, const char *name)
{
    size_t h = cr_hash_ptr(name) & (s->nslot - 1);
    while (s->slot[h] && s->v[s->slot[h] - 1].name != name) h = (h + 1) & (s->nslot - 1);
    return h;
}

static void names_grow(ops_names_t *s)
{
    size_t  ns = s->nslot ? s->nslot * 2 : 64;
    size_t *sl = arena_calloc(s->a, ns * sizeof *sl);
    for (size_t i = 0; i < s->n; i++) {
        size_t h = cr_hash_ptr(s->v[i].name) & (ns - 1);
        while (sl[h]) h = (h + 1) & (ns - 1);
        sl[h] = i + 1;
    }
    s->slot = sl;
    s->nslot = ns;
}

ops_name_t *ops_names_get(ops_names_t *s, const char *name)
{
    if (s->n * 2 >= s->nslot) names_grow(s);
    size_t h = names_probe(s, name);
    if (s->slot[h]) return &s->v[s->slot[h] - 1];
    if (s->n == s->cap) {
        size_t      nc = s->cap ? s->cap * 2 : 16;
        ops_name_t *nv = arena_alloc(s->a, nc * sizeof *nv);
        if (s->n) memcpy(nv, s->v, s->n * sizeof *nv);
        s->v = nv;
        s->cap = nc;
    }
    ops_name_t *ni = &s->v[s->n];
    memset(ni, 0, sizeof *ni);
    ni->name = name;
    s->slot[h] = ++s->n;
    return ni;
}

static void name_add_rel(arena_t *a, ops_name_t *ni, const char *rel)
{
    for (size_t i = 0; i < ni->n_rel; i++) if (ni->rel[i] == rel) return;
    if (ni->n_rel == ni->cap_rel) {
        size_t       nc = ni->cap_rel ? ni->cap_rel * 2 : 8;
        const char **nr = arena_alloc(a, nc * sizeof *nr);
        if (ni->n_rel) memcpy(nr, ni->rel, ni->n_rel * sizeof *nr);
        ni->rel = nr;
        ni->cap_rel = nc;
    }
    ni->rel[ni->n_rel++] = rel;
}

typedef struct gather {
    ops_discovery_t *d;
    const char      *only_type;       /* only entities of it */
    const char      *only_attr;       /* only this attribute */
} gather_t;

static void gather_one(void *ud, const cr_entity_t *e)
{
    gather_t        *g = ud;
    ops_discovery_t *d = g->d;
    if (g->only_type && !entity_has_type(e, g->only_type)) return;
    for (uint16_t t = 0; t < e->n_types; t++) {
        if (g->only_type && e->types[t] != g->only_type) continue;
        ops_name_t *ti = ops_names_get(&d->types, e->types[t]);
        ti->count++;
        for (uint16_t i = 0; i < e->n_attrs; i++)
            if (!g->only_attr || e->attrs[i].name == g->only_attr) name_add_rel(d->types.a, ti, e->attrs[i].name);
    }
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        if (g->only_attr && at->name != g->only_attr) continue;
        ops_name_t *ai = ops_names_get(&d->attrs, at->name);
        ai->count++;
        ai->kinds |= 1u << at->kind;
        for (uint16_t t = 0; t < e->n_types; t++) name_add_rel(d->attrs.a, ai, e->types[t]);
    }
}

bool ops_discover(const ops_req_t *rq, const char *only_type, const char *only_attr, const char *name,
                  ops_discovery_t *d, problem_t *p)
{
    gather_t g = {.d = d, .only_type = only_type, .only_attr = only_attr};
    memset(d, 0, sizeof *d);
    d->types.a = d->attrs.a = rq->arena;
    if (!store_foreach(rq->store, rq->tenant, NULL, gather_one, &g, p)) return false;
    if (only_type && d->types.n == 0) return problem_set(p, PB_RESOURCE_NOT_FOUND, "no entity of type %s", name);
    if (only_attr && d->attrs.n == 0)
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no entity has an attribute %s", name);
    return true;
}
