/*
 * store.c - the store interface (store.h) over its backends.
 *
 * store_open() picks the backend from cr_config.database: corDB (the default,
 * src/store/cordb/) or mongoc (MongoDB, not built yet: opening it fails with
 * OperationNotSupported). This layer owns what every backend shares: the
 * change hooks (run here, after the backend released its lock, then the
 * change's references are dropped) and the operation counters.
 *
 * With a single backend the calls go straight to corDB; the MongoDB backend
 * will turn them into a switch on s->backend.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>

#include "store.h"
#include "cordb/cordb.h"

#define STORE_MAX_HOOKS 16

typedef enum { BACKEND_CORDB = 1 } store_backend_t;

typedef struct store_hook {
    store_hook_fn fn;
    void         *ud;
} store_hook_t;

struct store {
    store_backend_t  backend;
    cdb_t           *cdb;
    store_hook_t     hooks[STORE_MAX_HOOKS];
    _Atomic size_t   n_hooks;
    _Atomic uint64_t creates, updates, deletes, queries;
};

store_t *store_open(problem_t *p)
{
    const char *db   = cr_config.database;
    bool        pref = false;
    store_t    *s;

    if (db && *db && strcasecmp(db, "corDB") != 0) {
        if (strcasecmp(db, "mongoc") == 0 || strcasecmp(db, "mongodb") == 0)
            problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                        "--database %s: the MongoDB backend is not built yet; use --database corDB",
                        db);
        else
            problem_set(p, PB_BAD_REQUEST_DATA, "--database %.100s: unknown store (corDB or mongoc)",
                        db);
        return NULL;
    }
    if (cr_config.db_dir && *cr_config.db_dir) {
        problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                    "--dbDir %.200s: corDB on disk is not built yet; run without --dbDir (RAM)",
                    cr_config.db_dir);
        return NULL;
    }
    if (cr_config.db_lock_prefer && *cr_config.db_lock_prefer) {
        if (strcasecmp(cr_config.db_lock_prefer, "writes") == 0) {
            pref = true;
        } else if (strcasecmp(cr_config.db_lock_prefer, "reads") != 0) {
            problem_set(p, PB_BAD_REQUEST_DATA, "--dbLockPrefer %.100s: expected reads or writes",
                        cr_config.db_lock_prefer);
            return NULL;
        }
    }

    s = calloc(1, sizeof(*s));
    if (!s) {
        problem_set(p, PB_INTERNAL_ERROR, "store: out of memory");
        return NULL;
    }
    s->backend = BACKEND_CORDB;
    s->cdb     = cdb_open(pref, p);
    if (!s->cdb) {
        free(s);
        return NULL;
    }
    LOG_I("store: corDB in RAM, lock preference %s", pref ? "writes" : "reads");
    return s;
}

void store_close(store_t *s)
{
    if (!s)
        return;
    cdb_close(s->cdb);
    free(s);
}

/* Hooks are added at start-up, before the store is shared between threads. */
void store_add_hook(store_t *s, store_hook_fn fn, void *ud)
{
    size_t n = atomic_load(&s->n_hooks);

    if (n == STORE_MAX_HOOKS) {
        LOG_E("store: more than %d change hooks; hook ignored", STORE_MAX_HOOKS);
        return;
    }
    s->hooks[n].fn = fn;
    s->hooks[n].ud = ud;
    atomic_store_explicit(&s->n_hooks, n + 1, memory_order_release);
}

/* Runs the hooks on a committed change (no lock held), then drops the
 * change's references. */
static void store_emit(void *ud, const store_change_t *ch)
{
    store_t *s = ud;
    size_t   n = atomic_load_explicit(&s->n_hooks, memory_order_acquire);

    for (size_t i = 0; i < n; i++)
        s->hooks[i].fn(s->hooks[i].ud, ch);
}

static void store_commit(store_t *s, store_change_t *ch)
{
    if (!ch->before && !ch->after)          /* a modify that changed nothing */
        return;
    store_emit(s, ch);
    if (ch->before)
        entity_unref(ch->before);
    if (ch->after)
        entity_unref(ch->after);
}

static void count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

bool store_tenant_exists(store_t *s, const char *tenant)
{
    return cdb_tenant_exists(s->cdb, tenant);
}

void store_tenants(store_t *s, void (*fn)(void *ud, const char *tenant), void *ud)
{
    cdb_tenants(s->cdb, fn, ud);
}

/* ------------------------------------------------------------ entities */

bool store_create(store_t *s, const char *tenant, const cr_entity_t *draft, problem_t *p)
{
    store_change_t ch;

    if (!cdb_create(s->cdb, tenant, draft, &ch, p))
        return false;
    count(&s->creates, 1);
    store_commit(s, &ch);
    return true;
}

bool store_upsert(store_t *s, const char *tenant, const cr_entity_t *draft, bool replace,
                  bool *created, arena_t *scratch, problem_t *p)
{
    store_change_t ch;
    bool           made = false;

    if (!cdb_upsert(s->cdb, tenant, draft, replace, &made, scratch, &ch, p))
        return false;
    count(made ? &s->creates : &s->updates, 1);
    if (created)
        *created = made;
    store_commit(s, &ch);
    return true;
}

cr_entity_t *store_get(store_t *s, const char *tenant, const char *id, problem_t *p)
{
    return cdb_get(s->cdb, tenant, id, p);
}

bool store_modify(store_t *s, const char *tenant, const char *id, entity_op_t op,
                  const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                  arena_t *scratch, problem_t *p)
{
    store_change_t ch;

    if (!cdb_modify(s->cdb, tenant, id, op, patch, args, res, scratch, &ch, p))
        return false;
    if (ch.after)
        count(&s->updates, 1);
    store_commit(s, &ch);
    return true;
}

bool store_delete(store_t *s, const char *tenant, const char *id, problem_t *p)
{
    store_change_t ch;

    if (!cdb_delete(s->cdb, tenant, id, &ch, p))
        return false;
    count(&s->deletes, 1);
    store_commit(s, &ch);
    return true;
}

/* ------------------------------------------------------------- queries */

bool store_query(store_t *s, const char *tenant, const entity_filter_t *f, size_t offset,
                 size_t limit, bool want_count, arena_t *a, store_page_t *out, problem_t *p)
{
    count(&s->queries, 1);
    return cdb_query(s->cdb, tenant, f, offset, limit, want_count, a, out, p);
}

void store_page_release(store_page_t *pg)
{
    if (!pg)
        return;
    for (size_t i = 0; i < pg->n; i++)
        entity_unref(pg->items[i]);
    pg->n = 0;
}

bool store_foreach(store_t *s, const char *tenant, const entity_filter_t *f,
                   void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p)
{
    count(&s->queries, 1);
    return cdb_foreach(s->cdb, tenant, f, fn, ud, p);
}

bool store_purge(store_t *s, const char *tenant, const entity_filter_t *f, size_t *deleted,
                 problem_t *p)
{
    size_t n  = 0;
    bool   ok = cdb_purge(s->cdb, tenant, f, &n, store_emit, s, p);

    count(&s->deletes, n);
    if (deleted)
        *deleted = n;
    return ok;
}

/* ----------------------------------------------------------- statistics */

void store_get_stats(store_t *s, store_stats_t *st)
{
    cdb_stats(s->cdb, &st->entities, &st->tenants);
    st->creates = atomic_load_explicit(&s->creates, memory_order_relaxed);
    st->updates = atomic_load_explicit(&s->updates, memory_order_relaxed);
    st->deletes = atomic_load_explicit(&s->deletes, memory_order_relaxed);
    st->queries = atomic_load_explicit(&s->queries, memory_order_relaxed);
}
