/*
 * cor_body_bench.c - the two body forms cor:// could carry for a page of
 * forwarded entities (doc/cor-protocol.md, "The body"), measured on the
 * work both ends do per page:
 *   JSON:   the source renders the page (compacted with the core @context,
 *           as an answer is: with the render cache off, a query's page is
 *           rendered from the entities, and with it on the text is copied),
 *           the hub parses it, expands each entity with the @context and
 *           freezes it (fwd.c's answer_entities, then merge);
 *   binary: the source writes each entity with model/codec.c (length-
 *           prefixed), the hub decodes and freezes each (no JSON, no
 *           @context: the names are expanded already).
 * Pages of the chain benchmark's small Vehicles (test/perf/cor_chain.py)
 * and of the 600-byte benchmark entity (test/perf/entity600.json).
 *
 *   build/release/perf/cor_body_bench [rounds] [page size]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json/json.h"
#include "ld/ld.h"
#include "model/codec.h"
#include "model/model.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static cr_entity_t *make(arena_t *a, const char *text)
{
    char      err[160];
    problem_t p = {0};
    json_t   *body = json_parse_copy(a, text, strlen(text), NULL, err, sizeof err);
    if (!body) {
        fprintf(stderr, "bad entity: %s\n", err);
        exit(1);
    }
    json_remove(body, "@context");
    cr_entity_t *e = entity_parse(a, body, ld_core(), EP_CREATE, 1, &p);
    if (!e) {
        fprintf(stderr, "bad entity: %s\n", p.detail);
        exit(1);
    }
    return entity_freeze(e);
}

static void bench(const char *name, cr_entity_t **page, int n, int rounds)
{
    arena_t      *a = arena_new(1 << 20);
    sbuf_t        js, bin;
    render_opts_t o = {.ctx = ld_core()};
    char          err[160];
    problem_t     p = {0};
    sb_init(&js, NULL, 1 << 16);
    sb_init(&bin, NULL, 1 << 16);

    double t0 = now_s();
    for (int r = 0; r < rounds; r++) {
        json_writer_t w;
        sb_clear(&js);
        jw_init(&w, &js);
        jw_array_begin(&w);
        for (int i = 0; i < n; i++) entity_render(&w, page[i], &o);
        jw_array_end(&w);
    }
    double t_render = (now_s() - t0) / rounds;

    t0 = now_s();
    for (int r = 0; r < rounds; r++) {
        json_t *t = json_parse_copy(a, js.p, js.len, NULL, err, sizeof err);
        for (json_t *x = t->child; x; x = x->next) entity_unref(entity_freeze(entity_parse(a, x, ld_core(), EP_CREATE, 0, &p)));
        arena_reset(a);
    }
    double t_parse = (now_s() - t0) / rounds;

    t0 = now_s();
    for (int r = 0; r < rounds; r++) {
        sb_clear(&bin);
        for (int i = 0; i < n; i++) {
            size_t at = bin.len;
            sb_add(&bin, "\0\0\0\0", 4);
            entity_encode(&bin, page[i]);
            uint32_t l = (uint32_t)(bin.len - at - 4);
            memcpy(bin.p + at, &l, 4);
        }
    }
    double t_enc = (now_s() - t0) / rounds;

    t0 = now_s();
    for (int r = 0; r < rounds; r++) {
        for (size_t off = 0; off < bin.len;) {
            uint32_t l;
            memcpy(&l, bin.p + off, 4);
            entity_unref(entity_freeze(entity_decode(a, bin.p + off + 4, l)));
            off += 4 + l;
        }
        arena_reset(a);
    }
    double t_dec = (now_s() - t0) / rounds;

    printf("%-10s page of %d: JSON %6zu bytes, source %7.1f us, hub %7.1f us | binary %6zu bytes, source %6.1f us, "
           "hub %6.1f us | hub x%.1f, both x%.1f\n",
           name, n, js.len, t_render * 1e6, t_parse * 1e6, bin.len, t_enc * 1e6, t_dec * 1e6, t_parse / t_dec,
           (t_render + t_parse) / (t_enc + t_dec));
    sb_release(&js);
    sb_release(&bin);
    arena_free(a);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2000, n = argc > 2 ? atoi(argv[2]) : 20;
    ld_init();
    model_init();
    arena_t      *a = arena_new(1 << 20);
    cr_entity_t **small = calloc((size_t)n, sizeof *small), **big = calloc((size_t)n, sizeof *big);
    char          text[16384];
    for (int i = 0; i < n; i++) {
        snprintf(text, sizeof text, "{\"id\":\"urn:ngsi-ld:Vehicle:%d\",\"type\":\"Vehicle\","
                 "\"speed\":{\"type\":\"Property\",\"value\":%d},\"brand\":{\"type\":\"Property\",\"value\":\"b%d\"}}",
                 i, i, i % 7);
        small[i] = make(a, text);
    }
    FILE *f = fopen("test/perf/entity600.json", "r");
    if (!f) {
        perror("test/perf/entity600.json");
        return 1;
    }
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    for (int i = 0; i < n; i++) big[i] = make(a, text);   /* one id n times: the work is the same */
    bench("Vehicle", small, n, rounds);
    bench("entity600", big, n, rounds);
    return 0;
}
