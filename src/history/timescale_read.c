/*
 * timescale_read.c - history in PostgreSQL: the temporal query (history.h's
 * hist_query_t), aggregation in SQL, entity info, the temporal deletes and
 * instance modification. The writes and the connection are timescale.c's.
 *
 * Every call first waits for the queue to be written (hts_flush): a temporal
 * read or delete sees every write answered before it began, and a delete
 * cannot be overtaken by instances still queued for the same entity.
 *
 * A query walks the tenant's entity rows in creation order (seq, in pages of
 * HTS_ENT_PAGE; the ids of f go into the SQL), evaluates f with
 * filter_match() on the entity's current version in the store (an entity
 * that is not there any more, deleted or from before a restart, is tested as
 * its id and types alone, so q, geo and scope do not match it), then reads
 * the selected instances of each matching entity with one statement: the
 * timerel over the timeproperty's column, attrs and datasetIds, and lastN and
 * the instance limit as row numbers over each series (window functions), in
 * the order history.h asks for. Aggregation is the same walk with a GROUP BY
 * per period (periods start at each series' first selected instance); avg
 * and stddev are computed here from count, sum and sum of squares, as
 * history.c does for the corDB backend, so both backends answer the same
 * numbers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "timescale.h"
#include "../json/json.h"
#include "../model/codec.h"

#define HTS_ENT_PAGE 512            /* entity rows read per statement */
#define HTS_STR_(x)  #x
#define HTS_STR(x)   HTS_STR_(x)

static const char *const time_col[] = {
    [HIST_TP_OBSERVED_AT] = "observed_at", [HIST_TP_CREATED_AT] = "created_at",
    [HIST_TP_MODIFIED_AT] = "modified_at", [HIST_TP_DELETED_AT] = "deleted_at",
};

/* The time an instance is selected and ordered by (hist_query_time): the
 * timeproperty's column; without timerel, observedAt falls back to
 * createdAt. tcond: deletedAt instances only under timeproperty=deletedAt. */
static const char *tcol(const hist_query_t *q)
{
    /* observedAt: the expression of the series index (coraine_instances_series),
     * which is observed_at itself whenever that is set */
    if (q->timeprop == HIST_TP_OBSERVED_AT || q->timeprop > HIST_TP_DELETED_AT)
        return "coalesce(observed_at, created_at)";
    return time_col[q->timeprop];
}

static const char *tcond(const hist_query_t *q)
{
    if (q->timeprop == HIST_TP_DELETED_AT)
        return "deleted_at IS NOT NULL";
    if (q->timeprop == HIST_TP_OBSERVED_AT && q->timerel != HIST_TIMEREL_NONE)
        return "deleted_at IS NULL AND observed_at IS NOT NULL";
    return "deleted_at IS NULL";
}

static int64_t get_time(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? CR_NO_TIME : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* A JSON array of strings, for `= ANY(ARRAY(SELECT json_array_elements_text($n::json)))`. */
static const char *json_list(arena_t *a, const char *const *s, size_t n, bool none_is_default)
{
    sbuf_t sb;

    sb_init(&sb, a, 64);
    sb_addc(&sb, '[');
    for (size_t i = 0; i < n; i++) {
        const char *v = s[i] && !(none_is_default && !strcmp(s[i], "@none")) ? s[i] : "";

        if (i)
            sb_addc(&sb, ',');
        json_render_string(&sb, v, strlen(v));
    }
    sb_addc(&sb, ']');
    return sb.p;
}

/* Interned strings of a JSON array text (array_to_json of a text[]). */
static bool json_names(arena_t *a, const char *text, const char *const **out, size_t *n)
{
    json_t      *j = json_parse_copy(a, text, strlen(text), NULL, NULL, 0);
    const char **v;
    size_t       k = 0;

    if (!json_is_array(j))
        return false;
    v = arena_alloc(a, (j->len + 1) * sizeof(*v));
    for (json_t *c = j->child; c; c = c->next)
        if (json_is_string(c))
            v[k++] = intern(c->str, c->len);
    *out = v;
    *n   = k;
    return true;
}

/* ------------------------------------------------------ one instance */

static bool read_instance(arena_t *a, const PGresult *r, int row, hist_instance_t *in)
{
    cr_attr_t  *at = &in->attr;
    const char *ds = PQgetvalue(r, row, 1);

    memset(in, 0, sizeof(*in));
    at->name        = intern_cstr(PQgetvalue(r, row, 0));
    at->dataset_id  = *ds ? arena_strdup(a, ds) : NULL;
    in->instance_id = strtoull(PQgetvalue(r, row, 2), NULL, 10);
    at->kind        = (uint8_t)atoi(PQgetvalue(r, row, 3));
    in->deleted_at  = get_time(r, row, 10);
    if (!PQgetisnull(r, row, 4)) {
        const char *v = PQgetvalue(r, row, 4);

        at->value = json_parse_copy(a, v, (size_t)PQgetlength(r, row, 4), NULL, NULL, 0);
        if (!at->value)
            return false;
    } else {
        /* a deleted Scope's value is [] (history.h: HIST_KIND_SCOPE) */
        at->value = hist_deleted_value(a, at->name == MN.scope ? (attr_kind_t)HIST_KIND_SCOPE
                                                               : (attr_kind_t)at->kind);
    }
    at->unit_code   = PQgetisnull(r, row, 5) ? NULL : arena_strdup(a, PQgetvalue(r, row, 5));
    at->object_type = PQgetisnull(r, row, 6) ? NULL : intern_cstr(PQgetvalue(r, row, 6));
    at->observed_at = get_time(r, row, 7);
    at->created_at  = get_time(r, row, 8);
    at->modified_at = get_time(r, row, 9);
    if (!PQgetisnull(r, row, 11)) {
        size_t         n;
        unsigned char *raw = PQunescapeBytea((const unsigned char *)PQgetvalue(r, row, 11), &n);
        cr_entity_t   *holder = raw ? entity_decode(a, raw, n) : NULL;

        PQfreemem(raw);
        if (!holder)
            return false;
        at->sub   = holder->attrs;
        at->n_sub = holder->n_attrs;
    }
    return true;
}

/* ------------------------------------------------- the statement's text */

typedef struct sel_sql {
    const char *params[8];
    int         n;
    sbuf_t      where;          /* the WHERE of coraine_instances for one entity */
    sbuf_t      series;         /* the attrs and datasetIds, on the series list s */
    sbuf_t      times;          /* the time conditions alone */
} sel_sql_t;

/* $1 tenant, $2 entity id, then attrs, datasetIds and the times. */
static void build_where(arena_t *a, const hist_query_t *q, const char *tenant, sel_sql_t *s)
{
    const char *tc = tcol(q);

    s->params[0] = tenant;
    s->params[1] = NULL;        /* per entity */
    s->n         = 2;
    sb_init(&s->series, a, 128);
    sb_init(&s->times, a, 128);
    sb_adds(&s->series, "TRUE");
    sb_printf(&s->times, "%s AND %s IS NOT NULL", tcond(q), tc);
    if (q->n_attrs) {
        s->params[s->n++] = json_list(a, q->attrs, q->n_attrs, false);
        sb_printf(&s->series, " AND attr = ANY(ARRAY(SELECT json_array_elements_text($%d::json)))",
                  s->n);
    }
    if (q->n_dataset_ids) {
        s->params[s->n++] = json_list(a, q->dataset_ids, q->n_dataset_ids, true);
        sb_printf(&s->series,
                  " AND dataset_id = ANY(ARRAY(SELECT json_array_elements_text($%d::json)))", s->n);
    }
    if (q->timerel != HIST_TIMEREL_NONE) {
        s->params[s->n++] = arena_printf(a, "%lld", (long long)q->time_at);
        sb_printf(&s->times, " AND %s %s $%d::bigint", tc,
                  q->timerel == HIST_TIMEREL_BEFORE ? "<" : ">=", s->n);
        if (q->timerel == HIST_TIMEREL_BETWEEN) {
            s->params[s->n++] = arena_printf(a, "%lld", (long long)q->end_time_at);
            sb_printf(&s->times, " AND %s < $%d::bigint", tc, s->n);
        }
    }
    sb_init(&s->where, a, 256);
    sb_printf(&s->where, "tenant = $1 AND entity_id = $2 AND %s AND %s", s->series.p, s->times.p);
}

/* The series of one entity (attr, dataset_id), read from the series index
 * one step at a time (a loose index scan: O(series x log n), not a pass
 * over every instance), filtered by attrs and datasetIds. */
#define HTS_SERIES_CTE                                                                         \
    "WITH RECURSIVE s0(attr, dataset_id) AS ((SELECT attr, dataset_id FROM coraine_instances" \
    " WHERE tenant = $1 AND entity_id = $2 ORDER BY attr, dataset_id LIMIT 1) UNION ALL"      \
    " SELECT n.attr, n.dataset_id FROM s0, LATERAL (SELECT attr, dataset_id FROM"             \
    " coraine_instances WHERE tenant = $1 AND entity_id = $2 AND (attr, dataset_id) >"       \
    " (s0.attr, s0.dataset_id) ORDER BY attr, dataset_id LIMIT 1) n),"                        \
    " s AS (SELECT * FROM s0 WHERE %s)"

/* The instances of one entity: per series (in the order of the index), the
 * selected instances ascending by time, read through the series index: the
 * first ones (inst_limit + 1 of them, to see whether the limit cuts), or with
 * lastN the last ones, read backwards. */
static const char *instances_sql(arena_t *a, const hist_query_t *q, const sel_sql_t *s)
{
    const char *tc = tcol(q);
    sbuf_t      sb;
    size_t      take = 0;
    bool        back = q->last_n > 0;

    if (q->attrs_only)
        take = 1;
    else if (back)
        take = q->inst_limit && q->inst_limit < q->last_n ? q->inst_limit + 1 : q->last_n;
    else if (q->inst_limit)
        take = q->inst_limit + 1;
    sb_init(&sb, a, 1536);
    sb_printf(&sb, HTS_SERIES_CTE, s->series.p);
    sb_printf(&sb,
              " SELECT i.attr, i.dataset_id, i.iid, i.kind, i.value, i.unit_code, i.object_type,"
              " i.observed_at, i.created_at, i.modified_at, i.deleted_at, i.sub, i.t FROM s,"
              " LATERAL (SELECT attr, dataset_id, iid, kind, value, unit_code, object_type,"
              " observed_at, created_at, modified_at, deleted_at, sub, %s AS t FROM"
              " coraine_instances WHERE tenant = $1 AND entity_id = $2 AND attr = s.attr AND"
              " dataset_id = s.dataset_id AND %s ORDER BY %s%s, iid%s",
              tc, s->times.p, tc, back ? " DESC" : "", back ? " DESC" : "");
    if (take)
        sb_printf(&sb, " LIMIT %zu", take);
    sb_adds(&sb, ") i ORDER BY i.attr, i.dataset_id, i.t, i.iid");
    return sb.p;
}

/* ------------------------------------------------- walking the entities */

typedef struct walk {
    hts_t              *h;
    PGconn             *c;
    const char         *tenant;
    const hist_query_t *q;
    arena_t            *a;
    hist_result_t      *out;
    sel_sql_t           sql;
    const char         *inst_sql;
    unsigned            methods;    /* aggregation: its methods */
    int64_t             period;
    size_t              cap;
} walk_t;

static void unref_entity(void *e)
{
    entity_unref(e);
}

/* Does the entity's current version (or, deleted, its id and types) pass the
 * query's filter? ver (orderBy): gets that version, kept until the arena goes. */
static bool entity_matches(walk_t *w, const char *id, const char *const *types, size_t n_types,
                           const cr_entity_t **ver)
{
    entity_filter_t f;
    cr_entity_t    *e, *stub;
    bool            ok;

    if (!w->q->f)
        return true;
    f         = *w->q->f;
    f.attrs   = NULL;
    f.n_attrs = 0;
    e = store_get(hts_store(w->h), w->tenant, id, NULL);
    if (!e) {
        stub          = arena_calloc(w->a, sizeof(*stub));
        stub->id      = id;
        stub->types   = (const char **)types;
        stub->n_types = (uint16_t)n_types;
    }
    ok = filter_match(&f, e ? e : stub);
    if (ok && ver) {
        *ver = e ? e : stub;
        if (e) arena_on_free(w->a, unref_entity, e);
    } else if (e)
        entity_unref(e);
    return ok;
}

/* Runs one entity's statement; ent gets room for a series per row (at most
 * one series per row), none filled yet. */
static PGresult *series_rows(walk_t *w, hist_entity_t *ent, const char *sql, int n,
                             const char *const *params, int *rows, problem_t *p)
{
    PGresult *r = hts_query(w->c, sql, n, params, PGRES_TUPLES_OK, p);

    if (!r)
        return NULL;
    *rows         = PQntuples(r);
    ent->series   = arena_calloc(w->a, (size_t)(*rows ? *rows : 1) * sizeof(*ent->series));
    ent->n_series = 0;
    return r;
}

/* Drops series k's extra row (the one past the instance limit: the last
 * forwards, the first backwards) and marks it cut. */
static void series_cut(const hist_query_t *q, hist_series_t *sr)
{
    size_t keep = q->inst_limit;

    if (q->attrs_only || !keep || sr->n <= keep)
        return;
    if (q->last_n && q->last_n <= keep)
        return;
    if (q->last_n)
        memmove(sr->inst, sr->inst + (sr->n - keep), keep * sizeof(*sr->inst));
    sr->n   = keep;
    sr->cut = true;
}

/* The instances of one entity into ent's series (in the index's order: by
 * name, then datasetId); false with p on a failure. */
static bool fill_instances(walk_t *w, hist_entity_t *ent, problem_t *p)
{
    const hist_query_t *q = w->q;
    PGresult           *r;
    int                 rows;
    hist_series_t      *cur = NULL;

    w->sql.params[1] = ent->id;
    if (!(r = series_rows(w, ent, w->inst_sql, w->sql.n, w->sql.params, &rows, p)))
        return false;
    for (int i = 0; i < rows; i++) {
        hist_instance_t in;

        if (!read_instance(w->a, r, i, &in)) {
            PQclear(r);
            return problem_set(p, PB_INTERNAL_ERROR, "history (PostgreSQL): an instance of %.200s "
                               "cannot be read back", ent->id);
        }
        if (!cur || cur->name != in.attr.name ||
            !(cur->dataset_id == in.attr.dataset_id ||
              (cur->dataset_id && in.attr.dataset_id &&
               !strcmp(cur->dataset_id, in.attr.dataset_id)))) {
            if (cur)
                series_cut(q, cur);
            cur             = &ent->series[ent->n_series++];
            cur->name       = in.attr.name;
            cur->dataset_id = in.attr.dataset_id;
            cur->inst       = arena_alloc(w->a, (size_t)(rows - i) * sizeof(*cur->inst));
            cur->n          = 0;
        }
        if (!q->attrs_only)
            cur->inst[cur->n++] = in;
    }
    if (cur)
        series_cut(q, cur);
    PQclear(r);
    return true;
}

/* Where the last period ends, as history.c's history_aggregate has it (PT0S:
 * the whole range of the query, as far as it is bounded). */
static int64_t range_end(const hist_query_t *q, int64_t first, int64_t last)
{
    int64_t end = q->timerel == HIST_TIMEREL_BETWEEN ? q->end_time_at
                : q->timerel == HIST_TIMEREL_BEFORE ? q->time_at : last;

    (void)first;
    return end < last ? last : end;
}

/* The periods of one entity's series, aggregated in SQL. */
static bool fill_aggregates(walk_t *w, hist_entity_t *ent, problem_t *p)
{
    const hist_query_t *q = w->q;
    const char         *tc = tcol(q);
    const char         *params[9];
    sbuf_t              sb;
    PGresult           *r;
    int                 rows, np = w->sql.n;
    hist_series_t      *cur = NULL;

    memcpy(params, w->sql.params, (size_t)np * sizeof(*params));
    params[1]    = ent->id;
    params[np++] = arena_printf(w->a, "%lld", (long long)w->period);
    sb_init(&sb, w->a, 2048);
    /* Per series (the loose index scan of the series): its selected
     * instances read through the series index (with lastN: the last ones,
     * backwards), their first and last time (min/max: from the index), then
     * one GROUP BY per period, no join. Only what the methods need: a
     * distinct count sorts the values, the text min/max reads them. */
    const char *x = arena_printf(w->a, "(SELECT iid, %s AS t, value, num FROM coraine_instances"
                                 " WHERE tenant = $1 AND entity_id = $2 AND attr = s.attr AND"
                                 " dataset_id = s.dataset_id AND %s ORDER BY %s DESC, iid DESC%s) z",
                                 tc, w->sql.times.p, tc,
                                 q->last_n ? arena_printf(w->a, " LIMIT %zu", q->last_n) : "");
    sb_printf(&sb, HTS_SERIES_CTE, w->sql.series.p);
    sb_printf(&sb,
              " SELECT s.attr, s.dataset_id, fl.first, fl.last, g.* FROM s"
              " CROSS JOIN LATERAL (SELECT min(z.t) AS first, max(z.t) AS last FROM %s) fl"
              " CROSS JOIN LATERAL (SELECT CASE WHEN $%d::bigint > 0 THEN fl.first +"
              " ((z.t - fl.first) / $%d::bigint) * $%d::bigint ELSE fl.first END AS start,"
              " count(*), %s, count(z.num), sum(z.num), min(z.num), max(z.num),"
              " sum(z.num * z.num), %s, %s FROM %s GROUP BY 1) g"
              " WHERE fl.first IS NOT NULL ORDER BY s.attr, s.dataset_id, g.start",
              x, np, np, np,
              w->methods & HIST_AGGR_DISTINCT_COUNT ? "count(DISTINCT z.value::jsonb)" : "0",
              w->methods & (HIST_AGGR_MIN | HIST_AGGR_MAX)
                  ? "min(z.value #>> '{}') FILTER (WHERE json_typeof(z.value) = 'string')" : "NULL",
              w->methods & (HIST_AGGR_MIN | HIST_AGGR_MAX)
                  ? "max(z.value #>> '{}') FILTER (WHERE json_typeof(z.value) = 'string')" : "NULL",
              x);
    if (!(r = series_rows(w, ent, sb.p, np, params, &rows, p)))
        return false;
    for (int i = 0; i < rows; i++) {
        const char    *name = intern_cstr(PQgetvalue(r, i, 0));
        const char    *ds   = PQgetvalue(r, i, 1);
        int64_t        first = get_time(r, i, 2), last = get_time(r, i, 3);
        int64_t        start = get_time(r, i, 4), end = range_end(q, first, last);
        long long      nnum  = strtoll(PQgetvalue(r, i, 7), NULL, 10);
        hist_bucket_t *b;

        if (!cur || cur->name != name || strcmp(cur->dataset_id ? cur->dataset_id : "", ds)) {
            cur             = &ent->series[ent->n_series++];
            cur->name       = name;
            cur->dataset_id = *ds ? arena_strdup(w->a, ds) : NULL;
            cur->buckets    = arena_calloc(w->a, (size_t)(rows - i) * sizeof(*cur->buckets));
        }
        b        = &cur->buckets[cur->n_buckets++];
        b->start = start;
        b->end   = w->period > 0 ? start + w->period : end;
        if (w->period > 0 && b->end > end && q->timerel == HIST_TIMEREL_BETWEEN)
            b->end = end;
        if (w->methods & HIST_AGGR_TOTAL_COUNT)
            b->value[0] = json_new_int(w->a, strtoll(PQgetvalue(r, i, 5), NULL, 10));
        if (w->methods & HIST_AGGR_DISTINCT_COUNT)
            b->value[1] = json_new_int(w->a, strtoll(PQgetvalue(r, i, 6), NULL, 10));
        if (nnum) {
            double sum = strtod(PQgetvalue(r, i, 8), NULL), sumsq = strtod(PQgetvalue(r, i, 11), NULL);
            double avg = sum / (double)nnum, var = sumsq / (double)nnum - avg * avg;

            if (w->methods & HIST_AGGR_SUM)    b->value[2] = json_new_number(w->a, sum);
            if (w->methods & HIST_AGGR_AVG)    b->value[3] = json_new_number(w->a, avg);
            if (w->methods & HIST_AGGR_MIN)
                b->value[4] = json_new_number(w->a, strtod(PQgetvalue(r, i, 9), NULL));
            if (w->methods & HIST_AGGR_MAX)
                b->value[5] = json_new_number(w->a, strtod(PQgetvalue(r, i, 10), NULL));
            if (w->methods & HIST_AGGR_STDDEV) b->value[6] = json_new_number(w->a, sqrt(var > 0 ? var : 0));
            if (w->methods & HIST_AGGR_SUMSQ)  b->value[7] = json_new_number(w->a, sumsq);
        } else {
            if ((w->methods & HIST_AGGR_MIN) && !PQgetisnull(r, i, 12))
                b->value[4] = json_new_string(w->a, arena_strdup(w->a, PQgetvalue(r, i, 12)));
            if ((w->methods & HIST_AGGR_MAX) && !PQgetisnull(r, i, 13))
                b->value[5] = json_new_string(w->a, arena_strdup(w->a, PQgetvalue(r, i, 13)));
        }
    }
    PQclear(r);
    return true;
}

/* Walks the tenant's entities in creation order and fills out (history.h's
 * steps 1, 6 and 7), each matching one with fill(). */
static bool walk(walk_t *w, bool (*fill)(walk_t *, hist_entity_t *, problem_t *), problem_t *p)
{
    const hist_query_t *q = w->q;
    const char         *params[3];
    const char         *sql;
    /* orderBy (5.7.4.4, as for the entity query): every matching entity is
     * collected with its current version, then ordered and paged */
    const entity_order_t *order = q->f ? q->f->order_by : NULL;
    const cr_entity_t  **ver = NULL;
    size_t              limit = order ? SIZE_MAX : q->limit, skip = order ? 0 : q->offset;
    long long           last_seq = 0;
    bool                ok = true, done = false;

    params[0] = w->tenant;
    params[2] = NULL;
    if (q->f && q->f->n_ids) {
        params[2] = json_list(w->a, (const char *const *)q->f->ids, q->f->n_ids, false);
        sql = "SELECT seq, entity_id, array_to_json(types), created_at, modified_at, deleted_at"
              " FROM coraine_entities WHERE tenant = $1 AND seq > $2::bigint"
              " AND entity_id = ANY(ARRAY(SELECT json_array_elements_text($3::json)))"
              " ORDER BY seq LIMIT " HTS_STR(HTS_ENT_PAGE);
    } else {
        sql = "SELECT seq, entity_id, array_to_json(types), created_at, modified_at, deleted_at"
              " FROM coraine_entities WHERE tenant = $1 AND seq > $2::bigint"
              " ORDER BY seq LIMIT " HTS_STR(HTS_ENT_PAGE);
    }
    w->cap            = limit < 64 ? limit : 64;
    w->out->items     = arena_alloc(w->a, (w->cap ? w->cap : 1) * sizeof(*w->out->items));
    if (order) ver = arena_alloc(w->a, w->cap * sizeof(*ver));
    filter_regex_reset();
    while (ok && !done) {
        PGresult *r;
        int       rows;

        params[1] = arena_printf(w->a, "%lld", last_seq);
        r = hts_query(w->c, sql, params[2] ? 3 : 2, params, PGRES_TUPLES_OK, p);
        if (!r)
            return false;
        rows = PQntuples(r);
        for (int i = 0; ok && i < rows && !done; i++) {
            hist_entity_t ent = { 0 };

            last_seq       = strtoll(PQgetvalue(r, i, 0), NULL, 10);
            ent.id         = arena_strdup(w->a, PQgetvalue(r, i, 1));
            if (!json_names(w->a, PQgetvalue(r, i, 2), &ent.types, &ent.n_types))
                continue;
            ent.created_at  = get_time(r, i, 3);
            ent.modified_at = get_time(r, i, 4);
            ent.deleted_at  = get_time(r, i, 5);
            const cr_entity_t *v = NULL;
            if (!entity_matches(w, ent.id, ent.types, ent.n_types, order ? &v : NULL))
                continue;
            if (!(ok = fill(w, &ent, p)))
                break;
            if (!ent.n_series && !q->attrs_only)
                continue;                       /* no instance left (5.7.3.4) */
            if (skip) {
                skip--;
                w->out->count++;
                continue;
            }
            if (w->out->n < limit) {
                if (w->out->n == w->cap) {
                    hist_entity_t *g = arena_alloc(w->a, 2 * w->cap * sizeof(*g));

                    memcpy(g, w->out->items, w->cap * sizeof(*g));
                    w->out->items = g;
                    if (ver) {
                        const cr_entity_t **gv = arena_alloc(w->a, 2 * w->cap * sizeof(*gv));
                        memcpy(gv, ver, w->cap * sizeof(*gv));
                        ver = gv;
                    }
                    w->cap *= 2;
                }
                if (ver) ver[w->out->n] = v;
                w->out->items[w->out->n++] = ent;
            } else {
                w->out->more = true;
                if (!q->want_count)
                    done = true;
            }
            w->out->count++;
        }
        PQclear(r);
        if (rows < HTS_ENT_PAGE)
            break;
    }
    if (ok && order)
        history_order_page(w->a, order, q, ver, w->out);
    if (ok && filter_regex_overflow(p))
        ok = false;
    return ok;
}

static bool walk_start(walk_t *w, void *be, const char *tenant, const hist_query_t *q,
                       arena_t *a, hist_result_t *out, problem_t *p)
{
    memset(out, 0, sizeof(*out));
    memset(w, 0, sizeof(*w));
    w->h      = be;
    w->tenant = tenant;
    w->q      = q;
    w->a      = a;
    w->out    = out;
    if (!hts_flush(w->h, p) || !(w->c = hts_conn_get(w->h, p)))
        return false;
    build_where(a, q, tenant, &w->sql);
    return true;
}

bool hts_be_query(void *be, const char *tenant, const hist_query_t *q, arena_t *a,
                  hist_result_t *out, problem_t *p)
{
    walk_t w;
    bool   ok;

    if (!walk_start(&w, be, tenant, q, a, out, p))
        return false;
    w.inst_sql = instances_sql(a, q, &w.sql);
    ok = walk(&w, fill_instances, p);
    hts_conn_put(w.h, w.c, !ok);
    return ok;
}

bool hts_be_aggregate(void *be, const char *tenant, const hist_query_t *q, unsigned methods,
                      int64_t period, arena_t *a, hist_result_t *out, problem_t *p)
{
    walk_t w;
    bool   ok;

    if (!walk_start(&w, be, tenant, q, a, out, p))
        return false;
    w.methods = methods;
    w.period  = period;
    ok = walk(&w, fill_aggregates, p);
    hts_conn_put(w.h, w.c, !ok);
    out->partial = false;
    return ok;
}

/* ------------------------------------------------------ entity records */

bool hts_be_entity_info(void *be, const char *tenant, const char *id, arena_t *a,
                        const char *const **types, size_t *n_types)
{
    hts_t      *h = be;
    const char *params[2] = { tenant, id };
    PGconn     *c;
    PGresult   *r;
    bool        ok = false;

    if (!hts_flush(h, NULL) || !(c = hts_conn_get(h, NULL)))
        return false;
    r = hts_query(c, "SELECT array_to_json(types) FROM coraine_entities WHERE tenant = $1"
                     " AND entity_id = $2", 2, params, PGRES_TUPLES_OK, NULL);
    if (r && PQntuples(r) == 1)
        ok = json_names(a, PQgetvalue(r, 0, 0), types, n_types);
    PQclear(r);
    hts_conn_put(h, c, !r);
    return ok;
}

/* Runs a statement that deletes or updates; *rows: how many it touched. */
static bool change_rows(hts_t *h, const char *sql, int n, const char *const *params,
                        long long *rows, problem_t *p)
{
    PGconn   *c;
    PGresult *r;

    if (!hts_flush(h, p) || !(c = hts_conn_get(h, p)))
        return false;
    r = hts_query(c, sql, n, params, PGRES_COMMAND_OK, p);
    if (r)
        *rows = atoll(PQcmdTuples(r));
    PQclear(r);
    hts_conn_put(h, c, !r);
    return r != NULL;
}

bool hts_be_delete_entity(void *be, const char *tenant, const char *id, problem_t *p)
{
    const char *params[2] = { tenant, id };
    long long   n = 0;

    if (!change_rows(be, "WITH i AS (DELETE FROM coraine_instances WHERE tenant = $1 AND"
                         " entity_id = $2) DELETE FROM coraine_entities WHERE tenant = $1 AND"
                         " entity_id = $2", 2, params, &n, p))
        return false;
    return n ? true : problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %.300s has no history", id);
}

bool hts_be_delete_attr(void *be, const char *tenant, const char *id, const char *name,
                        const char *dataset_id, bool delete_all, problem_t *p)
{
    const char *params[4] = { tenant, id, name, dataset_id ? dataset_id : "" };
    long long   n = 0;

    if (!change_rows(be, delete_all
                         ? "DELETE FROM coraine_instances WHERE tenant = $1 AND entity_id = $2"
                           " AND attr = $3"
                         : "DELETE FROM coraine_instances WHERE tenant = $1 AND entity_id = $2"
                           " AND attr = $3 AND dataset_id = $4",
                     delete_all ? 3 : 4, params, &n, p))
        return false;
    return n ? true : problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %.300s has no history of "
                                  "attribute %.300s%s%.200s", id, name,
                                  dataset_id ? " with datasetId " : "", dataset_id ? dataset_id : "");
}

bool hts_be_delete_instance(void *be, const char *tenant, const char *id, const char *name,
                            uint64_t instance_id, problem_t *p)
{
    char        iid[24];
    const char *params[4] = { tenant, id, name, iid };
    long long   n = 0;

    snprintf(iid, sizeof iid, "%llu", (unsigned long long)instance_id);
    if (!change_rows(be, "DELETE FROM coraine_instances WHERE iid = $4::bigint AND tenant = $1"
                         " AND entity_id = $2 AND attr = $3", 4, params, &n, p))
        return false;
    return n ? true : problem_set(p, PB_RESOURCE_NOT_FOUND, "attribute %.300s of %.300s has no "
                                  "instance %llu", name, id, (unsigned long long)instance_id);
}

bool hts_be_modify_instance(void *be, const char *tenant, const char *id, const char *name,
                            uint64_t instance_id, const cr_attr_t *with, int64_t now,
                            problem_t *p)
{
    hts_t      *h = be;
    char        iid[24], kind[8], nowt[24], num[40], obs[24];
    const char *params[12];
    sbuf_t      value, sub, tmp;
    PGconn     *c;
    PGresult   *r;
    double      v;
    bool        ok = false;

    snprintf(iid, sizeof iid, "%llu", (unsigned long long)instance_id);
    snprintf(kind, sizeof kind, "%d", with->kind);
    snprintf(nowt, sizeof nowt, "%lld", (long long)now);
    if (!hts_flush(h, p) || !(c = hts_conn_get(h, p)))
        return false;
    params[0] = tenant;
    params[1] = id;
    params[2] = name;
    params[3] = iid;
    r = hts_query(c, "SELECT dataset_id FROM coraine_instances WHERE iid = $4::bigint AND"
                     " tenant = $1 AND entity_id = $2 AND attr = $3", 4, params,
                  PGRES_TUPLES_OK, p);
    if (!r)
        goto out;
    if (PQntuples(r) != 1) {
        problem_set(p, PB_RESOURCE_NOT_FOUND, "attribute %.300s of %.300s has no instance %llu",
                    name, id, (unsigned long long)instance_id);
        goto out;
    }
    if (strcmp(PQgetvalue(r, 0, 0), with->dataset_id ? with->dataset_id : "")) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the instance's datasetId is '%.200s', not '%.200s': "
                    "an instance keeps its datasetId", PQgetvalue(r, 0, 0),
                    with->dataset_id ? with->dataset_id : "");
        goto out;
    }
    PQclear(r);
    r = NULL;
    sb_init(&value, NULL, 128);
    sb_init(&sub, NULL, 64);
    sb_init(&tmp, NULL, 64);
    if (with->value) {
        sb_clear(&tmp);
        json_render(&value, with->value);
    }
    if (with->n_sub)
        hts_put_sub_hex(&sub, &tmp, with, false);
    if (hts_num_of(with, &v) && isfinite(v))
        snprintf(num, sizeof num, "%.17g", v);
    params[4]  = kind;
    params[5]  = with->value ? value.p : NULL;
    params[6]  = hts_num_of(with, &v) && isfinite(v) ? num : NULL;
    params[7]  = with->unit_code;
    params[8]  = with->object_type;
    snprintf(obs, sizeof obs, "%lld", (long long)with->observed_at);
    params[9]  = with->observed_at == CR_NO_TIME ? NULL : obs;
    params[10] = with->n_sub ? sub.p : NULL;
    params[11] = nowt;
    r = hts_query(c, "UPDATE coraine_instances SET kind = $5::smallint, value = $6::json,"
                     " num = $7::float8, unit_code = $8, object_type = $9,"
                     " observed_at = $10::bigint, sub = $11::bytea, modified_at = $12::bigint,"
                     " deleted_at = NULL WHERE iid = $4::bigint AND tenant = $1 AND"
                     " entity_id = $2 AND attr = $3", 12, params, PGRES_COMMAND_OK, p);
    ok = r != NULL;
    sb_release(&value);
    sb_release(&sub);
    sb_release(&tmp);
out:
    PQclear(r);
    hts_conn_put(h, c, !ok && PQstatus(c) != CONNECTION_OK);
    return ok;
}
