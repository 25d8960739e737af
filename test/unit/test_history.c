/*
 * test_history.c - unit tests of attribute history (src/history/): the
 * durations of --historyRetention and aggrPeriodDuration, instance ids, the
 * change hook's translation (history_from_change through a real store), the
 * corDB backend's selection (timerel edges, lastN, the instance limit and
 * the answer's time window), bounds, upsert, aggregation, and the size of a
 * numeric instance.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "history/history.h"
#include "store/store.h"

#define T_V  "http://example.org/Vehicle"
#define SPEED "http://example.org/speed"

static int64_t sec(int s) { return (int64_t)1577836800 * 1000000 + (int64_t)s * 1000000; }  /* 2020-01-01 */

static int group_setup(void **state)
{
    char *argv[] = { "test_history", NULL };

    (void)state;
    if (!cr_config_load(1, argv))
        return -1;
    cr_log_open(NULL, LOG_ERROR);
    if (!ld_init())
        return -1;
    model_init();
    return 0;
}

static store_t *open_store(history_t **h, const char *max_inst, const char *retention)
{
    problem_t p = { 0 };
    cr_config.database              = "corDB";
    cr_config.db_dir                = NULL;
    cr_config.db_lock_prefer        = "reads";
    cr_config.history               = "corDB";
    cr_config.history_max_instances = atoi(max_inst);
    cr_config.history_retention     = retention;
    store_t *s = store_open(&p);
    assert_non_null(s);
    *h = history_open(s, &p);
    assert_non_null(*h);
    return s;
}

static void close_all(store_t *s, history_t *h)
{
    store_close(s);
    history_close(h);
}

/* one numeric instance of speed at second t */
static void instance(hist_instance_t *in, arena_t *a, double v, int t)
{
    memset(in, 0, sizeof *in);
    in->attr.name        = intern_cstr(SPEED);
    in->attr.kind        = ATTR_PROPERTY;
    in->attr.value       = json_new_number(a, v);
    in->attr.observed_at = sec(t);
    in->attr.created_at  = in->attr.modified_at = sec(1000 + t);
    in->deleted_at       = CR_NO_TIME;
}

static void append(history_t *h, arena_t *a, const char *id, const double *v, const int *t, size_t n, bool upsert)
{
    static const char *types[1];
    hist_instance_t   *in = arena_alloc(a, n * sizeof *in);
    problem_t          p = { 0 };
    types[0] = intern_cstr(T_V);
    for (size_t i = 0; i < n; i++)
        instance(&in[i], a, v[i], t[i]);
    hist_write_t w = { .id = id, .types = types, .n_types = 1, .at = sec(5000), .upsert = upsert,
                       .inst = in, .n_inst = n };
    assert_true(history_append(h, "", &w, 1, &p));
}

static hist_series_t *query(history_t *h, arena_t *a, hist_query_t *q, const char *id, hist_result_t *res)
{
    static const char *ids[1];
    static entity_filter_t f;
    problem_t p = { 0 };
    ids[0]  = id;
    f       = (entity_filter_t){ .ids = ids, .n_ids = 1 };
    q->f    = &f;
    q->limit = 10;
    assert_true(history_query(h, "", q, a, res, &p));
    if (!res->n || !res->items[0].n_series)
        return NULL;
    return &res->items[0].series[0];
}

static void test_durations(void **state)
{
    int64_t us;
    (void)state;
    assert_true(history_parse_duration("PT1H", &us));       assert_int_equal(us, INT64_C(3600000000));
    assert_true(history_parse_duration("P1DT30M", &us));    assert_int_equal(us, INT64_C(88200000000));
    assert_true(history_parse_duration("PT0S", &us));       assert_int_equal(us, 0);
    assert_true(history_parse_duration("P1W", &us));        assert_int_equal(us, INT64_C(604800000000));
    assert_true(history_parse_duration("PT1.5S", &us));     assert_int_equal(us, 1500000);
    assert_true(history_parse_duration("7d", &us));         assert_int_equal(us, INT64_C(604800000000));
    assert_true(history_parse_duration("90", &us));         assert_int_equal(us, 90000000);
    assert_false(history_parse_duration("P", &us));
    assert_false(history_parse_duration("PT", &us));
    assert_false(history_parse_duration("P1H", &us));       /* H needs T */
    assert_false(history_parse_duration("PT1D", &us));
    assert_false(history_parse_duration("PT1.5M2S", &us));  /* a fraction only last */
    assert_false(history_parse_duration("1 hour", &us));
    assert_false(history_parse_duration("-5", &us));
}

static void test_instance_ids(void **state)
{
    char buf[HIST_INSTANCE_ID_LEN + 1];
    (void)state;
    history_instance_id_render(0x2a, buf);
    assert_string_equal(buf, "urn:ngsi-ld:attribute:instance:000000000000002a");
    assert_int_equal(history_instance_id_parse(buf), 0x2a);
    assert_int_equal(history_instance_id_parse("urn:ngsi-ld:attribute:instance:00000000000000zz"), 0);
    assert_int_equal(history_instance_id_parse("urn:ngsi-ld:attribute:instance:2a"), 0);
    assert_int_equal(history_instance_id_parse("urn:x"), 0);
}

static void test_hook_records_changes(void **state)
{
    history_t *h;
    store_t   *s = open_store(&h, "0", "");
    arena_t   *a = arena_new(4096);
    problem_t  p = { 0 };
    (void)state;

    for (int i = 0; i < 3; i++) {
        cr_entity_t *d = arena_calloc(a, sizeof *d);
        const char **ty = arena_alloc(a, sizeof *ty);
        ty[0] = intern_cstr(T_V);
        d->id = "urn:ngsi-ld:Vehicle:h1";
        d->types = ty;
        d->n_types = 1;
        d->attrs = arena_calloc(a, sizeof *d->attrs);
        d->n_attrs = 1;
        d->attrs[0].name = intern_cstr(SPEED);
        d->attrs[0].kind = ATTR_PROPERTY;
        d->attrs[0].value = json_new_number(a, i * 10);
        d->attrs[0].observed_at = sec(i);
        d->created_at = d->modified_at = cr_now_us();
        if (i == 0)
            assert_true(store_create(s, NULL, d, &p));
        else {
            op_args_t   args = { 0 };
            op_result_t res  = { 0 };
            assert_true(store_modify(s, NULL, d->id, OP_APPEND_ATTRS, d, &args, &res, a, &p));
        }
    }
    assert_true(store_delete(s, NULL, "urn:ngsi-ld:Vehicle:h1", &p));
    hist_query_t  q = { 0 };
    hist_result_t res;
    hist_series_t *sr = query(h, a, &q, "urn:ngsi-ld:Vehicle:h1", &res);
    assert_non_null(sr);
    assert_int_equal(sr->n, 3);
    assert_int_equal(json_number(sr->inst[2].attr.value), 20);
    assert_true(res.items[0].deleted_at != CR_NO_TIME);
    q.timeprop = HIST_TP_DELETED_AT;
    sr = query(h, a, &q, "urn:ngsi-ld:Vehicle:h1", &res);
    assert_non_null(sr);
    assert_int_equal(sr->n, 1);
    assert_string_equal(sr->inst[0].attr.value->str, "urn:ngsi-ld:null");
    arena_free(a);
    close_all(s, h);
}

static void test_timerel_last_n_and_window(void **state)
{
    history_t *h;
    store_t   *s = open_store(&h, "0", "");
    arena_t   *a = arena_new(4096);
    (void)state;

    double v[6] = { 1, 2, 3, 4, 5, 6 };
    int    t[6] = { 10, 20, 30, 40, 50, 60 };
    append(h, a, "urn:x:1", v, t, 6, false);
    hist_query_t  q = { .timerel = HIST_TIMEREL_BEFORE, .time_at = sec(30) };
    hist_result_t res;
    assert_int_equal(query(h, a, &q, "urn:x:1", &res)->n, 2);            /* before: exclusive */
    q = (hist_query_t){ .timerel = HIST_TIMEREL_AFTER, .time_at = sec(30) };
    assert_int_equal(query(h, a, &q, "urn:x:1", &res)->n, 4);            /* after: inclusive */
    q = (hist_query_t){ .timerel = HIST_TIMEREL_BETWEEN, .time_at = sec(20), .end_time_at = sec(50) };
    assert_int_equal(query(h, a, &q, "urn:x:1", &res)->n, 3);            /* [start, end) */
    q = (hist_query_t){ .last_n = 2 };
    hist_series_t *sr = query(h, a, &q, "urn:x:1", &res);
    assert_int_equal(sr->n, 2);
    assert_int_equal(json_number(sr->inst[0].attr.value), 5);            /* still ascending */
    q = (hist_query_t){ .inst_limit = 4 };
    sr = query(h, a, &q, "urn:x:1", &res);
    assert_int_equal(sr->n, 4);
    assert_true(res.partial);
    assert_int_equal(res.range_first, sec(10));
    assert_int_equal(res.range_last, sec(40));
    q = (hist_query_t){ .inst_limit = 4, .last_n = 5 };                  /* backwards */
    sr = query(h, a, &q, "urn:x:1", &res);
    assert_int_equal(sr->n, 4);
    assert_int_equal(json_number(sr->inst[0].attr.value), 3);
    arena_free(a);
    close_all(s, h);
}

static void test_bounds_and_upsert(void **state)
{
    history_t *h;
    store_t   *s = open_store(&h, "3", "");
    arena_t   *a = arena_new(4096);
    (void)state;

    double v[5] = { 1, 2, 3, 4, 5 };
    int    t[5] = { 50, 10, 40, 20, 30 };                                 /* out of order */
    append(h, a, "urn:x:2", v, t, 5, false);
    hist_query_t   q = { 0 };
    hist_result_t  res;
    hist_series_t *sr = query(h, a, &q, "urn:x:2", &res);
    assert_int_equal(sr->n, 3);                                          /* the newest 3 by time */
    assert_int_equal(sr->inst[0].attr.observed_at, sec(30));
    assert_int_equal(sr->inst[2].attr.observed_at, sec(50));
    uint64_t iid = sr->inst[1].instance_id;
    double   nv[1] = { 44 };
    int      nt[1] = { 40 };
    append(h, a, "urn:x:2", nv, nt, 1, true);                           /* upsert at 40 */
    sr = query(h, a, &q, "urn:x:2", &res);
    assert_int_equal(sr->n, 3);
    assert_int_equal(json_number(sr->inst[1].attr.value), 44);
    assert_int_equal(sr->inst[1].instance_id, iid);
    uint64_t n, series, bytes, dropped;
    history_stats(h, &n, &series, &bytes, &dropped);
    assert_int_equal(n, 3);
    assert_int_equal(dropped, 2);
    arena_free(a);
    close_all(s, h);
}

static void test_retention(void **state)
{
    history_t *h;
    store_t   *s = open_store(&h, "0", "PT100S");
    arena_t   *a = arena_new(4096);
    (void)state;

    double v[3] = { 1, 2, 3 };
    int    t[3] = { 4000, 4950, 4990 };           /* the write is at second 5000 */
    append(h, a, "urn:x:3", v, t, 3, false);
    hist_query_t   q = { 0 };
    hist_result_t  res;
    assert_int_equal(query(h, a, &q, "urn:x:3", &res)->n, 2);
    arena_free(a);
    close_all(s, h);
}

static void test_aggregation(void **state)
{
    history_t *h;
    store_t   *s = open_store(&h, "0", "");
    arena_t   *a = arena_new(4096);
    problem_t  p = { 0 };
    (void)state;

    double v[4] = { 1, 3, 10, 10 };
    int    t[4] = { 0, 1800, 3600, 3700 };
    append(h, a, "urn:x:4", v, t, 4, false);
    static const char *ids[1] = { "urn:x:4" };
    entity_filter_t f = { .ids = ids, .n_ids = 1 };
    hist_query_t    q = { .f = &f, .limit = 1 };
    hist_result_t   res;
    assert_true(history_aggregate(h, "", &q, HIST_AGGR_AVG | HIST_AGGR_TOTAL_COUNT | HIST_AGGR_DISTINCT_COUNT,
                                  INT64_C(3600000000), a, &res, &p));
    hist_series_t *sr = &res.items[0].series[0];
    assert_int_equal(sr->n_buckets, 2);
    assert_int_equal(sr->buckets[0].start, sec(0));
    assert_int_equal(sr->buckets[0].end, sec(3600));
    assert_true(json_number(sr->buckets[0].value[3]) == 2.0);
    assert_true(json_number(sr->buckets[1].value[3]) == 10.0);
    assert_int_equal(json_number(sr->buckets[1].value[0]), 2);
    assert_int_equal(json_number(sr->buckets[1].value[1]), 1);
    arena_free(a);
    close_all(s, h);
}

/* The memory of a numeric instance with observedAt (issue 14: at most 48 bytes). */
static void test_bytes_per_numeric_instance(void **state)
{
    history_t *h;
    store_t   *s = open_store(&h, "0", "");
    arena_t   *a = arena_new(1 << 20);
    (void)state;

    enum { N = 100000 };
    double *v = arena_alloc(a, N * sizeof *v);
    int    *t = arena_alloc(a, N * sizeof *t);
    for (int i = 0; i < N; i++) {
        v[i] = i * 0.5;
        t[i] = i;
    }
    append(h, a, "urn:x:5", v, t, N, false);
    uint64_t n, series, bytes, dropped;
    history_stats(h, &n, &series, &bytes, &dropped);
    assert_int_equal(n, N);
    double per = (double)bytes / N;
    print_message("history: %.1f bytes per numeric instance (%llu bytes for %d)\n", per,
                  (unsigned long long)bytes, N);
    assert_true(per <= 48.0 * 1.4);               /* a ring's doubling headroom included */
    arena_free(a);
    close_all(s, h);
}

/* History stays bounded under a 1,000,000-write stream (issue 14). */
static void test_bounded_under_a_million_writes(void **state)
{
    history_t *h;
    store_t   *s = open_store(&h, "100", "PT1H");
    arena_t   *a = arena_new(1 << 16);
    (void)state;

    uint64_t n, series, bytes, dropped, bytes_at_10k = 0;
    for (int i = 0; i < 1000000; i++) {
        double v = i;
        int    t = i;
        char   id[32];
        snprintf(id, sizeof id, "urn:x:m%d", i % 10);
        append(h, a, id, &v, &t, 1, false);
        if (i % 4096 == 0)
            arena_reset(a);
        if (i == 10000) {
            history_stats(h, &n, &series, &bytes, &dropped);
            bytes_at_10k = bytes;
        }
    }
    history_stats(h, &n, &series, &bytes, &dropped);
    assert_int_equal(series, 10);
    assert_true(n <= 1000);
    assert_int_equal(dropped, 1000000 - n);
    assert_true(bytes == bytes_at_10k);          /* not a byte more after the rings filled */
    arena_free(a);
    close_all(s, h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_instance_ids),
        cmocka_unit_test(test_hook_records_changes),
        cmocka_unit_test(test_timerel_last_n_and_window),
        cmocka_unit_test(test_bounds_and_upsert),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_aggregation),
        cmocka_unit_test(test_bytes_per_numeric_instance),
        cmocka_unit_test(test_bounded_under_a_million_writes),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
