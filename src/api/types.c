/*
 * types.c - discovery: GET /types, /types/{type}, /attributes,
 * /attributes/{attrId} (6.25-6.28; operations 5.7.5-5.7.10; representations
 * 4.5.10-4.5.15), with details=true.
 *
 * The answer is gathered in one pass over the tenant's entities
 * (store_foreach) into small interned-pointer sets in the request arena, then
 * rendered with names compacted by the request's @context. Cost: O(entities)
 * per call; discovery is not a hot path.
 */
#include "api.h"

#include <string.h>

/* An insertion-ordered set of interned names, each with a set of related
 * names (attributes of a type, types of an attribute) and kinds and a count. */
typedef struct nameinfo {
    const char  *name;
    const char **rel;  size_t n_rel, cap_rel;
    unsigned     kinds;          /* bit (1 << attr_kind_t) */
    size_t       count;
} nameinfo_t;

typedef struct nameset {
    arena_t    *a;
    nameinfo_t *v;
    size_t      n, cap;
    size_t     *slot;            /* open addressing: index+1, 0 = empty */
    size_t      nslot;
} nameset_t;

static void ns_init(nameset_t *s, arena_t *a)
{
    memset(s, 0, sizeof *s);
    s->a = a;
}

static nameinfo_t *ns_get(nameset_t *s, const char *name)
{
    if (s->n * 2 >= s->nslot) {
        size_t  ns = s->nslot ? s->nslot * 2 : 64;
        size_t *sl = arena_calloc(s->a, ns * sizeof *sl);
        for (size_t i = 0; i < s->n; i++) {
            size_t h = cr_hash_ptr(s->v[i].name) & (ns - 1);
            while (sl[h]) h = (h + 1) & (ns - 1);
            sl[h] = i + 1;
        }
        s->slot = sl;
        s->nslot = ns;
    }
    size_t h = cr_hash_ptr(name) & (s->nslot - 1);
    while (s->slot[h]) {
        if (s->v[s->slot[h] - 1].name == name) return &s->v[s->slot[h] - 1];
        h = (h + 1) & (s->nslot - 1);
    }
    if (s->n == s->cap) {
        size_t      nc = s->cap ? s->cap * 2 : 16;
        nameinfo_t *nv = arena_alloc(s->a, nc * sizeof *nv);
        if (s->n) memcpy(nv, s->v, s->n * sizeof *nv);
        s->v = nv;
        s->cap = nc;
    }
    nameinfo_t *ni = &s->v[s->n];
    memset(ni, 0, sizeof *ni);
    ni->name = name;
    s->slot[h] = ++s->n;
    return ni;
}

static void ni_add_rel(arena_t *a, nameinfo_t *ni, const char *rel)
{
    for (size_t i = 0; i < ni->n_rel; i++) if (ni->rel[i] == rel) return;
    if (ni->n_rel == ni->cap_rel) {
        size_t       nc = ni->cap_rel ? ni->cap_rel * 2 : 8;
        const char **nr = arena_alloc(a, nc * sizeof *nr);
        if (ni->n_rel) memcpy(nr, ni->rel, ni->n_rel * sizeof *nr);
        ni->rel = nr;
        ni->cap_rel = nc;
    }
    ni->rel[ni->n_rel++] = rel;
}

typedef struct gather {
    nameset_t   types, attrs;
    const char *only_type;       /* /types/{type}: only entities of it */
    const char *only_attr;       /* /attributes/{attr}: only this attribute */
} gather_t;

static void gather_one(void *ud, const cr_entity_t *e)
{
    gather_t *g = ud;
    if (g->only_type && !entity_has_type(e, g->only_type)) return;
    for (uint16_t t = 0; t < e->n_types; t++) {
        if (g->only_type && e->types[t] != g->only_type) continue;
        nameinfo_t *ti = ns_get(&g->types, e->types[t]);
        ti->count++;
        for (uint16_t i = 0; i < e->n_attrs; i++) {
            const cr_attr_t *at = &e->attrs[i];
            if (g->only_attr && at->name != g->only_attr) continue;
            ni_add_rel(g->types.a, ti, at->name);
        }
    }
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        if (g->only_attr && at->name != g->only_attr) continue;
        nameinfo_t *ai = ns_get(&g->attrs, at->name);
        ai->count++;
        ai->kinds |= 1u << at->kind;
        for (uint16_t t = 0; t < e->n_types; t++) ni_add_rel(g->attrs.a, ai, e->types[t]);
    }
}

static bool gather(request_t *r, gather_t *g, problem_t *p)
{
    ns_init(&g->types, r->arena);
    ns_init(&g->attrs, r->arena);
    return store_foreach(api_store, r->tenant, NULL, gather_one, g, p);
}

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

/* Common start: context, view (only json/ld+json), details flag. */
static bool begin(request_t *r, const ld_context_t **ctx, api_view_t *v, bool *details, problem_t *p)
{
    *ctx = api_context(r, NULL, p);
    if (!*ctx) return false;
    if (!api_view(r, *ctx, false, v, p)) return false;
    if (details) {
        const char *d = req_param(r, "details");
        if (d && strcmp(d, "true") && strcmp(d, "false"))
            return problem_set(p, PB_BAD_REQUEST_DATA, "details must be true or false");
        *details = d && !strcmp(d, "true");
    }
    (void)req_param(r, "local");
    return api_no_unknown_params(r, p);
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
                      const char *member, const nameset_t *names, api_view_t *v)
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

void api_types_list(request_t *r)
{
    problem_t p = {0};
    const ld_context_t *ctx;
    api_view_t v;
    bool       details = false;
    gather_t   g = {0};
    json_writer_t w;

    if (!begin(r, &ctx, &v, &details, &p) || !gather(r, &g, &p)) {
        reply_problem(r, &p);
        return;
    }
    api_view_context(r, ctx, &v);
    jw_init(&w, &r->out);
    if (details) {
        jw_array_begin(&w);
        for (size_t i = 0; i < g.types.n; i++) {
            nameinfo_t *t = &g.types.v[i];
            jw_object_begin(&w);
            jw_key(&w, "id"); jw_string(&w, t->name);
            jw_key(&w, "type"); jw_string(&w, "EntityType");
            jw_key(&w, "typeName"); jw_string(&w, ld_compact(ctx, t->name));
            jw_key(&w, "attributeNames"); names_array(&w, ctx, t->rel, t->n_rel);
            end_object(&w, &v);
        }
        jw_array_end(&w);
    } else {
        name_list(&w, r, ctx, "EntityTypeList", "typeList", &g.types, &v);
    }
    reply_body(r, 200, v.ctype);
}

/* /types/{type} and /attributes/{attrId}: what the entities say of the one
 * type or attribute named in the path; ResourceNotFound when none has it. */
static bool gather_named(request_t *r, bool type, const ld_context_t **ctx, api_view_t *v, gather_t *g,
                         problem_t *p)
{
    if (!begin(r, ctx, v, NULL, p)) return false;
    const char *name = ld_expand(*ctx, r->pathv[0]);
    if (type) g->only_type = name;
    else g->only_attr = name;
    if (!gather(r, g, p)) return false;
    if ((type ? g->types.n : g->attrs.n) == 0)
        return problem_set(p, PB_RESOURCE_NOT_FOUND, type ? "no entity of type %s" : "no entity has an attribute %s",
                           r->pathv[0]);
    return true;
}

void api_type_get(request_t *r)
{
    problem_t p = {0};
    const ld_context_t *ctx;
    api_view_t v;
    gather_t   g = {0};
    json_writer_t w;

    if (!gather_named(r, true, &ctx, &v, &g, &p)) goto fail;
    nameinfo_t *t = &g.types.v[0];
    api_view_context(r, ctx, &v);
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "id"); jw_string(&w, t->name);
    jw_key(&w, "type"); jw_string(&w, "EntityTypeInfo");
    jw_key(&w, "typeName"); jw_string(&w, ld_compact(ctx, t->name));
    jw_key(&w, "entityCount"); jw_int(&w, (int64_t)t->count);
    jw_key(&w, "attributeDetails");
    jw_array_begin(&w);
    for (size_t i = 0; i < t->n_rel; i++) {
        nameinfo_t *a = ns_get(&g.attrs, t->rel[i]);
        jw_object_begin(&w);
        jw_key(&w, "id"); jw_string(&w, a->name);
        jw_key(&w, "type"); jw_string(&w, "Attribute");
        jw_key(&w, "attributeName"); jw_string(&w, ld_compact(ctx, a->name));
        jw_key(&w, "attributeTypes"); kinds_array(&w, a->kinds);
        jw_object_end(&w);
    }
    jw_array_end(&w);
    end_object(&w, &v);
    reply_body(r, 200, v.ctype);
    return;
fail:
    reply_problem(r, &p);
}

static void attribute_object(json_writer_t *w, const ld_context_t *ctx, nameinfo_t *a, bool full, api_view_t *v)
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

void api_attributes_list(request_t *r)
{
    problem_t p = {0};
    const ld_context_t *ctx;
    api_view_t v;
    bool       details = false;
    gather_t   g = {0};
    json_writer_t w;

    if (!begin(r, &ctx, &v, &details, &p) || !gather(r, &g, &p)) {
        reply_problem(r, &p);
        return;
    }
    api_view_context(r, ctx, &v);
    jw_init(&w, &r->out);
    if (details) {
        jw_array_begin(&w);
        for (size_t i = 0; i < g.attrs.n; i++) attribute_object(&w, ctx, &g.attrs.v[i], false, &v);
        jw_array_end(&w);
    } else {
        name_list(&w, r, ctx, "AttributeList", "attributeList", &g.attrs, &v);
    }
    reply_body(r, 200, v.ctype);
}

void api_attribute_get(request_t *r)
{
    problem_t p = {0};
    const ld_context_t *ctx;
    api_view_t v;
    gather_t   g = {0};
    json_writer_t w;

    if (!gather_named(r, false, &ctx, &v, &g, &p)) goto fail;
    api_view_context(r, ctx, &v);
    jw_init(&w, &r->out);
    attribute_object(&w, ctx, &g.attrs.v[0], true, &v);
    reply_body(r, 200, v.ctype);
    return;
fail:
    reply_problem(r, &p);
}
