/*
 * codec.c - the binary form of an entity version (codec.h): what corDB's log
 * and snapshots hold, so that recovery rebuilds each version without
 * re-running any operation or @context expansion.
 */
#include <string.h>

#include "../json/json.h"
#include "codec.h"

#define NO_SCOPE 0xff

enum { AF_VALUE = 1, AF_UNIT = 2, AF_OTYPE = 4, AF_OBSERVED = 8 };

/* ------------------------------------------------------------ writing */

/* sb_add and sb_addc, inline: an encoding makes some 20 of them per
 * attribute, and the calls were a third of its instructions (callgrind,
 * a PATCH of a Vehicle on disk). sb's NUL is kept, as they keep it. */
static inline void put_bytes(sbuf_t *sb, const char *s, size_t n)
{
    if (CR_UNLIKELY(sb->len + n + 1 > sb->cap)) {
        sb_add(sb, s, n);
        return;
    }
    memcpy(sb->p + sb->len, s, n);
    sb->len += n;
    sb->p[sb->len] = '\0';
}

static inline void put_byte(sbuf_t *sb, char c)
{
    if (CR_UNLIKELY(sb->len + 2 > sb->cap)) {
        sb_addc(sb, c);
        return;
    }
    sb->p[sb->len++] = c;
    sb->p[sb->len]   = '\0';
}

static inline void put_varint(sbuf_t *sb, uint64_t v)
{
    char  b[10];
    bool  room = CR_LIKELY(sb->len + 11 <= sb->cap);
    char *o0 = room ? sb->p + sb->len : b, *o = o0;

    while (v >= 0x80) {
        *o++ = (char)(v | 0x80);
        v >>= 7;
    }
    *o++ = (char)v;
    if (!room) {
        sb_add(sb, b, (size_t)(o - o0));
        return;
    }
    sb->len += (size_t)(o - o0);
    *o = '\0';
}

void cr_put_varint(sbuf_t *sb, uint64_t v)
{
    put_varint(sb, v);
}

static void put_svarint(sbuf_t *sb, int64_t v)
{
    put_varint(sb, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static inline void put_str(sbuf_t *sb, const char *s, size_t n)
{
    put_varint(sb, n);
    put_bytes(sb, s, n);
}

void cr_put_str(sbuf_t *sb, const char *s, size_t n)
{
    put_str(sb, s, n);
}

static void put_cstr(sbuf_t *sb, const char *s)
{
    put_str(sb, s, strlen(s));
}

/* Names (types, attribute names, objectType: expanded IRIs) lose a common
 * prefix: varint (length << 2 | prefix), then the rest. */
static const struct { const char *s; size_t n; } prefixes[] = {
    { "", 0 },
#define P(x) { x, sizeof(x) - 1 }
    P("https://uri.etsi.org/ngsi-ld/default-context/"),
    P("https://uri.etsi.org/ngsi-ld/"),
    P("https://smartdatamodels.org/"),
#undef P
};

static void put_name(sbuf_t *sb, const char *s)
{
    size_t   n = strlen(s);
    unsigned k = 0;

    for (unsigned i = 1; i < CR_ARRAY_LEN(prefixes); i++)
        if (n >= prefixes[i].n && !memcmp(s, prefixes[i].s, prefixes[i].n)) {
            k = i;
            break;
        }
    put_varint(sb, (uint64_t)(n - prefixes[k].n) << 2 | k);
    put_bytes(sb, s + prefixes[k].n, n - prefixes[k].n);
}

static void put_opt(sbuf_t *sb, const char *s)
{
    if (!s) {
        put_varint(sb, 0);
        return;
    }
    size_t n = strlen(s);
    put_varint(sb, n + 1);
    put_bytes(sb, s, n);
}

static void put_json(sbuf_t *sb, const json_t *j)
{
    put_byte(sb, (char)j->type);
    switch (j->type) {
    case JSON_NUMBER:
        if (j->is_int) {
            put_byte(sb, 'i');
            put_svarint(sb, j->i);
        } else {
            put_byte(sb, 'd');
            put_bytes(sb, (const char *)&j->num, sizeof(j->num));
        }
        break;
    case JSON_STRING:
        put_str(sb, j->str, j->len);
        break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        put_varint(sb, j->len);
        for (const json_t *c = j->child; c; c = c->next) {
            if (j->type == JSON_OBJECT)
                put_cstr(sb, c->key ? c->key : "");
            put_json(sb, c);
        }
        break;
    default:
        break;
    }
}

static void put_attr(sbuf_t *sb, const cr_attr_t *a)
{
    unsigned flags = (a->value ? AF_VALUE : 0) | (a->unit_code ? AF_UNIT : 0) |
                     (a->object_type ? AF_OTYPE : 0) | (a->observed_at != CR_NO_TIME ? AF_OBSERVED : 0);

    put_name(sb, a->name);
    put_opt(sb, a->dataset_id);
    put_byte(sb, (char)a->kind);
    put_byte(sb, (char)flags);
    if (a->value)
        put_json(sb, a->value);
    if (a->unit_code)
        put_cstr(sb, a->unit_code);
    if (a->object_type)
        put_name(sb, a->object_type);
    if (a->observed_at != CR_NO_TIME)
        put_svarint(sb, a->observed_at);
    put_svarint(sb, a->created_at);
    put_svarint(sb, a->modified_at);
    put_varint(sb, a->n_sub);
    for (uint16_t i = 0; i < a->n_sub; i++)
        put_attr(sb, &a->sub[i]);
}

void entity_encode(sbuf_t *sb, const cr_entity_t *e)
{
    put_cstr(sb, e->id);
    put_varint(sb, e->n_types);
    for (uint16_t i = 0; i < e->n_types; i++)
        put_name(sb, e->types[i]);
    put_svarint(sb, e->created_at);
    put_svarint(sb, e->modified_at);
    if (e->scope)
        put_json(sb, e->scope);
    else
        put_byte(sb, (char)NO_SCOPE);
    put_varint(sb, e->n_attrs);
    for (uint16_t i = 0; i < e->n_attrs; i++)
        put_attr(sb, &e->attrs[i]);
}

/* ------------------------------------------------------------ reading */

uint64_t cr_get_varint(cr_reader_t *r)
{
    uint64_t v = 0;

    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) {
            r->bad = true;
            return 0;
        }
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = true;
    return 0;
}

static int64_t get_svarint(cr_reader_t *r)
{
    uint64_t u = cr_get_varint(r);

    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

static int get_byte(cr_reader_t *r)
{
    if (r->p >= r->end) {
        r->bad = true;
        return -1;
    }
    return *r->p++;
}

const char *cr_get_str(cr_reader_t *r, size_t *n)
{
    uint64_t len = cr_get_varint(r);
    const char *s;

    if (r->bad || len > (uint64_t)(r->end - r->p)) {
        r->bad = true;
        *n = 0;
        return NULL;
    }
    s = (const char *)r->p;
    r->p += len;
    *n = (size_t)len;
    return s;
}

static char *get_dup(cr_reader_t *r, arena_t *a)
{
    size_t      n;
    const char *s = cr_get_str(r, &n);

    if (!s || memchr(s, '\0', n)) {
        r->bad = true;
        return NULL;
    }
    return arena_strndup(a, s, n);
}

static const char *get_name(cr_reader_t *r, arena_t *a)
{
    uint64_t v = cr_get_varint(r), len = v >> 2;
    unsigned k = (unsigned)(v & 3);
    char    *s;

    if (r->bad || k >= CR_ARRAY_LEN(prefixes) || len > (uint64_t)(r->end - r->p) || memchr(r->p, '\0', (size_t)len)) {
        r->bad = true;
        return NULL;
    }
    s = arena_alloc(a, prefixes[k].n + (size_t)len + 1);
    memcpy(s, prefixes[k].s, prefixes[k].n);
    memcpy(s + prefixes[k].n, r->p, (size_t)len);
    s[prefixes[k].n + len] = '\0';
    r->p += len;
    return intern_cstr(s);
}

static char *get_opt(cr_reader_t *r, arena_t *a)
{
    uint64_t len = cr_get_varint(r);

    if (r->bad || !len)
        return NULL;
    if (len - 1 > (uint64_t)(r->end - r->p)) {
        r->bad = true;
        return NULL;
    }
    char *s = arena_strndup(a, (const char *)r->p, (size_t)(len - 1));
    if (memchr(r->p, '\0', (size_t)(len - 1)))
        r->bad = true;
    r->p += len - 1;
    return s;
}

/* Counts read from the input are checked against the bytes left (each child
 * takes at least one byte), so a bad count cannot allocate much. */
static bool count_ok(cr_reader_t *r, uint64_t n, uint64_t max)
{
    if (r->bad || n > max || n > (uint64_t)(r->end - r->p)) {
        r->bad = true;
        return false;
    }
    return true;
}

static json_t *get_json(cr_reader_t *r, arena_t *a, int depth)
{
    int     t = get_byte(r);
    json_t *j;

    if (t < 0 || depth > CR_JSON_DEPTH_MAX) {
        r->bad = true;
        return NULL;
    }
    switch (t) {
    case JSON_NULL:
    case JSON_FALSE:
    case JSON_TRUE:
        return json_new(a, (json_type_t)t);
    case JSON_NUMBER: {
        int k = get_byte(r);

        if (k == 'i')
            return json_new_int(a, get_svarint(r));
        if (k == 'd' && r->end - r->p >= (ptrdiff_t)sizeof(double)) {
            double d;

            memcpy(&d, r->p, sizeof(d));
            r->p += sizeof(d);
            return json_new_number(a, d);
        }
        r->bad = true;
        return NULL;
    }
    case JSON_STRING: {
        size_t      n;
        const char *s = cr_get_str(r, &n);

        if (!s || memchr(s, '\0', n)) {
            r->bad = true;
            return NULL;
        }
        return json_new_stringn(a, s, n);
    }
    case JSON_ARRAY:
    case JSON_OBJECT: {
        uint64_t n = cr_get_varint(r);
        json_t  *tail = NULL;

        if (!count_ok(r, n, UINT32_MAX))
            return NULL;
        j = json_new(a, (json_type_t)t);
        for (uint64_t i = 0; i < n && !r->bad; i++) {
            const char *key = t == JSON_OBJECT ? get_dup(r, a) : NULL;
            json_t     *c   = get_json(r, a, depth + 1);

            if (!c || r->bad)
                return NULL;
            json_push(j, &tail, key, c);
        }
        return r->bad ? NULL : j;
    }
    default:
        r->bad = true;
        return NULL;
    }
}

static bool get_attr(cr_reader_t *r, arena_t *a, cr_attr_t *at, int depth)
{
    uint64_t n_sub;
    int      kind, flags;

    memset(at, 0, sizeof(*at));
    if (depth > CR_JSON_DEPTH_MAX)
        return r->bad = true, false;
    at->name       = get_name(r, a);
    at->dataset_id = get_opt(r, a);
    kind  = get_byte(r);
    flags = get_byte(r);
    if (r->bad || !at->name || kind < ATTR_PROPERTY || kind > ATTR_JSONPROPERTY || flags < 0)
        return r->bad = true, false;
    at->kind = (uint8_t)kind;
    if ((flags & AF_VALUE) && !(at->value = get_json(r, a, 0)))
        return r->bad = true, false;
    if (flags & AF_UNIT)
        at->unit_code = get_dup(r, a);
    if (flags & AF_OTYPE)
        at->object_type = get_name(r, a);
    at->observed_at = (flags & AF_OBSERVED) ? get_svarint(r) : CR_NO_TIME;
    at->created_at  = get_svarint(r);
    at->modified_at = get_svarint(r);
    n_sub = cr_get_varint(r);
    if (!count_ok(r, n_sub, CR_ATTRS_MAX))
        return false;
    at->n_sub = (uint16_t)n_sub;
    if (n_sub) {
        at->sub = arena_calloc(a, n_sub * sizeof(*at->sub));
        for (uint64_t i = 0; i < n_sub; i++)
            if (!get_attr(r, a, &at->sub[i], depth + 1))
                return false;
    }
    return !r->bad;
}

cr_entity_t *entity_decode(arena_t *a, const void *buf, size_t len)
{
    cr_reader_t  r = { .p = buf, .end = (const uint8_t *)buf + len };
    cr_entity_t *e = arena_calloc(a, sizeof(*e));
    uint64_t     n;

    e->id = get_dup(&r, a);
    n = cr_get_varint(&r);
    if (!e->id || !count_ok(&r, n, CR_ATTRS_MAX) || !n)
        return NULL;
    e->n_types = (uint16_t)n;
    e->types   = arena_alloc(a, n * sizeof(*e->types));
    for (uint64_t i = 0; i < n; i++)
        if (!(e->types[i] = get_name(&r, a)))
            return NULL;
    e->created_at  = get_svarint(&r);
    e->modified_at = get_svarint(&r);
    if (r.p < r.end && *r.p == NO_SCOPE)
        r.p++;
    else if (!(e->scope = get_json(&r, a, 0)))
        return NULL;
    n = cr_get_varint(&r);
    if (!count_ok(&r, n, CR_ATTRS_MAX))
        return NULL;
    e->n_attrs = (uint16_t)n;
    if (n) {
        e->attrs = arena_calloc(a, n * sizeof(*e->attrs));
        for (uint64_t i = 0; i < n; i++)
            if (!get_attr(&r, a, &e->attrs[i], 0))
                return NULL;
    }
    return r.bad || r.p != r.end ? NULL : e;
}
