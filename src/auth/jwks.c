/*
 * jwks.c - the keys that verify RS256 and ES256 tokens: a JWKS document
 * (RFC 7517) or a PEM public key, read from a file or fetched from an URL,
 * made into OpenSSL keys (RSA from n and e; EC P-256 from x and y).
 */
#include "auth_int.h"
#include "../json/json.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define JWKS_MAX_BYTES ((size_t)1 << 20)
#define JWKS_MAX_KEYS  64

bool auth_b64url_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *outlen)
{
    uint32_t acc = 0;
    int      bits = 0;
    size_t   o = 0;
    if (n % 4 == 1) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int  v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
               : c == '-' ? 62 : c == '_' ? 63 : -1;
        if (v < 0) return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == cap) return false;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    if (bits && (acc & ((1u << bits) - 1))) return false;   /* non-canonical trailing bits */
    *outlen = o;
    return true;
}

/* A member of a JWK decoded into buf; 0 when absent or bad. */
static size_t member(const json_t *k, const char *name, unsigned char *buf, size_t cap)
{
    const json_t *v = json_get(k, name);
    size_t        n;
    if (!json_is_string(v) || !auth_b64url_decode(v->str, v->len, buf, cap, &n)) return 0;
    return n;
}

static EVP_PKEY *from_params(const char *type, OSSL_PARAM_BLD *bld)
{
    EVP_PKEY     *pkey = NULL;
    OSSL_PARAM   *params = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
    if (!params || !ctx || EVP_PKEY_fromdata_init(ctx) <= 0 ||
        EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) <= 0)
        pkey = NULL;
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    return pkey;
}

static EVP_PKEY *rsa_key(const json_t *k)
{
    unsigned char  n[1024], e[16];
    size_t         nl = member(k, "n", n, sizeof n), el = member(k, "e", e, sizeof e);
    EVP_PKEY      *pkey = NULL;
    if (nl < 256 || !el) return NULL;           /* RSA below 2048 bits is refused */
    BIGNUM         *bn = BN_bin2bn(n, (int)nl, NULL), *be = BN_bin2bn(e, (int)el, NULL);
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    if (bn && be && bld && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) &&
        OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be))
        pkey = from_params("RSA", bld);
    OSSL_PARAM_BLD_free(bld);
    BN_free(bn);
    BN_free(be);
    return pkey;
}

static EVP_PKEY *ec_key(const json_t *k)
{
    const json_t  *crv = json_get(k, "crv");
    unsigned char  pt[65], x[40], y[40];
    EVP_PKEY      *pkey = NULL;
    if (!json_is_string(crv) || strcmp(crv->str, "P-256")) return NULL;
    if (member(k, "x", x, sizeof x) != 32 || member(k, "y", y, sizeof y) != 32) return NULL;
    pt[0] = 4;                                  /* uncompressed point */
    memcpy(pt + 1, x, 32);
    memcpy(pt + 33, y, 32);
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    if (bld && OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) &&
        OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pt, sizeof pt))
        pkey = from_params("EC", bld);
    OSSL_PARAM_BLD_free(bld);
    return pkey;
}

static auth_keyset_t *pem_keys(const char *text, size_t len, char *why, size_t whylen)
{
    BIO      *bio = BIO_new_mem_buf(text, (int)len);
    EVP_PKEY *pkey = bio ? PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (!pkey) {
        snprintf(why, whylen, "not a PEM public key");
        return NULL;
    }
    int kind = EVP_PKEY_get_base_id(pkey) == EVP_PKEY_RSA ? AK_RSA : EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC ? AK_EC : 0;
    if (!kind || (kind == AK_RSA && EVP_PKEY_get_bits(pkey) < 2048)) {
        EVP_PKEY_free(pkey);
        snprintf(why, whylen, "the PEM key is neither RSA of 2048 bits or more nor EC");
        return NULL;
    }
    auth_keyset_t *ks = cr_xcalloc(1, sizeof *ks);
    ks->keys = cr_xcalloc(1, sizeof *ks->keys);
    ks->keys[0].kind = kind;
    ks->keys[0].pkey = pkey;
    ks->n = 1;
    return ks;
}

auth_keyset_t *auth_keys_parse(const char *text, size_t len, char *why, size_t whylen)
{
    while (len && (*text == ' ' || *text == '\n' || *text == '\r' || *text == '\t')) text++, len--;
    if (len >= 10 && !strncmp(text, "-----BEGIN", 10)) return pem_keys(text, len, why, whylen);

    arena_t       *a = arena_new(8192);
    char           err[128];
    json_limits_t  lim = {.max_depth = 8, .max_size = JWKS_MAX_BYTES};
    json_t        *root = json_parse_copy(a, text, len, &lim, err, sizeof err);
    const json_t  *keys = root ? json_get(root, "keys") : NULL;
    auth_keyset_t *ks = NULL;
    if (!json_is_array(keys)) {
        snprintf(why, whylen, root ? "a JWKS document has a \"keys\" array" : "not JSON: %s", err);
        goto done;
    }
    ks = cr_xcalloc(1, sizeof *ks);
    ks->keys = cr_xcalloc(JWKS_MAX_KEYS, sizeof *ks->keys);
    for (const json_t *k = keys->child; k && ks->n < JWKS_MAX_KEYS; k = k->next) {
        const json_t *kty = json_get(k, "kty"), *use = json_get(k, "use"), *kid = json_get(k, "kid");
        if (!json_is_string(kty) || (json_is_string(use) && strcmp(use->str, "sig"))) continue;
        auth_key_t *key = &ks->keys[ks->n];
        if (!strcmp(kty->str, "RSA")) key->pkey = rsa_key(k), key->kind = AK_RSA;
        else if (!strcmp(kty->str, "EC")) key->pkey = ec_key(k), key->kind = AK_EC;
        if (!key->pkey) {
            LOG_W("auth: a %s key of the JWKS (kid %s) is not usable: left out", kty->str,
                  json_is_string(kid) ? kid->str : "none");
            continue;
        }
        if (json_is_string(kid)) snprintf(key->kid, sizeof key->kid, "%s", kid->str);
        ks->n++;
    }
    if (!ks->n) {
        auth_keys_free(ks);
        ks = NULL;
        snprintf(why, whylen, "the JWKS has no usable signing key (RSA of 2048 bits or more, EC P-256)");
    }
done:
    arena_free(a);
    return ks;
}

void auth_keys_free(auth_keyset_t *ks)
{
    if (!ks) return;
    for (size_t i = 0; i < ks->n; i++) EVP_PKEY_free(ks->keys[i].pkey);
    free(ks->keys);
    free(ks);
}

/* ---- reading --jwks */

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    sbuf_t *sb = ud;
    size_t  n = size * nmemb;
    if (sb->len + n > JWKS_MAX_BYTES) return 0;   /* too large: the transfer fails */
    sb_add(sb, ptr, n);
    return n;
}

char *auth_keys_read(const char *where, size_t *len, char *why, size_t whylen)
{
    sbuf_t sb;
    sb_init(&sb, NULL, 4096);
    if (!strncasecmp(where, "http://", 7) || !strncasecmp(where, "https://", 8)) {
        CURL *c = curl_easy_init();
        long  status = 0;
        if (!c) { snprintf(why, whylen, "no curl handle"); goto fail; }
        curl_easy_setopt(c, CURLOPT_URL, where);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &sb);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        CURLcode rc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
        if (rc != CURLE_OK || status != 200) {
            snprintf(why, whylen, "GET %s: %s", where, rc != CURLE_OK ? curl_easy_strerror(rc) : "not 200");
            goto fail;
        }
    } else {
        FILE *f = fopen(where, "rb");
        char  buf[8192];
        size_t n;
        if (!f) { snprintf(why, whylen, "%s: %s", where, strerror(errno)); goto fail; }
        while ((n = fread(buf, 1, sizeof buf, f)) > 0 && sb.len + n <= JWKS_MAX_BYTES) sb_add(&sb, buf, n);
        bool err = ferror(f) || n > 0;
        fclose(f);
        if (err) { snprintf(why, whylen, "%s: unreadable or larger than 1 MiB", where); goto fail; }
    }
    *len = sb.len;
    return sb.p;
fail:
    sb_release(&sb);
    return NULL;
}
