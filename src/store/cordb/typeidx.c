/*
 * typeidx.c - corDB's type index: expanded entity type -> the slots of the
 * entities of that type, ascending (= creation order).
 *
 * The table is keyed by the interned type pointer (open addressing, linear
 * probing; types are few, a few hundred at most, and are never removed before
 * a compaction rebuild). Each list is a growable uint32_t array: 4 bytes per
 * (entity, type) plus growth slack (x1.5).
 *
 * Losing a type leaves a stale entry (the scan re-checks the type), so the
 * only list operation is "add": a new entity's slot is the largest, so that is
 * an append; a type gained by an existing entity is a binary search (already
 * there, maybe stale: nothing to do) and a memmove to keep the order. Type
 * changes of existing entities are rare, so the O(n) move is acceptable
 * (about 0.2 ms for a million entries); compaction drops stale entries.
 */
#include <stdlib.h>
#include <string.h>

#include "cordb.h"

#define TYPEIDX_MIN_CAP  16u
#define TLIST_MIN_CAP    4u

void cdb_typeidx_init(cdb_typeidx_t *ti)
{
    ti->t   = NULL;
    ti->cap = 0;
    ti->n   = 0;
}

void cdb_typeidx_free(cdb_typeidx_t *ti)
{
    for (uint32_t i = 0; i < ti->cap; i++)
        free(ti->t[i].v);
    free(ti->t);
    cdb_typeidx_init(ti);
}

static cdb_tlist_t *typeidx_bucket(const cdb_typeidx_t *ti, const char *type)
{
    uint32_t mask = ti->cap - 1;
    uint32_t i    = (uint32_t)cr_hash_ptr(type) & mask;

    while (ti->t[i].type && ti->t[i].type != type)
        i = (i + 1) & mask;
    return &ti->t[i];
}

const cdb_tlist_t *cdb_typeidx_get(const cdb_typeidx_t *ti, const char *type)
{
    cdb_tlist_t *l;

    if (!ti->n || !type)
        return NULL;
    l = typeidx_bucket(ti, type);
    return l->type ? l : NULL;
}

static bool typeidx_grow(cdb_typeidx_t *ti)
{
    uint32_t     cap = ti->cap ? ti->cap * 2 : TYPEIDX_MIN_CAP;
    cdb_typeidx_t nt = { .cap = cap, .n = ti->n };

    if (cap > (1u << 30))
        return false;
    nt.t = cr_xcalloc(cap, sizeof(*nt.t));
    for (uint32_t i = 0; i < ti->cap; i++)
        if (ti->t[i].type)
            *typeidx_bucket(&nt, ti->t[i].type) = ti->t[i];
    free(ti->t);
    *ti = nt;
    return true;
}

bool cdb_typeidx_reserve(cdb_typeidx_t *ti, const char *type)
{
    cdb_tlist_t *l;
    uint32_t     cap;
    uint32_t    *nv;

    if (!ti->cap || (ti->n + 1) * 4 > ti->cap * 3)
        if (!typeidx_grow(ti))
            return false;

    l = typeidx_bucket(ti, type);
    if (!l->type) {
        l->type = type;
        ti->n++;
    }
    if (l->n < l->cap)
        return true;

    if (l->cap >= UINT32_MAX / 2)
        return false;
    cap = l->cap < TLIST_MIN_CAP ? TLIST_MIN_CAP : l->cap + l->cap / 2;
    nv  = cr_xrealloc(l->v, (size_t)cap * sizeof(*nv));
    l->v   = nv;
    l->cap = cap;
    return true;
}

void cdb_typeidx_add(cdb_typeidx_t *ti, const char *type, uint32_t slot)
{
    cdb_tlist_t *l = typeidx_bucket(ti, type);
    uint32_t     lo, hi, mid;

    if (!l->n || l->v[l->n - 1] < slot) {
        l->v[l->n++] = slot;
        return;
    }

    lo = 0;
    hi = l->n;
    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (l->v[mid] < slot)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (l->v[lo] == slot)
        return;
    memmove(&l->v[lo + 1], &l->v[lo], (size_t)(l->n - lo) * sizeof(uint32_t));
    l->v[lo] = slot;
    l->n++;
}

void cdb_typeidx_clear(cdb_typeidx_t *ti)
{
    for (uint32_t i = 0; i < ti->cap; i++)
        ti->t[i].n = 0;
}

void cdb_typeidx_trim(cdb_typeidx_t *ti)
{
    for (uint32_t i = 0; i < ti->cap; i++) {
        cdb_tlist_t *l = &ti->t[i];

        if (l->type && !l->n) {
            free(l->v);
            l->v   = NULL;
            l->cap = 0;
        } else if (l->type && l->cap > 64 && l->n < l->cap / 4) {
            l->v   = cr_xrealloc(l->v, (size_t)l->n * 2 * sizeof(*l->v));
            l->cap = l->n * 2;
        }
    }
}

size_t cdb_typeidx_bytes(const cdb_typeidx_t *ti, size_t *entries)
{
    size_t bytes = (size_t)ti->cap * sizeof(cdb_tlist_t);
    size_t n     = 0;

    for (uint32_t i = 0; i < ti->cap; i++) {
        bytes += (size_t)ti->t[i].cap * sizeof(uint32_t);
        n     += ti->t[i].n;
    }
    if (entries)
        *entries = n;
    return bytes;
}
