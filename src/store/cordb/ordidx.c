/*
 * ordidx.c - ordered indexes of a corDB tenant: for an orderBy (4.23), every
 * live entity sorted by its terms, so that a page of an ordered query walks
 * the index from the start and stops after offset + limit filter matches
 * instead of visiting (and keying) every match (cordb.c's bounded heap).
 *
 * An index is built lazily by the first ordered query with its terms (its
 * signature: the terms' keys, directions, expanded paths, the collation), at
 * most CDB_OIDX_MAX per tenant (the least recently used goes). It is a sorted
 * array of (entity, slot) with each entry's keys computed once; it holds a
 * reference on every entity it lists, so its keys stay valid.
 *
 * Maintenance costs a write one branch while the tenant has no index: every
 * change of a slot's version (tenant.c: put, swap, remove, which create,
 * PATCH / replace / merge, delete, batch, purge, recovery and the undo of a
 * failed write all go through) appends the slot to the tenant's dirty log
 * when an index exists. An index remembers the log position it is exact at.
 * A reader then merges: an index entry counts only while the slot still holds
 * that entity (slots[slot].cur == e), and the slots dirtied since (their
 * current entities, keyed and sorted in the request's arena) are merged in.
 * When more than 32 + n/1024 slots are dirty, the reader that notices rebuilds
 * the index by one merge, O(n), and swaps it in: a query then merges at most
 * that many (a sort of them) and a fold costs about 80 instructions per entry,
 * so that an ordered query right after each write stays near a plain page
 * (doc/performance-history.md). Compaction and a release
 * (which renumber or drop the slots) make every index stale: rebuilt by the
 * next query. The log itself is trimmed by writers (cdb_oidx_log_full).
 *
 * Concurrency: the tenant lock orders writers (write lock) against readers
 * (read lock); an index is only read or changed under it. Readers find,
 * build and swap indexes under t->oidx_mu and hold a reference (refs) while
 * they walk one, so that another reader's eviction cannot free it under them.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cordb.h"

#define OIDX_FOLD_AT(n) (32 + (n) / 1024)    /* dirty slots that make a reader fold them in */

struct cdb_oidx {
    char            *sig;
    _Atomic uint32_t refs;          /* the tenant's table + readers walking it */
    uint64_t         epoch;         /* t->compactions it was built at */
    uint32_t         dpos;          /* t->dirty_n it is exact at */
    uint64_t         used;          /* LRU tick */
    size_t           n, m;          /* entries, keys per entry */
    cdb_oent_t      *ent;           /* sorted */
    order_key_t     *k;             /* ent[i]'s keys: k[i * m ...] */
    uint32_t        *pos;           /* slot -> entry + 1 (0: none) */
    uint32_t         npos;
};

/* ---------------------------------------------------------- signature */

static size_t sig_put(char *buf, size_t at, size_t cap, const char *s)
{
    size_t n = strlen(s);

    if (at + n + 1 < cap)
        memcpy(buf + at, s, n);
    at += n;
    if (at + 1 < cap)
        buf[at] = '\x1f';
    return at + 1;
}

/* The index identity of o, or NULL when o is not indexable (dist-*: the
 * order depends on orderFrom). */
static char *oidx_sig(const entity_order_t *o, arena_t *a)
{
    size_t cap = 256, at;
    char  *buf;

    for (size_t i = 0; i < o->n; i++)
        if (o->terms[i].dir == ORDER_DIST_ASC || o->terms[i].dir == ORDER_DIST_DESC)
            return NULL;
    for (;;) {
        char num[8];

        buf = arena_alloc(a, cap);
        at  = sig_put(buf, 0, cap, o->collation ? o->collation : "");
        for (size_t i = 0; i < o->n; i++) {
            const order_term_t *t = &o->terms[i];

            num[0] = (char)('0' + t->key);
            num[1] = (char)('0' + t->dir);
            num[2] = '\0';
            at = sig_put(buf, at, cap, num);
            if (t->key != ORDER_ATTR)
                continue;
            at = sig_put(buf, at, cap, t->attr);
            for (size_t s = 0; s < t->n_steps; s++) {
                num[0] = (char)('0' + t->step_kinds[s]);
                num[1] = '\0';
                at = sig_put(buf, at, cap, num);
                at = sig_put(buf, at, cap, t->step_names[s]);
            }
            at = sig_put(buf, at, cap, "[");
            for (size_t s = 0; s < t->n_keys; s++)
                at = sig_put(buf, at, cap, t->keys[s]);
        }
        if (at < cap) {
            buf[at] = '\0';
            return buf;
        }
        cap = at + 1;
    }
}

/* ---------------------------------------------------------- building */

typedef struct oidx_sort {
    const entity_order_t *o;
    size_t                m;
    const order_key_t    *k;
} oidx_sort_t;

static int oidx_ent_cmp(const void *pa, const void *pb, void *ud)
{
    const oidx_sort_t *s = ud;
    const cdb_oent_t  *a = pa, *b = pb;

    return order_keys_cmp(s->o, &s->k[a->ki * s->m], a->e, &s->k[b->ki * s->m], b->e);
}

/* The live entities of the slots in sv (ascending, unique) that are not
 * already listed by idx (NULL: none), keyed and sorted: *keys gets their keys
 * (arena); each entry's ki indexes them. ok (NULL: every entity) filters. */
size_t cdb_oidx_extra(const cdb_tenant_t *t, const cdb_oidx_t *idx, const entity_order_t *o,
                      const uint32_t *sv, size_t n_sv, bool (*ok)(const void *, const cr_entity_t *),
                      const void *ud, arena_t *a, cdb_oent_t **out, order_key_t **keys)
{
    size_t       m = o->n ? o->n : 1, n = 0;
    cdb_oent_t  *ent = arena_alloc(a, (n_sv ? n_sv : 1) * sizeof *ent);
    order_key_t *k   = arena_alloc(a, (n_sv ? n_sv : 1) * m * sizeof *k);
    oidx_sort_t  srt = {.o = o, .m = m, .k = k};

    for (size_t i = 0; i < n_sv; i++) {
        uint32_t     s = sv[i];
        cr_entity_t *e;

        if (s >= t->n_slots || !(e = t->slots[s].cur))
            continue;
        if (idx && s < idx->npos && idx->pos[s] && idx->ent[idx->pos[s] - 1].e == e)
            continue;               /* still listed (an undo put the same version back) */
        if (ok && !ok(ud, e))
            continue;
        order_keys(o, e, &k[n * m]);
        ent[n] = (cdb_oent_t){.e = e, .slot = s, .ki = (uint32_t)n};
        n++;
    }
    qsort_r(ent, n, sizeof *ent, oidx_ent_cmp, &srt);
    *out  = ent;
    *keys = k;
    return n;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* The slots dirtied since idx was exact, ascending and unique (arena). */
static size_t oidx_dirty(const cdb_tenant_t *t, const cdb_oidx_t *idx, arena_t *a, uint32_t **out)
{
    size_t    n = t->dirty_n - idx->dpos, u = 0;
    uint32_t *v = arena_alloc(a, (n ? n : 1) * sizeof *v);

    if (n)
        memcpy(v, t->dirty + idx->dpos, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_u32);
    for (size_t i = 0; i < n; i++)
        if (!u || v[i] != v[u - 1])
            v[u++] = v[i];
    *out = v;
    return u;
}

static void oidx_free(cdb_oidx_t *idx)
{
    for (size_t i = 0; i < idx->n; i++)
        entity_unref(idx->ent[i].e);
    free(idx->ent);
    free(idx->k);
    free(idx->pos);
    free(idx->sig);
    free(idx);
}

void cdb_oidx_unref(cdb_oidx_t *idx)
{
    if (idx && atomic_fetch_sub_explicit(&idx->refs, 1, memory_order_acq_rel) == 1)
        oidx_free(idx);
}

/* A new index: old's entries still current (NULL: none) merged with extra
 * (sorted, keys in xk). steal: nobody else holds old (its refs are 1, taken
 * under oidx_mu): its references move to the new index (no reference counting
 * per entry) and old is left empty. Read lock held. */
static cdb_oidx_t *oidx_merge(const cdb_tenant_t *t, cdb_oidx_t *old, const entity_order_t *o,
                              const char *sig, const cdb_oent_t *extra, const order_key_t *xk,
                              size_t n_extra, bool steal)
{
    size_t      m = o->n ? o->n : 1, cap = n_extra + (old ? old->n : 0), i = 0, j = 0, n = 0;
    cdb_oidx_t *idx = cr_xcalloc(1, sizeof *idx);

    idx->sig   = cr_xstrdup(sig);
    idx->m     = m;
    idx->epoch = t->compactions;
    idx->dpos  = t->dirty_n;
    idx->ent   = cr_xreallocarray(NULL, cap ? cap : 1, sizeof *idx->ent);
    idx->k     = cr_xreallocarray(NULL, (cap ? cap : 1) * m, sizeof *idx->k);
    idx->npos  = t->n_slots;
    idx->pos   = cr_xcalloc(t->n_slots ? t->n_slots : 1, sizeof *idx->pos);
    atomic_init(&idx->refs, 1);
    for (;;) {
        const cdb_oent_t  *pick;
        const order_key_t *pk;

        bool               moved = false;

        for (; old && i < old->n && t->slots[old->ent[i].slot].cur != old->ent[i].e; i++)
            if (steal)              /* changed or deleted since: its new version is in extra */
                entity_unref(old->ent[i].e);
        if (old && i < old->n &&
            (j == n_extra || order_keys_cmp(o, &old->k[i * m], old->ent[i].e,
                                            &xk[extra[j].ki * m], extra[j].e) < 0)) {
            pick  = &old->ent[i];
            pk    = &old->k[i * m];
            moved = steal;
            i++;
        } else if (j < n_extra) {
            pick = &extra[j];
            pk   = &xk[extra[j].ki * m];
            j++;
        } else {
            break;
        }
        idx->ent[n] = (cdb_oent_t){.e = pick->e, .slot = pick->slot, .ki = (uint32_t)n};
        memcpy(&idx->k[n * m], pk, m * sizeof *pk);
        if (!moved)
            entity_ref(pick->e);
        idx->pos[pick->slot] = (uint32_t)n + 1;
        n++;
    }
    idx->n = n;
    if (steal)
        old->n = 0;                 /* every reference moved or dropped */
    return idx;
}

/* ---------------------------------------------------------- readers */

cdb_oidx_t *cdb_oidx_get(cdb_tenant_t *t, const entity_order_t *o, arena_t *a)
{
    char       *sig;
    cdb_oidx_t *idx = NULL, *old;
    size_t      w = 0;

    if (!cr_config.order_indexes || !(sig = oidx_sig(o, a)))
        return NULL;
    pthread_mutex_lock(&t->oidx_mu);
    for (size_t i = 0; i < t->oidx_n; i++) {
        if (!strcmp(t->oidx[i]->sig, sig)) {
            idx = t->oidx[i];
            w   = i;
            break;
        }
        if (t->oidx[i]->used < t->oidx[w]->used)
            w = i;
    }
    if (!idx || idx->epoch != t->compactions || t->dirty_n - idx->dpos > OIDX_FOLD_AT(idx->n)) {
        cdb_oent_t  *extra;
        order_key_t *xk;
        uint32_t    *sv;
        size_t       n_sv, n_extra;

        old = idx && idx->epoch == t->compactions ? idx : NULL;
        if (old) {
            n_sv = oidx_dirty(t, old, a, &sv);
        } else {
            n_sv = 0;
            sv   = arena_alloc(a, (t->n_slots ? t->n_slots : 1) * sizeof *sv);
            for (uint32_t s = 0; s < t->n_slots; s++)
                if (t->slots[s].cur)
                    sv[n_sv++] = s;
        }
        n_extra = cdb_oidx_extra(t, old, o, sv, n_sv, NULL, NULL, a, &extra, &xk);
        old = oidx_merge(t, old, o, sig, extra, xk, n_extra,
                         old && atomic_load_explicit(&old->refs, memory_order_acquire) == 1);
        if (idx) {
            cdb_oidx_unref(t->oidx[w]);         /* replaced (readers walking it keep it) */
        } else if (t->oidx_n < (size_t)cr_config.order_indexes && t->oidx_n < CDB_OIDX_MAX) {
            w = t->oidx_n++;
        } else {
            cdb_oidx_unref(t->oidx[w]);         /* the least recently used goes */
        }
        t->oidx[w] = idx = old;
    }
    idx->used = ++t->oidx_tick;
    atomic_fetch_add_explicit(&idx->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&t->oidx_mu);
    return idx;
}

size_t cdb_oidx_dirty(const cdb_tenant_t *t, const cdb_oidx_t *idx, arena_t *a, uint32_t **out)
{
    return oidx_dirty(t, idx, a, out);
}

size_t cdb_oidx_len(const cdb_oidx_t *idx)
{
    return idx->n;
}

const cdb_oent_t *cdb_oidx_ent(const cdb_oidx_t *idx, size_t i, const order_key_t **keys)
{
    *keys = &idx->k[i * idx->m];
    return &idx->ent[i];
}

/* ---------------------------------------------------------- writers */

void cdb_oidx_touch_slow(cdb_tenant_t *t, uint32_t s)
{
    if (t->dirty_n == t->dirty_cap) {
        if (t->dirty_cap >= CDB_OIDX_DIRTY_MAX) {
            cdb_oidx_log_full(t);
        } else {
            t->dirty_cap = t->dirty_cap ? 2 * t->dirty_cap : 256;
            t->dirty     = cr_xreallocarray(t->dirty, t->dirty_cap, sizeof *t->dirty);
        }
    }
    t->dirty[t->dirty_n++] = s;
}

/* Write lock held (no reader walks an index): indexes not refreshed during
 * the last half of the log go, the log drops what every other index has
 * merged already. */
void cdb_oidx_log_full(cdb_tenant_t *t)
{
    uint32_t lo = t->dirty_n, k = 0;

    for (size_t i = 0; i < t->oidx_n; i++) {
        if (t->oidx[i]->dpos < t->dirty_n / 2) {
            cdb_oidx_unref(t->oidx[i]);
            continue;
        }
        if (t->oidx[i]->dpos < lo)
            lo = t->oidx[i]->dpos;
        t->oidx[k++] = t->oidx[i];
    }
    t->oidx_n = k;
    memmove(t->dirty, t->dirty + lo, (t->dirty_n - lo) * sizeof *t->dirty);
    t->dirty_n -= lo;
    for (size_t i = 0; i < t->oidx_n; i++)
        t->oidx[i]->dpos -= lo;
}

/* Write lock held, or the tenant going away. */
void cdb_oidx_drop_all(cdb_tenant_t *t)
{
    for (size_t i = 0; i < t->oidx_n; i++)
        cdb_oidx_unref(t->oidx[i]);
    t->oidx_n  = 0;
    t->dirty_n = 0;
}

size_t cdb_oidx_bytes(const cdb_tenant_t *t, size_t *n_indexes)
{
    size_t b = t->dirty_cap * sizeof *t->dirty;

    pthread_mutex_lock((pthread_mutex_t *)&t->oidx_mu);
    for (size_t i = 0; i < t->oidx_n; i++) {
        const cdb_oidx_t *x = t->oidx[i];
        b += sizeof *x + x->n * (sizeof *x->ent + x->m * sizeof *x->k) + x->npos * sizeof *x->pos;
    }
    if (n_indexes)
        *n_indexes = t->oidx_n;
    pthread_mutex_unlock((pthread_mutex_t *)&t->oidx_mu);
    return b;
}
