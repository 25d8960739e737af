/*
 * cor_frame.c - the cor:// frame codec (cor.h, doc/cor-protocol.md section
 * "Frames"): bytes to frames and back, with every check a receiver needs
 * (lengths, counts, codes, characters), so the server and the client never
 * look at a frame the codec has not validated. Also the operation table
 * (opcode <-> method and path) and the module's start, stop and counters.
 */
#include "cor.h"

#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------ integers (big-endian) */

static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put8(sbuf_t *sb, unsigned v) { sb_addc(sb, (char)(v & 0xff)); }
static void put16(sbuf_t *sb, unsigned v)
{
    char b[2] = {(char)(v >> 8 & 0xff), (char)(v & 0xff)};
    sb_add(sb, b, 2);
}
static void put32(sbuf_t *sb, uint32_t v)
{
    char b[4] = {(char)(v >> 24), (char)(v >> 16 & 0xff), (char)(v >> 8 & 0xff), (char)(v & 0xff)};
    sb_add(sb, b, 4);
}
static void set32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16 & 0xff);
    p[2] = (char)(v >> 8 & 0xff);
    p[3] = (char)(v & 0xff);
}

/* ------------------------------------------------------------ fields and operations */

static const char *const field_names[COR_F_LAST + 1] = {
    [COR_F_TENANT] = "NGSILD-Tenant", [COR_F_VIA] = "Via", [COR_F_LINK] = "Link", [COR_F_ACCEPT] = "Accept",
    [COR_F_CONTENT_TYPE] = "Content-Type", [COR_F_WARNING] = "NGSILD-Warning", [COR_F_LOCATION] = "Location",
    [COR_F_RESULTS_COUNT] = "NGSILD-Results-Count",
};

const char *cor_field_header(uint8_t code)
{
    return code <= COR_F_LAST ? field_names[code] : NULL;
}

uint8_t cor_field_code(const char *name, size_t len)
{
    for (uint8_t c = 0; c <= COR_F_LAST; c++)
        if (field_names[c] && strlen(field_names[c]) == len && !strncasecmp(field_names[c], name, len)) return c;
    return COR_F_NAMED;
}

typedef struct op_route {
    uint8_t     op;
    const char *method, *prefix, *suffix;   /* suffix NULL: no target */
} op_route_t;

static const op_route_t ops[] = {
    {COR_OP_RETRIEVE_ENTITY, "GET", "/ngsi-ld/v1/entities/", ""},
    {COR_OP_QUERY_ENTITIES, "GET", "/ngsi-ld/v1/entities", NULL},
    {COR_OP_QUERY_BATCH, "POST", "/ngsi-ld/v1/entityOperations/query", NULL},
    {COR_OP_CREATE_ENTITY, "POST", "/ngsi-ld/v1/entities", NULL},
    {COR_OP_UPDATE_ATTRS, "PATCH", "/ngsi-ld/v1/entities/", "/attrs"},
    {COR_OP_APPEND_ATTRS, "POST", "/ngsi-ld/v1/entities/", "/attrs"},
    {COR_OP_MERGE_ENTITY, "PATCH", "/ngsi-ld/v1/entities/", ""},
    {COR_OP_REPLACE_ENTITY, "PUT", "/ngsi-ld/v1/entities/", ""},
    {COR_OP_DELETE_ENTITY, "DELETE", "/ngsi-ld/v1/entities/", ""},
    {COR_OP_BATCH_CREATE, "POST", "/ngsi-ld/v1/entityOperations/create", NULL},
    {COR_OP_BATCH_UPSERT, "POST", "/ngsi-ld/v1/entityOperations/upsert", NULL},
    {COR_OP_BATCH_UPDATE, "POST", "/ngsi-ld/v1/entityOperations/update", NULL},
    {COR_OP_BATCH_DELETE, "POST", "/ngsi-ld/v1/entityOperations/delete", NULL},
    {COR_OP_BATCH_MERGE, "POST", "/ngsi-ld/v1/entityOperations/merge", NULL},
};

bool cor_op_route(uint8_t op, const char **method, const char **prefix, bool *has_target, const char **suffix)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(ops); i++)
        if (ops[i].op == op) {
            *method = ops[i].method;
            *prefix = ops[i].prefix;
            *has_target = ops[i].suffix != NULL;
            *suffix = ops[i].suffix ? ops[i].suffix : "";
            return true;
        }
    return false;
}

uint8_t cor_op_of(const char *method, const char *path, size_t path_len, const char **target, size_t *target_len)
{
    *target = NULL;
    *target_len = 0;
    for (size_t i = 0; i < CR_ARRAY_LEN(ops); i++) {
        const op_route_t *o = &ops[i];
        size_t            pl = strlen(o->prefix);
        if (strcmp(method, o->method) || path_len < pl || memcmp(path, o->prefix, pl)) continue;
        if (!o->suffix) {
            if (path_len == pl) return o->op;
            continue;
        }
        const char *id = path + pl, *end = path + path_len;
        const char *slash = memchr(id, '/', (size_t)(end - id));
        const char *id_end = slash ? slash : end;
        if (id_end == id || strlen(o->suffix) != (size_t)(end - id_end) || memcmp(id_end, o->suffix, (size_t)(end - id_end)))
            continue;
        *target = id;
        *target_len = (size_t)(id_end - id);
        return o->op;
    }
    return COR_OP_HTTP;
}

/* ------------------------------------------------------------ decoding */

int64_t cor_frame_size(const uint8_t *buf, size_t n, size_t max_frame, problem_t *p)
{
    if (n < 4) return 0;
    uint64_t len = (uint64_t)get32(buf) + 4;
    if (len < COR_HEAD) {
        problem_set(p, PB_BAD_REQUEST_DATA, "cor: a frame of %llu bytes is shorter than its header (%d bytes)",
                    (unsigned long long)len, COR_HEAD);
        return -1;
    }
    if (len > max_frame) {
        problem_set(p, PB_BAD_REQUEST_DATA, "cor: a frame of %llu bytes is larger than the %zu accepted "
                    "(--maxBodySize and the fields)", (unsigned long long)len, max_frame);
        return -1;
    }
    return (int64_t)len;
}

/* A header value or alias: UTF-8 without control characters (a tab is allowed). */
static bool text_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
    }
    return true;
}

/* An HTTP token (a header name). */
static bool token_ok(const char *s, size_t n)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";
    if (!n) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr(extra, c))))
            return false;
    }
    return true;
}

static bool fields_decode(const uint8_t *p, const uint8_t *end, size_t nf, cor_frame_t *f, const uint8_t **after,
                          problem_t *pb)
{
    uint64_t seen = 0;
    const uint8_t *start = p;
    if (nf > COR_MAX_FIELDS)
        return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: %zu header fields (at most %d)", nf, COR_MAX_FIELDS);
    for (size_t i = 0; i < nf; i++) {
        cor_field_t *x = &f->fields[i];
        if (end - p < 1) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field %zu is cut short", i);
        x->code = *p++;
        x->name = NULL;
        x->name_len = 0;
        if (x->code > COR_F_LAST)
            return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field %zu has the unknown code %u", i, x->code);
        if (x->code == COR_F_NAMED) {
            if (end - p < 1) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field %zu is cut short", i);
            x->name_len = *p++;
            if ((size_t)(end - p) < x->name_len) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field %zu is cut short", i);
            x->name = (const char *)p;
            p += x->name_len;
            if (!token_ok(x->name, x->name_len))
                return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field %zu: the header name is not an HTTP token", i);
        } else {
            if (seen >> x->code & 1)
                return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field code %u given twice", x->code);
            seen |= 1ull << x->code;
        }
        if (end - p < 2) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field %zu is cut short", i);
        x->len = get16(p);
        p += 2;
        if ((size_t)(end - p) < x->len) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field %zu is cut short", i);
        x->value = (const char *)p;
        p += x->len;
        if (!text_ok(x->value, x->len))
            return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: field %zu holds a control character", i);
        if ((size_t)(p - start) > COR_FIELDS_MAX)
            return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: the header fields take more than %zu bytes", COR_FIELDS_MAX);
    }
    f->n_fields = nf;
    *after = p;
    return true;
}

bool cor_frame_decode(const uint8_t *buf, size_t n, cor_frame_t *f, problem_t *pb)
{
    memset(f, 0, offsetof(cor_frame_t, fields));
    f->n_fields = 0;
    f->body = NULL;
    f->body_len = 0;
    if (n < COR_HEAD || (uint64_t)get32(buf) + 4 != n)
        return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: the frame's length does not match its bytes");
    f->type = buf[4];
    f->id = get32(buf + 8);
    const uint8_t *p = buf + COR_HEAD, *end = buf + n;
    switch (f->type) {
    case COR_HELLO:
        if (end - p < 14) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a HELLO is cut short");
        if (get32(p) != COR_MAGIC) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: not a cor:// HELLO (bad magic)");
        if (f->id) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a HELLO has request id 0");
        f->version = get16(p + 4);
        f->window = get16(p + 6);
        f->max_frame = get32(p + 8);
        f->alias_len = get16(p + 12);
        f->alias = (const char *)p + 14;
        if (!f->version) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: protocol version 0");
        if (!f->window) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a window of 0 requests");
        if (f->max_frame < 4096) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a largest frame under 4096 bytes");
        if ((size_t)(end - p - 14) != f->alias_len || f->alias_len > 255 || !text_ok(f->alias, f->alias_len))
            return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: the HELLO's alias is malformed (at most 255 bytes, "
                               "no control characters, ending the frame)");
        return true;
    case COR_REQUEST: {
        if (end - p < 4) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a REQUEST is cut short");
        if (!f->id) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a REQUEST has a request id other than 0");
        f->op = p[0];
        f->enc = p[1];
        size_t nf = get16(p + 2);
        p += 4;
        const char *m, *pre, *suf;
        bool        tgt;
        if (f->op != COR_OP_HTTP && !cor_op_route(f->op, &m, &pre, &tgt, &suf))
            return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: unknown operation code %u", f->op);
        if (!fields_decode(p, end, nf, f, &p, pb)) return false;
        break;
    }
    case COR_RESPONSE:
    case COR_GOAWAY: {
        if (end - p < 6) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a %s is cut short",
                                            f->type == COR_GOAWAY ? "GOAWAY" : "RESPONSE");
        if ((f->type == COR_GOAWAY) != (f->id == 0))
            return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a RESPONSE names its request (id other than 0), a GOAWAY none");
        f->status = get16(p);
        f->enc = p[2];
        size_t nf = get16(p + 4);
        p += 6;
        if (f->status < 100 || f->status > 599) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: status %u", f->status);
        if (!fields_decode(p, end, nf, f, &p, pb)) return false;
        break;
    }
    default:
        return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: unknown frame type %u", f->type);
    }
    if (f->enc > COR_ENC_JSON) return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: unknown body encoding %u", f->enc);
    f->body = (const char *)p;
    f->body_len = (size_t)(end - p);
    if (f->enc == COR_ENC_NONE && f->body_len)
        return problem_set(pb, PB_BAD_REQUEST_DATA, "cor: a body with the encoding 'none'");
    return true;
}

/* ------------------------------------------------------------ encoding */

bool cor_frame_encode(sbuf_t *out, const cor_frame_t *f)
{
    size_t start = out->len;
    put32(out, 0);                  /* the length, set at the end */
    put8(out, f->type);
    put8(out, 0);
    put16(out, 0);
    put32(out, f->id);
    switch (f->type) {
    case COR_HELLO:
        if (f->alias_len > 255) return false;
        put32(out, COR_MAGIC);
        put16(out, f->version);
        put16(out, f->window);
        put32(out, f->max_frame);
        put16(out, (unsigned)f->alias_len);
        if (f->alias_len) sb_add(out, f->alias, f->alias_len);
        break;
    case COR_REQUEST:
        put8(out, f->op);
        put8(out, f->body_len ? COR_ENC_JSON : COR_ENC_NONE);
        put16(out, (unsigned)f->n_fields);
        break;
    case COR_RESPONSE:
    case COR_GOAWAY:
        put16(out, f->status);
        put8(out, f->body_len ? COR_ENC_JSON : COR_ENC_NONE);
        put8(out, 0);
        put16(out, (unsigned)f->n_fields);
        break;
    default:
        return false;
    }
    if (f->type != COR_HELLO) {
        if (f->n_fields > COR_MAX_FIELDS) return false;
        for (size_t i = 0; i < f->n_fields; i++) {
            const cor_field_t *x = &f->fields[i];
            if (x->len > 0xffff || (x->code == COR_F_NAMED && (!x->name_len || x->name_len > 255))) return false;
            put8(out, x->code);
            if (x->code == COR_F_NAMED) {
                put8(out, (unsigned)x->name_len);
                sb_add(out, x->name, x->name_len);
            }
            put16(out, (unsigned)x->len);
            if (x->len) sb_add(out, x->value, x->len);
        }
        if (f->body_len) sb_add(out, f->body, f->body_len);
    }
    size_t len = out->len - start - 4;
    if (len > 0xffffffffu) return false;
    set32(out->p + start, (uint32_t)len);
    return true;
}

/* ------------------------------------------------------------ start, stop, counters */

static uint64_t g_stats[6];     /* CS_*: __atomic builtins (relaxed counters) */

void cor_stat_add(int which, uint64_t n)
{
    __atomic_add_fetch(&g_stats[which], n, __ATOMIC_RELAXED);
}

void cor_get_stats(cor_stats_t *st)
{
    st->server_connections = __atomic_load_n(&g_stats[CS_SRV_CONN], __ATOMIC_RELAXED);
    st->server_requests = __atomic_load_n(&g_stats[CS_SRV_REQ], __ATOMIC_RELAXED);
    st->server_errors = __atomic_load_n(&g_stats[CS_SRV_ERR], __ATOMIC_RELAXED);
    st->client_connects = __atomic_load_n(&g_stats[CS_CLI_CONN], __ATOMIC_RELAXED);
    st->client_requests = __atomic_load_n(&g_stats[CS_CLI_REQ], __ATOMIC_RELAXED);
    st->client_failures = __atomic_load_n(&g_stats[CS_CLI_FAIL], __ATOMIC_RELAXED);
}

bool cor_start(const http_route_t *routes, size_t n_routes, const char *alias, problem_t *p)
{
    if (!cor_client_start(alias, p)) return false;
    if (cr_config.cor_port > 0 && !cor_server_start(routes, n_routes, alias, p)) {
        cor_client_stop();
        return false;
    }
    return true;
}

void cor_stop(void)
{
    cor_server_stop();
    cor_client_stop();
}
