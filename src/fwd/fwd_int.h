/*
 * fwd_int.h - what the files of fwd/ share: one forwarded request (call_t),
 * the headers every one carries, and fwd_run(), the ONE function through
 * which every forwarded request is sent (retrieve and query in fwd.c, the
 * writes in fwd_write.c), so that a transport other than HTTP (cor://) is
 * one branch there. Not for other modules: fwd.h is the contract.
 */
#ifndef CORAINE_FWD_INT_H
#define CORAINE_FWD_INT_H

#include "fwd.h"

#include <curl/curl.h>

typedef struct call {
    reg_t              *reg;
    CURL               *h;
    struct curl_slist  *hdrs;
    char               *url;
    long                timeout_ms;
    sbuf_t              body;       /* the answer */
    bool                too_big, refused, skipped;
    long                status;
    CURLcode            rc;
    const ld_context_t *ctx;        /* the answers are compact with it */
    char               *post;       /* the request body (a Query of queryBatch, a write's payload), else NULL */
    const char         *method;     /* NULL: GET, or POST when post is set */
    bool                as_query;   /* a retrieve asked as a query (answers an array) */
    struct cor_call    *cor;        /* sent over cor:// (the endpoint's scheme) */
    int64_t             took_us;    /* fwd_run: from the send to the answer */
    bool                from_cache; /* not sent: answered from fwd_cache.c (management.cacheDuration) */
    bool                want_map;   /* keep the answer's NGSILD-EntityMap (a source's own EntityMap, 5.14.4.4) */
    const char         *entity_map; /* that header's value, or NULL */
} call_t;

/* Sends calls[0..n) (those not skipped) in parallel, at most --forwardFanout
 * at once, each within its timeout_ms; fills rc, status, body, refused. */
void fwd_run(call_t *calls, size_t n);
/* c's result and time in the per-source counters (fwd_source.c). */
void fwd_source_record(const call_t *c);
/* c is about to be sent: in flight until its fwd_source_record. */
void fwd_source_begin(const call_t *c);
/* fwd_cache.c (management.cacheDuration, 6.3.17): a kept answer to c (status, body, from_cache set), and
 * keeping c's answer; only GETs of entities[/{id}] to a registration with a cacheDuration. */
bool fwd_cache_get(call_t *c);
void fwd_cache_put(const call_t *c);
void fwd_cache_clear(void);

/* The headers of a request to r's source (Accept, Link with jctx or the
 * request's @context, Via with this broker, NGSILD-Tenant, the
 * contextSourceInfo pairs of 6.3.19, Content-Type ctype when not NULL; no
 * Link with application/ld+json), and
 * c->timeout_ms; false when out of memory. */
bool fwd_headers(const fwd_in_t *in, call_t *c, const reg_t *r, const char *jctx, const char *ctype);
bool fwd_add_header(call_t *c, arena_t *a, const char *name, const char *value);
/* r failed recently and is in its management.cooldown (5.2.34): not tried. */
bool fwd_cooling(const reg_t *r);
/* The sources the request's Via names are not matched (5.12). */
void fwd_skip_sources(const fwd_in_t *in, reg_query_t *q);
/* The request's Via names this broker and regs matched it: false (508,
 * 6.3.17) for a write (write: the write was done here on its way out) or
 * when one of regs is exclusive or redirect; true: a read through inclusive
 * registrations, answered from the local data. */
bool fwd_loop_check(reg_t *const *regs, size_t nr, bool write, problem_t *p);
/* x and y (versions of one entity) merged as 4.5.5 says (the most recent instance of each attribute):
 * a frozen reference (entity_unref it), NULL when too large. */
cr_entity_t *fwd_merge_two(arena_t *a, const cr_entity_t *x, const cr_entity_t *y);
/* r's counters (timesSent ...) and the broker's after a forwarded request. */
void fwd_counted(reg_t *r, bool ok, int64_t now);
bool fwd_via_each(const char *via, bool (*fn)(void *ud, const char *s, size_t n), void *ud);
/* Appends "<endpoint without trailing slashes>/ngsi-ld/v1/" of r. */
void fwd_endpoint(sbuf_t *u, const reg_t *r);
/* endpoint/ngsi-ld/v1/path?query (and local=true with management.localOnly). */
char *fwd_part_url(arena_t *a, const reg_t *r, const char *path, const char *query);
/* The @context r's source is sent: contextSourceInfo jsonldContext (*jctx),
 * else ctx (*jctx NULL). */
const ld_context_t *fwd_part_ctx(arena_t *a, const reg_t *r, const ld_context_t *ctx, const char **jctx);
void fwd_warn(arena_t *a, const char **w, const reg_t *r, int code, const char *text);

/* A temporal read (fwd_tread.c) through fwd.c's forwarding: the registrations matching q (its ops set by
 * the caller; also those with an interval tq's temporal query meets, 5.10.2.4), each asked GET temporal/entities[/{id}] with params and the attributes narrowed, matched,
 * looped, sent, counted and warned about as fwd_retrieve / fwd_query; the answers parsed, each an array of
 * temporal entities compact in its ctx (404s and failures left out). */
typedef struct fwd_tdoc {
    const json_t       *doc;
    const ld_context_t *ctx;
    bool                aux;     /* from an auxiliary registration */
    uint64_t            from;    /* its bit in out->reg_ids (0: past 63) */
} fwd_tdoc_t;
/* only: an entity map's page (as fwd_query_map's: only its sources, each for its ids), or NULL. */
bool fwd_read_temporal(const fwd_in_t *in, reg_query_t *q, const hist_query_t *tq, const char *id,
                       const fwd_param_t *params, size_t n_params, size_t want, const fwd_map_page_t *only,
                       fwd_out_t *out, fwd_tdoc_t **docs, size_t *n_docs, problem_t *p);

#endif
