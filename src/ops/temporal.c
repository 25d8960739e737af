/*
 * temporal.c - the operations of the temporal API (5.6.11-5.6.16, 5.7.3,
 * 5.7.4) over the history (history.h) and the store.
 *
 * One entity, two views. A temporal write (create, add attributes) is a
 * body whose attributes are arrays of instances. The newest instance of
 * each (attribute, datasetId), by observedAt, that is not older than what
 * the entity holds now, is written through the store like any core write
 * (create or append): the entity exists in the core API, and the history
 * hook records those instances. The other instances are appended to the
 * history directly. The store write comes first: when it fails nothing is
 * written.
 *
 * Reads go to the history only: the temporal evolution of an entity is what
 * the history holds of it (also after the entity was deleted in the core
 * API). A temporal delete (5.6.16) removes the entity as a whole: its core
 * version and its history.
 */
#include "ops.h"

#include <string.h>

bool ops_admit(const ops_req_t *rq, size_t n, problem_t *p)
{
    return !history_default || history_reserve(history_default, rq->tenant, n, p);
}

bool ops_admitted(const ops_req_t *rq, size_t n, bool ok)
{
    if (history_default) {
        /* the history as durable as the write (--dbSync); a held write's
         * is synced by the store's syncer after its hooks (store_add_flush) */
        if (ok && !store_hold_pending())
            history_sync(history_default);
        history_unreserve(history_default, rq->tenant, n);
    }
    return ok;
}

static bool no_history(problem_t *p)
{
    return problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                       "the temporal API needs attribute history: start the broker with --history corDB");
}

/* entity members of a temporal body that are not attributes */
static bool entity_member(const char *k)
{
    static const char *m[] = {"id", "@id", "type", "@type", "scope", "@context", "createdAt",
                              "modifiedAt", "deletedAt", "expiresAt"};
    for (size_t i = 0; i < CR_ARRAY_LEN(m); i++)
        if (!strcmp(k, m[i]))
            return true;
    return false;
}

typedef struct tbody {
    cr_entity_t     *skel;       /* id, types, scope */
    hist_instance_t *inst;       /* every instance, in body order */
    size_t           n;
    bool            *to_core;    /* inst[i] is written through the store */
} tbody_t;

/* Parses a temporal body: skel from its entity members (create: id and type
 * required), then every instance of every attribute. */
static bool tbody_parse(const ops_req_t *rq, const json_t *body, bool create, int64_t now, tbody_t *tb,
                        problem_t *p)
{
    arena_t *a = rq->arena;

    if (!json_is_object(body))
        return problem_set(p, PB_BAD_REQUEST_DATA, "the body must be a JSON object");
    json_t *sk = json_new(a, JSON_OBJECT);
    size_t  cap = 0;
    json_foreach(m, body) {
        if (entity_member(m->key)) {
            if (strcmp(m->key, "createdAt") && strcmp(m->key, "modifiedAt") && strcmp(m->key, "deletedAt")) {
                json_t *c = arena_alloc(a, sizeof *c);
                *c = *m;
                c->next = NULL;
                json_add(sk, m->key, c);
            }
        } else
            cap += json_is_array(m) ? m->len : 1;
    }
    tb->skel = entity_parse(a, sk, rq->ctx, create ? EP_CREATE : EP_FRAGMENT, now, p);
    if (!tb->skel)
        return false;
    tb->inst    = arena_calloc(a, (cap + 1) * sizeof *tb->inst);
    tb->to_core = arena_calloc(a, cap + 1);
    tb->n       = 0;
    json_foreach(m, body) {
        if (entity_member(m->key))
            continue;
        if (!ops_check_attr_name(m->key, true, p))
            return false;
        const char *name = ld_expand(rq->ctx, m->key);
        if (json_is_array(m) && !m->len)
            return problem_set(p, PB_BAD_REQUEST_DATA, "attribute '%s' has no instance", m->key);
        const json_t *el = json_is_array(m) ? m->child : m;
        for (; el; el = json_is_array(m) ? el->next : NULL) {
            hist_instance_t *in = &tb->inst[tb->n];
            if (!json_is_object(el))
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "each instance of attribute '%s' must be an object (4.5.7)", m->key);
            if (!attr_parse(a, name, el, rq->ctx, 0, now, &in->attr, p))
                return false;
            in->attr.name        = name;
            in->attr.created_at  = now;
            in->attr.modified_at = now;
            in->deleted_at       = CR_NO_TIME;
            tb->n++;
        }
    }
    return true;
}

static bool same_ds(const char *x, const char *y)
{
    return x == y || (x && y && !strcmp(x, y));
}

/* Marks, per (name, datasetId), the newest instance (by observedAt; the
 * last one given when none has it) as going to the core API, unless cur
 * (the entity now, or NULL) holds a newer one. Returns how many. */
static size_t pick_core(tbody_t *tb, const cr_entity_t *cur)
{
    size_t n = 0;
    for (size_t i = 0; i < tb->n; i++) {
        const cr_attr_t *a    = &tb->inst[i].attr;
        bool             seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = tb->inst[j].attr.name == a->name && same_ds(tb->inst[j].attr.dataset_id, a->dataset_id);
        if (seen)
            continue;
        size_t best = i;
        for (size_t j = i + 1; j < tb->n; j++) {
            const cr_attr_t *b = &tb->inst[j].attr;
            if (b->name == a->name && same_ds(b->dataset_id, a->dataset_id) &&
                b->observed_at >= tb->inst[best].attr.observed_at)
                best = j;
        }
        const cr_attr_t *now = cur ? entity_attr(cur, a->name, a->dataset_id) : NULL;
        if (now && now->observed_at != CR_NO_TIME && tb->inst[best].attr.observed_at < now->observed_at)
            continue;                    /* the entity holds a newer value: history only */
        tb->to_core[best] = true;
        n++;
    }
    return n;
}

/* The draft of what goes to the core API. */
static cr_entity_t *core_draft(const ops_req_t *rq, const tbody_t *tb, size_t n_core, const char *id)
{
    cr_entity_t *d = arena_alloc(rq->arena, sizeof *d);
    *d       = *tb->skel;
    d->id    = id;
    d->attrs = arena_alloc(rq->arena, (n_core + 1) * sizeof *d->attrs);
    d->n_attrs = 0;
    for (size_t i = 0; i < tb->n; i++)
        if (tb->to_core[i])
            d->attrs[d->n_attrs++] = tb->inst[i].attr;
    return d;
}

/* Every instance of the body, upserted into the history (by observedAt,
 * hist_write_t.upsert): those the store wrote were just recorded by the
 * hook at that observedAt, so they replace themselves, and an instance
 * given again replaces the one at its time instead of doubling it. The
 * instances with no observedAt that went to the store are not given twice. */
static bool append_rest(const ops_req_t *rq, const tbody_t *tb, const char *id, const char *const *types,
                        size_t n_types, int64_t now, problem_t *p)
{
    hist_instance_t *in = arena_alloc(rq->arena, (tb->n + 1) * sizeof *in);
    size_t           n  = 0;
    for (size_t i = 0; i < tb->n; i++)
        if (!tb->to_core[i] || tb->inst[i].attr.observed_at != CR_NO_TIME)
            in[n++] = tb->inst[i];
    if (!n)
        return true;
    hist_write_t w = {
        .id = id, .types = types, .n_types = n_types, .at = now, .upsert = true, .inst = in, .n_inst = n,
    };
    return history_append(history_default, rq->tenant, &w, 1, p);
}

bool ops_temporal_create(const ops_req_t *rq, const json_t *body, bool *created, const char **id,
                         problem_t *p)
{
    tbody_t tb  = {0};
    int64_t now = cr_now_us();

    if (!history_default)
        return no_history(p);
    if (!tbody_parse(rq, body, true, now, &tb, p))
        return false;
    *id = tb.skel->id;
    if (!ops_admit(rq, 2, p))                   /* the store's write and the history's */
        return false;
    problem_t    ignore = {0};
    cr_entity_t *cur    = store_get(rq->store, rq->tenant, tb.skel->id, &ignore);
    bool         known  = cur || history_entity_info(history_default, rq->tenant, tb.skel->id, rq->arena,
                                                     NULL, NULL);
    size_t       n_core = pick_core(&tb, cur);
    bool         ok;
    if (!cur) {
        ok = store_create(rq->store, rq->tenant, core_draft(rq, &tb, n_core, tb.skel->id), p);
    } else {
        op_args_t   args = {0};
        op_result_t res  = {0};
        ok = !n_core || store_modify(rq->store, rq->tenant, cur->id, OP_APPEND_ATTRS,
                                     core_draft(rq, &tb, n_core, cur->id), &args, &res, rq->arena, p);
        entity_unref(cur);
    }
    if (!ok)
        return ops_admitted(rq, 2, false);
    *created = !known;
    return ops_admitted(rq, 2, append_rest(rq, &tb, tb.skel->id, (const char *const *)tb.skel->types,
                                           tb.skel->n_types, now, p));
}

static bool attrs_append(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p)
{
    tbody_t            tb  = {0};
    int64_t            now = cr_now_us();
    const char *const *types = NULL;
    size_t             n_types = 0;

    if (!ops_check_id(id, p) || !tbody_parse(rq, body, false, now, &tb, p))
        return false;
    if (tb.skel->id && strcmp(tb.skel->id, id))
        return problem_set(p, PB_BAD_REQUEST_DATA, "the body's id is not the entity's");
    problem_t    ignore = {0};
    cr_entity_t *cur    = store_get(rq->store, rq->tenant, id, &ignore);
    if (!cur && !history_entity_info(history_default, rq->tenant, id, rq->arena, &types, &n_types))
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has no temporal evolution here", id);
    if (cur) {
        size_t       n_core = pick_core(&tb, cur);
        op_args_t    args   = {0};
        op_result_t  res    = {0};
        bool         ok     = true;
        if (n_core)
            ok = store_modify(rq->store, rq->tenant, id, OP_APPEND_ATTRS, core_draft(rq, &tb, n_core, id), &args,
                              &res, rq->arena, p);
        types   = (const char *const *)cur->types;
        n_types = cur->n_types;
        if (!ok) {
            entity_unref(cur);
            return false;
        }
        ok = append_rest(rq, &tb, id, types, n_types, now, p);
        entity_unref(cur);
        return ok;
    }
    /* an entity that has only history (deleted in the core API): history only */
    return append_rest(rq, &tb, id, types, n_types, now, p);
}

bool ops_temporal_attrs_append(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p)
{
    if (!history_default)
        return no_history(p);
    if (!ops_admit(rq, 2, p))
        return false;
    return ops_admitted(rq, 2, attrs_append(rq, id, body, p));
}

static bool entity_delete(const ops_req_t *rq, const char *id, problem_t *p)
{
    problem_t core = {0};

    if (!history_default)
        return no_history(p);
    if (!ops_check_id(id, p))
        return false;
    /* the entity goes from the core API first (its hook records the
     * deletion), then its whole history */
    bool had_core = store_delete(rq->store, rq->tenant, id, &core);
    if (!had_core && core.kind != PB_RESOURCE_NOT_FOUND && core.kind != PB_NONEXISTENT_TENANT) {
        *p = core;
        return false;
    }
    if (!history_delete_entity(history_default, rq->tenant, id, p))
        return had_core && p->kind == PB_RESOURCE_NOT_FOUND ? (memset(p, 0, sizeof *p), true) : false;
    return true;
}

bool ops_temporal_delete(const ops_req_t *rq, const char *id, problem_t *p)
{
    if (!history_default)
        return no_history(p);
    if (!ops_admit(rq, 2, p))
        return false;
    return ops_admitted(rq, 2, entity_delete(rq, id, p));
}

bool ops_temporal_attr_delete(const ops_req_t *rq, const char *id, const char *name, const char *dataset_id,
                              bool delete_all, problem_t *p)
{
    if (!history_default)
        return no_history(p);
    if (!ops_check_id(id, p) || !ops_check_attr_name(name, false, p))
        return false;
    if (!ops_admit(rq, 1, p))
        return false;
    return ops_admitted(rq, 1, history_delete_attr(history_default, rq->tenant, id,
                                                   ld_expand_lookup(rq->ctx, name, rq->arena), dataset_id,
                                                   delete_all, p));
}

static bool instance_id(const char *text, uint64_t *iid, problem_t *p)
{
    if (!model_valid_uri(text))
        return problem_set(p, PB_BAD_REQUEST_DATA, "the instanceId '%.200s' is not a URI", text);
    *iid = history_instance_id_parse(text);
    if (!*iid)
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no attribute instance has the instanceId %.200s", text);
    return true;
}

bool ops_temporal_instance_delete(const ops_req_t *rq, const char *id, const char *name, const char *iid_text,
                                  problem_t *p)
{
    uint64_t iid;

    if (!history_default)
        return no_history(p);
    if (!ops_check_id(id, p) || !ops_check_attr_name(name, false, p) || !instance_id(iid_text, &iid, p))
        return false;
    if (!ops_admit(rq, 1, p))
        return false;
    return ops_admitted(rq, 1, history_delete_instance(history_default, rq->tenant, id,
                                                       ld_expand_lookup(rq->ctx, name, rq->arena), iid, p));
}

/* The instance as it is now (for a partial modification). */
static const hist_instance_t *instance_now(const ops_req_t *rq, const char *id, const char *name, uint64_t iid,
                                           problem_t *p)
{
    const char  *ids[1]   = { id };
    const char  *attrs[1] = { name };
    entity_filter_t f     = { .ids = ids, .n_ids = 1 };
    hist_query_t q        = { .f = &f, .attrs = attrs, .n_attrs = 1, .timeprop = HIST_TP_CREATED_AT, .limit = 1 };
    hist_result_t res;

    if (!history_query(history_default, rq->tenant, &q, rq->arena, &res, p))
        return NULL;
    for (size_t s = 0; res.n && s < res.items[0].n_series; s++)
        for (size_t i = 0; i < res.items[0].series[s].n; i++)
            if (res.items[0].series[s].inst[i].instance_id == iid)
                return &res.items[0].series[s].inst[i];
    problem_set(p, PB_RESOURCE_NOT_FOUND, "attribute %s of entity %s has no instance with that instanceId", name, id);
    return NULL;
}

bool ops_temporal_instance_modify(const ops_req_t *rq, const char *id, const char *name, const char *iid_text,
                                  const json_t *body, problem_t *p)
{
    uint64_t  iid;
    cr_attr_t with;
    int64_t   now = cr_now_us();

    if (!history_default)
        return no_history(p);
    if (!ops_check_id(id, p) || !ops_check_attr_name(name, false, p) || !instance_id(iid_text, &iid, p))
        return false;
    const char *full = ld_expand(rq->ctx, name);
    if (!json_is_object(body))
        return problem_set(p, PB_BAD_REQUEST_DATA, "the body must be an attribute instance (a JSON object)");
    /* 6.22.3.1: the body is the attribute as a fragment {name: instance} or the instance itself */
    const json_t *el = json_get(body, name);
    if (!el) el = json_get(body, full);
    if (!el) el = body;
    if (json_is_array(el)) {
        if (el->len != 1)
            return problem_set(p, PB_BAD_REQUEST_DATA, "give exactly one instance to modify");
        el = el->child;
    }
    const hist_instance_t *old = instance_now(rq, id, full, iid, p);
    if (!old)
        return false;
    if (!attr_parse(rq->arena, full, el, rq->ctx, EP_PARTIAL, now, &with, p))
        return false;
    if (!with.kind) with.kind = old->attr.kind;
    if (!with.value) with.value = old->attr.value;
    if (with.observed_at == CR_NO_TIME) with.observed_at = old->attr.observed_at;
    if (!with.unit_code) with.unit_code = old->attr.unit_code;
    if (!with.dataset_id) with.dataset_id = old->attr.dataset_id;
    if (!with.n_sub) {
        with.sub   = old->attr.sub;
        with.n_sub = old->attr.n_sub;
    }
    with.name = full;
    if (!ops_admit(rq, 1, p))
        return false;
    return ops_admitted(rq, 1, history_modify_instance(history_default, rq->tenant, id, full, iid, &with, now, p));
}

/* ------------------------------------------------------------ reads */

bool ops_temporal_check(const ops_temporal_t *t, problem_t *p)
{
    const hist_query_t *q = &t->hq;
    if (q->timerel == HIST_TIMEREL_BETWEEN && q->end_time_at <= q->time_at)
        return problem_set(p, PB_BAD_REQUEST_DATA, "endTimeAt must be later than timeAt (4.11)");
    if (t->aggregated && !t->methods)
        return problem_set(p, PB_BAD_REQUEST_DATA, "aggregatedValues needs aggrMethods (4.5.19)");
    return true;
}

/* 5.7.4.4: an attribute not eligible for one of the methods asked for (no
 * value of it that the method applies to: avg of strings) is InvalidRequest. */
static bool eligible(const ops_temporal_t *t, const hist_result_t *res, problem_t *p)
{
    for (size_t e = 0; e < res->n; e++)
        for (size_t s = 0; s < res->items[e].n_series; s++) {
            const hist_series_t *hs = &res->items[e].series[s];
            for (unsigned m = 0; m < HIST_AGGR_N; m++) {
                if (!(t->methods & (1u << m)) || !hs->n_buckets)
                    continue;
                bool any = false;
                for (size_t b = 0; b < hs->n_buckets && !any; b++)
                    any = hs->buckets[b].value[m] != NULL;
                if (!any)
                    return problem_set(p, PB_INVALID_REQUEST, "%s does not apply to the values of attribute %s "
                                       "(4.5.19, 5.7.4.4)", hist_aggr_name(m), hs->name);
            }
        }
    return true;
}

static bool run(const ops_req_t *rq, ops_temporal_t *t, hist_result_t *res, problem_t *p)
{
    if (!ops_temporal_check(t, p))
        return false;
    if (t->aggregated)
        return history_aggregate(history_default, rq->tenant, &t->hq, t->methods, t->period, rq->arena, res, p) &&
               eligible(t, res, p);
    return history_query(history_default, rq->tenant, &t->hq, rq->arena, res, p);
}

bool ops_temporal_query(const ops_req_t *rq, ops_temporal_t *t, hist_result_t *res, problem_t *p)
{
    if (!history_default)
        return no_history(p);
    t->f.sel   = t->sel;
    t->f.n_sel = t->nsel;
    t->hq.f    = &t->f;
    return run(rq, t, res, p);
}

bool ops_temporal_retrieve(const ops_req_t *rq, const char *id, ops_temporal_t *t, hist_result_t *res,
                           problem_t *p)
{
    const char *const *types   = NULL;
    size_t             n_types = 0;

    if (!history_default)
        return no_history(p);
    if (!ops_check_id(id, p))
        return false;
    if (!history_entity_info(history_default, rq->tenant, id, rq->arena, &types, &n_types))
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has no temporal evolution here", id);
    const char **ids = arena_alloc(rq->arena, sizeof *ids);
    ids[0]     = id;
    t->f.ids   = ids;
    t->f.n_ids = 1;
    t->hq.f    = &t->f;
    t->hq.offset = 0;
    t->hq.limit  = 1;
    if (!run(rq, t, res, p))
        return false;
    if (!res->n) {
        /* no instance in range: the entity with no attributes, unless attrs
         * named none it has (Table 6.19.3.1-1 behaves as 5.7.1: 404) */
        if (t->hq.n_attrs) {
            hist_query_t any = t->hq;
            any.attrs_only   = true;
            any.timerel      = HIST_TIMEREL_NONE;
            hist_result_t r2;
            if (!history_query(history_default, rq->tenant, &any, rq->arena, &r2, p))
                return false;
            if (!r2.n || !r2.items[0].n_series)
                return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has none of the attributes asked for", id);
        }
        hist_entity_t *e = arena_calloc(rq->arena, sizeof *e);
        e->id      = id;
        e->types   = types;
        e->n_types = n_types;
        e->deleted_at = CR_NO_TIME;
        res->items = e;
        res->n     = 1;
    }
    return true;
}

bool ops_history_stats(uint64_t *instances, uint64_t *series, uint64_t *bytes, uint64_t *dropped)
{
    history_stats(history_default, instances, series, bytes, dropped);
    return history_default != NULL;
}
