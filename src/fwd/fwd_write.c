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
        for (int k = PB_NONE + 1; k < PB_HTTP; k++)
            if (!strcmp(problem_type_uri((problem_kind_t)k), type->str)) kind = (problem_kind_t)k;
    if (kind == PB_HTTP && c->status == 404) kind = PB_RESOURCE_NOT_FOUND;
    if (kind != PB_HTTP && problem_status(&(problem_t){.kind = kind}) != c->status) kind = PB_HTTP;
    problem_set(p, kind, "the source of registration %s answered %ld%s%.400s", rid, c->status, d ? ": " : "",
                d ? d : "");
    p->status = (int)c->status;
}

/* Writes the payload for one source: the members of body and the
 * attributes in take (NULL: all), names compact in `from`, re-compacted in
 * `to` when the source is sent another @context (contextSourceInfo
 * jsonldContext); keep_ctx: its "@context" stays (a JSON-LD batch), else it
 * goes as Link. */
static void payload_write(json_writer_t *w, const json_t *body, const bool *take, const ld_context_t *from,
                          const ld_context_t *to, bool keep_ctx)
{
    jw_object_begin(w);
    size_t i = 0;
    for (const json_t *m = body->child; m; m = m->next, i++) {
        bool ctx_member = !strcmp(m->key, "@context");
        if (ctx_member && !keep_ctx) continue;
        bool member = is_member(m->key);
        if (!member && take && !take[i]) continue;
        const char *k = m->key;
        if (to != from && !member) k = ld_compact(to, ld_expand(from, m->key));
        jw_key(w, k);
        if (to != from && (!strcmp(m->key, "type") || !strcmp(m->key, "@type")) && json_is_string(m))
            jw_string(w, ld_compact(to, ld_expand(from, m->str)));
        else jw_value(w, m);
    }
    jw_object_end(w);
}

static char *payload(arena_t *a, const json_t *body, const bool *take, const ld_context_t *from,
                     const ld_context_t *to)
{
    sbuf_t        sb;
    json_writer_t w;
    sb_init(&sb, a, 512);
    jw_init(&w, &sb);
    payload_write(&w, body, take, from, to, false);
    return sb.p;
}

/* The type selection of an entity payload's type(s), for matching by type
 * (NULL: none, or not valid, which the operation reports). */
static const typesel_t *body_types(arena_t *a, const ld_context_t *ctx, const json_t *body)
{
    const json_t *t = json_get(body, "type");
    if (!t) t = json_get(body, "@type");
    sbuf_t sb;
    sb_init(&sb, a, 64);
    if (json_is_string(t)) sb_adds(&sb, t->str);
    else if (json_is_array(t))
        for (const json_t *x = t->child; x; x = x->next) {
            if (!json_is_string(x) || strpbrk(x->str, ",|;()")) return NULL;
            if (sb.len) sb_addc(&sb, ',');
            sb_adds(&sb, x->str);
        }
    if (!sb.len || strpbrk(sb.p, "|;()")) return NULL;
    problem_t q = {0};
    return typesel_parse(a, sb.p, ctx, &q);
}

/* ------------------------------------------------------------ the split of one entity */

/* One entity over its matching registrations: what each gets. */
typedef struct split {
    reg_t      **regs;
    uint64_t    *masks;
    size_t       nr;
    const json_t *body;       /* the entity or fragment split by attribute, or NULL */
    size_t       nm;          /* its members */
    const char **names;       /* per member: its expanded attribute name, NULL: not an attribute */
    bool         has_attrs;   /* some member is an attribute */
    bool        *taken;       /* per member: an exclusive or redirect registration takes it */
    bool         whole_taken; /* one takes the whole entity (an operation without attributes, or on attr) */
    bool       **take;        /* per registration, per member: sent to it */
    bool        *gets;        /* per registration: it gets a part */
} split_t;

/* Matches and splits; false only on a loop (508). s->nr 0: nothing matched. */
/* Whether a RegistrationInfo of r in mask names entities without an id
 * (by idPattern or type alone): matched by id only, the entity's type was
 * not compared. */
static bool vague(const reg_t *r, uint64_t mask)
{
    for (size_t i = 0; i < reg_info_count(r); i++) {
        const reg_info_t *in = reg_info_at(r, i);
        if (i < 64 && !(mask >> i & 1)) continue;
        for (size_t j = 0; j < in->n_entities; j++)
            if (!in->entities[j].id) return true;
    }
    return false;
}

/* Matches the entity id (of the type `type`, 4.17 text, or of the
 * payload's type, or of the local entity's: types_of) with the payload's
 * attributes, and splits the payload over the matching registrations.
 * The first match is by id alone (the cost of a write that nothing
 * matches: one registry lookup); the types are worked out only when a
 * registration without an id matched. */
static bool split_entity(const fwd_in_t *in, const ld_context_t *ctx, const char *id, const char *type,
                         const fwd_types_fn types_of, void *types_ud, const char *attr, const json_t *body, split_t *s,
                         problem_t *p)
{
    arena_t *a = in->arena;
    memset(s, 0, sizeof *s);
    s->body = json_is_object(body) ? body : NULL;
    /* first by id alone: a write nothing is registered for costs this lookup */
    reg_query_t q = {.ids = &id, .n_ids = 1, .modes = 1u << REG_INCLUSIVE | 1u << REG_EXCLUSIVE | 1u << REG_REDIRECT};
    fwd_skip_sources(in, &q);
    s->regs = reg_match(in->tenant, &q, cr_now_us(), a, &s->nr, &s->masks);
    if (!s->nr) return true;

    /* then narrowed by the payload's attributes and, for a registration
     * without an id (by type or idPattern), by the entity's types */
    bool narrow = false;
    for (size_t r = 0; r < s->nr && !narrow; r++) narrow = vague(s->regs[r], s->masks[r]);
    for (size_t r = 0; r < s->nr; r++) reg_unref(s->regs[r]);
    for (const json_t *m = s->body ? s->body->child : NULL; m; m = m->next) s->nm++;
    s->names = arena_alloc(a, (s->nm + 1) * sizeof *s->names);
    const char **attrs = arena_alloc(a, (s->nm + 2) * sizeof *attrs);
    size_t       na = 0, i = 0;
    if (attr) attrs[na++] = attr;
    for (const json_t *m = s->body ? s->body->child : NULL; m; m = m->next, i++) {
        s->names[i] = is_member(m->key) ? NULL : ld_expand(ctx, m->key);
        if (s->names[i]) attrs[na++] = s->names[i];
    }
    s->has_attrs = na > (attr ? 1u : 0u);
    q.attrs = attrs;
    q.n_attrs = na;
    if (narrow) {
        problem_t tq = {0};
        if (type) q.types = typesel_parse(a, type, ctx, &tq);
        if (!q.types && s->body) q.types = body_types(a, ctx, s->body);
        if (!q.types && types_of) q.types = types_of(types_ud);
    }
    s->regs = reg_match(in->tenant, &q, cr_now_us(), a, &s->nr, &s->masks);
    if (!s->nr) return true;
    if (fwd_via_loop(in->via)) {           /* a write that came back: 508 (doc/api.md, loops) */
        bool ok = fwd_loop_check(s->regs, s->nr, true, p);
        for (size_t r = 0; r < s->nr; r++) reg_unref(s->regs[r]);
        s->nr = 0;
        return ok;
    }
    /* what the exclusive and redirect registrations take from the local write */
    s->taken = arena_calloc(a, s->nm + 1);
    for (size_t r = 0; r < s->nr; r++) {
        if (!proxied(s->regs[r])) continue;
        if (!s->has_attrs) {
            if (covers(s->regs[r], s->masks[r], attr)) s->whole_taken = true;
            continue;
        }
        for (size_t k = 0; k < s->nm; k++)
            if (s->names[k] && covers(s->regs[r], s->masks[r], s->names[k])) s->taken[k] = true;
    }
    /* what each gets: its attributes (an inclusive one what no proxied one took) */
    s->take = arena_alloc(a, s->nr * sizeof *s->take);
    s->gets = arena_calloc(a, s->nr + 1);
    for (size_t r = 0; r < s->nr; r++) {
        reg_t *g = s->regs[r];
        s->take[r] = arena_calloc(a, s->nm + 1);
        if (s->has_attrs) {
            for (size_t k = 0; k < s->nm; k++)
                if (s->names[k] && covers(g, s->masks[r], s->names[k]) && (proxied(g) || !s->taken[k]))
                    s->take[r][k] = s->gets[r] = true;
        } else s->gets[r] = (!attr || covers(g, s->masks[r], attr)) && (proxied(g) || !s->whole_taken);
    }
    return true;
}

static void split_release(split_t *s)
{
    for (size_t r = 0; r < s->nr; r++) reg_unref(s->regs[r]);
}

/* The payload left for the local write, or NULL when nothing is left. */
static json_t *split_local(arena_t *a, const split_t *s, const json_t *body)
{
    if (s->whole_taken) return NULL;
    bool any = false;
    for (size_t k = 0; k < s->nm && !any; k++) any = s->taken[k];
    if (!any) return (json_t *)body;
    json_t *l = json_new(a, JSON_OBJECT), *tail = NULL;
    bool    left = false;
    size_t  k = 0;
    for (const json_t *m = s->body->child; m; m = m->next, k++) {
        if (s->taken[k]) continue;
        json_push(l, &tail, m->key, json_clone(a, m));
        left = left || s->names[k];
    }
    return left ? l : NULL;
}

/* The attribute names (as in the payload) registration r gets, or NULL (the whole entity). */
static const char **split_names(arena_t *a, const split_t *s, size_t r, const char *attr, const ld_context_t *ctx,
                                size_t *n)
{
    const char **v = arena_alloc(a, (s->nm + 2) * sizeof *v);
    *n = 0;
    size_t k = 0;
    for (const json_t *m = s->body ? s->body->child : NULL; m; m = m->next, k++)
        if (s->take[r][k]) v[(*n)++] = m->key;
    if (!*n && attr) v[(*n)++] = ld_compact(ctx, attr);
    return *n ? v : NULL;
}

/* Why r does not get its part, or NULL: r supports op and is not cooling down. */
static bool part_refused(reg_t *r, uint64_t op, problem_t *p)
{
    if (!(reg_ops(r) & op)) {
        problem_set(p, PB_CONFLICT, "registration %s (%s) covers this entity but does not support the operation",
                    reg_id(r), reg_mode(r) == REG_EXCLUSIVE ? "exclusive" : "redirect");
        return true;
    }
    if (fwd_cooling(r)) {
        problem_set(p, PB_HTTP, "registration %s is in its cooldown after a failure", reg_id(r));
        p->status = 503;
        return true;
    }
    return false;
}

/* The URL of a request to r's source: endpoint/ngsi-ld/v1/path?query (and local=true). */
char *fwd_part_url(arena_t *a, const reg_t *r, const char *path, const char *query)
{
    sbuf_t u;
    sb_init(&u, a, 256);
    fwd_endpoint(&u, r);
    sb_adds(&u, path);
    char sep = '?';
    if (query && *query) {
        sb_printf(&u, "?%s", query);
        sep = '&';
    }
    if (reg_local_only(r)) sb_printf(&u, "%clocal=true", sep);
    return u.p;
}

/* The @context a source is sent (contextSourceInfo jsonldContext, else the request's). */
const ld_context_t *fwd_part_ctx(arena_t *a, const reg_t *r, const ld_context_t *ctx, const char **jctx)
{
    *jctx = reg_csource_info(r, "jsonldContext");
    if (!*jctx) return ctx;
    problem_t           pq = {0};
    const ld_context_t *x = ld_from_json(json_new_string(a, *jctx), &pq);
    return x ? x : ctx;
}

/* Sends calls[0..nc) and records the outcome of each part (sent[k] is
 * calls[which[k]]; a part whose call was not built failed already):
 * the number of failed parts. */
static size_t parts_run(arena_t *a, call_t *calls, size_t nc, fwd_sent_t *sent, const size_t *which, size_t ns)
{
    size_t failed = 0;
    fwd_run(calls, nc);
    int64_t now = cr_now_us();
    for (size_t k = 0; k < ns; k++) {
        fwd_sent_t *x = &sent[k];
        call_t     *c = &calls[which[k]];
        if (c->skipped) {
            failed++;
            continue;
        }
        x->ok = c->rc == CURLE_OK && c->status >= 200 && c->status < 300;
        if (!x->ok) {
            part_problem(c, a, &x->problem);
            failed++;
        } else if (c->status == 207) {      /* a partial success at the source: its result goes along */
            char err[64];
            x->partial = true;
            x->answer = c->body.len ? json_parse_copy(a, c->body.p, c->body.len, &(json_limits_t){0}, err, sizeof err)
                                    : NULL;
            if (x->answer && !json_is_object(x->answer)) x->answer = NULL;
        }
        x->status = c->status;
        fwd_counted(c->reg, x->ok, now);
    }
    for (size_t r = 0; r < nc; r++)
        if (calls[r].hdrs) curl_slist_free_all(calls[r].hdrs);
    return failed;
}

/* ------------------------------------------------------------ one entity */

bool fwd_write(const fwd_in_t *in, const fwd_write_t *w, fwd_wout_t *out, problem_t *p)
{
    arena_t *a = in->arena;
    split_t  s;
    memset(out, 0, sizeof *out);
    out->local = (json_t *)w->body;
    if (!split_entity(in, in->ctx, w->id, w->type, w->types_of, w->types_ud, w->attr, w->attr_body ? NULL : w->body,
                      &s, p))
        return false;
    if (!s.nr) return true;
    if (w->check && !w->check(w->types_ud, p)) {      /* 5.5.4: nothing is forwarded of an invalid payload */
        split_release(&s);
        return false;
    }

    /* the path and query string of the parts */
    sbuf_t path;
    sb_init(&path, a, 128);
    sb_adds(&path, w->root ? w->root : "entities");
    if (w->op != REG_OP_CREATE_ENTITY && w->op != REG_OP_UPSERT_TEMPORAL) {
        sb_addc(&path, '/');
        fwd_url_encode(&path, w->id);
    }
    if (w->tail) {
        sb_addc(&path, '/');
        sb_adds(&path, w->tail);
    }
    if (w->tail_attr) {
        sb_addc(&path, '/');
        fwd_url_encode(&path, w->tail_attr);
    }
    if (w->tail_instance) {
        sb_addc(&path, '/');
        fwd_url_encode(&path, w->tail_instance);
    }
    const char *query = in->query ? in->query(in->header_ud) : NULL;

    call_t     *calls = arena_calloc(a, s.nr * sizeof *calls);
    fwd_sent_t *sent = arena_calloc(a, s.nr * sizeof *sent);
    size_t     *which = arena_alloc(a, (s.nr + 1) * sizeof *which);   /* sent[k] is calls[which[k]] */
    size_t      ns = 0;
    for (size_t r = 0; r < s.nr; r++) {
        reg_t  *g = s.regs[r];
        call_t *c = &calls[r];
        c->reg = g;
        c->skipped = true;
        if (!s.gets[r]) continue;
        if (!(reg_ops(g) & REG_OP_BIT(w->op)) && !proxied(g)) continue;   /* inclusive: not for this operation */
        fwd_sent_t *x = &sent[ns];
        which[ns++] = r;
        x->reg_id = reg_id(g);
        x->attrs = split_names(a, &s, r, w->attr, in->ctx, &x->n_attrs);
        if (part_refused(g, REG_OP_BIT(w->op), &x->problem)) continue;
        const char *jctx;
        c->ctx = fwd_part_ctx(a, g, in->ctx, &jctx);
        c->url = fwd_part_url(a, g, path.p, query);
        c->method = w->method;
        if (w->body && w->attr_body) c->post = payload(a, w->body, NULL, in->ctx, in->ctx);
        else if (w->body) c->post = payload(a, w->body, s.take[r], in->ctx, c->ctx);
        if (!fwd_headers(in, c, g, jctx, c->post ? "application/json" : NULL)) {
            problem_set(&x->problem, PB_INTERNAL_ERROR, "out of memory");
            continue;
        }
        c->skipped = false;
    }
    out->failed = parts_run(a, calls, s.nr, sent, which, ns);
    out->sent = sent;
    out->n_sent = ns;
    out->local = w->attr_body ? (s.whole_taken ? NULL : (json_t *)w->body) : split_local(a, &s, w->body);
    out->local_skip = w->body ? !out->local : s.whole_taken;
    split_release(&s);
    return true;
}

/* ------------------------------------------------------------ batches (5.6.7.4 ...)
 *
 * Each entity of the batch is split as above; then, per registration, the
 * parts it gets are sent as ONE batch request when it supports the batch
 * operation, else one request per entity when it supports the operation of
 * one entity (5.6.7.4: "Otherwise, if the Create Entity operation ... is
 * supported"), else, for an exclusive or redirect one, each part is a
 * Conflict. */

/* How a registration gets its parts of a batch: the batch operation, or
 * one request per entity (the fallbacks of 5.6.7.4-5.6.10.4, 5.6.20.4). */
typedef enum { R_NONE, R_BATCH, R_CREATE, R_REPLACE, R_UPDATE, R_APPEND, R_DELETE, R_MERGE } route_t;

static route_t batch_route(const fwd_batch_t *b, uint64_t ops)
{
#define HAS(o) (ops & REG_OP_BIT(o))
    if (HAS(b->op)) return R_BATCH;
    switch (b->op) {
    case REG_OP_CREATE_BATCH: return HAS(REG_OP_CREATE_ENTITY) ? R_CREATE : R_NONE;
    case REG_OP_UPSERT_BATCH:            /* 5.6.8.4: create (then replace or update what exists), or those */
        if (HAS(REG_OP_CREATE_ENTITY)) return R_CREATE;
        if (!b->update && HAS(REG_OP_REPLACE_ENTITY)) return R_REPLACE;
        return b->update && HAS(REG_OP_UPDATE_ATTRS) ? R_UPDATE : R_NONE;
    case REG_OP_UPDATE_BATCH:            /* 5.6.9.4: update attributes, or append without overwriting */
        if (!b->no_overwrite) return HAS(REG_OP_UPDATE_ATTRS) ? R_UPDATE : R_NONE;
        return HAS(REG_OP_APPEND_ATTRS) ? R_APPEND : R_NONE;
    case REG_OP_DELETE_BATCH: return HAS(REG_OP_DELETE_ENTITY) ? R_DELETE : R_NONE;
    case REG_OP_MERGE_BATCH: return HAS(REG_OP_MERGE_ENTITY) ? R_MERGE : R_NONE;
    default: return R_NONE;
    }
}

/* 5.6.8.4: an upsert's Create Entity met AlreadyExists: then this, or R_NONE. */
static route_t upsert_again(const fwd_batch_t *b, uint64_t ops)
{
    if (!b->update && HAS(REG_OP_REPLACE_ENTITY)) return R_REPLACE;
    return b->update && HAS(REG_OP_UPDATE_ATTRS) ? R_UPDATE : R_NONE;
#undef HAS
}

typedef struct bcall {
    size_t  reg;        /* index in the distinct registrations */
    route_t route;
    size_t *members;    /* the members this request carries (one unless R_BATCH) */
    size_t  n;
    size_t *part;       /* per carried member: its index in out->sent[member] */
    bool    unsupported;/* an upsert's create met AlreadyExists, and nothing else is supported */
} bcall_t;

/* The context a batch is forwarded in: what building one request needs. */
typedef struct bctx {
    const fwd_in_t    *in;
    const fwd_batch_t *b;
    split_t           *sp;
    size_t           **slot;
    const char       **ids;
    reg_t            **regs;
    const char        *query;
} bctx_t;

/* Builds the request of x with route (false: out of memory). */
static bool bcall_build(const bctx_t *bx, const bcall_t *x, route_t route, call_t *c)
{
    arena_t          *a = bx->in->arena;
    const fwd_batch_t *b = bx->b;
    reg_t            *g = bx->regs[x->reg];
    const char       *jctx;
    size_t            i0 = x->members[0];
    bool              del = b->op == REG_OP_DELETE_BATCH;
    memset(c, 0, sizeof *c);
    c->reg = g;
    c->ctx = fwd_part_ctx(a, g, b->ctxs[i0], &jctx);
    bool keep_ctx = !del && json_get(b->entities[i0], "@context") && !reg_csource_info(g, "jsonldContext");
    sbuf_t        sb;
    json_writer_t w;
    sb_init(&sb, a, 1024);
    jw_init(&w, &sb);
    if (route == R_BATCH) {
        c->url = fwd_part_url(a, g, b->path, bx->query);
        c->method = "POST";
        jw_array_begin(&w);
        for (size_t j = 0; j < x->n; j++) {
            size_t i = x->members[j], r;
            for (r = 0; r < bx->sp[i].nr && bx->slot[i][r] != x->reg; r++) {}
            if (del) jw_string(&w, bx->ids[i]);
            else payload_write(&w, b->entities[i], bx->sp[i].take[r], b->ctxs[i], c->ctx, keep_ctx);
        }
        jw_array_end(&w);
    } else {
        static const char *const method[] = {[R_CREATE] = "POST", [R_REPLACE] = "PUT", [R_UPDATE] = "PATCH",
                                             [R_APPEND] = "POST", [R_DELETE] = "DELETE", [R_MERGE] = "PATCH"};
        size_t i = i0, r;
        for (r = 0; r < bx->sp[i].nr && bx->slot[i][r] != x->reg; r++) {}
        sbuf_t path;
        sb_init(&path, a, 128);
        sb_adds(&path, "entities");
        if (route != R_CREATE) {
            sb_addc(&path, '/');
            fwd_url_encode(&path, bx->ids[i]);
        }
        if (route == R_UPDATE || route == R_APPEND) sb_adds(&path, "/attrs");
        c->url = fwd_part_url(a, g, path.p, route == R_APPEND ? "options=noOverwrite" : NULL);
        c->method = method[route];
        if (!del) payload_write(&w, b->entities[i], bx->sp[i].take[r], b->ctxs[i], c->ctx, keep_ctx);
    }
    if (sb.len) c->post = sb.p;
    if (fwd_headers(bx->in, c, g, jctx, !c->post ? NULL : keep_ctx ? "application/ld+json" : "application/json"))
        return true;
    c->skipped = true;
    return false;
}

/* The outcome of a batch answer for one member: its error in a 207, if any. */
static const json_t *batch_error_of(const json_t *answer, const char *id)
{
    const json_t *errs = json_get(answer, "errors");
    for (const json_t *e = json_is_array(errs) ? errs->child : NULL; e; e = e->next) {
        const json_t *eid = json_get(e, "entityId");
        if (json_is_string(eid) && !strcmp(eid->str, id)) return e;
    }
    return NULL;
}

bool fwd_batch(const fwd_in_t *in, const fwd_batch_t *b, fwd_bout_t *out, problem_t *p)
{
    arena_t *a = in->arena;
    memset(out, 0, sizeof *out);
    split_t     *sp = arena_calloc(a, (b->n + 1) * sizeof *sp);
    const char **ids = arena_calloc(a, (b->n + 1) * sizeof *ids);
    bool         del = b->op == REG_OP_DELETE_BATCH, ok = true;
    size_t       matched = 0;
    for (size_t i = 0; i < b->n; i++) {
        const json_t *e = b->entities[i];
        const json_t *jid = del ? e : json_get(e, "id");
        if (!b->ctxs[i] || !json_is_string(jid) || (!del && !json_is_object(e))) continue;
        ids[i] = jid->str;
        if (!split_entity(in, b->ctxs[i], ids[i], NULL, NULL, NULL, NULL, del ? NULL : e, &sp[i], p)) {
            ok = false;
            break;
        }
        if (sp[i].nr) matched++;
    }
    if (!ok || !matched) goto done;
    const char *query = in->query ? in->query(in->header_ud) : NULL;

    /* the distinct registrations, in first-seen order */
    size_t  cap = 0;
    for (size_t i = 0; i < b->n; i++) cap += sp[i].nr;
    reg_t **regs = arena_alloc(a, (cap + 1) * sizeof *regs);
    size_t  nreg = 0;
    size_t **slot = arena_alloc(a, (b->n + 1) * sizeof *slot);     /* member i, its split's r -> distinct index */
    for (size_t i = 0; i < b->n; i++) {
        slot[i] = arena_alloc(a, (sp[i].nr + 1) * sizeof **slot);
        for (size_t r = 0; r < sp[i].nr; r++) {
            size_t d;
            for (d = 0; d < nreg && regs[d] != sp[i].regs[r]; d++) {}
            if (d == nreg) regs[nreg++] = sp[i].regs[r];
            slot[i][r] = d;
        }
    }
    out->local = arena_calloc(a, (b->n + 1) * sizeof *out->local);
    out->sent = arena_calloc(a, (b->n + 1) * sizeof *out->sent);
    out->n_sent = arena_calloc(a, (b->n + 1) * sizeof *out->n_sent);
    for (size_t i = 0; i < b->n; i++) {
        out->sent[i] = arena_calloc(a, (sp[i].nr + 1) * sizeof **out->sent);
        out->local[i] = (json_t *)b->entities[i];
        if (sp[i].nr) out->local[i] = del ? (sp[i].whole_taken ? NULL : (json_t *)b->entities[i])
                                          : split_local(a, &sp[i], b->entities[i]);
    }

    /* the requests: per registration one batch, or one per member */
    bcall_t *bc = arena_calloc(a, (cap + 1) * sizeof *bc);
    call_t  *calls = arena_calloc(a, (cap + 1) * sizeof *calls);
    size_t   nc = 0;
    for (size_t d = 0; d < nreg; d++) {
        reg_t  *g = regs[d];
        route_t route = batch_route(b, reg_ops(g));
        if (route == R_NONE && !proxied(g)) continue;         /* inclusive: not for this operation */
        bcall_t *cur = NULL;
        for (size_t i = 0; i < b->n; i++) {
            size_t r;
            for (r = 0; r < sp[i].nr && slot[i][r] != d; r++) {}
            if (r == sp[i].nr || !sp[i].gets[r]) continue;
            fwd_sent_t *x = &out->sent[i][out->n_sent[i]++];
            x->reg_id = reg_id(g);
            x->attrs = split_names(a, &sp[i], r, NULL, b->ctxs[i], &x->n_attrs);
            if (route == R_NONE) {
                problem_set(&x->problem, PB_CONFLICT, "registration %s (%s) covers this entity but does not support "
                            "the operation", reg_id(g), reg_mode(g) == REG_EXCLUSIVE ? "exclusive" : "redirect");
                continue;
            }
            if (fwd_cooling(g)) {
                problem_set(&x->problem, PB_HTTP, "registration %s is in its cooldown after a failure", reg_id(g));
                x->problem.status = 503;
                continue;
            }
            if (!cur || route != R_BATCH) {
                cur = &bc[nc++];
                cur->reg = d;
                cur->route = route;
                cur->members = arena_alloc(a, (b->n + 1) * sizeof *cur->members);
                cur->part = arena_alloc(a, (b->n + 1) * sizeof *cur->part);
            }
            cur->members[cur->n] = i;
            cur->part[cur->n++] = out->n_sent[i] - 1;
        }
    }
    bctx_t bx = {.in = in, .b = b, .sp = sp, .slot = slot, .ids = ids, .regs = regs, .query = query};
    for (size_t k = 0; k < nc; k++)
        if (!bcall_build(&bx, &bc[k], bc[k].route, &calls[k]))
            for (size_t j = 0; j < bc[k].n; j++)
                problem_set(&out->sent[bc[k].members[j]][bc[k].part[j]].problem, PB_INTERNAL_ERROR, "out of memory");
    fwd_run(calls, nc);

    /* 5.6.8.4: an upsert created one by one replaces or updates what already existed */
    call_t *again = arena_calloc(a, (nc + 1) * sizeof *again);
    size_t *from = arena_alloc(a, (nc + 1) * sizeof *from), na = 0;
    for (size_t k = 0; k < nc && b->op == REG_OP_UPSERT_BATCH; k++) {
        if (bc[k].route != R_CREATE || calls[k].skipped || calls[k].rc != CURLE_OK || calls[k].status != 409) continue;
        route_t r2 = upsert_again(b, reg_ops(regs[bc[k].reg]));
        if (r2 == R_NONE) bc[k].unsupported = true;
        else if (bcall_build(&bx, &bc[k], r2, &again[na])) from[na++] = k;
        else if (again[na].hdrs) curl_slist_free_all(again[na].hdrs);
    }
    fwd_run(again, na);
    for (size_t j = 0; j < na; j++) {
        fwd_counted(calls[from[j]].reg, true, cr_now_us());     /* the create was answered */
        if (calls[from[j]].hdrs) curl_slist_free_all(calls[from[j]].hdrs);
        calls[from[j]] = again[j];
    }
    int64_t now = cr_now_us();
    for (size_t k = 0; k < nc; k++) {
        bcall_t *x = &bc[k];
        call_t  *c = &calls[k];
        if (c->hdrs) curl_slist_free_all(c->hdrs);
        if (c->skipped) continue;
        bool    sent_ok = c->rc == CURLE_OK && c->status >= 200 && c->status < 300;
        json_t *answer = NULL;
        if (sent_ok && c->status == 207) {
            char err[64];
            answer = json_parse_copy(a, c->body.p ? c->body.p : "", c->body.len, &(json_limits_t){0}, err, sizeof err);
        }
        problem_t whole = {0};
        if (x->unsupported) {
            sent_ok = false;
            problem_set(&whole, PB_OPERATION_NOT_SUPPORTED, "the entity exists at the source of registration %s, "
                        "which supports neither replaceEntity nor updateAttrs for this upsert (5.6.8.4)", reg_id(c->reg));
        } else if (!sent_ok) part_problem(c, a, &whole);
        for (size_t j = 0; j < x->n; j++) {
            size_t      i = x->members[j];
            fwd_sent_t *s = &out->sent[i][x->part[j]];
            const json_t *e = answer ? batch_error_of(answer, ids[i]) : NULL;
            s->ok = sent_ok && !e;
            if (!sent_ok) s->problem = whole;
            else if (e) {
                const json_t *pd = json_get(e, "error"), *st = json_get(pd, "status"), *dt = json_get(pd, "detail");
                problem_set(&s->problem, PB_HTTP, "the source of registration %s: %.400s", reg_id(c->reg),
                            json_is_string(dt) ? dt->str : "failed");
                s->problem.status = json_is_number(st) ? (int)json_number(st) : 500;
                if (s->problem.status == 404) s->problem.kind = PB_RESOURCE_NOT_FOUND;
                else if (s->problem.status == 409) s->problem.kind = PB_ALREADY_EXISTS;
            }
        }
        fwd_counted(c->reg, sent_ok, now);
    }
    for (size_t i = 0; i < b->n; i++) out->forwarded += out->n_sent[i] ? 1 : 0;
done:
    for (size_t i = 0; i < b->n; i++) split_release(&sp[i]);
    return ok;
}

/* ------------------------------------------------------------ purge (5.6.21.4) */

bool fwd_purge(const fwd_in_t *in, const reg_query_t *match, fwd_wout_t *out, problem_t *p)
{
    arena_t    *a = in->arena;
    reg_query_t q = *match;
    size_t      nr;
    uint64_t   *masks;
    memset(out, 0, sizeof *out);
    q.ops = 0;
    q.modes = 1u << REG_INCLUSIVE | 1u << REG_EXCLUSIVE | 1u << REG_REDIRECT;
    fwd_skip_sources(in, &q);
    reg_t **regs = reg_match(in->tenant, &q, cr_now_us(), a, &nr, &masks);
    if (!nr) return true;
    bool ok = true;
    if (fwd_via_loop(in->via)) {
        ok = fwd_loop_check(regs, nr, true, p);
        goto done;
    }
    call_t     *calls = arena_calloc(a, nr * sizeof *calls);
    fwd_sent_t *sent = arena_calloc(a, nr * sizeof *sent);
    size_t     *which = arena_alloc(a, (nr + 1) * sizeof *which);
    size_t      ns = 0;
    const char *query = in->query ? in->query(in->header_ud) : NULL;
    for (size_t r = 0; r < nr; r++) {
        reg_t  *g = regs[r];
        call_t *c = &calls[r];
        c->reg = g;
        c->skipped = true;
        if (!(reg_ops(g) & REG_OP_BIT(REG_OP_PURGE_ENTITY)) && !proxied(g)) continue;
        fwd_sent_t *x = &sent[ns];
        which[ns++] = r;
        x->reg_id = reg_id(g);
        if (part_refused(g, REG_OP_BIT(REG_OP_PURGE_ENTITY), &x->problem)) continue;
        const char *jctx;
        c->ctx = fwd_part_ctx(a, g, in->ctx, &jctx);
        c->url = fwd_part_url(a, g, "entities", query);
        c->method = "DELETE";
        if (!fwd_headers(in, c, g, jctx, NULL)) {
            problem_set(&x->problem, PB_INTERNAL_ERROR, "out of memory");
            continue;
        }
        c->skipped = false;
    }
    out->failed = parts_run(a, calls, nr, sent, which, ns);
    out->sent = sent;
    out->n_sent = ns;
done:
    for (size_t r = 0; r < nr; r++) reg_unref(regs[r]);
    return ok;
}
