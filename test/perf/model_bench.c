/*
 * model_bench.c - the broker's own work on one entity: parse a create body
 * (test/perf/entity600.json, its @context member dropped), freeze it, merge
 * a patch into it and render it (normalized, no render cache), N times. A
 * benchmark, not a test: count instructions under callgrind, e.g.
 *
 *   valgrind --tool=callgrind build/release/perf/model_bench 2000
 *
 * and compare the totals of two builds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "ld/ld.h"
#include "model/model.h"

int main(int argc, char **argv)
{
    int   rounds = argc > 1 ? atoi(argv[1]) : 2000;
    char  text[8192];
    FILE *f = fopen(argc > 2 ? argv[2] : "test/perf/entity600.json", "r");
    if (!f) { perror("entity600.json"); return 1; }
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';

    ld_init();
    model_init();
    arena_t  *a = arena_new(65536);
    size_t    out = 0;
    char      err[160];
    problem_t p = { 0 };
    for (int i = 0; i < rounds; i++) {
        json_t *body = json_parse_copy(a, text, len, NULL, err, sizeof err);
        if (!body) { fprintf(stderr, "%s\n", err); return 1; }
        json_remove(body, "@context");
        cr_entity_t *d = entity_parse(a, body, ld_core(), EP_CREATE, 1, &p);
        if (!d) { fprintf(stderr, "%s\n", p.detail); return 1; }
        cr_entity_t *e = entity_freeze(d);
        const char  *ptext = "{\"speed\":{\"type\":\"Property\",\"value\":60}}";
        json_t      *pj = json_parse_copy(a, ptext, strlen(ptext), NULL, err, sizeof err);
        cr_entity_t *patch = pj ? entity_parse(a, pj, ld_core(), 0, 2, &p) : NULL;
        if (!patch) { fprintf(stderr, "patch: %s %s\n", err, p.detail); return 1; }
        op_result_t  res;
        memset(&res, 0, sizeof res);
        cr_entity_t *m = entity_apply(a, e, patch, OP_MERGE_ENTITY, NULL, 2, &res, &p);
        if (!m) { fprintf(stderr, "%s\n", p.detail); return 1; }
        render_opts_t o;
        memset(&o, 0, sizeof o);
        o.ctx = ld_core();
        sbuf_t        sb;
        json_writer_t w;
        sb_init(&sb, a, 1024);
        jw_init(&w, &sb);
        entity_render(&w, m, &o);
        out += sb.len;
        entity_unref(e);
        arena_reset(a);
    }
    printf("%zu bytes rendered\n", out);
    arena_free(a);
    return 0;
}
