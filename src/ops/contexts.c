/*
 * contexts.c - the hosted @contexts of 5.13.2 (Add) and 5.13.5 (Delete),
 * kept beside the entities.
 *
 * A hosted context is a stored object (store_obj_*, kind STORE_OBJ_CONTEXT)
 * of the default tenant, so that every backend and corDB on disk keep it over
 * a restart, and is registered in ld/ (ld_hosted_put), which serves it and
 * resolves its URL without a download. The object holds {"@context": value,
 * "createdAt": ms}; ld/ gets {"@context": value}, what GET serves (5.13.2.3:
 * nothing outside @context is kept). Writes are serialised (g_write: they are
 * rare), so that the store and ld/ always agree: ld/ first (it checks the
 * bounds), then the store, and ld/ undone if the store refuses.
 */
#include "ops.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_write = PTHREAD_MUTEX_INITIALIZER;

/* {"@context": value} into a. */
static const char *served_text(arena_t *a, const json_t *value, size_t *len)
{
    sbuf_t sb;
    sb_init(&sb, a, 256);
    sb_adds(&sb, "{\"@context\":");
    json_render(&sb, value);
    sb_addc(&sb, '}');
    *len = sb.len;
    return sb.p;
}

bool ops_ctx_add(const ops_req_t *rq, const json_t *value, const char **id, problem_t *p)
{
    char   nid[17];
    size_t slen;
    const char *served = served_text(rq->arena, value, &slen);
    int64_t     now = cr_now_ms();

    sbuf_t obj;
    sb_init(&obj, rq->arena, slen + 48);
    sb_add(&obj, served, slen - 1);                 /* without the closing brace */
    sb_printf(&obj, ",\"createdAt\":%lld}", (long long)now);

    pthread_mutex_lock(&g_write);
    ld_hosted_new_id(nid);
    bool ok = ld_hosted_put(nid, served, slen, now, p);
    if (ok && !(ok = store_obj_put(rq->store, "", STORE_OBJ_CONTEXT, nid, obj.p, obj.len, true, p)))
        ld_hosted_remove(nid);
    pthread_mutex_unlock(&g_write);
    if (ok)
        *id = arena_strdup(rq->arena, nid);
    return ok;
}

bool ops_ctx_delete(const ops_req_t *rq, const char *id, problem_t *p)
{
    pthread_mutex_lock(&g_write);
    bool ok = store_obj_delete(rq->store, "", STORE_OBJ_CONTEXT, id, p);
    if (ok)
        ld_hosted_remove(id);
    pthread_mutex_unlock(&g_write);
    if (!ok && p->kind == PB_NONEXISTENT_TENANT)
        problem_set(p, PB_RESOURCE_NOT_FOUND, "no @context with id %s", id);
    return ok;
}

/* The stored object json of hosted context id into ld/ (false: logged with why). */
static bool load(const char *tenant, const char *id, const char *json, size_t len, const char *what)
{
    char      err[128];
    problem_t p = {0};
    arena_t  *a = arena_new(len * 2 + 512);
    json_t   *doc = *tenant ? NULL : json_parse_copy(a, json, len, &(json_limits_t){0}, err, sizeof err);
    const json_t *value = doc ? json_get(doc, "@context") : NULL;
    const json_t *created = doc ? json_get(doc, "createdAt") : NULL;
    bool          ok = false;
    if (!value) {
        LOG_E("hosted @context '%s' is not %s: %s", id, what, *tenant ? "not of the default tenant" : "no @context");
    } else {
        size_t      slen;
        const char *served = served_text(a, value, &slen);
        int64_t     at = created && created->type == JSON_NUMBER ? (int64_t)json_number(created) : cr_now_ms();
        if (!(ok = ld_hosted_put(id, served, slen, at, &p))) LOG_E("hosted @context '%s' is not %s: %s", id, what, p.detail);
    }
    arena_free(a);
    return ok;
}

static void restore_one(void *ud, const char *tenant, const char *id, const char *json, size_t len)
{
    size_t *n = ud;
    if (load(tenant, id, json, len, "restored")) (*n)++;
}

/* A write the store undid: ld/ serves what the store holds for id again. */
void ops_ctx_resync(store_t *s, const char *id)
{
    arena_t  *a = arena_new(4096);
    problem_t p = {0};
    size_t    len;
    pthread_mutex_lock(&g_write);
    char *json = store_obj_get(s, "", STORE_OBJ_CONTEXT, id, a, &len, &p);
    ld_hosted_remove(id);
    if (json) load("", id, json, len, "put back");
    pthread_mutex_unlock(&g_write);
    arena_free(a);
}

size_t ops_ctx_restore(store_t *s)
{
    size_t n = 0;
    store_obj_foreach(s, STORE_OBJ_CONTEXT, restore_one, &n);
    return n;
}
