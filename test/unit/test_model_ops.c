/*
 * test_model_ops.c - entity operations (merge.c: entity_apply) and rendering
 * (render.c: normalized, concise, keyValues, GeoJSON, projection, language
 * filter, system attributes). Entities are built by hand as drafts, so these
 * tests do not depend on the parser; rendered text is compared as JSON
 * (json_equal) with the spec clause named in each test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "model/model.h"

#define T0   1500000000000000LL  /* 2017-07-14T02:40:00Z */
#define T1   1550000000000000LL  /* 2019-02-12T19:33:20Z */
#define NOW  1600000000000000LL  /* 2020-09-13T12:26:40Z */

#include "arena_fixture.h"

/* ------------------------------------------------------------ builders */

static const char *N(const char *term)
{
    return ld_expand(ld_core(), term);
}

/* JSON text with ' for " (keeps expected documents readable). */
static json_t *J(const char *text)
{
    char   *s = arena_strdup(A, text);
    char    err[160];
    json_t *v;

    for (char *c = s; *c; c++)
        if (*c == '\'')
            *c = '"';
    v = json_parse(A, s, strlen(s), NULL, err, sizeof err);
    if (!v)
        fail_msg("bad test JSON %s: %s", text, err);
    return v;
}

static cr_attr_t mk(attr_kind_t kind, const char *term, const char *json)
{
    cr_attr_t a;

    memset(&a, 0, sizeof a);
    a.name        = N(term);
    a.kind        = (uint8_t)kind;
    a.value       = json ? J(json) : NULL;
    a.observed_at = CR_NO_TIME;
    a.created_at  = T0;
    a.modified_at = T0;
    return a;
}

static cr_attr_t mk_null(const char *term)
{
    cr_attr_t a = mk(ATTR_PROPERTY, term, "'urn:ngsi-ld:null'");

    a.is_null = 1;
    return a;
}

static void with_subs(cr_attr_t *a, const cr_attr_t *subs, size_t n)
{
    cr_attr_t *s = arena_alloc(A, n * sizeof *s);

    memcpy(s, subs, n * sizeof *s);
    a->sub   = s;
    a->n_sub = (uint16_t)n;
}

static cr_entity_t *mk_entity(const char *id, const char *type, const cr_attr_t *attrs, size_t n)
{
    cr_entity_t *e = arena_calloc(A, sizeof *e);
    const char **t = arena_alloc(A, sizeof *t);

    e->id = id;
    if (type) {
        t[0]       = N(type);
        e->types   = t;
        e->n_types = 1;
    }
    if (n) {
        cr_attr_t *copy = arena_alloc(A, n * sizeof *copy);

        memcpy(copy, attrs, n * sizeof *copy);
        e->attrs   = copy;
        e->n_attrs = (uint16_t)n;
    }
    e->created_at  = T0;
    e->modified_at = T0;
    return e;
}

static const cr_attr_t *find(const cr_entity_t *e, const char *term, const char *ds)
{
    return entity_attr(e, N(term), ds);
}

static size_t count_named(const cr_entity_t *e, const char *term)
{
    size_t n = 0;

    for (size_t i = 0; i < e->n_attrs; i++)
        n += e->attrs[i].name == N(term);
    return n;
}

static const cr_attr_t *sub_named(const cr_attr_t *a, const char *term)
{
    for (size_t i = 0; i < a->n_sub; i++)
        if (a->sub[i].name == N(term))
            return &a->sub[i];
    return NULL;
}

static void assert_value(const json_t *got, const char *expected)
{
    if (!json_equal(got, J(expected))) {
        sbuf_t sb;

        sb_init(&sb, A, 64);
        json_render(&sb, got);
        fail_msg("value %s, expected %s", sb.p, expected);
    }
}

/* ------------------------------------------------------------ rendering */

static render_opts_t opts(fmt_t f)
{
    render_opts_t o;

    memset(&o, 0, sizeof o);
    o.ctx    = ld_core();
    o.format = f;
    return o;
}

static void assert_render(const cr_entity_t *e, const render_opts_t *o, bool geojson,
                          const char *expected)
{
    sbuf_t        sb;
    json_writer_t w;
    char          err[160];
    json_t       *got;

    sb_init(&sb, A, 512);
    jw_init(&w, &sb);
    if (geojson)
        entity_render_geojson(&w, e, o);
    else
        entity_render(&w, e, o);
    got = json_parse_copy(A, sb.p, sb.len, NULL, err, sizeof err);
    if (!got)
        fail_msg("rendered text is not JSON (%s): %s", err, sb.p);
    if (!json_equal(got, J(expected)))
        fail_msg("rendered\n  %s\nexpected\n  %s", sb.p, expected);
}

/* The temperature of 5.5.8 / 5.5.12: value 25, unitCode CEL, observedAt,
 * with a reliability sub-Property and a providedBy sub-Relationship. */
static cr_entity_t *sensor(void)
{
    cr_attr_t t = mk(ATTR_PROPERTY, "temperature", "25");
    cr_attr_t subs[2] = {
        mk(ATTR_PROPERTY, "reliability", "0.7"),
        mk(ATTR_RELATIONSHIP, "providedBy", "'urn:ngsi-ld:Camera:C1'"),
    };
    cr_attr_t attrs[3];

    t.unit_code   = "CEL";
    t.observed_at = T0;
    with_subs(&t, subs, 2);
    attrs[0] = t;
    attrs[1] = mk(ATTR_PROPERTY, "name", "'Sensor one'");
    attrs[2] = mk(ATTR_PROPERTY, "address", "{'street':'Strasse des 17. Juni','city':'Berlin','country':'Germany'}");
    return mk_entity("urn:ngsi-ld:Sensor:1", "Sensor", attrs, 3);
}

/* =========================================================== operations */

/* 5.6.17 / 5.5.12: merge keeps what the fragment does not mention, a Null
 * deletes an attribute or a sub-attribute, new attributes are added, types
 * are added, createdAt stays, modifiedAt moves only where something changed. */
static void test_merge_entity(void **state)
{
    (void)state;
    cr_entity_t *old = sensor();
    cr_attr_t    t   = mk(ATTR_PROPERTY, "temperature", "100");
    cr_attr_t    tsub[1] = { mk_null("reliability") };
    cr_attr_t    p[3];
    cr_entity_t *patch, *ne;
    op_result_t  res = { 0 };
    problem_t    pb  = { 0 };

    t.observed_at = T1;
    with_subs(&t, tsub, 1);
    p[0] = t;
    p[1] = mk_null("name");
    p[2] = mk(ATTR_PROPERTY, "humidity", "40");
    patch = mk_entity("urn:ngsi-ld:Sensor:1", "Device", p, 3);

    ne = entity_apply(A, old, patch, OP_MERGE_ENTITY, NULL, NOW, &res, &pb);
    assert_non_null(ne);
    assert_int_equal(ne->n_attrs, 3);
    assert_int_equal(ne->n_types, 2);
    assert_ptr_equal(ne->types[0], N("Sensor"));
    assert_ptr_equal(ne->types[1], N("Device"));
    assert_int_equal(ne->created_at, T0);
    assert_int_equal(ne->modified_at, NOW);

    const cr_attr_t *nt = find(ne, "temperature", NULL);
    assert_non_null(nt);
    assert_value(nt->value, "100");
    assert_string_equal(nt->unit_code, "CEL");          /* kept (5.5.12 example 1) */
    assert_int_equal(nt->observed_at, T1);
    assert_int_equal(nt->created_at, T0);
    assert_int_equal(nt->modified_at, NOW);
    assert_null(sub_named(nt, "reliability"));          /* Null deleted it */
    assert_non_null(sub_named(nt, "providedBy"));       /* untouched */

    assert_null(find(ne, "name", NULL));
    const cr_attr_t *h = find(ne, "humidity", NULL);
    assert_non_null(h);
    assert_int_equal(h->created_at, NOW);
    const cr_attr_t *ad = find(ne, "address", NULL);
    assert_int_equal(ad->modified_at, T0);              /* not touched */

    assert_int_equal(res.n, 3);
    assert_int_equal(res.n_updated, 3);
    assert_int_equal(res.n_not_updated, 0);

    /* the old entity is left as it was */
    assert_int_equal(old->n_attrs, 3);
    assert_value(find(old, "temperature", NULL)->value, "25");
    assert_int_equal(find(old, "temperature", NULL)->n_sub, 2);
}

/* 5.5.12 example 2: values that are JSON objects are merge-patched. */
static void test_merge_value_object(void **state)
{
    (void)state;
    cr_entity_t *old = sensor();
    cr_attr_t    p[1] = { mk(ATTR_PROPERTY, "address",
                             "{'street':'Pariser Platz','country':'urn:ngsi-ld:null'}") };
    cr_entity_t *ne;
    problem_t    pb = { 0 };

    ne = entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, p, 1),
                      OP_MERGE_ENTITY, NULL, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_value(find(ne, "address", NULL)->value, "{'street':'Pariser Platz','city':'Berlin'}");
    assert_int_equal(ne->n_types, 1);
}

/* Merge with a simplified value (kind 0) keeps the existing type (5.6.17.4). */
static void test_merge_keeps_kind(void **state)
{
    (void)state;
    cr_attr_t    o[1] = { mk(ATTR_GEOPROPERTY, "location", "{'type':'Point','coordinates':[1,2]}") };
    cr_attr_t    p[1] = { mk(0, "location", "{'type':'Point','coordinates':[3,4]}") };
    cr_entity_t *ne;
    problem_t    pb = { 0 };

    ne = entity_apply(A, mk_entity("urn:x:1", "T", o, 1), mk_entity("urn:x:1", NULL, p, 1),
                      OP_MERGE_ENTITY, NULL, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_int_equal(ne->attrs[0].kind, ATTR_GEOPROPERTY);
    assert_value(ne->attrs[0].value, "{'type':'Point','coordinates':[3,4]}");
}

/* 4.5.5 / 5.6.3.4: instances are told apart by datasetId. */
static void test_append_datasets(void **state)
{
    (void)state;
    cr_attr_t o[2] = { mk(ATTR_PROPERTY, "speed", "10"), mk(ATTR_PROPERTY, "speed", "11") };
    cr_attr_t p[3] = { mk(ATTR_PROPERTY, "speed", "21"), mk(ATTR_PROPERTY, "speed", "22"),
                       mk(ATTR_PROPERTY, "speed", "20") };
    cr_entity_t *ne;
    op_result_t  res = { 0 };
    problem_t    pb  = { 0 };

    o[1].dataset_id = "urn:ds:1";
    p[0].dataset_id = "urn:ds:1";           /* replaces the ds:1 instance */
    p[1].dataset_id = "urn:ds:2";           /* a new instance */
    p[2].dataset_id = "@none";              /* the default instance */
    ne = entity_apply(A, mk_entity("urn:x:1", "T", o, 2), mk_entity("urn:x:1", NULL, p, 3),
                      OP_APPEND_ATTRS, NULL, NOW, &res, &pb);
    assert_non_null(ne);
    assert_int_equal(count_named(ne, "speed"), 3);
    assert_value(find(ne, "speed", NULL)->value, "20");
    assert_value(find(ne, "speed", "urn:ds:1")->value, "21");
    assert_int_equal(find(ne, "speed", "urn:ds:1")->created_at, T0);
    assert_value(find(ne, "speed", "urn:ds:2")->value, "22");
    assert_int_equal(find(ne, "speed", "urn:ds:2")->created_at, NOW);
    assert_int_equal(res.n_updated, 3);
}

/* 5.6.3.4 with noOverwrite: existing instances are left untouched. */
static void test_append_no_overwrite(void **state)
{
    (void)state;
    cr_entity_t *old = sensor();
    cr_attr_t    p[2] = { mk(ATTR_PROPERTY, "name", "'other'"), mk(ATTR_PROPERTY, "color", "'red'") };
    op_args_t    args = { .no_overwrite = true };
    op_result_t  res  = { 0 };
    problem_t    pb   = { 0 };
    cr_entity_t *ne;

    ne = entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, p, 2), OP_APPEND_ATTRS,
                      &args, NOW, &res, &pb);
    assert_non_null(ne);
    assert_value(find(ne, "name", NULL)->value, "'Sensor one'");
    assert_int_equal(find(ne, "name", NULL)->modified_at, T0);
    assert_non_null(find(ne, "color", NULL));
    assert_int_equal(res.n, 2);
    assert_false(res.items[0].updated);
    assert_ptr_equal(res.items[0].name, N("name"));
    assert_string_equal(res.items[0].reason, "attribute already exists");
    assert_true(res.items[1].updated);
    assert_int_equal(res.n_updated, 1);
    assert_int_equal(res.n_not_updated, 1);
    assert_int_equal(ne->modified_at, NOW);
}

/* 5.6.2.4 (V1.9.1) and 5.5.8 example 2: an update replaces a matching
 * attribute whole and appends a missing one. */
static void test_update_attrs(void **state)
{
    (void)state;
    cr_entity_t *old = sensor();
    cr_attr_t    t   = mk(ATTR_PROPERTY, "temperature", "100");
    cr_attr_t    p[2];
    op_result_t  res = { 0 };
    problem_t    pb  = { 0 };
    cr_entity_t *ne;

    t.observed_at = T1;
    p[0] = t;
    p[1] = mk(ATTR_PROPERTY, "pressure", "1013");
    ne = entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, p, 2), OP_UPDATE_ATTRS,
                      NULL, NOW, &res, &pb);
    assert_non_null(ne);
    const cr_attr_t *nt = find(ne, "temperature", NULL);
    assert_value(nt->value, "100");
    assert_null(nt->unit_code);                         /* replaced whole */
    assert_int_equal(nt->n_sub, 0);
    assert_int_equal(nt->created_at, T0);
    assert_int_equal(nt->modified_at, NOW);
    assert_non_null(find(ne, "pressure", NULL));        /* appended */
    assert_int_equal(res.n_updated, 2);
    assert_int_equal(res.n_not_updated, 0);

    /* a Null for an attribute that is not there: notUpdated, nothing changes */
    memset(&res, 0, sizeof res);
    cr_attr_t gone[1] = { mk_null("pressure") };
    ne = entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, gone, 1), OP_UPDATE_ATTRS,
                      NULL, NOW, &res, &pb);
    assert_non_null(ne);
    assert_int_equal(ne->modified_at, T0);
    assert_int_equal(res.n_not_updated, 1);
    assert_string_equal(res.items[0].reason, "attribute not present");

    /* 5.5.8 example 3: a Null deletes */
    cr_attr_t del[1] = { mk_null("temperature") };
    ne = entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, del, 1), OP_UPDATE_ATTRS,
                      NULL, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_null(find(ne, "temperature", NULL));
    assert_int_equal(ne->n_attrs, 2);
}

/* 5.6.4 / 5.5.8 example 1: only the given members change. */
static void test_partial_attr(void **state)
{
    (void)state;
    cr_entity_t *old = sensor();
    cr_attr_t    p[1] = { mk(0, "temperature", "100") };
    op_args_t    args = { .attr_name = N("temperature") };
    problem_t    pb   = { 0 };
    cr_entity_t *ne;

    p[0].observed_at = T1;
    ne = entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, p, 1), OP_PARTIAL_ATTR,
                      &args, NOW, NULL, &pb);
    assert_non_null(ne);
    const cr_attr_t *nt = find(ne, "temperature", NULL);
    assert_value(nt->value, "100");
    assert_string_equal(nt->unit_code, "CEL");
    assert_int_equal(nt->observed_at, T1);
    assert_int_equal(nt->n_sub, 2);
    assert_int_equal(nt->kind, ATTR_PROPERTY);
    assert_int_equal(nt->created_at, T0);
    assert_int_equal(nt->modified_at, NOW);
    assert_int_equal(find(ne, "name", NULL)->modified_at, T0);

    /* only a sub-attribute, deleted with a Null */
    cr_attr_t q  = mk(0, "temperature", NULL);
    cr_attr_t qs[1] = { mk_null("providedBy") };
    with_subs(&q, qs, 1);
    ne = entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, &q, 1), OP_PARTIAL_ATTR,
                      &args, NOW, NULL, &pb);
    assert_non_null(ne);
    nt = find(ne, "temperature", NULL);
    assert_value(nt->value, "25");
    assert_int_equal(nt->n_sub, 1);
    assert_null(sub_named(nt, "providedBy"));

    /* the type cannot change */
    cr_attr_t r = mk(ATTR_RELATIONSHIP, "temperature", "'urn:x:y'");
    assert_null(entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, &r, 1),
                             OP_PARTIAL_ATTR, &args, NOW, NULL, &pb));
    assert_int_equal(pb.kind, PB_BAD_REQUEST_DATA);

    /* not there: as default instance, and with a datasetId */
    op_args_t missing = { .attr_name = N("pressure") };
    cr_attr_t m = mk(0, "pressure", "1");
    memset(&pb, 0, sizeof pb);
    assert_null(entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, &m, 1),
                             OP_PARTIAL_ATTR, &missing, NOW, NULL, &pb));
    assert_int_equal(pb.kind, PB_RESOURCE_NOT_FOUND);
    op_args_t with_ds = { .attr_name = N("temperature"), .dataset_id = "urn:ds:9" };
    memset(&pb, 0, sizeof pb);
    assert_null(entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, p, 1),
                             OP_PARTIAL_ATTR, &with_ds, NOW, NULL, &pb));
    assert_int_equal(pb.kind, PB_RESOURCE_NOT_FOUND);
}

/* 5.6.19: the instance is replaced whole, createdAt kept. */
static void test_replace_attr(void **state)
{
    (void)state;
    cr_entity_t *old = sensor();
    cr_attr_t    p[1] = { mk(ATTR_PROPERTY, "temperature", "30") };
    op_args_t    args = { .attr_name = N("temperature") };
    problem_t    pb   = { 0 };
    cr_entity_t *ne;

    ne = entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, p, 1), OP_REPLACE_ATTR,
                      &args, NOW, NULL, &pb);
    assert_non_null(ne);
    const cr_attr_t *nt = find(ne, "temperature", NULL);
    assert_value(nt->value, "30");
    assert_null(nt->unit_code);
    assert_int_equal(nt->observed_at, CR_NO_TIME);
    assert_int_equal(nt->n_sub, 0);
    assert_int_equal(nt->created_at, T0);
    assert_int_equal(nt->modified_at, NOW);

    op_args_t missing = { .attr_name = N("pressure") };
    cr_attr_t m[1] = { mk(ATTR_PROPERTY, "pressure", "1") };
    assert_null(entity_apply(A, old, mk_entity("urn:ngsi-ld:Sensor:1", NULL, m, 1),
                             OP_REPLACE_ATTR, &missing, NOW, NULL, &pb));
    assert_int_equal(pb.kind, PB_RESOURCE_NOT_FOUND);
}

/* 5.6.5: default instance, one datasetId, deleteAll, not found, scope. */
static void test_delete_attr(void **state)
{
    (void)state;
    cr_attr_t o[4] = { mk(ATTR_PROPERTY, "speed", "10"), mk(ATTR_PROPERTY, "speed", "11"),
                       mk(ATTR_PROPERTY, "speed", "12"), mk(ATTR_PROPERTY, "name", "'n'") };
    cr_entity_t *old, *ne;
    problem_t    pb = { 0 };

    o[1].dataset_id = "urn:ds:1";
    o[2].dataset_id = "urn:ds:2";
    old = mk_entity("urn:x:1", "T", o, 4);
    old->scope = J("'/Madrid'");

    op_args_t def = { .attr_name = N("speed") };
    ne = entity_apply(A, old, NULL, OP_DELETE_ATTR, &def, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_int_equal(count_named(ne, "speed"), 2);
    assert_null(find(ne, "speed", NULL));
    assert_int_equal(ne->modified_at, NOW);

    op_args_t one = { .attr_name = N("speed"), .dataset_id = "urn:ds:2" };
    ne = entity_apply(A, old, NULL, OP_DELETE_ATTR, &one, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_int_equal(count_named(ne, "speed"), 2);
    assert_null(find(ne, "speed", "urn:ds:2"));
    assert_non_null(find(ne, "speed", NULL));

    op_args_t all = { .attr_name = N("speed"), .delete_all = true };
    ne = entity_apply(A, old, NULL, OP_DELETE_ATTR, &all, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_int_equal(ne->n_attrs, 1);
    assert_ptr_equal(ne->attrs[0].name, N("name"));

    op_args_t nods = { .attr_name = N("speed"), .dataset_id = "urn:ds:7" };
    assert_null(entity_apply(A, old, NULL, OP_DELETE_ATTR, &nods, NOW, NULL, &pb));
    assert_int_equal(pb.kind, PB_RESOURCE_NOT_FOUND);
    op_args_t none = { .attr_name = N("color") };
    memset(&pb, 0, sizeof pb);
    assert_null(entity_apply(A, old, NULL, OP_DELETE_ATTR, &none, NOW, NULL, &pb));
    assert_int_equal(pb.kind, PB_RESOURCE_NOT_FOUND);

    op_args_t scope = { .attr_name = MN.scope };
    ne = entity_apply(A, old, NULL, OP_DELETE_ATTR, &scope, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_null(ne->scope);
    assert_int_equal(ne->n_attrs, 4);
}

/* 5.6.18: new content whole, entity createdAt kept. */
static void test_replace_entity(void **state)
{
    (void)state;
    cr_entity_t *old = sensor();
    cr_attr_t    p[1] = { mk(ATTR_PROPERTY, "color", "'red'") };
    cr_entity_t *patch = mk_entity("urn:ngsi-ld:Sensor:1", "Thing", p, 1), *ne;
    problem_t    pb = { 0 };

    patch->created_at = NOW;
    ne = entity_apply(A, old, patch, OP_REPLACE_ENTITY, NULL, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_int_equal(ne->n_attrs, 1);
    assert_non_null(find(ne, "color", NULL));
    assert_int_equal(ne->n_types, 1);
    assert_ptr_equal(ne->types[0], N("Thing"));
    assert_int_equal(ne->created_at, T0);
    assert_int_equal(ne->modified_at, NOW);
    assert_null(ne->scope);
}

/* 5.6.3.4 / 5.6.17.4: scope replaced, or appended to without overwrite. */
static void test_scope(void **state)
{
    (void)state;
    cr_entity_t *old = sensor(), *patch, *ne;
    op_args_t    keep = { .no_overwrite = true };
    problem_t    pb = { 0 };

    old->scope = J("'/Madrid'");
    patch = mk_entity("urn:ngsi-ld:Sensor:1", NULL, NULL, 0);
    patch->scope = J("['/Madrid','/Spain']");
    ne = entity_apply(A, old, patch, OP_APPEND_ATTRS, &keep, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_value(ne->scope, "['/Madrid','/Spain']");
    assert_int_equal(ne->modified_at, NOW);

    patch->scope = J("'/Paris'");
    ne = entity_apply(A, old, patch, OP_MERGE_ENTITY, NULL, NOW, NULL, &pb);
    assert_value(ne->scope, "'/Paris'");
}

/* ============================================================ rendering */

/* 4.5.2.2 / 4.5.3.2 / 4.8: normalized, sub-attributes, system attributes. */
static void test_render_normalized(void **state)
{
    (void)state;
    cr_entity_t  *e = sensor();
    render_opts_t o = opts(FMT_NORMALIZED);

    assert_render(e, &o, false,
        "{'id':'urn:ngsi-ld:Sensor:1','type':'Sensor',"
        " 'temperature':{'type':'Property','value':25,'observedAt':'2017-07-14T02:40:00Z',"
        "   'unitCode':'CEL','reliability':{'type':'Property','value':0.7},"
        "   'providedBy':{'type':'Relationship','object':'urn:ngsi-ld:Camera:C1'}},"
        " 'name':{'type':'Property','value':'Sensor one'},"
        " 'address':{'type':'Property','value':{'street':'Strasse des 17. Juni','city':'Berlin','country':'Germany'}}}");

    e->n_attrs = 1;
    e->attrs[0].n_sub = 0;
    e->modified_at = NOW;
    o.sys_attrs = true;
    o.context_json = "[\"http://example.org/ctx.jsonld\"]";
    assert_render(e, &o, false,
        "{'id':'urn:ngsi-ld:Sensor:1','type':'Sensor',"
        " 'createdAt':'2017-07-14T02:40:00Z','modifiedAt':'2020-09-13T12:26:40Z',"
        " 'temperature':{'type':'Property','value':25,'observedAt':'2017-07-14T02:40:00Z',"
        "   'unitCode':'CEL','createdAt':'2017-07-14T02:40:00Z','modifiedAt':'2017-07-14T02:40:00Z'},"
        " '@context':['http://example.org/ctx.jsonld']}");
}

/* The Vehicle of annex C.2.2, every attribute kind, in each representation. */
static cr_entity_t *vehicle(void)
{
    cr_attr_t a[7];
    cr_attr_t parked_sub[1] = { mk(ATTR_RELATIONSHIP, "providedBy", "'urn:ngsi-ld:Person:Bob'") };

    a[0] = mk(ATTR_PROPERTY, "brandName", "'Mercedes'");
    a[1] = mk(ATTR_LANGUAGEPROPERTY, "street", "{'fr':'Grand Place','nl':'Grote Markt'}");
    a[2] = mk(ATTR_RELATIONSHIP, "isParked", "'urn:ngsi-ld:OffStreetParking:Downtown1'");
    a[2].object_type = N("OffStreetParking");
    a[2].observed_at = 1501329604000000LL;   /* 2017-07-29T12:00:04Z */
    with_subs(&a[2], parked_sub, 1);
    a[3] = mk(ATTR_VOCABPROPERTY, "category", NULL);
    a[3].value = json_new_string(A, N("nonCommercial"));
    a[4] = mk(ATTR_LISTPROPERTY, "tyreTreadDepths", "[300,300,120,6]");
    a[4].unit_code = "MMT";
    a[5] = mk(ATTR_LISTRELATIONSHIP, "route",
              "[{'object':'urn:ngsi-ld:City:Antwerp'},'urn:ngsi-ld:City:Rotterdam']");
    a[6] = mk(ATTR_JSONPROPERTY, "ticket", "{'id':'85a6','value':'Overstay'}");
    return mk_entity("urn:ngsi-ld:Vehicle:A4567", "Vehicle", a, 7);
}

static void test_render_kinds_normalized(void **state)
{
    (void)state;
    render_opts_t o = opts(FMT_NORMALIZED);

    assert_render(vehicle(), &o, false,
        "{'id':'urn:ngsi-ld:Vehicle:A4567','type':'Vehicle',"
        " 'brandName':{'type':'Property','value':'Mercedes'},"
        " 'street':{'type':'LanguageProperty','languageMap':{'fr':'Grand Place','nl':'Grote Markt'}},"
        " 'isParked':{'type':'Relationship','object':'urn:ngsi-ld:OffStreetParking:Downtown1',"
        "   'objectType':'OffStreetParking','observedAt':'2017-07-29T12:00:04Z',"
        "   'providedBy':{'type':'Relationship','object':'urn:ngsi-ld:Person:Bob'}},"
        " 'category':{'type':'VocabProperty','vocab':'nonCommercial'},"
        " 'tyreTreadDepths':{'type':'ListProperty','valueList':[300,300,120,6],'unitCode':'MMT'},"
        " 'route':{'type':'ListRelationship','objectList':[{'object':'urn:ngsi-ld:City:Antwerp'},"
        "   {'object':'urn:ngsi-ld:City:Rotterdam'}]},"
        " 'ticket':{'type':'JsonProperty','json':{'id':'85a6','value':'Overstay'}}}");
}

/* C.2.2 concise; 4.5.2.3, 4.5.3.3, 4.5.18.3, 4.5.20.3, 4.5.21.3, 4.5.22.3, 4.5.24.3. */
static void test_render_kinds_concise(void **state)
{
    (void)state;
    render_opts_t o = opts(FMT_CONCISE);

    assert_render(vehicle(), &o, false,
        "{'id':'urn:ngsi-ld:Vehicle:A4567','type':'Vehicle',"
        " 'brandName':'Mercedes',"
        " 'street':{'languageMap':{'fr':'Grand Place','nl':'Grote Markt'}},"
        " 'isParked':{'object':'urn:ngsi-ld:OffStreetParking:Downtown1',"
        "   'objectType':'OffStreetParking','observedAt':'2017-07-29T12:00:04Z',"
        "   'providedBy':{'object':'urn:ngsi-ld:Person:Bob'}},"
        " 'category':{'vocab':'nonCommercial'},"
        " 'tyreTreadDepths':{'valueList':[300,300,120,6],'unitCode':'MMT'},"
        " 'route':{'objectList':['urn:ngsi-ld:City:Antwerp','urn:ngsi-ld:City:Rotterdam']},"
        " 'ticket':{'json':{'id':'85a6','value':'Overstay'}}}");
}

/* C.2.2 simplified / 4.5.4. */
static void test_render_kinds_keyvalues(void **state)
{
    (void)state;
    render_opts_t o = opts(FMT_KEYVALUES);

    assert_render(vehicle(), &o, false,
        "{'id':'urn:ngsi-ld:Vehicle:A4567','type':'Vehicle',"
        " 'brandName':'Mercedes',"
        " 'street':{'languageMap':{'fr':'Grand Place','nl':'Grote Markt'}},"
        " 'isParked':'urn:ngsi-ld:OffStreetParking:Downtown1',"
        " 'category':{'vocab':'nonCommercial'},"
        " 'tyreTreadDepths':[300,300,120,6],"
        " 'route':['urn:ngsi-ld:City:Antwerp','urn:ngsi-ld:City:Rotterdam'],"
        " 'ticket':{'json':{'id':'85a6','value':'Overstay'}}}");
}

/* C.2.3 concise: a Property with sub-attributes keeps "value", a bare
 * GeoProperty is its geometry; 4.5.2.3: an object value is bare unless it
 * would read back as something else. */
static cr_entity_t *parking(void)
{
    cr_attr_t a[11];
    cr_attr_t subs[2] = { mk(ATTR_PROPERTY, "reliability", "0.7"),
                          mk(ATTR_RELATIONSHIP, "providedBy", "'urn:ngsi-ld:Camera:C1'") };

    a[0] = mk(ATTR_PROPERTY, "name", "'Downtown One'");
    a[1] = mk(ATTR_PROPERTY, "availableSpotNumber", "121");
    a[1].observed_at = 1501329902000000LL;   /* 2017-07-29T12:05:02Z */
    with_subs(&a[1], subs, 2);
    a[2] = mk(ATTR_GEOPROPERTY, "location", "{'type':'Point','coordinates':[-8.5,41.2]}");
    a[3] = mk(ATTR_PROPERTY, "shape", "{'type':'box','size':2}");
    a[4] = mk(ATTR_PROPERTY, "address", "{'city':'Berlin','street':'Ulrich Strasse'}");
    a[5] = mk(ATTR_PROPERTY, "drawnAt", "{'type':'Point','coordinates':[1,2]}");
    a[6] = mk(ATTR_PROPERTY, "wrapped", "{'value':1,'unitCode':'X'}");
    a[7] = mk(ATTR_PROPERTY, "none", "[]");
    a[8] = mk(ATTR_PROPERTY, "looksMulti", "[{'value':1},{'object':'urn:a:1'}]");
    a[9] = mk(ATTR_PROPERTY, "mixed", "[1,{'value':1}]");
    a[10] = mk(ATTR_PROPERTY, "drawnWhen", "{'type':'Point','coordinates':[1,2]}");
    a[10].observed_at = 1501329902000000LL;
    return mk_entity("urn:ngsi-ld:OffStreetParking:Downtown1", "OffStreetParking", a, 11);
}

static void test_render_concise_parking(void **state)
{
    (void)state;
    render_opts_t o = opts(FMT_CONCISE);

    assert_render(parking(), &o, false,
        "{'id':'urn:ngsi-ld:OffStreetParking:Downtown1','type':'OffStreetParking',"
        " 'name':'Downtown One',"
        " 'availableSpotNumber':{'value':121,'observedAt':'2017-07-29T12:05:02Z',"
        "   'reliability':0.7,'providedBy':{'object':'urn:ngsi-ld:Camera:C1'}},"
        " 'location':{'type':'Point','coordinates':[-8.5,41.2]},"
        " 'shape':{'value':{'type':'box','size':2}},"
        " 'address':{'city':'Berlin','street':'Ulrich Strasse'},"
        " 'drawnAt':{'type':'Property','value':{'type':'Point','coordinates':[1,2]}},"
        " 'wrapped':{'value':{'value':1,'unitCode':'X'}},"
        " 'none':{'value':[]},"
        " 'looksMulti':{'value':[{'value':1},{'object':'urn:a:1'}]},"
        " 'mixed':[1,{'value':1}],"
        " 'drawnWhen':{'type':'Property','value':{'type':'Point','coordinates':[1,2]},"
        "   'observedAt':'2017-07-29T12:05:02Z'}}");
}

/* 4.5.5 / 4.5.4: several instances: an array, or "dataset" in keyValues. */
static void test_render_datasets(void **state)
{
    (void)state;
    cr_attr_t a[3] = { mk(ATTR_PROPERTY, "speed", "10"), mk(ATTR_PROPERTY, "name", "'x'"),
                       mk(ATTR_PROPERTY, "speed", "11") };
    cr_entity_t  *e;
    render_opts_t o = opts(FMT_NORMALIZED);

    a[2].dataset_id = "urn:ds:1";
    e = mk_entity("urn:x:1", "T", a, 3);
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','speed':[{'type':'Property','value':10},"
        " {'type':'Property','value':11,'datasetId':'urn:ds:1'}],"
        " 'name':{'type':'Property','value':'x'}}");
    o.format = FMT_CONCISE;
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','speed':[10,{'value':11,'datasetId':'urn:ds:1'}],'name':'x'}");
    o.format = FMT_KEYVALUES;
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','speed':{'dataset':{'@none':10,'urn:ds:1':11}},'name':'x'}");
}

/* 4.21 pick / omit; "@id", "@type" stand for id and type. */
static void test_render_projection(void **state)
{
    (void)state;
    cr_entity_t  *e = sensor();
    render_opts_t o = opts(FMT_KEYVALUES);
    const char   *pick1[] = { N("name"), "@id" };
    const char   *omit1[] = { N("temperature"), "@type", N("address") };

    e->scope = J("'/Madrid'");
    o.pick = pick1; o.n_pick = 2;
    assert_render(e, &o, false, "{'id':'urn:ngsi-ld:Sensor:1','name':'Sensor one'}");
    o.pick = NULL; o.n_pick = 0;
    o.omit = omit1; o.n_omit = 3;
    assert_render(e, &o, false, "{'id':'urn:ngsi-ld:Sensor:1','scope':'/Madrid','name':'Sensor one'}");
    const char *pick2[] = { "@id", "@type", N("address") };
    o.omit = NULL; o.n_omit = 0;
    o.pick = pick2; o.n_pick = 3;
    assert_render(e, &o, false,
        "{'id':'urn:ngsi-ld:Sensor:1','type':'Sensor','address':{'street':'Strasse des 17. Juni',"
        "'city':'Berlin','country':'Germany'}}");
}

/* 4.15 and C.2.2: the LanguageProperty becomes a Property with "lang". */
static void test_render_lang(void **state)
{
    (void)state;
    cr_attr_t a[1] = { mk(ATTR_LANGUAGEPROPERTY, "street",
                          "{'fr':'Grand Place','nl':'Grote Markt','fr-CH':'Place','@none':'GP'}") };
    cr_entity_t  *e = mk_entity("urn:x:1", "T", a, 1);
    render_opts_t o = opts(FMT_NORMALIZED);

    o.lang = "fr";
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','street':{'type':'Property','value':'Grand Place','lang':'fr'}}");
    o.format = FMT_CONCISE;
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','street':{'value':'Grand Place','lang':'fr'}}");
    o.format = FMT_KEYVALUES;
    assert_render(e, &o, false, "{'id':'urn:x:1','type':'T','street':'Grand Place'}");

    /* quality values: the best ranked available wins */
    o.format = FMT_CONCISE;
    o.lang = "de;q=0.9, nl;q=0.95, *;q=0.1";
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','street':{'value':'Grote Markt','lang':'nl'}}");
    /* a more specific tag served by the less specific one */
    o.lang = "fr-BE";
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','street':{'value':'Grand Place','lang':'fr'}}");
    o.lang = "fr-CH,fr";
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','street':{'value':'Place','lang':'fr-CH'}}");
    /* nothing fits: any supported language, the default first (4.15) */
    o.lang = "ja";
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','street':{'value':'GP','lang':'@none'}}");
    o.lang = "*";
    assert_render(e, &o, false,
        "{'id':'urn:x:1','type':'T','street':{'value':'Grand Place','lang':'fr'}}");
}

/* 4.5.16.2 / 4.5.17.1: a Feature; geometry from location or the chosen
 * GeoProperty, null when absent. */
static void test_render_geojson(void **state)
{
    (void)state;
    cr_attr_t a[3] = { mk(ATTR_PROPERTY, "name", "'Downtown One'"),
                       mk(ATTR_GEOPROPERTY, "location", "{'type':'Point','coordinates':[-8.5,41.2]}"),
                       mk(ATTR_GEOPROPERTY, "entrance", "{'type':'Point','coordinates':[1,2]}") };
    cr_entity_t  *e = mk_entity("urn:ngsi-ld:OffStreetParking:Downtown1", "OffStreetParking", a, 3);
    render_opts_t o = opts(FMT_NORMALIZED);

    assert_render(e, &o, true,
        "{'id':'urn:ngsi-ld:OffStreetParking:Downtown1','type':'Feature',"
        " 'geometry':{'type':'Point','coordinates':[-8.5,41.2]},"
        " 'properties':{'type':'OffStreetParking','name':{'type':'Property','value':'Downtown One'},"
        "   'location':{'type':'GeoProperty','value':{'type':'Point','coordinates':[-8.5,41.2]}},"
        "   'entrance':{'type':'GeoProperty','value':{'type':'Point','coordinates':[1,2]}}}}");

    o.format      = FMT_KEYVALUES;
    o.geoproperty = N("entrance");
    o.context_json = "\"http://example.org/ctx.jsonld\"";
    assert_render(e, &o, true,
        "{'id':'urn:ngsi-ld:OffStreetParking:Downtown1','type':'Feature',"
        " 'geometry':{'type':'Point','coordinates':[1,2]},"
        " 'properties':{'type':'OffStreetParking','name':'Downtown One',"
        "   'location':{'type':'Point','coordinates':[-8.5,41.2]},"
        "   'entrance':{'type':'Point','coordinates':[1,2]}},"
        " '@context':'http://example.org/ctx.jsonld'}");

    o.geoproperty  = N("nowhere");
    o.context_json = NULL;
    o.format       = FMT_CONCISE;
    e->n_attrs     = 1;
    assert_render(e, &o, true,
        "{'id':'urn:ngsi-ld:OffStreetParking:Downtown1','type':'Feature','geometry':null,"
        " 'properties':{'type':'OffStreetParking','name':'Downtown One'}}");
}

static char *render_text(const cr_entity_t *e, const render_opts_t *o)
{
    sbuf_t        sb;
    json_writer_t w;

    sb_init(&sb, A, 512);
    jw_init(&w, &sb);
    entity_render(&w, e, o);
    return sb.p;
}

/* 4.5.2.1: concise is lossless: concise text parsed back (entity_parse)
 * renders the same normalized entity; and entity_apply works on a frozen
 * entity, which it leaves untouched. */
static void concise_round_trip(const cr_entity_t *e)
{
    render_opts_t o = opts(FMT_CONCISE);
    char         *concise, *norm1, *norm2, err[160];
    json_t       *body;
    cr_entity_t  *back;
    problem_t     pb = { 0 };

    concise = render_text(e, &o);
    body = json_parse_copy(A, concise, strlen(concise), NULL, err, sizeof err);
    assert_non_null(body);
    back = entity_parse(A, body, ld_core(), EP_CREATE, T0, &pb);
    if (!back)
        fail_msg("%s: %s", concise, pb.detail);
    o.format = FMT_NORMALIZED;
    norm1 = render_text(e, &o);
    norm2 = render_text(back, &o);
    if (!json_equal(json_parse_copy(A, norm1, strlen(norm1), NULL, err, sizeof err),
                    json_parse_copy(A, norm2, strlen(norm2), NULL, err, sizeof err)))
        fail_msg("round trip\n  %s\ngave\n  %s", norm1, norm2);
}

static void test_concise_round_trip(void **state)
{
    (void)state;
    cr_entity_t  *e = vehicle(), *frozen, *ne;
    problem_t     pb = { 0 };

    concise_round_trip(e);
    concise_round_trip(parking());

    frozen = entity_freeze(e);
    assert_non_null(frozen);
    cr_attr_t p[1] = { mk(ATTR_PROPERTY, "brandName", "'Audi'") };
    ne = entity_apply(A, frozen, mk_entity(e->id, NULL, p, 1), OP_UPDATE_ATTRS, NULL, NOW, NULL, &pb);
    assert_non_null(ne);
    assert_value(find(ne, "brandName", NULL)->value, "'Audi'");
    assert_value(find(frozen, "brandName", NULL)->value, "'Mercedes'");
    cr_entity_t *nf = entity_freeze(ne);
    assert_non_null(nf);
    entity_unref(frozen);                   /* ne pointed into it; nf does not */
    assert_value(find(nf, "street", NULL)->value, "{'fr':'Grand Place','nl':'Grote Markt'}");
    entity_unref(nf);
}

/* attr_render: one attribute alone, as in GET .../attrs/{attrId}. */
static void test_attr_render(void **state)
{
    (void)state;
    cr_attr_t     a = mk(ATTR_PROPERTY, "temperature", "21.5");
    render_opts_t o = opts(FMT_NORMALIZED);
    sbuf_t        sb;
    json_writer_t w;
    char          err[128];

    a.unit_code = "CEL";
    sb_init(&sb, A, 64);
    jw_init(&w, &sb);
    attr_render(&w, &a, &o);
    json_t *got = json_parse_copy(A, sb.p, sb.len, NULL, err, sizeof err);
    assert_non_null(got);
    assert_true(json_equal(got, J("{'type':'Property','value':21.5,'unitCode':'CEL'}")));
}

/* The render cache: a frozen entity's first plain rendering is kept and
 * served again byte for byte; other formats and projections are rendered
 * as before; the text goes with the entity version. */
static void render_twice(const cr_entity_t *e, const render_opts_t *o, sbuf_t *sb)
{
    json_writer_t w;
    sb_init(sb, A, 256);
    jw_init(&w, sb);
    jw_array_begin(&w);                 /* as in a query page: commas around it */
    entity_render(&w, e, o);
    entity_render(&w, e, o);
    jw_array_end(&w);
}

static void test_render_cache(void **state)
{
    (void)state;
    render_cache_stats_t s0, s1;
    int saved = cr_config.render_cache_mb;
    cr_config.render_cache_mb = 1;
    cr_entity_t *fe = entity_freeze(sensor());
    render_opts_t o = opts(FMT_NORMALIZED);
    sbuf_t a, b, c;

    render_cache_get_stats(&s0);
    render_twice(fe, &o, &a);           /* miss, then hit */
    render_twice(fe, &o, &b);           /* two hits */
    render_cache_get_stats(&s1);
    assert_string_equal(a.p, b.p);
    assert_int_equal(s1.hits - s0.hits, 3);
    assert_int_equal(s1.misses - s0.misses, 1);
    assert_int_equal(s1.entries - s0.entries, 1);
    assert_non_null(fe->render_cache);

    cr_config.render_cache_mb = 0;     /* the same text without the cache */
    render_twice(fe, &o, &c);
    assert_string_equal(a.p, c.p);
    cr_config.render_cache_mb = 1;

    render_opts_t kv = opts(FMT_KEYVALUES);   /* another format: not from the cache */
    render_twice(fe, &kv, &c);
    assert_string_not_equal(a.p, c.p);
    render_opts_t sys = opts(FMT_NORMALIZED);
    sys.sys_attrs = true;
    render_twice(fe, &sys, &c);
    assert_non_null(strstr(c.p, "createdAt"));

    entity_unref(fe);                  /* frees the cached text with it */
    render_cache_get_stats(&s1);
    assert_int_equal(s1.entries, s0.entries);
    assert_int_equal(s1.bytes, s0.bytes);
    cr_config.render_cache_mb = saved;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_merge_entity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge_value_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge_keeps_kind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_datasets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_no_overwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_attrs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partial_attr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_attr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_attr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_entity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scope, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_normalized, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_kinds_normalized, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_kinds_concise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_kinds_keyvalues, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_concise_parking, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_datasets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_projection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_lang, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_geojson, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attr_render, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concise_round_trip, setup, teardown),
    };

    if (!ld_init()) {
        fprintf(stderr, "ld_init failed\n");
        return 1;
    }
    model_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
