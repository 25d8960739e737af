/*
 * view.c - what an entity answer shows, beyond its format: the projection
 * (attrs, and pick / omit in the language of 4.21), the instances kept
 * (datasetId, 4.5.5), and Linked Entity retrieval (join, joinLevel,
 * containedBy: 4.5.23, Tables 6.4.3.2-1 and 6.5.3.1-1); and the rendering
 * of a retrieve or a query answer with them (api_render), shared by GET
 * /entities/{id}, GET /entities and POST /entityOperations/query.
 *
 * The linked entities are fetched through ops/ (ops_join_fetch: one store
 * call per level) before anything is written, rendered outside the store
 * lock with the same format and options, and released after.
 */
#include "api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A comma-separated list of URIs ("@none" too when none_ok). */
static bool uri_list(request_t *r, const char *what, const char *text, bool none_ok, const char ***out, size_t *n,
                     problem_t *p)
{
    size_t cap = 1;
    for (const char *s = text; *s; s++) if (*s == ',') cap++;
    const char **v = arena_alloc(r->arena, cap * sizeof *v);
    size_t       k = 0;
    for (const char *s = text;;) {
        size_t l = strcspn(s, ",");
        char  *u = arena_strndup(r->arena, s, l);
        if (!(none_ok && !strcmp(u, "@none")) && !model_valid_uri(u))
            return problem_set(p, PB_BAD_REQUEST_DATA, "%s: '%s' is not a URI%s", what, u,
                               none_ok ? " (or @none)" : "");
        v[k++] = u;
        if (!s[l]) break;
        s += l + 1;
    }
    *out = v;
    *n = k;
    return true;
}

static bool is_member(const char *name)
{
    return !strcmp(name, "@id") || !strcmp(name, "@type") || name == MN.scope;
}

bool api_view_set(request_t *r, const ld_context_t *ctx, const api_view_text_t *t, api_view_t *v, problem_t *p)
{
    if (t->attrs && *t->attrs) {
        /* attrs keeps id and type: it only selects attributes; naming a
         * member is not allowed (Table 6.5.3.1-1) */
        const char **names; size_t n;
        if (!api_name_list(r, ctx, t->attrs, &names, &n, false, p)) return false;
        for (size_t i = 0; i < n; i++)
            if (is_member(names[i]) || !strcmp(names[i], "id") || !strcmp(names[i], "type"))
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "attrs names attributes only, not id, type or scope (use pick) (6.4.3.2)");
        const char **all = arena_alloc(r->arena, (n + 2) * sizeof *all);
        all[0] = "@id"; all[1] = "@type";
        memcpy(all + 2, names, n * sizeof *names);
        v->ro.pick = all;
        v->ro.n_pick = n + 2;
        v->attrs = names;
        v->n_attrs = n;
    }
    if (t->pick) {
        if (!*t->pick) return problem_set(p, PB_BAD_REQUEST_DATA, "pick must not be empty");
        projection_t *pr = projection_parse(r->arena, t->pick, ctx, false, p);
        if (!pr) return false;
        v->ro.pick_tree = pr;
        v->has_pick = true;
        v->pick_attrs = arena_alloc(r->arena, pr->n * sizeof *v->pick_attrs);
        v->n_pick_attrs = 0;
        bool every = false;             /* id or type picked: every entity has something picked */
        for (size_t i = 0; i < pr->n; i++) {
            if (!strcmp(pr->names[i], "@id") || !strcmp(pr->names[i], "@type")) every = true;
            else if (!is_member(pr->names[i])) v->pick_attrs[v->n_pick_attrs++] = pr->names[i];
        }
        if (every) v->n_pick_attrs = 0;
    }
    if (t->omit) {
        if (!*t->omit) return problem_set(p, PB_BAD_REQUEST_DATA, "omit must not be empty");
        if (!(v->ro.omit_tree = projection_parse(r->arena, t->omit, ctx, true, p))) return false;
    }
    if (t->join) {
        if (!strcmp(t->join, "inline")) v->join = API_JOIN_INLINE;
        else if (!strcmp(t->join, "flat")) v->join = API_JOIN_FLAT;
        else if (!strcmp(t->join, "@none")) v->join = API_JOIN_NONE;
        else return problem_set(p, PB_BAD_REQUEST_DATA, "join must be inline, flat or @none, not '%s' (4.5.23)", t->join);
    }
    if (t->join_level) {
        char *end;
        errno = 0;
        long l = strtol(t->join_level, &end, 10);
        if (errno || *end || end == t->join_level || l < 1 || l > PROJECTION_MAX_DEPTH)
            return problem_set(p, PB_BAD_REQUEST_DATA, "joinLevel must be an integer from 1 to %d, not '%s'",
                               PROJECTION_MAX_DEPTH, t->join_level);
        v->join_level = (unsigned)l;
    }
    if (t->contained_by && !uri_list(r, "containedBy", t->contained_by, false, &v->contained_by,
                                     &v->n_contained_by, p))
        return false;
    if (t->dataset_id && !uri_list(r, "datasetId", t->dataset_id, true, &v->ro.dataset_ids,
                                   &v->ro.n_dataset_ids, p))
        return false;
    return true;
}

bool api_view_params(request_t *r, const ld_context_t *ctx, api_view_t *v, problem_t *p)
{
    api_view_text_t t = {0};
    bool            any = false;

    /* one pass over the query string rather than a lookup per name (the
     * retrieve and query fast paths read them on every request) */
    for (int i = 0; i < r->nparams; i++) {
        const char  *k = r->params[i].key;
        const char **slot = NULL;
        switch (k[0]) {
        case 'a': if (!strcmp(k, "attrs")) slot = &t.attrs; break;
        case 'p': if (!strcmp(k, "pick")) slot = &t.pick; break;
        case 'o': if (!strcmp(k, "omit")) slot = &t.omit; break;
        case 'j': if (!strcmp(k, "join")) slot = &t.join; else if (!strcmp(k, "joinLevel")) slot = &t.join_level; break;
        case 'c': if (!strcmp(k, "containedBy")) slot = &t.contained_by; break;
        case 'd': if (!strcmp(k, "datasetId")) slot = &t.dataset_id; break;
        default: break;
        }
        if (slot && !*slot) {           /* the first one, as req_param() */
            *slot = r->params[i].value;
            r->params_used |= 1u << i;
            any = true;
        }
    }
    if (!any) return true;
    return api_view_set(r, ctx, &t, v, p) && api_view_check(v, p);
}

bool api_view_check(const api_view_t *v, problem_t *p)
{
    const render_opts_t *o = &v->ro;
    if (o->pick_tree && o->omit_tree)
        return problem_set(p, PB_BAD_REQUEST_DATA, "pick and omit cannot be used together (4.21)");
    if ((o->pick_tree || o->omit_tree) && v->attrs)
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s cannot be used together with attrs (4.21)",
                           o->pick_tree ? "pick" : "omit");
    unsigned depth = o->pick_tree ? o->pick_tree->depth : o->omit_tree ? o->omit_tree->depth : 0;
    unsigned level = v->join_level ? v->join_level : 1;
    if (depth && v->join == API_JOIN_NONE)
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "nested %s terms (rel{...}) need Linked Entity retrieval: join=inline or flat (4.21)",
                           o->pick_tree ? "pick" : "omit");
    if (depth > level)
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s nests %u levels deep, deeper than joinLevel %u (4.21)",
                           o->pick_tree ? "pick" : "omit", depth, level);
    return true;
}

/* One entity as JSON-LD or a GeoJSON Feature. */
static void render_one(json_writer_t *w, const api_view_t *v, const cr_entity_t *e, const render_opts_t *ro)
{
    if (v->accept == ACC_GEOJSON) entity_render_geojson(w, e, ro);
    else entity_render(w, e, ro);
}

/* Prefer: ngsi-ld=<version> (4.3.6.8): the entities as that version shows
 * them, and the Preference-Applied header that says so. */
static cr_entity_t *const *conform_all(request_t *r, const api_view_t *v, cr_entity_t *const *items, size_t n)
{
    if (v->version >= 109)
        return items;
    cr_entity_t **c = arena_alloc(r->arena, (n ? n : 1) * sizeof *c);
    for (size_t i = 0; i < n; i++)
        c[i] = (cr_entity_t *)entity_conform(r->arena, items[i], v->version);
    return c;
}

bool api_render(request_t *r, const ld_context_t *ctx, api_view_t *v, cr_entity_t *const *items, size_t n,
                bool array, problem_t *p)
{
    if (v->version) {
        reply_header(r, "Preference-Applied",
                     arena_printf(r->arena, "ngsi-ld=%u.%u", v->version / 100, v->version % 100));
        items = conform_all(r, v, items, n);
    }
    json_writer_t w;
    bool          flat = v->join == API_JOIN_FLAT;
    bool          geo = v->accept == ACC_GEOJSON;
    bool          collection = geo && (array || flat);

    if (v->join == API_JOIN_NONE && !collection) {      /* the plain answer: as direct as it can be */
        jw_init(&w, &r->out);
        if (array) jw_array_begin(&w);
        for (size_t i = 0; i < n; i++) render_one(&w, v, items[i], &v->ro);
        if (array) jw_array_end(&w);
        return true;
    }
    ops_linked_t  l = {0};
    render_join_t rj;
    size_t        left = OPS_JOIN_MAX_ENTITIES;
    bool          over = false;
    render_opts_t ro = v->ro;

    if (v->join != API_JOIN_NONE && n) {
        ops_req_t  rq = api_req(r, ctx);
        ops_join_t j = {.flat = flat, .level = v->join_level ? v->join_level : 1,
                        .contained_by = v->contained_by, .n_contained_by = v->n_contained_by,
                        .pick = v->ro.pick_tree, .omit = v->ro.omit_tree,
                        .dataset_ids = v->ro.dataset_ids, .n_dataset_ids = v->ro.n_dataset_ids};
        if (!j.pick && v->ro.n_pick) {      /* attrs: a flat pick list (id, type and the names) */
            projection_t *pr = arena_calloc(r->arena, sizeof *pr);
            pr->names = v->ro.pick;
            pr->n = v->ro.n_pick;
            j.pick = pr;
        }
        if (!ops_join_fetch(&rq, items, n, &j, &l, p)) return false;
        if (!flat) {
            rj = (render_join_t){.find = ops_linked_find, .ud = &l, .level = j.level,
                                 .seen = v->contained_by, .n_seen = v->n_contained_by,
                                 .left = &left, .over = &over};
            ro.join = &rj;
        }
    }
    jw_init(&w, &r->out);
    if (collection) {
        /* 5.2.30: the @context once, on the collection */
        ro.context_json = NULL;
        jw_object_begin(&w);
        jw_key(&w, "type");
        jw_string(&w, "FeatureCollection");
        jw_key(&w, "features");
    }
    if (array || flat) jw_array_begin(&w);
    for (size_t i = 0; i < n; i++) render_one(&w, v, items[i], &ro);
    cr_entity_t *const *linked = flat && v->version ? conform_all(r, v, l.items, l.n) : l.items;
    for (size_t i = 0; flat && i < l.n; i++) {
        render_opts_t lo = ro;            /* 5.7.1.5: the projection applies to every entity */
        lo.pick_tree = l.pick[i];
        lo.omit_tree = l.omit[i];
        render_one(&w, v, linked[i], &lo);
    }
    if (array || flat) jw_array_end(&w);
    if (collection) {
        if (v->ro.context_json) {
            jw_key(&w, "@context");
            jw_raw(&w, v->ro.context_json, strlen(v->ro.context_json));
        }
        jw_object_end(&w);
    }
    ops_linked_release(&l);
    if (over) {
        sb_clear(&r->out);
        return problem_set(p, PB_TOO_MANY_RESULTS,
                           "the answer would inline more than %d linked entities (4.5.23): lower joinLevel "
                           "or use join=flat", OPS_JOIN_MAX_ENTITIES);
    }
    return true;
}
