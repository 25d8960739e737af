/*
 * test_json.c - unit tests for src/json: the parser's strictness (a table of
 * valid and invalid documents), limits, escapes, UTF-8, numbers, rendering
 * round-trips, tree operations and the streaming writer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"

#include "arena_fixture.h"

/* Parses n bytes of s (on a copy), NULL on error with the message in err. */
static json_t *parse_n(const char *s, size_t n, char *err, size_t errlen)
{
    return json_parse_copy(A, s, n, NULL, err, errlen);
}

static json_t *parse(const char *s)
{
    char err[256];
    return parse_n(s, strlen(s), err, sizeof err);
}

static const char *render(const json_t *n)
{
    sbuf_t sb;
    sb_init(&sb, A, 16);
    json_render(&sb, n);
    return sb.p;
}

/* ------------------------------------------------------------ valid table */

static const struct { const char *in; const char *out; } valid_cases[] = {
    { "null", "null" },
    { " \t\r\n true \n", "true" },
    { "false", "false" },
    { "0", "0" },
    { "-0", "-0" },
    { "-0.0", "-0" },
    { "1", "1" },
    { "-1", "-1" },
    { "9223372036854775807", "9223372036854775807" },
    { "-9223372036854775808", "-9223372036854775808" },
    { "9223372036854775808", "9.223372036854776e+18" },
    { "1.5", "1.5" },
    { "-55.3", "-55.3" },
    { "1e2", "100" },
    { "1E+2", "100" },
    { "1e-2", "0.01" },
    { "0.1", "0.1" },
    { "3.0", "3" },
    { "1e-400", "0" },
    { "1.7976931348623157e308", "1.7976931348623157e+308" },
    { "0.30000000000000004", "0.30000000000000004" },
    { "123456789012345678901234567890", "1.2345678901234568e+29" },
    { "0.0000001", "1e-07" },
    { "13.3505", "13.3505" },
    { "\"\"", "\"\"" },
    { "\"abc\"", "\"abc\"" },
    { "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\\"\\\\/\\b\\f\\n\\r\\t\"" },
    { "\"\\u0041\\u00e9\"", "\"A\xc3\xa9\"" },
    { "\"\\u20AC\"", "\"\xe2\x82\xac\"" },
    { "\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\"" },
    { "\"\\uDBFF\\uDFFF\"", "\"\xf4\x8f\xbf\xbf\"" },
    { "\"\\u001f\\u0001\"", "\"\\u001f\\u0001\"" },
    { "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"" },
    { "\"\xe2\x80\xa8\"", "\"\xe2\x80\xa8\"" },
    { "\"\x7f\"", "\"\x7f\"" },
    { "[]", "[]" },
    { "{}", "{}" },
    { "[ ]", "[]" },
    { "{ }", "{}" },
    { "[[[]]]", "[[[]]]" },
    { "[1, \"a\" ,true,null,{ }]", "[1,\"a\",true,null,{}]" },
    { "{\"a\" : 1 , \"b\":[1,2,{\"c\":null}]}", "{\"a\":1,\"b\":[1,2,{\"c\":null}]}" },
    { "{\"a\":1,\"a\":2}", "{\"a\":1,\"a\":2}" },
    { "{\"\":\"\"}", "{\"\":\"\"}" },
    { "{\"k\\u00e9y\":1}", "{\"k\xc3\xa9y\":1}" },
};

static void test_valid(void **state)
{
    (void)state;
    for (size_t i = 0; i < CR_ARRAY_LEN(valid_cases); i++) {
        char    err[256];
        json_t *n = parse_n(valid_cases[i].in, strlen(valid_cases[i].in), err, sizeof err);
        if (!n)
            fail_msg("case %zu (%s) should parse: %s", i, valid_cases[i].in, err);
        const char *out = render(n);
        if (strcmp(out, valid_cases[i].out) != 0)
            fail_msg("case %zu (%s): rendered %s, expected %s", i, valid_cases[i].in, out,
                     valid_cases[i].out);
        /* the rendering parses back to an equal tree */
        json_t *m = parse(out);
        assert_non_null(m);
        assert_true(json_equal(n, m));
    }
}

/* ------------------------------------------------------------ invalid table */

static const struct { const char *in; size_t len; } invalid_cases[] = {
#define S(x) { x, sizeof(x) - 1 }
    S(""), S(" "), S("["), S("]"), S("{"), S("}"), S("[1,]"), S("[,1]"), S("[1,,2]"),
    S("{\"a\":1,}"), S("{,}"), S("{\"a\" 1}"), S("{\"a\":}"), S("{a:1}"), S("{'a':1}"),
    S("{\"a\":1 \"b\":2}"), S("{1:1}"), S("[1 2]"), S("1 2"), S("[1]]"), S("{\"a\":1}}"),
    S("\"a\"\"b\""), S("01"), S("-01"), S("00"), S("1."), S(".5"), S("1e"), S("1e+"),
    S("1.e5"), S("+1"), S("-"), S("--1"), S("0x10"), S("1e400"), S("-1e400"),
    S("1e999999999999"), S("NaN"), S("nan"), S("Infinity"), S("-Infinity"), S("nul"),
    S("tru"), S("truex"), S("True"), S("nulll"), S("/*c*/1"), S("// c\n1"), S("#1"),
    S("\"abc"), S("\"abc\\"), S("\"\\x\""), S("\"\\u12\""), S("\"\\u12G4\""),
    S("\"\\u0000\""), S("\"\\ud800\""), S("\"\\udc00\""), S("\"\\ud800\\u0041\""),
    S("\"\\ud800x\""), S("\"\\ud800\\\""), S("\"\\udbff\\udbff\""), S("\"\\U0041\""),
    S("\"\t\""), S("\"\n\""), S("\"\x01\""), S("\"\x1f\""), S("\"a\0b\""), S("1\0"),
    S("\0"), S("\"\xc0\xaf\""), S("\"\xc1\xbf\""), S("\"\xe0\x80\xaf\""),
    S("\"\xe0\x9f\xbf\""), S("\"\xed\xa0\x80\""), S("\"\xed\xbf\xbf\""),
    S("\"\xf0\x8f\xbf\xbf\""), S("\"\xf4\x90\x80\x80\""), S("\"\xf5\x80\x80\x80\""),
    S("\"\xff\""), S("\"\x80\""), S("\"\xc3\""), S("\"\xe2\x82\""), S("\"\xf0\x9f\x98\""),
    S("\"\xc3\x28\""), S("\xef\xbb\xbf" "1"), S("[1,2"), S("{\"a\":1"), S("{\"a\""),
    S("[\"a\",]"), S("\x80"), S("'a'"), S("[-]"), S("[1e]"), S("[0.]"), S("[-.5]"),
#undef S
};

static void test_invalid(void **state)
{
    (void)state;
    for (size_t i = 0; i < CR_ARRAY_LEN(invalid_cases); i++) {
        char    err[256];
        json_t *n = parse_n(invalid_cases[i].in, invalid_cases[i].len, err, sizeof err);
        if (n)
            fail_msg("case %zu (%s) should be rejected, rendered %s", i, invalid_cases[i].in,
                     render(n));
        if (strncmp(err, "at offset ", 10) != 0)
            fail_msg("case %zu: message without an offset: %s", i, err);
    }
}

static void expect_error(const char *in, const char *msg)
{
    char err[256];
    assert_null(parse_n(in, strlen(in), err, sizeof err));
    if (strcmp(err, msg) != 0)
        fail_msg("%s: got \"%s\", expected \"%s\"", in, err, msg);
}

static void test_error_messages(void **state)
{
    (void)state;
    expect_error("[1,]", "at offset 3: trailing comma in array");
    expect_error("{\"a\" 1}", "at offset 5: expected ':', found '1'");
    expect_error("[1 2]", "at offset 3: expected ',' or ']', found '2'");
    expect_error("{\"a\":1,}", "at offset 7: trailing comma in object");
    expect_error("", "at offset 0: expected a value, found end of input");
    expect_error("[1", "at offset 2: expected ',' or ']', found end of input");
    expect_error("01", "at offset 0: leading zeros are not allowed in numbers");
    expect_error("\"ab", "at offset 3: unterminated string");
    expect_error("\"a\tb\"", "at offset 2: control character 0x09 in string (must be escaped)");
    expect_error("1e400", "at offset 0: number out of range (overflows a double)");
    expect_error("\"\\u0000\"", "at offset 1: \\u0000 is not allowed in strings");
    expect_error("\"x\xed\xa0\x80\"", "at offset 2: invalid UTF-8 in string");
    expect_error("{} x", "at offset 3: unexpected 'x' after the JSON value");
    expect_error("{1:2}", "at offset 1: expected '\"' (a member name), found '1'");

    /* a short error buffer is truncated, never overrun */
    char small[8];
    assert_null(json_parse_copy(A, "[1,]", 4, NULL, small, sizeof small));
    assert_true(strlen(small) < sizeof small);
    /* no error buffer at all */
    assert_null(json_parse_copy(A, "[1,]", 4, NULL, NULL, 0));
}

/* ------------------------------------------------------------ limits */

static char *nested(size_t depth, char open, char close)
{
    char *s = arena_alloc(A, 2 * depth + 1);
    memset(s, open, depth);
    memset(s + depth, close, depth);
    s[2 * depth] = '\0';
    return s;
}

static void test_limits(void **state)
{
    char          err[256];
    json_limits_t lim = { 0 };
    (void)state;

    /* default depth 64 */
    char *s = nested(64, '[', ']');
    assert_non_null(json_parse_copy(A, s, strlen(s), NULL, err, sizeof err));
    s = nested(65, '[', ']');
    assert_null(json_parse_copy(A, s, strlen(s), NULL, err, sizeof err));
    assert_non_null(strstr(err, "nesting deeper than 64"));

    /* custom depth, objects count too */
    lim.max_depth = 2;
    assert_non_null(json_parse_copy(A, "{\"a\":[1]}", 9, &lim, err, sizeof err));
    assert_null(json_parse_copy(A, "{\"a\":[{}]}", 10, &lim, err, sizeof err));
    assert_string_equal(err, "at offset 6: nesting deeper than 2");

    /* a huge limit is clamped: deep input errors out instead of overflowing the stack */
    lim.max_depth = UINT32_MAX;
    s = nested(100000, '[', ']');
    assert_null(json_parse_copy(A, s, strlen(s), &lim, err, sizeof err));

    /* size */
    lim.max_depth = 0;
    lim.max_size = 5;
    assert_non_null(json_parse_copy(A, "[1,2]", 5, &lim, err, sizeof err));
    assert_null(json_parse_copy(A, "[1,22]", 6, &lim, err, sizeof err));
    assert_non_null(strstr(err, "exceeds the limit of 5 bytes"));
    char buf[8] = "[1,22]";
    assert_null(json_parse(A, buf, 6, &lim, err, sizeof err));
    assert_non_null(strstr(err, "exceeds the limit"));
}

/* ------------------------------------------------------------ in situ */

static void test_in_situ(void **state)
{
    char    buf[64];
    char    err[128];
    const char *doc = "{\"id\":\"urn:a\",\"n\":\"x\\ny\",\"u\":\"\\u00e9!\"}";
    (void)state;

    strcpy(buf, doc);
    json_t *r = json_parse(A, buf, strlen(doc), NULL, err, sizeof err);
    assert_non_null(r);
    json_t *id = json_get(r, "id");
    /* no escape: the string is where it was in the buffer */
    assert_ptr_equal(id->str, buf + 7);
    assert_string_equal(id->str, "urn:a");
    assert_int_equal(id->len, 5);
    json_t *n = json_get(r, "n");
    assert_true(n->str > buf && n->str < buf + sizeof buf);
    assert_string_equal(n->str, "x\ny");
    assert_int_equal(n->len, 3);
    assert_string_equal(json_get(r, "u")->str, "\xc3\xa9!");
    assert_ptr_equal(json_get(r, "u")->key, buf + strlen("{\"id\":\"urn:a\",\"n\":\"x\\ny\",\""));

    /* json_parse_copy leaves its input as it was */
    r = json_parse_copy(A, doc, strlen(doc), NULL, err, sizeof err);
    assert_non_null(r);
    assert_string_equal(json_get(r, "n")->str, "x\ny");
    assert_string_equal(doc, "{\"id\":\"urn:a\",\"n\":\"x\\ny\",\"u\":\"\\u00e9!\"}");

    /* only len bytes are looked at: what follows in the buffer is ignored */
    strcpy(buf, "[1]garbage");
    r = json_parse(A, buf, 3, NULL, err, sizeof err);
    assert_non_null(r);
    assert_int_equal(r->len, 1);
}

/* ------------------------------------------------------------ numbers */

static void test_numbers(void **state)
{
    json_t *n;
    (void)state;

    n = parse("42");
    assert_true(n->is_int);
    assert_int_equal(n->i, 42);
    assert_true(json_number(n) == 42.0);
    n = parse("-9223372036854775808");
    assert_true(n->is_int);
    assert_true(n->i == INT64_MIN);
    n = parse("9223372036854775808");
    assert_false(n->is_int);
    assert_true(n->num == 9223372036854775808.0);
    n = parse("1.0");
    assert_false(n->is_int);
    assert_true(n->num == 1.0);
    n = parse("1e3");
    assert_false(n->is_int);
    assert_true(n->num == 1000.0);
    n = parse("-0");
    assert_false(n->is_int);
    assert_true(n->num == 0 && signbit(n->num));
    /* correctly rounded beyond the fast path */
    n = parse("2.2250738585072011e-308");
    assert_true(n->num == strtod("2.2250738585072011e-308", NULL));
    n = parse("9007199254740993.0");
    assert_true(n->num == 9007199254740992.0);
    n = parse("0.1000000000000000055511151231257827021181583404541015625");
    assert_true(n->num == 0.1);
    n = parse("1234567890123456789012345678901234567890e-30");
    assert_true(n->num == strtod("1234567890123456789012345678901234567890e-30", NULL));
    n = parse("0.00000000000000000000000000000000000000000001");
    assert_true(n->num == 1e-44);
    assert_true(json_number(parse("\"1\"")) == 0.0);
}

/* The reference: first of %.15g/%.16g/%.17g that reads back. */
static const char *ref_double(double v, char *buf)
{
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, 40, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_render_numbers(void **state)
{
    sbuf_t sb;
    char   ref[40];
    (void)state;

    static const struct { double v; const char *out; } cases[] = {
        { 0.0, "0" }, { 1.0, "1" }, { -1.0, "-1" }, { 0.5, "0.5" }, { 55.3, "55.3" },
        { -55.3, "-55.3" }, { 0.1 + 0.2, "0.30000000000000004" }, { 1.0 / 3, "0.3333333333333333" },
        { 1e21, "1e+21" }, { 1e15, "1000000000000000" }, { 9007199254740991.0, "9007199254740991" },
        { 1e-7, "1e-07" }, { 123456.789, "123456.789" }, { 5e-324, "4.94065645841247e-324" },
        { 1.7976931348623157e308, "1.7976931348623157e+308" }, { 0.0001, "0.0001" },
        { 0.00012345, "0.00012345" }, { 52.5075, "52.5075" }, { 100.25, "100.25" },
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        sb_init(&sb, A, 8);
        json_render_number(&sb, cases[i].v);
        if (strcmp(sb.p, cases[i].out) != 0)
            fail_msg("number %zu: got %s, expected %s", i, sb.p, cases[i].out);
    }
    sb_init(&sb, A, 8);
    json_render_number(&sb, -0.0);
    assert_string_equal(sb.p, "-0");
    sb_init(&sb, A, 8);
    json_render_number(&sb, NAN);
    assert_string_equal(sb.p, "null");
    sb_init(&sb, A, 8);
    json_render_number(&sb, INFINITY);
    json_render_number(&sb, -INFINITY);
    assert_string_equal(sb.p, "nullnull");

    /* integral values below 2^53 (the digit fast paths of jr_u64 and the
     * cast-based integral test): exactly the digits %.0f prints */
    for (int i = -100000; i <= 100000; i++) {
        double v = i;
        snprintf(ref, sizeof ref, "%.0f", v);
        sb_init(&sb, A, 8);
        json_render_number(&sb, v);
        if (i != 0 && strcmp(sb.p, ref) != 0)
            fail_msg("integer %d rendered as %s", i, sb.p);
    }
    for (int i = 0; i < 100000; i++) {
        double v = (double)(rng() >> (11 + i % 53));
        if (i & 1)
            v = -v;
        snprintf(ref, sizeof ref, "%.0f", v);
        sb_init(&sb, A, 8);
        json_render_number(&sb, v);
        if (v != 0 && strcmp(sb.p, ref) != 0)
            fail_msg("integer %.0f rendered as %s", v, sb.p);
    }

    /* random bit patterns round-trip; non-integers match the reference text */
    for (int i = 0; i < 200000; i++) {
        uint64_t bits = rng();
        double   v;
        memcpy(&v, &bits, 8);
        if (isnan(v) || isinf(v))
            continue;
        sb_init(&sb, A, 8);
        json_render_number(&sb, v);
        double back = strtod(sb.p, NULL);
        if (memcmp(&back, &v, 8) != 0 && !(v == 0 && back == 0))
            fail_msg("%.17g rendered as %s does not read back", v, sb.p);
        if (v != floor(v) && strcmp(sb.p, ref_double(v, ref)) != 0)
            fail_msg("%.17g rendered as %s, reference %s", v, sb.p, ref);
    }
    /* short decimals, the fast path's territory */
    for (int i = 0; i < 200000; i++) {
        static const double p10[] = { 1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9 };
        double v = (double)(int64_t)(rng() % 2000000000000ULL - 1000000000000LL) /
                   p10[rng() % 10];
        sb_init(&sb, A, 8);
        json_render_number(&sb, v);
        if (strtod(sb.p, NULL) != v)
            fail_msg("%.17g rendered as %s does not read back", v, sb.p);
        if (v != floor(v) && strcmp(sb.p, ref_double(v, ref)) != 0)
            fail_msg("%.17g rendered as %s, reference %s", v, sb.p, ref);
        arena_reset(A);
    }
    /* integers */
    static const int64_t ints[] = { 0, 7, -7, 10, 99, 100, 12345678901234LL, INT64_MAX, INT64_MIN };
    for (size_t i = 0; i < CR_ARRAY_LEN(ints); i++) {
        json_t *n = json_new_int(A, ints[i]);
        char    want[32];
        snprintf(want, sizeof want, "%lld", (long long)ints[i]);
        assert_string_equal(render(n), want);
    }
}

/* ------------------------------------------------------------ strings, UTF-8 */

static void test_render_strings(void **state)
{
    sbuf_t sb;
    (void)state;

    sb_init(&sb, A, 4);
    json_render_string(&sb, "a\"b\\c\x01\x1f\x7f\xc3\xa9/\n", 12);
    assert_string_equal(sb.p, "\"a\\\"b\\\\c\\u0001\\u001f\x7f\xc3\xa9/\\n\"");

    /* every byte below 0x20 and a long string crossing the 8-byte scan and 4 KiB chunks */
    size_t n = 10000;
    char  *s = arena_alloc(A, n);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)(i % 97 == 0 ? 1 + i % 31 : 'a' + i % 26);
    s[5000] = '"';
    s[0] = '\0';
    sb_init(&sb, A, 4);
    json_render_string(&sb, s, n);
    char    err[128];
    /* s[0] is '\0', rendered \u0000, which the parser refuses */
    assert_null(json_parse_copy(A, sb.p, sb.len, NULL, err, sizeof err));
    s[0] = 'x';
    sb_init(&sb, A, 4);
    json_render_string(&sb, s, n);
    json_t *back = json_parse_copy(A, sb.p, sb.len, NULL, err, sizeof err);
    assert_non_null(back);
    assert_int_equal(back->len, n);
    assert_memory_equal(back->str, s, n);

    /* every length up to 40 with one byte to escape at every place (the
     * 8-byte steps and the byte-by-byte tail meet everywhere) */
    for (size_t len = 0; len <= 40; len++)
        for (size_t at = 0; at <= len; at++) {
            char in[48], want[64];
            size_t k = 0;
            want[k++] = '"';
            for (size_t i = 0; i < len; i++) {
                in[i] = (char)('a' + i % 26);
                if (i == at) {
                    in[i] = '\n';
                    want[k++] = '\\';
                    want[k++] = 'n';
                } else {
                    want[k++] = in[i];
                }
            }
            want[k++] = '"';
            want[k] = '\0';
            sb_init(&sb, A, 4);
            json_render_string(&sb, in, len);
            assert_string_equal(sb.p, want);
        }

    /* two to escape at every pair of places, a quote and a control byte:
     * an escaped byte followed by a clean tail that the overlapping last
     * 8-byte store covers */
    for (size_t len = 2; len <= 26; len++)
        for (size_t at1 = 0; at1 < len; at1++)
            for (size_t at2 = at1 + 1; at2 < len; at2++) {
                char   in[32], want[96];
                size_t k = 0;
                want[k++] = '"';
                for (size_t i = 0; i < len; i++) {
                    in[i] = (char)('A' + i % 26);
                    if (i == at1 || i == at2) {
                        in[i] = i == at1 ? '"' : '\x01';
                        k += (size_t)sprintf(want + k, i == at1 ? "\\\"" : "\\u0001");
                    } else {
                        want[k++] = in[i];
                    }
                }
                want[k++] = '"';
                want[k] = '\0';
                sb_init(&sb, A, 4);
                json_render_string(&sb, in, len);
                assert_string_equal(sb.p, want);
            }

    /* a NUL byte in a string renders as \u0000 (and the parser refuses it back) */
    sb_init(&sb, A, 4);
    json_render_string(&sb, "a\0b", 3);
    assert_string_equal(sb.p, "\"a\\u0000b\"");
}

static void test_utf8(void **state)
{
    (void)state;
    static const struct { const char *s; size_t n; bool ok; } cases[] = {
#define U(x, ok) { x, sizeof(x) - 1, ok }
        U("", true), U("plain ascii text that is long enough for words", true),
        U("\xc2\x80", true), U("\xdf\xbf", true), U("\xe0\xa0\x80", true), U("\xed\x9f\xbf", true),
        U("\xee\x80\x80", true), U("\xef\xbf\xbf", true), U("\xf0\x90\x80\x80", true),
        U("\xf4\x8f\xbf\xbf", true), U("abc\xc3\xa9xyz12345678\xf0\x9f\x98\x80", true),
        U("\x80", false), U("\xbf", false), U("\xc0\x80", false), U("\xc1\xbf", false),
        U("\xc2", false), U("\xc2\x7f", false), U("\xe0\x9f\xbf", false), U("\xed\xa0\x80", false),
        U("\xed\xbf\xbf", false), U("\xe1\x80", false), U("\xf0\x8f\xbf\xbf", false),
        U("\xf4\x90\x80\x80", false), U("\xf5\x80\x80\x80", false), U("\xf8\x88\x80\x80\x80", false),
        U("\xff", false), U("\xfe", false), U("12345678\xc3", false), U("\xf0\x9f\x98", false),
#undef U
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++)
        if (json_utf8_valid(cases[i].s, cases[i].n) != cases[i].ok)
            fail_msg("utf8 case %zu", i);
    /* a NUL byte is valid UTF-8 (the parser rejects it for its own reasons) */
    assert_true(json_utf8_valid("a\0b", 3));
}

/* ------------------------------------------------------------ trees */

static void test_tree_ops(void **state)
{
    (void)state;
    json_t *o = json_new(A, JSON_OBJECT);
    json_add(o, "a", json_new_int(A, 1));
    json_add(o, "b", json_new_string(A, "x"));
    json_add(o, "c", json_new_bool(A, true));
    json_add(o, "d", json_new_number(A, 2.5));
    json_add(o, "e", json_new(A, JSON_NULL));
    char tmp[] = "copied";
    json_add(o, "f", json_new_stringn(A, tmp, 4));
    tmp[0] = 'X';
    assert_int_equal(o->len, 6);
    assert_string_equal(render(o), "{\"a\":1,\"b\":\"x\",\"c\":true,\"d\":2.5,\"e\":null,\"f\":\"copi\"}");
    assert_ptr_equal(json_get(o, "c")->type, JSON_TRUE);
    assert_null(json_get(o, "zz"));
    assert_null(json_get(json_get(o, "a"), "a"));
    assert_null(json_get(NULL, "a"));

    json_t *b = json_remove(o, "b");
    assert_non_null(b);
    assert_string_equal(b->str, "x");
    assert_null(b->next);
    assert_int_equal(o->len, 5);
    assert_null(json_remove(o, "b"));
    assert_non_null(json_remove(o, "a"));          /* first */
    assert_non_null(json_remove(o, "f"));          /* last */
    assert_string_equal(render(o), "{\"c\":true,\"d\":2.5,\"e\":null}");

    json_t *arr = json_new(A, JSON_ARRAY);
    json_t *tail = NULL;
    for (int i = 0; i < 5; i++)
        json_push(arr, &tail, NULL, json_new_int(A, i));
    assert_int_equal(arr->len, 5);
    assert_string_equal(render(arr), "[0,1,2,3,4]");
    json_add(o, "arr", arr);

    /* clone is deep and independent */
    arena_t *b2 = arena_new(4096);
    json_t  *c = json_clone(b2, o);
    assert_true(json_equal(o, c));
    json_get(o, "arr")->child->i = 99;
    assert_false(json_equal(o, c));
    assert_string_equal(render(c), "{\"c\":true,\"d\":2.5,\"e\":null,\"arr\":[0,1,2,3,4]}");
    arena_free(b2);

    /* duplicates are kept; json_get returns the first */
    json_t *d = parse("{\"k\":1,\"k\":2}");
    assert_int_equal(d->len, 2);
    assert_int_equal(json_get(d, "k")->i, 1);
}

static void test_equal(void **state)
{
    (void)state;
    static const struct { const char *a, *b; bool eq; } cases[] = {
        { "{\"a\":1,\"b\":[1,2]}", "{\"b\":[1,2],\"a\":1}", true },
        { "{\"a\":1,\"b\":[1,2]}", "{\"b\":[2,1],\"a\":1}", false },
        { "{\"a\":1}", "{\"a\":1,\"b\":2}", false },
        { "{\"a\":1,\"a\":2}", "{\"a\":2,\"a\":1}", true },
        { "{\"a\":1,\"a\":1,\"a\":2}", "{\"a\":1,\"a\":2,\"a\":2}", false },
        { "1", "1.0", true },
        { "1", "1.5", false },
        { "9007199254740993", "9007199254740992.0", false },
        { "0.1", "1e-1", true },
        { "\"a\"", "\"a\"", true },
        { "\"a\"", "\"b\"", false },
        { "\"a\\u0000\"", "\"a\"", false },
        { "null", "false", false },
        { "[]", "{}", false },
        { "[[],{}]", "[[],{}]", true },
        { "{\"x\":{\"y\":{\"z\":[1,{\"q\":true}]}},\"w\":null}",
          "{\"w\":null,\"x\":{\"y\":{\"z\":[1,{\"q\":true}]}}}", true },
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        json_t *a = parse(cases[i].a), *b = parse(cases[i].b);
        if (!a || !b) {
            if (cases[i].eq)
                fail_msg("equal case %zu does not parse", i);
            continue;
        }
        if (json_equal(a, b) != cases[i].eq || json_equal(b, a) != cases[i].eq)
            fail_msg("equal case %zu", i);
    }
    assert_true(json_equal(NULL, NULL));
    assert_false(json_equal(parse("1"), NULL));

    /* large objects in reverse order (exercises the heap bitmap) */
    json_t *x = json_new(A, JSON_OBJECT), *y = json_new(A, JSON_OBJECT);
    char  **keys = arena_alloc(A, 1000 * sizeof *keys);
    for (int i = 0; i < 1000; i++)
        keys[i] = arena_printf(A, "k%d", i);
    for (int i = 0; i < 1000; i++) {
        json_add(x, keys[i], json_new_int(A, i));
        json_add(y, keys[999 - i], json_new_int(A, 999 - i));
    }
    assert_true(json_equal(x, y));
    json_get(y, "k500")->i = -1;
    assert_false(json_equal(x, y));
}

/* ------------------------------------------------------------ writer */

static void test_writer(void **state)
{
    sbuf_t        sb;
    json_writer_t w;
    (void)state;

    sb_init(&sb, A, 8);
    jw_init(&w, &sb);
    jw_object_begin(&w);
    jw_key(&w, "id");
    jw_string(&w, "urn:ngsi-ld:Vehicle:A\"1");
    jw_key(&w, "n");
    jw_int(&w, -42);
    jw_key(&w, "d");
    jw_number(&w, 0.25);
    jw_key(&w, "list");
    jw_array_begin(&w);
    jw_bool(&w, true);
    jw_bool(&w, false);
    jw_null(&w);
    jw_array_begin(&w);
    jw_array_end(&w);
    jw_object_begin(&w);
    jw_object_end(&w);
    jw_stringn(&w, "abcdef", 3);
    jw_raw(&w, "{\"pre\":1}", 9);
    jw_array_end(&w);
    jw_key(&w, "tree");
    jw_value(&w, parse("{\"a\":[1,2]}"));
    jw_key(&w, "nan");
    jw_number(&w, NAN);
    jw_object_end(&w);
    assert_string_equal(sb.p, "{\"id\":\"urn:ngsi-ld:Vehicle:A\\\"1\",\"n\":-42,\"d\":0.25,"
                              "\"list\":[true,false,null,[],{},\"abc\",{\"pre\":1}],"
                              "\"tree\":{\"a\":[1,2]},\"nan\":null}");
    assert_int_equal(w.depth, 0);
    assert_non_null(parse(sb.p));

    /* top-level sequence of values (e.g. one per line) */
    sb_init(&sb, A, 8);
    jw_init(&w, &sb);
    jw_array_begin(&w);
    for (int i = 0; i < 3; i++) {
        jw_object_begin(&w);
        jw_key(&w, "i");
        jw_int(&w, i);
        jw_key(&w, "s");
        jw_string(&w, NULL);
        jw_object_end(&w);
    }
    jw_array_end(&w);
    assert_string_equal(sb.p, "[{\"i\":0,\"s\":null},{\"i\":1,\"s\":null},{\"i\":2,\"s\":null}]");

    /* deep nesting up to the writer's slots stays well-formed */
    sb_init(&sb, A, 8);
    jw_init(&w, &sb);
    for (int i = 0; i < 127; i++)
        jw_array_begin(&w);
    jw_int(&w, 1);
    jw_int(&w, 2);
    for (int i = 0; i < 127; i++)
        jw_array_end(&w);
    json_limits_t lim = { .max_depth = 200 };
    char          err[128];
    json_t       *r = json_parse_copy(A, sb.p, sb.len, &lim, err, sizeof err);
    assert_non_null(r);

    /* issue 10: whatever the parser accepts (JSON_DEPTH_MAX, the bound of
     * --maxJsonDepth), the writer nests correctly, with response levels
     * around it */
    sb_init(&sb, A, 8);
    jw_init(&w, &sb);
    for (int i = 0; i < JSON_DEPTH_MAX + 8; i++)
        jw_array_begin(&w);
    jw_int(&w, -1);
    jw_int(&w, -2);
    for (int i = 0; i < JSON_DEPTH_MAX + 8; i++)
        jw_array_end(&w);
    lim.max_depth = JSON_DEPTH_MAX + 8;      /* clamped to JSON_DEPTH_MAX */
    assert_null(json_parse_copy(A, sb.p, sb.len, &lim, err, sizeof err));
    assert_non_null(strstr(err, "nesting deeper than 1024"));
    r = json_parse_copy(A, sb.p + 8, sb.len - 16, &lim, err, sizeof err);   /* 8 levels off */
    assert_non_null(r);
    sbuf_t back;
    sb_init(&back, A, 8);
    json_writer_t w2;
    jw_init(&w2, &back);
    jw_array_begin(&w2);
    jw_value(&w2, r);
    jw_array_end(&w2);
    assert_int_equal(back.len, sb.len - 14);
    assert_memory_equal(back.p, sb.p + 7, back.len);
}

/* ------------------------------------------------------------ round trip */

static void test_entity_roundtrip(void **state)
{
    (void)state;
    const char *doc =
        "{\"id\":\"urn:ngsi-ld:Vehicle:A4567\",\"type\":\"Vehicle\","
        "\"speed\":{\"type\":\"Property\",\"value\":55.3,\"observedAt\":\"2024-03-01T12:00:00.000Z\","
        "\"unitCode\":\"KMH\",\"accuracy\":{\"type\":\"Property\",\"value\":0.5}},"
        "\"location\":{\"type\":\"GeoProperty\",\"value\":{\"type\":\"Point\",\"coordinates\":[-8.5,41.2]}},"
        "\"isParked\":{\"type\":\"Relationship\",\"object\":\"urn:ngsi-ld:OffStreetParking:Downtown1\"},"
        "\"brandName\":{\"type\":\"Property\",\"value\":\"Mercedes \\u00e9\\n\"},"
        "\"@context\":[\"https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld\"]}";
    json_t *a = parse(doc);
    assert_non_null(a);
    const char *out = render(a);
    json_t     *b = parse(out);
    assert_non_null(b);
    assert_true(json_equal(a, b));
    assert_string_equal(render(b), out);
    assert_true(json_get(json_get(a, "speed"), "value")->num == 55.3);
    json_t *coords = json_get(json_get(json_get(a, "location"), "value"), "coordinates");
    assert_int_equal(coords->len, 2);
    assert_true(json_number(coords->child) == -8.5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_error_messages),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_in_situ),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_render_numbers),
        cmocka_unit_test(test_render_strings),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_tree_ops),
        cmocka_unit_test(test_equal),
        cmocka_unit_test(test_writer),
        cmocka_unit_test(test_entity_roundtrip),
    };
    return cmocka_run_group_tests_name("json", tests, setup, teardown);
}
