/*
 * boolsel.c - the boolean selection grammar shared by type selection (4.17)
 * and scopeQ (4.19); see boolsel.h. A recursive descent over the text with
 * an explicit depth limit; n-ary AND/OR nodes (a list of children grown in
 * the arena) so that "a|b|c" is one node, which typesel uses to hand the
 * store a plain list of types.
 */
#include "boolsel.h"

#include <string.h>

#define BS_MAX_TEXT  8192
#define BS_MAX_DEPTH 32

bool bs_fail(bs_parser_t *bp, problem_kind_t kind, size_t at, const char *why)
{
    if (bp->failed)
        return false;
    bp->failed = true;
    problem_set(bp->p, kind, "%s: at offset %zu: %s", bp->what, at, why);
    return false;
}

static void bs_blank(bs_parser_t *bp)
{
    while (bp->pos < bp->len && (bp->s[bp->pos] == ' ' || bp->s[bp->pos] == '\t'))
        bp->pos++;
}

static bs_node_t *bs_chain(bs_parser_t *bp, bool is_or);

static bs_node_t *bs_primary(bs_parser_t *bp)
{
    bs_blank(bp);
    size_t start = bp->pos;
    if (bs_peek(bp, 0) != '(') {
        void *atom = bp->atom(bp);
        if (!atom)
            return NULL;
        bs_node_t *x = arena_calloc(bp->a, sizeof(*x));
        x->type = BS_ATOM;
        x->atom = atom;
        return x;
    }
    if (++bp->depth > BS_MAX_DEPTH) {
        bs_fail(bp, PB_TOO_COMPLEX_QUERY, start, "parentheses nested too deep");
        return NULL;
    }
    bp->pos++;
    bs_node_t *x = bs_chain(bp, true);
    if (!x)
        return NULL;
    bs_blank(bp);
    if (bs_peek(bp, 0) != ')') {
        bs_fail(bp, PB_BAD_REQUEST_DATA, bp->pos, "expected ')'");
        return NULL;
    }
    bp->pos++;
    bp->depth--;
    return x;
}

static bs_node_t *bs_chain(bs_parser_t *bp, bool is_or)
{
    bs_node_t **kids = NULL;
    uint32_t    n = 0, cap = 0;
    bs_node_t  *first = is_or ? bs_chain(bp, false) : bs_primary(bp);

    if (!first)
        return NULL;
    for (;;) {
        bs_blank(bp);
        char c = bs_peek(bp, 0);
        if (is_or ? (c != '|' && c != ',') : c != ';')
            break;
        bp->pos++;
        if (n + 1 >= cap) {
            uint32_t    ncap = cap ? cap * 2 : 8;
            bs_node_t **nk = arena_alloc(bp->a, ncap * sizeof(*nk));
            if (n)
                memcpy(nk, kids, n * sizeof(*nk));
            kids = nk;
            cap = ncap;
        }
        if (n == 0)
            kids[n++] = first;
        kids[n] = is_or ? bs_chain(bp, false) : bs_primary(bp);
        if (!kids[n])
            return NULL;
        n++;
    }
    if (n == 0)
        return first;
    bs_node_t *x = arena_calloc(bp->a, sizeof(*x));
    x->type = is_or ? BS_OR : BS_AND;
    x->n = n;
    x->kids = kids;
    return x;
}

bs_node_t *bs_parse(bs_parser_t *bp, const char *text)
{
    if (!text || !*text) {
        problem_set(bp->p, PB_BAD_REQUEST_DATA, "%s: empty", bp->what);
        return NULL;
    }
    size_t len = strlen(text);
    if (len > BS_MAX_TEXT) {
        problem_set(bp->p, PB_TOO_COMPLEX_QUERY, "%s: longer than %d bytes", bp->what, BS_MAX_TEXT);
        return NULL;
    }
    if (!json_utf8_valid(text, len)) {
        problem_set(bp->p, PB_BAD_REQUEST_DATA, "%s: not valid UTF-8", bp->what);
        return NULL;
    }
    bp->s = text;
    bp->len = len;
    bp->pos = 0;
    bp->depth = 0;
    bp->failed = false;
    bs_node_t *root = bs_chain(bp, true);
    if (!root)
        return NULL;
    bs_blank(bp);
    if (bp->pos != bp->len) {
        bs_fail(bp, PB_BAD_REQUEST_DATA, bp->pos, bs_peek(bp, 0) == ')' ? "unbalanced ')'" : "unexpected character");
        return NULL;
    }
    return root;
}

bool bs_eval(const bs_node_t *x, bool (*match)(const void *atom, const void *ud), const void *ud)
{
    switch (x->type) {
    case BS_ATOM:
        return match(x->atom, ud);
    case BS_AND:
        for (uint32_t i = 0; i < x->n; i++)
            if (!bs_eval(x->kids[i], match, ud))
                return false;
        return true;
    case BS_OR:
        for (uint32_t i = 0; i < x->n; i++)
            if (bs_eval(x->kids[i], match, ud))
                return true;
        return false;
    }
    return false;
}
