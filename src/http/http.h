/*
 * http.h - the HTTP face of the broker: libmicrohttpd glue, the router,
 * requests and replies. http/ knows HTTP (methods, headers, media types,
 * statuses, ProblemDetails) and nothing of NGSI-LD resources: api/ hands it
 * a route table.
 *
 * A request_t lives with its connection: it and its arena are allocated when
 * the connection opens and reset after each request, so a keep-alive client
 * costs no malloc per request. Everything a handler allocates comes from
 * r->arena and is released in one step when the response has been sent.
 */
#ifndef CORAINE_HTTP_H
#define CORAINE_HTTP_H

#include "../core/core.h"

enum {
    HM_GET = 1 << 0,
    HM_POST = 1 << 1,
    HM_PUT = 1 << 2,
    HM_PATCH = 1 << 3,
    HM_DELETE = 1 << 4,
    HM_HEAD = 1 << 5,
    HM_OPTIONS = 1 << 6,
};

/* Content-Type of the request body */
typedef enum { CT_NONE = 0, CT_JSON, CT_LDJSON, CT_MERGE_PATCH, CT_GEOJSON, CT_OTHER } ctype_t;

/* Acceptable response media types (6.3.4), a bit set from the Accept header */
enum { ACC_JSON = 1, ACC_LDJSON = 2, ACC_GEOJSON = 4 };

typedef struct http_param {
    const char *key;     /* decoded */
    const char *value;   /* form-decoded: '+' is a space, %2B a plus */
} http_param_t;

typedef struct http_header {
    const char *name;
    const char *value;
} http_header_t;

#define HTTP_MAX_PATH_PARAMS 4
#define HTTP_MAX_PARAMS 32
#define HTTP_MAX_OUT_HEADERS 12

typedef struct request {
    arena_t    *arena;
    int         method;                   /* HM_* */
    const char *method_name;
    const char *path;                     /* decoded path, without the query */
    const char *pathv[HTTP_MAX_PATH_PARAMS]; /* {params} of the route, decoded */
    int         npath;

    /* request headers */
    ctype_t     ctype;
    const char *content_type;             /* raw */
    const char *accept;                   /* raw, NULL when absent */
    int         accept_mask;              /* ACC_* the client accepts (no Accept: ACC_JSON|...) */
    uint16_t    accept_q[3];              /* q*1000 for json, ld+json, geo+json */
    const char *link;                     /* raw Link header */
    const char *tenant;                   /* NGSILD-Tenant, NULL when absent */
    const char *prefer;
    const char *request_id;               /* X-Request-Id as received (when sound), else generated */
    const char *user;                     /* who the request's token names (--auth), else NULL */

    /* query string */
    http_param_t params[HTTP_MAX_PARAMS];
    int          nparams;
    uint32_t     params_used;             /* bit i: params[i] was read by the handler */

    /* body */
    char       *body;                     /* NUL-terminated, in the arena */
    size_t      body_len;

    /* response, filled by the handler */
    int           status;
    const char   *out_type;               /* Content-Type of the answer, NULL: none */
    sbuf_t        out;
    http_header_t out_headers[HTTP_MAX_OUT_HEADERS];
    int           n_out_headers;

    /* kept across the runs of a deferred request (see req_defer) */
    int64_t     arrived_ns;               /* cr_mono_ns() when the request head was read */
    void       *ext;                      /* the handler layer's per-request state; NULL at first */

    /* connection-private state (http/ only) */
    void       *priv;
    void       *exec;                     /* http_exec's state when run outside libmicrohttpd, else NULL */
} request_t;

typedef void (*http_handler_fn)(request_t *r);

/* A route: path pattern with {param} segments, e.g. "/ngsi-ld/v1/entities/{id}/attrs/{attrId}";
 * one handler per method (NULL: method not allowed -> 405 with Allow). */
typedef struct http_route {
    const char     *pattern;
    http_handler_fn get, post, put, patch, del;
    int             flags;                /* HR_* */
} http_route_t;

enum {
    HR_NO_BODY_CHECKS = 1,                /* skip 6.3.4 Content-Type/Accept checks (admin) */
    HR_GEOJSON_OK = 2,                    /* GET may answer application/geo+json (5.7.1, 5.7.2) */
    HR_QUERY_POST = 4,                    /* POST is a query: Accept is checked as for GET */
    HR_PUBLIC = 8,                        /* answered without a token under --auth (probes) */
    HR_FORWARDS = 16,                     /* its handlers may forward: see http_set_offload */
};

typedef struct http_server http_server_t;

/* Starts libmicrohttpd on cr_config.port with the route table (kept, not copied). */
http_server_t *http_start(const http_route_t *routes, size_t n_routes, problem_t *p);
void           http_stop(http_server_t *s);
/* The first step of a graceful stop: no new connection is accepted, and the
 * requests under way (a head read, a body coming, a handler running or
 * deferred, an answer being sent) are finished until cr_mono_ns() reaches
 * deadline_ns (one already past: only the listening socket is closed).
 * Returns how many were still under way then (0: all done); http_stop then
 * closes every connection. */
int            http_drain(http_server_t *s, int64_t deadline_ns);
/* SIGHUP: --accessLog is opened again by its name (after logrotate). */
void           http_reopen_logs(void);
/* SIGHUP under --https: --cert and --key are read again; new handshakes get
 * the new pair, connections already open keep theirs. A pair that cannot be
 * used (unreadable, not PEM, a key not the certificate's) changes nothing
 * and is logged as an error. */
void           http_reload_tls(void);

/* ---- a request run outside libmicrohttpd (cor://, doc/cor-protocol.md)
 * The same dispatch as an HTTP request (the router, the 6.3.4
 * preconditions, the handler, the NGSILD-Tenant echo), for another binding
 * of the same API. The caller zeroes r, then sets r->arena, r->method_name,
 * r->path (as received: percent-encoded, writable) and r->body/body_len (a
 * NUL-terminated copy is made per run); query is the raw query string
 * (writable; NULL: none) and headers the request's (kept, not copied).
 * A handler that defers (req_defer) runs again on the calling thread when
 * it is resumed: http_exec waits (bounded as for HTTP: --contextTimeout).
 * The answer is in r->status, r->out_type, r->out and r->out_headers. */
typedef struct http_exec http_exec_t;
http_exec_t *http_exec_new(const http_route_t *routes, size_t n_routes);
void         http_exec_free(http_exec_t *x);
void         http_exec(const http_exec_t *x, request_t *r, char *query, const http_header_t *headers,
                       size_t n_headers);

/* ---- request helpers */
/* The value of query parameter `key` (marks it used), NULL when absent. */
const char *req_param(request_t *r, const char *key);
/* The first parameter the handler never read, or NULL (6.3.20? unknown parameters). */
const char *req_unused_param(const request_t *r);
const char *req_header(request_t *r, const char *name);
/* The acceptable type (ACC_*) the client prefers among `allowed` (6.3.4:
 * q weights first, then json, ld+json, geo+json), or 0 when none is acceptable. */
int         req_accept_best(const request_t *r, int allowed);

/* ---- deferred requests
 * A handler that must wait for slow work done elsewhere (a download) takes
 * req_token(r), hands it to whoever does the work, calls req_defer(r) and
 * returns. Nothing is sent for that run and the connection is suspended: it
 * holds no worker thread. When the work is done, that party calls
 * req_resume(token) once, from any thread (even before the handler has
 * returned); the handler then runs again from the start on the same request:
 * headers, parameters, the body as received, r->arena and r->ext are kept,
 * the response is cleared. So a handler defers only before it has changed
 * anything. A suspended connection has no idle timeout: the party that holds
 * the token must resume it within a bounded time. */
typedef struct req_token req_token_t;
req_token_t *req_token(request_t *r);       /* valid until the request ends */
void         req_defer(request_t *r);
bool         req_deferred(const request_t *r);
void         req_resume(req_token_t *t);

/* ---- held answers
 * A handler whose work has been done but is not final yet (a write the
 * store has committed and logged, whose fsync is pending: --dbSync always)
 * builds its answer as usual, calls req_hold(r), hands req_token(r) to the
 * party that finishes the work, and returns. Nothing is sent and the
 * connection is suspended holding the finished answer: no worker thread
 * waits, and, unlike req_defer, the handler does NOT run again. That party
 * calls req_release(token, ok, p) exactly once, from any thread (even
 * before the handler has returned): ok sends the answer as built; !ok
 * replaces it by the ProblemDetails of p (a 503 when the write could not be
 * made durable: nothing of it is acknowledged). http_exec (cor://) waits
 * for the release on its calling thread. A held request is under way for
 * http_drain and http_stop, so the party must release it within a bounded
 * time (the store's syncer: one fsync). */
void         req_hold(request_t *r);
void         req_release(req_token_t *t, bool ok, const problem_t *p);
/* Called on the handler's thread after every run of a handler that is not
 * a GET or HEAD (HTTP and http_exec alike), its answer built: api/ holds
 * there the answer of a write whose durability is pending. Set once, before
 * http_start. */
void         http_set_after_handler(void (*fn)(request_t *r));

/* ---- offloaded requests
 * A handler that is about to wait for context sources (up to their
 * timeouts) must not do it on libmicrohttpd's worker: a worker that waited
 * would hold back every other connection it serves. Such a request runs its
 * handler on one of --forwardThreads threads instead; the connection is
 * suspended meanwhile and the answer is sent as the handler built it. The
 * handler runs from the start there, so nothing changes for it: it may
 * defer (it then runs again on the worker) or hold. Two ways in:
 *  - a write: a request to a route flagged HR_FORWARDS, not a GET or a
 *    query (HR_QUERY_POST), for which test(r) is true (api/: its tenant has
 *    a registration that takes writes) is handed over before its handler runs (a write may
 *    forward before it changes anything, or after: a purge). test is called
 *    on the worker after the route and the preconditions: it must be cheap.
 *    Set once, before http_start.
 *  - a read: its handler calls req_offload(r) when it is about to ask a
 *    source; true: handed over, the handler returns without changing
 *    anything and whatever it answers is dropped (a read that asks no source
 *    stays on the worker and costs nothing more); false: it already runs
 *    where it may wait (the pool, or cor:// through http_exec, whose worker
 *    waits as before), or it is a write test(r) kept on the worker (it may
 *    have changed things, so it waits there). */
void         http_set_offload(bool (*test)(request_t *r));
bool         req_offload(request_t *r);

/* ---- replies */
void reply_header(request_t *r, const char *name, const char *value);
/* The room (bytes of "Name: value\r\n") left for more answer headers: the
 * connection's memory holds the request head and then the answer's head,
 * and an answer whose head does not fit is replaced by a 500. A handler
 * with an optional long header (a pagination Link repeating the query)
 * leaves it out when it does not fit. SIZE_MAX outside a connection. */
size_t reply_header_room(const request_t *r);
void reply_status(request_t *r, int status);                  /* no body */
/* A body is in r->out; sets status and Content-Type. */
void reply_body(request_t *r, int status, const char *content_type);
/* ProblemDetails (application/json) for p; 411/415 and other PB_HTTP statuses
 * without a body, 406 with the list of available types. */
void reply_problem(request_t *r, const problem_t *p);
/* Shorthand: reply_problem with a fresh problem. */
void reply_error(request_t *r, problem_kind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char *http_reason(int status);

/* ---- statistics (for /statistics) */
typedef struct http_stats {
    uint64_t requests;
    uint64_t by_method[7];     /* GET POST PUT PATCH DELETE HEAD OPTIONS */
    uint64_t by_class[6];      /* 1xx..5xx in [1..5] */
    uint64_t connections_open;
    uint64_t connections_total;    /* accepted since the start */
    uint64_t connections_refused;  /* beyond --maxConnections: answered 503 */
    uint64_t connections_cut;      /* cut by the guard at a deadline (408 or closed idle) */
    uint64_t access_log_dropped;   /* --accessLog lines dropped: both buffers full */
    uint64_t offloaded;            /* requests run on the --forwardThreads pool (http_set_offload) */
    uint64_t offload_queued;       /* waiting for one of its threads now */
    uint64_t offload_running;      /* on one of its threads now */
} http_stats_t;
void http_get_stats(http_stats_t *st);

/* ---- per operation (for /metrics): an operation is a route and a method;
 * latency from the arrival of the request head to the answer, in buckets of
 * these upper bounds (seconds; the last bucket is everything beyond). */
#define HTTP_LAT_BUCKETS 16
extern const double http_latency_bounds[HTTP_LAT_BUCKETS];
typedef struct http_op_stats {
    const char *route;         /* the route's pattern, "(none)" when none matched */
    const char *method;        /* "GET" ... "OPTIONS", "other" */
    uint64_t    by_class[6];   /* 1xx..5xx in [1..5] */
    uint64_t    count;
    uint64_t    buckets[HTTP_LAT_BUCKETS + 1];   /* not cumulative */
    uint64_t    sum_ns;
} http_op_stats_t;
/* fn for every operation answered at least once (summed over the threads). */
void http_foreach_op_stats(void (*fn)(void *ud, const http_op_stats_t *st), void *ud);

/* ---- URL helpers */
/* Decodes %XX in place (no '+' handling); false on a bad escape. */
bool http_url_decode(char *s);
/* Appends s percent-encoded for a query value to sb. */
void http_url_encode(sbuf_t *sb, const char *s);

#endif
