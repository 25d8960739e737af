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

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool parse_uint(const char *s, const char *name, size_t *out, problem_t *p)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a non-negative integer", name);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a non-negative integer, not '%s'", name, s);
    *out = (size_t)v;
    return true;
}

static bool set_page(ops_query_t *qy, const char *limit, const char *offset, problem_t *p)
{
    qy->limit = (size_t)cr_config.default_limit;
    qy->offset = 0;
    if (limit && !parse_uint(limit, "limit", &qy->limit, p)) return false;
    if (offset && !parse_uint(offset, "offset", &qy->offset, p)) return false;
    return ops_query_check(qy, p);
}

static bool id_list(request_t *r, const char *text, entity_filter_t *f, problem_t *p)
{
    size_t cap = 1;
    for (const char *s = text; *s; s++) if (*s == ',') cap++;
    f->ids = arena_alloc(r->arena, cap * sizeof *f->ids);
    f->n_ids = 0;
    for (const char *s = text; *s;) {
        const char *e = strchr(s, ',');
        size_t      l = e ? (size_t)(e - s) : strlen(s);
        char       *id = arena_strndup(r->arena, s, l);
        if (!model_valid_uri(id)) return problem_set(p, PB_BAD_REQUEST_DATA, "id '%s' is not a URI", id);
        f->ids[f->n_ids++] = id;
        s = e ? e + 1 : s + l;
    }
    if (!f->n_ids) return problem_set(p, PB_BAD_REQUEST_DATA, "id must list at least one entity id");
    return true;
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
    if (purge && !type && !id && !idp && !q && !has_geo && !scope)
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "purging needs at least one of type, id, idPattern, q, scopeQ or a geo-query (6.4.3.3)");

    if (type && strcmp(type, "*") && !(f->types = typesel_parse(r->arena, type, ctx, p))) return false;
    if (id && !id_list(r, id, f, p)) return false;
    if (idp && !(f->id_pattern = filter_compile_pattern(r->arena, idp, p))) return false;
    if (q && !(f->q = q_parse(r->arena, q, ctx, p))) return false;
    if (purge && q_link_depth(f->q))
        return problem_set(p, PB_BAD_REQUEST_DATA, "a purge has no Linked Entity retrieval: q cannot reach into "
                           "linked entities (rel{...}) (6.4.3.3)");
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

static void add_page_link(request_t *r, const char *rel, size_t offset, size_t limit, const char *ctype)
{
    sbuf_t sb;
    sb_init(&sb, r->arena, 256);
    sb_addc(&sb, '<');
    sb_adds(&sb, r->path);
    sb_addc(&sb, '?');
    for (int i = 0; i < r->nparams; i++) {
        if (!strcmp(r->params[i].key, "offset") || !strcmp(r->params[i].key, "limit")) continue;
        http_url_encode(&sb, r->params[i].key);
        sb_addc(&sb, '=');
        http_url_encode(&sb, r->params[i].value);
        sb_addc(&sb, '&');
    }
    sb_printf(&sb, "limit=%zu&offset=%zu>; rel=\"%s\"; type=\"%s\"", limit, offset, rel, ctype);
    /* a long query repeated in the link may not fit in the connection's
     * memory: the page is answered without it (doc/api.md, pagination) */
    if (sizeof "Link: \r\n" - 1 + sb.len <= reply_header_room(r)) reply_header(r, "Link", sb.p);
}

static bool answer_page(request_t *r, const ops_query_t *qy, ops_page_t *pg, const ld_context_t *ctx,
                        api_view_t *v, problem_t *p)
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
    if (pg->more) add_page_link(r, "next", qy->offset + pg->n, qy->limit, v->ctype);
    if (qy->offset > 0 && qy->limit)
        add_page_link(r, "prev", qy->offset > qy->limit ? qy->offset - qy->limit : 0, qy->limit, v->ctype);
    ops_page_release(pg);
    reply_body(r, 200, v->ctype);
    return true;
}

/* count=true|false, or options=count (4.13) */
static bool read_count(request_t *r, ops_query_t *qy, problem_t *p)
{
    const char *count = req_param(r, "count");
    if (count && strcmp(count, "true") && strcmp(count, "false"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "count must be true or false");
    qy->count = (count && !strcmp(count, "true")) || api_option(r, "count");
    return true;
}

/* limit/offset, the last check for unknown parameters, the query, the page. */
static bool page_and_answer(request_t *r, ops_query_t *qy, const ld_context_t *ctx, api_view_t *v, problem_t *p)
{
    ops_page_t pg;
    if (!set_page(qy, req_param(r, "limit"), req_param(r, "offset"), p)) return false;
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
    if (!ops_query(&rq, qy, &pg, p)) return false;
    return answer_page(r, qy, &pg, ctx, v, p);
}

void api_entities_query(request_t *r)
{
    problem_t    p = {0};
    ops_query_t  qy = {0};
    api_view_t   v;

    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!api_view(r, ctx, true, &v, &p)) goto fail;
    if (!read_count(r, &qy, &p)) goto fail;
    if (!query_from_params(r, ctx, &qy, false, &p)) goto fail;
    if (!page_and_answer(r, &qy, ctx, &v, &p)) goto fail;
    return;
fail:
    reply_problem(r, &p);
}

void api_entities_purge(request_t *r)
{
    problem_t p = {0};
    ops_query_t qy = {0};
    size_t    n = 0;

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
    reply_status(r, 204);
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
    bool any = false;
    json_foreach(m, b) {
        const char *k = m->key;
        if (!strcmp(k, "type") || !strcmp(k, "@type") || !strcmp(k, "@context")) continue;
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
        } else {
            return problem_set(p, PB_BAD_REQUEST_DATA, "member '%s' of a Query is not supported (5.2.23)", k);
        }
    }
    if (!any)
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "a Query needs at least one of entities, attrs, q or geoQ (or local: true) (5.7.2)");
    return true;
}

void api_batch_query(request_t *r)
{
    problem_t    p = {0};
    ops_query_t  qy = {0};
    api_view_t   v;

    const ld_context_t *ctx;
    json_t             *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    if (!api_view(r, ctx, true, &v, &p)) goto fail;
    if (!read_count(r, &qy, &p)) goto fail;
    if (!query_from_body(r, ctx, body, &qy, &v, &p)) goto fail;
    if (!api_view_check(&v, &p)) goto fail;
    if (!page_and_answer(r, &qy, ctx, &v, &p)) goto fail;
    return;
fail:
    reply_problem(r, &p);
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
    return read_count(r, qy, p) && set_page(qy, req_param(r, "limit"), req_param(r, "offset"), p);
}

void api_page_link(request_t *r, const char *rel, size_t offset, size_t limit, const char *ctype)
{
    add_page_link(r, rel, offset, limit, ctype);
}
