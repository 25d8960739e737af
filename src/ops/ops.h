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
 * Only ops/ calls the store (store.h). Each operation calls it from one
 * place in its own file (the ?type= precondition: ops_check_type; query:
 * ops_query; discovery: ops_discover; purge: ops_purge and its drop/keep
 * helper), so that moving to a new store call (a precondition inside the
 * atomic step, discovery from the indexes, several entity selectors)
 * changes one place.
 */
#ifndef CORAINE_OPS_H
#define CORAINE_OPS_H

#include "../core/core.h"
#include "../json/json.h"
#include "../ld/ld.h"
#include "../model/model.h"
#include "../store/store.h"

/* What every operation gets: the store, the tenant (NULL or "": default),
 * the @context that expands the names of parameters and body, and the arena
 * that holds drafts, scratch and results until the caller has rendered. */
typedef struct ops_req {
    store_t            *store;
    const char         *tenant;
    const ld_context_t *ctx;
    arena_t            *arena;
} ops_req_t;

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
 * 6.6.3.x-1): entity id must be of the type selection `type` (4.17 text,
 * expanded with rq->ctx), else ResourceNotFound. true when type is NULL.
 * Known limit: read before the write, so a concurrent change of the
 * entity's types in between is not seen (the store will check it inside its
 * atomic step). */
bool ops_check_type(const ops_req_t *rq, const char *id, const char *type, problem_t *p);

/* ------------------------------------------------------ entities.c */

/* Create Entity (5.6.1): body is the entity (an object). *id gets its id. */
bool ops_entity_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p);

/* Retrieve Entity (5.7.1). type: a type selection (4.17 text) the entity must
 * match, or NULL; attrs: expanded names of which the entity must have at least
 * one (Table 6.5.3.1-1), or none. A reference to release with entity_unref(). */
typedef struct ops_retrieve {
    const char  *type;
    const char **attrs;
    size_t       n_attrs;
} ops_retrieve_t;
cr_entity_t *ops_entity_retrieve(const ops_req_t *rq, const char *id, const ops_retrieve_t *o, problem_t *p);

/* Delete Entity (5.6.6). */
bool ops_entity_delete(const ops_req_t *rq, const char *id, problem_t *p);

/* Merge Entity (5.6.17): key_values takes the values alone (each attribute
 * keeps its type), lang makes plain strings the text of that language,
 * observed_at (0: none) re-stamps the attributes that have one. */
typedef struct ops_merge {
    bool        key_values;
    const char *lang;
    int64_t     observed_at;
} ops_merge_t;
bool ops_entity_merge(const ops_req_t *rq, const char *id, const json_t *body, const ops_merge_t *o,
                      problem_t *p);

/* Replace Entity (5.6.18): body is the whole new entity (type required). */
bool ops_entity_replace(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p);

/* ------------------------------------------------------ attrs.c */

/* Append Entity Attributes (5.6.3) and Update Entity Attributes (5.6.2):
 * res gets the per-attribute outcome (an UpdateResult, 5.2.18) when some
 * attribute was not updated (res->n_not_updated > 0). */
bool ops_attrs_append(const ops_req_t *rq, const char *id, const json_t *body, bool no_overwrite,
                      op_result_t *res, problem_t *p);
bool ops_attrs_update(const ops_req_t *rq, const char *id, const json_t *body, op_result_t *res,
                      problem_t *p);
/* Partial Attribute Update (5.6.4) and Replace Attribute (5.6.19): body is
 * the attribute (its "@context" member, if any, is ignored). */
bool ops_attr_patch(const ops_req_t *rq, const char *id, const char *name, json_t *body, problem_t *p);
bool ops_attr_replace(const ops_req_t *rq, const char *id, const char *name, json_t *body, problem_t *p);
/* Delete Attribute (5.6.5): one instance (dataset_id, NULL: the default) or
 * all of them (delete_all). */
bool ops_attr_delete(const ops_req_t *rq, const char *id, const char *name, const char *dataset_id,
                     bool delete_all, problem_t *p);

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
 * invalid (an empty batch, a null member); then nothing was written. Each
 * entity is validated and written on its own, in order. */
bool ops_batch_write(const ops_req_t *rq, ops_batch_kind_t kind, const ops_member_t *m, size_t n,
                     const ops_batch_opts_t *o, ops_batch_result_t *res, problem_t *p);
/* Batch Delete (5.6.10): ids is the body, an array of entity ids. */
bool ops_batch_delete(const ops_req_t *rq, const json_t *ids, ops_batch_result_t *res, problem_t *p);

/* ------------------------------------------------------ query.c */

/* Query Entities (5.7.2): f (the common part: ids, idPattern, type, q, geo,
 * scope, attrs) and the EntitySelectors sel[0..nsel) (an entity matches one
 * of them and f; one selector stands for f's ids, idPattern and type, so
 * that the store can use its indexes), a page (limit/offset, 4.12) and the
 * count (4.13). */
typedef struct ops_query {
    entity_filter_t  f;
    entity_filter_t *sel;
    size_t           nsel;
    size_t           limit, offset;
    bool             count;
} ops_query_t;

/* A page of references in creation order; more: a next page exists;
 * count: all matches (when asked for). Release with ops_page_release(). */
typedef struct ops_page {
    cr_entity_t **items;
    size_t        n;
    size_t        count;
    bool          more;
} ops_page_t;

/* The page limits (--maxLimit; limit 0 only with count). */
bool ops_query_check(const ops_query_t *qy, problem_t *p);
bool ops_query(const ops_req_t *rq, const ops_query_t *qy, ops_page_t *pg, problem_t *p);
void ops_page_release(ops_page_t *pg);

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

/* Discovery (5.7.5-5.7.10): the types and attributes of the tenant's
 * entities. only_type (expanded): only entities of that type, and ResourceNotFound
 * when none; only_attr (expanded): only that attribute, ResourceNotFound
 * when no entity has it. `name` is the name as asked, for the message. */
typedef struct ops_discovery {
    ops_names_t types, attrs;
} ops_discovery_t;
bool ops_discover(const ops_req_t *rq, const char *only_type, const char *only_attr, const char *name,
                  ops_discovery_t *d, problem_t *p);

/* ------------------------------------------------------ statistics */

void ops_stats(store_t *s, store_stats_t *st);

/* ------------------------------------------------------ administration */

/* POST /admin/snapshot: a snapshot of the store on disk, started in the
 * store's thread (ops/snapshot.c); GET /admin/snapshot: the last one.
 * OperationNotSupported for a store in RAM. */
bool ops_snapshot_start(store_t *s, problem_t *p);
bool ops_snapshot_last(store_t *s, store_snapshot_info_t *info, bool *running, problem_t *p);

#endif
