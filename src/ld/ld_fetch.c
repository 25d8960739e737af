/*
 * ld_fetch.c - remote @context documents: downloaded with libcurl, once.
 *
 * Documents are cached by URL for the life of the process. When several
 * threads ask for a URL nobody has fetched yet, the first one downloads it
 * and the others wait on a condition variable for its result (single
 * flight). A download that got no answer (refused, timed out) is remembered
 * for a short time, so that a dead server does not hold every request for
 * its timeout; a server that answered with an error is asked again next time. Only http and https are
 * allowed, redirects included; the timeout and the number of retries come
 * from cr_config (--contextTimeout, --contextRetries).
 */
#include "ld_int.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_TIMEOUT_MS 5000

typedef enum { DOC_LOADING, DOC_OK, DOC_FAILED } doc_state_t;

typedef struct ld_doc {
    char       *url;
    size_t      url_len;
    doc_state_t state;
    char       *text;           /* DOC_OK: the body, NUL-terminated, never freed */
    size_t      len;
    char        reason[200];    /* DOC_FAILED */
    int64_t     failed_mono_ms; /* DOC_FAILED: when */
    int64_t     created_ms;     /* DOC_OK: wall clock of the download */
    char        id[17];
} ld_doc_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  g_cond = PTHREAD_COND_INITIALIZER;
static ld_map_t        g_docs;
static bool            g_offline;
static int             g_failure_ttl_ms = LD_FAILURE_TTL_MS;
static bool            g_curl_ready;

uint64_t ld_stat_downloads, ld_stat_download_failures, ld_stat_cache_hits;

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

void ld_fetch_init(void)
{
    if (!g_curl_ready)
        g_curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

static void free_doc(void *val, void *ud)
{
    CR_UNUSED(ud);
    ld_doc_t *d = val;
    free(d->text);
    free(d->url);
    free(d);
}

void ld_fetch_shutdown(void)
{
    pthread_mutex_lock(&g_lock);
    ld_map_each(&g_docs, free_doc, NULL);
    ld_map_free(&g_docs);
    pthread_mutex_unlock(&g_lock);
    if (g_curl_ready) {
        curl_global_cleanup();
        g_curl_ready = false;
    }
}

static int64_t mono_ms(void)
{
    return cr_mono_ns() / 1000000;
}

/* ------------------------------------------------------------- download */

typedef struct body {
    char  *p;
    size_t len, cap;
    bool   too_big;
} body_t;

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
    body_t *b = ud;
    size_t n = size * nmemb;
    if (b->len + n > LD_MAX_DOC_BYTES) {
        b->too_big = true;
        return 0;                                   /* aborts the transfer */
    }
    if (b->len + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 16384;
        while (ncap < b->len + n + 1)
            ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np)
            return 0;
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return n;
}

/* Downloads url into a malloc'ed, NUL-terminated buffer; reason on failure.
 * *answered tells whether the server answered at all (an HTTP status): such
 * a failure is cheap to ask again and is not remembered. */
static bool download(const char *url, char **text, size_t *len, char *reason, size_t rlen, bool *answered)
{
    int timeout = cr_config.context_timeout_ms > 0 ? cr_config.context_timeout_ms : DEFAULT_TIMEOUT_MS;
    int attempts = 1 + (cr_config.context_retries > 0 ? cr_config.context_retries : 0);
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(reason, rlen, "cannot start an HTTP client");
        return false;
    }
    struct curl_slist *hdrs = curl_slist_append(NULL, "Accept: application/ld+json, application/json;q=0.9, */*;q=0.1");
    char errbuf[CURL_ERROR_SIZE];
    body_t body = { 0 };
    bool ok = false;

    for (int attempt = 0; attempt < attempts && !ok; attempt++) {
        if (attempt > 0) {
            struct timespec ts = { 0, 100000000L * attempt };   /* 100 ms, 200 ms, ... */
            nanosleep(&ts, NULL);
        }
        body.len = 0;
        body.too_big = false;
        errbuf[0] = '\0';
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
        curl_easy_setopt(h, CURLOPT_USERAGENT, "coraine");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);

        CURLcode rc = curl_easy_perform(h);
        if (rc != CURLE_OK) {
            if (body.too_big) {
                snprintf(reason, rlen, "the document is larger than %u bytes", LD_MAX_DOC_BYTES);
                break;
            }
            snprintf(reason, rlen, "%.190s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
            continue;
        }
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
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
    curl_easy_cleanup(h);
    if (!ok) {
        free(body.p);
        return false;
    }
    if (!body.p) {                                  /* empty body */
        body.p = calloc(1, 1);
        if (!body.p) {
            snprintf(reason, rlen, "out of memory");
            return false;
        }
    }
    *text = body.p;
    *len = body.len;
    return true;
}

/* ------------------------------------------------------- single flight */

static bool doc_eq(const void *val, const void *key)
{
    const ld_doc_t *d = val;
    return strcmp(d->url, key) == 0;
}

bool ld_fetch(const char *url, const char **text, size_t *len, problem_t *p)
{
    if (ld_fetch_offline())
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                           "@context %.300s: remote @context downloads are disabled", url);
    size_t ulen = strlen(url);
    uint64_t h = cr_hash(url, ulen);

    pthread_mutex_lock(&g_lock);
    ld_doc_t *d;
    for (;;) {
        d = ld_map_find(&g_docs, h, doc_eq, url);
        if (!d) {
            if (g_docs.count >= LD_MAX_DOCS) {
                pthread_mutex_unlock(&g_lock);
                return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                                   "@context %.300s: too many remote @contexts (limit %d)", url,
                                   LD_MAX_DOCS);
            }
            d = calloc(1, sizeof *d);
            if (d && !(d->url = strdup(url))) {
                free(d);
                d = NULL;
            }
            if (!d || !ld_map_put(&g_docs, h, d)) {
                if (d) {
                    free(d->url);
                    free(d);
                }
                pthread_mutex_unlock(&g_lock);
                return problem_set(p, PB_INTERNAL_ERROR, "@context %.300s: out of memory", url);
            }
            d->url_len = ulen;
            snprintf(d->id, sizeof d->id, "%016llx", (unsigned long long)h);
            d->state = DOC_LOADING;
            break;
        }
        if (d->state == DOC_OK) {
            __atomic_fetch_add(&ld_stat_cache_hits, 1, __ATOMIC_RELAXED);
            *text = d->text;
            *len = d->len;
            pthread_mutex_unlock(&g_lock);
            return true;
        }
        if (d->state == DOC_LOADING) {
            pthread_cond_wait(&g_cond, &g_lock);
            continue;
        }
        /* DOC_FAILED */
        if (mono_ms() - d->failed_mono_ms < __atomic_load_n(&g_failure_ttl_ms, __ATOMIC_ACQUIRE)) {
            problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s cannot be downloaded: %s",
                        url, d->reason);
            pthread_mutex_unlock(&g_lock);
            return false;
        }
        d->state = DOC_LOADING;                     /* time to try again: ours */
        break;
    }
    pthread_mutex_unlock(&g_lock);

    char reason[sizeof d->reason];
    char *body = NULL;
    size_t blen = 0;
    bool answered = false;
    bool ok = download(url, &body, &blen, reason, sizeof reason, &answered);
    if (ok)
        LOG_I("@context %s downloaded (%zu bytes)", url, blen);
    else
        LOG_W("@context %s cannot be downloaded: %s", url, reason);

    pthread_mutex_lock(&g_lock);
    if (ok) {
        d->text = body;
        d->len = blen;
        d->created_ms = cr_now_ms();
        d->state = DOC_OK;
        __atomic_fetch_add(&ld_stat_downloads, 1, __ATOMIC_RELAXED);
        *text = body;
        *len = blen;
    } else {
        memcpy(d->reason, reason, sizeof d->reason);
        /* remember only failures that cost time (no answer): a server that
         * answered, e.g. 404, is asked again by the next request */
        d->failed_mono_ms = answered ? INT64_MIN / 2 : mono_ms();
        d->state = DOC_FAILED;
        __atomic_fetch_add(&ld_stat_download_failures, 1, __ATOMIC_RELAXED);
    }
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s cannot be downloaded: %s",
                           url, reason);
    return true;
}

static void visit_doc(void *val, void *ud)
{
    const ld_doc_t *d = val;
    const ld_visit_t *v = ud;
    if (d->state == DOC_OK)
        v->fn(v->ud, d->id, d->url, "Cached", d->created_ms, d->text);
}

void ld_fetch_foreach(ld_visit_fn fn, void *ud)
{
    ld_visit_t v = { fn, ud };
    pthread_mutex_lock(&g_lock);
    ld_map_each(&g_docs, visit_doc, &v);
    pthread_mutex_unlock(&g_lock);
}
