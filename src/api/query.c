/*
 * query.c - Query Entities (5.7.2) as GET /entities (6.4.3.2) and as POST
 * /entityOperations/query (6.23, a Query body of 5.2.23), and Purge Entities
 * (DELETE /entities, 6.4.3.3 / 5.6.21): the HTTP binding of ops/query.c and
 * ops/purge.c.
 *
 * The query parameters (or the Query body) become one ops_query_t, compiled
 * once per request (q, idPattern, geometry, type selection, scope); the
 * operation returns a page of references, rendered here outside the store
 * lock. Pagination (4.12, 6.3.10): limit/offset with "next"/"prev" Link
 * headers; count=true adds NGSILD-Results-Count.
 */
#include "api.h"

#include "../fwd/fwd.h"
#include "../history/history.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool set_page(ops_query_t *qy, const char *limit, const char *offset, problem_t *p)
{
    qy->limit = (size_t)cr_config.default_limit;
    qy->offset = 0;
    if (limit && !api_uint_param(limit, "limit", &qy->limit, p)) return false;
    if (offset && !api_uint_param(offset, "offset", &qy->offset, p)) return false;
    return ops_query_check(qy, p);
}

/* orderBy, collation, orderFrom, orderGeometry (4.23, Table 6.4.3.2-1).
 * 5.7.2.4 refuses orderBy for a query that is not limited to the local
 * scope because it would be forwarded; no registration exists here yet, so
 * every query is answered locally and orderBy is always honoured (the
 * refusal belongs with forwarding, doc/api.md). */
static bool set_order(request_t *r, const ld_context_t *ctx, const order_params_t *op, entity_filter_t *f,
                      problem_t *p)
{
    if (!op->order_by) {
        if (op->collation || op->from || op->geometry)
            return problem_set(p, PB_BAD_REQUEST_DATA, "collation, orderFrom and orderGeometry go with orderBy (4.23)");
        return true;
    }
    return (f->order_by = order_parse(r->arena, op, ctx, p)) != NULL;
}


/* expandValues and jsonKeys (4.9, Table 6.4.3.2-1, 5.2.23): comma-separated
 * attribute names that change how q compares their values. */
static bool value_options(request_t *r, const ld_context_t *ctx, q_expr_t *q, const char *expand,
                          const char *json_keys, problem_t *p)
{
    const char **ev = NULL, **jk = NULL;
    size_t       nev = 0, njk = 0;
    if (expand && !api_name_list(r, ctx, expand, &ev, &nev, false, p)) return false;
    if (json_keys && !api_name_list(r, ctx, json_keys, &jk, &njk, false, p)) return false;
    q_value_options(q, r->arena, ctx, ev, nev, jk, njk);
    return true;
}

/* GET /entities and DELETE /entities parameters -> query. */
static bool query_from_params(request_t *r, const ld_context_t *ctx, ops_query_t *qy, bool purge, problem_t *p)
{
    entity_filter_t *f = &qy->f;
    const char *type = req_param(r, "type");
    const char *id = req_param(r, "id");
    const char *idp = req_param(r, "idPattern");
    const char *q = req_param(r, "q");
    const char *scope = req_param(r, "scopeQ");
    const char *attrs = purge ? NULL : req_param(r, "attrs");
    const char *local = req_param(r, "local");
    geoq_params_t gp = {
        .georel = req_param(r, "georel"),
        .geometry = req_param(r, "geometry"),
        .coordinates = req_param(r, "coordinates"),
        .geoproperty = req_param(r, "geoproperty"),
    };
    (void)req_param(r, "csf");   /* no context sources are registered here: nothing to filter */

    if (local && strcmp(local, "true") && strcmp(local, "false"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "local must be true or false");
    bool is_local = local && !strcmp(local, "true");
    bool has_geo = gp.georel || gp.geometry || gp.coordinates;
    if (!purge && !type && !attrs && !q && !has_geo && !is_local)
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "a query needs at least one of type, attrs, q or georel/geometry/coordinates "
                           "(or local=true) (6.4.3.2)");
    if (purge && !type && !id && !idp && !q && !has_geo && !scope && !is_local)
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "purging needs at least one of type, id, idPattern, q, scopeQ, a geo-query or "
                           "local=true (5.6.21.4)");
    if (purge && type && !strcmp(type, "*") && local && !is_local)
        return problem_set(p, PB_BAD_REQUEST_DATA, "type=* purges locally: local=false is not allowed with it "
                           "(Table 6.4.3.3-1)");

    if (type && strcmp(type, "*") && !(f->types = typesel_parse(r->arena, type, ctx, p))) return false;
    if (id && !api_id_list(r, id, &f->ids, &f->n_ids, p)) return false;
    if (idp && !(f->id_pattern = filter_compile_pattern(r->arena, idp, p))) return false;
    if (q && !(f->q = q_parse(r->arena, q, ctx, p))) return false;
    if (purge && q_link_depth(f->q))
        return problem_set(p, PB_BAD_REQUEST_DATA, "a purge has no Linked Entity retrieval: q cannot reach into "
                           "linked entities (rel{...}) (6.4.3.3)");
    if (!purge && !value_options(r, ctx, f->q, req_param(r, "expandValues"), req_param(r, "jsonKeys"), p))
        return false;
    if (scope && !(f->scope = scopeq_parse(r->arena, scope, p))) return false;
    if (has_geo && !(f->geo = geoq_parse(r->arena, &gp, ctx, p))) return false;
    if (!has_geo && gp.geoproperty)
        return problem_set(p, PB_BAD_REQUEST_DATA, "geoproperty needs georel, geometry and coordinates");
    if (attrs && *attrs && !api_name_list(r, ctx, attrs, &f->attrs, &f->n_attrs, false, p)) return false;
    if (!purge) {
        /* one pass over the query string, not a lookup per name (the query fast path) */
        order_params_t op = {0};
        for (int i = 0; i < r->nparams; i++) {
            const char *k = r->params[i].key, **slot = NULL;
            if (k[0] == 'o' && !strcmp(k, "orderBy")) slot = &op.order_by;
            else if (k[0] == 'o' && !strcmp(k, "orderFrom")) slot = &op.from;
            else if (k[0] == 'o' && !strcmp(k, "orderGeometry")) slot = &op.geometry;
            else if (k[0] == 'c' && !strcmp(k, "collation")) slot = &op.collation;
            if (slot && !*slot) {       /* the first one, as req_param() */
                *slot = r->params[i].value;
                r->params_used |= 1u << i;
            }
        }
        if (!set_order(r, ctx, &op, f, p)) return false;
    }
    return true;
}

static bool answer_page(request_t *r, const ops_query_t *qy, ops_page_t *pg, const ld_context_t *ctx,
                        api_view_t *v, int status, problem_t *p)
{
    api_view_context(r, ctx, v);
    if (!api_render(r, ctx, v, pg->items, pg->n, true, p)) {
        ops_page_release(pg);
        return false;
    }
    if (qy->count) {
        char *n = arena_printf(r->arena, "%zu", pg->count);
        reply_header(r, "NGSILD-Results-Count", n);
    }
    /* an entity map's page may be short (removed entities keep their slots): the next one is a limit on */
    if (pg->more) api_page_link(r, "next", qy->offset + (pg->n < qy->limit ? qy->limit : pg->n), qy->limit, v->ctype);
    if (qy->offset > 0 && qy->limit)
        api_page_link(r, "prev", qy->offset > qy->limit ? qy->offset - qy->limit : 0, qy->limit, v->ctype);
    ops_page_release(pg);
    reply_body(r, status, v->ctype);
    return true;
}

/* 5.7.2 distributed (GET /entities): the local matches and the registered
 * sources' answers (each asked for offset + limit entities), merged (4.5.5),
 * local order first, then paginated. */
/* The forwarded parameters of a Query body (5.2.23): its EntitySelectors'
 * types, ids and idPattern, q, scopeQ, lang, geoQ and attrs, as the query
 * string would carry them. */
static size_t body_params(request_t *r, const json_t *body, fwd_param_t *prm)
{
    size_t        np = 0;
    const json_t *ents = json_get(body, "entities"), *v;
    sbuf_t        types, ids;
    sb_init(&types, r->arena, 64);
    sb_init(&ids, r->arena, 64);
    const char *pat = NULL;
    for (const json_t *e = json_is_array(ents) ? ents->child : NULL; e; e = e->next) {
        const json_t *t = json_get(e, "type"), *i = json_get(e, "id"), *ip = json_get(e, "idPattern");
        bool seen = false;
        for (const char *s = types.len ? types.p : NULL; s && !seen;) {
            const char *comma = strchr(s, ',');
            size_t      l = comma ? (size_t)(comma - s) : strlen(s);
            seen = json_is_string(t) && l == t->len && !memcmp(s, t->str, l);
            s = comma ? comma + 1 : NULL;
        }
        if (json_is_string(t) && !seen) {
            if (types.len) sb_addc(&types, ',');
            sb_adds(&types, t->str);
        }
        if (json_is_string(i)) {
            if (ids.len) sb_addc(&ids, ',');
            sb_adds(&ids, i->str);
        }
        if (json_is_string(ip)) pat = ip->str;
    }
    if (types.len) prm[np++] = (fwd_param_t){"type", types.p};
    if (ids.len) prm[np++] = (fwd_param_t){"id", ids.p};
    if (pat) prm[np++] = (fwd_param_t){"idPattern", pat};
    static const char *const plain[] = {"q", "scopeQ", "lang", NULL};
    for (const char *const *k = plain; *k; k++)
        if (json_is_string(v = json_get(body, *k))) prm[np++] = (fwd_param_t){*k, v->str};
    if (json_is_object(v = json_get(body, "geoQ"))) {
        const json_t *rel = json_get(v, "georel"), *g = json_get(v, "geometry"), *c = json_get(v, "coordinates"),
                     *gp = json_get(v, "geoproperty");
        if (json_is_string(rel) && json_is_string(g) && c) {
            sbuf_t cs;
            sb_init(&cs, r->arena, 128);
            if (json_is_string(c)) sb_adds(&cs, c->str);
            else json_render(&cs, c);
            prm[np++] = (fwd_param_t){"georel", rel->str};
            prm[np++] = (fwd_param_t){"geometry", g->str};
            prm[np++] = (fwd_param_t){"coordinates", cs.p};
            if (json_is_string(gp)) prm[np++] = (fwd_param_t){"geoproperty", gp->str};
        }
    }
    return np;
}

/* What a distributed query forwards (prm, at most 16) and how it matches registrations (m). */
size_t api_fwd_selection(request_t *r, const ops_query_t *qy, const json_t *body, fwd_param_t *prm, reg_query_t *m)
{
    static const char *const fwd_keys[] = {"type", "id", "idPattern", "q", "georel", "geometry", "coordinates",
                                           "geoproperty", "scopeQ", "lang", "datasetId", NULL};
    size_t np = body ? body_params(r, body, prm) : 0;
    for (const char *const *k = fwd_keys; *k && !body; k++) {
        const char *val = req_param(r, *k);
        if (val) prm[np++] = (fwd_param_t){*k, val};
    }
    *m = (reg_query_t){.types = qy->f.types, .ids = qy->f.ids, .n_ids = qy->f.n_ids, .id_pattern = qy->f.id_pattern,
                       .attrs = qy->f.attrs, .n_attrs = qy->f.n_attrs};
    if (qy->f.n_sel == 1) {                    /* a Query body's one EntitySelector */
        m->types = qy->f.sel[0].types;
        m->ids = qy->f.sel[0].id ? &qy->f.sel[0].id : NULL;
        m->n_ids = qy->f.sel[0].id ? 1 : 0;
        m->id_pattern = qy->f.sel[0].id_pattern;
    }
    return np;
}

/* The local part of a distributed query: qy's first `limit` matches (ids: among those only), none in a
 * tenant that does not exist here (the sources may have it). */
static bool local_part(const ops_req_t *rq, const ops_query_t *qy, const char **ids, size_t n_ids, size_t limit,
                       ops_page_t *pg, problem_t *p)
{
    problem_t   q = {0};
    ops_query_t lq = *qy;
    if (ids) {
        lq.f.ids = ids;
        lq.f.n_ids = n_ids;
    }
    lq.offset = 0;
    lq.limit = limit;
    lq.count = false;
    *pg = (ops_page_t){0};
    if (ops_query(rq, &lq, pg, &q)) return true;
    *pg = (ops_page_t){0};
    if (q.kind == PB_NONEXISTENT_TENANT) return true;
    *p = q;
    return false;
}

static ops_page_t slice(cr_entity_t **items, size_t n, size_t offset, size_t limit);

/* ------------------------------------------------ splitEntities (5.2.23, Table 6.4.3.2-1)
 * With splitEntities an entity may be split over this broker and its
 * sources: a fragment alone cannot say whether the entity matches q, geoQ,
 * scopeQ or attrs. Each place is then asked for the selection alone (ids,
 * idPattern, types: 4.17 selects entities by them), the fragments merged
 * (4.5.5), and the filters evaluated on the merged entity (filter_match);
 * without it each source applies the filters to its own part. At most
 * --maxLimit entities of the selection are taken from each place (the
 * bound of a distributed query), so a selection larger than that with
 * filters matching few may answer fewer than match. Never with local=true
 * (nothing is forwarded). */
static bool split_of(request_t *r, const json_t *body, bool *split, problem_t *p)
{
    *split = cr_config.split_entities;
    if (body) {                                /* a Query's member (checked a boolean by query_from_body) */
        const json_t *s = json_get(body, "splitEntities");
        if (s) *split = s->type == JSON_TRUE;
        return true;
    }
    const char *v = req_param(r, "splitEntities");
    if (!v) return true;
    if (strcmp(v, "true") && strcmp(v, "false"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "splitEntities must be true or false (Table 6.4.3.2-1), not '%.50s'", v);
    *split = v[0] == 't';
    return true;
}

/* qy without the filters a fragment cannot evaluate (its selection only). */
static ops_query_t split_selection(const ops_query_t *qy)
{
    ops_query_t sel = *qy;
    sel.f.q = NULL;
    sel.f.geo = NULL;
    sel.f.scope = NULL;
    sel.f.attrs = NULL;
    sel.f.n_attrs = 0;
    return sel;
}

/* The forwarded parameters without those filters. */
static size_t split_params(fwd_param_t *prm, size_t np)
{
    static const char *const drop[] = {"q", "georel", "geometry", "coordinates", "geoproperty", "scopeQ", NULL};
    size_t k = 0;
    for (size_t i = 0; i < np; i++) {
        bool d = false;
        for (const char *const *x = drop; *x && !d; x++) d = !strcmp(prm[i].key, *x);
        if (!d) prm[k++] = prm[i];
    }
    return k;
}

/* Keeps the merged entities that match qy's filters whole (the others released), in order; origins (or
 * NULL) compacted alike. The number kept. */
static size_t split_filter(const ops_query_t *qy, cr_entity_t **items, uint64_t *origins, size_t n)
{
    entity_filter_t f = qy->f;
    f.sel = qy->sel;
    f.n_sel = qy->nsel;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!filter_match(&f, items[i])) {
            entity_unref(items[i]);
            continue;
        }
        if (origins) origins[k] = origins[i];
        items[k++] = items[i];
    }
    return k;
}

/* split: each place asked for the selection alone (--maxLimit entities), the filters applied to the
 * merged entities (splitEntities, above). */
static bool distributed_page(request_t *r, const ops_req_t *rq, ops_query_t *qy, const ld_context_t *ctx,
                             api_view_t *v, const json_t *body, bool split, problem_t *p)
{
    size_t      want = qy->offset + qy->limit;
    size_t      cap = (size_t)cr_config.max_limit;
    if (!want || split) want = cap;            /* limit=0&count=true: count what the sources answer */
    size_t      lim = want < cap ? want : cap;
    ops_query_t sel = split ? split_selection(qy) : *qy;
    ops_page_t  pg;
    if (split && q_link_depth(qy->f.q) && !ops_q_resolve(rq, qy->f.q, p)) return false;
    if (!local_part(rq, &sel, NULL, 0, lim, &pg, p)) return false;
    fwd_param_t prm[16];
    reg_query_t m;
    size_t      np = api_fwd_selection(r, &sel, body, prm, &m);
    fwd_in_t    in;
    fwd_out_t   out;
    if (split) np = split_params(prm, np);
    api_fwd_in(r, ctx, &in);
    if (!fwd_query(&in, &m, prm, np, lim, pg.items, pg.n, &out, p)) {
        ops_page_release(&pg);
        return false;
    }
    if (out.warning) reply_header(r, "NGSILD-Warning", out.warning);
    ops_page_release(&pg);
    if (!out.forwarded) {                      /* nothing matched: the local page as asked */
        if (!ops_query(rq, qy, &pg, p)) return false;
        return answer_page(r, qy, &pg, ctx, v, 200, p);
    }
    size_t     n = split ? split_filter(qy, out.items, NULL, out.n) : out.n;
    ops_page_t merged = slice(out.items, n, qy->offset, qy->limit);
    return answer_page(r, qy, &merged, ctx, v, 200, p);
}

/* ------------------------------------------------ entity maps (4.3.6.7, 5.5.14)
 * entityMap=true makes a map of the whole result from the first page's
 * answers (each source asked once, for --maxLimit entities) and names it in
 * NGSILD-EntityMap (201); a request that names one in NGSILD-EntityMap gets
 * the map's slots [offset, offset + limit): the local ones read here by id,
 * each source asked only for its ids on the page (fwd_query_map), the
 * filters applied again (what matches no more is removed from the map). A
 * map that is unknown or expired is made anew (5.5.14). */
/* The slice [offset, offset + limit) of items[0..n) as a page (the others released). */
static ops_page_t slice(cr_entity_t **items, size_t n, size_t offset, size_t limit)
{
    size_t from = offset < n ? offset : n, to = limit < n - from ? from + limit : n;
    for (size_t i = 0; i < from; i++) entity_unref(items[i]);
    for (size_t i = to; i < n; i++) entity_unref(items[i]);
    return (ops_page_t){.items = items + from, .n = to - from, .count = n, .more = to < n};
}

/* as_map: Create EntityMap for Query Entities (5.14.4): the map is the answer. */
static bool map_make(request_t *r, const ops_req_t *rq, ops_query_t *qy, const ld_context_t *ctx, api_view_t *v,
                     const json_t *body, const api_map_req_t *mr, bool remote, bool split, bool as_map, problem_t *p)
{
    ops_page_t  lp;
    size_t      lim = (size_t)cr_config.max_limit;
    ops_query_t sel = split ? split_selection(qy) : *qy;
    if (split && q_link_depth(qy->f.q) && !ops_q_resolve(rq, qy->f.q, p)) return false;
    if (!local_part(rq, &sel, NULL, 0, lim, &lp, p)) return false;
    fwd_out_t out = {0};
    if (remote) {
        fwd_param_t prm[16];
        reg_query_t m;
        size_t      np = api_fwd_selection(r, &sel, body, prm, &m);
        if (split) np = split_params(prm, np);
        fwd_in_t    in;
        api_fwd_in(r, ctx, &in);
        if (!fwd_query_new_map(&in, &m, prm, np, lim, mr->lifetime_us, lp.items, lp.n, &out, p)) {
            ops_page_release(&lp);
            return false;
        }
        if (out.warning) reply_header(r, "NGSILD-Warning", out.warning);
    }
    cr_entity_t **items = lp.items;
    size_t        n = lp.n;
    if (out.forwarded) {                       /* the merged entities hold their own references */
        ops_page_release(&lp);
        items = out.items;
        n = out.n;
    }
    if (split) n = split_filter(qy, items, out.forwarded ? out.origins : NULL, n);
    const char **ids = arena_alloc(r->arena, (n + 1) * sizeof *ids);
    uint64_t    *origins = arena_alloc(r->arena, (n + 1) * sizeof *origins);
    for (size_t i = 0; i < n; i++) {
        ids[i] = items[i]->id;
        origins[i] = out.forwarded ? (out.origins ? out.origins[i] : 0) : FWD_MAP_HERE;
    }
    char id[64];
    bool kept = (!out.forwarded || out.origins) &&
                fwd_map_put(r->tenant, cr_now_us() + mr->lifetime_us, out.reg_ids, out.linked, out.forwarded ? out.n_regs : 0,
                            ids, origins, n, id);
    if (as_map) {
        fwd_map_page_t mp;
        for (size_t i = 0; i < n; i++) entity_unref(items[i]);
        if (kept && fwd_map_page(r->tenant, id, 0, SIZE_MAX, r->arena, &mp)) {
            api_entity_map_answer(r, ctx, &mp, 201);
            return true;
        }
        return problem_set(p, PB_TOO_MANY_RESULTS, "an EntityMap of %zu entities from %zu sources cannot be held "
                           "(--entityMapEntries %d; at most 63 sources)", n, out.n_regs, cr_config.entity_map_entries);
    }
    if (kept) reply_header(r, "NGSILD-EntityMap", arena_strdup(r->arena, id));
    else LOG_D("api: no entity map for a query of %zu entities (over --entityMapEntries or 63 sources)", n);
    ops_page_t pg = slice(items, n, qy->offset, qy->limit);
    return answer_page(r, qy, &pg, ctx, v, kept ? 201 : 200, p);
}

static bool map_use(request_t *r, const ops_req_t *rq, ops_query_t *qy, const ld_context_t *ctx, api_view_t *v,
                    const json_t *body, const fwd_map_page_t *mp, bool remote, bool split, problem_t *p)
{
    ops_query_t sel = split ? split_selection(qy) : *qy;
    if (split && q_link_depth(qy->f.q) && !ops_q_resolve(rq, qy->f.q, p)) return false;
    ops_page_t  lp = {0};
    size_t      nl = 0;
    const char **lids = arena_alloc(r->arena, (mp->n + 1) * sizeof *lids);
    for (size_t i = 0; i < mp->n; i++)
        if (mp->origins[i] & FWD_MAP_HERE) lids[nl++] = mp->ids[i];
    /* the local ones, by id, the filters checked again */
    if (nl && !local_part(rq, &sel, lids, nl, nl, &lp, p)) return false;
    fwd_param_t prm[16];
    reg_query_t m;
    size_t      np = api_fwd_selection(r, &sel, body, prm, &m);
    if (split) np = split_params(prm, np);
    fwd_in_t    in;
    fwd_out_t   out;
    api_fwd_in(r, ctx, &in);
    bool ok = fwd_query_map(&in, &m, prm, np, mp, remote, lp.items, lp.n, &out, p);
    ops_page_release(&lp);
    if (!ok) return false;
    if (out.warning) reply_header(r, "NGSILD-Warning", out.warning);
    if (split) {                               /* the merged ones that do not match are gone from the map too */
        const char **gone = arena_alloc(r->arena, (out.n_gone + out.n + 1) * sizeof *gone);
        size_t       ng = out.n_gone, k = 0;
        if (ng) memcpy(gone, out.gone, ng * sizeof *gone);
        entity_filter_t f = qy->f;
        f.sel = qy->sel;
        f.n_sel = qy->nsel;
        for (size_t i = 0; i < out.n; i++) {
            if (filter_match(&f, out.items[i])) {
                out.items[k++] = out.items[i];
                continue;
            }
            gone[ng++] = arena_strdup(r->arena, out.items[i]->id);
            entity_unref(out.items[i]);
        }
        out.n = k;
        out.gone = gone;
        out.n_gone = ng;
    }
    fwd_map_forget(r->tenant, mp->id, qy->offset, qy->offset + qy->limit, out.gone, out.n_gone);
    reply_header(r, "NGSILD-EntityMap", mp->id);
    ops_page_t pg = {.items = out.items, .n = out.n, .count = mp->live - out.n_gone,
                     .more = qy->offset + qy->limit < mp->total};
    return answer_page(r, qy, &pg, ctx, v, 200, p);
}

static bool map_page(request_t *r, const ops_req_t *rq, ops_query_t *qy, const ld_context_t *ctx, api_view_t *v,
                     const json_t *body, const api_map_req_t *mr, bool remote, bool split, problem_t *p)
{
    fwd_map_page_t mp;
    if (mr->id && fwd_map_page(r->tenant, mr->id, qy->offset, qy->limit, r->arena, &mp))
        return map_use(r, rq, qy, ctx, v, body, &mp, remote, split, p);
    return map_make(r, rq, qy, ctx, v, body, mr, remote, split, false, p);
}

/* limit/offset, the last check for unknown parameters, the query, the page. */
static bool page_and_answer(request_t *r, ops_query_t *qy, const ld_context_t *ctx, api_view_t *v,
                            const json_t *body, problem_t *p)
{
    ops_page_t pg;
    api_map_req_t  mr = {0};
    if (!set_page(qy, req_param(r, "limit"), req_param(r, "offset"), p)) return false;
    bool       split;
    if (!api_entity_map_params(r, true, &mr, p)) return false;
    if (!split_of(r, body, &split, p)) return false;
    if (!api_no_unknown_params(r, p)) return false;
    unsigned qd = q_link_depth(qy->f.q), jl = v->join_level ? v->join_level : 1;
    if (qd && v->join == API_JOIN_NONE)
        return problem_set(p, PB_BAD_REQUEST_DATA, "q terms into linked entities (rel{...}) need Linked Entity "
                           "retrieval: join=inline or flat (5.7.2.4)");
    if (qd > jl)
        return problem_set(p, PB_BAD_REQUEST_DATA, "too deep query: q reaches %u levels of linked entities, "
                           "joinLevel is %u (5.7.2.4)", qd, jl);
    ops_req_t rq = api_req(r, ctx);
    /* a query with pick keeps the entities that have a picked attribute, as with attrs (4.21) */
    if (v->n_pick_attrs && !qy->f.n_attrs) {
        qy->f.attrs = v->pick_attrs;
        qy->f.n_attrs = v->n_pick_attrs;
    }
    const json_t *local = body ? json_get(body, "local") : NULL;
    bool          remote = api_distributed(r) && !(local && local->type == JSON_TRUE);
    split = split && remote;                   /* nothing is split when nothing is forwarded */
    if (mr.want) return map_page(r, &rq, qy, ctx, v, body, &mr, remote, split, p);
    if (remote) return distributed_page(r, &rq, qy, ctx, v, body, split, p);
    if (!ops_query(&rq, qy, &pg, p)) return false;
    return answer_page(r, qy, &pg, ctx, v, 200, p);
}

/* GET /entityMaps (6.34.3.1) and POST /entityMaps (6.34.3.2): Create EntityMap for Query Entities (5.14.4),
 * the query's parameters (or Query body), limit and the NGSILD-EntityMap given ignored. */
static bool map_create(request_t *r, ops_query_t *qy, const ld_context_t *ctx, api_view_t *v, const json_t *body,
                       problem_t *p)
{
    api_map_req_t mr = {0};
    bool      split;
    (void)req_param(r, "limit");
    (void)req_param(r, "entityMap");
    if (!set_page(qy, NULL, req_param(r, "offset"), p)) return false;
    if (!api_entity_map_params(r, true, &mr, p)) return false;
    if (!split_of(r, body, &split, p)) return false;
    if (!api_no_unknown_params(r, p)) return false;
    ops_req_t     rq = api_req(r, ctx);
    const json_t *local = body ? json_get(body, "local") : NULL;
    bool          remote = api_distributed(r) && !(local && local->type == JSON_TRUE);
    return map_make(r, &rq, qy, ctx, v, body, &mr, remote, split && remote, true, p);
}

/* GET /entities, and GET /entityMaps (as_map: the map is the answer). */
static void entities_query(request_t *r, bool as_map)
{
    problem_t    p = {0};
    ops_query_t  qy = {0};
    api_view_t   v;

    static api_params_t known =
        API_PARAMS(API_VIEW_PARAMS "," API_QUERY_PARAMS "," API_PAGE_PARAMS ",entityMap,entityMapLifetime,splitEntities");
    if (!api_params_known(r, &known, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!api_view(r, ctx, true, &v, &p)) goto fail;
    if (!api_count_param(r, &qy.count, &p)) goto fail;
    if (!query_from_params(r, ctx, &qy, false, &p)) goto fail;
    if (!(as_map ? map_create(r, &qy, ctx, &v, NULL, &p) : page_and_answer(r, &qy, ctx, &v, NULL, &p))) goto fail;
    return;
fail:
    reply_problem(r, &p);
}

void api_entities_query(request_t *r)
{
    entities_query(r, false);
}

void api_entity_maps_query(request_t *r)
{
    entities_query(r, true);
}

void api_entities_purge(request_t *r)
{
    problem_t p = {0};
    ops_query_t qy = {0};
    size_t    n = 0;

    static api_params_t known = API_PARAMS(API_QUERY_PARAMS ",drop,keep");
    if (!api_params_known(r, &known, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!query_from_params(r, ctx, &qy, true, &p)) goto fail;
    const char *drop = req_param(r, "drop"), *keep = req_param(r, "keep");
    if (drop && keep) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "drop and keep cannot be used together (6.4.3.3)");
        goto fail;
    }
    if (!api_no_unknown_params(r, &p)) goto fail;
    const char **names = NULL;
    size_t       nn = 0;
    if ((drop || keep) && !api_name_list(r, ctx, drop ? drop : keep, &names, &nn, false, &p)) goto fail;
    ops_req_t rq = api_req(r, ctx);
    if (!ops_purge(&rq, &qy.f, names, nn, keep != NULL, &n, &p)) goto fail;
    fwd_wout_t out;       /* 5.6.21.4 distributed: then at the sources (dwrite.c) */
    if (!api_fwd_purge(r, ctx, &qy.f, &out, &p)) goto fail;
    if (!out.n_sent || !api_reply_dwrite(r, NULL, true, true, NULL, &out)) reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

/* ------------------------------------------------------------ POST query */

static bool selector_from_json(request_t *r, const ld_context_t *ctx, const json_t *s, entity_selector_t *f,
                               problem_t *p)
{
    if (!json_is_object(s)) return problem_set(p, PB_BAD_REQUEST_DATA, "each member of entities must be an object");
    json_foreach(m, s) {
        if (!strcmp(m->key, "id") || !strcmp(m->key, "@id")) {
            if (!json_is_string(m) || !model_valid_uri(m->str))
                return problem_set(p, PB_BAD_REQUEST_DATA, "entities[].id must be a URI");
            f->id = m->str;
        } else if (!strcmp(m->key, "idPattern")) {
            if (!json_is_string(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "entities[].idPattern must be a string");
            if (!(f->id_pattern = filter_compile_pattern(r->arena, m->str, p))) return false;
        } else if (!strcmp(m->key, "type") || !strcmp(m->key, "@type")) {
            if (!json_is_string(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "entities[].type must be a string");
            if (!(f->types = typesel_parse(r->arena, m->str, ctx, p))) return false;
        } else {
            return problem_set(p, PB_BAD_REQUEST_DATA, "unknown member '%s' in an EntitySelector (5.2.33)", m->key);
        }
    }
    if (!f->types) return problem_set(p, PB_BAD_REQUEST_DATA, "an EntitySelector needs a type (5.2.33)");
    return true;
}

/* A Query member given as a string or an array of strings, as one comma-separated text. */
static const char *body_list_text(request_t *r, const json_t *m)
{
    if (json_is_string(m)) return *m->str ? m->str : NULL;
    if (!json_is_array(m) || m->len == 0) return NULL;
    sbuf_t sb;
    sb_init(&sb, r->arena, 64);
    json_foreach(a, m) {
        if (!json_is_string(a) || !*a->str) return NULL;
        if (sb.len) sb_addc(&sb, ',');
        sb_adds(&sb, a->str);
    }
    return sb.p;
}

static bool query_from_body(request_t *r, const ld_context_t *ctx, const json_t *b, ops_query_t *qy,
                            api_view_t *v, problem_t *p)
{
    const json_t *t = json_get(b, "type");
    if (!t) t = json_get(b, "@type");
    if (!json_is_string(t) || strcmp(t->str, "Query"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "the body must be a Query: \"type\": \"Query\" (5.2.23)");
    bool        any = false;
    const char *expand = NULL, *json_keys = NULL;
    json_foreach(m, b) {
        const char *k = m->key;
        if (!strcmp(k, "type") || !strcmp(k, "@type") || !strcmp(k, "@context")) continue;
        if (!strcmp(k, "expandValues") || !strcmp(k, "jsonKeys")) {
            const char *text = body_list_text(r, m);
            if (!text) return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a string or a non-empty array of strings", k);
            *(k[0] == 'e' ? &expand : &json_keys) = text;
            continue;
        }
        if (!strcmp(k, "entities")) {
            if (!json_is_array(m) || m->len == 0)
                return problem_set(p, PB_BAD_REQUEST_DATA, "entities must be a non-empty array (5.2.23)");
            qy->sel = arena_calloc(r->arena, m->len * sizeof *qy->sel);
            qy->nsel = 0;
            json_foreach(s, m) {
                if (!selector_from_json(r, ctx, s, &qy->sel[qy->nsel], p)) return false;
                qy->nsel++;
            }
            any = true;
        } else if (!strcmp(k, "q")) {
            if (!json_is_string(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "q must be a string");
            if (!(qy->f.q = q_parse(r->arena, m->str, ctx, p))) return false;
            any = true;
        } else if (!strcmp(k, "scopeQ")) {
            if (!json_is_string(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "scopeQ must be a string");
            if (!(qy->f.scope = scopeq_parse(r->arena, m->str, p))) return false;
        } else if (!strcmp(k, "geoQ")) {
            if (!json_is_object(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "geoQ must be an object (5.2.13)");
            const json_t *rel = json_get(m, "georel"), *geom = json_get(m, "geometry"),
                         *coords = json_get(m, "coordinates"), *gprop = json_get(m, "geoproperty");
            if (!json_is_string(rel)) return problem_set(p, PB_BAD_REQUEST_DATA, "geoQ.georel must be a string");
            if (gprop && !json_is_string(gprop))
                return problem_set(p, PB_BAD_REQUEST_DATA, "geoQ.geoproperty must be a string");
            if (!(qy->f.geo = geoq_from_json(r->arena, rel->str, geom, coords, gprop ? gprop->str : NULL, ctx, p)))
                return false;
            any = true;
        } else if (!strcmp(k, "attrs") || !strcmp(k, "pick") || !strcmp(k, "omit") || !strcmp(k, "datasetId") ||
                   !strcmp(k, "containedBy")) {
            /* an array of strings (attrs: names; pick/omit: terms of 4.21), or one string */
            const char *text = body_list_text(r, m);
            if (!text) return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a string or a non-empty array of strings", k);
            api_view_text_t vt = {0};
            if (!strcmp(k, "attrs")) vt.attrs = text;
            else if (!strcmp(k, "pick")) vt.pick = text;
            else if (!strcmp(k, "omit")) vt.omit = text;
            else if (!strcmp(k, "datasetId")) vt.dataset_id = text;
            else vt.contained_by = text;
            if (!api_view_set(r, ctx, &vt, v, p)) return false;
            if (vt.attrs) {
                qy->f.attrs = v->attrs;
                qy->f.n_attrs = v->n_attrs;
                any = true;
            }
        } else if (!strcmp(k, "join")) {
            if (!json_is_string(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "join must be a string");
            if (!api_view_set(r, ctx, &(api_view_text_t){.join = m->str}, v, p)) return false;
        } else if (!strcmp(k, "joinLevel")) {
            if (m->type != JSON_NUMBER) return problem_set(p, PB_BAD_REQUEST_DATA, "joinLevel must be a positive integer");
            char *text = arena_printf(r->arena, "%.17g", json_number(m));
            if (!api_view_set(r, ctx, &(api_view_text_t){.join_level = text}, v, p)) return false;
        } else if (!strcmp(k, "lang")) {
            if (!json_is_string(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "lang must be a string");
            v->ro.lang = m->str;
        } else if (!strcmp(k, "local")) {
            if (!json_is_bool(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "local must be a boolean");
            any = any || m->type == JSON_TRUE;
        } else if (!strcmp(k, "ordering")) {   /* OrderingParams (5.2.43) */
            if (!json_is_object(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "ordering must be an object (5.2.43)");
            order_params_t op = {0};
            json_foreach(o, m) {
                if (!strcmp(o->key, "orderBy")) {
                    if (!(op.order_by = body_list_text(r, o)))
                        return problem_set(p, PB_BAD_REQUEST_DATA, "ordering.orderBy must be a non-empty array of strings");
                } else if (!strcmp(o->key, "collation") || !strcmp(o->key, "geometry")) {
                    if (!json_is_string(o)) return problem_set(p, PB_BAD_REQUEST_DATA, "ordering.%s must be a string", o->key);
                    *(o->key[0] == 'c' ? &op.collation : &op.geometry) = o->str;
                } else if (!strcmp(o->key, "coordinates")) {
                    if (!json_is_array(o)) return problem_set(p, PB_BAD_REQUEST_DATA, "ordering.coordinates must be an array");
                    sbuf_t sb;
                    sb_init(&sb, r->arena, 64);
                    json_render(&sb, o);
                    op.from = sb.p;
                } else {
                    return problem_set(p, PB_BAD_REQUEST_DATA, "member '%s' of ordering is not one of 5.2.43", o->key);
                }
            }
            if (!set_order(r, ctx, &op, &qy->f, p)) return false;
        } else if (!strcmp(k, "csf")) {
            if (!json_is_string(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "csf must be a string");
        } else if (!strcmp(k, "splitEntities")) {
            if (!json_is_bool(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "splitEntities must be a boolean (5.2.23)");
        } else {
            return problem_set(p, PB_BAD_REQUEST_DATA, "member '%s' of a Query is not supported (5.2.23)", k);
        }
    }
    if (!any)
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "a Query needs at least one of entities, attrs, q or geoQ (or local: true) (5.7.2)");
    return value_options(r, ctx, qy->f.q, expand, json_keys, p);
}

/* POST /entityOperations/query, and POST /entityMaps (as_map). */
static void batch_query(request_t *r, bool as_map)
{
    problem_t    p = {0};
    ops_query_t  qy = {0};
    api_view_t   v;

    const ld_context_t *ctx;
    static api_params_t known = API_PARAMS(API_VIEW_PARAMS ",count,limit,offset,entityMap,entityMapLifetime");
    if (!api_params_known(r, &known, &p)) goto fail;
    json_t *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    if (!api_view(r, ctx, true, &v, &p)) goto fail;
    if (!api_count_param(r, &qy.count, &p)) goto fail;
    if (!query_from_body(r, ctx, body, &qy, &v, &p)) goto fail;
    if (!api_view_check(&v, &p)) goto fail;
    if (!(as_map ? map_create(r, &qy, ctx, &v, body, &p) : page_and_answer(r, &qy, ctx, &v, body, &p))) goto fail;
    return;
fail:
    reply_problem(r, &p);
}

void api_batch_query(request_t *r)
{
    batch_query(r, false);
}

void api_entity_maps_post(request_t *r)
{
    batch_query(r, true);
}

/* ------------------------------------------ for the temporal API (temporal.c) */

bool api_query_params(request_t *r, const ld_context_t *ctx, ops_query_t *qy, problem_t *p)
{
    return query_from_params(r, ctx, qy, false, p);
}

bool api_query_body(request_t *r, const ld_context_t *ctx, const json_t *body, ops_query_t *qy, api_view_t *v,
                    problem_t *p)
{
    return query_from_body(r, ctx, body, qy, v, p);
}

bool api_query_count(request_t *r, ops_query_t *qy, problem_t *p)
{
    return api_count_param(r, &qy->count, p) && set_page(qy, req_param(r, "limit"), req_param(r, "offset"), p);
}
