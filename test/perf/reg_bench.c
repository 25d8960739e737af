/*
 * reg_bench.c - what finding the registrations of a forwarded query costs
 * (reg_match through the registry's index), as the number of registrations
 * grows while the query matches 30 of them: the cost should stay flat.
 *
 *   make perf && build/release/perf/reg_bench
 */
#include "reg/reg.h"

#include <stdio.h>
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

int main(void)
{
    char *argv[] = {"reg_bench", NULL};
    if (!cr_config_load(1, argv)) return 1;
    cr_log_open(NULL, LOG_ERROR);
    if (!ld_init()) return 1;
    ld_set_offline(true);
    model_init();
    printf("%12s %10s %14s\n", "registrations", "matched", "ns per match");
    for (int total = 1000; total <= 100000; total *= 10) {
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
        int         iters = 20000;
        double      t0 = now_s();
        for (int k = 0; k < iters; k++) {
            arena_t *s = arena_new(4096);
            reg_t  **v = reg_match("", &q, 1, s, &n, NULL);
            for (size_t i = 0; i < n; i++) reg_unref(v[i]);
            arena_free(s);
        }
        double dt = now_s() - t0;
        printf("%12d %10zu %14.0f\n", total, n, dt / iters * 1e9);
        arena_free(a);
    }
    reg_shutdown();
    return 0;
}
