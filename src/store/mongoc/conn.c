/*
 * conn.c - the MongoDB store's connection: the client pool, what the server
 * can do (read once at start), the errors it answers with, and the tenants
 * (a database each, listed in the default database's "tenants" collection).
 *
 * Why a database per tenant (doc/mongodb.md "Tenants"): a tenant's entities,
 * indexes and objects are apart from every other's (no tenant field in every
 * key and every filter, small per-tenant indexes, a tenant dropped or backed
 * up as one database, sharded per database), as Orion-LD's users know it.
 * The cost: a database name is short and restricted, so a tenant's name is
 * escaped into it (mgc_tenant_dbname) and the mapping is kept in "tenants".
 *
 * Sessions: each pooled client keeps one explicit session (mgc_copts) for
 * the hot commands, instead of the implicit session libmongoc starts and
 * ends around every command; mgc_write sends a write command built by the
 * caller (cheaper than the collection helpers; doc/mongodb.md "Commands").
 *
 * Timeouts: --dbTimeout bounds server selection, connection and socket
 * reads, so a request against a database that is down or stalled answers
 * 503 within about that time; the pool reconnects by itself when the
 * server is back (libmongoc's topology monitor).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "mgc.h"

static pthread_once_t mgc_once = PTHREAD_ONCE_INIT;

/* libmongoc's own messages, as our log lines (its default handler writes
 * its own format to stderr). FerretDB has no endSessions: the warning
 * libmongoc gives for it at close says nothing to an operator. */
static void mgc_log(mongoc_log_level_t level, const char *domain, const char *msg, void *ud)
{
    (void)ud;
    if (level <= MONGOC_LOG_LEVEL_ERROR)
        LOG_E("libmongoc %s: %s", domain ? domain : "", msg ? msg : "");
    else if (level == MONGOC_LOG_LEVEL_WARNING && !(msg && strstr(msg, "endSessions")))
        LOG_W("libmongoc %s: %s", domain ? domain : "", msg ? msg : "");
    else if (level != MONGOC_LOG_LEVEL_TRACE)
        LOG_D("libmongoc %s: %s", domain ? domain : "", msg ? msg : "");
}

static void mgc_init_lib(void)
{
    mongoc_log_set_handler(mgc_log, NULL);
    mongoc_init();
}

mongoc_client_t *mgc_pop(mgc_t *db)
{
    /* try_pop first: pop reads the URI's waitQueueTimeoutMS every time
     * (~1.5k instructions, callgrind); it waits only when none is free */
    mongoc_client_t *c = mongoc_client_pool_try_pop(db->pool);

    return c ? c : mongoc_client_pool_pop(db->pool);
}

void mgc_push(mgc_t *db, mongoc_client_t *c)
{
    if (c)
        mongoc_client_pool_push(db->pool, c);
}

/* Sessions: at most MGC_SESS_MAX clients get one (the pool's clients in
 * use at once: the workers); the others use implicit sessions. Lookups read
 * the table without the lock: an entry is complete before n_sess counts it
 * and stays until close. */
#define MGC_SESS_MAX 256u

struct mgc_sess {
    mongoc_client_t         *c;
    mongoc_client_session_t *s;     /* NULL: the server has no sessions */
    bson_t                   opts;  /* {sessionId} */
};

static struct mgc_sess *sess_find(mgc_t *db, mongoc_client_t *c, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (db->sess[i].c == c)
            return &db->sess[i];
    return NULL;
}

const bson_t *mgc_copts(mgc_t *db, mongoc_client_t *c)
{
    uint32_t         n = atomic_load_explicit(&db->n_sess, memory_order_acquire);
    struct mgc_sess *e;

    if (!db->sess)
        return NULL;
    if (!(e = sess_find(db, c, n))) {
        pthread_mutex_lock(&db->smu);
        n = atomic_load_explicit(&db->n_sess, memory_order_relaxed);
        if (!(e = sess_find(db, c, n)) && n < MGC_SESS_MAX) {
            mongoc_session_opt_t *so = mongoc_session_opts_new();
            bson_error_t          err;

            e = &db->sess[n];
            e->c = c;
            bson_init(&e->opts);
            mongoc_session_opts_set_causal_consistency(so, false);
            e->s = mongoc_client_start_session(c, so, &err);
            if (e->s && !mongoc_client_session_append(e->s, &e->opts, &err)) {
                mongoc_client_session_destroy(e->s);
                e->s = NULL;
            }
            mongoc_session_opts_destroy(so);
            atomic_store_explicit(&db->n_sess, n + 1, memory_order_release);
        }
        pthread_mutex_unlock(&db->smu);
    }
    return e && e->s ? &e->opts : NULL;
}

static void sess_free(mgc_t *db)
{
    uint32_t n = atomic_load(&db->n_sess);

    for (uint32_t i = 0; i < n; i++) {
        if (db->sess[i].s)
            mongoc_client_session_destroy(db->sess[i].s);
        bson_destroy(&db->sess[i].opts);
    }
    atomic_store(&db->n_sess, 0);
    free(db->sess);
    db->sess = NULL;
}

/* Server error codes that mean "not now" rather than "never" (a primary
 * stepping down, a shutdown, a network timeout, a write concern not met). */
static bool transient_code(uint32_t code)
{
    switch (code) {
    case 6: case 7: case 50: case 64: case 89: case 91: case 189: case 262:
    case 9001: case 10107: case 11600: case 11602: case 13435: case 13436:
        return true;
    default:
        return false;
    }
}

bool mgc_fail(problem_t *p, const char *what, const bson_error_t *err)
{
    bool down = err->domain == MONGOC_ERROR_SERVER_SELECTION || err->domain == MONGOC_ERROR_STREAM ||
                (err->domain == MONGOC_ERROR_CLIENT && err->code == MONGOC_ERROR_CLIENT_AUTHENTICATE) ||
                transient_code(err->code);

    if (!down)
        return problem_set(p, PB_INTERNAL_ERROR, "MongoDB: %s failed: %s", what, err->message);
    problem_set(p, PB_HTTP, "the database (MongoDB) is unavailable: %s failed: %s; "
                "retry later", what, err->message);
    if (p)
        p->status = 503;
    LOG_W("mongoc: %s: %s", what, err->message);
    return false;
}

bool mgc_refused(const bson_error_t *err)
{
    return (err->domain == MONGOC_ERROR_SERVER || err->domain == MONGOC_ERROR_QUERY) &&
           !transient_code(err->code);
}

bool mgc_is_dup(const bson_error_t *err)
{
    return err->code == 11000 || err->code == 11001;
}

bool mgc_write(mgc_t *db, mongoc_client_t *c, const char *dbname, const bson_t *cmd, int64_t *n,
               bson_error_t *err)
{
    bson_t      reply;
    bson_iter_t it, el;
    bool        ok = mongoc_client_write_command_with_opts(c, dbname, cmd, mgc_copts(db, c), &reply, err);

    if (ok && bson_iter_init_find(&it, &reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &el) && bson_iter_next(&el) && BSON_ITER_HOLDS_DOCUMENT(&el)) {
        bson_iter_t f;
        const char *msg = "a write error";

        ok = false;
        bson_set_error(err, MONGOC_ERROR_SERVER, 0, "%s", msg);
        if (bson_iter_recurse(&el, &f))
            while (bson_iter_next(&f)) {
                if (!strcmp(bson_iter_key(&f), "code") && BSON_ITER_HOLDS_NUMBER(&f))
                    err->code = (uint32_t)bson_iter_as_int64(&f);
                else if (!strcmp(bson_iter_key(&f), "errmsg") && BSON_ITER_HOLDS_UTF8(&f))
                    bson_strncpy(err->message, bson_iter_utf8(&f, NULL), sizeof err->message);
            }
    }
    if (ok && n)
        *n = bson_iter_init_find(&it, &reply, "n") && BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it) : 0;
    bson_destroy(&reply);
    return ok;
}

uint64_t mgc_token(mgc_t *db)
{
    return atomic_fetch_add_explicit(&db->token, 1, memory_order_relaxed);
}

int64_t mgc_clock(mgc_tenant_t *t, int64_t floor)
{
    int64_t now = cr_now_us();

    if (now <= t->last_at)
        now = t->last_at + 1;
    if (now <= floor)
        now = floor + 1;
    return now;
}

/* ------------------------------------------------------------- tenants */

static bool is_default(const char *tenant)
{
    return !tenant || !*tenant;
}

/* The database of a named tenant: PREFIX-NAME with every byte outside
 * [a-z0-9] written _XX (database names are case-insensitive, short and
 * forbid /\. "$*<>:|?), or PREFIX-hHASH when that is longer than 63. */
static char *tenant_dbname(const char *prefix, const char *name)
{
    static const char hex[] = "0123456789abcdef";
    sbuf_t            sb;

    sb_init(&sb, NULL, 64);
    sb_adds(&sb, prefix);
    sb_addc(&sb, '-');
    for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
        if ((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')) {
            sb_addc(&sb, (char)*s);
        } else {
            sb_addc(&sb, '_');
            sb_addc(&sb, hex[*s >> 4]);
            sb_addc(&sb, hex[*s & 15]);
        }
    }
    if (sb.len > 63) {
        sb.len = 0;
        sb_printf(&sb, "%s-h%016llx", prefix, (unsigned long long)cr_hash_stable(name, strlen(name)));
    }
    char *r = cr_xstrdup(sb.p);
    sb_release(&sb);
    return r;
}

static mgc_tenant_t *tenant_new(const char *name, const char *dbname)
{
    mgc_tenant_t *t = cr_xcalloc(1, sizeof(*t));

    t->name   = cr_xstrdup(name);
    t->dbname = cr_xstrdup(dbname);
    if (pthread_mutex_init(&t->wmu, NULL) != 0) {
        LOG_E("mongoc: cannot create a tenant's mutex; aborting");
        abort();
    }
    t->stream = store_stream_new();
    return t;
}

static void tenant_free(mgc_tenant_t *t)
{
    pthread_mutex_destroy(&t->wmu);
    store_stream_free(t->stream);
    free(t->geo_keys);
    free(t->name);
    free(t->dbname);
    free(t);
}

static mgc_tenant_t *table_find(mgc_t *db, const char *name)
{
    uint64_t h = cr_hash(name, strlen(name));

    for (mgc_tenant_t *t = db->tbl[h & db->tbl_mask]; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

/* Under the table's write lock. */
static mgc_tenant_t *table_add(mgc_t *db, const char *name, const char *dbname)
{
    mgc_tenant_t *t = table_find(db, name);

    if (t)
        return t;
    if (db->n_tenants + 1 > db->tbl_mask) {
        uint32_t       cap = (db->tbl_mask + 1) * 2;
        mgc_tenant_t **nt  = cr_xcalloc(cap, sizeof(*nt));

        for (uint32_t i = 0; i <= db->tbl_mask; i++)
            for (mgc_tenant_t *x = db->tbl[i], *nx; x; x = nx) {
                uint64_t h = cr_hash(x->name, strlen(x->name));
                nx = x->next;
                x->next = nt[h & (cap - 1)];
                nt[h & (cap - 1)] = x;
            }
        free(db->tbl);
        db->tbl      = nt;
        db->tbl_mask = cap - 1;
    }
    t = tenant_new(name, dbname);
    uint64_t h = cr_hash(name, strlen(name));
    t->next = db->tbl[h & db->tbl_mask];
    db->tbl[h & db->tbl_mask] = t;
    db->n_tenants++;
    return t;
}

static mgc_tenant_t *table_lookup(mgc_t *db, const char *name)
{
    mgc_tenant_t *t;

    pthread_rwlock_rdlock(&db->tlock);
    t = table_find(db, name);
    pthread_rwlock_unlock(&db->tlock);
    return t;
}

/* The registry document of a tenant another process created: into the table. */
static mgc_tenant_t *registry_find(mgc_t *db, const char *name, bool *failed, problem_t *p)
{
    mongoc_client_t     *c   = mgc_pop(db);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db->prefix, "tenants");
    bson_t              *q   = BCON_NEW("_id", BCON_UTF8(name));
    mongoc_cursor_t     *cur = mongoc_collection_find_with_opts(col, q, NULL, NULL);
    const bson_t        *doc;
    bson_error_t         err;
    mgc_tenant_t        *t = NULL;

    *failed = false;
    if (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        const char *dbname = NULL;

        if (bson_iter_init_find(&it, doc, "db") && BSON_ITER_HOLDS_UTF8(&it))
            dbname = bson_iter_utf8(&it, NULL);
        if (dbname) {
            pthread_rwlock_wrlock(&db->tlock);
            t = table_add(db, name, dbname);
            pthread_rwlock_unlock(&db->tlock);
        }
    } else if (mongoc_cursor_error(cur, &err)) {
        *failed = true;
        mgc_fail(p, "reading the tenant list", &err);
    }
    mongoc_cursor_destroy(cur);
    bson_destroy(q);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
    return t;
}

mgc_tenant_t *mgc_tenant_get(mgc_t *db, const char *tenant, problem_t *p)
{
    mgc_tenant_t *t;
    bool          failed;

    if (is_default(tenant))
        return db->dflt;
    if ((t = table_lookup(db, tenant)))
        return t;
    if ((t = registry_find(db, tenant, &failed, p)) || failed)
        return t;
    problem_set(p, PB_NONEXISTENT_TENANT, "tenant '%.200s' does not exist", tenant);
    return NULL;
}

mgc_tenant_t *mgc_tenant_open(mgc_t *db, const char *tenant, problem_t *p)
{
    mgc_tenant_t        *t;
    bool                 failed, ok;
    char                *dbname;
    mongoc_client_t     *c;
    mongoc_collection_t *col;
    bson_t              *q, *u, *opts;
    bson_error_t         err;

    if (is_default(tenant))
        return db->dflt;
    if ((t = table_lookup(db, tenant)))
        return t;
    if ((t = registry_find(db, tenant, &failed, p)) || failed)
        return t;
    pthread_rwlock_rdlock(&db->tlock);
    bool full = db->n_tenants >= db->max_tenants;
    pthread_rwlock_unlock(&db->tlock);
    if (full) {
        problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                    "the broker does not support more tenants (--maxTenants %d)",
                    cr_config.max_tenants);
        return NULL;
    }
    /* Registered first ($setOnInsert: another process may do the same at once). */
    dbname = tenant_dbname(db->prefix, tenant);
    c      = mgc_pop(db);
    col    = mongoc_client_get_collection(c, db->prefix, "tenants");
    q      = BCON_NEW("_id", BCON_UTF8(tenant));
    u      = BCON_NEW("$setOnInsert", "{", "db", BCON_UTF8(dbname), "}");
    opts   = BCON_NEW("upsert", BCON_BOOL(true));
    ok     = mongoc_collection_update_one(col, q, u, opts, NULL, &err);
    bson_destroy(q);
    bson_destroy(u);
    bson_destroy(opts);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
    free(dbname);
    if (!ok && !mgc_is_dup(&err)) {
        mgc_fail(p, "registering the tenant", &err);
        return NULL;
    }
    /* Read back: the name another process registered first wins. */
    if ((t = registry_find(db, tenant, &failed, p)) || failed)
        return t;
    problem_set(p, PB_INTERNAL_ERROR, "MongoDB: tenant '%.200s' registered but not found", tenant);
    return NULL;
}

void mgc_tenants_load(mgc_t *db)
{
    mongoc_client_t     *c   = mgc_pop(db);
    mongoc_collection_t *col = mongoc_client_get_collection(c, db->prefix, "tenants");
    bson_t               q   = BSON_INITIALIZER;
    mongoc_cursor_t     *cur = mongoc_collection_find_with_opts(col, &q, NULL, NULL);
    const bson_t        *doc;
    bson_error_t         err;

    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;
        const char *name = NULL, *dbname = NULL;

        if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it))
            name = bson_iter_utf8(&it, NULL);
        if (bson_iter_init_find(&it, doc, "db") && BSON_ITER_HOLDS_UTF8(&it))
            dbname = bson_iter_utf8(&it, NULL);
        if (name && *name && dbname) {
            pthread_rwlock_wrlock(&db->tlock);
            table_add(db, name, dbname);
            pthread_rwlock_unlock(&db->tlock);
        }
    }
    if (mongoc_cursor_error(cur, &err))
        LOG_W("mongoc: reading the tenant list: %s", err.message);
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
}

void mgc_tenant_each(mgc_t *db, void (*fn)(void *ud, mgc_tenant_t *t), void *ud)
{
    fn(ud, db->dflt);
    pthread_rwlock_rdlock(&db->tlock);
    for (uint32_t i = 0; i <= db->tbl_mask; i++)
        for (mgc_tenant_t *t = db->tbl[i]; t; t = t->next)
            fn(ud, t);
    pthread_rwlock_unlock(&db->tlock);
}

/* ------------------------------------------------------------- indexes */

/* The names of coll's indexes into have[] (false: the listing failed; a
 * collection that does not exist yet has none). */
static bool index_names(mongoc_client_t *c, const char *dbname, const char *coll, char have[][24],
                        size_t cap, size_t *n, bson_error_t *err)
{
    mongoc_collection_t *col = mongoc_client_get_collection(c, dbname, coll);
    mongoc_cursor_t     *cur = mongoc_collection_find_indexes_with_opts(col, NULL);
    const bson_t        *doc;
    bool                 ok;

    *n = 0;
    while (mongoc_cursor_next(cur, &doc)) {
        bson_iter_t it;

        if (*n < cap && bson_iter_init_find(&it, doc, "name") && BSON_ITER_HOLDS_UTF8(&it))
            snprintf(have[(*n)++], 24, "%s", bson_iter_utf8(&it, NULL));
    }
    ok = !mongoc_cursor_error(cur, err) || err->code == 26;     /* NamespaceNotFound */
    mongoc_cursor_destroy(cur);
    mongoc_collection_destroy(col);
    return ok;
}

/* Creates index `name` on coll with the given key unless have[] lists it
 * (FerretDB 1.24 drops the connection on a createIndexes of an index that
 * exists: only the missing ones are asked for). */
static bool index_ensure(mongoc_client_t *c, const char *dbname, const char *coll, char have[][24],
                         size_t n, const char *name, const bson_t *key, bson_error_t *err)
{
    mongoc_database_t *d;
    bson_t             cmd = BSON_INITIALIZER, arr, ix;
    bool               ok;

    for (size_t i = 0; i < n; i++)
        if (!strcmp(have[i], name))
            return true;
    BSON_APPEND_UTF8(&cmd, "createIndexes", coll);
    bson_append_array_begin(&cmd, "indexes", -1, &arr);
    bson_append_document_begin(&arr, "0", 1, &ix);
    BSON_APPEND_DOCUMENT(&ix, "key", key);
    BSON_APPEND_UTF8(&ix, "name", name);
    bson_append_document_end(&arr, &ix);
    bson_append_array_end(&cmd, &arr);
    d  = mongoc_client_get_database(c, dbname);
    ok = mongoc_database_write_command_with_opts(d, &cmd, NULL, NULL, err);
    mongoc_database_destroy(d);
    bson_destroy(&cmd);
    return ok;
}

/* The indexes of a tenant's database: creation order and pagination
 * (c, _id), types (t, c), modifiedAt, the attribute names (/attributes,
 * attrs=), the scopes (scopeQ's prefilter), and on a server with wildcard
 * indexes one over q.* and one over d.* (the q prefilter's fields: their
 * names are hashes, one per attribute name, so no fixed index can list
 * them); the objects by kind and order. The GeoProperties get theirs as
 * their names appear (mgc_geo_index). */
const char *mgc_index_spec(const mgc_t *db, size_t i, const char **coll, bson_t *key)
{
    static const struct { const char *coll, *name, *f1, *f2; bool wild; } ix[] = {
        { "entities", "c_id", "c", "_id", false }, { "entities", "t_c", "t", "c", false },
        { "entities", "m", "m", NULL, false },     { "entities", "a", "a", NULL, false },
        { "entities", "s", "s", NULL, false },
        { "entities", "q_all", "q.$**", NULL, true }, { "entities", "d_all", "d.$**", NULL, true },
        { "objects", "k_o", "k", "o", false },
    };

    for (size_t j = 0; j < sizeof ix / sizeof ix[0]; j++) {
        if (ix[j].wild && !db->wildcard)
            continue;
        if (i--)
            continue;
        bson_init(key);
        BSON_APPEND_INT32(key, ix[j].f1, 1);
        if (ix[j].f2)
            BSON_APPEND_INT32(key, ix[j].f2, 1);
        *coll = ix[j].coll;
        return ix[j].name;
    }
    return NULL;
}

static bool ensure_indexes(const mgc_t *db, mongoc_client_t *c, const char *dbname, bson_error_t *err)
{
    char        have[MGC_INDEXES_MAX][24];
    size_t      n = 0;
    bool        ok = true;
    const char *listed = NULL, *coll, *name;
    bson_t      key;

    for (size_t i = 0; ok && (name = mgc_index_spec(db, i, &coll, &key)); i++) {
        if (!listed || strcmp(listed, coll) != 0) {
            ok = index_names(c, dbname, coll, have, MGC_INDEXES_MAX, &n, err);
            listed = coll;
        }
        ok = ok && index_ensure(c, dbname, coll, have, n, name, &key, err);
        bson_destroy(&key);
    }
    return ok;
}

mongoc_collection_t *mgc_coll(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const char *name)
{
    mgc_indexes(db, c, t);
    return mongoc_client_get_collection(c, t->dbname, name);
}

void mgc_indexes(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t)
{
    if (!atomic_load_explicit(&t->indexed, memory_order_acquire)) {
        bson_error_t err;

        if (ensure_indexes(db, c, t->dbname, &err))
            atomic_store_explicit(&t->indexed, 1, memory_order_release);
        else
            LOG_W("mongoc: indexes of database %s: %s (tried again on its next use)", t->dbname,
                  err.message);
    }
}

void mgc_geo_index_spec(const char *key, bool sphere, char name[24], bson_t *k)
{
    char field[40];

    bson_init(k);
    if (sphere) {
        snprintf(field, sizeof field, "gj.%s", key);
        snprintf(name, 24, "gj_%s", key);
        BSON_APPEND_UTF8(k, field, "2dsphere");
    } else {
        snprintf(field, sizeof field, "g.%s.x0", key);
        snprintf(name, 24, "%s", key);
        BSON_APPEND_INT32(k, field, 1);
    }
}

void mgc_geo_index(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const cr_entity_t *e)
{
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        char key[24];
        bool known = false;

        if (e->attrs[i].kind != ATTR_GEOPROPERTY)
            continue;
        mgc_geo_key(key, e->attrs[i].name);
        for (uint32_t j = 0; j < t->n_geo_keys && !known; j++)
            known = !strcmp(t->geo_keys[j], key);
        if (known || t->n_geo_keys >= 256)
            continue;
        char         have[MGC_INDEXES_MAX][24], name[24];
        size_t       n = 0;
        bson_t       k;
        bson_error_t err;
        bool         ok = index_names(c, t->dbname, "entities", have, MGC_INDEXES_MAX, &n, &err);

        /* the box (every server), and the Point's 2dsphere where the server has one */
        for (int sphere = 0; ok && sphere <= (int)db->geo2d; sphere++) {
            mgc_geo_index_spec(key, sphere, name, &k);
            ok = index_ensure(c, t->dbname, "entities", have, n, name, &k, &err);
            bson_destroy(&k);
            if (!ok && sphere) {    /* the box's index is there: queries on it fall back to the box (query.c) */
                LOG_W("mongoc: 2dsphere index %s of database %s: %s", name, t->dbname, err.message);
                ok = true;
            }
        }
        if (ok) {
            t->geo_keys = cr_xreallocarray(t->geo_keys, t->n_geo_keys + 1, sizeof(*t->geo_keys));
            memcpy(t->geo_keys[t->n_geo_keys++], key, 24);
        } else {
            LOG_W("mongoc: index %s of database %s: %s", key, t->dbname, err.message);
        }
    }
}

/* ------------------------------------------------------------- open */

/* Does the server have this kind of index, and the operator that uses it?
 * Tried whole on a scratch collection of this process (its own name: two
 * processes starting at once do not drop each other's), dropped after: the
 * index created, a document inserted, and the filter must find it (FerretDB
 * 1.24 accepts a wildcard index, then fails every insert: a created index
 * alone proves nothing). Takes key, doc and filter (destroyed here). */
static bool probe_cap(mongoc_client_t *c, const char *dbname, uint64_t tok, const char *what, const char *name,
                      bson_t *key, bson_t *doc, bson_t *filter, bson_error_t *err)
{
    char                 coll[48];

    snprintf(coll, sizeof coll, "probe-%016llx-%s", (unsigned long long)tok, what);
    mongoc_collection_t *col = mongoc_client_get_collection(c, dbname, coll);
    bool                 ok  = index_ensure(c, dbname, coll, NULL, 0, name, key, err) &&
                               mongoc_collection_insert_one(col, doc, NULL, NULL, err);

    if (ok) {
        mongoc_cursor_t *cur = mongoc_collection_find_with_opts(col, filter, NULL, NULL);
        const bson_t    *got;

        ok = mongoc_cursor_next(cur, &got);
        if (!ok && !mongoc_cursor_error(cur, err))
            snprintf(err->message, sizeof err->message, "the probe's document was not found");
        mongoc_cursor_destroy(cur);
    }
    bson_error_t derr;
    if (!mongoc_collection_drop(col, &derr) && derr.code != 26)
        LOG_W("mongoc: dropping the probe's collection %s.%s: %s", dbname, coll, derr.message);
    mongoc_collection_destroy(col);
    bson_destroy(key);
    bson_destroy(doc);
    bson_destroy(filter);
    return ok;
}

/* What the server can do, asked of it: hello (a replica set member: write
 * concern majority, change streams), buildInfo (FerretDB: claims, its
 * conditional update is not atomic), and a 2dsphere and a wildcard index
 * tried on a scratch collection (geo2d: gj and $geoWithin; wildcard: the
 * q.$** and d.$** indexes), whatever the server says it is. */
static bool probe(mgc_t *db, problem_t *p)
{
    mongoc_client_t *c = mgc_pop(db);
    bson_t           reply;
    bson_error_t     err, perr;
    bson_iter_t      it;
    bson_t          *cmd = BCON_NEW("hello", BCON_INT32(1));
    bool             ok  = mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &err);

    bson_destroy(cmd);
    if (ok) {
        db->replset = bson_iter_init_find(&it, &reply, "setName");
        bson_destroy(&reply);
        cmd = BCON_NEW("buildInfo", BCON_INT32(1));
        db->claims = mongoc_client_command_simple(c, "admin", cmd, NULL, &reply, &perr) &&
                     (bson_iter_init_find(&it, &reply, "ferretdbVersion") ||
                      bson_iter_init_find(&it, &reply, "ferretdb"));
        bson_destroy(&reply);
        bson_destroy(cmd);
        uint64_t tok = mgc_token(db);

        db->geo2d = probe_cap(c, db->prefix, tok, "g", "p_2dsphere", BCON_NEW("p", BCON_UTF8("2dsphere")),
                              BCON_NEW("_id", BCON_INT32(1), "p", "{", "type", BCON_UTF8("Point"),
                                       "coordinates", "[", BCON_DOUBLE(1.0), BCON_DOUBLE(1.0), "]", "}"),
                              BCON_NEW("p", "{", "$geoWithin", "{", "$centerSphere", "[", "[", BCON_DOUBLE(1.0),
                                       BCON_DOUBLE(1.0), "]", BCON_DOUBLE(0.01), "]", "}", "}"), &perr);
        if (!db->geo2d)
            LOG_I("mongoc: the server has no 2dsphere index or $geoWithin (%s): geo-queries use "
                  "the box prefilter on plain numbers, judged in the broker", perr.message);
        const char *force = getenv("CORAINE_MONGOC_GEO2D");    /* tests: the refusal's fallback */
        if (force && !strcmp(force, "1") && !db->geo2d) {
            LOG_W("mongoc: CORAINE_MONGOC_GEO2D=1: spherical geo-filters asked of a server that failed the probe");
            db->geo2d = true;
        }
        db->wildcard = probe_cap(c, db->prefix, tok, "w", "w_all", BCON_NEW("w.$**", BCON_INT32(1)),
                                 BCON_NEW("_id", BCON_INT32(1), "w", "{", "x", BCON_INT32(1), "}"),
                                 BCON_NEW("w.x", BCON_INT32(1)), &perr);
        if (!db->wildcard)
            LOG_I("mongoc: the server has no working wildcard index (%s): q's fields q.* and d.* "
                  "are not indexed", perr.message);
        ok = ensure_indexes(db, c, db->prefix, &err);
        if (ok)
            atomic_store(&db->dflt->indexed, 1);
    } else {
        bson_destroy(&reply);
    }
    mgc_push(db, c);
    if (!ok)
        return mgc_fail(p, "connecting", &err);
    return true;
}

static void set_default_int(mongoc_uri_t *uri, const char *opt, int32_t v)
{
    if (!mongoc_uri_has_option(uri, opt))
        mongoc_uri_set_option_as_int32(uri, opt, v);
}

mgc_t *mgc_open(problem_t *p)
{
    const char   *wc_flag = cr_config.db_write_concern ? cr_config.db_write_concern : "auto";
    bson_error_t  err;
    mgc_t        *db;

    if (strcmp(wc_flag, "auto") && strcmp(wc_flag, "majority") && strcmp(wc_flag, "1")) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--dbWriteConcern %.100s: expected auto, majority or 1",
                    wc_flag);
        return NULL;
    }
    pthread_once(&mgc_once, mgc_init_lib);
    db = cr_xcalloc(1, sizeof(*db));
    db->timeout_ms = cr_config.db_timeout_ms > 0 ? cr_config.db_timeout_ms : 5000;
    db->uri = mongoc_uri_new_with_error(cr_config.db_uri && *cr_config.db_uri
                                            ? cr_config.db_uri : "mongodb://127.0.0.1:27017", &err);
    if (!db->uri) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--dbURI: %s", err.message);
        free(db);
        return NULL;
    }
    set_default_int(db->uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, db->timeout_ms);
    set_default_int(db->uri, MONGOC_URI_CONNECTTIMEOUTMS, db->timeout_ms < 2000 ? db->timeout_ms : 2000);
    set_default_int(db->uri, MONGOC_URI_SOCKETTIMEOUTMS, db->timeout_ms);
    if (!mongoc_uri_has_option(db->uri, MONGOC_URI_APPNAME))
        mongoc_uri_set_appname(db->uri, "coraine");
    db->prefix = cr_xstrdup(cr_config.db_name && *cr_config.db_name ? cr_config.db_name : "coraine");
    db->max_tenants = cr_config.max_tenants > 0 ? (uint32_t)cr_config.max_tenants - 1 : UINT32_MAX;
    db->tbl_mask = 63;
    db->tbl      = cr_xcalloc(64, sizeof(*db->tbl));
    pthread_rwlock_init(&db->tlock, NULL);
    db->dflt = tenant_new("", db->prefix);
    mgc_obj_init(db);
    mgc_ctr_init(db);
    db->cache = mgc_cache_new();
    /* with minPoolSize the pool destroys clients it holds beyond it: a
     * session would outlive its client (and a new client could take its
     * address), so there every command keeps libmongoc's implicit session */
    if (mongoc_uri_get_option_as_int32(db->uri, MONGOC_URI_MINPOOLSIZE, 0) <= 0) {
        db->sess = cr_xcalloc(MGC_SESS_MAX, sizeof(*db->sess));
        pthread_mutex_init(&db->smu, NULL);
    }
    /* the documents are doc.c's (field names are hashes and fixed words):
     * libmongoc's check of every key of every write is work for nothing */
    db->wopts = BCON_NEW("validate", BCON_BOOL(false));
    uint64_t base = 0;
    if (getrandom(&base, sizeof base, 0) != (ssize_t)sizeof base)
        base = (uint64_t)cr_now_us() << 16 ^ (uint64_t)getpid() << 40;
    atomic_init(&db->token, (base & ~(1ull << 63)) | 1);   /* positive as an int64 */

    db->pool = mongoc_client_pool_new(db->uri);
    if (!db->pool) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--dbURI: libmongoc refuses it");
        mgc_close(db);
        return NULL;
    }
    mongoc_client_pool_set_error_api(db->pool, MONGOC_ERROR_API_VERSION_2);
    if (!probe(db, p)) {
        mgc_close(db);
        return NULL;
    }
    /* The write concern, now that the server is known: on a replica set a
     * write is acknowledged once a majority has it (auto or majority). */
    if (!strcmp(wc_flag, "majority") || (!strcmp(wc_flag, "auto") && db->replset)) {
        mongoc_write_concern_t *wc = mongoc_write_concern_new();

        mongoc_write_concern_set_w(wc, MONGOC_WRITE_CONCERN_W_MAJORITY);
        mongoc_write_concern_set_wtimeout_int64(wc, db->timeout_ms);
        mongoc_client_pool_destroy(db->pool);
        mongoc_uri_set_write_concern(db->uri, wc);
        mongoc_write_concern_destroy(wc);
        db->pool = mongoc_client_pool_new(db->uri);
        mongoc_client_pool_set_error_api(db->pool, MONGOC_ERROR_API_VERSION_2);
    }
    mgc_tenants_load(db);
    mgc_ctr_flush(db, false);       /* the counters' totals, as every process left them */
    mgc_watch_start(db);            /* the change stream, where there may be one (watch.c) */
    const mongoc_host_list_t *h = mongoc_uri_get_hosts(db->uri);
    LOG_I("store: mongoc at %s%s, databases %s and %s-TENANT, %s%s, write concern %s, %u named tenants, "
          "geo %s",
          h ? h->host_and_port : "?", h && h->next ? " ..." : "", db->prefix, db->prefix,
          db->replset ? "a replica set" : "a single server",
          db->claims ? " (FerretDB: writes claim their version)" : "",
          !strcmp(wc_flag, "majority") || (!strcmp(wc_flag, "auto") && db->replset) ? "majority" : "1",
          db->n_tenants, db->geo2d ? "2dsphere ($geoWithin)" : "box prefilter");
    return db;
}

void mgc_close(mgc_t *db)
{
    if (!db)
        return;
    mgc_watch_stop(db);
    if (db->pool && db->ctbl)
        mgc_ctr_flush(db, true);    /* what this process counted since its last flush */
    for (uint32_t i = 0; db->tbl && i <= db->tbl_mask; i++)
        for (mgc_tenant_t *t = db->tbl[i], *nx; t; t = nx) {
            nx = t->next;
            tenant_free(t);
        }
    free(db->tbl);
    if (db->dflt)
        tenant_free(db->dflt);
    if (db->sess) {                 /* before their clients */
        sess_free(db);
        pthread_mutex_destroy(&db->smu);
    }
    if (db->pool)
        mongoc_client_pool_destroy(db->pool);
    if (db->uri)
        mongoc_uri_destroy(db->uri);
    pthread_rwlock_destroy(&db->tlock);
    mgc_obj_free(db);
    mgc_outbox_free(db);
    mgc_ctr_free(db);
    mgc_cache_free(db->cache);
    if (db->wopts)
        bson_destroy(db->wopts);
    free(db->prefix);
    free(db);
}
