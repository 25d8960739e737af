/*
 * api.h - the HTTP binding of the NGSI-LD API (clause 6): one file per
 * resource (entities, attrs, batch, query, types, admin), their route table,
 * and the helpers they share: @context resolution (6.3.5), body parsing, the
 * options of rendering (format, options, lang, Accept) and replies
 * (api_common.c); the projection, datasetId and Linked Entity parameters and
 * the rendering of entity answers with them (view.c).
 *
 * A handler reads the query string and headers into typed values, resolves
 * the @context, parses the body, calls one operation of ops/ (ops.h) and
 * renders its result (format, projection, Link headers, pagination links,
 * 201 Location, 207 bodies). Only ops/ calls the store.
 *
 * main.c calls api_init() with the store, then hands api_routes() to
 * http_start(). Nothing outside api/ calls the handlers.
 */
#ifndef CORAINE_API_H
#define CORAINE_API_H

#include "../core/core.h"
#include "../http/http.h"
#include "../json/json.h"
#include "../ld/ld.h"
#include "../model/model.h"
#include "../ops/ops.h"
#include "../store/store.h"

void                api_init(store_t *store);
/* From SIGTERM on, GET /ready answers 503 (a load balancer stops sending). */
void                api_set_draining(void);
const http_route_t *api_routes(size_t *n);

/* ---- shared by the resource files (not for other modules) */
extern store_t *api_store;

/* The parsed body: an object (want_array false) or an array (true). */
json_t *api_body(request_t *r, bool want_array, problem_t *p);
/* The @context of the request (6.3.5) for a body object (NULL for GET/DELETE
 * or when the body is an array of entities: then use api_context_of()). */
const ld_context_t *api_context(request_t *r, const json_t *body, problem_t *p);
/* 6.3.5: an application/ld+json body with a JSON-LD Link header gives the
 * @context twice: BadRequestData (a batch checks it for the whole request). */
bool api_context_once(request_t *r, problem_t *p);
/* For one entity of a batch body (application/ld+json: its own @context). */
const ld_context_t *api_context_of(request_t *r, const json_t *entity, problem_t *p);
/* Resolves the @context of every entity of a batch body before anything is
 * written: false when a download is under way (the request is deferred: the
 * handler returns at once and runs again later). Errors are left for the
 * per-entity pass. */
bool api_contexts_ready(request_t *r, const json_t *entities);
/* The request's @context resolution state (ld.h ld_req_t: its deadline is
 * --contextTimeout from the request's arrival), for handlers that call ld/
 * themselves; pending: req_defer(r) and return. */
ld_req_t *api_ld_req(request_t *r);

typedef struct api_view {
    render_opts_t ro;
    int           accept;       /* ACC_* chosen for the answer */
    const char   *ctype;        /* Content-Type of the answer */
    bool          count;        /* options/count=true */
    const char  **attrs;        /* the attrs parameter, expanded (NULL: none) */
    size_t        n_attrs;
    /* pick (4.21): the attribute names it picks (not id, type, scope); an
     * entity must have one of them (retrieve: else 404; query: else left out) */
    const char  **pick_attrs;
    size_t        n_pick_attrs;
    bool          has_pick;     /* pick given (members only: no attribute to match) */
    /* Linked Entity retrieval (4.5.23): join (0: none), joinLevel, containedBy */
    enum { API_JOIN_NONE = 0, API_JOIN_INLINE, API_JOIN_FLAT } join;
    unsigned      join_level;
    const char  **contained_by;
    size_t        n_contained_by;
    /* Prefer: ngsi-ld=<version> (6.3.6, 4.3.6.8): the version the answer
     * conforms to, major*100+minor (0: no such preference) */
    unsigned      version;
} api_view_t;

/* Reads format/options/attrs/pick/omit/lang/geometryProperty/join/joinLevel/
 * containedBy/datasetId into v, and checks them together (api_view_check). */
bool api_view(request_t *r, const ld_context_t *ctx, bool geojson_ok, api_view_t *v, problem_t *p);
/* The projection and linked entity parameters as text (from the query
 * string, or a Query body): each non-NULL one replaces what v holds. */
typedef struct api_view_text {
    const char *attrs, *pick, *omit, *join, *join_level, *contained_by, *dataset_id;
} api_view_text_t;
bool api_view_set(request_t *r, const ld_context_t *ctx, const api_view_text_t *t, api_view_t *v, problem_t *p);
/* The same from the query string (one pass over it), then api_view_check. */
bool api_view_params(request_t *r, const ld_context_t *ctx, api_view_t *v, problem_t *p);
/* The rules between them: pick or omit with attrs, braces without join or
 * deeper than joinLevel: BadRequestData. */
bool api_view_check(const api_view_t *v, problem_t *p);
/* Renders one entity (array false) or a page (array true) as v says:
 * JSON-LD or GeoJSON (a FeatureCollection for a page or a flat join), with
 * join=inline the linked entities under their Relationships, with join=flat
 * appended. The linked entities are fetched first (a failure: false with p,
 * nothing written). Call after api_view_context. */
bool api_render(request_t *r, const ld_context_t *ctx, api_view_t *v, cr_entity_t *const *items, size_t n,
                bool array, problem_t *p);
/* Adds the Link header (json) for ctx, or sets ro.context_json (ld+json). */
void api_view_context(request_t *r, const ld_context_t *ctx, api_view_t *v);
/* Comma-separated list of names -> expanded, interned array. */
bool api_name_list(request_t *r, const ld_context_t *ctx, const char *text, const char ***out, size_t *n,
                   bool allow_id_type, problem_t *p);
/* 6.3.20: every query parameter of r is one of a handler's known names,
 * else InvalidRequest. A handler calls it first, before it reads the body or
 * judges the other parameters. The names are a comma-separated list in a
 * static api_params_t of the handler, made into a small hash set on first
 * use (then a parameter costs a hash and a compare):
 *     static api_params_t known = API_PARAMS("options,type");
 *     if (!api_params_known(r, &known, &p)) goto fail; */
typedef struct api_params {
    const char *list;
    void       *set;            /* atomic: built on first use, kept for the process */
} api_params_t;
#define API_PARAMS(list_) {.list = (list_), .set = NULL}
bool api_params_known(request_t *r, api_params_t *known, problem_t *p);
/* The parameters api_view() reads (retrieve and query). */
#define API_VIEW_PARAMS "format,options,attrs,pick,omit,lang,geometryProperty,join,joinLevel,containedBy,datasetId"
/* The parameters of a query's selection (GET and DELETE /entities, GET /temporal/entities). */
#define API_QUERY_PARAMS "type,id,idPattern,q,scopeQ,local,georel,geometry,coordinates,geoproperty,csf"
/* A query's page, count, value options and order (GET /entities, GET /temporal/entities). */
#define API_PAGE_PARAMS "count,limit,offset,expandValues,jsonKeys,orderBy,collation,orderFrom,orderGeometry"
/* InvalidRequest when a query parameter was never read by the handler: the
 * last guard, after api_params_known, that nothing given is ignored. */
bool api_no_unknown_params(request_t *r, problem_t *p);
/* Every word of options=... is in the comma-separated `allowed` list, else InvalidRequest. */
bool api_options_valid(request_t *r, const char *allowed, problem_t *p);
/* options=a,b,c contains word? (also marks "options" used) */
bool api_option(request_t *r, const char *word);
/* The operation request of r: api_store, r's tenant and arena, and ctx. */
ops_req_t api_req(request_t *r, const ld_context_t *ctx);
/* http/'s hook after a write handler (http_set_after_handler): holds the
 * answer of writes whose durability is pending (api_req). */
void      api_after_handler(request_t *r);
/* A body object and its @context (api_body, then api_context); NULL with p. */
json_t *api_body_context(request_t *r, const ld_context_t **ctx, problem_t *p);
/* 204, or 207 with an UpdateResult (5.2.18) when some attribute was not updated. */
void api_reply_update_result(request_t *r, const op_result_t *res);
/* A non-negative integer parameter (limit, offset): BadRequestData naming it. */
bool api_uint_param(const char *s, const char *name, size_t *out, problem_t *p);
/* id=a,b,c: each a URI; the list in r's arena. */
bool api_id_list(request_t *r, const char *text, const char ***ids, size_t *n, problem_t *p);
/* A pagination Link header (6.3.10): rel "next"/"prev", the request's other
 * parameters kept; left out when it does not fit in the answer's head. */
void api_page_link(request_t *r, const char *rel, size_t offset, size_t limit, const char *ctype);
/* count=true|false, or options=count (4.13). */
bool api_count_param(request_t *r, bool *count, problem_t *p);
/* Distributed operations (fwd/): whether this request may be forwarded
 * (local=true not given, and some registration exists), and its fwd_in_t. */
struct fwd_in;
bool api_distributed(request_t *r);
/* Whether the request may wait for context sources (its tenant has
 * registrations): it is then run off the HTTP workers (http_set_offload). */
bool api_may_wait(request_t *r);
void api_fwd_in(request_t *r, const ld_context_t *ctx, struct fwd_in *in);
/* query.c: what a distributed query qy forwards (prm, at most 16: its selection's parameters, or those of
 * the Query body) and how it matches registrations (m); the number of prm. */
struct fwd_param;
struct reg_query;
size_t api_fwd_selection(request_t *r, const ops_query_t *qy, const json_t *body, struct fwd_param *prm,
                         struct reg_query *m);
/* Entity maps (entitymaps.c): the EntityMap (5.2.39) mp as the answer, with NGSILD-EntityMap. */
struct fwd_map_page;
void api_entity_map_answer(request_t *r, const ld_context_t *ctx, const struct fwd_map_page *mp, int status);
/* The EntityMap a query or retrieve asks for (Table 6.4.3.2-1, Tables 6.5.3.1-1/-2): entityMap,
 * entityMapLifetime (else --entityMapLifetime; at most 24 h), the NGSILD-EntityMap header (an id or a URL of
 * /entityMaps/{id}) when with_header. want: a map is to be used or made. */
typedef struct api_map_req {
    bool        want;
    const char *id;            /* the NGSILD-EntityMap the request names, or NULL */
    int64_t     lifetime_us;
} api_map_req_t;
bool api_entity_map_params(request_t *r, bool with_header, api_map_req_t *mr, problem_t *p);
/* Retrieve Entity distributed through an EntityMap (5.7.1.4): the map mr names, when it exists, decides
 * which registrations are asked (fwd_retrieve_map); else a new map of this entity is made from where it
 * was found. As fwd_retrieve otherwise; the map used is named in NGSILD-EntityMap. */
struct fwd_in;
struct fwd_out;
struct fwd_param;
bool api_entity_map_retrieve(request_t *r, const struct fwd_in *in, const char *id, const typesel_t *ts,
                             const char *const *attrs, size_t n_attrs, const struct fwd_param *prm, size_t np,
                             cr_entity_t *local, const api_map_req_t *mr, struct fwd_out *out, problem_t *p);
/* Distributed writes (dwrite.c): the forwarded parts (nothing when not
 * api_distributed; false: 508), then the answer combining them with the
 * local part (tried: there was one; local_ok, lp: its outcome). The replies
 * return false when everything succeeded: the handler answers its success. */
struct fwd_write;
struct fwd_wout;
bool api_fwd_write(request_t *r, const ld_context_t *ctx, const struct fwd_write *w, struct fwd_wout *out,
                   problem_t *p);
bool api_reply_dwrite(request_t *r, const char *id, bool tried, bool local_ok, const problem_t *lp,
                      const struct fwd_wout *out);
bool api_reply_dwrite_attrs(request_t *r, const ld_context_t *ctx, bool tried, bool local_ok, const problem_t *lp,
                            const op_result_t *res, const struct fwd_wout *out);
/* Purge Entities at the registered sources (5.6.21.4). */
bool api_fwd_purge(request_t *r, const ld_context_t *ctx, const entity_filter_t *f, struct fwd_wout *out,
                   problem_t *p);
/* fwd_write_t.types_of: the types of the local entity id; .check: the
 * payload body checked with flags (ops_payload_check). ud: api_dw_types_t. */
typedef struct api_dw_types {
    request_t          *r;
    const ld_context_t *ctx;
    const char         *id;
    const json_t       *body;
    unsigned            flags;
    bool                need_type;
} api_dw_types_t;
const typesel_t *api_dw_local_types(void *ud);
bool             api_dw_check(void *ud, problem_t *p);
bool api_dw_local_param(request_t *r, problem_t *p);                 /* local=true|false */
const char *api_dw_path(request_t *r, const char *prefix, const char *id, const char *suffix);
const char *api_dw_query(request_t *r);                             /* the query string without local */
/* 201 Created with Location: collection (e.g. "/ngsi-ld/v1/entities/") + the id, percent-encoded. */
void api_reply_created(request_t *r, const char *collection, const char *id);

/* The entity query of GET /entities and of a Query body (query.c), for the
 * temporal API: the filter parameters into qy (BadRequestData as 6.4.3.2
 * says), count and limit/offset, and a "next"/"prev" Link header. */
bool api_query_params(request_t *r, const ld_context_t *ctx, ops_query_t *qy, problem_t *p);
bool api_query_body(request_t *r, const ld_context_t *ctx, const json_t *body, ops_query_t *qy, api_view_t *v,
                    problem_t *p);
bool api_query_count(request_t *r, ops_query_t *qy, problem_t *p);
void api_page_link(request_t *r, const char *rel, size_t offset, size_t limit, const char *ctype);

#endif
