/*
 * parse.c - validation of incoming entities and attributes (4.5, 4.6, 4.7,
 * 5.2.4-5.2.6) into draft entities.
 *
 * One walk over the parsed body: every member is checked, names are expanded
 * (interned), and the draft's values point into the body (no copy) except
 * where the value has to be rewritten (VocabProperty values are expanded,
 * ListRelationship objectLists are normalized to [{"object": uri}, ...], a
 * GeoJSON geometry given as a JSON string is parsed). Both the normalized and
 * the concise representations are accepted; the kind of an attribute comes
 * from its "type" or, when absent, from the member that holds its value
 * ("value", "object", "languageMap", "vocab", "valueList", "objectList",
 * "json"), a value that is a GeoJSON geometry making it a GeoProperty.
 *
 * Member keys of an attribute are compared as written: they are core terms,
 * and the core @context is protected, so no user context can redefine them.
 * Everything else in an attribute is a sub-attribute.
 *
 * Errors name the attribute by its path as given ("speed.source") and say
 * what is wrong; the path is a chain of stack frames, formatted only when an
 * error is reported.
 */
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "model.h"
#include "lindex.h"

#define NGSI_LD_NULL      "urn:ngsi-ld:null"
#define DEFAULT_MAX_ATTRS 1000

typedef struct pstate {
    arena_t            *a;
    const ld_context_t *ctx;
    unsigned            flags;
    int64_t             now;
    problem_t          *p;
    size_t              max_attrs;
} pstate_t;

/* The attribute being parsed, for error messages: key as given, parent. */
typedef struct apath {
    const char         *key;
    const struct apath *up;
} apath_t;

/* A growing list of attribute instances (capacity known in advance). */
typedef struct attr_list {
    cr_attr_t *v;
    size_t     n, cap;
    attrmap_t  map;             /* v by (name, datasetId), for duplicates */
} attr_list_t;

static void list_init(pstate_t *ps, attr_list_t *l, size_t cap)
{
    l->v   = arena_alloc(ps->a, sizeof(cr_attr_t) * cap);
    l->n   = 0;
    l->cap = cap;
    attrmap_init(&l->map, ps->a, cap);
}

/* Members an attribute can carry; anything else is a sub-attribute. */
typedef enum {
    M_SUB = 0,
    M_TYPE,
    M_VALUE, M_OBJECT, M_LANGMAP, M_VOCAB, M_VALUELIST, M_OBJECTLIST, M_JSON,
    M_OBSERVED, M_UNIT, M_DATASET, M_OBJTYPE, M_VALUETYPE, M_EXPIRES,
    M_IGNORED,      /* system generated or output only: ignored on input */
    M_SEALED,       /* entityIdSealed / entityTypeSealed: only in ngsildproof */
    M_PROHIBITED,   /* entity, entityList: output only, never accepted */
    M_CONTEXT,
    M__COUNT
} member_t;

/* The value member of each kind (index: attr_kind_t). */
static const member_t kind_member[] = {
    [ATTR_PROPERTY]         = M_VALUE,
    [ATTR_RELATIONSHIP]     = M_OBJECT,
    [ATTR_GEOPROPERTY]      = M_VALUE,
    [ATTR_LANGUAGEPROPERTY] = M_LANGMAP,
    [ATTR_VOCABPROPERTY]    = M_VOCAB,
    [ATTR_LISTPROPERTY]     = M_VALUELIST,
    [ATTR_LISTRELATIONSHIP] = M_OBJECTLIST,
    [ATTR_JSONPROPERTY]     = M_JSON,
};

static const char *const member_key[M__COUNT] = {
    [M_VALUE] = "value", [M_OBJECT] = "object", [M_LANGMAP] = "languageMap",
    [M_VOCAB] = "vocab", [M_VALUELIST] = "valueList", [M_OBJECTLIST] = "objectList",
    [M_JSON] = "json",
};

static member_t member_id(const char *k)
{
    switch (k[0]) {
    case '@':
        if (strcmp(k, "@context") == 0) return M_CONTEXT;
        if (strcmp(k, "@type") == 0) return M_TYPE;
        break;
    case 'c':
        if (strcmp(k, "createdAt") == 0) return M_IGNORED;
        break;
    case 'd':
        if (strcmp(k, "datasetId") == 0) return M_DATASET;
        if (strcmp(k, "deletedAt") == 0) return M_IGNORED;
        break;
    case 'e':
        if (strcmp(k, "expiresAt") == 0) return M_EXPIRES;
        if (strcmp(k, "entity") == 0 || strcmp(k, "entityList") == 0) return M_PROHIBITED;
        if (strcmp(k, "entityIdSealed") == 0 || strcmp(k, "entityTypeSealed") == 0) return M_SEALED;
        break;
    case 'i':
        if (strcmp(k, "instanceId") == 0) return M_IGNORED;
        break;
    case 'j':
        if (strcmp(k, "json") == 0) return M_JSON;
        break;
    case 'l':
        if (strcmp(k, "languageMap") == 0) return M_LANGMAP;
        break;
    case 'm':
        if (strcmp(k, "modifiedAt") == 0) return M_IGNORED;
        break;
    case 'o':
        if (strcmp(k, "object") == 0) return M_OBJECT;
        if (strcmp(k, "objectList") == 0) return M_OBJECTLIST;
        if (strcmp(k, "observedAt") == 0) return M_OBSERVED;
        if (strcmp(k, "objectType") == 0) return M_OBJTYPE;
        break;
    case 'p':
        if (strncmp(k, "previous", 8) == 0) return M_IGNORED;   /* previousValue, ... */
        break;
    case 't':
        if (strcmp(k, "type") == 0) return M_TYPE;
        break;
    case 'u':
        if (strcmp(k, "unitCode") == 0) return M_UNIT;
        break;
    case 'v':
        if (strcmp(k, "value") == 0) return M_VALUE;
        if (strcmp(k, "vocab") == 0) return M_VOCAB;
        if (strcmp(k, "valueList") == 0) return M_VALUELIST;
        if (strcmp(k, "valueType") == 0) return M_VALUETYPE;
        break;
    }
    return M_SUB;
}

static inline bool is_value_member(member_t m)
{
    return m >= M_VALUE && m <= M_JSON;
}

/* ------------------------------------------------------------------ errors */

static size_t path_fmt(const apath_t *pa, char *buf, size_t n)
{
    size_t len = 0;

    if (!pa)
        return 0;
    if (pa->up) {
        len = path_fmt(pa->up, buf, n);
        if (len + 1 < n)
            buf[len++] = '.';
    }
    int w = snprintf(buf + len, len < n ? n - len : 0, "%s", pa->key);
    if (w > 0)
        len += (size_t)w;
    return len < n ? len : n - 1;
}

/* BadRequestData about attribute pa (NULL: the entity). Returns false. */
static bool bad_kind(pstate_t *ps, problem_kind_t kind, const apath_t *pa, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool bad_kind(pstate_t *ps, problem_kind_t kind, const apath_t *pa, const char *fmt, ...)
{
    char    path[160] = "";
    char    msg[320];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!pa)
        return problem_set(ps->p, kind, "%s", msg);
    path_fmt(pa, path, sizeof path);
    return problem_set(ps->p, kind, "attribute '%s': %s", path, msg);
}

#define bad(ps, pa, ...) bad_kind(ps, PB_BAD_REQUEST_DATA, pa, __VA_ARGS__)

static const char *json_type_name(const json_t *v)
{
    switch (v->type) {
    case JSON_NULL:   return "null";
    case JSON_FALSE:
    case JSON_TRUE:   return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY:  return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

/* ---------------------------------------------------------- reserved names */

/* Core terms that are not attributes (4.5.1: non-reified properties shall
 * not be used as attribute names), by expanded IRI. */
static pthread_once_t reserved_once = PTHREAD_ONCE_INIT;
static const char    *reserved[24];
static size_t         n_reserved;

static void reserved_init(void)
{
    const char *v[] = {
        MN.has_value, MN.has_object, MN.has_language_map, MN.has_vocab, MN.has_value_list,
        MN.has_object_list, MN.json, MN.observed_at, MN.unit_code, MN.dataset_id,
        MN.created_at, MN.modified_at, MN.scope, MN.object_type,
        intern_cstr(LD_NGSI_LD_PREFIX "deletedAt"), intern_cstr(LD_NGSI_LD_PREFIX "instanceId"),
        intern_cstr(LD_NGSI_LD_PREFIX "expiresAt"), intern_cstr("@id"), intern_cstr("@type"),
        intern_cstr("@context"),
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(v) && i < CR_ARRAY_LEN(reserved); i++)
        if (v[i])
            reserved[n_reserved++] = v[i];
}

static bool is_reserved(const char *iri)
{
    if (iri[0] == '@') return true;             /* a JSON-LD keyword (1.1, 1.7) is no IRI */
    pthread_once(&reserved_once, reserved_init);
    for (size_t i = 0; i < n_reserved; i++)
        if (reserved[i] == iri)
            return true;
    return false;
}

/* ------------------------------------------------------------------ helpers */

static inline bool is_ngsi_null(const json_t *v)
{
    return v && v->type == JSON_STRING && v->len == sizeof(NGSI_LD_NULL) - 1
        && memcmp(v->str, NGSI_LD_NULL, sizeof(NGSI_LD_NULL) - 1) == 0;
}

/* [ "urn:ngsi-ld:null" ] */
static inline bool is_ngsi_null_array(const json_t *v)
{
    return json_is_array(v) && v->len == 1 && is_ngsi_null(v->child);
}

/* The value given is the NGSI-LD Null. 5.5.4: it is only allowed in the
 * fragments of partial update and merge operations (EP_MERGE), where it
 * deletes; anywhere else it is BadRequestData. */
static bool null_given(pstate_t *ps, const apath_t *pa, cr_attr_t *out)
{
    if (!(ps->flags & EP_MERGE))
        return bad(ps, pa, "the NGSI-LD Null (\"" NGSI_LD_NULL "\") is only allowed when updating "
                   "or merging (clause 5.5.4)");
    out->is_null = 1;
    return true;
}

/* 5.5.4: outside merge operations the NGSI-LD Null cannot be the value of a
 * member of an object that is a Property value either (inside a merge, it
 * deletes that member: 5.5.12). */
static bool check_object_value(pstate_t *ps, const apath_t *pa, const json_t *v)
{
    if (!json_is_object(v) || (ps->flags & EP_MERGE))
        return true;
    json_foreach(m, v)
        if (is_ngsi_null(m))
            return bad(ps, pa, "the NGSI-LD Null (\"" NGSI_LD_NULL "\") as the value of '%s' in "
                       "the Property value is only allowed when merging (clause 5.5.4)", m->key);
    return true;
}

static bool is_geometry_type(const char *s)
{
    static const char *const types[] = {
        "Point", "MultiPoint", "LineString", "MultiLineString", "Polygon", "MultiPolygon",
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++)
        if (strcmp(s, types[i]) == 0)
            return true;
    return false;
}

/* A JSON object that presents itself as a GeoJSON geometry (validity is
 * geo_validate's business). */
static bool looks_like_geometry(const json_t *v)
{
    if (!json_is_object(v))
        return false;
    const json_t *t = json_get(v, "type");
    return json_is_string(t) && is_geometry_type(t->str) && json_get(v, "coordinates");
}

static attr_kind_t kind_from_type(pstate_t *ps, const char *s)
{
    static const char *const names[] = {
        [ATTR_PROPERTY] = "Property", [ATTR_RELATIONSHIP] = "Relationship",
        [ATTR_GEOPROPERTY] = "GeoProperty", [ATTR_LANGUAGEPROPERTY] = "LanguageProperty",
        [ATTR_VOCABPROPERTY] = "VocabProperty", [ATTR_LISTPROPERTY] = "ListProperty",
        [ATTR_LISTRELATIONSHIP] = "ListRelationship", [ATTR_JSONPROPERTY] = "JsonProperty",
    };
    for (int k = ATTR_PROPERTY; k <= ATTR_JSONPROPERTY; k++)
        if (strcmp(s, names[k]) == 0)
            return (attr_kind_t)k;
    if (!strchr(s, ':'))
        return 0;

    /* Given expanded (or as a compact IRI). */
    const char *iri = ld_expand(ps->ctx, s);
    const char *iris[] = {
        [ATTR_PROPERTY] = MN.property, [ATTR_RELATIONSHIP] = MN.relationship,
        [ATTR_GEOPROPERTY] = MN.geoproperty, [ATTR_LANGUAGEPROPERTY] = MN.languageproperty,
        [ATTR_VOCABPROPERTY] = MN.vocabproperty, [ATTR_LISTPROPERTY] = MN.listproperty,
        [ATTR_LISTRELATIONSHIP] = MN.listrelationship, [ATTR_JSONPROPERTY] = MN.jsonproperty,
    };
    for (int k = ATTR_PROPERTY; k <= ATTR_JSONPROPERTY; k++)
        if (iri == iris[k])
            return (attr_kind_t)k;
    return 0;
}

/* Does this object look like one instance of an attribute (normalized, or
 * concise with its value member)? Used to tell a multi-attribute array from
 * a concise Property whose value is an array of objects. */
static bool looks_like_instance(pstate_t *ps, const json_t *o)
{
    if (!json_is_object(o))
        return false;
    json_foreach(m, o) {
        member_t id = member_id(m->key);
        if (is_value_member(id))
            return true;
        if (id == M_TYPE && json_is_string(m) && kind_from_type(ps, m->str))
            return true;
    }
    return false;
}

static bool is_multi_instance(pstate_t *ps, const json_t *v)
{
    if (!json_is_array(v) || v->len == 0)
        return false;
    json_foreach(el, v)
        if (!looks_like_instance(ps, el))
            return false;
    return true;
}

/* Upper bound of the instances a member value gives. */
static inline size_t instance_bound(const json_t *v)
{
    return json_is_array(v) && v->len > 0 ? v->len : 1;
}

/* RFC 5646, loosely: 1-8 letters, then "-" subtags of 1-8 alphanumerics. */
static bool valid_lang_tag(const char *s)
{
    if (strcmp(s, "@none") == 0)
        return true;
    size_t n = 0;
    bool   first = true;
    for (const char *p = s;; p++) {
        if (*p == '-' || *p == '\0') {
            if (n == 0 || n > 8)
                return false;
            if (*p == '\0')
                return true;
            n     = 0;
            first = false;
            continue;
        }
        unsigned char c = (unsigned char)*p;
        bool letter = (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
        bool digit  = c >= '0' && c <= '9';
        if (!(letter || (!first && digit)))
            return false;
        n++;
    }
}

/* -------------------------------------------------------- value members */

static bool parse_relationship_object(pstate_t *ps, const apath_t *pa, const json_t *v, cr_attr_t *out)
{
    if (is_ngsi_null(v) || is_ngsi_null_array(v))
        return null_given(ps, pa, out);
    if (json_is_string(v)) {
        if (!model_valid_uri(v->str))
            return bad(ps, pa, "'object' must be a URI, got '%s'", v->str);
        return true;
    }
    if (!json_is_array(v) || v->len == 0)
        return bad(ps, pa, "'object' must be a URI or a non-empty array of URIs, got %s",
                   json_type_name(v));
    json_foreach(el, v) {
        if (!json_is_string(el) || !model_valid_uri(el->str))
            return bad(ps, pa, "'object' must be a URI or a non-empty array of URIs");
        if (is_ngsi_null(el))
            return bad(ps, pa, "the NGSI-LD Null cannot be one of several objects");
    }
    return true;
}

static bool parse_object_list(pstate_t *ps, const apath_t *pa, const json_t *v, cr_attr_t *out)
{
    bool normalized = true;

    if (!json_is_array(v))
        return bad(ps, pa, "'objectList' must be an array, got %s", json_type_name(v));
    if (is_ngsi_null_array(v))
        return null_given(ps, pa, out);
    json_foreach(el, v) {
        const json_t *uri = el;
        if (json_is_object(el)) {
            uri = json_get(el, "object");
            if (el->len != 1 || !uri)
                return bad(ps, pa, "each 'objectList' item must be a URI or {\"object\": URI}");
        } else {
            normalized = false;
        }
        if (!json_is_string(uri) || !model_valid_uri(uri->str))
            return bad(ps, pa, "each 'objectList' item must be a URI or {\"object\": URI}");
        if (is_ngsi_null(uri))
            return bad(ps, pa, "the NGSI-LD Null cannot be one of several 'objectList' items");
    }
    if (normalized)
        return true;

    /* Concise items: build [{"object": uri}, ...] (strings not copied). */
    json_t *arr = json_new(ps->a, JSON_ARRAY), *tail = NULL;
    json_foreach(el, v) {
        const json_t *uri = json_is_object(el) ? el->child : el;
        json_t       *o   = json_new(ps->a, JSON_OBJECT), *otail = NULL;
        json_t       *s   = json_new(ps->a, JSON_STRING);
        s->str = uri->str;
        s->len = uri->len;
        json_push(o, &otail, "object", s);
        json_push(arr, &tail, NULL, o);
    }
    out->value = arr;
    return true;
}

static bool parse_language_map(pstate_t *ps, const apath_t *pa, const json_t *v, cr_attr_t *out)
{
    if (!json_is_object(v))
        return bad(ps, pa, "'languageMap' must be an object, got %s", json_type_name(v));
    if (v->len == 0)
        return bad(ps, pa, "'languageMap' must not be empty");
    if (v->len == 1 && strcmp(v->child->key, "@none") == 0 && is_ngsi_null(v->child))
        return null_given(ps, pa, out);
    json_foreach(m, v) {
        if (!valid_lang_tag(m->key))
            return bad(ps, pa, "'%s' is not a language tag (RFC 5646) in 'languageMap'", m->key);
        if (json_is_string(m))
            continue;
        if (!json_is_array(m) || m->len == 0)
            return bad(ps, pa, "'languageMap' entry '%s' must be a string or an array of strings",
                       m->key);
        json_foreach(s, m)
            if (!json_is_string(s))
                return bad(ps, pa, "'languageMap' entry '%s' must be a string or an array of strings",
                           m->key);
    }
    return true;
}

/* A vocab value is a JSON-LD term or IRI (C.2.2 uses "non-commercial"):
 * non-empty, without spaces, control characters or <>"{}|\^` . */
static bool vocab_term_ok(const char *s)
{
    if (!*s) return false;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c <= 0x20 || *c == 0x7f || strchr("<>\"{}|\\^`", *c)) return false;
    return true;
}

static json_t *vocab_expand(pstate_t *ps, const apath_t *pa, const json_t *s)
{
    if (!json_is_string(s) || !vocab_term_ok(s->str)) {
        bad(ps, pa, "'vocab' must be a name or a URI, or an array of them");
        return NULL;
    }
    return json_new_string(ps->a, ld_expand(ps->ctx, s->str));
}

static bool parse_vocab(pstate_t *ps, const apath_t *pa, const json_t *v, cr_attr_t *out)
{
    if (is_ngsi_null(v) || is_ngsi_null_array(v))
        return null_given(ps, pa, out);
    if (json_is_string(v)) {
        out->value = vocab_expand(ps, pa, v);
        return out->value != NULL;
    }
    if (!json_is_array(v) || v->len == 0)
        return bad(ps, pa, "'vocab' must be a string or a non-empty array of strings, got %s",
                   json_type_name(v));
    json_t *arr = json_new(ps->a, JSON_ARRAY), *tail = NULL;
    json_foreach(el, v) {
        json_t *s = vocab_expand(ps, pa, el);
        if (!s)
            return false;
        json_push(arr, &tail, NULL, s);
    }
    out->value = arr;
    return true;
}

static bool parse_geo_value(pstate_t *ps, const apath_t *pa, const json_t *v, cr_attr_t *out)
{
    problem_t gp = { 0 };

    if (json_is_string(v)) {
        if (is_ngsi_null(v))
            return null_given(ps, pa, out);
        /* 4.7.2: a whole geometry may come as a JSON string. */
        char err[128];
        json_t *g = json_parse_copy(ps->a, v->str, v->len, NULL, err, sizeof err);
        if (!g)
            return bad(ps, pa, "the GeoProperty value is a string that is not GeoJSON: %s", err);
        v = g;
        out->value = g;
    }
    if (!json_is_object(v))
        return bad(ps, pa, "a GeoProperty value must be a GeoJSON geometry, got %s",
                   json_type_name(v));
    if (!geo_validate(v, &gp))
        return bad(ps, pa, "invalid GeoJSON geometry: %s", gp.detail[0] ? gp.detail : "invalid");
    return true;
}

/* Validates the value member of kind k (v is that member's value). */
static bool parse_value(pstate_t *ps, const apath_t *pa, attr_kind_t k, const json_t *v, cr_attr_t *out)
{
    out->value = (json_t *)v;
    if (v->type == JSON_NULL && k != ATTR_JSONPROPERTY)
        return bad(ps, pa, "'%s' must not be null (use \"" NGSI_LD_NULL "\" to delete)",
                   member_key[kind_member[k]]);

    switch (k) {
    case ATTR_PROPERTY:
        if (is_ngsi_null(v))
            return null_given(ps, pa, out);
        return check_object_value(ps, pa, v);
    case ATTR_GEOPROPERTY:
        return parse_geo_value(ps, pa, v, out);
    case ATTR_RELATIONSHIP:
        return parse_relationship_object(ps, pa, v, out);
    case ATTR_LANGUAGEPROPERTY:
        return parse_language_map(ps, pa, v, out);
    case ATTR_VOCABPROPERTY:
        return parse_vocab(ps, pa, v, out);
    case ATTR_LISTPROPERTY:
        if (!json_is_array(v))
            return bad(ps, pa, "'valueList' must be an array, got %s", json_type_name(v));
        if (is_ngsi_null_array(v))
            return null_given(ps, pa, out);
        return true;
    case ATTR_LISTRELATIONSHIP:
        return parse_object_list(ps, pa, v, out);
    case ATTR_JSONPROPERTY:
        if (is_ngsi_null(v))
            return null_given(ps, pa, out);
        return true;
    }
    return bad(ps, pa, "unknown attribute kind");
}

/* ----------------------------------------------------------- attributes */

static bool parse_instance(pstate_t *ps, const apath_t *pa, const char *name, const json_t *v,
                           cr_attr_t *out);

/* at, the last of l, against the others (by the index: linear in all);
 * then at joins the index. */
static bool list_dup_check(pstate_t *ps, const apath_t *pa, attr_list_t *l, const cr_attr_t *at)
{
    attrmap_foreach(&l->map, at->name, at->dataset_id, l->n - 1, i) {
        const cr_attr_t *o = &l->v[i];
        if (o->name != at->name)
            continue;
        if (!o->dataset_id && !at->dataset_id)
            return bad(ps, pa, "more than one default instance (without datasetId)");
        if (o->dataset_id && at->dataset_id && strcmp(o->dataset_id, at->dataset_id) == 0)
            return bad(ps, pa, "more than one instance with datasetId '%s'", at->dataset_id);
    }
    attrmap_put(&l->map, at->name, at->dataset_id, l->n - 1);
    return true;
}

/* One member holding an attribute (one instance or an array of them):
 * checks and expands its name, appends its instances to l. */
static bool parse_attr_member(pstate_t *ps, const apath_t *up, const json_t *m, attr_list_t *l)
{
    apath_t pa = { m->key, up };

    if (!model_valid_name(m->key))
        return bad(ps, &pa, "invalid attribute name (clause 4.6.2)");
    const char *name = ld_expand(ps->ctx, m->key);
    if (!name || is_reserved(name))
        return bad(ps, &pa, "'%s' is a reserved NGSI-LD term and cannot be an attribute name", m->key);

    if (json_is_array(m) && m->len == 0)
        return bad(ps, &pa, "an empty array gives no attribute instance (a Property whose value "
                   "is [] is written {\"value\": []})");
    if (is_multi_instance(ps, m)) {
        json_foreach(el, m) {
            if (l->n >= l->cap || l->n >= ps->max_attrs)
                return bad(ps, up, "too many attributes (the limit is %zu)", ps->max_attrs);
            cr_attr_t *at = &l->v[l->n++];
            if (!parse_instance(ps, &pa, name, el, at) || !list_dup_check(ps, &pa, l, at))
                return false;
        }
        return true;
    }
    if (l->n >= l->cap || l->n >= ps->max_attrs)
        return bad(ps, up, "too many attributes (the limit is %zu)", ps->max_attrs);
    cr_attr_t *at = &l->v[l->n++];
    return parse_instance(ps, &pa, name, m, at) && list_dup_check(ps, &pa, l, at);
}

/* objectType (5.2.6): an entity type name or an array of them, expanded;
 * several distinct types are joined by ' ' into one interned string (see
 * cr_attr_t). NULL (with the problem set) when invalid. */
static const char *parse_object_type(pstate_t *ps, const apath_t *pa, const json_t *v)
{
    const json_t *first = json_is_array(v) ? v->child : v;
    size_t        n = json_is_array(v) ? v->len : 1;
    if (n == 0 || (!json_is_array(v) && !json_is_string(v))) {
        bad(ps, pa, "'objectType' must be an entity type name or a non-empty array of them (5.2.6)");
        return NULL;
    }
    const char **iris = arena_alloc(ps->a, n * sizeof *iris);
    size_t       k = 0, total = 0;
    for (const json_t *t = first; t && k < n; t = json_is_array(v) ? t->next : NULL) {
        if (!json_is_string(t) || !model_valid_name(t->str)) {
            bad(ps, pa, "'objectType' must be an entity type name or a non-empty array of them (5.2.6)");
            return NULL;
        }
        const char *iri = ld_expand(ps->ctx, t->str);
        if (iri[0] == '@') {
            bad(ps, pa, "objectType '%s' expands to the JSON-LD keyword %s, not to an IRI (4.6.2)", t->str, iri);
            return NULL;
        }
        bool dup = false;
        for (size_t i = 0; i < k && !dup; i++) dup = iris[i] == iri;
        if (dup) continue;
        iris[k++] = iri;
        total += strlen(iri) + 1;
    }
    if (k == 1)
        return iris[0];
    char  *joined = arena_alloc(ps->a, total);
    size_t at = 0;
    for (size_t i = 0; i < k; i++) {
        size_t l = strlen(iris[i]);
        memcpy(joined + at, iris[i], l);
        at += l;
        joined[at++] = i + 1 < k ? ' ' : '\0';
    }
    return intern(joined, total - 1);
}

/* An attribute given as a JSON object (normalized, or concise with members). */
static bool parse_attr_object(pstate_t *ps, const apath_t *pa, const json_t *o, cr_attr_t *out)
{
    const json_t *mem[M__COUNT] = { 0 };
    size_t        sub_bound = 0;
    attr_kind_t   kind = 0;

    json_foreach(m, o) {
        member_t id = member_id(m->key);
        if (id == M_SUB)
            sub_bound += instance_bound(m);
        else if (!mem[id])
            mem[id] = m;
    }

    /* The kind: from "type", else from the value member present. */
    const json_t *type = mem[M_TYPE];
    if (type) {
        if (!json_is_string(type))
            return bad(ps, pa, "'type' must be a string, got %s", json_type_name(type));
        kind = kind_from_type(ps, type->str);
        if (!kind) {
            if (is_geometry_type(type->str) && json_get(o, "coordinates")) {
                /* Concise GeoProperty: the object is the geometry. */
                out->kind = ATTR_GEOPROPERTY;
                return parse_value(ps, pa, ATTR_GEOPROPERTY, o, out);
            }
            return bad(ps, pa, "invalid attribute type '%s' (expected Property, Relationship, "
                       "GeoProperty, LanguageProperty, VocabProperty, ListProperty, "
                       "ListRelationship or JsonProperty)", type->str);
        }
    } else {
        member_t found = M_SUB;
        for (member_t id = M_VALUE; id <= M_JSON; id++) {
            if (!mem[id])
                continue;
            if (found != M_SUB)
                return bad(ps, pa, "both '%s' and '%s' given: the attribute kind is ambiguous",
                           member_key[found], member_key[id]);
            found = id;
        }
        switch (found) {
        case M_VALUE:
            kind = looks_like_geometry(mem[M_VALUE]) ? ATTR_GEOPROPERTY : ATTR_PROPERTY;
            break;
        case M_OBJECT:     kind = ATTR_RELATIONSHIP;     break;
        case M_LANGMAP:    kind = ATTR_LANGUAGEPROPERTY; break;
        case M_VOCAB:      kind = ATTR_VOCABPROPERTY;    break;
        case M_VALUELIST:  kind = ATTR_LISTPROPERTY;     break;
        case M_OBJECTLIST: kind = ATTR_LISTRELATIONSHIP; break;
        case M_JSON:       kind = ATTR_JSONPROPERTY;     break;
        default:
            if (!(ps->flags & EP_PARTIAL)) {
                /* Attribute members without a value: a broken attribute, not
                 * an object value. */
                if (mem[M_OBSERVED] || mem[M_UNIT] || mem[M_DATASET] || mem[M_OBJTYPE]
                    || mem[M_VALUETYPE])
                    return bad(ps, pa, "no 'value' (nor 'object', 'languageMap', 'vocab', "
                               "'valueList', 'objectList', 'json') given");
                /* Concise Property whose value is this object (4.5.2.3). */
                out->kind = ATTR_PROPERTY;
                out->value = (json_t *)o;
                return check_object_value(ps, pa, o);
            }
            break;     /* partial update without a value: kind 0 */
        }
    }
    out->kind = (uint8_t)kind;

    /* The value member: required, and the only one allowed. */
    if (kind) {
        member_t vm = kind_member[kind];
        for (member_t id = M_VALUE; id <= M_JSON; id++)
            if (mem[id] && id != vm)
                return bad(ps, pa, "'%s' is not allowed in a %s", member_key[id],
                           attr_kind_name(kind));
        if (mem[vm]) {
            if (!parse_value(ps, pa, kind, mem[vm], out))
                return false;
        } else if (!(ps->flags & EP_PARTIAL)) {
            return bad(ps, pa, "a %s needs '%s'", attr_kind_name(kind), member_key[vm]);
        }
    }

    /* Optional members. */
    const json_t *v;
    bool relationship = kind == ATTR_RELATIONSHIP || kind == ATTR_LISTRELATIONSHIP;
    if ((v = mem[M_OBSERVED])) {
        if (!json_is_string(v) || !cr_datetime_parse(v->str, &out->observed_at))
            return bad(ps, pa, "'observedAt' must be a DateTime (YYYY-MM-DDThh:mm:ss[.ffffff]Z)");
    }
    if ((v = mem[M_UNIT])) {
        if (relationship || kind == ATTR_LANGUAGEPROPERTY || kind == ATTR_VOCABPROPERTY
            || kind == ATTR_JSONPROPERTY)
            return bad(ps, pa, "'unitCode' is not allowed in a %s", attr_kind_name(kind));
        if (!json_is_string(v) || v->len == 0)
            return bad(ps, pa, "'unitCode' must be a non-empty string");
        out->unit_code = v->str;
    }
    if ((v = mem[M_DATASET])) {
        if (!json_is_string(v) || (strcmp(v->str, "@none") != 0 && !model_valid_uri(v->str)))
            return bad(ps, pa, "'datasetId' must be a URI");
        out->dataset_id = strcmp(v->str, "@none") == 0 ? NULL : v->str;
    }
    if ((v = mem[M_OBJTYPE])) {
        if (kind && !relationship)
            return bad(ps, pa, "'objectType' is only allowed in a Relationship");
        if (!(out->object_type = parse_object_type(ps, pa, v)))
            return false;
    }
    if ((v = mem[M_VALUETYPE]) && !json_is_string(v))
        return bad(ps, pa, "'valueType' must be a string");
    if ((v = mem[M_EXPIRES])) {
        int64_t t;
        if (!json_is_string(v) || !cr_datetime_parse(v->str, &t))
            return bad(ps, pa, "'expiresAt' must be a DateTime");
    }
    if (mem[M_PROHIBITED])
        return bad(ps, pa, "'%s' is output only and cannot be given", mem[M_PROHIBITED]->key);
    if (mem[M_SEALED] && strcmp(pa->key, "ngsildproof") != 0)
        return bad(ps, pa, "'%s' is only allowed in 'ngsildproof'", mem[M_SEALED]->key);
    if (mem[M_CONTEXT])
        return bad(ps, pa, "an attribute shall not contain an '@context' (clause 5.5.7)");

    /* Sub-attributes. */
    if (sub_bound == 0)
        return true;
    if (sub_bound > ps->max_attrs + 1)
        sub_bound = ps->max_attrs + 1;   /* enough to detect the overflow */
    attr_list_t l;
    list_init(ps, &l, sub_bound);
    json_foreach(m, o) {
        if (member_id(m->key) == M_SUB && !parse_attr_member(ps, pa, m, &l))
            return false;
    }
    if (l.n > UINT16_MAX)
        return bad(ps, pa, "too many sub-attributes");
    out->sub   = l.v;
    out->n_sub = (uint16_t)l.n;
    return true;
}

/* One attribute instance in any representation. */
static bool parse_instance(pstate_t *ps, const apath_t *pa, const char *name, const json_t *v,
                           cr_attr_t *out)
{
    memset(out, 0, sizeof *out);
    out->name        = name;
    out->observed_at = CR_NO_TIME;
    out->created_at  = ps->now;
    out->modified_at = ps->now;

    switch (v->type) {
    case JSON_NULL:
        return bad(ps, pa, "null is not a valid value (use \"" NGSI_LD_NULL "\" to delete)");
    case JSON_OBJECT:
        return parse_attr_object(ps, pa, v, out);
    default:
        /* Concise Property: the value itself (4.5.2.3, and 4.5.3.3 for a null). */
        out->kind  = ATTR_PROPERTY;
        out->value = (json_t *)v;
        if (is_ngsi_null(v))
            return null_given(ps, pa, out);
        return true;
    }
}

/* --------------------------------------------------------------- entities */

size_t model_max_attributes(void)
{
    size_t n = cr_config.max_attributes > 0 ? (size_t)cr_config.max_attributes : DEFAULT_MAX_ATTRS;
    return n < CR_ATTRS_MAX ? n : CR_ATTRS_MAX;
}

static bool parse_types(pstate_t *ps, const json_t *v, cr_entity_t *e)
{
    if (json_is_string(v)) {
        if (!model_valid_name(v->str))
            return bad(ps, NULL, "invalid entity type '%s' (clause 4.6.2)", v->str);
        e->types    = arena_alloc(ps->a, sizeof(char *));
        e->types[0] = ld_expand(ps->ctx, v->str);
        e->n_types  = 1;
        if (e->types[0][0] == '@')
            return bad(ps, NULL, "entity type '%s' expands to the JSON-LD keyword %s, not to an IRI (4.6.2)",
                       v->str, e->types[0]);
        return true;
    }
    if (!json_is_array(v) || v->len == 0)
        return bad(ps, NULL, "'type' must be a string or a non-empty array of strings");
    if (v->len > CR_ATTRS_MAX)
        return bad(ps, NULL, "too many entity types (%u, at most %u)", (unsigned)v->len, (unsigned)CR_ATTRS_MAX);
    e->types = arena_alloc(ps->a, sizeof(char *) * v->len);
    ptrset_t seen;
    ptrset_init(&seen, ps->a, v->len);
    json_foreach(t, v) {
        if (!json_is_string(t) || !model_valid_name(t->str))
            return bad(ps, NULL, "invalid entity type in 'type' (clause 4.6.2)");
        const char *iri = ld_expand(ps->ctx, t->str);
        if (!iri)
            return bad(ps, NULL, "entity type '%s' cannot be expanded", t->str);
        if (iri[0] == '@')
            return bad(ps, NULL, "entity type '%s' expands to the JSON-LD keyword %s, not to an IRI (4.6.2)",
                       t->str, iri);
        if (ptrset_add(&seen, iri))
            e->types[e->n_types++] = iri;
    }
    return true;
}

static bool parse_scope(pstate_t *ps, const json_t *v, cr_entity_t *e)
{
    if (json_is_string(v)) {
        if (!model_valid_scope(v->str))
            return bad(ps, NULL, "invalid scope '%s' (clause 4.18)", v->str);
    } else if (json_is_array(v)) {
        json_foreach(s, v)
            if (!json_is_string(s) || !model_valid_scope(s->str))
                return bad(ps, NULL, "invalid scope in 'scope' (clause 4.18)");
    } else {
        return bad(ps, NULL, "'scope' must be a string or an array of strings");
    }
    e->scope = (json_t *)v;
    return true;
}

/* Members of the entity itself (everything else is an attribute). */
typedef enum { E_ATTR = 0, E_ID, E_TYPE, E_SCOPE, E_EXPIRES, E_IGNORED } emember_t;

static emember_t entity_member(const char *k)
{
    switch (k[0]) {
    case '@':
        if (strcmp(k, "@id") == 0) return E_ID;
        if (strcmp(k, "@type") == 0) return E_TYPE;
        if (strcmp(k, "@context") == 0) return E_IGNORED;
        break;
    case 'i':
        if (strcmp(k, "id") == 0) return E_ID;
        break;
    case 't':
        if (strcmp(k, "type") == 0) return E_TYPE;
        break;
    case 's':
        if (strcmp(k, "scope") == 0) return E_SCOPE;
        break;
    case 'e':
        if (strcmp(k, "expiresAt") == 0) return E_EXPIRES;
        break;
    case 'c': case 'm': case 'd':   /* system attributes: ignored on input */
        if (strcmp(k, "createdAt") == 0 || strcmp(k, "modifiedAt") == 0
            || strcmp(k, "deletedAt") == 0)
            return E_IGNORED;
        break;
    }
    return E_ATTR;
}

cr_entity_t *entity_parse(arena_t *a, const json_t *body, const ld_context_t *ctx,
                          unsigned flags, int64_t now, problem_t *p)
{
    pstate_t      ps = { a, ctx, flags, now, p, model_max_attributes() };
    const json_t *id = NULL, *type = NULL, *scope = NULL;
    size_t        bound = 0;

    if (!json_is_object(body)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "an entity must be a JSON object");
        return NULL;
    }

    /* Entity members; the rest are attributes (counted here). */
    json_foreach(m, body) {
        int64_t t;
        switch (entity_member(m->key)) {
        case E_ID:
            if (id) {
                problem_set(p, PB_BAD_REQUEST_DATA, "the entity id is given twice");
                return NULL;
            }
            id = m;
            break;
        case E_TYPE:
            if (type) {
                problem_set(p, PB_BAD_REQUEST_DATA, "the entity type is given twice");
                return NULL;
            }
            type = m;
            break;
        case E_SCOPE:
            scope = m;
            break;
        case E_EXPIRES:
            if (!json_is_string(m) || !cr_datetime_parse(m->str, &t)) {
                problem_set(p, PB_BAD_REQUEST_DATA, "'expiresAt' must be a DateTime");
                return NULL;
            }
            break;
        case E_IGNORED:
            break;
        case E_ATTR:
            bound += instance_bound(m);
            break;
        }
    }

    cr_entity_t *e = arena_calloc(a, sizeof *e);
    e->created_at  = now;
    e->modified_at = now;

    if (id) {
        if (!json_is_string(id)) {
            problem_set(p, PB_BAD_REQUEST_DATA, "the entity id must be a URI, got %s",
                        json_type_name(id));
            return NULL;
        }
        if (!model_valid_uri(id->str)) {
            problem_set(p, PB_BAD_REQUEST_DATA, "the entity id must be a URI of at most %d bytes "
                        "('%.200s' is not)", MODEL_MAX_URI_LEN, id->str);
            return NULL;
        }
        e->id = id->str;
    } else if (flags & EP_CREATE) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the entity has no 'id'");
        return NULL;
    }
    if (type) {
        if (!parse_types(&ps, type, e))
            return NULL;
    } else if (flags & EP_CREATE) {
        problem_set(p, PB_BAD_REQUEST_DATA, "the entity has no 'type'");
        return NULL;
    }
    if (scope && !parse_scope(&ps, scope, e))
        return NULL;

    if (bound == 0)
        return e;
    if (bound > ps.max_attrs + 1)
        bound = ps.max_attrs + 1;      /* enough to detect the overflow */
    attr_list_t l;
    list_init(&ps, &l, bound);
    json_foreach(m, body) {
        if (entity_member(m->key) == E_ATTR && !parse_attr_member(&ps, NULL, m, &l))
            return NULL;
    }
    e->attrs   = l.v;
    e->n_attrs = (uint16_t)l.n;
    return e;
}

bool attr_parse(arena_t *a, const char *name, const json_t *v, const ld_context_t *ctx,
                unsigned flags, int64_t now, cr_attr_t *out, problem_t *p)
{
    pstate_t ps = { a, ctx, flags, now, p, model_max_attributes() };
    apath_t  pa = { name, NULL };

    if (!v || !name)
        return problem_set(p, PB_BAD_REQUEST_DATA, "no attribute given");
    return parse_instance(&ps, &pa, name, v, out);
}
