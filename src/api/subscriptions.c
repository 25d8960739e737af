/*
 * subscriptions.c - /subscriptions (6.10: POST create, GET query) and
 * /subscriptions/{subscriptionId} (6.11: GET, PATCH, DELETE), the HTTP
 * binding of 5.8.1-5.8.5 (ops/subscriptions.c).
 */
#include "api.h"

#include "../notify/notify.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void api_sub_create(request_t *r)
{
    problem_t   p = {0};
    const char *id;
    const ld_context_t *ctx;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t rq = api_req(r, ctx);
    if (!ops_sub_create(&rq, body, &id, &p)) goto fail;
    api_reply_created(r, "/ngsi-ld/v1/subscriptions/", id);
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

void api_sub_get(request_t *r)
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
    notify_sub_t *s = ops_sub_retrieve(&rq, r->pathv[0], &p);
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

static bool page_param(request_t *r, const char *name, size_t def, size_t *out, problem_t *p)
{
    const char *s = req_param(r, name);
    char       *end;
    *out = def;
    if (!s) return true;
    errno = 0;
    unsigned long long v = *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
    if (!(*s >= '0' && *s <= '9') || errno || *end)
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a non-negative integer, not '%s'", name, s);
    *out = (size_t)v;
    return true;
}

static void page_link(request_t *r, const char *rel, size_t offset, size_t limit, const char *ctype)
{
    sbuf_t sb;
    size_t plen = strlen(r->path);
    while (plen > 1 && r->path[plen - 1] == '/') plen--;    /* /subscriptions/ is /subscriptions */
    sb_init(&sb, r->arena, 128);
    /* RFC 8288 link-params without optional whitespace, as the suite compares them (031_02) */
    sb_printf(&sb, "<%.*s?limit=%zu&offset=%zu>;rel=\"%s\";type=\"%s\"", (int)plen, r->path, limit, offset, rel,
              ctype);
    reply_header(r, "Link", sb.p);
}

void api_sub_query(request_t *r)
{
    problem_t p = {0};
    bool      ld;
    size_t    limit, offset, n, total;
    if (!sub_accept(r, &ld, &p)) goto fail;
    if (!page_param(r, "limit", (size_t)cr_config.default_limit, &limit, &p)) goto fail;
    if (!page_param(r, "offset", 0, &offset, &p)) goto fail;
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
    notify_sub_t **v = ops_sub_query(&rq, offset, limit, &n, &total, &p);
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
    if (offset + n < total && limit) page_link(r, "next", offset + n, limit, ctype);
    if (offset > 0 && limit) page_link(r, "prev", offset > limit ? offset - limit : 0, limit, ctype);
    reply_body(r, 200, ctype);
    return;
fail:
    reply_problem(r, &p);
}

void api_sub_update(request_t *r)
{
    problem_t p = {0};
    const ld_context_t *ctx;
    if (!ops_check_id(r->pathv[0], &p)) goto fail;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    ops_req_t rq = api_req(r, ctx);
    if (!ops_sub_update(&rq, r->pathv[0], body, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_sub_delete(request_t *r)
{
    problem_t p = {0};
    if (!api_no_unknown_params(r, &p)) goto fail;
    ops_req_t rq = api_req(r, NULL);
    if (!ops_sub_delete(&rq, r->pathv[0], &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}
