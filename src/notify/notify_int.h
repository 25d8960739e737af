/*
 * notify_int.h - what the files of notify/ share: the parsed subscription,
 * its counters, and the sender's entry points. Not for other modules.
 */
#ifndef CORAINE_NOTIFY_INT_H
#define CORAINE_NOTIFY_INT_H

#include "notify.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

enum {
    TRG_ENTITY_CREATED = 1 << 0,
    TRG_ENTITY_UPDATED = 1 << 1,
    TRG_ENTITY_DELETED = 1 << 2,
    TRG_ATTR_CREATED   = 1 << 3,
    TRG_ATTR_UPDATED   = 1 << 4,
    TRG_ATTR_DELETED   = 1 << 5,
};

/* The counters of a subscription: shared by its versions (an update keeps
 * them), updated with atomics by the matcher and the senders. Times in µs. */
typedef struct sub_counters {
    atomic_int      refs;
    atomic_uint_fast64_t due, sent, failed, dropped_full, dropped_deleted, dropped_shutdown, dropped_expired,
                         dropped_failing, throttled;
    atomic_uint_fast64_t delivered;        /* due changes in a notification that was delivered */
    atomic_uint_fast64_t retried;          /* attempts that were retries of a failed notification */
    atomic_uint_fast64_t dropped_cooldown; /* not sent: within endpoint.cooldown of a failure (5.2.15) */
    atomic_uint_fast64_t dropped_retries;  /* changes of a notification that failed every retry */
    _Atomic int64_t last_notification, last_success, last_failure;
    _Atomic int64_t last_due;          /* throttling: the commit time of the last due change */
    atomic_int      failing;           /* notification.status: 1 failed, 0 ok */
    pthread_mutex_t why_mu;            /* why */
    char            why[192];          /* the last failure's reason (coraine:lastFailureReason) */
    uint64_t        order;             /* creation order in the registry */
} sub_counters_t;

typedef struct sub_header {
    const char *name, *value;
} sub_header_t;

struct endpoint;

struct notify_sub {
    atomic_int          refs;
    arena_t            *a;                /* everything below but counters and ep */
    char               *doc;              /* the stored document */
    size_t              doc_len;
    json_t             *tree;             /* doc parsed */
    const char         *tenant;           /* interned, "" = default */
    const char         *id;
    const ld_context_t *ctx;              /* the members' @context */
    const ld_context_t *out_ctx;          /* jsonldContext: notifications are compacted with it */

    entity_selector_t  *sel;  size_t n_sel;
    const char        **watched; size_t n_watched;   /* expanded, interned */
    const char        **dataset_ids; size_t n_dataset_ids;
    unsigned            triggers;         /* TRG_*, entityUpdated folded into the attribute ones */
    q_expr_t           *q;
    bool                q_linked;         /* q has terms into linked entities: q_match_linked */
    geoq_t             *geo;
    scopeq_t           *scope;
    bool                active;
    int64_t             expires_at;       /* CR_NO_TIME: never */
    int64_t             throttle_us;      /* 0: none */
    int64_t             interval_us;      /* timeInterval, 0: none */

    /* notification */
    render_opts_t       ro;               /* format, sysAttrs, pick/omit, lang, ctx = out_ctx */
    bool                show_changes;
    bool                attrs_pick;       /* ro.pick is notification.attributes (the roots' only with join) */
    int                 join;             /* SUB_JOIN_* (5.2.14) */
    unsigned            join_level;       /* >= 1 */
    const char         *uri;
    int                 accept;           /* ACC_JSON / ACC_LDJSON / ACC_GEOJSON (http.h values) */
    sub_header_t       *receiver_info; size_t n_receiver_info;
    long                timeout_ms;       /* 0: --notifierTimeout */
    long                cooldown_ms;      /* endpoint.cooldown (5.2.15), 0: none */
    const char         *egress_why;       /* the egress policy refuses the URI's host (why), or NULL */
    /* http:// with a literal address or localhost, no user info: sent by
     * httpc.c (the others by libcurl) */
    bool                hc;
    struct sockaddr_storage hc_addr;
    socklen_t           hc_addr_len;
    const char         *hc_host;          /* the Host header: the URI's authority */
    const char         *hc_path;          /* path and query, "/" at least */
    /* MQTT (7.2): mqtt[s]://[user[:pass]@]host[:port]/topic */
    bool                mqtt, mq_tls, mqtt_v5;
    int                 mqtt_qos;
    const char         *mq_host, *mq_user, *mq_pass, *mq_topic;
    int                 mq_port;

    /* engine */
    sub_counters_t     *c;
    struct endpoint    *ep;
    atomic_bool         removed;
    uint64_t            mark;             /* the change seq it was last matched for (tenant hooks are serial) */
    int64_t             next_at;          /* timeInterval: the next periodic notification (µs; ticker only) */
    bool                csource;          /* a context source registration subscription (5.11): reg/ matches it */
};

#define SUB_JOIN_NONE   0
#define SUB_JOIN_FLAT   1
#define SUB_JOIN_INLINE 2

#define SUB_ACC_JSON    1
#define SUB_ACC_LDJSON  2
#define SUB_ACC_GEOJSON 4

/* A due notification (engine.c queues it, sender.c sends it). */
typedef struct notify_job {
    struct notify_job *next;
    notify_sub_t      *sub;              /* a reference */
    cr_entity_t       *e;                /* a reference: after, or before for a delete */
    bool               entity_deleted;   /* entityDeleted: id, type, deletedAt */
    bool               entity_gone;      /* an entity deletion notified for its deleted attributes */
    int64_t            at;               /* commit time */
    store_attr_ref_t  *deleted;          /* attributeDeleted: the removed instances (point into before), in the job block */
    uint32_t           n_deleted;
    cr_entity_t      **many;             /* timeInterval: the matching entities (references), e NULL */
    uint32_t           n_many;
    cr_entity_t       *before;           /* showChanges / attributeDeleted: a reference to the previous version, else NULL */
    store_attr_ref_t  *changed;          /* showChanges: the updated instances (point into e), in the job block */
    uint32_t           n_changed;
    char              *raw;              /* notify_send: the rendered data array (malloc'd), else NULL */
    size_t             raw_len;
    const char        *reason;           /* notify_send: the triggerReason (static), or NULL */
    struct notify_obx *obx;              /* the change's store outbox entry (engine.c), or NULL */
} notify_job_t;

/* sender.c: renders ONE notification for jobs[0..n) (of one subscription,
 * in order: their entities are its data) into sb and returns its Content-Type. */
const char *notify_render(notify_job_t *const *jobs, size_t n, sbuf_t *sb);

/* sender.c: the HTTP client (libcurl multi on its own thread) and the
 * dispatch to MQTT. notify_transport_send() sends one notification on a lane's
 * connection (*conn, created on first use: a kept easy handle, or an MQTT
 * client) and returns at once for HTTP; done(ud, ok, aborted) follows once,
 * on the HTTP thread (or on the caller's for MQTT and for a request that
 * could not be made). ok: a 2xx (an MQTT publication acknowledged as its QoS
 * asks); aborted: not attempted to the end because the engine stops; why:
 * what failed (copied by done), or NULL. body stays untouched until done. */
typedef void (*notify_done_fn)(void *ud, bool ok, bool aborted, const char *why);
bool notify_http_init(notify_done_fn done, problem_t *p);
/* Stops the HTTP thread: what is in flight is done(.., aborted). */
void notify_http_shutdown(void);
/* After the connections are freed: the multi handle and libcurl go. */
void notify_http_cleanup(void);
void notify_transport_send(void **conn, const notify_sub_t *s, const char *body, size_t len, const char *ctype,
                           long timeout_ms, void *ud);
void notify_conn_free(void *conn);

/* httpc.c: the HTTP/1.1 client of http:// endpoints with a literal address
 * (one epoll thread; keep-alive connections, one per lane). httpc_head()
 * gives the connection's request head buffer to fill (the head up to its
 * blank line); httpc_post() sends it with body, and done() follows on the
 * client's thread. */
typedef struct httpc_conn httpc_conn_t;
bool    httpc_address(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len);
bool    httpc_start(notify_done_fn done, problem_t *p);
void    httpc_stop(void);                 /* in flight: done(.., aborted) */
void    httpc_cleanup(void);
sbuf_t *httpc_head(httpc_conn_t **conn, const struct sockaddr_storage *addr, socklen_t addr_len);
void    httpc_post(httpc_conn_t *c, const char *body, size_t len, long timeout_ms, void *ud);
void    httpc_conn_free(httpc_conn_t *c);
/* The caller is the client's thread (a done callback). */
bool    httpc_on_loop(void);

/* mqtt.c: MQTT endpoints (7.2): send wraps the body in the envelope and
 * returns at once; the outcome comes through notify_done_later(). */
bool notify_mqtt_init(problem_t *p);
void notify_mqtt_shutdown(void);
void notify_mqtt_send(void **conn, const notify_sub_t *s, const char *body, size_t len, const char *ctype,
                      long timeout_ms, void *ud);
/* Fails the publications past their timeout; abort: all of them (stop). */
void notify_mqtt_sweep(int64_t now_ms, bool abort);

/* engine.c: an outcome reported from a thread that is not the engine's
 * (libmosquitto's): a sender thread takes it up (notify_done_fn's work). */
void notify_done_later(void *ud, bool ok, bool aborted, const char *why);
void notify_mqtt_free(void *conn);

/* sub.c: the host of a URI's authority (no user info, no port; [v6] kept), in out. */
void notify_uri_host(const char *uri, char *out, size_t n);

/* engine.c: a subscription's last reference lets go of its endpoint. */
void notify_sub_engine_release(notify_sub_t *s);

/* counters */
sub_counters_t *sub_counters_new(void);
void            sub_counters_unref(sub_counters_t *c);

/* engine.c: the totals of s's counters kept beyond this process (notify_set_totals); false: none. */
bool notify_totals_read(const notify_sub_t *s, notify_totals_t *t);

#endif
