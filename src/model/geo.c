/*
 * geo.c - GeoJSON geometries (clause 4.7, RFC 7946) and the NGSI-LD
 * geo-query language (clause 4.10): validation of GeoProperty values,
 * parsing of georel / geometry / coordinates / geoproperty, and evaluation of
 * a parsed geo-query against an entity.
 *
 * Shape of the work:
 *  - Validation walks the GeoJSON tree once and computes its bounding box on
 *    the way (scan_*). The same walk guards matching: a value that is not a
 *    valid geometry never reaches GEOS and simply does not match.
 *  - Everything that depends only on the query is computed once, at parse time,
 *    in the request arena: the relation, the distance, the reference bounding
 *    box, the box a "near;maxDistance" candidate must touch, flat coordinate
 *    arrays of a Polygon/MultiPolygon reference, and the GEOS geometry with its
 *    prepared form (GEOSPrepare) reused for every entity.
 *  - Matching first rejects on bounding boxes, then takes a fast path without
 *    GEOS where one exists: Point/Point (haversine distance, equality), Point
 *    against Polygon/MultiPolygon in either direction (winding-number point in
 *    polygon with holes and an explicit on-boundary test, so that the answers
 *    agree with GEOS's DE-9IM semantics: a point on the boundary intersects the
 *    polygon but is not within it). Everything else goes through libgeos_c; the
 *    entity's GEOS geometry is built at most once per value per match call and
 *    destroyed at once.
 *  - Distances are great-circle distances in meters on a sphere of radius
 *    6371008.8 m (the IUGG mean radius). For non-point geometries the two
 *    nearest points are found by GEOS in planar lon/lat (GEOSPreparedNearestPoints)
 *    and their haversine distance is used: exact for points, a close
 *    approximation otherwise (the planar nearest pair is not always the
 *    geodesic one, and the result is never below the true geodesic minimum).
 *    near;maxDistance matches at distance <= d; near;minDistance matches at
 *    distance > d ("disjoint with the buffer", 4.10).
 *  - Topology (within, intersects, ...) is planar in lon/lat degrees, as GEOS
 *    computes it; nothing wraps at the antimeridian (RFC 7946 3.1.9 asks
 *    producers to cut geometries there). The point-in-polygon fast path uses
 *    plain double orientation tests where GEOS uses robust ones: answers can
 *    differ only for points within ~1e-15 degrees of an edge.
 *
 * GEOS and threads. We use only the re-entrant API. Each thread that needs
 * GEOS gets its own context handle, created lazily on first use (GEOS_init_r)
 * and kept in a thread-local; a pthread key destructor calls GEOS_finish_r
 * when the thread exits. The handle is a tool of the thread, not request
 * state: it holds GEOS's message handlers only. In GEOS (3.x) a geometry is not
 * bound to the handle that made it (all handles share the default
 * GeometryFactory), so the arena_on_free callback that destroys a query's
 * geometries uses the handle of whichever thread frees the arena. A prepared
 * geometry builds its indexes lazily and is not safe for concurrent use, so
 * each query carries a mutex held around every GEOS call on its geometries: a
 * request's query is used by one thread (the lock is uncontended), while a
 * query kept longer (a subscription) may be matched from several threads.
 *
 * GeometryCollection: RFC 7946 defines it and the validator knows it, but
 * clause 4.7.1 excludes it from GeoProperty values and clause 4.10 from
 * reference geometries, so geo_validate and the query parsers reject it.
 */
#include "model.h"

#include <geos_c.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define GEO_EARTH_RADIUS_M  6371008.8
#define GEO_MAX_NESTING     4          /* GeometryCollection nesting (internal use) */
#define GEO_COORDS_DEPTH    16         /* JSON depth allowed for a coordinates text */
#define GEO_STACK_PARTS     16         /* parts/holes handled without malloc */

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

static const char *const geo_type_names[] = {
    [GT_NONE] = "?", [GT_POINT] = "Point", [GT_MULTIPOINT] = "MultiPoint",
    [GT_LINESTRING] = "LineString", [GT_MULTILINESTRING] = "MultiLineString",
    [GT_POLYGON] = "Polygon", [GT_MULTIPOLYGON] = "MultiPolygon",
    [GT_COLLECTION] = "GeometryCollection",
};

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

typedef struct geo_box {
    double   minx, miny, maxx, maxy;
    uint64_t n;                 /* positions scanned into it (all rings, all parts) */
} geo_box_t;

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
    GEOSGeometry               *geos;
    const GEOSPreparedGeometry *prep;
    pthread_mutex_t             lock;        /* around GEOS calls on geos/prep */
    bool                        lock_ready;
};

/* ------------------------------------------------------------ utilities */

static inline double num(const json_t *n)
{
    return n->is_int ? (double)n->i : n->num;
}

static const json_t *member(const json_t *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    for (const json_t *c = obj->child; c; c = c->next)
        if (c->key && strcmp(c->key, key) == 0)
            return c;
    return NULL;
}

static geo_type_t geo_type_of(const char *s)
{
    for (int t = GT_POINT; t <= GT_COLLECTION; t++)
        if (strcmp(s, geo_type_names[t]) == 0)
            return (geo_type_t)t;
    return GT_NONE;
}

static inline void box_empty(geo_box_t *b)
{
    b->minx = b->miny = INFINITY;
    b->maxx = b->maxy = -INFINITY;
    b->n    = 0;
}

static inline void box_add(geo_box_t *b, double x, double y)
{
    if (x < b->minx) b->minx = x;
    if (x > b->maxx) b->maxx = x;
    if (y < b->miny) b->miny = y;
    if (y > b->maxy) b->maxy = y;
}

static inline void box_merge(geo_box_t *b, const geo_box_t *o)
{
    box_add(b, o->minx, o->miny);
    box_add(b, o->maxx, o->maxy);
}

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

/* ------------------------------------------------------------ validation */

/* Each scan_* checks one level of RFC 7946 (as clause 4.7 restricts it),
 * grows the bounding box b, and on error sets p (when not NULL) with a detail
 * that names the geometry and what is wrong. `what` is the geometry type name. */

static bool scan_position(const json_t *pos, geo_box_t *b, const char *what, problem_t *p)
{
    if (!json_is_array(pos) || pos->len < 2 || pos->len > 3)
        return problem_set(p, BRD, "Invalid GeoJSON %s: a position must be an array of 2 or 3 numbers "
                           "[longitude, latitude(, altitude)]", what);
    for (const json_t *c = pos->child; c; c = c->next)
        if (!json_is_number(c) || !isfinite(num(c)))
            return problem_set(p, BRD, "Invalid GeoJSON %s: a position must hold numbers only", what);

    double x = num(pos->child), y = num(pos->child->next);
    if (x < -180.0 || x > 180.0)
        return problem_set(p, BRD, "Invalid GeoJSON %s: longitude %g is out of range [-180, 180]", what, x);
    if (y < -90.0 || y > 90.0)
        return problem_set(p, BRD, "Invalid GeoJSON %s: latitude %g is out of range [-90, 90]", what, y);
    box_add(b, x, y);
    b->n++;
    return true;
}

/* An array of at least `min` positions. */
static bool scan_positions(const json_t *arr, uint32_t min, geo_box_t *b, const char *what,
                           const char *elem, problem_t *p)
{
    if (!json_is_array(arr))
        return problem_set(p, BRD, "Invalid GeoJSON %s: %s must be an array of positions", what, elem);
    if (arr->len < min)
        return problem_set(p, BRD, "Invalid GeoJSON %s: %s needs at least %u position%s, it has %u",
                           what, elem, min, min == 1 ? "" : "s", arr->len);
    for (const json_t *c = arr->child; c; c = c->next)
        if (!scan_position(c, b, what, p))
            return false;
    return true;
}

static bool same_position(const json_t *a, const json_t *b)
{
    if (a->len != b->len)
        return false;
    for (const json_t *x = a->child, *y = b->child; x && y; x = x->next, y = y->next)
        if (num(x) != num(y))
            return false;
    return true;
}

/* A Polygon's coordinates: at least one linear ring (shell, then holes), each
 * closed and of at least 4 positions. */
static bool scan_polygon(const json_t *rings, geo_box_t *b, const char *what, problem_t *p)
{
    uint32_t i = 0;

    if (!json_is_array(rings) || rings->len == 0)
        return problem_set(p, BRD, "Invalid GeoJSON %s: a polygon must be a non-empty array of linear rings",
                           what);
    for (const json_t *r = rings->child; r; r = r->next, i++) {
        geo_box_t rb;
        box_empty(&rb);
        if (!json_is_array(r) || (r->child && !json_is_array(r->child)))
            return problem_set(p, BRD, "Invalid GeoJSON %s: linear ring %u must be an array of positions",
                               what, i);
        if (r->len < 4)
            return problem_set(p, BRD, "Invalid GeoJSON %s: linear ring %u has %u positions, "
                               "at least 4 are needed", what, i, r->len);
        if (!scan_positions(r, 4, &rb, what, "a linear ring", p))
            return false;
        const json_t *last = r->child;
        while (last->next)
            last = last->next;
        if (!same_position(r->child, last))
            return problem_set(p, BRD, "Invalid GeoJSON %s: linear ring %u is not closed "
                               "(its first and last positions differ)", what, i);
        if (i == 0)
            box_merge(b, &rb);
        b->n += rb.n;
    }
    return true;
}

/* The coordinates of a geometry of type t. */
static bool scan_coordinates(geo_type_t t, const json_t *c, geo_box_t *b, problem_t *p)
{
    const char *what = geo_type_names[t];

    if (!json_is_array(c))
        return problem_set(p, BRD, "Invalid GeoJSON %s: coordinates must be an array", what);
    switch (t) {
    case GT_POINT:
        return scan_position(c, b, what, p);
    case GT_MULTIPOINT:
        return scan_positions(c, 1, b, what, "coordinates", p);
    case GT_LINESTRING:
        return scan_positions(c, 2, b, what, "a LineString", p);
    case GT_MULTILINESTRING:
        if (c->len == 0)
            return problem_set(p, BRD, "Invalid GeoJSON %s: coordinates must not be empty", what);
        for (const json_t *l = c->child; l; l = l->next)
            if (!scan_positions(l, 2, b, what, "a LineString", p))
                return false;
        return true;
    case GT_POLYGON:
        return scan_polygon(c, b, what, p);
    case GT_MULTIPOLYGON:
        if (c->len == 0)
            return problem_set(p, BRD, "Invalid GeoJSON %s: coordinates must not be empty", what);
        for (const json_t *poly = c->child; poly; poly = poly->next)
            if (!scan_polygon(poly, b, what, p))
                return false;
        return true;
    default:
        return problem_set(p, BRD, "Invalid GeoJSON geometry");
    }
}

static bool scan_geometry(const json_t *g, geo_box_t *b, geo_type_t *type, int depth,
                          bool allow_collection, problem_t *p)
{
    if (!json_is_object(g))
        return problem_set(p, BRD, "Invalid GeoJSON geometry: it must be a JSON object "
                           "with \"type\" and \"coordinates\"");

    const json_t *jt = member(g, "type");
    if (!jt)
        return problem_set(p, BRD, "Invalid GeoJSON geometry: the \"type\" member is missing");
    if (!json_is_string(jt))
        return problem_set(p, BRD, "Invalid GeoJSON geometry: \"type\" must be a string");

    geo_type_t t = geo_type_of(jt->str);
    if (t == GT_NONE)
        return problem_set(p, BRD, "Invalid GeoJSON geometry: unknown type '%.64s' (expected Point, "
                           "MultiPoint, LineString, MultiLineString, Polygon or MultiPolygon)", jt->str);
    *type = t;

    if (t == GT_COLLECTION) {
        if (!allow_collection)
            return problem_set(p, BRD, "Invalid GeoJSON geometry: GeometryCollection is not allowed "
                               "(clause 4.7.1)");
        if (depth >= GEO_MAX_NESTING)
            return problem_set(p, BRD, "Invalid GeoJSON GeometryCollection: nested too deeply");
        const json_t *gs = member(g, "geometries");
        if (!json_is_array(gs))
            return problem_set(p, BRD, "Invalid GeoJSON GeometryCollection: \"geometries\" must be an array");
        for (const json_t *m = gs->child; m; m = m->next) {
            geo_type_t mt;
            if (!scan_geometry(m, b, &mt, depth + 1, true, p))
                return false;
        }
        return true;
    }

    const json_t *c = member(g, "coordinates");
    if (!c)
        return problem_set(p, BRD, "Invalid GeoJSON %s: the \"coordinates\" member is missing",
                           geo_type_names[t]);
    if (!scan_coordinates(t, c, b, p))
        return false;

    /* RFC 7946, 5: an optional bounding box of 2*n numbers. */
    const json_t *bbox = member(g, "bbox");
    if (bbox) {
        bool ok = json_is_array(bbox) && (bbox->len == 4 || bbox->len == 6);
        for (const json_t *x = ok ? bbox->child : NULL; x; x = x->next)
            ok = ok && json_is_number(x) && isfinite(num(x));
        if (!ok)
            return problem_set(p, BRD, "Invalid GeoJSON %s: \"bbox\" must be an array of 4 or 6 numbers",
                               geo_type_names[t]);
    }
    return true;
}

/* The GEOS budget. Relations between polygons (overlaps above all, which
 * GEOS computes from the full intersection matrix) cost about the product
 * of the two vertex counts: two 40,000-vertex polygons held a worker for 50
 * s, two of 2,000 take 0.1 s. So a geometry with more positions than
 * --maxGeoVertices is refused, as a GeoProperty value and in a geo-query. */
static bool within_budget(const geo_box_t *b, const char *what, const char *where, problem_t *p)
{
    uint64_t max = cr_config.max_geo_vertices > 0 ? (uint64_t)cr_config.max_geo_vertices : UINT64_MAX;
    if (b->n <= max)
        return true;
    return problem_set(p, BRD, "%s: the %s has %llu positions, more than the %llu allowed (--maxGeoVertices)",
                       where, what, (unsigned long long)b->n, (unsigned long long)max);
}

bool geo_validate(const json_t *geometry, problem_t *p)
{
    geo_box_t  b;
    geo_type_t t;

    box_empty(&b);
    return scan_geometry(geometry, &b, &t, 0, false, p) &&
           within_budget(&b, geo_type_names[t], "GeoProperty value", p);
}

bool geo_bbox(const json_t *geometry, double box[4])
{
    geo_box_t  b;
    geo_type_t t;

    box_empty(&b);
    if (!scan_geometry(geometry, &b, &t, 0, false, NULL))
        return false;
    box[0] = b.minx; box[1] = b.miny; box[2] = b.maxx; box[3] = b.maxy;
    return true;
}

/* ------------------------------------------------------ point in polygon */

enum { LOC_OUT = 0, LOC_IN = 1, LOC_ON = 2 };

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
        if (edge_wind(num(a->child), num(a->child->next), num(b->child), num(b->child->next),
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
static int polys_locate_xy(const geoq_t *g, double px, double py)
{
    int res = LOC_OUT;

    for (uint32_t i = 0; i < g->n_polys; i++) {
        int loc = poly_locate_xy(&g->polys[i], px, py);
        if (loc == LOC_IN)
            return LOC_IN;
        if (loc == LOC_ON)
            res = LOC_ON;
    }
    return res;
}

static int geometry_locate_json(geo_type_t t, const json_t *coords, double px, double py)
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

/* ------------------------------------------------------------------ GEOS */

static pthread_once_t             geos_once = PTHREAD_ONCE_INIT;
static pthread_key_t              geos_key;
static bool                       geos_key_ok;
static _Thread_local GEOSContextHandle_t geos_tl_handle;
static _Thread_local char         geos_tl_error[256];

static void geos_on_error(const char *msg, void *ud)
{
    CR_UNUSED(ud);
    snprintf(geos_tl_error, sizeof geos_tl_error, "%s", msg ? msg : "unknown error");
    LOG_D("geos: %s", geos_tl_error);
}

static void geos_on_notice(const char *msg, void *ud)
{
    CR_UNUSED(ud);
    LOG_D("geos notice: %s", msg ? msg : "");
}

static void geos_thread_exit(void *h)
{
    geos_tl_handle = NULL;
    GEOS_finish_r((GEOSContextHandle_t)h);
}

static void geos_key_init(void)
{
    geos_key_ok = pthread_key_create(&geos_key, geos_thread_exit) == 0;
}

/* This thread's GEOS context handle, created on first use (GEOS_init_r
 * fails only without memory: that aborts, as every allocation failure). */
static GEOSContextHandle_t geos_handle(void)
{
    if (CR_LIKELY(geos_tl_handle != NULL))
        return geos_tl_handle;

    pthread_once(&geos_once, geos_key_init);
    GEOSContextHandle_t h = GEOS_init_r();
    if (!h)
        cr_oom("GEOS context", 0);
    GEOSContext_setErrorMessageHandler_r(h, geos_on_error, NULL);
    GEOSContext_setNoticeMessageHandler_r(h, geos_on_notice, NULL);
    if (geos_key_ok && pthread_setspecific(geos_key, h) != 0)
        LOG_W("geo: pthread_setspecific failed; the GEOS handle of this thread will leak at exit");
    geos_tl_handle = h;
    return h;
}

static GEOSCoordSequence *geos_seq(GEOSContextHandle_t h, const json_t *positions)
{
    GEOSCoordSequence *seq = GEOSCoordSeq_create_r(h, positions->len, 2);
    unsigned int       i   = 0;

    if (!seq)
        return NULL;
    for (const json_t *pos = positions->child; pos; pos = pos->next, i++) {
        if (!GEOSCoordSeq_setXY_r(h, seq, i, num(pos->child), num(pos->child->next))) {
            GEOSCoordSeq_destroy_r(h, seq);
            return NULL;
        }
    }
    return seq;
}

static void geos_destroy_all(GEOSContextHandle_t h, GEOSGeometry **gs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (gs[i])
            GEOSGeom_destroy_r(h, gs[i]);
}

static GEOSGeometry *geos_linestring(GEOSContextHandle_t h, const json_t *positions)
{
    GEOSCoordSequence *seq = geos_seq(h, positions);
    return seq ? GEOSGeom_createLineString_r(h, seq) : NULL;   /* takes seq */
}

static GEOSGeometry *geos_ring(GEOSContextHandle_t h, const json_t *positions)
{
    GEOSCoordSequence *seq = geos_seq(h, positions);
    return seq ? GEOSGeom_createLinearRing_r(h, seq) : NULL;   /* takes seq */
}

static GEOSGeometry *geos_polygon(GEOSContextHandle_t h, const json_t *rings)
{
    GEOSGeometry  *stack[GEO_STACK_PARTS];
    GEOSGeometry **holes = stack;
    size_t         n_holes = rings->len - 1, i = 0;
    GEOSGeometry  *shell, *poly;

    shell = geos_ring(h, rings->child);
    if (!shell)
        return NULL;
    if (n_holes > GEO_STACK_PARTS)
        holes = cr_xcalloc(n_holes, sizeof *holes);
    for (const json_t *r = rings->child->next; r; r = r->next, i++) {
        holes[i] = geos_ring(h, r);
        if (!holes[i]) {
            geos_destroy_all(h, holes, i);
            GEOSGeom_destroy_r(h, shell);
            if (holes != stack)
                free(holes);
            return NULL;
        }
    }
    /* GEOS (>= 3.8) takes ownership of shell and holes, even when it fails. */
    poly = GEOSGeom_createPolygon_r(h, shell, n_holes ? holes : NULL, (unsigned)n_holes);
    if (holes != stack)
        free(holes);
    return poly;
}

static GEOSGeometry *geos_build(GEOSContextHandle_t h, const json_t *geometry, int depth);

/* A Multi* geometry or a collection: each child of `parts` through `part`. */
static GEOSGeometry *geos_multi(GEOSContextHandle_t h, int geos_type, const json_t *parts,
                                geo_type_t part_type, int depth)
{
    GEOSGeometry  *stack[GEO_STACK_PARTS];
    GEOSGeometry **gs = stack;
    size_t         n = parts->len, i = 0;
    GEOSGeometry  *res;

    if (n > GEO_STACK_PARTS)
        gs = cr_xcalloc(n, sizeof *gs);
    for (const json_t *c = parts->child; c; c = c->next, i++) {
        switch (part_type) {
        case GT_POINT:
            gs[i] = GEOSGeom_createPointFromXY_r(h, num(c->child), num(c->child->next));
            break;
        case GT_LINESTRING:
            gs[i] = geos_linestring(h, c);
            break;
        case GT_POLYGON:
            gs[i] = geos_polygon(h, c);
            break;
        default:
            gs[i] = geos_build(h, c, depth + 1);
            break;
        }
        if (!gs[i]) {
            geos_destroy_all(h, gs, i);
            if (gs != stack)
                free(gs);
            return NULL;
        }
    }
    res = GEOSGeom_createCollection_r(h, geos_type, gs, (unsigned)n);   /* takes the parts */
    if (gs != stack)
        free(gs);
    return res;
}

/* The GEOS geometry of coordinates of type t (already validated). */
static GEOSGeometry *geos_from_coords(GEOSContextHandle_t h, geo_type_t t, const json_t *c)
{
    switch (t) {
    case GT_POINT:           return GEOSGeom_createPointFromXY_r(h, num(c->child), num(c->child->next));
    case GT_MULTIPOINT:      return geos_multi(h, GEOS_MULTIPOINT, c, GT_POINT, 0);
    case GT_LINESTRING:      return geos_linestring(h, c);
    case GT_MULTILINESTRING: return geos_multi(h, GEOS_MULTILINESTRING, c, GT_LINESTRING, 0);
    case GT_POLYGON:         return geos_polygon(h, c);
    case GT_MULTIPOLYGON:    return geos_multi(h, GEOS_MULTIPOLYGON, c, GT_POLYGON, 0);
    default:                 return NULL;
    }
}

/* The GEOS geometry of a validated GeoJSON geometry object. */
static GEOSGeometry *geos_build(GEOSContextHandle_t h, const json_t *geometry, int depth)
{
    const json_t *jt = member(geometry, "type");
    geo_type_t    t  = jt && json_is_string(jt) ? geo_type_of(jt->str) : GT_NONE;

    if (t == GT_COLLECTION) {
        const json_t *gs = member(geometry, "geometries");
        if (!gs || depth >= GEO_MAX_NESTING)
            return NULL;
        return geos_multi(h, GEOS_GEOMETRYCOLLECTION, gs, GT_COLLECTION, depth);
    }
    const json_t *c = member(geometry, "coordinates");
    return c ? geos_from_coords(h, t, c) : NULL;
}

static void geoq_release(void *ptr)
{
    geoq_t             *g = ptr;
    GEOSContextHandle_t h = (g->prep || g->geos) ? geos_handle() : NULL;

    if (h) {
        if (g->prep)
            GEOSPreparedGeom_destroy_r(h, g->prep);
        if (g->geos)
            GEOSGeom_destroy_r(h, g->geos);
    }
    g->prep = NULL;
    g->geos = NULL;
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

/* Flat arrays of the reference (Multi)Polygon for the point-in-polygon path. */
static void build_polys(arena_t *a, geoq_t *g, const json_t *coords)
{
    const json_t *first = g->type == GT_POLYGON ? coords : coords->child;
    uint32_t      n     = g->type == GT_POLYGON ? 1 : coords->len;
    uint32_t      i     = 0;

    g->polys   = arena_calloc(a, n * sizeof *g->polys);
    g->n_polys = n;
    for (const json_t *rings = first; rings && i < n; rings = rings->next, i++) {
        geo_poly_t *poly = &g->polys[i];
        uint32_t    k    = 0;

        poly->n_rings = rings->len;
        poly->rings   = arena_alloc(a, rings->len * sizeof *poly->rings);
        box_empty(&poly->box);
        for (const json_t *r = rings->child; r; r = r->next, k++) {
            double  *xy = arena_alloc(a, (size_t)r->len * 2 * sizeof *xy);
            uint32_t j  = 0;
            for (const json_t *pos = r->child; pos; pos = pos->next, j++) {
                xy[2 * j]     = num(pos->child);
                xy[2 * j + 1] = num(pos->child->next);
                if (k == 0)
                    box_add(&poly->box, xy[2 * j], xy[2 * j + 1]);
            }
            poly->rings[k].xy = xy;
            poly->rings[k].n  = r->len;
        }
    }
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
    box_empty(&g->box);
    if (!scan_coordinates(t, coords, &g->box, p) ||
        !within_budget(&g->box, geo_type_names[t], "geo-query", p))
        return NULL;

    g->property = geoq_property_name(a, geoproperty, ctx);
    if (!g->property) {
        problem_set(p, BRD, "Invalid geoproperty '%.64s'", geoproperty);
        return NULL;
    }

    if (t == GT_POINT) {
        g->px = num(coords->child);
        g->py = num(coords->child->next);
    } else if (t == GT_POLYGON || t == GT_MULTIPOLYGON) {
        build_polys(a, g, coords);
    }
    if (rel == GR_NEAR_MAX || rel == GR_NEAR_MIN)
        box_expand_m(&g->box, dist, &g->near_box);

    /* GEOS: the reference geometry and its prepared form, freed with the arena. */
    GEOSContextHandle_t h = geos_handle();
    if (pthread_mutex_init(&g->lock, NULL) != 0) {
        problem_set(p, PB_INTERNAL_ERROR, "geo-query: cannot create a lock");
        return NULL;
    }
    g->lock_ready = true;
    arena_on_free(a, geoq_release, g);

    geos_tl_error[0] = '\0';
    g->geos = geos_from_coords(h, t, coords);
    if (!g->geos) {
        problem_set(p, BRD, "Invalid %s coordinates: %s", geo_type_names[t],
                    geos_tl_error[0] ? geos_tl_error : "rejected by the geometry engine");
        return NULL;
    }
    /* Every query geometry must be valid for GEOS: beyond self-intersecting
     * polygons, a line whose points are all the same ("Too few points") makes
     * GEOS 3.11's prepared nearest-points crash (found by fuzz_geo). */
    if (t != GT_POINT && t != GT_MULTIPOINT) {
        char valid = GEOSisValid_r(h, g->geos);
        if (valid != 1) {
            char *why = valid == 0 ? GEOSisValidReason_r(h, g->geos) : NULL;
            problem_set(p, BRD, "Invalid %s: %s", geo_type_names[t],
                        why ? why : "not a valid geometry (e.g. self-intersecting rings)");
            if (why)
                GEOSFree_r(h, why);
            return NULL;
        }
    }
    g->prep = GEOSPrepare_r(h, g->geos);
    if (!g->prep) {
        problem_set(p, PB_INTERNAL_ERROR, "geo-query: cannot prepare the geometry");
        return NULL;
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

/* -------------------------------------------------------------- matching */

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

/* Through GEOS; -1 when GEOS fails (no match then). */
static int match_geos(const geoq_t *g, const json_t *value)
{
    GEOSContextHandle_t h = geos_handle();
    GEOSGeometry       *t;
    int                 r = -1;

    if (!g->prep)
        return -1;
    t = geos_build(h, value, 0);
    if (!t)
        return -1;

    pthread_mutex_lock((pthread_mutex_t *)&g->lock);
    switch (g->rel) {
    case GR_WITHIN:     r = GEOSPreparedContains_r(h, g->prep, t); break;   /* R contains T */
    case GR_CONTAINS:   r = GEOSPreparedWithin_r(h, g->prep, t); break;     /* R within T */
    case GR_INTERSECTS: r = GEOSPreparedIntersects_r(h, g->prep, t); break;
    case GR_DISJOINT:   r = GEOSPreparedDisjoint_r(h, g->prep, t); break;
    case GR_OVERLAPS:   r = GEOSPreparedOverlaps_r(h, g->prep, t); break;
    case GR_EQUALS:     r = GEOSEquals_r(h, g->geos, t); break;
    case GR_NEAR_MAX:
    case GR_NEAR_MIN: {
        /* an entity's degenerate geometry takes the unprepared (and robust) path */
        GEOSCoordSequence *cs = GEOSisValid_r(h, t) == 1 ? GEOSPreparedNearestPoints_r(h, g->prep, t)
                                                          : GEOSNearestPoints_r(h, g->geos, t);
        double x0, y0, x1, y1;
        if (cs && GEOSCoordSeq_getXY_r(h, cs, 0, &x0, &y0) && GEOSCoordSeq_getXY_r(h, cs, 1, &x1, &y1)) {
            double d = haversine_m(x0, y0, x1, y1);
            r = g->rel == GR_NEAR_MAX ? d <= g->distance : d > g->distance;
        }
        if (cs)
            GEOSCoordSeq_destroy_r(h, cs);
        break;
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

    box_empty(&eb);
    if (!scan_geometry(value, &eb, &et, 0, true, NULL))
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
    const json_t *coords = et == GT_COLLECTION ? NULL : member(value, "coordinates");
    if (et == GT_POINT) {
        double x = num(coords->child), y = num(coords->child->next);
        if (g->type == GT_POINT)
            return match_point_point(g, x, y);
        if (g->polys && g->rel != GR_NEAR_MAX && g->rel != GR_NEAR_MIN)
            return match_by_locate(g->rel, polys_locate_xy(g, x, y), true);
    } else if (g->type == GT_POINT && (et == GT_POLYGON || et == GT_MULTIPOLYGON) &&
               g->rel != GR_NEAR_MAX && g->rel != GR_NEAR_MIN) {
        return match_by_locate(g->rel, geometry_locate_json(et, coords, g->px, g->py), false);
    }

    return match_geos(g, value) == 1;
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
