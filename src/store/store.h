/*
 * store.h - the Store interface (DESIGN.md "Store interface").
 *
 * One interface, implemented by corDB (src/store/cordb/, in RAM, or on disk
 * with --dbDir: doc/cordb.md "On disk") and later by MongoDB, through a table
 * of operations (store_backend_t) chosen by --database. A store knows nothing of HTTP: it keeps frozen
 * entities (model.h) per tenant, indexes them, and applies the model's
 * operations in one atomic step per write. Every committed write is a Change
 * in its tenant's ordered stream, handed to the change hooks (the on-disk log,
 * notify/, history/) in commit order after the lock is released (the
 * contract is below).
 *
 * Tenants: tenant NULL or "" is the default tenant. A write creates the tenant
 * on first use; a read of a tenant never written fails with NonexistentTenant.
 *
 * Entities returned by the store are references (entity_unref() them). The
 * store lock is held only while a read finds and refs entities; rendering
 * happens outside it.
 */
#ifndef CORAINE_STORE_H
#define CORAINE_STORE_H

#include "../core/core.h"
#include "../model/model.h"

struct store_batch_item;
struct store_page;
struct store_snapshot_info;
struct store_stats;
struct store_ctr;

typedef struct store store_t;
typedef struct store_stream store_stream_t;   /* a tenant's delivery queue (store.c) */

/* ------------------------------------------------------- the change stream
 *
 * Every committed write is a Change. A tenant's changes form ONE stream:
 *  - seq: 1, 2, 3 ... per tenant, dense (no gaps), assigned in the backend's
 *    atomic step (under corDB's tenant write lock); a write that fails or
 *    changes nothing takes no number (one undone after a failed log write or
 *    fsync gives its number back: it is always the tenant's latest); seqs
 *    count from 1 again after a restart (the log has its own, global seq);
 *  - at: the commit time (µs since the epoch), per tenant strictly increasing
 *    (max(clock, last + 1)), stamped in the same atomic step; it is the
 *    after-version's modifiedAt (and createdAt on a create), so modifiedAt
 *    never goes backwards for an entity and createdAt follows creation order;
 *  - before / after: the versions (NULL before: created; NULL after: deleted),
 *    frozen, immutable, each holding a reference owned by the store;
 *  - created / updated / deleted: the attribute instances (name, datasetId)
 *    the change added, changed or removed (an entity delete removes them all).
 *
 * Groups. A hook is called with a GROUP: an array of changes with consecutive
 * seqs that one operation committed in one atomic step (one change for a
 * create, modify or delete; all the entities of a store_batch(); a chunk of
 * at most STORE_PURGE_CHUNK deletes of a purge).
 *
 * Delivery contract:
 *  - order: per tenant, hooks see groups strictly in seq order, each group
 *    once, never two groups of a tenant at the same time (different tenants:
 *    concurrently);
 *  - thread: on a writer's thread, no store lock held (readers and writers of
 *    other entities proceed); the thread that committed a group may run the
 *    groups before it (of other writers) first, or wait while another writer
 *    runs them: a slow hook delays the writers of its tenant, never readers;
 *    a pending write's group (held answers, below) on the backend's syncer
 *    thread;
 *  - reply: a store_* write call returns after every hook has returned for
 *    its change(s), but a pending write's: its ticket is answered after;
 *  - durability (corDB on disk, --dbDir): the log is not a hook. Its records
 *    are written INSIDE the atomic step (under the tenant's write lock,
 *    after the new versions are built, before any reader can see them), so
 *    the log is in commit order per tenant and a failed write is undone in
 *    the same step (the call fails with 503, nothing applied, no seq taken).
 *    With --dbSync always the backend then waits for the group's fsync with
 *    no lock held, and only then returns (so the hooks run after the write
 *    is durable); if that fsync fails, the backend undoes the group (in
 *    reverse log order over all writers), gives its seqs back and fails
 *    with 503: the hooks never see it. A reader may see such a version for
 *    the microseconds between its commit and the failed fsync. A held
 *    write (below, "Held answers") returns before its fsync instead: its
 *    hooks run later, on the backend's syncer thread, once it is durable
 *    (still in seq order), and a failed fsync undoes it there;
 *  - references: the group and everything it points to (entities, names,
 *    attribute arrays) are valid only during the call; keep an entity with
 *    entity_ref(); names are interned (valid for the process), datasetIds
 *    point into the versions;
 *  - a hook must not call the store's write functions for the same tenant
 *    (it would wait for itself); reads are fine.
 */
typedef enum {
    STORE_OP_CREATE = 1,     /* 5.6.1, batch create, upsert of a new id */
    STORE_OP_UPDATE,         /* 5.6.2 PATCH .../attrs, 5.6.4 PATCH .../attrs/{attr}, batch update/upsert */
    STORE_OP_MERGE,          /* 5.6.17, batch merge */
    STORE_OP_REPLACE,        /* 5.6.18, 5.6.19, upsert?options=replace */
    STORE_OP_APPEND,         /* 5.6.3 */
    STORE_OP_DELETE_ATTR,    /* 5.6.5 */
    STORE_OP_DELETE,         /* 5.6.6, batch delete */
    STORE_OP_PURGE           /* 6.4.3.3 DELETE /entities?... */
} store_op_t;

const char *store_op_name(store_op_t op);    /* "create", "update", ... */
/* The store operation that entity_apply's op commits as. */
store_op_t  store_op_of(entity_op_t op);

typedef struct store_attr_ref {
    const char *name;           /* expanded, interned */
    const char *dataset_id;     /* NULL: the default instance */
} store_attr_ref_t;

typedef struct store_change {
    const char             *tenant;   /* "" for the default */
    uint64_t                seq;      /* 0: nothing committed (no change) */
    int64_t                 at;       /* commit time, µs */
    store_op_t              op;
    cr_entity_t            *before;
    cr_entity_t            *after;
    const store_attr_ref_t *created, *updated, *deleted;   /* filled by store.c before the hooks */
    uint32_t                n_created, n_updated, n_deleted;
    store_stream_t         *stream;   /* backend-set: the tenant's stream (store_stream_new) */
    uint64_t                be_aux;   /* the backend's own (corDB: where a delete can be undone) */
    uint64_t                outbox;   /* 0, or the change's outbox entry (store_set_outbox) */
} store_change_t;

typedef void (*store_hook_fn)(void *ud, const store_change_t *group, size_t n);

#define STORE_PURGE_CHUNK 256       /* deletes per purge group (and write-lock hold) */

/* ------------------------------------------------------- the backend table
 *
 * store_open() picks one table by --database and every store_* call below goes
 * through it. A backend keeps entities per tenant and commits each write in
 * one atomic step that also assigns seq/at (see above) and sets ch->stream to
 * the tenant's stream, which it creates with store_stream_new() when it
 * creates the tenant and frees with store_stream_free() at close. Everything
 * else (hooks, ordered delivery, attribute lists, counters) is store.c's.
 * Arguments have the meaning of the store_* function of the same name.
 */
typedef struct store_backend {
    const char *name;
    void *(*open)(problem_t *p);
    void  (*close)(void *db);
    bool  (*tenant_exists)(void *db, const char *tenant);
    void  (*tenants)(void *db, void (*fn)(void *ud, const char *tenant), void *ud);
    bool  (*create)(void *db, const char *tenant, const cr_entity_t *draft, store_change_t *ch,
                    problem_t *p);
    bool  (*upsert)(void *db, const char *tenant, const cr_entity_t *draft, bool replace,
                    bool *created, arena_t *scratch, store_change_t *ch, problem_t *p);
    cr_entity_t *(*get)(void *db, const char *tenant, const char *id, problem_t *p);
    bool  (*modify)(void *db, const char *tenant, const char *id, entity_op_t op,
                    const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                    arena_t *scratch, store_change_t *ch, problem_t *p);
    bool  (*remove)(void *db, const char *tenant, const char *id, const typesel_t *if_type,
                    store_change_t *ch, problem_t *p);
    /* emit(ud, group, n) for each committed chunk, no lock held; the backend
     * drops the group's references after it returns. */
    bool  (*purge)(void *db, const char *tenant, const entity_filter_t *f, size_t *deleted,
                   void (*emit)(void *ud, store_change_t *group, size_t n), void *ud,
                   problem_t *p);
    bool  (*batch)(void *db, const char *tenant, struct store_batch_item *items, size_t n,
                   arena_t *scratch, store_change_t *group, size_t *n_group, problem_t *p);
    bool  (*query)(void *db, const char *tenant, const entity_filter_t *f, arena_t *a,
                   struct store_page *out, problem_t *p);
    bool  (*foreach)(void *db, const char *tenant, const entity_filter_t *f,
                     void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p);
    bool  (*types)(void *db, const char *tenant, void (*fn)(void *ud, const char *type),
                   void *ud, problem_t *p);
    bool  (*attributes)(void *db, const char *tenant, void (*fn)(void *ud, const char *name),
                        void *ud, problem_t *p);
    void  (*stats)(void *db, uint64_t *entities, uint64_t *tenants);
    void  (*disk_stats)(void *db, struct store_stats *st);   /* the backend's own counters (disk, scans); NULL: none */
    /* Optional (NULL: not known): the tenant's entity count, without a scan (corDB: O(1); mongoc: the
     * collection's estimated count, one round trip). */
    bool  (*tenant_entities)(void *db, const char *tenant, uint64_t *n);
    /* stored objects (store_obj_*) */
    bool  (*obj_put)(void *db, const char *tenant, int kind, const char *id, const char *json,
                     size_t len, bool create_only, problem_t *p);
    bool  (*obj_delete)(void *db, const char *tenant, int kind, const char *id, problem_t *p);
    char *(*obj_get)(void *db, const char *tenant, int kind, const char *id, arena_t *a,
                     size_t *len, problem_t *p);
    void  (*obj_foreach)(void *db, int kind,
                         void (*fn)(void *ud, const char *tenant, const char *id, const char *json,
                                    size_t len),
                         void *ud);
    /* shared stores (mongoc; NULL for corDB): store_obj_changed / store_obj_sync */
    bool  (*obj_changed)(void *db);
    void  (*obj_sync)(void *db, int kind,
                      void (*put)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                      void (*gone)(void *ud, const char *tenant, const char *id), void *ud);
    /* shared stores (mongoc; NULL for corDB): store_ctr_add / store_ctr_read / store_ctr_flush */
    void  (*ctr_add)(void *db, const char *tenant, int kind, const char *id, const struct store_ctr *d);
    bool  (*ctr_read)(void *db, const char *tenant, int kind, const char *id, struct store_ctr *tot);
    void  (*ctr_flush)(void *db);
    bool  (*snapshot)(void *db, struct store_snapshot_info *info, problem_t *p);
    bool  (*snapshot_start)(void *db, problem_t *p);
    bool  (*snapshot_last)(void *db, struct store_snapshot_info *info, bool *running, problem_t *p);
    /* Optional (NULL: never): whether a write may return before it is
     * durable when its answer can be held ("Held answers"). */
    bool  (*holds)(void *db);
    /* Optional (NULL: no outbox): store_set_outbox, store_outbox_done, store_outbox_sweep. */
    void  (*outbox_set)(void *db, bool (*due)(void *ud, const char *tenant, const cr_entity_t *e), void *ud);
    void  (*outbox_done)(void *db, const char *tenant, uint64_t id);
    void  (*outbox_sweep)(void *db, void (*emit)(void *ud, store_change_t *g, size_t n), void *ud);
} store_backend_t;

/* For backends: a tenant's stream (never fails: out of memory aborts). */
store_stream_t *store_stream_new(void);
void            store_stream_free(store_stream_t *st);

/* ------------------------------------------------------- held answers
 *
 * --dbSync always answers a write once it is on disk. A caller that can
 * hold its answer without holding its thread (api/: req_hold) brackets its
 * work with store_hold_begin() and store_hold_end(). In between, the store's
 * entity writes (create, upsert, modify, delete, batch) may return as soon
 * as their change is committed, visible and logged, before it is synced:
 * such a write is PENDING. store_hold_end() then returns a ticket (NULL:
 * nothing pending, every write returned was durable as --dbSync promises),
 * and store_ticket_wait(t, fn, ud) calls fn(ud, ok, p) exactly once, on any
 * thread (the syncer's, or at once on the caller's):
 *  - ok: every pending write of the ticket is durable, its hooks have run
 *    (in seq order, on the syncer's thread) and so have the flushes
 *    (store_add_flush): answer what the handler built;
 *  - !ok, p (503, PB_HTTP): an fsync failed before one of them: the
 *    pending writes not yet durable were undone (nothing of them applied,
 *    the hooks never saw them), as a failed fsync is answered without a
 *    held answer; or a flush failed (the write is durable in the store,
 *    p says what may be missing). Nothing may be acknowledged.
 * Stored objects (store_obj_put, store_obj_delete) are held the same way;
 * an undone one is also taken back where it took effect (store_set_obj_undo).
 * Purges always return after their sync.
 * Every other thread, and every backend or mode without it (RAM,
 * interval, none, mongoc), returns durable writes as before: begin/end
 * cost a thread-local test. */
typedef struct store_ticket store_ticket_t;
void            store_hold_begin(store_t *s);
store_ticket_t *store_hold_end(void);
/* Whether the last write call of this thread (between begin and end)
 * returned pending: its hooks, and what they write (history), come later. */
bool            store_hold_pending(void);
void            store_ticket_wait(store_ticket_t *t, void (*fn)(void *ud, bool ok, const problem_t *p),
                                  void *ud);
/* Something the write held (history/: its room in the history's queue)
 * given back when the write is done: when the last write call of this
 * thread returned pending, fn(ud, n) runs once its ticket is answered (its
 * pending writes durable and their hooks run, or undone), on that thread,
 * before the answer; otherwise at once. One fn per ticket (n adds up). */
void            store_hold_release(void (*fn)(void *ud, size_t n), void *ud, size_t n);
/* At start-up (as store_add_hook): fn(ud) runs on the syncer's thread after
 * the hooks of a round of pending writes and before they are answered
 * (history/: one fdatasync of its own log for the whole round). It returns
 * NULL when done, else a static text saying what is not durable: the
 * round's writes are then answered 503 with it. At most 4. */
void            store_add_flush(store_t *s, const char *(*fn)(void *ud), void *ud);

/* For backends. store_pending(): NULL, or the pending write the current
 * call may become: its change array (n entries, the backend's `ch` /
 * `group` argument is it). A backend whose write is logged but not synced
 * may return at once if it calls store_pending_adopt() (the write is then
 * the backend's to complete; the caller no longer touches the array), and
 * later, from its syncer and in log order, store_pending_done(pd, g, n, ok):
 * ok when the group g[0..n) is durable (the hooks run then), !ok after it
 * undid the group; then store_pending_round() once per round. */
typedef struct store_pending store_pending_t;
#define STORE_PENDING_AREA 96       /* bytes of the backend's own in a pending write */
store_pending_t *store_pending(void);
/* The backend's STORE_PENDING_AREA bytes (aligned) in pd, valid until its
 * store_pending_round: what it keeps to complete the write, no malloc. */
void            *store_pending_area(store_pending_t *pd);
void             store_pending_adopt(void);
void             store_pending_done(store_pending_t *pd, store_change_t *g, size_t n, bool ok);
void             store_pending_round(void);

/* A pending object write whose sync failed: the backend has put the object
 * back as it was before the write (store_obj_get reads that), then, on the
 * syncer's thread and before the write is answered 503, fn(ud, s, tenant,
 * kind, id) lets the object's owner (ops/) bring what it derived from it (a
 * registry) back to the store's state. fn may lock what the object's writers
 * hold around their store_obj_* calls (they never wait for a sync while a
 * hold is on). Set once, at start-up. Backends call store_obj_undone(pd, ...)
 * for such a write, before its store_pending_done(pd, NULL, 0, false). */
typedef void (*store_obj_undo_fn)(void *ud, store_t *s, const char *tenant, int kind, const char *id);
void store_set_obj_undo(store_t *s, store_obj_undo_fn fn, void *ud);
void store_obj_undone(store_pending_t *pd, const char *tenant, int kind, const char *id);

/* Opens the store cr_config asks for (--database, --dbDir ...). */
store_t *store_open(problem_t *p);
void     store_close(store_t *s);
/* At start-up, before the store is shared between threads and before its
 * first write (a later hook is refused with a log line); at most 16. */
void     store_add_hook(store_t *s, store_hook_fn fn, void *ud);

/* The notification outbox of a store shared by several processes (mongoc;
 * doc/mongodb.md "Delivery across processes"; corDB has none: its log makes
 * the delivery as durable as the write). At start-up, by the notifier:
 * due(ud, tenant, e) tells whether a change of e may be due to a
 * subscription; the backend then writes an outbox entry with the change
 * (before it, so a committed change always has one) and sets ch->outbox.
 * The notifier calls store_outbox_done(tenant, ch->outbox) once every
 * notification of the change ended (delivered, or dropped by the
 * subscription's rules); an entry not done is renewed by its process and,
 * once that process is gone (its lease expired), taken over by another,
 * whose store_outbox_sweep hands it to replay(ud, group, 1) (in the
 * tenant's order, with no other hook). A store without an outbox
 * ignores all three. */
void     store_set_outbox(store_t *s, bool (*due)(void *ud, const char *tenant, const cr_entity_t *e),
                          store_hook_fn replay, void *ud);
void     store_outbox_done(store_t *s, const char *tenant, uint64_t id);
/* Every --syncInterval (ops/objsync.c): leases renewed, done entries deleted, expired ones replayed. */
void     store_outbox_sweep(store_t *s);

/* The default tenant (NULL or "") always exists. A named tenant exists from
 * its first successful write until the store closes, also after its last
 * entity is deleted (its tables and indexes are then released; what remains
 * is a few hundred bytes, bounded by --maxTenants). Creating a tenant beyond
 * --maxTenants fails with OperationNotSupported (422: the broker does not
 * support more tenants), and changes nothing. */
bool     store_tenant_exists(store_t *s, const char *tenant);
/* Tenant names (for /statistics and admin); calls fn for each, the default
 * tenant first as "". */
void     store_tenants(store_t *s, void (*fn)(void *ud, const char *tenant), void *ud);
/* The tenant's entity count (/metrics); false when the tenant does not exist
 * or the backend does not know it cheaply. */
bool     store_tenant_entities(store_t *s, const char *tenant, uint64_t *n);

/* ------------------------------------------------------------ entities */

/* 5.6.1: AlreadyExists when the id is taken. `draft` is frozen by the store. */
bool store_create(store_t *s, const char *tenant, const cr_entity_t *draft, problem_t *p);

/* Upsert for batch upsert (6.15): creates, or replaces (replace=true) / updates the attributes (5.6.2).
 * *created tells which happened. The draft's id must equal the stored id. */
bool store_upsert(store_t *s, const char *tenant, const cr_entity_t *draft, bool replace,
                  bool *created, arena_t *scratch, problem_t *p);

/* A reference to the entity, or NULL with ResourceNotFound / NonexistentTenant. */
cr_entity_t *store_get(store_t *s, const char *tenant, const char *id, problem_t *p);

/* Applies a model operation (entity_apply) to entity `id` atomically.
 * patch may be NULL for OP_DELETE_ATTR. `scratch` is the caller's arena.
 * ResourceNotFound when the entity (or the attribute for *_ATTR ops) is not
 * there; NonexistentTenant for a tenant never written. res gets per-attribute
 * outcomes (207 responses); when res reports every attribute notUpdated, the
 * entity is left as it is and no Change is emitted. args->if_type (may be
 * NULL): the entity must match it, checked in the same atomic step (?type=);
 * otherwise ResourceNotFound and nothing changes. */
bool store_modify(store_t *s, const char *tenant, const char *id, entity_op_t op,
                  const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                  arena_t *scratch, problem_t *p);

/* 5.6.6. store_delete_if: only when the entity matches if_type (NULL: any),
 * checked in the same atomic step (?type= of DELETE /entities/{id}); an
 * entity of another type is ResourceNotFound. */
bool store_delete(store_t *s, const char *tenant, const char *id, problem_t *p);
bool store_delete_if(store_t *s, const char *tenant, const char *id, const typesel_t *if_type,
                     problem_t *p);

/* ---------------------------------------------------------------- batches */

/* One entity of a batch operation (6.14 - 6.18). */
typedef enum {
    STORE_B_CREATE = 1,         /* 6.14: AlreadyExists when the id is taken */
    STORE_B_UPSERT,             /* 6.15, options=update: attributes updated (5.6.2) */
    STORE_B_UPSERT_REPLACE,     /* 6.15, default: the entity replaced */
    STORE_B_UPDATE,             /* 6.16: append (args.no_overwrite for options=noOverwrite) */
    STORE_B_MERGE,              /* 6.18 */
    STORE_B_DELETE              /* 6.17: id only */
} store_batch_kind_t;

typedef struct store_batch_item {
    store_batch_kind_t kind;
    const cr_entity_t *draft;   /* all but DELETE */
    const char        *id;      /* DELETE (the others use draft->id) */
    op_args_t          args;    /* UPDATE / MERGE */
    /* results */
    bool               ok;
    bool               created; /* UPSERT*: a new entity */
    op_result_t       *res;     /* UPDATE: per-attribute outcomes (caller's, may be NULL) */
    problem_t         *problem; /* when !ok: why (in the scratch arena; only failures cost one) */
} store_batch_item_t;

/* Applies every item in ONE atomic step of the tenant (items fail or succeed
 * one by one, as 6.14 - 6.18 say: a failed item changes nothing and does not
 * stop the others) and hands the committed changes to the hooks as one group
 * (on disk: one group of log records, recovered whole or not at all).
 * false (p) only when nothing could run: NonexistentTenant for a batch with no
 * creating item on a tenant never written, the --maxTenants limit, or (503,
 * PB_HTTP) the log on disk failed: then no item was applied. The atomic
 * step holds the tenant's write lock for the whole batch: callers bound n
 * (the API's batch limit). */
bool store_batch(store_t *s, const char *tenant, store_batch_item_t *items, size_t n,
                 arena_t *scratch, problem_t *p);

/* ------------------------------------------------------------- queries */

typedef struct store_page {
    cr_entity_t **items;        /* refs, in the caller's arena; entity_unref each */
    size_t        n;
    size_t        count;        /* total matches, when f->count */
} store_page_t;

/* Entities matching f (NULL = all), in creation order, skipping f->offset,
 * at most f->limit (0 = none: count only). With f->count the scan goes on to
 * count every match; without it, it stops when the page is full.
 * With f->order_by (orderBy, 4.23) the page is the first of all matches in
 * that order (order_keys_cmp: every backend orders alike); the scan sees
 * every match, keeping the best offset+limit (corDB: a bounded heap), and
 * the count is exact.
 * Access path (corDB): the ids of f and of its selectors, else the type index
 * when the type selections are plain lists of types, else a bounded geo-query
 * through the geo index, else every entity; filter_match() decides. A long
 * scan holds the tenant's read lock in chunks (CDB_SCAN_CHUNK candidates),
 * so writers get in between; entities written meanwhile may or may not be
 * seen, each at most once, in creation order.
 * A regex that reaches PCRE2's match limit on some entity makes the query
 * fail with BadRequestData (filter_regex_overflow). */
bool store_select(store_t *s, const char *tenant, const entity_filter_t *f, arena_t *a,
                  store_page_t *out, problem_t *p);
/* The same with the pagination given apart (f's own offset/limit/count ignored). */
bool store_query(store_t *s, const char *tenant, const entity_filter_t *f, size_t offset,
                 size_t limit, bool want_count, arena_t *a, store_page_t *out, problem_t *p);
void store_page_release(store_page_t *pg);

/* Calls fn for every entity matching f (f NULL = all), under the read lock
 * taken in chunks: fn must be quick and must not call the store. Returns false
 * (with p) on a nonexistent tenant or a regex over its match limit. Used by
 * /types/{type} (f: the type, through the type index) and /attributes. */
bool store_foreach(store_t *s, const char *tenant, const entity_filter_t *f,
                   void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p);

/* Discovery (5.7.5 GET /types): every type that at least one entity of the
 * tenant has, from the type index (O(types), not O(entities)); fn is called
 * under the read lock, each type once, in no particular order. */
bool store_types(store_t *s, const char *tenant, void (*fn)(void *ud, const char *type),
                 void *ud, problem_t *p);
/* Discovery (5.7.8 GET /attributes): every attribute name that at least one
 * entity of the tenant has, from the attribute index (O(names)); same rules. */
bool store_attributes(store_t *s, const char *tenant, void (*fn)(void *ud, const char *name),
                      void *ud, problem_t *p);

/* Purge (6.4.3.3): deletes every entity matching f (NULL = all); *deleted gets
 * the number. The hooks get the deletes in groups of at most
 * STORE_PURGE_CHUNK (op STORE_OP_PURGE), each committed in one atomic step;
 * entities created during a long purge may or may not be deleted. */
bool store_purge(store_t *s, const char *tenant, const entity_filter_t *f, size_t *deleted,
                 problem_t *p);

/* ------------------------------------------------------------ objects
 *
 * Stored objects beside the entities (subscriptions, registrations, hosted @contexts):
 * per tenant, an id, a kind and a JSON text. Every backend keeps them (corDB in RAM and on disk, MongoDB).
 * Object writes do not go through the change hooks; on disk they are logged
 * and recovered like entities. Ids are unique per (tenant, kind). */
typedef enum {
    STORE_OBJ_SUBSCRIPTION = 1, STORE_OBJ_REGISTRATION = 2, STORE_OBJ_CONTEXT = 3,
    STORE_OBJ_CSOURCE_SUBSCRIPTION = 4,  /* context source registration subscriptions (5.11) */
    STORE_OBJ_ENTITY_MAP = 5             /* EntityMaps (5.2.39; fwd/fwd_map.c, through ops/entitymaps.c) */
} store_obj_kind_t;
/* Creates (create_only: AlreadyExists when the id is taken) or replaces object id; creates the tenant (4.14). */
bool  store_obj_put(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id,
                    const char *json, size_t len, bool create_only, problem_t *p);
/* ResourceNotFound when absent (NonexistentTenant for a tenant never written). */
bool  store_obj_delete(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id, problem_t *p);
/* The JSON text copied into arena a (NUL-terminated), or NULL with ResourceNotFound / NonexistentTenant. */
char *store_obj_get(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id, arena_t *a,
                    size_t *len, problem_t *p);
/* Every object of the kind over all tenants (tenant "" = default), in creation order per tenant; fn must
 * not call the store. Used at start, after recovery, to rebuild in-memory indexes, and by listings. */
void  store_obj_foreach(store_t *s, store_obj_kind_t kind,
                        void (*fn)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                        void *ud);

/* Objects written by other processes. A store that several coraine processes
 * share (mongoc) tells each about the objects the others wrote:
 * store_obj_changed() is a cheap check (one version document, true when
 * another process may have written an object since the last call, on the
 * first call, and when the check itself failed);
 * store_obj_sync() calls put for every object of the kind that another
 * process created or changed since this process last wrote or read it, and
 * gone for every one another process deleted (callbacks must not call the
 * store's object functions). corDB: false, nothing (nobody else writes). */
bool  store_obj_changed(store_t *s);
void  store_obj_sync(store_t *s, store_obj_kind_t kind,
                     void (*put)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                     void (*gone)(void *ud, const char *tenant, const char *id), void *ud);

/* Counters of a stored object (a subscription's timesSent ...) aggregated
 * over every process on a shared store (mongoc). store_ctr_add adds this
 * process's deltas (counts summed; times, µs, the greatest kept): kept in
 * memory, written by store_ctr_flush (one bulk write; every --syncInterval
 * and at close). store_ctr_read: the totals (the database's as last read,
 * plus this process's deltas not yet written); false: the store keeps no
 * counters (corDB: the process's own are the totals). */
typedef struct store_ctr {
    int64_t sent, failed;
    int64_t last_notification, last_success, last_failure;
} store_ctr_t;
bool  store_ctr_shared(store_t *s);
void  store_ctr_add(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id, const store_ctr_t *d);
bool  store_ctr_read(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id, store_ctr_t *tot);
void  store_ctr_flush(store_t *s);

/* ------------------------------------------------------------ snapshots */

typedef struct store_snapshot_info {
    uint64_t seq;               /* every log record up to seq is in it */
    uint64_t entities, objects, bytes;
    double   ms;                /* how long it took */
    char     file[256];         /* "" before the first snapshot */
    char     error[256];        /* store_snapshot_last: why the last one failed, "" if it did not */
} store_snapshot_info_t;

/* Writes a snapshot of the store on disk now and returns when it is
 * installed, from the immutable versions: writers go on meanwhile.
 * OperationNotSupported for a store in RAM; 503 when the disk fails. */
bool store_snapshot(store_t *s, store_snapshot_info_t *info, problem_t *p);
/* POST /admin/snapshot: the same in the store's own thread, returning at
 * once (an HTTP thread must not be held for seconds: its other connections
 * would wait); GET /admin/snapshot: the last one (running: one is being
 * written). */
bool store_snapshot_start(store_t *s, problem_t *p);
bool store_snapshot_last(store_t *s, store_snapshot_info_t *info, bool *running, problem_t *p);

/* ----------------------------------------------------------- statistics */

typedef struct store_stats {
    uint64_t entities;          /* over all tenants */
    uint64_t tenants;
    uint64_t creates, updates, deletes, queries;
    /* on disk (corDB --dbDir): the log; writes per fsync = groupsSynced / fsyncs (always) */
    bool     on_disk, log_failed;
    uint64_t log_records, log_bytes, log_appends, log_fsyncs, log_fsync_groups, log_failures;
    uint64_t log_fsync_us;      /* time spent in the log's fdatasyncs, µs */
    uint64_t log_held;          /* writes answered from the syncer (held answers) */
    uint64_t snapshots;
    /* mongoc: the documents the server sent to the broker's query scans, and
     * those that matched (the rest was judged out by filter_match) */
    bool     scans;
    uint64_t scan_docs, scan_matched;
} store_stats_t;
void store_get_stats(store_t *s, store_stats_t *st);

#endif
