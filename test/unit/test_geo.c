/*
 * test_geo.c - unit tests of src/model/geojson.c and geoquery.c: GeoJSON validation (4.7,
 * RFC 7946), geo-query parsing (4.10, 6.4.3.2) and matching, on the fast
 * paths and through GEOS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "model/model.h"

#define FIXTURE_ARENA_SIZE 8192
#include "arena_fixture.h"

static json_t *J(const char *text)
{
    char    err[128];
    json_t *j = json_parse_copy(A, text, strlen(text), NULL, err, sizeof err);
    if (!j)
        fail_msg("bad test JSON %s: %s", text, err);
    return j;
}

/* A draft entity with one attribute `name` of kind `kind` whose value is the
 * GeoJSON text `geometry`. */
static cr_entity_t *entity_with(const char *name, attr_kind_t kind, const char *geometry)
{
    cr_entity_t *e  = arena_calloc(A, sizeof *e);
    cr_attr_t   *at = arena_calloc(A, sizeof *at);
    const char **ts = arena_alloc(A, sizeof *ts);

    ts[0]           = intern_cstr("https://uri.etsi.org/ngsi-ld/default-context/Thing");
    e->id           = "urn:ngsi-ld:Thing:1";
    e->types        = ts;
    e->n_types      = 1;
    e->created_at   = e->modified_at = 0;
    at->name        = intern_cstr(name);
    at->kind        = (uint8_t)kind;
    at->value       = J(geometry);
    at->observed_at = CR_NO_TIME;
    e->attrs        = at;
    e->n_attrs      = 1;
    return e;
}

#define LOCATION "https://uri.etsi.org/ngsi-ld/location"

static cr_entity_t *located(const char *geometry)
{
    return entity_with(LOCATION, ATTR_GEOPROPERTY, geometry);
}

static geoq_t *Q(const char *georel, const char *geometry, const char *coords)
{
    problem_t     p = { 0 };
    geoq_params_t gp = { .georel = georel, .geometry = geometry, .coordinates = coords };
    geoq_t       *g = geoq_parse(A, &gp, NULL, &p);
    if (!g)
        fail_msg("geo-query %s %s %s rejected: %s", georel, geometry, coords, p.detail);
    return g;
}

/* The query is rejected with BadRequestData whose detail contains `needle`. */
static void Q_bad(const char *georel, const char *geometry, const char *coords, const char *needle)
{
    problem_t     p = { 0 };
    geoq_params_t gp = { .georel = georel, .geometry = geometry, .coordinates = coords };
    geoq_t       *g = geoq_parse(A, &gp, NULL, &p);
    if (g)
        fail_msg("geo-query %s %s %s accepted", georel, geometry, coords);
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    if (!strstr(p.detail, needle))
        fail_msg("detail '%s' does not mention '%s'", p.detail, needle);
}

static bool M(const char *georel, const char *geometry, const char *coords, const char *target)
{
    return geoq_match(Q(georel, geometry, coords), located(target));
}

/* ------------------------------------------------------------ validation */

static void valid_ok(const char *text)
{
    problem_t p = { 0 };
    if (!geo_validate(J(text), &p))
        fail_msg("%s rejected: %s", text, p.detail);
}

static void valid_bad(const char *text, const char *needle)
{
    problem_t p = { 0 };
    if (geo_validate(J(text), &p))
        fail_msg("%s accepted", text);
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    if (!strstr(p.detail, needle))
        fail_msg("detail '%s' does not mention '%s'", p.detail, needle);
}

static void test_validate_good(void **state)
{
    (void)state;
    valid_ok("{\"type\":\"Point\",\"coordinates\":[-3.7038,40.4168]}");
    valid_ok("{\"type\":\"Point\",\"coordinates\":[-3.7038,40.4168,650.5]}");
    valid_ok("{\"type\":\"Point\",\"coordinates\":[180,-90]}");
    valid_ok("{\"coordinates\":[1,2],\"type\":\"Point\",\"bbox\":[1,2,1,2]}");
    valid_ok("{\"type\":\"MultiPoint\",\"coordinates\":[[1,2],[3,4]]}");
    valid_ok("{\"type\":\"LineString\",\"coordinates\":[[1,2],[3,4]]}");
    valid_ok("{\"type\":\"MultiLineString\",\"coordinates\":[[[1,2],[3,4]],[[5,6],[7,8],[9,9]]]}");
    valid_ok("{\"type\":\"Polygon\",\"coordinates\":[[[100,0],[101,0],[101,1],[100,1],[100,0]]]}");
    valid_ok("{\"type\":\"Polygon\",\"coordinates\":[[[0,0],[10,0],[10,10],[0,10],[0,0]],"
             "[[2,2],[2,4],[4,4],[4,2],[2,2]]]}");
    valid_ok("{\"type\":\"MultiPolygon\",\"coordinates\":[[[[0,0],[1,0],[1,1],[0,0]]],"
             "[[[5,5],[6,5],[6,6],[5,5]]]]}");
}

static void test_validate_bad(void **state)
{
    (void)state;
    valid_bad("[1,2]", "JSON object");
    valid_bad("\"Point\"", "JSON object");
    valid_bad("{\"coordinates\":[1,2]}", "\"type\" member is missing");
    valid_bad("{\"type\":7,\"coordinates\":[1,2]}", "\"type\" must be a string");
    valid_bad("{\"type\":\"Pointy\",\"coordinates\":[1,2]}", "unknown type 'Pointy'");
    valid_bad("{\"type\":\"point\",\"coordinates\":[1,2]}", "unknown type");
    valid_bad("{\"type\":\"GeometryCollection\",\"geometries\":[]}", "GeometryCollection is not allowed");
    valid_bad("{\"type\":\"Point\"}", "\"coordinates\" member is missing");
    valid_bad("{\"type\":\"Point\",\"coordinates\":\"[1,2]\"}", "coordinates must be an array");
    valid_bad("{\"type\":\"Point\",\"coordinates\":[1]}", "2 or 3 numbers");
    valid_bad("{\"type\":\"Point\",\"coordinates\":[1,2,3,4]}", "2 or 3 numbers");
    valid_bad("{\"type\":\"Point\",\"coordinates\":[1,\"2\"]}", "numbers only");
    valid_bad("{\"type\":\"Point\",\"coordinates\":[[1,2],3]}", "numbers only");
    valid_bad("{\"type\":\"Point\",\"coordinates\":[[1,2]]}", "2 or 3 numbers");
    valid_bad("{\"type\":\"Point\",\"coordinates\":[180.5,0]}", "longitude 180.5 is out of range");
    valid_bad("{\"type\":\"Point\",\"coordinates\":[0,-91]}", "latitude -91 is out of range");
    valid_bad("{\"type\":\"Point\",\"coordinates\":[1,2],\"bbox\":[1,2]}", "bbox");
    valid_bad("{\"type\":\"MultiPoint\",\"coordinates\":[]}", "at least 1 position");
    valid_bad("{\"type\":\"MultiPoint\",\"coordinates\":[1,2]}", "2 or 3 numbers");
    valid_bad("{\"type\":\"LineString\",\"coordinates\":[[1,2]]}", "at least 2 positions");
    valid_bad("{\"type\":\"LineString\",\"coordinates\":[[1,2],[200,3]]}", "longitude 200");
    valid_bad("{\"type\":\"MultiLineString\",\"coordinates\":[]}", "must not be empty");
    valid_bad("{\"type\":\"MultiLineString\",\"coordinates\":[[[1,2],[3,4]],[[1,2]]]}",
              "at least 2 positions");
    valid_bad("{\"type\":\"Polygon\",\"coordinates\":[]}", "non-empty array of linear rings");
    valid_bad("{\"type\":\"Polygon\",\"coordinates\":[[[0,0],[1,0],[0,0]]]}", "has 3 positions");
    valid_bad("{\"type\":\"Polygon\",\"coordinates\":[[[0,0],[1,0],[1,1],[0,1]]]}", "ring 0 is not closed");
    valid_bad("{\"type\":\"Polygon\",\"coordinates\":[[[0,0],[10,0],[10,10],[0,0]],"
              "[[1,1],[2,1],[2,2],[1,1.5]]]}", "ring 1 is not closed");
    valid_bad("{\"type\":\"Polygon\",\"coordinates\":[[0,0],[1,0],[1,1],[0,0]]}", "linear ring 0 must be");
    valid_bad("{\"type\":\"MultiPolygon\",\"coordinates\":[]}", "must not be empty");
    valid_bad("{\"type\":\"MultiPolygon\",\"coordinates\":[[[0,0],[1,0],[1,1],[0,0]]]}", "linear ring");
}

static void test_bbox(void **state)
{
    double b[4];
    (void)state;

    assert_true(geo_bbox(J("{\"type\":\"Polygon\",\"coordinates\":[[[0,0],[10,0],[10,5],[0,0]]]}"), b));
    assert_true(b[0] == 0 && b[1] == 0 && b[2] == 10 && b[3] == 5);
    assert_false(geo_bbox(J("{\"type\":\"Point\"}"), b));

    geoq_t *g = Q("within", "Polygon", "[[[0,0],[10,0],[10,5],[0,0]]]");
    assert_true(geoq_bbox(g, b));
    assert_true(b[2] == 10 && b[3] == 5);
    assert_false(geoq_bbox(Q("disjoint", "Point", "[1,2]"), b));
    assert_false(geoq_bbox(Q("near;minDistance==10", "Point", "[1,2]"), b));

    /* near;maxDistance: ~1 degree of latitude is 111195 m */
    assert_true(geoq_bbox(Q("near;maxDistance==111195", "Point", "[0,0]"), b));
    assert_true(fabs(b[1] + 1.0) < 1e-3 && fabs(b[3] - 1.0) < 1e-3);
    assert_true(fabs(b[0] + 1.0) < 1e-3 && fabs(b[2] - 1.0) < 1e-3);
    /* At 60 degrees the longitude span doubles. */
    assert_true(geoq_bbox(Q("near;maxDistance==111195", "Point", "[0,60]"), b));
    assert_true(fabs(b[2] - 2.0) < 0.01);
    /* Across a pole: all longitudes. */
    assert_true(geoq_bbox(Q("near;maxDistance==200000", "Point", "[0,89.5]"), b));
    assert_true(isinf(b[0]) && isinf(b[2]));
    assert_string_equal(geoq_property(g), LOCATION);
}

/* ------------------------------------------------------------------ near */

/* Puerta del Sol and a point 0.01 degrees north on the same meridian:
 * 0.01 * pi / 180 * 6371008.8 = 1111.95 m. Sol to Plaza de Cibeles
 * (-3.6931, 40.4193): 947.5 m by the haversine formula. */
#define SOL "[-3.7038,40.4168]"
#define SOL_N "{\"type\":\"Point\",\"coordinates\":[-3.7038,40.4268]}"
#define CIBELES "{\"type\":\"Point\",\"coordinates\":[-3.6931,40.4193]}"

static void test_near_points(void **state)
{
    (void)state;
    assert_true(M("near;maxDistance==1112", "Point", SOL, SOL_N));
    assert_false(M("near;maxDistance==1111.9", "Point", SOL, SOL_N));
    assert_true(M("near;minDistance==1111.9", "Point", SOL, SOL_N));
    assert_false(M("near;minDistance==1112", "Point", SOL, SOL_N));

    assert_true(M("near;maxDistance==950", "Point", SOL, CIBELES));
    assert_false(M("near;maxDistance==935", "Point", SOL, CIBELES));
    assert_true(M("near;minDistance==935", "Point", SOL, CIBELES));
    assert_false(M("near;minDistance==9.5e2", "Point", SOL, CIBELES));
    assert_true(M("near;maxDistance==1E3", "Point", SOL, CIBELES));

    /* Far away: rejected on the box (maxDistance) / accepted on it (minDistance). */
    assert_false(M("near;maxDistance==2000", "Point", SOL, "{\"type\":\"Point\",\"coordinates\":[2.17,41.38]}"));
    assert_true(M("near;minDistance==2000", "Point", SOL, "{\"type\":\"Point\",\"coordinates\":[2.17,41.38]}"));
    /* Same point */
    assert_true(M("near;maxDistance==1", "Point", SOL, "{\"type\":\"Point\",\"coordinates\":" SOL "}"));
}

static void test_near_geos(void **state)
{
    (void)state;
    /* A street running east-west 0.01 degrees north of Sol: nearest point due north. */
    const char *street = "{\"type\":\"LineString\",\"coordinates\":[[-3.72,40.4268],[-3.69,40.4268]]}";
    assert_true(M("near;maxDistance==1115", "Point", SOL, street));
    assert_false(M("near;maxDistance==1100", "Point", SOL, street));
    assert_true(M("near;minDistance==1100", "Point", SOL, street));
    assert_false(M("near;minDistance==1115", "Point", SOL, street));

    /* A polygon reference and a point entity: 0.01 degree of latitude south of its edge. */
    const char *square = "[[[-3.71,40.4268],[-3.69,40.4268],[-3.69,40.44],[-3.71,40.44],[-3.71,40.4268]]]";
    assert_true(M("near;maxDistance==1115", "Polygon", square, "{\"type\":\"Point\",\"coordinates\":" SOL "}"));
    assert_false(M("near;maxDistance==1100", "Polygon", square, "{\"type\":\"Point\",\"coordinates\":" SOL "}"));
    /* A point inside the polygon is at distance 0. */
    assert_true(M("near;maxDistance==1", "Polygon", square,
                  "{\"type\":\"Point\",\"coordinates\":[-3.7,40.43]}"));
}

/* --------------------------------------------------- polygons and points */

#define SQUARE "[[[0,0],[10,0],[10,10],[0,10],[0,0]]]"
#define HOLED  "[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[4,4],[6,4],[6,6],[4,6],[4,4]]]"
#define PT(x, y) "{\"type\":\"Point\",\"coordinates\":[" #x "," #y "]}"

static void test_point_in_polygon(void **state)
{
    (void)state;
    assert_true(M("within", "Polygon", SQUARE, PT(5, 5)));
    assert_false(M("within", "Polygon", SQUARE, PT(15, 5)));
    assert_false(M("within", "Polygon", SQUARE, PT(10, 5)));        /* on the boundary */
    assert_true(M("intersects", "Polygon", SQUARE, PT(10, 5)));
    assert_true(M("intersects", "Polygon", SQUARE, PT(0, 0)));      /* a vertex */
    assert_false(M("disjoint", "Polygon", SQUARE, PT(10, 5)));
    assert_true(M("disjoint", "Polygon", SQUARE, PT(10.0001, 5)));
    assert_false(M("contains", "Polygon", SQUARE, PT(5, 5)));       /* a point contains no polygon */
    assert_false(M("overlaps", "Polygon", SQUARE, PT(5, 5)));
    assert_false(M("equals", "Polygon", SQUARE, PT(5, 5)));

    /* Holes */
    assert_true(M("within", "Polygon", HOLED, PT(2, 2)));
    assert_false(M("within", "Polygon", HOLED, PT(5, 5)));
    assert_false(M("intersects", "Polygon", HOLED, PT(5, 5)));
    assert_true(M("disjoint", "Polygon", HOLED, PT(5, 5)));
    assert_false(M("within", "Polygon", HOLED, PT(4, 5)));          /* on the hole's ring */
    assert_true(M("intersects", "Polygon", HOLED, PT(4, 5)));

    /* MultiPolygon reference */
    const char *two = "[[[[0,0],[1,0],[1,1],[0,1],[0,0]]],[[[5,5],[6,5],[6,6],[5,6],[5,5]]]]";
    assert_true(M("within", "MultiPolygon", two, PT(5.5, 5.5)));
    assert_false(M("within", "MultiPolygon", two, PT(3, 3)));
    assert_true(M("disjoint", "MultiPolygon", two, PT(3, 3)));

    /* A concave polygon (a U shape): the notch is outside. */
    const char *u = "[[[0,0],[3,0],[3,3],[2,3],[2,1],[1,1],[1,3],[0,3],[0,0]]]";
    assert_true(M("within", "Polygon", u, PT(0.5, 2)));
    assert_false(M("within", "Polygon", u, PT(1.5, 2)));
    assert_true(M("within", "Polygon", u, PT(1.5, 0.5)));

    /* Point reference, polygon entity: the fast path in the other direction. */
    const char *ent = "{\"type\":\"Polygon\",\"coordinates\":" HOLED "}";
    assert_true(M("contains", "Point", "[2,2]", ent));
    assert_false(M("contains", "Point", "[5,5]", ent));
    assert_false(M("contains", "Point", "[10,5]", ent));
    assert_true(M("intersects", "Point", "[10,5]", ent));
    assert_false(M("within", "Point", "[2,2]", ent));
    assert_true(M("disjoint", "Point", "[5,5]", ent));
}

static void test_point_point(void **state)
{
    (void)state;
    assert_true(M("equals", "Point", "[1,2]", PT(1, 2)));
    assert_true(M("equals", "Point", "[1,2]", PT(1.0, 2.0)));
    assert_false(M("equals", "Point", "[1,2]", PT(1, 2.000001)));
    assert_true(M("within", "Point", "[1,2]", PT(1, 2)));
    assert_true(M("intersects", "Point", "[1,2]", PT(1, 2)));
    assert_false(M("disjoint", "Point", "[1,2]", PT(1, 2)));
    assert_true(M("disjoint", "Point", "[1,2]", PT(2, 1)));
    assert_false(M("overlaps", "Point", "[1,2]", PT(1, 2)));
    /* 3D positions: relations are 2D */
    assert_true(M("equals", "Point", "[1,2,30]", PT(1, 2)));
}

/* ------------------------------------------------------------- via GEOS */

static void test_polygons(void **state)
{
    (void)state;
    const char *inner   = "{\"type\":\"Polygon\",\"coordinates\":[[[1,1],[3,1],[3,3],[1,3],[1,1]]]}";
    const char *over    = "{\"type\":\"Polygon\",\"coordinates\":[[[5,5],[15,5],[15,15],[5,15],[5,5]]]}";
    const char *far     = "{\"type\":\"Polygon\",\"coordinates\":[[[50,50],[51,50],[51,51],[50,50]]]}";
    const char *same    = "{\"type\":\"Polygon\",\"coordinates\":[[[10,0],[10,10],[0,10],[0,0],[10,0]]]}";
    const char *in_hole = "{\"type\":\"Polygon\",\"coordinates\":[[[4.5,4.5],[5.5,4.5],[5.5,5.5],[4.5,4.5]]]}";
    const char *big     = "{\"type\":\"Polygon\",\"coordinates\":[[[-1,-1],[11,-1],[11,11],[-1,11],[-1,-1]]]}";

    assert_true(M("within", "Polygon", SQUARE, inner));
    assert_false(M("within", "Polygon", SQUARE, over));
    assert_false(M("within", "Polygon", SQUARE, far));
    assert_false(M("within", "Polygon", HOLED, in_hole));
    assert_true(M("disjoint", "Polygon", HOLED, in_hole));
    assert_false(M("intersects", "Polygon", HOLED, in_hole));

    assert_true(M("contains", "Polygon", SQUARE, big));
    assert_false(M("contains", "Polygon", SQUARE, inner));
    assert_true(M("contains", "Point", "[5,5]", big));

    assert_true(M("intersects", "Polygon", SQUARE, over));
    assert_false(M("disjoint", "Polygon", SQUARE, over));
    assert_true(M("disjoint", "Polygon", SQUARE, far));

    assert_true(M("overlaps", "Polygon", SQUARE, over));
    assert_false(M("overlaps", "Polygon", SQUARE, inner));
    assert_false(M("overlaps", "Polygon", SQUARE, far));

    assert_true(M("equals", "Polygon", SQUARE, same));
    assert_false(M("equals", "Polygon", SQUARE, inner));

    /* MultiPolygon target */
    const char *mp = "{\"type\":\"MultiPolygon\",\"coordinates\":[[[[1,1],[2,1],[2,2],[1,1]]],"
                     "[[[7,7],[8,7],[8,8],[7,7]]]]}";
    assert_true(M("within", "Polygon", SQUARE, mp));
    assert_false(M("within", "Polygon", "[[[0,0],[5,0],[5,5],[0,5],[0,0]]]", mp));
    assert_true(M("intersects", "Polygon", "[[[0,0],[5,0],[5,5],[0,5],[0,0]]]", mp));
}

static void test_lines(void **state)
{
    (void)state;
    const char *crossing = "{\"type\":\"LineString\",\"coordinates\":[[-5,5],[15,5]]}";
    const char *inside   = "{\"type\":\"LineString\",\"coordinates\":[[1,1],[9,9]]}";
    const char *outside  = "{\"type\":\"LineString\",\"coordinates\":[[11,0],[11,10]]}";
    const char *mls      = "{\"type\":\"MultiLineString\",\"coordinates\":[[[1,1],[2,2]],[[3,3],[4,4]]]}";

    assert_true(M("intersects", "Polygon", SQUARE, crossing));
    assert_false(M("within", "Polygon", SQUARE, crossing));
    assert_true(M("within", "Polygon", SQUARE, inside));
    assert_true(M("within", "Polygon", SQUARE, mls));
    assert_true(M("disjoint", "Polygon", SQUARE, outside));
    assert_false(M("intersects", "Polygon", SQUARE, outside));

    /* Line reference against line target */
    assert_true(M("intersects", "LineString", "[[0,10],[10,0]]", inside));
    assert_true(M("overlaps", "LineString", "[[0,0],[5,5]]", inside));
    assert_true(M("equals", "LineString", "[[9,9],[1,1]]", inside));
    assert_true(M("contains", "LineString", "[[2,2],[3,3]]", inside));
    assert_true(M("contains", "MultiPoint", "[[2,2],[3,3]]", inside));
    assert_false(M("contains", "MultiPoint", "[[2,2],[3,4]]", inside));
    assert_true(M("within", "MultiLineString", "[[[0,0],[5,5]],[[5,5],[10,10]]]", inside));

    /* MultiPoint target */
    assert_true(M("within", "Polygon", SQUARE, "{\"type\":\"MultiPoint\",\"coordinates\":[[1,1],[2,2]]}"));
    assert_false(M("within", "Polygon", SQUARE, "{\"type\":\"MultiPoint\",\"coordinates\":[[1,1],[20,2]]}"));
}

/* ---------------------------------------------------- entity and property */

static void test_entity_property(void **state)
{
    (void)state;
    geoq_t *g = Q("within", "Polygon", SQUARE);

    /* No location: no match, even for disjoint. */
    assert_false(geoq_match(g, entity_with("https://uri.etsi.org/ngsi-ld/default-context/where",
                                           ATTR_GEOPROPERTY, PT(5, 5))));
    assert_false(geoq_match(Q("disjoint", "Polygon", SQUARE),
                            entity_with("https://uri.etsi.org/ngsi-ld/default-context/where",
                                        ATTR_GEOPROPERTY, PT(50, 5))));
    /* A Property named location is not a GeoProperty. */
    assert_false(geoq_match(g, entity_with(LOCATION, ATTR_PROPERTY, PT(5, 5))));
    /* An invalid value never matches, never crashes. */
    assert_false(geoq_match(g, located("{\"type\":\"Point\",\"coordinates\":[5]}")));
    assert_false(geoq_match(g, located("{\"type\":\"Polygon\",\"coordinates\":[[[1,1],[2,2],[1,1]]]}")));
    assert_false(geoq_match(g, located("\"not a geometry\"")));
    assert_false(geoq_match(Q("disjoint", "Polygon", SQUARE), located("{\"type\":\"Point\"}")));

    /* Several instances (datasetIds): any one matching is enough. */
    cr_entity_t *e  = located(PT(50, 50));
    cr_attr_t   *at = arena_calloc(A, 2 * sizeof *at);
    at[0]            = e->attrs[0];
    at[1]            = e->attrs[0];
    at[1].dataset_id = "urn:ngsi-ld:Dataset:2";
    at[1].value      = J(PT(5, 5));
    e->attrs         = at;
    e->n_attrs       = 2;
    assert_true(geoq_match(g, e));

    /* geoproperty: compact names are expanded with the @context. */
    problem_t     p  = { 0 };
    geoq_params_t gp = { .georel = "within", .geometry = "Polygon", .coordinates = SQUARE,
                         .geoproperty = "observationSpace" };
    geoq_t *go = geoq_parse(A, &gp, ld_core(), &p);
    assert_non_null(go);
    assert_string_equal(geoq_property(go), "https://uri.etsi.org/ngsi-ld/observationSpace");
    assert_true(geoq_match(go, entity_with("https://uri.etsi.org/ngsi-ld/observationSpace",
                                           ATTR_GEOPROPERTY, PT(5, 5))));
    assert_false(geoq_match(go, located(PT(5, 5))));
}

/* ----------------------------------------------------------- query errors */

static void test_query_errors(void **state)
{
    (void)state;
    Q_bad("nearby", "Point", "[1,2]", "Invalid georel 'nearby'");
    Q_bad("near", "Point", "[1,2]", "near needs a distance");
    Q_bad("near;", "Point", "[1,2]", "near needs a distance");
    Q_bad("near;maxDistance==0", "Point", "[1,2]", "positive number");
    Q_bad("near;maxDistance==-5", "Point", "[1,2]", "positive number");
    Q_bad("near;maxDistance==abc", "Point", "[1,2]", "positive number");
    Q_bad("near;maxDistance==", "Point", "[1,2]", "positive number");
    Q_bad("near;maxDistance==01", "Point", "[1,2]", "positive number");
    Q_bad("near;maxDistance==1.", "Point", "[1,2]", "positive number");
    Q_bad("near;maxDistance==1e999", "Point", "[1,2]", "positive number");
    Q_bad("near;maxDistance:100", "Point", "[1,2]", "maxDistance==<meters>");
    Q_bad("near;distance==5", "Point", "[1,2]", "maxDistance==<meters>");
    Q_bad("within;maxDistance==5", "Polygon", SQUARE, "takes no modifier");
    Q_bad("WITHIN", "Polygon", SQUARE, "Invalid georel");
    Q_bad(NULL, "Point", "[1,2]", "georel is missing");
    Q_bad("within", NULL, "[1,2]", "geometry is missing");
    Q_bad("within", "Point", NULL, "coordinates is missing");
    Q_bad("within", "Point", "", "coordinates is missing");
    Q_bad(NULL, NULL, NULL, "needs georel, geometry and coordinates");
    Q_bad("within", "Circle", "[1,2]", "Invalid geometry 'Circle'");
    Q_bad("within", "GeometryCollection", "[]", "GeometryCollection");
    Q_bad("within", "Point", "[1,2", "Invalid coordinates");
    Q_bad("within", "Point", "1,2", "Invalid coordinates");
    Q_bad("within", "Point", "[[1,2]]", "Point");
    Q_bad("within", "Point", "[1,91]", "latitude 91");
    Q_bad("within", "Polygon", "[[1,2],[3,4]]", "linear ring 0");
    Q_bad("within", "Polygon", "[[[0,0],[1,0],[1,1],[0,1]]]", "not closed");
    Q_bad("within", "LineString", "[[0,0]]", "at least 2 positions");

    /* geoq_from_json: coordinates as an array or as its text (5.2.13). */
    problem_t p = { 0 };
    geoq_t   *g = geoq_from_json(A, "within", J("\"Polygon\""), J(SQUARE), NULL, NULL, &p);
    assert_non_null(g);
    assert_true(geoq_match(g, located(PT(1, 1))));
    g = geoq_from_json(A, "near;maxDistance==1112", J("\"Point\""), J("\"" SOL "\""), NULL, NULL, &p);
    assert_non_null(g);
    assert_true(geoq_match(g, located(SOL_N)));
    assert_null(geoq_from_json(A, "within", J("7"), J(SQUARE), NULL, NULL, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_null(geoq_from_json(A, "within", J("\"Polygon\""), J("{}"), NULL, NULL, &p));
    assert_null(geoq_from_json(A, "within", J("\"Polygon\""), NULL, NULL, NULL, &p));
    assert_null(geoq_from_json(A, NULL, J("\"Polygon\""), J(SQUARE), NULL, NULL, &p));
}

/* ------------------------------------------------------ threads and arenas */

/* A query shared by all threads, as a subscription's would be. */
static geoq_t *shared_q;

static void *thread_body(void *ud)
{
    int     *ok = ud;
    arena_t *a  = arena_new(4096);

    *ok = 1;
    for (int i = 0; i < 200; i++) {
        const char *inner = "{\"type\":\"Polygon\",\"coordinates\":[[[1,1],[3,1],[3,3],[1,3],[1,1]]]}";
        const char *outer = "{\"type\":\"LineString\",\"coordinates\":[[1,1],[30,3]]}";
        char        e1[64];
        cr_attr_t   sa = { .name = intern_cstr(LOCATION), .kind = ATTR_GEOPROPERTY,
                           .value = json_parse_copy(a, i % 2 ? inner : outer, strlen(i % 2 ? inner : outer),
                                                    NULL, e1, sizeof e1) };
        cr_entity_t se = { .id = "urn:y", .attrs = &sa, .n_attrs = 1 };
        if (geoq_match(shared_q, &se) != (i % 2 == 1))
            *ok = 0;

        problem_t     p  = { 0 };
        geoq_params_t gp = { .georel = "intersects", .geometry = "Polygon", .coordinates = SQUARE };
        geoq_t       *g  = geoq_parse(a, &gp, NULL, &p);
        char          err[64];
        const char   *t  = "{\"type\":\"LineString\",\"coordinates\":[[-5,5],[15,5]]}";
        cr_attr_t     at = { .name = intern_cstr(LOCATION), .kind = ATTR_GEOPROPERTY,
                             .value = json_parse_copy(a, t, strlen(t), NULL, err, sizeof err) };
        cr_entity_t   e  = { .id = "urn:x", .attrs = &at, .n_attrs = 1 };
        if (!g || !geoq_match(g, &e))
            *ok = 0;
        arena_reset(a);   /* frees the GEOS objects */
    }
    arena_free(a);
    return NULL;
}

/* 5.7.2.4: every syntactically valid geometry is evaluated. A bow-tie (its
 * ring crosses itself at (1,1)) is two triangles, left and right, once made
 * valid; equals compares it exactly, whatever vertex its ring starts at. */
#define BOWTIE "[[[0,0],[2,2],[2,0],[0,2],[0,0]]]"
#define POLY(c) "{\"type\":\"Polygon\",\"coordinates\":" c "}"

static void test_self_intersecting(void **state)
{
    (void)state;
    assert_non_null(Q("within", "Polygon", BOWTIE));
    assert_true(M("within", "Polygon", BOWTIE, PT(0.3, 1)));       /* left triangle */
    assert_true(M("within", "Polygon", BOWTIE, PT(1.7, 1)));       /* right triangle */
    assert_false(M("within", "Polygon", BOWTIE, PT(1, 0.3)));      /* between them */
    assert_true(M("intersects", "Polygon", BOWTIE, PT(1, 1)));     /* the crossing */
    assert_true(M("disjoint", "Polygon", BOWTIE, PT(1, 0.3)));
    assert_true(M("contains", "Point", "[0.3,1]", POLY(BOWTIE)));
    assert_true(M("intersects", "Polygon", BOWTIE, POLY(SQUARE)));
    assert_true(M("near;maxDistance==1000", "Polygon", BOWTIE, PT(0.3, 1)));
    /* equals: exact, normalized */
    assert_true(M("equals", "Polygon", BOWTIE, POLY(BOWTIE)));
    assert_true(M("equals", "Polygon", BOWTIE, POLY("[[[2,2],[2,0],[0,2],[0,0],[2,2]]]")));
    assert_false(M("equals", "Polygon", BOWTIE, POLY("[[[0,0],[2,2],[2,0],[0,2.1],[0,0]]]")));
    assert_false(M("equals", "Polygon", SQUARE, POLY(BOWTIE)));
    assert_false(M("equals", "Polygon", BOWTIE, POLY(SQUARE)));
    /* an entity's bow-tie against a valid reference */
    assert_true(M("within", "Polygon", SQUARE, POLY(BOWTIE)));
    assert_true(M("intersects", "Polygon", "[[[0,0.5],[0.5,0.5],[0.5,1.5],[0,1.5],[0,0.5]]]", POLY(BOWTIE)));
    /* a degenerate line (all its points the same) is evaluated too */
    assert_non_null(Q("near;maxDistance==1000", "LineString", "[[1,1],[1,1]]"));
    assert_true(M("near;maxDistance==1000", "LineString", "[[1,1],[1,1]]", PT(1, 1.001)));
    assert_false(M("near;maxDistance==10", "LineString", "[[1,1],[1,1]]", PT(1, 1.001)));
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t th[4];
    int       ok[4];

    shared_q = Q("within", "Polygon", SQUARE);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, thread_body, &ok[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(ok[i], 1);
    }
    shared_q = NULL;   /* freed with A, on this thread */
}

/* issue 10, the GEOS budget: a geometry with more positions than
 * --maxGeoVertices is refused, counting every ring and every part. */
static void test_vertex_budget(void **state)
{
    (void)state;
    cr_config.max_geo_vertices = 9;
    const char *shell_hole = "[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[2,2],[3,2],[3,3],[2,2]]]";   /* 5 + 4 */
    const char *bigger = "[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[2,2],[3,2],[3,3],[2,3],[2,2]]]"; /* 5 + 5 */
    char        text[256];

    snprintf(text, sizeof text, "{\"type\":\"Polygon\",\"coordinates\":%s}", shell_hole);
    valid_ok(text);
    assert_non_null(Q("intersects", "Polygon", shell_hole));
    snprintf(text, sizeof text, "{\"type\":\"Polygon\",\"coordinates\":%s}", bigger);
    valid_bad(text, "10 positions, more than the 9 allowed (--maxGeoVertices)");
    Q_bad("intersects", "Polygon", bigger, "geo-query: the Polygon has 10 positions");
    snprintf(text, sizeof text, "{\"type\":\"MultiPolygon\",\"coordinates\":[%s,%s]}", shell_hole, shell_hole);
    valid_bad(text, "MultiPolygon has 18 positions");
    Q_bad("within", "MultiPoint", "[[0,0],[1,1],[2,2],[3,3],[4,4],[5,5],[6,6],[7,7],[8,8],[9,9]]",
          "10 positions");
    cr_config.max_geo_vertices = 0;                     /* 0: no limit */
    valid_ok(text);
}

/* ----------------------------------------------------- the antimeridian */

#define ACROSS "[[[179,10],[-179,10],[-179,-10],[179,-10],[179,10]]]"
#define ACROSS_HOLED "[[[178,10],[-178,10],[-178,-10],[178,-10],[178,10]]," \
                     "[[179.5,1],[-179.5,1],[-179.5,-1],[179.5,-1],[179.5,1]]]"

static void test_antimeridian(void **state)
{
    double b[4];
    (void)state;

    /* an edge crossing +-180: the box of the cut geometry spans every longitude */
    assert_true(geo_bbox(J("{\"type\":\"Polygon\",\"coordinates\":" ACROSS "}"), b));
    assert_true(b[0] == -180 && b[2] == 180 && b[1] == -10 && b[3] == 10);
    assert_true(geo_bbox(J("{\"type\":\"LineString\",\"coordinates\":[[170,1],[-170,2]]}"), b));
    assert_true(b[0] == -180 && b[2] == 180);
    /* exactly 180 degrees apart, or a MultiPoint: no crossing, the box as written */
    assert_true(geo_bbox(J("{\"type\":\"LineString\",\"coordinates\":[[-90,1],[90,2]]}"), b));
    assert_true(b[0] == -90 && b[2] == 90);
    assert_true(geo_bbox(J("{\"type\":\"MultiPoint\",\"coordinates\":[[179,1],[-179,2]]}"), b));
    assert_true(b[0] == -179 && b[2] == 179);

    /* the reference polygon across 180: the point-in-polygon answers of the cut polygon */
    assert_true(M("within", "Polygon", ACROSS, PT(179.5, 0)));
    assert_true(M("within", "Polygon", ACROSS, PT(-179.5, 0)));
    assert_false(M("within", "Polygon", ACROSS, PT(0, 0)));
    assert_false(M("intersects", "Polygon", ACROSS, PT(178, 0)));
    assert_true(M("disjoint", "Polygon", ACROSS, PT(0, 0)));
    assert_false(M("disjoint", "Polygon", ACROSS, PT(-179.9, 5)));
    /* with a hole across it too */
    assert_false(M("within", "Polygon", ACROSS_HOLED, PT(179.9, 0)));
    assert_false(M("within", "Polygon", ACROSS_HOLED, PT(-179.9, 0)));
    assert_true(M("within", "Polygon", ACROSS_HOLED, PT(-178.5, 5)));
    /* a MultiPolygon with one part across */
    assert_true(M("within", "MultiPolygon", "[[[[0,0],[1,0],[1,1],[0,0]]]," ACROSS "]", PT(-179.5, 0)));

    /* entity geometries across 180 */
    const char *zone = "{\"type\":\"Polygon\",\"coordinates\":" ACROSS "}";
    assert_true(M("contains", "Point", "[-179.5,0]", zone));
    assert_true(M("contains", "Point", "[179.5,0]", zone));
    assert_false(M("contains", "Point", "[0,0]", zone));
    assert_true(M("intersects", "Polygon", "[[[-179.8,1],[-179.2,1],[-179.2,2],[-179.8,2],[-179.8,1]]]", zone));
    assert_true(M("within", "Polygon", "[[[170,20],[-170,20],[-170,-20],[170,-20],[170,20]]]", zone));
    assert_false(M("within", "Polygon", "[[[-10,20],[10,20],[10,-20],[-10,-20],[-10,20]]]", zone));
    assert_true(M("intersects", "LineString", "[[179.5,20],[-179.5,-20]]", zone));
    assert_true(M("equals", "MultiPolygon",
                  "[[[[179,10],[180,10],[180,-10],[179,-10],[179,10]]],"
                  "[[[-180,10],[-179,10],[-179,-10],[-180,-10],[-180,10]]]]", zone));

    /* near: great-circle distances across 180 (1 degree of longitude at the equator: 111195 m) */
    assert_true(M("near;maxDistance==111200", "Point", "[179.5,0]", PT(-179.5, 0)));
    assert_false(M("near;maxDistance==111190", "Point", "[179.5,0]", PT(-179.5, 0)));
    assert_true(M("near;minDistance==111190", "Point", "[179.5,0]", PT(-179.5, 0)));
    assert_true(M("near;maxDistance==55700", "Polygon", "[[[179,-1],[180,-1],[180,1],[179,1],[179,-1]]]",
                  PT(-179.5, 0)));
    assert_false(M("near;maxDistance==55500", "Polygon", "[[[179,-1],[180,-1],[180,1],[179,1],[179,-1]]]",
                   PT(-179.5, 0)));
    assert_true(M("near;maxDistance==55700", "Point", "[179.5,0]",
                  "{\"type\":\"LineString\",\"coordinates\":[[-180,-1],[-180,1]]}"));
    assert_false(M("near;minDistance==55700", "Point", "[-179.5,0]",
                   "{\"type\":\"Polygon\",\"coordinates\":[[[179,-1],[180,-1],[180,1],[179,1],[179,-1]]]}"));

    /* a self-intersecting ring across 180 is still evaluated */
    assert_true(M("intersects", "Polygon", "[[[179,1],[-179,-1],[-179,1],[179,-1],[179,1]]]", PT(-179.2, 0.5)));
    assert_false(M("intersects", "Polygon", "[[[179,1],[-179,-1],[-179,1],[179,-1],[179,1]]]", PT(-179.5, 0.9)));
    /* a ring winding around a pole is evaluated as written (not cut) */
    const char *polar = "[[[0,80],[90,80],[180,80],[-90,80],[0,80]]]";
    assert_true(M("intersects", "Polygon", polar, PT(0, 80)));
}

int main(void)
{
    ld_init();
    model_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_validate_good, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validate_bad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bbox, setup, teardown),
        cmocka_unit_test_setup_teardown(test_near_points, setup, teardown),
        cmocka_unit_test_setup_teardown(test_near_geos, setup, teardown),
        cmocka_unit_test_setup_teardown(test_point_in_polygon, setup, teardown),
        cmocka_unit_test_setup_teardown(test_point_point, setup, teardown),
        cmocka_unit_test_setup_teardown(test_polygons, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entity_property, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_self_intersecting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vertex_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_antimeridian, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
