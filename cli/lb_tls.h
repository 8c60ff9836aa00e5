/*
 * lb_tls.h - TLS for the lockbroker CLI's connections, with OpenSSL: the
 * context made once from --cacert, --cert and --key; per connection the
 * handshake, which checks the broker's certificate against the CA and the
 * host name given with -H; reads and writes on a non-blocking socket.
 *
 * Nothing here polls, exits or prints: a call that cannot go on says
 * which way to poll() the socket (TLS_IO_WANT_READ, TLS_IO_WANT_WRITE)
 * and is called again once it is ready. lb_client.c does the waiting.
 */
#ifndef LOCKBROKER_CLI_TLS_H
#define LOCKBROKER_CLI_TLS_H

#include <stddef.h>

/* What --cacert, --cert and --key (or their LOCKBROKER_* variables) name. */
struct tls_config {
    const char *cacert;  /* PEM CA certificates; NULL: the system's default store */
    const char *cert;    /* PEM client certificate (chain); NULL: none */
    const char *key;     /* its PEM private key, not encrypted; NULL: in cert's file */
};

struct tls_ctx;    /* an SSL_CTX and the socket BIO method its connections share */
struct tls_conn;   /* one connection's SSL */

enum tls_io {
    TLS_IO_OK,          /* done: the handshake ended, or bytes moved */
    TLS_IO_WANT_READ,   /* poll() for POLLIN, then call again with the same arguments */
    TLS_IO_WANT_WRITE,  /* poll() for POLLOUT, likewise */
    TLS_IO_CLOSED,      /* the broker closed (close_notify, end of file, reset) */
    TLS_IO_ERROR,       /* anything else; err says what, in words that follow "HOST:PORT: " */
};

/*
 * Loads the files (TLS 1.2 or later, peer verification on). Returns a
 * context the caller frees with tls_ctx_free(), or NULL with a reason in
 * err that names the file at fault.
 */
struct tls_ctx *tls_ctx_new(const struct tls_config *cfg, char *err, size_t errlen);
void tls_ctx_free(struct tls_ctx *t);

/*
 * A client connection on the connected socket fd (which stays the
 * caller's to close), that will accept only a certificate valid for host:
 * an IP literal (IPv6 without brackets), or a name, then also sent as SNI.
 * Returns it (free with tls_conn_free()), or NULL with err.
 */
struct tls_conn *tls_conn_new(struct tls_ctx *t, int fd, const char *host, char *err,
                              size_t errlen);

/* Drives the handshake on. TLS_IO_OK once it is over (see tls_conn_verdict_due). */
enum tls_io tls_conn_handshake(struct tls_conn *c, char *err, size_t errlen);

/*
 * Whether the broker's verdict on the client (certificate, or its lack) is
 * still to come after a handshake that looked successful: TLS 1.3 ends
 * the client's handshake before the server has checked the client's
 * certificate, so a server that asked for one refuses it only on the next
 * read. 0 under TLS 1.2 (refused in the handshake) or when none was asked.
 */
int tls_conn_verdict_due(const struct tls_conn *c);

/* Up to cap bytes into buf; *got is set when TLS_IO_OK. */
enum tls_io tls_conn_read(struct tls_conn *c, char *buf, size_t cap, size_t *got, char *err,
                          size_t errlen);

/* Some of buf[0..len) (len > 0); *put is set when TLS_IO_OK. After a WANT,
 * the same buf and len again. Never raises SIGPIPE. */
enum tls_io tls_conn_write(struct tls_conn *c, const char *buf, size_t len, size_t *put,
                           char *err, size_t errlen);

/*
 * Whether bytes OpenSSL has decrypted are waiting to be read: poll() does
 * not see them, since they have left the socket already.
 */
int tls_conn_pending(const struct tls_conn *c);

/* Sends close_notify if the connection is still sound (without waiting), and frees c. */
void tls_conn_free(struct tls_conn *c);

#endif
