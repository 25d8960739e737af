/*
 * test_mongoc.c - unit tests of the MongoDB store's parts that need no
 * server (src/store/mongoc/): an entity version as a document and back
 * (doc.c: the fields, the hashed keys every process computes alike, the
 * one-pass read of a document), and the entity cache's rule (cache.c: a
 * version is handed out only for its own write token; peek gives the base of
 * a conditional write; drop and replacement release their references).
 * The server paths are test/functional/test_mongo.py's, against FerretDB.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "store/mongoc/mgc.h"

#define T_A  "http://example.org/A"
#define ATTR "http://example.org/attr/speed"

static cr_entity_t *mk(const char *id, int64_t speed)
{
    arena_t     *a = arena_new(4096);
    cr_entity_t *d = arena_calloc(a, sizeof(*d)), *e;

    d->id       = arena_strdup(a, id);
    d->types    = arena_calloc(a, sizeof(char *));
    d->types[0] = intern_cstr(T_A);
    d->n_types  = 1;
    d->attrs    = arena_calloc(a, sizeof(cr_attr_t));
    d->attrs[0] = (cr_attr_t){ .name = intern_cstr(ATTR), .kind = ATTR_PROPERTY,
                               .value = json_new_int(a, speed), .observed_at = CR_NO_TIME,
                               .created_at = 1000, .modified_at = 2000 };
    d->n_attrs     = 1;
    d->created_at  = 1000;
    d->modified_at = 2000;
    e = entity_freeze(d);
    arena_free(a);
    return e;
}

/* The key of a name is "h" and 16 hex digits of cr_hash_stable: other
 * processes (and versions) find the fields by it. */
static void test_geo_key_is_the_stable_hash_in_hex(void **st)
{
    char key[24], want[24];

    (void)st;
    mgc_geo_key(key, ATTR);
    snprintf(want, sizeof want, "h%016llx", (unsigned long long)cr_hash_stable(ATTR, strlen(ATTR)));
    assert_string_equal(key, want);
    assert_int_equal(strlen(key), 17);
}

static void test_document_round_trip_in_one_pass(void **st)
{
    cr_entity_t *e = mk("urn:x:1", 42), *back;
    bson_t       doc;
    mgc_docf_t   f;
    problem_t    p = { 0 };
    bson_iter_t  it;
    char         key[24], path[40];

    (void)st;
    mgc_doc_entity(&doc, e, 7, 0x1234, false);
    mgc_doc_fields(&doc, &f);
    assert_string_equal(f.id, "urn:x:1");
    assert_int_equal(f.c, 1000);
    assert_int_equal(f.ver.v, 7);
    assert_int_equal(f.ver.w, 0x1234);
    assert_non_null(f.e);
    /* the numeric Property is a q field under its hashed key */
    mgc_geo_key(key, ATTR);
    snprintf(path, sizeof path, "q.%s", key);
    assert_true(bson_iter_init(&it, &doc) && bson_iter_find_descendant(&it, path, &it));
    assert_int_equal(bson_iter_as_int64(&it), 42);
    back = mgc_doc_decode(&f, &p);
    assert_non_null(back);
    assert_string_equal(back->id, "urn:x:1");
    assert_int_equal(back->n_attrs, 1);
    assert_int_equal(back->attrs[0].value->i, 42);
    assert_int_equal(back->modified_at, 2000);
    entity_unref(back);
    bson_destroy(&doc);
    /* a document without its version: an InternalError, not a crash */
    bson_init(&doc);
    BSON_APPEND_UTF8(&doc, "_id", "urn:x:2");
    mgc_doc_fields(&doc, &f);
    assert_null(mgc_doc_decode(&f, &p));
    assert_int_equal(p.kind, PB_INTERNAL_ERROR);
    bson_destroy(&doc);
    entity_unref(e);
}

/* The fields read from documents the byte walker of mgc_doc_fields does
 * not take (a double or int32 number, an _id that is not a string, a
 * sub-document, an "e" that is not binary) are libbson's answer, and a
 * walker's document gives what libbson reads in it. */
static void test_document_fields_of_other_shapes(void **st)
{
    static const uint8_t bin[3] = { 1, 2, 3 };
    bson_t       doc;
    mgc_docf_t   f;

    (void)st;
    /* numbers of other types, a field the walker skips, e binary */
    bson_init(&doc);
    BSON_APPEND_UTF8(&doc, "_id", "urn:x:3");
    BSON_APPEND_DOUBLE(&doc, "c", 1500.0);
    BSON_APPEND_INT32(&doc, "v", 9);
    BSON_APPEND_BOOL(&doc, "zz", true);
    BSON_APPEND_INT64(&doc, "w", -5);
    BSON_APPEND_BINARY(&doc, "e", BSON_SUBTYPE_BINARY, bin, 3);
    mgc_doc_fields(&doc, &f);
    assert_string_equal(f.id, "urn:x:3");
    assert_int_equal(f.c, 1500);
    assert_int_equal(f.ver.v, 9);
    assert_int_equal(f.ver.w, -5);
    assert_int_equal(f.e_len, 3);
    assert_memory_equal(f.e, bin, 3);
    bson_destroy(&doc);
    /* a sub-document and a string "e": the libbson loop (no e, no id) */
    bson_init(&doc);
    BSON_APPEND_INT32(&doc, "_id", 4);
    BSON_APPEND_UTF8(&doc, "e", "not binary");
    BSON_APPEND_INT64(&doc, "v", 2);
    {
        bson_t sub;
        bson_append_document_begin(&doc, "q", 1, &sub);
        BSON_APPEND_INT64(&sub, "c", 77);
        bson_append_document_end(&doc, &sub);
    }
    mgc_doc_fields(&doc, &f);
    assert_null(f.id);
    assert_null(f.e);
    assert_int_equal(f.ver.v, 2);
    assert_int_equal(f.c, 0);
    bson_destroy(&doc);
    /* a document with a field after e, a duplicate key: the last one */
    bson_init(&doc);
    BSON_APPEND_UTF8(&doc, "_id", "a");
    BSON_APPEND_INT64(&doc, "w", 1);
    BSON_APPEND_NULL(&doc, "n");
    BSON_APPEND_INT64(&doc, "w", 2);
    mgc_doc_fields(&doc, &f);
    assert_string_equal(f.id, "a");
    assert_int_equal(f.ver.w, 2);
    bson_destroy(&doc);
}

/* A cached version is handed out only for its own token (the rule of
 * cache.c: the server's current token decides, the cache never answers
 * by itself). */
static void test_cache_answers_only_for_its_token(void **st)
{
    mgc_cache_t *c  = mgc_cache_new();
    mgc_tenant_t t1 = { 0 }, t2 = { 0 };
    cr_entity_t *v1 = mk("urn:x:1", 1), *v2 = mk("urn:x:1", 2), *got;
    mgc_ver_t    ver;

    (void)st;
    assert_null(mgc_cache_get(c, &t1, "urn:x:1", 11));
    mgc_cache_put(c, &t1, v1, (mgc_ver_t){ 1, 11 });
    got = mgc_cache_get(c, &t1, "urn:x:1", 11);
    assert_ptr_equal(got, v1);
    entity_unref(got);
    /* another token (another process wrote): no answer */
    assert_null(mgc_cache_get(c, &t1, "urn:x:1", 12));
    /* another tenant, another id: no answer */
    assert_null(mgc_cache_get(c, &t2, "urn:x:1", 11));
    assert_null(mgc_cache_get(c, &t1, "urn:x:9", 11));
    /* peek: the base of a write conditional on its token */
    got = mgc_cache_peek(c, &t1, "urn:x:1", &ver);
    assert_ptr_equal(got, v1);
    assert_int_equal(ver.v, 1);
    assert_int_equal(ver.w, 11);
    entity_unref(got);
    /* a newer version replaces it; the old one is released by the cache */
    mgc_cache_put(c, &t1, v2, (mgc_ver_t){ 2, 21 });
    assert_null(mgc_cache_get(c, &t1, "urn:x:1", 11));
    got = mgc_cache_get(c, &t1, "urn:x:1", 21);
    assert_ptr_equal(got, v2);
    entity_unref(got);
    /* dropped (deleted, or a write whose outcome is unknown): gone */
    mgc_cache_drop(c, &t1, "urn:x:1");
    assert_null(mgc_cache_peek(c, &t1, "urn:x:1", &ver));
    mgc_cache_put(c, &t2, v1, (mgc_ver_t){ 1, 11 });
    entity_unref(v1);
    entity_unref(v2);
    mgc_cache_free(c);             /* releases v1's last reference (ASan: no leak) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geo_key_is_the_stable_hash_in_hex),
        cmocka_unit_test(test_document_round_trip_in_one_pass),
        cmocka_unit_test(test_document_fields_of_other_shapes),
        cmocka_unit_test(test_cache_answers_only_for_its_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
