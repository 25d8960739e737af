/*
 * types.c - discovery: GET /types, /types/{type}, /attributes,
 * /attributes/{attrId} (6.25-6.28; operations 5.7.5-5.7.10; representations
 * 4.5.10-4.5.15), with details=true: the HTTP binding of ops/discovery.c.
 *
 * The operation gathers the sets of names (the lists from the store's
 * indexes); they are rendered here with the names compacted by the
 * request's @context.
 */
#include "api.h"

#include "../fwd/fwd.h"

#include <string.h>

static void names_array(json_writer_t *w, const ld_context_t *ctx, const char **v, size_t n)
{
    jw_array_begin(w);
    for (size_t i = 0; i < n; i++) jw_string(w, ld_compact(ctx, v[i]));
    jw_array_end(w);
}

static void kinds_array(json_writer_t *w, unsigned kinds)
{
    jw_array_begin(w);
    for (int k = ATTR_PROPERTY; k <= ATTR_JSONPROPERTY; k++)
        if (kinds & (1u << k)) jw_string(w, attr_kind_name((attr_kind_t)k));
    jw_array_end(w);
}

/* ------------------------------------------------------------ merging the sources' answers */

static const char *answer_name(const ld_context_t *ctx, const json_t *v)
{
    return json_is_string(v) && *v->str ? intern_cstr(ld_expand(ctx, v->str)) : NULL;
}

static unsigned answer_kinds(const json_t *v)
{
    unsigned k = 0;
    for (const json_t *x = json_is_array(v) ? v->child : NULL; x; x = x->next)
        for (int i = ATTR_PROPERTY; i <= ATTR_JSONPROPERTY; i++)
            if (json_is_string(x) && !strcmp(x->str, attr_kind_name((attr_kind_t)i))) k |= 1u << i;
    return k;
}

static void answer_rels(arena_t *a, ops_name_t *ni, const ld_context_t *ctx, const json_t *v)
{
    for (const json_t *x = json_is_array(v) ? v->child : NULL; x; x = x->next) {
        const char *n = answer_name(ctx, x);
        if (n) ops_name_add_rel(a, ni, n);
    }
}

static size_t answer_count(const json_t *v)
{
    return json_is_number(v) && json_number(v) > 0 ? (size_t)json_number(v) : 0;
}

/* One source's EntityTypeList, EntityType array, EntityTypeInfo,
 * AttributeList, Attribute array or Attribute into d (names expanded with
 * the @context the source answered in); what does not have the shape is
 * left out. */
static void merge_answer(arena_t *a, ops_discovery_t *d, bool type, bool named, const json_t *doc,
                         const ld_context_t *ctx)
{
    ops_names_t *set = type ? &d->types : &d->attrs;
    if (json_is_object(doc) && !named) {
        for (const json_t *x = json_get(doc, type ? "typeList" : "attributeList"); x && json_is_array(x); x = NULL)
            for (const json_t *y = x->child; y; y = y->next) {
                const char *n = answer_name(ctx, y);
                if (n) ops_names_get(set, n);
            }
        return;
    }
    for (const json_t *o = json_is_array(doc) ? doc->child : doc; o; o = json_is_array(doc) ? o->next : NULL) {
        const char *n = answer_name(ctx, json_get(o, type ? "typeName" : "attributeName"));
        if (!n) continue;
        ops_name_t *ni = ops_names_get(set, n);
        if (!type) {
            answer_rels(a, ni, ctx, json_get(o, "typeNames"));
            ni->kinds |= answer_kinds(json_get(o, "attributeTypes"));
            ni->count += answer_count(json_get(o, "attributeCount"));
            continue;
        }
        answer_rels(a, ni, ctx, json_get(o, "attributeNames"));
        ni->count += answer_count(json_get(o, "entityCount"));
        const json_t *det = json_get(o, "attributeDetails");
        for (const json_t *x = json_is_array(det) ? det->child : NULL; x; x = x->next) {
            const char *an = answer_name(ctx, json_get(x, "attributeName"));
            if (!an) continue;
            ops_name_add_rel(a, ni, an);
            ops_names_get(&d->attrs, an)->kinds |= answer_kinds(json_get(x, "attributeTypes"));
            ni = ops_names_get(set, n);      /* the set may have grown */
        }
    }
}

/* Common start: context, view (only json/ld+json), details flag, and the
 * discovery itself (named: only the type or attribute of the path). */
static bool discover(request_t *r, bool type, bool named, const ld_context_t **ctx, api_view_t *v, bool *details,
                     ops_discovery_t *d, problem_t *p)
{
    *ctx = api_context(r, NULL, p);
    if (!*ctx) return false;
    if (!api_view(r, *ctx, false, v, p)) return false;
    if (details) {
        const char *dp = req_param(r, "details");
        if (dp && strcmp(dp, "true") && strcmp(dp, "false"))
            return problem_set(p, PB_BAD_REQUEST_DATA, "details must be true or false");
        *details = dp && !strcmp(dp, "true");
    }
    (void)req_param(r, "local");
    if (!api_no_unknown_params(r, p)) return false;
    ops_req_t   rq = api_req(r, *ctx);
    const char *name = named ? r->pathv[0] : NULL;
    bool        det = details && *details;
    bool        ok = ops_discover(&rq, type, name, det, d, p);
    if (!api_distributed(r) || (!ok && p->kind != PB_RESOURCE_NOT_FOUND && p->kind != PB_NONEXISTENT_TENANT))
        return ok;
    /* 5.7.11: the lists of the registered sources merged with the local ones */
    static const reg_op_t ops[2][3] = {
        {REG_OP_RETRIEVE_ATTR_TYPES, REG_OP_RETRIEVE_ATTR_TYPE_DETAILS, REG_OP_RETRIEVE_ATTR_TYPE_INFO},
        {REG_OP_RETRIEVE_ENTITY_TYPES, REG_OP_RETRIEVE_ENTITY_TYPE_DETAILS, REG_OP_RETRIEVE_ENTITY_TYPE_INFO}};
    problem_t  q = {0};
    fwd_in_t   in;
    fwd_dout_t out;
    if (!ok) {
        memset(d, 0, sizeof *d);
        d->types.a = d->attrs.a = r->arena;
    }
    api_fwd_in(r, *ctx, &in);
    sbuf_t path;
    sb_init(&path, r->arena, 64);
    sb_adds(&path, type ? "types" : "attributes");
    if (name) {
        sb_addc(&path, '/');
        fwd_url_encode(&path, name);
    }
    if (!fwd_discover(&in, ops[type][name ? 2 : det ? 1 : 0], path.p, type ? name : NULL,
                      !type && name ? ld_expand(*ctx, name) : NULL, &out, &q)) {
        *p = q;
        return false;
    }
    if (out.warning) reply_header(r, "NGSILD-Warning", out.warning);
    for (size_t i = 0; i < out.n; i++) merge_answer(r->arena, d, type, name != NULL, out.docs[i], out.ctxs[i]);
    if (ok || (type ? d->types.n : d->attrs.n)) return true;
    return false;       /* found nowhere: the local ResourceNotFound */
}

static void end_object(json_writer_t *w, api_view_t *v)
{
    if (v->ro.context_json) {
        jw_key(w, "@context");
        jw_raw(w, v->ro.context_json, strlen(v->ro.context_json));
    }
    jw_object_end(w);
}

static const char *list_id(request_t *r, const char *kind)
{
    /* a stable id per answer: the URN names the list, the counter makes it unique */
    static uint64_t seq;
    return arena_printf(r->arena, "urn:ngsi-ld:%s:%llx-%llx", kind, (unsigned long long)cr_now_ms(),
                        (unsigned long long)__atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
}

/* EntityTypeList (4.5.10) / AttributeList (4.5.13): an id, a type, the names. */
static void name_list(json_writer_t *w, request_t *r, const ld_context_t *ctx, const char *kind,
                      const char *member, const ops_names_t *names, api_view_t *v)
{
    jw_object_begin(w);
    jw_key(w, "id"); jw_string(w, list_id(r, kind));
    jw_key(w, "type"); jw_string(w, kind);
    jw_key(w, member);
    jw_array_begin(w);
    for (size_t i = 0; i < names->n; i++) jw_string(w, ld_compact(ctx, names->v[i].name));
    jw_array_end(w);
    end_object(w, v);
}

/* EntityType (4.5.11) */
static void type_object(json_writer_t *w, const ld_context_t *ctx, const ops_name_t *t, api_view_t *v)
{
    jw_object_begin(w);
    jw_key(w, "id"); jw_string(w, t->name);
    jw_key(w, "type"); jw_string(w, "EntityType");
    jw_key(w, "typeName"); jw_string(w, ld_compact(ctx, t->name));
    jw_key(w, "attributeNames"); names_array(w, ctx, t->rel, t->n_rel);
    end_object(w, v);
}

/* Attribute (4.5.14); full: with its count and kinds (/attributes/{attrId}). */
static void attribute_object(json_writer_t *w, const ld_context_t *ctx, const ops_name_t *a, bool full,
                             api_view_t *v)
{
    jw_object_begin(w);
    jw_key(w, "id"); jw_string(w, a->name);
    jw_key(w, "type"); jw_string(w, "Attribute");
    jw_key(w, "attributeName"); jw_string(w, ld_compact(ctx, a->name));
    if (full) {
        jw_key(w, "attributeCount"); jw_int(w, (int64_t)a->count);
        jw_key(w, "attributeTypes"); kinds_array(w, a->kinds);
    }
    jw_key(w, "typeNames"); names_array(w, ctx, a->rel, a->n_rel);
    end_object(w, v);
}

/* GET /types and GET /attributes: the list of names, or with details=true
 * an array of EntityType / Attribute objects. */
static void list(request_t *r, bool types)
{
    problem_t          p = {0};
    const ld_context_t *ctx;
    api_view_t         v;
    bool               details = false;
    ops_discovery_t    d;
    json_writer_t      w;

    if (!discover(r, types, false, &ctx, &v, &details, &d, &p)) {
        reply_problem(r, &p);
        return;
    }
    const ops_names_t *names = types ? &d.types : &d.attrs;
    api_view_context(r, ctx, &v);
    jw_init(&w, &r->out);
    if (details) {
        jw_array_begin(&w);
        for (size_t i = 0; i < names->n; i++) {
            if (types) type_object(&w, ctx, &names->v[i], &v);
            else attribute_object(&w, ctx, &names->v[i], false, &v);
        }
        jw_array_end(&w);
    } else if (types) {
        name_list(&w, r, ctx, "EntityTypeList", "typeList", names, &v);
    } else {
        name_list(&w, r, ctx, "AttributeList", "attributeList", names, &v);
    }
    reply_body(r, 200, v.ctype);
}

void api_types_list(request_t *r) { list(r, true); }
void api_attributes_list(request_t *r) { list(r, false); }

/* EntityTypeInfo (4.5.12) of GET /types/{type} */
static void type_info(json_writer_t *w, const ld_context_t *ctx, ops_discovery_t *d, api_view_t *v)
{
    const ops_name_t *t = &d->types.v[0];
    jw_object_begin(w);
    jw_key(w, "id"); jw_string(w, t->name);
    jw_key(w, "type"); jw_string(w, "EntityTypeInfo");
    jw_key(w, "typeName"); jw_string(w, ld_compact(ctx, t->name));
    jw_key(w, "entityCount"); jw_int(w, (int64_t)t->count);
    jw_key(w, "attributeDetails");
    jw_array_begin(w);
    for (size_t i = 0; i < t->n_rel; i++) {
        const ops_name_t *a = ops_names_get(&d->attrs, t->rel[i]);
        jw_object_begin(w);
        jw_key(w, "id"); jw_string(w, a->name);
        jw_key(w, "type"); jw_string(w, "Attribute");
        jw_key(w, "attributeName"); jw_string(w, ld_compact(ctx, a->name));
        jw_key(w, "attributeTypes"); kinds_array(w, a->kinds);
        jw_object_end(w);
    }
    jw_array_end(w);
    end_object(w, v);
}

/* GET /types/{type} and GET /attributes/{attrId}. */
static void named(request_t *r, bool type)
{
    problem_t          p = {0};
    const ld_context_t *ctx;
    api_view_t         v;
    ops_discovery_t    d;
    json_writer_t      w;

    if (!discover(r, type, true, &ctx, &v, NULL, &d, &p)) {
        reply_problem(r, &p);
        return;
    }
    api_view_context(r, ctx, &v);
    jw_init(&w, &r->out);
    if (type) type_info(&w, ctx, &d, &v);
    else attribute_object(&w, ctx, &d.attrs.v[0], true, &v);
    reply_body(r, 200, v.ctype);
}

void api_type_get(request_t *r) { named(r, true); }
void api_attribute_get(request_t *r) { named(r, false); }
