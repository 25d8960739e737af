/*
 * ld_int.h - private declarations shared by the files of src/ld/ (not a
 * public header: other modules include only ld.h).
 *
 *   ld_map.c      a small open-addressing hash map (hash -> pointer)
 *   ld_context.c  building a context from JSON-LD (term definitions) and the
 *                 frozen lookup tables: expand, compact, term type
 *   ld_fetch.c    remote @context documents: the fetch pool (libcurl), single
 *                 flight, waiters and their deadlines, the document cache
 *   ld_link.c     parsing the HTTP Link header
 *   ld_cache.c    the context cache (LRU, pins), ld_init, ld_req_* and
 *                 ld_from_json/ld_from_link, served contexts, statistics
 *   ld_store.c    the stored @contexts of 5.13: hosted ones, and the listing
 *                 of all kinds
 */
#ifndef CORAINE_LD_INT_H
#define CORAINE_LD_INT_H

#include "ld.h"

#define LD_MAX_REMOTE_DEPTH   8              /* default of --contextMaxDepth */
#define LD_MAX_REMOTE_DOCS    16             /* default of --contextMaxDocs */
#define LD_MAX_DOC_BYTES      (4u << 20)     /* default of --contextMaxBytes */
#define LD_MAX_URL_LEN        2048
#define LD_JSON_MAX_DEPTH     64

/* ------------------------------------------------------------ ld_map.c */

/* Slots hold (hash, value); several values may share a hash: lookups walk
 * the probe chain and let the caller decide equality. Not thread-safe:
 * callers lock. */
typedef struct ld_map {
    struct ld_slot { uint64_t hash; void *val; } *slots;
    size_t cap;     /* power of two, or 0 */
    size_t count;
} ld_map_t;

typedef bool (*ld_map_eq_fn)(const void *val, const void *key);
void *ld_map_find(const ld_map_t *m, uint64_t hash, ld_map_eq_fn eq, const void *key);
void  ld_map_put(ld_map_t *m, uint64_t hash, void *val);
void  ld_map_del(ld_map_t *m, uint64_t hash, const void *val); /* removes that value */
void  ld_map_free(ld_map_t *m);
/* Calls fn for every value (in slot order). */
void  ld_map_each(const ld_map_t *m, void (*fn)(void *val, void *ud), void *ud);
/* The values for which want(val) (NULL: all), least recently used first
 * (by used(val)), for eviction: a malloc'ed array of *n. */
void **ld_map_by_age(const ld_map_t *m, bool (*want)(const void *val), int64_t (*used)(const void *val),
                     size_t *n);

/* -------------------------------------------------------- ld_context.c */

/* One term definition of a frozen context. */
typedef struct ld_def {
    const char *term;       /* core: interned; user contexts: in the context's arena */
    const char *iri;        /* likewise; may be a keyword ("@id", "@type") */
    const char *type;       /* "@id", "@vocab", "@json", a datatype IRI; or NULL */
    const char *iri_interned; /* atomic: the interned iri, once a write needed it */
    uint64_t    term_hash;  /* cr_hash of term */
    uint64_t    iri_hash;   /* cr_hash of iri */
    uint32_t    term_len;
    uint32_t    iri_len;
    bool        prefix;     /* can be the prefix of a compact IRI (JSON-LD 1.1, 4.3) */
    bool        names;      /* a request could carry the term as a name (4.6.2): ld_compact may answer it */
} ld_def_t;

struct ld_context {
    /* Lookup tables. The core holds all its terms; a user context holds only
     * its own terms that do not clash with a core term (the core is
     * protected), so that every lookup is: core table, then own table. */
    ld_def_t   *defs;
    uint32_t    ndefs;
    uint32_t    mask;           /* by_term and by_iri have mask+1 slots */
    uint32_t   *by_term;        /* slot = def index + 1; 0 = empty */
    uint32_t   *by_iri;         /* the preferred (shortest) term for each IRI */
    const char *vocab;          /* @vocab for unknown terms (interned) */
    size_t      vocab_len;
    bool        is_core;
    /* The terms that can be the prefix of a compact IRI, longest IRI first
     * (ld_compact's last step before the full IRI; made at freeze). */
    const ld_def_t **prefixes;
    uint32_t    n_prefixes;

    /* How the context is named and echoed (ld_cache.c fills these). */
    const char *link;           /* URL for a Link header */
    const char *value_json;     /* the @context value as JSON text */
    const char *served_id;      /* id under /jsonldContexts, or NULL */
    const char *served_json;    /* {"@context": value} for served contexts */
    int64_t     created_ms;

    /* Life in the cache (ld_cache.c): the cache holds one reference, each
     * request that uses the context one more (ld_req pins); the last
     * release frees it, so eviction never pulls it from under a request. */
    uint64_t    serial;         /* unique for the process (memo keys) */
    int         refs;           /* atomic */
    int64_t     used_ms;        /* atomic: last use, monotonic ms (LRU) */
    uint64_t    hits;           /* atomic: requests that found it in the cache (5.13.3.5) */
    int64_t     expires_mono_ms;/* a document it was built from expires then (monotonic; 0: never):
                                 * the cache no longer answers with it, and builds it again */
    size_t      bytes;          /* what the context costs */

    /* Cache key: a URL (key_url) or an inline value (key_tree). */
    uint64_t    key_hash;
    const char *key_url;
    size_t      key_url_len;
    const json_t *key_tree;

    arena_t    *arena;          /* everything above lives here */
};

/* Building: a scratch state that collects term definitions from a sequence
 * of contexts (later ones override earlier ones) and then freezes them. */
typedef struct ld_bterm {
    const char *term;           /* core: interned; else in the builder's scratch arena */
    const char *iri;            /* NULL: explicitly undefined (mapped to null) */
    const char *type;
    uint64_t    hash;
    bool        prefix;         /* the definition makes it a prefix (see ld_def_t) */
} ld_bterm_t;

typedef struct ld_builder {
    const ld_context_t *core;   /* NULL while the core itself is built */
    ld_bterm_t *terms;          /* open addressing on hash; term NULL = empty */
    size_t      cap, count;
    const char *vocab;          /* the active @vocab; NULL = the core's */
    arena_t    *tmp;            /* scratch for parsing remote documents */
    unsigned    remote_depth;
    /* remote documents: budget and waiting (NULL waiter: wait in place) */
    struct ld_waiter *waiter;
    unsigned    docs;           /* remote documents read by this build */
    size_t      doc_bytes;
    unsigned    max_docs;       /* what is left of the request's budget */
    size_t      max_bytes;
    bool        pending;        /* a document is being downloaded: try again later */
    int64_t     expires_ms;     /* the earliest expiry of the documents read (wall clock; 0: none) */
} ld_builder_t;

void ld_builder_init(ld_builder_t *b, const ld_context_t *core);
void ld_builder_free(ld_builder_t *b);
/* Adds one @context value (URL string, object, array, null) with JSON-LD
 * semantics. Remote URLs are fetched through ld_fetch(). */
bool ld_builder_add(ld_builder_t *b, const json_t *value, problem_t *p);
/* A new context (in its own arena) with the builder's terms.
 * is_core: the table is the core itself. */
ld_context_t *ld_builder_freeze(ld_builder_t *b, bool is_core);
void ld_context_free(ld_context_t *c);

/* true for the URLs of any version of the NGSI-LD core @context. */
bool ld_is_core_url(const char *url, size_t len);
/* true when s[0..len) is an absolute http(s) URL we are willing to fetch. */
bool ld_is_fetchable_url(const char *s, size_t len);

/* ---------------------------------------------------------- ld_fetch.c */

/* Someone waiting for a download: linked to one document at a time, woken
 * (wake(wake_arg), from a fetch or the timer thread, once) when it is done
 * or at the deadline. Lives in the request's arena (ld_req). */
typedef struct ld_waiter {
    struct ld_waiter *prev, *next;
    void       *doc;            /* the document waited for (g_lock) */
    int64_t     deadline_ns;    /* cr_mono_ns() */
    void      (*wake)(void *);
    void       *wake_arg;
    bool        linked;
    int         firing;         /* wakes under way (g_lock): release waits for 0 */
    uint64_t    waited_gen;     /* the download waited for: its outcome is taken as is */
} ld_waiter_t;

enum { LD_DOC_READY, LD_DOC_PENDING, LD_DOC_ERROR };
/* The remote document at url: LD_DOC_READY with a copy of its text in a
 * (NUL-terminated) and when it expires (wall clock ms, 6.3.16); LD_DOC_PENDING when it is being downloaded (w is linked
 * and will be woken); LD_DOC_ERROR with LdContextNotAvailable. Without a
 * waiter, waits in place for the download. */
int  ld_doc_get(const char *url, arena_t *a, const char **text, size_t *len, int64_t *expires_ms, ld_waiter_t *w,
                problem_t *p);
/* Unlinks w if it is linked (the request ends). */
void ld_waiter_release(ld_waiter_t *w);
int    ld_timeout_ms(void);
size_t ld_max_doc_bytes(void);
void   ld_fetch_stats(size_t *docs, size_t *bytes);
void ld_fetch_init(void);
void ld_fetch_shutdown(void);
bool ld_fetch_offline(void);
/* A growing list of ld_info_t in an arena (the listing of ld_stored_list). */
typedef struct ld_infos {
    arena_t   *a;
    ld_info_t *v;
    size_t     n, cap;
} ld_infos_t;
ld_info_t *ld_infos_add(ld_infos_t *l);
/* The downloaded documents (kind Cached), into l. Takes the fetch lock. */
void ld_fetch_list(ld_infos_t *l);
/* A downloaded document by URL or local id; count: a hit. */
bool ld_fetch_find(arena_t *a, const char *id_or_url, bool count, ld_info_t *out);
/* Drops a downloaded document (by URL or local id); false if unknown. */
bool ld_fetch_forget(const char *id_or_url);
/* Downloads the document at url again (a refresh job: ld_req_reload). */
int  ld_doc_reload(const char *url, ld_waiter_t *w, problem_t *p);
/* Test hook: how long a failed download is remembered (default LD_FAILURE_TTL_MS). */
void ld_fetch_set_failure_ttl(int ms);

extern uint64_t ld_stat_downloads, ld_stat_download_failures, ld_stat_cache_hits, ld_stat_evictions;

/* ---------------------------------------------------------- ld_cache.c */

/* Drops the built contexts cached under url (its document changed). */
void ld_cache_forget_url(const char *url, size_t len);
/* A URL served by this broker (<base>/ngsi-ld/v1/jsonldContexts/<id>):
 * its id (16 hex digits) into id, else false. */
bool ld_own_url(const char *url, size_t len, char id[17]);
/* <base>/ngsi-ld/v1/jsonldContexts/<id>, in a. */
const char *ld_own_url_of(arena_t *a, const char *id);
/* Adds the hits of the built context cached under url (and its last use) to
 * *hits and *last_used_ms. */
void ld_cache_url_usage(const char *url, uint64_t *hits, int64_t *last_used_ms);
/* The ImplicitlyCreated contexts (served by us): listed, found by id (count:
 * a hit), forgotten. */
void ld_cache_list_served(ld_infos_t *l);
bool ld_cache_find_served(arena_t *a, const char *id, bool count, ld_info_t *out);
bool ld_cache_forget_served(const char *id);
/* The core context as a stored one (Cached, localId "core"). */
void ld_core_info(arena_t *a, ld_info_t *out);

/* ---------------------------------------------------------- ld_store.c */

/* The document of a Hosted or ImplicitlyCreated context by id, copied into
 * a (a hit for it); false when there is none. */
bool ld_own_doc(const char *id, arena_t *a, const char **text, size_t *len);
/* Frees the hosted contexts (ld_shutdown). */
void ld_hosted_free_all(void);

/* ----------------------------------------------------------- ld_link.c */

/* Finds the JSON-LD context link in a Link header value; *url and *len point
 * into header. BadRequestData when there is none or it is malformed. */
bool ld_link_parse(const char *header, const char **url, size_t *len, problem_t *p);

#endif
