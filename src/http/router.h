/*
 * router.h - private to http/: matches a decoded path against the route
 * table. Patterns are split into segments once, at start; matching walks the
 * segments of the request path, so it costs a few string compares.
 */
#ifndef CORAINE_HTTP_ROUTER_H
#define CORAINE_HTTP_ROUTER_H

#include "http.h"

typedef struct router router_t;

enum { ROUTE_OK = 0, ROUTE_NOT_FOUND, ROUTE_BAD_PATH };

router_t       *router_new(const http_route_t *routes, size_t n);
void            router_free(router_t *rt);
/* Matches r->path; fills r->pathv/npath (decoded); returns ROUTE_*. */
int             router_match(const router_t *rt, request_t *r, const http_route_t **out);
http_handler_fn router_handler(const http_route_t *route, int method);
/* "GET, POST" for the Allow header. */
void            router_allow(const http_route_t *route, char *buf, size_t len);

#endif
