/*
 * counters.c - the counters of stored objects (a subscription's timesSent,
 * timesFailed, lastNotification, lastSuccess, lastFailure) aggregated in the
 * database over every coraine process on it (store.h store_ctr_*).
 *
 * Why this shape: a notification is counted on the process that sent it, so
 * the totals of one subscription are spread over processes. Writing one
 * document per notification would put a round trip on every delivery; so
 * each process adds its deltas to a table in memory, and mgc_ctr_flush
 * (every --syncInterval, and at close) writes every pending delta in ONE
 * bulk write ($inc for the counts, $max for the times) and reads back the
 * documents changed since its last read (any process's). A read answers the
 * database's totals as last read plus this process's deltas not yet written:
 * exact for this process's notifications, at most about --syncInterval
 * behind for the others'.
 *
 * Layout: the collection "counters" of the default database, a document per
 * object and process (--brokerAlias, host:port by default), so that no two
 * processes ever update one document (FerretDB's update is a read and a
 * write, not atomic: two processes' $inc of one document could lose one):
 *   {_id: "TENANT\nKIND/ID\nALIAS", o: "TENANT\nKIND/ID", s: sent,
 *    f: failed, n: lastNotification µs, ls: lastSuccess µs,
 *    lf: lastFailure µs, u: the writer's clock µs}
 * The totals of an object are the sum (counts) and the max (times) over its
 * documents. The read back finds the objects whose documents changed (u,
 * with READ_SKEW for the clocks' disagreement) and then all the documents of
 * those objects. A deleted object's documents go with it (mgc_ctr_drop).
 */
#include <stdlib.h>
#include <string.h>

#include "mgc.h"

#define READ_SKEW_US (60 * 1000000LL)   /* clocks of two processes may differ by this much */

struct mgc_ctrent {
    mgc_ctrent_t *next;
    char         *key;              /* the document's _id */
    uint64_t      h;
    store_ctr_t   tot;              /* the database's, as last read (plus what this process wrote since) */
    store_ctr_t   pend;             /* this process's deltas not yet written */
    store_ctr_t   acc;              /* the read back's sum (under cflush) */
    bool          dirty;
};

static size_t ctr_key(char *buf, size_t cap, const char *tenant, int kind, const char *id)
{
    int n = snprintf(buf, cap, "%s\n%d/%s", tenant ? tenant : "", kind, id);

    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* a += d: counts summed, times the greatest */
static void ctr_fold(store_ctr_t *a, const store_ctr_t *d)
{
    a->sent   += d->sent;
    a->failed += d->failed;
    a->last_notification = max64(a->last_notification, d->last_notification);
    a->last_success      = max64(a->last_success, d->last_success);
    a->last_failure      = max64(a->last_failure, d->last_failure);
}

/* omu-like: ctr_mu held */
static mgc_ctrent_t *ctr_find(mgc_t *db, const char *key, size_t len, bool make)
{
    uint64_t       h = cr_hash(key, len);
    mgc_ctrent_t **pp = &db->ctbl[h & db->cmask];

    for (mgc_ctrent_t *e = *pp; e; e = e->next)
        if (e->h == h && !strcmp(e->key, key))
            return e;
    if (!make)
        return NULL;
    if (db->cn > db->cmask) {       /* grow: load factor 1 */
        uint32_t       nmask = db->cmask * 2 + 1;
        mgc_ctrent_t **nt    = cr_xcalloc((size_t)nmask + 1, sizeof(*nt));

        for (uint32_t i = 0; i <= db->cmask; i++)
            for (mgc_ctrent_t *e = db->ctbl[i], *nx; e; e = nx) {
                nx = e->next;
                e->next = nt[e->h & nmask];
                nt[e->h & nmask] = e;
            }
        free(db->ctbl);
        db->ctbl  = nt;
        db->cmask = nmask;
        pp = &db->ctbl[h & nmask];
    }
    mgc_ctrent_t *e = cr_xcalloc(1, sizeof(*e));
    e->key  = cr_xstrdup(key);
    e->h    = h;
    e->next = *pp;
    *pp     = e;
    db->cn++;
    return e;
}

void mgc_ctr_add(mgc_t *db, const char *tenant, int kind, const char *id, const store_ctr_t *d)
{
    char   key[1200];
    size_t len = ctr_key(key, sizeof key, tenant, kind, id);

    if (!len)
        return;
    pthread_mutex_lock(&db->cmu);
    mgc_ctrent_t *e = ctr_find(db, key, len, true);
    ctr_fold(&e->pend, d);
    e->dirty = true;
    pthread_mutex_unlock(&db->cmu);
}

bool mgc_ctr_read(mgc_t *db, const char *tenant, int kind, const char *id, store_ctr_t *tot)
{
    char   key[1200];
    size_t len = ctr_key(key, sizeof key, tenant, kind, id);

    memset(tot, 0, sizeof *tot);
    if (!len)
        return false;
    pthread_mutex_lock(&db->cmu);
    mgc_ctrent_t *e = ctr_find(db, key, len, false);
    if (e) {
        *tot = e->tot;
        ctr_fold(tot, &e->pend);
    }
    pthread_mutex_unlock(&db->cmu);
    return true;                    /* none yet: every total is 0 */
}

void mgc_ctr_drop(mgc_t *db, mongoc_client_t *c, const char *tenant, int kind, const char *id)
{
    char   key[1200];
    size_t len = ctr_key(key, sizeof key, tenant, kind, id);

    if (!len)
        return;
    pthread_mutex_lock(&db->cmu);
    uint64_t h = cr_hash(key, len);
    for (mgc_ctrent_t **pp = &db->ctbl[h & db->cmask]; *pp; pp = &(*pp)->next) {
        mgc_ctrent_t *e = *pp;
        if (e->h == h && !strcmp(e->key, key)) {
            *pp = e->next;
            free(e->key);
            free(e);
            db->cn--;
            break;
        }
    }
    pthread_mutex_unlock(&db->cmu);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db->dflt->dbname, "counters");
    bson_t              *q   = BCON_NEW("o", BCON_UTF8(key));
    bson_error_t         err;
    if (!mongoc_collection_delete_many(col, q, NULL, NULL, &err))
        LOG_W("mongoc: the counters of '%s' stay in the database: %s", id, err.message);
    bson_destroy(q);
    mongoc_collection_destroy(col);
}

typedef struct ctr_out {
    char       *key;
    store_ctr_t d;
} ctr_out_t;

/* The pending deltas, taken out of the table (into tot, so reads do not
 * change meanwhile); n set. */
static ctr_out_t *ctr_take(mgc_t *db, size_t *n)
{
    ctr_out_t *out = NULL;
    size_t     k = 0, cap = 0;

    pthread_mutex_lock(&db->cmu);
    for (uint32_t i = 0; i <= db->cmask; i++)
        for (mgc_ctrent_t *e = db->ctbl[i]; e; e = e->next) {
            if (!e->dirty)
                continue;
            if (k == cap) {
                cap = cap ? cap * 2 : 64;
                out = cr_xrealloc(out, cap * sizeof(*out));
            }
            out[k].key = cr_xstrdup(e->key);
            out[k].d   = e->pend;
            k++;
            ctr_fold(&e->tot, &e->pend);
            memset(&e->pend, 0, sizeof e->pend);
            e->dirty = false;
        }
    pthread_mutex_unlock(&db->cmu);
    *n = k;
    return out;
}

/* A write that failed: its deltas pending again (tried at the next flush). */
static void ctr_give_back(mgc_t *db, const ctr_out_t *out, size_t n)
{
    pthread_mutex_lock(&db->cmu);
    for (size_t i = 0; i < n; i++) {
        mgc_ctrent_t *e = ctr_find(db, out[i].key, strlen(out[i].key), true);

        e->tot.sent   -= out[i].d.sent;     /* the times stay: tot keeps their max */
        e->tot.failed -= out[i].d.failed;
        ctr_fold(&e->pend, &out[i].d);
        e->dirty = true;
    }
    pthread_mutex_unlock(&db->cmu);
}

static bool ctr_write(mgc_t *db, mongoc_collection_t *col, const ctr_out_t *out, size_t n, int64_t now)
{
    bson_t                    *bopts = BCON_NEW("ordered", BCON_BOOL(false));
    mongoc_bulk_operation_t   *bulk  = mongoc_collection_create_bulk_operation_with_opts(col, bopts);
    bson_t                    *uopts = BCON_NEW("upsert", BCON_BOOL(true));
    bson_t                     reply;
    bson_error_t               err;
    bool                       ok = true;

    for (size_t i = 0; i < n && ok; i++) {
        const store_ctr_t *d = &out[i].d;
        char    id[1600];
        snprintf(id, sizeof id, "%s\n%s", out[i].key, db->ctr_proc);
        bson_t *q = BCON_NEW("_id", BCON_UTF8(id));
        bson_t *u = BCON_NEW("$set", "{", "o", BCON_UTF8(out[i].key), "}",
                             "$inc", "{", "s", BCON_INT64(d->sent), "f", BCON_INT64(d->failed), "}",
                             "$max", "{", "n", BCON_INT64(d->last_notification),
                             "ls", BCON_INT64(d->last_success), "lf", BCON_INT64(d->last_failure),
                             "u", BCON_INT64(now), "}");
        ok = mongoc_bulk_operation_update_one_with_opts(bulk, q, u, uopts, &err);
        bson_destroy(q);
        bson_destroy(u);
    }
    if (ok)
        ok = mongoc_bulk_operation_execute(bulk, &reply, &err);
    else
        bson_init(&reply);
    if (!ok)
        LOG_W("mongoc: writing %zu counters: %s (tried again at the next flush)", n, err.message);
    bson_destroy(&reply);
    mongoc_bulk_operation_destroy(bulk);
    bson_destroy(uopts);
    bson_destroy(bopts);
    return ok;
}

static int64_t doc_i64(const bson_t *doc, const char *k)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, doc, k) && BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it) : 0;
}

/* The objects whose documents any process changed since this one's last
 * read: their keys (strdup'ed) into *keys. false: the read failed. */
static bool ctr_changed(mgc_t *db, mongoc_collection_t *col, char ***keys, size_t *nk)
{
    int64_t          since = db->ctr_read_at ? db->ctr_read_at - READ_SKEW_US : 0;
    bson_t          *q     = BCON_NEW("u", "{", "$gte", BCON_INT64(since), "}");
    bson_t          *opts  = BCON_NEW("projection", "{", "o", BCON_INT32(1), "}");
    mongoc_cursor_t *cur   = mongoc_collection_find_with_opts(col, q, opts, NULL);
    const bson_t    *doc;
    bson_error_t     err;
    size_t           cap = 0;
    bool             ok;

    *keys = NULL;
    *nk   = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;

        if (!bson_iter_init_find(&it, doc, "o") || !BSON_ITER_HOLDS_UTF8(&it))
            continue;
        if (*nk == cap) {
            cap   = cap ? cap * 2 : 64;
            *keys = cr_xrealloc(*keys, cap * sizeof(**keys));
        }
        (*keys)[(*nk)++] = cr_xstrdup(bson_iter_utf8(&it, NULL));
    }
    ok = !mongoc_cursor_error(cur, &err);
    if (!ok)
        LOG_W("mongoc: reading the counters: %s (tried again at the next flush)", err.message);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    bson_destroy(q);
    return ok;
}

/* The totals of the objects any process changed since this one's last read:
 * the sum over every process's document of each. */
static bool ctr_read_back(mgc_t *db, mongoc_collection_t *col, int64_t now)
{
    char       **keys;
    size_t       nk;
    bson_error_t err;
    bool         ok = ctr_changed(db, col, &keys, &nk);

    if (ok && nk) {
        bson_t       q, in, o;
        const bson_t *doc;

        bson_init(&q);
        bson_append_document_begin(&q, "o", 1, &o);
        bson_append_array_begin(&o, "$in", 3, &in);
        for (size_t i = 0; i < nk; i++) {
            char        nb[16];
            const char *kp;

            bson_uint32_to_string((uint32_t)i, &kp, nb, sizeof nb);
            bson_append_utf8(&in, kp, -1, keys[i], -1);
        }
        bson_append_array_end(&o, &in);
        bson_append_document_end(&q, &o);
        pthread_mutex_lock(&db->cmu);
        for (size_t i = 0; i < nk; i++)
            memset(&ctr_find(db, keys[i], strlen(keys[i]), true)->acc, 0, sizeof(store_ctr_t));
        pthread_mutex_unlock(&db->cmu);
        mongoc_cursor_t *cur = mongoc_collection_find_with_opts(col, &q, NULL, NULL);
        while (mongoc_cursor_next(cur, &doc)) {
            bson_iter_t it;

            if (!bson_iter_init_find(&it, doc, "o") || !BSON_ITER_HOLDS_UTF8(&it))
                continue;
            uint32_t    len;
            const char *key = bson_iter_utf8(&it, &len);
            store_ctr_t t = { doc_i64(doc, "s"), doc_i64(doc, "f"), doc_i64(doc, "n"), doc_i64(doc, "ls"),
                              doc_i64(doc, "lf") };
            pthread_mutex_lock(&db->cmu);
            ctr_fold(&ctr_find(db, key, len, true)->acc, &t);
            pthread_mutex_unlock(&db->cmu);
        }
        ok = !mongoc_cursor_error(cur, &err);
        if (!ok)
            LOG_W("mongoc: reading the counters: %s (tried again at the next flush)", err.message);
        mongoc_cursor_destroy(cur);
        bson_destroy(&q);
        if (ok) {
            pthread_mutex_lock(&db->cmu);
            for (size_t i = 0; i < nk; i++) {
                mgc_ctrent_t *e = ctr_find(db, keys[i], strlen(keys[i]), true);
                e->tot = e->acc;
            }
            pthread_mutex_unlock(&db->cmu);
        }
    }
    if (ok)
        db->ctr_read_at = now;
    for (size_t i = 0; i < nk; i++)
        free(keys[i]);
    free(keys);
    return ok;
}

void mgc_ctr_flush(mgc_t *db, bool closing)
{
    size_t     n;
    int64_t    now;
    ctr_out_t *out;

    pthread_mutex_lock(&db->cflush);    /* one flush at a time: the sync thread's or the close's */
    now = cr_now_us();
    out = ctr_take(db, &n);
    if (closing && !n) {            /* nothing to write, nobody to read for (a failed open too) */
        pthread_mutex_unlock(&db->cflush);
        free(out);
        return;
    }
    mongoc_client_t     *c   = mgc_pop(db);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db->dflt->dbname, "counters");
    if (n && !ctr_write(db, col, out, n, now))
        ctr_give_back(db, out, n);
    else if (!closing)
        ctr_read_back(db, col, now);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
    for (size_t i = 0; i < n; i++)
        free(out[i].key);
    free(out);
    pthread_mutex_unlock(&db->cflush);
}

void mgc_ctr_init(mgc_t *db)
{
    db->ctr_proc = cr_xstrdup(cr_config.broker_alias && *cr_config.broker_alias ? cr_config.broker_alias
                                                                                  : "coraine");
    pthread_mutex_init(&db->cmu, NULL);
    pthread_mutex_init(&db->cflush, NULL);
    db->cmask = 63;
    db->ctbl  = cr_xcalloc(64, sizeof(*db->ctbl));
}

void mgc_ctr_free(mgc_t *db)
{
    for (uint32_t i = 0; db->ctbl && i <= db->cmask; i++)
        for (mgc_ctrent_t *e = db->ctbl[i], *nx; e; e = nx) {
            nx = e->next;
            free(e->key);
            free(e);
        }
    free(db->ctbl);
    db->ctbl = NULL;
    free(db->ctr_proc);
    db->ctr_proc = NULL;
    pthread_mutex_destroy(&db->cmu);
    pthread_mutex_destroy(&db->cflush);
}
