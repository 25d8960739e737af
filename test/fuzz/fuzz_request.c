/*
 * fuzz_request.c - libFuzzer target for whole request bodies, run through
 * the code path of the API handlers (src/api/) without HTTP or a store.
 *
 * The first input byte picks an operation (byte % OPS) and a variant
 * (byte / OPS: options such as noOverwrite, keyValues, the attribute a
 * /attrs/{attrId} request names); the rest is the request body:
 *
 *   create        entity_parse(EP_CREATE) -> freeze -> render in every format;
 *                 the normalized and concise renderings must parse again
 *                 (with EP_CREATE) and render to the same text;
 *   merge, replace, append, update (/entities/{id}[/attrs]), batch-style
 *                 fragments: entity_parse with the API's flags, entity_apply
 *                 on a fixed frozen entity that has every attribute kind,
 *                 datasetIds, sub-attributes, scope and a location; freeze,
 *                 render (the same checks as create);
 *   partial / replace attribute: attr_parse of the body for a fixed name;
 *   delete attribute: the body is {"name", "datasetId", "deleteAll"} (the
 *                 query parameters of the real request);
 *   batch:        the body is an array, each member through create;
 *   query:        the pieces of a Query (5.2.23): q, geoQ, scopeQ, type,
 *                 entities[], attrs -> an entity_filter_t matched against
 *                 the fixed entity, draft and frozen (which must agree).
 *
 * An "@context" member in the body is taken as the request's @context
 * (application/ld+json); remote contexts are never downloaded
 * (ld_set_offline). Invariants checked with __builtin_trap(): a failure
 * always says why; an entity that parses, freezes, and everything rendered
 * from a frozen entity is valid JSON; a rendered entity (normalized or
 * concise) is acceptable input and renders back to the same text; an
 * operation keeps the entity's id and leaves it at least one type; draft and
 * frozen render and match alike.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW    1700000000000000LL   /* µs: every input is stamped with the same time */
#define FIXED_ID "urn:ngsi-ld:Vehicle:fixed"

enum {
    R_CREATE, R_MERGE, R_REPLACE, R_APPEND, R_UPDATE, R_PARTIAL_ATTR, R_REPLACE_ATTR,
    R_DELETE_ATTR, R_BATCH, R_QUERY, R_OPS
};

static arena_t     *A;         /* per input */
static arena_t     *FIXED;     /* the fixed entity, for the whole run */
static cr_entity_t *DRAFT, *FROZEN;

/* The entity every update applies to: one attribute of every kind, several
 * instances (datasetIds) of some, sub-attributes, a scope, a location. */
static const char ENTITY[] =
    "{\"id\": \"" FIXED_ID "\", \"type\": [\"Vehicle\", \"Car\"],"
    " \"scope\": [\"/Madrid/Gardens/ParqueNorte\", \"/CompanyA\"],"
    " \"location\": {\"type\": \"GeoProperty\", \"value\": {\"type\": \"Point\", \"coordinates\": [-3.69, 40.42]}},"
    " \"observationSpace\": {\"type\": \"GeoProperty\", \"value\": {\"type\": \"Polygon\","
    "   \"coordinates\": [[[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]]]}},"
    " \"speed\": [{\"type\": \"Property\", \"value\": 55.5, \"observedAt\": \"2023-01-01T12:00:00Z\","
    "   \"unitCode\": \"KMH\", \"accuracy\": {\"type\": \"Property\", \"value\": 0.5}},"
    "  {\"type\": \"Property\", \"value\": 54, \"datasetId\": \"urn:ngsi-ld:dataset:gps\"},"
    "  {\"type\": \"Property\", \"value\": 56, \"datasetId\": \"urn:ngsi-ld:dataset:radar\"}],"
    " \"brandName\": {\"type\": \"Property\", \"value\": \"Mercedes\"},"
    " \"isParked\": {\"type\": \"Relationship\", \"object\": \"urn:ngsi-ld:OffStreetParking:Downtown1\","
    "   \"objectType\": \"OffStreetParking\", \"observedAt\": \"2023-01-01T12:00:00Z\","
    "   \"providedBy\": {\"type\": \"Relationship\", \"object\": \"urn:ngsi-ld:Person:Bob\"}},"
    " \"owners\": {\"type\": \"Relationship\", \"object\": [\"urn:ngsi-ld:Person:A\", \"urn:ngsi-ld:Person:B\"]},"
    " \"address\": {\"type\": \"Property\", \"value\": {\"city\": \"Berlin\", \"a\": {\"b\": [{\"c\": 1}]}}},"
    " \"colors\": {\"type\": \"Property\", \"value\": [\"blue\", \"red\", 3, true, null, [1]]},"
    " \"street\": [{\"type\": \"LanguageProperty\", \"languageMap\": {\"en\": \"Main street\", \"de\": [\"Hauptstr.\"]}},"
    "  {\"type\": \"LanguageProperty\", \"languageMap\": {\"fr\": \"Grand-rue\"}, \"datasetId\": \"urn:ds:fr\"}],"
    " \"category\": {\"type\": \"VocabProperty\", \"vocab\": [\"commercial\", \"Car\"],"
    "   \"reliability\": {\"type\": \"Property\", \"value\": 0.9}},"
    " \"readings\": {\"type\": \"ListProperty\", \"valueList\": [1, 2.5, \"x\", {\"k\": \"v\"}]},"
    " \"fleet\": {\"type\": \"ListRelationship\", \"objectList\": [{\"object\": \"urn:x:f1\"}, {\"object\": \"urn:x:f2\"}]},"
    " \"tickets\": {\"type\": \"JsonProperty\", \"json\": {\"value\": \"Overstay\", \"type\": \"Property\", \"n\": [1, {\"m\": 2}]}},"
    " \"isOn\": {\"type\": \"Property\", \"value\": false},"
    " \"stamp\": {\"type\": \"Property\", \"value\": \"2023-05-01T10:00:00Z\"},"
    " \"temperature\": [{\"type\": \"Property\", \"value\": 20},"
    "   {\"type\": \"Property\", \"value\": 25, \"datasetId\": \"urn:ds:1\"}]}";

/* Names a /attrs/{attrId} request can carry (the variant picks one). */
static const char *const ATTR_NAMES[] = {
    "speed", "brandName", "isParked", "owners", "location", "street", "category", "readings",
    "fleet", "tickets", "temperature", "observationSpace", "missing", "https://example.org/x",
};
#define N_ATTR_NAMES (sizeof ATTR_NAMES / sizeof *ATTR_NAMES)

/* ----------------------------------------------------------------- checks */

static void check_failure(const problem_t *p)
{
    if (p->kind == PB_NONE || p->detail[0] == '\0')
        __builtin_trap();                    /* every failure says why */
}

/* Renders e; the text is valid JSON (the parser accepts it) and UTF-8. */
static const char *render(const cr_entity_t *e, const ld_context_t *ctx, fmt_t fmt, bool sys,
                          bool geojson, size_t *len)
{
    render_opts_t o = { .ctx = ctx, .format = fmt, .sys_attrs = sys };
    sbuf_t        sb;
    json_writer_t w;
    char          err[128];

    sb_init(&sb, A, 256);
    jw_init(&w, &sb);
    if (geojson)
        entity_render_geojson(&w, e, &o);
    else
        entity_render(&w, e, &o);
    if (strlen(sb.p) != sb.len || !json_utf8_valid(sb.p, sb.len))
        __builtin_trap();
    if (!json_parse_copy(A, sb.p, sb.len, NULL, err, sizeof err))
        __builtin_trap();                    /* a rendering is JSON */
    *len = sb.len;
    return sb.p;
}

/* A rendering in fmt (normalized or concise) is an acceptable create body
 * whose entity renders to the very same text. */
static void check_reparse(const char *text, size_t len, const ld_context_t *ctx, fmt_t fmt)
{
    char       err[128];
    problem_t  p = { 0 };
    json_t    *body = json_parse_copy(A, text, len, NULL, err, sizeof err);

    if (!body)
        __builtin_trap();
    cr_entity_t *again = entity_parse(A, body, ctx, EP_CREATE, NOW, &p);
    if (!again)
        __builtin_trap();                    /* a rendered entity must be acceptable input */
    size_t      len2;
    const char *text2 = render(again, ctx, fmt, false, false, &len2);
    if (len2 != len || memcmp(text, text2, len) != 0)
        __builtin_trap();                    /* and mean the same */
}

/* What an operation leaves in an entity is complete at every depth: a kind
 * and its value (a partial update's fragments are never stored as such). */
static void check_complete(const cr_attr_t *at, size_t n, int depth)
{
    if (depth > 64)
        __builtin_trap();
    for (size_t i = 0; i < n; i++) {
        if (at[i].kind < ATTR_PROPERTY || at[i].kind > ATTR_JSONPROPERTY || !at[i].value ||
            at[i].is_null || !at[i].name)
            __builtin_trap();                /* an incomplete attribute was stored */
        check_complete(at[i].sub, at[i].n_sub, depth + 1);
    }
}

/* Freezes a draft produced by a request and checks all its renderings. */
static void freeze_and_render(const cr_entity_t *draft, const ld_context_t *ctx)
{
    cr_entity_t *e = entity_freeze(draft);
    size_t       len, dlen;
    const char  *text;

    if (!e)
        __builtin_trap();
    if (e->refs != 1 || e->n_types != draft->n_types || e->n_attrs != draft->n_attrs ||
        !e->id || strcmp(e->id, draft->id) != 0)
        __builtin_trap();
    check_complete(e->attrs, e->n_attrs, 0);

    for (int f = FMT_NORMALIZED; f <= FMT_KEYVALUES; f++) {
        text = render(e, ctx, (fmt_t)f, false, false, &len);
        const char *dtext = render(draft, ctx, (fmt_t)f, false, false, &dlen);
        if (dlen != len || memcmp(text, dtext, len) != 0)
            __builtin_trap();                /* freezing keeps everything */
        if (f != FMT_KEYVALUES)
            check_reparse(text, len, ctx, (fmt_t)f);
        (void)render(e, ctx, (fmt_t)f, true, false, &len);
        (void)render(e, ctx, (fmt_t)f, false, true, &len);
    }
    entity_unref(e);
}

/* ---------------------------------------------------------------- setup */

static void fuzz_setup(void)
{
    static char *argv[] = { "fuzz_request", NULL };
    char         err[160];
    problem_t    p = { 0 };
    json_t      *body;

    if (!cr_config_load(1, argv))
        abort();
    cr_log_level = LOG_ERROR;
    ld_set_offline(true);
    if (!ld_init())
        abort();
    model_init();
    FIXED = arena_new(1 << 16);
    A = arena_new(1 << 20);              /* a fixed entity's renderings fit: no block churn */
    if (!FIXED || !A)
        abort();
    body = json_parse_copy(FIXED, ENTITY, strlen(ENTITY), NULL, err, sizeof err);
    if (!body)
        abort();
    DRAFT = entity_parse(FIXED, body, ld_core(), EP_CREATE, NOW, &p);
    if (!DRAFT)
        abort();
    FROZEN = entity_freeze(DRAFT);
    if (!FROZEN)
        abort();
}

/* The request's @context: the body's "@context" member (ld+json) or the core
 * context. NULL (with p) when the member is not a usable context. */
static const ld_context_t *body_context(const json_t *body, problem_t *p)
{
    const json_t *c = json_is_object(body) ? json_get(body, "@context") : NULL;
    const ld_context_t *ctx;

    if (!c)
        return ld_core();
    ctx = ld_from_json(c, p);
    if (!ctx)
        check_failure(p);
    return ctx;
}

/* ------------------------------------------------------------ operations */

static void do_create(const json_t *body)
{
    problem_t           p = { 0 };
    const ld_context_t *ctx = body_context(body, &p);

    if (!ctx)
        return;
    cr_entity_t *d = entity_parse(A, body, ctx, EP_CREATE, NOW, &p);
    if (!d) {
        check_failure(&p);
        return;
    }
    if (!d->id || !d->n_types)
        __builtin_trap();                    /* create needs both, and checks it */
    freeze_and_render(d, ctx);
}

/* entity_apply on the fixed entity, then what the store does with the result. */
static void apply(const cr_entity_t *patch, entity_op_t op, const op_args_t *args,
                  const ld_context_t *ctx)
{
    problem_t    p = { 0 };
    op_result_t  res = { 0 };
    cr_entity_t *d = entity_apply(A, FROZEN, patch, op, args, NOW + 1, &res, &p);

    if (!d) {
        check_failure(&p);
        return;
    }
    if (res.n != res.n_updated + res.n_not_updated)
        __builtin_trap();
    for (size_t i = 0; i < res.n; i++)
        if (!res.items[i].name || (!res.items[i].updated && !res.items[i].reason))
            __builtin_trap();
    if (res.n_not_updated && !res.n_updated)
        return;                              /* nothing changed: the store keeps the entity */
    if (!d->id || strcmp(d->id, FROZEN->id) != 0 || !d->n_types)
        __builtin_trap();                    /* the store calls that an internal error */
    freeze_and_render(d, ctx);
}

/* PATCH /entities/{id} (merge), PUT /entities/{id} (replace), POST and
 * PATCH /entities/{id}/attrs (append, update), as src/api/entities.c and
 * attrs.c call them. */
static void do_fragment(const json_t *body, int op, unsigned variant)
{
    problem_t           p = { 0 };
    op_args_t           args = { 0 };
    const ld_context_t *ctx;
    unsigned            flags = EP_FRAGMENT;
    entity_op_t         eop;

    if (!json_is_object(body))
        return;                              /* api_body: 400 */
    if (!(ctx = body_context(body, &p)))
        return;
    switch (op) {
    case R_MERGE:   flags |= EP_MERGE; eop = OP_MERGE_ENTITY; break;
    case R_REPLACE: eop = OP_REPLACE_ENTITY; break;
    case R_APPEND:  eop = OP_APPEND_ATTRS; args.no_overwrite = variant & 1; break;
    default:        flags |= EP_MERGE; eop = OP_UPDATE_ATTRS; break;
    }
    if (op == R_MERGE || op == R_REPLACE) {
        const json_t *bid = json_get(body, "id");
        if (!bid)
            bid = json_get(body, "@id");
        if (bid && (!json_is_string(bid) || strcmp(bid->str, FIXED_ID) != 0))
            return;                          /* the id must be the one in the URL */
    }
    cr_entity_t *patch = entity_parse(A, body, ctx, flags, NOW, &p);
    if (!patch) {
        check_failure(&p);
        return;
    }
    if (op == R_MERGE || op == R_REPLACE)
        patch->id = FIXED_ID;
    if (op == R_MERGE) {
        /* ?format=keyValues, ?lang=, ?observedAt= */
        const char *lang = (variant & 2) ? "en" : NULL;
        if (variant & 4)
            args.observed_at = NOW + 5;
        entity_patch_simplified(A, patch, variant & 1, lang);
    } else if (op == R_REPLACE) {
        if (!patch->n_types)
            return;                          /* 400: replacing needs the type */
    } else if (!patch->n_attrs && !patch->n_types && !patch->scope) {
        return;                              /* 400: nothing to append / update */
    }
    apply(patch, eop, &args, ctx);
}

/* PATCH and PUT /entities/{id}/attrs/{attrId} (src/api/attrs.c attr_write). */
static void do_attr(json_t *body, int op, unsigned variant)
{
    problem_t           p = { 0 };
    op_args_t           args = { 0 };
    const ld_context_t *ctx;
    cr_attr_t           attr;
    cr_entity_t         patch = { 0 };
    bool                partial = op == R_PARTIAL_ATTR;

    if (!json_is_object(body))
        return;
    if (!(ctx = body_context(body, &p)))
        return;
    json_remove(body, "@context");
    args.attr_name = ld_expand(ctx, ATTR_NAMES[variant % N_ATTR_NAMES]);
    if (!args.attr_name)
        __builtin_trap();
    if (!attr_parse(A, args.attr_name, body, ctx, partial ? (EP_PARTIAL | EP_MERGE) : 0, NOW, &attr, &p)) {
        check_failure(&p);
        return;
    }
    args.dataset_id = attr.dataset_id;
    patch.id = FIXED_ID;
    patch.attrs = &attr;
    patch.n_attrs = 1;
    patch.created_at = patch.modified_at = NOW;
    apply(&patch, partial ? OP_PARTIAL_ATTR : OP_REPLACE_ATTR, &args, ctx);
}

/* DELETE /entities/{id}/attrs/{attrId}?datasetId=&deleteAll= : the query
 * parameters come as {"name": "...", "datasetId": "...", "deleteAll": true}. */
static void do_delete_attr(const json_t *body)
{
    const json_t *name, *ds, *all;
    op_args_t     args = { 0 };

    if (!json_is_object(body))
        return;
    name = json_get(body, "name");
    ds   = json_get(body, "datasetId");
    all  = json_get(body, "deleteAll");
    if (!json_is_string(name) || (!model_valid_name(name->str) && !strchr(name->str, ':')))
        return;
    if (ds && (!json_is_string(ds) || !model_valid_uri(ds->str)))
        return;
    if (all && !json_is_bool(all))
        return;
    args.attr_name  = ld_expand(ld_core(), name->str);
    args.dataset_id = ds ? ds->str : NULL;
    args.delete_all = all && all->type == JSON_TRUE;
    apply(NULL, OP_DELETE_ATTR, &args, ld_core());
}

/* POST /entityOperations/create|upsert|update|merge (src/api/batch.c
 * member_parse): each member is an entity; create-style members go through
 * create, update / merge members are applied to the fixed entity. */
static void do_batch(const json_t *body, unsigned variant)
{
    if (!json_is_array(body))
        return;
    json_foreach(e, body) {
        problem_t           p = { 0 };
        const ld_context_t *ctx;
        const json_t       *id;

        if (!json_is_object(e))
            continue;
        if (!(ctx = body_context(e, &p)))
            continue;
        id = json_get(e, "id");
        if (!id)
            id = json_get(e, "@id");
        if (!json_is_string(id) || !model_valid_uri(id->str))
            continue;
        switch (variant % 3) {
        case 0:
            do_create(e);
            break;
        case 1: {                            /* batch update: append, noOverwrite by variant */
            cr_entity_t *d = entity_parse(A, e, ctx, EP_FRAGMENT, NOW, &p);
            op_args_t    args = { .no_overwrite = (variant / 3) & 1 };
            if (!d) {
                check_failure(&p);
                break;
            }
            apply(d, OP_APPEND_ATTRS, &args, ctx);
            break;
        }
        default: {                           /* batch merge */
            cr_entity_t *d = entity_parse(A, e, ctx, EP_FRAGMENT | EP_MERGE, NOW, &p);
            if (!d) {
                check_failure(&p);
                break;
            }
            apply(d, OP_MERGE_ENTITY, &(op_args_t){ 0 }, ctx);
            break;
        }
        }
    }
}

/* Both the draft and the frozen fixed entity, which must agree. */
static void match(const entity_filter_t *f)
{
    if (filter_match(f, DRAFT) != filter_match(f, FROZEN))
        __builtin_trap();
}

/* The pieces of a Query (5.2.23) as src/api/query.c reads them. Each piece
 * that parses is matched alone, then all of them together. */
static void do_query(const json_t *body)
{
    problem_t           p = { 0 };
    const ld_context_t *ctx;
    entity_filter_t     all = { 0 };
    const json_t       *m;

    if (!json_is_object(body))
        return;
    if (!(ctx = body_context(body, &p)))
        return;

    if (json_is_string(m = json_get(body, "q"))) {
        entity_filter_t f = { 0 };
        memset(&p, 0, sizeof p);
        if ((f.q = q_parse(A, m->str, ctx, &p)))
            match(&f), all.q = f.q;
        else
            check_failure(&p);
    }
    if (json_is_string(m = json_get(body, "scopeQ"))) {
        entity_filter_t f = { 0 };
        memset(&p, 0, sizeof p);
        if ((f.scope = scopeq_parse(A, m->str, &p)))
            match(&f), all.scope = f.scope;
        else
            check_failure(&p);
    }
    if (json_is_string(m = json_get(body, "type"))) {
        entity_filter_t f = { 0 };
        memset(&p, 0, sizeof p);
        if ((f.types = typesel_parse(A, m->str, ctx, &p)))
            match(&f), all.types = f.types;
        else
            check_failure(&p);
    }
    if (json_is_object(m = json_get(body, "geoQ"))) {
        const json_t *rel = json_get(m, "georel"), *geom = json_get(m, "geometry"),
                     *coords = json_get(m, "coordinates"), *gprop = json_get(m, "geoproperty");
        if (json_is_string(rel) && (!gprop || json_is_string(gprop))) {
            entity_filter_t f = { 0 };
            memset(&p, 0, sizeof p);
            if ((f.geo = geoq_from_json(A, rel->str, geom, coords, gprop ? gprop->str : NULL, ctx, &p))) {
                match(&f), all.geo = f.geo;
                (void)geoq_property(f.geo);
                double box[4];
                (void)geoq_bbox(f.geo, box);
            } else {
                check_failure(&p);
            }
        }
    }
    if (json_is_array(m = json_get(body, "entities"))) {
        json_foreach(s, m) {
            entity_filter_t f = { 0 };
            const json_t   *v;
            bool            ok = true;
            if (!json_is_object(s))
                continue;
            if (json_is_string(v = json_get(s, "id"))) {
                const char **ids = arena_alloc(A, sizeof *ids);
                ids[0] = v->str;
                f.ids = ids;
                f.n_ids = 1;
            }
            if (ok && json_is_string(v = json_get(s, "idPattern"))) {
                memset(&p, 0, sizeof p);
                if (!(f.id_pattern = filter_compile_pattern(A, v->str, &p))) {
                    check_failure(&p);
                    ok = false;
                }
            }
            if (ok && json_is_string(v = json_get(s, "type"))) {
                memset(&p, 0, sizeof p);
                if (!(f.types = typesel_parse(A, v->str, ctx, &p))) {
                    check_failure(&p);
                    ok = false;
                }
            }
            if (ok)
                match(&f);
        }
    }
    if (json_is_array(m = json_get(body, "attrs")) && m->len) {
        const char **names = arena_alloc(A, m->len * sizeof *names);
        size_t       n = 0;
        json_foreach(a, m)
            if (json_is_string(a) && (model_valid_name(a->str) || strchr(a->str, ':')))
                names[n++] = ld_expand(ctx, a->str);
        if (n) {
            entity_filter_t f = { .attrs = names, .n_attrs = n };
            match(&f);
            all.attrs = names;
            all.n_attrs = n;
        }
    }
    match(&all);
}

/* ------------------------------------------------------------------ entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char          err[160];
    json_limits_t lim = { .max_depth = 64, .max_size = 1 << 20 };   /* the server's defaults */
    json_t       *body;
    char         *buf;
    int           op;
    unsigned      variant;

    if (!FROZEN)
        fuzz_setup();
    if (size < 1 || size > (1 << 16))
        return 0;
    op = data[0] % R_OPS;
    variant = data[0] / R_OPS;
    arena_reset(A);

    buf = malloc(size);                  /* malloc, not the arena: ASan sees overruns */
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    body = json_parse(A, buf, size - 1, &lim, err, sizeof err);
    if (body) {
        switch (op) {
        case R_CREATE:       if (json_is_object(body)) do_create(body); break;
        case R_MERGE:
        case R_REPLACE:
        case R_APPEND:
        case R_UPDATE:       do_fragment(body, op, variant); break;
        case R_PARTIAL_ATTR:
        case R_REPLACE_ATTR: do_attr(body, op, variant); break;
        case R_DELETE_ATTR:  do_delete_attr(body); break;
        case R_BATCH:        do_batch(body, variant); break;
        default:             do_query(body); break;
        }
    }
    arena_reset(A);                      /* GEOS objects and regexes go with it */
    free(buf);

    /* The context cache is never dropped (ld_shutdown): contexts live as long
     * as the process, as in the server, and the renderer's per-thread memo of
     * compacted names is keyed by context address. The cache is bounded
     * (LD_MAX_CONTEXTS); past that a new body context is refused, which is
     * a checked failure like any other. */
    return 0;
}
