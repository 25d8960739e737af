/*
 * geo_wrap.c - geometries crossing the antimeridian (RFC 7946 3.1.9).
 *
 * A geometry with an edge whose ends are more than 180 degrees of longitude
 * apart (geo_edge_wraps: the shorter way round crosses +-180) means the
 * shorter way, not a band around the globe; GEOS computes in the plane, so
 * such a geometry is cut there once, before it is evaluated:
 *  1. unwrap: each longitude is moved by a multiple of 360 to lie within 180
 *     degrees of the one before it (the coordinates of a geometry are visited
 *     in order, shell then holes, part after part), so the edges take the
 *     short way and the geometry is continuous, past 180 or below -180;
 *  2. cut: the unwrapped geometry is intersected with each copy of the
 *     [-180, 180] strip it reaches (moved back by the same multiple of 360),
 *     and the pieces are unioned: a Polygon becomes a MultiPolygon whose
 *     parts meet +-180, as RFC 7946 asks producers to write it.
 * Only geometries that cross come here (geojson.c notes a crossing while it
 * scans, one test per edge), so the others pay nothing. A ring that winds
 * around a pole (its crossings do not cancel out) is not cut: it is
 * evaluated as written (doc/api.md).
 */
#include "geo_int.h"

typedef struct unwrap {
    bool   started;
    double prev_in, prev_out;
} unwrap_t;

static int unwrap_xy(double *x, double *y, void *ud)
{
    unwrap_t *u = ud;
    double    in = *x;

    CR_UNUSED(y);
    if (u->started) {
        double d = in - u->prev_in;
        while (d > 180.0)
            d -= 360.0;
        while (d < -180.0)
            d += 360.0;
        *x = u->prev_out + d;
    }
    u->started  = true;
    u->prev_in  = in;
    u->prev_out = *x;
    return 1;
}

static int shift_xy(double *x, double *y, void *ud)
{
    CR_UNUSED(y);
    *x += *(const double *)ud;
    return 1;
}

GEOSGeometry *geo_wrap_shift(GEOSContextHandle_t h, const GEOSGeometry *g, double dx)
{
    return GEOSGeom_transformXY_r(h, g, shift_xy, &dx);
}

/* The piece of unwrapped geometry u in the strip [-180, 180] + 360 k,
 * moved back into [-180, 180]; NULL when GEOS fails. */
static GEOSGeometry *wrap_piece(GEOSContextHandle_t h, const GEOSGeometry *u, const GEOSGeometry *strip, int k)
{
    GEOSGeometry *moved = k ? geo_wrap_shift(h, u, -360.0 * k) : NULL;
    GEOSGeometry *piece;

    if (k && !moved)
        return NULL;
    const GEOSGeometry *src = moved ? moved : u;
    piece = GEOSIntersection_r(h, src, strip);
    if (!piece && GEOSisValid_r(h, src) == 0) {
        /* a self-intersecting polygon: its made-valid copy is cut */
        GEOSGeometry *mv = GEOSMakeValid_r(h, src);
        if (mv) {
            piece = GEOSIntersection_r(h, mv, strip);
            GEOSGeom_destroy_r(h, mv);
        }
    }
    if (moved)
        GEOSGeom_destroy_r(h, moved);
    return piece;
}

GEOSGeometry *geo_wrap_split(GEOSContextHandle_t h, GEOSGeometry *flat)
{
    GEOSGeometry *parts[8];
    unsigned      n = 0;
    unwrap_t      st = { 0 };
    GEOSGeometry *u, *strip = NULL, *coll, *res = NULL;
    double        xmin, xmax;

    if (!flat)
        return NULL;
    u = GEOSGeom_transformXY_r(h, flat, unwrap_xy, &st);
    GEOSGeom_destroy_r(h, flat);
    if (!u)
        return NULL;
    if (!GEOSGeom_getXMin_r(h, u, &xmin) || !GEOSGeom_getXMax_r(h, u, &xmax))
        goto out;
    strip = GEOSGeom_createRectangle_r(h, -180.0, -90.0, 180.0, 90.0);
    if (!strip)
        goto out;
    /* the strips the geometry reaches into, strictly (touching one at its
     * edge adds nothing but a degenerate piece) */
    for (int k = -(int)(sizeof parts / sizeof *parts) / 2; k < (int)(sizeof parts / sizeof *parts) / 2; k++) {
        if (!(xmin < 180.0 + 360.0 * k && xmax > -180.0 + 360.0 * k))
            continue;
        GEOSGeometry *piece = wrap_piece(h, u, strip, k);
        if (!piece)
            goto out;
        if (GEOSisEmpty_r(h, piece) == 1) {
            GEOSGeom_destroy_r(h, piece);
            continue;
        }
        parts[n++] = piece;
    }
    if (n == 0)
        goto out;
    coll = GEOSGeom_createCollection_r(h, GEOS_GEOMETRYCOLLECTION, parts, n);   /* takes the parts */
    n = 0;
    if (!coll)
        goto out;
    res = GEOSUnaryUnion_r(h, coll);
    GEOSGeom_destroy_r(h, coll);
out:
    for (unsigned i = 0; i < n; i++)
        GEOSGeom_destroy_r(h, parts[i]);
    if (strip)
        GEOSGeom_destroy_r(h, strip);
    GEOSGeom_destroy_r(h, u);
    return res;
}
