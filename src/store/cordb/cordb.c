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
 * Order: each commit takes the tenant's next seq and a commit time
 * max(clock, last + 1) under the write lock (tenant_commit); a create stamps
 * that time into the new block's createdAt/modifiedAt (it is not yet shared),
 * a modify hands it to entity_apply as `now`.
 *
 * Writers announce themselves in t->wwait before they wait for the lock; a
 * scan between two chunks lets them in (scan_yield), which matters with the
 * reader-preferring lock.
 *
 * References: a slot owns one reference to its entity. A change handed back
 * to store.c owns one reference to `before` (the slot's, transferred on a
 * swap or delete) and one to `after` (taken under the lock, before any other
 * writer can drop the slot's).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../model/codec.h"
#include "cordb.h"
#include "log.h"

struct cdb {
    pthread_rwlock_t tlock;         /* guards tenants / n_tenants / by_name */
    cdb_tenant_t   **tenants;       /* named tenants */
    uint32_t         n_tenants, cap_tenants;
    cdb_idmap_t      by_name;       /* name -> index in tenants */
    cdb_tenant_t    *dflt;          /* the default tenant "" (always there) */
    bool             prefer_writers;
    uint32_t         max_tenants;   /* named ones; UINT32_MAX: no limit */
    _Atomic uint64_t entities;
    cdb_log_t       *log;           /* on disk (--dbDir); NULL: in RAM */
    bool             holds;         /* --dbSync always: writes may be held (store.h) */
};

/* A held write (store.h "Held answers"): its log waiter, on the heap, and
 * what the log's thread needs to answer it, or to undo it. */
typedef struct cdb_held {
    cdb_held_head_t  hh;            /* first: log.c hands it back (obj false) */
    cdb_t           *db;
    cdb_tenant_t    *t;
    store_change_t  *g;             /* store.c's pending array */
    size_t           n;
    store_pending_t *sp;
} cdb_held_t;

static void undo_locked(cdb_t *db, cdb_tenant_t *t, store_change_t *g, size_t n);
static void tenant_wrlock(cdb_tenant_t *t);

/* The log's thread: a held write's fsync failed; its turn to be undone. */
static void held_undo(void *ud, cdb_logw_t *w)
{
    cdb_held_t *h = (cdb_held_t *)w;

    (void)ud;
    if (h->hh.obj) {
        cdb_obj_held_undo(&h->hh);
        return;
    }
    tenant_wrlock(h->t);
    undo_locked(h->db, h->t, h->g, h->n);
    pthread_rwlock_unlock(&h->t->lock);
}

/* The log's thread: durable (ok) or undone: store.c runs the hooks, or not. */
static void held_done(void *ud, cdb_logw_t *w, bool ok)
{
    cdb_held_t *h = (cdb_held_t *)w;

    (void)ud;
    if (h->hh.obj) {
        cdb_obj_held_done(&h->hh, ok);
        return;
    }
    store_pending_done(h->sp, h->g, h->n, ok);  /* h lives in sp until the round ends */
}

static void held_round(void *ud)
{
    (void)ud;
    store_pending_round();
}

static const char *cdb_tenant_key_of(const void *ud, uint32_t v)
{
    const cdb_t *db = ud;

    return db->tenants[v]->name;
}

cdb_t *cdb_open(bool prefer_writers, problem_t *p)
{
    cdb_t *db = cr_xcalloc(1, sizeof(*db));

    if (pthread_rwlock_init(&db->tlock, NULL) != 0) {
        free(db);
        problem_set(p, PB_INTERNAL_ERROR, "corDB: cannot create the tenant table lock");
        return NULL;
    }
    cdb_idmap_init(&db->by_name, cdb_tenant_key_of, db);
    db->prefer_writers = prefer_writers;
    db->max_tenants    = cr_config.max_tenants > 0 ? (uint32_t)cr_config.max_tenants - 1 : UINT32_MAX;
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

void cdb_set_log(cdb_t *db, struct cdb_log *log)
{
    db->log   = log;
    db->holds = log && cdb_log_mode(log) == CDB_SYNC_ALWAYS;
    if (db->holds)
        cdb_log_set_held(log, held_undo, held_done, held_round, db);
}

void cdb_close(cdb_t *db)
{
    if (!db)
        return;
    /* The log first: its threads (a snapshot) may be reading the tenants. */
    cdb_log_close(db->log);
    db->log = NULL;
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
    if (db->n_tenants >= db->max_tenants) {
        pthread_rwlock_unlock(&db->tlock);
        problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                    "tenant '%.200s' cannot be created: this broker holds at most %u tenants "
                    "(--maxTenants, the default tenant included)", tenant, db->max_tenants + 1);
        return NULL;
    }
    if (db->n_tenants == db->cap_tenants) {
        uint32_t       cap = db->cap_tenants ? db->cap_tenants * 2 : 8;
        cdb_tenant_t **nt  = cr_xreallocarray(db->tenants, cap, sizeof(*nt));

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
    problem_set(p, PB_INTERNAL_ERROR, "corDB: tenant '%.200s' cannot be created (tenant table at its size limit, or no lock)", tenant);
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

bool cdb_tenant_entities(cdb_t *db, const char *tenant, uint64_t *n)
{
    cdb_tenant_t *t = tenant_get(db, tenant, NULL);
    if (!t)
        return false;
    pthread_rwlock_rdlock(&t->lock);
    *n = t->n_live;
    pthread_rwlock_unlock(&t->lock);
    return true;
}

cdb_tenant_t *cdb_tenant_get(cdb_t *db, const char *tenant, problem_t *p)
{
    return tenant_get(db, tenant, p);
}

cdb_tenant_t *cdb_tenant_open(cdb_t *db, const char *tenant, problem_t *p)
{
    return tenant_open(db, tenant, p);
}

struct cdb_log *cdb_db_log(cdb_t *db)
{
    return db->log;
}

void cdb_tenant_each(cdb_t *db, void (*fn)(void *ud, cdb_tenant_t *t), void *ud)
{
    fn(ud, db->dflt);
    pthread_rwlock_rdlock(&db->tlock);
    for (uint32_t i = 0; i < db->n_tenants; i++)
        fn(ud, db->tenants[i]);
    pthread_rwlock_unlock(&db->tlock);
}

/* ------------------------------------------------------------ recovery */

static void tenant_wrlock(cdb_tenant_t *t);
static void after_deletes(cdb_tenant_t *t);

bool cdb_replay_put(cdb_t *db, const char *tenant, cr_entity_t *e, problem_t *p)
{
    cdb_tenant_t *t = tenant_open(db, tenant, p);
    uint32_t      s;

    if (!t) {
        entity_unref(e);
        return false;
    }
    tenant_wrlock(t);
    s = cdb_tenant_find(t, e->id);
    if (s == CDB_NONE) {
        if (!cdb_tenant_reserve(t, e))
            cr_oom("corDB index (recovery)", sizeof(cdb_slot_t));
        cdb_tenant_insert(t, e);
        atomic_fetch_add_explicit(&db->entities, 1, memory_order_relaxed);
    } else {
        if (!cdb_tenant_reserve_update(t, t->slots[s].cur, e))
            cr_oom("corDB index (recovery)", 0);
        entity_unref(cdb_tenant_swap(t, s, e));
    }
    /* The clock goes on after every time recovered (modifiedAt never goes back). */
    if (e->modified_at > t->last_at)
        t->last_at = e->modified_at;
    if (e->created_at > t->last_at)
        t->last_at = e->created_at;
    pthread_rwlock_unlock(&t->lock);
    return true;
}

void cdb_replay_del(cdb_t *db, const char *tenant, const char *id)
{
    cdb_tenant_t *t = tenant_get(db, tenant, NULL);
    uint32_t      s;

    if (!t)
        return;
    tenant_wrlock(t);
    s = cdb_tenant_find(t, id);
    if (s != CDB_NONE) {
        entity_unref(cdb_tenant_remove(t, s));
        atomic_fetch_sub_explicit(&db->entities, 1, memory_order_relaxed);
        after_deletes(t);
    }
    pthread_rwlock_unlock(&t->lock);
}

/* ------------------------------------------------------------ entities */

/* An index reservation fails only at a size limit (2^31 id-map buckets,
 * 2^32 slots...): memory itself never fails here (cr_xmalloc aborts). */
static bool oom(problem_t *p, const char *what)
{
    return problem_set(p, PB_INTERNAL_ERROR, "corDB: the tenant's %s is at its size limit", what);
}

static bool not_found(problem_t *p, const char *id)
{
    return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity '%.400s' not found", id);
}

static void tenant_wrlock(cdb_tenant_t *t)
{
    atomic_fetch_add_explicit(&t->wwait, 1, memory_order_relaxed);
    pthread_rwlock_wrlock(&t->lock);
    atomic_fetch_sub_explicit(&t->wwait, 1, memory_order_relaxed);
}

void cdb_tenant_wrlock(cdb_tenant_t *t)
{
    tenant_wrlock(t);
}

/* Between two chunks of a scan (no lock held): let waiting writers take the
 * lock first. Bounded: a scan is never stalled for long. */
void cdb_scan_yield(cdb_tenant_t *t)
{
    for (int i = 0; i < 64 && atomic_load_explicit(&t->wwait, memory_order_relaxed); i++)
        sched_yield();
}

/* End of a read chunk (read lock held): let writers in, then go on after the
 * last candidate. Returns the next chunk's budget. */
static size_t scan_breathe(cdb_tenant_t *t, cdb_scan_t *sc)
{
    cdb_scan_pause(sc);
    pthread_rwlock_unlock(&t->lock);
    cdb_scan_yield(t);
    pthread_rwlock_rdlock(&t->lock);
    cdb_scan_resume(sc);
    return CDB_SCAN_CHUNK;
}

/* The commit time the next change of t would get (write lock held). */
static int64_t tenant_clock(const cdb_tenant_t *t)
{
    int64_t now = cr_now_us();

    return now > t->last_at ? now : t->last_at + 1;
}

/* Under the write lock: numbers the change and stamps its time. */
static void tenant_commit(cdb_tenant_t *t, store_change_t *ch, store_op_t op, int64_t at,
                          cr_entity_t *before, cr_entity_t *after)
{
    t->last_at = at;
    *ch = (store_change_t){ .tenant = t->name, .seq = ++t->seq, .at = at, .op = op,
                            .before = before, .after = after, .stream = t->stream };
}

/* A change that is not (yet) committed: seq 0, nothing to drop. */
static void change_none(store_change_t *ch)
{
    ch->seq    = 0;
    ch->before = ch->after = NULL;
}

static void stamp_attrs(cr_attr_t *v, uint16_t n, int64_t at)
{
    for (uint16_t i = 0; i < n; i++) {
        v[i].created_at = v[i].modified_at = at;
        stamp_attrs(v[i].sub, v[i].n_sub, at);
    }
}

/* A new entity's block is not shared yet (the caller holds its only
 * references): its createdAt / modifiedAt become the commit time. */
static void stamp_new(cr_entity_t *e, int64_t at)
{
    e->created_at = e->modified_at = at;
    stamp_attrs(e->attrs, e->n_attrs, at);
}

/* ------------------------------------------------------------ the log
 *
 * On disk, every locked step ends with log_group() before the unlock: the
 * committed changes become one group of records (the new version, or the id
 * of a delete), written before any reader can see them (readers wait for
 * the write lock). When the write fails, undo_locked() takes the changes
 * back, still under the lock, and the write is answered 503: nothing
 * applied, nothing seen. With --dbSync always, the writer then waits for the
 * group's fsync after the unlock (log_wait): if that fsync fails, it takes
 * the lock again and undoes its changes, in reverse log order (log.c). */

/* The changes g[0..n) as a group of records in the thread's buffer. */
static sbuf_t *group_records(cdb_tenant_t *t, const store_change_t *g, size_t n)
{
    sbuf_t *sb = cdb_log_buf();

    for (size_t i = 0; i < n; i++) {
        size_t at;

        if (!g[i].seq)
            continue;
        if (g[i].after) {
            at = cdb_rec_begin(sb, CDB_REC_PUT, t->name);
            entity_encode(sb, g[i].after);
        } else {
            at = cdb_rec_begin(sb, CDB_REC_DEL, t->name);
            cr_put_str(sb, g[i].before->id, strlen(g[i].before->id));
        }
        cdb_rec_end(sb, at);
    }
    return sb;
}

static void after_deletes(cdb_tenant_t *t);

/* Under t's write lock: takes the committed changes g[0..n) back, last
 * first (they are the tenant's latest), and drops their references. */
static void undo_locked(cdb_t *db, cdb_tenant_t *t, store_change_t *g, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        store_change_t *ch = &g[i];
        uint32_t        s;

        if (!ch->seq)
            continue;
        if (ch->before && ch->after) {
            s = cdb_tenant_find(t, ch->after->id);
            if (!cdb_tenant_reserve_update(t, ch->after, ch->before))
                cr_oom("corDB index (undo)", 0);
            entity_ref(ch->before);
            entity_unref(cdb_tenant_swap(t, s, ch->before));
        } else if (ch->after) {
            s = cdb_tenant_find(t, ch->after->id);
            entity_unref(cdb_tenant_remove(t, s));
            atomic_fetch_sub_explicit(&db->entities, 1, memory_order_relaxed);
        } else {
            entity_ref(ch->before);
            cdb_tenant_restore(t, (uint32_t)ch->be_aux, ch->be_aux >> 32, ch->before);
            atomic_fetch_add_explicit(&db->entities, 1, memory_order_relaxed);
        }
        t->seq--;
        if (ch->before)
            entity_unref(ch->before);
        if (ch->after)
            entity_unref(ch->after);
        ch->before = ch->after = NULL;
        ch->seq    = 0;
    }
    after_deletes(t);
}

/* Under t's write lock, after the step committed g[0..n): logs them; on a
 * failed write undoes them (false, p: 503). No log, or nothing committed:
 * true at once. */
static bool log_group(cdb_t *db, cdb_tenant_t *t, store_change_t *g, size_t n, cdb_logw_t *w,
                      problem_t *p)
{
    bool any = false;

    store_pending_t *sp;

    w->linked = w->waits = w->held = false;
    if (CR_LIKELY(!db->log))
        return true;
    for (size_t i = 0; i < n && !any; i++)
        any = g[i].seq != 0;
    if (!any)
        return true;
    if (db->holds && (sp = store_pending())) {
        /* The answer is held: the log's thread completes the write (w, on
         * the caller's stack, stays unlinked: log_wait returns at once). */
        cdb_held_t *h = store_pending_area(sp);

        _Static_assert(sizeof(cdb_held_t) <= STORE_PENDING_AREA, "cdb_held_t fits");
        memset(&h->hh, 0, sizeof(h->hh));
        h->hh.w.held = true;
        h->db = db;
        h->t  = t;
        h->g  = g;
        h->n  = n;
        h->sp = sp;
        if (cdb_log_append(db->log, group_records(t, g, n), &h->hh.w, p)) {
            store_pending_adopt();          /* h is the log thread's now */
            return true;
        }
    } else if (cdb_log_append(db->log, group_records(t, g, n), w, p)) {
        return true;
    }
    undo_locked(db, t, g, n);
    return false;
}

/* No lock held, after log_group: --dbSync always waits for the group's
 * fsync; a failed one undoes the group (false, p: 503). */
static bool log_wait(cdb_t *db, cdb_tenant_t *t, store_change_t *g, size_t n, cdb_logw_t *w,
                     problem_t *p)
{
    if (CR_LIKELY(!w->waits))
        return true;
    if (cdb_log_wait(db->log, w, p) == CDB_WAIT_OK)
        return true;
    tenant_wrlock(t);
    undo_locked(db, t, g, n);
    pthread_rwlock_unlock(&t->lock);
    cdb_log_undone(db->log, w);
    return false;
}

/* Under t's write lock: inserts the frozen e (the caller's reference goes to
 * the slot) and commits a create; false (p) when the id is taken or on OOM. */
static bool insert_locked(cdb_t *db, cdb_tenant_t *t, cr_entity_t *e, store_change_t *ch,
                          problem_t *p)
{
    int64_t at;

    if (cdb_tenant_find(t, e->id) != CDB_NONE)
        return problem_set(p, PB_ALREADY_EXISTS, "entity '%.400s' already exists", e->id);
    if (!cdb_tenant_reserve(t, e))
        return oom(p, "index");
    at = tenant_clock(t);
    stamp_new(e, at);
    entity_ref(e);                          /* the change's reference */
    cdb_tenant_insert(t, e);
    tenant_commit(t, ch, STORE_OP_CREATE, at, NULL, e);
    atomic_fetch_add_explicit(&db->entities, 1, memory_order_relaxed);
    return true;
}

static bool check_draft(const cr_entity_t *draft, problem_t *p)
{
    if (!draft || !draft->id || !draft->n_types)
        return problem_set(p, PB_BAD_REQUEST_DATA, "an entity needs an id and a type");
    return true;
}

bool cdb_create(cdb_t *db, const char *tenant, const cr_entity_t *draft, store_change_t *ch,
                problem_t *p)
{
    cdb_tenant_t *t;
    cr_entity_t  *e;
    cdb_logw_t    w;
    bool          ok;

    change_none(ch);
    if (!check_draft(draft, p))
        return false;
    e = entity_freeze(draft);
    if (!e)
        return oom(p, "entity");
    t = tenant_open(db, tenant, p);
    if (!t) {
        entity_unref(e);
        return false;
    }
    tenant_wrlock(t);
    ok = insert_locked(db, t, e, ch, p);
    if (ok && !log_group(db, t, ch, 1, &w, p))
        ok = false, e = NULL;               /* undone: the slot's reference is gone */
    pthread_rwlock_unlock(&t->lock);
    if (!ok) {
        if (e)
            entity_unref(e);
        return false;
    }
    return log_wait(db, t, ch, 1, &w, p);
}

static bool type_mismatch(problem_t *p, const char *id)
{
    return problem_set(p, PB_RESOURCE_NOT_FOUND,
                       "entity '%.400s' does not match the type selection (?type=)", id);
}

/* Under t's write lock: applies op to the entity in slot s, freezes the result
 * and swaps it in, committing the change (*ch: seq 0 when res reports that
 * nothing was updated: the entity stays). */
static bool modify_locked(cdb_tenant_t *t, uint32_t s, entity_op_t op, const cr_entity_t *patch,
                          const op_args_t *args, op_result_t *res, arena_t *scratch,
                          store_change_t *ch, problem_t *p)
{
    cr_entity_t *old = t->slots[s].cur;
    cr_entity_t *draft, *e, *before;
    size_t       upd0 = res ? res->n_updated : 0, not0 = res ? res->n_not_updated : 0;
    int64_t      at   = tenant_clock(t);

    change_none(ch);
    if (args && args->if_type && !typesel_match(args->if_type, old))
        return type_mismatch(p, old->id);
    draft = entity_apply(scratch, old, patch, op, args, at, res, p);
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
    before = cdb_tenant_swap(t, s, e);
    tenant_commit(t, ch, store_op_of(op), at, before, e);
    return true;
}

/* Under t's write lock: an upsert of the frozen *ep (taken for a create, else
 * left to the caller) or of draft. */
static bool upsert_locked(cdb_t *db, cdb_tenant_t *t, cr_entity_t **ep, const cr_entity_t *draft,
                          bool replace, bool *created, arena_t *scratch, store_change_t *ch,
                          problem_t *p)
{
    uint32_t s = cdb_tenant_find(t, draft->id);

    if (s == CDB_NONE) {
        if (!insert_locked(db, t, *ep, ch, p))
            return false;
        *ep = NULL;
        if (created)
            *created = true;
        return true;
    }
    if (created)
        *created = false;
    /* 6.15.3.1: options=update updates the attributes as 5.6.2 does (each replaced whole) */
    return modify_locked(t, s, replace ? OP_REPLACE_ENTITY : OP_UPDATE_ATTRS, draft, NULL, NULL,
                         scratch, ch, p);
}

bool cdb_upsert(cdb_t *db, const char *tenant, const cr_entity_t *draft, bool replace,
                bool *created, arena_t *scratch, store_change_t *ch, problem_t *p)
{
    cdb_tenant_t *t;
    cr_entity_t  *e;
    cdb_logw_t    w;
    bool          ok;

    change_none(ch);
    if (!check_draft(draft, p))
        return false;
    /* Most upserts of a new id are creates: freeze outside the lock. */
    e = entity_freeze(draft);
    if (!e)
        return oom(p, "entity");
    t = tenant_open(db, tenant, p);
    if (!t) {
        entity_unref(e);
        return false;
    }
    tenant_wrlock(t);
    ok = upsert_locked(db, t, &e, draft, replace, created, scratch, ch, p);
    if (ok)
        ok = log_group(db, t, ch, 1, &w, p);
    pthread_rwlock_unlock(&t->lock);
    if (e)
        entity_unref(e);                    /* frozen for a create that did not happen */
    return ok && log_wait(db, t, ch, 1, &w, p);
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
    tenant_wrlock(t);
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
    cdb_tenant_t *t = NULL;        /* set by write_lock_entity (initialized for PGO's -Wmaybe-uninitialized) */
    uint32_t      s = 0;
    cdb_logw_t    w;
    bool          ok;

    change_none(ch);
    if (!write_lock_entity(db, tenant, id, &t, &s, p))
        return false;
    ok = modify_locked(t, s, op, patch, args, res, scratch, ch, p) &&
         log_group(db, t, ch, 1, &w, p);
    pthread_rwlock_unlock(&t->lock);
    return ok && log_wait(db, t, ch, 1, &w, p);
}

/* Under the write lock: after the last delete, the tenant gives its tables
 * back; else compaction when it is due. */
static void after_deletes(cdb_tenant_t *t)
{
    if (!t->n_live && t->n_slots)
        cdb_tenant_release(t);
    else
        cdb_tenant_maybe_compact(t);
}

/* Under t's write lock: deletes the entity in slot s (if it matches if_type). */
static bool delete_locked(cdb_t *db, cdb_tenant_t *t, uint32_t s, const typesel_t *if_type,
                          store_op_t op, store_change_t *ch, problem_t *p)
{
    cr_entity_t *old = t->slots[s].cur;

    if (if_type && !typesel_match(if_type, old))
        return type_mismatch(p, old->id);
    old = cdb_tenant_remove(t, s);
    tenant_commit(t, ch, op, tenant_clock(t), old, NULL);
    ch->be_aux = (uint64_t)(uint32_t)t->compactions << 32 | s;     /* for undo_locked */
    atomic_fetch_sub_explicit(&db->entities, 1, memory_order_relaxed);
    return true;
}

bool cdb_delete(cdb_t *db, const char *tenant, const char *id, const typesel_t *if_type,
                store_change_t *ch, problem_t *p)
{
    cdb_tenant_t *t = NULL;        /* set by write_lock_entity (initialized for PGO's -Wmaybe-uninitialized) */
    uint32_t      s = 0;
    cdb_logw_t    w;
    bool          ok;

    change_none(ch);
    if (!write_lock_entity(db, tenant, id, &t, &s, p))
        return false;
    ok = delete_locked(db, t, s, if_type, STORE_OP_DELETE, ch, p) &&
         log_group(db, t, ch, 1, &w, p);
    if (ok)
        after_deletes(t);
    pthread_rwlock_unlock(&t->lock);
    return ok && log_wait(db, t, ch, 1, &w, p);
}

static bool filter_ok(const entity_filter_t *f, const cr_entity_t *e)
{
    return !f || filter_match(f, e);
}

static void drop_group(store_change_t *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (g[i].before)
            entity_unref(g[i].before);
        if (g[i].after)
            entity_unref(g[i].after);
    }
}

bool cdb_purge(cdb_t *db, const char *tenant, const entity_filter_t *f, size_t *deleted,
               void (*emit)(void *ud, store_change_t *group, size_t n), void *ud, problem_t *p)
{
    cdb_tenant_t  *t = tenant_get(db, tenant, p);
    store_change_t group[STORE_PURGE_CHUNK];
    cr_entity_t   *e = NULL;
    cdb_logw_t     w;
    cdb_scan_t     sc;
    uint32_t       s;
    size_t         total = 0;
    bool           ok = true;

    if (deleted)
        *deleted = 0;
    if (!t)
        return false;

    filter_regex_reset();
    tenant_wrlock(t);
    cdb_scan_begin(&sc, t, f, NULL);
    for (;;) {
        size_t n = 0, visited = 0;

        /* One chunk: at most STORE_PURGE_CHUNK deletes, CDB_SCAN_CHUNK candidates. */
        while (n < STORE_PURGE_CHUNK && visited < CDB_SCAN_CHUNK &&
               (e = cdb_scan_next(&sc, &s))) {
            visited++;
            if (filter_ok(f, e))
                delete_locked(db, t, s, NULL, STORE_OP_PURGE, &group[n++], NULL);
        }
        if (n && !log_group(db, t, group, n, &w, p)) {
            /* Undone (the scan goes on after the last candidate: it resumes
             * nowhere, the purge stops here with 503). */
            n = 0;
            ok = false;
            e = NULL;
        }
        if (e)
            cdb_scan_pause(&sc);
        else
            after_deletes(t);
        pthread_rwlock_unlock(&t->lock);
        if (!ok)
            break;
        if (n && !log_wait(db, t, group, n, &w, p)) {
            ok = false;
            break;
        }

        if (n && emit)
            emit(ud, group, n);
        drop_group(group, n);
        total += n;
        if (filter_regex_overflow(p)) {     /* stop: what is deleted stays deleted */
            ok = false;
            break;
        }
        if (!e)
            break;
        cdb_scan_yield(t);
        tenant_wrlock(t);
        cdb_scan_resume(&sc);
    }
    if (!ok) {
        tenant_wrlock(t);
        after_deletes(t);
        pthread_rwlock_unlock(&t->lock);
    }
    cdb_scan_end(&sc);
    if (deleted)
        *deleted = total;
    return ok;
}

/* ---------------------------------------------------------------- batches */

/* A failed item's problem, kept in the scratch arena (only failures cost one). */
static problem_t *batch_problem(arena_t *scratch, const problem_t *p)
{
    problem_t *q = arena_alloc(scratch, sizeof(*q));

    *q = *p;
    if (q->kind == PB_NONE)
        problem_set(q, PB_INTERNAL_ERROR, "corDB: a batch item failed without a reason");
    return q;
}

bool cdb_batch(cdb_t *db, const char *tenant, store_batch_item_t *items, size_t n,
               arena_t *scratch, store_change_t *group, size_t *n_group, problem_t *p)
{
    cdb_tenant_t *t;
    cr_entity_t **frozen;
    cdb_logw_t    w;
    bool          creates = false, deletes = false, logged;
    size_t        k = 0;

    *n_group = 0;
    for (size_t i = 0; i < n; i++) {
        creates = creates || items[i].kind == STORE_B_CREATE || items[i].kind == STORE_B_UPSERT ||
                  items[i].kind == STORE_B_UPSERT_REPLACE;
        deletes = deletes || items[i].kind == STORE_B_DELETE;
    }
    t = creates ? tenant_open(db, tenant, p) : tenant_get(db, tenant, p);
    if (!t)
        return false;

    /* Entities that may be created are frozen before the lock, as in cdb_create. */
    frozen = arena_calloc(scratch, (n ? n : 1) * sizeof(*frozen));
    for (size_t i = 0; i < n; i++) {
        store_batch_item_t *it = &items[i];
        problem_t           ip = { 0 };

        it->ok      = false;
        it->created = false;
        it->problem = NULL;
        if (it->kind == STORE_B_UPDATE || it->kind == STORE_B_MERGE) {
            if (!it->draft || !it->draft->id)
                problem_set(&ip, PB_BAD_REQUEST_DATA, "an entity needs an id");
        } else if (it->kind != STORE_B_DELETE) {
            check_draft(it->draft, &ip);
        }
        if (ip.kind == PB_NONE && (it->kind == STORE_B_CREATE || it->kind == STORE_B_UPSERT ||
                                   it->kind == STORE_B_UPSERT_REPLACE)) {
            frozen[i] = entity_freeze(it->draft);
            if (!frozen[i])
                oom(&ip, "entity");
        }
        if (ip.kind != PB_NONE)
            it->problem = batch_problem(scratch, &ip);
    }

    tenant_wrlock(t);
    for (size_t i = 0; i < n; i++) {
        store_batch_item_t *it = &items[i];
        store_change_t     *ch = &group[k];
        problem_t           ip = { 0 };
        uint32_t            s;

        if (it->problem)
            continue;
        change_none(ch);
        switch (it->kind) {
        case STORE_B_CREATE:
            if ((it->ok = insert_locked(db, t, frozen[i], ch, &ip)))
                frozen[i] = NULL;
            it->created = it->ok;
            break;
        case STORE_B_UPSERT:
        case STORE_B_UPSERT_REPLACE:
            it->ok = upsert_locked(db, t, &frozen[i], it->draft, it->kind == STORE_B_UPSERT_REPLACE,
                                   &it->created, scratch, ch, &ip);
            break;
        case STORE_B_UPDATE:
        case STORE_B_MERGE:
            s = cdb_tenant_find(t, it->draft->id);
            if (s == CDB_NONE) {
                not_found(&ip, it->draft->id);
                break;
            }
            it->ok = modify_locked(t, s, it->kind == STORE_B_UPDATE ? OP_APPEND_ATTRS
                                                                   : OP_MERGE_ENTITY,
                                   it->draft, &it->args, it->res, scratch, ch, &ip);
            break;
        case STORE_B_DELETE:
            s = it->id ? cdb_tenant_find(t, it->id) : CDB_NONE;
            if (s == CDB_NONE) {
                not_found(&ip, it->id ? it->id : "");
                break;
            }
            it->ok = delete_locked(db, t, s, NULL, STORE_OP_DELETE, ch, &ip);
            break;
        default:
            problem_set(&ip, PB_INTERNAL_ERROR, "corDB: unknown batch operation %d",
                        (int)it->kind);
        }
        if (!it->ok)
            it->problem = batch_problem(scratch, &ip);
        if (it->ok && ch->seq)
            k++;
    }
    logged = log_group(db, t, group, k, &w, p);
    if (deletes)
        after_deletes(t);
    pthread_rwlock_unlock(&t->lock);

    for (size_t i = 0; i < n; i++)
        if (frozen[i])
            entity_unref(frozen[i]);
    if (!logged || !log_wait(db, t, group, k, &w, p)) {
        /* Undone as a whole: no item applied, the batch answered 503. */
        for (size_t i = 0; i < n; i++)
            items[i].ok = items[i].created = false;
        return false;
    }
    *n_group = k;
    return true;
}

/* -------------------------------------------------------------- queries */

/* orderBy (4.23) with a page: a bounded max-heap of the best offset+limit
 * matches (the worst on top, each with its keys computed once), so a page of
 * 20 over N matches costs N key extractions and about N comparisons with the
 * top, not a sort of N. Every match is seen, so the count is exact. */
typedef struct oheap {
    const entity_order_t *o;
    cr_entity_t         **e;
    order_key_t          *k;        /* n_terms keys per slot */
    size_t                n, cap;
} oheap_t;

static int oheap_cmp(const oheap_t *h, size_t i, size_t j)
{
    size_t m = h->o->n;
    return order_keys_cmp(h->o, &h->k[i * m], h->e[i], &h->k[j * m], h->e[j]);
}

static void oheap_swap(oheap_t *h, size_t i, size_t j)
{
    size_t       m = h->o->n;
    cr_entity_t *e = h->e[i];
    order_key_t  tmp[ORDER_MAX_TERMS];

    h->e[i] = h->e[j];
    h->e[j] = e;
    memcpy(tmp, &h->k[i * m], m * sizeof *tmp);
    memcpy(&h->k[i * m], &h->k[j * m], m * sizeof *tmp);
    memcpy(&h->k[j * m], tmp, m * sizeof *tmp);
}

static void oheap_down(oheap_t *h, size_t i, size_t n)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && oheap_cmp(h, l, w) > 0) w = l;
        if (r < n && oheap_cmp(h, r, w) > 0) w = r;
        if (w == i)
            return;
        oheap_swap(h, i, w);
        i = w;
    }
}

/* Offers e; its keys are in the spare slot h->cap. */
static void oheap_offer(oheap_t *h, cr_entity_t *e)
{
    size_t m = h->o->n;

    order_keys(h->o, e, &h->k[h->cap * m]);
    h->e[h->cap] = e;
    if (h->n < h->cap) {
        size_t i = h->n++;
        memcpy(&h->k[i * m], &h->k[h->cap * m], m * sizeof *h->k);
        h->e[i] = e;
        entity_ref(e);
        while (i && oheap_cmp(h, (i - 1) / 2, i) < 0) {
            oheap_swap(h, (i - 1) / 2, i);
            i = (i - 1) / 2;
        }
        return;
    }
    if (oheap_cmp(h, h->cap, 0) >= 0)
        return;
    entity_unref(h->e[0]);      /* the store still holds it (or it was replaced: then it goes now) */
    entity_ref(e);
    h->e[0] = e;
    memcpy(h->k, &h->k[h->cap * m], m * sizeof *h->k);
    oheap_down(h, 0, h->n);
}

static bool __attribute__((noinline)) query_ordered(cdb_tenant_t *t, const entity_filter_t *f, size_t offset, size_t limit,
                          arena_t *a, store_page_t *out, size_t *matched)
{
    cr_entity_t *e;
    cdb_scan_t   sc;
    size_t       budget = CDB_SCAN_CHUNK;
    oheap_t      h = {.o = f->order_by};

    /* room for offset + limit (no more than the tenant holds), and a spare slot */
    h.cap = !limit ? 0 : limit > t->n_live || offset > t->n_live - limit ? t->n_live : offset + limit;
    h.e = arena_alloc(a, (h.cap + 1) * sizeof *h.e);
    h.k = arena_alloc(a, (h.cap + 1) * (h.o->n ? h.o->n : 1) * sizeof *h.k);
    cdb_scan_begin(&sc, t, f, a);
    while ((e = cdb_scan_next(&sc, NULL))) {
        if (filter_ok(f, e)) {
            ++*matched;
            if (h.cap)
                oheap_offer(&h, e);
        }
        if (CR_UNLIKELY(--budget == 0))
            budget = scan_breathe(t, &sc);
    }
    cdb_scan_end(&sc);
    /* heap sort in place: the best first */
    for (size_t n = h.n; n > 1; n--) {
        oheap_swap(&h, 0, n - 1);
        oheap_down(&h, 0, n - 1);
    }
    out->items = h.e;
    for (size_t i = 0; i < h.n; i++) {
        if (i < offset)
            entity_unref(h.e[i]);
        else
            h.e[out->n++] = h.e[i];
    }
    return true;
}

/* orderBy with an ordered index (ordidx.c): the index walked from the start,
 * the slots written since it was exact merged in (their entities keyed and
 * sorted here), until offset + limit matches. Holds the read lock throughout,
 * so an index walk visits at most CDB_OIDX_WALK_MAX entries: a filter that
 * matches too few of them (or a large offset) gives way to the bounded heap,
 * which breathes; so does a filter whose candidates (the type index's count)
 * are too few for a walk to find the page within that bound. false: no index
 * serves (the page is empty then). */
#define CDB_OIDX_WALK_MAX 4096

static bool filter_ok_ud(const void *ud, const cr_entity_t *e)
{
    return filter_ok(ud, e);
}

static bool __attribute__((noinline)) query_indexed(cdb_tenant_t *t, const entity_filter_t *f,
                                                    size_t offset, size_t limit, arena_t *a,
                                                    store_page_t *out)
{
    const entity_order_t *o = f->order_by;
    size_t                m = o->n ? o->n : 1, n, nx, n_sv, i = 0, j = 0, seen = 0, visits = 0;
    size_t                room = limit < t->n_live ? limit : t->n_live;
    cdb_oidx_t           *idx;
    cdb_oent_t           *x;
    order_key_t          *xk;
    uint32_t             *sv;

    if (f->ids)
        return false;               /* by ids: a few candidates, the heap is cheaper */
    if (!f->geo) {                  /* (a geo scan's candidates cost their collection) */
        cdb_scan_t sc;
        size_t     est, need = offset + limit;

        cdb_scan_begin(&sc, t, f, a);
        est = cdb_scan_estimate(&sc);
        cdb_scan_end(&sc);
        /* few candidates (a rare type): the heap over them is cheaper than
         * walking the index past the entities of other types */
        if ((double)need * t->n_live > (double)est * CDB_OIDX_WALK_MAX)
            return false;
    }
    if (!(idx = cdb_oidx_get(t, o, a)))
        return false;
    n    = cdb_oidx_len(idx);
    n_sv = cdb_oidx_dirty(t, idx, a, &sv);
    nx   = cdb_oidx_extra(t, idx, o, sv, n_sv, filter_ok_ud, f, a, &x, &xk);
    out->items = arena_alloc(a, (room ? room : 1) * sizeof *out->items);
    while (out->n < room) {
        const cdb_oent_t  *ie = NULL;
        const order_key_t *ik = NULL;
        cr_entity_t       *e;

        for (; i < n; i++) {
            if (CR_UNLIKELY(++visits > CDB_OIDX_WALK_MAX))
                goto give_way;
            ie = cdb_oidx_ent(idx, i, &ik);
            if (t->slots[ie->slot].cur == ie->e && filter_ok(f, ie->e))
                break;              /* still current (else its new version is in x) and a match */
        }
        if (i < n && (j == nx || order_keys_cmp(o, ik, ie->e, &xk[x[j].ki * m], x[j].e) < 0)) {
            e = ie->e;
            i++;
        } else if (j < nx) {
            e = x[j++].e;
        } else {
            break;
        }
        if (seen++ < offset)
            continue;
        entity_ref(e);
        out->items[out->n++] = e;
    }
    cdb_oidx_unref(idx);
    return true;

give_way:
    cdb_oidx_unref(idx);
    store_page_release(out);
    out->items = NULL;
    out->n     = 0;
    return false;
}

bool cdb_query(cdb_t *db, const char *tenant, const entity_filter_t *f, size_t offset,
               size_t limit, bool want_count, arena_t *a, store_page_t *out, problem_t *p)
{
    cdb_tenant_t *t = tenant_get(db, tenant, p);
    cr_entity_t  *e;
    cdb_scan_t    sc;
    size_t        matched = 0, room, budget = CDB_SCAN_CHUNK;

    out->items = NULL;
    out->n     = 0;
    out->count = 0;
    if (!t)
        return false;
    if (!limit && !want_count)
        return true;

    filter_regex_reset();
    pthread_rwlock_rdlock(&t->lock);
    room = limit < t->n_live ? limit : t->n_live;
    if (f && f->order_by && limit) {
        if (!query_indexed(t, f, offset, limit, a, out)) {
            query_ordered(t, f, offset, limit, a, out, &matched);
            pthread_rwlock_unlock(&t->lock);
            goto done;
        }
        if (!want_count) {
            pthread_rwlock_unlock(&t->lock);
            goto done;
        }
        room = 0;                   /* the page is there: count the matches */
    }
    if (room)
        out->items = arena_alloc(a, room * sizeof(*out->items));
    cdb_scan_begin(&sc, t, f, a);
    while ((e = cdb_scan_next(&sc, NULL))) {
        if (filter_ok(f, e) && ++matched > offset) {
            if (out->n < room) {
                entity_ref(e);
                out->items[out->n++] = e;
            } else if (!want_count) {
                break;
            }
        }
        if (CR_UNLIKELY(--budget == 0))
            budget = scan_breathe(t, &sc);
    }
    cdb_scan_end(&sc);
    pthread_rwlock_unlock(&t->lock);
done:
    if (filter_regex_overflow(p)) {
        store_page_release(out);
        return false;
    }
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
    size_t        budget = CDB_SCAN_CHUNK;

    if (!t)
        return false;
    filter_regex_reset();
    pthread_rwlock_rdlock(&t->lock);
    cdb_scan_begin(&sc, t, f, NULL);
    while ((e = cdb_scan_next(&sc, NULL))) {
        if (filter_ok(f, e))
            fn(ud, e);
        if (CR_UNLIKELY(--budget == 0))
            budget = scan_breathe(t, &sc);
    }
    cdb_scan_end(&sc);
    pthread_rwlock_unlock(&t->lock);
    return !filter_regex_overflow(p);
}

/* A type is present when one entry of its list is a live entity that still
 * has it (entries may be stale: cordb.h); almost always the first. */
bool cdb_types(cdb_t *db, const char *tenant, void (*fn)(void *ud, const char *type), void *ud,
               problem_t *p)
{
    cdb_tenant_t *t = tenant_get(db, tenant, p);

    if (!t)
        return false;
    pthread_rwlock_rdlock(&t->lock);
    for (uint32_t b = 0; b < t->types.cap; b++) {
        const cdb_tlist_t *l = &t->types.t[b];

        if (!l->type)
            continue;
        for (uint32_t i = 0; i < l->n; i++) {
            const cr_entity_t *e = l->v[i] < t->n_slots ? t->slots[l->v[i]].cur : NULL;

            if (e && entity_has_type(e, l->type)) {
                fn(ud, l->type);
                break;
            }
        }
    }
    pthread_rwlock_unlock(&t->lock);
    return true;
}

bool cdb_attributes(cdb_t *db, const char *tenant, void (*fn)(void *ud, const char *name),
                    void *ud, problem_t *p)
{
    cdb_tenant_t *t = tenant_get(db, tenant, p);

    if (!t)
        return false;
    pthread_rwlock_rdlock(&t->lock);
    cdb_attridx_each(&t->attrs, fn, ud);
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
    out->releases    = t->releases;
    out->geo_bytes   = cdb_geoidx_bytes(&t->geo, &out->geo_entries);
    out->geo_grids   = t->geo.n;
    out->geo_scans   = atomic_load_explicit(&t->geo_scans, memory_order_relaxed);
    out->geo_level   = t->geo.n ? t->geo.g[0].level : 0;
    out->geo_next_level = t->geo.n && t->geo.g[0].next ? t->geo.g[0].next->level : 0;
    out->geo_large   = t->geo.n ? t->geo.g[0].large.n : 0;
    out->index_bytes = (size_t)t->cap_slots * sizeof(cdb_slot_t) + cdb_idmap_bytes(&t->ids) +
                       cdb_typeidx_bytes(&t->types, &entries) + out->geo_bytes +
                       cdb_attridx_bytes(&t->attrs);
    out->type_entries = entries;
    out->order_bytes  = cdb_oidx_bytes(t, &out->order_indexes);
    for (uint32_t i = 0; i < t->n_slots; i++)
        if (t->slots[i].cur)
            out->entity_bytes += t->slots[i].cur->bytes;
    pthread_rwlock_unlock(&t->lock);
    return true;
}

/* ------------------------------------------------------- the table (store.h) */

static bool be_holds(void *db) { return ((cdb_t *)db)->holds; }

static void *be_open(problem_t *p)
{
    bool pref = cr_config.db_lock_prefer && strcasecmp(cr_config.db_lock_prefer, "writes") == 0;

    if (cr_config.db_dir && *cr_config.db_dir)
        return cdb_open_disk(pref, p);
    return cdb_open(pref, p);
}

static void be_close(void *db) { cdb_close(db); }
static bool be_tenant_exists(void *db, const char *tenant) { return cdb_tenant_exists(db, tenant); }

static void be_tenants(void *db, void (*fn)(void *ud, const char *tenant), void *ud)
{
    cdb_tenants(db, fn, ud);
}

static bool be_create(void *db, const char *tenant, const cr_entity_t *draft, store_change_t *ch,
                      problem_t *p)
{
    return cdb_create(db, tenant, draft, ch, p);
}

static bool be_upsert(void *db, const char *tenant, const cr_entity_t *draft, bool replace,
                      bool *created, arena_t *scratch, store_change_t *ch, problem_t *p)
{
    return cdb_upsert(db, tenant, draft, replace, created, scratch, ch, p);
}

static cr_entity_t *be_get(void *db, const char *tenant, const char *id, problem_t *p)
{
    return cdb_get(db, tenant, id, p);
}

static bool be_modify(void *db, const char *tenant, const char *id, entity_op_t op,
                      const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                      arena_t *scratch, store_change_t *ch, problem_t *p)
{
    return cdb_modify(db, tenant, id, op, patch, args, res, scratch, ch, p);
}

static bool be_remove(void *db, const char *tenant, const char *id, const typesel_t *if_type,
                      store_change_t *ch, problem_t *p)
{
    return cdb_delete(db, tenant, id, if_type, ch, p);
}

static bool be_purge(void *db, const char *tenant, const entity_filter_t *f, size_t *deleted,
                     void (*emit)(void *ud, store_change_t *group, size_t n), void *ud,
                     problem_t *p)
{
    return cdb_purge(db, tenant, f, deleted, emit, ud, p);
}

static bool be_batch(void *db, const char *tenant, store_batch_item_t *items, size_t n,
                     arena_t *scratch, store_change_t *group, size_t *n_group, problem_t *p)
{
    return cdb_batch(db, tenant, items, n, scratch, group, n_group, p);
}

static bool be_query(void *db, const char *tenant, const entity_filter_t *f, arena_t *a,
                     store_page_t *out, problem_t *p)
{
    return cdb_query(db, tenant, f, f->offset, f->limit, f->count, a, out, p);
}

static bool be_foreach(void *db, const char *tenant, const entity_filter_t *f,
                       void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p)
{
    return cdb_foreach(db, tenant, f, fn, ud, p);
}

static bool be_types(void *db, const char *tenant, void (*fn)(void *ud, const char *type),
                     void *ud, problem_t *p)
{
    return cdb_types(db, tenant, fn, ud, p);
}

static bool be_attributes(void *db, const char *tenant, void (*fn)(void *ud, const char *name),
                          void *ud, problem_t *p)
{
    return cdb_attributes(db, tenant, fn, ud, p);
}

static void be_stats(void *db, uint64_t *entities, uint64_t *tenants)
{
    cdb_stats(db, entities, tenants);
}

static bool be_tenant_entities(void *db, const char *tenant, uint64_t *n)
{
    return cdb_tenant_entities(db, tenant, n);
}

static bool be_obj_put(void *db, const char *tenant, int kind, const char *id, const char *json,
                       size_t len, bool create_only, problem_t *p)
{
    return cdb_obj_put(db, tenant, kind, id, json, len, create_only, p);
}

static bool be_obj_delete(void *db, const char *tenant, int kind, const char *id, problem_t *p)
{
    return cdb_obj_delete(db, tenant, kind, id, p);
}

static char *be_obj_get(void *db, const char *tenant, int kind, const char *id, arena_t *a,
                        size_t *len, problem_t *p)
{
    return cdb_obj_get(db, tenant, kind, id, a, len, p);
}

static void be_disk_stats(void *vdb, store_stats_t *st)
{
    cdb_t          *db = vdb;
    cdb_log_stats_t ls;

    if (!db->log)
        return;
    cdb_log_get_stats(db->log, &ls);
    st->on_disk          = true;
    st->log_failed       = ls.failed;
    st->log_records      = ls.records;
    st->log_bytes        = ls.bytes;
    st->log_appends      = ls.appends;
    st->log_fsyncs       = ls.fsyncs;
    st->log_fsync_groups = ls.fsync_groups;
    st->log_fsync_us     = ls.fsync_us;
    st->log_held         = ls.held;
    st->log_failures     = ls.failures;
    st->snapshots        = ls.snapshots;
}

static bool be_snapshot(void *db, store_snapshot_info_t *info, problem_t *p)
{
    return cdb_snapshot(db, info, p);
}

static bool be_snapshot_start(void *db, problem_t *p)
{
    return cdb_snapshot_start(db, p);
}

static bool be_snapshot_last(void *db, store_snapshot_info_t *info, bool *running, problem_t *p)
{
    return cdb_snapshot_last(db, info, running, p);
}

static void be_obj_foreach(void *db, int kind,
                           void (*fn)(void *ud, const char *tenant, const char *id,
                                      const char *json, size_t len),
                           void *ud)
{
    cdb_obj_foreach(db, kind, fn, ud);
}

const store_backend_t cdb_backend = {
    .name          = "corDB",
    .open          = be_open,
    .close         = be_close,
    .tenant_exists = be_tenant_exists,
    .tenants       = be_tenants,
    .create        = be_create,
    .upsert        = be_upsert,
    .get           = be_get,
    .modify        = be_modify,
    .remove        = be_remove,
    .purge         = be_purge,
    .batch         = be_batch,
    .query         = be_query,
    .foreach       = be_foreach,
    .types         = be_types,
    .attributes    = be_attributes,
    .stats         = be_stats,
    .obj_put       = be_obj_put,
    .obj_delete    = be_obj_delete,
    .obj_get       = be_obj_get,
    .obj_foreach   = be_obj_foreach,
    .snapshot      = be_snapshot,
    .snapshot_start = be_snapshot_start,
    .snapshot_last = be_snapshot_last,
    .disk_stats    = be_disk_stats,
    .tenant_entities = be_tenant_entities,
    .holds         = be_holds,
};
