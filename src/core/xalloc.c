/*
 * xalloc.c - allocation that does not fail, the broker's out-of-memory policy.
 *
 * Like Redis's zmalloc: when malloc fails anywhere, the broker logs one line
 * and aborts. A request cannot be answered well without memory, every
 * recovery path for a failed malloc would be code that no test runs, and the
 * process restarts clean (the on-disk store replays its log). So callers
 * never check for NULL, and sizes computed from input that overflow are
 * failures of the same kind, not wrapped numbers.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

_Noreturn void cr_oom(const char *what, size_t n)
{
    LOG_E("out of memory (%s, %zu bytes): aborting", what, n);
    abort();
}

void *cr_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (CR_UNLIKELY(!p))
        cr_oom("malloc", n);
    return p;
}

void *cr_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);   /* calloc checks n * size */
    if (CR_UNLIKELY(!p))
        cr_oom("calloc", n > SIZE_MAX / (size ? size : 1) ? SIZE_MAX : n * size);
    return p;
}

void *cr_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (CR_UNLIKELY(!q))
        cr_oom("realloc", n);
    return q;
}

void *cr_xreallocarray(void *p, size_t n, size_t size)
{
    if (CR_UNLIKELY(size && n > SIZE_MAX / size))
        cr_oom("reallocarray overflow", SIZE_MAX);
    return cr_xrealloc(p, n * size);
}

char *cr_xstrndup(const char *s, size_t n)
{
    if (CR_UNLIKELY(n == SIZE_MAX))
        cr_oom("strndup overflow", n);
    char *p = cr_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *cr_xstrdup(const char *s)
{
    return cr_xstrndup(s, strlen(s));
}
