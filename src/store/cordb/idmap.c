/*
 * idmap.c - corDB's string -> slot hash table (entity ids, tenant names).
 *
 * Open addressing, linear probing, power-of-two capacity, load factor at most
 * 3/4, backward-shift deletion (so no tombstones and probe sequences stay
 * short under churn). An entry is 8 bytes: 32 bits of the key's hash and the
 * value. Keys are not stored: the owner passes key_of(), which returns the key
 * of a value (for entity ids: slots[v].cur->id), and it is called only when the
 * hash bits match, i.e. about once per successful lookup.
 *
 * The bucket is taken from the stored hash bits, so growing never re-reads a
 * key. Growing is incremental: the doubled table is allocated zeroed and the
 * entries move over a few buckets per write (cdb_idmap_reserve), so no write
 * pays an O(n) rehash under the tenant lock; meanwhile a lookup reads the new
 * table, then the old one. Capacity is limited to 2^31 buckets (values are
 * 32-bit slot numbers).
 */
#include <stdlib.h>
#include <string.h>

#include "cordb.h"

#define IDMAP_MIN_CAP 16u
/* In a table an entry holds v + 1: 0 is an empty bucket (a table comes from
 * calloc, so a new one costs no pass over it) and IDMAP_TOMB, only in the
 * old table of a growth, a bucket whose entry has moved or gone (the probe
 * sequences through it stay whole). */
#define IDMAP_TOMB    UINT32_MAX
/* Old buckets moved per insert or remove: at 2x growth the old table is
 * drained after old_cap / 8 writes, long before the new one is 3/4 full
 * (3/4 old_cap inserts later). */
#define IDMAP_MIGRATE 8u

uint32_t cdb_hash_key(const char *key, size_t len)
{
    uint64_t h = cr_hash(key, len);
    return (uint32_t)(h ^ (h >> 32));
}

void cdb_idmap_init(cdb_idmap_t *m, cdb_key_fn key_of, const void *ud)
{
    memset(m, 0, sizeof(*m));
    m->key_of = key_of;
    m->ud     = ud;
}

void cdb_idmap_free(cdb_idmap_t *m)
{
    free(m->e);
    free(m->old);
    cdb_idmap_init(m, m->key_of, m->ud);
}

static void idmap_put(cdb_idmap_entry_t *e, uint32_t mask, uint32_t h, uint32_t stored)
{
    uint32_t i = h & mask;

    while (e[i].v != 0)
        i = (i + 1) & mask;
    e[i].h = h;
    e[i].v = stored;
}

/* Moves up to k buckets of the old table into the new one; frees the old
 * table when it is drained. Never allocates (the new table has room for n). */
static void idmap_migrate(cdb_idmap_t *m, uint32_t k)
{
    if (!m->old)
        return;
    for (; k && m->mig < m->old_cap; k--) {
        cdb_idmap_entry_t *o = &m->old[m->mig++];

        if (o->v != 0 && o->v != IDMAP_TOMB) {
            idmap_put(m->e, m->cap - 1, o->h, o->v);
            o->v = IDMAP_TOMB;
        }
    }
    if (m->mig == m->old_cap) {
        free(m->old);
        m->old     = NULL;
        m->old_cap = 0;
        m->mig     = 0;
    }
}

/* Growing allocates the larger table and moves the entries over a few at a
 * time (idmap_migrate, on each insert and remove) instead of all at once
 * under the tenant's write lock: the create that crosses a doubling costs a
 * calloc, not an O(n) rehash (the p99 spikes of a create stream). */
bool cdb_idmap_reserve(cdb_idmap_t *m, uint32_t more)
{
    uint64_t           need = (uint64_t)m->n + more;
    uint64_t           cap;
    cdb_idmap_entry_t *ne;

    if (need * 4 <= (uint64_t)m->cap * 3)
        return true;

    cap = m->cap ? m->cap : IDMAP_MIN_CAP;
    while (need * 4 > cap * 3)
        cap *= 2;
    if (cap > (1u << 31))
        return false;

    idmap_migrate(m, UINT32_MAX);           /* a growth still under way: finish it (rare) */
    ne = cr_xcalloc((size_t)cap, sizeof(*ne));
    if (!m->n) {
        free(m->e);
    } else {
        m->old     = m->e;
        m->old_cap = m->cap;
        m->mig     = 0;
    }
    m->e   = ne;
    m->cap = (uint32_t)cap;
    return true;
}

/* The value under key in table e (either table: the new one has no
 * tombstones, the old one's are skipped), or CDB_NONE. */
static uint32_t idmap_probe(const cdb_idmap_t *m, const cdb_idmap_entry_t *e, uint32_t cap,
                            const char *key, uint32_t h)
{
    uint32_t mask = cap - 1;

    for (uint32_t i = h & mask; e[i].v != 0; i = (i + 1) & mask)
        if (e[i].v != IDMAP_TOMB && e[i].h == h && strcmp(m->key_of(m->ud, e[i].v - 1), key) == 0)
            return e[i].v - 1;
    return CDB_NONE;
}

uint32_t cdb_idmap_find(const cdb_idmap_t *m, const char *key, uint32_t h)
{
    uint32_t v;

    if (!m->n)
        return CDB_NONE;
    v = idmap_probe(m, m->e, m->cap, key, h);
    if (v == CDB_NONE && m->old)
        v = idmap_probe(m, m->old, m->old_cap, key, h);
    return v;
}

void cdb_idmap_insert(cdb_idmap_t *m, uint32_t h, uint32_t v)
{
    idmap_put(m->e, m->cap - 1, h, v + 1);
    m->n++;
    idmap_migrate(m, IDMAP_MIGRATE);
}

/* Removes v from the old table (a tombstone: the old table is only drained). */
static bool idmap_remove_old(cdb_idmap_t *m, uint32_t h, uint32_t v)
{
    uint32_t mask = m->old_cap - 1;

    for (uint32_t i = h & mask; m->old[i].v != 0; i = (i + 1) & mask)
        if (m->old[i].v == v + 1) {
            m->old[i].v = IDMAP_TOMB;
            return true;
        }
    return false;
}

bool cdb_idmap_remove(cdb_idmap_t *m, uint32_t h, uint32_t v)
{
    uint32_t mask, i, j, home;

    if (!m->n)
        return false;
    mask = m->cap - 1;
    for (i = h & mask; m->e[i].v != v + 1; i = (i + 1) & mask)
        if (m->e[i].v == 0) {
            if (!m->old || !idmap_remove_old(m, h, v))
                return false;
            m->n--;
            idmap_migrate(m, IDMAP_MIGRATE);
            return true;
        }

    /* Backward shift: pull later members of the cluster into the hole when
     * their home bucket does not lie (cyclically) between the hole and them. */
    j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (m->e[j].v == 0)
            break;
        home = m->e[j].h & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->e[i] = m->e[j];
            i = j;
        }
    }
    m->e[i].h = 0;
    m->e[i].v = 0;
    m->n--;
    idmap_migrate(m, IDMAP_MIGRATE);
    return true;
}

void cdb_idmap_clear(cdb_idmap_t *m)
{
    free(m->old);
    m->old     = NULL;
    m->old_cap = 0;
    m->mig     = 0;
    if (m->e)
        memset(m->e, 0, (size_t)m->cap * sizeof(*m->e));
    m->n = 0;
}

size_t cdb_idmap_bytes(const cdb_idmap_t *m)
{
    return ((size_t)m->cap + m->old_cap) * sizeof(cdb_idmap_entry_t);
}
