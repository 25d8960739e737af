/*
 * cache.c - the MongoDB store's entity cache: the frozen versions this
 * process decoded or wrote last, keyed by (tenant, id) and checked by the
 * write token.
 *
 * Why: a read asks the server for the current document of an entity every
 * time (the rule below), but decoding its version ("e", model/codec.h) and
 * rendering it afresh cost more than the round trip's own work. When the
 * server's document still carries the token of the cached version, the
 * cached frozen entity IS that version (a token names one write of one
 * process, never reused: mgc_token), so the read hands it out: no decode,
 * and its render cache (model.h) stays warm, as corDB's does.
 *
 * The rule (consistency across processes): the cache never answers a read
 * by itself. A read gets the current document (its token) from the server
 * after the read began, and uses a cached version only when its token is
 * that one; so a read never returns a version older than one acknowledged
 * through any process before the read began. A write may start from the
 * cached version (mgc_cache_peek) without reading it first only because its
 * replace is conditional on that token: if another process wrote meanwhile,
 * nothing matches, and the write reads the current version and applies
 * again (write.c).
 *
 * Shape: MGC_CACHE_SLOTS slots, direct-mapped on a hash of (tenant, id),
 * under MGC_CACHE_LOCKS striped mutexes; a new entry replaces what held its
 * slot. It holds at most MGC_CACHE_SLOTS references to frozen versions;
 * each is released when its slot is taken, its entity deleted, or at close.
 */
#include <stdlib.h>
#include <string.h>

#include "mgc.h"

typedef struct mgc_cslot {
    const mgc_tenant_t *t;
    cr_entity_t        *e;          /* a reference; NULL: empty */
    mgc_ver_t           ver;
} mgc_cslot_t;

struct mgc_cache {
    pthread_mutex_t mu[MGC_CACHE_LOCKS];
    mgc_cslot_t     slot[MGC_CACHE_SLOTS];
};

static uint32_t slot_of(const mgc_tenant_t *t, const char *id)
{
    return (uint32_t)((cr_hash(id, strlen(id)) ^ cr_hash_ptr(t)) & (MGC_CACHE_SLOTS - 1));
}

static pthread_mutex_t *lock_of(mgc_cache_t *c, uint32_t i)
{
    return &c->mu[i & (MGC_CACHE_LOCKS - 1)];
}

static bool holds(const mgc_cslot_t *s, const mgc_tenant_t *t, const char *id)
{
    return s->e && s->t == t && strcmp(s->e->id, id) == 0;
}

mgc_cache_t *mgc_cache_new(void)
{
    mgc_cache_t *c = cr_xmalloc(sizeof(*c));

    memset(c, 0, sizeof(*c));
    for (int i = 0; i < MGC_CACHE_LOCKS; i++)
        pthread_mutex_init(&c->mu[i], NULL);
    return c;
}

void mgc_cache_free(mgc_cache_t *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < MGC_CACHE_SLOTS; i++)
        if (c->slot[i].e)
            entity_unref(c->slot[i].e);
    for (int i = 0; i < MGC_CACHE_LOCKS; i++)
        pthread_mutex_destroy(&c->mu[i]);
    free(c);
}

cr_entity_t *mgc_cache_get(mgc_cache_t *c, const mgc_tenant_t *t, const char *id, int64_t w)
{
    uint32_t     i = slot_of(t, id);
    cr_entity_t *e = NULL;

    pthread_mutex_lock(lock_of(c, i));
    if (holds(&c->slot[i], t, id) && c->slot[i].ver.w == w) {
        e = c->slot[i].e;
        entity_ref(e);
    }
    pthread_mutex_unlock(lock_of(c, i));
    return e;
}

cr_entity_t *mgc_cache_peek(mgc_cache_t *c, const mgc_tenant_t *t, const char *id, mgc_ver_t *ver)
{
    uint32_t     i = slot_of(t, id);
    cr_entity_t *e = NULL;

    pthread_mutex_lock(lock_of(c, i));
    if (holds(&c->slot[i], t, id)) {
        e    = c->slot[i].e;
        *ver = c->slot[i].ver;
        entity_ref(e);
    }
    pthread_mutex_unlock(lock_of(c, i));
    return e;
}

void mgc_cache_put(mgc_cache_t *c, const mgc_tenant_t *t, cr_entity_t *e, mgc_ver_t ver)
{
    uint32_t     i = slot_of(t, e->id);
    cr_entity_t *old;

    entity_ref(e);
    pthread_mutex_lock(lock_of(c, i));
    old        = c->slot[i].e;
    c->slot[i] = (mgc_cslot_t){ .t = t, .e = e, .ver = ver };
    pthread_mutex_unlock(lock_of(c, i));
    if (old)
        entity_unref(old);
}

void mgc_cache_drop(mgc_cache_t *c, const mgc_tenant_t *t, const char *id)
{
    uint32_t     i   = slot_of(t, id);
    cr_entity_t *old = NULL;

    pthread_mutex_lock(lock_of(c, i));
    if (holds(&c->slot[i], t, id)) {
        old          = c->slot[i].e;
        c->slot[i].e = NULL;
    }
    pthread_mutex_unlock(lock_of(c, i));
    if (old)
        entity_unref(old);
}
