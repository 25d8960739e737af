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

/* A set of an entity's attribute names (interned pointers), so that a
 * write of an entity with tens of thousands of attributes costs linear time,
 * not a comparison of every name with every other. Small entities use the
 * stack. */
#define NAMESET_STACK 64u

typedef struct {
    const char **slot;
    uint32_t     mask;
    const char  *local[NAMESET_STACK];
} nameset_t;

static void ns_init(nameset_t *s, uint32_t n)
{
    uint32_t cap = 8;
    while (cap < 2 * n) cap *= 2;
    s->slot = cap <= NAMESET_STACK ? s->local : cr_xmalloc(cap * sizeof *s->slot);
    memset(s->slot, 0, cap * sizeof *s->slot);
    s->mask = cap - 1;
}

static void ns_free(nameset_t *s)
{
    if (s->slot != s->local) free(s->slot);
}

/* Adds name; false when it was there already. */
static bool ns_add(nameset_t *s, const char *name)
{
    uint32_t i = (uint32_t)cr_hash_ptr(name) & s->mask;
    while (s->slot[i]) {
        if (s->slot[i] == name) return false;
        i = (i + 1) & s->mask;
    }
    s->slot[i] = name;
    return true;
}

static bool ns_has(const nameset_t *s, const char *name)
{
    uint32_t i = (uint32_t)cr_hash_ptr(name) & s->mask;
    while (s->slot[i]) {
        if (s->slot[i] == name) return true;
        i = (i + 1) & s->mask;
    }
    return false;
}

/* The set of e's names (e may be NULL: empty). */
static void ns_of(nameset_t *s, const cr_entity_t *e)
{
    ns_init(s, e ? e->n_attrs : 0);
    for (uint16_t i = 0; e && i < e->n_attrs; i++) ns_add(s, e->attrs[i].name);
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
    nameset_t    seen;

    if (same_names(old, e) || !e)
        return true;
    ns_init(&seen, e->n_attrs);
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const char *name = e->attrs[i].name;

        if (!ns_add(&seen, name) || (ai->cap && attridx_bucket(ai->e, ai->cap, name)->name))
            continue;                               /* another instance of it, or indexed already */
        more++;
    }
    ns_free(&seen);
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
    nameset_t olds, news, seen;

    if (same_names(old, e))
        return;
    ns_of(&olds, old);
    ns_of(&news, e);
    ns_init(&seen, e ? e->n_attrs : 0);
    for (uint16_t i = 0; e && i < e->n_attrs; i++) {
        const char  *name = e->attrs[i].name;
        cdb_aname_t *b;

        if (!ns_add(&seen, name) || ns_has(&olds, name))
            continue;                               /* another instance, or counted for old already */
        b = attridx_bucket(ai->e, ai->cap, name);   /* room reserved */
        if (!b->name) {
            b->name = name;
            ai->n++;
        }
        b->count++;
    }
    ns_free(&seen);
    ns_init(&seen, old ? old->n_attrs : 0);
    for (uint16_t i = 0; old && i < old->n_attrs; i++) {
        const char *name = old->attrs[i].name;

        if (!ns_add(&seen, name) || ns_has(&news, name))
            continue;
        attridx_bucket(ai->e, ai->cap, name)->count--;
    }
    ns_free(&seen);
    ns_free(&olds);
    ns_free(&news);
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
