/*
 * subscriptions.c - the subscription operations (5.8.1 Create, 5.8.2
 * Update, 5.8.3 Retrieve, 5.8.4 Query, 5.8.5 Delete Subscription).
 *
 * The subscription document is validated and parsed by notify/ (one parser
 * for create, update and restart); it is kept in the store
 * (store_obj_*, kind STORE_OBJ_SUBSCRIPTION), so every backend and corDB on
 * disk keep it, and the engine's registry is the parsed index the matcher
 * reads, rebuilt from the store at start (ops_sub_restore). The writes of
 * subscriptions are serialised (g_write: they are rare), so that the store
 * and the registry always agree. The operations are written once for both
 * kinds of subscription document (subkind.h; csubscriptions.c is the other
 * kind). Tenants: a subscription belongs to the tenant of its
 * request; reading a tenant that has neither entities nor subscriptions is
 * NonexistentTenant, as for entities (4.14).
 */
#include "subkind.h"

#include <pthread.h>
#include <stdlib.h>

/* --------------------------------------- the operations of both kinds */

static pthread_mutex_t g_write = PTHREAD_MUTEX_INITIALIZER;

static bool tenant_known(const ops_sub_kind_t *k, const ops_req_t *rq, problem_t *p)
{
    if (!rq->tenant || !*rq->tenant || store_tenant_exists(rq->store, rq->tenant)) return true;
    if (k->tenant_known(rq->tenant)) return true;
    return problem_set(p, PB_NONEXISTENT_TENANT, "tenant '%s' does not exist", rq->tenant);
}

bool ops_subk_create(const ops_sub_kind_t *k, const ops_req_t *rq, const json_t *body, const char **id,
                     problem_t *p)
{
    if (!json_is_object(body)) return problem_set(p, PB_BAD_REQUEST_DATA, "a subscription must be a JSON object");
    const json_t *given = json_get(body, "id");
    if (given && (!json_is_string(given) || !model_valid_uri(given->str)))
        return problem_set(p, PB_BAD_REQUEST_DATA, "id must be a URI");
    int64_t       now = cr_now_us();
    size_t        len;
    char         *doc = notify_doc_new(rq->arena, body, rq->ctx, now, &len);
    notify_sub_t *s = k->build(rq->tenant, doc, len, now, p);
    if (!s) return false;
    *id = arena_strdup(rq->arena, notify_sub_id(s));
    pthread_mutex_lock(&g_write);
    bool ok = store_obj_put(rq->store, rq->tenant, k->kind, *id, doc, len, true, p);
    if (ok && !(ok = k->add(s, true, p))) {
        problem_t q = {0};
        store_obj_delete(rq->store, rq->tenant, k->kind, *id, &q);
    }
    pthread_mutex_unlock(&g_write);
    notify_sub_unref(s);
    return ok;
}

static void sync_put(void *ud, const char *tenant, const char *id, const char *json, size_t len);
static void sync_gone(void *ud, const char *tenant, const char *id);

/* Under g_write: the registry's entry for id made what the store holds. */
static void resync_locked(const ops_sub_kind_t *k, store_t *s, const char *tenant, const char *id)
{
    arena_t  *a = arena_new(4096);
    problem_t p = {0};
    size_t    len;
    char     *json = store_obj_get(s, tenant, k->kind, id, a, &len, &p);
    if (json) sync_put((void *)k, tenant, id, json, len);
    else sync_gone((void *)k, tenant, id);
    arena_free(a);
}

void ops_subk_resync(const ops_sub_kind_t *k, store_t *s, const char *tenant, const char *id)
{
    pthread_mutex_lock(&g_write);
    resync_locked(k, s, tenant, id);
    pthread_mutex_unlock(&g_write);
}

notify_sub_t *ops_subk_retrieve(const ops_sub_kind_t *k, const ops_req_t *rq, const char *id, problem_t *p)
{
    if (!ops_check_id(id, p)) return NULL;
    notify_sub_t *s = k->find(rq->tenant, id);
    if (!s && tenant_known(k, rq, p)) problem_set(p, PB_RESOURCE_NOT_FOUND, "no subscription '%s'", id);
    return s;
}

bool ops_subk_update(const ops_sub_kind_t *k, const ops_req_t *rq, const char *id, const json_t *body,
                     problem_t *p)
{
    if (!json_is_object(body)) return problem_set(p, PB_BAD_REQUEST_DATA, "the update must be a JSON object");
    if (!body->len || (body->len == 1 && json_get(body, "@context")))
        return problem_set(p, PB_BAD_REQUEST_DATA, "the update names no member of the subscription");
    notify_sub_t *old = ops_subk_retrieve(k, rq, id, p);
    if (!old) return false;
    size_t      stored_len, len;
    const char *stored = notify_sub_doc(old, &stored_len);
    int64_t     now = cr_now_us();
    /* 5.8.2: the fragment's names are in the request's @context; the
     * subscription keeps its own: they are re-termed for it */
    if (rq->ctx && !notify_same_context(rq->ctx, notify_sub_context(old)))
        body = notify_doc_reterm(rq->arena, body, rq->ctx, notify_sub_context(old));
    char       *doc = notify_doc_patch(rq->arena, stored, stored_len, body, now, &len, p);
    notify_sub_unref(old);
    if (!doc) return false;
    notify_sub_t *s = k->build(rq->tenant, doc, len, now, p);
    if (!s) return false;
    pthread_mutex_lock(&g_write);
    /* the registry first: a subscription deleted meanwhile is not written back to the store */
    bool ok = k->replace(s, p);
    if (ok && !(ok = store_obj_put(rq->store, rq->tenant, k->kind, notify_sub_id(s), doc, len, false, p)))
        resync_locked(k, rq->store, rq->tenant, notify_sub_id(s));   /* the store kept the old one */
    pthread_mutex_unlock(&g_write);
    notify_sub_unref(s);
    return ok;
}

bool ops_subk_delete(const ops_sub_kind_t *k, const ops_req_t *rq, const char *id, problem_t *p)
{
    if (!ops_check_id(id, p)) return false;
    pthread_mutex_lock(&g_write);
    bool ok = store_obj_delete(rq->store, rq->tenant, k->kind, id, p);
    if (ok) k->remove(rq->tenant, id, p);
    pthread_mutex_unlock(&g_write);
    return ok;
}

notify_sub_t **ops_subk_query(const ops_sub_kind_t *k, const ops_req_t *rq, size_t offset, size_t limit, size_t *n,
                              size_t *total, problem_t *p)
{
    if (limit > (size_t)cr_config.max_limit) {
        problem_set(p, PB_TOO_MANY_RESULTS, "limit %zu is above the maximum page size %d (--maxLimit)", limit,
                    cr_config.max_limit);
        return NULL;
    }
    if (!tenant_known(k, rq, p)) return NULL;
    return k->list(rq->tenant, offset, limit, rq->arena, n, total);
}

typedef struct restore {
    const ops_sub_kind_t *k;
    size_t                n;
} restore_t;

static void restore_one(void *ud, const char *tenant, const char *id, const char *json, size_t len)
{
    restore_t    *r = ud;
    problem_t     p = {0};
    notify_sub_t *s = r->k->build(tenant, json, len, 0, &p);
    if (!s || !r->k->add(s, false, &p))
        LOG_E("%s '%s' of tenant '%s' is not restored: %s", r->k->what, id, tenant, p.detail);
    else r->n++;
    notify_sub_unref(s);
}

size_t ops_subk_restore(const ops_sub_kind_t *k, store_t *s)
{
    restore_t r = {k, 0};
    store_obj_foreach(s, k->kind, restore_one, &r);
    return r.n;
}

/* Objects another process wrote (store_obj_sync, a store shared between
 * processes): into the registry, under the same mutex as this process's writes. */
static void sync_put(void *ud, const char *tenant, const char *id, const char *json, size_t len)
{
    const ops_sub_kind_t *k = ud;
    problem_t             p = {0};
    notify_sub_t         *s = k->build(tenant, json, len, 0, &p), *old;
    bool                  ok = false;

    if (s) {
        old = k->find(tenant, id);
        ok = old ? k->replace(s, &p) : k->add(s, false, &p);
        if (old) notify_sub_unref(old);
    }
    if (!ok) LOG_E("%s '%s' of tenant '%s' written by another process is not loaded: %s", k->what, id, tenant,
                   p.detail);
    notify_sub_unref(s);
}

static void sync_gone(void *ud, const char *tenant, const char *id)
{
    const ops_sub_kind_t *k = ud;
    problem_t             p = {0};
    k->remove(tenant, id, &p);
}

void ops_subk_sync(const ops_sub_kind_t *k, store_t *s)
{
    pthread_mutex_lock(&g_write);
    store_obj_sync(s, k->kind, sync_put, sync_gone, (void *)k);
    pthread_mutex_unlock(&g_write);
}

/* ------------------------------------------------------ subscriptions */

static bool sub_add(notify_sub_t *s, bool initial, problem_t *p)
{
    (void)initial;
    return notify_add(s, p);
}

static const ops_sub_kind_t k_sub = {
    .kind = STORE_OBJ_SUBSCRIPTION, .what = "subscription", .build = notify_sub_build, .add = sub_add,
    .replace = notify_replace, .remove = notify_remove, .find = notify_find, .list = notify_list,
    .tenant_known = notify_tenant_known,
};

bool ops_sub_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p)
{
    return ops_subk_create(&k_sub, rq, body, id, p);
}

notify_sub_t *ops_sub_retrieve(const ops_req_t *rq, const char *id, problem_t *p)
{
    return ops_subk_retrieve(&k_sub, rq, id, p);
}

bool ops_sub_update(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p)
{
    return ops_subk_update(&k_sub, rq, id, body, p);
}

bool ops_sub_delete(const ops_req_t *rq, const char *id, problem_t *p)
{
    return ops_subk_delete(&k_sub, rq, id, p);
}

notify_sub_t **ops_sub_query(const ops_req_t *rq, size_t offset, size_t limit, size_t *n, size_t *total,
                             problem_t *p)
{
    return ops_subk_query(&k_sub, rq, offset, limit, n, total, p);
}

/* The entities of a periodic notification (notify_source_fn). A q into
 * linked entities is resolved first (ops_q_resolve) on this call's own copy:
 * the subscription's tree is shared by the matcher threads. */
static bool periodic_source(void *ud, const char *tenant, const entity_filter_t *f,
                            void (*fn)(void *fud, const cr_entity_t *e), void *fud)
{
    problem_t p = {0};
    if (tenant && *tenant && !store_tenant_exists(ud, tenant)) return false;
    if (!q_link_depth(f->q)) return store_foreach(ud, tenant, f, fn, fud, &p);

    arena_t        *a = arena_new(4096);
    ops_req_t       rq = {.store = ud, .tenant = tenant, .arena = a};
    entity_filter_t lf = *f;
    lf.q = q_clone(a, f->q);
    bool ok = ops_q_resolve(&rq, lf.q, &p) && store_foreach(ud, tenant, &lf, fn, fud, &p);
    if (!ok && p.kind) LOG_W("periodic notification: q into linked entities not evaluated: %s", p.detail);
    arena_free(a);
    return ok;
}

/* A linked entity of a subscription's q, read when a change is matched (notify_get_fn). */
static cr_entity_t *linked_get(void *ud, const char *tenant, const char *id)
{
    problem_t p = {0};
    return store_get(ud, tenant, id, &p);
}

/* The linked entities of a notification with join (notify_join_fn): what
 * ops_join_fetch finds for the projection of the notification, as the
 * entity API fetches them. */
typedef struct sub_linked {
    arena_t     *a;
    ops_linked_t l;
} sub_linked_t;

static void *join_fetch(void *ud, const char *tenant, cr_entity_t *const *roots, size_t n, bool flat, unsigned level,
                        const render_opts_t *ro, notify_linked_t *out)
{
    sub_linked_t *h = cr_xcalloc(1, sizeof *h);
    h->a = arena_new(4096);
    ops_req_t  rq = {.store = ud, .tenant = tenant, .ctx = ro->ctx, .arena = h->a};
    ops_join_t j = {.flat = flat, .level = level, .pick = ro->pick_tree, .omit = ro->omit_tree,
                    .dataset_ids = ro->dataset_ids, .n_dataset_ids = ro->n_dataset_ids};
    if (!j.pick && ro->n_pick) {      /* a flat pick list (attributes): the relationships it keeps */
        projection_t *pr = arena_calloc(h->a, sizeof *pr);
        pr->names = ro->pick;
        pr->n = ro->n_pick;
        j.pick = pr;
    }
    problem_t p = {0};
    if (!ops_join_fetch(&rq, roots, n, &j, &h->l, &p)) {
        LOG_D("notification: linked entities not fetched: %s", p.detail);
        ops_linked_release(&h->l);
        arena_free(h->a);
        free(h);
        return NULL;
    }
    *out = (notify_linked_t){.items = h->l.items, .pick = h->l.pick, .omit = h->l.omit, .n = h->l.n,
                             .find = ops_linked_find, .h = &h->l};
    return h;
}

static void join_release(void *hv)
{
    sub_linked_t *h = hv;
    ops_linked_release(&h->l);
    arena_free(h->a);
    free(h);
}

void ops_sub_sync(store_t *s)
{
    ops_subk_sync(&k_sub, s);
}

void ops_sub_resync(store_t *s, const char *tenant, const char *id)
{
    ops_subk_resync(&k_sub, s, tenant, id);
}

size_t ops_sub_restore(store_t *s)
{
    notify_set_source(periodic_source, s);
    notify_set_join(join_fetch, join_release, s);
    notify_set_linker(linked_get, s);
    return ops_subk_restore(&k_sub, s);
}
