/* Unit tests of core/: arena, sbuf, interning, time, problems, flags, the block pool. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
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

/* true when fn() aborts in a child process (SIGABRT; under ASan, whose
 * malloc refuses huge sizes itself, a failing exit) instead of returning */
static bool aborts(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        cr_log_open("/dev/null", LOG_ERROR);
        if (!freopen("/dev/null", "w", stderr))         /* ASan's report of the refused size */
            _exit(2);
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) || (WIFEXITED(st) && WEXITSTATUS(st) != 0);
}

static void alloc_huge_arena(void)
{
    arena_t *a = arena_new(0);
    char    *p = arena_alloc(a, SIZE_MAX - 3);   /* rounded up, it wrapped to 0 bytes */
    p[0] = 'x';
}
static void alloc_huge_strndup(void) { arena_strndup(arena_new(0), "x", SIZE_MAX); }
static void alloc_huge_x(void) { cr_xmalloc(SIZE_MAX); }
static void alloc_huge_xarray(void) { cr_xreallocarray(NULL, SIZE_MAX / 2, 4); }
static void alloc_huge_block(void) { arena_alloc(arena_new(0), SIZE_MAX - 64); }

/* issue 10: a size that overflows is an allocation failure (log and abort),
 * never a wrapped number that hands out too little memory */
static void alloc_overflow(void **state)
{
    (void)state;
    assert_true(aborts(alloc_huge_arena));
    assert_true(aborts(alloc_huge_strndup));
    assert_true(aborts(alloc_huge_x));
    assert_true(aborts(alloc_huge_xarray));
    assert_true(aborts(alloc_huge_block));
    char *s = cr_xstrdup("abc");
    assert_string_equal(s, "abc");
    free(s);
    int *v = cr_xcalloc(4, sizeof *v);
    assert_int_equal(v[3], 0);
    v = cr_xreallocarray(v, 8, sizeof *v);
    v[7] = 1;
    free(v);
}

/* issue 10, hash flooding: the hash is keyed per process. */
static void hash_keyed(void **state)
{
    (void)state;
    const char *k = "urn:ngsi-ld:Vehicle:A4567";
    char        cmd[64], out[3][48];
    snprintf(cmd, sizeof cmd, "/proc/%d/exe --print-hash", (int)getpid());
    for (int i = 0; i < 2; i++) {
        FILE *f = popen(cmd, "r");
        assert_non_null(f);
        assert_non_null(fgets(out[i], sizeof out[i], f));
        pclose(f);
    }
    snprintf(out[2], sizeof out[2], "%016llx %016llx\n", (unsigned long long)cr_hash(k, strlen(k)),
             (unsigned long long)cr_hash_u64(42));
    assert_true(strcmp(out[0], out[1]) != 0 || strcmp(out[1], out[2]) != 0);
    /* cr_hash_u64 (geo cells, JSON trees) is keyed too: its half differs as well */
    assert_true(strcmp(out[0] + 17, out[1] + 17) != 0 || strcmp(out[1] + 17, out[2] + 17) != 0);
    assert_true(cr_hash_u64(1) != cr_hash_u64(2));
    /* the stable variant is the same everywhere */
    assert_true(cr_hash_stable(k, strlen(k)) == cr_hash_stable(k, strlen(k)));
    assert_true(cr_hash_stable(k, strlen(k)) != cr_hash(k, strlen(k)));

    /* With public constants, a 16-byte block whose first word is the
     * multiplier's constant zeroed the state: every such key collided
     * whatever followed in the block. The secret key removes that. */
    unsigned char a[32], b[32];
    uint64_t      c = 0xe7037ed1a0b428dbULL;
    memset(a, 'x', sizeof a);
    memcpy(a, &c, 8);
    memcpy(b, a, sizeof b);
    b[9] = 'y';
    assert_true(cr_hash_stable(a, 32) == cr_hash_stable(b, 32));   /* the old weakness */
    assert_true(cr_hash(a, 32) != cr_hash(b, 32));
    /* equal input, equal hash; length counts */
    assert_true(cr_hash(a, 32) == cr_hash(a, 32));
    assert_true(cr_hash(a, 31) != cr_hash(a, 32));
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
    /* the per-thread memo of the last value: repeats and alternations give
     * the text of a fresh formatting (gmtime as the reference) */
    for (int i = 0; i < 3000; i++) {
        int64_t   v = (int64_t)(i % 3) * 86400123456LL + (int64_t)(i / 3) * 1000 + 1700000000000000LL;
        time_t    t = (time_t)(v / 1000000);
        struct tm tm;
        char      ref[40];
        gmtime_r(&t, &tm);
        int n = (int)strftime(ref, sizeof ref, "%Y-%m-%dT%H:%M:%S", &tm);
        int us = (int)(v % 1000000);
        if (us % 1000)
            snprintf(ref + n, sizeof ref - (size_t)n, ".%06dZ", us);
        else if (us)
            snprintf(ref + n, sizeof ref - (size_t)n, ".%03dZ", us / 1000);
        else
            snprintf(ref + n, sizeof ref - (size_t)n, "Z");
        for (int k = 0; k < 2; k++) {
            assert_int_equal(cr_datetime_format(v, out), (int)strlen(ref));
            assert_string_equal(out, ref);
        }
    }
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

    /* issue 10: a detail cut at the buffer's end is cut on a character
     * boundary, whatever the alignment, and stays UTF-8 */
    char long_text[1200];
    for (int shift = 0; shift < 4; shift++) {
        size_t n = (size_t)shift;
        memset(long_text, 'a', n);
        while (n + 9 < sizeof long_text) {                 /* é (2 bytes), € (3), 😀 (4) */
            memcpy(long_text + n, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
            n += 9;
        }
        long_text[n] = '\0';
        problem_set(&p, PB_BAD_REQUEST_DATA, "%s", long_text);
        size_t len = strlen(p.detail);
        assert_true(len < sizeof p.detail && len > sizeof p.detail - 5);
        const unsigned char *d = (const unsigned char *)p.detail;
        for (size_t i = 0; i < len;) {
            int k = d[i] < 0x80 ? 1 : cr_utf8_seq(d + i, d + len);
            assert_true(k > 0);
            i += (size_t)k;
        }
    }
    /* bytes that are not UTF-8 (quoted client input) become '?' */
    problem_set(&p, PB_BAD_REQUEST_DATA, "id %s is bad", "urn:\xff" "A\xc3" "B\xe2\x82");
    assert_string_equal(p.detail, "id urn:?A?B?? is bad");
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

static bool load1(const char *name, const char *value)
{
    char *argv[] = {"coraine", (char *)name, (char *)value, NULL};
    return cr_config_load(3, argv);
}

/* --connectionPoolSize 0 (the default): one worker per core, 16 where a
 * request waits for its store on its thread (--database mongoc, whose round
 * trips to the server hold it: doc/mongodb.md "HTTP workers"); an explicit
 * size wins */
static void pool_defaults(void **state)
{
    (void)state;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    assert_true(load1("--database", "corDB"));
    assert_int_equal(cr_config.connection_pool_size, cores > 0 ? cores : 2);
    assert_true(load1("--database", "mongoc"));
    assert_int_equal(cr_config.connection_pool_size, cores > 16 ? cores : 16);
    char *argv[] = {"coraine", "--database", "mongoc", "--connectionPoolSize", "3", NULL};
    assert_true(cr_config_load(5, argv));
    assert_int_equal(cr_config.connection_pool_size, 3);
}

/* issue 10: sizes with k/M/G suffixes, and bounded integers; overflow,
 * signs and garbage refused at start instead of wrapping */
static void flag_bounds(void **state)
{
    (void)state;
    assert_true(load1("--maxBodySize", "1k"));
    assert_int_equal(cr_config.max_body_size, 1024);
    assert_true(load1("--maxBodySize", "1G"));
    assert_int_equal(cr_config.max_body_size, 1u << 30);
    assert_true(load1("--maxBodySize", "1073741824"));
    const char *bad_sizes[] = {"2G", "1073741825", "18014398509481984M", "99999999999999999999", "-1",
                               " 1", "+1", "1kk", "1.5M", "k", "", "1 k", "1T", "0x10", "1k "};
    for (size_t i = 0; i < CR_ARRAY_LEN(bad_sizes); i++)
        assert_false(load1("--maxBodySize", bad_sizes[i]));

    assert_true(load1("--maxAttributes", "65535"));
    assert_int_equal(cr_config.max_attributes, 65535);
    assert_false(load1("--maxAttributes", "65536"));
    assert_true(load1("--maxJsonDepth", "1024"));
    assert_false(load1("--maxJsonDepth", "1025"));
    assert_false(load1("--maxJsonDepth", "4096"));
    const char *bad_ints[] = {"-1", " 5", "5x", "", "1000000001", "99999999999999999999"};
    for (size_t i = 0; i < CR_ARRAY_LEN(bad_ints); i++)
        assert_false(load1("--maxLimit", bad_ints[i]));
    setenv("CORAINE_MAXBODYSIZE", "8E", 1);
    assert_false(load1("--port", "1026"));
    unsetenv("CORAINE_MAXBODYSIZE");
    assert_true(load1("--port", "1026"));
}

/* The block pool (blockpool.c): a block of n bytes comes back aligned to
 * 64, writable for n bytes, from a class of at most 12.5 % slack; a freed
 * block is the next one of its class; blocks over 16 KiB are malloc'd and
 * freed as such; slabs that empty go back to the system (but the last one
 * of a class) and serve another class; threads allocating and freeing at
 * once lose nothing. */
static void block_pool(void **state)
{
    (void)state;
    if (!blockpool_available())
        skip();                          /* no address space for it here: everything is malloc'd */
    blockpool_stats_t s0, s1;
    blockpool_stats(&s0);
    static const size_t sizes[] = {1, 63, 64, 65, 500, 512, 513, 700, 1024, 1025, 4096, 9000, 16384};
    void *p[CR_ARRAY_LEN(sizes)];
    for (size_t i = 0; i < CR_ARRAY_LEN(sizes); i++) {
        p[i] = blockpool_alloc(sizes[i]);
        assert_int_equal((uintptr_t)p[i] % 64, 0);
        memset(p[i], (int)i + 1, sizes[i]);
    }
    for (size_t i = 0; i < CR_ARRAY_LEN(sizes); i++)            /* no block overlaps another */
        for (size_t k = 0; k < sizes[i]; k++)
            assert_int_equal(((unsigned char *)p[i])[k], i + 1);
    blockpool_stats(&s1);
    size_t asked = 0;
    for (size_t i = 0; i < CR_ARRAY_LEN(sizes); i++)
        asked += sizes[i];
    assert_true(s1.in_use - s0.in_use >= asked && s1.in_use - s0.in_use <= asked + asked / 8 + 64 * CR_ARRAY_LEN(sizes));
    assert_true(s1.writable >= s1.slabs && s1.slabs >= s1.in_use);
    blockpool_free(p[7]);
    void *again = blockpool_alloc(690);                          /* the same class: the freed block */
    assert_ptr_equal(again, p[7]);
    blockpool_free(again);
    for (size_t i = 0; i < CR_ARRAY_LEN(sizes); i++)
        if (i != 7)
            blockpool_free(p[i]);
    blockpool_stats(&s1);
    assert_int_equal(s1.in_use, s0.in_use);
    void *big = blockpool_alloc(16385);                          /* malloc'd, and freed by free() */
    memset(big, 7, 16385);
    blockpool_free(big);
    blockpool_free(NULL);
    void *m = cr_xmalloc(100);                                   /* a malloc'd block is told apart */
    blockpool_free(m);

    /* 5 slabs of 3000-byte blocks (3072: 21 a slab), all freed: 4 go back */
    enum { N = 105 };
    void *b[N];
    blockpool_stats(&s0);
    for (int i = 0; i < N; i++)
        memset(b[i] = blockpool_alloc(3000), 0x5a, 3000);
    blockpool_stats(&s1);
    assert_int_equal(s1.slabs - s0.slabs, 5 * (64 << 10));
    for (int i = 0; i < N; i++)
        blockpool_free(b[i]);
    blockpool_stats(&s1);
    assert_int_equal(s1.in_use, s0.in_use);
    assert_int_equal(s1.slabs - s0.slabs, 64 << 10);             /* the class keeps one */
    assert_int_equal(s1.released - s0.released, 4 * (64 << 10));
    void *o = blockpool_alloc(10000);                            /* another class takes a slab back */
    blockpool_stats(&s1);
    assert_int_equal(s1.released - s0.released, 3 * (64 << 10));
    for (int i = 0; i < 10000; i++)
        assert_int_equal(((unsigned char *)o)[i], 0);            /* given back: zero pages again */
    blockpool_free(o);
}

#define POOL_THREADS 4
#define POOL_ROUNDS  20000

static void *pool_worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void    *held[64] = {0};
    size_t   len[64]  = {0};
    for (int r = 0; r < POOL_ROUNDS; r++) {
        unsigned k = (unsigned)rand_r(&seed) % 64;
        if (held[k]) {
            for (size_t b = 0; b < len[k]; b++)
                if (((unsigned char *)held[k])[b] != (unsigned char)(k + (uintptr_t)arg))
                    return (void *)1;
            blockpool_free(held[k]);
            held[k] = NULL;
        } else {
            len[k]  = 1 + (size_t)rand_r(&seed) % 3000;
            held[k] = blockpool_alloc(len[k]);
            memset(held[k], (int)(k + (uintptr_t)arg), len[k]);
        }
    }
    for (unsigned k = 0; k < 64; k++)
        blockpool_free(held[k]);
    return NULL;
}

static void block_pool_threads(void **state)
{
    (void)state;
    blockpool_stats_t s0, s1;
    pthread_t         t[POOL_THREADS];
    blockpool_stats(&s0);
    for (uintptr_t i = 0; i < POOL_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, pool_worker, (void *)(i + 1)), 0);
    for (int i = 0; i < POOL_THREADS; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        assert_null(bad);                                        /* no block was written by two owners */
    }
    blockpool_stats(&s1);
    assert_int_equal(s1.in_use, s0.in_use);                      /* every block came back */
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--print-hash")) {        /* for hash_keyed */
        const char *k = "urn:ngsi-ld:Vehicle:A4567";
        printf("%016llx %016llx\n", (unsigned long long)cr_hash(k, strlen(k)), (unsigned long long)cr_hash_u64(42));
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(arena_basics), cmocka_unit_test(arena_cleanups), cmocka_unit_test(sbuf_ops),
        cmocka_unit_test(interning),    cmocka_unit_test(times),          cmocka_unit_test(problems),
        cmocka_unit_test(flags),        cmocka_unit_test(flag_bounds),    cmocka_unit_test(pool_defaults),
        cmocka_unit_test(alloc_overflow), cmocka_unit_test(hash_keyed),   cmocka_unit_test(block_pool),
        cmocka_unit_test(block_pool_threads),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
