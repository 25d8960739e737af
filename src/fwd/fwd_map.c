/*
 * fwd_map.c - the EntityMaps of this broker (4.3.6.7, 4.5.25, 5.2.39, 5.14):
 * for a paged distributed query, the ids of the entities that matched it and
 * where each one lives (here, "@none", and/or the registrations whose
 * sources returned it), so that the following pages ask only the sources
 * that hold the entities of that page, for those ids alone (fwd.c,
 * fwd_query_map), instead of every source for offset + limit entities.
 *
 * Bounded and shared by the workers: at most --entityMapMax maps and
 * --entityMapEntries entity ids in all of them (all tenants); a new map that
 * does not fit evicts the expired ones, then those that expire soonest (a
 * query naming an evicted map makes a new one, as for an expired one:
 * 5.5.14). A map belongs to the tenant that made it. One mutex guards the
 * table; what a caller reads is copied into its arena under it.
 *
 * Positions are stable: an entity removed from a map (it no longer matches,
 * 4.3.6.7) keeps its slot, so the pages that follow it are not shifted; a
 * page is the slots [offset, offset + limit) without the removed ones.
 *
 * Kept over a restart (fwd_map_keeper_t, wired by main.c to a stored object
 * kind through ops/): a new map is written whole ({"t": expiry µs, "r":
 * registrations, "l": linked maps, "e": [[id, origin bits in hex], ...]}),
 * a new expiry rewrites it, and a map dropped (deleted, expired, evicted) is
 * deleted, always after g_lock is released (a store write never holds the
 * table). A removal (fwd_map_forget) is not written: after a restart the
 * entity is found gone again on its page and removed then. At start the
 * kept maps are read back (fwd_map_restore) within the same bounds.
 */
#include "fwd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct map {
    char      id[64];
    char     *tenant;           /* NULL: the default tenant */
    int64_t   expires_at;       /* µs */
    size_t    n, live;
    char    **ids;              /* n, into the same block */
    uint64_t *origins;          /* n; 0: removed */
    char    **reg_ids;          /* n_regs */
    char    **linked;           /* n_regs: the map's EntityMap at that source, or NULL */
    size_t    n_regs;
} map_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static map_t         **g_maps;
static size_t          g_n, g_cap;
static size_t          g_entries;   /* ids held in all maps */
static fwd_map_keeper_t g_keeper;   /* put NULL: nothing kept */

/* The maps dropped under g_lock whose kept copies are to be deleted once it is released (drops_flush). */
typedef struct drop {
    struct drop *next;
    char        *tenant;
    char         id[64];
} drop_t;
static drop_t *g_drops;

static bool same_tenant(const char *a, const char *b)
{
    if (!a || !*a) return !b || !*b;
    return b && !strcmp(a, b);
}

static void map_free(map_t *m)
{
    free(m->tenant);
    free(m);
}

/* Under g_lock: drops g_maps[i] (and, when maps are kept, notes its deletion). */
static void drop_at(size_t i)
{
    map_t *m = g_maps[i];
    drop_t *d = g_keeper.put ? calloc(1, sizeof *d) : NULL;
    if (d && (!m->tenant || (d->tenant = strdup(m->tenant)))) {
        memcpy(d->id, m->id, sizeof d->id);
        d->next = g_drops;
        g_drops = d;
    } else if (d) {
        free(d);
        LOG_W("fwd: the kept copy of entity map %s is not deleted (out of memory)", m->id);
    }
    g_entries -= m->n;
    map_free(m);
    g_maps[i] = g_maps[--g_n];
}

/* g_lock not held: the kept copies of the maps dropped are deleted. */
static void drops_flush(void)
{
    pthread_mutex_lock(&g_lock);
    drop_t          *d = g_drops;
    fwd_map_keeper_t k = g_keeper;
    g_drops = NULL;
    pthread_mutex_unlock(&g_lock);
    while (d) {
        drop_t *next = d->next;
        if (k.del) k.del(k.ud, d->tenant ? d->tenant : "", d->id);
        free(d->tenant);
        free(d);
        d = next;
    }
}

/* m as its kept text (see the head of this file), in a. */
static const char *map_text(const map_t *m, arena_t *a, size_t *len)
{
    sbuf_t        sb;
    json_writer_t w;
    char          hex[20];
    sb_init(&sb, a, 256 + m->n * 64);
    jw_init(&w, &sb);
    jw_object_begin(&w);
    jw_key(&w, "t");
    jw_int(&w, m->expires_at);
    jw_key(&w, "r");
    jw_array_begin(&w);
    for (size_t i = 0; i < m->n_regs; i++) jw_string(&w, m->reg_ids[i]);
    jw_array_end(&w);
    jw_key(&w, "l");
    jw_array_begin(&w);
    for (size_t i = 0; i < m->n_regs; i++)
        if (m->linked[i]) jw_string(&w, m->linked[i]);
        else jw_null(&w);
    jw_array_end(&w);
    jw_key(&w, "e");
    jw_array_begin(&w);
    for (size_t i = 0; i < m->n; i++) {
        jw_array_begin(&w);
        jw_string(&w, m->ids[i]);
        snprintf(hex, sizeof hex, "%llx", (unsigned long long)m->origins[i]);
        jw_string(&w, hex);
        jw_array_end(&w);
    }
    jw_array_end(&w);
    jw_object_end(&w);
    *len = sb.len;
    return sb.p;
}

/* g_lock not held: m (just made or changed; a copy taken under the lock) written whole. */
static fwd_map_keeper_t keeper(void)
{
    pthread_mutex_lock(&g_lock);
    fwd_map_keeper_t k = g_keeper;
    pthread_mutex_unlock(&g_lock);
    return k;
}

static void keep(const char *tenant, const map_t *m)
{
    fwd_map_keeper_t k = keeper();
    if (!k.put) return;
    arena_t *a = arena_new(4096 + m->n * 64);
    size_t   len;
    const char *text = map_text(m, a, &len);
    if (!k.put(k.ud, tenant && *tenant ? tenant : "", m->id, text, len))
        LOG_W("fwd: entity map %s is not kept over a restart (the store refused it)", m->id);
    arena_free(a);
}

void fwd_map_set_keeper(const fwd_map_keeper_t *k)
{
    pthread_mutex_lock(&g_lock);
    if (k) g_keeper = *k;
    else memset(&g_keeper, 0, sizeof g_keeper);
    pthread_mutex_unlock(&g_lock);
}

/* Under g_lock: the live map id of tenant, or NULL (an expired one is dropped). */
static map_t *find(const char *tenant, const char *id, int64_t now)
{
    for (size_t i = 0; i < g_n; i++) {
        map_t *m = g_maps[i];
        if (strcmp(m->id, id) || !same_tenant(tenant, m->tenant)) continue;
        if (m->expires_at <= now) {
            drop_at(i);
            return NULL;
        }
        return m;
    }
    return NULL;
}

/* Under g_lock: room for one more map of n entries (expired ones first, then the soonest to expire). */
static bool make_room(size_t n, int64_t now, size_t max_maps, size_t max_entries)
{
    for (size_t i = 0; i < g_n;)
        if (g_maps[i]->expires_at <= now) drop_at(i);
        else i++;
    while (g_n && (g_n + 1 > max_maps || g_entries + n > max_entries)) {
        size_t k = 0;
        for (size_t i = 1; i < g_n; i++)
            if (g_maps[i]->expires_at < g_maps[k]->expires_at) k = i;
        LOG_D("fwd: entity map %s evicted (%zu maps, %zu entries held)", g_maps[k]->id, g_n, g_entries);
        drop_at(k);
    }
    return g_n + 1 <= max_maps && g_entries + n <= max_entries;
}

/* A map of these members (copied), not yet in the table; NULL: out of memory or over the bounds. */
static map_t *map_build(const char *tenant, int64_t expires_at, const char *const *reg_ids, const char *const *linked,
                        size_t n_regs, const char *const *ids, const uint64_t *origins, size_t n)
{
    size_t max_maps = cr_config.entity_map_max > 0 ? (size_t)cr_config.entity_map_max : 0;
    size_t max_entries = cr_config.entity_map_entries > 0 ? (size_t)cr_config.entity_map_entries : 0;
    if (!max_maps || n > max_entries || n_regs > 63) return NULL;
    size_t bytes = sizeof(map_t) + n * (sizeof(char *) + sizeof(uint64_t)) + 2 * n_regs * sizeof(char *);
    for (size_t i = 0; i < n; i++) bytes += strlen(ids[i]) + 1;
    for (size_t i = 0; i < n_regs; i++) bytes += strlen(reg_ids[i]) + 1 + (linked && linked[i] ? strlen(linked[i]) + 1 : 0);
    map_t *m = calloc(1, bytes);
    if (!m) return NULL;
    if (tenant && *tenant && !(m->tenant = strdup(tenant))) {
        free(m);
        return NULL;
    }
    m->origins = (uint64_t *)(m + 1);
    m->ids = (char **)(m->origins + n);
    m->reg_ids = m->ids + n;
    m->linked = m->reg_ids + n_regs;
    char *s = (char *)(m->linked + n_regs);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(ids[i]) + 1;
        m->ids[i] = memcpy(s, ids[i], l);
        s += l;
        m->origins[i] = origins[i];
        if (origins[i]) m->live++;
    }
    for (size_t i = 0; i < n_regs; i++) {
        size_t l = strlen(reg_ids[i]) + 1;
        m->reg_ids[i] = memcpy(s, reg_ids[i], l);
        s += l;
        if (linked && linked[i]) {
            l = strlen(linked[i]) + 1;
            m->linked[i] = memcpy(s, linked[i], l);
            s += l;
        }
    }
    m->n = n;
    m->n_regs = n_regs;
    m->expires_at = expires_at;
    return m;
}

/* m into the table (room made for it); false: it does not fit (m freed). */
static bool insert(map_t *m)
{
    size_t max_maps = cr_config.entity_map_max > 0 ? (size_t)cr_config.entity_map_max : 0;
    size_t max_entries = cr_config.entity_map_entries > 0 ? (size_t)cr_config.entity_map_entries : 0;
    pthread_mutex_lock(&g_lock);
    bool ok = make_room(m->n, cr_now_us(), max_maps, max_entries);
    if (ok && g_n == g_cap) {
        size_t  nc = g_cap ? g_cap * 2 : 16;
        map_t **x = realloc(g_maps, nc * sizeof *x);
        if (x) {
            g_maps = x;
            g_cap = nc;
        } else
            ok = false;
    }
    if (ok) {
        g_maps[g_n++] = m;
        g_entries += m->n;
    }
    pthread_mutex_unlock(&g_lock);
    if (!ok) map_free(m);
    drops_flush();
    return ok;
}

bool fwd_map_put(const char *tenant, int64_t expires_at, const char *const *reg_ids, const char *const *linked,
                 size_t n_regs, const char *const *ids, const uint64_t *origins, size_t n, char id_out[64])
{
    map_t *m = map_build(tenant, expires_at, reg_ids, linked, n_regs, ids, origins, n);
    if (!m) return false;
    uint8_t rnd[12];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t x = (uint64_t)cr_mono_ns() ^ (uint64_t)(uintptr_t)m;
        memcpy(rnd, &x, 8);
        memcpy(rnd + 8, &x, 4);
    }
    int k = snprintf(m->id, sizeof m->id, "urn:ngsi-ld:EntityMap:");
    for (size_t i = 0; i < sizeof rnd; i++) k += snprintf(m->id + k, sizeof m->id - (size_t)k, "%02x", rnd[i]);

    memcpy(id_out, m->id, sizeof m->id);
    /* written before it is in the table: nothing changes it meanwhile, and a failed insert deletes it */
    keep(tenant, m);
    if (insert(m)) return true;
    fwd_map_keeper_t kp = keeper();
    if (kp.del) kp.del(kp.ud, tenant && *tenant ? tenant : "", id_out);
    return false;
}

bool fwd_map_restore(const char *tenant, const char *id, const char *text, size_t len)
{
    char     err[96];
    arena_t *a = arena_new(4096 + len * 2);
    json_t  *t = json_parse_copy(a, text, len, &(json_limits_t){0}, err, sizeof err);
    const json_t *ex = t ? json_get(t, "t") : NULL, *r = t ? json_get(t, "r") : NULL,
                 *l = t ? json_get(t, "l") : NULL, *e = t ? json_get(t, "e") : NULL;
    bool ok = ex && ex->type == JSON_NUMBER && json_is_array(r) && json_is_array(l) && json_is_array(e) &&
              r->len == l->len && r->len <= 63 && strlen(id) < 64;
    int64_t at = ok ? (int64_t)json_number(ex) : 0;
    if (ok && at <= cr_now_us()) ok = false;            /* expired meanwhile */
    map_t *m = NULL;
    if (ok) {
        const char **regs = arena_alloc(a, (r->len + 1) * sizeof *regs), **lk = arena_alloc(a, (r->len + 1) * sizeof *lk);
        const char **ids = arena_alloc(a, (e->len + 1) * sizeof *ids);
        uint64_t    *orig = arena_alloc(a, (e->len + 1) * sizeof *orig);
        size_t       nr = 0, n = 0;
        for (const json_t *x = r->child, *y = l->child; ok && x; x = x->next, y = y->next) {
            ok = json_is_string(x) && (json_is_string(y) || y->type == JSON_NULL);
            regs[nr] = ok ? x->str : NULL;
            lk[nr++] = ok && json_is_string(y) ? y->str : NULL;
        }
        for (const json_t *x = e->child; ok && x; x = x->next) {
            const json_t *xi = json_is_array(x) ? x->child : NULL, *xo = xi ? xi->next : NULL;
            char         *end = NULL;
            ok = xi && xo && json_is_string(xi) && json_is_string(xo);
            if (!ok) break;
            orig[n] = strtoull(xo->str, &end, 16);
            ok = end && !*end;
            ids[n++] = xi->str;
        }
        if (ok && (m = map_build(tenant, at, regs, lk, nr, ids, orig, n))) {
            memcpy(m->id, id, strlen(id) + 1);
            ok = insert(m);
        } else
            ok = false;
    }
    fwd_map_keeper_t k = keeper();
    if (!ok && k.del) k.del(k.ud, tenant ? tenant : "", id);
    arena_free(a);
    return ok;
}

/* Under g_lock: what every page of m carries (its registrations, linked maps, counts, expiry, id). */
static void page_head(const map_t *m, arena_t *a, fwd_map_page_t *pg)
{
    pg->reg_ids = arena_alloc(a, (m->n_regs + 1) * sizeof *pg->reg_ids);
    pg->linked = arena_alloc(a, (m->n_regs + 1) * sizeof *pg->linked);
    for (size_t i = 0; i < m->n_regs; i++) {
        pg->reg_ids[i] = arena_strdup(a, m->reg_ids[i]);
        pg->linked[i] = m->linked[i] ? arena_strdup(a, m->linked[i]) : NULL;
    }
    pg->n_regs = m->n_regs;
    pg->total = m->n;
    pg->live = m->live;
    pg->expires_at = m->expires_at;
    pg->id = arena_strdup(a, m->id);
}

bool fwd_map_page(const char *tenant, const char *id, size_t offset, size_t limit, arena_t *a, fwd_map_page_t *pg)
{
    memset(pg, 0, sizeof *pg);
    pthread_mutex_lock(&g_lock);
    map_t *m = find(tenant, id, cr_now_us());
    if (m) {
        size_t from = offset < m->n ? offset : m->n;
        size_t to = limit < m->n - from ? from + limit : m->n;
        pg->ids = arena_alloc(a, (to - from + 1) * sizeof *pg->ids);
        pg->origins = arena_alloc(a, (to - from + 1) * sizeof *pg->origins);
        for (size_t i = from; i < to; i++)
            if (m->origins[i]) {
                pg->ids[pg->n] = arena_strdup(a, m->ids[i]);
                pg->origins[pg->n++] = m->origins[i];
            }
        page_head(m, a, pg);
    }
    pthread_mutex_unlock(&g_lock);
    drops_flush();
    return m != NULL;
}

bool fwd_map_entity(const char *tenant, const char *id, const char *eid, arena_t *a, fwd_map_page_t *pg)
{
    memset(pg, 0, sizeof *pg);
    pthread_mutex_lock(&g_lock);
    map_t *m = find(tenant, id, cr_now_us());
    if (m) {
        pg->ids = arena_alloc(a, sizeof *pg->ids);
        pg->origins = arena_alloc(a, sizeof *pg->origins);
        for (size_t i = 0; i < m->n && !pg->n; i++)     /* a scan: a map has no index by id */
            if (m->origins[i] && !strcmp(m->ids[i], eid)) {
                pg->ids[0] = arena_strdup(a, m->ids[i]);
                pg->origins[pg->n++] = m->origins[i];
            }
        page_head(m, a, pg);
    }
    pthread_mutex_unlock(&g_lock);
    drops_flush();
    return m != NULL;
}

void fwd_map_forget(const char *tenant, const char *id, size_t from, size_t to, const char *const *ids, size_t n)
{
    if (!n) return;
    pthread_mutex_lock(&g_lock);
    map_t *m = find(tenant, id, cr_now_us());
    /* the ids are those of one page, in slot order: each found from the previous one on */
    if (m && to > m->n) to = m->n;
    for (size_t i = 0, j = from; m && i < n; i++)
        for (size_t x = j; x < to; x++)
            if (m->origins[x] && !strcmp(m->ids[x], ids[i])) {
                m->origins[x] = 0;
                m->live--;
                j = x + 1;
                break;
            }
    pthread_mutex_unlock(&g_lock);
    drops_flush();
}

bool fwd_map_set_expiry(const char *tenant, const char *id, int64_t at)
{
    pthread_mutex_lock(&g_lock);
    map_t *m = find(tenant, id, cr_now_us());
    map_t *copy = NULL;
    if (m) {
        m->expires_at = at;
        /* the text is made outside the lock: from a copy (the map may be dropped meanwhile) */
        if (g_keeper.put) copy = map_build(tenant, at, (const char *const *)m->reg_ids, (const char *const *)m->linked,
                                           m->n_regs, (const char *const *)m->ids, m->origins, m->n);
        if (copy) memcpy(copy->id, m->id, sizeof m->id);
    }
    pthread_mutex_unlock(&g_lock);
    drops_flush();
    if (copy) {
        keep(tenant, copy);
        map_free(copy);
    }
    return m != NULL;
}

bool fwd_map_delete(const char *tenant, const char *id)
{
    pthread_mutex_lock(&g_lock);
    map_t *m = find(tenant, id, cr_now_us());
    if (m)
        for (size_t i = 0; i < g_n; i++)
            if (g_maps[i] == m) {
                drop_at(i);
                break;
            }
    pthread_mutex_unlock(&g_lock);
    drops_flush();
    return m != NULL;
}

void fwd_map_stats(size_t *maps, size_t *entries)
{
    pthread_mutex_lock(&g_lock);
    *maps = g_n;
    *entries = g_entries;
    pthread_mutex_unlock(&g_lock);
}

void fwd_map_clear(void)
{
    pthread_mutex_lock(&g_lock);
    fwd_map_keeper_t k = g_keeper;              /* the kept copies stay (a restart reads them) */
    memset(&g_keeper, 0, sizeof g_keeper);
    while (g_n) drop_at(g_n - 1);
    g_keeper = k;
    free(g_maps);
    g_maps = NULL;
    g_cap = 0;
    pthread_mutex_unlock(&g_lock);
}
