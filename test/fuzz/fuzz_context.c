/*
 * fuzz_context.c - libFuzzer target for src/ld/: arbitrary bytes parsed as
 * JSON and taken as an @context (the whole value, or its "@context" member),
 * then terms expanded, compacted and typed; the same bytes as a Link header.
 * Remote downloads are disabled (ld_set_offline), so URLs in the input never
 * reach the network. The context cache is dropped now and then to keep the
 * memory flat over millions of inputs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "ld/ld.h"

static void check_term(const ld_context_t *c, const char *term)
{
    const char *iri = ld_expand(c, term);
    if (!iri || (term[0] && !iri[0]))
        __builtin_trap();
    const char *back = ld_compact(c, iri);
    if (!back)
        __builtin_trap();
    /* compaction must round-trip: a term it gives expands to the same IRI (a
     * full IRI that reads as a compact IRI of the context is JSON-LD's own
     * "IRI confused with prefix" ambiguity, not checked here) */
    if (iri[0] != '@' && back != iri && ld_expand(c, back) != iri)
        __builtin_trap();
    (void)ld_term_type(c, iri);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        cr_log_level = LOG_ERROR;
        ld_set_offline(true);
        if (!ld_init())
            abort();
        ready = true;
    }
    arena_t *a = arena_new(8192);
    if (!a)
        return 0;
    char err[128];
    json_limits_t lim = { .max_depth = 32, .max_size = 1 << 20 };
    json_t *v = json_parse_copy(a, (const char *)data, size, &lim, err, sizeof err);
    if (v) {
        const json_t *ctx = json_get(v, "@context");
        if (!ctx)
            ctx = v;
        problem_t p = { 0 };
        const ld_context_t *c = ld_from_json(ctx, &p);
        if (c) {
            static const char *const terms[] = {
                "Property", "location", "id", "type", "@id", "name", "schema:name", "a", "b",
                "x:y", "http://example.org/z", "urn:x:1", "ngsi-ld:foo", "value", "",
            };
            for (size_t i = 0; i < sizeof terms / sizeof terms[0]; i++)
                check_term(c, terms[i]);
            if (ctx->type == JSON_OBJECT)
                json_foreach(m, ctx)
                    if (m->key)
                        check_term(c, m->key);
            const char *link = ld_context_link(c);
            const char *val = ld_context_value_json(c);
            if (!link || !val)
                __builtin_trap();
            const char *slash = strrchr(link, '/');
            if (slash)
                (void)ld_served_context(a, slash + 1);
        } else if (p.kind == PB_NONE || !p.detail[0]) {
            __builtin_trap();                       /* a failure must say why */
        }
    }

    char *hdr = arena_strndup(a, (const char *)data, size);
    problem_t lp = { 0 };
    if (!ld_from_link(hdr, &lp) && (lp.kind == PB_NONE || !lp.detail[0]))
        __builtin_trap();
    arena_free(a);

    ld_stats_t st;
    ld_get_stats(&st);
    if (st.cached > 2000)
        ld_shutdown();                              /* the next call rebuilds the core */
    return 0;
}
