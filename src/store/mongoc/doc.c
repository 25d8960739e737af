/*
 * doc.c - an entity version as a MongoDB document, and back.
 *
 * The version itself is the codec's compact form (model/codec.h) in "e", so
 * that a read gives back exactly the version that was written (values,
 * datasetIds, system times, attribute order) without a second model of the
 * entity in BSON. Beside it, the fields the server filters, sorts and
 * indexes on: the id (_id), the types (t), createdAt (c), modifiedAt (m),
 * the version number (v: the optimistic check), the write token (w: which
 * write applied), the attribute names (a), the numeric values q compares
 * (q: {hHASH: number} for a single-instance Property with a number; qx: the
 * hashes of the other attributes) and a bounding box per GeoProperty
 * (g: {hHASH: {x0, y0, x1, y1}}, around all its instances: plain numbers that
 * any MongoDB-wire server compares, the geo prefilter of query.c).
 */
#include <stdio.h>
#include <string.h>

#include "../../model/codec.h"
#include "mgc.h"

void mgc_geo_key(char buf[24], const char *name)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t          h     = cr_hash_stable(name, strlen(name));

    /* "h%016llx", without snprintf's work (it ran three times per attribute per write) */
    buf[0] = 'h';
    for (int i = 16; i >= 1; i--, h >>= 4)
        buf[i] = hex[h & 15];
    buf[17] = '\0';
}

/* The names of an entity, each once: open addressing on the interned
 * pointer (linear in the attributes, whatever their number: an entity may
 * have tens of thousands), on the stack up to NAMES_STACK slots. */
#define NAMES_STACK 64u

typedef struct name_slot {
    const char *name;
    uint32_t    first;          /* the index of its first instance */
    uint32_t    n;              /* instances */
    uint32_t    n_geo;          /* GeoProperty instances with a box */
    double      box[4];         /* around them */
} name_slot_t;

typedef struct names {
    name_slot_t *slot, local[NAMES_STACK];
    uint32_t     mask, n;       /* n: distinct names */
} names_t;

/* Beyond this many names an entity gets no q / qx: the prefilter lets it
 * through (no qx) and the broker judges q, rather than every write carrying
 * thousands of fields (FerretDB times out on such a document). */
#define Q_NAMES_MAX 256u

static name_slot_t *names_find(names_t *t, const char *name)
{
    uint32_t j = (uint32_t)cr_hash_ptr(name) & t->mask;

    while (t->slot[j].name && t->slot[j].name != name)
        j = (j + 1) & t->mask;
    return &t->slot[j];
}

static void names_init(names_t *t, const cr_entity_t *e)
{
    uint32_t cap = 16;

    while (cap < 2u * e->n_attrs)
        cap *= 2;
    t->slot = cap <= NAMES_STACK ? t->local : cr_xmalloc(cap * sizeof(*t->slot));
    memset(t->slot, 0, cap * sizeof(*t->slot));
    t->mask = cap - 1;
    t->n    = 0;
    for (uint32_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        name_slot_t     *s  = names_find(t, at->name);
        double           b[4];

        if (!s->name) {
            s->name  = at->name;
            s->first = i;
            t->n++;
        }
        s->n++;
        if (at->kind == ATTR_GEOPROPERTY && at->value && geo_bbox(at->value, b)) {
            if (!s->n_geo++) {
                memcpy(s->box, b, sizeof b);
            } else {
                if (b[0] < s->box[0]) s->box[0] = b[0];
                if (b[1] < s->box[1]) s->box[1] = b[1];
                if (b[2] > s->box[2]) s->box[2] = b[2];
                if (b[3] > s->box[3]) s->box[3] = b[3];
            }
        }
    }
}

static void names_free(names_t *t)
{
    if (t->slot != t->local)
        free(t->slot);
}

/* A name q can compare on the server: one instance, a Property, a number. */
static bool q_comparable(const cr_attr_t *at, const name_slot_t *s)
{
    return s->n == 1 && at->kind == ATTR_PROPERTY && at->value && at->value->type == JSON_NUMBER;
}

static void append_key(bson_t *arr, uint32_t i, const char *v)
{
    char        nk[16];
    const char *kp;

    bson_uint32_to_string(i, &kp, nk, sizeof nk);
    bson_append_utf8(arr, kp, -1, v, -1);
}

void mgc_doc_entity(bson_t *doc, const cr_entity_t *e, int64_t version, uint64_t token)
{
    bson_t   arr, sub;
    char     key[24];
    sbuf_t   sb;
    names_t  nt;
    uint32_t k = 0, nx = 0;
    bool     any_geo = false;

    names_init(&nt, e);
    bson_init(doc);
    BSON_APPEND_UTF8(doc, "_id", e->id);
    bson_append_array_begin(doc, "t", 1, &arr);
    for (uint16_t i = 0; i < e->n_types; i++)
        append_key(&arr, i, e->types[i]);
    bson_append_array_end(doc, &arr);
    BSON_APPEND_INT64(doc, "c", e->created_at);
    BSON_APPEND_INT64(doc, "m", e->modified_at);
    BSON_APPEND_INT64(doc, "v", version);
    BSON_APPEND_INT64(doc, "w", (int64_t)token);
    /* a: the attribute names, each once */
    bson_append_array_begin(doc, "a", 1, &arr);
    for (uint32_t i = 0; i < e->n_attrs; i++)
        if (names_find(&nt, e->attrs[i].name)->first == i)
            append_key(&arr, k++, e->attrs[i].name);
    bson_append_array_end(doc, &arr);
    /* q: the value of each name q can compare on the server (query.c's q
     * prefilter); qx: the hashes of the other names, whose q terms the
     * broker judges */
    if (nt.n > Q_NAMES_MAX)
        goto geo;
    bson_append_document_begin(doc, "q", 1, &sub);
    for (uint32_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t   *at = &e->attrs[i];
        const name_slot_t *s  = names_find(&nt, at->name);

        if (s->first != i || !q_comparable(at, s))
            continue;
        mgc_geo_key(key, at->name);
        if (at->value->is_int)
            BSON_APPEND_INT64(&sub, key, at->value->i);
        else
            BSON_APPEND_DOUBLE(&sub, key, at->value->num);
    }
    bson_append_document_end(doc, &sub);
    bson_append_array_begin(doc, "qx", 2, &arr);
    for (uint32_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t   *at = &e->attrs[i];
        const name_slot_t *s  = names_find(&nt, at->name);

        if (s->first != i || q_comparable(at, s))
            continue;
        mgc_geo_key(key, at->name);
        append_key(&arr, nx++, key);
    }
    bson_append_array_end(doc, &arr);
geo:
    /* g: per GeoProperty name, the box around all its instances (a superset
     * is what a prefilter needs); the key is the name's hash, as a field name
     * may not hold the dots of an IRI */
    for (uint32_t i = 0; i < e->n_attrs; i++) {
        const name_slot_t *s = names_find(&nt, e->attrs[i].name);
        bson_t             box;

        if (s->first != i || !s->n_geo)
            continue;
        if (!any_geo) {
            bson_append_document_begin(doc, "g", 1, &sub);
            any_geo = true;
        }
        mgc_geo_key(key, s->name);
        bson_append_document_begin(&sub, key, -1, &box);
        BSON_APPEND_DOUBLE(&box, "x0", s->box[0]);
        BSON_APPEND_DOUBLE(&box, "y0", s->box[1]);
        BSON_APPEND_DOUBLE(&box, "x1", s->box[2]);
        BSON_APPEND_DOUBLE(&box, "y1", s->box[3]);
        bson_append_document_end(&sub, &box);
    }
    if (any_geo)
        bson_append_document_end(doc, &sub);
    names_free(&nt);
    sb_init(&sb, NULL, 256);
    entity_encode(&sb, e);
    BSON_APPEND_BINARY(doc, "e", BSON_SUBTYPE_BINARY, (const uint8_t *)sb.p, (uint32_t)sb.len);
    sb_release(&sb);
}

void mgc_doc_fields(const bson_t *doc, mgc_docf_t *f)
{
    bson_iter_t    it;
    bson_subtype_t st;

    memset(f, 0, sizeof(*f));
    if (!bson_iter_init(&it, doc))
        return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);

        if (k[0] == '_' && !strcmp(k, "_id")) {
            if (BSON_ITER_HOLDS_UTF8(&it))
                f->id = bson_iter_utf8(&it, NULL);
        } else if (k[0] && k[1]) {
            continue;
        } else if (k[0] == 'e') {
            if (BSON_ITER_HOLDS_BINARY(&it))
                bson_iter_binary(&it, &st, &f->e_len, &f->e);
        } else if (k[0] == 'c' || k[0] == 'v' || k[0] == 'w') {
            int64_t n = BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it) : 0;

            if (k[0] == 'c')
                f->c = n;
            else if (k[0] == 'v')
                f->ver.v = n;
            else
                f->ver.w = n;
        }
    }
}

cr_entity_t *mgc_doc_decode(const mgc_docf_t *f, problem_t *p)
{
    cr_entity_t *draft, *e = NULL;
    arena_t     *a;

    if (!f->e) {
        problem_set(p, PB_INTERNAL_ERROR, "MongoDB: an entity document without its version");
        return NULL;
    }
    a     = arena_new(f->e_len * 2 + 1024);
    draft = entity_decode(a, f->e, f->e_len);
    if (draft)
        e = entity_freeze(draft);
    arena_free(a);
    if (!e)
        problem_set(p, PB_INTERNAL_ERROR, "MongoDB: an entity document that does not decode");
    return e;
}
