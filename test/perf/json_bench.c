/*
 * json_bench.c - our JSON parser/renderer against jansson and cJSON on a
 * realistic NGSI-LD entity (test/perf/entity600.json by default).
 *
 *   build/release/perf/json_bench [file] [rounds] [iterations-per-round]
 *
 * Each round times every library on every operation, one after the other,
 * so that the libraries alternate and share the machine's state; the report
 * is the median over rounds of ns per operation, and ours/theirs ratios.
 *
 * What one operation is, for each library (all include freeing):
 *   parse         ours: copy the input into the parse buffer (parsing in situ
 *                 destroys it), arena_reset, json_parse.
 *                 jansson: json_loadb + json_delete. cJSON: cJSON_ParseWithLength
 *                 + cJSON_Delete.
 *   render        from a tree parsed once. ours: arena_reset of an output
 *                 arena, sb_init, json_render. jansson: json_dumps(JSON_COMPACT)
 *                 + free. cJSON: cJSON_PrintUnformatted + free.
 *   render-pre    the same into a caller's buffer: ours as above, jansson
 *                 json_dumpb, cJSON_PrintPreallocated.
 *   parse+render  a request's life: both steps, all memory freed.
 *
 * jansson's header cannot be included beside ours (both define json_t), so
 * the few jansson functions used are declared here on an opaque type.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "json/json.h"

/* ---- jansson, declared by hand (ABI of jansson 2.x) */
struct json_t;
typedef struct jn_error { int line, column, position; char source[80]; char text[160]; } jn_error_t;
struct json_t *json_loadb(const char *buffer, size_t buflen, size_t flags, jn_error_t *error);
char          *json_dumps(const struct json_t *json, size_t flags);
size_t         json_dumpb(const struct json_t *json, char *buffer, size_t size, size_t flags);
void           json_delete(struct json_t *json);
#define JN_COMPACT 0x20

enum { OURS, JANSSON, CJSON, NLIB };
enum { OP_PARSE, OP_RENDER, OP_RENDER_PRE, OP_BOTH, NOP };
static const char *lib_names[NLIB] = { "coraine", "jansson", "cJSON" };
static const char *op_names[NOP] = { "parse", "render", "render-pre", "parse+render" };

static const char *doc;
static size_t      doc_len;
static volatile size_t sink;

static arena_t       *ar_parse, *ar_out;
static char          *ours_buf;
static json_t        *ours_tree;
static struct json_t *jn_tree;
static cJSON         *cj_tree;
static char           pre_buf[1 << 16];

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "json_bench: %s\n", what);
    exit(1);
}

/* ---- one operation per library */

static void ours_op(int op)
{
    char    err[128];
    sbuf_t  sb;
    json_t *t;

    switch (op) {
    case OP_PARSE:
        memcpy(ours_buf, doc, doc_len);
        arena_reset(ar_parse);
        t = json_parse(ar_parse, ours_buf, doc_len, NULL, err, sizeof err);
        if (!t)
            die(err);
        sink += t->len;
        break;
    case OP_RENDER:
    case OP_RENDER_PRE:
        arena_reset(ar_out);
        sb_init(&sb, ar_out, 1024);
        json_render(&sb, ours_tree);
        sink += sb.len;
        break;
    case OP_BOTH:
        memcpy(ours_buf, doc, doc_len);
        arena_reset(ar_parse);
        t = json_parse(ar_parse, ours_buf, doc_len, NULL, err, sizeof err);
        if (!t)
            die(err);
        sb_init(&sb, ar_parse, 1024);
        json_render(&sb, t);
        sink += sb.len;
        break;
    }
}

static void jansson_op(int op)
{
    struct json_t *t;
    char          *s;

    switch (op) {
    case OP_PARSE:
        t = json_loadb(doc, doc_len, 0, NULL);
        if (!t)
            die("jansson parse");
        json_delete(t);
        break;
    case OP_RENDER:
        s = json_dumps(jn_tree, JN_COMPACT);
        sink += strlen(s);
        free(s);
        break;
    case OP_RENDER_PRE:
        sink += json_dumpb(jn_tree, pre_buf, sizeof pre_buf, JN_COMPACT);
        break;
    case OP_BOTH:
        t = json_loadb(doc, doc_len, 0, NULL);
        if (!t)
            die("jansson parse");
        s = json_dumps(t, JN_COMPACT);
        sink += strlen(s);
        free(s);
        json_delete(t);
        break;
    }
}

static void cjson_op(int op)
{
    cJSON *t;
    char  *s;

    switch (op) {
    case OP_PARSE:
        t = cJSON_ParseWithLength(doc, doc_len);
        if (!t)
            die("cJSON parse");
        cJSON_Delete(t);
        break;
    case OP_RENDER:
        s = cJSON_PrintUnformatted(cj_tree);
        sink += strlen(s);
        free(s);
        break;
    case OP_RENDER_PRE:
        if (!cJSON_PrintPreallocated(cj_tree, pre_buf, sizeof pre_buf, 0))
            die("cJSON print");
        sink += pre_buf[0];
        break;
    case OP_BOTH:
        t = cJSON_ParseWithLength(doc, doc_len);
        if (!t)
            die("cJSON parse");
        s = cJSON_PrintUnformatted(t);
        sink += strlen(s);
        free(s);
        cJSON_Delete(t);
        break;
    }
}

static void (*const lib_op[NLIB])(int) = { ours_op, jansson_op, cjson_op };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *s;
    long  n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        fclose(f);
        return NULL;
    }
    fclose(f);
    s[n] = '\0';
    *len = (size_t)n;
    return s;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "test/perf/entity600.json";
    int         rounds = argc > 2 ? atoi(argv[2]) : 21;
    int         iters = argc > 3 ? atoi(argv[3]) : 20000;
    char        err[128];
    double     *t[NLIB][NOP];

    if (rounds < 1 || iters < 1)
        die("usage: json_bench [file] [rounds>0] [iterations>0]");
    doc = read_file(path, &doc_len);
    if (!doc)
        die("cannot read the input file");

    ar_parse = arena_new(64 * 1024);
    ar_out = arena_new(64 * 1024);
    if (!ar_parse || !ar_out)
        die("out of memory");
    ours_buf = malloc(doc_len + 1);
    if (!ours_buf)
        die("out of memory");
    /* trees for the render-only runs, kept in their own arena */
    arena_t *ar_tree = arena_new(64 * 1024);
    if (!ar_tree)
        die("out of memory");
    ours_tree = json_parse_copy(ar_tree, doc, doc_len, NULL, err, sizeof err);
    jn_tree = json_loadb(doc, doc_len, 0, NULL);
    cj_tree = cJSON_ParseWithLength(doc, doc_len);
    if (!ours_tree || !jn_tree || !cj_tree)
        die("the input does not parse");

    /* the three renderings must say the same thing */
    {
        sbuf_t sb;
        char  *js = json_dumps(jn_tree, JN_COMPACT);
        char  *cs = cJSON_PrintUnformatted(cj_tree);
        sb_init(&sb, ar_tree, 1024);
        json_render(&sb, ours_tree);
        json_t *a = json_parse_copy(ar_tree, js, strlen(js), NULL, err, sizeof err);
        json_t *b = json_parse_copy(ar_tree, cs, strlen(cs), NULL, err, sizeof err);
        if (!a || !b || !json_equal(a, ours_tree) || !json_equal(b, ours_tree))
            die("renderings differ");
        printf("input %s: %zu bytes; rendered: coraine %zu, jansson %zu, cJSON %zu bytes\n",
               path, doc_len, sb.len, strlen(js), strlen(cs));
        free(js);
        free(cs);
    }

    for (int l = 0; l < NLIB; l++)
        for (int o = 0; o < NOP; o++)
            if (!(t[l][o] = calloc((size_t)rounds, sizeof(double))))
                die("out of memory");

    /* warm-up */
    for (int o = 0; o < NOP; o++)
        for (int l = 0; l < NLIB; l++)
            for (int i = 0; i < iters / 10 + 1; i++)
                lib_op[l](o);

    for (int r = 0; r < rounds; r++) {
        for (int o = 0; o < NOP; o++) {
            for (int k = 0; k < NLIB; k++) {
                int     l = (k + r) % NLIB;             /* rotate who goes first */
                int64_t t0 = now_ns();
                for (int i = 0; i < iters; i++)
                    lib_op[l](o);
                t[l][o][r] = (double)(now_ns() - t0) / iters;
            }
        }
    }

    printf("%d rounds x %d iterations; median ns/op (min-max over rounds)\n\n", rounds, iters);
    printf("%-13s %22s %22s %22s %9s %9s\n", "operation", lib_names[0], lib_names[1], lib_names[2],
           "jansson/x", "cJSON/x");
    for (int o = 0; o < NOP; o++) {
        double med[NLIB];
        printf("%-13s", op_names[o]);
        for (int l = 0; l < NLIB; l++) {
            qsort(t[l][o], (size_t)rounds, sizeof(double), cmp_double);
            med[l] = t[l][o][rounds / 2];
            char cell[64];
            snprintf(cell, sizeof cell, "%.0f (%.0f-%.0f)", med[l], t[l][o][0], t[l][o][rounds - 1]);
            printf(" %22s", cell);
        }
        printf(" %8.2fx %8.2fx\n", med[JANSSON] / med[OURS], med[CJSON] / med[OURS]);
    }
    printf("\n(ratios > 1: coraine is that many times faster)\n");

    json_delete(jn_tree);
    cJSON_Delete(cj_tree);
    arena_free(ar_tree);
    arena_free(ar_parse);
    arena_free(ar_out);
    free(ours_buf);
    free((void *)doc);
    for (int l = 0; l < NLIB; l++)
        for (int o = 0; o < NOP; o++)
            free(t[l][o]);
    return sink == 42 ? 1 : 0;
}
