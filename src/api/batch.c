/*
 * batch.c - /entityOperations/{create,upsert,update,delete,merge}: clauses
 * 6.14-6.17 and 6.31, the HTTP binding of the batch operations 5.6.7-5.6.10,
 * 5.6.20 (ops/batch.c).
 *
 * The binding resolves the @context of each entity of the body (6.3.5: with
 * application/ld+json each carries its own), hands the entities to the
 * operation, and answers 201 with the ids created, 204, or 207 with the
 * BatchOperationResult (5.2.17) when some entity failed.
 */
#include "api.h"

#include "../fwd/fwd.h"

#include <string.h>

static void render_ids(request_t *r, const char **ids, size_t n, int status)
{
    json_writer_t w;
    sb_clear(&r->out);
    jw_init(&w, &r->out);
    jw_array_begin(&w);
    for (size_t i = 0; i < n; i++) jw_string(&w, ids[i]);
    jw_array_end(&w);
    reply_body(r, status, "application/json");
}

/* The BatchEntityErrors of the local operation. */
static void local_errors(json_writer_t *w, const ops_batch_result_t *res)
{
    for (const ops_batch_error_t *e = res ? res->errors : NULL; e; e = e->next) {
        jw_object_begin(w);
        jw_key(w, "entityId");
        if (e->id) jw_string(w, e->id);
        else jw_null(w);
        jw_key(w, "error");
        jw_problem(w, &e->problem, NULL);
        jw_object_end(w);
    }
}

/* 207 BatchOperationResult (5.2.17): success ok[0..n_ok), the local
 * errors of res, then (bo) the failed parts at the sources, naming their
 * registration. */
static void render_207(request_t *r, const char *const *ok, size_t n_ok, const ops_batch_result_t *res, bool del,
                       const json_t *body, const fwd_bout_t *bo)
{
    json_writer_t w;
    sb_clear(&r->out);
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "success");
    jw_array_begin(&w);
    for (size_t i = 0; i < n_ok; i++) jw_string(&w, ok[i]);
    jw_array_end(&w);
    jw_key(&w, "errors");
    jw_array_begin(&w);
    local_errors(&w, res);
    size_t i = 0;
    for (const json_t *e = bo ? body->child : NULL; e; e = e->next) {
        const json_t *jid = del ? e : json_get(e, "id");
        for (size_t k = 0; k < bo->n_sent[i]; k++) {
            const fwd_sent_t *x = &bo->sent[i][k];
            if (x->ok) continue;
            jw_object_begin(&w);
            jw_key(&w, "entityId");
            jw_string(&w, jid->str);
            jw_key(&w, "registrationId");
            jw_string(&w, x->reg_id);
            jw_key(&w, "error");
            jw_problem(&w, &x->problem, NULL);
            jw_object_end(&w);
        }
        i++;
    }
    jw_array_end(&w);
    jw_object_end(&w);
    reply_body(r, 207, "application/json");
}

static void render_result(request_t *r, const ops_batch_result_t *res)
{
    render_207(r, res->ok, res->n_ok, res, false, NULL, NULL);
}

/* The entities of the body with their @context; a problem record only for
 * the entities whose @context cannot be had. */
static ops_member_t *members(request_t *r, const json_t *body)
{
    ops_member_t *m = arena_alloc(r->arena, (body->len ? body->len : 1) * sizeof *m);
    size_t        i = 0;
    json_foreach(e, body) {
        problem_t cp = {0};
        m[i].body = e;
        m[i].ctx = NULL;
        m[i].ctx_problem = NULL;
        if (json_is_object(e) && !(m[i].ctx = api_context_of(r, e, &cp))) {
            problem_t *kept = arena_alloc(r->arena, sizeof *kept);
            *kept = cp;
            m[i].ctx_problem = kept;
        }
        i++;
    }
    return m;
}

static const struct { reg_op_t op; const char *path; } batch_fwd[] = {
    [OPS_BATCH_CREATE] = {REG_OP_CREATE_BATCH, "entityOperations/create"},
    [OPS_BATCH_UPSERT] = {REG_OP_UPSERT_BATCH, "entityOperations/upsert"},
    [OPS_BATCH_UPDATE] = {REG_OP_UPDATE_BATCH, "entityOperations/update"},
    [OPS_BATCH_MERGE] = {REG_OP_MERGE_BATCH, "entityOperations/merge"},
};

static bool has_id(const char *const *v, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] && !strcmp(v[i], id)) return true;
    return false;
}

/* The answer of a distributed batch (5.6.7.4 ...): S, the entities that
 * succeeded somewhere (here or at a source), E every error, the sources'
 * naming their registration; 207 when E is not empty. ids: per member. */
static void render_distributed(request_t *r, ops_batch_kind_t kind, bool del, const json_t *body, const fwd_bout_t *bo,
                               const bool *tried, const ops_batch_result_t *res)
{
    size_t       n = body->len, i = 0, ns = 0, ne = res ? res->n_errors : 0;
    const char **s = arena_calloc(r->arena, (n + 1) * sizeof *s);
    json_foreach(e, body) {
        const json_t *jid = del ? e : json_get(e, "id");
        const char   *id = json_is_string(jid) ? jid->str : NULL;
        bool          ok = id && tried[i] && res && has_id(res->ok, res->n_ok, id);
        for (size_t k = 0; k < bo->n_sent[i]; k++) {
            ok = ok || bo->sent[i][k].ok;
            ne += !bo->sent[i][k].ok;
        }
        if (ok && !has_id(s, ns, id)) s[ns++] = id;
        i++;
    }
    if (!ne) {
        if (kind == OPS_BATCH_CREATE && !del) render_ids(r, s, ns, 201);
        else if (kind == OPS_BATCH_UPSERT && !del && res && res->n_created) render_ids(r, res->created, res->n_created, 201);
        else reply_status(r, 204);
        return;
    }
    render_207(r, s, ns, res, del, body, bo);
}

/* A batch at the registered sources, then its local rest: 0 when nothing
 * is registered for it (the caller runs it locally), 1 answered, -1 failed
 * as a whole (p). */
static int batch_distributed(request_t *r, ops_batch_kind_t kind, json_t *body, const ops_member_t *m,
                              const ops_batch_opts_t *o, problem_t *p)
{
    bool del = !m;
    problem_t q = {0};
    if (!api_distributed(r)) return 0;
    if (!ops_batch_check(body, &q)) return 0;     /* the operation reports it, nothing forwarded */
    size_t               n = body->len, i = 0;
    const json_t       **ents = arena_alloc(r->arena, (n + 1) * sizeof *ents);
    const ld_context_t **ctxs = arena_alloc(r->arena, (n + 1) * sizeof *ctxs);
    const ld_context_t  *ctx = NULL;
    if (del && !(ctx = api_context(r, NULL, p))) return -1;
    json_foreach(e, body) {
        const json_t *jid = del ? e : json_get(e, "id");
        ents[i] = e;
        ctxs[i] = del ? ctx : m[i].ctx;
        /* a member that will fail here anyway is not forwarded */
        if (!json_is_string(jid) || !ops_check_id(jid->str, &(problem_t){0})) ctxs[i] = NULL;
        if (!ctx && ctxs[i]) ctx = ctxs[i];
        i++;
    }
    if (!ctx) return 0;
    fwd_in_t   in;
    fwd_bout_t bo;
    api_fwd_in(r, ctx, &in);
    fwd_batch_t fb = {.op = del ? REG_OP_DELETE_BATCH : batch_fwd[kind].op,
                      .path = del ? "entityOperations/delete" : batch_fwd[kind].path,
                      .entities = ents, .ctxs = ctxs, .n = n, .update = o && !o->replace,
                      .no_overwrite = o && o->no_overwrite};
    if (!fwd_batch(&in, &fb, &bo, p)) return -1;
    if (!bo.forwarded) return 0;

    /* the local rest: the members with something left */
    bool         *tried = arena_calloc(r->arena, n + 1);
    ops_member_t *lm = arena_alloc(r->arena, (n + 1) * sizeof *lm);
    json_t       *lids = json_new(r->arena, JSON_ARRAY), *tail = NULL;
    size_t        k = 0;
    for (i = 0; i < n; i++) {
        if (!bo.local[i]) continue;
        tried[i] = true;
        if (del) json_push(lids, &tail, NULL, (json_t *)json_clone(r->arena, ents[i]));
        else {
            lm[k] = m[i];
            lm[k].body = bo.local[i];
        }
        k++;
    }
    ops_batch_result_t res;
    ops_req_t          rq = api_req(r, NULL);
    bool               have = false;
    if (k) {
        if (!(del ? ops_batch_delete(&rq, lids, &res, p) : ops_batch_write(&rq, kind, lm, k, o, &res, p))) return -1;
        have = true;
    }
    render_distributed(r, kind, del, body, &bo, tried, have ? &res : NULL);
    return 1;
}

static void batch_write(request_t *r, ops_batch_kind_t kind)
{
    problem_t          p = {0};
    ops_batch_opts_t   o = {.replace = true};
    ops_batch_result_t res;

    static api_params_t known = API_PARAMS("options,local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    if (!api_options_valid(r, kind == OPS_BATCH_UPSERT ? "replace,update" : kind == OPS_BATCH_UPDATE ? "noOverwrite" : "",
                           &p))
        goto fail;
    if (kind == OPS_BATCH_UPSERT) {
        bool upd = api_option(r, "update"), rep = api_option(r, "replace");
        if (upd && rep) {
            problem_set(&p, PB_BAD_REQUEST_DATA, "options replace and update exclude each other (6.15.3.1)");
            goto fail;
        }
        o.replace = !upd;
    } else if (kind == OPS_BATCH_UPDATE) {
        o.no_overwrite = api_option(r, "noOverwrite");
    } else {
        (void)req_param(r, "options");
    }
    if (!api_no_unknown_params(r, &p)) goto fail;
    if (!api_context_once(r, &p)) goto fail;
    json_t *body = api_body(r, true, &p);
    if (!body) goto fail;
    if (!api_contexts_ready(r, body)) return;   /* deferred: runs again once downloaded */
    ops_req_t     rq = api_req(r, NULL);
    ops_member_t *m = members(r, body);
    int d = batch_distributed(r, kind, body, m, &o, &p);
    if (d < 0) goto fail;
    if (d) return;
    if (!ops_batch_write(&rq, kind, m, body->len, &o, &res, &p)) goto fail;

    if (res.n_errors) render_result(r, &res);
    else if (kind == OPS_BATCH_CREATE) render_ids(r, res.ok, res.n_ok, 201);
    else if (kind == OPS_BATCH_UPSERT && res.n_created) render_ids(r, res.created, res.n_created, 201);
    else reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_batch_create(request_t *r) { batch_write(r, OPS_BATCH_CREATE); }
void api_batch_upsert(request_t *r) { batch_write(r, OPS_BATCH_UPSERT); }
void api_batch_update(request_t *r) { batch_write(r, OPS_BATCH_UPDATE); }
void api_batch_merge(request_t *r) { batch_write(r, OPS_BATCH_MERGE); }

void api_batch_delete(request_t *r)
{
    problem_t          p = {0};
    ops_batch_result_t res;
    static api_params_t known = API_PARAMS("local");
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    json_t *body = api_body(r, true, &p);
    if (!body) goto fail;
    int d = batch_distributed(r, OPS_BATCH_CREATE, body, NULL, NULL, &p);
    if (d < 0) goto fail;
    if (d) return;
    ops_req_t rq = api_req(r, NULL);
    if (!ops_batch_delete(&rq, body, &res, &p)) goto fail;
    if (res.n_errors) render_result(r, &res);
    else reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
