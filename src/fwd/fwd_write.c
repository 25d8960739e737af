/*
 * fwd_write.c - the distributed writes (4.3.6.2-4.3.6.4, the behaviour of
 * 5.6.x with registrations, 6.3.17): a create, update, merge, replace,
 * append or delete of one entity is split over the registrations that match
 * it as the clauses say, and the parts are sent to their sources in
 * parallel through fwd_run (fwd_int.h), the one sender of fwd/.
 *
 * The split, per attribute of the payload (or for the whole entity when the
 * operation names none, e.g. Delete Entity):
 *  - an exclusive or redirect registration that covers it takes it: it goes
 *    to that source (to each such, for redirect) and not to the local
 *    store; a registration of that kind that does not support the
 *    operation makes it a Conflict (5.6.1.4: "error of type Conflict");
 *  - an inclusive registration that covers what is left and supports the
 *    operation gets it too, and the local store keeps it;
 *  - an auxiliary registration never receives a write (4.3.6.4).
 * "Covers" is the RegistrationInfo that matched the entity (id, idPattern,
 * type) declaring the attribute, or declaring none (any attribute). Only
 * the attributes a registration covers are sent to it; the entity's id,
 * type and scope go along with them.
 *
 * fwd/ never calls the store: the caller (api/) writes out->local itself
 * through ops/ and combines the outcomes (a 207 when some part failed).
 */
#include "fwd.h"
#include "fwd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Members of an entity payload that are not attributes: sent to every part. */
static bool is_member(const char *k)
{
    static const char *const m[] = {"id", "@id", "type", "@type", "@context", "scope", "createdAt", "modifiedAt",
                                     "deletedAt", NULL};
    for (const char *const *x = m; *x; x++)
        if (!strcmp(k, *x)) return true;
    return false;
}

/* Whether the RegistrationInfo of r in mask cover the attribute name
 * (expanded); name NULL: the whole entity (an info that declares no
 * attributes). */
static bool covers(const reg_t *r, uint64_t mask, const char *name)
{
    for (size_t i = 0; i < reg_info_count(r); i++) {
        const reg_info_t *in = reg_info_at(r, i);
        if (i < 64 && !(mask >> i & 1)) continue;
        if (!(in->n_props + in->n_rels)) return true;
        if (!name) continue;
        for (size_t k = 0; k < in->n_props; k++)
            if (in->props[k] == name || !strcmp(in->props[k], name)) return true;
        for (size_t k = 0; k < in->n_rels; k++)
            if (in->rels[k] == name || !strcmp(in->rels[k], name)) return true;
    }
    return false;
}

static bool proxied(const reg_t *r)
{
    return reg_mode(r) == REG_EXCLUSIVE || reg_mode(r) == REG_REDIRECT;
}

/* The ProblemDetails of a failed part. */
static void part_problem(const call_t *c, arena_t *a, problem_t *p)
{
    const char *rid = reg_id(c->reg);
    if (c->refused) {
        problem_set(p, PB_HTTP, "the source of registration %s is refused by the egress policy", rid);
        p->status = 502;
        return;
    }
    if (c->rc != CURLE_OK) {
        bool slow = c->rc == CURLE_OPERATION_TIMEDOUT;
        problem_set(p, PB_HTTP, "the source of registration %s %s", rid,
                    slow ? "did not answer in time" : curl_easy_strerror(c->rc));
        p->status = slow ? 504 : 502;      /* 6.3.17 */
        return;
    }
    /* its own ProblemDetails when it sent one, else its status */
    char        err[64];
    json_t     *t = c->body.len ? json_parse_copy(a, c->body.p, c->body.len, &(json_limits_t){0}, err, sizeof err) : NULL;
    json_t     *type = json_get(t, "type"), *detail = json_get(t, "detail");
    const char *d = json_is_string(detail) ? detail->str : NULL;
    problem_kind_t kind = PB_HTTP;
    if (json_is_string(type))
        for (int k = 0; k < PB_HTTP; k++)
            if (!strcmp(problem_type_uri((problem_kind_t)k), type->str)) kind = (problem_kind_t)k;
    if (kind == PB_HTTP && c->status == 404) kind = PB_RESOURCE_NOT_FOUND;
    if (kind != PB_HTTP && problem_status(&(problem_t){.kind = kind}) != c->status) kind = PB_HTTP;
    problem_set(p, kind, "the source of registration %s answered %ld%s%.400s", rid, c->status, d ? ": " : "",
                d ? d : "");
    p->status = (int)c->status;
}

/* The payload for one source: the members and the attributes in take. */
static char *payload(arena_t *a, const json_t *body, const bool *take, const fwd_in_t *in, const ld_context_t *to)
{
    sbuf_t        sb;
    json_writer_t w;
    sb_init(&sb, a, 512);
    jw_init(&w, &sb);
    jw_object_begin(&w);
    size_t i = 0;
    for (const json_t *m = body->child; m; m = m->next, i++) {
        if (!strcmp(m->key, "@context")) continue;           /* the @context goes as Link */
        bool member = is_member(m->key);
        if (!member && !take[i]) continue;
        /* names re-compacted when the source is sent another @context (contextSourceInfo jsonldContext) */
        const char *k = m->key;
        if (to != in->ctx && !member) k = ld_compact(to, ld_expand(in->ctx, m->key));
        jw_key(&w, k);
        if (to != in->ctx && (!strcmp(m->key, "type") || !strcmp(m->key, "@type")) && json_is_string(m))
            jw_string(&w, ld_compact(to, ld_expand(in->ctx, m->str)));
        else jw_value(&w, m);
    }
    jw_object_end(&w);
    return sb.p;
}

bool fwd_write(const fwd_in_t *in, const fwd_write_t *w, fwd_wout_t *out, problem_t *p)
{
    arena_t *a = in->arena;
    memset(out, 0, sizeof *out);
    out->local = (json_t *)w->body;

    /* the attributes of the payload, expanded */
    size_t       na = 0;
    const json_t *body = w->attr_body ? NULL : w->body;
    size_t       nm = 0;
    for (const json_t *m = json_is_object(body) ? body->child : NULL; m; m = m->next) nm++;
    const char **names = arena_alloc(a, (nm + 2) * sizeof *names);   /* per member, NULL: not an attribute */
    const char **attrs = arena_alloc(a, (nm + 2) * sizeof *attrs);
    if (w->attr) attrs[na++] = w->attr;
    size_t i = 0;
    for (const json_t *m = json_is_object(body) ? body->child : NULL; m; m = m->next, i++) {
        names[i] = is_member(m->key) ? NULL : ld_expand(in->ctx, m->key);
        if (names[i]) attrs[na++] = names[i];
    }

    reg_query_t q = {.types = w->types, .ids = &w->id, .n_ids = 1, .attrs = attrs, .n_attrs = na,
                     .modes = 1u << REG_INCLUSIVE | 1u << REG_EXCLUSIVE | 1u << REG_REDIRECT};
    fwd_skip_sources(in, &q);
    size_t    nr;
    uint64_t *masks;
    reg_t   **regs = reg_match(in->tenant, &q, cr_now_us(), a, &nr, &masks);
    if (!nr) return true;
    bool ok = true;
    if (fwd_via_loop(in->via)) {           /* inclusive: written here only; exclusive, redirect: 508 */
        ok = fwd_loop_check(regs, nr, p);
        goto done;
    }

    /* what the exclusive and redirect registrations take from the local write */
    bool *taken = arena_calloc(a, nm + 1);
    bool  whole_taken = false, any_taken = false;
    for (size_t r = 0; r < nr; r++) {
        if (!proxied(regs[r])) continue;
        if (w->attr || !nm || !body) {
            if (covers(regs[r], masks[r], w->attr)) whole_taken = true;
            continue;
        }
        for (size_t k = 0; k < nm; k++)
            if (names[k] && covers(regs[r], masks[r], names[k])) taken[k] = any_taken = true;
    }

    call_t     *calls = arena_calloc(a, nr * sizeof *calls);
    fwd_sent_t *sent = arena_calloc(a, nr * sizeof *sent);
    size_t     *which = arena_alloc(a, (nr + 1) * sizeof *which);   /* sent[k] is calls[which[k]] */
    size_t      ns = 0;
    uint64_t    op = REG_OP_BIT(w->op);
    for (size_t r = 0; r < nr; r++) {
        reg_t  *g = regs[r];
        call_t *c = &calls[r];
        c->reg = g;
        c->ctx = in->ctx;
        c->skipped = true;
        /* the attributes this source gets */
        bool *take = arena_calloc(a, nm + 1);
        size_t nt = 0;
        const char **sent_names = arena_alloc(a, (nm + 2) * sizeof *sent_names);
        if (body && nm) {
            for (size_t k = 0; k < nm; k++) {
                if (!names[k] || !covers(g, masks[r], names[k])) continue;
                if (!proxied(g) && taken[k]) continue;
                take[k] = true;
            }
            size_t k = 0;
            for (const json_t *m = body->child; m; m = m->next, k++)
                if (take[k]) sent_names[nt++] = m->key;
            bool attrs_in_body = false;
            for (k = 0; k < nm && !attrs_in_body; k++) attrs_in_body = names[k] != NULL;
            if (attrs_in_body && !nt) continue;               /* declares none of them */
        } else if (w->attr) {
            if (!covers(g, masks[r], w->attr) || (!proxied(g) && whole_taken)) continue;
            sent_names[nt++] = ld_compact(in->ctx, w->attr);
        } else if (!proxied(g) && whole_taken) continue;
        fwd_sent_t *s = &sent[ns++];
        s->reg_id = reg_id(g);
        s->attrs = nt ? sent_names : NULL;
        s->n_attrs = nt;
        which[ns - 1] = r;
        if (!(reg_ops(g) & op)) {
            if (!proxied(g)) {                                 /* inclusive: not for this operation */
                ns--;
                continue;
            }
            problem_set(&s->problem, PB_CONFLICT, "registration %s (%s) covers this entity but does not support "
                        "the operation", reg_id(g), reg_mode(g) == REG_EXCLUSIVE ? "exclusive" : "redirect");
            continue;
        }
        if (fwd_cooling(g)) {
            problem_set(&s->problem, PB_HTTP, "registration %s is in its cooldown after a failure", reg_id(g));
            s->problem.status = 503;
            continue;
        }
        /* the request */
        const char *jctx = reg_csource_info(g, "jsonldContext");
        if (jctx) {
            problem_t   pq = {0};
            const ld_context_t *x = ld_from_json(json_new_string(a, jctx), &pq);
            if (x) c->ctx = x;
        }
        sbuf_t u;
        sb_init(&u, a, 256);
        const char *ep = reg_endpoint(g);
        size_t      el = strlen(ep);
        while (el && ep[el - 1] == '/') el--;
        sb_add(&u, ep, el);
        sb_adds(&u, "/ngsi-ld/v1/");
        sb_adds(&u, w->path);
        char sep = '?';
        if (w->query && *w->query) {
            sb_printf(&u, "?%s", w->query);
            sep = '&';
        }
        if (reg_local_only(g)) sb_printf(&u, "%clocal=true", sep);
        c->url = u.p;
        c->method = w->method;
        if (w->body) {
            if (w->attr_body) {
                sbuf_t        sb;
                json_writer_t jw;
                sb_init(&sb, a, 256);
                jw_init(&jw, &sb);
                jw_object_begin(&jw);
                for (const json_t *m = w->body->child; m; m = m->next) {
                    if (!strcmp(m->key, "@context")) continue;
                    jw_key(&jw, m->key);
                    jw_value(&jw, m);
                }
                jw_object_end(&jw);
                c->post = sb.p;
            } else if (json_is_object(w->body)) c->post = payload(a, w->body, take, in, c->ctx);
        }
        if (!fwd_headers(in, c, g, jctx, c->post ? "application/json" : NULL)) {
            problem_set(&s->problem, PB_INTERNAL_ERROR, "out of memory");
            continue;
        }
        c->skipped = false;
    }
    fwd_run(calls, nr);
    int64_t now = cr_now_us();
    for (size_t k = 0; k < ns; k++) {
        fwd_sent_t *s = &sent[k];
        call_t     *c = &calls[which[k]];
        if (c->skipped) {
            out->failed++;
            continue;
        }
        s->ok = c->rc == CURLE_OK && c->status >= 200 && c->status < 300;
        if (!s->ok) {
            part_problem(c, a, &s->problem);
            out->failed++;
        }
        fwd_counted(c->reg, s->ok, now);
    }
    for (size_t r = 0; r < nr; r++)
        if (calls[r].hdrs) curl_slist_free_all(calls[r].hdrs);
    out->sent = sent;
    out->n_sent = ns;

    /* what is left for the local write */
    if (whole_taken) out->local_skip = true;
    else if (any_taken) {
        json_t *l = json_new(a, JSON_OBJECT), *tail = NULL;
        bool    left = false;
        size_t  k = 0;
        for (const json_t *m = body->child; m; m = m->next, k++) {
            if (taken[k]) continue;
            json_push(l, &tail, m->key, json_clone(a, m));
            left = left || names[k];
        }
        out->local = l;
        out->local_skip = !left;
    }
done:
    for (size_t r = 0; r < nr; r++) reg_unref(regs[r]);
    return ok;
}
