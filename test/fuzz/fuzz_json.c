/*
 * fuzz_json.c - libFuzzer target for src/json.
 *
 * Parses arbitrary bytes (copied into a buffer with room for the sentinel
 * NUL, since parsing is in situ); when they parse, renders the tree, parses
 * the rendering and checks that both trees are equal and that rendering is
 * a fixed point. Also cross-checks json_utf8_valid against the parser on
 * string literals, and drives the writer with the tree.
 */
#include <stdlib.h>
#include <string.h>

#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static arena_t *A;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char          err[256];
    json_limits_t lim = { .max_depth = 64, .max_size = 1 << 20 };
    char         *buf;
    json_t       *a, *b;
    sbuf_t        sb, sb2;

    if (!A)
        A = arena_new(1 << 16);
    arena_reset(A);

    buf = malloc(size + 1);             /* malloc, not the arena: ASan sees overruns */
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    a = json_parse(A, buf, size, &lim, err, sizeof err);
    if (!a) {
        if (strncmp(err, "at offset ", 10) != 0)
            abort();                    /* every error says where */
        free(buf);
        return 0;
    }

    sb_init(&sb, A, 64);
    json_render(&sb, a);
    if (strlen(sb.p) != sb.len)
        abort();                        /* no NUL can reach the output */
    if (!json_utf8_valid(sb.p, sb.len))
        abort();

    b = json_parse_copy(A, sb.p, sb.len, &lim, err, sizeof err);
    if (!b || !json_equal(a, b) || !json_equal(b, a))
        abort();

    sb_init(&sb2, A, 64);
    json_render(&sb2, b);
    if (sb2.len != sb.len || memcmp(sb.p, sb2.p, sb.len) != 0)
        abort();                        /* rendering is a fixed point after one trip */

    /* the writer gives the same text */
    {
        json_writer_t w;
        sbuf_t        sb3;
        sb_init(&sb3, A, 64);
        jw_init(&w, &sb3);
        jw_value(&w, a);
        if (sb3.len != sb.len || memcmp(sb.p, sb3.p, sb.len) != 0)
            abort();
    }

    /* clones are equal */
    if (!json_equal(json_clone(A, a), a))
        abort();

    free(buf);
    return 0;
}
