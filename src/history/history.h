/*
 * history.h - attribute history (--history none|corDB|timescale): the
 * contract between the broker and a history backend, and the functions the
 * temporal API (clauses 4.5.6-4.5.9, 4.5.19, 4.11, 5.6.11-5.6.16, 5.7.3,
 * 5.7.4) calls.
 *
 * The story. The store commits every write as a Change in its tenant's
 * ordered stream (store.h). History is a hook on that stream: history.c turns
 * each group of committed changes into WRITES (hist_write_t: an entity, its
 * types, and the attribute instances the change added or removed) and hands
 * them to the backend chosen by --history, in commit order per tenant. The
 * temporal API writes through the same door: POST /temporal/entities and
 * POST /temporal/entities/{id}/attrs write the entity's newest instances
 * through the store (so an entity made by the temporal API exists in the
 * core API and the hook records those instances like any other change),
 * then upsert every instance of the body with history_append() (by
 * observedAt: the ones the hook just recorded replace themselves).
 * An entity written by the core API has a temporal evolution, and deleting an
 * entity or an attribute in the core API keeps its history, closed by an
 * instance with deletedAt.
 *
 * A backend keeps, per tenant, per entity, per (attribute name, datasetId) a
 * SERIES of instances, and answers a temporal query (hist_query_t: entity
 * selection with model.h's filter tree, timerel/timeAt/endTimeAt over a
 * timeproperty, attrs, datasetId, lastN, the instance limit of 6.3.10)
 * with entities whose series hold the selected instances (hist_result_t),
 * in the arena of the request. Aggregation (4.5.19) is computed by
 * history.c from the instances unless the backend does it itself.
 *
 * Backends: corDB (src/history/hcordb.c: in memory, compact per series,
 * bounded by --historyRetention and --historyMaxInstances as instances are
 * added, persisted with the store on --dbDir) and timescale (PostgreSQL:
 * --historyURI). The table is history_backend_t; history_open() picks one.
 * Changes to this contract are additive only.
 *
 * Times are µs since the epoch (int64), CR_NO_TIME when absent. Names
 * (attribute names, types) are expanded IRIs, interned (compare by pointer;
 * a backend that reads names back from its own storage interns them with
 * intern_cstr()). A tenant is "" for the default. Every write of ops/ is
 * admitted first (reserve/unreserve below), so a backend with a bounded
 * queue can refuse it (503) before anything is applied.
 */
#ifndef CORAINE_HISTORY_H
#define CORAINE_HISTORY_H

#include "../core/core.h"
#include "../model/model.h"
#include "../store/store.h"

typedef struct history history_t;

/* ----------------------------------------------------------- instances
 *
 * One attribute instance (4.5.7, 4.5.8): the attribute as the model holds it
 * (attr: name, datasetId, kind, value, unitCode, objectType, observedAt,
 * sub-attributes) and the instance's own members. attr.created_at is the
 * instance's createdAt (when the broker added it to the history) and
 * attr.modified_at its modifiedAt (the same, until the instance is modified
 * with history_modify_instance). */
typedef struct hist_instance {
    cr_attr_t attr;
    /* Not CR_NO_TIME: this instance records that the attribute (or its
     * entity) was deleted at that time; attr.value is then NGSI-LD Null
     * (hist_deleted_value) and attr.kind the deleted one's. */
    int64_t   deleted_at;
    /* The instance's id, unique within its (tenant, entity, attribute name),
     * never 0, assigned by the backend when the instance is appended (an id
     * given in a write is ignored). Rendered "urn:ngsi-ld:attribute:instance:"
     * followed by 16 hex digits (history_instance_id_render/_parse). */
    uint64_t  instance_id;
} hist_instance_t;

/* The NGSI-LD Null as a deleted attribute of that kind carries it:
 * "urn:ngsi-ld:null" (value, object, vocab, json), {"@none": it}
 * (languageMap), [it] (valueList, objectList). */
json_t *hist_deleted_value(arena_t *a, attr_kind_t kind);
/* The Scope's series (4.5.6) is named MN.scope; a deleted Scope's value is
 * [] (hist_deleted_value of this kind, which a backend keeps for it). */
#define HIST_KIND_SCOPE 0x7f

#define HIST_INSTANCE_PREFIX "urn:ngsi-ld:attribute:instance:"
/* buf: at least HIST_INSTANCE_ID_LEN + 1 bytes. */
#define HIST_INSTANCE_ID_LEN (sizeof(HIST_INSTANCE_PREFIX) - 1 + 16)
void history_instance_id_render(uint64_t id, char *buf);
/* 0 when text is not an instance id this broker gave. */
uint64_t history_instance_id_parse(const char *text);

/* An ISO 8601 duration (PnYnMnWnDTnHnMnS; a year 365 days, a month 30) or
 * seconds with an optional s/m/h/d suffix, in µs: --historyRetention,
 * aggrPeriodDuration. */
bool history_parse_duration(const char *s, int64_t *us);

/* -------------------------------------------------------------- writes
 *
 * What one change (or one temporal API request) does to one entity's
 * history. A backend applies a hist_write_t whole:
 *  - the entity record: created when absent (types, createdAt = at), its
 *    types set to `types` (the newest version's), modifiedAt = at;
 *  - entity_deleted: the entity's deletedAt = at (it stays in the history,
 *    readable with timeproperty=deletedAt; a later write that creates it
 *    again clears deletedAt); inst then holds one deletedAt instance per
 *    attribute instance the entity had;
 *  - each instance of inst[] appended to its series (name, datasetId), in
 *    array order, with a new instance id; attr.created_at and modified_at as
 *    given (history.c sets them to `at` for changes; the temporal API to the
 *    request's time);
 *  - upsert (the temporal API's writes, 5.6.11, 5.6.12): an instance that
 *    has an observedAt replaces, instead, the instances of its series with
 *    that observedAt: the first keeps its instance id and createdAt and
 *    takes the new content with modifiedAt = at, the others are removed;
 *    one with no such instance is appended;
 *  - then the bounds (--historyMaxInstances per series, --historyRetention
 *    over observedAt, else createdAt, measured back from `at`) applied to
 *    the series written: the oldest instances (by observedAt) beyond them
 *    are dropped; an instance older than all a full series holds is not
 *    added.
 * Within a tenant, writes are applied in the order given; a backend that
 * queues them (timescale) makes them visible to its queries in that order.
 *
 * The pointers (entity, names, values) are valid only during the call: a
 * backend copies what it keeps. */
typedef struct hist_write {
    const char             *id;           /* the entity id */
    const char *const      *types;        /* expanded, interned */
    size_t                  n_types;
    /* The entity's newest version (after the change; for a delete, the one
     * before it), or NULL (temporal API appends): a backend may keep a
     * reference (entity_ref) to evaluate q, geo and scope on it. */
    cr_entity_t            *entity;
    int64_t                 at;           /* commit time (µs) */
    bool                    entity_deleted;
    bool                    upsert;       /* see above (0: append, as for changes) */
    const hist_instance_t  *inst;
    size_t                  n_inst;
} hist_write_t;

/* -------------------------------------------------------------- queries */

typedef enum {
    HIST_TIMEREL_NONE = 0,     /* no temporal restriction */
    HIST_TIMEREL_BEFORE,       /* t <  time_at (4.11: before is exclusive) */
    HIST_TIMEREL_AFTER,        /* t >= time_at (after is inclusive) */
    HIST_TIMEREL_BETWEEN       /* time_at <= t < end_time_at */
} hist_timerel_t;

typedef enum {
    HIST_TP_OBSERVED_AT = 0,   /* the default timeproperty (4.11) */
    HIST_TP_CREATED_AT,
    HIST_TP_MODIFIED_AT,
    HIST_TP_DELETED_AT
} hist_timeprop_t;

/* The time of an instance by a timeproperty (CR_NO_TIME: it has none, and
 * then it is never selected by a query on that timeproperty, with or
 * without timerel). */
int64_t hist_instance_time(const hist_instance_t *in, hist_timeprop_t tp);

/* The time by which query q orders and selects an instance (see 3. below). */
struct hist_query;
int64_t hist_query_time(const struct hist_query *q, const hist_instance_t *in);

/* A temporal query (5.7.3, 5.7.4). The backend selects:
 *  1. entities: those matching f (ids, idPattern, types, sel, q, geo, scope;
 *     f->attrs and f's pagination are NOT used: see attrs and the page
 *     below), evaluated with filter_match() on the entity's newest version
 *     as the core API last wrote it (for an entity deleted in the core API,
 *     the version before its deletion; for an entity that has only history
 *     (the version is gone, e.g. after a restart with the entity deleted),
 *     an entity of its id and types only, so that q, geo and scope do not
 *     match it). A backend may translate ids and types into its own query and
 *     must evaluate the rest with filter_match(). f NULL: every entity;
 *  2. in each, the series whose name is one of attrs (0: all) and whose
 *     datasetId is one of dataset_ids ("@none": the default instance; 0:
 *     all);
 *  3. in each series, the instances whose time by timeprop is set and
 *     satisfies timerel; ascending by that time (ties: in append order).
 *     Without timerel, an instance without observedAt is selected too when
 *     timeprop is observedAt, at its createdAt (hist_query_time). The
 *     deletedAt instances are selected only by timeprop deletedAt;
 *  4. last_n > 0: only the last last_n of them (still ascending);
 *  5. inst_limit (> 0): at most that many instances per series: the first
 *     ones (forwards), or with last_n the last ones (backwards, 6.3.10); a
 *     series so cut has cut = true. (history_query then cuts the whole
 *     answer to one time window holding at most inst_limit instances over
 *     all its entities and attributes, 6.3.10, and sets partial and the
 *     range; a backend need not.)
 *  6. entities with no instance left are not in the result (5.7.3.4, S1),
 *     except when instances are not asked for (attrs_only: entity records
 *     with their series' names, no instances);
 *  7. entities in creation order (of their history record), offset/limit;
 *     more: a further entity matches; count (when want_count): all matching
 *     entities.
 * Deleted entities (deletedAt set) are selected like the others. */
typedef struct hist_query {
    const entity_filter_t *f;
    const char *const     *attrs;          /* expanded, interned */
    size_t                 n_attrs;
    const char *const     *dataset_ids;
    size_t                 n_dataset_ids;
    hist_timerel_t         timerel;
    int64_t                time_at, end_time_at;
    hist_timeprop_t        timeprop;
    size_t                 last_n;
    size_t                 inst_limit;
    size_t                 offset, limit;  /* entities; limit 0 with want_count: count only */
    bool                   want_count;
    bool                   attrs_only;
} hist_query_t;

/* Aggregation (4.5.19): methods as a bit set. */
typedef enum {
    HIST_AGGR_TOTAL_COUNT    = 1u << 0,
    HIST_AGGR_DISTINCT_COUNT = 1u << 1,
    HIST_AGGR_SUM            = 1u << 2,
    HIST_AGGR_AVG            = 1u << 3,
    HIST_AGGR_MIN            = 1u << 4,
    HIST_AGGR_MAX            = 1u << 5,
    HIST_AGGR_STDDEV         = 1u << 6,
    HIST_AGGR_SUMSQ          = 1u << 7
} hist_aggr_t;
#define HIST_AGGR_N 8
const char *hist_aggr_name(unsigned bit_index);          /* "totalCount", ... */

/* One period of an aggregated series: [start, end). value[i] is method i's
 * result (bit i of hist_aggr_t), NULL when the method was not asked for or
 * does not apply (no values of a kind it takes): JSON in the arena; numbers
 * of sum, avg, stddev, sumsq (and min/max of numbers) with a fraction. */
typedef struct hist_bucket {
    int64_t start, end;
    json_t *value[HIST_AGGR_N];
} hist_bucket_t;

/* For backends that aggregate themselves (history_backend_t.aggregate): the
 * points of a series in time order, and history_buckets, which fills
 * s->buckets from them as history_aggregate does. */
typedef struct hist_point {
    int64_t       t;       /* hist_query_time */
    double        num;     /* the value, when j is NULL (numbers; booleans as 0/1) */
    const json_t *j;       /* any other value */
} hist_point_t;

struct hist_series;
void history_buckets(arena_t *a, const struct hist_query *q, const hist_point_t *pt, size_t n, unsigned methods,
                     int64_t period, struct hist_series *s);

/* orderBy of a temporal query (5.7.4.4: as for the entity query), for the
 * backends: out->items holds every matching entity in creation order and
 * ver[i] the version item i is ordered by (its newest); out becomes the page
 * q->offset/q->limit in the order o (model's order_compare; ties keep
 * creation order). */
struct hist_result;
void history_order_page(arena_t *a, const entity_order_t *o, const struct hist_query *q, const cr_entity_t **ver,
                        struct hist_result *out);

typedef struct hist_series {
    const char      *name;         /* interned */
    const char      *dataset_id;   /* NULL: the default instance */
    hist_instance_t *inst;         /* in the arena; ascending (see hist_query_t) */
    size_t           n;
    bool             cut;          /* the instance limit left instances out */
    /* aggregatedValues only (history_aggregate): the periods, in order */
    hist_bucket_t   *buckets;
    size_t           n_buckets;
} hist_series_t;

typedef struct hist_entity {
    const char        *id;
    const char *const *types;      /* the newest types (interned) */
    size_t             n_types;
    int64_t            created_at, modified_at;
    int64_t            deleted_at; /* CR_NO_TIME: not deleted */
    hist_series_t     *series;     /* grouped by name, in the order first written */
    size_t             n_series;
} hist_entity_t;

typedef struct hist_result {
    hist_entity_t *items;          /* in the arena */
    size_t         n;
    size_t         count;          /* want_count */
    bool           more;           /* a further entity matches beyond limit */
    /* 6.3.10 (set by history_query): the answer was cut to a time window of
     * at most inst_limit instances; range_first/range_last: the least / most
     * recent instance time (hist_query_time) in the answer */
    bool           partial;
    int64_t        range_first, range_last;
} hist_result_t;

/* ----------------------------------------------------- the backend table
 *
 * Every function may be called from any thread at once (a backend locks
 * itself); `append` is called for one tenant by one thread at a time, in
 * commit order (the store's delivery contract). Failures set p
 * (problem_set) and change nothing. */
typedef struct history_backend {
    const char *name;                                /* "corDB", "timescale" */
    /* Opens with cr_config (--history*, --dbDir, --historyURI); s: the store
     * (a backend that persists with the store registers with it here). */
    void *(*open)(store_t *s, problem_t *p);
    void  (*close)(void *be);

    /* Admission (ops_admit in ops.h): before every write of the core or
     * temporal API, reserve(n) sets aside room for n writes of history, or
     * fails (503, PB_HTTP, after the backend's own timeout: nothing is
     * written). The reservation is held for the whole write call, during
     * which the change hook appends that write's history (appends come
     * only from within reserved calls, but a purge's chunks); unreserve(n)
     * then gives it back, whatever the write did; for a held write (store.h
     * "Held answers": its hooks run after its call returns) only once it is
     * answered (history_unreserve, through store_hold_release; the tenant
     * is then ""), so the queue never holds more than its capacity, also
     * with --dbSync always. So a backend admits while
     * queued + reserved + n <= its capacity, and its queue holds capacity
     * + reserved: an append never waits, except a purge's (which waits for
     * room and never drops). NULL: always room (corDB). */
    bool  (*reserve)(void *be, const char *tenant, size_t n, problem_t *p);
    void  (*unreserve)(void *be, const char *tenant, size_t n);

    /* Applies the writes (see hist_write_t) of one tenant, in order. From
     * the change hook a failure can only be logged: a backend that can fail
     * (a database) must queue and retry, never drop. */
    bool  (*append)(void *be, const char *tenant, const hist_write_t *w, size_t n, problem_t *p);

    /* A temporal query (hist_query_t), results in arena a. */
    bool  (*query)(void *be, const char *tenant, const hist_query_t *q, arena_t *a,
                   hist_result_t *out, problem_t *p);
    /* Optional (NULL: history.c aggregates the instances query returns):
     * query with out's series carrying buckets (history_aggregate's
     * semantics) and no instances. */
    bool  (*aggregate)(void *be, const char *tenant, const hist_query_t *q, unsigned methods,
                       int64_t period, arena_t *a, hist_result_t *out, problem_t *p);

    /* Whether the entity has a history (true) and its types; false when
     * not (no problem set). Types go to arena a. */
    bool  (*entity_info)(void *be, const char *tenant, const char *id, arena_t *a,
                         const char *const **types, size_t *n_types);
    /* 5.6.16: the entity's whole history (ResourceNotFound when none). */
    bool  (*delete_entity)(void *be, const char *tenant, const char *id, problem_t *p);
    /* 5.6.13: the series of `name` with datasetId dataset_id (NULL: the
     * default), or every series of that name (delete_all). ResourceNotFound
     * when the entity or the series is not there. */
    bool  (*delete_attr)(void *be, const char *tenant, const char *id, const char *name,
                         const char *dataset_id, bool delete_all, problem_t *p);
    /* 5.6.15: one instance. ResourceNotFound when it is not there. */
    bool  (*delete_instance)(void *be, const char *tenant, const char *id, const char *name,
                             uint64_t instance_id, problem_t *p);
    /* 5.6.14: instance instance_id of `name` takes the content of `with`
     * (value, kind, unitCode, objectType, observedAt, sub-attributes; its
     * datasetId must be the instance's: BadRequestData otherwise); it keeps
     * its id and createdAt, modifiedAt = now. ResourceNotFound when absent. */
    bool  (*modify_instance)(void *be, const char *tenant, const char *id, const char *name,
                             uint64_t instance_id, const cr_attr_t *with, int64_t now,
                             problem_t *p);

    /* /statistics: instances held, series, bytes of memory they take (0 when
     * not known), instances dropped by the bounds. */
    void  (*stats)(void *be, uint64_t *instances, uint64_t *series, uint64_t *bytes,
                   uint64_t *dropped);
    /* Optional (NULL: nothing queued, always reachable): writes queued and
     * not yet durable in the backend, and whether its database answers
     * (/metrics, /ready). */
    void  (*health)(void *be, uint64_t *queued, bool *reachable);

    /* Optional (NULL: nothing to wait for). Returns when the history of
     * every write that returned before the call is as durable as --dbSync
     * promises the store's writes (always: on disk, group-committed with
     * the other writers waiting). Called by ops/ after each write, before it
     * is answered (history_sync). false: the disk failed (logged; the
     * write is committed in the store already). */
    bool  (*sync)(void *be);
    /* Optional: POST /admin/snapshot: a backend that persists in files
     * starts its snapshot now, in a thread of its own (writers wait for a
     * part of the copy at most); its outcome is logged. */
    bool  (*snapshot)(void *be, problem_t *p);
} history_backend_t;

/* ------------------------------------------------- what the broker calls */

/* Opens the backend --history names (NULL for none: every function below
 * then fails with OperationNotSupported, and history_enabled is false) and
 * adds its hook to the store (before the store's first write). */
history_t *history_open(store_t *s, problem_t *p);
void       history_close(history_t *h);
bool       history_enabled(const history_t *h);
/* The one history of the process (set by history_open; NULL: none), for
 * the operations layer. */
extern history_t *history_default;

/* The hook's translation, exported for tests and for backends that replay:
 * the writes of one committed change into w (at most 1, returns how many;
 * instances in arena a). Created and updated attributes give an instance
 * each (the after-version's attribute, createdAt = modifiedAt = ch->at);
 * deleted ones an instance with deletedAt = ch->at and the NGSI-LD Null as
 * value; an entity delete (after NULL) sets entity_deleted. A change that
 * touched no attribute (a type or scope change) still updates the entity
 * record (a write with no instances). A change of the Scope gives an
 * instance of the series MN.scope (4.5.6): the new scope as an array, with
 * observedAt = the commit time; a removed Scope an instance with deletedAt
 * and the value []. */
size_t history_from_change(const store_change_t *ch, arena_t *a, hist_write_t *w);

bool history_reserve(history_t *h, const char *tenant, size_t n, problem_t *p);
void history_unreserve(history_t *h, const char *tenant, size_t n);
bool history_append(history_t *h, const char *tenant, const hist_write_t *w, size_t n, problem_t *p);
bool history_query(history_t *h, const char *tenant, const hist_query_t *q, arena_t *a,
                   hist_result_t *out, problem_t *p);
/* aggregatedValues (4.5.19): methods (a hist_aggr_t set, not 0) over periods
 * of `period` µs (0: PT0S, the whole range as one period) starting at each
 * series' first selected instance; the last period ends at the range's end
 * (end_time_at for between, else the last instance + 1 µs). totalCount and
 * distinctCount count every instance; sum, avg, stddev, sumsq take numbers
 * (booleans count as 0/1, arrays by their size); min and max numbers,
 * else strings or DateTimes by their order; a method that does not apply
 * to any value of a period is NULL there. Deleted-instance markers are not
 * values. */
bool history_aggregate(history_t *h, const char *tenant, const hist_query_t *q, unsigned methods,
                       int64_t period, arena_t *a, hist_result_t *out, problem_t *p);
/* 6.3.10: out cut to one time window of at most q->inst_limit instances (as history_query cuts its
 * answers), partial and the range set; for an answer merged from several sources. */
void history_window(arena_t *a, const hist_query_t *q, hist_result_t *out);
/* The aggregation of history_aggregate over one series' instances (s->inst, ascending): s->buckets (a
 * distributed read aggregates the instances merged from several sources, fwd/fwd_tread.c's caller). */
void history_series_aggregate(arena_t *a, const hist_query_t *q, hist_series_t *s, unsigned methods,
                              int64_t period);
bool history_entity_info(history_t *h, const char *tenant, const char *id, arena_t *a,
                         const char *const **types, size_t *n_types);
bool history_delete_entity(history_t *h, const char *tenant, const char *id, problem_t *p);
bool history_delete_attr(history_t *h, const char *tenant, const char *id, const char *name,
                         const char *dataset_id, bool delete_all, problem_t *p);
bool history_delete_instance(history_t *h, const char *tenant, const char *id, const char *name,
                             uint64_t instance_id, problem_t *p);
bool history_modify_instance(history_t *h, const char *tenant, const char *id, const char *name,
                             uint64_t instance_id, const cr_attr_t *with, int64_t now, problem_t *p);
/* See history_backend_t.sync: before a write is answered. */
bool history_sync(history_t *h);
/* See history_backend_t.snapshot (true when the backend has none). */
bool history_snapshot(history_t *h, problem_t *p);
void history_stats(history_t *h, uint64_t *instances, uint64_t *series, uint64_t *bytes,
                   uint64_t *dropped);
/* See history_backend_t.health (h NULL: 0 queued, reachable). */
void history_health(history_t *h, uint64_t *queued, bool *reachable);

/* The backends. */
extern const history_backend_t history_cordb;
extern const history_backend_t history_timescale;   /* PostgreSQL (timescale.c) */
extern const history_backend_t history_timescale;   /* src/history/timescale*.c (branch pg) */

#endif
