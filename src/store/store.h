/*
 * store.h - the Store interface (DESIGN.md "Store interface").
 *
 * One interface, implemented by corDB (src/store/cordb/, in RAM now, on disk
 * later) and later by MongoDB. A store knows nothing of HTTP: it keeps frozen
 * entities (model.h) per tenant, indexes them, and applies the model's
 * operations under its lock. Every mutation produces a Change (before/after)
 * which is handed to the registered change hooks (notify/, history/) after
 * the lock is released.
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

typedef struct store store_t;

/* A committed change. before NULL: created; after NULL: deleted. */
typedef struct store_change {
    const char  *tenant;        /* "" for the default */
    cr_entity_t *before;
    cr_entity_t *after;
} store_change_t;

/* Called after each commit, outside the store lock, on the writer's thread.
 * The hook must not keep the pointers beyond the call without entity_ref(). */
typedef void (*store_hook_fn)(void *ud, const store_change_t *ch);

/* Opens the store cr_config asks for (--database, --dbDir ...). */
store_t *store_open(problem_t *p);
void     store_close(store_t *s);
void     store_add_hook(store_t *s, store_hook_fn fn, void *ud);

/* The default tenant (NULL or "") always exists. */
bool     store_tenant_exists(store_t *s, const char *tenant);
/* Tenant names (for /statistics and admin); calls fn for each, the default
 * tenant first as "". */
void     store_tenants(store_t *s, void (*fn)(void *ud, const char *tenant), void *ud);

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
 * entity is left as it is and no Change is emitted. */
bool store_modify(store_t *s, const char *tenant, const char *id, entity_op_t op,
                  const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                  arena_t *scratch, problem_t *p);

/* 5.6.6 */
bool store_delete(store_t *s, const char *tenant, const char *id, problem_t *p);

/* ------------------------------------------------------------- queries */

typedef struct store_page {
    cr_entity_t **items;        /* refs, in the caller's arena; entity_unref each */
    size_t        n;
    size_t        count;        /* total matches, when want_count */
} store_page_t;

/* Entities matching f (NULL = all), in creation order, skipping `offset`, at
 * most `limit` (0 = none: count only). With want_count the scan goes on to
 * count every match; without it, the scan stops when the page is full.
 * Access path: f->ids, else the type index when f->types is a plain list of
 * types, else every entity; filter_match() decides. */
bool store_query(store_t *s, const char *tenant, const entity_filter_t *f, size_t offset,
                 size_t limit, bool want_count, arena_t *a, store_page_t *out, problem_t *p);
void store_page_release(store_page_t *pg);

/* Calls fn for every entity matching f (f NULL = all), under the read lock:
 * fn must be quick and must not call the store. Returns false (with p) on a
 * nonexistent tenant. Used by /types and /attributes. */
bool store_foreach(store_t *s, const char *tenant, const entity_filter_t *f,
                   void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p);

/* Purge (6.4.3.3): deletes every entity matching f (NULL = all); *deleted gets
 * the number. The hooks get one Change per deleted entity. */
bool store_purge(store_t *s, const char *tenant, const entity_filter_t *f, size_t *deleted,
                 problem_t *p);

/* ----------------------------------------------------------- statistics */

typedef struct store_stats {
    uint64_t entities;          /* over all tenants */
    uint64_t tenants;
    uint64_t creates, updates, deletes, queries;
} store_stats_t;
void store_get_stats(store_t *s, store_stats_t *st);

#endif
