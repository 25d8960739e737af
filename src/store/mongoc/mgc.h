/*
 * mgc.h - the MongoDB store (--database mongoc) as its files share it.
 * Internal to src/store/mongoc/: store.c sees only mgc_backend; every other
 * module sees store.h. doc/mongodb.md has the layout and its reasons.
 *
 * Shape:
 *
 *   mgc_t ── mongoc_client_pool_t (thread-safe; a request pops a client and
 *   │        pushes it back: libmongoc reconnects by itself; each client its
 *   │        own explicit session, mgc_copts)
 *   ├─ tenant table (rwlock) ── name -> mgc_tenant_t, never freed before close
 *   ├─ capabilities probed at start (conn.c): replica set (hello: write
 *   │  concern majority, change streams), FerretDB (buildInfo: claims),
 *   │  2dsphere and wildcard indexes (tried on a scratch collection)
 *   └─ watch.c's thread: a change stream on the version document (replica set)
 *
 *   Per tenant a database: --dbName for the default tenant, --dbName-TENANT
 *   (escaped: mgc_tenant_dbname) for the others, listed in the collection
 *   "tenants" of the default database. In each:
 *     entities  {_id: id, t: [types], c: createdAt µs, m: modifiedAt µs,
 *                v: version (1, 2 ...), w: write token, a: [attribute names],
 *                s: [scopes], q: {hHASH: scalar}, d: {hHASH: µs}, qx: [hHASH],
 *                g: {hHASH(GeoProperty): {x0, y0, x1, y1}} (bounding boxes),
 *                gj: {hHASH: GeoJSON Point} (2dsphere servers only, one-Point names),
 *                e: BinData (the version, model/codec.h)}
 *     objects   {_id: "KIND/ID", k: kind, i: id, o: order µs, j: JSON text}
 *   and "meta" {_id: "objects", v: N} in the default database: bumped by
 *   every object write, polled by other processes (--syncInterval).
 *
 * Ordering (store.h's change stream): each process numbers ITS commits of a
 * tenant; a write holds the tenant's write mutex from its stamp (commit time
 * max(clock, last + 1, the entity's modifiedAt + 1)) to its acknowledgement,
 * so seqs are dense and in commit order per process. Between processes the
 * version check orders the writes of one entity: a write replaces version v
 * only where the stored document still has v, else it reads again and
 * re-applies (MGC_RETRIES times).
 */
#ifndef CORAINE_STORE_MGC_H
#define CORAINE_STORE_MGC_H

#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../store.h"

#define MGC_INDEXES_MAX 80          /* index names listed per collection (MongoDB allows 64) */
#define MGC_RETRIES 64              /* version conflicts before a write gives up (503) */

/* A stored version: its number and its write token (unique per write, over
 * every process: the condition of the next write). */
typedef struct mgc_ver {
    int64_t v, w;
} mgc_ver_t;

typedef struct mgc_tenant {
    struct mgc_tenant *next;        /* hash chain */
    char              *name;        /* "" for the default */
    char              *dbname;
    pthread_mutex_t    wmu;         /* held by a write from its stamp to its acknowledgement */
    uint64_t           seq;         /* this process's last seq (under wmu) */
    int64_t            last_at;     /* this process's last commit time (under wmu) */
    store_stream_t    *stream;
    _Atomic int        indexed;     /* the indexes of its database were ensured */
    char             (*geo_keys)[24];   /* GeoProperty boxes indexed (under wmu) */
    uint32_t           n_geo_keys;
    uint32_t           n_claims;    /* claims left since the last sweep (write.c, under wmu) */
    _Atomic int64_t    ob_open;     /* outbox entries this process owns whose change has not ended */
} mgc_tenant_t;

typedef struct mgc_objent mgc_objent_t;   /* objects.c: an object as this process last saw it */
typedef struct mgc_cache  mgc_cache_t;    /* cache.c: decoded versions by (tenant, id), checked by token */
typedef struct mgc_outbox mgc_outbox_t;   /* outbox.c: the notification outbox (NULL: off) */
typedef struct mgc_ctrent mgc_ctrent_t;
typedef struct mgc_watch  mgc_watch_t;    /* watch.c: the change stream thread */   /* counters.c: an object's counters, totals and pending deltas */

typedef struct mgc {
    mongoc_client_pool_t *pool;
    mongoc_uri_t         *uri;
    char                 *prefix;   /* --dbName */
    pthread_rwlock_t      tlock;    /* the tenant table */
    mgc_tenant_t        **tbl;
    uint32_t              tbl_mask, n_tenants;
    mgc_tenant_t         *dflt;
    uint32_t              max_tenants;   /* named ones */
    bool                  replset, geo2d, wildcard;   /* probed at start (conn.c) */
    mgc_watch_t          *watch;    /* watch.c: the change stream on the version document (NULL: none) */
    bool                  claims;   /* the server's conditional update is not atomic (FerretDB): write.c claims */
    int                   timeout_ms;
    _Atomic uint64_t      token;    /* write tokens: per process random base + counter */
    mgc_cache_t          *cache;
    _Atomic uint64_t      scan_docs, scan_matched;   /* query.c's scans: documents read, matched */
    _Atomic uint64_t      geo_refused;               /* query.c: spherical filters refused, box used */
    bson_t               *wopts;    /* the options of inserts and replaces: {validate: false} */
    /* conn.c: an explicit session per pooled client (mgc_copts), never removed before close */
    pthread_mutex_t       smu;      /* adding one */
    struct mgc_sess      *sess;     /* MGC_SESS_MAX */
    _Atomic uint32_t      n_sess;
    /* objects.c: the stored objects as this process last wrote or read them */
    pthread_mutex_t       omu;
    mgc_objent_t        **otbl;
    uint32_t              omask, on, ogen;
    int64_t               obj_v;    /* the version document, as last read (-1: never) */
    mgc_outbox_t         *outbox;
    /* counters.c: the objects' counters (store_ctr_*) */
    pthread_mutex_t       cmu, cflush;
    mgc_ctrent_t        **ctbl;
    uint32_t              cmask, cn;
    int64_t               ctr_read_at;   /* the last read back (under cflush; 0: never: read them all) */
    char                 *ctr_proc;      /* this process's name in the counters (--brokerAlias) */
} mgc_t;

extern const store_backend_t mgc_backend;

/* conn.c: clients, errors, tenants, indexes */
mongoc_client_t     *mgc_pop(mgc_t *db);
void                 mgc_push(mgc_t *db, mongoc_client_t *c);
/* The options of a command on client c that name c's own explicit session
 * ({sessionId}: started once per client, causal consistency off), or NULL
 * (no sessions: libmongoc's implicit one). An implicit session is started and
 * ended around every command (~5k instructions, callgrind); this one is not. */
const bson_t        *mgc_copts(mgc_t *db, mongoc_client_t *c);
/* The problem for a failed call: 503 (PB_HTTP) when the database cannot be
 * reached or answer in time, else InternalError; always false. */
bool                 mgc_fail(problem_t *p, const char *what, const bson_error_t *err);
bool                 mgc_is_dup(const bson_error_t *err);
/* The server answered and refused the command (not down, not "not now"). */
bool                 mgc_refused(const bson_error_t *err);
/* One write command (insert, update or delete; cmd built by the caller) on
 * database dbname: libmongoc's client command rather than its collection
 * helpers, whose write-command structure and merged result cost a write
 * ~10k instructions more (callgrind). *n (may be NULL): the reply's n
 * (inserted, matched or deleted). The first of writeErrors is an error in
 * err (its code: mgc_is_dup), as libmongoc makes a writeConcernError; the
 * server's retryable-write rules are libmongoc's, as for the helpers. */
bool                 mgc_write(mgc_t *db, mongoc_client_t *c, const char *dbname, const bson_t *cmd, int64_t *n,
                               bson_error_t *err);
/* A document larger than this goes through the collection helpers (their
 * OP_MSG document sequence): a command holding it could pass the server's
 * 16 MB limit on a command. */
#define MGC_CMD_DOC_MAX (8u << 20)
/* A known tenant, or NULL: NonexistentTenant (or 503). */
mgc_tenant_t        *mgc_tenant_get(mgc_t *db, const char *tenant, problem_t *p);
/* The tenant, created (registered in the database) on first use. */
mgc_tenant_t        *mgc_tenant_open(mgc_t *db, const char *tenant, problem_t *p);
/* Its collection (the caller destroys it) on client c, indexes ensured once. */
mongoc_collection_t *mgc_coll(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const char *name);
/* The indexes of t's database ensured (once), without a collection. */
void                 mgc_indexes(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t);
uint64_t             mgc_token(mgc_t *db);
/* wmu held: an index on the box of each GeoProperty of e, and with geo2d a
 * 2dsphere index on its Point (gj), created once. */
void                 mgc_geo_index(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const cr_entity_t *e);
/* The index of GeoProperty key: the box's (x0) or the Point's (2dsphere). */
void                 mgc_geo_index_spec(const char *key, bool sphere, char name[24], bson_t *k);
/* The i-th index every tenant database gets (and later ones: i counts on):
 * its name, collection and key (initialized here); NULL past the last. */
const char          *mgc_index_spec(const mgc_t *db, size_t i, const char **coll, bson_t *key);
/* The tenant's next commit time (wmu held), after `floor`. */
int64_t              mgc_clock(mgc_tenant_t *t, int64_t floor);
void                 mgc_tenant_each(mgc_t *db, void (*fn)(void *ud, mgc_tenant_t *t), void *ud);
/* Every tenant named in the database (other processes' too) into the table. */
void                 mgc_tenants_load(mgc_t *db);
mgc_t               *mgc_open(problem_t *p);
void                 mgc_close(mgc_t *db);

/* doc.c: an entity version as a document, and back; geojson (db->geo2d):
 * also gj, the Point of each GeoProperty of one Point instance. */
void                 mgc_doc_entity(bson_t *doc, const cr_entity_t *e, int64_t version, uint64_t token,
                                    bool geojson);
/* The field of g (under "g.") and of q / qx that stands for attribute name
 * (cr_hash_stable: every process computes the same; cr_hash is keyed per process). */
void                 mgc_geo_key(char buf[24], const char *name);
/* The fields of an entity document a read needs, in one pass (borrowed from doc). */
typedef struct mgc_docf {
    const char    *id;
    int64_t        c;
    mgc_ver_t      ver;
    const uint8_t *e;
    uint32_t       e_len;
} mgc_docf_t;
void                 mgc_doc_fields(const bson_t *doc, mgc_docf_t *f);
/* A frozen entity from the document's "e" (NULL: not one: InternalError in p). */
cr_entity_t         *mgc_doc_decode(const mgc_docf_t *f, problem_t *p);

/* filter.c: the server-side part of f into q (initialized here); true when
 * it is all of f (no broker-side predicate remains). geo2d: the server has
 * 2dsphere and $geoWithin (db->geo2d): the geo part also asks gj. */
bool                 mgc_filter(const entity_filter_t *f, bool geo2d, bson_t *q);
/* A regex PCRE2, MongoDB and RE2 (FerretDB) read alike; for_values: also
 * alike on text with newlines and vertical tabs (q's ~=). */
bool                 mgc_regex_portable(const char *s, size_t n, bool for_values);

/* cache.c (the rule of its use across processes is at its top) */
#define MGC_CACHE_SLOTS 8192u       /* versions held at most (direct-mapped) */
#define MGC_CACHE_LOCKS 64
mgc_cache_t *mgc_cache_new(void);
void         mgc_cache_free(mgc_cache_t *c);
/* The cached version of id if its token is w (a new reference), or NULL. */
cr_entity_t *mgc_cache_get(mgc_cache_t *c, const mgc_tenant_t *t, const char *id, int64_t w);
/* The cached version of id, whatever its token, and that token (a new
 * reference), or NULL: only as the base of a write conditional on *ver. */
cr_entity_t *mgc_cache_peek(mgc_cache_t *c, const mgc_tenant_t *t, const char *id, mgc_ver_t *ver);
void         mgc_cache_put(mgc_cache_t *c, const mgc_tenant_t *t, cr_entity_t *e, mgc_ver_t ver);
void         mgc_cache_drop(mgc_cache_t *c, const mgc_tenant_t *t, const char *id);

/* write.c */
bool mgc_create(mgc_t *db, const char *tenant, const cr_entity_t *draft, store_change_t *ch, problem_t *p);
bool mgc_upsert(mgc_t *db, const char *tenant, const cr_entity_t *draft, bool replace, bool *created,
                arena_t *scratch, store_change_t *ch, problem_t *p);
bool mgc_modify(mgc_t *db, const char *tenant, const char *id, entity_op_t op, const cr_entity_t *patch,
                const op_args_t *args, op_result_t *res, arena_t *scratch, store_change_t *ch,
                problem_t *p);
bool mgc_remove(mgc_t *db, const char *tenant, const char *id, const typesel_t *if_type,
                store_change_t *ch, problem_t *p);
bool mgc_batch(mgc_t *db, const char *tenant, store_batch_item_t *items, size_t n, arena_t *scratch,
               store_change_t *group, size_t *n_group, problem_t *p);
bool mgc_purge(mgc_t *db, const char *tenant, const entity_filter_t *f, size_t *deleted,
               void (*emit)(void *ud, store_change_t *group, size_t n), void *ud, problem_t *p);

/* outbox.c: an entry per change that may be due, written before the change
 * (the order and the rest at its top) */
typedef struct mgc_obx {
    store_op_t         op;
    int64_t            at;
    const cr_entity_t *before;
    int64_t            id;          /* the entry, once written (0: none) */
} mgc_obx_t;
void mgc_outbox_set(void *db, bool (*due)(void *ud, const char *tenant, const cr_entity_t *e), void *ud);
void mgc_outbox_free(mgc_t *db);
/* The change of e (after, or before for a delete) needs an entry. */
bool mgc_outbox_wants(mgc_t *db, const mgc_tenant_t *t, const cr_entity_t *e);
/* wmu held: x's entry for the change of version prev to next (after NULL,
 * next {0, 0}: a delete); false: not written (p), the change must not be. */
bool mgc_outbox_put(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, mgc_obx_t *x, const cr_entity_t *after,
                    mgc_ver_t prev, mgc_ver_t next, problem_t *p);
/* The write of x's change did not commit (known) or its outcome is not known. */
void mgc_outbox_abandon(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, mgc_obx_t *x, bool known);
/* A batch's entries (write.c's bulk paths): one insertMany for all, before
 * the bulk write of their changes (false: not written, p; none of the
 * changes may be), and one delete of those whose change did not commit. */
typedef struct mgc_obx_req {
    mgc_obx_t         *x;
    const cr_entity_t *after;       /* NULL: a delete (next {0, 0}) */
    mgc_ver_t          prev, next;
} mgc_obx_req_t;
bool mgc_outbox_put_many(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, mgc_obx_req_t *r, size_t n,
                         problem_t *p);
void mgc_outbox_abandon_many(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, mgc_obx_t *const *x, size_t n);
void mgc_outbox_done(void *db, const char *tenant, uint64_t id);
void mgc_outbox_sweep(void *db, void (*emit)(void *ud, store_change_t *g, size_t n), void *ud);

/* query.c */
cr_entity_t *mgc_get(mgc_t *db, const char *tenant, const char *id, problem_t *p);
/* The entity's current version, asked of the server on client c (NULL:
 * none, or *failed and p set when the read failed); the cached frozen
 * version when the server's token is its token. */
cr_entity_t *mgc_read(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const char *id, mgc_ver_t *ver,
                      bool *failed, problem_t *p);
/* An id table over ids[0..n) (open addressing, in the arena a): the index of
 * the FIRST occurrence of id, or -1. */
typedef struct mgc_idmap {
    const char *const *ids;
    int32_t           *slot;        /* index + 1; 0: empty */
    uint32_t           mask;
} mgc_idmap_t;
void         mgc_idmap_init(mgc_idmap_t *m, const char *const *ids, size_t n, arena_t *a);
int32_t      mgc_idmap_find(const mgc_idmap_t *m, const char *id);
/* The current versions of the distinct ids[0..n) in one find: out[i] (a new
 * reference, NULL: not there) and ver[i]; false: the read failed (p). */
bool         mgc_read_many(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const char *const *ids,
                           size_t n, cr_entity_t **out, mgc_ver_t *ver, arena_t *a, problem_t *p);
bool mgc_query(mgc_t *db, const char *tenant, const entity_filter_t *f, arena_t *a, store_page_t *out,
               problem_t *p);
bool mgc_foreach(mgc_t *db, const char *tenant, const entity_filter_t *f,
                 void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p);
bool mgc_types(mgc_t *db, const char *tenant, void (*fn)(void *ud, const char *type), void *ud,
               problem_t *p);
bool mgc_attributes(mgc_t *db, const char *tenant, void (*fn)(void *ud, const char *name), void *ud,
                    problem_t *p);
void mgc_stats(mgc_t *db, uint64_t *entities, uint64_t *tenants);
bool mgc_tenant_entities(mgc_t *db, const char *tenant, uint64_t *n);

/* watch.c: a change stream on the default database's version document,
 * started where hello shows a replica set (or CORAINE_MONGOC_WATCH=1):
 * while it is open, mgc_obj_changed asks it instead of the server. */
void  mgc_watch_start(mgc_t *db);
void  mgc_watch_stop(mgc_t *db);
/* -1: no stream open (poll the version document); else 1 when an event came
 * (or the stream was opened again) since the last call, 0 when none. */
int   mgc_watch_changed(mgc_t *db);
/* The watch's pipeline and options (resume token: NULL for none). */
void  mgc_watch_pipeline(bson_t *pipeline);
void  mgc_watch_opts(bson_t *opts, const bson_t *resume, int32_t await_ms);

/* objects.c */
bool  mgc_obj_put(mgc_t *db, const char *tenant, int kind, const char *id, const char *json, size_t len,
                  bool create_only, problem_t *p);
bool  mgc_obj_delete(mgc_t *db, const char *tenant, int kind, const char *id, problem_t *p);
char *mgc_obj_get(mgc_t *db, const char *tenant, int kind, const char *id, arena_t *a, size_t *len,
                  problem_t *p);
bool  mgc_obj_changed(mgc_t *db);
void  mgc_obj_sync(mgc_t *db, int kind,
                   void (*put)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                   void (*gone)(void *ud, const char *tenant, const char *id), void *ud);
void  mgc_obj_init(mgc_t *db);
void  mgc_obj_free(mgc_t *db);
void  mgc_obj_foreach(mgc_t *db, int kind,
                      void (*fn)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                      void *ud);

/* counters.c (store.h store_ctr_*) */
void  mgc_ctr_init(mgc_t *db);
void  mgc_ctr_free(mgc_t *db);
void  mgc_ctr_add(mgc_t *db, const char *tenant, int kind, const char *id, const store_ctr_t *d);
bool  mgc_ctr_read(mgc_t *db, const char *tenant, int kind, const char *id, store_ctr_t *tot);
/* Every pending delta in one bulk write, then (not closing) the totals any process changed read back. */
void  mgc_ctr_flush(mgc_t *db, bool closing);
/* The object was deleted: its counters too (on client c). */
void  mgc_ctr_drop(mgc_t *db, mongoc_client_t *c, const char *tenant, int kind, const char *id);

#endif
