/*
 * entity.c - the entity representation itself: the interned core names (MN),
 * the syntax checks every module shares (URIs, names of 4.6.2, scopes of
 * 4.18), lookups on an entity, and frozen entities.
 *
 * A frozen entity is ONE block (from the block pool, core.h, or malloc),
 * laid out as
 *
 *   [cr_entity_t][types][attrs][value nodes, sub-attribute arrays ...][strings]
 *
 * Everything with pointers inside (structs, pointer arrays, json_t nodes) is
 * a multiple of 8 bytes and goes in the first region in visiting order; the
 * strings (id, datasetIds, unit codes, string values, object keys) are
 * packed without padding at the end. Interned names are process-lifetime and
 * are not copied; short strings that happen to be interned already (object
 * keys such as "type"/"coordinates", geometry names, common unit codes) are
 * shared with the intern table instead of being copied (intern_find never
 * inserts, so user data cannot grow the table). The size is computed by a
 * first walk and the block filled by a second walk of the same code, so the
 * two cannot disagree.
 *
 * Name checks: ASCII names (the common case) are checked by hand; a name with
 * non-ASCII characters goes through one PCRE2 pattern (\p{L}[\p{L}\p{N}_]*),
 * compiled once, because Unicode letter/number categories need tables.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

model_names_t MN;

/* Strings interned at start so that frozen entities share them (see above). */
static const char *const shared_strings[] = {
    "type", "coordinates", "object", "value", "@none",
    "Point", "MultiPoint", "LineString", "MultiLineString", "Polygon", "MultiPolygon",
};

#define NGSI(s) intern_cstr(LD_NGSI_LD_PREFIX s)

void model_init(void)
{
    MN.property         = NGSI("Property");
    MN.relationship     = NGSI("Relationship");
    MN.geoproperty      = NGSI("GeoProperty");
    MN.languageproperty = NGSI("LanguageProperty");
    MN.vocabproperty    = NGSI("VocabProperty");
    MN.listproperty     = NGSI("ListProperty");
    MN.listrelationship = NGSI("ListRelationship");
    MN.jsonproperty     = NGSI("JsonProperty");

    MN.has_value        = NGSI("hasValue");
    MN.has_object       = NGSI("hasObject");
    MN.has_language_map = NGSI("hasLanguageMap");
    MN.has_vocab        = NGSI("hasVocab");
    MN.has_value_list   = NGSI("hasValueList");
    MN.has_object_list  = NGSI("hasObjectList");
    MN.json             = NGSI("hasJSON");

    MN.observed_at       = NGSI("observedAt");
    MN.unit_code         = NGSI("unitCode");
    MN.dataset_id        = NGSI("datasetId");
    MN.created_at        = NGSI("createdAt");
    MN.modified_at       = NGSI("modifiedAt");
    MN.location          = NGSI("location");
    MN.observation_space = NGSI("observationSpace");
    MN.operation_space   = NGSI("operationSpace");
    MN.scope             = NGSI("scope");
    MN.object_type       = NGSI("hasObjectType");

    for (size_t i = 0; i < CR_ARRAY_LEN(shared_strings); i++)
        intern_cstr(shared_strings[i]);
}

const char *attr_kind_name(attr_kind_t k)
{
    switch (k) {
    case ATTR_PROPERTY:         return "Property";
    case ATTR_RELATIONSHIP:     return "Relationship";
    case ATTR_GEOPROPERTY:      return "GeoProperty";
    case ATTR_LANGUAGEPROPERTY: return "LanguageProperty";
    case ATTR_VOCABPROPERTY:    return "VocabProperty";
    case ATTR_LISTPROPERTY:     return "ListProperty";
    case ATTR_LISTRELATIONSHIP: return "ListRelationship";
    case ATTR_JSONPROPERTY:     return "JsonProperty";
    }
    return "Property";
}

/* ------------------------------------------------------------ syntax checks */

static pthread_once_t word_once = PTHREAD_ONCE_INIT;
static pcre2_code    *word_re;

static void word_compile(void)
{
    int        err;
    PCRE2_SIZE off;

    word_re = pcre2_compile((PCRE2_SPTR)"\\p{L}[\\p{L}\\p{N}_]*", PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    if (!word_re)
        LOG_E("model: cannot compile the name pattern (pcre2 error %d)", err);
}

static inline bool ascii_letter(unsigned char c)
{
    return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}

static inline bool ascii_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* s[0..n) matches unicodeLetter *(unicodeLetter / unicodeNumber / "_"). */
static bool valid_word(const char *s, size_t n)
{
    bool ascii = true;

    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            ascii = false;
            break;
        }
        if (i == 0 ? !ascii_letter(c) : !(ascii_letter(c) || ascii_digit(c) || c == '_'))
            return false;
    }
    if (ascii)
        return true;

    /* Non-ASCII: the rare path, one small match-data allocation. */
    pthread_once(&word_once, word_compile);
    if (!word_re)
        return false;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md)
        return false;
    int rc = pcre2_match(word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, NULL);
    pcre2_match_data_free(md);
    return rc > 0;
}

/* RFC 3986 scheme ":" then at least one character; no whitespace, control
 * characters or the characters URIs never carry unescaped. Non-ASCII bytes
 * are allowed (IRIs). One table lookup a byte: ids are checked on every
 * request by id. uri_rest: the bytes allowed after the scheme (0x21-0x7e but
 * " < > \\ ^ ` { | }, and 0x80-0xff); uri_scheme: after its first letter. */
static const bool uri_rest[256] = {
    [0x21] = 1, [0x23 ... 0x3b] = 1, [0x3d] = 1, [0x3f ... 0x5b] = 1, [0x5d] = 1, [0x5f] = 1,
    [0x61 ... 0x7a] = 1, [0x7e] = 1, [0x80 ... 0xff] = 1,
};
static const bool uri_scheme[256] = {
    ['a' ... 'z'] = 1, ['A' ... 'Z'] = 1, ['0' ... '9'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1,
};

bool model_valid_uri(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    if (!s || !ascii_letter(*p) || strnlen(s, MODEL_MAX_URI_LEN + 1) > MODEL_MAX_URI_LEN)
        return false;
    for (p++; uri_scheme[*p]; p++)
        ;
    if (*p != ':' || p[1] == '\0')
        return false;
    for (p++; uri_rest[*p]; p++)
        ;
    return *p == '\0';
}

/* 4.6.2: name = letter *nameChar, optionally "prefix:" before it. Full IRIs
 * are accepted too (types and attribute names may be given expanded), as
 * long as they carry none of the characters of 4.6.4 that have no business
 * in a name. */
bool model_valid_name(const char *s)
{
    if (!s || !*s)
        return false;

    const char *colon = strchr(s, ':');
    if (!colon) {
        if (valid_word(s, strlen(s)))
            return true;
    } else if (valid_word(s, (size_t)(colon - s)) && !strchr(colon + 1, ':')
               && valid_word(colon + 1, strlen(colon + 1))) {
        return true;
    }
    if (!colon || !model_valid_uri(s))
        return false;
    return strpbrk(s, "'();=") == NULL;
}

/* 4.18: Scope = ["/"] ScopeLevel *("/" ScopeLevel) / "urn:ngsi-ld:null". */
bool model_valid_scope(const char *s)
{
    if (!s)
        return false;
    if (strcmp(s, "urn:ngsi-ld:null") == 0)
        return true;
    if (*s == '/')
        s++;
    for (;;) {
        const char *slash = strchr(s, '/');
        size_t      n     = slash ? (size_t)(slash - s) : strlen(s);
        if (!valid_word(s, n))
            return false;
        if (!slash)
            return true;
        s = slash + 1;
    }
}

/* ----------------------------------------------------------------- lookups */

bool entity_has_type(const cr_entity_t *e, const char *type)
{
    for (uint16_t i = 0; i < e->n_types; i++)
        if (e->types[i] == type)
            return true;
    return false;
}

static inline bool same_dataset(const char *a, const char *b)
{
    if (a == b)
        return true;
    return a && b && strcmp(a, b) == 0;
}

const cr_attr_t *entity_attr(const cr_entity_t *e, const char *name, const char *dataset_id)
{
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        if (at->name == name && same_dataset(at->dataset_id, dataset_id))
            return at;
    }
    return NULL;
}

const cr_attr_t *entity_attr_any(const cr_entity_t *e, const char *name)
{
    for (uint16_t i = 0; i < e->n_attrs; i++)
        if (e->attrs[i].name == name)
            return &e->attrs[i];
    return NULL;
}

/* ---------------------------------------------------------- frozen entities */

/* The two walks share this state: with `fill` false they only add up sizes
 * (and every returned pointer is NULL); with `fill` true they hand out memory
 * from the block in the same order. The first walk also remembers what the
 * intern table said for its first FZ_MEMO short strings, in walk order, so
 * that the second one does not look them up again (a read lock and a hash per
 * string: the bulk of a small entity's freeze); a memo entry is used only for
 * the same string at the same position, and the first walk's answer is the
 * one its sizes were counted with. */
#define FZ_MEMO 32

typedef struct freezer {
    bool   fill;
    char  *obj;        /* next free byte of the object region */
    char  *str;        /* next free byte of the string region */
    size_t n_obj;      /* sizes, first walk */
    size_t n_str;
    unsigned n_memo, at_memo;
    struct fz_memo { const char *s; size_t n; const char *in; } memo[FZ_MEMO];
} freezer_t;

#define FZ_ALIGN(n) (((n) + 7u) & ~(size_t)7u)

static void *fz_obj(freezer_t *fz, size_t n)
{
    n = FZ_ALIGN(n);
    if (!fz->fill) {
        fz->n_obj += n;
        return NULL;
    }
    void *p = fz->obj;
    fz->obj += n;
    return p;
}

/* Short strings are looked up in the intern table (no insertion): a hit is
 * shared, a miss is copied into the block. */
#define FZ_SHARE_MAX 24

static const char *fz_strn(freezer_t *fz, const char *s, size_t n)
{
    if (!s)
        return NULL;
    if (n <= FZ_SHARE_MAX) {
        const char *in;
        if (!fz->fill) {
            in = intern_find(s, n);
            if (fz->n_memo < FZ_MEMO)
                fz->memo[fz->n_memo++] = (struct fz_memo){ s, n, in };
        } else if (fz->at_memo < fz->n_memo && fz->memo[fz->at_memo].s == s && fz->memo[fz->at_memo].n == n) {
            in = fz->memo[fz->at_memo++].in;
        } else {
            in = intern_find(s, n);
        }
        if (in)
            return in;
    }
    if (!fz->fill) {
        fz->n_str += n + 1;
        return NULL;
    }
    char *p = fz->str;
    memcpy(p, s, n);
    p[n] = '\0';
    fz->str += n + 1;
    return p;
}

static inline const char *fz_str(freezer_t *fz, const char *s)
{
    return s ? fz_strn(fz, s, strlen(s)) : NULL;
}

static json_t *fz_json(freezer_t *fz, const json_t *n)
{
    json_t     *c   = fz_obj(fz, sizeof *c);
    const char *key = fz_str(fz, n->key);

    if (c) {
        *c     = *n;
        c->key = key;
        c->next = NULL;
    }
    switch (n->type) {
    case JSON_STRING: {
        const char *s = fz_strn(fz, n->str, n->len);
        if (c)
            c->str = s;
        break;
    }
    case JSON_ARRAY:
    case JSON_OBJECT: {
        json_t *prev = NULL;
        if (c)
            c->child = NULL;
        for (const json_t *ch = n->child; ch; ch = ch->next) {
            json_t *cc = fz_json(fz, ch);
            if (!c)
                continue;
            if (prev)
                prev->next = cc;
            else
                c->child = cc;
            prev = cc;
        }
        break;
    }
    default:
        break;
    }
    return c;
}

static void fz_attrs(freezer_t *fz, cr_attr_t *dst, const cr_attr_t *src, uint16_t n);

static void fz_attr(freezer_t *fz, cr_attr_t *dst, const cr_attr_t *src)
{
    const char *ds    = fz_str(fz, src->dataset_id);
    const char *unit  = fz_str(fz, src->unit_code);
    json_t     *value = src->value ? fz_json(fz, src->value) : NULL;
    cr_attr_t  *sub   = src->n_sub ? fz_obj(fz, sizeof(cr_attr_t) * src->n_sub) : NULL;

    if (dst) {
        *dst            = *src;        /* name, object_type: interned */
        dst->dataset_id = ds;
        dst->unit_code  = unit;
        dst->value      = value;
        dst->sub        = sub;
    }
    fz_attrs(fz, sub, src->sub, src->n_sub);
}

static void fz_attrs(freezer_t *fz, cr_attr_t *dst, const cr_attr_t *src, uint16_t n)
{
    for (uint16_t i = 0; i < n; i++)
        fz_attr(fz, dst ? &dst[i] : NULL, &src[i]);
}

static cr_entity_t *fz_entity(freezer_t *fz, const cr_entity_t *d)
{
    cr_entity_t  *e     = fz_obj(fz, sizeof *e);
    const char  **types = d->n_types ? fz_obj(fz, sizeof(char *) * d->n_types) : NULL;
    cr_attr_t    *attrs = d->n_attrs ? fz_obj(fz, sizeof(cr_attr_t) * d->n_attrs) : NULL;
    const char   *id    = fz_str(fz, d->id);
    json_t       *scope = d->scope ? fz_json(fz, d->scope) : NULL;

    fz_attrs(fz, attrs, d->attrs, d->n_attrs);
    if (!e)
        return NULL;
    *e       = *d;
    e->refs  = 1;
    e->render_cache = NULL;
    e->id    = id;
    e->types = types;
    e->attrs = attrs;
    e->scope = scope;
    if (types)
        memcpy(types, d->types, sizeof(char *) * d->n_types);
    return e;
}

/* Under AddressSanitizer the blocks stay malloc'd, so that it sees every
 * access to a frozen entity (the pool's own code is tested in test_core.c). */
#if defined(__SANITIZE_ADDRESS__)
#define ENTITY_BLOCKS_MALLOC 1
#else
#define ENTITY_BLOCKS_MALLOC 0
#endif

bool entity_blocks_pooled(void)
{
    return cr_config.huge_pages && !ENTITY_BLOCKS_MALLOC && blockpool_available();
}

/* NULL when the block would exceed 4 GiB (sizes are 32-bit); out of memory
 * aborts (cr_xmalloc). */
cr_entity_t *entity_freeze(const cr_entity_t *draft)
{
    freezer_t fz;           /* not `= { 0 }`: the memo needs no zeroing */

    fz.fill = false;
    fz.obj = fz.str = NULL;
    fz.n_obj = fz.n_str = 0;
    fz.n_memo = fz.at_memo = 0;

    fz_entity(&fz, draft);
    size_t size = fz.n_obj + fz.n_str;
    if (size > UINT32_MAX)
        return NULL;

    char *block = entity_blocks_pooled() ? blockpool_alloc(size) : cr_xmalloc(size);
    fz.fill = true;
    fz.obj  = block;
    fz.str  = block + fz.n_obj;

    cr_entity_t *e = fz_entity(&fz, draft);
    e->bytes = (uint32_t)size;
    return e;
}

void entity_ref(cr_entity_t *e)
{
    if (e)
        __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
}

void entity_unref(cr_entity_t *e)
{
    if (e && __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        render_cache_release(e->render_cache);
        blockpool_free(e);
    }
}
