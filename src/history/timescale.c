/*
 * timescale.c - history in PostgreSQL (--history timescale, history.h's
 * history_timescale): the connection, the schema, the bounded queue and the
 * writer thread that COPYs it in batches. Reads are in timescale_read.c.
 *
 * The request thread never talks to PostgreSQL for a write. Room first:
 * ops/ admits every write before it runs (ops_admit -> history_reserve ->
 * hts_reserve), which waits up to --historyQueueTimeout while the queued and
 * reserved writes fill --historyQueueSize, and then fails with 503: nothing
 * is applied. The room is held for the whole write call, during which
 * history.c's hook appends the write's history (append never waits, never
 * drops), then given back. So a write is answered only once its history is
 * queued, and a full queue slows writers and then refuses them instead of
 * losing history. A purge's chunks are not admitted: they are queued
 * beyond the bound rather than waited for.
 *
 * The queue is a list of batches of COPY text: append formats its rows
 * (instances, and one entity row per write for the staging table) straight
 * into the open batch, under the queue's mutex (a few hundred bytes of text;
 * history.c's pointers are valid only during the call, so they are copied
 * anyway, and text is the most compact copy). A batch closes at HTS_BATCH
 * writes or HTS_BATCH_BYTES; the writer thread takes the oldest one (or the
 * open one when it has nothing else), COPYs it into coraine_instances,
 * upserts the entity rows through the session's staging table, and commits,
 * in one transaction. The queue bound (--historyQueueSize writes) counts the
 * batch being written too: its room comes back after the COMMIT. Batches
 * are recycled, so a steady stream allocates nothing.
 *
 * When PostgreSQL fails, the batch is kept and retried after reconnecting
 * (backoff 50 ms .. 5 s); writes queue meanwhile up to the bound, then get
 * 503. Exactly once: each batch carries this writer's next batch number,
 * and its transaction advances the writer's row of coraine_writers only
 * past a smaller number; a retry of a batch that PostgreSQL committed
 * before the connection was lost finds its number there and writes nothing.
 * At stop, the writer writes what is queued for at most the drain time
 * while PostgreSQL answers; what is left then is logged as lost.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "timescale.h"
#include "../json/json.h"
#include "../model/codec.h"

#define HTS_BATCH        2048       /* writes per COPY transaction */
#define HTS_BATCH_BYTES  (4u << 20) /* COPY text per batch */
#define HTS_POOL         8          /* idle connections kept for reads */
#define HTS_BACKOFF_MAX  5000       /* ms between two reconnection attempts */
#define HTS_DRAIN_MS     10000      /* ms to write the queue at stop */
#define HTS_SEEN_MAX     (1u << 20) /* entities whose types the writer remembers */

typedef struct hts_batch {
    struct hts_batch *next;
    sbuf_t            copy;         /* rows of coraine_instances (upsert: of coraine_ustage) */
    sbuf_t            stage;        /* rows of coraine_stage (entity rows) */
    uint32_t          n_writes, n_rows;
    uint64_t          number;       /* the writer's batch number (0: not taken yet) */
    bool              upsert;       /* writes with hist_write_t.upsert, alone in their batch */
} hts_batch_t;

struct hts {
    char            *uri;
    store_t         *store;
    pthread_mutex_t  mu;
    pthread_cond_t   has_work;      /* writer: a batch has writes, or stop */
    pthread_cond_t   has_room;      /* writers: used + reserved shrank; flushers: written grew */
    hts_batch_t     *head, *tail;   /* the queue; tail is the open batch */
    hts_batch_t     *free_list;
    sbuf_t           tmp;           /* under mu: a value's JSON, an encoding */
    uint32_t         cap;           /* --historyQueueSize */
    uint64_t         used;          /* writes queued or being written */
    uint64_t         reserved;      /* room promised to writes not yet appended */
    uint64_t         queued, written, instances;
    uint64_t         batches, failures, reserve_timeouts;
    _Atomic uint64_t dropped;       /* by the bounds (the writer adds, stats reads) */
    int64_t          retention;     /* --historyRetention in µs (0: none) */
    bool             stop, connected, hypertable;
    int64_t          drain_deadline_ms;
    pthread_t        thread;
    bool             thread_started;
    PGconn          *wconn;         /* the writer's connection */
    char             writer_id[24]; /* this process's row of coraine_writers (random) */
    uint64_t         batch_number;  /* the last batch number taken (the writer thread's) */
    /* under mu: (tenant, id) hash -> hash of the types last written in an
     * entity row (0: empty slot), so that a write that changes neither the
     * types nor the entity's existence adds no entity row (seen_has) */
    uint64_t        *seen_keys, *seen_vals;
    size_t           seen_cap, seen_n;
    pthread_mutex_t  pool_mu;
    PGconn          *pool[HTS_POOL];
    int              n_pool;
};

/* ------------------------------------------------------------ helpers */

static bool pg_fail(problem_t *p, const char *what, PGconn *c)
{
    const char *m = c ? PQerrorMessage(c) : "";
    size_t      n = strlen(m);

    while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
        n--;
    problem_set(p, PB_HTTP, "history (PostgreSQL): %s: %.*s", what, (int)n, m);
    if (p)
        p->status = 503;
    return false;
}

bool hts_exec(PGconn *c, const char *sql, problem_t *p)
{
    PGresult      *r  = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    bool           ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;

    PQclear(r);
    return ok || pg_fail(p, "statement failed", c);
}

PGresult *hts_query(PGconn *c, const char *sql, int n, const char *const *params,
                    ExecStatusType want, problem_t *p)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);

    if (PQresultStatus(r) == want)
        return r;
    if (PQstatus(c) == CONNECTION_BAD) {
        /* a pooled connection whose server went away (a restart): once more
         * on a new session (the statement did not run on the dead one) */
        PQclear(r);
        PQreset(c);
        r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) == want)
            return r;
    }
    pg_fail(p, "query failed", c);
    PQclear(r);
    return NULL;
}

store_t *hts_store(hts_t *h)
{
    return h->store;
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static int queue_timeout_ms(void)
{
    return cr_config.history_queue_timeout_ms > 0 ? cr_config.history_queue_timeout_ms : 0;
}

/* --------------------------------------------------------- the schema */

/* An upsert batch (history.h: hist_write_t.upsert) is applied from
 * coraine_ustage as if row by row in its order: an instance with an
 * observedAt its series already has (not a deletion) replaces the first of
 * them (keeping its iid and createdAt, modifiedAt = the write's time) and
 * the others at that time go; any other is appended. Set by set, four
 * statements for the whole batch (one round trip): the rows are grouped by
 * (series, observedAt) into coraine_ugroup with the series' existing
 * instance at that time (one probe of the series index per group); then the
 * others at that time are deleted, the existing ones take their group's
 * last row, and the new ones (a group's last row with its first row's
 * createdAt) and the deletions are inserted in the batch's order. */
#define HTS_ICOLS "tenant, entity_id, attr, dataset_id, kind, value, num, unit_code, object_type," \
                  " observed_at, created_at, modified_at, deleted_at, sub"
#define HTS_KEY_U "c.tenant = u.tenant AND c.entity_id = u.entity_id AND c.attr = u.attr AND"    \
                  " c.dataset_id = u.dataset_id AND coalesce(c.observed_at, c.created_at) ="      \
                  " u.observed_at AND c.observed_at IS NOT NULL AND c.deleted_at IS NULL"
static const char *const upsert_sql =
    "INSERT INTO coraine_ugroup"
    " SELECT u.*, (SELECT min(c.iid) FROM coraine_instances c WHERE " HTS_KEY_U ")"
    " FROM (SELECT tenant, entity_id, attr, dataset_id, observed_at, min(ord) AS first_ord,"
    "  max(ord) AS last_ord, count(*) AS n FROM coraine_ustage"
    "  WHERE observed_at IS NOT NULL AND deleted_at IS NULL GROUP BY 1, 2, 3, 4, 5) u;"
    "DELETE FROM coraine_instances c USING coraine_ugroup u WHERE u.t IS NOT NULL AND " HTS_KEY_U
    " AND c.iid <> u.t;"
    "UPDATE coraine_instances c SET kind = r.kind, value = r.value, num = r.num,"
    " unit_code = r.unit_code, object_type = r.object_type, sub = r.sub, modified_at = r.at"
    " FROM coraine_ugroup u JOIN coraine_ustage r ON r.ord = u.last_ord"
    " WHERE u.t IS NOT NULL AND c.iid = u.t;"
    "INSERT INTO coraine_instances (" HTS_ICOLS ")"
    " SELECT " HTS_ICOLS " FROM ("
    "  SELECT r.tenant, r.entity_id, r.attr, r.dataset_id, r.kind, r.value, r.num, r.unit_code,"
    "   r.object_type, r.observed_at, f.created_at,"
    "   CASE WHEN u.n > 1 THEN r.at ELSE r.modified_at END AS modified_at, r.deleted_at, r.sub,"
    "   u.first_ord AS o"
    "  FROM coraine_ugroup u JOIN coraine_ustage r ON r.ord = u.last_ord"
    "   JOIN coraine_ustage f ON f.ord = u.first_ord WHERE u.t IS NULL"
    "  UNION ALL SELECT " HTS_ICOLS ", ord FROM coraine_ustage"
    "  WHERE observed_at IS NULL OR deleted_at IS NOT NULL) x ORDER BY o";

static const char *const schema_sql =
    "CREATE TABLE IF NOT EXISTS coraine_instances ("
    " tenant text NOT NULL, entity_id text NOT NULL, attr text NOT NULL,"
    " dataset_id text NOT NULL DEFAULT '', iid bigint GENERATED ALWAYS AS IDENTITY,"
    " kind smallint NOT NULL, value json, num double precision, unit_code text,"
    " object_type text, observed_at bigint, created_at bigint NOT NULL,"
    " modified_at bigint NOT NULL, deleted_at bigint, sub bytea);"
    "CREATE TABLE IF NOT EXISTS coraine_entities ("
    " tenant text NOT NULL, entity_id text NOT NULL, types text[] NOT NULL,"
    " created_at bigint NOT NULL, modified_at bigint NOT NULL, deleted_at bigint,"
    " seq bigint GENERATED ALWAYS AS IDENTITY, PRIMARY KEY (tenant, entity_id));"
    "CREATE INDEX IF NOT EXISTS coraine_entities_seq ON coraine_entities (tenant, seq);"
    "CREATE INDEX IF NOT EXISTS coraine_instances_series ON coraine_instances"
    " (tenant, entity_id, attr, dataset_id, (coalesce(observed_at, created_at)), iid);"
    "CREATE INDEX IF NOT EXISTS coraine_instances_iid ON coraine_instances (iid);"
    "CREATE TABLE IF NOT EXISTS coraine_writers ("
    " writer bigint PRIMARY KEY, last_batch bigint NOT NULL, started_at timestamptz NOT NULL DEFAULT now());";

/* Creates what is missing, one broker at a time (an advisory lock: brokers
 * may share a database). The hypertable path only when the extension is
 * installed in this database (pg_extension). */
static bool hts_schema(hts_t *h, PGconn *c, problem_t *p)
{
    PGresult *r;
    bool      ok;

    if (!hts_exec(c, "BEGIN; SELECT pg_advisory_xact_lock(7306101163)", p))
        return false;
    r = PQexec(c, "SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'");
    h->hypertable = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    PQclear(r);
    ok = hts_exec(c, schema_sql, p);
    if (ok && h->hypertable) {
        /* integer time (µs): one chunk a day (86,400,000,000 µs) */
        PGresult *hr = PQexec(c, "SELECT create_hypertable('coraine_instances', 'modified_at',"
                                 " chunk_time_interval => 86400000000, if_not_exists => true,"
                                 " migrate_data => true)");
        ok = PQresultStatus(hr) == PGRES_TUPLES_OK;
        PQclear(hr);
        if (!ok)
            pg_fail(p, "the timescaledb extension is installed in this database (pg_extension), but"
                       " making coraine_instances a hypertable failed", c);
    } else if (ok)
        ok = hts_exec(c, "CREATE INDEX IF NOT EXISTS coraine_instances_brin ON coraine_instances"
                         " USING brin (modified_at)", p);
    if (!ok) {
        PQclear(PQexec(c, "ROLLBACK"));
        return false;
    }
    return hts_exec(c, "COMMIT", p);
}

/* A session as the broker uses it, with its staging tables (they need the
 * schema: at start it is made first, with stage false). */
static PGconn *hts_connect_as(hts_t *h, bool stage, problem_t *p)
{
    PGconn *c = PQconnectdb(h->uri);

    if (PQstatus(c) != CONNECTION_OK) {
        pg_fail(p, "cannot connect (--historyURI)", c);
        PQfinish(c);
        return NULL;
    }
    /* enable_seqscan off: every statement of ours is written for the series
     * index; with the statistics of a table that just grew (or of a staging
     * table, which has none) the planner may otherwise prefer reading every
     * instance of every tenant (measured: the upserts of a 100,000-instance
     * load went quadratic). Tables without an index are still read whole.
     * jit off: such a plan's cost (1e10 per disabled scan) is above
     * jit_above_cost, and compiling it took longer than running it (the
     * upsert of a three-row batch: seconds). */
    if (!hts_exec(c, "SET client_min_messages = warning; SET application_name = 'coraine';"
                     " SET enable_seqscan = off; SET jit = off", p) ||
        (stage && !hts_exec(c,
                     " CREATE TEMP TABLE IF NOT EXISTS coraine_stage (ord int, tenant text,"
                     " entity_id text, types text[], at bigint, deleted boolean)"
                     " ON COMMIT DELETE ROWS;"
                     " CREATE TEMP TABLE IF NOT EXISTS coraine_ustage (ord int, at bigint,"
                     " LIKE coraine_instances) ON COMMIT DELETE ROWS;"
                     " CREATE TEMP TABLE IF NOT EXISTS coraine_ugroup (tenant text, entity_id text,"
                     " attr text, dataset_id text, observed_at bigint, first_ord int, last_ord int,"
                     " n bigint, t bigint) ON COMMIT DELETE ROWS", p))) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

static PGconn *hts_connect(hts_t *h, problem_t *p)
{
    return hts_connect_as(h, true, p);
}

PGconn *hts_conn_get(hts_t *h, problem_t *p)
{
    PGconn *c = NULL;

    pthread_mutex_lock(&h->pool_mu);
    if (h->n_pool)
        c = h->pool[--h->n_pool];
    pthread_mutex_unlock(&h->pool_mu);
    if (c && PQstatus(c) != CONNECTION_OK) {
        PQfinish(c);
        c = NULL;
    }
    return c ? c : hts_connect_as(h, false, p);    /* reads need no staging tables */
}

void hts_conn_put(hts_t *h, PGconn *c, bool bad)
{
    if (!c)
        return;
    if (!bad && PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE) {
        pthread_mutex_lock(&h->pool_mu);
        if (h->n_pool < HTS_POOL) {
            h->pool[h->n_pool++] = c;
            c = NULL;
        }
        pthread_mutex_unlock(&h->pool_mu);
    }
    if (c)
        PQfinish(c);
}

/* -------------------------------------------------------- the admission */

static bool queue_full(hts_t *h, problem_t *p)
{
    h->reserve_timeouts++;
    problem_set(p, PB_HTTP, "the history queue for PostgreSQL is full (--historyQueueSize %u, "
                "waited --historyQueueTimeout %d ms): nothing of this write was applied; retry "
                "later", h->cap, queue_timeout_ms());
    if (p)
        p->status = 503;
    return false;
}

/* Waits (mu held) until n more writes fit beside the queued and reserved
 * ones; false at the deadline or at stop. */
static bool wait_room(hts_t *h, uint64_t n, const struct timespec *ts)
{
    while (!h->stop && h->used + h->reserved + n > h->cap)
        if (pthread_cond_timedwait(&h->has_room, &h->mu, ts) == ETIMEDOUT)
            return !h->stop && h->used + h->reserved + n <= h->cap;
    return !h->stop;
}

static bool hts_reserve(void *be, const char *tenant, size_t n, problem_t *p)
{
    hts_t          *h = be;
    struct timespec ts;
    bool            ok;

    (void)tenant;
    if (n > h->cap)
        return problem_set(p, PB_BAD_REQUEST_DATA, "this write may commit %zu changes, more "
                           "than --historyQueueSize (%u) can hold", n, h->cap);
    deadline_in(&ts, queue_timeout_ms());
    pthread_mutex_lock(&h->mu);
    ok = wait_room(h, n, &ts);
    if (ok)
        h->reserved += n;
    else
        queue_full(h, p);
    pthread_mutex_unlock(&h->mu);
    return ok;
}

static void hts_unreserve(void *be, const char *tenant, size_t n)
{
    hts_t *h = be;

    (void)tenant;
    pthread_mutex_lock(&h->mu);
    h->reserved -= n <= h->reserved ? n : h->reserved;
    pthread_cond_broadcast(&h->has_room);
    pthread_mutex_unlock(&h->mu);
}


/* ------------------------------------------------------ COPY text rows */

/* COPY's text format: backslash, tab, newline and CR escaped. */
static void copy_esc(sbuf_t *sb, const char *s, size_t n)
{
    size_t from = 0;

    for (size_t i = 0; i < n; i++) {
        const char *e;

        switch (s[i]) {
        case '\\': e = "\\\\"; break;
        case '\t': e = "\\t"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        default: continue;
        }
        sb_add(sb, s + from, i - from);
        sb_add(sb, e, 2);
        from = i + 1;
    }
    sb_add(sb, s + from, n - from);
}

static void col_str(sbuf_t *sb, const char *s)
{
    if (s)
        copy_esc(sb, s, strlen(s));
    else
        sb_add(sb, "\\N", 2);
    sb_addc(sb, '\t');
}

static void col_time(sbuf_t *sb, int64_t t, char end)
{
    if (t == CR_NO_TIME)
        sb_add(sb, "\\N", 2);
    else
        sb_addi(sb, t);
    sb_addc(sb, end);
}

void hts_put_value(sbuf_t *sb, sbuf_t *tmp, const cr_attr_t *at)
{
    sb_clear(tmp);
    json_render(tmp, at->value);
    copy_esc(sb, tmp->p, tmp->len);
}

bool hts_num_of(const cr_attr_t *at, double *v)
{
    const json_t *j = at->value;

    if (!j)
        return false;
    if (j->type == JSON_NUMBER)
        *v = json_number(j);
    else if (j->type == JSON_TRUE || j->type == JSON_FALSE)
        *v = j->type == JSON_TRUE;      /* booleans count as 0/1, arrays by their size (history.h) */
    else if (j->type == JSON_ARRAY)
        *v = j->len;
    else
        return false;
    return true;
}

/* The sub-attributes as an attribute-only entity in codec.h's encoding, as
 * the text of a bytea (\x, hex; in COPY text the backslash doubled). */
void hts_put_sub_hex(sbuf_t *sb, sbuf_t *tmp, const cr_attr_t *at, bool copy)
{
    static const char  hex[] = "0123456789abcdef";
    static const char *types[1] = { "_" };
    cr_entity_t        holder = { .id = "", .types = types, .n_types = 1, .attrs = at->sub,
                                  .n_attrs = at->n_sub };

    sb_clear(tmp);
    entity_encode(tmp, &holder);
    sb_add(sb, copy ? "\\\\x" : "\\x", copy ? 3 : 2);
    for (size_t i = 0; i < tmp->len; i++) {
        sb_addc(sb, hex[(uint8_t)tmp->p[i] >> 4]);
        sb_addc(sb, hex[(uint8_t)tmp->p[i] & 15]);
    }
}

/* One instance row; in an upsert batch (coraine_ustage) led by its order in
 * the batch and the write's time. */
static void put_instance(hts_t *h, hts_batch_t *b, const char *tenant, const hist_write_t *w,
                         const hist_instance_t *in)
{
    const cr_attr_t *at  = &in->attr;
    bool             del = in->deleted_at != CR_NO_TIME;
    sbuf_t          *sb  = &b->copy;
    double           v;

    if (b->upsert) {
        sb_addi(sb, b->n_rows);
        sb_addc(sb, '\t');
        col_time(sb, w->at, '\t');
    }
    b->n_rows++;
    col_str(sb, tenant);
    col_str(sb, w->id);
    col_str(sb, at->name);
    col_str(sb, at->dataset_id ? at->dataset_id : "");
    if (b->upsert)
        sb_add(sb, "0\t", 2);                   /* iid: the INSERT gives it */
    sb_addi(sb, at->kind);
    sb_addc(sb, '\t');
    if (!del && at->value)
        hts_put_value(sb, &h->tmp, at);
    else
        sb_add(sb, "\\N", 2);
    sb_addc(sb, '\t');
    if (!del && hts_num_of(at, &v) && isfinite(v))
        json_render_number(sb, v);
    else
        sb_add(sb, "\\N", 2);
    sb_addc(sb, '\t');
    col_str(sb, at->unit_code);
    col_str(sb, at->object_type);
    col_time(sb, at->observed_at, '\t');
    col_time(sb, at->created_at, '\t');
    col_time(sb, at->modified_at, '\t');
    col_time(sb, in->deleted_at, '\t');
    if (at->n_sub && !del)
        hts_put_sub_hex(sb, &h->tmp, at, true);
    else
        sb_add(sb, "\\N", 2);
    sb_addc(sb, '\n');
}

/* The entity row: the types as a text[] literal ({"a","b"}, " and \
 * escaped, then COPY-escaped). */
static void put_entity(hts_t *h, hts_batch_t *b, const char *tenant, const hist_write_t *w)
{
    sbuf_t *sb = &b->stage, *t = &h->tmp;

    sb_addi(sb, b->n_writes);       /* ord: the last row of an entity in the batch wins */
    sb_addc(sb, '\t');
    col_str(sb, tenant);
    col_str(sb, w->id);
    sb_clear(t);
    sb_addc(t, '{');
    for (size_t i = 0; i < w->n_types; i++) {
        if (i)
            sb_addc(t, ',');
        sb_addc(t, '"');
        for (const char *c = w->types[i]; *c; c++) {
            if (*c == '"' || *c == '\\')
                sb_addc(t, '\\');
            sb_addc(t, *c);
        }
        sb_addc(t, '"');
    }
    sb_addc(t, '}');
    copy_esc(sb, t->p, t->len);
    sb_addc(sb, '\t');
    col_time(sb, w->at, '\t');
    sb_adds(sb, w->entity_deleted ? "t\n" : "f\n");
}

/* ----------------------------------------------- entity rows, when needed */

static uint64_t types_hash(const hist_write_t *w)
{
    uint64_t v = 0x9e3779b97f4a7c15ULL ^ w->n_types;

    for (size_t i = 0; i < w->n_types; i++)
        v = cr_hash_u64(v ^ cr_hash_ptr(w->types[i]));   /* interned: the pointer names it */
    return v | 1;
}

static size_t seen_slot(const hts_t *h, uint64_t key)
{
    size_t i = (size_t)key & (h->seen_cap - 1);

    while (h->seen_keys[i] && h->seen_keys[i] != key)
        i = (i + 1) & (h->seen_cap - 1);
    return i;
}

static void seen_grow(hts_t *h)
{
    uint64_t *ok = h->seen_keys, *ov = h->seen_vals;
    size_t    oc = h->seen_cap;

    h->seen_cap  = oc ? oc * 2 : 4096;
    h->seen_n    = 0;
    if (h->seen_cap > HTS_SEEN_MAX) {      /* forget everything: costs one entity row each */
        h->seen_cap = 4096;
        oc          = 0;
    }
    h->seen_keys = cr_xcalloc(h->seen_cap, sizeof(*h->seen_keys));
    h->seen_vals = cr_xcalloc(h->seen_cap, sizeof(*h->seen_vals));
    for (size_t i = 0; i < oc; i++)
        if (ok[i]) {
            size_t j = seen_slot(h, ok[i]);

            h->seen_keys[j] = ok[i];
            h->seen_vals[j] = ov[i];
            h->seen_n++;
        }
    free(ok);
    free(ov);
}

/* Whether w needs an entity row (mu held): a new entity (to this process),
 * new types, or a deletion, or the first write after one. The entity row's
 * modifiedAt is therefore the time of its last such write (doc/history.md). */
static bool entity_row_needed(hts_t *h, const char *tenant, const hist_write_t *w)
{
    uint64_t key = (cr_hash(tenant, strlen(tenant)) * 31 + cr_hash(w->id, strlen(w->id))) | 1;
    uint64_t val = w->entity_deleted ? 2 : types_hash(w);    /* 2: deleted (never a types hash) */
    size_t   i;

    if (h->seen_n * 10 >= h->seen_cap * 7)
        seen_grow(h);
    i = seen_slot(h, key);
    if (h->seen_keys[i] && h->seen_vals[i] == val && !w->entity_deleted)
        return false;
    if (!h->seen_keys[i])
        h->seen_n++;
    h->seen_keys[i] = key;
    h->seen_vals[i] = val;
    return true;
}

/* The open batch (mu held), a new one when it is full or of the other kind
 * (upsert writes are applied by other statements: batches keep the order). */
static hts_batch_t *open_batch(hts_t *h, bool upsert)
{
    hts_batch_t *b = h->tail;

    if (b && b->upsert == upsert && b->n_writes < HTS_BATCH && b->copy.len < HTS_BATCH_BYTES)
        return b;
    if ((b = h->free_list)) {
        h->free_list = b->next;
    } else {
        b = cr_xcalloc(1, sizeof(*b));
        sb_init(&b->copy, NULL, 1 << 16);
        sb_init(&b->stage, NULL, 1 << 14);
    }
    b->next   = NULL;
    b->upsert = upsert;
    if (h->tail)
        h->tail->next = b;
    else
        h->head = b;
    h->tail = b;
    return b;
}

/* history.h's append: every write of ops/ was admitted (hts_reserve) before
 * it ran and holds its room while its history is appended here, so an
 * append never waits and never fails; a purge's chunks (not admitted) are
 * queued too, beyond the bound if need be, rather than lost or stalled. */
static bool hts_append(void *be, const char *tenant, const hist_write_t *w, size_t n,
                       problem_t *p)
{
    hts_t *h = be;

    (void)p;
    if (!n)
        return true;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < n; i++) {
        hts_batch_t *b = open_batch(h, w[i].upsert);

        for (size_t k = 0; k < w[i].n_inst; k++)
            put_instance(h, b, tenant, &w[i], &w[i].inst[k]);
        if (entity_row_needed(h, tenant, &w[i]))
            put_entity(h, b, tenant, &w[i]);
        b->n_writes++;
        h->instances += w[i].n_inst;
    }
    h->used   += n;
    h->queued += n;
    pthread_cond_signal(&h->has_work);
    pthread_mutex_unlock(&h->mu);
    return true;
}

bool hts_flush(hts_t *h, problem_t *p)
{
    struct timespec ts;
    uint64_t        want;
    bool            ok = true;
    int             ms = queue_timeout_ms() + 1000;

    deadline_in(&ts, ms);
    pthread_mutex_lock(&h->mu);
    want = h->queued;
    while (ok && h->written < want)
        if (pthread_cond_timedwait(&h->has_room, &h->mu, &ts) == ETIMEDOUT)
            ok = h->written >= want;
    pthread_mutex_unlock(&h->mu);
    if (!ok) {
        problem_set(p, PB_HTTP, "history: PostgreSQL has not taken the queued writes within "
                    "%d ms; retry later", ms);
        if (p)
            p->status = 503;
    }
    return ok;
}

/* --------------------------------------------------------- the writer */

static bool copy_into(PGconn *c, const char *sql, const sbuf_t *data, problem_t *p)
{
    PGresult *r  = PQexec(c, sql);
    bool      ok = PQresultStatus(r) == PGRES_COPY_IN;

    PQclear(r);
    if (ok)
        ok = PQputCopyData(c, data->p, (int)data->len) == 1 && PQputCopyEnd(c, NULL) == 1;
    while ((r = PQgetResult(c))) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            ok = false;
        PQclear(r);
    }
    return ok || pg_fail(p, "COPY failed", c);
}

static const char *const entity_sql =
    "INSERT INTO coraine_entities (tenant, entity_id, types, created_at, modified_at,"
    " deleted_at)"
    " SELECT tenant, entity_id, types, at, at, CASE WHEN deleted THEN at END FROM"
    " (SELECT DISTINCT ON (tenant, entity_id) tenant, entity_id, types, at, deleted,"
    "  min(ord) OVER (PARTITION BY tenant, entity_id) AS first_ord FROM coraine_stage"
    "  ORDER BY tenant, entity_id, ord DESC) s"
    " ORDER BY first_ord"          /* new entities take their seq in commit order */
    " ON CONFLICT (tenant, entity_id) DO UPDATE SET types = EXCLUDED.types,"
    " created_at = CASE WHEN coraine_entities.deleted_at IS NOT NULL"
    "  AND EXCLUDED.deleted_at IS NULL THEN EXCLUDED.created_at"
    "  ELSE coraine_entities.created_at END,"
    " modified_at = EXCLUDED.modified_at, deleted_at = EXCLUDED.deleted_at";


/* The bounds (history.h: after the writes, on the series written), in the
 * batch's transaction: the series are those of the rows past the largest
 * iid before the batch, and of the upserted rows. --historyRetention drops
 * the instances whose observedAt (else createdAt) is older, but never a
 * series' newest; --historyMaxInstances keeps the newest by observedAt
 * (else createdAt). */
#define HTS_SERIES_WRITTEN(upsert)                                                           \
    "WITH k AS (SELECT DISTINCT tenant, entity_id, attr, dataset_id FROM coraine_instances"  \
    " WHERE iid > $1::bigint" upsert ")"
#define HTS_SERIES_EQ(a, b) a ".tenant = " b ".tenant AND " a ".entity_id = " b ".entity_id AND " \
                            a ".attr = " b ".attr AND " a ".dataset_id = " b ".dataset_id"
#define HTS_RETENTION_SQL(upsert) HTS_SERIES_WRITTEN(upsert)                                 \
    " DELETE FROM coraine_instances c USING k WHERE " HTS_SERIES_EQ("c", "k")                 \
    " AND coalesce(c.observed_at, c.created_at) < $2::bigint AND c.iid < (SELECT max(m.iid)" \
    " FROM coraine_instances m WHERE " HTS_SERIES_EQ("m", "k") ")"
#define HTS_MAXINST_SQL(upsert) HTS_SERIES_WRITTEN(upsert)                                   \
    ", d AS (SELECT iid FROM (SELECT c.iid, row_number() OVER (PARTITION BY c.tenant,"         \
    " c.entity_id, c.attr, c.dataset_id ORDER BY coalesce(c.observed_at, c.created_at) DESC,"   \
    " c.iid DESC) AS rn FROM coraine_instances c"  \
    " JOIN k USING (tenant, entity_id, attr, dataset_id)) x WHERE rn > $2::bigint)"           \
    " DELETE FROM coraine_instances c USING d WHERE c.iid = d.iid"
#define HTS_USTAGE_SERIES " UNION SELECT tenant, entity_id, attr, dataset_id FROM coraine_ustage"

static bool bound(hts_t *h, PGconn *c, const char *sql, const char *before, long long arg,
                  problem_t *p)
{
    char        a[24];
    const char *params[2] = { before, a };
    PGresult   *r;

    snprintf(a, sizeof a, "%lld", arg);
    if (!(r = hts_query(c, sql, 2, params, PGRES_COMMAND_OK, p)))
        return false;
    atomic_fetch_add_explicit(&h->dropped, strtoull(PQcmdTuples(r), NULL, 10),
                              memory_order_relaxed);
    PQclear(r);
    return true;
}

static bool write_bounds(hts_t *h, PGconn *c, const hts_batch_t *b, const char *before,
                         problem_t *p)
{
    if (h->retention &&
        !bound(h, c, b->upsert ? HTS_RETENTION_SQL(HTS_USTAGE_SERIES) : HTS_RETENTION_SQL(""),
               before, (long long)(cr_now_us() - h->retention), p))
        return false;
    if (cr_config.history_max_instances > 0 &&
        !bound(h, c, b->upsert ? HTS_MAXINST_SQL(HTS_USTAGE_SERIES) : HTS_MAXINST_SQL(""), before,
               cr_config.history_max_instances, p))
        return false;
    return true;
}

static bool write_batch(hts_t *h, const hts_batch_t *b, problem_t *p)
{
    PGconn   *c = h->wconn;
    char      before[24] = "0";
    bool      bounds = h->retention || cr_config.history_max_instances > 0;

    if (!c && !(c = h->wconn = hts_connect(h, p)))
        return false;
    if (!hts_exec(c, "BEGIN", p))
        goto fail;
    {   /* exactly once: a batch committed before a lost answer is not written again */
        char        num[24];
        const char *params[2] = { h->writer_id, num };
        snprintf(num, sizeof num, "%llu", (unsigned long long)b->number);
        PGresult *r = hts_query(c, "UPDATE coraine_writers SET last_batch = $2::bigint"
                                   " WHERE writer = $1::bigint AND last_batch < $2::bigint",
                                2, params, PGRES_COMMAND_OK, p);
        if (!r)
            goto fail;
        bool done_before = !strcmp(PQcmdTuples(r), "0");
        PQclear(r);
        if (done_before) {
            PQclear(PQexec(c, "ROLLBACK"));
            LOG_I("history: a batch of %u changes was committed before the connection was lost; "
                  "not written again", b->n_writes);
            return true;
        }
    }
    if (bounds) {
        PGresult *r = hts_query(c, "SELECT coalesce(max(iid), 0) FROM coraine_instances", 0, NULL,
                                PGRES_TUPLES_OK, p);

        if (!r)
            goto fail;
        snprintf(before, sizeof before, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
    }
    if (b->copy.len && !b->upsert &&
        !copy_into(c, "COPY coraine_instances (" HTS_ICOLS ") FROM STDIN", &b->copy, p))
        goto fail;
    if (b->copy.len && b->upsert &&
        (!copy_into(c, "COPY coraine_ustage (ord, at, tenant, entity_id, attr,"
                      " dataset_id, iid, kind, value, num, unit_code, object_type, observed_at,"
                      " created_at, modified_at, deleted_at, sub) FROM STDIN", &b->copy, p) ||
         !hts_exec(c, upsert_sql, p)))
        goto fail;
    if (b->stage.len && (!copy_into(c, "COPY coraine_stage FROM STDIN", &b->stage, p) ||
                         !hts_exec(c, entity_sql, p)))
        goto fail;
    if (bounds && !write_bounds(h, c, b, before, p))
        goto fail;
    if (!hts_exec(c, "COMMIT", p))
        goto fail;
    return true;

fail:
    if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
        PQclear(PQexec(c, "ROLLBACK"));
    if (PQstatus(c) != CONNECTION_OK) {
        PQfinish(c);
        h->wconn = NULL;
    }
    return false;
}

static void *hts_writer(void *arg)
{
    hts_t *h       = arg;
    int    backoff = 0;

    for (;;) {
        hts_batch_t *b;
        problem_t    p  = { 0 };
        bool         ok = true;

        pthread_mutex_lock(&h->mu);
        while (!h->stop && !(h->head && h->head->n_writes))
            pthread_cond_wait(&h->has_work, &h->mu);
        b = h->head;
        if (!b || !b->n_writes) {
            pthread_mutex_unlock(&h->mu);
            break;                                  /* stopped, and nothing left */
        }
        h->head = b->next;                          /* ours now: appends go to a newer one */
        if (h->tail == b)
            h->tail = NULL;
        pthread_mutex_unlock(&h->mu);
        b->number = ++h->batch_number;              /* kept across its retries */

        while (!write_batch(h, b, &p)) {
            bool give_up;

            pthread_mutex_lock(&h->mu);
            h->failures++;
            h->connected = false;
            give_up = h->stop && cr_now_ms() >= h->drain_deadline_ms;
            pthread_mutex_unlock(&h->mu);
            if (give_up) {
                ok = false;
                break;
            }
            if (backoff < HTS_BACKOFF_MAX)
                LOG_W("history: writing %u changes to PostgreSQL failed, retrying: %s",
                      b->n_writes, p.detail);
            backoff = !backoff ? 50 : backoff * 2 > HTS_BACKOFF_MAX ? HTS_BACKOFF_MAX : backoff * 2;
            struct timespec ts = { backoff / 1000, (long)(backoff % 1000) * 1000000L };
            nanosleep(&ts, NULL);
            p = (problem_t){ 0 };
        }
        if (ok && backoff) {
            LOG_I("history: PostgreSQL is taking writes again");
            backoff = 0;
        }

        pthread_mutex_lock(&h->mu);
        if (!ok)
            LOG_E("history: stopping with PostgreSQL unreachable: %llu queued changes are lost "
                  "(%s)", (unsigned long long)h->used, p.detail);
        h->used    -= b->n_writes;
        h->written += b->n_writes;
        if (ok) {
            h->batches++;
            h->connected = true;
        }
        b->n_writes = 0;
        b->n_rows   = 0;
        sb_clear(&b->copy);
        sb_clear(&b->stage);
        if (b->copy.cap > 2 * HTS_BATCH_BYTES) {    /* a huge batch: give the memory back */
            sb_release(&b->copy);
            sb_init(&b->copy, NULL, 1 << 16);
        }
        b->next      = h->free_list;
        h->free_list = b;
        pthread_cond_broadcast(&h->has_room);
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

/* ------------------------------------------------------- open and close */

static void hts_close(void *be);

static void *hts_open(store_t *s, problem_t *p)
{
    const char  *uri = cr_config.history_uri;
    hts_t       *h;

    if (!uri || !*uri) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--history timescale needs --historyURI "
                    "postgresql://user@host:port/database (or CORAINE_HISTORYURI)");
        return NULL;
    }
    if (cr_config.history_queue_size < 1) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--historyQueueSize must be at least 1");
        return NULL;
    }
    h = cr_xcalloc(1, sizeof(*h));
    h->uri   = cr_xstrdup(uri);
    h->store = s;
    h->cap   = (uint32_t)cr_config.history_queue_size;
    if (cr_config.history_retention && *cr_config.history_retention &&
        (!history_parse_duration(cr_config.history_retention, &h->retention) || h->retention <= 0)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--historyRetention %.100s: expected a duration "
                    "(P30D, PT1H, 3600s ...)", cr_config.history_retention);
        free(h->uri);
        free(h);
        return NULL;
    }
    sb_init(&h->tmp, NULL, 256);
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->pool_mu, NULL);
    pthread_cond_init(&h->has_work, NULL);
    pthread_cond_init(&h->has_room, NULL);

    if (!(h->wconn = hts_connect_as(h, false, p)) || !hts_schema(h, h->wconn, p))
        goto fail;
    {   /* this process's batch numbers start at 1 in a row of its own */
        uint64_t id;
        if (getrandom(&id, sizeof id, 0) != sizeof id) id = (uint64_t)cr_now_us() ^ (uint64_t)getpid() << 40;
        snprintf(h->writer_id, sizeof h->writer_id, "%lld", (long long)(id >> 1));
        const char *params[1] = { h->writer_id };
        PGresult *r = hts_query(h->wconn, "INSERT INTO coraine_writers (writer, last_batch) VALUES ($1::bigint, 0)",
                                1, params, PGRES_COMMAND_OK, p);
        if (!r)
            goto fail;
        PQclear(r);
    }
    PQfinish(h->wconn);                 /* the writer's own session, with its staging tables */
    if (!(h->wconn = hts_connect(h, p)))
        goto fail;
    h->connected = true;
    if (pthread_create(&h->thread, NULL, hts_writer, h) != 0) {
        problem_set(p, PB_INTERNAL_ERROR, "history: cannot start the PostgreSQL writer thread");
        goto fail;
    }
    h->thread_started = true;
    LOG_I("history: PostgreSQL with %s, a queue of %u changes, writers wait %d ms for room",
          h->hypertable ? "a TimescaleDB hypertable" : "plain tables (btree and BRIN indexes)",
          h->cap, queue_timeout_ms());
    return h;

fail:
    hts_close(h);
    return NULL;
}

static void hts_close(void *be)
{
    hts_t *h = be;

    /* After the last write (main stops HTTP first); the store may be
     * closed already: it is not touched here. */
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop              = true;
    h->drain_deadline_ms = cr_config.shutdown_deadline_ms ? cr_config.shutdown_deadline_ms
                                                          : cr_now_ms() + HTS_DRAIN_MS;
    pthread_cond_broadcast(&h->has_work);
    pthread_cond_broadcast(&h->has_room);
    pthread_mutex_unlock(&h->mu);
    if (h->thread_started)
        pthread_join(h->thread, NULL);
    for (int pass = 0; pass < 2; pass++)
        for (hts_batch_t *b = pass ? h->free_list : h->head, *next; b; b = next) {
            next = b->next;
            sb_release(&b->copy);
            sb_release(&b->stage);
            free(b);
        }
    if (h->wconn)
        PQfinish(h->wconn);
    for (int i = 0; i < h->n_pool; i++)
        PQfinish(h->pool[i]);
    sb_release(&h->tmp);
    free(h->seen_keys);
    free(h->seen_vals);
    pthread_cond_destroy(&h->has_work);
    pthread_cond_destroy(&h->has_room);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->pool_mu);
    free(h->uri);
    free(h);
}

static void hts_stats(void *be, uint64_t *instances, uint64_t *series, uint64_t *bytes,
                      uint64_t *dropped)
{
    hts_t *h = be;

    pthread_mutex_lock(&h->mu);
    *instances = h->instances;      /* appended by this process (the database may hold more) */
    *dropped = atomic_load_explicit(&h->dropped, memory_order_relaxed);
    pthread_mutex_unlock(&h->mu);
    *series  = 0;
    *bytes   = 0;
}

static void hts_health(void *be, uint64_t *queued, bool *reachable)
{
    hts_t    *h = be;
    problem_t p = { 0 };
    PGconn   *c;

    pthread_mutex_lock(&h->mu);
    *queued = h->used;
    pthread_mutex_unlock(&h->mu);
    /* the writer learns of an outage only when it writes: a probe on a
     * pooled connection tells for an idle writer too */
    *reachable = false;
    if ((c = hts_conn_get(h, &p)) != NULL) {
        *reachable = hts_exec(c, "SELECT 1", &p);
        hts_conn_put(h, c, !*reachable);
    }
}

const history_backend_t history_timescale = {
    .name            = "timescale",
    .open            = hts_open,
    .close           = hts_close,
    .reserve         = hts_reserve,
    .unreserve       = hts_unreserve,
    .append          = hts_append,
    .query           = hts_be_query,
    .aggregate       = hts_be_aggregate,
    .entity_info     = hts_be_entity_info,
    .delete_entity   = hts_be_delete_entity,
    .delete_attr     = hts_be_delete_attr,
    .delete_instance = hts_be_delete_instance,
    .modify_instance = hts_be_modify_instance,
    .stats           = hts_stats,
    .health          = hts_health,
};
