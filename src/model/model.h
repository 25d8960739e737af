/*
 * model.h - the NGSI-LD information model as coraine holds it (clause 5.2),
 * and everything that reads it: validation of incoming entities, the
 * operations that change an entity (merge, append, update, replace, delete
 * attribute), rendering in every format, and the query languages (q of 4.9,
 * geo of 4.10, type selection of 4.17, scopeQ of 4.19) evaluated on it.
 *
 * One representation serves two lifetimes:
 *  - a draft: built from a request body in the request arena (entity_parse),
 *    its strings and values pointing into the parsed body;
 *  - a frozen entity: entity_freeze() lays the whole entity out in ONE
 *    block (names stay interned, values typed, nothing to parse again), with a
 *    reference count. Frozen entities are immutable: a write builds a new one
 *    and the store swaps the pointer, so a reader that holds a reference can
 *    render after the store lock is released, and a Change is just (before,
 *    after).
 *
 * All names (entity types, attribute names) are expanded IRIs, interned:
 * compare them by pointer.
 */
#ifndef CORAINE_MODEL_H
#define CORAINE_MODEL_H

#include "../core/core.h"
#include "../json/json.h"
#include "../ld/ld.h"

#define CR_NO_TIME INT64_MIN

/* Interned IRIs of the core members, set by model_init(). */
typedef struct model_names {
    const char *property, *relationship, *geoproperty, *languageproperty,
               *vocabproperty, *listproperty, *listrelationship, *jsonproperty;
    const char *has_value, *has_object, *has_language_map, *has_vocab, *has_value_list,
               *has_object_list, *json;
    const char *observed_at, *unit_code, *dataset_id, *created_at, *modified_at,
               *location, *observation_space, *operation_space, *scope, *object_type;
} model_names_t;
extern model_names_t MN;
void model_init(void);               /* after ld_init() */

/* ------------------------------------------------------------- entities */

typedef enum {
    ATTR_PROPERTY = 1,
    ATTR_RELATIONSHIP,
    ATTR_GEOPROPERTY,
    ATTR_LANGUAGEPROPERTY,
    ATTR_VOCABPROPERTY,
    ATTR_LISTPROPERTY,
    ATTR_LISTRELATIONSHIP,
    ATTR_JSONPROPERTY
} attr_kind_t;

const char *attr_kind_name(attr_kind_t k);   /* "Property", "Relationship", ... */

typedef struct cr_attr cr_attr_t;
struct cr_attr {
    const char *name;         /* expanded IRI, interned */
    const char *dataset_id;   /* NULL: the default instance */
    /* The attribute's value, by kind: Property/GeoProperty: value;
     * Relationship: object (string, or array of strings); LanguageProperty:
     * languageMap (object); VocabProperty: vocab (string or array, EXPANDED);
     * ListProperty: valueList (array); ListRelationship: objectList (array,
     * always normalized by entity_parse to [{"object": "uri"}, ...]);
     * JsonProperty: json (any JSON, kept verbatim). */
    json_t     *value;
    const char *unit_code;    /* NULL when absent */
    /* Relationship objectType, expanded and interned; several types (5.2.6:
     * a String or an array) are one interned string, the IRIs joined by ' '
     * (an IRI holds no space: 4.6.2); NULL when absent */
    const char *object_type;
    int64_t     observed_at;  /* CR_NO_TIME when absent */
    int64_t     created_at;   /* system attributes, µs since the epoch (as every time here) */
    int64_t     modified_at;
    cr_attr_t  *sub;          /* sub-attributes (n_sub, in the order given) */
    uint16_t    n_sub;
    uint8_t     kind;         /* attr_kind_t */
    uint8_t     is_null;      /* draft only: the NGSI-LD Null ("urn:ngsi-ld:null"): delete on merge */
};

typedef struct cr_entity {
    int32_t      refs;        /* frozen only (atomic); drafts: 0 */
    uint32_t     bytes;       /* frozen only: size of the block */
    const char  *id;
    const char **types;       /* expanded IRIs, interned (n_types >= 1) */
    cr_attr_t   *attrs;       /* several entries may share a name (datasetIds) */
    json_t      *scope;       /* NULL, or a string / array of strings */
    int64_t      created_at;
    int64_t      modified_at;
    void        *render_cache;  /* frozen only: this version's most asked-for rendering
                                   (render.c), set once, freed with the entity */
    uint16_t     n_types;
    uint16_t     n_attrs;
} cr_entity_t;

/* Parse flags */
enum {
    EP_CREATE   = 1 << 0,  /* id and type required (create, replace, batch create/upsert) */
    EP_FRAGMENT = 1 << 1,  /* attributes only; "id"/"type" may appear and must match (PATCH/PUT attrs) */
    EP_MERGE    = 1 << 2,  /* NGSI-LD Null allowed (merge-patch semantics, 5.6.17) */
    EP_PARTIAL  = 1 << 3,  /* attribute members may be partial: no type needed (5.6.4) */
};

/* Validates a request body (a JSON object, already known to carry no
 * mismatched @context) and builds a draft entity in arena a. Names are
 * expanded with ctx. `now` stamps createdAt/modifiedAt. Every violation of
 * 4.6 / 5.2 gives BadRequestData with a detail naming the member. The
 * "@context" member, if present, is ignored here (the API checks it). */
cr_entity_t *entity_parse(arena_t *a, const json_t *body, const ld_context_t *ctx,
                          unsigned flags, int64_t now, problem_t *p);
/* One attribute value (normalized or concise form) for attribute `name`
 * (expanded): used by PATCH/PUT /attrs/{attrId}. */
bool attr_parse(arena_t *a, const char *name, const json_t *v, const ld_context_t *ctx,
                unsigned flags, int64_t now, cr_attr_t *out, problem_t *p);

/* The most attributes an entity may have (--maxAttributes, 1000 when 0),
 * never more than the 16-bit count holds (CR_ATTRS_MAX); also the bound of
 * sub-attributes per attribute. Types are bounded by CR_ATTRS_MAX. */
size_t model_max_attributes(void);

/* Entity ids and names (4.6.2; ids are URIs). A URI is at most
 * MODEL_MAX_URI_LEN bytes: an entity id must fit, percent-encoded, in the
 * Location header of its creation and in the request line that names it,
 * both within the 16 KiB a connection has for a request head and its answer's
 * head (src/http/server.c). */
#define MODEL_MAX_URI_LEN 1024
bool model_valid_uri(const char *s);
bool model_valid_name(const char *s);      /* type / attribute name, before expansion */
/* A Scope (4.18): ["/"] level *("/" level), or "urn:ngsi-ld:null". */
bool model_valid_scope(const char *s);

/* Frozen entities */
cr_entity_t *entity_freeze(const cr_entity_t *draft);     /* one block, refs = 1; NULL beyond 4 GiB */
bool         entity_blocks_pooled(void);                  /* frozen blocks come from the block pool (--hugePages) */
void         entity_ref(cr_entity_t *e);
void         entity_unref(cr_entity_t *e);                /* frees at 0 */
bool         entity_has_type(const cr_entity_t *e, const char *type);  /* interned */
/* The first attribute named `name` (interned) with datasetId ds (NULL = default); or NULL. */
const cr_attr_t *entity_attr(const cr_entity_t *e, const char *name, const char *dataset_id);
/* Any instance of `name`. */
const cr_attr_t *entity_attr_any(const cr_entity_t *e, const char *name);

/* ----------------------------------------------------------- operations */

typedef enum {
    OP_REPLACE_ENTITY = 1, /* PUT /entities/{id} (5.6.18): all attributes replaced, createdAt kept */
    OP_MERGE_ENTITY,       /* PATCH /entities/{id} (5.6.17), batch merge, upsert?options=update */
    OP_APPEND_ATTRS,       /* POST /entities/{id}/attrs (5.6.3); args.no_overwrite */
    OP_UPDATE_ATTRS,       /* PATCH /entities/{id}/attrs (5.6.2.4): replace matching instances, append
                              missing ones, NGSI-LD Null deletes (absent: notUpdated) */
    OP_PARTIAL_ATTR,       /* PATCH /entities/{id}/attrs/{attrId} (5.6.4) */
    OP_REPLACE_ATTR,       /* PUT /entities/{id}/attrs/{attrId} (5.6.19) */
    OP_DELETE_ATTR         /* DELETE /entities/{id}/attrs/{attrId} (5.6.5); args.dataset_id, args.delete_all */
} entity_op_t;

typedef struct op_args {
    bool        no_overwrite;   /* OP_APPEND_ATTRS, batch update */
    bool        delete_all;     /* OP_DELETE_ATTR */
    const char *attr_name;      /* OP_PARTIAL_ATTR, OP_REPLACE_ATTR, OP_DELETE_ATTR (expanded) */
    const char *dataset_id;     /* OP_DELETE_ATTR, OP_PARTIAL_ATTR */
    int64_t     observed_at;    /* OP_MERGE_ENTITY ?observedAt= (5.6.17.4): the new observedAt of the
                                   merged attributes that have one; 0 = none */
    const struct typesel *if_type; /* store precondition (?type= of 6.5.3.x / 6.6.3.x): the entity
                                   must match it, checked in the store's atomic step; NULL = any */
} op_args_t;

/* Prepares a merge patch given with PATCH /entities/{id}?format=keyValues
 * and/or ?lang= (5.6.17.4): with lang, a Property whose value is a text (a
 * string or an array of strings; bare, concise or normalized, sub-attributes
 * and datasetId kept, not with a unitCode) becomes that language's entry of
 * a LanguageProperty, merged into the existing languageMap; with keyValues, a bare value
 * (parsed as a Property) gets kind 0 so that the merge keeps the attribute's
 * own type (entity_apply checks that the value fits it). */
void entity_patch_simplified(arena_t *a, cr_entity_t *patch, bool key_values, const char *lang);

/* e as NGSI-LD version major*100+minor (e.g. 106 for 1.6) shows it (4.3.6.8:
 * later members removed or reformatted), as a draft in arena a; e itself
 * when nothing needs amending (always for 1.9 and later). conform.c. */
const cr_entity_t *entity_conform(arena_t *a, const cr_entity_t *e, unsigned version);

/* Per-attribute outcome, for 207 responses (UpdateResult, 5.2.18). */
typedef struct attr_outcome {
    const char *name;           /* expanded */
    bool        updated;
    const char *reason;         /* when !updated */
} attr_outcome_t;

typedef struct op_result {
    attr_outcome_t *items;      /* in the arena */
    size_t          n, cap;
    size_t          n_updated, n_not_updated;
} op_result_t;

/* Applies op to `old` (frozen) with `patch` (a draft) and returns the new
 * draft (in a; it may point into old and patch: freeze it before releasing
 * them), or NULL with p set (e.g. ResourceNotFound for an attribute that is
 * not there). `res` (may be NULL) gets per-attribute outcomes. When nothing
 * changed (all notUpdated) the result is still returned; res tells. */
cr_entity_t *entity_apply(arena_t *a, const cr_entity_t *old, const cr_entity_t *patch,
                          entity_op_t op, const op_args_t *args, int64_t now,
                          op_result_t *res, problem_t *p);

/* ------------------------------------------------------------ rendering */

typedef enum { FMT_NORMALIZED = 0, FMT_CONCISE, FMT_KEYVALUES } fmt_t;

/* The Attribute Projection Language of 4.21 (projection.c): a pick or omit
 * list as a tree. A node lists the entity members it names (expanded
 * attribute names, "@id", "@type", MN.scope): for pick every term, for omit
 * the terms without braces (`rel{...}` omits nothing of the linking
 * entity). links[i]{sub[i]} are the nested terms, the projection of the
 * entities linked through relationship links[i] (4.5.23). */
typedef struct projection projection_t;
struct projection {
    const char        **names;  size_t n;
    const char        **links;
    projection_t      **sub;    size_t n_links;
    const projection_t *base;   /* omit: the root's own names but id and type, for linked entities */
    unsigned            depth;  /* deepest nesting of braces (0: a plain list) */
};
#define PROJECTION_MAX_DEPTH 16
/* Parses pick (omit false) or omit text (',' and '|' separate; id, type,
 * scope name the entity members): BadRequestData for a syntax error, an
 * invalid name or nesting beyond PROJECTION_MAX_DEPTH. */
projection_t *projection_parse(arena_t *a, const char *text, const ld_context_t *ctx, bool omit,
                               problem_t *p);
/* The projection of an entity linked from one projected with pr through
 * relationship rel: the nested term rel{...} if any; else, for pick, the
 * same list (it applies to every entity of the payload, 5.7.1.5), for omit
 * the root's own names. NULL stays NULL. */
const projection_t *projection_link(const projection_t *pr, const char *rel, bool omit);
/* name is projected by pr (pick: listed; omit: neither listed in pr nor
 * among the root's own terms)? NULL: yes. */
bool projection_keeps(const projection_t *pr, const char *name, bool omit);

/* Inline Linked Entity retrieval (4.5.23.2): how the renderer finds the
 * linked entities the operation fetched. */
typedef struct render_join {
    const cr_entity_t *(*find)(const void *ud, const char *id);   /* NULL: not held */
    const void         *ud;
    unsigned            level;          /* joinLevel >= 1 */
    const char        **seen;           /* containedBy: never inlined */
    size_t              n_seen;
    /* How many more linked entities may be inlined (paths through shared
     * entities multiply); past it nothing more is and *over is set, for the
     * caller to refuse the answer. */
    size_t             *left;
    bool               *over;
    /* the flat pick list selects the roots' attributes only (a
     * notification's "attributes", 5.8.6): linked entities are whole */
    bool                roots_pick_only;
} render_join_t;

typedef struct render_opts {
    const ld_context_t *ctx;     /* names are compacted with it */
    fmt_t        format;
    bool         sys_attrs;      /* createdAt / modifiedAt */
    /* Projection (4.21 pick/omit, attrs). Names expanded; "@id"/"@type" stand
     * for id/type in pick/omit. NULL/0 = no projection. */
    const char **pick;  size_t n_pick;
    const char **omit;  size_t n_omit;
    const char  *lang;           /* 4.15 language filter, NULL = none */
    const char  *context_json;   /* when set, an "@context" member with this JSON text is added (ld+json) */
    const char  *geoproperty;    /* GeoJSON output: the geometry attribute (expanded), NULL = location */
    /* The pick/omit trees behind pick/omit, for linked entities (NULL: the
     * flat lists apply to them as well). */
    const projection_t *pick_tree, *omit_tree;
    /* 4.5.5 datasetId parameter: only these instances ("@none": the default
     * one); an attribute with none left is left out. 0: all. */
    const char **dataset_ids; size_t n_dataset_ids;
    const render_join_t *join;   /* inline linked entities (4.5.23.2), NULL = none */
} render_opts_t;

void entity_render(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o);
/* The render cache: a frozen entity keeps the text of its first plain
 * rendering (a format and a context, no sysAttrs, projection, lang or
 * @context member), so that reading it again is a copy. Entities are
 * immutable, so the text never goes stale; it is freed with its version.
 * Bounded by --renderCache (MiB, 0 = off): past it nothing more is cached. */
typedef struct render_cache_stats {
    uint64_t bytes, entries, hits, misses;
} render_cache_stats_t;
void render_cache_get_stats(render_cache_stats_t *st);
void render_cache_release(void *rc);     /* model-internal: entity_unref frees with it */

/* 4.5.5: the instance is one of the datasetIds ("@none": the default
 * instance); any instance when n is 0. */
bool attr_instance_selected(const cr_attr_t *a, const char *const *dataset_ids, size_t n);

/* GeoJSON Feature (4.5.16 / 4.5.17 for keyValues). */
void entity_render_geojson(json_writer_t *w, const cr_entity_t *e, const render_opts_t *o);
/* One attribute (as in the entity rendering, without its name). */
void attr_render(json_writer_t *w, const cr_attr_t *a, const render_opts_t *o);

/* ---------------------------------------------------------------- queries */

typedef struct q_expr   q_expr_t;    /* q (4.9) */
typedef struct typesel  typesel_t;   /* type selection (4.17) */
typedef struct scopeq   scopeq_t;    /* scopeQ (4.19) */
typedef struct geoq     geoq_t;      /* geo-query (4.10) */

/* q_parse and typesel_parse are for a request's query: names are looked up
 * only (an unknown name matches nothing and is not remembered). The _stored
 * variants are for filters kept beyond the request (subscriptions,
 * registrations): their names are interned, so that entities written later
 * match them. */
q_expr_t  *q_parse(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p);
q_expr_t  *q_parse_stored(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p);
bool       q_match(const q_expr_t *q, const cr_entity_t *e);
/* expandValues and jsonKeys (4.9): the string literals of the terms on the
 * attributes named in expand (expanded names) are expanded against ctx
 * (JSON-LD type coercion: vocab-relative) and compared in that form, whatever
 * the attribute's kind; those on the attributes named in json_keys are
 * compared as written, never expanded (a VocabProperty's bare literal
 * otherwise is). json_keys wins when a name is in both. */
void       q_value_options(q_expr_t *q, arena_t *a, const ld_context_t *ctx, const char *const *expand,
                           size_t n_expand, const char *const *json_keys, size_t n_json);

typedef struct geoq_params {
    const char *georel;        /* "near;maxDistance==2000", "within", ... */
    const char *geometry;      /* "Point", "Polygon", ... */
    const char *coordinates;   /* JSON text of the coordinates */
    const char *geoproperty;   /* attribute name (compact), NULL = location */
} geoq_params_t;
geoq_t    *geoq_parse(arena_t *a, const geoq_params_t *gp, const ld_context_t *ctx, problem_t *p);
/* Same from an already parsed geometry (batch query body, subscriptions). */
geoq_t    *geoq_from_json(arena_t *a, const char *georel, const json_t *geometry_type,
                          const json_t *coordinates, const char *geoproperty,
                          const ld_context_t *ctx, problem_t *p);
/* Thread-safe; the query's GEOS objects are freed with its arena (geoquery.c). */
bool       geoq_match(const geoq_t *g, const cr_entity_t *e);
/* A valid GeoJSON geometry (RFC 7946 as 4.7 restricts it)? */
bool       geo_validate(const json_t *geometry, problem_t *p);
/* For geo indexes: the bounding box [min lon, min lat, max lon, max lat] of a
 * valid geometry (false when it is not one); the expanded, interned name of the
 * GeoProperty a query tests; the box a matching value must intersect (false
 * when the query cannot be bounded: disjoint, near;minDistance). */
bool        geo_bbox(const json_t *geometry, double box[4]);
const char *geoq_property(const geoq_t *g);
bool        geoq_bbox(const geoq_t *g, double box[4]);
/* near;maxDistance from a Point: the point, the distance and the sphere's
 * radius the match uses (great-circle distance: a value matches within
 * meters / radius_m radians); false for every other query. */
bool        geoq_near_point(const geoq_t *g, double *lon, double *lat, double *meters, double *radius_m);

typesel_t *typesel_parse(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p);
typesel_t *typesel_parse_stored(arena_t *a, const char *text, const ld_context_t *ctx, problem_t *p);
bool       typesel_match(const typesel_t *t, const cr_entity_t *e);
/* When the selection is a plain disjunction of types (a,b|c with no ';'),
 * their expanded names (so the store can walk its type index); else 0. */
size_t     typesel_types(const typesel_t *t, const char *const **types);

scopeq_t  *scopeq_parse(arena_t *a, const char *text, problem_t *p);
bool       scopeq_match(const scopeq_t *s, const cr_entity_t *e);
/* scopeQ read-only, for a backend that translates it (MongoDB): a node is an
 * AND or OR of children, or a pattern; an entity matches a pattern when one
 * of its scope strings matches scopeq_regex's anchored regex (the subset of
 * PCRE that RE2 and MongoDB read alike). */
typedef enum { SQK_PATTERN = 0, SQK_AND, SQK_OR } scopeq_kind_t;
const void   *scopeq_root(const scopeq_t *s);
scopeq_kind_t scopeq_node(const void *node, size_t *n_kids);
const void   *scopeq_child(const void *node, size_t i);
/* The pattern node's regex into buf; false when it does not fit in cap. */
bool          scopeq_regex(const void *node, char *buf, size_t cap);

/* One entity selector (EntityInfo of 5.2.8 in POST /entityOperations/query and
 * subscriptions): an id or an idPattern, and a type selection; all optional. */
typedef struct entity_selector {
    const char *id;
    void       *id_pattern;               /* pcre2 code (filter_compile_pattern) */
    typesel_t  *types;
} entity_selector_t;

/* Entity ordering (4.23, order.c): orderBy with collation, orderFrom and
 * orderGeometry, parsed once per request into this description. A backend
 * reads it to translate it (terms in sequence: the member or the attribute
 * path, the direction) or orders with order_keys() / order_keys_cmp().
 * Mixed data types order as 4.23.2; null and absent values come last in
 * either direction; entities equal on every term keep creation order. */
typedef enum {
    ORDER_ID = 0, ORDER_TYPE, ORDER_SCOPE, ORDER_CREATED_AT, ORDER_MODIFIED_AT,
    ORDER_ATTR                     /* an attribute path (4.9): path, attr */
} order_key_kind_t;
typedef enum { ORDER_ASC = 0, ORDER_DESC, ORDER_DIST_ASC, ORDER_DIST_DESC } order_dir_t;

typedef struct order_term {
    order_key_kind_t key;
    order_dir_t      dir;
    const char      *attr;         /* ORDER_ATTR: the attribute (expanded) */
    const q_expr_t  *path;         /* ORDER_ATTR: the path as a q existence term: q_term_get, q_term_step */
    const char      *text;         /* the term as given */
    /* ORDER_ATTR, the path read once (model-internal): q_term_step's names
     * and kinds, the trailing [a.b] keys */
    const char          **step_names;
    const uint8_t        *step_kinds;   /* q_memberkind_t */
    size_t                n_steps;
    const char *const    *keys;
    size_t                n_keys;
} order_term_t;

typedef struct entity_order {
    const order_term_t *terms;  size_t n;
    const char         *collation;   /* RFC 6067 tag as given; NULL: ICU root order */
    const void         *collator;    /* model-internal (ICU), shared, never freed */
    double             *from;        /* dist-*: the vertices of orderFrom, [lon, lat] pairs */
    size_t              n_from;
    const char         *geometry;    /* orderGeometry (default Point) */
} entity_order_t;

typedef struct order_params {
    const char *order_by;          /* 4.23.3 text: "name;desc,createdAt" */
    const char *collation, *from, *geometry;   /* NULL when absent; from: JSON coordinates */
} order_params_t;
/* BadRequestData for a syntax error, a path that is not one of 4.9, an
 * invalid collation, a distance without orderFrom or a bad geometry. */
entity_order_t *order_parse(arena_t *a, const order_params_t *op, const ld_context_t *ctx, problem_t *p);

/* One entity's key for one term (order_keys fills o->n of them; they point
 * into the entity: valid while it is referenced). */
typedef struct order_key {
    uint8_t       rank;            /* the data type's place in 4.23.2 */
    bool          b, bytewise;
    size_t        len;
    double        num;
    int64_t       us;
    const char   *s;
    const json_t *j;
} order_key_t;
#define ORDER_MAX_TERMS 16
void order_keys(const entity_order_t *o, const cr_entity_t *e, order_key_t *keys);
/* < 0 when a comes first; never 0 for two different entities. */
int  order_keys_cmp(const entity_order_t *o, const order_key_t *ka, const cr_entity_t *a,
                    const order_key_t *kb, const cr_entity_t *b);
int  order_compare(const entity_order_t *o, const cr_entity_t *a, const cr_entity_t *b);

/* Everything that selects entities (GET /entities, POST entityOperations/query,
 * DELETE /entities, and later subscriptions): an inspectable tree that a
 * backend translates (MongoDB) or evaluates with filter_match() (corDB). All
 * members optional; the members AND, the selectors OR among themselves. */
typedef struct entity_filter {
    const char **ids;  size_t n_ids;      /* exact ids (any of them) */
    void        *id_pattern;              /* pcre2_code*, compiled once per request */
    typesel_t   *types;
    const entity_selector_t *sel; size_t n_sel;  /* at least one must match (n_sel 0: no test) */
    q_expr_t    *q;
    geoq_t      *geo;
    scopeq_t    *scope;
    const char **attrs; size_t n_attrs;   /* entity must have at least one of them (expanded) */
    /* pagination and order (store_select) */
    size_t       offset;
    size_t       limit;                   /* 0: no page, count only */
    bool         count;                   /* count every match */
    const entity_order_t *order_by;       /* orderBy (4.23); NULL: creation order */
} entity_filter_t;

/* Compiles an idPattern (PCRE2) in the arena's lifetime (freed with it). */
void *filter_compile_pattern(arena_t *a, const char *pattern, problem_t *p);
bool  filter_match(const entity_filter_t *f, const cr_entity_t *e);

/* The PCRE2 helpers behind idPattern and q's ~= / !~= (filter.c). A pattern is
 * compiled (and JIT-compiled) once, lives as long as arena a, and may then be
 * matched from any number of threads at once. `what` names the pattern in the
 * BadRequestData detail ("idPattern", "q"). Matching is bounded (match and
 * depth limits): a match that reaches them answers false and raises this
 * thread's overflow flag, which the scan checks once at its end. */
void *filter_regex_compile(arena_t *a, const char *pattern, size_t len, const char *what,
                           problem_t *p);
bool  filter_regex_match(const void *code, const char *s, size_t len);
/* The text a compiled pattern was made from (NUL-terminated; len: its bytes):
 * for a backend that translates idPattern (MongoDB $regex). */
const char *filter_regex_source(const void *code, size_t *len);
/* Clears this thread's regex overflow flag (before a scan). */
void  filter_regex_reset(void);
/* After a scan: false when no regex of this thread reached its limit since
 * filter_regex_reset(); else true with p set (BadRequestData naming the
 * pattern: "idPattern" or "q", and the entity id). */
bool  filter_regex_overflow(problem_t *p);

/* ------------------------------------------- the q tree, read-only (4.9)
 *
 * For a backend that translates q into its own query language (MongoDB):
 * walk the tree with these; evaluate with q_match() what it cannot translate.
 * Everything returned lives as long as the tree's arena. */
typedef enum { QK_TERM = 0, QK_AND, QK_OR } q_kind_t;
typedef enum {
    QO_EXISTS = 0, QO_NOT_EXISTS, QO_EQ, QO_NE, QO_GT, QO_GE, QO_LT, QO_LE,
    QO_MATCH, QO_NOT_MATCH
} q_opkind_t;
typedef enum { QVK_NUM = 0, QVK_STR, QVK_BOOL, QVK_DATETIME, QVK_DATE, QVK_TIME } q_valkind_t;
typedef enum { QSH_SINGLE = 0, QSH_LIST, QSH_RANGE } q_shapekind_t;
/* A path step after the attribute: a sub-attribute, or a member read from the
 * attribute's typed fields. */
typedef enum {
    QMK_SUBATTR = 0, QMK_OBSERVED_AT, QMK_CREATED_AT, QMK_MODIFIED_AT, QMK_UNIT_CODE,
    QMK_DATASET_ID, QMK_OBJECT_TYPE
} q_memberkind_t;

typedef struct q_value_view {
    q_valkind_t kind;
    bool        is_int;        /* QVK_NUM: i holds it exactly */
    bool        bare;          /* written without quotes (a term or a URI) */
    bool        b;             /* QVK_BOOL */
    int64_t     i;
    double      num;           /* QVK_NUM */
    int64_t     us;            /* DATETIME/DATE: µs since the epoch; TIME: µs of the day */
    const char *s;             /* QVK_STR: decoded */
    size_t      len;
    const char *expanded;      /* QVK_STR that is a term: its expanded IRI, else NULL */
} q_value_view_t;

typedef struct q_term_view {
    const char    *attr;       /* expanded, interned */
    bool           linked;     /* attr{...}: a term into linked entities (q_link_get) */
    size_t         n_steps;    /* q_term_step() */
    const char *const *keys;   /* trailing [a.b] path, not expanded */
    size_t         n_keys;
    q_opkind_t     op;
    q_shapekind_t  shape;
    size_t         n_values;   /* q_term_value() */
    const char    *pattern;    /* QO_MATCH / QO_NOT_MATCH: the regex text */
    size_t         pattern_len;
} q_term_view_t;

q_kind_t        q_node_kind(const q_expr_t *q);
size_t          q_node_count(const q_expr_t *q);                   /* AND / OR children */
const q_expr_t *q_node_child(const q_expr_t *q, size_t i);
/* A term's parts; false when q is not a term. */
bool            q_term_get(const q_expr_t *q, q_term_view_t *out);
/* Step i of a term's path: its expanded name (QMK_SUBATTR) and kind. */
const char     *q_term_step(const q_expr_t *q, size_t i, q_memberkind_t *kind);
bool            q_term_value(const q_expr_t *q, size_t i, q_value_view_t *out);

/* Terms into linked entities (4.9: rel{humidity}==40, rel{Device:humidity},
 * nested rel{rel2{...}}). Such a term's attribute is the Relationship; it
 * holds when one of its objects is an entity that the inner expression
 * matches. Two ways to evaluate them:
 *  - a query resolves each before the query, innermost first: the ids of
 *    the entities the inner expression (and the type hint) matches, by
 *    q_link_resolve, which writes into the tree (a tree shared between
 *    threads is q_clone'd first); unresolved, the term matches nothing
 *    (q_match);
 *  - q_match_linked evaluates q for one entity by reading the objects of
 *    its relationships through lk (a subscription's q at match time): the
 *    tree is only read, so threads can share it. At most 256 linked
 *    entities are read per call; the ones past that bound do not match. */
typedef struct q_link_view {
    const char     *rel;          /* the Relationship (expanded) */
    const char     *types;        /* the type hint, 4.17 text (a,b), or NULL */
    const typesel_t *tsel;        /* types parsed in the q's @context, or NULL */
    const q_expr_t *inner;        /* the expression for the linked entities */
} q_link_view_t;
#define Q_MAX_LINKS 16                                           /* terms into linked entities in one q */
unsigned q_link_depth(const q_expr_t *q);                        /* deepest rel{...} nesting; 0: none */
/* The linked terms, innermost first; the count (only cap of them stored). */
size_t   q_links(q_expr_t *q, q_expr_t **out, size_t cap);
bool     q_link_get(const q_expr_t *link, q_link_view_t *v);
/* ids (in the tree's arena; sorted here) of the entities the inner expression matched. */
void     q_link_resolve(q_expr_t *link, const char **ids, size_t n);
/* A copy of q in arena a whose linked terms are unresolved and its own (the
 * plain terms are shared): for q_link_resolve on a shared tree. */
q_expr_t *q_clone(arena_t *a, const q_expr_t *q);
typedef struct q_linker {
    cr_entity_t *(*get)(void *ud, const char *id);   /* a reference (entity_unref), or NULL: not held */
    void         *ud;
} q_linker_t;
bool     q_match_linked(const q_expr_t *q, const cr_entity_t *e, const q_linker_t *lk);
/* ------------------------------------------- stored documents (doc.c)
 *
 * A resource that is not an entity (a registration) is kept as its JSON:
 * the client's members, "id" (generated when absent), "type", "@context"
 * (the value of the request's context) and createdAt/modifiedAt. */
typedef struct model_doc_kind {
    const char        *type;       /* "ContextSourceRegistration" */
    const char        *id_kind;    /* generated ids: urn:ngsi-ld:<id_kind>:<uuid> */
    const char        *what;       /* for errors: "registration" */
    const char *const *read_only;  /* members the client may send but never sets (NULL-ended), or NULL */
} model_doc_kind_t;
/* A generated id urn:ngsi-ld:<kind>:<uuid>, in arena a. */
const char *model_doc_new_id(arena_t *a, const char *kind, int64_t now);
/* The document of a creation, in arena a. */
char *model_doc_new(arena_t *a, const json_t *body, const ld_context_t *ctx, const model_doc_kind_t *k,
                    int64_t now, size_t *len);
/* The document of an update (5.5.8): the patch's members replace the stored
 * ones, a null removes one; id and type stay (BadRequestData when the patch
 * changes them). In arena a. */
char *model_doc_patch(arena_t *a, const char *stored, size_t stored_len, const json_t *patch,
                      const model_doc_kind_t *k, int64_t now, size_t *len, problem_t *p);

#endif
