/*
 * fuzz_notify_doc.h - the stored-document half of a fuzz_object_t for the
 * objects notify/ keeps (subscriptions and registration subscriptions):
 * their documents are made and patched by notify_doc_*, and both are a
 * notify_sub_t. Each target adds its own build and exercise.
 */
#ifndef CORAINE_FUZZ_NOTIFY_DOC_H
#define CORAINE_FUZZ_NOTIFY_DOC_H

#include "fuzz_body.h"
#include "notify/notify.h"

static char *doc_new(const json_t *body, int64_t now, size_t *len)
{
    return notify_doc_new(A, body, ld_core(), now, len);
}

static char *doc_patch(const char *doc, size_t len, const json_t *body, int64_t now, size_t *out_len,
                       problem_t *p)
{
    return notify_doc_patch(A, doc, len, body, now, out_len, p);
}

static const char *doc(void *s, size_t *len) { return notify_sub_doc(s, len); }
static void        unref(void *s) { notify_sub_unref(s); }

#endif
