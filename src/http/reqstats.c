/*
 * reqstats.c - request counters per operation (route and method), status
 * class and latency bucket, for GET /statistics and GET /metrics.
 *
 * Every worker thread counts in its own block (allocated on its first
 * request, never freed: threads are few and live as long as the server), so
 * the hot path touches no lock and no cache line another thread writes: an
 * increment is a relaxed load and a relaxed store by the only writer. A
 * scrape sums the blocks of every thread; a sum may miss the increments of
 * the last few nanoseconds, never count one twice.
 */
#include "reqstats.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define RS_METHODS 8            /* GET POST PUT PATCH DELETE HEAD OPTIONS, unknown */
#define RS_MAX_THREADS 1024

const double http_latency_bounds[HTTP_LAT_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
static int64_t bounds_ns[HTTP_LAT_BUCKETS];

typedef struct rs_op {
    uint64_t by_class[6];
    uint64_t buckets[HTTP_LAT_BUCKETS + 1];   /* the last: beyond every bound */
    uint64_t sum_ns;
} rs_op_t;

/* A thread's block: (n_routes + 1) * RS_METHODS operations; the last route: none matched. */
typedef rs_op_t rs_block_t;

static const http_route_t *rs_routes;
static size_t              rs_n_routes;
static rs_block_t         *blocks[RS_MAX_THREADS];
static _Atomic int         n_blocks;
static _Thread_local rs_block_t *mine;
static _Thread_local bool        no_room;

void reqstats_init(const http_route_t *routes, size_t n_routes)
{
    rs_routes = routes;
    rs_n_routes = n_routes;
    for (int i = 0; i < HTTP_LAT_BUCKETS; i++) bounds_ns[i] = (int64_t)(http_latency_bounds[i] * 1e9 + 0.5);
}

static size_t n_ops(void)
{
    return (rs_n_routes + 1) * RS_METHODS;
}

static rs_block_t *my_block(void)
{
    if (CR_LIKELY(mine != NULL)) return mine;
    if (no_room) return NULL;
    int i = atomic_fetch_add(&n_blocks, 1);
    if (i >= RS_MAX_THREADS) {
        atomic_fetch_sub(&n_blocks, 1);
        no_room = true;
        LOG_W("http: more than %d threads answer requests; the others are not counted", RS_MAX_THREADS);
        return NULL;
    }
    rs_block_t *b = cr_xcalloc(n_ops(), sizeof(rs_op_t));
    __atomic_store_n(&blocks[i], b, __ATOMIC_RELEASE);
    mine = b;
    return b;
}

static inline void bump(uint64_t *c, uint64_t by)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + by, __ATOMIC_RELAXED);
}

static int method_slot(int method)
{
    return method ? __builtin_ctz((unsigned)method) : RS_METHODS - 1;
}

void reqstats_record(int route, int method, int status, int64_t ns)
{
    rs_block_t *b = my_block();
    if (!b) return;
    size_t r = route >= 0 && (size_t)route < rs_n_routes ? (size_t)route : rs_n_routes;
    rs_op_t *op = &b[r * RS_METHODS + (size_t)method_slot(method)];
    int cls = status / 100;
    bump(&op->by_class[cls >= 1 && cls <= 5 ? cls : 0], 1);
    if (ns < 0) return;
    int k = 0;
    while (k < HTTP_LAT_BUCKETS && ns > bounds_ns[k]) k++;
    bump(&op->buckets[k], 1);
    bump(&op->sum_ns, (uint64_t)ns);
}

/* ---------------------------------------------------------- reading */

static const char *const method_names[RS_METHODS] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS",
                                                     "other"};

void http_foreach_op_stats(void (*fn)(void *ud, const http_op_stats_t *st), void *ud)
{
    int nb = atomic_load(&n_blocks);
    if (nb > RS_MAX_THREADS) nb = RS_MAX_THREADS;
    for (size_t o = 0; o < n_ops(); o++) {
        http_op_stats_t st;
        memset(&st, 0, sizeof st);
        for (int i = 0; i < nb; i++) {
            rs_block_t *b = __atomic_load_n(&blocks[i], __ATOMIC_ACQUIRE);
            if (!b) continue;
            const rs_op_t *op = &b[o];
            for (int c = 0; c < 6; c++) st.by_class[c] += __atomic_load_n(&op->by_class[c], __ATOMIC_RELAXED);
            for (int k = 0; k <= HTTP_LAT_BUCKETS; k++)
                st.buckets[k] += __atomic_load_n(&op->buckets[k], __ATOMIC_RELAXED);
            st.sum_ns += __atomic_load_n(&op->sum_ns, __ATOMIC_RELAXED);
        }
        for (int c = 0; c < 6; c++) st.count += st.by_class[c];
        if (!st.count) continue;
        size_t r = o / RS_METHODS;
        st.route = r < rs_n_routes ? rs_routes[r].pattern : "(none)";
        st.method = method_names[o % RS_METHODS];
        fn(ud, &st);
    }
}

static void add_totals(void *ud, const http_op_stats_t *st)
{
    http_stats_t *hs = ud;
    for (int c = 0; c < 6; c++) hs->by_class[c] += st->by_class[c];
    hs->requests += st->count;
    for (int m = 0; m < 7; m++)
        if (!strcmp(st->method, method_names[m])) hs->by_method[m] += st->count;
}

void reqstats_totals(http_stats_t *st)
{
    http_foreach_op_stats(add_totals, st);
}
