/*
 * test_notify.c - notify/: the subscription model (validation of 5.2.12 -
 * 5.2.15 and 7.2 endpoints, the stored document on create and PATCH) and
 * the engine's matcher on a real store (which changes are due, which are
 * not, counted before the write returns).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "notify/notify.h"

#define NOW 1700000000000000LL

static notify_sub_t *build(arena_t *a, const char *text, problem_t *p)
{
    char    err[128];
    json_t *body = json_parse_copy(a, text, strlen(text), NULL, err, sizeof err);
    assert_non_null(body);
    size_t len;
    char  *doc = notify_doc_new(a, body, ld_core(), NOW, &len);
    memset(p, 0, sizeof *p);
    return notify_sub_build("", doc, len, NOW, p);
}

#define EP "\"notification\":{\"endpoint\":{\"uri\":\"http://127.0.0.1:1/n\",\"timeout\":100}}"

static void test_valid_and_invalid(void **state)
{
    (void)state;
    static const struct { const char *body; bool ok; } cases[] = {
        {"{\"entities\":[{\"type\":\"Car\"}]," EP "}", true},
        {"{\"watchedAttributes\":[\"speed\"]," EP "}", true},
        {"{\"entities\":[{\"type\":\"Car\",\"idPattern\":\"urn:.*\"}],\"q\":\"speed%3E3\"," EP "}", true},
        {"{\"entities\":[{\"type\":\"Car\"}],\"timeInterval\":5," EP "}", true},
        {"{\"entities\":[{\"type\":\"Car\"}],\"notification\":{\"endpoint\":{\"uri\":\"mqtt://u:p@h:1884/a/b\","
         "\"notifierInfo\":[{\"key\":\"MQTT-QoS\",\"value\":\"2\"},{\"key\":\"MQTT-Version\",\"value\":\"mqtt3.1.1\"}]}}}", true},
        {"{" EP "}", false},                                                    /* neither entities nor watched */
        {"{\"entities\":[]," EP "}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"timeInterval\":5,\"throttling\":1," EP "}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"throttling\":0," EP "}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"expiresAt\":\"2001-01-01T00:00:00Z\"," EP "}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"q\":\"((\"," EP "}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"what\":1," EP "}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"notification\":{\"pick\":[\"a\"],\"omit\":[\"a\"],"
         "\"endpoint\":{\"uri\":\"http://x/\"}}}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"notification\":{\"endpoint\":{\"uri\":\"mqtt://h/\"}}}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"notification\":{\"endpoint\":{\"uri\":\"ftp://h/x\"}}}", false},
        {"{\"entities\":[{\"type\":\"Car\"}]}", false},
        /* q into linked entities (4.9): valid, with or without join; malformed: refused */
        {"{\"entities\":[{\"type\":\"Car\"}],\"q\":\"driver{Person:age}>18\"," EP "}", true},
        {"{\"entities\":[{\"type\":\"Car\"}],\"q\":\"driver.x{age}>18\"," EP "}", false},
        /* the egress policy on the endpoint's literal host (built-in: link-local, metadata names) */
        {"{\"entities\":[{\"type\":\"Car\"}],\"notification\":{\"endpoint\":{\"uri\":\"http://169.254.169.254/x\"}}}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"notification\":{\"endpoint\":{\"uri\":\"https://u@metadata.google.internal/\"}}}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"notification\":{\"endpoint\":{\"uri\":\"mqtt://[fe80::1]:1883/t\"}}}", false},
        {"{\"entities\":[{\"type\":\"Car\"}],\"notification\":{\"endpoint\":{\"uri\":\"http://example.org:8080/n\"}}}", true},
    };
    arena_t *a = arena_new(4096);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        problem_t     p;
        notify_sub_t *s = build(a, cases[i].body, &p);
        if (cases[i].ok) {
            if (!s) fail_msg("case %zu refused: %s", i, p.detail);
            notify_sub_unref(s);
        } else {
            if (s) fail_msg("case %zu accepted", i);
            assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
            assert_true(p.detail[0] != '\0');
        }
    }
    arena_free(a);
}

static void test_documents(void **state)
{
    (void)state;
    arena_t      *a = arena_new(4096);
    problem_t     p;
    notify_sub_t *s = build(a, "{\"entities\":[{\"type\":\"Car\"}],\"subscriptionName\":\"x\"," EP "}", &p);
    assert_non_null(s);
    assert_true(!strncmp(notify_sub_id(s), "urn:ngsi-ld:Subscription:", 25));
    size_t      len;
    const char *doc = notify_sub_doc(s, &len);
    assert_non_null(strstr(doc, "\"@context\""));
    char    err[64];
    json_t *patch = json_parse_copy(a, "{\"subscriptionName\":\"y\"}", 24, NULL, err, sizeof err);
    size_t  plen;
    char   *pd = notify_doc_patch(a, doc, len, patch, NOW + 1, &plen, &p);
    assert_non_null(pd);
    assert_non_null(strstr(pd, "\"subscriptionName\":\"y\""));
    assert_null(strstr(pd, "\"subscriptionName\":\"x\""));
    json_t *bad = json_parse_copy(a, "{\"id\":\"urn:other\"}", 18, NULL, err, sizeof err);
    assert_null(notify_doc_patch(a, doc, len, bad, NOW + 1, &plen, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    notify_sub_unref(s);
    arena_free(a);
}

static void create(store_t *st, arena_t *a, const char *text)
{
    char      err[128];
    problem_t p = {0};
    json_t   *body = json_parse_copy(a, text, strlen(text), NULL, err, sizeof err);
    assert_non_null(body);
    cr_entity_t *e = entity_parse(a, body, ld_core(), EP_CREATE, cr_now_us(), &p);
    assert_non_null(e);
    assert_true(store_create(st, "", e, &p));
}

static void test_matcher_counts_due_changes(void **state)
{
    (void)state;
    problem_t p = {0};
    cr_config.database = "corDB";
    cr_config.db_dir = NULL;
    store_t *st = store_open(&p);
    assert_non_null(st);
    assert_true(notify_start(st, &p));
    arena_t *a = arena_new(4096);

    notify_sub_t *byid = build(a, "{\"id\":\"urn:s:1\",\"entities\":[{\"id\":\"urn:c:1\",\"type\":\"Car\"}]," EP "}", &p);
    notify_sub_t *bytype = build(a, "{\"id\":\"urn:s:2\",\"entities\":[{\"type\":\"Car\"}],"
                                    "\"watchedAttributes\":[\"speed\"]," EP "}", &p);
    notify_sub_t *paused = build(a, "{\"id\":\"urn:s:3\",\"entities\":[{\"type\":\"Car\"}],\"isActive\":false," EP "}", &p);
    assert_non_null(byid);
    assert_non_null(bytype);
    assert_non_null(paused);
    assert_true(notify_add(byid, &p));
    assert_true(notify_add(bytype, &p));
    assert_true(notify_add(paused, &p));
    assert_false(notify_add(byid, &p));
    assert_int_equal(p.kind, PB_ALREADY_EXISTS);

    create(st, a, "{\"id\":\"urn:c:1\",\"type\":\"Car\",\"speed\":{\"type\":\"Property\",\"value\":1}}");  /* s1, s2 */
    create(st, a, "{\"id\":\"urn:c:2\",\"type\":\"Car\",\"brand\":{\"type\":\"Property\",\"value\":1}}");  /* none */
    create(st, a, "{\"id\":\"urn:t:1\",\"type\":\"Truck\",\"speed\":{\"type\":\"Property\",\"value\":1}}"); /* none */
    notify_stats_t ns;
    notify_get_stats(&ns);
    assert_int_equal(ns.due, 2);           /* counted before store_create returned */
    assert_int_equal(ns.subscriptions, 3);

    size_t         n, total;
    notify_sub_t **v = notify_list("", 1, 10, a, &n, &total);
    assert_int_equal(total, 3);
    assert_int_equal(n, 2);
    assert_string_equal(notify_sub_id(v[0]), "urn:s:2");
    for (size_t i = 0; i < n; i++) notify_sub_unref(v[i]);

    assert_true(notify_remove("", "urn:s:1", &p));
    assert_false(notify_remove("", "urn:s:1", &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_null(notify_find("", "urn:s:1"));
    notify_sub_unref(byid);
    notify_sub_unref(bytype);
    notify_sub_unref(paused);
    notify_stop();
    store_close(st);
    arena_free(a);
}

static int group_setup(void **state)
{
    char *argv[] = {"test_notify", "--notifierDrain", "100", NULL};
    (void)state;
    if (!cr_config_load(3, argv)) return -1;
    cr_log_open(NULL, LOG_ERROR);
    if (!ld_init()) return -1;
    ld_set_offline(true);
    model_init();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_and_invalid),
        cmocka_unit_test(test_documents),
        cmocka_unit_test(test_matcher_counts_due_changes),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
