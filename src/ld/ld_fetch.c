/*
 * ld_fetch.c - remote @context documents: downloaded by a pool of fetch
 * threads, never by the thread that asks.
 *
 * A document is an entry of a cache by URL. The first request that names a
 * URL not in the cache queues a job for the fetch pool (--contextFetchThreads
 * threads, libcurl easy handles) and gets "pending" back, with its waiter
 * linked to the entry; every later request for the same URL joins the same
 * entry (single flight). When the download ends, the waiters are woken (the
 * HTTP binding resumes their requests, whose handlers then find the document
 * in the cache). A waiter also has a deadline (--contextTimeout from the
 * request's arrival, whatever the retries): a timer thread wakes it when the
 * deadline passes, and its request answers LdContextNotAvailable. A server
 * that accepts and never answers therefore costs one fetch thread for
 * --contextTimeout, not an HTTP worker.
 *
 * Bounds: the documents kept (the text, the URL, the entry) are counted in
 * bytes and the least recently used are dropped beyond half of
 * --contextCacheSize; a failed download keeps nothing but its reason, for
 * --contextFailureTtl ms, so that a dead server is not asked by every
 * request; one that answered an HTTP error is asked again next time.
 *
 * Every connection the fetchers open is checked against the egress policy
 * (core/egress.c): the host name of each URL before anything is resolved,
 * the address actually connected (CURLOPT_OPENSOCKETFUNCTION) and again
 * before each request is sent (CURLOPT_PREREQFUNCTION, which also covers a
 * reused connection), so a DNS answer cannot lead to a refused address.
 * Redirects are followed here, not by libcurl: each new URL must be http or
 * https and pass the host rules, at most LD_MAX_REDIRECTS of them.
 *
 * Callers that are not requests (unit tests, fuzzing) may also wait in place
 * (ld_doc_get without a waiter): they block on a condition variable.
 */
#include "ld_int.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define LD_MAX_REDIRECTS  5
#define MAX_FETCH_THREADS 64

typedef enum { DOC_QUEUED, DOC_LOADING, DOC_OK, DOC_FAILED } doc_state_t;

typedef struct ld_doc {
    char       *url;
    size_t      url_len;
    uint64_t    hash;
    doc_state_t state;
    char       *text;           /* DOC_OK: the body, NUL-terminated */
    size_t      len;
    char        reason[240];    /* DOC_FAILED */
    int64_t     failed_ms;      /* DOC_FAILED: when (monotonic ms) */
    bool        answered;       /* DOC_FAILED: the server answered (an HTTP error) */
    int64_t     created_ms;     /* DOC_OK: wall clock of the download */
    int64_t     used_ms;        /* last use (monotonic ms), for LRU */
    size_t      bytes;          /* what the entry costs */
    uint64_t    gen;            /* unique per download */
    struct ld_doc *qnext;       /* job queue */
    char        id[17];
    /* 5.13: the listing's figures */
    uint64_t    hits;           /* requests that read it (and GETs of its details) */
    int64_t     last_wall_ms;   /* wall clock of the last hit, 0: none */
    int64_t     expires_ms;     /* DOC_OK: wall clock after which it is downloaded again (6.3.16) */
    /* a download of a document already held (reload, or expired): the new
     * copy replaces the old one only once it is valid; until then the old one
     * is served. The job is a separate entry, never in the map. */
    struct ld_doc *refresh;     /* in the map's entry: the refresh under way or its outcome */
    struct ld_doc *owner;       /* in a refresh job: the entry it refreshes (NULL: forgotten) */
    bool        is_refresh;
} ld_doc_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  g_done = PTHREAD_COND_INITIALIZER;    /* a download ended */
static pthread_cond_t  g_jobs = PTHREAD_COND_INITIALIZER;    /* a job was queued */
static pthread_cond_t  g_tick = PTHREAD_COND_INITIALIZER;    /* the timer has work */
static ld_map_t        g_docs;
static size_t          g_doc_bytes;
static ld_doc_t       *g_qhead, *g_qtail;
static ld_waiter_t    *g_waiters;                            /* linked waiters */
static pthread_t       g_threads[MAX_FETCH_THREADS], g_timer;
static int             g_nthreads;
static bool            g_timer_started, g_stopping;
static bool            g_offline;
static int             g_failure_ttl_ms = -1;                /* -1: from cr_config */
static bool            g_curl_ready;
static uint64_t        g_gen;                                /* g_lock */

uint64_t ld_stat_downloads, ld_stat_download_failures, ld_stat_cache_hits, ld_stat_evictions;

void ld_set_offline(bool offline)
{
    __atomic_store_n(&g_offline, offline, __ATOMIC_RELEASE);
}

bool ld_fetch_offline(void)
{
    return __atomic_load_n(&g_offline, __ATOMIC_ACQUIRE);
}

void ld_fetch_set_failure_ttl(int ms)
{
    __atomic_store_n(&g_failure_ttl_ms, ms, __ATOMIC_RELEASE);
}

static int failure_ttl_ms(void)
{
    int t = __atomic_load_n(&g_failure_ttl_ms, __ATOMIC_ACQUIRE);
    return t >= 0 ? t : cr_config.context_failure_ttl_ms > 0 ? cr_config.context_failure_ttl_ms : 0;
}

static int64_t mono_ms(void)
{
    return cr_mono_ns() / 1000000;
}

int ld_timeout_ms(void)
{
    return cr_config.context_timeout_ms > 0 ? cr_config.context_timeout_ms : 5000;
}

size_t ld_max_doc_bytes(void)
{
    return cr_config.context_max_bytes > 0 ? cr_config.context_max_bytes : LD_MAX_DOC_BYTES;
}

static size_t doc_cache_limit(void)
{
    size_t mb = cr_config.context_cache_mb > 0 ? (size_t)cr_config.context_cache_mb : 64;
    return (mb << 20) / 2;
}

void ld_fetch_init(void)
{
    if (!g_curl_ready)
        g_curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

static void free_doc(ld_doc_t *d)
{
    if (d->refresh) {
        if (d->refresh->state == DOC_QUEUED || d->refresh->state == DOC_LOADING)
            d->refresh->owner = NULL;               /* the fetcher frees it when done */
        else
            free_doc(d->refresh);
    }
    free(d->text);
    free(d->url);
    free(d);
}

static void free_doc_cb(void *val, void *ud)
{
    CR_UNUSED(ud);
    free_doc(val);
}

static void wake_where(const ld_doc_t *d, int64_t now_ns);

void ld_stop(void)
{
    pthread_mutex_lock(&g_lock);
    __atomic_store_n(&g_stopping, true, __ATOMIC_RELEASE);   /* on_progress aborts transfers */
    pthread_cond_broadcast(&g_jobs);
    pthread_cond_broadcast(&g_tick);
    pthread_cond_broadcast(&g_done);
    wake_where(NULL, INT64_MAX);
    pthread_mutex_unlock(&g_lock);
}

void ld_fetch_shutdown(void)
{
    ld_stop();
    pthread_mutex_lock(&g_lock);
    int n = g_nthreads;
    bool timer = g_timer_started;
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < n; i++)
        pthread_join(g_threads[i], NULL);
    if (timer)
        pthread_join(g_timer, NULL);

    pthread_mutex_lock(&g_lock);
    for (ld_doc_t *d = g_qhead, *next; d; d = next) {    /* refreshes never started */
        next = d->qnext;
        if (d->is_refresh) {
            if (d->owner)
                d->owner->refresh = NULL;
            free_doc(d);
        }
    }
    ld_map_each(&g_docs, free_doc_cb, NULL);
    ld_map_free(&g_docs);
    g_doc_bytes = 0;
    g_qhead = g_qtail = NULL;
    g_nthreads = 0;
    g_timer_started = false;
    __atomic_store_n(&g_stopping, false, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_lock);
    if (g_curl_ready) {
        curl_global_cleanup();
        g_curl_ready = false;
    }
}

/* ------------------------------------------------------------- waiters */

/* Callers hold g_lock. */
static void waiter_link(ld_waiter_t *w, ld_doc_t *d)
{
    w->doc = d;
    w->waited_gen = d->gen;
    if (w->linked)
        return;
    w->linked = true;
    w->prev = NULL;
    w->next = g_waiters;
    if (g_waiters)
        g_waiters->prev = w;
    g_waiters = w;
    pthread_cond_signal(&g_tick);       /* a new deadline for the timer */
}

static void waiter_unlink(ld_waiter_t *w)
{
    if (!w->linked)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else
        g_waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->linked = false;
    w->doc = NULL;
}

/* Unlinks up to n waiters of document d (or, d NULL, past now_ns) into
 * out, to be woken once g_lock is released; returns how many. */
#define WAKE_BATCH 64
static size_t unlink_where(const ld_doc_t *d, int64_t now_ns, ld_waiter_t **out, size_t n)
{
    size_t k = 0;
    for (ld_waiter_t *w = g_waiters, *next; w && k < n; w = next) {
        next = w->next;
        if ((d && w->doc == d) || (!d && w->deadline_ns <= now_ns)) {
            waiter_unlink(w);
            w->firing++;
            out[k++] = w;
        }
    }
    return k;
}

/* Wakes the unlinked waiters, g_lock NOT held. A waiter stays valid while
 * its wake is under way: ld_waiter_release waits for `firing` to drop. */
static void wake_all(ld_waiter_t **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        v[i]->wake(v[i]->wake_arg);
        pthread_mutex_lock(&g_lock);
        v[i]->firing--;
        pthread_cond_broadcast(&g_done);
        pthread_mutex_unlock(&g_lock);
    }
}

/* Wakes every waiter of d (or past the deadline): called with g_lock held,
 * returns with it held. */
static void wake_where(const ld_doc_t *d, int64_t now_ns)
{
    ld_waiter_t *v[WAKE_BATCH];
    size_t n;
    while ((n = unlink_where(d, now_ns, v, WAKE_BATCH)) > 0) {
        pthread_mutex_unlock(&g_lock);
        wake_all(v, n);
        pthread_mutex_lock(&g_lock);
    }
}

void ld_waiter_release(ld_waiter_t *w)
{
    pthread_mutex_lock(&g_lock);
    waiter_unlink(w);
    while (w->firing > 0)
        pthread_cond_wait(&g_done, &g_lock);
    pthread_mutex_unlock(&g_lock);
}

static void *timer_main(void *arg)
{
    CR_UNUSED(arg);
    pthread_mutex_lock(&g_lock);
    while (!g_stopping) {
        int64_t now = cr_mono_ns();
        wake_where(NULL, now);
        int64_t next = INT64_MAX;
        for (ld_waiter_t *w = g_waiters; w; w = w->next)
            if (w->deadline_ns < next)
                next = w->deadline_ns;
        if (next == INT64_MAX) {
            pthread_cond_wait(&g_tick, &g_lock);
        } else {
            /* g_tick uses CLOCK_REALTIME: wait for the monotonic distance */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t wait_ns = next - now + 1000000;
            ts.tv_sec += wait_ns / 1000000000;
            ts.tv_nsec += wait_ns % 1000000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&g_tick, &g_lock, &ts);
        }
    }
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/* ------------------------------------------------------------- download */

typedef struct job {
    char  *p;
    size_t len, cap, max;
    bool   too_big;
    char   refused[200];        /* set when the egress policy refused a connection */
    /* the caching headers of the answer (6.3.16, RFC 7234) */
    int64_t max_age_s;          /* Cache-Control s-maxage or max-age; -1: none */
    int64_t expires_s, date_s, last_modified_s;     /* 0: none (or unreadable) */
    bool    no_cache;
} job_t;

#define LD_HEURISTIC_TTL_MS (3600 * 1000LL)         /* no caching headers: an hour */
#define LD_HEURISTIC_MAX_MS (24 * 3600 * 1000LL)    /* 10% of the age since Last-Modified, at most a day */
#define LD_MIN_TTL_MS       1000                    /* no-cache or max-age=0: at most one download a second */

static int64_t header_time(const char *v)
{
    time_t t = curl_getdate(v, NULL);
    return t > 0 ? (int64_t)t : 0;
}

/* Cache-Control, Expires, Date, Last-Modified: one header line at a time. */
static size_t on_header(char *line, size_t size, size_t nmemb, void *ud)
{
    job_t *b = ud;
    size_t n = size * nmemb;
    char   buf[512];
    if (n >= sizeof buf)
        return n;
    memcpy(buf, line, n);
    buf[n] = '\0';
    char *colon = strchr(buf, ':');
    if (!colon)
        return n;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    v[strcspn(v, "\r\n")] = '\0';
    if (!strcasecmp(buf, "cache-control")) {
        for (char *tok = v; tok && *tok;) {
            while (*tok == ' ' || *tok == ',')
                tok++;
            if (!strncasecmp(tok, "s-maxage=", 9))
                b->max_age_s = strtoll(tok + 9, NULL, 10);      /* a shared cache's own: wins */
            else if (!strncasecmp(tok, "max-age=", 8) && b->max_age_s < 0)
                b->max_age_s = strtoll(tok + 8, NULL, 10);
            else if (!strncasecmp(tok, "no-cache", 8) || !strncasecmp(tok, "no-store", 8))
                b->no_cache = true;
            tok = strchr(tok, ',');
        }
    } else if (!strcasecmp(buf, "expires")) {
        b->expires_s = header_time(v);
        if (!b->expires_s)
            b->expires_s = 1;                       /* unreadable, e.g. "0": already expired */
    } else if (!strcasecmp(buf, "date")) {
        b->date_s = header_time(v);
    } else if (!strcasecmp(buf, "last-modified")) {
        b->last_modified_s = header_time(v);
    }
    return n;
}

/* When a document downloaded now should be downloaded again (6.3.16). */
static int64_t expiry_of(const job_t *b, int64_t now_ms)
{
    int64_t ttl;
    if (b->no_cache)
        ttl = 0;
    else if (b->max_age_s >= 0)
        ttl = b->max_age_s > INT32_MAX ? (int64_t)INT32_MAX * 1000 : b->max_age_s * 1000;
    else if (b->expires_s)
        ttl = (b->expires_s - (b->date_s ? b->date_s : now_ms / 1000)) * 1000;
    else if (b->last_modified_s && b->date_s && b->date_s > b->last_modified_s)
        ttl = (b->date_s - b->last_modified_s) * 100;   /* 10% of the age, in ms */
    else
        ttl = LD_HEURISTIC_TTL_MS;
    if (b->max_age_s < 0 && !b->expires_s && ttl > LD_HEURISTIC_MAX_MS)
        ttl = LD_HEURISTIC_MAX_MS;
    if (ttl < LD_MIN_TTL_MS)
        ttl = LD_MIN_TTL_MS;
    return now_ms + ttl;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
    job_t *b = ud;
    size_t n = size * nmemb;
    if (b->len + n > b->max) {
        b->too_big = true;
        return 0;                                   /* aborts the transfer */
    }
    if (b->len + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 16384;
        while (ncap < b->len + n + 1)
            ncap *= 2;
        b->p = cr_xrealloc(b->p, ncap);
        b->cap = ncap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return n;
}

/* The host name of the URL libcurl is working on now (after redirects). */
static bool current_host(CURL *h, char *out, size_t n)
{
    char *eff = NULL;
    if (curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &eff) != CURLE_OK || !eff)
        return false;
    CURLU *u = curl_url();
    char *host = NULL;
    bool ok = u && curl_url_set(u, CURLUPART_URL, eff, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK;
    if (ok)
        snprintf(out, n, "%s", host);
    curl_free(host);
    curl_url_cleanup(u);
    return ok;
}

typedef struct sock_ctx {
    CURL  *h;
    job_t *job;
} sock_ctx_t;

/* Host rules, then the address: the egress policy on each connection. */
static bool egress_check(sock_ctx_t *sc, const struct sockaddr *sa)
{
    char host[256] = "", why[160];
    bool have_host = current_host(sc->h, host, sizeof host);
    if (egress_check_host(have_host ? host : NULL, sa, why, sizeof why))
        return true;
    snprintf(sc->job->refused, sizeof sc->job->refused, "the egress policy refuses %s", why);
    return false;
}

static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    sock_ctx_t *sc = ud;
    if (purpose != CURLSOCKTYPE_IPCXN || !egress_check(sc, &a->addr))
        return CURL_SOCKET_BAD;
    return socket(a->family, a->socktype, a->protocol);
}

/* Before each request is sent, also on a reused connection. */
static int on_prereq(void *ud, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    CR_UNUSED(local_ip);
    CR_UNUSED(local_port);
    sock_ctx_t *sc = ud;
    struct sockaddr_storage ss = { 0 };
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, primary_ip, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)primary_port);
    } else if (inet_pton(AF_INET6, primary_ip, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)primary_port);
    } else {
        snprintf(sc->job->refused, sizeof sc->job->refused, "the egress policy cannot read the address %.60s",
                 primary_ip);
        return CURL_PREREQFUNC_ABORT;
    }
    return egress_check(sc, (struct sockaddr *)&ss) ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    CR_UNUSED(ud); CR_UNUSED(dt); CR_UNUSED(dn); CR_UNUSED(ut); CR_UNUSED(un);
    return __atomic_load_n(&g_stopping, __ATOMIC_ACQUIRE) ? 1 : 0;
}

/* The host of an http(s) URL, into out; false (why set) when the URL is
 * not one we follow or its host is refused by name (before any DNS). */
static bool url_allowed(const char *url, char *why, size_t wlen)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL;
    bool ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK;
    if (!ok) {
        snprintf(why, wlen, "the URL %.150s cannot be read", url);
    } else if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0) {
        snprintf(why, wlen, "%.150s is not an http or https URL", url);
        ok = false;
    } else {
        char reason[160];
        ok = egress_check_host(host, NULL, reason, sizeof reason);
        if (!ok)
            snprintf(why, wlen, "the egress policy refuses %s", reason);
    }
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return ok;
}

/* One GET of url with the request options; redirects are followed here,
 * not by libcurl, so that each new URL is checked (scheme, host rules)
 * before anything is resolved or connected, and their number bounded.
 * Returns the final HTTP status, or 0 with reason set. */
static long get_following(CURL *h, const char *url, int64_t deadline, struct curl_slist *hdrs, job_t *body,
                          sock_ctx_t *sc, char *reason, size_t rlen)
{
    char errbuf[CURL_ERROR_SIZE];
    char *cur = cr_xstrdup(url);
    long status = 0;
    for (int hop = 0; cur; hop++) {
        if (!url_allowed(cur, reason, rlen))
            break;
        int64_t left = deadline - mono_ms();
        if (left <= 0) {
            snprintf(reason, rlen, "no answer within --contextTimeout (%d ms)", ld_timeout_ms());
            break;
        }
        body->len = 0;
        body->too_big = false;
        body->refused[0] = '\0';
        body->max_age_s = -1;
        body->expires_s = body->date_s = body->last_modified_s = 0;
        body->no_cache = false;
        errbuf[0] = '\0';
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, cur);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)left);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)left);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
        curl_easy_setopt(h, CURLOPT_USERAGENT, "coraine");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, body);
        curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
        curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, sc);
        curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, on_prereq);
        curl_easy_setopt(h, CURLOPT_PREREQDATA, sc);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);

        CURLcode rc = curl_easy_perform(h);
        if (body->refused[0]) {
            snprintf(reason, rlen, "%s", body->refused);
            break;
        }
        if (rc != CURLE_OK) {
            if (body->too_big)
                snprintf(reason, rlen, "the document is larger than %zu bytes (--contextMaxBytes)", body->max);
            else
                snprintf(reason, rlen, "%.190s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
            break;
        }
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        char *next = NULL;
        if (status >= 300 && status < 400 && curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &next) == CURLE_OK &&
            next) {
            if (hop == LD_MAX_REDIRECTS) {
                snprintf(reason, rlen, "more than %d redirects", LD_MAX_REDIRECTS);
                status = 0;
                break;
            }
            free(cur);
            cur = cr_xstrdup(next);                 /* next belongs to the handle */
            status = 0;
            continue;
        }
        break;
    }
    free(cur);
    return status;
}

/* Downloads url into a malloc'ed, NUL-terminated buffer within
 * --contextTimeout in total (retries included); reason on failure.
 * *answered tells whether the server answered at all (an HTTP status): such
 * a failure is cheap to ask again and is not remembered. */
static bool download(CURL *h, const char *url, char **text, size_t *len, int64_t *expires_ms, char *reason,
                     size_t rlen, bool *answered)
{
    int64_t deadline = mono_ms() + ld_timeout_ms();
    int attempts = 1 + (cr_config.context_retries > 0 ? cr_config.context_retries : 0);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Accept: application/ld+json, application/json;q=0.9, */*;q=0.1");
    job_t body = { .max = ld_max_doc_bytes() };
    sock_ctx_t sc = { h, &body };
    bool ok = false;
    snprintf(reason, rlen, "no answer within --contextTimeout (%d ms)", ld_timeout_ms());

    for (int attempt = 0; attempt < attempts && !ok; attempt++) {
        if (attempt > 0) {
            struct timespec ts = { 0, 100000000L * attempt };   /* 100 ms, 200 ms, ... */
            nanosleep(&ts, NULL);
        }
        if (deadline - mono_ms() <= 0 || __atomic_load_n(&g_stopping, __ATOMIC_ACQUIRE))
            break;
        body.refused[0] = '\0';
        long status = get_following(h, url, deadline, hdrs, &body, &sc, reason, rlen);
        if (status == 0) {
            if (body.refused[0] || body.too_big || strstr(reason, "egress policy") ||
                strstr(reason, "redirects") || strstr(reason, "not an http"))
                break;                              /* will not change */
            continue;
        }
        *answered = true;
        if (status >= 200 && status < 300) {
            ok = true;
            break;
        }
        snprintf(reason, rlen, "HTTP status %ld", status);
        if (status < 500 && status != 429)
            break;                                  /* a client error will not go away */
    }
    curl_slist_free_all(hdrs);
    if (!ok) {
        free(body.p);
        return false;
    }
    if (!body.p)                                    /* empty body */
        body.p = cr_xcalloc(1, 1);
    *text = body.p;
    *len = body.len;
    *expires_ms = expiry_of(&body, cr_now_ms());
    return true;
}

/* ------------------------------------------------------------- the cache */

static bool doc_eq(const void *val, const void *key)
{
    const ld_doc_t *d = val;
    return strcmp(d->url, key) == 0;
}

static void doc_remove(ld_doc_t *d)
{
    ld_map_del(&g_docs, d->hash, d);
    g_doc_bytes -= d->bytes;
    free_doc(d);
}

static bool doc_done(const void *val)
{
    const ld_doc_t *d = val;
    return d->state == DOC_OK || d->state == DOC_FAILED;
}

static int64_t doc_used(const void *val)
{
    return ((const ld_doc_t *)val)->used_ms;
}

/* Over the bound: drops the least recently used finished entries until 3/4
 * of it is used (in flight ones have waiters and stay, and so does keep).
 * Holds g_lock. */
static void evict_docs(const ld_doc_t *keep)
{
    size_t limit = doc_cache_limit();
    if (g_doc_bytes <= limit)
        return;
    size_t n;
    void **v = ld_map_by_age(&g_docs, doc_done, doc_used, &n);
    for (size_t i = 0; i < n && g_doc_bytes > limit / 4 * 3; i++) {
        if (v[i] == keep)
            continue;                               /* its waiters are about to read it */
        doc_remove(v[i]);
        __atomic_fetch_add(&ld_stat_evictions, 1, __ATOMIC_RELAXED);
    }
    free(v);
}

/* ------------------------------------------------------------ refreshes */

/* A new copy must be a JSON object with an @context member before it
 * replaces one that works (5.13.5.4). */
static bool valid_document(const char *text, size_t len, char *reason, size_t rlen)
{
    arena_t *a = arena_new(len + 1024);
    char err[128];
    json_limits_t lim = { .max_depth = LD_JSON_MAX_DEPTH, .max_size = 0 };
    json_t *doc = json_parse_copy(a, text, len, &lim, err, sizeof err);
    bool ok = doc && json_is_object(doc) && json_get(doc, "@context");
    if (!doc)
        snprintf(reason, rlen, "the new copy is not valid JSON: %s", err);
    else if (!ok)
        snprintf(reason, rlen, "the new copy is not a JSON object with an @context member");
    arena_free(a);
    return ok;
}

/* Hands d to the fetch pool (g_lock held). */
static void job_queue(ld_doc_t *d)
{
    d->state = DOC_QUEUED;
    if (g_qtail)
        g_qtail->qnext = d;
    else
        g_qhead = d;
    g_qtail = d;
    pthread_cond_signal(&g_jobs);
}

/* Queues a refresh of d (g_lock held); the outcome of the previous one goes. */
static ld_doc_t *refresh_start(ld_doc_t *d)
{
    if (d->refresh)
        free_doc(d->refresh);
    ld_doc_t *r = cr_xcalloc(1, sizeof *r);
    r->url = cr_xstrdup(d->url);
    r->url_len = d->url_len;
    r->hash = d->hash;
    r->is_refresh = true;
    r->owner = d;
    r->gen = ++g_gen;
    d->refresh = r;
    job_queue(r);
    return r;
}

/* A refresh job ended (g_lock held, and held again on return): the new copy
 * replaces the old one, or the old one stays. The URL (malloc'ed) when
 * replaced, else NULL. r belongs to its owner and may be gone on return. */
static char *refresh_done(ld_doc_t *r, bool ok, char *body, size_t blen, int64_t expires, const char *reason)
{
    ld_doc_t *o = r->owner;
    char *replaced = NULL;
    if (ok && o) {
        g_doc_bytes = g_doc_bytes - o->len + blen;
        o->bytes = o->bytes - o->len + blen;
        free(o->text);
        o->text = body;
        o->len = blen;
        o->created_ms = cr_now_ms();
        o->expires_ms = expires;
        r->state = DOC_OK;
        replaced = cr_xstrdup(r->url);
        __atomic_fetch_add(&ld_stat_downloads, 1, __ATOMIC_RELAXED);
    } else {
        if (ok)
            free(body);
        snprintf(r->reason, sizeof r->reason, "%s", ok ? "the @context was deleted meanwhile" : reason);
        r->state = DOC_FAILED;
        if (o) {                                    /* not again at every use: after the failure TTL, at least a minute */
            int64_t ttl = failure_ttl_ms() > 60000 ? failure_ttl_ms() : 60000;
            o->expires_ms = cr_now_ms() + ttl;
        }
        if (!ok)
            __atomic_fetch_add(&ld_stat_download_failures, 1, __ATOMIC_RELAXED);
    }
    pthread_cond_broadcast(&g_done);
    bool orphan = !o;                               /* forgotten while it ran: nobody keeps it */
    wake_where(r, 0);                               /* (unlocks: the owner may free r meanwhile) */
    if (orphan)
        free_doc(r);
    return replaced;
}

/* ------------------------------------------------------------ the pool */

static void *fetch_main(void *arg)
{
    CR_UNUSED(arg);
    CURL *h = curl_easy_init();
    pthread_mutex_lock(&g_lock);
    for (;;) {
        while (!g_qhead && !g_stopping)
            pthread_cond_wait(&g_jobs, &g_lock);
        if (g_stopping)
            break;
        ld_doc_t *d = g_qhead;
        g_qhead = d->qnext;
        if (!g_qhead)
            g_qtail = NULL;
        d->state = DOC_LOADING;
        pthread_mutex_unlock(&g_lock);

        char reason[sizeof d->reason];
        char *body = NULL;
        size_t blen = 0;
        int64_t expires = 0;
        bool answered = false, ok;
        if (h) {
            ok = download(h, d->url, &body, &blen, &expires, reason, sizeof reason, &answered);
            if (ok && d->is_refresh && !valid_document(body, blen, reason, sizeof reason)) {
                free(body);
                ok = false;
            }
        } else {
            ok = false;
            snprintf(reason, sizeof reason, "cannot start an HTTP client");
        }
        if (ok)
            LOG_I("@context %s downloaded (%zu bytes)", d->url, blen);
        else
            LOG_W("@context %s cannot be downloaded: %s", d->url, reason);

        pthread_mutex_lock(&g_lock);
        if (d->is_refresh) {
            char *url = refresh_done(d, ok, body, blen, expires, reason);
            if (url) {
                pthread_mutex_unlock(&g_lock);
                ld_cache_forget_url(url, strlen(url));  /* contexts built from the old copy */
                free(url);
                pthread_mutex_lock(&g_lock);
            }
            continue;
        }
        d->used_ms = mono_ms();
        if (ok) {
            d->text = body;
            d->len = blen;
            d->bytes += blen;
            g_doc_bytes += blen;
            d->created_ms = cr_now_ms();
            d->expires_ms = expires;
            d->state = DOC_OK;
            __atomic_fetch_add(&ld_stat_downloads, 1, __ATOMIC_RELAXED);
        } else {
            memcpy(d->reason, reason, sizeof d->reason);
            /* remember only failures that cost time (no answer, or refused):
             * a server that answered, e.g. 404, is asked again next time */
            d->failed_ms = d->used_ms;
            d->answered = answered;
            d->state = DOC_FAILED;
            __atomic_fetch_add(&ld_stat_download_failures, 1, __ATOMIC_RELAXED);
        }
        evict_docs(d);
        pthread_cond_broadcast(&g_done);
        wake_where(d, 0);
    }
    pthread_mutex_unlock(&g_lock);
    if (h)
        curl_easy_cleanup(h);
    return NULL;
}

/* Starts the threads on first use. Holds g_lock. */
static bool pool_start(problem_t *p)
{
    if (!g_timer_started) {
        if (pthread_create(&g_timer, NULL, timer_main, NULL) != 0)
            return problem_set(p, PB_INTERNAL_ERROR, "@context: cannot start the fetch timer thread");
        g_timer_started = true;
    }
    int want = cr_config.context_fetch_threads > 0 ? cr_config.context_fetch_threads : 4;
    if (want > MAX_FETCH_THREADS)
        want = MAX_FETCH_THREADS;
    while (g_nthreads < want) {
        if (pthread_create(&g_threads[g_nthreads], NULL, fetch_main, NULL) != 0) {
            if (g_nthreads == 0)
                return problem_set(p, PB_INTERNAL_ERROR, "@context: cannot start a fetch thread");
            break;
        }
        g_nthreads++;
    }
    return true;
}

int ld_doc_get(const char *url, arena_t *a, const char **text, size_t *len, int64_t *expires_ms, ld_waiter_t *w,
               problem_t *p)
{
    if (ld_fetch_offline())
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                           "@context %.300s: remote @context downloads are disabled", url),
               LD_DOC_ERROR;
    size_t ulen = strlen(url);
    uint64_t h = cr_hash(url, ulen);
    int rc;

    uint64_t waited = w ? w->waited_gen : 0;   /* a download this caller waited for */
    pthread_mutex_lock(&g_lock);
    for (;;) {
        if (g_stopping) {
            problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s: the broker is stopping", url);
            rc = LD_DOC_ERROR;
            break;
        }
        int64_t now = mono_ms();
        ld_doc_t *d = ld_map_find(&g_docs, h, doc_eq, url);
        if (d && d->state == DOC_FAILED && d->gen != waited &&
            (d->answered || now - d->failed_ms >= failure_ttl_ms())) {
            doc_remove(d);                              /* time to try again */
            d = NULL;
        }
        if (!d) {
            if (!pool_start(p)) {
                rc = LD_DOC_ERROR;
                break;
            }
            d = cr_xcalloc(1, sizeof *d);
            d->url = cr_xstrdup(url);
            ld_map_put(&g_docs, h, d);
            d->url_len = ulen;
            d->hash = h;
            d->bytes = sizeof *d + ulen + 1;
            d->used_ms = now;
            d->gen = ++g_gen;
            g_doc_bytes += d->bytes;
            snprintf(d->id, sizeof d->id, "%016llx", (unsigned long long)h);
            job_queue(d);
        }
        if (d->state == DOC_OK) {
            __atomic_fetch_add(&ld_stat_cache_hits, 1, __ATOMIC_RELAXED);
            d->used_ms = now;
            d->hits++;
            d->last_wall_ms = cr_now_ms();
            if (d->last_wall_ms >= d->expires_ms &&
                (!d->refresh || (d->refresh->state != DOC_QUEUED && d->refresh->state != DOC_LOADING)))
                refresh_start(d);                       /* expired: served as is while a new copy comes */
            char *copy = arena_alloc(a, d->len + 1);
            memcpy(copy, d->text, d->len + 1);
            *text = copy;
            *len = d->len;
            if (expires_ms)
                *expires_ms = d->expires_ms;
            rc = LD_DOC_READY;
            break;
        }
        if (d->state == DOC_FAILED) {
            problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s cannot be downloaded: %s", url,
                        d->reason);
            rc = LD_DOC_ERROR;
            break;
        }
        /* queued or loading */
        if (w) {
            waiter_link(w, d);
            rc = LD_DOC_PENDING;
            break;
        }
        waited = d->gen;
        pthread_cond_wait(&g_done, &g_lock);            /* not a request: wait here */
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static void doc_info(const ld_doc_t *d, arena_t *a, ld_info_t *out)
{
    out->local_id = arena_strdup(a, d->id);
    out->url = arena_strdup(a, d->url);
    out->kind = LD_KIND_CACHED;
    out->created_ms = d->created_ms;
    out->expires_ms = d->expires_ms;
    out->last_used_ms = d->last_wall_ms;
    out->hits = d->hits;
    out->text = NULL;
}

static void list_doc(void *val, void *ud)
{
    const ld_doc_t *d = val;
    ld_infos_t *l = ud;
    if (d->state == DOC_OK)
        doc_info(d, l->a, ld_infos_add(l));
}

void ld_fetch_list(ld_infos_t *l)
{
    pthread_mutex_lock(&g_lock);
    ld_map_each(&g_docs, list_doc, l);
    pthread_mutex_unlock(&g_lock);
}

typedef struct doc_by_id {
    const char *id;
    ld_doc_t   *found;
} doc_by_id_t;

static void find_id(void *val, void *ud)
{
    ld_doc_t *d = val;
    doc_by_id_t *k = ud;
    if (!k->found && d->state == DOC_OK && !strcmp(d->id, k->id))
        k->found = d;
}

/* By URL (a hash look-up) or by local id (a walk: documents are few). */
static ld_doc_t *doc_lookup(const char *id_or_url)
{
    ld_doc_t *d = ld_map_find(&g_docs, cr_hash(id_or_url, strlen(id_or_url)), doc_eq, id_or_url);
    if (d && d->state == DOC_OK)
        return d;
    doc_by_id_t k = { id_or_url, NULL };
    if (strlen(id_or_url) == 16)
        ld_map_each(&g_docs, find_id, &k);
    return k.found;
}

bool ld_fetch_find(arena_t *a, const char *id_or_url, bool count, ld_info_t *out)
{
    pthread_mutex_lock(&g_lock);
    ld_doc_t *d = doc_lookup(id_or_url);
    if (d) {
        doc_info(d, a, out);
        if (count) {
            d->hits++;
            d->last_wall_ms = cr_now_ms();
        }
    }
    pthread_mutex_unlock(&g_lock);
    return d != NULL;
}

bool ld_fetch_forget(const char *id)
{
    pthread_mutex_lock(&g_lock);
    ld_doc_t *d = doc_lookup(id);
    if (d)
        doc_remove(d);
    pthread_mutex_unlock(&g_lock);
    return d != NULL;
}

int ld_doc_reload(const char *url, ld_waiter_t *w, problem_t *p)
{
    int rc;
    pthread_mutex_lock(&g_lock);
    ld_doc_t *d = ld_map_find(&g_docs, cr_hash(url, strlen(url)), doc_eq, url);
    ld_doc_t *r = d ? d->refresh : NULL;
    if (g_stopping) {
        problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s: the broker is stopping", url);
        rc = LD_DOC_ERROR;
    } else if (!d || d->state != DOC_OK) {
        problem_set(p, PB_RESOURCE_NOT_FOUND, "@context %.300s is no longer cached", url);
        rc = LD_DOC_ERROR;
    } else if (r && r->gen == w->waited_gen && r->state == DOC_OK) {
        rc = LD_DOC_READY;                          /* the download this request waited for */
    } else if (r && r->gen == w->waited_gen && r->state == DOC_FAILED) {
        problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s cannot be downloaded again: %s", url,
                    r->reason);
        rc = LD_DOC_ERROR;
    } else if (!pool_start(p)) {
        rc = LD_DOC_ERROR;
    } else {
        if (!r || (r->state != DOC_QUEUED && r->state != DOC_LOADING))
            r = refresh_start(d);
        waiter_link(w, r);
        rc = LD_DOC_PENDING;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

void ld_fetch_stats(size_t *docs, size_t *bytes)
{
    pthread_mutex_lock(&g_lock);
    *docs = g_docs.count;
    *bytes = g_doc_bytes;
    pthread_mutex_unlock(&g_lock);
}
