/*
 * fuzz_body.h - what the fuzz targets of stored-object bodies share
 * (subscriptions, registrations, registration subscriptions): the one-time
 * set-up (the core @context, offline, the model), the per-input arena, the
 * input as a JSON object, the rule that every refusal says why, and the
 * round of a stored object: the input becomes its stored document, is built
 * (POST), exercised (GET and what the object is used for), patched with the
 * input itself and built and exercised again (PATCH).
 */
#ifndef CORAINE_FUZZ_BODY_H
#define CORAINE_FUZZ_BODY_H

#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "ld/ld.h"
#include "model/model.h"

static arena_t *A;    /* per input */

static void check_problem(const problem_t *p)
{
    if (p->kind == PB_NONE || p->detail[0] == '\0') abort();   /* every failure says why */
}

/* The input as a JSON object in A (reset), or NULL when it is not one. */
static json_t *fuzz_body(const uint8_t *data, size_t size)
{
    char err[160];
    if (!A) {
        if (!ld_init()) abort();
        ld_set_offline(true);
        model_init();
        A = arena_new(1 << 16);
    }
    arena_reset(A);
    json_t *body = json_parse_copy(A, (const char *)data, size, NULL, err, sizeof err);
    return body && json_is_object(body) ? body : NULL;
}

/* What one kind of stored object gives the round; o is the built object. */
typedef struct fuzz_object {
    char       *(*doc_new)(const json_t *body, int64_t now, size_t *len);
    char       *(*doc_patch)(const char *doc, size_t len, const json_t *body, int64_t now,
                             size_t *out_len, problem_t *p);
    void       *(*build)(const char *doc, size_t len, int64_t now, problem_t *p);
    const char *(*doc)(void *o, size_t *len);
    void        (*exercise)(void *o, int64_t now);
    void        (*unref)(void *o);
} fuzz_object_t;

static int fuzz_object_round(const fuzz_object_t *k, const uint8_t *data, size_t size)
{
    json_t *body = fuzz_body(data, size);
    if (!body) return 0;

    const int64_t now = 1700000000000000LL;
    size_t        len;
    char         *doc = k->doc_new(body, now, &len);
    problem_t     p = {0};
    void         *o = k->build(doc, len, now, &p);
    if (!o) {
        check_problem(&p);
        return 0;
    }
    k->exercise(o, now);

    size_t      dlen, plen;
    const char *stored = k->doc(o, &dlen);
    memset(&p, 0, sizeof p);
    char *patched = k->doc_patch(stored, dlen, body, now + 1, &plen, &p);
    if (patched) {
        void *o2 = k->build(patched, plen, now + 1, &p);
        if (o2) {
            k->exercise(o2, now + 1);
            k->unref(o2);
        } else check_problem(&p);
    } else check_problem(&p);
    k->unref(o);
    return 0;
}

#endif
