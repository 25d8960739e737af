/*
 * geoquery.c - the NGSI-LD geo-query language (clause 4.10): parsing of
 * georel / geometry / coordinates / geoproperty, and evaluation of a parsed
 * geo-query against an entity. The geometries themselves are geojson.c's,
 * the point-in-polygon fast path geo_locate.c's, the GEOS geometries
 * geo_geos.c's.
 *
 * Shape of the work:
 *  - Everything that depends only on the query is computed once, at parse time,
 *    in the request arena: the relation, the distance, the reference bounding
 *    box, the box a "near;maxDistance" candidate must touch, flat coordinate
 *    arrays of a Polygon/MultiPolygon reference, and the GEOS geometry with its
 *    prepared form (GEOSPrepare) reused for every entity.
 *  - Every syntactically valid reference geometry is evaluated (5.7.2.4), a
 *    self-intersecting polygon too: GEOS's predicates need valid input, so
 *    such a reference is replaced, once, by its made-valid copy
 *    (GEOSMakeValid: the same points, with the self-intersections noded), and
 *    equals compares it exactly (normalized, coordinate by coordinate) with the
 *    entity's geometry instead. An entity's invalid geometry on which GEOS
 *    fails is tried again on its made-valid copy.
 *  - Matching first rejects on bounding boxes, then takes a fast path without
 *    GEOS where one exists: Point/Point (haversine distance, equality), Point
 *    against a valid Polygon/MultiPolygon in either direction (geo_locate.c).
 *    Everything else goes through libgeos_c; the entity's GEOS geometry is
 *    built at most once per value per match call and destroyed at once.
 *  - Distances are great-circle distances in meters on a sphere of radius
 *    6371008.8 m (the IUGG mean radius). For non-point geometries the two
 *    nearest points are found by GEOS in planar lon/lat (GEOSPreparedNearestPoints)
 *    and their haversine distance is used: exact for points, a close
 *    approximation otherwise (the planar nearest pair is not always the
 *    geodesic one, and the result is never below the true geodesic minimum).
 *    near;maxDistance matches at distance <= d; near;minDistance matches at
 *    distance > d ("disjoint with the buffer", 4.10).
 *  - Topology (within, intersects, ...) is planar in lon/lat degrees, as GEOS
 *    computes it, on geometries cut at the antimeridian: a reference or an
 *    entity geometry with an edge crossing it (geo_edge_wraps) is cut there
 *    by geo_wrap.c (the reference once, at parse time; no point-in-polygon
 *    fast path for those), its bounding box then spans every longitude. For
 *    near, a reference whose distance box reaches past +-180 (or a pole)
 *    also keeps two copies moved by +-360 degrees: the distance is the least
 *    over the three, so a neighbour across the antimeridian is near.
 *
 * Threads: a prepared geometry builds its indexes lazily and is not safe for
 * concurrent use, so each query carries a mutex held around every GEOS call
 * on its geometries: a request's query is used by one thread (the lock is
 * uncontended), while a query kept longer (a subscription) may be matched
 * from several threads. The arena_on_free callback that destroys a query's
 * geometries uses the handle of whichever thread frees the arena.
 */
#include "geo_int.h"

#include <pthread.h>
#include <stdlib.h>

#define GEO_EARTH_RADIUS_M  6371008.8
#define GEO_COORDS_DEPTH    16         /* JSON depth allowed for a coordinates text */

typedef enum {
    GR_NEAR_MAX = 1,
    GR_NEAR_MIN,
    GR_WITHIN,
    GR_CONTAINS,
    GR_INTERSECTS,
    GR_EQUALS,
    GR_DISJOINT,
    GR_OVERLAPS
} georel_t;

struct geoq {
    georel_t                    rel;
    geo_type_t                  type;        /* of the reference geometry */
    double                      distance;    /* near: meters */
    const char                 *property;    /* expanded, interned */
    geo_box_t                   box;         /* of the reference geometry */
    geo_box_t                   near_box;    /* near: every point within `distance` lies in it */
    double                      px, py;      /* GT_POINT reference */
    geo_poly_t                 *polys;       /* GT_POLYGON / GT_MULTIPOLYGON reference */
    uint32_t                    n_polys;
    GEOSGeometry               *geos;        /* valid: the reference, or its made-valid copy */
    const GEOSPreparedGeometry *prep;
    GEOSGeometry               *exact;       /* an invalid reference, normalized: for equals */
    GEOSGeometry               *shifted[2];  /* near across +-180: geos moved by +360, -360 */
    pthread_mutex_t             lock;        /* around GEOS calls on geos/prep */
    bool                        lock_ready;
};

/* ---------------------------------------------------- boxes and distances */

static inline bool box_intersects(const geo_box_t *a, const geo_box_t *b)
{
    return a->minx <= b->maxx && b->minx <= a->maxx && a->miny <= b->maxy && b->miny <= a->maxy;
}

static inline bool box_contains(const geo_box_t *outer, const geo_box_t *inner)
{
    return outer->minx <= inner->minx && inner->maxx <= outer->maxx &&
           outer->miny <= inner->miny && inner->maxy <= outer->maxy;
}

/* Great-circle distance in meters between two lon/lat positions. */
static double haversine_m(double lon1, double lat1, double lon2, double lat2)
{
    const double r = M_PI / 180.0;
    double s = sin((lat2 - lat1) * r / 2.0);
    double t = sin((lon2 - lon1) * r / 2.0);
    double h = s * s + cos(lat1 * r) * cos(lat2 * r) * t * t;

    if (h > 1.0)
        h = 1.0;
    return 2.0 * GEO_EARTH_RADIUS_M * asin(sqrt(h));
}

/* The lon/lat box holding every point within `meters` of box b: latitude
 * grows by the angular distance, longitude by asin(sin(d)/cos(lat)) taken at
 * the box's highest |latitude|, where it is widest. A box that reaches a pole
 * or crosses the antimeridian spans all longitudes (conservative). */
static void box_expand_m(const geo_box_t *b, double meters, geo_box_t *out)
{
    const double deg = 180.0 / M_PI;
    double delta = meters / GEO_EARTH_RADIUS_M;
    double margin = 1e-9;

    out->minx = -INFINITY; out->maxx = INFINITY;
    out->miny = -INFINITY; out->maxy = INFINITY;
    if (!(delta < M_PI))
        return;
    out->miny = b->miny - delta * deg - margin;
    out->maxy = b->maxy + delta * deg + margin;
    if (out->miny <= -90.0 || out->maxy >= 90.0)
        return;

    double phi = fmax(fabs(b->miny), fabs(b->maxy)) / deg;
    double s   = sin(delta) / cos(phi);
    if (!(s < 1.0))
        return;
    double dlon = asin(s) * deg + margin;
    if (b->minx - dlon < -180.0 || b->maxx + dlon > 180.0)
        return;
    out->minx = b->minx - dlon;
    out->maxx = b->maxx + dlon;
}

static void geoq_release(void *ptr)
{
    geoq_t             *g = ptr;
    GEOSContextHandle_t h = (g->prep || g->geos || g->exact || g->shifted[0] || g->shifted[1])
                            ? geo_geos_handle() : NULL;

    if (h) {
        for (int i = 0; i < 2; i++)
            if (g->shifted[i])
                GEOSGeom_destroy_r(h, g->shifted[i]);
        if (g->prep)
            GEOSPreparedGeom_destroy_r(h, g->prep);
        if (g->geos)
            GEOSGeom_destroy_r(h, g->geos);
        if (g->exact)
            GEOSGeom_destroy_r(h, g->exact);
    }
    g->prep  = NULL;
    g->geos  = NULL;
    g->exact = NULL;
    g->shifted[0] = g->shifted[1] = NULL;
    if (g->lock_ready)
        pthread_mutex_destroy(&g->lock);
    g->lock_ready = false;
}

/* --------------------------------------------------------------- parsing */

/* PositiveNumber of 4.10: an RFC 8259 number without '-', not 0. */
static bool parse_positive_number(const char *s, double *out)
{
    const char *q = s;

    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (*q >= '0' && *q <= '9')
            q++;
    } else {
        return false;
    }
    if (*q == '.') {
        q++;
        if (!(*q >= '0' && *q <= '9'))
            return false;
        while (*q >= '0' && *q <= '9')
            q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-')
            q++;
        if (!(*q >= '0' && *q <= '9'))
            return false;
        while (*q >= '0' && *q <= '9')
            q++;
    }
    if (*q != '\0')
        return false;

    double v = strtod(s, NULL);
    if (!isfinite(v) || !(v > 0.0))
        return false;
    *out = v;
    return true;
}

static bool parse_georel(const char *s, georel_t *rel, double *dist, problem_t *p)
{
    static const struct { const char *name; georel_t rel; } plain[] = {
        { "within", GR_WITHIN }, { "contains", GR_CONTAINS }, { "intersects", GR_INTERSECTS },
        { "equals", GR_EQUALS }, { "disjoint", GR_DISJOINT }, { "overlaps", GR_OVERLAPS },
    };

    for (size_t i = 0; i < CR_ARRAY_LEN(plain); i++) {
        size_t n = strlen(plain[i].name);
        if (strncmp(s, plain[i].name, n) != 0)
            continue;
        if (s[n] == '\0') {
            *rel = plain[i].rel;
            return true;
        }
        if (s[n] == ';')
            return problem_set(p, BRD, "Invalid georel '%.64s': '%s' takes no modifier "
                               "(only near has maxDistance/minDistance)", s, plain[i].name);
    }

    if (strncmp(s, "near", 4) == 0 && (s[4] == '\0' || s[4] == ';')) {
        const char *m = s + 4;
        const char *v;
        if (*m == '\0' || m[1] == '\0')
            return problem_set(p, BRD, "Invalid georel '%.64s': near needs a distance: "
                               "near;maxDistance==<meters> or near;minDistance==<meters>", s);
        m++;
        if (strncmp(m, "maxDistance==", 13) == 0) {
            *rel = GR_NEAR_MAX;
            v = m + 13;
        } else if (strncmp(m, "minDistance==", 13) == 0) {
            *rel = GR_NEAR_MIN;
            v = m + 13;
        } else {
            return problem_set(p, BRD, "Invalid georel '%.64s': the near modifier must be "
                               "maxDistance==<meters> or minDistance==<meters>", s);
        }
        if (!parse_positive_number(v, dist))
            return problem_set(p, BRD, "Invalid georel '%.64s': the distance must be a positive "
                               "number of meters", s);
        return true;
    }
    return problem_set(p, BRD, "Invalid georel '%.64s' (expected near;maxDistance==<m>, "
                       "near;minDistance==<m>, within, contains, intersects, equals, disjoint "
                       "or overlaps)", s);
}

static const char *geoq_property_name(arena_t *a, const char *geoproperty, const ld_context_t *ctx)
{
    if (!geoproperty || !*geoproperty) {
        if (MN.location)
            return MN.location;
        return intern_cstr(LD_NGSI_LD_PREFIX "location");
    }
    if (!ctx)
        ctx = ld_core();
    return ld_expand_lookup(ctx, geoproperty, a);   /* a query: interns nothing */
}

/* The common part of geoq_parse and geoq_from_json: coords is the parsed
 * coordinates array. */
static geoq_t *geoq_build(arena_t *a, const char *georel, const char *geometry, const json_t *coords,
                          const char *geoproperty, const ld_context_t *ctx, problem_t *p)
{
    georel_t   rel = (georel_t)0;
    double     dist = 0.0;
    geo_type_t t;
    geoq_t    *g;

    if (!parse_georel(georel, &rel, &dist, p))
        return NULL;

    t = geo_type_of(geometry);
    if (t == GT_COLLECTION) {
        problem_set(p, BRD, "Invalid geometry 'GeometryCollection': not allowed in a geo-query "
                    "(clause 4.10)");
        return NULL;
    }
    if (t == GT_NONE) {
        problem_set(p, BRD, "Invalid geometry '%.64s' (expected Point, MultiPoint, LineString, "
                    "MultiLineString, Polygon or MultiPolygon)", geometry);
        return NULL;
    }

    g = arena_calloc(a, sizeof *g);
    g->rel      = rel;
    g->type     = t;
    g->distance = dist;
    geo_box_empty(&g->box);
    if (!geo_scan_coordinates(t, coords, &g->box, p) ||
        !geo_within_budget(&g->box, geo_type_names[t], "geo-query", p))
        return NULL;

    g->property = geoq_property_name(a, geoproperty, ctx);
    if (!g->property) {
        problem_set(p, BRD, "Invalid geoproperty '%.64s'", geoproperty);
        return NULL;
    }

    if (t == GT_POINT) {
        g->px = geo_num(coords->child);
        g->py = geo_num(coords->child->next);
    } else if ((t == GT_POLYGON || t == GT_MULTIPOLYGON) && !geo_box_wraps(&g->box)) {
        g->polys = geo_polys_build(a, t, coords, &g->n_polys);
    }
    if (rel == GR_NEAR_MAX || rel == GR_NEAR_MIN)
        box_expand_m(&g->box, dist, &g->near_box);

    /* GEOS: the reference geometry and its prepared form, freed with the arena. */
    GEOSContextHandle_t h = geo_geos_handle();
    if (pthread_mutex_init(&g->lock, NULL) != 0) {
        problem_set(p, PB_INTERNAL_ERROR, "geo-query: cannot create a lock");
        return NULL;
    }
    g->lock_ready = true;
    arena_on_free(a, geoq_release, g);

    geo_geos_clear_error();
    g->geos = geo_geos_from_coords(h, t, coords);
    if (g->geos && geo_box_wraps(&g->box))
        g->geos = geo_wrap_split(h, g->geos);
    if (!g->geos) {
        problem_set(p, BRD, "Invalid %s coordinates: %s", geo_type_names[t],
                    geo_geos_error()[0] ? geo_geos_error() : "rejected by the geometry engine");
        return NULL;
    }
    /* GEOS's predicates need a valid geometry (and a line whose points are
     * all the same, "Too few points", makes GEOS 3.11's prepared
     * nearest-points crash: found by fuzz_geo). 5.7.2.4 accepts every
     * syntactically valid geometry, so an invalid one (a self-intersecting
     * ring, a degenerate line) is evaluated on its made-valid copy, and kept
     * normalized for equals, which compares exactly. */
    if (t != GT_POINT && t != GT_MULTIPOINT) {
        char valid = GEOSisValid_r(h, g->geos);
        if (valid == 2) {
            problem_set(p, BRD, "Invalid %s: %s", geo_type_names[t],
                        geo_geos_error()[0] ? geo_geos_error() : "rejected by the geometry engine");
            return NULL;
        }
        if (valid == 0) {
            GEOSGeometry *mv = GEOSMakeValid_r(h, g->geos);
            if (!mv || GEOSisValid_r(h, mv) != 1) {
                if (mv)
                    GEOSGeom_destroy_r(h, mv);
                problem_set(p, BRD, "Invalid %s: it cannot be made a valid geometry (%s)", geo_type_names[t],
                            geo_geos_error()[0] ? geo_geos_error() : "rejected by the geometry engine");
                return NULL;
            }
            g->exact = g->geos;
            g->geos  = mv;
            if (GEOSNormalize_r(h, g->exact) != 0) {
                problem_set(p, PB_INTERNAL_ERROR, "geo-query: cannot normalize the geometry");
                return NULL;
            }
            /* the winding number of a self-intersecting ring is not the
             * made-valid copy's answer: no point-in-polygon fast path */
            g->polys   = NULL;
            g->n_polys = 0;
        }
    }
    g->prep = GEOSPrepare_r(h, g->geos);
    if (!g->prep) {
        problem_set(p, PB_INTERNAL_ERROR, "geo-query: cannot prepare the geometry");
        return NULL;
    }
    /* near whose distance reaches across +-180: the reference moved by a
     * turn either way too (box_expand_m gives up on such boxes) */
    if ((rel == GR_NEAR_MAX || rel == GR_NEAR_MIN) && g->near_box.minx == -INFINITY) {
        g->shifted[0] = geo_wrap_shift(h, g->geos, 360.0);
        g->shifted[1] = geo_wrap_shift(h, g->geos, -360.0);
        if (!g->shifted[0] || !g->shifted[1]) {
            problem_set(p, PB_INTERNAL_ERROR, "geo-query: cannot copy the geometry");
            return NULL;
        }
    }
    return g;
}

geoq_t *geoq_parse(arena_t *a, const geoq_params_t *gp, const ld_context_t *ctx, problem_t *p)
{
    char    err[160];
    json_t *coords;
    json_limits_t lim = { .max_depth = GEO_COORDS_DEPTH, .max_size = 0 };

    if (!gp || (!gp->georel && !gp->geometry && !gp->coordinates)) {
        problem_set(p, BRD, "A geo-query needs georel, geometry and coordinates (clause 4.10)");
        return NULL;
    }
    if (!gp->georel || !*gp->georel) {
        problem_set(p, BRD, "georel is missing: a geo-query needs georel, geometry and coordinates");
        return NULL;
    }
    if (!gp->geometry || !*gp->geometry) {
        problem_set(p, BRD, "geometry is missing: a geo-query needs georel, geometry and coordinates");
        return NULL;
    }
    if (!gp->coordinates || !*gp->coordinates) {
        problem_set(p, BRD, "coordinates is missing: a geo-query needs georel, geometry and coordinates");
        return NULL;
    }

    err[0] = '\0';
    coords = json_parse_copy(a, gp->coordinates, strlen(gp->coordinates), &lim, err, sizeof err);
    if (!coords) {
        problem_set(p, BRD, "Invalid coordinates: not a JSON array (%s)", err[0] ? err : "parse error");
        return NULL;
    }
    return geoq_build(a, gp->georel, gp->geometry, coords, gp->geoproperty, ctx, p);
}

geoq_t *geoq_from_json(arena_t *a, const char *georel, const json_t *geometry_type,
                       const json_t *coordinates, const char *geoproperty,
                       const ld_context_t *ctx, problem_t *p)
{
    if (!georel || !*georel) {
        problem_set(p, BRD, "georel is missing: a geo-query needs georel, geometry and coordinates");
        return NULL;
    }
    if (!geometry_type) {
        problem_set(p, BRD, "geometry is missing: a geo-query needs georel, geometry and coordinates");
        return NULL;
    }
    if (!json_is_string(geometry_type)) {
        problem_set(p, BRD, "Invalid geometry: it must be a string");
        return NULL;
    }
    if (!coordinates) {
        problem_set(p, BRD, "coordinates is missing: a geo-query needs georel, geometry and coordinates");
        return NULL;
    }

    /* 5.2.13: coordinates may be an array or its JSON text. */
    const json_t *coords = coordinates;
    if (json_is_string(coordinates)) {
        char          err[160];
        json_limits_t lim = { .max_depth = GEO_COORDS_DEPTH, .max_size = 0 };
        err[0] = '\0';
        coords = json_parse_copy(a, coordinates->str, coordinates->len, &lim, err, sizeof err);
        if (!coords) {
            problem_set(p, BRD, "Invalid coordinates: not a JSON array (%s)", err[0] ? err : "parse error");
            return NULL;
        }
    }
    if (!json_is_array(coords)) {
        problem_set(p, BRD, "Invalid coordinates: it must be an array (or its JSON text)");
        return NULL;
    }
    return geoq_build(a, georel, geometry_type->str, coords, geoproperty, ctx, p);
}

const char *geoq_property(const geoq_t *g)
{
    return g ? g->property : NULL;
}

bool geoq_bbox(const geoq_t *g, double box[4])
{
    const geo_box_t *b;

    if (!g || g->rel == GR_DISJOINT || g->rel == GR_NEAR_MIN)
        return false;
    b = g->rel == GR_NEAR_MAX ? &g->near_box : &g->box;
    box[0] = b->minx; box[1] = b->miny; box[2] = b->maxx; box[3] = b->maxy;
    return true;
}

bool geoq_near_point(const geoq_t *g, double *lon, double *lat, double *meters, double *radius_m)
{
    if (!g || g->rel != GR_NEAR_MAX || g->type != GT_POINT)
        return false;
    *lon = g->px; *lat = g->py; *meters = g->distance; *radius_m = GEO_EARTH_RADIUS_M;
    return true;
}

/* -------------------------------------------------------------- matching */

/* The great-circle distance between the nearest points of a and b
 * (planar nearest pair); false when GEOS fails. */
static bool nearest_m(GEOSContextHandle_t h, const GEOSGeometry *a, const GEOSPreparedGeometry *pa,
                      const GEOSGeometry *b, double *out)
{
    GEOSCoordSequence *cs = pa ? GEOSPreparedNearestPoints_r(h, pa, b) : GEOSNearestPoints_r(h, a, b);
    double             x0, y0, x1, y1;
    bool               ok = cs && GEOSCoordSeq_getXY_r(h, cs, 0, &x0, &y0) &&
                            GEOSCoordSeq_getXY_r(h, cs, 1, &x1, &y1);

    if (ok)
        *out = haversine_m(x0, y0, x1, y1);
    if (cs)
        GEOSCoordSeq_destroy_r(h, cs);
    return ok;
}

/* Point target against Point reference. */
static bool match_point_point(const geoq_t *g, double x, double y)
{
    bool same = x == g->px && y == g->py;

    switch (g->rel) {
    case GR_NEAR_MAX:   return haversine_m(g->px, g->py, x, y) <= g->distance;
    case GR_NEAR_MIN:   return haversine_m(g->px, g->py, x, y) > g->distance;
    case GR_DISJOINT:   return !same;
    case GR_OVERLAPS:   return false;
    default:            return same;     /* within, contains, intersects, equals */
    }
}

/* Answers a relation from where one geometry's point lies relative to the
 * other's polygon. point_is_target: the entity is the point. */
static bool match_by_locate(georel_t rel, int loc, bool point_is_target)
{
    switch (rel) {
    case GR_INTERSECTS: return loc != LOC_OUT;
    case GR_DISJOINT:   return loc == LOC_OUT;
    case GR_WITHIN:     return point_is_target && loc == LOC_IN;
    case GR_CONTAINS:   return !point_is_target && loc == LOC_IN;
    default:            return false;    /* equals, overlaps: dimensions differ */
    }
}

/* equals against an invalid reference: the same coordinates, once both are
 * normalized (ring starts and orientation do not matter); t is normalized in
 * place. */
static int equals_exact(GEOSContextHandle_t h, const geoq_t *g, GEOSGeometry *t)
{
    if (GEOSNormalize_r(h, t) != 0)
        return 2;
    return GEOSEqualsExact_r(h, g->exact, t, 0.0);
}

/* The relation between the (valid) reference and t, by GEOS: 0, 1, or 2
 * when GEOS fails (an invalid t). Under g->lock. */
static int relate_geos(GEOSContextHandle_t h, const geoq_t *g, GEOSGeometry *t)
{
    int r = 2;

    switch (g->rel) {
    case GR_WITHIN:     r = GEOSPreparedContains_r(h, g->prep, t); break;   /* R contains T */
    case GR_CONTAINS:   r = GEOSPreparedWithin_r(h, g->prep, t); break;     /* R within T */
    case GR_INTERSECTS: r = GEOSPreparedIntersects_r(h, g->prep, t); break;
    case GR_DISJOINT:   r = GEOSPreparedDisjoint_r(h, g->prep, t); break;
    case GR_OVERLAPS:   r = GEOSPreparedOverlaps_r(h, g->prep, t); break;
    case GR_EQUALS:
        /* a valid reference is never exactly an invalid t: a failure is "not equal" */
        if (g->exact)
            r = equals_exact(h, g, t);
        else if ((r = GEOSEquals_r(h, g->geos, t)) == 2)
            r = 0;
        break;
    case GR_NEAR_MAX:
    case GR_NEAR_MIN: {
        /* an entity's degenerate geometry takes the unprepared (and robust) path */
        double d, ds;
        if (nearest_m(h, g->geos, GEOSisValid_r(h, t) == 1 ? g->prep : NULL, t, &d)) {
            for (int i = 0; i < 2; i++)
                if (g->shifted[i] && nearest_m(h, g->shifted[i], NULL, t, &ds) && ds < d)
                    d = ds;
            r = g->rel == GR_NEAR_MAX ? d <= g->distance : d > g->distance;
        }
        break;
    }
    }
    return r;
}

/* Through GEOS; -1 when GEOS fails (no match then). An entity's invalid
 * geometry on which GEOS fails is tried again on its made-valid copy. */
static int match_geos(const geoq_t *g, const json_t *value, bool wraps)
{
    GEOSContextHandle_t h = geo_geos_handle();
    GEOSGeometry       *t;
    int                 r;

    if (!g->prep)
        return -1;
    t = geo_geos_build(h, value, 0);
    if (t && wraps)
        t = geo_wrap_split(h, t);
    if (!t)
        return -1;

    pthread_mutex_lock((pthread_mutex_t *)&g->lock);
    r = relate_geos(h, g, t);
    if (r == 2 && g->rel != GR_EQUALS && GEOSisValid_r(h, t) == 0) {
        GEOSGeometry *mv = GEOSMakeValid_r(h, t);
        if (mv) {
            r = relate_geos(h, g, mv);
            GEOSGeom_destroy_r(h, mv);
        }
    }
    pthread_mutex_unlock((pthread_mutex_t *)&g->lock);

    GEOSGeom_destroy_r(h, t);
    return r == 0 || r == 1 ? r : -1;
}

/* One GeoProperty value against the query. */
static bool match_value(const geoq_t *g, const json_t *value)
{
    geo_box_t  eb;
    geo_type_t et;

    geo_box_empty(&eb);
    if (!geo_scan_geometry(value, &eb, &et, 0, true, NULL))
        return false;

    /* Bounding-box answers. */
    switch (g->rel) {
    case GR_NEAR_MAX:   if (!box_intersects(&eb, &g->near_box)) return false; break;
    case GR_NEAR_MIN:   if (!box_intersects(&eb, &g->near_box)) return true; break;
    case GR_WITHIN:     if (!box_contains(&g->box, &eb)) return false; break;
    case GR_CONTAINS:   if (!box_contains(&eb, &g->box)) return false; break;
    case GR_DISJOINT:   if (!box_intersects(&eb, &g->box)) return true; break;
    default:            if (!box_intersects(&eb, &g->box)) return false; break;
    }

    /* Fast paths. */
    const json_t *coords = et == GT_COLLECTION ? NULL : geo_member(value, "coordinates");
    if (et == GT_POINT) {
        double x = geo_num(coords->child), y = geo_num(coords->child->next);
        if (g->type == GT_POINT)
            return match_point_point(g, x, y);
        if (g->polys && g->rel != GR_NEAR_MAX && g->rel != GR_NEAR_MIN)
            return match_by_locate(g->rel, geo_polys_locate(g->polys, g->n_polys, x, y), true);
    } else if (g->type == GT_POINT && (et == GT_POLYGON || et == GT_MULTIPOLYGON) && !geo_box_wraps(&eb) &&
               g->rel != GR_NEAR_MAX && g->rel != GR_NEAR_MIN) {
        return match_by_locate(g->rel, geo_coords_locate(et, coords, g->px, g->py), false);
    }

    return match_geos(g, value, geo_box_wraps(&eb)) == 1;
}

bool geoq_match(const geoq_t *g, const cr_entity_t *e)
{
    if (!g || !e)
        return false;
    /* Every instance (datasetId) of the GeoProperty is tried. */
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        if (at->name != g->property || at->kind != ATTR_GEOPROPERTY || !at->value)
            continue;
        if (match_value(g, at->value))
            return true;
    }
    return false;
}
