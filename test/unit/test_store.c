/*
 * test_store.c - unit tests of the store interface over corDB in RAM:
 * create/get/modify/delete, upsert, purge, the three query access paths
 * (ids, types, all) with offset/limit/count, creation order across deletes
 * and compaction, tenants, change hooks, two concurrency tests (no lost
 * update under concurrent merges; readers and writers on many entities), and
 * the geo index (same answers as a full scan through every kind of write;
 * a timing of near-queries with and without it, printed).
 *
 * Entities are built directly as drafts (the model's own structures) with
 * absolute type and attribute IRIs, so the tests do not depend on a @context.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "store/store.h"
#include "store/cordb/cordb.h"

#define T_A  "http://example.org/A"
#define T_B  "http://example.org/B"
#define T_C  "http://example.org/C"
#define ATTR "http://example.org/attr/"

/* ----------------------------------------------------------- helpers */

static const char *iri(arena_t *a, const char *prefix, const char *name)
{
    return intern_cstr(arena_printf(a, "%s%s", prefix, name));
}

static void attr_init(cr_attr_t *at, const char *name, json_t *v)
{
    memset(at, 0, sizeof(*at));
    at->name        = name;
    at->kind        = ATTR_PROPERTY;
    at->value       = v;
    at->observed_at = CR_NO_TIME;
    at->created_at  = cr_now_us();
    at->modified_at = at->created_at;
}

/* A draft with up to two types and up to two integer Properties (names NULL: none). */
static cr_entity_t *mk(arena_t *a, const char *id, const char *t1, const char *t2,
                       const char *a1, int64_t v1, const char *a2, int64_t v2)
{
    cr_entity_t *e = arena_calloc(a, sizeof(*e));

    e->id      = id ? arena_strdup(a, id) : NULL;
    e->types   = arena_calloc(a, 2 * sizeof(char *));
    if (t1)
        e->types[e->n_types++] = intern_cstr(t1);
    if (t2)
        e->types[e->n_types++] = intern_cstr(t2);
    e->attrs   = arena_calloc(a, 2 * sizeof(cr_attr_t));
    if (a1)
        attr_init(&e->attrs[e->n_attrs++], iri(a, ATTR, a1), json_new_int(a, v1));
    if (a2)
        attr_init(&e->attrs[e->n_attrs++], iri(a, ATTR, a2), json_new_int(a, v2));
    e->created_at  = cr_now_us();
    e->modified_at = e->created_at;
    return e;
}

static int64_t attr_int(arena_t *a, const cr_entity_t *e, const char *name)
{
    const cr_attr_t *at = entity_attr(e, iri(a, ATTR, name), NULL);

    if (!at || !at->value || at->value->type != JSON_NUMBER)
        return INT64_MIN;
    return at->value->is_int ? at->value->i : (int64_t)at->value->num;
}

static entity_filter_t *types_filter(arena_t *a, const char *sel)
{
    entity_filter_t *f = arena_calloc(a, sizeof(*f));
    problem_t        p = { 0 };

    f->types = typesel_parse(a, sel, ld_core(), &p);
    assert_non_null(f->types);
    return f;
}

/* The ids of a query page, joined with ' ', in the arena. */
static const char *page_ids(arena_t *a, const store_page_t *pg)
{
    sbuf_t sb;

    sb_init(&sb, a, 64);
    for (size_t i = 0; i < pg->n; i++) {
        if (i)
            sb_addc(&sb, ' ');
        sb_adds(&sb, pg->items[i]->id);
    }
    return sb.p;
}

static const char *query_ids(store_t *s, arena_t *a, const char *tenant, const entity_filter_t *f,
                             size_t offset, size_t limit, size_t *count)
{
    store_page_t pg;
    problem_t    p = { 0 };
    const char  *ids;

    assert_true(store_query(s, tenant, f, offset, limit, count != NULL, a, &pg, &p));
    ids = page_ids(a, &pg);
    if (count)
        *count = pg.count;
    store_page_release(&pg);
    return ids;
}

/* A hook that records what it saw. */
typedef struct seen {
    _Atomic int creates, updates, deletes;
    char        last_before[64], last_after[64];
} seen_t;

static void hook(void *ud, const store_change_t *group, size_t n)
{
    seen_t *sn = ud;

    for (size_t i = 0; i < n; i++) {
        const store_change_t *ch = &group[i];

        assert_non_null(ch->tenant);
        assert_true(ch->seq > 0);
        if (!ch->before)
            atomic_fetch_add(&sn->creates, 1);
        else if (!ch->after)
            atomic_fetch_add(&sn->deletes, 1);
        else
            atomic_fetch_add(&sn->updates, 1);
        snprintf(sn->last_before, sizeof(sn->last_before), "%s", ch->before ? ch->before->id : "-");
        snprintf(sn->last_after, sizeof(sn->last_after), "%s", ch->after ? ch->after->id : "-");
    }
}

static store_t *open_store(void)
{
    problem_t p = { 0 };
    store_t  *s;

    cr_config.database       = "corDB";
    cr_config.db_dir         = NULL;
    cr_config.db_lock_prefer = "reads";
    s = store_open(&p);
    assert_non_null(s);
    return s;
}

static int group_setup(void **state)
{
    char *argv[] = { "test_store", NULL };

    (void)state;
    if (!cr_config_load(1, argv))
        return -1;
    cr_log_open(NULL, LOG_ERROR);
    if (!ld_init())
        return -1;
    model_init();
    return 0;
}

/* ------------------------------------------------------------- tests */

static void test_open_backends(void **state)
{
    problem_t p = { 0 };
    store_t  *s;

    (void)state;
    /* mongoc: a database that does not answer is a 503 within --dbTimeout */
    cr_config.database      = "mongoc";
    cr_config.db_uri        = "mongodb://127.0.0.1:1";
    cr_config.db_timeout_ms = 300;
    assert_null(store_open(&p));
    assert_int_equal(p.kind, PB_HTTP);
    assert_int_equal(p.status, 503);
    assert_non_null(strstr(p.detail, "MongoDB"));
    cr_config.db_uri = "http://not-mongodb";
    assert_null(store_open(&p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    cr_config.db_uri           = "mongodb://127.0.0.1:1";
    cr_config.db_write_concern = "sometimes";
    assert_null(store_open(&p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    cr_config.db_write_concern = NULL;
    cr_config.db_uri           = NULL;

    cr_config.database = "nosuchdb";
    assert_null(store_open(&p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);

    cr_config.database       = "corDB";
    cr_config.db_lock_prefer = "sideways";
    assert_null(store_open(&p));

    cr_config.db_lock_prefer = "writes";
    s = store_open(&p);
    assert_non_null(s);
    store_close(s);
    cr_config.database = NULL;                  /* default: corDB */
    s = store_open(&p);
    assert_non_null(s);
    store_close(s);
    cr_config.db_lock_prefer = "reads";
}

static void test_create_get_delete(void **state)
{
    arena_t      *a = arena_new(4096);
    store_t      *s = open_store();
    problem_t     p = { 0 };
    seen_t        sn = { 0 };
    cr_entity_t  *e;
    store_stats_t st;

    (void)state;
    store_add_hook(s, hook, &sn);
    assert_true(store_create(s, NULL, mk(a, "urn:E:1", T_A, NULL, "x", 1, NULL, 0), &p));
    assert_int_equal(sn.creates, 1);
    assert_string_equal(sn.last_after, "urn:E:1");

    e = store_get(s, "", "urn:E:1", &p);
    assert_non_null(e);
    assert_string_equal(e->id, "urn:E:1");
    assert_int_equal(e->n_types, 1);
    assert_ptr_equal(e->types[0], intern_cstr(T_A));
    assert_int_equal(attr_int(a, e, "x"), 1);
    assert_true(e->refs >= 2);                  /* the store's and ours */
    entity_unref(e);

    assert_false(store_create(s, NULL, mk(a, "urn:E:1", T_B, NULL, NULL, 0, NULL, 0), &p));
    assert_int_equal(p.kind, PB_ALREADY_EXISTS);
    assert_int_equal(sn.creates, 1);

    assert_null(store_get(s, NULL, "urn:E:nope", &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_non_null(strstr(p.detail, "urn:E:nope"));

    assert_null(store_get(s, "nosuchtenant", "urn:E:1", &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);

    assert_false(store_create(s, NULL, mk(a, NULL, T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);

    store_get_stats(s, &st);
    assert_int_equal(st.entities, 1);
    assert_int_equal(st.creates, 1);

    /* a reader's reference outlives the delete */
    e = store_get(s, NULL, "urn:E:1", &p);
    assert_true(store_delete(s, NULL, "urn:E:1", &p));
    assert_int_equal(sn.deletes, 1);
    assert_string_equal(sn.last_before, "urn:E:1");
    assert_string_equal(e->id, "urn:E:1");
    entity_unref(e);

    assert_null(store_get(s, NULL, "urn:E:1", &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_false(store_delete(s, NULL, "urn:E:1", &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_false(store_delete(s, "nosuchtenant", "urn:E:1", &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);

    /* the id can be created again */
    assert_true(store_create(s, NULL, mk(a, "urn:E:1", T_B, NULL, NULL, 0, NULL, 0), &p));
    store_get_stats(s, &st);
    assert_int_equal(st.entities, 1);
    assert_int_equal(st.deletes, 1);

    store_close(s);
    arena_free(a);
}

static void test_modify(void **state)
{
    arena_t     *a = arena_new(4096);
    store_t     *s = open_store();
    problem_t    p = { 0 };
    seen_t       sn = { 0 };
    op_args_t    args = { 0 };
    op_result_t  res = { 0 };
    cr_entity_t *e;

    (void)state;
    store_add_hook(s, hook, &sn);
    assert_true(store_create(s, NULL, mk(a, "urn:E:m", T_A, NULL, "x", 1, "y", 2), &p));

    /* merge: x changes, z appears, y stays */
    assert_true(store_modify(s, NULL, "urn:E:m", OP_MERGE_ENTITY,
                             mk(a, NULL, NULL, NULL, "x", 10, "z", 3), NULL, &res, a, &p));
    assert_int_equal(sn.updates, 1);
    assert_string_equal(sn.last_before, "urn:E:m");
    assert_string_equal(sn.last_after, "urn:E:m");
    e = store_get(s, NULL, "urn:E:m", &p);
    assert_int_equal(attr_int(a, e, "x"), 10);
    assert_int_equal(attr_int(a, e, "y"), 2);
    assert_int_equal(attr_int(a, e, "z"), 3);
    entity_unref(e);

    /* delete an attribute; deleting it again is ResourceNotFound */
    args.attr_name = iri(a, ATTR, "y");
    assert_true(store_modify(s, NULL, "urn:E:m", OP_DELETE_ATTR, NULL, &args, NULL, a, &p));
    e = store_get(s, NULL, "urn:E:m", &p);
    assert_int_equal(attr_int(a, e, "y"), INT64_MIN);
    assert_int_equal(e->n_attrs, 2);
    entity_unref(e);
    assert_false(store_modify(s, NULL, "urn:E:m", OP_DELETE_ATTR, NULL, &args, NULL, a, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_int_equal(sn.updates, 2);

    /* append without overwrite of an existing attribute: nothing changes, no hook */
    cr_entity_t *was = store_get(s, NULL, "urn:E:m", &p);
    op_args_t    keep = { .no_overwrite = true };
    memset(&res, 0, sizeof(res));
    assert_true(store_modify(s, NULL, "urn:E:m", OP_APPEND_ATTRS,
                             mk(a, NULL, NULL, NULL, "x", 99, NULL, 0), &keep, &res, a, &p));
    assert_int_equal(res.n_updated, 0);
    assert_int_equal(res.n_not_updated, 1);
    assert_int_equal(sn.updates, 2);
    e = store_get(s, NULL, "urn:E:m", &p);
    assert_ptr_equal(e, was);
    assert_int_equal(attr_int(a, e, "x"), 10);
    entity_unref(e);
    entity_unref(was);

    /* unknown entity, unknown tenant */
    assert_false(store_modify(s, NULL, "urn:E:none", OP_MERGE_ENTITY,
                              mk(a, NULL, NULL, NULL, "x", 1, NULL, 0), NULL, NULL, a, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_non_null(strstr(p.detail, "urn:E:none"));
    assert_false(store_modify(s, "t-none", "urn:E:m", OP_MERGE_ENTITY,
                              mk(a, NULL, NULL, NULL, "x", 1, NULL, 0), NULL, NULL, a, &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);

    /* replace: only the new attributes, createdAt kept */
    e = store_get(s, NULL, "urn:E:m", &p);
    int64_t created = e->created_at;
    entity_unref(e);
    assert_true(store_modify(s, NULL, "urn:E:m", OP_REPLACE_ENTITY,
                             mk(a, "urn:E:m", T_A, NULL, "w", 7, NULL, 0), NULL, NULL, a, &p));
    e = store_get(s, NULL, "urn:E:m", &p);
    assert_int_equal(e->n_attrs, 1);
    assert_int_equal(attr_int(a, e, "w"), 7);
    assert_int_equal(e->created_at, created);
    entity_unref(e);

    store_close(s);
    arena_free(a);
}

static void test_upsert(void **state)
{
    arena_t     *a = arena_new(4096);
    store_t     *s = open_store();
    problem_t    p = { 0 };
    bool         created = false;
    cr_entity_t *e;

    (void)state;
    assert_true(store_upsert(s, "up", mk(a, "urn:U:1", T_A, NULL, "x", 1, "y", 1), false,
                             &created, a, &p));
    assert_true(created);
    assert_true(store_tenant_exists(s, "up"));

    assert_true(store_upsert(s, "up", mk(a, "urn:U:1", T_A, NULL, "x", 2, NULL, 0), false,
                             &created, a, &p));
    assert_false(created);
    e = store_get(s, "up", "urn:U:1", &p);
    assert_int_equal(attr_int(a, e, "x"), 2);
    assert_int_equal(attr_int(a, e, "y"), 1);
    entity_unref(e);

    assert_true(store_upsert(s, "up", mk(a, "urn:U:1", T_B, NULL, "z", 3, NULL, 0), true,
                             &created, a, &p));
    assert_false(created);
    e = store_get(s, "up", "urn:U:1", &p);
    assert_int_equal(e->n_attrs, 1);
    assert_int_equal(attr_int(a, e, "z"), 3);
    assert_ptr_equal(e->types[0], intern_cstr(T_B));
    entity_unref(e);

    /* the replace moved it from type A to type B */
    assert_string_equal(query_ids(s, a, "up", types_filter(a, T_B), 0, 10, NULL), "urn:U:1");
    assert_string_equal(query_ids(s, a, "up", types_filter(a, T_A), 0, 10, NULL), "");

    store_close(s);
    arena_free(a);
}

/* 30 entities urn:Q:00..29: type A when i%3==0, B when i%3==1, C and A when i%3==2. */
static void fill_q(store_t *s, arena_t *a, const char *tenant)
{
    problem_t p = { 0 };

    for (int i = 0; i < 30; i++) {
        const char *id = arena_printf(a, "urn:Q:%02d", i);
        const char *t1 = i % 3 == 0 ? T_A : i % 3 == 1 ? T_B : T_C;
        const char *t2 = i % 3 == 2 ? T_A : NULL;

        assert_true(store_create(s, tenant, mk(a, id, t1, t2, "n", i, NULL, 0), &p));
    }
}

static void test_query_paths(void **state)
{
    arena_t         *a = arena_new(1 << 16);
    store_t         *s = open_store();
    entity_filter_t  f = { 0 };
    size_t           count = 0;
    const char      *ids[] = { "urn:Q:07", "urn:Q:03", "urn:Q:99", "urn:Q:07", "urn:Q:01" };
    store_page_t     pg;
    problem_t        p = { 0 };
    const char      *r;

    (void)state;
    fill_q(s, a, NULL);

    /* all, in creation order, with offset / limit / count */
    r = query_ids(s, a, NULL, &f, 0, 3, &count);
    assert_string_equal(r, "urn:Q:00 urn:Q:01 urn:Q:02");
    assert_int_equal(count, 30);
    r = query_ids(s, a, NULL, NULL, 28, 10, &count);
    assert_string_equal(r, "urn:Q:28 urn:Q:29");
    assert_int_equal(count, 30);
    r = query_ids(s, a, NULL, &f, 40, 10, &count);
    assert_string_equal(r, "");
    assert_int_equal(count, 30);

    /* limit 0: count only */
    assert_true(store_query(s, NULL, &f, 0, 0, true, a, &pg, &p));
    assert_int_equal(pg.n, 0);
    assert_int_equal(pg.count, 30);

    /* by ids: creation order, no duplicates, unknown ids ignored */
    f.ids   = ids;
    f.n_ids = CR_ARRAY_LEN(ids);
    r = query_ids(s, a, NULL, &f, 0, 10, &count);
    assert_string_equal(r, "urn:Q:01 urn:Q:03 urn:Q:07");
    assert_int_equal(count, 3);
    r = query_ids(s, a, NULL, &f, 1, 1, &count);
    assert_string_equal(r, "urn:Q:03");

    /* by one type */
    r = query_ids(s, a, NULL, types_filter(a, T_B), 0, 3, &count);
    assert_string_equal(r, "urn:Q:01 urn:Q:04 urn:Q:07");
    assert_int_equal(count, 10);
    r = query_ids(s, a, NULL, types_filter(a, T_A), 0, 5, &count);
    assert_string_equal(r, "urn:Q:00 urn:Q:02 urn:Q:03 urn:Q:05 urn:Q:06");
    assert_int_equal(count, 20);

    /* several types: merged in creation order, an entity of both once */
    r = query_ids(s, a, NULL, types_filter(a, T_C "," T_A), 0, 4, &count);
    assert_string_equal(r, "urn:Q:00 urn:Q:02 urn:Q:03 urn:Q:05");
    assert_int_equal(count, 20);
    r = query_ids(s, a, NULL, types_filter(a, T_C "," T_B), 2, 3, &count);
    assert_string_equal(r, "urn:Q:04 urn:Q:05 urn:Q:07");
    assert_int_equal(count, 20);

    /* a type nobody has */
    r = query_ids(s, a, NULL, types_filter(a, "http://example.org/Nobody"), 0, 5, &count);
    assert_string_equal(r, "");
    assert_int_equal(count, 0);

    /* without want_count the scan stops early; count stays 0 */
    r = query_ids(s, a, NULL, types_filter(a, T_A), 0, 2, NULL);
    assert_string_equal(r, "urn:Q:00 urn:Q:02");

    store_close(s);
    arena_free(a);
}

static void test_type_changes(void **state)
{
    arena_t    *a = arena_new(1 << 16);
    store_t    *s = open_store();
    problem_t   p = { 0 };
    size_t      count;

    (void)state;
    fill_q(s, a, NULL);

    /* urn:Q:00 becomes a B (replace), then an A again (replace), then gains C (merge) */
    assert_true(store_modify(s, NULL, "urn:Q:00", OP_REPLACE_ENTITY,
                             mk(a, "urn:Q:00", T_B, NULL, "n", 0, NULL, 0), NULL, NULL, a, &p));
    assert_string_equal(query_ids(s, a, NULL, types_filter(a, T_B), 0, 2, &count),
                        "urn:Q:00 urn:Q:01");
    assert_int_equal(count, 11);
    assert_string_equal(query_ids(s, a, NULL, types_filter(a, T_A), 0, 1, &count), "urn:Q:02");
    assert_int_equal(count, 19);

    assert_true(store_modify(s, NULL, "urn:Q:00", OP_REPLACE_ENTITY,
                             mk(a, "urn:Q:00", T_A, NULL, "n", 0, NULL, 0), NULL, NULL, a, &p));
    assert_true(store_modify(s, NULL, "urn:Q:00", OP_MERGE_ENTITY,
                             mk(a, NULL, T_C, NULL, NULL, 0, NULL, 0), NULL, NULL, a, &p));
    assert_string_equal(query_ids(s, a, NULL, types_filter(a, T_A), 0, 2, &count),
                        "urn:Q:00 urn:Q:02");
    assert_int_equal(count, 20);
    assert_string_equal(query_ids(s, a, NULL, types_filter(a, T_C), 0, 2, &count),
                        "urn:Q:00 urn:Q:02");
    assert_int_equal(count, 11);
    assert_string_equal(query_ids(s, a, NULL, types_filter(a, T_A "," T_C), 0, 2, &count),
                        "urn:Q:00 urn:Q:02");
    assert_int_equal(count, 20);

    store_close(s);
    arena_free(a);
}

static void test_order_and_compaction(void **state)
{
    arena_t       *a = arena_new(1 << 16);
    cdb_t         *db;
    problem_t      p = { 0 };
    store_change_t ch;
    cdb_shape_t    sh;
    store_page_t   pg;
    entity_filter_t all = { 0 };

    (void)state;
    db = cdb_open(false, &p);
    assert_non_null(db);
    for (int i = 0; i < 200; i++) {
        assert_true(cdb_create(db, NULL, mk(a, arena_printf(a, "urn:O:%03d", i),
                                            i % 2 ? T_A : T_B, NULL, NULL, 0, NULL, 0), &ch, &p));
        entity_unref(ch.after);
    }
    /* delete all but every 4th: compaction happens along the way */
    for (int i = 0; i < 200; i++) {
        if (i % 4 == 0)
            continue;
        assert_true(cdb_delete(db, NULL, arena_printf(a, "urn:O:%03d", i), NULL, &ch, &p));
        assert_null(ch.after);
        entity_unref(ch.before);
    }
    assert_true(cdb_tenant_shape(db, NULL, &sh));
    assert_int_equal(sh.live, 50);
    assert_true(sh.compactions >= 1);
    assert_true(sh.slots <= 2 * sh.live);
    assert_true(sh.entity_bytes > 0);

    /* creation order is kept, the indexes point at the new slot numbers */
    assert_true(cdb_query(db, NULL, &all, 0, 100, true, a, &pg, &p));
    assert_int_equal(pg.n, 50);
    for (size_t i = 0; i < pg.n; i++)
        assert_string_equal(pg.items[i]->id, arena_printf(a, "urn:O:%03zu", i * 4));
    store_page_release(&pg);
    for (int i = 0; i < 200; i += 4) {
        cr_entity_t *e = cdb_get(db, NULL, arena_printf(a, "urn:O:%03d", i), &p);

        assert_non_null(e);
        entity_unref(e);
    }
    assert_null(cdb_get(db, NULL, "urn:O:001", &p));

    /* type index after compaction: B had the even ones, all kept */
    assert_true(cdb_query(db, NULL, types_filter(a, T_B), 0, 100, true, a, &pg, &p));
    assert_int_equal(pg.count, 50);
    assert_string_equal(pg.items[1]->id, "urn:O:004");
    store_page_release(&pg);
    assert_true(cdb_query(db, NULL, types_filter(a, T_A), 0, 100, true, a, &pg, &p));
    assert_int_equal(pg.count, 0);
    assert_true(cdb_tenant_shape(db, NULL, &sh));
    assert_true(sh.type_entries <= sh.slots);

    /* new entities go after the old ones */
    assert_true(cdb_create(db, NULL, mk(a, "urn:O:new", T_B, NULL, NULL, 0, NULL, 0), &ch, &p));
    entity_unref(ch.after);
    assert_true(cdb_query(db, NULL, types_filter(a, T_B), 49, 100, true, a, &pg, &p));
    assert_int_equal(pg.n, 2);
    assert_string_equal(pg.items[0]->id, "urn:O:196");
    assert_string_equal(pg.items[1]->id, "urn:O:new");
    store_page_release(&pg);

    cdb_close(db);
    arena_free(a);
}

/* The id map against a plain array: random inserts and removes (backward-shift
 * deletion keeps every remaining key findable). */
static const char *churn_key(const void *ud, uint32_t v)
{
    return ((char (*)[16])ud)[v];
}

static void test_idmap_churn(void **state)
{
    enum { N = 5000 };
    static char keys[N][16];
    static bool in[N];
    cdb_idmap_t m;
    unsigned    seed = 7;

    (void)state;
    for (int i = 0; i < N; i++)
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
    cdb_idmap_init(&m, churn_key, keys);
    for (int round = 0; round < 200000; round++) {
        uint32_t v = (uint32_t)(rand_r(&seed) % N);
        uint32_t h = cdb_hash_key(keys[v], strlen(keys[v]));

        if (in[v]) {
            assert_true(cdb_idmap_remove(&m, h, v));
            in[v] = false;
        } else {
            assert_int_equal(cdb_idmap_find(&m, keys[v], h), CDB_NONE);
            assert_true(cdb_idmap_reserve(&m, 1));
            cdb_idmap_insert(&m, h, v);
            in[v] = true;
        }
        if (round % 10000 == 0) {
            uint32_t n = 0;

            for (uint32_t i = 0; i < N; i++) {
                uint32_t f = cdb_idmap_find(&m, keys[i], cdb_hash_key(keys[i], strlen(keys[i])));

                assert_int_equal(f, in[i] ? i : CDB_NONE);
                n += in[i];
            }
            assert_int_equal(m.n, n);
        }
    }
    cdb_idmap_free(&m);
}

/* Growth is incremental: while entries move from the old table to the new
 * one, finds, inserts and removes (in either table) stay exact. */
static void test_idmap_incremental_growth(void **state)
{
    enum { N = 20000 };
    static char keys[N][16];
    static bool in[N];
    cdb_idmap_t m;
    bool        saw_growth = false;

    (void)state;
    for (int i = 0; i < N; i++)
        snprintf(keys[i], sizeof(keys[i]), "g%d", i);
    cdb_idmap_init(&m, churn_key, keys);
    for (uint32_t i = 0; i < N; i++) {
        assert_true(cdb_idmap_reserve(&m, 1));
        cdb_idmap_insert(&m, cdb_hash_key(keys[i], strlen(keys[i])), i);
        in[i] = true;
        saw_growth |= m.old != NULL;
        if (i % 3 == 0 && in[i / 2]) {      /* removes hit both tables */
            assert_true(cdb_idmap_remove(&m, cdb_hash_key(keys[i / 2], strlen(keys[i / 2])), i / 2));
            in[i / 2] = false;
            assert_false(cdb_idmap_remove(&m, cdb_hash_key(keys[i / 2], strlen(keys[i / 2])), i / 2));
        }
        if (i % 1000 == 999 || m.old) {
            uint32_t n = 0;

            for (uint32_t k = 0; k <= i; k += m.old ? 7 : 1) {
                uint32_t f = cdb_idmap_find(&m, keys[k], cdb_hash_key(keys[k], strlen(keys[k])));

                assert_int_equal(f, in[k] ? k : CDB_NONE);
            }
            for (uint32_t k = 0; k <= i; k++)
                n += in[k];
            assert_int_equal(m.n, n);
        }
    }
    assert_true(saw_growth);
    assert_null(m.old);                     /* drained long before the next doubling */
    cdb_idmap_clear(&m);
    assert_int_equal(cdb_idmap_find(&m, keys[1], cdb_hash_key(keys[1], strlen(keys[1]))), CDB_NONE);
    cdb_idmap_free(&m);
}

/* What an entity costs in the store (doc/cordb.md "What an entity costs"):
 * an id, one type, two integer Properties. */
static void test_memory_per_entity(void **state)
{
    arena_t       *a = arena_new(1 << 16);
    cdb_t         *db;
    problem_t      p = { 0 };
    store_change_t ch;
    cdb_shape_t    sh;
    const int      n = 20000;

    (void)state;
    db = cdb_open(false, &p);
    assert_non_null(db);
    for (int i = 0; i < n; i++) {
        assert_true(cdb_create(db, NULL, mk(a, arena_printf(a, "urn:ngsi-ld:Building:%06d", i),
                                            T_A, NULL, "temperature", i, "humidity", i), &ch, &p));
        entity_unref(ch.after);
        arena_reset(a);
    }
    assert_true(cdb_tenant_shape(db, NULL, &sh));
    print_message("corDB per entity: index %.1f bytes, frozen block %.1f bytes (%d entities)\n",
                  (double)sh.index_bytes / n, (double)sh.entity_bytes / n, n);
    assert_true(sh.index_bytes / n <= 64);
    assert_true((sh.index_bytes + sh.entity_bytes) / n <= 1024);
    cdb_close(db);
    arena_free(a);
}

static void collect_tenant(void *ud, const char *tenant)
{
    sbuf_t *sb = ud;

    sb_printf(sb, "[%s]", tenant);
}

static void test_tenants(void **state)
{
    arena_t      *a = arena_new(4096);
    store_t      *s = open_store();
    problem_t     p = { 0 };
    sbuf_t        sb;
    store_page_t  pg;
    store_stats_t st;

    (void)state;
    assert_true(store_tenant_exists(s, NULL));
    assert_true(store_tenant_exists(s, ""));
    assert_false(store_tenant_exists(s, "t1"));
    assert_false(store_query(s, "t1", NULL, 0, 10, true, a, &pg, &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);
    assert_false(store_tenant_exists(s, "t1"));      /* reads create nothing */

    assert_true(store_create(s, "t1", mk(a, "urn:T:1", T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_true(store_create(s, "t2", mk(a, "urn:T:1", T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_true(store_tenant_exists(s, "t1"));
    assert_null(store_get(s, NULL, "urn:T:1", &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);

    sb_init(&sb, a, 64);
    store_tenants(s, collect_tenant, &sb);
    assert_string_equal(sb.p, "[][t1][t2]");

    assert_true(store_delete(s, "t1", "urn:T:1", &p));
    assert_true(store_query(s, "t1", NULL, 0, 10, true, a, &pg, &p));
    assert_int_equal(pg.count, 0);
    assert_true(store_query(s, "t2", NULL, 0, 10, true, a, &pg, &p));
    assert_int_equal(pg.count, 1);
    store_page_release(&pg);

    store_get_stats(s, &st);
    assert_int_equal(st.tenants, 3);
    assert_int_equal(st.entities, 1);

    store_close(s);
    arena_free(a);
}

static void count_fn(void *ud, const cr_entity_t *e)
{
    (*(int *)ud)++;
    assert_non_null(e->id);
}

static void test_purge_foreach(void **state)
{
    arena_t   *a = arena_new(1 << 16);
    store_t   *s = open_store();
    problem_t  p = { 0 };
    seen_t     sn = { 0 };
    size_t     n = 0, count;
    int        k = 0;

    (void)state;
    store_add_hook(s, hook, &sn);
    fill_q(s, a, "pt");

    assert_true(store_foreach(s, "pt", types_filter(a, T_B), count_fn, &k, &p));
    assert_int_equal(k, 10);
    k = 0;
    assert_true(store_foreach(s, "pt", NULL, count_fn, &k, &p));
    assert_int_equal(k, 30);
    assert_false(store_foreach(s, "nope", NULL, count_fn, &k, &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);

    assert_true(store_purge(s, "pt", types_filter(a, T_A), &n, &p));
    assert_int_equal(n, 20);
    assert_int_equal(sn.deletes, 20);
    assert_string_equal(query_ids(s, a, "pt", NULL, 0, 3, &count), "urn:Q:01 urn:Q:04 urn:Q:07");
    assert_int_equal(count, 10);
    assert_null(store_get(s, "pt", "urn:Q:00", &p));

    assert_true(store_purge(s, "pt", NULL, &n, &p));
    assert_int_equal(n, 10);
    assert_int_equal(sn.deletes, 30);
    assert_true(store_create(s, "pt", mk(a, "urn:Q:00", T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_string_equal(query_ids(s, a, "pt", NULL, 0, 3, &count), "urn:Q:00");

    store_close(s);
    arena_free(a);
}

/* ------------------------------------------------------- concurrency */

#define MERGE_THREADS 4
#define MERGE_ROUNDS  1000

typedef struct mt_arg {
    store_t *s;
    int      k;
} mt_arg_t;

static void *merge_thread(void *ud)
{
    mt_arg_t *m = ud;
    arena_t  *a = arena_new(1 << 20);   /* kept by arena_reset: entity_apply of a 400-attribute entity fits */

    for (int i = 0; i < MERGE_ROUNDS; i++) {
        problem_t    p = { 0 };
        const char  *own = arena_printf(a, "t%d", m->k);
        const char  *extra = i % 10 == 0 ? arena_printf(a, "k%d_%d", m->k, i) : NULL;
        cr_entity_t *patch = mk(a, NULL, NULL, NULL, own, i, extra, i);

        if (!store_modify(m->s, "mt", "urn:M:1", OP_MERGE_ENTITY, patch, NULL, NULL, a, &p))
            fail_msg("merge failed: %s", p.detail);
        arena_reset(a);
    }
    arena_free(a);
    return NULL;
}

static void test_concurrent_merge(void **state)
{
    arena_t     *a = arena_new(1 << 16);
    store_t     *s = open_store();
    problem_t    p = { 0 };
    pthread_t    th[MERGE_THREADS];
    mt_arg_t     args[MERGE_THREADS];
    cr_entity_t *e;
    store_stats_t st;

    (void)state;
    assert_true(store_create(s, "mt", mk(a, "urn:M:1", T_A, NULL, NULL, 0, NULL, 0), &p));
    for (int k = 0; k < MERGE_THREADS; k++) {
        args[k] = (mt_arg_t){ s, k };
        assert_int_equal(pthread_create(&th[k], NULL, merge_thread, &args[k]), 0);
    }
    for (int k = 0; k < MERGE_THREADS; k++)
        pthread_join(th[k], NULL);

    e = store_get(s, "mt", "urn:M:1", &p);
    assert_non_null(e);
    assert_int_equal(e->n_attrs, MERGE_THREADS * (1 + MERGE_ROUNDS / 10));
    for (int k = 0; k < MERGE_THREADS; k++) {
        assert_int_equal(attr_int(a, e, arena_printf(a, "t%d", k)), MERGE_ROUNDS - 1);
        for (int i = 0; i < MERGE_ROUNDS; i += 10)
            assert_int_equal(attr_int(a, e, arena_printf(a, "k%d_%d", k, i)), i);
    }
    entity_unref(e);
    store_get_stats(s, &st);
    assert_int_equal(st.updates, MERGE_THREADS * MERGE_ROUNDS);

    store_close(s);
    arena_free(a);
}

#define RW_ENTITIES 2000
#define RW_READERS  4
#define RW_WRITERS  2
#define RW_ROUNDS   3000

typedef struct rw_arg {
    store_t     *s;
    int          k;
    _Atomic int *stop;
    long         seen;
} rw_arg_t;

static void *writer_thread(void *ud)
{
    rw_arg_t    *w = ud;
    arena_t     *a = arena_new(1 << 14);
    unsigned     seed = 17u + (unsigned)w->k;

    for (int i = 0; i < RW_ROUNDS; i++) {
        problem_t   p = { 0 };
        int         n = (int)(rand_r(&seed) % RW_ENTITIES);
        const char *id = arena_printf(a, "urn:RW:%d:%d", w->k, n);

        switch (rand_r(&seed) % 4) {
        case 0:     /* delete, then create again later */
            if (!store_delete(w->s, "rw", id, &p) && p.kind != PB_RESOURCE_NOT_FOUND)
                fail_msg("delete: %s", p.detail);
            break;
        case 1:
            if (!store_create(w->s, "rw", mk(a, id, n % 2 ? T_A : T_B, NULL, "v", i, NULL, 0),
                              &p) && p.kind != PB_ALREADY_EXISTS)
                fail_msg("create: %s", p.detail);
            break;
        case 2:     /* replace, flipping the type */
            if (!store_modify(w->s, "rw", id, OP_REPLACE_ENTITY,
                              mk(a, id, i % 2 ? T_A : T_B, NULL, "v", i, NULL, 0), NULL, NULL, a,
                              &p) && p.kind != PB_RESOURCE_NOT_FOUND)
                fail_msg("replace: %s", p.detail);
            break;
        default:
            if (!store_modify(w->s, "rw", id, OP_MERGE_ENTITY,
                              mk(a, NULL, NULL, NULL, "v", i, "w", n), NULL, NULL, a, &p) &&
                p.kind != PB_RESOURCE_NOT_FOUND)
                fail_msg("merge: %s", p.detail);
            break;
        }
        arena_reset(a);
    }
    arena_free(a);
    return NULL;
}

static void *reader_thread(void *ud)
{
    rw_arg_t        *r = ud;
    arena_t         *a = arena_new(1 << 16);
    entity_filter_t *fa, *fab;
    unsigned         seed = 99u + (unsigned)r->k;

    while (!atomic_load(r->stop)) {
        problem_t    p = { 0 };
        store_page_t pg;

        fa  = types_filter(a, T_A);
        fab = types_filter(a, T_A "," T_B);
        if (store_query(r->s, "rw", rand_r(&seed) % 2 ? fa : fab, rand_r(&seed) % 50, 100, true,
                        a, &pg, &p)) {
            for (size_t i = 0; i < pg.n; i++) {
                const cr_entity_t *e = pg.items[i];

                if (pg.items == NULL || !e->id || !e->n_types)
                    fail_msg("bad entity in page");
                r->seen += attr_int(a, e, "v") != INT64_MIN;
            }
            if (pg.n > pg.count)
                fail_msg("page larger than count");
            store_page_release(&pg);
        }
        cr_entity_t *e = store_get(r->s, "rw", arena_printf(a, "urn:RW:%u:%u", rand_r(&seed) % 2,
                                                            rand_r(&seed) % RW_ENTITIES), &p);
        if (e) {
            if (!e->n_types)
                fail_msg("entity without type");
            entity_unref(e);
        }
        arena_reset(a);
    }
    arena_free(a);
    return NULL;
}

static void test_readers_writers(void **state)
{
    arena_t     *a = arena_new(1 << 16);
    store_t     *s;
    problem_t    p = { 0 };
    pthread_t    rt[RW_READERS], wt[RW_WRITERS];
    rw_arg_t     ra[RW_READERS], wa[RW_WRITERS];
    _Atomic int  stop = 0;
    store_page_t pg;

    (void)state;
    cr_config.db_lock_prefer = "writes";
    s = open_store();
    cr_config.db_lock_prefer = "reads";
    for (int k = 0; k < RW_WRITERS; k++)
        for (int n = 0; n < RW_ENTITIES; n += 2)
            assert_true(store_create(s, "rw", mk(a, arena_printf(a, "urn:RW:%d:%d", k, n),
                                                 n % 2 ? T_A : T_B, NULL, "v", 0, NULL, 0), &p));
    for (int k = 0; k < RW_READERS; k++) {
        ra[k] = (rw_arg_t){ .s = s, .k = k, .stop = &stop };
        assert_int_equal(pthread_create(&rt[k], NULL, reader_thread, &ra[k]), 0);
    }
    for (int k = 0; k < RW_WRITERS; k++) {
        wa[k] = (rw_arg_t){ .s = s, .k = k, .stop = &stop };
        assert_int_equal(pthread_create(&wt[k], NULL, writer_thread, &wa[k]), 0);
    }
    for (int k = 0; k < RW_WRITERS; k++)
        pthread_join(wt[k], NULL);
    atomic_store(&stop, 1);
    for (int k = 0; k < RW_READERS; k++)
        pthread_join(rt[k], NULL);

    /* the indexes agree with each other: every live entity is found by id and
     * by exactly its types */
    assert_true(store_query(s, "rw", NULL, 0, RW_ENTITIES * RW_WRITERS, true, a, &pg, &p));
    size_t live = pg.n, n_a = 0, n_b = 0;
    for (size_t i = 0; i < pg.n; i++) {
        cr_entity_t *e = store_get(s, "rw", pg.items[i]->id, &p);

        assert_ptr_equal(e, pg.items[i]);
        n_a += entity_has_type(e, intern_cstr(T_A));
        n_b += entity_has_type(e, intern_cstr(T_B));
        entity_unref(e);
    }
    store_page_release(&pg);
    assert_true(store_query(s, "rw", types_filter(a, T_A), 0, 0, true, a, &pg, &p));
    assert_int_equal(pg.count, n_a);
    assert_true(store_query(s, "rw", types_filter(a, T_B), 0, 0, true, a, &pg, &p));
    assert_int_equal(pg.count, n_b);
    assert_true(store_query(s, "rw", types_filter(a, T_B "," T_A), 0, 0, true, a, &pg, &p));
    assert_int_equal(pg.count, live);

    store_close(s);
    arena_free(a);
}

/* ------------------------------------------------------------ geo index */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Uniform in [lo, hi). */
static double rndf(double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd() >> 11) / 9007199254740992.0;
}

static json_t *geojson(arena_t *a, const char *text)
{
    char    err[128];
    json_t *j = json_parse_copy(a, text, strlen(text), NULL, err, sizeof(err));

    assert_non_null(j);
    return j;
}

static const char *point_text(arena_t *a, double lon, double lat)
{
    return arena_printf(a, "{\"type\":\"Point\",\"coordinates\":[%.7f,%.7f]}", lon, lat);
}

static const char *rect_text(arena_t *a, double x0, double y0, double x1, double y1)
{
    return arena_printf(a, "{\"type\":\"Polygon\",\"coordinates\":[[[%.7f,%.7f],[%.7f,%.7f],"
                        "[%.7f,%.7f],[%.7f,%.7f],[%.7f,%.7f]]]}",
                        x0, y0, x1, y0, x1, y1, x0, y1, x0, y0);
}

/* A draft of type `type` with an integer Property n, and GeoProperties
 * location / observationSpace (GeoJSON text; NULL: absent). */
static cr_entity_t *mk_geo(arena_t *a, const char *id, const char *type, const char *loc,
                           const char *space, int64_t n)
{
    cr_entity_t *e = mk(a, id, type, NULL, "n", n, NULL, 0);
    cr_attr_t   *at = arena_calloc(a, 3 * sizeof(cr_attr_t));

    at[0] = e->attrs[0];
    e->attrs = at;
    if (loc) {
        attr_init(&at[e->n_attrs], MN.location, geojson(a, loc));
        at[e->n_attrs++].kind = ATTR_GEOPROPERTY;
    }
    if (space) {
        attr_init(&at[e->n_attrs], MN.observation_space, geojson(a, space));
        at[e->n_attrs++].kind = ATTR_GEOPROPERTY;
    }
    return e;
}

/* A random geometry around [10, 12] x [45, 47]: mostly points, some lines,
 * small and big polygons (big ones exceed the per-entity cell cap). */
static const char *rnd_geometry(arena_t *a)
{
    double   x = rndf(10.0, 12.0), y = rndf(45.0, 47.0), w;
    unsigned k = (unsigned)(rnd() % 20);

    if (k < 14)
        return point_text(a, x, y);
    if (k < 16)
        return arena_printf(a, "{\"type\":\"LineString\",\"coordinates\":[[%.7f,%.7f],[%.7f,%.7f]]}",
                            x, y, x + rndf(0.0, 0.2), y + rndf(-0.2, 0.2));
    w = k < 19 ? rndf(0.001, 0.1) : rndf(0.3, 1.5);
    return rect_text(a, x, y, x + w, y + w * rndf(0.5, 1.5));
}

static geoq_t *mk_geoq(arena_t *a, const char *georel, const char *geometry, const char *coords,
                       const char *prop)
{
    geoq_params_t gp = { georel, geometry, coords, prop };
    problem_t     p  = { 0 };
    geoq_t       *g  = geoq_parse(a, &gp, ld_core(), &p);

    assert_non_null(g);
    return g;
}

/* A random geo-query (and sometimes a type selection) over the same area. */
static entity_filter_t *rnd_geo_filter(arena_t *a)
{
    entity_filter_t *f = arena_calloc(a, sizeof(*f));
    double           x = rndf(9.8, 12.2), y = rndf(44.8, 47.2), w = rndf(0.005, 0.6);
    const char      *prop = rnd() % 5 == 0 ? "observationSpace" : NULL;
    unsigned         k = (unsigned)(rnd() % 10);

    if (k < 5)
        f->geo = mk_geoq(a, arena_printf(a, "near;maxDistance==%.0f", rndf(50.0, 40000.0)), "Point",
                         arena_printf(a, "[%.6f,%.6f]", x, y), prop);
    else if (k < 7)
        f->geo = mk_geoq(a, "within", "Polygon",
                         arena_printf(a, "[[[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f]]]",
                                      x, y, x + w, y, x + w, y + w, x, y + w, x, y), prop);
    else if (k < 9)
        f->geo = mk_geoq(a, "intersects", "Polygon",
                         arena_printf(a, "[[[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f]]]",
                                      x, y, x + w, y, x + w, y + w, x, y + w, x, y), prop);
    else
        f->geo = mk_geoq(a, rnd() % 2 ? "disjoint" : "near;minDistance==20000", "Point",
                         arena_printf(a, "[%.6f,%.6f]", x, y), prop);
    if (rnd() % 4 == 0) {
        problem_t p = { 0 };

        f->types = typesel_parse(a, rnd() % 2 ? T_A : T_B, ld_core(), &p);
        assert_non_null(f->types);
    }
    return f;
}

typedef struct brute {
    const entity_filter_t *f;
    sbuf_t                *sb;
    size_t                 n;
} brute_t;

static void brute_one(void *ud, const cr_entity_t *e)
{
    brute_t *b = ud;

    if (!filter_match(b->f, e))
        return;
    if (b->n++)
        sb_addc(b->sb, ' ');
    sb_adds(b->sb, e->id);
}

static void collect_match(void *ud, const cr_entity_t *e)
{
    brute_t *b = ud;

    if (b->n++)
        sb_addc(b->sb, ' ');
    sb_adds(b->sb, e->id);
}

/* The query through the store (whatever path it takes) equals a scan of
 * every entity through filter_match, with offsets, limits and counts. */
static void geo_check(cdb_t *db, arena_t *a, const entity_filter_t *f)
{
    sbuf_t       want, got;
    brute_t      b = { f, &want, 0 }, c = { NULL, &got, 0 };
    store_page_t pg;
    problem_t    p = { 0 };
    size_t       off, lim;

    sb_init(&want, a, 256);
    sb_init(&got, a, 256);
    assert_true(cdb_foreach(db, NULL, NULL, brute_one, &b, &p));
    sb_adds(&want, "");
    assert_true(cdb_query(db, NULL, f, 0, 1u << 30, true, a, &pg, &p));
    assert_int_equal(pg.count, b.n);
    assert_int_equal(pg.n, b.n);
    assert_string_equal(page_ids(a, &pg), want.p);
    store_page_release(&pg);

    /* foreach through the index (malloc'd candidates) */
    assert_true(cdb_foreach(db, NULL, f, collect_match, &c, &p));
    sb_adds(&got, "");
    assert_string_equal(got.p, want.p);

    /* a page in the middle, with and without the count */
    off = b.n ? (size_t)(rnd() % b.n) : 0;
    lim = 1 + (size_t)(rnd() % 5);
    for (int with_count = 0; with_count < 2; with_count++) {
        const char *ids;
        size_t      skip = off, len;
        const char *from = want.p;

        assert_true(cdb_query(db, NULL, f, off, lim, with_count, a, &pg, &p));
        ids = page_ids(a, &pg);
        while (skip && *from) {             /* the expected page, from the brute list */
            from = strchr(from, ' ');
            from = from ? from + 1 : "";
            skip--;
        }
        len = 0;
        for (size_t k = 0, sp = 0; from[k]; k++) {
            if (from[k] == ' ' && ++sp == lim)
                break;
            len = k + 1;
        }
        assert_int_equal(strlen(ids), len);
        assert_memory_equal(ids, from, len);
        assert_int_equal(pg.count, with_count ? b.n : 0);
        store_page_release(&pg);
    }
}

static void geo_check_many(cdb_t *db, arena_t *a, int n)
{
    for (int i = 0; i < n; i++)
        geo_check(db, a, rnd_geo_filter(a));
}

static void drop_change(store_change_t *ch)
{
    if (ch->before)
        entity_unref(ch->before);
    if (ch->after)
        entity_unref(ch->after);
}

/* The geo index gives the same answers as a full scan, through creates,
 * moves, lost and gained locations, deletes, purges and compaction. */
static void test_geo_index(void **state)
{
    arena_t       *a  = arena_new(1 << 16);
    arena_t       *qa = arena_new(1 << 16);
    cdb_t         *db;
    problem_t      p  = { 0 };
    store_change_t ch;
    cdb_shape_t    sh;
    const int      n  = 4000;
    size_t         deleted, want;
    bool           created;

    (void)state;
    db = cdb_open(false, &p);
    assert_non_null(db);
    for (int i = 0; i < n; i++) {
        const char *loc   = rnd() % 10 ? rnd_geometry(a) : NULL;    /* 10% without */
        const char *space = rnd() % 4 ? NULL : rnd_geometry(a);

        assert_true(cdb_create(db, NULL, mk_geo(a, arena_printf(a, "urn:ngsi-ld:G:%05d", i),
                                                i % 3 ? T_A : T_B, loc, space, i), &ch, &p));
        drop_change(&ch);
        arena_reset(a);
    }
    assert_true(cdb_tenant_shape(db, NULL, &sh));
    assert_int_equal(sh.geo_grids, 2);
    assert_true(sh.geo_entries > (size_t)n / 2);
    assert_true(sh.geo_large > 0);                  /* the big polygons */
    assert_true(sh.geo_level < 7);                  /* sparse data: coarser than the start */
    geo_check_many(db, qa, 150);
    arena_reset(qa);
    assert_true(cdb_tenant_shape(db, NULL, &sh));
    assert_true(sh.geo_scans > 50);                 /* the index was used */

    /* A GeoProperty no entity has: nothing, without a scan. */
    {
        entity_filter_t f = { 0 };

        f.geo = mk_geoq(qa, "near;maxDistance==1000", "Point", "[11,46]", "operationSpace");
        geo_check(db, qa, &f);
        f.geo = mk_geoq(qa, "within", "Polygon", "[[[0,0],[1,0],[1,1],[0,1],[0,0]]]", NULL);
        geo_check(db, qa, &f);
        arena_reset(qa);
    }

    /* Moves: replace (new location, or none), merge-style updates. */
    for (int i = 0; i < 3000; i++) {
        int         k   = (int)(rnd() % n);
        const char *loc = rnd() % 8 ? rnd_geometry(a) : NULL;

        assert_true(cdb_upsert(db, NULL, mk_geo(a, arena_printf(a, "urn:ngsi-ld:G:%05d", k),
                                                k % 3 ? T_A : T_B, loc,
                                                rnd() % 3 ? NULL : rnd_geometry(a), -k),
                               true, &created, a, &ch, &p));
        assert_false(created);
        drop_change(&ch);
        arena_reset(a);
    }
    for (int i = 0; i < 500; i++) {                 /* PATCH .../attrs: the location only */
        int          k = (int)(rnd() % n);
        cr_entity_t *patch = mk_geo(a, NULL, NULL, rnd_geometry(a), NULL, 0);
        op_result_t  res = { 0 };

        patch->attrs++;                             /* drop "n": the location alone */
        patch->n_attrs--;
        assert_true(cdb_modify(db, NULL, arena_printf(a, "urn:ngsi-ld:G:%05d", k), OP_UPDATE_ATTRS,
                               patch, NULL, &res, a, &ch, &p));
        drop_change(&ch);
        arena_reset(a);
    }
    geo_check_many(db, qa, 150);
    arena_reset(qa);

    /* Deletes, then a purge by a geo-query. */
    for (int i = 0; i < n; i += 7) {
        assert_true(cdb_delete(db, NULL, arena_printf(a, "urn:ngsi-ld:G:%05d", i), NULL, &ch, &p));
        drop_change(&ch);
    }
    arena_reset(a);
    geo_check_many(db, qa, 50);
    {
        entity_filter_t f = { 0 };
        brute_t         b;
        sbuf_t          sb;

        sb_init(&sb, qa, 64);
        b = (brute_t){ &f, &sb, 0 };
        f.geo = mk_geoq(qa, "within", "Polygon",
                        "[[[10.5,45.5],[11.5,45.5],[11.5,46.5],[10.5,46.5],[10.5,45.5]]]", NULL);
        assert_true(cdb_foreach(db, NULL, NULL, brute_one, &b, &p));
        want = b.n;
        assert_true(want > 100);
        assert_true(cdb_purge(db, NULL, &f, &deleted, NULL, NULL, &p));
        assert_int_equal(deleted, want);
        geo_check(db, qa, &f);                      /* nothing left in there */
        arena_reset(qa);
    }
    geo_check_many(db, qa, 50);
    arena_reset(qa);

    /* Compaction: delete most of the rest; the entries are renumbered. */
    assert_true(cdb_tenant_shape(db, NULL, &sh));
    {
        size_t compactions = sh.compactions;

        for (int i = 0; i < n; i++) {
            if (i % 5 == 0)
                continue;
            if (cdb_delete(db, NULL, arena_printf(a, "urn:ngsi-ld:G:%05d", i), NULL, &ch, &p))
                drop_change(&ch);
        }
        arena_reset(a);
        assert_true(cdb_tenant_shape(db, NULL, &sh));
        assert_true(sh.compactions > compactions);
    }
    geo_check_many(db, qa, 100);
    arena_reset(qa);

    /* New entities after compaction (fresh slots), then everything goes. */
    for (int i = 0; i < 2000; i++) {
        assert_true(cdb_create(db, NULL, mk_geo(a, arena_printf(a, "urn:ngsi-ld:H:%05d", i), T_A,
                                                rnd_geometry(a), NULL, i), &ch, &p));
        drop_change(&ch);
        arena_reset(a);
    }
    geo_check_many(db, qa, 100);
    arena_reset(qa);
    assert_true(cdb_purge(db, NULL, NULL, &deleted, NULL, NULL, &p));
    assert_true(cdb_tenant_shape(db, NULL, &sh));
    assert_int_equal(sh.live, 0);
    assert_int_equal(sh.geo_entries, 0);
    geo_check_many(db, qa, 10);

    cdb_close(db);
    arena_free(qa);
    arena_free(a);
}

/* A within-query over [x, y] .. [x + w, y + w] (and sometimes a type selection). */
static entity_filter_t *box_filter(arena_t *a, double x, double y, double w)
{
    entity_filter_t *f = arena_calloc(a, sizeof(*f));

    f->geo = mk_geoq(a, rnd() % 2 ? "within" : "intersects", "Polygon",
                     arena_printf(a, "[[[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f],[%.6f,%.6f]]]",
                                  x, y, x + w, y, x + w, y + w, x, y + w, x, y), NULL);
    return f;
}

/* One of the grid's churn: a new entity i, then (from i >= 1000, while the
 * level is being chosen) a move of a random earlier one and, every 7th, a
 * delete; gen gives the geometries. */
static void geo_churn(cdb_t *db, arena_t *a, int i, const char *(*gen)(arena_t *))
{
    store_change_t ch;
    problem_t      p = { 0 };
    bool           created;

    assert_true(cdb_create(db, NULL, mk_geo(a, arena_printf(a, "urn:ngsi-ld:R:%05d", i), i % 3 ? T_A : T_B,
                                            gen(a), NULL, i), &ch, &p));
    drop_change(&ch);
    if (i >= 1000) {
        int k = (int)(rnd() % (uint64_t)i);

        if (cdb_upsert(db, NULL, mk_geo(a, arena_printf(a, "urn:ngsi-ld:R:%05d", k), k % 3 ? T_A : T_B,
                                        rnd() % 10 ? gen(a) : NULL, NULL, -k),
                       true, &created, a, &ch, &p))
            drop_change(&ch);
        if (i % 7 == 0 && cdb_delete(db, NULL, arena_printf(a, "urn:ngsi-ld:R:%05d", (int)(rnd() % (uint64_t)i)),
                                     NULL, &ch, &p))
            drop_change(&ch);
    }
    arena_reset(a);
}

static double dense_x, dense_y;

static const char *dense_point(arena_t *a)
{
    return point_text(a, dense_x + rndf(0.0, 0.01), dense_y + rndf(0.0, 0.01));
}

/* geoidx.c: a level change is a rebuild spread over the writes that follow
 * (GEO_MIGRATE slots each), not an O(entities) pass under the tenant lock.
 * Queries stay exact before, during and after each one, through creates,
 * moves and deletes of entities already in the new grid and not yet, and a
 * compaction that drops a rebuild under way; the levels end where the
 * occupancy asks: coarser for entities spread over 2 x 2 degrees, finer for
 * entities packed into 0.01 x 0.01 degrees. */
static void test_geo_rebuild_incremental(void **state)
{
    arena_t    *a  = arena_new(1 << 16);
    arena_t    *qa = arena_new(1 << 16);
    problem_t   p  = { 0 };
    cdb_shape_t sh;

    (void)state;
    for (int dense = 0; dense < 2; dense++) {
        cdb_t *db = cdb_open(false, &p);
        int    changes = 0, level = 7, n = 3000, checked_under_way = 0;

        assert_non_null(db);
        dense_x = 11.0, dense_y = 46.0;
        for (int i = 0; i < n; i++) {
            geo_churn(db, a, i, dense ? dense_point : rnd_geometry);
            if (i >= 1000 && i % 40 == 0) {
                assert_true(cdb_tenant_shape(db, NULL, &sh));
                checked_under_way += sh.geo_next_level != 0;
                if (dense)
                    geo_check(db, qa, box_filter(qa, 11.0 + rndf(0.0, 0.008), 46.0 + rndf(0.0, 0.008),
                                                 rndf(0.0005, 0.004)));
                else
                    geo_check_many(db, qa, 2);
                arena_reset(qa);
            }
            assert_true(cdb_tenant_shape(db, NULL, &sh));
            if (sh.geo_level != level)
                changes++, level = sh.geo_level;
        }
        if (dense)
            assert_true(level > 8);                 /* one step per rebuild: several of them */
        else
            assert_true(level < 5);
        assert_true(changes >= 2);
        assert_true(checked_under_way > 0);         /* queries ran while a rebuild was under way */

        /* Deletes of most (compactions, maybe under a rebuild), checked as they go. */
        {
            size_t compactions = sh.compactions;
            store_change_t ch;

            for (int i = 0; i < n; i++) {
                if (i % 5 == 0)
                    continue;
                if (cdb_delete(db, NULL, arena_printf(a, "urn:ngsi-ld:R:%05d", i), NULL, &ch, &p))
                    drop_change(&ch);
                arena_reset(a);
                if (i % 97 == 0) {
                    geo_check(db, qa, dense ? box_filter(qa, 11.0, 46.0, 0.005) : rnd_geo_filter(qa));
                    arena_reset(qa);
                }
            }
            assert_true(cdb_tenant_shape(db, NULL, &sh));
            assert_true(sh.compactions > compactions);
        }
        for (int i = n; i < n + 1500; i++)              /* and new ones after it */
            geo_churn(db, a, i, dense ? dense_point : rnd_geometry);
        for (int k = 0; k < 20; k++) {
            geo_check(db, qa, dense ? box_filter(qa, 11.0 + rndf(0.0, 0.008), 46.0 + rndf(0.0, 0.008),
                                                 rndf(0.0005, 0.004))
                                    : rnd_geo_filter(qa));
            arena_reset(qa);
        }
        cdb_close(db);
    }
    arena_free(qa);
    arena_free(a);
}

/* One polygon covering many cells, points around and inside it, an entity
 * with two location instances (datasetIds), and entities stacked on one spot
 * (the level must not run to the finest). */
static void test_geo_shapes(void **state)
{
    arena_t       *a  = arena_new(1 << 16);
    cdb_t         *db;
    problem_t      p  = { 0 };
    store_change_t ch;
    cdb_shape_t    sh;
    cr_entity_t   *e;

    (void)state;
    db = cdb_open(false, &p);
    assert_non_null(db);

    /* 3000 entities on the same point. */
    for (int i = 0; i < 3000; i++) {
        assert_true(cdb_create(db, NULL, mk_geo(a, arena_printf(a, "urn:ngsi-ld:S:%05d", i), T_A,
                                                point_text(a, 2.35, 48.85), NULL, i), &ch, &p));
        drop_change(&ch);
        arena_reset(a);
    }
    assert_true(cdb_tenant_shape(db, NULL, &sh));
    assert_true(sh.geo_level <= 8);
    assert_true(sh.geo_bytes < 3000 * 16);

    /* A polygon over 0.04 x 0.04 degrees (a few cells) and one over 3 degrees. */
    assert_true(cdb_create(db, NULL, mk_geo(a, "urn:ngsi-ld:P:small", T_B,
                                            rect_text(a, 2.30, 48.80, 2.34, 48.84), NULL, 0),
                           &ch, &p));
    drop_change(&ch);
    assert_true(cdb_create(db, NULL, mk_geo(a, "urn:ngsi-ld:P:big", T_B,
                                            rect_text(a, 0.5, 47.0, 3.5, 50.0), NULL, 0), &ch, &p));
    drop_change(&ch);

    /* Two instances of location: one near Paris, one near Lyon. */
    e = mk_geo(a, "urn:ngsi-ld:P:two", T_B, point_text(a, 2.29, 48.81), NULL, 0);
    e->attrs[e->n_attrs] = e->attrs[e->n_attrs - 1];
    e->attrs[e->n_attrs].value      = geojson(a, point_text(a, 4.83, 45.76));
    e->attrs[e->n_attrs].dataset_id = "urn:ngsi-ld:ds:lyon";
    e->n_attrs++;
    assert_true(cdb_create(db, NULL, e, &ch, &p));
    drop_change(&ch);

    for (int i = 0; i < 200; i++) {
        entity_filter_t f = { 0 };
        double          x = rndf(0.0, 6.0), y = rndf(45.0, 51.0);

        f.geo = mk_geoq(a, arena_printf(a, "near;maxDistance==%.0f", rndf(10.0, 80000.0)), "Point",
                        arena_printf(a, "[%.5f,%.5f]", x, y), NULL);
        geo_check(db, a, &f);
        f.geo = mk_geoq(a, "intersects", "Point", arena_printf(a, "[%.5f,%.5f]", x, y), NULL);
        geo_check(db, a, &f);
        arena_reset(a);
    }
    {
        entity_filter_t f = { 0 };
        store_page_t    pg;

        f.geo = mk_geoq(a, "near;maxDistance==500", "Point", "[4.83,45.76]", NULL);
        assert_true(cdb_query(db, NULL, &f, 0, 10, true, a, &pg, &p));
        assert_string_equal(page_ids(a, &pg), "urn:ngsi-ld:P:two");
        store_page_release(&pg);
        f.geo = mk_geoq(a, "intersects", "Point", "[2.32,48.82]", NULL);
        assert_true(cdb_query(db, NULL, &f, 0, 10, true, a, &pg, &p));
        assert_string_equal(page_ids(a, &pg), "urn:ngsi-ld:P:small urn:ngsi-ld:P:big");
        store_page_release(&pg);
        /* The Lyon instance goes; the Paris one stays. */
        e = mk_geo(a, "urn:ngsi-ld:P:two", T_B, point_text(a, 2.29, 48.81), NULL, 0);
        assert_true(cdb_upsert(db, NULL, e, true, NULL, a, &ch, &p));
        drop_change(&ch);
        f.geo = mk_geoq(a, "near;maxDistance==500", "Point", "[4.83,45.76]", NULL);
        geo_check(db, a, &f);
        assert_true(cdb_query(db, NULL, &f, 0, 10, true, a, &pg, &p));
        assert_int_equal(pg.count, 0);
        store_page_release(&pg);
        f.geo = mk_geoq(a, "near;maxDistance==500", "Point", "[2.29,48.81]", NULL);
        assert_true(cdb_query(db, NULL, &f, 0, 10, true, a, &pg, &p));
        assert_string_equal(page_ids(a, &pg), "urn:ngsi-ld:P:big urn:ngsi-ld:P:two");  /* small: 730 m */
        store_page_release(&pg);
        arena_reset(a);
    }

    cdb_close(db);
    arena_free(a);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void count_match(void *ud, const cr_entity_t *e)
{
    brute_t *b = ud;

    b->n += filter_match(b->f, e);
}

/* Benchmark, printed and not asserted (doc/performance.md): near-queries over
 * 100,000 points through the index and by a scan of every entity; memory. */
static void test_geo_bench(void **state)
{
    arena_t       *a = arena_new(1 << 16);
    cdb_t         *db;
    problem_t      p = { 0 };
    store_change_t ch;
    cdb_shape_t    sh;
    const int      n = 100000, q = 200;
    double         t0, t_idx, t_scan, t_parse;
    size_t         found = 0, found_scan = 0;

    (void)state;
    db = cdb_open(false, &p);
    assert_non_null(db);
    for (int i = 0; i < n; i++) {
        assert_true(cdb_create(db, NULL, mk_geo(a, arena_printf(a, "urn:ngsi-ld:V:%06d", i), T_A,
                                                point_text(a, rndf(2.0, 3.0), rndf(48.5, 49.2)),
                                                NULL, i), &ch, &p));
        drop_change(&ch);
        arena_reset(a);
    }
    assert_true(cdb_tenant_shape(db, NULL, &sh));

    rng_state = 42;
    t0 = now_s();
    for (int i = 0; i < q; i++) {
        entity_filter_t f = { 0 };
        store_page_t    pg;

        f.geo = mk_geoq(a, "near;maxDistance==1000", "Point",
                        arena_printf(a, "[%.5f,%.5f]", rndf(2.0, 3.0), rndf(48.5, 49.2)), NULL);
        assert_true(cdb_query(db, NULL, &f, 0, 100, true, a, &pg, &p));
        found += pg.count;
        store_page_release(&pg);
        arena_reset(a);
    }
    t_idx = now_s() - t0;

    rng_state = 42;
    t0 = now_s();
    for (int i = 0; i < q; i++) {
        entity_filter_t f = { 0 };
        brute_t         b = { &f, NULL, 0 };

        f.geo = mk_geoq(a, "near;maxDistance==1000", "Point",
                        arena_printf(a, "[%.5f,%.5f]", rndf(2.0, 3.0), rndf(48.5, 49.2)), NULL);
        assert_true(cdb_foreach(db, NULL, NULL, count_match, &b, &p));
        found_scan += b.n;
        arena_reset(a);
    }
    t_scan = now_s() - t0;
    assert_int_equal(found, found_scan);

    rng_state = 42;                         /* what parsing the query costs in both */
    t0 = now_s();
    for (int i = 0; i < q; i++) {
        assert_non_null(mk_geoq(a, "near;maxDistance==1000", "Point",
                                arena_printf(a, "[%.5f,%.5f]", rndf(2.0, 3.0), rndf(48.5, 49.2)),
                                NULL));
        arena_reset(a);
    }
    t_parse = now_s() - t0;

    print_message("geo index: %d points, near;maxDistance==1000 (%.1f matches): "
                  "index %.1f us/query, full scan %.1f us/query (x%.0f), of which geoq_parse %.1f us; "
                  "grid level %d, geo index %.1f bytes/entity, all indexes %.1f, frozen block %.1f\n",
                  n, (double)found / q, t_idx / q * 1e6, t_scan / q * 1e6, t_scan / t_idx,
                  t_parse / q * 1e6,
                  sh.geo_level, (double)sh.geo_bytes / n, (double)sh.index_bytes / n,
                  (double)sh.entity_bytes / n);
    assert_true(sh.geo_bytes / n <= 16);
    assert_true((sh.index_bytes + sh.entity_bytes) / n <= 1024);
    cdb_close(db);
    arena_free(a);
}


/* ------------------------------------------------ the change stream */

#define ORD_THREADS  4
#define ORD_ROUNDS   1500
#define ORD_MANY     64

/* What the hook saw, per tenant: the last seq and time, and the last version
 * of each entity (a reference). */
/* An entity with a location (so the geo index has something to release). */
static cr_entity_t *mk_geo_free(arena_t *a, int i)
{
    return mk_geo(a, arena_printf(a, "urn:R:%d", i), T_A, point_text(a, 10 + i * 1e-3, 45), NULL, i);
}

static void count_type(void *ud, const char *type)
{
    (void)type;
    (*(size_t *)ud)++;
}

typedef struct ord_tenant {
    uint64_t     seq;
    int64_t      at;
    uint64_t     changes, groups;
    cr_entity_t *last[ORD_MANY];        /* by entity number */
    bool         bad;
    char         why[160];
} ord_tenant_t;

typedef struct ord {
    pthread_mutex_t mu;                 /* the hook of two tenants may run at once */
    ord_tenant_t    one, many;
} ord_t;

static int ord_index(const char *id)
{
    const char *c = strrchr(id, ':');

    return c ? atoi(c + 1) % ORD_MANY : 0;
}

static void ord_hook(void *ud, const store_change_t *g, size_t n)
{
    ord_t        *o = ud;
    ord_tenant_t *t;

    pthread_mutex_lock(&o->mu);
    t = strcmp(g[0].tenant, "o1") == 0 ? &o->one : &o->many;
    t->groups++;
    for (size_t i = 0; i < n; i++) {
        const store_change_t *ch = &g[i];
        const cr_entity_t    *v  = ch->after ? ch->after : ch->before;
        int                   k  = ord_index(v->id);

        if (!t->bad && (ch->seq != t->seq + 1 || ch->at <= t->at)) {
            t->bad = true;
            snprintf(t->why, sizeof(t->why), "seq %llu after %llu, at %lld after %lld",
                     (unsigned long long)ch->seq, (unsigned long long)t->seq,
                     (long long)ch->at, (long long)t->at);
        }
        if (!t->bad && ch->after && ch->after->modified_at != ch->at) {
            t->bad = true;
            snprintf(t->why, sizeof(t->why), "modifiedAt %lld is not the commit time %lld",
                     (long long)ch->after->modified_at, (long long)ch->at);
        }
        if (!t->bad && ch->before && ch->after && ch->after->modified_at <= ch->before->modified_at) {
            t->bad = true;
            snprintf(t->why, sizeof(t->why), "modifiedAt went backwards");
        }
        t->seq = ch->seq;
        t->at  = ch->at;
        t->changes++;
        if (t->last[k])
            entity_unref(t->last[k]);
        t->last[k] = ch->after;
        if (ch->after)
            entity_ref(ch->after);
    }
    pthread_mutex_unlock(&o->mu);
}

typedef struct ord_arg {
    store_t *s;
    int      k;
} ord_arg_t;

static void *ord_thread(void *ud)
{
    ord_arg_t *w    = ud;
    arena_t   *a    = arena_new(1 << 15);
    unsigned   seed = 7u + (unsigned)w->k;

    for (int i = 0; i < ORD_ROUNDS; i++) {
        problem_t   p = { 0 };
        int         n = (int)(rand_r(&seed) % ORD_MANY);
        const char *id = arena_printf(a, "urn:O:%d", n);

        /* one entity, every thread */
        if (!store_modify(w->s, "o1", "urn:O:0", OP_MERGE_ENTITY,
                          mk(a, NULL, NULL, NULL, arena_printf(a, "t%d", w->k), i, NULL, 0), NULL,
                          NULL, a, &p))
            fail_msg("merge: %s", p.detail);
        /* many entities */
        switch (rand_r(&seed) % 5) {
        case 0:
            if (!store_delete(w->s, "o2", id, &p) && p.kind != PB_RESOURCE_NOT_FOUND)
                fail_msg("delete: %s", p.detail);
            break;
        case 1:
            if (!store_create(w->s, "o2", mk(a, id, T_A, NULL, "v", i, NULL, 0), &p) &&
                p.kind != PB_ALREADY_EXISTS)
                fail_msg("create: %s", p.detail);
            break;
        case 2: {
            store_batch_item_t it[3] = { 0 };

            for (int j = 0; j < 3; j++) {
                int m = (n + j) % ORD_MANY;

                it[j].kind  = j == 2 ? STORE_B_DELETE : STORE_B_UPSERT;
                it[j].draft = mk(a, arena_printf(a, "urn:O:%d", m), T_B, NULL, "v", i, NULL, 0);
                it[j].id    = it[j].draft->id;
            }
            if (!store_batch(w->s, "o2", it, 3, a, &p))
                fail_msg("batch: %s", p.detail);
            break;
        }
        default:
            if (!store_modify(w->s, "o2", id, OP_MERGE_ENTITY,
                              mk(a, NULL, NULL, NULL, "v", i, "w", w->k), NULL, NULL, a, &p) &&
                p.kind != PB_RESOURCE_NOT_FOUND)
                fail_msg("merge: %s", p.detail);
        }
        arena_reset(a);
    }
    arena_free(a);
    return NULL;
}

/* Section 1 of issue 10: concurrent writers on one entity and on many; the
 * hook sees each tenant's sequence strictly increasing and dense, commit
 * times strictly increasing, modifiedAt = commit time, and the last version
 * it saw of every entity is the stored one. */
static void test_change_order(void **state)
{
    arena_t     *a = arena_new(1 << 16);
    store_t     *s = open_store();
    problem_t    p = { 0 };
    pthread_t    th[ORD_THREADS];
    ord_arg_t    args[ORD_THREADS];
    ord_t        o;

    (void)state;
    memset(&o, 0, sizeof(o));
    pthread_mutex_init(&o.mu, NULL);
    store_add_hook(s, ord_hook, &o);
    assert_true(store_create(s, "o1", mk(a, "urn:O:0", T_A, NULL, NULL, 0, NULL, 0), &p));
    /* o2 exists before the writers start (a merge or delete on a tenant never
     * written is NonexistentTenant, which depends on who comes first) */
    assert_true(store_create(s, "o2", mk(a, "urn:O:1", T_A, NULL, NULL, 0, NULL, 0), &p));
    for (int k = 0; k < ORD_THREADS; k++) {
        args[k] = (ord_arg_t){ s, k };
        assert_int_equal(pthread_create(&th[k], NULL, ord_thread, &args[k]), 0);
    }
    for (int k = 0; k < ORD_THREADS; k++)
        pthread_join(th[k], NULL);

    if (o.one.bad)
        fail_msg("o1: %s", o.one.why);
    if (o.many.bad)
        fail_msg("o2: %s", o.many.why);
    assert_int_equal(o.one.changes, 1 + ORD_THREADS * ORD_ROUNDS);
    assert_true(o.many.groups < o.many.changes);          /* batches came as groups */
    for (int k = 0; k < ORD_MANY; k++) {
        const char  *tn = k ? "o2" : "o1";
        cr_entity_t *e  = store_get(s, tn, arena_printf(a, "urn:O:%d", k), &p);
        cr_entity_t *l  = k ? o.many.last[k] : o.one.last[0];

        assert_ptr_equal(e, l);                           /* NULL both when deleted */
        if (e)
            entity_unref(e);
    }
    for (int k = 0; k < ORD_MANY; k++) {
        if (o.one.last[k])
            entity_unref(o.one.last[k]);
        if (o.many.last[k])
            entity_unref(o.many.last[k]);
    }
    store_close(s);
    pthread_mutex_destroy(&o.mu);
    arena_free(a);
}

typedef struct attrs_seen {
    store_op_t op;
    uint32_t   c, u, d;
    size_t     n;
} attrs_seen_t;

static void attrs_hook(void *ud, const store_change_t *g, size_t n)
{
    attrs_seen_t *as = ud;

    as->op = g[n - 1].op;
    as->c  = g[n - 1].n_created;
    as->u  = g[n - 1].n_updated;
    as->d  = g[n - 1].n_deleted;
    as->n  = n;
}

/* The operation and the attributes created / updated / deleted of each change;
 * a batch and a purge as groups. */
static void test_change_attrs(void **state)
{
    arena_t           *a  = arena_new(1 << 16);
    store_t           *s  = open_store();
    problem_t          p  = { 0 };
    attrs_seen_t       as = { 0 };
    op_args_t          da = { 0 };
    store_batch_item_t it[4] = { 0 };
    size_t             n;

    (void)state;
    store_add_hook(s, attrs_hook, &as);
    assert_true(store_create(s, "ca", mk(a, "urn:C:1", T_A, NULL, "x", 1, "y", 2), &p));
    assert_int_equal(as.op, STORE_OP_CREATE);
    assert_int_equal(as.c, 2);
    assert_true(store_modify(s, "ca", "urn:C:1", OP_MERGE_ENTITY,
                             mk(a, NULL, NULL, NULL, "x", 5, "z", 3), NULL, NULL, a, &p));
    assert_int_equal(as.op, STORE_OP_MERGE);
    assert_int_equal(as.c, 1);
    assert_int_equal(as.u, 1);
    assert_int_equal(as.d, 0);
    da.attr_name = iri(a, ATTR, "y");
    assert_true(store_modify(s, "ca", "urn:C:1", OP_DELETE_ATTR, NULL, &da, NULL, a, &p));
    assert_int_equal(as.op, STORE_OP_DELETE_ATTR);
    assert_int_equal(as.d, 1);
    assert_int_equal(as.c + as.u, 0);
    assert_true(store_delete(s, "ca", "urn:C:1", &p));
    assert_int_equal(as.op, STORE_OP_DELETE);
    assert_int_equal(as.d, 2);
    assert_string_equal(store_op_name(STORE_OP_DELETE_ATTR), "deleteAttribute");

    /* A batch: one group of the items that committed. */
    for (int i = 0; i < 4; i++) {
        it[i].kind  = STORE_B_CREATE;
        it[i].draft = mk(a, arena_printf(a, "urn:C:b%d", i % 3), T_A, NULL, "x", i, NULL, 0);
    }
    assert_true(store_batch(s, "ca", it, 4, a, &p));
    assert_int_equal(as.n, 3);
    assert_true(it[0].ok && it[1].ok && it[2].ok && !it[3].ok);
    assert_int_equal(it[3].problem->kind, PB_ALREADY_EXISTS);

    /* update (append), merge, delete; a missing entity fails alone */
    memset(it, 0, sizeof(it));
    it[0].kind  = STORE_B_UPDATE;
    it[0].draft = mk(a, "urn:C:b0", NULL, NULL, "n", 7, NULL, 0);
    it[1].kind  = STORE_B_MERGE;
    it[1].draft = mk(a, "urn:C:b1", NULL, NULL, "x", 9, NULL, 0);
    it[2].kind  = STORE_B_DELETE;
    it[2].id    = "urn:C:b2";
    it[3].kind  = STORE_B_MERGE;
    it[3].draft = mk(a, "urn:C:none", NULL, NULL, "x", 9, NULL, 0);
    assert_true(store_batch(s, "ca", it, 4, a, &p));
    assert_true(it[0].ok && it[1].ok && it[2].ok && !it[3].ok);
    assert_int_equal(it[3].problem->kind, PB_RESOURCE_NOT_FOUND);
    assert_int_equal(as.n, 3);
    assert_int_equal(as.op, STORE_OP_DELETE);
    {
        cr_entity_t *e = store_get(s, "ca", "urn:C:b1", &p);

        assert_non_null(e);
        assert_int_equal(attr_int(a, e, "x"), 9);
        entity_unref(e);
        e = store_get(s, "ca", "urn:C:b0", &p);
        assert_non_null(e);
        assert_int_equal(attr_int(a, e, "n"), 7);
        assert_int_equal(attr_int(a, e, "x"), 0);
        entity_unref(e);
    }

    /* A purge: groups of STORE_PURGE_CHUNK at most. */
    for (int i = 0; i < 600; i++)
        assert_true(store_create(s, "ca", mk(a, arena_printf(a, "urn:C:p%d", i), T_B, NULL, "x",
                                             i, NULL, 0), &p));
    assert_true(store_purge(s, "ca", types_filter(a, T_B), &n, &p));
    assert_int_equal(n, 600);
    assert_int_equal(as.op, STORE_OP_PURGE);
    assert_true(as.n >= 1 && as.n <= STORE_PURGE_CHUNK);
    store_close(s);
    arena_free(a);
}

/* ?type= preconditions checked in the atomic step. */
static void test_preconditions(void **state)
{
    arena_t     *a = arena_new(1 << 16);
    store_t     *s = open_store();
    problem_t    p = { 0 };
    op_args_t    args = { 0 };
    cr_entity_t *e;

    (void)state;
    assert_true(store_create(s, "pc", mk(a, "urn:P:1", T_A, NULL, "x", 1, NULL, 0), &p));
    args.if_type = types_filter(a, T_B)->types;
    assert_false(store_modify(s, "pc", "urn:P:1", OP_MERGE_ENTITY,
                              mk(a, NULL, NULL, NULL, "x", 2, NULL, 0), &args, NULL, a, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_false(store_delete_if(s, "pc", "urn:P:1", args.if_type, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    e = store_get(s, "pc", "urn:P:1", &p);
    assert_non_null(e);
    assert_int_equal(attr_int(a, e, "x"), 1);
    entity_unref(e);
    args.if_type = types_filter(a, T_A "," T_B)->types;
    assert_true(store_modify(s, "pc", "urn:P:1", OP_MERGE_ENTITY,
                             mk(a, NULL, NULL, NULL, "x", 2, NULL, 0), &args, NULL, a, &p));
    assert_true(store_delete_if(s, "pc", "urn:P:1", args.if_type, &p));
    store_close(s);
    arena_free(a);
}

/* --maxTenants, and an emptied tenant giving its memory back. */
static void test_tenant_limits(void **state)
{
    arena_t    *a = arena_new(1 << 16);
    int         saved = cr_config.max_tenants;
    store_t    *s;
    problem_t   p = { 0 };
    cdb_t      *db;
    cdb_shape_t sh;
    store_page_t pg;
    store_change_t ch;

    (void)state;
    cr_config.max_tenants = 3;                  /* the default one and two more */
    s = open_store();
    assert_true(store_create(s, "l1", mk(a, "urn:L:1", T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_true(store_create(s, "l2", mk(a, "urn:L:1", T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_false(store_create(s, "l3", mk(a, "urn:L:1", T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_int_equal(p.kind, PB_OPERATION_NOT_SUPPORTED);
    assert_non_null(strstr(p.detail, "--maxTenants"));
    assert_false(store_tenant_exists(s, "l3"));
    assert_true(store_create(s, "l2", mk(a, "urn:L:2", T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_true(store_create(s, NULL, mk(a, "urn:L:2", T_A, NULL, NULL, 0, NULL, 0), &p));
    store_close(s);
    cr_config.max_tenants = saved;

    db = cdb_open(false, &p);
    for (int i = 0; i < 500; i++) {
        assert_true(cdb_create(db, "rel", mk_geo_free(a, i), &ch, &p));
        drop_change(&ch);
    }
    assert_true(cdb_tenant_shape(db, "rel", &sh));
    assert_true(sh.index_bytes > 500 * 8);
    for (int i = 0; i < 500; i++) {
        assert_true(cdb_delete(db, "rel", arena_printf(a, "urn:R:%d", i), NULL, &ch, &p));
        drop_change(&ch);
    }
    assert_true(cdb_tenant_shape(db, "rel", &sh));
    assert_int_equal(sh.releases, 1);
    assert_int_equal(sh.index_bytes, 0);
    assert_true(cdb_tenant_exists(db, "rel"));  /* reads answer as before */
    assert_true(cdb_query(db, "rel", NULL, 0, 10, true, a, &pg, &p));
    assert_int_equal(pg.n, 0);
    assert_true(cdb_create(db, "rel", mk_geo_free(a, 1), &ch, &p));
    drop_change(&ch);
    assert_true(cdb_query(db, "rel", NULL, 0, 10, true, a, &pg, &p));
    assert_int_equal(pg.count, 1);
    store_page_release(&pg);
    cdb_close(db);
    arena_free(a);
}

/* orderBy (4.23) through the store contract: every page of the bounded
 * heap is the slice of the full order, the count is exact, offsets past the
 * end give nothing. */
static void test_order_by_pages(void **state)
{
    arena_t        *a = arena_new(1 << 16);
    store_t        *s = open_store();
    problem_t       p = { 0 };
    order_term_t    t[2] = {{.key = ORDER_ATTR, .dir = ORDER_DESC}, {.key = ORDER_ID, .dir = ORDER_ASC}};
    entity_order_t  o = {.terms = t, .n = 2};
    entity_filter_t f = { .order_by = &o };
    store_page_t    pg;
    const int       N = 300;

    (void)state;
    t[0].attr = iri(a, ATTR, "v");
    for (int i = 0; i < N; i++)
        assert_true(store_create(s, "ord", mk(a, arena_printf(a, "urn:O:%03d", i), T_A, NULL, "v", (i * 37) % 50,
                                             NULL, 0), &p));
    /* the expected order: v descending, then id */
    int want[300], k = 0;
    for (int v = 49; v >= 0; v--)
        for (int i = 0; i < N; i++)
            if ((i * 37) % 50 == v)
                want[k++] = i;
    for (size_t off = 0; off <= (size_t)N + 10; off += 25) {
        assert_true(store_query(s, "ord", &f, off, 25, true, a, &pg, &p));
        assert_int_equal(pg.count, N);
        assert_int_equal(pg.n, off >= (size_t)N ? 0 : (size_t)N - off < 25 ? (size_t)N - off : 25);
        for (size_t i = 0; i < pg.n; i++)
            assert_string_equal(pg.items[i]->id, arena_printf(a, "urn:O:%03d", want[off + i]));
        store_page_release(&pg);
    }
    assert_true(store_query(s, "ord", &f, 0, 0, true, a, &pg, &p));      /* count only */
    assert_int_equal(pg.n, 0);
    assert_int_equal(pg.count, N);
    store_close(s);
    arena_free(a);
}

/* Every page of f through the ordered index equals the bounded heap's
 * (--orderIndexes 0), and the count is the same. */
static void order_pages_agree(store_t *s, const entity_filter_t *f, arena_t *a)
{
    problem_t    p = { 0 };
    store_page_t ref, pg;
    int          saved = cr_config.order_indexes;

    cr_config.order_indexes = 0;
    assert_true(store_query(s, "oi", f, 0, 100000, true, a, &ref, &p));
    cr_config.order_indexes = saved;
    for (size_t off = 0; off <= ref.n + 7; off += off < 60 ? 7 : 97) {
        size_t lim = off % 3 ? 20 : 1;

        assert_true(store_query(s, "oi", f, off, lim, off % 2 == 0, a, &pg, &p));
        if (off % 2 == 0)
            assert_int_equal(pg.count, ref.n);
        assert_int_equal(pg.n, off >= ref.n ? 0 : ref.n - off < lim ? ref.n - off : lim);
        for (size_t i = 0; i < pg.n; i++)
            assert_ptr_equal(pg.items[i], ref.items[off + i]);
        store_page_release(&pg);
    }
    store_page_release(&ref);
}

/* The ordered index (ordidx.c) through writes of every kind: creates,
 * replaces, attribute updates, deletes, purge, more writes than the refresh
 * threshold, compaction, a release of the emptied tenant, and more indexes
 * than --orderIndexes; pages always equal the heap's. */
static void test_order_index_pages_through_writes(void **state)
{
    arena_t        *a = arena_new(1 << 16);
    store_t        *s = open_store();
    problem_t       p = { 0 };
    order_term_t    t[2] = {{.key = ORDER_ATTR, .dir = ORDER_DESC}, {.key = ORDER_ID, .dir = ORDER_ASC}};
    order_term_t    t2[1] = {{.key = ORDER_MODIFIED_AT, .dir = ORDER_DESC}};
    order_term_t    t3[1] = {{.key = ORDER_ID, .dir = ORDER_DESC}};
    entity_order_t  o = {.terms = t, .n = 2}, o2 = {.terms = t2, .n = 1}, o3 = {.terms = t3, .n = 1};
    entity_filter_t f = { .order_by = &o }, fb = { .order_by = &o }, f2 = { .order_by = &o2 },
                    f3 = { .order_by = &o3 };
    entity_filter_t purge = { 0 };
    bool            created;
    int             saved = cr_config.order_indexes;

    (void)state;
    cr_config.order_indexes = 2;
    t[0].attr = iri(a, ATTR, "v");
    fb.types  = types_filter(a, T_B)->types;
    for (int i = 0; i < 400; i++)
        assert_true(store_create(s, "oi", mk(a, arena_printf(a, "urn:I:%03d", i), i % 4 ? T_A : T_B, NULL,
                                            i % 9 ? "v" : "w", (i * 37) % 50, NULL, 0), &p));
    order_pages_agree(s, &f, a);                /* builds the index */
    order_pages_agree(s, &fb, a);
    for (int r = 0; r < 3; r++) {
        /* fewer writes than the refresh threshold (merged per query), then more */
        for (int i = 0; i < (r ? 300 : 20); i++) {
            int k = (i * 53 + r) % 400;
            assert_true(store_upsert(s, "oi", mk(a, arena_printf(a, "urn:I:%03d", k), k % 4 ? T_A : T_B,
                                                 NULL, "v", (i * 11 + r) % 50, NULL, 0),
                                     i % 2, &created, a, &p));
        }
        order_pages_agree(s, &f, a);
        order_pages_agree(s, &fb, a);
        order_pages_agree(s, &f2, a);
        for (int i = 0; i < 15; i++)
            store_delete(s, "oi", arena_printf(a, "urn:I:%03d", (i * 29 + r * 3) % 400), &p);
        assert_true(store_create(s, "oi", mk(a, arena_printf(a, "urn:J:%d", r), T_B, NULL, "v", 25,
                                            NULL, 0), &p));
        order_pages_agree(s, &fb, a);
        order_pages_agree(s, &f3, a);           /* a third index: the least recently used goes */
        order_pages_agree(s, &f, a);
    }
    /* a purge of the As (with compaction), then of everything (a release) */
    purge.types = types_filter(a, T_A)->types;
    assert_true(store_purge(s, "oi", &purge, NULL, &p));
    order_pages_agree(s, &f, a);
    order_pages_agree(s, &fb, a);
    assert_true(store_purge(s, "oi", NULL, NULL, &p));
    order_pages_agree(s, &f, a);
    assert_true(store_create(s, "oi", mk(a, "urn:I:new", T_B, NULL, "v", 1, NULL, 0), &p));
    order_pages_agree(s, &f, a);
    store_close(s);

    /* built by the first ordered query, counted in the shape, gone with the entities */
    {
        cdb_t         *db = cdb_open(false, &p);
        cdb_shape_t    sh;
        store_change_t ch;
        store_page_t   pg;

        for (int i = 0; i < 50; i++) {
            assert_true(cdb_create(db, "x", mk(a, arena_printf(a, "urn:X:%d", i), T_A, NULL, "v", i % 7,
                                              NULL, 0), &ch, &p));
            drop_change(&ch);
        }
        assert_true(cdb_tenant_shape(db, "x", &sh));
        assert_int_equal(sh.order_indexes, 0);
        assert_true(cdb_query(db, "x", &f, 0, 5, false, a, &pg, &p));
        assert_int_equal(pg.n, 5);
        store_page_release(&pg);
        assert_true(cdb_tenant_shape(db, "x", &sh));
        assert_int_equal(sh.order_indexes, 1);
        assert_true(sh.order_bytes > 50 * sizeof(cdb_oent_t));
        for (int i = 0; i < 50; i++) {
            assert_true(cdb_delete(db, "x", arena_printf(a, "urn:X:%d", i), NULL, &ch, &p));
            drop_change(&ch);
        }
        assert_true(cdb_tenant_shape(db, "x", &sh));
        assert_int_equal(sh.order_indexes, 0);
        cdb_close(db);
    }
    cr_config.order_indexes = saved;
    arena_free(a);
}

/* A regex over PCRE2's match limit fails the query with BadRequestData. */
static void test_regex_limit(void **state)
{
    arena_t        *a = arena_new(1 << 16);
    store_t        *s = open_store();
    problem_t       p = { 0 };
    entity_filter_t f = { 0 };
    store_page_t    pg;

    (void)state;
    assert_true(store_create(s, "rx", mk(a, "urn:X:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", T_A, NULL,
                                         NULL, 0, NULL, 0), &p));
    assert_true(store_create(s, "rx", mk(a, "urn:X:b", T_A, NULL, NULL, 0, NULL, 0), &p));
    f.id_pattern = filter_compile_pattern(a, "^urn:X:(a+)+$", &p);
    assert_non_null(f.id_pattern);
    assert_false(store_query(s, "rx", &f, 0, 10, true, a, &pg, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_non_null(strstr(p.detail, "idPattern"));
    assert_non_null(strstr(p.detail, "match limit"));
    /* The flag does not leak into the next query. */
    f.id_pattern = filter_compile_pattern(a, "^urn:X:b$", &p);
    assert_true(store_query(s, "rx", &f, 0, 10, true, a, &pg, &p));
    assert_int_equal(pg.count, 1);
    store_page_release(&pg);
    store_close(s);
    arena_free(a);
}

/* Several entity selectors (ORed), store_select pagination, store_types. */
static void test_selectors_types(void **state)
{
    arena_t          *a = arena_new(1 << 16);
    store_t          *s = open_store();
    problem_t         p = { 0 };
    entity_selector_t sel[2] = { 0 };
    entity_filter_t   f = { 0 };
    store_page_t      pg;
    size_t            ntypes = 0;

    (void)state;
    for (int i = 0; i < 30; i++)
        assert_true(store_create(s, "se", mk(a, arena_printf(a, "urn:S:%02d", i),
                                             i % 3 == 0 ? T_A : i % 3 == 1 ? T_B : T_C, NULL,
                                             NULL, 0, NULL, 0), &p));
    sel[0].id    = "urn:S:01";                  /* a B */
    sel[1].types = types_filter(a, T_A)->types;
    f.sel   = sel;
    f.n_sel = 2;
    f.limit = 100;
    f.count = true;
    assert_true(store_select(s, "se", &f, a, &pg, &p));
    assert_int_equal(pg.count, 11);
    assert_string_equal(page_ids(a, &pg), "urn:S:00 urn:S:01 urn:S:03 urn:S:06 urn:S:09 urn:S:12 "
                        "urn:S:15 urn:S:18 urn:S:21 urn:S:24 urn:S:27");
    store_page_release(&pg);
    sel[0].id    = NULL;
    sel[0].types = types_filter(a, T_C)->types;
    f.offset = 18;
    assert_true(store_select(s, "se", &f, a, &pg, &p));   /* type-index path */
    assert_int_equal(pg.count, 20);
    assert_string_equal(page_ids(a, &pg), "urn:S:27 urn:S:29");
    store_page_release(&pg);

    assert_true(store_types(s, "se", count_type, &ntypes, &p));
    assert_int_equal(ntypes, 3);

    /* Selectors the indexes cannot serve (an id, or a type) under a plain
     * type list: the type list's walk, long enough to pause and resume. */
    for (int i = 0; i < 700; i++)
        assert_true(store_create(s, "se", mk(a, arena_printf(a, "urn:S:m%03d", i), T_B, NULL, NULL,
                                             0, NULL, 0), &p));
    memset(&f, 0, sizeof(f));
    sel[0]       = (entity_selector_t){ .id = "urn:S:m650" };
    sel[1]       = (entity_selector_t){ .types = types_filter(a, T_C)->types, .id = NULL };
    sel[1].id_pattern = filter_compile_pattern(a, "m00[12]$", &p);
    f.types = types_filter(a, T_B "," T_C)->types;
    f.sel   = sel;
    f.n_sel = 2;
    f.limit = 100;
    f.count = true;
    assert_true(store_select(s, "se", &f, a, &pg, &p));
    assert_string_equal(page_ids(a, &pg), "urn:S:m650");
    store_page_release(&pg);
    sel[1].types = NULL;                        /* {id} or {idPattern}: no index */
    assert_true(store_select(s, "se", &f, a, &pg, &p));
    assert_string_equal(page_ids(a, &pg), "urn:S:m001 urn:S:m002 urn:S:m650");
    store_page_release(&pg);
    {
        size_t n = 0;

        assert_true(store_purge(s, "se", &f, &n, &p));
        assert_int_equal(n, 3);
    }
    memset(sel, 0, sizeof(sel));
    memset(&f, 0, sizeof(f));

    /* The attribute index: names come and go with the entities having them. */
    ntypes = 0;
    assert_true(store_attributes(s, "se", count_type, &ntypes, &p));
    assert_int_equal(ntypes, 0);
    assert_true(store_modify(s, "se", "urn:S:00", OP_MERGE_ENTITY,
                             mk(a, NULL, NULL, NULL, "x", 1, "y", 2), NULL, NULL, a, &p));
    assert_true(store_modify(s, "se", "urn:S:01", OP_MERGE_ENTITY,
                             mk(a, NULL, NULL, NULL, "x", 1, NULL, 0), NULL, NULL, a, &p));
    assert_true(store_attributes(s, "se", count_type, &ntypes, &p));
    assert_int_equal(ntypes, 2);
    assert_true(store_modify(s, "se", "urn:S:00", OP_REPLACE_ENTITY,
                             mk(a, "urn:S:00", T_A, NULL, "x", 1, NULL, 0), NULL, NULL, a, &p));
    ntypes = 0;
    assert_true(store_attributes(s, "se", count_type, &ntypes, &p));
    assert_int_equal(ntypes, 1);                /* y is gone */
    assert_true(store_delete(s, "se", "urn:S:00", &p));
    assert_true(store_delete(s, "se", "urn:S:01", &p));
    ntypes = 0;
    assert_true(store_attributes(s, "se", count_type, &ntypes, &p));
    assert_int_equal(ntypes, 0);
    assert_true(store_create(s, "se", mk(a, "urn:S:00", T_A, NULL, NULL, 0, NULL, 0), &p));
    assert_true(store_create(s, "se", mk(a, "urn:S:01", T_B, NULL, NULL, 0, NULL, 0), &p));
    ntypes = 0;
    assert_true(store_purge(s, "se", types_filter(a, T_B), NULL, &p));
    ntypes = 0;
    assert_true(store_types(s, "se", count_type, &ntypes, &p));
    assert_int_equal(ntypes, 2);
    assert_false(store_types(s, "nope", count_type, &ntypes, &p));
    store_close(s);
    arena_free(a);
}

#define CH_STABLE 3000
#define CH_CHURN  4000      /* more than the stable ones: every round compacts */
typedef struct churn_arg {
    store_t     *s;
    _Atomic int *stop;
} churn_arg_t;

static void *churn_thread(void *ud)
{
    churn_arg_t *c = ud;
    arena_t     *a = arena_new(1 << 14);
    int          gen = 0;

    while (!atomic_load(c->stop)) {
        problem_t p = { 0 };

        /* Create many, then delete them all: compaction renumbers the slots
         * of the stable entities under the scans' feet. */
        for (int i = 0; i < CH_CHURN; i++)
            if (!store_create(c->s, "ck", mk(a, arena_printf(a, "urn:K:c%d:%d", gen, i), T_C,
                                             NULL, "c", i, NULL, 0), &p))
                fail_msg("create: %s", p.detail);
        for (int i = 0; i < CH_CHURN; i++)
            if (!store_delete(c->s, "ck", arena_printf(a, "urn:K:c%d:%d", gen, i), &p))
                fail_msg("delete: %s", p.detail);
        gen++;
        arena_reset(a);
    }
    arena_free(a);
    return NULL;
}

/* Long scans release the lock between chunks; with compaction renumbering the
 * slots meanwhile they still see every stable entity once, in creation order. */
static void test_scan_chunks(void **state)
{
    arena_t    *a = arena_new(1 << 20);
    store_t    *s = open_store();
    problem_t   p = { 0 };
    _Atomic int stop = 0;
    churn_arg_t ca = { s, &stop };
    pthread_t   th;
    cdb_shape_t sh0;
    const char *stable = iri(a, ATTR, "s");

    (void)state;
    (void)sh0;
    for (int i = 0; i < CH_STABLE; i++)
        assert_true(store_create(s, "ck", mk(a, arena_printf(a, "urn:K:s%05d", i), T_C, NULL,
                                             "s", i, NULL, 0), &p));
    arena_reset(a);
    assert_int_equal(pthread_create(&th, NULL, churn_thread, &ca), 0);
    for (int round = 0; round < 60; round++) {
        entity_filter_t f = { 0 };
        store_page_t    pg;

        stable = iri(a, ATTR, "s");
        f.attrs   = &stable;                    /* no index: the full scan */
        f.n_attrs = 1;
        if (round % 2)
            f.types = types_filter(a, T_C)->types;   /* the type list */
        assert_true(store_query(s, "ck", &f, 0, SIZE_MAX, true, a, &pg, &p));
        assert_int_equal(pg.count, CH_STABLE);
        assert_int_equal(pg.n, CH_STABLE);
        for (size_t i = 0; i < pg.n; i++)
            assert_int_equal(attr_int(a, pg.items[i], "s"), (int64_t)i);
        store_page_release(&pg);
        assert_true(store_query(s, "ck", &f, 2990, 5, true, a, &pg, &p));
        assert_int_equal(pg.count, CH_STABLE);
        assert_int_equal(attr_int(a, pg.items[0], "s"), 2990);
        store_page_release(&pg);
        arena_reset(a);
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    store_close(s);
    arena_free(a);
}

/* The q tree can be walked read-only. */
static void test_q_view(void **state)
{
    arena_t       *a = arena_new(1 << 16);
    problem_t      p = { 0 };
    const char    *x = ld_expand(ld_core(), "x");   /* interned first: a read path only looks names up */
    q_expr_t      *q = q_parse(a, "x==1,2;(y~=ab.c|z.observedAt>2020-01-01T00:00:00Z)", ld_core(),
                               &p);
    const q_expr_t *or, *t;
    q_term_view_t  tv;
    q_value_view_t vv;
    q_memberkind_t mk_;

    (void)state;
    if (!q)
        fail_msg("q: %s", p.detail);
    assert_int_equal(q_node_kind(q), QK_AND);
    assert_int_equal(q_node_count(q), 2);
    assert_true(q_term_get(q_node_child(q, 0), &tv));
    assert_ptr_equal(tv.attr, x);
    assert_int_equal(tv.op, QO_EQ);
    assert_int_equal(tv.shape, QSH_LIST);
    assert_int_equal(tv.n_values, 2);
    assert_true(q_term_value(q_node_child(q, 0), 1, &vv));
    assert_int_equal(vv.kind, QVK_NUM);
    assert_int_equal(vv.i, 2);
    or = q_node_child(q, 1);
    assert_int_equal(q_node_kind(or), QK_OR);
    assert_true(q_term_get(q_node_child(or, 0), &tv));
    assert_int_equal(tv.op, QO_MATCH);
    assert_int_equal(tv.pattern_len, 4);
    assert_memory_equal(tv.pattern, "ab.c", 4);
    t = q_node_child(or, 1);
    assert_true(q_term_get(t, &tv));
    assert_int_equal(tv.op, QO_GT);
    assert_int_equal(tv.n_steps, 1);
    assert_non_null(q_term_step(t, 0, &mk_) || mk_ == QMK_OBSERVED_AT);
    assert_int_equal(mk_, QMK_OBSERVED_AT);
    assert_true(q_term_value(t, 0, &vv));
    assert_int_equal(vv.kind, QVK_DATETIME);
    assert_false(q_term_get(q, &tv));
    arena_free(a);
}

/* ------------------------------------------------------------- objects */

typedef struct obj_seen {
    char   line[64][96];
    size_t n;
} obj_seen_t;

static void obj_collect(void *ud, const char *tenant, const char *id, const char *json, size_t len)
{
    obj_seen_t *o = ud;

    if (o->n < 64)
        snprintf(o->line[o->n++], sizeof(o->line[0]), "%s|%s|%.*s", tenant, id, (int)len, json);
}

static void test_objects(void **state)
{
    store_t   *s = open_store();
    arena_t   *a = arena_new(1024);
    problem_t  p = { 0 };
    obj_seen_t seen = { 0 };
    size_t     len;
    char      *j;

    (void)state;
    /* a tenant never written */
    assert_null(store_obj_get(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s1", a, &len, &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);
    assert_false(store_obj_delete(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s1", &p));
    assert_int_equal(p.kind, PB_NONEXISTENT_TENANT);

    /* put creates the tenant; create_only refuses a taken id; ids are per kind */
    assert_true(store_obj_put(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s1", "{\"a\":1}", 7, true, &p));
    assert_true(store_tenant_exists(s, "t1"));
    assert_false(store_obj_put(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s1", "{}", 2, true, &p));
    assert_int_equal(p.kind, PB_ALREADY_EXISTS);
    assert_true(store_obj_put(s, "t1", STORE_OBJ_REGISTRATION, "urn:s1", "{\"r\":1}", 7, true, &p));
    assert_true(store_obj_put(s, NULL, STORE_OBJ_SUBSCRIPTION, "urn:s0", "[0]", 3, false, &p));
    assert_true(store_obj_put(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s2", "[2]", 3, true, &p));
    /* replace keeps the creation order */
    assert_true(store_obj_put(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s1", "[1]", 3, false, &p));

    j = store_obj_get(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s1", a, &len, &p);
    assert_non_null(j);
    assert_int_equal(len, 3);
    assert_string_equal(j, "[1]");
    j = store_obj_get(s, "t1", STORE_OBJ_REGISTRATION, "urn:s1", a, &len, &p);
    assert_string_equal(j, "{\"r\":1}");
    assert_null(store_obj_get(s, "t1", STORE_OBJ_CONTEXT, "urn:s1", a, &len, &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);

    store_obj_foreach(s, STORE_OBJ_SUBSCRIPTION, obj_collect, &seen);
    assert_int_equal(seen.n, 3);
    assert_string_equal(seen.line[0], "|urn:s0|[0]");
    assert_string_equal(seen.line[1], "t1|urn:s1|[1]");
    assert_string_equal(seen.line[2], "t1|urn:s2|[2]");

    assert_true(store_obj_delete(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s1", &p));
    assert_false(store_obj_delete(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s1", &p));
    assert_int_equal(p.kind, PB_RESOURCE_NOT_FOUND);
    assert_non_null(store_obj_get(s, "t1", STORE_OBJ_REGISTRATION, "urn:s1", a, &len, &p));

    /* churn: compaction keeps the order and the map */
    for (int i = 0; i < 200; i++) {
        char id[32];

        snprintf(id, sizeof(id), "urn:c%d", i);
        assert_true(store_obj_put(s, "t2", STORE_OBJ_CONTEXT, id, id, strlen(id), true, &p));
    }
    for (int i = 0; i < 200; i++) {
        char id[32];

        if (i % 10 == 7)
            continue;
        snprintf(id, sizeof(id), "urn:c%d", i);
        assert_true(store_obj_delete(s, "t2", STORE_OBJ_CONTEXT, id, &p));
    }
    memset(&seen, 0, sizeof(seen));
    store_obj_foreach(s, STORE_OBJ_CONTEXT, obj_collect, &seen);
    assert_int_equal(seen.n, 20);
    assert_string_equal(seen.line[0], "t2|urn:c7|urn:c7");
    assert_string_equal(seen.line[19], "t2|urn:c197|urn:c197");
    assert_non_null(store_obj_get(s, "t2", STORE_OBJ_CONTEXT, "urn:c107", a, &len, &p));
    /* the last object gone: the table is given back, the tenant stays */
    for (int i = 7; i < 200; i += 10) {
        char id[32];

        snprintf(id, sizeof(id), "urn:c%d", i);
        assert_true(store_obj_delete(s, "t2", STORE_OBJ_CONTEXT, id, &p));
    }
    assert_true(store_tenant_exists(s, "t2"));
    assert_true(store_obj_put(s, "t2", STORE_OBJ_CONTEXT, "urn:x", "", 0, true, &p));
    j = store_obj_get(s, "t2", STORE_OBJ_CONTEXT, "urn:x", a, &len, &p);
    assert_string_equal(j, "");

    /* bad arguments */
    assert_false(store_obj_put(s, "t1", STORE_OBJ_SUBSCRIPTION, "", "{}", 2, true, &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_false(store_obj_put(s, "t1", (store_obj_kind_t)9, "urn:y", "{}", 2, true, &p));

    arena_free(a);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_backends),
        cmocka_unit_test(test_create_get_delete),
        cmocka_unit_test(test_modify),
        cmocka_unit_test(test_upsert),
        cmocka_unit_test(test_query_paths),
        cmocka_unit_test(test_type_changes),
        cmocka_unit_test(test_order_and_compaction),
        cmocka_unit_test(test_idmap_churn),
        cmocka_unit_test(test_idmap_incremental_growth),
        cmocka_unit_test(test_memory_per_entity),
        cmocka_unit_test(test_tenants),
        cmocka_unit_test(test_purge_foreach),
        cmocka_unit_test(test_concurrent_merge),
        cmocka_unit_test(test_readers_writers),
        cmocka_unit_test(test_geo_index),
        cmocka_unit_test(test_geo_shapes),
        cmocka_unit_test(test_geo_rebuild_incremental),
        cmocka_unit_test(test_geo_bench),
        cmocka_unit_test(test_change_order),
        cmocka_unit_test(test_change_attrs),
        cmocka_unit_test(test_preconditions),
        cmocka_unit_test(test_tenant_limits),
        cmocka_unit_test(test_order_by_pages),
        cmocka_unit_test(test_order_index_pages_through_writes),
        cmocka_unit_test(test_regex_limit),
        cmocka_unit_test(test_selectors_types),
        cmocka_unit_test(test_scan_chunks),
        cmocka_unit_test(test_q_view),
        cmocka_unit_test(test_objects),
    };

    return cmocka_run_group_tests(tests, group_setup, NULL);
}
