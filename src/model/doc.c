/*
 * doc.c - the stored document of a resource that is not an entity
 * (registrations now; subscriptions keep their own copy in notify/ until
 * that module moves to this one): the client's JSON with "id" (generated
 * when absent), "type", the request's "@context" and createdAt/modifiedAt,
 * and its update (5.5.8: the patch's members replace the stored ones, a
 * null removes one, id and type stay). One text serves storage, the rebuild
 * at start and rendering, so what is kept is exactly what was accepted.
 */
#include "model.h"

#include <stdatomic.h>
#include <string.h>

static bool doc_read_only(const char *k, const char *const *ro)
{
    if (!strcmp(k, "createdAt") || !strcmp(k, "modifiedAt")) return true;
    for (; ro && *ro; ro++)
        if (!strcmp(k, *ro)) return true;
    return false;
}

static void doc_time(arena_t *a, json_t *o, const char *key, int64_t us)
{
    char buf[32];
    cr_datetime_format(us, buf);
    json_add(o, key, json_new_stringn(a, buf, strlen(buf)));
}

/* urn:ngsi-ld:<kind>:<uuid v4 form>, from the keyed hash of the time and a counter */
const char *model_doc_new_id(arena_t *a, const char *kind, int64_t now)
{
    static atomic_uint_fast64_t seq;
    uint64_t r1 = cr_hash(&now, sizeof now), k = atomic_fetch_add(&seq, 1), r2 = cr_hash(&k, sizeof k) ^ r1;
    return arena_printf(a, "urn:ngsi-ld:%s:%08x-%04x-4%03x-%04x-%012llx", kind, (unsigned)(r1 >> 32),
                        (unsigned)(r1 >> 16) & 0xffff, (unsigned)r1 & 0xfff, (unsigned)(0x8000 | (r2 & 0x3fff)),
                        (unsigned long long)(r2 >> 16) & 0xffffffffffffULL);
}

char *model_doc_new(arena_t *a, const json_t *body, const ld_context_t *ctx, const model_doc_kind_t *k,
                    int64_t now, size_t *len)
{
    json_t       *o = json_new(a, JSON_OBJECT);
    const json_t *id = json_get(body, "id"), *type = json_get(body, "type");
    json_add(o, "id", id ? json_clone(a, id) : json_new_string(a, model_doc_new_id(a, k->id_kind, now)));
    json_add(o, "type", type ? json_clone(a, type) : json_new_string(a, k->type));
    for (const json_t *m = body->child; m; m = m->next)
        if (strcmp(m->key, "id") && strcmp(m->key, "type") && strcmp(m->key, "@context") &&
            !doc_read_only(m->key, k->read_only))
            json_add(o, m->key, json_clone(a, m));
    const char *cv = ld_context_value_json(ctx);
    char        err[128];
    json_t     *c = json_parse_copy(a, cv, strlen(cv), &(json_limits_t){0}, err, sizeof err);
    if (c) json_add(o, "@context", c);
    doc_time(a, o, "createdAt", now);
    doc_time(a, o, "modifiedAt", now);
    sbuf_t sb;
    sb_init(&sb, a, 512);
    json_render(&sb, o);
    *len = sb.len;
    return sb.p;
}

char *model_doc_patch(arena_t *a, const char *stored, size_t stored_len, const json_t *patch,
                      const model_doc_kind_t *k, int64_t now, size_t *len, problem_t *p)
{
    char    err[128];
    json_t *o = json_parse_copy(a, stored, stored_len, &(json_limits_t){0}, err, sizeof err);
    if (!o) {
        problem_set(p, PB_INTERNAL_ERROR, "the stored %s is not JSON: %s", k->what, err);
        return NULL;
    }
    for (const json_t *m = patch->child; m; m = m->next) {
        if (!strcmp(m->key, "@context") || doc_read_only(m->key, k->read_only)) continue;
        if (!strcmp(m->key, "id") || !strcmp(m->key, "type")) {
            const json_t *old = json_get(o, m->key);
            if (!json_is_string(m) || !old || strcmp(old->str, m->str)) {
                problem_set(p, PB_BAD_REQUEST_DATA, "the %s of a %s cannot be changed", m->key, k->what);
                return NULL;
            }
            continue;
        }
        json_remove(o, m->key);
        if (m->type != JSON_NULL) json_add(o, m->key, json_clone(a, m));   /* null removes the member */
    }
    json_remove(o, "modifiedAt");
    doc_time(a, o, "modifiedAt", now);
    sbuf_t sb;
    sb_init(&sb, a, stored_len + 256);
    json_render(&sb, o);
    *len = sb.len;
    return sb.p;
}
