/*
 * registry.c - every tenant's registrations, and the index that finds the
 * ones matching an entity specification (5.12) without scanning them all.
 *
 * Per tenant:
 *  - all: creation order (listings, pagination, the rare full scan);
 *  - by_type: entity type -> the registrations with an EntityInfo of it;
 *  - by_id: entity id -> the registrations with an EntityInfo of that id;
 *  - short lists: `patterned` (an EntityInfo with an idPattern), `any_id`
 *    (an EntityInfo with a type only: any id of the type), `typeless` (a
 *    RegistrationInfo without entities: attributes only), `proxied`
 *    (exclusive and redirect, for the conflict rules of 5.9.2.4).
 * A query with types reads by_type of each type; with ids only, by_id of
 * each id and the patterned and any_id lists; typeless always. Only a type
 * selection that is not a plain list, or a query with neither types nor ids,
 * reads `all`. Candidates are deduplicated by sorting on creation order,
 * which is also the order of the answer.
 *
 * One read-write lock over all tenants: writers (registration writes) are
 * rare and short; readers take references and let go.
 */
#include "reg_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct rlist {
    reg_t **v;
    size_t  n, cap;
} rlist_t;

/* A map keyed by interned string pointers (hash of the address). */
typedef struct mentry {
    const char    *key;
    rlist_t        l;
    struct mentry *next;
} mentry_t;

typedef struct rmap {
    mentry_t **b;
    size_t     nb, n;
} rmap_t;

typedef struct treg {
    const char  *tenant;              /* interned */
    struct treg *next;
    rlist_t      all, patterned, any_id, typeless, proxied;
    size_t       writers;             /* of all, those with an operation of REG_WRITE_OPS */
    rmap_t       by_type, by_id;
} treg_t;

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
static treg_t          *g_tenants;
static size_t           g_count, g_ntenants;
static int64_t          g_next_expiry = INT64_MAX;   /* the earliest expiresAt of any registration */

/* ------------------------------------------------------------ lists and maps */

static void list_add(rlist_t *l, reg_t *r)
{
    if (l->n && l->v[l->n - 1] == r) return;   /* one entry per registration */
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->v = cr_xreallocarray(l->v, l->cap, sizeof *l->v);
    }
    l->v[l->n++] = r;
}

static void list_del(rlist_t *l, const reg_t *r)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == r) {
            memmove(l->v + i, l->v + i + 1, (l->n - i - 1) * sizeof *l->v);
            l->n--;
            return;
        }
}

static size_t map_slot(const rmap_t *m, const char *key)
{
    uintptr_t k = (uintptr_t)key;
    return (size_t)(cr_hash(&k, sizeof k) & (m->nb - 1));
}

static mentry_t *map_find(const rmap_t *m, const char *key)
{
    if (!m->nb) return NULL;
    for (mentry_t *e = m->b[map_slot(m, key)]; e; e = e->next)
        if (e->key == key) return e;
    return NULL;
}

static void map_add(rmap_t *m, const char *key, reg_t *r)
{
    mentry_t *e = map_find(m, key);
    if (!e) {
        if (m->n >= m->nb) {
            size_t     nb = m->nb ? m->nb * 2 : 16;
            mentry_t **b = cr_xcalloc(nb, sizeof *b);
            for (size_t i = 0; i < m->nb; i++)
                for (mentry_t *x = m->b[i], *nx; x; x = nx) {
                    nx = x->next;
                    uintptr_t k = (uintptr_t)x->key;
                    size_t    s = (size_t)(cr_hash(&k, sizeof k) & (nb - 1));
                    x->next = b[s];
                    b[s] = x;
                }
            free(m->b);
            m->b = b;
            m->nb = nb;
        }
        e = cr_xcalloc(1, sizeof *e);
        e->key = key;
        size_t s = map_slot(m, key);
        e->next = m->b[s];
        m->b[s] = e;
        m->n++;
    }
    list_add(&e->l, r);
}

static void map_del(rmap_t *m, const char *key, const reg_t *r)
{
    if (!m->nb) return;
    mentry_t **pp = &m->b[map_slot(m, key)];
    for (mentry_t *e = *pp; e; pp = &e->next, e = *pp)
        if (e->key == key) {
            list_del(&e->l, r);
            if (!e->l.n) {
                *pp = e->next;
                free(e->l.v);
                free(e);
                m->n--;
            }
            return;
        }
}

static void map_free(rmap_t *m)
{
    for (size_t i = 0; i < m->nb; i++)
        for (mentry_t *e = m->b[i], *n; e; e = n) {
            n = e->next;
            free(e->l.v);
            free(e);
        }
    free(m->b);
}

/* ------------------------------------------------------------ tenants */

static treg_t *treg_get(const char *tenant, bool create)
{
    const char *t = intern_cstr(tenant ? tenant : "");
    for (treg_t *x = g_tenants; x; x = x->next)
        if (x->tenant == t) return x;
    if (!create) return NULL;
    treg_t *x = cr_xcalloc(1, sizeof *x);
    x->tenant = t;
    x->next = g_tenants;
    g_tenants = x;
    g_ntenants++;
    return x;
}

/* Adds r to (add) or removes it from every index of t. */
static void index_op(treg_t *t, reg_t *r, bool add)
{
    if (reg_ops(r) & REG_WRITE_OPS) add ? t->writers++ : t->writers--;
    for (size_t i = 0; i < r->n_info; i++) {
        const reg_info_t *in = &r->info[i];
        if (!in->n_entities) add ? list_add(&t->typeless, r) : list_del(&t->typeless, r);
        for (size_t j = 0; j < in->n_entities; j++) {
            const reg_entity_info_t *e = &in->entities[j];
            for (size_t k = 0; k < e->n_types; k++)
                add ? map_add(&t->by_type, e->types[k], r) : map_del(&t->by_type, e->types[k], r);
            if (e->id) add ? map_add(&t->by_id, e->id, r) : map_del(&t->by_id, e->id, r);
            else if (e->pattern) add ? list_add(&t->patterned, r) : list_del(&t->patterned, r);
            else add ? list_add(&t->any_id, r) : list_del(&t->any_id, r);
        }
    }
    if (r->mode == REG_EXCLUSIVE || r->mode == REG_REDIRECT) add ? list_add(&t->proxied, r) : list_del(&t->proxied, r);
    if (add && r->expires_at != CR_NO_TIME && r->expires_at < g_next_expiry) g_next_expiry = r->expires_at;
}

static reg_t *find_locked(const treg_t *t, const char *id)
{
    for (size_t i = 0; t && i < t->all.n; i++)
        if (!strcmp(t->all.v[i]->id, id)) return t->all.v[i];
    return NULL;
}

static bool expired(const reg_t *r, int64_t now)
{
    return now && r->expires_at != CR_NO_TIME && r->expires_at <= now;
}

/* ------------------------------------------------------------ writes */

static void (*g_listener)(const char *tenant);

void reg_set_listener(void (*fn)(const char *tenant))
{
    g_listener = fn;
}

static void changed(const char *tenant)
{
    if (g_listener) g_listener(tenant ? tenant : "");
}

bool reg_add(reg_t *r, problem_t *p)
{
    pthread_rwlock_wrlock(&g_lock);
    treg_t *t = treg_get(r->tenant, true);
    if (find_locked(t, r->id)) {
        pthread_rwlock_unlock(&g_lock);
        return problem_set(p, PB_ALREADY_EXISTS, "registration '%s' already exists", r->id);
    }
    reg_ref(r);
    list_add(&t->all, r);
    index_op(t, r, true);
    __atomic_add_fetch(&g_count, 1, __ATOMIC_RELAXED);
    pthread_rwlock_unlock(&g_lock);
    changed(r->tenant);
    return true;
}

static int by_order(const void *a, const void *b)
{
    uint64_t x = (*(reg_t *const *)a)->c->order, y = (*(reg_t *const *)b)->c->order;
    return x < y ? -1 : x > y;
}

bool reg_replace(reg_t *r, problem_t *p)
{
    pthread_rwlock_wrlock(&g_lock);
    treg_t *t = treg_get(r->tenant, false);
    reg_t  *old = find_locked(t, r->id);
    if (!old) {
        pthread_rwlock_unlock(&g_lock);
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no registration '%s'", r->id);
    }
    /* the new version keeps the counters (and so the place in creation order) */
    reg_counters_unref(r->c);
    r->c = old->c;
    atomic_fetch_add(&r->c->refs, 1);
    index_op(t, old, false);
    for (size_t i = 0; i < t->all.n; i++)
        if (t->all.v[i] == old) t->all.v[i] = r;
    reg_ref(r);
    index_op(t, r, true);
    pthread_rwlock_unlock(&g_lock);
    reg_unref(old);
    changed(r->tenant);
    return true;
}

bool reg_remove(const char *tenant, const char *id, problem_t *p)
{
    pthread_rwlock_wrlock(&g_lock);
    treg_t *t = treg_get(tenant, false);
    reg_t  *old = find_locked(t, id);
    if (!old) {
        pthread_rwlock_unlock(&g_lock);
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no registration '%s'", id);
    }
    index_op(t, old, false);
    list_del(&t->all, old);
    __atomic_sub_fetch(&g_count, 1, __ATOMIC_RELAXED);
    pthread_rwlock_unlock(&g_lock);
    reg_unref(old);
    changed(tenant);
    return true;
}

/* ------------------------------------------------------------ reads */

reg_t *reg_find(const char *tenant, const char *id, int64_t now)
{
    pthread_rwlock_rdlock(&g_lock);
    reg_t *r = find_locked(treg_get(tenant, false), id);
    if (r && expired(r, now)) r = NULL;
    if (r) reg_ref(r);
    pthread_rwlock_unlock(&g_lock);
    return r;
}

bool reg_tenant_known(const char *tenant)
{
    pthread_rwlock_rdlock(&g_lock);
    bool k = treg_get(tenant, false) != NULL;
    pthread_rwlock_unlock(&g_lock);
    return k;
}

bool reg_tenant_has(const char *tenant, bool writes)
{
    if (!reg_any()) return false;
    const char *t = tenant ? tenant : "";
    t = intern_find(t, strlen(t));          /* never interned: no registration names it */
    if (!t) return false;
    pthread_rwlock_rdlock(&g_lock);
    bool has = false;
    for (treg_t *x = g_tenants; x; x = x->next)
        if (x->tenant == t) {
            has = writes ? x->writers > 0 : x->all.n > 0;
            break;
        }
    pthread_rwlock_unlock(&g_lock);
    return has;
}

reg_t **reg_list(const char *tenant, size_t offset, size_t limit, int64_t now, arena_t *a, size_t *n,
                 size_t *total)
{
    pthread_rwlock_rdlock(&g_lock);
    treg_t *t = treg_get(tenant, false);
    size_t  all = t ? t->all.n : 0, k = 0, seen = 0;
    reg_t **v = arena_alloc(a, (limit < all ? limit : all) * sizeof *v + 1);
    for (size_t i = 0; i < all; i++) {
        reg_t *r = t->all.v[i];
        if (expired(r, now)) continue;
        if (seen++ < offset || k >= limit) continue;
        reg_ref(r);
        v[k++] = r;
    }
    pthread_rwlock_unlock(&g_lock);
    *n = k;
    *total = seen;
    return v;
}

size_t reg_expired(int64_t now, arena_t *a, const char ***tenants, const char ***ids)
{
    size_t k = 0, cap = 0;
    *tenants = *ids = NULL;
    pthread_rwlock_rdlock(&g_lock);
    if (now < g_next_expiry) {
        pthread_rwlock_unlock(&g_lock);
        return 0;
    }
    for (treg_t *t = g_tenants; t; t = t->next) cap += t->all.n;
    *tenants = arena_alloc(a, cap * sizeof **tenants + 1);
    *ids = arena_alloc(a, cap * sizeof **ids + 1);
    int64_t next = INT64_MAX;
    for (treg_t *t = g_tenants; t; t = t->next)
        for (size_t i = 0; i < t->all.n; i++) {
            reg_t *r = t->all.v[i];
            if (expired(r, now)) {
                (*tenants)[k] = t->tenant;
                (*ids)[k++] = arena_strdup(a, r->id);
            } else if (r->expires_at != CR_NO_TIME && r->expires_at < next) next = r->expires_at;
        }
    pthread_rwlock_unlock(&g_lock);
    pthread_rwlock_wrlock(&g_lock);
    g_next_expiry = next;   /* the expired ones are removed by the caller now */
    pthread_rwlock_unlock(&g_lock);
    return k;
}

/* ------------------------------------------------------------ matching (5.12) */

static bool type_match(const reg_entity_info_t *e, const typesel_t *ts)
{
    if (!ts) return true;
    cr_entity_t tmp = {.types = e->types, .n_types = (uint16_t)e->n_types};
    return typesel_match(ts, &tmp);
}

static bool entity_match(const reg_entity_info_t *e, const reg_query_t *q)
{
    if (!type_match(e, q->types)) return false;
    if (!e->id && !e->pattern) return true;
    if (!q->n_ids && !q->id_pattern) return true;
    for (size_t i = 0; i < q->n_ids; i++) {
        if (e->id && !strcmp(e->id, q->ids[i])) return true;
        if (e->pattern && filter_regex_match(e->pattern, q->ids[i], strlen(q->ids[i]))) return true;
    }
    if (q->id_pattern) {
        if (e->pattern) return true;   /* two patterns: possibly overlapping (5.12) */
        if (e->id && filter_regex_match(q->id_pattern, e->id, strlen(e->id))) return true;
    }
    return false;
}

static bool has_name(const char *const *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == name || !strcmp(v[i], name)) return true;
    return false;
}

bool reg_info_match(const reg_t *r, size_t i, const reg_query_t *q)
{
    const reg_info_t *in = &r->info[i];
    if (in->n_entities && (q->types || q->n_ids || q->id_pattern)) {
        bool any = false;
        for (size_t j = 0; j < in->n_entities && !any; j++) any = entity_match(&in->entities[j], q);
        if (!any) return false;
    }
    if (!q->n_attrs || !(in->n_props + in->n_rels)) return true;
    for (size_t k = 0; k < q->n_attrs; k++)
        if (has_name(in->props, in->n_props, q->attrs[k]) || has_name(in->rels, in->n_rels, q->attrs[k])) return true;
    return false;
}

static bool reg_selected(const reg_t *r, const reg_query_t *q, int64_t now, uint64_t *mask)
{
    if (expired(r, now)) return false;
    if (reg_temporal(r) != q->temporal) return false;
    if (q->modes && !(q->modes & (1u << r->mode))) return false;
    if (q->ops && !(q->ops & r->ops)) return false;
    for (size_t i = 0; r->alias && i < q->n_skip_aliases; i++)
        if (!strcmp(r->alias, q->skip_aliases[i])) return false;
    uint64_t m = 0;
    for (size_t i = 0; i < r->n_info; i++)
        if (reg_info_match(r, i, q)) m |= i < 64 ? (uint64_t)1 << i : 0;
    *mask = m;
    return m != 0;
}

typedef struct cand {
    reg_t **v;
    size_t  n, cap;
    arena_t *a;
} cand_t;

static void cand_add(cand_t *c, const rlist_t *l)
{
    if (!l || !l->n) return;
    if (c->n + l->n > c->cap) {
        size_t cap = (c->n + l->n) * 2;
        reg_t **v = arena_alloc(c->a, cap * sizeof *v);
        if (c->n) memcpy(v, c->v, c->n * sizeof *v);
        c->v = v;
        c->cap = cap;
    }
    memcpy(c->v + c->n, l->v, l->n * sizeof *l->v);
    c->n += l->n;
}

static int by_ptr_order(const void *a, const void *b)
{
    return by_order(a, b);
}

reg_t **reg_match(const char *tenant, const reg_query_t *q, int64_t now, arena_t *a, size_t *n, uint64_t **masks)
{
    cand_t c = {.a = a};
    pthread_rwlock_rdlock(&g_lock);
    treg_t *t = treg_get(tenant, false);
    if (t) {
        const char *const *types = NULL;
        size_t             nt = q->types ? typesel_types(q->types, &types) : 0;
        if (nt) {
            for (size_t i = 0; i < nt; i++) {
                mentry_t *e = map_find(&t->by_type, types[i]);
                cand_add(&c, e ? &e->l : NULL);
            }
            cand_add(&c, &t->typeless);
        } else if (!q->types && q->n_ids) {
            for (size_t i = 0; i < q->n_ids; i++) {
                mentry_t *e = map_find(&t->by_id, intern_find(q->ids[i], strlen(q->ids[i])));
                cand_add(&c, e ? &e->l : NULL);
            }
            cand_add(&c, &t->patterned);
            cand_add(&c, &t->any_id);
            cand_add(&c, &t->typeless);
        } else cand_add(&c, &t->all);
    }
    if (c.n > 1) qsort(c.v, c.n, sizeof *c.v, by_ptr_order);
    reg_t  **out = arena_alloc(a, c.n * sizeof *out + 1);
    uint64_t *mk = arena_alloc(a, c.n * sizeof *mk + 1);
    size_t   k = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (i && c.v[i] == c.v[i - 1]) continue;
        uint64_t m;
        if (!reg_selected(c.v[i], q, now, &m)) continue;
        reg_ref(c.v[i]);
        mk[k] = m;
        out[k++] = c.v[i];
    }
    pthread_rwlock_unlock(&g_lock);
    *n = k;
    if (masks) *masks = mk;
    return out;
}

/* ------------------------------------------------------------ conflicts (5.9.2.4, 4.3.6.3) */

static bool attrs_overlap(const reg_info_t *x, const reg_info_t *y)
{
    if (!(x->n_props + x->n_rels) || !(y->n_props + y->n_rels)) return true;
    for (size_t i = 0; i < x->n_props; i++)
        if (has_name(y->props, y->n_props, x->props[i]) || has_name(y->rels, y->n_rels, x->props[i])) return true;
    for (size_t i = 0; i < x->n_rels; i++)
        if (has_name(y->props, y->n_props, x->rels[i]) || has_name(y->rels, y->n_rels, x->rels[i])) return true;
    return false;
}

/* Can EntityInfo x and the exclusive (id-only) EntityInfo y name the same entity? */
static bool entity_overlap(const reg_entity_info_t *x, const reg_entity_info_t *y)
{
    bool types = false;
    for (size_t i = 0; i < x->n_types && !types; i++)
        for (size_t j = 0; j < y->n_types && !types; j++) types = x->types[i] == y->types[j];
    if (!types) return false;
    if (x->id) return !strcmp(x->id, y->id);
    if (x->pattern) return filter_regex_match(x->pattern, y->id, strlen(y->id));
    return true;
}

static bool info_overlap(const reg_info_t *x, const reg_info_t *y)
{
    if (!attrs_overlap(x, y)) return false;
    if (!x->n_entities || !y->n_entities) return true;
    for (size_t i = 0; i < x->n_entities; i++)
        for (size_t j = 0; j < y->n_entities; j++)
            if (entity_overlap(&x->entities[i], &y->entities[j])) return true;
    return false;
}

bool reg_conflict(const reg_t *r, problem_t *p)
{
    if (r->mode != REG_EXCLUSIVE && r->mode != REG_REDIRECT) return true;
    int64_t now = cr_now_us();
    bool    ok = true;
    pthread_rwlock_rdlock(&g_lock);
    treg_t *t = treg_get(r->tenant, false);
    for (size_t i = 0; t && ok && i < t->proxied.n; i++) {
        const reg_t *o = t->proxied.v[i];
        if (!strcmp(o->id, r->id) || expired(o, now)) continue;
        if (r->mode == REG_REDIRECT && o->mode == REG_REDIRECT) continue;   /* overlapping redirects: allowed */
        /* one side is exclusive: its EntityInfo carry ids (checked at build) */
        const reg_t *ex = o->mode == REG_EXCLUSIVE ? o : r, *other = ex == o ? r : o;
        for (size_t a = 0; ok && a < other->n_info; a++)
            for (size_t b = 0; ok && b < ex->n_info; b++)
                if (info_overlap(&other->info[a], &ex->info[b]))
                    ok = problem_set(p, PB_CONFLICT, "registration '%s' (%s) already covers these entities and "
                                     "attributes (5.9.2.4)", o->id, o->mode == REG_EXCLUSIVE ? "exclusive" : "redirect");
    }
    pthread_rwlock_unlock(&g_lock);
    return ok;
}

/* ------------------------------------------------------------ the rest */

void reg_shutdown(void)
{
    reg_csub_shutdown();
    pthread_rwlock_wrlock(&g_lock);
    for (treg_t *t = g_tenants, *n; t; t = n) {
        n = t->next;
        for (size_t i = 0; i < t->all.n; i++) reg_unref(t->all.v[i]);
        free(t->all.v);
        free(t->patterned.v);
        free(t->any_id.v);
        free(t->typeless.v);
        free(t->proxied.v);
        map_free(&t->by_type);
        map_free(&t->by_id);
        free(t);
    }
    g_tenants = NULL;
    g_count = g_ntenants = 0;
    g_next_expiry = INT64_MAX;
    pthread_rwlock_unlock(&g_lock);
}

bool reg_any(void)
{
    return __atomic_load_n(&g_count, __ATOMIC_RELAXED) != 0;
}

void reg_get_stats(reg_stats_t *st)
{
    pthread_rwlock_rdlock(&g_lock);
    st->registrations = g_count;
    st->tenants = g_ntenants;
    pthread_rwlock_unlock(&g_lock);
}
