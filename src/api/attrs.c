/*
 * attrs.c - /entities/{entityId}/attrs/ (POST append, PATCH update) and
 * /entities/{entityId}/attrs/{attrId} (PATCH partial update, PUT replace,
 * DELETE): clauses 6.6.3.1-2, 6.7.3.1-3 and operations 5.6.2-5.6.5, 5.6.19.
 * Partial success answers 207 with an UpdateResult (5.2.18).
 */
#include "api.h"

#include <string.h>

static void answer(request_t *r, const op_result_t *res)
{
    if (res->n_not_updated) api_render_update_result(r, res);
    else reply_status(r, 204);
}

/* POST and PATCH /attrs share everything but the operation. */
static void attrs_write(request_t *r, entity_op_t op)
{
    problem_t   p = {0};
    op_args_t   args = {0};
    op_result_t res = {0};
    const char *id = r->pathv[0];

    if (!api_check_id(id, &p)) goto fail;
    if (op == OP_APPEND_ATTRS) args.no_overwrite = api_option(r, "noOverwrite");
    else (void)req_param(r, "options");
    if (!api_check_type_param(r, id, &p)) goto fail;   /* 6.6.3.1/6.6.3.2 ?type= */
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body(r, false, &p);
    if (!body) goto fail;
    const ld_context_t *ctx = api_context(r, body, &p);
    if (!ctx) goto fail;
    unsigned flags = EP_FRAGMENT | (op == OP_UPDATE_ATTRS ? EP_MERGE : 0);
    cr_entity_t *patch = entity_parse(r->arena, body, ctx, flags, cr_now_us(), &p);
    if (!patch) goto fail;
    if (patch->n_attrs == 0 && patch->n_types == 0 && !patch->scope) {   /* 5.6.3.4: types and scope count */
        problem_set(&p, PB_BAD_REQUEST_DATA, "the body holds no attribute, type or scope");
        goto fail;
    }
    if (!store_modify(api_store, r->tenant, id, op, patch, &args, &res, r->arena, &p)) goto fail;
    answer(r, &res);
    return;
fail:
    reply_problem(r, &p);
}

void api_attrs_append(request_t *r) { attrs_write(r, OP_APPEND_ATTRS); }
void api_attrs_update(request_t *r) { attrs_write(r, OP_UPDATE_ATTRS); }

/* id, type and scope are members of the entity, not attributes (5.6.4.4, 5.6.19.4). */
static bool attr_name_ok(const char *name, problem_t *p)
{
    static const char *reserved[] = {"id", "@id", "type", "@type", "scope", "@context", "createdAt", "modifiedAt"};
    for (size_t i = 0; i < CR_ARRAY_LEN(reserved); i++)
        if (!strcmp(name, reserved[i]))
            return problem_set(p, PB_BAD_REQUEST_DATA, "'%s' is not an attribute and cannot be changed here", name);
    if (!model_valid_name(name) && !strchr(name, ':'))
        return problem_set(p, PB_BAD_REQUEST_DATA, "invalid attribute name '%s'", name);
    return true;
}

/* PATCH and PUT /attrs/{attrId}: the body is one attribute. */
static void attr_write(request_t *r, entity_op_t op)
{
    problem_t   p = {0};
    op_args_t   args = {0};
    const char *id = r->pathv[0];
    const char *name = r->pathv[1];

    if (!api_check_id(id, &p)) goto fail;
    if (!attr_name_ok(name, &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body(r, false, &p);
    if (!body) goto fail;
    const ld_context_t *ctx = api_context(r, body, &p);
    if (!ctx) goto fail;
    json_remove(body, "@context");
    args.attr_name = ld_expand(ctx, name);

    cr_attr_t   attr;
    int64_t     now = cr_now_us();
    unsigned    flags = op == OP_PARTIAL_ATTR ? (EP_PARTIAL | EP_MERGE) : 0;
    if (!attr_parse(r->arena, args.attr_name, body, ctx, flags, now, &attr, &p)) goto fail;
    args.dataset_id = attr.dataset_id;

    cr_entity_t patch = {0};
    patch.id = id;
    patch.attrs = &attr;
    patch.n_attrs = 1;
    patch.created_at = patch.modified_at = now;
    if (!store_modify(api_store, r->tenant, id, op, &patch, &args, NULL, r->arena, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_attr_patch(request_t *r) { attr_write(r, OP_PARTIAL_ATTR); }
void api_attr_replace(request_t *r) { attr_write(r, OP_REPLACE_ATTR); }

void api_attr_delete(request_t *r)
{
    problem_t   p = {0};
    op_args_t   args = {0};
    const char *id = r->pathv[0];
    const char *name = r->pathv[1];

    if (!api_check_id(id, &p)) goto fail;
    if (!model_valid_name(name) && !strchr(name, ':')) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "invalid attribute name '%s'", name);
        goto fail;
    }
    const char *ds = req_param(r, "datasetId");
    const char *all = req_param(r, "deleteAll");
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
    args.attr_name = ld_expand(ctx, name);
    args.dataset_id = ds;
    args.delete_all = all && !strcmp(all, "true");
    if (!store_modify(api_store, r->tenant, id, OP_DELETE_ATTR, NULL, &args, NULL, r->arena, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
