/*
 * accesslog.c - the access log (--accessLog FILE): one line per answered
 * request in the combined log format, followed by the request id and the
 * duration in microseconds:
 *
 *   127.0.0.1 - alice [01/Dec/2026:14:30:00 +0000] "GET /ngsi-ld/v1/entities?type=T HTTP/1.1" 200 512
 *       "-" "curl/8.1" 3f2a9c0d41b7e8aa 137
 *
 * (one line). A worker formats its line on its stack and copies it into the
 * active buffer under a mutex held for the memcpy only; a writer thread
 * swaps the two buffers every ACCESSLOG_FLUSH_MS (or when one is half full)
 * and writes the full one to the file. So a slow disk never stalls a worker:
 * when both buffers are full the line is dropped and counted
 * (coraine_access_log_dropped_total). Bytes a client sent that are not
 * printable ASCII, quotes and backslashes are written as \xHH.
 */
#include "accesslog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ACCESSLOG_BUF      ((size_t)1 << 20)
#define ACCESSLOG_FLUSH_MS 100
#define ACCESSLOG_LINE     4096

static struct {
    pthread_mutex_t  mu;
    pthread_cond_t   cv;
    char            *buf[2];
    size_t           len[2];
    int              active;        /* the buffer workers fill */
    bool             running, stop, reopen;
    int              fd;
    char            *path;
    pthread_t        thread;
    _Atomic uint64_t dropped;
} al = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fd = -1};

bool accesslog_enabled(void)
{
    return al.running;
}

uint64_t accesslog_dropped(void)
{
    return atomic_load(&al.dropped);
}

static int open_file(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            LOG_E("access log: write failed: %s", strerror(errno));
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void *writer(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&al.mu);
    for (;;) {
        if (!al.stop && al.len[al.active] < ACCESSLOG_BUF / 2) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += ACCESSLOG_FLUSH_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            pthread_cond_timedwait(&al.cv, &al.mu, &ts);
        }
        int    full = al.active;
        size_t n = al.len[full];
        al.active = !full;                    /* the other one was written and emptied before */
        bool   reopen = al.reopen, stop = al.stop;
        al.reopen = false;
        pthread_mutex_unlock(&al.mu);
        if (n) write_all(al.fd, al.buf[full], n);
        if (reopen) {
            int fd = open_file(al.path);
            if (fd < 0) {
                LOG_E("access log: cannot reopen %s: %s; writing on to the old file", al.path, strerror(errno));
            } else {
                close(al.fd);
                al.fd = fd;
            }
        }
        pthread_mutex_lock(&al.mu);
        al.len[full] = 0;
        if (stop && !al.len[al.active]) break;
    }
    pthread_mutex_unlock(&al.mu);
    return NULL;
}

bool accesslog_start(const char *path, problem_t *p)
{
    al.fd = open_file(path);
    if (al.fd < 0) return problem_set(p, PB_INTERNAL_ERROR, "--accessLog: cannot open %s: %s", path, strerror(errno));
    al.path = cr_xstrdup(path);
    al.buf[0] = cr_xmalloc(ACCESSLOG_BUF);
    al.buf[1] = cr_xmalloc(ACCESSLOG_BUF);
    al.len[0] = al.len[1] = 0;
    al.active = 0;
    al.stop = al.reopen = false;
    if (pthread_create(&al.thread, NULL, writer, NULL) != 0) {
        close(al.fd);
        al.fd = -1;
        free(al.buf[0]); free(al.buf[1]); free(al.path);
        return problem_set(p, PB_INTERNAL_ERROR, "--accessLog: cannot start its writer thread");
    }
    al.running = true;
    return true;
}

void accesslog_stop(void)
{
    if (!al.running) return;
    pthread_mutex_lock(&al.mu);
    al.stop = true;
    pthread_cond_signal(&al.cv);
    pthread_mutex_unlock(&al.mu);
    pthread_join(al.thread, NULL);
    al.running = false;
    close(al.fd);
    al.fd = -1;
    free(al.buf[0]); free(al.buf[1]); free(al.path);
    al.buf[0] = al.buf[1] = NULL;
    al.path = NULL;
}

void accesslog_reopen(void)
{
    if (!al.running) return;
    pthread_mutex_lock(&al.mu);
    al.reopen = true;
    pthread_cond_signal(&al.cv);
    pthread_mutex_unlock(&al.mu);
}

/* ---- formatting */

typedef struct line {
    char   b[ACCESSLOG_LINE];
    size_t n;
} line_t;

static void put(line_t *l, const char *s, size_t n)
{
    if (n > sizeof l->b - 1 - l->n) n = sizeof l->b - 1 - l->n;
    memcpy(l->b + l->n, s, n);
    l->n += n;
}

static void puts_(line_t *l, const char *s)
{
    put(l, s, strlen(s));
}

/* A field from the client: "-" when absent; \xHH for what could break the line. */
static void field(line_t *l, const char *s, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    if (!s || !*s) { put(l, "-", 1); return; }
    for (size_t i = 0; s[i] && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            char e[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            put(l, e, 4);
        } else {
            put(l, (const char *)&c, 1);
        }
    }
}

void accesslog_write(const accesslog_entry_t *e)
{
    line_t    l;
    char      num[64];
    struct tm tm;
    time_t    now = time(NULL);

    l.n = 0;
    field(&l, e->client, 64);
    puts_(&l, " - ");
    field(&l, e->user, 256);
    gmtime_r(&now, &tm);
    put(&l, num, strftime(num, sizeof num, " [%d/%b/%Y:%H:%M:%S +0000] \"", &tm));
    if (e->method || e->uri) {
        field(&l, e->method, 16);
        put(&l, " ", 1);
        field(&l, e->uri, 2048);
        put(&l, " ", 1);
        field(&l, e->proto, 16);
    } else {
        put(&l, "-", 1);       /* answered before a request line was read (the connection guard) */
    }
    put(&l, num, (size_t)snprintf(num, sizeof num, "\" %d %zu \"", e->status, e->bytes));
    field(&l, e->referer, 512);
    puts_(&l, "\" \"");
    field(&l, e->agent, 512);
    puts_(&l, "\" ");
    field(&l, e->request_id, 128);
    put(&l, num, (size_t)snprintf(num, sizeof num, " %lld\n", (long long)(e->ns >= 0 ? e->ns / 1000 : 0)));
    if (l.b[l.n - 1] != '\n') l.b[l.n - 1] = '\n';   /* cut: still one line */

    pthread_mutex_lock(&al.mu);
    int a = al.active;
    if (al.len[a] + l.n <= ACCESSLOG_BUF) {
        memcpy(al.buf[a] + al.len[a], l.b, l.n);
        al.len[a] += l.n;
        if (al.len[a] >= ACCESSLOG_BUF / 2) pthread_cond_signal(&al.cv);
        pthread_mutex_unlock(&al.mu);
        return;
    }
    pthread_mutex_unlock(&al.mu);
    atomic_fetch_add(&al.dropped, 1);
}
