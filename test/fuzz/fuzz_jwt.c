/*
 * fuzz_jwt.c - libFuzzer target for the bearer token check of src/auth
 * (--auth jwt): the input bytes, cut at the first NUL as a header value
 * would be, are the Authorization header. The broker is configured as for
 * HS256 and for RS256/ES256 with a JWKS of one RSA and one EC key, so
 * inputs reach base64url, the JSON of header and claims, the signature
 * checks (ECDSA's r||s to DER), the claims and the tenants claim, and the
 * cache. Whatever the input: a verdict, a detail, no crash, no leak. The
 * same bytes also go to the JWKS parser as a document.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/auth_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char JWKS[] =
    "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"ec\","
    "\"x\":\"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU\",\"y\":\"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0\"},"
    "{\"kty\":\"RSA\",\"kid\":\"rsa\",\"e\":\"AQAB\",\"n\":\"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAt"
    "VT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65Y"
    "GjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4l"
    "Fd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw\"}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    if (!init) {
        char       path[] = "/tmp/coraine-fuzz-jwks-XXXXXX";
        int        fd = mkstemp(path);
        problem_t  p = {0};
        if (fd < 0 || write(fd, JWKS, sizeof JWKS - 1) != (ssize_t)(sizeof JWKS - 1)) abort();
        close(fd);
        cr_log_level = LOG_ERROR;          /* a bad JWKS logs a warning per key */
        cr_config.auth = "jwt";
        cr_config.jwks = strdup(path);
        cr_config.jwt_secret = "fuzz-fuzz-fuzz-fuzz-fuzz-fuzz-fuzz-fuzz";
        cr_config.jwt_tenant_claim = "ngsildTenants";
        cr_config.jwt_leeway = 30;
        if (!auth_start(&p)) abort();
        unlink(path);
        init = true;
    }
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    arena_t       *a = arena_new(4096);
    auth_outcome_t o;
    auth_check(s, size & 1 ? "city" : NULL, size & 2, a, &o);
    if (o.verdict != AUTH_OK && !o.detail[0]) abort();      /* a refusal says why */
    char           why[128];
    auth_keyset_t *ks = auth_keys_parse(s, strlen(s), why, sizeof why);
    auth_keys_free(ks);
    arena_free(a);
    free(s);
    return 0;
}
