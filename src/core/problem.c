/*
 * problem.c - the error types of clause 6.3.2 and their HTTP statuses.
 * Modules report a problem_t; http/ turns it into a ProblemDetails body.
 */
#include "core.h"

#include <stdio.h>

static const struct { const char *name; const char *title; int status; } kinds[PB__COUNT] = {
    [PB_NONE]                     = {NULL, NULL, 200},
    [PB_BAD_REQUEST_DATA]         = {"BadRequestData", "Bad request data", 400},
    [PB_INVALID_REQUEST]          = {"InvalidRequest", "Invalid request", 400},
    [PB_ALREADY_EXISTS]           = {"AlreadyExists", "Already exists", 409},
    [PB_RESOURCE_NOT_FOUND]       = {"ResourceNotFound", "Resource not found", 404},
    [PB_NONEXISTENT_TENANT]       = {"NonexistentTenant", "Nonexistent tenant", 404},
    [PB_OPERATION_NOT_SUPPORTED]  = {"OperationNotSupported", "Operation not supported", 422},
    [PB_TOO_COMPLEX_QUERY]        = {"TooComplexQuery", "Too complex query", 403},
    [PB_TOO_MANY_RESULTS]         = {"TooManyResults", "Too many results", 403},
    [PB_LD_CONTEXT_NOT_AVAILABLE] = {"LdContextNotAvailable", "@context not available", 503},
    [PB_INTERNAL_ERROR]           = {"InternalError", "Internal error", 500},
    [PB_CONFLICT]                 = {"Conflict", "Conflict", 409},
    [PB_HTTP]                     = {NULL, NULL, 400},
};

bool problem_set(problem_t *p, problem_kind_t kind, const char *fmt, ...)
{
    if (!p) return false;
    p->kind = kind;
    p->status = kinds[kind].status;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->detail, sizeof p->detail, fmt, ap);
    va_end(ap);
    if (n < 0) {
        p->detail[0] = '\0';
        return false;
    }
    /* The detail goes out in a JSON string, so it must be UTF-8: a cut
     * (vsnprintf stops at the buffer's end, maybe inside a character) moves
     * back to a character boundary, and bytes that are no UTF-8 at all
     * (client input quoted by the caller) become '?'. */
    unsigned char *d = (unsigned char *)p->detail;
    unsigned char *end = d + ((size_t)n < sizeof p->detail ? (size_t)n : sizeof p->detail - 1);
    bool           cut = (size_t)n >= sizeof p->detail;
    for (unsigned char *c = d; c < end;) {
        if (*c < 0x80) { c++; continue; }
        int k = cr_utf8_seq(c, end);
        if (k) { c += k; continue; }
        if (cut && *c >= 0xc2 && *c <= 0xf4 && end - c < 4) {   /* the last character, cut */
            bool tail = true;
            for (unsigned char *t = c + 1; t < end; t++) tail = tail && (*t & 0xc0) == 0x80;
            if (tail) { *c = '\0'; break; }
        }
        *c++ = '?';
    }
    return false;
}

int problem_status(const problem_t *p)
{
    if (p->kind == PB_HTTP) return p->status;
    return kinds[p->kind].status;
}

const char *problem_type_uri(problem_kind_t kind)
{
    static const char *uris[PB__COUNT] = {
#define U(k, n) [k] = "https://uri.etsi.org/ngsi-ld/errors/" n
        U(PB_BAD_REQUEST_DATA, "BadRequestData"),
        U(PB_INVALID_REQUEST, "InvalidRequest"),
        U(PB_ALREADY_EXISTS, "AlreadyExists"),
        U(PB_RESOURCE_NOT_FOUND, "ResourceNotFound"),
        U(PB_NONEXISTENT_TENANT, "NonexistentTenant"),
        U(PB_OPERATION_NOT_SUPPORTED, "OperationNotSupported"),
        U(PB_TOO_COMPLEX_QUERY, "TooComplexQuery"),
        U(PB_TOO_MANY_RESULTS, "TooManyResults"),
        U(PB_LD_CONTEXT_NOT_AVAILABLE, "LdContextNotAvailable"),
        U(PB_INTERNAL_ERROR, "InternalError"),
        U(PB_CONFLICT, "Conflict"),
#undef U
    };
    return kind < PB__COUNT && uris[kind] ? uris[kind] : "about:blank";
}

const char *problem_title(problem_kind_t kind)
{
    return kind < PB__COUNT && kinds[kind].title ? kinds[kind].title : "Error";
}
