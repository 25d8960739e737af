/*
 * test_projection.c - the Attribute Projection Language of 4.21
 * (model/projection.c): the tree of pick and omit, nested terms for linked
 * entities, both separators, the entity members, projection_link and
 * projection_keeps, and every syntax error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "model/model.h"

#include "arena_fixture.h"

static const char *N(const char *term)
{
    return ld_expand(ld_core(), term);
}

/* Projections are reads: they only look names up (ld_expand_lookup), so the
 * names of a text are stored (interned) first, as entity writes would have. */
static void store_names(const char *text)
{
    char name[256];
    size_t n = 0;
    for (const char *s = text;; s++) {
        if (*s && !strchr(",|{}", *s) && n + 1 < sizeof name) {
            name[n++] = *s;
            continue;
        }
        name[n] = 0;
        if (n) (void)ld_expand(ld_core(), name);
        n = 0;
        if (!*s) break;
    }
}

static projection_t *parse(const char *text, bool omit)
{
    problem_t p = {0};
    store_names(text);
    projection_t *pr = projection_parse(A, text, ld_core(), omit, &p);
    if (!pr)
        fail_msg("'%s' refused: %s", text, p.detail);
    return pr;
}

static void refused(const char *text)
{
    for (int omit = 0; omit < 2; omit++) {
        problem_t p = {0};
        if (projection_parse(A, text, ld_core(), omit, &p))
            fail_msg("'%s' accepted", text);
        assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    }
}

static void test_flat_lists(void **state)
{
    (void)state;
    projection_t *pr = parse("temperature,humidity|id|type|scope", false);
    assert_int_equal(pr->n, 5);
    assert_ptr_equal(pr->names[0], N("temperature"));
    assert_ptr_equal(pr->names[1], N("humidity"));
    assert_string_equal(pr->names[2], "@id");
    assert_string_equal(pr->names[3], "@type");
    assert_ptr_equal(pr->names[4], MN.scope);
    assert_int_equal(pr->depth, 0);
    assert_int_equal(pr->n_links, 0);
    /* a repeated name once */
    assert_int_equal(parse("a,a|a", false)->n, 1);
}

static void test_nested_pick(void **state)
{
    (void)state;
    /* EXAMPLE 3 of 4.21, one level more */
    projection_t *pr = parse("observation{temperature,humidity},x{y{z}}", false);
    assert_int_equal(pr->depth, 2);
    assert_int_equal(pr->n, 2);               /* pick: the relationships are picked too */
    assert_int_equal(pr->n_links, 2);
    assert_ptr_equal(pr->links[0], N("observation"));
    assert_int_equal(pr->sub[0]->n, 2);
    assert_ptr_equal(pr->sub[0]->names[1], N("humidity"));
    assert_int_equal(pr->sub[1]->depth, 1);
    assert_ptr_equal(pr->sub[1]->sub[0]->names[0], N("z"));

    assert_ptr_equal(projection_link(pr, N("observation"), false), pr->sub[0]);
    /* no nested term: the same list applies to the linked entity (5.7.1.5) */
    assert_ptr_equal(projection_link(pr, N("other"), false), pr);
    assert_true(projection_keeps(pr, N("observation"), false));
    assert_false(projection_keeps(pr, N("temperature"), false));
    assert_true(projection_keeps(NULL, N("anything"), false));
    assert_null(projection_link(NULL, N("x"), false));
}

static void test_nested_omit(void **state)
{
    (void)state;
    projection_t *pr = parse("a,r{b}", true);
    assert_int_equal(pr->n, 1);               /* r{b} omits nothing of the linking entity */
    assert_false(projection_keeps(pr, N("a"), true));
    assert_true(projection_keeps(pr, N("r"), true));
    assert_true(projection_keeps(pr, N("b"), true));

    const projection_t *sub = projection_link(pr, N("r"), true);
    assert_false(projection_keeps(sub, N("b"), true));
    assert_false(projection_keeps(sub, N("a"), true));   /* top-level terms apply to every entity */
    assert_true(projection_keeps(sub, N("c"), true));

    /* reached by another relationship: only the top-level terms */
    const projection_t *other = projection_link(pr, N("s"), true);
    assert_false(projection_keeps(other, N("a"), true));
    assert_true(projection_keeps(other, N("b"), true));
    const projection_t *deeper = projection_link(sub, N("r"), true);
    assert_true(projection_keeps(deeper, N("b"), true));
    assert_false(projection_keeps(deeper, N("a"), true));
}

static void test_syntax_errors(void **state)
{
    (void)state;
    const char *bad[] = {"", ",", "a,", ",a", "a,,b", "a|", "a{", "a}", "{a}", "a{}", "a{b", "a{b}}",
                         "a{b}c", "a{b,}", "a b", "a{b{c}", "a\"b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        refused(bad[i]);
    char deep[256] = "";
    for (int i = 0; i <= PROJECTION_MAX_DEPTH; i++) strcat(deep, "r{");
    strcat(deep, "a");
    for (int i = 0; i <= PROJECTION_MAX_DEPTH; i++) strcat(deep, "}");
    refused(deep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_flat_lists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_pick, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_omit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syntax_errors, setup, teardown),
    };
    if (!ld_init()) {
        fprintf(stderr, "ld_init failed\n");
        return 1;
    }
    model_init();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
