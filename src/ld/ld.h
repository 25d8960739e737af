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

/* Cached contexts for GET /jsonldContexts (6.30-6.32 use this later): the
 * core (id "core", kind "Cached"), downloaded documents (kind "Cached", url =
 * the original URL, json_text = the downloaded text) and contexts served by
 * us (kind "ImplicitlyCreated"). fn runs under the module's locks: it must
 * not call ld_ functions; copy what it needs. */
typedef void (*ld_visit_fn)(void *ud, const char *id, const char *url, const char *kind,
                            int64_t created_ms, const char *json_text);
void ld_cache_foreach(ld_visit_fn fn, void *ud);
/* The JSON text of a context served by us (id from ld_context_link), copied
 * into a; NULL if unknown (or evicted). */
const char *ld_served_context(arena_t *a, const char *id);

/* Statistics for /statistics: successful and failed downloads, cache hits
 * (built contexts and remote documents), contexts in the cache and their
 * bytes, remote documents kept and their bytes, evictions of both. */
typedef struct ld_stats {
    uint64_t downloads, download_failures, cache_hits, cached;
    uint64_t cached_bytes, documents, document_bytes, evictions;
} ld_stats_t;
void ld_get_stats(ld_stats_t *s);

#endif
