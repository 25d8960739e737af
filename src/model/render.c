/*
 * render.c - entities and attributes out, in every representation of
 * clause 4.5: normalized (4.5.2.2, 4.5.3.2, ...), concise (4.5.2.3, 4.5.3.3,
 * 4.5.18.3, 4.5.20.3, 4.5.21.3, 4.5.22.3, 4.5.24.3), simplified / keyValues
 * (4.5.4) and GeoJSON (4.5.16, 4.5.17), with the projection of 4.21
 * (pick / omit), the language filter of 4.15 and the system attributes of
 * 4.8 (createdAt, modifiedAt with options=sysAttrs).
 *
 * Everything streams through the JSON writer: no tree is built, nothing is
 * allocated. Names are compacted with ld_compact() (a hash lookup, interned
 * result). The language filter is parsed once per entity into a small array
 * on the stack.
 *
 * Several instances of one attribute (datasetIds, 4.5.5) are rendered as one
 * member: an array of instances (normalized, concise) or a {"dataset": {...}}
 * object keyed by datasetId with "@none" for the default (keyValues, 4.5.4).
 * Grouping the instances scans the attributes before each one: O(n^2)
 * pointer comparisons, negligible for the tens of attributes entities carry.
 * The datasetId selection (4.5.5) keeps only some instances.
 *
 * Inline Linked Entity retrieval (4.5.23.2): under a top-level Relationship
 * whose targets the operation fetched (render_join_t), an "entity" /
 * "entityList" member (keyValues: the value itself) renders them, nested
 * projections (projection.c) applied, recursively to joinLevel; the path
 * from the root is the list of entities encountered, so cycles end. A plain
 * inline answer does not render the linking entity again: its cached text
 * keeps the offsets where its Relationships end, and the linked entities
 * are spliced in there.
 */
#include "model.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define LANG_MAX_RANGES 16

typedef struct lang_range {
    const char *tag;
    size_t      len;
    double      q;
} lang_range_t;

/* Where the Relationships of an entity's plain rendering end (after their
 * "object" / "objectList" value): the points where inline Linked Entity
 * retrieval inserts an "entity" member into the cached text. */
#define LINK_REC_MAX 32
typedef struct link_rec {
    uint16_t n;
    bool     overflow;          /* more than LINK_REC_MAX: not spliceable */
    uint32_t off[LINK_REC_MAX];
    uint16_t attr[LINK_REC_MAX];
} link_rec_t;

typedef struct rctx rctx_t;
struct rctx {
    link_rec_t          *rec;       /* NULL, or recording the link points (render cache fill) */
    const render_opts_t *o;
    const cr_entity_t   *e;         /* the entity rendered (its attrs are the top level) */
    const rctx_t        *parent;    /* the linking entity's (4.5.23), NULL at the root */
    unsigned             depth;     /* of linked entity retrieval: 0 at the root */
    const ld_context_t  *ctx;
    uint64_t             ctx_serial;   /* ld_context_serial(ctx): memo key (addresses get reused) */
    fmt_t                fmt;
    bool                 sys;
    bool                 has_lang;
    bool                 proj;      /* some projection (pick, omit, attrs) */
    bool                 ds;        /* a datasetId selection */
    size_t               n_ranges;
    lang_range_t         ranges[LANG_MAX_RANGES];
};

/* ------------------------------------------------------------- helpers */

/* interned names (types, attribute names, objectType): memoized */
static const char *compact(const rctx_t *r, const char *iri)
{
    return ld_compact_name(r->ctx, iri);
}

/* An attribute name as a member key: compacted, quoted and memoized per
 * thread by (context, interned name), so the same names rendered for every
 * entity of a page cost a compare and a copy. Names that need escaping or
 * are long go the ordinary way. */
#define KEY_MEMO     256
#define KEY_MEMO_MAX 46
static __thread struct {
    uint64_t            ctx_serial;
    const char         *iri;
    uint8_t             len;
    char                text[KEY_MEMO_MAX + 1];
} key_memo[KEY_MEMO];

static void wr_name_key(json_writer_t *w, const rctx_t *r, const char *iri)
{
    size_t slot = (size_t)(cr_hash_ptr(iri) ^ (r->ctx_serial * 0x9e3779b97f4a7c15ULL)) & (KEY_MEMO - 1);
    if (CR_LIKELY(key_memo[slot].iri == iri && key_memo[slot].ctx_serial == r->ctx_serial)) {
        jw_key_raw(w, key_memo[slot].text, key_memo[slot].len);
        return;
    }
    /* two ways: the neighbour slot holds a name that collides with a live
     * one (two names of a page sharing a slot evicted each other, a full
     * compaction per entity) */
    if (key_memo[slot ^ 1].iri == iri && key_memo[slot ^ 1].ctx_serial == r->ctx_serial) {
        jw_key_raw(w, key_memo[slot ^ 1].text, key_memo[slot ^ 1].len);
        return;
    }
    if (key_memo[slot].iri && key_memo[slot].ctx_serial == r->ctx_serial)
        slot ^= 1;
    const char *term = ld_compact_name(r->ctx, iri);
    size_t      n = strlen(term);
    if (n + 3 > KEY_MEMO_MAX || strpbrk(term, "\"\\") ) {
        jw_key(w, term);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)term[i] < 0x20) {
            jw_key(w, term);
            return;
        }
    key_memo[slot].text[0] = '"';
    memcpy(key_memo[slot].text + 1, term, n);
    key_memo[slot].text[n + 1] = '"';
    key_memo[slot].text[n + 2] = ':';
    key_memo[slot].len = (uint8_t)(n + 3);
    key_memo[slot].ctx_serial = r->ctx_serial;
    key_memo[slot].iri = iri;
    jw_key_raw(w, key_memo[slot].text, key_memo[slot].len);
}

/* any other IRI (vocab values, which the frozen entity may hold as copies) */
static const char *compact_value(const rctx_t *r, const char *iri)
{
    return iri ? ld_compact(r->ctx, iri) : iri;
}

/* A time member: the key given quoted (WR_TIME), the text of a DateTime,
 * which never needs escaping, written with its quotes. */
static void wr_time_q(json_writer_t *w, const char *qkey, size_t qlen, int64_t us)
{
    char buf[64];                       /* the member whole: "key":"time" (qlen <= 16) */
    int  n;

    memcpy(buf, qkey, qlen);
    n = cr_datetime_format(us, buf + qlen + 1);
    n = n > 0 ? n : 0;
    buf[qlen] = buf[qlen + (size_t)n + 1] = '"';
    jw_raw(w, buf, qlen + (size_t)n + 2);
}
#define WR_TIME(w, lit, us)                                                                  \
    do {                                                                                     \
        _Static_assert(sizeof("\"" lit "\":") - 1 <= 16, "wr_time_q's buffer holds 16-byte keys"); \
        wr_time_q((w), "\"" lit "\":", sizeof("\"" lit "\":") - 1, (us));                    \
    } while (0)

/* The "type" member of an attribute, key and value in one piece: no strlen,
 * no escaping, one writer call per attribute. */
static void wr_kind(json_writer_t *w, uint8_t kind)
{
    static const struct { const char *q; size_t n; } kq[] = {
#define KQ(s) {"\"type\":\"" s "\"", sizeof("\"type\":\"" s "\"") - 1}
        [0] = KQ("Property"), [ATTR_PROPERTY] = KQ("Property"), [ATTR_RELATIONSHIP] = KQ("Relationship"),
        [ATTR_GEOPROPERTY] = KQ("GeoProperty"), [ATTR_LANGUAGEPROPERTY] = KQ("LanguageProperty"),
        [ATTR_VOCABPROPERTY] = KQ("VocabProperty"), [ATTR_LISTPROPERTY] = KQ("ListProperty"),
        [ATTR_LISTRELATIONSHIP] = KQ("ListRelationship"), [ATTR_JSONPROPERTY] = KQ("JsonProperty"),
#undef KQ
    };
    if (kind >= sizeof kq / sizeof kq[0])
        kind = 0;
    jw_raw(w, kq[kind].q, kq[kind].n);
}

static bool valid_time(int64_t ms)
{
    return ms != CR_NO_TIME && ms != 0;
}

/* "@id" / "@type" / scope / an attribute name in the projection list. */
static bool in_list(const char **list, size_t n, const char *name, bool by_text)
{
    for (size_t i = 0; i < n; i++) {
        if (list[i] == name)
            return true;
        if (by_text && list[i] && strcmp(list[i], name) == 0)
            return true;
    }
    return false;
}

/* 4.21: with pick only the listed members, with omit all but the listed. */
static bool projected(const render_opts_t *o, const char *name, bool by_text)
{
    if (o->pick_tree || o->omit_tree)
        return projection_keeps(o->pick_tree, name, false) && projection_keeps(o->omit_tree, name, true);
    if (o->n_pick && !in_list(o->pick, o->n_pick, name, by_text))
        return false;
    if (o->n_omit && in_list(o->omit, o->n_omit, name, by_text))
        return false;
    return true;
}

/* ------------------------------------------------- 4.15 language filter */

/* "fr-CH,fr;q=0.9,en;q=0.8,*;q=0.5" -> ranges by descending q (stable);
 * q=0 means "not acceptable" and is dropped. */
static void lang_parse(rctx_t *r, const char *s)
{
    r->n_ranges = 0;
    r->has_lang = s && *s;
    if (!r->has_lang)
        return;
    while (*s && r->n_ranges < LANG_MAX_RANGES) {
        const char *tag, *end, *semi;
        double      q = 1.0;

        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        if (!*s)
            break;
        tag = s;
        end = strchr(s, ',');
        if (!end)
            end = s + strlen(s);
        semi = memchr(tag, ';', (size_t)(end - tag));
        const char *tag_end = semi ? semi : end;

        while (tag_end > tag && (tag_end[-1] == ' ' || tag_end[-1] == '\t'))
            tag_end--;
        if (semi) {
            const char *qp = semi + 1;

            while (qp < end && (*qp == ' ' || *qp == '\t'))
                qp++;
            if (qp + 2 <= end && (qp[0] == 'q' || qp[0] == 'Q') && qp[1] == '=')
                q = strtod(qp + 2, NULL);
        }
        if (tag_end > tag && q > 0) {
            lang_range_t lr = { tag, (size_t)(tag_end - tag), q };
            size_t       i  = r->n_ranges++;

            while (i > 0 && r->ranges[i - 1].q < lr.q) {    /* stable insertion */
                r->ranges[i] = r->ranges[i - 1];
                i--;
            }
            r->ranges[i] = lr;
        }
        s = end;
    }
}

/* The best member of a languageMap for the filter: per range, an exact tag,
 * then a more specific tag (range "fr" serves "fr-CH"), then a less specific
 * one (range "fr-CH" is served by "fr"); "*" takes any. When nothing fits,
 * 4.15 says to default to any supported language: "@none" if there, else the
 * first. NULL only for an empty map. */
static const json_t *lang_pick(const rctx_t *r, const json_t *map)
{
    const json_t *none = NULL;

    if (!json_is_object(map) || !map->child)
        return NULL;
    for (size_t i = 0; i < r->n_ranges; i++) {
        const lang_range_t *lr = &r->ranges[i];

        if (lr->len == 1 && lr->tag[0] == '*')
            return map->child;
        json_foreach(m, map)
            if (strlen(m->key) == lr->len && strncasecmp(m->key, lr->tag, lr->len) == 0)
                return m;
        json_foreach(m, map)
            if (strlen(m->key) > lr->len && m->key[lr->len] == '-' &&
                strncasecmp(m->key, lr->tag, lr->len) == 0)
                return m;
        json_foreach(m, map) {
            size_t kl = strlen(m->key);

            if (kl < lr->len && lr->tag[kl] == '-' && strncasecmp(m->key, lr->tag, kl) == 0)
                return m;
        }
    }
    json_foreach(m, map)
        if (strcmp(m->key, "@none") == 0)
            none = m;
    return none ? none : map->child;
}

/* --------------------------------------------------------- attributes */

/* The instances of one name, in order: attrs[first], then group_next()
 * until n. next[] (when not NULL) links each instance to the next one of
 * its name (n at the end); without it the list is scanned. */
typedef struct group {
    const cr_attr_t *attrs;
    size_t           n;
    const uint32_t  *next;
} group_t;

static inline size_t group_next(const group_t *g, size_t i)
{
    if (g->next)
        return g->next[i];
    for (size_t j = i + 1; j < g->n; j++)
        if (g->attrs[j].name == g->attrs[i].name)
            return j;
    return g->n;
}

static void render_group(json_writer_t *w, const rctx_t *r, const group_t *g, size_t first);

/* Up to this many members, finding the instances of a name scans the list
 * (no allocation on the hot path); beyond it, an index links them in linear
 * time (a scan was quadratic: 65,535 attributes took 12 s to render). */
#define MEMBERS_SCAN 32

/* attrs are the entity's own (not sub-attributes)? */
static bool top_level(const rctx_t *r, const cr_attr_t *attrs)
{
    return r->e && attrs >= r->e->attrs && attrs < r->e->attrs + r->e->n_attrs;
}

bool attr_instance_selected(const cr_attr_t *a, const char *const *dataset_ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *d = dataset_ids[i];

        if (a->dataset_id ? strcmp(d, a->dataset_id) == 0 : strcmp(d, "@none") == 0)
            return true;
    }
    return n == 0;
}

/* An instance rendered: at the top level, one of the datasetIds asked for. */
static inline bool instance_shown(const rctx_t *r, const cr_attr_t *attrs, size_t i)
{
    return !r->ds || !top_level(r, attrs) || attr_instance_selected(&attrs[i], r->o->dataset_ids, r->o->n_dataset_ids);
}


/* Sub-attributes (and, at the top, attributes) as members, grouped by name. */
static void render_members(json_writer_t *w, const rctx_t *r, const cr_attr_t *attrs,
                           size_t n, bool top)
{
    group_t  g = { attrs, n, NULL };
    uint8_t *later = NULL;              /* not the first instance of its name */
    uint32_t *heap = NULL;

    if (n > MEMBERS_SCAN) {
        size_t    cap = 16;
        arena_t  *a = w->sb->a;
        while (cap < 2 * n)
            cap *= 2;
        size_t    bytes = (n + cap) * sizeof(uint32_t) + n;
        uint32_t *next = a ? arena_alloc(a, bytes) : (heap = cr_xmalloc(bytes));
        uint32_t *last = next + n;      /* name -> index + 1 of its latest instance */
        later = (uint8_t *)(last + cap);
        memset(last, 0, cap * sizeof *last);
        memset(later, 0, n);
        for (size_t i = 0; i < n; i++) {
            size_t h = (size_t)cr_hash_ptr(attrs[i].name) & (cap - 1);
            next[i] = (uint32_t)n;
            while (last[h] && attrs[last[h] - 1].name != attrs[i].name)
                h = (h + 1) & (cap - 1);
            if (last[h]) {
                next[last[h] - 1] = (uint32_t)i;
                later[i] = 1;
            }
            last[h] = (uint32_t)i + 1;
        }
        g.next = next;
    }
    for (size_t i = 0; i < n; i++) {
        bool seen = false;

        if (later)
            seen = later[i];
        else
            for (size_t j = 0; j < i && !seen; j++)
                seen = attrs[j].name == attrs[i].name;
        if (seen)
            continue;
        if (top && r->proj && !projected(r->o, attrs[i].name, false))
            continue;
        if (top && r->ds) {
            size_t k = i;

            while (k < n && (attrs[k].name != attrs[i].name || !instance_shown(r, attrs, k)))
                k++;
            if (k == n)
                continue;           /* 4.5.5: no instance left, the attribute is left out */
        }
        wr_name_key(w, r, attrs[i].name);
        render_group(w, r, &g, i);
    }
    if (heap)
        free(heap);
}

static void wr_vocab(json_writer_t *w, const rctx_t *r, const json_t *v)
{
    if (json_is_string(v)) {
        jw_string(w, compact_value(r, v->str));
    } else if (json_is_array(v)) {
        jw_array_begin(w);
        json_foreach(c, v) {
            if (json_is_string(c))
                jw_string(w, compact_value(r, c->str));
            else
                jw_value(w, c);
        }
        jw_array_end(w);
    } else if (v) {
        jw_value(w, v);
    } else {
        jw_null(w);
    }
}

/* objectList: {"object": uri} per entry (normalized) or bare URIs. */
static void wr_object_list(json_writer_t *w, const json_t *v, bool wrapped)
{
    if (!json_is_array(v)) {
        if (v)
            jw_value(w, v);
        else
            jw_null(w);
        return;
    }
    jw_array_begin(w);
    json_foreach(c, v) {
        const json_t *uri = c;

        if (json_is_object(c)) {
            const json_t *obj = json_get(c, "object");

            if (!obj) {             /* not ours to interpret: as stored */
                jw_value(w, c);
                continue;
            }
            uri = obj;
        }
        if (wrapped) {
            jw_object_begin(w);
            JW_KEY_LIT(w, "object");
            jw_value(w, uri);
            jw_object_end(w);
        } else {
            jw_value(w, uri);
        }
    }
    jw_array_end(w);
}

static void wr_json(json_writer_t *w, const json_t *v)
{
    if (v)
        jw_value(w, v);
    else
        jw_null(w);
}

/* ------------------------------------------ linked entities (4.5.23.2) */

static void render_entity_at(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o,
                             const rctx_t *parent, link_rec_t *rec);

/* A Relationship of the entity whose targets are inlined: a top-level
 * Relationship or ListRelationship, projected, above joinLevel. */
static inline bool joins(const rctx_t *r, const cr_attr_t *a)
{
    const render_join_t *j = r->o->join;

    return j && r->depth < j->level && (a->kind == ATTR_RELATIONSHIP || a->kind == ATTR_LISTRELATIONSHIP) &&
           top_level(r, a);
}

/* The linked entity with this id, unless it was encountered already (an
 * entity on the path from the root, or one of containedBy: 5.7.1.5) or is
 * not held here. */
static const cr_entity_t *linked(const rctx_t *r, const json_t *uri)
{
    const render_join_t *j = r->o->join;

    if (!json_is_string(uri))
        return NULL;
    for (size_t i = 0; i < j->n_seen; i++)
        if (strcmp(j->seen[i], uri->str) == 0)
            return NULL;
    for (const rctx_t *q = r; q; q = q->parent)
        if (strcmp(q->e->id, uri->str) == 0)
            return NULL;
    const cr_entity_t *t = j->find(j->ud, uri->str);
    if (t && *j->left == 0) {
        *j->over = true;
        return NULL;
    }
    return t;
}

/* The target URIs of a Relationship (a string or an array) or a
 * ListRelationship ([{"object": uri}, ...]), one by one. */
static const json_t *target_at(const cr_attr_t *a, const json_t *el)
{
    if (a->kind == ATTR_LISTRELATIONSHIP && json_is_object(el))
        return json_get(el, "object");
    return el;
}

/* The linked entity t, reached through relationship a, projected as the
 * nested terms say and in the format and options of the linking entity. */
static void render_linked(json_writer_t *w, const rctx_t *r, const cr_attr_t *a, const cr_entity_t *t)
{
    render_opts_t lo = *r->o;

    (*r->o->join->left)--;
    lo.context_json = NULL;
    lo.pick_tree    = projection_link(r->o->pick_tree, a->name, false);
    lo.omit_tree    = projection_link(r->o->omit_tree, a->name, true);
    if (r->o->join->roots_pick_only) {
        lo.pick   = NULL;
        lo.n_pick = 0;
    }
    if (r->depth + 1 >= r->o->join->level && !lo.pick && !lo.omit && !lo.pick_tree && !lo.omit_tree &&
        !lo.n_dataset_ids) {
        lo.join = NULL;         /* a plain entity: the render cache may serve it */
        entity_render(w, t, &lo);
        return;
    }
    render_entity_at(w, t, &lo, r, NULL);
}

/* Any linked entity for a? */
static bool any_linked(const rctx_t *r, const cr_attr_t *a)
{
    if (!json_is_array(a->value))
        return linked(r, target_at(a, a->value)) != NULL;
    json_foreach(el, a->value)
        if (linked(r, target_at(a, el)))
            return true;
    return false;
}

/* "entity" (Relationship: one entity, or an array for several objects) or
 * "entityList" (ListRelationship), holding the linked entities held here. */
static void wr_linked_member(json_writer_t *w, const rctx_t *r, const cr_attr_t *a)
{
    if (!any_linked(r, a))
        return;
    if (a->kind == ATTR_RELATIONSHIP && !json_is_array(a->value)) {
        JW_KEY_LIT(w, "entity");
        render_linked(w, r, a, linked(r, a->value));
        return;
    }
    if (a->kind == ATTR_LISTRELATIONSHIP)
        JW_KEY_LIT(w, "entityList");
    else
        JW_KEY_LIT(w, "entity");
    jw_array_begin(w);
    json_foreach(el, a->value) {
        const cr_entity_t *t = linked(r, target_at(a, el));

        if (t)
            render_linked(w, r, a, t);
    }
    jw_array_end(w);
}

/* Notes the end of a top-level Relationship's value in the text written so far. */
static void link_record(json_writer_t *w, const rctx_t *r, const cr_attr_t *a)
{
    link_rec_t *rec = r->rec;

    if (!top_level(r, a))
        return;
    if (rec->n == LINK_REC_MAX || w->sb->len > UINT32_MAX) {
        rec->overflow = true;
        return;
    }
    rec->off[rec->n]  = (uint32_t)w->sb->len;
    rec->attr[rec->n] = (uint16_t)(a - r->e->attrs);
    rec->n++;
}

/* keyValues (4.5.23.2 with 4.5.4): the Relationship's value is the linked
 * entity (each target not held here stays its URI). */
static void wr_linked_value(json_writer_t *w, const rctx_t *r, const cr_attr_t *a)
{
    if (!json_is_array(a->value)) {
        const cr_entity_t *t = linked(r, a->value);

        if (t)
            render_linked(w, r, a, t);
        else
            jw_value(w, a->value);
        return;
    }
    jw_array_begin(w);
    json_foreach(el, a->value) {
        const json_t      *uri = target_at(a, el);
        const cr_entity_t *t   = linked(r, uri);

        if (t)
            render_linked(w, r, a, t);
        else if (uri)
            jw_value(w, uri);
        else
            jw_value(w, el);
    }
    jw_array_end(w);
}

/* The simplified (keyValues) value of one instance (4.5.4). */
static void render_simplified(json_writer_t *w, const rctx_t *r, const cr_attr_t *a)
{
    if (joins(r, a)) {
        wr_linked_value(w, r, a);
        return;
    }
    switch ((attr_kind_t)a->kind) {
    case ATTR_LANGUAGEPROPERTY:
        if (r->has_lang) {
            const json_t *m = lang_pick(r, a->value);

            if (m) {
                jw_value(w, m);
                return;
            }
        }
        jw_object_begin(w);
        JW_KEY_LIT(w, "languageMap");
        wr_json(w, a->value);
        jw_object_end(w);
        return;
    case ATTR_VOCABPROPERTY:
        jw_object_begin(w);
        JW_KEY_LIT(w, "vocab");
        wr_vocab(w, r, a->value);
        jw_object_end(w);
        return;
    case ATTR_JSONPROPERTY:
        jw_object_begin(w);
        JW_KEY_LIT(w, "json");
        wr_json(w, a->value);
        jw_object_end(w);
        return;
    case ATTR_LISTRELATIONSHIP:
        wr_object_list(w, a->value, false);
        return;
    default:                    /* Property, GeoProperty, Relationship, ListProperty */
        wr_json(w, a->value);
        return;
    }
}

/* ------------------------------------------------------- concise form */

/* A key that, in an object given as an attribute, is read as one of the
 * attribute's own members (4.5.2.3 ff.) rather than as part of a value. */
static bool attr_member_key(const char *k)
{
    static const char *const keys[] = {
        "type", "@type", "value", "object", "languageMap", "vocab", "valueList", "objectList",
        "json", "observedAt", "unitCode", "datasetId", "objectType", "valueType", "expiresAt",
        "createdAt", "modifiedAt", "deletedAt", "instanceId", "@context",
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(keys); i++)
        if (strcmp(k, keys[i]) == 0)
            return true;
    return false;
}

static bool has_attr_member_key(const json_t *o)
{
    json_foreach(m, o)
        if (attr_member_key(m->key))
            return true;
    return false;
}

/* A Property value that, written bare, would be read back as the same
 * Property (4.5.2.3): an object only when none of its keys is an attribute
 * member ({"type": ...} makes it a normalized attribute, {"value": ...} a
 * concise one); an array only when it is not empty and not made of such
 * objects only (that reads as several instances, 4.5.5). */
static bool bare_value_ok(const json_t *v)
{
    if (json_is_object(v))
        return !has_attr_member_key(v);
    if (json_is_array(v)) {
        if (v->len == 0)
            return false;
        json_foreach(el, v)
            if (!json_is_object(el) || !has_attr_member_key(el))
                return true;
        return false;
    }
    return v != NULL;
}

/* {"value": v} alone reads as a GeoProperty when v is a GeoJSON geometry
 * (4.5.2.3, "type"): a Property holding one says so. The test is the one
 * the parser applies. */
static bool value_reads_as_geometry(const json_t *v)
{
    static const char *const types[] = {
        "Point", "MultiPoint", "LineString", "MultiLineString", "Polygon", "MultiPolygon",
    };
    const json_t *t;

    if (!json_is_object(v) || !json_get(v, "coordinates"))
        return false;
    t = json_get(v, "type");
    if (!json_is_string(t))
        return false;
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++)
        if (strcmp(t->str, types[i]) == 0)
            return true;
    return false;
}

/* A Property whose concise form may be its bare value (4.5.2.3): nothing
 * but the value to say, and a value that cannot be mistaken for an
 * attribute object. */
static bool concise_bare(const rctx_t *r, const cr_attr_t *a)
{
    if (a->n_sub || a->observed_at != CR_NO_TIME || a->unit_code || a->dataset_id ||
        a->object_type || r->sys)
        return false;
    if (a->kind == ATTR_GEOPROPERTY)
        return true;
    return a->kind == ATTR_PROPERTY && bare_value_ok(a->value);   /* a geometry has "type" */
}

/* One instance, normalized or concise (the object form unless concise_bare). */
static void render_instance(json_writer_t *w, const rctx_t *r, const cr_attr_t *a)
{
    bool          concise = r->fmt == FMT_CONCISE;
    const json_t *lang    = NULL;

    if (r->fmt == FMT_KEYVALUES) {
        render_simplified(w, r, a);
        return;
    }
    if (a->kind == ATTR_LANGUAGEPROPERTY && r->has_lang)
        lang = lang_pick(r, a->value);

    if (concise && !lang && concise_bare(r, a)) {
        wr_json(w, a->value);
        return;
    }

    jw_object_begin(w);
    if (lang) {
        /* 4.15 / C.2.2: the LanguageProperty becomes a Property */
        if (!concise) {
            wr_kind(w, ATTR_PROPERTY);
        }
        JW_KEY_LIT(w, "value");
        jw_value(w, lang);
        JW_KEY_LIT(w, "lang");
        jw_string(w, lang->key);
    } else {
        /* Concise keeps "type" only where the members alone would be read
         * otherwise: a Property whose value is a GeoJSON geometry would
         * pass for a GeoProperty (4.5.2.3). */
        if (!concise || (a->kind == ATTR_PROPERTY && value_reads_as_geometry(a->value))) {
            wr_kind(w, a->kind);
        }
        switch ((attr_kind_t)a->kind) {
        case ATTR_RELATIONSHIP:
            JW_KEY_LIT(w, "object");
            wr_json(w, a->value);
            if (r->rec)
                link_record(w, r, a);
            if (joins(r, a))
                wr_linked_member(w, r, a);
            break;
        case ATTR_LANGUAGEPROPERTY:
            JW_KEY_LIT(w, "languageMap");
            wr_json(w, a->value);
            break;
        case ATTR_VOCABPROPERTY:
            JW_KEY_LIT(w, "vocab");
            wr_vocab(w, r, a->value);
            break;
        case ATTR_LISTPROPERTY:
            JW_KEY_LIT(w, "valueList");
            wr_json(w, a->value);
            break;
        case ATTR_LISTRELATIONSHIP:
            JW_KEY_LIT(w, "objectList");
            wr_object_list(w, a->value, !concise);
            if (r->rec)
                link_record(w, r, a);
            if (joins(r, a))
                wr_linked_member(w, r, a);
            break;
        case ATTR_JSONPROPERTY:
            JW_KEY_LIT(w, "json");
            wr_json(w, a->value);
            break;
        default:
            JW_KEY_LIT(w, "value");
            wr_json(w, a->value);
            break;
        }
    }
    if (a->object_type) {
        JW_KEY_LIT(w, "objectType");
        if (!strchr(a->object_type, ' ')) {
            jw_string(w, compact(r, a->object_type));
        } else {                        /* several types (5.2.6): each interned on its own */
            jw_array_begin(w);
            for (const char *s = a->object_type; *s;) {
                size_t l = strcspn(s, " ");
                jw_string(w, compact(r, intern(s, l)));
                s += l + (s[l] == ' ');
            }
            jw_array_end(w);
        }
    }
    if (a->observed_at != CR_NO_TIME)
        WR_TIME(w, "observedAt", a->observed_at);
    if (a->unit_code) {
        JW_KEY_LIT(w, "unitCode");
        jw_string(w, a->unit_code);
    }
    if (a->dataset_id) {
        JW_KEY_LIT(w, "datasetId");
        jw_string(w, a->dataset_id);
    }
    if (r->sys) {
        if (valid_time(a->created_at))
            WR_TIME(w, "createdAt", a->created_at);
        if (valid_time(a->modified_at))
            WR_TIME(w, "modifiedAt", a->modified_at);
    }
    if (a->n_sub)
        render_members(w, r, a->sub, a->n_sub, false);
    jw_object_end(w);
}

/* attrs[first] and the later instances with the same name. */
static void render_group(json_writer_t *w, const rctx_t *r, const group_t *g, size_t first)
{
    const cr_attr_t *attrs = g->attrs;
    size_t           count = 0, only = first;   /* instances shown (4.5.5: datasetId), up to 2 */

    for (size_t i = first; i < g->n && count < 2; i = group_next(g, i))
        if (instance_shown(r, attrs, i)) {
            if (!count) only = i;
            count++;
        }
    if (count == 1) {
        render_instance(w, r, &attrs[only]);
        return;
    }

    if (r->fmt == FMT_KEYVALUES) {
        /* 4.5.4: {"dataset": {"@none": v, "<datasetId>": v, ...}} */
        jw_object_begin(w);
        JW_KEY_LIT(w, "dataset");
        jw_object_begin(w);
        for (size_t i = first; i < g->n; i = group_next(g, i)) {
            if (!instance_shown(r, attrs, i))
                continue;
            jw_key(w, attrs[i].dataset_id ? attrs[i].dataset_id : "@none");
            render_simplified(w, r, &attrs[i]);
        }
        jw_object_end(w);
        jw_object_end(w);
        return;
    }
    jw_array_begin(w);
    for (size_t i = first; i < g->n; i = group_next(g, i))
        if (instance_shown(r, attrs, i))
            render_instance(w, r, &attrs[i]);
    jw_array_end(w);
}

/* ------------------------------------------------------------- entity */

static inline void rctx_init(rctx_t *r, const render_opts_t *o)
{
    r->o        = o;
    r->rec      = NULL;
    r->proj     = o->n_pick || o->n_omit || o->pick_tree || o->omit_tree;
    r->ds       = o->n_dataset_ids != 0;
    r->e        = NULL;
    r->parent   = NULL;
    r->depth    = 0;
    r->ctx      = o->ctx ? o->ctx : ld_core();
    r->ctx_serial = ld_context_serial(r->ctx);
    r->fmt      = o->format;
    r->sys      = o->sys_attrs;
    lang_parse(r, o->lang);
}

static void wr_types(json_writer_t *w, const rctx_t *r, const cr_entity_t *e)
{
    if (e->n_types == 1) {
        jw_string(w, compact(r, e->types[0]));
        return;
    }
    jw_array_begin(w);
    for (size_t i = 0; i < e->n_types; i++)
        jw_string(w, compact(r, e->types[i]));
    jw_array_end(w);
}

/* type, scope, system attributes and attributes: what an entity and a
 * GeoJSON Feature's "properties" share. */
static void render_body(json_writer_t *w, const rctx_t *r, const cr_entity_t *e, bool force_type)
{
    if (force_type || projected(r->o, "@type", true)) {
        JW_KEY_LIT(w, "type");
        wr_types(w, r, e);
    }
    if (e->scope && projected(r->o, MN.scope, false)) {
        JW_KEY_LIT(w, "scope");
        jw_value(w, e->scope);
    }
    if (r->sys) {
        if (valid_time(e->created_at))
            WR_TIME(w, "createdAt", e->created_at);
        if (valid_time(e->modified_at))
            WR_TIME(w, "modifiedAt", e->modified_at);
    }
    render_members(w, r, e->attrs, e->n_attrs, true);
}

static void wr_context(json_writer_t *w, const render_opts_t *o)
{
    if (!o->context_json)
        return;
    JW_KEY_LIT(w, "@context");
    jw_raw(w, o->context_json, strlen(o->context_json));
}

/* ------------------------------------------------------- render cache */

typedef struct render_cache {
    uint64_t            ctx_serial;       /* ld_context_serial: contexts may be evicted */
    uint32_t            len;
    uint32_t            size;       /* of the block */
    uint8_t             format;
    uint8_t             links_ok;   /* the link points below are all of them */
    uint16_t            n_links;
    /* n_links offsets (uint32_t), n_links attribute indexes (uint16_t), then the text */
    uint32_t            data[];
} render_cache_t;

#define RC_OFF(rc)  ((const uint32_t *)(rc)->data)
#define RC_ATTR(rc) ((const uint16_t *)((rc)->data + (rc)->n_links))
#define RC_TEXT(rc) ((const char *)(RC_ATTR(rc) + (rc)->n_links))

static size_t   rc_bytes;                 /* atomics */
static uint64_t rc_entries, rc_hits, rc_misses;

void render_cache_release(void *p)
{
    render_cache_t *rc = p;
    if (!rc)
        return;
    __atomic_sub_fetch(&rc_bytes, rc->size, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&rc_entries, 1, __ATOMIC_RELAXED);
    free(rc);
}

void render_cache_get_stats(render_cache_stats_t *st)
{
    st->bytes = __atomic_load_n(&rc_bytes, __ATOMIC_RELAXED);
    st->entries = __atomic_load_n(&rc_entries, __ATOMIC_RELAXED);
    st->hits = __atomic_load_n(&rc_hits, __ATOMIC_RELAXED);
    st->misses = __atomic_load_n(&rc_misses, __ATOMIC_RELAXED);
}

static inline bool cacheable(const cr_entity_t *e, const render_opts_t *o)
{
    /* frozen (refs > 0; other threads change refs atomically) */
    return __atomic_load_n(&e->refs, __ATOMIC_RELAXED) > 0 && cr_config.render_cache_mb > 0 && !o->sys_attrs && !o->pick && !o->omit && !o->lang &&
           !o->context_json && !o->pick_tree && !o->omit_tree && !o->n_dataset_ids && !o->join;
}

/* Keeps text as e's cached rendering when e has none yet and the budget
 * allows; the entity is shared and otherwise immutable: the pointer is set
 * once, by compare-and-swap. */
static void cache_offer(const cr_entity_t *e, const render_opts_t *o, const char *text, size_t len,
                        const link_rec_t *rec)
{
    size_t need = sizeof(render_cache_t) + rec->n * (sizeof(uint32_t) + sizeof(uint16_t)) + len;
    size_t limit = (size_t)cr_config.render_cache_mb << 20;
    if (len > UINT32_MAX || __atomic_add_fetch(&rc_bytes, need, __ATOMIC_RELAXED) > limit) {
        __atomic_sub_fetch(&rc_bytes, need, __ATOMIC_RELAXED);
        return;
    }
    render_cache_t *rc = cr_xmalloc(need);
    rc->ctx_serial = ld_context_serial(o->ctx);
    rc->format = (uint8_t)o->format;
    rc->len = (uint32_t)len;
    rc->size = (uint32_t)need;
    rc->links_ok = !rec->overflow;
    rc->n_links = rec->n;
    for (size_t i = 0; i < rec->n; i++) {      /* a few: no memcpy call */
        ((uint32_t *)RC_OFF(rc))[i]  = rec->off[i];
        ((uint16_t *)RC_ATTR(rc))[i] = rec->attr[i];
    }
    memcpy((char *)RC_TEXT(rc), text, len);
    void *expected = NULL;
    if (__atomic_compare_exchange_n(&((cr_entity_t *)e)->render_cache, &expected, rc, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED)) {
        __atomic_add_fetch(&rc_entries, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_sub_fetch(&rc_bytes, need, __ATOMIC_RELAXED);   /* another reader was first */
    free(rc);
}

static void render_entity(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o);
static void render_entity_rec(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o, link_rec_t *rec);

/* Inline join on a plain rendering (normalized or concise, nothing else
 * asked): the entity's cached text with an "entity" member spliced in after
 * each Relationship that has linked entities, so that a join costs the
 * linked entities, not a new rendering of the linking one. */
static bool spliceable(const cr_entity_t *e, const render_opts_t *o)
{
    return o->join && o->format != FMT_KEYVALUES && !o->sys_attrs && !o->pick && !o->omit && !o->lang &&
           !o->context_json && !o->pick_tree && !o->omit_tree && !o->n_dataset_ids &&
           __atomic_load_n(&e->refs, __ATOMIC_RELAXED) > 0;
}

static void splice(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o, const char *text, size_t len,
                   size_t n_links, const uint32_t *off, const uint16_t *attr)
{
    rctx_t        r;
    json_writer_t tw;               /* inside the entity object: a member follows */
    size_t        pos = 0;
    bool          started = false;

    rctx_init(&r, o);
    r.e = e;
    jw_init(&tw, w->sb);
    tw.depth = 1;
    tw.need_comma[1] = 1;
    for (size_t k = 0; k < n_links; k++) {
        const cr_attr_t *a = &e->attrs[attr[k]];

        if (!joins(&r, a) || !any_linked(&r, a))
            continue;
        if (!started)
            jw_raw(w, text, off[k]);
        else
            sb_add(w->sb, text + pos, off[k] - pos);
        started = true;
        pos = off[k];
        wr_linked_member(&tw, &r, a);
    }
    if (!started)
        jw_raw(w, text, len);
    else
        sb_add(w->sb, text + pos, len - pos);
}

static void render_joined(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o)
{
    render_opts_t plain = *o;
    plain.join = NULL;
    const render_cache_t *rc = __atomic_load_n((render_cache_t *const *)&e->render_cache, __ATOMIC_ACQUIRE);
    if (rc && rc->ctx_serial == ld_context_serial(o->ctx) && rc->format == o->format) {
        if (!rc->links_ok) {            /* too many Relationships to note: rendered in full */
            render_entity(w, e, o);
            return;
        }
        __atomic_add_fetch(&rc_hits, 1, __ATOMIC_RELAXED);
        splice(w, e, o, RC_TEXT(rc), rc->len, rc->n_links, RC_OFF(rc), RC_ATTR(rc));
        return;
    }
    sbuf_t        tmp;
    json_writer_t tw;
    link_rec_t    rec;
    rec.n = 0;
    rec.overflow = false;
    sb_init(&tmp, w->sb->a, 512);
    jw_init(&tw, &tmp);
    render_entity_rec(&tw, e, &plain, &rec);
    if (!rc && cacheable(e, &plain)) {
        __atomic_add_fetch(&rc_misses, 1, __ATOMIC_RELAXED);
        cache_offer(e, &plain, tmp.p, tmp.len, &rec);
    }
    if (rec.overflow)
        render_entity(w, e, o);
    else
        splice(w, e, o, tmp.p, tmp.len, rec.n, rec.off, rec.attr);
    if (!tmp.a)
        sb_release(&tmp);
}

/* The plain text of an entity, with the "@context" member of an ld+json
 * answer put in before its closing brace, where render_entity_at writes it
 * (wr_context: the last member), so that ld+json answers share the cache. */
static inline __attribute__((always_inline)) void emit(json_writer_t *w, const char *text, size_t len,
                                                      const char *context_json)
{
    if (!context_json) {
        jw_raw(w, text, len);
        return;
    }
    jw_raw(w, text, len - 1);
    sb_add(w->sb, ",\"@context\":", sizeof ",\"@context\":" - 1);
    sb_adds(w->sb, context_json);
    sb_addc(w->sb, '}');
}

/* From the cache, or rendered and offered to it: po is the plain rendering
 * (o without its @context member, context_json), o the one asked for. */
static inline __attribute__((always_inline)) void render_cached(json_writer_t *w, const cr_entity_t *e,
                                                               const render_opts_t *po, const render_opts_t *o,
                                                               const char *context_json)
{
    const render_cache_t *rc = __atomic_load_n((render_cache_t *const *)&e->render_cache, __ATOMIC_ACQUIRE);
    if (rc && rc->ctx_serial == ld_context_serial(o->ctx) && rc->format == o->format) {
        __atomic_add_fetch(&rc_hits, 1, __ATOMIC_RELAXED);
        emit(w, RC_TEXT(rc), rc->len, context_json);
        return;
    }
    __atomic_add_fetch(&rc_misses, 1, __ATOMIC_RELAXED);
    if (rc) {                           /* cached for another format or context */
        render_entity(w, e, o);
        return;
    }
    /* render on its own, then copy: the cached text is exactly the value */
    sbuf_t        tmp;
    json_writer_t tw;
    sb_init(&tmp, w->sb->a, 512);
    jw_init(&tw, &tmp);
    link_rec_t rec;
    rec.n = 0;
    rec.overflow = false;
    render_entity_rec(&tw, e, po, &rec);
    emit(w, tmp.p, tmp.len, context_json);
    cache_offer(e, po, tmp.p, tmp.len, &rec);
    if (!tmp.a)
        sb_release(&tmp);
}

/* ld+json: the plain rendering's cached text and the @context member. */
static void __attribute__((noinline)) render_ld(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o)
{
    render_opts_t plain = *o;

    plain.context_json = NULL;
    if (!cacheable(e, &plain)) {
        render_entity(w, e, o);
        return;
    }
    render_cached(w, e, &plain, o, o->context_json);
}

void entity_render(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o)
{
    if (spliceable(e, o)) {
        render_joined(w, e, o);
        return;
    }
    if (o->context_json && !o->join) {
        render_ld(w, e, o);
        return;
    }
    if (!cacheable(e, o)) {
        render_entity(w, e, o);
        return;
    }
    render_cached(w, e, o, o, NULL);
}

static void render_entity(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o)
{
    render_entity_at(w, e, o, NULL, NULL);
}

static void render_entity_rec(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o, link_rec_t *rec)
{
    render_entity_at(w, e, o, NULL, rec);
}

static void render_entity_at(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o,
                             const rctx_t *parent, link_rec_t *rec)
{
    rctx_t r;

    rctx_init(&r, o);
    r.rec    = rec;
    r.e      = e;
    r.parent = parent;
    r.depth  = parent ? parent->depth + 1 : 0;
    jw_object_begin(w);
    if (projected(o, "@id", true)) {
        JW_KEY_LIT(w, "id");
        jw_string(w, e->id);
    }
    render_body(w, &r, e, false);
    wr_context(w, o);
    jw_object_end(w);
}

/* 4.5.16.1: the selected GeoProperty's default instance (or the first). */
static const json_t *feature_geometry(const cr_entity_t *e, const char *name)
{
    const cr_attr_t *first = NULL;

    for (size_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *a = &e->attrs[i];

        if (a->name != name)
            continue;
        if (!a->dataset_id) {
            first = a;
            break;
        }
        if (!first)
            first = a;
    }
    if (!first || !json_is_object(first->value) || !json_get(first->value, "type"))
        return NULL;
    if (first->kind != ATTR_GEOPROPERTY && first->kind != ATTR_PROPERTY)
        return NULL;
    return first->value;
}

void entity_render_geojson(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o)
{
    rctx_t        r;
    const json_t *geo;

    rctx_init(&r, o);
    r.e = e;
    geo = feature_geometry(e, o->geoproperty ? o->geoproperty : MN.location);

    jw_object_begin(w);
    JW_KEY_LIT(w, "id");
    jw_string(w, e->id);
    JW_KEY_LIT(w, "type");
    jw_string(w, "Feature");
    JW_KEY_LIT(w, "geometry");
    if (geo)
        jw_value(w, geo);
    else
        jw_null(w);
    JW_KEY_LIT(w, "properties");
    jw_object_begin(w);
    render_body(w, &r, e, true);
    jw_object_end(w);
    wr_context(w, o);
    jw_object_end(w);
}

void attr_render(json_writer_t *w, const cr_attr_t *a, const render_opts_t *o)
{
    rctx_t r;

    rctx_init(&r, o);
    render_instance(w, &r, a);
}
