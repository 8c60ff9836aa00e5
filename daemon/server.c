/*
 * server.c - listeners and accepting connections within max_clients.
 */
#include "config.h"
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <grp.h>
#include <stdlib.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/un.h>
#include <unistd.h>

#include "accept_pause.h"
#include "conn.h"
#include "tls.h"
#include "locks.h"
#include "auth_budget.h"
#include "auth_pool.h"
#include "log.h"
#include "peer_count.h"
#include "proto.h"
#include "session.h"
#include "settings.h"
#include "watch.h"

#define LISTEN_BACKLOG 1024

void server_format_addr(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "unix");
    }
}

/*
 * Options of an accepted TCP connection. A client host that loses power or
 * its network sends no FIN: keepalive probes find it when the connection is
 * idle, the user timeout when a reply stays unacknowledged. Either way the
 * kernel reports an error (conn.c logs it in words) and the connection
 * closes, releasing its locks. An option that cannot be set keeps the
 * kernel's default; the client is served all the same.
 */
static void tcp_tune(struct server *srv, evutil_socket_t fd, const char *peer)
{
    const struct settings *s = srv->settings;
    const struct {
        int level, name;
        int value;
        const char *what;
    } opts[] = {
        /* Replies are single small lines: never hold them back for Nagle. */
        { IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY" },
        { SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE" },
        { IPPROTO_TCP, TCP_KEEPIDLE, (int)s->tcp_keepalive_idle_s, "TCP_KEEPIDLE" },
        { IPPROTO_TCP, TCP_KEEPINTVL, (int)s->tcp_keepalive_interval_s, "TCP_KEEPINTVL" },
        { IPPROTO_TCP, TCP_KEEPCNT, (int)s->tcp_keepalive_count, "TCP_KEEPCNT" },
        { IPPROTO_TCP, TCP_USER_TIMEOUT, (int)s->tcp_user_timeout_ms, "TCP_USER_TIMEOUT" },
    };

    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        if (setsockopt(fd, opts[i].level, opts[i].name, &opts[i].value,
                       sizeof(opts[i].value)) == 0)
            continue;
        /* The same failure would repeat for every client: warn once. */
        if (!srv->sockopt_warned)
            log_warn("%s: setting %s to %d: %s; serving it with the kernel's default "
                     "(further failures are logged at debug level)", peer, opts[i].what,
                     opts[i].value, strerror(errno));
        else
            log_debug("%s: setting %s to %d: %s", peer, opts[i].what, opts[i].value,
                      strerror(errno));
        srv->sockopt_warned = true;
    }
}

/*
 * Refuses a new connection with one ERR line. Plain text: sent at once (a
 * fresh socket's send buffer takes it whole) and closed. TLS: the line can
 * only be read inside TLS, so the handshake is done first, by a connection
 * that closes after the line (conn_new's refusal); beyond TLS_REFUSALS_MAX
 * of those at once, closed without a line.
 */
static void refuse_conn(struct server *srv, evutil_socket_t fd, const char *peer, bool tls,
                        const char *line, size_t len)
{
    SSL *ssl;

    if (!tls) {
        if (send(fd, line, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
            log_debug("refusing %s: %s", peer, strerror(errno));
        evutil_closesocket(fd);
        return;
    }
    if (srv->nrefusing >= TLS_REFUSALS_MAX || !(ssl = tls_ssl_new(srv->tls))) {
        log_debug("refusing %s: closed without a reply (%u TLS refusals under way)", peer,
                  srv->nrefusing);
        evutil_closesocket(fd);
        return;
    }
    tcp_tune(srv, fd, peer);
    if (!conn_new(srv, fd, peer, ssl, line))
        log_debug("refusing %s: out of memory", peer);
}

/*
 * Refusals are logged at most once a second per reason: an attacker that
 * holds max_clients and keeps connecting would otherwise write a line per
 * attempt (hundreds a second). The next line says how many went unlogged;
 * STATS rejected_connections and rejected_per_address count every one.
 */
enum refusal { REFUSED_MAX_CLIENTS, REFUSED_PER_ADDRESS, REFUSED_HANDSHAKES, REFUSALS };

static struct {
    int64_t logged_ms;       /* monotonic ms of the last line, 0: none yet */
    unsigned long unlogged;  /* refusals since, not logged */
} refusal_log[REFUSALS];

/* Whether this refusal gets its line; *unlogged: how many did not since. */
static bool refusal_logged(enum refusal why, unsigned long *unlogged)
{
    int64_t now = locks_mono_ms();

    if (refusal_log[why].logged_ms && now - refusal_log[why].logged_ms < 1000) {
        refusal_log[why].unlogged++;
        return false;
    }
    *unlogged = refusal_log[why].unlogged;
    refusal_log[why].unlogged = 0;
    refusal_log[why].logged_ms = now;
    return true;
}

/* A connection accepted on either TCP listener, or the Unix socket; tls: on the TLS one. */
static void accept_conn(struct server *srv, evutil_socket_t fd, struct sockaddr *sa, bool tls)
{
    const struct settings *s = srv->settings;
    struct peer_counts n = { 0, 0 };
    char peer[64], addr[AUTH_BUDGET_ADDR_MAX], line[PROTO_REPLY_MAX], text[128];
    unsigned long unlogged = 0;
    SSL *ssl = NULL;

    server_format_addr(sa, peer, sizeof(peer));
    /* A Unix socket's clients share one address and are let in by its file's mode. */
    if (sa->sa_family != AF_UNIX) {
        auth_budget_addr(peer, addr);
        n = peer_count_get(srv->peers, addr);
    }
    if (srv->nconns >= s->max_clients) {
        srv->stats.conns_rejected++;
        if (refusal_logged(REFUSED_MAX_CLIENTS, &unlogged))
            log_warn("refusing %s: max_clients (%u) reached (%lu more refused since the last "
                     "such line)", peer, s->max_clients, unlogged);
        refuse_conn(srv, fd, peer, tls, line, (size_t)proto_fmt_err(line, sizeof(line),
                    PROTO_ERR_LIMIT, "too many clients; try again later"));
        return;
    }
    if (s->max_clients_per_address && n.conns >= s->max_clients_per_address) {
        srv->stats.conns_rejected_address++;
        if (refusal_logged(REFUSED_PER_ADDRESS, &unlogged))
            log_warn("refusing %s: max_clients_per_address (%u) reached by %s (%lu more "
                     "refused since the last such line)", peer, s->max_clients_per_address,
                     addr, unlogged);
        snprintf(text, sizeof(text), "too many connections from this address (at most %u); "
                 "try again later", s->max_clients_per_address);
        refuse_conn(srv, fd, peer, tls, line, (size_t)proto_fmt_err(line, sizeof(line),
                    PROTO_ERR_LIMIT, text));
        return;
    }
    /* Telling it would take one more handshake: the very thing refused. */
    if (tls && s->tls_max_handshakes_per_address &&
        n.handshakes >= s->tls_max_handshakes_per_address) {
        srv->stats.conns_rejected_address++;
        if (refusal_logged(REFUSED_HANDSHAKES, &unlogged))
            log_warn("refusing %s: [tls] max_handshakes_per_address (%u) reached by %s; "
                     "closed without a reply (%lu more refused since the last such line)",
                     peer, s->tls_max_handshakes_per_address, addr, unlogged);
        evutil_closesocket(fd);
        return;
    }
    if (sa->sa_family != AF_UNIX)
        tcp_tune(srv, fd, peer);
    if (tls && !(ssl = tls_ssl_new(srv->tls))) {
        log_error("cannot serve %s: out of memory", peer);
        evutil_closesocket(fd);
        return;
    }
    if (!conn_new(srv, fd, peer, ssl, NULL))
        log_error("cannot serve %s: out of memory", peer);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    accept_conn(arg, fd, sa, false);
}

static void on_accept_tls(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                          int salen, void *arg)
{
    accept_conn(arg, fd, sa, true);
}

/*
 * A listening socket passed on by the daemon this one took over from, if it
 * is still the one addr names (port 0: any port); otherwise it is closed and
 * -1 returned (bind anew).
 */
int server_inherited_listener(const char *what, int fd, const struct sockaddr_storage *want)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char have[64], asked[64];

    if (fd < 0)
        return -1;
    server_format_addr((const struct sockaddr *)want, asked, sizeof(asked));
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        server_format_addr((struct sockaddr *)&ss, have, sizeof(have));
        if (strcmp(have, asked) == 0 || (ss.ss_family == want->ss_family &&
            ((const struct sockaddr_in *)want)->sin_port == 0)) {
            evutil_make_socket_nonblocking(fd);
            evutil_make_socket_closeonexec(fd);
            return fd;
        }
        log_info("%s: the socket taken over listens on %s, the settings say %s: listening "
                 "anew", what, have, asked);
    }
    close(fd);
    return -1;
}

/* Listens on addr (IP:PORT) for cb, or on fd (>= 0) when the daemon taken
 * over listened there already; *out gets the listener, bound the address
 * with its port resolved. Returns 0, or -1 after logging why. */
static int listen_tcp(struct server *srv, const char *what, const char *addr, int fd,
                      evconnlistener_cb cb, struct evconnlistener **out, char *bound,
                      size_t boundlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int len;
    char name[96];

    if (settings_listen_addr(addr, &ss, &len) < 0) {
        log_error("%s: cannot parse '%s'", what, addr);
        return -1;
    }
    if ((fd = server_inherited_listener(what, fd, &ss)) >= 0)
        *out = evconnlistener_new(srv->base, cb, srv, LEV_OPT_CLOSE_ON_FREE |
                                  LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    else
        *out = evconnlistener_new_bind(srv->base, cb, srv,
                                       LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
                                           LEV_OPT_REUSEABLE,
                                       LISTEN_BACKLOG, (struct sockaddr *)&ss, len);
    if (!*out) {
        log_error("%s on %s: %s", what, addr, strerror(errno));
        return -1;
    }
    /* Port 0 picks a free port; report the one we got. */
    sl = sizeof(ss);
    getsockname(evconnlistener_get_fd(*out), (struct sockaddr *)&ss, &sl);
    server_format_addr((struct sockaddr *)&ss, bound, boundlen);
    snprintf(name, sizeof(name), "%s %s", what, bound);
    return accept_pause_add(srv->accept_pause, *out, name);
}

/* The TLS listener and its context, when [tls] listen is set. */
static int listen_tls(struct server *srv, int fd)
{
    char err[512];

    if (!(srv->tls = tls_new(srv->settings, err, sizeof(err)))) {
        log_error("%s", err);
        return -1;
    }
    srv->tls_not_after = tls_cert_not_after(srv->tls);
    return listen_tcp(srv, "[tls] listen", srv->settings->tls_listen, fd, on_accept_tls,
                      &srv->tls_sock, srv->tls_addr, sizeof(srv->tls_addr));
}

int server_reload_tls(struct server *srv, char *err, size_t errlen)
{
    if (!srv->tls)
        return 0;
    if (tls_reload(srv->tls, srv->settings, err, errlen) < 0)
        return -1;
    srv->tls_not_after = tls_cert_not_after(srv->tls);
    log_info("reload: TLS certificate %s, key and CA%s read again; new connections use "
             "them", srv->settings->tls_cert_file,
             srv->settings->tls_crl_file ? " and CRL" : "");
    return 0;
}

/* Removes a socket file left by a daemon that is gone; refuses to steal a live one. */
static int unix_clear_stale(const char *path)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    struct stat st;
    int fd, rc;

    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISSOCK(st.st_mode)) {
        log_error("unix_socket: %s exists and is not a socket", path);
        return -1;
    }
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0)
        return -1;
    rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
    close(fd);
    if (rc == 0) {
        log_error("unix_socket: %s is in use by a running daemon", path);
        return -1;
    }
    return unlink(path);
}

/* Gives the socket file the group `group`, a name or a number. */
static int unix_set_group(const char *path, const char *group)
{
    char buf[4096], *end;
    struct group gr, *found = NULL;
    unsigned long gid;
    int rc;

    /* A name is looked up once, at start-up (it may ask NSS). */
    rc = getgrnam_r(group, &gr, buf, sizeof(buf), &found);
    if (found) {
        gid = found->gr_gid;
    } else {
        errno = 0;
        gid = strtoul(group, &end, 10);
        if (*end || errno || group[0] < '0' || group[0] > '9') {
            log_error("unix_socket_group: no group '%s'%s%s", group, rc ? ": " : "",
                      rc ? strerror(rc) : "");
            return -1;
        }
    }
    if (chown(path, (uid_t)-1, (gid_t)gid) < 0) {
        log_error("unix_socket %s: cannot give it group %s: %s", path, group, strerror(errno));
        return -1;
    }
    return 0;
}

static int listen_unix(struct server *srv, int fd)
{
    const char *path = srv->settings->unix_socket;
    struct sockaddr_un sun = { .sun_family = AF_UNIX }, have;
    socklen_t sl = sizeof(have);
    mode_t old_mask;

    /* Taken over: the same path keeps its socket (and its file). */
    if (fd >= 0 && getsockname(fd, (struct sockaddr *)&have, &sl) == 0 &&
        have.sun_family == AF_UNIX && strcmp(have.sun_path, path) == 0) {
        evutil_make_socket_nonblocking(fd);
        evutil_make_socket_closeonexec(fd);
        srv->unix_sock = evconnlistener_new(srv->base, on_accept, srv, LEV_OPT_CLOSE_ON_FREE |
                                            LEV_OPT_CLOSE_ON_EXEC, 0, fd);
        if (!srv->unix_sock) {
            log_error("unix_socket %s: out of memory", path);
            return -1;
        }
        return accept_pause_add(srv->accept_pause, srv->unix_sock, path);
    }
    if (fd >= 0)
        close(fd);
    if (unix_clear_stale(path) < 0) {
        log_error("unix_socket %s: cannot be used", path);
        return -1;
    }
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    old_mask = umask(0177);   /* nobody else gets in before the chmod below */
    srv->unix_sock = evconnlistener_new_bind(srv->base, on_accept, srv,
                                             LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                                             LISTEN_BACKLOG, (struct sockaddr *)&sun,
                                             sizeof(sun));
    umask(old_mask);
    if (!srv->unix_sock) {
        log_error("unix_socket %s: %s", path, strerror(errno));
        return -1;
    }
    if (accept_pause_add(srv->accept_pause, srv->unix_sock, path) < 0)
        return -1;
    /* The group first: the mode may open the socket to it. */
    if (srv->settings->unix_socket_group && unix_set_group(path, srv->settings->unix_socket_group) < 0)
        return -1;
    if (chmod(path, srv->settings->unix_socket_mode) < 0) {
        log_error("unix_socket %s: chmod: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* 127.0.0.0/8, ::1, and 127.0.0.0/8 mapped into IPv6. */
static bool is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

/* Whether addr is set and is not a loopback address. */
static bool beyond_loopback(const char *addr)
{
    struct sockaddr_storage ss;
    int len;

    return addr && settings_listen_addr(addr, &ss, &len) == 0 && !is_loopback(&ss);
}

int server_check_exposure(const struct settings *s, char *err, size_t errlen)
{
    if (beyond_loopback(s->tls_listen) && !s->users_file && !s->allow_anonymous &&
        s->tls_client_certs != TLS_CERTS_REQUIRED) {
        snprintf(err, errlen, "refusing to listen on %s ([tls] listen): it is not a loopback "
                 "address, no users are configured and client certificates are not required, "
                 "so anyone who can reach it could take, hold and block any lock; set [server] "
                 "users_file, or [tls] client_certs = required with ca_file, or [server] "
                 "allow_anonymous = yes", s->tls_listen);
        return -1;
    }
    if (s->users_file || s->allow_anonymous || !beyond_loopback(s->listen))
        return 0;
    snprintf(err, errlen, "refusing to listen on %s: it is not a loopback address and no "
             "users are configured, so anyone who can reach it could take, hold and block any "
             "lock; set [server] users_file (see lockbrokerd.conf(5)), or "
             "[server] allow_anonymous = yes to serve it without authentication", s->listen);
    return -1;
}

void server_set_users(struct server *srv, const struct users *users)
{
    srv->users = users;
    conn_users_changed(srv);
}

int server_start(struct server *srv, struct event_base *base, const struct settings *s,
                 struct locks *locks, struct leases *leases, struct backend *backend,
                 const struct users *users, const char *daemon_id,
                 const struct server_fds *fds)
{
    static const struct server_fds none = { -1, -1, -1 };
    char err[512];

    if (server_check_exposure(s, err, sizeof(err)) < 0) {
        log_error("%s", err);
        return -1;
    }
    memset(srv, 0, sizeof(*srv));
    srv->users = users;
    srv->base = base;
    srv->settings = s;
    srv->locks = locks;
    srv->leases = leases;
    srv->backend = backend;
    srv->daemon_id = daemon_id;
    srv->started = time(NULL);
    TAILQ_INIT(&srv->conns);
    if (!(srv->accept_pause = accept_pause_new(base, &srv->stats.accept_pauses)) ||
        !(srv->peers = peer_count_new()) ||
        !(srv->watches = watches_new(base, locks, backend, daemon_id)) ||
        !(srv->sessions = sessions_new(base, locks))) {
        log_error("out of memory");
        return -1;
    }
    locks_set_observer(locks, watches_lock_changed, srv->watches);
    /* A users file cannot be added by a reload: without one, no AUTH is checked. */
    if (users && (!(srv->auth_budget = auth_budget_new()) ||
                  !(srv->auth_pool = auth_pool_new(base, s->auth_threads)))) {
        log_error("cannot start checking passwords (out of memory or threads)");
        server_stop(srv);
        return -1;
    }
    if (!fds)
        fds = &none;
    if (!s->tls_listen && fds->tls >= 0)
        close(fds->tls);
    if (!s->unix_socket && fds->unix_fd >= 0)
        close(fds->unix_fd);
    if (listen_tcp(srv, "listen", s->listen, fds->tcp, on_accept, &srv->tcp, srv->listen_addr,
                   sizeof(srv->listen_addr)) < 0 ||
        (s->tls_listen && listen_tls(srv, fds->tls) < 0)) {
        server_stop(srv);
        return -1;
    }
    if (beyond_loopback(s->listen) && s->users_file)
        log_warn("listening on %s without TLS: AUTH passwords, lock names and tokens cross "
                 "the network in clear text; serve other machines through [tls] listen "
                 "(README.md, \"Serving other machines\")", srv->listen_addr);
    if (s->unix_socket && listen_unix(srv, fds->unix_fd) < 0) {
        server_stop(srv);
        return -1;
    }
    return 0;
}

void server_make_daemon_id(char *buf, size_t len)
{
    char host[64] = "host";
    uint32_t rnd = 0;

    gethostname(host, sizeof(host) - 1);
    for (char *p = host; *p; p++)   /* it becomes part of znode names */
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.'))
            *p = '_';
    if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
        rnd = (uint32_t)time(NULL) ^ (uint32_t)getpid();
    snprintf(buf, len, "%s-%d-%08x", host, (int)getpid(), rnd);
}

void server_stop(struct server *srv)
{
    struct conn *c;
    struct evconnlistener **ls[] = { &srv->tcp, &srv->unix_sock, &srv->tls_sock };

    for (size_t i = 0; i < sizeof(ls) / sizeof(ls[0]); i++)
        if (*ls[i])
            accept_pause_remove(srv->accept_pause, *ls[i]);
    if (srv->tcp) {
        evconnlistener_free(srv->tcp);
        srv->tcp = NULL;
    }
    if (srv->unix_sock) {
        evconnlistener_free(srv->unix_sock);
        srv->unix_sock = NULL;
        unlink(srv->settings->unix_socket);
    }
    if (srv->tls_sock) {
        evconnlistener_free(srv->tls_sock);
        srv->tls_sock = NULL;
    }
    /* Stopping ends the sessions first: the connections close as before
     * sessions existed, and detached holds are abandoned. */
    sessions_free(srv->sessions);
    srv->sessions = NULL;
    while ((c = TAILQ_FIRST(&srv->conns)))
        conn_free(c);
    tls_free(srv->tls);            /* after the connections: each held a reference */
    peer_count_free(srv->peers);   /* after the connections, which counted in it */
    srv->peers = NULL;
    srv->tls = NULL;
    /* After the connections, which forgot their jobs. */
    auth_pool_free(srv->auth_pool);
    srv->auth_pool = NULL;
    auth_budget_free(srv->auth_budget);
    srv->auth_budget = NULL;
    if (srv->watches) {
        locks_set_observer(srv->locks, NULL, NULL);
        watches_free(srv->watches);
        srv->watches = NULL;
    }
    accept_pause_free(srv->accept_pause);   /* the metrics endpoint stopped before */
    srv->accept_pause = NULL;
}
