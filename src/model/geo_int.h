/*
 * geo_int.h - private to the geo files of model/ (geojson.c, geo_locate.c,
 * geo_geos.c, geoquery.c): the types and helpers they share. model.h is the
 * contract (geo_validate, geo_bbox, geoq_*); nothing outside model/ includes
 * this file.
 *
 * The split: geojson.c knows GeoJSON (RFC 7946 as clause 4.7 restricts it)
 * and walks a geometry once, validating it and computing its bounding box;
 * geo_locate.c answers "where is this point relative to this polygon" without
 * GEOS (the fast path of most real geo-queries); geo_geos.c turns validated
 * GeoJSON into GEOS geometries and owns the per-thread GEOS handles;
 * geo_wrap.c cuts a geometry crossing the antimeridian at +-180;
 * geoquery.c is the geo-query language of 4.10 (parsing, what is computed
 * once per query, and matching), built on the others.
 */
#ifndef CORAINE_MODEL_GEO_INT_H
#define CORAINE_MODEL_GEO_INT_H

#include "model.h"

#include <geos_c.h>
#include <math.h>
#include <string.h>

#define GEO_MAX_NESTING     4          /* GeometryCollection nesting (internal use) */

#define BRD PB_BAD_REQUEST_DATA

typedef enum {
    GT_NONE = 0,
    GT_POINT,
    GT_MULTIPOINT,
    GT_LINESTRING,
    GT_MULTILINESTRING,
    GT_POLYGON,
    GT_MULTIPOLYGON,
    GT_COLLECTION
} geo_type_t;

extern const char *const geo_type_names[];   /* indexed by geo_type_t */

typedef struct geo_box {
    double   minx, miny, maxx, maxy;
    uint64_t n;                 /* positions scanned into it (all rings, all parts) */
    bool     wraps;             /* an edge crosses the antimeridian (geo_edge_wraps) */
    bool     polar;             /* a ring winds around a pole: evaluated flat */
} geo_box_t;

/* An edge from longitude x1 to x2 crosses the antimeridian when the shorter
 * way between them does (RFC 7946 3.1.9): when they are more than 180
 * degrees apart. Exactly 180 apart is not a crossing (both ways are as long;
 * the edge is taken as written). */
static inline bool geo_edge_wraps(double x1, double x2)
{
    return fabs(x2 - x1) > 180.0;
}

/* A linear ring as a flat array x0,y0,x1,y1,... (closed: last == first). */
typedef struct geo_ring {
    const double *xy;
    uint32_t      n;
} geo_ring_t;

typedef struct geo_poly {
    geo_ring_t *rings;          /* rings[0] is the shell, the others holes */
    uint32_t    n_rings;
    geo_box_t   box;
} geo_poly_t;

static inline double geo_num(const json_t *n)
{
    return n->is_int ? (double)n->i : n->num;
}

static inline const json_t *geo_member(const json_t *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    for (const json_t *c = obj->child; c; c = c->next)
        if (c->key && strcmp(c->key, key) == 0)
            return c;
    return NULL;
}

static inline void geo_box_empty(geo_box_t *b)
{
    b->minx = b->miny = INFINITY;
    b->maxx = b->maxy = -INFINITY;
    b->n    = 0;
    b->wraps = b->polar = false;
}

/* The geometry is cut at the antimeridian before it is evaluated. */
static inline bool geo_box_wraps(const geo_box_t *b)
{
    return b->wraps && !b->polar;
}

static inline void geo_box_add(geo_box_t *b, double x, double y)
{
    if (x < b->minx) b->minx = x;
    if (x > b->maxx) b->maxx = x;
    if (y < b->miny) b->miny = y;
    if (y > b->maxy) b->maxy = y;
}

/* ---- geojson.c: validation and bounding boxes */
geo_type_t geo_type_of(const char *s);
/* Validates one geometry object (a GeometryCollection only when
 * allow_collection), growing box b; p may be NULL. */
bool geo_scan_geometry(const json_t *g, geo_box_t *b, geo_type_t *type, int depth, bool allow_collection,
                       problem_t *p);
/* Validates the coordinates of a geometry of type t, growing box b. */
bool geo_scan_coordinates(geo_type_t t, const json_t *c, geo_box_t *b, problem_t *p);
/* The --maxGeoVertices budget: false (with p) for a geometry with more positions. */
bool geo_within_budget(const geo_box_t *b, const char *what, const char *where, problem_t *p);

/* ---- geo_locate.c: point in polygon without GEOS */
enum { LOC_OUT = 0, LOC_IN = 1, LOC_ON = 2 };
/* Flat arrays of validated (Multi)Polygon coordinates of type t, in arena a. */
geo_poly_t *geo_polys_build(arena_t *a, geo_type_t t, const json_t *coords, uint32_t *n);
/* Where (px, py) lies relative to the polygons: LOC_*. */
int geo_polys_locate(const geo_poly_t *polys, uint32_t n, double px, double py);
/* The same against validated Polygon / MultiPolygon coordinates. */
int geo_coords_locate(geo_type_t t, const json_t *coords, double px, double py);

/* ---- geo_geos.c: GEOS geometries of validated GeoJSON */
/* This thread's GEOS context handle (created on first use). */
GEOSContextHandle_t geo_geos_handle(void);
/* The last GEOS error message of this thread ("" after geo_geos_clear_error). */
const char *geo_geos_error(void);
void        geo_geos_clear_error(void);
GEOSGeometry *geo_geos_from_coords(GEOSContextHandle_t h, geo_type_t t, const json_t *c);
GEOSGeometry *geo_geos_build(GEOSContextHandle_t h, const json_t *geometry, int depth);

/* ---- geo_wrap.c: geometries crossing the antimeridian */
/* The geometry `flat` (taken, destroyed) cut at +-180 into parts within
 * [-180, 180]; NULL when GEOS fails. */
GEOSGeometry *geo_wrap_split(GEOSContextHandle_t h, GEOSGeometry *flat);
/* A copy of g moved dx degrees in longitude. */
GEOSGeometry *geo_wrap_shift(GEOSContextHandle_t h, const GEOSGeometry *g, double dx);

#endif
