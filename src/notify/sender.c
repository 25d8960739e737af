/*
 * sender.c - what a notification looks like on the wire (5.3.1, 6.3.8 HTTP
 * binding): the Notification body with the entities rendered by model/
 * (entity_render: the formats and projections of the entity API, compacted
 * with the subscription's jsonldContext), and the HTTP client: libcurl's
 * multi interface driven by one thread, so that every lane's POST is in
 * flight at the same time and a slow or dead endpoint holds nothing but its
 * own lanes (no thread waits on a receiver). Each lane keeps its easy handle
 * and the multi handle's connection cache keeps the connections alive.
 */
#include "notify_int.h"

#include <curl/curl.h>
#include <pthread.h>
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

/* The datasetId of the one instance of name left in e (NULL: the default), for
 * turning a simplified single value into its {"dataset": {...}} form. */
static const char *remaining_dataset(const cr_entity_t *e, const char *name)
{
    for (uint16_t i = 0; e && i < e->n_attrs; i++)
        if (e->attrs[i].name == name) return e->attrs[i].dataset_id;
    return NULL;
}

/* Adds the deleted instance r to e (DISPUTED.md, doc/api.md "Decisions"):
 * an attribute with no instance left in the notification is sent once, as
 * NGSI-LD Null (5.8.6; deleting every instance is one deletion of the
 * attribute); an instance deleted beside remaining ones is added to them
 * with its datasetId (an array of instances, or the {"dataset": {...}} map
 * of the simplified format). was_absent: the rendering had no instance of
 * the name before the deleted ones were added. */
static void add_deleted(arena_t *a, json_t *e, const store_attr_ref_t *r, const notify_job_t *j,
                        const render_opts_t *ro, bool show, bool was_absent)
{
    const char      *name = ld_compact_name(ro->ctx, r->name);
    const cr_attr_t *prev = j->before ? entity_attr(j->before, r->name, r->dataset_id) : NULL;
    json_t          *inst, *cur = json_get(e, name);
    if (was_absent && cur) return;                    /* the attribute is already sent as Null */
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
        if (r->dataset_id && !was_absent) json_add(inst, "datasetId", json_new_string(a, r->dataset_id));
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
    if (!cur) {
        json_add(e, name, inst);
        return;
    }
    if (ro->format == FMT_KEYVALUES) {
        /* 4.5.4: several instances are {"dataset": {"@none": v, "<datasetId>": v}} */
        json_t *map = json_is_object(cur) ? json_get(cur, "dataset") : NULL;
        if (!map) {
            const char *ds = j->e && !j->entity_gone ? remaining_dataset(j->e, r->name) : NULL;
            json_t     *o = json_new(a, JSON_OBJECT);
            map = json_new(a, JSON_OBJECT);
            json_add(map, ds ? ds : "@none", json_clone(a, cur));
            json_add(o, "dataset", map);
            json_remove(e, name);
            json_add(e, name, o);
        }
        json_add(map, r->dataset_id ? r->dataset_id : "@none", inst);
    } else if (json_is_array(cur)) json_add(cur, NULL, inst);
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
        /* which deleted names have no instance in the rendering (before any is added) */
        bool *absent = arena_alloc(a, (j->n_deleted ? j->n_deleted : 1) * sizeof *absent);
        for (uint32_t i = 0; i < j->n_deleted; i++)
            absent[i] = !json_get(e, ld_compact_name(ro->ctx, j->deleted[i].name));
        for (uint32_t i = 0; i < j->n_deleted; i++) add_deleted(a, e, &j->deleted[i], j, ro, show, absent[i]);
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

static notify_join_fn g_join_fetch;
static void         (*g_join_release)(void *h);
static void          *g_join_ud;

void notify_set_join(notify_join_fn fetch, void (*release)(void *h), void *ud)
{
    g_join_fetch = fetch;
    g_join_release = release;
    g_join_ud = ud;
}

/* notification.join (5.8.6): the linked entities of the notified ones, as
 * they are when the notification is sent, fetched with one call for all
 * the entities of the notification. */
static void *fetch_linked(const notify_sub_t *s, notify_job_t *const *jobs, size_t n_jobs, const render_opts_t *ro,
                          notify_linked_t *out)
{
    size_t n = 0;
    for (size_t k = 0; k < n_jobs; k++) n += (jobs[k]->e && !jobs[k]->entity_gone) + jobs[k]->n_many;
    if (!n || !g_join_fetch) return NULL;
    cr_entity_t **roots = cr_xmalloc(n * sizeof *roots);
    n = 0;
    for (size_t k = 0; k < n_jobs; k++) {
        if (jobs[k]->e && !jobs[k]->entity_gone) roots[n++] = jobs[k]->e;
        for (uint32_t i = 0; i < jobs[k]->n_many; i++) roots[n++] = jobs[k]->many[i];
    }
    void *h = g_join_fetch(g_join_ud, s->tenant, roots, n, s->join == SUB_JOIN_FLAT, s->join_level, ro, out);
    free(roots);
    return h;
}

const char *notify_render(notify_job_t *const *jobs, size_t n_jobs, sbuf_t *sb)
{
    const notify_sub_t *s = jobs[0]->sub;
    render_opts_t       ro = s->ro;
    json_writer_t       w;
    char                now[32], id[64];
    bool                geo = s->accept == SUB_ACC_GEOJSON && !jobs[0]->raw;
    notify_linked_t     linked = {0};
    void               *lh = NULL;
    render_join_t       rj;
    size_t              left = 10000;   /* linked entities inlined at most (as OPS_JOIN_MAX_ENTITIES) */
    bool                over = false;

    if (s->join != SUB_JOIN_NONE && (lh = fetch_linked(s, jobs, n_jobs, &ro, &linked)) && s->join == SUB_JOIN_INLINE) {
        rj = (render_join_t){.find = linked.find, .ud = linked.h, .level = s->join_level, .left = &left, .over = &over,
                             .roots_pick_only = s->attrs_pick};
        ro.join = &rj;
    }

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
    jw_string(&w, jobs[0]->raw ? "ContextSourceNotification" : "Notification");   /* raw: a CSourceNotification (5.3.2) */
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
    for (size_t i = 0; lh && s->join == SUB_JOIN_FLAT && i < linked.n; i++) {
        render_opts_t lo = ro;            /* 5.7.1.5: pick and omit apply to every entity; attributes to the roots */
        lo.pick_tree = linked.pick[i];
        lo.omit_tree = linked.omit[i];
        if (s->attrs_pick) {
            lo.pick = NULL;
            lo.n_pick = 0;
        }
        if (geo) entity_render_geojson(&w, linked.items[i], &lo);
        else entity_render(&w, linked.items[i], &lo);
    }
    if (lh && g_join_release) g_join_release(lh);
    if (over) LOG_W("notification of subscription %s: more linked entities than %zu, the rest not inlined", s->id,
                    (size_t)10000);
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
 * an endpoint's URI fixes which, so a lane only ever has one of them. A lane
 * has at most one request in flight, so its conn is the request's state. */
typedef struct conn {
    CURL              *curl;
    void              *mqtt;
    httpc_conn_t      *hc;             /* http:// with a literal address: httpc.c */
    struct curl_slist *headers;        /* of the request in flight */
    void              *ud;             /* the done callback's */
    char              *refused;        /* the egress policy refused the address connected (why), or NULL */
    struct conn       *next;           /* the submit list / the in-flight list */
    struct conn       *prev;           /* the in-flight list */
} conn_t;

static notify_done_fn  g_done;
static CURLM          *g_multi;
static pthread_t       g_loop;
static bool            g_loop_on;
static pthread_mutex_t g_hmu = PTHREAD_MUTEX_INITIALIZER;
static conn_t         *g_submit;       /* handed over by the senders, under g_hmu */
static bool            g_hstop;        /* under g_hmu */
static conn_t         *g_inflight;     /* the loop thread's only */

static void request_done(conn_t *c, CURLcode rc, bool aborted)
{
    long code = 0;
    char why[224] = "";
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &code);
        if (code < 200 || code >= 300) snprintf(why, sizeof why, "the endpoint answered HTTP %ld", code);
    } else if (c->refused) {
        snprintf(why, sizeof why, "refused by the egress policy: %s", c->refused);
    } else if (!aborted) {
        snprintf(why, sizeof why, "%s", curl_easy_strerror(rc));
    }
    free(c->refused);
    c->refused = NULL;
    curl_slist_free_all(c->headers);
    c->headers = NULL;
    void *ud = c->ud;
    c->ud = NULL;
    g_done(ud, rc == CURLE_OK && code >= 200 && code < 300, aborted, *why ? why : NULL);   /* may free c */
}

/* The egress policy (core/egress.c) on the address libcurl connects, after
 * its resolution (so a DNS answer that changed since the subscription was
 * checked, rebinding, is caught): a refused one is never connected. */
static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    conn_t *c = ud;
    char    why[160];
    char   *url = NULL, host[256] = "";
    if (curl_easy_getinfo(c->curl, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK && url)
        notify_uri_host(url, host, sizeof host);
    if (purpose != CURLSOCKTYPE_IPCXN) {
        snprintf(why, sizeof why, "not an IP connection");
    } else if (egress_check_host(*host ? host : NULL, &a->addr, why, sizeof why)) {
        return socket(a->family, a->socktype, a->protocol);
    }
    free(c->refused);
    c->refused = cr_xstrdup(why);
    return CURL_SOCKET_BAD;
}

static void inflight_unlink(conn_t *c)
{
    if (c->prev) c->prev->next = c->next;
    else g_inflight = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = c->prev = NULL;
}

/* The loop: takes the submitted requests into the multi handle, drives
 * every transfer, and reports each finished one. */
static void *loop_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&g_hmu);
        conn_t *sub = g_submit;
        bool    stop = g_hstop;
        g_submit = NULL;
        pthread_mutex_unlock(&g_hmu);
        while (sub) {
            conn_t *c = sub;
            sub = c->next;
            c->prev = NULL;
            if (stop || curl_multi_add_handle(g_multi, c->curl) != CURLM_OK) {
                c->next = NULL;
                request_done(c, CURLE_FAILED_INIT, stop);
                continue;
            }
            c->next = g_inflight;
            if (g_inflight) g_inflight->prev = c;
            g_inflight = c;
        }
        if (stop) break;
        int running;
        curl_multi_perform(g_multi, &running);
        CURLMsg *m;
        int      left;
        while ((m = curl_multi_info_read(g_multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            CURL    *e = m->easy_handle;
            CURLcode rc = m->data.result;
            conn_t  *c = NULL;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&c);
            curl_multi_remove_handle(g_multi, e);
            inflight_unlink(c);
            request_done(c, rc, false);
        }
        curl_multi_poll(g_multi, NULL, 0, 1000, NULL);
    }
    /* stopping: what is still in flight is not delivered */
    while (g_inflight) {
        conn_t *c = g_inflight;
        curl_multi_remove_handle(g_multi, c->curl);
        inflight_unlink(c);
        request_done(c, CURLE_ABORTED_BY_CALLBACK, true);
    }
    return NULL;
}

bool notify_http_init(notify_done_fn done, problem_t *p)
{
    g_done = done;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return problem_set(p, PB_INTERNAL_ERROR, "cannot initialise libcurl");
    if (!(g_multi = curl_multi_init())) {
        curl_global_cleanup();
        return problem_set(p, PB_INTERNAL_ERROR, "cannot create libcurl's multi handle");
    }
    /* idle keep-alive connections kept over all endpoints (each lane has one) */
    curl_multi_setopt(g_multi, CURLMOPT_MAXCONNECTS, 4096L);
    if (!notify_mqtt_init(p)) goto fail;
    if (!httpc_start(done, p)) {
        notify_mqtt_shutdown();
        goto fail;
    }
    g_hstop = false;
    if (pthread_create(&g_loop, NULL, loop_main, NULL) != 0) {
        httpc_stop();
        httpc_cleanup();
        notify_mqtt_shutdown();
        problem_set(p, PB_INTERNAL_ERROR, "cannot start the notifier's HTTP thread");
        goto fail;
    }
    g_loop_on = true;
    return true;
fail:
    curl_multi_cleanup(g_multi);
    g_multi = NULL;
    curl_global_cleanup();
    return false;
}

void notify_http_shutdown(void)
{
    if (g_loop_on) {
        pthread_mutex_lock(&g_hmu);
        g_hstop = true;
        pthread_mutex_unlock(&g_hmu);
        curl_multi_wakeup(g_multi);
        pthread_join(g_loop, NULL);
        g_loop_on = false;
    }
    httpc_stop();
}

void notify_http_cleanup(void)
{
    httpc_cleanup();
    notify_mqtt_shutdown();
    if (g_multi) curl_multi_cleanup(g_multi);
    g_multi = NULL;
    curl_global_cleanup();
}

void notify_conn_free(void *conn)
{
    conn_t *c = conn;
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    free(c->refused);
    notify_mqtt_free(c->mqtt);
    httpc_conn_free(c->hc);
    free(c);
}

static size_t discard(char *ptr, size_t size, size_t nmemb, void *ud)
{
    (void)ptr;
    (void)ud;
    return size * nmemb;
}

static bool add_header(struct curl_slist **h, const char *line)
{
    struct curl_slist *t = curl_slist_append(*h, line);
    if (!t) return false;
    *h = t;
    return true;
}

/* The request of s on easy handle c (reset: the connection stays cached). */
static bool prepare(conn_t *cn, const notify_sub_t *s, const char *body, size_t len, const char *ctype,
                    long timeout_ms)
{
    CURL *c = cn->curl;
    if (!c) {
        if (!(c = curl_easy_init())) return false;
        cn->curl = c;
    }
    curl_easy_reset(c);
    char               line[2048];
    struct curl_slist *h = NULL;
    snprintf(line, sizeof line, "Content-Type: %s", ctype);
    if (!add_header(&h, line) || !add_header(&h, "Expect:")) goto fail;
    if (!strcmp(ctype, "application/json")) {
        snprintf(line, sizeof line,
                 "Link: <%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"",
                 ld_context_link(s->out_ctx));
        if (!add_header(&h, line)) goto fail;
    }
    if (*s->tenant) {
        snprintf(line, sizeof line, "NGSILD-Tenant: %s", s->tenant);
        if (!add_header(&h, line)) goto fail;
    }
    for (size_t i = 0; i < s->n_receiver_info; i++) {
        snprintf(line, sizeof line, "%s: %s", s->receiver_info[i].name, s->receiver_info[i].value);
        if (!add_header(&h, line)) goto fail;
    }
    cn->headers = h;
    curl_easy_setopt(c, CURLOPT_PRIVATE, (char *)cn);
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
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, cn);
    if (cr_config.notifier_ca_file && *cr_config.notifier_ca_file && strcmp(cr_config.notifier_ca_file, "none"))
        curl_easy_setopt(c, CURLOPT_CAINFO, cr_config.notifier_ca_file);
    return true;
fail:
    curl_slist_free_all(h);
    return false;
}

void notify_transport_send(void **conn, const notify_sub_t *s, const char *body, size_t len, const char *ctype,
                 long timeout_ms, void *ud)
{
    conn_t *cn = *conn;
    if (!cn) *conn = cn = cr_xcalloc(1, sizeof *cn);
    if (s->egress_why) {              /* the URI's host (a name rule, or a literal address) is refused */
        char why[224];
        snprintf(why, sizeof why, "refused by the egress policy: %s", s->egress_why);
        g_done(ud, false, false, why);
        return;
    }
    if (s->mqtt) {
        notify_mqtt_send(&cn->mqtt, s, body, len, ctype, timeout_ms, ud);
        return;
    }
    if (s->hc) {
        sbuf_t *h = httpc_head(&cn->hc, &s->hc_addr, s->hc_addr_len);
        sb_printf(h, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: coraine\r\nContent-Type: %s\r\nContent-Length: %zu\r\n",
                  s->hc_path, s->hc_host, ctype, len);
        if (!strcmp(ctype, "application/json"))
            sb_printf(h, "Link: <%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"\r\n",
                      ld_context_link(s->out_ctx));
        if (*s->tenant) sb_printf(h, "NGSILD-Tenant: %s\r\n", s->tenant);
        for (size_t i = 0; i < s->n_receiver_info; i++)
            sb_printf(h, "%s: %s\r\n", s->receiver_info[i].name, s->receiver_info[i].value);
        sb_adds(h, "\r\n");
        httpc_post(cn->hc, body, len, timeout_ms, ud);
        return;
    }
    if (!prepare(cn, s, body, len, ctype, timeout_ms)) {
        g_done(ud, false, false, "the request could not be prepared (out of memory)");
        return;
    }
    cn->ud = ud;
    pthread_mutex_lock(&g_hmu);
    if (g_hstop) {                    /* shutting down: not delivered */
        pthread_mutex_unlock(&g_hmu);
        curl_slist_free_all(cn->headers);
        cn->headers = NULL;
        cn->ud = NULL;
        g_done(ud, false, true, NULL);
        return;
    }
    cn->next = g_submit;
    g_submit = cn;
    pthread_mutex_unlock(&g_hmu);
    curl_multi_wakeup(g_multi);
}
