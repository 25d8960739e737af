/*
 * outbox.c - no due notification lost when a coraine process on a shared
 * MongoDB dies (doc/mongodb.md "Delivery across processes").
 *
 * A change is notified by the process that committed it, from memory. So
 * that a process killed between its commit and the delivery loses nothing,
 * a write whose entity the notifier says may be due (store_set_outbox's
 * `due`: a subscription of the tenant selects its id or a type, or selects
 * by pattern) first inserts an outbox entry into the tenant's collection
 * "outbox", then writes the entity:
 *
 *   {_id: entry id (a write token), i: entity id, p: store_op, at: commit µs,
 *    c: the entity's createdAt (which life of the id),
 *    pv, pw: the version replaced (0: none), v, w: the version written
 *    (0: a delete), b, a: the versions before and after (the codec, BinData),
 *    o: the owner (this process's id), u: the lease (µs; renewed)}
 *
 * A batch (and a purge chunk: write.c's bulk rounds) writes the entries of
 * a round in one insertMany before the round's bulk write
 * (mgc_outbox_put_many), and removes those of the items that did not
 * commit in one delete (mgc_outbox_abandon_many).
 *
 * MongoDB has no transaction here, so the order decides what a crash can
 * leave: an entry whose change was never committed (the process died
 * between the two, or the write did not match), never a committed change
 * without its entry. The notifier reports each change's end
 * (mgc_outbox_done: every notification delivered, or dropped by the
 * subscription's rules); the entries of ended changes are deleted in one
 * delete per tenant at the next sweep. The sweep (every --syncInterval, on
 * objsync's thread) also renews the leases of this process's entries (one
 * update per tenant with entries open) and takes over the entries whose
 * lease expired (a dead process's): a conditional update makes it the
 * owner, the entity's document tells whether the change was committed
 * (outbox_committed), and a committed one is replayed to the notifier
 * alone through the tenant's stream, then ended as any other.
 *
 * What it gives: each change once where nothing dies (the entry only
 * outlives the notification by a sweep), at least once across a crash (a
 * notification delivered just before its process died is delivered again),
 * never a notification for a change that did not commit, but in the corner
 * cases of outbox_committed. On FerretDB the takeover's update is not
 * atomic: two processes may both take an entry (delivered twice).
 */
#include <stdatomic.h>
#include <string.h>

#include "../../model/codec.h"
#include "mgc.h"

#define OB_TAKE_MAX 64                  /* entries taken over per tenant per sweep */

typedef struct ob_done {
    mgc_tenant_t *t;
    int64_t       id;
} ob_done_t;

struct mgc_outbox {
    bool          (*due)(void *ud, const char *tenant, const cr_entity_t *e);
    void           *ud;
    int64_t         owner;
    pthread_mutex_t mu;                 /* done[] and orphans[] */
    ob_done_t      *done, *orphans;
    size_t          n_done, cap_done, n_orphans, cap_orphans;
};

/* 4 sweeps, at least 3 s: a live process whose sweep a slow database
 * delays keeps its entries (a takeover of a live one's is a duplicate). */
static int64_t lease_us(void)
{
    int64_t ms = cr_config.sync_interval_ms > 0 ? cr_config.sync_interval_ms : 1000;

    return (ms * 4 < 3000 ? 3000 : ms * 4) * 1000;
}

void mgc_outbox_set(void *vdb, bool (*due)(void *ud, const char *tenant, const cr_entity_t *e), void *ud)
{
    mgc_t        *db = vdb;
    mgc_outbox_t *ob;

    if (!cr_config.notify_outbox || db->outbox)
        return;
    ob        = cr_xcalloc(1, sizeof(*ob));
    ob->due   = due;
    ob->ud    = ud;
    ob->owner = (int64_t)mgc_token(db);
    if (pthread_mutex_init(&ob->mu, NULL) != 0) {
        LOG_E("mongoc: cannot create the outbox's mutex; aborting");
        abort();
    }
    db->outbox = ob;
    LOG_I("mongoc: notification outbox on (lease %lld ms)", (long long)(lease_us() / 1000));
}

void mgc_outbox_free(mgc_t *db)
{
    mgc_outbox_t *ob = db->outbox;

    if (!ob)
        return;
    pthread_mutex_destroy(&ob->mu);
    free(ob->done);
    free(ob->orphans);
    free(ob);
    db->outbox = NULL;
}

bool mgc_outbox_wants(mgc_t *db, const mgc_tenant_t *t, const cr_entity_t *e)
{
    return db->outbox && e && db->outbox->due(db->outbox->ud, t->name, e);
}

static void append_version(bson_t *doc, const char *key, const cr_entity_t *e)
{
    sbuf_t sb;

    if (!e)
        return;
    sb_init(&sb, NULL, 256);
    entity_encode(&sb, e);
    BSON_APPEND_BINARY(doc, key, BSON_SUBTYPE_BINARY, (const uint8_t *)sb.p, (uint32_t)sb.len);
    sb_release(&sb);
}

/* The entry of x's change (the fields at the top) into the empty doc; x->id its new id. */
static void entry_doc(mgc_t *db, bson_t *doc, mgc_obx_t *x, const cr_entity_t *after, mgc_ver_t prev,
                      mgc_ver_t next, int64_t lease)
{
    const cr_entity_t *e = after ? after : x->before;

    x->id = (int64_t)mgc_token(db);
    BSON_APPEND_INT64(doc, "_id", x->id);
    BSON_APPEND_UTF8(doc, "i", e->id);
    BSON_APPEND_INT32(doc, "p", (int32_t)x->op);
    BSON_APPEND_INT64(doc, "at", x->at);
    BSON_APPEND_INT64(doc, "c", e->created_at);
    BSON_APPEND_INT64(doc, "pv", prev.v);
    BSON_APPEND_INT64(doc, "pw", prev.w);
    BSON_APPEND_INT64(doc, "v", next.v);
    BSON_APPEND_INT64(doc, "w", next.w);
    append_version(doc, "b", x->before);
    append_version(doc, "a", after);
    BSON_APPEND_INT64(doc, "o", db->outbox->owner);
    BSON_APPEND_INT64(doc, "u", lease);
}

bool mgc_outbox_put(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, mgc_obx_t *x, const cr_entity_t *after,
                    mgc_ver_t prev, mgc_ver_t next, problem_t *p)
{
    mongoc_collection_t *col = mongoc_client_get_collection(c, t->dbname, "outbox");
    bson_t               doc = BSON_INITIALIZER;
    bson_error_t         err;
    bool                 ok;

    entry_doc(db, &doc, x, after, prev, next, cr_now_us() + lease_us());
    ok = mongoc_collection_insert_one(col, &doc, db->wopts, NULL, &err);
    bson_destroy(&doc);
    mongoc_collection_destroy(col);
    if (!ok) {
        x->id = 0;
        return mgc_fail(p, "writing the notification outbox", &err);
    }
    atomic_fetch_add(&t->ob_open, 1);
    return true;
}

/* The entries of a batch in ONE insertMany (unordered: one round trip
 * whatever their number). When it fails, some entries may be written: all
 * become orphans (the next sweep asks their entities, which were not
 * written: dropped), and no change of the batch may be written. */
bool mgc_outbox_put_many(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, mgc_obx_req_t *r, size_t n,
                         problem_t *p)
{
    mongoc_collection_t *col;
    bson_t             **docs;
    bson_t              *opts;
    bson_error_t         err;
    int64_t              lease = cr_now_us() + lease_us();
    bool                 ok;

    if (!n)
        return true;
    if (n == 1)
        return mgc_outbox_put(db, c, t, r[0].x, r[0].after, r[0].prev, r[0].next, p);
    col  = mongoc_client_get_collection(c, t->dbname, "outbox");
    docs = cr_xreallocarray(NULL, n, sizeof(*docs));
    opts = BCON_NEW("ordered", BCON_BOOL(false), "validate", BCON_BOOL(false));
    for (size_t i = 0; i < n; i++) {
        docs[i] = bson_new();
        entry_doc(db, docs[i], r[i].x, r[i].after, r[i].prev, r[i].next, lease);
    }
    ok = mongoc_collection_insert_many(col, (const bson_t **)docs, n, opts, NULL, &err);
    for (size_t i = 0; i < n; i++)
        bson_destroy(docs[i]);
    free(docs);
    bson_destroy(opts);
    mongoc_collection_destroy(col);
    atomic_fetch_add(&t->ob_open, (int64_t)n);
    if (!ok) {
        for (size_t i = 0; i < n; i++)
            mgc_outbox_abandon(db, c, t, r[i].x, false);
        return mgc_fail(p, "writing the notification outbox", &err);
    }
    return true;
}

static void list_add(mgc_outbox_t *ob, ob_done_t **v, size_t *n, size_t *cap, mgc_tenant_t *t, int64_t id)
{
    pthread_mutex_lock(&ob->mu);
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *v   = cr_xreallocarray(*v, *cap, sizeof(**v));
    }
    (*v)[(*n)++] = (ob_done_t){ t, id };
    pthread_mutex_unlock(&ob->mu);
}

void mgc_outbox_abandon(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, mgc_obx_t *x, bool known)
{
    if (!x || !x->id)
        return;
    if (known) {
        /* not committed (another writer was first): the entry goes now, or with the ended ones */
        mongoc_collection_t *col = mongoc_client_get_collection(c, t->dbname, "outbox");
        bson_t              *q   = BCON_NEW("_id", BCON_INT64(x->id));
        bson_error_t         err;
        bool                 ok = mongoc_collection_delete_one(col, q, NULL, NULL, &err);

        bson_destroy(q);
        mongoc_collection_destroy(col);
        atomic_fetch_sub(&t->ob_open, 1);
        if (!ok)
            list_add(db->outbox, &db->outbox->done, &db->outbox->n_done, &db->outbox->cap_done, t, x->id);
    } else {
        /* the write's outcome is not known: the next sweep asks the entity
         * (and counts it open again if it replays it) */
        atomic_fetch_sub(&t->ob_open, 1);
        list_add(db->outbox, &db->outbox->orphans, &db->outbox->n_orphans, &db->outbox->cap_orphans, t,
                 x->id);
    }
    x->id = 0;
}

/* A batch's entries whose changes did not commit (known: another writer
 * was first, the server refused the item): one delete of them all; those
 * it misses go with the ended ones at the next sweep. */
void mgc_outbox_abandon_many(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, mgc_obx_t *const *x, size_t n)
{
    mongoc_collection_t *col;
    bson_t               q = BSON_INITIALIZER, in, arr;
    bson_error_t         err;
    size_t               k = 0;
    char                 buf[16];

    if (!db->outbox)
        return;
    bson_append_document_begin(&q, "_id", -1, &in);
    bson_append_array_begin(&in, "$in", -1, &arr);
    for (size_t i = 0; i < n; i++)
        if (x[i]->id) {
            const char *ks;

            bson_uint32_to_string((uint32_t)k++, &ks, buf, sizeof(buf));
            BSON_APPEND_INT64(&arr, ks, x[i]->id);
        }
    bson_append_array_end(&in, &arr);
    bson_append_document_end(&q, &in);
    if (k) {
        col = mongoc_client_get_collection(c, t->dbname, "outbox");
        if (!mongoc_collection_delete_many(col, &q, NULL, NULL, &err))
            for (size_t i = 0; i < n; i++)
                if (x[i]->id)
                    list_add(db->outbox, &db->outbox->done, &db->outbox->n_done, &db->outbox->cap_done, t,
                             x[i]->id);
        mongoc_collection_destroy(col);
        atomic_fetch_sub(&t->ob_open, (int64_t)k);
    }
    bson_destroy(&q);
    for (size_t i = 0; i < n; i++)
        x[i]->id = 0;
}

void mgc_outbox_done(void *vdb, const char *tenant, uint64_t id)
{
    mgc_t        *db = vdb;
    mgc_tenant_t *t  = db->outbox ? mgc_tenant_get(db, tenant, NULL) : NULL;

    if (!t)
        return;
    atomic_fetch_sub(&t->ob_open, 1);
    list_add(db->outbox, &db->outbox->done, &db->outbox->n_done, &db->outbox->cap_done, t, (int64_t)id);
}

/* ------------------------------------------------------------ the sweep */

typedef struct ob_sweep {
    mgc_t           *db;
    mongoc_client_t *c;
    void           (*emit)(void *ud, store_change_t *g, size_t n);
    void            *ud;
    ob_done_t       *done, *orphans;    /* taken out of the outbox's lists */
    size_t           n_done, n_orphans;
    int64_t          now;
} ob_sweep_t;

static int64_t field_i64(const bson_t *doc, const char *key)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it) : 0;
}

static cr_entity_t *field_version(const bson_t *doc, const char *key, bool *bad)
{
    bson_iter_t    it;
    bson_subtype_t st;
    mgc_docf_t     f = { 0 };

    if (!bson_iter_init_find(&it, doc, key))
        return NULL;
    if (BSON_ITER_HOLDS_BINARY(&it))
        bson_iter_binary(&it, &st, &f.e_len, &f.e);
    cr_entity_t *e = mgc_doc_decode(&f, NULL);
    if (!e)
        *bad = true;
    return e;
}

/* The life `c` of entity id went at least to version v, and had token w
 * there if it went no further: a delete entry of that life (of any process,
 * not ended yet) says which version it deleted. For a write whose document
 * is gone (or is a later life): a batch that updates then deletes, a purge
 * after writes, all taken over after a crash. */
static bool life_reached(ob_sweep_t *sw, mgc_tenant_t *t, const char *id, int64_t c, int64_t v, int64_t w,
                         bool *failed)
{
    mongoc_collection_t *col  = mongoc_client_get_collection(sw->c, t->dbname, "outbox");
    bson_t              *q    = BCON_NEW("i", BCON_UTF8(id), "v", BCON_INT64(0), "c", BCON_INT64(c), "$or", "[",
                                         "{", "pv", "{", "$gt", BCON_INT64(v), "}", "}",
                                         "{", "pv", BCON_INT64(v), "pw", BCON_INT64(w), "}", "]");
    bson_t              *opts = BCON_NEW("projection", "{", "_id", BCON_INT32(1), "}", "limit", BCON_INT64(1));
    mongoc_cursor_t     *cur  = mongoc_collection_find_with_opts(col, q, opts, NULL);
    const bson_t        *doc;
    bson_error_t         err;
    bool                 yes = mongoc_cursor_next(cur, &doc);

    if (!yes && mongoc_cursor_error(cur, &err)) {
        *failed = true;
        LOG_W("mongoc: outbox of %s: cannot read the deletions of '%.200s': %s", t->dbname, id, err.message);
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    return yes;
}

/* Whether the change of entry x was committed, from the entity's document
 * now. The entry's `c` (the createdAt of the entity it changed) tells one
 * life of an id from the next:
 *   - a write is committed when the document has its token, or is the same
 *     life gone past its version; when the document is gone or is a later
 *     life, when a delete entry of its life deleted a version past it, or
 *     it (life_reached);
 *   - a delete when the document is gone or is a later life.
 * So a create refused because the id was taken (a batch's 409, another
 * process first) is not committed whatever was written since, nor a delete
 * whose entity is still the one it read, and the writes of an entity that
 * a later change deleted are. Corners: a write whose entity was deleted by
 * another process that delivered and ended its deletion already counts as
 * not committed; a replace that lost to another writer counts as committed
 * once later writes took the entity past the version it would have
 * written (only a crash between the write and the entry's removal leaves
 * such an entry). An entry written before `c` existed is decided by the
 * versions alone, as then. */
static bool outbox_committed(ob_sweep_t *sw, mgc_tenant_t *t, const bson_t *x, const char *id, bool *failed)
{
    mongoc_collection_t *col  = mgc_coll(sw->db, sw->c, t, "entities");
    bson_t              *q    = BCON_NEW("_id", BCON_UTF8(id));
    bson_t              *opts = BCON_NEW("projection", "{", "v", BCON_INT32(1), "w", BCON_INT32(1), "c",
                                         BCON_INT32(1), "}", "limit", BCON_INT64(1));
    mongoc_cursor_t     *cur  = mongoc_collection_find_with_opts(col, q, opts, NULL);
    const bson_t        *doc;
    bool                 have = mongoc_cursor_next(cur, &doc);
    int64_t              dv = have ? field_i64(doc, "v") : 0, dw = have ? field_i64(doc, "w") : 0;
    int64_t              dc = have ? field_i64(doc, "c") : 0;
    int64_t              xv = field_i64(x, "v"), xw = field_i64(x, "w"), xc = field_i64(x, "c");
    bson_iter_t          it;
    bool                 has_c = bson_iter_init_find(&it, x, "c");
    bson_error_t         err;

    *failed = !have && mongoc_cursor_error(cur, &err);
    if (*failed)
        LOG_W("mongoc: outbox of %s: cannot read entity '%.200s': %s", t->dbname, id, err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    if (*failed)
        return false;
    if (xv == 0)                        /* a delete */
        return !have || (has_c ? dc != xc : dw != field_i64(x, "pw") && dv <= field_i64(x, "pv"));
    if (have && dw == xw)
        return true;
    if (!has_c)
        return have && dv > xv;
    if (have && dc == xc)
        return dv > xv;
    return life_reached(sw, t, id, xc, xv, xw, failed);
}

/* An entry this process owns and nobody ends any more: committed, it is
 * replayed to the notifier (which ends it); else it goes. */
static void take_one(ob_sweep_t *sw, mgc_tenant_t *t, const bson_t *x)
{
    bson_iter_t    it;
    const char    *id = bson_iter_init_find(&it, x, "i") && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL)
                                                                                       : NULL;
    int64_t        xid = field_i64(x, "_id");
    bool           failed = false, bad = false;
    store_change_t ch;

    if (!id)
        return;
    if (!outbox_committed(sw, t, x, id, &failed)) {
        if (!failed) {
            LOG_I("mongoc: outbox of %s: the change %lld of '%.200s' was not committed; entry dropped",
                  t->dbname, (long long)xid, id);
            list_add(sw->db->outbox, &sw->db->outbox->done, &sw->db->outbox->n_done,
                     &sw->db->outbox->cap_done, t, xid);
        }
        return;                         /* failed: the lease expires again, another sweep asks */
    }
    memset(&ch, 0, sizeof(ch));
    ch.tenant   = t->name;
    ch.op       = (store_op_t)field_i64(x, "p");
    ch.at       = field_i64(x, "at");
    ch.before   = field_version(x, "b", &bad);
    ch.after    = field_version(x, "a", &bad);
    ch.outbox   = (uint64_t)xid;
    ch.stream   = t->stream;
    if (bad || (!ch.before && !ch.after)) {
        LOG_E("mongoc: outbox of %s: entry %lld does not decode; dropped", t->dbname, (long long)xid);
        list_add(sw->db->outbox, &sw->db->outbox->done, &sw->db->outbox->n_done, &sw->db->outbox->cap_done,
                 t, xid);
    } else {
        LOG_I("mongoc: outbox of %s: the change %lld of '%.200s' taken over", t->dbname, (long long)xid, id);
        atomic_fetch_add(&t->ob_open, 1);
        pthread_mutex_lock(&t->wmu);
        ch.seq = ++t->seq;
        pthread_mutex_unlock(&t->wmu);
        sw->emit(sw->ud, &ch, 1);
    }
    if (ch.before)
        entity_unref(ch.before);
    if (ch.after)
        entity_unref(ch.after);
}

/* The ids of list v that are t's, as {$in: [...]} under key of q. */
static size_t append_ids(bson_t *q, const char *key, const ob_done_t *v, size_t n, const mgc_tenant_t *t)
{
    bson_t in, arr;
    size_t k = 0;
    char   buf[16];

    bson_append_document_begin(q, key, -1, &in);
    bson_append_array_begin(&in, "$in", -1, &arr);
    for (size_t i = 0; i < n; i++)
        if (v[i].t == t) {
            const char *ks;

            bson_uint32_to_string((uint32_t)k++, &ks, buf, sizeof(buf));
            BSON_APPEND_INT64(&arr, ks, v[i].id);
        }
    bson_append_array_end(&in, &arr);
    bson_append_document_end(q, &in);
    return k;
}

static void sweep_tenant(void *ud, mgc_tenant_t *t)
{
    ob_sweep_t          *sw  = ud;
    mgc_outbox_t        *ob  = sw->db->outbox;
    mongoc_collection_t *col = mongoc_client_get_collection(sw->c, t->dbname, "outbox");
    bson_error_t         err;
    bson_t              *q, *u, *opts;
    bson_t               qd = BSON_INITIALIZER;
    mongoc_cursor_t     *cur;
    const bson_t        *doc;
    bson_t              *taken[OB_TAKE_MAX];
    size_t               n_taken = 0;

    /* 1. the entries of ended changes */
    if (append_ids(&qd, "_id", sw->done, sw->n_done, t) &&
        !mongoc_collection_delete_many(col, &qd, NULL, NULL, &err)) {
        LOG_W("mongoc: outbox of %s: ended entries stay until the next sweep: %s", t->dbname, err.message);
        for (size_t i = 0; i < sw->n_done; i++)
            if (sw->done[i].t == t)
                list_add(ob, &ob->done, &ob->n_done, &ob->cap_done, t, sw->done[i].id);
    }
    bson_destroy(&qd);
    /* 2. this process's leases */
    if (atomic_load(&t->ob_open) > 0) {
        q = BCON_NEW("o", BCON_INT64(ob->owner));
        u = BCON_NEW("$set", "{", "u", BCON_INT64(sw->now + lease_us()), "}");
        if (!mongoc_collection_update_many(col, q, u, NULL, NULL, &err))
            LOG_W("mongoc: outbox of %s: leases not renewed: %s", t->dbname, err.message);
        bson_destroy(u);
        bson_destroy(q);
    }
    /* 3. the expired entries (a dead process's) and this process's orphans, in
     * commit order; entries are written only where a subscription is */
    if (!sw->n_orphans && !ob->due(ob->ud, t->name, NULL)) {
        mongoc_collection_destroy(col);
        return;
    }
    q = bson_new();
    {
        bson_t or, c0, c1, lt;

        bson_append_array_begin(q, "$or", -1, &or);
        bson_append_document_begin(&or, "0", -1, &c0);
        bson_append_document_begin(&c0, "u", -1, &lt);
        BSON_APPEND_INT64(&lt, "$lt", sw->now);
        bson_append_document_end(&c0, &lt);
        bson_append_document_end(&or, &c0);
        bson_append_document_begin(&or, "1", -1, &c1);
        append_ids(&c1, "_id", sw->orphans, sw->n_orphans, t);
        bson_append_document_end(&or, &c1);
        bson_append_array_end(q, &or);
    }
    opts = BCON_NEW("sort", "{", "at", BCON_INT32(1), "}", "limit", BCON_INT64(OB_TAKE_MAX));
    cur  = mongoc_collection_find_with_opts(col, q, opts, NULL);
    while (n_taken < OB_TAKE_MAX && mongoc_cursor_next(cur, &doc))
        taken[n_taken++] = bson_copy(doc);
    if (mongoc_cursor_error(cur, &err))
        LOG_W("mongoc: outbox of %s: expired entries not read: %s", t->dbname, err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(q);
    for (size_t i = 0; i < n_taken; i++) {
        /* the lease as read is the condition: of two takers, one matches (on MongoDB) */
        bson_t *sel   = BCON_NEW("_id", BCON_INT64(field_i64(taken[i], "_id")), "o",
                                 BCON_INT64(field_i64(taken[i], "o")), "u", BCON_INT64(field_i64(taken[i], "u")));
        bson_t *set   = BCON_NEW("$set", "{", "o", BCON_INT64(ob->owner), "u",
                                 BCON_INT64(sw->now + lease_us()), "}");
        bson_t  reply;
        bool    mine  = mongoc_collection_update_one(col, sel, set, NULL, &reply, &err) &&
                        field_i64(&reply, "matchedCount") > 0;

        bson_destroy(&reply);
        bson_destroy(set);
        bson_destroy(sel);
        if (mine)
            take_one(sw, t, taken[i]);
        bson_destroy(taken[i]);
    }
    mongoc_collection_destroy(col);
}

typedef struct ob_tenants {
    mgc_tenant_t **v;
    size_t         n, cap;
} ob_tenants_t;

static void collect(void *ud, mgc_tenant_t *t)
{
    ob_tenants_t *x = ud;

    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 16;
        x->v   = cr_xreallocarray(x->v, x->cap, sizeof(*x->v));
    }
    x->v[x->n++] = t;
}

void mgc_outbox_sweep(void *vdb, void (*emit)(void *ud, store_change_t *g, size_t n), void *ud)
{
    mgc_t        *db = vdb;
    mgc_outbox_t *ob = db->outbox;
    ob_sweep_t    sw = { .db = db, .emit = emit, .ud = ud, .now = cr_now_us() };
    ob_tenants_t  ts = { 0 };

    if (!ob)
        return;
    pthread_mutex_lock(&ob->mu);
    sw.done      = ob->done;
    sw.n_done    = ob->n_done;
    sw.orphans   = ob->orphans;
    sw.n_orphans = ob->n_orphans;
    ob->done = ob->orphans = NULL;
    ob->n_done = ob->cap_done = ob->n_orphans = ob->cap_orphans = 0;
    pthread_mutex_unlock(&ob->mu);
    mgc_tenant_each(db, collect, &ts);  /* the tenants are never freed before close */
    sw.c = mgc_pop(db);
    for (size_t i = 0; i < ts.n; i++)
        sweep_tenant(&sw, ts.v[i]);
    mgc_push(db, sw.c);
    free(ts.v);
    free(sw.done);
    free(sw.orphans);
}
