/*
 * lb_client.c - address parsing, connecting and line I/O for the lockbroker CLI.
 */
#include "config.h"

#include "lb_client.h"
#include "lb_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int64_t lb_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* poll() timeout for a deadline: -1 = none, 0 = now. */
static int poll_timeout(int64_t deadline_ms)
{
    int64_t left;

    if (deadline_ms < 0)
        return -1;
    left = deadline_ms - lb_now_ms();
    if (left <= 0)
        return 0;
    return left > 1000000 ? 1000000 : (int)left;
}

/* ------------------------------------------------------------ addresses */

int lb_addr_unix(struct lb_addr *a, const char *path, char *err, size_t errlen)
{
    memset(a, 0, sizeof(*a));
    if (path[0] == '\0') {
        snprintf(err, errlen, "empty Unix socket path");
        return -1;
    }
    if (strlen(path) >= sizeof(a->path)) {
        snprintf(err, errlen, "Unix socket path longer than %zu bytes: %s",
                 sizeof(a->path) - 1, path);
        return -1;
    }
    a->kind = CLIENT_ADDR_UNIX;
    strcpy(a->path, path);
    snprintf(a->spec, sizeof(a->spec), "unix:%s", path);
    return 0;
}

static int port_valid(const char *p)
{
    long v = 0;

    if (*p == '\0' || strlen(p) > 5)
        return 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (*p - '0');
    }
    return v >= 1 && v <= 65535;
}

int lb_addr_parse(struct lb_addr *a, const char *text, int hostport_only,
                      char *err, size_t errlen)
{
    const char *host, *port;
    size_t hlen;
    int bracketed = 0;

    if (!hostport_only) {
        if (strncmp(text, "unix:", 5) == 0)
            return lb_addr_unix(a, text + 5, err, errlen);
        if (text[0] == '/')
            return lb_addr_unix(a, text, err, errlen);
    }
    memset(a, 0, sizeof(*a));
    a->kind = CLIENT_ADDR_TCP;
    /* HOST[:PORT] or [IPV6][:PORT]; without a port, the daemon's default. */
    if (text[0] == '[') {
        const char *close = strchr(text, ']');

        if (!close || (close[1] != ':' && close[1] != '\0')) {
            snprintf(err, errlen, "bad address '%s': expected [IPV6]:PORT or [IPV6]", text);
            return -1;
        }
        host = text + 1;
        hlen = (size_t)(close - host);
        port = close[1] ? close + 2 : CLIENT_PORT_DEFAULT;
        bracketed = 1;
    } else {
        const char *colon = strchr(text, ':');

        if (colon && strchr(colon + 1, ':')) {
            snprintf(err, errlen, "bad address '%s': write IPv6 addresses as [IPV6]:PORT", text);
            return -1;
        }
        host = text;
        hlen = colon ? (size_t)(colon - text) : strlen(text);
        port = colon ? colon + 1 : CLIENT_PORT_DEFAULT;
    }
    if (hlen == 0 || hlen >= sizeof(a->host)) {
        snprintf(err, errlen, "bad address '%s': %s host", text, hlen ? "over-long" : "empty");
        return -1;
    }
    if (!port_valid(port)) {
        snprintf(err, errlen, "bad address '%s': the port must be 1-65535", text);
        return -1;
    }
    memcpy(a->host, host, hlen);
    a->host[hlen] = '\0';
    strcpy(a->port, port);
    snprintf(a->spec, sizeof(a->spec), bracketed ? "[%s]:%s" : "%s:%s", a->host, a->port);
    return 0;
}

/* ----------------------------------------------------------- connecting */

/* Non-blocking connect to one address, finished by poll(). 0 or -1 with errno. */
static int connect_one(int fd, const struct sockaddr *sa, socklen_t salen, int64_t deadline_ms)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    socklen_t elen = sizeof(int);
    int soerr = 0, n;

    if (connect(fd, sa, salen) == 0)
        return 0;
    if (errno != EINPROGRESS && errno != EAGAIN)
        return -1;
    do
        n = poll(&p, 1, poll_timeout(deadline_ms));
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    if (n == 0) {
        errno = ETIMEDOUT;
        return -1;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &elen) < 0)
        return -1;
    if (soerr) {
        errno = soerr;
        return -1;
    }
    return 0;
}

static int new_socket(int family)
{
    return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

static int connect_socket(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                          char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;

    if (a->kind == CLIENT_ADDR_UNIX) {
        struct sockaddr_un sa_un;
        int fd = new_socket(AF_UNIX);

        memset(&sa_un, 0, sizeof(sa_un));
        sa_un.sun_family = AF_UNIX;
        strcpy(sa_un.sun_path, a->path);   /* length checked by lb_addr_unix */
        if (fd < 0 || connect_one(fd, (struct sockaddr *)&sa_un, sizeof(sa_un), deadline_ms) < 0) {
            snprintf(err, errlen, "cannot connect to %s: %s", a->path, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        c->fd = fd;
        return 0;
    }

    struct addrinfo hints, *res, *ai;
    int rc, one = 1, last_errno = 0;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    rc = getaddrinfo(a->host, a->port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", a->host,
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        int fd = new_socket(ai->ai_family);

        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        if (connect_one(fd, ai->ai_addr, ai->ai_addrlen, deadline_ms) == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            c->fd = fd;
            break;
        }
        last_errno = errno;
        close(fd);
        if (last_errno == ETIMEDOUT)
            break;   /* the time is used up; do not try the next address */
    }
    freeaddrinfo(res);
    if (c->fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", a->spec, strerror(last_errno));
        return -1;
    }
    return 0;
}

/* Sends AUTH <user> <password> on c. Returns a lb_status. */
static enum lb_status lb_send_auth(struct lb_conn *c, const struct lb_addr *a,
                                   int64_t deadline_ms, char *err, size_t errlen)
{
    const struct lb_auth *auth = a->auth;
    char req[PROTO_USER_MAX + PROTO_PASSWORD_MAX + 16];
    int n = snprintf(req, sizeof(req), "AUTH %s %s\n", auth->user, auth->password);
    enum lb_status st = lb_send(c, req, (size_t)n, deadline_ms, err, errlen);

    explicit_bzero(req, sizeof(req));
    return st;
}

/* What the reply line to AUTH says: 0, or a CLI_EXIT_* status with err. */
static int lb_auth_reply(const struct lb_addr *a, const char *line, char *err, size_t errlen)
{
    char ok[PROTO_USER_MAX + 8];

    snprintf(ok, sizeof(ok), "OK %s", a->auth->user);
    if (strcmp(line, ok) == 0)
        return 0;
    snprintf(err, errlen, "%s refused AUTH as %s: %s", a->spec, a->auth->user, line);
    return strncmp(line, "ERR ", 4) == 0 ? lb_err_exit(line) : CLI_EXIT_PROTOCOL;
}

/* AUTH <user> <password>, and its answer `OK <user>`. Returns as lb_connect(). */
static int lb_login(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                        char *err, size_t errlen)
{
    char line[PROTO_REPLY_MAX];
    enum lb_status st = lb_send_auth(c, a, deadline_ms, err, errlen);

    if (st == CLIENT_OK)
        st = lb_read_line(c, line, sizeof(line), deadline_ms, err, errlen);
    if (st != CLIENT_OK) {
        if (st != CLIENT_ERROR)
            snprintf(err, errlen, "%s: %s", a->spec, st == CLIENT_TIMEOUT
                     ? "no answer to AUTH in time" : "closed the connection before answering AUTH");
        return CLI_EXIT_UNAVAILABLE;
    }
    return lb_auth_reply(a, line, err, errlen);
}

/* Waits until fd is ready for events or deadline_ms. Returns as poll(), EINTR as 1. */
static int wait_fd(int fd, short events, int64_t deadline_ms)
{
    struct pollfd p = { .fd = fd, .events = events };
    int n = poll(&p, 1, poll_timeout(deadline_ms));

    return n < 0 && errno == EINTR ? 1 : n;
}

/* What the reply line to the PING of lb_tls_verdict() says: 0, or a CLI_EXIT_* with err. */
static int lb_verdict_reply(const struct lb_addr *a, const char *line, char *err,
                            size_t errlen)
{
    if (strcmp(line, "PONG") == 0)
        return 0;
    /* A refusal after the handshake (too many clients...): the broker says why. */
    if (strncmp(line, "ERR ", 4) == 0) {
        snprintf(err, errlen, "%s refused this client: %s", a->spec, line);
        return lb_err_exit(line);
    }
    snprintf(err, errlen, "%s: unexpected reply to PING: %s", a->spec, line);
    return CLI_EXIT_PROTOCOL;
}

/*
 * Under TLS 1.3 a broker that asked for a client certificate says whether
 * it takes this one (or none) only after the handshake: PING, whose PONG
 * means yes, brings a refusal here rather than to the subcommand's first
 * read. Returns as lb_connect().
 */
static int lb_tls_verdict(struct lb_conn *c, const struct lb_addr *a,
                              int64_t deadline_ms, char *err, size_t errlen)
{
    char line[PROTO_REPLY_MAX], why[CLIENT_ERR_MAX];
    enum lb_status st = lb_send(c, "PING\n", 5, deadline_ms, why, sizeof(why));

    /* A send the broker's close cut short still leaves its alert to read. */
    if (st == CLIENT_OK || st == CLIENT_CLOSED)
        st = lb_read_line(c, line, sizeof(line), deadline_ms, why, sizeof(why));
    switch (st) {
    case CLIENT_OK:
        return lb_verdict_reply(a, line, err, errlen);
    case CLIENT_CLOSED:
        snprintf(err, errlen, "%s closed the connection after the TLS handshake: it refused "
                 "this client (its log says why)", a->spec);
        return CLI_EXIT_UNAVAILABLE;
    case CLIENT_TIMEOUT:
        snprintf(err, errlen, "%s: no answer to PING after the TLS handshake in time", a->spec);
        return CLI_EXIT_UNAVAILABLE;
    default:
        snprintf(err, errlen, "%s: %s", a->spec, why);
        return CLI_EXIT_UNAVAILABLE;
    }
}

/* A handshake that ended in TLS_IO_CLOSED or TLS_IO_ERROR (why): err, and as lb_connect(). */
static int lb_tls_failed(const struct lb_addr *a, enum tls_io r, const char *why, char *err,
                         size_t errlen)
{
    if (r == TLS_IO_CLOSED)
        snprintf(err, errlen, "%s closed the connection during the TLS handshake: is "
                 "this its plain-text port? (else its log says why)", a->spec);
    else
        snprintf(err, errlen, "%s: %s", a->spec, why);
    return CLI_EXIT_UNAVAILABLE;
}

/* The TLS handshake on c's new connection, until deadline_ms. Returns as lb_connect(). */
static int lb_tls_start(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                            char *err, size_t errlen)
{
    char why[CLIENT_ERR_MAX];

    if (!(c->tls = tls_conn_new(a->tls, c->fd, a->host, why, sizeof(why)))) {
        snprintf(err, errlen, "%s", why);
        return CLI_EXIT_USAGE;
    }
    c->tls_wants = POLLIN;
    for (;;) {
        enum tls_io r = tls_conn_handshake(c->tls, why, sizeof(why));
        int n;

        if (r == TLS_IO_OK)
            break;
        if (r == TLS_IO_CLOSED || r == TLS_IO_ERROR)
            return lb_tls_failed(a, r, why, err, errlen);
        n = wait_fd(c->fd, r == TLS_IO_WANT_READ ? POLLIN : POLLOUT, deadline_ms);
        if (n == 0) {
            snprintf(err, errlen, "%s: no TLS handshake in time", a->spec);
            return CLI_EXIT_UNAVAILABLE;
        }
        if (n < 0) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return CLI_EXIT_UNAVAILABLE;
        }
    }
    return tls_conn_verdict_due(c->tls) ? lb_tls_verdict(c, a, deadline_ms, err, errlen) : 0;
}

int lb_connect(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                   char *err, size_t errlen)
{
    int rc;

    if (connect_socket(c, a, deadline_ms, err, errlen) < 0)
        return CLI_EXIT_UNAVAILABLE;
    if (a->tls && a->kind == CLIENT_ADDR_TCP &&
        (rc = lb_tls_start(c, a, deadline_ms, err, errlen)) != 0)
        return rc;
    return a->auth ? lb_login(c, a, deadline_ms, err, errlen) : 0;
}

/* ------------------------------------------------- connecting, not blocking */

int lb_peer_of(const struct lb_conn *c, const struct lb_addr *a, struct lb_peer *p)
{
    memset(p, 0, sizeof(*p));
    if (a->kind == CLIENT_ADDR_UNIX) {
        struct sockaddr_un *un = (struct sockaddr_un *)&p->sa;

        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, a->path);   /* length checked by lb_addr_unix */
        p->len = sizeof(*un);
        return 0;
    }
    p->len = sizeof(p->sa);
    if (c->fd < 0 || getpeername(c->fd, (struct sockaddr *)&p->sa, &p->len) < 0) {
        p->len = 0;
        return -1;
    }
    return 0;
}

int lb_dial_start(struct lb_conn *c, const struct lb_addr *a, const struct lb_peer *peer,
                  char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    c->fd = peer->len ? new_socket(peer->sa.ss_family) : -1;
    if (c->fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", a->spec,
                 peer->len ? strerror(errno) : "its address is not known");
        return -1;
    }
    c->phase = LB_PHASE_CONNECT;
    if (connect(c->fd, (const struct sockaddr *)&peer->sa, peer->len) < 0 &&
        errno != EINPROGRESS && errno != EAGAIN) {
        snprintf(err, errlen, "cannot connect to %s: %s", a->spec, strerror(errno));
        lb_close(c);
        return -1;
    }
    return 0;
}

/* TLS (if any) done: AUTH, or nothing, next. Returns as lb_dial_step(). */
static enum lb_dial dial_login(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                               char *err, size_t errlen)
{
    if (!a->auth) {
        c->phase = LB_PHASE_READY;
        return LB_DIAL_DONE;
    }
    c->phase = LB_PHASE_AUTH;
    if (lb_send_auth(c, a, deadline_ms, err, errlen) != CLIENT_OK) {
        snprintf(err, errlen, "%s: cannot send AUTH: the connection failed", a->spec);
        return LB_DIAL_FAILED;
    }
    return LB_DIAL_WAIT;
}

/* connect() is over: its outcome, then the TLS handshake or AUTH. As lb_dial_step(). */
static enum lb_dial dial_connected(struct lb_conn *c, const struct lb_addr *a,
                                   int64_t deadline_ms, int *rc, char *err, size_t errlen)
{
    char why[CLIENT_ERR_MAX];
    socklen_t elen = sizeof(int);
    int soerr = 0, one = 1;

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &elen) < 0)
        soerr = errno;
    if (soerr) {
        snprintf(err, errlen, "cannot connect to %s: %s", a->spec, strerror(soerr));
        return LB_DIAL_FAILED;
    }
    if (a->kind == CLIENT_ADDR_TCP)
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (!a->tls || a->kind != CLIENT_ADDR_TCP)
        return dial_login(c, a, deadline_ms, err, errlen);
    if (!(c->tls = tls_conn_new(a->tls, c->fd, a->host, why, sizeof(why)))) {
        snprintf(err, errlen, "%s", why);
        *rc = CLI_EXIT_USAGE;
        return LB_DIAL_FAILED;
    }
    c->tls_wants = POLLIN;
    c->phase = LB_PHASE_TLS;
    return LB_DIAL_WAIT;
}

/* LB_PHASE_TLS: the handshake on; then the PING of the verdict, or AUTH. */
static enum lb_dial dial_tls(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                             struct pollfd *p, char *err, size_t errlen)
{
    char why[CLIENT_ERR_MAX];
    enum tls_io r = tls_conn_handshake(c->tls, why, sizeof(why));

    if (r == TLS_IO_WANT_READ || r == TLS_IO_WANT_WRITE) {
        p->events = r == TLS_IO_WANT_READ ? POLLIN : POLLOUT;
        return LB_DIAL_WAIT;
    }
    if (r != TLS_IO_OK) {
        lb_tls_failed(a, r, why, err, errlen);
        return LB_DIAL_FAILED;
    }
    if (!tls_conn_verdict_due(c->tls))
        return dial_login(c, a, deadline_ms, err, errlen);
    /* As lb_tls_verdict(): a PONG says the broker took this client. */
    c->phase = LB_PHASE_VERDICT;
    if (lb_send(c, "PING\n", 5, deadline_ms, why, sizeof(why)) == CLIENT_ERROR) {
        snprintf(err, errlen, "%s: %s", a->spec, why);
        return LB_DIAL_FAILED;
    }
    return LB_DIAL_WAIT;   /* a send the broker's close cut short still leaves its alert */
}

/* LB_PHASE_VERDICT, LB_PHASE_AUTH: the reply line, once it is there. As lb_dial_step(). */
static enum lb_dial dial_reply(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                               struct pollfd *p, int *rc, char *err, size_t errlen)
{
    char line[PROTO_REPLY_MAX], why[CLIENT_ERR_MAX];
    const char *what = c->phase == LB_PHASE_AUTH ? "AUTH" : "PING after the TLS handshake";
    enum lb_status st;
    int got;

    for (;;) {
        st = lb_fill(c, why, sizeof(why));
        if ((got = lb_pop_line(c, line, sizeof(line))) > 0)
            break;
        if (got < 0 || st != CLIENT_OK) {
            if (st == CLIENT_CLOSED)
                snprintf(err, errlen, "%s closed the connection before answering %s",
                         a->spec, what);
            else
                snprintf(err, errlen, "%s: %s", a->spec, got < 0 ? "over-long reply" : why);
            return LB_DIAL_FAILED;
        }
        if (!lb_poll_setup(c, p))
            return LB_DIAL_WAIT;
        /* Decrypted input is waiting, which no poll() would see: read it now. */
    }
    if (c->phase == LB_PHASE_VERDICT) {
        if ((*rc = lb_verdict_reply(a, line, err, errlen)) != 0)
            return LB_DIAL_FAILED;
        *rc = CLI_EXIT_UNAVAILABLE;
        return dial_login(c, a, deadline_ms, err, errlen);
    }
    if ((*rc = lb_auth_reply(a, line, err, errlen)) != 0)
        return LB_DIAL_FAILED;
    c->phase = LB_PHASE_READY;
    return LB_DIAL_DONE;
}

enum lb_dial lb_dial_step(struct lb_conn *c, const struct lb_addr *a, int64_t deadline_ms,
                          struct pollfd *p, int *rc, char *err, size_t errlen)
{
    enum lb_dial d = LB_DIAL_WAIT;

    *rc = CLI_EXIT_UNAVAILABLE;   /* what a failure is, unless a step says otherwise */
    p->fd = c->fd;
    p->events = POLLIN;
    p->revents = 0;
    /* Each step either waits for the socket or moves to the next phase at once. */
    for (;;) {
        enum lb_phase was = c->phase;
        struct pollfd w = { .fd = c->fd, .events = POLLOUT };

        switch (c->phase) {
        case LB_PHASE_CONNECT:
            if (poll(&w, 1, 0) == 0) {
                p->events = POLLOUT;
                return LB_DIAL_WAIT;
            }
            d = dial_connected(c, a, deadline_ms, rc, err, errlen);
            break;
        case LB_PHASE_TLS:
            d = dial_tls(c, a, deadline_ms, p, err, errlen);
            break;
        case LB_PHASE_VERDICT:
        case LB_PHASE_AUTH:
            d = dial_reply(c, a, deadline_ms, p, rc, err, errlen);
            break;
        default:
            return LB_DIAL_DONE;
        }
        if (d != LB_DIAL_WAIT || c->phase == was)
            return d;
    }
}

int lb_read_password(struct lb_auth *a, const char *path, const char *env,
                         char *err, size_t errlen)
{
    char buf[PROTO_PASSWORD_MAX + 3];   /* the longest password, CR, LF */
    const char *from = path ? path : "LOCKBROKER_PASSWORD";
    size_t len = 0;

    if (path) {
        FILE *f = fopen(path, "re");

        if (!f) {
            snprintf(err, errlen, "--password-file %s: %s", path, strerror(errno));
            return -1;
        }
        len = fread(buf, 1, sizeof(buf) - 1, f);
        buf[len] = '\0';
        fclose(f);
        len = strcspn(buf, "\n");
        if (len > 0 && buf[len - 1] == '\r')
            len--;
        buf[len] = '\0';
    } else if (env) {
        len = strlen(env);
        snprintf(buf, sizeof(buf), "%s", env);
    }
    for (size_t i = 0; i < len; i++)
        if (buf[i] < 0x21 || buf[i] > 0x7e)
            len = 0;
    if (len == 0 || len > PROTO_PASSWORD_MAX) {
        explicit_bzero(buf, sizeof(buf));
        snprintf(err, errlen, "%s: a password is 1-%d printable characters without spaces%s",
                 from, PROTO_PASSWORD_MAX, path ? " on the first line" : "");
        return -1;
    }
    memcpy(a->password, buf, len + 1);
    explicit_bzero(buf, sizeof(buf));
    return 0;
}

void lb_close(struct lb_conn *c)
{
    tls_conn_free(c->tls);   /* before the socket it may send close_notify on */
    c->tls = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* ------------------------------------------------------------------ I/O */

/* lb_send over TLS. */
static enum lb_status tls_send(struct lb_conn *c, const char *line, size_t len,
                                   int64_t deadline_ms, char *err, size_t errlen)
{
    while (len > 0) {
        size_t put = 0;
        enum tls_io r = tls_conn_write(c->tls, line, len, &put, err, errlen);
        int n;

        if (r == TLS_IO_OK) {
            line += put;
            len -= put;
            continue;
        }
        if (r == TLS_IO_CLOSED)
            return CLIENT_CLOSED;
        if (r == TLS_IO_ERROR)
            return CLIENT_ERROR;
        n = wait_fd(c->fd, r == TLS_IO_WANT_READ ? POLLIN : POLLOUT, deadline_ms);
        if (n == 0)
            return CLIENT_TIMEOUT;
        if (n < 0) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return CLIENT_ERROR;
        }
    }
    return CLIENT_OK;
}

enum lb_status lb_send(struct lb_conn *c, const char *line, size_t len,
                               int64_t deadline_ms, char *err, size_t errlen)
{
    if (c->tls)
        return tls_send(c, line, len, deadline_ms, err, errlen);
    while (len > 0) {
        /* MSG_NOSIGNAL: a closed connection is an error here, not SIGPIPE. */
        ssize_t n = send(c->fd, line, len, MSG_NOSIGNAL);

        if (n > 0) {
            line += n;
            len -= (size_t)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == EPIPE || errno == ECONNRESET)
            return CLIENT_CLOSED;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            snprintf(err, errlen, "send: %s", strerror(errno));
            return CLIENT_ERROR;
        }
        struct pollfd p = { .fd = c->fd, .events = POLLOUT };
        int r = poll(&p, 1, poll_timeout(deadline_ms));

        if (r == 0)
            return CLIENT_TIMEOUT;
        if (r < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return CLIENT_ERROR;
        }
    }
    return CLIENT_OK;
}

enum lb_status lb_fill(struct lb_conn *c, char *err, size_t errlen)
{
    for (;;) {
        ssize_t n;

        if (c->eof)
            return CLIENT_CLOSED;
        if (c->len == CLIENT_LINE_MAX) {
            if (memchr(c->buf, '\n', c->len))
                return CLIENT_OK;   /* lines are waiting to be popped */
            snprintf(err, errlen, "reply line longer than %d bytes", CLIENT_LINE_MAX);
            return CLIENT_ERROR;
        }
        if (c->tls) {
            size_t got = 0;

            switch (tls_conn_read(c->tls, c->buf + c->len, CLIENT_LINE_MAX - c->len, &got,
                                  err, errlen)) {
            case TLS_IO_OK:
                c->len += got;
                c->tls_wants = POLLIN;
                continue;
            case TLS_IO_WANT_READ:
                c->tls_wants = POLLIN;
                return CLIENT_OK;
            case TLS_IO_WANT_WRITE:
                c->tls_wants = POLLOUT;
                return CLIENT_OK;
            case TLS_IO_CLOSED:
                c->eof = 1;
                return CLIENT_CLOSED;
            default:
                c->eof = 1;   /* no SSL call after a fatal error: later reads see an end */
                return CLIENT_ERROR;
            }
        }
        n = recv(c->fd, c->buf + c->len, CLIENT_LINE_MAX - c->len, 0);
        if (n > 0) {
            c->len += (size_t)n;
            continue;
        }
        if (n == 0) {
            c->eof = 1;
            return CLIENT_CLOSED;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return CLIENT_OK;
        if (errno == ECONNRESET) {
            c->eof = 1;
            return CLIENT_CLOSED;
        }
        snprintf(err, errlen, "recv: %s", strerror(errno));
        return CLIENT_ERROR;
    }
}

int lb_poll_setup(const struct lb_conn *c, struct pollfd *p)
{
    p->fd = c->fd;
    p->events = c->tls ? c->tls_wants : POLLIN;
    p->revents = 0;
    return c->tls && tls_conn_pending(c->tls);
}

int lb_pop_line(struct lb_conn *c, char *line, size_t cap)
{
    char *nl = memchr(c->buf, '\n', c->len);
    size_t n, used;

    if (!nl)
        return 0;
    used = (size_t)(nl - c->buf) + 1;
    n = used - 1;
    if (n > 0 && c->buf[n - 1] == '\r')
        n--;
    if (n >= cap)
        return -1;
    memcpy(line, c->buf, n);
    line[n] = '\0';
    memmove(c->buf, c->buf + used, c->len - used);
    c->len -= used;
    return 1;
}

enum lb_status lb_read_line(struct lb_conn *c, char *line, size_t cap,
                                    int64_t deadline_ms, char *err, size_t errlen)
{
    for (;;) {
        enum lb_status st;
        int r = lb_pop_line(c, line, cap);

        if (r > 0)
            return CLIENT_OK;
        if (r < 0) {
            snprintf(err, errlen, "reply line longer than %zu bytes", cap - 1);
            return CLIENT_ERROR;
        }
        st = lb_fill(c, err, errlen);
        /* Lines that came before the end are read first (a refusal, then the close). */
        if (st == CLIENT_CLOSED && memchr(c->buf, '\n', c->len))
            continue;
        if (st != CLIENT_OK)
            return st;
        if (memchr(c->buf, '\n', c->len))
            continue;

        struct pollfd p;
        int n;

        if (lb_poll_setup(c, &p))
            continue;   /* decrypted input is waiting: no poll() would see it */
        n = poll(&p, 1, poll_timeout(deadline_ms));

        if (n == 0)
            return CLIENT_TIMEOUT;
        if (n < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return CLIENT_ERROR;
        }
    }
}

static int starts_with_word(const char *s, const char *word)
{
    size_t n = strlen(word);

    return strncmp(s, word, n) == 0 && (s[n] == ' ' || s[n] == '\0');
}

enum cli_exit lb_err_exit(const char *line)
{
    if (starts_with_word(line, "ERR BAD_NAME"))
        return CLI_EXIT_BAD_NAME;
    if (starts_with_word(line, "ERR UNAVAILABLE") || starts_with_word(line, "ERR LIMIT"))
        return CLI_EXIT_UNAVAILABLE;
    if (starts_with_word(line, "ERR CONFLICT"))
        return CLI_EXIT_CONFLICT;
    if (starts_with_word(line, "ERR NOAUTH") || starts_with_word(line, "ERR AUTH_FAILED") ||
        starts_with_word(line, "ERR DENIED"))
        return CLI_EXIT_DENIED;
    return CLI_EXIT_PROTOCOL;
}

const char *lb_err_advice(const char *line)
{
    /* The daemon says "log in first with AUTH <user> <password>": lockbroker's
     * way is -a and a password never on the command line (resolve_auth). */
    if (starts_with_word(line, "ERR NOAUTH"))
        return "wants a login: give -a USER, with the password in LOCKBROKER_PASSWORD or "
               "--password-file FILE";
    return NULL;
}
