/*
 * reg.c - the registration model (5.2.9 CSourceRegistration, 5.2.10
 * RegistrationInfo, 5.2.8 EntityInfo, 5.2.11 TimeInterval, 5.2.34
 * RegistrationManagementInfo, 4.3.6.6 contextSourceInfo, 4.20 operation
 * names): the stored document is validated and parsed here into a reg_t
 * that matching evaluates without parsing again, and rendered back for GET
 * with the reader's @context. One function (reg_build) serves create,
 * update and the rebuild at start, so the three cannot disagree.
 */
#include "reg_int.h"
#include "../history/history.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ operation names (4.20) */

static const char *const op_names[REG_OP__COUNT] = {
    "createEntity", "updateEntity", "appendAttrs", "updateAttrs", "deleteAttrs", "deleteEntity",
    "createBatch", "upsertBatch", "updateBatch", "deleteBatch", "upsertTemporal", "appendAttrsTemporal",
    "deleteAttrsTemporal", "updateAttrInstanceTemporal", "deleteAttrInstanceTemporal", "deleteTemporal",
    "mergeEntity", "replaceEntity", "replaceAttrs", "mergeBatch", "purgeEntity", "retrieveEntity",
    "queryEntity", "queryBatch", "retrieveTemporal", "queryTemporal", "retrieveEntityTypes",
    "retrieveEntityTypeDetails", "retrieveEntityTypeInfo", "retrieveAttrTypes", "retrieveAttrTypeDetails",
    "retrieveAttrTypeInfo", "createSubscription", "updateSubscription", "retrieveSubscription",
    "querySubscription", "deleteSubscription", "retrieveEntityMap", "updateEntityMap", "deleteEntityMap",
    "createEntityMapQueryEntity", "createEntityMapQueryTemporal", "retrieveContextSourceIdentity",
};

#define OPB REG_OP_BIT
#define DISCOVERY_OPS (OPB(REG_OP_RETRIEVE_ENTITY_TYPES) | OPB(REG_OP_RETRIEVE_ENTITY_TYPE_DETAILS) | \
                       OPB(REG_OP_RETRIEVE_ENTITY_TYPE_INFO) | OPB(REG_OP_RETRIEVE_ATTR_TYPES) |       \
                       OPB(REG_OP_RETRIEVE_ATTR_TYPE_DETAILS) | OPB(REG_OP_RETRIEVE_ATTR_TYPE_INFO))
#define SUB_OPS (OPB(REG_OP_CREATE_SUBSCRIPTION) | OPB(REG_OP_UPDATE_SUBSCRIPTION) | OPB(REG_OP_RETRIEVE_SUBSCRIPTION) | \
                 OPB(REG_OP_QUERY_SUBSCRIPTION) | OPB(REG_OP_DELETE_SUBSCRIPTION))
#define MAP_OPS (OPB(REG_OP_RETRIEVE_ENTITY_MAP) | OPB(REG_OP_UPDATE_ENTITY_MAP) | OPB(REG_OP_DELETE_ENTITY_MAP) | \
                 OPB(REG_OP_CREATE_ENTITY_MAP_QUERY_ENTITY))
#define RETRIEVE_OPS (OPB(REG_OP_RETRIEVE_ENTITY) | OPB(REG_OP_QUERY_ENTITY))

/* Table 4.20-2 */
static const struct { const char *name; uint64_t ops; } op_groups[] = {
    {"federationOps", RETRIEVE_OPS | OPB(REG_OP_QUERY_BATCH) | DISCOVERY_OPS | SUB_OPS | MAP_OPS |
                      OPB(REG_OP_RETRIEVE_CONTEXT_SOURCE_IDENTITY)},
    {"associationOps", RETRIEVE_OPS | OPB(REG_OP_QUERY_BATCH) | DISCOVERY_OPS | SUB_OPS |
                       OPB(REG_OP_RETRIEVE_CONTEXT_SOURCE_IDENTITY)},
    {"updateOps", OPB(REG_OP_UPDATE_ENTITY) | OPB(REG_OP_UPDATE_ATTRS) | OPB(REG_OP_REPLACE_ENTITY) | OPB(REG_OP_REPLACE_ATTRS)},
    {"retrieveOps", RETRIEVE_OPS},
    {"redirectionOps", OPB(REG_OP_CREATE_ENTITY) | OPB(REG_OP_UPDATE_ENTITY) | OPB(REG_OP_APPEND_ATTRS) |
                       OPB(REG_OP_UPDATE_ATTRS) | OPB(REG_OP_DELETE_ATTRS) | OPB(REG_OP_DELETE_ENTITY) |
                       OPB(REG_OP_MERGE_ENTITY) | OPB(REG_OP_REPLACE_ENTITY) | OPB(REG_OP_REPLACE_ATTRS) | RETRIEVE_OPS |
                       OPB(REG_OP_PURGE_ENTITY) | DISCOVERY_OPS | MAP_OPS | OPB(REG_OP_RETRIEVE_CONTEXT_SOURCE_IDENTITY)},
};


/* The mask of one name of 4.20 (an operation or a group); 0: unknown. */
static uint64_t op_mask(const char *name)
{
    for (size_t i = 0; i < REG_OP__COUNT; i++)
        if (!strcmp(name, op_names[i])) return REG_OP_BIT(i);
    for (size_t i = 0; i < CR_ARRAY_LEN(op_groups); i++)
        if (!strcmp(name, op_groups[i].name)) return op_groups[i].ops;
    return 0;
}

/* ------------------------------------------------------------ helpers */

#define BAD(...) do { problem_set(p, PB_BAD_REQUEST_DATA, __VA_ARGS__); goto fail; } while (0)

static bool nonempty_string(const json_t *v)
{
    return json_is_string(v) && v->len > 0;
}

/* ISO 8601 duration (refreshRate, cacheDuration): PnYnMnWnDTnHnMnS, at least one part. */
static bool iso_duration(const char *s)
{
    if (*s++ != 'P' || !*s) return false;
    bool time = false, any = false;
    const char *units = "YMWD";
    while (*s) {
        if (*s == 'T') {
            if (time) return false;
            time = true;
            units = "HMS";
            s++;
            if (!*s) return false;
            continue;
        }
        const char *d = s;
        while ((*s >= '0' && *s <= '9') || *s == '.' || *s == ',') s++;
        if (s == d || !*s) return false;
        const char *u = strchr(units, *s);
        if (!u) return false;
        units = u + 1;
        s++;
        any = true;
    }
    return any;
}

/* A non-empty array of attribute names (or a single name), expanded with
 * ctx and interned. */
static bool names(reg_t *r, const json_t *v, const char *what, const char ***out, size_t *n, problem_t *p)
{
    if (!json_is_array(v) || !v->len)
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a non-empty array of attribute names", what);
    const char **nv = arena_alloc(r->a, v->len * sizeof *nv);
    size_t       k = 0;
    json_foreach(c, v) {
        if (!json_is_string(c) || !model_valid_name(c->str))
            return problem_set(p, PB_BAD_REQUEST_DATA, "%s: '%s' is not an attribute name", what,
                               json_is_string(c) ? c->str : "(not a string)");
        nv[k++] = ld_expand(r->ctx, c->str);
    }
    *out = nv;
    *n   = k;
    return true;
}

static bool entity_info(reg_t *r, const json_t *v, reg_entity_info_t *out, problem_t *p)
{
    if (!json_is_object(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities: each entry must be an object");
    json_foreach(m, v)
        if (strcmp(m->key, "id") && strcmp(m->key, "idPattern") && strcmp(m->key, "type"))
            return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities: unknown member '%s' of an EntityInfo", m->key);
    const json_t *id = json_get(v, "id"), *pat = json_get(v, "idPattern"), *type = json_get(v, "type");
    memset(out, 0, sizeof *out);
    if (id) {
        if (!json_is_string(id) || !model_valid_uri(id->str))
            return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities: id must be a URI");
        out->id = intern_cstr(id->str);
    }
    if (pat) {
        if (!nonempty_string(pat))
            return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities: idPattern must be a regular expression");
        if (id) return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities: id and idPattern exclude each other");
        if (!(out->pattern = filter_regex_compile(r->a, pat->str, pat->len, "idPattern", p))) return false;
        out->id_pattern = pat->str;
    }
    if (!type) return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities: type is mandatory in an EntityInfo");
    size_t nt = json_is_array(type) ? type->len : 1;
    if (!nt || (!json_is_array(type) && !json_is_string(type)))
        return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities: type must be a type name or a non-empty array of them");
    out->types = arena_alloc(r->a, nt * sizeof *out->types);
    for (const json_t *c = json_is_array(type) ? type->child : type; c; c = json_is_array(type) ? c->next : NULL) {
        if (!json_is_string(c) || !model_valid_name(c->str))
            return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities: '%s' is not an entity type",
                               json_is_string(c) ? c->str : "(not a string)");
        out->types[out->n_types++] = ld_expand(r->ctx, c->str);
    }
    return true;
}

static bool information(reg_t *r, const json_t *v, problem_t *p)
{
    if (!json_is_array(v) || !v->len)
        return problem_set(p, PB_BAD_REQUEST_DATA, "information must be a non-empty array of RegistrationInfo");
    if (v->len > 64) return problem_set(p, PB_BAD_REQUEST_DATA, "information: at most 64 RegistrationInfo elements");
    r->info = arena_calloc(r->a, v->len * sizeof *r->info);
    json_foreach(c, v) {
        reg_info_t *in = &r->info[r->n_info++];
        if (!json_is_object(c) || !c->len)
            return problem_set(p, PB_BAD_REQUEST_DATA, "information: each RegistrationInfo is an object with "
                                                       "entities, propertyNames or relationshipNames");
        json_foreach(m, c)
            if (strcmp(m->key, "entities") && strcmp(m->key, "propertyNames") && strcmp(m->key, "relationshipNames"))
                return problem_set(p, PB_BAD_REQUEST_DATA, "information: unknown member '%s' of a RegistrationInfo", m->key);
        const json_t *e = json_get(c, "entities"), *pn = json_get(c, "propertyNames"), *rn = json_get(c, "relationshipNames");
        if (e) {
            if (!json_is_array(e) || !e->len)
                return problem_set(p, PB_BAD_REQUEST_DATA, "information.entities must be a non-empty array of EntityInfo");
            in->entities = arena_calloc(r->a, e->len * sizeof *in->entities);
            json_foreach(x, e)
                if (!entity_info(r, x, &in->entities[in->n_entities++], p)) return false;
        }
        if (pn && !names(r, pn, "information.propertyNames", &in->props, &in->n_props, p)) return false;
        if (rn && !names(r, rn, "information.relationshipNames", &in->rels, &in->n_rels, p)) return false;
    }
    return true;
}

static bool csource_info(reg_t *r, const json_t *v, problem_t *p)
{
    if (!json_is_array(v) || !v->len)
        return problem_set(p, PB_BAD_REQUEST_DATA, "contextSourceInfo must be a non-empty array of {key, value}");
    r->csi = arena_alloc(r->a, v->len * sizeof *r->csi);
    json_foreach(c, v) {
        const json_t *k = json_get(c, "key"), *val = json_get(c, "value");
        if (!json_is_object(c) || c->len != 2 || !nonempty_string(k) || !json_is_string(val))
            return problem_set(p, PB_BAD_REQUEST_DATA, "contextSourceInfo: each entry is {\"key\": string, \"value\": string}");
        for (const char *s = k->str; *s; s++)
            if (*s <= ' ' || *s == ':' || *s >= 127)
                return problem_set(p, PB_BAD_REQUEST_DATA, "contextSourceInfo: '%s' is not a header name", k->str);
        for (const char *s = val->str; *s; s++)
            if (*s == '\r' || *s == '\n')
                return problem_set(p, PB_BAD_REQUEST_DATA, "contextSourceInfo: a value holds a line break");
        /* 4.3.6.6: the keys with a meaning */
        if ((!strcmp(k->str, "accept") || !strcmp(k->str, "contentType")) &&
            strcmp(val->str, "application/json") && strcmp(val->str, "application/ld+json"))
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "contextSourceInfo: %s must be application/json or application/ld+json (4.3.6.6)", k->str);
        if (!strcmp(k->str, "jsonldContext") && (!model_valid_uri(val->str) || !strstr(val->str, "://")))
            return problem_set(p, PB_BAD_REQUEST_DATA, "contextSourceInfo: jsonldContext must be a URL (4.3.6.6)");
        if (!strcmp(k->str, "ngsildConformance")) {
            unsigned maj, min;
            char     tail;
            if (sscanf(val->str, "%u.%u%c", &maj, &min, &tail) != 2)
                return problem_set(p, PB_BAD_REQUEST_DATA, "contextSourceInfo: ngsildConformance must be major.minor (4.3.6.6)");
        }
        r->csi[r->n_csi].key = k->str;
        r->csi[r->n_csi].value = val->str;
        r->n_csi++;
    }
    return true;
}

static bool interval(const json_t *v, const char *what, int64_t *start, int64_t *end, problem_t *p)
{
    if (!json_is_object(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "%s must be a TimeInterval object", what);
    json_foreach(m, v)
        if (strcmp(m->key, "startAt") && strcmp(m->key, "endAt"))
            return problem_set(p, PB_BAD_REQUEST_DATA, "%s: unknown member '%s'", what, m->key);
    const json_t *s = json_get(v, "startAt"), *e = json_get(v, "endAt");
    if (!json_is_string(s) || !cr_datetime_parse(s->str, start))
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s.startAt must be a DateTime", what);
    *end = CR_NO_TIME;
    if (e && (!json_is_string(e) || !cr_datetime_parse(e->str, end)))
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s.endAt must be a DateTime", what);
    if (e && *end < *start) return problem_set(p, PB_BAD_REQUEST_DATA, "%s ends before it starts", what);
    return true;
}

static bool management(reg_t *r, const json_t *v, problem_t *p)
{
    if (!json_is_object(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "management must be an object");
    json_foreach(m, v) {
        if (!strcmp(m->key, "localOnly")) {
            if (!json_is_bool(m)) return problem_set(p, PB_BAD_REQUEST_DATA, "management.localOnly must be true or false");
            r->local_only = m->type == JSON_TRUE;
        } else if (!strcmp(m->key, "timeout") || !strcmp(m->key, "cooldown")) {
            if (!json_is_number(m) || json_number(m) <= 0 || json_number(m) > 86400000)
                return problem_set(p, PB_BAD_REQUEST_DATA, "management.%s must be a positive number of milliseconds", m->key);
            *(m->key[0] == 't' ? &r->timeout_ms : &r->cooldown_ms) = (long)json_number(m);
        } else if (!strcmp(m->key, "cacheDuration")) {
            if (!json_is_string(m) || !iso_duration(m->str) || !history_parse_duration(m->str, &r->cache_us))
                return problem_set(p, PB_BAD_REQUEST_DATA, "management.cacheDuration must be an ISO 8601 duration");
        } else return problem_set(p, PB_BAD_REQUEST_DATA, "management: unknown member '%s'", m->key);
    }
    return true;
}

/* ------------------------------------------------------------ build */

static const char *const known_members[] = {"id", "type", "endpoint", "information", "mode", "operations",
    "contextSourceInfo", "contextSourceAlias", "tenant", "scope", "location", "observationSpace",
    "operationSpace", "observationInterval", "managementInterval", "expiresAt", "refreshRate", "management",
    "registrationName", "description", "datasetId", "@context", "createdAt", "modifiedAt", NULL};

/* status, timesSent, ...: never stored (model_doc_kind_t.read_only), ignored when given (5.2.9) */
const char *const reg_read_only_members[] = {"status", "timesSent", "timesFailed", "lastSuccess", "lastFailure",
                                             NULL};

static bool known(const char *k)
{
    for (const char *const *m = known_members; *m; m++)
        if (!strcmp(k, *m)) return true;
    return false;
}

/* The pseudo-entity of discovery's csf, scopeQ and geo: the context source
 * properties as Properties (a member already in normalized form as given),
 * location, observationSpace, operationSpace as GeoProperties, scope. */
static bool build_entity(reg_t *r, const json_t *t, problem_t *p)
{
    json_t *o = json_new(r->a, JSON_OBJECT);
    json_add(o, "id", json_new_string(r->a, r->id));
    json_add(o, "type", json_new_string(r->a, "ContextSourceRegistration"));
    json_foreach(m, t) {
        bool geo = !strcmp(m->key, "location") || !strcmp(m->key, "observationSpace") ||
                   !strcmp(m->key, "operationSpace");
        if (!strcmp(m->key, "scope")) {
            json_add(o, "scope", json_clone(r->a, m));
            continue;
        }
        if (!geo && known(m->key)) continue;
        const json_t *ty = json_is_object(m) ? json_get(m, "type") : NULL;
        if (!geo && json_is_string(ty) && (!strcmp(ty->str, "Property") || !strcmp(ty->str, "Relationship"))) {
            json_add(o, m->key, json_clone(r->a, m));
            continue;
        }
        json_t *a = json_new(r->a, JSON_OBJECT);
        json_add(a, "type", json_new_string(r->a, geo ? "GeoProperty" : "Property"));
        json_add(a, "value", json_clone(r->a, m));
        json_add(o, m->key, a);
    }
    problem_t q = {0};
    r->entity = entity_parse(r->a, o, r->ctx, EP_CREATE, 0, &q);
    if (!r->entity)
        return problem_set(p, PB_BAD_REQUEST_DATA, "a context source property is not valid: %s", q.detail);
    return true;
}

reg_t *reg_build(const char *tenant, const char *json, size_t len, int64_t now, problem_t *p)
{
    reg_t *r = cr_xcalloc(1, sizeof *r);
    atomic_init(&r->refs, 1);
    r->a = arena_new(4096);
    r->doc = arena_strndup(r->a, json, len);
    r->doc_len = len;
    r->tenant = intern_cstr(tenant ? tenant : "");
    r->expires_at = CR_NO_TIME;
    r->ops = op_groups[0].ops;   /* federationOps (5.2.9) */

    char    err[128];
    json_t *t = json_parse_copy(r->a, json, len, &(json_limits_t){0}, err, sizeof err);
    if (!t) BAD("a registration is not valid JSON: %s", err);
    if (!json_is_object(t)) BAD("a registration must be a JSON object");
    r->tree = t;

    const json_t *v = json_get(t, "id");
    if (!json_is_string(v) || !model_valid_uri(v->str)) BAD("id must be a URI");
    r->id = v->str;
    if (!(v = json_get(t, "type")) || !json_is_string(v) || strcmp(v->str, "ContextSourceRegistration"))
        BAD("type must be \"ContextSourceRegistration\"");
    const json_t *ctxv = json_get(t, "@context");
    if (ctxv) {
        if (!(r->ctx = ld_from_json(ctxv, p))) goto fail;
    } else r->ctx = ld_core();

    json_foreach(m, t) {
        if (known(m->key)) continue;
        if (!model_valid_name(m->key)) BAD("'%s' is not a valid name for a context source property", m->key);
    }
    if (!(v = json_get(t, "endpoint")) || !json_is_string(v) || !model_valid_uri(v->str) ||
        (strncmp(v->str, "http://", 7) && strncmp(v->str, "https://", 8) && strncmp(v->str, "cor://", 6)))
        BAD("endpoint is mandatory and must be an http://, https:// or cor:// URI");
    r->endpoint = v->str;
    if (!(v = json_get(t, "information"))) BAD("information is mandatory");
    if (!information(r, v, p)) goto fail;
    if ((v = json_get(t, "mode"))) {
        static const char *const modes[] = {"inclusive", "exclusive", "redirect", "auxiliary"};
        size_t i;
        for (i = 0; i < CR_ARRAY_LEN(modes); i++)
            if (json_is_string(v) && !strcmp(v->str, modes[i])) break;
        if (i == CR_ARRAY_LEN(modes)) BAD("mode must be inclusive, exclusive, redirect or auxiliary");
        r->mode = (reg_mode_t)i;
    }
    const json_t *ops = json_get(t, "operations");
    if (ops) {
        if (!json_is_array(ops) || !ops->len) BAD("operations must be a non-empty array of operation names (4.20)");
        r->ops = 0;
        json_foreach(c, ops) {
            uint64_t m = json_is_string(c) ? op_mask(c->str) : 0;
            if (!m) BAD("operations: '%s' is not an operation or group name of 4.20",
                        json_is_string(c) ? c->str : "(not a string)");
            r->ops |= m;
        }
    }
    /* 4.3.6.2: auxiliary registrations are always accepted, their operations limited to consumption:
     * without operations, retrieveOps; with operations, only those of 5.9.2.4 */
    if (r->mode == REG_AUXILIARY && !ops) r->ops = RETRIEVE_OPS;
    if (r->mode == REG_AUXILIARY && (r->ops & ~(uint64_t)RETRIEVE_OPS))
        BAD("an auxiliary registration supports only retrieveOps, retrieveEntity or queryEntity (5.9.2.4)");
    if (r->mode == REG_EXCLUSIVE)
        for (size_t i = 0; i < r->n_info; i++) {
            const reg_info_t *in = &r->info[i];
            bool ids = in->n_entities > 0;
            for (size_t j = 0; j < in->n_entities; j++) ids = ids && in->entities[j].id;
            if (!ids || !(in->n_props + in->n_rels))
                BAD("an exclusive registration names entity ids and attributes in each RegistrationInfo (4.3.6.3)");
        }
    if ((v = json_get(t, "contextSourceInfo")) && !csource_info(r, v, p)) goto fail;
    for (const char *const *k = (const char *const[]){"contextSourceAlias", "tenant", "registrationName",
                                                        "description", NULL}; *k; k++)
        if ((v = json_get(t, *k)) && !nonempty_string(v)) BAD("%s must be a non-empty string", *k);
    if ((v = json_get(t, "contextSourceAlias"))) r->alias = v->str;
    if ((v = json_get(t, "tenant"))) r->source_tenant = v->str;
    if ((v = json_get(t, "scope"))) {
        size_t n = json_is_array(v) ? v->len : 1;
        if (!n || (!json_is_array(v) && !json_is_string(v))) BAD("scope must be a scope or an array of scopes");
        for (const json_t *c = json_is_array(v) ? v->child : v; c; c = json_is_array(v) ? c->next : NULL)
            if (!json_is_string(c) || !model_valid_scope(c->str)) BAD("scope: '%s' is not a scope (4.18)",
                                                                      json_is_string(c) ? c->str : "(not a string)");
    }
    for (const char *const *k = (const char *const[]){"location", "observationSpace", "operationSpace", NULL}; *k; k++)
        if ((v = json_get(t, *k))) {
            problem_t q = {0};
            if (!geo_validate(v, &q)) BAD("%s must be a GeoJSON geometry: %s", *k, q.detail);
        }
    if ((v = json_get(t, "observationInterval"))) {
        if (!interval(v, "observationInterval", &r->obs_start, &r->obs_end, p)) goto fail;
        r->has_obs = true;
    }
    if ((v = json_get(t, "managementInterval"))) {
        if (!interval(v, "managementInterval", &r->mgmt_start, &r->mgmt_end, p)) goto fail;
        r->has_mgmt = true;
    }
    if ((v = json_get(t, "expiresAt"))) {
        if (!json_is_string(v) || !cr_datetime_parse(v->str, &r->expires_at)) BAD("expiresAt must be a DateTime");
        if (now && r->expires_at <= now) BAD("expiresAt is in the past");
    }
    if ((v = json_get(t, "refreshRate")) && (!json_is_string(v) || !iso_duration(v->str)))
        BAD("refreshRate must be an ISO 8601 duration");
    if ((v = json_get(t, "management")) && !management(r, v, p)) goto fail;
    if ((v = json_get(t, "datasetId"))) {
        size_t n = json_is_array(v) ? v->len : 1;
        if (!n || (!json_is_array(v) && !json_is_string(v))) BAD("datasetId must be a URI or an array of URIs");
        for (const json_t *c = json_is_array(v) ? v->child : v; c; c = json_is_array(v) ? c->next : NULL)
            if (!json_is_string(c) || (strcmp(c->str, "@none") && !model_valid_uri(c->str)))
                BAD("datasetId: each entry must be a URI or \"@none\"");
    }
    for (const char *const *k = (const char *const[]){"createdAt", "modifiedAt", NULL}; *k; k++)
        if ((v = json_get(t, *k)) && json_is_string(v)) {
            int64_t us;
            if (cr_datetime_parse(v->str, &us)) *(k[0][0] == 'c' ? &r->created_at : &r->modified_at) = us;
        }
    if (!build_entity(r, t, p)) goto fail;
    r->c = reg_counters_new();
    return r;
fail:
    arena_free(r->a);
    free(r);
    return NULL;
}

/* ------------------------------------------------------------ counters, accessors */

reg_counters_t *reg_counters_new(void)
{
    static atomic_uint_fast64_t order;
    reg_counters_t *c = cr_xcalloc(1, sizeof *c);
    atomic_init(&c->refs, 1);
    c->order = atomic_fetch_add(&order, 1);
    return c;
}

void reg_counters_unref(reg_counters_t *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) free(c);
}

void reg_ref(reg_t *r)
{
    atomic_fetch_add(&r->refs, 1);
}

void reg_unref(reg_t *r)
{
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    reg_counters_unref(r->c);
    arena_free(r->a);
    free(r);
}

/* the counters' totals kept beyond this process (reg_set_totals): set once */
static reg_totals_hooks_t           g_totals_hooks;
static _Atomic(const reg_totals_hooks_t *) g_totals;

void reg_set_totals(const reg_totals_hooks_t *h)
{
    g_totals_hooks = *h;
    atomic_store(&g_totals, &g_totals_hooks);
}

void reg_count(reg_t *r, bool ok, int64_t now)
{
    const reg_totals_hooks_t *h = atomic_load(&g_totals);
    if (h) h->add(h->ud, r->tenant, r->id, ok, now);

    reg_counters_t *c = r->c;
    atomic_fetch_add(&c->sent, 1);
    if (ok) atomic_store(&c->last_success, now);
    else {
        atomic_fetch_add(&c->failed, 1);
        atomic_store(&c->last_failure, now);
    }
    atomic_store(&c->failing, ok ? 0 : 1);
}

const char         *reg_id(const reg_t *r) { return r->id; }
const char         *reg_tenant(const reg_t *r) { return r->tenant; }
const ld_context_t *reg_context(const reg_t *r) { return r->ctx; }
reg_mode_t          reg_mode(const reg_t *r) { return r->mode; }
uint64_t            reg_ops(const reg_t *r) { return r->ops; }
const char         *reg_endpoint(const reg_t *r) { return r->endpoint; }
const char         *reg_alias(const reg_t *r) { return r->alias; }
const char         *reg_source_tenant(const reg_t *r) { return r->source_tenant; }
int64_t             reg_expires_at(const reg_t *r) { return r->expires_at; }
bool                reg_temporal(const reg_t *r) { return r->has_obs || r->has_mgmt; }
long                reg_timeout_ms(const reg_t *r) { return r->timeout_ms; }
long                reg_cooldown_ms(const reg_t *r) { return r->cooldown_ms; }
int64_t             reg_cache_us(const reg_t *r) { return r->cache_us; }
bool                reg_local_only(const reg_t *r) { return r->local_only; }
size_t              reg_info_count(const reg_t *r) { return r->n_info; }
const reg_info_t   *reg_info_at(const reg_t *r, size_t i) { return i < r->n_info ? &r->info[i] : NULL; }
const cr_entity_t  *reg_as_entity(const reg_t *r) { return r->entity; }

const char *reg_doc(const reg_t *r, size_t *len)
{
    *len = r->doc_len;
    return r->doc;
}

const char *reg_csource_info(const reg_t *r, const char *key)
{
    for (size_t i = 0; i < r->n_csi; i++)
        if (!strcmp(r->csi[i].key, key)) return r->csi[i].value;
    return NULL;
}

size_t reg_csource_info_count(const reg_t *r)
{
    return r->n_csi;
}

void reg_csource_info_at(const reg_t *r, size_t i, const char **key, const char **value)
{
    *key = r->csi[i].key;
    *value = r->csi[i].value;
}

int64_t reg_last_failure(const reg_t *r)
{
    return atomic_load(&r->c->last_failure);
}

bool reg_interval(const reg_t *r, bool observed, int64_t *start, int64_t *end)
{
    if (observed ? !r->has_obs : !r->has_mgmt) return false;
    *start = observed ? r->obs_start : r->mgmt_start;
    *end = observed ? r->obs_end : r->mgmt_end;
    return true;
}

bool reg_time_match(const reg_t *r, int timerel, int64_t time_at, int64_t end_time_at, bool observed)
{
    int64_t s, e;
    if (!reg_interval(r, observed, &s, &e)) return false;
    switch (timerel) {
    case REG_TIMEREL_BEFORE:  return s < time_at;
    case REG_TIMEREL_AFTER:   return e == CR_NO_TIME || e > time_at;
    case REG_TIMEREL_BETWEEN: return s < end_time_at && (e == CR_NO_TIME || e > time_at);
    default:                  return true;
    }
}

/* ------------------------------------------------------------ rendering */

static void jw_time(json_writer_t *w, const char *key, int64_t us)
{
    char buf[32];
    if (!us) return;
    cr_datetime_format(us, buf);
    jw_key(w, key);
    jw_string(w, buf);
}

static void render_names(json_writer_t *w, const char *key, const char *const *nv, size_t n, const ld_context_t *ctx)
{
    if (!n) return;
    jw_key(w, key);
    jw_array_begin(w);
    for (size_t i = 0; i < n; i++) jw_string(w, ld_compact_name(ctx, nv[i]));
    jw_array_end(w);
}

static void render_info(json_writer_t *w, const reg_info_t *in, const ld_context_t *ctx)
{
    jw_object_begin(w);
    if (in->n_entities) {
        jw_key(w, "entities");
        jw_array_begin(w);
        for (size_t j = 0; j < in->n_entities; j++) {
            const reg_entity_info_t *e = &in->entities[j];
            jw_object_begin(w);
            if (e->id) {
                jw_key(w, "id");
                jw_string(w, e->id);
            }
            if (e->id_pattern) {
                jw_key(w, "idPattern");
                jw_string(w, e->id_pattern);
            }
            jw_key(w, "type");
            if (e->n_types == 1) jw_string(w, ld_compact_name(ctx, e->types[0]));
            else {
                jw_array_begin(w);
                for (size_t k = 0; k < e->n_types; k++) jw_string(w, ld_compact_name(ctx, e->types[k]));
                jw_array_end(w);
            }
            jw_object_end(w);
        }
        jw_array_end(w);
    }
    render_names(w, "propertyNames", in->props, in->n_props, ctx);
    render_names(w, "relationshipNames", in->rels, in->n_rels, ctx);
    jw_object_end(w);
}

void reg_render(json_writer_t *w, const reg_t *r, const ld_context_t *ctx, bool with_context, bool sys_attrs,
                uint64_t info_mask)
{
    const reg_counters_t *c = r->c;
    jw_object_begin(w);
    for (const json_t *m = r->tree->child; m; m = m->next) {
        if (!strcmp(m->key, "@context")) continue;
        if ((!strcmp(m->key, "createdAt") || !strcmp(m->key, "modifiedAt")) && !sys_attrs) continue;
        if (!strcmp(m->key, "information")) {
            jw_key(w, "information");
            jw_array_begin(w);
            for (size_t i = 0; i < r->n_info; i++)
                if (i >= 64 || (info_mask >> i & 1)) render_info(w, &r->info[i], ctx);
            jw_array_end(w);
            continue;
        }
        if (!known(m->key)) {    /* a context source property: its name compacted with the reader's context */
            jw_key(w, ld_compact(ctx, ld_expand(r->ctx, m->key)));
            jw_value(w, m);
            continue;
        }
        jw_key(w, m->key);
        jw_value(w, m);
    }
    if (!json_get(r->tree, "mode")) {
        jw_key(w, "mode");
        jw_string(w, "inclusive");
    }
    if (!json_get(r->tree, "operations")) {
        jw_key(w, "operations");
        jw_array_begin(w);
        jw_string(w, r->mode == REG_AUXILIARY ? "retrieveOps" : "federationOps");
        jw_array_end(w);
    }
    const reg_totals_hooks_t *th = atomic_load(&g_totals);
    reg_totals_t tot = { (int64_t)atomic_load(&c->sent), (int64_t)atomic_load(&c->failed),
                         atomic_load(&c->last_success), atomic_load(&c->last_failure) };
    bool failing = atomic_load(&c->failing);
    if (th && th->read(th->ud, r->tenant, r->id, &tot))    /* every process's (--database mongoc) */
        failing = tot.last_failure > tot.last_success;
    if (tot.sent) {
        jw_key(w, "status");
        jw_string(w, failing ? "failed" : "ok");
        jw_key(w, "timesSent");
        jw_int(w, tot.sent);
        jw_key(w, "timesFailed");
        jw_int(w, tot.failed);
        jw_time(w, "lastSuccess", tot.last_success);
        jw_time(w, "lastFailure", tot.last_failure);
    }
    if (with_context) {
        const char *cv = ld_context_value_json(ctx);
        jw_key(w, "@context");
        jw_raw(w, cv, strlen(cv));
    }
    jw_object_end(w);
}
