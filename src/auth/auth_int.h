/*
 * auth_int.h - private to auth/: the verification keys (jwks.c) and the
 * base64url decoding both files use.
 */
#ifndef CORAINE_AUTH_INT_H
#define CORAINE_AUTH_INT_H

#include "auth.h"

#include <openssl/evp.h>

enum { AK_RSA = 1, AK_EC = 2 };

typedef struct auth_key {
    char      kid[128];          /* "" when the key has none */
    int       kind;              /* AK_* */
    EVP_PKEY *pkey;
} auth_key_t;

typedef struct auth_keyset {
    auth_key_t *keys;
    size_t      n;
} auth_keyset_t;

/* Keys from a JWKS document ({"keys": [...]}: RSA, and EC on P-256; keys
 * with "use" other than "sig" are left out) or a PEM public key. NULL with
 * why. */
auth_keyset_t *auth_keys_parse(const char *text, size_t len, char *why, size_t whylen);
void           auth_keys_free(auth_keyset_t *ks);
/* The text of --jwks: a file, or fetched from an http(s) URL (5 s, 1 MiB). */
char          *auth_keys_read(const char *where, size_t *len, char *why, size_t whylen);

/* base64url without padding (RFC 7515 2); false on a bad character or length. */
bool auth_b64url_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *outlen);

#endif
