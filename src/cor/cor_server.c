/*
 * cor_server.c - the cor:// listener (--corPort): one thread with epoll
 * accepts connections and reads their frames; a pool of workers
 * (--connectionPoolSize) runs each request through the HTTP API's dispatch
 * (http_exec) and writes its RESPONSE as soon as it is done, so the answers
 * of one connection leave in the order they finish.
 *
 * A connection: its first frame must be a HELLO (answered with ours:
 * version, window, largest frame, alias); then REQUESTs only, at most
 * COR_WINDOW in flight, each with an id not in flight. Anything else (a
 * malformed frame, a frame beyond the limits, a window exceeded) is a
 * protocol error: a GOAWAY with a ProblemDetails, and the connection is
 * closed; the other connections and the broker go on.
 *
 * Bounded cost: a connection must send its HELLO within --headerTimeout
 * seconds and each frame, once begun, within --bodyTimeout (a GOAWAY 408
 * beyond, as HTTP answers 408), so idle half-made connections cannot hold
 * the --maxConnections slots; a connection past its handshake with no
 * frame in progress is kept (persistent by design; TCP keepalive is on).
 *
 * Lifetimes: a connection is referenced by the listener (until it closes
 * it) and by each of its requests in a worker; its socket is closed with
 * the last reference, so a worker never writes to a reused descriptor.
 * Writes: a worker sends its answer directly when nothing is queued before
 * it, else appends it to the connection's output, which the listener
 * flushes on EPOLLOUT.
 */
#include "cor.h"
#include "../json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct sconn {
    int             fd;
    int             refs;           /* __atomic */
    /* the listener's */
    sbuf_t          in;             /* bytes read, not yet framed (malloc) */
    bool            hello;          /* the handshake is done */
    uint32_t        peer_max;       /* the peer's largest frame */
    char            peer[256];      /* its alias, for the log */
    int64_t         deadline;       /* mono ms by which the HELLO or the frame begun must be in; 0: none */
    struct sconn   *prev, *next;
    /* under lock */
    pthread_mutex_t lock;
    cor_outq_t      out;            /* bytes to send */
    bool            closing;        /* no more answers; closed when out is flushed */
    bool            watching_out;   /* EPOLLOUT armed */
    uint32_t        ids[COR_WINDOW];
    int             n_ids;
} sconn_t;

typedef struct job {
    struct job *next;
    sconn_t    *c;
    size_t      len;
    uint8_t     bytes[];            /* the REQUEST frame */
} job_t;

static struct {
    bool            running;
    int             lfd, ep, evfd;
    pthread_t       listener;
    pthread_t      *workers;
    int             n_workers;
    http_exec_t    *exec;
    char            alias[256];
    size_t          max_frame;
    sconn_t        *conns;
    int             n_conns;
    _Atomic bool    stop;
    pthread_mutex_t qlock;
    pthread_cond_t  qcond;
    job_t          *qhead, *qtail;
    bool            qstop;
} g = {.lfd = -1, .ep = -1, .evfd = -1, .qlock = PTHREAD_MUTEX_INITIALIZER, .qcond = PTHREAD_COND_INITIALIZER};

static char g_listen_tag, g_event_tag;   /* epoll data of the listening socket and the eventfd */

static int64_t mono_ms(void)
{
    return cr_mono_ns() / 1000000;
}

static int64_t deadline_after(int secs)
{
    return secs > 0 ? mono_ms() + (int64_t)secs * 1000 : 0;
}

/* ------------------------------------------------------------ connections */

static void conn_unref(sconn_t *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL)) return;
    close(c->fd);
    sb_release(&c->in);
    cor_outq_free(&c->out);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Under c->lock: EPOLLOUT while bytes wait; no more reading once closing. */
static void watch(sconn_t *c, bool out)
{
    struct epoll_event ev = {.events = (c->closing ? 0 : EPOLLIN | EPOLLRDHUP) | (out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &ev);   /* ENOENT: the listener has let it go */
    c->watching_out = out;
}

/* Answers a peer has not read past this are not kept: its connection is cut. */
#define COR_OUT_MAX ((size_t)256 << 20)

/* From any thread: the frame goes out now or after those queued. */
static void conn_send(sconn_t *c, const char *p, size_t n, bool last)
{
    pthread_mutex_lock(&c->lock);
    if (!c->closing && c->out.len + n > COR_OUT_MAX) {
        LOG_D("cor: %s reads nothing of %zu bytes of answers: cut", *c->peer ? c->peer : "a peer", c->out.len);
        c->closing = true;            /* the listener sees the hang-up and closes it */
        c->out.len = c->out.off = 0;
        shutdown(c->fd, SHUT_RDWR);
    }
    if (!c->closing) {
        cor_outq_add(&c->out, p, n);
        if (!cor_outq_flush(&c->out, c->fd)) c->out.off = c->out.len = 0;
        if (last) c->closing = true;
        bool pending = c->out.len > 0;
        if (pending != c->watching_out || last) watch(c, pending);
    }
    pthread_mutex_unlock(&c->lock);
}

/* The listener lets c go: no more events, the socket shut (the last reference closes it). */
static void conn_close(sconn_t *c)
{
    epoll_ctl(g.ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->prev) c->prev->next = c->next;
    else g.conns = c->next;
    if (c->next) c->next->prev = c->prev;
    g.n_conns--;
    pthread_mutex_lock(&c->lock);
    c->closing = true;
    pthread_mutex_unlock(&c->lock);
    /* what the peer sent after the error is read and dropped, so that the
     * close does not reset the connection before it reads the GOAWAY */
    char junk[4096];
    while (recv(c->fd, junk, sizeof junk, MSG_DONTWAIT) > 0) {}
    shutdown(c->fd, SHUT_RDWR);
    conn_unref(c);
}

/* A GOAWAY with a ProblemDetails (status and detail from p), then the connection closes after it. */
static void send_goaway(sconn_t *c, const problem_t *p)
{
    sbuf_t        body, fr;
    json_writer_t w;
    sb_init(&body, NULL, 512);
    jw_init(&w, &body);
    jw_problem(&w, p, p->kind == PB_HTTP ? http_reason(problem_status(p)) : NULL);
    cor_field_t ct = {.code = COR_F_CONTENT_TYPE, .value = "application/json", .len = 16};
    cor_frame_t f = {.type = COR_GOAWAY, .status = (uint16_t)problem_status(p), .n_fields = 1, .body = body.p,
                     .body_len = body.len};
    f.fields[0] = ct;
    sb_init(&fr, NULL, body.len + 64);
    if (cor_frame_encode(&fr, &f)) conn_send(c, fr.p, fr.len, true);
    sb_release(&fr);
    sb_release(&body);
}

static void protocol_error(sconn_t *c, const problem_t *p)
{
    /* at debug, as libmicrohttpd's own complaints: a client can cause any
     * number of them (/statistics counts them: distributed.cor.protocolErrors) */
    LOG_D("cor: closing the connection from %s: %s", *c->peer ? c->peer : "a peer before its HELLO", p->detail);
    cor_stat_add(CS_SRV_ERR, 1);
    send_goaway(c, p);
    pthread_mutex_lock(&c->lock);
    bool flushed = c->out.len == 0;
    pthread_mutex_unlock(&c->lock);
    if (flushed) conn_close(c);    /* else on EPOLLOUT once the GOAWAY is out, or at the deadline */
    else c->deadline = mono_ms() + (cr_config.body_timeout > 0 ? cr_config.body_timeout : 10) * 1000;
}

/* ------------------------------------------------------------ frames in */

static void enqueue(job_t *j)
{
    pthread_mutex_lock(&g.qlock);
    j->next = NULL;
    if (g.qtail) g.qtail->next = j;
    else g.qhead = j;
    g.qtail = j;
    pthread_cond_signal(&g.qcond);
    pthread_mutex_unlock(&g.qlock);
}

/* One whole frame from c; false when the connection was closed. */
static bool on_frame(sconn_t *c, const uint8_t *b, size_t n)
{
    problem_t   p = {0};
    cor_frame_t f;
    if (!c->hello) {
        if (!cor_frame_decode(b, n, &f, &p)) goto bad;
        if (f.type != COR_HELLO) {
            problem_set(&p, PB_BAD_REQUEST_DATA, "cor: the first frame must be a HELLO");
            goto bad;
        }
        snprintf(c->peer, sizeof c->peer, "%.*s", (int)f.alias_len, f.alias);
        c->peer_max = f.max_frame;
        cor_frame_t h = {.type = COR_HELLO, .version = f.version < COR_VERSION ? f.version : COR_VERSION,
                         .window = COR_WINDOW, .max_frame = (uint32_t)g.max_frame, .alias = g.alias,
                         .alias_len = strlen(g.alias)};
        sbuf_t sb;
        sb_init(&sb, NULL, 128);
        cor_frame_encode(&sb, &h);
        conn_send(c, sb.p, sb.len, false);
        sb_release(&sb);
        c->hello = true;
        c->deadline = 0;
        return true;
    }
    job_t *j = cr_xmalloc(sizeof *j + n);
    memcpy(j->bytes, b, n);
    j->len = n;
    if (!cor_frame_decode(j->bytes, n, &f, &p)) {
        free(j);
        goto bad;
    }
    if (f.type != COR_REQUEST) {
        free(j);
        problem_set(&p, PB_BAD_REQUEST_DATA, "cor: a client sends REQUEST frames only after the HELLO (type %u)", f.type);
        goto bad;
    }
    pthread_mutex_lock(&c->lock);
    bool dup = false;
    for (int i = 0; i < c->n_ids && !dup; i++) dup = c->ids[i] == f.id;
    bool full = c->n_ids >= COR_WINDOW;
    if (!dup && !full) c->ids[c->n_ids++] = f.id;
    pthread_mutex_unlock(&c->lock);
    if (dup || full) {
        free(j);
        problem_set(&p, PB_BAD_REQUEST_DATA, dup ? "cor: request id %u is already in flight"
                                                 : "cor: more than %d requests in flight (the window of the HELLO)",
                    dup ? f.id : COR_WINDOW);
        goto bad;
    }
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    j->c = c;
    cor_stat_add(CS_SRV_REQ, 1);
    enqueue(j);
    return true;
bad:
    protocol_error(c, &p);
    return false;
}

/* Reads what c has; frames it. */
static void on_readable(sconn_t *c)
{
    for (;;) {
        if (c->in.cap - c->in.len < 16384) {
            size_t cap = c->in.cap ? c->in.cap * 2 : 65536;
            c->in.p = cr_xrealloc(c->in.p, cap);
            c->in.cap = cap;
        }
        ssize_t k = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len - 1, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) {                 /* the peer closed (or the socket failed) */
            conn_close(c);
            return;
        }
        c->in.len += (size_t)k;
        size_t off = 0;
        for (;;) {
            problem_t p = {0};
            int64_t   sz = cor_frame_size((const uint8_t *)c->in.p + off, c->in.len - off, g.max_frame, &p);
            if (sz < 0) {
                protocol_error(c, &p);
                return;
            }
            if (!sz || (size_t)sz > c->in.len - off) break;
            if (!on_frame(c, (const uint8_t *)c->in.p + off, (size_t)sz)) return;
            off += (size_t)sz;
        }
        if (off) {
            memmove(c->in.p, c->in.p + off, c->in.len - off);
            c->in.len -= off;
        }
        if (c->hello) {        /* a frame begun has --bodyTimeout to arrive whole */
            if (!c->in.len) c->deadline = 0;
            else if (off || !c->deadline) c->deadline = deadline_after(cr_config.body_timeout);
        }
        /* a large frame in progress: room for all of it at once */
        if (c->in.len >= 4) {
            problem_t p = {0};
            int64_t   sz = cor_frame_size((const uint8_t *)c->in.p, c->in.len, g.max_frame, &p);
            if (sz > 0 && (size_t)sz + 1 > c->in.cap) {
                c->in.p = cr_xrealloc(c->in.p, (size_t)sz + 1);
                c->in.cap = (size_t)sz + 1;
            }
        }
    }
}

/* Connections past their deadline: a GOAWAY 408 each. */
static void reap(void)
{
    int64_t now = mono_ms();
    for (sconn_t *c = g.conns, *nx; c; c = nx) {
        nx = c->next;
        pthread_mutex_lock(&c->lock);
        bool closing = c->closing;
        pthread_mutex_unlock(&c->lock);
        if (!c->deadline || now < c->deadline) continue;
        if (closing) {                 /* its GOAWAY never left: the peer reads nothing */
            conn_close(c);
            continue;
        }
        problem_t p = {.kind = PB_HTTP, .status = 408};
        snprintf(p.detail, sizeof p.detail, c->hello ? "cor: a frame not complete within --bodyTimeout (%d s)"
                                                     : "cor: no HELLO within --headerTimeout (%d s)",
                 c->hello ? cr_config.body_timeout : cr_config.header_timeout);
        c->deadline = 0;
        protocol_error(c, &p);
    }
}

static void on_accept(void)
{
    for (;;) {
        int fd = accept4(g.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) LOG_W("cor: accept: %s", strerror(errno));
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        sconn_t *c = cr_xcalloc(1, sizeof *c);
        c->fd = fd;
        c->refs = 1;
        c->deadline = deadline_after(cr_config.header_timeout);
        pthread_mutex_init(&c->lock, NULL);
        c->next = g.conns;
        if (g.conns) g.conns->prev = c;
        g.conns = c;
        g.n_conns++;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            conn_close(c);
            continue;
        }
        cor_stat_add(CS_SRV_CONN, 1);
        if (g.n_conns > cr_config.max_connections) {
            problem_t p = {.kind = PB_HTTP, .status = 503};
            snprintf(p.detail, sizeof p.detail, "cor: more than --maxConnections (%d) connections",
                     cr_config.max_connections);
            protocol_error(c, &p);
        }
    }
}

static void *listener_run(void *arg)
{
    (void)arg;
    struct epoll_event evs[64];
    int64_t            next_reap = mono_ms() + 250;
    while (!atomic_load(&g.stop)) {
        int n = epoll_wait(g.ep, evs, 64, 250);
        if (mono_ms() >= next_reap) {
            reap();
            next_reap = mono_ms() + 250;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            LOG_E("cor: epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            void *d = evs[i].data.ptr;
            if (d == &g_listen_tag) {
                on_accept();
                continue;
            }
            if (d == &g_event_tag) continue;   /* the stop flag is read above */
            sconn_t *c = d;
            if (evs[i].events & EPOLLOUT) {
                pthread_mutex_lock(&c->lock);
                bool ok = cor_outq_flush(&c->out, c->fd), done = c->out.len == 0, closing = c->closing;
                if (ok && done) watch(c, false);
                pthread_mutex_unlock(&c->lock);
                if (!ok || (done && closing)) {
                    conn_close(c);
                    continue;
                }
            }
            if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                pthread_mutex_lock(&c->lock);
                bool closing = c->closing;
                pthread_mutex_unlock(&c->lock);
                if (!closing) on_readable(c);
                else if (evs[i].events & (EPOLLHUP | EPOLLERR)) conn_close(c);   /* its GOAWAY cannot leave */
            }
        }
    }
    while (g.conns) {           /* a GOAWAY 503 to each: the peers reconnect to the next instance */
        sconn_t  *c = g.conns;
        problem_t p = {.kind = PB_HTTP, .status = 503};
        snprintf(p.detail, sizeof p.detail, "cor: the broker is stopping");
        if (c->hello) send_goaway(c, &p);
        conn_close(c);
    }
    return NULL;
}

/* ------------------------------------------------------------ the workers */

static void pct_encode_segment(sbuf_t *sb, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
            c == '_' || c == '~' || c == ':')
            sb_addc(sb, (char)c);
        else {
            sb_addc(sb, '%');
            sb_addc(sb, hex[c >> 4]);
            sb_addc(sb, hex[c & 15]);
        }
    }
}

/* The request of frame f into r and headers; false with p set (answered as a RESPONSE). */
static bool build_request(const cor_frame_t *f, request_t *r, char **query, http_header_t *h, size_t *nh,
                          problem_t *p)
{
    arena_t    *a = r->arena;
    const char *target = NULL, *method = NULL;
    size_t      target_len = 0;
    *query = NULL;
    *nh = 0;
    for (size_t i = 0; i < f->n_fields; i++) {
        const cor_field_t *x = &f->fields[i];
        switch (x->code) {
        case COR_F_TARGET: target = x->value; target_len = x->len; break;
        case COR_F_QUERY: *query = arena_strndup(a, x->value, x->len); break;
        case COR_F_METHOD: method = arena_strndup(a, x->value, x->len); break;
        case COR_F_NAMED:
            h[(*nh)++] = (http_header_t){arena_strndup(a, x->name, x->name_len), arena_strndup(a, x->value, x->len)};
            break;
        default: {
            const char *name = cor_field_header(x->code);
            if (name) h[(*nh)++] = (http_header_t){name, arena_strndup(a, x->value, x->len)};
        }
        }
    }
    if (f->op == COR_OP_HTTP) {
        if (!method || !target || !target_len || target[0] != '/')
            return problem_set(p, PB_BAD_REQUEST_DATA, "cor: operation HTTP needs a method and a path from '/'");
        r->method_name = method;
        r->path = arena_strndup(a, target, target_len);
        return true;
    }
    const char *m = NULL, *pre = NULL, *suf = NULL;   /* set on every path; -flto cannot see it */
    bool        tgt;
    cor_op_route(f->op, &m, &pre, &tgt, &suf);     /* known: the codec checked it */
    if (tgt && !target_len) return problem_set(p, PB_BAD_REQUEST_DATA, "cor: operation %u needs a target (the entity id)", f->op);
    if (!tgt && target) return problem_set(p, PB_BAD_REQUEST_DATA, "cor: operation %u takes no target", f->op);
    sbuf_t path;
    sb_init(&path, a, 128 + target_len * 3);
    sb_adds(&path, pre);
    if (tgt) pct_encode_segment(&path, target, target_len);
    sb_adds(&path, suf);
    r->method_name = m;
    r->path = path.p;
    return true;
}

/* The RESPONSE to frame f: r's answer, or the problem p. */
static void answer(sconn_t *c, uint32_t id, request_t *r, const problem_t *p, sbuf_t *fr)
{
    cor_frame_t o = {.type = COR_RESPONSE, .id = id};
    if (p) {
        reply_problem(r, p);
    }
    o.status = (uint16_t)r->status;
    if (r->out_type) o.fields[o.n_fields++] = (cor_field_t){COR_F_CONTENT_TYPE, NULL, 0, r->out_type, strlen(r->out_type)};
    for (int i = 0; i < r->n_out_headers && o.n_fields < COR_MAX_FIELDS; i++) {
        const http_header_t *h = &r->out_headers[i];
        size_t               nl = strlen(h->name), vl = strlen(h->value);
        uint8_t              code = cor_field_code(h->name, nl);
        if (vl > 0xffff) continue;
        o.fields[o.n_fields++] = code ? (cor_field_t){code, NULL, 0, h->value, vl}
                                      : (cor_field_t){COR_F_NAMED, h->name, nl > 255 ? 255 : nl, h->value, vl};
    }
    if ((r->out_type || r->out.len) && r->method != HM_HEAD) {     /* HEAD: the headers of GET, no body */
        o.body = r->out.p;
        o.body_len = r->out.len;
    }
    fr->len = 0;
    if (!cor_frame_encode(fr, &o) || fr->len > c->peer_max) {
        problem_t q = {0};
        problem_set(&q, PB_INTERNAL_ERROR, "cor: the answer (%zu bytes) is larger than the peer accepts (%u)",
                    fr->len, c->peer_max);
        r->n_out_headers = 0;
        reply_problem(r, &q);
        cor_frame_t e = {.type = COR_RESPONSE, .id = id, .status = (uint16_t)r->status, .n_fields = 1,
                         .body = r->out.p, .body_len = r->out.len};
        e.fields[0] = (cor_field_t){COR_F_CONTENT_TYPE, NULL, 0, "application/json", 16};
        fr->len = 0;
        cor_frame_encode(fr, &e);
    }
    conn_send(c, fr->p, fr->len, false);
}

static void *worker_run(void *arg)
{
    (void)arg;
    arena_t *a = arena_new(64 << 10);
    sbuf_t   fr;
    sb_init(&fr, NULL, 16384);
    http_header_t *h = cr_xcalloc(COR_MAX_FIELDS, sizeof *h);
    for (;;) {
        pthread_mutex_lock(&g.qlock);
        while (!g.qhead && !g.qstop) pthread_cond_wait(&g.qcond, &g.qlock);
        job_t *j = g.qhead;
        if (j) {
            g.qhead = j->next;
            if (!g.qhead) g.qtail = NULL;
        }
        pthread_mutex_unlock(&g.qlock);
        if (!j) break;
        sconn_t    *c = j->c;
        cor_frame_t f;
        problem_t   p = {0};
        cor_frame_decode(j->bytes, j->len, &f, &p);        /* validated by the listener */
        request_t r;
        memset(&r, 0, sizeof r);
        r.arena = a;
        char  *query;
        size_t nh;
        pthread_mutex_lock(&c->lock);
        bool gone = c->closing;        /* nobody reads the answer: not run */
        pthread_mutex_unlock(&c->lock);
        if (!gone) {
            bool ok = build_request(&f, &r, &query, h, &nh, &p);
            if (ok) {
                r.body = f.body_len ? arena_strndup(a, f.body, f.body_len) : NULL;
                r.body_len = f.body_len;
                http_exec(g.exec, &r, query, h, nh);
            } else {
                sb_init(&r.out, a, 512);
            }
            answer(c, f.id, &r, ok ? NULL : &p, &fr);
        }
        pthread_mutex_lock(&c->lock);
        for (int i = 0; i < c->n_ids; i++)
            if (c->ids[i] == f.id) {
                c->ids[i] = c->ids[--c->n_ids];
                break;
            }
        pthread_mutex_unlock(&c->lock);
        conn_unref(c);
        free(j);
        arena_reset_keep(a, (size_t)1 << 20);
        if (fr.cap > ((size_t)1 << 20)) {     /* a large answer does not stay */
            sb_release(&fr);
            sb_init(&fr, NULL, 16384);
        }
    }
    free(h);
    sb_release(&fr);
    arena_free(a);
    return NULL;
}

/* ------------------------------------------------------------ start/stop */

static void workers_stop(void)
{
    pthread_mutex_lock(&g.qlock);
    g.qstop = true;
    pthread_cond_broadcast(&g.qcond);
    pthread_mutex_unlock(&g.qlock);
    for (int i = 0; i < g.n_workers; i++) pthread_join(g.workers[i], NULL);
    free(g.workers);
    g.workers = NULL;
}

bool cor_server_start(const http_route_t *routes, size_t n_routes, const char *alias, problem_t *p)
{
    snprintf(g.alias, sizeof g.alias, "%s", alias ? alias : "");
    g.max_frame = cr_config.max_body_size + COR_FIELDS_MAX + 64;
    if (g.max_frame > 0xffffffffu) g.max_frame = 0xffffffffu;
    if (!(g.exec = http_exec_new(routes, n_routes))) return problem_set(p, PB_INTERNAL_ERROR, "cor: bad route table");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cr_config.cor_port)};
    if (inet_pton(AF_INET, cr_config.bind_address, &sa.sin_addr) != 1) {
        problem_set(p, PB_INTERNAL_ERROR, "--bind: '%s' is not an IPv4 address", cr_config.bind_address);
        goto fail;
    }
    int one = 1;
    if ((g.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        setsockopt(g.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(g.lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(g.lfd, 1024) != 0) {
        problem_set(p, PB_INTERNAL_ERROR, "cor: cannot listen on %s:%d (%s)", cr_config.bind_address,
                    cr_config.cor_port, strerror(errno));
        goto fail;
    }
    if ((g.ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || (g.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        problem_set(p, PB_INTERNAL_ERROR, "cor: epoll: %s", strerror(errno));
        goto fail;
    }
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = &g_listen_tag}, ee = {.events = EPOLLIN, .data.ptr = &g_event_tag};
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, g.lfd, &le) != 0 || epoll_ctl(g.ep, EPOLL_CTL_ADD, g.evfd, &ee) != 0) {
        problem_set(p, PB_INTERNAL_ERROR, "cor: epoll: %s", strerror(errno));
        goto fail;
    }
    atomic_store(&g.stop, false);
    g.qstop = false;
    /* a request run here waits for its forwards on its worker (http_exec):
     * as many workers as HTTP has threads, and --forwardThreads besides, so
     * that slow sources leave workers for the quick requests */
    g.n_workers = (cr_config.connection_pool_size > 0 ? cr_config.connection_pool_size : 2) +
                  (cr_config.forward_threads > 0 ? cr_config.forward_threads : 0);
    g.workers = cr_xcalloc((size_t)g.n_workers, sizeof *g.workers);
    for (int i = 0; i < g.n_workers; i++)
        if (pthread_create(&g.workers[i], NULL, worker_run, NULL) != 0) {
            g.n_workers = i;
            problem_set(p, PB_INTERNAL_ERROR, "cor: cannot start a worker thread");
            goto fail_threads;
        }
    if (pthread_create(&g.listener, NULL, listener_run, NULL) != 0) {
        problem_set(p, PB_INTERNAL_ERROR, "cor: cannot start the listener thread");
        goto fail_threads;
    }
    g.running = true;
    LOG_I("cor:// listening on %s:%d (%d workers, window %d)", cr_config.bind_address, cr_config.cor_port,
          g.n_workers, COR_WINDOW);
    return true;
fail_threads:
    workers_stop();
fail:
    if (g.lfd >= 0) close(g.lfd);
    if (g.ep >= 0) close(g.ep);
    if (g.evfd >= 0) close(g.evfd);
    g.lfd = g.ep = g.evfd = -1;
    http_exec_free(g.exec);
    g.exec = NULL;
    return false;
}

void cor_server_stop(void)
{
    if (!g.running) return;
    g.running = false;
    atomic_store(&g.stop, true);
    uint64_t one = 1;
    if (write(g.evfd, &one, sizeof one) < 0) LOG_W("cor: cannot wake the listener: %s", strerror(errno));
    pthread_join(g.listener, NULL);
    workers_stop();
    for (job_t *j = g.qhead, *nx; j; j = nx) {      /* never run: their connections are closed */
        nx = j->next;
        conn_unref(j->c);
        free(j);
    }
    g.qhead = g.qtail = NULL;
    close(g.lfd);
    close(g.ep);
    close(g.evfd);
    g.lfd = g.ep = g.evfd = -1;
    http_exec_free(g.exec);
    g.exec = NULL;
}
