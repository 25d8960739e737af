/*
 * fsync_stats.c - the latency of every fdatasync of a log on disk, by log
 * (the store's log: group commit, interval, roll-over; corDB history's
 * history.log), as a histogram: process-wide, lock-free, fed by the module
 * that syncs and read by GET /metrics (coraine_log_fsync_seconds). It lives
 * in core/ because two modules feed it and a third prints it.
 */
#include <stdatomic.h>

#include "core.h"

const double cr_fsync_bounds[CR_FSYNC_BUCKETS] = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0
};
static const int64_t fsync_bounds_ns[CR_FSYNC_BUCKETS] = {
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 25000000, 50000000,
    100000000, 250000000, 500000000, 1000000000
};

static struct {
    _Atomic uint64_t count[CR_FSYNC_BUCKETS + 1];
    _Atomic uint64_t sum_ns;
} fsync_hist[CR_FSYNC_LOGS];

void cr_fsync_observe(cr_fsync_log_t log, int64_t ns)
{
    int k = 0;

    if (ns < 0)
        ns = 0;
    while (k < CR_FSYNC_BUCKETS && ns > fsync_bounds_ns[k])
        k++;
    atomic_fetch_add_explicit(&fsync_hist[log].count[k], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&fsync_hist[log].sum_ns, (uint64_t)ns, memory_order_relaxed);
}

/* The count is the buckets' sum, so the two always agree (a scrape during
 * an observe may miss its sum: it is there at the next). */
void cr_fsync_hist(cr_fsync_log_t log, cr_fsync_hist_t *out)
{
    out->n = 0;
    for (int k = 0; k <= CR_FSYNC_BUCKETS; k++) {
        out->count[k] = atomic_load_explicit(&fsync_hist[log].count[k], memory_order_relaxed);
        out->n += out->count[k];
    }
    out->sum_ns = atomic_load_explicit(&fsync_hist[log].sum_ns, memory_order_relaxed);
}
