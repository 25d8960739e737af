/*
 * geojson.c - GeoJSON geometries (RFC 7946, as clause 4.7 restricts them):
 * validation of GeoProperty values and of geo-query geometries, and their
 * bounding boxes.
 *
 * One walk of the JSON tree does both (scan_*): it checks each level and
 * grows the bounding box on the way, so a geometry is read once whether it is
 * stored (geo_validate), indexed (geo_bbox) or matched (geoquery.c scans an
 * entity's value before it trusts it: a value that is not a valid geometry
 * never reaches GEOS and simply does not match).
 *
 * Syntax only: RFC 7946 3.1.6 asks producers for rings that do not
 * self-intersect but does not make them invalid GeoJSON, and 5.7.2.4 accepts
 * every syntactically valid geometry in a query, so topology is not judged
 * here (geoquery.c evaluates a self-intersecting polygon on a made-valid copy).
 *
 * GeometryCollection: RFC 7946 defines it and the walk knows it, but clause
 * 4.7.1 excludes it from GeoProperty values and clause 4.10 from reference
 * geometries, so geo_validate and the query parsers reject it.
 */
#include "geo_int.h"

const char *const geo_type_names[] = {
    [GT_NONE] = "?", [GT_POINT] = "Point", [GT_MULTIPOINT] = "MultiPoint",
    [GT_LINESTRING] = "LineString", [GT_MULTILINESTRING] = "MultiLineString",
    [GT_POLYGON] = "Polygon", [GT_MULTIPOLYGON] = "MultiPolygon",
    [GT_COLLECTION] = "GeometryCollection",
};

geo_type_t geo_type_of(const char *s)
{
    for (int t = GT_POINT; t <= GT_COLLECTION; t++)
        if (strcmp(s, geo_type_names[t]) == 0)
            return (geo_type_t)t;
    return GT_NONE;
}

static inline void box_merge(geo_box_t *b, const geo_box_t *o)
{
    geo_box_add(b, o->minx, o->miny);
    geo_box_add(b, o->maxx, o->maxy);
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
        if (!json_is_number(c) || !isfinite(geo_num(c)))
            return problem_set(p, BRD, "Invalid GeoJSON %s: a position must hold numbers only", what);

    double x = geo_num(pos->child), y = geo_num(pos->child->next);
    if (x < -180.0 || x > 180.0)
        return problem_set(p, BRD, "Invalid GeoJSON %s: longitude %g is out of range [-180, 180]", what, x);
    if (y < -90.0 || y > 90.0)
        return problem_set(p, BRD, "Invalid GeoJSON %s: latitude %g is out of range [-90, 90]", what, y);
    geo_box_add(b, x, y);
    b->n++;
    return true;
}

/* An array of at least `min` positions; edges: consecutive positions are
 * edges (a line or a ring), whose antimeridian crossings are noted in b (a
 * ring whose crossings do not cancel out winds around a pole). */
static bool scan_positions(const json_t *arr, uint32_t min, bool edges, geo_box_t *b, const char *what,
                           const char *elem, problem_t *p)
{
    const json_t *prev = NULL;
    int           wind = 0;

    if (!json_is_array(arr))
        return problem_set(p, BRD, "Invalid GeoJSON %s: %s must be an array of positions", what, elem);
    if (arr->len < min)
        return problem_set(p, BRD, "Invalid GeoJSON %s: %s needs at least %u position%s, it has %u",
                           what, elem, min, min == 1 ? "" : "s", arr->len);
    for (const json_t *c = arr->child; c; prev = c, c = c->next) {
        if (!scan_position(c, b, what, p))
            return false;
        if (edges && prev) {
            double x1 = geo_num(prev->child), x2 = geo_num(c->child);
            if (geo_edge_wraps(x1, x2)) {
                b->wraps = true;
                wind += x2 > x1 ? -1 : 1;
            }
        }
    }
    if (min == 4 && wind != 0)      /* a linear ring */
        b->polar = true;
    return true;
}

static bool same_position(const json_t *a, const json_t *b)
{
    if (a->len != b->len)
        return false;
    for (const json_t *x = a->child, *y = b->child; x && y; x = x->next, y = y->next)
        if (geo_num(x) != geo_num(y))
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
        geo_box_empty(&rb);
        if (!json_is_array(r) || (r->child && !json_is_array(r->child)))
            return problem_set(p, BRD, "Invalid GeoJSON %s: linear ring %u must be an array of positions",
                               what, i);
        if (r->len < 4)
            return problem_set(p, BRD, "Invalid GeoJSON %s: linear ring %u has %u positions, "
                               "at least 4 are needed", what, i, r->len);
        if (!scan_positions(r, 4, true, &rb, what, "a linear ring", p))
            return false;
        const json_t *last = r->child;
        while (last->next)
            last = last->next;
        if (!same_position(r->child, last))
            return problem_set(p, BRD, "Invalid GeoJSON %s: linear ring %u is not closed "
                               "(its first and last positions differ)", what, i);
        if (i == 0)
            box_merge(b, &rb);
        b->wraps |= rb.wraps;
        b->polar |= rb.polar;
        b->n += rb.n;
    }
    return true;
}

static bool scan_coordinates(geo_type_t t, const json_t *c, geo_box_t *b, problem_t *p);

/* The coordinates of a geometry of type t. */
bool geo_scan_coordinates(geo_type_t t, const json_t *c, geo_box_t *b, problem_t *p)
{
    if (!scan_coordinates(t, c, b, p))
        return false;
    /* A geometry crossing the antimeridian is evaluated cut there
     * (geo_wrap.c): its parts reach both -180 and 180. */
    if (geo_box_wraps(b)) {
        b->minx = -180.0;
        b->maxx = 180.0;
    }
    return true;
}

static bool scan_coordinates(geo_type_t t, const json_t *c, geo_box_t *b, problem_t *p)
{
    const char *what = geo_type_names[t];

    if (!json_is_array(c))
        return problem_set(p, BRD, "Invalid GeoJSON %s: coordinates must be an array", what);
    switch (t) {
    case GT_POINT:
        return scan_position(c, b, what, p);
    case GT_MULTIPOINT:
        return scan_positions(c, 1, false, b, what, "coordinates", p);
    case GT_LINESTRING:
        return scan_positions(c, 2, true, b, what, "a LineString", p);
    case GT_MULTILINESTRING:
        if (c->len == 0)
            return problem_set(p, BRD, "Invalid GeoJSON %s: coordinates must not be empty", what);
        for (const json_t *l = c->child; l; l = l->next)
            if (!scan_positions(l, 2, true, b, what, "a LineString", p))
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

bool geo_scan_geometry(const json_t *g, geo_box_t *b, geo_type_t *type, int depth,
                       bool allow_collection, problem_t *p)
{
    if (!json_is_object(g))
        return problem_set(p, BRD, "Invalid GeoJSON geometry: it must be a JSON object "
                           "with \"type\" and \"coordinates\"");

    const json_t *jt = geo_member(g, "type");
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
        const json_t *gs = geo_member(g, "geometries");
        if (!json_is_array(gs))
            return problem_set(p, BRD, "Invalid GeoJSON GeometryCollection: \"geometries\" must be an array");
        for (const json_t *m = gs->child; m; m = m->next) {
            geo_type_t mt;
            if (!geo_scan_geometry(m, b, &mt, depth + 1, true, p))
                return false;
        }
        return true;
    }

    const json_t *c = geo_member(g, "coordinates");
    if (!c)
        return problem_set(p, BRD, "Invalid GeoJSON %s: the \"coordinates\" member is missing",
                           geo_type_names[t]);
    if (!geo_scan_coordinates(t, c, b, p))
        return false;

    /* RFC 7946, 5: an optional bounding box of 2*n numbers. */
    const json_t *bbox = geo_member(g, "bbox");
    if (bbox) {
        bool ok = json_is_array(bbox) && (bbox->len == 4 || bbox->len == 6);
        for (const json_t *x = ok ? bbox->child : NULL; x; x = x->next)
            ok = ok && json_is_number(x) && isfinite(geo_num(x));
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
bool geo_within_budget(const geo_box_t *b, const char *what, const char *where, problem_t *p)
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

    geo_box_empty(&b);
    return geo_scan_geometry(geometry, &b, &t, 0, false, p) &&
           geo_within_budget(&b, geo_type_names[t], "GeoProperty value", p);
}

bool geo_bbox(const json_t *geometry, double box[4])
{
    geo_box_t  b;
    geo_type_t t;

    geo_box_empty(&b);
    if (!geo_scan_geometry(geometry, &b, &t, 0, false, NULL))
        return false;
    box[0] = b.minx; box[1] = b.miny; box[2] = b.maxx; box[3] = b.maxy;
    return true;
}
