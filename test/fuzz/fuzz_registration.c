/*
 * fuzz_registration.c - libFuzzer target for context source registration
 * bodies (5.2.9, 5.9.2 and 5.9.3: POST and PATCH /csourceRegistrations)
 * without HTTP.
 *
 * The input, when it is a JSON object, becomes a stored document
 * (model_doc_new with the registration's kind, core @context, offline) and
 * goes to reg_build, as ops/registrations.c does. A registration that
 * builds is rendered (GET, every RegistrationInfo, with and without the
 * @context: the text must be JSON), its pseudo-entity, RegistrationInfo
 * matching and intervals are evaluated, and its document is patched with
 * the input itself and built again (PATCH). A refusal must say why (a kind
 * and a detail), never crash or leak.
 */
#include <string.h>

#include "fuzz_body.h"
#include "reg/reg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern const char *const reg_read_only_members[];
static const model_doc_kind_t K = {"ContextSourceRegistration", "ContextSourceRegistration", "registration",
                                   reg_read_only_members};
static void exercise(reg_t *r, int64_t now)
{
    char          err[160];
    sbuf_t        out;
    json_writer_t w;
    for (int with = 0; with < 2; with++) {
        sb_init(&out, A, 1024);
        jw_init(&w, &out);
        reg_render(&w, r, ld_core(), with, true, ~(uint64_t)0);
        if (!json_parse_copy(A, out.p, out.len, NULL, err, sizeof err)) abort();   /* GET answers JSON */
    }
    (void)reg_as_entity(r);
    const char *ids[] = {"urn:ngsi-ld:Vehicle:A"};
    const char *attrs[] = {intern_cstr("https://uri.etsi.org/ngsi-ld/default-context/speed")};
    reg_query_t q = {.ids = ids, .n_ids = 1, .attrs = attrs, .n_attrs = 1};
    for (size_t i = 0; i < reg_info_count(r); i++) {
        (void)reg_info_match(r, i, &q);
        (void)reg_info_match(r, i, &(reg_query_t){0});
    }
    int64_t s, e;
    for (int obs = 0; obs < 2; obs++) {
        (void)reg_interval(r, obs, &s, &e);
        for (int rel = REG_TIMEREL_BEFORE; rel <= REG_TIMEREL_BETWEEN; rel++)
            (void)reg_time_match(r, rel, now, now + 1000000, obs);
    }
    (void)reg_mode(r);
    (void)reg_ops(r);
    for (size_t i = 0; i < reg_csource_info_count(r); i++) {
        const char *k, *v;
        reg_csource_info_at(r, i, &k, &v);
        if (!k || !v) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = fuzz_body(data, size);
    if (!body) return 0;

    const int64_t now = 1700000000000000LL;
    size_t        len;
    char         *doc = model_doc_new(A, body, ld_core(), &K, now, &len);
    problem_t     p = {0};
    reg_t        *r = reg_build("", doc, len, now, &p);
    if (!r) {
        check_problem(&p);
        return 0;
    }
    exercise(r, now);

    size_t      dlen, plen;
    const char *stored = reg_doc(r, &dlen);
    memset(&p, 0, sizeof p);
    char *patched = model_doc_patch(A, stored, dlen, body, &K, now + 1, &plen, &p);
    if (patched) {
        reg_t *r2 = reg_build("", patched, plen, now + 1, &p);
        if (r2) {
            exercise(r2, now + 1);
            reg_unref(r2);
        } else check_problem(&p);
    } else check_problem(&p);
    reg_unref(r);
    return 0;
}
