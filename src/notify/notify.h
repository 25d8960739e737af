/*
 * notify.h - subscriptions (5.2.12) and their notifications (5.3.1, 5.8):
 * the subscription model (parse, validate, render), the engine that matches
 * every committed change against them and delivers notifications over HTTP.
 *
 * Who calls what:
 *  - main.c: notify_start() after store_open() and before the first write
 *    (it registers the store hook), notify_stop() at exit (drains the queues
 *    for at most --notifierDrain ms, then drops and counts what is left);
 *  - ops/subscriptions.c (the operations 5.8.1-5.8.5): notify_sub_build()
 *    on the stored document, notify_add()/notify_replace()/notify_remove(),
 *    notify_find()/notify_list() and notify_sub_render(). ops/ persists the
 *    document through the store; notify/ keeps its parsed in-memory index.
 *
 * The stored document of a subscription is its JSON as the client gave it
 * (terms compact, as in the request) with "id", "type", "@context" (the
 * context of the request that created it) and the system members added.
 * notify_sub_build() validates and parses that document; the same call serves
 * creation, update (on the merged document) and the rebuild at start.
 *
 * The engine (engine.c):
 *  - index: per tenant, subscriptions by entity id, by entity type, and a
 *    short list for the others (idPattern without a type list, no entities);
 *    a change is matched against the candidates of its entity only;
 *  - matcher: the store hook, on the writer's thread, in the tenant's commit
 *    order: trigger, watchedAttributes, selectors, q/geoQ/scopeQ, status,
 *    throttling; a due notification becomes a job (references to the
 *    subscription and the entity version, no rendering) queued on its
 *    endpoint; a job that finds the queue full is dropped and counted there,
 *    before the write is answered;
 *  - endpoints: one per notification URI, with --notifierInflight lanes; the
 *    jobs of one (subscription, entity) always take the same lane, so they are
 *    sent in commit order; a lane is one keep-alive HTTP connection (a libcurl
 *    easy handle kept for the lane) and has one notification in flight;
 *  - senders: --notifierThreads threads take ready lanes and render; the
 *    clients carry every lane's request at once (httpc.c's epoll thread for
 *    http:// literal addresses, libcurl multi's thread for the others,
 *    libmosquitto's network threads for MQTT), so a slow or dead endpoint
 *    holds only its own lanes, never a thread;
 *  - failures: a failed notification is retried (--notifierRetries, after
 *    --notifierRetryDelay doubling, at least endpoint.cooldown) at the head of
 *    its lane, so order holds; the lane is parked meanwhile, not a thread;
 *    within endpoint.cooldown of a failure nothing else of the subscription
 *    is sent (5.2.15: dropped, counted). Each failure says why (the
 *    client's reason: a status, errno, a timeout, the egress policy), kept
 *    per subscription (coraine:lastFailureReason);
 *  - egress: an endpoint host refused as written (a host rule, a literal
 *    address) refuses the subscription (BadRequestData); a host name is
 *    checked again on each address connected (libcurl's socket callback,
 *    MQTT's resolution and peer), so DNS rebinding gets a failure, not a
 *    connection.
 *
 * Every count is kept per subscription (timesSent, timesFailed, due, dropped)
 * and over all of them (/statistics).
 */
#ifndef CORAINE_NOTIFY_H
#define CORAINE_NOTIFY_H

#include "../core/core.h"
#include "../json/json.h"
#include "../ld/ld.h"
#include "../model/model.h"
#include "../store/store.h"

typedef struct notify_sub notify_sub_t;

/* Starts the engine on store s: the hook, the sender threads. */
bool notify_start(store_t *s, problem_t *p);
/* Stops accepting jobs, lets the senders drain for at most --notifierDrain
 * ms, counts the rest as dropped (shutdown), joins the threads, frees all. */
void notify_stop(void);

/* ------------------------------------------------------- the model (sub.c) */

/* Validates the stored document (see above) of a subscription of tenant
 * (NULL/"": default) and builds it (refs = 1). Errors: BadRequestData with a
 * detail naming the member (5.2.12 - 5.2.15), LdContextNotAvailable when the
 * @context cannot be had. `now` decides whether expiresAt is in the past
 * (0: not checked, for the rebuild at start). */
notify_sub_t *notify_sub_build(const char *tenant, const char *json, size_t len, int64_t now, problem_t *p);
void          notify_sub_ref(notify_sub_t *s);
void          notify_sub_unref(notify_sub_t *s);
const char   *notify_sub_id(const notify_sub_t *s);
/* The stored document (NUL-terminated). */
const char   *notify_sub_doc(const notify_sub_t *s, size_t *len);
/* The subscription as GET /subscriptions/{id} answers it (5.2.12): the stored
 * members, jsonldContext, status, and the notification's read-only members
 * (status, timesSent, timesFailed, lastNotification, lastSuccess, lastFailure)
 * (status once one was attempted). with_context: add "@context"; sys_attrs:
 * createdAt, modifiedAt and coraine's counters (coraine:due, coraine:dropped). */
void          notify_sub_render(json_writer_t *w, const notify_sub_t *s, bool with_context, bool sys_attrs);
/* The same in context ctx (the request's, 6.3.5): the names compacted with
 * it and, with_context, ctx as "@context". NULL: as stored. */
void          notify_sub_render_in(json_writer_t *w, const notify_sub_t *s, const ld_context_t *ctx,
                                   bool with_context, bool sys_attrs);
/* The @context the subscription's members are written in. */
const ld_context_t *notify_sub_context(const notify_sub_t *s);

/* Builds the stored document for a new subscription from a request body:
 * adds "id" (a generated urn:ngsi-ld:Subscription:<uuid> when absent), the
 * "@context" (ctx's value) and createdAt/modifiedAt, in arena a. */
char *notify_doc_new(arena_t *a, const json_t *body, const ld_context_t *ctx, int64_t now, size_t *len);
/* The document of an update (5.5.8: the members of patch replace those of the
 * stored document; id, type and @context stay): in arena a. BadRequestData
 * when patch changes the id or type. */
char *notify_doc_patch(arena_t *a, const char *stored, size_t stored_len, const json_t *patch, int64_t now,
                       size_t *len, problem_t *p);

/* A copy of the subscription members of body (a request body or a stored
 * document) with every name in them (entity types, watchedAttributes, the
 * attribute paths and vocabulary values of q, geoQ.geoproperty,
 * notification.attributes, pick, omit, expandValues, jsonKeys) written for
 * context `to` instead of `from`: expanded with from, compacted with to (a
 * full IRI where to has no term). For a PATCH in another @context than the
 * subscription's (5.8.2) and for answers in the request's @context. */
json_t *notify_doc_reterm(arena_t *a, const json_t *body, const ld_context_t *from, const ld_context_t *to);
/* The two contexts give every name the same meaning (the same context). */
bool    notify_same_context(const ld_context_t *x, const ld_context_t *y);

/* Periodic notification (timeInterval) reads the entities through this
 * source, set by ops/ at start (only ops/ calls the store): fn(fud, e) for
 * each entity of tenant matching f, under the store's read lock (fn only
 * takes a reference). false when the tenant has no entities. */
typedef bool (*notify_source_fn)(void *ud, const char *tenant, const entity_filter_t *f,
                                 void (*fn)(void *fud, const cr_entity_t *e), void *fud);
void notify_set_source(notify_source_fn fn, void *ud);

/* Linked entities of a notification with notification.join (5.8.6, 4.5.23),
 * fetched through ops/ (set at start): fetch(ud, tenant, roots, n, flat,
 * level, ro, out) fetches what the roots' relationships target (as the
 * entity API does for ro's projection) and fills out; it returns a handle
 * for release(), or NULL when nothing could be fetched. */
typedef struct notify_linked {
    cr_entity_t *const        *items;       /* flat: in order (breadth first), with their projections */
    const projection_t *const *pick, *const *omit;
    size_t                     n;
    const cr_entity_t       *(*find)(const void *h, const char *id);   /* inline: render_join_t.find */
    const void                *h;
} notify_linked_t;
typedef void *(*notify_join_fn)(void *ud, const char *tenant, cr_entity_t *const *roots, size_t n, bool flat,
                                unsigned level, const render_opts_t *ro, notify_linked_t *out);
void notify_set_join(notify_join_fn fetch, void (*release)(void *h), void *ud);

/* Terms into linked entities in a subscription's q (4.9 rel{attr}) are
 * evaluated when a change is matched, against the current versions of the
 * linked entities held here, read through ops/ (set at start): get(ud,
 * tenant, id) returns a reference (entity_unref it) or NULL. Called on the
 * matcher's thread, a store hook: it only reads. */
typedef cr_entity_t *(*notify_get_fn)(void *ud, const char *tenant, const char *id);
void notify_set_linker(notify_get_fn get, void *ud);

/* ---------------------------------------------------- the registry (engine.c) */

/* Adds s (the registry takes its own reference). AlreadyExists when the id
 * is taken in its tenant. */
bool          notify_add(notify_sub_t *s, problem_t *p);
/* Replaces the subscription with s's id by s, keeping its counters;
 * ResourceNotFound when there is none. */
bool          notify_replace(notify_sub_t *s, problem_t *p);
/* Removes it: no notification is sent for it any more (queued ones are
 * skipped). ResourceNotFound when there is none. */
bool          notify_remove(const char *tenant, const char *id, problem_t *p);
/* A reference (notify_sub_unref it), or NULL. */
notify_sub_t *notify_find(const char *tenant, const char *id);
/* The tenant's subscriptions in creation order: references in an array of
 * arena a (unref each), skipping offset, at most limit; *total gets all. */
notify_sub_t **notify_list(const char *tenant, size_t offset, size_t limit, arena_t *a, size_t *n,
                           size_t *total);

/* A subscription was ever created in this tenant (it then exists, 4.14). */
bool          notify_tenant_known(const char *tenant);

/* ------------------------ context source registration subscriptions (5.11)
 *
 * reg/ keeps them and matches them against registrations; notify/ validates
 * the document (the rules of a subscription, and temporalQ) and sends their
 * CSourceNotifications (5.3.2) through the same endpoints, lanes and
 * counters as any notification. */
notify_sub_t *notify_csub_build(const char *tenant, const char *json, size_t len, int64_t now, problem_t *p);
/* Before its first notify_send: its endpoint, and its counters (prev's, when
 * it replaces prev, so timesSent and the rest carry over). */
void          notify_csub_start(notify_sub_t *s, const notify_sub_t *prev);
/* It was deleted: its queued notifications are dropped (counted deleted). */
void          notify_csub_stop(notify_sub_t *s);
/* What a subscription selects (pointers into s, valid while s is). */
typedef struct notify_selection {
    const entity_selector_t *sel;      size_t n_sel;
    const char *const       *watched;  size_t n_watched;   /* expanded, interned */
    const char *const       *attrs;    size_t n_attrs;     /* notification.attributes, expanded */
    const q_expr_t          *q;
    const geoq_t            *geo;
    const scopeq_t          *scope;
    int64_t                  interval_us;                  /* timeInterval, 0: none */
} notify_selection_t;
void          notify_sub_selection(const notify_sub_t *s, notify_selection_t *out);
/* Its tenant (interned, "" = default). */
const char   *notify_sub_tenant(const notify_sub_t *s);
/* The @context notifications are compacted with (jsonldContext). */
const ld_context_t *notify_sub_out_context(const notify_sub_t *s);
/* isActive and not expired at now. */
bool          notify_sub_active(const notify_sub_t *s, int64_t now);
/* Queues a notification of s whose "data" is `data` (a rendered JSON array,
 * copied) with triggerReason `reason` (a static string, or NULL), in s's
 * endpoint's lanes; a full queue drops it, counted. */
void          notify_send(notify_sub_t *s, const char *data, size_t len, const char *reason);

/* ------------------------------------ distributed subscriptions (fwd/fwd_sub.c)
 *
 * A subscription whose entities are registered at context sources is
 * planted there too (5.8.1.4); fwd/ keeps those remote subscriptions. */
/* fn(tenant, id) after every add, replace or remove of a subscription
 * (creation, update, deletion, restart, another process's write): one
 * watcher, set once before the subscriptions are restored. fn only takes
 * note (it runs under the callers' locks). */
void notify_set_watcher(void (*fn)(const char *tenant, const char *id));
/* A change at a context source that source notified to this broker through
 * the subscription planted there for s: the source matched it (triggers,
 * watchedAttributes, q ...), so here only s's own status, expiry and
 * throttling apply; e (the entity as notified; deleted: an entityDeleted)
 * is queued on s's endpoint as its own changes are, in order per entity,
 * rendered with s's format and attributes. Counted as s's changes are. */
void notify_relay(notify_sub_t *s, cr_entity_t *e, bool deleted, int64_t at);
/* fn(w, s) writes extra members of s at the end of GET's object with
 * sysAttrs (the remote subscriptions' state). */
void notify_set_render_extra(void (*fn)(json_writer_t *w, const notify_sub_t *s));

/* Counters kept beyond this process (ops/objsync.c, --database mongoc:
 * aggregated in the database over every process on it): add(ud, tenant,
 * id, ok, at) after each attempt is counted here; read(ud, tenant, id, t)
 * gives the totals that timesSent, timesFailed, lastNotification,
 * lastSuccess and lastFailure show (false: this process's own). Set once,
 * before entity writes are served; t->times in µs, 0: never. */
typedef struct notify_totals {
    int64_t sent, failed, last_notification, last_success, last_failure;
} notify_totals_t;
typedef struct notify_totals_hooks {
    void (*add)(void *ud, const char *tenant, const char *id, bool ok, int64_t at);
    bool (*read)(void *ud, const char *tenant, const char *id, notify_totals_t *t);
    void  *ud;
} notify_totals_hooks_t;
void notify_set_totals(const notify_totals_hooks_t *h);

/* ---------------------------------------------------------- statistics */

typedef struct notify_stats {
    uint64_t subscriptions;
    uint64_t due;                 /* notifications the matcher found due */
    uint64_t sent, failed;        /* delivered (2xx) / not */
    uint64_t dropped_queue_full, dropped_shutdown, dropped_deleted;
    uint64_t dropped_expired;     /* changes that would have been due after expiresAt */
    uint64_t dropped_failing;     /* not tried: the endpoint failed FAIL_STREAK times in a row, backing off */
    uint64_t throttled;           /* due changes not sent because of throttling */
    uint64_t delivered;           /* due changes in a delivered notification */
    uint64_t retried;             /* attempts that retried a failed notification (--notifierRetries) */
    uint64_t dropped_cooldown;    /* not sent: within the subscription's endpoint.cooldown of a failure */
    uint64_t dropped_retries;     /* changes of a notification that failed all its attempts */
    uint64_t queued;              /* now waiting in the queues */
    uint64_t queued_max;          /* now waiting in the longest endpoint queue */
    uint64_t endpoints;
} notify_stats_t;
void notify_get_stats(notify_stats_t *st);

/* The depth of each endpoint's queue (/metrics), bounded in number: the
 * NOTIFY_QUEUES_MAX deepest queues, deepest first, each named by its endpoint
 * without user information, query or fragment (egress_url_shown; two
 * endpoints may then share a name); every other endpoint's queue is summed
 * into *other (*n_other of them). Returns how many of out are filled. */
#define NOTIFY_QUEUES_MAX     64
#define NOTIFY_QUEUE_NAME_LEN 200
typedef struct notify_queue_depth {
    char     endpoint[NOTIFY_QUEUE_NAME_LEN];
    uint64_t queued;
} notify_queue_depth_t;
size_t notify_queue_depths(notify_queue_depth_t out[NOTIFY_QUEUES_MAX], uint64_t *other, size_t *n_other);

#endif
