/*
 * conn.c - the transport: one client connection's socket, framing,
 * back-pressure and states (client.h draws the request path above it).
 *
 * Request lines are parsed straight out of the bufferevent's input buffer
 * and handed to the command table (cmd.c). Replies go out strictly in
 * request order: while a request is parked in the client's pending slot,
 * later lines stay unparsed in the input buffer (the way redis blocks a
 * client on BLPOP). Input is bounded by a read watermark: a client that
 * keeps sending while its replies go unread meets TCP back-pressure
 * instead of growing our memory. A waiting client is read on, so that its
 * hang-up is seen, and one that sends more than the bound behind its
 * waiting request is closed.
 *
 * A connection on the TLS listener speaks the same protocol inside TLS
 * (bufferevent_openssl): nothing is parsed before its handshake ends,
 * which must be within TLS_HANDSHAKE_MS; a client certificate that names a
 * user logs the connection in as that user. A TLS handshake sent to the
 * plain port is recognised by its first byte and closed with a log line.
 * A TLS connection the server refuses (max_clients...) is a conn too: its
 * handshake ends, the refusal line is sent, and it closes, so that the
 * client can read why.
 *
 * With a users file, a connection that has not logged in has
 * login_timeout_ms to do so (after its handshake, over TLS), as a TLS
 * handshake has TLS_HANDSHAKE_MS: a client that never logs in would keep a
 * slot of max_clients for ever. An AUTH being answered at the deadline is
 * answered first: the connection is closed after it unless it logged in.
 */
#include "config.h"
#include "conn.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "accept_pause.h"
#include "auth_budget.h"
#include "client.h"
#include "cmd.h"
#include "context.h"
#include "log.h"
#include "peer_count.h"
#include "proto.h"
#include "restart.h"
#include "session.h"
#include "settings.h"
#include "snap.h"
#include "tls.h"
#include "users.h"

enum conn_state {
    CONN_READING,   /* parsing request lines as they arrive */
    CONN_WAITING,   /* a request is parked in the client's pending slot; later lines
                       wait unparsed, up to conn_input_max() bytes */
    CONN_DRAINING,  /* OUTPUT_MAX bytes of replies unread: parse nothing until they go */
    CONN_CLOSING,   /* locks released, last reply queued: shut down once it is written */
    CONN_LINGER,    /* write side shut: discard input until EOF so the reply is not reset */
};

static const char *const state_names[] = {
    "reading", "waiting", "draining", "closing", "linger",
};

/* The login deadline (login_timeout_ms), beside the state: a connection in
 * any state may be due to log in. */
enum conn_login {
    CONN_LOGIN_NONE,     /* no deadline: logged in, no users file, 0, or a refusal */
    CONN_LOGIN_DUE,      /* login_timer runs */
    CONN_LOGIN_OVERDUE,  /* it fired while an AUTH was being answered: closed after the
                            answer unless that logged in */
};

/* Replies a client may leave unread before we stop parsing its requests. */
#define OUTPUT_MAX (64 * 1024)
/* Input buffered beyond the longest line (see conn_input_max()). */
#define INPUT_SLACK (64 * 1024)
/* How long a closing connection may keep sending before we just close. */
#define LINGER_SECONDS 2

struct conn {
    struct client cl;              /* what the commands see; first, see conn_of() */
    struct bufferevent *bev;       /* owned; closes the fd */
    enum conn_state state;         /* change only through conn_set_state() */
    struct event *linger_timer;    /* owned; armed in CONN_LINGER */
    int send_err;                  /* errno of a failed direct send, for the close; 0: none */
    SSL *ssl;                      /* the TLS session (the bufferevent owns it), or NULL */
    struct event *handshake_timer; /* owned; armed until the TLS handshake ends */
    bool handshaking;              /* TLS: the handshake has not ended yet */
    bool any_input;                /* a byte has been parsed (plain: not a TLS handshake) */
    enum conn_login login;         /* changed only by conn_login_arm, conn_logged_in,
                                    * conn_on_login_timeout, conn_login_expired */
    struct event *login_timer;     /* owned, or NULL before the first deadline */
    char *refusal;                 /* owned: the line a refused TLS connection gets after
                                    * its handshake, then closed; NULL: served */
    char addr[AUTH_BUDGET_ADDR_MAX]; /* its address in srv->peers; "": not counted (Unix) */
    unsigned released;             /* holds and waits released by conn_begin_close() */
    TAILQ_ENTRY(conn) link;        /* srv->conns */
};

static struct conn *conn_of(const struct client *cl)
{
    return (struct conn *)((char *)cl - offsetof(struct conn, cl));
}

/*
 * Unparsed input a connection may buffer: the longest request line with its
 * LF, plus INPUT_SLACK (PROTOCOL.md, Transport). The read watermark is one
 * byte more, so that a waiting connection that sends more is read and seen.
 */
static size_t conn_input_max(const struct server *srv)
{
    return (size_t)srv->settings->max_line + 1 + INPUT_SLACK;
}

static void conn_set_watermark(struct conn *c)
{
    bufferevent_setwatermark(c->bev, EV_READ, 0, conn_input_max(c->cl.srv) + 1);
}

static void conn_set_state(struct conn *c, enum conn_state to)
{
    if (c->state == to)
        return;
    log_debug("conn %llu: going from %s to %s", (unsigned long long)c->cl.id,
              state_names[c->state], state_names[to]);
    c->state = to;
}

/*
 * Queues a reply line. When nothing is queued ahead of it, it is sent at
 * once: through the bufferevent, every one-line reply would cost enabling
 * and disabling write interest and another loop iteration. Lines with more
 * of the same reply behind them are queued, to go out together.
 */
static void conn_write(struct client *cl, const char *buf, size_t len, bool more)
{
    struct conn *c = conn_of(cl);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    ssize_t sent = 0;

    /* Over TLS every byte goes through the bufferevent (and OpenSSL). */
    if (!more && !c->ssl && evbuffer_get_length(out) == 0) {
        sent = send(bufferevent_getfd(c->bev), buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent == (ssize_t)len)
            return;
        if (sent < 0) {
            /* EAGAIN, or an error the bufferevent will see as EOF: the send
             * took the socket's error (ETIMEDOUT...), so keep it for the log. */
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && !c->send_err)
                c->send_err = errno;
            sent = 0;
        }
    }
    if (evbuffer_add(out, buf + sent, len - (size_t)sent) < 0)
        log_error("conn %llu: cannot queue a reply", (unsigned long long)cl->id);
}

static bool conn_backed_up(const struct client *cl)
{
    return evbuffer_get_length(bufferevent_get_output(conn_of(cl)->bev)) >= OUTPUT_MAX;
}

static void conn_suspend(struct client *cl)
{
    conn_set_state(conn_of(cl), CONN_WAITING);
}

/* Parses what is buffered as if just read; deferred to the loop, because
 * the lock table or the ZooKeeper client may be on the stack. */
static void conn_parse_later(struct conn *c)
{
    bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

static void conn_login_expired(struct conn *c);

/* The parked request's answer is queued: parse the lines that waited behind it. */
static void conn_resume(struct client *cl)
{
    struct conn *c = conn_of(cl);

    if (c->state != CONN_WAITING)
        return;
    conn_set_state(c, CONN_READING);
    /* The login deadline passed while the answer was awaited (an AUTH that failed). */
    if (c->login == CONN_LOGIN_OVERDUE && !c->cl.user) {
        conn_login_expired(c);
        return;
    }
    conn_parse_later(c);
}

/*
 * How a connection ends, for its holds (PROTOCOL.md, "Sessions"). A
 * session keeps them only when the connection is lost: QUIT releases, and
 * a close the daemon makes on purpose (a line too long, ERR LIMIT, no
 * login, a user removed) ends the session and abandons them as before.
 */
enum conn_end {
    CONN_END_QUIT,     /* QUIT (or a refusal): released as UNLOCK, the session ends */
    CONN_END_CLOSED,   /* closed by the daemon on purpose: abandoned, the session ends */
    CONN_END_LOST,     /* the client went (end of input, reset, timeout, a write error,
                        * a cut): a session detaches them, else abandoned */
};

/* The holds, watches and waits go as end says; the session with them. */
static void conn_release(struct conn *c, enum conn_end end)
{
    if (end == CONN_END_LOST)
        session_client_lost(&c->cl);       /* the holds it keeps are not released */
    else
        session_client_end(&c->cl);
    c->released += c->cl.owner.nholds;     /* for the "closed" log line */
    client_release_all(&c->cl, end != CONN_END_QUIT);
}

/* Releases everything and queues the last reply; conn_on_write closes. */
static void conn_begin_close(struct conn *c, enum conn_end end)
{
    conn_release(c, end);
    conn_set_state(c, CONN_CLOSING);
    /* The last reply may have gone out directly: no write will call back. */
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        bufferevent_trigger(c->bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* No login within the deadline: one line, closed. */
static void conn_login_expired(struct conn *c)
{
    unsigned ms = c->cl.srv->settings->login_timeout_ms;
    char text[64];

    c->login = CONN_LOGIN_NONE;
    c->cl.srv->stats.login_timeouts++;
    log_info("conn %llu (%s): no login within %u ms; closing", (unsigned long long)c->cl.id,
             c->cl.peer, ms);
    snprintf(text, sizeof(text), "no login within %u ms; closing", ms);
    client_reply_err(&c->cl, PROTO_ERR_NOAUTH, text);
    conn_begin_close(c, CONN_END_CLOSED);
}

static void conn_on_login_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    if (c->login != CONN_LOGIN_DUE || c->state == CONN_CLOSING || c->state == CONN_LINGER)
        return;
    /* An AUTH is being checked or its failure delayed: its answer comes first. */
    if (c->cl.pending) {
        log_debug("conn %llu (%s): login deadline passed while %s is answered",
                  (unsigned long long)c->cl.id, c->cl.peer, c->cl.pending->what);
        c->login = CONN_LOGIN_OVERDUE;
        return;
    }
    conn_login_expired(c);
}

/* Starts the login deadline, when the users file asks for a login and the
 * connection has none. Returns 0, or -1 when out of memory. */
static int conn_login_arm(struct conn *c)
{
    const struct server *srv = c->cl.srv;
    unsigned ms = srv->settings->login_timeout_ms;
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

    if (!srv->users || !ms || c->cl.user || c->refusal)
        return 0;
    if (!c->login_timer && !(c->login_timer = evtimer_new(srv->base, conn_on_login_timeout, c)))
        return -1;
    if (evtimer_add(c->login_timer, &tv) < 0)
        return -1;
    c->login = CONN_LOGIN_DUE;
    return 0;
}

/* A login (AUTH, a certificate, a handover): no deadline any more. */
static void conn_logged_in(struct client *cl)
{
    struct conn *c = conn_of(cl);

    c->login = CONN_LOGIN_NONE;
    if (c->login_timer)
        evtimer_del(c->login_timer);
}

/* QUIT: released as by UNLOCK (no lock-delay), closed once BYE is out. */
static void conn_quit(struct client *cl)
{
    conn_begin_close(conn_of(cl), CONN_END_QUIT);
}

/* RESUME on another connection took this one's session: closed now,
 * without a reply, as a connection that ended (its session detaches). */
static void conn_cut(struct client *cl)
{
    struct conn *c = conn_of(cl);

    log_info("conn %llu (%s): its session was resumed on another connection; closing",
             (unsigned long long)c->cl.id, c->cl.peer);
    conn_free(c);
}

static const struct client_io conn_io = {
    .write = conn_write,
    .backed_up = conn_backed_up,
    .suspend = conn_suspend,
    .resume = conn_resume,
    .quit = conn_quit,
    .logged_in = conn_logged_in,
    .cut = conn_cut,
};

/*
 * The plain port's first byte is 0x16, a TLS handshake record, which no
 * request line starts with: the client speaks TLS to the plain port. It
 * could not read an ERR line, so it is closed, with one log line.
 */
static bool conn_tls_on_plain_port(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    unsigned char first;

    if (evbuffer_copyout(in, &first, 1) != 1)
        return false;
    c->any_input = true;
    if (first != 0x16)
        return false;
    log_info("conn %llu (%s): a TLS handshake on the plain port %s; closing (TLS is served "
             "on [tls] listen%s%s)", (unsigned long long)c->cl.id, c->cl.peer,
             c->cl.srv->listen_addr, c->cl.srv->tls_addr[0] ? " " : ", which is off",
             c->cl.srv->tls_addr);
    conn_free(c);
    return true;
}

static void conn_on_handshake_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    c->cl.srv->stats.tls_handshake_failures++;
    log_info("conn %llu (%s): no TLS handshake within %d ms; closing",
             (unsigned long long)c->cl.id, c->cl.peer, TLS_HANDSHAKE_MS);
    conn_free(c);
}

/* A TLS connection: nothing is served before the handshake, which has a deadline. */
static int conn_start_handshake(struct conn *c, struct server *srv, SSL *ssl)
{
    struct timeval tv = { TLS_HANDSHAKE_MS / 1000, (TLS_HANDSHAKE_MS % 1000) * 1000 };

    c->ssl = ssl;
    c->handshaking = true;
    /* A client that closes without close_notify is an ordinary end of input. */
    bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
    if (!(c->handshake_timer = evtimer_new(srv->base, conn_on_handshake_timeout, c)) ||
        evtimer_add(c->handshake_timer, &tv) < 0)
        return -1;
    return 0;
}

/* A verified client certificate whose common name is no user: served
 * anonymously, which the client alone would see as ERR NOAUTH. */
static void conn_log_cert_not_a_user(struct conn *c, const char *cn)
{
    char words[320] = "";
    char shown[PROTO_USER_MAX * 4 + 1];
    size_t j = 0;

    /* The CN is the client's text: what is not printable is shown as '?'. */
    for (const char *p = cn; *p && j < sizeof(shown) - 1; p++)
        shown[j++] = *p >= 0x20 && *p < 0x7f ? *p : '?';
    shown[j] = '\0';
    tls_peer_cert_words(c->ssl, words, sizeof(words));
    log_info("conn %llu (%s): the client certificate's CN '%s' is not a user of users_file; "
             "served as not logged in (AUTH needed)%s%s", (unsigned long long)c->cl.id,
             c->cl.peer, shown, words[0] ? ": " : "", words);
}

/*
 * The handshake ended: a client certificate that verified against ca_file
 * and whose common name is a user of the users file logs the connection in
 * as that user; any other is served with the anonymous rules (AUTH works).
 */
static void conn_handshake_done(struct conn *c)
{
    char name[PROTO_USER_MAX + 2];
    const struct user *u = NULL;

    if (!c->handshaking)
        return;
    c->handshaking = false;
    evtimer_del(c->handshake_timer);
    if (c->addr[0])
        peer_count_add(c->cl.srv->peers, c->addr, 0, -1);
    if (c->refusal) {
        log_debug("conn %llu (%s): TLS handshake done; refusing: %s",
                  (unsigned long long)c->cl.id, c->cl.peer, c->refusal);
        client_reply(&c->cl, c->refusal, (int)strlen(c->refusal));
        conn_begin_close(c, CONN_END_QUIT);
        return;
    }
    if (tls_peer_name(c->ssl, name, sizeof(name)) && c->cl.srv->users) {
        if (proto_user_valid(name, strlen(name)))
            u = users_find(c->cl.srv->users, name, strlen(name));
        /* The client is told to give -a USER; the operator is told why. */
        if (!u)
            conn_log_cert_not_a_user(c, name);
    }
    if (u)
        client_login(&c->cl, u);
    else if (conn_login_arm(c) < 0) {
        log_error("conn %llu (%s): out of memory; closing", (unsigned long long)c->cl.id,
                  c->cl.peer);
        conn_free(c);
        return;
    }
    log_debug("conn %llu (%s): TLS %s %s%s%s", (unsigned long long)c->cl.id, c->cl.peer,
              SSL_get_version(c->ssl), SSL_get_cipher_name(c->ssl),
              u ? ", logged in by certificate as " : "", u ? c->cl.user_name : "");
}

/* The handshake failed (a plain-text client, a certificate refused...): one line, closed. */
static void conn_handshake_failed(struct conn *c, short what)
{
    unsigned long e = bufferevent_get_openssl_error(c->bev);
    char reason[256] = "the client closed the connection";
    const char *cert = tls_verify_failure(c->ssl);
    const char *which = cert ? tls_refused_cert(c->ssl) : NULL;
    int r = e ? ERR_GET_REASON(e) : 0;

    /* Library 0 is libevent passing on an I/O failure (a reset...), not OpenSSL's. */
    if (e && ERR_GET_LIB(e) == 0)
        snprintf(reason, sizeof(reason), "the connection failed during it (reset or closed)");
    else if (e && ERR_GET_LIB(e) == ERR_LIB_SSL &&
             (r == SSL_R_WRONG_VERSION_NUMBER || r == SSL_R_HTTP_REQUEST ||
              r == SSL_R_HTTPS_PROXY_REQUEST))
        /* The first bytes are no TLS record: OpenSSL's words name no cause. */
        snprintf(reason, sizeof(reason), "plain text on the TLS port (a client without TLS?)");
    else if (e)
        ERR_error_string_n(e, reason, sizeof(reason));
    while (bufferevent_get_openssl_error(c->bev))
        ;
    c->cl.srv->stats.tls_handshake_failures++;
    log_info("conn %llu (%s): TLS handshake failed: %s%s%s%s%s%s; closing",
             (unsigned long long)c->cl.id, c->cl.peer, reason,
             cert ? " (the client's certificate: " : "", cert ? cert : "",
             which ? "; " : "", which ? which : "", cert ? ")" : "");
    conn_free(c);
}

/*
 * A waiting connection is read on: were it left unread, a client that hung
 * up behind more requests than the socket buffers take would never be seen
 * to go, and its locks would stay held. What it may send meanwhile is
 * bounded; past the bound it is closed, its locks released, its wait
 * cancelled. The ERR line takes the place of the waiting request's answer.
 */
static void conn_check_waiting_input(struct conn *c)
{
    size_t max = conn_input_max(c->cl.srv);
    char text[96];

    if (c->state != CONN_WAITING || evbuffer_get_length(bufferevent_get_input(c->bev)) <= max)
        return;
    snprintf(text, sizeof(text), "requests sent behind a waiting one are limited to %zu bytes",
             max);
    log_info("conn %llu (%s): more than %zu bytes sent behind a waiting request, closing",
             (unsigned long long)c->cl.id, c->cl.peer, max);
    client_reply_err(&c->cl, PROTO_ERR_LIMIT, text);
    conn_begin_close(c, CONN_END_CLOSED);
}

/* Parses and answers complete lines while the state allows it. */
static void conn_process(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t max_line = c->cl.srv->settings->max_line;

    /* A handover is under way: what is not parsed yet goes to the successor. */
    while (c->state == CONN_READING && !c->cl.srv->handing_over) {
        struct evbuffer_ptr eol;
        struct proto_req req;
        size_t eol_len = 0;
        const char *line;

        if (evbuffer_get_length(out) >= OUTPUT_MAX) {
            conn_set_state(c, CONN_DRAINING);
            break;
        }
        if (!c->any_input && !c->ssl && conn_tls_on_plain_port(c))
            return;
        /* Search for end of line; a line is too long before its LF arrives. */
        eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if ((eol.pos < 0 && evbuffer_get_length(in) > max_line) ||
            (eol.pos >= 0 && (size_t)eol.pos > max_line)) {
            char text[64];
            snprintf(text, sizeof(text), "request lines are limited to %zu bytes", max_line);
            log_info("conn %llu (%s): line too long, closing", (unsigned long long)c->cl.id,
                     c->cl.peer);
            client_reply_err(&c->cl, PROTO_ERR_LINE_TOO_LONG, text);
            conn_begin_close(c, CONN_END_CLOSED);
            break;
        }
        if (eol.pos < 0) {
            /* Everything that came before the end of input is answered. */
            if (c->cl.input_ended)
                conn_begin_close(c, CONN_END_LOST);
            break;
        }
        line = (const char *)evbuffer_pullup(in, eol.pos + 1);
        switch (proto_parse(line, (size_t)eol.pos, &req)) {
        case PROTO_REQUEST:
            cmd_dispatch(&c->cl, &req);
            break;
        case PROTO_ERROR:
            client_reply_err(&c->cl, req.err, req.errmsg);
            break;
        case PROTO_BLANK:
            break;
        }
        evbuffer_drain(in, eol.pos + 1);
    }
    conn_check_waiting_input(c);
}

static void conn_on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;

    if (c->state == CONN_LINGER) {
        struct evbuffer *in = bufferevent_get_input(bev);
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    conn_process(c);
}

static void conn_on_linger_timeout(evutil_socket_t fd, short what, void *arg)
{
    conn_free(arg);
}

static void conn_on_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct timeval tv = { LINGER_SECONDS, 0 };

    /* Drained: watches whose latest line did not fit get it now. */
    client_drained(&c->cl);
    switch (c->state) {
    case CONN_DRAINING:
        conn_set_state(c, CONN_READING);
        conn_process(c);
        break;
    case CONN_CLOSING:
        /* Half-close, then read until the client closes too: closing with
         * unread input would reset the connection and could lose the reply.
         * A client that ended its input already has nothing left to send. */
        if (c->ssl)
            SSL_shutdown(c->ssl);     /* close_notify first: the client sees a clean end */
        shutdown(bufferevent_getfd(bev), SHUT_WR);
        if (c->cl.input_ended) {
            conn_free(c);
            return;
        }
        conn_set_state(c, CONN_LINGER);
        c->linger_timer = evtimer_new(c->cl.srv->base, conn_on_linger_timeout, c);
        if (!c->linger_timer || evtimer_add(c->linger_timer, &tv) < 0) {
            conn_free(c);
            return;
        }
        bufferevent_setwatermark(bev, EV_READ, 0, 0);
        conn_on_read(bev, c);
        break;
    default:
        break;
    }
}

/*
 * Why the kernel ended a connection, for the log. ETIMEDOUT: keepalive
 * probes or sent data went unanswered for as long as the tcp_keepalive_* and
 * tcp_user_timeout_ms settings allow. Such a timeout reports instead the
 * last ICMP error seen meanwhile (EHOSTUNREACH once ARP gave up on the host).
 */
static bool peer_stopped_answering(int err)
{
    return err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN;
}

static void conn_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    int err = EVUTIL_SOCKET_ERROR();    /* before anything else can change errno */

    if (what & BEV_EVENT_CONNECTED) {
        conn_handshake_done(c);
        return;
    }
    if (c->handshaking) {
        conn_handshake_failed(c, what);
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    /* End of input (a half-close, `nc -N`): answer what came, then close. */
    if (!(what & BEV_EVENT_ERROR) && !c->send_err && !c->cl.input_ended &&
        (c->state == CONN_READING || c->state == CONN_WAITING || c->state == CONN_DRAINING)) {
        log_debug("conn %llu (%s): end of input; answering what came, then closing",
                  (unsigned long long)c->cl.id, c->cl.peer);
        c->cl.input_ended = true;
        if (c->state == CONN_WAITING)
            client_input_ended(&c->cl);
        else if (c->state == CONN_READING)
            conn_process(c);
        return;
    }
    /* A failed direct send took the error: the bufferevent then reads EOF. */
    if (c->send_err) {
        err = c->send_err;
        what |= BEV_EVENT_ERROR;
    }
    if ((what & BEV_EVENT_ERROR) && peer_stopped_answering(err))
        log_info("conn %llu (%s): peer stopped answering (keepalive/user timeout), closing: %s",
                 (unsigned long long)c->cl.id, c->cl.peer, evutil_socket_error_to_string(err));
    else if (what & BEV_EVENT_ERROR)
        log_debug("conn %llu (%s): socket error: %s", (unsigned long long)c->cl.id, c->cl.peer,
                  evutil_socket_error_to_string(err));
    conn_free(c);
}

/* Counts c under its address in srv->peers (not a Unix socket client, not
 * a refusal). Returns 0, or -1 when out of memory. */
static int conn_count_peer(struct conn *c, struct server *srv, const char *peer, bool tls)
{
    if (c->refusal || strcmp(peer, "unix") == 0)
        return 0;
    auth_budget_addr(peer, c->addr);
    if (peer_count_add(srv->peers, c->addr, 1, tls ? 1 : 0) < 0) {
        c->addr[0] = '\0';
        return -1;
    }
    return 0;
}

struct conn *conn_new(struct server *srv, evutil_socket_t fd, const char *peer, SSL *ssl,
                      const char *refusal)
{
    struct conn *c = calloc(1, sizeof(*c));

    if (c && refusal && !(c->refusal = strdup(refusal))) {
        free(c);
        c = NULL;
    }
    if (!c || conn_count_peer(c, srv, peer, ssl != NULL) < 0) {
        if (c)
            free(c->refusal);
        free(c);
        evutil_closesocket(fd);
        SSL_free(ssl);
        return NULL;
    }
    if (ssl)
        c->bev = bufferevent_openssl_socket_new(srv->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                BEV_OPT_CLOSE_ON_FREE);
    else
        c->bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev || (ssl && conn_start_handshake(c, srv, ssl) < 0)) {
        if (c->bev)
            bufferevent_free(c->bev);
        else
            SSL_free(ssl);
        evutil_closesocket(fd);
        if (c->handshake_timer)
            event_free(c->handshake_timer);
        if (c->addr[0])
            peer_count_add(srv->peers, c->addr, -1, ssl ? -1 : 0);
        free(c->refusal);
        free(c);
        return NULL;
    }
    client_init(&c->cl, srv, &conn_io, &cmd_owner_ops, ++srv->next_conn_id, peer);
    c->state = CONN_READING;
    bufferevent_setcb(c->bev, conn_on_read, conn_on_write, conn_on_event, c);
    conn_set_watermark(c);
    TAILQ_INSERT_TAIL(&srv->conns, c, link);
    if (c->refusal) {
        srv->nrefusing++;
    } else {
        srv->nconns++;
        srv->stats.conns_total++;
    }
    /* Over TLS the deadline starts once the handshake is done. */
    if (bufferevent_enable(c->bev, EV_READ | EV_WRITE) < 0 || (!ssl && conn_login_arm(c) < 0)) {
        conn_free(c);
        return NULL;
    }
    log_debug("conn %llu (%s): open%s", (unsigned long long)c->cl.id, c->cl.peer,
              c->refusal ? " to be refused" : "");
    return c;
}

void conn_settings_changed(struct server *srv)
{
    struct conn *c;

    TAILQ_FOREACH(c, &srv->conns, link) {
        if (c->state == CONN_LINGER)
            continue;
        conn_set_watermark(c);
        /* A smaller max_line may leave a waiting connection past the bound. */
        conn_check_waiting_input(c);
    }
}

void conn_users_changed(struct server *srv)
{
    struct conn *c, *next;

    for (c = TAILQ_FIRST(&srv->conns); c; c = next) {
        next = TAILQ_NEXT(c, link);
        if (client_relogin(&c->cl) || c->state == CONN_CLOSING || c->state == CONN_LINGER)
            continue;
        /* Its locks were taken under a login that no longer exists. */
        log_info("conn %llu (%s): user %s is no longer in the users file, closing",
                 (unsigned long long)c->cl.id, c->cl.peer, c->cl.user_name);
        conn_begin_close(c, CONN_END_CLOSED);
    }
}

void conn_free(struct conn *c)
{
    conn_release(c, CONN_END_LOST);
    log_debug("conn %llu (%s): closed, %u holds and waits released",
              (unsigned long long)c->cl.id, c->cl.peer, c->released);
    TAILQ_REMOVE(&c->cl.srv->conns, c, link);
    if (c->refusal)
        c->cl.srv->nrefusing--;
    else
        c->cl.srv->nconns--;
    if (c->addr[0])
        peer_count_add(c->cl.srv->peers, c->addr, -1, c->handshaking ? -1 : 0);
    accept_pause_wake(c->cl.srv->accept_pause);   /* a descriptor is free again */
    if (c->linger_timer)
        event_free(c->linger_timer);
    if (c->handshake_timer)
        event_free(c->handshake_timer);
    if (c->login_timer)
        event_free(c->login_timer);
    free(c->refusal);
    bufferevent_free(c->bev);
    client_destroy(&c->cl);
    free(c);
}

/*
 * The restart's part (restart.h; data: the struct server): a "conn" record
 * per connection (descriptor, peer, the client's fields, bytes received
 * but not parsed, replies not sent) and its descriptor.
 *
 * Connections that cannot be carried over go first: TLS ones (their
 * session keys live in OpenSSL's memory) and those already closing down.
 * Returns how many were closed.
 */
static unsigned conn_shed(void *data)
{
    struct server *srv = data;
    struct conn *c, *next;
    unsigned n = 0;

    for (c = TAILQ_FIRST(&srv->conns); c; c = next) {
        next = TAILQ_NEXT(c, link);
        if (c->ssl || c->state == CONN_LINGER) {
            if (c->ssl)
                log_info("conn %llu (%s): a TLS connection cannot be handed over; closing",
                         (unsigned long long)c->cl.id, c->cl.peer);
            conn_free(c);
            n++;
        }
    }
    return n;
}

/* Whether every connection can be carried over now; *why names one that
 * cannot. What each one waits for is the client's part's (client.h). */
static bool conn_ready(void *data, char *why, size_t len)
{
    struct server *srv = data;
    struct conn *c;

    TAILQ_FOREACH(c, &srv->conns, link) {
        if (c->ssl || c->state == CONN_LINGER)
            continue;
        if (c->state == CONN_CLOSING) {
            snprintf(why, len, "conn %llu (%s) is closing", (unsigned long long)c->cl.id,
                     c->cl.peer);
            return false;
        }
    }
    return true;
}

static void save_buffer(struct snap_w *w, struct evbuffer *b)
{
    size_t len = evbuffer_get_length(b);

    snap_w_bytes(w, len ? (const void *)evbuffer_pullup(b, -1) : "", len);
}

static void conn_save(void *data, struct snap_w *w)
{
    struct server *srv = data;
    struct conn *c;

    TAILQ_FOREACH(c, &srv->conns, link) {
        snap_w_rec(w, "conn");
        snap_w_u64(w, c->cl.id);
        snap_w_i64(w, bufferevent_getfd(c->bev));
        snap_w_str(w, c->cl.peer);
        client_save_fields(&c->cl, w);
        save_buffer(w, bufferevent_get_input(c->bev));
        save_buffer(w, bufferevent_get_output(c->bev));
    }
}

static void conn_each_fd(void *data, void (*fn)(void *arg, int fd, uint64_t id), void *arg)
{
    struct server *srv = data;
    struct conn *c;

    TAILQ_FOREACH(c, &srv->conns, link)
        fn(arg, bufferevent_getfd(c->bev), c->cl.id);
}

/* A bufferevent's input is the socket's to fill: unfrozen for the bytes
 * the daemon before had read. */
static int restore_input(struct evbuffer *in, const char *p, size_t len)
{
    int rc;

    evbuffer_unfreeze(in, 0);
    rc = evbuffer_add(in, p, len);
    evbuffer_freeze(in, 0);
    return rc;
}

/* conn_new for a carried-over connection, with nothing started yet. They
 * come in increasing id order, as written. */
static bool conn_restore(void *data, struct snap_r *r, struct restart_in *rin)
{
    struct server *srv = data;
    uint64_t id = snap_r_u64(r);
    int64_t old_fd = snap_r_i64(r);
    char peer[64];
    const char *in, *out;
    size_t in_len, out_len;
    struct conn *c;
    int fd;

    snap_r_str_copy(r, peer, sizeof(peer));
    if (!snap_r_ok(r))
        return false;
    if (srv->nconns && id <= srv->next_conn_id)
        return snap_r_fail(r, "conn %llu is out of order", (unsigned long long)id);
    if ((fd = rin->fd_of(rin->fd_arg, old_fd, id)) < 0)
        return snap_r_fail(r, "conn %llu: its descriptor %lld was not passed on",
                           (unsigned long long)id, (long long)old_fd);
    if (!(c = calloc(1, sizeof(*c))) ||
        !(c->bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE))) {
        free(c);
        return snap_r_fail(r, "out of memory");
    }
    client_init(&c->cl, srv, &conn_io, &cmd_owner_ops, id, peer);
    c->state = CONN_READING;
    c->any_input = true;
    TAILQ_INSERT_TAIL(&srv->conns, c, link);
    srv->nconns++;
    if (conn_count_peer(c, srv, peer, false) < 0)
        return snap_r_fail(r, "out of memory");
    if (srv->next_conn_id < id)
        srv->next_conn_id = id;
    bufferevent_setcb(c->bev, conn_on_read, conn_on_write, conn_on_event, c);
    conn_set_watermark(c);
    if (!client_restore_fields(&c->cl, r, rin))
        return false;
    in = snap_r_str(r, &in_len);
    out = snap_r_str(r, &out_len);
    if (!snap_r_done(r))
        return false;
    if (in_len && restore_input(bufferevent_get_input(c->bev), in, in_len) < 0)
        return snap_r_fail(r, "out of memory");
    if (out_len && evbuffer_add(bufferevent_get_output(c->bev), out, out_len) < 0)
        return snap_r_fail(r, "out of memory");
    return true;
}

/* Every restored connection is served from here on. */
static void conn_resume_restored(struct server *srv)
{
    struct conn *c, *next;

    for (c = TAILQ_FIRST(&srv->conns); c; c = next) {
        next = TAILQ_NEXT(c, link);
        bufferevent_enable(c->bev, EV_READ | EV_WRITE);
        if (c->cl.user_gone) {
            log_info("conn %llu (%s): user %s is no longer in the users file, closing",
                     (unsigned long long)c->cl.id, c->cl.peer, c->cl.user_name);
            conn_begin_close(c, CONN_END_CLOSED);
            continue;
        }
        /* The snapshot has no field for the deadline: a full one starts anew. */
        if (conn_login_arm(c) < 0) {
            log_error("conn %llu (%s): out of memory; closing", (unsigned long long)c->cl.id,
                      c->cl.peer);
            conn_begin_close(c, CONN_END_CLOSED);
            continue;
        }
        /* Lines that came in before the handover are parsed as if just read. */
        if (c->state == CONN_READING)
            conn_parse_later(c);
        log_debug("conn %llu (%s): carried over (%s, %u holds and waits)",
                  (unsigned long long)c->cl.id, c->cl.peer, state_names[c->state],
                  c->cl.owner.nholds);
    }
}

/* Serving again: the handover was given up (read again), or, in the
 * successor, every record was read. */
static void conn_restart_resume(void *data, bool taken_over)
{
    struct server *srv = data;
    struct conn *c;

    if (taken_over) {
        conn_resume_restored(srv);
        return;
    }
    TAILQ_FOREACH(c, &srv->conns, link)
        if (c->state == CONN_READING)
            conn_parse_later(c);
}

const struct restart_part conn_restart_part = {
    .name = "connections",
    .kinds = (const struct restart_kind[]){ { "conn", conn_restore }, { NULL } },
    .save = conn_save,
    .shed = conn_shed,
    .ready = conn_ready,
    .each_fd = conn_each_fd,
    .resume = conn_restart_resume,
};
