/*
 * lb_tls.c - TLS for the lockbroker CLI (lb_tls.h): OpenSSL over the client's
 * own non-blocking socket.
 *
 * The socket is reached through a BIO of our own rather than OpenSSL's
 * socket BIO, which writes with write(2): a broker that has gone away
 * would kill lockbroker with SIGPIPE, and lockbroker cannot ignore SIGPIPE
 * for good, since `run`'s COMMAND would inherit that. Ours sends with
 * MSG_NOSIGNAL, as lb_send() does for plain text.
 */
#include "config.h"

#include "lb_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct tls_ctx {
    SSL_CTX *ctx;
    BIO_METHOD *bio;            /* the socket BIO below */
    struct tls_config cfg;      /* strings borrowed: argv or the environment */
};

struct tls_conn {
    SSL *ssl;
    const struct tls_ctx *t;
    char host[256];             /* what the broker's certificate must be valid for */
    int cert_requested;         /* the broker asked for a client certificate */
    int sound;                  /* no error or end seen: close_notify may be sent */
};

/* ------------------------------------------------------- the socket BIO */

static int sock_bio_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int sock_bio_write(BIO *b, const char *buf, int len)
{
    ssize_t n = send(sock_bio_fd(b), buf, (size_t)len, MSG_NOSIGNAL);

    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)n;
}

static int sock_bio_read(BIO *b, char *buf, int len)
{
    ssize_t n = recv(sock_bio_fd(b), buf, (size_t)len, 0);

    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_read(b);
    return (int)n;
}

static long sock_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    return cmd == BIO_CTRL_FLUSH;   /* nothing is buffered here */
}

static int sock_bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

/* -------------------------------------------------------------- context */

/* No passphrase prompt on the terminal: an encrypted key does not load. */
static int no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
    return 0;
}

/* Called on the client when the server sends a CertificateRequest. */
static int on_cert_request(SSL *ssl, void *arg)
{
    struct tls_conn *c = SSL_get_app_data(ssl);

    if (c)
        c->cert_requested = 1;
    return 1;   /* go on, with the certificate loaded (or none) */
}

/* OpenSSL's reason for the error code (the last failure: ERR_peek_last_error()). */
static const char *ssl_reason(unsigned long code)
{
    const char *r = ERR_reason_error_string(code);

    return r ? r : "unknown error";
}

static const char *last_reason(void)
{
    return ssl_reason(ERR_peek_last_error());
}

/* A file that fopen() cannot read gives the better message: its errno. */
static int file_readable(const char *what, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");

    if (!f) {
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return 0;
    }
    fclose(f);
    return 1;
}

struct tls_ctx *tls_ctx_new(const struct tls_config *cfg, char *err, size_t errlen)
{
    struct tls_ctx *t = calloc(1, sizeof(*t));
    const char *key = cfg->key ? cfg->key : cfg->cert;

    ERR_clear_error();
    if (!t || !(t->ctx = SSL_CTX_new(TLS_client_method())) ||
        !(t->bio = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                "lockbroker socket")) ||
        !BIO_meth_set_write(t->bio, sock_bio_write) ||
        !BIO_meth_set_read(t->bio, sock_bio_read) ||
        !BIO_meth_set_ctrl(t->bio, sock_bio_ctrl) ||
        !BIO_meth_set_create(t->bio, sock_bio_create)) {
        snprintf(err, errlen, "cannot set up TLS: %s", t ? last_reason() : strerror(errno));
        tls_ctx_free(t);
        return NULL;
    }
    t->cfg = *cfg;
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_cert_cb(t->ctx, on_cert_request, NULL);
    SSL_CTX_set_default_passwd_cb(t->ctx, no_passphrase);

    if (cfg->cacert) {
        if (!file_readable("CA file", cfg->cacert, err, errlen))
            goto fail;
        if (SSL_CTX_load_verify_locations(t->ctx, cfg->cacert, NULL) != 1) {
            snprintf(err, errlen, "CA file %s: no PEM certificate in it (%s)", cfg->cacert,
                     last_reason());
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        snprintf(err, errlen, "cannot load the system's CA certificates (%s); give --cacert",
                 last_reason());
        goto fail;
    }
    if (cfg->cert) {
        if (!file_readable("certificate file", cfg->cert, err, errlen))
            goto fail;
        if (SSL_CTX_use_certificate_chain_file(t->ctx, cfg->cert) != 1) {
            snprintf(err, errlen, "certificate file %s: no PEM certificate in it (%s)",
                     cfg->cert, last_reason());
            goto fail;
        }
        if (!file_readable("key file", key, err, errlen))
            goto fail;
        if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
            if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
                snprintf(err, errlen, "key file %s does not match certificate file %s", key,
                         cfg->cert);
            else if (cfg->key)
                snprintf(err, errlen, "key file %s: no PEM private key in it, or an encrypted "
                         "one (%s)", key, last_reason());
            else
                snprintf(err, errlen, "certificate file %s has no private key in it (or an "
                         "encrypted one): give the key file with --key", key);
            goto fail;
        }
        if (SSL_CTX_check_private_key(t->ctx) != 1) {
            snprintf(err, errlen, "key file %s does not match certificate file %s", key,
                     cfg->cert);
            goto fail;
        }
    }
    return t;
fail:
    tls_ctx_free(t);
    return NULL;
}

void tls_ctx_free(struct tls_ctx *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    BIO_meth_free(t->bio);
    free(t);
}

/* ---------------------------------------------------------- connections */

struct tls_conn *tls_conn_new(struct tls_ctx *t, int fd, const char *host, char *err,
                              size_t errlen)
{
    struct tls_conn *c = calloc(1, sizeof(*c));
    unsigned char addr[16];
    int is_ip = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
    BIO *b = NULL;

    ERR_clear_error();
    if (!c || !(c->ssl = SSL_new(t->ctx)) || !(b = BIO_new(t->bio)))
        goto fail;
    c->t = t;
    snprintf(c->host, sizeof(c->host), "%s", host);
    BIO_set_data(b, (void *)(intptr_t)fd);
    SSL_set_bio(c->ssl, b, b);   /* the SSL owns the BIO now */
    SSL_set_app_data(c->ssl, c);
    SSL_set_hostflags(c->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    /* A name is checked against DNS names (and sent as SNI), an address against IP ones. */
    if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host) != 1
              : SSL_set1_host(c->ssl, host) != 1 || SSL_set_tlsext_host_name(c->ssl, host) != 1)
        goto fail;
    c->sound = 1;
    return c;
fail:
    snprintf(err, errlen, "cannot set up TLS for %s: %s", host,
             c ? last_reason() : strerror(errno));
    if (c) {
        SSL_free(c->ssl);
        free(c);
    }
    return NULL;
}

/* Reasons that say the other end does not speak TLS at all. */
static int not_tls(int reason)
{
    return reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
           reason == SSL_R_RECORD_LENGTH_MISMATCH || reason == SSL_R_HTTP_REQUEST ||
           reason == SSL_R_UNKNOWN_PROTOCOL || reason == SSL_R_UNSUPPORTED_PROTOCOL;
}

/*
 * What an SSL call's result ret means (SSL_get_error), for the callers:
 * the waits, the ends, and for the rest a sentence in err.
 */
static enum tls_io tls_result(struct tls_conn *c, int ret, char *err, size_t errlen)
{
    int e = SSL_get_error(c->ssl, ret), reason;
    unsigned long code;

    switch (e) {
    case SSL_ERROR_WANT_READ:
        return TLS_IO_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return TLS_IO_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN:
        c->sound = 0;
        return TLS_IO_CLOSED;
    case SSL_ERROR_SYSCALL:
        c->sound = 0;
        if (ERR_peek_error() == 0 && (errno == 0 || errno == ECONNRESET || errno == EPIPE))
            return TLS_IO_CLOSED;   /* the end of the TCP connection, without close_notify */
        snprintf(err, errlen, "TLS: %s", ERR_peek_error() ? last_reason() : strerror(errno));
        return TLS_IO_ERROR;
    case SSL_ERROR_SSL:
        break;
    default:
        c->sound = 0;
        snprintf(err, errlen, "TLS: unexpected OpenSSL error %d", e);
        return TLS_IO_ERROR;
    }

    c->sound = 0;
    code = ERR_peek_error();
    reason = ERR_GET_LIB(code) == ERR_LIB_SSL ? ERR_GET_REASON(code) : 0;
    if (reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)
        return TLS_IO_CLOSED;
    if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        long v = SSL_get_verify_result(c->ssl);

        if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
            snprintf(err, errlen, "the broker's TLS certificate is not valid for %s (%s): give "
                     "-H the name or address it was made for", c->host,
                     X509_verify_cert_error_string(v));
        else if (c->t->cfg.cacert)
            snprintf(err, errlen, "the broker's TLS certificate does not verify against %s: %s",
                     c->t->cfg.cacert, X509_verify_cert_error_string(v));
        else
            snprintf(err, errlen, "the broker's TLS certificate does not verify against the "
                     "system's CA certificates: %s (--cacert: the CA that signed it)",
                     X509_verify_cert_error_string(v));
        return TLS_IO_ERROR;
    }
    if (reason > SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256) {
        /* An alert from the broker: it refused the handshake, which its log explains. */
        snprintf(err, errlen, "the broker refused the TLS connection: %s (%s)", ssl_reason(code),
                 c->cert_requested && !c->t->cfg.cert
                     ? "it asks for a client certificate: give --cert and --key"
                     : "its log says why");
        return TLS_IO_ERROR;
    }
    if (not_tls(reason)) {
        snprintf(err, errlen, "the broker does not answer in TLS (%s): is this its "
                 "plain-text port?", ssl_reason(code));
        return TLS_IO_ERROR;
    }
    snprintf(err, errlen, "TLS: %s", ssl_reason(code));
    return TLS_IO_ERROR;
}

enum tls_io tls_conn_handshake(struct tls_conn *c, char *err, size_t errlen)
{
    int r;

    ERR_clear_error();
    errno = 0;
    if ((r = SSL_connect(c->ssl)) == 1)
        return TLS_IO_OK;
    return tls_result(c, r, err, errlen);
}

int tls_conn_verdict_due(const struct tls_conn *c)
{
    return c->cert_requested && SSL_version(c->ssl) >= TLS1_3_VERSION;
}

enum tls_io tls_conn_read(struct tls_conn *c, char *buf, size_t cap, size_t *got, char *err,
                          size_t errlen)
{
    int n;

    ERR_clear_error();
    errno = 0;
    n = SSL_read(c->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
    if (n > 0) {
        *got = (size_t)n;
        return TLS_IO_OK;
    }
    return tls_result(c, n, err, errlen);
}

enum tls_io tls_conn_write(struct tls_conn *c, const char *buf, size_t len, size_t *put,
                           char *err, size_t errlen)
{
    int n;

    ERR_clear_error();
    errno = 0;
    n = SSL_write(c->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
    if (n > 0) {
        *put = (size_t)n;
        return TLS_IO_OK;
    }
    return tls_result(c, n, err, errlen);
}

int tls_conn_pending(const struct tls_conn *c)
{
    return SSL_pending(c->ssl) > 0;
}

void tls_conn_free(struct tls_conn *c)
{
    if (!c)
        return;
    /* Once, without waiting: the broker takes an end without it as well (PROTOCOL.md, TLS). */
    if (c->sound && SSL_is_init_finished(c->ssl)) {
        ERR_clear_error();
        SSL_shutdown(c->ssl);
    }
    ERR_clear_error();
    SSL_free(c->ssl);
    free(c);
}
