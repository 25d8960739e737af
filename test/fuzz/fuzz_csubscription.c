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
#include <string.h>

#include "fuzz_body.h"
#include "notify/notify.h"
#include "reg/reg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static notify_sub_t *build(const char *doc, size_t len, int64_t now, problem_t *p)
{
    notify_sub_t *s = notify_csub_build("", doc, len, now, p);
    if (s && !reg_csub_check(s, p)) {
        notify_sub_unref(s);
        return NULL;
    }
    return s;
}

static void exercise(notify_sub_t *s, int64_t now)
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = fuzz_body(data, size);
    if (!body) return 0;

    const int64_t now = 1700000000000000LL;
    size_t        len;
    char         *doc = notify_doc_new(A, body, ld_core(), now, &len);
    problem_t     p = {0};
    notify_sub_t *s = build(doc, len, now, &p);
    if (!s) {
        check_problem(&p);
        return 0;
    }
    exercise(s, now);

    size_t      dlen, plen;
    const char *stored = notify_sub_doc(s, &dlen);
    memset(&p, 0, sizeof p);
    char *patched = notify_doc_patch(A, stored, dlen, body, now + 1, &plen, &p);
    if (patched) {
        notify_sub_t *s2 = build(patched, plen, now + 1, &p);
        if (s2) {
            exercise(s2, now + 1);
            notify_sub_unref(s2);
        } else check_problem(&p);
    } else check_problem(&p);
    notify_sub_unref(s);
    return 0;
}
