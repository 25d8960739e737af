/*
 * ld.h - JSON-LD @context for NGSI-LD (clauses 4.4, 6.3.5, 5.5.7).
 *
 * A context is an immutable table built once and shared: term -> expanded IRI
 * and IRI -> term, both hash lookups, never a scan. The core's strings are
 * interned; a user context keeps its own in its arena (so that evicting it
 * gives everything back), and an IRI of it is interned only when a write
 * stores it in an entity. The core
 * context (v1.8, built into the binary) is implicitly the last entry of every
 * context array, so its terms cannot be overridden; unknown terms expand with
 * the core @vocab (https://uri.etsi.org/ngsi-ld/default-context/).
 *
 * User contexts come from a Link header (a URL) or from an inline @context
 * (a URL string, an object, or an array of both). Remote contexts are fetched
 * by a pool of fetch threads (never by the caller's thread when it resolves
 * through an ld_req_t), downloaded once even when many requests ask at the
 * same time, and cached by URL. Built contexts are cached too (by URL, or by
 * the text of an inline context), so a request that repeats a context costs
 * one hash lookup. Both caches are bounded in bytes (--contextCacheSize) and
 * evict the least recently used entries; a context a request uses is pinned
 * until the request's arena goes, so eviction never frees it under a request.
 * A downloaded document expires as its caching headers say (6.3.16), and
 * the contexts built from it with it.
 *
 * The stored @contexts of 5.13 (Cached, Hosted, ImplicitlyCreated) are
 * listed, served and deleted through ld_stored_*; hosted ones are kept by
 * ops/ in the store and registered here, and URLs under
 * <base>/ngsi-ld/v1/jsonldContexts/ are resolved here, never downloaded.
 *
 * All functions are thread-safe.
 */
#ifndef CORAINE_LD_H
#define CORAINE_LD_H

#include "../core/core.h"
#include "../json/json.h"

#define LD_CORE_CONTEXT_URL "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"
#define LD_DEFAULT_VOCAB    "https://uri.etsi.org/ngsi-ld/default-context/"
#define LD_NGSI_LD_PREFIX   "https://uri.etsi.org/ngsi-ld/"

typedef struct ld_context ld_context_t;

/* Loads the built-in core context; call once at start (main). false on failure. */
bool ld_init(void);
/* Frees every context and cache (at exit, or in tests/fuzzing): pointers
 * handed out before are invalid afterwards. */
void ld_shutdown(void);
/* Stops downloading (before the HTTP server stops): transfers under way are
 * aborted, and the requests that wait for one are woken and answer
 * LdContextNotAvailable at once. */
void ld_stop(void);

/* The core context (built on first use if ld_init was not called yet). */
const ld_context_t *ld_core(void);

/* The scheme://host:port under which this broker is reachable, e.g.
 * "http://localhost:1026" (default). Contexts that are not a single URL are
 * served at <base>/ngsi-ld/v1/jsonldContexts/<id>; call this before serving. */
void ld_set_base_url(const char *base);

/* Offline: remote @context URLs are never downloaded (they fail with
 * LdContextNotAvailable); the core URLs keep working. For fuzzing and tests. */
void ld_set_offline(bool offline);

/* ---- resolution for a request (what the HTTP binding uses) */

/* The @context state of one request, in arena a (released with it): the
 * contexts it returns stay valid until a is freed or reset; a remote document
 * that is not cached yet is downloaded by the fetch pool and the call returns
 * NULL with ld_req_pending() true: the caller stops, and wake(wake_arg) is
 * called once (from another thread) when it is worth trying again - the
 * download ended, or deadline_ns (cr_mono_ns) passed; then the same call
 * answers, or fails with LdContextNotAvailable after the deadline. The
 * budget of --contextMaxDocs/--contextMaxBytes counts every remote document
 * the request's contexts read. */
typedef struct ld_req ld_req_t;
ld_req_t *ld_req_new(arena_t *a, int64_t deadline_ns, void (*wake)(void *), void *wake_arg);
const ld_context_t *ld_req_from_link(ld_req_t *q, const char *link_header, problem_t *p);
const ld_context_t *ld_req_from_json(ld_req_t *q, const json_t *context_value, problem_t *p);
bool ld_req_pending(const ld_req_t *q);

/* ---- resolution outside requests (tests, tools): a download is waited
 * for in place, and the context is valid until the cache evicts it. */

/* The context named by a Link header value, e.g.
 *   <http://x/ctx.jsonld>; rel="http://www.w3.org/ns/json-ld#context"; type="application/ld+json"
 * A Link whose rel is not the JSON-LD context one is BadRequestData. A URL that
 * cannot be fetched or is not a valid context: LdContextNotAvailable (503). */
const ld_context_t *ld_from_link(const char *link_header, problem_t *p);

/* The context of an inline "@context" value (string URL, object, or array).
 * Invalid content: BadRequestData; unreachable URL: LdContextNotAvailable. */
const ld_context_t *ld_from_json(const json_t *context_value, problem_t *p);

/* Expands a term to its IRI (interned). Already absolute IRIs (containing ':'
 * with a scheme, or a compact IRI with a known prefix) come back expanded;
 * "id"/"@id" and "type"/"@type" map to "@id"/"@type"; an unknown term gets
 * the default @vocab. Never NULL for a non-empty term. */
const char *ld_expand(const ld_context_t *c, const char *term);
const char *ld_expandn(const ld_context_t *c, const char *term, size_t len);
/* The same expansion for read-only requests (queries, projections, type
 * selections): nothing is interned. The result is the interned IRI when that
 * name exists anywhere; else a copy in arena a, which no interned name
 * equals, so that pointer comparisons with stored names match nothing (an
 * unknown name matches no entity). Never pass such a copy to
 * ld_compact_name(), which wants interned names. */
const char *ld_expand_lookup(const ld_context_t *c, const char *term, arena_t *a);
const char *ld_expandn_lookup(const ld_context_t *c, const char *term, size_t len, arena_t *a);

/* Compacts an IRI to the shortest term of c that maps to it (user terms
 * first, then core terms), else to the remainder after the active @vocab
 * (the user's, or the default vocab) when that remainder is not itself a
 * term, else returns the IRI itself. The result is interned. */
const char *ld_compact(const ld_context_t *c, const char *iri);

/* ld_compact for an INTERNED iri (entity types, attribute names, objectType):
 * the answer is memoized per thread by (context serial, pointer), so
 * rendering the same names again costs one compare. Never pass a
 * non-interned string: its address may later hold another name. */
const char *ld_compact_name(const ld_context_t *c, const char *interned_iri);

/* A number that names c for the life of the process (never reused, unlike
 * the address of an evicted context): the key for memos of renderings. */
uint64_t ld_context_serial(const ld_context_t *c);

/* When the term's definition says "@type": "@vocab" (e.g. a VocabProperty
 * value) or "@id"; NULL otherwise. */
const char *ld_term_type(const ld_context_t *c, const char *expanded_iri);

/* How the context should be referred to in a response:
 *  - ld_context_link: the URL for a Link header (the user's URL when the context
 *    came from one URL, the core URL for the core, else a URL served by this
 *    broker under /ngsi-ld/v1/jsonldContexts/{id});
 *  - ld_context_value: the @context member value for an ld+json body (the user's
 *    original value as JSON text, or the core URL). */
const char *ld_context_link(const ld_context_t *c);
const char *ld_context_value_json(const ld_context_t *c);

/* The context of an inline "@context" value, as ld_from_json, held until
 * arena a is freed (a subscription keeps its contexts this way: neither
 * eviction nor a DELETE /jsonldContexts frees them under it). */
const ld_context_t *ld_hold_from_json(arena_t *a, const json_t *context_value, problem_t *p);

/* The JSON text of a context served by us (id from ld_context_link), copied
 * into a; NULL if unknown (or evicted). */
const char *ld_served_context(arena_t *a, const char *id);

/* ---- stored @contexts (5.13, 6.29, 6.30): what GET /jsonldContexts lists.
 *
 *  Cached            the core (localId "core"), and every remote document
 *                    downloaded (localId: 16 hex digits); not served (5.13.4)
 *  Hosted            added by POST /jsonldContexts: kept by ops/ in the store,
 *                    registered here (ld_hosted_put) so that the resolver finds
 *                    them by their URL without a download
 *  ImplicitlyCreated contexts that are not one URL (inline objects, arrays),
 *                    served under <base>/ngsi-ld/v1/jsonldContexts/<id>
 *
 * Hosted and ImplicitlyCreated contexts are named by <base>/ngsi-ld/v1/
 * jsonldContexts/<localId> (ld_set_base_url); such a URL in a Link header or
 * an @context is resolved here, never fetched. */
typedef enum { LD_KIND_CACHED = 1, LD_KIND_HOSTED = 2, LD_KIND_IMPLICIT = 4 } ld_kind_t;
#define LD_KIND_ALL (LD_KIND_CACHED | LD_KIND_HOSTED | LD_KIND_IMPLICIT)

typedef struct ld_info {
    const char *local_id;       /* copies in the caller's arena */
    const char *url;            /* Cached: the original URL; else the URL served by us */
    ld_kind_t   kind;
    int64_t     created_ms;     /* wall clock */
    int64_t     expires_ms;     /* Cached documents: when they are downloaded again; else 0 */
    int64_t     last_used_ms;   /* 0: never used */
    uint64_t    hits;           /* times a request found it stored (5.13.3.5 numberOfHits) */
    const char *text;           /* Hosted, ImplicitlyCreated: {"@context": ...}; else NULL */
} ld_info_t;

/* Every stored context of the kinds (a set of LD_KIND_*), copied into a, as
 * a malloc'ed array in a; *n entries. Core first, then Cached, Hosted, ImplicitlyCreated. */
ld_info_t *ld_stored_list(arena_t *a, unsigned kinds, size_t *n);
/* One stored context by local id or by URL (percent-decoded): the core URLs,
 * a downloaded document's URL, a URL served by us. false when unknown.
 * count: this look-up is a hit (a GET /jsonldContexts/{id}); *out shows the
 * figures from before it. */
bool ld_stored_find(arena_t *a, const char *id, bool count, ld_info_t *out);
/* Forgets a Cached document or an ImplicitlyCreated context (by the local id
 * of ld_stored_find): contexts built from it are dropped too, and built again
 * (downloading again) when a request names them. Hosted: ld_hosted_remove. */
bool ld_stored_forget(const ld_info_t *info);

/* Hosted contexts. text is {"@context": value} (the whole stored document);
 * ld_hosted_put refuses (BadRequestData) beyond --contextHostedMax contexts or
 * a text above --contextHostedMaxBytes, and checks nothing else: validate first
 * (ld_req_validate). A new id: ld_hosted_new_id (16 hex digits, unused). */
bool ld_hosted_put(const char *id, const char *text, size_t len, int64_t created_ms, problem_t *p);
void ld_hosted_remove(const char *id);
void ld_hosted_new_id(char id[17]);
/* The URL a hosted context is served at (<base>/ngsi-ld/v1/jsonldContexts/<id>), in a. */
const char *ld_hosted_url(arena_t *a, const char *id);

/* Builds the @context value v (an object, array or URL) as a request would,
 * without caching the result: the check of 5.5.4 before a context is hosted.
 * Remote documents it names are downloaded (and cached: they are then listed
 * as Cached). NULL with ld_req_pending(): try again when woken. */
bool ld_req_validate(ld_req_t *q, const json_t *v, problem_t *p);
/* Downloads a Cached document again (5.13.5.4 reload) and replaces it once
 * the new copy is valid JSON with an @context member; the old copy stays on
 * any failure (LdContextNotAvailable). false with ld_req_pending(): the
 * download is under way, try again when woken. */
bool ld_req_reload(ld_req_t *q, const char *url, problem_t *p);

/* Statistics for /statistics: successful and failed downloads, cache hits
 * (built contexts and remote documents), contexts in the cache and their
 * bytes, remote documents kept and their bytes, evictions of both. */
typedef struct ld_stats {
    uint64_t downloads, download_failures, cache_hits, cached;
    uint64_t cached_bytes, documents, document_bytes, evictions;
} ld_stats_t;
void ld_get_stats(ld_stats_t *s);

#endif
