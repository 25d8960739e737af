/*
 * batch.c - the batch operations: create (5.6.7), upsert (5.6.8), update
 * (5.6.9), delete (5.6.10) and merge (5.6.20).
 *
 * Each entity of the batch is validated and written on its own: a failing
 * entity is reported in the BatchOperationResult (5.2.17) with its
 * ProblemDetails and changes nothing of itself, and never stops the others.
 * The ids of the successes are pointers into the body (an array of n
 * pointers); an error record is allocated only when an entity fails.
 */
#include "ops.h"

#include <string.h>

static void result_init(const ops_req_t *rq, ops_batch_result_t *res, size_t n, bool created)
{
    memset(res, 0, sizeof *res);
    res->ok = arena_alloc(rq->arena, (n ? n : 1) * sizeof *res->ok);
    if (created) res->created = arena_alloc(rq->arena, (n ? n : 1) * sizeof *res->created);
}

static void result_fail(const ops_req_t *rq, ops_batch_result_t *res, const char *id, const problem_t *p)
{
    ops_batch_error_t *e = arena_alloc(rq->arena, sizeof *e);
    e->next = NULL;
    e->id = id;
    e->problem = *p;
    if (res->last) res->last->next = e;
    else res->errors = e;
    res->last = e;
    res->n_errors++;
}

/* The id of a batch member, for error reports, when it has one. */
static const char *member_id(const json_t *e)
{
    const json_t *id = json_is_object(e) ? json_get(e, "id") : NULL;
    if (!id && json_is_object(e)) id = json_get(e, "@id");
    return json_is_string(id) ? id->str : NULL;
}

/* Validates one entity of the body; NULL (with p) when it is not acceptable. */
static cr_entity_t *member_parse(const ops_req_t *rq, const ops_member_t *m, unsigned flags, int64_t now,
                                 problem_t *p)
{
    if (!json_is_object(m->body)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "each member of the batch must be a JSON object (an entity)");
        return NULL;
    }
    if (!m->ctx) {
        if (m->ctx_problem) *p = *m->ctx_problem;
        else problem_set(p, PB_INTERNAL_ERROR, "no @context for a member of the batch");
        return NULL;
    }
    const char *id = member_id(m->body);
    if (!id) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the entity has no id");
        return NULL;
    }
    if (!ops_check_id(id, p)) return NULL;
    cr_entity_t *d = entity_parse(rq->arena, m->body, m->ctx, flags, now, p);
    if (d && !d->id) d->id = id;
    return d;
}

/* 5.6.7-5.6.10: an empty batch or a null member makes the whole request invalid. */
static bool batch_valid(size_t n, bool has_null, problem_t *p)
{
    if (n == 0) return problem_set(p, PB_BAD_REQUEST_DATA, "the batch is empty");
    if (has_null) return problem_set(p, PB_BAD_REQUEST_DATA, "a member of the batch is null");
    return true;
}

/* One entity of an update batch: an attribute not updated fails the entity. */
static bool member_update(const ops_req_t *rq, const cr_entity_t *d, bool no_overwrite, problem_t *p)
{
    op_result_t res = {0};
    op_args_t   args = {.no_overwrite = no_overwrite};
    if (!store_modify(rq->store, rq->tenant, d->id, OP_APPEND_ATTRS, d, &args, &res, rq->arena, p)) return false;
    if (!res.n_not_updated) return true;
    return problem_set(p, PB_BAD_REQUEST_DATA, "%zu attribute(s) not updated%s%s", res.n_not_updated,
                       res.items && res.n ? ": " : "",
                       res.n ? res.items[0].reason ? res.items[0].reason : "" : "");
}

bool ops_batch_write(const ops_req_t *rq, ops_batch_kind_t kind, const ops_member_t *m, size_t n,
                     const ops_batch_opts_t *o, ops_batch_result_t *res, problem_t *p)
{
    bool has_null = false;
    for (size_t i = 0; i < n; i++) has_null |= !m[i].body || m[i].body->type == JSON_NULL;
    if (!batch_valid(n, has_null, p)) return false;
    result_init(rq, res, n, kind == OPS_BATCH_CREATE || kind == OPS_BATCH_UPSERT);

    int64_t  now = cr_now_us();
    unsigned flags = kind == OPS_BATCH_CREATE || kind == OPS_BATCH_UPSERT ? EP_CREATE : EP_FRAGMENT;
    if (kind == OPS_BATCH_MERGE) flags |= EP_MERGE;
    for (size_t i = 0; i < n; i++) {
        problem_t    ep = {0};
        cr_entity_t *d = member_parse(rq, &m[i], flags, now, &ep);
        bool         ok = false, created = false;
        if (d) {
            switch (kind) {
            case OPS_BATCH_CREATE:
                ok = created = store_create(rq->store, rq->tenant, d, &ep);
                break;
            case OPS_BATCH_UPSERT:
                ok = store_upsert(rq->store, rq->tenant, d, o->replace, &created, rq->arena, &ep);
                break;
            case OPS_BATCH_UPDATE:
                ok = member_update(rq, d, o->no_overwrite, &ep);
                break;
            case OPS_BATCH_MERGE:
                ok = store_modify(rq->store, rq->tenant, d->id, OP_MERGE_ENTITY, d, &(op_args_t){0}, NULL,
                                  rq->arena, &ep);
                break;
            }
        }
        if (!ok) {
            result_fail(rq, res, member_id(m[i].body), &ep);
            continue;
        }
        res->ok[res->n_ok++] = d->id;
        if (created) res->created[res->n_created++] = d->id;
    }
    return true;
}

bool ops_batch_delete(const ops_req_t *rq, const json_t *ids, ops_batch_result_t *res, problem_t *p)
{
    bool has_null = false;
    if (!json_is_array(ids)) return problem_set(p, PB_BAD_REQUEST_DATA, "the body must be a JSON array");
    json_foreach(e, ids) has_null |= e->type == JSON_NULL;
    if (!batch_valid(ids->len, has_null, p)) return false;
    result_init(rq, res, ids->len, false);
    json_foreach(e, ids) {
        problem_t ep = {0};
        if (!json_is_string(e)) {
            problem_set(&ep, PB_BAD_REQUEST_DATA, "each member of a batch delete must be an entity id (a string)");
            result_fail(rq, res, NULL, &ep);
        } else if (ops_check_id(e->str, &ep) && store_delete(rq->store, rq->tenant, e->str, &ep)) {
            res->ok[res->n_ok++] = e->str;
        } else {
            result_fail(rq, res, e->str, &ep);
        }
    }
    return true;
}
