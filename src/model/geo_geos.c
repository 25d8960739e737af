/*
 * geo_geos.c - GEOS geometries of validated GeoJSON, and the per-thread
 * GEOS context handles they are made with: what geoquery.c needs from
 * libgeos_c beyond its predicates.
 *
 * We use only the re-entrant API. Each thread that needs GEOS gets its own
 * context handle, created lazily on first use (GEOS_init_r) and kept in a
 * thread-local; a pthread key destructor calls GEOS_finish_r when the thread
 * exits. The handle is a tool of the thread, not request state: it holds
 * GEOS's message handlers only (the last error message, per thread, for the
 * detail of a 400). In GEOS (3.x) a geometry is not bound to the handle that
 * made it (all handles share the default GeometryFactory), so a geometry may
 * be destroyed with the handle of whichever thread frees it.
 *
 * Building: a geometry's parts go through a small array on the stack
 * (GEO_STACK_PARTS), a heap one beyond; GEOS takes ownership of the parts it
 * is given, even when it fails.
 */
#include "geo_int.h"

#include <pthread.h>
#include <stdlib.h>

#define GEO_STACK_PARTS     16         /* parts/holes handled without malloc */

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
GEOSContextHandle_t geo_geos_handle(void)
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
        if (!GEOSCoordSeq_setXY_r(h, seq, i, geo_num(pos->child), geo_num(pos->child->next))) {
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
            gs[i] = GEOSGeom_createPointFromXY_r(h, geo_num(c->child), geo_num(c->child->next));
            break;
        case GT_LINESTRING:
            gs[i] = geos_linestring(h, c);
            break;
        case GT_POLYGON:
            gs[i] = geos_polygon(h, c);
            break;
        default:
            gs[i] = geo_geos_build(h, c, depth + 1);
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
GEOSGeometry *geo_geos_from_coords(GEOSContextHandle_t h, geo_type_t t, const json_t *c)
{
    switch (t) {
    case GT_POINT:           return GEOSGeom_createPointFromXY_r(h, geo_num(c->child), geo_num(c->child->next));
    case GT_MULTIPOINT:      return geos_multi(h, GEOS_MULTIPOINT, c, GT_POINT, 0);
    case GT_LINESTRING:      return geos_linestring(h, c);
    case GT_MULTILINESTRING: return geos_multi(h, GEOS_MULTILINESTRING, c, GT_LINESTRING, 0);
    case GT_POLYGON:         return geos_polygon(h, c);
    case GT_MULTIPOLYGON:    return geos_multi(h, GEOS_MULTIPOLYGON, c, GT_POLYGON, 0);
    default:                 return NULL;
    }
}

/* The GEOS geometry of a validated GeoJSON geometry object. */
GEOSGeometry *geo_geos_build(GEOSContextHandle_t h, const json_t *geometry, int depth)
{
    const json_t *jt = geo_member(geometry, "type");
    geo_type_t    t  = jt && json_is_string(jt) ? geo_type_of(jt->str) : GT_NONE;

    if (t == GT_COLLECTION) {
        const json_t *gs = geo_member(geometry, "geometries");
        if (!gs || depth >= GEO_MAX_NESTING)
            return NULL;
        return geos_multi(h, GEOS_GEOMETRYCOLLECTION, gs, GT_COLLECTION, depth);
    }
    const json_t *c = geo_member(geometry, "coordinates");
    return c ? geo_geos_from_coords(h, t, c) : NULL;
}

const char *geo_geos_error(void)
{
    return geos_tl_error;
}

void geo_geos_clear_error(void)
{
    geos_tl_error[0] = '\0';
}
