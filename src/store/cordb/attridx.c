/*
 * attridx.c - corDB's attribute-name index: expanded attribute name -> the
 * number of live entities that have at least one instance of it.
 *
 * It answers attribute discovery (5.7.8 GET /attributes) from the index
 * instead of a scan of every entity. Keyed by the interned name pointer
 * (open addressing, linear probing, load <= 3/4); a name whose count falls to
 * 0 keeps its bucket (names are few, and the tenant's release frees them all).
 *
 * A write updates the counts of the names the new version has and the old one
 * has not, and the other way round. The common write (a PATCH of values)
 * keeps the names in the same order, which one pass of pointer comparisons
 * recognises before any counting.
 */
#include <stdlib.h>
#include <string.h>

#include "cordb.h"

#define ATTRIDX_MIN_CAP 16u

void cdb_attridx_init(cdb_attridx_t *ai)
{
    ai->e   = NULL;
    ai->cap = 0;
    ai->n   = 0;
}

void cdb_attridx_free(cdb_attridx_t *ai)
{
    free(ai->e);
    cdb_attridx_init(ai);
}

static cdb_aname_t *attridx_bucket(cdb_aname_t *e, uint32_t cap, const char *name)
{
    uint32_t i = (uint32_t)cr_hash_ptr(name) & (cap - 1);

    while (e[i].name && e[i].name != name)
        i = (i + 1) & (cap - 1);
    return &e[i];
}

/* Does e have `name` among its first `upto` attributes (upto: n_attrs = all)? */
static bool has_name(const cr_entity_t *e, const char *name, uint16_t upto)
{
    for (uint16_t i = 0; i < upto; i++)
        if (e->attrs[i].name == name)
            return true;
    return false;
}

/* The same names in the same order: nothing to count. */
static bool same_names(const cr_entity_t *old, const cr_entity_t *e)
{
    if (!old || !e || old->n_attrs != e->n_attrs)
        return false;
    for (uint16_t i = 0; i < e->n_attrs; i++)
        if (old->attrs[i].name != e->attrs[i].name)
            return false;
    return true;
}

bool cdb_attridx_reserve(cdb_attridx_t *ai, const cr_entity_t *old, const cr_entity_t *e)
{
    uint32_t     more = 0, cap;
    cdb_aname_t *ne;

    if (same_names(old, e))
        return true;
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const char *name = e->attrs[i].name;

        if (has_name(e, name, i) || (ai->cap && attridx_bucket(ai->e, ai->cap, name)->name))
            continue;
        more++;
    }
    if (!more || (uint64_t)(ai->n + more) * 4 <= (uint64_t)ai->cap * 3)
        return true;
    cap = ai->cap ? ai->cap : ATTRIDX_MIN_CAP;
    while ((uint64_t)(ai->n + more) * 4 > (uint64_t)cap * 3)
        cap *= 2;
    ne = cr_xcalloc(cap, sizeof(*ne));
    for (uint32_t i = 0; i < ai->cap; i++)
        if (ai->e[i].name)
            *attridx_bucket(ne, cap, ai->e[i].name) = ai->e[i];
    free(ai->e);
    ai->e   = ne;
    ai->cap = cap;
    return true;
}

void cdb_attridx_update(cdb_attridx_t *ai, const cr_entity_t *old, const cr_entity_t *e)
{
    if (same_names(old, e))
        return;
    if (e)
        for (uint16_t i = 0; i < e->n_attrs; i++) {
            const char  *name = e->attrs[i].name;
            cdb_aname_t *b;

            if (has_name(e, name, i) || (old && has_name(old, name, old->n_attrs)))
                continue;
            b = attridx_bucket(ai->e, ai->cap, name);     /* room reserved */
            if (!b->name) {
                b->name = name;
                ai->n++;
            }
            b->count++;
        }
    if (old)
        for (uint16_t i = 0; i < old->n_attrs; i++) {
            const char *name = old->attrs[i].name;

            if (has_name(old, name, i) || (e && has_name(e, name, e->n_attrs)))
                continue;
            attridx_bucket(ai->e, ai->cap, name)->count--;
        }
}

void cdb_attridx_each(const cdb_attridx_t *ai, void (*fn)(void *ud, const char *name), void *ud)
{
    for (uint32_t i = 0; i < ai->cap; i++)
        if (ai->e[i].name && ai->e[i].count)
            fn(ud, ai->e[i].name);
}

size_t cdb_attridx_bytes(const cdb_attridx_t *ai)
{
    return (size_t)ai->cap * sizeof(cdb_aname_t);
}
