/*
 * cordb.c - corDB in RAM: the tenant table and the entity operations.
 *
 * Locking: the tenant table has its own rwlock, taken only to find or create a
 * tenant (tenants live until cdb_close, so the pointer stays valid after the
 * unlock); the default tenant is created at open and reached without it. Each
 * tenant has an rwlock. Work that needs no index happens outside it: a create
 * freezes the draft before locking; a modify must run entity_apply() and
 * entity_freeze() under the write lock (the result depends on the current
 * entity), but the hooks run after the unlock, in store.c.
 *
 * References: a slot owns one reference to its entity. A change handed back
 * to store.c owns one reference to `before` (the slot's, transferred on a
 * swap or delete) and one to `after` (taken under the lock, before any other
 * writer can drop the slot's).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cordb.h"

struct cdb {
    pthread_rwlock_t tlock;         /* guards tenants / n_tenants / by_name */
    cdb_tenant_t   **tenants;       /* named tenants */
    uint32_t         n_tenants, cap_tenants;
    cdb_idmap_t      by_name;       /* name -> index in tenants */
    cdb_tenant_t    *dflt;          /* the default tenant "" (always there) */
    bool             prefer_writers;
    _Atomic uint64_t entities;
};

static const char *cdb_tenant_key_of(const void *ud, uint32_t v)
{
    const cdb_t *db = ud;

    return db->tenants[v]->name;
}

cdb_t *cdb_open(bool prefer_writers, problem_t *p)
{
    cdb_t *db = calloc(1, sizeof(*db));

    if (!db) {
        problem_set(p, PB_INTERNAL_ERROR, "corDB: out of memory");
        return NULL;
    }
    if (pthread_rwlock_init(&db->tlock, NULL) != 0) {
        free(db);
        problem_set(p, PB_INTERNAL_ERROR, "corDB: cannot create the tenant table lock");
        return NULL;
    }
    cdb_idmap_init(&db->by_name, cdb_tenant_key_of, db);
    db->prefer_writers = prefer_writers;
    db->dflt           = cdb_tenant_new("", prefer_writers);
    if (!db->dflt) {
        pthread_rwlock_destroy(&db->tlock);
        free(db);
        problem_set(p, PB_INTERNAL_ERROR, "corDB: cannot create the default tenant");
        return NULL;
    }
    atomic_init(&db->entities, 0);
    return db;
}

void cdb_close(cdb_t *db)
{
    if (!db)
        return;
    for (uint32_t i = 0; i < db->n_tenants; i++)
        cdb_tenant_free(db->tenants[i]);
    free(db->tenants);
    cdb_idmap_free(&db->by_name);
    cdb_tenant_free(db->dflt);
    pthread_rwlock_destroy(&db->tlock);
    free(db);
}

/* ------------------------------------------------------------- tenants */

static bool is_default(const char *tenant)
{
    return !tenant || !*tenant;
}

static cdb_tenant_t *tenant_lookup(cdb_t *db, const char *name, uint32_t h)
{
    uint32_t i = cdb_idmap_find(&db->by_name, name, h);

    return i == CDB_NONE ? NULL : db->tenants[i];
}

/* The tenant, or NULL (p: NonexistentTenant). */
static cdb_tenant_t *tenant_get(cdb_t *db, const char *tenant, problem_t *p)
{
    cdb_tenant_t *t;
    uint32_t      h;

    if (is_default(tenant))
        return db->dflt;
    h = cdb_hash_key(tenant, strlen(tenant));
    pthread_rwlock_rdlock(&db->tlock);
    t = tenant_lookup(db, tenant, h);
    pthread_rwlock_unlock(&db->tlock);
    if (!t)
        problem_set(p, PB_NONEXISTENT_TENANT, "tenant '%.200s' does not exist", tenant);
    return t;
}

/* The tenant, created on first use; NULL only when memory runs out. */
static cdb_tenant_t *tenant_open(cdb_t *db, const char *tenant, problem_t *p)
{
    cdb_tenant_t *t;
    uint32_t      h;

    if (is_default(tenant))
        return db->dflt;
    h = cdb_hash_key(tenant, strlen(tenant));
    pthread_rwlock_rdlock(&db->tlock);
    t = tenant_lookup(db, tenant, h);
    pthread_rwlock_unlock(&db->tlock);
    if (t)
        return t;

    pthread_rwlock_wrlock(&db->tlock);
    t = tenant_lookup(db, tenant, h);     /* another writer may have won */
    if (t)
        goto done;
    if (db->n_tenants == db->cap_tenants) {
        uint32_t       cap = db->cap_tenants ? db->cap_tenants * 2 : 8;
        cdb_tenant_t **nt  = realloc(db->tenants, (size_t)cap * sizeof(*nt));

        if (!nt)
            goto oom;
        db->tenants     = nt;
        db->cap_tenants = cap;
    }
    if (!cdb_idmap_reserve(&db->by_name, 1))
        goto oom;
    t = cdb_tenant_new(tenant, db->prefer_writers);
    if (!t)
        goto oom;
    db->tenants[db->n_tenants] = t;
    cdb_idmap_insert(&db->by_name, h, db->n_tenants);
    db->n_tenants++;
    LOG_I("corDB: tenant '%s' created", tenant);
done:
    pthread_rwlock_unlock(&db->tlock);
    return t;
oom:
    pthread_rwlock_unlock(&db->tlock);
    problem_set(p, PB_INTERNAL_ERROR, "corDB: out of memory creating tenant '%.200s'", tenant);
    return NULL;
}

bool cdb_tenant_exists(cdb_t *db, const char *tenant)
{
    return tenant_get(db, tenant, NULL) != NULL;
}

void cdb_tenants(cdb_t *db, void (*fn)(void *ud, const char *tenant), void *ud)
{
    fn(ud, "");
    /* The names are immutable and tenants are never removed, but the array
     * may move: read it under the lock. fn is expected to be quick. */
    pthread_rwlock_rdlock(&db->tlock);
    for (uint32_t i = 0; i < db->n_tenants; i++)
        fn(ud, db->tenants[i]->name);
    pthread_rwlock_unlock(&db->tlock);
}

/* ------------------------------------------------------------ entities */

static void change_init(store_change_t *ch, const cdb_tenant_t *t, cr_entity_t *before,
                        cr_entity_t *after)
{
    ch->tenant = t->name;
    ch->before = before;
    ch->after  = after;
}

static bool oom(problem_t *p, const char *what)
{
    return problem_set(p, PB_INTERNAL_ERROR, "corDB: out of memory (%s)", what);
}

static bool not_found(problem_t *p, const char *id)
{
    return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity '%.400s' not found", id);
}

bool cdb_create(cdb_t *db, const char *tenant, const cr_entity_t *draft, store_change_t *ch,
                problem_t *p)
{
    cdb_tenant_t *t;
    cr_entity_t  *e;

    if (!draft || !draft->id || !draft->n_types)
        return problem_set(p, PB_BAD_REQUEST_DATA, "an entity needs an id and a type");

    e = entity_freeze(draft);
    if (!e)
        return oom(p, "entity");
    t = tenant_open(db, tenant, p);
    if (!t) {
        entity_unref(e);
        return false;
    }
    entity_ref(e);                          /* the change's reference */

    pthread_rwlock_wrlock(&t->lock);
    if (cdb_tenant_find(t, e->id) != CDB_NONE) {
        pthread_rwlock_unlock(&t->lock);
        entity_unref(e);
        entity_unref(e);
        return problem_set(p, PB_ALREADY_EXISTS, "entity '%.400s' already exists", draft->id);
    }
    if (!cdb_tenant_reserve(t, e)) {
        pthread_rwlock_unlock(&t->lock);
        entity_unref(e);
        entity_unref(e);
        return oom(p, "index");
    }
    cdb_tenant_insert(t, e);
    pthread_rwlock_unlock(&t->lock);

    atomic_fetch_add_explicit(&db->entities, 1, memory_order_relaxed);
    change_init(ch, t, NULL, e);
    return true;
}

/* Under t's write lock: applies op to the entity in slot s, freezes the result
 * and swaps it in. On success *before / *after hold a reference each, or are
 * both NULL when res reports that nothing was updated (the entity stays). */
static bool modify_locked(cdb_tenant_t *t, uint32_t s, entity_op_t op, const cr_entity_t *patch,
                          const op_args_t *args, op_result_t *res, arena_t *scratch,
                          cr_entity_t **before, cr_entity_t **after, problem_t *p)
{
    cr_entity_t *old = t->slots[s].cur;
    cr_entity_t *draft, *e;
    size_t       upd0 = res ? res->n_updated : 0, not0 = res ? res->n_not_updated : 0;

    *before = *after = NULL;
    draft = entity_apply(scratch, old, patch, op, args, cr_now_us(), res, p);
    if (!draft)
        return false;
    if (res && res->n_updated == upd0 && res->n_not_updated > not0)
        return true;                        /* every attribute notUpdated: no change */
    if (!draft->id || strcmp(draft->id, old->id) != 0 || !draft->n_types)
        return problem_set(p, PB_INTERNAL_ERROR, "corDB: an update of '%.400s' changed its id "
                           "or removed its types", old->id);
    e = entity_freeze(draft);
    if (!e)
        return oom(p, "entity");
    if (!cdb_tenant_reserve_update(t, old, e)) {
        entity_unref(e);
        return oom(p, "index");
    }
    entity_ref(e);
    *before = cdb_tenant_swap(t, s, e);
    *after  = e;
    return true;
}

bool cdb_upsert(cdb_t *db, const char *tenant, const cr_entity_t *draft, bool replace,
                bool *created, arena_t *scratch, store_change_t *ch, problem_t *p)
{
    cdb_tenant_t *t;
    cr_entity_t  *e, *before = NULL, *after = NULL;
    uint32_t      s;
    bool          ok;

    if (!draft || !draft->id || !draft->n_types)
        return problem_set(p, PB_BAD_REQUEST_DATA, "an entity needs an id and a type");

    /* Most upserts of a new id are creates: freeze outside the lock. */
    e = entity_freeze(draft);
    if (!e)
        return oom(p, "entity");
    t = tenant_open(db, tenant, p);
    if (!t) {
        entity_unref(e);
        return false;
    }

    pthread_rwlock_wrlock(&t->lock);
    s = cdb_tenant_find(t, e->id);
    if (s == CDB_NONE) {
        ok = cdb_tenant_reserve(t, e);
        if (ok) {
            entity_ref(e);
            cdb_tenant_insert(t, e);
            after = e;
            e     = NULL;
        }
        pthread_rwlock_unlock(&t->lock);
        if (!ok) {
            entity_unref(e);
            return oom(p, "index");
        }
        atomic_fetch_add_explicit(&db->entities, 1, memory_order_relaxed);
        if (created)
            *created = true;
        change_init(ch, t, NULL, after);
        return true;
    }

    /* 6.15.3.1: options=update updates the attributes as 5.6.2 does (each replaced whole) */
    ok = modify_locked(t, s, replace ? OP_REPLACE_ENTITY : OP_UPDATE_ATTRS, draft, NULL, NULL,
                       scratch, &before, &after, p);
    pthread_rwlock_unlock(&t->lock);
    entity_unref(e);                        /* frozen for a create that did not happen */
    if (!ok)
        return false;
    if (created)
        *created = false;
    change_init(ch, t, before, after);
    return true;
}

cr_entity_t *cdb_get(cdb_t *db, const char *tenant, const char *id, problem_t *p)
{
    cdb_tenant_t *t = tenant_get(db, tenant, p);
    cr_entity_t  *e = NULL;
    uint32_t      s;

    if (!t)
        return NULL;
    if (!id) {
        problem_set(p, PB_BAD_REQUEST_DATA, "no entity id");
        return NULL;
    }
    pthread_rwlock_rdlock(&t->lock);
    s = cdb_tenant_find(t, id);
    if (s != CDB_NONE) {
        e = t->slots[s].cur;
        entity_ref(e);
    }
    pthread_rwlock_unlock(&t->lock);
    if (!e)
        not_found(p, id);
    return e;
}

/* The tenant of an existing entity, write-locked, and the entity's slot;
 * false (nothing locked) with NonexistentTenant / ResourceNotFound. */
static bool write_lock_entity(cdb_t *db, const char *tenant, const char *id, cdb_tenant_t **tp,
                              uint32_t *sp, problem_t *p)
{
    cdb_tenant_t *t = tenant_get(db, tenant, p);
    if (!t)
        return false;
    if (!id)
        return problem_set(p, PB_BAD_REQUEST_DATA, "no entity id");
    pthread_rwlock_wrlock(&t->lock);
    uint32_t s = cdb_tenant_find(t, id);
    if (s == CDB_NONE) {
        pthread_rwlock_unlock(&t->lock);
        return not_found(p, id);
    }
    *tp = t;
    *sp = s;
    return true;
}

bool cdb_modify(cdb_t *db, const char *tenant, const char *id, entity_op_t op,
                const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                arena_t *scratch, store_change_t *ch, problem_t *p)
{
    cdb_tenant_t *t;
    cr_entity_t  *before = NULL, *after = NULL;
    uint32_t      s;
    bool          ok;

    if (!write_lock_entity(db, tenant, id, &t, &s, p))
        return false;
    ok = modify_locked(t, s, op, patch, args, res, scratch, &before, &after, p);
    pthread_rwlock_unlock(&t->lock);
    if (!ok)
        return false;
    change_init(ch, t, before, after);
    return true;
}

bool cdb_delete(cdb_t *db, const char *tenant, const char *id, store_change_t *ch,
                problem_t *p)
{
    cdb_tenant_t *t;
    cr_entity_t  *old;
    uint32_t      s;

    if (!write_lock_entity(db, tenant, id, &t, &s, p))
        return false;
    old = cdb_tenant_remove(t, s);
    cdb_tenant_maybe_compact(t);
    pthread_rwlock_unlock(&t->lock);

    atomic_fetch_sub_explicit(&db->entities, 1, memory_order_relaxed);
    change_init(ch, t, old, NULL);
    return true;
}

static bool filter_ok(const entity_filter_t *f, const cr_entity_t *e)
{
    return !f || filter_match(f, e);
}

bool cdb_purge(cdb_t *db, const char *tenant, const entity_filter_t *f, size_t *deleted,
               void (*emit)(void *ud, const store_change_t *ch), void *ud, problem_t *p)
{
    cdb_tenant_t *t = tenant_get(db, tenant, p);
    cr_entity_t **gone = NULL, *e;
    size_t        n = 0, cap = 0;
    cdb_scan_t    sc;
    uint32_t      s;
    bool          ok = true;

    if (deleted)
        *deleted = 0;
    if (!t)
        return false;

    pthread_rwlock_wrlock(&t->lock);
    cdb_scan_begin(&sc, t, f, NULL);
    while ((e = cdb_scan_next(&sc, &s))) {
        if (!filter_ok(f, e))
            continue;
        if (n == cap) {
            size_t        ncap = cap ? cap * 2 : 64;
            cr_entity_t **ng   = realloc(gone, ncap * sizeof(*ng));

            if (!ng) {          /* stop here: what is deleted so far stays deleted */
                ok = oom(p, "purge");
                break;
            }
            gone = ng;
            cap  = ncap;
        }
        gone[n++] = cdb_tenant_remove(t, s);
    }
    cdb_scan_end(&sc);
    cdb_tenant_maybe_compact(t);
    pthread_rwlock_unlock(&t->lock);

    atomic_fetch_sub_explicit(&db->entities, n, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        store_change_t ch;

        change_init(&ch, t, gone[i], NULL);
        if (emit)
            emit(ud, &ch);
        entity_unref(gone[i]);
    }
    free(gone);
    if (deleted)
        *deleted = n;
    return ok;
}

/* -------------------------------------------------------------- queries */

bool cdb_query(cdb_t *db, const char *tenant, const entity_filter_t *f, size_t offset,
               size_t limit, bool want_count, arena_t *a, store_page_t *out, problem_t *p)
{
    cdb_tenant_t *t = tenant_get(db, tenant, p);
    cr_entity_t  *e;
    cdb_scan_t    sc;
    size_t        matched = 0, room;

    out->items = NULL;
    out->n     = 0;
    out->count = 0;
    if (!t)
        return false;
    if (!limit && !want_count)
        return true;

    pthread_rwlock_rdlock(&t->lock);
    room = limit < t->n_live ? limit : t->n_live;
    if (room)
        out->items = arena_alloc(a, room * sizeof(*out->items));
    cdb_scan_begin(&sc, t, f, a);
    while ((e = cdb_scan_next(&sc, NULL))) {
        if (!filter_ok(f, e))
            continue;
        matched++;
        if (matched <= offset)
            continue;
        if (out->n < room) {
            entity_ref(e);
            out->items[out->n++] = e;
        } else if (!want_count) {
            break;
        }
    }
    cdb_scan_end(&sc);
    pthread_rwlock_unlock(&t->lock);

    if (want_count)
        out->count = matched;
    return true;
}

bool cdb_foreach(cdb_t *db, const char *tenant, const entity_filter_t *f,
                 void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p)
{
    cdb_tenant_t *t = tenant_get(db, tenant, p);
    cr_entity_t  *e;
    cdb_scan_t    sc;

    if (!t)
        return false;
    pthread_rwlock_rdlock(&t->lock);
    cdb_scan_begin(&sc, t, f, NULL);
    while ((e = cdb_scan_next(&sc, NULL)))
        if (filter_ok(f, e))
            fn(ud, e);
    cdb_scan_end(&sc);
    pthread_rwlock_unlock(&t->lock);
    return true;
}

/* ----------------------------------------------------------- statistics */

void cdb_stats(cdb_t *db, uint64_t *entities, uint64_t *tenants)
{
    if (entities)
        *entities = atomic_load_explicit(&db->entities, memory_order_relaxed);
    if (tenants) {
        pthread_rwlock_rdlock(&db->tlock);
        *tenants = (uint64_t)db->n_tenants + 1;
        pthread_rwlock_unlock(&db->tlock);
    }
}

bool cdb_tenant_shape(cdb_t *db, const char *tenant, cdb_shape_t *out)
{
    cdb_tenant_t *t = tenant_get(db, tenant, NULL);
    size_t        entries = 0;

    memset(out, 0, sizeof(*out));
    if (!t)
        return false;
    pthread_rwlock_rdlock(&t->lock);
    out->slots       = t->n_slots;
    out->live        = t->n_live;
    out->types       = t->types.n;
    out->compactions = t->compactions;
    out->geo_bytes   = cdb_geoidx_bytes(&t->geo, &out->geo_entries);
    out->geo_grids   = t->geo.n;
    out->geo_scans   = atomic_load_explicit(&t->geo_scans, memory_order_relaxed);
    out->geo_level   = t->geo.n ? t->geo.g[0].level : 0;
    out->geo_large   = t->geo.n ? t->geo.g[0].large.n : 0;
    out->index_bytes = (size_t)t->cap_slots * sizeof(cdb_slot_t) + cdb_idmap_bytes(&t->ids) +
                       cdb_typeidx_bytes(&t->types, &entries) + out->geo_bytes;
    out->type_entries = entries;
    for (uint32_t i = 0; i < t->n_slots; i++)
        if (t->slots[i].cur)
            out->entity_bytes += t->slots[i].cur->bytes;
    pthread_rwlock_unlock(&t->lock);
    return true;
}
