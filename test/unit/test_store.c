/*
 * test_store.c - unit tests of the store interface over corDB in RAM:
 * create/get/modify/delete, upsert, purge, the three query access paths
 * (ids, types, all) with offset/limit/count, creation order across deletes
 * and compaction, tenants, change hooks, and two concurrency tests (no lost
 * update under concurrent merges; readers and writers on many entities).
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

static void hook(void *ud, const store_change_t *ch)
{
    seen_t *sn = ud;

    assert_non_null(ch->tenant);
    if (!ch->before)
        atomic_fetch_add(&sn->creates, 1);
    else if (!ch->after)
        atomic_fetch_add(&sn->deletes, 1);
    else
        atomic_fetch_add(&sn->updates, 1);
    snprintf(sn->last_before, sizeof(sn->last_before), "%s", ch->before ? ch->before->id : "-");
    snprintf(sn->last_after, sizeof(sn->last_after), "%s", ch->after ? ch->after->id : "-");
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
    cr_config.database = "mongoc";
    assert_null(store_open(&p));
    assert_int_equal(p.kind, PB_OPERATION_NOT_SUPPORTED);
    assert_non_null(strstr(p.detail, "MongoDB"));

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
        assert_true(cdb_delete(db, NULL, arena_printf(a, "urn:O:%03d", i), &ch, &p));
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
        cmocka_unit_test(test_memory_per_entity),
        cmocka_unit_test(test_tenants),
        cmocka_unit_test(test_purge_foreach),
        cmocka_unit_test(test_concurrent_merge),
        cmocka_unit_test(test_readers_writers),
    };

    return cmocka_run_group_tests(tests, group_setup, NULL);
}
