/*
 * info.c - /info/sourceIdentity (6.33), the HTTP binding of 5.15.1: who
 * this broker is (ContextSourceIdentity, 5.2.40). The alias is
 * --brokerAlias (core/config.c: unique per instance by default, host name and
 * port), the one forwarding will put in its Via headers to detect loops.
 */
#include "api.h"

#include <string.h>

/* ISO 8601 duration of ms, e.g. "P1DT2H3M4.5S". */
static void write_duration(sbuf_t *sb, int64_t ms)
{
    if (ms < 0) ms = 0;
    int64_t d = ms / 86400000, h = ms / 3600000 % 24, m = ms / 60000 % 60, s = ms / 1000 % 60, f = ms % 1000;
    sb_addc(sb, 'P');
    if (d) sb_printf(sb, "%lldD", (long long)d);
    sb_addc(sb, 'T');
    if (h) sb_printf(sb, "%lldH", (long long)h);
    if (m) sb_printf(sb, "%lldM", (long long)m);
    if (f) sb_printf(sb, "%lld.%03lldS", (long long)s, (long long)f);
    else sb_printf(sb, "%lldS", (long long)s);
}

/* 6.33 / 5.15.1: ContextSourceIdentity (5.2.40). With NGSILD-Tenant, the
 * alias names that tenant of this broker: <brokerAlias>/<tenant>. */
void api_info_identity(request_t *r)
{
    problem_t p = {0};
    if (!api_no_unknown_params(r, &p)) {
        reply_problem(r, &p);
        return;
    }
    const char *alias = r->tenant ? arena_printf(r->arena, "%s/%s", cr_config.broker_alias, r->tenant)
                                  : cr_config.broker_alias;
    int64_t now = cr_now_ms();
    bool    ld = req_accept_best(r, ACC_JSON | ACC_LDJSON) == ACC_LDJSON;
    sbuf_t  up;
    sb_init(&up, r->arena, 32);
    write_duration(&up, now - cr_config.started_ms);
    sbuf_t id;
    sb_init(&id, r->arena, 64);
    sb_adds(&id, "urn:ngsi-ld:ContextSource:");
    http_url_encode(&id, alias);

    json_writer_t w;
    jw_init(&w, &r->out);
    jw_object_begin(&w);
    jw_key(&w, "id");
    jw_string(&w, id.p);
    jw_key(&w, "type");
    jw_string(&w, "ContextSourceIdentity");
    jw_key(&w, "contextSourceAlias");
    jw_string(&w, alias);
    jw_key(&w, "contextSourceUptime");
    jw_string(&w, up.p);
    char at[32];
    cr_datetime_format(now * 1000, at);
    jw_key(&w, "contextSourceTimeAt");
    jw_string(&w, at);
    jw_key(&w, "contextSourceExtras");
    jw_object_begin(&w);
    jw_key(&w, "broker");
    jw_string(&w, "coraine");
    jw_key(&w, "version");
    jw_string(&w, CR_VERSION);
    jw_key(&w, "publicUrl");
    jw_string(&w, cr_config.public_url);
    jw_key(&w, "database");
    jw_string(&w, cr_config.database);
    jw_key(&w, "onDisk");
    jw_bool(&w, cr_config.db_dir != NULL);
    jw_object_end(&w);
    if (ld) {
        jw_key(&w, "@context");
        jw_string(&w, LD_CORE_CONTEXT_URL);
    }
    jw_object_end(&w);
    if (!ld) {
        sbuf_t link;
        sb_init(&link, r->arena, 160);
        sb_printf(&link, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"",
                  LD_CORE_CONTEXT_URL);
        reply_header(r, "Link", link.p);
    }
    reply_body(r, 200, ld ? "application/ld+json" : "application/json");
}
