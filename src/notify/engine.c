/*
 * engine.c - the notification engine: the registry and index of
 * subscriptions, the matcher (a store hook), the bounded per-endpoint queues
 * and the sender threads (notify.h tells the design).
 *
 * Locks:
 *  - g_rw (rwlock) guards the registry and the index; the matcher reads it,
 *    the subscription operations write it (rare);
 *  - g_qmu guards every queue, lane and the ready list; it is held for a few
 *    pointer moves only, never while rendering or sending.
 * The matcher never blocks on an endpoint: a full queue is a counted drop.
 */
#include "notify_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------- a string map
 * Open addressing with linear probing and backward-shift deletion; a key
 * maps to a short vector of subscriptions. */
typedef struct bucket {
    char          *key;          /* owned; NULL: empty */
    uint64_t       h;
    notify_sub_t **v;
    size_t         n, cap;
} bucket_t;

typedef struct smap {
    bucket_t *b;
    size_t    nb, used;
} smap_t;

static bucket_t *smap_find(const smap_t *m, const char *key, uint64_t h)
{
    if (!m->nb) return NULL;
    for (size_t i = h & (m->nb - 1);; i = (i + 1) & (m->nb - 1)) {
        bucket_t *b = &m->b[i];
        if (!b->key) return NULL;
        if (b->h == h && !strcmp(b->key, key)) return b;
    }
}

static void smap_grow(smap_t *m)
{
    smap_t n = {.nb = m->nb ? m->nb * 2 : 16};
    n.b = cr_xcalloc(n.nb, sizeof *n.b);
    for (size_t i = 0; i < m->nb; i++) {
        if (!m->b[i].key) continue;
        size_t j = m->b[i].h & (n.nb - 1);
        while (n.b[j].key) j = (j + 1) & (n.nb - 1);
        n.b[j] = m->b[i];
    }
    n.used = m->used;
    free(m->b);
    *m = n;
}

static void smap_add(smap_t *m, const char *key, notify_sub_t *s)
{
    uint64_t  h = cr_hash(key, strlen(key));
    bucket_t *b = smap_find(m, key, h);
    if (!b) {
        if ((m->used + 1) * 4 > m->nb * 3) smap_grow(m);
        size_t i = h & (m->nb - 1);
        while (m->b[i].key) i = (i + 1) & (m->nb - 1);
        b = &m->b[i];
        b->key = cr_xstrdup(key);
        b->h = h;
        m->used++;
    }
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 2;
        b->v = cr_xreallocarray(b->v, b->cap, sizeof *b->v);
    }
    b->v[b->n++] = s;
}

static void smap_del(smap_t *m, const char *key, notify_sub_t *s)
{
    uint64_t  h = cr_hash(key, strlen(key));
    bucket_t *b = smap_find(m, key, h);
    if (!b) return;
    for (size_t k = 0; k < b->n; k++)
        if (b->v[k] == s) {
            memmove(b->v + k, b->v + k + 1, (b->n - k - 1) * sizeof *b->v);
            b->n--;
            break;
        }
    if (b->n) return;
    free(b->key);
    free(b->v);
    size_t i = (size_t)(b - m->b);
    memset(b, 0, sizeof *b);
    m->used--;
    /* backward shift: move later entries of the run into the hole */
    for (size_t j = (i + 1) & (m->nb - 1); m->b[j].key; j = (j + 1) & (m->nb - 1)) {
        size_t home = m->b[j].h & (m->nb - 1);
        bool   move = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (move) {
            m->b[i] = m->b[j];
            memset(&m->b[j], 0, sizeof m->b[j]);
            i = j;
        }
    }
}

static void smap_free(smap_t *m)
{
    for (size_t i = 0; i < m->nb; i++) {
        free(m->b[i].key);
        free(m->b[i].v);
    }
    free(m->b);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------- the registry */

typedef struct treg {
    const char    *tenant;      /* interned */
    smap_t         by_id;       /* subscription id -> the subscription */
    smap_t         by_eid;      /* entity id -> subscriptions with that id in a selector */
    smap_t         by_type;     /* entity type (expanded) -> subscriptions selecting it */
    notify_sub_t **others;      /* idPattern / complex type selections / no entities */
    size_t         n_others, cap_others;
    notify_sub_t **periodic;    /* timeInterval: the ticker's, never matched against changes */
    size_t         n_periodic, cap_periodic;
    size_t         n_subs;
} treg_t;

/* An endpoint: one notification URI, its lanes (ordered queues, one
 * connection each) and its bound. */
typedef struct lane {
    struct endpoint *ep;
    notify_job_t    *head, *tail;
    struct lane     *next_ready, *next_parked;
    bool             busy, ready;   /* busy: a batch is being sent, in flight or parked */
    bool             parked;        /* its batch failed and waits for retry_at_ms (on g_parked) */
    void            *conn;          /* the lane's connection (sender.c), used by the busy lane only */
    /* the notification of the busy lane: its jobs (one subscription, in
     * order), its body (read by the HTTP thread until done), its tries */
    notify_job_t   **batch;
    size_t           n_batch;
    sbuf_t           body;
    int              attempts;
    int64_t          retry_at_ms;
} lane_t;

typedef struct endpoint {
    struct endpoint *next;
    char            *uri;
    int              refs;          /* subscriptions using it (under g_rw write lock + g_qmu) */
    size_t           queued;        /* under g_qmu */
    size_t           n_lanes;
    lane_t          *lanes;
    /* a failing endpoint: after FAIL_STREAK failures in a row its
     * notifications are dropped (counted "endpointFailing") without being
     * tried, for a backoff that doubles from 1 s to 30 s while it keeps
     * failing; so a dead endpoint holds a sender thread for one timeout per
     * backoff, not one per notification */
    atomic_int       fail_streak;
    atomic_int       backoff_ms;
    _Atomic int64_t  retry_at_ms;
} endpoint_t;

#define FAIL_STREAK 3

/* writers first: a steady stream of matching writes must not starve the
 * subscription operations (the matcher never takes the lock twice) */
static pthread_rwlock_t g_rw = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static treg_t         **g_tenants;
static size_t           g_n_tenants;
static atomic_size_t    g_n_subs;

static pthread_mutex_t  g_qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t   g_qcv = PTHREAD_COND_INITIALIZER;
static lane_t          *g_ready_head, *g_ready_tail;
static lane_t          *g_parked;        /* lanes whose failed batch waits for its retry */
typedef struct late {
    struct late *next;
    lane_t      *l;
    bool         ok, aborted;
    char         why[192];
} late_t;
static late_t          *g_late, *g_late_tail;   /* outcomes from libmosquitto's threads, in order */
static size_t           g_busy;          /* lanes with a batch (sending, in flight, parked) */
static size_t           g_batch_max;
static endpoint_t      *g_endpoints;
static size_t           g_n_endpoints;
static bool             g_running, g_stopping, g_abort;
static pthread_t       *g_threads;
static int              g_n_threads;
static size_t           g_queued;

static struct {
    atomic_uint_fast64_t due, sent, failed, dropped_full, dropped_shutdown, dropped_deleted, dropped_expired, dropped_failing,
                         throttled, delivered, retried, dropped_cooldown, dropped_retries;
} G;

static treg_t *treg_get(const char *tenant, bool create)
{
    for (size_t i = 0; i < g_n_tenants; i++)
        if (g_tenants[i]->tenant == tenant) return g_tenants[i];
    if (!create) return NULL;
    g_tenants = cr_xreallocarray(g_tenants, g_n_tenants + 1, sizeof *g_tenants);
    treg_t *t = cr_xcalloc(1, sizeof *t);
    t->tenant = tenant;
    g_tenants[g_n_tenants++] = t;
    return t;
}

static void list_op(notify_sub_t ***v, size_t *n, size_t *cap, notify_sub_t *s, bool add)
{
    if (add) {
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 8;
            *v = cr_xreallocarray(*v, *cap, sizeof **v);
        }
        (*v)[(*n)++] = s;
        return;
    }
    for (size_t k = 0; k < *n; k++)
        if ((*v)[k] == s) {
            memmove(*v + k, *v + k + 1, (*n - k - 1) * sizeof **v);
            (*n)--;
            return;
        }
}

static void index_op(treg_t *t, notify_sub_t *s, bool add)
{
    void (*op)(smap_t *, const char *, notify_sub_t *) = add ? smap_add : smap_del;
    if (s->interval_us) {
        list_op(&t->periodic, &t->n_periodic, &t->cap_periodic, s, add);
        return;
    }
    bool other = s->n_sel == 0;
    for (size_t i = 0; i < s->n_sel; i++) {
        const entity_selector_t *sel = &s->sel[i];
        const char *const       *types;
        size_t                   nt;
        if (sel->id) op(&t->by_eid, sel->id, s);
        else if ((nt = typesel_types(sel->types, &types)) > 0)
            for (size_t k = 0; k < nt; k++) op(&t->by_type, types[k], s);
        else other = true;
    }
    if (other) list_op(&t->others, &t->n_others, &t->cap_others, s, add);
}

/* The endpoint of uri, created with --notifierInflight lanes (g_rw held for writing). */
static endpoint_t *endpoint_get(const char *uri)
{
    pthread_mutex_lock(&g_qmu);
    endpoint_t *ep;
    for (ep = g_endpoints; ep; ep = ep->next)
        if (!strcmp(ep->uri, uri)) break;
    if (!ep) {
        ep = cr_xcalloc(1, sizeof *ep);
        ep->uri = cr_xstrdup(uri);
        ep->n_lanes = cr_config.notifier_inflight > 0 ? (size_t)cr_config.notifier_inflight : 1;
        ep->lanes = cr_xcalloc(ep->n_lanes, sizeof *ep->lanes);
        for (size_t i = 0; i < ep->n_lanes; i++) {
            ep->lanes[i].ep = ep;
            ep->lanes[i].batch = cr_xmalloc(g_batch_max * sizeof *ep->lanes[i].batch);
            sb_init(&ep->lanes[i].body, NULL, 1024);
        }
        ep->next = g_endpoints;
        g_endpoints = ep;
        g_n_endpoints++;
    }
    ep->refs++;
    pthread_mutex_unlock(&g_qmu);
    return ep;
}

static void endpoint_free(endpoint_t *ep)
{
    for (size_t i = 0; i < ep->n_lanes; i++) {
        notify_conn_free(ep->lanes[i].conn);
        free(ep->lanes[i].batch);
        sb_release(&ep->lanes[i].body);
    }
    free(ep->lanes);
    free(ep->uri);
    free(ep);
}

/* Drops a subscription's hold on its endpoint; the endpoint goes with its
 * last subscription (no job can be queued then: each holds a subscription). */
static void endpoint_release(endpoint_t *ep)
{
    pthread_mutex_lock(&g_qmu);
    bool last = --ep->refs == 0;
    if (last) {
        for (endpoint_t **pp = &g_endpoints; *pp; pp = &(*pp)->next)
            if (*pp == ep) {
                *pp = ep->next;
                break;
            }
        g_n_endpoints--;
    }
    pthread_mutex_unlock(&g_qmu);
    if (last) endpoint_free(ep);
}

void notify_sub_engine_release(notify_sub_t *s)
{
    if (s->ep) endpoint_release(s->ep);
    s->ep = NULL;
}

static notify_sub_t *find_locked(treg_t *t, const char *id)
{
    bucket_t *b = t ? smap_find(&t->by_id, id, cr_hash(id, strlen(id))) : NULL;
    return b && b->n ? b->v[0] : NULL;
}

/* the counters' totals kept beyond this process (notify_set_totals): set once, read by the senders */
static notify_totals_hooks_t           g_totals_hooks;
static _Atomic(const notify_totals_hooks_t *) g_totals;

void notify_set_totals(const notify_totals_hooks_t *h)
{
    g_totals_hooks = *h;
    atomic_store(&g_totals, &g_totals_hooks);
}

bool notify_totals_read(const notify_sub_t *s, notify_totals_t *t)
{
    const notify_totals_hooks_t *h = atomic_load(&g_totals);

    return h && h->read(h->ud, s->tenant, s->id, t);
}

static void totals_add(const notify_sub_t *s, bool ok, int64_t at)
{
    const notify_totals_hooks_t *h = atomic_load(&g_totals);

    if (h)
        h->add(h->ud, s->tenant, s->id, ok, at);
}

/* fwd/'s watcher (notify_set_watcher) */
static void (*g_watcher)(const char *tenant, const char *id);

void notify_set_watcher(void (*fn)(const char *tenant, const char *id))
{
    g_watcher = fn;
}

static void watched_changed(const char *tenant, const char *id)
{
    if (g_watcher) g_watcher(tenant, id);
}

bool notify_add(notify_sub_t *s, problem_t *p)
{
    pthread_rwlock_wrlock(&g_rw);
    treg_t *t = treg_get(s->tenant, true);
    if (find_locked(t, s->id)) {
        pthread_rwlock_unlock(&g_rw);
        return problem_set(p, PB_ALREADY_EXISTS, "subscription '%s' already exists", s->id);
    }
    if (!s->c) s->c = sub_counters_new();
    s->ep = endpoint_get(s->uri);
    notify_sub_ref(s);
    smap_add(&t->by_id, s->id, s);
    index_op(t, s, true);
    t->n_subs++;
    atomic_fetch_add(&g_n_subs, 1);
    pthread_rwlock_unlock(&g_rw);
    watched_changed(s->tenant, s->id);
    return true;
}

static void unlink_locked(treg_t *t, notify_sub_t *old)
{
    smap_del(&t->by_id, old->id, old);
    index_op(t, old, false);
}

bool notify_replace(notify_sub_t *s, problem_t *p)
{
    pthread_rwlock_wrlock(&g_rw);
    treg_t       *t = treg_get(s->tenant, false);
    notify_sub_t *old = find_locked(t, s->id);
    if (!old) {
        pthread_rwlock_unlock(&g_rw);
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no subscription '%s'", s->id);
    }
    unlink_locked(t, old);
    s->c = old->c;
    atomic_fetch_add(&s->c->refs, 1);
    s->ep = endpoint_get(s->uri);
    notify_sub_ref(s);
    smap_add(&t->by_id, s->id, s);
    index_op(t, s, true);
    pthread_rwlock_unlock(&g_rw);
    notify_sub_unref(old);
    watched_changed(s->tenant, s->id);
    return true;
}

bool notify_remove(const char *tenant, const char *id, problem_t *p)
{
    tenant = intern_cstr(tenant ? tenant : "");
    pthread_rwlock_wrlock(&g_rw);
    treg_t       *t = treg_get(tenant, false);
    notify_sub_t *old = find_locked(t, id);
    if (!old) {
        pthread_rwlock_unlock(&g_rw);
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no subscription '%s'", id);
    }
    unlink_locked(t, old);
    atomic_store(&old->removed, true);
    t->n_subs--;
    atomic_fetch_sub(&g_n_subs, 1);
    pthread_rwlock_unlock(&g_rw);
    notify_sub_unref(old);
    watched_changed(tenant, id);
    return true;
}

notify_sub_t *notify_find(const char *tenant, const char *id)
{
    tenant = intern_cstr(tenant ? tenant : "");
    pthread_rwlock_rdlock(&g_rw);
    notify_sub_t *s = find_locked(treg_get(tenant, false), id);
    if (s) notify_sub_ref(s);
    pthread_rwlock_unlock(&g_rw);
    return s;
}

bool notify_tenant_known(const char *tenant)
{
    tenant = intern_cstr(tenant ? tenant : "");
    pthread_rwlock_rdlock(&g_rw);
    bool known = treg_get(tenant, false) != NULL;
    pthread_rwlock_unlock(&g_rw);
    return known;
}

static int by_order(const void *a, const void *b)
{
    const notify_sub_t *x = *(notify_sub_t *const *)a, *y = *(notify_sub_t *const *)b;
    return x->c->order < y->c->order ? -1 : x->c->order > y->c->order;
}

notify_sub_t **notify_list(const char *tenant, size_t offset, size_t limit, arena_t *a, size_t *n, size_t *total)
{
    tenant = intern_cstr(tenant ? tenant : "");
    pthread_rwlock_rdlock(&g_rw);
    treg_t        *t = treg_get(tenant, false);
    size_t         all = t ? t->n_subs : 0, k = 0;
    notify_sub_t **v = arena_alloc(a, (all ? all : 1) * sizeof *v);
    for (size_t i = 0; t && i < t->by_id.nb; i++)
        if (t->by_id.b[i].key && t->by_id.b[i].n) v[k++] = t->by_id.b[i].v[0];
    qsort(v, k, sizeof *v, by_order);
    size_t from = offset < k ? offset : k, to = limit < k - from ? from + limit : k;
    for (size_t i = from; i < to; i++) notify_sub_ref(v[i]);
    pthread_rwlock_unlock(&g_rw);
    *total = k;
    *n = to - from;
    return v + from;
}

/* ------------------------------------------------------- the matcher */

static bool watched(const notify_sub_t *s, const store_attr_ref_t *r, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        bool name_ok = !s->n_watched, ds_ok = !s->n_dataset_ids;
        for (size_t k = 0; k < s->n_watched && !name_ok; k++) name_ok = s->watched[k] == r[i].name;
        for (size_t k = 0; k < s->n_dataset_ids && !ds_ok; k++)
            ds_ok = r[i].dataset_id ? !strcmp(r[i].dataset_id, s->dataset_ids[k])
                                    : !strcmp(s->dataset_ids[k], "@none");
        if (name_ok && ds_ok) return true;
    }
    return false;
}

static bool selected(const notify_sub_t *s, const cr_entity_t *e)
{
    if (!s->n_sel) return true;
    for (size_t i = 0; i < s->n_sel; i++) {
        const entity_selector_t *sel = &s->sel[i];
        if (sel->id && strcmp(sel->id, e->id)) continue;
        if (sel->id_pattern && !filter_regex_match(sel->id_pattern, e->id, strlen(e->id))) continue;
        if (sel->types && !typesel_match(sel->types, e)) continue;
        return true;
    }
    return false;
}

static void queue_job(notify_sub_t *s, notify_job_t *j, uint64_t key);

/* The store's outbox (store_set_outbox; mongoc): a change with an entry
 * (ch->outbox) gets a count of its jobs; when the last one ends, delivered
 * or dropped by the subscription's rules, the entry is ended
 * (store_outbox_done); a job dropped at shutdown keeps it, for another
 * process to deliver. */
typedef struct notify_obx {
    atomic_int  refs;
    atomic_bool keep;
    const char *tenant;
    uint64_t    id;
} notify_obx_t;

static store_t                    *g_store;
static _Thread_local notify_obx_t *t_obx;    /* the change being matched's */

static void obx_put(notify_obx_t *x, bool keep)
{
    if (!x) return;
    if (keep) atomic_store(&x->keep, true);
    if (atomic_fetch_sub(&x->refs, 1) != 1) return;
    if (!atomic_load(&x->keep)) store_outbox_done(g_store, x->tenant, x->id);
    free(x);
}

/* A lane with jobs and no sender joins the ready list (g_qmu held). */
static void lane_ready(lane_t *l)
{
    if (l->ready) return;
    l->ready = true;
    l->next_ready = NULL;
    if (g_ready_tail) g_ready_tail->next_ready = l;
    else g_ready_head = l;
    g_ready_tail = l;
    pthread_cond_signal(&g_qcv);
}

static void enqueue(notify_sub_t *s, const store_change_t *ch, const cr_entity_t *e, bool deleted_entity)
{
    /* the deleted instances to show: the watched ones for attributeDeleted;
     * every one for entityDeleted with showChanges (their previous values) */
    bool     all = deleted_entity && s->show_changes;
    uint32_t nd = 0;
    if ((!deleted_entity && ch->before && (s->triggers & TRG_ATTR_DELETED)) || all)
        for (uint32_t i = 0; i < ch->n_deleted; i++) nd += all || watched(s, &ch->deleted[i], 1);
    uint32_t nc = s->show_changes && ch->before && ch->after ? ch->n_updated : 0;
    notify_job_t *j = cr_xmalloc(sizeof *j + (nc + nd) * sizeof(store_attr_ref_t));
    j->next = NULL;
    j->many = NULL;
    j->n_many = 0;
    j->raw = NULL;
    j->reason = NULL;
    j->obx = t_obx;
    if (t_obx) atomic_fetch_add(&t_obx->refs, 1);
    j->sub = s;
    j->e = (cr_entity_t *)e;
    j->entity_deleted = deleted_entity;
    j->entity_gone = !ch->after;
    j->at = ch->at;
    j->n_changed = nc;
    j->changed = (store_attr_ref_t *)(j + 1);
    if (nc) memcpy(j->changed, ch->updated, nc * sizeof *j->changed);
    j->deleted = j->changed + nc;
    j->n_deleted = 0;
    if (nd)
        for (uint32_t i = 0; i < ch->n_deleted; i++)
            if (all || watched(s, &ch->deleted[i], 1)) j->deleted[j->n_deleted++] = ch->deleted[i];
    /* the previous version, for showChanges and for the type of a deleted attribute */
    j->before = nc || nd ? ch->before : NULL;
    queue_job(s, j, cr_hash(e->id, strlen(e->id)));
}

/* Queues j on its lane (the hash of the subscription and key) and takes the
 * job's references (sub, e, before); a full queue drops it, counted. */
static void queue_job(notify_sub_t *s, notify_job_t *j, uint64_t key)
{
    endpoint_t *ep = s->ep;
    uint64_t    h = cr_hash_ptr(s->c) ^ key;
    lane_t     *l = &ep->lanes[h % ep->n_lanes];
    size_t      max = cr_config.notifier_queue_size > 0 ? (size_t)cr_config.notifier_queue_size : 1;

    pthread_mutex_lock(&g_qmu);
    if (g_stopping || ep->queued >= max) {
        bool stopping = g_stopping;
        pthread_mutex_unlock(&g_qmu);
        obx_put(j->obx, stopping);
        for (uint32_t i = 0; i < j->n_many; i++) entity_unref(j->many[i]);
        free(j->many);
        free(j->raw);
        free(j);
        atomic_fetch_add(&s->c->dropped_full, 1);
        atomic_fetch_add(&G.dropped_full, 1);
        return;
    }
    notify_sub_ref(s);
    if (j->e) entity_ref(j->e);
    if (j->before) entity_ref(j->before);
    if (l->tail) l->tail->next = j;
    else l->head = j;
    l->tail = j;
    ep->queued++;
    g_queued++;
    if (!l->busy) lane_ready(l);
    pthread_mutex_unlock(&g_qmu);
}

/* Terms into linked entities in a q (4.9): the linked entities are read through ops/ (notify_set_linker). */
static notify_get_fn g_linker;
static void         *g_linker_ud;

void notify_set_linker(notify_get_fn get, void *ud)
{
    g_linker = get;
    g_linker_ud = ud;
}

typedef struct linker_ctx {
    const char *tenant;
} linker_ctx_t;

static cr_entity_t *linker_get(void *ud, const char *id)
{
    const linker_ctx_t *lc = ud;
    return g_linker ? g_linker(g_linker_ud, lc->tenant, id) : NULL;
}

/* s's q holds for e; a q into linked entities reads their current versions (the tree is shared by
 * the matchers of every tenant: it is only read). */
static bool q_holds(const notify_sub_t *s, const cr_entity_t *e)
{
    if (!s->q_linked) return q_match(s->q, e);
    linker_ctx_t lc = {.tenant = s->tenant};
    q_linker_t   lk = {.get = linker_get, .ud = &lc};
    return q_match_linked(s->q, e, &lk);
}

/* A change of s at `at` that matched: counted due and not throttled (true),
 * or after expiresAt / within the throttling (false, counted). */
static inline bool due_at(notify_sub_t *s, int64_t at)
{
    if (s->expires_at != CR_NO_TIME && at >= s->expires_at) {
        atomic_fetch_add(&s->c->dropped_expired, 1);    /* would have been due: counted, not sent */
        atomic_fetch_add(&G.dropped_expired, 1);
        return false;
    }
    atomic_fetch_add(&s->c->due, 1);
    atomic_fetch_add(&G.due, 1);
    if (s->throttle_us) {
        int64_t last = atomic_load(&s->c->last_due);
        if (last && at - last < s->throttle_us) {
            atomic_fetch_add(&s->c->throttled, 1);
            atomic_fetch_add(&G.throttled, 1);
            return false;
        }
        atomic_store(&s->c->last_due, at);
    }
    return true;
}

static void consider(notify_sub_t *s, const store_change_t *ch)
{
    const cr_entity_t *e = ch->after ? ch->after : ch->before;
    if (s->interval_us || !s->active || atomic_load_explicit(&s->removed, memory_order_relaxed)) return;
    if (!selected(s, e)) return;

    bool due = false, deleted_entity = false;
    unsigned t = s->triggers;
    if (!ch->before) {
        due = (t & TRG_ENTITY_CREATED) || ((t & TRG_ATTR_CREATED) && watched(s, ch->created, ch->n_created));
    } else if (!ch->after) {
        /* entityDeleted; else attributeDeleted for its watched attributes (the suite's 046_22_12) */
        due = deleted_entity = (t & TRG_ENTITY_DELETED) != 0;
        if (!due) due = (t & TRG_ATTR_DELETED) && watched(s, ch->deleted, ch->n_deleted);
    } else {
        due = ((t & TRG_ATTR_CREATED) && watched(s, ch->created, ch->n_created)) ||
              ((t & TRG_ATTR_UPDATED) && watched(s, ch->updated, ch->n_updated)) ||
              ((t & TRG_ATTR_DELETED) && watched(s, ch->deleted, ch->n_deleted));
    }
    if (!due) return;
    if (s->q && !q_holds(s, e)) return;
    if (s->geo && !geoq_match(s->geo, e)) return;
    if (s->scope && !scopeq_match(s->scope, e)) return;
    if (due_at(s, ch->at)) enqueue(s, ch, e, deleted_entity);
}

static void match_bucket(const smap_t *m, const char *key, const store_change_t *ch)
{
    bucket_t *b = smap_find(m, key, cr_hash(key, strlen(key)));
    for (size_t i = 0; b && i < b->n; i++) {
        notify_sub_t *s = b->v[i];
        if (s->mark == ch->seq) continue;
        s->mark = ch->seq;
        consider(s, ch);
    }
}

/* The outbox's question (store_set_outbox): may a change of e be due? A
 * subscription of the tenant selects its id or one of its types, or is
 * among the others (patterns, no entities). e NULL: has the tenant any
 * subscription (only then can it have entries to take over). */
static bool may_be_due(void *ud, const char *tenant, const cr_entity_t *e)
{
    (void)ud;
    if (!atomic_load_explicit(&g_n_subs, memory_order_relaxed)) return false;
    const char *tn = intern_cstr(tenant ? tenant : "");
    bool        yes = false;
    pthread_rwlock_rdlock(&g_rw);
    treg_t *t = treg_get(tn, false);
    if (t && t->n_subs && !e) {
        yes = true;
    } else if (t && t->n_subs) {
        bucket_t *b = t->by_eid.used ? smap_find(&t->by_eid, e->id, cr_hash(e->id, strlen(e->id))) : NULL;
        yes = t->n_others > 0 || (b && b->n);
        for (uint16_t k = 0; !yes && t->by_type.used && k < e->n_types; k++) {
            b = smap_find(&t->by_type, e->types[k], cr_hash(e->types[k], strlen(e->types[k])));
            yes = b && b->n;
        }
    }
    pthread_rwlock_unlock(&g_rw);
    return yes;
}

static void match_change(treg_t *t, const store_change_t *ch, const cr_entity_t *e);

static void on_changes(void *ud, const store_change_t *g, size_t n)
{
    (void)ud;
    bool any = atomic_load_explicit(&g_n_subs, memory_order_relaxed) && n;
    const char *tenant = any ? intern_cstr(g[0].tenant ? g[0].tenant : "") : NULL;
    if (any) pthread_rwlock_rdlock(&g_rw);
    treg_t *t = any ? treg_get(tenant, false) : NULL;
    for (size_t c = 0; c < n; c++) {
        const store_change_t *ch = &g[c];
        const cr_entity_t    *e = ch->after ? ch->after : ch->before;
        if (ch->seq && ch->outbox) {
            t_obx = cr_xmalloc(sizeof *t_obx);
            atomic_init(&t_obx->refs, 1);
            atomic_init(&t_obx->keep, false);
            t_obx->tenant = intern_cstr(ch->tenant ? ch->tenant : "");
            t_obx->id = ch->outbox;
        }
        if (t && t->n_subs && ch->seq && e) match_change(t, ch, e);
        obx_put(t_obx, false);
        t_obx = NULL;
    }
    if (any) pthread_rwlock_unlock(&g_rw);
}

/* The subscriptions of t that may be due for ch (of e), each considered once. */
static void match_change(treg_t *t, const store_change_t *ch, const cr_entity_t *e)
{
    if (t->by_eid.used) match_bucket(&t->by_eid, e->id, ch);
    if (t->by_type.used)
        for (uint16_t k = 0; k < e->n_types; k++) match_bucket(&t->by_type, e->types[k], ch);
    for (size_t k = 0; k < t->n_others; k++) {
        notify_sub_t *s = t->others[k];
        if (s->mark == ch->seq) continue;
        s->mark = ch->seq;
        consider(s, ch);
    }
}

/* ------------------------------------------------------- context source registration subscriptions */

void notify_csub_start(notify_sub_t *s, const notify_sub_t *prev)
{
    if (prev && prev->c) {
        s->c = prev->c;
        atomic_fetch_add(&s->c->refs, 1);
    } else if (!s->c) s->c = sub_counters_new();
    if (!s->ep) s->ep = endpoint_get(s->uri);
}

void notify_csub_stop(notify_sub_t *s)
{
    atomic_store(&s->removed, true);
}

void notify_send(notify_sub_t *s, const char *data, size_t len, const char *reason)
{
    notify_job_t *j = cr_xcalloc(1, sizeof *j);
    j->sub = s;
    j->at = cr_now_us();
    j->raw = cr_xmalloc(len + 1);
    memcpy(j->raw, data, len);
    j->raw[len] = '\0';
    j->raw_len = len;
    j->reason = reason;
    atomic_fetch_add(&s->c->due, 1);
    atomic_fetch_add(&G.due, 1);
    queue_job(s, j, 0);
}

void notify_relay(notify_sub_t *s, cr_entity_t *e, bool deleted, int64_t at)
{
    if (s->csource || !s->active || atomic_load_explicit(&s->removed, memory_order_relaxed)) return;
    if (!due_at(s, at)) return;
    notify_job_t *j = cr_xcalloc(1, sizeof *j);
    j->sub = s;
    j->e = e;
    j->entity_deleted = deleted;
    j->at = at;
    queue_job(s, j, cr_hash(e->id, strlen(e->id)));
}

/* ------------------------------------------------------- the senders */

static void job_free(notify_job_t *j, bool keep)
{
    obx_put(j->obx, keep);
    if (j->e) entity_unref(j->e);
    for (uint32_t i = 0; i < j->n_many; i++) entity_unref(j->many[i]);
    free(j->many);
    free(j->raw);
    if (j->before) entity_unref(j->before);
    notify_sub_unref(j->sub);
    free(j);
}

/* The lane's next notification (g_qmu held, the lane not busy): the jobs
 * at its head that are of the same subscription and of distinct entities
 * (at most --notifierBatch), in their order; a busy endpoint gets fewer,
 * fuller requests. false: none queued. */
static bool take_batch(lane_t *l)
{
    size_t         n = 0;
    notify_job_t **batch = l->batch;
    while (l->head && n < g_batch_max) {
        notify_job_t *j = l->head;
        if (n && (j->sub != batch[0]->sub || !j->e || !batch[0]->e)) break;
        bool seen = false;
        for (size_t k = 0; k < n && !seen; k++) seen = batch[k]->e == j->e || !strcmp(batch[k]->e->id, j->e->id);
        if (seen) break;
        l->head = j->next;
        if (!l->head) l->tail = NULL;
        batch[n++] = j;
    }
    if (!n) return false;
    l->n_batch = n;
    l->busy = true;
    g_busy++;
    l->ep->queued -= n;
    g_queued -= n;
    return true;
}

static void lane_send(lane_t *l);
static _Thread_local int t_inline;     /* lane_end is sending a lane's next notification itself */

/* How a batch ends (counted per subscription and in /statistics). */
typedef enum { END_SENT, END_FAILED, END_DELETED, END_FAILING, END_COOLDOWN, END_SHUTDOWN } lane_end_t;

static void count(sub_counters_t *c, lane_end_t how, size_t n)
{
    switch (how) {
    case END_SENT:     atomic_fetch_add(&c->delivered, n); atomic_fetch_add(&G.delivered, n); break;
    case END_FAILED:   atomic_fetch_add(&c->dropped_retries, n); atomic_fetch_add(&G.dropped_retries, n); break;
    case END_DELETED:  atomic_fetch_add(&c->dropped_deleted, n); atomic_fetch_add(&G.dropped_deleted, n); break;
    case END_FAILING:  atomic_fetch_add(&c->dropped_failing, n); atomic_fetch_add(&G.dropped_failing, n); break;
    case END_COOLDOWN: atomic_fetch_add(&c->dropped_cooldown, n); atomic_fetch_add(&G.dropped_cooldown, n); break;
    case END_SHUTDOWN: atomic_fetch_add(&c->dropped_shutdown, n); atomic_fetch_add(&G.dropped_shutdown, n); break;
    }
}

/* The lane's batch is over: counted, the lane free again, its jobs freed
 * (last: a job may hold the last reference to the endpoint, lanes and all).
 * On the HTTP client's thread, a lane with more queued sends its next
 * notification at once (rendered there: no hand-off to a sender thread and
 * back; one level deep, a drop meanwhile goes through the ready list). */
static void lane_end(lane_t *l, lane_end_t how)
{
    bool go_on = !t_inline && how == END_SENT && httpc_on_loop();
    notify_job_t *chain = NULL;
    size_t        n = l->n_batch;
    count(l->batch[0]->sub->c, how, n);
    for (size_t k = n; k-- > 0;) {
        l->batch[k]->next = chain;
        chain = l->batch[k];
    }
    /* the lane stays ours while a job of the batch holds the endpoint */
    notify_sub_t *hold = go_on ? chain->sub : NULL;
    if (hold) notify_sub_ref(hold);
    pthread_mutex_lock(&g_qmu);
    l->n_batch = 0;
    l->attempts = 0;
    l->busy = false;
    g_busy--;
    bool next = false;
    if (l->head) {
        if (go_on) next = take_batch(l);
        else lane_ready(l);
    }
    pthread_mutex_unlock(&g_qmu);
    while (chain) {
        notify_job_t *nx = chain->next;
        job_free(chain, how == END_SHUTDOWN);
        chain = nx;
    }
    if (next) {
        t_inline = 1;
        lane_send(l);
        t_inline = 0;
    }
    if (hold) notify_sub_unref(hold);
}

/* The outcome of one attempt (notify_done_fn; the HTTP thread's, or the
 * sender's for MQTT): counted; a failure is retried at the head of the lane
 * (order holds) after a delay, with the lane parked, not a thread. */
static void lane_attempted(void *ud, bool ok, bool aborted, const char *why)
{
    lane_t         *l = ud;
    notify_sub_t   *s = l->batch[0]->sub;
    sub_counters_t *c = s->c;
    endpoint_t     *ep = l->ep;
    if (aborted) {
        lane_end(l, END_SHUTDOWN);
        return;
    }
    int64_t now = cr_now_us();
    atomic_store(&c->last_notification, now);
    if (ok) {
        atomic_fetch_add(&c->sent, 1);
        atomic_fetch_add(&G.sent, 1);
        atomic_store(&c->last_success, now);
        totals_add(s, true, now);
        atomic_store(&c->failing, 0);
        atomic_store(&ep->fail_streak, 0);
        atomic_store(&ep->backoff_ms, 0);
        lane_end(l, END_SENT);
        return;
    }
    atomic_fetch_add(&c->failed, 1);
    atomic_fetch_add(&G.failed, 1);
    pthread_mutex_lock(&c->why_mu);
    bool same = why && !strncmp(c->why, why, sizeof c->why - 1);
    snprintf(c->why, sizeof c->why, "%s", why ? why : "not delivered");
    pthread_mutex_unlock(&c->why_mu);
    atomic_store(&c->last_failure, now);
    totals_add(s, false, now);
    /* one line when a subscription starts failing, or fails for another reason: not one per notification */
    if (!atomic_exchange(&c->failing, 1) || !same)
        LOG_W("notification of subscription %s to %s failed: %s", s->id, s->uri, why ? why : "not delivered");
    if (atomic_fetch_add(&ep->fail_streak, 1) + 1 >= FAIL_STREAK) {
        int b = atomic_load(&ep->backoff_ms);
        b = b ? (b >= 15000 ? 30000 : b * 2) : 1000;
        atomic_store(&ep->backoff_ms, b);
        atomic_store(&ep->retry_at_ms, cr_now_ms() + b);
    }
    pthread_mutex_lock(&g_qmu);
    if (l->attempts < cr_config.notifier_retries && !g_stopping && !atomic_load(&s->removed)) {
        int64_t delay = (int64_t)(cr_config.notifier_retry_delay_ms > 0 ? cr_config.notifier_retry_delay_ms : 1)
                        << (l->attempts < 16 ? l->attempts : 16);
        if (delay > 30000) delay = 30000;
        if (delay < s->cooldown_ms) delay = s->cooldown_ms;
        l->attempts++;
        l->retry_at_ms = cr_now_ms() + delay;
        l->parked = true;
        l->next_parked = g_parked;
        g_parked = l;
        pthread_mutex_unlock(&g_qmu);
        return;
    }
    pthread_mutex_unlock(&g_qmu);
    lane_end(l, END_FAILED);
}

void notify_done_later(void *ud, bool ok, bool aborted, const char *why)
{
    late_t *x = cr_xmalloc(sizeof *x);
    *x = (late_t){.l = ud, .ok = ok, .aborted = aborted};
    snprintf(x->why, sizeof x->why, "%s", why ? why : "");
    pthread_mutex_lock(&g_qmu);
    if (g_late_tail) g_late_tail->next = x;
    else g_late = x;
    g_late_tail = x;
    pthread_cond_signal(&g_qcv);
    pthread_mutex_unlock(&g_qmu);
}

/* The next late outcome taken up (g_qmu held, released meanwhile); false: none. */
static bool take_late(bool abort)
{
    late_t *x = g_late;
    if (!x) return false;
    g_late = x->next;
    if (!g_late) g_late_tail = NULL;
    pthread_mutex_unlock(&g_qmu);
    lane_attempted(x->l, x->ok && !abort, x->aborted || abort, *x->why ? x->why : NULL);
    free(x);
    pthread_mutex_lock(&g_qmu);
    return true;
}

/* Parked lanes whose retry is due go back to the ready list (g_qmu held). */
static void unpark_due(int64_t now_ms)
{
    for (lane_t **pp = &g_parked; *pp;) {
        lane_t *l = *pp;
        if (l->retry_at_ms > now_ms && !g_stopping) {
            pp = &l->next_parked;
            continue;
        }
        *pp = l->next_parked;
        l->parked = false;
        lane_ready(l);
    }
}

/* Sends the lane's batch (a retry, or the first attempt), or ends it
 * without sending: its subscription was deleted, its endpoint is backing
 * off after failing (first attempts only), or it is within the
 * subscription's endpoint.cooldown of a failure (5.2.15). */
static void lane_send(lane_t *l)
{
    notify_sub_t   *s = l->batch[0]->sub;
    sub_counters_t *c = s->c;
    endpoint_t     *ep = l->ep;
    if (atomic_load(&s->removed)) {
        lane_end(l, END_DELETED);
        return;
    }
    if (!l->attempts) {
        if (atomic_load(&ep->fail_streak) >= FAIL_STREAK && cr_now_ms() < atomic_load(&ep->retry_at_ms)) {
            lane_end(l, END_FAILING);
            return;
        }
        int64_t lf = atomic_load(&c->last_failure);
        if (s->cooldown_ms && lf && atomic_load(&c->failing) && cr_now_us() - lf < (int64_t)s->cooldown_ms * 1000) {
            lane_end(l, END_COOLDOWN);
            return;
        }
    } else {
        atomic_fetch_add(&c->retried, 1);
        atomic_fetch_add(&G.retried, 1);
    }
    sb_clear(&l->body);
    const char *ctype = notify_render(l->batch, l->n_batch, &l->body);
    long        tmo = s->timeout_ms ? s->timeout_ms : cr_config.notifier_timeout_ms;
    notify_transport_send(&l->conn, s, l->body.p, l->body.len, ctype, tmo, l);
}

static void *sender_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_qmu);
    for (;;) {
        /* until the abort, not the stop: while the queues drain, a lane
         * whose POST was answered can be ready again */
        while (!g_ready_head && !g_late && !g_abort) pthread_cond_wait(&g_qcv, &g_qmu);
        if (g_abort) break;
        if (take_late(false)) continue;
        lane_t *l = g_ready_head;
        g_ready_head = l->next_ready;
        if (!g_ready_head) g_ready_tail = NULL;
        l->ready = false;
        if (!l->busy && !take_batch(l)) continue;
        pthread_mutex_unlock(&g_qmu);
        lane_send(l);      /* a busy lane is this thread's until it is sent or ended */
        pthread_mutex_lock(&g_qmu);
    }
    pthread_mutex_unlock(&g_qmu);
    return NULL;
}

/* ------------------------------------------------------- timeInterval
 * The ticker thread sends each periodic subscription's notification (every
 * matching entity, at most --maxLimit of them, in one notification) when
 * its time comes: first one interval after it is created, then every
 * interval (a late tick does not send twice). */

static notify_source_fn g_source;
static void            *g_source_ud;
static pthread_t        g_ticker;
static bool             g_ticker_on;
static pthread_cond_t   g_tick_cv = PTHREAD_COND_INITIALIZER;

void notify_set_source(notify_source_fn fn, void *ud)
{
    g_source = fn;
    g_source_ud = ud;
}

typedef struct collect {
    cr_entity_t **v;
    uint32_t      n, cap;
} collect_t;

static void collect_one(void *ud, const cr_entity_t *e)
{
    collect_t *c = ud;
    if (c->n >= c->cap) return;
    entity_ref((cr_entity_t *)e);
    c->v[c->n++] = (cr_entity_t *)e;
}

static void periodic_send(notify_sub_t *s, int64_t now)
{
    collect_t c = {.cap = cr_config.max_limit > 0 ? (uint32_t)cr_config.max_limit : 1000};
    c.v = cr_xmalloc(c.cap * sizeof *c.v);
    entity_filter_t f = {.sel = s->sel, .n_sel = s->n_sel, .q = s->q, .geo = s->geo, .scope = s->scope};
    if (g_source) g_source(g_source_ud, s->tenant, &f, collect_one, &c);
    if (!c.n) {
        free(c.v);
        return;
    }
    atomic_fetch_add(&s->c->due, 1);
    atomic_fetch_add(&G.due, 1);
    notify_job_t *j = cr_xcalloc(1, sizeof *j);
    j->sub = s;
    j->at = now;
    j->many = c.v;
    j->n_many = c.n;
    j->changed = NULL;
    j->deleted = NULL;
    queue_job(s, j, 0);
}

static void *ticker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_qmu);
    while (!g_stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&g_tick_cv, &g_qmu, &ts);
        if (g_stopping) break;
        if (g_parked) unpark_due(cr_now_ms());
        pthread_mutex_unlock(&g_qmu);
        notify_mqtt_sweep(cr_now_ms(), false);

        /* the due subscriptions, referenced, then sent without the registry lock */
        int64_t        now = cr_now_us();
        notify_sub_t **due = NULL;
        size_t         n_due = 0, cap = 0;
        pthread_rwlock_rdlock(&g_rw);
        for (size_t i = 0; i < g_n_tenants; i++) {
            treg_t *t = g_tenants[i];
            for (size_t k = 0; k < t->n_periodic; k++) {
                notify_sub_t *s = t->periodic[k];
                if (!s->next_at) s->next_at = now + s->interval_us;
                if (now < s->next_at) continue;
                s->next_at += s->interval_us * ((now - s->next_at) / s->interval_us + 1);
                if (!s->active || (s->expires_at != CR_NO_TIME && now >= s->expires_at)) continue;
                if (n_due == cap) {
                    cap = cap ? cap * 2 : 8;
                    due = cr_xreallocarray(due, cap, sizeof *due);
                }
                notify_sub_ref(s);
                due[n_due++] = s;
            }
        }
        pthread_rwlock_unlock(&g_rw);
        for (size_t i = 0; i < n_due; i++) {
            periodic_send(due[i], now);
            notify_sub_unref(due[i]);
        }
        free(due);
        pthread_mutex_lock(&g_qmu);
    }
    pthread_mutex_unlock(&g_qmu);
    return NULL;
}

/* ------------------------------------------------------- start / stop */

bool notify_start(store_t *s, problem_t *p)
{
    g_batch_max = cr_config.notifier_batch > 0 ? (size_t)cr_config.notifier_batch : 1;
    if (!notify_http_init(lane_attempted, p)) return false;
    g_running = true;
    store_add_hook(s, on_changes, NULL);
    g_store = s;
    store_set_outbox(s, may_be_due, on_changes, NULL);
    g_n_threads = cr_config.notifier_threads > 0 ? cr_config.notifier_threads : 1;
    g_threads = cr_xcalloc((size_t)g_n_threads, sizeof *g_threads);
    for (int i = 0; i < g_n_threads; i++)
        if (pthread_create(&g_threads[i], NULL, sender_main, NULL) != 0) {
            g_n_threads = i;
            notify_stop();
            return problem_set(p, PB_INTERNAL_ERROR, "cannot start the notifier threads");
        }
    if (pthread_create(&g_ticker, NULL, ticker_main, NULL) != 0) {
        notify_stop();
        return problem_set(p, PB_INTERNAL_ERROR, "cannot start the notifier's ticker");
    }
    g_ticker_on = true;
    return true;
}

void notify_stop(void)
{
    int64_t deadline = cr_mono_ns() + (int64_t)cr_config.notifier_drain_ms * 1000000;
    pthread_mutex_lock(&g_qmu);
    g_stopping = true;
    pthread_cond_broadcast(&g_qcv);
    pthread_cond_broadcast(&g_tick_cv);
    pthread_mutex_unlock(&g_qmu);
    if (g_ticker_on) pthread_join(g_ticker, NULL);
    g_ticker_on = false;
    pthread_mutex_lock(&g_qmu);
    while ((g_queued || g_busy) && cr_mono_ns() < deadline) {
        if (g_parked) unpark_due(cr_now_ms());     /* the ticker is gone: retries still due are made */
        pthread_mutex_unlock(&g_qmu);
        notify_mqtt_sweep(cr_now_ms(), false);     /* and MQTT timeouts kept */
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_qmu);
    }
    g_abort = true;
    pthread_cond_broadcast(&g_qcv);
    pthread_mutex_unlock(&g_qmu);
    for (int i = 0; i < g_n_threads; i++) pthread_join(g_threads[i], NULL);
    free(g_threads);
    g_threads = NULL;
    g_n_threads = 0;
    /* what is in flight is aborted (counted: shutdown), then the parked
     * lanes' and the ready busy lanes' batches */
    if (g_running) notify_http_shutdown();
    notify_mqtt_sweep(0, true);
    pthread_mutex_lock(&g_qmu);
    while (take_late(true)) {}
    pthread_mutex_unlock(&g_qmu);
    for (;;) {
        pthread_mutex_lock(&g_qmu);
        lane_t *l = g_parked;
        if (l) {
            g_parked = l->next_parked;
            l->parked = false;
        } else {
            for (l = g_ready_head; l && !l->busy; l = l->next_ready) {}
            if (l) {
                lane_t **pp = &g_ready_head;
                while (*pp != l) pp = &(*pp)->next_ready;
                *pp = l->next_ready;
                g_ready_tail = NULL;
                for (lane_t *t = g_ready_head; t; t = t->next_ready) g_ready_tail = t;
                l->ready = false;
            }
        }
        pthread_mutex_unlock(&g_qmu);
        if (!l) break;
        lane_end(l, END_SHUTDOWN);
    }

    /* what is left is dropped, and counted */
    pthread_mutex_lock(&g_qmu);
    notify_job_t *left = NULL;
    for (endpoint_t *ep = g_endpoints; ep; ep = ep->next)
        for (size_t i = 0; i < ep->n_lanes; i++) {
            lane_t *l = &ep->lanes[i];
            while (l->head) {
                notify_job_t *j = l->head;
                l->head = j->next;
                j->next = left;
                left = j;
            }
            l->tail = NULL;
            l->ready = false;
            ep->queued = 0;
        }
    g_ready_head = g_ready_tail = NULL;
    g_queued = 0;
    pthread_mutex_unlock(&g_qmu);
    size_t n_left = 0;
    while (left) {
        notify_job_t *j = left;
        left = j->next;
        atomic_fetch_add(&j->sub->c->dropped_shutdown, 1);
        atomic_fetch_add(&G.dropped_shutdown, 1);
        job_free(j, true);
        n_left++;
    }
    if (n_left) LOG_W("notifier: %zu notifications not delivered at shutdown (dropped, counted)", n_left);

    pthread_rwlock_wrlock(&g_rw);
    for (size_t i = 0; i < g_n_tenants; i++) {
        treg_t *t = g_tenants[i];
        for (size_t k = 0; k < t->by_id.nb; k++)
            if (t->by_id.b[k].key && t->by_id.b[k].n) notify_sub_unref(t->by_id.b[k].v[0]);
        smap_free(&t->by_id);
        smap_free(&t->by_eid);
        smap_free(&t->by_type);
        free(t->others);
        free(t->periodic);
        free(t);
    }
    free(g_tenants);
    g_tenants = NULL;
    g_n_tenants = 0;
    atomic_store(&g_n_subs, 0);
    pthread_rwlock_unlock(&g_rw);
    if (g_running) notify_http_cleanup();
    g_running = false;
}

void notify_get_stats(notify_stats_t *st)
{
    memset(st, 0, sizeof *st);
    /* in the reverse order of the updates (due, then sent/failed, then delivered/dropped), as
     * notify_sub_render does: what is seen delivered or dropped is also seen attempted and due */
    st->delivered = atomic_load(&G.delivered);
    st->dropped_retries = atomic_load(&G.dropped_retries);
    st->dropped_failing = atomic_load(&G.dropped_failing);
    st->dropped_cooldown = atomic_load(&G.dropped_cooldown);
    st->dropped_deleted = atomic_load(&G.dropped_deleted);
    st->dropped_shutdown = atomic_load(&G.dropped_shutdown);
    st->sent = atomic_load(&G.sent);
    st->failed = atomic_load(&G.failed);
    st->retried = atomic_load(&G.retried);
    st->dropped_queue_full = atomic_load(&G.dropped_full);
    st->throttled = atomic_load(&G.throttled);
    st->dropped_expired = atomic_load(&G.dropped_expired);
    st->due = atomic_load(&G.due);
    st->subscriptions = atomic_load(&g_n_subs);
    pthread_mutex_lock(&g_qmu);
    st->queued = g_queued;
    st->endpoints = g_n_endpoints;
    for (const endpoint_t *ep = g_endpoints; ep; ep = ep->next)
        if (ep->queued > st->queued_max) st->queued_max = ep->queued;
    pthread_mutex_unlock(&g_qmu);
}

size_t notify_queue_depths(notify_queue_depth_t out[NOTIFY_QUEUES_MAX], uint64_t *other, size_t *n_other)
{
    const endpoint_t *top[NOTIFY_QUEUES_MAX];   /* deepest first: an insertion sort, at scrape time only */
    size_t            n = 0;
    *other = 0;
    *n_other = 0;
    pthread_mutex_lock(&g_qmu);
    for (const endpoint_t *ep = g_endpoints; ep; ep = ep->next) {
        size_t i;
        if (n < NOTIFY_QUEUES_MAX) {
            i = n++;
        } else if (ep->queued > top[n - 1]->queued) {   /* the shallowest of the top goes to "other" */
            *other += top[n - 1]->queued;
            (*n_other)++;
            i = n - 1;
        } else {
            *other += ep->queued;
            (*n_other)++;
            continue;
        }
        for (; i > 0 && top[i - 1]->queued < ep->queued; i--) top[i] = top[i - 1];
        top[i] = ep;
    }
    for (size_t i = 0; i < n; i++) {
        egress_url_shown(top[i]->uri, out[i].endpoint, sizeof out[i].endpoint);
        out[i].queued = top[i]->queued;
    }
    pthread_mutex_unlock(&g_qmu);
    return n;
}
