/*
 * admin.c - the broker about itself: GET /version (what was built, how),
 * GET /statistics (request, store and @context counters), POST
 * /admin/snapshot (a snapshot of corDB on disk now). The @context documents
 * it serves are api/contexts.c's.
 */
#include "api.h"

#include "../cor/cor.h"
#include "../fwd/fwd.h"
#include "../notify/notify.h"
#include "../reg/reg.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#ifndef CR_CFLAGS
#define CR_CFLAGS ""
#endif
#ifndef CR_PGO_TRAINING              /* make pgo / make tune: what trained the profile */
#define CR_PGO_TRAINING ""
#endif

/* The allocator that serves malloc in this process, found at run time (an
 * LD_PRELOAD'ed one is seen whatever the variable's spelling): jemalloc
 * exports mallctl, tcmalloc its MallocExtension C API; *lib gets the file
 * that defines malloc (dladdr), "" when unknown. */
static const char *allocator_in_use(const char **lib)
{
    Dl_info di;
    void *(*volatile m)(size_t) = malloc;

    *lib = dladdr((void *)m, &di) && di.dli_fname ? di.dli_fname : "";
#if defined(__SANITIZE_ADDRESS__)
    return "asan";                   /* the sanitizer's allocator intercepts malloc */
#elif defined(__SANITIZE_THREAD__)
    return "tsan";
#endif
    if (dlsym(RTLD_DEFAULT, "mallctl")) return "jemalloc";
    if (dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty") || dlsym(RTLD_DEFAULT, "tc_malloc"))
        return "tcmalloc";
    return "glibc";
}

void api_version(request_t *r)
{
    json_writer_t w;
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "name"); jw_string(&w, "coraine");
    jw_key(&w, "version"); jw_string(&w, CR_VERSION);
    jw_key(&w, "gitCommit"); jw_string(&w, CR_GIT_COMMIT);
    jw_key(&w, "compiler"); jw_string(&w, "gcc " __VERSION__);
    jw_key(&w, "cflags"); jw_string(&w, CR_CFLAGS);
#ifdef CR_PGO
    jw_key(&w, "pgo"); jw_bool(&w, true);
#else
    jw_key(&w, "pgo"); jw_bool(&w, false);
#endif
    jw_key(&w, "pgoTraining"); jw_string(&w, CR_PGO_TRAINING);
#ifdef CR_LTO
    jw_key(&w, "lto"); jw_bool(&w, true);
#else
    jw_key(&w, "lto"); jw_bool(&w, false);
#endif
    const char *alloc_lib;
    jw_key(&w, "allocator"); jw_string(&w, allocator_in_use(&alloc_lib));
    jw_key(&w, "allocatorLibrary"); jw_string(&w, alloc_lib);
    jw_key(&w, "hugePages"); jw_bool(&w, entity_blocks_pooled());
    jw_key(&w, "dbLockPrefer"); jw_string(&w, cr_config.db_lock_prefer);
    jw_key(&w, "ngsildVersion"); jw_string(&w, "1.9.1");
    jw_key(&w, "coreContext"); jw_string(&w, LD_CORE_CONTEXT_URL);
    jw_key(&w, "database"); jw_string(&w, cr_config.database);
    jw_object_end(&w);
    reply_body(r, 200, "application/json");
}

/* GET /admin/snapshot: the last snapshot; POST: start one (202), in the
 * store's thread (202, with the last one). A backup polls GET until
 * `running` is false and `seq` is past the one POST answered. */
static void snapshot_reply(request_t *r, int status, const store_snapshot_info_t *si, bool running)
{
    json_writer_t w;

    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "running"); jw_bool(&w, running);
    if (si->file[0]) {
        jw_key(&w, "file"); jw_string(&w, si->file);
        jw_key(&w, "seq"); jw_int(&w, (int64_t)si->seq);
        jw_key(&w, "entities"); jw_int(&w, (int64_t)si->entities);
        jw_key(&w, "objects"); jw_int(&w, (int64_t)si->objects);
        jw_key(&w, "bytes"); jw_int(&w, (int64_t)si->bytes);
        jw_key(&w, "ms"); jw_number(&w, si->ms);
    }
    if (si->error[0]) {
        jw_key(&w, "error"); jw_string(&w, si->error);
    }
    jw_object_end(&w);
    reply_body(r, status, "application/json");
}

void api_admin_snapshot_get(request_t *r)
{
    store_snapshot_info_t si;
    problem_t             p = { 0 };
    bool                  running;

    if (!ops_snapshot_last(api_store, &si, &running, &p)) {
        reply_problem(r, &p);
        return;
    }
    snapshot_reply(r, 200, &si, running);
}

void api_admin_snapshot(request_t *r)
{
    store_snapshot_info_t si;
    problem_t             p = { 0 };
    bool                  running;

    if (!ops_snapshot_last(api_store, &si, &running, &p) || !ops_snapshot_start(api_store, &p)) {
        reply_problem(r, &p);
        return;
    }
    snapshot_reply(r, 202, &si, true);
}

void api_statistics(request_t *r)
{
    http_stats_t  hs;
    store_stats_t ss;
    ld_stats_t    ls;
    json_writer_t w;
    static const char *methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"};

    http_get_stats(&hs);
    ops_stats(api_store, &ss);
    ld_get_stats(&ls);
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "requests"); jw_int(&w, (int64_t)hs.requests);
    jw_key(&w, "requestsByMethod");
    jw_object_begin(&w);
    for (int i = 0; i < 7; i++) { jw_key(&w, methods[i]); jw_int(&w, (int64_t)hs.by_method[i]); }
    jw_object_end(&w);
    jw_key(&w, "responsesByClass");
    jw_object_begin(&w);
    for (int i = 1; i <= 5; i++) {
        char k[4] = {(char)('0' + i), 'x', 'x', 0};
        jw_key(&w, k);
        jw_int(&w, (int64_t)hs.by_class[i]);
    }
    jw_object_end(&w);
    jw_key(&w, "connectionsOpen"); jw_int(&w, (int64_t)hs.connections_open);
    jw_key(&w, "store");
    jw_object_begin(&w);
    jw_key(&w, "entities"); jw_int(&w, (int64_t)ss.entities);
    jw_key(&w, "tenants"); jw_int(&w, (int64_t)ss.tenants);
    jw_key(&w, "creates"); jw_int(&w, (int64_t)ss.creates);
    jw_key(&w, "updates"); jw_int(&w, (int64_t)ss.updates);
    jw_key(&w, "deletes"); jw_int(&w, (int64_t)ss.deletes);
    jw_key(&w, "queries"); jw_int(&w, (int64_t)ss.queries);
    if (ss.scans) {
        jw_key(&w, "scannedDocuments"); jw_int(&w, (int64_t)ss.scan_docs);
        jw_key(&w, "scannedMatched"); jw_int(&w, (int64_t)ss.scan_matched);
    }
    if (ss.on_disk) {
        jw_key(&w, "disk");
        jw_object_begin(&w);
        jw_key(&w, "logRecords"); jw_int(&w, (int64_t)ss.log_records);
        jw_key(&w, "logBytes"); jw_int(&w, (int64_t)ss.log_bytes);
        jw_key(&w, "logWrites"); jw_int(&w, (int64_t)ss.log_appends);
        jw_key(&w, "fsyncs"); jw_int(&w, (int64_t)ss.log_fsyncs);
        jw_key(&w, "groupsSynced"); jw_int(&w, (int64_t)ss.log_fsync_groups);
        jw_key(&w, "fsyncMicros"); jw_int(&w, (int64_t)ss.log_fsync_us);
        jw_key(&w, "heldWrites"); jw_int(&w, (int64_t)ss.log_held);
        jw_key(&w, "failures"); jw_int(&w, (int64_t)ss.log_failures);
        jw_key(&w, "snapshots"); jw_int(&w, (int64_t)ss.snapshots);
        jw_key(&w, "failed"); jw_bool(&w, ss.log_failed);
        jw_object_end(&w);
    }
    jw_object_end(&w);
    jw_key(&w, "contexts");
    jw_object_begin(&w);
    jw_key(&w, "downloads"); jw_int(&w, (int64_t)ls.downloads);
    jw_key(&w, "downloadFailures"); jw_int(&w, (int64_t)ls.download_failures);
    jw_key(&w, "cacheHits"); jw_int(&w, (int64_t)ls.cache_hits);
    jw_key(&w, "cached"); jw_int(&w, (int64_t)ls.cached);
    jw_key(&w, "cachedBytes"); jw_int(&w, (int64_t)ls.cached_bytes);
    jw_key(&w, "documents"); jw_int(&w, (int64_t)ls.documents);
    jw_key(&w, "documentBytes"); jw_int(&w, (int64_t)ls.document_bytes);
    jw_key(&w, "evictions"); jw_int(&w, (int64_t)ls.evictions);
    jw_object_end(&w);
    render_cache_stats_t rs;
    render_cache_get_stats(&rs);
    jw_key(&w, "renderCache");
    jw_object_begin(&w);
    jw_key(&w, "bytes"); jw_int(&w, (int64_t)rs.bytes);
    jw_key(&w, "entries"); jw_int(&w, (int64_t)rs.entries);
    jw_key(&w, "hits"); jw_int(&w, (int64_t)rs.hits);
    jw_key(&w, "misses"); jw_int(&w, (int64_t)rs.misses);
    jw_key(&w, "limitBytes"); jw_int(&w, (int64_t)cr_config.render_cache_mb << 20);
    jw_object_end(&w);
    notify_stats_t ns;
    notify_get_stats(&ns);
    jw_key(&w, "notifications");
    jw_object_begin(&w);
    jw_key(&w, "subscriptions"); jw_int(&w, (int64_t)ns.subscriptions);
    jw_key(&w, "due"); jw_int(&w, (int64_t)ns.due);
    jw_key(&w, "sent"); jw_int(&w, (int64_t)ns.sent);
    jw_key(&w, "failed"); jw_int(&w, (int64_t)ns.failed);
    jw_key(&w, "droppedQueueFull"); jw_int(&w, (int64_t)ns.dropped_queue_full);
    jw_key(&w, "droppedDeleted"); jw_int(&w, (int64_t)ns.dropped_deleted);
    jw_key(&w, "droppedShutdown"); jw_int(&w, (int64_t)ns.dropped_shutdown);
    jw_key(&w, "droppedExpired"); jw_int(&w, (int64_t)ns.dropped_expired);
    jw_key(&w, "droppedEndpointFailing"); jw_int(&w, (int64_t)ns.dropped_failing);
    jw_key(&w, "throttled"); jw_int(&w, (int64_t)ns.throttled);
    jw_key(&w, "delivered"); jw_int(&w, (int64_t)ns.delivered);
    jw_key(&w, "retried"); jw_int(&w, (int64_t)ns.retried);
    jw_key(&w, "droppedCooldown"); jw_int(&w, (int64_t)ns.dropped_cooldown);
    jw_key(&w, "droppedRetriesExhausted"); jw_int(&w, (int64_t)ns.dropped_retries);
    jw_key(&w, "queued"); jw_int(&w, (int64_t)ns.queued);
    jw_key(&w, "endpoints"); jw_int(&w, (int64_t)ns.endpoints);
    jw_object_end(&w);
    uint64_t hi, hs_, hb, hd;
    if (ops_history_stats(&hi, &hs_, &hb, &hd)) {
        jw_key(&w, "history");
        jw_object_begin(&w);
        jw_key(&w, "backend"); jw_string(&w, cr_config.history);
        jw_key(&w, "instances"); jw_int(&w, (int64_t)hi);
        jw_key(&w, "series"); jw_int(&w, (int64_t)hs_);
        jw_key(&w, "bytes"); jw_int(&w, (int64_t)hb);
        jw_key(&w, "dropped"); jw_int(&w, (int64_t)hd);
        jw_object_end(&w);
    }
    reg_stats_t gs;
    fwd_stats_t fs;
    reg_get_stats(&gs);
    fwd_get_stats(&fs);
    jw_key(&w, "distributed");
    jw_object_begin(&w);
    jw_key(&w, "registrations"); jw_int(&w, (int64_t)gs.registrations);
    jw_key(&w, "forwarded"); jw_int(&w, (int64_t)fs.forwarded);
    jw_key(&w, "forwardFailed"); jw_int(&w, (int64_t)fs.failed);
    cor_stats_t cs;               /* cor:// (doc/cor-protocol.md): served, and sent as a client */
    cor_get_stats(&cs);
    jw_key(&w, "cor");
    jw_object_begin(&w);
    jw_key(&w, "connectionsAccepted"); jw_int(&w, (int64_t)cs.server_connections);
    jw_key(&w, "requestsServed"); jw_int(&w, (int64_t)cs.server_requests);
    jw_key(&w, "protocolErrors"); jw_int(&w, (int64_t)cs.server_errors);
    jw_key(&w, "connectionsMade"); jw_int(&w, (int64_t)cs.client_connects);
    jw_key(&w, "requestsSent"); jw_int(&w, (int64_t)cs.client_requests);
    jw_key(&w, "requestsFailed"); jw_int(&w, (int64_t)cs.client_failures);
    jw_object_end(&w);
    jw_object_end(&w);
    jw_key(&w, "internedNames"); jw_int(&w, (int64_t)intern_count());
    jw_object_end(&w);
    reply_body(r, 200, "application/json");
}
