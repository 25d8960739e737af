/*
 * fwd_tread.c - the temporal API's reads, distributed (5.7.3, 5.7.4 with
 * 4.3.6): fwd_temporal_read (fwd.h) sends the read through fwd.c's
 * forwarding (fwd_read_temporal: the registrations supporting
 * retrieveTemporal / queryTemporal, everything else as for entity reads),
 * reads each source's temporal entities (the normalized representation:
 * attributes as arrays of instances with instanceId) into the history's
 * result types, and merges them with the local result. A temporal entity is
 * a set of attribute instances, so its merge is a union, not 4.5.5's "most
 * recent wins": per (attribute, datasetId) the instances of every version,
 * ordered by the timeproperty, one of each (instanceId, time), an auxiliary
 * one only at a time no other version has (5.7.3.4), then lastN.
 */
#include "fwd_int.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the sources' answers */

static bool entity_member(const char *k)
{
    static const char *const m[] = {"id", "@id", "type", "@type", "scope", "@context", "createdAt", "modifiedAt",
                                    "deletedAt", "expiresAt", NULL};
    for (const char *const *x = m; *x; x++)
        if (!strcmp(k, *x)) return true;
    return false;
}

static int64_t time_member(json_t *o, const char *key)
{
    json_t *v = json_remove(o, key);
    int64_t t;
    return json_is_string(v) && cr_datetime_parse(v->str, &t) ? t : CR_NO_TIME;
}

/* The instance id as a source rendered it: this broker's form kept, another's text hashed (never 0). */
static uint64_t instance_id(const json_t *v)
{
    if (!json_is_string(v)) return 0;
    uint64_t id = history_instance_id_parse(v->str);
    if (id) return id;
    id = cr_hash(v->str, v->len);
    return id ? id : 1;
}

static hist_series_t *series_of(arena_t *a, hist_entity_t *e, size_t *cap, const char *name, const char *ds)
{
    for (size_t i = 0; i < e->n_series; i++)
        if (e->series[i].name == name && (e->series[i].dataset_id == ds ||
                                          (ds && e->series[i].dataset_id && !strcmp(e->series[i].dataset_id, ds))))
            return &e->series[i];
    if (e->n_series == *cap) {
        size_t         nc = *cap ? *cap * 2 : 4;
        hist_series_t *x = arena_calloc(a, nc * sizeof *x);
        if (e->n_series) memcpy(x, e->series, e->n_series * sizeof *x);
        e->series = x;
        *cap = nc;
    }
    hist_series_t *s = &e->series[e->n_series++];
    memset(s, 0, sizeof *s);
    s->name = name;
    s->dataset_id = ds;
    return s;
}

/* One temporal entity of a source's answer; false: it is not one (no id). An instance that is not a
 * valid attribute is left out (*bad). */
static bool entity_read(arena_t *a, json_t *o, const ld_context_t *ctx, hist_entity_t *e, bool *bad)
{
    const json_t *id = json_get(o, "id");
    if (!json_is_object(o) || !json_is_string(id)) return false;
    memset(e, 0, sizeof *e);
    e->id = id->str;
    const json_t *ty = json_get(o, "type");
    size_t        nt = json_is_array(ty) ? ty->len : json_is_string(ty);
    const char  **types = arena_alloc(a, (nt + 1) * sizeof *types);
    for (const json_t *t = json_is_array(ty) ? ty->child : ty; t && e->n_types < nt; t = json_is_array(ty) ? t->next : NULL)
        if (json_is_string(t)) types[e->n_types++] = ld_expand(ctx, t->str);
    e->types = types;
    e->created_at = time_member(o, "createdAt");
    e->modified_at = time_member(o, "modifiedAt");
    e->deleted_at = time_member(o, "deletedAt");
    size_t cap = 0;
    json_foreach(m, o) {
        if (entity_member(m->key)) continue;
        const char *name = ld_expand(ctx, m->key);
        for (json_t *el = json_is_array(m) ? m->child : m; el; el = json_is_array(m) ? el->next : NULL) {
            hist_instance_t in = {.deleted_at = CR_NO_TIME};
            problem_t       q = {0};
            if (!json_is_object(el)) {
                *bad = true;
                continue;
            }
            in.instance_id = instance_id(json_remove(el, "instanceId"));
            int64_t created = time_member(el, "createdAt"), modified = time_member(el, "modifiedAt");
            in.deleted_at = time_member(el, "deletedAt");
            if (!attr_parse(a, name, el, ctx, 0, 0, &in.attr, &q)) {
                *bad = true;
                continue;
            }
            in.attr.name = name;
            in.attr.created_at = created;
            in.attr.modified_at = modified != CR_NO_TIME ? modified : created;
            hist_series_t *s = series_of(a, e, &cap, name, in.attr.dataset_id);
            /* one member holds every instance of its name: its length bounds each of its series */
            if (!s->inst) s->inst = arena_alloc(a, ((json_is_array(m) ? m->len : 1) + 1) * sizeof *s->inst);
            s->inst[s->n++] = in;
        }
    }
    return true;
}

/* ------------------------------------------------------------ merging */

typedef struct tversion {
    const hist_entity_t *e;
    bool                 aux;
    uint64_t             from;      /* FWD_MAP_HERE, or the source's bit */
} tversion_t;

/* The versions of one id, chained through tgroups_t.next (no array to grow per group). */
typedef struct tgroup {
    const char *id;
    size_t      head, tail, n;      /* indexes of tgroups_t.v */
} tgroup_t;

typedef struct tgroups {
    tgroup_t   *g;
    size_t      n;
    tversion_t *v;                  /* every version, in the order added */
    size_t     *next;               /* per version: the next of its group, + 1 (0: the last) */
    size_t      nv;
    size_t     *slot;               /* index of g + 1, 0: empty */
    size_t      nslot;              /* power of two, > 2 * the most groups */
} tgroups_t;

static void tgroup_add(tgroups_t *gs, const hist_entity_t *e, bool aux, uint64_t from)
{
    size_t i = (size_t)cr_hash(e->id, strlen(e->id)) & (gs->nslot - 1);
    for (; gs->slot[i]; i = (i + 1) & (gs->nslot - 1))
        if (!strcmp(gs->g[gs->slot[i] - 1].id, e->id)) break;
    size_t k = gs->nv++;
    gs->v[k] = (tversion_t){e, aux, from};
    gs->next[k] = 0;
    if (!gs->slot[i]) {
        gs->g[gs->n] = (tgroup_t){.id = e->id, .head = k, .tail = k, .n = 1};
        gs->slot[i] = ++gs->n;
        return;
    }
    tgroup_t *g = &gs->g[gs->slot[i] - 1];
    gs->next[g->tail] = k + 1;
    g->tail = k;
    g->n++;
}

/* An instance of a merged series, with where it came from (the order of the versions breaks time ties). */
typedef struct tinst {
    hist_instance_t in;
    int64_t         t;
    size_t          seq;
    bool            aux;
} tinst_t;

static int tinst_cmp(const void *x, const void *y)
{
    const tinst_t *a = x, *b = y;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* 4.5.7: an instanceId names one instance of its attribute. Sources number theirs on their own (this
 * broker per entity, from 1), so two different instances of a merged series may carry the same id: the
 * first keeps it, a later one gets an id made from its id and time (the same one on every read). */
static void unique_ids(arena_t *a, hist_series_t *s)
{
    size_t nslot = 16;
    while (nslot < 2 * s->n + 1) nslot *= 2;
    uint64_t *set = arena_calloc(a, nslot * sizeof *set);
    for (size_t i = 0; i < s->n; i++) {
        hist_instance_t *in = &s->inst[i];
        for (;;) {
            size_t k = (size_t)cr_hash_u64(in->instance_id) & (nslot - 1);
            while (set[k] && set[k] != in->instance_id) k = (k + 1) & (nslot - 1);
            if (!set[k]) {
                set[k] = in->instance_id;
                break;
            }
            int64_t t = in->attr.observed_at != CR_NO_TIME ? in->attr.observed_at : in->attr.created_at;
            in->instance_id = cr_hash_u64(in->instance_id ^ cr_hash_u64((uint64_t)t)) | 1;
        }
    }
}

/* The instances of series s of every version in v (those of its name and datasetId), merged into s. */
static void series_merge(arena_t *a, const hist_query_t *q, const tversion_t *v, size_t n, hist_series_t *s)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < v[i].e->n_series; k++) {
            const hist_series_t *x = &v[i].e->series[k];
            if (x->name == s->name && (x->dataset_id == s->dataset_id ||
                                       (x->dataset_id && s->dataset_id && !strcmp(x->dataset_id, s->dataset_id))))
                total += x->n;
        }
    tinst_t *t = arena_alloc(a, (total + 1) * sizeof *t);
    size_t   m = 0;
    bool     any_aux = false;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < v[i].e->n_series; k++) {
            const hist_series_t *x = &v[i].e->series[k];
            if (x->name != s->name || !(x->dataset_id == s->dataset_id ||
                                        (x->dataset_id && s->dataset_id && !strcmp(x->dataset_id, s->dataset_id))))
                continue;
            s->cut = s->cut || x->cut;
            for (size_t j = 0; j < x->n; j++, m++)
                t[m] = (tinst_t){x->inst[j], hist_query_time(q, &x->inst[j]), m, v[i].aux};
            any_aux = any_aux || v[i].aux;
        }
    qsort(t, m, sizeof *t, tinst_cmp);
    s->inst = arena_alloc(a, (m + 1) * sizeof *s->inst);
    s->n = 0;
    for (size_t i = 0; i < m; i++) {
        bool drop = false;
        /* the same instance from two versions (same id, same time): once; the ones at its time are adjacent */
        for (size_t j = i; j-- > 0 && t[j].t == t[i].t && !drop;)
            drop = t[j].in.instance_id == t[i].in.instance_id || (t[i].aux && !t[j].aux);
        /* 5.7.3.4: an auxiliary instance only at a time no other version has */
        for (size_t j = i + 1; any_aux && t[i].aux && !drop && j < m && t[j].t == t[i].t; j++) drop = !t[j].aux;
        if (!drop) s->inst[s->n++] = t[i].in;
    }
    unique_ids(a, s);
    if (q->last_n && s->n > q->last_n) {
        memmove(s->inst, s->inst + (s->n - q->last_n), q->last_n * sizeof *s->inst);
        s->n = q->last_n;
    }
}

/* One entity from its versions (v[0] first): the union of types, the earliest createdAt, the latest
 * modifiedAt, the series grouped by name in the order first seen, each merged. */
static void entity_merge(arena_t *a, const hist_query_t *q, const tversion_t *v, size_t n, hist_entity_t *d)
{
    size_t nt = 0, ns = 0;
    for (size_t i = 0; i < n; i++) {
        nt += v[i].e->n_types;
        ns += v[i].e->n_series;
    }
    *d = *v[0].e;
    const char   **types = arena_alloc(a, (nt + 1) * sizeof *types);
    hist_series_t *series = arena_calloc(a, (ns + 1) * sizeof *series);
    size_t         kt = 0, ks = 0;
    for (size_t i = 0; i < n; i++) {
        const hist_entity_t *e = v[i].e;
        for (size_t t = 0; t < e->n_types; t++) {
            bool dup = false;
            for (size_t k = 0; k < kt && !dup; k++) dup = types[k] == e->types[t];
            if (!dup) types[kt++] = e->types[t];
        }
        if (e->created_at != CR_NO_TIME && (d->created_at == CR_NO_TIME || e->created_at < d->created_at))
            d->created_at = e->created_at;
        if (e->modified_at != CR_NO_TIME && (d->modified_at == CR_NO_TIME || e->modified_at > d->modified_at))
            d->modified_at = e->modified_at;
        if (d->deleted_at == CR_NO_TIME) d->deleted_at = e->deleted_at;
        for (size_t k = 0; k < e->n_series; k++) {
            const hist_series_t *x = &e->series[k];
            size_t               j, last = ks;      /* after the last series of its name */
            for (j = 0; j < ks; j++) {
                if (series[j].name == x->name) {
                    last = j + 1;
                    if (series[j].dataset_id == x->dataset_id ||
                        (x->dataset_id && series[j].dataset_id && !strcmp(x->dataset_id, series[j].dataset_id)))
                        break;
                }
            }
            if (j < ks) continue;
            memmove(&series[last + 1], &series[last], (ks - last) * sizeof *series);
            series[last] = (hist_series_t){.name = x->name, .dataset_id = x->dataset_id};
            ks++;
        }
    }
    for (size_t k = 0; k < ks; k++) series_merge(a, q, v, n, &series[k]);
    d->types = types;
    d->n_types = kt;
    d->series = series;
    d->n_series = ks;
}

/* ------------------------------------------------------------ the operation */

/* The temporal query's parameters for the sources. */
static size_t temporal_params(arena_t *a, const hist_query_t *q, fwd_param_t *v)
{
    static const char *const rel[] = {NULL, "before", "after", "between"};
    static const char *const tp[] = {"observedAt", "createdAt", "modifiedAt", "deletedAt"};
    size_t n = 0;
    char   buf[32];
    if (q->timerel != HIST_TIMEREL_NONE) {
        v[n++] = (fwd_param_t){"timerel", rel[q->timerel]};
        cr_datetime_format(q->time_at, buf);
        v[n++] = (fwd_param_t){"timeAt", arena_strdup(a, buf)};
        if (q->timerel == HIST_TIMEREL_BETWEEN) {
            cr_datetime_format(q->end_time_at, buf);
            v[n++] = (fwd_param_t){"endTimeAt", arena_strdup(a, buf)};
        }
    }
    if (q->timeprop != HIST_TP_OBSERVED_AT) v[n++] = (fwd_param_t){"timeproperty", tp[q->timeprop]};
    if (q->last_n) v[n++] = (fwd_param_t){"lastN", arena_printf(a, "%zu", q->last_n)};
    if (q->n_dataset_ids) {
        sbuf_t sb;
        sb_init(&sb, a, 64);
        for (size_t i = 0; i < q->n_dataset_ids; i++) {
            if (i) sb_addc(&sb, ',');
            sb_adds(&sb, q->dataset_ids[i]);
        }
        v[n++] = (fwd_param_t){"datasetId", sb.p};
    }
    v[n++] = (fwd_param_t){"options", "sysAttrs"};     /* instances' createdAt/modifiedAt: timeproperty */
    return n;
}

static bool has_param(const fwd_param_t *v, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i].key, key)) return true;
    return false;
}

bool fwd_temporal_read(const fwd_in_t *in, const fwd_tread_t *t, fwd_tout_t *out, problem_t *p)
{
    arena_t    *a = in->arena;
    reg_query_t q = t->match;
    fwd_out_t   fo;
    fwd_tdoc_t *docs;
    size_t      n_docs;
    memset(out, 0, sizeof *out);
    q.ops = REG_OP_BIT(REG_OP_QUERY_TEMPORAL) | (t->id ? REG_OP_BIT(REG_OP_RETRIEVE_TEMPORAL) : 0);
    fwd_param_t tp[8];
    size_t      ntp = temporal_params(a, t->hq, tp);
    fwd_param_t *prm = arena_alloc(a, (t->n_params + ntp + 1) * sizeof *prm);
    if (t->n_params) memcpy(prm, t->params, t->n_params * sizeof *prm);
    size_t np = t->n_params;
    for (size_t i = 0; i < ntp; i++)
        if (!has_param(t->params, t->n_params, tp[i].key)) prm[np++] = tp[i];
    if (!fwd_read_temporal(in, &q, t->hq, t->id, prm, np, t->want, t->only, &fo, &docs, &n_docs, p)) return false;
    out->forwarded = fo.forwarded;
    out->failed = fo.failed;
    out->warning = fo.warning;
    out->reg_ids = fo.reg_ids;
    out->n_regs = fo.n_regs;
    out->unanswered = fo.unanswered;
    if (!fo.forwarded) return true;
    size_t total = 0;
    for (size_t i = 0; i < n_docs; i++) total += docs[i].doc->len;
    out->remote = arena_alloc(a, (total + 1) * sizeof *out->remote);
    out->aux = arena_alloc(a, total + 1);
    out->from = arena_alloc(a, (total + 1) * sizeof *out->from);
    bool bad = false;
    for (size_t i = 0; i < n_docs; i++)
        json_foreach(o, docs[i].doc) {
            hist_entity_t *e = &out->remote[out->n_remote];
            if (!entity_read(a, (json_t *)o, docs[i].ctx, e, &bad)) {
                bad = true;
                continue;
            }
            if (t->id && strcmp(e->id, t->id)) continue;     /* asked as a query: only that one */
            out->from[out->n_remote] = docs[i].from;
            out->aux[out->n_remote++] = docs[i].aux;
        }
    if (bad) LOG_D("fwd: a source's temporal answer held members that are not temporal entities or instances");
    return true;
}

void fwd_temporal_merge(arena_t *a, const hist_query_t *hq, const hist_result_t *local, const fwd_tout_t *fo,
                        hist_result_t *res, uint64_t **origins)
{
    size_t    total = local->n + fo->n_remote;
    tgroups_t gs = {0};
    *res = *local;
    gs.g = arena_calloc(a, (total + 1) * sizeof *gs.g);
    gs.v = arena_alloc(a, (total + 1) * sizeof *gs.v);
    gs.next = arena_alloc(a, (total + 1) * sizeof *gs.next);
    for (gs.nslot = 16; gs.nslot < 2 * total + 1; gs.nslot *= 2) {}
    gs.slot = arena_calloc(a, gs.nslot * sizeof *gs.slot);
    for (size_t i = 0; i < local->n; i++) tgroup_add(&gs, &local->items[i], false, FWD_MAP_HERE);
    for (size_t i = 0; i < fo->n_remote; i++) tgroup_add(&gs, &fo->remote[i], fo->aux[i], fo->from ? fo->from[i] : 0);
    res->items = arena_calloc(a, (gs.n + 1) * sizeof *res->items);
    res->n = 0;
    if (origins) *origins = arena_calloc(a, (gs.n + 1) * sizeof **origins);
    tversion_t *v = arena_alloc(a, (total + 1) * sizeof *v);
    for (size_t i = 0; i < gs.n; i++) {
        size_t n = 0;
        for (size_t k = gs.g[i].head + 1; k; k = gs.next[k - 1]) {
            if (origins) (*origins)[res->n] |= gs.v[k - 1].from;
            v[n++] = gs.v[k - 1];
        }
        entity_merge(a, hq, v, n, &res->items[res->n++]);
    }
    res->count = res->n;
    res->more = false;
    res->partial = false;
}
