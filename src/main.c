/*
 * main.c - coraine: flags -> configuration, start the parts (contexts,
 * model, store, HTTP), wait for SIGINT/SIGTERM, stop them in reverse order.
 * SIGUSR1 asks corDB on disk for a snapshot (as POST /admin/snapshot does);
 * SIGHUP reopens the log files (after logrotate moved them) and, with --https,
 * reads the certificate and key again.
 *
 * The stop (doc/operations.md) is bounded by --shutdownTimeout: no new
 * connection, the requests waiting for a remote @context answered 503 at
 * once, the other requests under way finished, then the notification queue
 * (at most --notifierDrain of what is left) and the history queue (what is
 * left) drained, the store's log synced and closed; exit 0.
 */
#include "api/api.h"
#include "auth/auth.h"
#include "core/core.h"
#include "cor/cor.h"
#include "history/history.h"
#include "http/http.h"
#include "ld/ld.h"
#include "model/model.h"
#include "notify/notify.h"
#include "ops/ops.h"
#include "fwd/fwd.h"
#include "fwd/fwd_sub.h"
#include "reg/reg.h"
#include "store/store.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* fwd/fwd_map.c keeps its EntityMaps through ops/ (the store's only caller). */
static bool emap_put(void *ud, const char *tenant, const char *id, const char *text, size_t len)
{
    return ops_emap_put(ud, tenant, id, text, len);
}

static void emap_del(void *ud, const char *tenant, const char *id)
{
    ops_emap_delete(ud, tenant, id);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) {
            printf("coraine %s (%s)\n", CR_VERSION, CR_GIT_COMMIT);
            return 0;
        }
    if (!cr_config_load(argc, argv)) return 2;
    if (!cr_config.foreground) {
        /* a daemon: detach, and log to --logFile (default /tmp/coraine.log) */
        if (!cr_config.log_file) cr_config.log_file = "/tmp/coraine.log";
        if (daemon(1, 0) != 0) {
            perror("coraine: daemon");
            return 1;
        }
    }
    cr_log_open(cr_config.log_file, cr_config.log_level);

    /* SIGINT and SIGTERM are blocked before any thread starts, so every
     * thread inherits the mask and only the main thread takes them, in
     * sigwait() below (a handler with pause() misses a signal delivered to
     * one of the other threads, and the broker would never stop). SIGUSR1
     * (a snapshot, e.g. before a backup) is taken the same way. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGUSR1);
    sigaddset(&stop_signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (!ld_init()) {
        LOG_E("cannot load the core @context");
        return 1;
    }
    ld_set_base_url(cr_config.public_url);
    model_init();

    problem_t p = {0};
    store_t  *store = store_open(&p);
    if (!store) {
        LOG_E("cannot open the store: %s", p.detail);
        return 1;
    }
    history_t *history = history_open(store, &p);
    if (!history && p.kind) {
        LOG_E("cannot open the history: %s", p.detail);
        store_close(store);
        return 2;
    }
    if (!notify_start(store, &p)) {
        LOG_E("cannot start the notifier: %s", p.detail);
        store_close(store);
        history_close(history);
        return 1;
    }
    fwd_sub_init();            /* distributed subscriptions take note of what is restored */
    size_t n_subs = ops_sub_restore(store);
    if (n_subs) LOG_I("%zu subscriptions restored", n_subs);
    size_t n_ctx = ops_ctx_restore(store);
    if (n_ctx) LOG_I("%zu hosted @contexts restored", n_ctx);
    if (!fwd_start(&p)) {
        LOG_E("cannot start forwarding: %s", p.detail);
        notify_stop();
        store_close(store);
        return 1;
    }
    if (!fwd_sub_start(&p)) {
        LOG_E("%s", p.detail);
        notify_stop();
        fwd_stop();
        store_close(store);
        return 1;
    }
    size_t n_maps = ops_emap_restore(store, fwd_map_restore);   /* EntityMaps, then kept as they change */
    if (n_maps) LOG_I("%zu entity maps restored", n_maps);
    fwd_map_set_keeper(&(fwd_map_keeper_t){emap_put, emap_del, store});
    size_t n_regs = ops_reg_restore(store);
    if (n_regs) LOG_I("%zu context source registrations restored", n_regs);
    size_t n_csubs = ops_csub_restore(store);
    if (n_csubs) LOG_I("%zu context source registration subscriptions restored", n_csubs);
    if (ops_objsync_start(store)) LOG_I("objects written by other processes loaded every %d ms", cr_config.sync_interval_ms);
    api_init(store);
    if (!auth_start(&p)) {
        LOG_E("%s", p.detail);
        fwd_sub_stop();
        notify_stop();
        fwd_stop();
        store_close(store);
        history_close(history);
        return 2;
    }

    size_t              n;
    const http_route_t *routes = api_routes(&n);
    if (!cor_start(routes, n, fwd_alias(), &p)) {      /* cor://: the client, and --corPort's listener */
        LOG_E("%s", p.detail);
        fwd_sub_stop();
        notify_stop();
        store_close(store);
        history_close(history);
        return 1;
    }
    http_server_t      *srv = http_start(routes, n, &p);
    if (!srv) {
        cor_stop();
        LOG_E("%s", p.detail);
        ops_objsync_stop();
        fwd_sub_stop();
        notify_stop();
        store_close(store);
        history_close(history);
        return 1;
    }
    fwd_sub_ready();           /* cor:// and HTTP up: sources may be asked for orphans */

    LOG_I("coraine listening on %s:%d (store %s %s%s, %d HTTP threads)", cr_config.bind_address, cr_config.port,
          cr_config.database, !strcasecmp(cr_config.database, "corDB") ? (cr_config.db_dir ? "on disk in " : "in RAM") : "at ",
          !strcasecmp(cr_config.database, "corDB") ? (cr_config.db_dir ? cr_config.db_dir : "") : cr_config.db_name,
          cr_config.connection_pool_size);

    int sig = 0;
    for (;;) {
        if (sigwait(&stop_signals, &sig) != 0) continue;
        if (sig == SIGHUP) {
            if (cr_log_reopen() && (cr_config.log_file || cr_config.access_log))
                LOG_I("SIGHUP: log file reopened");
            http_reopen_logs();
            http_reload_tls();
            continue;
        }
        if (sig != SIGUSR1) break;
        /* the snapshot runs in the store's own thread; this one only asks */
        problem_t sp = {0};
        if (ops_snapshot_start(store, &sp))
            LOG_I("SIGUSR1: a snapshot of corDB is started (GET /admin/snapshot tells when it is written)");
        else
            LOG_W("SIGUSR1: no snapshot: %s", sp.detail);
    }

    LOG_I("stopping (%s): finishing the requests under way, then the queues, within %d s",
          sig == SIGINT ? "SIGINT" : "SIGTERM", cr_config.shutdown_timeout);
    int64_t deadline_ns = cr_mono_ns() + (int64_t)cr_config.shutdown_timeout * 1000000000;
    cr_config.shutdown_deadline_ms = cr_now_ms() + (int64_t)cr_config.shutdown_timeout * 1000;
    api_set_draining();
    http_drain(srv, 0);        /* no new connection from now on */
    ld_stop();                 /* requests waiting for a @context download answer now (503) */
    int left = http_drain(srv, deadline_ns);
    if (left) LOG_W("%d requests still under way after --shutdownTimeout: their connections are closed", left);
    cor_stop();                /* cor:// requests finish before the parts they use stop */
    http_stop(srv);
    ops_objsync_stop();        /* before the registries it loads into */
    reg_shutdown();            /* registration subscriptions: before the notifier they send through */
    fwd_sub_stop();            /* distributed subscriptions: before the notifier they relay through */
    int64_t rest_ms = (deadline_ns - cr_mono_ns()) / 1000000;
    if (rest_ms < 0) rest_ms = 0;
    if (cr_config.notifier_drain_ms > rest_ms) cr_config.notifier_drain_ms = (int)rest_ms;
    notify_stop();
    fwd_stop();
    store_close(store);
    history_close(history);
    ld_shutdown();
    auth_stop();
    LOG_I("stopped");
    return 0;
}
