/* Unit tests of core/: arena, sbuf, interning, time, problems, flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/core.h"

static void arena_basics(void **state)
{
    (void)state;
    arena_t *a = arena_new(0);
    assert_non_null(a);
    char *s = arena_strdup(a, "hello");
    assert_string_equal(s, "hello");
    void *big = arena_alloc(a, 1 << 20);          /* larger than a block */
    memset(big, 1, 1 << 20);
    assert_true(((uintptr_t)arena_alloc(a, 3) & 15) == 0);
    assert_string_equal(arena_printf(a, "%d-%s", 42, "x"), "42-x");
    arena_reset(a);
    assert_int_equal(arena_used(a), 0);
    arena_free(a);
}

static int cleaned;
static void cleanup(void *p) { cleaned += *(int *)p; }

static void arena_cleanups(void **state)
{
    (void)state;
    static int one = 1;
    arena_t *a = arena_new(0);
    arena_on_free(a, cleanup, &one);
    arena_on_free(a, cleanup, &one);
    arena_reset(a);
    assert_int_equal(cleaned, 2);
    arena_on_free(a, cleanup, &one);
    arena_free(a);
    assert_int_equal(cleaned, 3);
}

static void sbuf_ops(void **state)
{
    (void)state;
    arena_t *a = arena_new(0);
    sbuf_t   sb;
    sb_init(&sb, a, 4);
    for (int i = 0; i < 1000; i++) sb_addc(&sb, 'x');
    assert_int_equal(sb.len, 1000);
    sb_clear(&sb);
    sb_addi(&sb, -9223372036854775807LL - 1);
    assert_string_equal(sb.p, "-9223372036854775808");
    sb_clear(&sb);
    sb_printf(&sb, "%s=%d", "a", 7);
    sb_adds(&sb, "!");
    assert_string_equal(sb.p, "a=7!");
    arena_free(a);
}

static void interning(void **state)
{
    (void)state;
    const char *a = intern_cstr("https://example.org/speed");
    char        buf[64];
    strcpy(buf, "https://example.org/speed");
    assert_ptr_equal(a, intern(buf, strlen(buf)));
    assert_ptr_equal(a, intern_find(buf, strlen(buf)));
    assert_null(intern_find("never-interned-xyz", 18));
    for (int i = 0; i < 5000; i++) {          /* growth keeps old pointers */
        snprintf(buf, sizeof buf, "name%d", i);
        intern_cstr(buf);
    }
    assert_ptr_equal(a, intern_cstr("https://example.org/speed"));
}

static void times(void **state)
{
    (void)state;
    int64_t ms;   /* microseconds, despite the name */
    char    out[32];
    assert_true(cr_datetime_parse("2024-02-29T12:30:15.123Z", &ms));
    cr_datetime_format(ms, out);
    assert_string_equal(out, "2024-02-29T12:30:15.123Z");
    assert_true(cr_datetime_parse("2024-02-29T14:30:15.123+02:00", &ms));
    cr_datetime_format(ms, out);
    assert_string_equal(out, "2024-02-29T12:30:15.123Z");
    assert_true(cr_datetime_parse("1970-01-01T00:00:00Z", &ms));
    assert_int_equal(ms, 0);
    /* no fraction when the milliseconds are zero; three digits otherwise */
    assert_int_equal(cr_datetime_format(ms, out), 20);
    assert_string_equal(out, "1970-01-01T00:00:00Z");
    assert_true(cr_datetime_parse("2024-01-01T10:00:00.000Z", &ms));
    assert_int_equal(cr_datetime_format(ms, out), 20);
    assert_string_equal(out, "2024-01-01T10:00:00Z");
    assert_true(cr_datetime_parse("2024-01-01T10:00:00,5Z", &ms));
    assert_int_equal(cr_datetime_format(ms, out), 24);
    assert_string_equal(out, "2024-01-01T10:00:00.500Z");
    assert_true(cr_datetime_parse("2024-01-01T10:00:00.007Z", &ms));
    cr_datetime_format(ms, out);
    assert_string_equal(out, "2024-01-01T10:00:00.007Z");
    cr_datetime_format(-1000, out);
    assert_string_equal(out, "1969-12-31T23:59:59.999Z");
    cr_datetime_format(-1, out);
    assert_string_equal(out, "1969-12-31T23:59:59.999999Z");
    /* 4.6.3: up to six fraction digits survive; more are read and dropped */
    assert_true(cr_datetime_parse("2024-01-01T10:00:00.123456Z", &ms));
    assert_int_equal(cr_datetime_format(ms, out), 27);
    assert_string_equal(out, "2024-01-01T10:00:00.123456Z");
    assert_true(cr_datetime_parse("2024-01-01T10:00:00.000001999Z", &ms));
    cr_datetime_format(ms, out);
    assert_string_equal(out, "2024-01-01T10:00:00.000001Z");
    /* 4.6.3: a DateTime carries its time zone designator */
    assert_false(cr_datetime_parse("2024-01-01T10:00:00", &ms));
    assert_false(cr_datetime_parse("2024-01-01T10:00:00.123", &ms));
    assert_true(cr_datetime_parse("2024-01-01T10:00:00-01:30", &ms));
    cr_datetime_format(ms, out);
    assert_string_equal(out, "2024-01-01T11:30:00Z");
    assert_false(cr_datetime_parse("2023-02-29T00:00:00Z", &ms));   /* not a leap year */
    assert_false(cr_datetime_parse("2024-13-01T00:00:00Z", &ms));
    assert_false(cr_datetime_parse("2024-01-01 00:00:00Z", &ms));
    assert_false(cr_datetime_parse("2024-01-01T25:00:00Z", &ms));
    assert_false(cr_datetime_parse("2024-01-01T00:00:00Zjunk", &ms));
    assert_true(cr_date_parse("2024-01-02", &ms));
    assert_int_equal(ms, 19724LL * 86400000000LL);
    assert_true(cr_time_parse("10:00:00Z", &ms));
    assert_int_equal(ms, 36000000000LL);
    assert_true(cr_time_parse("10:00:00", &ms));     /* a q Time may omit it */
    assert_int_equal(ms, 36000000000LL);
}

static void problems(void **state)
{
    (void)state;
    problem_t p = {0};
    assert_false(problem_set(&p, PB_ALREADY_EXISTS, "entity %s", "urn:x"));
    assert_int_equal(problem_status(&p), 409);
    assert_string_equal(p.detail, "entity urn:x");
    assert_string_equal(problem_type_uri(PB_LD_CONTEXT_NOT_AVAILABLE),
                        "https://uri.etsi.org/ngsi-ld/errors/LdContextNotAvailable");
    problem_set(&p, PB_LD_CONTEXT_NOT_AVAILABLE, "x");
    assert_int_equal(problem_status(&p), 503);
}

static void flags(void **state)
{
    (void)state;
    char *argv[] = {"coraine", "-fg", "--port", "2000", "--dbLockPrefer=writes", "--maxBodySize", "2M", NULL};
    setenv("CORAINE_MAXLIMIT", "500", 1);
    assert_true(cr_config_load(7, argv));
    assert_true(cr_config.foreground);
    assert_int_equal(cr_config.port, 2000);
    assert_string_equal(cr_config.db_lock_prefer, "writes");
    assert_int_equal(cr_config.max_body_size, 2u << 20);
    assert_int_equal(cr_config.max_limit, 500);
    char *bad[] = {"coraine", "--dbLockPrefer", "sideways", NULL};
    assert_false(cr_config_load(3, bad));
    char *unknown[] = {"coraine", "--nope", NULL};
    assert_false(cr_config_load(2, unknown));
    unsetenv("CORAINE_MAXLIMIT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(arena_basics), cmocka_unit_test(arena_cleanups), cmocka_unit_test(sbuf_ops),
        cmocka_unit_test(interning),    cmocka_unit_test(times),          cmocka_unit_test(problems),
        cmocka_unit_test(flags),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
