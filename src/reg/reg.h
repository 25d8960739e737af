/*
 * reg.h - context source registrations (5.2.9 CSourceRegistration, 5.2.10
 * RegistrationInfo, 5.2.34 RegistrationManagementInfo): the model (parse,
 * validate, render) and the registry, an index of every tenant's
 * registrations by entity id and by entity type that the operations
 * (discovery, registration subscriptions, forwarding) ask "which
 * registrations may answer for this?" without scanning all of them.
 *
 * Who calls what:
 *  - ops/registrations.c (5.9, 5.10): reg_build() on the stored document,
 *    reg_add()/reg_replace()/reg_remove(), reg_find()/reg_list(),
 *    reg_conflict() for the exclusive/redirect rules, reg_render(). ops/
 *    persists the document through the store (STORE_OBJ_REGISTRATION);
 *    reg/ keeps the parsed in-memory index, rebuilt from the store at start.
 *  - forwarding (5.7.2 distributed): reg_match() with the operation's entity
 *    specification and operation name, then reg_info_match() per
 *    RegistrationInfo to learn what to ask each source, and reg_count() with
 *    the outcome of every forward (timesSent, status, lastSuccess ...).
 *
 * The stored document is the JSON the client gave (terms compact) with "id",
 * "type", "@context" (the creating request's) and createdAt/modifiedAt; the
 * read-only members (status, timesSent, timesFailed, lastSuccess,
 * lastFailure) are never stored: they are counters of the parsed
 * registration, kept across updates. Names (entity types, propertyNames,
 * relationshipNames, context source properties) are expanded with the stored
 * @context and interned, so matching compares pointers and rendering
 * compacts them with the context of the reading request.
 *
 * Concurrency: a reg_t is immutable once built (its counters are atomics);
 * the registry is one read-write lock (registration writes are rare, reads
 * are per forwarded request and only take references).
 */
#ifndef CORAINE_REG_H
#define CORAINE_REG_H

#include "../core/core.h"
#include "../json/json.h"
#include "../ld/ld.h"
#include "../model/model.h"
#include "../notify/notify.h"

typedef struct reg reg_t;

typedef enum { REG_INCLUSIVE = 0, REG_EXCLUSIVE, REG_REDIRECT, REG_AUXILIARY } reg_mode_t;

/* The operation names of 4.20 (Table 4.20-1); a registration's operations
 * (groups expanded) are a mask of 1 << REG_OP_*. */
typedef enum {
    REG_OP_CREATE_ENTITY = 0, REG_OP_UPDATE_ENTITY, REG_OP_APPEND_ATTRS, REG_OP_UPDATE_ATTRS,
    REG_OP_DELETE_ATTRS, REG_OP_DELETE_ENTITY, REG_OP_CREATE_BATCH, REG_OP_UPSERT_BATCH, REG_OP_UPDATE_BATCH,
    REG_OP_DELETE_BATCH, REG_OP_UPSERT_TEMPORAL, REG_OP_APPEND_ATTRS_TEMPORAL, REG_OP_DELETE_ATTRS_TEMPORAL,
    REG_OP_UPDATE_ATTR_INSTANCE_TEMPORAL, REG_OP_DELETE_ATTR_INSTANCE_TEMPORAL, REG_OP_DELETE_TEMPORAL,
    REG_OP_MERGE_ENTITY, REG_OP_REPLACE_ENTITY, REG_OP_REPLACE_ATTRS, REG_OP_MERGE_BATCH, REG_OP_PURGE_ENTITY,
    REG_OP_RETRIEVE_ENTITY, REG_OP_QUERY_ENTITY, REG_OP_QUERY_BATCH, REG_OP_RETRIEVE_TEMPORAL,
    REG_OP_QUERY_TEMPORAL, REG_OP_RETRIEVE_ENTITY_TYPES, REG_OP_RETRIEVE_ENTITY_TYPE_DETAILS,
    REG_OP_RETRIEVE_ENTITY_TYPE_INFO, REG_OP_RETRIEVE_ATTR_TYPES, REG_OP_RETRIEVE_ATTR_TYPE_DETAILS,
    REG_OP_RETRIEVE_ATTR_TYPE_INFO, REG_OP_CREATE_SUBSCRIPTION, REG_OP_UPDATE_SUBSCRIPTION,
    REG_OP_RETRIEVE_SUBSCRIPTION, REG_OP_QUERY_SUBSCRIPTION, REG_OP_DELETE_SUBSCRIPTION,
    REG_OP_RETRIEVE_ENTITY_MAP, REG_OP_UPDATE_ENTITY_MAP, REG_OP_DELETE_ENTITY_MAP,
    REG_OP_CREATE_ENTITY_MAP_QUERY_ENTITY, REG_OP_CREATE_ENTITY_MAP_QUERY_TEMPORAL,
    REG_OP_RETRIEVE_CONTEXT_SOURCE_IDENTITY,
    REG_OP__COUNT
} reg_op_t;

#define REG_OP_BIT(op) ((uint64_t)1 << (op))
/* The entity and temporal writes: every operation before REG_OP_RETRIEVE_ENTITY. */
#define REG_WRITE_OPS (REG_OP_BIT(REG_OP_RETRIEVE_ENTITY) - 1)

/* ------------------------------------------------------- the model (reg.c) */

/* Validates the stored document of a registration of tenant (NULL/"":
 * default) and builds it (refs = 1). Errors: BadRequestData naming the member
 * (5.2.9, 5.2.10, 5.2.34, 4.3.6.6, the auxiliary rule of 5.9.2.4),
 * LdContextNotAvailable when the @context cannot be had. `now` decides
 * whether expiresAt is in the past (0: not checked, for the rebuild). */
reg_t      *reg_build(const char *tenant, const char *json, size_t len, int64_t now, problem_t *p);
void        reg_ref(reg_t *r);
void        reg_unref(reg_t *r);
const char *reg_id(const reg_t *r);
const char *reg_tenant(const reg_t *r);              /* interned, "" = default */
const char *reg_doc(const reg_t *r, size_t *len);    /* the stored document (NUL-terminated) */
const ld_context_t *reg_context(const reg_t *r);     /* the @context its members are written in */
reg_mode_t  reg_mode(const reg_t *r);
uint64_t    reg_ops(const reg_t *r);                 /* REG_OP_BIT mask, groups expanded */
const char *reg_endpoint(const reg_t *r);
const char *reg_alias(const reg_t *r);               /* contextSourceAlias or NULL */
const char *reg_source_tenant(const reg_t *r);       /* the member "tenant" (sent to the source) or NULL */
int64_t     reg_expires_at(const reg_t *r);          /* CR_NO_TIME: never */
bool        reg_temporal(const reg_t *r);            /* it has an observationInterval or managementInterval */
/* management (5.2.34): 0 when absent */
long        reg_timeout_ms(const reg_t *r);
long        reg_cooldown_ms(const reg_t *r);
int64_t     reg_cache_us(const reg_t *r);       /* management.cacheDuration in µs, 0: none */
bool        reg_local_only(const reg_t *r);
/* contextSourceInfo (4.3.6.6): the value of key, or NULL; all pairs in order */
const char *reg_csource_info(const reg_t *r, const char *key);
size_t      reg_csource_info_count(const reg_t *r);
void        reg_csource_info_at(const reg_t *r, size_t i, const char **key, const char **value);
/* lastFailure (µs), 0: none yet */
int64_t     reg_last_failure(const reg_t *r);

/* One RegistrationInfo (5.2.10), names expanded and interned. */
typedef struct reg_entity_info {
    const char  *id;            /* NULL: none */
    const char  *id_pattern;    /* the text, NULL: none */
    void        *pattern;       /* compiled (filter_regex_compile) */
    const char **types;         /* >= 1 */
    size_t       n_types;
} reg_entity_info_t;
typedef struct reg_info {
    reg_entity_info_t *entities; size_t n_entities;   /* 0: any entity */
    const char       **props;    size_t n_props;
    const char       **rels;     size_t n_rels;       /* props and rels both 0: any attribute */
} reg_info_t;
size_t            reg_info_count(const reg_t *r);
const reg_info_t *reg_info_at(const reg_t *r, size_t i);

/* The registration as GET answers it (5.2.9): the stored members with names
 * compacted with ctx (the reading request's), mode and operations (their
 * defaults when absent), the read-only status, timesSent, timesFailed,
 * lastSuccess, lastFailure once a distributed operation was attempted;
 * with_context: "@context" (ctx's value); sys_attrs: createdAt, modifiedAt.
 * info_mask (bit i: RegistrationInfo i; ~0: all) keeps only the matching
 * RegistrationInfo elements (5.10.2.5). */
void reg_render(json_writer_t *w, const reg_t *r, const ld_context_t *ctx, bool with_context, bool sys_attrs,
                uint64_t info_mask);

/* A distributed operation to the source of r was attempted (ok: a 2xx). */
void reg_count(reg_t *r, bool ok, int64_t now);

/* The pseudo-entity the registration's context source properties, scope and
 * location/observationSpace/operationSpace form (as Properties/GeoProperties):
 * what csf (q), scopeQ and geo queries of discovery evaluate. */
const cr_entity_t *reg_as_entity(const reg_t *r);

/* observationInterval (observed true) or managementInterval: false when absent. */
bool reg_interval(const reg_t *r, bool observed, int64_t *start, int64_t *end /* CR_NO_TIME: open */);
/* A temporal query (4.11) against that interval (5.10.2.4): before/after
 * timeAt within it or at an end, between: an overlap. No interval: false. */
enum { REG_TIMEREL_BEFORE = 1, REG_TIMEREL_AFTER = 2, REG_TIMEREL_BETWEEN = 3 };
bool reg_time_match(const reg_t *r, int timerel, int64_t time_at, int64_t end_time_at, bool observed);

/* ---------------------------------------------------- the registry (registry.c) */

/* Adds r (the registry takes its own reference). AlreadyExists when its id is
 * taken in its tenant. */
bool    reg_add(reg_t *r, problem_t *p);
/* Replaces the registration with r's id by r (keeping its counters);
 * ResourceNotFound when there is none. */
bool    reg_replace(reg_t *r, problem_t *p);
bool    reg_remove(const char *tenant, const char *id, problem_t *p);
/* A reference (reg_unref it), or NULL; an expired one is not found (now 0: found too). */
reg_t  *reg_find(const char *tenant, const char *id, int64_t now);
/* The tenant's registrations in creation order (references in an array of
 * arena a), skipping offset, at most limit; *total gets all. Expired ones
 * are left out. */
reg_t **reg_list(const char *tenant, size_t offset, size_t limit, int64_t now, arena_t *a, size_t *n,
                 size_t *total);
/* fn(tenant) after every add, replace or remove of a registration of
 * tenant (creation, update, deletion, expiry, restart): one listener (the
 * distributed subscriptions of fwd/), set once at start; it only takes note. */
void    reg_set_listener(void (*fn)(const char *tenant));
/* Counters kept beyond this process (ops/objsync.c, --database mongoc:
 * aggregated in the database over every process on it): add(ud, tenant,
 * id, ok, at) after each forward is counted here (reg_count); read gives
 * the totals that timesSent, timesFailed, lastSuccess and lastFailure show
 * (false: this process's own). Set once, before requests are served. */
typedef struct reg_totals {
    int64_t sent, failed, last_success, last_failure;
} reg_totals_t;
typedef struct reg_totals_hooks {
    void (*add)(void *ud, const char *tenant, const char *id, bool ok, int64_t at);
    bool (*read)(void *ud, const char *tenant, const char *id, reg_totals_t *t);
    void  *ud;
} reg_totals_hooks_t;
void    reg_set_totals(const reg_totals_hooks_t *h);
/* Any registration at all (a relaxed read: the fast path of every retrieve
 * and query when nothing is registered). */
bool    reg_any(void);
/* A registration was ever created in this tenant. */
bool    reg_tenant_known(const char *tenant);
/* The tenant (NULL: the default) has registrations now; with writes, only
 * those whose operations include an entity or temporal write
 * (REG_WRITE_OPS). Nothing interned, a read lock only when some tenant has
 * any: cheap enough for every request. */
bool    reg_tenant_has(const char *tenant, bool writes);
/* The ids of the registrations that expired by `now` (any tenant), in arena
 * a, with their tenants: the caller removes them from the store and the
 * registry. */
size_t  reg_expired(int64_t now, arena_t *a, const char ***tenants, const char ***ids);

/* An entity specification (5.12): what an operation or a discovery asks
 * for. Every member optional; names expanded and interned (a name that was
 * never interned matches nothing: pass it as a non-interned string and it
 * will not be found, which is right). */
typedef struct reg_query {
    const typesel_t   *types;      /* type selection (4.17), or NULL */
    const char *const *ids;  size_t n_ids;
    const void        *id_pattern; /* compiled (filter_regex_compile), or NULL */
    const char *const *attrs; size_t n_attrs;
    uint64_t           ops;        /* the registration supports one of them; 0: any */
    unsigned           modes;      /* 1 << reg_mode_t it must have one of; 0: any */
    bool               temporal;   /* false: only registrations without intervals; true: only with */
    const char *const *skip_aliases; size_t n_skip_aliases;  /* Via: previously encountered sources */
} reg_query_t;

/* The registrations of tenant that match q (5.12), in creation order, as
 * references in an array of arena a (reg_unref each); *masks (when not
 * NULL) gets, per registration, the RegistrationInfo elements that match.
 * Candidates come from the index: the entries of q's types, of q's ids, and
 * the short lists (idPattern entries when q names ids without types,
 * type-less RegistrationInfo always), never from all registrations unless
 * q selects no entity at all. */
reg_t **reg_match(const char *tenant, const reg_query_t *q, int64_t now, arena_t *a, size_t *n,
                  uint64_t **masks);
/* Whether RegistrationInfo i of r matches q (5.12). */
bool    reg_info_match(const reg_t *r, size_t i, const reg_query_t *q);

/* The exclusive/redirect rules of 5.9.2.4 and 4.3.6.3 among registrations:
 * r (exclusive or redirect) overlaps an existing exclusive registration, or
 * (r exclusive) a redirect one, of its tenant for the same entity id and one
 * of the same attributes (the registration with r's id is not compared).
 * Conflict naming the other one. */
bool    reg_conflict(const reg_t *r, problem_t *p);

/* ------------------------- registration subscriptions (csub.c, 5.11, 6.12, 6.13)
 *
 * A context source registration subscription is a notify_sub_t built by
 * notify_csub_build (the rules of 5.2.12, and temporalQ); reg/ keeps them
 * per tenant, matches them against registrations as 5.11.2.4 and 5.12 say
 * (entities, watchedAttributes with notification.attributes, geoQ on the
 * registration's location, scopeQ, csf on its context source properties,
 * temporalQ on its intervals) and has notify/ send the CSourceNotifications
 * (5.3.2): initially (every matching registration, newlyMatching), on every
 * change of a registration that matches before or after it (newlyMatching,
 * updated, noLongerMatching), and every timeInterval for a periodic one. */
/* Checks what reg/ interprets of s's document (csf, temporalQ): BadRequestData. */
bool           reg_csub_check(const notify_sub_t *s, problem_t *p);
/* Adds s (takes a reference; AlreadyExists), then (initial) sends its
 * initial notification (not at a restart). */
bool           reg_csub_add(notify_sub_t *s, bool initial, problem_t *p);
/* Replaces the one with s's id (its counters carry over; ResourceNotFound),
 * then sends a notification with every matching registration (5.11.3.4). */
bool           reg_csub_replace(notify_sub_t *s, problem_t *p);
bool           reg_csub_remove(const char *tenant, const char *id, problem_t *p);
notify_sub_t  *reg_csub_find(const char *tenant, const char *id);   /* a reference, or NULL */
notify_sub_t **reg_csub_list(const char *tenant, size_t offset, size_t limit, arena_t *a, size_t *n, size_t *total);
bool           reg_csub_tenant_known(const char *tenant);
/* A registration changed in its tenant: before NULL (created), after NULL
 * (deleted or expired), or both (updated). Sends what is due. */
void           reg_csub_changed(const reg_t *before, const reg_t *after);

/* Stops the periodic notifications and frees the registries (at exit,
 * before notify_stop). */
void    reg_shutdown(void);

typedef struct reg_stats {
    uint64_t registrations, tenants;
} reg_stats_t;
void reg_get_stats(reg_stats_t *st);

#endif
