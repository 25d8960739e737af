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
    [PB_HTTP]                     = {NULL, NULL, 400},
};

bool problem_set(problem_t *p, problem_kind_t kind, const char *fmt, ...)
{
    if (!p) return false;
    p->kind = kind;
    p->status = kinds[kind].status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->detail, sizeof p->detail, fmt, ap);
    va_end(ap);
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
#undef U
    };
    return kind < PB__COUNT && uris[kind] ? uris[kind] : "about:blank";
}

const char *problem_title(problem_kind_t kind)
{
    return kind < PB__COUNT && kinds[kind].title ? kinds[kind].title : "Error";
}
