/*
 * mqtt.c - the MQTT binding of notifications (7.2) through libmosquitto:
 * one client connection per lane (so the order of a lane is the order of
 * publication), the {"metadata", "body"} envelope, MQTT-QoS 0/1/2 and
 * MQTT-Version mqtt3.1.1 / mqtt5.0 from notifierInfo.
 *
 * Asynchronous, like the HTTP clients: each connection runs libmosquitto's
 * network thread (mosquitto_loop_start: it connects, reconnects with a
 * doubling delay of 1 .. 30 s, and completes the QoS handshakes); a
 * publication returns at once and is done when libmosquitto reports it
 * (QoS 0: written; QoS 1: PUBACK; QoS 2: PUBCOMP), fails when the connection
 * drops or is refused, or when the notification's timeout passes first
 * (notify_mqtt_sweep, from the engine's ticker). So a slow or unreachable
 * MQTT broker holds its own lanes, never a sender thread. Outcomes are
 * handed to the engine with notify_done_later() (never from libmosquitto's
 * thread into the engine, which may free the connection).
 */
#include "notify_int.h"

#include <arpa/inet.h>
#include <mosquitto.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct mqtt_conn {
    pthread_mutex_t   mu;             /* the members below; taken before g_mu */
    struct mosquitto *m;
    int               version;        /* MQTT_PROTOCOL_V311 / V5 of the client */
    bool              connected;
    bool              refused;        /* the egress policy refused the address connected: a new client next */
    /* the publication of the lane, while one is under way */
    void             *ud;             /* non-NULL: under way */
    bool              published;      /* handed to libmosquitto (mid valid) */
    int               mid, qos;
    char             *env;            /* the envelope, until published */
    int               env_len;
    const char       *topic;
    char             *host;           /* the URI's host, checked again on the address connected (on_connect) */
    int64_t           deadline_ms;
    struct mqtt_conn *next, *prev;    /* the under-way list (g_mu) */
} mqtt_conn_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static mqtt_conn_t    *g_busy;        /* connections with a publication under way */

bool notify_mqtt_init(problem_t *p)
{
    if (mosquitto_lib_init() != MOSQ_ERR_SUCCESS) return problem_set(p, PB_INTERNAL_ERROR, "cannot initialise libmosquitto");
    return true;
}

void notify_mqtt_shutdown(void)
{
    mosquitto_lib_cleanup();
}

/* Ends the publication under way (c->mu held): the engine hears of it on
 * one of its threads. */
static void complete(mqtt_conn_t *c, bool ok, bool aborted, const char *why)
{
    void *ud = c->ud;
    if (!ud) return;
    c->ud = NULL;
    c->published = false;
    free(c->env);
    c->env = NULL;
    pthread_mutex_lock(&g_mu);
    if (c->prev) c->prev->next = c->next;
    else if (g_busy == c) g_busy = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = c->prev = NULL;
    pthread_mutex_unlock(&g_mu);
    notify_done_later(ud, ok, aborted, why);
}

static void publish_locked(mqtt_conn_t *c)
{
    int mid = 0;
    int rc = mosquitto_publish(c->m, &mid, c->topic, c->env_len, c->env, c->qos, false);
    if (rc != MOSQ_ERR_SUCCESS) {
        complete(c, false, false, mosquitto_strerror(rc));
        return;
    }
    c->mid = mid;
    c->published = true;
}

/* The egress policy on the address connected (libmosquitto resolved the
 * name itself, for mqtts://): false with why when it is refused. */
static bool peer_allowed(struct mosquitto *m, const char *host, char *why, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t               l = sizeof ss;
    int                     fd = mosquitto_socket(m);
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &l) != 0) {
        snprintf(why, n, "the address connected is unknown");
        return false;
    }
    return egress_check_host(host, (struct sockaddr *)&ss, why, n);
}

static void on_connect(struct mosquitto *m, void *ud, int rc)
{
    mqtt_conn_t *c = ud;
    char         why[192] = "", ewhy[160];
    if (rc) snprintf(why, sizeof why, "the MQTT broker refused the connection: %s", mosquitto_connack_string(rc));
    else if (c->host && !peer_allowed(m, c->host, ewhy, sizeof ewhy)) {
        snprintf(why, sizeof why, "refused by the egress policy: %s", ewhy);
        rc = -1;
    }
    pthread_mutex_lock(&c->mu);           /* no cancellation point while it is held (drop) */
    c->connected = rc == 0;
    if (rc < 0) {
        c->refused = true;                /* nothing is published to it; the next send starts anew */
        mosquitto_disconnect(m);
    }
    if (rc) complete(c, false, false, why);
    else if (c->ud && !c->published) publish_locked(c);
    pthread_mutex_unlock(&c->mu);
}

static void on_disconnect(struct mosquitto *m, void *ud, int rc)
{
    (void)m;
    (void)rc;
    mqtt_conn_t *c = ud;
    pthread_mutex_lock(&c->mu);
    c->connected = false;
    complete(c, false, false, "the MQTT connection was lost");   /* not acknowledged: failed (retried by the engine) */
    pthread_mutex_unlock(&c->mu);
}

static void on_publish(struct mosquitto *m, void *ud, int mid)
{
    (void)m;
    mqtt_conn_t *c = ud;
    pthread_mutex_lock(&c->mu);
    if (c->ud && c->published && c->mid == mid) complete(c, true, false, NULL);
    pthread_mutex_unlock(&c->mu);
}

/* Stops the client (no publication under way: the lane is the caller's).
 * The network thread is cancelled: one that never connected may be in a
 * blocking reconnect, which a disconnect does not end. */
static void drop(mqtt_conn_t *c)
{
    if (c->m) {
        mosquitto_disconnect(c->m);
        mosquitto_loop_stop(c->m, true);
        mosquitto_destroy(c->m);
    }
    c->m = NULL;
    c->connected = false;
    c->refused = false;
    free(c->host);
    c->host = NULL;
}

void notify_mqtt_free(void *conn)
{
    mqtt_conn_t *c = conn;
    if (!c) return;
    drop(c);
    pthread_mutex_destroy(&c->mu);
    free(c->env);
    free(c);
}

/* The address to connect to s's broker: every address the name resolves to
 * must pass the egress policy (a name resolving to an allowed and a refused
 * address is refused). mqtt:// to a name with one address then connects to
 * that address (a later DNS answer cannot redirect it); mqtts:// (its
 * certificate is checked against the name) and names with several
 * addresses (libmosquitto tries each) connect to the name. Either way the
 * address connected is checked again before anything is published
 * (on_connect). *addr: the address, or "" for the name. */
static bool resolve(const notify_sub_t *s, char *addr, size_t n, char *why, size_t wn)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    char            port[8], ewhy[160];
    snprintf(port, sizeof port, "%d", s->mq_port);
    int rc = getaddrinfo(s->mq_host, port, &hints, &res);
    if (rc) {
        snprintf(why, wn, "cannot resolve %s: %s", s->mq_host, gai_strerror(rc));
        return false;
    }
    bool ok = true;
    int  count = 0;
    *addr = '\0';
    for (struct addrinfo *r = res; r && ok; r = r->ai_next, count++) {
        if (!egress_check_host(s->mq_host, r->ai_addr, ewhy, sizeof ewhy)) {
            snprintf(why, wn, "refused by the egress policy: %s", ewhy);
            ok = false;
        } else if (!*addr) {
            const void *a = r->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)r->ai_addr)->sin6_addr
                                                     : (const void *)&((struct sockaddr_in *)r->ai_addr)->sin_addr;
            if (!inet_ntop(r->ai_family, a, addr, (socklen_t)n)) *addr = '\0';
        }
    }
    freeaddrinfo(res);
    if (ok && !*addr) {
        snprintf(why, wn, "%s has no address", s->mq_host);
        return false;
    }
    if (count > 1 || s->mq_tls) *addr = '\0';
    return ok;
}

/* The client of s (version, user, TLS), started; false (why) when it cannot be. */
static bool client(mqtt_conn_t *c, const notify_sub_t *s, char *why, size_t wn)
{
    int version = s->mqtt_v5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311;
    pthread_mutex_lock(&c->mu);           /* refused is on_connect's (libmosquitto's thread) */
    bool refused = c->refused;
    pthread_mutex_unlock(&c->mu);
    if (c->m && c->version == version && !refused) return true;
    drop(c);
    char addr[INET6_ADDRSTRLEN];
    if (!resolve(s, addr, sizeof addr, why, wn)) return false;
    struct mosquitto *m = mosquitto_new(NULL, true, c);
    if (!m) return false;
    mosquitto_int_option(m, MOSQ_OPT_PROTOCOL_VERSION, version);
    mosquitto_connect_callback_set(m, on_connect);
    mosquitto_disconnect_callback_set(m, on_disconnect);
    mosquitto_publish_callback_set(m, on_publish);
    mosquitto_reconnect_delay_set(m, 1, 30, true);
    if (s->mq_user) mosquitto_username_pw_set(m, s->mq_user, s->mq_pass);
    const char *ca = cr_config.notifier_ca_file && *cr_config.notifier_ca_file && strcmp(cr_config.notifier_ca_file, "none")
                         ? cr_config.notifier_ca_file : NULL;
    if (s->mq_tls && mosquitto_tls_set(m, ca, ca ? NULL : "/etc/ssl/certs", NULL, NULL, NULL) != MOSQ_ERR_SUCCESS) {
        snprintf(why, wn, "the TLS setup of the MQTT client failed");
        mosquitto_destroy(m);
        return false;
    }
    /* non-blocking: the network thread completes the connection (a
     * blocking connect waits for the kernel's SYN retries, minutes for an
     * address that never answers); a first failure is retried by it too */
    c->host = cr_xstrdup(s->mq_host);     /* before the network thread's on_connect reads it */
    int rc = mosquitto_connect_async(m, *addr ? addr : s->mq_host, s->mq_port, 60);
    if (rc != MOSQ_ERR_SUCCESS && rc != MOSQ_ERR_ERRNO) {
        snprintf(why, wn, "%s", mosquitto_strerror(rc));
        mosquitto_destroy(m);
        free(c->host);
        c->host = NULL;
        return false;
    }
    if (mosquitto_loop_start(m) != MOSQ_ERR_SUCCESS) {
        snprintf(why, wn, "cannot start the MQTT client's thread");
        mosquitto_destroy(m);
        free(c->host);
        c->host = NULL;
        return false;
    }
    c->m = m;
    c->version = version;
    return true;
}

void notify_mqtt_send(void **conn, const notify_sub_t *s, const char *body, size_t len, const char *ctype,
                      long timeout_ms, void *ud)
{
    mqtt_conn_t *c = *conn;
    if (!c) {
        *conn = c = cr_xcalloc(1, sizeof *c);
        pthread_mutex_init(&c->mu, NULL);
    }
    char why[224];
    if (!client(c, s, why, sizeof why)) {
        notify_done_later(ud, false, false, why);
        return;
    }

    /* the envelope of 7.2: {"metadata": {...}, "body": notification} */
    sbuf_t env;
    sb_init(&env, NULL, len + 512);
    json_writer_t w;
    jw_init(&w, &env);
    jw_object_begin(&w);
    jw_key(&w, "metadata");
    jw_object_begin(&w);
    jw_key(&w, "Content-Type");
    jw_string(&w, ctype);
    if (!strcmp(ctype, "application/json")) {
        char link[1024];
        snprintf(link, sizeof link, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"",
                 ld_context_link(s->out_ctx));
        jw_key(&w, "Link");
        jw_string(&w, link);
    }
    if (*s->tenant) {
        jw_key(&w, "NGSILD-Tenant");
        jw_string(&w, s->tenant);
    }
    for (size_t i = 0; i < s->n_receiver_info; i++) {
        jw_key(&w, s->receiver_info[i].name);
        jw_string(&w, s->receiver_info[i].value);
    }
    jw_object_end(&w);
    jw_key(&w, "body");
    jw_raw(&w, body, len);
    jw_object_end(&w);

    pthread_mutex_lock(&c->mu);
    c->env = env.p;                   /* owned until published (sb_release would free it) */
    c->env_len = (int)env.len;
    c->topic = s->mq_topic;
    c->qos = s->mqtt_qos;
    c->ud = ud;
    c->published = false;
    c->deadline_ms = cr_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
    pthread_mutex_lock(&g_mu);
    c->prev = NULL;
    c->next = g_busy;
    if (g_busy) g_busy->prev = c;
    g_busy = c;
    pthread_mutex_unlock(&g_mu);
    if (c->connected) publish_locked(c);   /* else on_connect publishes it */
    pthread_mutex_unlock(&c->mu);
}

/* Fails what is under way past its timeout (abort: everything, aborted). */
void notify_mqtt_sweep(int64_t now_ms, bool abort)
{
    for (;;) {
        mqtt_conn_t *due = NULL;
        pthread_mutex_lock(&g_mu);
        for (mqtt_conn_t *c = g_busy; c && !due; c = c->next)
            if (abort || now_ms >= c->deadline_ms) due = c;
        pthread_mutex_unlock(&g_mu);
        if (!due) return;
        /* under way, so not freed meanwhile (its lane waits for it) */
        pthread_mutex_lock(&due->mu);
        if (due->ud && (abort || now_ms >= due->deadline_ms))
            complete(due, false, abort, abort ? NULL : "no acknowledgement within the timeout");
        pthread_mutex_unlock(&due->mu);
    }
}
