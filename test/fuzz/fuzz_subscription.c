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
#include "fuzz_notify_doc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void *build(const char *doc, size_t len, int64_t now, problem_t *p)
{
    return notify_sub_build("", doc, len, now, p);
}


static void exercise(void *s, int64_t now)
{
    char          err[160];
    sbuf_t        out;
    json_writer_t w;
    sb_init(&out, A, 1024);
    jw_init(&w, &out);
    notify_sub_render(&w, s, true, true);
    if (!json_parse_copy(A, out.p, out.len, NULL, err, sizeof err)) abort();   /* GET answers JSON */
    (void)notify_sub_active(s, now);
}

static const fuzz_object_t SUBSCRIPTION = {doc_new, doc_patch, build, doc, exercise, unref};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_object_round(&SUBSCRIPTION, data, size);
}
