/*
 * ops.h - the NGSI-LD operations (clause 5) as functions of a parsed
 * request, with no transport in them.
 *
 * A caller (the HTTP binding in api/ today; forwarding to other brokers,
 * cor:// and the temporal API later) turns its own request into an ops_req_t
 * (store, tenant, the resolved @context, an arena), the operation's
 * parameters into typed C values and its body into a json_t tree, calls one
 * ops_* function, and gets back either a result or a problem_t. The result
 * is what the operation produced (an entity id, frozen entity references, a
 * page, an UpdateResult, a BatchOperationResult, discovery sets); it never
 * contains rendered text.
 *
 * What stays with the caller, and why:
 * - Parsing its wire format: the query string or the JSON text of a body,
 *   headers, media types. ops/ takes json_t trees and typed values.
 * - Resolving the @context (6.3.5). A remote @context may have to be
 *   downloaded, and a binding may suspend its request while it is (HTTP:
 *   the connection), so an operation never waits on the network. A batch
 *   therefore gets one ops_member_t per entity with that entity's context
 *   already resolved.
 * - Rendering. An entity page is handed over as references to frozen
 *   entities; the HTTP binding renders them as JSON-LD or GeoJSON with Link
 *   headers and pagination links, cor:// will render its own frames from
 *   the same references. Rendering happens after the store lock is released
 *   (the store hands out immutable versions), so it costs no lock time, and
 *   the render cache of model/ serves every binding alike.
 *
 * Every function reports failures as a problem_t (6.3.2) and changes
 * nothing when it fails, except where the operation is defined per entity:
 * in a batch each entity succeeds or fails on its own (the failures are in
 * the result), and purge changes each entity atomically, one after the
 * other. Results live in rq->arena; entity references
 * (cr_entity_t * from ops_entity_retrieve, the items of an ops_page_t) must
 * be released by the caller (entity_unref / ops_page_release).
 *
 * Only ops/ calls the store (store.h), and each operation from one place in
 * its own file (query: ops_query; discovery: ops_discover; purge: ops_purge
 * and its drop/keep helper; linked entities: fetch() in join.c, a query by
 * ids; batches: one store_batch). The store does what needs its indexes or
 * its atomic step: the ?type= precondition (op_args_t.if_type,
 * store_delete_if), discovery lists (store_types, store_attributes), several
 * entity selectors (entity_filter_t.sel), a batch as one group of changes.
 */
#ifndef CORAINE_OPS_H
#define CORAINE_OPS_H

#include "../core/core.h"
#include "../json/json.h"
#include "../ld/ld.h"
#include "../model/model.h"
#include "../store/store.h"
#include "../history/history.h"

/* What every operation gets: the store, the tenant (NULL or "": default),
 * the @context that expands the names of parameters and body, and the arena
 * that holds drafts, scratch and results until the caller has rendered. */
typedef struct ops_req {
    store_t            *store;
    const char         *tenant;
    const ld_context_t *ctx;
    arena_t            *arena;
} ops_req_t;

/* ------------------------------------------------------ history admission
 * Every write of ops/ (but a purge's chunks) is admitted by the history
 * first (history_reserve: a backend whose queue is full answers 503 and
 * nothing is written), and the reservation is held for the write call, in
 * which the change hook appends the write's history; ops_admitted gives it
 * back and returns ok. Under --history none or corDB this is one test. */
bool ops_admit(const ops_req_t *rq, size_t n, problem_t *p);
bool ops_admitted(const ops_req_t *rq, size_t n, bool ok);

/* ------------------------------------------------------ validators
 * The operations check their inputs themselves; these are exported so that a
 * binding can report the same errors in the order its protocol defines. */

/* An entity id: a URI (BadRequestData otherwise). */
bool ops_check_id(const char *id, problem_t *p);
/* An attribute name in a path: a valid name or IRI; to write it (writing
 * true), also not a member of the entity (id, type, scope, @context,
 * createdAt, modifiedAt). */
bool ops_check_attr_name(const char *name, bool writing, problem_t *p);
/* The precondition ?type= of an operation by id (Tables 6.5.3.2-1,
 * 6.6.3.x-1): type (4.17 text, expanded with rq->ctx; NULL: none) parsed
 * into *ts (NULL when type is NULL) for the store, which checks it in the
 * same atomic step as the write (op_args_t.if_type, store_delete_if): an
 * entity of another type is ResourceNotFound and nothing changes. */
bool ops_if_type(const ops_req_t *rq, const char *type, const typesel_t **ts, problem_t *p);

/* ------------------------------------------------------ entities.c */

/* Create Entity (5.6.1): body is the entity (an object). *id gets its id. */
bool ops_entity_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p);

/* The payload of a write to entity id checked as the operation checks it,
 * writing nothing (what a distributed write checks before anything is
 * forwarded, 5.5.4): flags EP_CREATE for create; else a fragment of id
 * (EP_MERGE for merge and update, 0 for append and, with need_type, for
 * replace). */
bool ops_payload_check(const ops_req_t *rq, const char *id, const json_t *body, unsigned flags, bool need_type,
                       problem_t *p);

/* Retrieve Entity (5.7.1). type: a type selection (4.17 text) the entity must
 * match, or NULL; attrs: expanded names of which the entity must have at least
 * one (Table 6.5.3.1-1), or none. A reference to release with entity_unref(). */
typedef struct ops_retrieve {
    const char  *type;
    const char **attrs;
    size_t       n_attrs;
    /* pick (4.21): the entity members ("@id", "@type", MN.scope, expanded
     * attribute names) of which the entity must have one, else ResourceNotFound */
    const char **pick;
    size_t       n_pick;
    /* omit (4.21): the entity members removed; when they are all of them
     * (id, type, scope and every attribute), ResourceNotFound */
    const char **omit;
    size_t       n_omit;
} ops_retrieve_t;
cr_entity_t *ops_entity_retrieve(const ops_req_t *rq, const char *id, const ops_retrieve_t *o, problem_t *p);

/* Delete Entity (5.6.6). type: the ?type= precondition (ops_if_type), or NULL. */
bool ops_entity_delete(const ops_req_t *rq, const char *id, const char *type, problem_t *p);

/* Merge Entity (5.6.17): key_values takes the values alone (each attribute
 * keeps its type), lang makes plain strings the text of that language,
 * observed_at (0: none) re-stamps the attributes that have one; type: the
 * ?type= precondition (ops_if_type), or NULL. */
typedef struct ops_merge {
    bool        key_values;
    const char *lang;
    int64_t     observed_at;
    const char *type;
} ops_merge_t;
bool ops_entity_merge(const ops_req_t *rq, const char *id, const json_t *body, const ops_merge_t *o,
                      problem_t *p);

/* Replace Entity (5.6.18): body is the whole new entity (type required);
 * type: the ?type= precondition (ops_if_type), or NULL. */
bool ops_entity_replace(const ops_req_t *rq, const char *id, const json_t *body, const char *type, problem_t *p);

/* ------------------------------------------------------ attrs.c */

/* Append Entity Attributes (5.6.3) and Update Entity Attributes (5.6.2):
 * res gets the per-attribute outcome (an UpdateResult, 5.2.18) when some
 * attribute was not updated (res->n_not_updated > 0). type: the ?type=
 * precondition (ops_if_type), or NULL. */
bool ops_attrs_append(const ops_req_t *rq, const char *id, const json_t *body, bool no_overwrite,
                      const char *type, op_result_t *res, problem_t *p);
bool ops_attrs_update(const ops_req_t *rq, const char *id, const json_t *body, const char *type,
                      op_result_t *res, problem_t *p);
/* Partial Attribute Update (5.6.4) and Replace Attribute (5.6.19): body is
 * the attribute (its "@context" member, if any, is ignored). type: the
 * ?type= of 6.7.3.1-3 (NULL: any), checked in the store's atomic step. */
bool ops_attr_patch(const ops_req_t *rq, const char *id, const char *name, json_t *body, const char *type,
                    problem_t *p);
bool ops_attr_replace(const ops_req_t *rq, const char *id, const char *name, json_t *body, const char *type,
                      problem_t *p);
/* Delete Attribute (5.6.5): one instance (dataset_id, NULL: the default) or
 * all of them (delete_all). */
bool ops_attr_delete(const ops_req_t *rq, const char *id, const char *name, const char *dataset_id,
                     bool delete_all, const char *type, problem_t *p);

/* ------------------------------------------------------ batch.c */

/* One entity of a batch with the @context that applies to it (the caller's
 * resolution of 6.3.5 for that entity). ctx NULL: resolution failed and
 * ctx_problem says why (the entity fails with it). */
typedef struct ops_member {
    const json_t       *body;
    const ld_context_t *ctx;
    const problem_t    *ctx_problem;
} ops_member_t;

typedef enum {
    OPS_BATCH_CREATE,   /* 5.6.7 */
    OPS_BATCH_UPSERT,   /* 5.6.8: replace, or update with replace=false */
    OPS_BATCH_UPDATE,   /* 5.6.9: no_overwrite */
    OPS_BATCH_MERGE,    /* 5.6.20 */
} ops_batch_kind_t;

typedef struct ops_batch_opts {
    bool replace;
    bool no_overwrite;
} ops_batch_opts_t;

/* A failed entity: allocated (in rq->arena) only when an entity fails. */
typedef struct ops_batch_error {
    struct ops_batch_error *next;
    const char             *id;        /* NULL when the member has none */
    problem_t               problem;
} ops_batch_error_t;

/* BatchOperationResult (5.2.17): ids in body order; upsert also lists the
 * ids it created. */
typedef struct ops_batch_result {
    const char       **ok;       size_t n_ok;
    const char       **created;  size_t n_created;
    ops_batch_error_t *errors;   size_t n_errors;   /* in body order */
    ops_batch_error_t *last;
} ops_batch_result_t;

/* The batch operations. false (with p) only when the request as a whole is
 * invalid (an empty batch, a null member, more than --maxBatchSize
 * entities: BadRequestData; a tenant never written without a creating
 * entity: NonexistentTenant); then nothing was written. Each entity is
 * validated on its own, then the valid ones are written in ONE store_batch
 * (one atomic step, one group of changes for the hooks), in order, each
 * succeeding or failing on its own. */
bool ops_batch_write(const ops_req_t *rq, ops_batch_kind_t kind, const ops_member_t *m, size_t n,
                     const ops_batch_opts_t *o, ops_batch_result_t *res, problem_t *p);
/* The checks of the batch as a whole (an array, not empty, no null
 * member, at most --maxBatchSize): what a distributed batch checks before
 * anything is forwarded. */
bool ops_batch_check(const json_t *body, problem_t *p);
/* Batch Delete (5.6.10): ids is the body, an array of entity ids. */
bool ops_batch_delete(const ops_req_t *rq, const json_t *ids, ops_batch_result_t *res, problem_t *p);

/* ------------------------------------------------------ query.c */

/* Query Entities (5.7.2): f (the common part: ids, idPattern, type, q, geo,
 * scope, attrs) and the EntitySelectors sel[0..nsel) of POST
 * /entityOperations/query (an entity matches one of them and f; they go to
 * the store as f.sel, which serves them from its id and type indexes), a
 * page (limit/offset, 4.12) and the count (4.13). */
typedef struct ops_query {
    entity_filter_t    f;
    entity_selector_t *sel;
    size_t             nsel;
    size_t             limit, offset;
    bool               count;
} ops_query_t;

/* A page of references in creation order; more: a next page exists;
 * count: all matches (when asked for). Release with ops_page_release(). */
typedef struct ops_page {
    cr_entity_t **items;
    size_t        n;
    size_t        count;
    bool          more;
} ops_page_t;

/* q terms into linked entities (4.9 rel{...}) are resolved first: one scan
 * of the linked entities per term (at most 100000 targets each,
 * TooManyResults beyond). The binding checks that join is given and
 * deep enough (5.7.2.4). */
/* The page limits (--maxLimit; limit 0 only with count). */
bool ops_query_check(const ops_query_t *qy, problem_t *p);
bool ops_query(const ops_req_t *rq, const ops_query_t *qy, ops_page_t *pg, problem_t *p);
void ops_page_release(ops_page_t *pg);
/* Resolves q's terms into linked entities (q_link_resolve) in the tenant of
 * rq: q is written, so a tree shared between threads is q_clone'd first. */
bool ops_q_resolve(const ops_req_t *rq, q_expr_t *q, problem_t *p);

/* ------------------------------------------------------ join.c */

/* Linked Entity retrieval (4.5.23): the entities that the Relationships and
 * ListRelationships of the matched entities (the roots) target, and theirs,
 * up to `level` hops, each fetched once (one store call per level for all
 * the new targets of that level). Only the relationships the projection
 * keeps are followed (pick/omit trees, projection_link for each hop).
 * containedBy ids are taken as encountered already: never fetched. A target
 * not held here is simply not in the result. */
typedef struct ops_join {
    bool                flat;           /* join=flat (else inline) */
    unsigned            level;          /* joinLevel, >= 1 */
    const char        **contained_by;
    size_t              n_contained_by;
    const projection_t *pick, *omit;
    const char        **dataset_ids;    /* flat: only the relationship instances kept (4.5.5); 0: all */
    size_t              n_dataset_ids;
} ops_join_t;

/* The linked entities (references) in the order they were found (breadth
 * first: the order of a flat answer, 4.5.23.3), with the projection each
 * was reached with, and an index by id over them and the roots. */
typedef struct ops_linked {
    cr_entity_t        **items;
    const projection_t **pick, **omit;
    size_t               n, cap;
    const char         **slot_id;       /* open addressing over ids: roots, targets, containedBy */
    const cr_entity_t  **slot_e;        /* NULL: not held here (or containedBy) */
    size_t               nslot, used;
    arena_t             *a;
} ops_linked_t;

/* At most this many linked entities are fetched, or inlined, for one
 * answer (TooManyResults past it). */
#define OPS_JOIN_MAX_ENTITIES 10000
bool ops_join_fetch(const ops_req_t *rq, cr_entity_t *const *roots, size_t n_roots, const ops_join_t *j,
                    ops_linked_t *l, problem_t *p);
/* The entity with that id among the roots and the fetched ones (render_join_t.find). */
const cr_entity_t *ops_linked_find(const void *l, const char *id);
void ops_linked_release(ops_linked_t *l);

/* ------------------------------------------------------ purge.c */

/* Purge Entities (5.6.21): deletes the entities matching f; or, with names
 * (drop, keep false / keep, keep true), deletes from each only the
 * attributes listed / all but those, each entity atomically. *deleted gets
 * the number of entities deleted (0 with names). */
bool ops_purge(const ops_req_t *rq, const entity_filter_t *f, const char **names, size_t n_names, bool keep,
               size_t *deleted, problem_t *p);

/* ------------------------------------------------------ discovery.c */

/* An insertion-ordered set of interned names, each with the related names
 * (attributes of a type, types of an attribute), its attribute kinds (bit
 * 1 << attr_kind_t) and how many entities (types) or attribute instances
 * (attributes) have it. */
typedef struct ops_name {
    const char  *name;
    const char **rel;
    size_t       n_rel, cap_rel;
    unsigned     kinds;
    size_t       count;
} ops_name_t;

typedef struct ops_names {
    arena_t    *a;
    ops_name_t *v;
    size_t      n, cap;
    size_t     *slot;            /* open addressing: index+1, 0 = empty */
    size_t      nslot;
} ops_names_t;

/* The entry of an interned name, added when absent. */
ops_name_t *ops_names_get(ops_names_t *s, const char *name);
/* Adds the interned name rel to ni's related names (once). */
void        ops_name_add_rel(arena_t *a, ops_name_t *ni, const char *rel);

/* Discovery (5.7.5-5.7.10): the types (types true) or the attributes of
 * the tenant's entities. name NULL: the list of names (d->types or
 * d->attrs; from the store's indexes unless details); details: with the
 * related names, kinds and counts (a walk over the entities). name (as
 * asked, expanded with rq->ctx): only that type, with the attributes of its
 * entities in d->attrs, or only that attribute; ResourceNotFound when no
 * entity has it. */
typedef struct ops_discovery {
    ops_names_t types, attrs;
} ops_discovery_t;
bool ops_discover(const ops_req_t *rq, bool types, const char *name, bool details, ops_discovery_t *d,
                  problem_t *p);

/* ------------------------------------------------------ statistics */

void ops_stats(store_t *s, store_stats_t *st);

/* ------------------------------------------------------ health.c */

/* The entity count of each tenant (at most max tenants, the default one
 * first as ""), arrays in a; returns how many. */
size_t ops_tenant_sizes(store_t *s, arena_t *a, size_t max, const char ***tenants, uint64_t **entities);
/* The history's writes not yet durable and whether its database answers
 * (--history none or corDB: 0, true). */
void   ops_history_health(uint64_t *queued, bool *reachable);
/* GET /ready: the store takes writes and the history's database answers;
 * false with p (PB_HTTP, status to be set by the caller) saying which not. */
bool   ops_ready(store_t *s, problem_t *p);

/* ------------------------------------------------------ subscriptions.c */

/* Subscriptions (5.8.1-5.8.5). A subscription is notify/'s notify_sub_t
 * (render it with notify_sub_render, release with notify_sub_unref). */
struct notify_sub;
/* Create (5.8.1): body is the Subscription, rq->ctx its @context; *id gets its id. */
bool ops_sub_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p);
/* Retrieve (5.8.3): a reference, or NULL (BadRequestData, ResourceNotFound, NonexistentTenant). */
struct notify_sub *ops_sub_retrieve(const ops_req_t *rq, const char *id, problem_t *p);
/* Update (5.8.2, 5.5.8): the members of body replace the subscription's. */
bool ops_sub_update(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p);
/* Delete (5.8.5). */
bool ops_sub_delete(const ops_req_t *rq, const char *id, problem_t *p);
/* Query (5.8.4): the tenant's subscriptions in creation order, a page of
 * references in rq->arena (unref each); *total: all of them. */
/* At start (after notify_start): gives the engine its entity source for
 * periodic notifications and the stored subscriptions; answers how many. One that no longer validates is logged and left out. */
size_t ops_sub_restore(store_t *s);
struct notify_sub **ops_sub_query(const ops_req_t *rq, size_t offset, size_t limit, size_t *n, size_t *total,
                                  problem_t *p);
/* ------------------------------------------------------ contexts.c */

/* Hosted @contexts (5.13.2, 5.13.5): kept in the store (STORE_OBJ_CONTEXT, of
 * the default tenant: a context's URL names it for every tenant) and
 * registered in ld/, which serves them and resolves their URLs.
 * Add: value is the @context member of the body, already validated by the
 * caller (ld_req_validate: it may download); *id gets the new local id. */
bool   ops_ctx_add(const ops_req_t *rq, const json_t *value, const char **id, problem_t *p);
/* Delete a Hosted one (ResourceNotFound when there is none). */
bool   ops_ctx_delete(const ops_req_t *rq, const char *id, problem_t *p);
/* At start: registers the stored hosted contexts in ld/; answers how many. */
size_t ops_ctx_restore(store_t *s);

/* ------------------------------------------------------ entitymaps.c */

/* The EntityMaps kept as stored objects (STORE_OBJ_ENTITY_MAP, tenant "" the default): the text of map id
 * written (created or replaced) or deleted; restore hands each kept one to fn at start (before the keeper
 * is set: fn does not write) and deletes those fn refuses (expired); answers how many fn took. */
bool   ops_emap_put(store_t *s, const char *tenant, const char *id, const char *text, size_t len);
void   ops_emap_delete(store_t *s, const char *tenant, const char *id);
size_t ops_emap_restore(store_t *s, bool (*fn)(const char *tenant, const char *id, const char *text, size_t len));
/* ------------------------------------------------------ registrations.c */

/* Context source registrations (5.9.2-5.9.4, 5.10.1-5.10.2). A registration
 * is reg/'s reg_t (render it with reg_render, release with reg_unref). */
struct reg;
/* Register (5.9.2): body is the CSourceRegistration, rq->ctx its @context;
 * *id gets its id. Conflict for an exclusive or redirect registration that
 * overlaps another or the entities held here. */
bool ops_reg_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p);
/* Retrieve (5.10.1): a reference, or NULL (BadRequestData, ResourceNotFound, NonexistentTenant). */
struct reg *ops_reg_retrieve(const ops_req_t *rq, const char *id, problem_t *p);
/* Update (5.9.3, 5.5.8): the members of body replace the registration's, null removes one. */
bool ops_reg_update(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p);
/* Delete (5.9.4). */
bool ops_reg_delete(const ops_req_t *rq, const char *id, problem_t *p);
/* Query (5.10.2): the entity specification (names expanded with rq->ctx)
 * matched through reg/'s index (5.12), then csf, scopeQ, geo and the
 * temporal query on each candidate; a page of references in rq->arena
 * (unref each), *masks the matching RegistrationInfo elements of each. */
typedef enum { OPS_TIMEREL_NONE = 0, OPS_TIMEREL_BEFORE, OPS_TIMEREL_AFTER, OPS_TIMEREL_BETWEEN } ops_timerel_t;
typedef struct ops_reg_query {
    const typesel_t   *types;
    const char *const *ids; size_t n_ids;
    const void        *id_pattern;
    const char *const *attrs; size_t n_attrs;   /* attrs, pick and the attributes named by q and geoproperty */
    const q_expr_t    *csf;
    const scopeq_t    *scope;
    const geoq_t      *geo;
    ops_timerel_t      timerel;
    int64_t            time_at, end_time_at;
    bool               time_observed;           /* timeproperty observedAt (default) vs createdAt/modifiedAt/deletedAt */
} ops_reg_query_t;
struct reg **ops_reg_query(const ops_req_t *rq, const ops_reg_query_t *q, size_t offset, size_t limit, size_t *n,
                           size_t *total, uint64_t **masks, problem_t *p);
/* At start: the stored registrations into reg/'s registry; answers how many. */
size_t ops_reg_restore(store_t *s);

/* ------------------------------------------------------ csubscriptions.c */

/* Context source registration subscriptions (5.11.2-5.11.6): the same
 * signatures as the subscription operations; a subscription is a
 * notify_sub_t (notify_sub_render). Create and update send the
 * CSourceNotification of every matching registration (5.11.2.4, 5.11.3.4). */
bool ops_csub_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p);
struct notify_sub *ops_csub_retrieve(const ops_req_t *rq, const char *id, problem_t *p);
bool ops_csub_update(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p);
bool ops_csub_delete(const ops_req_t *rq, const char *id, problem_t *p);
struct notify_sub **ops_csub_query(const ops_req_t *rq, size_t offset, size_t limit, size_t *n, size_t *total,
                                   problem_t *p);
size_t ops_csub_restore(store_t *s);

/* ------------------------------------------------------ objsync.c */
/* A store shared with other processes (mongoc): a thread that loads the
 * subscriptions and registrations they write, every --syncInterval ms;
 * false (no thread) for a store nobody else writes. Stopped before the
 * store is closed. The per-kind steps: */
bool ops_objsync_start(store_t *s);
void ops_objsync_stop(void);
void ops_sub_sync(store_t *s);
void ops_reg_sync(store_t *s);
void ops_csub_sync(store_t *s);
/* A write of one object that the store undid (--dbSync always, a failed
 * fsync: store_set_obj_undo, which ops_objsync_start sets): the kind's
 * registry (notify/, reg/, ld/) is brought back to what the store holds for
 * the object, under the mutex of the kind's writes, before the write is
 * answered 503. */
void ops_sub_resync(store_t *s, const char *tenant, const char *id);
void ops_reg_resync(store_t *s, const char *tenant, const char *id);
void ops_csub_resync(store_t *s, const char *tenant, const char *id);
void ops_ctx_resync(store_t *s, const char *id);

/* ------------------------------------------------------ administration */

/* POST /admin/snapshot: a snapshot of the store on disk, started in the
 * store's thread (ops/snapshot.c); GET /admin/snapshot: the last one.
 * OperationNotSupported for a store in RAM. */
bool ops_snapshot_start(store_t *s, problem_t *p);
bool ops_snapshot_last(store_t *s, store_snapshot_info_t *info, bool *running, problem_t *p);


/* ------------------------------------------------------ temporal.c */

/* The temporal API (5.6.11-5.6.16, 5.7.3, 5.7.4) over the history
 * (history.h). Every one fails with OperationNotSupported under --history
 * none. A temporal write sends the newest instance of each attribute (by
 * observedAt, unless the entity holds a newer one) through the store, so the
 * entity exists in the core API, and appends the others to the history. */

/* 5.6.11 POST /temporal/entities: *created tells 201 (the entity was known
 * neither to the core API nor to the history) from 204. */
bool ops_temporal_create(const ops_req_t *rq, const json_t *body, bool *created, const char **id, problem_t *p);
/* 5.6.12: ResourceNotFound when the entity has neither a core version nor a history. */
bool ops_temporal_attrs_append(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p);
/* 5.6.16: the entity as a whole: its core version, then its history
 * (ResourceNotFound when it has neither). */
bool ops_temporal_delete(const ops_req_t *rq, const char *id, problem_t *p);
/* 5.6.13: name as given (expanded with rq->ctx). */
bool ops_temporal_attr_delete(const ops_req_t *rq, const char *id, const char *name, const char *dataset_id,
                              bool delete_all, problem_t *p);
/* 5.6.14 / 5.6.15: instance ids as rendered (HIST_INSTANCE_PREFIX...). The
 * body of a modification: the instance, or {name: instance}; members it
 * does not give keep their value. */
bool ops_temporal_instance_modify(const ops_req_t *rq, const char *id, const char *name, const char *iid,
                                  const json_t *body, problem_t *p);
bool ops_temporal_instance_delete(const ops_req_t *rq, const char *id, const char *name, const char *iid,
                                  problem_t *p);

/* A temporal query: the entity filter (f, with the selectors sel of a
 * Query body), the history query (hq: its f is set by the operation) and
 * the aggregation (aggregatedValues: methods, period in µs, 0 = PT0S). */
typedef struct ops_temporal {
    entity_filter_t    f;
    entity_selector_t *sel;
    size_t             nsel;
    hist_query_t       hq;
    bool               aggregated;
    unsigned           methods;
    int64_t            period;
} ops_temporal_t;
bool ops_temporal_check(const ops_temporal_t *t, problem_t *p);
/* 5.7.4: entities of the history matching t, a page of t->hq.offset/limit. */
bool ops_temporal_query(const ops_req_t *rq, ops_temporal_t *t, hist_result_t *res, problem_t *p);
/* 5.7.3: ResourceNotFound when the entity has no history; res->n is 1. */
bool ops_temporal_retrieve(const ops_req_t *rq, const char *id, ops_temporal_t *t, hist_result_t *res,
                           problem_t *p);
/* /statistics: the history's counters (false: --history none). */
bool ops_history_stats(uint64_t *instances, uint64_t *series, uint64_t *bytes, uint64_t *dropped);

#endif
