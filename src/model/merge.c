/*
 * merge.c - the operations that change an entity (clause 5.6): replace
 * entity, merge entity, append / update attributes, partial attribute
 * update, replace attribute, delete attribute.
 *
 * entity_apply() never touches `old` (a frozen entity, shared with readers)
 * nor `patch` (a request draft): it builds a new draft in the request arena
 * whose attribute structs are copies, and whose values and strings may point
 * into both. The store freezes that draft and swaps it in.
 *
 * The work is done on a scratch array of attribute slots (old attributes
 * first, patch attributes appended), each slot marked kept / changed /
 * deleted, and compacted once at the end. Looking up an instance is a linear
 * scan with pointer comparison on the interned name: O(old x patch), fine for
 * the tens of attributes entities carry; a patch with thousands of attributes
 * against an entity with thousands would want a hash here.
 *
 * OP_UPDATE_ATTRS follows 5.6.2.4 of V1.9.1: a matching instance is
 * replaced, a missing one appended, an NGSI-LD Null deletes.
 */
#include "model.h"
#include "lindex.h"

#include <string.h>

#define NGSI_LD_NULL "urn:ngsi-ld:null"

enum { SLOT_KEPT = 0, SLOT_CHANGED, SLOT_DELETED };

typedef struct work {
    arena_t     *a;
    cr_attr_t   *attrs;     /* slots */
    uint8_t     *state;     /* SLOT_* per slot */
    size_t       n, cap;
    attrmap_t    map;       /* slots by (name, datasetId) */
    int64_t      now;
    op_result_t *res;
    bool         changed;   /* anything at all (attributes, types, scope) */
} work_t;

/* ------------------------------------------------------------- helpers */

/* "@none" names the default instance just as a missing datasetId does. */
static const char *ds_norm(const char *ds)
{
    if (ds && strcmp(ds, "@none") == 0)
        return NULL;
    return ds;
}

static bool ds_eq(const char *x, const char *y)
{
    x = ds_norm(x);
    y = ds_norm(y);
    if (x == y)
        return true;
    if (!x || !y)
        return false;
    return strcmp(x, y) == 0;
}

static bool is_null_marker(const json_t *v)
{
    return v && (v->type == JSON_NULL ||
                 (v->type == JSON_STRING && strcmp(v->str, NGSI_LD_NULL) == 0));
}

static void outcome_add(work_t *w, const char *name, bool updated, const char *reason)
{
    op_result_t *r = w->res;

    if (!r)
        return;
    if (r->n == r->cap) {
        size_t          ncap  = r->cap ? r->cap * 2 : 8;
        attr_outcome_t *items = arena_alloc(w->a, ncap * sizeof *items);

        if (r->n)
            memcpy(items, r->items, r->n * sizeof *items);
        r->items = items;
        r->cap   = ncap;
    }
    r->items[r->n].name    = name;
    r->items[r->n].updated = updated;
    r->items[r->n].reason  = updated ? NULL : reason;
    r->n++;
    if (updated)
        r->n_updated++;
    else
        r->n_not_updated++;
}

/* Index of the live slot holding (name, dataset_id), or -1. */
static long slot_find(const work_t *w, const char *name, const char *ds)
{
    /* candidates of one key come in slot order (they share a home bucket) */
    attrmap_foreach(&w->map, name, ds, w->n, i)
        if (w->state[i] != SLOT_DELETED && w->attrs[i].name == name &&
            ds_eq(w->attrs[i].dataset_id, ds))
            return (long)i;
    return -1;
}

static void slot_add(work_t *w, const cr_attr_t *at)
{
    /* cap is old->n_attrs + patch->n_attrs: one slot per patch attribute at most */
    w->attrs[w->n] = *at;
    w->state[w->n] = SLOT_CHANGED;
    attrmap_put(&w->map, at->name, at->dataset_id, w->n);
    w->n++;
    w->changed = true;
}

/* An attribute with its kind and value, and its sub-attributes likewise
 * (Nulls aside: they are stripped). */
static bool attr_whole(const cr_attr_t *at)
{
    if (at->is_null)
        return true;
    if (!at->kind || !at->value)
        return false;
    for (size_t i = 0; i < at->n_sub; i++)
        if (!attr_whole(&at->sub[i]))
            return false;
    return true;
}

/* v without the members (at any depth of objects) whose value is the NGSI-LD
 * Null string; v itself when it has none. JSON nulls are left alone. */
static json_t *drop_null_members(arena_t *a, json_t *v)
{
    bool any = false;
    if (!json_is_object(v))
        return v;
    json_foreach(m, v)
        if ((json_is_string(m) && strcmp(m->str, NGSI_LD_NULL) == 0) || json_is_object(m)) any = true;
    if (!any)
        return v;
    json_t *out = json_new(a, JSON_OBJECT), *tail = NULL;
    json_foreach(m, v) {
        if (json_is_string(m) && strcmp(m->str, NGSI_LD_NULL) == 0)
            continue;
        json_t *n = drop_null_members(a, m);
        if (n == m) {
            n = arena_alloc(a, sizeof *n);
            *n = *m;
        }
        n->next = NULL;
        json_push(out, &tail, m->key, n);
    }
    return out;
}

/* at without NGSI-LD Nulls (at any depth): Null sub-attributes, and Null
 * members of an object Property value. A Null in a
 * newly added or replacing attribute deletes nothing and must not be stored.
 * Keeps at's own sub array when there is nothing to strip. */
static void strip_nulls(arena_t *a, cr_attr_t *at)
{
    size_t     keep = 0;
    cr_attr_t *sub;

    if (at->kind == ATTR_PROPERTY)
        at->value = drop_null_members(a, at->value);
    if (!at->n_sub)
        return;
    for (size_t i = 0; i < at->n_sub; i++)
        if (!at->sub[i].is_null)
            keep++;
    sub = arena_alloc(a, (keep ? keep : 1) * sizeof *sub);
    keep = 0;
    for (size_t i = 0; i < at->n_sub; i++) {
        if (at->sub[i].is_null)
            continue;
        sub[keep] = at->sub[i];
        strip_nulls(a, &sub[keep]);
        keep++;
    }
    at->sub   = keep ? sub : NULL;
    at->n_sub = (uint16_t)keep;
}

/* RFC 7396 JSON Merge Patch of two values (5.5.12 example 2): objects merge
 * member by member, a null (JSON null or the NGSI-LD Null string) removes a
 * member, anything else replaces; an object patch on a target that is not an
 * object applies to {} (so its nulls never reach the store). Nodes of target
 * are shallow-copied (their `next` links belong to the old tree), subtrees
 * are shared. */
static json_t *json_merge_patch(arena_t *a, const json_t *target, const json_t *patch)
{
    json_t *out, *tail = NULL;

    if (!json_is_object(patch))
        return (json_t *)patch;
    if (!json_is_object(target))
        target = NULL;

    out = json_new(a, JSON_OBJECT);
    if (target) json_foreach(m, target) {
        json_t *pm = json_get(patch, m->key);
        json_t *n;

        if (pm)
            continue;                   /* handled with the patch members below */
        n = arena_alloc(a, sizeof *n);
        *n = *m;
        n->next = NULL;
        json_push(out, &tail, m->key, n);
    }
    json_foreach(pm, patch) {
        const json_t *tm = target ? json_get(target, pm->key) : NULL;
        json_t       *n;

        if (is_null_marker(pm))
            continue;
        if (json_is_object(pm)) {
            n = json_merge_patch(a, tm, pm);
        } else {
            n = arena_alloc(a, sizeof *n);
            *n = *pm;
            n->next = NULL;
        }
        json_push(out, &tail, pm->key, n);
    }
    return out;
}

static bool check_count(size_t n, const char *what, problem_t *p)
{
    if (n > CR_ATTRS_MAX)
        return problem_set(p, PB_BAD_REQUEST_DATA, "too many %s (%zu, at most %u)",
                           what, n, (unsigned)CR_ATTRS_MAX);
    return true;
}

/* ------------------------------------------------- attribute-level merge */

static bool merge_attr(arena_t *a, cr_attr_t *out, const cr_attr_t *old,
                       const cr_attr_t *patch, int64_t now, bool deep, problem_t *p);

/* Sub-attributes of old merged with those of patch (5.5.12): a Null deletes,
 * an existing one is merged, a new one is added. */
static bool merge_subs(arena_t *a, cr_attr_t *out, const cr_attr_t *old,
                       const cr_attr_t *patch, int64_t now, bool deep, problem_t *p)
{
    size_t     cap = (size_t)old->n_sub + patch->n_sub, n = 0;
    cr_attr_t *sub;
    uint8_t   *gone;
    attrmap_t  map;

    if (!patch->n_sub) {
        out->sub   = old->sub;
        out->n_sub = old->n_sub;
        return true;
    }
    sub  = arena_alloc(a, cap * sizeof *sub);
    gone = arena_calloc(a, cap);
    attrmap_init(&map, a, cap);
    for (size_t i = 0; i < old->n_sub; i++) {
        attrmap_put(&map, old->sub[i].name, old->sub[i].dataset_id, n);
        sub[n++] = old->sub[i];
    }

    for (size_t j = 0; j < patch->n_sub; j++) {
        const cr_attr_t *ps = &patch->sub[j];
        long             hit = -1;

        attrmap_foreach(&map, ps->name, ps->dataset_id, n, i)   /* in order, as slot_find */
            if (!gone[i] && sub[i].name == ps->name && ds_eq(sub[i].dataset_id, ps->dataset_id)) {
                hit = (long)i;
                break;
            }
        if (ps->is_null) {
            if (hit >= 0)
                gone[hit] = 1;
            continue;
        }
        if (hit >= 0) {
            cr_attr_t merged;

            if (!merge_attr(a, &merged, &sub[hit], ps, now, deep, p))
                return false;
            sub[hit] = merged;
        } else {
            /* a new sub-attribute must be whole, even in a partial update (5.6.4) */
            if (!attr_whole(ps))
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "new sub-attribute %s needs its type and value", ps->name);
            sub[n] = *ps;
            strip_nulls(a, &sub[n]);
            sub[n].created_at = sub[n].modified_at = now;
            attrmap_put(&map, ps->name, ps->dataset_id, n);
            n++;
        }
    }

    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!gone[i])
            sub[k++] = sub[i];
    if (!check_count(k, "sub-attributes", p))
        return false;
    out->sub   = k ? sub : NULL;
    out->n_sub = (uint16_t)k;
    return true;
}

/* old merged with patch into out: only the members patch gives change.
 * deep: values that are JSON objects are merge-patched (merge, 5.5.12)
 * rather than replaced (partial update, 5.5.8). A kind change replaces the
 * attribute whole (keeping createdAt): the old members may not fit the new
 * kind (a unitCode on a Relationship). */
/* A text for a languageMap entry: a string, or a non-empty array of strings. */
static bool is_text(const json_t *v)
{
    if (json_is_string(v))
        return true;
    if (!json_is_array(v) || v->len == 0)
        return false;
    json_foreach(s, v)
        if (!json_is_string(s))
            return false;
    return true;
}

void entity_patch_simplified(arena_t *a, cr_entity_t *patch, bool key_values, const char *lang)
{
    for (uint16_t i = 0; i < patch->n_attrs; i++) {
        cr_attr_t *at = &patch->attrs[i];
        if (at->is_null)
            continue;
        /* a text in any representation (bare, concise, normalized, with
         * sub-attributes or a datasetId); not with a unitCode, which a
         * LanguageProperty cannot have */
        if (lang && at->kind == ATTR_PROPERTY && is_text(at->value) && !at->unit_code) {
            json_t *map = json_new(a, JSON_OBJECT);
            json_add(map, lang, at->value);
            at->value = map;
            at->kind = ATTR_LANGUAGEPROPERTY;
        } else if (key_values && at->kind == ATTR_PROPERTY) {
            at->kind = 0;
        }
    }
}

/* A bare value (a simplified merge, kind 0) must fit the kind of the
 * attribute it goes into; the kinds whose value has its own shape want their
 * concise form ({"languageMap": ...}, {"vocab": ...}, {"objectList": ...}). */
static bool bare_value_fits(const cr_attr_t *old, const json_t *v, problem_t *p)
{
    switch (old->kind) {
    case ATTR_RELATIONSHIP:
        if (json_is_string(v) && model_valid_uri(v->str))
            return true;
        if (json_is_array(v) && v->len) {
            json_foreach(o, v)
                if (!json_is_string(o) || !model_valid_uri(o->str))
                    return problem_set(p, PB_BAD_REQUEST_DATA, "relationship %s: the objects must be URIs", old->name);
            return true;
        }
        return problem_set(p, PB_BAD_REQUEST_DATA, "relationship %s: the object must be a URI", old->name);
    case ATTR_GEOPROPERTY:
        return geo_validate(v, p);
    case ATTR_LISTPROPERTY:
        if (json_is_array(v))
            return true;
        return problem_set(p, PB_BAD_REQUEST_DATA, "ListProperty %s: the value must be an array", old->name);
    case ATTR_LANGUAGEPROPERTY:
    case ATTR_VOCABPROPERTY:
    case ATTR_LISTRELATIONSHIP:
        return problem_set(p, PB_BAD_REQUEST_DATA, "%s %s: give its concise form (with %s), not a bare value",
                           attr_kind_name((attr_kind_t)old->kind), old->name,
                           old->kind == ATTR_LANGUAGEPROPERTY ? "languageMap"
                           : old->kind == ATTR_VOCABPROPERTY ? "vocab" : "objectList");
    default:
        return true;
    }
}

/* A fragment without a type (kind 0) takes the kind of the attribute it goes
 * into, so the members its parse could not check against a kind are checked
 * here, as parse.c checks them in a typed attribute: objectType only in a
 * Relationship (5.2.6), unitCode not in a Relationship, LanguageProperty,
 * VocabProperty or JsonProperty. */
static bool members_fit(const cr_attr_t *old, const cr_attr_t *patch, problem_t *p)
{
    bool relationship = old->kind == ATTR_RELATIONSHIP || old->kind == ATTR_LISTRELATIONSHIP;

    if (patch->object_type && !relationship)
        return problem_set(p, PB_BAD_REQUEST_DATA, "attribute '%s': 'objectType' is only allowed in a "
                           "Relationship, and it is a %s", old->name, attr_kind_name((attr_kind_t)old->kind));
    if (patch->unit_code && (relationship || old->kind == ATTR_LANGUAGEPROPERTY ||
                             old->kind == ATTR_VOCABPROPERTY || old->kind == ATTR_JSONPROPERTY))
        return problem_set(p, PB_BAD_REQUEST_DATA, "attribute '%s': 'unitCode' is not allowed in a %s",
                           old->name, attr_kind_name((attr_kind_t)old->kind));
    return true;
}

static bool merge_attr(arena_t *a, cr_attr_t *out, const cr_attr_t *old,
                       const cr_attr_t *patch, int64_t now, bool deep, problem_t *p)
{
    if (!patch->kind && patch->value && !bare_value_fits(old, patch->value, p))
        return false;
    if (!patch->kind && !members_fit(old, patch, p))
        return false;
    if (patch->kind && patch->kind != old->kind) {
        *out = *patch;
        strip_nulls(a, out);
        out->name        = old->name;
        out->dataset_id  = old->dataset_id;
        out->created_at  = old->created_at;
        out->modified_at = now;
        return true;
    }

    *out = *old;
    out->is_null = 0;
    if (patch->value) {
        bool mergeable = deep && (old->kind == ATTR_PROPERTY || old->kind == ATTR_LANGUAGEPROPERTY ||
                                  old->kind == ATTR_JSONPROPERTY);
        out->value = mergeable ? json_merge_patch(a, old->value, patch->value) : patch->value;
    }
    if (patch->unit_code)
        out->unit_code = strcmp(patch->unit_code, NGSI_LD_NULL) == 0 ? NULL : patch->unit_code;
    if (patch->object_type)
        out->object_type = strcmp(patch->object_type, NGSI_LD_NULL) == 0 ? NULL : patch->object_type;
    if (patch->observed_at != CR_NO_TIME)
        out->observed_at = patch->observed_at;
    if (!merge_subs(a, out, old, patch, now, deep, p))
        return false;
    out->created_at  = old->created_at;
    out->modified_at = now;
    return true;
}

/* patch replacing old whole (update, append, replace attribute): createdAt kept. */
static void replace_attr(arena_t *a, cr_attr_t *out, const cr_attr_t *old,
                         const cr_attr_t *patch, int64_t now)
{
    *out = *patch;
    strip_nulls(a, out);
    out->is_null     = 0;
    out->name        = old->name;
    out->dataset_id  = old->dataset_id;
    out->created_at  = old->created_at;
    out->modified_at = now;
}

static void add_new(work_t *w, const cr_attr_t *patch)
{
    cr_attr_t at = *patch;

    strip_nulls(w->a, &at);
    at.is_null     = 0;
    at.dataset_id  = ds_norm(at.dataset_id);
    at.created_at  = w->now;
    at.modified_at = w->now;
    slot_add(w, &at);
}

/* --------------------------------------------------------- entity level */

/* old's types plus patch's new ones (5.6.2.4, 5.6.3.4, 5.6.17.4); false
 * when there would be more than the 16-bit count holds. */
static bool union_types(work_t *w, cr_entity_t *ne, const cr_entity_t *old, const cr_entity_t *patch,
                        problem_t *p)
{
    size_t       n = old->n_types;
    const char **t;
    ptrset_t     seen;

    ne->types   = old->types;
    ne->n_types = old->n_types;
    if (!patch || !patch->n_types)
        return true;
    t = arena_alloc(w->a, ((size_t)old->n_types + patch->n_types) * sizeof *t);
    ptrset_init(&seen, w->a, (size_t)old->n_types + patch->n_types);
    for (size_t i = 0; i < old->n_types; i++)
        ptrset_add(&seen, t[i] = old->types[i]);
    for (size_t j = 0; j < patch->n_types; j++)
        if (ptrset_add(&seen, patch->types[j]))
            t[n++] = patch->types[j];
    if (!check_count(n, "entity types", p))
        return false;
    if (n != old->n_types) {
        ne->types   = t;
        ne->n_types = (uint16_t)n;
        w->changed  = true;
    }
    return true;
}

static bool scope_has(const json_t *scope, const char *s)
{
    if (json_is_string(scope))
        return strcmp(scope->str, s) == 0;
    if (json_is_array(scope))
        json_foreach(c, scope)
            if (json_is_string(c) && strcmp(c->str, s) == 0)
                return true;
    return false;
}

/* The scopes of patch not yet in old, appended (5.6.3.4 without overwrite). */
static json_t *scope_union(arena_t *a, const json_t *old, const json_t *patch)
{
    json_t *out = json_new(a, JSON_ARRAY), *tail = NULL;
    size_t  added = 0;

    if (json_is_string(old)) {
        json_push(out, &tail, NULL, json_new_string(a, old->str));
    } else if (json_is_array(old)) {
        json_foreach(c, old)
            json_push(out, &tail, NULL, json_new_string(a, c->str));
    }
    if (json_is_string(patch)) {
        if (!scope_has(old, patch->str)) {
            json_push(out, &tail, NULL, json_new_string(a, patch->str));
            added++;
        }
    } else if (json_is_array(patch)) {
        json_foreach(c, patch)
            if (json_is_string(c) && !scope_has(old, c->str) && !scope_has(out, c->str)) {
                json_push(out, &tail, NULL, json_new_string(a, c->str));
                added++;
            }
    }
    if (!added)
        return (json_t *)old;
    if (out->len == 1)
        return out->child;
    return out;
}

/* mode: 0 = replace, 1 = union, 2 = replace only when old has a scope */
static void apply_scope(work_t *w, cr_entity_t *ne, const cr_entity_t *old,
                        const cr_entity_t *patch, int mode)
{
    ne->scope = old->scope;
    if (!patch || !patch->scope)
        return;
    if (is_null_marker(patch->scope)) {
        if (old->scope) {
            ne->scope  = NULL;
            w->changed = true;
        }
        return;
    }
    if (mode == 2 && !old->scope) {     /* 5.6.2.4: ignored, and said so */
        outcome_add(w, MN.scope, false, "the entity has no scope to replace (5.6.2.4)");
        return;
    }
    if (mode == 1 && old->scope) {
        json_t *u = scope_union(w->a, old->scope, patch->scope);

        if (u != old->scope) {
            ne->scope  = u;
            w->changed = true;
        }
        return;
    }
    ne->scope  = patch->scope;
    w->changed = true;
}

/* The patch attribute an attribute-level op (PATCH/PUT .../attrs/{attrId}) acts on. */
static const cr_attr_t *patch_target(const cr_entity_t *patch, const char *name, problem_t *p)
{
    if (!patch || !patch->n_attrs) {
        problem_set(p, PB_BAD_REQUEST_DATA, "no attribute given");
        return NULL;
    }
    for (size_t i = 0; i < patch->n_attrs; i++)
        if (patch->attrs[i].name == name)
            return &patch->attrs[i];
    if (patch->n_attrs == 1)
        return &patch->attrs[0];
    problem_set(p, PB_BAD_REQUEST_DATA, "the body does not hold attribute %s", name);
    return NULL;
}

static bool op_attr_level(work_t *w, const cr_entity_t *old, const cr_entity_t *patch,
                          entity_op_t op, const op_args_t *args, problem_t *p)
{
    const char *name = args ? args->attr_name : NULL;

    if (!name)
        return problem_set(p, PB_BAD_REQUEST_DATA, "no target attribute name");

    if (op == OP_DELETE_ATTR) {
        size_t hits = 0;

        for (size_t i = 0; i < w->n; i++) {
            if (w->state[i] == SLOT_DELETED || w->attrs[i].name != name)
                continue;
            if (!args->delete_all && !ds_eq(w->attrs[i].dataset_id, args->dataset_id))
                continue;
            w->state[i] = SLOT_DELETED;
            hits++;
        }
        if (!hits) {
            if (args->dataset_id && !args->delete_all)
                return problem_set(p, PB_RESOURCE_NOT_FOUND,
                                   "attribute %s with datasetId %s not found in entity %s",
                                   name, args->dataset_id, old->id);
            return problem_set(p, PB_RESOURCE_NOT_FOUND, "attribute %s not found in entity %s",
                               name, old->id);
        }
        w->changed = true;
        outcome_add(w, name, true, NULL);
        return true;
    }

    const cr_attr_t *pa = patch_target(patch, name, p);
    const char      *ds;
    long             hit;

    if (!pa)
        return false;
    ds  = args->dataset_id ? args->dataset_id : pa->dataset_id;
    hit = slot_find(w, name, ds);
    if (hit < 0) {
        if (ds_norm(ds))
            return problem_set(p, PB_RESOURCE_NOT_FOUND,
                               "attribute %s with datasetId %s not found in entity %s",
                               name, ds, old->id);
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "attribute %s not found in entity %s",
                           name, old->id);
    }

    cr_attr_t *cur = &w->attrs[hit];
    cr_attr_t  na;

    if (op == OP_PARTIAL_ATTR) {
        /* 5.6.4.4 / 5.5.8: an NGSI-LD Null value (object, languageMap...)
         * deletes the targeted instance; the type may be given but must
         * not change. */
        if (pa->is_null) {
            w->state[hit] = SLOT_DELETED;
            w->changed    = true;
            outcome_add(w, name, true, NULL);
            return true;
        }
        if (pa->kind && pa->kind != cur->kind)
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "attribute %s is a %s: its type cannot change to %s",
                               name, attr_kind_name((attr_kind_t)cur->kind),
                               attr_kind_name((attr_kind_t)pa->kind));
        if (!merge_attr(w->a, &na, cur, pa, w->now, false, p))
            return false;
    } else { /* OP_REPLACE_ATTR */
        if (pa->is_null)
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "NGSI-LD Null is not allowed when replacing attribute %s", name);
        if (!pa->kind)
            return problem_set(p, PB_BAD_REQUEST_DATA, "attribute %s has no type", name);
        replace_attr(w->a, &na, cur, pa, w->now);
    }
    *cur           = na;
    w->state[hit]  = SLOT_CHANGED;
    w->changed     = true;
    outcome_add(w, name, true, NULL);
    return true;
}

static bool op_entity_level(work_t *w, const cr_entity_t *patch, entity_op_t op,
                            const op_args_t *args, problem_t *p)
{
    bool no_overwrite = args && args->no_overwrite;

    if (!patch)
        return true;
    for (size_t j = 0; j < patch->n_attrs; j++) {
        const cr_attr_t *pa  = &patch->attrs[j];
        long             hit = slot_find(w, pa->name, pa->dataset_id);

        /* An NGSI-LD Null deletes the targeted instance (5.5.8, 5.5.12). */
        if (pa->is_null) {
            if (no_overwrite && hit >= 0) {
                outcome_add(w, pa->name, false, "attribute already exists");
            } else if (hit >= 0) {
                w->state[hit] = SLOT_DELETED;
                w->changed    = true;
                outcome_add(w, pa->name, true, NULL);
            } else {
                outcome_add(w, pa->name, false, "attribute not present");
            }
            continue;
        }

        if (hit < 0) {
            /* 5.6.2.4 (V1.9.1): Update Attributes appends a missing attribute too. */
            if (!pa->kind && op == OP_MERGE_ENTITY) {
                /* a simplified (keyValues) merge: a new attribute is a Property */
                cr_attr_t np = *pa;
                np.kind = ATTR_PROPERTY;
                add_new(w, &np);
                outcome_add(w, pa->name, true, NULL);
                continue;
            }
            if (!pa->kind)
                return problem_set(p, PB_BAD_REQUEST_DATA, "attribute %s has no type", pa->name);
            add_new(w, pa);
            outcome_add(w, pa->name, true, NULL);
            continue;
        }

        if (no_overwrite && (op == OP_APPEND_ATTRS || op == OP_MERGE_ENTITY)) {
            outcome_add(w, pa->name, false, "attribute already exists");
            continue;
        }

        cr_attr_t na;

        if (op == OP_MERGE_ENTITY) {
            if (!merge_attr(w->a, &na, &w->attrs[hit], pa, w->now, true, p))
                return false;
            if (args && args->observed_at && pa->observed_at == CR_NO_TIME && na.observed_at != CR_NO_TIME)
                na.observed_at = args->observed_at;
        } else {
            replace_attr(w->a, &na, &w->attrs[hit], pa, w->now);
            if (!na.kind)               /* a simplified value keeps the existing type */
                na.kind = w->attrs[hit].kind;
        }
        w->attrs[hit] = na;
        w->state[hit] = SLOT_CHANGED;
        w->changed    = true;
        outcome_add(w, pa->name, true, NULL);
    }
    return true;
}

cr_entity_t *entity_apply(arena_t *a, const cr_entity_t *old, const cr_entity_t *patch,
                          entity_op_t op, const op_args_t *args, int64_t now,
                          op_result_t *res, problem_t *p)
{
    work_t       w;
    cr_entity_t *ne;
    size_t       n_patch = patch ? patch->n_attrs : 0, k;

    if (!old) {
        problem_set(p, PB_RESOURCE_NOT_FOUND, "entity not found");
        return NULL;
    }
    if (op < OP_REPLACE_ENTITY || op > OP_DELETE_ATTR) {
        problem_set(p, PB_INTERNAL_ERROR, "unknown entity operation %d", (int)op);
        return NULL;
    }

    memset(&w, 0, sizeof w);
    w.a   = a;
    w.now = now;
    w.res = res;
    w.cap = (size_t)old->n_attrs + n_patch;
    w.attrs = arena_alloc(a, (w.cap ? w.cap : 1) * sizeof *w.attrs);
    w.state = arena_calloc(a, w.cap ? w.cap : 1);
    attrmap_init(&w.map, a, w.cap);

    ne = arena_calloc(a, sizeof *ne);
    ne->id         = old->id;
    ne->created_at = old->created_at;

    if (op == OP_REPLACE_ENTITY) {
        /* 5.6.18.4: the new content whole; only the entity's createdAt stays. */
        for (size_t j = 0; j < n_patch; j++) {
            const cr_attr_t *pa = &patch->attrs[j];

            if (pa->is_null) {
                problem_set(p, PB_BAD_REQUEST_DATA,
                            "NGSI-LD Null is not allowed when replacing an entity (attribute %s)",
                            pa->name);
                return NULL;
            }
            add_new(&w, pa);
            outcome_add(&w, pa->name, true, NULL);
        }
        if (patch && patch->n_types) {
            ne->types   = patch->types;
            ne->n_types = patch->n_types;
        } else {
            ne->types   = old->types;
            ne->n_types = old->n_types;
        }
        ne->scope = patch ? patch->scope : NULL;
        w.changed = true;
    } else {
        for (size_t i = 0; i < old->n_attrs; i++) {
            w.attrs[i] = old->attrs[i];
            attrmap_put(&w.map, old->attrs[i].name, old->attrs[i].dataset_id, i);
        }
        w.n = old->n_attrs;

        switch (op) {
        case OP_MERGE_ENTITY:
        case OP_APPEND_ATTRS:
        case OP_UPDATE_ATTRS:
            if (!op_entity_level(&w, patch, op, args, p))
                return NULL;
            if (!union_types(&w, ne, old, patch, p))
                return NULL;
            apply_scope(&w, ne, old, patch,
                        op == OP_UPDATE_ATTRS ? 2 :
                        (args && args->no_overwrite) ? 1 : 0);
            break;
        default:
            if (op == OP_DELETE_ATTR && args && args->attr_name && args->attr_name == MN.scope) {
                /* 5.6.5.4: deleting "scope" removes the entity's scope */
                if (!old->scope) {
                    problem_set(p, PB_RESOURCE_NOT_FOUND, "entity %s has no scope", old->id);
                    return NULL;
                }
                w.changed = true;
                outcome_add(&w, MN.scope, true, NULL);
                ne->types   = old->types;
                ne->n_types = old->n_types;
                ne->scope   = NULL;
                break;
            }
            if (!op_attr_level(&w, old, patch, op, args, p))
                return NULL;
            ne->types   = old->types;
            ne->n_types = old->n_types;
            ne->scope   = old->scope;
            break;
        }
    }

    k = 0;
    for (size_t i = 0; i < w.n; i++)
        if (w.state[i] != SLOT_DELETED)
            w.attrs[k++] = w.attrs[i];
    if (!check_count(k, "attributes", p))
        return NULL;
    if (k > model_max_attributes() && k > old->n_attrs) {
        problem_set(p, PB_BAD_REQUEST_DATA, "entity %s would have %zu attributes (at most %zu)",
                    old->id, k, model_max_attributes());
        return NULL;
    }
    ne->attrs       = k ? w.attrs : NULL;
    ne->n_attrs     = (uint16_t)k;
    ne->modified_at = w.changed ? now : old->modified_at;
    return ne;
}
