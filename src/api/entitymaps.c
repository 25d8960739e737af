/*
 * entitymaps.c - the EntityMap resource (6.32, 5.14.1-5.14.3): GET, PATCH
 * and DELETE /entityMaps/{entityMapId} over the maps fwd/fwd_map.c holds, and
 * the EntityMap as an answer (5.2.39), shared with Create EntityMap for
 * Query Entities (GET/POST /entityMaps, 6.34, in query.c where the query is);
 * the entity map parameters of a query or retrieve, and Retrieve Entity
 * through a map (5.7.1.4, called by entities.c).
 *
 * A map is the tenant's that made it. PATCH changes expiresAt only (5.5.14:
 * other components may only update the expiry); the output-only members
 * (entityMap, linkedMaps) are ignored, as 5.14.2.4 says; anything else is a
 * BadRequestData.
 */
#include "api.h"

#include "../fwd/fwd.h"
#include "../history/history.h"

#include <string.h>

#define MAP_MAX_LIFETIME_US ((int64_t)24 * 3600 * 1000000)

void api_entity_map_answer(request_t *r, const ld_context_t *ctx, const fwd_map_page_t *mp, int status)
{
    bool          ld = req_accept_best(r, ACC_JSON | ACC_LDJSON) == ACC_LDJSON;
    json_writer_t w;
    char          at[32];
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    if (ld) {
        jw_key(&w, "@context");
        jw_string(&w, ld_context_link(ctx));
    }
    jw_key(&w, "id");
    jw_string(&w, mp->id);
    jw_key(&w, "type");
    jw_string(&w, "EntityMap");
    cr_datetime_format(mp->expires_at, at);
    jw_key(&w, "expiresAt");
    jw_string(&w, at);
    jw_key(&w, "entityMap");
    jw_object_begin(&w);
    for (size_t i = 0; i < mp->n; i++) {
        jw_key(&w, mp->ids[i]);
        jw_array_begin(&w);
        if (mp->origins[i] & FWD_MAP_HERE) jw_string(&w, "@none");
        for (size_t k = 0; k < mp->n_regs; k++)
            if (mp->origins[i] >> (k + 1) & 1) jw_string(&w, mp->reg_ids[k]);
        jw_array_end(&w);
    }
    jw_object_end(&w);
    jw_key(&w, "linkedMaps");
    jw_object_begin(&w);
    for (size_t k = 0; k < mp->n_regs; k++)
        if (mp->linked[k]) {
            jw_key(&w, mp->reg_ids[k]);
            jw_string(&w, mp->linked[k]);
        }
    jw_object_end(&w);
    jw_object_end(&w);
    if (!ld) {
        reply_header(r, "Link", arena_printf(r->arena, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; "
                                             "type=\"application/ld+json\"", ld_context_link(ctx)));
    }
    reply_header(r, "NGSILD-EntityMap", mp->id);
    reply_body(r, status, ld ? "application/ld+json" : "application/json");
}

/* The sources' own maps of mp (linkedMaps) follow (5.14.2, 5.14.3): PATCHed to expire at `at` too, or
 * DELETEd. What fails there changes nothing here: the source's map expires by itself. */
static void linked(request_t *r, const fwd_map_page_t *mp, reg_op_t op, int64_t at)
{
    bool any = false;
    for (size_t k = 0; k < mp->n_regs && !any; k++) any = mp->linked[k] != NULL;
    if (!any) return;
    const ld_context_t *ctx = ld_core();
    fwd_in_t            in;
    char                t[32];
    api_fwd_in(r, ctx, &in);
    cr_datetime_format(at, t);
    fwd_map_linked(&in, mp, op, op == REG_OP_UPDATE_ENTITY_MAP ? arena_printf(r->arena, "{\"expiresAt\":\"%s\"}", t)
                                                               : NULL);
}

/* The map the path names, or a 400 / 404 in p. */
static bool the_map(request_t *r, fwd_map_page_t *mp, problem_t *p)
{
    const char *id = r->pathv[0];
    if (!model_valid_uri(id))
        return problem_set(p, PB_BAD_REQUEST_DATA, "'%.200s' is not a URI: no EntityMap id (5.14.1.4)", id);
    if (!fwd_map_page(r->tenant, id, 0, SIZE_MAX, r->arena, mp))
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no EntityMap '%.200s' here (it may have expired)", id);
    return true;
}

void api_entity_map_get(request_t *r)
{
    problem_t      p = {0};
    fwd_map_page_t mp;
    if (!api_no_unknown_params(r, &p)) goto fail;
    const ld_context_t *ctx = api_context(r, NULL, &p);
    if (!ctx) goto fail;
    if (!the_map(r, &mp, &p)) goto fail;
    api_entity_map_answer(r, ctx, &mp, 200);
    return;
fail:
    reply_problem(r, &p);
}

void api_entity_map_update(request_t *r)
{
    problem_t      p = {0};
    fwd_map_page_t mp;
    int64_t        at = 0;
    bool           any = false;
    if (!api_no_unknown_params(r, &p)) goto fail;
    json_t *body = api_body(r, false, &p);
    if (!body) goto fail;
    json_foreach(m, body) {
        const char *k = m->key;
        if (!strcmp(k, "expiresAt")) {
            if (!json_is_string(m) || !cr_datetime_parse(m->str, &at)) {
                problem_set(&p, PB_BAD_REQUEST_DATA, "expiresAt must be a DateTime (5.2.39, 4.6.3)");
                goto fail;
            }
            any = true;
        } else if (!strcmp(k, "type")) {
            if (!json_is_string(m) || strcmp(m->str, "EntityMap")) {
                problem_set(&p, PB_BAD_REQUEST_DATA, "type must be EntityMap (5.2.39)");
                goto fail;
            }
        } else if (!strcmp(k, "id")) {
            if (!json_is_string(m) || strcmp(m->str, r->pathv[0])) {
                problem_set(&p, PB_BAD_REQUEST_DATA, "id must be the EntityMap's own (%.200s)", r->pathv[0]);
                goto fail;
            }
        } else if (strcmp(k, "entityMap") && strcmp(k, "linkedMaps") && strcmp(k, "@context")) {
            /* output-only members are ignored (5.14.2.4); others are not EntityMap members */
            problem_set(&p, PB_BAD_REQUEST_DATA, "member '%.100s' is not one of an EntityMap (5.2.39)", k);
            goto fail;
        }
    }
    if (!any) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "an EntityMap fragment updates expiresAt; this one has none (5.14.2)");
        goto fail;
    }
    if (!the_map(r, &mp, &p)) goto fail;
    if (at > cr_now_us() + MAP_MAX_LIFETIME_US) at = cr_now_us() + MAP_MAX_LIFETIME_US;
    if (!fwd_map_set_expiry(r->tenant, mp.id, at)) {
        problem_set(&p, PB_RESOURCE_NOT_FOUND, "no EntityMap '%.200s' here (it may have expired)", r->pathv[0]);
        goto fail;
    }
    linked(r, &mp, REG_OP_UPDATE_ENTITY_MAP, at);
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

void api_entity_map_delete(request_t *r)
{
    problem_t p = {0};
    if (!api_no_unknown_params(r, &p)) goto fail;
    if (!model_valid_uri(r->pathv[0])) {
        problem_set(&p, PB_BAD_REQUEST_DATA, "'%.200s' is not a URI: no EntityMap id (5.14.3.4)", r->pathv[0]);
        goto fail;
    }
    fwd_map_page_t mp;
    bool           had = fwd_map_page(r->tenant, r->pathv[0], 0, 0, r->arena, &mp);
    if (!fwd_map_delete(r->tenant, r->pathv[0])) {
        problem_set(&p, PB_RESOURCE_NOT_FOUND, "no EntityMap '%.200s' here (it may have expired)", r->pathv[0]);
        goto fail;
    }
    if (had) linked(r, &mp, REG_OP_DELETE_ENTITY_MAP, 0);
    reply_status(r, 204);
    return;
fail:
    reply_problem(r, &p);
}

bool api_entity_map_params(request_t *r, bool with_header, api_map_req_t *mr, problem_t *p)
{
    const char *em = req_param(r, "entityMap"), *life = req_param(r, "entityMapLifetime");
    const char *h = with_header ? req_header(r, "NGSILD-EntityMap") : NULL;
    *mr = (api_map_req_t){0};
    if (em && strcmp(em, "true") && strcmp(em, "false"))
        return problem_set(p, PB_BAD_REQUEST_DATA, "entityMap must be true or false (Table 6.4.3.2-1)");
    mr->lifetime_us = (int64_t)cr_config.entity_map_lifetime * 1000000;
    if (life && (!history_parse_duration(life, &mr->lifetime_us) || mr->lifetime_us <= 0))
        return problem_set(p, PB_BAD_REQUEST_DATA, "entityMapLifetime must be a positive ISO 8601 duration "
                           "(Table 6.4.3.2-1), not '%.100s'", life);
    if (mr->lifetime_us > MAP_MAX_LIFETIME_US) mr->lifetime_us = MAP_MAX_LIFETIME_US;
    if (h && *h) {                             /* the id, or a URL of /entityMaps/{id} */
        const char *s = strstr(h, "/entityMaps/");
        mr->id = s ? s + strlen("/entityMaps/") : h;
    }
    mr->want = (em && !strcmp(em, "true")) || mr->id;
    return true;
}

bool api_entity_map_retrieve(request_t *r, const fwd_in_t *in, const char *id, const typesel_t *ts,
                             const char *const *attrs, size_t n_attrs, const fwd_param_t *prm, size_t np,
                             cr_entity_t *local, const api_map_req_t *mr, fwd_out_t *out, problem_t *p)
{
    fwd_map_page_t mp;
    if (mr->id && fwd_map_entity(r->tenant, mr->id, id, r->arena, &mp)) {
        if (!fwd_retrieve_map(in, id, ts, attrs, n_attrs, prm, np, &mp, local, out, p)) return false;
        reply_header(r, "NGSILD-EntityMap", mp.id);
        return true;
    }
    /* none named, or it is gone: a new map of this entity, from where it was found (5.7.1.4) */
    if (!fwd_retrieve(in, id, ts, attrs, n_attrs, prm, np, local, out, p)) return false;
    uint64_t origin = local ? FWD_MAP_HERE : 0;
    size_t   n_regs = out->forwarded ? out->n_regs : 0;
    if (out->forwarded && !out->n) origin = 0;
    for (size_t k = 0; k < n_regs && k < 63; k++) origin |= (uint64_t)1 << (k + 1);
    const char *ids[1] = {id};
    char        mid[64];
    if (fwd_map_put(r->tenant, cr_now_us() + mr->lifetime_us, n_regs ? out->reg_ids : NULL,
                    n_regs ? out->linked : NULL, n_regs, ids, &origin, origin ? 1 : 0, mid))
        reply_header(r, "NGSILD-EntityMap", arena_strdup(r->arena, mid));
    else LOG_D("api: no entity map for the retrieve of %s (%zu sources, --entityMapMax)", id, n_regs);
    return true;
}
