/*
 * entities.c - the operations on one entity by id: create (5.6.1),
 * retrieve (5.7.1), delete (5.6.6), merge (5.6.17), replace (5.6.18), and
 * the validators and the ?type= precondition they share with attrs.c (a
 * type selection handed to the store, which checks it in its atomic step).
 *
 * Each operation validates and parses the body into a draft (model/) and
 * then calls the store once; nothing is written before all is validated.
 */
#include "ops.h"

#include <string.h>

bool ops_check_id(const char *id, problem_t *p)
{
    if (!id || !model_valid_uri(id))
        return problem_set(p, PB_BAD_REQUEST_DATA, "'%.200s' is not a valid entity id (a URI of at most %d bytes)",
                           id ? id : "", MODEL_MAX_URI_LEN);
    return true;
}

/* id, type and scope are members of the entity, not attributes (5.6.4.4, 5.6.19.4). */
bool ops_check_attr_name(const char *name, bool writing, problem_t *p)
{
    static const char *reserved[] = {"id", "@id", "type", "@type", "scope", "@context", "createdAt", "modifiedAt"};
    for (size_t i = 0; writing && i < CR_ARRAY_LEN(reserved); i++)
        if (!strcmp(name, reserved[i]))
            return problem_set(p, PB_BAD_REQUEST_DATA, "'%s' is not an attribute and cannot be changed here", name);
    if (!model_valid_name(name) && !strchr(name, ':'))
        return problem_set(p, PB_BAD_REQUEST_DATA, "invalid attribute name '%s'", name);
    return true;
}

bool ops_if_type(const ops_req_t *rq, const char *type, const typesel_t **ts, problem_t *p)
{
    *ts = NULL;
    if (!type) return true;
    *ts = typesel_parse(rq->arena, type, rq->ctx, p);
    return *ts != NULL;
}

bool ops_entity_create(const ops_req_t *rq, const json_t *body, const char **id, problem_t *p)
{
    cr_entity_t *e = entity_parse(rq->arena, body, rq->ctx, EP_CREATE, cr_now_us(), p);
    if (!e) return false;
    if (!ops_admit(rq, 1, p)) return false;
    if (!ops_admitted(rq, 1, store_create(rq->store, rq->tenant, e, p))) return false;
    *id = e->id;
    return true;
}

static bool listed(const char *const *v, size_t n, const char *m)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == m || !strcmp(v[i], m))
            return true;
    return false;
}

/* Every member of e is among the names omitted. */
static bool omits_all(const cr_entity_t *e, const char *const *omit, size_t n)
{
    if (!listed(omit, n, "@id") || !listed(omit, n, "@type") || (e->scope && !listed(omit, n, MN.scope)))
        return false;
    for (size_t i = 0; i < e->n_attrs; i++)
        if (!listed(omit, n, e->attrs[i].name))
            return false;
    return true;
}

/* The entity must match the type selection and have one of the attrs. */
static bool retrieve_matches(const ops_req_t *rq, const cr_entity_t *e, const ops_retrieve_t *o, problem_t *p)
{
    if (o->type) {
        typesel_t *ts = typesel_parse(rq->arena, o->type, rq->ctx, p);
        if (!ts) return false;
        if (!typesel_match(ts, e))
            return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has none of the types %s", e->id, o->type);
    }
    if (o->n_attrs) {   /* Table 6.5.3.1-1: none of the attrs present -> 404 */
        bool any = false;
        for (size_t i = 0; i < o->n_attrs && !any; i++) any = entity_attr_any(e, o->attrs[i]) != NULL;
        if (!any) return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has none of the attributes asked for", e->id);
    }
    if (o->n_pick) {    /* pick is attrs' successor: nothing left of the entity -> 404 (5.7.1.4) */
        bool any = false;
        for (size_t i = 0; i < o->n_pick && !any; i++) {
            const char *m = o->pick[i];
            any = !strcmp(m, "@id") || !strcmp(m, "@type") || (m == MN.scope ? e->scope != NULL
                                                                             : entity_attr_any(e, m) != NULL);
        }
        if (!any) return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has none of the members picked", e->id);
    }
    if (o->n_omit && omits_all(e, o->omit, o->n_omit))   /* omit leaves nothing of it: as pick (4.21) */
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "omit leaves nothing of entity %s", e->id);
    return true;
}

cr_entity_t *ops_entity_retrieve(const ops_req_t *rq, const char *id, const ops_retrieve_t *o, problem_t *p)
{
    if (!ops_check_id(id, p)) return NULL;
    cr_entity_t *e = store_get(rq->store, rq->tenant, id, p);
    if (!e) return NULL;
    if (!retrieve_matches(rq, e, o, p)) {
        entity_unref(e);
        return NULL;
    }
    return e;
}

bool ops_entity_delete(const ops_req_t *rq, const char *id, const char *type, problem_t *p)
{
    const typesel_t *ts;
    if (!ops_check_id(id, p) || !ops_if_type(rq, type, &ts, p)) return false;
    if (!ops_admit(rq, 1, p)) return false;
    return ops_admitted(rq, 1, store_delete_if(rq->store, rq->tenant, id, ts, p));
}

/* The body of merge/replace: id and type, when given, must agree with the
 * id of the operation (5.6.17, 5.6.18). */
static cr_entity_t *entity_fragment(const ops_req_t *rq, const char *id, const json_t *body, unsigned flags,
                                    problem_t *p)
{
    if (!ops_check_id(id, p)) return NULL;
    const json_t *bid = json_get(body, "id");
    if (!bid) bid = json_get(body, "@id");
    if (bid && (!json_is_string(bid) || strcmp(bid->str, id))) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the id in the body does not match the entity id %s in the URL", id);
        return NULL;
    }
    cr_entity_t *e = entity_parse(rq->arena, body, rq->ctx, flags | EP_FRAGMENT, cr_now_us(), p);
    if (!e) return NULL;
    e->id = id;
    return e;
}

bool ops_entity_merge(const ops_req_t *rq, const char *id, const json_t *body, const ops_merge_t *o, problem_t *p)
{
    op_args_t    args = {.observed_at = o->observed_at};
    cr_entity_t *patch = entity_fragment(rq, id, body, EP_MERGE, p);
    if (!patch || !ops_if_type(rq, o->type, &args.if_type, p)) return false;
    entity_patch_simplified(rq->arena, patch, o->key_values, o->lang);
    if (!ops_admit(rq, 1, p)) return false;
    return ops_admitted(rq, 1, store_modify(rq->store, rq->tenant, id, OP_MERGE_ENTITY, patch, &args, NULL, rq->arena, p));
}

bool ops_entity_replace(const ops_req_t *rq, const char *id, const json_t *body, const char *type, problem_t *p)
{
    op_args_t    args = {0};
    cr_entity_t *patch = entity_fragment(rq, id, body, 0, p);
    if (!patch) return false;
    if (patch->n_types == 0) return problem_set(p, PB_BAD_REQUEST_DATA, "replacing an entity needs its type (5.6.18)");
    if (!ops_if_type(rq, type, &args.if_type, p)) return false;
    if (!ops_admit(rq, 1, p)) return false;
    return ops_admitted(rq, 1, store_modify(rq->store, rq->tenant, id, OP_REPLACE_ENTITY, patch, &args, NULL, rq->arena, p));
}

void ops_stats(store_t *s, store_stats_t *st)
{
    store_get_stats(s, st);
}

bool ops_payload_check(const ops_req_t *rq, const char *id, const json_t *body, unsigned flags, bool need_type,
                       problem_t *p)
{
    if (!json_is_object(body)) return problem_set(p, PB_BAD_REQUEST_DATA, "the body must be a JSON object");
    if (flags & EP_CREATE) return entity_parse(rq->arena, body, rq->ctx, flags, cr_now_us(), p) != NULL;
    cr_entity_t *e = entity_fragment(rq, id, body, flags & ~(unsigned)EP_FRAGMENT, p);
    if (!e) return false;
    if (need_type && !e->n_types) return problem_set(p, PB_BAD_REQUEST_DATA, "replacing an entity needs its type (5.6.18)");
    return true;
}
