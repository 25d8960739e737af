/*
 * csubscriptions.c - the context source registration subscription
 * operations (5.11.2 Create, 5.11.3 Update, 5.11.4 Retrieve, 5.11.5 Query,
 * 5.11.6 Delete).
 *
 * The same operations as for subscriptions (subkind.h, written once in
 * subscriptions.c) over another kind: notify/ validates the document
 * (notify_csub_build) and reg/ checks what is its own (csf, temporalQ); the
 * store keeps it (STORE_OBJ_CSOURCE_SUBSCRIPTION, so corDB on disk keeps
 * it), and reg/ is the in-memory registry that matches registrations
 * against it and has its notifications sent.
 */
#include "subkind.h"

#include "../reg/reg.h"

/* The document validated by notify/ and by reg/ (csf, temporalQ). */
static notify_sub_t *build(const char *tenant, const char *doc, size_t len, int64_t now, problem_t *p)
{
    notify_sub_t *s = notify_csub_build(tenant, doc, len, now, p);
    if (s && !reg_csub_check(s, p)) {
        notify_sub_unref(s);
        return NULL;
    }
    return s;
}

static bool tenant_known(const char *tenant)
{
    return reg_csub_tenant_known(tenant) || reg_tenant_known(tenant);
}

static const ops_sub_kind_t k_csub = {
    .kind = STORE_OBJ_CSOURCE_SUBSCRIPTION, .what = "context source subscription", .build = build,
    .add = reg_csub_add, .replace = reg_csub_replace, .remove = reg_csub_remove, .find = reg_csub_find,
    .list = reg_csub_list, .tenant_known = tenant_known,
};

bool ops_csub_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p)
{
    return ops_subk_create(&k_csub, rq, body, id, p);
}

notify_sub_t *ops_csub_retrieve(const ops_req_t *rq, const char *id, problem_t *p)
{
    return ops_subk_retrieve(&k_csub, rq, id, p);
}

bool ops_csub_update(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p)
{
    return ops_subk_update(&k_csub, rq, id, body, p);
}

bool ops_csub_delete(const ops_req_t *rq, const char *id, problem_t *p)
{
    return ops_subk_delete(&k_csub, rq, id, p);
}

notify_sub_t **ops_csub_query(const ops_req_t *rq, size_t offset, size_t limit, size_t *n, size_t *total,
                              problem_t *p)
{
    return ops_subk_query(&k_csub, rq, offset, limit, n, total, p);
}

void ops_csub_sync(store_t *s)
{
    ops_subk_sync(&k_csub, s);
}

void ops_csub_resync(store_t *s, const char *tenant, const char *id)
{
    ops_subk_resync(&k_csub, s, tenant, id);
}

size_t ops_csub_restore(store_t *s)
{
    return ops_subk_restore(&k_csub, s);
}
