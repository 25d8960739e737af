/*
 * query.c - Query Entities (5.7.2): one page of the entities matching a
 * filter, or several EntitySelectors (an entity matches one of them), in
 * creation order, with limit/offset (4.12) and the count (4.13).
 *
 * One store call: the selectors go to the store in the filter (f.sel), so
 * that it walks the id or type index for them and counts exactly. One entity
 * more than the page is fetched so that the result knows whether a next
 * page exists without counting.
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

bool ops_query(const ops_req_t *rq, const ops_query_t *qy, ops_page_t *pg, problem_t *p)
{
    memset(pg, 0, sizeof *pg);
    if (!ops_query_check(qy, p)) return false;
    size_t          want = qy->limit ? qy->limit + 1 : 0;
    store_page_t    sp;
    entity_filter_t f = qy->f;
    f.sel = qy->sel;     /* the store walks its indexes for the selectors (ids, type lists) */
    f.n_sel = qy->nsel;
    if (!store_query(rq->store, rq->tenant, &f, qy->offset, want, qy->count, rq->arena, &sp, p)) return false;
    pg->items = sp.items;
    pg->n = sp.n;
    pg->count = sp.count;
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
