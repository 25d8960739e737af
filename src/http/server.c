/*
 * server.c - libmicrohttpd glue: connections, request state, body upload,
 * the 6.3.4 preconditions, dispatch through the router, and responses.
 *
 * libmicrohttpd runs its own thread pool (--connectionPoolSize threads, each
 * with epoll). Per connection we keep one conn_t (request_t + arena), made
 * when the connection opens and freed when it closes; after each request the
 * arena is reset, so keep-alive traffic allocates nothing but arena bumps.
 *
 * The raw URI comes from the URI log callback (before libmicrohttpd decodes
 * it): we split path and query ourselves so that %2F in an entity id stays
 * inside its path segment. The query is form-decoded, as browsers, HTTP
 * client libraries and the other brokers write it: '+' is a space, a literal
 * plus is %2B (a time zone offset, a scopeQ wildcard).
 *
 * The handler answers on a later call than the first (headers-only) one: a
 * response queued on the first call makes libmicrohttpd close the connection.
 *
 * Bounded cost (the guard, below): every connection is in a registry that a
 * reaper thread walks a few times a second. A request head must be complete
 * within --headerTimeout of the connection opening (or --requestTimeout of
 * the previous answer), its body within --bodyTimeout; past that the reaper
 * answers 408 and shuts the socket, so slow clients cannot keep the slots.
 * libmicrohttpd's own limit is a little above --maxConnections, and a
 * connection beyond ours is answered 503 at once instead of waiting in the
 * listen backlog. The body buffer grows as bytes arrive, and an idle
 * connection keeps an arena of at most HTTP_IDLE_ARENA bytes.
 *
 * Deferred requests (req_defer): the connection is suspended with
 * MHD_suspend_connection (MHD_ALLOW_SUSPEND_RESUME), so it costs no worker
 * while it waits; req_resume may come from any thread, before or after the
 * suspension (conn_t.dstate under dlock tells which), and the handler runs
 * again on libmicrohttpd's next call. The handler parses the body in situ,
 * so each run gets a fresh copy of the body as received.
 *
 * --https: libmicrohttpd speaks TLS through GnuTLS (MHD_USE_TLS); the
 * certificate comes from tls.c at each handshake (reloaded on SIGHUP);
 * everything above the socket is the same code. The guard cannot write plain
 * bytes into a TLS stream, so its answers go through libmicrohttpd
 * (tls_refuse): a connection beyond --maxConnections is let through its
 * handshake and head and answered 503; a head or body past its deadline
 * becomes PH_LATE and is answered 408 if it completes within GUARD_GRACE_MS,
 * else closed (libmicrohttpd has no call that answers a request it has not
 * read: doc/operations.md); a head too large is answered by libmicrohttpd.
 */
#include "http.h"
#include "accesslog.h"
#include "reqstats.h"
#include "router.h"
#include "tls.h"
#include "../auth/auth.h"
#include "../json/json.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* Where a connection is, for the reaper (see the guard below). */
enum {
    PH_HEAD0,     /* opened, its first head not complete yet: 408 at the deadline */
    PH_IDLE,      /* kept alive after an answer, next head not complete: closed at the deadline */
    PH_BODY,      /* head done, receiving the body: 408 at the deadline */
    PH_BUSY,      /* the request is ours (handler, answer): never cut */
    PH_OVER,      /* beyond --maxConnections: answered 503, closed at the deadline */
    PH_CUT,       /* the reaper answered and shut the socket */
    PH_LATE,      /* --https: a head or body past its deadline, answered 408 through libmicrohttpd
                   * if it still completes within GUARD_GRACE_MS, else closed */
};

/* conn_t.dstate: where a deferred request stands */
enum { DS_NONE, DS_ARMED, DS_SUSPENDED, DS_RESUMED };
/* conn_t.hstate: where a held answer stands (req_hold) */
enum { HS_NONE, HS_ARMED, HS_SUSPENDED, HS_RELEASED };

typedef struct conn {
    arena_t   *arena;
    request_t  req;
    const char *raw_uri;
    bool       started;       /* first call done */
    bool       too_large;
    bool       in_use;
    sbuf_t     body;
    size_t     body_max;      /* Content-Length: the buffer never grows past it */
    struct MHD_Connection *mhd;

    /* the guard */
    _Atomic int     phase;    /* PH_* */
    _Atomic int64_t deadline; /* guard_now() ms at which the phase ends */
    int             fd;
    struct conn    *prev, *next;
    _Atomic bool    head_known; /* setup_request is done: the reaper may read the request line and id */
    _Atomic int     owner;    /* the worker thread that reads it (worker_id), set by on_uri */
    uint8_t         hup_walks; /* the reaper's walks in a row that found its peer gone (guard_hangups) */
    char            addr[INET6_ADDRSTRLEN];  /* the client (--accessLog only) */

    /* headers read in one pass (scan_headers) */
    const char *h_clen, *h_tenant, *h_rid, *h_agent, *h_referer, *h_auth;
    const char *log_uri;      /* the request target as received (--accessLog only) */
    const char *proto;        /* HTTP/1.1 ... (--accessLog only) */
    int         n_clen, n_tenant, n_headers;
    bool        h_chunked;
    size_t      pool_used;    /* estimate of the pool the request head takes */
    pthread_mutex_t dlock;    /* guards dstate */
    int        dstate;        /* DS_*: see req_defer */
    bool       defer_called;  /* the handler called req_defer in this run (under dlock) */
    bool       rerun;         /* the handler ran before on this request */
    bool       was_deferred;  /* counted in g_deferred until the request completes */
    int        hstate;        /* HS_*: see req_hold (under dlock) */
    bool       hold_called;   /* req_hold in this request (its own thread only: no lock) */
    bool       hold_ok;       /* req_release's verdict */
    problem_t  hold_p;        /* and its problem when !hold_ok */
    int        route;         /* index of the matched route (reqstats), -1: none */
    bool       offload_called; /* route_and_run left the handler to the offload pool in this run */
    bool       on_pool;       /* the handler runs on an offload thread now */
    bool       read_forwards; /* this run: a read (GET, HEAD, a Query POST) on an HR_FORWARDS route */
    struct conn *off_next;    /* the offload queue */
    tls_cred_t *tls;          /* --https: the certificate its handshake took (tls.c), until it closes */
} conn_t;

struct http_server {
    struct MHD_Daemon  *d;
    router_t           *router;
    const http_route_t *routes;
    bool                quiesced;   /* no longer listening (http_drain) */
    MHD_socket          quiesced_fd;   /* its socket, shut down; closed after MHD_stop_daemon */
};

/* An idle connection keeps at most this much arena for its next request. */
#define HTTP_IDLE_ARENA ((size_t)64 << 10)
/* The libmicrohttpd connection pool holds the request head (a read buffer
 * of half the pool, grown when the head is larger, and a record per header
 * line) and then the answer's head. A request whose head leaves less than
 * HTTP_OUT_RESERVE of the pool is refused (431) before anything runs, so
 * every answer's head fits: the longest entity id (MODEL_MAX_URI_LEN, percent-
 * encoded in a Location header: 3 KiB) with the other headers. */
#define HTTP_POOL_SIZE    ((size_t)16 << 10)
#define HTTP_OUT_RESERVE  ((size_t)4 << 10)
#define HTTP_POOL_RECORD  64      /* pool bytes per header line (struct MHD_HTTP_Header, aligned) */
#define HTTP_POOL_SLACK   1024    /* the read buffer grows by this much (libmicrohttpd's increment) */
#define HTTP_MHD_HEAD     256     /* what libmicrohttpd adds: status line, Date, Connection, Content-Length */
#define HTTP_TYPE_RESERVE 96      /* a Content-Type header (reply_header_room) */

static struct {
    atomic_uint_fast64_t open;   /* requests are counted per thread: reqstats.c */
    atomic_uint_fast64_t total, refused, cut;
} stats;
static atomic_int g_deferred;    /* deferred requests not completed yet */
static atomic_uint_fast64_t g_offloaded;    /* requests handed to the offload pool */
static atomic_int           g_off_queued;   /* waiting for one of its threads */
static atomic_int           g_off_running;  /* on one of its threads now */
static bool       g_tls;         /* --https: the guard writes nothing to the socket */

/* ------------------------------------------------------------ the guard */

static struct {
    pthread_mutex_t lock;         /* the registry */
    conn_t         *head;
    pthread_t       thread;
    bool            running;
    _Atomic bool    stop;
    _Atomic int64_t now;          /* coarse monotonic ms, set by the reaper */
    pthread_mutex_t wake_lock;
    pthread_cond_t  wake;
} guard = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake_lock = PTHREAD_MUTEX_INITIALIZER,
           .wake = PTHREAD_COND_INITIALIZER};

#define GUARD_TICK_MS 200
/* --https: how long a late head or body may still complete to get its 408, and
 * how long a connection beyond --maxConnections has for its handshake and head
 * to get its 503 (both through libmicrohttpd: the guard cannot write into TLS) */
#define GUARD_GRACE_MS 2000
#define GUARD_OVER_TLS_MS 5000

static int64_t mono_ms(void)
{
    return cr_mono_ns() / 1000000;
}

/* The workers read the reaper's clock: a relaxed load, no system call. */
static inline int64_t guard_now(void)
{
    return atomic_load_explicit(&guard.now, memory_order_relaxed);
}

/* A generated request id: 16 hex digits from a per-thread generator
 * (xorshift64*, seeded from getrandom: threads start far apart). */
static void rid_new(char id[17])
{
    static _Thread_local uint64_t state;
    if (CR_UNLIKELY(!state)) {
        while (getrandom(&state, sizeof state, 0) != sizeof state) {}
        state |= 1;
    }
    state ^= state >> 12; state ^= state << 25; state ^= state >> 27;
    uint64_t x = state * 0x2545F4914F6CDD1DULL;
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, x >>= 4) id[i] = hex[x & 15];
    id[16] = '\0';
}

/* A complete answer written straight to the socket, for the cases where
 * libmicrohttpd has no request to answer (a slot beyond the limit, a head
 * that never completes, one too large for the pool), with its request id.
 * The socket is non-blocking and its send buffer empty, so a few hundred
 * bytes always go out. Returns the body's length. */
static size_t guard_send(int fd, int status, const char *reason, const char *extra, const char *detail,
                         const char *rid)
{
    char body[384], msg[900];
    int  bn = snprintf(body, sizeof body, "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d,"
                       "\"detail\":\"%s\"}", reason, status, detail);
    int  n = snprintf(msg, sizeof msg, "HTTP/1.1 %d %s\r\nConnection: close\r\n%sX-Request-Id: %s\r\n"
                      "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", status, reason, extra,
                      rid, bn, body);
    if (!g_tls && n > 0 && (size_t)n < sizeof msg && send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        LOG_D("http: cannot send %d to fd %d: %s", status, fd, strerror(errno));
    reqstats_record(-1, 0, status, -1);
    return bn > 0 && !g_tls ? (size_t)bn : 0;
}

/* The access-log line of an answer the guard sent itself; head: the
 * request line is known (setup_request ran), else it is written "-". */
static void guard_log(conn_t *cn, int status, const char *rid, size_t bytes, bool head)
{
    if (!accesslog_enabled()) return;
    const request_t  *r = &cn->req;
    accesslog_entry_t e = {.client = cn->addr, .status = status, .bytes = bytes, .request_id = rid, .ns = -1};
    if (head) {
        e.method = r->method_name;
        e.uri = cn->log_uri ? cn->log_uri : r->path;
        e.proto = cn->proto;
        e.referer = cn->h_referer;
        e.agent = cn->h_agent;
        e.ns = cr_mono_ns() - r->arrived_ns;
    }
    accesslog_write(&e);
}

static void guard_add(conn_t *cn)
{
    pthread_mutex_lock(&guard.lock);
    cn->prev = NULL;
    cn->next = guard.head;
    if (guard.head) guard.head->prev = cn;
    guard.head = cn;
    pthread_mutex_unlock(&guard.lock);
}

/* Called before libmicrohttpd closes the socket: after it the reaper can no
 * longer touch cn->fd (which may be reused by then). */
static void guard_remove(conn_t *cn)
{
    pthread_mutex_lock(&guard.lock);
    if (cn->prev) cn->prev->next = cn->next;
    else guard.head = cn->next;
    if (cn->next) cn->next->prev = cn->prev;
    pthread_mutex_unlock(&guard.lock);
}

/* The deadline `secs` from now; 0: none. */
static int64_t guard_after(int secs)
{
    return secs > 0 ? guard_now() + (int64_t)secs * 1000 : INT64_MAX;
}

/* Moves cn to phase `to` with a deadline `secs` from now, unless the reaper
 * took it. */
static void guard_enter(conn_t *cn, int to, int secs)
{
    int ph = atomic_load(&cn->phase);
    if (ph == PH_CUT || ph == PH_LATE) return;      /* the reaper's: its deadline stands */
    atomic_store_explicit(&cn->deadline, guard_after(secs), memory_order_relaxed);
    while (ph != PH_CUT && ph != PH_LATE && !atomic_compare_exchange_weak(&cn->phase, &ph, to)) {}
}

/* The request becomes ours: false when the reaper cut it first. */
static bool guard_claim(conn_t *cn)
{
    int ph = atomic_load(&cn->phase);
    while (ph != PH_CUT && ph != PH_OVER && ph != PH_LATE)
        if (atomic_compare_exchange_weak(&cn->phase, &ph, PH_BUSY)) return true;
    return ph == PH_BUSY;
}

/* Connections whose client has gone while the broker waits for its bytes.
 * libmicrohttpd 0.9.75 reads with edge-triggered epoll and takes a short
 * read as the socket drained: when the client's last bytes and its FIN
 * arrive together, the read gets the bytes, the FIN raises no new edge, and
 * the connection (a head or body that can now never complete, or an idle
 * keep-alive) holds its slot until its deadline. Under the registry's lock
 * (so that no fd is closed meanwhile) one poll(2) over the connections that
 * wait on their client finds those whose peer shut its side (POLLRDHUP) with
 * nothing left unread (FIONREAD 0); one found so on two walks in a row (200
 * ms apart: a request whose last bytes were read is claimed by its worker
 * long before) is shut down, which raises the event libmicrohttpd missed: it
 * reads the end and frees the slot, as it does when it sees the FIN itself.
 * Nothing is answered (libmicrohttpd answers nothing to a client that closed
 * mid-request either). Returns how many were shut. */
static bool waits_on_client(int ph)
{
    return ph == PH_HEAD0 || ph == PH_IDLE || ph == PH_BODY;
}

static int guard_hangups(void)
{
    static struct pollfd *pfd;
    static conn_t       **pcn;
    static size_t         cap;
    size_t                n = 0;
    for (conn_t *cn = guard.head; cn; cn = cn->next) {
        if (!waits_on_client(atomic_load(&cn->phase))) {
            cn->hup_walks = 0;
            continue;
        }
        if (n == cap) {
            size_t c = cap ? cap * 2 : 256;
            struct pollfd *np = realloc(pfd, c * sizeof *pfd);
            if (!np) break;
            pfd = np;
            conn_t **nc = realloc(pcn, c * sizeof *pcn);
            if (!nc) break;
            pcn = nc;
            cap = c;
        }
        pfd[n] = (struct pollfd){.fd = cn->fd, .events = POLLRDHUP};
        pcn[n++] = cn;
    }
    if (!n || poll(pfd, (nfds_t)n, 0) <= 0) {
        for (size_t i = 0; i < n; i++) pcn[i]->hup_walks = 0;
        return 0;
    }
    int shut = 0;
    for (size_t i = 0; i < n; i++) {
        conn_t *cn = pcn[i];
        int     unread = 1;
        if (!(pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) || ioctl(cn->fd, FIONREAD, &unread) != 0 ||
            unread != 0) {
            cn->hup_walks = 0;
            continue;
        }
        if (++cn->hup_walks < 2) continue;
        int ph = atomic_load(&cn->phase);
        if (waits_on_client(ph) && atomic_compare_exchange_strong(&cn->phase, &ph, PH_CUT)) {
            shutdown(cn->fd, SHUT_RDWR);
            shut++;
        }
    }
    return shut;
}

static void *guard_run(void *arg)
{
    (void)arg;
    while (!atomic_load(&guard.stop)) {
        int64_t now = mono_ms();
        atomic_store(&guard.now, now);
        int cut = 0, over = 0;
        pthread_mutex_lock(&guard.lock);
        for (conn_t *cn = guard.head; cn; cn = cn->next) {
            int ph = atomic_load(&cn->phase);
            if (ph == PH_BUSY || ph == PH_CUT) continue;
            if (now < atomic_load_explicit(&cn->deadline, memory_order_relaxed)) continue;
            if (g_tls && (ph == PH_HEAD0 || ph == PH_BODY)) {
                /* no plain bytes into TLS: the worker answers 408 if the request
                 * completes within the grace (on_request), else it is closed then */
                if (atomic_compare_exchange_strong(&cn->phase, &ph, PH_LATE)) {
                    atomic_store_explicit(&cn->deadline, now + GUARD_GRACE_MS, memory_order_relaxed);
                    cut++;
                }
                continue;
            }
            if (!atomic_compare_exchange_strong(&cn->phase, &ph, PH_CUT)) continue;
            if (ph == PH_HEAD0 || ph == PH_BODY || ph == PH_LATE) {
                /* PH_BODY: the worker is past setup_request once head_known is set, and
                 * adds only body bytes after it; the registry's lock keeps cn alive.
                 * PH_LATE (--https): nothing is sent, the 408 is counted and logged */
                bool known = atomic_load_explicit(&cn->head_known, memory_order_acquire);
                bool body = ph == PH_BODY || (ph == PH_LATE && known);
                bool head = body && known;
                char gen[17];
                const char *rid = head ? cn->req.request_id : (rid_new(gen), gen);
                size_t bytes = guard_send(cn->fd, 408, "Request Timeout", "", !body
                                          ? "the request head was not complete within --headerTimeout"
                                          : "the request body was not complete within --bodyTimeout", rid);
                guard_log(cn, 408, rid, bytes, head);
            }
            if (ph == PH_OVER) over++;
            else if (ph != PH_LATE) cut++;           /* a late one was counted when it became late */
            shutdown(cn->fd, SHUT_RDWR);   /* libmicrohttpd sees the end and frees the slot */
        }
        int gone = guard_hangups();
        pthread_mutex_unlock(&guard.lock);
        if (gone) LOG_D("http: %d connection(s) closed by their client freed (a missed end of stream)", gone);
        if (cut) atomic_fetch_add(&stats.cut, (uint64_t)cut);
        if (cut) LOG_I("http: %d connection(s) cut: request not complete within its deadline", cut);
        (void)over;

        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += GUARD_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_mutex_lock(&guard.wake_lock);
        if (!atomic_load(&guard.stop)) pthread_cond_timedwait(&guard.wake, &guard.wake_lock, &ts);
        pthread_mutex_unlock(&guard.wake_lock);
    }
    return NULL;
}

static bool guard_start(problem_t *p)
{
    atomic_store(&guard.stop, false);
    atomic_store(&guard.now, mono_ms());
    if (pthread_create(&guard.thread, NULL, guard_run, NULL) != 0)
        return problem_set(p, PB_INTERNAL_ERROR, "cannot start the connection reaper thread");
    guard.running = true;
    return true;
}

static void guard_stop(void)
{
    if (!guard.running) return;
    pthread_mutex_lock(&guard.wake_lock);
    atomic_store(&guard.stop, true);
    pthread_cond_signal(&guard.wake);
    pthread_mutex_unlock(&guard.wake_lock);
    pthread_join(guard.thread, NULL);
    guard.running = false;
}

void http_get_stats(http_stats_t *st)
{
    memset(st, 0, sizeof *st);
    reqstats_totals(st);
    st->connections_open = atomic_load(&stats.open);
    st->connections_total = atomic_load(&stats.total);
    st->connections_refused = atomic_load(&stats.refused);
    st->connections_cut = atomic_load(&stats.cut);
    st->access_log_dropped = accesslog_dropped();
    st->offloaded = atomic_load(&g_offloaded);
    st->offload_queued = (uint64_t)atomic_load(&g_off_queued);
    st->offload_running = (uint64_t)atomic_load(&g_off_running);
}

/* ------------------------------------------------------------ heads too large for libmicrohttpd */

/* A head larger than libmicrohttpd's read buffer can grow to (about 10 KiB
 * with HTTP_POOL_SIZE) never reaches setup_request: libmicrohttpd answers a
 * bare 431 of its own and says so in its log (mhd_log), on the worker thread
 * that reads the connection. A larger pool would let every head reach our
 * check, but libmicrohttpd zeroes the whole pool after every request (see
 * http_start). So the logger finds the connection instead: the one of this
 * thread whose request line was read (on_uri) and whose head is not complete.
 * It gets our ProblemDetails 431 with a request id and its access-log line,
 * written to the socket, which is then shut for writing: libmicrohttpd's own
 * answer fails to go out after it. When two connections of this thread are
 * both within a head, which one overflowed is not known, and libmicrohttpd's
 * answer stands (counted all the same). Not under --https (no plain bytes). */
static atomic_int            g_workers;
static _Thread_local int     t_worker;      /* 1.. for libmicrohttpd's worker threads, 0: unknown */

static int worker_id(void)
{
    if (CR_UNLIKELY(!t_worker)) t_worker = atomic_fetch_add(&g_workers, 1) + 1;
    return t_worker;
}

static const char *request_id(conn_t *cn);

static void head_too_large(void)
{
    int     self = worker_id();
    conn_t *hit = NULL;
    int     n = 0;
    bool    answered = false;
    pthread_mutex_lock(&guard.lock);
    for (conn_t *cn = guard.head; cn; cn = cn->next) {
        if (atomic_load_explicit(&cn->owner, memory_order_relaxed) != self) continue;
        int ph = atomic_load(&cn->phase);
        /* in_use and started are this thread's own: written only by it */
        if (cn->in_use && !cn->started && (ph == PH_HEAD0 || ph == PH_IDLE)) { hit = cn; n++; }
    }
    if (n == 1 && !g_tls) {
        int ph = atomic_load(&hit->phase);
        if ((ph == PH_HEAD0 || ph == PH_IDLE) && atomic_compare_exchange_strong(&hit->phase, &ph, PH_CUT)) {
            hit->h_rid = hit->mhd ? MHD_lookup_connection_value(hit->mhd, MHD_HEADER_KIND, "X-Request-Id") : NULL;
            const char *rid = request_id(hit);
            char        detail[160];
            snprintf(detail, sizeof detail, "the request head is too large: about %zu bytes fit, fewer with many lines",
                     HTTP_POOL_SIZE / 2 - HTTP_POOL_SLACK);
            size_t bytes = guard_send(hit->fd, 431, "Request Header Fields Too Large", "", detail, rid);
            guard_log(hit, 431, rid, bytes, false);
            shutdown(hit->fd, SHUT_WR);
            answered = true;
        }
    }
    pthread_mutex_unlock(&guard.lock);
    if (!answered) {
        reqstats_record(-1, 0, 431, -1);    /* libmicrohttpd's own answer, counted as ours are */
        LOG_D("http: a head too large answered by libmicrohttpd (%d connection(s) of this thread in a head)", n);
    }
}

/* ------------------------------------------------------------ connection */

/* The client's address into cn->addr, once per connection. */
static void conn_addr(conn_t *cn, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, cn->addr, sizeof cn->addr);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, cn->addr, sizeof cn->addr);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_t *cn = cr_xcalloc(1, sizeof *cn);
        cn->arena = arena_new(16384);
        if (!ci) { arena_free(cn->arena); free(cn); return; }
        cn->fd = ci->connect_fd;
        strcpy(cn->addr, "-");
        if (accesslog_enabled()) conn_addr(cn, c);
        pthread_mutex_init(&cn->dlock, NULL);
        *socket_ctx = cn;
        if (g_tls) {
            /* tls_retrieve finds the connection from its session: libmicrohttpd
             * 0.9.75 sets the session's pointer to the connection (for its PSK
             * callback); set here too, so that the lookup never depends on it */
            const union MHD_ConnectionInfo *ti = MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
            if (ti && ti->tls_session && gnutls_session_get_ptr(ti->tls_session) != c)
                gnutls_session_set_ptr(ti->tls_session, c);
        }
        uint64_t n = atomic_fetch_add(&stats.open, 1) + 1;
        atomic_fetch_add_explicit(&stats.total, 1, memory_order_relaxed);
        if (n > (uint64_t)cr_config.max_connections && g_tls) {
            /* the handshake and the head first: on_request answers 503 */
            atomic_store(&cn->phase, PH_OVER);
            atomic_store(&cn->deadline, guard_now() + GUARD_OVER_TLS_MS);
            atomic_fetch_add_explicit(&stats.refused, 1, memory_order_relaxed);
        } else if (n > (uint64_t)cr_config.max_connections) {
            /* beyond our limit (libmicrohttpd's is a little higher): answer
             * now, close soon; the client never waits in the backlog */
            atomic_store(&cn->phase, PH_OVER);
            atomic_store(&cn->deadline, guard_now() + 1000);
            char   rid[17];
            rid_new(rid);
            size_t bytes = guard_send(cn->fd, 503, "Service Unavailable", "Retry-After: 1\r\n",
                                      "the broker serves as many connections as --maxConnections allows; retry later",
                                      rid);
            guard_log(cn, 503, rid, bytes, false);
            atomic_fetch_add_explicit(&stats.refused, 1, memory_order_relaxed);
            shutdown(cn->fd, SHUT_WR);
            LOG_D("http: connection beyond --maxConnections %d answered 503", cr_config.max_connections);
        } else {
            atomic_store(&cn->phase, PH_HEAD0);
            atomic_store(&cn->deadline, guard_after(cr_config.header_timeout));
        }
        guard_add(cn);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_t *cn = *socket_ctx;
        if (cn) {
            guard_remove(cn);
            if (cn->tls) tls_release(&cn->tls);
            if (cn->was_deferred) atomic_fetch_sub(&g_deferred, 1);
            arena_free(cn->arena);
            pthread_mutex_destroy(&cn->dlock);
            free(cn);
            *socket_ctx = NULL;
            atomic_fetch_sub(&stats.open, 1);
        }
    }
}

static conn_t *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* tls.c's way to the connection of a handshake (on its worker thread). */
static tls_cred_t **conn_tls_slot(gnutls_session_t s)
{
    struct MHD_Connection *c = gnutls_session_get_ptr(s);
    conn_t                *cn = c ? conn_of(c) : NULL;
    return cn ? &cn->tls : NULL;
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    conn_t *cn = conn_of(c);
    if (!cn) return NULL;
    atomic_store_explicit(&cn->head_known, false, memory_order_release);
    atomic_store_explicit(&cn->owner, worker_id(), memory_order_relaxed);
    cn->mhd = c;
    if (cn->in_use) arena_reset_keep(cn->arena, HTTP_IDLE_ARENA);   /* a request that never completed */
    memset(&cn->req, 0, sizeof cn->req);
    cn->in_use = true;
    cn->started = false;
    cn->too_large = false;
    cn->rerun = false;
    cn->route = -1;
    cn->dstate = DS_NONE;
    cn->hstate = HS_NONE;
    cn->hold_called = false;
    cn->defer_called = false;
    if (cn->was_deferred) {                     /* a deferred request that never completed */
        cn->was_deferred = false;
        atomic_fetch_sub(&g_deferred, 1);
    }
    cn->raw_uri = arena_strdup(cn->arena, uri ? uri : "/");
    cn->log_uri = accesslog_enabled() ? arena_strdup(cn->arena, cn->raw_uri) : NULL;
    /* libmicrohttpd would next split the query into header records of its
     * connection pool (a few hundred parameters fill it, and the request
     * then hangs without an answer). We parse the query from our copy, so
     * the pool's copy is cut right after the '?' it has already found:
     * libmicrohttpd parses an empty query. */
    char *qm = uri ? strchr(uri, '?') : NULL;
    if (qm) qm[1] = '\0';
    return cn;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls; (void)c; (void)toe;
    conn_t *cn = *req_cls;
    if (!cn) return;
    arena_reset_keep(cn->arena, HTTP_IDLE_ARENA);
    cn->in_use = false;
    if (cn->was_deferred) {
        cn->was_deferred = false;
        atomic_fetch_sub(&g_deferred, 1);
    }
    *req_cls = NULL;
    /* the next head has the idle allowance (and at least --headerTimeout);
     * --requestTimeout 0 keeps idle connections for ever, as libmicrohttpd does */
    int idle = cr_config.request_timeout;
    if (idle && idle < cr_config.header_timeout) idle = cr_config.header_timeout;
    guard_enter(cn, PH_IDLE, idle);
}

/* ------------------------------------------------------------ parsing */

bool http_url_decode(char *s)
{
    char *w = s;
    for (char *p = s; *p; p++) {
        if (*p == '%') {
            int hi, lo;
            char a = p[1], b = a ? p[2] : 0;
            hi = (a >= '0' && a <= '9') ? a - '0' : (a >= 'a' && a <= 'f') ? a - 'a' + 10 : (a >= 'A' && a <= 'F') ? a - 'A' + 10 : -1;
            lo = (b >= '0' && b <= '9') ? b - '0' : (b >= 'a' && b <= 'f') ? b - 'a' + 10 : (b >= 'A' && b <= 'F') ? b - 'A' + 10 : -1;
            if (hi < 0 || lo < 0 || (hi | lo) == 0) return false;   /* %00 would cut the string */
            *w++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    return true;
}

static inline bool url_unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.' || c == '~' || c == ':' || c == '/';
}

/* Runs of characters kept as they are go in one sb_add (an id is usually one
 * run: the Location of every 201). */
void http_url_encode(sbuf_t *sb, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s;

    while (*p) {
        const unsigned char *run = p;
        while (*p && url_unreserved(*p))
            p++;
        if (p > run)
            sb_add(sb, (const char *)run, (size_t)(p - run));
        if (*p) {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            sb_add(sb, e, 3);
            p++;
        }
    }
}

/* A query key or value (application/x-www-form-urlencoded): '+' is a
 * space, then the percent escapes (so %2B is a plus). */
static bool form_decode(char *s)
{
    for (char *c = s; (c = strchr(c, '+')) != NULL; c++) *c = ' ';
    return http_url_decode(s);
}

/* Splits the query string into params. false: bad escape (400). */
static bool parse_query(request_t *r, char *q, problem_t *p)
{
    while (q && *q) {
        char *amp = strchr(q, '&');
        if (amp) *amp = '\0';
        if (*q) {
            char *eq = strchr(q, '=');
            if (eq) *eq = '\0';
            char *k = q, *v = eq ? eq + 1 : q + strlen(q);
            if (!form_decode(k) || !form_decode(v))
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "malformed percent-encoding (or %%00) in query parameter '%.100s'", k);
            if (r->nparams >= HTTP_MAX_PARAMS)
                return problem_set(p, PB_BAD_REQUEST_DATA, "too many query parameters (at most %d)", HTTP_MAX_PARAMS);
            for (int i = 0; i < r->nparams; i++)
                if (!strcmp(r->params[i].key, k))
                    return problem_set(p, PB_BAD_REQUEST_DATA, "query parameter '%s' given twice", k);
            r->params[r->nparams++] = (http_param_t){k, v};
        }
        q = amp ? amp + 1 : NULL;
    }
    return true;
}

/* true when the parameters of a media type (";charset=..." and others)
 * name no charset but UTF-8: JSON is UTF-8 (RFC 8259 8.1). */
static bool charset_ok(const char *params)
{
    for (const char *p = params; (p = strchr(p, ';')) != NULL;) {
        p++;
        while (*p == ' ' || *p == '\t') p++;
        if (strncasecmp(p, "charset", 7) != 0) continue;
        const char *v = p + 7;
        while (*v == ' ' || *v == '\t') v++;
        if (*v != '=') continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        bool   quoted = *v == '"';
        if (quoted) v++;
        size_t n = strcspn(v, quoted ? "\"" : "; \t");
        if (!((n == 5 && !strncasecmp(v, "utf-8", 5)) || (n == 4 && !strncasecmp(v, "utf8", 4)))) return false;
    }
    return true;
}

static ctype_t parse_ctype(const char *ct)
{
    if (!ct) return CT_NONE;
    while (*ct == ' ') ct++;
    size_t n = strcspn(ct, "; \t");
    if (CR_UNLIKELY(ct[n] != '\0') && !charset_ok(ct + n)) return CT_OTHER;
    if (n == 16 && !strncasecmp(ct, "application/json", n)) return CT_JSON;
    if (n == 19 && !strncasecmp(ct, "application/ld+json", n)) return CT_LDJSON;
    if (n == 28 && !strncasecmp(ct, "application/merge-patch+json", n)) return CT_MERGE_PATCH;
    if (n == 20 && !strncasecmp(ct, "application/geo+json", n)) return CT_GEOJSON;
    return CT_OTHER;
}

/* Accept (RFC 7231 5.3.2): media ranges with optional q; we keep the q of
 * each type we can produce. */
static void parse_accept(request_t *r)
{
    const char *a = r->accept;
    if (!a || !*a) {
        r->accept_mask = ACC_JSON | ACC_LDJSON | ACC_GEOJSON;
        r->accept_q[0] = r->accept_q[1] = r->accept_q[2] = 1000;
        return;
    }
    int best_specific[3] = {-1, -1, -1};   /* q from an exact match */
    int best_sub = -1, best_any = -1;      /* application/ * and * / * */
    while (*a) {
        while (*a == ' ' || *a == ',') a++;
        if (!*a) break;
        const char *end = strchr(a, ',');
        size_t      len = end ? (size_t)(end - a) : strlen(a);
        size_t      tl = strcspn(a, ";, \t");
        if (tl > len) tl = len;
        int q = 1000;
        const char *qp = memmem(a, len, ";q=", 3);
        if (!qp) qp = memmem(a, len, "; q=", 4);
        if (qp) {
            qp = strchr(qp, '=') + 1;
            double d = strtod(qp, NULL);
            q = d < 0 ? 0 : d > 1 ? 1000 : (int)(d * 1000 + 0.5);
        }
        if (tl == 16 && !strncasecmp(a, "application/json", tl)) best_specific[0] = q;
        else if (tl == 19 && !strncasecmp(a, "application/ld+json", tl)) best_specific[1] = q;
        else if (tl == 20 && !strncasecmp(a, "application/geo+json", tl)) best_specific[2] = q;
        else if (tl == 13 && !strncasecmp(a, "application/*", tl)) best_sub = q;
        else if (tl == 3 && !strncmp(a, "*/*", tl)) best_any = q;
        a += len;
    }
    r->accept_mask = 0;
    for (int i = 0; i < 3; i++) {
        int q = best_specific[i] >= 0 ? best_specific[i] : best_sub >= 0 ? best_sub : best_any;
        /* wildcards do not imply geo+json: a client that wants GeoJSON says so */
        if (i == 2 && best_specific[2] < 0) q = -1;
        r->accept_q[i] = q > 0 ? (uint16_t)q : 0;
        if (q > 0) r->accept_mask |= 1 << i;
    }
}

int req_accept_best(const request_t *r, int allowed)
{
    int best = 0, bq = 0;
    for (int i = 0; i < 3; i++) {
        int t = 1 << i;
        if (!(allowed & t) || !(r->accept_mask & t)) continue;
        if (r->accept_q[i] > bq) { bq = r->accept_q[i]; best = t; }
    }
    return best;
}

const char *req_param(request_t *r, const char *key)
{
    for (int i = 0; i < r->nparams; i++)
        if (!strcmp(r->params[i].key, key)) {
            r->params_used |= 1u << i;
            return r->params[i].value;
        }
    return NULL;
}

const char *req_unused_param(const request_t *r)
{
    for (int i = 0; i < r->nparams; i++)
        if (!(r->params_used & (1u << i))) return r->params[i].key;
    return NULL;
}

static const char *exec_header(const request_t *r, const char *name);
static void        exec_hold(request_t *r);
static void        exec_release(req_token_t *t, bool ok, const problem_t *p);
static void        exec_defer(request_t *r);
static bool        exec_deferred(const request_t *r);
static void        exec_resume(req_token_t *t);
/* http_exec's token is its state's address with the low bit set (a conn_t's never has it) */
#define EXEC_TOKEN(t) ((uintptr_t)(t) & 1u)

const char *req_header(request_t *r, const char *name)
{
    if (r->exec) return exec_header(r, name);
    conn_t *cn = r->priv;
    return MHD_lookup_connection_value(cn->mhd, MHD_HEADER_KIND, name);
}

/* ------------------------------------------------------------ deferral */

req_token_t *req_token(request_t *r)
{
    if (r->exec) return (req_token_t *)((uintptr_t)r->exec | 1u);
    return (req_token_t *)r->priv;
}

void req_defer(request_t *r)
{
    if (r->exec) {
        exec_defer(r);
        return;
    }
    conn_t *cn = r->priv;
    pthread_mutex_lock(&cn->dlock);
    if (cn->dstate == DS_NONE) cn->dstate = DS_ARMED;   /* DS_RESUMED: already woken */
    cn->defer_called = true;
    pthread_mutex_unlock(&cn->dlock);
}

/* Whether the handler deferred in this run: a wake-up for an earlier run
 * (DS_RESUMED set while this one runs) does not make this one deferred. */
bool req_deferred(const request_t *r)
{
    if (r->exec) return exec_deferred(r);
    conn_t *cn = r->priv;
    if (!cn) return false;
    pthread_mutex_lock(&cn->dlock);
    bool d = cn->defer_called;
    pthread_mutex_unlock(&cn->dlock);
    return d;
}

void req_resume(req_token_t *t)
{
    if (EXEC_TOKEN(t)) {
        exec_resume(t);
        return;
    }
    conn_t *cn = (conn_t *)t;
    pthread_mutex_lock(&cn->dlock);
    if (cn->dstate == DS_SUSPENDED) {
        cn->dstate = DS_NONE;
        MHD_resume_connection(cn->mhd);
    } else {
        cn->dstate = DS_RESUMED;     /* the handler has not returned yet: it runs again at once */
    }
    pthread_mutex_unlock(&cn->dlock);
}

/* After a run of the handler: true when the request waits (the connection is
 * suspended); false when it must be answered now, or run again (*again). */
static bool defer_after_run(conn_t *cn, struct MHD_Connection *c, bool *again)
{
    bool waits = false;
    *again = false;
    pthread_mutex_lock(&cn->dlock);
    if (cn->dstate == DS_ARMED) {
        MHD_suspend_connection(c);
        cn->dstate = DS_SUSPENDED;
        if (!cn->was_deferred) {
            cn->was_deferred = true;
            atomic_fetch_add(&g_deferred, 1);
        }
        waits = true;
    } else if (cn->dstate == DS_RESUMED) {
        /* woken before it returned: it runs again if it deferred in this
         * run; a late wake-up meant for an earlier run (a second download
         * it had waited for) must not run a handler that already answered,
         * and wrote, once more */
        cn->dstate = DS_NONE;
        *again = cn->defer_called;
    }
    cn->defer_called = false;
    pthread_mutex_unlock(&cn->dlock);
    return waits;
}

/* ------------------------------------------------------------ held answers */

static void (*after_handler)(request_t *r);

void http_set_after_handler(void (*fn)(request_t *r))
{
    after_handler = fn;
}

void req_hold(request_t *r)
{
    if (r->exec) {
        exec_hold(r);
        return;
    }
    conn_t *cn = r->priv;
    cn->hold_called = true;
    pthread_mutex_lock(&cn->dlock);
    if (cn->hstate == HS_NONE) cn->hstate = HS_ARMED;
    pthread_mutex_unlock(&cn->dlock);
}

void req_release(req_token_t *t, bool ok, const problem_t *p)
{
    if (EXEC_TOKEN(t)) {
        exec_release(t, ok, p);
        return;
    }
    conn_t *cn = (conn_t *)t;
    pthread_mutex_lock(&cn->dlock);
    cn->hold_ok = ok;
    if (!ok) cn->hold_p = *p;
    if (cn->hstate == HS_SUSPENDED) {
        cn->hstate = HS_RELEASED;
        MHD_resume_connection(cn->mhd);
    } else {
        cn->hstate = HS_RELEASED;    /* the handler has not returned yet: answered at once */
    }
    pthread_mutex_unlock(&cn->dlock);
}

/* After the handler's run: true when its answer is held (the connection is
 * suspended until req_release). */
static bool hold_after_run(conn_t *cn, struct MHD_Connection *c)
{
    bool waits = false;
    if (CR_LIKELY(!cn->hold_called)) return false;
    pthread_mutex_lock(&cn->dlock);
    if (cn->hstate == HS_ARMED) {
        MHD_suspend_connection(c);
        cn->hstate = HS_SUSPENDED;
        if (!cn->was_deferred) {
            cn->was_deferred = true;
            atomic_fetch_add(&g_deferred, 1);
        }
        waits = true;
    }
    pthread_mutex_unlock(&cn->dlock);
    return waits;
}

/* A released hold: the answer as built, or the release's problem. true when
 * the request had been held (its handler must not run again). */
static bool hold_apply(conn_t *cn, request_t *r)
{
    if (CR_LIKELY(!cn->hold_called)) return false;
    pthread_mutex_lock(&cn->dlock);
    bool held = cn->hstate == HS_RELEASED, ok = cn->hold_ok;
    if (held) {
        cn->hstate = HS_NONE;
        cn->hold_called = false;
    }
    pthread_mutex_unlock(&cn->dlock);
    if (held && !ok) reply_problem(r, &cn->hold_p);
    return held;
}

/* ------------------------------------------------------------ offloaded requests
 * (http_set_offload) A FIFO of suspended connections and --forwardThreads
 * threads that run their handlers. The connection is suspended before it is
 * queued, so the thread's MHD_resume_connection always finds it suspended;
 * the queue's lock and libmicrohttpd's resume order the conn_t between the
 * worker and the thread. An answered request is resumed as a released hold
 * (hold_apply sends it); one the handler deferred or held is resumed by
 * whoever holds its token, as on the worker. */
static bool (*offload_test)(request_t *r);

static struct {
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    conn_t         *head, *tail;
    bool            stop;
    pthread_t      *threads;
    int             n;
    http_server_t  *srv;
} g_off = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

void http_set_offload(bool (*test)(request_t *r))
{
    offload_test = test;
}

bool req_offload(request_t *r)
{
    if (r->exec || !r->priv) return false;
    conn_t *cn = r->priv;
    if (cn->on_pool || !cn->read_forwards) return false;   /* a write may have changed things: it waits here */
    cn->offload_called = true;     /* on_request hands it over when the handler returns */
    return true;
}

static void offload(conn_t *cn, struct MHD_Connection *c)
{
    cn->offload_called = false;
    MHD_suspend_connection(c);
    if (!cn->was_deferred) {
        cn->was_deferred = true;
        atomic_fetch_add(&g_deferred, 1);
    }
    atomic_fetch_add(&g_offloaded, 1);
    atomic_fetch_add(&g_off_queued, 1);
    pthread_mutex_lock(&g_off.lock);
    cn->off_next = NULL;
    if (g_off.tail) g_off.tail->off_next = cn;
    else g_off.head = cn;
    g_off.tail = cn;
    pthread_cond_signal(&g_off.cond);
    pthread_mutex_unlock(&g_off.lock);
}

static void dispatch(http_server_t *srv, conn_t *cn, struct MHD_Connection *c);
static void clear_answer(request_t *r);

/* One offloaded request: its handler, then where it stands. */
static void offload_run(conn_t *cn)
{
    request_t *r = &cn->req;
    cr_log_set_request(r->request_id);
    bool again, waits = false;
    do {
        clear_answer(r);
        cn->on_pool = true;
        dispatch(g_off.srv, cn, cn->mhd);
        cn->on_pool = false;
        again = false;
        pthread_mutex_lock(&cn->dlock);
        if (cn->dstate == DS_ARMED) {          /* deferred: req_resume wakes the worker, which offloads it again */
            cn->dstate = DS_SUSPENDED;
            waits = true;
        } else if (cn->dstate == DS_RESUMED) { /* woken before it returned (see defer_after_run) */
            cn->dstate = DS_NONE;
            again = cn->defer_called;
        }
        cn->defer_called = false;
        pthread_mutex_unlock(&cn->dlock);
    } while (again);
    cr_log_set_request(NULL);
    if (waits) return;
    pthread_mutex_lock(&cn->dlock);
    if (cn->hold_called && cn->hstate == HS_ARMED) {
        cn->hstate = HS_SUSPENDED;             /* req_release resumes it */
        waits = true;
    } else if (!cn->hold_called) {             /* answered: sent as built */
        cn->hold_called = true;
        cn->hstate = HS_RELEASED;
        cn->hold_ok = true;
    }                                          /* else released before the handler returned */
    pthread_mutex_unlock(&cn->dlock);
    if (!waits) MHD_resume_connection(cn->mhd);
}

static void *offload_thread(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&g_off.lock);
        while (!g_off.head && !g_off.stop) pthread_cond_wait(&g_off.cond, &g_off.lock);
        conn_t *cn = g_off.head;
        if (cn) {
            g_off.head = cn->off_next;
            if (!g_off.head) g_off.tail = NULL;
        }
        pthread_mutex_unlock(&g_off.lock);
        if (!cn) return NULL;
        atomic_fetch_sub(&g_off_queued, 1);
        atomic_fetch_add(&g_off_running, 1);
        offload_run(cn);
        atomic_fetch_sub(&g_off_running, 1);
    }
}

static bool offload_start(http_server_t *srv, problem_t *p)
{
    g_off.srv = srv;
    g_off.stop = false;
    g_off.n = 0;
    g_off.threads = cr_xcalloc((size_t)cr_config.forward_threads, sizeof *g_off.threads);
    for (int i = 0; i < cr_config.forward_threads; i++) {
        if (pthread_create(&g_off.threads[g_off.n], NULL, offload_thread, NULL) != 0) {
            problem_set(p, PB_INTERNAL_ERROR, "http: cannot start the offload threads (--forwardThreads)");
            return false;
        }
        g_off.n++;
    }
    return true;
}

/* After every offloaded request has been answered (http_stop waits for them). */
static void offload_stop(void)
{
    pthread_mutex_lock(&g_off.lock);
    g_off.stop = true;
    pthread_cond_broadcast(&g_off.cond);
    pthread_mutex_unlock(&g_off.lock);
    for (int i = 0; i < g_off.n; i++) pthread_join(g_off.threads[i], NULL);
    free(g_off.threads);
    g_off.threads = NULL;
    g_off.n = 0;
}

/* ------------------------------------------------------------ replies */

void reply_header(request_t *r, const char *name, const char *value)
{
    if (r->n_out_headers >= HTTP_MAX_OUT_HEADERS) {
        LOG_W("http: too many response headers, dropping %s", name);
        return;
    }
    r->out_headers[r->n_out_headers++] = (http_header_t){name, value};
}

size_t reply_header_room(const request_t *r)
{
    const conn_t *cn = r->priv;
    if (!cn) return SIZE_MAX;
    /* what send_reply counts, with room for the Content-Type and the
     * NGSILD-Tenant echo that come after the handler */
    size_t head = HTTP_MHD_HEAD + HTTP_TYPE_RESERVE + (r->tenant ? strlen(r->tenant) + 20 : 0) +
                  (r->request_id ? strlen(r->request_id) + 16 : 0);
    for (int i = 0; i < r->n_out_headers; i++)
        head += strlen(r->out_headers[i].name) + strlen(r->out_headers[i].value) + 4;
    if (r->n_out_headers >= HTTP_MAX_OUT_HEADERS - 1 || cn->pool_used + head >= HTTP_POOL_SIZE) return 0;
    return HTTP_POOL_SIZE - cn->pool_used - head;
}

void reply_status(request_t *r, int status)
{
    r->status = status;
    r->out_type = NULL;
    sb_clear(&r->out);
}

void reply_body(request_t *r, int status, const char *content_type)
{
    r->status = status;
    r->out_type = content_type;
}

void reply_problem(request_t *r, const problem_t *p)
{
    int status = problem_status(p);
    if (req_deferred(r)) return;   /* the answer comes from a later run */
    if (r->priv && ((conn_t *)r->priv)->offload_called) return;   /* from the run on the pool */
    if (status >= 500)   /* the broker's own trouble (503: a @context that cannot be had): one line */
        cr_log(status == 503 ? LOG_WARN : LOG_ERROR, "%s %s -> %d %s", r->method_name ? r->method_name : "?",
               r->path ? r->path : "?", status, p->detail);
    r->n_out_headers = 0;
    if (r->tenant) reply_header(r, "NGSILD-Tenant", r->tenant);
    sb_clear(&r->out);
    if (p->kind == PB_HTTP && (status == 411 || status == 415 || status == 413)) {
        reply_status(r, status);
        return;
    }
    json_writer_t w;
    jw_init(&w, &r->out);
    jw_problem(&w, p, p->kind == PB_HTTP ? http_reason(status) : NULL);
    reply_body(r, status, "application/json");
}

void reply_error(request_t *r, problem_kind_t kind, const char *fmt, ...)
{
    problem_t p = {0};
    va_list   ap;
    p.kind = kind;
    va_start(ap, fmt);
    vsnprintf(p.detail, sizeof p.detail, fmt, ap);
    va_end(ap);
    reply_problem(r, &p);
}

const char *http_reason(int status)
{
    const char *s = MHD_get_reason_phrase_for((unsigned)status);
    return s && *s ? s : "Unknown";
}

/* ------------------------------------------------------------ dispatch */

static int method_bit(const char *m)
{
    switch (m[0]) {
    case 'G': return !strcmp(m, "GET") ? HM_GET : 0;
    case 'P':
        if (!strcmp(m, "POST")) return HM_POST;
        if (!strcmp(m, "PUT")) return HM_PUT;
        if (!strcmp(m, "PATCH")) return HM_PATCH;
        return 0;
    case 'D': return !strcmp(m, "DELETE") ? HM_DELETE : 0;
    case 'H': return !strcmp(m, "HEAD") ? HM_HEAD : 0;
    case 'O': return !strcmp(m, "OPTIONS") ? HM_OPTIONS : 0;
    }
    return 0;
}

static bool valid_tenant(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > 64) return false;
    for (const char *p = t; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-'))
            return false;
    return true;
}

/* One pass over the request headers keeps what we read (a lookup each would
 * walk the list every time) and counts the headers that must not repeat. */
static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    conn_t    *cn = cls;
    request_t *r = &cn->req;
    size_t     n = strlen(key);
    cn->n_headers++;
    switch (n) {
    case 4:
        if (!strcasecmp(key, "Link")) r->link = value;
        break;
    case 6:
        if (!strcasecmp(key, "Accept")) r->accept = value;
        else if (!strcasecmp(key, "Prefer")) r->prefer = value;
        break;
    case 7:
        if (!strcasecmp(key, "Referer")) cn->h_referer = value;
        break;
    case 10:
        if (!strcasecmp(key, "User-Agent")) cn->h_agent = value;
        break;
    case 12:
        if (!strcasecmp(key, "Content-Type")) r->content_type = value;
        else if (!strcasecmp(key, "X-Request-Id")) cn->h_rid = value;
        break;
    case 13:
        if (!strcasecmp(key, "NGSILD-Tenant")) { cn->h_tenant = value; cn->n_tenant++; }
        else if (!strcasecmp(key, "Authorization")) cn->h_auth = value;
        break;
    case 14:
        if (!strcasecmp(key, "Content-Length")) { cn->h_clen = value; cn->n_clen++; }
        break;
    case 17:
        if (!strcasecmp(key, "Transfer-Encoding")) cn->h_chunked = true;
        break;
    }
    return MHD_YES;
}

/* X-Request-Id: the client's when it is 1 to 128 characters that go into a
 * header and a log line unchanged (letters, digits, - _ . : / + = @),
 * else 16 hex digits from a per-thread generator (seeded from getrandom). */
static const char *request_id(conn_t *cn)
{
    const char *v = cn->h_rid;
    if (v) {
        size_t n = 0;
        for (; v[n] && n <= 128; n++) {
            char c = v[n];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                  c == '_' || c == '.' || c == ':' || c == '/' || c == '+' || c == '=' || c == '@'))
                break;
        }
        /* a copy: the reaper reads it for a 408 of the body after libmicrohttpd may have
         * freed the header it points into */
        if (n >= 1 && n <= 128 && !v[n]) return arena_strdup(cn->arena, v);
    }
    char *id = arena_alloc(cn->arena, 17);
    rid_new(id);
    return id;
}

/* Reads the headers and the URI into r; false with p set when the request is
 * malformed before any handler runs. */
static bool setup_request(conn_t *cn, struct MHD_Connection *c, const char *method, problem_t *p)
{
    request_t *r = &cn->req;
    r->arena = cn->arena;
    r->priv = cn;
    r->arrived_ns = cr_mono_ns();
    cn->mhd = c;
    r->method_name = method;
    r->method = method_bit(method);
    sb_init(&r->out, cn->arena, 1024);

    char *uri = (char *)(cn->raw_uri ? cn->raw_uri : "/");
    char *q = strchr(uri, '?');
    if (q) *q++ = '\0';
    char *hash = q ? strchr(q, '#') : strchr(uri, '#');
    if (hash) *hash = '\0';
    r->path = uri;            /* decoded per segment by the router */

    cn->h_clen = cn->h_tenant = cn->h_rid = cn->h_agent = cn->h_referer = cn->h_auth = NULL;
    cn->n_clen = cn->n_tenant = cn->n_headers = 0;
    cn->h_chunked = false;
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, cn);
    r->request_id = request_id(cn);     /* first: every answer carries it, the refusals below too */
    if (accesslog_enabled()) {
        /* the reaper may write this request's line (a 408 for its body) after libmicrohttpd
         * reused the buffer these point into: copies in the arena */
        r->method_name = arena_strdup(cn->arena, method);
        if (cn->proto) cn->proto = arena_strdup(cn->arena, cn->proto);
        if (cn->h_referer) cn->h_referer = arena_strdup(cn->arena, cn->h_referer);
        if (cn->h_agent) cn->h_agent = arena_strdup(cn->arena, cn->h_agent);
    }
    atomic_store_explicit(&cn->head_known, true, memory_order_release);
    if (!parse_query(r, q, p)) return false;
    /* two framings, or two tenants: which one the client meant is a guess */
    if (cn->n_clen > 1 || (cn->n_clen && cn->h_chunked))
        return problem_set(p, PB_BAD_REQUEST_DATA, cn->h_chunked ? "both Content-Length and Transfer-Encoding"
                                                                 : "Content-Length given more than once");
    if (cn->n_tenant > 1) return problem_set(p, PB_BAD_REQUEST_DATA, "NGSILD-Tenant given more than once");
    const union MHD_ConnectionInfo *hs = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    size_t head = hs ? hs->header_size : 0;
    cn->pool_used = (head + HTTP_POOL_SLACK > HTTP_POOL_SIZE / 2 ? head + HTTP_POOL_SLACK : HTTP_POOL_SIZE / 2) +
                    (size_t)cn->n_headers * HTTP_POOL_RECORD;
    if (cn->pool_used > HTTP_POOL_SIZE - HTTP_OUT_RESERVE) {
        p->kind = PB_HTTP; p->status = 431;
        snprintf(p->detail, sizeof p->detail, "the request head (%zu bytes in %d lines) is too large: "
                 "about %zu bytes fit, fewer with many lines", head, cn->n_headers,
                 HTTP_POOL_SIZE / 2 - HTTP_POOL_SLACK);
        return false;
    }
    r->ctype = parse_ctype(r->content_type);
    parse_accept(r);
    const char *t = cn->h_tenant;
    if (t && *t) {
        if (!valid_tenant(t))
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "invalid NGSILD-Tenant '%.64s': 1 to 64 characters of A-Z a-z 0-9 _ -", t);
        r->tenant = t;
    }
    return true;
}

/* 6.3.4 preconditions for the matched route. */
static bool check_preconditions(request_t *r, const http_route_t *rt, problem_t *p)
{
    if (rt->flags & HR_NO_BODY_CHECKS) return true;
    bool has_body_method = r->method & (HM_POST | HM_PUT | HM_PATCH);
    if (has_body_method) {
        const conn_t *cn = r->priv;
        if (cn && !cn->h_clen) {     /* http_exec: the binding frames the body */   /* 6.3.4: a chunked body has no Content-Length either */
            p->kind = PB_HTTP; p->status = 411;
            snprintf(p->detail, sizeof p->detail, "Content-Length required");
            return false;
        }
        bool ok = r->ctype == CT_JSON || r->ctype == CT_LDJSON ||
                  (r->method == HM_PATCH && r->ctype == CT_MERGE_PATCH);
        if (!ok) {
            p->kind = PB_HTTP; p->status = 415;
            snprintf(p->detail, sizeof p->detail, "unsupported Content-Type");
            return false;
        }
    }
    if (r->method == HM_GET || r->method == HM_HEAD || (r->method == HM_POST && (rt->flags & HR_QUERY_POST))) {
        int allowed = ACC_JSON | ACC_LDJSON | ((rt->flags & HR_GEOJSON_OK) ? ACC_GEOJSON : 0);
        if (!req_accept_best(r, allowed)) {
            p->kind = PB_HTTP; p->status = 406;
            snprintf(p->detail, sizeof p->detail, "none of the media types in Accept can be produced; available: "
                     "application/json, application/ld+json%s", (rt->flags & HR_GEOJSON_OK) ? ", application/geo+json" : "");
            return false;
        }
    }
    return true;
}

static void access_line(conn_t *cn, struct MHD_Connection *c, int64_t ns)
{
    request_t *r = &cn->req;
    if (cn->addr[0] == '-') conn_addr(cn, c);     /* not known when the connection began */
    accesslog_entry_t e = {.client = cn->addr, .user = r->user, .method = r->method_name,
                           .uri = cn->log_uri ? cn->log_uri : r->path, .proto = cn->proto,
                           .referer = cn->h_referer, .agent = cn->h_agent, .request_id = r->request_id,
                           .status = r->status, .bytes = r->out.len, .ns = ns};
    accesslog_write(&e);
}

static enum MHD_Result send_reply(struct MHD_Connection *c, request_t *r)
{
    struct MHD_Response *resp;
    if (r->status == 0) r->status = 500;
    conn_t *cn = r->priv;
    size_t  head = HTTP_MHD_HEAD + (r->out_type ? strlen(r->out_type) + 16 : 0) +
                   (r->request_id ? strlen(r->request_id) + 16 : 0);
    for (int i = 0; i < r->n_out_headers; i++)
        head += strlen(r->out_headers[i].name) + strlen(r->out_headers[i].value) + 4;
    if (CR_UNLIKELY(cn && cn->pool_used + head > HTTP_POOL_SIZE)) {
        /* libmicrohttpd would close the connection without a word (the
         * ProblemDetails is logged as every 5xx is) */
        reply_error(r, PB_INTERNAL_ERROR, "the answer's headers (%zu bytes) do not fit in the connection's memory",
                    head);
    }
    if (r->out_type || r->out.len)
        resp = MHD_create_response_from_buffer(r->out.len, r->out.p, MHD_RESPMEM_PERSISTENT);
    else
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    if (r->out_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->out_type);
    for (int i = 0; i < r->n_out_headers; i++)
        MHD_add_response_header(resp, r->out_headers[i].name, r->out_headers[i].value);
    if (r->request_id) MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    int64_t ns = r->arrived_ns ? cr_mono_ns() - r->arrived_ns : -1;
    reqstats_record(cn ? cn->route : -1, r->method, r->status, ns);
    if (CR_UNLIKELY(accesslog_enabled()) && cn) access_line(cn, c, ns);
    return ret;
}

static void route_and_run(const router_t *router, request_t *r, const char *body, size_t body_len,
                          const http_route_t **matched);

/* A deferred request runs again: a clean slate for the answer. */
static void clear_answer(request_t *r)
{
    r->status = 0;
    r->out_type = NULL;
    sb_clear(&r->out);
    r->n_out_headers = 0;
    r->params_used = 0;
    r->npath = 0;
}

static const char *exec_header(const request_t *r, const char *name);

/* --auth: 401 with WWW-Authenticate (RFC 6750 3) for a missing or bad
 * token, 403 for a tenant or a write the token does not grant. A write is a
 * POST, PUT, PATCH or DELETE, but a POST that is a query. */
static bool authorized(request_t *r, const http_route_t *rt)
{
    auth_outcome_t o;
    bool write = (r->method & (HM_POST | HM_PUT | HM_PATCH | HM_DELETE)) &&
                 !(r->method == HM_POST && rt && (rt->flags & HR_QUERY_POST));
    auth_check(r->exec ? exec_header(r, "Authorization") : ((conn_t *)r->priv)->h_auth, r->tenant, write, r->arena, &o);
    r->user = o.subject;
    if (o.verdict == AUTH_OK) return true;
    problem_t p = {.kind = PB_HTTP, .status = (int)o.verdict};
    snprintf(p.detail, sizeof p.detail, "%s", o.detail);
    reply_problem(r, &p);
    if (o.verdict == AUTH_UNAUTHENTICATED)
        reply_header(r, "WWW-Authenticate",
                     o.error ? arena_printf(r->arena, "Bearer realm=\"coraine\", error=\"%s\", error_description=\"%s\"",
                                            o.error, o.detail)
                             : "Bearer realm=\"coraine\"");
    return false;
}

static void dispatch(http_server_t *srv, conn_t *cn, struct MHD_Connection *c)
{
    request_t *r = &cn->req;

    if (r->status) return;   /* an error found while the request came in */
    const http_route_t *rt = NULL;
    route_and_run(srv->router, r, cn->body.p, cn->body.len, &rt);
    if (rt) cn->route = (int)(rt - srv->routes);    /* the request's operation in the metrics */
}

/* The route, the preconditions and the handler of r (HTTP and http_exec); *matched: the route found. */
static void route_and_run(const router_t *router, request_t *r, const char *body, size_t body_len,
                          const http_route_t **matched)
{
    problem_t p = {0};
    if (!r->method) {
        p.kind = PB_HTTP; p.status = 405;
        snprintf(p.detail, sizeof p.detail, "method %s not supported", r->method_name);
        reply_problem(r, &p);
        return;
    }
    const http_route_t *rt = NULL;
    int rc = router_match(router, r, &rt);
    /* --auth: over HTTP and cor:// alike (a federation's broker sends its token in the
     * registration's contextSourceInfo, 6.3.19) */
    if (auth_on && !(rc == ROUTE_OK && (rt->flags & HR_PUBLIC)) && !authorized(r, rc == ROUTE_OK ? rt : NULL))
        return;
    if (rc == ROUTE_BAD_PATH) {
        reply_error(r, PB_BAD_REQUEST_DATA, "malformed percent-encoding (or %%00) in the path");
        return;
    }
    if (rc == ROUTE_NOT_FOUND) {
        reply_error(r, PB_RESOURCE_NOT_FOUND, "no resource at %s", r->path);
        return;
    }
    *matched = rt;
    http_handler_fn h = router_handler(rt, r->method == HM_HEAD ? HM_GET : r->method);
    if (!h) {
        char *allow = arena_alloc(r->arena, 64);
        router_allow(rt, allow, 64);
        if (r->method == HM_OPTIONS) {
            reply_status(r, 204);
            reply_header(r, "Allow", allow);
            return;
        }
        p.kind = PB_HTTP; p.status = 405;
        snprintf(p.detail, sizeof p.detail, "method %s not allowed on %s; allowed: %s", r->method_name, r->path, allow);
        reply_problem(r, &p);
        reply_header(r, "Allow", allow);
        return;
    }
    if (!check_preconditions(r, rt, &p)) {
        reply_problem(r, &p);
        return;
    }
    bool read = r->method == HM_GET || r->method == HM_HEAD || (rt->flags & HR_QUERY_POST);
    if (!r->exec) ((conn_t *)r->priv)->read_forwards = read && (rt->flags & HR_FORWARDS);
    if ((rt->flags & HR_FORWARDS) && offload_test && !r->exec && !((conn_t *)r->priv)->on_pool && !read &&
        offload_test(r)) {
        ((conn_t *)r->priv)->offload_called = true;    /* a write: on_request hands it to the pool */
        return;
    }
    /* a copy: the handler parses it in situ, and a deferred request runs again */
    r->body = body ? arena_strndup(r->arena, body, body_len) : (char *)"";
    r->body_len = body ? body_len : 0;
    h(r);
    if (!r->exec && ((conn_t *)r->priv)->offload_called) return;   /* a read handed over: answered there */
    if (r->tenant && r->status < 400) reply_header(r, "NGSILD-Tenant", r->tenant);
    if (after_handler && !(r->method & (HM_GET | HM_HEAD))) after_handler(r);
}

/* The body buffer grows with the bytes that came (doubling, capped at the
 * announced length), never sized up front from Content-Length: a client that
 * announces 1 MiB and sends nothing costs nothing. Up to HTTP_BODY_IN_ARENA
 * it lives in the arena (no malloc for the usual small bodies); beyond, it
 * moves to malloc and grows with realloc (mremap for large ones), so that a
 * large body costs about its size, not the sum of every size it grew
 * through. The arena frees it with the request (body_free). false: out of
 * memory. */
#define HTTP_BODY_IN_ARENA ((size_t)32 << 10)

static void body_free(void *arg)
{
    conn_t *cn = arg;
    free(cn->body.p);
    cn->body.p = NULL;
    cn->body.len = cn->body.cap = 0;
}

static void body_append(conn_t *cn, const char *data, size_t n)
{
    sbuf_t *b = &cn->body;
    size_t  need = b->len + n + 1;
    if (!b->p || need > b->cap) {
        size_t cap = b->p ? b->cap * 2 : 4096;
        if (cap < need) cap = need;
        if (cap > cn->body_max + 1 && need <= cn->body_max + 1) cap = cn->body_max + 1;
        char *np;
        if (cap <= HTTP_BODY_IN_ARENA) {
            np = arena_alloc(cn->arena, cap);
            if (b->len) memcpy(np, b->p, b->len);
            b->a = cn->arena;
        } else if (!b->p || b->a) {           /* leaves the arena */
            np = cr_xmalloc(cap);
            if (b->len) memcpy(np, b->p, b->len);
            arena_on_free(cn->arena, body_free, cn);
            b->a = NULL;
        } else {
            np = cr_xrealloc(b->p, cap);
        }
        b->p = np;
        b->cap = cap;
    }
    sb_add(b, data, n);   /* fits: never grows here */
}

/* --https: the guard's answers through libmicrohttpd (it cannot write into
 * the TLS stream itself): 503 for a connection beyond --maxConnections (ph
 * PH_OVER, at its head), 408 for a head or body that completed after its
 * deadline (PH_LATE; method: the head's first call, NULL: the body's last),
 * each with Connection: close. A request that never completes is closed by
 * the reaper without an answer (doc/operations.md says why). */
static enum MHD_Result tls_refuse(conn_t *cn, struct MHD_Connection *c, const char *method, int ph)
{
    if (!atomic_compare_exchange_strong(&cn->phase, &ph, PH_BUSY)) return MHD_NO;   /* the reaper closed it */
    request_t *r = &cn->req;
    if (method) {
        problem_t ignored = {0};
        setup_request(cn, c, method, &ignored);    /* the request id and the access-log fields */
    }
    problem_t p = {.kind = PB_HTTP, .status = ph == PH_OVER ? 503 : 408};
    snprintf(p.detail, sizeof p.detail, "%s", ph == PH_OVER
             ? "the broker serves as many connections as --maxConnections allows; retry later"
             : method ? "the request head was not complete within --headerTimeout"
                      : "the request body was not complete within --bodyTimeout");
    r->n_out_headers = 0;
    sb_clear(&r->out);
    json_writer_t w;
    jw_init(&w, &r->out);
    jw_problem(&w, &p, http_reason(p.status));
    reply_body(r, p.status, "application/json");
    if (ph == PH_OVER) reply_header(r, "Retry-After", "1");
    reply_header(r, "Connection", "close");
    LOG_D("http: %s answered %d through libmicrohttpd (--https)", ph == PH_OVER ? "a connection beyond --maxConnections"
          : "a late request", p.status);
    return send_reply(c, r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size,
                                  void **req_cls)
{
    (void)url;
    http_server_t *srv = cls;
    conn_t        *cn = *req_cls;
    if (!cn) return MHD_NO;

    if (!cn->started) {
        problem_t p = {0};
        cn->started = true;
        cn->body.p = NULL;
        cn->body.len = 0;
        cn->body_max = cr_config.max_body_size;
        cn->proto = version;
        /* the head is complete: the body has its own deadline */
        int ph = atomic_load(&cn->phase);
        if (g_tls && (ph == PH_OVER || ph == PH_LATE)) return tls_refuse(cn, c, method, ph);
        if (ph == PH_CUT || ph == PH_OVER) return MHD_NO;
        guard_enter(cn, PH_BODY, cr_config.body_timeout);
        if (!setup_request(cn, c, method, &p)) {
            if (p.kind == PB_HTTP && p.status == 431 && !g_tls) {
                /* the pool may have no room left for any answer's head:
                 * this one goes straight to the socket */
                if (!guard_claim(cn)) return MHD_NO;
                size_t bytes = guard_send(cn->fd, 431, "Request Header Fields Too Large", "", p.detail,
                                          cn->req.request_id);
                guard_log(cn, 431, cn->req.request_id, bytes, true);
                shutdown(cn->fd, SHUT_WR);
                return MHD_NO;
            }
            reply_problem(&cn->req, &p);
            return MHD_YES;
        }
        if (cn->h_clen) {
            unsigned long long n = strtoull(cn->h_clen, NULL, 10);
            if (n > cr_config.max_body_size) cn->too_large = true;
            else cn->body_max = (size_t)n;
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (CR_UNLIKELY(atomic_load_explicit(&cn->phase, memory_order_relaxed) == PH_LATE)) {
            *upload_size = 0;                 /* answered 408 once it is all here (--https) */
            return MHD_YES;
        }
        if (!cn->too_large) {
            if (cn->body.len + *upload_size > cr_config.max_body_size) cn->too_large = true;
            else body_append(cn, upload_data, *upload_size);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!guard_claim(cn)) {                 /* answered 408 by the reaper, or (--https) late */
        if (g_tls && atomic_load(&cn->phase) == PH_LATE) return tls_refuse(cn, c, NULL, PH_LATE);
        return MHD_NO;
    }
    request_t *r = &cn->req;
    if (cn->too_large && !r->status) {
        problem_t p = {.kind = PB_HTTP, .status = 413};
        snprintf(p.detail, sizeof p.detail, "request body larger than %zu bytes", cr_config.max_body_size);
        reply_problem(r, &p);
    }
    cr_log_set_request(r->request_id);     /* on every log line written for this request */
    if (!hold_apply(cn, r)) {               /* held: resumed by req_release, answered now */
        for (;;) {
            if (cn->rerun) clear_answer(r);
            dispatch(srv, cn, c);
            cn->rerun = true;
            if (cn->offload_called) {
                offload(cn, c);
                cr_log_set_request(NULL);
                return MHD_YES;
            }
            bool again;
            if (defer_after_run(cn, c, &again)) {
                cr_log_set_request(NULL);
                return MHD_YES;
            }
            if (!again) break;
        }
        if (hold_after_run(cn, c)) {
            cr_log_set_request(NULL);
            return MHD_YES;
        }
        hold_apply(cn, r);                  /* released before the handler returned */
    }
    enum MHD_Result ret = send_reply(c, r);
    cr_log_set_request(NULL);
    return ret;
}

/* ------------------------------------------------------------ start/stop */

/* libmicrohttpd's messages (a head too large, a connection it closed): one
 * line each, at debug (a client can cause any number of them), in our log. */
static _Atomic bool g_starting;         /* in MHD_start_daemon: its messages say why it failed */
static char g_start_err[400];

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    bool err = !strncmp(fmt, "Error processing request", 24);
    if (cr_log_level < LOG_DEBUG && !g_starting && !err) return;
    char   line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    if (err && strstr(line, "response code is 431")) head_too_large();
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    if (g_starting) {               /* the messages of a failed start, joined: the first names the cause */
        size_t k = strlen(g_start_err);
        /* cut to what is left (a precision, so that gcc sees the truncation is meant) */
        int room = (int)(sizeof g_start_err - k) - 3;
        if (room > 0) snprintf(g_start_err + k, sizeof g_start_err - k, "%s%.*s", k ? "; " : "", room, line);
    }
    if (cr_log_level >= LOG_DEBUG) cr_log(LOG_DEBUG, "libmicrohttpd: %s", line);
}

/* libmicrohttpd's internal invariants (a close() that fails with EBADF, a
 * broken epoll set): it aborts; the reason goes to the log first. */
static void mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
    (void)cls;
    LOG_E("libmicrohttpd panic at %s:%u: %s", file ? file : "?", line, reason ? reason : "?");
    abort();
}

http_server_t *http_start(const http_route_t *routes, size_t n_routes, problem_t *p)
{
    http_server_t *srv = cr_xcalloc(1, sizeof *srv);
    srv->quiesced_fd = MHD_INVALID_SOCKET;
    srv->router = router_new(routes, n_routes);
    if (!srv->router) { free(srv); problem_set(p, PB_INTERNAL_ERROR, "bad route table"); return NULL; }
    srv->routes = routes;
    reqstats_init(routes, n_routes);
    if (cr_config.access_log && !accesslog_enabled() && !accesslog_start(cr_config.access_log, p)) {
        router_free(srv->router);
        free(srv);
        return NULL;
    }

    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)cr_config.port);
    if (inet_pton(AF_INET, cr_config.bind_address, &sa.sin_addr) != 1) {
        router_free(srv->router);
        free(srv);
        problem_set(p, PB_INTERNAL_ERROR, "--bind: '%s' is not an IPv4 address", cr_config.bind_address);
        return NULL;
    }
    /* The connection memory pool holds the request line, the headers and the
     * response headers. libmicrohttpd clears the pool after every request
     * (callgrind: half of all instructions of a GET with the 32 KiB default),
     * so it is kept at 16 KiB: a request head up to HTTP_MAX_HEAD (8 KiB),
     * the rest for the answer's head.
     * libmicrohttpd's connection limit is above ours by a reserve: the
     * connections beyond --maxConnections are accepted and answered 503
     * (on_connection) instead of waiting unanswered in the listen backlog. */
    if (!guard_start(p)) {
        router_free(srv->router);
        free(srv);
        return NULL;
    }
    unsigned reserve = (unsigned)cr_config.max_connections / 8;
    if (reserve < 64) reserve = 64;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    g_tls = cr_config.https;
    if (g_tls) {
        bool ok = false;
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
            MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES)
            problem_set(p, PB_INTERNAL_ERROR, "--https: this libmicrohttpd is built without TLS or its certificate callback");
        else
            ok = tls_load(cr_config.cert, cr_config.key, "--https", p);
        if (!ok) {
            guard_stop();
            router_free(srv->router);
            free(srv);
            return NULL;
        }
        flags |= MHD_USE_TLS;
    }
    if (!offload_start(srv, p)) {
        offload_stop();
        if (g_tls) tls_unload();
        guard_stop();
        router_free(srv->router);
        free(srv);
        return NULL;
    }
    g_starting = true;
    g_start_err[0] = '\0';
    /* the TLS option comes last: without --https the list ends before it. The
     * certificate comes from tls_retrieve at each handshake (tls.c: SIGHUP) */
    tls_set_slot_fn(conn_tls_slot);
    MHD_set_panic_func(mhd_panic, NULL);
    srv->d = MHD_start_daemon(flags, (uint16_t)cr_config.port, NULL, NULL, on_request, srv,
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,   /* first: it gets every message */
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                              MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cr_config.connection_pool_size,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)cr_config.max_connections + reserve,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cr_config.request_timeout,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_POOL_SIZE,
                              MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
                              MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
                              MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                              g_tls ? MHD_OPTION_HTTPS_CERT_CALLBACK : MHD_OPTION_END, tls_retrieve,
                              MHD_OPTION_END);
    g_starting = false;
    if (!srv->d) {
        offload_stop();
        if (g_tls) tls_unload();
        guard_stop();
        router_free(srv->router);
        free(srv);
        if (g_tls && g_start_err[0])
            problem_set(p, PB_INTERNAL_ERROR, "--https on %s:%d: %s (--cert %s, --key %s)", cr_config.bind_address,
                        cr_config.port, g_start_err, cr_config.cert, cr_config.key);
        else
            problem_set(p, PB_INTERNAL_ERROR, "cannot listen on %s:%d (in use?)", cr_config.bind_address,
                        cr_config.port);
        return NULL;
    }
    return srv;
}

/* Requests the server has begun and not answered yet (a head complete, a
 * body coming in, a handler running or deferred, an answer being sent). */
static int in_flight(void)
{
    int n = 0;
    pthread_mutex_lock(&guard.lock);
    for (conn_t *cn = guard.head; cn; cn = cn->next) {
        int ph = atomic_load(&cn->phase);
        if (ph == PH_BODY || ph == PH_BUSY || ph == PH_LATE) n++;
    }
    pthread_mutex_unlock(&guard.lock);
    return n;
}

/* Stops accepting. libmicrohttpd's threads may still hold the listening
 * socket for a while (MHD_quiesce_daemon's contract): closing it here would
 * race with them and could hand its number to another file. shutdown() makes
 * the kernel stop listening now, so a new connection is refused at once, and
 * the descriptor itself is closed after MHD_stop_daemon. */
static void quiesce(http_server_t *srv)
{
    if (srv->quiesced) return;
    srv->quiesced_fd = MHD_quiesce_daemon(srv->d);
    if (srv->quiesced_fd != MHD_INVALID_SOCKET) shutdown(srv->quiesced_fd, SHUT_RDWR);
    srv->quiesced = true;
}

int http_drain(http_server_t *srv, int64_t deadline_ns)
{
    if (!srv) return 0;
    quiesce(srv);
    int n;
    while ((n = in_flight()) > 0 && cr_mono_ns() < deadline_ns)
        nanosleep(&(struct timespec){0, 5000000L}, NULL);
    return n;
}

void http_stop(http_server_t *srv)
{
    if (!srv) return;
    /* libmicrohttpd cannot stop with suspended connections: new ones are
     * refused, and deferred requests get their answer first (the work they
     * wait for is bounded by its owner, e.g. --contextTimeout). */
    quiesce(srv);
    for (int i = 0; atomic_load(&g_deferred) > 0; i++) {
        if (i == 6000) { LOG_E("http: %d deferred requests still unanswered after 60 s; stopping anyway", atomic_load(&g_deferred)); break; }
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    MHD_stop_daemon(srv->d);
    if (srv->quiesced_fd != MHD_INVALID_SOCKET) close(srv->quiesced_fd);
    offload_stop();
    if (g_tls) tls_unload();      /* every connection has closed: the last set is freed */
    guard_stop();
    accesslog_stop();
    router_free(srv->router);
    free(srv);
}

/* ------------------------------------------------------------ http_exec (cor://) */

struct http_exec {
    router_t *router;
};

/* The state of one run, in the request's arena (a late req_resume finds it
 * there until the arena is reset, as a conn_t outlives its request). */
typedef struct exec_state {
    const http_header_t *headers;
    size_t               n;
    const char          *body;
    size_t               body_len;
    pthread_mutex_t      lock;
    pthread_cond_t       cond;
    int                  dstate;   /* DS_NONE, DS_ARMED, DS_RESUMED */
    bool                 defer_called;   /* the handler called req_defer in this run */
    int                  hstate;   /* HS_NONE, HS_ARMED, HS_RELEASED (req_hold) */
    bool                 hold_ok;
    problem_t            hold_p;
} exec_state_t;

static void exec_state_free(void *arg)
{
    exec_state_t *x = arg;
    pthread_mutex_destroy(&x->lock);
    pthread_cond_destroy(&x->cond);
}

http_exec_t *http_exec_new(const http_route_t *routes, size_t n_routes)
{
    router_t *rt = router_new(routes, n_routes);
    if (!rt) return NULL;
    http_exec_t *x = cr_xcalloc(1, sizeof *x);
    x->router = rt;
    return x;
}

void http_exec_free(http_exec_t *x)
{
    if (!x) return;
    router_free(x->router);
    free(x);
}

static const char *exec_header(const request_t *r, const char *name)
{
    const exec_state_t *x = r->exec;
    for (size_t i = 0; i < x->n; i++)
        if (!strcasecmp(x->headers[i].name, name)) return x->headers[i].value;
    return NULL;
}

static void exec_defer(request_t *r)
{
    exec_state_t *x = r->exec;
    pthread_mutex_lock(&x->lock);
    if (x->dstate == DS_NONE) x->dstate = DS_ARMED;
    x->defer_called = true;
    pthread_mutex_unlock(&x->lock);
}

static bool exec_deferred(const request_t *r)
{
    exec_state_t *x = r->exec;
    pthread_mutex_lock(&x->lock);
    bool d = x->defer_called;
    pthread_mutex_unlock(&x->lock);
    return d;
}

static void exec_hold(request_t *r)
{
    exec_state_t *x = r->exec;
    pthread_mutex_lock(&x->lock);
    if (x->hstate == HS_NONE) x->hstate = HS_ARMED;
    pthread_mutex_unlock(&x->lock);
}

static void exec_release(req_token_t *t, bool ok, const problem_t *p)
{
    exec_state_t *x = (exec_state_t *)((uintptr_t)t & ~(uintptr_t)1);
    pthread_mutex_lock(&x->lock);
    x->hold_ok = ok;
    if (!ok) x->hold_p = *p;
    x->hstate = HS_RELEASED;
    pthread_cond_signal(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

static void exec_resume(req_token_t *t)
{
    exec_state_t *x = (exec_state_t *)((uintptr_t)t & ~(uintptr_t)1);
    pthread_mutex_lock(&x->lock);
    x->dstate = DS_RESUMED;
    pthread_cond_signal(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

void http_exec(const http_exec_t *ex, request_t *r, char *query, const http_header_t *headers, size_t n_headers)
{
    exec_state_t *x = arena_calloc(r->arena, sizeof *x);
    problem_t     p = {0};
    x->headers = headers;
    x->n = n_headers;
    x->body = r->body;
    x->body_len = r->body_len;
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->cond, NULL);
    arena_on_free(r->arena, exec_state_free, x);
    r->exec = x;
    r->priv = NULL;
    r->method = method_bit(r->method_name);
    r->arrived_ns = cr_mono_ns();
    sb_init(&r->out, r->arena, 1024);
    for (size_t i = 0; i < n_headers; i++) {
        const char *k = headers[i].name, *v = headers[i].value;
        if (!strcasecmp(k, "Link")) r->link = v;
        else if (!strcasecmp(k, "Accept")) r->accept = v;
        else if (!strcasecmp(k, "Prefer")) r->prefer = v;
        else if (!strcasecmp(k, "Content-Type")) r->content_type = v;
        else if (!strcasecmp(k, "NGSILD-Tenant") && *v) r->tenant = v;
    }
    r->ctype = parse_ctype(r->content_type);
    parse_accept(r);
    if (r->tenant && !valid_tenant(r->tenant)) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "invalid NGSILD-Tenant '%.64s': 1 to 64 characters of A-Z a-z 0-9 _ -",
                    r->tenant);
        r->tenant = NULL;
        reply_problem(r, &p);
        return;
    }
    char *hash = strchr(r->path, '#');
    if (hash) *hash = '\0';
    if (!parse_query(r, query, &p)) {
        reply_problem(r, &p);
        return;
    }
    for (bool rerun = false;; rerun = true) {
        if (rerun) clear_answer(r);
        const http_route_t *rt = NULL;
        route_and_run(ex->router, r, x->body, x->body_len, &rt);
        pthread_mutex_lock(&x->lock);
        while (x->dstate == DS_ARMED) pthread_cond_wait(&x->cond, &x->lock);
        /* runs again only if it deferred in this run: a late wake-up meant for an
         * earlier run does not run a handler that has answered (as over HTTP) */
        bool again = x->defer_called && x->dstate == DS_RESUMED;
        x->dstate = DS_NONE;
        x->defer_called = false;
        pthread_mutex_unlock(&x->lock);
        if (!again) break;
    }
    /* a held answer: this thread waits for its release (the store's syncer) */
    pthread_mutex_lock(&x->lock);
    while (x->hstate == HS_ARMED) pthread_cond_wait(&x->cond, &x->lock);
    bool failed = x->hstate == HS_RELEASED && !x->hold_ok;
    x->hstate = HS_NONE;
    pthread_mutex_unlock(&x->lock);
    if (failed) reply_problem(r, &x->hold_p);
    if (!r->status) r->status = 500;
}

void http_reopen_logs(void)
{
    accesslog_reopen();
}

void http_reload_tls(void)
{
    if (!g_tls) return;
    problem_t p = {0};
    if (!tls_load(cr_config.cert, cr_config.key, "SIGHUP", &p))
        LOG_E("SIGHUP: the certificate is not reloaded, the one loaded before stays in use: %s", p.detail);
}
