/*
 * registrations.c - the context source registration operations (5.9.2
 * Register, 5.9.3 Update, 5.9.4 Delete, 5.10.1 Retrieve, 5.10.2 Query
 * Context Source Registrations).
 *
 * The document is validated and parsed by reg/ (one parser for create,
 * update and restart) and kept in the store (store_obj_*, kind
 * STORE_OBJ_REGISTRATION), so every backend and corDB on disk keep it; reg/'s
 * registry is the parsed index that discovery and forwarding read, rebuilt
 * from the store at start (ops_reg_restore). Writes are serialised (g_write:
 * they are rare) so the store and the registry always agree, and the rules
 * that compare a registration with others and with the entities held here
 * (exclusive, redirect: 5.9.2.4) are checked under it. An expired
 * registration is removed at the next registration operation, and never
 * matched or listed meanwhile.
 */
#include "ops.h"

#include "../reg/reg.h"

#include <pthread.h>
#include <string.h>

static pthread_mutex_t g_write = PTHREAD_MUTEX_INITIALIZER;

extern const char *const reg_read_only_members[];
static const model_doc_kind_t k_reg = {"ContextSourceRegistration", "ContextSourceRegistration", "registration",
                                       reg_read_only_members};

/* Removes the expired registrations (store and registry); under g_write. */
static void sweep_locked(store_t *s, int64_t now)
{
    arena_t     *a = arena_new(1024);
    const char **tenants, **ids;
    size_t       n = reg_expired(now, a, &tenants, &ids);
    for (size_t i = 0; i < n; i++) {
        problem_t q = {0};
        reg_t    *old = reg_find(tenants[i], ids[i], 0);
        store_obj_delete(s, tenants[i], STORE_OBJ_REGISTRATION, ids[i], &q);
        reg_remove(tenants[i], ids[i], &q);
        if (old) reg_csub_changed(old, NULL);
        reg_unref(old);
        LOG_I("registration '%s' of tenant '%s' expired: removed", ids[i], tenants[i]);
    }
    arena_free(a);
}

static void sweep(store_t *s)
{
    pthread_mutex_lock(&g_write);
    sweep_locked(s, cr_now_us());
    pthread_mutex_unlock(&g_write);
}

static bool tenant_known(const ops_req_t *rq, problem_t *p)
{
    if (!rq->tenant || !*rq->tenant || store_tenant_exists(rq->store, rq->tenant)) return true;
    if (reg_tenant_known(rq->tenant)) return true;
    return problem_set(p, PB_NONEXISTENT_TENANT, "tenant '%s' does not exist", rq->tenant);
}

/* An expanded name as a type selection of one type. */
static typesel_t *one_type(const ops_req_t *rq, const reg_entity_info_t *e, problem_t *p)
{
    sbuf_t sb;
    sb_init(&sb, rq->arena, 128);
    for (size_t i = 0; i < e->n_types; i++) sb_printf(&sb, "%s%s", i ? "|" : "", e->types[i]);
    return typesel_parse(rq->arena, sb.p, ld_core(), p);
}

/* 5.9.2.4 / 5.9.3.4: an exclusive registration conflicts with an entity held
 * here that has one of its attributes; a redirect one with any entity held
 * here that it matches. */
static bool local_conflict(const ops_req_t *rq, const reg_t *r, problem_t *p)
{
    if (reg_mode(r) != REG_EXCLUSIVE && reg_mode(r) != REG_REDIRECT) return true;
    if (rq->tenant && *rq->tenant && !store_tenant_exists(rq->store, rq->tenant)) return true;
    for (size_t i = 0; i < reg_info_count(r); i++) {
        const reg_info_t *in = reg_info_at(r, i);
        entity_filter_t   f = {0};
        entity_selector_t *sel = arena_calloc(rq->arena, (in->n_entities + 1) * sizeof *sel);
        for (size_t j = 0; j < in->n_entities; j++) {
            sel[j].id = in->entities[j].id;
            sel[j].id_pattern = in->entities[j].pattern;
            if (!(sel[j].types = one_type(rq, &in->entities[j], p))) return false;
        }
        f.sel = sel;
        f.n_sel = in->n_entities;
        const char **attrs = arena_alloc(rq->arena, (in->n_props + in->n_rels + 1) * sizeof *attrs);
        if (in->n_props) memcpy(attrs, in->props, in->n_props * sizeof *attrs);
        if (in->n_rels) memcpy(attrs + in->n_props, in->rels, in->n_rels * sizeof *attrs);
        f.attrs = attrs;
        f.n_attrs = in->n_props + in->n_rels;
        store_page_t pg = {0};
        problem_t    q = {0};
        if (!store_query(rq->store, rq->tenant, &f, 0, 1, false, rq->arena, &pg, &q)) continue;
        bool held = pg.n > 0;
        const char *eid = held ? arena_strdup(rq->arena, pg.items[0]->id) : NULL;
        store_page_release(&pg);
        if (held)
            return problem_set(p, PB_CONFLICT, "entity '%s' is held by this broker and matches this %s "
                               "registration (5.9.2.4)", eid, reg_mode(r) == REG_EXCLUSIVE ? "exclusive" : "redirect");
    }
    return true;
}

static void sync_put(void *ud, const char *tenant, const char *id, const char *json, size_t len);
static void sync_gone(void *ud, const char *tenant, const char *id);

/* Under g_write: the registry's entry for id made what the store holds;
 * told: the context source subscriptions hear of the change. */
static void resync_locked(store_t *s, const char *tenant, const char *id, bool told)
{
    arena_t  *a = arena_new(4096);
    problem_t p = {0};
    size_t    len;
    reg_t    *before = told ? reg_find(tenant, id, 0) : NULL;
    char     *json = store_obj_get(s, tenant, STORE_OBJ_REGISTRATION, id, a, &len, &p);
    if (json) sync_put(NULL, tenant, id, json, len);
    else sync_gone(NULL, tenant, id);
    if (told) {
        reg_t *after = reg_find(tenant, id, 0);
        if (before || after) reg_csub_changed(before, after);
        reg_unref(after);
        reg_unref(before);
    }
    arena_free(a);
}

void ops_reg_resync(store_t *s, const char *tenant, const char *id)
{
    pthread_mutex_lock(&g_write);
    resync_locked(s, tenant, id, true);
    pthread_mutex_unlock(&g_write);
}

bool ops_reg_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p)
{
    if (!json_is_object(body)) return problem_set(p, PB_BAD_REQUEST_DATA, "a registration must be a JSON object");
    const json_t *given = json_get(body, "id");
    if (given && (!json_is_string(given) || !model_valid_uri(given->str)))
        return problem_set(p, PB_BAD_REQUEST_DATA, "id must be a URI");
    int64_t now = cr_now_us();
    size_t  len;
    char   *doc = model_doc_new(rq->arena, body, rq->ctx, &k_reg, now, &len);
    reg_t  *r = reg_build(rq->tenant, doc, len, now, p);
    if (!r) return false;
    *id = arena_strdup(rq->arena, reg_id(r));
    pthread_mutex_lock(&g_write);
    sweep_locked(rq->store, now);
    bool ok = reg_conflict(r, p) && local_conflict(rq, r, p) &&
              store_obj_put(rq->store, rq->tenant, STORE_OBJ_REGISTRATION, *id, doc, len, true, p);
    if (ok && !(ok = reg_add(r, p))) {
        problem_t q = {0};
        store_obj_delete(rq->store, rq->tenant, STORE_OBJ_REGISTRATION, *id, &q);
    }
    if (ok) reg_csub_changed(NULL, r);
    pthread_mutex_unlock(&g_write);
    reg_unref(r);
    return ok;
}

reg_t *ops_reg_retrieve(const ops_req_t *rq, const char *id, problem_t *p)
{
    if (!ops_check_id(id, p)) return NULL;
    sweep(rq->store);
    reg_t *r = reg_find(rq->tenant, id, cr_now_us());
    if (!r && tenant_known(rq, p)) problem_set(p, PB_RESOURCE_NOT_FOUND, "no registration '%s'", id);
    return r;
}

bool ops_reg_update(const ops_req_t *rq, const char *id, const json_t *body, problem_t *p)
{
    if (!json_is_object(body)) return problem_set(p, PB_BAD_REQUEST_DATA, "the update must be a JSON object");
    if (!body->len || (body->len == 1 && json_get(body, "@context")))
        return problem_set(p, PB_BAD_REQUEST_DATA, "the update names no member of the registration");
    reg_t *old = ops_reg_retrieve(rq, id, p);
    if (!old) return false;
    size_t      stored_len, len;
    const char *stored = reg_doc(old, &stored_len);
    int64_t     now = cr_now_us();
    char       *doc = model_doc_patch(rq->arena, stored, stored_len, body, &k_reg, now, &len, p);
    reg_t      *r = doc ? reg_build(rq->tenant, doc, len, now, p) : NULL;
    if (!r) {
        reg_unref(old);
        return false;
    }
    pthread_mutex_lock(&g_write);
    bool ok = reg_conflict(r, p) && local_conflict(rq, r, p) && reg_replace(r, p);
    if (ok && !(ok = store_obj_put(rq->store, rq->tenant, STORE_OBJ_REGISTRATION, reg_id(r), doc, len, false, p)))
        resync_locked(rq->store, rq->tenant, reg_id(r), false);     /* the store kept the old one */
    if (ok) reg_csub_changed(old, r);
    pthread_mutex_unlock(&g_write);
    reg_unref(old);
    reg_unref(r);
    return ok;
}

bool ops_reg_delete(const ops_req_t *rq, const char *id, problem_t *p)
{
    if (!ops_check_id(id, p)) return false;
    pthread_mutex_lock(&g_write);
    sweep_locked(rq->store, cr_now_us());
    reg_t *old = reg_find(rq->tenant, id, 0);
    bool   ok = store_obj_delete(rq->store, rq->tenant, STORE_OBJ_REGISTRATION, id, p);
    if (ok) reg_remove(rq->tenant, id, p);
    if (ok && old) reg_csub_changed(old, NULL);
    pthread_mutex_unlock(&g_write);
    reg_unref(old);
    return ok;
}

/* ------------------------------------------------------------ query (5.10.2) */

_Static_assert((int)OPS_TIMEREL_BEFORE == REG_TIMEREL_BEFORE && (int)OPS_TIMEREL_AFTER == REG_TIMEREL_AFTER &&
                   (int)OPS_TIMEREL_BETWEEN == REG_TIMEREL_BETWEEN, "one numbering of timerel");

reg_t **ops_reg_query(const ops_req_t *rq, const ops_reg_query_t *q, size_t offset, size_t limit, size_t *n,
                      size_t *total, uint64_t **masks, problem_t *p)
{
    if (limit > (size_t)cr_config.max_limit) {
        problem_set(p, PB_TOO_MANY_RESULTS, "limit %zu is above the maximum page size %d (--maxLimit)", limit,
                    cr_config.max_limit);
        return NULL;
    }
    if (!tenant_known(rq, p)) return NULL;
    sweep(rq->store);
    reg_query_t rqy = {.types = q->types, .ids = q->ids, .n_ids = q->n_ids, .id_pattern = q->id_pattern,
                       .attrs = q->attrs, .n_attrs = q->n_attrs, .temporal = q->timerel != OPS_TIMEREL_NONE};
    size_t    m;
    uint64_t *mk;
    filter_regex_reset();
    reg_t **v = reg_match(rq->tenant, &rqy, cr_now_us(), rq->arena, &m, &mk);
    size_t  k = 0, seen = 0;
    for (size_t i = 0; i < m; i++) {
        const cr_entity_t *e = reg_as_entity(v[i]);
        bool keep = (!q->csf || q_match(q->csf, e)) && (!q->scope || scopeq_match(q->scope, e)) &&
                    (!q->geo || geoq_match(q->geo, e)) && (q->timerel == OPS_TIMEREL_NONE ||
                     reg_time_match(v[i], (int)q->timerel, q->time_at, q->end_time_at, q->time_observed));
        if (keep && seen++ >= offset && k < limit) {
            v[k] = v[i];
            mk[k++] = mk[i];
        } else reg_unref(v[i]);
    }
    if (filter_regex_overflow(p)) {
        for (size_t i = 0; i < k; i++) reg_unref(v[i]);
        return NULL;
    }
    *n = k;
    *total = seen;
    if (masks) *masks = mk;
    return v;
}

/* ------------------------------------------------------------ restore */

static void restore_one(void *ud, const char *tenant, const char *id, const char *json, size_t len)
{
    size_t   *n = ud;
    problem_t p = {0};
    reg_t    *r = reg_build(tenant, json, len, 0, &p);
    if (!r || !reg_add(r, &p)) LOG_E("registration '%s' of tenant '%s' is not restored: %s", id, tenant, p.detail);
    else (*n)++;
    reg_unref(r);
}

/* Registrations another process wrote (store_obj_sync), under g_write. */
static void sync_put(void *ud, const char *tenant, const char *id, const char *json, size_t len)
{
    problem_t p = {0};
    reg_t    *r = reg_build(tenant, json, len, 0, &p), *old;
    bool      ok = false;
    (void)ud;
    if (r) {
        old = reg_find(tenant, id, 0);
        ok = old ? reg_replace(r, &p) : reg_add(r, &p);
        if (old) reg_unref(old);
    }
    if (!ok) LOG_E("registration '%s' of tenant '%s' written by another process is not loaded: %s", id, tenant,
                   p.detail);
    reg_unref(r);
}

static void sync_gone(void *ud, const char *tenant, const char *id)
{
    problem_t p = {0};
    (void)ud;
    reg_remove(tenant, id, &p);
}

void ops_reg_sync(store_t *s)
{
    pthread_mutex_lock(&g_write);
    store_obj_sync(s, STORE_OBJ_REGISTRATION, sync_put, sync_gone, NULL);
    pthread_mutex_unlock(&g_write);
}

size_t ops_reg_restore(store_t *s)
{
    size_t n = 0;
    store_obj_foreach(s, STORE_OBJ_REGISTRATION, restore_one, &n);
    sweep(s);
    return n;
}
