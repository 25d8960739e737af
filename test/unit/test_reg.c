/*
 * test_reg.c - reg/: the registration model (validation of 5.2.9, 5.2.10,
 * 5.2.34, the 4.20 names and groups, the mode rules) and the registry's
 * matching (5.12) through its index, including with many registrations of
 * which few match, and the exclusive/redirect conflicts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "reg/reg.h"

#define NOW 1700000000000000LL

static int g_seq;

static reg_t *build(const char *members, problem_t *p)
{
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"id\":\"urn:r:%d\",\"type\":\"ContextSourceRegistration\",\"endpoint\":\"http://127.0.0.1:9\"%s%s}",
             ++g_seq, *members ? "," : "", members);
    memset(p, 0, sizeof *p);
    return reg_build("t", doc, strlen(doc), NOW, p);
}

static void test_validation(void **state)
{
    (void)state;
    static const struct { const char *m; bool ok; } cases[] = {
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}]", true},
        {"\"information\":[{\"propertyNames\":[\"p\"]}],\"mode\":\"auxiliary\",\"operations\":[\"retrieveOps\"]", true},
        {"\"information\":[{\"entities\":[{\"id\":\"urn:e:1\",\"type\":\"A\"}],\"propertyNames\":[\"p\"]}],\"mode\":\"exclusive\"", true},
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"operations\":[\"federationOps\",\"createEntity\"]", true},
        {"\"information\":[]", false},
        {"\"information\":[{\"entities\":[{\"idPattern\":\"(\",\"type\":\"A\"}]}]", false},
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"mode\":\"auxiliary\"", true},   /* 4.3.6.2: retrieveOps */
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"mode\":\"auxiliary\",\"operations\":[\"federationOps\"]", false},
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"mode\":\"exclusive\"", false},
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"operations\":[\"nope\"]", false},
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"expiresAt\":\"2001-01-01T00:00:00Z\"", false},
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"refreshRate\":\"P\"", false},
        {"\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"management\":{\"timeout\":0}", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        problem_t p;
        reg_t    *r = build(cases[i].m, &p);
        if (cases[i].ok && !r) fail_msg("case %zu refused: %s", i, p.detail);
        if (!cases[i].ok && r) fail_msg("case %zu accepted", i);
        if (!cases[i].ok) assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
        reg_unref(r);
    }
    problem_t p;
    reg_t    *r = build("\"information\":[{\"entities\":[{\"type\":\"A\"}]}]", &p);
    assert_true(reg_ops(r) & REG_OP_BIT(REG_OP_QUERY_ENTITY));       /* federationOps by default */
    assert_false(reg_ops(r) & REG_OP_BIT(REG_OP_CREATE_ENTITY));
    assert_int_equal(reg_mode(r), REG_INCLUSIVE);
    reg_unref(r);
}

static size_t match(const reg_query_t *q, arena_t *a, reg_t ***v)
{
    size_t n;
    *v = reg_match("t", q, NOW, a, &n, NULL);
    return n;
}

static void release(reg_t **v, size_t n)
{
    for (size_t i = 0; i < n; i++) reg_unref(v[i]);
}

static void add(const char *members)
{
    problem_t p;
    reg_t    *r = build(members, &p);
    assert_non_null(r);
    assert_true(reg_add(r, &p));
    reg_unref(r);
}

static void test_matching_narrows(void **state)
{
    (void)state;
    reg_shutdown();
    arena_t *a = arena_new(4096);
    char     m[256];
    /* 10,000 registrations of other types, 30 of the asked one */
    for (int i = 0; i < 10000; i++) {
        snprintf(m, sizeof m, "\"information\":[{\"entities\":[{\"type\":\"Other%d\"}]}]", i);
        add(m);
        if (i % 333 == 0 && i < 9990) add("\"information\":[{\"entities\":[{\"type\":\"Wanted\"}]}]");
    }
    add("\"information\":[{\"entities\":[{\"id\":\"urn:e:7\",\"type\":\"ById\"}],\"propertyNames\":[\"speed\"]}]");
    add("\"information\":[{\"entities\":[{\"idPattern\":\"^urn:p:\",\"type\":\"ByPattern\"}]}]");
    problem_t  p = {0};
    typesel_t *ts = typesel_parse(a, "Wanted", ld_core(), &p);
    assert_non_null(ts);
    reg_query_t q = {.types = ts};
    reg_t     **v;
    size_t      n = match(&q, a, &v);
    assert_int_equal(n, 30);
    release(v, n);
    /* the cost stays flat: many matches in little time */
    clock_t t0 = clock();
    for (int i = 0; i < 2000; i++) {
        n = match(&q, a, &v);
        release(v, n);
    }
    double ms = (double)(clock() - t0) * 1000.0 / CLOCKS_PER_SEC;
    assert_true(ms < 2000);
    /* by id and type: the type's entries */
    const char *id = "urn:e:7";
    reg_query_t qi = {.types = typesel_parse(a, "ById", ld_core(), &p), .ids = &id, .n_ids = 1};
    n = match(&qi, a, &v);
    assert_int_equal(n, 1);
    release(v, n);
    const char *pid = "urn:p:1", *nid = "urn:x:1";
    reg_query_t qp = {.types = typesel_parse(a, "ByPattern", ld_core(), &p), .ids = &pid, .n_ids = 1};
    n = match(&qp, a, &v);
    assert_int_equal(n, 1);
    release(v, n);
    qp.ids = &nid;
    n = match(&qp, a, &v);
    assert_int_equal(n, 0);
    /* by id alone (5.12): the id's entry, the patterns that match it, and every
     * EntityInfo with a type only (it may hold any id of its type) */
    reg_query_t qo = {.ids = &id, .n_ids = 1};
    n = match(&qo, a, &v);
    assert_int_equal(n, 10000 + 30 + 1);
    release(v, n);
    qo.ids = &nid;
    n = match(&qo, a, &v);
    assert_int_equal(n, 10000 + 30);
    release(v, n);
    /* attributes: speed matches the id one, brand nothing of those */
    const char *speed = ld_expand(ld_core(), "speed"), *brand = ld_expand(ld_core(), "brand");
    reg_query_t qa = {.types = qi.types, .ids = &id, .n_ids = 1, .attrs = &speed, .n_attrs = 1};
    n = match(&qa, a, &v);
    assert_int_equal(n, 1);
    release(v, n);
    qa.attrs = &brand;
    n = match(&qa, a, &v);
    assert_int_equal(n, 0);
    /* operations */
    q.ops = REG_OP_BIT(REG_OP_CREATE_ENTITY);
    n = match(&q, a, &v);
    assert_int_equal(n, 0);
    reg_shutdown();
    arena_free(a);
}

static void test_conflicts(void **state)
{
    (void)state;
    reg_shutdown();
    add("\"information\":[{\"entities\":[{\"id\":\"urn:e:1\",\"type\":\"A\"}],\"propertyNames\":[\"p\"]}],\"mode\":\"exclusive\"");
    problem_t p;
    reg_t    *r = build("\"information\":[{\"entities\":[{\"id\":\"urn:e:1\",\"type\":\"A\"}],\"propertyNames\":[\"p\",\"q\"]}],"
                        "\"mode\":\"exclusive\"", &p);
    assert_non_null(r);
    assert_false(reg_conflict(r, &p));
    assert_int_equal(p.kind, PB_CONFLICT);
    reg_unref(r);
    r = build("\"information\":[{\"entities\":[{\"type\":\"A\"}]}],\"mode\":\"redirect\"", &p);
    assert_false(reg_conflict(r, &p));
    reg_unref(r);
    r = build("\"information\":[{\"entities\":[{\"id\":\"urn:e:2\",\"type\":\"A\"}],\"propertyNames\":[\"p\"]}],"
              "\"mode\":\"exclusive\"", &p);
    assert_true(reg_conflict(r, &p));
    reg_unref(r);
    reg_shutdown();
}

static int group_setup(void **state)
{
    char *argv[] = {"test_reg", NULL};
    (void)state;
    if (!cr_config_load(1, argv)) return -1;
    cr_log_open(NULL, LOG_ERROR);
    if (!ld_init()) return -1;
    ld_set_offline(true);
    model_init();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_matching_narrows),
        cmocka_unit_test(test_conflicts),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
