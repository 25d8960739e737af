/*
 * objsync.c - stored objects written by other coraine processes on the same
 * database (--database mongoc): every --syncInterval ms a thread asks the
 * store whether anything changed (store_obj_changed: one version document)
 * and, when it did, loads what the other processes created, changed or
 * deleted into this process's registries (subscriptions, context source
 * registrations and their subscriptions), each under the mutex that the
 * kind's own writes hold. So a subscription created through one process
 * is matched by every process within about --syncInterval, and a change is
 * notified by the process that committed it (its change hooks), once.
 * Hosted @contexts are not synced (they are served by the process they were
 * created on and by every process after a restart).
 * A store that nobody else writes (corDB) answers false: the thread is not
 * started.
 * The same per-kind steps serve a write the store undid (corDB, --dbSync
 * always, a failed fsync after the answer was built: store_set_obj_undo):
 * the registry of the kind is brought back to the store's state for that
 * object (ops_*_resync) before the write is answered 503.
 */
#include <pthread.h>
#include <time.h>

#include "ops.h"
#include "../notify/notify.h"
#include "../reg/reg.h"

static struct {
    pthread_t       thread;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    bool            running, stop;
    store_t        *store;
} g_sync = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void sync_once(store_t *s)
{
    store_outbox_sweep(s);                  /* the notification outbox (store.h) */
    store_ctr_flush(s);             /* the counters this process added, written; every process's read */
    if (!store_obj_changed(s))
        return;
    ops_sub_sync(s);
    ops_reg_sync(s);
    ops_csub_sync(s);
}

static void *sync_main(void *arg)
{
    store_t *s = arg;
    int      ms = cr_config.sync_interval_ms > 0 ? cr_config.sync_interval_ms : 1000;

    pthread_mutex_lock(&g_sync.mu);
    while (!g_sync.stop) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g_sync.cv, &g_sync.mu, &ts);
        if (g_sync.stop)
            break;
        pthread_mutex_unlock(&g_sync.mu);
        sync_once(s);
        pthread_mutex_lock(&g_sync.mu);
    }
    pthread_mutex_unlock(&g_sync.mu);
    return NULL;
}

/* The subscriptions' counters in the store (notify_set_totals) */
static void totals_add(void *ud, const char *tenant, const char *id, bool ok, int64_t at)
{
    store_ctr_t d = { .sent = ok, .failed = !ok, .last_notification = at };

    if (ok)
        d.last_success = at;
    else
        d.last_failure = at;
    store_ctr_add(ud, tenant, STORE_OBJ_SUBSCRIPTION, id, &d);
}

static bool totals_read(void *ud, const char *tenant, const char *id, notify_totals_t *t)
{
    store_ctr_t tot;

    if (!store_ctr_read(ud, tenant, STORE_OBJ_SUBSCRIPTION, id, &tot))
        return false;
    *t = (notify_totals_t){ tot.sent, tot.failed, tot.last_notification, tot.last_success, tot.last_failure };
    return true;
}

/* The registrations' counters in the store (reg_set_totals): every forward is sent, some failed */
static void rtotals_add(void *ud, const char *tenant, const char *id, bool ok, int64_t at)
{
    store_ctr_t d = { .sent = 1, .failed = !ok, .last_notification = at };

    if (ok)
        d.last_success = at;
    else
        d.last_failure = at;
    store_ctr_add(ud, tenant, STORE_OBJ_REGISTRATION, id, &d);
}

static bool rtotals_read(void *ud, const char *tenant, const char *id, reg_totals_t *t)
{
    store_ctr_t tot;

    if (!store_ctr_read(ud, tenant, STORE_OBJ_REGISTRATION, id, &tot))
        return false;
    *t = (reg_totals_t){ tot.sent, tot.failed, tot.last_success, tot.last_failure };
    return true;
}

/* A write the store undid (store_obj_undo_fn): its kind's registry follows. */
static void obj_undo(void *ud, store_t *s, const char *tenant, int kind, const char *id)
{
    (void)ud;
    switch (kind) {
    case STORE_OBJ_SUBSCRIPTION:         ops_sub_resync(s, tenant, id); break;
    case STORE_OBJ_REGISTRATION:         ops_reg_resync(s, tenant, id); break;
    case STORE_OBJ_CSOURCE_SUBSCRIPTION: ops_csub_resync(s, tenant, id); break;
    case STORE_OBJ_CONTEXT:              ops_ctx_resync(s, id); break;
    case STORE_OBJ_ENTITY_MAP:           break;   /* a query's map stays in memory until it expires;
                                                     only its copy for a restart was not written */
    default:                             LOG_E("ops: an undone object of unknown kind %d", kind); break;
    }
}

bool ops_objsync_start(store_t *s)
{
    pthread_condattr_t ca;

    store_set_obj_undo(s, obj_undo, NULL);
    if (!store_obj_changed(s))
        return false;               /* not shared (corDB): the first call of a shared store is true */
    if (store_ctr_shared(s)) {
        notify_set_totals(&(notify_totals_hooks_t){ totals_add, totals_read, s });
        reg_set_totals(&(reg_totals_hooks_t){ rtotals_add, rtotals_read, s });
    }
    /* what others wrote since this process restored its objects */
    ops_sub_sync(s);
    ops_reg_sync(s);
    ops_csub_sync(s);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_sync.cv, &ca);
    pthread_condattr_destroy(&ca);
    g_sync.stop  = false;
    g_sync.store = s;
    if (pthread_create(&g_sync.thread, NULL, sync_main, s) != 0) {
        LOG_E("ops: cannot start the stored objects' sync thread");
        pthread_cond_destroy(&g_sync.cv);
        return false;
    }
    g_sync.running = true;
    return true;
}

void ops_objsync_stop(void)
{
    if (!g_sync.running)
        return;
    pthread_mutex_lock(&g_sync.mu);
    g_sync.stop = true;
    pthread_cond_signal(&g_sync.cv);
    pthread_mutex_unlock(&g_sync.mu);
    pthread_join(g_sync.thread, NULL);
    pthread_cond_destroy(&g_sync.cv);
    g_sync.running = false;
}
