/*
 * cor_client.c - the cor:// client: one persistent connection per peer
 * (host:port), made on first use, checked by the egress policy on the
 * address connected, with the HELLO handshake; the requests of every thread
 * multiplexed on it, at most the peer's window in flight; answers matched
 * by request id, in any order.
 *
 * One I/O thread (epoll) connects, reads, flushes and enforces deadlines;
 * cor_submit() writes a request straight to the socket when the connection
 * is up, has room in its window and nothing queued, else queues it and
 * wakes the I/O thread. All state is under one lock (the work under it is
 * a few non-blocking system calls); each call has its own condition
 * variable, so a wait wakes only its caller.
 *
 * Failures: a connection that cannot be made fails the calls waiting for
 * it (COR_E_CONNECT) and the peer is not tried again for a backoff (100 ms,
 * doubling to 2 s; reset by a successful handshake), during which new calls
 * fail at once; a connection lost or closed by a GOAWAY fails the calls in
 * flight on it (COR_E_LOST) and the next call reconnects. A call past its
 * deadline is answered COR_E_TIMEOUT; if it was sent, its window slot stays
 * taken until the peer answers it (the peer counts it in flight until then).
 *
 * A connection whose whole window is taken by requests already timed out
 * is dropped (the peer answers nothing), and the next call reconnects.
 * A peer with nothing in flight or queued for --requestTimeout seconds
 * (HTTP's idle keep-alive) is closed and forgotten, so registrations that
 * named many endpoints once do not keep a connection and buffers each.
 */
#include "cor.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define COR_CLIENT_MAX_FRAME (((size_t)64 << 20) + COR_FIELDS_MAX + 64)  /* fwd/'s largest answer */
#define BACKOFF_MIN_MS  100
#define BACKOFF_MAX_MS  2000
#define HANDSHAKE_MS    5000
#define MAX_WINDOW      1024

enum { P_DOWN, P_CONNECTING, P_HELLO, P_UP };
enum { C_PENDING, C_SENT, C_DONE };

typedef struct peer peer_t;

struct cor_call {
    pthread_cond_t   cond;
    peer_t          *peer;
    struct cor_call *next;          /* in the peer's queue */
    char            *frame;         /* the encoded REQUEST (its id set when sent) */
    size_t           frame_len;
    int64_t          deadline;      /* mono ms */
    int              state;         /* C_* */
    bool             abandoned;     /* released unanswered: freed when it completes */
    int              err;           /* COR_OK, COR_E_* */
    char             why[200];
    uint8_t         *resp;          /* the RESPONSE frame */
    cor_frame_t      rf;            /* decoded, pointing into resp */
};

typedef struct slot {
    uint32_t    id;
    cor_call_t *call;               /* NULL: timed out, its answer still due */
} slot_t;

struct peer {
    char        host[256];
    int         port;
    int         fd;
    int         state;              /* P_* */
    int64_t     next_try;           /* mono ms: no connection before (backoff) */
    int64_t     hello_deadline;
    int         backoff;
    sbuf_t      in;                 /* malloc */
    cor_outq_t  out;
    bool        watching_out;
    uint16_t    window;
    uint32_t    max_frame;
    char        alias[256];         /* the peer's, from its HELLO */
    cor_call_t *qhead, *qtail;      /* not sent yet */
    slot_t     *slots;              /* in flight: n_slots of window */
    int         n_slots;
    uint32_t    next_id;
    int64_t     last_used;          /* mono ms of the last call submitted or answered */
    struct sockaddr_storage addr;   /* resolved (peer_resolve) */
    socklen_t   addrlen;
    bool        have_addr;
    char        resolve_err[200];
    int         down_err;           /* why the last connection could not be made (calls in the backoff) */
    char        down_why[200];
    peer_t     *next;
};

static struct {
    pthread_mutex_t lock;
    bool            running, stop;
    pthread_t       thread;
    int             ep, evfd;
    peer_t         *peers;
    char            alias[256];
} g = {.lock = PTHREAD_MUTEX_INITIALIZER, .ep = -1, .evfd = -1};

static char g_event_tag;

static int64_t mono_ms(void)
{
    return cr_mono_ns() / 1000000;
}

static void wake(void)
{
    uint64_t one = 1;
    if (write(g.evfd, &one, sizeof one) < 0 && errno != EAGAIN) LOG_W("cor: cannot wake the client: %s", strerror(errno));
}

/* ------------------------------------------------------------ calls */

static void call_free(cor_call_t *c)
{
    pthread_cond_destroy(&c->cond);
    free(c->frame);
    free(c->resp);
    free(c);
}

/* Under g.lock. */
static void complete(cor_call_t *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void complete(cor_call_t *c, int err, const char *fmt, ...)
{
    c->state = C_DONE;
    c->err = err;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, sizeof c->why, fmt, ap);
        va_end(ap);
    }
    if (err) cor_stat_add(CS_CLI_FAIL, 1);
    if (c->abandoned) call_free(c);
    else pthread_cond_signal(&c->cond);
}

static void fail_queue(peer_t *p, int err, const char *why)
{
    for (cor_call_t *c = p->qhead, *nx; c; c = nx) {
        nx = c->next;
        complete(c, err, "%s", why);
    }
    p->qhead = p->qtail = NULL;
}

/* ------------------------------------------------------------ the connection */

static void peer_watch(peer_t *p, bool out)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0), .data.ptr = p};
    epoll_ctl(g.ep, EPOLL_CTL_MOD, p->fd, &ev);
    p->watching_out = out;
}

/* The connection is gone: the calls in flight fail; those queued wait for the next one. */
static void peer_down(peer_t *p, int err, const char *why, bool failed_connect)
{
    if (p->fd >= 0) {
        epoll_ctl(g.ep, EPOLL_CTL_DEL, p->fd, NULL);
        close(p->fd);
        p->fd = -1;
    }
    for (int i = 0; i < p->n_slots; i++)
        if (p->slots[i].call) complete(p->slots[i].call, err, "%s", why);
    p->n_slots = 0;
    p->in.len = 0;
    p->out.len = p->out.off = 0;
    p->watching_out = false;
    int64_t now = mono_ms();
    if (failed_connect || p->state != P_UP) {
        fail_queue(p, COR_E_CONNECT, why);
        p->down_err = COR_E_CONNECT;
        snprintf(p->down_why, sizeof p->down_why, "%s (not tried again yet: backoff)", why);
        p->have_addr = false;         /* resolved again by the next call */
        p->next_try = now + p->backoff;
        p->backoff = p->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : p->backoff * 2;
    } else {
        p->next_try = now;     /* lost after it worked: the next call reconnects at once */
    }
    p->state = P_DOWN;
    LOG_W("cor: %s:%d: %s", p->host, p->port, why);
}

static bool peer_flush(peer_t *p)
{
    if (!cor_outq_flush(&p->out, p->fd)) return false;
    bool pending = p->out.len > 0;
    if (pending != p->watching_out) peer_watch(p, pending);
    return true;
}

/* The peer's address, resolved by the thread that submits a call (never
 * the I/O thread: a slow name server would stall every peer); kept while
 * connections to it succeed, resolved again after a failed one. */
static void peer_resolve(const char *host, int port)
{
    char            ps[16], err[200] = "";
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0) snprintf(err, sizeof err, "cannot resolve %.120s: %s", host, gai_strerror(rc));
    pthread_mutex_lock(&g.lock);
    for (peer_t *p = g.peers; p; p = p->next)       /* looked up again: the lock was let go */
        if (p->port == port && !strcasecmp(p->host, host) && !p->have_addr) {
            if (res && res->ai_addrlen <= sizeof p->addr) {
                memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
                p->addrlen = res->ai_addrlen;
                p->have_addr = true;
            } else
                snprintf(p->resolve_err, sizeof p->resolve_err, "%s", *err ? err : "no usable address");
            break;
        }
    pthread_mutex_unlock(&g.lock);
    if (res) freeaddrinfo(res);
}

static void peer_connect(peer_t *p)
{
    char why[320];
    if (!p->have_addr && !*p->resolve_err) {
        /* the backoff ran out after the call was queued (its submitter did not resolve): a
         * numeric address needs no name server, so it is read here; a host name waits for
         * the next call's submitter */
        char            ps[16];
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV}, *res = NULL;
        snprintf(ps, sizeof ps, "%d", p->port);
        if (getaddrinfo(p->host, ps, &hints, &res) == 0 && res && res->ai_addrlen <= sizeof p->addr) {
            memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
            p->addrlen = res->ai_addrlen;
            p->have_addr = true;
        }
        if (res) freeaddrinfo(res);
    }
    if (!p->have_addr) {
        peer_down(p, COR_E_CONNECT, *p->resolve_err ? p->resolve_err : "the address is not resolved", true);
        p->resolve_err[0] = '\0';
        return;
    }
    if (!egress_check_host(p->host, (struct sockaddr *)&p->addr, why, sizeof why)) {
        fail_queue(p, COR_E_REFUSED, "refused by the egress policy");
        p->down_err = COR_E_REFUSED;
        snprintf(p->down_why, sizeof p->down_why, "refused by the egress policy");
        p->next_try = mono_ms() + BACKOFF_MAX_MS;
        p->have_addr = false;
        return;
    }
    int fd = socket(p->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, sizeof why, "socket: %s", strerror(errno));
        peer_down(p, COR_E_CONNECT, why, true);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    int rc = connect(fd, (struct sockaddr *)&p->addr, p->addrlen);
    p->fd = fd;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.ptr = p};
    if ((rc != 0 && errno != EINPROGRESS) || epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        snprintf(why, sizeof why, "cannot connect: %s", strerror(errno));
        peer_down(p, COR_E_CONNECT, why, true);
        return;
    }
    p->watching_out = true;
    p->state = P_CONNECTING;
    p->hello_deadline = mono_ms() + HANDSHAKE_MS;
    cor_stat_add(CS_CLI_CONN, 1);
}

/* Sends the queued calls the window has room for. */
static void peer_pump(peer_t *p)
{
    while (p->state == P_UP && p->qhead && p->n_slots < p->window) {
        cor_call_t *c = p->qhead;
        p->qhead = c->next;
        if (!p->qhead) p->qtail = NULL;
        if (c->frame_len > p->max_frame) {
            complete(c, COR_E_TOO_BIG, "the request (%zu bytes) is larger than the peer accepts (%u)", c->frame_len,
                     p->max_frame);
            continue;
        }
        uint32_t id = ++p->next_id ? p->next_id : ++p->next_id;     /* never 0 */
        c->frame[8] = (char)(id >> 24);
        c->frame[9] = (char)(id >> 16 & 0xff);
        c->frame[10] = (char)(id >> 8 & 0xff);
        c->frame[11] = (char)(id & 0xff);
        p->slots[p->n_slots++] = (slot_t){id, c};
        c->state = C_SENT;
        cor_outq_add(&p->out, c->frame, c->frame_len);
    }
    if (p->out.len && p->fd >= 0 && !peer_flush(p)) peer_down(p, COR_E_LOST, "the connection failed while sending", false);
}

static void on_frame(peer_t *p, const uint8_t *b, size_t n)
{
    problem_t   pb = {0};
    cor_frame_t f;
    if (p->state == P_HELLO) {
        if (!cor_frame_decode(b, n, &f, &pb) || f.type != COR_HELLO) {
            if (!pb.detail[0] && f.type == COR_GOAWAY)
                snprintf(pb.detail, sizeof pb.detail, "refused the handshake: %.*s", (int)f.body_len, f.body);
            peer_down(p, COR_E_CONNECT, pb.detail[0] ? pb.detail : "the peer answered the HELLO with something else", true);
            return;
        }
        p->window = f.window > MAX_WINDOW ? MAX_WINDOW : f.window;
        p->max_frame = f.max_frame;
        snprintf(p->alias, sizeof p->alias, "%.*s", (int)f.alias_len, f.alias);
        p->state = P_UP;
        p->backoff = BACKOFF_MIN_MS;
        LOG_I("cor: connected to %s:%d (%s, window %u)", p->host, p->port, p->alias, p->window);
        peer_pump(p);
        return;
    }
    if (!cor_frame_decode(b, n, &f, &pb)) {
        peer_down(p, COR_E_PROTOCOL, pb.detail, false);
        return;
    }
    if (f.type == COR_GOAWAY) {
        char why[200];
        snprintf(why, sizeof why, "closed by the peer (%u): %.*s", f.status, (int)(f.body_len > 150 ? 150 : f.body_len),
                 f.body);
        peer_down(p, COR_E_LOST, why, false);
        return;
    }
    int i;
    for (i = 0; i < p->n_slots && p->slots[i].id != f.id; i++) {}
    if (f.type != COR_RESPONSE || i == p->n_slots) {
        peer_down(p, COR_E_PROTOCOL, "the peer sent an answer to no request in flight", false);
        return;
    }
    cor_call_t *c = p->slots[i].call;
    p->slots[i] = p->slots[--p->n_slots];
    p->last_used = mono_ms();
    if (c) {
        c->resp = cr_xmalloc(n);
        memcpy(c->resp, b, n);
        cor_frame_decode(c->resp, n, &c->rf, &pb);      /* decoded above: the same bytes */
        complete(c, COR_OK, NULL);
    }
    peer_pump(p);
}

static void peer_read(peer_t *p)
{
    for (;;) {
        if (p->in.cap - p->in.len < 16384) {
            size_t cap = p->in.cap ? p->in.cap * 2 : 65536;
            p->in.p = cr_xrealloc(p->in.p, cap);
            p->in.cap = cap;
        }
        ssize_t k = recv(p->fd, p->in.p + p->in.len, p->in.cap - p->in.len - 1, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) {
            peer_down(p, p->state == P_UP ? COR_E_LOST : COR_E_CONNECT, k == 0 ? "the peer closed the connection"
                                                                              : strerror(errno), false);
            return;
        }
        p->in.len += (size_t)k;
        size_t off = 0;
        for (;;) {
            problem_t pb = {0};
            int64_t   sz = cor_frame_size((const uint8_t *)p->in.p + off, p->in.len - off, COR_CLIENT_MAX_FRAME, &pb);
            if (sz < 0) {
                peer_down(p, COR_E_TOO_BIG, pb.detail, false);
                return;
            }
            if (!sz || (size_t)sz > p->in.len - off) break;
            int st = p->state;
            on_frame(p, (const uint8_t *)p->in.p + off, (size_t)sz);
            if (p->fd < 0 || (st != P_UP && p->state != P_UP)) return;
            off += (size_t)sz;
        }
        if (off) {
            memmove(p->in.p, p->in.p + off, p->in.len - off);
            p->in.len -= off;
        }
        if (p->in.len >= 4) {
            problem_t pb = {0};
            int64_t   sz = cor_frame_size((const uint8_t *)p->in.p, p->in.len, COR_CLIENT_MAX_FRAME, &pb);
            if (sz > 0 && (size_t)sz + 1 > p->in.cap) {
                p->in.p = cr_xrealloc(p->in.p, (size_t)sz + 1);
                p->in.cap = (size_t)sz + 1;
            }
        }
    }
}

static void on_event(peer_t *p, uint32_t ev)
{
    if (p->state == P_CONNECTING) {
        if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err) {
            char why[200];
            snprintf(why, sizeof why, "cannot connect: %s", strerror(err));
            peer_down(p, COR_E_CONNECT, why, true);
            return;
        }
        sbuf_t      sb;
        cor_frame_t h = {.type = COR_HELLO, .version = COR_VERSION, .window = COR_WINDOW,
                         .max_frame = (uint32_t)COR_CLIENT_MAX_FRAME, .alias = g.alias, .alias_len = strlen(g.alias)};
        sb_init(&sb, NULL, 128);
        cor_frame_encode(&sb, &h);
        cor_outq_add(&p->out, sb.p, sb.len);
        sb_release(&sb);
        p->state = P_HELLO;
        if (!peer_flush(p)) peer_down(p, COR_E_CONNECT, "the connection failed during the handshake", true);
        return;
    }
    if ((ev & EPOLLOUT) && !peer_flush(p)) {
        peer_down(p, COR_E_LOST, "the connection failed while sending", false);
        return;
    }
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) peer_read(p);
}

static void peer_free(peer_t *p)
{
    if (p->fd >= 0) {
        epoll_ctl(g.ep, EPOLL_CTL_DEL, p->fd, NULL);
        close(p->fd);
    }
    sb_release(&p->in);
    cor_outq_free(&p->out);
    free(p->slots);
    free(p);
}

/* Deadlines, connections to make, queues to send, idle peers; the next wake-up in ms. */
static int tick(void)
{
    int64_t now = mono_ms(), next = now + 200;
    int64_t idle_ms = (int64_t)(cr_config.request_timeout > 0 ? cr_config.request_timeout : 30) * 1000;
    for (peer_t **pp0 = &g.peers, *p; (p = *pp0);) {
        int live = 0;              /* slots whose caller still waits */
        for (int i = 0; i < p->n_slots; i++) live += p->slots[i].call != NULL;
        if (p->state == P_UP && !live && p->n_slots == p->window)
            peer_down(p, COR_E_LOST, "a window of requests unanswered past their deadlines: connection dropped", false);
        if (!p->qhead && !live && now - p->last_used > idle_ms && p->state != P_CONNECTING && p->state != P_HELLO) {
            *pp0 = p->next;
            LOG_D("cor: %s:%d idle for %lld s: closed", p->host, p->port, (long long)(idle_ms / 1000));
            peer_free(p);
            continue;
        }
        pp0 = &p->next;
        cor_call_t **pp = &p->qhead, *last = NULL;
        while (*pp) {
            cor_call_t *c = *pp;
            if (c->deadline <= now) {
                *pp = c->next;
                complete(c, COR_E_TIMEOUT, p->state == P_UP ? "no room in the window before the deadline"
                                                            : "no connection before the deadline");
                continue;
            }
            if (c->deadline < next) next = c->deadline;
            last = c;
            pp = &c->next;
        }
        p->qtail = last;
        for (int i = 0; i < p->n_slots; i++) {
            cor_call_t *c = p->slots[i].call;
            if (!c) continue;
            if (c->deadline <= now) {
                p->slots[i].call = NULL;
                complete(c, COR_E_TIMEOUT, "no answer before the deadline");
            } else if (c->deadline < next) next = c->deadline;
        }
        if ((p->state == P_CONNECTING || p->state == P_HELLO) && now >= p->hello_deadline)
            peer_down(p, COR_E_CONNECT, "no handshake from the peer", true);
        if (p->state == P_DOWN && p->qhead) {
            if (now >= p->next_try) peer_connect(p);
            else fail_queue(p, p->down_err ? p->down_err : COR_E_CONNECT, p->down_why);
        }
        if (p->state == P_UP) peer_pump(p);
    }
    return next > now ? (int)(next - now) : 0;
}

static void *io_run(void *arg)
{
    (void)arg;
    struct epoll_event evs[64];
    pthread_mutex_lock(&g.lock);
    while (!g.stop) {
        int timeout = tick();
        pthread_mutex_unlock(&g.lock);
        int n = epoll_wait(g.ep, evs, 64, timeout);
        pthread_mutex_lock(&g.lock);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &g_event_tag) {
                uint64_t v;
                if (read(g.evfd, &v, sizeof v) < 0 && errno != EAGAIN) LOG_W("cor: eventfd: %s", strerror(errno));
                continue;
            }
            peer_t *p = evs[i].data.ptr;
            if (p->fd >= 0) on_event(p, evs[i].events);
        }
    }
    pthread_mutex_unlock(&g.lock);
    return NULL;
}

/* ------------------------------------------------------------ the API */

bool cor_is_url(const char *url)
{
    return url && !strncasecmp(url, "cor://", 6);
}

/* host and port of cor://host:port/...; *rest: the path. */
static bool parse_url(const char *url, char *host, size_t hl, int *port, const char **rest)
{
    const char *s = url + 6, *e;
    if (*s == '[') {
        e = strchr(s, ']');
        if (!e) return false;
        snprintf(host, hl, "%.*s", (int)(e - s - 1), s + 1);
        e++;
    } else {
        e = s + strcspn(s, ":/?#");
        if ((size_t)(e - s) >= hl) return false;
        snprintf(host, hl, "%.*s", (int)(e - s), s);
    }
    if (!*host || *e != ':') return false;
    char *end;
    long  v = strtol(e + 1, &end, 10);
    if (end == e + 1 || v < 1 || v > 65535 || (*end && *end != '/' && *end != '?')) return false;
    *port = (int)v;
    *rest = end;
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static peer_t *peer_get(const char *host, int port)
{
    for (peer_t *p = g.peers; p; p = p->next)
        if (p->port == port && !strcasecmp(p->host, host)) return p;
    peer_t *p = cr_xcalloc(1, sizeof *p);
    snprintf(p->host, sizeof p->host, "%s", host);
    p->port = port;
    p->fd = -1;
    p->backoff = BACKOFF_MIN_MS;
    p->slots = cr_xcalloc(MAX_WINDOW, sizeof *p->slots);
    p->next = g.peers;
    g.peers = p;
    return p;
}

cor_call_t *cor_submit(const char *method, const char *url, const char *const *headers, size_t n_headers,
                       const char *body, size_t body_len, long timeout_ms, problem_t *pb)
{
    char        host[256], why[200];
    int         port;
    const char *rest;
    if (!cor_is_url(url) || !parse_url(url, host, sizeof host, &port, &rest)) {
        problem_set(pb, PB_BAD_REQUEST_DATA, "not a cor://host:port URL: %.200s", url ? url : "(none)");
        return NULL;
    }
    cor_call_t *c = cr_xcalloc(1, sizeof *c);
    pthread_cond_init(&c->cond, NULL);
    c->deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 5000);
    cor_stat_add(CS_CLI_REQ, 1);
    if (!egress_check_host(host, NULL, why, sizeof why)) {
        c->state = C_DONE;
        c->err = COR_E_REFUSED;
        snprintf(c->why, sizeof c->why, "refused by the egress policy");
        cor_stat_add(CS_CLI_FAIL, 1);
        return c;
    }
    /* the frame: the path from /ngsi-ld/ on (an endpoint's own path means nothing to a coraine) */
    const char *path = rest, *ng = strstr(rest, "/ngsi-ld/");
    size_t      qpos = strcspn(rest, "?#");
    if (ng && (size_t)(ng - rest) < qpos) path = ng;
    size_t      path_len = (size_t)(rest + qpos - path);
    const char *query = rest[qpos] == '?' ? rest + qpos + 1 : NULL;
    size_t      query_len = query ? strcspn(query, "#") : 0;
    const char *tgt;
    size_t      tgt_len;
    cor_frame_t f = {.type = COR_REQUEST};
    f.op = cor_op_of(method, path_len ? path : "/", path_len ? path_len : 1, &tgt, &tgt_len);
    char *target = NULL;
    if (f.op == COR_OP_HTTP) {
        f.fields[f.n_fields++] = (cor_field_t){COR_F_METHOD, NULL, 0, method, strlen(method)};
        f.fields[f.n_fields++] = (cor_field_t){COR_F_TARGET, NULL, 0, path_len ? path : "/", path_len ? path_len : 1};
    } else if (tgt) {
        target = cr_xmalloc(tgt_len + 1);       /* the id, decoded */
        size_t k = 0;
        for (size_t i = 0; i < tgt_len; i++) {
            int h1, h2;
            if (tgt[i] == '%' && i + 2 < tgt_len && (h1 = hexval(tgt[i + 1])) >= 0 && (h2 = hexval(tgt[i + 2])) >= 0) {
                target[k++] = (char)(h1 << 4 | h2);
                i += 2;
            } else
                target[k++] = tgt[i];
        }
        f.fields[f.n_fields++] = (cor_field_t){COR_F_TARGET, NULL, 0, target, k};
    }
    if (query && query_len) f.fields[f.n_fields++] = (cor_field_t){COR_F_QUERY, NULL, 0, query, query_len};
    uint64_t seen = 0;
    for (size_t i = 0; i < n_headers && f.n_fields < COR_MAX_FIELDS; i++) {
        const char *h = headers[i], *colon = strchr(h, ':');
        if (!colon || colon == h) continue;
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        uint8_t code = cor_field_code(h, (size_t)(colon - h));
        if (code) {
            if (seen >> code & 1) continue;
            seen |= 1ull << code;
            f.fields[f.n_fields++] = (cor_field_t){code, NULL, 0, v, strlen(v)};
        } else if (colon - h <= 255) {
            f.fields[f.n_fields++] = (cor_field_t){COR_F_NAMED, h, (size_t)(colon - h), v, strlen(v)};
        }
    }
    f.body = body;
    f.body_len = body ? body_len : 0;
    sbuf_t sb;
    sb_init(&sb, NULL, COR_HEAD + 256 + f.body_len);
    bool ok = cor_frame_encode(&sb, &f);
    free(target);
    if (!ok) {
        sb_release(&sb);
        c->state = C_DONE;
        c->err = COR_E_TOO_BIG;
        snprintf(c->why, sizeof c->why, "the request does not fit a cor:// frame (a header of 64 KiB or more)");
        cor_stat_add(CS_CLI_FAIL, 1);
        return c;
    }
    c->frame = sb.p;
    c->frame_len = sb.len;

    pthread_mutex_lock(&g.lock);
    if (g.stop || !g.running) {
        complete(c, COR_E_LOST, "the broker is stopping");
        pthread_mutex_unlock(&g.lock);
        return c;
    }
    peer_t *p = peer_get(host, port);
    if (!p->have_addr && p->state == P_DOWN && mono_ms() >= p->next_try) {
        pthread_mutex_unlock(&g.lock);
        peer_resolve(host, port);
        pthread_mutex_lock(&g.lock);
        if (g.stop || !g.running) {
            complete(c, COR_E_LOST, "the broker is stopping");
            pthread_mutex_unlock(&g.lock);
            return c;
        }
        p = peer_get(host, port);     /* the same, or made anew if the idle reaper took it meanwhile */
    }
    p->last_used = mono_ms();
    c->peer = p;
    c->state = C_PENDING;
    if (p->qtail) p->qtail->next = c;
    else p->qhead = c;
    p->qtail = c;
    bool sent_here = false;
    if (p->state == P_UP && p->qhead == c && p->n_slots < p->window && !p->out.len) {
        peer_pump(p);          /* straight to the socket */
        sent_here = true;
    }
    pthread_mutex_unlock(&g.lock);
    if (!sent_here) wake();
    return c;
}

int cor_wait(cor_call_t *c, int *status, const char **body, size_t *body_len, const char **why)
{
    pthread_mutex_lock(&g.lock);
    while (c->state != C_DONE) pthread_cond_wait(&c->cond, &g.lock);
    pthread_mutex_unlock(&g.lock);
    *status = c->err ? 0 : c->rf.status;
    *body = c->err ? NULL : c->rf.body;
    *body_len = c->err ? 0 : c->rf.body_len;
    *why = c->why;
    return c->err;
}

const char *cor_header(cor_call_t *c, const char *name, size_t *len)
{
    *len = 0;
    if (c->err || c->state != C_DONE) return NULL;
    size_t  nl = strlen(name);
    uint8_t code = cor_field_code(name, nl);
    for (size_t i = 0; i < c->rf.n_fields; i++) {
        const cor_field_t *x = &c->rf.fields[i];
        if (code ? x->code == code : x->code == COR_F_NAMED && x->name_len == nl && !strncasecmp(x->name, name, nl)) {
            *len = x->len;
            return x->value;
        }
    }
    return NULL;
}

void cor_release(cor_call_t *c)
{
    if (!c) return;
    pthread_mutex_lock(&g.lock);
    bool done = c->state == C_DONE;
    if (!done) c->abandoned = true;
    pthread_mutex_unlock(&g.lock);
    if (done) call_free(c);
}

/* ------------------------------------------------------------ start/stop */

bool cor_client_start(const char *alias, problem_t *pb)
{
    snprintf(g.alias, sizeof g.alias, "%s", alias ? alias : "");
    if ((g.ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || (g.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        return problem_set(pb, PB_INTERNAL_ERROR, "cor: epoll: %s", strerror(errno));
    struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &g_event_tag};
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, g.evfd, &ee) != 0) return problem_set(pb, PB_INTERNAL_ERROR, "cor: epoll: %s", strerror(errno));
    pthread_mutex_lock(&g.lock);
    g.stop = false;
    g.running = true;
    pthread_mutex_unlock(&g.lock);
    if (pthread_create(&g.thread, NULL, io_run, NULL) != 0) {
        g.running = false;
        return problem_set(pb, PB_INTERNAL_ERROR, "cor: cannot start the client thread");
    }
    return true;
}

void cor_client_stop(void)
{
    if (g.running) {
        pthread_mutex_lock(&g.lock);
        g.stop = true;
        pthread_mutex_unlock(&g.lock);
        wake();
        pthread_join(g.thread, NULL);
    }
    pthread_mutex_lock(&g.lock);
    g.running = false;
    for (peer_t *p = g.peers, *nx; p; p = nx) {
        nx = p->next;
        for (int i = 0; i < p->n_slots; i++)
            if (p->slots[i].call) complete(p->slots[i].call, COR_E_LOST, "the broker is stopping");
        fail_queue(p, COR_E_LOST, "the broker is stopping");
        peer_free(p);
    }
    g.peers = NULL;
    pthread_mutex_unlock(&g.lock);
    if (g.ep >= 0) close(g.ep);
    if (g.evfd >= 0) close(g.evfd);
    g.ep = g.evfd = -1;
}
