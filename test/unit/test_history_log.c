/*
 * test_history_log.c - unit tests of corDB history's files (src/history/
 * hlog.c): a snapshot's install and the compaction of history.log after
 * it, killed (SIGKILL) at each of its steps while a writer appends and
 * waits for its records to be synced (--dbSync always) or not (interval):
 * the files recover exactly what was acknowledged (every record whose
 * append returned, in order, none twice), and the compaction holds the
 * log's mutex for a bounded piece only, never for an fdatasync.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "history/hlog.h"

/* ------------------------------------------------------------ the child */

static hlog_t         *L;
static bool            always;
static int             ack_fd;         /* the ids acknowledged, 4 bytes each */
static int             kill_step;      /* the kill comes at this call of the hook (0: none) */
static int             steps;
static pthread_mutex_t id_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t        next_id;
static _Atomic bool    writer_stop;

/* A record: its id and some padding, so that a tail has bytes to copy. */
static uint32_t append_one(void)
{
    char     rec[48];
    uint32_t id;

    pthread_mutex_lock(&id_mu);          /* the log's order is the ids' */
    id = next_id++;
    memset(rec, 'r', sizeof rec);
    memcpy(rec, &id, 4);
    if (!hlog_append(L, rec, sizeof rec))
        _exit(3);
    pthread_mutex_unlock(&id_mu);
    return id;
}

static void *writer(void *v)
{
    (void)v;
    while (!writer_stop) {
        uint32_t id = append_one();
        if (!hlog_sync(L))
            _exit(4);
        if (write(ack_fd, &id, 4) != 4)  /* acknowledged */
            _exit(5);
    }
    return NULL;
}

static void hook(hlog_step_t s)
{
    if (s == HLOG_STEP_COPIED)           /* what the rounds copy: more than a small tail */
        for (int i = 0; i < 3000; i++)
            append_one();
    if (++steps == kill_step)
        raise(SIGKILL);
}

static bool ignore(void *ud, const uint8_t *p, size_t n, bool snap)
{
    (void)ud; (void)p; (void)n; (void)snap;
    return true;
}

/* Appends, takes a snapshot of ids [0, mark) while the writer goes on, is
 * killed at kill_step (or at the end). */
static void child(const char *dir)
{
    problem_t p = { 0 };
    pthread_t th;
    int64_t   held = 0;

    L = hlog_open(dir, always, 5, ignore, NULL, &p);
    if (!L)
        _exit(2);
    for (int i = 0; i < 2000; i++)
        append_one();
    pthread_mutex_lock(&id_mu);          /* the mark: the image holds [0, next_id) */
    hlog_image_t *im = hlog_image_begin(L);
    for (uint32_t id = 0; id < next_id; id++) {
        char rec[48];
        memset(rec, 'r', sizeof rec);
        memcpy(rec, &id, 4);
        hlog_image_add(im, rec, sizeof rec);
    }
    pthread_mutex_unlock(&id_mu);
    if (pthread_create(&th, NULL, writer, NULL) != 0)
        _exit(6);
    hlog_step_hook = hook;
    if (!hlog_image_install(L, im, &held, &p))
        _exit(7);
    hlog_step_hook = NULL;
    for (int i = 0; i < 200; i++)        /* appends after the compaction */
        append_one();
    if (held > 50000)                    /* the mutex is never held for an fdatasync */
        _exit(8);
    raise(SIGKILL);
}

/* ----------------------------------------------------------- the parent */

static uint32_t *got;
static size_t    n_got, cap_got;
static bool      bad_record;

static bool collect(void *ud, const uint8_t *p, size_t n, bool snap)
{
    (void)ud; (void)snap;
    if (n != 48) {
        bad_record = true;
        return true;
    }
    if (n_got == cap_got) {
        cap_got = cap_got ? cap_got * 2 : 4096;
        got     = realloc(got, cap_got * sizeof *got);
        assert_non_null(got);
    }
    memcpy(&got[n_got++], p, 4);
    return true;
}

static void run(bool mode_always, int at)
{
    char tmpl[] = "/var/tmp/coraine-hlog-XXXXXX";
    int  pfd[2];

    assert_non_null(mkdtemp(tmpl));
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (!pid) {
        close(pfd[0]);
        ack_fd    = pfd[1];
        always    = mode_always;
        kill_step = at;
        child(tmpl);
        _exit(9);
    }
    close(pfd[1]);
    uint32_t id, max_ack = 0;
    bool     any = false;
    while (read(pfd[0], &id, 4) == 4) {
        any = true;
        if (id > max_ack)
            max_ack = id;
    }
    close(pfd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFSIGNALED(st))
        fail_msg("the child exited with %d (kill at step %d)", WEXITSTATUS(st), at);

    problem_t p = { 0 };
    n_got = 0;
    bad_record = false;
    hlog_t *l = hlog_open(tmpl, mode_always, 5, collect, NULL, &p);
    assert_non_null(l);
    hlog_close(l);
    assert_false(bad_record);
    for (size_t i = 0; i < n_got; i++)   /* in order, none twice, none missing */
        if (got[i] != i)
            fail_msg("kill at step %d (%s): record %zu is id %u", at, mode_always ? "always" : "interval", i,
                     got[i]);
    assert_true(n_got >= 2000);          /* the snapshot's */
    if (any && n_got <= max_ack)
        fail_msg("kill at step %d (%s): id %u was acknowledged, %zu recovered", at,
                 mode_always ? "always" : "interval", max_ack, n_got);
    /* once more: the recovered files open again, the same */
    size_t n1 = n_got;
    n_got = 0;
    l = hlog_open(tmpl, mode_always, 5, collect, NULL, &p);
    assert_non_null(l);
    hlog_close(l);
    assert_int_equal(n_got, n1);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    assert_int_equal(system(cmd), 0);
}

/* The steps: SNAPSHOT, COPIED, ROUND (one or more), LAST_PIECE, RENAMED,
 * SWITCHED, SYNCED; the hook counts its calls, so at 1..12 every step is
 * hit (a count past the last call is a kill after the compaction). */
static void test_kill_at_each_step_always(void **state)
{
    (void)state;
    for (int at = 1; at <= 12; at++)
        run(true, at);
}

static void test_kill_at_each_step_interval(void **state)
{
    (void)state;
    for (int at = 1; at <= 12; at++)
        run(false, at);
}

int main(void)
{
    cr_log_open(NULL, LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_at_each_step_always),
        cmocka_unit_test(test_kill_at_each_step_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
