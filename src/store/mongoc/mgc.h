/*
 * mgc.h - the MongoDB store (--database mongoc) as its files share it.
 * Internal to src/store/mongoc/: store.c sees only mgc_backend; every other
 * module sees store.h. doc/mongodb.md has the layout and its reasons.
 *
 * Shape:
 *
 *   mgc_t ── mongoc_client_pool_t (thread-safe; a request pops a client and
 *   │        pushes it back: libmongoc reconnects by itself)
 *   ├─ tenant table (rwlock) ── name -> mgc_tenant_t, never freed before close
 *   └─ capabilities read at start (hello): replica set (write concern
 *      majority, change streams), 2dsphere (real MongoDB)
 *
 *   Per tenant a database: --dbName for the default tenant, --dbName-TENANT
 *   (escaped: mgc_tenant_dbname) for the others, listed in the collection
 *   "tenants" of the default database. In each:
 *     entities  {_id: id, t: [types], c: createdAt µs, m: modifiedAt µs,
 *                v: version (1, 2 ...), w: write token, a: [attribute names],
 *                g: {hHASH(GeoProperty): {x0, y0, x1, y1}} (bounding boxes),
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

#include "../store.h"

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
} mgc_tenant_t;

typedef struct mgc_objent mgc_objent_t;   /* objects.c: an object as this process last saw it */
typedef struct mgc_cache  mgc_cache_t;    /* cache.c: decoded versions by (tenant, id), checked by token */

typedef struct mgc {
    mongoc_client_pool_t *pool;
    mongoc_uri_t         *uri;
    char                 *prefix;   /* --dbName */
    pthread_rwlock_t      tlock;    /* the tenant table */
    mgc_tenant_t        **tbl;
    uint32_t              tbl_mask, n_tenants;
    mgc_tenant_t         *dflt;
    uint32_t              max_tenants;   /* named ones */
    bool                  replset, geo2d;
    bool                  claims;   /* the server's conditional update is not atomic (FerretDB): write.c claims */
    int                   timeout_ms;
    _Atomic uint64_t      token;    /* write tokens: per process random base + counter */
    mgc_cache_t          *cache;
    bson_t               *wopts;    /* the options of inserts and replaces: {validate: false} */
    /* objects.c: the stored objects as this process last wrote or read them */
    pthread_mutex_t       omu;
    mgc_objent_t        **otbl;
    uint32_t              omask, on, ogen;
    int64_t               obj_v;    /* the version document, as last read (-1: never) */
} mgc_t;

extern const store_backend_t mgc_backend;

/* conn.c: clients, errors, tenants, indexes */
mongoc_client_t     *mgc_pop(mgc_t *db);
void                 mgc_push(mgc_t *db, mongoc_client_t *c);
/* The problem for a failed call: 503 (PB_HTTP) when the database cannot be
 * reached or answer in time, else InternalError; always false. */
bool                 mgc_fail(problem_t *p, const char *what, const bson_error_t *err);
bool                 mgc_is_dup(const bson_error_t *err);
/* A known tenant, or NULL: NonexistentTenant (or 503). */
mgc_tenant_t        *mgc_tenant_get(mgc_t *db, const char *tenant, problem_t *p);
/* The tenant, created (registered in the database) on first use. */
mgc_tenant_t        *mgc_tenant_open(mgc_t *db, const char *tenant, problem_t *p);
/* Its collection (the caller destroys it) on client c, indexes ensured once. */
mongoc_collection_t *mgc_coll(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const char *name);
uint64_t             mgc_token(mgc_t *db);
/* wmu held: an index on the box of each GeoProperty of e, created once. */
void                 mgc_geo_index(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const cr_entity_t *e);
/* The tenant's next commit time (wmu held), after `floor`. */
int64_t              mgc_clock(mgc_tenant_t *t, int64_t floor);
void                 mgc_tenant_each(mgc_t *db, void (*fn)(void *ud, mgc_tenant_t *t), void *ud);
/* Every tenant named in the database (other processes' too) into the table. */
void                 mgc_tenants_load(mgc_t *db);
mgc_t               *mgc_open(problem_t *p);
void                 mgc_close(mgc_t *db);

/* doc.c: an entity version as a document, and back */
void                 mgc_doc_entity(bson_t *doc, const cr_entity_t *e, int64_t version, uint64_t token);
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

#endif
