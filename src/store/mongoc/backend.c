/*
 * backend.c - the MongoDB store's table of operations (store.h
 * store_backend_t), chosen by --database mongoc. The work is in conn.c
 * (connection, tenants), write.c, query.c and objects.c; it keeps nothing
 * on disk of its own, so it has no snapshots (store.c answers
 * OperationNotSupported for them).
 */
#include "mgc.h"

static void *be_open(problem_t *p) { return mgc_open(p); }
static void  be_close(void *db) { mgc_close(db); }

static bool be_tenant_exists(void *db, const char *tenant)
{
    return mgc_tenant_get(db, tenant, NULL) != NULL;
}

typedef struct names_ctx {
    void (*fn)(void *ud, const char *tenant);
    void *ud;
} names_ctx_t;

static void name_one(void *ud, mgc_tenant_t *t)
{
    names_ctx_t *x = ud;

    x->fn(x->ud, t->name);
}

static void be_tenants(void *db, void (*fn)(void *ud, const char *tenant), void *ud)
{
    names_ctx_t x = { fn, ud };

    mgc_tenants_load(db);
    mgc_tenant_each(db, name_one, &x);
}

static bool be_create(void *db, const char *tenant, const cr_entity_t *draft, store_change_t *ch,
                      problem_t *p)
{
    return mgc_create(db, tenant, draft, ch, p);
}

static bool be_upsert(void *db, const char *tenant, const cr_entity_t *draft, bool replace,
                      bool *created, arena_t *scratch, store_change_t *ch, problem_t *p)
{
    bool made = false;
    bool ok   = mgc_upsert(db, tenant, draft, replace, &made, scratch, ch, p);

    if (created)
        *created = made;
    return ok;
}

static cr_entity_t *be_get(void *db, const char *tenant, const char *id, problem_t *p)
{
    return mgc_get(db, tenant, id, p);
}

static bool be_modify(void *db, const char *tenant, const char *id, entity_op_t op,
                      const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                      arena_t *scratch, store_change_t *ch, problem_t *p)
{
    return mgc_modify(db, tenant, id, op, patch, args, res, scratch, ch, p);
}

static bool be_remove(void *db, const char *tenant, const char *id, const typesel_t *if_type,
                      store_change_t *ch, problem_t *p)
{
    return mgc_remove(db, tenant, id, if_type, ch, p);
}

static bool be_purge(void *db, const char *tenant, const entity_filter_t *f, size_t *deleted,
                     void (*emit)(void *ud, store_change_t *group, size_t n), void *ud, problem_t *p)
{
    return mgc_purge(db, tenant, f, deleted, emit, ud, p);
}

static bool be_batch(void *db, const char *tenant, store_batch_item_t *items, size_t n,
                     arena_t *scratch, store_change_t *group, size_t *n_group, problem_t *p)
{
    return mgc_batch(db, tenant, items, n, scratch, group, n_group, p);
}

static bool be_query(void *db, const char *tenant, const entity_filter_t *f, arena_t *a,
                     store_page_t *out, problem_t *p)
{
    return mgc_query(db, tenant, f, a, out, p);
}

static bool be_foreach(void *db, const char *tenant, const entity_filter_t *f,
                       void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p)
{
    return mgc_foreach(db, tenant, f, fn, ud, p);
}

static bool be_types(void *db, const char *tenant, void (*fn)(void *ud, const char *type), void *ud,
                     problem_t *p)
{
    return mgc_types(db, tenant, fn, ud, p);
}

static bool be_attributes(void *db, const char *tenant, void (*fn)(void *ud, const char *name),
                          void *ud, problem_t *p)
{
    return mgc_attributes(db, tenant, fn, ud, p);
}

static void be_stats(void *db, uint64_t *entities, uint64_t *tenants)
{
    mgc_stats(db, entities, tenants);
}

static void be_scan_stats(void *vdb, store_stats_t *st)
{
    mgc_t *db = vdb;

    st->scans        = true;
    st->scan_docs    = atomic_load_explicit(&db->scan_docs, memory_order_relaxed);
    st->scan_matched = atomic_load_explicit(&db->scan_matched, memory_order_relaxed);
}

static bool be_tenant_entities(void *db, const char *tenant, uint64_t *n)
{
    return mgc_tenant_entities(db, tenant, n);
}

static bool be_obj_put(void *db, const char *tenant, int kind, const char *id, const char *json,
                       size_t len, bool create_only, problem_t *p)
{
    return mgc_obj_put(db, tenant, kind, id, json, len, create_only, p);
}

static bool be_obj_delete(void *db, const char *tenant, int kind, const char *id, problem_t *p)
{
    return mgc_obj_delete(db, tenant, kind, id, p);
}

static char *be_obj_get(void *db, const char *tenant, int kind, const char *id, arena_t *a,
                        size_t *len, problem_t *p)
{
    return mgc_obj_get(db, tenant, kind, id, a, len, p);
}

static void be_obj_foreach(void *db, int kind,
                           void (*fn)(void *ud, const char *tenant, const char *id, const char *json,
                                      size_t len),
                           void *ud)
{
    mgc_obj_foreach(db, kind, fn, ud);
}

static bool be_obj_changed(void *db)
{
    return mgc_obj_changed(db);
}

static void be_obj_sync(void *db, int kind,
                        void (*put)(void *ud, const char *tenant, const char *id, const char *json,
                                    size_t len),
                        void (*gone)(void *ud, const char *tenant, const char *id), void *ud)
{
    mgc_obj_sync(db, kind, put, gone, ud);
}

static void be_ctr_add(void *db, const char *tenant, int kind, const char *id, const store_ctr_t *d)
{
    mgc_ctr_add(db, tenant, kind, id, d);
}

static bool be_ctr_read(void *db, const char *tenant, int kind, const char *id, store_ctr_t *tot)
{
    return mgc_ctr_read(db, tenant, kind, id, tot);
}

static void be_ctr_flush(void *db)
{
    mgc_ctr_flush(db, false);
}

const store_backend_t mgc_backend = {
    .name          = "mongoc",
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
    .disk_stats    = be_scan_stats,
    .tenant_entities = be_tenant_entities,
    .obj_put       = be_obj_put,
    .obj_delete    = be_obj_delete,
    .obj_get       = be_obj_get,
    .obj_foreach   = be_obj_foreach,
    .obj_changed   = be_obj_changed,
    .obj_sync      = be_obj_sync,
    .outbox_set    = mgc_outbox_set,
    .outbox_done   = mgc_outbox_done,
    .outbox_sweep  = mgc_outbox_sweep,
    .ctr_add       = be_ctr_add,
    .ctr_read      = be_ctr_read,
    .ctr_flush     = be_ctr_flush,
};
