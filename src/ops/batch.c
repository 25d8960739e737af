/*
 * batch.c - the batch operations: create (5.6.7), upsert (5.6.8), update
 * (5.6.9), delete (5.6.10) and merge (5.6.20).
 *
 * Each entity of the batch is validated on its own, and the valid ones are
 * written in ONE store_batch (one atomic step, one group of the change
 * stream and of corDB's log, recovered whole or not at all); a failing
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
static bool member_update_result(const op_result_t *res, problem_t *p)
{
    if (!res->n_not_updated) return true;
    return problem_set(p, PB_BAD_REQUEST_DATA, "%zu attribute(s) not updated%s%s", res->n_not_updated,
                       res->items && res->n ? ": " : "",
                       res->n ? res->items[0].reason ? res->items[0].reason : "" : "");
}

/* The batch as ONE store_batch (one atomic step, one group of the change
 * stream and of corDB's log: all of it recovered or none). false only when
 * the store is unavailable (503: nothing applied); a batch the store could
 * not run at all (a nonexistent tenant, the tenant limit) fails each member. */
static bool batch_run(const ops_req_t *rq, store_batch_item_t *it, size_t k, problem_t *p)
{
    problem_t bp = {0};
    if (store_batch(rq->store, rq->tenant, it, k, rq->arena, &bp)) return true;
    if (bp.kind == PB_HTTP && bp.status == 503) {
        *p = bp;
        return false;
    }
    problem_t *q = arena_alloc(rq->arena, sizeof *q);
    *q = bp;
    for (size_t i = 0; i < k; i++) {
        it[i].ok      = false;
        it[i].problem = q;
    }
    return true;
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
    store_batch_item_t *it  = arena_calloc(rq->arena, n * sizeof *it);
    size_t             *pos = arena_alloc(rq->arena, n * sizeof *pos);   /* item -> member */
    cr_entity_t       **d   = arena_calloc(rq->arena, n * sizeof *d);
    problem_t         **ep  = arena_calloc(rq->arena, n * sizeof *ep);   /* parse failures only */
    op_result_t        *ur  = kind == OPS_BATCH_UPDATE ? arena_calloc(rq->arena, n * sizeof *ur) : NULL;
    size_t              k   = 0;
    for (size_t i = 0; i < n; i++) {
        problem_t mp = {0};
        d[i] = member_parse(rq, &m[i], flags, now, &mp);
        if (!d[i]) {
            ep[i]  = arena_alloc(rq->arena, sizeof *ep[i]);
            *ep[i] = mp;
            continue;
        }
        store_batch_item_t *x = &it[k];
        x->draft = d[i];
        switch (kind) {
        case OPS_BATCH_CREATE: x->kind = STORE_B_CREATE; break;
        case OPS_BATCH_UPSERT: x->kind = o->replace ? STORE_B_UPSERT_REPLACE : STORE_B_UPSERT; break;
        case OPS_BATCH_UPDATE:
            x->kind = STORE_B_UPDATE;
            x->args.no_overwrite = o->no_overwrite;
            x->res = &ur[i];
            break;
        case OPS_BATCH_MERGE: x->kind = STORE_B_MERGE; break;
        }
        pos[k++] = i;
    }
    if (k && !batch_run(rq, it, k, p)) return false;
    for (size_t j = 0, i = 0; i < n; i++) {
        bool       ok = false, created = false;
        problem_t  up = {0};
        problem_t *why = ep[i];
        if (d[i] && j < k && pos[j] == i) {
            store_batch_item_t *x = &it[j++];
            ok      = x->ok;
            created = x->created;
            if (!ok) why = x->problem;
            else if (kind == OPS_BATCH_UPDATE && !(ok = member_update_result(&ur[i], &up))) why = &up;
        }
        if (!ok) {
            result_fail(rq, res, member_id(m[i].body), why);
            continue;
        }
        res->ok[res->n_ok++] = d[i]->id;
        if (created) res->created[res->n_created++] = d[i]->id;
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
    size_t              n  = ids->len, k = 0;
    store_batch_item_t *it = arena_calloc(rq->arena, n * sizeof *it);
    json_foreach(e, ids) {
        if (json_is_string(e) && ops_check_id(e->str, NULL)) {
            it[k].kind = STORE_B_DELETE;
            it[k].id   = e->str;
            k++;
        }
    }
    if (k && !batch_run(rq, it, k, p)) return false;
    size_t j = 0;
    json_foreach(e, ids) {
        problem_t ep = {0};
        if (!json_is_string(e)) {
            problem_set(&ep, PB_BAD_REQUEST_DATA, "each member of a batch delete must be an entity id (a string)");
            result_fail(rq, res, NULL, &ep);
        } else if (!ops_check_id(e->str, &ep)) {
            result_fail(rq, res, e->str, &ep);
        } else {
            store_batch_item_t *x = &it[j++];
            if (x->ok) res->ok[res->n_ok++] = e->str;
            else result_fail(rq, res, e->str, x->problem);
        }
    }
    return true;
}
