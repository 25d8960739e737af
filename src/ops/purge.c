/*
 * purge.c - Purge Entities (5.6.21, DELETE /entities of 6.4.3.3): delete
 * every entity matching a filter, or with drop/keep delete from each of them
 * only some attributes (each entity changes atomically, as a merge of
 * NGSI-LD Nulls).
 */
#include "ops.h"

#include <string.h>

static bool in_list(const char *name, const char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) if (v[i] == name) return true;
    return false;
}

/* The Nulls that delete from e the attributes listed (keep false) or all but
 * those (keep true); 0 when there is nothing to delete. */
static uint16_t purge_nulls(arena_t *a, const cr_entity_t *e, const char **names, size_t n, bool keep,
                            cr_attr_t **out)
{
    cr_attr_t *nulls = arena_calloc(a, (e->n_attrs + 1) * sizeof *nulls);
    uint16_t   k = 0;
    for (uint16_t j = 0; j < e->n_attrs; j++) {
        if (in_list(e->attrs[j].name, names, n) == keep) continue;
        nulls[k].name = e->attrs[j].name;
        nulls[k].dataset_id = e->attrs[j].dataset_id;
        nulls[k].is_null = 1;
        nulls[k].observed_at = CR_NO_TIME;
        k++;
    }
    *out = nulls;
    return k;
}

static bool purge_attributes(const ops_req_t *rq, const entity_filter_t *f, const char **names, size_t n,
                             bool keep, problem_t *p)
{
    store_page_t pg;
    bool         ok = true;
    if (!store_query(rq->store, rq->tenant, f, 0, SIZE_MAX, false, rq->arena, &pg, p)) return false;
    for (size_t i = 0; i < pg.n && ok; i++) {
        const cr_entity_t *e = pg.items[i];
        cr_attr_t         *nulls;
        uint16_t           k = purge_nulls(rq->arena, e, names, n, keep, &nulls);
        if (!k) continue;
        cr_entity_t patch = {.id = e->id, .attrs = nulls, .n_attrs = k};
        problem_t   ep = {0};
        if (!store_modify(rq->store, rq->tenant, e->id, OP_MERGE_ENTITY, &patch, &(op_args_t){0}, NULL, rq->arena,
                          &ep) && ep.kind != PB_RESOURCE_NOT_FOUND) {   /* deleted meanwhile: nothing to purge */
            *p = ep;
            ok = false;
        }
    }
    store_page_release(&pg);
    return ok;
}

bool ops_purge(const ops_req_t *rq, const entity_filter_t *f, const char **names, size_t n_names, bool keep,
               size_t *deleted, problem_t *p)
{
    *deleted = 0;
    if (n_names) return purge_attributes(rq, f, names, n_names, keep, p);
    bool ok = store_purge(rq->store, rq->tenant, f, deleted, p);
    if (ok && history_default)
        history_sync(history_default);       /* the chunks' history as durable as their deletes */
    return ok;
}
