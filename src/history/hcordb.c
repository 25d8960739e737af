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
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "history.h"

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
};

typedef struct htenant htenant_t;
struct htenant {
    const char      *name;      /* interned */
    pthread_rwlock_t lock;
    hent_t         **slot;
    size_t           nslot, n;
    hent_t          *first, *last;
    htenant_t       *next;
};

typedef struct hdb {
    pthread_mutex_t  mu;        /* the tenant list */
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
        if (pthread_rwlock_init(&t->lock, NULL) != 0) {
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
        x->v.kind = a->kind;
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
    static const char *no_types[1];
    one.dataset_id = NULL;              /* the series holds it */
    d.id      = "";
    d.types   = no_types;
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

static void series_drop_head(hdb_t *db, hseries_t *s)
{
    inst_release(db, &s->v[s->head]);
    s->head = (s->head + 1) % s->cap;
    s->n--;
    atomic_fetch_sub(&db->instances, 1);
    atomic_fetch_add(&db->dropped, 1);
}

static void series_push(hdb_t *db, hent_t *e, hseries_t *s, const hist_instance_t *in, int64_t now)
{
    if (db->max_inst && s->n >= db->max_inst)
        series_drop_head(db, s);
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
    if (s->n) {
        const hinst_t *prev = &s->v[(s->head + s->n - 1) % s->cap];
        if (x.observed_at == CR_NO_TIME || prev->observed_at > x.observed_at)
            s->obs_sorted = false;
        if (prev->modified_at > x.modified_at)
            s->mod_sorted = false;
    } else {
        s->obs_sorted = x.observed_at != CR_NO_TIME;
        s->mod_sorted = true;
    }
    s->v[(s->head + s->n) % s->cap] = x;
    s->n++;
    atomic_fetch_add(&db->instances, 1);
    if (db->retention)
        while (s->n > 1 && keep_time(&s->v[s->head]) < now - db->retention)
            series_drop_head(db, s);
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
    for (uint32_t k = 0; k < s->n; k++) {
        hinst_t *x = &s->v[(s->head + k) % s->cap];
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
    return db;
}

static void hc_close(void *v)
{
    hdb_t *db = v;

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
    free(db);
}

/* -------------------------------------------------------------- append */

static bool hc_append(void *v, const char *tenant, const hist_write_t *w, size_t n, problem_t *p)
{
    hdb_t     *db = v;
    htenant_t *t  = tenant_get(db, tenant, true);

    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < n; i++) {
        const hist_write_t *x = &w[i];
        hent_t             *e = ent_find(t, x->id);
        if (!e) {
            e             = cr_xcalloc(1, sizeof *e);
            e->id         = cr_xstrdup(x->id);
            e->created_at = x->at;
            e->deleted_at = CR_NO_TIME;
            ent_link(t, e);
        }
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
            if (!x->upsert || !series_upsert(db, s, in, x->at))
                series_push(db, e, s, in, x->at);
        }
    }
    pthread_rwlock_unlock(&t->lock);
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
    default:                  return true;     /* createdAt is the append time */
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
        at->kind = x->tag == HT_DEL ? (uint8_t)x->v.kind : ATTR_PROPERTY;
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

/* The selected instances of s into out (ascending); returns false when none. */
static bool series_select(arena_t *a, const hist_query_t *q, const hseries_t *s, hist_series_t *out,
                          int64_t *first, int64_t *last)
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
                       hist_entity_t *out, hist_result_t *res)
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
        if (series_select(a, q, s, hs, &res->range_first, &res->range_last)) {
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

static bool hc_query(void *v, const char *tenant, const hist_query_t *q, arena_t *a,
                     hist_result_t *out, problem_t *p)
{
    hdb_t     *db = v;
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
    size_t cap = q->limit, skip = q->offset, matched = 0;
    out->items = arena_alloc(a, (cap + 1) * sizeof *out->items);
    hist_entity_t scratch;
    hist_result_t aside;                 /* what entities off the page would report */

    filter_regex_reset();
    pthread_rwlock_rdlock(&t->lock);
    bool   by_ids = f && f->n_ids && !f->n_sel;
    size_t k      = 0;
    for (hent_t *e = by_ids ? NULL : t->first; by_ids ? k < f->n_ids : e != NULL;
         e = by_ids ? NULL : e->next) {
        const hent_t *x = e;
        if (by_ids && !(x = ent_find(t, f->ids[k++])))
            continue;
        bool           on_page = matched >= skip && out->n < cap;
        hist_entity_t *dst     = on_page ? &out->items[out->n] : &scratch;
        memset(&aside, 0, sizeof aside);
        if (!ent_select(a, q, f, x, dst, on_page ? out : &aside))
            continue;
        matched++;
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
    if (e)
        ent_unlink(t, e);
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
        inst_release(db, &s->v[(s->head + pos) % s->cap]);
        for (uint32_t k = pos; k + 1 < s->n; k++)
            s->v[(s->head + k) % s->cap] = s->v[(s->head + k + 1) % s->cap];
        s->n--;
        atomic_fetch_sub(&db->instances, 1);
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

static void hc_stats(void *v, uint64_t *instances, uint64_t *series, uint64_t *bytes, uint64_t *dropped)
{
    hdb_t *db = v;

    *instances = atomic_load(&db->instances);
    *series    = atomic_load(&db->series);
    *bytes     = atomic_load(&db->bytes);
    *dropped   = atomic_load(&db->dropped);
}

const history_backend_t history_cordb = {
    .name            = "corDB",
    .open            = hc_open,
    .close           = hc_close,
    .append          = hc_append,
    .query           = hc_query,
    .entity_info     = hc_entity_info,
    .delete_entity   = hc_delete_entity,
    .delete_attr     = hc_delete_attr,
    .delete_instance = hc_delete_instance,
    .modify_instance = hc_modify_instance,
    .stats           = hc_stats,
};
