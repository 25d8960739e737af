/*
 * boolsel.h - model-internal: the boolean selection grammar that the type
 * selection language (4.17) and the scope query language (4.19) share.
 *
 *   Selection = And *( ("|" / ",") And )      "," is the older spelling of "|"
 *   And       = Primary *( ";" Primary )      AND binds tighter than OR
 *   Primary   = "(" Selection ")" / Atom
 *
 * AND is also taken without parentheses and parentheses nest (at most 32).
 * What an Atom is (a type name, a scope pattern) and what it means are the
 * caller's: bs_parse() calls bp->atom to read one, bs_eval() calls a match
 * function on each. The tree lives in the request arena.
 */
#ifndef CORAINE_MODEL_BOOLSEL_H
#define CORAINE_MODEL_BOOLSEL_H

#include "model.h"

enum { BS_ATOM = 0, BS_AND, BS_OR };

typedef struct bs_node bs_node_t;
struct bs_node {
    uint8_t     type;        /* BS_* */
    uint32_t    n;           /* BS_AND / BS_OR: children */
    bs_node_t **kids;
    void       *atom;        /* BS_ATOM: what bp->atom returned */
};

typedef struct bs_parser bs_parser_t;
struct bs_parser {
    arena_t    *a;
    const char *s;
    size_t      pos, len;
    problem_t  *p;
    const char *what;        /* the language, for errors: "type", "scopeQ" */
    /* Reads one atom at pos (blanks already skipped) and advances pos;
     * NULL after bs_fail(). */
    void      *(*atom)(bs_parser_t *bp);
    void       *ud;          /* for the atom reader */
    int         depth;
    bool        failed;
};

/* Sets the problem once ("<what>: at offset N: why"); returns false. */
bool       bs_fail(bs_parser_t *bp, problem_kind_t kind, size_t at, const char *why);
static inline char bs_peek(const bs_parser_t *bp, size_t k)
{
    return bp->pos + k < bp->len ? bp->s[bp->pos + k] : '\0';
}
/* Checks the text (non-empty, at most 8 KiB, UTF-8) and parses all of it. */
bs_node_t *bs_parse(bs_parser_t *bp, const char *text);
bool       bs_eval(const bs_node_t *n, bool (*match)(const void *atom, const void *ud), const void *ud);

#endif
