/*
 * test_mgc_filter.c - the MongoDB store's filter translation (src/store/
 * mongoc/filter.c): for each kind of term the exact filter sent to the
 * server (canonical extended JSON), whether it is exact (offset, limit and
 * count may go to the server) or a prefilter the broker completes, and the
 * cases that must not be pushed down at all. The server side (the results
 * equal corDB's) is test/functional/test_mongoc_pushdown.py's, on FerretDB.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "store/mongoc/mgc.h"

#define DEF "https://uri.etsi.org/ngsi-ld/default-context/"

#define FIXTURE_ARENA_SIZE 16384
#include "arena_fixture.h"

/* The filter of f as canonical extended JSON, and whether it is exact. */
static char *json_of(const entity_filter_t *f, bool *exact)
{
    bson_t q;
    char  *s, *out;

    *exact = mgc_filter(f, false, &q);
    s      = bson_as_canonical_extended_json(&q, NULL);
    out    = arena_strdup(A, s);
    bson_free(s);
    bson_destroy(&q);
    return out;
}

/* want with every "%K" replaced by the field key of DEF name. */
static char *with_key(const char *want, const char *name)
{
    char        key[24], full[256], *out = arena_alloc(A, strlen(want) * 2 + 64);
    const char *p = want;
    char       *o = out;

    snprintf(full, sizeof full, DEF "%s", name);
    mgc_geo_key(key, full);
    while (*p) {
        if (p[0] == '%' && p[1] == 'K') {
            o += sprintf(o, "%s", key);
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

static void check_q(const char *text, const char *name, bool want_exact, const char *want)
{
    problem_t       p = { 0 };
    entity_filter_t f = { 0 };
    bool            exact;
    char           *got;

    f.q = q_parse(A, text, ld_core(), &p);
    if (!f.q)
        fail_msg("q_parse(%s): %s", text, p.detail);
    got = json_of(&f, &exact);
    if (strcmp(got, with_key(want, name)))
        fail_msg("q %s:\n got  %s\n want %s", text, got, with_key(want, name));
    if (exact != want_exact)
        fail_msg("q %s: exact %d, want %d", text, exact, want_exact);
}

#define OR_QX(cond)                                                                                \
    "{ \"$and\" : [ { \"$or\" : [ { " cond " }, { \"qx\" : \"%K\" }, { \"qx\" : { \"$exists\" : false } } ] } ] }"
#define HAS(name) "{ \"$and\" : [ { \"a\" : \"" DEF name "\" } ] }"

static void test_q_numbers_strings_bools(void **st)
{
    (void)st;
    check_q("speed>50", "speed", false, OR_QX("\"q.%K\" : { \"$gt\" : { \"$numberLong\" : \"50\" } }"));
    check_q("speed==1.5", "speed", false,
            OR_QX("\"q.%K\" : { \"$eq\" : { \"$numberDouble\" : \"1.5\" } }"));
    check_q("speed==10..20", "speed", false,
            OR_QX("\"q.%K\" : { \"$gte\" : { \"$numberLong\" : \"10\" }, \"$lte\" : { \"$numberLong\" : \"20\" } }"));
    check_q("speed==1,2", "speed", false,
            OR_QX("\"q.%K\" : { \"$in\" : [ { \"$numberLong\" : \"1\" }, { \"$numberLong\" : \"2\" } ] }"));
    check_q("name==\"abc\"", "name", false, OR_QX("\"q.%K\" : { \"$in\" : [ \"abc\" ] }"));
    check_q("name==\"a\",\"b\"", "name", false, OR_QX("\"q.%K\" : { \"$in\" : [ \"a\", \"b\" ] }"));
    check_q("name>\"m\"", "name", false, OR_QX("\"q.%K\" : { \"$gt\" : \"m\" }"));
    check_q("name==\"a\"..\"c\"", "name", false, OR_QX("\"q.%K\" : { \"$gte\" : \"a\", \"$lte\" : \"c\" }"));
    check_q("on==true", "on", false, OR_QX("\"q.%K\" : { \"$eq\" : true }"));
    check_q("on==true,false", "on", false, OR_QX("\"q.%K\" : { \"$in\" : [ true, false ] }"));
    check_q("name~=^ab.c", "name", false,
            OR_QX("\"q.%K\" : { \"$regex\" : { \"$regularExpression\" : { \"pattern\" : \"^ab.c\", \"options\" : \"\" } } }"));
}

static void test_q_times(void **st)
{
    (void)st;
    /* a DateTime literal compares with d (µs), never with the text */
    check_q("at>2020-01-01T00:00:00Z", "at", false,
            OR_QX("\"d.%K\" : { \"$gt\" : { \"$numberLong\" : \"1577836800000000\" } }"));
    check_q("at==2020-01-01T00:00:00Z..2020-01-02T00:00:00Z", "at", false,
            OR_QX("\"d.%K\" : { \"$gte\" : { \"$numberLong\" : \"1577836800000000\" }, "
                  "\"$lte\" : { \"$numberLong\" : \"1577923200000000\" } }"));
}

static void test_q_terms_left_to_the_broker(void **st)
{
    (void)st;
    /* a quoted string that reads as a time is compared as a time: only
     * "the attribute is there" goes to the server */
    check_q("at==\"2020-01-01T00:00:00Z\"", "at", false, HAS("at"));
    /* != , !~=, patterns outside the subset, paths: the attribute is there */
    check_q("name!=\"x\"", "name", false, HAS("name"));
    check_q("name!~=x", "name", false, HAS("name"));
    check_q("name~=x$", "name", false, HAS("name"));          /* '$' differs on text with newlines */
    check_q("name~=(?=a)", "name", false, HAS("name"));
    check_q("name~=\\s", "name", false, HAS("name"));
    check_q("speed.observedAt>2020-01-01T00:00:00Z", "speed", false, HAS("speed"));
    check_q("speed.accuracy==1", "speed", false, HAS("speed"));
    check_q("address[city]==\"Paris\"", "address", false, HAS("address"));
    check_q("t==12:00:00Z", "t", false, HAS("t"));
    /* existence is exact */
    check_q("speed", "speed", true, HAS("speed"));
    check_q("!speed", "speed", true, "{ \"$and\" : [ { \"a\" : { \"$ne\" : \"" DEF "speed\" } } ] }");
    check_q("speed;!other", "speed", true,
            "{ \"$and\" : [ { \"$and\" : [ { \"a\" : \"" DEF "speed\" }, { \"a\" : { \"$ne\" : \"" DEF
            "other\" } } ] } ] }");
}

static void test_q_and_or(void **st)
{
    (void)st;
    /* AND keeps what it translates; OR needs all of its children */
    check_q("!a.b;speed", "speed", false, "{ \"$and\" : [ { \"$and\" : [ { \"a\" : \"" DEF "speed\" } ] } ] }");
    check_q("!a.b|speed", "speed", false, "{ }");
    check_q("speed|other", "speed", true,
            "{ \"$and\" : [ { \"$or\" : [ { \"a\" : \"" DEF "speed\" }, { \"a\" : \"" DEF "other\" } ] } ] }");
}

static entity_filter_t with_pattern(const char *pat)
{
    problem_t       p = { 0 };
    entity_filter_t f = { 0 };

    f.id_pattern = filter_compile_pattern(A, pat, &p);
    assert_non_null(f.id_pattern);
    return f;
}

static void check_f(const entity_filter_t *f, bool want_exact, const char *want)
{
    bool  exact;
    char *got = json_of(f, &exact);

    if (strcmp(got, want))
        fail_msg("\n got  %s\n want %s", got, want);
    assert_int_equal(exact, want_exact);
}

static void test_ids_types_patterns(void **st)
{
    const char     *ids[] = { "urn:a", "urn:b" };
    problem_t       p = { 0 };
    entity_filter_t f = { .ids = ids, .n_ids = 2 };

    (void)st;
    f.types = typesel_parse(A, "T", ld_core(), &p);
    check_f(&f, true,
            "{ \"_id\" : { \"$in\" : [ \"urn:a\", \"urn:b\" ] }, \"t\" : { \"$in\" : [ \"" DEF "T\" ] } }");
    f.types = typesel_parse(A, "T;U", ld_core(), &p);            /* an expression: the broker's */
    check_f(&f, false, "{ \"_id\" : { \"$in\" : [ \"urn:a\", \"urn:b\" ] } }");

    f = with_pattern("^urn:ngsi-ld:Car:[0-9]{1,3}$");
    check_f(&f, true,
            "{ \"$and\" : [ { \"_id\" : { \"$regex\" : { \"$regularExpression\" : { \"pattern\" : "
            "\"^urn:ngsi-ld:Car:[0-9]{1,3}$\", \"options\" : \"\" } } } } ] }");
    f = with_pattern("urn:(?:a|b)(?:cd)+\\.x*?");
    check_f(&f, true,
            "{ \"$and\" : [ { \"_id\" : { \"$regex\" : { \"$regularExpression\" : { \"pattern\" : "
            "\"urn:(?:a|b)(?:cd)+\\\\.x*?\", \"options\" : \"\" } } } } ] }");
    /* outside the subset PCRE2 and RE2 share: not sent */
    static const char *const not_portable[] = {
        "(?=urn)", "(a)\\1", "a++", "(a+)+$", "(a|aa)*", "((a)b*)+", "(?:a{2})*x", "\\bx", "[[:alpha:]]", "(?i)urn", "a{2000}", "x{", "\\Qa\\E", "(?<n>a)", "a}",
    };
    for (size_t i = 0; i < sizeof not_portable / sizeof *not_portable; i++) {
        f = with_pattern(not_portable[i]);
        bool  exact;
        char *got = json_of(&f, &exact);
        if (strcmp(got, "{ }") || exact)
            fail_msg("%s pushed down: %s", not_portable[i], got);
    }
}

static void test_selectors(void **st)
{
    problem_t         p = { 0 };
    entity_selector_t sel[3];
    entity_filter_t   f = { .sel = sel, .n_sel = 2 };

    (void)st;
    memset(sel, 0, sizeof sel);
    sel[0].id    = "urn:a";
    sel[0].types = typesel_parse(A, "T", ld_core(), &p);
    sel[1].id_pattern = filter_compile_pattern(A, "^urn:b", &p);
    check_f(&f, true,
            "{ \"$and\" : [ { \"$or\" : [ { \"_id\" : \"urn:a\", \"t\" : { \"$in\" : [ \"" DEF "T\" ] } }, "
            "{ \"_id\" : { \"$regex\" : { \"$regularExpression\" : { \"pattern\" : \"^urn:b\", \"options\" : \"\" } } } } ] } ] }");
    /* a type expression narrows nothing on its own: that selector, hence the OR, is the broker's */
    sel[2].types = typesel_parse(A, "T;U", ld_core(), &p);
    f.n_sel      = 3;
    check_f(&f, false, "{ }");
    /* a pattern outside the subset beside a type: the type goes, the pattern stays */
    sel[2].types      = typesel_parse(A, "U", ld_core(), &p);
    sel[2].id_pattern = filter_compile_pattern(A, "(?=x)", &p);
    check_f(&f, false,
            "{ \"$and\" : [ { \"$or\" : [ { \"_id\" : \"urn:a\", \"t\" : { \"$in\" : [ \"" DEF "T\" ] } }, "
            "{ \"_id\" : { \"$regex\" : { \"$regularExpression\" : { \"pattern\" : \"^urn:b\", \"options\" : \"\" } } } }, "
            "{ \"t\" : { \"$in\" : [ \"" DEF "U\" ] } } ] } ] }");
}

static void check_scope(const char *text, const char *want_inner)
{
    problem_t       p = { 0 };
    entity_filter_t f = { 0 };
    char            want[2048];

    f.scope = scopeq_parse(A, text, &p);
    assert_non_null(f.scope);
    snprintf(want, sizeof want,
             "{ \"$and\" : [ { \"$or\" : [ %s, { \"s\" : { \"$exists\" : false } } ] } ] }", want_inner);
    check_f(&f, false, want);
}

#define RE(x) "{ \"s\" : { \"$regularExpression\" : { \"pattern\" : \"" x "\", \"options\" : \"\" } } }"

static void test_scopeq(void **st)
{
    (void)st;
    check_scope("/Madrid", RE("^/Madrid/?\\\\z"));
    check_scope("/Madrid/#", RE("^/Madrid(/[\\\\s\\\\S]*)?\\\\z"));
    check_scope("/Madrid/+", RE("^/Madrid/[^/]+/?\\\\z"));
    check_scope("/#", RE("^[\\\\s\\\\S]"));
    check_scope("/a;/b", "{ \"$and\" : [ " RE("^/a/?\\\\z") ", " RE("^/b/?\\\\z") " ] }");
    check_scope("/a,/b/#", "{ \"$or\" : [ " RE("^/a/?\\\\z") ", " RE("^/b(/[\\\\s\\\\S]*)?\\\\z") " ] }");
}

/* The scope regexes select exactly what scopeq_match does (PCRE2 here). */
static void test_scopeq_regex_agrees_with_the_matcher(void **st)
{
    static const char *const pats[]   = { "/a", "/a/#", "/a/+", "/#", "/a/+/c", "/a/+/#" };
    static const char *const scopes[] = { "/a", "/a/", "/ab", "/a/b", "/a/b/c", "/b", "/a/b/", "/a//c" };
    problem_t                p = { 0 };

    (void)st;
    for (size_t i = 0; i < sizeof pats / sizeof *pats; i++) {
        scopeq_t *s = scopeq_parse(A, pats[i], &p);
        char      re[256];

        assert_non_null(s);
        assert_true(scopeq_regex(scopeq_root(s), re, sizeof re));
        void *code = filter_regex_compile(A, re, strlen(re), "test", &p);
        assert_non_null(code);
        for (size_t j = 0; j < sizeof scopes / sizeof *scopes; j++) {
            cr_entity_t e = { .id = "urn:x" };
            json_t      sc = { .type = JSON_STRING, .str = scopes[j], .len = (uint32_t)strlen(scopes[j]) };

            e.scope = &sc;
            if (scopeq_match(s, &e) != filter_regex_match(code, scopes[j], strlen(scopes[j])))
                fail_msg("%s on %s: matcher %d, regex %s %d", pats[i], scopes[j], scopeq_match(s, &e), re,
                         !scopeq_match(s, &e));
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_q_numbers_strings_bools, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_times, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_terms_left_to_the_broker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_q_and_or, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ids_types_patterns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_selectors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scopeq, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scopeq_regex_agrees_with_the_matcher, setup, teardown),
    };

    if (!ld_init())
        return 1;
    model_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
