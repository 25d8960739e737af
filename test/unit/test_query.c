/*
 * test_query.c - the query languages of src/model: q (4.9, q.c), entity type
 * selection (4.17, typesel.c), scopeQ (4.19, scopeq.c) and the entity filter
 * with its PCRE2 glue (filter.c).
 *
 * The entities are parsed from NGSI-LD JSON with entity_parse(), as the API
 * does, so every kind of attribute (Property, Relationship, LanguageProperty,
 * VocabProperty, ListProperty, ListRelationship, JsonProperty, several
 * datasetIds, sub-attributes, observedAt/unitCode) is exercised as the broker
 * holds it; q_match is also run on the frozen copy. Each q case is a row of a
 * table: the query and the expected answer, with the 4.9 rule it tests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

#define Q_LIMIT_BUF 10000

#define FIXTURE_ARENA_SIZE 16384
#include "arena_fixture.h"

/* JSON text with ' for " (keeps the documents readable). */
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

static cr_entity_t *E(const char *text)
{
    problem_t    p = { 0 };
    cr_entity_t *e = entity_parse(A, J(text), ld_core(), EP_CREATE, 1600000000000000LL, &p);

    if (!e)
        fail_msg("entity_parse failed: %s", p.detail);
    return e;
}

static const char *CAR =
    "{'id': 'urn:ngsi-ld:Car:1', 'type': 'Car',"
    " 'speed': {'type': 'Property', 'value': 55.5, 'observedAt': '2023-01-01T12:00:00Z',"
    "           'unitCode': 'KMH', 'accuracy': {'type': 'Property', 'value': 0.5}},"
    " 'rpm': {'type': 'Property', 'value': 3000},"
    " 'neg': {'type': 'Property', 'value': -7},"
    " 'brandName': {'type': 'Property', 'value': 'Mercedes'},"
    " 'isParked': {'type': 'Relationship', 'object': 'urn:ngsi-ld:OffStreetParking:Downtown1',"
    "              'observedAt': '2023-01-02T00:00:00Z'},"
    " 'owners': {'type': 'Relationship', 'object': ['urn:ngsi-ld:P:a', 'urn:ngsi-ld:P:b']},"
    " 'colors': {'type': 'Property', 'value': ['blue', 'red', 'green']},"
    " 'address': {'type': 'Property', 'value': {'city': 'Berlin', 'street': 'Ulrich Strasse',"
    "             'zip': 10115, 'geo': {'lvl': 3}, 'parts': [{'n': 'a'}, {'n': 'b'}]}},"
    " 'sensor': {'type': 'Property', 'value': 40, 'rawdata': {'type': 'Property',"
    "            'value': {'airquality': {'particulate': 40, 'PM20': 85}}}},"
    " 'title': {'type': 'LanguageProperty', 'languageMap': {'en': 'red car', 'fr': 'voiture rouge',"
    "           'de': ['rotes', 'Auto']}},"
    " 'gender': {'type': 'VocabProperty', 'vocab': 'Male'},"
    " 'numbers': {'type': 'ListProperty', 'valueList': [1, 2, 3]},"
    " 'friends': {'type': 'ListRelationship', 'objectList': [{'object': 'urn:ngsi-ld:P:f1'},"
    "             {'object': 'urn:ngsi-ld:P:f2'}]},"
    " 'isOn': {'type': 'Property', 'value': true},"
    " 'isOff': {'type': 'Property', 'value': false},"
    " 'lastSeen': {'type': 'Property', 'value': {'@type': 'DateTime', '@value': '2023-05-01T10:00:00Z'}},"
    " 'stamp': {'type': 'Property', 'value': '2023-05-01T12:00:00+02:00'},"
    " 'birth': {'type': 'Property', 'value': '2000-02-29'},"
    " 'opens': {'type': 'Property', 'value': '08:30:00'},"
    " 'big': {'type': 'Property', 'value': 9007199254740993},"
    " 'ratio': {'type': 'Property', 'value': 1e3},"
    " 'quote': {'type': 'Property', 'value': 'say \\\"hi\\\" \\u00e9t\\u00e9'},"
    " 'path': {'type': 'Property', 'value': 'a;b|c'},"
    " 'tickets': {'type': 'JsonProperty', 'json': {'id': '85a6', 'value': 'Overstay 60 minutes'}},"
    " 'temperature': [{'type': 'Property', 'value': 20},"
    "                 {'type': 'Property', 'value': 25, 'datasetId': 'urn:ngsi-ld:ds:1'}]"
    "}";

typedef struct qcase {
    const char *q;
    bool        match;
} qcase_t;

static void run_cases(const cr_entity_t *e, const qcase_t *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        problem_t p = { 0 };
        q_expr_t *q = q_parse(A, cases[i].q, ld_core(), &p);

        if (!q)
            fail_msg("q_parse(%s) failed: %s", cases[i].q, p.detail);
        if (q_match(q, e) != cases[i].match)
            fail_msg("q_match(%s) should be %s", cases[i].q, cases[i].match ? "true" : "false");
    }
}

/* The objectType member (5.2.6: one type or several): any of them matches. */
static void test_object_type_member(void **state)
{
    (void)state;
    cr_entity_t *e = E("{'id': 'urn:x', 'type': 'T',"
                       " 'owner': {'type': 'Relationship', 'object': 'urn:p', 'objectType': ['Person', 'Company']},"
                       " 'one': {'type': 'Relationship', 'object': 'urn:p', 'objectType': 'Person'}}");
    static const qcase_t cases[] = {
        {"one.objectType==\"https://uri.etsi.org/ngsi-ld/default-context/Person\"", true},
        {"one.objectType==\"https://uri.etsi.org/ngsi-ld/default-context/Company\"", false},
        {"owner.objectType==\"https://uri.etsi.org/ngsi-ld/default-context/Person\"", true},
        {"owner.objectType==\"https://uri.etsi.org/ngsi-ld/default-context/Company\"", true},
        {"owner.objectType==\"https://uri.etsi.org/ngsi-ld/default-context/Robot\"", false},
    };
    run_cases(e, cases, CR_ARRAY_LEN(cases));
    cr_entity_t *frozen = entity_freeze(e);
    assert_non_null(frozen);
    run_cases(frozen, cases, CR_ARRAY_LEN(cases));
    entity_unref(frozen);
}

static void run_on_car(const qcase_t *cases, size_t n)
{
    cr_entity_t *draft = E(CAR);
    cr_entity_t *frozen;

    run_cases(draft, cases, n);
    frozen = entity_freeze(draft);
    assert_non_null(frozen);
    run_cases(frozen, cases, n);
    entity_unref(frozen);
}

/* ------------------------------------------------------------ q: values */

static void test_q_existence(void **state)
{
    static const qcase_t c[] = {
        { "speed", true },                      /* 4.9 example 0 */
        { "isParked", true },                   /* example 5 */
        { "nothere", false },
        { "!nothere", true },                   /* negation: absence */
        { "!speed", false },
        { "speed.accuracy", true },             /* sub-attribute */
        { "speed.nothere", false },
        { "speed.observedAt", true },
        { "rpm.observedAt", false },
        { "speed.unitCode", true },
        { "rpm.unitCode", false },
        { "address[city]", true },              /* compound member */
        { "address[country]", false },
        { "address[geo.lvl]", true },
        { "address[geo.nope]", false },
        { "rpm[x]", false },                    /* not an object */
        { "title[en]", true },
        { "title[es]", false },
        { "temperature", true },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

static void test_q_numbers(void **state)
{
    static const qcase_t c[] = {
        { "rpm==3000", true },                  /* example 1 */
        { "rpm==3000.0", true },                /* int vs float */
        { "rpm==3e3", true },
        { "rpm==2999", false },
        { "rpm!=2999", true },
        { "rpm!=3000", false },
        { "rpm>2999", true },
        { "rpm>3000", false },
        { "rpm>=3000", true },
        { "rpm<3000", false },
        { "rpm<=3000", true },
        { "rpm<3000.5", true },
        { "speed>55", true },
        { "speed>55.5", false },
        { "speed==55.5", true },
        { "neg<0", true },
        { "neg==-7", true },
        { "neg>-7.5", true },
        { "ratio==1000", true },
        { "big==9007199254740993", true },      /* exact 64-bit integers */
        { "big==9007199254740992", false },
        { "big>9007199254740992", true },
        { "rpm==\"3000\"", false },             /* types differ: no match */
        { "rpm!=\"3000\"", true },              /* ... and unequal */
        { "brandName>5", false },
        { "rpm==1000..5000", true },            /* range, ends included */
        { "rpm==3000..3000", true },
        { "rpm==3001..5000", false },
        { "rpm!=1000..5000", false },
        { "rpm!=3001..5000", true },
        { "speed==55..56", true },
        { "rpm==1,2,3000", true },              /* list */
        { "rpm==1,2,3", false },
        { "rpm!=1,2,3", true },
        { "rpm!=1,3000", false },
        { "rpm == 1, 2, 3000", true },          /* blanks tolerated */
        { "numbers==2", true },                 /* ListProperty: any element */
        { "numbers==4", false },
        { "numbers!=4", true },
        { "numbers!=2", false },
        { "numbers>2", true },
        { "numbers>3", false },
        { "numbers==4,3", true },
        { "numbers==2..2", true },
        { "temperature==25", true },            /* any instance (datasetId) */
        { "temperature==20", true },
        { "temperature>24", true },
        { "temperature>30", false },
        { "temperature!=20", false },           /* one instance equals */
        { "temperature!=21", true },
        { "nothere!=1", false },                /* != needs the target */
        { "speed.accuracy==0.5", true },
        { "speed.accuracy<0.1", false },
        { "sensor.rawdata[airquality.particulate]==40", true },   /* example 10 */
        { "sensor.rawdata[airquality.PM20]>80", true },
        { "sensor.rawdata[airquality.PM20]>90", false },
        { "address[zip]==10115", true },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

static void test_q_strings(void **state)
{
    static const qcase_t c[] = {
        { "brandName==\"Mercedes\"", true },
        { "brandName!=\"Mercedes\"", false },   /* example 2 */
        { "brandName!=\"BMW\"", true },
        { "brandName==\"mercedes\"", false },
        { "brandName==Mercedes", true },        /* bare word */
        { "brandName>\"BMW\"", true },          /* lexical order */
        { "brandName<\"BMW\"", false },
        { "brandName>=\"Mercedes\"", true },
        { "brandName==\"A\"..\"N\"", true },
        { "brandName==\"N\"..\"Z\"", false },
        { "brandName==\"BMW\",\"Mercedes\"", true },
        { "brandName==\"BMW\", \"Audi\"", false },
        { "brandName==1", false },
        { "brandName==true", false },
        { "colors==\"red\"", true },            /* included in the array */
        { "colors==\"black\"", false },
        { "colors!=\"red\"", false },
        { "colors!=\"black\"", true },
        { "colors==\"black\",\"red\"", true },
        { "colors!=\"black\",\"red\"", false },
        { "colors!=\"black\",\"white\"", true },
        { "address[city]==\"Berlin\"", true },  /* example 9 */
        { "address[city]==\"Paris\"", false },
        { "address[city]!=\"Paris\"", true },
        { "address[parts.n]==\"b\"", true },    /* into an array of objects */
        { "address[parts.n]==\"c\"", false },
        { "quote==\"say \\\"hi\\\" \\u00e9t\\u00e9\"", true },   /* escapes */
        { "quote==\"say \\\"hi\\\" été\"", true },
        { "path==\"a;b|c\"", true },            /* separators inside quotes */
        { "tickets[value]==\"Overstay 60 minutes\"", true },      /* example 11 */
        { "tickets[id]==\"85a6\"", true },
        { "speed.unitCode==\"KMH\"", true },
        { "speed.unitCode==\"MPH\"", false },
        { "temperature.datasetId==\"urn:ngsi-ld:ds:1\"", true },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

static void test_q_booleans(void **state)
{
    static const qcase_t c[] = {
        { "isOn==true", true },
        { "isOn==false", false },
        { "isOn!=false", true },
        { "isOff==false", true },
        { "isOn==\"true\"", false },
        { "isOn==1", false },
        { "isOn==true,false", true },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

static void test_q_relationships(void **state)
{
    static const qcase_t c[] = {
        { "isParked==\"urn:ngsi-ld:OffStreetParking:Downtown1\"", true },   /* example 3 */
        { "isParked==urn:ngsi-ld:OffStreetParking:Downtown1", true },       /* bare URI */
        { "isParked==urn:ngsi-ld:OffStreetParking:Downtown2", false },
        { "isParked!=urn:ngsi-ld:OffStreetParking:Downtown2", true },
        { "isParked==urn:x:1,urn:ngsi-ld:OffStreetParking:Downtown1", true },
        { "isParked>\"urn:a\"", false },        /* only == and != on objects */
        { "isParked~=Downtown", false },
        { "isParked!~=Downtown", false },
        { "isParked.observedAt>2023-01-01T00:00:00Z", true },  /* members still compare */
        { "owners==urn:ngsi-ld:P:b", true },    /* array of objects */
        { "owners!=urn:ngsi-ld:P:b", false },
        { "owners!=urn:ngsi-ld:P:c", true },
        { "friends==urn:ngsi-ld:P:f2", true },  /* ListRelationship */
        { "friends==urn:ngsi-ld:P:f3", false },
        { "friends!=urn:ngsi-ld:P:f3", true },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

static void test_q_language_vocab(void **state)
{
    static const qcase_t c[] = {
        { "title==\"red car\"", true },         /* any language */
        { "title==\"voiture rouge\"", true },
        { "title==\"Auto\"", true },            /* array value in the map */
        { "title==\"blue car\"", false },
        { "title!=\"blue car\"", true },
        { "title!=\"red car\"", false },
        { "title[en]==\"red car\"", true },
        { "title[fr]==\"red car\"", false },
        { "title[de]==\"rotes\"", true },
        { "title[*]==\"voiture rouge\"", true },
        { "title[en]!=\"red car\"", false },
        { "title[fr]!=\"red car\"", true },
        { "title[es]!=\"red car\"", false },    /* no such language: no target */
        { "title~=\"^voiture\"", true },
        { "title[en]~=\"^voiture\"", false },
        { "gender==Male", true },               /* example 12: expanded vocab */
        { "gender==Female", false },
        { "gender!=Female", true },
        { "gender==\"https://uri.etsi.org/ngsi-ld/default-context/Male\"", true },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

static void test_q_times(void **state)
{
    static const qcase_t c[] = {
        { "speed.observedAt>=2017-12-24T12:00:00Z", true },    /* example 8 */
        { "speed.observedAt==2023-01-01T12:00:00Z", true },
        { "speed.observedAt==2023-01-01T13:00:00+01:00", true },  /* same instant */
        { "speed.observedAt==2023-01-01T12:00:00.000Z", true },
        { "speed.observedAt>2023-01-01T12:00:00Z", false },
        { "speed.observedAt<2024-01-01T00:00:00Z", true },
        { "speed.observedAt==2022-01-01T00:00:00Z..2024-01-01T00:00:00Z", true },
        { "speed.observedAt==2024-01-01T00:00:00Z..2025-01-01T00:00:00Z", false },
        { "speed.observedAt!=2024-01-01T00:00:00Z..2025-01-01T00:00:00Z", true },
        { "speed.observedAt>\"2022-12-31T00:00:00Z\"", true },  /* quoted DateTime */
        { "speed.observedAt>2022-12-31", true },                 /* Date: its midnight */
        { "speed.observedAt==5", false },
        { "speed.createdAt==2020-09-13T12:26:40Z", true },       /* system members */
        { "speed.modifiedAt<2021-01-01T00:00:00Z", true },
        { "stamp==2023-05-01T10:00:00Z", true },                 /* string read as DateTime */
        { "stamp>2023-05-01T09:59:59Z", true },
        { "stamp<2023-05-01T10:00:00Z", false },
        { "stamp==\"2023-05-01T10:00:00Z\"", true },              /* quoted: as time too */
        { "lastSeen==2023-05-01T10:00:00Z", true },              /* {"@type","@value"} */
        { "lastSeen>2023-06-01T00:00:00Z", false },
        { "birth==2000-02-29", true },
        { "birth>1999-12-31", true },
        { "birth<2000-02-29", false },
        { "birth==1999-01-01..2001-01-01", true },
        { "opens>08:00:00", true },
        { "opens<08:00:00", false },
        { "opens==08:30:00", true },
        { "brandName>2000-01-01", false },                       /* not a date */
        { "rpm>2000-01-01", false },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

static void test_q_regex(void **state)
{
    static const qcase_t c[] = {
        { "brandName~=Merc", true },
        { "brandName~=^Merc.*s$", true },
        { "brandName~=^merc", false },
        { "brandName~=(?i)^merc", true },
        { "brandName=~Merc", true },             /* =~ accepted */
        { "brandName!~=BMW", true },
        { "brandName!~=Merc", false },
        { "brandName~=\"^Mer(c|k)edes$\"", true },   /* quoted pattern */
        { "brandName~=^Mer(c|k)edes$", true },       /* '|' inside () stays in the pattern */
        { "brandName~=^Mer[c|k]edes$;rpm==3000", true },
        { "brandName~=BMW|rpm==3000", true },        /* '|' at top level ends it */
        { "rpm~=3", false },                         /* not a string: no match */
        { "rpm!~=3", false },
        { "colors~=^gr", true },
        { "colors!~=^gr", false },
        { "colors!~=^yel", true },
        { "address[city]~=lin$", true },
        { "quote~=été", true },                      /* UTF-8 */
        { "(brandName~=(a)|b)", false },
        { "(brandName~=(e)|bb)", true },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

static void test_q_logic(void **state)
{
    static const qcase_t c[] = {
        { "speed>50;brandName!=\"Mercedes\"", false },                  /* example 4 */
        { "speed>50;brandName!=\"BMW\"", true },
        { "((speed>50|rpm>3000);brandName==\"Mercedes\")", true },      /* example 6 */
        { "((speed>60|rpm>3000);brandName==\"Mercedes\")", false },
        { "(rpm>=2000;rpm<=2500)|speed<=10", false },                    /* example 7 */
        { "(rpm>=2000;rpm<=3500)|speed<=10", true },
        { "rpm==1|rpm==2|rpm==3000", true },
        { "rpm==1|rpm==2|rpm==3", false },
        /* AND binds tighter than OR: a|b;c == a|(b;c) */
        { "rpm==3000|nothere;alsonot", true },
        { "nothere|rpm==3000;speed>50", true },
        { "nothere|rpm==3000;speed>60", false },
        { "(nothere|rpm==3000);speed>60", false },
        { "rpm==3000;speed>50;brandName", true },
        { "rpm==3000;speed>50;!brandName", false },
        { "(((((rpm==3000)))))", true },
        { "( rpm == 3000 ; speed > 50 )", true },
        { "!nothere;!alsonot", true },
        { "!nothere;!rpm", false },
        { "(speed.accuracy<1;speed.observedAt>2020-01-01T00:00:00Z)|brandName==x", true },
    };
    (void)state;
    run_on_car(c, CR_ARRAY_LEN(c));
}

/* Names are expanded with the request's @context (4.9, 5.5.7). */
static void test_q_context(void **state)
{
    problem_t           p = { 0 };
    const ld_context_t *ctx;
    cr_entity_t        *e;
    q_expr_t           *q;
    (void)state;

    ctx = ld_from_json(J("{'speed': 'http://example.org/speed', 'Car': 'http://example.org/Car'}"), &p);
    assert_non_null(ctx);

    e = entity_parse(A, J("{'id': 'urn:x:1', 'type': 'Car', 'speed': {'type': 'Property', 'value': 80}}"),
                     ctx, EP_CREATE, 1, &p);
    assert_non_null(e);

    q = q_parse(A, "speed==80", ctx, &p);
    assert_non_null(q);
    assert_true(q_match(q, e));
    /* The same short name with the core context is a different attribute. */
    q = q_parse(A, "speed==80", ld_core(), &p);
    assert_non_null(q);
    assert_false(q_match(q, e));
}

/* Several instances of one attribute, and a value-less attribute, built by hand. */
static void test_q_hand_built(void **state)
{
    cr_attr_t   attrs[3];
    cr_entity_t e;
    const char *types[1];
    problem_t   p = { 0 };
    q_expr_t   *q;
    (void)state;

    memset(attrs, 0, sizeof attrs);
    memset(&e, 0, sizeof e);
    types[0] = ld_expand(ld_core(), "T");
    for (int i = 0; i < 3; i++) {
        attrs[i].name = ld_expand(ld_core(), "level");
        attrs[i].kind = ATTR_PROPERTY;
        attrs[i].observed_at = CR_NO_TIME;
        attrs[i].created_at = attrs[i].modified_at = CR_NO_TIME;
    }
    attrs[0].value = json_new_int(A, 1);
    attrs[1].value = json_new_string(A, "high");
    attrs[1].dataset_id = "urn:ds:2";
    attrs[2].value = NULL;
    attrs[2].dataset_id = "urn:ds:3";
    e.id = "urn:x:hand";
    e.types = types;
    e.n_types = 1;
    e.attrs = attrs;
    e.n_attrs = 3;

    q = q_parse(A, "level==1", NULL, &p);
    assert_true(q_match(q, &e));
    q = q_parse(A, "level==\"high\"", NULL, &p);
    assert_true(q_match(q, &e));
    q = q_parse(A, "level>0", NULL, &p);
    assert_true(q_match(q, &e));
    q = q_parse(A, "level~=^h", NULL, &p);
    assert_true(q_match(q, &e));
    q = q_parse(A, "level!=1", NULL, &p);
    assert_false(q_match(q, &e));
    q = q_parse(A, "level!=2", NULL, &p);
    assert_true(q_match(q, &e));
    q = q_parse(A, "level.createdAt", NULL, &p);
    assert_false(q_match(q, &e));
    q = q_parse(A, "level", NULL, &p);
    assert_true(q_match(q, &e));

    /* No attributes at all. */
    e.n_attrs = 0;
    q = q_parse(A, "level!=2", NULL, &p);
    assert_false(q_match(q, &e));
    q = q_parse(A, "!level", NULL, &p);
    assert_true(q_match(q, &e));
    assert_true(q_match(NULL, &e));
}

/* ------------------------------------------------------------ q: errors */

typedef struct qerr {
    const char    *q;
    problem_kind_t kind;
} qerr_t;

static void test_q_errors(void **state)
{
    static const qerr_t c[] = {
        { "", PB_BAD_REQUEST_DATA },
        { "   ", PB_BAD_REQUEST_DATA },
        { "==3", PB_BAD_REQUEST_DATA },
        { "speed==", PB_BAD_REQUEST_DATA },
        { "speed=3", PB_BAD_REQUEST_DATA },
        { "speed=!3", PB_BAD_REQUEST_DATA },
        { "speed~", PB_BAD_REQUEST_DATA },
        { "speed>>3", PB_BAD_REQUEST_DATA },
        { "speed==3;", PB_BAD_REQUEST_DATA },
        { "speed==3|", PB_BAD_REQUEST_DATA },
        { ";speed", PB_BAD_REQUEST_DATA },
        { "(speed==3", PB_BAD_REQUEST_DATA },
        { "speed==3)", PB_BAD_REQUEST_DATA },
        { "()", PB_BAD_REQUEST_DATA },
        { "speed==\"abc", PB_BAD_REQUEST_DATA },       /* unterminated string */
        { "speed==\"a\\qb\"", PB_BAD_REQUEST_DATA },   /* bad escape */
        { "speed==\"\\ud800\"", PB_BAD_REQUEST_DATA }, /* lone surrogate */
        { "speed==\"\\u0000\"", PB_BAD_REQUEST_DATA },
        { "speed==\"a\"b", PB_BAD_REQUEST_DATA },
        { "speed>true", PB_BAD_REQUEST_DATA },         /* not comparable */
        { "speed>abc", PB_BAD_REQUEST_DATA },
        { "speed>1..5", PB_BAD_REQUEST_DATA },         /* range with > */
        { "speed<1,2", PB_BAD_REQUEST_DATA },          /* list with < */
        { "speed==1..\"a\"", PB_BAD_REQUEST_DATA },    /* mixed range */
        { "speed==true..false", PB_BAD_REQUEST_DATA },
        { "speed==1..", PB_BAD_REQUEST_DATA },
        { "speed==1,", PB_BAD_REQUEST_DATA },
        { "speed==,1", PB_BAD_REQUEST_DATA },
        { "speed~=", PB_BAD_REQUEST_DATA },
        { "speed~=(abc", PB_BAD_REQUEST_DATA },        /* bad regex */
        { "speed~=\"[a\"", PB_BAD_REQUEST_DATA },
        { "speed.", PB_BAD_REQUEST_DATA },
        { "speed..x", PB_BAD_REQUEST_DATA },
        { "1speed", PB_BAD_REQUEST_DATA },
        { "speed[", PB_BAD_REQUEST_DATA },
        { "speed[]", PB_BAD_REQUEST_DATA },
        { "speed[a.]", PB_BAD_REQUEST_DATA },
        { "speed[a", PB_BAD_REQUEST_DATA },
        { "speed[a]b", PB_BAD_REQUEST_DATA },
        { "speed.observedAt.x", PB_BAD_REQUEST_DATA }, /* members end a path */
        { "speed.observedAt[x]", PB_BAD_REQUEST_DATA },
        { "!speed==3", PB_BAD_REQUEST_DATA },          /* ! only for existence */
        { "!(speed)", PB_BAD_REQUEST_DATA },
        { "speed==3 rpm", PB_BAD_REQUEST_DATA },
        { "sensor{humidity", PB_BAD_REQUEST_DATA },    /* 4.9 linked entity terms */
        { "sensor{}", PB_BAD_REQUEST_DATA },
        { "sensor{humidity}}", PB_BAD_REQUEST_DATA },
        { "sensor.x{humidity}", PB_BAD_REQUEST_DATA },
        { "sensor{Device:}", PB_BAD_REQUEST_DATA },
        { "\xff\xfe", PB_BAD_REQUEST_DATA },           /* not UTF-8 */
    };
    (void)state;
    for (size_t i = 0; i < CR_ARRAY_LEN(c); i++) {
        problem_t p = { 0 };
        q_expr_t *q = q_parse(A, c[i].q, ld_core(), &p);
        if (q)
            fail_msg("q_parse(%s) should fail", c[i].q);
        if (p.kind != c[i].kind)
            fail_msg("q_parse(%s): kind %d, expected %d (%s)", c[i].q, p.kind, c[i].kind, p.detail);
        if (!p.detail[0])
            fail_msg("q_parse(%s): no detail", c[i].q);
    }
}

/* 4.9 EXAMPLES 13 and 14: rel{path} terms, resolved to the targets' ids. */
static void test_q_linked(void **state)
{
    problem_t    p = { 0 };
    cr_entity_t *st = E("{'id':'urn:ngsi-ld:WS:1','type':'WS','sensor':{'type':'Relationship','object':'urn:ngsi-ld:Device:345'},"
                        "'list':{'type':'ListRelationship','objectList':[{'object':'urn:ngsi-ld:Device:9'}]}}");
    (void)E("{'id':'urn:ngsi-ld:Device:345','type':'Device','humidity':{'type':'Property','value':40}}");
    (void)state;

    q_expr_t *q = q_parse(A, "sensor{humidity}==40", ld_core(), &p);
    assert_non_null(q);
    assert_int_equal(q_link_depth(q), 1);
    assert_false(q_match(q, st));                     /* unresolved: nothing */
    q_expr_t *l[4];
    assert_int_equal(q_links(q, l, 4), 1);
    q_link_view_t v;
    assert_true(q_link_get(l[0], &v));
    assert_null(v.types);
    q_term_view_t tv;
    assert_true(q_term_get(v.inner, &tv));
    assert_int_equal(tv.op, QO_EQ);
    assert_true(q_term_get(q, &tv) && tv.linked);
    const char **ids = arena_alloc(A, 2 * sizeof *ids);
    ids[0] = "urn:ngsi-ld:Device:999";
    ids[1] = "urn:ngsi-ld:Device:345";
    q_link_resolve(l[0], ids, 2);
    assert_true(q_match(q, st));

    q = q_parse(A, "list{Device,Sensor:humidity}==40;sensor{a{b{c}}}", ld_core(), &p);
    assert_non_null(q);
    assert_int_equal(q_link_depth(q), 3);
    assert_int_equal(q_links(q, l, 4), 4);           /* innermost first: c's, b's, a's ... */
    assert_true(q_link_get(l[0], &v));
    assert_string_equal(v.types, "Device,Sensor");
    ids = arena_alloc(A, sizeof *ids);
    ids[0] = "urn:ngsi-ld:Device:9";
    q_link_resolve(l[0], ids, 1);
    q_expr_t *one = q_parse(A, "list{Device,Sensor:humidity}", ld_core(), &p);
    assert_int_equal(q_links(one, l, 4), 1);
    q_link_resolve(l[0], ids, 1);
    assert_true(q_match(one, st));                    /* a ListRelationship's objects */

    /* a clone is resolved on its own: the original stays unresolved */
    q_expr_t *shared = q_parse(A, "sensor{humidity}==40;list{humidity}", ld_core(), &p);
    q_expr_t *copy = q_clone(A, shared);
    assert_int_equal(q_links(copy, l, 4), 2);
    ids = arena_alloc(A, sizeof *ids);
    ids[0] = "urn:ngsi-ld:Device:345";
    q_link_resolve(l[0], ids, 1);
    ids = arena_alloc(A, sizeof *ids);
    ids[0] = "urn:ngsi-ld:Device:9";
    q_link_resolve(l[1], ids, 1);
    assert_true(q_match(copy, st));
    assert_false(q_match(shared, st));
}

/* A linker over a fixed set of (frozen) entities, counting its reads. */
static cr_entity_t *lk_set[3];
static int          lk_reads;

static cr_entity_t *lk_get(void *ud, const char *id)
{
    (void)ud;
    lk_reads++;
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(lk_set[i]->id, id)) {
            entity_ref(lk_set[i]);
            return lk_set[i];
        }
    return NULL;
}

/* A stored filter (a subscription's q) keeps rel{...} terms; q_match_linked
 * follows one entity's objects without writing into the tree. */
static void test_q_linked_stored_follow(void **state)
{
    problem_t    p = { 0 };
    cr_entity_t *st = E("{'id':'urn:ngsi-ld:WS:7','type':'WS','sensor':{'type':'Relationship','object':'urn:ngsi-ld:Device:7'},"
                        "'list':{'type':'ListRelationship','objectList':[{'object':'urn:ngsi-ld:Nowhere'},"
                        "{'object':'urn:ngsi-ld:Sensor:7'}]}}");
    (void)state;
    lk_set[0] = entity_freeze(E("{'id':'urn:ngsi-ld:Device:7','type':'Device','humidity':{'type':'Property','value':40},"
                                "'at':{'type':'Relationship','object':'urn:ngsi-ld:Site:7'}}"));
    lk_set[1] = entity_freeze(E("{'id':'urn:ngsi-ld:Sensor:7','type':'Sensor','humidity':{'type':'Property','value':70}}"));
    lk_set[2] = entity_freeze(E("{'id':'urn:ngsi-ld:Site:7','type':'Site','name':{'type':'Property','value':'north'}}"));
    q_linker_t lk = {.get = lk_get};

    static const struct { const char *q; bool hit; } c[] = {
        {"sensor{humidity}==40", true}, {"sensor{humidity}==41", false}, {"sensor{humidity}", true},
        {"list{humidity}>50", true}, {"list{humidity}<50", false}, {"sensor{Device:humidity}==40", true},
        {"sensor{Sensor:humidity}==40", false}, {"list{Device,Sensor:humidity}==70", true},
        {"sensor{at{name}}==\"north\"", true}, {"sensor{at{name}}==\"south\"", false},
        {"nothing{humidity}", false}, {"sensor{humidity}==1|list{humidity}==70", true},
        {"sensor{humidity}==40;list{humidity}==40", false}, {"!sensor{missing}", true},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        q_expr_t *q = q_parse_stored(A, c[i].q, ld_core(), &p);
        if (!q) fail_msg("q_parse_stored(%s): %s", c[i].q, p.detail);
        assert_true(q_link_depth(q) > 0);
        if (q_match_linked(q, st, &lk) != c[i].hit) fail_msg("q_match_linked(%s) != %d", c[i].q, c[i].hit);
        assert_false(q_match(q, st));           /* the tree was not resolved by it */
    }
    /* the reads are bounded per evaluation: 1000 objects, 256 read */
    size_t cap = 64 * 1024, n = 0;
    char  *wide = arena_alloc(A, cap);
    n += (size_t)snprintf(wide + n, cap - n, "{'id':'urn:ngsi-ld:WS:8','type':'WS','list':{'type':'ListRelationship',"
                                             "'objectList':[");
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(wide + n, cap - n, "%s{'object':'urn:ngsi-ld:Nowhere:%d'}", i ? "," : "", i);
    snprintf(wide + n, cap - n, "]}}");
    lk_reads = 0;
    assert_false(q_match_linked(q_parse_stored(A, "list{humidity}", ld_core(), &p), E(wide), &lk));
    assert_int_equal(lk_reads, 256);
    /* malformed terms stay refused, as BadRequestData */
    assert_null(q_parse_stored(A, "sensor.x{a}==1", ld_core(), &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_null(q_parse_stored(A, "sensor{}", ld_core(), &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    for (size_t i = 0; i < 3; i++) entity_unref(lk_set[i]);
}

static void test_q_error_detail(void **state)
{
    problem_t p = { 0 };
    (void)state;

    assert_null(q_parse(A, "speed==3;rpm=>2", ld_core(), &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_non_null(strstr(p.detail, "offset 12"));
    assert_non_null(strstr(p.detail, "operator"));

    assert_null(q_parse(A, "speed~=(abc", ld_core(), &p));
    assert_non_null(strstr(p.detail, "regular expression"));
}

static void test_q_limits(void **state)
{
    char      buf[Q_LIMIT_BUF];
    problem_t p = { 0 };
    size_t    n = 0;
    (void)state;

    /* 32 levels are fine, 33 are too complex (6.3.2 TooComplexQuery). */
    for (int i = 0; i < 32; i++) buf[n++] = '(';
    n += (size_t)sprintf(buf + n, "rpm==3000");
    for (int i = 0; i < 32; i++) buf[n++] = ')';
    buf[n] = '\0';
    assert_non_null(q_parse(A, buf, ld_core(), &p));

    n = 0;
    for (int i = 0; i < 33; i++) buf[n++] = '(';
    n += (size_t)sprintf(buf + n, "rpm==3000");
    for (int i = 0; i < 33; i++) buf[n++] = ')';
    buf[n] = '\0';
    assert_null(q_parse(A, buf, ld_core(), &p));
    assert_int_equal(p.kind, PB_TOO_COMPLEX_QUERY);

    /* Deep nesting far past the limit stops early (no stack exhaustion). */
    memset(buf, '(', 8000);
    buf[8000] = '\0';
    assert_null(q_parse(A, buf, ld_core(), &p));
    assert_int_equal(p.kind, PB_TOO_COMPLEX_QUERY);

    /* Longer than 8 KiB. */
    memset(buf, 'a', 9000);
    buf[9000] = '\0';
    assert_null(q_parse(A, buf, ld_core(), &p));
    assert_int_equal(p.kind, PB_TOO_COMPLEX_QUERY);

    /* A long OR chain within the size is fine. */
    n = 0;
    while (n < 8000) n += (size_t)sprintf(buf + n, "rpm==%zu|", n);
    n += (size_t)sprintf(buf + n, "rpm==3000");
    assert_true(n <= 8192);
    {
        q_expr_t *q = q_parse(A, buf, ld_core(), &p);
        assert_non_null(q);
        assert_true(q_match(q, E(CAR)));
    }
}

/* The same compiled q matched from several threads at once (regexes share
 * their compiled code; each thread has its own match data). */
typedef struct mt_arg {
    const q_expr_t    *q;
    const cr_entity_t *yes, *no;
    int                bad;
} mt_arg_t;

static void *mt_run(void *ud)
{
    mt_arg_t *m = ud;
    for (int i = 0; i < 20000; i++)
        if (!q_match(m->q, m->yes) || q_match(m->q, m->no))
            m->bad++;
    return NULL;
}

static void test_q_threads(void **state)
{
    problem_t    p = { 0 };
    pthread_t    th[4];
    mt_arg_t     args[4];
    cr_entity_t *yes = E(CAR);
    cr_entity_t *no = E("{'id': 'urn:x:2', 'type': 'Car', 'brandName': {'type': 'Property', 'value': 'BMW'}}");
    q_expr_t    *q = q_parse(A, "brandName~=^Merc;brandName!~=BMW|rpm==1", ld_core(), &p);
    (void)state;

    assert_non_null(q);
    for (int i = 0; i < 4; i++) {
        args[i] = (mt_arg_t){ q, yes, no, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, mt_run, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
}

/* ------------------------------------------------------------ typesel */

static void test_typesel(void **state)
{
    problem_t          p = { 0 };
    cr_entity_t       *hv = E("{'id': 'urn:x:hv', 'type': ['Home', 'Vehicle']}");
    cr_entity_t       *h  = E("{'id': 'urn:x:h', 'type': 'Home'}");
    cr_entity_t       *m  = E("{'id': 'urn:x:m', 'type': 'Motorhome'}");
    typesel_t         *t;
    const char *const *list;
    (void)state;

    static const struct { const char *sel; bool hv, h, m; } c[] = {
        { "Home", true, true, false },
        { "Building|House", false, false, false },
        { "Home|Motorhome", true, true, true },
        { "Home,Motorhome", true, true, true },                      /* old spelling */
        { "(Home;Vehicle)", true, false, false },                    /* example 2 */
        { "(Home;Vehicle)|Motorhome", true, false, true },           /* example 3 */
        { "(Home;Vehicle),Motorhome", true, false, true },
        { "Home;Vehicle", true, false, false },                      /* bare AND */
        { "Motorhome|Home;Vehicle", true, false, true },             /* AND first */
        { "((Home|Motorhome);Vehicle)", true, false, false },
        { " Home , Motorhome ", true, true, true },
        { "https://uri.etsi.org/ngsi-ld/default-context/Home", true, true, false },
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(c); i++) {
        t = typesel_parse(A, c[i].sel, ld_core(), &p);
        if (!t)
            fail_msg("typesel_parse(%s): %s", c[i].sel, p.detail);
        if (typesel_match(t, hv) != c[i].hv || typesel_match(t, h) != c[i].h ||
            typesel_match(t, m) != c[i].m)
            fail_msg("typesel_match(%s) wrong", c[i].sel);
    }

    /* The plain list, for the type index. */
    t = typesel_parse(A, "Home,Motorhome|Home", ld_core(), &p);
    assert_int_equal(typesel_types(t, &list), 2);
    assert_ptr_equal(list[0], ld_expand(ld_core(), "Home"));
    assert_ptr_equal(list[1], ld_expand(ld_core(), "Motorhome"));
    t = typesel_parse(A, "Home", ld_core(), &p);
    assert_int_equal(typesel_types(t, &list), 1);
    t = typesel_parse(A, "(Home;Vehicle)|Motorhome", ld_core(), &p);
    assert_int_equal(typesel_types(t, &list), 0);
    t = typesel_parse(A, "(Home|Vehicle)", ld_core(), &p);
    assert_int_equal(typesel_types(t, &list), 2);
    assert_true(typesel_match(NULL, h));

    static const char *bad[] = {
        "", "|Home", "Home|", "Home,,Motorhome", "(Home", "Home)", "()", "Home Vehicle",
        "Ho\"me", "Home;", "(Home;)",
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        memset(&p, 0, sizeof p);
        if (typesel_parse(A, bad[i], ld_core(), &p))
            fail_msg("typesel_parse(%s) should fail", bad[i]);
        assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    }
    {
        char buf[200];
        memset(buf, '(', 100);
        strcpy(buf + 100, "Home");
        assert_null(typesel_parse(A, buf, ld_core(), &p));
        assert_int_equal(p.kind, PB_TOO_COMPLEX_QUERY);
    }
}

/* ------------------------------------------------------------ scopeQ */

static cr_entity_t *scoped(const char *scope_json)
{
    char buf[512];
    snprintf(buf, sizeof buf, "{'id': 'urn:x:s', 'type': 'T', 'scope': %s}", scope_json);
    return E(buf);
}

static void test_scopeq(void **state)
{
    problem_t    p = { 0 };
    cr_entity_t *gardens = scoped("'/Madrid/Gardens'");
    cr_entity_t *norte   = scoped("'/Madrid/Gardens/ParqueNorte'");
    cr_entity_t *sights  = scoped("'/Madrid/Sights/ParqueNorte'");
    cr_entity_t *both    = scoped("['/Madrid/Districts', '/CompanyA']");
    cr_entity_t *compb   = scoped("['/CompanyB']");
    cr_entity_t *none    = E("{'id': 'urn:x:n', 'type': 'T'}");
    (void)state;

    static const struct { const char *q; bool g, n, s, b, c, x; } c[] = {
        { "/Madrid",                 false, false, false, false, false, false },
        { "/Madrid/Gardens",         true,  false, false, false, false, false },
        { "/Madrid/Gardens/#",       true,  true,  false, false, false, false },  /* example 2 */
        { "/Madrid/#",               true,  true,  true,  true,  false, false },
        { "/Madrid/+/ParqueNorte",   false, true,  true,  false, false, false },  /* example 3 */
        { "/Madrid/+",               true,  false, false, true,  false, false },
        { "/+/+/+",                  false, true,  true,  false, false, false },
        { "/+/Gardens/#",            true,  true,  false, false, false, false },
        { "/#",                      true,  true,  true,  true,  true,  false },  /* any non-empty */
        { "/CompanyA",               false, false, false, true,  false, false },
        { "(/Madrid/Districts;/CompanyA)", false, false, false, true, false, false }, /* example 4 */
        { "(/Madrid/Districts;/CompanyB)", false, false, false, false, false, false },
        { "(/Madrid/Districts;/CompanyA)|CompanyB", false, false, false, true, true, false }, /* ex. 5 */
        { "(/Madrid/Districts;/CompanyA),/CompanyB", false, false, false, true, true, false },
        { "/Madrid/Gardens,/CompanyB", true, false, false, false, true, false },
        { "/CompanyB|/Madrid/Gardens;/Madrid/Gardens/#", true, false, false, false, true, false },
        { "/Madrid/Gardens/ParqueNorte/#", false, true, false, false, false, false },
        { "/Madrid/Garden",          false, false, false, false, false, false },  /* whole levels */
        { "/Madrid/Gardens/Parque",  false, false, false, false, false, false },
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(c); i++) {
        scopeq_t *s = scopeq_parse(A, c[i].q, &p);
        if (!s)
            fail_msg("scopeq_parse(%s): %s", c[i].q, p.detail);
        if (scopeq_match(s, gardens) != c[i].g || scopeq_match(s, norte) != c[i].n ||
            scopeq_match(s, sights) != c[i].s || scopeq_match(s, both) != c[i].b ||
            scopeq_match(s, compb) != c[i].c || scopeq_match(s, none) != c[i].x)
            fail_msg("scopeq_match(%s) wrong", c[i].q);
    }
    assert_true(scopeq_match(NULL, none));

    static const char *bad[] = {
        "", "/", "//a", "/a/", "/a//b", "/a|", "(/a", "/a)", "/#/a", "#", "/a/#b", "/a b",
        "/a;", "/a/b#", "()", "/a/+x",
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        memset(&p, 0, sizeof p);
        if (scopeq_parse(A, bad[i], &p))
            fail_msg("scopeq_parse(%s) should fail", bad[i]);
        assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    }
}

/* ------------------------------------------------------------ filter */

static void test_filter(void **state)
{
    problem_t       p = { 0 };
    entity_filter_t f;
    cr_entity_t    *car = E(CAR);
    const char     *ids[2] = { "urn:ngsi-ld:Car:2", "urn:ngsi-ld:Car:1" };
    const char     *attrs[2];
    (void)state;

    memset(&f, 0, sizeof f);
    assert_true(filter_match(&f, car));
    assert_true(filter_match(NULL, car));

    f.ids = ids;
    f.n_ids = 2;
    assert_true(filter_match(&f, car));
    f.n_ids = 1;
    assert_false(filter_match(&f, car));
    f.n_ids = 0;

    f.id_pattern = filter_compile_pattern(A, "^urn:ngsi-ld:Car:[0-9]+$", &p);
    assert_non_null(f.id_pattern);
    assert_true(filter_match(&f, car));
    f.id_pattern = filter_compile_pattern(A, "Bus", &p);
    assert_false(filter_match(&f, car));
    f.id_pattern = NULL;
    assert_null(filter_compile_pattern(A, "([", &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_non_null(strstr(p.detail, "idPattern"));

    f.types = typesel_parse(A, "Car|Bus", ld_core(), &p);
    assert_true(filter_match(&f, car));
    f.types = typesel_parse(A, "Bus", ld_core(), &p);
    assert_false(filter_match(&f, car));
    f.types = NULL;

    f.q = q_parse(A, "rpm>1000", ld_core(), &p);
    assert_true(filter_match(&f, car));
    f.q = q_parse(A, "rpm>5000", ld_core(), &p);
    assert_false(filter_match(&f, car));
    f.q = NULL;

    attrs[0] = ld_expand(ld_core(), "nothere");
    attrs[1] = ld_expand(ld_core(), "rpm");
    f.attrs = attrs;
    f.n_attrs = 2;
    assert_true(filter_match(&f, car));
    f.n_attrs = 1;
    assert_false(filter_match(&f, car));
    f.n_attrs = 0;

    f.scope = scopeq_parse(A, "/#", &p);
    assert_false(filter_match(&f, car));      /* the car has no scope */
    f.scope = NULL;

    {
        geoq_params_t gp = { "near;maxDistance==1000", "Point", "[13.4, 52.5]", NULL };
        cr_entity_t  *here = E("{'id': 'urn:x:g', 'type': 'Car', 'location': {'type': 'GeoProperty',"
                               " 'value': {'type': 'Point', 'coordinates': [13.4, 52.5001]}}}");
        f.geo = geoq_parse(A, &gp, ld_core(), &p);
        assert_non_null(f.geo);
        assert_true(filter_match(&f, here));
        assert_false(filter_match(&f, car));
    }
}

/* The regex budget: a catastrophic pattern ends (as no match). */
static void test_regex_limit(void **state)
{
    problem_t p = { 0 };
    void     *re = filter_regex_compile(A, "^(a|a)*$", 8, "q", &p);
    char      s[64];
    (void)state;

    assert_non_null(re);
    memset(s, 'a', 40);
    s[40] = 'b';
    s[41] = '\0';
    assert_false(filter_regex_match(re, s, 41));
    assert_true(filter_regex_match(re, s, 40));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_object_type_member, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_existence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_numbers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_strings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_booleans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_relationships, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_language_vocab, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_times, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_regex, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_logic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_context, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_hand_built, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_linked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_linked_stored_follow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_error_detail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_typesel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scopeq, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regex_limit, setup, teardown),
    };

    if (!ld_init())
        return 1;
    ld_set_offline(true);
    model_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
