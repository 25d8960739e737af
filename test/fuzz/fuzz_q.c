/*
 * fuzz_q.c - libFuzzer target for the query languages of src/model: q
 * (4.9), type selection (4.17) and scopeQ (4.19).
 *
 * The input bytes, as a NUL-terminated string (cut at the first NUL, as a
 * query parameter would be), go to q_parse with the core @context; when they
 * parse, the query is matched against a fixed entity that has one attribute
 * of every kind (both as a draft and frozen, which must agree). The same
 * text goes to typesel_parse and scopeq_parse, and matched when it parses.
 * A failed parse must say why (a kind and a detail), never crash.
 */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static arena_t     *A;        /* per input */
static arena_t     *FIXED;    /* the entities, for the whole run */
static cr_entity_t *ENT, *FROZEN;

static const char ENTITY[] =
    "{\"id\": \"urn:ngsi-ld:Car:1\", \"type\": [\"Car\", \"Vehicle\"],"
    " \"scope\": [\"/Madrid/Gardens/ParqueNorte\", \"/CompanyA\"],"
    " \"speed\": {\"type\": \"Property\", \"value\": 55.5, \"observedAt\": \"2023-01-01T12:00:00Z\","
    "   \"unitCode\": \"KMH\", \"accuracy\": {\"type\": \"Property\", \"value\": 0.5}},"
    " \"rpm\": {\"type\": \"Property\", \"value\": 3000},"
    " \"brandName\": {\"type\": \"Property\", \"value\": \"Mercedes\"},"
    " \"isParked\": {\"type\": \"Relationship\", \"object\": \"urn:ngsi-ld:Parking:1\"},"
    " \"colors\": {\"type\": \"Property\", \"value\": [\"blue\", \"red\", 3, true, null, [1]]},"
    " \"address\": {\"type\": \"Property\", \"value\": {\"city\": \"Berlin\", \"a\": {\"b\": [{\"c\": 1}]}}},"
    " \"title\": {\"type\": \"LanguageProperty\", \"languageMap\": {\"en\": \"red\", \"de\": [\"rot\"]}},"
    " \"gender\": {\"type\": \"VocabProperty\", \"vocab\": \"Male\"},"
    " \"numbers\": {\"type\": \"ListProperty\", \"valueList\": [1, 2.5, \"x\"]},"
    " \"friends\": {\"type\": \"ListRelationship\", \"objectList\": [{\"object\": \"urn:x:f1\"}]},"
    " \"isOn\": {\"type\": \"Property\", \"value\": false},"
    " \"stamp\": {\"type\": \"Property\", \"value\": \"2023-05-01T10:00:00Z\"},"
    " \"birth\": {\"type\": \"Property\", \"value\": \"2000-02-29\"},"
    " \"opens\": {\"type\": \"Property\", \"value\": \"08:30:00\"},"
    " \"tickets\": {\"type\": \"JsonProperty\", \"json\": {\"value\": \"Overstay\", \"n\": [1, {\"m\": 2}]}},"
    " \"temperature\": [{\"type\": \"Property\", \"value\": 20},"
    "   {\"type\": \"Property\", \"value\": 25, \"datasetId\": \"urn:ds:1\"}]}";

static void fuzz_setup(void)
{
    char      err[160];
    problem_t p = { 0 };
    json_t   *body;

    if (!ld_init())
        abort();
    ld_set_offline(true);
    model_init();
    FIXED = arena_new(1 << 16);
    A = arena_new(1 << 16);
    if (!FIXED || !A)
        abort();
    body = json_parse_copy(FIXED, ENTITY, strlen(ENTITY), NULL, err, sizeof err);
    if (!body)
        abort();
    ENT = entity_parse(FIXED, body, ld_core(), EP_CREATE, 1600000000000LL, &p);
    if (!ENT)
        abort();
    FROZEN = entity_freeze(ENT);
    if (!FROZEN)
        abort();
}

static void check_problem(const problem_t *p)
{
    if (p->kind == PB_NONE || p->detail[0] == '\0')
        abort();                         /* every failure says why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char      *text;
    problem_t  p;
    q_expr_t  *q;
    typesel_t *t;
    scopeq_t  *s;

    if (!ENT)
        fuzz_setup();
    arena_reset(A);

    text = malloc(size + 1);             /* malloc, not the arena: ASan sees overruns */
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    memset(&p, 0, sizeof p);
    q = q_parse(A, text, ld_core(), &p);
    if (q) {
        if (q_match(q, ENT) != q_match(q, FROZEN))
            abort();                     /* draft and frozen hold the same entity */
    } else {
        check_problem(&p);
    }

    memset(&p, 0, sizeof p);
    t = typesel_parse(A, text, ld_core(), &p);
    if (t) {
        const char *const *list;
        size_t             n = typesel_types(t, &list);
        bool               in_list = false;

        for (size_t i = 0; i < n; i++)
            if (list[i] == FROZEN->types[0] || list[i] == FROZEN->types[1])
                in_list = true;
        /* For a plain list, matching is membership in the list. */
        if (n && typesel_match(t, FROZEN) != in_list)
            abort();
    } else {
        check_problem(&p);
    }

    memset(&p, 0, sizeof p);
    s = scopeq_parse(A, text, &p);
    if (s) {
        if (scopeq_match(s, ENT) != scopeq_match(s, FROZEN))
            abort();
    } else {
        check_problem(&p);
    }

    free(text);
    return 0;
}
