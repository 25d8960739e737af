/*
 * doc.c - an entity version as a MongoDB document, and back.
 *
 * The version itself is the codec's compact form (model/codec.h) in "e", so
 * that a read gives back exactly the version that was written (values,
 * datasetIds, system times, attribute order) without a second model of the
 * entity in BSON. Beside it, the fields the server filters, sorts and
 * indexes on: the id (_id), the types (t), createdAt (c), modifiedAt (m),
 * the version number (v: the optimistic check), the write token (w: which
 * write applied), the attribute names (a), the scope strings (s), the
 * scalar values q compares (q: {hHASH: number, string or bool} for a
 * single-instance Property or Relationship; d: {hHASH: µs} for those strings
 * that read as a DateTime or a Date; qx: the hashes of the other attributes;
 * filter.c's q prefilter) and a bounding box per GeoProperty
 * (g: {hHASH: {x0, y0, x1, y1}}, around all its instances: plain numbers that
 * any MongoDB-wire server compares, the geo prefilter of query.c) and, on
 * a server with 2dsphere only, the GeoJSON Point of each GeoProperty of one
 * Point instance (gj: {hHASH: {type: "Point", coordinates: [lon, lat]}}),
 * what its 2dsphere index holds.
 */
#include <stdio.h>
#include <stdlib.h>
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

/* The longest string kept in q: a longer one is left to the broker (qx),
 * so that a document stays compact whatever its values. */
#define Q_STR_MAX 256u

/* The scalar q compares for a name on the server: one instance of a
 * Property or a Relationship whose value (a typed {"@value": x} stands for
 * x, as in q) is a number, a bool or a string of at most Q_STR_MAX bytes;
 * NULL: the name goes to qx, its terms to the broker. */
static const json_t *q_scalar(const cr_attr_t *at, const name_slot_t *s)
{
    const json_t *v = at->value;

    if (s->n != 1 || !v || (at->kind != ATTR_PROPERTY && at->kind != ATTR_RELATIONSHIP))
        return NULL;
    if (v->type == JSON_OBJECT && !(v = json_get(v, "@value")))
        return NULL;
    switch (v->type) {
    case JSON_NUMBER:
    case JSON_TRUE:
    case JSON_FALSE:
        return v;
    case JSON_STRING:
        return v->len <= Q_STR_MAX ? v : NULL;
    default:
        return NULL;
    }
}

/* ------------------------------------------------------------ writing
 *
 * The document is written as BSON bytes into one buffer by the few
 * functions below (doc.c is the only writer of these documents, and its
 * fields are few types), then copied once into the caller's bson_t:
 * libbson's bson_append_* cost 350 - 770 instructions a field (a variadic
 * copy per part, and the growth of the document), 21k of a PATCH's write
 * (callgrind); the encoded version goes straight into its binary field. */

static void w_le(sbuf_t *sb, uint64_t v, int n)
{
    char b[8];

    for (int i = 0; i < n; i++)
        b[i] = (char)(v >> (8 * i));
    sb_add(sb, b, (size_t)n);
}

static void w_key(sbuf_t *sb, char type, const char *k, size_t klen)
{
    sb_addc(sb, type);
    sb_add(sb, k, klen);
    sb_addc(sb, '\0');
}

/* A document (0x03) or an array (0x04) opened under key k; its length's offset. */
static size_t w_open(sbuf_t *sb, char type, const char *k, size_t klen)
{
    size_t at;

    w_key(sb, type, k, klen);
    at = sb->len;
    w_le(sb, 0, 4);
    return at;
}

static void w_close(sbuf_t *sb, size_t at)
{
    uint32_t n;

    sb_addc(sb, '\0');
    n = (uint32_t)(sb->len - at);
    for (int i = 0; i < 4; i++)
        sb->p[at + (size_t)i] = (char)(n >> (8 * i));
}

static void w_str(sbuf_t *sb, const char *k, size_t klen, const char *v, size_t n)
{
    w_key(sb, 0x02, k, klen);
    w_le(sb, (uint64_t)n + 1, 4);
    sb_add(sb, v, n);
    sb_addc(sb, '\0');
}

static void w_i64(sbuf_t *sb, const char *k, size_t klen, int64_t v)
{
    w_key(sb, 0x12, k, klen);
    w_le(sb, (uint64_t)v, 8);
}

static void w_dbl(sbuf_t *sb, const char *k, size_t klen, double v)
{
    uint64_t u;

    memcpy(&u, &v, 8);
    w_key(sb, 0x01, k, klen);
    w_le(sb, u, 8);
}

static void w_bool(sbuf_t *sb, const char *k, size_t klen, bool v)
{
    w_key(sb, 0x08, k, klen);
    sb_addc(sb, v ? 1 : 0);
}

/* Element i of an array: the key is its index. */
static void w_elem(sbuf_t *sb, uint32_t i, const char *v, size_t n)
{
    char        nk[16];
    const char *kp;
    size_t      kl = bson_uint32_to_string(i, &kp, nk, sizeof nk);

    w_str(sb, kp, kl, v, n);
}

static double num_of(const json_t *j)
{
    return j->is_int ? (double)j->i : j->num;
}

/* The Point a 2dsphere index accepts for the name (its one instance, a
 * GeoJSON Point with longitude and latitude in range): lon and lat, or
 * false (several instances, another geometry: the name has no gj and its
 * query terms keep the box prefilter). Only the two first numbers go to
 * the server: an altitude is the broker's (GEOS compares in 2D too). */
static bool gj_point(const cr_attr_t *at, const name_slot_t *s, double *x, double *y)
{
    const json_t *t, *c;

    if (s->n != 1 || s->n_geo != 1 || !at->value || at->value->type != JSON_OBJECT ||
        !(t = json_get(at->value, "type")) || t->type != JSON_STRING || strcmp(t->str, "Point") ||
        !(c = json_get(at->value, "coordinates")) || c->type != JSON_ARRAY || c->len < 2 ||
        c->child->type != JSON_NUMBER || c->child->next->type != JSON_NUMBER)
        return false;
    *x = num_of(c->child);
    *y = num_of(c->child->next);
    return *x >= -180 && *x <= 180 && *y >= -90 && *y <= 90;
}

void mgc_doc_entity(bson_t *doc, const cr_entity_t *e, int64_t version, uint64_t token, bool geojson)
{
    char     key[24];
    sbuf_t   sb;
    names_t  nt;
    uint32_t k = 0, nx = 0, n_time = 0;
    int64_t  us;
    size_t   top, arr, sub = 0, at;
    bool     any_geo = false;
    bson_t   tmp;

    names_init(&nt, e);
    sb_init(&sb, NULL, 1024);
    top = sb.len;
    w_le(&sb, 0, 4);
    w_str(&sb, "_id", 3, e->id, strlen(e->id));
    arr = w_open(&sb, 0x04, "t", 1);
    for (uint16_t i = 0; i < e->n_types; i++)
        w_elem(&sb, i, e->types[i], strlen(e->types[i]));
    w_close(&sb, arr);
    w_i64(&sb, "c", 1, e->created_at);
    w_i64(&sb, "m", 1, e->modified_at);
    w_i64(&sb, "v", 1, version);
    w_i64(&sb, "w", 1, (int64_t)token);
    /* a: the attribute names, each once */
    arr = w_open(&sb, 0x04, "a", 1);
    for (uint32_t i = 0; i < e->n_attrs; i++)
        if (names_find(&nt, e->attrs[i].name)->first == i)
            w_elem(&sb, k++, e->attrs[i].name, strlen(e->attrs[i].name));
    w_close(&sb, arr);
    /* s: the scope strings ([] for none: a document without s was written
     * before s existed, and query.c's scopeQ prefilter lets it through) */
    arr = w_open(&sb, 0x04, "s", 1);
    if (e->scope && e->scope->type == JSON_STRING) {
        w_elem(&sb, 0, e->scope->str, e->scope->len);
    } else if (e->scope && e->scope->type == JSON_ARRAY) {
        uint32_t j = 0;

        json_foreach(el, e->scope)
            if (el->type == JSON_STRING)
                w_elem(&sb, j++, el->str, el->len);
    }
    w_close(&sb, arr);
    /* q: the value of each name q can compare on the server (query.c's q
     * prefilter); qx: the hashes of the other names, whose q terms the
     * broker judges */
    if (nt.n > Q_NAMES_MAX)
        goto geo;
    sub = w_open(&sb, 0x03, "q", 1);
    for (uint32_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t   *at_ = &e->attrs[i];
        const name_slot_t *s   = names_find(&nt, at_->name);
        const json_t      *v;

        if (s->first != i || !(v = q_scalar(at_, s)))
            continue;
        mgc_geo_key(key, at_->name);
        if (v->type == JSON_STRING) {
            w_str(&sb, key, 17, v->str, v->len);
            if (cr_datetime_parse(v->str, &us) || cr_date_parse(v->str, &us))
                n_time++;
        } else if (v->type != JSON_NUMBER) {
            w_bool(&sb, key, 17, v->type == JSON_TRUE);
        } else if (v->is_int) {
            w_i64(&sb, key, 17, v->i);
        } else {
            w_dbl(&sb, key, 17, v->num);
        }
    }
    w_close(&sb, sub);
    /* d: the time of each such string that reads as a DateTime or a Date
     * (q compares those as times) */
    if (n_time) {
        sub = w_open(&sb, 0x03, "d", 1);
        for (uint32_t i = 0; i < e->n_attrs; i++) {
            const cr_attr_t   *at_ = &e->attrs[i];
            const name_slot_t *s   = names_find(&nt, at_->name);
            const json_t      *v;

            if (s->first != i || !(v = q_scalar(at_, s)) || v->type != JSON_STRING ||
                !(cr_datetime_parse(v->str, &us) || cr_date_parse(v->str, &us)))
                continue;
            mgc_geo_key(key, at_->name);
            w_i64(&sb, key, 17, us);
        }
        w_close(&sb, sub);
    }
    arr = w_open(&sb, 0x04, "qx", 2);
    for (uint32_t i = 0; i < e->n_attrs; i++) {
        const cr_attr_t   *at_ = &e->attrs[i];
        const name_slot_t *s   = names_find(&nt, at_->name);

        if (s->first != i || q_scalar(at_, s))
            continue;
        mgc_geo_key(key, at_->name);
        w_elem(&sb, nx++, key, 17);
    }
    w_close(&sb, arr);
geo:
    /* g: per GeoProperty name, the box around all its instances (a superset
     * is what a prefilter needs); the key is the name's hash, as a field name
     * may not hold the dots of an IRI */
    for (uint32_t i = 0; i < e->n_attrs; i++) {
        const name_slot_t *s = names_find(&nt, e->attrs[i].name);
        size_t             box;

        if (s->first != i || !s->n_geo)
            continue;
        if (!any_geo) {
            sub = w_open(&sb, 0x03, "g", 1);
            any_geo = true;
        }
        mgc_geo_key(key, s->name);
        box = w_open(&sb, 0x03, key, 17);
        w_dbl(&sb, "x0", 2, s->box[0]);
        w_dbl(&sb, "y0", 2, s->box[1]);
        w_dbl(&sb, "x1", 2, s->box[2]);
        w_dbl(&sb, "y1", 2, s->box[3]);
        w_close(&sb, box);
    }
    if (any_geo)
        w_close(&sb, sub);
    /* gj (a server with 2dsphere): per GeoProperty name of one Point, the
     * GeoJSON its 2dsphere index holds (filter.c's geo part) */
    any_geo = false;
    for (uint32_t i = 0; geojson && i < e->n_attrs; i++) {
        const name_slot_t *s = names_find(&nt, e->attrs[i].name);
        size_t             pt, co;
        double             x, y;

        if (s->first != i || !s->n_geo || !gj_point(&e->attrs[i], s, &x, &y))
            continue;
        if (!any_geo) {
            sub = w_open(&sb, 0x03, "gj", 2);
            any_geo = true;
        }
        mgc_geo_key(key, s->name);
        pt = w_open(&sb, 0x03, key, 17);
        w_str(&sb, "type", 4, "Point", 5);
        co = w_open(&sb, 0x04, "coordinates", 11);
        w_dbl(&sb, "0", 1, x);
        w_dbl(&sb, "1", 1, y);
        w_close(&sb, co);
        w_close(&sb, pt);
    }
    if (any_geo)
        w_close(&sb, sub);
    names_free(&nt);
    /* e: binary (subtype 0), the encoding written in place */
    w_key(&sb, 0x05, "e", 1);
    at = sb.len;
    w_le(&sb, 0, 5);
    entity_encode(&sb, e);
    {
        uint32_t n = (uint32_t)(sb.len - at - 5);

        for (int i = 0; i < 4; i++)
            sb.p[at + (size_t)i] = (char)(n >> (8 * i));
    }
    w_close(&sb, top);
    if (!bson_init_static(&tmp, (const uint8_t *)sb.p, sb.len)) {
        LOG_E("mongoc: an entity document that does not read back (%zu bytes); aborting", sb.len);
        abort();
    }
    bson_copy_to(&tmp, doc);
    sb_release(&sb);
}

/* c, v or w of a read's document. */
static void set_num(mgc_docf_t *f, char k, int64_t n)
{
    if (k == 'c')
        f->c = n;
    else if (k == 'v')
        f->ver.v = n;
    else
        f->ver.w = n;
}

static int64_t rd_i32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static int64_t rd_i64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* The fields of a read's document (_id, c, v, w, e: projected, so a few
 * elements) by walking its bytes: libbson's iterator checks each element
 * for every use, some 200 instructions an element, 20 documents a query
 * page (callgrind). Only what it knows and that fits (double, string,
 * binary, int32, int64, bool, null); false on anything else, and the
 * caller's libbson loop decides as before. */
static bool fields_fast(const uint8_t *d, uint32_t len, mgc_docf_t *f)
{
    uint32_t i = 4;

    if (len < 5 || rd_i32(d) != (int64_t)len || d[len - 1])
        return false;
    while (i < len - 1) {
        uint8_t     type = d[i++];
        const char *k    = (const char *)d + i;
        const void *z    = memchr(d + i, 0, len - 1 - i);
        uint32_t    left;

        if (!z)
            return false;
        i    = (uint32_t)((const uint8_t *)z - d) + 1;
        left = len - 1 - i;
        bool key1 = k[0] && !k[1];
        switch (type) {
        case 0x01:                  /* double, int32, int64 */
        case 0x10:
        case 0x12: {
            uint32_t wd = type == 0x10 ? 4 : 8;

            if (left < wd)
                return false;
            if (key1 && (k[0] == 'c' || k[0] == 'v' || k[0] == 'w')) {
                int64_t n;

                if (type == 0x10) {
                    n = rd_i32(d + i);
                } else if (type == 0x12) {
                    n = rd_i64(d + i);
                } else {
                    double   x;
                    uint64_t u = (uint64_t)rd_i64(d + i);

                    memcpy(&x, &u, 8);
                    n = (int64_t)x;     /* as bson_iter_as_int64 */
                }
                set_num(f, k[0], n);
            }
            i += wd;
            break;
        }
        case 0x02: {                /* string: int32 length (with its NUL), bytes */
            if (left < 5)
                return false;
            int64_t sl = rd_i32(d + i);

            if (sl < 1 || sl > (int64_t)left - 4 || d[i + 4 + sl - 1])
                return false;
            if (k[0] == '_' && !strcmp(k, "_id"))
                f->id = (const char *)d + i + 4;
            else if (key1 && (k[0] == 'c' || k[0] == 'v' || k[0] == 'w' || k[0] == 'e'))
                return false;       /* not a number: the libbson loop's answer */
            i += 4 + (uint32_t)sl;
            break;
        }
        case 0x05: {                /* binary: int32 length, subtype, bytes */
            if (left < 5)
                return false;
            int64_t bl = rd_i32(d + i);

            if (bl < 0 || bl > (int64_t)left - 5 || d[i + 4] == 0x02)
                return false;       /* 0x02: the old binary subtype, libbson's own rules */
            if (key1 && k[0] == 'e') {
                f->e     = d + i + 5;
                f->e_len = (uint32_t)bl;
            }
            i += 5 + (uint32_t)bl;
            break;
        }
        case 0x08:                  /* bool */
            if (left < 1 || d[i] > 1)
                return false;
            if (key1 && (k[0] == 'c' || k[0] == 'v' || k[0] == 'w'))
                return false;
            i += 1;
            break;
        case 0x0A:                  /* null */
            if (key1 && (k[0] == 'c' || k[0] == 'v' || k[0] == 'w' || k[0] == 'e'))
                return false;
            break;
        default:
            return false;
        }
    }
    return i == len - 1;
}

void mgc_doc_fields(const bson_t *doc, mgc_docf_t *f)
{
    bson_iter_t    it;
    bson_subtype_t st;

    memset(f, 0, sizeof(*f));
    if (fields_fast(bson_get_data(doc), doc->len, f))
        return;
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
            set_num(f, k[0], BSON_ITER_HOLDS_NUMBER(&it) ? bson_iter_as_int64(&it) : 0);
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
