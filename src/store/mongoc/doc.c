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
    snprintf(buf, 24, "h%016llx", (unsigned long long)cr_hash_stable(name, strlen(name)));
}

void mgc_doc_entity(bson_t *doc, const cr_entity_t *e, int64_t version, uint64_t token)
{
    bson_t  arr, sub;
    char    key[24];
    sbuf_t  sb;
    size_t  k = 0;

    bson_init(doc);
    BSON_APPEND_UTF8(doc, "_id", e->id);
    bson_append_array_begin(doc, "t", 1, &arr);
    for (uint16_t i = 0; i < e->n_types; i++) {
        const char *kp;
        bson_uint32_to_string(i, &kp, key, sizeof key);
        bson_append_utf8(&arr, kp, -1, e->types[i], -1);
    }
    bson_append_array_end(doc, &arr);
    BSON_APPEND_INT64(doc, "c", e->created_at);
    BSON_APPEND_INT64(doc, "m", e->modified_at);
    BSON_APPEND_INT64(doc, "v", version);
    BSON_APPEND_INT64(doc, "w", (int64_t)token);
    /* attribute names, each once (instances of one name are adjacent or not: dedup by scan) */
    bson_append_array_begin(doc, "a", 1, &arr);
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        bool seen = false;
        for (uint16_t j = 0; j < i && !seen; j++)
            seen = e->attrs[j].name == e->attrs[i].name;
        if (seen)
            continue;
        const char *kp;
        bson_uint32_to_string((uint32_t)k++, &kp, key, sizeof key);
        bson_append_utf8(&arr, kp, -1, e->attrs[i].name, -1);
    }
    bson_append_array_end(doc, &arr);
    /* q / qx: per attribute name, its value where q can compare it on the
     * server (one instance, a Property, a number), else the name in qx: a
     * q term on it is left to the broker (query.c's q prefilter) */
    bson_t qd, qx;
    size_t nq = 0;
    bson_append_document_begin(doc, "q", 1, &qd);
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        bool             seen = false, one = true;

        for (uint16_t j = 0; j < i && !seen; j++)
            seen = e->attrs[j].name == at->name;
        if (seen)
            continue;
        for (uint16_t j = i + 1; j < e->n_attrs && one; j++)
            one = e->attrs[j].name != at->name;
        if (!one || at->kind != ATTR_PROPERTY || !at->value || at->value->type != JSON_NUMBER)
            continue;
        mgc_geo_key(key, at->name);
        if (at->value->is_int)
            BSON_APPEND_INT64(&qd, key, at->value->i);
        else
            BSON_APPEND_DOUBLE(&qd, key, at->value->num);
    }
    bson_append_document_end(doc, &qd);
    bson_append_array_begin(doc, "qx", 2, &qx);
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        bool             seen = false, one = true;
        char             nk[16];
        const char      *kp;

        for (uint16_t j = 0; j < i && !seen; j++)
            seen = e->attrs[j].name == at->name;
        if (seen)
            continue;
        for (uint16_t j = i + 1; j < e->n_attrs && one; j++)
            one = e->attrs[j].name != at->name;
        if (one && at->kind == ATTR_PROPERTY && at->value && at->value->type == JSON_NUMBER)
            continue;
        mgc_geo_key(key, at->name);
        bson_uint32_to_string((uint32_t)nq++, &kp, nk, sizeof nk);
        bson_append_utf8(&qx, kp, -1, key, -1);
    }
    bson_append_array_end(doc, &qx);
    /* g: per GeoProperty name, the box around all its instances (a superset
     * is what a prefilter needs); the key is the name's hash, as a field name
     * may not hold the dots of an IRI */
    bool any = false;
    for (uint16_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t *at = &e->attrs[i];
        double           box[4], b[4];
        bool             done = false;

        if (at->kind != ATTR_GEOPROPERTY || !at->value || !geo_bbox(at->value, box))
            continue;
        for (uint16_t j = 0; j < i && !done; j++)
            done = e->attrs[j].kind == ATTR_GEOPROPERTY && e->attrs[j].name == at->name &&
                   e->attrs[j].value && geo_bbox(e->attrs[j].value, b);
        if (done)
            continue;                       /* merged into the first instance's box */
        for (uint16_t j = i + 1; j < e->n_attrs; j++)
            if (e->attrs[j].kind == ATTR_GEOPROPERTY && e->attrs[j].name == at->name &&
                e->attrs[j].value && geo_bbox(e->attrs[j].value, b)) {
                if (b[0] < box[0]) box[0] = b[0];
                if (b[1] < box[1]) box[1] = b[1];
                if (b[2] > box[2]) box[2] = b[2];
                if (b[3] > box[3]) box[3] = b[3];
            }
        if (!any) {
            bson_append_document_begin(doc, "g", 1, &arr);
            any = true;
        }
        mgc_geo_key(key, at->name);
        bson_append_document_begin(&arr, key, -1, &sub);
        BSON_APPEND_DOUBLE(&sub, "x0", box[0]);
        BSON_APPEND_DOUBLE(&sub, "y0", box[1]);
        BSON_APPEND_DOUBLE(&sub, "x1", box[2]);
        BSON_APPEND_DOUBLE(&sub, "y1", box[3]);
        bson_append_document_end(&arr, &sub);
    }
    if (any)
        bson_append_document_end(doc, &arr);
    sb_init(&sb, NULL, 256);
    entity_encode(&sb, e);
    BSON_APPEND_BINARY(doc, "e", BSON_SUBTYPE_BINARY, (const uint8_t *)sb.p, (uint32_t)sb.len);
    sb_release(&sb);
}

cr_entity_t *mgc_doc_decode(const bson_t *doc, mgc_ver_t *ver, problem_t *p)
{
    bson_iter_t    it;
    const uint8_t *bin = NULL;
    uint32_t       len = 0;
    bson_subtype_t st;
    cr_entity_t   *draft, *e = NULL;
    arena_t       *a;

    if (ver) {
        ver->v = ver->w = 0;
        if (bson_iter_init_find(&it, doc, "v") && BSON_ITER_HOLDS_NUMBER(&it))
            ver->v = bson_iter_as_int64(&it);
        if (bson_iter_init_find(&it, doc, "w") && BSON_ITER_HOLDS_NUMBER(&it))
            ver->w = bson_iter_as_int64(&it);
    }
    if (bson_iter_init_find(&it, doc, "e") && BSON_ITER_HOLDS_BINARY(&it))
        bson_iter_binary(&it, &st, &len, &bin);
    if (!bin) {
        problem_set(p, PB_INTERNAL_ERROR, "MongoDB: an entity document without its version");
        return NULL;
    }
    a     = arena_new(len * 2 + 1024);
    draft = entity_decode(a, bin, len);
    if (draft)
        e = entity_freeze(draft);
    arena_free(a);
    if (!e)
        problem_set(p, PB_INTERNAL_ERROR, "MongoDB: an entity document that does not decode");
    return e;
}
