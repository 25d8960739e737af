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
 * key. Capacity is limited to 2^31 buckets (values are 32-bit slot numbers).
 */
#include <stdlib.h>
#include <string.h>

#include "cordb.h"

#define IDMAP_MIN_CAP 16u

uint32_t cdb_hash_key(const char *key, size_t len)
{
    uint64_t h = cr_hash(key, len);
    return (uint32_t)(h ^ (h >> 32));
}

void cdb_idmap_init(cdb_idmap_t *m, cdb_key_fn key_of, const void *ud)
{
    m->e      = NULL;
    m->cap    = 0;
    m->n      = 0;
    m->key_of = key_of;
    m->ud     = ud;
}

void cdb_idmap_free(cdb_idmap_t *m)
{
    free(m->e);
    m->e   = NULL;
    m->cap = 0;
    m->n   = 0;
}

static void idmap_empty(cdb_idmap_entry_t *e, uint32_t cap)
{
    for (uint32_t i = 0; i < cap; i++) {
        e[i].h = 0;
        e[i].v = CDB_NONE;
    }
}

static void idmap_put(cdb_idmap_entry_t *e, uint32_t mask, uint32_t h, uint32_t v)
{
    uint32_t i = h & mask;

    while (e[i].v != CDB_NONE)
        i = (i + 1) & mask;
    e[i].h = h;
    e[i].v = v;
}

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

    ne = cr_xmalloc((size_t)cap * sizeof(*ne));
    idmap_empty(ne, (uint32_t)cap);
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->e[i].v != CDB_NONE)
            idmap_put(ne, (uint32_t)cap - 1, m->e[i].h, m->e[i].v);

    free(m->e);
    m->e   = ne;
    m->cap = (uint32_t)cap;
    return true;
}

uint32_t cdb_idmap_find(const cdb_idmap_t *m, const char *key, uint32_t h)
{
    uint32_t mask, i;

    if (!m->n)
        return CDB_NONE;
    mask = m->cap - 1;
    for (i = h & mask; m->e[i].v != CDB_NONE; i = (i + 1) & mask) {
        if (m->e[i].h == h && strcmp(m->key_of(m->ud, m->e[i].v), key) == 0)
            return m->e[i].v;
    }
    return CDB_NONE;
}

void cdb_idmap_insert(cdb_idmap_t *m, uint32_t h, uint32_t v)
{
    idmap_put(m->e, m->cap - 1, h, v);
    m->n++;
}

bool cdb_idmap_remove(cdb_idmap_t *m, uint32_t h, uint32_t v)
{
    uint32_t mask, i, j, home;

    if (!m->n)
        return false;
    mask = m->cap - 1;
    for (i = h & mask; m->e[i].v != v; i = (i + 1) & mask)
        if (m->e[i].v == CDB_NONE)
            return false;

    /* Backward shift: pull later members of the cluster into the hole when
     * their home bucket does not lie (cyclically) between the hole and them. */
    j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (m->e[j].v == CDB_NONE)
            break;
        home = m->e[j].h & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->e[i] = m->e[j];
            i = j;
        }
    }
    m->e[i].h = 0;
    m->e[i].v = CDB_NONE;
    m->n--;
    return true;
}

void cdb_idmap_clear(cdb_idmap_t *m)
{
    if (m->e)
        idmap_empty(m->e, m->cap);
    m->n = 0;
}

size_t cdb_idmap_bytes(const cdb_idmap_t *m)
{
    return (size_t)m->cap * sizeof(cdb_idmap_entry_t);
}
