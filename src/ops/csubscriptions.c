/*
 * csubscriptions.c - the context source registration subscription
 * operations (5.11.2 Create, 5.11.3 Update, 5.11.4 Retrieve, 5.11.5 Query,
 * 5.11.6 Delete).
 *
 * As for subscriptions (subscriptions.c): notify/ validates the document
 * (notify_csub_build, one parser for create, update and restart), the store
 * keeps it (STORE_OBJ_CSOURCE_SUBSCRIPTION, so corDB on disk keeps it), and
 * reg/ is the in-memory registry that matches registrations against it and
 * has its notifications sent. Writes are serialised so store and registry
 * agree.
 */
#include "ops.h"

#include "../notify/notify.h"
#include "../reg/reg.h"

#include <pthread.h>

static pthread_mutex_t g_write = PTHREAD_MUTEX_INITIALIZER;

static bool tenant_known(const ops_req_t *rq, problem_t *p)
{
    if (!rq->tenant || !*rq->tenant || store_tenant_exists(rq->store, rq->tenant)) return true;
    if (reg_csub_tenant_known(rq->tenant) || reg_tenant_known(rq->tenant)) return true;
    return problem_set(p, PB_NONEXISTENT_TENANT, "tenant '%s' does not exist", rq->tenant);
}

/* The document validated by notify/ and by reg/ (csf, temporalQ). */
static notify_sub_t *build(const ops_req_t *rq, const char *doc, size_t len, int64_t now, problem_t *p)
{
    notify_sub_t *s = notify_csub_build(rq ? rq->tenant : NULL, doc, len, now, p);
    if (s && !reg_csub_check(s, p)) {
        notify_sub_unref(s);
        return NULL;
    }
    return s;
}

bool ops_csub_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p)
{
    if (!json_is_object(body)) return problem_set(p, PB_BAD_REQUEST_DATA, "a subscription must be a JSON object");
    const json_t *given = json_get(body, "id");
    if (given && (!json_is_string(given) || !model_valid_uri(given->str)))
        return problem_set(p, PB_BAD_REQUEST_DATA, "id must be a URI");
    int64_t       now = cr_now_us();
    size_t        len;
    char         *doc = notify_doc_new(rq->arena, body, rq->ctx, now, &len);
    notify_sub_t *s = build(rq, doc, len, now, p);
    if (!s) return false;
    *id = arena_strdup(rq->arena, notify_sub_id(s));
    pthread_mutex_lock(&g_write);
    bool ok = store_obj_put(rq->store, rq->tenant, STORE_OBJ_CSOURCE_SUBSCRIPTION, *id, doc, len, true, p);
    if (ok && !(ok = reg_csub_add(s, true, p))) {
        problem_t q = {0};
        store_obj_delete(rq->store, rq->tenant, STORE_OBJ_CSOURCE_SUBSCRIPTION, *id, &q);
    }
    pthread_mutex_unlock(&g_write);
    notify_sub_unref(s);
    return ok;
}

notify_sub_t *ops_csub_retrieve(const ops_req_t *rq, const char *id, problem_t *p)
{
    if (!ops_check_id(id, p)) return NULL;
    notify_sub_t *s = reg_csub_find(rq->tenant, id);
    if (!s && tenant_known(rq, p)) problem_set(p, PB_RESOURCE_NOT_FOUND, "no subscription '%s'", id);
    return s;
}

bool ops_csub_update(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p)
{
    if (!json_is_object(body)) return problem_set(p, PB_BAD_REQUEST_DATA, "the update must be a JSON object");
    if (!body->len || (body->len == 1 && json_get(body, "@context")))
        return problem_set(p, PB_BAD_REQUEST_DATA, "the update names no member of the subscription");
    notify_sub_t *old = ops_csub_retrieve(rq, id, p);
    if (!old) return false;
    size_t      stored_len, len;
    const char *stored = notify_sub_doc(old, &stored_len);
    int64_t     now = cr_now_us();
    char       *doc = notify_doc_patch(rq->arena, stored, stored_len, body, now, &len, p);
    notify_sub_unref(old);
    if (!doc) return false;
    notify_sub_t *s = build(rq, doc, len, now, p);
    if (!s) return false;
    pthread_mutex_lock(&g_write);
    bool ok = store_obj_put(rq->store, rq->tenant, STORE_OBJ_CSOURCE_SUBSCRIPTION, notify_sub_id(s), doc, len,
                            false, p) &&
              reg_csub_replace(s, p);
    pthread_mutex_unlock(&g_write);
    notify_sub_unref(s);
    return ok;
}

bool ops_csub_delete(const ops_req_t *rq, const char *id, problem_t *p)
{
    if (!ops_check_id(id, p)) return false;
    pthread_mutex_lock(&g_write);
    bool ok = store_obj_delete(rq->store, rq->tenant, STORE_OBJ_CSOURCE_SUBSCRIPTION, id, p);
    if (ok) reg_csub_remove(rq->tenant, id, p);
    pthread_mutex_unlock(&g_write);
    return ok;
}

notify_sub_t **ops_csub_query(const ops_req_t *rq, size_t offset, size_t limit, size_t *n, size_t *total,
                              problem_t *p)
{
    if (limit > (size_t)cr_config.max_limit) {
        problem_set(p, PB_TOO_MANY_RESULTS, "limit %zu is above the maximum page size %d (--maxLimit)", limit,
                    cr_config.max_limit);
        return NULL;
    }
    if (!tenant_known(rq, p)) return NULL;
    return reg_csub_list(rq->tenant, offset, limit, rq->arena, n, total);
}

static void restore_one(void *ud, const char *tenant, const char *id, const char *json, size_t len)
{
    size_t   *n = ud;
    problem_t p = {0};
    ops_req_t rq = {.tenant = tenant};
    notify_sub_t *s = build(&rq, json, len, 0, &p);
    if (!s || !reg_csub_add(s, false, &p))
        LOG_E("context source subscription '%s' of tenant '%s' is not restored: %s", id, tenant, p.detail);
    else (*n)++;
    notify_sub_unref(s);
}

size_t ops_csub_restore(store_t *s)
{
    size_t n = 0;
    store_obj_foreach(s, STORE_OBJ_CSOURCE_SUBSCRIPTION, restore_one, &n);
    return n;
}
