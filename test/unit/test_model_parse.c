/*
 * test_model_parse.c - unit tests for src/model/entity.c and parse.c: the
 * syntax checks (URIs, names, scopes), entity_parse on normalized and concise
 * entities of every attribute kind, multi-attributes, sub-attributes, every
 * validation error, NGSI-LD Null under EP_MERGE, partial attributes,
 * attr_parse, and frozen entities (equal to their draft, independent of the
 * request arena, reference counted; the size of a typical entity is printed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define NOW 1700000000000000LL

static arena_t   *A;
static problem_t  P;

static int setup(void **state)
{
    (void)state;
    A = arena_new(64 * 1024);
    memset(&P, 0, sizeof P);
    cr_config.max_attributes = 1000;
    return A ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    arena_free(A);
    return 0;
}

static cr_entity_t *parse_f(const char *text, unsigned flags)
{
    char    err[128];
    json_t *body = json_parse_copy(A, text, strlen(text), NULL, err, sizeof err);

    if (!body)
        fail_msg("test JSON does not parse: %s: %s", err, text);
    memset(&P, 0, sizeof P);
    return entity_parse(A, body, ld_core(), flags, NOW, &P);
}

static cr_entity_t *parse_ok(const char *text, unsigned flags)
{
    cr_entity_t *e = parse_f(text, flags);
    if (!e)
        fail_msg("unexpected error: %s\n  for %s", P.detail, text);
    return e;
}

/* Expects BadRequestData whose detail contains `needle`. */
static void parse_bad(const char *text, unsigned flags, const char *needle)
{
    cr_entity_t *e = parse_f(text, flags);
    if (e)
        fail_msg("accepted, expected an error with '%s':\n  %s", needle, text);
    assert_int_equal(P.kind, PB_BAD_REQUEST_DATA);
    if (!strstr(P.detail, needle))
        fail_msg("detail '%s' does not contain '%s'", P.detail, needle);
}

static const char *X(const char *term)
{
    return ld_expand(ld_core(), term);
}

static const cr_attr_t *attr(const cr_entity_t *e, const char *term)
{
    const cr_attr_t *a = entity_attr_any(e, X(term));
    if (!a)
        fail_msg("no attribute %s", term);
    return a;
}

static const cr_attr_t *sub(const cr_attr_t *a, const char *term)
{
    for (uint16_t i = 0; i < a->n_sub; i++)
        if (a->sub[i].name == X(term))
            return &a->sub[i];
    fail_msg("no sub-attribute %s", term);
    return NULL;
}

static void assert_json(const json_t *v, const char *expected)
{
    char    err[128];
    json_t *want = json_parse_copy(A, expected, strlen(expected), NULL, err, sizeof err);
    assert_non_null(want);
    if (!json_equal(v, want)) {
        sbuf_t sb;
        sb_init(&sb, A, 128);
        if (v)
            json_render(&sb, v);
        fail_msg("value %s, expected %s", v ? sb.p : "(null)", expected);
    }
}

/* ------------------------------------------------------------ syntax checks */

static void test_valid_uri(void **state)
{
    (void)state;
    assert_true(model_valid_uri("urn:ngsi-ld:Vehicle:A4567"));
    assert_true(model_valid_uri("http://example.org/a?b=c#d"));
    assert_true(model_valid_uri("x+y.z-1:abc"));
    assert_true(model_valid_uri("urn:ngsi-ld:Straße:1"));
    assert_false(model_valid_uri(""));
    assert_false(model_valid_uri("Vehicle1"));
    assert_false(model_valid_uri("urn:"));
    assert_false(model_valid_uri(":abc"));
    assert_false(model_valid_uri("1urn:abc"));
    assert_false(model_valid_uri("ur n:abc"));
    assert_false(model_valid_uri("urn:a b"));
    assert_false(model_valid_uri("urn:a\tb"));
    assert_false(model_valid_uri("urn:a<b"));
    assert_false(model_valid_uri("urn:a\"b"));
    assert_false(model_valid_uri("urn:a{b}"));
    assert_false(model_valid_uri("urn:a|b"));
    assert_false(model_valid_uri("urn:a\\b"));
    assert_false(model_valid_uri("urn:a^b"));
    assert_false(model_valid_uri("urn:a`b"));
    assert_false(model_valid_uri(NULL));
}

static void test_valid_name(void **state)
{
    (void)state;
    assert_true(model_valid_name("speed"));
    assert_true(model_valid_name("Vehicle"));
    assert_true(model_valid_name("a_1"));
    assert_true(model_valid_name("schema:name"));
    assert_true(model_valid_name("température"));
    assert_true(model_valid_name("温度2"));
    assert_true(model_valid_name("https://example.org/speed"));
    assert_true(model_valid_name("urn:ngsi-ld:x"));
    assert_false(model_valid_name(""));
    assert_false(model_valid_name("1speed"));
    assert_false(model_valid_name("_speed"));
    assert_false(model_valid_name("sp eed"));
    assert_false(model_valid_name("sp-eed"));
    assert_false(model_valid_name("speed("));
    assert_false(model_valid_name("a=b"));
    assert_false(model_valid_name("a;b"));
    assert_false(model_valid_name("speed:"));
    assert_false(model_valid_name("@context"));
    assert_false(model_valid_name("temp€"));
    assert_false(model_valid_name("http://example.org/a(b)"));
    assert_false(model_valid_name(NULL));
}

static void test_valid_scope(void **state)
{
    (void)state;
    assert_true(model_valid_scope("/Madrid"));
    assert_true(model_valid_scope("Madrid"));
    assert_true(model_valid_scope("/Madrid/Gardens/ParqueNorte"));
    assert_true(model_valid_scope("/CompanyA/Unit_C2"));
    assert_true(model_valid_scope("/Málaga"));
    assert_true(model_valid_scope("urn:ngsi-ld:null"));
    assert_false(model_valid_scope(""));
    assert_false(model_valid_scope("/"));
    assert_false(model_valid_scope("/Madrid/"));
    assert_false(model_valid_scope("//Madrid"));
    assert_false(model_valid_scope("/Madrid//Gardens"));
    assert_false(model_valid_scope("/1Madrid"));
    assert_false(model_valid_scope("/Mad rid"));
    assert_false(model_valid_scope("/Madrid/#"));
}

static void test_kind_names(void **state)
{
    (void)state;
    assert_string_equal(attr_kind_name(ATTR_PROPERTY), "Property");
    assert_string_equal(attr_kind_name(ATTR_RELATIONSHIP), "Relationship");
    assert_string_equal(attr_kind_name(ATTR_GEOPROPERTY), "GeoProperty");
    assert_string_equal(attr_kind_name(ATTR_LANGUAGEPROPERTY), "LanguageProperty");
    assert_string_equal(attr_kind_name(ATTR_VOCABPROPERTY), "VocabProperty");
    assert_string_equal(attr_kind_name(ATTR_LISTPROPERTY), "ListProperty");
    assert_string_equal(attr_kind_name(ATTR_LISTRELATIONSHIP), "ListRelationship");
    assert_string_equal(attr_kind_name(ATTR_JSONPROPERTY), "JsonProperty");
    /* The MN names agree with the core context. */
    assert_ptr_equal(MN.property, X("Property"));
    assert_ptr_equal(MN.relationship, X("Relationship"));
    assert_ptr_equal(MN.geoproperty, X("GeoProperty"));
    assert_ptr_equal(MN.has_value, X("value"));
    assert_ptr_equal(MN.has_object, X("object"));
    assert_ptr_equal(MN.has_vocab, X("vocab"));
    assert_ptr_equal(MN.json, X("json"));
    assert_ptr_equal(MN.observed_at, X("observedAt"));
    assert_ptr_equal(MN.dataset_id, X("datasetId"));
    assert_ptr_equal(MN.location, X("location"));
    assert_ptr_equal(MN.scope, X("scope"));
    assert_ptr_equal(MN.object_type, X("objectType"));
}

/* -------------------------------------------------------------- entities */

static const char *ALL_NORMALIZED =
    "{\"id\":\"urn:ngsi-ld:Thing:1\",\"type\":\"Thing\","
    "\"@context\":\"https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context.jsonld\","
    "\"createdAt\":\"2000-01-01T00:00:00Z\","
    "\"speed\":{\"type\":\"Property\",\"value\":80,\"unitCode\":\"KMH\","
    "  \"observedAt\":\"2024-01-02T03:04:05.678Z\",\"createdAt\":\"x\",\"instanceId\":\"urn:i\"},"
    "\"owner\":{\"type\":\"Relationship\",\"object\":\"urn:ngsi-ld:Person:1\",\"objectType\":\"Person\"},"
    "\"location\":{\"type\":\"GeoProperty\",\"value\":{\"type\":\"Point\",\"coordinates\":[-3.7,40.4]}},"
    "\"name\":{\"type\":\"LanguageProperty\",\"languageMap\":{\"en\":\"car\",\"es\":[\"coche\",\"auto\"],\"@none\":\"x\"}},"
    "\"category\":{\"type\":\"VocabProperty\",\"vocab\":[\"Sedan\",\"http://example.org/Car\"]},"
    "\"ranks\":{\"type\":\"ListProperty\",\"valueList\":[1,\"two\",{\"three\":3}]},"
    "\"parts\":{\"type\":\"ListRelationship\",\"objectList\":[{\"object\":\"urn:a\"},{\"object\":\"urn:b\"}]},"
    "\"raw\":{\"type\":\"JsonProperty\",\"json\":{\"type\":\"notExpanded\",\"k\":[1,null]}}"
    "}";

static void test_normalized_all_kinds(void **state)
{
    (void)state;
    cr_entity_t *e = parse_ok(ALL_NORMALIZED, EP_CREATE);

    assert_string_equal(e->id, "urn:ngsi-ld:Thing:1");
    assert_int_equal(e->n_types, 1);
    assert_ptr_equal(e->types[0], X("Thing"));
    assert_true(entity_has_type(e, X("Thing")));
    assert_false(entity_has_type(e, X("Other")));
    assert_int_equal(e->n_attrs, 8);
    assert_true(e->created_at == NOW && e->modified_at == NOW);
    assert_int_equal(e->refs, 0);

    const cr_attr_t *a = attr(e, "speed");
    assert_int_equal(a->kind, ATTR_PROPERTY);
    assert_json(a->value, "80");
    assert_string_equal(a->unit_code, "KMH");
    assert_true(a->observed_at == 1704164645678000LL);
    assert_true(a->created_at == NOW && a->modified_at == NOW);
    assert_null(a->dataset_id);
    assert_int_equal(a->n_sub, 0);

    a = attr(e, "owner");
    assert_int_equal(a->kind, ATTR_RELATIONSHIP);
    assert_json(a->value, "\"urn:ngsi-ld:Person:1\"");
    assert_ptr_equal(a->object_type, X("Person"));
    assert_true(a->observed_at == CR_NO_TIME);

    a = attr(e, "location");
    assert_int_equal(a->kind, ATTR_GEOPROPERTY);
    assert_json(a->value, "{\"type\":\"Point\",\"coordinates\":[-3.7,40.4]}");
    assert_ptr_equal(a->name, MN.location);

    a = attr(e, "name");
    assert_int_equal(a->kind, ATTR_LANGUAGEPROPERTY);
    assert_json(a->value, "{\"en\":\"car\",\"es\":[\"coche\",\"auto\"],\"@none\":\"x\"}");

    a = attr(e, "category");
    assert_int_equal(a->kind, ATTR_VOCABPROPERTY);
    assert_int_equal(a->value->type, JSON_ARRAY);
    assert_ptr_equal(a->value->child->str, X("Sedan"));
    assert_string_equal(a->value->child->next->str, "http://example.org/Car");

    a = attr(e, "ranks");
    assert_int_equal(a->kind, ATTR_LISTPROPERTY);
    assert_json(a->value, "[1,\"two\",{\"three\":3}]");

    a = attr(e, "parts");
    assert_int_equal(a->kind, ATTR_LISTRELATIONSHIP);
    assert_json(a->value, "[{\"object\":\"urn:a\"},{\"object\":\"urn:b\"}]");

    a = attr(e, "raw");
    assert_int_equal(a->kind, ATTR_JSONPROPERTY);
    assert_json(a->value, "{\"type\":\"notExpanded\",\"k\":[1,null]}");
}

static void test_concise_all_kinds(void **state)
{
    (void)state;
    cr_entity_t *e = parse_ok(
        "{\"id\":\"urn:ngsi-ld:Thing:2\",\"type\":[\"Thing\",\"Car\",\"Thing\"],"
        "\"brand\":\"Mercedes\",\"n\":3.5,\"ok\":true,\"tags\":[1,2],"
        "\"address\":{\"street\":\"Main\",\"city\":\"X\"},"
        "\"speed\":{\"value\":80,\"observedAt\":\"2024-01-02T03:04:05Z\"},"
        "\"owner\":{\"object\":[\"urn:a\",\"urn:b\"]},"
        "\"location\":{\"type\":\"Point\",\"coordinates\":[1,2]},"
        "\"area\":{\"value\":{\"type\":\"Polygon\",\"coordinates\":[[[0,0],[1,0],[1,1],[0,0]]]},\"q\":1},"
        "\"name\":{\"languageMap\":{\"fr\":\"voiture\"}},"
        "\"cat\":{\"vocab\":\"Sedan\"},"
        "\"ranks\":{\"valueList\":[3,2]},"
        "\"parts\":{\"objectList\":[\"urn:a\",{\"object\":\"urn:b\"}]},"
        "\"raw\":{\"json\":[1,2]},"
        "\"objs\":[{\"a\":1},{\"b\":2}]"
        "}", EP_CREATE);

    assert_int_equal(e->n_types, 2);
    assert_ptr_equal(e->types[0], X("Thing"));
    assert_ptr_equal(e->types[1], X("Car"));

    assert_int_equal(attr(e, "brand")->kind, ATTR_PROPERTY);
    assert_json(attr(e, "brand")->value, "\"Mercedes\"");
    assert_json(attr(e, "n")->value, "3.5");
    assert_json(attr(e, "ok")->value, "true");
    assert_json(attr(e, "tags")->value, "[1,2]");
    assert_int_equal(attr(e, "address")->kind, ATTR_PROPERTY);
    assert_json(attr(e, "address")->value, "{\"street\":\"Main\",\"city\":\"X\"}");
    assert_int_equal(attr(e, "address")->n_sub, 0);
    assert_int_equal(attr(e, "speed")->kind, ATTR_PROPERTY);
    assert_true(attr(e, "speed")->observed_at == 1704164645000000LL);
    assert_int_equal(attr(e, "owner")->kind, ATTR_RELATIONSHIP);
    assert_json(attr(e, "owner")->value, "[\"urn:a\",\"urn:b\"]");
    assert_int_equal(attr(e, "location")->kind, ATTR_GEOPROPERTY);
    assert_json(attr(e, "location")->value, "{\"type\":\"Point\",\"coordinates\":[1,2]}");
    assert_int_equal(attr(e, "area")->kind, ATTR_GEOPROPERTY);
    assert_int_equal(attr(e, "area")->n_sub, 1);
    assert_int_equal(attr(e, "name")->kind, ATTR_LANGUAGEPROPERTY);
    assert_int_equal(attr(e, "cat")->kind, ATTR_VOCABPROPERTY);
    assert_ptr_equal(attr(e, "cat")->value->str, X("Sedan"));
    assert_int_equal(attr(e, "ranks")->kind, ATTR_LISTPROPERTY);
    assert_int_equal(attr(e, "parts")->kind, ATTR_LISTRELATIONSHIP);
    assert_json(attr(e, "parts")->value, "[{\"object\":\"urn:a\"},{\"object\":\"urn:b\"}]");
    assert_int_equal(attr(e, "raw")->kind, ATTR_JSONPROPERTY);
    assert_json(attr(e, "raw")->value, "[1,2]");
    assert_int_equal(attr(e, "objs")->kind, ATTR_PROPERTY);
    assert_json(attr(e, "objs")->value, "[{\"a\":1},{\"b\":2}]");
}

static void test_geo_string_value(void **state)
{
    (void)state;
    cr_entity_t *e = parse_ok(
        "{\"id\":\"urn:x\",\"type\":\"T\",\"location\":{\"type\":\"GeoProperty\","
        "\"value\":\"{\\\"type\\\":\\\"Point\\\",\\\"coordinates\\\":[5,6]}\"}}", EP_CREATE);
    assert_json(attr(e, "location")->value, "{\"type\":\"Point\",\"coordinates\":[5,6]}");
}

static void test_expanded_names(void **state)
{
    (void)state;
    cr_entity_t *e = parse_ok(
        "{\"@id\":\"urn:x\",\"@type\":\"https://example.org/T\","
        "\"https://example.org/speed\":{\"type\":\"https://uri.etsi.org/ngsi-ld/Property\",\"value\":1},"
        "\"ngsi-ld:location\":{\"type\":\"Point\",\"coordinates\":[0,0]}}", EP_CREATE);
    assert_ptr_equal(e->types[0], intern_cstr("https://example.org/T"));
    const cr_attr_t *a = entity_attr_any(e, intern_cstr("https://example.org/speed"));
    assert_non_null(a);
    assert_int_equal(a->kind, ATTR_PROPERTY);
    assert_non_null(entity_attr_any(e, MN.location));
}

static void test_unicode_names(void **state)
{
    (void)state;
    cr_entity_t *e = parse_ok("{\"id\":\"urn:ngsi-ld:Café:1\",\"type\":\"Café\",\"température\":21,"
                              "\"scope\":\"/España/Málaga\"}", EP_CREATE);
    assert_ptr_equal(e->types[0], X("Café"));
    assert_json(attr(e, "température")->value, "21");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"temp€\":1}", EP_CREATE, "temp€");
}

static void test_multi_attribute(void **state)
{
    (void)state;
    cr_entity_t *e = parse_ok(
        "{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":["
        "{\"type\":\"Property\",\"value\":1},"
        "{\"type\":\"Property\",\"value\":2,\"datasetId\":\"urn:ds:gps\"},"
        "{\"value\":3,\"datasetId\":\"urn:ds:radar\"}],"
        "\"owner\":[{\"object\":\"urn:a\",\"datasetId\":\"@none\"},{\"object\":\"urn:b\",\"datasetId\":\"urn:ds:2\"}]}",
        EP_CREATE);
    assert_int_equal(e->n_attrs, 5);
    const cr_attr_t *a = entity_attr(e, X("speed"), NULL);
    assert_non_null(a);
    assert_json(a->value, "1");
    a = entity_attr(e, X("speed"), "urn:ds:gps");
    assert_non_null(a);
    assert_json(a->value, "2");
    a = entity_attr(e, X("speed"), "urn:ds:radar");
    assert_non_null(a);
    assert_json(a->value, "3");
    assert_null(entity_attr(e, X("speed"), "urn:ds:none"));
    a = entity_attr(e, X("owner"), NULL);
    assert_non_null(a);
    assert_json(a->value, "\"urn:a\"");

    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":[{\"value\":1,\"datasetId\":\"urn:d\"},"
              "{\"value\":2,\"datasetId\":\"urn:d\"}]}", EP_CREATE, "datasetId 'urn:d'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":[{\"value\":1},{\"value\":2}]}",
              EP_CREATE, "default instance");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":[{\"value\":1},{\"value\":2,\"datasetId\":\"@none\"}]}",
              EP_CREATE, "default instance");
    /* The same attribute under two spellings. */
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":1,"
              "\"https://uri.etsi.org/ngsi-ld/default-context/speed\":2}", EP_CREATE, "default instance");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":[{\"value\":1,\"datasetId\":\"not a uri\"}]}",
              EP_CREATE, "datasetId");
}

static void test_sub_attributes(void **state)
{
    (void)state;
    cr_entity_t *e = parse_ok(
        "{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":{\"type\":\"Property\",\"value\":80,"
        "\"source\":{\"type\":\"Relationship\",\"object\":\"urn:sensor:1\","
        "   \"calibrated\":{\"type\":\"Property\",\"value\":true,\"observedAt\":\"2020-01-01T00:00:00Z\"}},"
        "\"accuracy\":0.5,"
        "\"quality\":[{\"value\":1,\"datasetId\":\"urn:q:1\"},{\"value\":2}]}}", EP_CREATE);
    const cr_attr_t *a = attr(e, "speed");
    assert_int_equal(a->n_sub, 4);
    const cr_attr_t *s = sub(a, "source");
    assert_int_equal(s->kind, ATTR_RELATIONSHIP);
    assert_int_equal(s->n_sub, 1);
    assert_true(s->created_at == NOW);
    const cr_attr_t *c = sub(s, "calibrated");
    assert_json(c->value, "true");
    assert_true(c->observed_at == 1577836800000000LL);
    assert_json(sub(a, "accuracy")->value, "0.5");

    /* Errors name the path. */
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":{\"value\":80,"
              "\"source\":{\"type\":\"Relationship\",\"object\":\"nope\"}}}", EP_CREATE, "speed.source");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"speed\":{\"value\":80,"
              "\"quality\":[{\"value\":1},{\"value\":2}]}}", EP_CREATE, "default instance");
}

static void test_entity_members(void **state)
{
    (void)state;
    cr_entity_t *e = parse_ok("{\"id\":\"urn:x\",\"type\":\"T\",\"scope\":\"/Madrid/Centro\","
                              "\"modifiedAt\":\"bogus\",\"deletedAt\":1,\"expiresAt\":\"2030-01-01T00:00:00Z\"}",
                              EP_CREATE);
    assert_json(e->scope, "\"/Madrid/Centro\"");
    assert_int_equal(e->n_attrs, 0);
    e = parse_ok("{\"id\":\"urn:x\",\"type\":\"T\",\"scope\":[\"/a\",\"b/c\"]}", EP_CREATE);
    assert_json(e->scope, "[\"/a\",\"b/c\"]");

    /* Fragments: id and type optional. */
    e = parse_ok("{\"speed\":1}", EP_FRAGMENT);
    assert_null(e->id);
    assert_int_equal(e->n_types, 0);
    assert_int_equal(e->n_attrs, 1);
    e = parse_ok("{}", EP_FRAGMENT);
    assert_int_equal(e->n_attrs, 0);
}

static void test_errors(void **state)
{
    (void)state;
    parse_bad("[1]", EP_CREATE, "JSON object");
    parse_bad("{\"type\":\"T\"}", EP_CREATE, "no 'id'");
    parse_bad("{\"id\":\"urn:x\"}", EP_CREATE, "no 'type'");
    parse_bad("{\"id\":\"notauri\",\"type\":\"T\"}", EP_CREATE, "URI");
    parse_bad("{\"id\":5,\"type\":\"T\"}", EP_CREATE, "URI");
    parse_bad("{\"id\":\"urn:x\",\"@id\":\"urn:y\",\"type\":\"T\"}", EP_CREATE, "twice");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T T\"}", EP_CREATE, "entity type");
    parse_bad("{\"id\":\"urn:x\",\"type\":[]}", EP_CREATE, "'type'");
    parse_bad("{\"id\":\"urn:x\",\"type\":[\"T\",3]}", EP_CREATE, "entity type");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"scope\":\"/a/\"}", EP_CREATE, "scope");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"scope\":7}", EP_CREATE, "scope");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"expiresAt\":\"tomorrow\"}", EP_CREATE, "expiresAt");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"sp eed\":1}", EP_CREATE, "invalid attribute name");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"a(b)\":1}", EP_CREATE, "'a(b)'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"datasetId\":1}", EP_CREATE, "reserved");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"observedAt\":\"2020-01-01T00:00:00Z\"}", EP_CREATE, "reserved");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":null}", EP_CREATE, "null");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\"}}", EP_CREATE, "needs 'value'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":null}}", EP_CREATE,
              "must not be null");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"observedAt\":\"2020-01-01T00:00:00Z\"}}",
              EP_CREATE, "no 'value'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Relationship\"}}", EP_CREATE, "needs 'object'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,"
              "\"observedAt\":\"yesterday\"}}", EP_CREATE, "'s': 'observedAt'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,"
              "\"observedAt\":1}}", EP_CREATE, "observedAt");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,"
              "\"observedAt\":\"2024-01-01T10:00:00\"}}", EP_CREATE, "observedAt");   /* no zone (4.6.3) */
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":[]}", EP_CREATE, "empty array");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"value\":1,\"t\":[]}}", EP_CREATE, "s.t");
    parse_bad("{\"s\":[]}", EP_FRAGMENT | EP_MERGE, "empty array");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,\"unitCode\":5}}",
              EP_CREATE, "unitCode");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Relationship\",\"object\":\"urn:a\","
              "\"value\":1}}", EP_CREATE, "'value' is not allowed in a Relationship");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Relationship\",\"object\":\"urn:a\","
              "\"unitCode\":\"KMH\"}}", EP_CREATE, "unitCode");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,"
              "\"object\":\"urn:a\"}}", EP_CREATE, "'object' is not allowed in a Property");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"value\":1,\"object\":\"urn:a\"}}",
              EP_CREATE, "ambiguous");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,"
              "\"objectType\":\"T\"}}", EP_CREATE, "objectType");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Relationship\",\"object\":\"a b\"}}",
              EP_CREATE, "'object' must be a URI");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Relationship\",\"object\":[]}}",
              EP_CREATE, "'object'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Relationship\",\"object\":[\"urn:a\",1]}}",
              EP_CREATE, "'object'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Blob\",\"value\":1}}",
              EP_CREATE, "invalid attribute type 'Blob'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":7,\"value\":1}}", EP_CREATE, "'type'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"GeoProperty\",\"value\":5}}",
              EP_CREATE, "GeoJSON");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"GeoProperty\",\"value\":\"{bad\"}}",
              EP_CREATE, "not GeoJSON");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"location\":{\"type\":\"Point\",\"coordinates\":[1]}}",
              EP_CREATE, "location");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"LanguageProperty\",\"languageMap\":\"en\"}}",
              EP_CREATE, "'languageMap' must be an object");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"LanguageProperty\",\"languageMap\":{\"e n\":\"x\"}}}",
              EP_CREATE, "language tag");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"LanguageProperty\",\"languageMap\":{\"en\":1}}}",
              EP_CREATE, "entry 'en'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"languageMap\":{\"en\":[\"a\",2]}}}",
              EP_CREATE, "entry 'en'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"LanguageProperty\",\"languageMap\":{}}}",
              EP_CREATE, "empty");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"LanguageProperty\",\"languageMap\":{\"en\":\"x\"},"
              "\"value\":\"x\"}}", EP_CREATE, "'value' is not allowed");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"VocabProperty\",\"vocab\":5}}",
              EP_CREATE, "'vocab'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"VocabProperty\",\"vocab\":\"not a name\"}}",
              EP_CREATE, "'vocab'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"vocab\":[\"ok\",\"no way\"]}}", EP_CREATE, "'vocab'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"vocab\":[]}}", EP_CREATE, "'vocab'");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"VocabProperty\",\"vocab\":\"A\",\"unitCode\":\"M\"}}",
              EP_CREATE, "unitCode");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"ListProperty\",\"valueList\":1}}",
              EP_CREATE, "'valueList' must be an array");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"ListRelationship\",\"objectList\":[\"x y\"]}}",
              EP_CREATE, "objectList");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"ListRelationship\",\"objectList\":"
              "[{\"object\":\"urn:a\",\"more\":1}]}}", EP_CREATE, "objectList");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"ListRelationship\",\"objectList\":\"urn:a\"}}",
              EP_CREATE, "objectList");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"JsonProperty\",\"json\":{},\"unitCode\":\"M\"}}",
              EP_CREATE, "unitCode");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,\"entity\":{}}}",
              EP_CREATE, "output only");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,\"@context\":{}}}",
              EP_CREATE, "@context");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,\"bad name\":1}}",
              EP_CREATE, "s.bad name");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,\"valueType\":1}}",
              EP_CREATE, "valueType");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"type\":\"Property\",\"value\":1,\"expiresAt\":\"x\"}}",
              EP_CREATE, "expiresAt");

    /* Several objectTypes (5.2.6): one interned string, the IRIs joined by ' ', duplicates once */
    cr_entity_t *e = parse_f("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"object\":\"urn:a\","
                             "\"objectType\":[\"A\",\"B\",\"A\"]}}", EP_CREATE);
    assert_non_null(e);
    assert_ptr_equal(e->attrs[0].object_type, intern_cstr("https://uri.etsi.org/ngsi-ld/default-context/" "A " "https://uri.etsi.org/ngsi-ld/default-context/" "B"));
    e = parse_f("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"object\":\"urn:a\",\"objectType\":[\"A\"]}}",
                EP_CREATE);
    assert_non_null(e);
    assert_ptr_equal(e->attrs[0].object_type, intern_cstr("https://uri.etsi.org/ngsi-ld/default-context/" "A"));
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"object\":\"urn:a\",\"objectType\":[]}}",
              EP_CREATE, "objectType");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"object\":\"urn:a\",\"objectType\":[\"A\",1]}}",
              EP_CREATE, "objectType");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"s\":{\"object\":\"urn:a\",\"objectType\":[\"type\"]}}",
              EP_CREATE, "keyword");
}

static void test_too_many_attributes(void **state)
{
    (void)state;
    cr_config.max_attributes = 3;
    parse_ok("{\"id\":\"urn:x\",\"type\":\"T\",\"a\":1,\"b\":2,\"c\":3}", EP_CREATE);
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"a\":1,\"b\":2,\"c\":3,\"d\":4}", EP_CREATE, "too many");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"a\":[{\"value\":1},{\"value\":2,\"datasetId\":\"urn:1\"},"
              "{\"value\":3,\"datasetId\":\"urn:2\"},{\"value\":4,\"datasetId\":\"urn:3\"}]}", EP_CREATE, "too many");
    parse_bad("{\"id\":\"urn:x\",\"type\":\"T\",\"a\":{\"value\":1,\"s\":[{\"value\":1},"
              "{\"value\":2,\"datasetId\":\"urn:1\"},{\"value\":3,\"datasetId\":\"urn:2\"},"
              "{\"value\":4,\"datasetId\":\"urn:3\"}]}}", EP_CREATE, "'a': too many");
    cr_config.max_attributes = 0;      /* 0: the default, 1000 */
    sbuf_t sb;
    sb_init(&sb, A, 32 * 1024);
    sb_adds(&sb, "{\"id\":\"urn:x\",\"type\":\"T\"");
    for (int i = 0; i < 1000; i++)
        sb_printf(&sb, ",\"a%d\":%d", i, i);
    sb_adds(&sb, "}");
    cr_entity_t *e = parse_ok(sb.p, EP_CREATE);
    assert_int_equal(e->n_attrs, 1000);
    sb.p[sb.len - 1] = '\0';
    sb.len--;
    sb_adds(&sb, ",\"one_more\":1}");
    parse_bad(sb.p, EP_CREATE, "too many");
    cr_config.max_attributes = 1000;
}

static void test_merge_nulls(void **state)
{
    (void)state;
    const char *body =
        "{\"a\":{\"type\":\"Property\",\"value\":\"urn:ngsi-ld:null\"},"
        "\"b\":{\"type\":\"Relationship\",\"object\":\"urn:ngsi-ld:null\"},"
        "\"c\":\"urn:ngsi-ld:null\","
        "\"d\":{\"type\":\"LanguageProperty\",\"languageMap\":{\"@none\":\"urn:ngsi-ld:null\"}},"
        "\"e\":{\"type\":\"ListProperty\",\"valueList\":[\"urn:ngsi-ld:null\"]},"
        "\"f\":{\"value\":5,\"sub\":\"urn:ngsi-ld:null\"},"
        "\"g\":{\"type\":\"VocabProperty\",\"vocab\":\"urn:ngsi-ld:null\"},"
        "\"h\":{\"type\":\"ListRelationship\",\"objectList\":[\"urn:ngsi-ld:null\"]},"
        "\"i\":{\"type\":\"GeoProperty\",\"value\":\"urn:ngsi-ld:null\"},"
        "\"j\":{\"type\":\"Property\",\"value\":\"not null\"}}";
    cr_entity_t *e = parse_ok(body, EP_FRAGMENT | EP_MERGE);
    assert_int_equal(attr(e, "a")->is_null, 1);
    assert_int_equal(attr(e, "b")->is_null, 1);
    assert_int_equal(attr(e, "c")->is_null, 1);
    assert_int_equal(attr(e, "d")->is_null, 1);
    assert_int_equal(attr(e, "e")->is_null, 1);
    assert_int_equal(attr(e, "f")->is_null, 0);
    assert_int_equal(sub(attr(e, "f"), "sub")->is_null, 1);
    assert_int_equal(attr(e, "g")->is_null, 1);
    assert_int_equal(attr(e, "h")->is_null, 1);
    assert_int_equal(attr(e, "i")->is_null, 1);
    assert_int_equal(attr(e, "j")->is_null, 0);

    /* Inside a merge, the NGSI-LD Null may also delete a member of an object value (5.5.12). */
    e = parse_ok("{\"a\":{\"value\":{\"x\":\"urn:ngsi-ld:null\",\"y\":1}},\"b\":{\"x\":\"urn:ngsi-ld:null\"}}",
                 EP_FRAGMENT | EP_MERGE);
    assert_int_equal(attr(e, "a")->is_null, 0);
    assert_int_equal(attr(e, "b")->is_null, 0);

    /* 5.5.4: without EP_MERGE (create, replace, append, batch create/update) the
     * NGSI-LD Null is BadRequestData, in every form. */
    static const char *const outside[] = {
        "{\"a\":{\"type\":\"Property\",\"value\":\"urn:ngsi-ld:null\"}}",
        "{\"a\":{\"value\":\"urn:ngsi-ld:null\"}}",
        "{\"c\":\"urn:ngsi-ld:null\"}",
        "{\"b\":{\"type\":\"Relationship\",\"object\":\"urn:ngsi-ld:null\"}}",
        "{\"b\":{\"object\":[\"urn:ngsi-ld:null\"]}}",
        "{\"d\":{\"languageMap\":{\"@none\":\"urn:ngsi-ld:null\"}}}",
        "{\"e\":{\"valueList\":[\"urn:ngsi-ld:null\"]}}",
        "{\"f\":{\"value\":5,\"sub\":\"urn:ngsi-ld:null\"}}",
        "{\"g\":{\"vocab\":\"urn:ngsi-ld:null\"}}",
        "{\"h\":{\"objectList\":[\"urn:ngsi-ld:null\"]}}",
        "{\"i\":{\"type\":\"GeoProperty\",\"value\":\"urn:ngsi-ld:null\"}}",
        "{\"j\":{\"json\":\"urn:ngsi-ld:null\"}}",
        "{\"k\":{\"value\":{\"x\":\"urn:ngsi-ld:null\"}}}",
        "{\"k\":{\"x\":1,\"y\":\"urn:ngsi-ld:null\"}}",
    };
    for (size_t i = 0; i < sizeof outside / sizeof *outside; i++) {
        parse_bad(outside[i], EP_FRAGMENT, "NGSI-LD Null");
        parse_bad(outside[i], 0, "NGSI-LD Null");
    }
    /* Never one among several objects, even when merging. */
    parse_bad("{\"b\":{\"object\":[\"urn:a:1\",\"urn:ngsi-ld:null\"]}}", EP_FRAGMENT | EP_MERGE,
              "NGSI-LD Null");
    parse_bad("{\"h\":{\"objectList\":[\"urn:a:1\",\"urn:ngsi-ld:null\"]}}", EP_FRAGMENT | EP_MERGE,
              "NGSI-LD Null");
    /* Deeper than the value's own members it is just a string. */
    e = parse_ok("{\"k\":{\"value\":{\"x\":{\"y\":\"urn:ngsi-ld:null\"}}}}", EP_FRAGMENT);
    assert_int_equal(attr(e, "k")->is_null, 0);

    /* A JSON null is never a value. */
    parse_bad("{\"a\":null}", EP_FRAGMENT | EP_MERGE, "null");
}

static void test_partial(void **state)
{
    (void)state;
    cr_attr_t out;
    const char *name = X("speed");
    char        err[64];

    json_t *v = json_parse_copy(A, "{\"value\":5}", 11, NULL, err, sizeof err);
    assert_true(attr_parse(A, name, v, ld_core(), EP_PARTIAL, NOW, &out, &P));
    assert_int_equal(out.kind, ATTR_PROPERTY);
    assert_ptr_equal(out.name, name);
    assert_json(out.value, "5");

    v = json_parse_copy(A, "{\"observedAt\":\"2021-01-01T00:00:00Z\"}", 37, NULL, err, sizeof err);
    assert_non_null(v);
    assert_true(attr_parse(A, name, v, ld_core(), EP_PARTIAL, NOW, &out, &P));
    assert_int_equal(out.kind, 0);
    assert_null(out.value);
    assert_true(out.observed_at == 1609459200000000LL);

    v = json_parse_copy(A, "{\"type\":\"Relationship\"}", 23, NULL, err, sizeof err);
    assert_true(attr_parse(A, name, v, ld_core(), EP_PARTIAL, NOW, &out, &P));
    assert_int_equal(out.kind, ATTR_RELATIONSHIP);
    assert_null(out.value);

    /* Not partial: the value member is required; the error names the attribute. */
    memset(&P, 0, sizeof P);
    assert_false(attr_parse(A, name, v, ld_core(), 0, NOW, &out, &P));
    assert_int_equal(P.kind, PB_BAD_REQUEST_DATA);
    assert_non_null(strstr(P.detail, "needs 'object'"));

    v = json_parse_copy(A, "42", 2, NULL, err, sizeof err);
    assert_true(attr_parse(A, name, v, ld_core(), 0, NOW, &out, &P));
    assert_int_equal(out.kind, ATTR_PROPERTY);
    assert_true(out.created_at == NOW);
}

/* ------------------------------------------------------- frozen entities */

static void assert_attr_equal(const cr_attr_t *a, const cr_attr_t *b)
{
    assert_ptr_equal(a->name, b->name);
    if (a->dataset_id || b->dataset_id)
        assert_string_equal(a->dataset_id, b->dataset_id);
    if (a->unit_code || b->unit_code)
        assert_string_equal(a->unit_code, b->unit_code);
    assert_ptr_equal(a->object_type, b->object_type);
    assert_true(a->observed_at == b->observed_at);
    assert_true(a->created_at == b->created_at && a->modified_at == b->modified_at);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->is_null, b->is_null);
    assert_true((a->value == NULL) == (b->value == NULL));
    if (a->value)
        assert_true(json_equal(a->value, b->value));
    assert_int_equal(a->n_sub, b->n_sub);
    for (uint16_t i = 0; i < a->n_sub; i++)
        assert_attr_equal(&a->sub[i], &b->sub[i]);
}

static bool in_block(const cr_entity_t *e, const void *p)
{
    return (const char *)p >= (const char *)e && (const char *)p < (const char *)e + e->bytes;
}

static void assert_entity_equal(const cr_entity_t *a, const cr_entity_t *b)
{
    assert_string_equal(a->id, b->id);
    assert_int_equal(a->n_types, b->n_types);
    for (uint16_t i = 0; i < a->n_types; i++)
        assert_ptr_equal(a->types[i], b->types[i]);
    assert_true((a->scope == NULL) == (b->scope == NULL));
    if (a->scope)
        assert_true(json_equal(a->scope, b->scope));
    assert_true(a->created_at == b->created_at && a->modified_at == b->modified_at);
    assert_int_equal(a->n_attrs, b->n_attrs);
    for (uint16_t i = 0; i < a->n_attrs; i++)
        assert_attr_equal(&a->attrs[i], &b->attrs[i]);
}

static void test_freeze(void **state)
{
    (void)state;
    const char *text =
        "{\"id\":\"urn:ngsi-ld:Thing:1\",\"type\":[\"Thing\",\"Car\"],\"scope\":[\"/a/b\",\"/c\"],"
        "\"speed\":[{\"value\":80,\"unitCode\":\"KMH\",\"observedAt\":\"2024-01-02T03:04:05Z\","
        "   \"source\":{\"object\":\"urn:s:1\",\"note\":{\"value\":{\"deep\":[1,\"two\",null,true]}}}},"
        "  {\"value\":81,\"datasetId\":\"urn:ds:1\"}],"
        "\"location\":{\"type\":\"Point\",\"coordinates\":[-3.7,40.4]},"
        "\"name\":{\"languageMap\":{\"en\":\"car\",\"es\":[\"coche\"]}},"
        "\"cat\":{\"vocab\":[\"A\",\"B\"]},"
        "\"parts\":{\"objectList\":[\"urn:a\"],\"objectType\":\"Part\"},"
        "\"raw\":{\"json\":{\"k\":\"v\"}},"
        "\"empty\":{\"value\":{}},\"earr\":{\"value\":[]}}";

    /* The draft lives in its own arena, freed before the frozen copy is read
     * (ASan catches any pointer left behind). */
    arena_t     *draft_arena = arena_new(4096);
    char         err[128];
    json_t      *body = json_parse_copy(draft_arena, text, strlen(text), NULL, err, sizeof err);
    assert_non_null(body);
    cr_entity_t *d = entity_parse(draft_arena, body, ld_core(), EP_CREATE, NOW, &P);
    assert_non_null(d);

    /* A reference copy of the draft in A, to compare with after the free. */
    cr_entity_t *ref = entity_parse(A, json_parse_copy(A, text, strlen(text), NULL, err, sizeof err),
                                    ld_core(), EP_CREATE, NOW, &P);
    assert_non_null(ref);

    cr_entity_t *f = entity_freeze(d);
    assert_non_null(f);
    assert_int_equal(f->refs, 1);
    assert_true(f->bytes > sizeof(cr_entity_t));
    arena_free(draft_arena);

    assert_entity_equal(f, ref);
    assert_true(in_block(f, f->id));
    assert_true(in_block(f, f->attrs));
    assert_true(in_block(f, f->attrs[0].value));
    assert_true(in_block(f, f->attrs[0].sub));
    assert_ptr_equal(f->types[0], X("Thing"));          /* interned, not copied */
    assert_ptr_equal(f->attrs[0].name, X("speed"));
    assert_non_null(entity_attr(f, X("speed"), "urn:ds:1"));
    assert_true(in_block(f, entity_attr(f, X("speed"), "urn:ds:1")->dataset_id));

    /* Freezing a frozen entity gives an equal one of the same size. */
    cr_entity_t *f2 = entity_freeze(f);
    assert_non_null(f2);
    assert_int_equal(f2->bytes, f->bytes);
    assert_entity_equal(f2, ref);

    entity_ref(f);
    assert_int_equal(f->refs, 2);
    entity_unref(f);
    assert_int_equal(f->refs, 1);
    entity_unref(f);                                     /* freed (ASan/LSan check) */
    entity_unref(f2);
    entity_unref(NULL);
}

static void test_freeze_fragment(void **state)
{
    (void)state;
    cr_entity_t *d = parse_ok("{\"speed\":{\"value\":\"urn:ngsi-ld:null\"}}", EP_FRAGMENT | EP_MERGE);
    cr_entity_t *f = entity_freeze(d);
    assert_non_null(f);
    assert_null(f->id);
    assert_null(f->types);
    assert_int_equal(f->attrs[0].is_null, 1);
    entity_unref(f);
}

/* The memory target: a Vehicle with 4 attributes (one with observedAt and a
 * sub-attribute, one GeoProperty Point). */
static void test_freeze_size_vehicle(void **state)
{
    (void)state;
    cr_entity_t *d = parse_ok(
        "{\"id\":\"urn:ngsi-ld:Vehicle:A4567\",\"type\":\"Vehicle\","
        "\"brandName\":{\"type\":\"Property\",\"value\":\"Mercedes\"},"
        "\"speed\":{\"type\":\"Property\",\"value\":80,\"observedAt\":\"2024-01-02T03:04:05Z\","
        "  \"source\":{\"type\":\"Property\",\"value\":\"GPS\"}},"
        "\"isParked\":{\"type\":\"Relationship\",\"object\":\"urn:ngsi-ld:OffStreetParking:Downtown1\"},"
        "\"location\":{\"type\":\"GeoProperty\",\"value\":{\"type\":\"Point\",\"coordinates\":[-8.5,41.2]}}}",
        EP_CREATE);
    cr_entity_t *f = entity_freeze(d);
    assert_non_null(f);
    print_message("frozen Vehicle (4 attributes, 1 sub-attribute, 1 Point): %u bytes "
                  "(cr_entity_t %zu, cr_attr_t %zu, json_t %zu)\n",
                  f->bytes, sizeof(cr_entity_t), sizeof(cr_attr_t), sizeof(json_t));
    assert_true(f->bytes <= 1024);
    entity_unref(f);
}

int main(void)
{
    if (!ld_init()) {
        fprintf(stderr, "ld_init failed\n");
        return 1;
    }
    model_init();

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_uri),
        cmocka_unit_test(test_valid_name),
        cmocka_unit_test(test_valid_scope),
        cmocka_unit_test_setup_teardown(test_kind_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_normalized_all_kinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concise_all_kinds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_geo_string_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expanded_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unicode_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_multi_attribute, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sub_attributes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entity_members, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_many_attributes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge_nulls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partial, setup, teardown),
        cmocka_unit_test_setup_teardown(test_freeze, setup, teardown),
        cmocka_unit_test_setup_teardown(test_freeze_fragment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_freeze_size_vehicle, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ld_shutdown();
    return rc;
}
