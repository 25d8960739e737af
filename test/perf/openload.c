/*
 * openload.c - an open-model HTTP/1.1 load driver (the knee, knee.py; the
 * scale run's rising write rate, scale.py). wrk is a closed model: it sends
 * the next request when an answer comes back, so a stalled server is offered
 * less and its stall never shows in the latencies (coordinated omission).
 * Here request i is due at t0 + i / rate whatever the answers do; it leaves
 * on the first idle keep-alive connection once due, and its latency runs from
 * the time it was due, so the time it waited for a connection counts.
 *
 *   openload -u http://127.0.0.1:PORT/path -r RATE -d SECONDS [-c CONNS]
 *            [-m METHOD] [-b BODY] [-H 'Name: value']... [-n M] [-g GRACE_S]
 *
 * "{i}" in the path or the body becomes i % M (M from -n, default 1): PATCHes
 * spread over M entities. After the last request is due the driver waits up
 * to GRACE_S (2) for the answers in flight; what is neither answered nor sent
 * by then counts as an error. One line of JSON on stdout: offered and
 * achieved rate, scheduled, sent, completed, non-2xx, errors, latency
 * percentiles in µs (from the due time), the largest backlog of due requests
 * that waited for a connection. Loopback benchmarks only; one thread, epoll.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { C_CONNECTING, C_IDLE, C_BUSY };

typedef struct {
    int      fd;
    int      state;
    uint64_t due_ns;             /* the in-flight request's due time */
    char    *out;                /* the request being written */
    size_t   out_len, out_off;
    char    *in;                 /* the answer being read */
    size_t   in_len, in_cap;
} conn_t;

static struct sockaddr_in addr;
static int      ep;
static conn_t  *conns;
static int      nconns = 64;
static int     *idle;            /* a stack of idle connection indices */
static int      nidle;
static char    *path_t, *body_t, *method = "GET", *hdrs;
static size_t   hdrs_len;
static uint64_t spread = 1;
static uint64_t completed, non2xx, errors, sent;
static uint32_t *lat_us;
static uint64_t last_done;      /* when the last answer came */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) die("realloc");
    return q;
}

/* s with every "{i}" replaced by v, appended to *buf at *len */
static void put_subst(char **buf, size_t *len, size_t *cap, const char *s, uint64_t v)
{
    char num[24];
    int  nl = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    for (; *s; s++) {
        const char *piece = s;
        size_t      pl = 1;
        if (s[0] == '{' && s[1] == 'i' && s[2] == '}') {
            piece = num;
            pl = (size_t)nl;
            s += 2;
        }
        if (*len + pl + 1 > *cap) {
            *cap = (*cap + pl) * 2;
            *buf = xrealloc(*buf, *cap);
        }
        memcpy(*buf + *len, piece, pl);
        *len += pl;
    }
    (*buf)[*len] = 0;
}

static void build_request(conn_t *c, uint64_t seq)
{
    size_t cap = 512 + hdrs_len + (body_t ? strlen(body_t) * 2 : 0), len = 0;
    char  *b = NULL, *body = NULL;
    size_t blen = 0, bcap = 64;
    uint64_t v = seq % spread;

    if (body_t) {
        body = xrealloc(NULL, bcap);
        put_subst(&body, &blen, &bcap, body_t, v);
    }
    b = xrealloc(c->out, cap);
    len = (size_t)snprintf(b, cap, "%s ", method);
    put_subst(&b, &len, &cap, path_t, v);
    char tail[128];
    int  tl = snprintf(tail, sizeof tail, " HTTP/1.1\r\nHost: %s:%d\r\nContent-Length: %zu\r\n",
                       inet_ntoa(addr.sin_addr), ntohs(addr.sin_port), blen);
    put_subst(&b, &len, &cap, tail, 0);
    if (tl < 0) die("snprintf");
    if (hdrs) put_subst(&b, &len, &cap, hdrs, 0);
    put_subst(&b, &len, &cap, "\r\n", 0);
    if (body) {
        put_subst(&b, &len, &cap, body, 0);
        free(body);
    }
    c->out = b;
    c->out_len = len;
    c->out_off = 0;
}

static void watch(conn_t *c, int op, uint32_t ev)
{
    struct epoll_event e = { .events = ev, .data.ptr = c };
    if (epoll_ctl(ep, op, c->fd, &e) < 0) die("epoll_ctl");
}

static void conn_open(conn_t *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) die("socket");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) die("connect");
    c->state = C_CONNECTING;
    c->in_len = 0;
    watch(c, EPOLL_CTL_ADD, EPOLLOUT | EPOLLIN);
}

/* the server closed or broke the connection: the request in flight failed */
static void conn_reset(conn_t *c)
{
    if (c->state == C_BUSY) errors++;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conn_open(c);
}

static void conn_idle(conn_t *c)
{
    c->state = C_IDLE;
    idle[nidle++] = (int)(c - conns);
}

static void conn_flush(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN) {
                watch(c, EPOLL_CTL_MOD, EPOLLIN | EPOLLOUT);
                return;
            }
            conn_reset(c);
            return;
        }
        c->out_off += (size_t)n;
    }
    watch(c, EPOLL_CTL_MOD, EPOLLIN);
}

static void conn_send(conn_t *c, uint64_t seq, uint64_t due)
{
    build_request(c, seq);
    c->state = C_BUSY;
    c->due_ns = due;
    sent++;
    conn_flush(c);
}

/* the length of the complete answer at the start of in[0..n), 0 if not all
 * there yet; *status gets its code */
static size_t answer_len(const char *in, size_t n, int *status)
{
    const char *end = memmem(in, n, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head = (size_t)(end - in) + 4;
    *status = n > 12 ? atoi(in + 9) : 0;
    long clen = -1;
    int  chunked = 0;
    for (const char *l = memchr(in, '\n', head); l && l < end; l = memchr(l, '\n', (size_t)(end - l))) {
        l++;
        if (!strncasecmp(l, "Content-Length:", 15)) clen = atol(l + 15);
        else if (!strncasecmp(l, "Transfer-Encoding:", 18) && strstr(l, "chunked") && strstr(l, "chunked") < end)
            chunked = 1;
    }
    if (!chunked) {
        if (clen < 0) clen = 0;      /* 204/304, or a bodyless answer */
        return n >= head + (size_t)clen ? head + (size_t)clen : 0;
    }
    size_t p = head;
    for (;;) {
        const char *eol = memmem(in + p, n - p, "\r\n", 2);
        if (!eol) return 0;
        size_t sz = strtoul(in + p, NULL, 16);
        p = (size_t)(eol - in) + 2;
        if (sz == 0) return n >= p + 2 ? p + 2 : 0;   /* no trailers */
        if (n < p + sz + 2) return 0;
        p += sz + 2;
    }
}

static void conn_read(conn_t *c, uint64_t now)
{
    for (;;) {
        if (c->in_cap - c->in_len < 16384) {
            c->in_cap = c->in_cap ? c->in_cap * 2 : 65536;
            c->in = xrealloc(c->in, c->in_cap);
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            conn_reset(c);
            return;
        }
        if (n < 0) break;
        c->in_len += (size_t)n;
    }
    int    status = 0;
    size_t len = answer_len(c->in, c->in_len, &status);
    if (!len || c->state != C_BUSY) return;
    uint64_t us = (now - c->due_ns) / 1000;
    last_done = now;
    lat_us[completed++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    if (status < 200 || status > 299) non2xx++;
    memmove(c->in, c->in + len, c->in_len - len);
    c->in_len -= len;
    conn_idle(c);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t pct(double p)
{
    if (!completed) return 0;
    size_t k = (size_t)(p * (double)(completed - 1) + 0.5);
    return lat_us[k];
}

int main(int argc, char **argv)
{
    double   rate = 1000, secs = 5, grace = 2;
    char    *url = NULL;
    int      opt;
    size_t   hcap = 0;

    while ((opt = getopt(argc, argv, "u:r:d:c:m:b:H:n:g:")) != -1) {
        switch (opt) {
        case 'u': url = optarg; break;
        case 'r': rate = atof(optarg); break;
        case 'd': secs = atof(optarg); break;
        case 'c': nconns = atoi(optarg); break;
        case 'm': method = optarg; break;
        case 'b': body_t = optarg; break;
        case 'n': spread = strtoull(optarg, NULL, 10); break;
        case 'g': grace = atof(optarg); break;
        case 'H':
            put_subst(&hdrs, &hdrs_len, &hcap, optarg, 0);
            put_subst(&hdrs, &hdrs_len, &hcap, "\r\n", 0);
            break;
        default:
            fprintf(stderr, "usage: openload -u http://127.0.0.1:PORT/path -r RATE -d SECONDS [-c CONNS] "
                            "[-m METHOD] [-b BODY] [-H 'Name: value'] [-n M] [-g GRACE_S]\n");
            return 2;
        }
    }
    char host[64];
    int  port;
    if (!url || sscanf(url, "http://%63[^:/]:%d", host, &port) != 2 || rate <= 0 || secs <= 0 || nconns < 1 ||
        spread < 1) {
        fprintf(stderr, "openload: -u http://HOST:PORT/path, -r > 0, -d > 0, -c >= 1 and -n >= 1 are needed\n");
        return 2;
    }
    path_t = strchr(url + 7, '/');
    if (!path_t) path_t = "/";
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "openload: the host must be an IPv4 address (loopback)\n");
        return 2;
    }

    uint64_t total = (uint64_t)(rate * secs);
    uint64_t interval_ps = (uint64_t)(1e12 / rate);     /* picoseconds: exact at high rates */
    lat_us = calloc(total + 1, sizeof *lat_us);
    conns = calloc((size_t)nconns, sizeof *conns);
    idle = calloc((size_t)nconns, sizeof *idle);
    if (!lat_us || !conns || !idle) die("calloc");
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0) die("epoll_create1");
    for (int i = 0; i < nconns; i++) conn_open(&conns[i]);

    /* the connections are set up before the clock starts */
    uint64_t setup_end = now_ns() + 2000000000u;
    int      up = 0;
    struct epoll_event evs[256];
    while (up < nconns && now_ns() < setup_end) {
        int n = epoll_wait(ep, evs, 256, 100);
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (c->state == C_CONNECTING && (evs[i].events & EPOLLOUT)) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err) {
                    fprintf(stderr, "openload: connect: %s\n", strerror(err));
                    return 2;
                }
                watch(c, EPOLL_CTL_MOD, EPOLLIN);
                conn_idle(c);
                up++;
            }
        }
    }

    uint64_t t0 = now_ns(), next = 0, max_backlog = 0;
    uint64_t last_due = t0 + (uint64_t)((double)(total ? total - 1 : 0) * 1e9 / rate);
    uint64_t stop = last_due + (uint64_t)(grace * 1e9);
    for (;;) {
        uint64_t now = now_ns();
        uint64_t due = now < t0 ? 0 : (uint64_t)((__uint128_t)(now - t0) * 1000u / interval_ps) + 1;
        if (due > total) due = total;
        if (due > next && due - next > max_backlog) max_backlog = due - next;
        while (next < due && nidle > 0) {
            conn_t *c = &conns[idle[--nidle]];
            conn_send(c, next, t0 + (uint64_t)((__uint128_t)next * interval_ps / 1000u));
            next++;
        }
        int busy = nconns - nidle;
        for (int i = 0; i < nconns; i++)
            if (conns[i].state == C_CONNECTING) busy--;
        if ((next == total && busy == 0) || now > stop) break;
        struct timespec ts = { 0, 0 };
        if (next < due || next == total) ts.tv_nsec = 1000000;     /* waiting for a connection or answers */
        else {
            uint64_t at = t0 + (uint64_t)((__uint128_t)next * interval_ps / 1000u);
            uint64_t w = at > now ? at - now : 0;
            ts.tv_sec = (time_t)(w / 1000000000u);
            ts.tv_nsec = (long)(w % 1000000000u);
        }
        int n = epoll_pwait2(ep, evs, 256, &ts, NULL);
        if (n < 0 && errno != EINTR) die("epoll_pwait2");
        now = now_ns();
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (c->state == C_CONNECTING) {
                if (evs[i].events & (EPOLLERR | EPOLLHUP)) {
                    conn_reset(c);
                    continue;
                }
                if (evs[i].events & EPOLLOUT) {
                    watch(c, EPOLL_CTL_MOD, EPOLLIN);
                    conn_idle(c);
                }
                continue;
            }
            if (evs[i].events & EPOLLOUT && c->state == C_BUSY) conn_flush(c);
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) conn_read(c, now);
        }
    }
    double elapsed = (double)((last_done > t0 ? last_done : now_ns()) - t0) / 1e9;
    errors += total - sent;                                               /* never sent */
    for (int i = 0; i < nconns; i++)
        if (conns[i].state == C_BUSY) errors++;                           /* never answered */
    qsort(lat_us, completed, sizeof *lat_us, cmp_u32);
    printf("{\"offeredRate\":%.1f,\"durationSeconds\":%.3f,\"elapsedSeconds\":%.3f,\"connections\":%d,"
           "\"scheduled\":%llu,\"sent\":%llu,\"completed\":%llu,\"non2xx\":%llu,\"errors\":%llu,"
           "\"achievedRate\":%.1f,\"p50us\":%u,\"p90us\":%u,\"p99us\":%u,\"p999us\":%u,\"maxus\":%u,"
           "\"maxBacklog\":%llu}\n",
           rate, secs, elapsed, nconns, (unsigned long long)total, (unsigned long long)sent,
           (unsigned long long)completed, (unsigned long long)non2xx, (unsigned long long)errors,
           elapsed > 0 ? (double)completed / elapsed : 0, pct(0.5), pct(0.9), pct(0.99), pct(0.999),
           completed ? lat_us[completed - 1] : 0, (unsigned long long)max_backlog);
    return 0;
}
