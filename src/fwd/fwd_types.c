/*
 * fwd_types.c - the distributed discovery of entity types and attributes
 * (5.7.5-5.7.10, 5.7.11): GET /types, /types/{type}, /attributes and
 * /attributes/{attrId} forwarded to the context sources whose registrations
 * support the operation (retrieveEntityTypes, retrieveEntityTypeDetails,
 * retrieveEntityTypeInfo, retrieveAttrTypes, retrieveAttrTypeDetails,
 * retrieveAttrTypeInfo) and match the type or attribute asked for; their
 * answers come back parsed, with the @context they are compact in, for
 * api/ to merge with the local lists (5.7.11: "the returned lists are
 * merged with the local list"). A source that fails adds an NGSILD-Warning
 * as for a query; its 404 is not a failure.
 */
#include "fwd.h"
#include "fwd_int.h"

#include <string.h>

bool fwd_discover(const fwd_in_t *in, reg_op_t op, const char *path, const char *type,
                  const char *attr, fwd_dout_t *out, problem_t *p)
{
    arena_t    *a = in->arena;
    typesel_t  *ts = NULL;
    reg_query_t q = {.ops = REG_OP_BIT(op), .attrs = &attr, .n_attrs = attr ? 1 : 0,
                     .modes = 1u << REG_INCLUSIVE | 1u << REG_EXCLUSIVE | 1u << REG_REDIRECT | 1u << REG_AUXILIARY};
    memset(out, 0, sizeof *out);
    if (type) {
        problem_t tq = {0};
        if (!(ts = typesel_parse(a, type, in->ctx, &tq))) return true;   /* a selection no source can match */
        q.types = ts;
    }
    fwd_skip_sources(in, &q);
    size_t  nr;
    reg_t **regs = reg_match(in->tenant, &q, cr_now_us(), a, &nr, NULL);
    if (!nr) return true;
    bool ok = true;
    if (fwd_via_loop(in->via)) {
        ok = fwd_loop_check(regs, nr, false, p);
        goto done;
    }
    if (in->offload && in->offload(in->header_ud)) {     /* it runs again where it may wait */
        ok = problem_set(p, PB_INTERNAL_ERROR, "handed to a --forwardThreads thread");
        goto done;
    }
    call_t     *calls = arena_calloc(a, nr * sizeof *calls);
    const char *query = in->query ? in->query(in->header_ud) : NULL;
    for (size_t r = 0; r < nr; r++) {
        call_t     *c = &calls[r];
        const char *jctx;
        c->reg = regs[r];
        c->skipped = true;
        if (fwd_cooling(regs[r])) continue;
        c->ctx = fwd_part_ctx(a, regs[r], in->ctx, &jctx);
        c->url = fwd_part_url(a, regs[r], path, query);
        if (fwd_headers(in, c, regs[r], jctx, NULL)) c->skipped = false;
    }
    fwd_run(calls, nr);
    out->docs = arena_calloc(a, (nr + 1) * sizeof *out->docs);
    out->ctxs = arena_calloc(a, (nr + 1) * sizeof *out->ctxs);
    int64_t now = cr_now_us();
    for (size_t r = 0; r < nr; r++) {
        call_t *c = &calls[r];
        if (c->hdrs) curl_slist_free_all(c->hdrs);
        if (c->skipped) {
            if (c->url) fwd_warn(a, &out->warning, c->reg, 199, "not sent");
            else fwd_warn(a, &out->warning, c->reg, 199, "in cooldown after a failure");
            continue;
        }
        out->forwarded++;
        bool good = c->rc == CURLE_OK && ((c->status >= 200 && c->status < 300) || c->status == 404);
        if (!good) {
            if (c->refused) fwd_warn(a, &out->warning, c->reg, 299, "refused by the egress policy");
            else if (c->rc != CURLE_OK) fwd_warn(a, &out->warning, c->reg, 199, curl_easy_strerror(c->rc));
            else fwd_warn(a, &out->warning, c->reg, 299, arena_printf(a, "answered %ld", c->status));
        } else if (c->status != 404) {
            char    err[64];
            json_t *t = json_parse_copy(a, c->body.p ? c->body.p : "", c->body.len, &(json_limits_t){0}, err, sizeof err);
            if (!t || (!json_is_object(t) && !json_is_array(t))) {
                good = false;
                fwd_warn(a, &out->warning, c->reg, 111, "not an NGSI-LD payload");
            } else {
                out->docs[out->n] = t;
                out->ctxs[out->n++] = c->ctx;
            }
        }
        if (!good) out->failed++;
        fwd_counted(c->reg, good, now);
    }
done:
    for (size_t r = 0; r < nr; r++) reg_unref(regs[r]);
    return ok;
}
