/*
 * filter.c - an entity filter (model.h entity_filter_t) as a MongoDB filter:
 * exact where the server can decide a part alone, else a prefilter.
 *
 * The rule: the server's filter never drops an entity that filter_match()
 * would keep. A part the server decides exactly (ids, plain type lists,
 * attrs=, an idPattern within the regex subset below, the ids and types of
 * the entity selectors, q existence terms) leaves nothing to the broker; a
 * prefilter (q value terms, scopeQ, the geo box) returns a superset that
 * the broker judges with filter_match(). mgc_filter() says which: only an
 * exact filter lets offset, limit and the count go to the server.
 *
 * The fields read (doc.c writes them):
 *   _id, t, a           every document ever written;
 *   q.hHASH             the scalar value of a single-instance Property or
 *                       Relationship (number, string up to 256 bytes, bool;
 *                       a typed {"@value": x} stands for x), qx the hashes
 *                       of the other names: a value term is "q.hHASH op v OR
 *                       hHASH in qx OR no qx" (no qx: written with more than
 *                       256 names, or before q existed);
 *   d.hHASH             the time of such a value that reads as a DateTime or
 *                       a Date (µs), for DateTime / Date literals;
 *   s                   the scope strings ([] for none; absent in documents
 *                       written before s existed: those pass the prefilter);
 *   g.hHASH, gj.hHASH   a GeoProperty's box (every server) and, written on a
 *                       server with 2dsphere only, its Point (the geo part).
 *
 * Regexes: the pattern goes to the server as written only when it is inside
 * the subset that PCRE2 (ours, and MongoDB's) and RE2 (FerretDB is Go) read
 * alike: literals, '.', classes of literals, ranges and \d \w \s, anchors,
 * groups and (?:), '|', greedy and lazy quantifiers with counts up to 1000,
 * but no quantifier on a group that holds a quantifier or a '|' ((a+)+,
 * (a|aa)*): a backtracking server may spend exponential time on one, where
 * the broker's PCRE2 stops at its match limit and answers 400 (4.9).
 * Anything else (lookaround, backreferences, possessive quantifiers, \b,
 * POSIX classes, flags) is no pushdown: the broker matches it. A q ~= is a
 * prefilter on values that may hold newlines, where PCRE's '$' also matches
 * before a final newline and RE2's does not, and where \s differs (\v): a
 * q pattern with '$' or \s \S is not sent. Entity ids are URIs (no control
 * characters), so an idPattern's '$' means the same on every server.
 */
#include <stdio.h>
#include <string.h>

#include "mgc.h"

/* ------------------------------------------------------------ regexes */

static bool re_escape_ok(char d, bool for_values)
{
    if (strchr(".^$*+?()[]{}|\\/-", d))
        return true;
    if (d == 'd' || d == 'D' || d == 'w' || d == 'W')
        return true;
    return !for_values && (d == 's' || d == 'S');
}

/* A bracket class from s[i] == '[': its end (after ']'), or 0 when not portable. */
static size_t re_class(const char *s, size_t n, size_t i, bool for_values)
{
    size_t start;

    i++;
    if (i < n && s[i] == '^')
        i++;
    start = i;
    while (i < n && s[i] != ']') {
        unsigned char c = (unsigned char)s[i];

        if (c < 0x20 || c == 0x7f || c == '[' || (c == ']' && i == start))
            return 0;
        if (c == '\\') {
            if (i + 1 >= n || !re_escape_ok(s[i + 1], for_values))
                return 0;
            i += 2;
            continue;
        }
        i++;
    }
    return i < n && i > start ? i + 1 : 0;
}

/* A counted quantifier from s[i] == '{': its end, or 0. */
static size_t re_count(const char *s, size_t n, size_t i)
{
    unsigned a = 0, b = 0, digits = 0;
    bool     comma = false;

    for (i++; i < n && s[i] != '}'; i++) {
        if (s[i] == ',' && !comma && digits) {
            comma  = true;
            digits = 0;
        } else if (s[i] >= '0' && s[i] <= '9' && digits < 4) {
            if (comma)
                b = b * 10 + (unsigned)(s[i] - '0');
            else
                a = a * 10 + (unsigned)(s[i] - '0');
            digits++;
        } else {
            return 0;
        }
    }
    if (i >= n || (!digits && !comma) || a > 1000 || b > 1000 || (comma && digits && b < a))
        return 0;
    return i + 1;
}

bool mgc_regex_portable(const char *s, size_t n, bool for_values)
{
    enum { MAX_DEPTH = 32 };
    int  depth = 0;
    bool atom  = false;         /* the last item can take a quantifier */
    bool risky = false;         /* ... and it is a group that repeats or branches inside */
    bool inner[MAX_DEPTH + 1] = { false };  /* group d holds a quantifier or a '|' */

    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t        e;
        bool          after_risky = risky;

        risky = false;
        if (c < 0x20 || c == 0x7f)
            return false;
        switch (c) {
        case '\\':
            if (i + 1 >= n || !re_escape_ok(s[i + 1], for_values))
                return false;
            i += 2;
            atom = true;
            continue;
        case '[':
            if (!(e = re_class(s, n, i, for_values)))
                return false;
            i    = e;
            atom = true;
            continue;
        case '(':
            if (i + 1 < n && s[i + 1] == '?') {
                if (i + 2 >= n || s[i + 2] != ':')
                    return false;
                i += 2;
            }
            if (++depth > MAX_DEPTH)
                return false;
            inner[depth] = false;
            atom = false;
            break;
        case ')':
            if (depth == 0)
                return false;
            risky = inner[depth--];
            inner[depth] |= risky;
            atom = true;
            i++;
            continue;
        case '*': case '+': case '?': case '{':
            /* (a+)+ or (a|aa)*: a backtracking server (MongoDB's PCRE) may
             * take exponential time on it; the broker matches it locally,
             * under PCRE2's match limit (400 when it is reached). */
            if (!atom || after_risky)
                return false;
            inner[depth] = true;
            if (c == '{') {
                if (!(e = re_count(s, n, i)))
                    return false;
                i = e;
            } else {
                i++;
            }
            if (i < n && s[i] == '?')       /* lazy */
                i++;
            if (i < n && strchr("*+?{", s[i]))
                return false;               /* possessive, or a quantifier twice */
            atom = false;
            continue;
        case '}':
            return false;
        case '$':
            if (for_values)
                return false;
            atom = false;
            break;
        case '|':
            inner[depth] = true;
            atom = false;
            break;
        case '^':
            atom = false;
            break;
        default:
            atom = true;
        }
        i++;
        if (c >= 0x80)                      /* a quantifier applies to the whole character */
            while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
                i++;
    }
    return depth == 0;
}

/* ------------------------------------------------------------ builders */

static void key_of(char nk[16], const char **kp, uint32_t i)
{
    bson_uint32_to_string(i, kp, nk, 16);
}

static void append_strs(bson_t *q, const char *field, const char *const *v, size_t n)
{
    bson_t in, arr;
    char   nk[16];

    bson_append_document_begin(q, field, -1, &in);
    bson_append_array_begin(&in, "$in", 3, &arr);
    for (size_t i = 0; i < n; i++) {
        const char *kp;
        key_of(nk, &kp, (uint32_t)i);
        bson_append_utf8(&arr, kp, -1, v[i], -1);
    }
    bson_append_array_end(&in, &arr);
    bson_append_document_end(q, &in);
}

static void append_cmp(bson_t *d, const char *field, const char *op, double v)
{
    bson_t c;

    bson_append_document_begin(d, field, -1, &c);
    bson_append_double(&c, op, -1, v);
    bson_append_document_end(d, &c);
}

/* An element of a clause list: the next key of arr ("0", "1" ...). */
typedef struct clauses {
    bson_t   arr;
    uint32_t n;
} clauses_t;

static void clause_add(clauses_t *c, const bson_t *doc)
{
    char        nk[16];
    const char *kp;

    key_of(nk, &kp, c->n++);
    bson_append_document(&c->arr, kp, -1, doc);
}

/* ------------------------------------------------------------ q
 *
 * A term's translation: PRE_NONE (the server cannot narrow it), PRE_SOME (a
 * superset of its matches), PRE_EXACT (exactly its matches). */
typedef enum { PRE_NONE = 0, PRE_SOME, PRE_EXACT } pre_t;

/* One literal as the stored field holds it. */
static void append_val(bson_t *d, const char *key, const q_value_view_t *v)
{
    switch (v->kind) {
    case QVK_NUM:
        if (v->is_int)
            bson_append_int64(d, key, -1, v->i);
        else
            bson_append_double(d, key, -1, v->num);
        break;
    case QVK_STR:
        bson_append_utf8(d, key, -1, v->s, (int)v->len);
        break;
    case QVK_BOOL:
        bson_append_bool(d, key, -1, v->b);
        break;
    default:                    /* DATETIME, DATE: d holds µs */
        bson_append_int64(d, key, -1, v->us);
        break;
    }
}

/* A string literal that q compares as a time, or as either of two texts
 * (a term with an expansion), cannot be ordered on the stored text. */
static bool str_plain(const q_value_view_t *v)
{
    int64_t us;

    return !cr_datetime_parse(v->s, &us) && !cr_date_parse(v->s, &us);
}

/* The condition on the stored field for a value term into c; false: none. */
static bool value_cond(const q_expr_t *q, const q_term_view_t *tv, q_valkind_t kind, bson_t *c)
{
    q_value_view_t v;
    const char    *op, *kp;
    char           nk[16];
    bson_t         arr;
    uint32_t       k = 0;

    switch (tv->op) {
    case QO_EQ: op = "$eq"; break;
    case QO_GT: op = "$gt"; break;
    case QO_GE: op = "$gte"; break;
    case QO_LT: op = "$lt"; break;
    case QO_LE: op = "$lte"; break;
    default:    return false;
    }
    if (tv->op != QO_EQ && tv->shape != QSH_SINGLE)
        return false;
    for (size_t i = 0; i < tv->n_values; i++) {
        q_term_value(q, i, &v);
        if (kind == QVK_STR && (!str_plain(&v) || (v.expanded && (tv->op != QO_EQ || tv->shape == QSH_RANGE))))
            return false;
    }
    if (tv->shape == QSH_RANGE && tv->n_values == 2) {
        q_term_value(q, 0, &v);
        append_val(c, "$gte", &v);
        q_term_value(q, 1, &v);
        append_val(c, "$lte", &v);
        return true;
    }
    if (tv->op == QO_EQ && (tv->shape == QSH_LIST || kind == QVK_STR)) {
        /* a term with an expansion may be compared as either text */
        bson_append_array_begin(c, "$in", 3, &arr);
        for (size_t i = 0; i < tv->n_values; i++) {
            q_term_value(q, i, &v);
            key_of(nk, &kp, k++);
            append_val(&arr, kp, &v);
            if (kind == QVK_STR && v.expanded && strcmp(v.expanded, v.s)) {
                key_of(nk, &kp, k++);
                bson_append_utf8(&arr, kp, -1, v.expanded, -1);
            }
        }
        bson_append_array_end(c, &arr);
        return true;
    }
    if (tv->shape != QSH_SINGLE || tv->n_values != 1)
        return false;
    q_term_value(q, 0, &v);
    append_val(c, op, &v);
    return true;
}

/* "{field: cond} OR hHASH in qx OR no qx" into out, cond filled by fn. */
static pre_t term_value_pre(const q_expr_t *q, const q_term_view_t *tv, bson_t *out)
{
    q_value_view_t v;
    q_valkind_t    kind;
    char           key[24], field[32];
    bson_t         or, a, c, b;
    bool           ok;

    if (tv->op == QO_MATCH) {
        if (!mgc_regex_portable(tv->pattern, tv->pattern_len, true))
            return PRE_NONE;
        kind = QVK_STR;
    } else {
        if (!tv->n_values || !q_term_value(q, 0, &v))
            return PRE_NONE;
        kind = v.kind;
        if (kind == QVK_TIME)
            return PRE_NONE;
        for (size_t i = 1; i < tv->n_values; i++)
            if (!q_term_value(q, i, &v) || v.kind != kind)
                return PRE_NONE;
    }
    mgc_geo_key(key, tv->attr);
    snprintf(field, sizeof field, "%s.%s", kind == QVK_DATETIME || kind == QVK_DATE ? "d" : "q", key);
    bson_init(out);
    bson_append_array_begin(out, "$or", 3, &or);
    bson_append_document_begin(&or, "0", 1, &a);
    bson_append_document_begin(&a, field, -1, &c);
    if (tv->op == QO_MATCH) {
        bson_append_regex_w_len(&c, "$regex", 6, tv->pattern, (int)tv->pattern_len, "");
        ok = true;
    } else {
        ok = value_cond(q, tv, kind, &c);
    }
    bson_append_document_end(&a, &c);
    bson_append_document_end(&or, &a);
    bson_append_document_begin(&or, "1", 1, &b);
    BSON_APPEND_UTF8(&b, "qx", key);
    bson_append_document_end(&or, &b);
    bson_append_document_begin(&or, "2", 1, &b);    /* written without q/qx */
    bson_append_document_begin(&b, "qx", 2, &c);
    BSON_APPEND_BOOL(&c, "$exists", false);
    bson_append_document_end(&b, &c);
    bson_append_document_end(&or, &b);
    bson_append_array_end(out, &or);
    if (!ok) {
        bson_destroy(out);
        return PRE_NONE;
    }
    return PRE_SOME;
}

static pre_t q_term_pre(const q_expr_t *q, bson_t *out)
{
    q_term_view_t tv;
    bson_t        c;
    bool          plain;

    if (!q_term_get(q, &tv))
        return PRE_NONE;
    plain = !tv.linked && !tv.n_steps && !tv.n_keys;
    if (tv.op == QO_NOT_EXISTS) {
        if (!plain)
            return PRE_NONE;
        bson_init(out);
        bson_append_document_begin(out, "a", 1, &c);
        BSON_APPEND_UTF8(&c, "$ne", tv.attr);
        bson_append_document_end(out, &c);
        return PRE_EXACT;
    }
    if (tv.op == QO_EXISTS && plain) {
        bson_init(out);
        BSON_APPEND_UTF8(out, "a", tv.attr);
        return PRE_EXACT;
    }
    if (plain && term_value_pre(q, &tv, out) == PRE_SOME)
        return PRE_SOME;
    /* every other term (values, paths into sub-attributes and compound
     * values, linked entities, !=, !~=) needs the attribute itself */
    bson_init(out);
    BSON_APPEND_UTF8(out, "a", tv.attr);
    return PRE_SOME;
}

/* The prefilter of q into out (initialized here unless PRE_NONE). AND keeps
 * the children it can translate; OR only when it can translate them all. */
static pre_t q_pre(const q_expr_t *q, bson_t *out, unsigned depth)
{
    q_kind_t  k = q_node_kind(q);
    size_t    n = k == QK_TERM ? 0 : q_node_count(q);
    clauses_t cl = { .n = 0 };
    pre_t     r = PRE_EXACT;

    if (k == QK_TERM)
        return q_term_pre(q, out);
    if (depth > 16 || !n)
        return PRE_NONE;
    bson_init(out);
    bson_append_array_begin(out, k == QK_AND ? "$and" : "$or", -1, &cl.arr);
    for (size_t i = 0; i < n; i++) {
        bson_t c;
        pre_t  ci = q_pre(q_node_child(q, i), &c, depth + 1);

        if (ci == PRE_NONE) {
            r = PRE_SOME;
            if (k == QK_OR) {
                cl.n = 0;
                break;
            }
            continue;
        }
        if (ci == PRE_SOME)
            r = PRE_SOME;
        clause_add(&cl, &c);
        bson_destroy(&c);
    }
    bson_append_array_end(out, &cl.arr);
    if (!cl.n) {
        bson_destroy(out);
        return PRE_NONE;
    }
    return r;
}

/* ------------------------------------------------------------ scopeQ */

static bool scope_pre(const void *node, bson_t *out, unsigned depth)
{
    size_t    n;
    clauses_t cl = { .n = 0 };
    char      re[1024];

    switch (scopeq_node(node, &n)) {
    case SQK_PATTERN:
        if (!scopeq_regex(node, re, sizeof re))
            return false;
        bson_init(out);
        BSON_APPEND_REGEX(out, "s", re, "");
        return true;
    case SQK_AND:
    case SQK_OR:
        break;
    }
    if (depth > 32 || !n)
        return false;
    bson_init(out);
    bson_append_array_begin(out, scopeq_node(node, NULL) == SQK_AND ? "$and" : "$or", -1, &cl.arr);
    for (size_t i = 0; i < n; i++) {
        bson_t c;

        if (!scope_pre(scopeq_child(node, i), &c, depth + 1)) {
            if (scopeq_node(node, NULL) == SQK_OR) {
                cl.n = 0;
                break;
            }
            continue;
        }
        clause_add(&cl, &c);
        bson_destroy(&c);
    }
    bson_append_array_end(out, &cl.arr);
    if (!cl.n) {
        bson_destroy(out);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ ids, selectors */

/* {_id: {$regex: pattern}} into d when the pattern is portable. */
static bool id_regex(bson_t *d, const void *code)
{
    size_t      len;
    const char *src = filter_regex_source(code, &len);

    if (!src || !mgc_regex_portable(src, len, false))
        return false;
    bson_t c;
    bson_append_document_begin(d, "_id", 3, &c);
    bson_append_regex_w_len(&c, "$regex", 6, src, (int)len, "");
    bson_append_document_end(d, &c);
    return true;
}

/* One selector's {_id, t} into out; *exact when nothing is left to the broker.
 * false: it narrows nothing (then the OR of the selectors narrows nothing). */
static bool selector_pre(const entity_selector_t *s, bson_t *out, bool *exact)
{
    bool any = false;

    *exact = true;
    bson_init(out);
    if (s->id) {
        BSON_APPEND_UTF8(out, "_id", s->id);
        any = true;
        if (s->id_pattern)
            *exact = false;     /* both given: the pattern is the broker's */
    } else if (s->id_pattern) {
        if (id_regex(out, s->id_pattern))
            any = true;
        else
            *exact = false;
    }
    if (s->types) {
        const char *const *tv;
        size_t             n = typesel_types(s->types, &tv);

        if (n) {
            append_strs(out, "t", tv, n);
            any = true;
        } else {
            *exact = false;
        }
    }
    if (!any) {
        bson_destroy(out);
        *exact = false;
    }
    return any;
}

/* ------------------------------------------------------------ geo
 *
 * Every server: the box prefilter on plain numbers (g.hHASH: the box around
 * the value's instances intersects the query's box, geoq_bbox). A server
 * with 2dsphere (geo2d) also gets, for the documents that hold a GeoJSON
 * Point in gj.hHASH (doc.c: a GeoProperty of one instance that is a Point),
 * a spherical condition the 2dsphere index serves:
 *   near;maxDistance from a Point: $geoWithin $centerSphere, the distance
 *     over the radius the broker's haversine uses, a millionth larger;
 *   the other georels the box bounds (within, contains, intersects, equals,
 *     overlaps; near from another geometry: its distance box): $geoWithin
 *     a Polygon around the query's box, GEO_MARGIN degrees wider on every
 *     side, its east-west edges cut every GEO_STEP degrees.
 * Why that polygon and not the query's geometry: MongoDB's edges are great
 * circles, GEOS's (the broker's judge) straight lines in lon/lat, so near an
 * edge the two disagree; a great circle between two points GEO_STEP apart
 * on one parallel leaves it by at most about 0.0011 degrees (poleward), so
 * the polygon's spherical inside holds the planar box, and a Point that
 * matches in the broker is in it: a superset, as the rule needs. A box the
 * polygon cannot stand for (wider than GEO_SPAN_MAX, past +-GEO_LAT_MAX, or
 * across +-180) and disjoint / near;minDistance (unbounded) keep the box
 * prefilter alone. The broker then judges every candidate (GEOS). */
#define GEO_MARGIN   0.01
#define GEO_STEP     1.0
#define GEO_SPAN_MAX 120.0
#define GEO_LAT_MAX  85.0
#define GEO_CAP_MAX  1.5            /* radians: a larger cap is no use to an index */

static void geo_pos(bson_t *arr, uint32_t i, double x, double y)
{
    char        nk[16];
    const char *kp;
    bson_t      p;

    key_of(nk, &kp, i);
    bson_append_array_begin(arr, kp, -1, &p);
    bson_append_double(&p, "0", 1, x);
    bson_append_double(&p, "1", 1, y);
    bson_append_array_end(arr, &p);
}

/* The spherical condition on gj.KEY into c ({$geoWithin: ...}); false: none. */
static bool geo_sphere(const geoq_t *g, const double qb[4], bool bounded, bson_t *c)
{
    double x, y, d, r;
    bson_t w, cs, pt, geom, rings, ring;

    if (geoq_near_point(g, &x, &y, &d, &r)) {
        double rad = d / r * (1 + 1e-6) + 1e-9;

        if (!(rad < GEO_CAP_MAX) || x < -180 || x > 180 || y < -90 || y > 90)
            return false;
        bson_init(c);
        bson_append_document_begin(c, "$geoWithin", 10, &w);
        bson_append_array_begin(&w, "$centerSphere", 13, &cs);
        bson_append_array_begin(&cs, "0", 1, &pt);
        bson_append_double(&pt, "0", 1, x);
        bson_append_double(&pt, "1", 1, y);
        bson_append_array_end(&cs, &pt);
        bson_append_double(&cs, "1", 1, rad);
        bson_append_array_end(&w, &cs);
        bson_append_document_end(c, &w);
        return true;
    }
    if (!bounded)
        return false;
    double x0 = qb[0] - GEO_MARGIN, y0 = qb[1] - GEO_MARGIN, x1 = qb[2] + GEO_MARGIN, y1 = qb[3] + GEO_MARGIN;

    if (!(x0 >= -180 && x1 <= 180 && y0 >= -GEO_LAT_MAX && y1 <= GEO_LAT_MAX && x1 - x0 <= GEO_SPAN_MAX))
        return false;
    uint32_t n = (uint32_t)((x1 - x0) / GEO_STEP) + 1, k = 0;

    bson_init(c);
    bson_append_document_begin(c, "$geoWithin", 10, &w);
    bson_append_document_begin(&w, "$geometry", 9, &geom);
    BSON_APPEND_UTF8(&geom, "type", "Polygon");
    bson_append_array_begin(&geom, "coordinates", 11, &rings);
    bson_append_array_begin(&rings, "0", 1, &ring);
    for (uint32_t i = 0; i < n; i++)            /* the south edge, west to east */
        geo_pos(&ring, k++, x0 + (x1 - x0) * i / n, y0);
    geo_pos(&ring, k++, x1, y0);
    for (uint32_t i = 0; i < n; i++)            /* the north edge, east to west */
        geo_pos(&ring, k++, x1 - (x1 - x0) * i / n, y1);
    geo_pos(&ring, k++, x0, y1);
    geo_pos(&ring, k++, x0, y0);                /* closed */
    bson_append_array_end(&rings, &ring);
    bson_append_array_end(&geom, &rings);
    bson_append_document_end(&w, &geom);
    bson_append_document_end(c, &w);
    return true;
}

/* The box prefilter on g.KEY into d. */
static void geo_box(bson_t *d, const char *key, const double box[4])
{
    char field[40];

    /* the box [x0,y0,x1,y1] of the value intersects the query's */
    snprintf(field, sizeof field, "g.%s.x0", key);
    append_cmp(d, field, "$lte", box[2]);
    snprintf(field, sizeof field, "g.%s.x1", key);
    append_cmp(d, field, "$gte", box[0]);
    snprintf(field, sizeof field, "g.%s.y0", key);
    append_cmp(d, field, "$lte", box[3]);
    snprintf(field, sizeof field, "g.%s.y1", key);
    append_cmp(d, field, "$gte", box[1]);
}

/* The geo prefilter: the box's terms at the top of q, or with geo2d
 * "{gj.KEY: sphere} OR {no gj.KEY, the box}" as a clause of cl. */
static void geo_pre(const geoq_t *g, bool geo2d, bson_t *q, clauses_t *cl)
{
    double      box[4] = { 0, 0, 0, 0 };
    char        key[24], field[40];
    const char *prop = geoq_property(g);
    bool        bounded;
    bson_t      sph, or, el, a, b, ex;

    if (!prop)
        return;
    bounded = geoq_bbox(g, box);
    mgc_geo_key(key, prop);
    if (!geo2d || !geo_sphere(g, box, bounded, &sph)) {
        if (bounded)
            geo_box(q, key, box);
        return;
    }
    snprintf(field, sizeof field, "gj.%s", key);
    bson_init(&or);
    bson_append_array_begin(&or, "$or", 3, &el);
    bson_append_document_begin(&el, "0", 1, &a);
    BSON_APPEND_DOCUMENT(&a, field, &sph);
    bson_append_document_end(&el, &a);
    bson_append_document_begin(&el, "1", 1, &b);   /* no Point there: the box */
    bson_append_document_begin(&b, field, -1, &ex);
    BSON_APPEND_BOOL(&ex, "$exists", false);
    bson_append_document_end(&b, &ex);
    if (bounded)
        geo_box(&b, key, box);
    bson_append_document_end(&el, &b);
    bson_append_array_end(&or, &el);
    clause_add(cl, &or);
    bson_destroy(&or);
    bson_destroy(&sph);
}

/* ------------------------------------------------------------ the filter */

bool mgc_filter(const entity_filter_t *f, bool geo2d, bson_t *q)
{
    bool      exact = true;
    clauses_t cl = { .n = 0 };
    bson_t    c;

    bson_init(q);
    if (!f)
        return true;
    bson_init(&cl.arr);
    if (f->n_ids)
        append_strs(q, "_id", f->ids, f->n_ids);
    if (f->types) {
        const char *const *tv;
        size_t             n = typesel_types(f->types, &tv);

        if (n)
            append_strs(q, "t", tv, n);
        else
            exact = false;
    }
    if (f->n_attrs)
        append_strs(q, "a", f->attrs, f->n_attrs);
    if (f->geo)
        geo_pre(f->geo, geo2d, q, &cl);
    exact = exact && !f->geo;
    /* the rest under one $and: its fields may repeat _id and the top-level ones */
    if (f->id_pattern) {
        bson_init(&c);
        if (id_regex(&c, f->id_pattern))
            clause_add(&cl, &c);
        else
            exact = false;
        bson_destroy(&c);
    }
    if (f->n_sel) {
        bson_t    or;
        clauses_t sl = { .n = 0 };
        bool      all = true;

        bson_init(&or);
        bson_init(&sl.arr);
        for (size_t i = 0; i < f->n_sel; i++) {
            bool e;

            if (!selector_pre(&f->sel[i], &c, &e)) {
                all = false;
                break;
            }
            exact = exact && e;
            clause_add(&sl, &c);
            bson_destroy(&c);
        }
        bson_append_array(&or, "$or", 3, &sl.arr);
        bson_destroy(&sl.arr);
        if (all)
            clause_add(&cl, &or);
        else
            exact = false;
        bson_destroy(&or);
    }
    if (f->q) {
        pre_t r = q_pre(f->q, &c, 0);

        if (r != PRE_NONE) {
            clause_add(&cl, &c);
            bson_destroy(&c);
        }
        if (r != PRE_EXACT)
            exact = false;
    }
    if (f->scope) {
        const void *root = scopeq_root(f->scope);

        /* documents written before s existed have none: the broker judges them */
        if (root && scope_pre(root, &c, 0)) {
            bson_t or, el, ex;

            bson_init(&or);
            bson_append_array_begin(&or, "$or", 3, &el);
            BSON_APPEND_DOCUMENT(&el, "0", &c);
            bson_append_document_begin(&el, "1", 1, &ex);
            {
                bson_t e2;
                bson_append_document_begin(&ex, "s", 1, &e2);
                BSON_APPEND_BOOL(&e2, "$exists", false);
                bson_append_document_end(&ex, &e2);
            }
            bson_append_document_end(&el, &ex);
            bson_append_array_end(&or, &el);
            clause_add(&cl, &or);
            bson_destroy(&or);
            bson_destroy(&c);
        }
        exact = false;
    }
    if (cl.n)
        bson_append_array(q, "$and", 4, &cl.arr);
    bson_destroy(&cl.arr);
    return exact;
}
