/*
 * httpc.c - the HTTP/1.1 client of notifications to http:// endpoints with
 * a literal address (or localhost): non-blocking keep-alive connections
 * driven by one epoll thread, so that every lane's POST is in flight at the
 * same time and a slow or dead receiver holds nothing but its own lanes.
 *
 * Why not libcurl here: a POST through libcurl's multi interface cost about
 * 65,000 instructions (its URL parsing, option and header handling, its
 * state machine), more than the write that caused the notification; this
 * client writes a prepared request with one writev and reads the answer
 * with a small parser: a few thousand. libcurl stays for https:// and for
 * host names (its resolver does not block the loop).
 *
 * A connection is one lane's: one request at a time (the lane's order). A
 * request on a kept connection that the receiver closed meanwhile (nothing
 * of an answer came back) is sent once more on a new connection. The answer
 * is read to its end (Content-Length, chunked, or the connection's close),
 * its body discarded; its status decides ok (2xx).
 */
#include "notify_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)     /* bytes of an answer's status line and headers */

enum { ST_IDLE, ST_CONNECTING, ST_WRITING, ST_READING };
enum { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_EOF };
enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER };

struct httpc_conn {
    int                 fd;            /* -1: not connected */
    int                 state;
    struct sockaddr_storage addr;
    socklen_t           addr_len;
    bool                reused;        /* the request went on a kept connection */
    const char         *body;
    size_t              body_len;
    sbuf_t              head;          /* the request's head */
    size_t              sent;          /* of head + body */
    char               *rbuf;          /* the answer's head as read */
    size_t              rlen, rcap;
    bool                got_any;       /* a byte of the answer came */
    bool                in_body;
    int                 status;
    int                 body_kind;
    uint64_t            left;          /* BODY_LENGTH / chunk data bytes left */
    int                 chunk_state;
    bool                keep;          /* the connection may be kept after this answer */
    int64_t             deadline_ms;
    void               *ud;
    struct httpc_conn  *next, *prev;   /* the submit list / the in-flight list */
};

static notify_done_fn  g_done;
static int             g_ep = -1, g_wake = -1;
static pthread_t       g_thread;
static bool            g_on;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static httpc_conn_t   *g_submit;       /* under g_mu */
static bool            g_stop;         /* under g_mu */
static httpc_conn_t   *g_inflight;     /* the loop's only */
static httpc_conn_t   *g_pending, *g_pending_tail;   /* posted by the loop itself (the next batch of a lane), in order */

bool httpc_on_loop(void)
{
    return g_on && pthread_equal(pthread_self(), g_thread);
}

/* ------------------------------------------------------------ addresses */

bool httpc_address(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in  *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        return true;
    }
    size_t n = strlen(host);
    char   b[64];
    if (n >= 3 && n < sizeof b && host[0] == '[' && host[n - 1] == ']') {
        memcpy(b, host + 1, n - 2);
        b[n - 2] = '\0';
        if (inet_pton(AF_INET6, b, &v6->sin6_addr) == 1) {
            v6->sin6_family = AF_INET6;
            v6->sin6_port = htons((uint16_t)port);
            *len = sizeof *v6;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------ the loop */

static void conn_close(httpc_conn_t *c)
{
    if (c->fd >= 0) {
        epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->state = ST_IDLE;
}

static void inflight_unlink(httpc_conn_t *c)
{
    if (c->prev) c->prev->next = c->next;
    else if (g_inflight == c) g_inflight = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = c->prev = NULL;
}

/* The request is over: ok (a 2xx), or why it failed (NULL: the answer's
 * status says it, or it was aborted). */
static void finish(httpc_conn_t *c, bool ok, bool aborted, const char *why)
{
    char st[64];
    if (!ok && !aborted && !why) {
        snprintf(st, sizeof st, "the endpoint answered HTTP %d", c->status);
        why = st;
    }
    inflight_unlink(c);
    if (!ok || !c->keep || aborted) conn_close(c);
    else {
        c->state = ST_IDLE;
        epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL);   /* idle: not watched (a close is seen at the next use) */
    }
    void *ud = c->ud;
    c->ud = NULL;
    g_done(ud, ok, aborted, ok ? NULL : why);   /* may free c (its endpoint went) */
}

/* finish() with what errno says, while `doing`. */
static void fail_errno(httpc_conn_t *c, const char *doing)
{
    char buf[96], why[160];
    snprintf(why, sizeof why, "%s: %s", doing, strerror_r(errno, buf, sizeof buf));
    finish(c, false, false, why);
}

static bool watch(httpc_conn_t *c, uint32_t events, bool add)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    return epoll_ctl(g_ep, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev) == 0;
}

static bool start_connect(httpc_conn_t *c)
{
    c->fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return false;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->reused = false;
    if (connect(c->fd, (struct sockaddr *)&c->addr, c->addr_len) == 0) {
        c->state = ST_WRITING;
        return watch(c, EPOLLOUT, true);
    }
    if (errno != EINPROGRESS) return false;
    c->state = ST_CONNECTING;
    return watch(c, EPOLLOUT, true);
}

/* The request again from its first byte, on a new connection. */
static bool restart(httpc_conn_t *c)
{
    conn_close(c);
    c->sent = c->rlen = 0;
    c->got_any = c->in_body = false;
    return start_connect(c);
}

static void on_write(httpc_conn_t *c)
{
    size_t hl = c->head.len;
    while (c->sent < hl + c->body_len) {
        struct iovec v[2];
        int          n = 0;
        if (c->sent < hl) v[n++] = (struct iovec){(char *)c->head.p + c->sent, hl - c->sent};
        size_t bo = c->sent > hl ? c->sent - hl : 0;
        if (bo < c->body_len) v[n++] = (struct iovec){(char *)c->body + bo, c->body_len - bo};
        struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)n};
        ssize_t       w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                if (!watch(c, EPOLLOUT, false)) fail_errno(c, "epoll");
                return;
            }
            if (c->reused && !c->got_any && restart(c)) return;   /* the kept connection was closed */
            fail_errno(c, "sending the request");
            return;
        }
        c->sent += (size_t)w;
    }
    c->state = ST_READING;
    c->rlen = 0;
    c->got_any = c->in_body = false;
    if (!watch(c, EPOLLIN | EPOLLRDHUP, false)) fail_errno(c, "epoll");
}

/* The status line and the headers that matter; false: not an HTTP answer. */
static bool parse_head(httpc_conn_t *c, size_t end)
{
    c->rbuf[end] = '\0';
    int major = 0, minor = 0;
    if (sscanf(c->rbuf, "HTTP/%d.%d %d", &major, &minor, &c->status) != 3 || c->status < 100 || c->status > 999)
        return false;
    bool chunked = false, has_len = false, close_ = minor == 0 && major == 1, ka = false;
    uint64_t len = 0;
    for (char *l = strstr(c->rbuf, "\r\n"); l && l + 2 < c->rbuf + end; l = strstr(l + 2, "\r\n")) {
        char *h = l + 2;
        if (!strncasecmp(h, "content-length:", 15)) {
            has_len = true;
            len = strtoull(h + 15, NULL, 10);
        } else if (!strncasecmp(h, "transfer-encoding:", 18) || !strncasecmp(h, "connection:", 11)) {
            char *e = strstr(h, "\r\n");
            char  save = *e;
            *e = '\0';
            if (*h == 't' || *h == 'T') chunked = strcasestr(h + 18, "chunked") != NULL;
            else {
                if (strcasestr(h + 11, "close")) close_ = true;
                if (strcasestr(h + 11, "keep-alive")) ka = true;
            }
            *e = save;
        }
    }
    if (minor == 0 && major == 1 && ka) close_ = false;
    c->keep = !close_;
    if (c->status == 204 || c->status == 304 || c->status < 200) c->body_kind = BODY_NONE;
    else if (chunked) {
        c->body_kind = BODY_CHUNKED;
        c->chunk_state = CH_SIZE;
        c->left = 0;
    } else if (has_len) {
        c->body_kind = len ? BODY_LENGTH : BODY_NONE;
        c->left = len;
    } else {
        c->body_kind = BODY_EOF;
        c->keep = false;
    }
    return true;
}

/* Consumes body bytes p[0..n); true when the body is complete. */
static bool eat_body(httpc_conn_t *c, const char *p, size_t n)
{
    if (c->body_kind == BODY_NONE) return true;
    if (c->body_kind == BODY_EOF) return false;
    if (c->body_kind == BODY_LENGTH) {
        c->left -= n < c->left ? n : c->left;
        return c->left == 0;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        switch (c->chunk_state) {
        case CH_SIZE: {
            int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                  : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
            if (d >= 0 && c->left < (1ull << 56)) c->left = c->left * 16 + (uint64_t)d;
            else if (ch == '\r') c->chunk_state = CH_SIZE_LF;
            else c->chunk_state = CH_EXT;
            break;
        }
        case CH_EXT:
            if (ch == '\r') c->chunk_state = CH_SIZE_LF;
            break;
        case CH_SIZE_LF:
            c->chunk_state = c->left ? CH_DATA : CH_TRAILER;
            c->rlen = 0;           /* CH_TRAILER: the bytes of the current trailer line */
            break;
        case CH_DATA: {
            size_t take = n - i < c->left ? n - i : (size_t)c->left;
            c->left -= take;
            i += take - 1;
            if (!c->left) c->chunk_state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR: c->chunk_state = CH_DATA_LF; break;
        case CH_DATA_LF: c->chunk_state = CH_SIZE; break;
        case CH_TRAILER:
            if (ch == '\n') {
                if (c->rlen <= 1) return true;     /* an empty line ("\r\n") ends the body */
                c->rlen = 0;
            } else c->rlen++;
            break;
        }
    }
    return false;
}

static void on_read(httpc_conn_t *c)
{
    for (;;) {
        char   tmp[16384];
        char  *dst = tmp;
        size_t room = sizeof tmp;
        if (!c->in_body) {
            if (c->rcap - c->rlen < 4096) {
                if (c->rcap >= HEAD_MAX) {
                    finish(c, false, false, "the answer's head is longer than 64 KiB");
                    return;
                }
                c->rcap = c->rcap ? c->rcap * 2 : 8192;
                c->rbuf = cr_xrealloc(c->rbuf, c->rcap + 1);
            }
            dst = c->rbuf + c->rlen;
            room = c->rcap - c->rlen;
        }
        ssize_t r = recv(c->fd, dst, room, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return;
            if (c->reused && !c->got_any && restart(c)) return;
            fail_errno(c, "reading the answer");
            return;
        }
        if (r == 0) {
            if (c->in_body && c->body_kind == BODY_EOF) finish(c, c->status >= 200 && c->status < 300, false, NULL);
            else if (c->reused && !c->got_any && restart(c)) return;   /* closed while idle */
            else finish(c, false, false, "the endpoint closed the connection before its answer ended");
            return;
        }
        c->got_any = true;
        if (c->in_body) {
            if (eat_body(c, tmp, (size_t)r)) {
                finish(c, c->status >= 200 && c->status < 300, false, NULL);
                return;
            }
            continue;
        }
        c->rlen += (size_t)r;
        for (;;) {
            c->rbuf[c->rlen] = '\0';
            char *e = strstr(c->rbuf, "\r\n\r\n");
            if (!e) break;
            size_t hend = (size_t)(e - c->rbuf) + 4;
            if (!parse_head(c, hend - 2)) {
                finish(c, false, false, "the endpoint's answer is not HTTP");
                return;
            }
            size_t rest = c->rlen - hend;
            if (c->status < 200) {             /* 1xx: another head follows */
                memmove(c->rbuf, c->rbuf + hend, rest);
                c->rlen = rest;
                continue;
            }
            c->in_body = true;
            c->rlen = 0;                        /* eat_body reads the bytes, rbuf is not reused meanwhile */
            if (eat_body(c, c->rbuf + hend, rest)) {
                finish(c, c->status >= 200 && c->status < 300, false, NULL);
                return;
            }
            break;
        }
    }
}

static void on_event(httpc_conn_t *c, uint32_t ev)
{
    if (c->state == ST_CONNECTING) {
        int       err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || err) {
            if (err) errno = err;
            fail_errno(c, "connecting");
            return;
        }
        c->state = ST_WRITING;
    }
    if (c->state == ST_WRITING) {
        if (ev & (EPOLLERR | EPOLLHUP) && !(ev & EPOLLOUT)) {
            finish(c, false, false, "the connection failed");
            return;
        }
        on_write(c);
        return;
    }
    if (c->state == ST_READING) on_read(c);
}

static void start(httpc_conn_t *c)
{
    c->next = g_inflight;
    c->prev = NULL;
    if (g_inflight) g_inflight->prev = c;
    g_inflight = c;
    c->sent = 0;
    c->rlen = 0;
    c->got_any = c->in_body = false;
    if (c->fd >= 0) {
        c->reused = true;
        c->state = ST_WRITING;
        if (!watch(c, EPOLLOUT, true) && !restart(c)) fail_errno(c, "connecting");
        return;
    }
    if (!start_connect(c)) fail_errno(c, "connecting");
}

static void *httpc_loop(void *arg)
{
    (void)arg;
    struct epoll_event evs[64];
    int64_t            next_sweep = 0;
    for (;;) {
        int n = epoll_wait(g_ep, evs, 64, 50);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                uint64_t v;
                if (read(g_wake, &v, sizeof v) < 0) {}
                continue;
            }
            on_event(evs[i].data.ptr, evs[i].events);
        }
        pthread_mutex_lock(&g_mu);
        httpc_conn_t *sub = g_submit;
        bool          stop = g_stop;
        g_submit = NULL;
        pthread_mutex_unlock(&g_mu);
        /* the submit list is LIFO: start them in the order they came */
        httpc_conn_t *rev = NULL;
        while (sub) {
            httpc_conn_t *c = sub;
            sub = c->next;
            c->next = rev;
            rev = c;
        }
        while (rev) {
            httpc_conn_t *c = rev;
            rev = c->next;
            if (stop) {
                c->next = c->prev = NULL;
                c->keep = false;
                void *ud = c->ud;
                conn_close(c);
                c->ud = NULL;
                g_done(ud, false, true, NULL);
            } else start(c);
        }
        /* what the loop posted itself (a lane's next notification, rendered
         * when its previous one was answered): no wake-up, no recursion */
        while (g_pending && !stop) {
            httpc_conn_t *c = g_pending;
            g_pending = c->next;
            if (!g_pending) g_pending_tail = NULL;
            start(c);
        }
        if (stop) break;
        int64_t now = cr_now_ms();
        if (now >= next_sweep) {                      /* timeouts, 20 times a second */
            next_sweep = now + 50;
            for (httpc_conn_t *c = g_inflight, *nx; c; c = nx) {
                nx = c->next;
                if (now >= c->deadline_ms) finish(c, false, false, "no answer within the timeout");
            }
        }
    }
    while (g_inflight) finish(g_inflight, false, true, NULL);
    while (g_pending) {
        httpc_conn_t *c = g_pending;
        g_pending = c->next;
        c->next = NULL;
        void *ud = c->ud;
        c->ud = NULL;
        g_done(ud, false, true, NULL);
    }
    g_pending_tail = NULL;
    return NULL;
}

bool httpc_start(notify_done_fn done, problem_t *p)
{
    g_done = done;
    g_stop = false;
    if ((g_ep = epoll_create1(EPOLL_CLOEXEC)) < 0) return problem_set(p, PB_INTERNAL_ERROR, "epoll_create1 failed");
    if ((g_wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) goto fail;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(g_ep, EPOLL_CTL_ADD, g_wake, &ev) < 0) goto fail;
    if (pthread_create(&g_thread, NULL, httpc_loop, NULL) != 0) goto fail;
    g_on = true;
    return true;
fail:
    if (g_wake >= 0) close(g_wake);
    close(g_ep);
    g_ep = g_wake = -1;
    return problem_set(p, PB_INTERNAL_ERROR, "cannot start the notifier's HTTP client thread");
}

static void wake(void)
{
    uint64_t one = 1;
    if (write(g_wake, &one, sizeof one) < 0) {}
}

void httpc_stop(void)
{
    if (!g_on) return;
    pthread_mutex_lock(&g_mu);
    g_stop = true;
    pthread_mutex_unlock(&g_mu);
    wake();
    pthread_join(g_thread, NULL);
    g_on = false;
}

void httpc_cleanup(void)
{
    if (g_wake >= 0) close(g_wake);
    if (g_ep >= 0) close(g_ep);
    g_ep = g_wake = -1;
}

sbuf_t *httpc_head(httpc_conn_t **conn, const struct sockaddr_storage *addr, socklen_t addr_len)
{
    httpc_conn_t *c = *conn;
    if (!c) {
        *conn = c = cr_xcalloc(1, sizeof *c);
        c->fd = -1;
        sb_init(&c->head, NULL, 512);
    }
    if (c->addr_len != addr_len || memcmp(&c->addr, addr, addr_len)) {
        if (c->fd >= 0) close(c->fd);           /* idle (the lane is this caller's): not in the epoll set */
        c->fd = -1;
        memcpy(&c->addr, addr, addr_len);
        c->addr_len = addr_len;
    }
    sb_clear(&c->head);
    return &c->head;
}

void httpc_post(httpc_conn_t *c, const char *body, size_t len, long timeout_ms, void *ud)
{
    c->body = body;
    c->body_len = len;
    c->ud = ud;
    c->deadline_ms = cr_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
    if (httpc_on_loop()) {
        c->next = NULL;
        if (g_pending_tail) g_pending_tail->next = c;
        else g_pending = c;
        g_pending_tail = c;
        return;
    }
    pthread_mutex_lock(&g_mu);
    if (g_stop) {
        pthread_mutex_unlock(&g_mu);
        c->ud = NULL;
        g_done(ud, false, true, NULL);
        return;
    }
    c->next = g_submit;
    g_submit = c;
    pthread_mutex_unlock(&g_mu);
    wake();
}

void httpc_conn_free(httpc_conn_t *c)
{
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    sb_release(&c->head);
    free(c->rbuf);
    free(c);
}
