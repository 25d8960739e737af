/*
 * auth.c - bearer token checks (--auth jwt): parse, verify, judge, cache.
 *
 * A token is header.payload.signature, each base64url (RFC 7515 compact
 * form). Accepted: alg RS256 or ES256 with a key of --jwks (its kid, or every
 * key of the right kind when the token names none), HS256 with --jwtSecret
 * (never with a public key: no algorithm confusion); "none" and any other
 * alg, a "crit" header, a bad signature are 401. The claims: exp is
 * required, nbf and iat are honoured, each with --jwtLeeway seconds of clock
 * skew; iss must be --jwtIssuer and aud (a string or an array) contain
 * --jwtAudience when those are set. The tenants claim (auth.h) says what the
 * token may do; a token without it may do nothing (403).
 *
 * The cache: AUTH_SHARDS shards, each a mutex and AUTH_SETS sets of two
 * ways; a token's hash picks shard and set, the token is compared in full,
 * the older way is evicted. An entry holds the subject, the expiry and the
 * grants, and answers until the token expires. Only verified tokens are
 * kept. With --jwks URL a thread fetches the keys again every --jwksRefresh
 * seconds (a failed fetch keeps the old keys); the keys are swapped under a
 * rwlock that verifications hold for reading. A token whose kid no key has
 * (the issuer rotated its keys) fetches them at once, at most once every
 * --jwksRefetch seconds: the request waits for the fetch, and requests that
 * come while it runs wait for it too instead of fetching again; within the
 * interval an unknown kid is 401 without a fetch, so made-up kids cost
 * nothing.
 */
#include "auth_int.h"
#include "../json/json.h"

#include <openssl/crypto.h>
#include <openssl/ecdsa.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define AUTH_SHARDS      16
#define AUTH_SETS        128          /* per shard; 2 ways: 4096 tokens in all */
#define AUTH_TOKEN_MAX   8192
#define AUTH_GRANTS_MAX  64
#define AUTH_TENANT_MAX  64

bool auth_on;

typedef struct grant {
    char tenant[AUTH_TENANT_MAX + 1];   /* "*" any, "@default" the default tenant */
    bool write;
} grant_t;

typedef struct entry {
    uint64_t hash;                      /* 0: empty */
    char    *token;
    size_t   len;
    int64_t  exp_us;                    /* exp + leeway */
    uint64_t used;                      /* the shard's clock at the last hit */
    char    *subject;
    grant_t *grants;
    size_t   n_grants;
} entry_t;

typedef struct shard {
    pthread_mutex_t mu;
    uint64_t        clock;
    entry_t         e[AUTH_SETS][2];
} shard_t;

static shard_t          *shards;
static auth_keyset_t    *keys;
static pthread_rwlock_t  keys_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_t         refresher;
static bool              refreshing;
static pthread_mutex_t   stop_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t    stop_cv = PTHREAD_COND_INITIALIZER;
static bool              stopping;
static struct {
    _Atomic uint64_t hits, verified, refused, forbidden, fetches, refetches;
} stats;
/* the fetch for an unknown kid (refetch) */
static pthread_mutex_t   refetch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t    refetch_cv = PTHREAD_COND_INITIALIZER;
static bool              refetch_running;
static uint64_t          refetch_done;       /* fetches finished (under refetch_mu) */
static int64_t           refetch_last_ms;    /* monotonic start of the last one, 0: none */

/* ---------------------------------------------------------- start, stop */

static bool jwks_is_url(void)
{
    return cr_config.jwks && (!strncasecmp(cr_config.jwks, "http://", 7) || !strncasecmp(cr_config.jwks, "https://", 8));
}

/* --jwks fetched again and swapped in; false (the old keys kept) with a warning. */
static bool keys_fetch(void)
{
    char   why[256];
    size_t len;
    char  *text = auth_keys_read(cr_config.jwks, &len, why, sizeof why);
    auth_keyset_t *ks = text ? auth_keys_parse(text, len, why, sizeof why) : NULL;
    free(text);
    atomic_fetch_add(&stats.fetches, 1);
    if (!ks) {
        LOG_W("auth: fetching --jwks again failed, keeping the keys I have: %s", why);
        return false;
    }
    pthread_rwlock_wrlock(&keys_lock);
    auth_keyset_t *old = keys;
    keys = ks;
    pthread_rwlock_unlock(&keys_lock);
    auth_keys_free(old);
    LOG_D("auth: %zu keys from --jwks", ks->n);
    return true;
}

/* A token named a kid no key has: true when the keys may be new (a fetch ran
 * now, or one that was running finished), false within --jwksRefetch of the
 * last one. */
static bool keys_refetch(void)
{
    if (!jwks_is_url() || cr_config.jwks_refetch <= 0) return false;
    pthread_mutex_lock(&refetch_mu);
    if (refetch_running) {
        uint64_t done = refetch_done;
        while (refetch_running && done == refetch_done) pthread_cond_wait(&refetch_cv, &refetch_mu);
        pthread_mutex_unlock(&refetch_mu);
        return true;
    }
    int64_t now = cr_mono_ns() / 1000000;
    if (refetch_last_ms && now - refetch_last_ms < (int64_t)cr_config.jwks_refetch * 1000) {
        pthread_mutex_unlock(&refetch_mu);
        return false;
    }
    refetch_running = true;
    refetch_last_ms = now;
    pthread_mutex_unlock(&refetch_mu);
    LOG_I("auth: a token names a kid none of the --jwks keys has: fetching them again");
    atomic_fetch_add(&stats.refetches, 1);
    bool ok = keys_fetch();
    pthread_mutex_lock(&refetch_mu);
    refetch_running = false;
    refetch_done++;
    pthread_cond_broadcast(&refetch_cv);
    pthread_mutex_unlock(&refetch_mu);
    return ok;
}

static void *refresh_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&stop_mu);
    while (!stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += cr_config.jwks_refresh;
        pthread_cond_timedwait(&stop_cv, &stop_mu, &ts);
        if (stopping) break;
        pthread_mutex_unlock(&stop_mu);
        keys_fetch();
        pthread_mutex_lock(&stop_mu);
    }
    pthread_mutex_unlock(&stop_mu);
    return NULL;
}

bool auth_start(problem_t *p)
{
    if (!cr_config.auth || strcmp(cr_config.auth, "jwt")) return true;
    const char *secret = cr_config.jwt_secret;
    if (secret && *secret && strlen(secret) < 32)
        return problem_set(p, PB_INTERNAL_ERROR, "--jwtSecret must have at least 32 bytes (RFC 7518 3.2)");
    if (!(cr_config.jwks && *cr_config.jwks) && !(secret && *secret))
        return problem_set(p, PB_INTERNAL_ERROR, "--auth jwt needs --jwks FILE|URL (RS256, ES256) or --jwtSecret (HS256)");
    if (cr_config.jwks && *cr_config.jwks) {
        char   why[256];
        size_t len;
        char  *text = auth_keys_read(cr_config.jwks, &len, why, sizeof why);
        keys = text ? auth_keys_parse(text, len, why, sizeof why) : NULL;
        free(text);
        if (!keys) return problem_set(p, PB_INTERNAL_ERROR, "--jwks: %s", why);
        LOG_I("auth: %zu verification keys from %s", keys->n, cr_config.jwks);
        refetch_last_ms = 0;
        if (jwks_is_url() && cr_config.jwks_refresh > 0) {
            stopping = false;
            if (pthread_create(&refresher, NULL, refresh_main, NULL) != 0) {
                auth_keys_free(keys);
                keys = NULL;
                return problem_set(p, PB_INTERNAL_ERROR, "auth: cannot start the --jwks refresh thread");
            }
            refreshing = true;
        }
    }
    shards = cr_xcalloc(AUTH_SHARDS, sizeof *shards);
    for (int i = 0; i < AUTH_SHARDS; i++) pthread_mutex_init(&shards[i].mu, NULL);
    auth_on = true;
    return true;
}

static void entry_clear(entry_t *e)
{
    free(e->token);
    free(e->subject);
    free(e->grants);
    memset(e, 0, sizeof *e);
}

void auth_stop(void)
{
    if (!auth_on) return;
    if (refreshing) {
        pthread_mutex_lock(&stop_mu);
        stopping = true;
        pthread_cond_signal(&stop_cv);
        pthread_mutex_unlock(&stop_mu);
        pthread_join(refresher, NULL);
        refreshing = false;
    }
    for (int i = 0; i < AUTH_SHARDS; i++) {
        for (int s = 0; s < AUTH_SETS; s++) {
            entry_clear(&shards[i].e[s][0]);
            entry_clear(&shards[i].e[s][1]);
        }
        pthread_mutex_destroy(&shards[i].mu);
    }
    free(shards);
    shards = NULL;
    auth_keys_free(keys);
    keys = NULL;
    auth_on = false;
}

/* ---------------------------------------------------------- verification */

typedef struct verified {
    int64_t  exp_us;
    char    *subject;                   /* malloc */
    grant_t  grants[AUTH_GRANTS_MAX];
    size_t   n_grants;
} verified_t;

static bool refuse(auth_outcome_t *out, const char *why)
{
    out->verdict = AUTH_UNAUTHENTICATED;
    out->error = "invalid_token";
    snprintf(out->detail, sizeof out->detail, "%s", why);
    return false;
}

/* *kid_known: false when the token names a kid no key of its kind has. */
static bool sig_ok(const char *alg, const unsigned char *sig, size_t sig_len, const char *input, size_t in_len,
                   const char *kid, bool *kid_known)
{
    *kid_known = true;
    if (!strcmp(alg, "HS256")) {
        const char   *secret = cr_config.jwt_secret;
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int  ml = 0;
        if (!secret || !*secret) return false;
        if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)input, in_len, mac, &ml))
            return false;
        return ml == sig_len && CRYPTO_memcmp(mac, sig, ml) == 0;
    }
    int            kind = !strcmp(alg, "RS256") ? AK_RSA : AK_EC;
    unsigned char  der[80];
    const unsigned char *vsig = sig;
    size_t         vlen = sig_len;
    if (kind == AK_EC) {                 /* JWS: r || s, 32 bytes each; OpenSSL: DER */
        if (sig_len != 64) return false;
        ECDSA_SIG *es = ECDSA_SIG_new();
        BIGNUM    *r = BN_bin2bn(sig, 32, NULL), *s = BN_bin2bn(sig + 32, 32, NULL);
        if (!es || !r || !s || !ECDSA_SIG_set0(es, r, s)) {
            BN_free(r); BN_free(s); ECDSA_SIG_free(es);
            return false;
        }
        unsigned char *d = der;
        int            dl = i2d_ECDSA_SIG(es, NULL);
        if (dl <= 0 || (size_t)dl > sizeof der) { ECDSA_SIG_free(es); return false; }
        i2d_ECDSA_SIG(es, &d);
        ECDSA_SIG_free(es);
        vsig = der;
        vlen = (size_t)dl;
    }
    bool ok = false, named = false;
    pthread_rwlock_rdlock(&keys_lock);
    for (size_t i = 0; keys && i < keys->n && !ok; i++) {
        const auth_key_t *k = &keys->keys[i];
        if (k->kind != kind || (kid && k->kid[0] && strcmp(kid, k->kid))) continue;
        named = true;
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        ok = md && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, k->pkey) == 1 &&
             EVP_DigestVerify(md, vsig, vlen, (const unsigned char *)input, in_len) == 1;
        EVP_MD_CTX_free(md);
    }
    pthread_rwlock_unlock(&keys_lock);
    *kid_known = named || !kid;
    return ok;
}

static json_t *part_json(arena_t *a, const char *s, size_t n)
{
    if (n > AUTH_TOKEN_MAX) return NULL;
    unsigned char *buf = arena_alloc(a, n + 1);
    size_t         len;
    char           err[64];
    json_limits_t  lim = {.max_depth = 8, .max_size = AUTH_TOKEN_MAX};
    if (!auth_b64url_decode(s, n, buf, n, &len)) return NULL;
    json_t *j = json_parse(a, (char *)buf, len, &lim, err, sizeof err);
    return json_is_object(j) ? j : NULL;
}

static bool time_claim(const json_t *payload, const char *name, bool required, int64_t *v)
{
    const json_t *t = json_get(payload, name);
    if (!t) return !required;
    if (!json_is_number(t)) return false;
    *v = t->is_int ? t->i : (int64_t)t->num;
    return true;
}

static bool audience_ok(const json_t *aud, const char *want)
{
    if (json_is_string(aud)) return !strcmp(aud->str, want);
    if (json_is_array(aud))
        for (const json_t *x = aud->child; x; x = x->next)
            if (json_is_string(x) && !strcmp(x->str, want)) return true;
    return false;
}

/* The tenants claim into v->grants; false: malformed (401). */
static bool read_grants(const json_t *payload, verified_t *v)
{
    const json_t *c = json_get(payload, cr_config.jwt_tenant_claim);
    v->n_grants = 0;
    if (!c) return true;                 /* no grant: everything is 403 */
    if (!json_is_object(c)) return false;
    for (const json_t *m = c->child; m; m = m->next) {
        if (!json_is_string(m) || strlen(m->key) > AUTH_TENANT_MAX || v->n_grants == AUTH_GRANTS_MAX) return false;
        bool w = !strcmp(m->str, "write");
        if (!w && strcmp(m->str, "read")) return false;
        snprintf(v->grants[v->n_grants].tenant, sizeof v->grants[0].tenant, "%s", m->key);
        v->grants[v->n_grants++].write = w;
    }
    return true;
}

static bool verify(const char *tok, size_t len, arena_t *a, verified_t *v, auth_outcome_t *out)
{
    const char *d1 = memchr(tok, '.', len), *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - tok)) : NULL;
    if (!d1 || !d2 || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - tok)))
        return refuse(out, "the token is not a JWS in compact form");
    json_t *hdr = part_json(a, tok, (size_t)(d1 - tok));
    json_t *pl = part_json(a, d1 + 1, (size_t)(d2 - d1 - 1));
    if (!hdr || !pl) return refuse(out, "the token's header or claims are not base64url JSON objects");
    const json_t *alg = json_get(hdr, "alg"), *kid = json_get(hdr, "kid");
    if (!json_is_string(alg)) return refuse(out, "the token names no alg");
    bool hs = !strcmp(alg->str, "HS256"), rs = !strcmp(alg->str, "RS256"), es = !strcmp(alg->str, "ES256");
    if (!hs && !rs && !es) return refuse(out, "the token's alg is not one this broker accepts (RS256, ES256, HS256)");
    if (hs ? !(cr_config.jwt_secret && *cr_config.jwt_secret) : !(cr_config.jwks && *cr_config.jwks))
        return refuse(out, hs ? "HS256 tokens are not accepted here (no --jwtSecret)"
                              : "RS256/ES256 tokens are not accepted here (no --jwks)");
    if (json_get(hdr, "crit")) return refuse(out, "the token has critical header parameters");
    unsigned char sig[1024];
    size_t        sl;
    size_t        sn = len - (size_t)(d2 + 1 - tok);
    if (sn > 1400 || !auth_b64url_decode(d2 + 1, sn, sig, sizeof sig, &sl))
        return refuse(out, "the token's signature is not base64url");
    const char *kname = json_is_string(kid) ? kid->str : NULL;
    bool        known;
    if (!sig_ok(alg->str, sig, sl, tok, (size_t)(d2 - tok), kname, &known) &&
        (known || !keys_refetch() || !sig_ok(alg->str, sig, sl, tok, (size_t)(d2 - tok), kname, &known)))
        return refuse(out, known ? "the token's signature does not verify"
                                 : "the token's kid names none of the --jwks keys");

    int64_t now = cr_now_us() / 1000000, leeway = cr_config.jwt_leeway, exp = 0, nbf = 0, iat = 0;
    if (!time_claim(pl, "exp", true, &exp)) return refuse(out, "the token has no exp claim");
    if (!time_claim(pl, "nbf", false, &nbf) || !time_claim(pl, "iat", false, &iat))
        return refuse(out, "the token's nbf or iat is not a number");
    if (now > exp + leeway) return refuse(out, "the token expired");
    if (nbf && now + leeway < nbf) return refuse(out, "the token is not valid yet (nbf)");
    if (iat && now + leeway < iat) return refuse(out, "the token was issued in the future (iat)");
    if (cr_config.jwt_issuer && *cr_config.jwt_issuer) {
        const json_t *iss = json_get(pl, "iss");
        if (!json_is_string(iss) || strcmp(iss->str, cr_config.jwt_issuer))
            return refuse(out, "the token's issuer is not --jwtIssuer");
    }
    if (cr_config.jwt_audience && *cr_config.jwt_audience && !audience_ok(json_get(pl, "aud"), cr_config.jwt_audience))
        return refuse(out, "the token's audience does not name this broker (--jwtAudience)");
    if (!read_grants(pl, v))
        return refuse(out, "the token's tenants claim is not an object of tenant: \"read\"|\"write\"");
    const json_t *sub = json_get(pl, "sub");
    v->exp_us = (exp + leeway) * 1000000;
    v->subject = json_is_string(sub) && sub->len <= 256 ? cr_xstrdup(sub->str) : NULL;
    return true;
}

/* ---------------------------------------------------------- judging */

static void judge(const grant_t *g, size_t n, const char *tenant, bool write, auth_outcome_t *out)
{
    const char    *t = tenant && *tenant ? tenant : "@default";
    const grant_t *own = NULL, *any = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(g[i].tenant, t)) own = &g[i];
        else if (!strcmp(g[i].tenant, "*")) any = &g[i];
    }
    const grant_t *use = own ? own : any;
    if (!use) {
        out->verdict = AUTH_FORBIDDEN;
        snprintf(out->detail, sizeof out->detail, "the token does not grant the tenant %s", tenant && *tenant ? tenant : "(default)");
    } else if (write && !use->write) {
        out->verdict = AUTH_FORBIDDEN;
        snprintf(out->detail, sizeof out->detail, "the token grants the tenant %s for reading only",
                 tenant && *tenant ? tenant : "(default)");
    } else {
        out->verdict = AUTH_OK;
    }
}

void auth_check(const char *authorization, const char *tenant, bool write, arena_t *a, auth_outcome_t *out)
{
    memset(out, 0, sizeof *out);
    const char *tok = authorization;
    if (!tok || !*tok) {
        out->verdict = AUTH_UNAUTHENTICATED;
        snprintf(out->detail, sizeof out->detail, "this broker needs a bearer token (Authorization: Bearer <JWT>)");
        atomic_fetch_add_explicit(&stats.refused, 1, memory_order_relaxed);
        return;
    }
    while (*tok == ' ') tok++;
    if (strncasecmp(tok, "Bearer ", 7) != 0) {
        out->verdict = AUTH_UNAUTHENTICATED;
        out->error = "invalid_request";
        snprintf(out->detail, sizeof out->detail, "the Authorization header is not a bearer token");
        atomic_fetch_add_explicit(&stats.refused, 1, memory_order_relaxed);
        return;
    }
    tok += 7;
    while (*tok == ' ') tok++;
    size_t len = strlen(tok);
    while (len && tok[len - 1] == ' ') len--;
    if (!len || len > AUTH_TOKEN_MAX) {
        refuse(out, "the bearer token is empty or too long");
        atomic_fetch_add_explicit(&stats.refused, 1, memory_order_relaxed);
        return;
    }

    uint64_t h = cr_hash(tok, len) | 1;
    shard_t *sh = &shards[h >> 60];
    entry_t *set = sh->e[(h >> 8) % AUTH_SETS];
    int64_t  now = cr_now_us();
    pthread_mutex_lock(&sh->mu);
    for (int w = 0; w < 2; w++) {
        entry_t *e = &set[w];
        if (e->hash != h || e->len != len || memcmp(e->token, tok, len)) continue;
        if (now > e->exp_us) {
            entry_clear(e);
            break;                        /* verified again: says why */
        }
        e->used = ++sh->clock;
        judge(e->grants, e->n_grants, tenant, write, out);
        out->subject = e->subject ? arena_strdup(a, e->subject) : NULL;
        pthread_mutex_unlock(&sh->mu);
        atomic_fetch_add_explicit(&stats.hits, 1, memory_order_relaxed);
        if (out->verdict == AUTH_FORBIDDEN) atomic_fetch_add_explicit(&stats.forbidden, 1, memory_order_relaxed);
        return;
    }
    pthread_mutex_unlock(&sh->mu);

    verified_t *v = arena_calloc(a, sizeof *v);
    if (!verify(tok, len, a, v, out)) {
        atomic_fetch_add_explicit(&stats.refused, 1, memory_order_relaxed);
        return;
    }
    atomic_fetch_add_explicit(&stats.verified, 1, memory_order_relaxed);
    judge(v->grants, v->n_grants, tenant, write, out);
    out->subject = v->subject ? arena_strdup(a, v->subject) : NULL;
    if (out->verdict == AUTH_FORBIDDEN) atomic_fetch_add_explicit(&stats.forbidden, 1, memory_order_relaxed);

    pthread_mutex_lock(&sh->mu);
    entry_t *e = set[0].used <= set[1].used ? &set[0] : &set[1];
    if (set[0].hash == h && set[0].len == len && !memcmp(set[0].token, tok, len)) e = &set[0];   /* raced */
    else if (set[1].hash == h && set[1].len == len && !memcmp(set[1].token, tok, len)) e = &set[1];
    entry_clear(e);
    e->hash = h;
    e->token = cr_xstrndup(tok, len);
    e->len = len;
    e->exp_us = v->exp_us;
    e->used = ++sh->clock;
    e->subject = v->subject;
    e->grants = v->n_grants ? cr_xmalloc(v->n_grants * sizeof(grant_t)) : NULL;
    if (v->n_grants) memcpy(e->grants, v->grants, v->n_grants * sizeof(grant_t));
    e->n_grants = v->n_grants;
    pthread_mutex_unlock(&sh->mu);
}

void auth_get_stats(auth_stats_t *st)
{
    memset(st, 0, sizeof *st);
    st->cache_hits = atomic_load(&stats.hits);
    st->verified = atomic_load(&stats.verified);
    st->refused = atomic_load(&stats.refused);
    st->forbidden = atomic_load(&stats.forbidden);
    st->jwks_fetches = atomic_load(&stats.fetches);
    st->jwks_refetches = atomic_load(&stats.refetches);
    if (!shards) return;
    for (int i = 0; i < AUTH_SHARDS; i++) {
        pthread_mutex_lock(&shards[i].mu);
        for (int s = 0; s < AUTH_SETS; s++) st->cached += (shards[i].e[s][0].hash != 0) + (shards[i].e[s][1].hash != 0);
        pthread_mutex_unlock(&shards[i].mu);
    }
}
