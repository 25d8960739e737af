/* Unit tests of the cor:// frame codec (cor/cor_frame.c): every frame type
 * round trip, the exact byte layout of doc/cor-protocol.md, each check a
 * receiver relies on (lengths, counts, codes, characters), and the
 * operation table both ways. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cor/cor.h"

static bool decode(sbuf_t *sb, cor_frame_t *f, problem_t *p)
{
    memset(p, 0, sizeof *p);
    int64_t n = cor_frame_size((const uint8_t *)sb->p, sb->len, 1 << 20, p);
    if (n <= 0 || (size_t)n != sb->len) return false;
    return cor_frame_decode((const uint8_t *)sb->p, sb->len, f, p);
}

static void hello_round_trip_and_layout(void **state)
{
    (void)state;
    arena_t    *a = arena_new(0);
    sbuf_t      sb;
    cor_frame_t f = {.type = COR_HELLO, .version = 1, .window = 64, .max_frame = 1 << 20, .alias = "hub", .alias_len = 3}, g;
    problem_t   p;
    sb_init(&sb, a, 64);
    assert_true(cor_frame_encode(&sb, &f));
    /* 4 length + 8 header + magic 4, version 2, window 2, max 4, alias length 2, alias 3 */
    static const uint8_t want[] = {0, 0, 0, 25, 1, 0, 0, 0, 0, 0, 0, 0, 'C', 'O', 'R', '1', 0, 1, 0, 64,
                                   0, 0x10, 0, 0, 0, 3, 'h', 'u', 'b'};
    assert_int_equal(sb.len, sizeof want);
    assert_memory_equal(sb.p, want, sizeof want);
    assert_true(decode(&sb, &g, &p));
    assert_int_equal(g.type, COR_HELLO);
    assert_int_equal(g.version, 1);
    assert_int_equal(g.window, 64);
    assert_int_equal(g.max_frame, 1 << 20);
    assert_int_equal(g.alias_len, 3);
    assert_memory_equal(g.alias, "hub", 3);
    /* bad magic, window 0, an alias running past the frame */
    sb.p[12] = 'X';
    assert_false(decode(&sb, &g, &p));
    assert_non_null(strstr(p.detail, "magic"));
    sb.p[12] = 'C';
    sb.p[19] = 0;
    assert_false(decode(&sb, &g, &p));
    sb.p[19] = 64;
    sb.p[25] = 4;
    assert_false(decode(&sb, &g, &p));
    arena_free(a);
}

static void request_round_trip(void **state)
{
    (void)state;
    arena_t    *a = arena_new(0);
    sbuf_t      sb;
    problem_t   p;
    cor_frame_t f = {.type = COR_REQUEST, .id = 0x01020304, .op = COR_OP_QUERY_BATCH, .body = "{\"type\":\"Query\"}",
                     .body_len = 16}, g;
    f.fields[f.n_fields++] = (cor_field_t){COR_F_TENANT, NULL, 0, "t1", 2};
    f.fields[f.n_fields++] = (cor_field_t){COR_F_VIA, NULL, 0, "1.1 a, 1.1 b", 12};
    f.fields[f.n_fields++] = (cor_field_t){COR_F_NAMED, "X-Token", 7, "abc", 3};
    sb_init(&sb, a, 64);
    assert_true(cor_frame_encode(&sb, &f));
    assert_int_equal((uint8_t)sb.p[4], COR_REQUEST);
    assert_memory_equal(sb.p + 8, "\x01\x02\x03\x04", 4);
    assert_int_equal((uint8_t)sb.p[12], COR_OP_QUERY_BATCH);
    assert_int_equal((uint8_t)sb.p[13], COR_ENC_JSON);
    assert_true(decode(&sb, &g, &p));
    assert_int_equal(g.id, 0x01020304);
    assert_int_equal(g.op, COR_OP_QUERY_BATCH);
    assert_int_equal(g.n_fields, 3);
    assert_int_equal(g.fields[1].code, COR_F_VIA);
    assert_memory_equal(g.fields[1].value, "1.1 a, 1.1 b", 12);
    assert_int_equal(g.fields[2].code, COR_F_NAMED);
    assert_memory_equal(g.fields[2].name, "X-Token", 7);
    assert_int_equal(g.body_len, 16);
    assert_memory_equal(g.body, "{\"type\":\"Query\"}", 16);

    /* each damage is refused, with a detail */
    struct { size_t at; char v; const char *why; } bad[] = {
        {12, 77, "unknown operation"}, {13, 7, "encoding"}, {16, 40, "unknown code"},
        {19, '\n', "control character"}, {4, 9, "frame type"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        char keep = sb.p[bad[i].at];
        sb.p[bad[i].at] = bad[i].v;
        assert_false(decode(&sb, &g, &p));
        assert_non_null(strstr(p.detail, bad[i].why));
        sb.p[bad[i].at] = keep;
    }
    /* id 0, a field given twice, a body with the encoding 'none' */
    sb.p[8] = sb.p[9] = sb.p[10] = sb.p[11] = 0;
    assert_false(decode(&sb, &g, &p));
    sb.p[11] = 1;
    f.fields[1].code = COR_F_TENANT;
    sbuf_t sb2;
    sb_init(&sb2, a, 64);
    assert_true(cor_frame_encode(&sb2, &f));
    assert_false(decode(&sb2, &g, &p));
    assert_non_null(strstr(p.detail, "twice"));
    sb.p[13] = COR_ENC_NONE;
    assert_false(decode(&sb, &g, &p));
    /* cut short anywhere: the length no longer matches, or a field runs out */
    for (size_t n = COR_HEAD; n < sb.len; n++) {
        sbuf_t cut = sb;
        cut.len = n;
        uint8_t *copy = arena_alloc(a, n);
        memcpy(copy, sb.p, n);
        copy[3] = (uint8_t)(n - 4);
        copy[0] = copy[1] = copy[2] = 0;
        cut.p = (char *)copy;
        bool ok = decode(&cut, &g, &p);
        if (ok) assert_true(g.body_len < 16 || g.n_fields < 3);   /* only the body may shrink */
    }
    arena_free(a);
}

static void response_and_goaway(void **state)
{
    (void)state;
    arena_t    *a = arena_new(0);
    sbuf_t      sb;
    problem_t   p;
    cor_frame_t f = {.type = COR_RESPONSE, .id = 9, .status = 404, .body = "{}", .body_len = 2}, g;
    f.fields[f.n_fields++] = (cor_field_t){COR_F_CONTENT_TYPE, NULL, 0, "application/json", 16};
    sb_init(&sb, a, 64);
    assert_true(cor_frame_encode(&sb, &f));
    assert_true(decode(&sb, &g, &p));
    assert_int_equal(g.status, 404);
    assert_int_equal(g.id, 9);
    assert_string_equal(cor_field_header(g.fields[0].code), "Content-Type");
    sb.p[12] = 0;
    sb.p[13] = 99;                 /* status 99 */
    assert_false(decode(&sb, &g, &p));
    /* a GOAWAY has id 0, a RESPONSE not */
    f.type = COR_GOAWAY;
    sb.len = 0;
    assert_true(cor_frame_encode(&sb, &f));
    assert_false(decode(&sb, &g, &p));
    f.id = 0;
    sb.len = 0;
    assert_true(cor_frame_encode(&sb, &f));
    assert_true(decode(&sb, &g, &p));
    assert_int_equal(g.type, COR_GOAWAY);
    arena_free(a);
}

static void sizes(void **state)
{
    (void)state;
    problem_t p = {0};
    uint8_t   b[8] = {0, 0, 0, 7};
    assert_int_equal(cor_frame_size(b, 3, 100, &p), 0);
    assert_int_equal(cor_frame_size(b, 4, 100, &p), -1);          /* 11 < a header */
    b[3] = 8;
    assert_int_equal(cor_frame_size(b, 4, 100, &p), 12);
    b[0] = 0x7f;
    assert_int_equal(cor_frame_size(b, 4, 100, &p), -1);
    assert_non_null(strstr(p.detail, "larger than"));
    /* a field of 64 KiB cannot be encoded */
    arena_t    *a = arena_new(0);
    sbuf_t      sb;
    char       *big = arena_calloc(a, 70000);
    cor_frame_t f = {.type = COR_REQUEST, .id = 1, .op = COR_OP_QUERY_ENTITIES};
    f.fields[f.n_fields++] = (cor_field_t){COR_F_QUERY, NULL, 0, big, 70000};
    sb_init(&sb, a, 64);
    assert_false(cor_frame_encode(&sb, &f));
    arena_free(a);
}

static void operations(void **state)
{
    (void)state;
    const char *t, *m, *pre, *suf;
    size_t      tl;
    bool        has;
    static const char q[] = "/ngsi-ld/v1/entities";
    assert_int_equal(cor_op_of("GET", q, strlen(q), &t, &tl), COR_OP_QUERY_ENTITIES);
    assert_null(t);
    static const char r[] = "/ngsi-ld/v1/entities/urn:a%2Fb";
    assert_int_equal(cor_op_of("GET", r, strlen(r), &t, &tl), COR_OP_RETRIEVE_ENTITY);
    assert_int_equal(tl, strlen("urn:a%2Fb"));
    static const char u[] = "/ngsi-ld/v1/entities/urn:a/attrs";
    assert_int_equal(cor_op_of("PATCH", u, strlen(u), &t, &tl), COR_OP_UPDATE_ATTRS);
    assert_int_equal(tl, 5);
    static const char x[] = "/ngsi-ld/v1/entities/urn:a/attrs/speed";
    assert_int_equal(cor_op_of("PATCH", x, strlen(x), &t, &tl), COR_OP_HTTP);
    static const char bq[] = "/ngsi-ld/v1/entityOperations/query";
    assert_int_equal(cor_op_of("POST", bq, strlen(bq), &t, &tl), COR_OP_QUERY_BATCH);
    assert_int_equal(cor_op_of("GET", "/ngsi-ld/v1/types", 17, &t, &tl), COR_OP_HTTP);
    assert_true(cor_op_route(COR_OP_DELETE_ENTITY, &m, &pre, &has, &suf));
    assert_string_equal(m, "DELETE");
    assert_true(has);
    assert_false(cor_op_route(200, &m, &pre, &has, &suf));
    assert_int_equal(cor_field_code("ngsild-tenant", 13), COR_F_TENANT);
    assert_int_equal(cor_field_code("X-Other", 7), COR_F_NAMED);
}

/* The client's URLs: cor://host:port with an optional path; anything else
 * is refused before any connection. A call on a client not started is
 * answered at once (COR_E_LOST), never left waiting. */
static void client_urls(void **state)
{
    (void)state;
    static const char *const bad[] = {"http://h:1/x", "cor://h", "cor://h:0", "cor://h:65536", "cor://:5",
                                      "cor://h:5x", "cor://[::1/x", NULL};
    problem_t p;
    for (size_t i = 0; bad[i]; i++) {
        memset(&p, 0, sizeof p);
        assert_null(cor_submit("GET", bad[i], NULL, 0, NULL, 0, 100, &p));
        assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    }
    assert_true(cor_is_url("COR://h:1"));
    assert_false(cor_is_url("corx://h:1"));
    static const char *const good[] = {"cor://127.0.0.1:9/ngsi-ld/v1/entities?type=A", "cor://[::1]:9", "cor://h:9/base/"};
    const char *hdr[] = {"Link: <x>", "X-A: b", "NGSILD-Tenant: t"};
    for (size_t i = 0; i < CR_ARRAY_LEN(good); i++) {
        cor_call_t *c = cor_submit("GET", good[i], hdr, 3, NULL, 0, 100, &p);
        assert_non_null(c);
        int         status;
        const char *body, *why;
        size_t      len;
        assert_int_equal(cor_wait(c, &status, &body, &len, &why), COR_E_LOST);
        assert_non_null(strstr(why, "stopping"));
        assert_null(cor_header(c, "Link", &len));
        cor_release(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(hello_round_trip_and_layout), cmocka_unit_test(request_round_trip),
                                       cmocka_unit_test(response_and_goaway), cmocka_unit_test(sizes),
                                       cmocka_unit_test(operations), cmocka_unit_test(client_urls)};
    return cmocka_run_group_tests_name("cor", tests, NULL, NULL);
}
