/*
 * fuzz_subscription.c - libFuzzer target for subscription bodies (5.2.12 -
 * 5.2.15, 7.2 endpoint URIs): the path of POST and PATCH /subscriptions
 * without HTTP.
 *
 * The input, when it is a JSON object, becomes a stored document
 * (notify_doc_new, core @context, offline) and goes to notify_sub_build;
 * a valid subscription is rendered (GET) and its document patched with the
 * input itself and built again (PATCH). A refusal must say why (a kind and a
 * detail), never crash or leak.
 */
#include <string.h>

#include "fuzz_body.h"
#include "notify/notify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = fuzz_body(data, size);
    if (!body) return 0;

    const int64_t now = 1700000000000000LL;
    size_t        len;
    char         *doc = notify_doc_new(A, body, ld_core(), now, &len);
    problem_t     p = {0};
    notify_sub_t *s = notify_sub_build("", doc, len, now, &p);
    if (!s) {
        check_problem(&p);
        return 0;
    }
    sbuf_t        out;
    json_writer_t w;
    sb_init(&out, A, 1024);
    jw_init(&w, &out);
    notify_sub_render(&w, s, true, true);

    size_t      dlen, plen;
    const char *stored = notify_sub_doc(s, &dlen);
    memset(&p, 0, sizeof p);
    char *patched = notify_doc_patch(A, stored, dlen, body, now + 1, &plen, &p);
    if (patched) {
        notify_sub_t *s2 = notify_sub_build("", patched, plen, now + 1, &p);
        if (s2) notify_sub_unref(s2);
        else check_problem(&p);
    } else check_problem(&p);
    notify_sub_unref(s);
    return 0;
}
