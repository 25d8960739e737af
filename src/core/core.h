/*
 * core.h - the small things every module stands on: arenas, string buffers,
 * interned names, hashing, time, logging, problems (errors) and the
 * configuration read from flags.
 *
 * Ownership rules (DESIGN.md):
 *  - everything a request allocates comes from its arena_t and is freed in
 *    one arena_free()/arena_reset();
 *  - interned names live for the whole process: two interned strings are
 *    equal iff their pointers are equal;
 *  - the store owns its memory with plain malloc (its frozen entities: the
 *    block pool, blockpool.c), never an arena;
 *  - out of memory is not an error a caller handles: cr_xmalloc and friends,
 *    the arena and the intern table log one line and abort (see xalloc.c).
 */
#ifndef CORAINE_CORE_H
#define CORAINE_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CR_UNUSED(x) ((void)(x))
#define CR_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CR_LIKELY(x) __builtin_expect(!!(x), 1)
#define CR_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* What was built, for --version and GET /version; the commit comes from the
 * Makefile (-DCR_GIT_COMMIT). */
#define CR_VERSION "0.1.0"
#ifndef CR_GIT_COMMIT
#define CR_GIT_COMMIT "unknown"
#endif

/* ------------------------------------------------------- allocation */

/* malloc and friends that never return NULL: on failure they log one line
 * and abort() (the out-of-memory policy, doc/architecture.md). Sizes that
 * overflow (n * size, a length + 1) count as failures, never wrap. */
void *cr_xmalloc(size_t n);
void *cr_xcalloc(size_t n, size_t size);
void *cr_xrealloc(void *p, size_t n);
void *cr_xreallocarray(void *p, size_t n, size_t size);
char *cr_xstrdup(const char *s);
char *cr_xstrndup(const char *s, size_t n);
/* Logs "out of memory (<what>, <n> bytes)" and aborts. */
_Noreturn void cr_oom(const char *what, size_t n);

/* The store's long-lived blocks (frozen entities) on transparent huge pages
 * (blockpool.c): blockpool_alloc never returns NULL (a block it cannot carve
 * is malloc'd); blockpool_free frees a malloc'd block too (told apart by
 * its address). blockpool_available: the pool's address space is
 * reserved (false: every block is malloc'd). */
typedef struct blockpool_stats {
    size_t reserved;        /* address space (bytes) */
    size_t writable;        /* of it made writable */
    size_t in_use;          /* bytes of live blocks (their classes' sizes) */
    size_t slabs;           /* bytes of the slabs that hold them (and one empty slab per class at most) */
    size_t released;        /* bytes of emptied slabs given back to the system, not yet reused */
} blockpool_stats_t;
void *blockpool_alloc(size_t n);
void  blockpool_free(void *p);
bool  blockpool_available(void);
void  blockpool_stats(blockpool_stats_t *st);

/* ------------------------------------------------------------------ arena */

typedef struct arena arena_t;

arena_t *arena_new(size_t first_block);          /* never NULL (aborts on OOM) */
void     arena_free(arena_t *a);                 /* frees everything */
void     arena_reset(arena_t *a);                /* frees all but one block (the largest, up to 1 MiB) */
/* arena_reset keeping at most one block of up to keep_max bytes (an idle connection) */
void     arena_reset_keep(arena_t *a, size_t keep_max);
void    *arena_alloc(arena_t *a, size_t n);      /* 16-aligned; aborts on OOM or a size that overflows */
void    *arena_calloc(arena_t *a, size_t n);     /* zeroed */
char    *arena_strndup(arena_t *a, const char *s, size_t n); /* NUL-terminated */
char    *arena_strdup(arena_t *a, const char *s);
/* Room for one more item in the arena array v of *cap items of size bytes,
 * n of them used: v itself while n < *cap, else a copy twice as large
 * (first items when *cap is 0; *cap updated). The old array stays in the
 * arena until it is freed or reset. */
void    *arena_grow(arena_t *a, void *v, size_t n, size_t *cap, size_t size, size_t first);
char    *arena_printf(arena_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
size_t   arena_used(const arena_t *a);           /* bytes handed out */
/* Runs fn(ptr) when the arena is freed or reset (e.g. pcre2_code_free). */
void     arena_on_free(arena_t *a, void (*fn)(void *), void *ptr);

/* -------------------------------------------------------- string buffer */

/* A growable byte buffer whose memory comes from an arena (or from malloc
 * when a == NULL; then sb_release() frees it). Always NUL-terminated. */
typedef struct sbuf {
    char    *p;
    size_t   len;
    size_t   cap;
    arena_t *a;
} sbuf_t;

void sb_init(sbuf_t *sb, arena_t *a, size_t cap);
void sb_release(sbuf_t *sb);                     /* only for a == NULL */
void sb_add(sbuf_t *sb, const char *s, size_t n);
void sb_adds(sbuf_t *sb, const char *s);
void sb_addc(sbuf_t *sb, char c);
void sb_printf(sbuf_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_addi(sbuf_t *sb, int64_t v);             /* decimal integer, fast */
static inline void sb_clear(sbuf_t *sb) { sb->len = 0; if (sb->p) sb->p[0] = '\0'; }

/* --------------------------------------------------------------- hashing */

/* 64-bit, good spread, keyed by a per-process random secret (read from
 * getrandom() once, before main): a client cannot compute keys that collide
 * (hash flooding). So a value differs from one run to the next: never store
 * one on disk or send it out; use cr_hash_stable for those. */
uint64_t cr_hash(const void *data, size_t len);
/* The same function under a fixed key: equal in every process, so for
 * content addresses that outlive the process, never for a table keyed by
 * client strings. */
uint64_t cr_hash_stable(const void *data, size_t len);
/* cr_hash of a 64-bit value (keyed likewise): for tables keyed by numbers a
 * client chooses (geo cells from coordinates) and for combining hashes of
 * parts (a JSON tree) so that the whole stays keyed. */
static inline uint64_t cr_hash_u64(uint64_t x)
{
    return cr_hash(&x, sizeof x);
}
static inline uint64_t cr_hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return x;
}

/* ----------------------------------------------------------------- UTF-8 */

/* Length of the well-formed UTF-8 sequence at s (Unicode table 3-7: no
 * overlongs, no surrogates, nothing above U+10FFFF), 0 when it is not one.
 * s[0] >= 0x80; reads stop at the first bad byte and never pass end. */
static inline int cr_utf8_seq(const unsigned char *s, const unsigned char *end)
{
    unsigned char c = s[0];
    size_t        avail = (size_t)(end - s);

    if (c >= 0xc2 && c <= 0xdf)
        return avail >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        return avail >= 3 && s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        return avail >= 4 && s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 &&
               (s[3] & 0xc0) == 0x80 ? 4 : 0;
    }
    return 0;
}

/* ------------------------------------------------------------- interning */

/* Process-wide, thread-safe. Returned strings are NUL-terminated and never
 * freed; equal contents give the same pointer. */
const char *intern(const char *s, size_t len);
const char *intern_cstr(const char *s);
/* The interned pointer for s, or NULL when s was never interned (no insert). */
const char *intern_find(const char *s, size_t len);
size_t      intern_count(void);

/* ------------------------------------------------------------------ time */

/* Times of the data model (observedAt, createdAt, modifiedAt, q literals)
 * are int64 MICROseconds since the epoch, UTC: 4.6.3 allows six fraction
 * digits, and they survive a round trip. */
int64_t cr_now_us(void);                         /* wall clock, µs since epoch */
int64_t cr_now_ms(void);                         /* wall clock, ms since epoch (logs, caches) */
int64_t cr_mono_ns(void);                        /* monotonic */
/* ISO 8601 DateTime as NGSI-LD uses it (4.6.3): YYYY-MM-DDThh:mm:ss[.ffffff](Z|±hh:mm)
 * (fraction digits beyond six are read and dropped). false when s is not one. */
bool    cr_datetime_parse(const char *s, int64_t *us);
bool    cr_date_parse(const char *s, int64_t *us);   /* YYYY-MM-DD */
bool    cr_time_parse(const char *s, int64_t *us);   /* hh:mm:ss[.ffffff][Z] -> µs since midnight */
/* Writes "YYYY-MM-DDThh:mm:ssZ" (20 chars), ".mmmZ" (24) when only milliseconds
 * are set, or ".uuuuuuZ" (27), + NUL; returns the length. */
int     cr_datetime_format(int64_t us, char out[32]);

/* --------------------------------------------------------------- logging */

enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };
extern int cr_log_level;
void cr_log_open(const char *file, int level);   /* file NULL = stderr */
/* Opens the --logFile again (SIGHUP, after logrotate moved it); false
 * (logged) when it cannot be: the old file is kept. */
bool cr_log_reopen(void);
/* The request id (X-Request-Id) of the request this thread is handling, put
 * on every log line it writes meanwhile; NULL: none. */
void cr_log_set_request(const char *id);
const char *cr_log_request(void);
void cr_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LOG_E(...) cr_log(LOG_ERROR, __VA_ARGS__)
#define LOG_W(...) do { if (cr_log_level >= LOG_WARN) cr_log(LOG_WARN, __VA_ARGS__); } while (0)
#define LOG_I(...) do { if (cr_log_level >= LOG_INFO) cr_log(LOG_INFO, __VA_ARGS__); } while (0)
#define LOG_D(...) do { if (cr_log_level >= LOG_DEBUG) cr_log(LOG_DEBUG, __VA_ARGS__); } while (0)

/* -------------------------------------------------------------- problems */

/* The error types of clause 6.3.2. */
typedef enum {
    PB_NONE = 0,
    PB_BAD_REQUEST_DATA,        /* 400 */
    PB_INVALID_REQUEST,         /* 400 */
    PB_ALREADY_EXISTS,          /* 409 */
    PB_RESOURCE_NOT_FOUND,      /* 404 */
    PB_NONEXISTENT_TENANT,      /* 404 */
    PB_OPERATION_NOT_SUPPORTED, /* 422 */
    PB_TOO_COMPLEX_QUERY,       /* 403 */
    PB_TOO_MANY_RESULTS,        /* 403 */
    PB_LD_CONTEXT_NOT_AVAILABLE,/* 503 */
    PB_INTERNAL_ERROR,          /* 500 */
    PB_CONFLICT,                /* 409: a registration overlaps another or held data (5.9.2.4) */
    PB_HTTP,                    /* a bare HTTP status (405, 406, 411, 413, 415) */
    PB__COUNT
} problem_kind_t;

/* A problem as modules report it; http/ renders it as ProblemDetails.
 * detail is always NUL-terminated and valid UTF-8: problem_set cuts a long
 * text on a character boundary and turns bytes that are not UTF-8 (from a
 * client's input quoted in the text) into '?'. */
typedef struct problem {
    problem_kind_t kind;
    int            status;      /* only for PB_HTTP, else derived from kind */
    char           detail[512];
} problem_t;

/* Sets p (when not NULL) and returns false, so that callers can write
 * `return problem_set(p, PB_BAD_REQUEST_DATA, "...", ...);` */
bool        problem_set(problem_t *p, problem_kind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int         problem_status(const problem_t *p);
const char *problem_type_uri(problem_kind_t kind);  /* https://uri.etsi.org/ngsi-ld/errors/... */
const char *problem_title(problem_kind_t kind);

/* ------------------------------------------------------------- limits */

/* Bounds that flags may not exceed because a module's representation stops
 * there (config.c refuses larger values at start). */
#define CR_JSON_DEPTH_MAX   1024         /* json/: the parser's recursion and the writer's levels */
#define CR_JSON_DOC_MAX     (1u << 30)   /* json/: string lengths are 32-bit; --maxBodySize up to 1 GiB */
#define CR_ATTRS_MAX        65535        /* model/: attribute, sub-attribute and type counts are 16-bit */
#define CR_ORDER_INDEXES_MAX 16          /* corDB: ordered indexes per tenant (a fixed table) */

/* --------------------------------------------------------- configuration */

typedef struct cr_config {
    bool        foreground;          /* -fg */
    int         port;                /* --port (1026) */
    const char *database;            /* --database corDB|mongoc */
    const char *db_dir;              /* --dbDir (NULL: RAM) */
    const char *db_sync;             /* --dbSync always|interval|none */
    int         db_sync_interval_ms; /* --dbSyncInterval */
    size_t      db_snapshot_size;    /* --dbSnapshotSize (0: on demand only) */
    size_t      db_segment_size;     /* --dbSegmentSize (0: a segment per snapshot) */
    const char *db_recover;          /* --dbRecover stop|truncate */
    const char *db_lock_prefer;      /* --dbLockPrefer reads|writes */
    bool        huge_pages;          /* --hugePages: frozen entities in the block pool (blockpool.c) */
    const char *db_uri;              /* --dbURI (mongoc) */
    const char *db_name;             /* --dbName: database name prefix (mongoc) */
    const char *db_write_concern;    /* --dbWriteConcern auto|majority|1 (mongoc) */
    int         db_timeout_ms;       /* --dbTimeout (mongoc) */
    int         sync_interval_ms;    /* --syncInterval (mongoc) */
    bool        notify_outbox;       /* --notifyOutbox (mongoc) */
    int         connection_pool_size;/* --connectionPoolSize (cores) */
    int         max_connections;     /* --maxConnections */
    int         max_tenants;         /* --maxTenants (the default tenant included) */
    int         request_timeout;     /* --requestTimeout seconds */
    int         header_timeout;      /* --headerTimeout: seconds to send a request head */
    int         body_timeout;        /* --bodyTimeout: seconds to send a request body */
    size_t      max_body_size;       /* --maxBodySize bytes */
    int         max_json_depth;      /* --maxJsonDepth */
    int         max_attributes;      /* --maxAttributes per entity */
    int         max_geo_vertices;    /* --maxGeoVertices per geometry (GeoProperty value, geo-query); 0: none */
    int         max_batch_size;      /* --maxBatchSize: entities in one batch operation */
    int         max_limit;           /* --maxLimit: largest page size */
    int         order_indexes;       /* --orderIndexes per tenant (0: none; at most CR_ORDER_INDEXES_MAX) */
    int         render_cache_mb;     /* --renderCache MiB of cached entity renderings (0: off) */
    int         default_limit;       /* limit when none is given (20) */
    int         context_timeout_ms;  /* --contextTimeout for remote @context downloads */
    int         context_retries;     /* --contextRetries */
    int         context_fetch_threads; /* --contextFetchThreads: the download pool */
    int         context_cache_mb;    /* --contextCacheSize MiB: documents and built contexts */
    int         context_failure_ttl_ms; /* --contextFailureTtl: a failed download is remembered */
    int         context_max_docs;    /* --contextMaxDocs: remote documents per request */
    size_t      context_max_bytes;   /* --contextMaxBytes: their bytes per request */
    int         context_max_depth;   /* --contextMaxDepth: nesting of remote contexts */
    int         context_hosted_max;  /* --contextHostedMax: hosted @contexts (POST /jsonldContexts) */
    size_t      context_hosted_max_bytes; /* --contextHostedMaxBytes: the largest one */
    const char *public_url;          /* --publicUrl: scheme://host:port clients reach this broker at
                                      * (the served @contexts' URLs, the Link headers); never NULL after load */
    const char *broker_alias;        /* --brokerAlias: this instance's contextSourceAlias (5.2.40), the Via
                                      * pseudonym of forwarding; default host name:port; never NULL after load */
    int64_t     started_ms;          /* wall clock of cr_config_load: the uptime of /info/sourceIdentity */
    const char *egress_allow;        /* --egressAllow: CIDRs and host names */
    int         forward_timeout_ms;  /* --forwardTimeout */
    int         forward_fanout;      /* --forwardFanout */
    int         forward_threads;     /* --forwardThreads */
    size_t      forward_cache_size;  /* --forwardCacheSize: bytes of kept source answers (cacheDuration) */
    const char *split_entities_text; /* --splitEntities true|false */
    bool        split_entities;      /* its value: the default of splitEntities (5.2.23, 5.2.12) */
    int         dsub_lease_s;        /* --dsubLease: seconds a planted remote subscription lives unrenewed */
    int         entity_map_max;      /* --entityMapMax: EntityMaps held (all tenants) */
    int         entity_map_entries;  /* --entityMapEntries: entity ids held in all EntityMaps */
    int         entity_map_lifetime; /* --entityMapLifetime: s an EntityMap lives unless asked otherwise */
    int         cor_port;            /* --corPort: cor:// listener (0: none) */
    const char *egress_deny;         /* --egressDeny */
    const char *history;             /* --history none|corDB|timescale */
    const char *history_uri;         /* --historyURI: PostgreSQL of --history timescale */
    int         history_queue_size;  /* --historyQueueSize: changes queued for PostgreSQL */
    int         history_queue_timeout_ms; /* --historyQueueTimeout: ms a write waits for room */
    const char *history_retention;   /* --historyRetention: a duration ("" = keep all) */
    int         history_max_instances; /* --historyMaxInstances: per series (0 = no bound) */
    int         temporal_limit;      /* --temporalLimit: instances per attribute in one answer (6.3.10) */
    const char *log_file;            /* --logFile */
    int         log_level;           /* --logLevel error|warn|info|debug */
    const char *bind_address;        /* --bind (127.0.0.1 / 0.0.0.0) */
    int         notifier_threads;    /* --notifierThreads: notification sender threads */
    int         notifier_queue_size; /* --notifierQueueSize: queued notifications per endpoint */
    int         notifier_inflight;   /* --notifierInflight: connections (ordered lanes) per endpoint */
    int         notifier_timeout_ms; /* --notifierTimeout: ms for one notification */
    int         notifier_drain_ms;   /* --notifierDrain: ms to drain the queues at shutdown */
    int         notifier_batch;      /* --notifierBatch: queued changes of one subscription sent as one notification */
    int         notifier_retries;    /* --notifierRetries: retries of a failed notification */
    int         notifier_retry_delay_ms; /* --notifierRetryDelay: ms before the first retry (doubling) */
    const char *notifier_ca_file;    /* --notifierCaFile: CA bundle for https:// and mqtts:// endpoints, "" = system */
    const char *access_log;          /* --accessLog FILE (NULL: none) */
    bool        https;               /* --https: TLS on --port */
    const char *cert;                /* --cert FILE: PEM certificate (chain), NULL: none */
    const char *key;                 /* --key FILE: PEM private key, NULL: none */
    const char *auth;                /* --auth none|jwt */
    const char *jwks;                /* --jwks FILE|URL: JWKS or PEM public key (RS256, ES256) */
    const char *jwt_secret;          /* --jwtSecret: the HS256 key */
    const char *jwt_issuer;          /* --jwtIssuer: the iss a token must have ("" any) */
    const char *jwt_audience;        /* --jwtAudience: a value its aud must contain ("" any) */
    int         jwt_leeway;          /* --jwtLeeway: seconds of clock skew for exp, nbf, iat */
    const char *jwt_tenant_claim;    /* --jwtTenantClaim: the claim of tenants and rights */
    int         jwks_refresh;        /* --jwksRefresh: seconds between fetches of a --jwks URL */
    int         jwks_refetch;        /* --jwksRefetch: at least these seconds between fetches for an unknown kid */
    int         shutdown_timeout;    /* --shutdownTimeout: seconds SIGTERM waits for requests and queues */
    int64_t     shutdown_deadline_ms;/* wall clock the stop must end by (0: not stopping); set by main */
} cr_config_t;

extern cr_config_t cr_config;

/* -------------------------------------------------------- egress policy */

/* What the broker may connect to (egress.c has the rules and their
 * precedence). Configured from --egressAllow/--egressDeny by
 * cr_config_load; without it the built-in refusals apply (link-local and
 * cloud metadata addresses and host names). */
struct sockaddr;
bool egress_configure(const char *allow, const char *deny, char *err, size_t errlen);
/* true when a connection to address sa (may be NULL: host rules only) for
 * the URL host `host` (may be NULL) is allowed; else why says what was refused. */
bool egress_check_host(const char *host, const struct sockaddr *sa, char *why, size_t whylen);
/* url as it may be shown (a metrics label, a log line) into out[cap]: without
 * "user:password@", "?query", "#fragment" and trailing slashes, cut at cap-1. */
void egress_url_shown(const char *url, char *out, size_t cap);
/* Fills cr_config from defaults, then CORAINE_<NAME> environment variables,
 * then argv. Prints usage and returns false on a bad flag. */
bool cr_config_load(int argc, char **argv);
void cr_config_usage(FILE *out);

/* ---- fsync latency (fsync_stats.c) */

/* Every fdatasync of the store's log (group commit, interval, roll-over)
 * and of history.log, by log: a histogram, process-wide, lock-free. */
typedef enum { CR_FSYNC_STORE = 0, CR_FSYNC_HISTORY, CR_FSYNC_LOGS } cr_fsync_log_t;
#define CR_FSYNC_BUCKETS 14            /* bounds 50 us .. 1 s, then +Inf */
extern const double cr_fsync_bounds[CR_FSYNC_BUCKETS];   /* seconds */
typedef struct cr_fsync_hist {
    uint64_t count[CR_FSYNC_BUCKETS + 1];  /* not cumulative; [CR_FSYNC_BUCKETS]: above 1 s */
    uint64_t n, sum_ns;
} cr_fsync_hist_t;
void cr_fsync_observe(cr_fsync_log_t log, int64_t ns);
void cr_fsync_hist(cr_fsync_log_t log, cr_fsync_hist_t *out);

#endif
