/*
 * registrations.c - /csourceRegistrations (6.8: POST register, GET query)
 * and /csourceRegistrations/{registrationId} (6.9: GET, PATCH, DELETE), the
 * HTTP binding of 5.9.2-5.9.4 and 5.10.1-5.10.2 (ops/registrations.c).
 *
 * A registration is answered with its names compacted with the @context of
 * the reading request (its Link header, else the core context), so the same
 * registration reads as it was written to a client that shares its context
 * and expanded to one that does not (5.10.1.4, 5.5.7).
 */
#include "api.h"

#include "../reg/reg.h"

#include <string.h>

void api_reg_create(request_t *r)
{
    problem_t   p = {0};
    const char *id = NULL;
    const ld_context_t *ctx;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t rq = api_req(r, ctx);
    if (!ops_reg_create(&rq, body, &id, &p)) goto fail;
    api_reply_created(r, "/ngsi-ld/v1/csourceRegistrations/", id);
    return;
fail:
    reply_problem(r, &p);
}

/* The answer's form: ld+json carries the @context in the body, json in a Link header. */
static void reg_answer(request_t *r, const ld_context_t *ctx, bool ld)
{
    if (!ld) {
        sbuf_t link;
        sb_init(&link, r->arena, 256);
        sb_printf(&link, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"",
                  ld_context_link(ctx));
        reply_header(r, "Link", link.p);
    }
    reply_body(r, 200, ld ? "application/ld+json" : "application/json");
}

void api_reg_get(request_t *r)
{
    problem_t p = {0};
    if (!ops_check_id(r->pathv[0], &p)) goto fail;
    bool ld = req_accept_best(r, ACC_JSON | ACC_LDJSON) == ACC_LDJSON;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!api_options_valid(r, "sysAttrs", &p)) goto fail;
    bool sys = api_option(r, "sysAttrs");
    if (!api_no_unknown_params(r, &p)) goto fail;
    ops_req_t rq = api_req(r, ctx);
    reg_t    *g = ops_reg_retrieve(&rq, r->pathv[0], &p);
    if (!g) goto fail;
    json_writer_t w;
    jw_init(&w, &r->out);
    reg_render(&w, g, ctx, ld, sys, ~(uint64_t)0);
    reg_unref(g);
    reg_answer(r, ctx, ld);
    return;
fail:
    reply_problem(r, &p);
}

/* The attribute names a q names (5.10.2.4: they select RegistrationInfo as attrs do). */
static void q_names(const q_expr_t *q, arena_t *a, const char ***v, size_t *n, size_t *cap)
{
    q_term_view_t t;
    if (q_term_get(q, &t)) {
        if (!t.attr) return;
        *v = arena_grow(a, *v, *n, cap, sizeof **v, 8);
        (*v)[(*n)++] = t.attr;
        return;
    }
    for (size_t i = 0; i < q_node_count(q); i++) q_names(q_node_child(q, i), a, v, n, cap);
}

/* Adds names to the query's attribute list. */
static void add_attrs(request_t *r, ops_reg_query_t *q, const char *const *v, size_t n)
{
    if (!n) return;
    const char **all = arena_alloc(r->arena, (q->n_attrs + n) * sizeof *all);
    if (q->n_attrs) memcpy(all, q->attrs, q->n_attrs * sizeof *all);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], "@id") && strcmp(v[i], "@type")) all[q->n_attrs++] = v[i];
    q->attrs = all;
}

static bool time_param(request_t *r, const char *name, int64_t *out, problem_t *p)
{
    const char *s = req_param(r, name);
    if (!s) return problem_set(p, PB_BAD_REQUEST_DATA, "%s is needed by timerel (4.11)", name);
    if (!cr_datetime_parse(s, out)) return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a DateTime, not '%s'", name, s);
    return true;
}

/* GET /csourceRegistrations parameters (Table 6.8.3.2-1) -> the query. */
static bool discovery_params(request_t *r, const ld_context_t *ctx, ops_reg_query_t *q, problem_t *p)
{
    const char *type = req_param(r, "type"), *attrs = req_param(r, "attrs"), *id = req_param(r, "id");
    const char *idp = req_param(r, "idPattern"), *qs = req_param(r, "q"), *csf = req_param(r, "csf");
    const char *scope = req_param(r, "scopeQ"), *pick = req_param(r, "pick"), *omit = req_param(r, "omit");
    const char *timerel = req_param(r, "timerel"), *tprop = req_param(r, "timeproperty");
    geoq_params_t gp = {.georel = req_param(r, "georel"), .geometry = req_param(r, "geometry"),
                        .coordinates = req_param(r, "coordinates"), .geoproperty = req_param(r, "geoproperty")};
    (void)req_param(r, "geometryProperty");
    (void)req_param(r, "lang");
    bool has_geo = gp.georel || gp.geometry || gp.coordinates;
    if (!type && !attrs && !qs && !has_geo)
        return problem_set(p, PB_BAD_REQUEST_DATA, "a registration query needs at least one of type, attrs, q "
                                                   "or georel/geometry/coordinates (5.10.2.4)");
    if (type && !(q->types = typesel_parse(r->arena, type, ctx, p))) return false;
    if (id) {
        const char **ids;
        if (!api_id_list(r, id, &ids, &q->n_ids, p)) return false;
        q->ids = ids;
    }
    if (idp && !(q->id_pattern = filter_compile_pattern(r->arena, idp, p))) return false;
    const char **names;
    size_t       n, cap = 0;
    if (attrs && (!api_name_list(r, ctx, attrs, &names, &n, false, p))) return false;
    if (attrs) add_attrs(r, q, names, n);
    if (pick) {
        if (!api_name_list(r, ctx, pick, &names, &n, true, p)) return false;
        add_attrs(r, q, names, n);
    }
    if (omit && !api_name_list(r, ctx, omit, &names, &n, true, p)) return false;
    if (qs) {
        q_expr_t *qe = q_parse(r->arena, qs, ctx, p);
        if (!qe) return false;
        names = NULL;
        n = 0;
        q_names(qe, r->arena, &names, &n, &cap);
        add_attrs(r, q, names, n);
    }
    if (csf && !(q->csf = q_parse(r->arena, csf, ctx, p))) return false;
    if (scope && !(q->scope = scopeq_parse(r->arena, scope, p))) return false;
    if (has_geo) {
        /* 5.10.2.4: a registration's location matches when it may hold a matching
         * location, so a containment relation is tested as an intersection */
        geoq_params_t g = gp;
        if (g.georel && (!strcmp(g.georel, "within") || !strcmp(g.georel, "contains") ||
                         !strcmp(g.georel, "overlaps") || !strcmp(g.georel, "equals")))
            g.georel = "intersects";
        g.geoproperty = NULL;   /* the registration's own location */
        if (!(q->geo = geoq_parse(r->arena, &g, ctx, p))) return false;
        if (gp.geoproperty) {
            const char *gname = ld_expand_lookup(ctx, gp.geoproperty, r->arena);
            if (gname) add_attrs(r, q, &gname, 1);
        }
    } else if (gp.geoproperty)
        return problem_set(p, PB_BAD_REQUEST_DATA, "geoproperty needs georel, geometry and coordinates");
    if (timerel) {
        if (!strcmp(timerel, "before")) q->timerel = OPS_TIMEREL_BEFORE;
        else if (!strcmp(timerel, "after")) q->timerel = OPS_TIMEREL_AFTER;
        else if (!strcmp(timerel, "between")) q->timerel = OPS_TIMEREL_BETWEEN;
        else return problem_set(p, PB_BAD_REQUEST_DATA, "timerel must be before, after or between (4.11)");
        if (!time_param(r, "timeAt", &q->time_at, p)) return false;
        if (q->timerel == OPS_TIMEREL_BETWEEN && !time_param(r, "endTimeAt", &q->end_time_at, p)) return false;
        if (q->timerel == OPS_TIMEREL_BETWEEN && q->end_time_at <= q->time_at)
            return problem_set(p, PB_BAD_REQUEST_DATA, "endTimeAt must be after timeAt (4.11)");
    } else if (req_param(r, "timeAt") || req_param(r, "endTimeAt"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "timeAt and endTimeAt need timerel (4.11)");
    q->time_observed = true;
    if (tprop) {
        if (!strcmp(tprop, "observedAt")) q->time_observed = true;
        else if (!strcmp(tprop, "createdAt") || !strcmp(tprop, "modifiedAt") || !strcmp(tprop, "deletedAt"))
            q->time_observed = false;
        else return problem_set(p, PB_BAD_REQUEST_DATA,
                                "timeproperty must be observedAt, createdAt, modifiedAt or deletedAt (4.11)");
    }
    return true;
}

void api_reg_query(request_t *r)
{
    problem_t       p = {0};
    ops_reg_query_t q = {0};
    size_t          limit = (size_t)cr_config.default_limit, offset = 0, n, total;
    bool            count;
    bool ld = req_accept_best(r, ACC_JSON | ACC_LDJSON) == ACC_LDJSON;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    const char *ls = req_param(r, "limit"), *os = req_param(r, "offset");
    if (ls && !api_uint_param(ls, "limit", &limit, &p)) goto fail;
    if (os && !api_uint_param(os, "offset", &offset, &p)) goto fail;
    if (!api_options_valid(r, "count,sysAttrs", &p)) goto fail;
    bool sys = api_option(r, "sysAttrs");
    if (!api_count_param(r, &count, &p)) goto fail;
    if (limit == 0 && !count) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "limit=0 is only allowed together with count=true (6.3.10)");
        goto fail;
    }
    if (!discovery_params(r, ctx, &q, &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    ops_req_t rq = api_req(r, ctx);
    uint64_t *masks;
    reg_t   **v = ops_reg_query(&rq, &q, offset, limit, &n, &total, &masks, &p);
    if (!v) goto fail;
    json_writer_t w;
    jw_init(&w, &r->out);
    jw_array_begin(&w);
    for (size_t i = 0; i < n; i++) {
        reg_render(&w, v[i], ctx, ld, sys, masks[i]);
        reg_unref(v[i]);
    }
    jw_array_end(&w);
    const char *ctype = ld ? "application/ld+json" : "application/json";
    if (count) reply_header(r, "NGSILD-Results-Count", arena_printf(r->arena, "%zu", total));
    if (offset + n < total && limit) api_page_link(r, "next", offset + n, limit, ctype);
    if (offset > 0 && limit) api_page_link(r, "prev", offset > limit ? offset - limit : 0, limit, ctype);
    reg_answer(r, ctx, ld);
    return;
fail:
    reply_problem(r, &p);
}

void api_reg_update(request_t *r)
{
    problem_t p = {0};
    const ld_context_t *ctx;
    if (!ops_check_id(r->pathv[0], &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t rq = api_req(r, ctx);
    if (!ops_reg_update(&rq, r->pathv[0], body, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_reg_delete(request_t *r)
{
    problem_t p = {0};
    if (!api_no_unknown_params(r, &p)) goto fail;
    ops_req_t rq = api_req(r, NULL);
    if (!ops_reg_delete(&rq, r->pathv[0], &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
