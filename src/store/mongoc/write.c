/*
 * write.c - the MongoDB store's writes: create, upsert, the read-modify-write
 * operations, delete, batch and purge.
 *
 * Every write of a tenant holds its write mutex (mgc.h "Ordering") from the
 * commit time it stamps to the server's acknowledgement, and takes the next
 * seq only once the server has the version: a write that fails takes no
 * number. A read-modify-write reads the current document (version v),
 * applies the model's operation (entity_apply, as corDB does), and replaces
 * the document only where it is still v (its write token: "claims" below
 * for servers whose conditional update is not atomic); when another process
 * wrote in between, nothing matched and the operation starts again from the
 * new version (MGC_RETRIES times, then 503): concurrent PATCHes of one
 * entity through several processes never lose one. A create is an insert
 * (the server's unique _id decides who was first); a delete removes the
 * version it read (so that the change carries what was deleted).
 *
 * An operation whose outcome the server did not tell (the connection
 * dropped after the write went out) answers 503: it may have been applied,
 * but nothing is acknowledged that was not.
 */
#include <string.h>

#include "mgc.h"

static bool not_found(problem_t *p, const char *id)
{
    return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity '%.400s' not found", id);
}

static bool type_mismatch(problem_t *p, const char *id)
{
    return problem_set(p, PB_RESOURCE_NOT_FOUND,
                       "entity '%.400s' does not match the type selection (?type=)", id);
}

static bool check_draft(const cr_entity_t *draft, problem_t *p)
{
    if (!draft || !draft->id || !draft->n_types)
        return problem_set(p, PB_BAD_REQUEST_DATA, "an entity needs an id and a type");
    return true;
}

static void change_none(store_change_t *ch)
{
    memset(ch, 0, sizeof(*ch));
}

/* wmu held, the server has the version: numbers the change. */
static void commit(mgc_tenant_t *t, store_change_t *ch, store_op_t op, int64_t at, cr_entity_t *before,
                   cr_entity_t *after)
{
    t->last_at = at;
    *ch = (store_change_t){ .tenant = t->name, .seq = ++t->seq, .at = at, .op = op,
                            .before = before, .after = after, .stream = t->stream };
}

static void stamp_attrs(cr_attr_t *v, uint16_t n, int64_t at)
{
    for (uint16_t i = 0; i < n; i++) {
        v[i].created_at = v[i].modified_at = at;
        stamp_attrs(v[i].sub, v[i].n_sub, at);
    }
}

/* A new entity's block is not shared yet: its times become the commit time. */
static void stamp_new(cr_entity_t *e, int64_t at)
{
    e->created_at = e->modified_at = at;
    stamp_attrs(e->attrs, e->n_attrs, at);
}

static int64_t reply_count(const bson_t *reply, const char *key)
{
    bson_iter_t it;

    if (bson_iter_init_find(&it, reply, key) && BSON_ITER_HOLDS_NUMBER(&it))
        return bson_iter_as_int64(&it);
    return 0;
}

/* A client and the tenant's entity collection for one operation. */
typedef struct wctx {
    mgc_t               *db;
    mgc_tenant_t        *t;
    mongoc_client_t     *c;
    mongoc_collection_t *col;
} wctx_t;

static void wctx_open(wctx_t *w, mgc_t *db, mgc_tenant_t *t)
{
    w->db  = db;
    w->t   = t;
    w->c   = mgc_pop(db);
    w->col = mgc_coll(db, w->c, t, "entities");
}

/* For the operations whose commands name the collection themselves
 * (mgc_write): the collection only when wcol asks for it (getting one is
 * ~5k instructions, callgrind). */
static void wctx_open_lazy(wctx_t *w, mgc_t *db, mgc_tenant_t *t)
{
    w->db  = db;
    w->t   = t;
    w->c   = mgc_pop(db);
    w->col = NULL;
    mgc_indexes(db, w->c, t);
}

static mongoc_collection_t *wcol(wctx_t *w)
{
    if (!w->col)
        w->col = mongoc_client_get_collection(w->c, w->t->dbname, "entities");
    return w->col;
}

static void wctx_close(wctx_t *w)
{
    if (w->col)
        mongoc_collection_destroy(w->col);
    mgc_push(w->db, w->c);
}

/* The document of a new entity into the collection: an insert command
 * (mgc_write) unless it is too large for one. */
static bool entity_insert(wctx_t *w, const bson_t *doc, bson_error_t *err)
{
    bson_t cmd, arr;
    bool   ok;

    if (doc->len > MGC_CMD_DOC_MAX)
        return mongoc_collection_insert_one(wcol(w), doc, w->db->wopts, NULL, err);
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "insert", "entities");
    bson_append_array_begin(&cmd, "documents", 9, &arr);
    BSON_APPEND_DOCUMENT(&arr, "0", doc);
    bson_append_array_end(&cmd, &arr);
    ok = mgc_write(w->db, w->c, w->t->dbname, &cmd, NULL, err);
    bson_destroy(&cmd);
    return ok;
}

/* doc in place of the stored version of id whose write token is tok;
 * *matched: it still was (an update command with the document as its
 * replacement, unless it is too large for one). */
static bool entity_replace(wctx_t *w, const char *id, int64_t tok, const bson_t *doc, bool *matched,
                           bson_error_t *err)
{
    bson_t  cmd, arr, st, q;
    int64_t n = 0;
    bool    ok;

    if (doc->len > MGC_CMD_DOC_MAX) {
        bson_t *sel = BCON_NEW("_id", BCON_UTF8(id), "w", BCON_INT64(tok));
        bson_t  reply;

        ok = mongoc_collection_replace_one(wcol(w), sel, doc, w->db->wopts, &reply, err);
        *matched = ok && reply_count(&reply, "matchedCount") > 0;
        bson_destroy(&reply);
        bson_destroy(sel);
        return ok;
    }
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "update", "entities");
    bson_append_array_begin(&cmd, "updates", 7, &arr);
    bson_append_document_begin(&arr, "0", 1, &st);
    bson_append_document_begin(&st, "q", 1, &q);
    BSON_APPEND_UTF8(&q, "_id", id);
    BSON_APPEND_INT64(&q, "w", tok);
    bson_append_document_end(&st, &q);
    BSON_APPEND_DOCUMENT(&st, "u", doc);
    bson_append_document_end(&arr, &st);
    bson_append_array_end(&cmd, &arr);
    ok = mgc_write(w->db, w->c, w->t->dbname, &cmd, &n, err);
    *matched = ok && n > 0;
    bson_destroy(&cmd);
    return ok;
}

/* Inserts the frozen e (version 1) stamped now; *dup: the id is taken.
 * outbox: its notification outbox entry is written first (outbox.c). */
static bool insert_locked(wctx_t *w, cr_entity_t *e, bool *dup, store_change_t *ch, bool outbox, problem_t *p)
{
    int64_t      at  = mgc_clock(w->t, 0);
    mgc_ver_t    ver = { 1, (int64_t)mgc_token(w->db) };
    mgc_obx_t    ob  = { STORE_OP_CREATE, at, NULL, 0 };
    bson_t       doc;
    bson_error_t err;
    bool         ok;

    *dup = false;
    stamp_new(e, at);
    if (outbox && mgc_outbox_wants(w->db, w->t, e) &&
        !mgc_outbox_put(w->db, w->c, w->t, &ob, e, (mgc_ver_t){ 0, 0 }, ver, p))
        return false;
    mgc_geo_index(w->db, w->c, w->t, e);
    mgc_doc_entity(&doc, e, ver.v, (uint64_t)ver.w, w->db->geo2d);
    ok = entity_insert(w, &doc, &err);
    bson_destroy(&doc);
    if (!ok)
        mgc_outbox_abandon(w->db, w->c, w->t, &ob, mgc_is_dup(&err));
    if (!ok) {
        if (mgc_is_dup(&err)) {
            *dup = true;
            return problem_set(p, PB_ALREADY_EXISTS, "entity '%.400s' already exists", e->id);
        }
        return mgc_fail(p, "insert", &err);
    }
    mgc_cache_put(w->db->cache, w->t, e, ver);
    commit(w->t, ch, STORE_OP_CREATE, at, NULL, e);
    ch->outbox = (uint64_t)ob.id;
    return true;
}

/* ------------------------------------------------------------ claims
 *
 * On MongoDB a conditional replace ({_id, w: token}) is atomic: of two
 * writers that read the same version, one matches and the other matches
 * nothing. FerretDB 1.24 on SQLite finds and then writes, so both may match
 * (a lost update, seen in test_mongo.py). There (db->claims, from the probe
 * at start) a writer first claims the version it replaces: it inserts
 * {_id: that version's token} into "claims", and the unique _id lets one
 * writer through; the others read again. A claim left by a process that
 * died before its replace is older than MGC_CLAIM_STALE_US and is taken
 * over.
 *
 * Once the replace (or delete) is done, the claimed token is no document's
 * any more, and tokens are never reused: its claim can stop nobody. So a
 * claim is removed at once only when the write failed (the version is still
 * current); the others are swept in one delete of every claim older than
 * MGC_CLAIM_STALE_US, every MGC_CLAIM_SWEEP claims of a tenant: a write on
 * FerretDB is two round trips (claim, replace), not three. */
#define MGC_CLAIM_STALE_US (30 * 1000000LL)
#define MGC_CLAIM_SWEEP    256u

static mongoc_collection_t *claims_coll(wctx_t *w)
{
    return mongoc_client_get_collection(w->c, w->t->dbname, "claims");
}

/* *won: this writer may replace the version with token tok. */
static bool claim(wctx_t *w, int64_t tok, bool *won, problem_t *p)
{
    mongoc_collection_t *col = NULL;
    bson_error_t         err;
    bool                 ok = true;

    *won = false;
    for (int i = 0; i < 2 && ok && !*won; i++) {
        bson_t cmd, arr, doc;

        /* an insert command (mgc_write): the claim is a write of every
         * PATCH on FerretDB, the helper's structures are not for free */
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "insert", "claims");
        bson_append_array_begin(&cmd, "documents", 9, &arr);
        bson_append_document_begin(&arr, "0", 1, &doc);
        BSON_APPEND_INT64(&doc, "_id", tok);
        BSON_APPEND_INT64(&doc, "at", cr_now_us());
        bson_append_document_end(&arr, &doc);
        bson_append_array_end(&cmd, &arr);
        if (mgc_write(w->db, w->c, w->t->dbname, &cmd, NULL, &err)) {
            *won = true;
        } else if (!mgc_is_dup(&err)) {
            ok = mgc_fail(p, "claiming a version", &err);
        } else {
            /* taken: by a live writer (read again), or left by a dead one */
            bson_t *stale = BCON_NEW("_id", BCON_INT64(tok), "at", "{", "$lt",
                                     BCON_INT64(cr_now_us() - MGC_CLAIM_STALE_US), "}");
            bson_t  reply;

            if (!col)
                col = claims_coll(w);
            if (!mongoc_collection_delete_one(col, stale, NULL, &reply, &err))
                ok = mgc_fail(p, "claiming a version", &err);
            else if (reply_count(&reply, "deletedCount") < 1)
                i = 2;                      /* a live claim */
            bson_destroy(&reply);
            bson_destroy(stale);
        }
        bson_destroy(&cmd);
    }
    if (col)
        mongoc_collection_destroy(col);
    return ok;
}

static void unclaim(wctx_t *w, int64_t tok)
{
    mongoc_collection_t *col = claims_coll(w);
    bson_t              *q   = BCON_NEW("_id", BCON_INT64(tok));
    bson_error_t         err;

    if (!mongoc_collection_delete_one(col, q, NULL, NULL, &err))
        LOG_W("mongoc: a claim of database %s stays (taken over in %llds): %s", w->t->dbname,
              (long long)(MGC_CLAIM_STALE_US / 1000000), err.message);
    bson_destroy(q);
    mongoc_collection_destroy(col);
}

/* wmu held: a claim was left behind; every MGC_CLAIM_SWEEP of them, the
 * stale ones go (one delete_many; a failure only leaves them for the next). */
static void claims_left(wctx_t *w)
{
    mongoc_collection_t *col;
    bson_t              *q;
    bson_error_t         err;

    if (++w->t->n_claims < MGC_CLAIM_SWEEP)
        return;
    w->t->n_claims = 0;
    col = claims_coll(w);
    q   = BCON_NEW("at", "{", "$lt", BCON_INT64(cr_now_us() - MGC_CLAIM_STALE_US), "}");
    if (!mongoc_collection_delete_many(col, q, NULL, NULL, &err))
        LOG_W("mongoc: the stale claims of database %s stay: %s", w->t->dbname, err.message);
    bson_destroy(q);
    mongoc_collection_destroy(col);
}

/* Replaces the stored version ver of e->id by e; *matched: ver was still
 * the current one (else another writer was first: read again). */
static bool replace_locked(wctx_t *w, cr_entity_t *e, mgc_ver_t ver, mgc_obx_t *ob, bool *matched,
                           problem_t *p)
{
    bson_t       doc;
    bson_error_t err;
    mgc_ver_t    next;
    bool         ok, won = true;

    *matched = false;
    if (w->db->claims && !claim(w, ver.w, &won, p))
        return false;
    if (!won)
        return true;
    mgc_geo_index(w->db, w->c, w->t, e);
    next = (mgc_ver_t){ ver.v + 1, (int64_t)mgc_token(w->db) };
    if (ob && !mgc_outbox_put(w->db, w->c, w->t, ob, e, ver, next, p)) {
        if (w->db->claims)
            unclaim(w, ver.w);
        return false;
    }
    mgc_doc_entity(&doc, e, next.v, (uint64_t)next.w, w->db->geo2d);
    ok = entity_replace(w, e->id, ver.w, &doc, matched, &err);
    if (!*matched)
        mgc_outbox_abandon(w->db, w->c, w->t, ob, ok);
    bson_destroy(&doc);
    if (*matched)
        mgc_cache_put(w->db->cache, w->t, e, next);
    else
        mgc_cache_drop(w->db->cache, w->t, e->id);
    if (w->db->claims) {
        if (ok)
            claims_left(w);
        else
            unclaim(w, ver.w);
    }
    return ok || mgc_fail(p, "replace", &err);
}

static bool delete_version(wctx_t *w, const char *id, mgc_ver_t ver, mgc_obx_t *ob, bool *matched,
                           problem_t *p)
{
    bson_t      *sel;
    bson_t       reply;
    bson_error_t err;
    bool         ok, won = true;

    *matched = false;
    if (w->db->claims && !claim(w, ver.w, &won, p))
        return false;
    if (!won)
        return true;
    if (ob && !mgc_outbox_put(w->db, w->c, w->t, ob, NULL, ver, (mgc_ver_t){ 0, 0 }, p)) {
        if (w->db->claims)
            unclaim(w, ver.w);
        return false;
    }
    sel = BCON_NEW("_id", BCON_UTF8(id), "w", BCON_INT64(ver.w));
    ok  = mongoc_collection_delete_one(wcol(w), sel, NULL, &reply, &err);
    *matched = ok && reply_count(&reply, "deletedCount") > 0;
    if (!*matched)
        mgc_outbox_abandon(w->db, w->c, w->t, ob, ok);
    bson_destroy(&reply);
    bson_destroy(sel);
    mgc_cache_drop(w->db->cache, w->t, id);
    if (w->db->claims) {
        if (ok)
            claims_left(w);
        else
            unclaim(w, ver.w);
    }
    return ok || mgc_fail(p, "delete", &err);
}

static bool conflict(problem_t *p, const char *id)
{
    problem_set(p, PB_HTTP, "entity '%.400s' was changed by other writers %d times while this "
                "write retried; retry later", id, MGC_RETRIES);
    if (p)
        p->status = 503;
    return false;
}

/* wmu held: op applied to the current version of id, with the version check
 * (see the top). *absent (may be NULL): the entity is not there (p set). */
static bool modify_locked(wctx_t *w, const char *id, entity_op_t op, const cr_entity_t *patch,
                          const op_args_t *args, op_result_t *res, arena_t *scratch,
                          store_change_t *ch, bool *absent, problem_t *p)
{
    size_t n0 = res ? res->n : 0, upd0 = res ? res->n_updated : 0, not0 = res ? res->n_not_updated : 0;

    change_none(ch);
    if (absent)
        *absent = false;
    for (int attempt = 0; attempt < MGC_RETRIES; attempt++) {
        mgc_ver_t    ver;
        bool         failed = false, matched;
        /* the first attempt starts from the cached version, unread: the
         * replace is conditional on its token (cache.c); when another
         * process wrote since, nothing matches and the next attempt reads */
        cr_entity_t *old = attempt == 0 ? mgc_cache_peek(w->db->cache, w->t, id, &ver) : NULL;
        cr_entity_t *draft = NULL, *e;
        bool         cached = old != NULL;

        if (!old)
            old = mgc_read(w->db, w->c, w->t, id, &ver, &failed, p);
        if (!old) {
            if (failed)
                return false;
            if (absent)
                *absent = true;
            return not_found(p, id);
        }
        int64_t at   = mgc_clock(w->t, old->modified_at);
        bool    deny = args && args->if_type && !typesel_match(args->if_type, old);

        if (!deny)
            draft = entity_apply(scratch, old, patch, op, args, at, res, p);
        if (cached && (deny || !draft || (res && res->n_updated == upd0 && res->n_not_updated > not0))) {
            /* an answer the cached version gives, but the current one may
             * not: decided on the version read from the server */
            entity_unref(old);
            if (p)
                *p = (problem_t){ 0 };
            if (res) {
                res->n = n0;
                res->n_updated = upd0;
                res->n_not_updated = not0;
            }
            continue;
        }
        if (deny) {
            entity_unref(old);
            return type_mismatch(p, id);
        }
        if (!draft) {
            entity_unref(old);
            return false;
        }
        if (res && res->n_updated == upd0 && res->n_not_updated > not0) {
            entity_unref(old);              /* every attribute notUpdated: no change */
            return true;
        }
        if (!draft->id || strcmp(draft->id, old->id) != 0 || !draft->n_types) {
            entity_unref(old);
            return problem_set(p, PB_INTERNAL_ERROR, "MongoDB: an update of '%.400s' changed its "
                               "id or removed its types", id);
        }
        e = entity_freeze(draft);
        if (!e) {
            entity_unref(old);
            return problem_set(p, PB_INTERNAL_ERROR, "entity '%.400s' too large", id);
        }
        mgc_obx_t ob = { store_op_of(op), at, old, 0 };

        if (!replace_locked(w, e, ver, mgc_outbox_wants(w->db, w->t, e) ? &ob : NULL, &matched, p)) {
            entity_unref(old);
            entity_unref(e);
            return false;
        }
        if (matched) {
            commit(w->t, ch, store_op_of(op), at, old, e);
            ch->outbox = (uint64_t)ob.id;
            return true;
        }
        entity_unref(old);                  /* another process wrote first: again */
        entity_unref(e);
        if (res) {
            res->n = n0;
            res->n_updated = upd0;
            res->n_not_updated = not0;
        }
    }
    return conflict(p, id);
}

/* wmu held: creates, or (the id taken) replaces / updates its attributes. */
static bool upsert_locked(wctx_t *w, const cr_entity_t *draft, bool replace, bool *created,
                          arena_t *scratch, store_change_t *ch, problem_t *p)
{
    change_none(ch);
    for (int attempt = 0; attempt < MGC_RETRIES; attempt++) {
        bool         absent, dup;
        cr_entity_t *e;

        /* 6.15.3.1: options=update updates the attributes as 5.6.2 does */
        if (modify_locked(w, draft->id, replace ? OP_REPLACE_ENTITY : OP_UPDATE_ATTRS, draft, NULL,
                          NULL, scratch, ch, &absent, p)) {
            *created = false;
            return true;
        }
        if (!absent)
            return false;
        if (!(e = entity_freeze(draft)))
            return problem_set(p, PB_INTERNAL_ERROR, "entity '%.400s' too large", draft->id);
        if (p)
            *p = (problem_t){ 0 };
        if (insert_locked(w, e, &dup, ch, true, p)) {
            *created = true;
            return true;
        }
        entity_unref(e);
        if (!dup)
            return false;
        if (p)
            *p = (problem_t){ 0 };          /* created meanwhile: update it */
    }
    return conflict(p, draft->id);
}

static bool remove_locked(wctx_t *w, const char *id, const typesel_t *if_type, store_op_t op,
                          store_change_t *ch, problem_t *p)
{
    change_none(ch);
    for (int attempt = 0; attempt < MGC_RETRIES; attempt++) {
        mgc_ver_t    ver;
        bool         failed, matched;
        cr_entity_t *old = mgc_read(w->db, w->c, w->t, id, &ver, &failed, p);

        if (!old)
            return failed ? false : not_found(p, id);
        if (if_type && !typesel_match(if_type, old)) {
            entity_unref(old);
            return type_mismatch(p, id);
        }
        int64_t   at = mgc_clock(w->t, 0);
        mgc_obx_t ob = { op, at, old, 0 };

        if (!delete_version(w, id, ver, mgc_outbox_wants(w->db, w->t, old) ? &ob : NULL, &matched, p)) {
            entity_unref(old);
            return false;
        }
        if (matched) {
            commit(w->t, ch, op, at, old, NULL);
            ch->outbox = (uint64_t)ob.id;
            return true;
        }
        entity_unref(old);
    }
    return conflict(p, id);
}

/* ------------------------------------------------------------ entry points */

bool mgc_create(mgc_t *db, const char *tenant, const cr_entity_t *draft, store_change_t *ch, problem_t *p)
{
    mgc_tenant_t *t;
    cr_entity_t  *e;
    wctx_t        w;
    bool          ok, dup;

    change_none(ch);
    if (!check_draft(draft, p) || !(t = mgc_tenant_open(db, tenant, p)))
        return false;
    if (!(e = entity_freeze(draft)))
        return problem_set(p, PB_INTERNAL_ERROR, "entity '%.400s' too large", draft->id);
    wctx_open_lazy(&w, db, t);
    pthread_mutex_lock(&t->wmu);
    ok = insert_locked(&w, e, &dup, ch, true, p);
    pthread_mutex_unlock(&t->wmu);
    wctx_close(&w);
    if (!ok)
        entity_unref(e);
    return ok;
}

bool mgc_upsert(mgc_t *db, const char *tenant, const cr_entity_t *draft, bool replace, bool *created,
                arena_t *scratch, store_change_t *ch, problem_t *p)
{
    mgc_tenant_t *t;
    wctx_t        w;
    bool          ok;

    change_none(ch);
    if (!check_draft(draft, p) || !(t = mgc_tenant_open(db, tenant, p)))
        return false;
    wctx_open_lazy(&w, db, t);
    pthread_mutex_lock(&t->wmu);
    ok = upsert_locked(&w, draft, replace, created, scratch, ch, p);
    pthread_mutex_unlock(&t->wmu);
    wctx_close(&w);
    return ok;
}

bool mgc_modify(mgc_t *db, const char *tenant, const char *id, entity_op_t op, const cr_entity_t *patch,
                const op_args_t *args, op_result_t *res, arena_t *scratch, store_change_t *ch,
                problem_t *p)
{
    mgc_tenant_t *t;
    wctx_t        w;
    bool          ok;

    change_none(ch);
    if (!(t = mgc_tenant_get(db, tenant, p)))
        return false;
    if (!id)
        return problem_set(p, PB_BAD_REQUEST_DATA, "no entity id");
    wctx_open_lazy(&w, db, t);
    pthread_mutex_lock(&t->wmu);
    ok = modify_locked(&w, id, op, patch, args, res, scratch, ch, NULL, p);
    pthread_mutex_unlock(&t->wmu);
    wctx_close(&w);
    return ok;
}

bool mgc_remove(mgc_t *db, const char *tenant, const char *id, const typesel_t *if_type,
                store_change_t *ch, problem_t *p)
{
    mgc_tenant_t *t;
    wctx_t        w;
    bool          ok;

    change_none(ch);
    if (!(t = mgc_tenant_get(db, tenant, p)))
        return false;
    if (!id)
        return problem_set(p, PB_BAD_REQUEST_DATA, "no entity id");
    wctx_open(&w, db, t);
    pthread_mutex_lock(&t->wmu);
    ok = remove_locked(&w, id, if_type, STORE_OP_DELETE, ch, p);
    pthread_mutex_unlock(&t->wmu);
    wctx_close(&w);
    return ok;
}

/* A failed item's problem, in the scratch arena. */
static problem_t *batch_problem(arena_t *scratch, const problem_t *p)
{
    problem_t *q = arena_alloc(scratch, sizeof(*q));

    *q = *p;
    if (q->kind == PB_NONE)
        problem_set(q, PB_INTERNAL_ERROR, "MongoDB: a batch item failed without a reason");
    return q;
}

static bool is_503(const problem_t *p)
{
    return p->kind == PB_HTTP && p->status == 503;
}

/* A bulk insert's per-item outcome from its reply: writeErrors[] name the
 * failed items by index (11000: the id is taken). */
static void bulk_errors(const bson_t *reply, arena_t *scratch, problem_t **err, size_t n)
{
    bson_iter_t it, arr, el;

    if (!bson_iter_init_find(&it, reply, "writeErrors") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr))
        return;
    while (bson_iter_next(&arr)) {
        int64_t     idx = -1, code = 0;
        const char *msg = "";

        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &el))
            continue;
        while (bson_iter_next(&el)) {
            const char *k = bson_iter_key(&el);

            if (!strcmp(k, "index") && BSON_ITER_HOLDS_NUMBER(&el))
                idx = bson_iter_as_int64(&el);
            else if (!strcmp(k, "code") && BSON_ITER_HOLDS_NUMBER(&el))
                code = bson_iter_as_int64(&el);
            else if (!strcmp(k, "errmsg") && BSON_ITER_HOLDS_UTF8(&el))
                msg = bson_iter_utf8(&el, NULL);
        }
        if (idx < 0 || (size_t)idx >= n || err[idx])
            continue;
        err[idx] = arena_alloc(scratch, sizeof(problem_t));
        *err[idx] = (problem_t){ 0 };
        if (code == 11000)
            problem_set(err[idx], PB_ALREADY_EXISTS, "the entity already exists");
        else
            problem_set(err[idx], PB_INTERNAL_ERROR, "MongoDB: insert: %.300s", msg);
    }
}

/* A failed bulk execute: true when the outcome of its writes is not known
 * (anything but per-item write errors), with the problem in down. */
static bool bulk_unknown(const bson_t *reply, const bson_error_t *berr, const char *what, problem_t *down)
{
    bson_iter_t it, wce;
    bool        unknown = false;

    if (berr->domain == MONGOC_ERROR_STREAM || berr->domain == MONGOC_ERROR_SERVER_SELECTION ||
        berr->domain == MONGOC_ERROR_PROTOCOL || berr->domain == MONGOC_ERROR_CLIENT ||
        (berr->domain != MONGOC_ERROR_WRITE_CONCERN &&
         !(bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it)))) {
        unknown = true;
        mgc_fail(down, what, berr);
    }
    if (bson_iter_init_find(&it, reply, "writeConcernErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &wce) && bson_iter_next(&wce)) {
        unknown = true;
        *down   = (problem_t){ 0 };
        problem_set(down, PB_HTTP, "the database (MongoDB) did not confirm the batch with its write "
                    "concern in time: nothing acknowledged; retry later");
        down->status = 503;
    }
    if (unknown && down->kind == PB_NONE)
        mgc_fail(down, what, berr);
    return unknown;
}

/* wmu held: a batch of creates as ONE unordered bulk insert (one round trip
 * for the batch, not one per entity). The server reports each failed item
 * by its index (writeErrors: 11000, the id taken, is 409 for that item, as
 * one insert would say); a duplicate id within the batch fails the later
 * one. When the server's answer is lost or its write concern is not met,
 * no item is acknowledged: 503 for every item not failed already. */
static void batch_create_bulk(wctx_t *w, store_batch_item_t *items, size_t n, arena_t *scratch,
                              store_change_t *group, size_t *k)
{
    cr_entity_t            **e   = arena_calloc(scratch, n * sizeof(*e));
    problem_t              **err = arena_calloc(scratch, n * sizeof(*err));
    int64_t                 *at  = arena_calloc(scratch, n * sizeof(*at));
    mgc_ver_t               *ver = arena_calloc(scratch, n * sizeof(*ver));
    size_t                  *of  = arena_alloc(scratch, n * sizeof(*of));   /* bulk op -> item */
    problem_t              **oerr = arena_calloc(scratch, n * sizeof(*oerr));
    bson_t                  *bopts = BCON_NEW("ordered", BCON_BOOL(false));
    mongoc_bulk_operation_t *bulk  = mongoc_collection_create_bulk_operation_with_opts(w->col, bopts);
    bson_t                   reply;
    bson_error_t             berr;
    mgc_obx_t               *ob  = arena_calloc(scratch, n * sizeof(*ob));
    mgc_obx_req_t           *obr = arena_alloc(scratch, n * sizeof(*obr));
    mgc_obx_t              **gone = arena_alloc(scratch, n * sizeof(*gone));
    size_t                   queued = 0, n_obr = 0, n_gone = 0;
    bool                     unknown = false;
    problem_t                down = { 0 };

    for (size_t i = 0; i < n; i++) {
        problem_t ip = { 0 };
        bson_t    doc;

        items[i].ok = items[i].created = false;
        items[i].problem = NULL;
        if (!check_draft(items[i].draft, &ip) ||
            (!(e[i] = entity_freeze(items[i].draft)) &&
             problem_set(&ip, PB_INTERNAL_ERROR, "entity '%.400s' too large", items[i].draft->id))) {
            items[i].problem = batch_problem(scratch, &ip);
            continue;
        }
        at[i]  = mgc_clock(w->t, 0);
        w->t->last_at = at[i];      /* the next item's stamp comes after it */
        ver[i] = (mgc_ver_t){ 1, (int64_t)mgc_token(w->db) };
        stamp_new(e[i], at[i]);
        mgc_geo_index(w->db, w->c, w->t, e[i]);
        mgc_doc_entity(&doc, e[i], ver[i].v, (uint64_t)ver[i].w, w->db->geo2d);
        if (!mongoc_bulk_operation_insert_with_opts(bulk, &doc, w->db->wopts, &berr)) {
            problem_set(&ip, PB_INTERNAL_ERROR, "MongoDB: insert: %.300s", berr.message);
            items[i].problem = batch_problem(scratch, &ip);
            entity_unref(e[i]);
            e[i] = NULL;
        } else {
            of[queued++] = i;
            ob[i] = (mgc_obx_t){ STORE_OP_CREATE, at[i], NULL, 0 };
            if (mgc_outbox_wants(w->db, w->t, e[i]))
                obr[n_obr++] = (mgc_obx_req_t){ &ob[i], e[i], { 0, 0 }, ver[i] };
        }
        bson_destroy(&doc);
    }
    /* the outbox entries first (one insertMany), else none of the creates */
    if (n_obr && !mgc_outbox_put_many(w->db, w->c, w->t, obr, n_obr, &down)) {
        for (size_t j = 0; j < queued; j++) {
            items[of[j]].problem = batch_problem(scratch, &down);
            entity_unref(e[of[j]]);
            e[of[j]] = NULL;
        }
        queued = 0;
    }
    if (queued && !mongoc_bulk_operation_execute(bulk, &reply, &berr)) {
        /* writeErrors name the bulk's ops, not the items (some were not queued) */
        bulk_errors(&reply, scratch, oerr, queued);
        for (size_t j = 0; j < queued; j++)
            err[of[j]] = oerr[j];
        unknown = bulk_unknown(&reply, &berr, "insert", &down);
    }
    if (queued)
        bson_destroy(&reply);
    for (size_t i = 0; i < n; i++) {
        if (!e[i])
            continue;
        if (err[i] || unknown) {
            if (err[i] && err[i]->kind == PB_ALREADY_EXISTS)
                problem_set(err[i], PB_ALREADY_EXISTS, "entity '%.400s' already exists", e[i]->id);
            items[i].problem = err[i] ? err[i] : batch_problem(scratch, &down);
            entity_unref(e[i]);
            if (!err[i])
                mgc_outbox_abandon(w->db, w->c, w->t, &ob[i], false);
            else if (ob[i].id)
                gone[n_gone++] = &ob[i];
            continue;
        }
        mgc_cache_put(w->db->cache, w->t, e[i], ver[i]);
        commit(w->t, &group[*k], STORE_OP_CREATE, at[i], NULL, e[i]);
        group[*k].outbox = (uint64_t)ob[i].id;
        (*k)++;
        items[i].ok = items[i].created = true;
    }
    mgc_outbox_abandon_many(w->db, w->c, w->t, gone, n_gone);
    mongoc_bulk_operation_destroy(bulk);
    bson_destroy(bopts);
}

/* ------------------------------------------------------------ bulk batches
 *
 * A batch of upserts, updates, merges and deletes (or creates among them)
 * in rounds of three round trips whatever its size (four with claims):
 *   1. one find of the current versions of the round's ids (mgc_read_many);
 *   2. per item, the model's operation on its version (entity_apply, as the
 *      one-entity writes do), or its error (not found, ...) at once;
 *   3. with claims (FerretDB), one bulk insert of the claims of the versions
 *      replaced or deleted: a claim already taken is another writer's (or a
 *      dead one's, taken over as claim() does);
 *   4. one unordered bulk write: an insert (a new entity), a replace or a
 *      delete conditional on the token read (_id, w).
 * An item whose version changed in between (its claim lost, its condition
 * matched nothing, its insert found the id taken by an upsert) goes to the
 * next round, which reads it again (MGC_RETRIES rounds, then 503); the items
 * of one id after the first go to later rounds too, so that each sees the one
 * before it, as one item after the other would. Which conditional writes
 * matched: the bulk reply counts them (nMatched, nRemoved), not per item;
 * when the counts fall short of the writes (another process wrote between
 * the read and the write, without claims), the versions are read again: a
 * replace matched when the stored token is its own, did not when the same
 * entity is still at most at the version it would have written; a delete did
 * not when the same entity (createdAt, version) is still there. What the
 * counts still leave open (another writer wrote twice, or deleted, in that
 * window) answers 503 for the items concerned, as a lost answer does: nothing
 * is acknowledged that may not be. The changes are committed in item order
 * within a round, each round's after the round before. */
enum { BA_FAIL, BA_NONE, BA_INSERT, BA_REPLACE, BA_DELETE, BA_RETRY };

typedef struct bitem {
    const char  *id;
    cr_entity_t *old, *e;           /* the version read, the one written (references) */
    mgc_ver_t    ver, next;
    int64_t      at;
    int          act;
    bool         pending, claimed, matched, unknown;
    bool         cache_tried;       /* its first round looked in the entity cache */
    bool         cached;            /* old is the cached version, unread (bulk_from_cache) */
    int32_t      op;                /* its index in the write bulk, -1: none */
    mgc_obx_t    ob;                /* its outbox entry in this round (ob.id 0: none) */
    problem_t   *err;               /* its write error */
    size_t       n0, upd0, not0;    /* its op_result_t before the round */
} bitem_t;

static const char *bitem_id(const store_batch_item_t *it)
{
    if (it->kind == STORE_B_DELETE)
        return it->id;
    return it->draft ? it->draft->id : NULL;
}

static void bitem_reset(store_batch_item_t *it, bitem_t *b)
{
    if (b->old)
        entity_unref(b->old);
    if (b->e)
        entity_unref(b->e);
    b->old = b->e = NULL;
    if (it->res) {
        it->res->n             = b->n0;
        it->res->n_updated     = b->upd0;
        it->res->n_not_updated = b->not0;
    }
}

static void bitem_fail(store_batch_item_t *it, bitem_t *b, arena_t *scratch, const problem_t *p)
{
    bitem_reset(it, b);
    b->pending  = false;
    b->act      = BA_FAIL;
    it->problem = batch_problem(scratch, p);
}

/* The change an item's write makes (purge: a purge's deletes). */
static store_op_t bitem_op(const store_batch_item_t *it, const bitem_t *b, bool purge)
{
    if (b->act == BA_DELETE)
        return purge ? STORE_OP_PURGE : STORE_OP_DELETE;
    if (b->act == BA_INSERT)
        return STORE_OP_CREATE;
    return store_op_of(it->kind == STORE_B_UPSERT ? OP_UPDATE_ATTRS
                       : it->kind == STORE_B_UPSERT_REPLACE ? OP_REPLACE_ENTITY
                       : it->kind == STORE_B_UPDATE ? OP_APPEND_ATTRS : OP_MERGE_ENTITY);
}

/* wmu held: the write of one item on the version read (b->old, NULL: none).
 * purge (mgc_purge): a delete only of a version that matches it (else the
 * item is answered not found: it is not purged). */
static void bitem_plan(wctx_t *w, store_batch_item_t *it, bitem_t *b, arena_t *scratch,
                       const entity_filter_t *purge)
{
    problem_t    ip = { 0 };
    entity_op_t  op;
    cr_entity_t *draft;
    bool         upsert = it->kind == STORE_B_UPSERT || it->kind == STORE_B_UPSERT_REPLACE;

    if (it->res) {
        b->n0   = it->res->n;
        b->upd0 = it->res->n_updated;
        b->not0 = it->res->n_not_updated;
    }
    if (it->kind == STORE_B_CREATE || (upsert && !b->old)) {
        if (b->old) {
            problem_set(&ip, PB_ALREADY_EXISTS, "entity '%.400s' already exists", b->id);
            goto fail;
        }
        if (!(b->e = entity_freeze(it->draft))) {
            problem_set(&ip, PB_INTERNAL_ERROR, "entity '%.400s' too large", b->id);
            goto fail;
        }
        b->at = mgc_clock(w->t, 0);
        w->t->last_at = b->at;              /* the next item's stamp comes after it */
        stamp_new(b->e, b->at);
        b->next = (mgc_ver_t){ 1, (int64_t)mgc_token(w->db) };
        b->act  = BA_INSERT;
        return;
    }
    if (!b->old || (purge && !filter_match(purge, b->old))) {
        not_found(&ip, b->id);
        goto fail;
    }
    b->at = mgc_clock(w->t, it->kind == STORE_B_DELETE ? 0 : b->old->modified_at);
    w->t->last_at = b->at;
    if (it->kind == STORE_B_DELETE) {
        b->act = BA_DELETE;
        return;
    }
    switch (it->kind) {
    case STORE_B_UPSERT:         op = OP_UPDATE_ATTRS; break;   /* 6.15.3.1: as 5.6.2 */
    case STORE_B_UPSERT_REPLACE: op = OP_REPLACE_ENTITY; break;
    case STORE_B_UPDATE:         op = OP_APPEND_ATTRS; break;
    case STORE_B_MERGE:          op = OP_MERGE_ENTITY; break;
    default:
        problem_set(&ip, PB_INTERNAL_ERROR, "MongoDB: unknown batch operation %d", (int)it->kind);
        goto fail;
    }
    draft = entity_apply(scratch, b->old, it->draft, op, upsert ? NULL : &it->args, b->at,
                         upsert ? NULL : it->res, &ip);
    if (!draft)
        goto fail;
    if (!upsert && it->res && it->res->n_updated == b->upd0 && it->res->n_not_updated > b->not0) {
        entity_unref(b->old);               /* every attribute notUpdated: no change */
        b->old     = NULL;
        b->act     = BA_NONE;
        b->pending = false;
        it->ok     = true;
        return;
    }
    if (!draft->id || strcmp(draft->id, b->old->id) != 0 || !draft->n_types) {
        problem_set(&ip, PB_INTERNAL_ERROR, "MongoDB: an update of '%.400s' changed its id or removed "
                    "its types", b->id);
        goto fail;
    }
    if (!(b->e = entity_freeze(draft))) {
        problem_set(&ip, PB_INTERNAL_ERROR, "entity '%.400s' too large", b->id);
        goto fail;
    }
    b->next = (mgc_ver_t){ b->ver.v + 1, (int64_t)mgc_token(w->db) };
    b->act  = BA_REPLACE;
    return;
fail:
    bitem_fail(it, b, scratch, &ip);
}

/* wmu held, claims: the claims of the round's replaces and deletes in one
 * bulk insert; an item whose claim is taken tries claim() (a dead writer's
 * is taken over) and else goes to the next round. false: unknown (down). */
static bool bulk_claims(wctx_t *w, store_batch_item_t *items, bitem_t *b, const size_t *rd, size_t m,
                        arena_t *scratch, problem_t *down)
{
    mongoc_collection_t     *col   = claims_coll(w);
    bson_t                  *bopts = BCON_NEW("ordered", BCON_BOOL(false));
    mongoc_bulk_operation_t *bulk  = mongoc_collection_create_bulk_operation_with_opts(col, bopts);
    size_t                  *of    = arena_alloc(scratch, (m ? m : 1) * sizeof(*of));
    problem_t              **err   = arena_calloc(scratch, (m ? m : 1) * sizeof(*err));
    size_t                   q = 0;
    bson_t                   reply;
    bson_error_t             berr;
    bool                     ok = true;
    int64_t                  now = cr_now_us();

    for (size_t j = 0; j < m; j++) {
        bitem_t *x = &b[rd[j]];
        bson_t  *doc;

        if (x->act != BA_REPLACE && x->act != BA_DELETE)
            continue;
        doc = BCON_NEW("_id", BCON_INT64(x->ver.w), "at", BCON_INT64(now));
        if (mongoc_bulk_operation_insert_with_opts(bulk, doc, NULL, &berr))
            of[q++] = rd[j];
        bson_destroy(doc);
    }
    if (q && !mongoc_bulk_operation_execute(bulk, &reply, &berr)) {
        if (bulk_unknown(&reply, &berr, "claiming versions", down))
            ok = false;
        else
            bulk_errors(&reply, scratch, err, q);
    }
    if (q)
        bson_destroy(&reply);
    for (size_t j = 0; j < q && ok; j++) {
        bitem_t *x = &b[of[j]];
        bool     won = !err[j];
        problem_t ip = { 0 };

        if (err[j] && err[j]->kind != PB_ALREADY_EXISTS) {
            bitem_fail(&items[of[j]], x, scratch, err[j]);
            continue;
        }
        if (!won && !claim(w, x->ver.w, &won, &ip)) {
            if (is_503(&ip)) {
                *down = ip;
                ok    = false;
                break;
            }
            bitem_fail(&items[of[j]], x, scratch, &ip);
            continue;
        }
        x->claimed = won;
        if (!won) {
            bitem_reset(&items[of[j]], x);
            x->act = BA_RETRY;
        }
    }
    mongoc_bulk_operation_destroy(bulk);
    bson_destroy(bopts);
    mongoc_collection_destroy(col);
    return ok;
}

/* After a bulk write whose counts fell short: which of the conditional
 * writes of kind act matched (see the top). short_by: how many did not. */
static bool bulk_verify(wctx_t *w, bitem_t *b, const size_t *rd, size_t m, int act, int64_t short_by,
                        arena_t *scratch, problem_t *p)
{
    const char  **ids = arena_alloc(scratch, (m ? m : 1) * sizeof(*ids));
    size_t       *of  = arena_alloc(scratch, (m ? m : 1) * sizeof(*of));
    size_t        q = 0, n_amb = 0;
    cr_entity_t **cur;
    mgc_ver_t    *cv;

    for (size_t j = 0; j < m; j++)
        if (b[rd[j]].act == act && b[rd[j]].op >= 0 && !b[rd[j]].err) {
            of[q]    = rd[j];
            ids[q++] = b[rd[j]].id;
        }
    cur = arena_calloc(scratch, (q ? q : 1) * sizeof(*cur));
    cv  = arena_calloc(scratch, (q ? q : 1) * sizeof(*cv));
    if (!mgc_read_many(w->db, w->c, w->t, ids, q, cur, cv, scratch, p))
        return false;
    for (size_t j = 0; j < q; j++) {
        bitem_t *x    = &b[of[j]];
        bool     same = cur[j] && cur[j]->created_at == x->old->created_at && cv[j].v >= x->ver.v;

        x->matched = x->unknown = false;
        if (act == BA_REPLACE && cur[j] && cv[j].w == x->next.w)
            x->matched = true;
        else if (same && (act == BA_DELETE || cv[j].v <= x->ver.v + 1))
            short_by--;                     /* did not match: the next round */
        else {
            x->unknown = true;
            n_amb++;
        }
        if (cur[j])
            entity_unref(cur[j]);
    }
    /* the ones left open: all matched, none did, or not known */
    for (size_t j = 0; j < q; j++) {
        bitem_t *x = &b[of[j]];

        if (!x->unknown)
            continue;
        if (short_by <= 0) {
            x->matched = true;
            x->unknown = false;
        } else if ((size_t)short_by >= n_amb) {
            x->unknown = false;
        }
    }
    return true;
}

/* The first round of an item starts from its cached version, unread, as
 * modify_locked's first attempt does: its replace or delete is conditional
 * on the cached token, so a stale one matches nothing (the counts fall
 * short, bulk_verify tells which) and the next round reads it. A create
 * reads (the cache cannot say an id is free). Sets b->cached; false: read it. */
static bool bulk_from_cache(wctx_t *w, const store_batch_item_t *it, bitem_t *x)
{
    x->cached = false;
    if (x->cache_tried || it->kind == STORE_B_CREATE)
        return false;
    x->cache_tried = true;
    x->old    = mgc_cache_peek(w->db->cache, w->t, x->id, &x->ver);
    x->cached = x->old != NULL;
    return x->cached;
}

/* After bitem_plan on a cached version: an answer other than a replace or
 * a delete (an error, no change) is decided on the version read from the
 * server, in the next round. */
static void bulk_cache_answer(store_batch_item_t *it, bitem_t *x)
{
    if (!x->cached || x->act == BA_REPLACE || x->act == BA_DELETE)
        return;
    it->problem = NULL;
    it->ok      = false;
    bitem_reset(it, x);
    x->pending = true;
    x->act     = BA_RETRY;
}

/* wmu held: one round over the chosen items rd[0..m) (distinct ids).
 * false: the database failed (down): the caller answers the rest 503. */
static bool bulk_round(wctx_t *w, store_batch_item_t *items, bitem_t *b, const size_t *rd, size_t m,
                       arena_t *scratch, store_change_t *group, size_t *k, problem_t *down,
                       const entity_filter_t *purge)
{
    const char             **ids  = arena_alloc(scratch, (m ? m : 1) * sizeof(*ids));
    cr_entity_t            **olds = arena_calloc(scratch, (m ? m : 1) * sizeof(*olds));
    mgc_ver_t               *vers = arena_calloc(scratch, (m ? m : 1) * sizeof(*vers));
    bson_t                  *bopts;
    mongoc_bulk_operation_t *bulk;
    bson_t                   reply;
    bson_error_t             berr;
    size_t                  *rj   = arena_alloc(scratch, (m ? m : 1) * sizeof(*rj));
    size_t                   nr = 0, n_obr = 0, n_gone = 0;
    mgc_obx_req_t           *obr  = arena_alloc(scratch, (m ? m : 1) * sizeof(*obr));
    mgc_obx_t              **gone = arena_alloc(scratch, (m ? m : 1) * sizeof(*gone));
    int32_t                  q = 0;
    int64_t                  n_rep = 0, n_del = 0, matched = 0, removed = 0;
    bool                     ok = true, executed = false;

    for (size_t j = 0; j < m; j++)
        if (!bulk_from_cache(w, &items[rd[j]], &b[rd[j]])) {
            ids[nr]  = b[rd[j]].id;
            rj[nr++] = j;
        }
    if (nr && !mgc_read_many(w->db, w->c, w->t, ids, nr, olds, vers, scratch, down)) {
        for (size_t j = 0; j < m; j++)
            if (b[rd[j]].cached)
                bitem_reset(&items[rd[j]], &b[rd[j]]);
        return false;
    }
    for (size_t r = 0; r < nr; r++) {
        b[rd[rj[r]]].old = olds[r];
        b[rd[rj[r]]].ver = vers[r];
    }
    for (size_t j = 0; j < m; j++) {
        bitem_t *x = &b[rd[j]];

        x->op  = -1;
        x->err = NULL;
        x->claimed = x->matched = x->unknown = false;
        x->ob  = (mgc_obx_t){ 0 };
        bitem_plan(w, &items[rd[j]], x, scratch, purge);
        bulk_cache_answer(&items[rd[j]], x);
    }
    ok    = !w->db->claims || bulk_claims(w, items, b, rd, m, scratch, down);
    bopts = BCON_NEW("ordered", BCON_BOOL(false));
    bulk  = mongoc_collection_create_bulk_operation_with_opts(w->col, bopts);
    for (size_t j = 0; j < m && ok; j++) {
        bitem_t *x = &b[rd[j]];
        bson_t   doc, *sel;
        bool     queued;

        if (x->act != BA_INSERT && x->act != BA_REPLACE && x->act != BA_DELETE)
            continue;
        if (x->act == BA_DELETE) {
            sel    = BCON_NEW("_id", BCON_UTF8(x->id), "w", BCON_INT64(x->ver.w));
            queued = mongoc_bulk_operation_remove_one_with_opts(bulk, sel, NULL, &berr);
            bson_destroy(sel);
            n_del += queued;
        } else {
            mgc_geo_index(w->db, w->c, w->t, x->e);
            mgc_doc_entity(&doc, x->e, x->next.v, (uint64_t)x->next.w, w->db->geo2d);
            if (x->act == BA_INSERT) {
                queued = mongoc_bulk_operation_insert_with_opts(bulk, &doc, w->db->wopts, &berr);
            } else {
                sel    = BCON_NEW("_id", BCON_UTF8(x->id), "w", BCON_INT64(x->ver.w));
                queued = mongoc_bulk_operation_replace_one_with_opts(bulk, sel, &doc, NULL, &berr);
                bson_destroy(sel);
                n_rep += queued;
            }
            bson_destroy(&doc);
        }
        if (queued) {
            x->op = q++;
        } else {
            problem_t ip = { 0 };

            problem_set(&ip, PB_INTERNAL_ERROR, "MongoDB: a batch write: %.300s", berr.message);
            if (x->claimed)
                unclaim(w, x->ver.w);
            bitem_fail(&items[rd[j]], x, scratch, &ip);
        }
    }
    /* the outbox entries of the writes queued, in one insertMany before them */
    for (size_t j = 0; j < m && ok; j++) {
        bitem_t *x = &b[rd[j]];

        if (x->op < 0 || !mgc_outbox_wants(w->db, w->t, x->act == BA_DELETE ? x->old : x->e))
            continue;
        x->ob = (mgc_obx_t){ bitem_op(&items[rd[j]], x, purge != NULL), x->at,
                             x->act == BA_INSERT ? NULL : x->old, 0 };
        obr[n_obr++] = (mgc_obx_req_t){ &x->ob, x->act == BA_DELETE ? NULL : x->e,
                                        x->act == BA_INSERT ? (mgc_ver_t){ 0, 0 } : x->ver,
                                        x->act == BA_DELETE ? (mgc_ver_t){ 0, 0 } : x->next };
    }
    if (ok && n_obr && !mgc_outbox_put_many(w->db, w->c, w->t, obr, n_obr, down))
        ok = false;                         /* the entries are orphans now; no write goes */
    if (ok && q) {
        problem_t **oerr = arena_calloc(scratch, (size_t)q * sizeof(*oerr));

        executed = true;
        if (!mongoc_bulk_operation_execute(bulk, &reply, &berr)) {
            if (bulk_unknown(&reply, &berr, "batch write", down))
                ok = false;
            else
                bulk_errors(&reply, scratch, oerr, (size_t)q);
        }
        matched = reply_count(&reply, "nMatched");
        removed = reply_count(&reply, "nRemoved");
        for (size_t j = 0; j < m; j++)
            if (b[rd[j]].op >= 0) {
                b[rd[j]].err = oerr[b[rd[j]].op];
                if (b[rd[j]].err) {
                    if (b[rd[j]].act == BA_REPLACE)
                        n_rep--;
                    else if (b[rd[j]].act == BA_DELETE)
                        n_del--;
                }
            }
    }
    if (ok) {
        /* which conditional writes matched: all of a kind when the counts say so */
        for (size_t j = 0; j < m; j++) {
            bitem_t *x = &b[rd[j]];

            if (x->op >= 0 && !x->err)
                x->matched = x->act == BA_INSERT || (x->act == BA_REPLACE && matched >= n_rep) ||
                             (x->act == BA_DELETE && removed >= n_del);
        }
        if (matched < n_rep && !bulk_verify(w, b, rd, m, BA_REPLACE, n_rep - matched, scratch, down))
            ok = false;
        if (ok && removed < n_del && !bulk_verify(w, b, rd, m, BA_DELETE, n_del - removed, scratch, down))
            ok = false;
    }
    for (size_t j = 0; j < m && ok; j++) {
        store_batch_item_t *it = &items[rd[j]];
        bitem_t            *x  = &b[rd[j]];

        if (x->act == BA_RETRY) {
            x->act = BA_NONE;
            continue;                       /* pending: the next round */
        }
        if (x->op < 0)
            continue;                       /* answered already */
        if (x->err) {
            if (x->ob.id)
                gone[n_gone++] = &x->ob;    /* refused: not committed */
            if (x->act == BA_INSERT && x->err->kind == PB_ALREADY_EXISTS && it->kind != STORE_B_CREATE) {
                bitem_reset(it, x);         /* an upsert's id created meanwhile: update it */
                continue;
            }
            if (x->err->kind == PB_ALREADY_EXISTS)
                problem_set(x->err, PB_ALREADY_EXISTS, "entity '%.400s' already exists", x->id);
            if (x->claimed)
                unclaim(w, x->ver.w);
            mgc_cache_drop(w->db->cache, w->t, x->id);
            bitem_fail(it, x, scratch, x->err);
            continue;
        }
        if (x->claimed)
            claims_left(w);
        if (x->unknown) {
            mgc_outbox_abandon(w->db, w->c, w->t, &x->ob, false);
            mgc_cache_drop(w->db->cache, w->t, x->id);
            problem_set(down, PB_HTTP, "entity '%.400s': another process wrote it while this batch did; "
                        "whether this item was applied is not known; retry later", x->id);
            down->status = 503;
            bitem_fail(it, x, scratch, down);
            *down = (problem_t){ 0 };
            continue;
        }
        if (!x->matched) {
            if (x->ob.id)
                gone[n_gone++] = &x->ob;
            mgc_cache_drop(w->db->cache, w->t, x->id);
            bitem_reset(it, x);             /* another process wrote first: again */
            continue;
        }
        if (x->act == BA_DELETE)
            mgc_cache_drop(w->db->cache, w->t, x->id);
        else
            mgc_cache_put(w->db->cache, w->t, x->e, x->next);
        commit(w->t, &group[*k], bitem_op(it, x, purge != NULL), x->at, x->old,
               x->act == BA_DELETE ? NULL : x->e);
        group[(*k)++].outbox = (uint64_t)x->ob.id;
        x->ob.id = 0;
        x->old = x->e = NULL;
        x->pending = false;
        it->ok      = true;
        it->created = x->act == BA_INSERT;
    }
    mgc_outbox_abandon_many(w->db, w->c, w->t, gone, n_gone);
    if (!ok)
        for (size_t j = 0; j < m; j++)
            if (b[rd[j]].pending) {
                mgc_outbox_abandon(w->db, w->c, w->t, &b[rd[j]].ob, false);   /* outcome not known */
                if (b[rd[j]].claimed)
                    unclaim(w, b[rd[j]].ver.w);
                mgc_cache_drop(w->db->cache, w->t, b[rd[j]].id);
                bitem_reset(&items[rd[j]], &b[rd[j]]);
            }
    if (executed)
        bson_destroy(&reply);
    mongoc_bulk_operation_destroy(bulk);
    bson_destroy(bopts);
    return ok;
}

/* wmu held: the batch in rounds (see above). */
static void batch_bulk(wctx_t *w, store_batch_item_t *items, size_t n, arena_t *scratch,
                       store_change_t *group, size_t *k, const entity_filter_t *purge)
{
    bitem_t     *b   = arena_calloc(scratch, n * sizeof(*b));
    const char **ids = arena_alloc(scratch, n * sizeof(*ids));
    size_t      *pi  = arena_alloc(scratch, n * sizeof(*pi));
    size_t      *rd  = arena_alloc(scratch, n * sizeof(*rd));
    problem_t    down = { 0 };

    for (size_t i = 0; i < n; i++) {
        store_batch_item_t *it = &items[i];
        problem_t           ip = { 0 };

        it->ok = it->created = false;
        it->problem = NULL;
        b[i].id     = bitem_id(it);
        b[i].op     = -1;
        if (it->kind == STORE_B_DELETE) {
            if (!b[i].id)
                not_found(&ip, "");
        } else if (it->kind == STORE_B_UPDATE || it->kind == STORE_B_MERGE) {
            if (!b[i].id)
                problem_set(&ip, PB_BAD_REQUEST_DATA, "an entity needs an id");
        } else {
            check_draft(it->draft, &ip);
        }
        if (ip.kind != PB_NONE)
            it->problem = batch_problem(scratch, &ip);
        else
            b[i].pending = true;
    }
    for (int round = 0; round < MGC_RETRIES; round++) {
        size_t      np = 0, m = 0;
        mgc_idmap_t map;

        for (size_t i = 0; i < n; i++)
            if (b[i].pending) {
                ids[np]  = b[i].id;
                pi[np++] = i;
            }
        if (!np)
            return;
        /* the first pending item of each id */
        mgc_idmap_init(&map, ids, np, scratch);
        for (size_t j = 0; j < np; j++)
            if (mgc_idmap_find(&map, ids[j]) == (int32_t)j)
                rd[m++] = pi[j];
        if (!bulk_round(w, items, b, rd, m, scratch, group, k, &down, purge))
            break;
    }
    if (down.kind == PB_NONE) {
        problem_set(&down, PB_HTTP, "entities were changed by other writers %d times while this batch "
                    "retried; retry later", MGC_RETRIES);
        down.status = 503;
    }
    for (size_t i = 0; i < n; i++)
        if (b[i].pending) {
            bitem_reset(&items[i], &b[i]);
            items[i].problem = batch_problem(scratch, &down);
            b[i].pending = false;
        }
}

/* The items under the tenant's write mutex, so that the committed ones are
 * one group of consecutive seqs: creates only as one bulk insert, any other
 * batch of several in bulk rounds (batch_bulk), one item as the one-entity
 * writes do (the cached version spares it the read). When the database goes
 * away in the middle, the items not written are answered 503 (the ones
 * before are written and reported so: 6.14 - 6.18 answer per entity). */
bool mgc_batch(mgc_t *db, const char *tenant, store_batch_item_t *items, size_t n, arena_t *scratch,
               store_change_t *group, size_t *n_group, problem_t *p)
{
    mgc_tenant_t *t;
    wctx_t        w;
    bool          creates = false;
    size_t        k = 0;

    *n_group = 0;
    for (size_t i = 0; i < n; i++)
        creates = creates || items[i].kind == STORE_B_CREATE || items[i].kind == STORE_B_UPSERT ||
                  items[i].kind == STORE_B_UPSERT_REPLACE;
    t = creates ? mgc_tenant_open(db, tenant, p) : mgc_tenant_get(db, tenant, p);
    if (!t)
        return false;
    wctx_open(&w, db, t);
    pthread_mutex_lock(&t->wmu);
    bool all_creates = n > 1;

    for (size_t i = 0; i < n && all_creates; i++)
        all_creates = items[i].kind == STORE_B_CREATE;
    if (all_creates) {
        batch_create_bulk(&w, items, n, scratch, group, &k);
        n = 0;                          /* done: the loop below has nothing left */
    } else if (n > 1) {
        batch_bulk(&w, items, n, scratch, group, &k, NULL);
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        store_batch_item_t *it = &items[i];
        store_change_t     *ch = &group[k];
        problem_t           ip = { 0 };
        cr_entity_t        *e;
        bool                dup;

        it->ok = it->created = false;
        it->problem = NULL;
        change_none(ch);
        switch (it->kind) {
        case STORE_B_CREATE:
            if (!check_draft(it->draft, &ip))
                break;
            if (!(e = entity_freeze(it->draft))) {
                problem_set(&ip, PB_INTERNAL_ERROR, "entity '%.400s' too large", it->draft->id);
                break;
            }
            if (!(it->ok = it->created = insert_locked(&w, e, &dup, ch, true, &ip)))
                entity_unref(e);
            break;
        case STORE_B_UPSERT:
        case STORE_B_UPSERT_REPLACE:
            if (check_draft(it->draft, &ip))
                it->ok = upsert_locked(&w, it->draft, it->kind == STORE_B_UPSERT_REPLACE,
                                       &it->created, scratch, ch, &ip);
            break;
        case STORE_B_UPDATE:
        case STORE_B_MERGE:
            if (!it->draft || !it->draft->id) {
                problem_set(&ip, PB_BAD_REQUEST_DATA, "an entity needs an id");
                break;
            }
            it->ok = modify_locked(&w, it->draft->id, it->kind == STORE_B_UPDATE ? OP_APPEND_ATTRS
                                                                                : OP_MERGE_ENTITY,
                                   it->draft, &it->args, it->res, scratch, ch, NULL, &ip);
            break;
        case STORE_B_DELETE:
            if (!it->id)
                not_found(&ip, "");
            else
                it->ok = remove_locked(&w, it->id, NULL, STORE_OP_DELETE, ch, &ip);
            break;
        default:
            problem_set(&ip, PB_INTERNAL_ERROR, "MongoDB: unknown batch operation %d", (int)it->kind);
        }
        if (!it->ok)
            it->problem = batch_problem(scratch, &ip);
        if (it->ok && ch->seq)
            k++;
        if (!it->ok && is_503(&ip)) {
            for (size_t j = i + 1; j < n; j++) {
                items[j].ok = items[j].created = false;
                items[j].problem = batch_problem(scratch, &ip);
            }
            break;
        }
    }
    pthread_mutex_unlock(&t->wmu);
    wctx_close(&w);
    *n_group = k;
    return true;
}

/* ------------------------------------------------------------ purge */

typedef struct purge_list {
    cr_entity_t **v;
    size_t        n, cap;
} purge_list_t;

static void purge_collect(void *ud, const cr_entity_t *e)
{
    purge_list_t *l = ud;

    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v   = cr_xreallocarray(l->v, l->cap, sizeof(*l->v));
    }
    entity_ref((cr_entity_t *)e);
    l->v[l->n++] = (cr_entity_t *)e;
}

static void drop_group(store_change_t *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (g[i].before)
            entity_unref(g[i].before);
}

/* The matches first (a read of the filter), then their deletes in chunks of
 * STORE_PURGE_CHUNK, each chunk as a batch of deletes in bulk rounds
 * (batch_bulk: one find of the chunk's versions, one insertMany of their
 * outbox entries, one bulk delete; not two round trips per entity), each
 * entity deleted only if the version read still matches f (an entity gone
 * or changed so that it no longer matches is not purged). */
bool mgc_purge(mgc_t *db, const char *tenant, const entity_filter_t *f, size_t *deleted,
               void (*emit)(void *ud, store_change_t *group, size_t n), void *ud, problem_t *p)
{
    static const entity_filter_t all = { .limit = SIZE_MAX };
    purge_list_t        l = { 0 };
    mgc_tenant_t       *t;
    wctx_t              w;
    store_change_t      g[STORE_PURGE_CHUNK];
    store_batch_item_t *items;
    arena_t            *a;
    bool                ok = true;

    *deleted = 0;
    if (!(t = mgc_tenant_get(db, tenant, p)))
        return false;
    if (!mgc_foreach(db, tenant, f ? f : &all, purge_collect, &l, p))
        return false;
    items = cr_xreallocarray(NULL, STORE_PURGE_CHUNK, sizeof(*items));
    a     = arena_new(64 * 1024);
    wctx_open(&w, db, t);
    for (size_t i = 0; i < l.n && ok;) {
        size_t m = 0, k = 0;

        for (; i < l.n && m < STORE_PURGE_CHUNK; i++)
            items[m++] = (store_batch_item_t){ .kind = STORE_B_DELETE, .id = l.v[i]->id };
        pthread_mutex_lock(&t->wmu);
        batch_bulk(&w, items, m, a, g, &k, f ? f : &all);
        pthread_mutex_unlock(&t->wmu);
        for (size_t j = 0; j < m && ok; j++)
            if (!items[j].ok && items[j].problem && items[j].problem->kind != PB_RESOURCE_NOT_FOUND) {
                if (p)
                    *p = *items[j].problem;
                ok = false;
            }
        if (k) {
            emit(ud, g, k);
            drop_group(g, k);
            *deleted += k;
        }
        arena_reset(a);
    }
    wctx_close(&w);
    arena_free(a);
    free(items);
    for (size_t i = 0; i < l.n; i++)
        entity_unref(l.v[i]);
    free(l.v);
    return ok;
}
