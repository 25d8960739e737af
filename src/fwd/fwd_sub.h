/*
 * fwd_sub.h - distributed subscriptions (5.8.1.4, 5.8.2.4, 5.8.5.4; 4.3.6):
 * a subscription created here whose entities match a context source
 * registration that supports createSubscription is planted at that source
 * (over HTTP, or cor:// for a cor://host:port endpoint), with this broker's
 * /dsub/{key} as its notification endpoint; what the source notifies there
 * is relayed to the subscriber as a notification of the subscription here
 * (notify_relay: its id, format, attributes, throttling, counters).
 *
 * The remote subscriptions ("parts": one per subscription and registration)
 * are kept by one thread that plants, patches, verifies and deletes them,
 * never by a request's worker: the subscription and registration operations
 * only take note (notify_set_watcher, reg_set_listener), so a slow or dead
 * source holds no request. A part that fails is retried with backoff (1 s
 * doubling to 60 s), counted in the registration's timesFailed, and shown
 * with ?options=sysAttrs as coraine:remote of the subscription.
 *
 * One part per source (endpoint and source tenant): several registrations
 * of one source plant one copy. Nothing is persisted beyond the
 * subscriptions and registrations themselves: a remote subscription's id is
 * derived from this broker's alias, the tenant, the subscription and the
 * source tenant (not the registration nor the endpoint), so a restarted
 * broker plants the same id again (409 AlreadyExists: then PATCHed with the
 * new endpoint key), never a second one, and a second endpoint of a broker
 * planted at already gets 409 too (the part waits as "duplicate" and plants
 * when the first goes).
 *
 * Orphans: a copy carries an expiresAt, the sooner of the subscription's
 * and a lease of --dsubLease seconds that this broker renews (PATCH at half
 * of it; sources with updateSubscription), so a copy this broker lost track
 * of stops notifying on its own. A delete that fails is retried with
 * backoff (about a day). After a start, on a new source and every
 * --dsubLease, each source that allows querySubscription and
 * deleteSubscription is asked for its subscriptions: one whose id is ours
 * (its chain ends with this broker's alias) and that no part holds is
 * deleted. The id also carries the chain of
 * brokers it was planted through (urn:ngsi-ld:Subscription:dsub:<part
 * hash>:<alias hash>.<alias hash>...), kept by each source with the
 * subscription: a broker that finds itself in the chain of a subscription
 * it is asked to create answers 508 LoopDetected, and a registration whose
 * contextSourceAlias is in the chain is not planted at, so registrations in
 * a loop multiply nothing, across restarts too.
 *
 * Who calls what: main.c fwd_sub_init() before the subscriptions are
 * restored, fwd_sub_start() after fwd_start(), fwd_sub_ready() once the
 * cor:// client and the HTTP server are up, fwd_sub_stop() before
 * notify_stop(); api/subscriptions.c fwd_sub_admit() on a creation and
 * fwd_sub_receive() for POST /dsub/{key}.
 */
#ifndef CORAINE_FWD_SUB_H
#define CORAINE_FWD_SUB_H

#include "../core/core.h"
#include "../json/json.h"
#include "../ld/ld.h"
#include "../model/model.h"

/* The path prefix of the notification endpoint sources are given. */
#define FWD_SUB_PATH "/dsub/"

/* Sets the watchers (events queue until fwd_sub_start). */
void fwd_sub_init(void);
bool fwd_sub_start(problem_t *p);
/* cor:// and HTTP are up: sources may be asked for orphans (none is before:
 * a cor:// source asked earlier would not answer). */
void fwd_sub_ready(void);
/* Stops the thread; the remote subscriptions stay (a restart finds them). */
void fwd_sub_stop(void);

/* A subscription to be created (body) by a request with Via `via`: false
 * (508 LoopDetected) when the Via or the chain in the id names this broker. */
bool fwd_sub_admit(const json_t *body, const char *via, problem_t *p);

/* A notification (the parsed body) a source sent to /dsub/{key}: relayed.
 * ResourceNotFound for an unknown key (a remote subscription this broker no
 * longer has: the source counts a failure), BadRequestData for a body that
 * is not a Notification. */
/* local(tenant, id, a): this broker's version of an entity (a reference, or NULL), read by the binding
 * (fwd/ never calls the store) to merge a split entity (5.8.6); NULL: none read. */
typedef cr_entity_t *(*fwd_sub_local_fn)(const char *tenant, const char *id, arena_t *a);
bool fwd_sub_receive(const char *key, const json_t *body, fwd_sub_local_fn local, problem_t *p);

#endif
