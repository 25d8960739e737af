/*
 * test_ops.c - unit tests of the operations layer (ops.h) without HTTP:
 * each NGSI-LD operation called as a function of a parsed request against a
 * corDB store in RAM, with JSON bodies and the core @context. Covers the
 * entity operations (create, retrieve with its type/attrs conditions, merge,
 * replace, delete), the attribute operations (UpdateResult of append,
 * partial update, replace, delete, reserved names), the ?type= precondition,
 * the batch operations (per-entity failures in body order, error records
 * only for failures, whole-request failures that write nothing, upsert's
 * created list), query pages (next page, count, offset, several
 * selectors, --maxLimit), purge (all, drop, keep), discovery, linked entity
 * retrieval (ops_join_fetch), and the one ProblemDetails rendering
 * (jw_problem).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ops/ops.h"

#define NS "https://uri.etsi.org/ngsi-ld/default-context/"

static store_t *S;
static arena_t *A;

static int setup(void **state)
{
    problem_t p = {0};
    (void)state;
    cr_config.database = "corDB";
    cr_config.db_dir = NULL;
    cr_config.db_lock_prefer = "reads";
    S = store_open(&p);
    A = arena_new(1 << 16);
    return S && A ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    store_close(S);
    arena_free(A);
    return 0;
}

static ops_req_t req(void)
{
    return (ops_req_t){.store = S, .tenant = NULL, .ctx = ld_core(), .arena = A};
}

/* A JSON body parsed in the test arena (printf-style text). */
static json_t *J(const char *fmt, ...)
{
    char          err[160];
    json_limits_t lim = {.max_depth = 64, .max_size = 1 << 20};
    char          buf[4096];
    va_list       ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *text = arena_strdup(A, buf);
    json_t *j = json_parse(A, text, strlen(text), &lim, err, sizeof err);
    if (!j) fail_msg("bad test JSON: %s: %s", err, text);
    return j;
}

static void create(const char *id, const char *type, int speed)
{
    ops_req_t   rq = req();
    problem_t   p = {0};
    const char *got;
    assert_true(ops_entity_create(&rq, J("{\"id\":\"%s\",\"type\":\"%s\",\"speed\":{\"type\":\"Property\",\"value\":%d}}",
                                         id, type, speed), &got, &p));
    assert_string_equal(got, id);
}

static int64_t speed_of(const char *id)
{
    ops_req_t    rq = req();
    problem_t    p = {0};
    cr_entity_t *e = ops_entity_retrieve(&rq, id, &(ops_retrieve_t){0}, &p);
    assert_non_null(e);
    const cr_attr_t *at = entity_attr(e, intern_cstr(NS "speed"), NULL);
    int64_t v = at && at->value && at->value->type == JSON_NUMBER ? at->value->i : INT64_MIN;
    entity_unref(e);
    return v;
}

static bool exists(const char *id)
{
    ops_req_t    rq = req();
    problem_t    p = {0};
    cr_entity_t *e = ops_entity_retrieve(&rq, id, &(ops_retrieve_t){0}, &p);
    if (e) entity_unref(e);
    return e != NULL;
}

/* ------------------------------------------------------------- entities */

static void test_entity_lifecycle(void **state)
{
    ops_req_t   rq = req();
    problem_t   p = {0};
    const char *id;
    (void)state;

    create("urn:t:1", "Vehicle", 10);
    assert_false(ops_entity_create(&rq, J("{\"id\":\"urn:t:1\",\"type\":\"Vehicle\"}"), &id, &p));
    assert_int_equal(p.kind, PB_ALREADY_EXISTS);
    assert_false(ops_entity_create(&rq, J("{\"id\":\"not a uri\",\"type\":\"Vehicle\"}"), &id, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);

    /* retrieve: the type selection and the attrs must match */
    const char  *speed = intern_cstr(NS "speed"), *other = intern_cstr(NS "other");
    cr_entity_t *e = ops_entity_retrieve(&rq, "urn:t:1", &(ops_retrieve_t){.type = "Vehicle|Car"}, &p);
    assert_non_null(e);
    entity_unref(e);
    assert_null(ops_entity_retrieve(&rq, "urn:t:1", &(ops_retrieve_t){.type = "Car"}, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    e = ops_entity_retrieve(&rq, "urn:t:1", &(ops_retrieve_t){.attrs = (const char *[]){other, speed}, .n_attrs = 2}, &p);
    assert_non_null(e);
    entity_unref(e);
    assert_null(ops_entity_retrieve(&rq, "urn:t:1", &(ops_retrieve_t){.attrs = &other, .n_attrs = 1}, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_null(ops_entity_retrieve(&rq, "urn:t:none", &(ops_retrieve_t){0}, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);

    /* merge: keyValues keeps the attribute's type; the body id must agree */
    assert_true(ops_entity_merge(&rq, "urn:t:1", J("{\"speed\":42}"), &(ops_merge_t){.key_values = true}, &p));
    assert_int_equal(speed_of("urn:t:1"), 42);
    assert_false(ops_entity_merge(&rq, "urn:t:1", J("{\"id\":\"urn:t:2\",\"speed\":1}"), &(ops_merge_t){0}, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_int_equal(speed_of("urn:t:1"), 42);

    /* replace needs the type */
    assert_false(ops_entity_replace(&rq, "urn:t:1", J("{\"speed\":{\"type\":\"Property\",\"value\":1}}"), NULL, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_true(ops_entity_replace(&rq, "urn:t:1", J("{\"type\":\"Car\",\"speed\":{\"type\":\"Property\",\"value\":7}}"), NULL, &p));
    assert_int_equal(speed_of("urn:t:1"), 7);

    /* the ?type= precondition */
    /* the ?type= precondition, checked by the store in the write's atomic step */
    assert_false(ops_entity_replace(&rq, "urn:t:1", J("{\"type\":\"Car\",\"speed\":{\"type\":\"Property\",\"value\":8}}"),
                                    "Vehicle", &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_int_equal(speed_of("urn:t:1"), 7);
    assert_false(ops_entity_merge(&rq, "urn:t:1", J("{\"speed\":9}"), &(ops_merge_t){.key_values = true, .type = "Vehicle"}, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_false(ops_attrs_update(&rq, "urn:t:1", J("{\"speed\":{\"type\":\"Property\",\"value\":9}}"), "Vehicle", &(op_result_t){0}, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_int_equal(speed_of("urn:t:1"), 7);
    assert_true(ops_entity_merge(&rq, "urn:t:1", J("{\"speed\":9}"), &(ops_merge_t){.key_values = true, .type = "Car|Vehicle"}, &p));
    assert_int_equal(speed_of("urn:t:1"), 9);
    assert_false(ops_entity_delete(&rq, "urn:t:1", "Vehicle", &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_int_equal(speed_of("urn:t:1"), 9);

    assert_true(ops_entity_delete(&rq, "urn:t:1", NULL, &p));
    assert_false(ops_entity_delete(&rq, "urn:t:1", NULL, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_false(ops_entity_delete(&rq, "bad id", NULL, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);

    /* a tenant never written */
    ops_req_t other_tenant = rq;
    other_tenant.tenant = "nobody";
    assert_null(ops_entity_retrieve(&other_tenant, "urn:t:1", &(ops_retrieve_t){0}, &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);
}

/* ------------------------------------------------------------- attributes */

static void test_attributes(void **state)
{
    ops_req_t   rq = req();
    problem_t   p = {0};
    op_result_t res = {0};
    (void)state;

    create("urn:t:a", "Vehicle", 1);
    /* append with noOverwrite: speed is not updated, colour is */
    assert_true(ops_attrs_append(&rq, "urn:t:a",
                                 J("{\"speed\":{\"type\":\"Property\",\"value\":5},"
                                   "\"colour\":{\"type\":\"Property\",\"value\":\"red\"}}"), true, NULL, &res, &p));
    assert_int_equal(res.n_not_updated, 1);
    assert_int_equal(res.n_updated, 1);
    assert_int_equal(speed_of("urn:t:a"), 1);
    assert_false(ops_attrs_append(&rq, "urn:t:a", J("{}"), false, NULL, &res, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);

    memset(&res, 0, sizeof res);
    assert_true(ops_attrs_update(&rq, "urn:t:a", J("{\"speed\":{\"type\":\"Property\",\"value\":6}}"), NULL, &res, &p));
    assert_int_equal(res.n_not_updated, 0);
    assert_int_equal(speed_of("urn:t:a"), 6);

    assert_true(ops_attr_patch(&rq, "urn:t:a", "speed", J("{\"value\":8}"), NULL, &p));
    assert_int_equal(speed_of("urn:t:a"), 8);
    assert_true(ops_attr_replace(&rq, "urn:t:a", "speed", J("{\"type\":\"Property\",\"value\":9,\"@context\":[]}"), NULL, &p));
    assert_int_equal(speed_of("urn:t:a"), 9);
    assert_false(ops_attr_patch(&rq, "urn:t:a", "type", J("{\"value\":8}"), NULL, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_false(ops_attr_patch(&rq, "urn:t:a", "nothere", J("{\"value\":8}"), NULL, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);

    assert_false(ops_attr_delete(&rq, "urn:t:a", "speed", "not a uri", false, NULL, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_true(ops_attr_delete(&rq, "urn:t:a", "speed", NULL, false, NULL, &p));
    assert_int_equal(speed_of("urn:t:a"), INT64_MIN);
    assert_false(ops_attr_delete(&rq, "urn:t:a", "speed", NULL, false, NULL, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_true(ops_entity_delete(&rq, "urn:t:a", NULL, &p));
}

/* ------------------------------------------------------------- batch */

/* Members of a batch with the core context; member i gets ctx NULL and the
 * problem `ctx_fail` when bad_ctx == i. */
static ops_member_t *members(const json_t *body, int bad_ctx, const problem_t *ctx_fail)
{
    ops_member_t *m = arena_calloc(A, (body->len + 1) * sizeof *m);
    int           i = 0;
    json_foreach(e, body) {
        m[i].body = e;
        m[i].ctx = i == bad_ctx ? NULL : ld_core();
        m[i].ctx_problem = i == bad_ctx ? ctx_fail : NULL;
        i++;
    }
    return m;
}

static void test_batch(void **state)
{
    ops_req_t          rq = req();
    problem_t          p = {0}, ctxp = {0};
    ops_batch_result_t res;
    (void)state;

    problem_set(&ctxp, PB_LD_CONTEXT_NOT_AVAILABLE, "no such context");
    json_t *body = J("[{\"id\":\"urn:b:1\",\"type\":\"T\"}, 7, {\"id\":\"urn:b:2\",\"type\":\"T\"},"
                     " {\"type\":\"T\"}, {\"id\":\"urn:b:3\",\"type\":\"T\"}, {\"id\":\"urn:b:1\",\"type\":\"T\"}]");
    assert_true(ops_batch_write(&rq, OPS_BATCH_CREATE, members(body, 2, &ctxp), body->len, &(ops_batch_opts_t){0},
                                &res, &p));
    assert_int_equal(res.n_ok, 2);
    assert_string_equal(res.ok[0], "urn:b:1");
    assert_string_equal(res.ok[1], "urn:b:3");
    assert_int_equal(res.n_created, 2);
    assert_int_equal(res.n_errors, 4);
    const ops_batch_error_t *e = res.errors;
    assert_null(e->id);                                       /* 7: not an object */
    assert_int_equal(e->problem.kind, PB_BAD_REQUEST_DATA);
    e = e->next;
    assert_string_equal(e->id, "urn:b:2");                    /* its @context failed */
    assert_int_equal(e->problem.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    e = e->next;
    assert_null(e->id);                                       /* no id */
    e = e->next;
    assert_string_equal(e->id, "urn:b:1");                    /* taken */
    assert_int_equal(e->problem.kind, PB_ALREADY_EXISTS);
    assert_null(e->next);
    assert_ptr_equal(e, res.last);
    assert_false(exists("urn:b:2"));

    /* a whole batch of successes allocates no error record */
    body = J("[{\"id\":\"urn:b:4\",\"type\":\"T\"}]");
    assert_true(ops_batch_write(&rq, OPS_BATCH_CREATE, members(body, -1, NULL), 1, &(ops_batch_opts_t){0}, &res, &p));
    assert_int_equal(res.n_errors, 0);
    assert_null(res.errors);

    /* empty and null members: the request fails as a whole, nothing is written */
    assert_false(ops_batch_write(&rq, OPS_BATCH_CREATE, NULL, 0, &(ops_batch_opts_t){0}, &res, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    body = J("[{\"id\":\"urn:b:5\",\"type\":\"T\"}, null]");
    assert_false(ops_batch_write(&rq, OPS_BATCH_CREATE, members(body, -1, NULL), 2, &(ops_batch_opts_t){0}, &res, &p));
    assert_false(exists("urn:b:5"));

    /* upsert: the created ones are listed apart */
    body = J("[{\"id\":\"urn:b:1\",\"type\":\"T\",\"speed\":{\"type\":\"Property\",\"value\":3}},"
             " {\"id\":\"urn:b:6\",\"type\":\"T\"}]");
    assert_true(ops_batch_write(&rq, OPS_BATCH_UPSERT, members(body, -1, NULL), 2, &(ops_batch_opts_t){.replace = true},
                                &res, &p));
    assert_int_equal(res.n_ok, 2);
    assert_int_equal(res.n_created, 1);
    assert_string_equal(res.created[0], "urn:b:6");
    assert_int_equal(speed_of("urn:b:1"), 3);

    /* update with noOverwrite: an attribute not updated fails the entity */
    body = J("[{\"id\":\"urn:b:1\",\"speed\":{\"type\":\"Property\",\"value\":4}}, {\"id\":\"urn:b:none\",\"x\":1}]");
    assert_true(ops_batch_write(&rq, OPS_BATCH_UPDATE, members(body, -1, NULL), 2,
                                &(ops_batch_opts_t){.no_overwrite = true}, &res, &p));
    assert_int_equal(res.n_ok, 0);
    assert_int_equal(res.n_errors, 2);
    assert_int_equal(res.errors->problem.kind, PB_BAD_REQUEST_DATA);
    assert_int_equal(res.errors->next->problem.kind, PB_RESOURCE_NOT_FOUND);
    assert_int_equal(speed_of("urn:b:1"), 3);

    /* merge */
    body = J("[{\"id\":\"urn:b:1\",\"speed\":{\"type\":\"Property\",\"value\":11}}]");
    assert_true(ops_batch_write(&rq, OPS_BATCH_MERGE, members(body, -1, NULL), 1, &(ops_batch_opts_t){0}, &res, &p));
    assert_int_equal(res.n_ok, 1);
    assert_int_equal(speed_of("urn:b:1"), 11);

    /* delete: strings that are URIs of existing entities */
    assert_true(ops_batch_delete(&rq, J("[\"urn:b:1\", 3, \"bad id\", \"urn:b:none\", \"urn:b:3\"]"), &res, &p));
    assert_int_equal(res.n_ok, 2);
    assert_int_equal(res.n_errors, 3);
    assert_null(res.errors->id);
    assert_string_equal(res.errors->next->id, "bad id");
    assert_int_equal(res.errors->next->next->problem.kind, PB_RESOURCE_NOT_FOUND);
    assert_false(exists("urn:b:1"));
    assert_false(ops_batch_delete(&rq, J("[]"), &res, &p));
    assert_false(ops_batch_delete(&rq, J("[\"urn:b:4\", null]"), &res, &p));
    assert_true(exists("urn:b:4"));
    assert_true(ops_batch_delete(&rq, J("[\"urn:b:4\", \"urn:b:6\"]"), &res, &p));
    assert_int_equal(res.n_errors, 0);
}

/* Section 5 of issue 10: a batch allocates an error record only for an
 * entity that fails (it used to reserve one ProblemDetails per entity). */
/* A batch hands its changes to the hooks as ONE group (store_batch), and a
 * batch above --maxBatchSize is refused whole. */
typedef struct groups {
    int    calls;
    size_t last_n;
    uint64_t first_seq;
} groups_t;

static void group_hook(void *ud, const store_change_t *g, size_t n)
{
    groups_t *gs = ud;
    gs->calls++;
    gs->last_n = n;
    gs->first_seq = g[0].seq;
}

static void test_batch_one_group(void **state)
{
    problem_t          p = {0};
    ops_batch_result_t res;
    groups_t           gs = {0};
    (void)state;

    store_t *s = store_open(&p);
    assert_non_null(s);
    store_add_hook(s, group_hook, &gs);
    ops_req_t rq = {.store = s, .tenant = "grp", .ctx = ld_core(), .arena = A};
    json_t   *body = J("[{\"id\":\"urn:g:1\",\"type\":\"T\"}, 7, {\"id\":\"urn:g:2\",\"type\":\"T\"},"
                       " {\"id\":\"urn:g:3\",\"type\":\"T\"}]");
    assert_true(ops_batch_write(&rq, OPS_BATCH_CREATE, members(body, -1, NULL), body->len, &(ops_batch_opts_t){0},
                                &res, &p));
    assert_int_equal(res.n_ok, 3);
    assert_int_equal(gs.calls, 1);                /* three creates, one group */
    assert_int_equal(gs.last_n, 3);
    assert_int_equal(gs.first_seq, 1);
    assert_true(ops_batch_delete(&rq, J("[\"urn:g:1\", \"urn:g:none\", \"urn:g:3\"]"), &res, &p));
    assert_int_equal(res.n_ok, 2);
    assert_int_equal(res.n_errors, 1);
    assert_int_equal(gs.calls, 2);
    assert_int_equal(gs.last_n, 2);
    assert_int_equal(gs.first_seq, 4);

    int max = cr_config.max_batch_size;
    cr_config.max_batch_size = 2;
    assert_false(ops_batch_write(&rq, OPS_BATCH_UPSERT, members(body, -1, NULL), body->len,
                                 &(ops_batch_opts_t){.replace = true}, &res, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_false(ops_batch_delete(&rq, J("[\"urn:g:2\", \"urn:g:4\", \"urn:g:5\"]"), &res, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_int_equal(gs.calls, 2);                /* nothing written */
    cr_config.max_batch_size = max;
    store_close(s);
}

static void test_batch_error_records(void **state)
{
    ops_req_t          rq = req();
    problem_t          p = {0};
    ops_batch_result_t res;
    enum { N = 200 };
    (void)state;

    sbuf_t ids;
    sb_init(&ids, A, 64 * N);
    sb_addc(&ids, '[');
    for (int i = 0; i < N; i++) {
        create(arena_printf(A, "urn:m:%d", i), "M", i);
        sb_printf(&ids, "%s\"urn:m:%d\"", i ? "," : "", i);
    }
    sb_addc(&ids, ']');
    json_t *body = J("%s", ids.p);
    size_t  before = arena_used(A);
    assert_true(ops_batch_delete(&rq, body, &res, &p));
    size_t  used = arena_used(A) - before;
    assert_int_equal(res.n_ok, N);
    assert_null(res.errors);
    print_message("batch delete of %d entities: %zu arena bytes (a problem_t is %zu)\n", N, used, sizeof(problem_t));
    /* the result's ids, and the one store_batch of the whole batch: its items,
     * the group of changes it commits and corDB's pointer per item (no
     * ProblemDetails per entity) */
    assert_true(used <= N * (2 * sizeof(char *) + sizeof(store_batch_item_t) + sizeof(store_change_t)) + 256);

    /* one failure: one record more */
    before = arena_used(A);
    assert_true(ops_batch_delete(&rq, J("[\"urn:m:none\"]"), &res, &p));
    assert_int_equal(res.n_errors, 1);
    assert_true(arena_used(A) - before >= sizeof(ops_batch_error_t));
}

/* ------------------------------------------------------------- query */

static ops_query_t query_of(const char *type, size_t limit, size_t offset, bool count)
{
    problem_t   p = {0};
    ops_query_t qy = {.limit = limit, .offset = offset, .count = count};
    if (type) assert_non_null(qy.f.types = typesel_parse(A, type, ld_core(), &p));
    return qy;
}

static void test_query_and_purge(void **state)
{
    ops_req_t  rq = req();
    problem_t  p = {0};
    ops_page_t pg;
    size_t     deleted;
    (void)state;

    for (int i = 0; i < 5; i++) create(arena_printf(A, "urn:q:%d", i), i % 2 ? "Odd" : "Even", i);

    ops_query_t qy = query_of("Even", 2, 0, true);
    assert_true(ops_query(&rq, &qy, &pg, &p));
    assert_int_equal(pg.n, 2);
    assert_true(pg.more);
    assert_int_equal(pg.count, 3);
    assert_string_equal(pg.items[0]->id, "urn:q:0");
    assert_string_equal(pg.items[1]->id, "urn:q:2");
    ops_page_release(&pg);

    qy = query_of("Even", 2, 2, false);
    assert_true(ops_query(&rq, &qy, &pg, &p));
    assert_int_equal(pg.n, 1);
    assert_false(pg.more);
    assert_string_equal(pg.items[0]->id, "urn:q:4");
    ops_page_release(&pg);

    /* q on top of the type */
    qy = query_of("Even", 20, 0, false);
    assert_non_null(qy.f.q = q_parse(A, "speed>1", ld_core(), &p));
    assert_true(ops_query(&rq, &qy, &pg, &p));
    assert_int_equal(pg.n, 2);
    ops_page_release(&pg);

    /* several selectors: either of them, in creation order */
    qy = query_of(NULL, 20, 0, true);
    qy.sel = arena_calloc(A, 2 * sizeof *qy.sel);
    qy.nsel = 2;
    qy.sel[0].id = "urn:q:3";
    assert_non_null(qy.sel[0].types = typesel_parse(A, "Odd", ld_core(), &p));
    assert_non_null(qy.sel[1].types = typesel_parse(A, "Even", ld_core(), &p));
    qy.sel[1].id = "urn:q:0";
    assert_true(ops_query(&rq, &qy, &pg, &p));
    assert_int_equal(pg.n, 2);
    assert_int_equal(pg.count, 2);
    assert_string_equal(pg.items[0]->id, "urn:q:0");
    assert_string_equal(pg.items[1]->id, "urn:q:3");
    ops_page_release(&pg);
    /* selectors by type only (the type index), paginated: the count stays exact */
    qy.sel[0].id = qy.sel[1].id = NULL;
    qy.limit = 1;
    qy.offset = 1;
    assert_true(ops_query(&rq, &qy, &pg, &p));
    assert_int_equal(pg.n, 1);
    assert_true(pg.more);
    assert_int_equal(pg.count, 5);
    assert_string_equal(pg.items[0]->id, "urn:q:1");
    ops_page_release(&pg);
    qy.limit = 20;
    qy.offset = 0;
    qy.sel[0].id = "urn:q:3";
    qy.sel[1].id = "urn:q:0";
    qy.nsel = 1;   /* one selector */
    assert_true(ops_query(&rq, &qy, &pg, &p));
    assert_int_equal(pg.n, 1);
    assert_string_equal(pg.items[0]->id, "urn:q:3");
    ops_page_release(&pg);

    /* page limits */
    qy = query_of("Even", (size_t)cr_config.max_limit + 1, 0, false);
    assert_false(ops_query(&rq, &qy, &pg, &p));
    assert_int_equal(p.kind, PB_TOO_MANY_RESULTS);
    qy = query_of("Even", 0, 0, false);
    assert_false(ops_query_check(&qy, &p));
    qy.count = true;
    assert_true(ops_query(&rq, &qy, &pg, &p));
    assert_int_equal(pg.n, 0);
    assert_int_equal(pg.count, 3);

    /* purge: drop, keep, then the entities */
    qy = query_of("Odd", 20, 0, false);
    const char *speed = intern_cstr(NS "speed");
    assert_true(ops_attrs_append(&rq, "urn:q:1", J("{\"colour\":{\"type\":\"Property\",\"value\":\"red\"}}"), false,
                                 NULL, &(op_result_t){0}, &p));
    assert_true(ops_purge(&rq, &qy.f, &speed, 1, true, &deleted, &p));     /* keep speed: colour goes */
    assert_int_equal(deleted, 0);
    cr_entity_t *e = ops_entity_retrieve(&rq, "urn:q:1", &(ops_retrieve_t){0}, &p);
    assert_int_equal(e->n_attrs, 1);
    entity_unref(e);
    assert_true(ops_purge(&rq, &qy.f, &speed, 1, false, &deleted, &p));    /* drop speed */
    assert_int_equal(speed_of("urn:q:3"), INT64_MIN);
    assert_true(ops_purge(&rq, &qy.f, NULL, 0, false, &deleted, &p));
    assert_int_equal(deleted, 2);
    assert_false(exists("urn:q:1"));
    assert_true(exists("urn:q:0"));
}

/* ------------------------------------------------------------- discovery */

static void test_discovery(void **state)
{
    ops_req_t       rq = req();
    problem_t       p = {0};
    ops_discovery_t d;
    (void)state;

    /* urn:q:0, 2, 4 (Even, speed) are left from the previous test */
    create("urn:d:1", "Other", 1);
    const char *even = intern_cstr(NS "Even"), *speed = intern_cstr(NS "speed");
    /* the lists: from the indexes */
    assert_true(ops_discover(&rq, true, NULL, false, &d, &p));
    assert_int_equal(d.types.n, 2);
    assert_int_equal(d.attrs.n, 0);
    assert_ptr_equal(ops_names_get(&d.types, even)->name, even);
    assert_int_equal(d.types.n, 2);
    assert_true(ops_discover(&rq, false, NULL, false, &d, &p));
    assert_int_equal(d.attrs.n, 1);
    assert_ptr_equal(d.attrs.v[0].name, speed);
    /* details: a walk */
    assert_true(ops_discover(&rq, true, NULL, true, &d, &p));
    assert_int_equal(d.types.n, 2);
    assert_ptr_equal(d.types.v[0].name, even);
    assert_int_equal(d.types.v[0].count, 3);
    assert_int_equal(d.attrs.n, 1);
    assert_int_equal(d.attrs.v[0].count, 4);
    assert_int_equal(d.attrs.v[0].n_rel, 2);
    assert_true(d.attrs.v[0].kinds & (1u << ATTR_PROPERTY));
    /* one attribute: the entities that have it */
    assert_true(ops_discover(&rq, false, "speed", false, &d, &p));
    assert_int_equal(d.attrs.n, 1);
    assert_int_equal(d.attrs.v[0].count, 4);
    assert_int_equal(d.attrs.v[0].n_rel, 2);

    assert_true(ops_discover(&rq, true, "Even", false, &d, &p));
    assert_int_equal(d.types.n, 1);
    assert_int_equal(d.types.v[0].n_rel, 1);
    assert_ptr_equal(d.types.v[0].rel[0], speed);
    assert_ptr_equal(ops_names_get(&d.attrs, speed)->name, speed);

    assert_false(ops_discover(&rq, true, "Nope", false, &d, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_false(ops_discover(&rq, false, "nope", false, &d, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    ops_req_t none = rq;
    none.tenant = "nobody";
    assert_false(ops_discover(&none, true, NULL, false, &d, &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);

    store_stats_t st;
    ops_stats(S, &st);
    assert_int_equal(st.entities, 4);
}

/* ------------------------------------------------------------- problems */

/* Linked entity retrieval (4.5.23): breadth first, each target once, one
 * store query per level, missing targets and containedBy skipped, cycles
 * ended, the projection of each entity by the path that first reached it. */
static void mk_linked(const char *id, const char *links)
{
    ops_req_t   rq = req();
    problem_t   p = {0};
    const char *got;
    assert_true(ops_entity_create(&rq, J("{\"id\":\"%s\",\"type\":\"J\",\"to\":{\"type\":\"Relationship\","
                                         "\"object\":%s}}", id, links), &got, &p));
}

static void test_join(void **state)
{
    (void)state;
    ops_req_t     rq = req();
    problem_t     p = {0};
    store_stats_t s0, s1;
    ops_linked_t  l;

    mk_linked("urn:J:root", "[\"urn:J:a\",\"urn:J:b\",\"urn:J:missing\"]");
    mk_linked("urn:J:a", "\"urn:J:c\"");
    mk_linked("urn:J:b", "[\"urn:J:c\",\"urn:J:root\"]");
    mk_linked("urn:J:c", "\"urn:J:a\"");
    cr_entity_t *root = ops_entity_retrieve(&rq, "urn:J:root", &(ops_retrieve_t){0}, &p);
    assert_non_null(root);

    store_get_stats(S, &s0);
    ops_join_t j = {.level = 5};
    assert_true(ops_join_fetch(&rq, &root, 1, &j, &l, &p));
    store_get_stats(S, &s1);
    /* levels: {a, b, missing}, {c}, then nothing new: two store queries */
    assert_int_equal(s1.queries - s0.queries, 2);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.items[0]->id, "urn:J:a");
    assert_string_equal(l.items[1]->id, "urn:J:b");
    assert_string_equal(l.items[2]->id, "urn:J:c");
    assert_ptr_equal(ops_linked_find(&l, "urn:J:root"), root);
    assert_ptr_equal(ops_linked_find(&l, "urn:J:c"), l.items[2]);
    assert_null(ops_linked_find(&l, "urn:J:missing"));
    assert_null(ops_linked_find(&l, "urn:J:other"));
    ops_linked_release(&l);

    /* joinLevel 1; containedBy b: only a */
    const char *seen[] = {"urn:J:b"};
    j = (ops_join_t){.level = 1, .contained_by = seen, .n_contained_by = 1};
    assert_true(ops_join_fetch(&rq, &root, 1, &j, &l, &p));
    assert_int_equal(l.n, 1);
    assert_string_equal(l.items[0]->id, "urn:J:a");
    assert_null(ops_linked_find(&l, "urn:J:b"));
    ops_linked_release(&l);

    /* flat follows only what the projection keeps: omit=to leaves nothing to follow */
    projection_t *om = projection_parse(A, "to", ld_core(), true, &p);
    assert_non_null(om);
    j = (ops_join_t){.flat = true, .level = 3, .omit = om};
    assert_true(ops_join_fetch(&rq, &root, 1, &j, &l, &p));
    assert_int_equal(l.n, 0);
    ops_linked_release(&l);

    /* pick to{to}: the linked entities are reached with the nested term */
    projection_t *pk = projection_parse(A, "id,to{to}", ld_core(), false, &p);
    assert_non_null(pk);
    j = (ops_join_t){.flat = true, .level = 2, .pick = pk};
    assert_true(ops_join_fetch(&rq, &root, 1, &j, &l, &p));
    assert_int_equal(l.n, 3);
    assert_ptr_equal(l.pick[0], pk->sub[0]);
    assert_ptr_equal(l.pick[2], pk->sub[0]);   /* c, via a: {to} has no nested term, the same list */
    ops_linked_release(&l);
    entity_unref(root);
}

static void test_problem_rendering(void **state)
{
    problem_t     p = {0};
    sbuf_t        sb;
    json_writer_t w;
    (void)state;

    problem_set(&p, PB_RESOURCE_NOT_FOUND, "no \"x\"\n");
    sb_init(&sb, A, 64);
    jw_init(&w, &sb);
    jw_problem(&w, &p, NULL);
    assert_string_equal(sb.p, "{\"type\":\"https://uri.etsi.org/ngsi-ld/errors/ResourceNotFound\","
                              "\"title\":\"Resource not found\",\"status\":404,\"detail\":\"no \\\"x\\\"\\n\"}");
    p.kind = PB_HTTP;
    p.status = 405;
    sb_clear(&sb);
    jw_init(&w, &sb);
    jw_problem(&w, &p, "Method Not Allowed");
    assert_non_null(strstr(sb.p, "\"type\":\"about:blank\",\"title\":\"Method Not Allowed\",\"status\":405"));
}

int main(void)
{
    char *argv[] = {"test_ops", NULL};
    if (!cr_config_load(1, argv)) return 1;
    cr_log_open(NULL, LOG_ERROR);
    if (!ld_init()) return 1;
    model_init();

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entity_lifecycle),
        cmocka_unit_test(test_attributes),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_batch_error_records),
        cmocka_unit_test(test_batch_one_group),
        cmocka_unit_test(test_query_and_purge),
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_join),
        cmocka_unit_test(test_problem_rendering),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
