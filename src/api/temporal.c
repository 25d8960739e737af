/*
 * temporal.c - the temporal API (6.18-6.24): /temporal/entities,
 * /temporal/entities/{id}, .../attrs, .../attrs/{attrId},
 * .../attrs/{attrId}/{instanceId}, /temporal/entityOperations/query: the
 * HTTP binding of ops/temporal.c.
 *
 * The temporal query (4.11: timerel, timeAt, endTimeAt, timeproperty),
 * lastN, the aggregation parameters (aggrMethods, aggrPeriodDuration) and
 * the entity query (the parameters or Query body of GET /entities, shared
 * with query.c) become one ops_temporal_t; the answer is rendered here in
 * the format asked for: normalized (instances with instanceId, 4.5.7),
 * temporalValues (4.5.9) or aggregatedValues (4.5.19). When the instance
 * limit (--temporalLimit) cuts an attribute the answer is 206 with a
 * Content-Range in DateTime units (6.3.10).
 */
#include "api.h"

#include "../fwd/fwd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef enum { TF_NORMALIZED = 0, TF_CONCISE, TF_VALUES, TF_AGGREGATED } tfmt_t;

typedef struct tview {
    api_view_t v;
    tfmt_t     fmt;
    bool       has_last_n;
} tview_t;

/* ------------------------------------------------------------ parameters */

static bool parse_time(const char *s, const char *name, int64_t *t, problem_t *p)
{
    if (!cr_datetime_parse(s, t))
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a DateTime (ISO 8601 UTC), not '%.100s' (4.11)", name, s);
    return true;
}

/* The temporal query (4.11) from its four texts (NULL: absent). */
static bool temporal_q(const char *timerel, const char *time_at, const char *end_time_at, const char *timeprop,
                       hist_query_t *q, problem_t *p)
{
    q->timerel  = HIST_TIMEREL_NONE;
    q->timeprop = HIST_TP_OBSERVED_AT;
    if (timeprop) {
        if (!strcmp(timeprop, "observedAt")) q->timeprop = HIST_TP_OBSERVED_AT;
        else if (!strcmp(timeprop, "createdAt")) q->timeprop = HIST_TP_CREATED_AT;
        else if (!strcmp(timeprop, "modifiedAt")) q->timeprop = HIST_TP_MODIFIED_AT;
        else if (!strcmp(timeprop, "deletedAt")) q->timeprop = HIST_TP_DELETED_AT;
        else
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "timeproperty must be observedAt, createdAt, modifiedAt or deletedAt, not '%.100s' (4.11)",
                               timeprop);
    }
    if (!timerel) {
        if (time_at || end_time_at)
            return problem_set(p, PB_BAD_REQUEST_DATA, "timeAt and endTimeAt need timerel (4.11)");
        return true;
    }
    if (!strcmp(timerel, "before")) q->timerel = HIST_TIMEREL_BEFORE;
    else if (!strcmp(timerel, "after")) q->timerel = HIST_TIMEREL_AFTER;
    else if (!strcmp(timerel, "between")) q->timerel = HIST_TIMEREL_BETWEEN;
    else
        return problem_set(p, PB_BAD_REQUEST_DATA, "timerel must be before, after or between, not '%.100s' (4.11)",
                           timerel);
    if (!time_at)
        return problem_set(p, PB_BAD_REQUEST_DATA, "timerel=%s needs timeAt (4.11)", timerel);
    if (!parse_time(time_at, "timeAt", &q->time_at, p))
        return false;
    if (q->timerel == HIST_TIMEREL_BETWEEN) {
        if (!end_time_at)
            return problem_set(p, PB_BAD_REQUEST_DATA, "timerel=between needs endTimeAt (4.11)");
        if (!parse_time(end_time_at, "endTimeAt", &q->end_time_at, p))
            return false;
        if (q->end_time_at <= q->time_at)
            return problem_set(p, PB_BAD_REQUEST_DATA, "endTimeAt must be later than timeAt (4.11)");
    } else if (end_time_at && !parse_time(end_time_at, "endTimeAt", &q->end_time_at, p))
        return false;
    return true;
}

static bool last_n(const char *s, tview_t *tv, hist_query_t *q, problem_t *p)
{
    if (!s)
        return true;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v <= 0)
        return problem_set(p, PB_BAD_REQUEST_DATA, "lastN must be a positive integer, not '%.100s' (6.3.x)", s);
    q->last_n      = (size_t)v;
    tv->has_last_n = true;
    return true;
}

static bool aggr_methods(const char *s, unsigned *m, problem_t *p)
{
    *m = 0;
    while (s && *s) {
        const char *e = strchr(s, ',');
        size_t      l = e ? (size_t)(e - s) : strlen(s);
        unsigned    i;
        for (i = 0; i < HIST_AGGR_N; i++)
            if (strlen(hist_aggr_name(i)) == l && !memcmp(hist_aggr_name(i), s, l))
                break;
        if (i == HIST_AGGR_N)
            return problem_set(p, PB_BAD_REQUEST_DATA, "aggrMethods: '%.*s' is not one of totalCount, distinctCount, "
                               "sum, avg, min, max, stddev, sumsq (4.5.19)", (int)(l > 100 ? 100 : l), s);
        *m |= 1u << i;
        s = e ? e + 1 : NULL;
    }
    return true;
}

/* format / options: normalized, concise, temporalValues, aggregatedValues,
 * sysAttrs; format wins over options (6.3.7). */
static bool temporal_format(request_t *r, const ld_context_t *ctx, tview_t *tv, problem_t *p)
{
    memset(tv, 0, sizeof *tv);
    tv->v.ro.ctx = ctx;
    /* 6.3.20: an options value or a format the operation does not support is InvalidRequest */
    if (!api_options_valid(r, "temporalValues,aggregatedValues,sysAttrs,normalized,concise,simplified,keyValues", p))
        return false;
    tv->fmt = TF_NORMALIZED;
    if (api_option(r, "temporalValues") || api_option(r, "simplified") || api_option(r, "keyValues"))
        tv->fmt = TF_VALUES;
    else if (api_option(r, "aggregatedValues"))
        tv->fmt = TF_AGGREGATED;
    else if (api_option(r, "concise"))
        tv->fmt = TF_CONCISE;
    const char *fmt = req_param(r, "format");
    if (fmt) {
        if (!strcmp(fmt, "temporalValues") || !strcmp(fmt, "simplified") || !strcmp(fmt, "keyValues"))
            tv->fmt = TF_VALUES;
        else if (!strcmp(fmt, "aggregatedValues")) tv->fmt = TF_AGGREGATED;
        else if (!strcmp(fmt, "normalized")) tv->fmt = TF_NORMALIZED;
        else if (!strcmp(fmt, "concise")) tv->fmt = TF_CONCISE;
        else
            return problem_set(p, PB_INVALID_REQUEST, "format must be normalized, concise, temporalValues or "
                               "aggregatedValues, not '%.100s' (6.3.7, 6.3.20)", fmt);
    }
    tv->v.ro.sys_attrs = api_option(r, "sysAttrs");
    tv->v.ro.format    = tv->fmt == TF_CONCISE ? FMT_CONCISE : FMT_NORMALIZED;
    if (!api_view_params(r, ctx, &tv->v, p))
        return false;
    if (tv->v.join != API_JOIN_NONE)
        return problem_set(p, PB_BAD_REQUEST_DATA, "Linked Entity retrieval (join) does not apply to the temporal API "
                           "(5.7.3.4)");
    const char *lang = req_param(r, "lang");
    if (lang) {
        if (!*lang) return problem_set(p, PB_BAD_REQUEST_DATA, "lang must not be empty");
        tv->v.ro.lang = lang;
    }
    tv->v.accept = req_accept_best(r, ACC_JSON | ACC_LDJSON);
    if (!tv->v.accept) tv->v.accept = ACC_JSON;
    tv->v.ctype = tv->v.accept == ACC_LDJSON ? "application/ld+json" : "application/json";
    return true;
}

/* The datasetId parameter (4.5.5) into the history query. */
static void dataset_ids(const tview_t *tv, hist_query_t *q)
{
    q->dataset_ids   = (const char *const *)tv->v.ro.dataset_ids;
    q->n_dataset_ids = tv->v.ro.n_dataset_ids;
}

/* Everything of a temporal read but the entity selection. */
static bool temporal_params(request_t *r, tview_t *tv, ops_temporal_t *t, problem_t *p)
{
    hist_query_t *q = &t->hq;
    if (!temporal_q(req_param(r, "timerel"), req_param(r, "timeAt"), req_param(r, "endTimeAt"),
                    req_param(r, "timeproperty"), q, p))
        return false;
    if (!last_n(req_param(r, "lastN"), tv, q, p))
        return false;
    const char *am = req_param(r, "aggrMethods"), *ap = req_param(r, "aggrPeriodDuration");
    if (tv->fmt == TF_AGGREGATED) {
        if (!am)
            return problem_set(p, PB_BAD_REQUEST_DATA, "aggregatedValues needs aggrMethods (4.5.19)");
        if (!aggr_methods(am, &t->methods, p))
            return false;
        if (!*am)
            return problem_set(p, PB_BAD_REQUEST_DATA, "aggrMethods must name at least one method (4.5.19)");
        if (ap && !history_parse_duration(ap, &t->period))
            return problem_set(p, PB_BAD_REQUEST_DATA, "aggrPeriodDuration must be an ISO 8601 duration such as PT1H, "
                               "not '%.100s' (4.5.19)", ap);
        t->aggregated = true;
    } else if (am && !aggr_methods(am, &t->methods, p))
        return false;
    else if (ap && !history_parse_duration(ap, &t->period))
        return problem_set(p, PB_BAD_REQUEST_DATA, "aggrPeriodDuration must be an ISO 8601 duration (4.5.19)");
    q->n_attrs    = tv->v.n_attrs;
    q->attrs      = (const char *const *)tv->v.attrs;
    q->inst_limit = cr_config.temporal_limit > 0 ? (size_t)cr_config.temporal_limit : 0;
    dataset_ids(tv, q);
    (void)req_param(r, "local");
    (void)req_param(r, "csf");
    return true;
}

/* ------------------------------------------------------------- rendering */

static void wr_time(json_writer_t *w, const char *key, int64_t t)
{
    char buf[32];
    cr_datetime_format(t, buf);
    jw_key(w, key);
    jw_string(w, buf);
}

static bool shown(const tview_t *tv, const char *name)
{
    const render_opts_t *o = &tv->v.ro;
    if (o->pick_tree && !projection_keeps(o->pick_tree, name, false))
        return false;
    if (o->omit_tree && !projection_keeps(o->omit_tree, name, true))
        return false;
    return true;
}

/* One instance in the normalized (or concise) temporal representation:
 * the attribute, its instanceId, and deletedAt for a deletion. */
static void wr_instance(request_t *r, json_writer_t *w, const tview_t *tv, const hist_instance_t *in)
{
    sbuf_t        sb;
    json_writer_t iw;
    char          iid[HIST_INSTANCE_ID_LEN + 1];

    sb_init(&sb, r->arena, 256);
    jw_init(&iw, &sb);
    render_opts_t ro = tv->v.ro;
    ro.context_json  = NULL;
    attr_render(&iw, &in->attr, &ro);
    if (sb.len < 2 || sb.p[sb.len - 1] != '}') {  /* a concise bare value: as it is */
        jw_raw(w, sb.p, sb.len);
        return;
    }
    sb.len--;                                     /* reopen the object */
    history_instance_id_render(in->instance_id, iid);
    sb_adds(&sb, sb.len > 1 ? ",\"instanceId\":" : "\"instanceId\":");
    json_render_string(&sb, iid, strlen(iid));
    if (in->deleted_at != CR_NO_TIME) {
        char t[32];
        cr_datetime_format(in->deleted_at, t);
        sb_adds(&sb, ",\"deletedAt\":\"");
        sb_adds(&sb, t);
        sb_addc(&sb, '"');
    }
    sb_addc(&sb, '}');
    jw_raw(w, sb.p, sb.len);
}

static const char *values_key(attr_kind_t k)
{
    switch (k) {
    case ATTR_RELATIONSHIP:     return "objects";
    case ATTR_LANGUAGEPROPERTY: return "languageMaps";
    case ATTR_VOCABPROPERTY:    return "vocabs";
    case ATTR_LISTPROPERTY:     return "valueLists";
    case ATTR_LISTRELATIONSHIP: return "objectLists";
    case ATTR_JSONPROPERTY:     return "jsons";
    default:                    return "values";
    }
}

/* The value of an instance as temporalValues pairs carry it (4.5.9). */
static void wr_pair_value(json_writer_t *w, const tview_t *tv, const cr_attr_t *a)
{
    switch ((attr_kind_t)a->kind) {
    case ATTR_LANGUAGEPROPERTY:
        jw_object_begin(w);
        JW_KEY_LIT(w, "languageMap");
        jw_value(w, a->value);
        jw_object_end(w);
        break;
    case ATTR_VOCABPROPERTY:
        jw_object_begin(w);
        JW_KEY_LIT(w, "vocab");
        if (json_is_string(a->value)) jw_string(w, ld_compact(tv->v.ro.ctx, a->value->str));
        else if (json_is_array(a->value)) {
            jw_array_begin(w);
            json_foreach(el, a->value) {
                if (json_is_string(el)) jw_string(w, ld_compact(tv->v.ro.ctx, el->str));
                else jw_value(w, el);
            }
            jw_array_end(w);
        } else jw_value(w, a->value);
        jw_object_end(w);
        break;
    case ATTR_JSONPROPERTY:
        jw_object_begin(w);
        JW_KEY_LIT(w, "json");
        jw_value(w, a->value);
        jw_object_end(w);
        break;
    case ATTR_LISTRELATIONSHIP:
        jw_array_begin(w);
        if (json_is_array(a->value))
            json_foreach(el, a->value) {
                const json_t *o = json_is_object(el) ? json_get(el, "object") : el;
                jw_value(w, o);
            }
        jw_array_end(w);
        break;
    default:
        jw_value(w, a->value);
        break;
    }
}

static int64_t inst_time(const hist_instance_t *in, hist_timeprop_t tp)
{
    return hist_instance_time(in, tp);
}

/* An aggregate that is a number renders with a fraction (4.5.19). */
static void wr_aggregate(json_writer_t *w, const json_t *v, unsigned method)
{
    if (v && v->type == JSON_NUMBER && method != 0 && method != 1) {
        double d = json_number(v);
        if (d == (double)(int64_t)d && d > -1e15 && d < 1e15) {
            char buf[40];
            int  n = snprintf(buf, sizeof buf, "%.1f", d);
            jw_raw(w, buf, (size_t)n);
            return;
        }
    }
    jw_value(w, v);
}

static void wr_series_simplified(json_writer_t *w, const tview_t *tv, const ops_temporal_t *t,
                                 const hist_series_t *s)
{
    attr_kind_t kind = s->inst ? (attr_kind_t)s->inst[0].attr.kind : ATTR_PROPERTY;
    /* 4.15 with temporalValues: a LanguageProperty's languageMaps are reduced
     * to strings in the language asked for, pairs of a Property's values
     * (the string as the simplified core rendering picks it) */
    bool by_lang = kind == ATTR_LANGUAGEPROPERTY && tv->v.ro.lang && tv->fmt == TF_VALUES;
    render_opts_t kv = tv->v.ro;
    kv.format = FMT_KEYVALUES;
    if (by_lang)
        kind = ATTR_PROPERTY;
    jw_object_begin(w);
    JW_KEY_LIT(w, "type");
    jw_string(w, attr_kind_name(kind ? kind : ATTR_PROPERTY));
    if (s->dataset_id) {
        JW_KEY_LIT(w, "datasetId");
        jw_string(w, s->dataset_id);
    }
    if (tv->fmt == TF_AGGREGATED) {
        for (unsigned m = 0; m < HIST_AGGR_N; m++) {
            if (!(t->methods & (1u << m)))
                continue;
            jw_key(w, hist_aggr_name(m));
            jw_array_begin(w);
            for (size_t b = 0; b < s->n_buckets; b++) {
                const hist_bucket_t *bk = &s->buckets[b];
                jw_array_begin(w);
                if (bk->value[m]) wr_aggregate(w, bk->value[m], m);
                else jw_null(w);
                char t1[32], t2[32];
                cr_datetime_format(bk->start, t1);
                cr_datetime_format(bk->end, t2);
                jw_string(w, t1);
                jw_string(w, t2);
                jw_array_end(w);
            }
            jw_array_end(w);
        }
    } else {
        jw_key(w, values_key(kind));
        jw_array_begin(w);
        for (size_t i = 0; i < s->n; i++) {
            const hist_instance_t *in = &s->inst[i];
            char                   ts[32];
            jw_array_begin(w);
            if (by_lang)
                attr_render(w, &in->attr, &kv);
            else
                wr_pair_value(w, tv, &in->attr);
            /* an instance without the timeproperty (no observedAt): when it was recorded; never a
             * formatted "no time" (INT64_MIN) */
            int64_t at = inst_time(in, t->hq.timeprop);
            if (at == CR_NO_TIME) at = in->attr.created_at;
            if (at == CR_NO_TIME) {
                jw_null(w);
            } else {
                cr_datetime_format(at, ts);
                jw_string(w, ts);
            }
            jw_array_end(w);
        }
        jw_array_end(w);
    }
    jw_object_end(w);
}

static void wr_types(json_writer_t *w, const tview_t *tv, const hist_entity_t *e)
{
    JW_KEY_LIT(w, "type");
    if (e->n_types == 1) {
        jw_string(w, ld_compact_name(tv->v.ro.ctx, e->types[0]));
        return;
    }
    jw_array_begin(w);
    for (size_t i = 0; i < e->n_types; i++)
        jw_string(w, ld_compact_name(tv->v.ro.ctx, e->types[i]));
    jw_array_end(w);
}

static void wr_entity(request_t *r, json_writer_t *w, const tview_t *tv, const ops_temporal_t *t,
                      const hist_entity_t *e)
{
    jw_object_begin(w);
    if (shown(tv, "@id")) {
        JW_KEY_LIT(w, "id");
        jw_string(w, e->id);
    }
    if (e->n_types && shown(tv, "@type"))
        wr_types(w, tv, e);
    if (tv->v.ro.sys_attrs) {
        if (e->created_at != CR_NO_TIME && e->created_at) wr_time(w, "createdAt", e->created_at);
        if (e->modified_at != CR_NO_TIME && e->modified_at) wr_time(w, "modifiedAt", e->modified_at);
        if (e->deleted_at != CR_NO_TIME) wr_time(w, "deletedAt", e->deleted_at);
    }
    for (size_t i = 0; i < e->n_series;) {
        const char *name = e->series[i].name;
        size_t      j    = i;
        while (j < e->n_series && e->series[j].name == name)
            j++;
        if (!shown(tv, name)) {
            i = j;
            continue;
        }
        jw_key(w, ld_compact_name(tv->v.ro.ctx, name));
        if (tv->fmt == TF_VALUES || tv->fmt == TF_AGGREGATED) {
            if (j - i > 1) jw_array_begin(w);
            for (size_t k = i; k < j; k++)
                wr_series_simplified(w, tv, t, &e->series[k]);
            if (j - i > 1) jw_array_end(w);
        } else {
            jw_array_begin(w);
            for (size_t k = i; k < j; k++)
                for (size_t n = 0; n < e->series[k].n; n++)
                    wr_instance(r, w, tv, &e->series[k].inst[n]);
            jw_array_end(w);
        }
        i = j;
    }
    if (tv->v.ro.context_json) {
        JW_KEY_LIT(w, "@context");
        jw_raw(w, tv->v.ro.context_json, strlen(tv->v.ro.context_json));
    }
    jw_object_end(w);
}

/* 6.3.10: 206 with Content-Range when an attribute was cut. */
static int content_range(request_t *r, const tview_t *tv, const ops_temporal_t *t, const hist_result_t *res)
{
    if (!res->partial || res->range_first == CR_NO_TIME)
        return 200;
    const hist_query_t *q = &t->hq;
    int64_t             start, end;
    char                a[32], b[32];
    if (tv->has_last_n) {
        start = q->timerel == HIST_TIMEREL_BEFORE ? q->time_at
              : q->timerel == HIST_TIMEREL_BETWEEN ? q->end_time_at : res->range_last;
        end   = res->range_first;
    } else {
        start = q->timerel == HIST_TIMEREL_AFTER || q->timerel == HIST_TIMEREL_BETWEEN ? q->time_at
              : res->range_first;
        end   = res->range_last;
    }
    cr_datetime_format(start, a);
    cr_datetime_format(end, b);
    const char *v = tv->has_last_n ? arena_printf(r->arena, "DateTime %s-%s/%zu", a, b, q->last_n)
                                   : arena_printf(r->arena, "DateTime %s-%s/*", a, b);
    reply_header(r, "Content-Range", v);
    return 206;
}

static void answer(request_t *r, const ld_context_t *ctx, tview_t *tv, const ops_temporal_t *t,
                   const hist_result_t *res, bool array)
{
    json_writer_t w;

    api_view_context(r, ctx, &tv->v);
    int status = content_range(r, tv, t, res);
    jw_init(&w, &r->out);
    if (array) jw_array_begin(&w);
    for (size_t i = 0; i < res->n; i++)
        wr_entity(r, &w, tv, t, &res->items[i]);
    if (array) jw_array_end(&w);
    reply_body(r, status, tv->v.ctype);
}

/* ---------------------------------------------------------------- reads
 *
 * Distributed (5.7.3.4, 5.7.4.4 with 4.3.6, unless local=true): the sources
 * are asked first (fwd_temporal_read); when a registration matched, the
 * local part is read as instances (never as aggregates: the hub aggregates
 * the merged instances, as aggregates of several sources do not add up),
 * merged with the sources' (fwd_temporal_merge), then aggregated or cut to
 * the instance limit (6.3.10) as a local answer is. */

/* The local part of a distributed read (id: a retrieve; no_local: nothing to read here), merged with fo's
 * into res; origins (or NULL): where each item came from (fwd_temporal_merge). */
static bool tmerged(request_t *r, const ops_req_t *rq, const char *id, const ops_temporal_t *t,
                    const fwd_tout_t *fo, bool no_local, hist_result_t *res, uint64_t **origins, problem_t *p)
{
    ops_temporal_t lt = *t;
    hist_result_t  local = {0};
    problem_t      q = {0};
    lt.aggregated = false;
    if (t->aggregated) lt.hq.inst_limit = 0;             /* aggregates cover the whole range */
    if (!no_local &&
        !(id ? ops_temporal_retrieve(rq, id, &lt, &local, &q) : ops_temporal_query(rq, &lt, &local, &q))) {
        if (q.kind != PB_RESOURCE_NOT_FOUND && q.kind != PB_NONEXISTENT_TENANT) {
            *p = q;
            return false;
        }
        local = (hist_result_t){0};                      /* not here: the sources may have it */
    }
    fwd_temporal_merge(r->arena, &lt.hq, &local, fo, res, origins);
    if (!t->aggregated) {
        history_window(r->arena, &lt.hq, res);
        return true;
    }
    for (size_t e = 0; e < res->n; e++)
        for (size_t k = 0; k < res->items[e].n_series; k++)
            history_series_aggregate(r->arena, &lt.hq, &res->items[e].series[k], t->methods, t->period);
    return true;
}

/* Retrieve distributed: false with p set (a 508, a local failure, 404 found nowhere); *done false:
 * no registration matched (the local answer as usual). */
static bool tretrieve_fwd(request_t *r, const ld_context_t *ctx, tview_t *tv, ops_temporal_t *t, const char *id,
                          bool *done, problem_t *p)
{
    *done = false;
    if (!api_distributed(r)) return true;
    const char      *type = req_param(r, "type");
    const typesel_t *ts = NULL;
    fwd_param_t      prm[1];
    size_t           np = 0;
    if (type) {
        problem_t q = {0};
        ts = typesel_parse(r->arena, type, ctx, &q);
        prm[np++] = (fwd_param_t){"type", type};
    }
    fwd_in_t   in;
    fwd_tout_t fo;
    api_fwd_in(r, ctx, &in);
    fwd_tread_t tr = {.id = id, .params = prm, .n_params = np, .hq = &t->hq,
                      .match = {.types = ts, .ids = &id, .n_ids = 1, .attrs = t->hq.attrs, .n_attrs = t->hq.n_attrs}};
    if (!fwd_temporal_read(&in, &tr, &fo, p)) return false;
    if (fo.warning) reply_header(r, "NGSILD-Warning", fo.warning);
    if (!fo.forwarded) return true;
    *done = true;
    hist_result_t res;
    ops_req_t     rq = api_req(r, ctx);
    if (!tmerged(r, &rq, id, t, &fo, false, &res, NULL, p)) return false;
    if (!res.n)
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has no temporal evolution here nor at the "
                           "context sources registered for it", id);
    answer(r, ctx, tv, t, &res, false);
    return true;
}

void api_temporal_get(request_t *r)
{
    problem_t      p = {0};
    tview_t        tv;
    ops_temporal_t t = {0};
    hist_result_t  res;
    const char    *id = r->pathv[0];

    if (!ops_check_id(id, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!temporal_format(r, ctx, &tv, &p)) goto fail;
    if (!temporal_params(r, &tv, &t, &p)) goto fail;
    (void)req_param(r, "type");
    if (!api_no_unknown_params(r, &p)) goto fail;
    bool done;
    if (!tretrieve_fwd(r, ctx, &tv, &t, id, &done, &p)) goto fail;
    if (done) return;
    ops_req_t rq = api_req(r, ctx);
    if (!ops_temporal_retrieve(&rq, id, &t, &res, &p)) goto fail;
    answer(r, ctx, &tv, &t, &res, false);
    return;
fail:
    reply_problem(r, &p);
}

/* The sources' part of a temporal query: want entities of each source, or (only) the ids an entity map's
 * page gives each; fo->forwarded 0: nothing matched. */
static bool tquery_sources(request_t *r, const ops_req_t *rq, const ops_temporal_t *t, const ops_query_t *qy,
                           const json_t *body, size_t want, const fwd_map_page_t *only, fwd_tout_t *fo, problem_t *p)
{
    fwd_param_t prm[16];
    fwd_tread_t tr = {.hq = &t->hq, .params = prm, .want = want, .only = only};
    tr.n_params = api_fwd_selection(r, qy, body, prm, &tr.match);
    tr.match.attrs = t->hq.attrs;
    tr.match.n_attrs = t->hq.n_attrs;
    fwd_in_t in;
    api_fwd_in(r, rq->ctx, &in);
    if (!fwd_temporal_read(&in, &tr, fo, p)) return false;
    if (fo->warning) reply_header(r, "NGSILD-Warning", fo->warning);
    return true;
}

/* A query distributed: the first offset + limit (at most --maxLimit) entities here and of each source,
 * merged (local first) and paged as an entity query's (api/query.c); *done false: nothing matched. */
static bool tquery_fwd(request_t *r, const ops_req_t *rq, ops_temporal_t *t, const ops_query_t *qy,
                       const json_t *body, hist_result_t *res, bool *done, problem_t *p)
{
    *done = false;
    if (!api_distributed(r)) return true;
    size_t      cap = (size_t)cr_config.max_limit, want = qy->offset + qy->limit;
    if (!want || want > cap) want = cap;                /* limit=0&count=true: count what the sources answer */
    fwd_tout_t fo;
    if (!tquery_sources(r, rq, t, qy, body, want, NULL, &fo, p)) return false;
    if (!fo.forwarded) return true;
    *done = true;
    ops_temporal_t lt = *t;
    lt.hq.offset = 0;
    lt.hq.limit = want;
    lt.hq.want_count = false;
    if (!tmerged(r, rq, NULL, &lt, &fo, false, res, NULL, p)) return false;
    size_t from = qy->offset < res->n ? qy->offset : res->n;
    size_t to = qy->limit < res->n - from ? from + qy->limit : res->n;
    res->count = res->n;
    res->more = to < res->n;
    res->items += from;
    res->n = to - from;
    return true;
}

/* A page of a temporal query answered: NGSILD-Results-Count, the Link of the next page (at next) and the
 * previous one, the entities. */
static bool tpage_answer(request_t *r, const ld_context_t *ctx, tview_t *tv, const ops_temporal_t *t,
                         const ops_query_t *qy, const hist_result_t *res, size_t next)
{
    if (qy->count) reply_header(r, "NGSILD-Results-Count", arena_printf(r->arena, "%zu", res->count));
    if (res->more) api_page_link(r, "next", next, qy->limit, tv->v.ctype);
    if (qy->offset > 0 && qy->limit)
        api_page_link(r, "prev", qy->offset > qy->limit ? qy->offset - qy->limit : 0, qy->limit, tv->v.ctype);
    answer(r, ctx, tv, t, res, true);
    return true;
}

/* ------------------------------------------------ entity maps of temporal queries
 * (Table 6.18.3.2-1 and 6.24's entityMap, 5.14.5, 4.3.6.7, 4.5.25), as api/query.c makes and pages the maps
 * of entity queries, in the same maps (fwd/fwd_map.c): entityMap=true, or GET/POST /temporal/entityMaps
 * (6.35), makes a map of the whole result (every match here and at each source, up to --maxLimit of each:
 * each source asked once) with where each entity came from; a query naming the map in NGSILD-EntityMap
 * gets the map's slots [offset, offset + limit): the local ones read here by id, each source asked only
 * for the page's ids the map gives it (fwd_tread_t.only), and what matches no more is removed from the map
 * (kept when its source did not answer). An unknown or expired map is made anew (5.5.14). The sources are
 * not asked for maps of their own (no linkedMaps): paging through ours asks each for its ids. */
static bool tmap_make(request_t *r, const ld_context_t *ctx, tview_t *tv, ops_temporal_t *t, ops_query_t *qy,
                      const json_t *body, const api_map_req_t *mr, bool as_map, problem_t *p)
{
    ops_req_t      rq = api_req(r, ctx);
    size_t         cap = (size_t)cr_config.max_limit;
    fwd_tout_t     fo = {0};
    hist_result_t  res;
    uint64_t      *origins = NULL;
    ops_temporal_t lt = *t;
    lt.hq.offset = 0;
    lt.hq.limit = cap;
    lt.hq.want_count = false;
    if (api_distributed(r) && !tquery_sources(r, &rq, &lt, qy, body, cap, NULL, &fo, p)) return false;
    if (fo.forwarded) {
        if (!tmerged(r, &rq, NULL, &lt, &fo, false, &res, &origins, p)) return false;
    } else if (!ops_temporal_query(&rq, &lt, &res, p)) {
        return false;
    }
    size_t       n = res.n;
    const char **ids = arena_alloc(r->arena, (n + 1) * sizeof *ids);
    uint64_t    *orig = arena_alloc(r->arena, (n + 1) * sizeof *orig);
    for (size_t i = 0; i < n; i++) {
        ids[i] = res.items[i].id;
        orig[i] = origins ? origins[i] : FWD_MAP_HERE;
    }
    size_t n_regs = fo.forwarded ? fo.n_regs : 0;
    char   id[64];
    bool   kept = n_regs <= 63 && fwd_map_put(r->tenant, cr_now_us() + mr->lifetime_us, n_regs ? fo.reg_ids : NULL,
                                              NULL, n_regs, ids, orig, n, id);
    if (as_map) {
        fwd_map_page_t mp;
        if (kept && fwd_map_page(r->tenant, id, 0, SIZE_MAX, r->arena, &mp)) {
            api_entity_map_answer(r, ctx, &mp, 201);
            return true;
        }
        return problem_set(p, PB_TOO_MANY_RESULTS, "an EntityMap of %zu entities from %zu sources cannot be held "
                           "(--entityMapEntries %d; at most 63 sources)", n, n_regs, cr_config.entity_map_entries);
    }
    if (kept) reply_header(r, "NGSILD-EntityMap", arena_strdup(r->arena, id));
    else LOG_D("api: no entity map for a temporal query of %zu entities (over --entityMapEntries or 63 sources)", n);
    size_t from = qy->offset < n ? qy->offset : n, to = qy->limit < n - from ? from + qy->limit : n;
    res.count = n;
    res.more = to < n;
    res.items += from;
    res.n = to - from;
    return tpage_answer(r, ctx, tv, t, qy, &res, to);
}

static bool tmap_use(request_t *r, const ld_context_t *ctx, tview_t *tv, ops_temporal_t *t, ops_query_t *qy,
                     const json_t *body, const fwd_map_page_t *mp, problem_t *p)
{
    ops_req_t    rq = api_req(r, ctx);
    const char **lids = arena_alloc(r->arena, (mp->n + 1) * sizeof *lids);
    size_t       nl = 0;
    for (size_t i = 0; i < mp->n; i++)
        if (mp->origins[i] & FWD_MAP_HERE) lids[nl++] = mp->ids[i];
    ops_temporal_t lt = *t;                    /* here: the page's local ids, the filters checked again */
    lt.f.ids = lids;
    lt.f.n_ids = nl;
    lt.f.id_pattern = NULL;
    lt.hq.offset = 0;
    lt.hq.limit = nl ? nl : 1;
    lt.hq.want_count = false;
    fwd_tout_t    fo = {0};
    hist_result_t res = {0};
    bool          remote = api_distributed(r);
    if (remote && mp->n_regs && !tquery_sources(r, &rq, &lt, qy, body, 0, mp, &fo, p)) return false;
    if (!remote) fo.unanswered = ~FWD_MAP_HERE; /* local=true: the sources' entries are not asked, so kept */
    if (fo.forwarded) {
        if (!tmerged(r, &rq, NULL, &lt, &fo, nl == 0, &res, NULL, p)) return false;
    } else if (nl) {
        problem_t q = {0};
        if (!ops_temporal_query(&rq, &lt, &res, &q)) {
            if (q.kind != PB_RESOURCE_NOT_FOUND && q.kind != PB_NONEXISTENT_TENANT) {
                *p = q;
                return false;
            }
            res = (hist_result_t){0};
        }
    }
    /* in map order; the page's ids found nowhere (and not of a source that failed) leave the map */
    hist_entity_t *items = arena_alloc(r->arena, (mp->n + 1) * sizeof *items);
    const char   **gone = arena_alloc(r->arena, (mp->n + 1) * sizeof *gone);
    size_t         k = 0, ng = 0;
    for (size_t i = 0; i < mp->n; i++) {
        size_t j;
        for (j = 0; j < res.n && strcmp(res.items[j].id, mp->ids[i]); j++) {}
        if (j < res.n) items[k++] = res.items[j];
        else if (!(mp->origins[i] & fo.unanswered)) gone[ng++] = mp->ids[i];
    }
    fwd_map_forget(r->tenant, mp->id, qy->offset, qy->offset + qy->limit, gone, ng);
    reply_header(r, "NGSILD-EntityMap", mp->id);
    res.items = items;
    res.n = k;
    res.count = mp->live - ng;
    res.more = qy->offset + qy->limit < mp->total;
    return tpage_answer(r, ctx, tv, t, qy, &res, qy->offset + qy->limit);
}

/* The page of the map NGSILD-EntityMap names, else a new map (as_map: the map is the answer). */
static bool tmap_page(request_t *r, const ld_context_t *ctx, tview_t *tv, ops_temporal_t *t, ops_query_t *qy,
                      const json_t *body, const api_map_req_t *mr, bool as_map, problem_t *p)
{
    fwd_map_page_t mp;
    if (!as_map && mr->id && fwd_map_page(r->tenant, mr->id, qy->offset, qy->limit, r->arena, &mp))
        return tmap_use(r, ctx, tv, t, qy, body, &mp, p);
    return tmap_make(r, ctx, tv, t, qy, body, mr, as_map, p);
}

/* The page (limit, offset, count), the last check for unknown parameters,
 * the query and its answer (body: a Query's, or NULL). */
static bool query_answer(request_t *r, const ld_context_t *ctx, tview_t *tv, ops_temporal_t *t,
                         ops_query_t *qy, const json_t *body, bool as_map, problem_t *p)
{
    hist_result_t res;
    ops_req_t     rq = api_req(r, ctx);
    api_map_req_t mr;

    if (!api_query_count(r, qy, p) || !api_entity_map_params(r, !as_map, &mr, p) || !api_no_unknown_params(r, p))
        return false;
    if (as_map && t->hq.timerel == HIST_TIMEREL_NONE)
        return problem_set(p, PB_BAD_REQUEST_DATA, "creating an EntityMap for a temporal query needs the temporal "
                           "query: timerel and timeAt (5.14.5.4)");
    if (as_map) {          /* 5.14.5.3: limit ignored; the map holds every match (up to --maxLimit) */
        qy->limit = (size_t)cr_config.max_limit;
        qy->count = false;
    }
    t->f           = qy->f;
    t->sel         = qy->sel;
    t->nsel        = qy->nsel;
    t->hq.offset   = qy->offset;
    t->hq.limit    = qy->limit;
    t->hq.want_count = qy->count;
    if (t->f.n_attrs && !t->hq.n_attrs) {          /* attrs of a Query body */
        t->hq.attrs   = (const char *const *)t->f.attrs;
        t->hq.n_attrs = t->f.n_attrs;
    }
    if (as_map || mr.want) return tmap_page(r, ctx, tv, t, qy, body, &mr, as_map, p);
    bool done = false;
    if (!tquery_fwd(r, &rq, t, qy, body, &res, &done, p)) return false;
    if (!done && !ops_temporal_query(&rq, t, &res, p)) return false;
    return tpage_answer(r, ctx, tv, t, qy, &res, qy->offset + res.n);
}

static void temporal_query(request_t *r, bool as_map)
{
    problem_t      p = {0};
    tview_t        tv;
    ops_temporal_t t = {0};
    ops_query_t    qy = {0};

    /* 6.3.20: an unknown parameter is InvalidRequest before anything else */
    static api_params_t known = API_PARAMS(API_VIEW_PARAMS "," API_QUERY_PARAMS "," API_PAGE_PARAMS
                                           ",timerel,timeAt,endTimeAt,timeproperty,lastN,aggrMethods,aggrPeriodDuration"
                                           ",entityMap,entityMapLifetime");
    if (!api_params_known(r, &known, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!temporal_format(r, ctx, &tv, &p)) goto fail;
    if (!temporal_params(r, &tv, &t, &p)) goto fail;
    if (!api_query_params(r, ctx, &qy, &p)) goto fail;
    if (!query_answer(r, ctx, &tv, &t, &qy, NULL, as_map, &p)) goto fail;
    return;
fail:
    reply_problem(r, &p);
}

void api_temporal_query(request_t *r)
{
    temporal_query(r, false);
}

/* GET /temporal/entityMaps (6.35.3.1): Create EntityMap for Query Temporal Evolution of Entities (5.14.5). */
void api_temporal_entity_maps_query(request_t *r)
{
    temporal_query(r, true);
}

/* POST /temporal/entityOperations/query (6.24): a Query (5.2.23) whose
 * temporalQ (5.2.21) is required; and POST /temporal/entityMaps (as_map). */
static void temporal_batch_query(request_t *r, bool as_map)
{
    problem_t      p = {0};
    tview_t        tv;
    ops_temporal_t t = {0};
    ops_query_t    qy = {0};

    const ld_context_t *ctx;
    json_t             *body = api_body_context(r, &ctx, &p);
    if (!body) goto fail;
    if (!temporal_format(r, ctx, &tv, &p)) goto fail;
    if (!temporal_params(r, &tv, &t, &p)) goto fail;
    json_t *tq = json_remove(body, "temporalQ");
    if (!tq) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "a temporal Query needs temporalQ (5.2.23, 6.24.3.1)");
        goto fail;
    }
    if (!json_is_object(tq)) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "temporalQ must be an object (5.2.21)");
        goto fail;
    }
    /* the body's temporal query (5.2.21), over what the URI may say */
    const char *tx[4] = {0};
    static const char *const keys[4] = {"timerel", "timeAt", "endTimeAt", "timeproperty"};
    json_foreach(m, tq) {
        size_t k;
        for (k = 0; k < 4 && strcmp(m->key, keys[k]); k++) {}
        if (k == 4 && !strcmp(m->key, "lastN")) {
            if (m->type != JSON_NUMBER) {
                problem_set(&p, PB_BAD_REQUEST_DATA, "temporalQ.lastN must be a positive integer");
                goto fail;
            }
            if (!last_n(arena_printf(r->arena, "%.17g", json_number(m)), &tv, &t.hq, &p)) goto fail;
            continue;
        }
        if (k == 4) {
            problem_set(&p, PB_BAD_REQUEST_DATA, "member '%s' of temporalQ is not supported (5.2.21)", m->key);
            goto fail;
        }
        if (!json_is_string(m)) {
            problem_set(&p, PB_BAD_REQUEST_DATA, "temporalQ.%s must be a string", m->key);
            goto fail;
        }
        tx[k] = m->str;
    }
    if ((tx[0] || tx[1] || tx[2] || tx[3]) && !temporal_q(tx[0], tx[1], tx[2], tx[3], &t.hq, &p)) goto fail;
    if (!api_query_body(r, ctx, body, &qy, &tv.v, &p)) goto fail;
    if (!api_view_check(&tv.v, &p)) goto fail;
    if (tv.v.n_attrs && !t.hq.n_attrs) {
        t.hq.attrs   = (const char *const *)tv.v.attrs;
        t.hq.n_attrs = tv.v.n_attrs;
    }
    dataset_ids(&tv, &t.hq);
    if (!query_answer(r, ctx, &tv, &t, &qy, body, as_map, &p)) goto fail;
    return;
fail:
    reply_problem(r, &p);
}

void api_temporal_batch_query(request_t *r)
{
    temporal_batch_query(r, false);
}

/* POST /temporal/entityMaps (6.35.3.2, 5.14.5). */
void api_temporal_entity_maps_post(request_t *r)
{
    temporal_batch_query(r, true);
}

/* --------------------------------------------------------------- writes
 *
 * Distributed (5.6.11.4-5.6.16.4, unless local=true): the parts the
 * registrations take go to their sources first (fwd_temporal_write), the
 * rest is written here, and the answer combines the outcomes as a core
 * write's does (dwrite.c: the handler's success, a single source's error,
 * or 207 naming each failed part's registrationId). */

static bool fwd_t(request_t *r, const ld_context_t *ctx, const fwd_twrite_t *t, fwd_wout_t *out, problem_t *p)
{
    memset(out, 0, sizeof *out);
    out->local = (json_t *)t->body;
    if (!api_distributed(r)) return true;
    fwd_in_t in;
    api_fwd_in(r, ctx, &in);
    return fwd_temporal_write(&in, t, out, p);
}

void api_temporal_create(request_t *r)
{
    problem_t   p = {0};
    const char *id;
    bool        created = false;
    static api_params_t known = API_PARAMS("local");     /* 6.3.20: before the body */
    if (!api_params_known(r, &known, &p)) goto fail;
    if (!api_dw_local_param(r, &p)) goto fail;
    json_t *body = api_body(r, false, &p);
    if (!body) goto fail;
    const ld_context_t *ctx = api_context(r, body, &p);
    if (!ctx) goto fail;
    ops_req_t     rq = api_req(r, ctx);
    fwd_wout_t    out = {.local = body};
    const json_t *jid = json_get(body, "id");
    if (json_is_string(jid) && ops_check_id(jid->str, &(problem_t){0})) {
        fwd_twrite_t t = {.kind = FWD_T_UPSERT, .id = jid->str, .body = body};
        if (!fwd_t(r, ctx, &t, &out, &p)) goto fail;
    }
    if (out.n_sent) {
        problem_t lp = {0};
        bool      ok = out.local_skip || ops_temporal_create(&rq, out.local, &created, &id, &lp);
        for (size_t i = 0; i < out.n_sent; i++) created = created || out.sent[i].status == 201;
        if (!api_reply_dwrite(r, jid->str, !out.local_skip, ok, &lp, &out)) {
            if (created) api_reply_created(r, "/ngsi-ld/v1/temporal/entities/", jid->str);
            else reply_status(r, 204);
        }
        return;
    }
    if (!ops_temporal_create(&rq, body, &created, &id, &p)) goto fail;
    if (created) api_reply_created(r, "/ngsi-ld/v1/temporal/entities/", id);
    else reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

/* What every write by id reads first: the body (when body is not NULL),
 * the id, local, no unknown parameter, the @context; then the operation's
 * request. */
static bool write_req(request_t *r, json_t **body, ops_req_t *rq, problem_t *p)
{
    if (body && !(*body = api_body(r, false, p))) return false;
    if (!ops_check_id(r->pathv[0], p)) return false;
    if (!api_dw_local_param(r, p)) return false;
    if (!api_no_unknown_params(r, p)) return false;
    const ld_context_t *ctx = api_context(r, body ? *body : NULL, p);
    if (!ctx) return false;
    *rq = api_req(r, ctx);
    return true;
}

/* A temporal write by id (t's kind, id and what the path names), forwarded
 * then done here by `local` (on what the registrations left, out->local)
 * unless nothing is left; 204, or the combined answer. */
typedef bool (*twrite_fn)(const ops_req_t *rq, request_t *r, const json_t *body, problem_t *p);

static void twrite(request_t *r, fwd_twrite_t *t, bool with_body, twrite_fn local)
{
    problem_t  p = {0};
    ops_req_t  rq;
    json_t    *body = NULL;
    fwd_wout_t out;

    if (!write_req(r, with_body ? &body : NULL, &rq, &p)) goto fail;
    /* what the path names is checked before anything is forwarded */
    if (t->attr_path && !ops_check_attr_name(t->attr_path, false, &p)) goto fail;
    if (t->instance && !model_valid_uri(t->instance)) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "the instanceId %s is not a URI", t->instance);
        goto fail;
    }
    t->id   = r->pathv[0];
    t->body = body;
    if (t->attr_path) t->attr = ld_expand(rq.ctx, t->attr_path);
    api_dw_types_t ty = {.r = r, .ctx = rq.ctx, .id = t->id};
    t->types_of = api_dw_local_types;
    t->types_ud = &ty;
    if (!fwd_t(r, rq.ctx, t, &out, &p)) goto fail;
    if (out.n_sent) {
        problem_t lp = {0};
        bool      ok = out.local_skip || local(&rq, r, out.local, &lp);
        bool      more = t->kind == FWD_T_DELETE ? api_reply_dwrite(r, t->id, !out.local_skip, ok, &lp, &out)
                                                 : api_reply_dwrite_attrs(r, rq.ctx, !out.local_skip, ok, &lp, NULL,
                                                                          &out);
        if (!more) reply_status(r, 204);
        return;
    }
    if (!local(&rq, r, body, &p)) goto fail;
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

static bool l_delete(const ops_req_t *rq, request_t *r, const json_t *body, problem_t *p)
{
    (void)body;
    return ops_temporal_delete(rq, r->pathv[0], p);
}

void api_temporal_delete(request_t *r)
{
    (void)req_param(r, "type");
    twrite(r, &(fwd_twrite_t){.kind = FWD_T_DELETE}, false, l_delete);
}

static bool l_append(const ops_req_t *rq, request_t *r, const json_t *body, problem_t *p)
{
    return ops_temporal_attrs_append(rq, r->pathv[0], body, p);
}

void api_temporal_attrs_append(request_t *r)
{
    twrite(r, &(fwd_twrite_t){.kind = FWD_T_APPEND}, true, l_append);
}

static bool l_attr_delete(const ops_req_t *rq, request_t *r, const json_t *body, problem_t *p)
{
    const char *ds = req_param(r, "datasetId"), *all = req_param(r, "deleteAll");
    (void)body;
    return ops_temporal_attr_delete(rq, r->pathv[0], r->pathv[1], ds, all && !strcmp(all, "true"), p);
}

void api_temporal_attr_delete(request_t *r)
{
    problem_t   p = {0};
    const char *ds = req_param(r, "datasetId");
    const char *all = req_param(r, "deleteAll");

    if (all && strcmp(all, "true") && strcmp(all, "false"))
        problem_set(&p, PB_BAD_REQUEST_DATA, "deleteAll must be true or false");
    else if (ds && !model_valid_uri(ds))
        problem_set(&p, PB_BAD_REQUEST_DATA, "datasetId must be a URI");
    if (p.kind) {
        reply_problem(r, &p);
        return;
    }
    twrite(r, &(fwd_twrite_t){.kind = FWD_T_DELETE_ATTR, .attr_path = r->pathv[1]}, false, l_attr_delete);
}

static bool l_instance_modify(const ops_req_t *rq, request_t *r, const json_t *body, problem_t *p)
{
    return ops_temporal_instance_modify(rq, r->pathv[0], r->pathv[1], r->pathv[2], body, p);
}

void api_temporal_instance_patch(request_t *r)
{
    twrite(r, &(fwd_twrite_t){.kind = FWD_T_MODIFY_INSTANCE, .attr_path = r->pathv[1], .instance = r->pathv[2]},
           true, l_instance_modify);
}

static bool l_instance_delete(const ops_req_t *rq, request_t *r, const json_t *body, problem_t *p)
{
    (void)body;
    return ops_temporal_instance_delete(rq, r->pathv[0], r->pathv[1], r->pathv[2], p);
}

void api_temporal_instance_delete(request_t *r)
{
    twrite(r, &(fwd_twrite_t){.kind = FWD_T_DELETE_INSTANCE, .attr_path = r->pathv[1], .instance = r->pathv[2]},
           false, l_instance_delete);
}
