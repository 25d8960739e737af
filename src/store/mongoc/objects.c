/*
 * objects.c - the MongoDB store's stored objects (subscriptions,
 * registrations, hosted @contexts): per tenant database, collection
 * "objects", one document per (kind, id): {_id: "KIND/ID", k, i, o, j}
 * where o orders them by creation (store_obj_foreach) and j is the JSON
 * text as the owning module wrote it (the store does not interpret it).
 *
 * Every object write also bumps the version document {_id: "objects", v}
 * in the default database's "meta": a process that polls it every
 * --syncInterval learns cheaply that another process changed an object.
 */
#include <string.h>

#include "mgc.h"

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
    if (ok)
        bump_version(db, c);
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
    ok  = mongoc_collection_delete_one(col, q, NULL, &reply, &err);
    if (!ok)
        mgc_fail(p, "deleting an object", &err);
    else if (!bson_iter_init_find(&it, &reply, "deletedCount") || bson_iter_as_int64(&it) < 1)
        ok = problem_set(p, PB_RESOURCE_NOT_FOUND, "'%.400s' not found", id);
    else
        bump_version(db, c);
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

typedef struct each_ctx {
    mgc_t *db;
    int    kind;
    void (*fn)(void *ud, const char *tenant, const char *id, const char *json, size_t len);
    void  *ud;
} each_ctx_t;

static void each_tenant(void *ud, mgc_tenant_t *t)
{
    each_ctx_t          *x    = ud;
    mongoc_client_t     *c    = mgc_pop(x->db);
    mongoc_collection_t *col  = mgc_coll(x->db, c, t, "objects");
    bson_t              *q    = BCON_NEW("k", BCON_INT32(x->kind));
    bson_t              *opts = BCON_NEW("sort", "{", "o", BCON_INT32(1), "_id", BCON_INT32(1), "}");
    mongoc_cursor_t     *cur  = mongoc_collection_find_with_opts(col, q, opts, NULL);
    const bson_t        *doc;
    bson_error_t         err;

    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        const char *id = NULL, *json = NULL;
        uint32_t    n = 0;

        if (bson_iter_init_find(&it, doc, "i") && BSON_ITER_HOLDS_UTF8(&it))
            id = bson_iter_utf8(&it, NULL);
        if (bson_iter_init_find(&it, doc, "j") && BSON_ITER_HOLDS_UTF8(&it))
            json = bson_iter_utf8(&it, &n);
        if (id && json)
            x->fn(x->ud, t->name, id, json, n);
    }
    if (mongoc_cursor_error(cur, &err))
        LOG_E("mongoc: reading the stored objects of tenant '%s': %s", t->name, err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    mgc_push(x->db, c);
}

void mgc_obj_foreach(mgc_t *db, int kind,
                     void (*fn)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                     void *ud)
{
    each_ctx_t x = { .db = db, .kind = kind, .fn = fn, .ud = ud };

    mgc_tenants_load(db);
    mgc_tenant_each(db, each_tenant, &x);
}
