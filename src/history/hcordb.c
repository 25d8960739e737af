/*
 * hcordb.c - corDB history (--history corDB): the history backend
 * (history.h) held in memory, compactly.
 *
 * Per tenant (a read-write lock each): entity records in a hash by id and a
 * list in creation order; per entity its series, one per (attribute name,
 * datasetId); per series a ring of 40-byte instances (hinst_t): observedAt,
 * createdAt, modifiedAt as int64 µs, the instance id and a tag in one word,
 * and the value: a double for a plain numeric or boolean Property (no
 * unitCode, objectType or sub-attributes), else a frozen one-attribute
 * entity (model's entity_freeze: one block, reference counted, so a query
 * hands it out by reference and a concurrent drop cannot free it under the
 * reader). A ring never grows beyond --historyMaxInstances; as an instance is
 * added the oldest beyond that bound, and those older than
 * --historyRetention at the head, are dropped: an endless update stream uses
 * bounded memory.
 *
 * Queries copy what they select into the request arena under the tenant's
 * read lock; appends take the write lock for one group of changes.
 *
 * On --dbDir every write is also a record of the history log (hlog.c),
 * appended under the tenant's write lock so that the log has each tenant's
 * writes in the order they were applied; at start the snapshot and the log
 * are replayed through the same functions (instance ids and bounds come out
 * the same), and the entities' newest versions are taken from the store.
 * A snapshot is written when the log has grown by --dbSnapshotSize (by a
 * thread of its own) and on POST /admin/snapshot, incrementally: writers
 * wait for one entity's copy at most (snap_mark, snap_cow, snap_walk).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "history.h"
#include "hlog.h"
#include "../model/codec.h"

enum { HT_NUM = 0, HT_TRUE, HT_FALSE, HT_BLOB, HT_DEL };

typedef struct hinst {
    int64_t  observed_at;
    int64_t  created_at;
    int64_t  modified_at;
    union {
        double       num;
        cr_entity_t *blob;      /* attrs[0] is the instance */
        int64_t      kind;      /* HT_DEL: the deleted attribute's kind */
    } v;
    uint64_t iid : 56;
    uint64_t tag : 8;
} hinst_t;
_Static_assert(sizeof(hinst_t) == 40, "a numeric instance is 40 bytes");

typedef struct hseries {
    const char *name;           /* interned */
    char       *dataset_id;     /* NULL: the default instance */
    hinst_t    *v;              /* ring */
    uint32_t    cap, head, n;
    bool        obs_sorted;     /* appended in observedAt order (no instance lacks it) */
    bool        mod_sorted;     /* modifiedAt in ring order (false after a modify) */
    bool        cre_sorted;     /* createdAt in ring order (false after an insertion) */
    /* The snapshot's copy of the series, chunk by chunk (snap_open): in
     * epoch snap_ep its first snap_n instances at the mark are to be
     * copied; snap_done of them are; snap_shift were dropped from the head
     * since (after their copy), so mark index k is at ring index k - shift. */
    uint32_t    snap_n, snap_done, snap_shift;
    uint64_t    snap_ep;
} hseries_t;

typedef struct hent hent_t;
struct hent {
    char         *id;
    const char  **types;        /* interned */
    uint16_t      n_types;
    cr_entity_t  *last;         /* newest version written by the core API (a reference), or NULL */
    int64_t       created_at, modified_at, deleted_at;
    uint64_t      next_iid;
    hseries_t   **series;
    uint32_t      n_series, cap_series;
    hent_t       *prev, *next;  /* creation order */
    hent_t       *hnext;        /* hash chain */
    uint64_t      ord;          /* its place in creation order (a query resumes by it) */
    uint64_t      snap_epoch;   /* the snapshot epoch it was copied in (== db->epoch: nothing to copy) */
    uint64_t      snap_open;    /* the epoch whose copy of it began (its record and series marked) */
};

typedef struct htenant htenant_t;
struct htenant {
    const char      *name;      /* interned */
    pthread_rwlock_t lock;
    hent_t         **slot;
    size_t           nslot, n;
    hent_t          *first, *last;
    uint64_t         next_ord;
    hent_t          *snap_cur;  /* the snapshot's walk: the next entity to copy */
    bool             unsorted;  /* loaded from a snapshot out of creation order */
    htenant_t       *next;
};

typedef struct hdb {
    pthread_mutex_t  mu;        /* the tenant list */
    hlog_t          *log;       /* --dbDir: the history's files; NULL in RAM */
    _Atomic bool     snapping;  /* a snapshot is being written */
    _Atomic int64_t  recover_us; /* the last snapshot asked for to recover a failed log (maybe_snapshot) */
    /* The snapshot in progress (see snap_mark): entities whose snap_epoch is
     * not epoch are still to be copied into im (under snap_mu). */
    _Atomic uint64_t epoch;
    pthread_mutex_t  snap_mu;
    hlog_image_t    *im;
    uint64_t         cow_n, cow_max_us; /* copies made by writers (snap_mu) */
    uint64_t         cow_max_inst;      /* the most instances a writer copied at once */
    _Atomic bool     walking;   /* a snapshot's copy is in progress */
    _Atomic int64_t  wait_max_us; /* the longest a writer waited for its tenant's lock meanwhile */
    /* the snapshot thread (--dbSnapshotSize) */
    pthread_t        snap_thr;
    bool             snap_thr_on, snap_stop, snap_want;
    bool             unsorted;  /* at start: some tenant's list is out of order */
    pthread_cond_t   snap_cv;
    htenant_t *_Atomic tenants;
    int64_t          retention;  /* µs, 0 = none */
    uint32_t         max_inst;   /* 0 = none */
    _Atomic uint64_t instances, series, bytes, dropped;
} hdb_t;

/* ------------------------------------------------------------ tenants */

static htenant_t *tenant_get(hdb_t *db, const char *name, bool create)
{
    const char *in = intern_cstr(name ? name : "");

    for (htenant_t *t = atomic_load(&db->tenants); t; t = t->next)
        if (t->name == in)
            return t;
    if (!create)
        return NULL;
    pthread_mutex_lock(&db->mu);
    htenant_t *t;
    for (t = atomic_load(&db->tenants); t; t = t->next)
        if (t->name == in)
            break;
    if (!t) {
        t = cr_xcalloc(1, sizeof *t);
        t->name = in;
        /* writers first: a reader that takes the lock again and again (a
         * snapshot's walk, a long query's chunks) lets a waiting writer in
         * between (glibc prefers readers by default); nothing here takes
         * a read lock it already holds */
        pthread_rwlockattr_t ra;
        pthread_rwlockattr_init(&ra);
        pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        int rc = pthread_rwlock_init(&t->lock, &ra);
        pthread_rwlockattr_destroy(&ra);
        if (rc != 0) {
            LOG_E("history: cannot create a lock; aborting");
            abort();
        }
        t->next = atomic_load(&db->tenants);
        atomic_store(&db->tenants, t);
    }
    pthread_mutex_unlock(&db->mu);
    return t;
}

static size_t slot_of(const htenant_t *t, const char *id)
{
    return (size_t)cr_hash(id, strlen(id)) & (t->nslot - 1);
}

static hent_t *ent_find(const htenant_t *t, const char *id)
{
    if (!t->nslot)
        return NULL;
    for (hent_t *e = t->slot[slot_of(t, id)]; e; e = e->hnext)
        if (!strcmp(e->id, id))
            return e;
    return NULL;
}

static void ent_link(htenant_t *t, hent_t *e)
{
    if (t->n + 1 > t->nslot / 2) {
        size_t   ns   = t->nslot ? t->nslot * 2 : 64;
        hent_t **slot = cr_xcalloc(ns, sizeof *slot);
        for (size_t i = 0; i < t->nslot; i++)
            for (hent_t *x = t->slot[i], *nx; x; x = nx) {
                nx = x->hnext;
                size_t k = (size_t)cr_hash(x->id, strlen(x->id)) & (ns - 1);
                x->hnext = slot[k];
                slot[k]  = x;
            }
        free(t->slot);
        t->slot  = slot;
        t->nslot = ns;
    }
    size_t k = slot_of(t, e->id);
    e->hnext   = t->slot[k];
    t->slot[k] = e;
    e->prev    = t->last;
    e->next    = NULL;
    e->ord     = ++t->next_ord;
    if (t->last) t->last->next = e; else t->first = e;
    t->last = e;
    t->n++;
}

static void ent_unlink(htenant_t *t, hent_t *e)
{
    hent_t **pp = &t->slot[slot_of(t, e->id)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    if (t->snap_cur == e)
        t->snap_cur = e->next;
    if (e->prev) e->prev->next = e->next; else t->first = e->next;
    if (e->next) e->next->prev = e->prev; else t->last = e->prev;
    t->n--;
}

/* ----------------------------------------------------------- instances */

static void inst_release(hdb_t *db, hinst_t *x)
{
    if (x->tag == HT_BLOB) {
        atomic_fetch_sub(&db->bytes, x->v.blob->bytes);
        entity_unref(x->v.blob);
    }
}

static void series_free(hdb_t *db, hseries_t *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        inst_release(db, &s->v[(s->head + i) % s->cap]);
    atomic_fetch_sub(&db->instances, s->n);
    atomic_fetch_sub(&db->bytes, (uint64_t)s->cap * sizeof(hinst_t) + sizeof *s);
    atomic_fetch_sub(&db->series, 1);
    free(s->dataset_id);
    free(s->v);
    free(s);
}

static void ent_free(hdb_t *db, hent_t *e)
{
    for (uint32_t i = 0; i < e->n_series; i++)
        series_free(db, e->series[i]);
    free(e->series);
    free(e->types);
    entity_unref(e->last);
    free(e->id);
    free(e);
}

/* The content of an instance into x (value, times), by reference when it
 * is not a plain number. */
static void inst_set(hdb_t *db, hinst_t *x, const hist_instance_t *in)
{
    const cr_attr_t *a = &in->attr;
    const json_t    *v = a->value;

    x->observed_at = a->observed_at;
    x->created_at  = a->created_at;
    x->modified_at = a->modified_at;
    if (in->deleted_at != CR_NO_TIME) {
        x->tag    = HT_DEL;
        x->v.kind = a->name == MN.scope ? HIST_KIND_SCOPE : a->kind;
        x->created_at = in->deleted_at;
        return;
    }
    bool plain = a->kind == ATTR_PROPERTY && !a->unit_code && !a->object_type && !a->n_sub && v;
    if (plain && v->type == JSON_NUMBER &&
        (!v->is_int || (v->i > -(INT64_C(1) << 53) && v->i < (INT64_C(1) << 53)))) {
        x->tag   = HT_NUM;
        x->v.num = json_number(v);
        return;
    }
    if (plain && (v->type == JSON_TRUE || v->type == JSON_FALSE)) {
        x->tag = v->type == JSON_TRUE ? HT_TRUE : HT_FALSE;
        return;
    }
    cr_attr_t   one = *a;
    cr_entity_t d   = { 0 };
    const char *types[1] = { a->name };  /* an encodable entity (codec.h): an id and a type */
    one.dataset_id = NULL;              /* the series holds it */
    d.id      = "i";
    d.types   = types;
    d.n_types = 1;
    d.attrs   = &one;
    d.n_attrs = 1;
    x->tag    = HT_BLOB;
    x->v.blob = entity_freeze(&d);
    if (!x->v.blob) {                   /* beyond 4 GiB: cannot be: bodies are bounded */
        LOG_E("history: an instance too large to keep; aborting");
        abort();
    }
    atomic_fetch_add(&db->bytes, x->v.blob->bytes);
}

static int64_t inst_time(const hinst_t *x, hist_timeprop_t tp)
{
    switch (tp) {
    case HIST_TP_CREATED_AT:  return x->created_at;
    case HIST_TP_MODIFIED_AT: return x->modified_at;
    case HIST_TP_DELETED_AT:  return x->tag == HT_DEL ? x->created_at : CR_NO_TIME;
    default:                  return x->observed_at;
    }
}

/* the time retention measures: observedAt, else createdAt */
static int64_t keep_time(const hinst_t *x)
{
    return x->observed_at != CR_NO_TIME ? x->observed_at : x->created_at;
}

static void snap_before_drop(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s);
static void snap_before_insert(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s, uint32_t pos);

static void series_drop_head(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s)
{
    snap_before_drop(db, t, e, s);
    inst_release(db, &s->v[s->head]);
    s->head = (s->head + 1) % s->cap;
    s->n--;
    atomic_fetch_sub(&db->instances, 1);
    atomic_fetch_add(&db->dropped, 1);
}

static void series_push(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s, const hist_instance_t *in,
                        int64_t now)
{
    if (db->max_inst && s->n >= db->max_inst) {
        /* full: an instance older than all it holds is the one to drop */
        if (s->obs_sorted && in->attr.observed_at != CR_NO_TIME && in->deleted_at == CR_NO_TIME &&
            in->attr.observed_at < s->v[s->head].observed_at) {
            e->next_iid++;
            atomic_fetch_add(&db->dropped, 1);
            return;
        }
        series_drop_head(db, t, e, s);
    }
    if (s->n == s->cap) {
        uint32_t nc = s->cap ? s->cap * 2 : 4;
        if (db->max_inst && nc > db->max_inst)
            nc = db->max_inst;
        hinst_t *v = cr_xreallocarray(NULL, nc, sizeof *v);
        for (uint32_t i = 0; i < s->n; i++)
            v[i] = s->v[(s->head + i) % s->cap];
        free(s->v);
        atomic_fetch_add(&db->bytes, (uint64_t)(nc - s->cap) * sizeof *v);
        s->v    = v;
        s->cap  = nc;
        s->head = 0;
    }
    hinst_t x;
    inst_set(db, &x, in);
    x.iid = ++e->next_iid;
    /* Instances are kept in observedAt order (the usual stream appends at
     * the end; an older one, from the temporal API, is inserted where it
     * belongs), so that the bounds drop the oldest by time and lastN and
     * timerel read a sorted ring. */
    uint32_t pos = s->n;
    if (x.observed_at != CR_NO_TIME && s->obs_sorted)
        while (pos > 0 && s->v[(s->head + pos - 1) % s->cap].observed_at > x.observed_at)
            pos--;
    if (pos < s->n)
        snap_before_insert(db, t, e, s, pos);
    for (uint32_t k = s->n; k > pos; k--)
        s->v[(s->head + k) % s->cap] = s->v[(s->head + k - 1) % s->cap];
    if (!s->n) {
        s->obs_sorted = x.observed_at != CR_NO_TIME;
        s->mod_sorted = s->cre_sorted = true;
    } else {
        const hinst_t *last = &s->v[(s->head + s->n - 1) % s->cap];
        if (x.observed_at == CR_NO_TIME)
            s->obs_sorted = false;
        if (pos != s->n || last->modified_at > x.modified_at)
            s->mod_sorted = false;
        if (pos != s->n || last->created_at > x.created_at)
            s->cre_sorted = false;
    }
    s->v[(s->head + pos) % s->cap] = x;
    s->n++;
    atomic_fetch_add(&db->instances, 1);
    if (db->retention)
        while (s->n > 1 && keep_time(&s->v[s->head]) < now - db->retention)
            series_drop_head(db, t, e, s);
}

/* upsert: the instances of s at in's observedAt take its content (the
 * first one) or go; false when there is none (then in is appended). */
static bool series_upsert(hdb_t *db, hseries_t *s, const hist_instance_t *in, int64_t now)
{
    int64_t  t = in->attr.observed_at;
    uint32_t keep = 0;
    bool     hit = false;

    if (t == CR_NO_TIME || in->deleted_at != CR_NO_TIME)
        return false;
    uint32_t from = 0;
    if (s->obs_sorted) {                     /* the ring is in observedAt order: where t would go */
        uint32_t lo = 0, hi = s->n;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (s->v[(s->head + mid) % s->cap].observed_at < t) lo = mid + 1;
            else hi = mid;
        }
        if (lo == s->n || s->v[(s->head + lo) % s->cap].observed_at != t)
            return false;
        from = lo;
    }
    keep = from;
    for (uint32_t k = from; k < s->n; k++) {
        hinst_t *x = &s->v[(s->head + k) % s->cap];
        if (s->obs_sorted && x->observed_at > t) {   /* past t: the rest stays as it is */
            if (keep != k)
                for (uint32_t m = k; m < s->n; m++)
                    s->v[(s->head + keep++) % s->cap] = s->v[(s->head + m) % s->cap];
            else
                keep = s->n;
            break;
        }
        if (x->observed_at == t && x->tag != HT_DEL) {
            if (!hit) {
                hinst_t         y;
                hist_instance_t c = *in;
                c.attr.created_at  = x->created_at;
                c.attr.modified_at = now;
                inst_set(db, &y, &c);
                y.iid = x->iid;
                inst_release(db, x);
                *x  = y;
                hit = true;
            } else {                         /* a second one at that time: goes */
                inst_release(db, x);
                atomic_fetch_sub(&db->instances, 1);
                continue;
            }
        }
        if (keep != k)
            s->v[(s->head + keep) % s->cap] = *x;
        keep++;
    }
    s->n = keep;
    if (hit)
        s->mod_sorted = false;
    return hit;
}

static hseries_t *series_get(hdb_t *db, hent_t *e, const char *name, const char *ds, bool create)
{
    for (uint32_t i = 0; i < e->n_series; i++) {
        hseries_t *s = e->series[i];
        if (s->name == name && (s->dataset_id == ds || (s->dataset_id && ds && !strcmp(s->dataset_id, ds))))
            return s;
    }
    if (!create)
        return NULL;
    if (e->n_series == e->cap_series) {
        e->cap_series = e->cap_series ? e->cap_series * 2 : 4;
        e->series     = cr_xreallocarray(e->series, e->cap_series, sizeof *e->series);
    }
    hseries_t *s  = cr_xcalloc(1, sizeof *s);
    s->name       = name;
    s->dataset_id = ds ? cr_xstrdup(ds) : NULL;
    e->series[e->n_series++] = s;
    atomic_fetch_add(&db->series, 1);
    atomic_fetch_add(&db->bytes, sizeof *s);
    return s;
}

static void ent_types(hent_t *e, const char *const *types, size_t n)
{
    if (!n)
        return;
    if (n == e->n_types && !memcmp(e->types, types, n * sizeof *types))
        return;
    free(e->types);
    e->types   = cr_xreallocarray(NULL, n, sizeof *e->types);
    memcpy(e->types, types, n * sizeof *types);
    e->n_types = (uint16_t)n;
}

/* ---------------------------------------------------------------- open */

static void hc_close(void *v);
static bool persist_open(hdb_t *db, store_t *s, problem_t *p);

static void *hc_open(store_t *s, problem_t *p)
{
    hdb_t  *db = cr_xcalloc(1, sizeof *db);
    int64_t r  = 0;

    if (cr_config.history_retention && *cr_config.history_retention &&
        !history_parse_duration(cr_config.history_retention, &r)) {
        free(db);
        problem_set(p, PB_BAD_REQUEST_DATA, "--historyRetention %s: not a duration (P30D, PT1H, 3600s, 7d)",
                    cr_config.history_retention);
        return NULL;
    }
    if (cr_config.history_max_instances < 0) {
        free(db);
        problem_set(p, PB_BAD_REQUEST_DATA, "--historyMaxInstances must be 0 or more");
        return NULL;
    }
    db->retention = r;
    db->max_inst  = (uint32_t)cr_config.history_max_instances;
    pthread_mutex_init(&db->mu, NULL);
    pthread_mutex_init(&db->snap_mu, NULL);
    pthread_cond_init(&db->snap_cv, NULL);
    if (cr_config.db_dir && *cr_config.db_dir && !persist_open(db, s, p)) {
        hc_close(db);
        return NULL;
    }
    return db;
}

static void hc_close(void *v)
{
    hdb_t *db = v;

    if (db->snap_thr_on) {
        pthread_mutex_lock(&db->snap_mu);
        db->snap_stop = true;
        pthread_cond_signal(&db->snap_cv);
        pthread_mutex_unlock(&db->snap_mu);
        pthread_join(db->snap_thr, NULL);
    }
    hlog_close(db->log);
    for (htenant_t *t = atomic_load(&db->tenants), *nt; t; t = nt) {
        nt = t->next;
        for (hent_t *e = t->first, *ne; e; e = ne) {
            ne = e->next;
            ent_free(db, e);
        }
        free(t->slot);
        pthread_rwlock_destroy(&t->lock);
        free(t);
    }
    pthread_mutex_destroy(&db->mu);
    pthread_mutex_destroy(&db->snap_mu);
    pthread_cond_destroy(&db->snap_cv);
    free(db);
}

/* -------------------------------------------------------------- append */

static void log_write(hdb_t *db, const char *tenant, const hist_write_t *x);
static void log_simple(hdb_t *db, char op, const char *tenant, const char *id, const char *name, const char *ds,
                       bool all, uint64_t iid);
static void log_modify(hdb_t *db, const char *tenant, const char *id, const char *name, uint64_t iid,
                       const cr_attr_t *with, int64_t now);
static void maybe_snapshot(hdb_t *db);
static void snap_touch(hdb_t *db, htenant_t *t, hent_t *e);
static void snap_cow(hdb_t *db, htenant_t *t, hent_t *e);
static void snap_series_all(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s);

/* One write (hist_write_t) on t, under its write lock. */
static void apply_write(hdb_t *db, htenant_t *t, const hist_write_t *x)
{
    hent_t *e = ent_find(t, x->id);
    if (!e) {
        e             = cr_xcalloc(1, sizeof *e);
        e->id         = cr_xstrdup(x->id);
        e->created_at = x->at;
        e->deleted_at = CR_NO_TIME;
        e->snap_epoch = atomic_load_explicit(&db->epoch, memory_order_acquire);
        ent_link(t, e);
    } else
        snap_touch(db, t, e);
    ent_types(e, x->types, x->n_types);
    e->modified_at = x->at;
    if (x->entity) {
        entity_ref(x->entity);
        entity_unref(e->last);
        e->last = x->entity;
    }
    e->deleted_at = x->entity_deleted ? x->at : CR_NO_TIME;
    for (size_t k = 0; k < x->n_inst; k++) {
        const hist_instance_t *in = &x->inst[k];
        hseries_t *s = series_get(db, e, in->attr.name, in->attr.dataset_id, true);
        if (x->upsert)
            snap_series_all(db, t, e, s);   /* an upsert changes instances in place */
        if (!x->upsert || !series_upsert(db, s, in, x->at))
            series_push(db, t, e, s, in, x->at);
    }
}

static bool hc_append(void *v, const char *tenant, const hist_write_t *w, size_t n, problem_t *p)
{
    hdb_t     *db = v;
    htenant_t *t  = tenant_get(db, tenant, true);

    if (atomic_load_explicit(&db->walking, memory_order_relaxed)) {
        /* a snapshot is being copied: how long writers wait is measured */
        int64_t t0 = cr_now_us();
        pthread_rwlock_wrlock(&t->lock);
        int64_t waited = cr_now_us() - t0, m = atomic_load_explicit(&db->wait_max_us, memory_order_relaxed);
        while (waited > m && !atomic_compare_exchange_weak(&db->wait_max_us, &m, waited)) {}
    } else
        pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < n; i++) {
        apply_write(db, t, &w[i]);
        if (db->log)
            log_write(db, tenant, &w[i]);
    }
    pthread_rwlock_unlock(&t->lock);
    maybe_snapshot(db);
    return true;
}

/* --------------------------------------------------------------- query */

static bool in_list(const char *const *l, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (l[i] == s)
            return true;
    return false;
}

static bool dataset_selected(const hist_query_t *q, const char *ds)
{
    if (!q->n_dataset_ids)
        return true;
    for (size_t i = 0; i < q->n_dataset_ids; i++)
        if (ds ? !strcmp(q->dataset_ids[i], ds) : !strcmp(q->dataset_ids[i], "@none"))
            return true;
    return false;
}

static bool time_ok(const hist_query_t *q, int64_t t)
{
    if (t == CR_NO_TIME)
        return false;
    switch (q->timerel) {
    case HIST_TIMEREL_BEFORE:  return t < q->time_at;
    case HIST_TIMEREL_AFTER:   return t >= q->time_at;
    case HIST_TIMEREL_BETWEEN: return t >= q->time_at && t < q->end_time_at;
    default:                   return true;
    }
}

static bool series_sorted(const hseries_t *s, hist_timeprop_t tp)
{
    switch (tp) {
    case HIST_TP_OBSERVED_AT: return s->obs_sorted;
    case HIST_TP_MODIFIED_AT: return s->mod_sorted;
    case HIST_TP_CREATED_AT:  return s->cre_sorted;
    default:                  return s->cre_sorted;   /* deletedAt: the createdAt of a deletion */
    }
}

/* hist_query_time for a stored instance */
static int64_t qtime(const hist_query_t *q, const hinst_t *x)
{
    if (x->tag == HT_DEL && q->timeprop != HIST_TP_DELETED_AT)
        return CR_NO_TIME;
    int64_t t = inst_time(x, q->timeprop);
    if (t == CR_NO_TIME && q->timeprop == HIST_TP_OBSERVED_AT && q->timerel == HIST_TIMEREL_NONE)
        t = x->created_at;
    return t;
}

typedef struct pick { int64_t t; uint32_t pos; } pick_t;

static int pick_cmp(const void *a, const void *b)
{
    const pick_t *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static void unref_blob(void *e)
{
    entity_unref(e);
}

static void materialize(arena_t *a, const hseries_t *s, const hinst_t *x, hist_instance_t *out)
{
    memset(out, 0, sizeof *out);
    cr_attr_t *at = &out->attr;
    if (x->tag == HT_BLOB) {
        *at = x->v.blob->attrs[0];
        entity_ref(x->v.blob);
        arena_on_free(a, unref_blob, x->v.blob);
    } else {
        at->kind = x->tag == HT_DEL && x->v.kind != HIST_KIND_SCOPE ? (uint8_t)x->v.kind : ATTR_PROPERTY;
        at->value = x->tag == HT_NUM ? json_new_number(a, x->v.num)
                  : x->tag == HT_TRUE ? json_new_bool(a, true)
                  : x->tag == HT_FALSE ? json_new_bool(a, false)
                  : hist_deleted_value(a, (attr_kind_t)x->v.kind);
    }
    at->name        = s->name;
    at->dataset_id  = s->dataset_id ? arena_strdup(a, s->dataset_id) : NULL;
    at->observed_at = x->observed_at;
    at->created_at  = x->created_at;
    at->modified_at = x->modified_at;
    out->deleted_at  = x->tag == HT_DEL ? x->created_at : CR_NO_TIME;
    out->instance_id = x->iid;
}

/* aggregatedValues computed here, from the ring (no instance materialized) */
typedef struct agg {
    unsigned methods;
    int64_t  period;
} agg_t;

static void series_buckets(arena_t *a, const hist_query_t *q, const hseries_t *s, const pick_t *pk, size_t np,
                           const agg_t *agg, hist_series_t *out)
{
    hist_point_t *pt = arena_alloc(a, (np + 1) * sizeof *pt);
    size_t        n  = 0;
    for (size_t i = 0; i < np; i++) {
        const hinst_t *x = &s->v[(s->head + pk[i].pos) % s->cap];
        if (x->tag == HT_DEL)
            continue;
        pt[n].t   = pk[i].t;
        pt[n].j   = x->tag == HT_BLOB ? x->v.blob->attrs[0].value : NULL;
        pt[n].num = x->tag == HT_NUM ? x->v.num : x->tag == HT_TRUE;
        n++;
    }
    history_buckets(a, q, pt, n, agg->methods, agg->period, out);
    if (n)
        out->inst = arena_alloc(a, sizeof *out->inst);   /* the kind, for the renderer */
    if (n) {
        const hinst_t *x = &s->v[(s->head + pk[0].pos) % s->cap];
        memset(out->inst, 0, sizeof *out->inst);
        out->inst[0].attr.kind = x->tag == HT_BLOB ? x->v.blob->attrs[0].kind : ATTR_PROPERTY;
    }
    out->n = 0;
}

/* The selected instances of s into out (ascending); returns false when none. */
static bool series_select(arena_t *a, const hist_query_t *q, const hseries_t *s, hist_series_t *out,
                          int64_t *first, int64_t *last, const agg_t *agg)
{
    size_t  want = q->last_n;
    size_t  lim  = q->inst_limit;
    pick_t *pk   = NULL;
    size_t  np   = 0;

    memset(out, 0, sizeof *out);
    if (!s->n)
        return false;
    if (series_sorted(s, q->timeprop) && want) {
        /* backwards from the newest: lastN costs O(N), not O(series) */
        size_t take = lim && lim < want ? lim : want;
        pk = arena_alloc(a, (take < s->n ? take : s->n) * sizeof *pk);
        for (uint32_t i = s->n; i-- > 0 && np < take;) {
            const hinst_t *x = &s->v[(s->head + i) % s->cap];
            int64_t        t = qtime(q, x);
            if (time_ok(q, t))
                pk[np++] = (pick_t){ t, i };
        }
        for (size_t i = 0; i < np / 2; i++) {
            pick_t tmp = pk[i]; pk[i] = pk[np - 1 - i]; pk[np - 1 - i] = tmp;
        }
        if (take < want) {
            /* cut by the instance limit: more matched beyond? */
            size_t more = 0;
            for (uint32_t i = np ? pk[0].pos : s->n; i-- > 0 && !more;)
                more = time_ok(q, qtime(q, &s->v[(s->head + i) % s->cap]));
            out->cut = more;
        }
    } else {
        pk = arena_alloc(a, s->n * sizeof *pk);
        for (uint32_t i = 0; i < s->n; i++) {
            const hinst_t *x = &s->v[(s->head + i) % s->cap];
            int64_t        t = qtime(q, x);
            if (time_ok(q, t))
                pk[np++] = (pick_t){ t, i };
        }
        if (!series_sorted(s, q->timeprop))
            qsort(pk, np, sizeof *pk, pick_cmp);
        if (want && np > want) {
            pk += np - want;
            np  = want;
        }
        if (lim && np > lim) {
            if (want)                    /* backwards: keep the newest */
                pk += np - lim;
            np       = lim;
            out->cut = true;
        }
    }
    if (!np)
        return false;
    out->name       = s->name;
    out->dataset_id = s->dataset_id ? arena_strdup(a, s->dataset_id) : NULL;
    if (agg) {
        series_buckets(a, q, s, pk, np, agg, out);
        return out->n_buckets > 0;
    }
    out->inst       = arena_alloc(a, np * sizeof *out->inst);
    out->n          = np;
    for (size_t i = 0; i < np; i++)
        materialize(a, s, &s->v[(s->head + pk[i].pos) % s->cap], &out->inst[i]);
    if (out->cut) {
        if (*first == CR_NO_TIME || pk[0].t < *first) *first = pk[0].t;
        if (*last == CR_NO_TIME || pk[np - 1].t > *last) *last = pk[np - 1].t;
    }
    return true;
}

/* An entity of id and types only, for filters on an entity whose version is gone. */
static const cr_entity_t *bare_entity(arena_t *a, const hent_t *e)
{
    cr_entity_t *x = arena_calloc(a, sizeof *x);
    x->id      = e->id;
    x->types   = e->types;
    x->n_types = e->n_types;
    x->created_at = e->created_at;
    x->modified_at = e->modified_at;
    return x;
}

static bool ent_select(arena_t *a, const hist_query_t *q, const entity_filter_t *f, const hent_t *e,
                       hist_entity_t *out, hist_result_t *res, const agg_t *agg)
{
    if (f) {
        const cr_entity_t *v = e->last ? e->last : bare_entity(a, e);
        if (!filter_match(f, v))
            return false;
    }
    memset(out, 0, sizeof *out);
    out->id          = arena_strdup(a, e->id);
    const char **ty  = arena_alloc(a, (e->n_types + 1u) * sizeof *ty);
    memcpy(ty, e->types, e->n_types * sizeof *ty);
    out->types       = ty;
    out->n_types     = e->n_types;
    out->created_at  = e->created_at;
    out->modified_at = e->modified_at;
    out->deleted_at  = e->deleted_at;
    out->series      = arena_alloc(a, (e->n_series + 1u) * sizeof *out->series);
    for (uint32_t i = 0; i < e->n_series; i++) {
        const hseries_t *s = e->series[i];
        if (q->n_attrs && !in_list(q->attrs, q->n_attrs, s->name))
            continue;
        if (!dataset_selected(q, s->dataset_id))
            continue;
        hist_series_t *hs = &out->series[out->n_series];
        if (q->attrs_only) {
            memset(hs, 0, sizeof *hs);
            hs->name       = s->name;
            hs->dataset_id = s->dataset_id;
            out->n_series++;
            continue;
        }
        if (series_select(a, q, s, hs, &res->range_first, &res->range_last, agg)) {
            res->partial |= hs->cut;
            out->n_series++;
        }
    }
    /* group the series of a name together, in first-written order */
    for (size_t i = 0; i + 1 < out->n_series; i++)
        for (size_t j = i + 1; j < out->n_series; j++)
            if (out->series[j].name == out->series[i].name && j != i + 1) {
                hist_series_t tmp = out->series[j];
                memmove(&out->series[i + 2], &out->series[i + 1], (j - i - 1) * sizeof tmp);
                out->series[i + 1] = tmp;
                i++;
            }
    return out->n_series > 0 || q->attrs_only || (!q->n_attrs && !e->n_series && q->timerel == HIST_TIMEREL_NONE);
}

static bool query_impl(hdb_t *db, const char *tenant, const hist_query_t *q, arena_t *a, hist_result_t *out,
                       const agg_t *agg, problem_t *p);

static bool hc_query(void *v, const char *tenant, const hist_query_t *q, arena_t *a,
                     hist_result_t *out, problem_t *p)
{
    return query_impl(v, tenant, q, a, out, NULL, p);
}

static bool hc_aggregate(void *v, const char *tenant, const hist_query_t *q, unsigned methods, int64_t period,
                         arena_t *a, hist_result_t *out, problem_t *p)
{
    hist_query_t qq = *q;
    agg_t        agg = { methods, period };
    qq.inst_limit = 0;                    /* aggregates cover the whole range */
    return query_impl(v, tenant, &qq, a, out, &agg, p);
}

/* A query holds its tenant's read lock for QUERY_CHUNK entities at a time
 * (as corDB's scans do), so a large query does not hold writers back. */
#define QUERY_CHUNK 256

static bool query_impl(hdb_t *db, const char *tenant, const hist_query_t *q, arena_t *a, hist_result_t *out,
                       const agg_t *agg, problem_t *p)
{
    htenant_t *t  = tenant_get(db, tenant, false);

    memset(out, 0, sizeof *out);
    out->range_first = out->range_last = CR_NO_TIME;
    if (!t)
        return true;
    entity_filter_t  fc, *f = NULL;
    if (q->f) {
        fc         = *q->f;
        fc.attrs   = NULL;
        fc.n_attrs = 0;
        f          = &fc;
    }
    /* orderBy (4.23, 5.7.4.4: as for the entity query): every matching
     * entity is selected, then ordered by model's order_compare on its
     * newest version and paged */
    const entity_order_t *order = f ? f->order_by : NULL;
    size_t cap = order ? 16 : q->limit, skip = order ? 0 : q->offset, matched = 0;
    out->items = arena_alloc(a, (cap + 1) * sizeof *out->items);
    const cr_entity_t **ver = order ? arena_alloc(a, (cap + 1) * sizeof *ver) : NULL;
    hist_entity_t scratch;
    hist_result_t aside;                 /* what entities off the page would report */

    filter_regex_reset();
    pthread_rwlock_rdlock(&t->lock);
    bool    by_ids = f && f->n_ids && !f->n_sel;
    size_t  k      = 0, in_chunk = 0;
    hent_t *e      = by_ids ? NULL : t->first;
    while (by_ids ? k < f->n_ids : e != NULL) {
        if (++in_chunk > QUERY_CHUNK) {
            /* writers of the tenant go on between chunks; the scan resumes
             * at the entity it was at, or after its place if it is gone */
            in_chunk = 1;
            const char *rid  = by_ids ? NULL : arena_strdup(a, e->id);
            uint64_t    rord = by_ids ? 0 : e->ord;
            pthread_rwlock_unlock(&t->lock);
            pthread_rwlock_rdlock(&t->lock);
            if (!by_ids && (!(e = ent_find(t, rid)) || e->ord != rord))
                for (e = t->first; e && e->ord < rord; e = e->next) {}
            if (!by_ids && !e)
                break;
        }
        const hent_t *x = e;
        if (!by_ids)
            e = e->next;
        else if (!(x = ent_find(t, f->ids[k++])))
            continue;
        if (order && out->n == cap) {
            hist_entity_t      *ni = arena_alloc(a, (2 * cap + 1) * sizeof *ni);
            const cr_entity_t **nv = arena_alloc(a, (2 * cap + 1) * sizeof *nv);
            memcpy(ni, out->items, out->n * sizeof *ni);
            memcpy(nv, ver, out->n * sizeof *nv);
            out->items = ni;
            ver        = nv;
            cap       *= 2;
        }
        bool           on_page = matched >= skip && out->n < cap;
        hist_entity_t *dst     = on_page ? &out->items[out->n] : &scratch;
        memset(&aside, 0, sizeof aside);
        if (!ent_select(a, q, f, x, dst, on_page ? out : &aside, agg))
            continue;
        matched++;
        if (order) {
            if (x->last) {
                entity_ref(x->last);
                arena_on_free(a, unref_blob, x->last);
                ver[out->n] = x->last;
            } else
                ver[out->n] = bare_entity(a, x);
        }
        if (on_page)
            out->n++;
        else if (matched > skip) {
            out->more = true;
            if (!q->want_count)
                break;
        }
    }
    pthread_rwlock_unlock(&t->lock);
    out->count = matched;
    if (order)
        history_order_page(a, order, q, ver, out);
    if (!filter_regex_overflow(p))
        return true;
    return false;
}

/* ------------------------------------------------------------- the rest */

static bool hc_entity_info(void *v, const char *tenant, const char *id, arena_t *a,
                           const char *const **types, size_t *n_types)
{
    hdb_t     *db = v;
    htenant_t *t  = tenant_get(db, tenant, false);
    bool       ok = false;

    if (!t)
        return false;
    pthread_rwlock_rdlock(&t->lock);
    const hent_t *e = ent_find(t, id);
    if (e) {
        const char **ty = arena_alloc(a, (e->n_types + 1u) * sizeof *ty);
        memcpy(ty, e->types, e->n_types * sizeof *ty);
        if (types) *types = ty;
        if (n_types) *n_types = e->n_types;
        ok = true;
    }
    pthread_rwlock_unlock(&t->lock);
    return ok;
}

static bool not_found(problem_t *p, const char *what, const char *id)
{
    return problem_set(p, PB_RESOURCE_NOT_FOUND, "%s %s has no temporal evolution here", what, id);
}

static bool hc_delete_entity(void *v, const char *tenant, const char *id, problem_t *p)
{
    hdb_t     *db = v;
    htenant_t *t  = tenant_get(db, tenant, false);

    if (!t)
        return not_found(p, "entity", id);
    pthread_rwlock_wrlock(&t->lock);
    hent_t *e = ent_find(t, id);
    if (e) {
        snap_cow(db, t, e);
        ent_unlink(t, e);
        if (db->log)
            log_simple(db, 'E', tenant, id, NULL, NULL, false, 0);
    }
    pthread_rwlock_unlock(&t->lock);
    if (!e)
        return not_found(p, "entity", id);
    ent_free(db, e);
    return true;
}

static bool hc_delete_attr(void *v, const char *tenant, const char *id, const char *name,
                           const char *ds, bool all, problem_t *p)
{
    hdb_t     *db = v;
    htenant_t *t  = tenant_get(db, tenant, false);
    size_t     gone = 0;

    if (!t)
        return not_found(p, "entity", id);
    pthread_rwlock_wrlock(&t->lock);
    hent_t *e = ent_find(t, id);
    if (e) {
        snap_cow(db, t, e);
        uint32_t keep = 0;
        for (uint32_t i = 0; i < e->n_series; i++) {
            hseries_t *s = e->series[i];
            bool       hit = s->name == name &&
                (all || s->dataset_id == ds || (s->dataset_id && ds && !strcmp(s->dataset_id, ds)));
            if (hit) {
                series_free(db, s);
                gone++;
            } else
                e->series[keep++] = s;
        }
        e->n_series = keep;
        if (gone && db->log)
            log_simple(db, 'T', tenant, id, name, ds, all, 0);
    }
    pthread_rwlock_unlock(&t->lock);
    if (!e)
        return not_found(p, "entity", id);
    if (!gone)
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has no temporal evolution of attribute %s%s%s",
                           id, name, ds ? " with datasetId " : "", ds ? ds : "");
    return true;
}

/* The instance of `name` with that id: its series and ring position. */
static hseries_t *inst_find(hent_t *e, const char *name, uint64_t iid, uint32_t *pos)
{
    for (uint32_t i = 0; e && i < e->n_series; i++) {
        hseries_t *s = e->series[i];
        if (s->name != name)
            continue;
        for (uint32_t k = 0; k < s->n; k++)
            if (s->v[(s->head + k) % s->cap].iid == iid) {
                *pos = k;
                return s;
            }
    }
    return NULL;
}

static bool hc_delete_instance(void *v, const char *tenant, const char *id, const char *name,
                               uint64_t iid, problem_t *p)
{
    hdb_t     *db = v;
    htenant_t *t  = tenant_get(db, tenant, false);
    hseries_t *s  = NULL;
    uint32_t   pos = 0;

    if (!t)
        return not_found(p, "entity", id);
    pthread_rwlock_wrlock(&t->lock);
    hent_t *e = ent_find(t, id);
    s = inst_find(e, name, iid, &pos);
    if (s) {
        snap_cow(db, t, e);
        inst_release(db, &s->v[(s->head + pos) % s->cap]);
        for (uint32_t k = pos; k + 1 < s->n; k++)
            s->v[(s->head + k) % s->cap] = s->v[(s->head + k + 1) % s->cap];
        s->n--;
        atomic_fetch_sub(&db->instances, 1);
        if (db->log)
            log_simple(db, 'I', tenant, id, name, NULL, false, iid);
    }
    pthread_rwlock_unlock(&t->lock);
    if (!e)
        return not_found(p, "entity", id);
    if (!s)
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "attribute %s of entity %s has no instance with that instanceId",
                           name, id);
    return true;
}

static bool hc_modify_instance(void *v, const char *tenant, const char *id, const char *name,
                               uint64_t iid, const cr_attr_t *with, int64_t now, problem_t *p)
{
    hdb_t     *db = v;
    htenant_t *t  = tenant_get(db, tenant, false);
    hseries_t *s  = NULL;
    uint32_t   pos = 0;
    bool       ds_bad = false;

    if (!t)
        return not_found(p, "entity", id);
    pthread_rwlock_wrlock(&t->lock);
    hent_t *e = ent_find(t, id);
    s = inst_find(e, name, iid, &pos);
    if (s && with->dataset_id && (!s->dataset_id || strcmp(with->dataset_id, s->dataset_id)))
        ds_bad = true;
    else if (s) {
        snap_cow(db, t, e);
        hinst_t *x = &s->v[(s->head + pos) % s->cap];
        hinst_t  y;
        hist_instance_t in = { .attr = *with, .deleted_at = CR_NO_TIME };
        in.attr.created_at  = x->created_at;
        in.attr.modified_at = now;
        inst_set(db, &y, &in);
        y.iid = x->iid;
        inst_release(db, x);
        *x = y;
        s->obs_sorted = false;
        s->mod_sorted = false;
        e->modified_at = now;
        if (db->log)
            log_modify(db, tenant, id, name, iid, with, now);
    }
    pthread_rwlock_unlock(&t->lock);
    if (!e)
        return not_found(p, "entity", id);
    if (ds_bad)
        return problem_set(p, PB_BAD_REQUEST_DATA, "the datasetId of an instance cannot change");
    if (!s)
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "attribute %s of entity %s has no instance with that instanceId",
                           name, id);
    return true;
}

/* --dbSync always: the write's history records are on disk before its
 * answer (hlog_sync: one fdatasync for every writer waiting meanwhile). */
static bool hc_sync(void *v)
{
    hdb_t *db = v;

    if (!db->log || hlog_sync(db->log))
        return true;
    LOG_E("history: the history of an acknowledged write may not be on disk (the history log failed)");
    return false;
}

static void hc_stats(void *v, uint64_t *instances, uint64_t *series, uint64_t *bytes, uint64_t *dropped)
{
    hdb_t *db = v;

    *instances = atomic_load(&db->instances);
    *series    = atomic_load(&db->series);
    *bytes     = atomic_load(&db->bytes);
    *dropped   = atomic_load(&db->dropped);
}


/* --------------------------------------------------------- on --dbDir
 *
 * Records (payloads of hlog.c's records; integers varints, signed zigzag,
 * strings length-prefixed, "ds" an optional string: 0, or 1 + string):
 *   'A' tenant zz(at) flags(1 entity_deleted, 2 upsert) str(entity_encode of
 *       {id, types, attrs = the instances}) zz(deletedAt) per instance
 *   'E' tenant id                       delete entity
 *   'T' tenant id name ds all           delete attribute
 *   'I' tenant id name iid              delete instance
 *   'M' tenant id name iid zz(now) str(entity_encode of {attrs = [with]})
 *   'S' tenant id n_types types... zz(created) zz(modified) zz(deleted)
 *       next_iid n_series, per series: name ds flags n, per instance:
 *       iid tag zz(obs) zz(cre) zz(mod) value (NUM: 8 bytes; DEL: kind;
 *       BLOB: str(entity_encode))      the state, in snapshots (older files)
 *   'R' tenant id ord, then as 'S'     the state, in snapshots: written in
 *       any order (a writer copies its entity first, snap_cow), put back in
 *       creation order (ord) when the snapshot is loaded (sort_loaded)
 */
static uint64_t zz(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static int64_t  unzz(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

static void put_s(sbuf_t *sb, const char *s) { cr_put_str(sb, s, strlen(s)); }
static void put_opt(sbuf_t *sb, const char *s)
{
    if (!s) { cr_put_varint(sb, 0); return; }
    cr_put_varint(sb, 1);
    put_s(sb, s);
}

/* A record buffer per writer thread, freed when the thread ends. */
static pthread_key_t  rec_key;
static pthread_once_t rec_once = PTHREAD_ONCE_INIT;

static void rec_free(void *v)
{
    sb_release(v);
    free(v);
}

static void rec_init(void)
{
    if (pthread_key_create(&rec_key, rec_free) != 0) {
        LOG_E("history: cannot create a thread key; aborting");
        abort();
    }
}

static sbuf_t *rec_buf(void)
{
    pthread_once(&rec_once, rec_init);
    sbuf_t *sb = pthread_getspecific(rec_key);
    if (!sb) {
        sb = cr_xcalloc(1, sizeof *sb);
        sb_init(sb, NULL, 4096);
        if (pthread_setspecific(rec_key, sb) != 0) {
            LOG_E("history: cannot keep a thread's buffer; aborting");
            abort();
        }
    }
    sb_clear(sb);
    return sb;
}

/* the buffer is kept for the thread; a very large one is given back */
static void rec_done(void)
{
    sbuf_t *sb = pthread_getspecific(rec_key);
    if (sb && sb->cap > (1u << 22)) {
        sb_release(sb);
        sb_init(sb, NULL, 4096);
    }
}

static void log_write(hdb_t *db, const char *tenant, const hist_write_t *x)
{
    enum { CHUNK = 60000 };
    size_t off = 0;
    do {
        size_t       n  = x->n_inst - off > CHUNK ? CHUNK : x->n_inst - off;
        sbuf_t      *sb = rec_buf();
        cr_attr_t   *at = n ? cr_xreallocarray(NULL, n, sizeof *at) : NULL;
        cr_entity_t  pe = { 0 };
        for (size_t i = 0; i < n; i++)
            at[i] = x->inst[off + i].attr;
        pe.id      = x->id;
        pe.types   = (const char **)x->types;
        pe.n_types = (uint16_t)x->n_types;
        pe.attrs   = at;
        pe.n_attrs = (uint16_t)n;
        sb_addc(sb, 'A');
        put_s(sb, tenant);
        cr_put_varint(sb, zz(x->at));
        cr_put_varint(sb, (x->entity_deleted ? 1u : 0u) | (x->upsert ? 2u : 0u));
        sbuf_t enc;
        sb_init(&enc, NULL, 256);
        entity_encode(&enc, &pe);
        cr_put_str(sb, enc.p, enc.len);
        sb_release(&enc);
        for (size_t i = 0; i < n; i++)
            cr_put_varint(sb, zz(x->inst[off + i].deleted_at));
        free(at);
        hlog_append(db->log, sb->p, sb->len);
        off += n;
    } while (off < x->n_inst);
    rec_done();
}

static void log_simple(hdb_t *db, char op, const char *tenant, const char *id, const char *name, const char *ds,
                       bool all, uint64_t iid)
{
    sbuf_t *sb = rec_buf();
    sb_addc(sb, op);
    put_s(sb, tenant);
    put_s(sb, id);
    if (op == 'T') {
        put_s(sb, name);
        put_opt(sb, ds);
        cr_put_varint(sb, all);
    } else if (op == 'I') {
        put_s(sb, name);
        cr_put_varint(sb, iid);
    }
    hlog_append(db->log, sb->p, sb->len);
    rec_done();
}

static void log_modify(hdb_t *db, const char *tenant, const char *id, const char *name, uint64_t iid,
                       const cr_attr_t *with, int64_t now)
{
    sbuf_t      *sb = rec_buf();
    cr_entity_t  pe = { 0 };
    cr_attr_t    one = *with;
    const char  *types[1] = { name };
    pe.id = id;
    pe.types = types;
    pe.n_types = 1;
    pe.attrs = &one;
    pe.n_attrs = 1;
    sb_addc(sb, 'M');
    put_s(sb, tenant);
    put_s(sb, id);
    put_s(sb, name);
    cr_put_varint(sb, iid);
    cr_put_varint(sb, zz(now));
    sbuf_t enc;
    sb_init(&enc, NULL, 256);
    entity_encode(&enc, &pe);
    cr_put_str(sb, enc.p, enc.len);
    sb_release(&enc);
    hlog_append(db->log, sb->p, sb->len);
    rec_done();
}

static char *get_s(cr_reader_t *r, arena_t *a)
{
    size_t      n;
    const char *s = cr_get_str(r, &n);
    return s ? arena_strndup(a, s, n) : NULL;
}

/* One instance, as snapshots hold it. */
static void put_inst(sbuf_t *sb, const hinst_t *x)
{
    cr_put_varint(sb, x->iid);
    cr_put_varint(sb, x->tag);
    cr_put_varint(sb, zz(x->observed_at));
    cr_put_varint(sb, zz(x->created_at));
    cr_put_varint(sb, zz(x->modified_at));
    if (x->tag == HT_NUM)
        sb_add(sb, (const char *)&x->v.num, 8);
    else if (x->tag == HT_DEL)
        cr_put_varint(sb, (uint64_t)x->v.kind);
    else if (x->tag == HT_BLOB) {
        sbuf_t enc;
        sb_init(&enc, NULL, 256);
        entity_encode(&enc, x->v.blob);
        cr_put_str(sb, enc.p, enc.len);
        sb_release(&enc);
    }
}

static bool get_inst(hdb_t *db, cr_reader_t *r, arena_t *a, hinst_t *x)
{
    memset(x, 0, sizeof *x);
    x->iid         = cr_get_varint(r);
    x->tag         = cr_get_varint(r) & 0xff;
    x->observed_at = unzz(cr_get_varint(r));
    x->created_at  = unzz(cr_get_varint(r));
    x->modified_at = unzz(cr_get_varint(r));
    if (x->tag == HT_NUM) {
        if (r->end - r->p < 8)
            return false;
        memcpy(&x->v.num, r->p, 8);
        r->p += 8;
    } else if (x->tag == HT_DEL)
        x->v.kind = (int64_t)cr_get_varint(r);
    else if (x->tag == HT_BLOB) {
        size_t       len;
        const char  *enc = cr_get_str(r, &len);
        cr_entity_t *d   = enc ? entity_decode(a, enc, len) : NULL;
        if (!d || d->n_attrs != 1 || !(x->v.blob = entity_freeze(d)))
            return false;
        atomic_fetch_add(&db->bytes, x->v.blob->bytes);
    } else if (x->tag != HT_TRUE && x->tag != HT_FALSE)
        return false;
    return !r->bad;
}

static bool load_entity(hdb_t *db, cr_reader_t *r, arena_t *a, bool with_ord)
{
    const char *tenant = get_s(r, a), *id = get_s(r, a);
    uint64_t    ord    = with_ord ? cr_get_varint(r) : 0;
    size_t      nt     = (size_t)cr_get_varint(r);
    if (r->bad || !tenant || !id || nt > CR_ATTRS_MAX)
        return false;
    const char **types = arena_alloc(a, (nt + 1) * sizeof *types);
    for (size_t i = 0; i < nt; i++) {
        const char *ty = get_s(r, a);
        if (!ty) return false;
        types[i] = intern_cstr(ty);
    }
    htenant_t *t = tenant_get(db, tenant, true);
    if (ent_find(t, id))
        return false;
    hent_t *e = cr_xcalloc(1, sizeof *e);
    e->id          = cr_xstrdup(id);
    e->created_at  = unzz(cr_get_varint(r));
    e->modified_at = unzz(cr_get_varint(r));
    e->deleted_at  = unzz(cr_get_varint(r));
    e->next_iid    = cr_get_varint(r);
    ent_types(e, types, nt);
    ent_link(t, e);
    if (with_ord) {
        if (e->prev && e->prev->ord > ord)
            t->unsorted = db->unsorted = true;
        e->ord = ord;
        if (t->next_ord < ord)
            t->next_ord = ord;
    }
    e->snap_epoch = atomic_load(&db->epoch);
    uint64_t ns = cr_get_varint(r);
    for (uint64_t i = 0; i < ns && !r->bad; i++) {
        const char *name = get_s(r, a);
        const char *ds   = cr_get_varint(r) ? get_s(r, a) : NULL;
        unsigned    fl   = (unsigned)cr_get_varint(r);
        uint64_t    n    = cr_get_varint(r);
        if (r->bad || !name || n > (uint64_t)(r->end - r->p))
            return false;
        hseries_t *s = series_get(db, e, intern_cstr(name), ds, true);
        s->cap = (uint32_t)(n ? n : 4);
        if (db->max_inst && s->cap > db->max_inst && n <= db->max_inst)
            s->cap = db->max_inst;
        s->v = cr_xreallocarray(NULL, s->cap, sizeof *s->v);
        atomic_fetch_add(&db->bytes, (uint64_t)s->cap * sizeof *s->v);
        s->obs_sorted = fl & 1;
        s->mod_sorted = (fl & 2) != 0;
        s->cre_sorted = (fl & 4) != 0;
        for (uint64_t k = 0; k < n && !r->bad; k++) {
            if (!get_inst(db, r, a, &s->v[s->n]))
                return false;
            s->n++;
            atomic_fetch_add(&db->instances, 1);
        }
    }
    return !r->bad;
}

/* 'Q': a chunk of a series of an entity whose 'R' came before it. */
static bool load_chunk(hdb_t *db, cr_reader_t *r, arena_t *a)
{
    const char *tenant = get_s(r, a), *id = get_s(r, a), *name = get_s(r, a);
    const char *ds     = cr_get_varint(r) ? get_s(r, a) : NULL;
    uint64_t    total  = cr_get_varint(r), k = cr_get_varint(r);
    htenant_t  *t      = tenant && id && name && !r->bad ? tenant_get(db, tenant, false) : NULL;
    hent_t     *e      = t ? ent_find(t, id) : NULL;
    hseries_t  *s      = e ? series_get(db, e, intern_cstr(name), ds, false) : NULL;
    if (!s || k > (uint64_t)(r->end - r->p) || total > UINT32_MAX || s->n + k > UINT32_MAX)
        return false;
    uint64_t want = s->n + k > total ? s->n + k : total;
    if (want > s->cap) {
        s->v = cr_xreallocarray(s->v, want, sizeof *s->v);
        atomic_fetch_add(&db->bytes, (want - s->cap) * sizeof *s->v);
        s->cap = (uint32_t)want;
    }
    for (uint64_t i = 0; i < k; i++) {
        if (!get_inst(db, r, a, &s->v[s->n]))
            return false;
        s->n++;
        atomic_fetch_add(&db->instances, 1);
    }
    return !r->bad;
}

static void sort_loaded(hdb_t *db);

static bool replay(void *ud, const uint8_t *payload, size_t len, bool from_snapshot)
{
    hdb_t      *db = ud;
    cr_reader_t r  = { payload + 1, payload + len, false };
    arena_t    *a  = arena_new(4096);
    bool        ok = false;
    problem_t   p  = { 0 };

    if (!len)
        goto done;
    char op = (char)payload[0];
    if (op == 'S' || op == 'R') {
        ok = load_entity(db, &r, a, op == 'R');
        goto done;
    }
    if (op == 'Q') {
        ok = load_chunk(db, &r, a);
        goto done;
    }
    if (from_snapshot)
        goto done;
    sort_loaded(db);                     /* the snapshot is in: creation order back */
    const char *tenant = get_s(&r, a);
    if (!tenant)
        goto done;
    hlog_t *keep = db->log;
    db->log = NULL;                      /* replayed writes are not logged again */
    if (op == 'A') {
        hist_write_t w = { 0 };
        w.at = unzz(cr_get_varint(&r));
        unsigned fl = (unsigned)cr_get_varint(&r);
        size_t       elen;
        const char  *enc = cr_get_str(&r, &elen);
        cr_entity_t *d   = enc ? entity_decode(a, enc, elen) : NULL;
        if (d) {
            hist_instance_t *in = arena_alloc(a, (d->n_attrs + 1u) * sizeof *in);
            for (uint16_t i = 0; i < d->n_attrs; i++) {
                in[i].attr        = d->attrs[i];
                in[i].deleted_at  = unzz(cr_get_varint(&r));
                in[i].instance_id = 0;
            }
            w.id = d->id;
            w.types = (const char *const *)d->types;
            w.n_types = d->n_types;
            w.entity_deleted = fl & 1;
            w.upsert = (fl & 2) != 0;
            w.inst = in;
            w.n_inst = d->n_attrs;
            ok = !r.bad && hc_append(db, tenant, &w, 1, &p);
        }
    } else if (op == 'E') {
        const char *id = get_s(&r, a);
        ok = id && (hc_delete_entity(db, tenant, id, &p) || true);
    } else if (op == 'T') {
        const char *id = get_s(&r, a), *name = get_s(&r, a);
        const char *ds = cr_get_varint(&r) ? get_s(&r, a) : NULL;
        bool        all = cr_get_varint(&r) != 0;
        ok = id && name && !r.bad && (hc_delete_attr(db, tenant, id, intern_cstr(name), ds, all, &p) || true);
    } else if (op == 'I') {
        const char *id = get_s(&r, a), *name = get_s(&r, a);
        uint64_t    iid = cr_get_varint(&r);
        ok = id && name && !r.bad && (hc_delete_instance(db, tenant, id, intern_cstr(name), iid, &p) || true);
    } else if (op == 'M') {
        const char *id = get_s(&r, a), *name = get_s(&r, a);
        uint64_t    iid = cr_get_varint(&r);
        int64_t     now = unzz(cr_get_varint(&r));
        size_t       elen;
        const char  *enc = cr_get_str(&r, &elen);
        cr_entity_t *d   = enc ? entity_decode(a, enc, elen) : NULL;
        ok = id && name && d && d->n_attrs == 1 && !r.bad &&
             (hc_modify_instance(db, tenant, id, intern_cstr(name), iid, &d->attrs[0], now, &p) || true);
    }
    db->log = keep;
done:
    arena_free(a);
    return ok;
}

/* A snapshot loaded out of creation order ('R' records copied first by
 * their writers): each such tenant's entity list is put back in ord order
 * before the log's records are replayed (they may create entities). */
static int ord_cmp(const void *a, const void *b)
{
    uint64_t x = (*(hent_t *const *)a)->ord, y = (*(hent_t *const *)b)->ord;
    return x < y ? -1 : x > y;
}

static void sort_loaded(hdb_t *db)
{
    if (!db->unsorted)
        return;
    db->unsorted = false;
    for (htenant_t *t = atomic_load(&db->tenants); t; t = t->next) {
        if (!t->unsorted)
            continue;
        t->unsorted = false;
        hent_t **v = cr_xreallocarray(NULL, t->n, sizeof *v);
        size_t   n = 0;
        for (hent_t *e = t->first; e; e = e->next)
            v[n++] = e;
        qsort(v, n, sizeof *v, ord_cmp);
        for (size_t i = 0; i < n; i++) {
            v[i]->prev = i ? v[i - 1] : NULL;
            v[i]->next = i + 1 < n ? v[i + 1] : NULL;
        }
        t->first = n ? v[0] : NULL;
        t->last  = n ? v[n - 1] : NULL;
        free(v);
    }
}

/* A snapshot, incrementally, so that a writer waits for one entity's copy
 * at most (never for the whole history):
 *  1. snap_mark: with the tenant list's mutex and every tenant's write lock
 *     held (O(tenants), no copy), the log's position is marked
 *     (hlog_image_begin), the epoch advanced (every entity is then still to
 *     be copied: its snap_epoch differs) and each tenant's walk set at its
 *     first entity. An entity created afterwards takes the new epoch: its
 *     records are in the log after the mark.
 *  2. snap_walk: the snapshot thread copies the entities one at a time,
 *     each under its tenant's read lock (readers go on, a writer waits for
 *     that one entity's copy), in creation order.
 *  3. snap_cow: a writer about to change (or delete) an entity not yet
 *     copied copies it first, under the tenant's write lock it holds, so
 *     the image holds every entity as it was at the mark.
 *  4. every entity copied, the image is written and installed by
 *     hlog_image_install (writers go on; the log is compacted to the
 *     records after the mark).
 * Records copied by writers come out of creation order: they carry their
 * ord ('R'), and sort_loaded puts the list back at start. */

#define SNAP_CHUNK 256              /* instances copied under a lock at a time */
#define SNAP_RECOVER_MS 200         /* a failed log: a recovery snapshot tried so often at most */

/* A whole record into the image; a writer's copy (t0 set: of k instances)
 * is counted. */
static void snap_add(hdb_t *db, const sbuf_t *sb, int64_t t0, uint32_t k)
{
    pthread_mutex_lock(&db->snap_mu);
    if (db->im)
        hlog_image_add(db->im, sb->p, sb->len);
    else
        LOG_E("history: an entity to copy with no snapshot in progress");
    if (t0) {
        uint64_t us = (uint64_t)(cr_now_us() - t0);
        db->cow_n++;
        if (us > db->cow_max_us)
            db->cow_max_us = us;
        if (k > db->cow_max_inst)
            db->cow_max_inst = k;
    }
    pthread_mutex_unlock(&db->snap_mu);
}

/* The copy of e begins (once per epoch): its record ('R': its fields and
 * its series, with no instances) into the image, and each series' count at
 * the mark noted, O(series); the instances follow in 'Q' chunks. */
static void snap_open(hdb_t *db, htenant_t *t, hent_t *e, uint64_t ep, int64_t t0)
{
    if (e->snap_open == ep)
        return;
    sbuf_t *sb = rec_buf();
    sb_addc(sb, 'R');
    put_s(sb, t->name);
    put_s(sb, e->id);
    cr_put_varint(sb, e->ord);
    cr_put_varint(sb, e->n_types);
    for (uint16_t i = 0; i < e->n_types; i++)
        put_s(sb, e->types[i]);
    cr_put_varint(sb, zz(e->created_at));
    cr_put_varint(sb, zz(e->modified_at));
    cr_put_varint(sb, zz(e->deleted_at));
    cr_put_varint(sb, e->next_iid);
    cr_put_varint(sb, e->n_series);
    for (uint32_t i = 0; i < e->n_series; i++) {
        hseries_t *s = e->series[i];
        put_s(sb, s->name);
        put_opt(sb, s->dataset_id);
        cr_put_varint(sb, (s->obs_sorted ? 1u : 0u) | (s->mod_sorted ? 2u : 0u) | (s->cre_sorted ? 4u : 0u));
        cr_put_varint(sb, 0);
        s->snap_ep    = ep;
        s->snap_n     = s->n;
        s->snap_done  = 0;
        s->snap_shift = 0;
    }
    snap_add(db, sb, t0, 0);
    rec_done();
    e->snap_open = ep;
}

static bool snap_pending(const hseries_t *s, uint64_t ep)
{
    return s->snap_ep == ep && s->snap_done < s->snap_n;
}

/* The next instances of s's copy (at most max; 0: all), one 'Q' record:
 * tenant id name ds total k, then k instances. Returns k. */
static uint32_t snap_chunk(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s, uint32_t max, int64_t t0)
{
    uint32_t k = s->snap_n - s->snap_done;
    if (max && k > max)
        k = max;
    sbuf_t *sb = rec_buf();
    sb_addc(sb, 'Q');
    put_s(sb, t->name);
    put_s(sb, e->id);
    put_s(sb, s->name);
    put_opt(sb, s->dataset_id);
    cr_put_varint(sb, s->snap_n);
    cr_put_varint(sb, k);
    for (uint32_t i = 0; i < k; i++)
        put_inst(sb, &s->v[(s->head + s->snap_done + i - s->snap_shift) % s->cap]);
    s->snap_done += k;
    snap_add(db, sb, t0, k);
    rec_done();
    return k;
}

/* A writer, under t's write lock, before it changes e's fields or appends
 * to its series: e's copy begins unless it is done (the usual case: no
 * snapshot, or e copied, or created after the mark: one atomic load). */
static void snap_touch(hdb_t *db, htenant_t *t, hent_t *e)
{
    uint64_t ep = atomic_load_explicit(&db->epoch, memory_order_acquire);

    if (e->snap_epoch != ep)
        snap_open(db, t, e, ep, cr_now_us());
}

/* Before the head of s goes (a bound): copied first if it is not yet, one
 * chunk (so a writer of a large series waits for SNAP_CHUNK instances at
 * most, not for the series). */
static void snap_before_drop(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s)
{
    uint64_t ep = atomic_load_explicit(&db->epoch, memory_order_acquire);

    if (!snap_pending(s, ep))
        return;
    if (s->snap_done <= s->snap_shift)
        snap_chunk(db, t, e, s, SNAP_CHUNK, cr_now_us());
    s->snap_shift++;
}

/* The rest of s's copy, before it changes in place (an upsert, an
 * insertion among the instances of the mark, a delete). */
static void snap_series_all(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s)
{
    uint64_t ep = atomic_load_explicit(&db->epoch, memory_order_acquire);

    if (snap_pending(s, ep))
        snap_chunk(db, t, e, s, 0, cr_now_us());
}

static void snap_before_insert(hdb_t *db, htenant_t *t, hent_t *e, hseries_t *s, uint32_t pos)
{
    uint64_t ep = atomic_load_explicit(&db->epoch, memory_order_acquire);

    if (snap_pending(s, ep) && pos < s->snap_n - s->snap_shift)
        snap_series_all(db, t, e, s);
}

/* A writer, under t's write lock, before it deletes e or changes an
 * instance in place: the rest of e's copy first. */
static void snap_cow(hdb_t *db, htenant_t *t, hent_t *e)
{
    uint64_t ep = atomic_load_explicit(&db->epoch, memory_order_acquire);

    if (e->snap_epoch == ep)
        return;
    snap_open(db, t, e, ep, cr_now_us());
    for (uint32_t i = 0; i < e->n_series; i++)
        snap_series_all(db, t, e, e->series[i]);
    e->snap_epoch = ep;
}

static htenant_t *snap_mark(hdb_t *db, uint64_t *ep)
{
    atomic_store(&db->wait_max_us, 0);
    atomic_store(&db->walking, true);
    pthread_mutex_lock(&db->mu);         /* no tenant is added meanwhile */
    htenant_t *first = atomic_load(&db->tenants);
    for (htenant_t *t = first; t; t = t->next)
        pthread_rwlock_wrlock(&t->lock);
    pthread_mutex_lock(&db->snap_mu);
    db->im     = hlog_image_begin(db->log);
    db->cow_n  = 0;
    db->cow_max_us = 0;
    db->cow_max_inst = 0;
    pthread_mutex_unlock(&db->snap_mu);
    for (htenant_t *t = first; t; t = t->next)
        t->snap_cur = t->first;
    *ep = atomic_fetch_add_explicit(&db->epoch, 1, memory_order_acq_rel) + 1;
    for (htenant_t *t = first; t; t = t->next)
        pthread_rwlock_unlock(&t->lock);
    pthread_mutex_unlock(&db->mu);
    return first;
}

/* Copies what the writers have not, in creation order, under each
 * tenant's read lock for SNAP_CHUNK instances at a time (a writer of the
 * tenant waits for one chunk). Returns the longest hold of a lock. */
static int64_t snap_walk(hdb_t *db, htenant_t *first, uint64_t ep)
{
    int64_t longest = 0;

    for (htenant_t *t = first; t; t = t->next)
        for (hent_t *e = NULL;;) {
            pthread_rwlock_rdlock(&t->lock);
            int64_t t0 = cr_now_us();
            e = t->snap_cur;
            for (unsigned skip = 0; e && e->snap_epoch == ep && skip < 4096; skip++)
                e = e->next;             /* copied, or new */
            if (e && e->snap_epoch != ep) {
                uint32_t budget = SNAP_CHUNK;
                bool     left   = false;
                snap_open(db, t, e, ep, 0);
                for (uint32_t i = 0; i < e->n_series; i++) {
                    hseries_t *s = e->series[i];
                    while (budget && snap_pending(s, ep))
                        budget -= snap_chunk(db, t, e, s, budget, 0);
                    left = left || snap_pending(s, ep);
                }
                if (!left) {
                    e->snap_epoch = ep;
                    e = e->next;
                }
            }
            t->snap_cur = e;
            int64_t held = cr_now_us() - t0;
            pthread_rwlock_unlock(&t->lock);
            if (held > longest)
                longest = held;
            if (!e)
                break;
        }
    return longest;
}

static bool snapshot_now(hdb_t *db, problem_t *p)
{
    uint64_t ep;

    int64_t    t0    = cr_now_us();
    htenant_t *first = snap_mark(db, &ep);
    int64_t    t1    = cr_now_us();
    int64_t    held  = snap_walk(db, first, ep);
    atomic_store(&db->walking, false);
    pthread_mutex_lock(&db->snap_mu);    /* every entity is copied: no writer adds any more */
    hlog_image_t *im = db->im;
    uint64_t cow_n = db->cow_n, cow_max = db->cow_max_us, cow_inst = db->cow_max_inst;
    db->im = NULL;
    pthread_mutex_unlock(&db->snap_mu);
    int64_t t2 = cr_now_us(), tail = 0;
    bool ok = hlog_image_install(db->log, im, &tail, p);
    if (ok)
        LOG_I("history: snapshot of %llu instances: marked in %.2f ms (writers waited), copied entity by entity "
              "in %.1f ms (a tenant's lock held %.2f ms at most; %llu entities copied first by their writers, the longest in %.2f ms, "
              "of %llu instances at once at most; a writer waited %.2f ms at most), written in %.1f ms (appends waited %.2f ms for "
              "the log's tail)",
              (unsigned long long)atomic_load(&db->instances), (double)(t1 - t0) / 1000.0,
              (double)(t2 - t1) / 1000.0, (double)held / 1000.0, (unsigned long long)cow_n,
              (double)cow_max / 1000.0, (unsigned long long)cow_inst, (double)atomic_load(&db->wait_max_us) / 1000.0,
              (double)(cr_now_us() - t2) / 1000.0, (double)tail / 1000.0);
    else
        LOG_E("%s", p->detail);
    return ok;
}

/* The snapshot thread takes a snapshot now (one at a time: none when one
 * is being written). */
static void snap_request(hdb_t *db)
{
    bool no = false;

    if (!atomic_compare_exchange_strong(&db->snapping, &no, true))
        return;
    pthread_mutex_lock(&db->snap_mu);
    db->snap_want = true;
    pthread_cond_signal(&db->snap_cv);
    pthread_mutex_unlock(&db->snap_mu);
}

/* POST /admin/snapshot: the snapshot thread starts one, as the store's does
 * (the request's worker, which serves other connections too, does not copy
 * the history); its outcome is the log line. */
static bool hc_snapshot(void *v, problem_t *p)
{
    hdb_t *db = v;

    (void)p;
    if (db->log && db->snap_thr_on)
        snap_request(db);
    return true;
}

/* The log has grown by --dbSnapshotSize: the snapshot thread takes it (the
 * writer that noticed goes on). */
static void maybe_snapshot(hdb_t *db)
{
    size_t limit = cr_config.db_snapshot_size;

    if (!db->log || !db->snap_thr_on || atomic_load(&db->snapping))
        return;
    if (hlog_failed(db->log)) {
        /* the log failed (hlog_failed): a snapshot rewrites what memory
         * holds; asked for at most every SNAP_RECOVER_MS while it fails */
        int64_t now = cr_now_us(), last = atomic_load(&db->recover_us);
        if (now - last >= SNAP_RECOVER_MS * 1000 && atomic_compare_exchange_strong(&db->recover_us, &last, now))
            snap_request(db);
        return;
    }
    if (!limit || hlog_size(db->log) < limit)
        return;
    snap_request(db);
}

static void *snap_main(void *v)
{
    hdb_t *db = v;

    pthread_mutex_lock(&db->snap_mu);
    while (!db->snap_stop) {
        if (!db->snap_want) {
            if (!hlog_failed(db->log)) {
                pthread_cond_wait(&db->snap_cv, &db->snap_mu);
                continue;
            }
            /* a failed log with no writer coming to ask (maybe_snapshot):
             * the recovery is tried every SNAP_RECOVER_MS all the same */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += SNAP_RECOVER_MS * 1000000L;
            ts.tv_sec  += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            if (pthread_cond_timedwait(&db->snap_cv, &db->snap_mu, &ts) == 0 || db->snap_want || db->snap_stop ||
                !hlog_failed(db->log))
                continue;
            bool no = false;
            if (!atomic_compare_exchange_strong(&db->snapping, &no, true))
                continue;
            db->snap_want = true;
            continue;
        }
        db->snap_want = false;
        pthread_mutex_unlock(&db->snap_mu);
        problem_t p = { 0 };
        snapshot_now(db, &p);
        atomic_store(&db->snapping, false);
        pthread_mutex_lock(&db->snap_mu);
    }
    pthread_mutex_unlock(&db->snap_mu);
    return NULL;
}

static bool persist_open(hdb_t *db, store_t *s, problem_t *p)
{
    int64_t t0 = cr_now_us();

    db->log = NULL;
    bool    always = cr_config.db_sync && !strcmp(cr_config.db_sync, "always");
    hlog_t *l      = hlog_open(cr_config.db_dir, always, cr_config.db_sync_interval_ms, replay, db, p);
    if (!l)
        return false;
    db->log = l;
    sort_loaded(db);                     /* a snapshot with no log after it */
    if (pthread_create(&db->snap_thr, NULL, snap_main, db) != 0)
        return problem_set(p, PB_INTERNAL_ERROR, "history: cannot start the snapshot thread");
    db->snap_thr_on = true;
    /* the newest versions, for q, geo and scope on history entities */
    uint64_t n = 0;
    for (htenant_t *t = atomic_load(&db->tenants); t; t = t->next)
        for (hent_t *e = t->first; e; e = e->next) {
            problem_t ignore = { 0 };
            cr_entity_t *v = store_get(s, t->name, e->id, &ignore);
            if (v) {
                entity_unref(e->last);
                e->last = v;
            }
            n++;
        }
    if (n)
        LOG_I("history: %llu entities, %llu instances recovered from %s in %.1f ms", (unsigned long long)n,
              (unsigned long long)atomic_load(&db->instances), cr_config.db_dir,
              (double)(cr_now_us() - t0) / 1000.0);
    return true;
}

const history_backend_t history_cordb = {
    .name            = "corDB",
    .open            = hc_open,
    .close           = hc_close,
    .append          = hc_append,
    .query           = hc_query,
    .aggregate       = hc_aggregate,
    .entity_info     = hc_entity_info,
    .delete_entity   = hc_delete_entity,
    .delete_attr     = hc_delete_attr,
    .delete_instance = hc_delete_instance,
    .modify_instance = hc_modify_instance,
    .stats           = hc_stats,
    .sync            = hc_sync,
    .snapshot        = hc_snapshot,
};
