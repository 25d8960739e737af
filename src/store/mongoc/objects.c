/*
 * objects.c - the MongoDB store's stored objects (subscriptions,
 * registrations, hosted @contexts): per tenant database, collection
 * "objects", one document per (kind, id): {_id: "KIND/ID", k, i, o, j}
 * where o orders them by creation (store_obj_foreach) and j is the JSON
 * text as the owning module wrote it (the store does not interpret it).
 *
 * Every object write also bumps the version document {_id: "objects", v}
 * in the default database's "meta": a process that polls it every
 * --syncInterval learns cheaply that another process changed an object
 * (mgc_obj_changed); mgc_obj_sync then reads the objects of a kind and
 * compares them with what this process last wrote or read (a table of
 * (tenant, kind, id) -> hash of the text, under omu, which every object
 * write of this process also holds: its own writes never look foreign).
 * Where a change stream on the version document is open (watch.c, a
 * replica set), mgc_obj_changed asks it instead of reading the document.
 */
#include <string.h>

#include "mgc.h"

/* ------------------------------------------------------- the seen table */

struct mgc_objent {
    mgc_objent_t *next;
    char         *tenant, *id;
    int           kind;
    uint64_t      h;            /* of the JSON text */
    uint32_t      gen;          /* the last sync that saw it */
};

static uint64_t ent_hash(const char *tenant, int kind, const char *id)
{
    return cr_hash(tenant, strlen(tenant)) * 31 + cr_hash(id, strlen(id)) * 7 + (uint64_t)kind;
}

void mgc_obj_init(mgc_t *db)
{
    pthread_mutex_init(&db->omu, NULL);
    db->omask = 255;
    db->otbl  = cr_xcalloc(256, sizeof(*db->otbl));
    db->obj_v = -1;
}

void mgc_obj_free(mgc_t *db)
{
    for (uint32_t i = 0; db->otbl && i <= db->omask; i++)
        for (mgc_objent_t *e = db->otbl[i], *nx; e; e = nx) {
            nx = e->next;
            free(e->tenant);
            free(e->id);
            free(e);
        }
    free(db->otbl);
    pthread_mutex_destroy(&db->omu);
}

/* omu held. */
static mgc_objent_t **seen_slot(mgc_t *db, const char *tenant, int kind, const char *id)
{
    mgc_objent_t **pp = &db->otbl[ent_hash(tenant, kind, id) & db->omask];

    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->kind == kind && !strcmp((*pp)->id, id) && !strcmp((*pp)->tenant, tenant))
            break;
    return pp;
}

static void seen_grow(mgc_t *db)
{
    uint32_t       cap = (db->omask + 1) * 2;
    mgc_objent_t **nt  = cr_xcalloc(cap, sizeof(*nt));

    for (uint32_t i = 0; i <= db->omask; i++)
        for (mgc_objent_t *e = db->otbl[i], *nx; e; e = nx) {
            uint64_t h = ent_hash(e->tenant, e->kind, e->id) & (cap - 1);
            nx = e->next;
            e->next = nt[h];
            nt[h] = e;
        }
    free(db->otbl);
    db->otbl  = nt;
    db->omask = cap - 1;
}

/* omu held: records the text this process wrote or read; the entry. */
static mgc_objent_t *seen_set(mgc_t *db, const char *tenant, int kind, const char *id, const char *json,
                              size_t len)
{
    mgc_objent_t **pp = seen_slot(db, tenant, kind, id);

    if (!*pp) {
        if (db->on + 1 > db->omask) {
            seen_grow(db);
            pp = seen_slot(db, tenant, kind, id);
        }
        *pp = cr_xcalloc(1, sizeof(**pp));
        (*pp)->tenant = cr_xstrdup(tenant);
        (*pp)->id     = cr_xstrdup(id);
        (*pp)->kind   = kind;
        db->on++;
    }
    (*pp)->h = cr_hash(json, len);
    return *pp;
}

static void seen_del(mgc_t *db, const char *tenant, int kind, const char *id)
{
    mgc_objent_t **pp = seen_slot(db, tenant, kind, id), *e = *pp;

    if (!e)
        return;
    *pp = e->next;
    free(e->tenant);
    free(e->id);
    free(e);
    db->on--;
}

static const char *tenant_of(const char *tenant)
{
    return tenant ? tenant : "";
}

/* ------------------------------------------------------------ objects */

static char *obj_key(char *buf, size_t n, int kind, const char *id)
{
    snprintf(buf, n, "%d/%s", kind, id);
    return buf;
}

/* One key buffer per call: ids are URIs, bounded by the API's limits. */
#define KEY_MAX 4200

static void bump_version(mgc_t *db, mongoc_client_t *c)
{
    mongoc_collection_t *col  = mongoc_client_get_collection(c, db->prefix, "meta");
    bson_t              *q    = BCON_NEW("_id", BCON_UTF8("objects"));
    bson_t              *u    = BCON_NEW("$inc", "{", "v", BCON_INT64(1), "}");
    bson_t              *opts = BCON_NEW("upsert", BCON_BOOL(true));
    bson_error_t         err;

    if (!mongoc_collection_update_one(col, q, u, opts, NULL, &err))
        LOG_W("mongoc: the objects' version document: %s", err.message);
    bson_destroy(opts);
    bson_destroy(u);
    bson_destroy(q);
    mongoc_collection_destroy(col);
}

static bool id_ok(const char *id, problem_t *p)
{
    if (strlen(id) < KEY_MAX - 16)
        return true;
    return problem_set(p, PB_BAD_REQUEST_DATA, "a stored object's id is too long");
}

bool mgc_obj_put(mgc_t *db, const char *tenant, int kind, const char *id, const char *json, size_t len,
                 bool create_only, problem_t *p)
{
    mgc_tenant_t        *t;
    mongoc_client_t     *c;
    mongoc_collection_t *col;
    char                 key[KEY_MAX];
    bson_error_t         err;
    bool                 ok;

    if (!id_ok(id, p) || !(t = mgc_tenant_open(db, tenant, p)))
        return false;
    obj_key(key, sizeof key, kind, id);
    c   = mgc_pop(db);
    col = mgc_coll(db, c, t, "objects");
    pthread_mutex_lock(&db->omu);
    if (create_only) {
        bson_t doc = BSON_INITIALIZER;

        BSON_APPEND_UTF8(&doc, "_id", key);
        BSON_APPEND_INT32(&doc, "k", kind);
        BSON_APPEND_UTF8(&doc, "i", id);
        BSON_APPEND_INT64(&doc, "o", cr_now_us());
        bson_append_utf8(&doc, "j", 1, json, (int)len);
        ok = mongoc_collection_insert_one(col, &doc, NULL, NULL, &err);
        bson_destroy(&doc);
        if (!ok && mgc_is_dup(&err))
            problem_set(p, PB_ALREADY_EXISTS, "'%.400s' already exists", id);
        else if (!ok)
            mgc_fail(p, "storing an object", &err);
    } else {
        bson_t *q    = BCON_NEW("_id", BCON_UTF8(key));
        bson_t *opts = BCON_NEW("upsert", BCON_BOOL(true));
        bson_t  u    = BSON_INITIALIZER, set, ins;

        bson_append_document_begin(&u, "$set", 4, &set);
        bson_append_utf8(&set, "j", 1, json, (int)len);
        bson_append_document_end(&u, &set);
        bson_append_document_begin(&u, "$setOnInsert", 12, &ins);
        BSON_APPEND_INT32(&ins, "k", kind);
        BSON_APPEND_UTF8(&ins, "i", id);
        BSON_APPEND_INT64(&ins, "o", cr_now_us());
        bson_append_document_end(&u, &ins);
        ok = mongoc_collection_update_one(col, q, &u, opts, NULL, &err);
        if (!ok)
            mgc_fail(p, "storing an object", &err);
        bson_destroy(&u);
        bson_destroy(opts);
        bson_destroy(q);
    }
    if (ok) {
        seen_set(db, tenant_of(tenant), kind, id, json, len);
        bump_version(db, c);
    }
    pthread_mutex_unlock(&db->omu);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
    return ok;
}

bool mgc_obj_delete(mgc_t *db, const char *tenant, int kind, const char *id, problem_t *p)
{
    mgc_tenant_t        *t;
    mongoc_client_t     *c;
    mongoc_collection_t *col;
    char                 key[KEY_MAX];
    bson_t              *q, reply;
    bson_error_t         err;
    bool                 ok;
    bson_iter_t          it;

    if (!id_ok(id, p) || !(t = mgc_tenant_get(db, tenant, p)))
        return false;
    c   = mgc_pop(db);
    col = mgc_coll(db, c, t, "objects");
    q   = BCON_NEW("_id", BCON_UTF8(obj_key(key, sizeof key, kind, id)));
    pthread_mutex_lock(&db->omu);
    ok  = mongoc_collection_delete_one(col, q, NULL, &reply, &err);
    if (!ok) {
        mgc_fail(p, "deleting an object", &err);
    } else if (!bson_iter_init_find(&it, &reply, "deletedCount") || bson_iter_as_int64(&it) < 1) {
        ok = problem_set(p, PB_RESOURCE_NOT_FOUND, "'%.400s' not found", id);
    } else {
        seen_del(db, tenant_of(tenant), kind, id);
        bump_version(db, c);
    }
    pthread_mutex_unlock(&db->omu);
    if (ok)
        mgc_ctr_drop(db, c, tenant_of(tenant), kind, id);
    bson_destroy(&reply);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
    return ok;
}

char *mgc_obj_get(mgc_t *db, const char *tenant, int kind, const char *id, arena_t *a, size_t *len,
                  problem_t *p)
{
    mgc_tenant_t        *t;
    mongoc_client_t     *c;
    mongoc_collection_t *col;
    mongoc_cursor_t     *cur;
    char                 key[KEY_MAX], *r = NULL;
    const bson_t        *doc;
    bson_t              *q;
    bson_error_t         err;
    bson_iter_t          it;

    if (!id_ok(id, p) || !(t = mgc_tenant_get(db, tenant, p)))
        return NULL;
    c   = mgc_pop(db);
    col = mgc_coll(db, c, t, "objects");
    q   = BCON_NEW("_id", BCON_UTF8(obj_key(key, sizeof key, kind, id)));
    cur = mongoc_collection_find_with_opts(col, q, NULL, NULL);
    if (mongoc_cursor_next(cur, &doc)) {
        if (bson_iter_init_find(&it, doc, "j") && BSON_ITER_HOLDS_UTF8(&it)) {
            uint32_t    n;
            const char *s = bson_iter_utf8(&it, &n);

            r = arena_strndup(a, s, n);
            if (len)
                *len = n;
        } else {
            problem_set(p, PB_INTERNAL_ERROR, "MongoDB: object '%.400s' without its text", id);
        }
    } else if (mongoc_cursor_error(cur, &err)) {
        mgc_fail(p, "reading an object", &err);
    } else {
        problem_set(p, PB_RESOURCE_NOT_FOUND, "'%.400s' not found", id);
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
    return r;
}

/* fn(ud, t, id, json, len) for each object of the kind in t, in creation
 * order; false when the read failed (logged). */
static bool tenant_objects(mgc_t *db, mgc_tenant_t *t, int kind,
                           void (*fn)(void *ud, mgc_tenant_t *t, const char *id, const char *json, uint32_t n),
                           void *ud)
{
    mongoc_client_t     *c    = mgc_pop(db);
    mongoc_collection_t *col  = mgc_coll(db, c, t, "objects");
    bson_t              *q    = BCON_NEW("k", BCON_INT32(kind));
    bson_t              *opts = BCON_NEW("sort", "{", "o", BCON_INT32(1), "_id", BCON_INT32(1), "}");
    mongoc_cursor_t     *cur  = mongoc_collection_find_with_opts(col, q, opts, NULL);
    const bson_t        *doc;
    bson_error_t         err;
    bool                 ok;

    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        const char *id = NULL, *json = NULL;
        uint32_t    n = 0;

        if (bson_iter_init_find(&it, doc, "i") && BSON_ITER_HOLDS_UTF8(&it))
            id = bson_iter_utf8(&it, NULL);
        if (bson_iter_init_find(&it, doc, "j") && BSON_ITER_HOLDS_UTF8(&it))
            json = bson_iter_utf8(&it, &n);
        if (id && json)
            fn(ud, t, id, json, n);
    }
    if (!(ok = !mongoc_cursor_error(cur, &err)))
        LOG_W("mongoc: reading the stored objects of tenant '%s': %s", t->name, err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
    return ok;
}

typedef struct each_ctx {
    mgc_t *db;
    int    kind;
    void (*fn)(void *ud, const char *tenant, const char *id, const char *json, size_t len);
    void  *ud;
} each_ctx_t;

static void each_object(void *ud, mgc_tenant_t *t, const char *id, const char *json, uint32_t n)
{
    each_ctx_t *x = ud;

    seen_set(x->db, t->name, x->kind, id, json, n);     /* omu held */
    x->fn(x->ud, t->name, id, json, n);
}

static void each_tenant(void *ud, mgc_tenant_t *t)
{
    each_ctx_t *x = ud;

    tenant_objects(x->db, t, x->kind, each_object, x);
}

void mgc_obj_foreach(mgc_t *db, int kind,
                     void (*fn)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                     void *ud)
{
    each_ctx_t x = { .db = db, .kind = kind, .fn = fn, .ud = ud };

    mgc_tenants_load(db);
    pthread_mutex_lock(&db->omu);           /* omu before the tenant table, as everywhere */
    mgc_tenant_each(db, each_tenant, &x);
    pthread_mutex_unlock(&db->omu);
}

/* ------------------------------------------------------------ sync */

bool mgc_obj_changed(mgc_t *db)
{
    int watched = mgc_watch_changed(db);

    if (watched >= 0)           /* a change stream is open (watch.c): no round trip */
        return watched == 1;
    mongoc_client_t *c   = mgc_pop(db);
    bson_t          *cmd = BCON_NEW("find", BCON_UTF8("meta"), "filter", "{", "_id", BCON_UTF8("objects"), "}",
                                    "limit", BCON_INT64(1), "singleBatch", BCON_BOOL(true));
    bson_t           reply;
    bson_error_t     err;
    bson_iter_t      it, v_it;
    int64_t          v = 0;
    bool             changed, failed;

    /* one find command (a cursor costs twice the work: it polls every --syncInterval) */
    failed = !mongoc_client_read_command_with_opts(c, db->prefix, cmd, NULL, NULL, &reply, &err);
    if (!failed && bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.0.v", &v_it) &&
        BSON_ITER_HOLDS_NUMBER(&v_it))
        v = bson_iter_as_int64(&v_it);
    bson_destroy(&reply);
    bson_destroy(cmd);
    mgc_push(db, c);
    /* The first call (obj_v -1) and a failed read answer true: the caller's
     * sync then compares everything (and removes nothing after a failed read). */
    pthread_mutex_lock(&db->omu);
    changed = failed || v != db->obj_v;
    if (!failed)
        db->obj_v = v;
    pthread_mutex_unlock(&db->omu);
    return changed;
}

typedef struct sync_ctx {
    mgc_t   *db;
    int      kind;
    uint32_t gen;
    bool     failed;
    void   (*put)(void *ud, const char *tenant, const char *id, const char *json, size_t len);
    void    *ud;
} sync_ctx_t;

/* omu held: one object of another process's tenant against the seen table. */
static void sync_object(void *ud, mgc_tenant_t *t, const char *id, const char *json, uint32_t n)
{
    sync_ctx_t   *x = ud;
    mgc_objent_t *e = *seen_slot(x->db, t->name, x->kind, id);

    if (!e || e->h != cr_hash(json, n)) {
        e = seen_set(x->db, t->name, x->kind, id, json, n);
        x->put(x->ud, t->name, id, json, n);
    }
    e->gen = x->gen;
}

static void sync_tenant(void *ud, mgc_tenant_t *t)
{
    sync_ctx_t *x = ud;

    if (!tenant_objects(x->db, t, x->kind, sync_object, x))
        x->failed = true;
}

void mgc_obj_sync(mgc_t *db, int kind,
                  void (*put)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                  void (*gone)(void *ud, const char *tenant, const char *id), void *ud)
{
    sync_ctx_t x = { .db = db, .kind = kind, .put = put, .ud = ud };

    mgc_tenants_load(db);
    pthread_mutex_lock(&db->omu);
    x.gen = ++db->ogen;
    mgc_tenant_each(db, sync_tenant, &x);
    /* what was not seen is gone (unless a read failed: then nothing is) */
    for (uint32_t i = 0; !x.failed && i <= db->omask; i++)
        for (mgc_objent_t **pp = &db->otbl[i]; *pp;) {
            mgc_objent_t *e = *pp;

            if (e->kind != kind || e->gen == x.gen) {
                pp = &e->next;
                continue;
            }
            gone(ud, e->tenant, e->id);
            *pp = e->next;
            free(e->tenant);
            free(e->id);
            free(e);
            db->on--;
        }
    pthread_mutex_unlock(&db->omu);
}
