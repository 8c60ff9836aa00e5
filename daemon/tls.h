/*
 * tls.h - the TLS listener's OpenSSL context: certificate, key, the CA of
 * client certificates, and the certificate logins (PROTOCOL.md, Transport).
 *
 * A context is built whole from the files and replaced whole at a reload:
 * connections already open keep the one they were accepted with (each
 * SSL holds a reference), new ones get the new one. A file that does not
 * load leaves the context in force as it was.
 */
#ifndef LOCKBROKER_TLS_H
#define LOCKBROKER_TLS_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

struct settings;
struct tls;

/* A TLS handshake not finished this long after the accept is closed. */
#define TLS_HANDSHAKE_MS 10000

/* TLS connections refused with a line after their handshake (max_clients,
 * max_clients_per_address) at once; more are closed without one. They use
 * descriptors beyond max_clients: a few, within main.c's FD_RESERVE. */
#define TLS_REFUSALS_MAX 4

/* Builds the context from s's [tls] files. NULL with the reason in err. */
struct tls *tls_new(const struct settings *s, char *err, size_t errlen);

/* SIGHUP: the files again. 0, or -1 with the reason in err (the old context stays). */
int tls_reload(struct tls *t, const struct settings *s, char *err, size_t errlen);

/* The notAfter of the certificate new connections are served, in seconds
 * since the epoch (0 if it cannot be read): the one read at start or at
 * the last reload that loaded. */
int64_t tls_cert_not_after(const struct tls *t);

/* A new server-side SSL for one accepted connection, or NULL (out of memory). */
SSL *tls_ssl_new(struct tls *t);

void tls_free(struct tls *t);     /* NULL is fine */

/*
 * lockbrokerd -t: every check a start makes, and more: the files are
 * readable, the key matches the certificate, the certificate is within its
 * validity, the key file is not readable or writable by others. 0, or -1
 * with the first problem in err.
 */
int tls_check(const struct settings *s, char *err, size_t errlen);

/*
 * After a finished handshake: the subject common name of the client's
 * certificate, when it sent one and it verified against ca_file, into buf
 * (NUL-terminated). 1 if so, 0 if there is none (no certificate, or a name
 * that does not fit or holds a NUL).
 */
int tls_peer_name(SSL *ssl, char *buf, size_t len);

/*
 * After a failed handshake: why the client's certificate did not verify
 * ("certificate revoked", "certificate has expired"...), or NULL when it
 * was not the certificate. A static string.
 */
const char *tls_verify_failure(const SSL *ssl);

/*
 * After a handshake that refused the client's certificate: which one,
 * "subject /CN=alice, notAfter 2020-01-02T00:00:00Z", or NULL. Borrowed:
 * freed with ssl.
 */
const char *tls_refused_cert(const SSL *ssl);

/*
 * After a finished handshake: the same words for the certificate the client
 * showed, into buf (NUL-terminated). 1, or 0 when it showed none.
 */
int tls_peer_cert_words(SSL *ssl, char *buf, size_t len);

#endif
