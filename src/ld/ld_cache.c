/*
 * ld_cache.c - the public face of src/ld/: the built-in core context, the
 * cache of built contexts, and how a context is named in responses.
 *
 * A context is built once per distinct key - a URL (Link header or a string
 * @context) or an inline value (object/array, compared structurally: a hash
 * that ignores member order, then json_equal) - and kept in the cache, so a
 * request that repeats a context costs one read-locked lookup and no parse.
 * Two threads may build the same new context at once; the first to insert
 * wins and the other's copy is freed before anyone saw it (remote documents
 * themselves are downloaded once: ld_fetch.c).
 *
 * Contexts that are not a single URL (inline objects, arrays) get an id, the
 * hash of their JSON text, and are served by the broker under
 * <base>/ngsi-ld/v1/jsonldContexts/<id> (kind "ImplicitlyCreated").
 *
 * Bound: the contexts' arenas together stay under half of --contextCacheSize;
 * beyond it the least recently used quarter is evicted, so no sequence of
 * requests can fill the cache and lock new contexts out. A context holds a
 * reference for the cache and one per request that uses it (ld_req pins it
 * until the request's arena goes), and is freed by the last release: entities
 * keep interned names, never context pointers, and memos of renderings are
 * keyed by the context's serial, which is never reused. A served context
 * that was evicted is served again once a request names it again.
 *
 * ld_req_t: a request's resolution state - the waiter for downloads (see
 * ld_fetch.c), the deadline, the budget used so far, the pins.
 */
#include "ld_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SERVED_PATH "/ngsi-ld/v1/jsonldContexts/"

extern const char cr_core_context_start[], cr_core_context_end[];

static pthread_mutex_t  g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static ld_context_t    *g_core;             /* atomic: published once built */
static pthread_rwlock_t g_rw = PTHREAD_RWLOCK_INITIALIZER;
static ld_map_t         g_ctx;              /* key_hash -> context */
static ld_map_t         g_served;           /* hash(served_id) -> context */
static const char      *g_base_url;         /* interned, atomic */
static uint64_t         g_ctx_hits, g_ctx_evictions;
static size_t           g_ctx_bytes;        /* under g_rw */

#define REQ_MEMO 32
struct ld_req {
    arena_t    *a;
    ld_waiter_t w;
    unsigned    docs;                       /* budget used by the contexts built so far */
    size_t      bytes;
    bool        pending;
    /* the contexts this request resolved (pinned): a batch that names them
     * again, or a handler run again, finds them even if the cache evicted them */
    unsigned    nmemo;
    struct { uint64_t hash; const ld_context_t *c; } memo[REQ_MEMO];
};

static const ld_context_t *memo_find(const ld_req_t *q, uint64_t h, ld_map_eq_fn eq, const void *key)
{
    for (unsigned i = 0; q && i < q->nmemo; i++)
        if (q->memo[i].hash == h && eq(q->memo[i].c, key))
            return q->memo[i].c;
    return NULL;
}

static const ld_context_t *memo_add(ld_req_t *q, const ld_context_t *c)
{
    if (q && c && q->nmemo < REQ_MEMO) {
        q->memo[q->nmemo].hash = c->key_hash;
        q->memo[q->nmemo].c = c;
        q->nmemo++;
    }
    return c;
}

static int64_t mono_ms(void)
{
    return cr_mono_ns() / 1000000;
}

static size_t ctx_cache_limit(void)
{
    size_t mb = cr_config.context_cache_mb > 0 ? (size_t)cr_config.context_cache_mb : 64;
    return (mb << 20) / 2;
}

static void ctx_unref(void *p)
{
    ld_context_t *c = p;
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
        ld_context_free(c);
}

/* ------------------------------------------------------------ the core */

static ld_context_t *build_core(void)
{
    ld_builder_t b;
    problem_t p = { 0 };
    ld_builder_init(&b, NULL);
    size_t n = (size_t)(cr_core_context_end - cr_core_context_start);
    char err[128];
    json_limits_t lim = { .max_depth = LD_JSON_MAX_DEPTH, .max_size = 0 };
    json_t *doc = json_parse_copy(b.tmp, cr_core_context_start, n, &lim, err, sizeof err);
    const json_t *ctx = doc ? json_get(doc, "@context") : NULL;
    if (!json_is_object(ctx)) {
        LOG_E("ld: the built-in core @context is not valid: %s", doc ? "no @context object" : err);
        ld_builder_free(&b);
        return NULL;
    }
    if (!ld_builder_add(&b, ctx, &p)) {
        LOG_E("ld: the built-in core @context is not valid: %s", p.detail);
        ld_builder_free(&b);
        return NULL;
    }
    ld_context_t *c = ld_builder_freeze(&b, true);
    ld_builder_free(&b);
    if (!c->vocab || strcmp(c->vocab, LD_DEFAULT_VOCAB) != 0)
        LOG_W("ld: the core @vocab is %s, expected " LD_DEFAULT_VOCAB, c->vocab ? c->vocab : "(none)");
    c->link = LD_CORE_CONTEXT_URL;
    c->value_json = "\"" LD_CORE_CONTEXT_URL "\"";
    c->served_json = arena_strndup(c->arena, cr_core_context_start, n);
    c->created_ms = cr_now_ms();
    return c;
}

const ld_context_t *ld_core(void)
{
    ld_context_t *c = __atomic_load_n(&g_core, __ATOMIC_ACQUIRE);
    if (CR_LIKELY(c != NULL))
        return c;
    pthread_mutex_lock(&g_init_lock);
    c = g_core;
    if (!c) {
        ld_fetch_init();
        c = build_core();
        if (c) {
            LOG_D("ld: core @context loaded, %u terms", c->ndefs);
            __atomic_store_n(&g_core, c, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&g_init_lock);
    return c;
}

bool ld_init(void)
{
    return ld_core() != NULL;
}

static void free_ctx(void *val, void *ud)
{
    CR_UNUSED(ud);
    ld_context_t *c = val;
    ld_context_free(c);
}

void ld_shutdown(void)
{
    pthread_mutex_lock(&g_init_lock);
    pthread_rwlock_wrlock(&g_rw);
    ld_map_each(&g_ctx, free_ctx, NULL);
    ld_map_free(&g_ctx);
    ld_map_free(&g_served);
    g_ctx_bytes = 0;
    pthread_rwlock_unlock(&g_rw);
    ld_fetch_shutdown();
    ld_hosted_free_all();
    ld_context_free(g_core);
    __atomic_store_n(&g_core, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_init_lock);
}

void ld_set_base_url(const char *base)
{
    if (!base)
        return;
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    __atomic_store_n(&g_base_url, intern(base, n), __ATOMIC_RELEASE);
}

static const char *base_url(void)
{
    const char *b = __atomic_load_n(&g_base_url, __ATOMIC_ACQUIRE);
    return b ? b : "http://localhost:1026";
}

/* ------------------------------------------------------------ cache keys */

/* Structural hash consistent with json_equal: member order does not count.
 * Every step is keyed (cr_hash_u64): the trees are inline @contexts a client
 * sends, and a fixed mix of numbers and arrays would let it aim many at one
 * bucket of the memo and the cache. */
static uint64_t tree_hash(const json_t *v)
{
    switch (v->type) {
    case JSON_NULL:  return 0x1001;
    case JSON_FALSE: return 0x1002;
    case JSON_TRUE:  return 0x1003;
    case JSON_NUMBER: {
        double d = json_number(v);
        if (d == 0)
            d = 0;                                  /* -0 == 0 */
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        return cr_hash_u64(bits ^ 0x1004);
    }
    case JSON_STRING:
        return cr_hash_u64(cr_hash(v->str, v->len) ^ 0x1005);
    case JSON_ARRAY: {
        uint64_t h = 0x1006;
        json_foreach(c, v)
            h = cr_hash_u64(h * 31 + tree_hash(c));
        return h;
    }
    default: {
        uint64_t sum = 0x1007;
        json_foreach(c, v) {
            const char *k = c->key ? c->key : "";
            sum += cr_hash_u64(cr_hash(k, strlen(k)) ^ (tree_hash(c) * 3));
        }
        return cr_hash_u64(sum);
    }
    }
}

typedef struct url_key {
    const char *url;
    size_t      len;
} url_key_t;

static bool eq_url(const void *val, const void *key)
{
    const ld_context_t *c = val;
    const url_key_t *k = key;
    return c->key_url && c->key_url_len == k->len && memcmp(c->key_url, k->url, k->len) == 0;
}

static bool eq_tree(const void *val, const void *key)
{
    const ld_context_t *c = val;
    return c->key_tree && json_equal(c->key_tree, key);
}

static bool eq_served(const void *val, const void *key)
{
    const ld_context_t *c = val;
    return strcmp(c->served_id, key) == 0;
}

/* pin: the arena that holds a reference (a request's, or a subscription's);
 * q: a request (its look-ups are the hits of 5.13.3.5). */
static const ld_context_t *cache_find(ld_req_t *q, arena_t *pin, uint64_t h, ld_map_eq_fn eq, const void *key)
{
    pthread_rwlock_rdlock(&g_rw);
    ld_context_t *c = ld_map_find(&g_ctx, h, eq, key);
    int64_t now = mono_ms();
    if (c && c->expires_mono_ms && now >= c->expires_mono_ms)
        c = NULL;                                   /* built again from the document's new copy */
    if (c) {
        if (pin)
            __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
        if (q)
            __atomic_add_fetch(&c->hits, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&c->used_ms, now, __ATOMIC_RELAXED);
    }
    pthread_rwlock_unlock(&g_rw);
    if (!c)
        return NULL;
    __atomic_fetch_add(&g_ctx_hits, 1, __ATOMIC_RELAXED);
    if (pin)
        arena_on_free(pin, ctx_unref, c);           /* the reference taken above */
    return c;
}

static int64_t ctx_used(const void *val)
{
    return __atomic_load_n(&((const ld_context_t *)val)->used_ms, __ATOMIC_RELAXED);
}

/* Over the bound: evicts the least recently used until 3/4 of it is used;
 * keep (just inserted) stays. Holds g_rw for writing. */
static void evict_contexts(const ld_context_t *keep)
{
    size_t limit = ctx_cache_limit();
    if (g_ctx_bytes <= limit)
        return;
    size_t n;
    void **v = ld_map_by_age(&g_ctx, NULL, ctx_used, &n);
    for (size_t i = 0; i < n && g_ctx_bytes > limit / 4 * 3; i++) {
        ld_context_t *c = v[i];
        if (c == keep)
            continue;
        ld_map_del(&g_ctx, c->key_hash, c);
        if (c->served_id)
            ld_map_del(&g_served, cr_hash(c->served_id, 16), c);
        g_ctx_bytes -= c->bytes;
        __atomic_fetch_add(&g_ctx_evictions, 1, __ATOMIC_RELAXED);
        ctx_unref(c);                               /* the cache's reference */
    }
    free(v);
}

/* Inserts c (built by this thread) unless an equal context got there first;
 * returns the context to use. Gives served contexts their id and link. */
static const ld_context_t *cache_insert(arena_t *pin, ld_context_t *c, ld_map_eq_fn eq, const void *key)
{
    pthread_rwlock_wrlock(&g_rw);
    ld_context_t *old = ld_map_find(&g_ctx, c->key_hash, eq, key);
    if (old && old->expires_mono_ms && mono_ms() >= old->expires_mono_ms) {
        ld_map_del(&g_ctx, old->key_hash, old);     /* expired: c replaces it */
        if (old->served_id)
            ld_map_del(&g_served, cr_hash(old->served_id, 16), old);
        g_ctx_bytes -= old->bytes;
        ctx_unref(old);
        old = NULL;
    }
    if (old) {
        if (pin)
            __atomic_add_fetch(&old->refs, 1, __ATOMIC_RELAXED);
        pthread_rwlock_unlock(&g_rw);
        ld_context_free(c);
        if (pin)
            arena_on_free(pin, ctx_unref, old);
        return old;
    }
    if (c->served_json) {
        uint64_t h = cr_hash_stable(c->served_json, strlen(c->served_json));   /* an id that outlives the process */
        char id[17];
        for (;;) {                                  /* a (most unlikely) id clash: next id */
            snprintf(id, sizeof id, "%016llx", (unsigned long long)h);
            if (!ld_map_find(&g_served, cr_hash(id, 16), eq_served, id))
                break;
            h++;
        }
        c->served_id = arena_strdup(c->arena, id);
        c->link = arena_printf(c->arena, "%s" SERVED_PATH "%s", base_url(), id);
    }
    c->used_ms = mono_ms();
    c->bytes = arena_used(c->arena) + sizeof(void *) * 4;   /* + its map slots */
    ld_map_put(&g_ctx, c->key_hash, c);
    if (c->served_id)
        ld_map_put(&g_served, cr_hash(c->served_id, 16), c);
    g_ctx_bytes += c->bytes;
    if (pin)
        __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    evict_contexts(c);
    pthread_rwlock_unlock(&g_rw);
    if (pin)
        arena_on_free(pin, ctx_unref, c);
    return c;
}

/* ------------------------------------------------------------- building */

static ld_context_t *build(ld_req_t *q, const json_t *value, problem_t *p)
{
    const ld_context_t *core = ld_core();
    if (!core) {
        problem_set(p, PB_INTERNAL_ERROR, "the core @context is not loaded");
        return NULL;
    }
    ld_builder_t b;
    ld_builder_init(&b, core);
    if (q) {
        b.waiter = &q->w;
        b.max_docs = b.max_docs > q->docs ? b.max_docs - q->docs : 0;
        b.max_bytes = b.max_bytes > q->bytes ? b.max_bytes - q->bytes : 0;
    }
    ld_context_t *c = NULL;
    bool ok = ld_builder_add(&b, value, p);
    if (ok && b.pending) {
        if (cr_mono_ns() < q->w.deadline_ns) {
            q->pending = true;                      /* the waiter is linked: try again when woken */
            problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context: a remote document is being downloaded");
        } else {
            problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                        "@context: the remote @context documents of the request could not be downloaded "
                        "within --contextTimeout (%d ms)", ld_timeout_ms());
        }
        ok = false;
    } else if (ok) {
        c = ld_builder_freeze(&b, false);
        if (b.expires_ms)                           /* never 0: a past expiry is at least 1 ms from now */
            c->expires_mono_ms = mono_ms() + (b.expires_ms > cr_now_ms() ? b.expires_ms - cr_now_ms() : 1);
        if (q) {
            q->docs += b.docs;
            q->bytes += b.doc_bytes;
        }
    }
    if (q && b.pending && !q->pending)
        ld_waiter_release(&q->w);                   /* linked by this build, and not waiting */
    ld_builder_free(&b);
    if (c)
        c->created_ms = cr_now_ms();
    return c;
}

static const ld_context_t *context_for_url(ld_req_t *q, arena_t *pin, const char *url, size_t len, problem_t *p)
{
    if (ld_is_core_url(url, len))
        return ld_core();
    url_key_t key = { url, len };
    uint64_t h = cr_hash(url, len);
    const ld_context_t *hit = memo_find(q, h, eq_url, &key);
    if (hit)
        return hit;
    if ((hit = cache_find(q, pin, h, eq_url, &key)))
        return memo_add(q, hit);

    if (len > LD_MAX_URL_LEN)
        return problem_set(p, PB_BAD_REQUEST_DATA, "@context URL longer than %d bytes", LD_MAX_URL_LEN),
               NULL;
    if (memchr(url, '\0', len))
        return problem_set(p, PB_BAD_REQUEST_DATA, "@context URL contains a NUL byte"), NULL;
    char buf[LD_MAX_URL_LEN + 1];
    memcpy(buf, url, len);
    buf[len] = '\0';
    json_t v = { .type = JSON_STRING, .len = (uint32_t)len, .str = buf };
    ld_context_t *c = build(q, &v, p);
    if (!c)
        return NULL;
    c->key_hash = h;
    c->key_url = arena_strndup(c->arena, url, len);
    c->key_url_len = len;
    c->link = c->key_url;
    sbuf_t sb;
    sb_init(&sb, c->arena, len + 8);
    json_render_string(&sb, url, len);
    c->value_json = sb.p;
    return memo_add(q, cache_insert(pin, c, eq_url, &key));
}

/* The one URL that an array names besides core URLs, or NULL. */
static const json_t *single_url(const json_t *v)
{
    const json_t *url = NULL;
    json_foreach(e, v) {
        if (e->type == JSON_STRING && ld_is_core_url(e->str, e->len))
            continue;
        if (e->type != JSON_STRING || url)
            return NULL;
        url = e;
    }
    return url;
}

static bool only_core_urls(const json_t *v)
{
    json_foreach(e, v)
        if (e->type != JSON_STRING || !ld_is_core_url(e->str, e->len))
            return false;
    return true;
}

static const ld_context_t *from_json(ld_req_t *q, arena_t *pin, const json_t *v, problem_t *p)
{
    const ld_context_t *core = ld_core();
    if (!core) {
        problem_set(p, PB_INTERNAL_ERROR, "the core @context is not loaded");
        return NULL;
    }
    if (!v || v->type == JSON_NULL)
        return core;
    if (v->type == JSON_STRING)
        return context_for_url(q, pin, v->str, v->len, p);
    if (v->type != JSON_OBJECT && v->type != JSON_ARRAY) {
        problem_set(p, PB_BAD_REQUEST_DATA, "@context must be a URL string, an object or an array, not a %s",
                    v->type == JSON_NUMBER ? "number" : "boolean");
        return NULL;
    }
    if (v->type == JSON_ARRAY && only_core_urls(v))
        return core;

    uint64_t h = tree_hash(v);
    const ld_context_t *hit = memo_find(q, h, eq_tree, v);
    if (hit)
        return hit;
    if ((hit = cache_find(q, pin, h, eq_tree, v)))
        return memo_add(q, hit);

    ld_context_t *c = build(q, v, p);
    if (!c)
        return NULL;
    c->key_hash = h;
    c->key_tree = json_clone(c->arena, v);
    sbuf_t sb;
    sb_init(&sb, c->arena, 256);
    json_render(&sb, v);
    c->value_json = sb.p;
    const json_t *one = v->type == JSON_ARRAY ? single_url(v) : NULL;
    if (one) {
        c->link = arena_strndup(c->arena, one->str, one->len);
    } else {
        sbuf_t s2;
        sb_init(&s2, c->arena, sb.len + 16);
        sb_adds(&s2, "{\"@context\":");
        sb_add(&s2, sb.p, sb.len);
        sb_addc(&s2, '}');
        c->served_json = s2.p;
    }
    return memo_add(q, cache_insert(pin, c, eq_tree, v));
}

static const ld_context_t *from_link(ld_req_t *q, const char *link_header, problem_t *p)
{
    const char *url;
    size_t len;
    if (!ld_core()) {
        problem_set(p, PB_INTERNAL_ERROR, "the core @context is not loaded");
        return NULL;
    }
    if (!ld_link_parse(link_header, &url, &len, p))
        return NULL;
    return context_for_url(q, q ? q->a : NULL, url, len, p);
}

const ld_context_t *ld_from_json(const json_t *v, problem_t *p)
{
    return from_json(NULL, NULL, v, p);
}

const ld_context_t *ld_hold_from_json(arena_t *a, const json_t *v, problem_t *p)
{
    return from_json(NULL, a, v, p);
}

const ld_context_t *ld_from_link(const char *link_header, problem_t *p)
{
    return from_link(NULL, link_header, p);
}

/* ------------------------------------------------------ request state */

static void req_release(void *ud)
{
    ld_req_t *q = ud;
    ld_waiter_release(&q->w);
}

ld_req_t *ld_req_new(arena_t *a, int64_t deadline_ns, void (*wake)(void *), void *wake_arg)
{
    ld_req_t *q = arena_calloc(a, sizeof *q);
    q->a = a;
    q->w.deadline_ns = deadline_ns;
    q->w.wake = wake;
    q->w.wake_arg = wake_arg;
    arena_on_free(a, req_release, q);
    return q;
}

const ld_context_t *ld_req_from_link(ld_req_t *q, const char *link_header, problem_t *p)
{
    q->pending = false;
    return from_link(q, link_header, p);
}

const ld_context_t *ld_req_from_json(ld_req_t *q, const json_t *v, problem_t *p)
{
    q->pending = false;
    return from_json(q, q->a, v, p);
}

bool ld_req_validate(ld_req_t *q, const json_t *v, problem_t *p)
{
    q->pending = false;
    if (!v || (v->type != JSON_STRING && v->type != JSON_OBJECT && v->type != JSON_ARRAY))
        return problem_set(p, PB_BAD_REQUEST_DATA, "@context must be a URL string, an object or an array");
    ld_context_t *c = build(q, v, p);
    if (!c)
        return false;
    ld_context_free(c);
    return true;
}

bool ld_req_reload(ld_req_t *q, const char *url, problem_t *p)
{
    q->pending = false;
    if (cr_mono_ns() >= q->w.deadline_ns) {
        ld_waiter_release(&q->w);
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                           "@context %.300s could not be downloaded again within --contextTimeout (%d ms)", url,
                           ld_timeout_ms());
    }
    int rc = ld_doc_reload(url, &q->w, p);
    if (rc == LD_DOC_PENDING) {
        q->pending = true;
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s: being downloaded again", url);
    }
    if (rc == LD_DOC_READY)
        ld_cache_forget_url(url, strlen(url));      /* built again from the new copy at next use */
    return rc == LD_DOC_READY;
}

bool ld_req_pending(const ld_req_t *q)
{
    return q && q->pending;
}

/* ------------------------------------------------------------ echoing */

const char *ld_context_link(const ld_context_t *c)
{
    if (!c)
        c = ld_core();
    return c ? c->link : LD_CORE_CONTEXT_URL;
}

const char *ld_context_value_json(const ld_context_t *c)
{
    if (!c)
        c = ld_core();
    return c ? c->value_json : "\"" LD_CORE_CONTEXT_URL "\"";
}

const char *ld_served_context(arena_t *a, const char *id)
{
    if (!id || strlen(id) != 16)
        return NULL;
    pthread_rwlock_rdlock(&g_rw);
    const ld_context_t *c = ld_map_find(&g_served, cr_hash(id, 16), eq_served, id);
    const char *text = c ? arena_strdup(a, c->served_json) : NULL;
    pthread_rwlock_unlock(&g_rw);
    return text;
}

/* ------------------------------------------- for the stored @contexts (ld_store.c) */

bool ld_own_url(const char *url, size_t len, char id[17])
{
    const char *base = base_url();
    size_t bl = strlen(base), pl = sizeof SERVED_PATH - 1;
    if (len != bl + pl + 16 || memcmp(url, base, bl) != 0 || memcmp(url + bl, SERVED_PATH, pl) != 0)
        return false;
    memcpy(id, url + bl + pl, 16);
    id[16] = '\0';
    return true;
}

const char *ld_own_url_of(arena_t *a, const char *id)
{
    return arena_printf(a, "%s" SERVED_PATH "%s", base_url(), id);
}

static int64_t wall_of(int64_t used_mono_ms)
{
    return cr_now_ms() - (mono_ms() - used_mono_ms);
}

void ld_cache_url_usage(const char *url, uint64_t *hits, int64_t *last_used_ms)
{
    url_key_t key = { url, strlen(url) };
    pthread_rwlock_rdlock(&g_rw);
    const ld_context_t *c = ld_map_find(&g_ctx, cr_hash(url, key.len), eq_url, &key);
    if (c) {
        uint64_t h = __atomic_load_n(&c->hits, __ATOMIC_RELAXED);
        *hits += h;
        int64_t used = wall_of(__atomic_load_n(&c->used_ms, __ATOMIC_RELAXED));
        if (h && used > *last_used_ms)
            *last_used_ms = used;
    }
    pthread_rwlock_unlock(&g_rw);
}

typedef struct { const char *url; size_t len; } naming_t;

/* A context whose @context value names the URL (an array that lists it)
 * expires now: the next request builds it again and downloads the
 * document again, so a deleted or reloaded Cached document is listed
 * again when it is used (5.13.5). Holds g_rw for writing. */
static void expire_naming(void *val, void *ud)
{
    ld_context_t *c = val;
    const naming_t *n = ud;
    if (c->value_json && memmem(c->value_json, strlen(c->value_json), n->url, n->len))
        c->expires_mono_ms = 1;
}

void ld_cache_forget_url(const char *url, size_t len)
{
    url_key_t key = { url, len };
    uint64_t h = cr_hash(url, len);
    pthread_rwlock_wrlock(&g_rw);
    ld_context_t *c = ld_map_find(&g_ctx, h, eq_url, &key);
    if (c) {
        ld_map_del(&g_ctx, c->key_hash, c);
        g_ctx_bytes -= c->bytes;
        ctx_unref(c);                               /* the cache's reference */
    }
    naming_t n = { url, len };
    ld_map_each(&g_ctx, expire_naming, &n);
    pthread_rwlock_unlock(&g_rw);
}

static void served_info(ld_context_t *c, arena_t *a, ld_info_t *out)
{
    out->local_id = arena_strdup(a, c->served_id);
    out->url = arena_strdup(a, c->link);
    out->kind = LD_KIND_IMPLICIT;
    out->created_ms = c->created_ms;
    out->expires_ms = 0;
    out->hits = __atomic_load_n(&c->hits, __ATOMIC_RELAXED);
    out->last_used_ms = out->hits ? wall_of(__atomic_load_n(&c->used_ms, __ATOMIC_RELAXED)) : 0;
    out->text = arena_strdup(a, c->served_json);
}

static void list_served(void *val, void *ud)
{
    served_info(val, ((ld_infos_t *)ud)->a, ld_infos_add(ud));
}

void ld_cache_list_served(ld_infos_t *l)
{
    pthread_rwlock_rdlock(&g_rw);
    ld_map_each(&g_served, list_served, l);
    pthread_rwlock_unlock(&g_rw);
}

bool ld_cache_find_served(arena_t *a, const char *id, bool count, ld_info_t *out)
{
    if (strlen(id) != 16)
        return false;
    pthread_rwlock_rdlock(&g_rw);
    ld_context_t *c = ld_map_find(&g_served, cr_hash(id, 16), eq_served, id);
    if (c) {
        served_info(c, a, out);
        if (count) {
            __atomic_add_fetch(&c->hits, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&c->used_ms, mono_ms(), __ATOMIC_RELAXED);
        }
    }
    pthread_rwlock_unlock(&g_rw);
    return c != NULL;
}

bool ld_cache_forget_served(const char *id)
{
    if (strlen(id) != 16)
        return false;
    pthread_rwlock_wrlock(&g_rw);
    ld_context_t *c = ld_map_find(&g_served, cr_hash(id, 16), eq_served, id);
    if (c) {
        ld_map_del(&g_served, cr_hash(id, 16), c);
        ld_map_del(&g_ctx, c->key_hash, c);
        g_ctx_bytes -= c->bytes;
        ctx_unref(c);                               /* the cache's reference: requests and subscriptions keep theirs */
    }
    pthread_rwlock_unlock(&g_rw);
    return c != NULL;
}

void ld_core_info(arena_t *a, ld_info_t *out)
{
    const ld_context_t *core = ld_core();
    out->local_id = "core";
    out->url = LD_CORE_CONTEXT_URL;
    out->kind = LD_KIND_CACHED;
    out->created_ms = core ? core->created_ms : 0;
    out->expires_ms = 0;
    out->hits = 0;
    out->last_used_ms = 0;
    out->text = NULL;
    (void)a;
}

void ld_get_stats(ld_stats_t *s)
{
    s->downloads = __atomic_load_n(&ld_stat_downloads, __ATOMIC_RELAXED);
    s->download_failures = __atomic_load_n(&ld_stat_download_failures, __ATOMIC_RELAXED);
    s->cache_hits = __atomic_load_n(&g_ctx_hits, __ATOMIC_RELAXED) +
                    __atomic_load_n(&ld_stat_cache_hits, __ATOMIC_RELAXED);
    s->evictions = __atomic_load_n(&g_ctx_evictions, __ATOMIC_RELAXED) +
                   __atomic_load_n(&ld_stat_evictions, __ATOMIC_RELAXED);
    pthread_rwlock_rdlock(&g_rw);
    s->cached = g_ctx.count;
    s->cached_bytes = g_ctx_bytes;
    pthread_rwlock_unlock(&g_rw);
    size_t docs, bytes;
    ld_fetch_stats(&docs, &bytes);
    s->documents = docs;
    s->document_bytes = bytes;
}
