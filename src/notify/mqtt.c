/*
 * mqtt.c - the MQTT binding of notifications (7.2) through libmosquitto:
 * one client connection per lane (so the order of a lane is the order of
 * publication), the {"metadata", "body"} envelope, MQTT-QoS 0/1/2 and
 * MQTT-Version mqtt3.1.1 / mqtt5.0 from notifierInfo, reconnection with a
 * doubling backoff (100 ms .. 30 s) during which publications fail fast and
 * are counted as failed, not queued forever.
 *
 * A publication is synchronous on the sender's thread, like an HTTP POST:
 * QoS 0 returns when the message is written to the socket, QoS 1 at PUBACK,
 * QoS 2 at PUBCOMP, each bounded by the notification timeout.
 */
#include "notify_int.h"

#include <mosquitto.h>
#include <stdlib.h>
#include <string.h>

typedef struct mqtt_conn {
    struct mosquitto *m;
    int               version;        /* MQTT_PROTOCOL_V311 / V5 of the live connection */
    bool              connected;
    int               acked_mid;
    int64_t           retry_at_ms;    /* backoff: no attempt before */
    int               backoff_ms;
} mqtt_conn_t;

bool notify_mqtt_init(problem_t *p)
{
    if (mosquitto_lib_init() != MOSQ_ERR_SUCCESS) return problem_set(p, PB_INTERNAL_ERROR, "cannot initialise libmosquitto");
    return true;
}

void notify_mqtt_shutdown(void)
{
    mosquitto_lib_cleanup();
}

static void drop(mqtt_conn_t *c)
{
    if (c->m) {
        mosquitto_disconnect(c->m);
        mosquitto_destroy(c->m);
    }
    c->m = NULL;
    c->connected = false;
}

void notify_mqtt_free(void *conn)
{
    mqtt_conn_t *c = conn;
    if (!c) return;
    drop(c);
    free(c);
}

static void on_connect(struct mosquitto *m, void *ud, int rc)
{
    (void)m;
    mqtt_conn_t *c = ud;
    c->connected = rc == 0;
}

static void on_publish(struct mosquitto *m, void *ud, int mid)
{
    (void)m;
    ((mqtt_conn_t *)ud)->acked_mid = mid;
}

static void failed(mqtt_conn_t *c, const notify_sub_t *s, const char *what)
{
    LOG_D("notify %s: %s", s->uri, what);
    drop(c);
    c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : 100;
    if (c->backoff_ms > 30000) c->backoff_ms = 30000;
    c->retry_at_ms = cr_now_ms() + c->backoff_ms;
}

static bool connect_now(mqtt_conn_t *c, const notify_sub_t *s, long timeout_ms)
{
    int version = s->mqtt_v5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311;
    if (c->m && c->connected && c->version == version) return true;
    drop(c);
    if (cr_now_ms() < c->retry_at_ms) return false;
    if (!(c->m = mosquitto_new(NULL, true, c))) return false;
    c->version = version;
    mosquitto_int_option(c->m, MOSQ_OPT_PROTOCOL_VERSION, version);
    mosquitto_connect_callback_set(c->m, on_connect);
    mosquitto_publish_callback_set(c->m, on_publish);
    if (s->mq_user) mosquitto_username_pw_set(c->m, s->mq_user, s->mq_pass);
    const char *ca = cr_config.notifier_ca_file && *cr_config.notifier_ca_file && strcmp(cr_config.notifier_ca_file, "none")
                         ? cr_config.notifier_ca_file : NULL;
    if (s->mq_tls && mosquitto_tls_set(c->m, ca, ca ? NULL : "/etc/ssl/certs", NULL, NULL, NULL) != MOSQ_ERR_SUCCESS) {
        failed(c, s, "TLS setup failed");
        return false;
    }
    /* non-blocking: the TCP connect is completed by the loop below, within
     * the notification's timeout (a blocking one waits for the kernel's SYN
     * retries, minutes for an address that never answers) */
    if (mosquitto_connect_async(c->m, s->mq_host, s->mq_port, 60) != MOSQ_ERR_SUCCESS) {
        failed(c, s, "connect failed");
        return false;
    }
    int64_t end = cr_now_ms() + timeout_ms;
    while (!c->connected && cr_now_ms() < end)
        if (mosquitto_loop(c->m, 50, 1) != MOSQ_ERR_SUCCESS) break;
    if (!c->connected) {
        failed(c, s, "no CONNACK");
        return false;
    }
    c->backoff_ms = 0;
    return true;
}

bool notify_mqtt_post(void **conn, const notify_sub_t *s, const char *body, size_t len, const char *ctype,
                      long timeout_ms)
{
    mqtt_conn_t *c = *conn;
    if (!c) *conn = c = cr_xcalloc(1, sizeof *c);
    if (!connect_now(c, s, timeout_ms)) return false;

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

    int  mid = 0;
    bool ok = mosquitto_publish(c->m, &mid, s->mq_topic, (int)env.len, env.p, s->mqtt_qos, false) == MOSQ_ERR_SUCCESS;
    sb_release(&env);
    int64_t end = cr_now_ms() + timeout_ms;
    while (ok && cr_now_ms() < end) {
        if (s->mqtt_qos == 0 ? !mosquitto_want_write(c->m) : c->acked_mid == mid) break;
        if (mosquitto_loop(c->m, 20, 1) != MOSQ_ERR_SUCCESS) ok = false;
    }
    if (ok && (s->mqtt_qos == 0 ? mosquitto_want_write(c->m) : c->acked_mid != mid)) ok = false;
    if (!ok) failed(c, s, "publish failed");
    return ok;
}
