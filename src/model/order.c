/*
 * order.c - the NGSI-LD Entity Ordering Language (4.23) of orderBy, with
 * collation, orderFrom and orderGeometry (Table 6.4.3.2-1, OrderingParams of
 * 5.2.43): parsed once per request into an inspectable description
 * (entity_order_t, model.h) that a backend translates (MongoDB's sort) or
 * evaluates with order_keys() / order_keys_cmp() (corDB's bounded heap).
 *
 *   OrderingTerm = AttrName *1(";" ("asc" / "desc" / "dist-asc" / "dist-desc"))
 *                  *("," OrderingTerm)
 *
 * AttrName is a path of 4.9 (attr.sub.observedAt, attr[key.key]) read by
 * q's own parser (a lone path is a q existence term), so that q and orderBy
 * accept the same paths; id, type, scope, createdAt and modifiedAt name the
 * entity members. Values of different data types order as 4.23.2 says:
 * numbers, strings, objects, arrays, booleans, times, dates, date-times,
 * then null and an absent value. Strings compare in the ICU collation asked
 * for (collation, an RFC 6067 tag; ICU's root order when none is given),
 * ids and types by code point (they are IRIs). dist-asc / dist-desc order
 * GeoProperties by their spherical (haversine) distance to the geometry of
 * orderFrom / orderGeometry: the least distance between their vertices; an
 * attribute that is no GeoProperty comes after, ordered by value.
 * Decisions (doc/api.md): null and absent values come last in both
 * directions; desc reverses everything else; entities equal on every term
 * keep creation order (createdAt, then id), so pages are stable.
 *
 * Collators are opened once per tag and shared (ICU collators are
 * thread-safe for comparison), at most ORDER_MAX_COLLATORS of them.
 */
#include "model.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unicode/ucol.h>
#include <unicode/uloc.h>

#define ORDER_MAX_COLLATORS 32
#define ORDER_MAX_TEXT      4096

/* 4.23.2: the comparison order of data types. */
enum {
    RK_GEO = 0,        /* dist-*: a GeoProperty (by distance) */
    RK_NUM, RK_STR, RK_OBJ, RK_ARR, RK_BOOL, RK_TIME, RK_DATE, RK_DATETIME,
    RK_NULL, RK_ABSENT
};

/* ------------------------------------------------------------ collators */

static pthread_mutex_t coll_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { char tag[64]; UCollator *c; } colls[ORDER_MAX_COLLATORS];
static size_t n_colls;

/* The collator of a BCP 47 tag (NULL: the root one); NULL when the tag is not one. */
static const UCollator *collator(const char *tag, problem_t *p)
{
    const char *t = tag ? tag : "und";
    UCollator  *c = NULL;

    if (strlen(t) >= sizeof colls[0].tag) {
        problem_set(p, PB_BAD_REQUEST_DATA, "collation '%.80s...' is too long", t);
        return NULL;
    }
    pthread_mutex_lock(&coll_mu);
    for (size_t i = 0; i < n_colls && !c; i++)
        if (!strcmp(colls[i].tag, t))
            c = colls[i].c;
    pthread_mutex_unlock(&coll_mu);
    if (c)
        return c;

    char       loc[ULOC_FULLNAME_CAPACITY];
    int32_t    parsed = 0;
    UErrorCode st = U_ZERO_ERROR;
    uloc_forLanguageTag(t, loc, sizeof loc, &parsed, &st);
    if (U_FAILURE(st) || parsed != (int32_t)strlen(t) || st == U_STRING_NOT_TERMINATED_WARNING) {
        problem_set(p, PB_BAD_REQUEST_DATA, "collation '%s' is not an ICU collation (RFC 6067) (5.7.2.4)", t);
        return NULL;
    }
    st = U_ZERO_ERROR;
    c = ucol_open(loc, &st);
    if (U_FAILURE(st) || !c) {
        problem_set(p, PB_BAD_REQUEST_DATA, "collation '%s' is not an ICU collation (RFC 6067) (5.7.2.4)", t);
        return NULL;
    }
    pthread_mutex_lock(&coll_mu);
    for (size_t i = 0; i < n_colls; i++)
        if (!strcmp(colls[i].tag, t)) {          /* another thread opened it meanwhile */
            ucol_close(c);
            c = colls[i].c;
            pthread_mutex_unlock(&coll_mu);
            return c;
        }
    if (n_colls < ORDER_MAX_COLLATORS) {
        snprintf(colls[n_colls].tag, sizeof colls[0].tag, "%s", t);
        colls[n_colls++].c = c;
        pthread_mutex_unlock(&coll_mu);
        return c;
    }
    pthread_mutex_unlock(&coll_mu);
    ucol_close(c);
    problem_set(p, PB_OPERATION_NOT_SUPPORTED, "collation '%s': this broker holds at most %d collations at once",
                t, ORDER_MAX_COLLATORS);
    return NULL;
}

/* --------------------------------------------------------------- parsing */

static bool member_term(const char *s, order_key_kind_t *k)
{
    static const struct { const char *name; order_key_kind_t k; } m[] = {
        {"id", ORDER_ID}, {"@id", ORDER_ID}, {"type", ORDER_TYPE}, {"@type", ORDER_TYPE},
        {"scope", ORDER_SCOPE}, {"createdAt", ORDER_CREATED_AT}, {"modifiedAt", ORDER_MODIFIED_AT},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (!strcmp(s, m[i].name)) {
            *k = m[i].k;
            return true;
        }
    return false;
}

/* The vertices of a GeoJSON coordinates array, as [lon, lat] pairs. */
static void vertices(const json_t *c, double *out, size_t *n, size_t cap)
{
    if (!json_is_array(c))
        return;
    if (c->len >= 2 && json_is_number(c->child) && json_is_number(c->child->next)) {
        if (*n < cap) {
            out[2 * *n]     = json_number(c->child);
            out[2 * *n + 1] = json_number(c->child->next);
            (*n)++;
        }
        return;
    }
    json_foreach(el, c)
        vertices(el, out, n, cap);
}

static size_t count_vertices(const json_t *c)
{
    if (!json_is_array(c))
        return 0;
    if (c->len >= 2 && json_is_number(c->child) && json_is_number(c->child->next))
        return 1;
    size_t n = 0;
    json_foreach(el, c)
        n += count_vertices(el);
    return n;
}

static bool parse_from(arena_t *a, entity_order_t *o, const order_params_t *op, problem_t *p)
{
    const char *gt = op->geometry ? op->geometry : "Point";
    char        err[128];

    static const char *const types[] = {"Point", "MultiPoint", "LineString", "MultiLineString", "Polygon",
                                        "MultiPolygon"};
    bool known = false;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        known = known || !strcmp(gt, types[i]);
    if (!known)
        return problem_set(p, PB_BAD_REQUEST_DATA, "orderGeometry '%.64s' is not a GeoJSON geometry type other "
                           "than GeometryCollection (5.2.43)", gt);
    char   *text = arena_printf(a, "{\"type\":\"%s\",\"coordinates\":%s}", gt, op->from);
    json_t *g = json_parse_copy(a, text, strlen(text), NULL, err, sizeof err);
    if (!g || !json_is_array(json_get(g, "coordinates")))
        return problem_set(p, PB_BAD_REQUEST_DATA, "orderFrom must be GeoJSON coordinates (4.10): %s",
                           g ? "not an array" : err);
    if (!geo_validate(g, p))
        return false;
    const json_t *c = json_get(g, "coordinates");
    size_t        n = count_vertices(c);
    o->from = arena_alloc(a, (n ? n : 1) * 2 * sizeof *o->from);
    vertices(c, o->from, &o->n_from, n);
    o->geometry = gt;
    return true;
}

static bool parse_term(arena_t *a, const char *s, size_t l, const ld_context_t *ctx, order_term_t *t,
                       problem_t *p)
{
    const char *semi = memchr(s, ';', l);
    size_t      nl   = semi ? (size_t)(semi - s) : l;
    char       *name = arena_strndup(a, s, nl);

    t->text = arena_strndup(a, s, l);
    t->dir  = ORDER_ASC;
    if (semi) {
        const char *d  = semi + 1;
        size_t      dl = l - nl - 1;
        if (dl == 3 && !memcmp(d, "asc", 3)) t->dir = ORDER_ASC;
        else if (dl == 4 && !memcmp(d, "desc", 4)) t->dir = ORDER_DESC;
        else if (dl == 8 && !memcmp(d, "dist-asc", 8)) t->dir = ORDER_DIST_ASC;
        else if (dl == 9 && !memcmp(d, "dist-desc", 9)) t->dir = ORDER_DIST_DESC;
        else
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "orderBy '%s': the direction must be asc, desc, dist-asc or dist-desc (4.23.3)",
                               t->text);
    }
    if (!*name)
        return problem_set(p, PB_BAD_REQUEST_DATA, "orderBy '%s': an attribute name is expected (4.23.3)", t->text);
    if (member_term(name, &t->key)) {
        if (t->dir >= ORDER_DIST_ASC)
            return problem_set(p, PB_BAD_REQUEST_DATA, "orderBy '%s': only a GeoProperty orders by distance "
                               "(4.23.1)", t->text);
        return true;
    }
    /* an attribute path: q's grammar, as a lone existence term */
    problem_t qp = {0};
    q_expr_t *q  = strpbrk(name, ";|()!<>=~,{ \"'") ? NULL : q_parse(a, name, ctx, &qp);
    q_term_view_t v;
    if (!q || !q_term_get(q, &v) || v.op != QO_EXISTS)
        return problem_set(p, PB_BAD_REQUEST_DATA, "orderBy '%s' is not an attribute path (4.9, 4.23.3)%s%s",
                           t->text, qp.detail[0] ? ": " : "", qp.detail);
    t->key  = ORDER_ATTR;
    t->path = q;
    t->attr = v.attr;
    const char    **names = arena_alloc(a, (v.n_steps ? v.n_steps : 1) * sizeof *names);
    uint8_t        *kinds = arena_alloc(a, (v.n_steps ? v.n_steps : 1) * sizeof *kinds);
    for (size_t i = 0; i < v.n_steps; i++) {
        q_memberkind_t mk = 0;
        names[i] = q_term_step(q, i, &mk);
        kinds[i] = (uint8_t)mk;
    }
    t->step_names = names;
    t->step_kinds = kinds;
    t->n_steps    = v.n_steps;
    t->keys       = v.keys;
    t->n_keys     = v.n_keys;
    return true;
}

entity_order_t *order_parse(arena_t *a, const order_params_t *op, const ld_context_t *ctx, problem_t *p)
{
    const char *text = op->order_by;

    if (!text || !*text) {
        problem_set(p, PB_BAD_REQUEST_DATA, "orderBy must not be empty (4.23.3)");
        return NULL;
    }
    if (strlen(text) > ORDER_MAX_TEXT) {
        problem_set(p, PB_BAD_REQUEST_DATA, "orderBy is longer than %d bytes", ORDER_MAX_TEXT);
        return NULL;
    }
    size_t n = 1;
    for (const char *c = text; *c; c++)
        n += *c == ',';
    if (n > ORDER_MAX_TERMS) {
        problem_set(p, PB_BAD_REQUEST_DATA, "orderBy has more than %d terms", ORDER_MAX_TERMS);
        return NULL;
    }
    entity_order_t *o = arena_calloc(a, sizeof *o);
    order_term_t   *t = arena_calloc(a, n * sizeof *t);
    bool            dist = false;
    for (const char *s = text;;) {
        size_t l = strcspn(s, ",");
        if (!parse_term(a, s, l, ctx, &t[o->n], p))
            return NULL;
        dist = dist || t[o->n].dir >= ORDER_DIST_ASC;
        o->n++;
        if (!s[l])
            break;
        s += l + 1;
    }
    o->terms = t;
    if (dist && !op->from) {
        problem_set(p, PB_BAD_REQUEST_DATA, "orderBy by distance needs orderFrom, the reference geometry (5.7.2.4)");
        return NULL;
    }
    if (!dist && (op->from || op->geometry)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "orderFrom and orderGeometry go with an orderBy by distance "
                    "(dist-asc, dist-desc) (4.23.3)");
        return NULL;
    }
    if (dist && !parse_from(a, o, op, p))
        return NULL;
    o->collation = op->collation;
    if (!(o->collator = collator(op->collation, p)))
        return NULL;
    return o;
}

/* -------------------------------------------------------------- the keys */

static const cr_attr_t *sub_attr(const cr_attr_t *a, const char *name)
{
    for (uint16_t i = 0; i < a->n_sub; i++)
        if (a->sub[i].name == name)
            return &a->sub[i];
    return NULL;
}

static void key_time(order_key_t *k, int64_t us, uint8_t rank)
{
    if (us == CR_NO_TIME) {
        k->rank = RK_ABSENT;
        return;
    }
    k->rank = rank;
    k->us   = us;
}

static void key_str(order_key_t *k, const char *s, size_t len)
{
    if (!s) {
        k->rank = RK_ABSENT;
        return;
    }
    k->rank = RK_STR;
    k->s    = s;
    k->len  = len;
}

static bool type_is(const char *t, const char *name)
{
    size_t tl = strlen(t), nl = strlen(name);
    return tl >= nl && !strcmp(t + tl - nl, name) && (tl == nl || t[tl - nl - 1] == '/' || t[tl - nl - 1] == ':');
}

/* A JSON value's key (4.23.2). */
static void key_json(order_key_t *k, const json_t *v)
{
    if (!v) {
        k->rank = RK_ABSENT;
        return;
    }
    switch (v->type) {
    case JSON_NUMBER: k->rank = RK_NUM; k->num = json_number(v); return;
    case JSON_STRING: key_str(k, v->str, v->len); return;
    case JSON_TRUE:
    case JSON_FALSE:  k->rank = RK_BOOL; k->b = v->type == JSON_TRUE; return;
    case JSON_NULL:   k->rank = RK_NULL; return;
    case JSON_ARRAY:  k->rank = RK_ARR; k->j = v; return;
    default: break;
    }
    const json_t *ty = json_get(v, "@type"), *val = json_get(v, "@value");
    if (json_is_string(ty) && val) {           /* a typed value: {"@type": "DateTime", "@value": ...} */
        int64_t us;
        if (json_is_string(val) && type_is(ty->str, "DateTime") && cr_datetime_parse(val->str, &us))
            return key_time(k, us, RK_DATETIME);
        if (json_is_string(val) && type_is(ty->str, "Date") && cr_date_parse(val->str, &us))
            return key_time(k, us, RK_DATE);
        if (json_is_string(val) && type_is(ty->str, "Time") && cr_time_parse(val->str, &us))
            return key_time(k, us, RK_TIME);
        return key_json(k, val);
    }
    k->rank = RK_OBJ;
    k->j    = v;
}

/* The spherical distance in metres between two [lon, lat] points. */
static double haversine(const double *a, const double *b)
{
    const double r = 6371008.8, rad = M_PI / 180.0;
    double       dlat = (b[1] - a[1]) * rad, dlon = (b[0] - a[0]) * rad;
    double       h = sin(dlat / 2) * sin(dlat / 2) + cos(a[1] * rad) * cos(b[1] * rad) * sin(dlon / 2) * sin(dlon / 2);
    return 2 * r * asin(sqrt(h < 1 ? h : 1));
}

static double min_dist(const entity_order_t *o, const json_t *c)
{
    if (!json_is_array(c))
        return INFINITY;
    if (c->len >= 2 && json_is_number(c->child) && json_is_number(c->child->next)) {
        double pt[2] = {json_number(c->child), json_number(c->child->next)}, best = INFINITY;
        for (size_t i = 0; i < o->n_from; i++) {
            double d = haversine(pt, &o->from[2 * i]);
            if (d < best)
                best = d;
        }
        return best;
    }
    double best = INFINITY;
    json_foreach(el, c) {
        double d = min_dist(o, el);
        if (d < best)
            best = d;
    }
    return best;
}

static void key_attr(const entity_order_t *o, const order_term_t *t, const cr_entity_t *e, order_key_t *k)
{
    const cr_attr_t *a = NULL;

    for (uint16_t i = 0; i < e->n_attrs; i++)      /* the default instance, else the first */
        if (e->attrs[i].name == t->attr) {
            if (!e->attrs[i].dataset_id) {
                a = &e->attrs[i];
                break;
            }
            if (!a)
                a = &e->attrs[i];
        }
    if (!a) {
        k->rank = RK_ABSENT;
        return;
    }
    if (!t->n_steps && !t->n_keys && json_is_number(a->value) && t->dir <= ORDER_DESC) {   /* the common case */
        k->rank = RK_NUM;
        k->num  = a->value->is_int ? (double)a->value->i : a->value->num;
        return;
    }
    for (size_t i = 0; i < t->n_steps; i++) {
        switch (t->step_kinds[i]) {
        case QMK_SUBATTR:
            if (!(a = sub_attr(a, t->step_names[i]))) {
                k->rank = RK_ABSENT;
                return;
            }
            continue;
        case QMK_OBSERVED_AT: return key_time(k, a->observed_at, RK_DATETIME);
        case QMK_CREATED_AT:  return key_time(k, a->created_at, RK_DATETIME);
        case QMK_MODIFIED_AT: return key_time(k, a->modified_at, RK_DATETIME);
        case QMK_UNIT_CODE:   return key_str(k, a->unit_code, a->unit_code ? strlen(a->unit_code) : 0);
        case QMK_DATASET_ID:  return key_str(k, a->dataset_id, a->dataset_id ? strlen(a->dataset_id) : 0);
        case QMK_OBJECT_TYPE: return key_str(k, a->object_type, a->object_type ? strlen(a->object_type) : 0);
        }
    }
    if (t->dir >= ORDER_DIST_ASC && a->kind == ATTR_GEOPROPERTY && !t->n_keys) {
        k->rank = RK_GEO;
        k->num  = min_dist(o, json_get(a->value, "coordinates"));
        return;
    }
    const json_t *val = a->value;
    for (size_t i = 0; i < t->n_keys && val; i++)
        val = json_get(val, t->keys[i]);
    key_json(k, val);
}

void order_keys(const entity_order_t *o, const cr_entity_t *e, order_key_t *keys)
{
    for (size_t i = 0; i < o->n; i++) {
        const order_term_t *t = &o->terms[i];
        order_key_t        *k = &keys[i];

        k->bytewise = false;
        switch (t->key) {
        case ORDER_ID:
            key_str(k, e->id, strlen(e->id));
            k->bytewise = true;
            break;
        case ORDER_TYPE: {
            const char *min = e->types[0];
            for (uint16_t j = 1; j < e->n_types; j++)
                if (strcmp(e->types[j], min) < 0)
                    min = e->types[j];
            key_str(k, min, strlen(min));
            k->bytewise = true;
            break;
        }
        case ORDER_SCOPE:       key_json(k, e->scope); break;
        case ORDER_CREATED_AT:  key_time(k, e->created_at, RK_DATETIME); break;
        case ORDER_MODIFIED_AT: key_time(k, e->modified_at, RK_DATETIME); break;
        case ORDER_ATTR:        key_attr(o, t, e, k); break;
        }
    }
}

/* ------------------------------------------------------------ comparison */

static int sign(double d) { return (d > 0) - (d < 0); }

static int cmp_str(const entity_order_t *o, const char *a, size_t al, const char *b, size_t bl, bool bytewise)
{
    if (!bytewise) {
        UErrorCode st = U_ZERO_ERROR;
        int        r  = ucol_strcollUTF8(o->collator, a, (int32_t)al, b, (int32_t)bl, &st);
        if (U_SUCCESS(st))
            return r;
    }
    int r = memcmp(a, b, al < bl ? al : bl);
    return r ? sign(r) : sign((double)al - (double)bl);
}

static int cmp_json(const entity_order_t *o, const json_t *a, const json_t *b);

static int cmp_key(const entity_order_t *o, const order_key_t *a, const order_key_t *b)
{
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    switch (a->rank) {
    case RK_GEO:
    case RK_NUM:      return sign(a->num - b->num);
    case RK_STR:      return cmp_str(o, a->s, a->len, b->s, b->len, a->bytewise);
    case RK_BOOL:     return (int)a->b - (int)b->b;
    case RK_TIME:
    case RK_DATE:
    case RK_DATETIME: return a->us < b->us ? -1 : a->us > b->us;
    case RK_OBJ:
    case RK_ARR:      return cmp_json(o, a->j, b->j);
    default:          return 0;
    }
}

/* Objects and arrays: member by member (name, then value), then the longer one last. */
static int cmp_json(const entity_order_t *o, const json_t *a, const json_t *b)
{
    const json_t *x = a->child, *y = b->child;

    for (; x && y; x = x->next, y = y->next) {
        if (x->key && y->key) {
            int r = strcmp(x->key, y->key);
            if (r)
                return sign(r);
        }
        order_key_t kx, ky;
        kx.bytewise = ky.bytewise = false;
        key_json(&kx, x);
        key_json(&ky, y);
        int r = cmp_key(o, &kx, &ky);
        if (r)
            return r;
    }
    return x ? 1 : y ? -1 : 0;
}

int order_keys_cmp(const entity_order_t *o, const order_key_t *ka, const cr_entity_t *ea, const order_key_t *kb,
                   const cr_entity_t *eb)
{
    for (size_t i = 0; i < o->n; i++) {
        const order_key_t *a = &ka[i], *b = &kb[i];
        bool               desc = o->terms[i].dir == ORDER_DESC || o->terms[i].dir == ORDER_DIST_DESC;
        int                r;

        if (a->rank >= RK_NULL || b->rank >= RK_NULL || (a->rank != b->rank && (a->rank == RK_GEO ||
                                                                                b->rank == RK_GEO)))
            /* null, then absent, last either way; by distance, GeoProperties first either way */
            r = a->rank == b->rank ? 0 : a->rank < b->rank ? -1 : 1;
        else
            r = desc ? -cmp_key(o, a, b) : cmp_key(o, a, b);
        if (r)
            return r;
    }
    if (ea->created_at != eb->created_at)
        return ea->created_at < eb->created_at ? -1 : 1;
    return sign(strcmp(ea->id, eb->id));
}

int order_compare(const entity_order_t *o, const cr_entity_t *a, const cr_entity_t *b)
{
    order_key_t ka[ORDER_MAX_TERMS], kb[ORDER_MAX_TERMS];

    order_keys(o, a, ka);
    order_keys(o, b, kb);
    return order_keys_cmp(o, ka, a, kb, b);
}
