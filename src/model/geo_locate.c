/*
 * geo_locate.c - where a point lies relative to a polygon (inside, outside,
 * on its boundary), without GEOS: the fast path of the geo-queries that
 * compare points with polygons (geoquery.c), which are most of them.
 *
 * Sunday's winding-number test with an explicit on-boundary test, so that
 * the answers agree with GEOS's DE-9IM semantics for valid polygons: a point
 * on the boundary intersects the polygon but is not within it. Plain double
 * orientation tests where GEOS uses robust ones: answers can differ only for
 * points within ~1e-15 degrees of an edge. A query's reference polygon is
 * turned once into flat coordinate arrays (geo_polys_build); an entity's
 * polygon is read from its JSON in place. Only valid polygons come here:
 * for a self-intersecting one the winding number and a made-valid copy can
 * disagree, so geoquery.c sends those to GEOS.
 */
#include "geo_int.h"

/* One edge of Sunday's winding-number test: updates *wn; true when (px, py)
 * lies on the edge itself. */
static inline bool edge_wind(double x1, double y1, double x2, double y2,
                             double px, double py, int *wn)
{
    double cross = (x2 - x1) * (py - y1) - (px - x1) * (y2 - y1);

    if (cross == 0.0 && px >= fmin(x1, x2) && px <= fmax(x1, x2) &&
        py >= fmin(y1, y2) && py <= fmax(y1, y2))
        return true;
    if (y1 <= py) {
        if (y2 > py && cross > 0.0)
            (*wn)++;
    } else if (y2 <= py && cross < 0.0) {
        (*wn)--;
    }
    return false;
}

static int ring_locate_xy(const geo_ring_t *r, double px, double py)
{
    int wn = 0;

    for (uint32_t i = 0; i + 1 < r->n; i++)
        if (edge_wind(r->xy[2 * i], r->xy[2 * i + 1], r->xy[2 * i + 2], r->xy[2 * i + 3], px, py, &wn))
            return LOC_ON;
    return wn != 0 ? LOC_IN : LOC_OUT;
}

static int ring_locate_json(const json_t *ring, double px, double py)
{
    int wn = 0;

    for (const json_t *a = ring->child; a && a->next; a = a->next) {
        const json_t *b = a->next;
        if (edge_wind(geo_num(a->child), geo_num(a->child->next), geo_num(b->child), geo_num(b->child->next),
                      px, py, &wn))
            return LOC_ON;
    }
    return wn != 0 ? LOC_IN : LOC_OUT;
}

/* Shell first: outside or on it settles it; then inside a hole is outside
 * the polygon and on a hole's ring is on the boundary. */
static int poly_locate_xy(const geo_poly_t *poly, double px, double py)
{
    if (px < poly->box.minx || px > poly->box.maxx || py < poly->box.miny || py > poly->box.maxy)
        return LOC_OUT;

    int loc = ring_locate_xy(&poly->rings[0], px, py);
    if (loc != LOC_IN)
        return loc;
    for (uint32_t h = 1; h < poly->n_rings; h++) {
        loc = ring_locate_xy(&poly->rings[h], px, py);
        if (loc == LOC_IN)
            return LOC_OUT;
        if (loc == LOC_ON)
            return LOC_ON;
    }
    return LOC_IN;
}

static int poly_locate_json(const json_t *rings, double px, double py)
{
    const json_t *shell = rings->child;
    int           loc   = ring_locate_json(shell, px, py);

    if (loc != LOC_IN)
        return loc;
    for (const json_t *h = shell->next; h; h = h->next) {
        loc = ring_locate_json(h, px, py);
        if (loc == LOC_IN)
            return LOC_OUT;
        if (loc == LOC_ON)
            return LOC_ON;
    }
    return LOC_IN;
}

/* A point against a MultiPolygon: inside any part is inside; otherwise on
 * any part's boundary is on the boundary. */
int geo_polys_locate(const geo_poly_t *polys, uint32_t n, double px, double py)
{
    int res = LOC_OUT;

    for (uint32_t i = 0; i < n; i++) {
        int loc = poly_locate_xy(&polys[i], px, py);
        if (loc == LOC_IN)
            return LOC_IN;
        if (loc == LOC_ON)
            res = LOC_ON;
    }
    return res;
}

int geo_coords_locate(geo_type_t t, const json_t *coords, double px, double py)
{
    if (t == GT_POLYGON)
        return poly_locate_json(coords, px, py);

    int res = LOC_OUT;
    for (const json_t *poly = coords->child; poly; poly = poly->next) {
        int loc = poly_locate_json(poly, px, py);
        if (loc == LOC_IN)
            return LOC_IN;
        if (loc == LOC_ON)
            res = LOC_ON;
    }
    return res;
}

/* Flat arrays of the reference (Multi)Polygon for the point-in-polygon path. */
geo_poly_t *geo_polys_build(arena_t *a, geo_type_t t, const json_t *coords, uint32_t *n_out)
{
    const json_t *first = t == GT_POLYGON ? coords : coords->child;
    uint32_t      n     = t == GT_POLYGON ? 1 : coords->len;
    uint32_t      i     = 0;
    geo_poly_t   *polys = arena_calloc(a, n * sizeof *polys);

    *n_out = n;
    for (const json_t *rings = first; rings && i < n; rings = rings->next, i++) {
        geo_poly_t *poly = &polys[i];
        uint32_t    k    = 0;

        poly->n_rings = rings->len;
        poly->rings   = arena_alloc(a, rings->len * sizeof *poly->rings);
        geo_box_empty(&poly->box);
        for (const json_t *r = rings->child; r; r = r->next, k++) {
            double  *xy = arena_alloc(a, (size_t)r->len * 2 * sizeof *xy);
            uint32_t j  = 0;
            for (const json_t *pos = r->child; pos; pos = pos->next, j++) {
                xy[2 * j]     = geo_num(pos->child);
                xy[2 * j + 1] = geo_num(pos->child->next);
                if (k == 0)
                    geo_box_add(&poly->box, xy[2 * j], xy[2 * j + 1]);
            }
            poly->rings[k].xy = xy;
            poly->rings[k].n  = r->len;
        }
    }
    return polys;
}
