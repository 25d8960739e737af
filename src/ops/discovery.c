/*
 * discovery.c - what the entities of a tenant say of their types and
 * attributes (5.7.5-5.7.10: EntityTypeList, EntityType, EntityTypeInfo,
 * AttributeList, Attribute) as insertion-ordered sets of interned names in
 * the request arena. The lists of names come from the store's type and
 * attribute indexes (O(names)); details and the named forms gather from the
 * entities (store_foreach, in chunks of the read lock): /types/{type}
 * through the type index, /attributes/{attr} over the entities that have
 * it, details=true over all.
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

void ops_name_add_rel(arena_t *a, ops_name_t *ni, const char *rel)
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

/* One entity: its types with their attributes, its attributes with their
 * types (details, /types/{type}, /attributes/{attr}). */
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
            if (!g->only_attr || e->attrs[i].name == g->only_attr) ops_name_add_rel(d->types.a, ti, e->attrs[i].name);
    }
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        if (g->only_attr && at->name != g->only_attr) continue;
        ops_name_t *ai = ops_names_get(&d->attrs, at->name);
        ai->count++;
        ai->kinds |= 1u << at->kind;
        for (uint16_t t = 0; t < e->n_types; t++) ops_name_add_rel(d->attrs.a, ai, e->types[t]);
    }
}

/* The names alone (GET /types, GET /attributes): from the store's indexes. */
static void name_one(void *ud, const char *name)
{
    ops_names_get(ud, name);
}

bool ops_discover(const ops_req_t *rq, bool types, const char *name, bool details, ops_discovery_t *d,
                  problem_t *p)
{
    memset(d, 0, sizeof *d);
    d->types.a = d->attrs.a = rq->arena;
    if (!name && !details)
        return types ? store_types(rq->store, rq->tenant, name_one, &d->types, p)
                     : store_attributes(rq->store, rq->tenant, name_one, &d->attrs, p);

    /* a name of the path: a read interns nothing (an unknown name matches no entity) */
    const char     *only = name ? ld_expand_lookup(rq->ctx, name, rq->arena) : NULL;
    gather_t        g = {.d = d, .only_type = types ? only : NULL, .only_attr = types ? NULL : only};
    entity_filter_t f = {0};
    if (g.only_attr) {          /* entities that have the attribute */
        f.attrs = &g.only_attr;
        f.n_attrs = 1;
    } else if (g.only_type && !strpbrk(name, ",;|()")) {   /* the type index (a name, not a selection) */
        problem_t ignored;
        f.types = typesel_parse(rq->arena, name, rq->ctx, &ignored);
    }
    if (!store_foreach(rq->store, rq->tenant, only ? &f : NULL, gather_one, &g, p)) return false;
    if (g.only_type && d->types.n == 0) return problem_set(p, PB_RESOURCE_NOT_FOUND, "no entity of type %s", name);
    if (g.only_attr && d->attrs.n == 0)
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no entity has an attribute %s", name);
    return true;
}
