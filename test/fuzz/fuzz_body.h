/*
 * fuzz_body.h - what the fuzz targets of stored-object bodies share
 * (subscriptions, registrations, registration subscriptions): the one-time
 * set-up (the core @context, offline, the model), the per-input arena, the
 * input as a JSON object, and the rule that every refusal says why.
 */
#ifndef CORAINE_FUZZ_BODY_H
#define CORAINE_FUZZ_BODY_H

#include <stdlib.h>

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

#endif
