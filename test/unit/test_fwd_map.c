/*
 * test_fwd_map.c - fwd/fwd_map.c, the EntityMaps (4.3.6.7, 5.2.39): pages
 * over stable slots, removal, expiry, per tenant, the bounds (maps and ids,
 * the soonest to expire evicted), and the table under concurrent use (for
 * TSan).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "fwd/fwd.h"

static const char *const IDS[] = {"urn:e:1", "urn:e:2", "urn:e:3", "urn:e:4", "urn:e:5"};
static const uint64_t    ORIG[] = {FWD_MAP_HERE, 2, 4, 2 | FWD_MAP_HERE, 4};
static const char *const REGS[] = {"urn:r:a", "urn:r:b"};

static int setup(void **state)
{
    (void)state;
    cr_config.entity_map_max = 1000;
    cr_config.entity_map_entries = 1000000;
    fwd_map_clear();
    return 0;
}

static void test_pages_and_removal(void **state)
{
    (void)state;
    char     id[64];
    arena_t *a = arena_new(1 << 14);
    const char *linked[] = {NULL, "urn:ngsi-ld:EntityMap:at-b"};
    assert_true(fwd_map_put("t", cr_now_us() + 60000000, REGS, linked, 2, IDS, ORIG, 5, id));
    assert_true(strncmp(id, "urn:ngsi-ld:EntityMap:", 22) == 0);
    fwd_map_page_t pg;
    assert_true(fwd_map_page("t", id, 2, 2, a, &pg));
    assert_int_equal(pg.n, 2);
    assert_string_equal(pg.ids[0], "urn:e:3");
    assert_int_equal(pg.origins[1], 2 | FWD_MAP_HERE);
    assert_int_equal(pg.total, 5);
    assert_int_equal(pg.n_regs, 2);
    assert_string_equal(pg.reg_ids[1], "urn:r:b");
    assert_null(pg.linked[0]);
    assert_string_equal(pg.linked[1], "urn:ngsi-ld:EntityMap:at-b");
    const char *gone[] = {"urn:e:3"};
    fwd_map_forget("t", id, 2, 4, gone, 1);
    assert_true(fwd_map_page("t", id, 2, 2, a, &pg));       /* the slot stays: the page is one short */
    assert_int_equal(pg.n, 1);
    assert_string_equal(pg.ids[0], "urn:e:4");
    assert_int_equal(pg.live, 4);
    assert_true(fwd_map_page("t", id, 4, 100, a, &pg));
    assert_int_equal(pg.n, 1);
    assert_true(fwd_map_page("t", id, 9, 100, a, &pg));     /* past the end: empty */
    assert_int_equal(pg.n, 0);
    /* another tenant does not see it; the default tenant is NULL or "" */
    assert_false(fwd_map_page("u", id, 0, 10, a, &pg));
    assert_false(fwd_map_page(NULL, id, 0, 10, a, &pg));
    assert_true(fwd_map_put(NULL, cr_now_us() + 60000000, NULL, NULL, 0, IDS, ORIG, 1, id));
    assert_true(fwd_map_page("", id, 0, 10, a, &pg));
    assert_true(fwd_map_delete(NULL, id));
    assert_false(fwd_map_delete(NULL, id));
    arena_free(a);
}

static void test_expiry(void **state)
{
    (void)state;
    char     id[64];
    arena_t *a = arena_new(1 << 12);
    fwd_map_page_t pg;
    assert_true(fwd_map_put("t", cr_now_us() + 60000000, REGS, NULL, 2, IDS, ORIG, 5, id));
    assert_true(fwd_map_set_expiry("t", id, cr_now_us() - 1));
    assert_false(fwd_map_page("t", id, 0, 10, a, &pg));      /* expired: gone */
    assert_false(fwd_map_set_expiry("t", id, cr_now_us() + 1000000));
    size_t maps, entries;
    fwd_map_stats(&maps, &entries);
    assert_int_equal(maps, 0);
    assert_int_equal(entries, 0);
    arena_free(a);
}

static void test_bounds(void **state)
{
    (void)state;
    char    ids[3][64];
    int64_t now = cr_now_us();
    cr_config.entity_map_max = 2;
    cr_config.entity_map_entries = 12;
    assert_true(fwd_map_put("t", now + 3000000, REGS, NULL, 2, IDS, ORIG, 5, ids[0]));
    assert_true(fwd_map_put("t", now + 1000000, REGS, NULL, 2, IDS, ORIG, 5, ids[1]));   /* expires first */
    assert_true(fwd_map_put("t", now + 2000000, REGS, NULL, 2, IDS, ORIG, 5, ids[2]));
    arena_t       *a = arena_new(1 << 12);
    fwd_map_page_t pg;
    assert_true(fwd_map_page("t", ids[0], 0, 1, a, &pg));
    assert_false(fwd_map_page("t", ids[1], 0, 1, a, &pg));
    assert_true(fwd_map_page("t", ids[2], 0, 1, a, &pg));
    size_t maps, entries;
    fwd_map_stats(&maps, &entries);
    assert_int_equal(maps, 2);
    assert_int_equal(entries, 10);
    char big[64];
    const char *many[13];
    uint64_t    o[13];
    for (int i = 0; i < 13; i++) {
        many[i] = IDS[i % 5];
        o[i] = FWD_MAP_HERE;
    }
    assert_false(fwd_map_put("t", now + 1000000, NULL, NULL, 0, many, o, 13, big));    /* more than all the room */
    const char *regs[64];
    for (int i = 0; i < 64; i++) regs[i] = "urn:r:x";
    assert_false(fwd_map_put("t", now + 1000000, regs, NULL, 64, IDS, ORIG, 1, big));  /* 63 sources at most */
    arena_free(a);
}

static void *worker(void *ud)
{
    (void)ud;
    arena_t *a = arena_new(1 << 14);
    for (int i = 0; i < 300; i++) {
        char           id[64];
        fwd_map_page_t pg;
        if (!fwd_map_put("t", cr_now_us() + 60000000, REGS, NULL, 2, IDS, ORIG, 5, id)) continue;
        if (fwd_map_page("t", id, 1, 3, a, &pg)) fwd_map_forget("t", id, 1, 4, pg.ids, 1);
        if (i % 2) fwd_map_delete("t", id);
        else fwd_map_set_expiry("t", id, cr_now_us() + 1000);
        arena_reset(a);
    }
    arena_free(a);
    return NULL;
}

static void test_concurrent(void **state)
{
    (void)state;
    cr_config.entity_map_max = 50;
    pthread_t t[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, worker, NULL), 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    size_t maps, entries;
    fwd_map_stats(&maps, &entries);
    assert_true(maps <= 50 && entries == maps * 5);
    fwd_map_clear();
}

/* ------------------------------------------------ kept over a restart (fwd_map_keeper_t, fwd_map_restore) */
typedef struct kept {
    char   tenant[32], id[64], text[4096];
    size_t len;
    int    puts, dels;
    char   deleted[64];
} kept_t;

static bool k_put(void *ud, const char *tenant, const char *id, const char *text, size_t len)
{
    kept_t *k = ud;
    assert_true(len < sizeof k->text);
    snprintf(k->tenant, sizeof k->tenant, "%s", tenant);
    snprintf(k->id, sizeof k->id, "%s", id);
    memcpy(k->text, text, len);
    k->text[len] = '\0';
    k->len = len;
    k->puts++;
    return true;
}

static void k_del(void *ud, const char *tenant, const char *id)
{
    kept_t *k = ud;
    (void)tenant;
    snprintf(k->deleted, sizeof k->deleted, "%s", id);
    k->dels++;
}

static void test_kept_and_restored(void **state)
{
    (void)state;
    kept_t   k = {0};
    char     id[64];
    arena_t *a = arena_new(1 << 14);
    const char *linked[] = {NULL, "urn:ngsi-ld:EntityMap:at-b"};
    uint64_t    orig[5];
    memcpy(orig, ORIG, sizeof orig);
    orig[4] = (uint64_t)1 << 63 | 4;                         /* the high bits survive the text */
    fwd_map_set_keeper(&(fwd_map_keeper_t){k_put, k_del, &k});
    assert_true(fwd_map_put("t", cr_now_us() + 60000000, REGS, linked, 2, IDS, orig, 5, id));
    assert_int_equal(k.puts, 1);
    assert_string_equal(k.id, id);
    assert_string_equal(k.tenant, "t");
    int64_t at = cr_now_us() + 120000000;
    assert_true(fwd_map_set_expiry("t", id, at));            /* a new expiry rewrites it */
    assert_int_equal(k.puts, 2);
    kept_t saved = k;
    fwd_map_set_keeper(NULL);
    fwd_map_clear();                                         /* "the restart" */
    fwd_map_page_t pg;
    assert_false(fwd_map_page("t", id, 0, 10, a, &pg));
    assert_true(fwd_map_restore("t", saved.id, saved.text, saved.len));
    assert_true(fwd_map_page("t", id, 0, 10, a, &pg));
    assert_int_equal(pg.n, 5);
    assert_int_equal(pg.expires_at, at);
    assert_string_equal(pg.ids[4], "urn:e:5");
    assert_true(pg.origins[4] == ((uint64_t)1 << 63 | 4));
    assert_string_equal(pg.reg_ids[1], "urn:r:b");
    assert_null(pg.linked[0]);
    assert_string_equal(pg.linked[1], "urn:ngsi-ld:EntityMap:at-b");
    assert_false(fwd_map_restore("t", "urn:x", "{\"t\":1,\"r\":[],\"l\":[],\"e\":[]}", 31));   /* expired */
    assert_false(fwd_map_restore("t", "urn:y", "[1]", 3));                                          /* not a map */
    /* a drop deletes the kept copy, once the lock is released */
    fwd_map_set_keeper(&(fwd_map_keeper_t){k_put, k_del, &k});
    assert_true(fwd_map_delete("t", id));
    assert_int_equal(k.dels, 1);
    assert_string_equal(k.deleted, id);
    fwd_map_set_keeper(NULL);
    arena_free(a);
}

int main(void)
{
    char *argv[] = {"test_fwd_map", NULL};
    if (!cr_config_load(1, argv)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_pages_and_removal, setup),
        cmocka_unit_test_setup(test_expiry, setup),
        cmocka_unit_test_setup(test_bounds, setup),
        cmocka_unit_test_setup(test_concurrent, setup),
        cmocka_unit_test_setup(test_kept_and_restored, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
