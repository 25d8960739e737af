/*
 * contexts.c - /jsonldContexts (6.29: POST Add, GET List) and
 * /jsonldContexts/{contextId} (6.30: GET Serve, DELETE Delete and Reload),
 * the HTTP binding of 5.13.2-5.13.5.
 *
 * The stored contexts are ld/'s (ld_stored_*: Cached documents and the core,
 * Hosted contexts, ImplicitlyCreated ones); hosted contexts are written
 * through ops/ (ops_ctx_add, ops_ctx_delete), which keeps them in the store.
 * Adding validates the context first as a request would use it, so its
 * remote documents are downloaded (and then listed as Cached) while the
 * request is deferred; a reload is a download too. The contextId may be a
 * local id or a percent-encoded URL (a Cached document's, or one served
 * here). Contexts are the broker's, not a tenant's: NGSILD-Tenant is not
 * read here.
 */
#include "api.h"

#include <string.h>

#define CONTEXTS_PATH "/ngsi-ld/v1/jsonldContexts/"

/* An optional boolean parameter v (req_param of name): absent (the default
 * stays), true or false; else BadRequestData. The parameters are read before
 * api_no_unknown_params, their values checked after it (6.3.20 first). */
static bool bool_param(const char *name, const char *v, bool *out, problem_t *p)
{
    if (!v) return true;
    if (!strcmp(v, "true")) *out = true;
    else if (!strcmp(v, "false")) *out = false;
    else return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be true or false, not '%.60s'", name, v);
    return true;
}

static const char *kind_name(ld_kind_t k)
{
    return k == LD_KIND_HOSTED ? "Hosted" : k == LD_KIND_IMPLICIT ? "ImplicitlyCreated" : "Cached";
}

static void write_time(json_writer_t *w, const char *key, int64_t ms)
{
    char t[32];
    cr_datetime_format(ms * 1000, t);
    jw_key(w, key);
    jw_string(w, t);
}

/* The members of 5.13.3.5, and nothing else. */
static void write_details(json_writer_t *w, const ld_info_t *e)
{
    jw_object_begin(w);
    jw_key(w, "URL");
    jw_string(w, e->url);
    jw_key(w, "localId");
    jw_string(w, e->local_id);
    jw_key(w, "kind");
    jw_string(w, kind_name(e->kind));
    write_time(w, "createdAt", e->created_ms);
    if (e->expires_ms) write_time(w, "expiresAt", e->expires_ms);
    if (e->last_used_ms) write_time(w, "lastUsage", e->last_used_ms);
    jw_key(w, "numberOfHits");
    jw_int(w, (int64_t)e->hits);
    if (!strcmp(e->local_id, "core")) {
        jw_key(w, "extraInfo");
        jw_string(w, "the NGSI-LD core @context, built into this broker");
    }
    jw_object_end(w);
}

static const char *answer_type(request_t *r)
{
    return req_accept_best(r, ACC_JSON | ACC_LDJSON) == ACC_LDJSON ? "application/ld+json" : "application/json";
}

void api_ctx_list(request_t *r)
{
    problem_t p = {0};
    bool      details = false;
    unsigned  kinds = LD_KIND_ALL;
    const char *dv = req_param(r, "details"), *k = req_param(r, "kind");
    if (!api_no_unknown_params(r, &p)) goto fail;
    if (!bool_param("details", dv, &details, &p)) goto fail;
    if (k) {
        if (!strcmp(k, "Cached")) kinds = LD_KIND_CACHED;
        else if (!strcmp(k, "Hosted")) kinds = LD_KIND_HOSTED;
        else if (!strcmp(k, "ImplicitlyCreated")) kinds = LD_KIND_IMPLICIT;
        else {
            problem_set(&p, PB_BAD_REQUEST_DATA, "kind must be Cached, Hosted or ImplicitlyCreated, not '%.60s'", k);
            goto fail;
        }
    }
    size_t     n;
    ld_info_t *v = ld_stored_list(r->arena, kinds, &n);
    json_writer_t w;
    jw_init(&w, &r->out);
    jw_array_begin(&w);
    for (size_t i = 0; i < n; i++) {
        if (details) write_details(&w, &v[i]);
        else jw_string(&w, v[i].url);
    }
    jw_array_end(&w);
    reply_body(r, 200, answer_type(r));
    return;
fail:
    reply_problem(r, &p);
}

void api_ctx_get(request_t *r)
{
    problem_t p = {0};
    bool      details = false;
    ld_info_t e;
    const char *dv = req_param(r, "details");
    if (!api_no_unknown_params(r, &p)) goto fail;
    if (!bool_param("details", dv, &details, &p)) goto fail;
    if (!ld_stored_find(r->arena, r->pathv[0], true, &e)) {
        problem_set(&p, PB_RESOURCE_NOT_FOUND, "no @context '%.300s' is stored here", r->pathv[0]);
        goto fail;
    }
    if (details) {
        json_writer_t w;
        jw_init(&w, &r->out);
        write_details(&w, &e);
    } else if (e.kind == LD_KIND_CACHED) {
        problem_set(&p, PB_OPERATION_NOT_SUPPORTED,
                    "@context '%.300s' is Cached: a cached copy is not served (5.13.4.4); details=true gives its "
                    "metadata", r->pathv[0]);
        goto fail;
    } else {
        sb_adds(&r->out, e.text);
    }
    reply_body(r, 200, answer_type(r));
    return;
fail:
    reply_problem(r, &p);
}

void api_ctx_create(request_t *r)
{
    problem_t   p = {0};
    const char *id;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body(r, false, &p);
    if (!body) goto fail;
    const json_t *value = json_get(body, "@context");
    if (!value) {
        /* the payload is a JSON-LD local context: without its root node it is
         * no such document at all (doc/api.md) */
        problem_set(&p, PB_INVALID_REQUEST, "the body must be a JSON object with an @context member (6.29.3.1)");
        goto fail;
    }
    ld_req_t *q = api_ld_req(r);
    if (!ld_req_validate(q, value, &p)) {
        if (ld_req_pending(q)) {
            req_defer(r);
            return;
        }
        goto fail;
    }
    ops_req_t rq = api_req(r, NULL);
    if (!ops_ctx_add(&rq, value, &id, &p)) goto fail;
    api_reply_created(r, CONTEXTS_PATH, id);
    return;
fail:
    reply_problem(r, &p);
}

/* A URL (scheme:...) rather than a local id. */
static bool looks_like_url(const char *s)
{
    const char *c = strchr(s, ':');
    return c && c > s && strchr(s, '/');
}

void api_ctx_delete(request_t *r)
{
    problem_t   p = {0};
    bool        reload = false;
    const char *id = r->pathv[0];
    ld_info_t   e;
    const char *rv = req_param(r, "reload");
    if (!api_no_unknown_params(r, &p)) goto fail;
    if (!bool_param("reload", rv, &reload, &p)) goto fail;
    if (!*id) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "the @context identifier is missing (5.13.5.4)");
        goto fail;
    }
    if (!ld_stored_find(r->arena, id, false, &e)) {
        if (reload && !looks_like_url(id))
            problem_set(&p, PB_BAD_REQUEST_DATA,
                        "reload=true: '%.300s' is neither a stored @context nor a URL to download it from", id);
        else
            problem_set(&p, PB_RESOURCE_NOT_FOUND, "no @context '%.300s' is stored here", id);
        goto fail;
    }
    bool core = !strcmp(e.local_id, "core");
    if (reload) {
        if (e.kind != LD_KIND_CACHED) {
            problem_set(&p, PB_BAD_REQUEST_DATA, "@context '%.300s' is %s: only a Cached one can be reloaded", id,
                        kind_name(e.kind));
            goto fail;
        }
        if (!core) {                                /* the core is built in: nothing to download */
            ld_req_t *q = api_ld_req(r);
            if (!ld_req_reload(q, e.url, &p)) {
                if (ld_req_pending(q)) {
                    req_defer(r);
                    return;
                }
                goto fail;
            }
        }
    } else if (core) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "the core @context cannot be deleted (it is built into this broker)");
        goto fail;
    } else if (e.kind == LD_KIND_HOSTED) {
        ops_req_t rq = api_req(r, NULL);
        if (!ops_ctx_delete(&rq, e.local_id, &p)) goto fail;
    } else if (!ld_stored_forget(&e)) {
        problem_set(&p, PB_RESOURCE_NOT_FOUND, "no @context '%.300s' is stored here", id);
        goto fail;
    }
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
