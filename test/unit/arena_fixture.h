/*
 * arena_fixture.h - the arena most unit tests hand to the code under test:
 * A, made fresh by setup() and freed by teardown() (cmocka's per-test or
 * group fixtures). One place for what each test file had written again.
 * Include once, after <cmocka.h> and the header that declares arena_t;
 * #define FIXTURE_ARENA_SIZE first for another size than 64 KiB.
 */
#ifndef FIXTURE_ARENA_SIZE
#define FIXTURE_ARENA_SIZE (64 * 1024)
#endif

static arena_t *A;

static int setup(void **state)
{
    (void)state;
    A = arena_new(FIXTURE_ARENA_SIZE);
    return A ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    arena_free(A);
    A = NULL;
    return 0;
}
