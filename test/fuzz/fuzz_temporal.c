/*
 * fuzz_temporal.c - libFuzzer target for temporal bodies (5.6.11 POST
 * /temporal/entities, 5.6.12 POST /temporal/entities/{id}/attrs): the
 * operations layer on an in-memory corDB store with a corDB history, as the
 * broker runs them behind src/api/temporal.c, without HTTP.
 *
 * The first input byte picks the operation (even: create, odd: append to a
 * fixed entity); the rest, when it is JSON, is the body (core @context,
 * offline). A created entity is deleted again (its core version and its
 * history), and the fixed one is made anew every FIXED_ROUNDS inputs, so the
 * run's memory stays bounded (--historyMaxInstances bounds each series). A
 * refusal must say why (a kind and a detail), never crash or leak.
 */
#include <stdlib.h>
#include <string.h>

#include "history/history.h"
#include "ops/ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FIXED_ID     "urn:ngsi-ld:Vehicle:fuzz-fixed"
#define FIXED_ROUNDS 256

static store_t   *S;
static history_t *H;
static arena_t   *A;
static unsigned   rounds;

static void check_problem(const problem_t *p)
{
    if (p->kind == PB_NONE || p->detail[0] == '\0') abort();   /* every failure says why */
}

static ops_req_t req(void)
{
    return (ops_req_t){.store = S, .tenant = NULL, .ctx = ld_core(), .arena = A};
}

static void fixed_anew(void)
{
    static const char body[] =
        "{\"id\":\"" FIXED_ID "\",\"type\":\"Vehicle\","
        "\"speed\":[{\"type\":\"Property\",\"value\":1,\"observedAt\":\"2023-01-01T00:00:00Z\"},"
        "{\"type\":\"Property\",\"value\":2,\"observedAt\":\"2023-01-01T00:00:01Z\",\"datasetId\":\"urn:ds:1\"}],"
        "\"owner\":{\"type\":\"Relationship\",\"object\":\"urn:ngsi-ld:Person:A\"}}";
    char        err[160];
    ops_req_t   rq = req();
    problem_t   p = {0};
    bool        created;
    const char *id;
    (void)ops_temporal_delete(&rq, FIXED_ID, &p);
    memset(&p, 0, sizeof p);
    json_t *b = json_parse_copy(A, body, sizeof body - 1, NULL, err, sizeof err);
    if (!b || !ops_temporal_create(&rq, b, &created, &id, &p)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[160];
    if (!S) {
        char *argv[] = {"fuzz_temporal", NULL};
        if (!cr_config_load(1, argv)) abort();
        cr_log_open(NULL, LOG_ERROR);
        if (!ld_init()) abort();
        ld_set_offline(true);
        model_init();
        problem_t p = {0};
        cr_config.database = "corDB";
        cr_config.db_dir = NULL;
        cr_config.db_lock_prefer = "reads";
        cr_config.history = "corDB";
        cr_config.history_max_instances = 64;
        S = store_open(&p);
        H = S ? history_open(S, &p) : NULL;
        A = arena_new(1 << 16);
        if (!S || !H || !A) abort();
    }
    arena_reset(A);
    if (rounds++ % FIXED_ROUNDS == 0) {
        fixed_anew();
        arena_reset(A);
    }
    if (size < 1) return 0;
    json_t *body = json_parse_copy(A, (const char *)data + 1, size - 1, NULL, err, sizeof err);
    if (!body) return 0;
    ops_req_t rq = req();
    problem_t p = {0};
    if (data[0] % 2 == 0) {
        bool        created;
        const char *id = NULL;
        if (!ops_temporal_create(&rq, body, &created, &id, &p)) {
            check_problem(&p);
            return 0;
        }
        if (!id) abort();
        if (strcmp(id, FIXED_ID)) {
            memset(&p, 0, sizeof p);
            if (!ops_temporal_delete(&rq, id, &p)) abort();     /* it was just created: it is there */
        }
    } else if (!ops_temporal_attrs_append(&rq, FIXED_ID, body, &p)) {
        check_problem(&p);
    }
    return 0;
}
