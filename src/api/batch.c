/*
 * batch.c - /entityOperations/{create,upsert,update,delete,merge}: clauses
 * 6.14-6.17 and 6.31 (operations 5.6.7-5.6.10, 5.6.20).
 *
 * Each entity of the batch is validated and written on its own: a failing
 * entity is reported in the BatchOperationResult (5.2.17) with its
 * ProblemDetails and changes nothing of itself, and never stops the others.
 */
#include "api.h"

#include <string.h>

typedef struct batch {
    request_t  *r;
    const char **ok;           /* ids in "success" */
    size_t      n_ok, n_created;
    const char **created;      /* upsert: ids created */
    struct { const char *id; problem_t pb; } *err;
    size_t      n_err;
} batch_t;

static void batch_init(batch_t *b, request_t *r, size_t n)
{
    memset(b, 0, sizeof *b);
    b->r = r;
    size_t k = n ? n : 1;
    b->ok = arena_alloc(r->arena, k * sizeof *b->ok);
    b->created = arena_alloc(r->arena, k * sizeof *b->created);
    b->err = arena_alloc(r->arena, k * sizeof *b->err);
}

static void batch_fail(batch_t *b, const char *id, const problem_t *p)
{
    b->err[b->n_err].id = id;
    b->err[b->n_err].pb = *p;
    b->n_err++;
}

static void render_problem(json_writer_t *w, const problem_t *p)
{
    jw_object_begin(w);
    jw_key(w, "type");
    jw_string(w, problem_type_uri(p->kind));
    jw_key(w, "title");
    jw_string(w, problem_title(p->kind));
    jw_key(w, "status");
    jw_int(w, problem_status(p));
    jw_key(w, "detail");
    jw_string(w, p->detail);
    jw_object_end(w);
}

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
static void render_result(batch_t *b)
{
    json_writer_t w;
    request_t    *r = b->r;
    sb_clear(&r->out);
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "success");
    jw_array_begin(&w);
    for (size_t i = 0; i < b->n_ok; i++) jw_string(&w, b->ok[i]);
    jw_array_end(&w);
    jw_key(&w, "errors");
    jw_array_begin(&w);
    for (size_t i = 0; i < b->n_err; i++) {
        jw_object_begin(&w);
        jw_key(&w, "entityId");
        if (b->err[i].id) jw_string(&w, b->err[i].id);
        else jw_null(&w);
        jw_key(&w, "error");
        render_problem(&w, &b->err[i].pb);
        jw_object_end(&w);
    }
    jw_array_end(&w);
    jw_object_end(&w);
    reply_body(r, 207, "application/json");
}

/* The id of a batch member, for error reports, when it has one. */
static const char *member_id(const json_t *e)
{
    const json_t *id = json_is_object(e) ? json_get(e, "id") : NULL;
    if (!id && json_is_object(e)) id = json_get(e, "@id");
    return json_is_string(id) ? id->str : NULL;
}

/* Validates one entity of the body; NULL (with p) when it is not acceptable. */
static cr_entity_t *member_parse(request_t *r, const json_t *e, unsigned flags, int64_t now, problem_t *p)
{
    if (!json_is_object(e)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "each member of the batch must be a JSON object (an entity)");
        return NULL;
    }
    const ld_context_t *ctx = api_context_of(r, e, p);
    if (!ctx) return NULL;
    const char *id = member_id(e);
    if (!id) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the entity has no id");
        return NULL;
    }
    if (!model_valid_uri(id)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "'%s' is not a valid entity id (a URI)", id);
        return NULL;
    }
    cr_entity_t *d = entity_parse(r->arena, e, ctx, flags, now, p);
    if (d && !d->id) d->id = id;
    return d;
}

/* The body of a batch: a non-empty array without null members (5.6.7-5.6.10:
 * an empty batch or a null member makes the whole request invalid). */
static json_t *batch_body(request_t *r, problem_t *p)
{
    json_t *body = api_body(r, true, p);
    if (!body) return NULL;
    if (body->len == 0) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the batch is empty");
        return NULL;
    }
    json_foreach(e, body)
        if (e->type == JSON_NULL) {
            problem_set(p, PB_BAD_REQUEST_DATA, "a member of the batch is null");
            return NULL;
        }
    return body;
}

typedef enum { B_CREATE, B_UPSERT, B_UPDATE, B_MERGE } bkind_t;

static void batch_write(request_t *r, bkind_t kind)
{
    problem_t p = {0};
    batch_t   b;
    bool      replace = true, no_overwrite = false;

    if (!api_options_valid(r, kind == B_UPSERT ? "replace,update" : kind == B_UPDATE ? "noOverwrite" : "", &p))
        goto fail;
    if (kind == B_UPSERT) {
        bool upd = api_option(r, "update"), rep = api_option(r, "replace");
        if (upd && rep) {
            problem_set(&p, PB_BAD_REQUEST_DATA, "options replace and update exclude each other (6.15.3.1)");
            goto fail;
        }
        replace = !upd;
    } else if (kind == B_UPDATE) {
        no_overwrite = api_option(r, "noOverwrite");
    } else {
        (void)req_param(r, "options");
    }
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = batch_body(r, &p);
    if (!body) goto fail;
    if (!api_contexts_ready(r, body)) return;   /* deferred: runs again once downloaded */
    batch_init(&b, r, body->len);
    int64_t now = cr_now_us();

    json_foreach(e, body) {
        problem_t    ep = {0};
        const char  *id = member_id(e);
        unsigned     flags = kind == B_CREATE || kind == B_UPSERT ? EP_CREATE : EP_FRAGMENT;
        if (kind == B_MERGE) flags |= EP_MERGE;
        cr_entity_t *d = member_parse(r, e, flags, now, &ep);
        bool         ok = false, created = false;
        if (d) {
            switch (kind) {
            case B_CREATE:
                ok = store_create(api_store, r->tenant, d, &ep);
                created = ok;
                break;
            case B_UPSERT:
                ok = store_upsert(api_store, r->tenant, d, replace, &created, r->arena, &ep);
                break;
            case B_UPDATE: {
                op_result_t res = {0};
                op_args_t   args = {.no_overwrite = no_overwrite};
                ok = store_modify(api_store, r->tenant, d->id, OP_APPEND_ATTRS, d, &args, &res, r->arena, &ep);
                if (ok && res.n_not_updated) {
                    ok = false;
                    problem_set(&ep, PB_BAD_REQUEST_DATA, "%zu attribute(s) not updated%s%s", res.n_not_updated,
                                res.items && res.n ? ": " : "", res.n ? res.items[0].reason ? res.items[0].reason : "" : "");
                }
                break;
            }
            case B_MERGE:
                ok = store_modify(api_store, r->tenant, d->id, OP_MERGE_ENTITY, d, &(op_args_t){0}, NULL,
                                  r->arena, &ep);
                break;
            }
        }
        if (ok) {
            b.ok[b.n_ok++] = d->id;
            if (created) b.created[b.n_created++] = d->id;
        } else {
            batch_fail(&b, id, &ep);
        }
    }

    if (b.n_err) { render_result(&b); return; }
    switch (kind) {
    case B_CREATE: render_ids(r, b.ok, b.n_ok, 201); break;
    case B_UPSERT:
        if (b.n_created) render_ids(r, b.created, b.n_created, 201);
        else reply_status(r, 204);
        break;
    default: reply_status(r, 204); break;
    }
    return;
fail:
    reply_problem(r, &p);
}

void api_batch_create(request_t *r) { batch_write(r, B_CREATE); }
void api_batch_upsert(request_t *r) { batch_write(r, B_UPSERT); }
void api_batch_update(request_t *r) { batch_write(r, B_UPDATE); }
void api_batch_merge(request_t *r) { batch_write(r, B_MERGE); }

void api_batch_delete(request_t *r)
{
    problem_t p = {0};
    batch_t   b;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = batch_body(r, &p);
    if (!body) goto fail;
    batch_init(&b, r, body->len);
    json_foreach(e, body) {
        problem_t ep = {0};
        if (!json_is_string(e)) {
            problem_set(&ep, PB_BAD_REQUEST_DATA, "each member of a batch delete must be an entity id (a string)");
            batch_fail(&b, NULL, &ep);
        } else if (!model_valid_uri(e->str)) {
            problem_set(&ep, PB_BAD_REQUEST_DATA, "'%s' is not a valid entity id (a URI)", e->str);
            batch_fail(&b, e->str, &ep);
        } else if (store_delete(api_store, r->tenant, e->str, &ep)) {
            b.ok[b.n_ok++] = e->str;
        } else {
            batch_fail(&b, e->str, &ep);
        }
    }
    if (b.n_err) render_result(&b);
    else reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
