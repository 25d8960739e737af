/*
 * attrs.c - /entities/{entityId}/attrs/ (POST append, PATCH update) and
 * /entities/{entityId}/attrs/{attrId} (PATCH partial update, PUT replace,
 * DELETE): clauses 6.6.3.1-2, 6.7.3.1-3, the HTTP binding of operations
 * 5.6.2-5.6.5, 5.6.19 (ops/attrs.c). Partial success answers 207 with an
 * UpdateResult (5.2.18).
 */
#include "api.h"

#include "../fwd/fwd.h"

#include <string.h>

/* POST and PATCH /attrs share everything but the operation. */
static void attrs_write(request_t *r, bool append)
{
    problem_t   p = {0};
    op_result_t res = {0};
    const char *id = r->pathv[0];
    bool        no_overwrite = false;

    static api_params_t known = API_PARAMS("options,type,local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    if (!ops_check_id(id, &p)) goto fail;
    if (append) no_overwrite = api_option(r, "noOverwrite");
    else (void)req_param(r, "options");
    const char *type = req_param(r, "type");   /* 6.6.3.1/6.6.3.2 ?type=, checked by the store */
    if (!api_no_unknown_params(r, &p)) goto fail;
    const ld_context_t *ctx;
    json_t             *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t  rq = api_req(r, ctx);
    fwd_wout_t out = {0};
    if (api_distributed(r)) {
        /* 5.6.2.4, 5.6.3.4 distributed */
        fwd_write_t w = {.op = append ? REG_OP_APPEND_ATTRS : REG_OP_UPDATE_ATTRS, .method = append ? "POST" : "PATCH",
                         .id = id, .tail = "attrs", .type = type, .body = body,
                         .types_of = api_dw_local_types, .check = api_dw_check,
                         .types_ud = &(api_dw_types_t){r, ctx, id, body, append ? 0 : EP_MERGE, false}};
        if (!api_fwd_write(r, ctx, &w, &out, &p)) goto fail;
    }
    if (out.n_sent) {
        problem_t lp = {0};
        bool      ok = out.local_skip || (append ? ops_attrs_append(&rq, id, out.local, no_overwrite, type, &res, &lp)
                                                 : ops_attrs_update(&rq, id, out.local, type, &res, &lp));
        if (!api_reply_dwrite_attrs(r, ctx, !out.local_skip, ok, &lp, &res, &out)) reply_status(r, 204);
        return;
    }
    if (append ? !ops_attrs_append(&rq, id, body, no_overwrite, type, &res, &p)
               : !ops_attrs_update(&rq, id, body, type, &res, &p))
        goto fail;
    api_reply_update_result(r, &res);
    return;
fail:
    reply_problem(r, &p);
}

void api_attrs_append(request_t *r) { attrs_write(r, true); }
void api_attrs_update(request_t *r) { attrs_write(r, false); }

/* PATCH and PUT /attrs/{attrId}: the body is one attribute. */
static void attr_write(request_t *r, bool partial)
{
    problem_t   p = {0};
    const char *id = r->pathv[0];
    const char *name = r->pathv[1];

    static api_params_t known = API_PARAMS("type,local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    if (!ops_check_id(id, &p)) goto fail;
    if (!ops_check_attr_name(name, true, &p)) goto fail;
    const char *type = req_param(r, "type");   /* 6.7.3.1 / 6.7.3.3 ?type=, checked by the store */
    if (!api_no_unknown_params(r, &p)) goto fail;
    const ld_context_t *ctx;
    json_t             *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t  rq = api_req(r, ctx);
    fwd_wout_t out = {0};
    if (api_distributed(r)) {
        /* 5.6.4.4, 5.6.19.4 distributed */
        fwd_write_t w = {.op = partial ? REG_OP_UPDATE_ATTRS : REG_OP_REPLACE_ATTRS, .method = partial ? "PATCH" : "PUT",
                         .id = id, .tail = "attrs", .tail_attr = name, .type = type, .attr = ld_expand(ctx, name),
                         .body = body,
                         .attr_body = true,
                         .types_of = api_dw_local_types, .types_ud = &(api_dw_types_t){.r = r, .ctx = ctx, .id = id}};
        if (!api_fwd_write(r, ctx, &w, &out, &p)) goto fail;
    }
    if (out.n_sent) {
        problem_t lp = {0};
        bool      ok = out.local_skip || (partial ? ops_attr_patch(&rq, id, name, body, type, &lp)
                                                  : ops_attr_replace(&rq, id, name, body, type, &lp));
        if (!api_reply_dwrite(r, id, !out.local_skip, ok, &lp, &out)) reply_status(r, 204);
        return;
    }
    if (partial ? !ops_attr_patch(&rq, id, name, body, type, &p) : !ops_attr_replace(&rq, id, name, body, type, &p))
        goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_attr_patch(request_t *r) { attr_write(r, true); }
void api_attr_replace(request_t *r) { attr_write(r, false); }

void api_attr_delete(request_t *r)
{
    problem_t   p = {0};
    const char *id = r->pathv[0];
    const char *name = r->pathv[1];

    static api_params_t known = API_PARAMS("datasetId,deleteAll,type,local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    if (!ops_check_id(id, &p)) goto fail;
    if (!ops_check_attr_name(name, false, &p)) goto fail;
    const char *ds = req_param(r, "datasetId");
    const char *all = req_param(r, "deleteAll");
    const char *type = req_param(r, "type");   /* 6.7.3.2 ?type=, checked by the store */
    if (all && strcmp(all, "true") && strcmp(all, "false")) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "deleteAll must be true or false");
        goto fail;
    }
    if (ds && !model_valid_uri(ds)) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "datasetId '%s' is not a URI", ds);
        goto fail;
    }
    if (!api_no_unknown_params(r, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    ops_req_t  rq = api_req(r, ctx);
    fwd_wout_t out = {0};
    if (api_distributed(r)) {
        /* 5.6.5.4 distributed */
        fwd_write_t w = {.op = REG_OP_DELETE_ATTRS, .method = "DELETE", .id = id, .tail = "attrs", .tail_attr = name,
                         .type = type,
                         .attr = ld_expand(ctx, name),
                         .types_of = api_dw_local_types, .types_ud = &(api_dw_types_t){.r = r, .ctx = ctx, .id = id}};
        if (!api_fwd_write(r, ctx, &w, &out, &p)) goto fail;
    }
    if (out.n_sent) {
        problem_t lp = {0};
        bool      ok = out.local_skip || ops_attr_delete(&rq, id, name, ds, all && !strcmp(all, "true"), type, &lp);
        if (!api_reply_dwrite(r, id, !out.local_skip, ok, &lp, &out)) reply_status(r, 204);
        return;
    }
    if (!ops_attr_delete(&rq, id, name, ds, all && !strcmp(all, "true"), type, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
