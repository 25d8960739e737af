/*
 * join.c - Linked Entity retrieval (4.5.23): the entities targeted by the
 * Relationships of the entities a retrieve or a query matched, fetched for
 * the renderer (inline, 4.5.23.2) or the flat answer (4.5.23.3).
 *
 * Breadth first from the roots, one hop per level up to joinLevel: the new
 * targets of a level (each id once; the roots, the ones already seen and
 * containedBy are skipped) are fetched with ONE store call (a query by ids,
 * which reads them under one lock), so a page of 20 entities each linking
 * one costs one store call, not 20. Each id is looked up once in an index
 * (open addressing over the ids) that the renderer then uses to find a
 * target; entities not held here stay in the index as "not held". The
 * references are released with ops_linked_release, after rendering.
 *
 * Which relationships are followed: for a flat answer only the ones the
 * projection and the datasetId selection keep (a relationship not shown adds
 * nothing to the array); for
 * inline ones, all of them, because the projection of an entity depends on
 * the path it is reached by while each entity is fetched once (the renderer
 * picks what it shows).
 */
#include "ops.h"

#include <string.h>


static size_t slot_of(const ops_linked_t *l, const char *id)
{
    size_t mask = l->nslot - 1;
    size_t i    = (size_t)cr_hash(id, strlen(id)) & mask;

    while (l->slot_id[i] && strcmp(l->slot_id[i], id) != 0)
        i = (i + 1) & mask;
    return i;
}

static void grow(ops_linked_t *l)
{
    const char        **oid = l->slot_id;
    const cr_entity_t **oe  = l->slot_e;
    size_t              on  = l->nslot;

    l->nslot   = on ? on * 2 : 64;
    l->slot_id = arena_calloc(l->a, l->nslot * sizeof *l->slot_id);
    l->slot_e  = arena_calloc(l->a, l->nslot * sizeof *l->slot_e);
    for (size_t i = 0; i < on; i++) {
        if (!oid[i])
            continue;
        size_t k = slot_of(l, oid[i]);
        l->slot_id[k] = oid[i];
        l->slot_e[k]  = oe[i];
    }
}

/* Adds id (unknown yet) to the index; false when it was there. */
static bool mark(ops_linked_t *l, const char *id, const cr_entity_t *e)
{
    if ((l->used + 1) * 2 > l->nslot)
        grow(l);
    size_t k = slot_of(l, id);
    if (l->slot_id[k])
        return false;
    l->slot_id[k] = id;
    l->slot_e[k]  = e;
    l->used++;
    return true;
}

const cr_entity_t *ops_linked_find(const void *ud, const char *id)
{
    const ops_linked_t *l = ud;

    if (!l->nslot)
        return NULL;
    size_t k = slot_of(l, id);
    return l->slot_id[k] ? l->slot_e[k] : NULL;
}

/* One level's new targets, with the projection each was first reached with. */
typedef struct batch {
    const char         **ids;
    const projection_t **pick, **omit;
    size_t               n, cap;
} batch_t;

/* An arena array of n elements moved to one of ncap. */
static void *regrow(arena_t *a, const void *old, size_t n, size_t ncap, size_t size)
{
    void *nv = arena_alloc(a, ncap * size);
    if (n)
        memcpy(nv, old, n * size);
    return nv;
}

static void batch_add(arena_t *a, batch_t *b, const char *id, const projection_t *pk, const projection_t *om)
{
    if (b->n == b->cap) {
        b->cap  = b->cap ? b->cap * 2 : 32;
        b->ids  = regrow(a, b->ids, b->n, b->cap, sizeof *b->ids);
        b->pick = regrow(a, b->pick, b->n, b->cap, sizeof *b->pick);
        b->omit = regrow(a, b->omit, b->n, b->cap, sizeof *b->omit);
    }
    b->ids[b->n] = id;
    b->pick[b->n] = pk;
    b->omit[b->n] = om;
    b->n++;
}

static void target(ops_linked_t *l, batch_t *b, const json_t *uri, const projection_t *pk,
                   const projection_t *om)
{
    if (json_is_string(uri) && mark(l, uri->str, NULL))
        batch_add(l->a, b, uri->str, pk, om);
}

/* The targets of e's relationships not seen yet go into b. */
static void targets_of(ops_linked_t *l, batch_t *b, const cr_entity_t *e, const projection_t *pk,
                       const projection_t *om, const ops_join_t *j)
{
    for (size_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *a = &e->attrs[i];

        if (a->kind != ATTR_RELATIONSHIP && a->kind != ATTR_LISTRELATIONSHIP)
            continue;
        if (j->flat && (!projection_keeps(pk, a->name, false) || !projection_keeps(om, a->name, true) ||
                        !attr_instance_selected(a, j->dataset_ids, j->n_dataset_ids)))
            continue;
        const projection_t *spk = projection_link(pk, a->name, false);
        const projection_t *som = projection_link(om, a->name, true);
        if (!json_is_array(a->value)) {
            target(l, b, a->value, spk, som);
            continue;
        }
        json_foreach(el, a->value)
            target(l, b, a->kind == ATTR_LISTRELATIONSHIP && json_is_object(el) ? json_get(el, "object") : el,
                   spk, som);
    }
}

static void push(ops_linked_t *l, cr_entity_t *e, const projection_t *pk, const projection_t *om)
{
    if (l->n == l->cap) {
        l->cap   = l->cap ? l->cap * 2 : 32;
        l->items = regrow(l->a, l->items, l->n, l->cap, sizeof *l->items);
        l->pick  = regrow(l->a, l->pick, l->n, l->cap, sizeof *l->pick);
        l->omit  = regrow(l->a, l->omit, l->n, l->cap, sizeof *l->omit);
    }
    l->items[l->n] = e;
    l->pick[l->n] = pk;
    l->omit[l->n] = om;
    l->n++;
}

/* Fetches the batch with one store call; the found ones join l, in batch order. */
static bool fetch(const ops_req_t *rq, ops_linked_t *l, const batch_t *b, problem_t *p)
{
    store_page_t    sp;
    entity_filter_t f = {.ids = b->ids, .n_ids = b->n};

    if (!store_query(rq->store, rq->tenant, &f, 0, b->n, false, rq->arena, &sp, p))
        return false;
    for (size_t i = 0; i < sp.n; i++)
        l->slot_e[slot_of(l, sp.items[i]->id)] = sp.items[i];
    for (size_t i = 0; i < b->n; i++) {
        cr_entity_t *e = (cr_entity_t *)ops_linked_find(l, b->ids[i]);
        if (e)
            push(l, e, b->pick[i], b->omit[i]);
    }
    if (l->n > OPS_JOIN_MAX_ENTITIES)
        return problem_set(p, PB_TOO_MANY_RESULTS, "the linked entities of this answer exceed %d (4.5.23)",
                           OPS_JOIN_MAX_ENTITIES);
    return true;
}

bool ops_join_fetch(const ops_req_t *rq, cr_entity_t *const *roots, size_t n_roots, const ops_join_t *j,
                    ops_linked_t *l, problem_t *p)
{
    memset(l, 0, sizeof *l);
    l->a = rq->arena;
    for (size_t i = 0; i < j->n_contained_by; i++)
        mark(l, j->contained_by[i], NULL);
    for (size_t i = 0; i < n_roots; i++)
        mark(l, roots[i]->id, roots[i]);

    size_t from = 0, to = 0;        /* l->items[from..to): the last level fetched */
    for (unsigned level = 1; level <= j->level; level++) {
        batch_t b = {0};

        if (level == 1) {
            for (size_t i = 0; i < n_roots; i++)
                targets_of(l, &b, roots[i], j->pick, j->omit, j);
        } else {
            for (size_t i = from; i < to; i++)
                targets_of(l, &b, l->items[i], l->pick[i], l->omit[i], j);
        }
        if (!b.n)
            break;
        from = l->n;
        if (!fetch(rq, l, &b, p)) {
            ops_linked_release(l);
            return false;
        }
        to = l->n;
    }
    return true;
}

void ops_linked_release(ops_linked_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        entity_unref(l->items[i]);
    l->n = 0;
}
