/*
 * batch.c - the batch operations: create (5.6.7), upsert (5.6.8), update
 * (5.6.9), delete (5.6.10) and merge (5.6.20).
 *
 * Each entity of the batch is validated on its own, then all the valid ones
 * are written in ONE store_batch(): one atomic step of the tenant, whose
 * changes reach the hooks as one group. A failing entity is reported in the
 * BatchOperationResult (5.2.17) with its ProblemDetails and changes nothing
 * of itself, and never stops the others. The ids of the successes are
 * pointers into the body (an array of n pointers); an error record is
 * allocated only when an entity fails (the per-item records the store
 * fills live in a scratch arena freed before returning). A batch holds at
 * most --maxBatchSize entities (BadRequestData beyond: the atomic step
 * holds the tenant's write lock for all of them). One store_batch is also
 * one group of corDB's log, recovered whole or not at all; when the store
 * cannot run it (the log failed: 503, a tenant never written, the tenant
 * limit), nothing is applied and the request fails as a whole.
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

/* A batch above --maxBatchSize is refused whole: its atomic step holds the
 * tenant's write lock for every entity of it (store_batch). */
static bool batch_size_ok(size_t n, problem_t *p)
{
    if (n > (size_t)cr_config.max_batch_size)
        return problem_set(p, PB_BAD_REQUEST_DATA, "the batch holds %zu entities, more than %d (--maxBatchSize)", n,
                           cr_config.max_batch_size);
    return true;
}

bool ops_batch_check(const json_t *body, problem_t *p)
{
    bool has_null = false;
    if (!json_is_array(body)) return problem_set(p, PB_BAD_REQUEST_DATA, "the body must be a JSON array");
    json_foreach(e, body) has_null |= e->type == JSON_NULL;
    return batch_valid(body->len, has_null, p) && batch_size_ok(body->len, p);
}

/* The outcome of one item after store_batch: an update that left an
 * attribute not updated fails the entity (5.6.9.4). */
static bool item_ok(store_batch_item_t *it, problem_t *p)
{
    if (!it->ok) {
        *p = *it->problem;
        return false;
    }
    const op_result_t *r = it->res;
    if (!r || !r->n_not_updated) return true;
    const char *why = r->n && r->items[0].reason ? r->items[0].reason : "";
    return problem_set(p, PB_BAD_REQUEST_DATA, "%zu attribute(s) not updated%s%s", r->n_not_updated, *why ? ": " : "", why);
}

/* The items that passed validation go to the store in one store_batch()
 * (one atomic step, one group of changes for the hooks); the items, their
 * problems and the store's scratch live in a scratch arena freed at the
 * end, so that what stays in rq->arena is the ok ids and one record per
 * failure. idx[k]: the member of item k; item_of[i]: the item of member i,
 * or SIZE_MAX when member i failed before (its problem in pre[i]). */
static bool batch_run(const ops_req_t *rq, size_t n, store_batch_item_t *items, size_t n_items, const size_t *item_of,
                      const problem_t *const *pre, const char *const *ids, arena_t *scratch, ops_batch_result_t *res,
                      problem_t *p)
{
    if (n_items && !ops_admit(rq, n_items, p)) return false;
    if (n_items && !ops_admitted(rq, n_items, store_batch(rq->store, rq->tenant, items, n_items, scratch, p)))
        return false;
    for (size_t i = 0; i < n; i++) {
        problem_t ep = {0};
        if (item_of[i] == SIZE_MAX) {
            result_fail(rq, res, ids[i], pre[i]);
            continue;
        }
        store_batch_item_t *it = &items[item_of[i]];
        if (!item_ok(it, &ep)) {
            result_fail(rq, res, ids[i], &ep);
            continue;
        }
        res->ok[res->n_ok++] = ids[i];
        if (it->created) res->created[res->n_created++] = ids[i];
    }
    return true;
}

static store_batch_kind_t item_kind(ops_batch_kind_t kind, const ops_batch_opts_t *o)
{
    switch (kind) {
    case OPS_BATCH_CREATE: return STORE_B_CREATE;
    case OPS_BATCH_UPSERT: return o->replace ? STORE_B_UPSERT_REPLACE : STORE_B_UPSERT;
    case OPS_BATCH_UPDATE: return STORE_B_UPDATE;
    case OPS_BATCH_MERGE:  break;
    }
    return STORE_B_MERGE;
}

bool ops_batch_write(const ops_req_t *rq, ops_batch_kind_t kind, const ops_member_t *m, size_t n,
                     const ops_batch_opts_t *o, ops_batch_result_t *res, problem_t *p)
{
    bool has_null = false;
    for (size_t i = 0; i < n; i++) has_null |= !m[i].body || m[i].body->type == JSON_NULL;
    if (!batch_valid(n, has_null, p) || !batch_size_ok(n, p)) return false;
    result_init(rq, res, n, kind == OPS_BATCH_CREATE || kind == OPS_BATCH_UPSERT);

    arena_t             *scratch = arena_new(n * (sizeof(store_batch_item_t) + 64));
    store_batch_item_t  *items = arena_calloc(scratch, n * sizeof *items);
    size_t              *item_of = arena_alloc(scratch, n * sizeof *item_of);
    const problem_t    **pre = arena_calloc(scratch, n * sizeof *pre);
    const char         **ids = arena_alloc(scratch, n * sizeof *ids);
    size_t               k = 0;
    int64_t              now = cr_now_us();
    unsigned             flags = kind == OPS_BATCH_CREATE || kind == OPS_BATCH_UPSERT ? EP_CREATE : EP_FRAGMENT;
    if (kind == OPS_BATCH_MERGE) flags |= EP_MERGE;
    for (size_t i = 0; i < n; i++) {
        problem_t    ep = {0};
        cr_entity_t *d = member_parse(rq, &m[i], flags, now, &ep);
        ids[i] = d ? d->id : member_id(m[i].body);
        item_of[i] = SIZE_MAX;
        if (!d) {
            problem_t *kept = arena_alloc(scratch, sizeof *kept);
            *kept = ep;
            pre[i] = kept;
            continue;
        }
        store_batch_item_t *it = &items[k];
        it->kind = item_kind(kind, o);
        it->draft = d;
        it->args.no_overwrite = kind == OPS_BATCH_UPDATE && o->no_overwrite;
        if (kind == OPS_BATCH_UPDATE) it->res = arena_calloc(scratch, sizeof *it->res);
        item_of[i] = k++;
    }
    bool ok = batch_run(rq, n, items, k, item_of, pre, ids, scratch, res, p);
    arena_free(scratch);
    return ok;
}

bool ops_batch_delete(const ops_req_t *rq, const json_t *ids, ops_batch_result_t *res, problem_t *p)
{
    bool has_null = false;
    if (!json_is_array(ids)) return problem_set(p, PB_BAD_REQUEST_DATA, "the body must be a JSON array");
    json_foreach(e, ids) has_null |= e->type == JSON_NULL;
    if (!batch_valid(ids->len, has_null, p) || !batch_size_ok(ids->len, p)) return false;
    result_init(rq, res, ids->len, false);

    size_t               n = ids->len, i = 0, k = 0;
    arena_t             *scratch = arena_new(n * (sizeof(store_batch_item_t) + 64));
    store_batch_item_t  *items = arena_calloc(scratch, n * sizeof *items);
    size_t              *item_of = arena_alloc(scratch, n * sizeof *item_of);
    const problem_t    **pre = arena_calloc(scratch, n * sizeof *pre);
    const char         **idv = arena_alloc(scratch, n * sizeof *idv);
    json_foreach(e, ids) {
        problem_t ep = {0};
        idv[i] = json_is_string(e) ? e->str : NULL;
        item_of[i] = SIZE_MAX;
        if (!idv[i])
            problem_set(&ep, PB_BAD_REQUEST_DATA, "each member of a batch delete must be an entity id (a string)");
        if (!idv[i] || !ops_check_id(idv[i], &ep)) {
            problem_t *kept = arena_alloc(scratch, sizeof *kept);
            *kept = ep;
            pre[i++] = kept;
            continue;
        }
        items[k].kind = STORE_B_DELETE;
        items[k].id = idv[i];
        item_of[i++] = k++;
    }
    bool ok = batch_run(rq, n, items, k, item_of, pre, idv, scratch, res, p);
    arena_free(scratch);
    return ok;
}
