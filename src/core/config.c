/*
 * config.c - flags as users know them, and their CORAINE_<NAME> environment
 * twins. One table describes every flag: its name, what it sets, its default
 * and its help line; defaults, then the environment, then argv are applied
 * in that order, so a flag on the command line wins.
 */
#include "core.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

cr_config_t cr_config;

#define CR_STR_(x) #x
#define CR_STR(x)  CR_STR_(x)

typedef enum { F_BOOL, F_INT, F_SIZE, F_STR, F_LEVEL } ftype_t;

typedef struct flag {
    const char  *name;       /* without dashes; "fg" takes one dash too */
    ftype_t      type;
    void        *dst;
    const char  *def;
    const char  *choices;    /* "a|b|c" or NULL */
    const char  *help;
} flag_t;

static flag_t flags[] = {
    {"fg", F_BOOL, &cr_config.foreground, "false", NULL, "run in the foreground (logs to stderr)"},
    {"port", F_INT, &cr_config.port, "1026", NULL, "TCP port to listen on"},
    {"bind", F_STR, &cr_config.bind_address, "0.0.0.0", NULL, "address to listen on"},
    {"database", F_STR, &cr_config.database, "corDB", "corDB|mongoc", "entity store: corDB (in this process) or mongoc (MongoDB through libmongoc: doc/mongodb.md)"},
    {"dbURI", F_STR, &cr_config.db_uri, "mongodb://127.0.0.1:27017", NULL, "--database mongoc: the MongoDB connection string"},
    {"dbName", F_STR, &cr_config.db_name, "coraine", NULL, "--database mongoc: database name prefix (the default tenant's database; a named tenant's is PREFIX-TENANT)"},
    {"dbWriteConcern", F_STR, &cr_config.db_write_concern, "auto", "auto|majority|1", "--database mongoc: a write is acknowledged after it is written on a majority of a replica set (auto: majority on a replica set, else 1)"},
    {"dbTimeout", F_INT, &cr_config.db_timeout_ms, "5000", NULL, "--database mongoc: ms a request waits for the database before it answers 503"},
    {"notifyOutbox", F_BOOL, &cr_config.notify_outbox, "true", NULL, "--database mongoc: write an outbox entry with each change that may notify, so that another process delivers what a dead one did not (doc/mongodb.md)"},
    {"syncInterval", F_INT, &cr_config.sync_interval_ms, "1000", NULL, "--database mongoc: ms between two checks for subscriptions and registrations changed by other processes"},
    {"dbDir", F_STR, &cr_config.db_dir, "", NULL, "corDB on disk in this directory (a log and snapshots; none: RAM only)"},
    {"dbSync", F_STR, &cr_config.db_sync, "interval", "always|interval|none", "corDB on disk: when the log is fsynced (doc/cordb.md)"},
    {"dbSyncInterval", F_INT, &cr_config.db_sync_interval_ms, "100", NULL, "corDB on disk, --dbSync interval: ms between two fsyncs of the log"},
    {"dbSegmentSize", F_SIZE, &cr_config.db_segment_size, "64M", NULL, "corDB on disk: bytes of a log segment file before the log rolls over to a new one, k/M/G suffixes (0: only at snapshots)"},
    {"dbSnapshotSize", F_SIZE, &cr_config.db_snapshot_size, "64M", NULL, "corDB on disk: bytes of log after which a snapshot is written, k/M/G suffixes (0: only on demand)"},
    {"dbRecover", F_STR, &cr_config.db_recover, "stop", "stop|truncate", "corDB on disk: a corrupt log record stops the start (stop) or the log is cut there (truncate)"},
    {"dbLockPrefer", F_STR, &cr_config.db_lock_prefer, "reads", "reads|writes", "corDB store lock: who goes first when both wait"},
    {"hugePages", F_BOOL, &cr_config.huge_pages, "true", NULL, "keep the frozen entities (the store's and the history's) in a pool on transparent huge pages: fewer page faults as the store grows (false: malloc'd; doc/cordb.md)"},
    {"connectionPoolSize", F_INT, &cr_config.connection_pool_size, "0", NULL, "HTTP worker threads (0: one per core; 16 with --dbSync always or --database mongoc)"},
    {"maxConnections", F_INT, &cr_config.max_connections, "4096", NULL, "concurrent client connections (503 beyond)"},
    {"maxTenants", F_INT, &cr_config.max_tenants, "10000", NULL, "tenants, the default one included"},
    {"requestTimeout", F_INT, &cr_config.request_timeout, "30", NULL, "seconds an idle connection is kept"},
    {"headerTimeout", F_INT, &cr_config.header_timeout, "10", NULL, "seconds a new connection has to send a whole request head (408 beyond; 0: no limit)"},
    {"bodyTimeout", F_INT, &cr_config.body_timeout, "30", NULL, "seconds a client has to send a whole request body (408 beyond; 0: no limit)"},
    {"maxBodySize", F_SIZE, &cr_config.max_body_size, "1048576", NULL, "largest request body in bytes, k/M/G suffixes (413 beyond)"},
    {"maxJsonDepth", F_INT, &cr_config.max_json_depth, "64", NULL, "deepest JSON nesting accepted (at most " CR_STR(CR_JSON_DEPTH_MAX) ")"},
    {"maxAttributes", F_INT, &cr_config.max_attributes, "1000", NULL, "attributes per entity (at most " CR_STR(CR_ATTRS_MAX) ")"},
    {"maxGeoVertices", F_INT, &cr_config.max_geo_vertices, "2048", NULL, "positions in one geometry (GeoProperty value or geo-query; 0: no limit)"},
    {"maxBatchSize", F_INT, &cr_config.max_batch_size, "1000", NULL, "entities in one batch operation (400 beyond; at least 1)"},
    {"maxLimit", F_INT, &cr_config.max_limit, "1000", NULL, "largest page size (limit) of a query"},
    {"orderIndexes", F_INT, &cr_config.order_indexes, "8", NULL, "ordered indexes per tenant for orderBy, built on first use (0: none, at most " CR_STR(CR_ORDER_INDEXES_MAX) ")"},
    {"renderCache", F_INT, &cr_config.render_cache_mb, "256", NULL, "MiB of cached entity renderings (0: none)"},
    {"defaultLimit", F_INT, &cr_config.default_limit, "20", NULL, "page size when a query gives no limit"},
    {"contextTimeout", F_INT, &cr_config.context_timeout_ms, "5000", NULL, "ms a request may wait for its remote @contexts in total (from its arrival)"},
    {"contextRetries", F_INT, &cr_config.context_retries, "2", NULL, "retries of a failed @context download (within --contextTimeout)"},
    {"contextFetchThreads", F_INT, &cr_config.context_fetch_threads, "4", NULL, "threads that download remote @contexts (1..64)"},
    {"contextCacheSize", F_INT, &cr_config.context_cache_mb, "64", NULL, "MiB for cached @context documents and built contexts (half each; LRU)"},
    {"contextFailureTtl", F_INT, &cr_config.context_failure_ttl_ms, "3000", NULL, "ms a @context download that got no answer is remembered as failed"},
    {"contextMaxDocs", F_INT, &cr_config.context_max_docs, "16", NULL, "remote @context documents one request may need"},
    {"contextMaxBytes", F_SIZE, &cr_config.context_max_bytes, "4M", NULL, "bytes of remote @context documents one request may read; k/M suffixes"},
    {"contextMaxDepth", F_INT, &cr_config.context_max_depth, "8", NULL, "deepest nesting of remote @contexts"},
    {"contextHostedMax", F_INT, &cr_config.context_hosted_max, "1000", NULL, "@contexts this broker hosts (POST /jsonldContexts; at least 1)"},
    {"contextHostedMaxBytes", F_SIZE, &cr_config.context_hosted_max_bytes, "64k", NULL, "largest hosted @context in bytes, k/M suffixes"},
    {"publicUrl", F_STR, &cr_config.public_url, "", NULL, "scheme://host:port clients reach this broker at: the URLs of the @contexts it serves, its Link headers, and the endpoint (/dsub/{key}) of the subscriptions it plants at context sources (none: http://localhost:<port>)"},
    {"brokerAlias", F_STR, &cr_config.broker_alias, "", NULL, "this broker's contextSourceAlias (/info/sourceIdentity) and Via pseudonym; unique per instance (none: <host name>:<port>)"},
    {"egressAllow", F_STR, &cr_config.egress_allow, "", NULL, "addresses, CIDRs, host names the broker may connect to despite the built-in refusals"},
    {"egressDeny", F_STR, &cr_config.egress_deny, "", NULL, "addresses, CIDRs, host names the broker never connects to"},
    {"history", F_STR, &cr_config.history, "none", "none|corDB|timescale", "where attribute history is kept (temporal API: corDB)"},
    {"historyURI", F_STR, &cr_config.history_uri, "", NULL, "--history timescale: the PostgreSQL connection (postgresql://user@host:port/db?...)"},
    {"historyQueueSize", F_INT, &cr_config.history_queue_size, "100000", NULL, "--history timescale: changes queued for PostgreSQL (a write waits when it is full)"},
    {"historyQueueTimeout", F_INT, &cr_config.history_queue_timeout_ms, "2000", NULL, "--history timescale: ms a write waits for room in the queue, then 503 with nothing applied"},
    {"historyRetention", F_STR, &cr_config.history_retention, "", NULL, "history: instances older than this are dropped as instances are added (ISO 8601 duration like P30D, or seconds with s/m/h/d; empty: kept)"},
    {"historyMaxInstances", F_INT, &cr_config.history_max_instances, "0", NULL, "history: instances kept per attribute (entity, attribute, datasetId), oldest dropped first (0: no bound)"},
    {"temporalLimit", F_INT, &cr_config.temporal_limit, "1000", NULL, "temporal API: instances per attribute in one answer (beyond: 206 Partial Content, 6.3.10)"},
    {"logFile", F_STR, &cr_config.log_file, "", NULL, "log to this file instead of stderr"},
    {"notifierThreads", F_INT, &cr_config.notifier_threads, "16", NULL, "notification sender threads"},
    {"notifierQueueSize", F_INT, &cr_config.notifier_queue_size, "100000", NULL, "queued notifications per endpoint (beyond: dropped, counted)"},
    {"notifierInflight", F_INT, &cr_config.notifier_inflight, "4", NULL, "connections per notification endpoint (each in commit order)"},
    {"notifierTimeout", F_INT, &cr_config.notifier_timeout_ms, "5000", NULL, "ms for one notification (endpoint.timeout overrides)"},
    {"notifierBatch", F_INT, &cr_config.notifier_batch, "64", NULL, "queued changes (distinct entities) of one subscription sent in one notification"},
    {"notifierDrain", F_INT, &cr_config.notifier_drain_ms, "2000", NULL, "ms to deliver queued notifications at shutdown"},
    {"notifierRetries", F_INT, &cr_config.notifier_retries, "2", NULL, "retries of a failed notification (in order, at the head of its lane)"},
    {"notifierRetryDelay", F_INT, &cr_config.notifier_retry_delay_ms, "500", NULL, "ms before the first retry of a failed notification (doubling; at least endpoint.cooldown)"},
    {"notifierCaFile", F_STR, &cr_config.notifier_ca_file, "", NULL, "CA certificates (PEM) for https:// and mqtts:// endpoints (none: the system's)"},
    {"forwardTimeout", F_INT, &cr_config.forward_timeout_ms, "5000", NULL, "ms a forwarded request may take (a registration's management.timeout overrides)"},
    {"forwardFanout", F_INT, &cr_config.forward_fanout, "16", NULL, "forwarded requests of one operation in flight at once"},
    {"forwardThreads", F_INT, &cr_config.forward_threads, "8", NULL, "threads that run the requests of tenants with registrations (they wait for context sources, so no HTTP worker does); at least 1"},
    {"forwardCacheSize", F_SIZE, &cr_config.forward_cache_size, "64M", NULL, "bytes of context source answers kept for their registration's management.cacheDuration, k/M/G suffixes (0: none kept)"},
    {"splitEntities", F_STR, &cr_config.split_entities_text, "false", "true|false", "whether a distributed query or subscription that does not say (splitEntities) takes an entity to be split over its sources: q, geoQ, scopeQ and attrs are then evaluated on the merged entity, not by each source (5.2.23)"},
    {"dsubLease", F_INT, &cr_config.dsub_lease_s, "600", NULL, "seconds a subscription planted at a context source (5.8.1.4) lives unless this broker renews it (0: no lease, the hub subscription's expiresAt only); also how often each source is checked for orphans of this broker's"},
    {"entityMapMax", F_INT, &cr_config.entity_map_max, "1000", NULL, "EntityMaps of paged distributed queries held at once, all tenants (beyond: the soonest to expire is dropped)"},
    {"entityMapEntries", F_INT, &cr_config.entity_map_entries, "1000000", NULL, "entity ids held in all EntityMaps together"},
    {"entityMapLifetime", F_INT, &cr_config.entity_map_lifetime, "300", NULL, "s an EntityMap lives when the query asks no entityMapLifetime (at most 24 h either way)"},
    {"corPort", F_INT, &cr_config.cor_port, "0", NULL, "TCP port of the cor:// broker-to-broker protocol (doc/cor-protocol.md; 0: not listening)"},
    {"accessLog", F_STR, &cr_config.access_log, "", NULL, "write one line per request to this file (combined log format, then the request id and the microseconds it took)"},
    {"https", F_BOOL, &cr_config.https, "false", NULL, "serve HTTPS (TLS through libmicrohttpd's GnuTLS) on --port with --cert and --key; the cor:// port stays plain TCP"},
    {"cert", F_STR, &cr_config.cert, "", NULL, "--https: the server certificate, a PEM file (the chain after it); read at start and again on SIGHUP"},
    {"key", F_STR, &cr_config.key, "", NULL, "--https: the certificate's private key, an unencrypted PEM file"},
    {"auth", F_STR, &cr_config.auth, "none", "none|jwt", "access control: none, or bearer JWTs (doc/operations.md)"},
    {"jwks", F_STR, &cr_config.jwks, "", NULL, "--auth jwt: the RS256/ES256 verification keys, a JWKS document or a PEM public key, a file or an http(s) URL"},
    {"jwtSecret", F_STR, &cr_config.jwt_secret, "", NULL, "--auth jwt: the HS256 key (at least 32 bytes; better given as CORAINE_JWTSECRET)"},
    {"jwtIssuer", F_STR, &cr_config.jwt_issuer, "", NULL, "--auth jwt: the iss a token must have (none: any)"},
    {"jwtAudience", F_STR, &cr_config.jwt_audience, "", NULL, "--auth jwt: a value a token's aud must contain (none: any)"},
    {"jwtLeeway", F_INT, &cr_config.jwt_leeway, "30", NULL, "--auth jwt: seconds of clock skew allowed for exp, nbf and iat"},
    {"jwtTenantClaim", F_STR, &cr_config.jwt_tenant_claim, "ngsildTenants", NULL, "--auth jwt: the claim {tenant: \"read\"|\"write\"} (\"@default\", \"*\") saying what a token may use"},
    {"jwksRefresh", F_INT, &cr_config.jwks_refresh, "300", NULL, "--auth jwt: seconds between two fetches of a --jwks URL (0: only at start)"},
    {"jwksRefetch", F_INT, &cr_config.jwks_refetch, "30", NULL, "--auth jwt: a token whose kid no key has fetches a --jwks URL again, at most once in this many seconds (0: never)"},
    {"shutdownTimeout", F_INT, &cr_config.shutdown_timeout, "10", NULL, "seconds SIGTERM waits for the requests under way, then the notification and history queues, before it exits"},
    {"logLevel", F_LEVEL, &cr_config.log_level, "info", "error|warn|info|debug", "log verbosity"},
};

/* Flags whose value a module's representation bounds (core.h, "limits");
 * the other integers go up to 10^9, the other sizes up to SIZE_MAX. */
static const struct { const void *dst; long long max; } bounds[] = {
    {&cr_config.max_body_size, CR_JSON_DOC_MAX},
    {&cr_config.max_json_depth, CR_JSON_DEPTH_MAX},
    {&cr_config.max_attributes, CR_ATTRS_MAX},
    {&cr_config.order_indexes, CR_ORDER_INDEXES_MAX},
};

static long long flag_max(const flag_t *f)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(bounds); i++)
        if (bounds[i].dst == f->dst) return bounds[i].max;
    return f->type == F_SIZE ? (long long)(SIZE_MAX >> 1) : 1000000000;
}

static bool in_choices(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *c = choices; c && *c;) {
        const char *e = strchr(c, '|');
        size_t      l = e ? (size_t)(e - c) : strlen(c);
        if (l == n && strncmp(c, v, n) == 0) return true;
        c = e ? e + 1 : NULL;
    }
    return false;
}

static bool set_flag(flag_t *f, const char *v, const char *origin)
{
    char *end;
    if (f->choices && !in_choices(f->choices, v)) {
        fprintf(stderr, "coraine: %s: --%s must be one of %s, not '%s'\n", origin, f->name, f->choices, v);
        return false;
    }
    switch (f->type) {
    case F_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *(bool *)f->dst = true;
        else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *(bool *)f->dst = false;
        else { fprintf(stderr, "coraine: %s: --%s takes true|false, not '%s'\n", origin, f->name, v); return false; }
        return true;
    case F_INT: {
        long long max = flag_max(f);
        errno = 0;
        long long n = isdigit((unsigned char)v[0]) ? strtoll(v, &end, 10) : -1;
        if (n < 0 || errno || *end || n > max) {
            fprintf(stderr, "coraine: %s: --%s takes an integer from 0 to %lld, not '%s'\n", origin, f->name, max, v);
            return false;
        }
        *(int *)f->dst = (int)n;
        return true;
    }
    case F_SIZE: {
        /* digits, then at most one of k, M, G (KiB, MiB, GiB); no sign, no
         * space, nothing after; a product beyond the flag's bound (or 2^64)
         * is refused, never wrapped */
        unsigned long long max = (unsigned long long)flag_max(f);
        unsigned           shift = 0;
        errno = 0;
        unsigned long long n = isdigit((unsigned char)v[0]) ? strtoull(v, &end, 10) : 0;
        bool ok = isdigit((unsigned char)v[0]) && !errno;
        if (errno == ERANGE) n = ULLONG_MAX, ok = true, end = (char *)"";
        if (ok && *end) {
            switch (*end++) {
            case 'k': case 'K': shift = 10; break;
            case 'm': case 'M': shift = 20; break;
            case 'g': case 'G': shift = 30; break;
            default: ok = false;
            }
            ok = ok && !*end;
        }
        if (ok && n > (max >> shift)) {
            fprintf(stderr, "coraine: %s: --%s: '%s' is more than %llu bytes\n", origin, f->name, v, max);
            return false;
        }
        if (!ok) {
            fprintf(stderr, "coraine: %s: --%s takes a size in bytes (digits, then k, M or G), not '%s'\n",
                    origin, f->name, v);
            return false;
        }
        *(size_t *)f->dst = (size_t)(n << shift);
        return true;
    }
    case F_STR:
        *(const char **)f->dst = v;
        return true;
    case F_LEVEL:
        *(int *)f->dst = !strcmp(v, "error") ? LOG_ERROR : !strcmp(v, "warn") ? LOG_WARN
                       : !strcmp(v, "info") ? LOG_INFO : LOG_DEBUG;
        return true;
    }
    return false;
}

void cr_config_usage(FILE *out)
{
    fprintf(out, "usage: coraine [flags]\n\nEvery flag can also be set as CORAINE_<NAME> in the environment "
                 "(e.g. CORAINE_PORT=1026, CORAINE_DBLOCKPREFER=writes); the command line wins.\n\n");
    for (size_t i = 0; i < CR_ARRAY_LEN(flags); i++) {
        flag_t *f = &flags[i];
        char    left[64];
        snprintf(left, sizeof left, "%s%s %s", f->type == F_BOOL ? "-" : "--", f->name,
                 f->type == F_BOOL ? "" : f->choices ? f->choices : "<value>");
        fprintf(out, "  %-34s %s (default %s)\n", left, f->help, *f->def ? f->def : "none");
    }
    fprintf(out, "  %-34s %s\n  %-34s %s\n", "--help", "this text", "--version", "version and build");
}

/* --publicUrl (checked, without a trailing '/') and --brokerAlias with
 * their defaults; the strings live as long as the process. */
static bool config_identity(void)
{
    static char url[1024], alias[320];
    const char *u = cr_config.public_url;
    if (!u || !*u) {
        snprintf(url, sizeof url, "http://localhost:%d", cr_config.port);
    } else {
        size_t n = strlen(u);
        while (n && u[n - 1] == '/') n--;
        bool scheme = !strncasecmp(u, "http://", 7) || !strncasecmp(u, "https://", 8);
        const char *host = scheme ? strstr(u, "//") + 2 : NULL;
        if (!scheme || n >= sizeof url || !host || (size_t)(host - u) >= n || strpbrk(u, " \t\r\n<>\"?#")) {
            fprintf(stderr, "coraine: --publicUrl must be http(s)://host[:port][/path], not '%s'\n", u);
            return false;
        }
        memcpy(url, u, n);
        url[n] = '\0';
    }
    cr_config.public_url = url;
    const char *a = cr_config.broker_alias;
    if (!a || !*a) {
        char host[256];
        if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
        host[sizeof host - 1] = '\0';
        snprintf(alias, sizeof alias, "%s:%d", host, cr_config.port);
    } else {
        for (const char *c = a; *c; c++)
            if ((unsigned char)*c <= 0x20 || *c == 0x7f || *c == ',' || *c == '"' || *c == '(' || *c == ')') {
                fprintf(stderr, "coraine: --brokerAlias must be one token (no spaces, commas, quotes or "
                                "parentheses: it goes into Via headers), not '%s'\n", a);
                return false;
            }
        snprintf(alias, sizeof alias, "%s", a);
    }
    cr_config.broker_alias = alias;
    return true;
}

static flag_t *find_flag(const char *name)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(flags); i++)
        if (!strcasecmp(flags[i].name, name)) return &flags[i];
    return NULL;
}

bool cr_config_load(int argc, char **argv)
{
    memset(&cr_config, 0, sizeof cr_config);
    cr_config.started_ms = cr_now_ms();
    for (size_t i = 0; i < CR_ARRAY_LEN(flags); i++)
        if (!set_flag(&flags[i], flags[i].def, "default")) return false;

    for (size_t i = 0; i < CR_ARRAY_LEN(flags); i++) {
        char env[64] = "CORAINE_";
        size_t k = strlen(env);
        for (const char *c = flags[i].name; *c && k < sizeof env - 1; c++) env[k++] = (char)toupper((unsigned char)*c);
        env[k] = '\0';
        const char *v = getenv(env);
        if (v && !set_flag(&flags[i], v, env)) return false;
    }

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "-u")) {
            cr_config_usage(stdout);
            exit(0);
        }
        if (a[0] != '-') { fprintf(stderr, "coraine: unexpected argument '%s' (try --help)\n", a); return false; }
        const char *name = a[1] == '-' ? a + 2 : a + 1;
        const char *eq = strchr(name, '=');
        char        nbuf[64];
        size_t      nl = eq ? (size_t)(eq - name) : strlen(name);
        if (nl >= sizeof nbuf) nl = sizeof nbuf - 1;
        memcpy(nbuf, name, nl);
        nbuf[nl] = '\0';
        flag_t *f = find_flag(nbuf);
        if (!f) { fprintf(stderr, "coraine: unknown flag '%s' (try --help)\n", a); return false; }
        const char *v;
        if (eq) v = eq + 1;
        else if (f->type == F_BOOL) v = "true";
        else if (i + 1 < argc) v = argv[++i];
        else { fprintf(stderr, "coraine: flag '%s' needs a value\n", a); return false; }
        if (!set_flag(f, v, "command line")) return false;
    }
    cr_config.split_entities = !strcmp(cr_config.split_entities_text, "true");
    if (cr_config.db_dir && !*cr_config.db_dir) cr_config.db_dir = NULL;
    if (cr_config.log_file && !*cr_config.log_file) cr_config.log_file = NULL;
    if (cr_config.access_log && !*cr_config.access_log) cr_config.access_log = NULL;
    if (cr_config.cert && !*cr_config.cert) cr_config.cert = NULL;
    if (cr_config.key && !*cr_config.key) cr_config.key = NULL;
    if (cr_config.https && (!cr_config.cert || !cr_config.key)) {
        fprintf(stderr, "coraine: --https needs --cert FILE and --key FILE\n");
        return false;
    }
    if (!cr_config.https && (cr_config.cert || cr_config.key)) {
        fprintf(stderr, "coraine: --cert and --key are read only with --https\n");
        return false;
    }
    if (cr_config.connection_pool_size == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cr_config.connection_pool_size = n > 0 ? (int)n : 2;
        /* Where requests wait on their HTTP thread, one thread per core
         * would leave one or two waiting at once: --dbSync always (a writer
         * waits for its group's fsync, and group commit shares one fsync
         * among the writers waiting) and --database mongoc (every request
         * waits for its round trips to the server: mongo_scaling.py --pools). */
        bool waits = (cr_config.db_dir && cr_config.db_sync && !strcmp(cr_config.db_sync, "always")) ||
                     (cr_config.database && !strcmp(cr_config.database, "mongoc"));
        if (waits && cr_config.connection_pool_size < 16)
            cr_config.connection_pool_size = 16;
    }
    if (cr_config.port < 1 || cr_config.port > 65535) {
        fprintf(stderr, "coraine: --port must be 1..65535\n");
        return false;
    }
    if (cr_config.cor_port < 0 || cr_config.cor_port > 65535 || cr_config.cor_port == cr_config.port) {
        fprintf(stderr, "coraine: --corPort must be 1..65535 and not --port (0: not listening)\n");
        return false;
    }
    if (cr_config.default_limit > cr_config.max_limit) cr_config.default_limit = cr_config.max_limit;
    if (cr_config.dsub_lease_s < 0) {
        fprintf(stderr, "coraine: --dsubLease must be 0 or more seconds\n");
        return false;
    }
    if (cr_config.forward_threads < 1 || cr_config.forward_threads > 1024) {
        fprintf(stderr, "coraine: --forwardThreads must be 1..1024\n");
        return false;
    }
    if (cr_config.max_batch_size < 1) {
        fprintf(stderr, "coraine: --maxBatchSize must be at least 1\n");
        return false;
    }
    if (cr_config.context_hosted_max < 1 || cr_config.context_hosted_max_bytes < 16) {
        fprintf(stderr, "coraine: --contextHostedMax must be at least 1 and --contextHostedMaxBytes at least 16\n");
        return false;
    }
    if (!config_identity()) return false;
    char err[200];
    if (!egress_configure(cr_config.egress_allow, cr_config.egress_deny, err, sizeof err)) {
        fprintf(stderr, "coraine: %s\n", err);
        return false;
    }
    return true;
}
