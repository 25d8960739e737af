/*
 * api_common.c - what every NGSI-LD resource handler needs: the request
 * body parsed under the configured limits, the request's @context resolved
 * as 6.3.5 says, the rendering options of 6.3.x / 4.21 / 4.15 read from the
 * query string, the operation request (ops_req_t) of an HTTP request, and
 * the 207 UpdateResult body.
 */
#include "api.h"

#include "../fwd/fwd.h"
#include "../reg/reg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

store_t *api_store;

json_t *api_body(request_t *r, bool want_array, problem_t *p)
{
    char          err[160];
    json_limits_t lim = {.max_depth = (uint32_t)cr_config.max_json_depth, .max_size = cr_config.max_body_size};

    if (r->body_len == 0) {
        problem_set(p, PB_INVALID_REQUEST, "the request needs a JSON body (5.5.4)");
        return NULL;
    }
    json_t *root = json_parse(r->arena, r->body, r->body_len, &lim, err, sizeof err);
    if (!root) {
        problem_set(p, PB_INVALID_REQUEST, "the body is not valid JSON (5.5.4): %s", err);
        return NULL;
    }
    if (want_array && root->type != JSON_ARRAY) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the body must be a JSON array");
        return NULL;
    }
    if (!want_array && root->type != JSON_OBJECT) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

/* @context resolution never waits on the worker: a remote document that is
 * not cached yet is downloaded by ld's fetch pool while the request is
 * deferred (req_defer); its handler runs again when the download ends, or at
 * the --contextTimeout deadline counted from the request's arrival. The
 * resolution state (pins, budget, waiter) is r->ext. */
static void wake_request(void *token)
{
    req_resume(token);
}

static ld_req_t *ctx_state(request_t *r)
{
    if (!r->ext) {
        int64_t timeout_ms = cr_config.context_timeout_ms > 0 ? cr_config.context_timeout_ms : 5000;
        r->ext = ld_req_new(r->arena, r->arrived_ns + timeout_ms * 1000000, wake_request, req_token(r));
    }
    return r->ext;
}

ld_req_t *api_ld_req(request_t *r)
{
    return ctx_state(r);
}

/* A context that is being downloaded defers the request (c is NULL then). */
static const ld_context_t *settle(request_t *r, const ld_context_t *c)
{
    if (!c && ld_req_pending(r->ext)) req_defer(r);
    return c;
}

static const ld_context_t *context_from_link(request_t *r, problem_t *p)
{
    if (!r->link) return ld_core();
    return settle(r, ld_req_from_link(ctx_state(r), r->link, p));
}

const ld_context_t *api_context(request_t *r, const json_t *body, problem_t *p)
{
    if (!(r->method & (HM_POST | HM_PUT | HM_PATCH)) || !body) return context_from_link(r, p);
    return api_context_of(r, body, p);
}

bool api_context_once(request_t *r, problem_t *p)
{
    if (r->ctype == CT_LDJSON && r->link)
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "Content-Type application/ld+json takes the @context from the body; "
                           "a JSON-LD Link header is not allowed with it (6.3.5)");
    return true;
}

const ld_context_t *api_context_of(request_t *r, const json_t *entity, problem_t *p)
{
    const json_t *ctx = entity && entity->type == JSON_OBJECT ? json_get(entity, "@context") : NULL;
    if (r->ctype == CT_LDJSON) {
        if (!api_context_once(r, p)) return NULL;
        if (!ctx) {
            problem_set(p, PB_BAD_REQUEST_DATA,
                        "Content-Type application/ld+json needs an @context member in the body (6.3.5)");
            return NULL;
        }
        return settle(r, ld_req_from_json(ctx_state(r), ctx, p));
    }
    if (ctx) {
        problem_set(p, PB_BAD_REQUEST_DATA,
                    "Content-Type application/json takes the @context from the Link header; "
                    "an @context member in the body is not allowed with it (6.3.5)");
        return NULL;
    }
    return context_from_link(r, p);
}

bool api_contexts_ready(request_t *r, const json_t *entities)
{
    bool ready = true;
    json_foreach(e, entities) {
        problem_t p = {0};
        if (json_is_object(e) && !api_context_of(r, e, &p) && ld_req_pending(r->ext)) ready = false;
    }
    return ready;
}

bool api_options_valid(request_t *r, const char *allowed, problem_t *p)
{
    const char *o = req_param(r, "options");
    while (o && *o) {
        const char *e = strchr(o, ',');
        size_t      l = e ? (size_t)(e - o) : strlen(o);
        bool        ok = false;
        for (const char *a = allowed; *a && !ok;) {
            const char *ae = strchr(a, ',');
            size_t      al = ae ? (size_t)(ae - a) : strlen(a);
            ok = al == l && !memcmp(a, o, l);
            a = ae ? ae + 1 : a + al;
        }
        if (!ok) return problem_set(p, PB_INVALID_REQUEST, "options value '%.*s' is not supported here (6.3.20)", (int)l, o);
        o = e ? e + 1 : NULL;
    }
    return true;
}

bool api_option(request_t *r, const char *word)
{
    const char *o = req_param(r, "options");
    size_t      n = strlen(word);
    while (o && *o) {
        const char *e = strchr(o, ',');
        size_t      l = e ? (size_t)(e - o) : strlen(o);
        if (l == n && !memcmp(o, word, n)) return true;
        o = e ? e + 1 : NULL;
    }
    return false;
}

bool api_name_list(request_t *r, const ld_context_t *ctx, const char *text, const char ***out, size_t *n,
                   bool allow_id_type, problem_t *p)
{
    size_t      cap = 1;
    for (const char *s = text; *s; s++) if (*s == ',' || *s == '|') cap++;
    const char **v = arena_alloc(r->arena, cap * sizeof *v);
    size_t       k = 0;
    const char  *s = text;
    while (*s) {
        const char *e = s + strcspn(s, ",|");      /* 4.21: ',' and '|' both separate */
        size_t      l = (size_t)(e - s);
        if (!*e) e = NULL;
        if (l == 0) return problem_set(p, PB_BAD_REQUEST_DATA, "empty name in list '%s'", text);
        char *name = arena_strndup(r->arena, s, l);
        if (allow_id_type && (!strcmp(name, "id") || !strcmp(name, "@id"))) v[k++] = "@id";
        else if (allow_id_type && (!strcmp(name, "type") || !strcmp(name, "@type"))) v[k++] = "@type";
        else {
            if (!model_valid_name(name) && !strchr(name, ':'))
                return problem_set(p, PB_BAD_REQUEST_DATA, "invalid attribute name '%s'", name);
            v[k++] = ld_expand_lookup(ctx, name, r->arena);   /* read paths: interns nothing */
        }
        s = e ? e + 1 : s + l;
    }
    if (k == 0) return problem_set(p, PB_BAD_REQUEST_DATA, "empty list of names");
    *out = v;
    *n = k;
    return true;
}

/* "Prefer: ngsi-ld=<major>.<minor>" (RFC 7240, 6.3.6): the version asked
 * for, clamped to what this broker can answer (1.0 to 1.9); 0 when the
 * header holds no such preference, or one that is not a version (an
 * unrecognised preference is ignored, RFC 7240 2). */
static unsigned prefer_version(const char *h)
{
    for (const char *s = h; s && *s; s++) {
        if (strncasecmp(s, "ngsi-ld", 7) || (s != h && !strchr(" \t,;", s[-1]))) continue;
        const char *q = s + 7;
        while (*q == ' ' || *q == '\t') q++;
        if (*q++ != '=') continue;
        while (*q == ' ' || *q == '\t') q++;
        bool quoted = *q == '"';
        q += quoted;
        unsigned major = 0, minor = 0, nd = 0, nm = 0;
        while (*q >= '0' && *q <= '9' && nd < 3) major = major * 10 + (unsigned)(*q++ - '0'), nd++;
        if (!nd || *q++ != '.') return 0;
        while (*q >= '0' && *q <= '9' && nm < 3) minor = minor * 10 + (unsigned)(*q++ - '0'), nm++;
        if (!nm || (quoted && *q++ != '"') || (*q && !strchr(" \t,;", *q))) return 0;
        unsigned v = major * 100 + (minor < 100 ? minor : 99);
        return v < 100 ? 100 : v > 109 ? 109 : v;
    }
    return 0;
}

bool api_view(request_t *r, const ld_context_t *ctx, bool geojson_ok, api_view_t *v, problem_t *p)
{
    memset(v, 0, sizeof *v);
    v->ro.ctx = ctx;
    if (!api_options_valid(r, "sysAttrs,keyValues,simplified,concise,normalized,count", p)) return false;

    const char *fmt = req_param(r, "format");
    v->ro.format = FMT_NORMALIZED;
    if (api_option(r, "keyValues") || api_option(r, "simplified")) v->ro.format = FMT_KEYVALUES;
    else if (api_option(r, "concise")) v->ro.format = FMT_CONCISE;
    if (fmt) {
        if (!strcmp(fmt, "keyValues") || !strcmp(fmt, "simplified")) v->ro.format = FMT_KEYVALUES;
        else if (!strcmp(fmt, "concise")) v->ro.format = FMT_CONCISE;
        else if (!strcmp(fmt, "normalized")) v->ro.format = FMT_NORMALIZED;
        else return problem_set(p, PB_INVALID_REQUEST, "format must be normalized, concise, keyValues or simplified, "
                                "not '%s' (6.3.7, 6.3.20)", fmt);
    }
    v->ro.sys_attrs = api_option(r, "sysAttrs");
    v->version = r->prefer ? prefer_version(r->prefer) : 0;

    if (!api_view_params(r, ctx, v, p)) return false;
    const char *lang = req_param(r, "lang");
    if (lang) {
        if (!*lang) return problem_set(p, PB_BAD_REQUEST_DATA, "lang must not be empty");
        v->ro.lang = lang;
    }
    const char *gp = req_param(r, "geometryProperty");
    if (gp) {
        if (!model_valid_name(gp)) return problem_set(p, PB_BAD_REQUEST_DATA, "invalid geometryProperty '%s'", gp);
        v->ro.geoproperty = ld_expand_lookup(ctx, gp, r->arena);
    }

    int allowed = ACC_JSON | ACC_LDJSON | (geojson_ok ? ACC_GEOJSON : 0);
    v->accept = req_accept_best(r, allowed);
    if (!v->accept) v->accept = ACC_JSON;
    if (gp && v->accept != ACC_GEOJSON)
        return problem_set(p, PB_BAD_REQUEST_DATA, "geometryProperty only applies to application/geo+json answers (5.7.1.4)");
    v->ctype = v->accept == ACC_LDJSON ? "application/ld+json"
             : v->accept == ACC_GEOJSON ? "application/geo+json" : "application/json";
    return true;
}

static const char *link_value(request_t *r, const ld_context_t *ctx)
{
    return arena_printf(r->arena, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"",
                        ld_context_link(ctx));
}

void api_view_context(request_t *r, const ld_context_t *ctx, api_view_t *v)
{
    bool body_ctx = v->accept == ACC_LDJSON;
    if (v->accept == ACC_GEOJSON)
        body_ctx = !(r->prefer && strstr(r->prefer, "body=json"));
    if (body_ctx) v->ro.context_json = ld_context_value_json(ctx);
    else reply_header(r, "Link", link_value(r, ctx));
}

/* The hash set of an api_params_t: open addressing, names in the list's own
 * storage (a string literal). */
typedef struct param_set {
    uint32_t mask;
    struct { const char *name; uint32_t len; } slot[];
} param_set_t;

static param_set_t *param_set_build(const char *list)
{
    size_t n = 1, cap = 8;
    for (const char *c = list; *c; c++) n += *c == ',';
    while (cap < n * 2) cap <<= 1;
    param_set_t *s = cr_xcalloc(1, sizeof *s + cap * sizeof s->slot[0]);
    s->mask = (uint32_t)(cap - 1);
    for (const char *a = list; *a;) {
        size_t l = strcspn(a, ",");
        uint32_t i = (uint32_t)cr_hash(a, l) & s->mask;
        while (s->slot[i].name) i = (i + 1) & s->mask;
        s->slot[i].name = a;
        s->slot[i].len = (uint32_t)l;
        a += l + (a[l] == ',');
    }
    return s;
}

static bool param_set_has(const param_set_t *s, const char *k, size_t kl)
{
    for (uint32_t i = (uint32_t)cr_hash(k, kl) & s->mask; s->slot[i].name; i = (i + 1) & s->mask)
        if (s->slot[i].len == kl && !memcmp(s->slot[i].name, k, kl)) return true;
    return false;
}

/* 6.3.18: every operation of /entities/, /types/, /attributes/, /entityOperations/, /temporal/entities/ and
 * /temporal/entityOperations/ takes local=true|false (the Registry API's do not). */
static bool local_resource(const char *path)
{
    static const char *const roots[] = {"entities", "types", "attributes", "entityOperations", "temporal/"};
    const char prefix[] = "/ngsi-ld/v1/";
    if (!path || strncmp(path, prefix, sizeof prefix - 1)) return false;
    path += sizeof prefix - 1;
    for (size_t i = 0; i < sizeof roots / sizeof *roots; i++) {
        size_t n = strlen(roots[i]);
        if (!strncmp(path, roots[i], n) && (roots[i][n - 1] == '/' || path[n] == '\0' || path[n] == '/')) return true;
    }
    return false;
}

/* local=true|false on those resources: read (the handler need not know it) and checked; false: bad value. */
static bool local_param(request_t *r, problem_t *p)
{
    const char *v = local_resource(r->path) ? req_param(r, "local") : NULL;
    if (v && strcmp(v, "true") && strcmp(v, "false"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "local must be true or false (6.3.18)");
    return true;
}

bool api_params_known(request_t *r, api_params_t *known, problem_t *p)
{
    if (!r->nparams) return true;
    param_set_t *set = __atomic_load_n((param_set_t **)&known->set, __ATOMIC_ACQUIRE);
    if (!set) {                 /* first use: built once (a thread that loses the race frees its copy) */
        param_set_t *mine = param_set_build(known->list), *none = NULL;
        if (__atomic_compare_exchange_n((param_set_t **)&known->set, &none, mine, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            set = mine;
        else {
            free(mine);
            set = none;
        }
    }
    for (int i = 0; i < r->nparams; i++) {
        const char *k = r->params[i].key;
        bool        ok = param_set_has(set, k, strlen(k));
        if (!ok && !strcmp(k, "local") && local_resource(r->path)) {
            if (!local_param(r, p)) return false;
            ok = true;
        }
        if (!ok) return problem_set(p, PB_INVALID_REQUEST, "unknown or unsupported query parameter '%s' for %s %s (6.3.20)",
                                    k, r->method_name, r->path);
    }
    return true;
}

bool api_no_unknown_params(request_t *r, problem_t *p)
{
    if (!local_param(r, p)) return false;
    const char *u = req_unused_param(r);
    if (u) return problem_set(p, PB_INVALID_REQUEST, "unknown or unsupported query parameter '%s' for %s %s (6.3.20)",
                              u, r->method_name, r->path);
    return true;
}

/* A write's answer may be held until it is durable (--dbSync always, store.h
 * "Held answers"): from the operation request of a write handler on, its
 * store writes may return before their fsync; api_after_handler (the
 * http/ hook after every write handler) then holds the finished answer
 * (req_hold) until the store's syncer releases it. */
ops_req_t api_req(request_t *r, const ld_context_t *ctx)
{
    if (!(r->method & (HM_GET | HM_HEAD))) store_hold_begin(api_store);
    return (ops_req_t){.store = api_store, .tenant = r->tenant, .ctx = ctx, .arena = r->arena};
}

static void release_request(void *token, bool ok, const problem_t *p)
{
    req_release(token, ok, p);
}

void api_after_handler(request_t *r)
{
    store_ticket_t *t = store_hold_end();
    if (!t) return;
    req_hold(r);
    store_ticket_wait(t, release_request, req_token(r));
}

json_t *api_body_context(request_t *r, const ld_context_t **ctx, problem_t *p)
{
    json_t *body = api_body(r, false, p);
    if (!body) return NULL;
    *ctx = api_context(r, body, p);
    return *ctx ? body : NULL;
}

void api_reply_update_result(request_t *r, const op_result_t *res)
{
    json_writer_t w;
    if (!res->n_not_updated) {
        reply_status(r, 204);
        return;
    }
    sb_clear(&r->out);
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "updated");
    jw_array_begin(&w);
    for (size_t i = 0; i < res->n; i++)
        if (res->items[i].updated) jw_string(&w, res->items[i].name);
    jw_array_end(&w);
    jw_key(&w, "notUpdated");
    jw_array_begin(&w);
    for (size_t i = 0; i < res->n; i++) {
        if (res->items[i].updated) continue;
        jw_object_begin(&w);
        jw_key(&w, "attributeName");
        jw_string(&w, res->items[i].name);
        jw_key(&w, "reason");
        jw_string(&w, res->items[i].reason ? res->items[i].reason : "not updated");
        jw_object_end(&w);
    }
    jw_array_end(&w);
    jw_object_end(&w);
    reply_body(r, 207, "application/json");
}

void api_reply_created(request_t *r, const char *collection, const char *id)
{
    sbuf_t loc;
    sb_init(&loc, r->arena, strlen(collection) + 3 * strlen(id) + 1);
    sb_adds(&loc, collection);
    http_url_encode(&loc, id);
    reply_status(r, 201);
    reply_header(r, "Location", loc.p);
}

bool api_uint_param(const char *s, const char *name, size_t *out, problem_t *p)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a non-negative integer", name);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a non-negative integer, not '%s'", name, s);
    *out = (size_t)v;
    return true;
}

bool api_id_list(request_t *r, const char *text, const char ***ids, size_t *n, problem_t *p)
{
    size_t cap = 1;
    for (const char *s = text; *s; s++) if (*s == ',') cap++;
    const char **v = arena_alloc(r->arena, cap * sizeof *v);
    size_t       k = 0;
    for (const char *s = text; *s;) {
        const char *e = strchr(s, ',');
        size_t      l = e ? (size_t)(e - s) : strlen(s);
        char       *id = arena_strndup(r->arena, s, l);
        if (!model_valid_uri(id)) return problem_set(p, PB_BAD_REQUEST_DATA, "id '%s' is not a URI", id);
        v[k++] = id;
        s = e ? e + 1 : s + l;
    }
    if (!k) return problem_set(p, PB_BAD_REQUEST_DATA, "id must list at least one entity id");
    *ids = v;
    *n = k;
    return true;
}

void api_page_link(request_t *r, const char *rel, size_t offset, size_t limit, const char *ctype)
{
    sbuf_t sb;
    size_t plen = strlen(r->path);
    while (plen > 1 && r->path[plen - 1] == '/') plen--;    /* /subscriptions/ is /subscriptions */
    sb_init(&sb, r->arena, 256);
    sb_addc(&sb, '<');
    sb_add(&sb, r->path, plen);
    sb_addc(&sb, '?');
    for (int i = 0; i < r->nparams; i++) {
        if (!strcmp(r->params[i].key, "offset") || !strcmp(r->params[i].key, "limit")) continue;
        http_url_encode(&sb, r->params[i].key);
        sb_addc(&sb, '=');
        http_url_encode(&sb, r->params[i].value);
        sb_addc(&sb, '&');
    }
    /* RFC 8288 link-params without optional whitespace, as the suite compares them (031_02) */
    sb_printf(&sb, "limit=%zu&offset=%zu>;rel=\"%s\";type=\"%s\"", limit, offset, rel, ctype);
    /* a long query repeated in the link may not fit in the connection's
     * memory: the page is answered without it (doc/api.md, pagination) */
    if (sizeof "Link: \r\n" - 1 + sb.len <= reply_header_room(r)) reply_header(r, "Link", sb.p);
}

bool api_count_param(request_t *r, bool *count, problem_t *p)
{
    const char *c = req_param(r, "count");
    if (c && strcmp(c, "true") && strcmp(c, "false"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "count must be true or false");
    *count = (c && !strcmp(c, "true")) || api_option(r, "count");
    return true;
}

/* http_set_offload's test: a write of a tenant with a registration that
 * takes writes (REG_WRITE_OPS) may wait for context sources, so it runs on
 * the --forwardThreads pool; so does an entity map's update or delete when
 * the tenant has any registration (it goes to the linked maps of the
 * sources, MAP_OPS, which federationOps include). The others (every request
 * of a broker without registrations: one relaxed load; the device writes of
 * a tenant whose registrations only federate reads) stay on their HTTP
 * worker. Reads are handed over only when they are about to ask a source
 * (fwd_offload). */
bool api_may_wait(request_t *r)
{
    static const char maps[] = "/ngsi-ld/v1/entityMaps/";
    return reg_tenant_has(r->tenant, strncmp(r->path, maps, sizeof maps - 1) != 0);
}

bool api_distributed(request_t *r)
{
    const char *local = req_param(r, "local");
    return reg_any() && !(local && !strcmp(local, "true"));
}

static const char *fwd_header(void *ud, const char *name)
{
    request_t *r = ud;
    if (!strcasecmp(name, "X-Request-Id")) return r->request_id;   /* generated when the client sent none */
    return req_header(r, name);
}

static const char *fwd_query_string(void *ud)
{
    return api_dw_query(ud);
}

static bool fwd_offload(void *ud)
{
    return req_offload(ud);
}

void api_fwd_in(request_t *r, const ld_context_t *ctx, fwd_in_t *in)
{
    *in = (fwd_in_t){.tenant = r->tenant, .ctx = ctx, .via = req_header(r, "Via"), .arena = r->arena,
                     .header = fwd_header, .query = fwd_query_string, .header_ud = r, .offload = fwd_offload};
}
