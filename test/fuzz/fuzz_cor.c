/*
 * fuzz_cor.c - libFuzzer target for cor:// frames (cor/cor_frame.c): the
 * bytes a peer sends to --corPort or answers to the client.
 *
 * The input is cut into frames as the listener does (cor_frame_size, then
 * cor_frame_decode on each whole frame, stopping at the first error, which
 * must say why). Each frame that decodes is encoded again and decoded
 * again: the two decodings must agree field by field (the codec is its own
 * inverse on what it accepts). The target of a request goes through the
 * operation table both ways.
 */
#include <stdlib.h>
#include <string.h>

#include "cor/cor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same(const cor_frame_t *x, const cor_frame_t *y)
{
    if (x->type != y->type || x->id != y->id || x->n_fields != y->n_fields || x->body_len != y->body_len ||
        memcmp(x->body, y->body, x->body_len))
        abort();
    if (x->type == COR_HELLO && (x->version != y->version || x->window != y->window ||
                                 x->max_frame != y->max_frame || x->alias_len != y->alias_len ||
                                 memcmp(x->alias, y->alias, x->alias_len)))
        abort();
    if (x->type == COR_REQUEST && x->op != y->op) abort();
    if ((x->type == COR_RESPONSE || x->type == COR_GOAWAY) && x->status != y->status) abort();
    for (size_t i = 0; i < x->n_fields; i++) {
        const cor_field_t *a = &x->fields[i], *b = &y->fields[i];
        if (a->code != b->code || a->len != b->len || memcmp(a->value, b->value, a->len) ||
            a->name_len != b->name_len || (a->name_len && memcmp(a->name, b->name, a->name_len)))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static arena_t *A;
    if (!A) A = arena_new(0);
    size_t off = 0;
    while (off < size) {
        problem_t p = {0};
        int64_t   n = cor_frame_size(data + off, size - off, 1 << 20, &p);
        if (n < 0 && !p.detail[0]) abort();
        if (n <= 0 || (size_t)n > size - off) break;
        uint8_t *copy = malloc((size_t)n);          /* exactly the frame: ASan sees any read past it */
        memcpy(copy, data + off, (size_t)n);
        cor_frame_t f, g;
        if (!cor_frame_decode(copy, (size_t)n, &f, &p)) {
            if (!p.detail[0]) abort();
            free(copy);
            break;
        }
        sbuf_t sb;
        sb_init(&sb, A, 256);
        if (!cor_frame_encode(&sb, &f)) abort();
        problem_t q = {0};
        if (!cor_frame_decode((const uint8_t *)sb.p, sb.len, &g, &q)) abort();
        same(&f, &g);
        for (size_t i = 0; i < f.n_fields; i++) {
            if (f.fields[i].code != COR_F_TARGET) continue;
            const char *t, *m, *pre, *suf;
            size_t      tl;
            bool        has;
            char       *path = arena_strndup(A, f.fields[i].value, f.fields[i].len);
            uint8_t     op = cor_op_of("GET", path, strlen(path), &t, &tl);
            if (op != COR_OP_HTTP && !cor_op_route(op, &m, &pre, &has, &suf)) abort();
        }
        free(copy);
        off += (size_t)n;
        arena_reset(A);
    }
    return 0;
}
