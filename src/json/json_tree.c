/*
 * json_tree.c - reading, comparing, building and copying JSON trees.
 *
 * Trees are singly linked lists of children (json.h), so lookups are linear
 * scans: objects in NGSI-LD payloads have a handful to a few dozen members,
 * where a scan beats any index. json_equal on two objects whose members are
 * in different orders is O(n*m); objects in the same order compare in O(n).
 */
#include "json.h"

#include <stdlib.h>
#include <string.h>

/* Member names compare as strings; a NULL name (a member added without
 * one, a programming error) equals only another NULL name. */
static inline bool key_eq(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return a[0] == b[0] && strcmp(a, b) == 0;
}

/* ------------------------------------------------------------ reading */

json_t *json_get(const json_t *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT || !key)
        return NULL;
    for (json_t *c = obj->child; c; c = c->next)
        if (c->key && c->key[0] == key[0] && strcmp(c->key, key) == 0)
            return c;
    return NULL;
}

double json_number(const json_t *n)
{
    if (!n || n->type != JSON_NUMBER)
        return 0.0;
    return n->is_int ? (double)n->i : n->num;
}

/* ------------------------------------------------------------ equality */

static bool num_equal(const json_t *a, const json_t *b)
{
    if (a->is_int && b->is_int)
        return a->i == b->i;
    if (!a->is_int && !b->is_int)
        return a->num == b->num;
    /* one integer, one double: equal only when the double is exactly it */
    {
        int64_t i = a->is_int ? a->i : b->i;
        double  d = a->is_int ? b->num : a->num;
        if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
            return false;
        return (double)(int64_t)d == d && (int64_t)d == i;
    }
}

static bool obj_equal(const json_t *a, const json_t *b)
{
    const json_t *x, *y;
    uint64_t      small[8];
    uint64_t     *used = small;
    size_t        words = ((size_t)b->len + 63) / 64;
    bool          ok = true;
    uint32_t      i;

    /* same order: the common case */
    for (x = a->child, y = b->child; x && y; x = x->next, y = y->next)
        if (!key_eq(x->key, y->key) || !json_equal(x, y))
            break;
    if (!x && !y)
        return true;

    /* any order: greedy matching is exact since equality is an equivalence */
    if (words > CR_ARRAY_LEN(small)) {
        used = cr_xcalloc(words, sizeof *used);
    } else {
        memset(small, 0, sizeof small);
    }
    for (x = a->child; x && ok; x = x->next) {
        for (y = b->child, i = 0; y && i < words * 64; y = y->next, i++) {
            if (used[i / 64] & (1ULL << (i % 64)))
                continue;
            if (key_eq(x->key, y->key) && json_equal(x, y)) {
                used[i / 64] |= 1ULL << (i % 64);
                break;
            }
        }
        if (!y || i >= words * 64)
            ok = false;
    }
    if (used != small)
        free(used);
    return ok;
}

bool json_equal(const json_t *a, const json_t *b)
{
    if (a == b)
        return true;
    if (!a || !b || a->type != b->type)
        return false;
    switch (a->type) {
    case JSON_NULL:
    case JSON_TRUE:
    case JSON_FALSE:
        return true;
    case JSON_NUMBER:
        return num_equal(a, b);
    case JSON_STRING:
        return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    case JSON_ARRAY: {
        const json_t *x, *y;
        if (a->len != b->len)
            return false;
        for (x = a->child, y = b->child; x && y; x = x->next, y = y->next)
            if (!json_equal(x, y))
                return false;
        return !x && !y;
    }
    case JSON_OBJECT:
        if (a->len != b->len)
            return false;
        return obj_equal(a, b);
    default:
        return false;
    }
}

/* ------------------------------------------------------------ building */

json_t *json_new(arena_t *a, json_type_t t)
{
    json_t *n = arena_alloc(a, sizeof *n);
    memset(n, 0, sizeof *n);
    n->type = (uint8_t)t;
    return n;
}

json_t *json_new_string(arena_t *a, const char *s)
{
    json_t *n = json_new(a, JSON_STRING);
    size_t  len = s ? strlen(s) : 0;
    n->str = s ? s : "";
    n->len = (uint32_t)len;
    return n;
}

json_t *json_new_stringn(arena_t *a, const char *s, size_t len)
{
    json_t *n = json_new(a, JSON_STRING);
    n->str = arena_strndup(a, s ? s : "", s ? len : 0);
    n->len = (uint32_t)(s ? len : 0);
    return n;
}

json_t *json_new_number(arena_t *a, double v)
{
    json_t *n = json_new(a, JSON_NUMBER);
    n->num = v;
    return n;
}

json_t *json_new_int(arena_t *a, int64_t v)
{
    json_t *n = json_new(a, JSON_NUMBER);
    n->is_int = 1;
    n->i = v;
    return n;
}

json_t *json_new_bool(arena_t *a, bool v)
{
    return json_new(a, v ? JSON_TRUE : JSON_FALSE);
}

void json_add(json_t *container, const char *key, json_t *child)
{
    json_t **link;

    if (!container || !child)
        return;
    child->key = key;
    child->next = NULL;
    for (link = &container->child; *link; link = &(*link)->next)
        ;
    *link = child;
    container->len++;
}

void json_push(json_t *container, json_t **tail, const char *key, json_t *child)
{
    if (!container || !child)
        return;
    child->key = key;
    child->next = NULL;
    if (*tail)
        (*tail)->next = child;
    else
        container->child = child;
    *tail = child;
    container->len++;
}

json_t *json_remove(json_t *obj, const char *key)
{
    json_t **link;

    if (!obj || obj->type != JSON_OBJECT || !key)
        return NULL;
    for (link = &obj->child; *link; link = &(*link)->next) {
        json_t *c = *link;
        if (key_eq(c->key, key)) {
            *link = c->next;
            c->next = NULL;
            obj->len--;
            return c;
        }
    }
    return NULL;
}

json_t *json_clone(arena_t *a, const json_t *n)
{
    json_t *c;

    if (!n)
        return NULL;
    c = arena_alloc(a, sizeof *c);
    *c = *n;
    c->next = NULL;
    c->key = n->key ? arena_strdup(a, n->key) : NULL;
    switch (n->type) {
    case JSON_STRING:
        c->str = arena_strndup(a, n->str, n->len);
        break;
    case JSON_ARRAY:
    case JSON_OBJECT: {
        json_t **link = &c->child;
        for (const json_t *x = n->child; x; x = x->next) {
            json_t *y = json_clone(a, x);
            *link = y;
            link = &y->next;
        }
        *link = NULL;
        break;
    }
    default:
        break;
    }
    return c;
}
