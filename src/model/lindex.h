/*
 * lindex.h - model-internal: hash indexes in the request arena over lists a
 * client sizes (entity types, attributes, sub-attributes), so that finding
 * duplicates and matching a patch against an entity take linear time.
 * Comparing each with each was quadratic: a body with 60,000 types or a
 * merge of 30,000 attributes into 40,000 held a worker for seconds.
 */
#ifndef CORAINE_MODEL_LINDEX_H
#define CORAINE_MODEL_LINDEX_H

#include <string.h>

#include "model.h"

static inline size_t lindex_cap(size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)                 /* load at most 1/2 */
        cap *= 2;
    return cap;
}

/* ---- a set of interned pointers */

typedef struct ptrset {
    const void **slot;
    size_t       mask;
} ptrset_t;

static inline void ptrset_init(ptrset_t *s, arena_t *a, size_t n)
{
    size_t cap = lindex_cap(n);
    s->slot = arena_calloc(a, cap * sizeof *s->slot);
    s->mask = cap - 1;
}

/* Adds p (not NULL); false when it was there already. */
static inline bool ptrset_add(ptrset_t *s, const void *p)
{
    for (size_t i = (size_t)cr_hash_ptr(p) & s->mask;; i = (i + 1) & s->mask) {
        if (s->slot[i] == p)
            return false;
        if (!s->slot[i]) {
            s->slot[i] = p;
            return true;
        }
    }
}

/* ---- attribute instances by (name, datasetId): indexes into the caller's
 * array. The hash takes "@none" as no datasetId, so callers whose equality
 * does so too find what they look for; the caller compares candidates.
 * Lists of at most ATTRMAP_SCAN entries get no index (slot NULL): scanning
 * them costs less than hashing, and the common entity stays as fast. */

#define ATTRMAP_SCAN 16

typedef struct attrmap {
    uint32_t *slot;                     /* index + 1; 0 = empty; NULL: scan the list */
    size_t    mask;
} attrmap_t;

static inline void attrmap_init(attrmap_t *m, arena_t *a, size_t n)
{
    size_t cap = lindex_cap(n);
    m->slot = n > ATTRMAP_SCAN ? arena_calloc(a, cap * sizeof *m->slot) : NULL;
    m->mask = cap - 1;
}

static inline size_t attrmap_home(const attrmap_t *m, const char *name, const char *ds)
{
    uint64_t h = cr_hash_ptr(name);
    if (ds && strcmp(ds, "@none") != 0)
        h ^= cr_hash(ds, strlen(ds));
    return (size_t)h & m->mask;
}

static inline void attrmap_put(attrmap_t *m, const char *name, const char *ds, size_t index)
{
    if (!m->slot)
        return;
    size_t i = attrmap_home(m, name, ds);
    while (m->slot[i])
        i = (i + 1) & m->mask;
    m->slot[i] = (uint32_t)index + 1;
}

/* Runs the body with idx set to the index of each candidate for (name, ds)
 * among the first n entries of the list: every one with that key is among
 * them, in the order they were put (without an index, all n are). */
#define attrmap_foreach(m, name, ds, n, idx)                                                   \
    for (size_t idx##_s = (m)->slot ? attrmap_home((m), (name), (ds)) : 0, idx;                 \
         (m)->slot ? ((m)->slot[idx##_s] && ((idx = (m)->slot[idx##_s] - 1), 1))               \
                   : (idx##_s < (n) && ((idx = idx##_s), 1));                                  \
         idx##_s = (m)->slot ? (idx##_s + 1) & (m)->mask : idx##_s + 1)

#endif
