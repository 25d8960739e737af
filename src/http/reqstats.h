/*
 * reqstats.h - private to http/: the request counters behind /statistics and
 * /metrics, kept per thread (reqstats.c says why and how).
 */
#ifndef CORAINE_HTTP_REQSTATS_H
#define CORAINE_HTTP_REQSTATS_H

#include "http.h"

/* The route table the operations are named after (kept, not copied). */
void reqstats_init(const http_route_t *routes, size_t n_routes);
/* One answered request: route index (-1: none matched), method bit HM_* (0:
 * unknown), status, ns from arrival to the answer (< 0: not measured). */
void reqstats_record(int route, int method, int status, int64_t ns);
/* The sums of http_stats_t but the open connections. */
void reqstats_totals(http_stats_t *st);

#endif
