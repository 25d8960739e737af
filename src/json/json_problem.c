/*
 * json_problem.c - a problem_t as a ProblemDetails object (6.3.2: type,
 * title, status, detail): the one rendering of an error, used for a whole
 * HTTP error body (http/ reply_problem) and for each error of a
 * BatchOperationResult (api/).
 */
#include "json.h"

void jw_problem(json_writer_t *w, const problem_t *p, const char *title)
{
    jw_object_begin(w);
    JW_KEY_LIT(w, "type");
    jw_string(w, problem_type_uri(p->kind));
    JW_KEY_LIT(w, "title");
    jw_string(w, title ? title : problem_title(p->kind));
    JW_KEY_LIT(w, "status");
    jw_int(w, problem_status(p));
    JW_KEY_LIT(w, "detail");
    jw_string(w, p->detail);
    jw_object_end(w);
}
