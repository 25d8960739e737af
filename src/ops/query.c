/*
 * query.c - Query Entities (5.7.2): one page of the entities matching a
 * filter, or several EntitySelectors (an entity matches one of them), in
 * creation order, with limit/offset (4.12) and the count (4.13).
 *
 * One entity more than the page is fetched so that the result knows whether
 * a next page exists without counting.
 */
#include "ops.h"

#include <string.h>

bool ops_query_check(const ops_query_t *qy, problem_t *p)
{
    if (qy->limit > (size_t)cr_config.max_limit)
        return problem_set(p, PB_TOO_MANY_RESULTS, "limit %zu is above the maximum page size %d (--maxLimit)",
                           qy->limit, cr_config.max_limit);
    if (qy->limit == 0 && !qy->count)
        return problem_set(p, PB_BAD_REQUEST_DATA, "limit=0 is only allowed together with count=true (6.3.10)");
    return true;
}

/* Several selectors: the store is walked whole and each entity tested here. */
typedef struct collect {
    const ops_query_t *qy;
    size_t             limit;
    arena_t           *a;
    cr_entity_t      **items;
    size_t             n, cap, skipped, matched;
} collect_t;

static void collect_one(void *ud, const cr_entity_t *e)
{
    collect_t *c = ud;
    bool       any = false;
    for (size_t i = 0; i < c->qy->nsel && !any; i++) any = filter_match(&c->qy->sel[i], e);
    if (!any || !filter_match(&c->qy->f, e)) return;
    c->matched++;
    if (c->skipped < c->qy->offset) { c->skipped++; return; }
    if (c->n >= c->limit) return;
    if (c->n == c->cap) {
        size_t        ncap = c->cap ? c->cap * 2 : 32;
        cr_entity_t **ni = arena_alloc(c->a, ncap * sizeof *ni);
        if (c->n) memcpy(ni, c->items, c->n * sizeof *ni);
        c->items = ni;
        c->cap = ncap;
    }
    entity_ref((cr_entity_t *)e);
    c->items[c->n++] = (cr_entity_t *)e;
}

bool ops_query(const ops_req_t *rq, const ops_query_t *qy, ops_page_t *pg, problem_t *p)
{
    memset(pg, 0, sizeof *pg);
    if (!ops_query_check(qy, p)) return false;
    size_t want = qy->limit ? qy->limit + 1 : 0;
    if (qy->nsel <= 1) {
        store_page_t sp;
        entity_filter_t f = qy->f;
        if (qy->nsel == 1) {   /* one selector: let the store use its indexes */
            f.ids = qy->sel[0].ids; f.n_ids = qy->sel[0].n_ids;
            f.id_pattern = qy->sel[0].id_pattern; f.types = qy->sel[0].types;
        }
        if (!store_query(rq->store, rq->tenant, &f, qy->offset, want, qy->count, rq->arena, &sp, p)) return false;
        pg->items = sp.items;
        pg->n = sp.n;
        pg->count = sp.count;
    } else {
        collect_t c = {.qy = qy, .limit = want, .a = rq->arena};
        if (!store_foreach(rq->store, rq->tenant, NULL, collect_one, &c, p)) return false;
        pg->items = c.items;
        pg->n = c.n;
        pg->count = c.matched;
    }
    pg->more = pg->n > qy->limit;
    if (pg->more) entity_unref(pg->items[--pg->n]);
    return true;
}

void ops_page_release(ops_page_t *pg)
{
    store_page_t sp = {.items = pg->items, .n = pg->n};
    store_page_release(&sp);
    pg->n = 0;
}
