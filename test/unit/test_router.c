/* Unit tests of the router (http/router.c): patterns, parameters,
 * trailing '/', percent-decoding, unknown paths, Allow lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "http/router.h"

static void h_get(request_t *r) { (void)r; }
static void h_post(request_t *r) { (void)r; }
static void h_del(request_t *r) { (void)r; }

static const http_route_t routes[] = {
    {"/ngsi-ld/v1/entities", h_get, h_post, NULL, NULL, h_del, 0},
    {"/ngsi-ld/v1/entities/{id}", h_get, NULL, NULL, NULL, h_del, 0},
    {"/ngsi-ld/v1/entities/{id}/attrs/{attrId}", NULL, NULL, NULL, h_post, h_del, 0},
    {"/version", h_get, NULL, NULL, NULL, NULL, 0},
};

static int match(router_t *rt, request_t *r, arena_t *a, const char *path, const http_route_t **out)
{
    memset(r, 0, sizeof *r);
    r->arena = a;
    r->path = arena_strdup(a, path);
    return router_match(rt, r, out);
}

static void routing(void **state)
{
    (void)state;
    router_t  *rt = router_new(routes, 4);
    arena_t   *a = arena_new(0);
    request_t  r;
    const http_route_t *m = NULL;

    assert_int_equal(match(rt, &r, a, "/ngsi-ld/v1/entities", &m), ROUTE_OK);
    assert_ptr_equal(m, &routes[0]);
    assert_int_equal(match(rt, &r, a, "/ngsi-ld/v1/entities/", &m), ROUTE_OK);
    assert_ptr_equal(m, &routes[0]);
    assert_int_equal(match(rt, &r, a, "/ngsi-ld/v1/entities/urn:ngsi-ld:Car:1", &m), ROUTE_OK);
    assert_ptr_equal(m, &routes[1]);
    assert_int_equal(r.npath, 1);
    assert_string_equal(r.pathv[0], "urn:ngsi-ld:Car:1");
    assert_int_equal(match(rt, &r, a, "/ngsi-ld/v1/entities/urn%3Ax%2Fy/attrs/speed/", &m), ROUTE_OK);
    assert_ptr_equal(m, &routes[2]);
    assert_string_equal(r.pathv[0], "urn:x/y");
    assert_string_equal(r.pathv[1], "speed");
    assert_int_equal(match(rt, &r, a, "/ngsi-ld/v1/entities/x/attrs", &m), ROUTE_NOT_FOUND);
    assert_int_equal(match(rt, &r, a, "/ngsi-ld/v1/nothing", &m), ROUTE_NOT_FOUND);
    assert_int_equal(match(rt, &r, a, "/ngsi-ld/v1//entities", &m), ROUTE_NOT_FOUND);
    assert_int_equal(match(rt, &r, a, "/ngsi-ld/v1/entities/bad%zz", &m), ROUTE_BAD_PATH);
    assert_int_equal(match(rt, &r, a, "/version", &m), ROUTE_OK);
    assert_int_equal(match(rt, &r, a, "", &m), ROUTE_NOT_FOUND);

    char allow[64];
    router_allow(&routes[0], allow, sizeof allow);
    assert_string_equal(allow, "GET, POST, DELETE");
    router_allow(&routes[2], allow, sizeof allow);
    assert_string_equal(allow, "PATCH, DELETE");
    assert_null(router_handler(&routes[1], HM_POST));
    assert_non_null(router_handler(&routes[1], HM_DELETE));
    arena_free(a);
    router_free(rt);
}

/* A path segment with %00 is refused by the router, not cut short. */
static void nul_in_a_segment(void **state)
{
    (void)state;
    static const http_route_t one[] = {{.pattern = "/e/{id}", .get = h_get}};
    router_t *rt = router_new(one, 1);
    arena_t  *a = arena_new(0);
    request_t r = {.arena = a, .path = "/e/urn:h:1%00x"};
    const http_route_t *m = NULL;
    assert_int_equal(router_match(rt, &r, &m), ROUTE_BAD_PATH);
    r.path = "/e/urn:h:1%2500x";
    assert_int_equal(router_match(rt, &r, &m), ROUTE_OK);
    assert_string_equal(r.pathv[0], "urn:h:1%00x");
    arena_free(a);
    router_free(rt);
}

static void url_decoding(void **state)
{
    (void)state;
    char s1[] = "a%20b+c%2B";
    assert_true(http_url_decode(s1));
    assert_string_equal(s1, "a b+c+");
    char s2[] = "bad%2";
    assert_false(http_url_decode(s2));
    /* %00 would end the decoded string early: urn:h:1%00x is not urn:h:1 */
    char s3[] = "urn:h:1%00x";
    assert_false(http_url_decode(s3));
    char s4[] = "%01%ff%C3%a9";
    assert_true(http_url_decode(s4));
    assert_string_equal(s4, "\x01\xff\xc3\xa9");
    arena_t *a = arena_new(0);
    sbuf_t   sb;
    sb_init(&sb, a, 16);
    http_url_encode(&sb, "urn:x y&z");
    assert_string_equal(sb.p, "urn:x%20y%26z");
    /* runs kept as they are, escapes at either end and back to back */
    const char *cases[][2] = { { "", "" }, { "urn:ngsi-ld:Meter:w1-0-7", "urn:ngsi-ld:Meter:w1-0-7" },
                               { " a", "%20a" }, { "a ", "a%20" }, { "  ", "%20%20" },
                               { "\xc3\xa9x/~._", "%C3%A9x/~._" } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb_init(&sb, a, 4);
        http_url_encode(&sb, cases[i][0]);
        assert_string_equal(sb.p, cases[i][1]);
    }
    arena_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(routing), cmocka_unit_test(url_decoding),
                                       cmocka_unit_test(nul_in_a_segment)};
    return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
