/*
 * attrs.c - the operations on the attributes of one entity: append (5.6.3),
 * update (5.6.2), partial update of one attribute (5.6.4), replace one
 * (5.6.19) and delete one (5.6.5). Partial success of append/update is an
 * UpdateResult (5.2.18) in the op_result_t.
 */
#include "ops.h"

#include <string.h>

/* Append and update share everything but the operation. */
static bool attrs_write(const ops_req_t *rq, const char *id, const json_t *body, entity_op_t op,
                        op_args_t *args, const char *type, op_result_t *res, problem_t *p)
{
    if (!ops_check_id(id, p) || !ops_if_type(rq, type, &args->if_type, p)) return false;
    unsigned     flags = EP_FRAGMENT | (op == OP_UPDATE_ATTRS ? EP_MERGE : 0);
    cr_entity_t *patch = entity_parse(rq->arena, body, rq->ctx, flags, cr_now_us(), p);
    if (!patch) return false;
    if (patch->n_attrs == 0 && patch->n_types == 0 && !patch->scope)   /* 5.6.3.4: types and scope count */
        return problem_set(p, PB_BAD_REQUEST_DATA, "the body holds no attribute, type or scope");
    if (!ops_admit(rq, 1, p)) return false;
    return ops_admitted(rq, 1, store_modify(rq->store, rq->tenant, id, op, patch, args, res, rq->arena, p));
}

bool ops_attrs_append(const ops_req_t *rq, const char *id, const json_t *body, bool no_overwrite,
                      const char *type, op_result_t *res, problem_t *p)
{
    return attrs_write(rq, id, body, OP_APPEND_ATTRS, &(op_args_t){.no_overwrite = no_overwrite}, type, res, p);
}

bool ops_attrs_update(const ops_req_t *rq, const char *id, const json_t *body, const char *type, op_result_t *res,
                      problem_t *p)
{
    return attrs_write(rq, id, body, OP_UPDATE_ATTRS, &(op_args_t){0}, type, res, p);
}

/* Partial update and replace of one attribute: the body is the attribute. */
static bool attr_write(const ops_req_t *rq, const char *id, const char *name, json_t *body, entity_op_t op,
                       problem_t *p)
{
    op_args_t args = {0};
    cr_attr_t attr;
    int64_t   now = cr_now_us();
    unsigned  flags = op == OP_PARTIAL_ATTR ? (EP_PARTIAL | EP_MERGE) : 0;

    if (!ops_check_id(id, p) || !ops_check_attr_name(name, true, p)) return false;
    json_remove(body, "@context");
    args.attr_name = ld_expand(rq->ctx, name);
    if (!attr_parse(rq->arena, args.attr_name, body, rq->ctx, flags, now, &attr, p)) return false;
    args.dataset_id = attr.dataset_id;

    cr_entity_t patch = {0};
    patch.id = id;
    patch.attrs = &attr;
    patch.n_attrs = 1;
    patch.created_at = patch.modified_at = now;
    if (!ops_admit(rq, 1, p)) return false;
    return ops_admitted(rq, 1, store_modify(rq->store, rq->tenant, id, op, &patch, &args, NULL, rq->arena, p));
}

bool ops_attr_patch(const ops_req_t *rq, const char *id, const char *name, json_t *body, problem_t *p)
{
    return attr_write(rq, id, name, body, OP_PARTIAL_ATTR, p);
}

bool ops_attr_replace(const ops_req_t *rq, const char *id, const char *name, json_t *body, problem_t *p)
{
    return attr_write(rq, id, name, body, OP_REPLACE_ATTR, p);
}

bool ops_attr_delete(const ops_req_t *rq, const char *id, const char *name, const char *dataset_id,
                     bool delete_all, problem_t *p)
{
    if (!ops_check_id(id, p)) return false;
    if (!ops_check_attr_name(name, false, p)) return false;
    if (dataset_id && !model_valid_uri(dataset_id))
        return problem_set(p, PB_BAD_REQUEST_DATA, "datasetId '%s' is not a URI", dataset_id);
    /* the attribute must exist (else 404): a name never stored is not interned */
    op_args_t args = {.attr_name = ld_expand_lookup(rq->ctx, name, rq->arena), .dataset_id = dataset_id, .delete_all = delete_all};
    if (!ops_admit(rq, 1, p)) return false;
    return ops_admitted(rq, 1, store_modify(rq->store, rq->tenant, id, OP_DELETE_ATTR, NULL, &args, NULL, rq->arena, p));
}
