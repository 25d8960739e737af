/*
 * query.c - Query Entities (5.7.2): one page of the entities matching a
 * filter, or several EntitySelectors (an entity matches one of them), in
 * creation order or in the order of orderBy (4.23, f.order_by: the store
 * keeps the best offset+limit), with limit/offset (4.12) and the count
 * (4.13).
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

/* q terms into linked entities (4.9, rel{...}): each is resolved before the
 * query, innermost first, into the ids of the entities its inner expression
 * matches (one store scan each; a type hint walks the type index), so that
 * the query itself tests ids while it holds the store lock. */
#define OPS_Q_MAX_LINKS   Q_MAX_LINKS
#define OPS_Q_MAX_TARGETS 100000

typedef struct link_ids {
    arena_t     *a;
    const char **ids;
    size_t       n, cap;
    bool         over;
} link_ids_t;

static void collect_id(void *ud, const cr_entity_t *e)
{
    link_ids_t *c = ud;
    if (c->n == OPS_Q_MAX_TARGETS) {
        c->over = true;
        return;
    }
    if (c->n == c->cap) {
        size_t       ncap = c->cap ? c->cap * 2 : 64;
        const char **nv = arena_alloc(c->a, ncap * sizeof *nv);
        if (c->n) memcpy(nv, c->ids, c->n * sizeof *nv);
        c->ids = nv;
        c->cap = ncap;
    }
    c->ids[c->n++] = arena_strdup(c->a, e->id);
}

bool ops_q_resolve(const ops_req_t *rq, q_expr_t *q, problem_t *p)
{
    q_expr_t *links[OPS_Q_MAX_LINKS];
    size_t    n = q_links(q, links, OPS_Q_MAX_LINKS);

    if (n > OPS_Q_MAX_LINKS)
        return problem_set(p, PB_TOO_COMPLEX_QUERY, "q has more than %d terms into linked entities", OPS_Q_MAX_LINKS);
    for (size_t i = 0; i < n; i++) {
        q_link_view_t   v = {0};
        link_ids_t      c = {.a = rq->arena};
        entity_filter_t f = {0};
        q_link_get(links[i], &v);
        f.q = (q_expr_t *)v.inner;
        f.types = (typesel_t *)v.tsel;      /* parsed with the q, in its @context */
        if (!store_foreach(rq->store, rq->tenant, &f, collect_id, &c, p)) return false;
        if (c.over)
            return problem_set(p, PB_TOO_MANY_RESULTS, "more than %d entities match a q term into linked entities "
                               "(4.9): narrow it with an entity type hint, rel{Type:attr}", OPS_Q_MAX_TARGETS);
        q_link_resolve(links[i], c.ids, c.n);
    }
    return true;
}

bool ops_query(const ops_req_t *rq, const ops_query_t *qy, ops_page_t *pg, problem_t *p)
{
    memset(pg, 0, sizeof *pg);
    if (!ops_query_check(qy, p)) return false;
    if (q_link_depth(qy->f.q) && !ops_q_resolve(rq, qy->f.q, p)) return false;
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
