/*
 * fuzz_geo.c - libFuzzer target for src/model/geojson.c and geoquery.c.
 *
 * Each input is used twice:
 *  1. as JSON text -> geo_validate / geo_bbox, and when it is a valid geometry,
 *     as an entity's location matched against fixed queries (fast paths and
 *     GEOS);
 *  2. as the coordinates text of a geo-query whose georel and geometry are
 *     picked by the first byte -> geoq_parse, and when it parses, matched
 *     against fixed entities.
 * Nothing may crash, leak or trip a sanitizer; every rejection must carry a
 * BadRequestData detail.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define LOC "https://uri.etsi.org/ngsi-ld/location"

static const char *const georels[] = {
    "near;maxDistance==1000", "near;minDistance==500", "within", "contains",
    "intersects", "equals", "disjoint", "overlaps",
};
static const char *const geometries[] = {
    "Point", "MultiPoint", "LineString", "MultiLineString", "Polygon", "MultiPolygon",
};
static const char *const targets[] = {
    "{\"type\":\"Point\",\"coordinates\":[1,1]}",
    "{\"type\":\"LineString\",\"coordinates\":[[-5,5],[15,5]]}",
    ("{\"type\":\"Polygon\",\"coordinates\":[[[0,0],[10,0],[10,10],[0,10],[0,0]],"
     "[[4,4],[6,4],[6,6],[4,6],[4,4]]]}"),
};

static void check_problem(bool ok, const problem_t *p)
{
    if (!ok && (p->kind == PB_NONE || p->detail[0] == '\0'))
        abort();   /* a rejection without a reason */
}

static cr_entity_t *entity_of(arena_t *a, json_t *value)
{
    cr_entity_t *e  = arena_calloc(a, sizeof *e);
    cr_attr_t   *at = arena_calloc(a, sizeof *at);

    at->name    = intern_cstr(LOC);
    at->kind    = ATTR_GEOPROPERTY;
    at->value   = value;
    e->id       = "urn:ngsi-ld:Fuzz:1";
    e->attrs    = at;
    e->n_attrs  = 1;
    return e;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool   init;
    arena_t      *a;
    char          err[128];
    json_limits_t lim = { .max_depth = 32, .max_size = 1 << 20 };

    if (!init) {
        ld_init();
        model_init();
        init = true;
    }
    if (size > (1 << 16))
        return 0;
    a = arena_new(4096);
    if (!a)
        return 0;

    /* 1. A GeoJSON geometry. */
    json_t *j = json_parse_copy(a, (const char *)data, size, &lim, err, sizeof err);
    if (j) {
        problem_t p = { 0 };
        double    box[4];
        bool      ok = geo_validate(j, &p);
        check_problem(ok, &p);
        if (geo_bbox(j, box) != ok)
            abort();
        if (ok) {
            cr_entity_t *e = entity_of(a, j);
            for (size_t r = 0; r < sizeof georels / sizeof *georels; r++) {
                problem_t     q  = { 0 };
                geoq_params_t gp = { .georel = georels[r], .geometry = "Polygon",
                                     .coordinates = "[[[0,0],[10,0],[10,10],[0,10],[0,0]]]" };
                geoq_t *g = geoq_parse(a, &gp, NULL, &q);
                if (!g)
                    abort();
                (void)geoq_match(g, e);
                gp.geometry    = "Point";
                gp.coordinates = "[1,1]";
                g = geoq_parse(a, &gp, NULL, &q);
                if (!g)
                    abort();
                (void)geoq_match(g, e);
            }
        }
    }

    /* 2. Fuzzed coordinates text with a georel and geometry from the first byte. */
    if (size >= 1) {
        problem_t     p  = { 0 };
        geoq_params_t gp = {
            .georel      = georels[data[0] % (sizeof georels / sizeof *georels)],
            .geometry    = geometries[(data[0] >> 3) % (sizeof geometries / sizeof *geometries)],
            .coordinates = arena_strndup(a, (const char *)data + 1, size - 1),
        };
        geoq_t *g = geoq_parse(a, &gp, NULL, &p);
        check_problem(g != NULL, &p);
        if (g) {
            for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
                json_t *v = json_parse_copy(a, targets[t], strlen(targets[t]), NULL, err, sizeof err);
                if (!v)
                    abort();
                (void)geoq_match(g, entity_of(a, v));
            }
        }
    }

    arena_free(a);   /* frees the GEOS geometries of every query */
    return 0;
}
