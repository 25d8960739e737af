/*
 * tls.h - private to http/: the --https certificate chain and key, handed
 * to every TLS handshake by GnuTLS's certificate callback, and replaced on
 * SIGHUP without a restart (tls.c says how and why).
 */
#ifndef CORAINE_HTTP_TLS_H
#define CORAINE_HTTP_TLS_H

#include "../core/core.h"

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <stdbool.h>

/* One loaded certificate chain and key; a connection holds the one its
 * handshake used until it closes (tls_release). */
typedef struct tls_cred tls_cred_t;

/* Reads --cert and --key, checks that they are PEM and that the key is the
 * certificate's, and makes them the ones new handshakes get; the previous
 * ones stay with the connections that use them. false with p set (naming
 * the file and GnuTLS's words): nothing changes. what: written at INFO with
 * the certificate's subject and expiry ("--https" at the start, "SIGHUP"). */
bool tls_load(const char *cert_path, const char *key_path, const char *what, problem_t *p);

/* Where the connection of a session keeps its tls_cred_t (server.c knows
 * the connections); NULL: not known, the handshake is refused. */
void tls_set_slot_fn(tls_cred_t **(*slot_of)(gnutls_session_t s));

/* For MHD_OPTION_HTTPS_CERT_CALLBACK (gnutls_certificate_retrieve_function2). */
int tls_retrieve(gnutls_session_t s, const gnutls_datum_t *req_ca_rdn, int nreqs,
                 const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length, gnutls_pcert_st **pcert,
                 unsigned int *pcert_length, gnutls_privkey_t *pkey);

/* A connection closes: the credentials its handshake took are let go. */
void tls_release(tls_cred_t **slot);

/* The server stops: the current credentials are let go (freed when the
 * last connection holding them has closed: after MHD_stop_daemon, now). */
void tls_unload(void);

#endif
