/*
 * entities.c - /entities/ (POST create) and /entities/{entityId} (GET
 * retrieve, DELETE, PATCH merge, PUT replace): clauses 6.4.3.1, 6.5.3.1-4
 * and the operations of 5.6.1, 5.7.1, 5.6.6, 5.6.17, 5.6.18.
 *
 * Every handler follows the same steps: read the parameters, parse and
 * validate the body into a draft (model/), call the store once, answer.
 * Nothing is written before everything is validated.
 */
#include "api.h"

#include <string.h>

void api_entity_create(request_t *r)
{
    problem_t p = {0};
    json_t   *body = api_body(r, false, &p);
    if (!body) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, body, &p);
    if (!ctx) goto fail;
    cr_entity_t *e = entity_parse(r->arena, body, ctx, EP_CREATE, cr_now_us(), &p);
    if (!e) goto fail;
    if (!store_create(api_store, r->tenant, e, &p)) goto fail;

    sbuf_t loc;
    sb_init(&loc, r->arena, 64 + strlen(e->id));
    sb_adds(&loc, "/ngsi-ld/v1/entities/");
    http_url_encode(&loc, e->id);
    reply_status(r, 201);
    reply_header(r, "Location", loc.p);
    return;
fail:
    reply_problem(r, &p);
}

void api_entity_get(request_t *r)
{
    problem_t   p = {0};
    api_view_t  v;
    const char *id = r->pathv[0];

    if (!api_check_id(id, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!api_view(r, ctx, true, &v, &p)) goto fail;
    const char *type = req_param(r, "type");
    const char *local = req_param(r, "local");
    if (local && strcmp(local, "true") && strcmp(local, "false")) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "local must be true or false");
        goto fail;
    }
    if (!api_no_unknown_params(r, &p)) goto fail;

    cr_entity_t *e = store_get(api_store, r->tenant, id, &p);
    if (!e) goto fail;
    if (type) {
        typesel_t *ts = typesel_parse(r->arena, type, ctx, &p);
        if (!ts || !typesel_match(ts, e)) {
            entity_unref(e);
            if (ts) problem_set(&p, PB_RESOURCE_NOT_FOUND, "entity %s has none of the types %s", id, type);
            goto fail;
        }
    }
    if (v.n_attrs) {   /* Table 6.5.3.1-1: none of the attrs present -> 404 */
        bool any = false;
        for (size_t i = 0; i < v.n_attrs && !any; i++) any = entity_attr_any(e, v.attrs[i]) != NULL;
        if (!any) {
            entity_unref(e);
            problem_set(&p, PB_RESOURCE_NOT_FOUND, "entity %s has none of the attributes asked for", id);
            goto fail;
        }
    }
    api_view_context(r, ctx, &v);
    json_writer_t w;
    jw_init(&w, &r->out);
    if (v.accept == ACC_GEOJSON) entity_render_geojson(&w, e, &v.ro);
    else entity_render(&w, e, &v.ro);
    entity_unref(e);
    reply_body(r, 200, v.ctype);
    return;
fail:
    reply_problem(r, &p);
}

void api_entity_delete(request_t *r)
{
    problem_t   p = {0};
    const char *id = r->pathv[0];
    if (!api_check_id(id, &p)) goto fail;
    (void)req_param(r, "local");
    if (!api_check_type_param(r, id, &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    if (!store_delete(api_store, r->tenant, id, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

/* The body of PATCH/PUT /entities/{id}: id and type, when given, must agree
 * with the path (5.6.17, 5.6.18). */
static cr_entity_t *entity_fragment(request_t *r, unsigned flags, problem_t *p)
{
    const char *id = r->pathv[0];
    if (!api_check_id(id, p)) return NULL;
    json_t *body = api_body(r, false, p);
    if (!body) return NULL;
    const ld_context_t *ctx = api_context(r, body, p);
    if (!ctx) return NULL;
    const json_t *bid = json_get(body, "id");
    if (!bid) bid = json_get(body, "@id");
    if (bid && (!json_is_string(bid) || strcmp(bid->str, id))) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the id in the body does not match the entity id %s in the URL", id);
        return NULL;
    }
    cr_entity_t *e = entity_parse(r->arena, body, ctx, flags | EP_FRAGMENT, cr_now_us(), p);
    if (!e) return NULL;
    e->id = id;
    return e;
}

/* PATCH /entities/{id} (5.6.17, Table 6.5.3.4-1): format=keyValues gives the
 * values alone (each attribute keeps its type), lang makes plain strings the
 * text of that language, observedAt re-stamps the attributes that have one. */
void api_entity_merge(request_t *r)
{
    problem_t   p = {0};
    op_args_t   args = {0};
    const char *fmt = req_param(r, "format");
    const char *lang = req_param(r, "lang");
    const char *obs = req_param(r, "observedAt");
    bool        kv = api_option(r, "keyValues") || api_option(r, "simplified");

    if (fmt) {
        if (!strcmp(fmt, "keyValues") || !strcmp(fmt, "simplified")) kv = true;
        else if (strcmp(fmt, "normalized") && strcmp(fmt, "concise")) {
            problem_set(&p, PB_BAD_REQUEST_DATA, "format must be normalized, concise or keyValues, not '%s'", fmt);
            goto fail;
        }
    }
    if (obs && !cr_datetime_parse(obs, &args.observed_at)) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "observedAt '%s' is not a DateTime", obs);
        goto fail;
    }
    if (lang && (!*lang || strchr(lang, ',') || strchr(lang, '*'))) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "lang must be one language tag, not '%s'", lang);
        goto fail;
    }
    if (!api_check_type_param(r, r->pathv[0], &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    cr_entity_t *patch = entity_fragment(r, EP_MERGE, &p);
    if (!patch) goto fail;
    entity_patch_simplified(r->arena, patch, kv, lang);
    if (!store_modify(api_store, r->tenant, r->pathv[0], OP_MERGE_ENTITY, patch, &args, NULL, r->arena, &p))
        goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_entity_replace(request_t *r)
{
    problem_t p = {0};
    if (!api_check_type_param(r, r->pathv[0], &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    cr_entity_t *patch = entity_fragment(r, 0, &p);
    if (!patch) goto fail;
    if (patch->n_types == 0) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "replacing an entity needs its type (5.6.18)");
        goto fail;
    }
    if (!store_modify(api_store, r->tenant, r->pathv[0], OP_REPLACE_ENTITY, patch, &(op_args_t){0}, NULL,
                      r->arena, &p))
        goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
