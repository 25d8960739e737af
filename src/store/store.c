/*
 * store.c - the store interface (store.h) over its backends, and what every
 * backend shares: the change stream (ordered delivery to the hooks, with the
 * attribute lists of each change), and the operation counters.
 *
 * store_open() picks the backend table from cr_config.database: corDB (the
 * default, src/store/cordb/: in RAM, or on disk with --dbDir) or mongoc (MongoDB through libmongoc,
 * src/store/mongoc/, doc/mongodb.md). Every store_* call goes through the table.
 *
 * Ordered delivery. A backend numbers a tenant's changes 1, 2, 3 ... in its
 * atomic step; the writers then come here without any store lock, in any
 * order. Each tenant has a stream: a mutex, the next seq to deliver and the
 * groups that arrived early, sorted by seq. A writer queues its group (on its
 * own stack: it does not return before the group is delivered), then, while
 * its group is not delivered: when nobody is delivering and the first queued
 * group is the next in order, it takes it, runs the hooks on it without the
 * mutex, and marks it delivered; otherwise it waits on the condition
 * variable. So hooks see each tenant's groups in seq order, one at a time,
 * and a writer returns only after its own change was handed to the hooks.
 * The mutex is held for a few pointer moves, never while a hook runs; readers
 * never touch it.
 *
 * Held answers (store.h). Between store_hold_begin and store_hold_end a
 * write call hands the backend a heap change array (hold_arm) instead of
 * its stack one; a backend that adopts it returns before the sync, and its
 * syncer later calls store_pending_done (the hooks, the counters, the
 * references) and store_pending_round (the flushes, then each ticket's
 * count goes down). A ticket counts its pending writes plus one, the
 * seal, which store_ticket_wait gives back: whoever takes the count to
 * zero answers it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store.h"
#include "cordb/cordb.h"

extern const store_backend_t mgc_backend;   /* mongoc/backend.c */

#define STORE_MAX_HOOKS 16
#define STORE_MAX_FLUSHES 4
#define STORE_REFS_STACK 128        /* attribute refs of a group without malloc */

typedef struct store_hook {
    store_hook_fn fn;
    void         *ud;
} store_hook_t;

struct store {
    const store_backend_t *be;
    void                  *db;
    store_hook_t           hooks[STORE_MAX_HOOKS];
    _Atomic size_t         n_hooks;
    struct {
        const char *(*fn)(void *ud);
        void        *ud;
    }                      flushes[STORE_MAX_FLUSHES];
    size_t                 n_flushes;
    bool                   holds;           /* the backend may hold (be->holds) */
    store_obj_undo_fn      obj_undo;        /* store_set_obj_undo */
    store_hook_fn          outbox_replay;   /* store_set_outbox */
    void                  *outbox_ud;
    void                  *obj_undo_ud;
    _Atomic uint64_t       creates, updates, deletes, queries;
};

/* ------------------------------------------------------------ streams */

typedef struct pending {
    struct pending *next;
    store_change_t *group;
    size_t          n;
    uint64_t        first, last;    /* seqs */
    bool            done;
    bool            replayed;       /* an outbox entry taken over: the notifier's alone (store_set_outbox) */
} pending_t;

struct store_stream {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    uint64_t        next;           /* seq of the next change to deliver */
    bool            busy;           /* a thread is running hooks */
    pending_t      *queue;          /* sorted by first */
};

store_stream_t *store_stream_new(void)
{
    store_stream_t *st = cr_xmalloc(sizeof(*st));

    if (pthread_mutex_init(&st->mu, NULL) != 0 || pthread_cond_init(&st->cv, NULL) != 0) {
        LOG_E("store: cannot create a stream's mutex; aborting");
        abort();
    }
    st->next  = 1;
    st->busy  = false;
    st->queue = NULL;
    return st;
}

void store_stream_free(store_stream_t *st)
{
    if (!st)
        return;
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static void run_hooks(store_t *s, const store_change_t *g, size_t n)
{
    size_t k = atomic_load_explicit(&s->n_hooks, memory_order_acquire);

    for (size_t i = 0; i < k; i++)
        s->hooks[i].fn(s->hooks[i].ud, g, n);
}

/* Queues the group and returns once it has been delivered (see the top). */
static void stream_deliver(store_t *s, store_stream_t *st, store_change_t *g, size_t n, bool replayed)
{
    pending_t me = { .group = g, .n = n, .first = g[0].seq, .last = g[n - 1].seq, .replayed = replayed };
    pending_t **pp;

    pthread_mutex_lock(&st->mu);
    for (pp = &st->queue; *pp && (*pp)->first < me.first; pp = &(*pp)->next)
        ;
    me.next = *pp;
    *pp     = &me;
    while (!me.done) {
        pending_t *h = st->queue;

        if (!st->busy && h && h->first == st->next) {
            /* Deliver the whole run of groups that are next in order, then
             * wake the waiters once (a broadcast per group woke every
             * waiter per group: quadratic when an fsync releases many). */
            st->busy = true;
            do {
                st->queue = h->next;
                pthread_mutex_unlock(&st->mu);
                if (!h->replayed)
                    run_hooks(s, h->group, h->n);
                else if (s->outbox_replay)
                    s->outbox_replay(s->outbox_ud, h->group, h->n);
                pthread_mutex_lock(&st->mu);
                st->next = h->last + 1;
                h->done  = true;    /* h's writer may return (and free it) once we unlock */
                h        = st->queue;
            } while (h && h->first == st->next);
            st->busy = false;
            pthread_cond_broadcast(&st->cv);
        } else {
            pthread_cond_wait(&st->cv, &st->mu);
        }
    }
    pthread_mutex_unlock(&st->mu);
}

/* ------------------------------------------------- attribute lists */

static bool same_ds(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* The instances of an entity by (name, datasetId), so that the diff of two
 * versions costs linear time whatever their width (an entity may have tens of
 * thousands of attributes): a linear search below INST_LINEAR instances, an
 * open-addressing table above (on the stack up to INST_STACK slots). */
#define INST_LINEAR 16u
#define INST_STACK  128u

typedef struct {
    const cr_entity_t *e;
    const cr_attr_t  **slot;        /* NULL: search e linearly */
    uint32_t           mask;
    const cr_attr_t   *local[INST_STACK];
} inst_index_t;

static uint32_t inst_hash(const cr_attr_t *at)
{
    uint64_t h = cr_hash_ptr(at->name);
    if (at->dataset_id) h ^= cr_hash(at->dataset_id, strlen(at->dataset_id));
    return (uint32_t)h;
}

static void inst_index_init(inst_index_t *x, const cr_entity_t *e)
{
    x->e = e;
    x->slot = NULL;
    if (!e || e->n_attrs <= INST_LINEAR) return;
    uint32_t cap = 32;
    while (cap < 2u * e->n_attrs) cap *= 2;
    x->slot = cap <= INST_STACK ? x->local : cr_xmalloc(cap * sizeof *x->slot);
    memset(x->slot, 0, cap * sizeof *x->slot);
    x->mask = cap - 1;
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        uint32_t j = inst_hash(&e->attrs[i]) & x->mask;
        while (x->slot[j]) j = (j + 1) & x->mask;
        x->slot[j] = &e->attrs[i];
    }
}

static void inst_index_free(inst_index_t *x)
{
    if (x->slot && x->slot != x->local) free(x->slot);
}

static const cr_attr_t *find_instance(const inst_index_t *x, const cr_attr_t *at)
{
    const cr_entity_t *e = x->e;
    if (!x->slot) {
        for (uint16_t i = 0; i < e->n_attrs; i++)
            if (e->attrs[i].name == at->name && same_ds(e->attrs[i].dataset_id, at->dataset_id))
                return &e->attrs[i];
        return NULL;
    }
    for (uint32_t j = inst_hash(at) & x->mask; x->slot[j]; j = (j + 1) & x->mask)
        if (x->slot[j]->name == at->name && same_ds(x->slot[j]->dataset_id, at->dataset_id))
            return x->slot[j];
    return NULL;
}

/* The same instances at the same positions (the common PATCH): nothing is
 * created or deleted. */
static bool same_instances(const cr_entity_t *b, const cr_entity_t *a)
{
    if (b->n_attrs != a->n_attrs) return false;
    for (uint16_t i = 0; i < a->n_attrs; i++)
        if (b->attrs[i].name != a->attrs[i].name || !same_ds(b->attrs[i].dataset_id, a->attrs[i].dataset_id))
            return false;
    return true;
}

static store_attr_ref_t *put_ref(store_attr_ref_t *r, const cr_attr_t *at)
{
    r->name       = at->name;
    r->dataset_id = at->dataset_id;
    return r + 1;
}

/* Fills ch's created / updated / deleted from before and after, in r (room
 * for before's and after's attributes). An attribute of after was touched by
 * this commit when its modifiedAt is the commit time (the tenant's clock is
 * strictly increasing, so no earlier commit has that time). */
static store_attr_ref_t *diff_change(store_change_t *ch, store_attr_ref_t *r)
{
    const cr_entity_t *b = ch->before, *a = ch->after;

    if (a && b && same_instances(b, a)) {
        ch->created = ch->deleted = r;
        ch->n_created = ch->n_deleted = 0;
        ch->updated = r;
        for (uint16_t i = 0; i < a->n_attrs; i++)
            if (a->attrs[i].modified_at == ch->at) r = put_ref(r, &a->attrs[i]);
        ch->n_updated = (uint32_t)(r - ch->updated);
        ch->deleted = r;
        return r;
    }
    inst_index_t bi, ai;
    inst_index_init(&bi, b);
    inst_index_init(&ai, a);
    ch->created = r;
    if (a)
        for (uint16_t i = 0; i < a->n_attrs; i++)
            if (!b || !find_instance(&bi, &a->attrs[i]))
                r = put_ref(r, &a->attrs[i]);
    ch->n_created = (uint32_t)(r - ch->created);
    ch->updated   = r;
    if (a && b)
        for (uint16_t i = 0; i < a->n_attrs; i++)
            if (a->attrs[i].modified_at == ch->at && find_instance(&bi, &a->attrs[i]))
                r = put_ref(r, &a->attrs[i]);
    ch->n_updated = (uint32_t)(r - ch->updated);
    ch->deleted   = r;
    if (b)
        for (uint16_t i = 0; i < b->n_attrs; i++)
            if (!a || !find_instance(&ai, &b->attrs[i]))
                r = put_ref(r, &b->attrs[i]);
    ch->n_deleted = (uint32_t)(r - ch->deleted);
    inst_index_free(&bi);
    inst_index_free(&ai);
    return r;
}

/* Delivers a committed group (n > 0, consecutive seqs). Without hooks there
 * is nobody to order for: hooks are only added before the first write
 * (store_add_hook), so no stream ever has to catch up. */
static void store_deliver(store_t *s, store_change_t *g, size_t n, bool replayed)
{
    store_attr_ref_t  stack[STORE_REFS_STACK], *refs = stack, *r;
    size_t            need = 0;

    if (!atomic_load_explicit(&s->n_hooks, memory_order_acquire))
        return;

    for (size_t i = 0; i < n; i++)
        need += (g[i].before ? g[i].before->n_attrs : 0) + (g[i].after ? g[i].after->n_attrs : 0);
    if (need > STORE_REFS_STACK)
        refs = cr_xreallocarray(NULL, need, sizeof(*refs));
    r = refs;
    for (size_t i = 0; i < n; i++)
        r = diff_change(&g[i], r);

    stream_deliver(s, g[0].stream, g, n, replayed);

    if (refs != stack)
        free(refs);
}

/* Delivers a committed group, then drops its references. */
static void store_emit_group(store_t *s, store_change_t *g, size_t n)
{
    store_deliver(s, g, n, false);
    for (size_t i = 0; i < n; i++) {
        if (g[i].before)
            entity_unref(g[i].before);
        if (g[i].after)
            entity_unref(g[i].after);
    }
}

static void store_commit(store_t *s, store_change_t *ch)
{
    if (!ch->seq)                           /* a modify that changed nothing */
        return;
    store_emit_group(s, ch, 1);
}

/* The backend drops a purge group's references after this returns. */
static void purge_emit(void *ud, store_change_t *g, size_t n)
{
    store_deliver(ud, g, n, false);
}

/* ------------------------------------------------------- held answers */

enum { FAIL_NONE = 0, FAIL_SYNC, FAIL_FLUSH };

struct store_ticket {
    _Atomic int  count;         /* pending writes, + 1 until store_ticket_wait */
    _Atomic int  fail;          /* FAIL_*: the first failure */
    void       (*fn)(void *ud, bool ok, const problem_t *p);
    void        *ud;
    const char  *why;           /* FAIL_FLUSH: what the flush said (static) */
    void       (*rel)(void *ud, size_t n);  /* store_hold_release */
    void        *rel_ud;
    size_t       rel_n;
};

struct store_pending {
    store_t              *store;
    store_ticket_t       *ticket;
    store_change_t       *g;            /* &one, or a heap array (batches) */
    store_change_t        one;
    struct store_pending *next;         /* the syncer's round */
    bool                  ok;
    _Alignas(max_align_t) unsigned char area[STORE_PENDING_AREA];   /* the backend's */
};

/* Pending writes and tickets come from a free list (a write under --dbSync
 * always takes one of each, given back by the syncer's thread): no malloc
 * per write once it is warm; at most POOL_MAX blocks are kept. */
typedef union pool_block {
    union pool_block *next;
    store_pending_t   pd;
    store_ticket_t    t;
} pool_block_t;

#define POOL_MAX 4096
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pool_block_t   *pool_head;
static size_t          pool_n;

static void *pool_get(void)
{
    pool_block_t *b;

    pthread_mutex_lock(&pool_mu);
    b = pool_head;
    if (b) {
        pool_head = b->next;
        pool_n--;
    }
    pthread_mutex_unlock(&pool_mu);
    return b ? (void *)b : cr_xmalloc(sizeof(pool_block_t));
}

static void pool_put(void *v)
{
    pool_block_t *b = v;

    pthread_mutex_lock(&pool_mu);
    if (pool_n < POOL_MAX) {
        b->next   = pool_head;
        pool_head = b;
        pool_n++;
        b = NULL;
    }
    pthread_mutex_unlock(&pool_mu);
    free(b);
}

void *store_pending_area(store_pending_t *pd)
{
    return pd->area;
}

static __thread struct {
    bool             on;                /* between store_hold_begin and _end */
    bool             adopted;           /* the current call's pending was adopted */
    bool             any;               /* a write of this hold is pending */
    bool             last;              /* the last write call returned pending */
    store_t         *s;
    store_ticket_t  *ticket;            /* this hold's, made at its first write */
    store_pending_t *cur;               /* handed to the backend by the current call */
    store_pending_t *round, *round_tail;    /* the syncer thread's round */
} tl;

void store_hold_begin(store_t *s)
{
    if (CR_LIKELY(!s || !s->holds) || tl.on)
        return;                         /* nested: one hold, ended once */
    tl.on   = true;
    tl.any  = tl.last = false;
    tl.s   = s;
}

store_ticket_t *store_hold_end(void)
{
    store_ticket_t *t = tl.ticket;

    tl.on     = false;
    tl.ticket = NULL;
    if (!t)
        return NULL;
    if (!tl.any) {                      /* nothing pending: the count is the seal alone */
        pool_put(t);
        return NULL;
    }
    tl.any = false;
    return t;
}

bool store_hold_pending(void)
{
    return tl.on && tl.last;
}

static void ticket_put(store_ticket_t *t)
{
    if (atomic_fetch_sub_explicit(&t->count, 1, memory_order_acq_rel) != 1)
        return;
    int       f = atomic_load_explicit(&t->fail, memory_order_acquire);
    problem_t p = { 0 };

    if (f == FAIL_SYNC)
        problem_set(&p, PB_HTTP, "the store cannot sync its log on disk: nothing of this write was "
                    "applied; retry when the disk has room or works again");
    else if (f == FAIL_FLUSH)
        problem_set(&p, PB_HTTP, "the write is on disk in the store, but %s; it is not "
                    "acknowledged: retry when the disk works again", t->why);
    p.status = 503;
    if (t->rel)
        t->rel(t->rel_ud, t->rel_n);
    t->fn(t->ud, f == FAIL_NONE, f == FAIL_NONE ? NULL : &p);
    pool_put(t);
}

void store_ticket_wait(store_ticket_t *t, void (*fn)(void *ud, bool ok, const problem_t *p),
                       void *ud)
{
    t->fn = fn;
    t->ud = ud;
    ticket_put(t);                      /* the seal */
}

void store_hold_release(void (*fn)(void *ud, size_t n), void *ud, size_t n)
{
    store_ticket_t *t = tl.ticket;

    if (!store_hold_pending() || !t || (t->rel && (t->rel != fn || t->rel_ud != ud))) {
        fn(ud, n);
        return;
    }
    t->rel     = fn;                    /* the seal is ours until store_ticket_wait */
    t->rel_ud  = ud;
    t->rel_n  += n;
}

void store_add_flush(store_t *s, const char *(*fn)(void *ud), void *ud)
{
    if (s->n_flushes == STORE_MAX_FLUSHES) {
        LOG_E("store: more than %d flushes; flush ignored", STORE_MAX_FLUSHES);
        return;
    }
    s->flushes[s->n_flushes].fn = fn;
    s->flushes[s->n_flushes].ud = ud;
    s->n_flushes++;
}

/* The change array a write call hands its backend: stack, or, while the
 * thread holds, a pending write's (n changes). */
static store_change_t *hold_arm(store_t *s, store_change_t *stack, size_t n)
{
    store_pending_t *pd;

    if (CR_LIKELY(!tl.on) || tl.s != s)
        return stack;
    if (!tl.ticket) {
        tl.ticket = pool_get();
        memset(tl.ticket, 0, sizeof(*tl.ticket));
        atomic_init(&tl.ticket->count, 1);
        atomic_init(&tl.ticket->fail, FAIL_NONE);
    }
    pd         = pool_get();
    pd->store  = s;
    pd->ticket = tl.ticket;
    pd->g      = n <= 1 ? &pd->one : cr_xreallocarray(NULL, n, sizeof(*pd->g));
    pd->next   = NULL;
    atomic_fetch_add_explicit(&tl.ticket->count, 1, memory_order_relaxed);
    tl.cur     = pd;
    tl.adopted = false;
    return pd->g;
}

/* After the backend call: true when it adopted the pending write (the
 * array is no longer the caller's); else the caller uses its array and
 * then calls hold_drop. */
static bool hold_taken(void)
{
    store_pending_t *pd = tl.cur;

    if (CR_LIKELY(!pd))
        return false;
    tl.last = tl.adopted;
    if (tl.adopted) {
        tl.cur     = NULL;
        tl.adopted = false;
        tl.any     = true;
        return true;
    }
    atomic_fetch_sub_explicit(&pd->ticket->count, 1, memory_order_relaxed);   /* the seal stays */
    return false;
}

static void hold_drop(void)
{
    store_pending_t *pd = tl.cur;

    if (CR_LIKELY(!pd))
        return;
    tl.cur = NULL;
    if (pd->g != &pd->one)
        free(pd->g);
    pool_put(pd);
}

store_pending_t *store_pending(void)
{
    return tl.cur;
}

void store_pending_adopt(void)
{
    tl.adopted = true;
}

static void count_group(store_t *s, const store_change_t *g, size_t n);

void store_pending_done(store_pending_t *pd, store_change_t *g, size_t n, bool ok)
{
    if (ok && n) {
        count_group(pd->store, g, n);
        store_deliver(pd->store, g, n, false);
    }
    for (size_t i = 0; i < n; i++) {        /* an undone group has none left */
        if (g[i].before)
            entity_unref(g[i].before);
        if (g[i].after)
            entity_unref(g[i].after);
    }
    if (pd->g != &pd->one)
        free(pd->g);
    pd->g  = NULL;
    pd->ok = ok;
    if (tl.round_tail)
        tl.round_tail->next = pd;
    else
        tl.round = pd;
    tl.round_tail = pd;
}

void store_pending_round(void)
{
    store_pending_t *pd = tl.round, *next;
    store_t         *flushed = NULL;
    const char      *why = NULL;
    bool             any_ok = false;

    tl.round = tl.round_tail = NULL;
    for (store_pending_t *q = pd; q; q = q->next)
        any_ok = any_ok || q->ok;
    /* The flushes once per store of the round (one in practice). */
    for (store_pending_t *q = pd; q && any_ok; q = q->next) {
        if (!q->ok || q->store == flushed)
            continue;
        flushed = q->store;
        for (size_t i = 0; i < flushed->n_flushes; i++) {
            const char *w = flushed->flushes[i].fn(flushed->flushes[i].ud);

            if (w && !why)
                why = w;
        }
    }
    for (; pd; pd = next) {
        store_ticket_t *t = pd->ticket;
        int             none = FAIL_NONE;

        next = pd->next;
        if (!pd->ok) {
            atomic_compare_exchange_strong(&t->fail, &none, FAIL_SYNC);
        } else if (why && atomic_load(&t->fail) == FAIL_NONE) {
            t->why = why;
            atomic_compare_exchange_strong(&t->fail, &none, FAIL_FLUSH);
        }
        pool_put(pd);
        ticket_put(t);
    }
}

void store_set_obj_undo(store_t *s, store_obj_undo_fn fn, void *ud)
{
    s->obj_undo    = fn;
    s->obj_undo_ud = ud;
}

void store_obj_undone(store_pending_t *pd, const char *tenant, int kind, const char *id)
{
    if (pd->store->obj_undo)
        pd->store->obj_undo(pd->store->obj_undo_ud, pd->store, tenant, kind, id);
}

/* ------------------------------------------------------------ op names */

const char *store_op_name(store_op_t op)
{
    static const char *const names[] = {
        [STORE_OP_CREATE] = "create", [STORE_OP_UPDATE] = "update", [STORE_OP_MERGE] = "merge",
        [STORE_OP_REPLACE] = "replace", [STORE_OP_APPEND] = "append",
        [STORE_OP_DELETE_ATTR] = "deleteAttribute", [STORE_OP_DELETE] = "delete",
        [STORE_OP_PURGE] = "purge",
    };

    return op >= STORE_OP_CREATE && op <= STORE_OP_PURGE ? names[op] : "?";
}

store_op_t store_op_of(entity_op_t op)
{
    switch (op) {
    case OP_REPLACE_ENTITY:
    case OP_REPLACE_ATTR:   return STORE_OP_REPLACE;
    case OP_MERGE_ENTITY:   return STORE_OP_MERGE;
    case OP_APPEND_ATTRS:   return STORE_OP_APPEND;
    case OP_DELETE_ATTR:    return STORE_OP_DELETE_ATTR;
    case OP_UPDATE_ATTRS:
    case OP_PARTIAL_ATTR:
    default:                return STORE_OP_UPDATE;
    }
}

/* ------------------------------------------------------------- open */

store_t *store_open(problem_t *p)
{
    const char            *db = cr_config.database;
    const store_backend_t *be = &cdb_backend;
    store_t               *s;

    if (db && *db && (strcasecmp(db, "mongoc") == 0 || strcasecmp(db, "mongodb") == 0)) {
        be = &mgc_backend;
    } else if (db && *db && strcasecmp(db, "corDB") != 0) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--database %.100s: unknown store (corDB or mongoc)", db);
        return NULL;
    }
    if (cr_config.db_sync && *cr_config.db_sync && strcasecmp(cr_config.db_sync, "always") != 0 &&
        strcasecmp(cr_config.db_sync, "interval") != 0 && strcasecmp(cr_config.db_sync, "none") != 0) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--dbSync %.100s: expected always, interval or none",
                    cr_config.db_sync);
        return NULL;
    }
    if (cr_config.db_recover && *cr_config.db_recover &&
        strcasecmp(cr_config.db_recover, "stop") != 0 &&
        strcasecmp(cr_config.db_recover, "truncate") != 0) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--dbRecover %.100s: expected stop or truncate",
                    cr_config.db_recover);
        return NULL;
    }
    if (cr_config.db_lock_prefer && *cr_config.db_lock_prefer &&
        strcasecmp(cr_config.db_lock_prefer, "writes") != 0 &&
        strcasecmp(cr_config.db_lock_prefer, "reads") != 0) {
        problem_set(p, PB_BAD_REQUEST_DATA, "--dbLockPrefer %.100s: expected reads or writes",
                    cr_config.db_lock_prefer);
        return NULL;
    }

    s = cr_xcalloc(1, sizeof(*s));
    s->be = be;
    s->db = be->open(p);
    if (!s->db) {
        free(s);
        return NULL;
    }
    s->holds = be->holds && be->holds(s->db);
    if (be != &cdb_backend)
        return s;                           /* the backend said where it is */
    LOG_I("store: %s %s%s%s%s, lock preference %s, at most %d tenants", be->name,
          cr_config.db_dir ? "on disk in " : "in RAM", cr_config.db_dir ? cr_config.db_dir : "",
          cr_config.db_dir ? ", --dbSync " : "",
          cr_config.db_dir ? (cr_config.db_sync ? cr_config.db_sync : "interval") : "",
          cr_config.db_lock_prefer && !strcasecmp(cr_config.db_lock_prefer, "writes") ? "writes"
                                                                                      : "reads",
          cr_config.max_tenants);
    return s;
}

void store_close(store_t *s)
{
    if (!s)
        return;
    s->be->close(s->db);
    free(s);
}

/* Hooks are added at start-up, before the store is shared between threads
 * and before its first write (the streams count from seq 1). */
void store_add_hook(store_t *s, store_hook_fn fn, void *ud)
{
    size_t n = atomic_load(&s->n_hooks);

    if (atomic_load(&s->creates) || atomic_load(&s->updates) || atomic_load(&s->deletes)) {
        LOG_E("store: a change hook added after the first write; hook ignored");
        return;
    }
    if (n == STORE_MAX_HOOKS) {
        LOG_E("store: more than %d change hooks; hook ignored", STORE_MAX_HOOKS);
        return;
    }
    s->hooks[n].fn = fn;
    s->hooks[n].ud = ud;
    atomic_store_explicit(&s->n_hooks, n + 1, memory_order_release);
}

void store_set_outbox(store_t *s, bool (*due)(void *ud, const char *tenant, const cr_entity_t *e),
                      store_hook_fn replay, void *ud)
{
    s->outbox_replay = replay;
    s->outbox_ud     = ud;
    if (s->be->outbox_set)
        s->be->outbox_set(s->db, due, ud);
}

void store_outbox_done(store_t *s, const char *tenant, uint64_t id)
{
    if (id && s->be->outbox_done)
        s->be->outbox_done(s->db, tenant, id);
}

/* A replayed change goes through the tenant's stream (its order, one hook at a time). */
static void outbox_emit(void *ud, store_change_t *g, size_t n)
{
    store_deliver(ud, g, n, true);
}

void store_outbox_sweep(store_t *s)
{
    if (s->be->outbox_sweep)
        s->be->outbox_sweep(s->db, outbox_emit, s);
}

static void count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

bool store_tenant_exists(store_t *s, const char *tenant)
{
    return s->be->tenant_exists(s->db, tenant);
}

void store_tenants(store_t *s, void (*fn)(void *ud, const char *tenant), void *ud)
{
    s->be->tenants(s->db, fn, ud);
}

bool store_tenant_entities(store_t *s, const char *tenant, uint64_t *n)
{
    return s->be->tenant_entities && s->be->tenant_entities(s->db, tenant ? tenant : "", n);
}

/* ------------------------------------------------------------ entities */

static void count_group(store_t *s, const store_change_t *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (g[i].op) {
        case STORE_OP_CREATE: count(&s->creates, 1); break;
        case STORE_OP_DELETE:
        case STORE_OP_PURGE:  count(&s->deletes, 1); break;
        default:              count(&s->updates, 1); break;
        }
    }
}

bool store_create(store_t *s, const char *tenant, const cr_entity_t *draft, problem_t *p)
{
    store_change_t stack, *ch = hold_arm(s, &stack, 1);
    bool           ok = s->be->create(s->db, tenant, draft, ch, p);

    if (hold_taken())
        return true;                        /* counted and delivered when durable */
    if (ok) {
        count(&s->creates, 1);
        store_commit(s, ch);
    }
    hold_drop();
    return ok;
}

bool store_upsert(store_t *s, const char *tenant, const cr_entity_t *draft, bool replace,
                  bool *created, arena_t *scratch, problem_t *p)
{
    store_change_t stack, *ch = hold_arm(s, &stack, 1);
    bool           made = false;
    bool           ok = s->be->upsert(s->db, tenant, draft, replace, &made, scratch, ch, p);

    if (created)
        *created = ok && made;
    if (hold_taken())
        return true;
    if (ok) {
        count(made ? &s->creates : &s->updates, 1);
        store_commit(s, ch);
    }
    hold_drop();
    return ok;
}

cr_entity_t *store_get(store_t *s, const char *tenant, const char *id, problem_t *p)
{
    return s->be->get(s->db, tenant, id, p);
}

bool store_modify(store_t *s, const char *tenant, const char *id, entity_op_t op,
                  const cr_entity_t *patch, const op_args_t *args, op_result_t *res,
                  arena_t *scratch, problem_t *p)
{
    store_change_t stack, *ch = hold_arm(s, &stack, 1);
    bool           ok = s->be->modify(s->db, tenant, id, op, patch, args, res, scratch, ch, p);

    if (hold_taken())
        return true;
    if (ok) {
        if (ch->seq)
            count(&s->updates, 1);
        store_commit(s, ch);
    }
    hold_drop();
    return ok;
}

bool store_delete_if(store_t *s, const char *tenant, const char *id, const typesel_t *if_type,
                     problem_t *p)
{
    store_change_t stack, *ch = hold_arm(s, &stack, 1);
    bool           ok = s->be->remove(s->db, tenant, id, if_type, ch, p);

    if (hold_taken())
        return true;
    if (ok) {
        count(&s->deletes, 1);
        store_commit(s, ch);
    }
    hold_drop();
    return ok;
}

bool store_delete(store_t *s, const char *tenant, const char *id, problem_t *p)
{
    return store_delete_if(s, tenant, id, NULL, p);
}

bool store_batch(store_t *s, const char *tenant, store_batch_item_t *items, size_t n,
                 arena_t *scratch, problem_t *p)
{
    store_change_t *group = hold_arm(s, NULL, n);
    size_t          k = 0;
    bool            ok;

    if (!group)
        group = arena_alloc(scratch, (n ? n : 1) * sizeof(*group));
    ok = s->be->batch(s->db, tenant, items, n, scratch, group, &k, p);
    if (hold_taken())
        return true;
    if (ok && k) {
        count_group(s, group, k);
        store_emit_group(s, group, k);
    }
    hold_drop();
    return ok;
}

/* ------------------------------------------------------------- queries */

bool store_select(store_t *s, const char *tenant, const entity_filter_t *f, arena_t *a,
                  store_page_t *out, problem_t *p)
{
    static const entity_filter_t all = { .limit = SIZE_MAX };

    count(&s->queries, 1);
    return s->be->query(s->db, tenant, f ? f : &all, a, out, p);
}

bool store_query(store_t *s, const char *tenant, const entity_filter_t *f, size_t offset,
                 size_t limit, bool want_count, arena_t *a, store_page_t *out, problem_t *p)
{
    entity_filter_t g = { 0 };

    if (f)
        g = *f;
    g.offset = offset;
    g.limit  = limit;
    g.count  = want_count;
    return store_select(s, tenant, &g, a, out, p);
}

void store_page_release(store_page_t *pg)
{
    if (!pg)
        return;
    for (size_t i = 0; i < pg->n; i++)
        entity_unref(pg->items[i]);
    pg->n = 0;
}

bool store_foreach(store_t *s, const char *tenant, const entity_filter_t *f,
                   void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p)
{
    count(&s->queries, 1);
    return s->be->foreach(s->db, tenant, f, fn, ud, p);
}

bool store_types(store_t *s, const char *tenant, void (*fn)(void *ud, const char *type),
                 void *ud, problem_t *p)
{
    count(&s->queries, 1);
    return s->be->types(s->db, tenant, fn, ud, p);
}

bool store_attributes(store_t *s, const char *tenant, void (*fn)(void *ud, const char *name),
                      void *ud, problem_t *p)
{
    count(&s->queries, 1);
    return s->be->attributes(s->db, tenant, fn, ud, p);
}

bool store_purge(store_t *s, const char *tenant, const entity_filter_t *f, size_t *deleted,
                 problem_t *p)
{
    size_t n  = 0;
    bool   ok = s->be->purge(s->db, tenant, f, &n, purge_emit, s, p);

    count(&s->deletes, n);
    if (deleted)
        *deleted = n;
    return ok;
}

/* ------------------------------------------------------------ objects */

static bool obj_kind_ok(store_obj_kind_t kind, problem_t *p)
{
    if (kind >= STORE_OBJ_SUBSCRIPTION && kind <= STORE_OBJ_ENTITY_MAP)
        return true;
    return problem_set(p, PB_INTERNAL_ERROR, "store: unknown object kind %d", (int)kind);
}

static bool obj_id_ok(const char *id, problem_t *p)
{
    if (id && *id)
        return true;
    return problem_set(p, PB_BAD_REQUEST_DATA, "a stored object needs an id");
}

bool store_obj_put(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id,
                   const char *json, size_t len, bool create_only, problem_t *p)
{
    if (!obj_kind_ok(kind, p) || !obj_id_ok(id, p))
        return false;
    if (!json && len)
        return problem_set(p, PB_INTERNAL_ERROR, "store: object '%.200s' without its text", id);
    store_change_t stack;
    bool           ok;

    hold_arm(s, &stack, 1);                 /* no change: the array stays empty */
    ok = s->be->obj_put(s->db, tenant, (int)kind, id, json ? json : "", len, create_only, p);
    if (!hold_taken())
        hold_drop();
    return ok;
}

bool store_obj_delete(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id,
                      problem_t *p)
{
    if (!obj_kind_ok(kind, p) || !obj_id_ok(id, p))
        return false;
    store_change_t stack;
    bool           ok;

    hold_arm(s, &stack, 1);
    ok = s->be->obj_delete(s->db, tenant, (int)kind, id, p);
    if (!hold_taken())
        hold_drop();
    return ok;
}

char *store_obj_get(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id,
                    arena_t *a, size_t *len, problem_t *p)
{
    if (!obj_kind_ok(kind, p) || !obj_id_ok(id, p))
        return NULL;
    return s->be->obj_get(s->db, tenant, (int)kind, id, a, len, p);
}

void store_obj_foreach(store_t *s, store_obj_kind_t kind,
                       void (*fn)(void *ud, const char *tenant, const char *id, const char *json,
                                  size_t len),
                       void *ud)
{
    if (kind >= STORE_OBJ_SUBSCRIPTION && kind <= STORE_OBJ_ENTITY_MAP)
        s->be->obj_foreach(s->db, (int)kind, fn, ud);
}

bool store_obj_changed(store_t *s)
{
    return s->be->obj_changed && s->be->obj_changed(s->db);
}

void store_obj_sync(store_t *s, store_obj_kind_t kind,
                    void (*put)(void *ud, const char *tenant, const char *id, const char *json, size_t len),
                    void (*gone)(void *ud, const char *tenant, const char *id), void *ud)
{
    if (s->be->obj_sync && kind >= STORE_OBJ_SUBSCRIPTION && kind <= STORE_OBJ_ENTITY_MAP)
        s->be->obj_sync(s->db, (int)kind, put, gone, ud);
}

/* -------------------------------------------------------------- counters */

bool store_ctr_shared(store_t *s)
{
    return s->be->ctr_read != NULL;
}

void store_ctr_add(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id, const store_ctr_t *d)
{
    if (s->be->ctr_add)
        s->be->ctr_add(s->db, tenant, (int)kind, id, d);
}

bool store_ctr_read(store_t *s, const char *tenant, store_obj_kind_t kind, const char *id, store_ctr_t *tot)
{
    return s->be->ctr_read && s->be->ctr_read(s->db, tenant, (int)kind, id, tot);
}

void store_ctr_flush(store_t *s)
{
    if (s->be->ctr_flush)
        s->be->ctr_flush(s->db);
}

/* ------------------------------------------------------------ snapshots */

bool store_snapshot(store_t *s, store_snapshot_info_t *info, problem_t *p)
{
    store_snapshot_info_t tmp;

    memset(info ? info : &tmp, 0, sizeof(tmp));
    if (!s->be->snapshot)
        return problem_set(p, PB_OPERATION_NOT_SUPPORTED, "the %s store takes no snapshots",
                           s->be->name);
    return s->be->snapshot(s->db, info ? info : &tmp, p);
}

bool store_snapshot_start(store_t *s, problem_t *p)
{
    if (!s->be->snapshot_start)
        return problem_set(p, PB_OPERATION_NOT_SUPPORTED, "the %s store takes no snapshots",
                           s->be->name);
    return s->be->snapshot_start(s->db, p);
}

bool store_snapshot_last(store_t *s, store_snapshot_info_t *info, bool *running, problem_t *p)
{
    memset(info, 0, sizeof(*info));
    *running = false;
    if (!s->be->snapshot_last)
        return problem_set(p, PB_OPERATION_NOT_SUPPORTED, "the %s store takes no snapshots",
                           s->be->name);
    return s->be->snapshot_last(s->db, info, running, p);
}

/* ----------------------------------------------------------- statistics */

void store_get_stats(store_t *s, store_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    s->be->stats(s->db, &st->entities, &st->tenants);
    if (s->be->disk_stats)
        s->be->disk_stats(s->db, st);
    st->creates = atomic_load_explicit(&s->creates, memory_order_relaxed);
    st->updates = atomic_load_explicit(&s->updates, memory_order_relaxed);
    st->deletes = atomic_load_explicit(&s->deletes, memory_order_relaxed);
    st->queries = atomic_load_explicit(&s->queries, memory_order_relaxed);
}
