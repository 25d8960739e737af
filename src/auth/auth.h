/*
 * auth.h - access control (--auth jwt): bearer tokens (JWT, RFC 7519)
 * signed RS256 or ES256 by a key of --jwks (a JWKS document or a PEM public
 * key, from a file or an URL), or HS256 with --jwtSecret; issuer, audience
 * and time checks (--jwtIssuer, --jwtAudience, --jwtLeeway); and the
 * tenants a token may use, read or write, from its --jwtTenantClaim claim:
 *
 *     "ngsildTenants": {"city": "write", "@default": "read", "*": "read"}
 *
 * a tenant's own entry first, else "*", else none; "@default" names the
 * default tenant (a request without NGSILD-Tenant). doc/operations.md.
 *
 * A verified token is cached (a bounded set-associative LRU keyed by the
 * token's hash, compared in full) until it expires, so a known token costs
 * a hash lookup. Without --auth nothing here runs.
 */
#ifndef CORAINE_AUTH_H
#define CORAINE_AUTH_H

#include "../core/core.h"

/* Loads the keys of --auth jwt (fetches an URL, starts its refresh); true
 * and nothing done without --auth. false with p: the broker must not start. */
bool auth_start(problem_t *p);
void auth_stop(void);
extern bool auth_on;                /* --auth jwt and auth_start succeeded */

typedef enum { AUTH_OK = 0, AUTH_UNAUTHENTICATED = 401, AUTH_FORBIDDEN = 403 } auth_verdict_t;

typedef struct auth_outcome {
    auth_verdict_t verdict;
    const char    *error;          /* 401: RFC 6750 error code ("invalid_token"), NULL: no token given */
    const char    *subject;        /* the token's "sub" (in the arena), NULL when none */
    char           detail[200];    /* why not, for the ProblemDetails and WWW-Authenticate */
} auth_outcome_t;

/* The Authorization header value (NULL: absent), the tenant the request
 * uses (NULL: the default one) and whether it writes. */
void auth_check(const char *authorization, const char *tenant, bool write, arena_t *a, auth_outcome_t *out);

/* Counters for /metrics. */
typedef struct auth_stats {
    uint64_t cache_hits, verified, refused, forbidden, cached;
    uint64_t jwks_fetches;             /* --jwks URL fetched after start (refresh and unknown kids) */
    uint64_t jwks_refetches;           /* of them, for a token whose kid no key had */
} auth_stats_t;
void auth_get_stats(auth_stats_t *st);

#endif
