/*
 * tenant.c - one corDB tenant: the slot array, its three indexes (ids, types,
 * geo), compaction, and the candidate walk that queries, foreach and purge
 * share.
 *
 * Slots are in creation order and slot numbers are never reused: a deleted
 * entity leaves a tombstone (cur = NULL) so that the type index, which stores
 * slot numbers, needs no update on delete. When more than half of the slots
 * are dead, compaction slides the live ones down (keeping their order) and
 * rebuilds the id map and the type index from them (the geo index, which has
 * no stale entries, is renumbered in place); that costs O(live) and happens
 * at most once per `live` deletions, so deletes stay O(1) amortized.
 *
 * Nothing here locks: cordb.c holds the tenant lock around every call.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cordb.h"

enum { SCAN_ALL = 0, SCAN_VEC, SCAN_TYPES, SCAN_NONE };

static const char *tenant_key_of(const void *ud, uint32_t v)
{
    const cdb_tenant_t *t = ud;

    return t->slots[v].cur->id;
}

cdb_tenant_t *cdb_tenant_new(const char *name, bool prefer_writers)
{
    cdb_tenant_t        *t;
    pthread_rwlockattr_t attr;
    int                  rc;

    t = cr_xcalloc(1, sizeof(*t));
    t->name = cr_xstrdup(name);

    if (pthread_rwlockattr_init(&attr) != 0)
        goto fail;
    if (prefer_writers)
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    rc = pthread_rwlock_init(&t->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0)
        goto fail;

    cdb_idmap_init(&t->ids, tenant_key_of, t);
    cdb_typeidx_init(&t->types);
    cdb_attridx_init(&t->attrs);
    cdb_geoidx_init(&t->geo);
    cdb_objs_init(&t->objs);
    pthread_mutex_init(&t->oidx_mu, NULL);
    t->stream = store_stream_new();
    return t;

fail:
    free(t->name);
    free(t);
    return NULL;
}

void cdb_tenant_free(cdb_tenant_t *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n_slots; i++)
        if (t->slots[i].cur)
            entity_unref(t->slots[i].cur);
    free(t->slots);
    cdb_idmap_free(&t->ids);
    cdb_typeidx_free(&t->types);
    cdb_attridx_free(&t->attrs);
    cdb_geoidx_free(&t->geo);
    cdb_objs_free(&t->objs);
    cdb_oidx_drop_all(t);
    free(t->dirty);
    pthread_mutex_destroy(&t->oidx_mu);
    store_stream_free(t->stream);
    pthread_rwlock_destroy(&t->lock);
    free(t->name);
    free(t);
}

/* The entity tables only: the tenant's stored objects (t->objs) are content
 * of their own, kept; objects.c gives their table back when the last goes. */
void cdb_tenant_release(cdb_tenant_t *t)
{
    if (t->n_live)
        return;
    free(t->slots);
    t->slots     = NULL;
    t->n_slots   = 0;
    t->cap_slots = 0;
    cdb_idmap_free(&t->ids);
    cdb_idmap_init(&t->ids, tenant_key_of, t);
    cdb_typeidx_free(&t->types);
    cdb_typeidx_init(&t->types);
    cdb_attridx_free(&t->attrs);
    cdb_geoidx_free(&t->geo);
    cdb_geoidx_init(&t->geo);
    cdb_oidx_drop_all(t);       /* they hold the deleted entities */
    t->compactions++;           /* paused scans start over (and find nothing) */
    t->releases++;
}

uint32_t cdb_tenant_find(const cdb_tenant_t *t, const char *id)
{
    return cdb_idmap_find(&t->ids, id, cdb_hash_key(id, strlen(id)));
}

/* -------------------------------------------------------------- writes */

static bool tenant_has_type(const cr_entity_t *e, const char *type)
{
    for (uint16_t i = 0; i < e->n_types; i++)
        if (e->types[i] == type)
            return true;
    return false;
}

bool cdb_tenant_reserve_update(cdb_tenant_t *t, const cr_entity_t *old, const cr_entity_t *e)
{
    for (uint16_t i = 0; i < e->n_types; i++) {
        if (old && tenant_has_type(old, e->types[i]))
            continue;
        if (!cdb_typeidx_reserve(&t->types, e->types[i]))
            return false;
    }
    return cdb_attridx_reserve(&t->attrs, old, e) && cdb_geoidx_reserve(&t->geo, old, e);
}

bool cdb_tenant_reserve(cdb_tenant_t *t, const cr_entity_t *e)
{
    if (t->n_slots == t->cap_slots) {
        uint32_t    cap;
        cdb_slot_t *ns;

        if (t->cap_slots >= CDB_NONE - 1)
            return false;
        cap = t->cap_slots < 16 ? 16 : t->cap_slots + t->cap_slots / 2;
        if (cap >= CDB_NONE || cap < t->cap_slots)
            cap = CDB_NONE - 1;
        ns = cr_xreallocarray(t->slots, cap, sizeof(*ns));
        t->slots     = ns;
        t->cap_slots = cap;
    }
    if (!cdb_idmap_reserve(&t->ids, 1))
        return false;
    return cdb_tenant_reserve_update(t, NULL, e);
}

/* e (the tenant takes the reference) into the empty slot s and every index. */
static void tenant_put(cdb_tenant_t *t, uint32_t s, cr_entity_t *e)
{
    t->slots[s].cur = e;
    t->n_live++;
    cdb_oidx_touch(t, s);
    cdb_idmap_insert(&t->ids, cdb_hash_key(e->id, strlen(e->id)), s);
    for (uint16_t i = 0; i < e->n_types; i++)
        cdb_typeidx_add(&t->types, e->types[i], s);
    cdb_attridx_update(&t->attrs, NULL, e);
    if (t->geo.n) {
        cdb_geoidx_update(&t->geo, s, NULL, e);
        cdb_geoidx_maybe_regrid(&t->geo, t->slots, t->n_slots);
    }
}

void cdb_tenant_insert(cdb_tenant_t *t, cr_entity_t *e)
{
    tenant_put(t, t->n_slots++, e);
}

cr_entity_t *cdb_tenant_swap(cdb_tenant_t *t, uint32_t s, cr_entity_t *e)
{
    cr_entity_t *old = t->slots[s].cur;

    /* The id map needs nothing: the id is the same, the key is read through
     * the slot. Types the entity lost stay as stale entries. */
    t->slots[s].cur = e;
    cdb_oidx_touch(t, s);
    for (uint16_t i = 0; i < e->n_types; i++)
        if (!tenant_has_type(old, e->types[i]))
            cdb_typeidx_add(&t->types, e->types[i], s);
    cdb_attridx_update(&t->attrs, old, e);
    if (t->geo.n) {
        cdb_geoidx_update(&t->geo, s, old, e);
        cdb_geoidx_maybe_regrid(&t->geo, t->slots, t->n_slots);
    }
    return old;
}

void cdb_tenant_restore(cdb_tenant_t *t, uint32_t s, uint64_t epoch, cr_entity_t *e)
{
    if ((uint32_t)epoch == (uint32_t)t->compactions && s < t->n_slots && !t->slots[s].cur) {
        /* The tombstone is still there: the entity goes back to its place. */
        if (!cdb_idmap_reserve(&t->ids, 1) || !cdb_tenant_reserve_update(t, NULL, e))
            cr_oom("corDB index (undo)", sizeof(cdb_idmap_entry_t));
        tenant_put(t, s, e);
        return;
    }
    if (!cdb_tenant_reserve(t, e))
        cr_oom("corDB index (undo)", sizeof(cdb_slot_t));
    cdb_tenant_insert(t, e);
}

cr_entity_t *cdb_tenant_remove(cdb_tenant_t *t, uint32_t s)
{
    cr_entity_t *old = t->slots[s].cur;

    cdb_idmap_remove(&t->ids, cdb_hash_key(old->id, strlen(old->id)), s);
    cdb_attridx_update(&t->attrs, old, NULL);
    if (t->geo.n)
        cdb_geoidx_update(&t->geo, s, old, NULL);
    t->slots[s].cur = NULL;
    t->n_live--;
    cdb_oidx_touch(t, s);
    return old;
}

/* map: old slot -> new slot, for the geo index (NULL when it is empty). */
static void tenant_compact(cdb_tenant_t *t, uint32_t *map)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < t->n_slots; i++) {
        if (map)
            map[i] = n;
        if (t->slots[i].cur)
            t->slots[n++] = t->slots[i];
    }
    t->n_slots = n;
    if (map)
        cdb_geoidx_renumber(&t->geo, map);

    /* Rebuilding needs no memory: the id map holds exactly the live entities
     * already, and each type list has room for every live entity that has the
     * type (the invariant of cordb.h), so neither insert can run out. */
    cdb_idmap_clear(&t->ids);
    cdb_typeidx_clear(&t->types);
    for (uint32_t s = 0; s < n; s++) {
        cr_entity_t *e = t->slots[s].cur;

        cdb_idmap_insert(&t->ids, cdb_hash_key(e->id, strlen(e->id)), s);
        for (uint16_t i = 0; i < e->n_types; i++)
            cdb_typeidx_add(&t->types, e->types[i], s);
    }
    cdb_typeidx_trim(&t->types);

    if (t->cap_slots > 64 && n < t->cap_slots / 4) {
        /* Never realloc to 0 bytes: glibc frees the block and returns NULL. */
        uint32_t    cap = n < 8 ? 16 : n * 2;
        cdb_slot_t *ns  = realloc(t->slots, (size_t)cap * sizeof(*ns));

        if (ns) {
            t->slots     = ns;
            t->cap_slots = cap;
        }
    }
    cdb_oidx_drop_all(t);       /* slot numbers changed: rebuilt by the next ordered query */
    t->compactions++;
}

bool cdb_tenant_maybe_compact(cdb_tenant_t *t)
{
    uint32_t dead = t->n_slots - t->n_live;

    uint32_t *map = NULL;

    if (t->n_slots < CDB_COMPACT_MIN || dead * 2 <= t->n_slots)
        return false;
    /* The geo index keeps exact slot numbers: it needs the renumbering map.
     * Without memory for it, compaction waits (tombstones are only slower). */
    if (t->geo.n) {
        map = cr_xreallocarray(NULL, t->n_slots, sizeof(*map));
    }
    tenant_compact(t, map);
    if (map) {
        free(map);
        cdb_geoidx_maybe_regrid(&t->geo, t->slots, t->n_slots);
    }
    return true;
}

/* ---------------------------------------------------------------- scans */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

/* Sorts sv[0..n) and drops duplicates; returns the new length. */
static size_t scan_sort_unique(uint32_t *sv, size_t n)
{
    size_t k = 1;
    bool   sorted = true;

    if (n < 2)
        return n;
    for (size_t i = 1; i < n && sorted; i++)
        sorted = sv[i - 1] < sv[i];
    if (sorted)                 /* one cell, or cells in slot order */
        return n;
    qsort(sv, n, sizeof(uint32_t), cmp_u32);
    for (size_t i = 1; i < n; i++)
        if (sv[i] != sv[k - 1])
            sv[k++] = sv[i];
    return k;
}

/* Room for n slot numbers in sc->sv (the arena, or malloc); false on OOM. */
static bool scan_vec_alloc(cdb_scan_t *sc, size_t n, arena_t *a)
{
    if (sc->sv_owned)
        free(sc->sv);
    sc->sv_owned = false;
    if (a) {
        sc->sv = arena_alloc(a, (n ? n : 1) * sizeof(uint32_t));
        return true;
    }
    sc->sv       = cr_xreallocarray(NULL, n ? n : 1, sizeof(uint32_t));
    sc->sv_owned = true;
    return true;
}

/* ids[0..n) (or, with sel, the ids of the n selectors) -> sorted slots. */
static void scan_by_ids(cdb_scan_t *sc, const char *const *ids, const entity_selector_t *sel,
                        size_t n_ids, arena_t *a)
{
    const cdb_tenant_t *t = sc->t;
    size_t              n = 0;

    if (!scan_vec_alloc(sc, n_ids, a))
        return;             /* no memory: the full scan is slower but right */
    for (size_t i = 0; i < n_ids; i++) {
        const char *id = sel ? sel[i].id : ids[i];
        uint32_t    s;

        if (!id)
            continue;
        s = cdb_tenant_find(t, id);
        if (s != CDB_NONE)
            sc->sv[n++] = s;
    }
    sc->n_sv = scan_sort_unique(sc->sv, n);
    sc->pos  = 0;
    sc->mode = SCAN_VEC;
}

/* The list for an expanded type name, whether or not the caller interned it. */
static const cdb_tlist_t *scan_type_list(const cdb_tenant_t *t, const char *type)
{
    const cdb_tlist_t *l = cdb_typeidx_get(&t->types, type);
    const char        *it;

    if (l || !type)
        return l;
    it = intern_find(type, strlen(type));
    return it && it != type ? cdb_typeidx_get(&t->types, it) : NULL;
}

static void scan_by_types(cdb_scan_t *sc, const char *const *types, size_t n)
{
    sc->n_lists = 0;
    for (size_t i = 0; i < n; i++) {
        const cdb_tlist_t *l = scan_type_list(sc->t, types[i]);
        bool               dup = false;

        if (!l || !l->n)
            continue;
        for (size_t j = 0; j < sc->n_lists; j++)
            dup = dup || sc->lists[j] == l;
        if (dup)
            continue;
        sc->at[sc->n_lists]      = 0;
        sc->lists[sc->n_lists++] = l;
    }
    sc->mode = sc->n_lists ? SCAN_TYPES : SCAN_NONE;
}

/* A bounded geo-query reads the grid cells around its box instead, when the
 * cells promise at most half the candidates of the path chosen so far (the
 * type lists, or every slot): the candidates are copied, sorted into slot
 * order and de-duplicated, then walked like ids. */
static void scan_try_geo(cdb_scan_t *sc, const geoq_t *geo, arena_t *a)
{
    const cdb_tenant_t  *t    = sc->t;
    const char          *prop = geoq_property(geo);
    const cdb_geogrid_t *g;
    double               box[4];
    size_t               other = t->n_slots, est, n;
    uint32_t            *sv;

    if (sc->mode == SCAN_NONE || !prop || !geoq_bbox(geo, box) ||
        !(box[0] <= box[2] && box[1] <= box[3]))
        return;
    g = cdb_geoidx_get(&t->geo, prop);
    if (!g) {
        /* Every GeoProperty name of every entity has a grid unless there
         * were too many names: no grid, no entity with this GeoProperty. */
        if (!t->geo.overflow)
            sc->mode = SCAN_NONE;
        return;
    }
    if (sc->mode == SCAN_TYPES) {
        other = 0;
        for (size_t i = 0; i < sc->n_lists; i++)
            other += sc->lists[i]->n;
    }
    est = cdb_geogrid_count(g, box);
    if (!est) {
        sc->mode = SCAN_NONE;
        return;
    }
    if (est > other / 2)
        return;

    if (a) {
        sv = arena_alloc(a, est * sizeof(uint32_t));
    } else {
        sv = cr_xreallocarray(NULL, est ? est : 1, sizeof(uint32_t));
        sc->sv_owned = true;
    }
    n = cdb_geogrid_collect(g, box, sv);
    sc->sv   = sv;
    sc->n_sv = scan_sort_unique(sv, n);
    sc->pos  = 0;
    sc->mode = SCAN_VEC;
    atomic_fetch_add_explicit((_Atomic uint64_t *)&t->geo_scans, 1, memory_order_relaxed);
}

/* Several selectors (ORed): the id index when every selector names an id, the
 * type lists of all of them when every selector has a plain type list; else
 * false (the other paths decide). */
static bool scan_by_selectors(cdb_scan_t *sc, const entity_filter_t *f, arena_t *a)
{
    const char *all[CDB_SCAN_MAX_TYPES];
    size_t      n_all = 0;
    bool        ids = true;

    for (size_t i = 0; i < f->n_sel && ids; i++)
        ids = f->sel[i].id != NULL;
    if (ids) {
        scan_by_ids(sc, NULL, f->sel, f->n_sel, a);
        return true;
    }
    for (size_t i = 0; i < f->n_sel; i++) {
        const char *const *types;
        size_t             n = f->sel[i].types ? typesel_types(f->sel[i].types, &types) : 0;

        if (!n || n_all + n > CDB_SCAN_MAX_TYPES)
            return false;
        memcpy(all + n_all, types, n * sizeof(*types));
        n_all += n;
    }
    scan_by_types(sc, all, n_all);
    sc->sel_types = true;
    if (f->geo)
        scan_try_geo(sc, f->geo, a);
    return true;
}

void cdb_scan_begin(cdb_scan_t *sc, const cdb_tenant_t *t, const entity_filter_t *f,
                    arena_t *a)
{
    const char *const *types = NULL;
    size_t             n_types;

    memset(sc, 0, offsetof(cdb_scan_t, lists));
    sc->t       = t;
    sc->f       = f;
    sc->a       = a;
    sc->mode    = SCAN_ALL;
    sc->n_lists = 0;
    sc->last_ct = INT64_MIN;
    if (!f)
        return;

    if (f->ids && f->n_ids) {
        scan_by_ids(sc, f->ids, NULL, f->n_ids, a);
        return;
    }
    if (f->n_sel && scan_by_selectors(sc, f, a))
        return;
    if (f->types) {
        n_types = typesel_types(f->types, &types);
        if (n_types && n_types <= CDB_SCAN_MAX_TYPES)
            scan_by_types(sc, types, n_types);
    }
    if (f->geo)
        scan_try_geo(sc, f->geo, a);
}

size_t cdb_scan_estimate(const cdb_scan_t *sc)
{
    size_t n = 0;

    switch (sc->mode) {
    case SCAN_VEC:
        return sc->n_sv;
    case SCAN_TYPES:
        for (size_t i = 0; i < sc->n_lists; i++)
            n += sc->lists[i] ? sc->lists[i]->n : 0;
        return n;
    case SCAN_NONE:
        return 0;
    default:
        return sc->t->n_live;
    }
}

/* Candidates from ids or the geo index are spread over memory: fetch the
 * slot SCAN_AHEAD positions ahead, and the first lines of the entity (header,
 * attributes, first values) half as far ahead, so that the cache misses of
 * consecutive candidates overlap instead of adding up. */
#define SCAN_AHEAD 16
static inline void scan_prefetch(const cdb_scan_t *sc)
{
    const cdb_tenant_t *t = sc->t;

    if (sc->pos + SCAN_AHEAD < sc->n_sv)
        __builtin_prefetch(&t->slots[sc->sv[sc->pos + SCAN_AHEAD]]);
    if (sc->pos + SCAN_AHEAD / 2 < sc->n_sv) {
        const char *e = (const char *)t->slots[sc->sv[sc->pos + SCAN_AHEAD / 2]].cur;

        if (e) {
            __builtin_prefetch(e);
            __builtin_prefetch(e + 64);
            __builtin_prefetch(e + 128);
            __builtin_prefetch(e + 192);
        }
    }
}

cr_entity_t *cdb_scan_next(cdb_scan_t *sc, uint32_t *slot)
{
    const cdb_tenant_t *t = sc->t;

    switch (sc->mode) {
    case SCAN_ALL:
        while (sc->pos < t->n_slots) {
            uint32_t s = sc->pos++;

            if (t->slots[s].cur) {
                if (slot)
                    *slot = s;
                return t->slots[s].cur;
            }
        }
        return NULL;

    case SCAN_VEC:
        while (sc->pos < sc->n_sv) {
            uint32_t s = sc->sv[sc->pos++];

            scan_prefetch(sc);

            if (t->slots[s].cur) {      /* purge may have removed it meanwhile */
                if (slot)
                    *slot = s;
                return t->slots[s].cur;
            }
        }
        return NULL;

    case SCAN_TYPES:
        for (;;) {
            uint32_t s = CDB_NONE;

            /* k-way merge: the smallest head, then advance every list at it. */
            for (size_t i = 0; i < sc->n_lists; i++)
                if (sc->at[i] < sc->lists[i]->n && sc->lists[i]->v[sc->at[i]] < s)
                    s = sc->lists[i]->v[sc->at[i]];
            if (s == CDB_NONE)
                return NULL;
            for (size_t i = 0; i < sc->n_lists; i++)
                if (sc->at[i] < sc->lists[i]->n && sc->lists[i]->v[sc->at[i]] == s)
                    sc->at[i]++;
            if (s < t->n_slots && t->slots[s].cur) {
                if (slot)
                    *slot = s;
                return t->slots[s].cur;
            }
        }

    default:
        return NULL;
    }
}

void cdb_scan_end(cdb_scan_t *sc)
{
    if (sc->sv_owned)
        free(sc->sv);
    sc->sv       = NULL;
    sc->sv_owned = false;
}

/* ------------------------------------------------------------ chunks */

/* The createdAt of what slot v holds, or INT64_MAX for a tombstone (see
 * scan_first_after). */
static inline const cr_entity_t *scan_at(const cdb_tenant_t *t, uint32_t v)
{
    return v < t->n_slots ? t->slots[v].cur : NULL;
}

/* The first k in [0, n) whose entity was created after `ct`, where v(k) gives
 * the slot of position k (v NULL: k itself). Positions holding tombstones are
 * skipped to the right: the live ones ascend in createdAt (cordb.h). */
static uint32_t scan_first_after(const cdb_tenant_t *t, const uint32_t *v, uint32_t n, int64_t ct)
{
    uint32_t lo = 0, hi = n;

    while (lo < hi) {
        uint32_t           mid = lo + (hi - lo) / 2, j = mid;
        const cr_entity_t *e   = NULL;

        while (j < hi && !(e = scan_at(t, v ? v[j] : j)))
            j++;
        if (j == hi || e->created_at > ct)
            hi = mid;
        else
            lo = j + 1;
    }
    return lo;
}

/* The slot of the last candidate scan_next returned (CDB_NONE: none yet),
 * from the positions (the walk stores nothing per candidate for this). */
static uint32_t scan_last_slot(const cdb_scan_t *sc)
{
    uint32_t s = CDB_NONE;

    switch (sc->mode) {
    case SCAN_ALL:
        return sc->pos ? sc->pos - 1 : CDB_NONE;
    case SCAN_VEC:
        return sc->pos ? sc->sv[sc->pos - 1] : CDB_NONE;
    case SCAN_TYPES:
        /* The merge is ascending and advanced every list past the last slot
         * it returned: that slot is the largest entry behind the positions. */
        for (size_t i = 0; i < sc->n_lists; i++)
            if (sc->at[i] && (s == CDB_NONE || sc->lists[i]->v[sc->at[i] - 1] > s))
                s = sc->lists[i]->v[sc->at[i] - 1];
        return s;
    default:
        return CDB_NONE;
    }
}

void cdb_scan_pause(cdb_scan_t *sc)
{
    uint32_t           s = scan_last_slot(sc);
    const cr_entity_t *e = s == CDB_NONE ? NULL : scan_at(sc->t, s);

    /* A tombstone there (a purge removed it): the resume point stays. */
    if (e)
        sc->last_ct = e->created_at;
    sc->epoch = sc->t->compactions;
}

void cdb_scan_resume(cdb_scan_t *sc)
{
    const cdb_tenant_t *t = sc->t;

    if (sc->mode == SCAN_NONE)
        return;
    if (t->compactions != sc->epoch) {
        /* Slots were renumbered (compaction) or released: choose the path
         * again and go on after the last candidate, by createdAt. */
        int64_t ct = sc->last_ct;

        cdb_scan_end(sc);
        cdb_scan_begin(sc, t, sc->f, sc->a);
        sc->last_ct = ct;
        if (ct == INT64_MIN)
            return;
        if (sc->mode == SCAN_ALL)
            sc->pos = scan_first_after(t, NULL, t->n_slots, ct);
        else if (sc->mode == SCAN_VEC)
            sc->pos = scan_first_after(t, sc->sv, (uint32_t)sc->n_sv, ct);
    }
    if (sc->mode == SCAN_TYPES) {
        /* The type table may have moved (a new type): fetch the lists again. */
        const char *const *types = NULL;
        const entity_filter_t *f = sc->f;
        const char  *all[CDB_SCAN_MAX_TYPES];
        size_t       n = 0;

        if (sc->sel_types) {
            for (size_t i = 0; i < f->n_sel; i++) {
                size_t k = typesel_types(f->sel[i].types, &types);

                memcpy(all + n, types, k * sizeof(*types));
                n += k;
            }
            types = all;
        } else {
            n = typesel_types(f->types, &types);
        }
        scan_by_types(sc, types, n);
        if (sc->mode == SCAN_TYPES && sc->last_ct != INT64_MIN)
            for (size_t i = 0; i < sc->n_lists; i++)
                sc->at[i] = scan_first_after(t, sc->lists[i]->v, sc->lists[i]->n, sc->last_ct);
    }
}
