/*
 * metrics.c - GET /metrics (Prometheus text exposition format 0.0.4), GET
 * /health (liveness) and GET /ready (readiness): the broker for operators.
 *
 * Every number is read through the owning module's header (http/ per-thread
 * request counters summed here, the store, the notifier, forwarding, the
 * history, the @context cache), at scrape time; nothing is counted for
 * /metrics on the hot path. doc/operations.md names every metric.
 */
#include "api.h"

#include "../auth/auth.h"
#include "../fwd/fwd.h"
#include "../notify/notify.h"
#include "../reg/reg.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* At most this many tenants get their own coraine_store_entities series. */
#define METRICS_MAX_TENANTS 1000

static _Atomic bool draining;

void api_set_draining(void)
{
    atomic_store(&draining, true);
}

/* A label value: backslash, quote and newline escaped (the format's rule). */
static void label(sbuf_t *sb, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') sb_addc(sb, '\\');
        if (*v == '\n') { sb_adds(sb, "\\n"); continue; }
        sb_addc(sb, *v);
    }
}

static void head(sbuf_t *sb, const char *name, const char *type, const char *help)
{
    sb_printf(sb, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metric(sbuf_t *sb, const char *name, const char *type, const char *help, uint64_t v)
{
    head(sb, name, type, help);
    sb_printf(sb, "%s %llu\n", name, (unsigned long long)v);
}

#define COUNTER(sb, n, h, v) metric(sb, n, "counter", h, v)
#define GAUGE(sb, n, h, v)   metric(sb, n, "gauge", h, v)

/* ---- requests */

typedef struct ops_list {
    http_op_stats_t *v;
    size_t           n, cap;
    arena_t         *a;
} ops_list_t;

static void collect_op(void *ud, const http_op_stats_t *st)
{
    ops_list_t *l = ud;
    if (l->n == l->cap) {
        size_t           cap = l->cap ? l->cap * 2 : 64;
        http_op_stats_t *v = arena_alloc(l->a, cap * sizeof *v);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *st;
}

static void op_labels(sbuf_t *sb, const http_op_stats_t *st)
{
    sb_adds(sb, "route=\"");
    label(sb, st->route);
    sb_printf(sb, "\",method=\"%s\"", st->method);
}

static void requests(sbuf_t *sb, arena_t *a)
{
    ops_list_t l = {.a = a};
    http_foreach_op_stats(collect_op, &l);

    head(sb, "coraine_http_requests_total", "counter",
         "HTTP requests answered, by route pattern, method and status class");
    for (size_t i = 0; i < l.n; i++)
        for (int c = 1; c <= 5; c++) {
            if (!l.v[i].by_class[c]) continue;
            sb_adds(sb, "coraine_http_requests_total{");
            op_labels(sb, &l.v[i]);
            sb_printf(sb, ",class=\"%dxx\"} %llu\n", c, (unsigned long long)l.v[i].by_class[c]);
        }
    head(sb, "coraine_http_request_duration_seconds", "histogram",
         "time from the arrival of the request head to the answer, by route pattern and method");
    for (size_t i = 0; i < l.n; i++) {
        const http_op_stats_t *st = &l.v[i];
        uint64_t               cum = 0, measured = 0;
        for (int k = 0; k <= HTTP_LAT_BUCKETS; k++) measured += st->buckets[k];
        if (!measured) continue;
        for (int k = 0; k <= HTTP_LAT_BUCKETS; k++) {
            cum += st->buckets[k];
            sb_adds(sb, "coraine_http_request_duration_seconds_bucket{");
            op_labels(sb, st);
            if (k < HTTP_LAT_BUCKETS) sb_printf(sb, ",le=\"%g\"} %llu\n", http_latency_bounds[k], (unsigned long long)cum);
            else sb_printf(sb, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
        sb_adds(sb, "coraine_http_request_duration_seconds_sum{");
        op_labels(sb, st);
        sb_printf(sb, "} %.9f\n", (double)st->sum_ns / 1e9);
        sb_adds(sb, "coraine_http_request_duration_seconds_count{");
        op_labels(sb, st);
        sb_printf(sb, "} %llu\n", (unsigned long long)measured);
    }
    http_stats_t hs;
    http_get_stats(&hs);
    GAUGE(sb, "coraine_http_connections_open", "client connections open now", hs.connections_open);
    COUNTER(sb, "coraine_http_connections_total", "client connections accepted", hs.connections_total);
    COUNTER(sb, "coraine_http_connections_refused_total", "connections beyond --maxConnections, answered 503",
            hs.connections_refused);
    COUNTER(sb, "coraine_http_connections_cut_total",
            "connections cut at a deadline (408 for a head or body not complete in time; idle keep-alive closed)",
            hs.connections_cut);
    COUNTER(sb, "coraine_access_log_dropped_total", "--accessLog lines dropped because the disk fell behind",
            hs.access_log_dropped);
    COUNTER(sb, "coraine_http_offloaded_total",
            "requests of tenants with registrations run on the --forwardThreads pool (they may wait for context sources)",
            hs.offloaded);
    GAUGE(sb, "coraine_http_offload_queued", "offloaded requests waiting for a --forwardThreads thread",
          hs.offload_queued);
    GAUGE(sb, "coraine_http_offload_running", "offloaded requests on a --forwardThreads thread now",
          hs.offload_running);
}

/* ---- store */

static void store(sbuf_t *sb, arena_t *a)
{
    store_stats_t ss;
    ops_stats(api_store, &ss);
    const char **tenants;
    uint64_t    *counts;
    size_t       n = ops_tenant_sizes(api_store, a, METRICS_MAX_TENANTS, &tenants, &counts);

    head(sb, "coraine_store_entities", "gauge", "entities per tenant (\"\": the default tenant)");
    for (size_t i = 0; i < n; i++) {
        sb_adds(sb, "coraine_store_entities{tenant=\"");
        label(sb, tenants[i]);
        sb_printf(sb, "\"} %llu\n", (unsigned long long)counts[i]);
    }
    GAUGE(sb, "coraine_store_entities_all", "entities over all tenants", ss.entities);
    GAUGE(sb, "coraine_store_tenants", "tenants, the default one included", ss.tenants);
    head(sb, "coraine_store_operations_total", "counter", "store operations by kind");
    sb_printf(sb, "coraine_store_operations_total{op=\"create\"} %llu\n", (unsigned long long)ss.creates);
    sb_printf(sb, "coraine_store_operations_total{op=\"update\"} %llu\n", (unsigned long long)ss.updates);
    sb_printf(sb, "coraine_store_operations_total{op=\"delete\"} %llu\n", (unsigned long long)ss.deletes);
    sb_printf(sb, "coraine_store_operations_total{op=\"query\"} %llu\n", (unsigned long long)ss.queries);
    if (!ss.on_disk) return;
    COUNTER(sb, "coraine_store_log_records_total", "records written to the log on disk", ss.log_records);
    COUNTER(sb, "coraine_store_log_bytes_total", "bytes written to the log on disk", ss.log_bytes);
    COUNTER(sb, "coraine_store_log_writes_total", "write system calls to the log", ss.log_appends);
    COUNTER(sb, "coraine_store_log_fsyncs_total", "fdatasyncs of the log", ss.log_fsyncs);
    COUNTER(sb, "coraine_store_log_fsync_groups_total", "writes made durable by those fsyncs (group commit)",
            ss.log_fsync_groups);
    head(sb, "coraine_store_log_fsync_seconds_total", "counter",
         "time spent in the log's fdatasyncs (divided by coraine_store_log_fsyncs_total: the mean latency)");
    sb_printf(sb, "coraine_store_log_fsync_seconds_total %.6f\n", (double)ss.log_fsync_us / 1e6);
    COUNTER(sb, "coraine_store_log_failures_total", "failed writes or fsyncs of the log", ss.log_failures);
    GAUGE(sb, "coraine_store_log_failed", "1 when the log failed and writes are refused", ss.log_failed);
    COUNTER(sb, "coraine_store_snapshots_total", "snapshots written", ss.snapshots);
    head(sb, "coraine_log_fsync_seconds", "histogram",
         "time of each fdatasync of a log on disk: the store's log and corDB history's history.log");
    for (int g = 0; g < CR_FSYNC_LOGS; g++) {
        const char      *name = g == CR_FSYNC_STORE ? "store" : "history";
        cr_fsync_hist_t h;
        uint64_t         cum = 0;
        cr_fsync_hist((cr_fsync_log_t)g, &h);
        for (int k = 0; k <= CR_FSYNC_BUCKETS; k++) {
            cum += h.count[k];
            if (k < CR_FSYNC_BUCKETS)
                sb_printf(sb, "coraine_log_fsync_seconds_bucket{log=\"%s\",le=\"%g\"} %llu\n", name,
                          cr_fsync_bounds[k], (unsigned long long)cum);
            else
                sb_printf(sb, "coraine_log_fsync_seconds_bucket{log=\"%s\",le=\"+Inf\"} %llu\n", name,
                          (unsigned long long)cum);
        }
        sb_printf(sb, "coraine_log_fsync_seconds_sum{log=\"%s\"} %.9f\n", name, (double)h.sum_ns / 1e9);
        sb_printf(sb, "coraine_log_fsync_seconds_count{log=\"%s\"} %llu\n", name, (unsigned long long)h.n);
    }
}

/* ---- notifications, history, forwarding, contexts */

/* One series per endpoint name (two endpoints that differ only in what
 * egress_url_shown hides share one: their depths are added). */
static void endpoint_queues(sbuf_t *sb, arena_t *a)
{
    notify_queue_depth_t *q = arena_alloc(a, NOTIFY_QUEUES_MAX * sizeof *q);
    uint64_t other;
    size_t   n_other, n = notify_queue_depths(q, &other, &n_other);
    head(sb, "coraine_notify_endpoint_queued", "gauge",
         "notifications waiting in an endpoint's queue now, by endpoint (the 64 deepest queues; the others added "
         "up under \"other\")");
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) seen = !strcmp(q[j].endpoint, q[i].endpoint);
        if (seen) continue;
        uint64_t v = q[i].queued;
        for (size_t j = i + 1; j < n; j++)
            if (!strcmp(q[j].endpoint, q[i].endpoint)) v += q[j].queued;
        sb_adds(sb, "coraine_notify_endpoint_queued{endpoint=\"");
        label(sb, q[i].endpoint);
        sb_printf(sb, "\"} %llu\n", (unsigned long long)v);
    }
    if (n_other) sb_printf(sb, "coraine_notify_endpoint_queued{endpoint=\"other\"} %llu\n", (unsigned long long)other);
}

static void notifications(sbuf_t *sb, arena_t *a)
{
    notify_stats_t ns;
    notify_get_stats(&ns);
    GAUGE(sb, "coraine_notify_subscriptions", "subscriptions in the registry", ns.subscriptions);
    COUNTER(sb, "coraine_notify_due_total", "notifications the matcher found due", ns.due);
    COUNTER(sb, "coraine_notify_sent_total", "notifications delivered (2xx, or MQTT published)", ns.sent);
    COUNTER(sb, "coraine_notify_failed_total", "notification attempts that failed", ns.failed);
    COUNTER(sb, "coraine_notify_delivered_changes_total", "due changes in a delivered notification", ns.delivered);
    COUNTER(sb, "coraine_notify_retried_total", "retries of failed notifications", ns.retried);
    COUNTER(sb, "coraine_notify_throttled_total", "due changes not sent because of throttling", ns.throttled);
    head(sb, "coraine_notify_dropped_total", "counter", "due changes not delivered, by reason");
    static const char *reasons[] = {"queue_full", "shutdown", "deleted", "expired", "endpoint_failing",
                                    "cooldown", "retries_exhausted"};
    uint64_t v[] = {ns.dropped_queue_full, ns.dropped_shutdown, ns.dropped_deleted, ns.dropped_expired,
                    ns.dropped_failing, ns.dropped_cooldown, ns.dropped_retries};
    for (size_t i = 0; i < CR_ARRAY_LEN(reasons); i++)
        sb_printf(sb, "coraine_notify_dropped_total{reason=\"%s\"} %llu\n", reasons[i], (unsigned long long)v[i]);
    GAUGE(sb, "coraine_notify_queued", "notifications waiting in the endpoint queues now", ns.queued);
    GAUGE(sb, "coraine_notify_endpoints", "notification endpoints with a queue", ns.endpoints);
    GAUGE(sb, "coraine_notify_queued_max", "notifications waiting in the longest endpoint queue now", ns.queued_max);
    endpoint_queues(sb, a);
}

static void history(sbuf_t *sb)
{
    uint64_t in, se, by, dr, queued;
    bool     reachable;
    if (!ops_history_stats(&in, &se, &by, &dr)) return;
    ops_history_health(&queued, &reachable);
    GAUGE(sb, "coraine_history_instances", "attribute instances held (timescale: appended by this process)", in);
    GAUGE(sb, "coraine_history_series", "attribute series held (corDB)", se);
    GAUGE(sb, "coraine_history_bytes", "memory the history takes (corDB)", by);
    COUNTER(sb, "coraine_history_dropped_total", "instances dropped by --historyRetention/--historyMaxInstances", dr);
    GAUGE(sb, "coraine_history_queued", "changes queued for the history's database, not yet written", queued);
    GAUGE(sb, "coraine_history_reachable", "1 when the history's database answers", reachable);
}

static void source_calls(void *ud, const fwd_source_stats_t *s)
{
    static const char *results[FWD_RESULTS] = {"1xx", "2xx", "3xx", "4xx", "5xx", "timeout", "error"};
    for (int k = 0; k < FWD_RESULTS; k++) {
        if (!s->by_result[k]) continue;
        sb_adds(ud, "coraine_forward_source_calls_total{source=\"");
        label(ud, s->source);
        sb_printf(ud, "\",result=\"%s\"} %llu\n", results[k], (unsigned long long)s->by_result[k]);
    }
}

static void source_latency(void *ud, const fwd_source_stats_t *s)
{
    uint64_t cum = 0;
    for (int k = 0; k <= FWD_LAT_BUCKETS; k++) {
        cum += s->buckets[k];
        sb_adds(ud, "coraine_forward_source_duration_seconds_bucket{source=\"");
        label(ud, s->source);
        if (k < FWD_LAT_BUCKETS) sb_printf(ud, "\",le=\"%g\"} %llu\n", fwd_latency_bounds[k], (unsigned long long)cum);
        else sb_printf(ud, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    sb_adds(ud, "coraine_forward_source_duration_seconds_sum{source=\"");
    label(ud, s->source);
    sb_printf(ud, "\"} %.6f\ncoraine_forward_source_duration_seconds_count{source=\"", (double)s->sum_us / 1e6);
    label(ud, s->source);
    sb_printf(ud, "\"} %llu\n", (unsigned long long)cum);
}

static void source_in_flight(void *ud, const fwd_source_stats_t *s)
{
    sb_adds(ud, "coraine_forward_source_in_flight{source=\"");
    label(ud, s->source);
    sb_printf(ud, "\"} %llu\n", (unsigned long long)s->in_flight);
}

static void forwarding(sbuf_t *sb)
{
    reg_stats_t gs;
    fwd_stats_t fs;
    reg_get_stats(&gs);
    fwd_get_stats(&fs);
    GAUGE(sb, "coraine_registrations", "context source registrations", gs.registrations);
    COUNTER(sb, "coraine_forward_requests_total", "requests forwarded to context sources", fs.forwarded);
    COUNTER(sb, "coraine_forward_failures_total", "forwarded requests that failed", fs.failed);
    head(sb, "coraine_forward_source_calls_total", "counter",
         "requests sent to a context source, by source endpoint (the first 64; later ones: \"other\") and result "
         "(the answer's status class, timeout, error: no answer)");
    fwd_foreach_source(source_calls, sb);
    head(sb, "coraine_forward_source_duration_seconds", "histogram",
         "time from sending a request to a context source to its answer, by source endpoint");
    fwd_foreach_source(source_latency, sb);
    head(sb, "coraine_forward_source_in_flight", "gauge",
         "requests sent to a context source and not answered yet, by source endpoint");
    fwd_foreach_source(source_in_flight, sb);
}

static void contexts(sbuf_t *sb)
{
    ld_stats_t ls;
    ld_get_stats(&ls);
    COUNTER(sb, "coraine_context_downloads_total", "remote @context documents downloaded", ls.downloads);
    COUNTER(sb, "coraine_context_download_failures_total", "remote @context downloads that failed",
            ls.download_failures);
    COUNTER(sb, "coraine_context_cache_hits_total", "@context cache hits (built contexts and documents)",
            ls.cache_hits);
    GAUGE(sb, "coraine_context_cached", "built @contexts in the cache", ls.cached);
    GAUGE(sb, "coraine_context_cached_bytes", "bytes of built @contexts in the cache", ls.cached_bytes);
    GAUGE(sb, "coraine_context_documents", "remote @context documents kept", ls.documents);
    GAUGE(sb, "coraine_context_document_bytes", "bytes of remote @context documents kept", ls.document_bytes);
    COUNTER(sb, "coraine_context_evictions_total", "@context cache evictions", ls.evictions);
    render_cache_stats_t rs;
    render_cache_get_stats(&rs);
    GAUGE(sb, "coraine_render_cache_bytes", "bytes of cached entity renderings", rs.bytes);
    GAUGE(sb, "coraine_render_cache_entries", "cached entity renderings", rs.entries);
    COUNTER(sb, "coraine_render_cache_hits_total", "render cache hits", rs.hits);
    COUNTER(sb, "coraine_render_cache_misses_total", "render cache misses", rs.misses);
}

static void auth(sbuf_t *sb)
{
    auth_stats_t as;
    if (!auth_on) return;
    auth_get_stats(&as);
    COUNTER(sb, "coraine_auth_tokens_verified_total", "bearer tokens whose signature and claims were checked", as.verified);
    COUNTER(sb, "coraine_auth_cache_hits_total", "requests whose token was known (a hash lookup)", as.cache_hits);
    COUNTER(sb, "coraine_auth_refused_total", "requests answered 401 (no token, a bad or expired one)", as.refused);
    COUNTER(sb, "coraine_auth_forbidden_total", "requests answered 403 (a tenant or a write not granted)", as.forbidden);
    GAUGE(sb, "coraine_auth_cached_tokens", "verified tokens in the cache", as.cached);
    COUNTER(sb, "coraine_auth_jwks_fetches_total", "fetches of a --jwks URL after the start (refresh, unknown kid)",
            as.jwks_fetches);
    COUNTER(sb, "coraine_auth_jwks_refetches_total", "of them, for a token whose kid none of the keys had",
            as.jwks_refetches);
}

/* ---- the process */

static void process(sbuf_t *sb)
{
    head(sb, "coraine_build_info", "gauge", "the version and commit of this build (value 1)");
    sb_printf(sb, "coraine_build_info{version=\"%s\",commit=\"%s\",database=\"%s\"} 1\n", CR_VERSION, CR_GIT_COMMIT,
              cr_config.database);
    head(sb, "coraine_uptime_seconds", "gauge", "seconds since the broker started");
    sb_printf(sb, "coraine_uptime_seconds %.3f\n", (double)(cr_now_ms() - cr_config.started_ms) / 1000);
    unsigned long long pages_total = 0, pages_res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &pages_total, &pages_res) != 2) pages_total = pages_res = 0;
        fclose(f);
    }
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) page = 4096;
    GAUGE(sb, "coraine_process_resident_bytes", "resident memory of the process", pages_res * (uint64_t)page);
    GAUGE(sb, "coraine_process_virtual_bytes", "virtual memory of the process", pages_total * (uint64_t)page);
    GAUGE(sb, "coraine_interned_names", "interned names (they live as long as the process)", intern_count());
    blockpool_stats_t bp;
    blockpool_stats(&bp);
    GAUGE(sb, "coraine_block_pool_bytes", "frozen entities in the block pool (--hugePages): their size classes' bytes",
          (uint64_t)bp.in_use);
    GAUGE(sb, "coraine_block_pool_slab_bytes", "the block pool's slabs that hold them (one empty slab per class at most)",
          (uint64_t)bp.slabs);
    GAUGE(sb, "coraine_block_pool_released_bytes", "emptied slabs the block pool gave back to the system, not reused yet",
          (uint64_t)bp.released);
}

void api_metrics(request_t *r)
{
    sbuf_t *sb = &r->out;
    sb_clear(sb);
    process(sb);
    requests(sb, r->arena);
    store(sb, r->arena);
    notifications(sb, r->arena);
    history(sb);
    forwarding(sb);
    contexts(sb);
    auth(sb);
    reply_body(r, 200, "text/plain; version=0.0.4; charset=utf-8");
}

/* ---- health and readiness */

void api_health(request_t *r)
{
    sb_adds(&r->out, "{\"status\":\"ok\"}");
    reply_body(r, 200, "application/json");
}

void api_ready(request_t *r)
{
    problem_t p = {0};
    if (atomic_load(&draining)) {
        problem_set(&p, PB_HTTP, "the broker is shutting down");
    } else if (!ops_ready(api_store, &p)) {
        /* p says which */
    } else {
        sb_adds(&r->out, "{\"status\":\"ready\"}");
        reply_body(r, 200, "application/json");
        return;
    }
    p.status = 503;
    reply_problem(r, &p);
    reply_header(r, "Retry-After", "5");
}
