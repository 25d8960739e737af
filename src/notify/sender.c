/*
 * sender.c - what a notification looks like on the wire (5.3.1, 6.3.8 HTTP
 * binding): the Notification body with the entities rendered by model/
 * (entity_render: the formats and projections of the entity API, compacted
 * with the subscription's jsonldContext), and the HTTP POST through a
 * libcurl easy handle kept per lane, so each lane is one keep-alive
 * connection to its endpoint.
 */
#include "notify_int.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t g_notification_seq;

/* The entity as rendered, completed (only for the jobs that need it, so
 * the others are a plain entity_render): attributeDeleted - each deleted
 * instance with its own type and NGSI-LD Null as its value member
 * (DISPUTED.md; "urn:ngsi-ld:null" alone in concise/keyValues); showChanges
 * (5.2.14, normalized) - each updated or deleted attribute also carries its
 * value before the change (previousValue, previousObject, ...). The rendered
 * entity is parsed back and rendered again. */
static const char *value_member(attr_kind_t k)
{
    switch (k) {
    case ATTR_RELATIONSHIP:     return "object";
    case ATTR_LANGUAGEPROPERTY: return "languageMap";
    case ATTR_VOCABPROPERTY:    return "vocab";
    case ATTR_LISTPROPERTY:     return "valueList";
    case ATTR_LISTRELATIONSHIP: return "objectList";
    case ATTR_JSONPROPERTY:     return "json";
    default:                    return "value";
    }
}

static const char *previous_member(const char *member)
{
    static const char *const map[][2] = {{"value", "previousValue"}, {"object", "previousObject"},
        {"languageMap", "previousLanguageMap"}, {"vocab", "previousVocab"}, {"valueList", "previousValueList"},
        {"objectList", "previousObjectList"}, {"json", "previousJson"}};
    for (size_t i = 0; i < CR_ARRAY_LEN(map); i++)
        if (!strcmp(member, map[i][0])) return map[i][1];
    return NULL;
}

/* Adds prev's value member(s) to inst as previous* members. */
static void add_previous(arena_t *a, json_t *inst, const cr_attr_t *prev, const render_opts_t *ro)
{
    if (!json_is_object(inst) || !prev) return;
    sbuf_t        sb;
    json_writer_t w;
    char          err[64];
    render_opts_t o = *ro;
    o.format = FMT_NORMALIZED;
    o.sys_attrs = false;
    o.pick = o.omit = NULL;
    o.n_pick = o.n_omit = 0;
    o.context_json = NULL;
    sb_init(&sb, a, 256);
    jw_init(&w, &sb);
    attr_render(&w, prev, &o);
    json_t *pv = json_parse_copy(a, sb.p, sb.len, &(json_limits_t){0}, err, sizeof err);
    for (json_t *m = pv && json_is_object(pv) ? pv->child : NULL; m; m = m->next) {
        const char *k = previous_member(m->key);
        if (k) {
            json_remove(inst, k);
            json_add(inst, k, json_clone(a, m));
        }
    }
}

/* The instance of member v (an object or an array of them) with datasetId ds. */
static json_t *instance(json_t *v, const char *ds)
{
    if (json_is_object(v)) {
        const json_t *d = json_get(v, "datasetId");
        return (!d && !ds) || (json_is_string(d) && ds && !strcmp(d->str, ds)) ? v : NULL;
    }
    for (json_t *i = json_is_array(v) ? v->child : NULL; i; i = i->next)
        if (instance(i, ds)) return i;
    return NULL;
}

static void add_deleted(arena_t *a, json_t *e, const store_attr_ref_t *r, const notify_job_t *j,
                        const render_opts_t *ro, bool show)
{
    const char      *name = ld_compact_name(ro->ctx, r->name);
    const cr_attr_t *prev = j->before ? entity_attr(j->before, r->name, r->dataset_id) : NULL;
    json_t          *inst;
    if (ro->format != FMT_NORMALIZED) inst = json_new_string(a, "urn:ngsi-ld:null");
    else {
        attr_kind_t kind = prev ? (attr_kind_t)prev->kind : ATTR_PROPERTY;
        inst = json_new(a, JSON_OBJECT);
        json_add(inst, "type", json_new_string(a, attr_kind_name(kind)));
        json_t *null = json_new_string(a, "urn:ngsi-ld:null");
        if (kind == ATTR_LANGUAGEPROPERTY && !j->entity_deleted) {   /* the suite's two shapes (046_35, 046_37) */
            json_t *m = json_new(a, JSON_OBJECT);
            json_add(m, "@none", null);
            null = m;
        }
        json_add(inst, value_member(kind), null);
        if (r->dataset_id) json_add(inst, "datasetId", json_new_string(a, r->dataset_id));
        if (ro->sys_attrs && prev) {
            char t[32];
            cr_datetime_format(prev->created_at, t);
            json_add(inst, "createdAt", json_new_stringn(a, t, strlen(t)));
            cr_datetime_format(prev->modified_at, t);
            json_add(inst, "modifiedAt", json_new_stringn(a, t, strlen(t)));
            cr_datetime_format(j->at, t);
            json_add(inst, "deletedAt", json_new_stringn(a, t, strlen(t)));
        }
        if (show) add_previous(a, inst, prev, ro);
    }
    json_t *cur = json_get(e, name);
    if (!cur) json_add(e, name, inst);
    else if (json_is_array(cur)) json_add(cur, NULL, inst);
    else {
        json_t *arr = json_new(a, JSON_ARRAY);
        json_remove(e, name);
        json_add(arr, NULL, json_clone(a, cur));
        json_add(arr, NULL, inst);
        json_add(e, name, arr);
    }
}

static void complete_entity(sbuf_t *sb, size_t start, const notify_job_t *j, const render_opts_t *ro)
{
    arena_t *a = arena_new(4096);
    char     err[64];
    json_t  *e = json_parse_copy(a, sb->p + start, sb->len - start, &(json_limits_t){0}, err, sizeof err);
    bool     show = j->sub->show_changes && ro->format == FMT_NORMALIZED;
    if (e && json_is_object(e)) {
        for (uint32_t i = 0; show && i < j->n_changed; i++) {
            const store_attr_ref_t *r = &j->changed[i];
            add_previous(a, instance(json_get(e, ld_compact_name(ro->ctx, r->name)), r->dataset_id),
                         entity_attr(j->before, r->name, r->dataset_id), ro);
        }
        for (uint32_t i = 0; i < j->n_deleted; i++) add_deleted(a, e, &j->deleted[i], j, ro, show);
        sb->len = start;
        json_render(sb, e);
    }
    arena_free(a);
}

static void render_entity(json_writer_t *w, sbuf_t *sb, const notify_job_t *j, const render_opts_t *ro, bool geo)
{
    const cr_entity_t *e = j->e;
    if (j->entity_deleted || j->entity_gone) {
        char   at[32];
        size_t start = sb->len;
        cr_datetime_format(j->at, at);
        jw_object_begin(w);
        jw_key(w, "id");
        jw_string(w, e->id);
        jw_key(w, "type");
        if (e->n_types == 1) jw_string(w, ld_compact_name(ro->ctx, e->types[0]));
        else {
            jw_array_begin(w);
            for (uint16_t i = 0; i < e->n_types; i++) jw_string(w, ld_compact_name(ro->ctx, e->types[i]));
            jw_array_end(w);
        }
        if (ro->sys_attrs) {
            char t[32];
            cr_datetime_format(e->created_at, t);
            jw_key(w, "createdAt");
            jw_string(w, t);
            cr_datetime_format(e->modified_at, t);
            jw_key(w, "modifiedAt");
            jw_string(w, t);
        }
        jw_key(w, "deletedAt");
        jw_string(w, at);
        if (ro->context_json) {
            jw_key(w, "@context");
            jw_raw(w, ro->context_json, strlen(ro->context_json));
        }
        jw_object_end(w);
        if (j->n_deleted && !geo) complete_entity(sb, start, j, ro);
        return;
    }
    size_t start = sb->len;
    if (geo) entity_render_geojson(w, e, ro);
    else entity_render(w, e, ro);
    if (!geo && (j->n_deleted || (j->n_changed && ro->format == FMT_NORMALIZED))) complete_entity(sb, start, j, ro);
}

const char *notify_render(notify_job_t *const *jobs, size_t n_jobs, sbuf_t *sb)
{
    const notify_sub_t *s = jobs[0]->sub;
    render_opts_t       ro = s->ro;
    json_writer_t       w;
    char                now[32], id[64];
    bool                geo = s->accept == SUB_ACC_GEOJSON && !jobs[0]->raw;

    if (s->accept == SUB_ACC_LDJSON) ro.context_json = ld_context_value_json(s->out_ctx);
    cr_datetime_format(cr_now_us(), now);
    uint64_t n = atomic_fetch_add(&g_notification_seq, 1);
    snprintf(id, sizeof id, "urn:ngsi-ld:Notification:%016llx%08llx", (unsigned long long)cr_hash(&n, sizeof n),
             (unsigned long long)(n & 0xffffffff));
    jw_init(&w, sb);
    jw_object_begin(&w);
    jw_key(&w, "id");
    jw_string(&w, id);
    jw_key(&w, "type");
    jw_string(&w, "Notification");
    jw_key(&w, "subscriptionId");
    jw_string(&w, s->id);
    jw_key(&w, "notifiedAt");
    jw_string(&w, now);
    jw_key(&w, "data");
    if (geo) {
        jw_object_begin(&w);
        jw_key(&w, "type");
        jw_string(&w, "FeatureCollection");
        jw_key(&w, "features");
    }
    if (jobs[0]->raw) {          /* notify_send: one job, its data rendered by the caller */
        jw_raw(&w, jobs[0]->raw, jobs[0]->raw_len);
        n_jobs = 0;
    } else jw_array_begin(&w);
    for (size_t k = 0; k < n_jobs; k++) {
        const notify_job_t *j = jobs[k];
        if (j->e) render_entity(&w, sb, j, &ro, geo);
        for (uint32_t i = 0; i < j->n_many; i++)
            if (geo) entity_render_geojson(&w, j->many[i], &ro);
            else entity_render(&w, j->many[i], &ro);
    }
    if (!jobs[0]->raw) jw_array_end(&w);
    if (geo) jw_object_end(&w);
    if (jobs[0]->reason) {
        jw_key(&w, "triggerReason");
        jw_string(&w, jobs[0]->reason);
    }
    if (s->accept == SUB_ACC_LDJSON) {
        jw_key(&w, "@context");
        jw_raw(&w, ro.context_json, strlen(ro.context_json));
    }
    jw_object_end(&w);
    return s->accept == SUB_ACC_LDJSON ? "application/ld+json" : s->accept == SUB_ACC_GEOJSON ? "application/geo+json"
                                                                                            : "application/json";
}

/* ------------------------------------------------------------ HTTP */

/* A lane's connection: a libcurl easy handle (HTTP) or an MQTT client;
 * an endpoint's URI fixes which, so a lane only ever has one of them. */
typedef struct conn {
    CURL *curl;
    void *mqtt;
} conn_t;

bool notify_http_init(problem_t *p)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return problem_set(p, PB_INTERNAL_ERROR, "cannot initialise libcurl");
    if (!notify_mqtt_init(p)) {
        curl_global_cleanup();
        return false;
    }
    return true;
}

void notify_http_shutdown(void)
{
    notify_mqtt_shutdown();
    curl_global_cleanup();
}

void notify_conn_free(void *conn)
{
    conn_t *c = conn;
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    notify_mqtt_free(c->mqtt);
    free(c);
}

static size_t discard(char *ptr, size_t size, size_t nmemb, void *ud)
{
    (void)ptr;
    (void)ud;
    return size * nmemb;
}

bool notify_http_post(void **conn, const notify_sub_t *s, const char *body, size_t len, const char *ctype,
                      long timeout_ms)
{
    conn_t *cn = *conn;
    if (!cn) *conn = cn = cr_xcalloc(1, sizeof *cn);
    if (s->mqtt) return notify_mqtt_post(&cn->mqtt, s, body, len, ctype, timeout_ms);
    CURL *c = cn->curl;
    if (!c) {
        if (!(c = curl_easy_init())) return false;
        cn->curl = c;
    }
    curl_easy_reset(c);       /* keeps the connection cache: the next POST reuses the connection */
    char               line[2048];
    struct curl_slist *h = NULL, *t;
    bool               ok = false;

    snprintf(line, sizeof line, "Content-Type: %s", ctype);
    if (!(t = curl_slist_append(h, line))) goto out;
    h = t;
    if (!(t = curl_slist_append(h, "Expect:"))) goto out;
    h = t;
    if (!strcmp(ctype, "application/json")) {
        snprintf(line, sizeof line,
                 "Link: <%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"",
                 ld_context_link(s->out_ctx));
        if (!(t = curl_slist_append(h, line))) goto out;
        h = t;
    }
    if (*s->tenant) {
        snprintf(line, sizeof line, "NGSILD-Tenant: %s", s->tenant);
        if (!(t = curl_slist_append(h, line))) goto out;
        h = t;
    }
    for (size_t i = 0; i < s->n_receiver_info; i++) {
        snprintf(line, sizeof line, "%s: %s", s->receiver_info[i].name, s->receiver_info[i].value);
        if (!(t = curl_slist_append(h, line))) goto out;
        h = t;
    }
    curl_easy_setopt(c, CURLOPT_URL, s->uri);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    long     code = 0;
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    else LOG_D("notify %s: %s", s->uri, curl_easy_strerror(rc));
    ok = rc == CURLE_OK && code >= 200 && code < 300;
out:
    curl_slist_free_all(h);
    return ok;
}
