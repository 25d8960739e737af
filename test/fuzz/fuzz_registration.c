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
#include "fuzz_body.h"
#include "reg/reg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern const char *const reg_read_only_members[];
static const model_doc_kind_t K = {"ContextSourceRegistration", "ContextSourceRegistration", "registration",
                                   reg_read_only_members};
static char *doc_new(const json_t *body, int64_t now, size_t *len)
{
    return model_doc_new(A, body, ld_core(), &K, now, len);
}

static char *doc_patch(const char *doc, size_t len, const json_t *body, int64_t now, size_t *out_len,
                       problem_t *p)
{
    return model_doc_patch(A, doc, len, body, &K, now, out_len, p);
}

static void *build(const char *doc, size_t len, int64_t now, problem_t *p)
{
    return reg_build("", doc, len, now, p);
}

static const char *doc(void *r, size_t *len) { return reg_doc(r, len); }
static void        unref(void *r) { reg_unref(r); }

static void exercise(void *r, int64_t now)
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

static const fuzz_object_t REGISTRATION = {doc_new, doc_patch, build, doc, exercise, unref};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_object_round(&REGISTRATION, data, size);
}
