/*
 * history.c - what every history backend shares (history.h): opening the
 * one --history names, the change hook that turns committed changes into
 * writes, instance ids, durations, and aggregation (4.5.19) over the
 * instances a query returns, for backends that do not aggregate themselves.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "history.h"

struct history {
    const history_backend_t *be;
    void                    *db;
};

history_t *history_default;

static const char NGSI_NULL[] = "urn:ngsi-ld:null";

/* ------------------------------------------------------------ small things */

void history_instance_id_render(uint64_t id, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    size_t            k     = sizeof(HIST_INSTANCE_PREFIX) - 1;

    memcpy(buf, HIST_INSTANCE_PREFIX, k);
    for (int i = 15; i >= 0; i--)
        buf[k++] = hex[(id >> (i * 4)) & 0xf];
    buf[k] = '\0';
}

uint64_t history_instance_id_parse(const char *text)
{
    size_t   k = sizeof(HIST_INSTANCE_PREFIX) - 1;
    uint64_t v = 0;

    if (!text || strncmp(text, HIST_INSTANCE_PREFIX, k) || strlen(text) != k + 16)
        return 0;
    for (size_t i = k; i < k + 16; i++) {
        char c = text[i];
        int  d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return 0;
        v = v << 4 | (uint64_t)d;
    }
    return v;
}

int64_t hist_instance_time(const hist_instance_t *in, hist_timeprop_t tp)
{
    switch (tp) {
    case HIST_TP_CREATED_AT:  return in->attr.created_at;
    case HIST_TP_MODIFIED_AT: return in->attr.modified_at;
    case HIST_TP_DELETED_AT:  return in->deleted_at;
    default:                  return in->attr.observed_at;
    }
}

int64_t hist_query_time(const hist_query_t *q, const hist_instance_t *in)
{
    if (in->deleted_at != CR_NO_TIME && q->timeprop != HIST_TP_DELETED_AT)
        return CR_NO_TIME;
    int64_t t = hist_instance_time(in, q->timeprop);
    if (t == CR_NO_TIME && q->timeprop == HIST_TP_OBSERVED_AT && q->timerel == HIST_TIMEREL_NONE)
        t = in->attr.created_at;
    return t;
}

const char *hist_aggr_name(unsigned i)
{
    static const char *const names[HIST_AGGR_N] = {
        "totalCount", "distinctCount", "sum", "avg", "min", "max", "stddev", "sumsq"
    };
    return i < HIST_AGGR_N ? names[i] : NULL;
}

/* ISO 8601 durations as 4.11 and aggrPeriodDuration use them: PnYnMnWnDTnHnMnS
 * (a year is 365 days, a month 30), fractions on the last unit only; also
 * plain seconds with an optional s/m/h/d suffix (flags). */
bool history_parse_duration(const char *s, int64_t *us)
{
    if (!s || !*s)
        return false;
    if (*s != 'P' && *s != 'p') {
        char  *end;
        double v = strtod(s, &end);
        double unit = 1;
        if (end == s || v < 0 || !isfinite(v))
            return false;
        switch (*end) {
        case '\0': case 's': unit = 1; break;
        case 'm': unit = 60; break;
        case 'h': unit = 3600; break;
        case 'd': unit = 86400; break;
        default: return false;
        }
        if (*end && end[1])
            return false;
        if (v * unit * 1e6 > 9e18)
            return false;
        *us = (int64_t)(v * unit * 1e6);
        return true;
    }
    const char *c       = s + 1;
    bool        in_time = false, any = false, fraction = false;
    double      total   = 0;
    while (*c) {
        if (*c == 'T') {
            if (in_time)
                return false;
            in_time = true;
            c++;
            if (!*c)
                return false;
            continue;
        }
        if (fraction)
            return false;          /* a fraction only on the last unit */
        char  *end;
        if (!(*c >= '0' && *c <= '9'))
            return false;
        double v = strtod(c, &end);
        if (end == c || !isfinite(v))
            return false;
        for (const char *d = c; d < end; d++)
            if (*d == '.' || *d == ',')
                fraction = true;
        double unit;
        switch (*end) {
        case 'Y': if (in_time) return false; unit = 365.0 * 86400; break;
        case 'M': unit = in_time ? 60 : 30.0 * 86400; break;
        case 'W': if (in_time) return false; unit = 7.0 * 86400; break;
        case 'D': if (in_time) return false; unit = 86400; break;
        case 'H': if (!in_time) return false; unit = 3600; break;
        case 'S': if (!in_time) return false; unit = 1; break;
        default: return false;
        }
        total += v * unit;
        any    = true;
        c      = end + 1;
    }
    if (!any || total * 1e6 > 9e18)
        return false;
    *us = (int64_t)llround(total * 1e6);
    return true;
}

/* ------------------------------------------------------------- changes */

json_t *hist_deleted_value(arena_t *a, attr_kind_t kind)
{
    if ((int)kind == HIST_KIND_SCOPE)
        return json_new(a, JSON_ARRAY);
    json_t *v = json_new_string(a, NGSI_NULL);
    if (kind == ATTR_LANGUAGEPROPERTY) {
        json_t *o = json_new(a, JSON_OBJECT);
        json_add(o, "@none", v);
        return o;
    }
    if (kind == ATTR_LISTPROPERTY) {
        json_t *l = json_new(a, JSON_ARRAY);
        json_add(l, NULL, v);
        return l;
    }
    if (kind == ATTR_LISTRELATIONSHIP) {
        json_t *l = json_new(a, JSON_ARRAY), *o = json_new(a, JSON_OBJECT);
        json_add(o, "object", v);
        json_add(l, NULL, o);
        return l;
    }
    return v;
}

static void deleted_instance(hist_instance_t *in, const cr_attr_t *a, int64_t at, arena_t *ar)
{
    memset(in, 0, sizeof *in);
    in->attr.name        = a->name;
    in->attr.dataset_id  = a->dataset_id;
    in->attr.kind        = a->kind;
    in->attr.value       = hist_deleted_value(ar, (attr_kind_t)a->kind);
    in->attr.observed_at = CR_NO_TIME;
    in->attr.created_at  = at;
    in->attr.modified_at = at;
    in->deleted_at       = at;
}

size_t history_from_change(const store_change_t *ch, arena_t *a, hist_write_t *w)
{
    const cr_entity_t *e = ch->after ? ch->after : ch->before;

    if (!ch->seq || !e)
        return 0;
    memset(w, 0, sizeof *w);
    w->id      = e->id;
    w->types   = e->types;
    w->n_types = e->n_types;
    w->entity  = (cr_entity_t *)e;
    w->at      = ch->at;

    if (!ch->after) {
        /* an entity delete: one deletedAt instance per instance it had */
        hist_instance_t *in = arena_alloc(a, (ch->before->n_attrs + 1u) * sizeof *in);
        size_t           n  = 0;
        for (uint16_t i = 0; i < ch->before->n_attrs; i++)
            deleted_instance(&in[n++], &ch->before->attrs[i], ch->at, a);
        if (ch->before->scope) {
            cr_attr_t scope = { .name = MN.scope, .kind = ATTR_PROPERTY };
            deleted_instance(&in[n], &scope, ch->at, a);
            in[n++].attr.value = json_new(a, JSON_ARRAY);
        }
        w->entity_deleted = true;
        w->inst           = in;
        w->n_inst         = n;
        return 1;
    }
    size_t           cap = (size_t)ch->n_created + ch->n_updated + ch->n_deleted;
    hist_instance_t *in  = arena_alloc(a, (cap + 1) * sizeof *in);
    size_t           n   = 0;

    const store_attr_ref_t *lists[2] = { ch->created, ch->updated };
    uint32_t                counts[2] = { ch->n_created, ch->n_updated };
    for (int l = 0; l < 2; l++)
        for (uint32_t i = 0; i < counts[l]; i++) {
            const cr_attr_t *at = entity_attr(ch->after, lists[l][i].name, lists[l][i].dataset_id);
            if (!at)
                continue;
            hist_instance_t *x = &in[n++];
            memset(x, 0, sizeof *x);
            x->attr             = *at;
            x->attr.created_at  = ch->at;
            x->attr.modified_at = ch->at;
            x->deleted_at       = CR_NO_TIME;
        }
    for (uint32_t i = 0; i < ch->n_deleted; i++) {
        const cr_attr_t *at = ch->before ? entity_attr(ch->before, ch->deleted[i].name,
                                                       ch->deleted[i].dataset_id) : NULL;
        if (at)
            deleted_instance(&in[n++], at, ch->at, a);
    }
    /* 4.5.6: the Scope as a temporal Property, observedAt a copy of modifiedAt */
    const json_t *was = ch->before ? ch->before->scope : NULL, *is = ch->after->scope;
    if ((was || is) && !(was && is && json_equal(was, is))) {
        hist_instance_t *x = arena_alloc(a, (n + 1) * sizeof *x);
        memcpy(x, in, n * sizeof *x);
        in = x;
        x  = &in[n++];
        memset(x, 0, sizeof *x);
        x->attr.name        = MN.scope;
        x->attr.kind        = ATTR_PROPERTY;
        x->attr.created_at  = x->attr.modified_at = ch->at;
        x->attr.observed_at = is ? ch->at : CR_NO_TIME;
        x->deleted_at       = is ? CR_NO_TIME : ch->at;
        if (is && is->type == JSON_ARRAY)
            x->attr.value = (json_t *)is;
        else if (is) {
            x->attr.value = json_new(a, JSON_ARRAY);
            json_add(x->attr.value, NULL, json_clone(a, is));
        } else
            x->attr.value = json_new(a, JSON_ARRAY);      /* a deleted Scope: [] */
    }
    w->inst   = in;
    w->n_inst = n;
    return 1;
}

/* A scratch arena per writer thread, freed when the thread ends. */
static pthread_key_t  tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;

static void tl_free(void *a)
{
    arena_free(a);
}

static void tl_init(void)
{
    if (pthread_key_create(&tl_key, tl_free) != 0) {
        LOG_E("history: cannot create a thread key; aborting");
        abort();
    }
}

static arena_t *tl_scratch(void)
{
    pthread_once(&tl_once, tl_init);
    arena_t *a = pthread_getspecific(tl_key);
    if (!a) {
        a = arena_new(16384);
        if (pthread_setspecific(tl_key, a) != 0) {
            LOG_E("history: cannot keep a thread's arena; aborting");
            abort();
        }
    }
    return a;
}

static void on_changes(void *ud, const store_change_t *g, size_t n)
{
    history_t *h = ud;

    if (!n)
        return;
    arena_t      *tl_arena = tl_scratch();
    hist_write_t *w        = arena_alloc(tl_arena, n * sizeof *w);
    size_t        nw = 0;
    for (size_t i = 0; i < n; i++)
        nw += history_from_change(&g[i], tl_arena, &w[nw]);
    if (nw) {
        problem_t p = { 0 };
        if (!h->be->append(h->db, g[0].tenant ? g[0].tenant : "", w, nw, &p))
            LOG_E("history: %s: %zu changes not recorded: %s", h->be->name, nw, p.detail);
    }
    arena_reset_keep(tl_arena, 65536);
}

/* The store's syncer, after the hooks of a round of held writes (store.h):
 * their history as durable as they are, one sync for the round. */
static const char *on_flush(void *ud)
{
    history_t *h = ud;

    if (!h->be->sync || h->be->sync(h->db))
        return NULL;
    return "its history cannot be written to disk (the history log failed)";
}

/* --------------------------------------------------------------- open */

history_t *history_open(store_t *s, problem_t *p)
{
    const char              *name = cr_config.history ? cr_config.history : "none";
    const history_backend_t *be   = NULL;

    if (!strcasecmp(name, "none"))
        return NULL;
    if (!strcasecmp(name, "corDB"))
        be = &history_cordb;
    else if (!strcasecmp(name, "timescale"))
        be = &history_timescale;
    else {
        problem_set(p, PB_BAD_REQUEST_DATA, "--history %s: expected none, corDB or timescale", name);
        return NULL;
    }
    void *db = be->open(s, p);
    if (!db)
        return NULL;
    history_t *h = cr_xcalloc(1, sizeof *h);
    h->be = be;
    h->db = db;
    store_add_hook(s, on_changes, h);
    store_add_flush(s, on_flush, h);
    history_default = h;
    LOG_I("history: %s", be->name);
    return h;
}

void history_close(history_t *h)
{
    if (!h)
        return;
    if (history_default == h)
        history_default = NULL;
    h->be->close(h->db);
    free(h);
}

void history_health(history_t *h, uint64_t *queued, bool *reachable)
{
    *queued = 0;
    *reachable = true;
    if (h && h->be->health)
        h->be->health(h->db, queued, reachable);
}

bool history_enabled(const history_t *h)
{
    return h != NULL;
}

/* ------------------------------------------------------------ wrappers */

static bool none(problem_t *p)
{
    return problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                       "attribute history is off (--history none): the temporal API needs --history corDB");
}

bool history_reserve(history_t *h, const char *tenant, size_t n, problem_t *p)
{
    if (!h)
        return true;
    return !h->be->reserve || h->be->reserve(h->db, tenant ? tenant : "", n, p);
}

/* A held write (--dbSync always, store.h "Held answers") returns before
 * its hooks append its history: its room is given back once it is answered
 * (its history appended, or the write undone), not when its call returns,
 * so the queue never holds more than its bound. */
static void unreserve_later(void *ud, size_t n)
{
    history_t *h = ud;

    h->be->unreserve(h->db, "", n);
}

void history_unreserve(history_t *h, const char *tenant, size_t n)
{
    if (!h || !h->be->unreserve || !n)
        return;
    if (store_hold_pending())
        store_hold_release(unreserve_later, h, n);
    else
        h->be->unreserve(h->db, tenant ? tenant : "", n);
}

bool history_sync(history_t *h)
{
    return !h || !h->be->sync || h->be->sync(h->db);
}

bool history_snapshot(history_t *h, problem_t *p)
{
    return !h || !h->be->snapshot || h->be->snapshot(h->db, p);
}

bool history_append(history_t *h, const char *tenant, const hist_write_t *w, size_t n, problem_t *p)
{
    if (!h)
        return none(p);
    return h->be->append(h->db, tenant ? tenant : "", w, n, p);
}

static int cmp_time(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* 6.3.10: the answer cut to one time window of at most q->inst_limit
 * instances over all its entities and attributes: the least recent ones
 * (forwards), or with lastN the most recent ones (backwards). A series
 * left with no instance stays (an empty array: the window ends before it). */
void history_window(arena_t *a, const hist_query_t *q, hist_result_t *out)
{
    size_t total = 0;
    bool   cut   = false;

    out->partial     = false;
    out->range_first = out->range_last = CR_NO_TIME;
    for (size_t e = 0; e < out->n; e++)
        for (size_t s = 0; s < out->items[e].n_series; s++) {
            total += out->items[e].series[s].n;
            cut   |= out->items[e].series[s].cut;
        }
    if (!q->inst_limit || (!cut && total <= q->inst_limit))
        return;
    int64_t *t = arena_alloc(a, (total + 1) * sizeof *t);
    size_t   k = 0;
    for (size_t e = 0; e < out->n; e++)
        for (size_t s = 0; s < out->items[e].n_series; s++)
            for (size_t i = 0; i < out->items[e].series[s].n; i++)
                t[k++] = hist_query_time(q, &out->items[e].series[s].inst[i]);
    qsort(t, k, sizeof *t, cmp_time);
    bool    back = q->last_n > 0;
    size_t  keep = k < q->inst_limit ? k : q->inst_limit;
    if (!keep)
        return;
    int64_t lo = back ? t[k - keep] : t[0];
    int64_t hi = back ? t[k - 1] : t[keep - 1];
    /* instances at the cut's own time are all in or all out: out, unless
     * that leaves nothing */
    if (back && k > keep && t[k - keep - 1] == lo && t[k - 1] != lo)
        lo++;
    if (!back && k > keep && t[keep] == hi && t[0] != hi)
        hi--;
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t e = 0; e < out->n; e++)
        for (size_t s = 0; s < out->items[e].n_series; s++) {
            hist_series_t *hs = &out->items[e].series[s];
            size_t         m  = 0;
            for (size_t i = 0; i < hs->n; i++) {
                int64_t x = hist_query_time(q, &hs->inst[i]);
                if (x >= lo && x <= hi) {
                    hs->inst[m++] = hs->inst[i];
                    if (x < first) first = x;
                    if (x > last) last = x;
                }
            }
            hs->n = m;
        }
    lo = first;
    hi = last;
    out->partial     = true;
    out->range_first = lo;
    out->range_last  = hi;
}

bool history_query(history_t *h, const char *tenant, const hist_query_t *q, arena_t *a,
                   hist_result_t *out, problem_t *p)
{
    memset(out, 0, sizeof *out);
    if (!h)
        return none(p);
    if (!h->be->query(h->db, tenant ? tenant : "", q, a, out, p))
        return false;
    history_window(a, q, out);
    return true;
}

bool history_entity_info(history_t *h, const char *tenant, const char *id, arena_t *a,
                         const char *const **types, size_t *n_types)
{
    return h && h->be->entity_info(h->db, tenant ? tenant : "", id, a, types, n_types);
}

bool history_delete_entity(history_t *h, const char *tenant, const char *id, problem_t *p)
{
    if (!h)
        return none(p);
    return h->be->delete_entity(h->db, tenant ? tenant : "", id, p);
}

bool history_delete_attr(history_t *h, const char *tenant, const char *id, const char *name,
                         const char *dataset_id, bool delete_all, problem_t *p)
{
    if (!h)
        return none(p);
    return h->be->delete_attr(h->db, tenant ? tenant : "", id, name, dataset_id, delete_all, p);
}

bool history_delete_instance(history_t *h, const char *tenant, const char *id, const char *name,
                             uint64_t instance_id, problem_t *p)
{
    if (!h)
        return none(p);
    return h->be->delete_instance(h->db, tenant ? tenant : "", id, name, instance_id, p);
}

bool history_modify_instance(history_t *h, const char *tenant, const char *id, const char *name,
                             uint64_t instance_id, const cr_attr_t *with, int64_t now, problem_t *p)
{
    if (!h)
        return none(p);
    return h->be->modify_instance(h->db, tenant ? tenant : "", id, name, instance_id, with, now, p);
}

void history_stats(history_t *h, uint64_t *instances, uint64_t *series, uint64_t *bytes,
                   uint64_t *dropped)
{
    *instances = *series = *bytes = *dropped = 0;
    if (h && h->be->stats)
        h->be->stats(h->db, instances, series, bytes, dropped);
}

/* --------------------------------------------------------- aggregation */

/* A point of a series for aggregation: its time, and its value as a
 * number (num) or as JSON (j: strings, objects, arrays; NULL for numbers). */
/* The point of an instance (false: a deletion, not a value). */
static bool point_of(const hist_query_t *q, const hist_instance_t *in, hist_point_t *pt)
{
    const json_t *j = in->attr.value;

    if (in->deleted_at != CR_NO_TIME || !j)
        return false;
    pt->t   = hist_query_time(q, in);
    pt->j   = NULL;
    pt->num = 0;
    if (j->type == JSON_NUMBER)
        pt->num = json_number(j);
    else if (j->type == JSON_TRUE || j->type == JSON_FALSE)
        pt->num = j->type == JSON_TRUE;
    else
        pt->j = j;
    return true;
}

/* distinct values: numbers by value, the rest by JSON equality */
static int cmp_num(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static size_t distinct(arena_t *a, const hist_point_t *pt, size_t n)
{
    double *v = arena_alloc(a, (n + 1) * sizeof *v);
    size_t  nv = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        if (!pt[i].j) {
            v[nv++] = pt[i].num;
            continue;
        }
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = pt[k].j && json_equal(pt[k].j, pt[i].j);
        d += !seen;
    }
    qsort(v, nv, sizeof *v, cmp_num);
    for (size_t i = 0; i < nv; i++)
        d += i == 0 || v[i] != v[i - 1];
    return d;
}

static void bucket_fill(arena_t *a, hist_bucket_t *b, const hist_point_t *pt, size_t n, unsigned methods)
{
    size_t        nnum = 0;
    double        sum = 0, sumsq = 0, mn = 0, mx = 0;
    const json_t *smin = NULL, *smax = NULL;

    for (size_t i = 0; i < n; i++) {
        /* numbers, booleans (0/1) and arrays (by their size: Table 4.5.19.1-1) */
        if (!pt[i].j || pt[i].j->type == JSON_ARRAY) {
            double v = pt[i].j ? (double)pt[i].j->len : pt[i].num;
            if (!nnum || v < mn) mn = v;
            if (!nnum || v > mx) mx = v;
            nnum++;
            sum   += v;
            sumsq += v * v;
        } else if (pt[i].j->type == JSON_STRING) {   /* strings and DateTimes: by their text */
            const json_t *t = pt[i].j;
            if (!smin || strcmp(t->str, smin->str) < 0) smin = t;
            if (!smax || strcmp(t->str, smax->str) > 0) smax = t;
        }
    }
    if (methods & HIST_AGGR_TOTAL_COUNT)    b->value[0] = json_new_int(a, (int64_t)n);
    if (methods & HIST_AGGR_DISTINCT_COUNT) b->value[1] = json_new_int(a, (int64_t)distinct(a, pt, n));
    /* the points' JSON may be the backend's (valid only during the call): nothing of it is kept */
    if (nnum) {
        double avg = sum / (double)nnum;
        double var = sumsq / (double)nnum - avg * avg;
        if (methods & HIST_AGGR_SUM)    b->value[2] = json_new_number(a, sum);
        if (methods & HIST_AGGR_AVG)    b->value[3] = json_new_number(a, avg);
        if (methods & HIST_AGGR_MIN)    b->value[4] = json_new_number(a, mn);
        if (methods & HIST_AGGR_MAX)    b->value[5] = json_new_number(a, mx);
        if (methods & HIST_AGGR_STDDEV) b->value[6] = json_new_number(a, sqrt(var > 0 ? var : 0));
        if (methods & HIST_AGGR_SUMSQ)  b->value[7] = json_new_number(a, sumsq);
    } else {
        if ((methods & HIST_AGGR_MIN) && smin) b->value[4] = json_new_stringn(a, smin->str, smin->len);
        if ((methods & HIST_AGGR_MAX) && smax) b->value[5] = json_new_stringn(a, smax->str, smax->len);
    }
}

void history_buckets(arena_t *a, const hist_query_t *q, const hist_point_t *pt, size_t n, unsigned methods,
                     int64_t period, hist_series_t *s)
{
    s->buckets   = NULL;
    s->n_buckets = 0;
    if (!n)
        return;
    int64_t first = pt[0].t, last = pt[n - 1].t;
    /* PT0S: the whole range of the temporal query, as far as it is bounded */
    int64_t end = q->timerel == HIST_TIMEREL_BETWEEN ? q->end_time_at
                : q->timerel == HIST_TIMEREL_BEFORE ? q->time_at : last;
    if (end < last)
        end = last;
    size_t nb = period > 0 ? (size_t)((end - first) / period + 1) : 1;
    if (nb > n)                          /* empty periods are not listed: at most one per point */
        nb = n;
    s->buckets = arena_calloc(a, nb * sizeof *s->buckets);
    size_t i = 0;
    while (i < n) {
        int64_t start = period > 0 ? first + (pt[i].t - first) / period * period : first;
        int64_t stop  = period > 0 ? start + period : end;
        if (stop > end && period > 0 && q->timerel == HIST_TIMEREL_BETWEEN)
            stop = end;
        size_t j = i;
        while (j < n && (period <= 0 || pt[j].t < start + period))
            j++;
        hist_bucket_t *b = &s->buckets[s->n_buckets++];
        b->start = start;
        b->end   = stop;
        bucket_fill(a, b, &pt[i], j - i, methods);
        i = j;
    }
}

void history_series_aggregate(arena_t *a, const hist_query_t *q, hist_series_t *s, unsigned methods,
                              int64_t period)
{
    hist_point_t *pt = arena_alloc(a, (s->n + 1) * sizeof *pt);
    size_t        n  = 0;
    for (size_t i = 0; i < s->n; i++)
        n += point_of(q, &s->inst[i], &pt[n]);
    history_buckets(a, q, pt, n, methods, period, s);
}

bool history_aggregate(history_t *h, const char *tenant, const hist_query_t *q, unsigned methods,
                       int64_t period, arena_t *a, hist_result_t *out, problem_t *p)
{
    memset(out, 0, sizeof *out);
    if (!h)
        return none(p);
    if (h->be->aggregate)
        return h->be->aggregate(h->db, tenant ? tenant : "", q, methods, period, a, out, p);
    hist_query_t qq = *q;
    qq.inst_limit   = 0;                 /* aggregates cover the whole range */
    if (!h->be->query(h->db, tenant ? tenant : "", &qq, a, out, p))
        return false;
    for (size_t e = 0; e < out->n; e++)
        for (size_t s = 0; s < out->items[e].n_series; s++)
            history_series_aggregate(a, q, &out->items[e].series[s], methods, period);
    out->partial = false;
    return true;
}

/* ------------------------------------------------------------ orderBy */

typedef struct order_ctx {
    const entity_order_t *o;
    const cr_entity_t   **ver;
} order_ctx_t;

static int order_cmp(const void *x, const void *y, void *ctx)
{
    const order_ctx_t *c = ctx;
    size_t i = *(const size_t *)x, j = *(const size_t *)y;
    int    r = order_compare(c->o, c->ver[i], c->ver[j]);
    return r ? r : (i > j) - (i < j);        /* equal: creation order */
}

/* history.h */
void history_order_page(arena_t *a, const entity_order_t *o, const hist_query_t *q, const cr_entity_t **ver,
                       hist_result_t *out)
{
    size_t  n   = out->n;
    size_t *idx = arena_alloc(a, (n + 1) * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    order_ctx_t c = { o, ver };
    qsort_r(idx, n, sizeof *idx, order_cmp, &c);
    size_t from = q->offset < n ? q->offset : n;
    size_t m    = n - from < q->limit ? n - from : q->limit;
    hist_entity_t *page = arena_alloc(a, (m + 1) * sizeof *page);
    for (size_t i = 0; i < m; i++)
        page[i] = out->items[idx[from + i]];
    out->items = page;
    out->n     = m;
    out->more  = from + m < n;
}
