/*
 * dwrite.c - the HTTP side of a distributed write (6.3.17, 6.4.3.1 and the
 * 207 of every write binding): fwd_write() forwards the parts of the write
 * the registrations take (fwd/fwd_write.c), the handler writes the rest
 * locally through ops/, and the answer here combines the outcomes:
 *  - every part succeeded: the handler's own success (201, 204);
 *  - one part only (a single source, nothing local), and it failed: its
 *    error (6.3.17: its 404, 504 on a timeout, 502 otherwise);
 *  - else, some part failed: 207 (6.4.3.1: "a response body containing the
 *    result returned from each registration") with a BatchOperationResult
 *    (5.2.16: success and errors, each error of a source naming its
 *    registrationId, 5.2.17) for the operations on an entity, an
 *    UpdateResult (5.2.18: notUpdated with registrationId, 5.2.19) for
 *    those on attributes; also when every part failed, so that each
 *    part's error is told.
 */
#include "api.h"

#include "../fwd/fwd.h"

#include <string.h>

/* local=true|false (6.3.18): whether a write is only local. */
bool api_dw_local_param(request_t *r, problem_t *p)
{
    const char *local = req_param(r, "local");
    if (local && strcmp(local, "true") && strcmp(local, "false"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "local must be true or false");
    return true;
}

/* prefix, the id URL-encoded, suffix. */
const char *api_dw_path(request_t *r, const char *prefix, const char *id, const char *suffix)
{
    sbuf_t sb;
    sb_init(&sb, r->arena, 64);
    sb_adds(&sb, prefix);
    fwd_url_encode(&sb, id);
    if (suffix) sb_adds(&sb, suffix);
    return sb.p;
}

/* The request's query string without local (sent along to the sources). */
const char *api_dw_query(request_t *r)
{
    sbuf_t sb;
    sb_init(&sb, r->arena, 64);
    for (int i = 0; i < r->nparams; i++) {
        if (!strcmp(r->params[i].key, "local")) continue;
        if (sb.len) sb_addc(&sb, '&');
        fwd_url_encode(&sb, r->params[i].key);
        sb_addc(&sb, '=');
        fwd_url_encode(&sb, r->params[i].value);
    }
    return sb.len ? sb.p : NULL;
}

const typesel_t *api_dw_local_types(void *ud)
{
    const api_dw_types_t *t = ud;
    problem_t             q = {0};
    ops_req_t             rq = api_req(t->r, t->ctx);
    cr_entity_t          *e = ops_entity_retrieve(&rq, t->id, &(ops_retrieve_t){0}, &q);
    if (!e) return NULL;
    sbuf_t sb;
    sb_init(&sb, t->r->arena, 64);
    for (uint16_t i = 0; i < e->n_types; i++) {
        if (i) sb_addc(&sb, ',');
        sb_adds(&sb, ld_compact(t->ctx, e->types[i]));
    }
    entity_unref(e);
    return sb.len ? typesel_parse(t->r->arena, sb.p, t->ctx, &q) : NULL;
}

bool api_dw_check(void *ud, problem_t *p)
{
    const api_dw_types_t *t = ud;
    ops_req_t             rq = api_req(t->r, t->ctx);
    return ops_payload_check(&rq, t->id, t->body, t->flags, t->need_type, p);
}

bool api_fwd_write(request_t *r, const ld_context_t *ctx, const fwd_write_t *w, fwd_wout_t *out, problem_t *p)
{
    memset(out, 0, sizeof *out);
    out->local = (json_t *)w->body;
    if (!api_distributed(r)) return true;
    fwd_in_t in;
    api_fwd_in(r, ctx, &in);
    return fwd_write(&in, w, out, p);
}

/* The first failure, or NULL. */
static const problem_t *first_failure(bool tried, bool local_ok, const problem_t *lp, const fwd_wout_t *out)
{
    if (tried && !local_ok) return lp;
    for (size_t i = 0; i < out->n_sent; i++)
        if (!out->sent[i].ok) return &out->sent[i].problem;
    return NULL;
}

/* A source answered 207: its partial result is part of the answer. */
static bool any_partial(const fwd_wout_t *out)
{
    for (size_t i = 0; i < out->n_sent; i++)
        if (out->sent[i].partial) return true;
    return false;
}

/* The members of a source's own result (its errors or notUpdated), each
 * with its registrationId. */
static void copy_results(json_writer_t *w, const fwd_sent_t *s, const char *member)
{
    const json_t *v = json_get(s->answer, member);
    for (const json_t *e = json_is_array(v) ? v->child : NULL; e; e = e->next) {
        if (!json_is_object(e)) continue;
        jw_object_begin(w);
        for (const json_t *m = e->child; m; m = m->next) {
            if (!strcmp(m->key, "registrationId")) continue;
            jw_key(w, m->key);
            jw_value(w, m);
        }
        jw_key(w, "registrationId");
        jw_string(w, s->reg_id);
        jw_object_end(w);
    }
}

/* The write had one part only (one source, nothing local): its error is
 * the answer (6.3.17: a single exclusive or redirect source). */
static bool single_part(bool tried, const fwd_wout_t *out)
{
    return !tried && out->n_sent == 1;
}

bool api_fwd_purge(request_t *r, const ld_context_t *ctx, const entity_filter_t *f, fwd_wout_t *out, problem_t *p)
{
    memset(out, 0, sizeof *out);
    if (!api_distributed(r)) return true;
    fwd_in_t    in;
    reg_query_t q = {.types = f->types, .ids = (const char *const *)f->ids, .n_ids = f->n_ids,
                     .id_pattern = f->id_pattern};
    api_fwd_in(r, ctx, &in);
    return fwd_purge(&in, &q, out, p);
}

/* What the answer is: -1 every part succeeded (the handler answers), 0
 * the error of the single part was answered, 1 a 207 body is begun in w. */
static int begin_207(request_t *r, bool tried, bool local_ok, const problem_t *lp, const fwd_wout_t *out,
                     bool local_partial, json_writer_t *w)
{
    const problem_t *f = first_failure(tried, local_ok, lp, out);
    if (!f && !local_partial && !any_partial(out)) return -1;
    if (f && single_part(tried, out)) {
        reply_problem(r, f);
        return 0;
    }
    sb_clear(&r->out);
    jw_init(w, &r->out);
    jw_object_begin(w);
    return 1;
}

bool api_reply_dwrite(request_t *r, const char *id, bool tried, bool local_ok, const problem_t *lp,
                      const fwd_wout_t *out)
{
    json_writer_t w;
    int           d = begin_207(r, tried, local_ok, lp, out, false, &w);
    if (d <= 0) return d == 0;
    bool any_ok = tried && local_ok;
    for (size_t i = 0; i < out->n_sent; i++) any_ok = any_ok || out->sent[i].ok;
    jw_key(&w, "success");
    jw_array_begin(&w);
    if (id && any_ok) jw_string(&w, id);       /* a purge names no entity */
    jw_array_end(&w);
    jw_key(&w, "errors");
    jw_array_begin(&w);
    if (tried && !local_ok) {
        jw_object_begin(&w);
        jw_key(&w, "entityId");
        jw_string(&w, id);
        jw_key(&w, "error");
        jw_problem(&w, lp, NULL);
        jw_object_end(&w);
    }
    for (size_t i = 0; i < out->n_sent; i++) {
        const fwd_sent_t *s = &out->sent[i];
        if (s->partial) copy_results(&w, s, "errors");
        if (s->ok) continue;
        jw_object_begin(&w);
        if (id) {
            jw_key(&w, "entityId");
            jw_string(&w, id);
        }
        jw_key(&w, "registrationId");
        jw_string(&w, s->reg_id);
        jw_key(&w, "error");
        jw_problem(&w, &s->problem, NULL);
        jw_object_end(&w);
    }
    jw_array_end(&w);
    jw_object_end(&w);
    reply_body(r, 207, "application/json");
    return true;
}

bool api_reply_dwrite_attrs(request_t *r, const ld_context_t *ctx, bool tried, bool local_ok, const problem_t *lp,
                            const op_result_t *res, const fwd_wout_t *out)
{
    json_writer_t w;
    int           d = begin_207(r, tried, local_ok, lp, out, tried && local_ok && res && res->n_not_updated, &w);
    if (d <= 0) return d == 0;
    jw_key(&w, "updated");
    jw_array_begin(&w);
    if (tried && local_ok && res)
        for (size_t i = 0; i < res->n; i++)
            if (res->items[i].updated) jw_string(&w, ld_compact(ctx, res->items[i].name));
    for (size_t i = 0; i < out->n_sent; i++) {
        const fwd_sent_t *s = &out->sent[i];
        if (!s->ok) continue;
        const json_t *up = s->partial ? json_get(s->answer, "updated") : NULL;
        if (s->partial) {              /* what the source says it updated */
            for (const json_t *x = json_is_array(up) ? up->child : NULL; x; x = x->next)
                if (json_is_string(x)) jw_string(&w, x->str);
            continue;
        }
        for (size_t k = 0; k < s->n_attrs; k++) jw_string(&w, s->attrs[k]);
    }
    jw_array_end(&w);
    jw_key(&w, "notUpdated");
    jw_array_begin(&w);
    if (tried && local_ok && res)
        for (size_t i = 0; i < res->n; i++) {
            if (res->items[i].updated) continue;
            jw_object_begin(&w);
            jw_key(&w, "attributeName");
            jw_string(&w, ld_compact(ctx, res->items[i].name));
            jw_key(&w, "reason");
            jw_string(&w, res->items[i].reason ? res->items[i].reason : "not updated");
            jw_object_end(&w);
        }
    if (tried && !local_ok) {
        /* the local part failed as a whole: every attribute it had */
        for (const json_t *m = json_is_object(out->local) ? out->local->child : NULL; m; m = m->next) {
            if (!strcmp(m->key, "@context") || !strcmp(m->key, "id") || !strcmp(m->key, "type")) continue;
            jw_object_begin(&w);
            jw_key(&w, "attributeName");
            jw_string(&w, m->key);
            jw_key(&w, "reason");
            jw_string(&w, lp->detail);
            jw_object_end(&w);
        }
    }
    for (size_t i = 0; i < out->n_sent; i++) {
        const fwd_sent_t *s = &out->sent[i];
        if (s->partial) copy_results(&w, s, "notUpdated");
        if (s->ok) continue;
        for (size_t k = 0; k < (s->n_attrs ? s->n_attrs : 1); k++) {
            jw_object_begin(&w);
            jw_key(&w, "attributeName");
            jw_string(&w, s->n_attrs ? s->attrs[k] : "*");
            jw_key(&w, "reason");
            jw_string(&w, s->problem.detail);
            jw_key(&w, "registrationId");
            jw_string(&w, s->reg_id);
            jw_object_end(&w);
        }
    }
    jw_array_end(&w);
    jw_object_end(&w);
    reply_body(r, 207, "application/json");
    return true;
}
