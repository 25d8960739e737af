/*
 * cordb_codec_bench.c - the two payload forms corDB's log could hold, on the
 * benchmark entity (test/perf/entity600.json): its size as received (JSON),
 * the size of its compact serialization (model/codec.c), and the time to
 * encode one version and to rebuild one from each form (recovery's work per
 * record: decode + freeze, against parse + @context expansion + freeze).
 *
 *   build/release/perf/cordb_codec_bench 200000
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

int main(int argc, char **argv)
{
    int       rounds = argc > 1 ? atoi(argv[1]) : 200000;
    char      text[8192], err[160];
    FILE     *f = fopen(argc > 2 ? argv[2] : "test/perf/entity600.json", "r");
    problem_t p = { 0 };
    size_t    len;
    double    t0, t_enc, t_dec, t_parse;
    sbuf_t    sb;

    if (!f) {
        perror("entity600.json");
        return 1;
    }
    len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    ld_init();
    model_init();
    arena_t *a = arena_new(65536);
    json_t  *body = json_parse_copy(a, text, len, NULL, err, sizeof(err));
    json_remove(body, "@context");
    cr_entity_t *e = entity_freeze(entity_parse(a, body, ld_core(), EP_CREATE, 1, &p));
    sb_init(&sb, NULL, 1024);
    sbuf_t js;
    sb_init(&js, NULL, 1024);
    json_render(&js, body);

    t0 = now_s();
    for (int i = 0; i < rounds; i++) {
        sb_clear(&sb);
        entity_encode(&sb, e);
    }
    t_enc = (now_s() - t0) / rounds;

    t0 = now_s();
    for (int i = 0; i < rounds; i++) {
        cr_entity_t *d = entity_decode(a, sb.p, sb.len);
        cr_entity_t *x = entity_freeze(d);

        entity_unref(x);
        arena_reset(a);
    }
    t_dec = (now_s() - t0) / rounds;

    t0 = now_s();
    for (int i = 0; i < rounds; i++) {
        json_t      *b = json_parse_copy(a, js.p, js.len, NULL, err, sizeof(err));
        cr_entity_t *x = entity_freeze(entity_parse(a, b, ld_core(), EP_CREATE, 1, &p));

        entity_unref(x);
        arena_reset(a);
    }
    t_parse = (now_s() - t0) / rounds;

    printf("entity: %zu bytes as received (JSON, compact), %zu bytes encoded (codec), frozen block %u bytes\n",
           js.len, sb.len, e->bytes);
    printf("encode: %.0f ns/version; rebuild: decode+freeze %.0f ns, parse+expand+freeze %.0f ns\n",
           t_enc * 1e9, t_dec * 1e9, t_parse * 1e9);
    return 0;
}
