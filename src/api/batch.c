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

/* 207 BatchOperationResult (5.2.17) */
static void render_result(request_t *r, const ops_batch_result_t *res)
{
    json_writer_t w;
    sb_clear(&r->out);
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "success");
    jw_array_begin(&w);
    for (size_t i = 0; i < res->n_ok; i++) jw_string(&w, res->ok[i]);
    jw_array_end(&w);
    jw_key(&w, "errors");
    jw_array_begin(&w);
    for (const ops_batch_error_t *e = res->errors; e; e = e->next) {
        jw_object_begin(&w);
        jw_key(&w, "entityId");
        if (e->id) jw_string(&w, e->id);
        else jw_null(&w);
        jw_key(&w, "error");
        jw_problem(&w, &e->problem, NULL);
        jw_object_end(&w);
    }
    jw_array_end(&w);
    jw_object_end(&w);
    reply_body(r, 207, "application/json");
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

static void batch_write(request_t *r, ops_batch_kind_t kind)
{
    problem_t          p = {0};
    ops_batch_opts_t   o = {.replace = true};
    ops_batch_result_t res;

    static api_params_t known = API_PARAMS("options");
    if (!api_params_known(r, &known, &p)) goto fail;
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
    ops_req_t rq = api_req(r, NULL);
    if (!ops_batch_write(&rq, kind, members(r, body), body->len, &o, &res, &p)) goto fail;

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
    static api_params_t known = API_PARAMS("");
    if (!api_params_known(r, &known, &p)) goto fail;
    json_t *body = api_body(r, true, &p);
    if (!body) goto fail;
    ops_req_t rq = api_req(r, NULL);
    if (!ops_batch_delete(&rq, body, &res, &p)) goto fail;
    if (res.n_errors) render_result(r, &res);
    else reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
