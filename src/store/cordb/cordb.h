/*
 * cordb.h - corDB, the embedded store, as the store layer (store.c) sees it,
 * plus the data structures its files share. Internal to src/store/: other
 * modules use store.h only.
 *
 * Shape (doc/cordb.md "## corDB" has the costs):
 *
 *   cdb_t ── tenant table (rwlock) ── name -> cdb_tenant_t (never freed before close;
 *                                        emptied: its tables and indexes released)
 *   cdb_tenant_t (rwlock, reader or writer preference from --dbLockPrefer)
 *     slots[]  {cr_entity_t *cur}   creation order; cur NULL = tombstone
 *     ids      open addressing, 8-byte entries {hash32, slot}; the key is slots[slot].cur->id
 *     types    interned type -> ascending array of slot numbers (may hold stale entries)
 *     geo      GeoProperty name -> grid of cells -> ascending slot numbers (exact)
 *     attrs    attribute name -> number of live entities having it (exact)
 *
 * Entities are frozen (model.h): a write builds a new block and swaps the slot
 * pointer under the write lock; the old block lives on while readers hold
 * references. Every mutation returns its change (before/after, each holding one
 * reference, and the tenant's seq / commit time taken under the write lock)
 * to store.c, which hands it to the hooks in seq order after the lock is gone.
 *
 * Creation order: a create's commit time is stamped into the new block
 * (createdAt) under the write lock, and the tenant's clock is strictly
 * increasing, so createdAt ascends with the slot number. A scan that released
 * the lock between chunks resumes after a compaction (which renumbers slots)
 * by a binary search on createdAt.
 *
 * Index invariants (kept by tenant.c):
 *  - every live slot is in `ids` under its entity's id, and nothing else is;
 *  - for every live slot s and every type T of slots[s].cur, s is in types[T];
 *    an entry may be stale (the entity lost T, or the slot is a tombstone):
 *    scans re-check with filter_match() and skip tombstones;
 *  - each type array is strictly ascending (no duplicates);
 *  - for every GeoProperty instance of a live slot s whose name has a grid,
 *    s is in every cell its bbox touches or in the grid's large list, and
 *    the grid holds nothing else (no stale entries);
 *  - compaction (more than half of the slots dead) renumbers slots and
 *    rebuilds the id and type indexes, which also drops the stale entries,
 *    and renumbers the geo entries in place.
 */
#ifndef CORAINE_CORDB_H
#define CORAINE_CORDB_H

#include <pthread.h>

#include "../store.h"
#include "log.h"

#define CDB_NONE            UINT32_MAX   /* "no slot" */
#define CDB_COMPACT_MIN     32           /* compaction only above this many slots */
#define CDB_SCAN_MAX_TYPES  32           /* more types in one query: full scan */
#define CDB_SCAN_CHUNK      256          /* candidates per read-lock hold of a scan */

/* ------------------------------------------------------------- id map */

/* Open addressing with linear probing and backward-shift deletion (no
 * tombstones). An entry stores 32 bits of the key's hash and a value (a
 * slot number); the key itself is fetched through key_of when the hash
 * bits match, so the map stores no strings. Load factor <= 0.75. */
typedef const char *(*cdb_key_fn)(const void *ud, uint32_t v);

typedef struct cdb_idmap_entry {
    uint32_t h;                 /* hash bits */
    uint32_t v;                 /* value + 1; 0 = empty (idmap.c) */
} cdb_idmap_entry_t;

typedef struct cdb_idmap {
    cdb_idmap_entry_t *e;
    uint32_t           cap;     /* power of two, or 0 */
    uint32_t           n;       /* entries, in both tables */
    cdb_idmap_entry_t *old;     /* while growing: the table being drained into e */
    uint32_t           old_cap, mig;   /* its capacity, the next bucket to move */
    cdb_key_fn         key_of;
    const void        *ud;
} cdb_idmap_t;

uint32_t cdb_hash_key(const char *key, size_t len);
void     cdb_idmap_init(cdb_idmap_t *m, cdb_key_fn key_of, const void *ud);
void     cdb_idmap_free(cdb_idmap_t *m);
/* Makes room for `more` insertions without allocating again; false beyond
 * 2^31 buckets (out of memory aborts, core.h). */
bool     cdb_idmap_reserve(cdb_idmap_t *m, uint32_t more);
uint32_t cdb_idmap_find(const cdb_idmap_t *m, const char *key, uint32_t h);
/* Inserts v under hash h; the key must be absent and room reserved. */
void     cdb_idmap_insert(cdb_idmap_t *m, uint32_t h, uint32_t v);
/* Removes the entry whose value is v (found under hash h); false if absent. */
bool     cdb_idmap_remove(cdb_idmap_t *m, uint32_t h, uint32_t v);
void     cdb_idmap_clear(cdb_idmap_t *m);             /* keeps the capacity */
size_t   cdb_idmap_bytes(const cdb_idmap_t *m);

/* ---------------------------------------------------------- type index */

typedef struct cdb_tlist {
    const char *type;           /* interned; NULL = empty bucket */
    uint32_t   *v;              /* ascending slot numbers */
    uint32_t    n, cap;
} cdb_tlist_t;

typedef struct cdb_typeidx {
    cdb_tlist_t *t;             /* open addressing by pointer */
    uint32_t     cap;           /* power of two, or 0 */
    uint32_t     n;             /* types present */
} cdb_typeidx_t;

void               cdb_typeidx_init(cdb_typeidx_t *ti);
void               cdb_typeidx_free(cdb_typeidx_t *ti);
const cdb_tlist_t *cdb_typeidx_get(const cdb_typeidx_t *ti, const char *type);
/* Room for one more slot in type's list (creates the list); false beyond
 * the table's and the list's size limits (out of memory aborts). */
bool               cdb_typeidx_reserve(cdb_typeidx_t *ti, const char *type);
/* Adds slot to type's list (room reserved), keeping it ascending and free of
 * duplicates: O(1) when slot is the largest, else a binary search and a move. */
void               cdb_typeidx_add(cdb_typeidx_t *ti, const char *type, uint32_t slot);
void               cdb_typeidx_clear(cdb_typeidx_t *ti);  /* empties every list, keeps room */
void               cdb_typeidx_trim(cdb_typeidx_t *ti);   /* frees the arrays of empty lists */
size_t             cdb_typeidx_bytes(const cdb_typeidx_t *ti, size_t *entries);

/* ---------------------------------------------------- attribute index */

/* Expanded attribute name (interned) -> live entities having it (attridx.c). */
typedef struct cdb_aname {
    const char *name;           /* NULL = empty bucket */
    uint32_t    count;
} cdb_aname_t;

typedef struct cdb_attridx {
    cdb_aname_t *e;
    uint32_t     cap, n;        /* buckets (power of two), names */
} cdb_attridx_t;

void   cdb_attridx_init(cdb_attridx_t *ai);
void   cdb_attridx_free(cdb_attridx_t *ai);
/* Room for the names e has and old (NULL: none) has not; never false (out
 * of memory aborts; the bool stays for tenant.c's callers). */
bool   cdb_attridx_reserve(cdb_attridx_t *ai, const cr_entity_t *old, const cr_entity_t *e);
/* old -> e (either NULL: insert, remove); never allocates once reserved. */
void   cdb_attridx_update(cdb_attridx_t *ai, const cr_entity_t *old, const cr_entity_t *e);
/* fn for each name some live entity has. */
void   cdb_attridx_each(const cdb_attridx_t *ai, void (*fn)(void *ud, const char *name), void *ud);
size_t cdb_attridx_bytes(const cdb_attridx_t *ai);

/* ----------------------------------------------------------- geo index */

/* Per GeoProperty name, a uniform grid over lon/lat: square cells of 2^-level
 * degrees, the level adapted to the data (geoidx.c). A cell keeps the slots
 * of the entities whose geometry bbox touches it, ascending; a geometry
 * covering more than CDB_GEO_MAX_CELLS cells (or without a usable bbox) goes
 * to the grid's `large` list, which every geo query reads. Unlike the type
 * index there are no stale entries: a write removes the old version's entries. */
#define CDB_GEO_MAX_PROPS   16   /* grids per tenant; more names: not indexed */
#define CDB_GEO_MAX_CELLS   16

typedef struct cdb_gcell {
    uint64_t  key;              /* cx << 32 | cy; CDB_GEO_FREE = empty bucket */
    uint32_t *v;                /* ascending slot numbers */
    uint32_t  n, cap;
} cdb_gcell_t;

typedef struct cdb_geogrid {
    const char  *prop;          /* expanded GeoProperty name, interned */
    int          level;         /* cell side 2^-level degrees */
    double       scale;         /* 2^level: cells per degree */
    cdb_gcell_t *cells;         /* open addressing, linear probing */
    uint32_t     cap, n_cells;  /* buckets (power of two), cells in use */
    size_t       n_entries;     /* sum of the cells' n */
    size_t       checked_at;    /* n_entries when the level was last chosen */
    size_t       refused_at;    /* n_entries when a finer level last did not help; 0: never */
    cdb_gcell_t  large;         /* key unused */
    /* A rebuild at the next level under way (geoidx.c): slots below next_pos
     * are in it and kept up to date by every write; NULL: none. */
    struct cdb_geogrid *next;
    uint32_t     next_pos;
    int          next_dir;      /* -1: coarser, 1: finer */
} cdb_geogrid_t;

#define CDB_GEO_MEMO 8

typedef struct cdb_geoidx {
    cdb_geogrid_t *g;
    uint32_t       n, cap;
    bool           overflow;    /* some GeoProperty name has no grid */
    /* The bboxes the last cdb_geoidx_reserve computed, by value, for the
     * cdb_geoidx_update of the same (old, e) that follows it (geoidx.c). */
    const cr_entity_t *memo_old, *memo_e;
    uint32_t       memo_n;
    struct { const json_t *v; double box[4]; bool ok; } memo[CDB_GEO_MEMO];
} cdb_geoidx_t;

typedef struct cdb_slot cdb_slot_t;

void cdb_geoidx_init(cdb_geoidx_t *gi);
void cdb_geoidx_free(cdb_geoidx_t *gi);
/* Room to index e in place of old (NULL: a new entity): grids for its
 * GeoProperty names, cells and list room for the entries old has not. */
bool cdb_geoidx_reserve(cdb_geoidx_t *gi, const cr_entity_t *old, const cr_entity_t *e);
/* Replaces old's entries for slot by e's (either may be NULL: insert, remove).
 * Never allocates in the grids queries read when the room was reserved (a
 * remove never needs any); a rebuild under way gets the change too. */
void cdb_geoidx_update(cdb_geoidx_t *gi, uint32_t slot, const cr_entity_t *old,
                       const cr_entity_t *e);
/* Re-chooses the level of grids whose size changed by 2x since the last
 * choice: a rebuild from the slots, a few slots per call (GEO_MIGRATE), so
 * that no write pays an O(entities) pass under the tenant lock. */
void cdb_geoidx_maybe_regrid(cdb_geoidx_t *gi, const cdb_slot_t *slots, uint32_t n_slots);
/* Compaction: every entry v becomes map[v] (an increasing map). */
void cdb_geoidx_renumber(cdb_geoidx_t *gi, const uint32_t *map);
size_t cdb_geoidx_bytes(const cdb_geoidx_t *gi, size_t *entries);

/* Queries. The grid of a GeoProperty (NULL: none). Candidates for a box
 * [min lon, min lat, max lon, max lat]: count gives an upper bound (with
 * duplicates) of what collect writes to out (unsorted, maybe duplicated). */
const cdb_geogrid_t *cdb_geoidx_get(const cdb_geoidx_t *gi, const char *prop);
size_t cdb_geogrid_count(const cdb_geogrid_t *g, const double box[4]);
size_t cdb_geogrid_collect(const cdb_geogrid_t *g, const double box[4], uint32_t *out);

/* -------------------------------------------------------------- tenant */

struct cdb_slot {
    cr_entity_t *cur;           /* NULL: deleted (tombstone until compaction) */
};

/* Stored objects of a tenant (objects.c): creation order with tombstones,
 * an id map keyed by kind + id. Guarded by the tenant lock. */
typedef struct cdb_obj {
    char   *key;                /* kind byte ('0' + kind), then the id, NUL-terminated */
    char   *json;               /* NUL-terminated */
    size_t  len;
} cdb_obj_t;

typedef struct cdb_objs {
    cdb_obj_t  **v;             /* creation order; NULL: deleted */
    uint32_t     n, cap, live;
    cdb_idmap_t  ids;           /* key -> index in v */
} cdb_objs_t;

void cdb_objs_init(cdb_objs_t *o);
void cdb_objs_free(cdb_objs_t *o);

/* ------------------------------------------------------ ordered index */

/* Per tenant and orderBy signature, the live entities sorted (ordidx.c). */
#define CDB_OIDX_MAX        CR_ORDER_INDEXES_MAX
#define CDB_OIDX_DIRTY_MAX  (1u << 16)   /* dirty log entries before writers trim it */

typedef struct cdb_oidx cdb_oidx_t;
typedef struct cdb_oent {
    cr_entity_t *e;             /* the version listed (one reference, held by the index) */
    uint32_t     slot, ki;      /* its slot; its keys' index */
} cdb_oent_t;

typedef struct cdb_tenant {

    pthread_rwlock_t lock;
    _Atomic uint32_t wwait;     /* writers waiting for the lock (scans yield to them) */
    char            *name;      /* "" for the default tenant */
    uint64_t         seq;       /* last change's sequence number (write lock) */
    int64_t          last_at;   /* last commit time, µs (write lock) */
    store_stream_t  *stream;    /* the tenant's change stream (store.c) */
    cdb_slot_t      *slots;
    uint32_t         n_slots, cap_slots;
    uint32_t         n_live;
    cdb_idmap_t      ids;
    cdb_typeidx_t    types;
    cdb_attridx_t    attrs;
    cdb_geoidx_t     geo;
    cdb_objs_t       objs;      /* subscriptions, registrations, contexts */
    uint64_t         compactions;   /* also the scan epoch: slots renumbered or released */
    uint64_t         releases;      /* times the emptied tenant gave back its memory */
    _Atomic uint64_t geo_scans;     /* scans that took the geo index (readers: atomic) */
    /* ordered indexes (ordidx.c): the table under oidx_mu and the read lock,
     * or the write lock; the dirty log written under the write lock */
    pthread_mutex_t  oidx_mu;
    cdb_oidx_t      *oidx[CDB_OIDX_MAX];
    size_t           oidx_n;
    uint64_t         oidx_tick;
    uint32_t        *dirty;         /* slots whose version changed, in order */
    uint32_t         dirty_n, dirty_cap;
} cdb_tenant_t;

/* Ordered indexes (ordidx.c). get: the index of o's terms (built or
 * refreshed now; a reference for the caller, cdb_oidx_unref), or NULL when
 * o cannot have one (dist-*) or --orderIndexes is 0. Read lock held. */
cdb_oidx_t       *cdb_oidx_get(cdb_tenant_t *t, const entity_order_t *o, arena_t *a);
void              cdb_oidx_unref(cdb_oidx_t *idx);
size_t            cdb_oidx_len(const cdb_oidx_t *idx);
const cdb_oent_t *cdb_oidx_ent(const cdb_oidx_t *idx, size_t i, const order_key_t **keys);
/* The slots dirtied since idx was exact (ascending, unique; arena). */
size_t            cdb_oidx_dirty(const cdb_tenant_t *t, const cdb_oidx_t *idx, arena_t *a,
                                 uint32_t **out);
/* The live entities of the slots sv that idx (NULL: none) does not list as
 * they are and that pass ok (NULL: all), keyed (*keys) and sorted (*out). */
size_t            cdb_oidx_extra(const cdb_tenant_t *t, const cdb_oidx_t *idx,
                                 const entity_order_t *o, const uint32_t *sv, size_t n_sv,
                                 bool (*ok)(const void *, const cr_entity_t *), const void *ud,
                                 arena_t *a, cdb_oent_t **out, order_key_t **keys);
/* Writers (write lock held): slot s changed its version. One branch while
 * the tenant has no ordered index. */
void              cdb_oidx_touch_slow(cdb_tenant_t *t, uint32_t s);
static inline void cdb_oidx_touch(cdb_tenant_t *t, uint32_t s)
{
    if (__builtin_expect(t->oidx_n != 0, 0))
        cdb_oidx_touch_slow(t, s);
}
void              cdb_oidx_log_full(cdb_tenant_t *t);
void              cdb_oidx_drop_all(cdb_tenant_t *t);
size_t            cdb_oidx_bytes(const cdb_tenant_t *t, size_t *n_indexes);

cdb_tenant_t *cdb_tenant_new(const char *name, bool prefer_writers);
void          cdb_tenant_free(cdb_tenant_t *t);            /* unrefs every entity */

/* The following need the tenant lock (read for find, write for the rest). */
uint32_t cdb_tenant_find(const cdb_tenant_t *t, const char *id);
/* Room to insert e (slot, id entry, its types); false on OOM. */
bool     cdb_tenant_reserve(cdb_tenant_t *t, const cr_entity_t *e);
/* Appends e (the tenant takes the caller's reference); room reserved. */
void     cdb_tenant_insert(cdb_tenant_t *t, cr_entity_t *e);
/* Room for what replacing old (NULL: none) by e adds to the type and geo
 * indexes; false on OOM. */
bool     cdb_tenant_reserve_update(cdb_tenant_t *t, const cr_entity_t *old, const cr_entity_t *e);
/* Puts e in slot s (same id as the entity there), indexes its new types and
 * re-indexes its geometries; returns the old entity with the tenant's
 * reference, for the caller to drop. */
cr_entity_t *cdb_tenant_swap(cdb_tenant_t *t, uint32_t s, cr_entity_t *e);
/* Tombstones slot s; returns its entity with the tenant's reference. Does not
 * compact (scans may be running over the slot numbers): call
 * cdb_tenant_maybe_compact() when done. */
cr_entity_t *cdb_tenant_remove(cdb_tenant_t *t, uint32_t s);
bool         cdb_tenant_maybe_compact(cdb_tenant_t *t);   /* true when it compacted */
/* Undo of a delete: e (the tenant takes the caller's reference) back into
 * slot s when the slots were not renumbered since (epoch: t->compactions at
 * the delete), else appended (its place in creation order is then lost). */
void         cdb_tenant_restore(cdb_tenant_t *t, uint32_t s, uint64_t epoch, cr_entity_t *e);
/* With no live entity left: frees the slot array and the three indexes (the
 * tenant itself, its lock, name, clock and stream stay). Bumps the epoch. */
void         cdb_tenant_release(cdb_tenant_t *t);

/* Candidate walk for a filter: the access path is f->ids (hash lookups), else
 * the type index when the type selection is a plain list of types, else every
 * slot; a bounded geo-query replaces the last two by the geo index when that
 * promises fewer candidates. Candidates come in creation order, tombstones skipped; they still have
 * to pass filter_match(). Holds no lock itself: the caller holds the tenant's. */
typedef struct cdb_scan {
    const cdb_tenant_t *t;
    const entity_filter_t *f;
    arena_t            *a;
    int                 mode;
    uint32_t            pos;
    uint64_t            epoch;      /* t->compactions when paused */
    int64_t             last_ct;    /* createdAt of the last candidate (resume point) */
    bool                sel_types;  /* SCAN_TYPES over the selectors' types (not f->types) */
    /* ids, geo: sorted slot numbers */
    uint32_t           *sv;
    size_t              n_sv;
    bool                sv_owned;
    /* types */
    const cdb_tlist_t  *lists[CDB_SCAN_MAX_TYPES];
    uint32_t            at[CDB_SCAN_MAX_TYPES];
    size_t              n_lists;
} cdb_scan_t;

/* a: where temporary memory comes from (NULL: malloc, freed by cdb_scan_end). */
void         cdb_scan_begin(cdb_scan_t *sc, const cdb_tenant_t *t, const entity_filter_t *f,
                            arena_t *a);
cr_entity_t *cdb_scan_next(cdb_scan_t *sc, uint32_t *slot);
void         cdb_scan_end(cdb_scan_t *sc);
/* At most how many candidates the walk will return (after begin). */
size_t       cdb_scan_estimate(const cdb_scan_t *sc);
/* Chunks: pause before releasing the tenant lock, resume after taking it
 * again. Resuming goes on after the last candidate returned, in creation
 * order, whatever compaction, a release or new types did meanwhile. */
void         cdb_scan_pause(cdb_scan_t *sc);
void         cdb_scan_resume(cdb_scan_t *sc);

/* ------------------------------------------------------- the database */

typedef struct cdb cdb_t;

/* The corDB table of operations (store.h), for store.c. */
extern const store_backend_t cdb_backend;

/* max tenants: cr_config.max_tenants (0 or less: no limit). */
cdb_t *cdb_open(bool prefer_writers, problem_t *p);
void   cdb_close(cdb_t *db);

bool   cdb_tenant_exists(cdb_t *db, const char *tenant);
void   cdb_tenants(cdb_t *db, void (*fn)(void *ud, const char *tenant), void *ud);

/* Mutations fill *ch (tenant, before, after: each holding a reference that the
 * caller drops after the hooks ran) when they succeed. A modify or upsert whose
 * op_result says every attribute was notUpdated changes nothing: before and
 * after are both NULL and there is nothing to emit. */
bool cdb_create(cdb_t *db, const char *tenant, const cr_entity_t *draft, store_change_t *ch,
                problem_t *p);
bool cdb_upsert(cdb_t *db, const char *tenant, const cr_entity_t *draft, bool replace,
                bool *created, arena_t *scratch, store_change_t *ch, problem_t *p);
cr_entity_t *cdb_get(cdb_t *db, const char *tenant, const char *id, problem_t *p);
bool cdb_modify(cdb_t *db, const char *tenant, const char *id, entity_op_t op,
                const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                arena_t *scratch, store_change_t *ch, problem_t *p);
bool cdb_delete(cdb_t *db, const char *tenant, const char *id, const typesel_t *if_type,
                store_change_t *ch, problem_t *p);
/* Deletes every match in chunks of at most STORE_PURGE_CHUNK under the write
 * lock; emit(ud, group, n) is called for each after the lock is released,
 * then the group's references are dropped. */
bool cdb_purge(cdb_t *db, const char *tenant, const entity_filter_t *f, size_t *deleted,
               void (*emit)(void *ud, store_change_t *group, size_t n), void *ud, problem_t *p);
/* store_batch(): group gets the committed changes (room for n), *n_group their number. */
bool cdb_batch(cdb_t *db, const char *tenant, store_batch_item_t *items, size_t n,
               arena_t *scratch, store_change_t *group, size_t *n_group, problem_t *p);
bool cdb_types(cdb_t *db, const char *tenant, void (*fn)(void *ud, const char *type), void *ud,
               problem_t *p);
bool cdb_attributes(cdb_t *db, const char *tenant, void (*fn)(void *ud, const char *name),
                    void *ud, problem_t *p);

bool cdb_query(cdb_t *db, const char *tenant, const entity_filter_t *f, size_t offset,
               size_t limit, bool want_count, arena_t *a, store_page_t *out, problem_t *p);
bool cdb_foreach(cdb_t *db, const char *tenant, const entity_filter_t *f,
                 void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p);

void cdb_stats(cdb_t *db, uint64_t *entities, uint64_t *tenants);

/* Stored objects (store_obj_*, objects.c): under the tenant lock. */
bool  cdb_obj_put(cdb_t *db, const char *tenant, int kind, const char *id, const char *json,
                  size_t len, bool create_only, problem_t *p);
bool  cdb_obj_delete(cdb_t *db, const char *tenant, int kind, const char *id, problem_t *p);
char *cdb_obj_get(cdb_t *db, const char *tenant, int kind, const char *id, arena_t *a,
                  size_t *len, problem_t *p);
void  cdb_obj_foreach(cdb_t *db, int kind,
                      void (*fn)(void *ud, const char *tenant, const char *id, const char *json,
                                 size_t len),
                      void *ud);
/* For objects.c: the tenant (created: open) or NULL with p; the tenants in
 * order (the default first) under the tenant table's read lock. */
cdb_tenant_t *cdb_tenant_get(cdb_t *db, const char *tenant, problem_t *p);
cdb_tenant_t *cdb_tenant_open(cdb_t *db, const char *tenant, problem_t *p);
void          cdb_tenant_each(cdb_t *db, void (*fn)(void *ud, cdb_tenant_t *t), void *ud);
void          cdb_tenant_wrlock(cdb_tenant_t *t);
/* Between two read-locked chunks (no lock held): lets waiting writers in
 * first (the reader-preferring lock would let a scan starve them). */
void          cdb_scan_yield(cdb_tenant_t *t);
struct cdb_log *cdb_db_log(cdb_t *db);      /* NULL: in RAM */

/* A held write (store.h "Held answers") as the log's thread hands it back:
 * its waiter, then whether it is an object's (objects.c: its completions
 * below) or an entity group's (cordb.c). */
typedef struct cdb_held_head {
    cdb_logw_t w;               /* first: log.c hands it back */
    bool       obj;
} cdb_held_head_t;
void cdb_obj_held_undo(cdb_held_head_t *hh);
void cdb_obj_held_done(cdb_held_head_t *hh, bool ok);
void            cdb_set_log(cdb_t *db, struct cdb_log *log);

/* On disk (recover.c): opens --dbDir, recovers (the newest valid snapshot,
 * then the log after it), and starts the log. */
cdb_t *cdb_open_disk(bool prefer_writers, problem_t *p);
/* Recovery's writes: no log, no change, idempotent. put takes e (frozen,
 * one reference); the tenant's clock moves past e's times. */
bool   cdb_replay_put(cdb_t *db, const char *tenant, cr_entity_t *e, problem_t *p);
void   cdb_replay_del(cdb_t *db, const char *tenant, const char *id);
/* A snapshot now (snapshot.c); from the log's thread or POST /admin/snapshot. */
bool   cdb_snapshot(cdb_t *db, store_snapshot_info_t *info, problem_t *p);
/* The same in the log's snapshot thread (returns at once), and the last one's outcome. */
bool   cdb_snapshot_start(cdb_t *db, problem_t *p);
bool   cdb_snapshot_last(cdb_t *db, store_snapshot_info_t *info, bool *running, problem_t *p);

/* The shape of one tenant, for tests and /statistics. false: no such tenant. */
typedef struct cdb_shape {
    size_t slots, live, types, type_entries, compactions, releases;
    size_t geo_scans, geo_grids, geo_entries, geo_large, geo_bytes;   /* geo_large: of the first grid */
    int    geo_level;           /* of the first grid */
    int    geo_next_level;      /* of its rebuild under way (0: none) */
    size_t index_bytes;         /* slot array + id map + type index + geo index */
    size_t order_indexes, order_bytes;   /* ordered indexes (with their dirty log) */
    size_t entity_bytes;        /* sum of the frozen blocks */
} cdb_shape_t;
bool cdb_tenant_shape(cdb_t *db, const char *tenant, cdb_shape_t *out);
/* The tenant's live entities (false: no such tenant). */
bool cdb_tenant_entities(cdb_t *db, const char *tenant, uint64_t *n);

#endif
