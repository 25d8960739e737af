/*
 * test_ld.c - unit tests of src/ld/: expansion and compaction with the core
 * and user contexts, core protection, Link parsing, the context cache, and
 * remote contexts fetched from a tiny HTTP server run inside the test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ld/ld.h"
#include "ld/ld_int.h"

#define NGSI "https://uri.etsi.org/ngsi-ld/"
#define DFLT LD_DEFAULT_VOCAB

static arena_t *A;

static json_t *J(const char *text)
{
    char err[128];
    json_t *v = json_parse_copy(A, text, strlen(text), NULL, err, sizeof err);
    if (!v)
        fail_msg("bad test JSON %s: %s", text, err);
    return v;
}

static const ld_context_t *ctx_ok(const char *text)
{
    problem_t p = { 0 };
    const ld_context_t *c = ld_from_json(J(text), &p);
    if (!c)
        fail_msg("context %s refused: %s", text, p.detail);
    return c;
}

static void ctx_bad(const char *text, problem_kind_t kind)
{
    problem_t p = { 0 };
    const ld_context_t *c = ld_from_json(J(text), &p);
    if (c)
        fail_msg("context %s accepted", text);
    assert_int_equal(p.kind, kind);
    assert_true(p.detail[0] != '\0');
}

#define assert_expands(c, term, iri) assert_string_equal(ld_expand((c), (term)), (iri))
#define assert_compacts(c, iri, term) assert_string_equal(ld_compact((c), (iri)), (term))

/* --------------------------------------------------------------- core */

static void test_core_expand(void **state)
{
    (void)state;
    const ld_context_t *c = ld_core();
    assert_non_null(c);
    assert_expands(c, "Property", NGSI "Property");
    assert_expands(c, "Relationship", NGSI "Relationship");
    assert_expands(c, "location", NGSI "location");
    assert_expands(c, "value", NGSI "hasValue");
    assert_expands(c, "object", NGSI "hasObject");
    assert_expands(c, "Point", "https://purl.org/geojson/vocab#Point");
    assert_expands(c, "description", "http://purl.org/dc/terms/description");
    assert_expands(c, "id", "@id");
    assert_expands(c, "type", "@type");
    assert_expands(c, "@id", "@id");
    assert_expands(c, "@type", "@type");
    assert_expands(c, "attributeCount", DFLT "attributeCount");   /* term mapped to itself */
    assert_expands(c, "temperature", DFLT "temperature");
    assert_expands(c, "http://example.org/speed", "http://example.org/speed");
    assert_expands(c, "urn:ngsi-ld:Car:1", "urn:ngsi-ld:Car:1");
    assert_expands(c, "ngsi-ld:foo", NGSI "foo");
    assert_expands(c, "geojson:bar", "https://purl.org/geojson/vocab#bar");
    assert_expands(c, "my attr:x", DFLT "my attr:x");                /* not a scheme */
    /* NULL means the core; results are interned */
    assert_ptr_equal(ld_expand(NULL, "temperature"), intern_cstr(DFLT "temperature"));
    assert_ptr_equal(ld_expand(c, "Property"), intern_cstr(NGSI "Property"));
    assert_ptr_equal(ld_expandn(c, "Propertyxyz", 8), intern_cstr(NGSI "Property"));
    assert_string_equal(ld_expand(c, ""), "");
}

static void test_core_compact(void **state)
{
    (void)state;
    const ld_context_t *c = ld_core();
    assert_compacts(c, NGSI "Property", "Property");
    assert_compacts(c, NGSI "hasValue", "value");
    assert_compacts(c, NGSI "location", "location");
    assert_compacts(c, "@id", "id");
    assert_compacts(c, "@type", "type");
    assert_compacts(c, DFLT "temperature", "temperature");
    assert_compacts(c, DFLT "attributeCount", "attributeCount");
    /* "location" is another IRI: a compact IRI with the prefix ngsi-ld (JSON-LD 1.1 IRI compaction) */
    assert_compacts(c, DFLT "location", "ngsi-ld:default-context/location");
    assert_compacts(c, DFLT "a:b", "ngsi-ld:default-context/a:b");
    assert_compacts(c, "https://purl.org/geojson/vocab#x", "geojson:x");
    assert_compacts(c, "http://example.org/x", "http://example.org/x");   /* no prefix: the IRI */
    /* the core's own prefix term "ngsi-ld" is no NGSI-LD name (4.6.2): an
     * attribute or type named by the namespace IRI is shown by its IRI, so
     * that the rendering can be written back (found by fuzz_request) */
    assert_compacts(c, NGSI, NGSI);
    assert_compacts(c, "https://purl.org/geojson/vocab#", "geojson");
    assert_expands(c, "ngsi-ld:default-context/location", DFLT "location");
    assert_ptr_equal(ld_compact(c, DFLT "temperature"), intern_cstr("temperature"));
    /* round trips */
    const char *terms[] = { "Property", "GeoProperty", "observedAt", "unitCode", "datasetId", "foo" };
    for (size_t i = 0; i < CR_ARRAY_LEN(terms); i++)
        assert_string_equal(ld_compact(c, ld_expand(c, terms[i])), terms[i]);
}

/* JSON-LD 1.1 IRI compaction (5.5.7): when no term maps to the IRI and the
 * @vocab suffix is taken by another term, prefix:suffix with a term that can
 * be a prefix (simple definition ending in a gen-delim, or "@prefix": true),
 * the shortest candidate, never a term itself; else the full IRI. */
static void test_compact_iri(void **state)
{
    (void)state;
    const ld_context_t *c = ctx_ok(
        "{\"almostFull\": \"https://suite.example/ctx#almostFull\","
        " \"ex\": \"http://example.org/\","
        " \"exlong\": \"http://example.org/deep/\","
        " \"e\": {\"@id\": \"http://example.org/p\", \"@prefix\": true},"
        " \"noprefix\": {\"@id\": \"http://other.example/\"},"
        " \"ex:taken\": \"http://example.org/other\","
        " \"under_score\": \"http://under.example/\","
        " \"my-term\": \"http://hyphen.example/attr\"}");
    assert_compacts(c, DFLT "almostFull", "ngsi-ld:default-context/almostFull");
    assert_compacts(c, "https://suite.example/ctx#almostFull", "almostFull");
    assert_compacts(c, "http://example.org/speed", "ex:speed");
    assert_compacts(c, "http://example.org/deep/x", "exlong:x");   /* shorter than ex:deep/x */
    assert_compacts(c, "http://example.org/pq", "e:q");            /* "@prefix": true */
    assert_compacts(c, "http://other.example/x", "http://other.example/x");   /* expanded, no @prefix */
    /* "ex:taken" is a term (of another IRI): not a candidate, and no other prefix fits */
    assert_compacts(c, "http://example.org/taken", "http://example.org/taken");
    assert_compacts(c, "http://example.org/other", "ex:taken");
    assert_compacts(c, "http://under.example/x", "http://under.example/x");   /* not a URI scheme */
    /* a term no request could carry as a name (4.6.2): the IRI */
    assert_compacts(c, "http://hyphen.example/attr", "http://hyphen.example/attr");
    assert_expands(c, "my-term", "http://hyphen.example/attr");
    /* every compact IRI reads back */
    const char *iris[] = { DFLT "almostFull", "http://example.org/speed", "http://example.org/deep/x",
                           "http://example.org/pq" };
    for (size_t i = 0; i < CR_ARRAY_LEN(iris); i++)
        assert_string_equal(ld_expand(c, ld_compact(c, iris[i])), iris[i]);
    /* the memoized path answers the same */
    assert_string_equal(ld_compact_name(c, intern_cstr(DFLT "almostFull")), "ngsi-ld:default-context/almostFull");
}

static void test_core_types(void **state)
{
    (void)state;
    const ld_context_t *c = ld_core();
    assert_string_equal(ld_term_type(c, NGSI "hasVocab"), "@vocab");
    assert_string_equal(ld_term_type(c, NGSI "hasObject"), "@id");
    assert_string_equal(ld_term_type(c, NGSI "hasJSON"), "@json");
    assert_string_equal(ld_term_type(c, NGSI "observedAt"), NGSI "DateTime");
    assert_null(ld_term_type(c, NGSI "location"));
    assert_null(ld_term_type(c, "http://example.org/unknown"));
    assert_string_equal(ld_context_link(c), LD_CORE_CONTEXT_URL);
    assert_string_equal(ld_context_value_json(c), "\"" LD_CORE_CONTEXT_URL "\"");
    assert_string_equal(ld_context_link(NULL), LD_CORE_CONTEXT_URL);
}

/* --------------------------------------------------------------- user */

static void test_user_inline(void **state)
{
    (void)state;
    const ld_context_t *c = ctx_ok(
        "{\"Vehicle\": \"http://example.org/Vehicle\","
        " \"brand\": {\"@id\": \"http://example.org/brand\", \"@type\": \"@vocab\"},"
        " \"name\": \"schema:name\","
        " \"schema\": \"https://schema.org/\","
        " \"owner\": {\"@id\": \"schema:owner\", \"@type\": \"@id\"},"
        " \"speed\": \"speed\","
        " \"when\": {\"@id\": \"http://example.org/when\", \"@type\": \"DateTime\"},"
        " \"alias\": \"Vehicle\","
        " \"ex:thing\": {\"@type\": \"@id\"},"
        " \"ex\": \"http://example.org/\","
        " \"scoped\": {\"@id\": \"http://example.org/scoped\", \"@container\": \"@set\"},"
        " \"nothing\": null}");
    assert_expands(c, "Vehicle", "http://example.org/Vehicle");
    assert_expands(c, "brand", "http://example.org/brand");
    assert_expands(c, "name", "https://schema.org/name");            /* prefix defined later */
    assert_expands(c, "owner", "https://schema.org/owner");
    assert_expands(c, "schema:address", "https://schema.org/address");
    assert_expands(c, "speed", DFLT "speed");
    assert_expands(c, "alias", "http://example.org/Vehicle");
    assert_expands(c, "ex:thing", "http://example.org/thing");
    assert_expands(c, "scoped", "http://example.org/scoped");
    assert_expands(c, "nothing", DFLT "nothing");
    assert_expands(c, "temperature", DFLT "temperature");
    assert_expands(c, "Property", NGSI "Property");
    assert_expands(c, "ngsi-ld:x", NGSI "x");

    assert_compacts(c, "http://example.org/Vehicle", "alias");        /* shortest term wins */
    assert_compacts(c, "http://example.org/brand", "brand");
    assert_compacts(c, "https://schema.org/name", "name");
    assert_compacts(c, NGSI "Property", "Property");
    assert_compacts(c, DFLT "temperature", "temperature");
    assert_compacts(c, "http://elsewhere.org/y", "http://elsewhere.org/y");

    assert_string_equal(ld_term_type(c, "http://example.org/brand"), "@vocab");
    assert_string_equal(ld_term_type(c, "https://schema.org/owner"), "@id");
    assert_string_equal(ld_term_type(c, "http://example.org/when"), NGSI "DateTime");
    assert_string_equal(ld_term_type(c, NGSI "hasVocab"), "@vocab");  /* core still there */
    assert_null(ld_term_type(c, "http://example.org/Vehicle"));
}

static void test_user_array(void **state)
{
    (void)state;
    const ld_context_t *c = ctx_ok(
        "[{\"a\": \"http://ex.org/a1\", \"p\": \"http://ex.org/\"},"
        " \"" LD_CORE_CONTEXT_URL "\","
        " {\"a\": \"http://ex.org/a2\", \"b\": \"p:b\"},"
        " \"https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.6.jsonld\"]");
    assert_expands(c, "a", "http://ex.org/a2");
    assert_expands(c, "b", "http://ex.org/b");
    assert_compacts(c, "http://ex.org/a2", "a");
    assert_compacts(c, "http://ex.org/a1", "p:a1");             /* a compact IRI, p a prefix */
    assert_compacts(c, "http://ex.org/b", "b");

    /* null resets what came before */
    c = ctx_ok("[{\"a\": \"http://ex.org/a1\"}, null, {\"b\": \"http://ex.org/b\"}]");
    assert_expands(c, "a", DFLT "a");
    assert_expands(c, "b", "http://ex.org/b");

    /* arrays of only core URLs (and null) are the core */
    assert_ptr_equal(ctx_ok("[\"" LD_CORE_CONTEXT_URL "\"]"), ld_core());
    assert_ptr_equal(ctx_ok("[]"), ld_core());
    assert_ptr_equal(ctx_ok("null"), ld_core());
    assert_ptr_equal(ctx_ok("\"https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.9.jsonld\""), ld_core());
    assert_ptr_equal(ctx_ok("\"https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context.jsonld\""), ld_core());
    assert_ptr_equal(ld_from_json(NULL, NULL), ld_core());
}

static void test_user_vocab(void **state)
{
    (void)state;
    const ld_context_t *c = ctx_ok("{\"@vocab\": \"http://ex.org/vocab/\", \"t\": \"thing\"}");
    assert_expands(c, "foo", "http://ex.org/vocab/foo");
    assert_expands(c, "t", "http://ex.org/vocab/thing");
    assert_expands(c, "Property", NGSI "Property");
    assert_compacts(c, "http://ex.org/vocab/foo", "foo");
    assert_compacts(c, "http://ex.org/vocab/thing", "t");
    assert_compacts(c, DFLT "foo", "ngsi-ld:default-context/foo");   /* not the active @vocab */

    /* @vocab as a compact IRI, and a relative @vocab */
    c = ctx_ok("{\"ex\": \"http://ex.org/\", \"@vocab\": \"ex:v/\"}");
    assert_expands(c, "foo", "http://ex.org/v/foo");
    c = ctx_ok("{\"@vocab\": \"sub/\"}");
    assert_expands(c, "foo", DFLT "sub/foo");
    /* a later null @vocab goes back to the default */
    c = ctx_ok("[{\"@vocab\": \"http://ex.org/vocab/\"}, {\"@vocab\": null}]");
    assert_expands(c, "foo", DFLT "foo");
}

static void test_core_protected(void **state)
{
    (void)state;
    const ld_context_t *c = ctx_ok(
        "{\"Property\": \"http://evil.org/Property\","
        " \"location\": {\"@id\": \"http://evil.org/loc\", \"@type\": \"@id\"},"
        " \"ngsi-ld\": \"http://evil.org/\","
        " \"id\": \"http://evil.org/id\","
        " \"mine\": \"ngsi-ld:mine\"}");
    assert_expands(c, "Property", NGSI "Property");
    assert_expands(c, "location", NGSI "location");
    assert_expands(c, "id", "@id");
    assert_expands(c, "ngsi-ld:x", NGSI "x");
    assert_expands(c, "mine", NGSI "mine");
    assert_compacts(c, "http://evil.org/loc", "http://evil.org/loc");
    assert_compacts(c, NGSI "location", "location");
    assert_null(ld_term_type(c, NGSI "location"));
}

static void test_invalid(void **state)
{
    (void)state;
    ctx_bad("42", PB_BAD_REQUEST_DATA);
    ctx_bad("true", PB_BAD_REQUEST_DATA);
    ctx_bad("[1]", PB_BAD_REQUEST_DATA);
    ctx_bad("[[{}]]", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"a\": 5}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"a\": [\"http://x/\"]}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"a\": true}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"a\": {\"@id\": 4}}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"a\": {\"@id\": \"http://x/a\", \"@type\": 1}}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"a\": \"\"}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"\": \"http://x/\"}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"a\": \"b\", \"b\": \"a\"}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"a\": \"b:x\", \"b\": \"a:y\"}", PB_BAD_REQUEST_DATA);
    ctx_bad("{\"@vocab\": 3}", PB_BAD_REQUEST_DATA);
    ctx_bad("\"notaurl\"", PB_BAD_REQUEST_DATA);
    ctx_bad("[{\"a\": \"http://x/a\"}, \"not a url\"]", PB_BAD_REQUEST_DATA);
    ctx_bad("\"ftp://example.org/ctx.jsonld\"", PB_LD_CONTEXT_NOT_AVAILABLE);
    ctx_bad("\"file:///etc/passwd\"", PB_LD_CONTEXT_NOT_AVAILABLE);
    /* 5.5.7: a user context shall not contain scoped contexts */
    ctx_bad("{\"a\": {\"@id\": \"http://x/a\", \"@context\": {\"b\": \"http://x/b\"}}}", PB_BAD_REQUEST_DATA);
}

static void test_cache_and_served(void **state)
{
    (void)state;
    ld_stats_t s0, s1;
    ld_get_stats(&s0);
    const ld_context_t *a = ctx_ok("{\"x1\": \"http://ex.org/x1\", \"y1\": \"http://ex.org/y1\"}");
    const ld_context_t *b = ctx_ok("{\"y1\": \"http://ex.org/y1\", \"x1\": \"http://ex.org/x1\"}");
    const ld_context_t *d = ctx_ok("{\"x1\": \"http://ex.org/x1\", \"y1\": \"http://ex.org/OTHER\"}");
    ld_get_stats(&s1);
    assert_ptr_equal(a, b);
    assert_ptr_not_equal(a, d);
    assert_int_equal(s1.cache_hits, s0.cache_hits + 1);
    assert_int_equal(s1.cached, s0.cached + 2);

    assert_string_equal(ld_context_value_json(a),
                        "{\"x1\":\"http://ex.org/x1\",\"y1\":\"http://ex.org/y1\"}");
    const char *link = ld_context_link(a);
    const char *prefix = "http://localhost:1026/ngsi-ld/v1/jsonldContexts/";
    assert_int_equal(strncmp(link, prefix, strlen(prefix)), 0);
    const char *id = link + strlen(prefix);
    assert_int_equal(strlen(id), 16);
    const char *served = ld_served_context(A, id);
    assert_non_null(served);
    assert_string_equal(served, "{\"@context\":{\"x1\":\"http://ex.org/x1\",\"y1\":\"http://ex.org/y1\"}}");
    assert_null(ld_served_context(A, "0000000000000000"));
    assert_null(ld_served_context(A, "nope"));
    assert_string_not_equal(ld_context_link(d), link);

    ld_set_base_url("http://broker.example:9090/");
    const ld_context_t *e = ctx_ok("{\"z1\": \"http://ex.org/z1\"}");
    assert_int_equal(strncmp(ld_context_link(e), "http://broker.example:9090/ngsi-ld/v1/jsonldContexts/",
                             strlen("http://broker.example:9090/ngsi-ld/v1/jsonldContexts/")), 0);
    ld_set_base_url("http://localhost:1026");
}

/* --------------------------------------------------------------- Link */

static void link_ok(const char *h, const char *url)
{
    const char *u;
    size_t n;
    problem_t p = { 0 };
    if (!ld_link_parse(h, &u, &n, &p))
        fail_msg("Link %s refused: %s", h, p.detail);
    assert_int_equal(n, strlen(url));
    assert_memory_equal(u, url, n);
}

static void link_bad(const char *h)
{
    const char *u;
    size_t n;
    problem_t p = { 0 };
    if (ld_link_parse(h, &u, &n, &p))
        fail_msg("Link %s accepted", h);
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
}

static void test_link(void **state)
{
    (void)state;
    link_ok("<http://x/ctx.jsonld>; rel=\"http://www.w3.org/ns/json-ld#context\"; "
            "type=\"application/ld+json\"", "http://x/ctx.jsonld");
    link_ok("<http://x/ctx.jsonld>;rel=\"http://www.w3.org/ns/json-ld#context\"", "http://x/ctx.jsonld");
    link_ok("  < http://x/c >  ;  type = \"application/ld+json\" ;  REL = "
            "\"http://www.w3.org/ns/json-ld#context\"  ", "http://x/c");
    link_ok("<http://x/a>; rel=\"next\", <http://x/c>; rel=\"http://www.w3.org/ns/json-ld#context\"",
            "http://x/c");
    link_ok("<http://x/c>; rel=http://www.w3.org/ns/json-ld#context", "http://x/c");
    link_ok("<http://x/c,d>; rel=\"alternate http://www.w3.org/ns/json-ld#context\"", "http://x/c,d");

    link_bad("");
    link_bad("http://x/c; rel=\"http://www.w3.org/ns/json-ld#context\"");
    link_bad("<http://x/c; rel=\"http://www.w3.org/ns/json-ld#context\"");
    link_bad("<http://x/c>");
    link_bad("<http://x/c>; rel=\"next\"");
    link_bad("<http://x/c>; rel=\"http://www.w3.org/ns/json-ld#context");
    link_bad("<http://x/c>; rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"text/html\"");
    link_bad("<http://x/c> rel=\"http://www.w3.org/ns/json-ld#context\"");
    link_bad("<>; rel=\"http://www.w3.org/ns/json-ld#context\"");
    link_bad("<http://x/a>; rel=\"http://www.w3.org/ns/json-ld#context\", "
             "<http://x/b>; rel=\"http://www.w3.org/ns/json-ld#context\"");

    problem_t p = { 0 };
    assert_null(ld_from_link("<http://x/c>; rel=\"next\"", &p));
    assert_int_equal(p.kind, PB_BAD_REQUEST_DATA);
    assert_ptr_equal(ld_from_link("<" LD_CORE_CONTEXT_URL ">; rel=\"http://www.w3.org/ns/json-ld#context\"; "
                                  "type=\"application/ld+json\"", &p), ld_core());
}

/* ------------------------------------------------------- remote server */

static int srv_fd = -1;
static int srv_port;
static int srv_stop;
static pthread_t srv_thread;
static int n_ctx, n_nested, n_missing, n_bad, n_loop, n_other;
#define CNT(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)

static void srv_reply(int fd, int status, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/ld+json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, status == 200 ? "OK" : "Not Found", strlen(body));
    if (write(fd, head, (size_t)n) < 0 || write(fd, body, strlen(body)) < 0)
        return;
}

static void *srv_main(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&srv_stop, __ATOMIC_SEQ_CST)) {
        struct pollfd pfd = { .fd = srv_fd, .events = POLLIN };
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        int fd = accept(srv_fd, NULL, NULL);
        if (fd < 0)
            continue;
        char req[4096];
        size_t len = 0;
        while (len < sizeof req - 1) {
            ssize_t r = read(fd, req + len, sizeof req - 1 - len);
            if (r <= 0)
                break;
            len += (size_t)r;
            req[len] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        req[len] = '\0';
        char path[256] = "";
        if (sscanf(req, "GET %255s", path) != 1) {
            close(fd);
            continue;
        }
        char body[1024];
        if (strcmp(path, "/ctx.jsonld") == 0) {
            __atomic_fetch_add(&n_ctx, 1, __ATOMIC_SEQ_CST);
            struct timespec ts = { 0, 300 * 1000000L };  /* slow, so the threads pile up */
            nanosleep(&ts, NULL);
            srv_reply(fd, 200, "{\"@context\": {\"Remote\": \"http://remote.org/Remote\","
                               " \"rp\": {\"@id\": \"http://remote.org/rp\", \"@type\": \"@vocab\"},"
                               " \"Property\": \"http://remote.org/NotTheCore\"}}");
        } else if (strcmp(path, "/nested.jsonld") == 0) {
            __atomic_fetch_add(&n_nested, 1, __ATOMIC_SEQ_CST);
            snprintf(body, sizeof body,
                     "{\"@context\": [\"http://127.0.0.1:%d/ctx.jsonld\", {\"n\": \"http://nested.org/n\","
                     " \"Remote\": \"http://nested.org/Remote\"}, \"" LD_CORE_CONTEXT_URL "\"]}",
                     srv_port);
            srv_reply(fd, 200, body);
        } else if (strcmp(path, "/loop.jsonld") == 0) {
            __atomic_fetch_add(&n_loop, 1, __ATOMIC_SEQ_CST);
            snprintf(body, sizeof body, "{\"@context\": \"http://127.0.0.1:%d/loop.jsonld\"}", srv_port);
            srv_reply(fd, 200, body);
        } else if (strcmp(path, "/bad.jsonld") == 0) {
            __atomic_fetch_add(&n_bad, 1, __ATOMIC_SEQ_CST);
            srv_reply(fd, 200, "{\"@context\": {\"a\": 5}}");
        } else if (strcmp(path, "/notjson.jsonld") == 0) {
            __atomic_fetch_add(&n_other, 1, __ATOMIC_SEQ_CST);
            srv_reply(fd, 200, "<html>hello</html>");
        } else {
            __atomic_fetch_add(&n_missing, 1, __ATOMIC_SEQ_CST);
            srv_reply(fd, 404, "{\"error\": \"not found\"}");
        }
        close(fd);
    }
    return NULL;
}

static int srv_setup(void **state)
{
    (void)state;
    srv_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(srv_fd >= 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0 };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(srv_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(srv_fd, 64), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(srv_fd, (struct sockaddr *)&sa, &sl), 0);
    srv_port = ntohs(sa.sin_port);
    __atomic_store_n(&srv_stop, 0, __ATOMIC_SEQ_CST);
    assert_int_equal(pthread_create(&srv_thread, NULL, srv_main, NULL), 0);
    cr_config.context_timeout_ms = 3000;
    cr_config.context_retries = 0;
    cr_config.context_failure_ttl_ms = 10000;
    return 0;
}

static int srv_teardown(void **state)
{
    (void)state;
    __atomic_store_n(&srv_stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(srv_thread, NULL);
    close(srv_fd);
    return 0;
}

static char *link_to(const char *path)
{
    return arena_printf(A, "<http://127.0.0.1:%d%s>; rel=\"http://www.w3.org/ns/json-ld#context\"; "
                           "type=\"application/ld+json\"", srv_port, path);
}

typedef struct {
    const char *link;
    const ld_context_t *got;
    problem_t p;
} req_t;

static void *asker(void *arg)
{
    req_t *r = arg;
    r->got = ld_from_link(r->link, &r->p);
    return NULL;
}

/* counts the Cached entries of our server */
static void test_remote_single_download(void **state)
{
    (void)state;
    ld_stats_t s0, s1;
    ld_get_stats(&s0);
    req_t reqs[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        reqs[i] = (req_t){ .link = link_to("/ctx.jsonld") };
        assert_int_equal(pthread_create(&th[i], NULL, asker, &reqs[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 8; i++) {
        if (!reqs[i].got)
            fail_msg("thread %d: %s", i, reqs[i].p.detail);
        assert_ptr_equal(reqs[i].got, reqs[0].got);
    }
    assert_int_equal(CNT(n_ctx), 1);
    ld_get_stats(&s1);
    assert_int_equal(s1.downloads, s0.downloads + 1);

    const ld_context_t *c = reqs[0].got;
    assert_expands(c, "Remote", "http://remote.org/Remote");
    assert_expands(c, "Property", NGSI "Property");               /* protected */
    assert_compacts(c, "http://remote.org/rp", "rp");
    assert_string_equal(ld_term_type(c, "http://remote.org/rp"), "@vocab");
    char *url = arena_printf(A, "http://127.0.0.1:%d/ctx.jsonld", srv_port);
    assert_string_equal(ld_context_link(c), url);
    assert_string_equal(ld_context_value_json(c), arena_printf(A, "\"%s\"", url));

    /* the cache serves the next requests: Link, string @context, the same URL in an array */
    problem_t p = { 0 };
    assert_ptr_equal(ld_from_link(link_to("/ctx.jsonld"), &p), c);
    assert_ptr_equal(ctx_ok(arena_printf(A, "\"%s\"", url)), c);
    const ld_context_t *arr = ctx_ok(arena_printf(A, "[\"%s\", \"" LD_CORE_CONTEXT_URL "\"]", url));
    assert_string_equal(ld_context_link(arr), url);                 /* one URL: linked as is */
    assert_expands(arr, "Remote", "http://remote.org/Remote");
    assert_int_equal(CNT(n_ctx), 1);
    ld_stats_t s2;
    ld_get_stats(&s2);
    assert_true(s2.cache_hits >= s1.cache_hits + 2);
    assert_int_equal(s2.downloads, s1.downloads);

    /* GET /jsonldContexts sees it: Cached, with its hits (the document read
     * once, the context found in the cache at least twice) */
    size_t n;
    ld_info_t *v = ld_stored_list(A, LD_KIND_CACHED, &n);
    int seen = 0;
    for (size_t i = 0; i < n; i++)
        if (strstr(v[i].url, "/ctx.jsonld")) {
            assert_int_equal(v[i].kind, LD_KIND_CACHED);
            assert_int_equal(strlen(v[i].local_id), 16);
            assert_true(v[i].expires_ms > v[i].created_ms);
            seen++;
        }
    assert_int_equal(seen, 1);
    ld_info_t e;
    assert_true(ld_stored_find(A, url, false, &e));
    assert_int_equal(e.kind, LD_KIND_CACHED);
    assert_true(ld_stored_find(A, e.local_id, false, &e));
    assert_string_equal(e.url, url);
}

static void test_remote_nested(void **state)
{
    (void)state;
    problem_t p = { 0 };
    const ld_context_t *c = ld_from_link(link_to("/nested.jsonld"), &p);
    if (!c)
        fail_msg("%s", p.detail);
    assert_expands(c, "n", "http://nested.org/n");
    assert_expands(c, "Remote", "http://nested.org/Remote");          /* later wins */
    assert_expands(c, "rp", "http://remote.org/rp");
    assert_int_equal(CNT(n_nested), 1);
    assert_int_equal(CNT(n_ctx), 1);   /* document cache */

    /* inline array mixing a remote URL and an object: served by us */
    char *text = arena_printf(A, "[\"http://127.0.0.1:%d/nested.jsonld\", {\"extra\": \"http://x.org/e\"}]",
                              srv_port);
    const ld_context_t *m = ctx_ok(text);
    assert_expands(m, "n", "http://nested.org/n");
    assert_expands(m, "extra", "http://x.org/e");
    assert_non_null(strstr(ld_context_link(m), "/ngsi-ld/v1/jsonldContexts/"));
    assert_int_equal(CNT(n_nested), 1);
}

static void test_remote_failures(void **state)
{
    (void)state;
    problem_t p = { 0 };
    ld_stats_t s0, s1;
    ld_get_stats(&s0);

    assert_null(ld_from_link(link_to("/missing.jsonld"), &p));
    assert_int_equal(p.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    assert_int_equal(problem_status(&p), 503);
    assert_non_null(strstr(p.detail, "/missing.jsonld"));
    assert_non_null(strstr(p.detail, "404"));
    assert_int_equal(CNT(n_missing), 1);
    /* the server answered: not remembered, the next request asks again */
    memset(&p, 0, sizeof p);
    assert_null(ld_from_link(link_to("/missing.jsonld"), &p));
    assert_int_equal(p.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    assert_int_equal(CNT(n_missing), 2);
    ld_get_stats(&s1);
    assert_int_equal(s1.download_failures, s0.download_failures + 2);

    /* refused connection: a port nobody listens on */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0 };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    char *dead = arena_printf(A, "<http://127.0.0.1:%d/ctx.jsonld>; rel=\"http://www.w3.org/ns/json-ld#context\"",
                              ntohs(sa.sin_port));
    memset(&p, 0, sizeof p);
    assert_null(ld_from_link(dead, &p));
    assert_int_equal(p.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    assert_non_null(strstr(p.detail, "127.0.0.1"));
    /* no answer at all: remembered for a while, no new attempt */
    ld_stats_t s2, s3;
    ld_get_stats(&s2);
    assert_null(ld_from_link(dead, &p));
    ld_get_stats(&s3);
    assert_int_equal(s3.download_failures, s2.download_failures);
    ld_fetch_set_failure_ttl(0);             /* ... but not forever */
    assert_null(ld_from_link(dead, &p));
    ld_get_stats(&s3);
    assert_int_equal(s3.download_failures, s2.download_failures + 1);
    ld_fetch_set_failure_ttl(-1);          /* back to --contextFailureTtl */

    /* a document that is not a context, invalid content, a loop */
    memset(&p, 0, sizeof p);
    assert_null(ld_from_link(link_to("/notjson.jsonld"), &p));
    assert_int_equal(p.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    memset(&p, 0, sizeof p);
    assert_null(ld_from_link(link_to("/bad.jsonld"), &p));
    assert_int_equal(p.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    assert_non_null(strstr(p.detail, "'a'"));
    memset(&p, 0, sizeof p);
    assert_null(ld_from_link(link_to("/loop.jsonld"), &p));
    assert_int_equal(p.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    assert_int_equal(CNT(n_loop), 1);                                    /* fetched once, then cached */

    /* offline: nothing is downloaded */
    ld_set_offline(true);
    int before = CNT(n_missing) + CNT(n_ctx) + CNT(n_nested) + CNT(n_other);
    memset(&p, 0, sizeof p);
    assert_null(ld_from_link(link_to("/never.jsonld"), &p));
    assert_int_equal(p.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    assert_int_equal(CNT(n_missing) + CNT(n_ctx) + CNT(n_nested) + CNT(n_other), before);
    assert_ptr_equal(ld_from_link("<" LD_CORE_CONTEXT_URL ">; rel=\"http://www.w3.org/ns/json-ld#context\"", &p),
                     ld_core());
    ld_set_offline(false);
}

/* ld_map: removal by backward shift keeps every other value findable. */
static bool eq_int(const void *val, const void *key)
{
    return *(const int *)val == *(const int *)key;
}

static void test_map_del(void **state)
{
    (void)state;
    ld_map_t m = { 0 };
    static int v[1000];
    for (int i = 0; i < 1000; i++) {
        v[i] = i;
        ld_map_put(&m, (uint64_t)(i % 37), &v[i]);
    }
    for (int i = 0; i < 1000; i += 2)
        ld_map_del(&m, (uint64_t)(i % 37), &v[i]);
    assert_int_equal(m.count, 500);
    for (int i = 0; i < 1000; i++) {
        void *f = ld_map_find(&m, (uint64_t)(i % 37), eq_int, &i);
        if (i % 2)
            assert_ptr_equal(f, &v[i]);
        else
            assert_null(f);
    }
    ld_map_free(&m);
}

static bool egress_ok(const char *host, const char *addr)
{
    char why[160];
    struct sockaddr_storage ss = { 0 };
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (!addr) {
        return egress_check_host(host, NULL, why, sizeof why);
    } else if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
    } else {
        assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
        s6->sin6_family = AF_INET6;
    }
    return egress_check_host(host, (struct sockaddr *)&ss, why, sizeof why);
}

static void test_egress_policy(void **state)
{
    (void)state;
    char err[200];
    assert_true(egress_configure("", "", err, sizeof err));
    assert_false(egress_ok(NULL, "169.254.169.254"));
    assert_false(egress_ok(NULL, "169.254.1.1"));
    assert_false(egress_ok(NULL, "fe80::1"));
    assert_false(egress_ok(NULL, "::ffff:169.254.169.254"));    /* v4-mapped */
    assert_false(egress_ok(NULL, "fd00:ec2::254"));
    assert_false(egress_ok("metadata.google.internal", NULL));
    assert_false(egress_ok("METADATA.google.internal.", "8.8.8.8"));
    assert_true(egress_ok(NULL, "127.0.0.1"));
    assert_true(egress_ok(NULL, "::1"));
    assert_true(egress_ok("ctx.example.org", "93.184.216.34"));

    /* an allow lifts one built-in refusal; the rest stays */
    assert_true(egress_configure("169.254.169.254", "", err, sizeof err));
    assert_true(egress_ok(NULL, "169.254.169.254"));
    assert_false(egress_ok(NULL, "169.254.169.253"));
    /* deny everything but one network: the longest prefix decides */
    assert_true(egress_configure("10.1.0.0/16", "0.0.0.0/0,::/0", err, sizeof err));
    assert_true(egress_ok(NULL, "10.1.2.3"));
    assert_false(egress_ok(NULL, "10.2.0.1"));
    assert_false(egress_ok(NULL, "127.0.0.1"));
    /* host rules decide before addresses; on a tie deny wins */
    assert_true(egress_configure("ok.evil.example", "*.evil.example,10.0.0.0/8,10.0.0.0/8", err, sizeof err));
    assert_false(egress_ok("a.evil.example", "8.8.8.8"));
    assert_true(egress_ok("ok.evil.example", "10.0.0.1"));
    assert_true(egress_configure("10.0.0.0/8", "10.0.0.0/8", err, sizeof err));
    assert_false(egress_ok(NULL, "10.0.0.1"));
    /* bad rules are refused at start */
    assert_false(egress_configure("10.0.0.0/99", "", err, sizeof err));
    assert_non_null(strstr(err, "10.0.0.0/99"));
    assert_false(egress_configure("", "http://x", err, sizeof err));
    assert_true(egress_configure("", "", err, sizeof err));
}

/* Read-only expansion: an unknown name is not interned and equals no
 * interned name; a known one comes back interned. */
static void test_expand_lookup(void **state)
{
    (void)state;
    const ld_context_t *core = ld_core();
    size_t n0 = intern_count();
    const char *u = ld_expand_lookup(core, "zzNeverWritten4711", A);
    assert_string_equal(u, DFLT "zzNeverWritten4711");
    assert_null(intern_find(u, strlen(u)));
    const char *v = ld_expand_lookup(core, "urn:zz:never:4711", A);
    assert_string_equal(v, "urn:zz:never:4711");
    assert_int_equal(intern_count(), n0);
    assert_ptr_equal(ld_expand_lookup(core, "location", A), ld_expand(core, "location"));
    const char *w = ld_expand(core, "zzNeverWritten4711");              /* a write interns */
    assert_ptr_equal(ld_expand_lookup(core, "zzNeverWritten4711", A), w);
}

static void no_wake(void *arg)
{
    (void)arg;
}

/* Eviction: a small cache keeps working for new contexts and frees old ones,
 * but never one that a request has pinned. */
static void test_eviction_with_pins(void **state)
{
    (void)state;
    int saved = cr_config.context_cache_mb;
    cr_config.context_cache_mb = 1;                 /* 512 KiB for built contexts */
    arena_t *qa = arena_new(4096);
    ld_req_t *q = ld_req_new(qa, cr_mono_ns() + 1000000000LL, no_wake, NULL);
    problem_t p = { 0 };
    const ld_context_t *x = ld_req_from_json(q, J("{\"pinnedTerm\": \"http://pin.example/t\"}"), &p);
    assert_non_null(x);
    uint64_t serial = ld_context_serial(x);
    ld_stats_t s0, s1;
    ld_get_stats(&s0);
    size_t names = intern_count();
    for (int i = 0; i < 3000; i++) {
        char text[128];
        snprintf(text, sizeof text, "{\"t%d\": \"http://evict.example/%d\"}", i, i);
        assert_non_null(ctx_ok(text));
    }
    assert_int_equal(intern_count(), names);        /* user contexts intern nothing */
    ld_get_stats(&s1);
    assert_true(s1.evictions > s0.evictions);
    assert_true(s1.cached_bytes <= 512 * 1024);
    /* still usable, although evicted (ASan checks it was not freed) */
    assert_string_equal(ld_expand(x, "pinnedTerm"), "http://pin.example/t");
    assert_string_equal(ld_compact_name(x, ld_expand(x, "pinnedTerm")), "pinnedTerm");
    /* the request finds its own contexts again, evicted or not */
    assert_ptr_equal(ld_req_from_json(q, J("{\"pinnedTerm\": \"http://pin.example/t\"}"), &p), x);
    arena_free(qa);                                 /* the pin goes: freed now */
    const ld_context_t *again = ctx_ok("{\"pinnedTerm\": \"http://pin.example/t\"}");
    assert_true(ld_context_serial(again) != serial);
    assert_string_equal(ld_expand(again, "pinnedTerm"), "http://pin.example/t");
    cr_config.context_cache_mb = saved;
}

/* 5.13: a hosted context is resolved by its URL without a download, listed,
 * bounded, and gone once removed. */
static void test_hosted_contexts(void **state)
{
    (void)state;
    problem_t p = { 0 };
    char id[17];
    ld_set_base_url("http://hosted.invalid:1");
    ld_hosted_new_id(id);
    const char *text = "{\"@context\":{\"hx\":\"http://ex.org/hx\"}}";
    assert_true(ld_hosted_put(id, text, strlen(text), 1000, &p));
    assert_false(ld_hosted_put(id, text, strlen(text), 1000, &p));          /* the id is taken */
    assert_int_equal(p.kind, PB_ALREADY_EXISTS);
    const char *url = ld_hosted_url(A, id);
    assert_string_equal(url, arena_printf(A, "http://hosted.invalid:1/ngsi-ld/v1/jsonldContexts/%s", id));

    const ld_context_t *c = ld_from_link(arena_printf(A, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"", url), &p);
    if (!c)
        fail_msg("%s", p.detail);
    assert_expands(c, "hx", "http://ex.org/hx");
    assert_string_equal(ld_context_link(c), url);

    ld_info_t e;
    assert_true(ld_stored_find(A, id, true, &e));
    assert_int_equal(e.kind, LD_KIND_HOSTED);
    assert_string_equal(e.text, text);
    assert_true(e.hits >= 1);                                               /* the build read it */
    assert_true(ld_stored_find(A, url, false, &e));
    assert_string_equal(e.local_id, id);
    size_t n;
    ld_info_t *v = ld_stored_list(A, LD_KIND_HOSTED, &n);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].local_id, id);
    v = ld_stored_list(A, LD_KIND_ALL, &n);
    assert_string_equal(v[0].local_id, "core");

    char big[70000];
    memset(big, ' ', sizeof big);
    big[sizeof big - 1] = '\0';
    assert_false(ld_hosted_put("00000000000000aa", big, strlen(big), 0, &p));   /* --contextHostedMaxBytes */
    assert_false(ld_hosted_put("not-an-id", text, strlen(text), 0, &p));

    ld_hosted_remove(id);
    assert_false(ld_stored_find(A, id, false, &e));
    problem_t q = { 0 };
    assert_null(ld_from_link(arena_printf(A, "<%s>; rel=\"http://www.w3.org/ns/json-ld#context\"", url), &q));
    assert_int_equal(q.kind, PB_LD_CONTEXT_NOT_AVAILABLE);
    ld_set_base_url("http://localhost:1026");
}

int main(void)
{
    A = arena_new(1 << 16);
    if (!ld_init()) {
        fprintf(stderr, "ld_init failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_core_expand),
        cmocka_unit_test(test_core_compact),
        cmocka_unit_test(test_compact_iri),
        cmocka_unit_test(test_core_types),
        cmocka_unit_test(test_user_inline),
        cmocka_unit_test(test_user_array),
        cmocka_unit_test(test_user_vocab),
        cmocka_unit_test(test_core_protected),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_cache_and_served),
        cmocka_unit_test(test_link),
        cmocka_unit_test(test_remote_single_download),
        cmocka_unit_test(test_remote_nested),
        cmocka_unit_test(test_remote_failures),
        cmocka_unit_test(test_map_del),
        cmocka_unit_test(test_egress_policy),
        cmocka_unit_test(test_expand_lookup),
        cmocka_unit_test(test_eviction_with_pins),
        cmocka_unit_test(test_hosted_contexts),
    };
    int rc = cmocka_run_group_tests_name("ld", tests, srv_setup, srv_teardown);
    ld_shutdown();
    arena_free(A);
    return rc;
}
