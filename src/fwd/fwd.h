/*
 * fwd.h - distributed operations (4.3.6, 5.6 and 5.7 distributed,
 * 6.3.17-6.3.19): a retrieve or query is forwarded to the context sources
 * whose registrations match it (reg/'s index), in parallel over HTTP, and
 * the answers are merged with the local entities (4.5.5) (fwd.c); a write
 * is split over the registrations by mode and attribute and its parts sent
 * to their sources (fwd_write.c: entity writes, batches, purge); the
 * discovery of types and attributes is forwarded and its answers handed
 * back for merging (fwd_types.c). Every request goes out through one
 * function, fwd_run (fwd_int.h), which answers a GET of entities[/{id}]
 * from the answers kept for management.cacheDuration (fwd_cache.c). A paged
 * query can go through an EntityMap (fwd_map.c, fwd_query_new_map and
 * fwd_query_map below).
 *
 * Who calls what: api/ (the HTTP binding) answers from ops/ (the local
 * data) and, unless local=true, asks fwd/ for the rest: fwd_query() /
 * fwd_retrieve() after the local read, fwd_write() / fwd_batch() before the
 * local write (which gets what the registrations left of the payload),
 * fwd_purge() after the local purge. fwd/ never calls the store: a binding
 * other than HTTP (cor://) composes the same calls.
 *
 * A forwarded request:
 *  - goes to <endpoint>/ngsi-ld/v1/entities[/{id}] with the request's query
 *    parameters, the attributes narrowed to those the registration declares
 *    (a source is not asked for what it did not register; a registration
 *    that declares none of the requested attributes is not asked at all);
 *  - carries the request's @context as Link (or contextSourceInfo's
 *    jsonldContext), Accept application/json, NGSILD-Tenant when the
 *    registration names a tenant, the other contextSourceInfo pairs as
 *    headers (urn:ngsi-ld:request: the triggering request's header), local=true
 *    when management.localOnly, and Via: the request's Via plus
 *    "1.1 <alias>" (--brokerAlias, default host name:port);
 *  - has the registration's management.timeout, else --forwardTimeout; at
 *    most --forwardFanout of one operation are in flight at once over HTTP
 *    (over cor://, the peer connection's window bounds them: they hold no
 *    connection of their own); a registration in management.cooldown after
 *    a failure is not tried;
 *  - goes over cor:// (cor/, doc/cor-protocol.md) when the endpoint is
 *    cor://host:port: the same request, in parallel with the HTTP ones;
 *  - counts in the registration's timesSent/timesFailed/lastSuccess/
 *    lastFailure/status.
 * Registrations whose contextSourceAlias is named in the request's Via are
 * not matched (5.12). An exclusive or redirect registration matched by a
 * request whose Via already names this broker is 508 Loop Detected
 * (6.3.17). A source that fails adds an NGSILD-Warning (199 no answer, 111
 * not an NGSI-LD payload, 299 an error status; 404 is not a failure).
 *
 * Merging (4.5.5): the versions of one entity (local first, then the sources
 * in registration order) give one entity with the union of the types and
 * attributes; for the same attribute instance (name and datasetId) the most
 * recent observedAt, else modifiedAt, wins, and an auxiliary source never
 * replaces another version's instance (local data over auxiliary).
 *
 * The thread that runs the handler waits for the forwards (bounded by the
 * timeouts): over HTTP one of http/'s --forwardThreads, never a
 * libmicrohttpd worker (a write of a tenant with registrations is handed
 * there before its handler runs, http_set_offload; a read when it is about
 * to ask a source, fwd_in_t.offload); over cor://, cor/'s worker.
 */
#ifndef CORAINE_FWD_H
#define CORAINE_FWD_H

#include "../core/core.h"
#include "../history/history.h"
#include "../ld/ld.h"
#include "../model/model.h"
#include "../reg/reg.h"

/* After cr_config_load: the alias. */
bool        fwd_start(problem_t *p);
void        fwd_stop(void);
/* This broker's alias in Via headers. */
const char *fwd_alias(void);
/* Percent-encodes s as one path segment or query value of a forwarded
 * request (RFC 3986 unreserved characters and ':' kept). */
void        fwd_url_encode(sbuf_t *sb, const char *s);
/* Whether a Via header value names this broker. */
bool        fwd_via_loop(const char *via);

/* The request being answered. */
typedef struct fwd_in {
    const char         *tenant;
    const ld_context_t *ctx;        /* the request's @context (sent as Link; answers parsed with it) */
    const char         *via;        /* its Via header, or NULL */
    arena_t            *arena;      /* the request's: results and scratch */
    const char       *(*header)(void *ud, const char *name);   /* its headers, for urn:ngsi-ld:request */
    const char       *(*query)(void *ud);  /* its query string without local (writes send it along), or NULL */
    void               *header_ud;         /* of header and query */
    /* A read about to ask its sources calls this first (NULL: never): true when
     * the request was handed to a thread where it may wait (it runs again from
     * the start there): the read then returns false at once, its answer unused. */
    bool              (*offload)(void *ud);
} fwd_in_t;

typedef struct fwd_param {
    const char *key, *value;
} fwd_param_t;

typedef struct fwd_out {
    cr_entity_t **items;      /* merged entities (references: entity_unref each) */
    size_t        n;
    size_t        forwarded;  /* forwarded requests (0: nothing matched; items untouched) */
    size_t        failed;
    const char   *warning;    /* the NGSILD-Warning value, or NULL */
    /* fwd_query: where each merged item came from, for an entity map: bit 0 here, bit 1 + k reg_ids[k] (the
     * registrations whose sources returned entities); NULL when more than 63 did */
    uint64_t     *origins;
    const char  **reg_ids;
    const char  **linked;      /* per reg_ids: the EntityMap its source made (fwd_query_new_map), or NULL */
    size_t        n_regs;
    /* fwd_query_map: the page's ids found nowhere any more (to be removed from the map) */
    const char  **gone;
    size_t        n_gone;
    uint64_t      unanswered;  /* fwd_query_map: the bits of the registrations that failed */
} fwd_out_t;

/* Retrieve Entity (5.7.1) distributed: the registrations matching id (and
 * the type selection, and attrs, expanded), operation retrieveEntity;
 * params are forwarded (type, lang ...), attrs narrowed per registration.
 * local: the local version or NULL. When forwarded, out->n is 1 (the merged
 * entity) or 0 (found nowhere). */
bool fwd_retrieve(const fwd_in_t *in, const char *id, const typesel_t *types, const char *const *attrs,
                  size_t n_attrs, const fwd_param_t *params, size_t n_params, cr_entity_t *local, fwd_out_t *out,
                  problem_t *p);

struct fwd_map_page;
/* fwd_retrieve through an EntityMap (5.7.1.4): pg is the map's slot of id (fwd_map_entity); only the
 * registrations it names for id (and matching it) are asked, each with its linked map as NGSILD-EntityMap
 * when it has one; none when the map lists id here alone or not at all (out->forwarded 0). */
bool fwd_retrieve_map(const fwd_in_t *in, const char *id, const typesel_t *types, const char *const *attrs,
                      size_t n_attrs, const fwd_param_t *params, size_t n_params, const struct fwd_map_page *pg,
                      cr_entity_t *local, fwd_out_t *out, problem_t *p);

/* Query Entities (5.7.2) distributed: the registrations matching q (its
 * ops: queryEntity), params forwarded (the query's own, without pagination;
 * attrs narrowed per registration), each source asked for `want` entities;
 * the local page merged with the answers, local order first. */
bool fwd_query(const fwd_in_t *in, const reg_query_t *q, const fwd_param_t *params, size_t n_params, size_t want,
               cr_entity_t *const *local, size_t n_local, fwd_out_t *out, problem_t *p);

/* ------------------------------------------------ entity maps (fwd_map.c)
 * An EntityMap (4.3.6.7, 4.5.25, 5.2.39, 5.14): the ids a distributed query
 * matched, in result order, each with where it lives (bit 0: here, "@none";
 * bit 1 + k: the registration reg_ids[k]). A query that asks for one
 * (entityMap=true) has it made from its first answer (fwd_query's origins);
 * the pages that name it (NGSILD-EntityMap) ask only the sources of their
 * entities, for those ids (fwd_query_map). Bounded by --entityMapMax maps
 * and --entityMapEntries ids in all; per tenant; thread-safe. */
#define FWD_MAP_HERE ((uint64_t)1)

typedef struct fwd_map_page {
    const char  *id;
    const char **ids;          /* the entities of the page, in map order (removed ones left out) */
    uint64_t    *origins;
    size_t       n;
    const char **reg_ids;      /* the registrations bits 1.. name */
    const char **linked;       /* per reg_ids: the EntityMap id at its source (linkedMaps), or NULL */
    size_t       n_regs;
    size_t       total;        /* slots (removed ones included: positions are stable) */
    size_t       live;         /* entities not removed */
    int64_t      expires_at;   /* µs */
} fwd_map_page_t;

/* Stores a map (ids copied); id_out gets its id. false: it cannot be held (larger than --entityMapEntries,
 * more than 63 registrations, out of memory). */
bool fwd_map_put(const char *tenant, int64_t expires_at, const char *const *reg_ids, const char *const *linked,
                 size_t n_regs, const char *const *ids, const uint64_t *origins, size_t n, char id_out[64]);
/* The slots [offset, offset + limit) of tenant's map id, copied into a; false: no such map (or it expired). */
bool fwd_map_page(const char *tenant, const char *id, size_t offset, size_t limit, arena_t *a, fwd_map_page_t *pg);
/* The slot of entity eid in tenant's map id, as a page of one (pg->n 0: the map does not list it; the
 * registrations and linked maps all copied into a); false: no such map (or it expired). */
bool fwd_map_entity(const char *tenant, const char *id, const char *eid, arena_t *a, fwd_map_page_t *pg);
/* Removes ids from the map: they no longer match its query (4.3.6.7). ids are those of the page of slots
 * [from, to), in order: looked for there only (a scan of the page, not of the map). */
void fwd_map_forget(const char *tenant, const char *id, size_t from, size_t to, const char *const *ids, size_t n);
/* false: no such map. */
bool fwd_map_set_expiry(const char *tenant, const char *id, int64_t at);
bool fwd_map_delete(const char *tenant, const char *id);
void fwd_map_stats(size_t *maps, size_t *entries);
/* Maps kept over a restart (main.c wires a stored object kind, through ops/): put writes a map's text
 * (created, or its expiry changed), del deletes it (dropped: deleted, expired or evicted); called with
 * no lock of fwd_map.c held, tenant "" the default. NULL: nothing kept. Set before the workers start. */
typedef struct fwd_map_keeper {
    bool (*put)(void *ud, const char *tenant, const char *id, const char *text, size_t len);
    void (*del)(void *ud, const char *tenant, const char *id);
    void  *ud;
} fwd_map_keeper_t;
void fwd_map_set_keeper(const fwd_map_keeper_t *k);
/* A kept map read back at start (within the bounds); false: expired or not a kept map (its copy deleted). */
bool fwd_map_restore(const char *tenant, const char *id, const char *text, size_t len);
void fwd_map_clear(void);

/* fwd_query for a new map (5.14.4.4): the sources whose registrations support createEntityMapQueryEntity
 * are asked with entityMap=true (and the map's lifetime), and the EntityMap each makes is out->linked. */
bool fwd_query_new_map(const fwd_in_t *in, const reg_query_t *q, const fwd_param_t *params, size_t n_params,
                       size_t want, int64_t lifetime_us, cr_entity_t *const *local, size_t n_local, fwd_out_t *out,
                       problem_t *p);
/* The linked maps of mp (5.14.2, 5.14.3): DELETE (body NULL) or PATCH with body each at its source, when
 * the registration still exists and supports deleteEntityMap / updateEntityMap (op); the number that failed. */
size_t fwd_map_linked(const fwd_in_t *in, const fwd_map_page_t *mp, reg_op_t op, const char *body);

/* Query Entities through an entity map's page: the registrations matching q
 * and named by pg->reg_ids are asked (as fwd_query) for the page's ids they
 * hold, and nothing else; merged with local (the page's local entities);
 * out->items in page order, out->gone the page's ids found nowhere. remote
 * false: nothing is forwarded (local=true). */
bool fwd_query_map(const fwd_in_t *in, const reg_query_t *q, const fwd_param_t *params, size_t n_params,
                   const fwd_map_page_t *pg, bool remote, cr_entity_t *const *local, size_t n_local, fwd_out_t *out,
                   problem_t *p);

/* ------------------------------------------------ distributed writes (fwd_write.c)
 * A write of one entity (5.6.x distributed, 4.3.6.2-4.3.6.4): the
 * registrations (inclusive, exclusive, redirect; never auxiliary) matching
 * the entity and the payload's attributes get the attributes they cover;
 * those an exclusive or redirect one covers are taken out of the local
 * write. A write whose Via names this broker is 508 Loop Detected when any
 * registration matches it (it was written here on its way out; doing it
 * again is no part of what the client asked), of any mode. */
/* The local entity's types (as a type selection), or NULL when it has none
 * here: asked only when a registration by type alone matched the id. */
typedef const typesel_t *(*fwd_types_fn)(void *ud);

typedef struct fwd_write {
    reg_op_t         op;         /* the operation name (4.20) a source must support */
    const char      *method;     /* "POST", "PATCH", "PUT", "DELETE" */
    const char      *id;         /* the entity: the path is entities (create) or entities/{id} */
    const char      *tail;       /* then /tail ("attrs"), or NULL */
    const char      *tail_attr;  /* then /{tail_attr} (the attribute as the path named it), or NULL */
    const char      *root;       /* the collection: NULL "entities"; "temporal/entities" (fwd_temporal.c) */
    const char      *tail_instance; /* then /{tail_instance} (an instanceId), or NULL */
    const char      *type;       /* the ?type= text (4.17), or NULL */
    const char      *attr;       /* the attribute the path names (expanded), or NULL */
    const json_t    *body;       /* the payload: an entity or fragment (split by attribute), or NULL */
    bool             attr_body;  /* body is the one attribute `attr` (PATCH/PUT .../attrs/{attrId}) */
    fwd_types_fn     types_of;   /* without type nor a payload's: the local entity's (or NULL: not asked) */
    void            *types_ud;   /* of types_of and check */
    /* once a registration matched, before anything is sent: false (p) refuses the write whole */
    bool           (*check)(void *ud, problem_t *p);
} fwd_write_t;

/* One source's part. */
typedef struct fwd_sent {
    const char  *reg_id;
    bool         ok;         /* it answered 2xx */
    long         status;     /* its HTTP status (0: no answer) */
    problem_t    problem;    /* !ok: its ProblemDetails, 504 no answer in time, 502 unreachable, Conflict
                                (an exclusive/redirect registration without the operation) */
    const char **attrs;      /* the attribute names sent (as in the payload); NULL: the whole entity */
    size_t       n_attrs;
    bool         partial;    /* ok, but it answered 207 Multi-Status: answer is its body (parsed, or NULL) */
    const json_t *answer;
} fwd_sent_t;

typedef struct fwd_wout {
    json_t     *local;       /* the payload of the local write (w->body, or a copy without what was taken) */
    bool        local_skip;  /* nothing is left to write locally */
    fwd_sent_t *sent;        /* the parts, in registration order */
    size_t      n_sent, failed;
} fwd_wout_t;

/* Sends the parts and waits for them (bounded by the timeouts). false only
 * for the 508 of a loop; out->n_sent 0: nothing matched (out->local is the
 * whole payload). */
bool fwd_write(const fwd_in_t *in, const fwd_write_t *w, fwd_wout_t *out, problem_t *p);

/* ------------------------------------- distributed temporal writes (fwd_temporal.c)
 * The writes of the temporal API (5.6.11-5.6.16) to the sources whose
 * registrations match the entity and attributes, with the operation names
 * of 4.20 (upsertTemporal, appendAttrsTemporal, deleteAttrsTemporal,
 * updateAttrInstanceTemporal, deleteAttrInstanceTemporal, deleteTemporal):
 * split, sent and answered as fwd_write does (the same 207/registrationId
 * rules), to <endpoint>/ngsi-ld/v1/temporal/entities[/{id}...]. */
typedef enum {
    FWD_T_UPSERT,            /* POST /temporal/entities (5.6.11) */
    FWD_T_APPEND,            /* POST .../{id}/attrs (5.6.12) */
    FWD_T_DELETE_ATTR,       /* DELETE .../{id}/attrs/{attrId} (5.6.13) */
    FWD_T_MODIFY_INSTANCE,   /* PATCH .../{id}/attrs/{attrId}/{instanceId} (5.6.14) */
    FWD_T_DELETE_INSTANCE,   /* DELETE .../{id}/attrs/{attrId}/{instanceId} (5.6.15) */
    FWD_T_DELETE,            /* DELETE .../{id} (5.6.16) */
} fwd_tkind_t;
typedef struct fwd_twrite {
    fwd_tkind_t   kind;
    const char   *id;
    const char   *attr_path;  /* the attribute as the path names it, or NULL */
    const char   *attr;       /* expanded, or NULL */
    const char   *instance;   /* the instanceId of the path, or NULL */
    const json_t *body;       /* a temporal entity (upsert), its attributes (append), an instance (modify) */
    fwd_types_fn  types_of;   /* as fwd_write_t's */
    void         *types_ud;
} fwd_twrite_t;
bool fwd_temporal_write(const fwd_in_t *in, const fwd_twrite_t *t, fwd_wout_t *out, problem_t *p);

/* ------------------------------------- distributed temporal reads (fwd_tread.c)
 * Retrieve Temporal Evolution of an Entity (5.7.3) and Query Temporal
 * Evolution of Entities (5.7.4) distributed (4.3.6): the registrations
 * matching the selection that support retrieveTemporal or queryTemporal
 * (4.20), and those with an observationInterval or managementInterval that
 * the temporal query meets (5.10.2.4), are asked
 * GET <endpoint>/ngsi-ld/v1/temporal/entities[/{id}] as
 * fwd_retrieve / fwd_query ask theirs (the same matching, modes, Via and
 * loop rules, fan-out, timeouts, cooldown, HTTP or cor://, warnings), with
 * the temporal query (timerel, timeAt, endTimeAt, timeproperty, lastN,
 * datasetId) and options=sysAttrs, in the normalized representation (the
 * instances, whatever format the client asked for: the hub renders every
 * format, and aggregates, from the merged instances). The answers are merged
 * with the local result per entity, then per attribute and datasetId: the
 * union of the instances, ascending by the timeproperty; an instance given
 * twice (same instanceId and time) once; an auxiliary source's instance only
 * when no other version has one at that time (5.7.3.4); lastN on the merged
 * series. */
typedef struct fwd_tread {
    const char          *id;          /* retrieve: the entity; NULL: a query */
    reg_query_t          match;       /* types, ids, idPattern, attrs (expanded) of the selection */
    const fwd_param_t   *params;      /* the selection's parameters as the request gave them (type, q, geo ...) */
    size_t               n_params;
    const hist_query_t  *hq;          /* the temporal query */
    size_t               want;        /* a query: the entities asked of each source */
    /* a query through an entity map's page (4.3.6.7): only the page's sources are asked, each for the
     * page's ids the map gives it (want ignored); NULL: every matching source */
    const fwd_map_page_t *only;
} fwd_tread_t;
typedef struct fwd_tout {
    size_t         forwarded, failed;  /* forwarded 0: nothing matched (the local result is the answer) */
    const char    *warning;            /* the NGSILD-Warning value, or NULL */
    hist_entity_t *remote;             /* the sources' entities, in registration order (in->arena) */
    bool          *aux;                /* per remote: from an auxiliary registration */
    uint64_t      *from;               /* per remote: its bit in reg_ids (0: past 63), for an entity map */
    size_t         n_remote;
    const char   **reg_ids;            /* the registrations whose sources returned entities (bit 1 + k) */
    size_t         n_regs;
    uint64_t       unanswered;         /* only: the bits of the page's registrations that failed */
} fwd_tout_t;
/* Asks the sources (the local read comes after: a hub that forwards reads its instances, not its
 * aggregates, to merge them); false: 508 (a loop through an exclusive or redirect registration). */
bool fwd_temporal_read(const fwd_in_t *in, const fwd_tread_t *t, fwd_tout_t *out, problem_t *p);
/* res: local and fo's entities merged (local first, then first seen; count = n, not partial). origins
 * (or NULL): per item of res, where it came from, as an entity map holds it (FWD_MAP_HERE | fo's bits). */
void fwd_temporal_merge(arena_t *a, const hist_query_t *hq, const hist_result_t *local, const fwd_tout_t *fo,
                        hist_result_t *res, uint64_t **origins);

/* A batch (5.6.7-5.6.10, 5.6.20 distributed): each entity split as by
 * fwd_write; each source gets its parts in one batch request when it
 * supports the batch operation, else one request per entity with the
 * operation of one entity the clause names (create: createEntity; upsert:
 * createEntity then, for what exists, replaceEntity or updateAttrs, or
 * those alone; update: updateAttrs, or appendAttrs with noOverwrite;
 * delete: deleteEntity; merge: mergeEntity), else (exclusive, redirect) a
 * Conflict. */
typedef struct fwd_batch {
    reg_op_t                   op;        /* createBatch, upsertBatch, updateBatch, deleteBatch, mergeBatch */
    const char                *path;      /* "entityOperations/create" ... (the query string: in->query) */
    const json_t *const       *entities;  /* per member: the entity (delete: the id string) */
    const ld_context_t *const *ctxs;      /* per member: its @context (NULL: it failed; not forwarded) */
    size_t                     n;
    bool                       update;        /* upsert: options=update (else replace) */
    bool                       no_overwrite;  /* update: options=noOverwrite */
} fwd_batch_t;

typedef struct fwd_bout {
    json_t     **local;      /* per member: the payload of its local write, NULL: nothing left */
    fwd_sent_t **sent;       /* per member: its parts */
    size_t      *n_sent;
    size_t       forwarded;  /* members with a part (0: nothing matched; the arrays are NULL) */
} fwd_bout_t;

bool fwd_batch(const fwd_in_t *in, const fwd_batch_t *b, fwd_bout_t *out, problem_t *p);

/* Purge Entities (5.6.21.4 distributed): DELETE /entities?<in->query> to every
 * inclusive, exclusive or redirect registration matching q that supports
 * purgeEntity; an exclusive or redirect one that does not is a Conflict. */
bool fwd_purge(const fwd_in_t *in, const reg_query_t *q, fwd_wout_t *out, problem_t *p);

/* ------------------------------------------- distributed discovery (fwd_types.c)
 * GET /types, /types/{type}, /attributes, /attributes/{attrId} (5.7.5-5.7.10,
 * 5.7.11) forwarded as GET <endpoint>/ngsi-ld/v1/<path>?<in->query> to the
 * registrations supporting op (retrieveEntityTypes ... retrieveAttrTypeInfo)
 * and matching type (a type name as asked, expanded with in->ctx) or attr
 * (expanded), each NULL for the lists. The answers come back parsed, for the
 * caller to merge with its local lists. */
typedef struct fwd_dout {
    json_t                   **docs;     /* the answers (404s and failures left out) */
    const ld_context_t       **ctxs;     /* the @context each is compact in */
    size_t                     n;
    size_t                     forwarded, failed;
    const char                *warning;  /* the NGSILD-Warning value, or NULL */
} fwd_dout_t;
bool fwd_discover(const fwd_in_t *in, reg_op_t op, const char *path, const char *type,
                  const char *attr, fwd_dout_t *out, problem_t *p);

/* Over all operations since start (/statistics). */
typedef struct fwd_stats {
    uint64_t forwarded, failed;
} fwd_stats_t;
void fwd_get_stats(fwd_stats_t *st);

/* The forwarded requests per source (fwd_source.c): the endpoint of the
 * registrations (no user information, query or fragment); the first
 * FWD_SOURCES_MAX endpoints have their own, later ones share "other". */
#define FWD_SOURCES_MAX 64
#define FWD_SOURCE_LEN  200
#define FWD_LAT_BUCKETS 13
enum { FWD_RESULT_TIMEOUT = 5, FWD_RESULT_ERROR = 6, FWD_RESULTS = 7 };   /* 0..4: answered 1xx..5xx */
extern const double fwd_latency_bounds[FWD_LAT_BUCKETS];                  /* seconds */
typedef struct fwd_source_stats {
    char     source[FWD_SOURCE_LEN];
    uint64_t by_result[FWD_RESULTS];
    uint64_t buckets[FWD_LAT_BUCKETS + 1];     /* not cumulative; the last: above every bound */
    uint64_t sum_us;
    uint64_t in_flight;                        /* sent, not answered yet */
} fwd_source_stats_t;
/* fn is called under the table's lock: it must not forward. */
void fwd_foreach_source(void (*fn)(void *ud, const fwd_source_stats_t *s), void *ud);

#endif
