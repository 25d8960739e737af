/*
 * subscriptions.c - /subscriptions (6.10: POST create, GET query) and
 * /subscriptions/{subscriptionId} (6.11: GET, PATCH, DELETE), the HTTP
 * binding of 5.8.1-5.8.5 (ops/subscriptions.c); and the same for
 * /csourceSubscriptions (6.12, 6.13: 5.11.2-5.11.6, ops/csubscriptions.c),
 * which differ only in the operations called.
 */
#include "api.h"

#include "../fwd/fwd_sub.h"
#include "../notify/notify.h"

#include <string.h>

/* The operations of one kind of subscription. */
typedef struct sub_kind {
    const char *collection;
    bool (*create)(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p);
    notify_sub_t *(*retrieve)(const ops_req_t *rq, const char *id, problem_t *p);
    bool (*update)(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p);
    bool (*del)(const ops_req_t *rq, const char *id, problem_t *p);
    notify_sub_t **(*query)(const ops_req_t *rq, size_t offset, size_t limit, size_t *n, size_t *total,
                            problem_t *p);
} sub_kind_t;

static const sub_kind_t k_sub = {"/ngsi-ld/v1/subscriptions/", ops_sub_create, ops_sub_retrieve, ops_sub_update,
                                 ops_sub_delete, ops_sub_query};
static const sub_kind_t k_csub = {"/ngsi-ld/v1/csourceSubscriptions/", ops_csub_create, ops_csub_retrieve,
                                  ops_csub_update, ops_csub_delete, ops_csub_query};

static void sub_create(request_t *r, const sub_kind_t *k)
{
    problem_t   p = {0};
    const char *id;
    const ld_context_t *ctx;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t rq = api_req(r, ctx);
    if (k == &k_sub && !fwd_sub_admit(body, req_header(r, "Via"), &p)) goto fail;   /* 5.8.1.4: a loop */
    if (!k->create(&rq, body, &id, &p)) goto fail;
    api_reply_created(r, k->collection, id);
    return;
fail:
    reply_problem(r, &p);
}

/* Accept (the router has refused what is not json or ld+json, 6.3.4): with
 * ld+json each subscription carries its @context. */
static bool sub_accept(request_t *r, bool *ld, problem_t *p)
{
    (void)p;
    *ld = req_accept_best(r, ACC_JSON | ACC_LDJSON) == ACC_LDJSON;
    return true;
}

static void sub_get(request_t *r, const sub_kind_t *k)
{
    problem_t p = {0};
    bool      ld;
    if (!sub_accept(r, &ld, &p)) goto fail;
    if (!api_options_valid(r, "sysAttrs", &p)) goto fail;
    bool sys = api_option(r, "sysAttrs");
    if (!api_no_unknown_params(r, &p)) goto fail;
    /* the answer is in the request's @context (6.3.5), the names re-termed */
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    ops_req_t     rq = api_req(r, NULL);
    notify_sub_t *s = k->retrieve(&rq, r->pathv[0], &p);
    if (!s) goto fail;
    json_writer_t w;
    jw_init(&w, &r->out);
    notify_sub_render_in(&w, s, ctx, ld, sys);
    if (!ld) {
        sbuf_t link;
        sb_init(&link, r->arena, 256);
        sb_printf(&link, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"",
                  ld_context_link(ctx));
        reply_header(r, "Link", link.p);
    }
    notify_sub_unref(s);
    reply_body(r, 200, ld ? "application/ld+json" : "application/json");
    return;
fail:
    reply_problem(r, &p);
}

static void sub_query(request_t *r, const sub_kind_t *k)
{
    problem_t p = {0};
    bool      ld;
    size_t    limit, offset, n, total;
    if (!sub_accept(r, &ld, &p)) goto fail;
    const char *ls = req_param(r, "limit"), *os = req_param(r, "offset");
    limit = (size_t)cr_config.default_limit;
    offset = 0;
    if (ls && !api_uint_param(ls, "limit", &limit, &p)) goto fail;
    if (os && !api_uint_param(os, "offset", &offset, &p)) goto fail;
    if (!api_options_valid(r, "count,sysAttrs", &p)) goto fail;
    bool count = api_option(r, "count"), sys = api_option(r, "sysAttrs");
    const char *cnt = req_param(r, "count");
    if (cnt) {
        if (strcmp(cnt, "true") && strcmp(cnt, "false")) {
            problem_set(&p, PB_BAD_REQUEST_DATA, "count must be true or false");
            goto fail;
        }
        count = count || !strcmp(cnt, "true");
    }
    if (limit == 0 && !count) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "limit=0 is only allowed together with count=true (6.3.10)");
        goto fail;
    }
    if (!api_no_unknown_params(r, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    ops_req_t      rq = api_req(r, NULL);
    notify_sub_t **v = k->query(&rq, offset, limit, &n, &total, &p);
    if (!v) goto fail;
    json_writer_t w;
    jw_init(&w, &r->out);
    jw_array_begin(&w);
    for (size_t i = 0; i < n; i++) {
        notify_sub_render_in(&w, v[i], ctx, ld, sys);
        notify_sub_unref(v[i]);
    }
    jw_array_end(&w);
    const char *ctype = ld ? "application/ld+json" : "application/json";
    if (count) {
        char buf[24];
        snprintf(buf, sizeof buf, "%zu", total);
        reply_header(r, "NGSILD-Results-Count", arena_strdup(r->arena, buf));
    }
    if (offset + n < total && limit) api_page_link(r, "next", offset + n, limit, ctype);
    if (offset > 0 && limit) api_page_link(r, "prev", offset > limit ? offset - limit : 0, limit, ctype);
    reply_body(r, 200, ctype);
    return;
fail:
    reply_problem(r, &p);
}

static void sub_update(request_t *r, const sub_kind_t *k)
{
    problem_t p = {0};
    const ld_context_t *ctx;
    if (!ops_check_id(r->pathv[0], &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t rq = api_req(r, ctx);
    if (!k->update(&rq, r->pathv[0], body, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

static void sub_delete(request_t *r, const sub_kind_t *k)
{
    problem_t p = {0};
    if (!api_no_unknown_params(r, &p)) goto fail;
    ops_req_t rq = api_req(r, NULL);
    if (!k->del(&rq, r->pathv[0], &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_sub_create(request_t *r) { sub_create(r, &k_sub); }
void api_sub_get(request_t *r) { sub_get(r, &k_sub); }
void api_sub_query(request_t *r) { sub_query(r, &k_sub); }
void api_sub_update(request_t *r) { sub_update(r, &k_sub); }
void api_sub_delete(request_t *r) { sub_delete(r, &k_sub); }
void api_csub_create(request_t *r) { sub_create(r, &k_csub); }
void api_csub_get(request_t *r) { sub_get(r, &k_csub); }
void api_csub_query(request_t *r) { sub_query(r, &k_csub); }
void api_csub_update(request_t *r) { sub_update(r, &k_csub); }
void api_csub_delete(request_t *r) { sub_delete(r, &k_csub); }

/* POST /dsub/{key}: a context source notifies a subscription this broker
 * planted there (fwd_sub.h); relayed to the subscriber. The key is the
 * credential (the route is public: a source has no token of this broker's). */
static cr_entity_t *dsub_local(const char *tenant, const char *id, arena_t *a)
{
    problem_t p = {0};
    ops_req_t rq = {.store = api_store, .tenant = tenant, .arena = a};
    return ops_entity_retrieve(&rq, id, &(ops_retrieve_t){0}, &p);
}

void api_dsub_notify(request_t *r)
{
    problem_t p = {0};
    json_t   *body = api_body(r, false, &p);
    if (!body || !fwd_sub_receive(r->pathv[0], body, dsub_local, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
