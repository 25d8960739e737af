/*
 * router.c - path matching for the route table that api/ hands to http/.
 *
 * A pattern like "/ngsi-ld/v1/entities/{id}/attrs/{attrId}" becomes a list of
 * segments; "{...}" matches any one segment (empty too: "//"), which is then
 * percent-decoded into r->pathv. A trailing '/' on the request path is
 * tolerated. The first route that matches wins (the table has no overlaps).
 */
#include "router.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SEGS 8

typedef struct route_c {
    const http_route_t *route;
    const char         *seg[MAX_SEGS];   /* NULL entry = parameter */
    size_t              seglen[MAX_SEGS];
    int                 nseg;
} route_c;

struct router {
    route_c *r;
    size_t   n;
};

router_t *router_new(const http_route_t *routes, size_t n)
{
    router_t *rt = cr_xcalloc(1, sizeof *rt);
    rt->r = cr_xcalloc(n, sizeof *rt->r);
    rt->n = n;
    for (size_t i = 0; i < n; i++) {
        route_c    *c = &rt->r[i];
        const char *p = routes[i].pattern;
        c->route = &routes[i];
        while (*p == '/') p++;
        while (*p) {
            if (c->nseg >= MAX_SEGS) { free(rt->r); free(rt); return NULL; }
            const char *e = strchr(p, '/');
            size_t      l = e ? (size_t)(e - p) : strlen(p);
            c->seg[c->nseg] = (p[0] == '{') ? NULL : p;
            c->seglen[c->nseg] = l;
            c->nseg++;
            p += l;
            while (*p == '/') p++;
        }
    }
    return rt;
}

void router_free(router_t *rt)
{
    if (!rt) return;
    free(rt->r);
    free(rt);
}

int router_match(const router_t *rt, request_t *r, const http_route_t **out)
{
    const char *segs[MAX_SEGS + 1];
    size_t      lens[MAX_SEGS + 1];
    int         n = 0;
    const char *p = r->path;

    if (*p != '/') return ROUTE_NOT_FOUND;
    p++;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t      l = e ? (size_t)(e - p) : strlen(p);
        /* one trailing '/' is nothing; "//" inside the path is an empty
         * segment: it matches only a {param}, whose handler then refuses
         * the empty value (an empty entity id is a BadRequestData, not an
         * unknown resource) */
        if (l == 0 && (!e || e[1] == '\0')) break;
        if (n > MAX_SEGS) return ROUTE_NOT_FOUND;
        segs[n] = p;
        lens[n] = l;
        n++;
        p += l;
        if (*p == '/') p++;
    }
    for (size_t i = 0; i < rt->n; i++) {
        const route_c *c = &rt->r[i];
        if (c->nseg != n) continue;
        int k;
        for (k = 0; k < n; k++) {
            if (!c->seg[k]) continue;
            if (c->seglen[k] != lens[k] || memcmp(c->seg[k], segs[k], lens[k]) != 0) break;
        }
        if (k < n) continue;
        r->npath = 0;
        for (k = 0; k < n; k++) {
            if (c->seg[k]) continue;
            if (r->npath >= HTTP_MAX_PATH_PARAMS) return ROUTE_NOT_FOUND;
            char *v = arena_strndup(r->arena, segs[k], lens[k]);
            if (!http_url_decode(v)) return ROUTE_BAD_PATH;
            r->pathv[r->npath++] = v;
        }
        *out = c->route;
        return ROUTE_OK;
    }
    return ROUTE_NOT_FOUND;
}

http_handler_fn router_handler(const http_route_t *route, int method)
{
    switch (method) {
    case HM_GET: return route->get;
    case HM_POST: return route->post;
    case HM_PUT: return route->put;
    case HM_PATCH: return route->patch;
    case HM_DELETE: return route->del;
    }
    return NULL;
}

void router_allow(const http_route_t *route, char *buf, size_t len)
{
    static const struct { int m; const char *name; } ms[] = {
        {HM_GET, "GET"}, {HM_POST, "POST"}, {HM_PUT, "PUT"}, {HM_PATCH, "PATCH"}, {HM_DELETE, "DELETE"}};
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < CR_ARRAY_LEN(ms); i++) {
        if (!router_handler(route, ms[i].m)) continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", ms[i].name);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
}
