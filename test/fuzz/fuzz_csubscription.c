/*
 * fuzz_csubscription.c - libFuzzer target for context source registration
 * subscription bodies (5.2.12 as 5.11 uses it: POST and PATCH
 * /csourceSubscriptions) without HTTP.
 *
 * Distinct from subscriptions: notify_csub_build validates the document
 * with the rules of a registration subscription (no watchedAttributes of
 * entities, temporalQ allowed) and reg_csub_check what reg/ owns (csf,
 * temporalQ), as ops/csubscriptions.c builds it. The input, when it is a
 * JSON object, becomes the stored document (notify_doc_new, core @context,
 * offline); a valid one is rendered (the text must be JSON), its selection
 * read, its document patched with the input itself and built again (PATCH).
 * A refusal must say why (a kind and a detail), never crash or leak.
 */
#include "fuzz_notify_doc.h"
#include "reg/reg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void *build(const char *doc, size_t len, int64_t now, problem_t *p)
{
    notify_sub_t *s = notify_csub_build("", doc, len, now, p);
    if (s && !reg_csub_check(s, p)) {
        notify_sub_unref(s);
        return NULL;
    }
    return s;
}

static void exercise(void *s, int64_t now)
{
    char               err[160];
    sbuf_t             out;
    json_writer_t      w;
    notify_selection_t sel;
    sb_init(&out, A, 1024);
    jw_init(&w, &out);
    notify_sub_render(&w, s, true, true);
    if (!json_parse_copy(A, out.p, out.len, NULL, err, sizeof err)) abort();   /* GET answers JSON */
    notify_sub_selection(s, &sel);
    if (sel.n_sel && !sel.sel) abort();
    (void)notify_sub_active(s, now);
}


static const fuzz_object_t CSUBSCRIPTION = {doc_new, doc_patch, build, doc, exercise, unref};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_object_round(&CSUBSCRIPTION, data, size);
}
