/*
 * fwd_cache.c - the answers of context sources kept for their registration's
 * management.cacheDuration (5.2.34, 6.3.17): a forwarded GET of /entities or
 * /entities/{id} that was answered (2xx, or 404) is kept; the same request to
 * the same registration within that duration is not sent again, the kept
 * answer is used, and the response says so with NGSILD-Warning 110 "Response
 * is Stale" (6.3.17, Table 6.3.17-1; fwd.c adds it).
 *
 * "The same request" is the registration, the URL and the headers sent but Via
 * and X-Request-Id (so the @context, the tenant and the contextSourceInfo
 * headers copied from the request, an Authorization one for instance, are
 * part of it). Bounded: --forwardCacheSize bytes of keys and answers in all,
 * the least recently used dropped first, an answer larger than an eighth of
 * it never kept; 0 turns the cache off. One mutex; lookups copy the answer
 * into the request's arena.
 */
#include "fwd_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKET 4096

typedef struct entry {
    struct entry *hnext;           /* bucket chain */
    struct entry *prev, *next;     /* LRU: g_head most recent */
    uint64_t      hash;
    int64_t       expires_at;
    long          status;
    size_t        key_len, body_len;
    char          data[];          /* key, then body */
} entry_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t        *g_bucket[NBUCKET];
static entry_t        *g_head, *g_tail;
static size_t          g_bytes;

/* Whether c is a read the cache may answer: a GET of entities[/{id}] to a registration with cacheDuration. */
static bool cacheable(const call_t *c)
{
    if (!c->reg || !reg_cache_us(c->reg) || c->method || c->post || !c->url || !cr_config.forward_cache_size)
        return false;
    const char *p = strstr(c->url, "/ngsi-ld/v1/entities");
    if (!p) return false;
    p += strlen("/ngsi-ld/v1/entities");
    return !*p || *p == '?' || (*p == '/' && !strchr(p + 1, '/'));
}

static const char *key_of(const call_t *c, arena_t *a, size_t *len)
{
    sbuf_t k;
    sb_init(&k, a, 512);
    sb_adds(&k, reg_id(c->reg));
    sb_addc(&k, '\n');
    sb_adds(&k, c->url);
    for (const struct curl_slist *h = c->hdrs; h; h = h->next) {
        if (!strncasecmp(h->data, "Via:", 4) || !strncasecmp(h->data, "X-Request-Id:", 13)) continue;
        sb_addc(&k, '\n');
        sb_adds(&k, h->data);
    }
    *len = k.len;
    return k.p;
}

static void unlink_lru(entry_t *e)
{
    if (e->prev) e->prev->next = e->next;
    else g_head = e->next;
    if (e->next) e->next->prev = e->prev;
    else g_tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(entry_t *e)
{
    e->next = g_head;
    e->prev = NULL;
    if (g_head) g_head->prev = e;
    g_head = e;
    if (!g_tail) g_tail = e;
}

static size_t entry_bytes(const entry_t *e)
{
    return sizeof *e + e->key_len + e->body_len;
}

/* Under g_lock. */
static void drop(entry_t *e)
{
    entry_t **pp = &g_bucket[e->hash % NBUCKET];
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
    unlink_lru(e);
    g_bytes -= entry_bytes(e);
    free(e);
}

static entry_t *find(uint64_t h, const char *key, size_t len)
{
    for (entry_t *e = g_bucket[h % NBUCKET]; e; e = e->hnext)
        if (e->hash == h && e->key_len == len && !memcmp(e->data, key, len)) return e;
    return NULL;
}

bool fwd_cache_get(call_t *c)
{
    if (!cacheable(c)) return false;
    size_t      len;
    const char *key = key_of(c, c->body.a, &len);
    uint64_t    h = cr_hash(key, len);
    bool        hit = false;
    pthread_mutex_lock(&g_lock);
    entry_t *e = find(h, key, len);
    if (e && e->expires_at <= cr_now_us()) {
        drop(e);
        e = NULL;
    }
    if (e) {
        unlink_lru(e);
        push_front(e);
        c->body.len = 0;
        sb_add(&c->body, e->data + e->key_len, e->body_len);
        c->status = e->status;
        c->rc = CURLE_OK;
        c->from_cache = hit = true;
    }
    pthread_mutex_unlock(&g_lock);
    return hit;
}

void fwd_cache_put(const call_t *c)
{
    if (c->from_cache || !cacheable(c) || c->rc != CURLE_OK || c->too_big) return;
    if (!((c->status >= 200 && c->status < 300) || c->status == 404)) return;
    size_t      len;
    const char *key = key_of(c, c->body.a, &len);
    size_t      bytes = sizeof(entry_t) + len + c->body.len;
    size_t      cap = cr_config.forward_cache_size;
    if (bytes > cap / 8) return;
    entry_t *e = malloc(bytes);
    if (!e) return;
    *e = (entry_t){.hash = cr_hash(key, len), .expires_at = cr_now_us() + reg_cache_us(c->reg),
                   .status = c->status, .key_len = len, .body_len = c->body.len};
    memcpy(e->data, key, len);
    if (c->body.len) memcpy(e->data + len, c->body.p, c->body.len);
    pthread_mutex_lock(&g_lock);
    entry_t *old = find(e->hash, key, len);
    if (old) drop(old);
    while (g_tail && g_bytes + bytes > cap) drop(g_tail);
    e->hnext = g_bucket[e->hash % NBUCKET];
    g_bucket[e->hash % NBUCKET] = e;
    push_front(e);
    g_bytes += bytes;
    pthread_mutex_unlock(&g_lock);
}

void fwd_cache_clear(void)
{
    pthread_mutex_lock(&g_lock);
    while (g_tail) drop(g_tail);
    pthread_mutex_unlock(&g_lock);
}
