/*
 * receiver.c - a notification receiver for tests and benchmarks: an HTTP
 * server (libmicrohttpd) that accepts NGSI-LD notifications on any path and
 * counts them in total, per subscription and per entity, checks that the
 * notifications about one entity for one subscription arrive in commit order
 * (by the entity's modifiedAt, which the broker stamps strictly increasing:
 * subscribe with sysAttrs), and answers
 *   GET  /count          {"notifications", "entities", "perSubscription",
 *                         "perEntity", "outOfOrder", "duplicates"}
 *   GET  /notifications  the last 1000 notifications: [{"headers", "body"}]
 *   POST /reset          clears everything
 *
 *   receiver --port N [--delay MS] [--never] [--fail K] [--mqtt HOST:PORT --topic T]
 * --delay answers every notification after MS ms; --never never answers
 * (the connection is held until the receiver stops). Both for the
 * slow-receiver tests. --fail answers the first K notifications with 500
 * without counting them (the retry tests; /count's "refused" tells them). --mqtt also subscribes to topic T (QoS 2) on that
 * MQTT broker and counts the bodies of the notification envelopes (7.2) it
 * gets there, their "metadata" kept as the headers. SIGTERM/SIGINT stop it.
 */
#include "json/json.h"

#include <microhttpd.h>
#include <mosquitto.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEEP 1000

typedef struct entry {
    struct entry *next;
    char         *key;
    uint64_t      count;
    int64_t       last;       /* order check: the last modifiedAt (µs), 0: none */
} entry_t;

typedef struct map {
    entry_t *b[4096];
} map_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static map_t           g_subs, g_ents, g_order;
static uint64_t        g_notifications, g_entities, g_out_of_order, g_duplicates, g_bad;
static char           *g_keep[KEEP];
static size_t          g_keep_next;
static int             g_delay_ms;
static int             g_never;
static int             g_fail;         /* --fail: notifications still to refuse (under g_mu) */
static uint64_t        g_refused;
static volatile sig_atomic_t g_stop;

static unsigned hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static entry_t *map_get(map_t *m, const char *key)
{
    unsigned i = hash(key) % 4096;
    for (entry_t *e = m->b[i]; e; e = e->next)
        if (!strcmp(e->key, key)) return e;
    entry_t *e = calloc(1, sizeof *e);
    if (!e) abort();
    e->key = strdup(key);
    e->next = m->b[i];
    m->b[i] = e;
    return e;
}

static void map_clear(map_t *m)
{
    for (size_t i = 0; i < 4096; i++) {
        while (m->b[i]) {
            entry_t *e = m->b[i];
            m->b[i] = e->next;
            free(e->key);
            free(e);
        }
    }
}

static void map_render(sbuf_t *sb, const map_t *m)
{
    bool first = true;
    sb_addc(sb, '{');
    for (size_t i = 0; i < 4096; i++)
        for (entry_t *e = m->b[i]; e; e = e->next) {
            if (!first) sb_addc(sb, ',');
            first = false;
            json_render_string(sb, e->key, strlen(e->key));
            sb_printf(sb, ":%llu", (unsigned long long)e->count);
        }
    sb_addc(sb, '}');
}

/* The modifiedAt of an entity in any format (normalized/concise: a string;
 * keyValues: a string as well). */
static const char *modified_at(const json_t *e)
{
    const json_t *m = json_get(e, "modifiedAt");
    return json_is_string(m) ? m->str : NULL;
}

static void count_entity(const char *sub, const json_t *e)
{
    const json_t *id = json_get(e, "id");
    if (!json_is_string(id)) {
        /* GeoJSON feature: id at the top too */
        g_bad++;
        return;
    }
    g_entities++;
    map_get(&g_ents, id->str)->count++;
    const char *mod = modified_at(e);
    if (!mod) {
        const json_t *props = json_get(e, "properties");
        if (props) mod = modified_at(props);
    }
    int64_t us;
    if (!mod || !cr_datetime_parse(mod, &us)) return;
    char key[1024];
    snprintf(key, sizeof key, "%s\n%s", sub, id->str);
    entry_t *o = map_get(&g_order, key);
    if (o->last == us) g_duplicates++;
    else if (o->last > us) g_out_of_order++;
    else o->last = us;
}

static void count_body(const char *body, size_t len, const char *headers)
{
    arena_t *a = arena_new(4096);
    char     err[128];
    json_t  *n = json_parse_copy(a, body, len, &(json_limits_t){0}, err, sizeof err);
    pthread_mutex_lock(&g_mu);
    g_notifications++;
    const json_t *sid = n ? json_get(n, "subscriptionId") : NULL;
    const json_t *data = n ? json_get(n, "data") : NULL;
    if (!json_is_string(sid) || !data) g_bad++;
    else {
        map_get(&g_subs, sid->str)->count++;
        if (json_is_object(data)) data = json_get(data, "features");   /* geo+json */
        for (const json_t *e = json_is_array(data) ? data->child : NULL; e; e = e->next) count_entity(sid->str, e);
    }
    sbuf_t keep;
    sb_init(&keep, NULL, len + 256);
    sb_adds(&keep, "{\"headers\":");
    sb_adds(&keep, headers);
    sb_adds(&keep, ",\"body\":");
    if (n) sb_add(&keep, body, len);
    else json_render_string(&keep, body, len);
    sb_addc(&keep, '}');
    free(g_keep[g_keep_next % KEEP]);
    g_keep[g_keep_next % KEEP] = keep.p;     /* owned from here */
    g_keep_next++;
    pthread_mutex_unlock(&g_mu);
    arena_free(a);
}

typedef struct upload {
    sbuf_t body;
    sbuf_t headers;
    bool   first_header;
} upload_t;

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    upload_t *u = cls;
    sb_addc(&u->headers, u->first_header ? '{' : ',');
    u->first_header = false;
    json_render_string(&u->headers, key, strlen(key));
    sb_addc(&u->headers, ':');
    json_render_string(&u->headers, value, strlen(value));
    return MHD_YES;
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, sbuf_t *sb)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(sb ? sb->len : 0, sb ? sb->p : (void *)"",
                                                             MHD_RESPMEM_MUST_COPY);
    if (sb) MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **state)
{
    (void)cls;
    (void)version;
    upload_t *u = *state;
    if (!u) {
        u = calloc(1, sizeof *u);
        if (!u) return MHD_NO;
        sb_init(&u->body, NULL, 1024);
        sb_init(&u->headers, NULL, 256);
        u->first_header = true;
        *state = u;
        return MHD_YES;
    }
    if (*size) {
        sb_add(&u->body, data, *size);
        *size = 0;
        return MHD_YES;
    }
    sbuf_t out;
    sb_init(&out, NULL, 256);
    enum MHD_Result rc;
    if (!strcmp(method, "GET") && !strcmp(url, "/count")) {
        pthread_mutex_lock(&g_mu);
        sb_printf(&out, "{\"notifications\":%llu,\"entities\":%llu,\"outOfOrder\":%llu,\"duplicates\":%llu,"
                        "\"unreadable\":%llu,\"refused\":%llu,\"perSubscription\":",
                  (unsigned long long)g_notifications, (unsigned long long)g_entities,
                  (unsigned long long)g_out_of_order, (unsigned long long)g_duplicates, (unsigned long long)g_bad,
                  (unsigned long long)g_refused);
        map_render(&out, &g_subs);
        sb_adds(&out, ",\"perEntity\":");
        map_render(&out, &g_ents);
        sb_addc(&out, '}');
        pthread_mutex_unlock(&g_mu);
        rc = answer(c, 200, &out);
    } else if (!strcmp(method, "GET") && !strcmp(url, "/notifications")) {
        pthread_mutex_lock(&g_mu);
        size_t n = g_keep_next < KEEP ? g_keep_next : KEEP, first = g_keep_next - n;
        sb_addc(&out, '[');
        for (size_t i = 0; i < n; i++) {
            if (i) sb_addc(&out, ',');
            sb_adds(&out, g_keep[(first + i) % KEEP]);
        }
        sb_addc(&out, ']');
        pthread_mutex_unlock(&g_mu);
        rc = answer(c, 200, &out);
    } else if (!strcmp(method, "POST") && !strcmp(url, "/reset")) {
        pthread_mutex_lock(&g_mu);
        map_clear(&g_subs);
        map_clear(&g_ents);
        map_clear(&g_order);
        for (size_t i = 0; i < KEEP; i++) {
            free(g_keep[i]);
            g_keep[i] = NULL;
        }
        g_keep_next = g_notifications = g_entities = g_out_of_order = g_duplicates = g_bad = 0;
        pthread_mutex_unlock(&g_mu);
        rc = answer(c, 204, NULL);
    } else if (!strcmp(method, "POST")) {
        MHD_get_connection_values(c, MHD_HEADER_KIND, add_header, u);
        if (u->first_header) sb_addc(&u->headers, '{');
        sb_addc(&u->headers, '}');
        if (g_never)
            while (!g_stop) sleep(1);
        pthread_mutex_lock(&g_mu);
        bool refuse = g_fail > 0;
        if (refuse) {
            g_fail--;
            g_refused++;
        }
        pthread_mutex_unlock(&g_mu);
        if (refuse) {
            rc = answer(c, 500, NULL);
            sb_release(&out);
            return rc;
        }
        count_body(u->body.p, u->body.len, u->headers.p);
        if (g_delay_ms) {
            struct timespec ts = {g_delay_ms / 1000, (long)(g_delay_ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
        rc = answer(c, 200, NULL);
    } else rc = answer(c, 404, NULL);
    sb_release(&out);
    return rc;
}

static void on_done(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode t)
{
    (void)cls;
    (void)c;
    (void)t;
    upload_t *u = *state;
    if (!u) return;
    sb_release(&u->body);
    sb_release(&u->headers);
    free(u);
    *state = NULL;
}

/* ---- MQTT subscriber mode */

static const char *g_topic;

static void mq_on_connect(struct mosquitto *m, void *ud, int rc)
{
    (void)ud;
    if (rc == 0) mosquitto_subscribe(m, NULL, g_topic, 2);
}

static void mq_on_message(struct mosquitto *m, void *ud, const struct mosquitto_message *msg)
{
    (void)m;
    (void)ud;
    arena_t *a = arena_new(4096);
    char     err[128];
    json_t  *env = json_parse_copy(a, msg->payload, (size_t)msg->payloadlen, &(json_limits_t){0}, err, sizeof err);
    const json_t *body = env ? json_get(env, "body") : NULL, *meta = env ? json_get(env, "metadata") : NULL;
    sbuf_t b, h;
    sb_init(&b, a, 1024);
    sb_init(&h, a, 256);
    if (body) json_render(&b, body);
    else sb_adds(&b, "null");
    if (meta) json_render(&h, meta);
    else sb_adds(&h, "{}");
    count_body(b.p, b.len, h.p);
    arena_free(a);
}

static struct mosquitto *mqtt_start(const char *hostport)
{
    char host[256];
    int  port = 1883;
    snprintf(host, sizeof host, "%s", hostport);
    char *c = strrchr(host, ':');
    if (c) {
        *c = '\0';
        port = atoi(c + 1);
    }
    mosquitto_lib_init();
    struct mosquitto *m = mosquitto_new(NULL, true, NULL);
    if (!m) return NULL;
    mosquitto_int_option(m, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
    mosquitto_connect_callback_set(m, mq_on_connect);
    mosquitto_message_callback_set(m, mq_on_message);
    if (mosquitto_connect(m, host, port, 30) != MOSQ_ERR_SUCCESS || mosquitto_loop_start(m) != MOSQ_ERR_SUCCESS) {
        mosquitto_destroy(m);
        return NULL;
    }
    return m;
}

int main(int argc, char **argv)
{
    int         port = 0;
    const char *mqtt = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc) port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mqtt") && i + 1 < argc) mqtt = argv[++i];
        else if (!strcmp(argv[i], "--topic") && i + 1 < argc) g_topic = argv[++i];
        else if (!strcmp(argv[i], "--delay") && i + 1 < argc) g_delay_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--never")) g_never = 1;
        else if (!strcmp(argv[i], "--fail") && i + 1 < argc) g_fail = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: receiver --port N [--delay MS] [--never] [--mqtt HOST:PORT --topic T]\n");
            return 2;
        }
    }
    if (port <= 0) {
        fprintf(stderr, "receiver: --port N is required\n");
        return 2;
    }
    /* blocked before any thread starts: only sigwait() below takes them */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                            MHD_USE_ERROR_LOG,
                                            (uint16_t)port, NULL, NULL, on_request, NULL,
                                            MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "receiver: cannot listen on port %d\n", port);
        return 1;
    }
    struct mosquitto *mq = NULL;
    if (mqtt) {
        if (!g_topic) g_topic = "#";
        if (!(mq = mqtt_start(mqtt))) {
            fprintf(stderr, "receiver: cannot connect to the MQTT broker %s\n", mqtt);
            MHD_stop_daemon(d);
            return 1;
        }
    }
    fprintf(stderr, "receiver: listening on %d%s\n", port, g_never ? " (never answers)" : "");
    int sig = 0;
    while (sigwait(&stop_signals, &sig) != 0) {}
    g_stop = 1;                 /* never-answering connections end now */
    if (mq) {
        mosquitto_disconnect(mq);
        mosquitto_loop_stop(mq, true);
        mosquitto_destroy(mq);
        mosquitto_lib_cleanup();
    }
    if (g_never) _exit(0);      /* held connections: do not wait for them */
    MHD_stop_daemon(d);
    return 0;
}
