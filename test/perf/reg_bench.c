/*
 * reg_bench.c - what finding the registrations of a forwarded query costs
 * (reg_match through the registry's index), as the number of registrations
 * grows while the query matches 30 of them: the cost should stay flat.
 *
 *   make perf && build/release/perf/reg_bench [largest]
 *
 * The registrations go 100, 1000, ... up to largest (default 100000; the
 * registry checks each new one against those held, so building 100000
 * takes minutes). Each size: the median of 5 rounds of `iters` matches
 * (default 20000). With a third argument only `largest` is measured: for
 * instruction counts on a busy machine,
 *   valgrind --tool=callgrind --toggle-collect=reg_match build/release/perf/reg_bench N 1000 only
 * gives reg_match's instructions for 5000 matches among N registrations.
 */
#include "reg/reg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void add(int i, const char *type)
{
    char      doc[512];
    problem_t p = {0};
    snprintf(doc, sizeof doc,
             "{\"id\":\"urn:r:%d\",\"type\":\"ContextSourceRegistration\",\"endpoint\":\"http://127.0.0.1:9\","
             "\"information\":[{\"entities\":[{\"type\":\"%s\"}],\"propertyNames\":[\"speed\"]}]}", i, type);
    reg_t *r = reg_build("", doc, strlen(doc), 0, &p);
    if (!r || !reg_add(r, &p)) {
        fprintf(stderr, "%s\n", p.detail);
        return;
    }
    reg_unref(r);
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv)
{
    int   largest = argc > 1 ? atoi(argv[1]) : 100000;
    int   iters = argc > 2 ? atoi(argv[2]) : 20000;
    int   smallest = argc > 3 ? largest : 100;
    char *cargv[] = {"reg_bench", NULL};
    if (!cr_config_load(1, cargv)) return 1;
    cr_log_open(NULL, LOG_ERROR);
    if (!ld_init()) return 1;
    ld_set_offline(true);
    model_init();
    printf("%12s %10s %14s\n", "registrations", "matched", "ns per match");
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int total = smallest; total <= largest; total *= 10) {
        reg_shutdown();
        char type[32];
        for (int i = 0; i < total - 30; i++) {
            snprintf(type, sizeof type, "Other%d", i);
            add(i, type);
        }
        for (int i = 0; i < 30; i++) add(total + i, "Wanted");
        arena_t    *a = arena_new(1 << 16);
        problem_t   p = {0};
        typesel_t  *ts = typesel_parse(a, "Wanted", ld_core(), &p);
        const char *speed = ld_expand(ld_core(), "speed");
        reg_query_t q = {.types = ts, .attrs = &speed, .n_attrs = 1, .ops = REG_OP_BIT(REG_OP_QUERY_ENTITY)};
        size_t      n = 0;
        double      round[5];
        for (int k5 = 0; k5 < 5; k5++) {
            double t0 = now_s();
            for (int k = 0; k < iters; k++) {
                arena_t *s = arena_new(4096);
                reg_t  **v = reg_match("", &q, 1, s, &n, NULL);
                for (size_t i = 0; i < n; i++) reg_unref(v[i]);
                arena_free(s);
            }
            round[k5] = (now_s() - t0) / iters * 1e9;
        }
        qsort(round, 5, sizeof *round, cmp_d);
        printf("%12d %10zu %14.0f\n", total, n, round[2]);
        arena_free(a);
    }
    reg_shutdown();
    return 0;
}
