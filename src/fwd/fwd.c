/*
 * fwd.c - the forwarded requests of a distributed retrieve or query
 * (fwd.h): built from the matching registrations, sent in parallel with a
 * libcurl multi handle (at most --forwardFanout at once, each with its
 * registration's timeout), their answers parsed into entities with the
 * request's @context, and merged with the local version (4.5.5).
 */
#include "fwd.h"
#include "fwd_int.h"
#include "../cor/cor.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char g_alias[300];
static uint64_t g_forwarded, g_failed;     /* __atomic builtins (relaxed counters) */

void fwd_get_stats(fwd_stats_t *st)
{
    st->forwarded = __atomic_load_n(&g_forwarded, __ATOMIC_RELAXED);
    st->failed = __atomic_load_n(&g_failed, __ATOMIC_RELAXED);
}

/* A forwarded answer is an entity or a page of them: bounded like a request body, times the page. */
#define FWD_MAX_ANSWER ((size_t)64 << 20)

bool fwd_start(problem_t *p)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return problem_set(p, PB_INTERNAL_ERROR, "cannot initialise libcurl");
    if (cr_config.broker_alias && *cr_config.broker_alias)
        snprintf(g_alias, sizeof g_alias, "%s", cr_config.broker_alias);
    else {
        /* unique per instance: two brokers on one host differ by port */
        char host[256] = "localhost";
        if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
        snprintf(g_alias, sizeof g_alias, "%s:%d", host, cr_config.port);
    }
    for (char *c = g_alias; *c; c++)
        if (*c == ',' || *c <= ' ' || *c == '(' || *c == ')') *c = '_';   /* a Via pseudonym is one token */
    return true;
}

void fwd_stop(void)
{
    fwd_map_clear();
    fwd_cache_clear();
    curl_global_cleanup();
}

const char *fwd_alias(void)
{
    return g_alias;
}

/* Calls fn for each pseudonym ("received-by") of a Via value: "1.1 a, 1.0 b (comment)". */
bool fwd_via_each(const char *via, bool (*fn)(void *ud, const char *s, size_t n), void *ud)
{
    for (const char *s = via; s && *s;) {
        while (*s == ' ' || *s == ',' || *s == '\t') s++;
        const char *e = s;
        while (*e && *e != ',' && *e != ' ') e++;        /* protocol */
        while (*e == ' ') e++;
        const char *b = e;
        while (*e && *e != ',' && *e != ' ') e++;        /* received-by */
        if (e > b && fn(ud, b, (size_t)(e - b))) return true;
        while (*e && *e != ',') e++;                     /* comment */
        s = e;
    }
    return false;
}

static bool is_me(void *ud, const char *s, size_t n)
{
    (void)ud;
    return n == strlen(g_alias) && !memcmp(s, g_alias, n);
}

bool fwd_via_loop(const char *via)
{
    return via && fwd_via_each(via, is_me, NULL);
}

typedef struct aliases {
    arena_t     *a;
    const char **v;
    size_t       n, cap;
} aliases_t;

static bool add_alias(void *ud, const char *s, size_t n)
{
    aliases_t *x = ud;
    if (x->n < x->cap) x->v[x->n++] = arena_strndup(x->a, s, n);
    return false;
}

void fwd_skip_sources(const fwd_in_t *in, reg_query_t *q)
{
    if (!in->via || !*in->via) {
        q->skip_aliases = NULL;
        q->n_skip_aliases = 0;
        return;
    }
    aliases_t al = {.a = in->arena, .cap = 32};
    al.v = arena_alloc(in->arena, al.cap * sizeof *al.v);
    if (in->via) fwd_via_each(in->via, add_alias, &al);
    q->skip_aliases = al.v;
    q->n_skip_aliases = al.n;
}

bool fwd_loop_check(reg_t *const *regs, size_t nr, bool write, problem_t *p)
{
    bool proxied = write && nr;
    for (size_t i = 0; i < nr; i++) proxied = proxied || reg_mode(regs[i]) == REG_EXCLUSIVE ||
                                              reg_mode(regs[i]) == REG_REDIRECT;
    if (!proxied) return true;
    p->kind = PB_HTTP;
    p->status = 508;
    snprintf(p->detail, sizeof p->detail, "the request's Via already names this broker (%s): a registration "
             "loop (6.3.17, 6.3.18)", g_alias);
    return false;
}

void fwd_counted(reg_t *r, bool ok, int64_t now)
{
    reg_count(r, ok, now);
    __atomic_add_fetch(&g_forwarded, 1, __ATOMIC_RELAXED);
    if (!ok) __atomic_add_fetch(&g_failed, 1, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ one forwarded request */


static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    call_t *c = ud;
    size_t  n = size * nmemb;
    if (c->body.len + n > FWD_MAX_ANSWER) {
        c->too_big = true;
        return 0;
    }
    sb_add(&c->body, ptr, n);
    return n;
}

/* A source's NGSILD-EntityMap answer header, when asked for (call_t.want_map). */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
    call_t *c = ud;
    size_t  n = size * nmemb;
    static const char name[] = "NGSILD-EntityMap:";
    if (n > sizeof name - 1 && !strncasecmp(ptr, name, sizeof name - 1)) {
        const char *v = ptr + sizeof name - 1, *e = ptr + n;
        while (v < e && (*v == ' ' || *v == '\t')) v++;
        while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ')) e--;
        if (e > v && e - v < 512) c->entity_map = arena_strndup(c->body.a, v, (size_t)(e - v));
    }
    return n;
}

/* The egress policy (core/egress.c) on the address actually connected. */
static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    call_t *c = ud;
    char    why[160];
    char   *url = NULL, host[256] = "";
    if (curl_easy_getinfo(c->h, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK && url) {
        const char *s = strstr(url, "://");
        s = s ? s + 3 : url;
        size_t n = strcspn(s, ":/?#");
        if (*s == '[') n = strcspn(s, "]") + 1;
        snprintf(host, sizeof host, "%.*s", (int)n, s);
    }
    if (purpose != CURLSOCKTYPE_IPCXN || !egress_check_host(*host ? host : NULL, &a->addr, why, sizeof why)) {
        c->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

void fwd_url_encode(sbuf_t *sb, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '.' || *p == '_' || *p == '~' || *p == ':')
            sb_addc(sb, (char)*p);
        else {
            sb_addc(sb, '%');
            sb_addc(sb, hex[*p >> 4]);
            sb_addc(sb, hex[*p & 15]);
        }
    }
}

bool fwd_add_header(call_t *c, arena_t *a, const char *name, const char *value)
{
    struct curl_slist *t = curl_slist_append(c->hdrs, arena_printf(a, "%s: %s", name, value));
    if (!t) return false;
    c->hdrs = t;
    return true;
}

/* The attributes to ask the source of r for: requested ∩ registered (mask:
 * the matching RegistrationInfo). NULL with *n 0: no restriction; *skip when
 * the registration declares none of the requested ones. */
static const char **attrs_for(arena_t *a, const reg_t *r, uint64_t mask, const char *const *attrs, size_t n_attrs,
                              size_t *n, bool *skip)
{
    size_t cap = 0;
    *n = 0;
    *skip = false;
    for (size_t i = 0; i < reg_info_count(r); i++) {
        const reg_info_t *in = reg_info_at(r, i);
        if (i < 64 && !(mask >> i & 1)) continue;
        if (!(in->n_props + in->n_rels)) {            /* this source may have any attribute */
            if (!n_attrs) return NULL;
            *n = n_attrs;
            return (const char **)attrs;
        }
        cap += in->n_props + in->n_rels;
    }
    const char **v = arena_alloc(a, (cap + 1) * sizeof *v);
    for (size_t i = 0; i < reg_info_count(r); i++) {
        const reg_info_t *in = reg_info_at(r, i);
        if (i < 64 && !(mask >> i & 1)) continue;
        for (size_t k = 0; k < in->n_props + in->n_rels; k++) {
            const char *name = k < in->n_props ? in->props[k] : in->rels[k - in->n_props];
            bool        want = !n_attrs, dup = false;
            for (size_t j = 0; j < n_attrs && !want; j++) want = attrs[j] == name || !strcmp(attrs[j], name);
            for (size_t j = 0; j < *n && !dup; j++) dup = v[j] == name;
            if (want && !dup) v[(*n)++] = name;
        }
    }
    if (!*n) *skip = true;
    return v;
}

static const char *param(const fwd_param_t *params, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(params[i].key, key)) return params[i].value;
    return NULL;
}

/* The Query (5.2.23) of POST /entityOperations/query for a source that
 * supports queryBatch only: the same selection as the query parameters. */
static char *query_body(arena_t *a, const fwd_param_t *params, size_t n, const char *const *ask, size_t na,
                        const ld_context_t *ctx, size_t want)
{
    sbuf_t        sb;
    json_writer_t w;
    sb_init(&sb, a, 512);
    jw_init(&w, &sb);
    jw_object_begin(&w);
    jw_key(&w, "type");
    jw_string(&w, "Query");
    const char *type = param(params, n, "type"), *ids = param(params, n, "id"), *pat = param(params, n, "idPattern");
    if (type || ids || pat) {
        jw_key(&w, "entities");
        jw_array_begin(&w);
        for (const char *s = ids ? ids : ""; ;) {
            const char *e = strchr(s, ',');
            size_t      l = e ? (size_t)(e - s) : strlen(s);
            jw_object_begin(&w);
            if (l) {
                jw_key(&w, "id");
                jw_string(&w, arena_strndup(a, s, l));
            } else if (pat) {
                jw_key(&w, "idPattern");
                jw_string(&w, pat);
            }
            if (type) {
                jw_key(&w, "type");
                jw_string(&w, type);
            }
            jw_object_end(&w);
            if (!e) break;
            s = e + 1;
        }
        jw_array_end(&w);
    }
    static const char *const plain[] = {"q", "scopeQ", "lang", NULL};
    for (const char *const *k = plain; *k; k++) {
        const char *v = param(params, n, *k);
        if (!v) continue;
        jw_key(&w, *k);
        jw_string(&w, v);
    }
    const char *rel = param(params, n, "georel"), *geom = param(params, n, "geometry");
    const char *coords = param(params, n, "coordinates"), *gp = param(params, n, "geoproperty");
    if (rel && geom && coords) {
        jw_key(&w, "geoQ");
        jw_object_begin(&w);
        jw_key(&w, "georel");
        jw_string(&w, rel);
        jw_key(&w, "geometry");
        jw_string(&w, geom);
        jw_key(&w, "coordinates");
        jw_raw(&w, coords, strlen(coords));    /* validated JSON: the request's geo-query parsed */
        if (gp) {
            jw_key(&w, "geoproperty");
            jw_string(&w, gp);
        }
        jw_object_end(&w);
    }
    if (na) {
        jw_key(&w, "attrs");
        jw_array_begin(&w);
        for (size_t i = 0; i < na; i++) jw_string(&w, ld_compact(ctx, ask[i]));
        jw_array_end(&w);
    }
    (void)want;
    jw_object_end(&w);
    return sb.p;
}

/* The entity ids the matching RegistrationInfo of r name, comma-separated,
 * when every one of their EntityInfo names an id (a source is asked only
 * for what it registered); else NULL. */
static const char *ids_for(arena_t *a, const reg_t *r, uint64_t mask)
{
    sbuf_t sb;
    sb_init(&sb, a, 128);
    for (size_t i = 0; i < reg_info_count(r); i++) {
        const reg_info_t *in = reg_info_at(r, i);
        if (i < 64 && !(mask >> i & 1)) continue;
        if (!in->n_entities) return NULL;
        for (size_t j = 0; j < in->n_entities; j++) {
            if (!in->entities[j].id) return NULL;
            if (sb.len) sb_addc(&sb, ',');
            sb_adds(&sb, in->entities[j].id);
        }
    }
    return sb.len ? sb.p : NULL;
}

/* The entity types of the matching RegistrationInfo of r, compacted with
 * ctx and comma-separated (a retrieve asked as a query names them: 5.7.2
 * needs a type or attrs); NULL when one names none. */
static const char *types_for(arena_t *a, const reg_t *r, uint64_t mask, const ld_context_t *ctx)
{
    sbuf_t sb;
    sb_init(&sb, a, 64);
    for (size_t i = 0; i < reg_info_count(r); i++) {
        const reg_info_t *in = reg_info_at(r, i);
        if (i < 64 && !(mask >> i & 1)) continue;
        for (size_t j = 0; j < in->n_entities; j++)
            for (size_t k = 0; k < in->entities[j].n_types; k++) {
                const char *t = ld_compact(ctx, in->entities[j].types[k]);
                if (sb.len) sb_addc(&sb, ',');
                sb_adds(&sb, t);
            }
    }
    return sb.len ? sb.p : NULL;
}

void fwd_endpoint(sbuf_t *u, const reg_t *r)
{
    const char *ep = reg_endpoint(r);
    size_t      el = strlen(ep);
    while (el && ep[el - 1] == '/') el--;
    sb_add(u, ep, el);
    sb_adds(u, "/ngsi-ld/v1/");
}

/* The headers every forwarded request carries (fwd_int.h). */
bool fwd_headers(const fwd_in_t *in, call_t *c, const reg_t *r, const char *jctx, const char *ctype)
{
    arena_t *a = in->arena;
    const char *accept = reg_csource_info(r, "accept");
    /* a JSON-LD payload carries its @context: no Link then (6.3.5) */
    bool ld = ctype && !strcmp(ctype, "application/ld+json");
    bool ok = fwd_add_header(c, a, "Accept", accept ? accept : "application/json") &&
              (ld || fwd_add_header(c, a, "Link", arena_printf(a, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; "
                                                       "type=\"application/ld+json\"", jctx ? jctx : ld_context_link(c->ctx)))) &&
              fwd_add_header(c, a, "Via", in->via && *in->via ? arena_printf(a, "%s, 1.1 %s", in->via, g_alias)
                                                           : arena_printf(a, "1.1 %s", g_alias));
    if (ok && reg_source_tenant(r)) ok = fwd_add_header(c, a, "NGSILD-Tenant", reg_source_tenant(r));
    const char *rid = in->header ? in->header(in->header_ud, "X-Request-Id") : NULL;   /* one id end to end */
    if (ok && rid) ok = fwd_add_header(c, a, "X-Request-Id", rid);
    if (ok && ctype) ok = fwd_add_header(c, a, "Content-Type", ctype);
    /* 6.3.19: the other contextSourceInfo pairs as headers; those set from the registration or by HTTP win */
    static const char *const reserved[] = {"jsonldContext", "accept", "contentType", "ngsildConformance",
        "NGSILD-Tenant", "Link", "Via", "Accept", "Content-Type", "Content-Length", "Host", "Transfer-Encoding",
        "X-Request-Id", NULL};
    for (size_t i = 0; ok && i < reg_csource_info_count(r); i++) {
        const char *k, *v;
        reg_csource_info_at(r, i, &k, &v);
        bool res = false;
        for (const char *const *x = reserved; *x && !res; x++) res = !strcasecmp(k, *x);
        if (res) continue;
        if (!strcmp(v, "urn:ngsi-ld:request")) {
            v = in->header ? in->header(in->header_ud, k) : NULL;
            if (!v) continue;
        }
        ok = fwd_add_header(c, a, k, v);
    }
    if (!ok) return false;
    c->timeout_ms = reg_timeout_ms(r) ? reg_timeout_ms(r) : cr_config.forward_timeout_ms;
    sb_init(&c->body, a, 4096);
    return true;
}

bool fwd_cooling(const reg_t *r)
{
    int64_t last = reg_last_failure(r);
    return reg_cooldown_ms(r) && last && cr_now_us() - last < (int64_t)reg_cooldown_ms(r) * 1000;
}

/* Builds the request to r's source; false: not to be sent (c->skipped). */
static bool call_build(const fwd_in_t *in, call_t *c, reg_t *r, uint64_t mask, const char *id,
                       const char *const *attrs, size_t n_attrs, const fwd_param_t *params, size_t n_params,
                       size_t want, bool temporal)
{
    arena_t    *a = in->arena;
    size_t      na;
    bool        skip;
    const char **ask = attrs_for(a, r, mask, attrs, n_attrs, &na, &skip);
    c->reg = r;
    c->ctx = in->ctx;
    if (skip) return !(c->skipped = true);
    if (fwd_cooling(r)) return !(c->skipped = true);   /* 5.2.34 cooldown: counted as a failure below */

    sbuf_t u;
    sb_init(&u, a, 256);
    fwd_endpoint(&u, r);
    sb_adds(&u, temporal ? "temporal/entities" : "entities");
    /* 4.20: a source registered for queryEntity or queryBatch but not retrieveEntity is asked a
     * query for the id (with the registered types when the request names none); the same with
     * queryTemporal and retrieveTemporal */
    if (id && !(reg_ops(r) & REG_OP_BIT(temporal ? REG_OP_RETRIEVE_TEMPORAL : REG_OP_RETRIEVE_ENTITY))) {
        const char  *types = param(params, n_params, "type") ? NULL : types_for(a, r, mask, c->ctx);
        fwd_param_t *np2 = arena_alloc(a, (n_params + 2) * sizeof *np2);
        if (n_params) memcpy(np2, params, n_params * sizeof *np2);
        np2[n_params++] = (fwd_param_t){"id", id};
        if (types) np2[n_params++] = (fwd_param_t){"type", types};
        params = np2;
        c->as_query = true;
        id = NULL;
    }
    if (id) {
        sb_addc(&u, '/');
        fwd_url_encode(&u, id);
    }
    /* a query left without type, attrs, q or geo-query (splitEntities takes the filters out; 6.4.3.2 needs
     * one): the registered types */
    if (!id && !na && !param(params, n_params, "type") && !param(params, n_params, "q") &&
        !param(params, n_params, "georel")) {
        const char *types = types_for(a, r, mask, c->ctx);
        if (types) {
            fwd_param_t *np2 = arena_alloc(a, (n_params + 1) * sizeof *np2);
            if (n_params) memcpy(np2, params, n_params * sizeof *np2);
            np2[n_params++] = (fwd_param_t){"type", types};
            params = np2;
        }
    }
    /* a query without ids to a registration of ids only: those ids */
    const char *reg_ids = !id && !param(params, n_params, "id") && !param(params, n_params, "idPattern")
                              ? ids_for(a, r, mask) : NULL;
    if (reg_ids) {
        fwd_param_t *np2 = arena_alloc(a, (n_params + 1) * sizeof *np2);
        if (n_params) memcpy(np2, params, n_params * sizeof *np2);
        np2[n_params++] = (fwd_param_t){"id", reg_ids};
        params = np2;
    }
    /* a query to a source that supports queryBatch only: POST /entityOperations/query */
    bool post = !temporal && !id && !(reg_ops(r) & REG_OP_BIT(REG_OP_QUERY_ENTITY)) &&
                (reg_ops(r) & REG_OP_BIT(REG_OP_QUERY_BATCH));
    if (post) {
        u.len -= strlen("/entities");
        u.p[u.len] = '\0';
        sb_adds(&u, "/entityOperations/query");
    }
    char sep = '?';
    for (size_t i = 0; i < n_params && !post; i++) {
        sb_addc(&u, sep);
        sep = '&';
        fwd_url_encode(&u, params[i].key);
        sb_addc(&u, '=');
        fwd_url_encode(&u, params[i].value);
    }
    const char *jctx = reg_csource_info(r, "jsonldContext");
    if (jctx) {
        problem_t q = {0};
        json_t   *cv = json_new_string(a, jctx);
        const ld_context_t *x = ld_from_json(cv, &q);
        if (x) c->ctx = x;
    }
    if (post) c->post = query_body(a, params, n_params, ask, na, c->ctx, want);
    if (na && !post) {
        sb_addc(&u, sep);
        sep = '&';
        sb_adds(&u, "attrs=");
        for (size_t i = 0; i < na; i++) {
            if (i) sb_addc(&u, ',');
            fwd_url_encode(&u, ld_compact(c->ctx, ask[i]));
        }
    }
    if (want) {
        sb_printf(&u, "%climit=%zu", sep, want);
        sep = '&';
    }
    if (reg_local_only(r)) sb_printf(&u, "%clocal=true", sep);
    c->url = u.p;

    if (!fwd_headers(in, c, r, jctx, c->post ? "application/json" : NULL)) return !(c->skipped = true);
    return true;
}

static bool call_start(CURLM *m, call_t *c)
{
    char why[160];
    /* host rules before anything is resolved */
    char        host[256] = "";
    const char *s = strstr(c->url, "://");
    s = s ? s + 3 : c->url;
    size_t n = *s == '[' ? strcspn(s, "]") + 1 : strcspn(s, ":/?#");
    snprintf(host, sizeof host, "%.*s", (int)n, s);
    if (!egress_check_host(host, NULL, why, sizeof why)) {
        c->refused = true;
        return false;
    }
    if (!(c->h = curl_easy_init())) return false;
    curl_easy_setopt(c->h, CURLOPT_URL, c->url);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->hdrs);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->h, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(c->h, CURLOPT_OPENSOCKETDATA, c);
    curl_easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
    if (c->post) {
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, c->post);
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(c->post));
    }
    if (c->method) curl_easy_setopt(c->h, CURLOPT_CUSTOMREQUEST, c->method);
    if (c->want_map) {
        curl_easy_setopt(c->h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c->h, CURLOPT_HEADERDATA, c);
    }
    if (curl_multi_add_handle(m, c->h) != CURLM_OK) {
        curl_easy_cleanup(c->h);
        c->h = NULL;
        return false;
    }
    return true;
}

/* A source at a cor:// endpoint: the same request over cor/'s client
 * (submitted at once, its window bounds it; answered while the HTTP ones run). */
static void cor_send(call_t *c)
{
    const char *lines[64];
    size_t      nl = 0;
    for (struct curl_slist *h = c->hdrs; h && nl < CR_ARRAY_LEN(lines); h = h->next) lines[nl++] = h->data;
    problem_t q = {0};
    c->cor = cor_submit(c->method ? c->method : c->post ? "POST" : "GET", c->url, lines, nl, c->post, c->post ? strlen(c->post) : 0,
                        c->timeout_ms, &q);
    if (!c->cor) c->rc = CURLE_URL_MALFORMAT;
}

static void cor_collect(call_t *c)
{
    int         status;
    const char *body, *why;
    size_t      len;
    int         e = cor_wait(c->cor, &status, &body, &len, &why);
    c->rc = e == COR_OK ? CURLE_OK : e == COR_E_TIMEOUT ? CURLE_OPERATION_TIMEDOUT
          : e == COR_E_CONNECT || e == COR_E_REFUSED ? CURLE_COULDNT_CONNECT : CURLE_RECV_ERROR;
    c->refused = e == COR_E_REFUSED;
    c->too_big = e == COR_E_TOO_BIG || len > FWD_MAX_ANSWER;
    if (c->too_big) c->rc = CURLE_WRITE_ERROR;
    else if (e == COR_OK) {
        c->status = status;
        sb_add(&c->body, body ? body : "", len);
        size_t      hl = 0;
        const char *h = c->want_map ? cor_header(c->cor, "NGSILD-EntityMap", &hl) : NULL;
        if (h && hl && hl < 512) c->entity_map = arena_strndup(c->body.a, h, hl);
    } else
        LOG_D("fwd: %s: %s", c->url, why);
    cor_release(c->cor);
    c->cor = NULL;
}

/* Every call sent, counted per source (fwd_source.c); a cor:// call's time
 * runs from the sending of them all to their collection, after the HTTP ones. */
static void count_sources(call_t *calls, size_t n, int64_t t0)
{
    int64_t now = cr_mono_ns();
    for (size_t i = 0; i < n; i++) {
        if (calls[i].skipped || calls[i].from_cache) continue;   /* not a call to the source */
        if (cor_is_url(calls[i].url)) calls[i].took_us = (now - t0) / 1000;
        fwd_source_record(&calls[i]);
    }
}

/* Runs the calls, at most --forwardFanout at once: every forwarded request is sent here (fwd_int.h);
 * those to a cor:// endpoint over cor/'s client, bounded by its window. */
void fwd_run(call_t *calls, size_t n)
{
    int64_t t0 = cr_mono_ns();
    size_t n_http = 0;
    for (size_t i = 0; i < n; i++)
        if (calls[i].skipped || fwd_cache_get(&calls[i])) continue;
        else if (fwd_source_begin(&calls[i]), cor_is_url(calls[i].url)) cor_send(&calls[i]);
        else n_http++;
    CURLM *m = n_http ? curl_multi_init() : NULL;
    if (!m) {
        for (size_t i = 0; i < n; i++)
            if (calls[i].cor) cor_collect(&calls[i]);
            else if (!calls[i].skipped && !calls[i].from_cache) calls[i].rc = CURLE_FAILED_INIT;
        count_sources(calls, n, t0);
        for (size_t i = 0; i < n; i++) fwd_cache_put(&calls[i]);
        return;
    }
    size_t fan = cr_config.forward_fanout > 0 ? (size_t)cr_config.forward_fanout : 1, next = 0, active = 0;
    for (;;) {
        while (active < fan && next < n) {
            call_t *c = &calls[next++];
            if (c->skipped || c->from_cache || cor_is_url(c->url)) continue;
            if (call_start(m, c)) active++;
            else c->rc = CURLE_COULDNT_CONNECT;
        }
        if (!active) break;
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int      left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            call_t *c;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            c->rc = msg->data.result;
            if (c->rc == CURLE_OK) curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &c->status);
            curl_off_t took = 0;
            curl_easy_getinfo(c->h, CURLINFO_TOTAL_TIME_T, &took);
            c->took_us = took;
            curl_multi_remove_handle(m, c->h);
            curl_easy_cleanup(c->h);
            c->h = NULL;
            active--;
        }
        if (active) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    curl_multi_cleanup(m);
    for (size_t i = 0; i < n; i++)
        if (calls[i].cor) cor_collect(&calls[i]);
    count_sources(calls, n, t0);
    for (size_t i = 0; i < n; i++) fwd_cache_put(&calls[i]);
}

/* ------------------------------------------------------------ merging (4.5.5) */

typedef struct version {
    const cr_entity_t *e;
    bool               aux;     /* from an auxiliary source */
    uint64_t           from;    /* FWD_MAP_HERE, or the bit of its registration in fwd_out_t.reg_ids */
} version_t;

static bool newer(const cr_attr_t *x, const cr_attr_t *y)
{
    if (x->observed_at != CR_NO_TIME && y->observed_at != CR_NO_TIME) return x->observed_at > y->observed_at;
    if (x->observed_at != CR_NO_TIME) return true;
    return y->observed_at == CR_NO_TIME && x->modified_at > y->modified_at;
}

static bool same_instance(const cr_attr_t *x, const cr_attr_t *y)
{
    return x->name == y->name && (x->dataset_id == y->dataset_id ||
                                  (x->dataset_id && y->dataset_id && !strcmp(x->dataset_id, y->dataset_id)));
}

/* One frozen entity from the versions of one id (v[0] first). */
static cr_entity_t *merge(arena_t *a, const version_t *v, size_t n)
{
    if (n == 1 && v[0].e->refs) {                 /* a frozen one alone: itself */
        entity_ref((cr_entity_t *)v[0].e);
        return (cr_entity_t *)v[0].e;
    }
    size_t nt = 0, na = 0;
    for (size_t i = 0; i < n; i++) {
        nt += v[i].e->n_types;
        na += v[i].e->n_attrs;
    }
    if (nt > CR_ATTRS_MAX || na > CR_ATTRS_MAX) return NULL;
    cr_entity_t  *d = arena_calloc(a, sizeof *d);
    const char  **types = arena_alloc(a, (nt + 1) * sizeof *types);
    cr_attr_t    *attrs = arena_alloc(a, (na + 1) * sizeof *attrs);
    bool         *aux = arena_alloc(a, (na + 1) * sizeof *aux);
    size_t        kt = 0, ka = 0;
    *d = *v[0].e;
    d->refs = 0;
    d->bytes = 0;
    d->render_cache = NULL;
    for (size_t i = 0; i < n; i++) {
        const cr_entity_t *e = v[i].e;
        for (uint16_t t = 0; t < e->n_types; t++) {
            bool dup = false;
            for (size_t k = 0; k < kt && !dup; k++) dup = types[k] == e->types[t];
            if (!dup) types[kt++] = e->types[t];
        }
        for (uint16_t j = 0; j < e->n_attrs; j++) {
            const cr_attr_t *x = &e->attrs[j];
            size_t k;
            for (k = 0; k < ka; k++)
                if (same_instance(&attrs[k], x)) break;
            if (k == ka) {
                attrs[ka] = *x;
                aux[ka++] = v[i].aux;
            } else if (!v[i].aux && (aux[k] || newer(x, &attrs[k]))) {
                attrs[k] = *x;           /* 4.5.5.3: the most recent; auxiliary data never wins */
                aux[k] = false;
            }
        }
        if (!d->scope && e->scope) d->scope = e->scope;
        if (e->created_at && (!d->created_at || e->created_at < d->created_at)) d->created_at = e->created_at;
        if (e->modified_at > d->modified_at) d->modified_at = e->modified_at;
    }
    d->types = types;
    d->n_types = (uint16_t)kt;
    d->attrs = attrs;
    d->n_attrs = (uint16_t)ka;
    return entity_freeze(d);
}

cr_entity_t *fwd_merge_two(arena_t *a, const cr_entity_t *x, const cr_entity_t *y)
{
    version_t v[2] = {{x, false, FWD_MAP_HERE}, {y, false, 0}};
    return merge(a, v, 2);
}

/* The entities of one answer, parsed with ctx into drafts in a (an object or an array). */
static size_t answer_entities(arena_t *a, const call_t *c, bool array, const cr_entity_t ***out, bool *bad)
{
    char    err[128];
    *bad = false;
    json_t *t = json_parse_copy(a, c->body.p ? c->body.p : "", c->body.len, &(json_limits_t){0}, err, sizeof err);
    if (!t || (array ? !json_is_array(t) : !json_is_object(t))) {
        *bad = true;
        return 0;
    }
    size_t n = array ? t->len : 1, k = 0;
    const cr_entity_t **v = arena_alloc(a, (n + 1) * sizeof *v);
    for (const json_t *x = array ? t->child : t; x; x = array ? x->next : NULL) {
        problem_t    q = {0};
        cr_entity_t *e = json_is_object(x) ? entity_parse(a, x, c->ctx, EP_CREATE, 0, &q) : NULL;
        if (!e) {
            *bad = true;
            continue;
        }
        v[k++] = e;
    }
    *out = v;
    return k;
}

/* ------------------------------------------------------------ the operations */

void fwd_warn(arena_t *a, const char **w, const reg_t *r, int code, const char *text)
{
    const char *one = arena_printf(a, "%d %s \"%s\"", code, reg_id(r), text);
    *w = *w ? arena_printf(a, "%s, %s", *w, one) : one;
}

/* Matches, loops, calls, counts: the answers' entities per call. */
typedef struct collected {
    const cr_entity_t **e;
    size_t              n;
    bool                aux;
    uint64_t            from;   /* its bit in out->reg_ids (0: past 63) */
    const json_t       *doc;    /* a temporal read: the answer parsed (an array), n its entities */
    const ld_context_t *ctx;    /* the @context it is compact in */
} collected_t;

/* A temporal answer (an array of entities, or one), parsed: its entities are read by fwd_tread.c. */
static size_t answer_doc(arena_t *a, const call_t *c, bool array, const json_t **out, bool *bad)
{
    char    err[128];
    json_t *t = json_parse_copy(a, c->body.p ? c->body.p : "", c->body.len, &(json_limits_t){0}, err, sizeof err);
    *bad = !t || (array ? !json_is_array(t) : !json_is_object(t));
    *out = NULL;
    if (*bad) return 0;
    if (!array) {
        json_t *v = json_new(a, JSON_ARRAY);
        json_add(v, NULL, t);
        t = v;
    }
    *out = t;
    return t->len;
}

/* The bit of r in an entity map's page, 0: none. */
static uint64_t page_bit(const fwd_map_page_t *pg, const reg_t *r)
{
    for (size_t k = 0; k < pg->n_regs; k++)
        if (!strcmp(pg->reg_ids[k], reg_id(r))) return (uint64_t)1 << (k + 1);
    return 0;
}

/* An entity map's page (fwd_query_map): the ids to ask r for, comma-separated, or NULL: r is not asked. */
static const char *page_ids(arena_t *a, const fwd_map_page_t *pg, const reg_t *r)
{
    size_t k;
    for (k = 0; k < pg->n_regs; k++)
        if (!strcmp(pg->reg_ids[k], reg_id(r))) break;
    if (k == pg->n_regs) return NULL;
    sbuf_t sb;
    sb_init(&sb, a, 256);
    for (size_t i = 0; i < pg->n; i++)
        if (pg->origins[i] >> (k + 1) & 1) {
            if (sb.len) sb_addc(&sb, ',');
            sb_adds(&sb, pg->ids[i]);
        }
    return sb.len ? sb.p : NULL;
}

/* The linked map (the source's own EntityMap) of r in pg, or NULL. */
static const char *page_linked(const fwd_map_page_t *pg, const reg_t *r)
{
    for (size_t k = 0; k < pg->n_regs; k++)
        if (!strcmp(pg->reg_ids[k], reg_id(r))) return pg->linked[k];
    return NULL;
}

/* params with id=ids (the request's id and idPattern replaced). */
static const fwd_param_t *with_ids(arena_t *a, const fwd_param_t *params, size_t *n, const char *ids)
{
    fwd_param_t *v = arena_alloc(a, (*n + 1) * sizeof *v);
    size_t       k = 0;
    for (size_t i = 0; i < *n; i++)
        if (strcmp(params[i].key, "id") && strcmp(params[i].key, "idPattern")) v[k++] = params[i];
    v[k++] = (fwd_param_t){"id", ids};
    *n = k;
    return v;
}

/* params with entityMap=true and entityMapLifetime (a source asked to make its own EntityMap, 5.14.4.4). */
static const fwd_param_t *with_map(arena_t *a, const fwd_param_t *params, size_t *n, int64_t life_us)
{
    fwd_param_t *v = arena_alloc(a, (*n + 2) * sizeof *v);
    if (*n) memcpy(v, params, *n * sizeof *v);
    v[(*n)++] = (fwd_param_t){"entityMap", "true"};
    v[(*n)++] = (fwd_param_t){"entityMapLifetime", arena_printf(a, "PT%lldS", (long long)((life_us + 999999) / 1000000))};
    return v;
}

/* A temporal read also matches the registrations with an observationInterval or managementInterval
 * (5.10.2.4) that its temporal query meets (timeproperty observedAt: the observationInterval, else the
 * managementInterval; without timerel, any), after those without: regs and masks grown in the arena. */
static reg_t **with_intervals(const fwd_in_t *in, const reg_query_t *q, const hist_query_t *tq, reg_t **regs,
                              size_t *nr, uint64_t **masks)
{
    reg_query_t qt = *q;
    size_t      nt;
    uint64_t   *mt;
    qt.temporal = true;
    reg_t **rt = reg_match(in->tenant, &qt, cr_now_us(), in->arena, &nt, &mt);
    if (!nt) return regs;
    reg_t    **v = arena_alloc(in->arena, (*nr + nt) * sizeof *v);
    uint64_t  *m = arena_alloc(in->arena, (*nr + nt) * sizeof *m);
    if (*nr) {
        memcpy(v, regs, *nr * sizeof *v);
        memcpy(m, *masks, *nr * sizeof *m);
    }
    for (size_t i = 0; i < nt; i++) {
        if (tq->timerel != HIST_TIMEREL_NONE &&
            !reg_time_match(rt[i], (int)tq->timerel, tq->time_at, tq->end_time_at, tq->timeprop == HIST_TP_OBSERVED_AT)) {
            reg_unref(rt[i]);
            continue;
        }
        v[*nr] = rt[i];
        m[(*nr)++] = mt[i];
    }
    *masks = m;
    return v;
}

/* only: an entity map's page (fwd_query_map); map_life_us: a new map's lifetime (fwd_query_new_map), else 0. */
static bool forward(const fwd_in_t *in, reg_query_t *q, const char *id, const char *const *attrs, size_t n_attrs,
                    const fwd_param_t *params, size_t n_params, size_t want, const fwd_map_page_t *only,
                    int64_t map_life_us, const hist_query_t *tq, fwd_out_t *out, collected_t **got, size_t *n_got,
                    problem_t *p)
{
    arena_t  *a = in->arena;
    size_t    nr;
    uint64_t *masks;
    bool      temporal = tq != NULL;
    fwd_skip_sources(in, q);
    reg_t   **regs = reg_match(in->tenant, q, cr_now_us(), a, &nr, &masks);
    if (tq) regs = with_intervals(in, q, tq, regs, &nr, &masks);
    *n_got = 0;
    out->forwarded = out->failed = 0;
    out->warning = NULL;
    out->n_regs = 0;
    out->reg_ids = NULL;
    const char **asked = NULL;
    if (only && nr) {            /* an entity map's page: only the sources of its entities, for those */
        asked = arena_alloc(a, nr * sizeof *asked);
        size_t k = 0;
        for (size_t i = 0; i < nr; i++) {
            const char *ids = page_ids(a, only, regs[i]);
            if (!ids) {
                reg_unref(regs[i]);
                continue;
            }
            asked[k] = ids;
            masks[k] = masks[i];
            regs[k++] = regs[i];
        }
        nr = k;
    }
    if (!nr) return true;
    if (fwd_via_loop(in->via)) {
        bool ok = fwd_loop_check(regs, nr, false, p);
        for (size_t i = 0; i < nr; i++) reg_unref(regs[i]);
        return ok;     /* an inclusive loop: answered from the local data only */
    }
    if (in->offload && in->offload(in->header_ud)) {     /* it runs again where it may wait */
        for (size_t i = 0; i < nr; i++) reg_unref(regs[i]);
        return problem_set(p, PB_INTERNAL_ERROR, "handed to a --forwardThreads thread");
    }
    call_t *calls = arena_calloc(a, nr * sizeof *calls);
    size_t  n_map = 0;
    for (size_t i = 0; i < nr; i++) {
        size_t             np = n_params;
        const fwd_param_t *pv = asked && !id ? with_ids(a, params, &np, asked[i]) : params;
        bool               map = map_life_us && (reg_ops(regs[i]) & REG_OP_BIT(REG_OP_CREATE_ENTITY_MAP_QUERY_ENTITY));
        if (map) pv = with_map(a, pv, &np, map_life_us);
        call_build(in, &calls[i], regs[i], masks[i], id, attrs, n_attrs, pv, np, asked ? 0 : want, temporal);
        /* a retrieve through a map passes the source's own map on (5.7.1.4) */
        const char *linked = id && only && !calls[i].skipped ? page_linked(only, regs[i]) : NULL;
        if (linked && !fwd_add_header(&calls[i], a, "NGSILD-EntityMap", linked)) calls[i].skipped = true;
        calls[i].want_map = map;
        n_map += map;
    }
    fwd_run(calls, nr);
    /* a source that refuses entityMap (400) is asked again without it: it makes no map of its own */
    call_t *again = n_map ? arena_calloc(a, n_map * sizeof *again) : NULL;
    size_t  n_again = 0, *which = n_map ? arena_alloc(a, n_map * sizeof *which) : NULL;
    for (size_t i = 0; i < nr && n_map; i++) {
        call_t *c = &calls[i];
        if (!c->want_map || c->skipped || c->from_cache || c->rc != CURLE_OK || c->status != 400) continue;
        if (c->hdrs) curl_slist_free_all(c->hdrs);
        call_build(in, &again[n_again], regs[i], masks[i], id, attrs, n_attrs, params, n_params, want, false);
        which[n_again++] = i;
    }
    if (n_again) {
        fwd_run(again, n_again);
        for (size_t k = 0; k < n_again; k++) calls[which[k]] = again[k];
    }
    *got = arena_calloc(a, (nr + 1) * sizeof **got);
    out->reg_ids = arena_alloc(a, (nr + 1) * sizeof *out->reg_ids);
    out->linked = arena_alloc(a, (nr + 1) * sizeof *out->linked);
    int64_t now = cr_now_us();
    for (size_t i = 0; i < nr; i++) {
        call_t *c = &calls[i];
        if (c->hdrs) curl_slist_free_all(c->hdrs);
        if (c->skipped && !c->url) {
            if (reg_cooldown_ms(c->reg) && reg_last_failure(c->reg)) fwd_warn(a, &out->warning, c->reg, 199, "in cooldown after a failure");
            reg_unref(c->reg);
            continue;
        }
        out->forwarded++;
        if (c->from_cache) fwd_warn(a, &out->warning, c->reg, 110, "Response is Stale");   /* 6.3.17 */
        bool ok = c->rc == CURLE_OK && ((c->status >= 200 && c->status < 300) || c->status == 404);
        if (!ok) {
            out->failed++;
            if (only) out->unanswered |= page_bit(only, c->reg);
            if (c->refused) fwd_warn(a, &out->warning, c->reg, 299, "refused by the egress policy");
            else if (c->rc != CURLE_OK) fwd_warn(a, &out->warning, c->reg, 199, c->too_big ? "the answer is too large"
                                                                                     : curl_easy_strerror(c->rc));
            else fwd_warn(a, &out->warning, c->reg, 299, arena_printf(a, "answered %ld", c->status));
        } else if (c->status != 404) {
            bool bad;
            collected_t *g = &(*got)[(*n_got)++];
            g->n = temporal ? answer_doc(a, c, id == NULL || c->as_query, &g->doc, &bad)
                            : answer_entities(a, c, id == NULL || c->as_query, &g->e, &bad);
            g->aux = reg_mode(c->reg) == REG_AUXILIARY;
            g->ctx = c->ctx;
            if (g->n) {
                g->from = out->n_regs < 63 ? (uint64_t)1 << (out->n_regs + 1) : 0;
                out->linked[out->n_regs] = c->entity_map;
                out->reg_ids[out->n_regs++] = arena_strdup(a, reg_id(c->reg));
            }
            if (bad) {
                ok = false;
                if (only) out->unanswered |= page_bit(only, c->reg);
                out->failed++;
                fwd_warn(a, &out->warning, c->reg, 111, "not an NGSI-LD payload");
            }
        }
        if (!c->from_cache) fwd_counted(c->reg, ok, now);     /* a kept answer was not sent */
        reg_unref(c->reg);
    }
    return true;
}

static bool retrieve(const fwd_in_t *in, const char *id, const typesel_t *types, const char *const *attrs,
                     size_t n_attrs, const fwd_param_t *params, size_t n_params, const fwd_map_page_t *only,
                     cr_entity_t *local, fwd_out_t *out, problem_t *p)
{
    reg_query_t q = {.types = types, .ids = &id, .n_ids = 1, .attrs = attrs, .n_attrs = n_attrs,
                     .ops = REG_OP_BIT(REG_OP_RETRIEVE_ENTITY) | REG_OP_BIT(REG_OP_QUERY_ENTITY) |
                            REG_OP_BIT(REG_OP_QUERY_BATCH)};
    collected_t *got = NULL;
    size_t       n_got;
    out->items = NULL;
    out->n = 0;
    if (!forward(in, &q, id, attrs, n_attrs, params, n_params, 0, only, 0, NULL, out, &got, &n_got, p)) return false;
    if (!out->forwarded) return true;
    version_t *v = arena_alloc(in->arena, (n_got + 2) * sizeof *v);
    size_t     k = 0;
    if (local) v[k++] = (version_t){local, false, FWD_MAP_HERE};
    for (size_t i = 0; i < n_got; i++)
        for (size_t j = 0; j < got[i].n; j++)
            if (!strcmp(got[i].e[j]->id, id)) v[k++] = (version_t){got[i].e[j], got[i].aux, got[i].from};
    out->items = arena_alloc(in->arena, sizeof *out->items);
    if (k) {
        /* an auxiliary source answers only when nothing else does (4.3.6.2): kept, never winning */
        cr_entity_t *m = merge(in->arena, v, k);
        if (m) out->items[out->n++] = m;
    }
    return true;
}

bool fwd_retrieve(const fwd_in_t *in, const char *id, const typesel_t *types, const char *const *attrs,
                  size_t n_attrs, const fwd_param_t *params, size_t n_params, cr_entity_t *local, fwd_out_t *out,
                  problem_t *p)
{
    return retrieve(in, id, types, attrs, n_attrs, params, n_params, NULL, local, out, p);
}

bool fwd_retrieve_map(const fwd_in_t *in, const char *id, const typesel_t *types, const char *const *attrs,
                      size_t n_attrs, const fwd_param_t *params, size_t n_params, const fwd_map_page_t *pg,
                      cr_entity_t *local, fwd_out_t *out, problem_t *p)
{
    out->forwarded = out->failed = out->n = out->n_regs = 0;
    out->warning = NULL;
    out->items = NULL;
    if (!pg->n) return true;                   /* the map does not list the entity: no source has it */
    return retrieve(in, id, types, attrs, n_attrs, params, n_params, pg, local, out, p);
}

typedef struct group {
    const char *id;
    version_t  *v;
    size_t      n, cap;
} group_t;

/* The groups of one merge, in first-seen order, found by id through an
 * open-addressing table (a page of every source: thousands of entities). */
typedef struct groups {
    group_t  *g;
    size_t    n, cap;
    size_t   *slot;        /* index + 1, 0: empty */
    size_t    nslot;       /* power of two, > 2 * cap */
} groups_t;

static void groups_init(arena_t *a, groups_t *gs, size_t cap)
{
    gs->cap = cap ? cap : 1;
    gs->n = 0;
    gs->g = arena_calloc(a, gs->cap * sizeof *gs->g);
    for (gs->nslot = 16; gs->nslot < 2 * gs->cap + 1; gs->nslot *= 2) {}
    gs->slot = arena_calloc(a, gs->nslot * sizeof *gs->slot);
}

static group_t *group_find(const groups_t *gs, const char *id)
{
    for (size_t i = (size_t)cr_hash(id, strlen(id)) & (gs->nslot - 1); gs->slot[i]; i = (i + 1) & (gs->nslot - 1))
        if (!strcmp(gs->g[gs->slot[i] - 1].id, id)) return &gs->g[gs->slot[i] - 1];
    return NULL;
}

static group_t *group_of(groups_t *gs, const char *id)
{
    size_t i = (size_t)cr_hash(id, strlen(id)) & (gs->nslot - 1);
    for (; gs->slot[i]; i = (i + 1) & (gs->nslot - 1))
        if (!strcmp(gs->g[gs->slot[i] - 1].id, id)) return &gs->g[gs->slot[i] - 1];
    group_t *g = &gs->g[gs->n++];      /* never full: cap counts every version */
    g->id = id;
    gs->slot[i] = gs->n;
    return g;
}

static void group_add(arena_t *a, group_t *g, version_t v)
{
    g->v = arena_grow(a, g->v, g->n, &g->cap, sizeof *g->v, 4);
    g->v[g->n++] = v;
}

/* The groups of the local versions and the answers', in first-seen order; with only (an entity map's page),
 * those of its ids first and no others. */
static void group_all(arena_t *a, groups_t *gs, cr_entity_t *const *local, size_t n_local, const collected_t *got,
                      size_t n_got, const char *const *only, size_t n_only)
{
    size_t total = n_local + n_only;
    for (size_t i = 0; i < n_got; i++) total += got[i].n;
    groups_init(a, gs, total);
    for (size_t i = 0; i < n_only; i++) group_of(gs, only[i]);
    for (size_t i = 0; i < n_local; i++) {
        group_t *g = only ? group_find(gs, local[i]->id) : group_of(gs, local[i]->id);
        if (g) group_add(a, g, (version_t){local[i], false, FWD_MAP_HERE});
    }
    for (size_t i = 0; i < n_got; i++)
        for (size_t j = 0; j < got[i].n; j++) {
            group_t *g = only ? group_find(gs, got[i].e[j]->id) : group_of(gs, got[i].e[j]->id);
            if (g) group_add(a, g, (version_t){got[i].e[j], got[i].aux, got[i].from});
        }
}

static uint64_t group_from(const group_t *g)
{
    uint64_t f = 0;
    for (size_t i = 0; i < g->n; i++) f |= g->v[i].from;
    return f;
}

static bool query(const fwd_in_t *in, const reg_query_t *match, const fwd_param_t *params, size_t n_params,
                  size_t want, int64_t map_life_us, cr_entity_t *const *local, size_t n_local, fwd_out_t *out,
                  problem_t *p)
{
    reg_query_t  q = *match;
    collected_t *got = NULL;
    size_t       n_got;
    q.ops = REG_OP_BIT(REG_OP_QUERY_ENTITY) | REG_OP_BIT(REG_OP_QUERY_BATCH);
    out->items = NULL;
    out->n = 0;
    if (!forward(in, &q, NULL, match->attrs, match->n_attrs, params, n_params, want, NULL, map_life_us, NULL, out,
                 &got, &n_got, p))
        return false;
    if (!out->forwarded) return true;
    arena_t *a = in->arena;
    groups_t gs;
    group_all(a, &gs, local, n_local, got, n_got, NULL, 0);
    out->items = arena_alloc(a, (gs.n + 1) * sizeof *out->items);
    out->origins = out->n_regs <= 63 ? arena_alloc(a, (gs.n + 1) * sizeof *out->origins) : NULL;
    for (size_t i = 0; i < gs.n; i++) {
        cr_entity_t *m = merge(a, gs.g[i].v, gs.g[i].n);
        if (!m) continue;
        if (out->origins) out->origins[out->n] = group_from(&gs.g[i]);
        out->items[out->n++] = m;
    }
    return true;
}

bool fwd_query(const fwd_in_t *in, const reg_query_t *q, const fwd_param_t *params, size_t n_params, size_t want,
               cr_entity_t *const *local, size_t n_local, fwd_out_t *out, problem_t *p)
{
    return query(in, q, params, n_params, want, 0, local, n_local, out, p);
}

bool fwd_query_new_map(const fwd_in_t *in, const reg_query_t *q, const fwd_param_t *params, size_t n_params,
                       size_t want, int64_t lifetime_us, cr_entity_t *const *local, size_t n_local, fwd_out_t *out,
                       problem_t *p)
{
    return query(in, q, params, n_params, want, lifetime_us > 0 ? lifetime_us : 1, local, n_local, out, p);
}

size_t fwd_map_linked(const fwd_in_t *in, const fwd_map_page_t *mp, reg_op_t op, const char *body)
{
    arena_t *a = in->arena;
    call_t  *calls = arena_calloc(a, (mp->n_regs + 1) * sizeof *calls);
    size_t   nc = 0, failed = 0;
    int64_t  now = cr_now_us();
    for (size_t k = 0; k < mp->n_regs; k++) {
        if (!mp->linked[k]) continue;
        reg_t *r = reg_find(in->tenant, mp->reg_ids[k], now);
        if (!r) continue;
        if (!(reg_ops(r) & REG_OP_BIT(op)) || fwd_cooling(r)) {
            reg_unref(r);
            continue;
        }
        call_t     *c = &calls[nc++];
        const char *jctx;
        sbuf_t      path;
        sb_init(&path, a, 128);
        sb_adds(&path, "entityMaps/");
        fwd_url_encode(&path, mp->linked[k]);
        c->reg = r;
        c->ctx = fwd_part_ctx(a, r, in->ctx, &jctx);
        c->url = fwd_part_url(a, r, path.p, NULL);
        c->method = body ? "PATCH" : "DELETE";
        c->post = body ? arena_strdup(a, body) : NULL;
        if (!fwd_headers(in, c, r, jctx, body ? "application/json" : NULL)) c->skipped = true;
    }
    fwd_run(calls, nc);
    for (size_t i = 0; i < nc; i++) {
        call_t *c = &calls[i];
        bool    ok = !c->skipped && c->rc == CURLE_OK && c->status >= 200 && c->status < 300;
        if (!ok) {
            failed++;
            LOG_I("fwd: %s of the linked EntityMap %s failed (%ld)", c->method, c->url, c->status);
        }
        if (!c->skipped) fwd_counted(c->reg, ok || c->status == 404, now);
        if (c->hdrs) curl_slist_free_all(c->hdrs);
        reg_unref(c->reg);
    }
    return failed;
}

bool fwd_query_map(const fwd_in_t *in, const reg_query_t *match, const fwd_param_t *params, size_t n_params,
                   const fwd_map_page_t *pg, bool remote, cr_entity_t *const *local, size_t n_local, fwd_out_t *out,
                   problem_t *p)
{
    reg_query_t  q = *match;
    collected_t *got = NULL;
    size_t       n_got = 0;
    arena_t     *a = in->arena;
    q.ops = REG_OP_BIT(REG_OP_QUERY_ENTITY) | REG_OP_BIT(REG_OP_QUERY_BATCH);
    memset(out, 0, sizeof *out);
    if (remote && pg->n_regs &&
        !forward(in, &q, NULL, match->attrs, match->n_attrs, params, n_params, 0, pg, 0, NULL, out, &got, &n_got, p))
        return false;
    /* the page's ids, in map order: their groups are the first pg->n */
    groups_t gs;
    group_all(a, &gs, local, n_local, got, n_got, pg->ids, pg->n);
    out->items = arena_alloc(a, (pg->n + 1) * sizeof *out->items);
    out->gone = arena_alloc(a, (pg->n + 1) * sizeof *out->gone);
    for (size_t i = 0; i < pg->n; i++) {
        cr_entity_t *m = gs.g[i].n ? merge(a, gs.g[i].v, gs.g[i].n) : NULL;
        if (m) out->items[out->n++] = m;
        else if (!(pg->origins[i] & out->unanswered)) out->gone[out->n_gone++] = pg->ids[i];   /* kept: not asked */
    }
    return true;
}

bool fwd_read_temporal(const fwd_in_t *in, reg_query_t *q, const hist_query_t *tq, const char *id,
                       const fwd_param_t *params, size_t n_params, size_t want, const fwd_map_page_t *only,
                       fwd_out_t *out, fwd_tdoc_t **docs, size_t *n_docs, problem_t *p)
{
    collected_t *got = NULL;
    size_t       n_got = 0;
    memset(out, 0, sizeof *out);
    *docs = NULL;
    *n_docs = 0;
    if (!forward(in, q, id, q->attrs, q->n_attrs, params, n_params, want, only, 0, tq, out, &got, &n_got, p))
        return false;
    *docs = arena_alloc(in->arena, (n_got + 1) * sizeof **docs);
    for (size_t i = 0; i < n_got; i++)
        if (got[i].doc) (*docs)[(*n_docs)++] = (fwd_tdoc_t){got[i].doc, got[i].ctx, got[i].aux, got[i].from};
    return true;
}
