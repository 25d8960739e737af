/*
 * entities.c - /entities/ (POST create) and /entities/{entityId} (GET
 * retrieve, DELETE, PATCH merge, PUT replace): clauses 6.4.3.1, 6.5.3.1-4,
 * the HTTP binding of the operations of 5.6.1, 5.7.1, 5.6.6, 5.6.17, 5.6.18
 * (ops/entities.c).
 *
 * Every handler follows the same steps: read the parameters, resolve the
 * @context, parse the body, call the operation once, answer.
 */
#include "api.h"

#include "../fwd/fwd.h"

#include <string.h>

void api_entity_create(request_t *r)
{
    problem_t   p = {0};
    const char *id;
    static api_params_t known = API_PARAMS("local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    json_t *body = api_body(r, false, &p);
    if (!body) goto fail;
    const ld_context_t *ctx = api_context(r, body, &p);
    if (!ctx) goto fail;
    ops_req_t   rq = api_req(r, ctx);
    fwd_wout_t  out = {.local = body};
    const json_t *jid = api_distributed(r) ? json_get(body, "id") : NULL;
    if (json_is_string(jid) && ops_check_id(jid->str, &(problem_t){0})) {
        /* 5.6.1.4 distributed: the parts the registrations take go to their sources */
        fwd_write_t w = {.op = REG_OP_CREATE_ENTITY, .method = "POST", .id = jid->str, .body = body,
                         .check = api_dw_check, .types_ud = &(api_dw_types_t){r, ctx, jid->str, body, EP_CREATE, false}};
        if (!api_fwd_write(r, ctx, &w, &out, &p)) goto fail;
    }
    if (out.n_sent) {
        problem_t lp = {0};
        bool      ok = out.local_skip || ops_entity_create(&rq, out.local, &id, &lp);
        if (!api_reply_dwrite(r, jid->str, !out.local_skip, ok, &lp, &out))
            api_reply_created(r, "/ngsi-ld/v1/entities/", jid->str);
        else if ((!out.local_skip && ok) || out.n_sent > out.failed)   /* 207: created somewhere */
            reply_header(r, "Location", api_dw_path(r, "/ngsi-ld/v1/entities/", jid->str, NULL));
        return;
    }
    if (!ops_entity_create(&rq, body, &id, &p)) goto fail;
    api_reply_created(r, "/ngsi-ld/v1/entities/", id);
    return;
fail:
    reply_problem(r, &p);
}

void api_entity_get(request_t *r)
{
    problem_t   p = {0};
    api_view_t  v;
    const char *id = r->pathv[0];

    static api_params_t known = API_PARAMS(API_VIEW_PARAMS ",type,local,entityMap,entityMapLifetime");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!ops_check_id(id, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!api_view(r, ctx, true, &v, &p)) goto fail;
    ops_retrieve_t o = {.type = req_param(r, "type"), .attrs = v.attrs, .n_attrs = v.n_attrs,
                        .pick = v.ro.pick_tree ? v.ro.pick_tree->names : NULL,
                        .n_pick = v.ro.pick_tree ? v.ro.pick_tree->n : 0,
                        .omit = v.ro.omit_tree ? v.ro.omit_tree->names : NULL,
                        .n_omit = v.ro.omit_tree ? v.ro.omit_tree->n : 0};
    const char *local = req_param(r, "local");
    if (local && strcmp(local, "true") && strcmp(local, "false")) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "local must be true or false");
        goto fail;
    }
    bool          dist = api_distributed(r);
    api_map_req_t mr;     /* 5.7.1.4: a map is read only where something can be forwarded */
    if (!api_entity_map_params(r, dist, &mr, &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;

    ops_req_t    rq = api_req(r, ctx);
    cr_entity_t *e = ops_entity_retrieve(&rq, id, &o, &p);
    if (dist && (e || p.kind == PB_RESOURCE_NOT_FOUND || p.kind == PB_NONEXISTENT_TENANT)) {
        /* 5.7.1 distributed: the registered sources' versions merged with the local one */
        problem_t   q = {0};
        fwd_in_t    in;
        fwd_out_t   out;
        fwd_param_t prm[1];
        size_t      np = 0;
        const typesel_t *ts = NULL;
        if (o.type) {
            if (!(ts = typesel_parse(r->arena, o.type, ctx, &q))) ts = NULL;
            prm[np++] = (fwd_param_t){"type", o.type};
        }
        api_fwd_in(r, ctx, &in);
        if (!(mr.want ? api_entity_map_retrieve(r, &in, id, ts, v.attrs, v.n_attrs, prm, np, e, &mr, &out, &q)
                      : fwd_retrieve(&in, id, ts, v.attrs, v.n_attrs, prm, np, e, &out, &q))) {
            if (e) entity_unref(e);
            p = q;
            goto fail;
        }
        if (out.warning) reply_header(r, "NGSILD-Warning", out.warning);
        if (out.forwarded) {
            if (e) entity_unref(e);
            e = out.n ? out.items[0] : NULL;
            if (!e) problem_set(&p, PB_RESOURCE_NOT_FOUND, "entity '%s' not found here nor at its registered sources", id);
        }
    }
    if (!e) goto fail;
    api_view_context(r, ctx, &v);
    bool ok = api_render(r, ctx, &v, &e, 1, false, &p);
    entity_unref(e);
    if (!ok) goto fail;
    reply_body(r, 200, v.ctype);
    return;
fail:
    reply_problem(r, &p);
}

void api_entity_delete(request_t *r)
{
    problem_t   p = {0};
    const char *id = r->pathv[0];
    static api_params_t known = API_PARAMS("type,local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!ops_check_id(id, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    const char         *type = req_param(r, "type");   /* ?type=: checked by the store in its atomic step */
    const ld_context_t *ctx = NULL;
    if (!api_no_unknown_params(r, &p)) goto fail;
    if (type && !(ctx = api_context(r, NULL, &p))) goto fail;
    if (api_distributed(r)) {
        /* 5.6.6 distributed: the sources registered for the entity delete it too */
        if (!ctx && !(ctx = api_context(r, NULL, &p))) goto fail;
        ops_req_t   rq = api_req(r, ctx);
        fwd_wout_t  out;
        fwd_write_t w = {.op = REG_OP_DELETE_ENTITY, .method = "DELETE", .id = id, .type = type,
                         .types_of = api_dw_local_types, .types_ud = &(api_dw_types_t){.r = r, .ctx = ctx, .id = id}};
        if (!api_fwd_write(r, ctx, &w, &out, &p)) goto fail;
        if (out.n_sent) {
            problem_t lp = {0};
            bool      ok = out.local_skip || ops_entity_delete(&rq, id, type, &lp);
            if (!api_reply_dwrite(r, id, !out.local_skip, ok, &lp, &out)) reply_status(r, 204);
            return;
        }
    }
    ops_req_t rq = api_req(r, ctx);
    if (!ops_entity_delete(&rq, id, type, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

/* The body of PATCH/PUT /entities/{id} and its @context. */
static json_t *entity_body(request_t *r, const ld_context_t **ctx, problem_t *p)
{
    if (!ops_check_id(r->pathv[0], p)) return NULL;
    return api_body_context(r, ctx, p);
}

/* PATCH /entities/{id} (5.6.17, Table 6.5.3.4-1): format, lang, observedAt. */
void api_entity_merge(request_t *r)
{
    problem_t   p = {0};
    ops_merge_t o = {0};
    const char *fmt = req_param(r, "format");
    const char *obs = req_param(r, "observedAt");
    const ld_context_t *ctx;

    static api_params_t known = API_PARAMS("format,options,observedAt,lang,type,local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    o.key_values = api_option(r, "keyValues") || api_option(r, "simplified");
    o.lang = req_param(r, "lang");
    if (fmt) {
        if (!strcmp(fmt, "keyValues") || !strcmp(fmt, "simplified")) o.key_values = true;
        else if (strcmp(fmt, "normalized") && strcmp(fmt, "concise")) {
            problem_set(&p, PB_INVALID_REQUEST, "format must be normalized, concise, keyValues or simplified, "
                        "not '%s' (6.3.7, 6.3.20)", fmt);
            goto fail;
        }
    }
    if (obs && !cr_datetime_parse(obs, &o.observed_at)) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "observedAt '%s' is not a DateTime", obs);
        goto fail;
    }
    if (o.lang && (!*o.lang || strchr(o.lang, ',') || strchr(o.lang, '*'))) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "lang must be one language tag, not '%s'", o.lang);
        goto fail;
    }
    o.type = req_param(r, "type");
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = entity_body(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t   rq = api_req(r, ctx);
    fwd_wout_t  out = {0};
    if (api_distributed(r)) {
        fwd_write_t w = {.op = REG_OP_MERGE_ENTITY, .method = "PATCH", .id = r->pathv[0], .type = o.type,
                         .body = body,
                         .types_of = api_dw_local_types, .check = o.key_values ? NULL : api_dw_check,
                         .types_ud = &(api_dw_types_t){r, ctx, r->pathv[0], body, EP_MERGE, false}};
        if (!api_fwd_write(r, ctx, &w, &out, &p)) goto fail;     /* 5.6.17 distributed */
    }
    if (out.n_sent) {
        problem_t lp = {0};
        bool      ok = out.local_skip || ops_entity_merge(&rq, r->pathv[0], out.local, &o, &lp);
        if (!api_reply_dwrite(r, r->pathv[0], !out.local_skip, ok, &lp, &out)) reply_status(r, 204);
        return;
    }
    if (!ops_entity_merge(&rq, r->pathv[0], body, &o, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_entity_replace(request_t *r)
{
    problem_t p = {0};
    const ld_context_t *ctx;
    static api_params_t known = API_PARAMS("type,local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    const char *type = req_param(r, "type");
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = entity_body(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t   rq = api_req(r, ctx);
    fwd_wout_t  out = {0};
    if (api_distributed(r)) {
        fwd_write_t w = {.op = REG_OP_REPLACE_ENTITY, .method = "PUT", .id = r->pathv[0], .body = body,
                         .check = api_dw_check,
                         .types_ud = &(api_dw_types_t){r, ctx, r->pathv[0], body, 0, true}};
        if (!api_fwd_write(r, ctx, &w, &out, &p)) goto fail;     /* 5.6.18 distributed */
    }
    if (out.n_sent) {
        problem_t lp = {0};
        bool      ok = out.local_skip || ops_entity_replace(&rq, r->pathv[0], out.local, type, &lp);
        if (!api_reply_dwrite(r, r->pathv[0], !out.local_skip, ok, &lp, &out)) reply_status(r, 204);
        return;
    }
    if (!ops_entity_replace(&rq, r->pathv[0], body, type, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
