/*
 * fwd_source.c - the forwarded requests counted per context source, for
 * /metrics (fwd.h fwd_foreach_source): calls by result (the answer's status
 * class, a time-out, any other failure) and a latency histogram, per
 * endpoint of the registrations (several registrations of one source share
 * its series; the endpoint is shown without user information, query or
 * fragment). Cardinality is bounded: the first FWD_SOURCES_MAX endpoints
 * get a series of their own, every later one is counted under "other".
 *
 * fwd_run() records each call once it is done; a forwarded request costs a
 * network round trip, so one mutex over the table is no burden.
 */
#include "fwd.h"
#include "fwd_int.h"

#include <pthread.h>
#include <string.h>

const double fwd_latency_bounds[FWD_LAT_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                    0.25,  0.5,    1,     2.5,  5,    10};

static pthread_mutex_t     g_mu = PTHREAD_MUTEX_INITIALIZER;
static fwd_source_stats_t  g_src[FWD_SOURCES_MAX + 1];     /* the last one: "other" */
static size_t              g_n;

static fwd_source_stats_t *slot(const char *name)
{
    for (size_t i = 0; i < g_n; i++)
        if (!strcmp(g_src[i].source, name)) return &g_src[i];
    if (g_n < FWD_SOURCES_MAX) {
        fwd_source_stats_t *s = &g_src[g_n++];
        memcpy(s->source, name, strlen(name) + 1);
        return s;
    }
    fwd_source_stats_t *o = &g_src[FWD_SOURCES_MAX];
    if (!o->source[0]) memcpy(o->source, "other", 6);
    return o;
}

void fwd_source_begin(const call_t *c)
{
    char name[FWD_SOURCE_LEN];
    egress_url_shown(c->reg ? reg_endpoint(c->reg) : c->url, name, sizeof name);
    pthread_mutex_lock(&g_mu);
    slot(name)->in_flight++;
    pthread_mutex_unlock(&g_mu);
}

void fwd_source_record(const call_t *c)
{
    char name[FWD_SOURCE_LEN];
    egress_url_shown(c->reg ? reg_endpoint(c->reg) : c->url, name, sizeof name);
    int r = c->rc == CURLE_OPERATION_TIMEDOUT ? FWD_RESULT_TIMEOUT
          : c->rc != CURLE_OK || c->status < 100 || c->status > 599 ? FWD_RESULT_ERROR
          : (int)(c->status / 100) - 1;                        /* 1xx..5xx: 0..4 */
    double secs = (double)c->took_us / 1e6;
    int    b = 0;
    while (b < FWD_LAT_BUCKETS && secs > fwd_latency_bounds[b]) b++;
    pthread_mutex_lock(&g_mu);
    fwd_source_stats_t *s = slot(name);
    s->by_result[r]++;
    s->buckets[b]++;
    s->sum_us += (uint64_t)(c->took_us > 0 ? c->took_us : 0);
    if (s->in_flight) s->in_flight--;
    pthread_mutex_unlock(&g_mu);
}

void fwd_foreach_source(void (*fn)(void *ud, const fwd_source_stats_t *s), void *ud)
{
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++) fn(ud, &g_src[i]);
    if (g_src[FWD_SOURCES_MAX].source[0]) fn(ud, &g_src[FWD_SOURCES_MAX]);
    pthread_mutex_unlock(&g_mu);
}
