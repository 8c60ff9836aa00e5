/*
 * lb_client.h - the lockbroker CLI's connection to the daemon: where it is
 * (address parsing), connecting, and line-at-a-time I/O with deadlines.
 *
 * No libevent: the client is a plain poll() program. Nothing here exits or
 * prints; functions return a status and fill a caller buffer with the reason.
 */
#ifndef LOCKBROKER_CLI_CLIENT_H
#define LOCKBROKER_CLI_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "proto.h"

struct tls_ctx;    /* lb_tls.h */
struct tls_conn;
struct pollfd;

/*
 * Exit statuses of lockbroker itself. `run` otherwise exits with the
 * command's status (128+N when signal N killed it). The 120s are rarely
 * used by commands; 124-127 follow timeout(1) and the shells; new codes
 * are taken downwards from 117. `status NAME` answers a question with 0 or
 * 1, as grep(1) and test(1) do; no other failure uses 1. Keep this table,
 * usage() in lockbroker.c and cli/lockbroker.1 in step.
 */
enum cli_exit {
    CLI_EXIT_OK          = 0,
    CLI_EXIT_FREE        = 1,   /* status NAME: the lock is free (0: held) */
    CLI_EXIT_BACKEND_DOWN = 115, /* ping, status (no NAME): the broker answers, but STATS
                                  * zk_state says it cannot reach ZooKeeper */
    CLI_EXIT_JEOPARDY    = 116, /* run: the command ran, and the broker did not confirm the
                                 * lock (CHECK) in time */
    CLI_EXIT_DENIED      = 117, /* AUTH refused, or ERR NOAUTH / DENIED: log in, or another NAME */
    CLI_EXIT_NOT_HELD    = 118, /* renew, release: ERR NOT_HELD (wrong token, or the lease ended) */
    CLI_EXIT_CONFLICT    = 119, /* run, lease: ERR CONFLICT, the lock is in use in another mode/limit */
    CLI_EXIT_LOST        = 120, /* run: the lock was lost while the command ran */
    CLI_EXIT_UNAVAILABLE = 121, /* broker unreachable, connection closed, no reply,
                                 * ERR UNAVAILABLE/LIMIT, a failed TLS handshake */
    CLI_EXIT_BAD_NAME    = 122, /* invalid lock name (checked here, or ERR BAD_NAME) */
    CLI_EXIT_PROTOCOL    = 123, /* unexpected reply (ERR BAD_COMMAND, ERR INTERNAL, ...) */
    CLI_EXIT_TIMEOUT     = 124, /* run -w, lease -w: the lock was not granted in time (run:
                                 * not with a window to start the command in) */
    CLI_EXIT_USAGE       = 125, /* bad command line, or lockbroker itself failed */
    CLI_EXIT_CANNOT_EXEC = 126, /* run: the command was found but could not be executed */
    CLI_EXIT_NOT_FOUND   = 127, /* run: the command was not found */
};

#define CLIENT_ADDR_DEFAULT "127.0.0.1:7411"   /* the daemon's default listen address */
#define CLIENT_PORT_DEFAULT "7411"             /* its port, for -H HOST without one */
#define CLIENT_LINE_MAX 65536                  /* longest reply line accepted, LF excluded */
#define CLIENT_ERR_MAX 512                     /* size for the err buffers below */

enum lb_addr_kind { CLIENT_ADDR_TCP, CLIENT_ADDR_UNIX };

/* Who to log in as: lb_connect() sends AUTH <user> <password> first. */
struct lb_auth {
    char user[PROTO_USER_MAX + 1];          /* proto_user_valid() */
    char password[PROTO_PASSWORD_MAX + 1];  /* 1-128 bytes 0x21-0x7e */
};

struct lb_addr {
    enum lb_addr_kind kind;
    char host[256];     /* TCP: host name or literal, without brackets */
    char port[16];      /* TCP: decimal port 1-65535 */
    char path[108];     /* Unix: socket path (fits sockaddr_un.sun_path) */
    char spec[400];     /* canonical spelling for LOCKBROKER_ADDR: "h:p", "[v6]:p", "unix:/p" */
    const struct lb_auth *auth;  /* borrowed; NULL: no AUTH. The parsers set NULL */
    struct tls_ctx *tls;             /* borrowed; NULL: plain text. The parsers set NULL */
};

/*
 * Parses "HOST:PORT" or "[IPV6]:PORT" (hostport_only != 0, the -H form), or
 * additionally "/PATH" and "unix:PATH" (the LOCKBROKER_ADDR form).
 * Returns 0, or -1 with a reason in err.
 */
int lb_addr_parse(struct lb_addr *a, const char *text, int hostport_only,
                      char *err, size_t errlen);

/* Fills *a for a Unix socket path (the -U form). Returns 0, or -1 with err. */
int lb_addr_unix(struct lb_addr *a, const char *path, char *err, size_t errlen);

/*
 * How far a connection made by lb_dial_start() has come; a connection made
 * by lb_connect() is LB_PHASE_READY (0) from the start.
 */
enum lb_phase {
    LB_PHASE_READY = 0,   /* connected, TLS and AUTH done: requests may go */
    LB_PHASE_CONNECT,     /* connect() in progress */
    LB_PHASE_TLS,         /* the TLS handshake in progress */
    LB_PHASE_VERDICT,     /* TLS 1.3 with a client certificate asked: PING sent, PONG due */
    LB_PHASE_AUTH,        /* AUTH sent, `OK <user>` due */
};

/* A connection: the socket (non-blocking, close-on-exec) and unread input. */
struct lb_conn {
    int fd;                          /* -1 once closed */
    enum lb_phase phase;             /* lb_dial_step() drives it on */
    struct tls_conn *tls;            /* NULL: plain text (and once closed) */
    short tls_wants;                 /* TLS: POLLOUT while OpenSSL must send before it can
                                      * read on (lb_fill), else POLLIN */
    char buf[CLIENT_LINE_MAX + 1];   /* received bytes not yet returned as lines */
    size_t len;                      /* bytes in buf */
    int eof;                         /* the daemon closed its side */
};

enum lb_status {
    CLIENT_OK,
    CLIENT_CLOSED,     /* end of file or reset: the daemon closed the connection */
    CLIENT_TIMEOUT,    /* the deadline passed */
    CLIENT_ERROR,      /* a system error or an over-long line; see err */
};

/* Milliseconds on the monotonic clock; deadlines below are in this unit. */
int64_t lb_now_ms(void);

/*
 * Resolves and connects (each resolved address in turn), makes the TLS
 * handshake when a->tls says so, then logs in with AUTH when a->auth says
 * so, waiting until deadline_ms (monotonic; -1 for no limit). Returns 0;
 * CLI_EXIT_UNAVAILABLE with err when it cannot connect, the handshake
 * fails (the broker's certificate does not verify, the broker refuses this
 * client's, a plain-text port) or it gets no answer; CLI_EXIT_DENIED with
 * err (the daemon's reply) when the AUTH is refused; CLI_EXIT_PROTOCOL for
 * another reply to the PING that follows a TLS 1.3 handshake in which the
 * broker asked for a client certificate (tls_conn_verdict_due);
 * CLI_EXIT_USAGE when TLS cannot be set up for the host. The password
 * never appears in err.
 */
int lb_connect(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                   char *err, size_t errlen);

/*
 * The address a connection reached, to connect again to the same daemon
 * (not to whatever a host name resolves to by then): a TCP connection's
 * peer, or the Unix socket's path.
 */
struct lb_peer {
    struct sockaddr_storage sa;
    socklen_t len;                   /* 0: not known */
};

/* Fills *p from c, connected to a (getpeername() for TCP). Returns 0, or -1. */
int lb_peer_of(const struct lb_conn *c, const struct lb_addr *a, struct lb_peer *p);

/*
 * Connecting without blocking, for a caller that has its own poll() loop
 * (`lockbroker run` taking its lock back after a dropped connection).
 * lb_dial_start() makes the socket and starts connect() to peer (which
 * lb_peer_of() filled); lb_dial_step() drives the connection on through
 * connect, the TLS handshake and the AUTH that a->tls and a->auth ask for,
 * as lb_connect() does. Sends (PING, AUTH: one short line each, on a new
 * connection) wait at most until deadline_ms.
 */
enum lb_dial {
    LB_DIAL_DONE,     /* c is LB_PHASE_READY */
    LB_DIAL_WAIT,     /* poll() *p (its fd and events set), then call lb_dial_step() again */
    LB_DIAL_FAILED,   /* *rc is a CLI_EXIT_* status as lb_connect()'s, err says why; close c */
};

/* Returns 0, or -1 with err (c is then closed). */
int lb_dial_start(struct lb_conn *c, const struct lb_addr *a, const struct lb_peer *peer,
                  char *err, size_t errlen);
enum lb_dial lb_dial_step(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                          struct pollfd *p, int *rc, char *err, size_t errlen);

/*
 * Reads a password: the first line of the file at path (without its LF or
 * CRLF), or else the value of the environment variable env. It must be
 * 1-128 bytes of printable ASCII other than space, as AUTH takes it.
 * Returns 0, or -1 with a reason in err (never the password itself).
 */
int lb_read_password(struct lb_auth *a, const char *path, const char *env,
                         char *err, size_t errlen);

/* Sends all of line[0..len). Returns a lb_status. */
enum lb_status lb_send(struct lb_conn *c, const char *line, size_t len,
                               int64_t deadline_ms, char *err, size_t errlen);

/*
 * Copies the next reply line, without its LF (and CR), NUL-terminated, into
 * line (cap bytes). Waits until deadline_ms (-1: no limit). A line longer
 * than CLIENT_LINE_MAX or than cap - 1 is CLIENT_ERROR.
 */
enum lb_status lb_read_line(struct lb_conn *c, char *line, size_t cap,
                                    int64_t deadline_ms, char *err, size_t errlen);

/*
 * Reads what is available now without waiting. Returns CLIENT_OK (maybe
 * nothing new), CLIENT_CLOSED or CLIENT_ERROR. For callers that poll() the
 * socket themselves, with lb_poll_setup().
 */
enum lb_status lb_fill(struct lb_conn *c, char *err, size_t errlen);

/*
 * Sets p to poll() for c's input: its fd, and POLLIN (POLLOUT while TLS
 * must send before it can read on). Returns 1 when input is there without
 * waiting: bytes OpenSSL has decrypted but not handed out, which poll()
 * does not see (they have left the socket). Then the caller polls with
 * timeout 0 and calls lb_fill() whatever p->revents says; else 0.
 */
int lb_poll_setup(const struct lb_conn *c, struct pollfd *p);

/* Pops one buffered full line like lb_read_line: 1 if one was, 0 if
 * none is complete, -1 if it does not fit in cap bytes (it stays buffered). */
int lb_pop_line(struct lb_conn *c, char *line, size_t cap);

void lb_close(struct lb_conn *c);

/*
 * The exit status for an `ERR <CODE> ...` reply: BAD_NAME -> CLI_EXIT_BAD_NAME,
 * NOAUTH, AUTH_FAILED and DENIED -> CLI_EXIT_DENIED,
 * UNAVAILABLE and LIMIT -> CLI_EXIT_UNAVAILABLE, CONFLICT -> CLI_EXIT_CONFLICT,
 * anything else (other codes, or a line that is not ERR) -> CLI_EXIT_PROTOCOL.
 */
enum cli_exit lb_err_exit(const char *line);

/*
 * What a shell user can do about an `ERR <CODE> ...` reply whose text is
 * written for protocol users, or NULL: for ERR NOAUTH, which options log
 * in. A static string that reads after the broker's address ("127.0.0.1:7411
 * wants a login: ...").
 */
const char *lb_err_advice(const char *line);

#endif
