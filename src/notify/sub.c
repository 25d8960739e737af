/*
 * sub.c - the subscription model (5.2.12 Subscription, 5.2.13 GeoQuery,
 * 5.2.14 NotificationParams, 5.2.15 Endpoint, 5.2.33 EntitySelector): the
 * stored document is validated and parsed here into a notify_sub_t that the
 * matcher evaluates without parsing anything again, and rendered back for
 * GET. One function (notify_sub_build) serves create, update and the
 * rebuild at start, so the three cannot disagree on what is valid.
 */
#include "notify_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ counters */

sub_counters_t *sub_counters_new(void)
{
    static atomic_uint_fast64_t order;
    sub_counters_t *c = cr_xcalloc(1, sizeof *c);
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->why_mu, NULL);
    c->order = atomic_fetch_add(&order, 1);
    return c;
}

void sub_counters_unref(sub_counters_t *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
        pthread_mutex_destroy(&c->why_mu);
        free(c);
    }
}

/* ------------------------------------------------------------ helpers */

#define BAD(...) do { problem_set(p, PB_BAD_REQUEST_DATA, __VA_ARGS__); goto fail; } while (0)

static bool is_member(const char *k, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(k, *list)) return true;
    return false;
}

/* A non-empty array of attribute names, expanded and interned into *out. */
static bool name_array(arena_t *a, const json_t *v, const ld_context_t *ctx, const char *what,
                       const char ***out, size_t *n, problem_t *p)
{
    if (!json_is_array(v) || v->len == 0)
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a non-empty array of attribute names", what);
    const char **names = arena_alloc(a, v->len * sizeof *names);
    size_t       k = 0;
    for (const json_t *c = v->child; c; c = c->next) {
        if (!json_is_string(c) || !model_valid_name(c->str))
            return problem_set(p, PB_BAD_REQUEST_DATA, "%s: '%s' is not an attribute name", what,
                               json_is_string(c) ? c->str : "(not a string)");
        names[k++] = ld_expand(ctx, c->str);
    }
    *out = names;
    *n   = k;
    return true;
}

/* pick / omit: an array of names, or a comma-separated string (4.21). */
static bool projection(arena_t *a, const json_t *v, const ld_context_t *ctx, const char *what,
                       const char ***out, size_t *n, problem_t *p)
{
    if (json_is_string(v)) {
        size_t cnt = 1;
        for (const char *s = v->str; *s; s++) cnt += *s == ',';
        const char **names = arena_alloc(a, cnt * sizeof *names);
        size_t       k = 0;
        for (const char *s = v->str; ;) {
            const char *e = strchr(s, ',');
            size_t      l = e ? (size_t)(e - s) : strlen(s);
            char       *t = arena_strndup(a, s, l);
            if (!*t || !model_valid_name(t))
                return problem_set(p, PB_BAD_REQUEST_DATA, "notification.%s: '%s' is not an attribute name", what, t);
            names[k++] = !strcmp(t, "id") ? "@id" : !strcmp(t, "type") ? "@type" : ld_expand(ctx, t);
            if (!e) break;
            s = e + 1;
        }
        *out = names;
        *n   = k;
        return true;
    }
    if (!json_is_array(v) || !v->len)
        return problem_set(p, PB_BAD_REQUEST_DATA, "notification.%s must be a non-empty array or list of names", what);
    const char **names = arena_alloc(a, v->len * sizeof *names);
    size_t       k = 0;
    for (const json_t *c = v->child; c; c = c->next) {
        if (!json_is_string(c) || !model_valid_name(c->str))
            return problem_set(p, PB_BAD_REQUEST_DATA, "notification.%s: an entry is not an attribute name", what);
        names[k++] = !strcmp(c->str, "id") ? "@id" : !strcmp(c->str, "type") ? "@type" : ld_expand(ctx, c->str);
    }
    *out = names;
    *n   = k;
    return true;
}

static bool uri_ok(const char *s)
{
    return model_valid_uri(s);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decodes %XX escapes of a q given in a body (6.3.8 allows them). */
static char *pct_decode(arena_t *a, const char *s)
{
    char *out = arena_strdup(a, s), *w = out;
    for (const char *r = out; *r; r++) {
        int hi, lo;
        if (*r == '%' && r[1] && r[2] && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 2;
        } else *w++ = *r;
    }
    *w = '\0';
    return out;
}

/* key/value pairs (receiverInfo, notifierInfo: 5.2.15 KeyValuePair). */
static bool key_values(arena_t *a, const json_t *v, const char *what, sub_header_t **out, size_t *n,
                       problem_t *p)
{
    if (!json_is_array(v) || !v->len)
        return problem_set(p, PB_BAD_REQUEST_DATA, "endpoint.%s must be a non-empty array of {key, value}", what);
    sub_header_t *h = arena_alloc(a, v->len * sizeof *h);
    size_t        k = 0;
    for (const json_t *c = v->child; c; c = c->next) {
        const json_t *key = json_get(c, "key"), *val = json_get(c, "value");
        if (!json_is_object(c) || !json_is_string(key) || !json_is_string(val) || !key->len || c->len != 2)
            return problem_set(p, PB_BAD_REQUEST_DATA, "endpoint.%s: each entry is {\"key\": string, \"value\": string}", what);
        for (const char *s = key->str; *s; s++)
            if (*s <= ' ' || *s == ':' || *s >= 127)
                return problem_set(p, PB_BAD_REQUEST_DATA, "endpoint.%s: '%s' is not a header name", what, key->str);
        for (const char *s = val->str; *s; s++)
            if (*s == '\r' || *s == '\n')
                return problem_set(p, PB_BAD_REQUEST_DATA, "endpoint.%s: a value holds a line break", what);
        h[k].name  = key->str;
        h[k].value = val->str;
        k++;
    }
    *out = h;
    *n   = k;
    return true;
}

/* mqtt[s]://[user[:pass]@]host[:port]/topic[/subtopic]* (7.2) */
static bool mqtt_uri(notify_sub_t *s, const char *uri, problem_t *p)
{
    s->mqtt = true;
    s->mq_tls = !strncmp(uri, "mqtts://", 8);
    const char *a = uri + (s->mq_tls ? 8 : 7), *slash = strchr(a, '/');
    if (!slash || !slash[1])
        return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint.uri: an MQTT endpoint needs a topic (7.2)");
    s->mq_topic = arena_strdup(s->a, slash + 1);
    char *auth = arena_strndup(s->a, a, (size_t)(slash - a)), *at = strrchr(auth, '@'), *host = auth;
    if (at) {
        *at = '\0';
        host = at + 1;
        char *colon = strchr(auth, ':');
        if (colon) {
            *colon = '\0';
            s->mq_pass = colon + 1;
        }
        s->mq_user = auth;
    }
    s->mq_port = s->mq_tls ? 8883 : 1883;
    char *port = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
    if (port) {
        if (host[0] == '[') port++;
        *port = '\0';
        char *end;
        long  v = strtol(port + 1, &end, 10);
        if (*end || v <= 0 || v > 65535)
            return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint.uri: bad MQTT port");
        s->mq_port = (int)v;
    }
    if (host[0] == '[') {
        size_t l = strlen(host);
        if (l < 3 || host[l - 1] != ']') return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint.uri: bad MQTT host");
        host[l - 1] = '\0';
        host++;
    }
    if (!*host) return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint.uri: an MQTT endpoint needs a host");
    s->mq_host = host;
    s->mqtt_v5 = true;           /* Table 7.2-1: mqtt5.0 by default */
    return true;
}

/* http://host[:port][/path][?query]: the own client's when host is a
 * literal address or localhost and there is no user info (else libcurl's). */
static void http_uri(notify_sub_t *s, const char *uri)
{
    const char *a = uri + 7, *e = a + strcspn(a, "/?#");
    if (memchr(a, '@', (size_t)(e - a)) || e == a) return;
    char *auth = arena_strndup(s->a, a, (size_t)(e - a)), *host = auth;
    int   port = 80;
    char *colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
    if (colon) {
        if (host[0] == '[') colon++;
        char *end;
        long  v = strtol(colon + 1, &end, 10);
        if (*end || v <= 0 || v > 65535) return;
        port = (int)v;
        host = arena_strndup(s->a, auth, (size_t)(colon - auth));
    }
    if (!httpc_address(host, port, &s->hc_addr, &s->hc_addr_len)) return;
    size_t plen = strcspn(e, "#");
    s->hc_path = *e == '/' ? arena_strndup(s->a, e, plen) : arena_printf(s->a, "/%.*s", (int)plen, e);
    s->hc_host = auth;
    s->hc = true;
}

void notify_uri_host(const char *uri, char *out, size_t n)
{
    const char *a = strstr(uri, "://");
    a = a ? a + 3 : uri;
    const char *e = a + strcspn(a, "/?#");
    for (const char *at = a; at < e; at++)        /* user info: up to the last '@' of the authority */
        if (*at == '@') a = at + 1;
    size_t l = *a == '[' ? strcspn(a, "]") + 1 : strcspn(a, ":/?#");
    if (a + l > e) l = (size_t)(e - a);
    snprintf(out, n, "%.*s", (int)l, a);
}

/* The egress policy (core/egress.c) on the endpoint's host as written: a
 * host-name rule, or the address rules for a literal address. NULL: allowed
 * (so far: a host name is checked again on every address connected). */
static const char *egress_refusal(notify_sub_t *s)
{
    char host[256], bare[256], why[160];
    if (s->mqtt) snprintf(host, sizeof host, strchr(s->mq_host, ':') ? "[%s]" : "%s", s->mq_host);
    else notify_uri_host(s->uri, host, sizeof host);
    size_t hl = strlen(host);
    snprintf(bare, sizeof bare, "%.*s", (int)(host[0] == '[' && hl > 2 ? hl - 2 : hl), host + (host[0] == '['));
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    const struct sockaddr *sa = NULL;
    if (s->hc) {
        sa = (const struct sockaddr *)&s->hc_addr;          /* "localhost" too: the address httpc.c connects */
    } else if (inet_pton(AF_INET, bare, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
        ss.ss_family = AF_INET;
        sa = (const struct sockaddr *)&ss;
    } else if (inet_pton(AF_INET6, bare, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
        ss.ss_family = AF_INET6;
        sa = (const struct sockaddr *)&ss;
    }
    if (egress_check_host(host, sa, why, sizeof why)) return NULL;
    return arena_strdup(s->a, why);
}

static bool endpoint_parse(notify_sub_t *s, const json_t *ep, problem_t *p)
{
    static const char *const known[] = {"uri", "accept", "receiverInfo", "notifierInfo", "timeout", "cooldown", NULL};
    if (!json_is_object(ep)) return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint must be an object");
    for (const json_t *m = ep->child; m; m = m->next)
        if (!is_member(m->key, known))
            return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint: unknown member '%s'", m->key);
    const json_t *uri = json_get(ep, "uri");
    if (!json_is_string(uri) || !uri_ok(uri->str))
        return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint.uri must be a URI");
    if (!strncmp(uri->str, "mqtt://", 7) || !strncmp(uri->str, "mqtts://", 8)) {
        if (!mqtt_uri(s, uri->str, p)) return false;
    } else if (strncmp(uri->str, "http://", 7) && strncmp(uri->str, "https://", 8))
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "notification.endpoint.uri: '%s': endpoints are http://, https://, mqtt:// or mqtts://",
                           uri->str);
    s->uri = uri->str;
    if (!strncmp(uri->str, "http://", 7)) http_uri(s, uri->str);
    s->egress_why = egress_refusal(s);
    s->accept = SUB_ACC_JSON;
    const json_t *acc = json_get(ep, "accept");
    if (acc) {
        if (json_is_string(acc) && !strcmp(acc->str, "application/json")) s->accept = SUB_ACC_JSON;
        else if (json_is_string(acc) && !strcmp(acc->str, "application/ld+json")) s->accept = SUB_ACC_LDJSON;
        else if (json_is_string(acc) && !strcmp(acc->str, "application/geo+json")) s->accept = SUB_ACC_GEOJSON;
        else return problem_set(p, PB_BAD_REQUEST_DATA,
                                "notification.endpoint.accept must be application/json, application/ld+json or application/geo+json");
    }
    const json_t *v;
    if ((v = json_get(ep, "receiverInfo")) &&
        !key_values(s->a, v, "receiverInfo", &s->receiver_info, &s->n_receiver_info, p)) return false;
    sub_header_t *ni; size_t nni;
    if ((v = json_get(ep, "notifierInfo")) && !key_values(s->a, v, "notifierInfo", &ni, &nni, p)) return false;
    for (size_t i = 0; v && i < nni; i++) {
        if (!strcmp(ni[i].name, "MQTT-QoS")) {
            if (strlen(ni[i].value) != 1 || ni[i].value[0] < '0' || ni[i].value[0] > '2')
                return problem_set(p, PB_BAD_REQUEST_DATA, "notifierInfo: MQTT-QoS must be 0, 1 or 2");
            s->mqtt_qos = ni[i].value[0] - '0';
        } else if (!strcmp(ni[i].name, "MQTT-Version")) {
            if (!strcmp(ni[i].value, "mqtt3.1.1")) s->mqtt_v5 = false;
            else if (!strcmp(ni[i].value, "mqtt5.0")) s->mqtt_v5 = true;
            else return problem_set(p, PB_BAD_REQUEST_DATA, "notifierInfo: MQTT-Version must be mqtt3.1.1 or mqtt5.0");
        }
    }
    if ((v = json_get(ep, "timeout"))) {
        if (!json_is_number(v) || json_number(v) <= 0 || json_number(v) > 3600000)
            return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint.timeout must be a positive number of ms");
        s->timeout_ms = (long)json_number(v);
    }
    if ((v = json_get(ep, "cooldown"))) {
        if (!json_is_number(v) || json_number(v) <= 0 || json_number(v) > 86400000)
            return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint.cooldown must be a positive number of ms");
        s->cooldown_ms = (long)json_number(v);
        if (!s->cooldown_ms) s->cooldown_ms = 1;
    }
    return true;
}

static bool notification_parse(notify_sub_t *s, const json_t *n, problem_t *p)
{
    static const char *const known[] = {"attributes", "pick", "omit", "format", "sysAttrs", "showChanges",
        "endpoint", "join", "joinLevel", "status", "timesSent", "timesFailed", "lastNotification",
        "lastSuccess", "lastFailure", NULL};
    if (!json_is_object(n)) return problem_set(p, PB_BAD_REQUEST_DATA, "notification must be an object");
    for (const json_t *m = n->child; m; m = m->next)
        if (!is_member(m->key, known))
            return problem_set(p, PB_BAD_REQUEST_DATA, "notification: unknown member '%s'", m->key);
    const json_t *v;
    s->ro.ctx    = s->out_ctx;
    s->ro.format = FMT_NORMALIZED;
    if ((v = json_get(n, "format"))) {
        if (!json_is_string(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "notification.format must be a string");
        if (!strcmp(v->str, "normalized")) s->ro.format = FMT_NORMALIZED;
        else if (!strcmp(v->str, "concise")) s->ro.format = FMT_CONCISE;
        else if (!strcmp(v->str, "keyValues") || !strcmp(v->str, "simplified")) s->ro.format = FMT_KEYVALUES;
        else return problem_set(p, PB_BAD_REQUEST_DATA,
                                "notification.format must be normalized, concise, simplified or keyValues, not '%s'", v->str);
    }
    if ((v = json_get(n, "sysAttrs"))) {
        if (!json_is_bool(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "notification.sysAttrs must be true or false");
        s->ro.sys_attrs = v->type == JSON_TRUE;
    }
    if ((v = json_get(n, "showChanges"))) {
        if (!json_is_bool(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "notification.showChanges must be true or false");
        s->show_changes = v->type == JSON_TRUE;
    }
    const json_t *attrs = json_get(n, "attributes"), *pick = json_get(n, "pick"), *omit = json_get(n, "omit");
    if (attrs && pick) return problem_set(p, PB_BAD_REQUEST_DATA, "notification: attributes and pick exclude each other");
    if (attrs) {
        const char **names; size_t k;
        if (!name_array(s->a, attrs, s->ctx, "notification.attributes", &names, &k, p)) return false;
        const char **pk = arena_alloc(s->a, (k + 2) * sizeof *pk);
        pk[0] = "@id";
        pk[1] = "@type";
        memcpy(pk + 2, names, k * sizeof *names);
        s->ro.pick   = pk;
        s->ro.n_pick = k + 2;
        s->attrs_pick = true;
    }
    if (pick && !projection(s->a, pick, s->ctx, "pick", &s->ro.pick, &s->ro.n_pick, p)) return false;
    if (omit && !projection(s->a, omit, s->ctx, "omit", &s->ro.omit, &s->ro.n_omit, p)) return false;
    for (size_t i = 0; i < s->ro.n_pick && omit; i++)
        for (size_t j = 0; j < s->ro.n_omit; j++)
            if (s->ro.pick[i] == s->ro.omit[j] || !strcmp(s->ro.pick[i], s->ro.omit[j]))
                return problem_set(p, PB_BAD_REQUEST_DATA, "notification: pick and omit both name '%s'",
                                   ld_compact(s->ctx, s->ro.pick[i]));
    if ((v = json_get(n, "join"))) {
        if (!json_is_string(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "notification.join must be a string");
        if (!strcmp(v->str, "flat")) s->join = SUB_JOIN_FLAT;
        else if (!strcmp(v->str, "inline")) s->join = SUB_JOIN_INLINE;
        else if (strcmp(v->str, "@none") && strcmp(v->str, "none"))
            return problem_set(p, PB_BAD_REQUEST_DATA, "notification.join must be flat, inline or @none, not '%s' (5.2.14)",
                               v->str);
    }
    s->join_level = 1;
    if ((v = json_get(n, "joinLevel"))) {
        double l = json_is_number(v) ? json_number(v) : 0;
        if (l < 1 || l > PROJECTION_MAX_DEPTH || l != (double)(unsigned)l)
            return problem_set(p, PB_BAD_REQUEST_DATA, "notification.joinLevel must be an integer from 1 to %d",
                               PROJECTION_MAX_DEPTH);
        s->join_level = (unsigned)l;
    }
    const json_t *ep = json_get(n, "endpoint");
    if (!ep) return problem_set(p, PB_BAD_REQUEST_DATA, "notification.endpoint is mandatory");
    return endpoint_parse(s, ep, p);
}

static bool selector_parse(notify_sub_t *s, const json_t *v, entity_selector_t *out, problem_t *p)
{
    if (!json_is_object(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "entities: each entry must be an object");
    for (const json_t *m = v->child; m; m = m->next)
        if (strcmp(m->key, "id") && strcmp(m->key, "idPattern") && strcmp(m->key, "type"))
            return problem_set(p, PB_BAD_REQUEST_DATA, "entities: unknown member '%s'", m->key);
    const json_t *id = json_get(v, "id"), *pat = json_get(v, "idPattern"), *type = json_get(v, "type");
    memset(out, 0, sizeof *out);
    if (!json_is_string(type) || !type->len)
        return problem_set(p, PB_BAD_REQUEST_DATA, "entities: each entry needs a type (5.2.33)");
    if (!(out->types = typesel_parse_stored(s->a, type->str, s->ctx, p))) return false;
    if (id) {
        if (!json_is_string(id) || !uri_ok(id->str))
            return problem_set(p, PB_BAD_REQUEST_DATA, "entities: id must be a URI");
        out->id = id->str;
    }
    if (pat) {
        if (!json_is_string(pat)) return problem_set(p, PB_BAD_REQUEST_DATA, "entities: idPattern must be a string");
        if (!(out->id_pattern = filter_compile_pattern(s->a, pat->str, p))) return false;
    }
    return true;
}

static bool trigger_parse(notify_sub_t *s, const json_t *v, problem_t *p)
{
    static const char *const names[] = {"entityCreated", "entityUpdated", "entityDeleted",
                                        "attributeCreated", "attributeUpdated", "attributeDeleted"};
    if (!json_is_array(v) || !v->len)
        return problem_set(p, PB_BAD_REQUEST_DATA, "notificationTrigger must be a non-empty array");
    s->triggers = 0;
    for (const json_t *c = v->child; c; c = c->next) {
        size_t i;
        for (i = 0; i < CR_ARRAY_LEN(names); i++)
            if (json_is_string(c) && !strcmp(c->str, names[i])) break;
        if (i == CR_ARRAY_LEN(names))
            return problem_set(p, PB_BAD_REQUEST_DATA, "notificationTrigger: '%s' is not a trigger",
                               json_is_string(c) ? c->str : "(not a string)");
        s->triggers |= 1u << i;
    }
    /* 5.2.12: entityUpdated is attributeCreated + attributeUpdated + attributeDeleted */
    if (s->triggers & TRG_ENTITY_UPDATED) s->triggers |= TRG_ATTR_CREATED | TRG_ATTR_UPDATED | TRG_ATTR_DELETED;
    return true;
}

static bool time_member(const json_t *v, const char *what, int64_t *out, problem_t *p)
{
    if (!json_is_string(v) || !cr_datetime_parse(v->str, out))
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a DateTime", what);
    return true;
}

/* ------------------------------------------------------------ build */

static const char *const top_members[] = {"id", "type", "subscriptionName", "description", "entities",
    "watchedAttributes", "notificationTrigger", "q", "geoQ", "scopeQ", "csf", "datasetId", "lang",
    "localOnly", "splitEntities", "expiresAt", "isActive", "throttling", "timeInterval", "jsonldContext", "expandValues",
    "jsonKeys", "notification", "@context", "createdAt", "modifiedAt", "status", "temporalQ", NULL};

static notify_sub_t *sub_build(const char *tenant, const char *json, size_t len, int64_t now, bool csource,
                               problem_t *p)
{
    notify_sub_t *s = cr_xcalloc(1, sizeof *s);
    atomic_init(&s->refs, 1);
    s->a = arena_new(4096);
    s->doc = arena_strndup(s->a, json, len);
    s->doc_len = len;
    s->tenant = intern_cstr(tenant ? tenant : "");
    s->expires_at = CR_NO_TIME;
    s->active = true;
    s->triggers = TRG_ATTR_CREATED | TRG_ATTR_UPDATED;

    char    err[128];
    json_t *t = json_parse_copy(s->a, json, len, &(json_limits_t){0}, err, sizeof err);
    if (!t) BAD("a subscription is not valid JSON: %s", err);
    if (!json_is_object(t)) BAD("a subscription must be a JSON object");
    s->tree = t;
    for (const json_t *m = t->child; m; m = m->next)
        if (!is_member(m->key, top_members)) BAD("unknown member '%s' of a Subscription", m->key);

    const json_t *v = json_get(t, "id");
    if (!json_is_string(v) || !uri_ok(v->str)) BAD("id must be a URI");
    s->id = v->str;
    if ((v = json_get(t, "type")) && (!json_is_string(v) || strcmp(v->str, "Subscription")))
        BAD("type must be \"Subscription\"");
    const json_t *ctxv = json_get(t, "@context");
    if (ctxv) {
        if (!(s->ctx = ld_hold_from_json(s->a, ctxv, p))) goto fail;
    } else s->ctx = ld_core();
    s->out_ctx = s->ctx;
    if ((v = json_get(t, "jsonldContext"))) {
        if (!json_is_string(v) || !uri_ok(v->str)) BAD("jsonldContext must be a URI");
        if (!(s->out_ctx = ld_hold_from_json(s->a, v, p))) goto fail;
    }
    for (const char *const *k = (const char *const[]){"subscriptionName", "description", "csf", NULL}; *k; k++)
        if ((v = json_get(t, *k)) && !json_is_string(v)) BAD("%s must be a string", *k);
    if ((v = json_get(t, "localOnly")) && !json_is_bool(v)) BAD("localOnly must be true or false");
    if ((v = json_get(t, "splitEntities")) && !json_is_bool(v)) BAD("splitEntities must be true or false (5.2.12)");
    if ((v = json_get(t, "isActive"))) {
        if (!json_is_bool(v)) BAD("isActive must be true or false");
        s->active = v->type == JSON_TRUE;
    }
    const json_t *ents = json_get(t, "entities");
    if (ents) {
        if (!json_is_array(ents) || !ents->len) BAD("entities must be a non-empty array of EntitySelectors");
        s->sel = arena_calloc(s->a, ents->len * sizeof *s->sel);
        for (const json_t *c = ents->child; c; c = c->next)
            if (!selector_parse(s, c, &s->sel[s->n_sel++], p)) goto fail;
    }
    const json_t *watched = json_get(t, "watchedAttributes");
    if (watched && !name_array(s->a, watched, s->ctx, "watchedAttributes", &s->watched, &s->n_watched, p)) goto fail;
    if ((v = json_get(t, "notificationTrigger")) && !trigger_parse(s, v, p)) goto fail;
    /* expandValues, jsonKeys (5.2.12, 4.9): how q compares the values of the
     * named attributes (q_value_options: expanded with the subscription's
     * @context, or compared as written) */
    const char **vnames[2] = {NULL, NULL};
    size_t       vn[2] = {0, 0};
    for (const char *const *k = (const char *const[]){"expandValues", "jsonKeys", NULL}; *k; k++) {
        const char **names; size_t nn;
        if (!(v = json_get(t, *k))) continue;
        if (json_is_string(v)) {       /* the comma-separated String of Table 5.2.12-1 */
            json_t *arr = json_new(s->a, JSON_ARRAY);
            for (const char *c = v->str;;) {
                size_t l = strcspn(c, ",");
                json_add(arr, NULL, json_new_stringn(s->a, c, l));
                if (!c[l]) break;
                c += l + 1;
            }
            v = arr;
        }
        if (!name_array(s->a, v, s->ctx, *k, &names, &nn, p)) goto fail;
        vnames[**k != 'e'] = names;
        vn[**k != 'e'] = nn;
    }
    if ((v = json_get(t, "q"))) {
        if (!json_is_string(v) || !v->len) BAD("q must be a non-empty string");
        const char *qt = pct_decode(s->a, v->str);
        if (!(s->q = q_parse_stored(s->a, qt, s->ctx, p))) goto fail;
        /* 5.2.12: q is "a valid query string as per clause 4.9", and 4.9 lets a term apply to the
         * entities a Relationship targets, rel{attr}; 5.8.6 matches the notified entities "as mandated
         * by clauses 4.9, 4.10 and 4.19". Unlike a query (5.7.2.4), no clause of 5.8 asks for
         * notification.join: such a q is valid with or without it, and evaluated against the linked
         * entities held here when a change is matched (engine.c). A malformed term is BadRequestData
         * (5.8.1.4), from the parser. */
        s->q_linked = q_link_depth(s->q) > 0;
        if (s->q_linked && q_links(s->q, NULL, 0) > Q_MAX_LINKS)
            BAD("q has more than %d terms into linked entities", Q_MAX_LINKS);
        q_value_options(s->q, s->a, s->ctx, vnames[0], vn[0], vnames[1], vn[1]);
    }
    if ((v = json_get(t, "geoQ"))) {
        if (!json_is_object(v)) BAD("geoQ must be an object");
        for (const json_t *m = v->child; m; m = m->next)
            if (strcmp(m->key, "geometry") && strcmp(m->key, "coordinates") && strcmp(m->key, "georel") &&
                strcmp(m->key, "geoproperty"))
                BAD("geoQ: unknown member '%s'", m->key);
        const json_t *rel = json_get(v, "georel"), *gp = json_get(v, "geoproperty");
        if (!json_is_string(rel)) BAD("geoQ.georel must be a string");
        if (gp && !json_is_string(gp)) BAD("geoQ.geoproperty must be a string");
        if (gp) (void)ld_expand(s->ctx, gp->str);   /* stored: the name is interned, the query finds it */
        if (!(s->geo = geoq_from_json(s->a, rel->str, json_get(v, "geometry"), json_get(v, "coordinates"),
                                      gp ? gp->str : NULL, s->ctx, p))) goto fail;
    }
    if ((v = json_get(t, "scopeQ"))) {
        if (!json_is_string(v)) BAD("scopeQ must be a string");
        if (!(s->scope = scopeq_parse(s->a, v->str, p))) goto fail;
    }
    if ((v = json_get(t, "datasetId"))) {
        if (!json_is_array(v) || !v->len) BAD("datasetId must be a non-empty array of URIs");
        s->dataset_ids = arena_alloc(s->a, v->len * sizeof *s->dataset_ids);
        for (const json_t *c = v->child; c; c = c->next) {
            if (!json_is_string(c) || (!uri_ok(c->str) && strcmp(c->str, "@none")))
                BAD("datasetId: each entry must be a URI or \"@none\"");
            /* "@none" (5.2.12) and urn:ngsi-ld:default both name the default instance */
            s->dataset_ids[s->n_dataset_ids++] = !strcmp(c->str, "urn:ngsi-ld:default") ? "@none" : c->str;
        }
        /* 5.2.12: only the selected instances are notified (render: "@none" is the default one) */
        s->ro.dataset_ids = s->dataset_ids;
        s->ro.n_dataset_ids = s->n_dataset_ids;
    }
    if ((v = json_get(t, "lang"))) {
        if (!json_is_string(v) || !v->len) BAD("lang must be a language tag");
        s->ro.lang = v->str;
    }
    if ((v = json_get(t, "notificationTrigger")) && json_get(t, "timeInterval"))
        BAD("notificationTrigger does not apply to a periodic (timeInterval) subscription");
    if ((v = json_get(t, "expiresAt"))) {
        if (!time_member(v, "expiresAt", &s->expires_at, p)) goto fail;
        if (now && s->expires_at <= now) BAD("expiresAt is in the past");
    }
    if ((v = json_get(t, "throttling"))) {
        if (!json_is_number(v) || json_number(v) <= 0) BAD("throttling must be a positive number of seconds");
        s->throttle_us = (int64_t)(json_number(v) * 1e6);
    }
    if ((v = json_get(t, "timeInterval"))) {
        if (!json_is_number(v) || json_number(v) <= 0) BAD("timeInterval must be a positive number of seconds");
        if (watched) BAD("timeInterval and watchedAttributes exclude each other");
        if (s->throttle_us) BAD("timeInterval and throttling exclude each other");
        if (!ents) BAD("timeInterval needs entities");
        if (json_number(v) > 1e9) BAD("timeInterval is too large");
        s->interval_us = (int64_t)(json_number(v) * 1e6);
        if (s->interval_us < 1000) s->interval_us = 1000;
    }
    s->csource = csource;
    if ((v = json_get(t, "temporalQ")) && !csource) BAD("temporalQ is not a member of a Subscription (it is of a context source one)");
    if (!ents && !watched) BAD("a subscription needs entities or watchedAttributes (or both)");
    const json_t *n = json_get(t, "notification");
    if (!n) BAD("notification is mandatory");
    if (!notification_parse(s, n, p)) goto fail;
    /* a new or updated subscription whose endpoint the egress policy refuses is not made (a stored one,
     * rebuilt at start under another policy, is kept: its notifications fail, with the reason) */
    if (now && s->egress_why)
        BAD("notification.endpoint.uri: the egress policy refuses %s (--egressDeny, --egressAllow)", s->egress_why);
    return s;
fail:
    arena_free(s->a);
    free(s);
    return NULL;
}

notify_sub_t *notify_sub_build(const char *tenant, const char *json, size_t len, int64_t now, problem_t *p)
{
    return sub_build(tenant, json, len, now, false, p);
}

/* A context source registration subscription (5.11): the same rules, and
 * temporalQ (which reg/ interprets, as it does csf). */
notify_sub_t *notify_csub_build(const char *tenant, const char *json, size_t len, int64_t now, problem_t *p)
{
    return sub_build(tenant, json, len, now, true, p);
}

void notify_sub_selection(const notify_sub_t *s, notify_selection_t *out)
{
    out->sel = s->sel;
    out->n_sel = s->n_sel;
    out->watched = s->watched;
    out->n_watched = s->n_watched;
    out->attrs = s->ro.n_pick > 2 && !strcmp(s->ro.pick[0], "@id") ? s->ro.pick + 2 : NULL;
    out->n_attrs = out->attrs ? s->ro.n_pick - 2 : 0;
    out->q = s->q;
    out->geo = s->geo;
    out->scope = s->scope;
    out->interval_us = s->interval_us;
}

const ld_context_t *notify_sub_out_context(const notify_sub_t *s) { return s->out_ctx; }
const char         *notify_sub_tenant(const notify_sub_t *s) { return s->tenant; }

bool notify_sub_active(const notify_sub_t *s, int64_t now)
{
    return s->active && (s->expires_at == CR_NO_TIME || s->expires_at > now);
}

void notify_sub_ref(notify_sub_t *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void notify_sub_unref(notify_sub_t *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
    notify_sub_engine_release(s);
    sub_counters_unref(s->c);
    arena_free(s->a);
    free(s);
}

const char *notify_sub_id(const notify_sub_t *s) { return s->id; }
const ld_context_t *notify_sub_context(const notify_sub_t *s) { return s->ctx; }

const char *notify_sub_doc(const notify_sub_t *s, size_t *len)
{
    *len = s->doc_len;
    return s->doc;
}

/* ------------------------------------------------------------ documents */

/* The stored document is model/'s (doc.c): one implementation for every
 * resource kept as JSON. */
static const char *const doc_read_only[] = {"status", NULL};
static const model_doc_kind_t k_sub = {"Subscription", "Subscription", "subscription", doc_read_only};

char *notify_doc_new(arena_t *a, const json_t *body, const ld_context_t *ctx, int64_t now, size_t *len)
{
    return model_doc_new(a, body, ctx, &k_sub, now, len);
}

char *notify_doc_patch(arena_t *a, const char *stored, size_t stored_len, const json_t *patch, int64_t now,
                       size_t *len, problem_t *p)
{
    return model_doc_patch(a, stored, stored_len, patch, &k_sub, now, len, p);
}

/* ------------------------------------------------------------ re-terming */

typedef struct reterm {
    arena_t            *a;
    const ld_context_t *from, *to;
} reterm_t;

bool notify_same_context(const ld_context_t *x, const ld_context_t *y)
{
    return x == y || !strcmp(ld_context_link(x), ld_context_link(y));
}

static void rt_name(const reterm_t *r, sbuf_t *sb, const char *s, size_t n)
{
    if (!n || (n == 2 && !memcmp(s, "id", 2)) || (n == 4 && !memcmp(s, "type", 4)) || *s == '@') {
        sb_add(sb, s, n);
        return;
    }
    sb_adds(sb, ld_compact(r->to, ld_expandn_lookup(r->from, s, n, r->a)));
}

/* text with each maximal run of characters not in seps re-termed */
static const char *rt_text(const reterm_t *r, const char *text, const char *seps)
{
    sbuf_t sb;
    sb_init(&sb, r->a, strlen(text) + 64);
    for (const char *s = text; *s;) {
        size_t k = strcspn(s, seps);
        rt_name(r, &sb, s, k);
        s += k;
        size_t j = strspn(s, seps);
        sb_add(&sb, s, j);
        s += j;
    }
    return sb.p;
}

/* q (4.9): attribute paths (names split on '.', '{', '}'; a [trailing
 * path] is not expanded) and bare vocabulary values (a letter first, no ':'),
 * re-termed; quoted strings, numbers, dates and operators kept. */
static const char *rt_q(const reterm_t *r, const char *q)
{
    sbuf_t sb;
    bool   value = false;
    sb_init(&sb, r->a, strlen(q) + 64);
    for (const char *s = q; *s;) {
        char c = *s;
        if (c == '"') {
            const char *e = s + 1;
            while (*e && *e != '"') e += e[0] == '\\' && e[1] ? 2 : 1;
            if (*e) e++;
            sb_add(&sb, s, (size_t)(e - s));
            s = e;
        } else if (c == '[') {
            size_t k = strcspn(s, "]");
            sb_add(&sb, s, k + (s[k] == ']'));
            s += k + (s[k] == ']');
        } else if (strchr(";|()", c)) {
            value = false;
            sb_addc(&sb, c);
            s++;
        } else if (strchr("=!<>~", c)) {
            value = true;
            sb_addc(&sb, c);
            s++;
        } else if (!value && strchr(".{},", c)) {
            sb_addc(&sb, c);
            s++;
        } else {
            size_t k = strcspn(s, value ? ";|()\",=!<>~" : ";|()\"=!<>~[.{},");
            bool   term = !value || (((*s | 32) >= 'a' && (*s | 32) <= 'z') && !memchr(s, ':', k) &&
                                     !memchr(s, '.', k) && strncmp(s, "true", k) && strncmp(s, "false", k));
            if (term) rt_name(r, &sb, s, k);
            else sb_add(&sb, s, k);
            s += k;
            if (!k) sb_addc(&sb, *s++);
        }
    }
    return sb.p;
}

static json_t *rt_names(const reterm_t *r, const json_t *v, const char *seps)
{
    if (json_is_string(v)) return json_new_string(r->a, rt_text(r, v->str, seps));
    if (!json_is_array(v)) return json_clone(r->a, v);
    json_t *o = json_new(r->a, JSON_ARRAY);
    for (const json_t *c = v->child; c; c = c->next)
        json_add(o, NULL, json_is_string(c) ? json_new_string(r->a, rt_text(r, c->str, seps)) : json_clone(r->a, c));
    return o;
}

json_t *notify_doc_reterm(arena_t *a, const json_t *body, const ld_context_t *from, const ld_context_t *to)
{
    reterm_t r = {a, from, to};
    json_t  *o = json_new(a, JSON_OBJECT);
    for (const json_t *m = body->child; m; m = m->next) {
        const char *k = m->key;
        json_t     *v;
        if (!strcmp(k, "entities") && json_is_array(m)) {
            v = json_new(a, JSON_ARRAY);
            for (const json_t *e = m->child; e; e = e->next) {
                if (!json_is_object(e)) {
                    json_add(v, NULL, json_clone(a, e));
                    continue;
                }
                json_t *sel = json_new(a, JSON_OBJECT);
                for (const json_t *f = e->child; f; f = f->next)
                    json_add(sel, f->key, !strcmp(f->key, "type") && json_is_string(f)
                                              ? json_new_string(a, rt_text(&r, f->str, ",;|() "))
                                              : json_clone(a, f));
                json_add(v, NULL, sel);
            }
        } else if (!strcmp(k, "watchedAttributes") || !strcmp(k, "expandValues") || !strcmp(k, "jsonKeys")) {
            v = rt_names(&r, m, ", ");
        } else if (!strcmp(k, "q") && json_is_string(m)) {
            v = json_new_string(a, rt_q(&r, m->str));
        } else if (!strcmp(k, "geoQ") && json_is_object(m)) {
            v = json_clone(a, m);
            const json_t *gp = json_get(m, "geoproperty");
            if (json_is_string(gp)) {
                json_remove(v, "geoproperty");
                json_add(v, "geoproperty", json_new_string(a, rt_text(&r, gp->str, "")));
            }
        } else if (!strcmp(k, "notification") && json_is_object(m)) {
            v = json_new(a, JSON_OBJECT);
            for (const json_t *f = m->child; f; f = f->next)
                json_add(v, f->key, !strcmp(f->key, "attributes") ? rt_names(&r, f, ", ")
                                    : !strcmp(f->key, "pick") || !strcmp(f->key, "omit") ? rt_names(&r, f, ",{} ")
                                    : json_clone(a, f));
        } else v = json_clone(a, m);
        json_add(o, k, v);
    }
    return o;
}

/* ------------------------------------------------------------ rendering */

static void jw_time(json_writer_t *w, const char *key, int64_t us)
{
    char buf[32];
    if (!us) return;
    cr_datetime_format(us, buf);
    jw_key(w, key);
    jw_string(w, buf);
}

void notify_sub_render(json_writer_t *w, const notify_sub_t *s, bool with_context, bool sys_attrs)
{
    notify_sub_render_in(w, s, NULL, with_context, sys_attrs);
}

static void (*g_render_extra)(json_writer_t *w, const notify_sub_t *s);

void notify_set_render_extra(void (*fn)(json_writer_t *w, const notify_sub_t *s))
{
    g_render_extra = fn;
}

void notify_sub_render_in(json_writer_t *w, const notify_sub_t *s, const ld_context_t *ctx, bool with_context,
                          bool sys_attrs)
{
    const sub_counters_t *c = s->c;
    int64_t now = cr_now_us();
    const json_t *tree = s->tree;
    arena_t      *a = NULL;
    if (ctx && !notify_same_context(ctx, s->ctx)) {
        a = arena_new(4096);
        tree = notify_doc_reterm(a, s->tree, s->ctx, ctx);
    } else ctx = NULL;
    jw_object_begin(w);
    for (const json_t *m = tree->child; m; m = m->next) {
        if (!strcmp(m->key, "@context") && !with_context) continue;
        if (!strcmp(m->key, "@context") && ctx) {
            const char *cv = ld_context_value_json(ctx);
            jw_key(w, "@context");
            jw_raw(w, cv, strlen(cv));
            continue;
        }
        if ((!strcmp(m->key, "createdAt") || !strcmp(m->key, "modifiedAt")) && !sys_attrs) continue;
        if (!strcmp(m->key, "notification")) {
            jw_key(w, "notification");
            jw_object_begin(w);
            for (const json_t *n = m->child; n; n = n->next) {
                jw_key(w, n->key);
                jw_value(w, n);
            }
            if (c) {
                /* One snapshot, loaded in the reverse order of the updates (a change is counted due,
                 * then its attempt sent or failed, then its batch delivered or dropped): a reader that
                 * sees a change delivered or dropped also sees its attempt and its due count. */
                uint64_t delivered = atomic_load(&c->delivered), d_retries = atomic_load(&c->dropped_retries);
                uint64_t d_failing = atomic_load(&c->dropped_failing), d_cooldown = atomic_load(&c->dropped_cooldown);
                uint64_t d_deleted = atomic_load(&c->dropped_deleted), d_shutdown = atomic_load(&c->dropped_shutdown);
                uint64_t sent = atomic_load(&c->sent), failed = atomic_load(&c->failed), retried = atomic_load(&c->retried);
                int      failing = atomic_load(&c->failing);
                int64_t  last_n = atomic_load(&c->last_notification), last_s = atomic_load(&c->last_success);
                int64_t  last_f = atomic_load(&c->last_failure);
                notify_totals_t tot;
                if (notify_totals_read(s, &tot)) {     /* every process's (--database mongoc) */
                    sent   = (uint64_t)tot.sent;
                    failed = (uint64_t)tot.failed;
                    last_n = tot.last_notification;
                    last_s = tot.last_success;
                    last_f = tot.last_failure;
                    failing = last_f > last_s;          /* the last attempt of any process */
                }
                uint64_t d_full = atomic_load(&c->dropped_full), throttled = atomic_load(&c->throttled);
                uint64_t d_expired = atomic_load(&c->dropped_expired), due = atomic_load(&c->due);

                /* status only once a notification was attempted (5.2.14: the last attempt's outcome) */
                if (last_n) {
                    jw_key(w, "status");
                    jw_string(w, failing ? "failed" : "ok");
                }
                jw_key(w, "timesSent");
                jw_int(w, (int64_t)sent);
                jw_key(w, "timesFailed");
                jw_int(w, (int64_t)failed);
                jw_time(w, "lastNotification", last_n);
                jw_time(w, "lastSuccess", last_s);
                jw_time(w, "lastFailure", last_f);
                if (sys_attrs) {
                    char why[sizeof c->why];
                    pthread_mutex_t *mu = (pthread_mutex_t *)&c->why_mu;   /* a read; the lock is not the counters' state */
                    pthread_mutex_lock(mu);
                    memcpy(why, c->why, sizeof why);
                    pthread_mutex_unlock(mu);
                    if (*why && last_f) {
                        jw_key(w, "coraine:lastFailureReason");
                        jw_string(w, why);
                    }
                    jw_key(w, "coraine:due");
                    jw_int(w, (int64_t)due);
                    jw_key(w, "coraine:dropped");
                    jw_object_begin(w);
                    static const char *const names[] = {"queueFull", "shutdown", "expired", "deleted", "endpointFailing",
                                                        "throttled", "cooldown", "retriesExhausted"};
                    const uint64_t vals[] = {d_full, d_shutdown, d_expired, d_deleted, d_failing, throttled, d_cooldown,
                                             d_retries};
                    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
                        jw_key(w, names[k]);
                        jw_int(w, (int64_t)vals[k]);
                    }
                    jw_object_end(w);
                    jw_key(w, "coraine:delivered");
                    jw_int(w, (int64_t)delivered);
                    jw_key(w, "coraine:retried");
                    jw_int(w, (int64_t)retried);
                }
            }
            jw_object_end(w);
            continue;
        }
        jw_key(w, m->key);
        jw_value(w, m);
    }
    if (!json_get(s->tree, "jsonldContext")) {
        jw_key(w, "jsonldContext");
        jw_string(w, ld_context_link(s->out_ctx));
    }
    jw_key(w, "status");
    jw_string(w, s->expires_at != CR_NO_TIME && s->expires_at <= now ? "expired" : s->active ? "active" : "paused");
    if (sys_attrs && g_render_extra && !s->csource) g_render_extra(w, s);
    jw_object_end(w);
    if (a) arena_free(a);
}
