/*
 * ld_store.c - the stored @contexts of 5.13: the registry of Hosted
 * contexts, and the one view over the three kinds that /jsonldContexts lists.
 *
 * Hosted contexts are added by clients (POST /jsonldContexts). ops/ keeps
 * them in the store, so that corDB on disk keeps them over a restart, and
 * registers each here, where the resolver finds it by its URL
 * (<base>/ngsi-ld/v1/jsonldContexts/<id>) without a download: a Link header
 * or an @context naming it reads the text from this registry (ld_own_doc).
 * The registry holds the text ({"@context": ...}) of each, bounded by
 * --contextHostedMax contexts of at most --contextHostedMaxBytes each, so
 * what it costs is known in advance.
 *
 * The other kinds live where they are made: Cached documents in the fetch
 * cache (ld_fetch.c: the core context, which is built in, is listed as one
 * too), ImplicitlyCreated contexts in the context cache (ld_cache.c). A
 * context's numberOfHits counts the requests that found it stored: the
 * requests that read its document, plus those that found the context built
 * from its URL in the context cache, plus the GETs of /jsonldContexts/{id}.
 */
#include "ld_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct hosted {
    char     id[17];
    char    *text;
    size_t   len;
    int64_t  created_ms;
    uint64_t hits;              /* under g_lock */
    int64_t  last_ms;
    uint64_t seq;               /* creation order, for listings */
} hosted_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ld_map_t        g_hosted;                   /* cr_hash(id) -> hosted_t */
static uint64_t        g_seq;

static size_t hosted_max(void)
{
    return cr_config.context_hosted_max > 0 ? (size_t)cr_config.context_hosted_max : 1000;
}

static size_t hosted_max_bytes(void)
{
    return cr_config.context_hosted_max_bytes > 0 ? cr_config.context_hosted_max_bytes : 65536;
}

static bool eq_id(const void *val, const void *key)
{
    return strcmp(((const hosted_t *)val)->id, key) == 0;
}

static hosted_t *hosted_find(const char *id)
{
    return strlen(id) == 16 ? ld_map_find(&g_hosted, cr_hash(id, 16), eq_id, id) : NULL;
}

static void hosted_free(void *val, void *ud)
{
    CR_UNUSED(ud);
    hosted_t *h = val;
    free(h->text);
    free(h);
}

void ld_hosted_free_all(void)
{
    pthread_mutex_lock(&g_lock);
    ld_map_each(&g_hosted, hosted_free, NULL);
    ld_map_free(&g_hosted);
    pthread_mutex_unlock(&g_lock);
}

static bool hex16(const char *id)
{
    if (strlen(id) != 16)
        return false;
    for (int i = 0; i < 16; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return false;
    return true;
}

bool ld_hosted_put(const char *id, const char *text, size_t len, int64_t created_ms, problem_t *p)
{
    if (!hex16(id))
        return problem_set(p, PB_BAD_REQUEST_DATA, "a hosted @context id is 16 hex digits, not '%.40s'", id);
    if (len > hosted_max_bytes())
        return problem_set(p, PB_BAD_REQUEST_DATA, "the @context has %zu bytes, more than --contextHostedMaxBytes (%zu)",
                           len, hosted_max_bytes());
    pthread_mutex_lock(&g_lock);
    bool ok = false;
    if (hosted_find(id)) {
        problem_set(p, PB_ALREADY_EXISTS, "a hosted @context with id %s exists", id);
    } else if (g_hosted.count >= hosted_max()) {
        problem_set(p, PB_BAD_REQUEST_DATA, "this broker already hosts %zu @contexts (--contextHostedMax)",
                    hosted_max());
    } else {
        hosted_t *h = cr_xcalloc(1, sizeof *h);
        memcpy(h->id, id, 17);
        h->text = cr_xstrndup(text, len);
        h->len = len;
        h->created_ms = created_ms;
        h->seq = ++g_seq;
        ld_map_put(&g_hosted, cr_hash(id, 16), h);
        ok = true;
    }
    pthread_mutex_unlock(&g_lock);
    return ok;
}

void ld_hosted_remove(const char *id)
{
    pthread_mutex_lock(&g_lock);
    hosted_t *h = hosted_find(id);
    if (h)
        ld_map_del(&g_hosted, cr_hash(id, 16), h);
    pthread_mutex_unlock(&g_lock);
    if (!h)
        return;
    arena_t *a = arena_new(256);
    const char *url = ld_own_url_of(a, id);
    ld_cache_forget_url(url, strlen(url));          /* no longer resolvable by its URL */
    arena_free(a);
    hosted_free(h, NULL);
}

void ld_hosted_new_id(char id[17])
{
    for (;;) {
        uint64_t r = cr_hash_u64((uint64_t)cr_now_us() ^ ((uint64_t)cr_mono_ns() << 17)) ^
                     cr_hash_u64(__atomic_add_fetch(&g_seq, 1, __ATOMIC_RELAXED));
        snprintf(id, 17, "%016llx", (unsigned long long)r);
        pthread_mutex_lock(&g_lock);
        bool taken = hosted_find(id) != NULL;
        pthread_mutex_unlock(&g_lock);
        arena_t *a = arena_new(256);
        ld_info_t other;
        taken = taken || ld_cache_find_served(a, id, false, &other) || ld_fetch_find(a, id, false, &other);
        arena_free(a);
        if (!taken)
            return;
    }
}

const char *ld_hosted_url(arena_t *a, const char *id)
{
    return ld_own_url_of(a, id);
}

bool ld_own_doc(const char *id, arena_t *a, const char **text, size_t *len)
{
    pthread_mutex_lock(&g_lock);
    hosted_t *h = hosted_find(id);
    if (h) {
        h->hits++;
        h->last_ms = cr_now_ms();
        *text = arena_strndup(a, h->text, h->len);
        *len = h->len;
    }
    pthread_mutex_unlock(&g_lock);
    if (h)
        return true;
    ld_info_t info;
    if (!ld_cache_find_served(a, id, true, &info))
        return false;
    *text = info.text;
    *len = strlen(info.text);
    return true;
}

/* ------------------------------------------------------------ the view */

ld_info_t *ld_infos_add(ld_infos_t *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        ld_info_t *v = arena_alloc(l->a, cap * sizeof *v);
        if (l->n)
            memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    ld_info_t *e = &l->v[l->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static void hosted_info(const hosted_t *h, arena_t *a, ld_info_t *out)
{
    out->local_id = arena_strdup(a, h->id);
    out->url = ld_own_url_of(a, h->id);
    out->kind = LD_KIND_HOSTED;
    out->created_ms = h->created_ms;
    out->expires_ms = 0;
    out->hits = h->hits;
    out->last_used_ms = h->last_ms;
    out->text = arena_strndup(a, h->text, h->len);
}

typedef struct hosted_list {
    ld_infos_t     *l;
    const hosted_t **v;
    size_t          n;
} hosted_list_t;

static void collect_hosted(void *val, void *ud)
{
    hosted_list_t *hl = ud;
    hl->v[hl->n++] = val;
}

static int by_seq(const void *x, const void *y)
{
    const hosted_t *a = *(const hosted_t *const *)x, *b = *(const hosted_t *const *)y;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static void list_hosted(ld_infos_t *l)
{
    pthread_mutex_lock(&g_lock);
    hosted_list_t hl = { l, arena_alloc(l->a, (g_hosted.count + 1) * sizeof(hosted_t *)), 0 };
    ld_map_each(&g_hosted, collect_hosted, &hl);
    qsort(hl.v, hl.n, sizeof *hl.v, by_seq);
    for (size_t i = 0; i < hl.n; i++)
        hosted_info(hl.v[i], l->a, ld_infos_add(l));
    pthread_mutex_unlock(&g_lock);
}

/* The hits of the context built from the entry's URL, and its last use. */
static void add_usage(ld_info_t *e)
{
    if (e->url)
        ld_cache_url_usage(e->url, &e->hits, &e->last_used_ms);
}

ld_info_t *ld_stored_list(arena_t *a, unsigned kinds, size_t *n)
{
    ld_infos_t l = { .a = a };
    if (kinds & LD_KIND_CACHED) {
        ld_core_info(a, ld_infos_add(&l));
        ld_fetch_list(&l);
    }
    if (kinds & LD_KIND_HOSTED)
        list_hosted(&l);
    if (kinds & LD_KIND_IMPLICIT)
        ld_cache_list_served(&l);
    for (size_t i = 0; i < l.n; i++)
        if (strcmp(l.v[i].local_id, "core"))
            add_usage(&l.v[i]);
    *n = l.n;
    return l.v;
}

bool ld_stored_find(arena_t *a, const char *id, bool count, ld_info_t *out)
{
    char own[17];
    size_t len = strlen(id);
    memset(out, 0, sizeof *out);
    if (!strcmp(id, "core") || ld_is_core_url(id, len)) {
        ld_core_info(a, out);
        return true;
    }
    if (ld_own_url(id, len, own))
        id = own;
    pthread_mutex_lock(&g_lock);
    hosted_t *h = hosted_find(id);
    if (h) {
        hosted_info(h, a, out);
        if (count) {
            h->hits++;
            h->last_ms = cr_now_ms();
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (!h && !ld_cache_find_served(a, id, count, out) && !ld_fetch_find(a, id, count, out))
        return false;
    add_usage(out);
    return true;
}

bool ld_stored_forget(const ld_info_t *info)
{
    if (info->kind == LD_KIND_IMPLICIT) {
        if (!ld_cache_forget_served(info->local_id))
            return false;
    } else if (info->kind == LD_KIND_CACHED) {
        if (!strcmp(info->local_id, "core") || !ld_fetch_forget(info->local_id))
            return false;
    } else {
        return false;
    }
    ld_cache_forget_url(info->url, strlen(info->url));
    return true;
}
