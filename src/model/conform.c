/*
 * conform.c - an entity amended to conform to an earlier version of the
 * NGSI-LD specification (4.3.6.8, Tables 4.3.6.8-1 to -3), for answers asked
 * with "Prefer: ngsi-ld=<version>" (5.7.1.4, 5.7.2.4, 6.3.6).
 *
 * This broker's entities conform to 1.9. For an earlier version each member
 * introduced later gets the table's fallback: removed (objectType before
 * 1.8; scope before 1.4; datasetId, observedAt and unitCode before 1.3), or
 * the attribute reformatted as the kind that version knows (VocabProperty,
 * ListProperty, JsonProperty as a Property before 1.8, LanguageProperty
 * before 1.4; ListRelationship as a Relationship before 1.8); before 1.3 an
 * entity keeps one type (the first) and one instance per attribute (the
 * default one when there is one: notes 1 to 3).
 *
 * The frozen entity is never touched: the amended one is a draft in the
 * request's arena (so the render cache, which holds frozen renderings, is
 * not used for it), and an entity that needs no amendment is returned as it
 * is, so an answer to a 1.8 or 1.9 preference costs one walk over the
 * attribute kinds.
 */
#include "model.h"

#include <string.h>

/* What of e a version would lose (no allocation). */
static bool attr_needs(const cr_attr_t *a, unsigned v)
{
    if (v < 108 && (a->object_type || a->kind == ATTR_VOCABPROPERTY || a->kind == ATTR_LISTPROPERTY ||
                    a->kind == ATTR_JSONPROPERTY || a->kind == ATTR_LISTRELATIONSHIP))
        return true;
    if (v < 104 && a->kind == ATTR_LANGUAGEPROPERTY)
        return true;
    if (v < 103 && (a->dataset_id || a->observed_at != CR_NO_TIME || a->unit_code))
        return true;
    for (uint16_t i = 0; i < a->n_sub; i++)
        if (attr_needs(&a->sub[i], v))
            return true;
    return false;
}

static bool entity_needs(const cr_entity_t *e, unsigned v)
{
    if ((v < 104 && e->scope) || (v < 103 && e->n_types > 1))
        return true;
    for (uint16_t i = 0; i < e->n_attrs; i++)
        if (attr_needs(&e->attrs[i], v))
            return true;
    return false;
}

/* objectList [{"object": uri, ...}, ...] -> object [uri, ...] */
static json_t *objects_of(arena_t *ar, const json_t *list)
{
    json_t *arr = json_new(ar, JSON_ARRAY), *tail = NULL;
    json_foreach(item, list) {
        const json_t *o = json_is_object(item) ? json_get(item, "object") : item;
        if (json_is_string(o))
            json_push(arr, &tail, NULL, json_new_string(ar, o->str));
    }
    return arr;
}

static void conform_attr(arena_t *ar, cr_attr_t *a, unsigned v)
{
    if (v < 108) {
        a->object_type = NULL;
        switch (a->kind) {
        case ATTR_VOCABPROPERTY:
        case ATTR_LISTPROPERTY:
        case ATTR_JSONPROPERTY:
            a->kind = ATTR_PROPERTY;
            break;
        case ATTR_LISTRELATIONSHIP:
            a->kind = ATTR_RELATIONSHIP;
            a->value = objects_of(ar, a->value);
            break;
        default:
            break;
        }
    }
    if (v < 104 && a->kind == ATTR_LANGUAGEPROPERTY)
        a->kind = ATTR_PROPERTY;        /* its value: the languageMap object */
    if (v < 103) {
        a->dataset_id = NULL;
        a->observed_at = CR_NO_TIME;
        a->unit_code = NULL;
    }
    if (a->n_sub) {
        cr_attr_t *sub = arena_alloc(ar, a->n_sub * sizeof *sub);
        memcpy(sub, a->sub, a->n_sub * sizeof *sub);
        for (uint16_t i = 0; i < a->n_sub; i++)
            conform_attr(ar, &sub[i], v);
        a->sub = sub;
    }
}

/* Before 1.3: one instance of each attribute, the default one first. */
static bool instance_kept(const cr_entity_t *e, uint16_t i)
{
    const cr_attr_t *a = &e->attrs[i];
    for (uint16_t k = 0; k < e->n_attrs; k++) {
        const cr_attr_t *o = &e->attrs[k];
        if (k == i || o->name != a->name)
            continue;
        if (!o->dataset_id && a->dataset_id)
            return false;               /* the default instance wins */
        if (k < i && (!o->dataset_id || a->dataset_id))
            return false;               /* else the first one */
    }
    return true;
}

const cr_entity_t *entity_conform(arena_t *ar, const cr_entity_t *e, unsigned version)
{
    if (version >= 109 || !entity_needs(e, version))
        return e;
    cr_entity_t *c = arena_alloc(ar, sizeof *c);
    *c = *e;
    c->refs = 0;
    c->bytes = 0;
    c->render_cache = NULL;
    if (version < 104)
        c->scope = NULL;
    if (version < 103)
        c->n_types = 1;
    c->attrs = arena_alloc(ar, (e->n_attrs ? e->n_attrs : 1) * sizeof *c->attrs);
    c->n_attrs = 0;
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        if (version < 103 && !instance_kept(e, i))
            continue;
        c->attrs[c->n_attrs] = e->attrs[i];
        conform_attr(ar, &c->attrs[c->n_attrs], version);
        c->n_attrs++;
    }
    return c;
}
