/*
 * tls.c - the TLS listener's OpenSSL context (see tls.h).
 *
 * TLS 1.2 and 1.3 only, OpenSSL's default ciphers, no compression, no
 * renegotiation. client_certs = optional asks for a certificate and
 * refuses one that does not verify; required also refuses a client
 * without one.
 */
#include "config.h"
#include "tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "secret.h"
#include "settings.h"

struct tls {
    SSL_CTX *ctx;      /* owned (one reference); replaced whole by tls_reload() */
};

/* The last OpenSSL error as words, after what: "what: reason". */
static int ssl_fail(char *err, size_t errlen, const char *what, const char *path)
{
    unsigned long e = ERR_get_error();
    char reason[256] = "unknown error";

    if (e)
        ERR_error_string_n(e, reason, sizeof(reason));
    ERR_clear_error();
    snprintf(err, errlen, "[tls] %s %s: %s", what, path, reason);
    return -1;
}

/* The key file follows the rule of every secret file (conf/secret.h). */
static int check_key_mode(const char *path, char *err, size_t errlen)
{
    char why[512];
    struct stat st;

    if (stat(path, &st) < 0) {
        snprintf(err, errlen, "[tls] key_file %s: %s", path, strerror(errno));
        return -1;
    }
    if (secret_file_check(path, st.st_mode, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "[tls] key_file %s", why);
        return -1;
    }
    return 0;
}

/* The certificate in force is within its validity: 0, or -1 with the reason. */
static int check_validity(SSL_CTX *ctx, const char *path, char *err, size_t errlen)
{
    X509 *cert = SSL_CTX_get0_certificate(ctx);

    if (!cert) {
        snprintf(err, errlen, "[tls] cert_file %s: no certificate", path);
        return -1;
    }
    if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
        snprintf(err, errlen, "[tls] cert_file %s: the certificate has expired", path);
        return -1;
    }
    if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0) {
        snprintf(err, errlen, "[tls] cert_file %s: the certificate is not valid yet", path);
        return -1;
    }
    return 0;
}

/* The client certificate rules of s on ctx. */
static int set_client_certs(SSL_CTX *ctx, const struct settings *s, char *err, size_t errlen)
{
    STACK_OF(X509_NAME) *names;

    if (s->tls_client_certs == TLS_CERTS_NONE) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        return 0;
    }
    if (!s->tls_ca_file) {
        snprintf(err, errlen, "[tls] client_certs = %s needs ca_file, the CA that signs them",
                 settings_client_certs_name(s->tls_client_certs));
        return -1;
    }
    if (SSL_CTX_load_verify_locations(ctx, s->tls_ca_file, NULL) != 1)
        return ssl_fail(err, errlen, "ca_file", s->tls_ca_file);
    /* Which CAs the server accepts, for clients that choose among certificates. */
    if ((names = SSL_load_client_CA_file(s->tls_ca_file)))
        SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (s->tls_client_certs == TLS_CERTS_REQUIRED ?
                                               SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
    return 0;
}

/* The private key, which must match the certificate loaded before it. */
static int load_key(SSL_CTX *ctx, const struct settings *s, char *err, size_t errlen)
{
    if (SSL_CTX_use_PrivateKey_file(ctx, s->tls_key_file, SSL_FILETYPE_PEM) == 1 &&
        SSL_CTX_check_private_key(ctx) == 1)
        return 0;
    if (ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH)
        return ssl_fail(err, errlen, "key_file", s->tls_key_file);
    ERR_clear_error();
    snprintf(err, errlen, "[tls] key_file %s does not match cert_file %s", s->tls_key_file,
             s->tls_cert_file);
    return -1;
}

/* A context from s's files, or NULL with the reason in err. */
static SSL_CTX *ctx_build(const struct settings *s, char *err, size_t errlen)
{
    SSL_CTX *ctx;

    if (!s->tls_cert_file || !s->tls_key_file) {
        snprintf(err, errlen, "[tls] listen needs cert_file and key_file");
        return NULL;
    }
    if (check_key_mode(s->tls_key_file, err, errlen) < 0)
        return NULL;
    if (!(ctx = SSL_CTX_new(TLS_server_method()))) {
        ssl_fail(err, errlen, "context", "");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    /* Replies are written as they come: a partial write is fine, the buffer may move.
     * An idle connection gives its record buffers back (about 32 KB each,
     * docs/PERFORMANCE.md, TLS): thousands of idle clients are the usual case. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, s->tls_cert_file) != 1)
        ssl_fail(err, errlen, "cert_file", s->tls_cert_file);
    else if (load_key(ctx, s, err, errlen) == 0 &&
             check_validity(ctx, s->tls_cert_file, err, errlen) == 0 &&
             set_client_certs(ctx, s, err, errlen) == 0)
        return ctx;
    SSL_CTX_free(ctx);
    return NULL;
}

struct tls *tls_new(const struct settings *s, char *err, size_t errlen)
{
    struct tls *t = calloc(1, sizeof(*t));

    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (!(t->ctx = ctx_build(s, err, errlen))) {
        free(t);
        return NULL;
    }
    return t;
}

int tls_reload(struct tls *t, const struct settings *s, char *err, size_t errlen)
{
    SSL_CTX *ctx = ctx_build(s, err, errlen);

    if (!ctx)
        return -1;
    SSL_CTX_free(t->ctx);        /* open connections keep their references */
    t->ctx = ctx;
    return 0;
}

SSL *tls_ssl_new(struct tls *t)
{
    return SSL_new(t->ctx);
}

void tls_free(struct tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

int tls_check(const struct settings *s, char *err, size_t errlen)
{
    SSL_CTX *ctx;

    if (!s->tls_listen)
        return 0;
    if (!(ctx = ctx_build(s, err, errlen)))
        return -1;
    SSL_CTX_free(ctx);
    return 0;
}

int tls_peer_name(SSL *ssl, char *buf, size_t len)
{
    X509 *cert = SSL_get0_peer_certificate(ssl);
    int n;

    if (!cert || SSL_get_verify_result(ssl) != X509_V_OK)
        return 0;
    n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, (int)len);
    return n > 0 && (size_t)n < len && strlen(buf) == (size_t)n;
}
