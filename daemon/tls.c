/*
 * tls.c - the TLS listener's OpenSSL context (see tls.h).
 *
 * TLS 1.2 and 1.3 only, OpenSSL's default ciphers, no compression, no
 * renegotiation. client_certs = optional asks for a certificate and
 * refuses one that does not verify; required also refuses a client
 * without one. crl_file adds the CAs' revocation lists: a client
 * certificate they list is refused like one that does not verify.
 */
#include "config.h"
#include "tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

/* The CA certificate of ctx's store named by issuer that signed crl, or NULL. */
static X509 *crl_signer(SSL_CTX *ctx, X509_CRL *crl)
{
    STACK_OF(X509_OBJECT) *objs = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));

    for (int i = 0; i < sk_X509_OBJECT_num(objs); i++) {
        X509 *ca = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));

        if (ca && X509_NAME_cmp(X509_get_subject_name(ca), X509_CRL_get_issuer(crl)) == 0 &&
            X509_CRL_verify(crl, X509_get0_pubkey(ca)) == 1)
            return ca;
    }
    ERR_clear_error();
    return NULL;
}

/* Whether infos holds a CRL of ca. */
static int crl_of(STACK_OF(X509_INFO) *infos, X509 *ca)
{
    for (int i = 0; i < sk_X509_INFO_num(infos); i++) {
        X509_CRL *crl = sk_X509_INFO_value(infos, i)->crl;

        if (crl && X509_NAME_cmp(X509_get_subject_name(ca), X509_CRL_get_issuer(crl)) == 0)
            return 1;
    }
    return 0;
}

/*
 * crl_file's CRLs into ctx's store, which holds ca_file's CAs: each signed by
 * one of them and not past its nextUpdate, one for each of them (a CA
 * without one would have all its clients refused). Only the client's own
 * certificate is checked (X509_V_FLAG_CRL_CHECK): a CA of ca_file that is
 * no longer trusted is taken out of ca_file, not revoked.
 */
static int load_crls(SSL_CTX *ctx, const char *path, char *err, size_t errlen)
{
    STACK_OF(X509_OBJECT) *objs = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
    STACK_OF(X509_INFO) *infos = NULL;
    char who[256];
    int rc = -1, n = 0;
    BIO *bio;

    if (!(bio = BIO_new_file(path, "r")))
        return ssl_fail(err, errlen, "crl_file", path);
    if (!(infos = PEM_X509_INFO_read_bio(bio, NULL, NULL, NULL))) {
        ssl_fail(err, errlen, "crl_file", path);
        goto out;
    }
    for (int i = 0; i < sk_X509_INFO_num(infos); i++) {
        X509_CRL *crl = sk_X509_INFO_value(infos, i)->crl;
        const ASN1_TIME *next;

        if (!crl)
            continue;
        X509_NAME_oneline(X509_CRL_get_issuer(crl), who, sizeof(who));
        if (!crl_signer(ctx, crl)) {
            snprintf(err, errlen, "[tls] crl_file %s: the CRL of %s is not signed by a CA of "
                     "ca_file", path, who);
            goto out;
        }
        /* Past it, OpenSSL refuses every client of that CA ("CRL has expired"). */
        if ((next = X509_CRL_get0_nextUpdate(crl)) && X509_cmp_current_time(next) <= 0) {
            snprintf(err, errlen, "[tls] crl_file %s: the CRL of %s has expired (its next "
                     "update was due); fetch the CA's current one", path, who);
            goto out;
        }
        if (X509_STORE_add_crl(SSL_CTX_get_cert_store(ctx), crl) != 1) {
            ssl_fail(err, errlen, "crl_file", path);
            goto out;
        }
        n++;
    }
    if (!n) {
        snprintf(err, errlen, "[tls] crl_file %s: no CRL in it", path);
        goto out;
    }
    for (int i = 0; i < sk_X509_OBJECT_num(objs); i++) {
        X509 *ca = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));

        if (ca && !crl_of(infos, ca)) {
            X509_NAME_oneline(X509_get_subject_name(ca), who, sizeof(who));
            snprintf(err, errlen, "[tls] crl_file %s has no CRL of %s (ca_file): every "
                     "certificate it signs would be refused", path, who);
            goto out;
        }
    }
    X509_STORE_set_flags(SSL_CTX_get_cert_store(ctx), X509_V_FLAG_CRL_CHECK);
    rc = 0;
out:
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    BIO_free(bio);
    return rc;
}

/*
 * Which client certificate a refused handshake showed: OpenSSL keeps no
 * peer certificate after a failed verification, so the verify callback
 * writes the words down on the SSL (ex_data, a malloc'd string freed with
 * the SSL) for the failure's log line.
 */
static int refused_cert_index = -1;

static void refused_cert_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                              void *argp)
{
    (void)parent; (void)ad; (void)idx; (void)argl; (void)argp;
    free(ptr);
}

/* "subject /CN=alice, notAfter 2020-01-02T00:00:00Z" of cert into buf. */
static void cert_words(X509 *cert, char *buf, size_t len)
{
    char subject[256], after[32] = "?";
    struct tm tm;

    /* oneline escapes what is not printable: the subject is the client's text. */
    X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof(subject));
    if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) == 1)
        strftime(after, sizeof(after), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(buf, len, "subject %s, notAfter %s", subject, after);
}

/* The verdict stays OpenSSL's; a refusal only writes down whose it was. */
static int verify_cb(int ok, X509_STORE_CTX *x)
{
    SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
    X509 *cert = X509_STORE_CTX_get0_cert(x);
    char words[320];

    if (ok || !ssl || !cert || refused_cert_index < 0 ||
        SSL_get_ex_data(ssl, refused_cert_index))
        return ok;
    cert_words(cert, words, sizeof(words));
    SSL_set_ex_data(ssl, refused_cert_index, strdup(words));   /* NULL: no words, no harm */
    return ok;
}

/* The client certificate rules of s on ctx. */
static int set_client_certs(SSL_CTX *ctx, const struct settings *s, char *err, size_t errlen)
{
    STACK_OF(X509_NAME) *names;

    if (s->tls_client_certs == TLS_CERTS_NONE) {
        if (s->tls_crl_file) {
            snprintf(err, errlen, "[tls] crl_file revokes client certificates: it needs "
                     "client_certs = optional or required");
            return -1;
        }
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
    if (s->tls_crl_file && load_crls(ctx, s->tls_crl_file, err, errlen) < 0)
        return -1;
    /* Which CAs the server accepts, for clients that choose among certificates. */
    if ((names = SSL_load_client_CA_file(s->tls_ca_file)))
        SSL_CTX_set_client_CA_list(ctx, names);
    if (refused_cert_index < 0)
        refused_cert_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, refused_cert_free);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (s->tls_client_certs == TLS_CERTS_REQUIRED ?
                                               SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), verify_cb);
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

int64_t tls_cert_not_after(const struct tls *t)
{
    X509 *cert = SSL_CTX_get0_certificate(t->ctx);
    int days = 0, secs = 0;

    /* From now (NULL) to notAfter, added to now: the C library has no
     * portable UTC mktime. The context was built from a certificate, so
     * one is there. */
    if (!cert || ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(cert)) != 1)
        return 0;
    return (int64_t)time(NULL) + (int64_t)days * 86400 + secs;
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

const char *tls_verify_failure(const SSL *ssl)
{
    long v = SSL_get_verify_result(ssl);

    return v == X509_V_OK ? NULL : X509_verify_cert_error_string(v);
}

const char *tls_refused_cert(const SSL *ssl)
{
    return refused_cert_index < 0 ? NULL : SSL_get_ex_data(ssl, refused_cert_index);
}

int tls_peer_cert_words(SSL *ssl, char *buf, size_t len)
{
    X509 *cert = SSL_get0_peer_certificate(ssl);

    if (!cert)
        return 0;
    cert_words(cert, buf, len);
    return 1;
}
