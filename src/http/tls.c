/*
 * tls.c - the --https certificate chain and key, and their reload on SIGHUP.
 *
 * libmicrohttpd 0.9.75 takes a certificate once (MHD_OPTION_HTTPS_MEM_CERT
 * goes into its GnuTLS credentials at the start, and it has no call to change
 * them). So the daemon gets none: it is started with MHD_OPTION_HTTPS_CERT_
 * CALLBACK, GnuTLS's retrieve function, and each handshake asks tls_retrieve
 * for the chain and the key. They come from `cur`, a loaded set that a reload
 * replaces under `lock` (once per handshake, next to ~2 ms of public-key work).
 *
 * GnuTLS keeps the pointers it was handed for the session's life (it never
 * frees them: GNUTLS_CERT_RETR_DEINIT_ALL is not set), so a set lives while
 * a connection that took it is open: the connection holds a reference in its
 * slot (server.c's conn_t, found from the session) and lets it go when it
 * closes. A reload thus never disturbs a connection under way: kept-alive
 * clients go on with the old certificate, new handshakes get the new one.
 *
 * A new pair is checked before it replaces the old: both files PEM, the key
 * the certificate's (GnuTLS's own check, in throwaway credentials, so its
 * words name a mismatch). A bad pair changes nothing; the caller logs why.
 */
#include "tls.h"

#include <errno.h>
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TLS_MAX_CHAIN 16            /* certificates in --cert: the server's and its intermediates */
#define TLS_MAX_PEM   ((size_t)1 << 20)

struct tls_cred {
    gnutls_pcert_st  pcert[TLS_MAX_CHAIN];
    unsigned         n;
    gnutls_privkey_t key;
    int              refs;           /* `cur` and each connection that took it (under lock) */
};

static struct {
    pthread_mutex_t  lock;
    tls_cred_t      *cur;
    tls_cred_t    **(*slot_of)(gnutls_session_t s);
} tls = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void cred_free(tls_cred_t *c)
{
    for (unsigned i = 0; i < c->n; i++) gnutls_pcert_deinit(&c->pcert[i]);
    if (c->key) gnutls_privkey_deinit(c->key);
    free(c);
}

/* Drops one reference (taken under lock); the last one frees the set. */
static void cred_put(tls_cred_t *c)
{
    if (!c) return;
    pthread_mutex_lock(&tls.lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&tls.lock);
    if (last) cred_free(c);
}

/* A whole PEM file, NUL-terminated; NULL with p set when it cannot be read
 * or holds no PEM block with the label. */
static char *pem_read(const char *flag, const char *path, const char *label, problem_t *p)
{
    FILE *f = fopen(path, "rb");
    if (!f) { problem_set(p, PB_INTERNAL_ERROR, "%s %s: %s", flag, path, strerror(errno)); return NULL; }
    sbuf_t sb;
    sb_init(&sb, NULL, 4096);
    char   buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && sb.len + n <= TLS_MAX_PEM) sb_add(&sb, buf, n);
    bool err = ferror(f) || n > 0;
    fclose(f);
    if (err) problem_set(p, PB_INTERNAL_ERROR, "%s %s: unreadable or larger than 1 MiB", flag, path);
    else if (!strstr(sb.p, "-----BEGIN ") || !strstr(sb.p, label))
        problem_set(p, PB_INTERNAL_ERROR, "%s %s: no PEM %s in the file", flag, path, label);
    else return sb.p;
    explicit_bzero(sb.p, sb.len);
    sb_release(&sb);
    return NULL;
}

/* "subject, expires <UTC time>" of the chain's first certificate. */
static void cred_describe(const tls_cred_t *c, char *out, size_t cap)
{
    gnutls_x509_crt_t crt;
    snprintf(out, cap, "(not readable)");
    if (gnutls_x509_crt_init(&crt) < 0) return;
    if (gnutls_x509_crt_import(crt, &c->pcert[0].cert, GNUTLS_X509_FMT_DER) == 0) {
        gnutls_datum_t dn = {0};
        time_t         exp = gnutls_x509_crt_get_expiration_time(crt);
        struct tm      tm;
        char           when[32] = "?";
        if (exp != (time_t)-1 && gmtime_r(&exp, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        if (gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0) {
            snprintf(out, cap, "%.*s, expires %s%s", (int)dn.size, (const char *)dn.data, when,
                     exp != (time_t)-1 && exp < time(NULL) ? " (expired)" : "");
            gnutls_free(dn.data);
        }
    }
    gnutls_x509_crt_deinit(crt);
}

/* The pair parsed for handshakes; NULL with p set. */
static tls_cred_t *cred_parse(const char *cert_pem, const char *key_pem, const char *cert_path,
                              const char *key_path, problem_t *p)
{
    gnutls_datum_t cd = {(unsigned char *)cert_pem, (unsigned)strlen(cert_pem)};
    gnutls_datum_t kd = {(unsigned char *)key_pem, (unsigned)strlen(key_pem)};
    gnutls_certificate_credentials_t check;
    if (gnutls_certificate_allocate_credentials(&check) < 0) {
        problem_set(p, PB_INTERNAL_ERROR, "--https: out of memory for the GnuTLS credentials");
        return NULL;
    }
    int rc = gnutls_certificate_set_x509_key_mem(check, &cd, &kd, GNUTLS_X509_FMT_PEM);
    gnutls_certificate_free_credentials(check);
    if (rc < 0) {
        problem_set(p, PB_INTERNAL_ERROR, "GnuTLS failed to set up the certificate and key: %s (--cert %s, --key %s)",
                    gnutls_strerror(rc), cert_path, key_path);
        return NULL;
    }
    tls_cred_t *c = cr_xcalloc(1, sizeof *c);
    c->n = TLS_MAX_CHAIN;
    rc = gnutls_pcert_list_import_x509_raw(c->pcert, &c->n, &cd, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0) {
        c->n = 0;
        cred_free(c);
        problem_set(p, PB_INTERNAL_ERROR, "--cert %s: %s (at most %d certificates)", cert_path, gnutls_strerror(rc),
                    TLS_MAX_CHAIN);
        return NULL;
    }
    if ((rc = gnutls_privkey_init(&c->key)) < 0 ||
        (rc = gnutls_privkey_import_x509_raw(c->key, &kd, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        cred_free(c);
        problem_set(p, PB_INTERNAL_ERROR, "--key %s: %s", key_path, gnutls_strerror(rc));
        return NULL;
    }
    c->refs = 1;
    return c;
}

bool tls_load(const char *cert_path, const char *key_path, const char *what, problem_t *p)
{
    char *cert = pem_read("--cert", cert_path, "CERTIFICATE", p);
    if (!cert) return false;
    char *key = pem_read("--key", key_path, "PRIVATE KEY", p);
    if (!key) { free(cert); return false; }
    tls_cred_t *c = cred_parse(cert, key, cert_path, key_path, p);
    explicit_bzero(key, strlen(key));
    free(key);
    free(cert);
    if (!c) return false;
    char desc[300];
    cred_describe(c, desc, sizeof desc);
    pthread_mutex_lock(&tls.lock);
    tls_cred_t *old = tls.cur;
    tls.cur = c;
    pthread_mutex_unlock(&tls.lock);
    cred_put(old);
    LOG_I("%s: certificate %s (%s): %s", what, cert_path, old ? "reloaded" : "loaded", desc);
    return true;
}

void tls_set_slot_fn(tls_cred_t **(*slot_of)(gnutls_session_t s))
{
    tls.slot_of = slot_of;
}

int tls_retrieve(gnutls_session_t s, const gnutls_datum_t *req_ca_rdn, int nreqs,
                 const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length, gnutls_pcert_st **pcert,
                 unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
    (void)req_ca_rdn; (void)nreqs; (void)pk_algos; (void)pk_algos_length;
    tls_cred_t **slot = tls.slot_of ? tls.slot_of(s) : NULL;
    if (!slot) {
        LOG_E("https: a handshake of a connection not known to the server is refused");
        return -1;
    }
    tls_cred_t *prev = *slot;
    pthread_mutex_lock(&tls.lock);
    tls_cred_t *c = tls.cur;
    if (c && c != prev) c->refs++;
    pthread_mutex_unlock(&tls.lock);
    if (!c) return -1;
    /* called again in one handshake (another cipher suite tried): GnuTLS
     * keeps only the last answer, so the slot holds the last set given */
    if (c != prev) {
        *slot = c;
        cred_put(prev);
    }
    *pcert = c->pcert;
    *pcert_length = c->n;
    *pkey = c->key;
    return 0;
}

void tls_release(tls_cred_t **slot)
{
    cred_put(*slot);
    *slot = NULL;
}

void tls_unload(void)
{
    pthread_mutex_lock(&tls.lock);
    tls_cred_t *c = tls.cur;
    tls.cur = NULL;
    pthread_mutex_unlock(&tls.lock);
    cred_put(c);
}
