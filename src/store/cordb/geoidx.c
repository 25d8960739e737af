/*
 * geoidx.c - corDB's geo index: per tenant and per GeoProperty name, a
 * uniform lon/lat grid from cell to the slots of the entities whose geometry
 * touches the cell, so that a bounded geo-query (near;maxDistance, within,
 * intersects, contains, equals, overlaps) reads the cells around its box
 * instead of every entity.
 *
 * Cells are squares of 2^-level degrees (level -3 .. 16: 8 degrees down to
 * about 1.7 m). A cell is an open-addressing bucket {key, slots[], n, cap}
 * keyed by its integer coordinates, holding ascending slot numbers; only
 * cells in use exist, so an empty ocean costs nothing. An entity is indexed by
 * the bbox of each instance of the GeoProperty (geo_bbox(), model.h): a point
 * is in one cell, a line or polygon in every cell its bbox touches, up to
 * CDB_GEO_MAX_CELLS; bigger geometries, and values without a usable bbox, go
 * to the grid's `large` list, which every query reads. Candidates are then
 * re-checked by filter_match(), so the index only has to be a superset.
 *
 * The level adapts: whenever a grid's entry count has doubled or halved since
 * the level was last chosen (and it holds at least GEO_ADAPT_MIN entries), the
 * mean cell occupancy is checked; below GEO_OCC_LOW the grid is rebuilt one
 * level coarser (memory: each cell costs a bucket and a small array), above
 * GEO_OCC_HIGH one level finer, kept only when that cuts the candidates a
 * one-cell query reads by a quarter (it does not for entities stacked on one
 * spot; after such a refusal the next finer try waits until the grid has
 * grown GEO_RETRY_FINER times). A rebuild reads every slot, so it is
 * incremental, as the id map's growth is (idmap.c): the new grid (`next`) is
 * filled GEO_MIGRATE slots per write, each write also applies its change to
 * `next` when its slot is already there, and queries read the old grid,
 * which stays whole, until the last slot is in; then the new one takes its
 * place (or is dropped, when finer did not help) and, while the occupancy is
 * still out of range in the same direction, the next level starts. Done at
 * once, a rebuild held the tenant's write lock for a pass over every entity
 * (test/perf/create_stall.py: the longest create). A compaction (slot numbers change) drops a rebuild
 * under way; the next write starts it again. Out of memory aborts (core.h);
 * a new grid that would pass the table's size limit is dropped and the old
 * one stays.
 *
 * Every write reserves room first (cdb_geoidx_reserve), then applies the
 * difference between the old and the new version (cdb_geoidx_update): cells
 * both versions touch are left alone, new ones get the slot, old ones lose it
 * (a cell left empty is deleted by backward shift). A geometry crossing the
 * antimeridian is evaluated cut there (model/geo_wrap.c), so its bbox spans
 * every longitude (and it goes to the large list).
 *
 * Nothing here locks: tenant.c runs under the tenant lock.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cordb.h"

#define CDB_GEO_FREE     UINT64_MAX
#define GEO_LEVEL_MIN    (-3)
#define GEO_LEVEL_MAX    16
#define GEO_LEVEL_START  7          /* 2^-7 = 0.0078 degrees, about 870 m */
#define GEO_ADAPT_MIN    1024
#define GEO_MIGRATE      8          /* slots moved to a rebuild per write */
#define GEO_RETRY_FINER  4          /* growth before a refused finer level is tried again */
#define GEO_OCC_LOW      8
#define GEO_OCC_HIGH     32         /* a step changes points' occupancy by <= 4x */
#define GEO_MAX_RECTS    8          /* instances per entity and name; more: large */
#define GEO_TABLE_MIN    16u
#define GEO_VEC_MIN      2u

/* ----------------------------------------------------------- slot vectors */

/* Position of slot in v (or where it would go). */
static uint32_t vec_find(const cdb_gcell_t *c, uint32_t slot)
{
    uint32_t lo = 0, hi = c->n;

    if (c->n && c->v[c->n - 1] < slot)
        return c->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (c->v[mid] < slot)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool vec_reserve(cdb_gcell_t *c)
{
    uint32_t  cap;
    uint32_t *nv;

    if (c->n < c->cap)
        return true;
    if (c->cap >= UINT32_MAX / 2)
        return false;
    cap = c->cap < GEO_VEC_MIN ? GEO_VEC_MIN : c->cap + (c->cap + 1) / 2;
    nv  = cr_xrealloc(c->v, (size_t)cap * sizeof(*nv));
    c->v   = nv;
    c->cap = cap;
    return true;
}

/* Adds slot (room reserved); false when it was there already. */
static bool vec_add(cdb_gcell_t *c, uint32_t slot)
{
    uint32_t i = vec_find(c, slot);

    if (i < c->n && c->v[i] == slot)
        return false;
    memmove(&c->v[i + 1], &c->v[i], (size_t)(c->n - i) * sizeof(uint32_t));
    c->v[i] = slot;
    c->n++;
    return true;
}

static bool vec_remove(cdb_gcell_t *c, uint32_t slot)
{
    uint32_t i = vec_find(c, slot);

    if (i >= c->n || c->v[i] != slot)
        return false;
    memmove(&c->v[i], &c->v[i + 1], (size_t)(c->n - i - 1) * sizeof(uint32_t));
    c->n--;
    return true;
}

/* ---------------------------------------------------------------- cells */

static inline uint64_t cell_key(uint32_t cx, uint32_t cy)
{
    return (uint64_t)cx << 32 | cy;
}

/* Keyed (cr_hash's per-process secret): cell keys come from coordinates a
 * client chooses, and a fixed mix would let it aim them at one bucket. */
static inline uint32_t cell_hash(uint64_t key)
{
    return (uint32_t)cr_hash_u64(key);
}

/* The cell column of a longitude (or row of a latitude shifted by `off`):
 * monotonic in its argument, so a box's cell range holds the cells of every
 * point inside it. */
static inline uint32_t cell_coord(const cdb_geogrid_t *g, double deg, double off)
{
    double c = floor((deg + off) * g->scale);
    double max = 2.0 * off * g->scale;

    if (!(c > 0.0))
        return 0;
    return c > max ? (uint32_t)max : (uint32_t)c;
}

static cdb_gcell_t *cell_bucket(const cdb_geogrid_t *g, uint64_t key)
{
    uint32_t mask = g->cap - 1;
    uint32_t i    = cell_hash(key) & mask;

    while (g->cells[i].key != CDB_GEO_FREE && g->cells[i].key != key)
        i = (i + 1) & mask;
    return &g->cells[i];
}

static const cdb_gcell_t *cell_get(const cdb_geogrid_t *g, uint64_t key)
{
    const cdb_gcell_t *c;

    if (!g->n_cells)
        return NULL;
    c = cell_bucket(g, key);
    return c->key == key ? c : NULL;
}

static bool table_grow(cdb_geogrid_t *g, uint32_t more)
{
    uint32_t     cap = g->cap ? g->cap : GEO_TABLE_MIN;
    cdb_gcell_t *old = g->cells;
    uint32_t     old_cap = g->cap;

    while ((uint64_t)(g->n_cells + more) * 4 > (uint64_t)cap * 3) {
        if (cap >= (1u << 30))
            return false;
        cap *= 2;
    }
    if (cap == g->cap)
        return true;
    g->cells = cr_xmalloc((size_t)cap * sizeof(*g->cells));
    for (uint32_t i = 0; i < cap; i++)
        g->cells[i] = (cdb_gcell_t){ .key = CDB_GEO_FREE };
    g->cap = cap;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i].key != CDB_GEO_FREE)
            *cell_bucket(g, old[i].key) = old[i];
    free(old);
    return true;
}

/* The cell `key`, created when missing, with room for one more slot. */
static cdb_gcell_t *cell_reserve(cdb_geogrid_t *g, uint64_t key)
{
    cdb_gcell_t *c;

    if (!g->cap || (uint64_t)(g->n_cells + 1) * 4 > (uint64_t)g->cap * 3)
        if (!table_grow(g, 1))
            return NULL;
    c = cell_bucket(g, key);
    if (c->key == CDB_GEO_FREE) {
        c->key = key;
        g->n_cells++;
    }
    return vec_reserve(c) ? c : NULL;
}

/* Deletes an emptied cell; backward shift keeps the probe chains whole. */
static void cell_delete(cdb_geogrid_t *g, cdb_gcell_t *c)
{
    uint32_t mask = g->cap - 1;
    uint32_t i    = (uint32_t)(c - g->cells), j = i;

    free(c->v);
    for (;;) {
        uint32_t home;

        j = (j + 1) & mask;
        if (g->cells[j].key == CDB_GEO_FREE)
            break;
        home = cell_hash(g->cells[j].key) & mask;
        /* j may move to i unless its home lies cyclically in (i, j]. */
        if ((i < j) ? (home > i && home <= j) : (home > i || home <= j))
            continue;
        g->cells[i] = g->cells[j];
        i = j;
    }
    g->cells[i] = (cdb_gcell_t){ .key = CDB_GEO_FREE };
    g->n_cells--;
}

/* ---------------------------------------------------------------- grids */

static void grid_init(cdb_geogrid_t *g, const char *prop, int level)
{
    memset(g, 0, sizeof(*g));
    g->prop  = prop;
    g->level = level;
    g->scale = ldexp(1.0, level);
}

static void grid_free(cdb_geogrid_t *g)
{
    for (uint32_t i = 0; i < g->cap; i++)
        if (g->cells[i].key != CDB_GEO_FREE)
            free(g->cells[i].v);
    free(g->cells);
    free(g->large.v);
    g->cells   = NULL;
    g->large.v = NULL;
}

/* Drops the rebuild under way, if any. */
static void next_drop(cdb_geogrid_t *g)
{
    if (!g->next)
        return;
    grid_free(g->next);
    free(g->next);
    g->next = NULL;
}

/* The rebuild would pass the cell table's limit: dropped, the old grid stays
 * (exact, only less well sized) until the next doubling or halving. */
static void next_give_up(cdb_geogrid_t *g)
{
    next_drop(g);
    g->checked_at = g->n_entries;
}

/* Where one entity's instances of g->prop go in g: up to GEO_MAX_RECTS cell
 * rectangles, and/or the large list. */
typedef struct geo_place {
    uint32_t x0[GEO_MAX_RECTS], y0[GEO_MAX_RECTS], x1[GEO_MAX_RECTS], y1[GEO_MAX_RECTS];
    uint32_t n;
    bool     large;
} geo_place_t;

/* A write computes the bbox of each version twice: for its reserve and for
 * its update (a PATCH of the location: four geo_bbox calls, two per Point;
 * one of other attributes skips both, same_geo below). The reserve records
 * them by value pointer; the update of the same
 * (old, e) pair, which comes right after it under the same lock, reads them
 * back, and every update forgets them. An update of another pair (a batch
 * reserves all, then updates each) computes them again. The versions are
 * frozen, so a value's bbox does not change while both are held. */
typedef enum { MEMO_OFF, MEMO_RECORD, MEMO_USE } memo_mode_t;

static bool place_bbox(cdb_geoidx_t *gi, memo_mode_t mode, const json_t *v, double box[4])
{
    if (mode == MEMO_USE)
        for (uint32_t i = 0; i < gi->memo_n; i++)
            if (gi->memo[i].v == v) {
                if (gi->memo[i].ok)
                    memcpy(box, gi->memo[i].box, sizeof(gi->memo[i].box));
                return gi->memo[i].ok;
            }
    bool ok = geo_bbox(v, box);
    if (mode == MEMO_RECORD && gi->memo_n < CDB_GEO_MEMO) {
        gi->memo[gi->memo_n].v  = v;
        gi->memo[gi->memo_n].ok = ok;
        if (ok)
            memcpy(gi->memo[gi->memo_n].box, box, sizeof(gi->memo[0].box));
        gi->memo_n++;
    }
    return ok;
}

static void grid_place(const cdb_geogrid_t *g, const cr_entity_t *e, geo_place_t *pl,
                       cdb_geoidx_t *gi, memo_mode_t mode)
{
    pl->n     = 0;
    pl->large = false;
    if (!e)
        return;
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        double           box[4];
        uint32_t         x0, y0, x1, y1;

        if (at->name != g->prop || at->kind != ATTR_GEOPROPERTY || !at->value)
            continue;
        if (!place_bbox(gi, mode, at->value, box) || pl->n == GEO_MAX_RECTS) {
            pl->large = true;       /* e.g. a GeometryCollection: geoquery.c still matches it */
            continue;
        }
        x0 = cell_coord(g, box[0], 180.0);
        y0 = cell_coord(g, box[1], 90.0);
        x1 = cell_coord(g, box[2], 180.0);
        y1 = cell_coord(g, box[3], 90.0);
        if ((uint64_t)(x1 - x0 + 1) * (y1 - y0 + 1) > CDB_GEO_MAX_CELLS) {
            pl->large = true;
            continue;
        }
        pl->x0[pl->n] = x0;
        pl->y0[pl->n] = y0;
        pl->x1[pl->n] = x1;
        pl->y1[pl->n] = y1;
        pl->n++;
    }
}

/* Whether both versions hold the same instances of g->prop (in order, equal
 * values): then they are placed alike and the write leaves the grid as it is
 * (a PATCH of other attributes compares one Point instead of placing it four
 * times and looking its cell up twice). */
static bool same_geo(const cdb_geogrid_t *g, const cr_entity_t *old, const cr_entity_t *e)
{
    uint16_t i = 0, j = 0;

    if (!old || !e)
        return false;
    for (;;) {
        while (i < old->n_attrs && (old->attrs[i].name != g->prop || old->attrs[i].kind != ATTR_GEOPROPERTY))
            i++;
        while (j < e->n_attrs && (e->attrs[j].name != g->prop || e->attrs[j].kind != ATTR_GEOPROPERTY))
            j++;
        if (i == old->n_attrs || j == e->n_attrs)
            return i == old->n_attrs && j == e->n_attrs;
        const json_t *a = old->attrs[i++].value, *b = e->attrs[j++].value;
        if (a != b && (!a || !b || !json_equal(a, b)))
            return false;
    }
}

static bool place_covers(const geo_place_t *pl, uint32_t cx, uint32_t cy)
{
    for (uint32_t r = 0; r < pl->n; r++)
        if (cx >= pl->x0[r] && cx <= pl->x1[r] && cy >= pl->y0[r] && cy <= pl->y1[r])
            return true;
    return false;
}

static bool place_empty(const geo_place_t *pl)
{
    return !pl->n && !pl->large;
}

/* Room for the cells of `to` that `from` does not cover. */
static bool grid_reserve(cdb_geogrid_t *g, const geo_place_t *from, const geo_place_t *to)
{
    for (uint32_t r = 0; r < to->n; r++)
        for (uint32_t cx = to->x0[r]; cx <= to->x1[r]; cx++)
            for (uint32_t cy = to->y0[r]; cy <= to->y1[r]; cy++)
                if (!place_covers(from, cx, cy) && !cell_reserve(g, cell_key(cx, cy)))
                    return false;
    if (to->large && !from->large && !vec_reserve(&g->large))
        return false;
    return true;
}

static void grid_add(cdb_geogrid_t *g, uint32_t slot, const geo_place_t *from,
                     const geo_place_t *to)
{
    for (uint32_t r = 0; r < to->n; r++)
        for (uint32_t cx = to->x0[r]; cx <= to->x1[r]; cx++)
            for (uint32_t cy = to->y0[r]; cy <= to->y1[r]; cy++) {
                cdb_gcell_t *c;

                if (place_covers(from, cx, cy))
                    continue;
                c = cell_bucket(g, cell_key(cx, cy));   /* reserved: it exists */
                if (vec_add(c, slot))
                    g->n_entries++;
            }
    if (to->large && !from->large)
        vec_add(&g->large, slot);
}

static void grid_remove(cdb_geogrid_t *g, uint32_t slot, const geo_place_t *from,
                        const geo_place_t *to)
{
    for (uint32_t r = 0; r < from->n; r++)
        for (uint32_t cx = from->x0[r]; cx <= from->x1[r]; cx++)
            for (uint32_t cy = from->y0[r]; cy <= from->y1[r]; cy++) {
                cdb_gcell_t *c;

                if (place_covers(to, cx, cy) || !g->n_cells)
                    continue;
                c = cell_bucket(g, cell_key(cx, cy));
                if (c->key == CDB_GEO_FREE || !vec_remove(c, slot))
                    continue;
                g->n_entries--;
                if (!c->n)
                    cell_delete(g, c);
            }
    if (from->large && !to->large)
        vec_remove(&g->large, slot);
}

/* ------------------------------------------------------------ the index */

void cdb_geoidx_init(cdb_geoidx_t *gi)
{
    memset(gi, 0, sizeof(*gi));
}

void cdb_geoidx_free(cdb_geoidx_t *gi)
{
    for (uint32_t i = 0; i < gi->n; i++) {
        next_drop(&gi->g[i]);
        grid_free(&gi->g[i]);
    }
    free(gi->g);
    cdb_geoidx_init(gi);
}

static cdb_geogrid_t *geoidx_find(const cdb_geoidx_t *gi, const char *prop)
{
    for (uint32_t i = 0; i < gi->n; i++)
        if (gi->g[i].prop == prop)
            return &gi->g[i];
    return NULL;
}

const cdb_geogrid_t *cdb_geoidx_get(const cdb_geoidx_t *gi, const char *prop)
{
    return prop ? geoidx_find(gi, prop) : NULL;
}

/* A grid for every GeoProperty name of e (or the overflow mark). */
static void geoidx_add_grids(cdb_geoidx_t *gi, const cr_entity_t *e)
{
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];

        if (at->kind != ATTR_GEOPROPERTY || geoidx_find(gi, at->name))
            continue;
        if (gi->n == CDB_GEO_MAX_PROPS) {
            gi->overflow = true;    /* this name is scanned, never indexed */
            continue;
        }
        if (gi->n == gi->cap) {
            uint32_t       cap = gi->cap ? gi->cap * 2 : 2;
            gi->g   = cr_xrealloc(gi->g, (size_t)cap * sizeof(*gi->g));
            gi->cap = cap;
        }
        grid_init(&gi->g[gi->n++], at->name, GEO_LEVEL_START);
    }
}

bool cdb_geoidx_reserve(cdb_geoidx_t *gi, const cr_entity_t *old, const cr_entity_t *e)
{
    geo_place_t from, to;

    gi->memo_old = old;
    gi->memo_e   = e;
    gi->memo_n   = 0;
    if (!e)
        return true;
    geoidx_add_grids(gi, e);
    for (uint32_t i = 0; i < gi->n; i++) {
        cdb_geogrid_t *g = &gi->g[i];

        if (same_geo(g, old, e))
            continue;
        grid_place(g, e, &to, gi, MEMO_RECORD);
        if (place_empty(&to))
            continue;
        grid_place(g, old, &from, gi, MEMO_RECORD);
        if (!grid_reserve(g, &from, &to))
            return false;
    }
    return true;
}

/* A write's change, for a slot already moved to the rebuild under way: its
 * room is taken here (the queries do not read this grid). */
static void next_update(cdb_geogrid_t *g, uint32_t slot, const cr_entity_t *old,
                        const cr_entity_t *e, cdb_geoidx_t *gi, memo_mode_t mode)
{
    cdb_geogrid_t *ng = g->next;
    geo_place_t    from, to;

    grid_place(ng, old, &from, gi, mode);  /* the bboxes the reserve recorded, if any */
    grid_place(ng, e, &to, gi, mode);
    if (place_empty(&from) && place_empty(&to))
        return;
    if (!grid_reserve(ng, &from, &to)) {
        next_give_up(g);
        return;
    }
    grid_add(ng, slot, &from, &to);
    grid_remove(ng, slot, &from, &to);
}

void cdb_geoidx_update(cdb_geoidx_t *gi, uint32_t slot, const cr_entity_t *old,
                       const cr_entity_t *e)
{
    geo_place_t from, to;
    memo_mode_t mode = gi->memo_n && gi->memo_old == old && gi->memo_e == e ? MEMO_USE : MEMO_OFF;

    for (uint32_t i = 0; i < gi->n; i++) {
        cdb_geogrid_t *g = &gi->g[i];

        if (same_geo(g, old, e))
            continue;
        grid_place(g, old, &from, gi, mode);
        grid_place(g, e, &to, gi, mode);
        if (!place_empty(&from) || !place_empty(&to)) {
            /* Adds first: a remove may delete cells (shifting buckets). */
            grid_add(g, slot, &from, &to);
            grid_remove(g, slot, &from, &to);
        }
        if (g->next && slot < g->next_pos)
            next_update(g, slot, old, e, gi, mode);
    }
    gi->memo_old = gi->memo_e = NULL;
    gi->memo_n   = 0;
}

void cdb_geoidx_renumber(cdb_geoidx_t *gi, const uint32_t *map)
{
    for (uint32_t i = 0; i < gi->n; i++) {
        cdb_geogrid_t *g = &gi->g[i];

        next_drop(g);               /* its slots are the old numbers: started again */
        for (uint32_t b = 0; b < g->cap; b++)
            if (g->cells[b].key != CDB_GEO_FREE)
                for (uint32_t k = 0; k < g->cells[b].n; k++)
                    g->cells[b].v[k] = map[g->cells[b].v[k]];
        for (uint32_t k = 0; k < g->large.n; k++)
            g->large.v[k] = map[g->large.v[k]];
    }
}

/* ------------------------------------------------------------ the level */

/* Candidates a one-cell query reads: the mean occupancy plus the large list. */
static double grid_cost(const cdb_geogrid_t *g)
{
    return (g->n_cells ? (double)g->n_entries / g->n_cells : 0.0) + g->large.n;
}

/* The level change g's occupancy asks for, in direction dir (0: either):
 * -1 coarser, 1 finer, 0 none. */
static int wanted_step(const cdb_geogrid_t *g, int dir)
{
    double occ = g->n_cells ? (double)g->n_entries / g->n_cells : 0.0;

    if (occ < GEO_OCC_LOW && g->level > GEO_LEVEL_MIN && dir <= 0)
        return -1;
    if (occ > GEO_OCC_HIGH && g->level < GEO_LEVEL_MAX && dir >= 0 &&
        (!g->refused_at || g->n_entries >= GEO_RETRY_FINER * g->refused_at))
        return 1;
    return 0;
}

/* Starts the rebuild of g one level coarser or finer (dir), empty. */
static void next_start(cdb_geogrid_t *g, int dir)
{
    cdb_geogrid_t *ng = cr_xmalloc(sizeof(*ng));

    grid_init(ng, g->prop, g->level + dir);
    if (!table_grow(ng, g->n_cells)) {
        free(ng);
        g->checked_at = g->n_entries;
        return;
    }
    g->next     = ng;
    g->next_pos = 0;
    g->next_dir = dir;
}

/* The rebuild has every slot: it replaces g, or is dropped when finer did not
 * help; then the next level in the same direction starts, if still asked for. */
static void next_finish(cdb_geogrid_t *g)
{
    cdb_geogrid_t *ng = g->next;
    int            dir = g->next_dir;

    if (dir > 0 && grid_cost(ng) > 0.75 * grid_cost(g)) {
        next_drop(g);               /* finer does not help (stacked entities) */
        g->refused_at = g->checked_at = g->n_entries;
        return;
    }
    g->next = NULL;
    grid_free(g);
    *g = *ng;                       /* refused_at 0: a level that helped */
    free(ng);
    if (wanted_step(g, dir) == dir)
        next_start(g, dir);
    else
        g->checked_at = g->n_entries;
}

/* Moves up to GEO_MIGRATE more slots into the rebuild under way. */
static void next_step(cdb_geogrid_t *g, const cdb_slot_t *slots, uint32_t n_slots)
{
    cdb_geogrid_t *ng   = g->next;
    geo_place_t    none = { .n = 0 }, to;

    for (uint32_t k = 0; k < GEO_MIGRATE && g->next_pos < n_slots; k++) {
        uint32_t s = g->next_pos++;

        if (!slots[s].cur)
            continue;
        grid_place(ng, slots[s].cur, &to, NULL, MEMO_OFF);
        if (place_empty(&to))
            continue;
        if (!grid_reserve(ng, &none, &to)) {
            next_give_up(g);
            return;
        }
        grid_add(ng, s, &none, &to);
    }
    if (g->next_pos >= n_slots)
        next_finish(g);
}

void cdb_geoidx_maybe_regrid(cdb_geoidx_t *gi, const cdb_slot_t *slots, uint32_t n_slots)
{
    for (uint32_t i = 0; i < gi->n; i++) {
        cdb_geogrid_t *g = &gi->g[i];
        size_t         n = g->n_entries, at = g->checked_at;
        int            dir;

        if (!g->next) {
            if (n < GEO_ADAPT_MIN && at < GEO_ADAPT_MIN)
                continue;
            if (n < 2 * at && 2 * n > at)
                continue;
            dir = wanted_step(g, 0);
            if (!dir) {
                g->checked_at = n;
                continue;
            }
            next_start(g, dir);
            if (!g->next)
                continue;
        }
        next_step(g, slots, n_slots);
    }
}

static size_t grid_bytes(const cdb_geogrid_t *g)
{
    size_t bytes = (size_t)g->cap * sizeof(cdb_gcell_t) + (size_t)g->large.cap * sizeof(uint32_t);

    for (uint32_t b = 0; b < g->cap; b++)
        if (g->cells[b].key != CDB_GEO_FREE)
            bytes += (size_t)g->cells[b].cap * sizeof(uint32_t);
    return bytes;
}

/* Entries: of the grids queries read (a rebuild under way adds bytes only). */
size_t cdb_geoidx_bytes(const cdb_geoidx_t *gi, size_t *entries)
{
    size_t bytes = (size_t)gi->cap * sizeof(cdb_geogrid_t), n = 0;

    for (uint32_t i = 0; i < gi->n; i++) {
        const cdb_geogrid_t *g = &gi->g[i];

        bytes += grid_bytes(g) + (g->next ? sizeof(*g->next) + grid_bytes(g->next) : 0);
        n += g->n_entries + g->large.n;
    }
    if (entries)
        *entries = n;
    return bytes;
}

/* -------------------------------------------------------------- queries */

typedef struct geo_range {
    uint32_t x0, y0, x1, y1;
    bool     walk_table;        /* fewer buckets than cells in the range */
} geo_range_t;

static void grid_range(const cdb_geogrid_t *g, const double box[4], geo_range_t *r)
{
    r->x0 = cell_coord(g, box[0], 180.0);
    r->y0 = cell_coord(g, box[1], 90.0);
    r->x1 = cell_coord(g, box[2], 180.0);
    r->y1 = cell_coord(g, box[3], 90.0);
    r->walk_table = (double)(r->x1 - r->x0 + 1) * (double)(r->y1 - r->y0 + 1) > (double)g->cap;
}

static inline bool range_has(const geo_range_t *r, uint64_t key)
{
    uint32_t cx = (uint32_t)(key >> 32), cy = (uint32_t)key;

    return cx >= r->x0 && cx <= r->x1 && cy >= r->y0 && cy <= r->y1;
}

/* The entries of the cells of g in the range of box, copied to out unless out
 * is NULL; returns how many. */
static size_t grid_walk(const cdb_geogrid_t *g, const double box[4], uint32_t *out)
{
    geo_range_t r;
    size_t      n = 0;

    if (!g->n_cells)
        return 0;
    grid_range(g, box, &r);
    if (r.walk_table) {
        for (uint32_t b = 0; b < g->cap; b++) {
            const cdb_gcell_t *c = &g->cells[b];

            if (c->key == CDB_GEO_FREE || !range_has(&r, c->key))
                continue;
            if (out && c->n)
                memcpy(out + n, c->v, (size_t)c->n * sizeof(uint32_t));
            n += c->n;
        }
        return n;
    }
    for (uint32_t cx = r.x0; cx <= r.x1; cx++)
        for (uint32_t cy = r.y0; cy <= r.y1; cy++) {
            const cdb_gcell_t *c = cell_get(g, cell_key(cx, cy));

            if (!c)
                continue;
            if (out && c->n)
                memcpy(out + n, c->v, (size_t)c->n * sizeof(uint32_t));
            n += c->n;
        }
    return n;
}

size_t cdb_geogrid_count(const cdb_geogrid_t *g, const double box[4])
{
    return grid_walk(g, box, NULL) + g->large.n;
}

size_t cdb_geogrid_collect(const cdb_geogrid_t *g, const double box[4], uint32_t *out)
{
    size_t n = grid_walk(g, box, out);

    if (g->large.n)
        memcpy(out + n, g->large.v, (size_t)g->large.n * sizeof(uint32_t));
    return n + g->large.n;
}
