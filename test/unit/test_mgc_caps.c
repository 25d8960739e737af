/*
 * test_mgc_caps.c - the MongoDB store's paths that only a real MongoDB runs
 * (FerretDB, the functional tests' server, has no 2dsphere index, no working
 * wildcard index and no change streams), checked here as the BSON they send:
 * the geo part of the filter with geo2d on (filter.c: $geoWithin
 * $centerSphere for near;maxDistance from a Point, $geoWithin of a polygon
 * around the query's box for the others, the box prefilter kept for the
 * documents without a Point and for what the polygon cannot stand for), the
 * polygon's great-circle edges never cutting into the planar box the broker
 * judges in; the gj field of a document (doc.c); the index specs (conn.c);
 * the change stream's pipeline and options (watch.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "store/mongoc/mgc.h"

#define LOC "https://uri.etsi.org/ngsi-ld/location"

#include "arena_fixture.h"

static char *json_of(const bson_t *b)
{
    char *s = bson_as_relaxed_extended_json(b, NULL), *out = arena_strdup(A, s);

    bson_free(s);
    return out;
}

static geoq_t *geo(const char *rel, const char *geometry, const char *coords)
{
    problem_t     p  = { 0 };
    geoq_params_t gp = { .georel = rel, .geometry = geometry, .coordinates = coords };
    geoq_t       *g  = geoq_parse(A, &gp, ld_core(), &p);

    if (!g)
        fail_msg("geoq_parse %s %s %s: %s", rel, geometry, coords, p.detail);
    return g;
}

/* The filter of a geo-query as relaxed extended JSON; it is never exact. */
static char *filter_of(const geoq_t *g, bool geo2d, bson_t *q)
{
    entity_filter_t f = { .geo = (geoq_t *)g };

    assert_false(mgc_filter(&f, geo2d, q));
    return json_of(q);
}

static char *key_of_loc(void)
{
    char *k = arena_alloc(A, 24);

    mgc_geo_key(k, LOC);
    return k;
}

/* The element at the keys path[0..n) of q (keys may hold dots). */
static bool at_keys(const bson_t *q, const char *const *path, size_t n, bson_iter_t *out)
{
    bson_iter_t it;

    if (!bson_iter_init(&it, q))
        return false;
    for (size_t i = 0; i < n; i++) {
        bson_iter_t child;

        if (!bson_iter_find(&it, path[i]))
            return false;
        if (i + 1 == n)
            break;
        if (!bson_iter_recurse(&it, &child))
            return false;
        it = child;
    }
    *out = it;
    return true;
}

static void test_without_2dsphere_the_box_alone(void **st)
{
    bson_t q;
    char   want[512], *k = key_of_loc();

    (void)st;
    char *got = filter_of(geo("within", "Polygon", "[[[0,40],[10,40],[10,50],[0,50],[0,40]]]"), false, &q);
    snprintf(want, sizeof want,
             "{ \"g.%s.x0\" : { \"$lte\" : 10.0 }, \"g.%s.x1\" : { \"$gte\" : 0.0 }, "
             "\"g.%s.y0\" : { \"$lte\" : 50.0 }, \"g.%s.y1\" : { \"$gte\" : 40.0 } }", k, k, k, k);
    assert_string_equal(got, want);
    bson_destroy(&q);
}

static void test_near_from_a_point_is_a_cap_or_the_box(void **st)
{
    bson_t q;
    char   want[1024], *k = key_of_loc();

    (void)st;
    char *got = filter_of(geo("near;maxDistance==6371.0088", "Point", "[2.35,48.85]"), true, &q);
    snprintf(want, sizeof want,
             "{ \"$and\" : [ { \"$or\" : [ { \"gj.%s\" : { \"$geoWithin\" : { \"$centerSphere\" : "
             "[ [ 2.3500000000000000888, 48.850000000000001421 ], ", k);
    if (strncmp(got, want, strlen(want)))
        fail_msg("got  %s\nwant %s...", got, want);
    /* 1/1000 rad (6371.0088 m on the broker's sphere), a millionth wider, + 1e-9 */
    char        path[40];
    bson_iter_t it;
    snprintf(path, sizeof path, "gj.%s", k);
    const char *to_r[] = { "$and", "0", "$or", "0", path, "$geoWithin", "$centerSphere", "1" };
    assert_true(at_keys(&q, to_r, 8, &it));
    assert_true(fabs(bson_iter_double(&it) - (1e-3 * (1 + 1e-6) + 1e-9)) < 1e-15);
    assert_true(bson_iter_double(&it) > 1e-3);
    const char *to_no[] = { "$and", "0", "$or", "1", path, "$exists" };
    assert_true(at_keys(&q, to_no, 6, &it));
    /* the other branch is the box prefilter of the near box */
    assert_non_null(strstr(got, "\"g."));
    bson_destroy(&q);
    /* minDistance: unbounded, nothing goes; disjoint neither */
    got = filter_of(geo("near;minDistance==1000", "Point", "[2.35,48.85]"), true, &q);
    assert_string_equal(got, "{ }");
    bson_destroy(&q);
    got = filter_of(geo("disjoint", "Point", "[2.35,48.85]"), true, &q);
    assert_string_equal(got, "{ }");
    bson_destroy(&q);
    /* a cap past GEO_CAP_MAX radians: the box alone */
    got = filter_of(geo("near;maxDistance==12000000", "Point", "[2.35,48.85]"), true, &q);
    assert_null(strstr(got, "gj."));
    bson_destroy(&q);
}

/* The largest latitude a great circle through (x0, y) and (x1, y) reaches
 * between them (poleward of y): tan(ym) = tan(y) / cos(dx / 2). */
static double gc_bulge_deg(double x0, double x1, double y)
{
    double r = M_PI / 180, ay = fabs(y) * r, dx = fabs(x1 - x0) * r;

    return atan(tan(ay) / cos(dx / 2)) / r - fabs(y);
}

/* The polygon around the query's box: closed, a margin wider than the box
 * on every side, its east-west edges cut finely enough that no great-circle
 * edge between two of its vertices comes into the planar box (so every
 * Point the broker keeps is inside it on the sphere: a superset). */
static void check_polygon(const char *rel, const char *geometry, const char *coords, const double box[4])
{
    bson_t      q;
    bson_iter_t it, ring;
    double      xs[1024], ys[1024];
    size_t      n = 0;
    char        path[96], *k = key_of_loc();

    filter_of(geo(rel, geometry, coords), true, &q);
    snprintf(path, sizeof path, "gj.%s", k);
    const char *to_ring[] = { "$and", "0", "$or", "0", path, "$geoWithin", "$geometry", "coordinates", "0" };
    assert_true(at_keys(&q, to_ring, 9, &ring));
    assert_true(BSON_ITER_HOLDS_ARRAY(&ring));
    bson_iter_recurse(&ring, &it);
    while (bson_iter_next(&it) && n < 1024) {
        bson_iter_t p;

        bson_iter_recurse(&it, &p);
        assert_true(bson_iter_next(&p));
        xs[n] = bson_iter_double(&p);
        assert_true(bson_iter_next(&p));
        ys[n] = bson_iter_double(&p);
        n++;
    }
    assert_true(n >= 5);
    assert_true(xs[0] == xs[n - 1] && ys[0] == ys[n - 1]);
    for (size_t i = 0; i + 1 < n; i++) {
        /* outside the box by a margin */
        assert_true(xs[i] < box[0] || xs[i] > box[2] || ys[i] < box[1] || ys[i] > box[3]);
        if (ys[i] != ys[i + 1]) {
            assert_true(xs[i] == xs[i + 1]);        /* a meridian: its own great circle */
            continue;
        }
        assert_true(fabs(xs[i + 1] - xs[i]) <= 1.0 + 1e-9);
        /* a great circle bulges poleward: an edge below the box in the
         * north (above it in the south) bulges toward the box, never into it */
        double b = gc_bulge_deg(xs[i], xs[i + 1], ys[i]);
        if (ys[i] < box[1] && ys[i] > 0)
            assert_true(ys[i] + b < box[1]);
        if (ys[i] > box[3] && ys[i] < 0)
            assert_true(ys[i] - b > box[3]);
        assert_true(b < 0.002);
    }
    /* and the documents without a Point keep the box */
    const char *to_box[] = { "$and", "0", "$or", "1", path, "$exists" };
    assert_true(at_keys(&q, to_box, 6, &ring));
    bson_destroy(&q);
}

static void test_bounded_georels_are_a_polygon_around_the_box(void **st)
{
    static const double b1[4] = { 0, 40, 10, 50 }, b2[4] = { -60, -80, 50, -20 }, b3[4] = { 5, 45, 5, 45 };

    (void)st;
    check_polygon("within", "Polygon", "[[[0,40],[10,40],[10,50],[0,50],[0,40]]]", b1);
    check_polygon("intersects", "Polygon", "[[[0,40],[10,40],[10,50],[0,50],[0,40]]]", b1);
    check_polygon("overlaps", "Polygon", "[[[0,40],[10,40],[10,50],[0,50],[0,40]]]", b1);
    check_polygon("intersects", "LineString", "[[-60,-80],[50,-20]]", b2);
    check_polygon("equals", "Point", "[5,45]", b3);
    check_polygon("contains", "Point", "[5,45]", b3);
}

static void test_what_the_polygon_cannot_stand_for_keeps_the_box(void **st)
{
    bson_t q;

    (void)st;
    /* wider than GEO_SPAN_MAX, or past GEO_LAT_MAX: no gj */
    char *got = filter_of(geo("within", "Polygon", "[[[-100,0],[100,0],[100,10],[-100,10],[-100,0]]]"), true, &q);
    assert_null(strstr(got, "gj."));
    assert_non_null(strstr(got, "\"g."));
    bson_destroy(&q);
    got = filter_of(geo("within", "Polygon", "[[[0,80],[10,80],[10,89],[0,89],[0,80]]]"), true, &q);
    assert_null(strstr(got, "gj."));
    bson_destroy(&q);
}

static cr_entity_t *entity(const char *id, const char *const *geoms, size_t n)
{
    arena_t     *a = arena_new(8192);
    cr_entity_t *d = arena_calloc(a, sizeof(*d)), *e;

    d->id       = arena_strdup(a, id);
    d->types    = arena_calloc(a, sizeof(char *));
    d->types[0] = intern_cstr("http://example.org/T");
    d->n_types  = 1;
    d->attrs    = arena_calloc(a, n * sizeof(cr_attr_t));
    for (size_t i = 0; i < n; i++) {
        char          err[128];
        json_limits_t lim = { .max_depth = 16, .max_size = 0 };

        d->attrs[i] = (cr_attr_t){ .name = intern_cstr(LOC), .kind = ATTR_GEOPROPERTY,
                                   .value = json_parse_copy(a, geoms[i], strlen(geoms[i]), &lim, err, sizeof err),
                                   .observed_at = CR_NO_TIME, .created_at = 1, .modified_at = 1 };
        if (i)
            d->attrs[i].dataset_id = intern_cstr("urn:d:2");
    }
    d->n_attrs     = (uint16_t)n;
    d->created_at  = 1;
    d->modified_at = 1;
    e = entity_freeze(d);
    arena_free(a);
    return e;
}

/* The gj of one document as JSON, or "-" for none. */
static char *gj_of(const char *const *geoms, size_t n, bool geojson)
{
    cr_entity_t *e = entity("urn:x:1", geoms, n);
    bson_t       doc, sub;
    bson_iter_t  it;
    char        *out = "-";

    mgc_doc_entity(&doc, e, 1, 1, geojson);
    if (bson_iter_init_find(&it, &doc, "gj")) {
        const uint8_t *data;
        uint32_t       len;

        bson_iter_document(&it, &len, &data);
        bson_init_static(&sub, data, len);
        out = json_of(&sub);
    }
    /* the box is there whatever the server (for a geometry that has one) */
    double box[4];
    if (geo_bbox(e->attrs[0].value, box))
        assert_true(bson_iter_init_find(&it, &doc, "g"));
    bson_destroy(&doc);
    entity_unref(e);
    return out;
}

static void test_a_document_holds_the_point_of_a_one_point_geoproperty(void **st)
{
    char want[256], *k = key_of_loc();
    const char *pt[] = { "{\"type\":\"Point\",\"coordinates\":[2.35,48.85]}" };
    const char *alt[] = { "{\"type\":\"Point\",\"coordinates\":[2,48,35.5]}" };
    const char *two[] = { pt[0], "{\"type\":\"Point\",\"coordinates\":[3,49]}" };
    const char *line[] = { "{\"type\":\"LineString\",\"coordinates\":[[0,0],[1,1]]}" };
    const char *out[] = { "{\"type\":\"Point\",\"coordinates\":[200,10]}" };

    (void)st;
    snprintf(want, sizeof want, "{ \"%s\" : { \"type\" : \"Point\", \"coordinates\" : [ 2.3500000000000000888, "
             "48.850000000000001421 ] } }", k);
    assert_string_equal(gj_of(pt, 1, true), want);
    assert_string_equal(gj_of(pt, 1, false), "-");              /* not on a server without 2dsphere */
    snprintf(want, sizeof want, "{ \"%s\" : { \"type\" : \"Point\", \"coordinates\" : [ 2.0, 48.0 ] } }", k);
    assert_string_equal(gj_of(alt, 1, true), want);             /* the altitude is the broker's */
    assert_string_equal(gj_of(two, 2, true), "-");              /* several instances: the box */
    assert_string_equal(gj_of(line, 1, true), "-");             /* another geometry: the box */
    assert_string_equal(gj_of(out, 1, true), "-");              /* out of range: MongoDB refuses it */
}

static void test_index_specs(void **st)
{
    mgc_t       db = { 0 };
    const char *coll, *name;
    bson_t      key;
    char        list[1024] = "", ixname[24];
    size_t      i;

    (void)st;
    for (i = 0; (name = mgc_index_spec(&db, i, &coll, &key)); i++) {
        char *j = json_of(&key);

        snprintf(list + strlen(list), sizeof list - strlen(list), "%s.%s%s;", coll, name, j);
        bson_destroy(&key);
    }
    assert_string_equal(list, "entities.c_id{ \"c\" : 1, \"_id\" : 1 };entities.t_c{ \"t\" : 1, \"c\" : 1 };"
                              "entities.m{ \"m\" : 1 };entities.a{ \"a\" : 1 };entities.s{ \"s\" : 1 };"
                              "objects.k_o{ \"k\" : 1, \"o\" : 1 };");
    db.wildcard = true;
    list[0] = '\0';
    for (i = 0; (name = mgc_index_spec(&db, i, &coll, &key)); i++) {
        if (strstr(name, "_all"))
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s;", name, json_of(&key));
        bson_destroy(&key);
    }
    assert_string_equal(list, "q_all{ \"q.$**\" : 1 };d_all{ \"d.$**\" : 1 };");
    mgc_geo_index_spec("h0123456789abcdef", false, ixname, &key);
    assert_string_equal(ixname, "h0123456789abcdef");
    assert_string_equal(json_of(&key), "{ \"g.h0123456789abcdef.x0\" : 1 }");
    bson_destroy(&key);
    mgc_geo_index_spec("h0123456789abcdef", true, ixname, &key);
    assert_string_equal(ixname, "gj_h0123456789abcdef");
    assert_string_equal(json_of(&key), "{ \"gj.h0123456789abcdef\" : \"2dsphere\" }");
    bson_destroy(&key);
}

static void test_change_stream_pipeline_and_resume(void **st)
{
    bson_t p, o, tok;

    (void)st;
    mgc_watch_pipeline(&p);
    assert_string_equal(json_of(&p), "{ \"pipeline\" : [ { \"$match\" : { \"$or\" : [ "
                                     "{ \"documentKey._id\" : \"objects\" }, "
                                     "{ \"operationType\" : \"invalidate\" } ] } } ] }");
    bson_destroy(&p);
    mgc_watch_opts(&o, NULL, 1000);
    assert_string_equal(json_of(&o), "{ \"maxAwaitTimeMS\" : 1000 }");
    bson_destroy(&o);
    bson_init(&tok);
    BSON_APPEND_UTF8(&tok, "_data", "8263");
    mgc_watch_opts(&o, &tok, 500);
    assert_string_equal(json_of(&o), "{ \"maxAwaitTimeMS\" : 500, \"resumeAfter\" : { \"_data\" : \"8263\" } }");
    bson_destroy(&o);
    bson_destroy(&tok);
}

/* Without a stream (a single server, or not started), mgc_obj_changed polls. */
static void test_no_stream_means_polling(void **st)
{
    mgc_t db = { 0 };

    (void)st;
    assert_int_equal(mgc_watch_changed(&db), -1);
    mgc_watch_stop(&db);            /* nothing to stop: no crash */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_without_2dsphere_the_box_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_near_from_a_point_is_a_cap_or_the_box, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounded_georels_are_a_polygon_around_the_box, setup, teardown),
        cmocka_unit_test_setup_teardown(test_what_the_polygon_cannot_stand_for_keeps_the_box, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_document_holds_the_point_of_a_one_point_geoproperty, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_index_specs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_change_stream_pipeline_and_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_stream_means_polling, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
