/*
 * ld_map.c - the small open-addressing hash map (hash -> pointer) behind the
 * context cache, the served-context index and the remote-document cache.
 * Linear probing, load factor at most 1/2, removal by backward shift, and
 * the values in order of last use for the LRU eviction of both caches.
 * Callers lock.
 */
#include "ld_int.h"

#include <stdlib.h>

void *ld_map_find(const ld_map_t *m, uint64_t hash, ld_map_eq_fn eq, const void *key)
{
    if (!m->cap)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        const struct ld_slot *s = &m->slots[i];
        if (!s->val)
            return NULL;
        if (s->hash == hash && eq(s->val, key))
            return s->val;
    }
}

static void insert_slot(struct ld_slot *slots, size_t cap, uint64_t hash, void *val)
{
    size_t mask = cap - 1;
    size_t i = (size_t)hash & mask;
    while (slots[i].val)
        i = (i + 1) & mask;
    slots[i].hash = hash;
    slots[i].val = val;
}

void ld_map_put(ld_map_t *m, uint64_t hash, void *val)
{
    if ((m->count + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 64;
        struct ld_slot *ns = cr_xcalloc(ncap, sizeof *ns);
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].val)
                insert_slot(ns, ncap, m->slots[i].hash, m->slots[i].val);
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    insert_slot(m->slots, m->cap, hash, val);
    m->count++;
}

void ld_map_free(ld_map_t *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

void ld_map_each(const ld_map_t *m, void (*fn)(void *val, void *ud), void *ud)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].val)
            fn(m->slots[i].val, ud);
}

void ld_map_del(ld_map_t *m, uint64_t hash, const void *val)
{
    if (!m->cap)
        return;
    size_t mask = m->cap - 1;
    size_t i = (size_t)hash & mask;
    while (m->slots[i].val != val) {
        if (!m->slots[i].val)
            return;                                 /* not there */
        i = (i + 1) & mask;
    }
    /* backward shift: move later members of the chain into the hole when
     * their home slot does not lie (cyclically) between the hole and them */
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (!m->slots[j].val)
            break;
        size_t home = (size_t)m->slots[j].hash & mask;
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        m->slots[i] = m->slots[j];
        i = j;
    }
    m->slots[i].val = NULL;
    m->slots[i].hash = 0;
    m->count--;
}

typedef struct aged {
    int64_t used;
    void   *val;
} aged_t;

static int by_age(const void *a, const void *b)
{
    const aged_t *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used;
}

void **ld_map_by_age(const ld_map_t *m, bool (*want)(const void *val), int64_t (*used)(const void *val),
                     size_t *n)
{
    aged_t *v = cr_xreallocarray(NULL, m->count ? m->count : 1, sizeof *v);
    size_t k = 0;
    for (size_t i = 0; i < m->cap; i++) {
        void *val = m->slots[i].val;
        if (val && (!want || want(val)))
            v[k++] = (aged_t){ used(val), val };
    }
    qsort(v, k, sizeof *v, by_age);
    void **out = cr_xreallocarray(NULL, k ? k : 1, sizeof *out);
    for (size_t i = 0; i < k; i++)
        out[i] = v[i].val;
    free(v);
    *n = k;
    return out;
}
