/*
 * zk_loop.c - distributed mode, bottom layer: the libevent adapter that
 * drives the session's handle (zk.h draws the layers).
 *
 * One event watches the handle's socket and a timer carries its timeout,
 * both re-armed from zookeeper_interest() after every zookeeper_process()
 * and after requests (zk_kick); the event never stays on a socket the
 * client closed (see zk_io_check). After each pass the listeners are told
 * `flush`. zk_session.c opens and closes the handle; this file only feeds
 * it the loop's events.
 */
#include "config.h"
#include "zk_loop.h"

#include <event2/event.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "locks.h"
#include "log.h"
#include "zk_timing.h"

/* Why a connection attempt got no session (zk_loop.h). */
const char ZK_CAUSE_SILENT[] =
    "a server accepted the connection but did not answer the session handshake";
const char ZK_CAUSE_REFUSED[] = "no server accepted a connection";

static void on_io(evutil_socket_t fd, short what, void *arg);

/*
 * The io event must never stay on a socket the client closed (issue 29,
 * item 10). libzookeeper_st closes its socket by itself, in three places
 * (zookeeper.c of 3.8):
 *  - zookeeper_process(): a read or write error, a refused connect, an
 *    expired session (check_events -> handle_socket_error_msg ->
 *    handle_error -> cleanup -> close_zsock);
 *  - zookeeper_interest(): no reply for 2/3 of the timeout ("connection
 *    ... timed out"), a failed connect(), a changed server list;
 *  - every zoo_a*() request, outside zookeeper_process() too: its send is
 *    tried at once (nonblocking_send) and when that fails (EPIPE: the
 *    server closed the connection, as it does when it expires the
 *    session) the socket is closed there, with no session event and no
 *    completion; the state becomes ZOO_NOTCONNECTED_STATE.
 * The kernel drops a closed socket from epoll, but libevent still counts
 * the number as ours: a socket that gets the number next (the client's
 * next connection, a client the daemon accepts) would share our entry,
 * never reach epoll, or wake on_io for someone else. And libevent deletes
 * and adds again, by itself, a persistent event whose timeout expires:
 * after SIGSTOP/SIGCONT past the session timeout, a probe round's
 * zoo_async() (a timer run before the io event's) found the connection
 * closed and closed the socket, and libevent then added the io event for
 * its timeout: "[warn] Epoll ADD(1) on fd 7 failed ... Bad file
 * descriptor". Hence: io has no timeout (io_timer has), so only zk_rearm
 * adds it, for the socket zookeeper_interest() just named; and after each
 * call that can close the socket (zookeeper_process in on_io,
 * zookeeper_interest here, requests: zk_kick, which follows every request
 * made outside zookeeper_process) zk_io_check takes io off a socket the
 * client no longer has, before the loop runs anything else.
 */

/* Whether the client has a socket: it is in a state it is in only with
 * one (each close_zsock() of a live handle leaves the state 0,
 * ZOO_NOTCONNECTED_STATE or expired / auth failed). */
static bool zk_client_has_socket(const struct zk *zk)
{
    int st;

    if (!zk->zh)
        return false;
    st = zoo_state(zk->zh);
    return st == ZOO_CONNECTING_STATE || st == ZOO_ASSOCIATING_STATE ||
           st == ZOO_CONNECTED_STATE || st == ZOO_READONLY_STATE;
}

/* Takes io off its socket. */
void zk_io_off(struct zk *zk)
{
    if (zk->io_fd == -1)
        return;
    event_del(zk->io);
    zk->io_fd = -1;
    zk->io_what = 0;
}

/* After a call into the client: io leaves a socket the client closed. */
static void zk_io_check(struct zk *zk)
{
    if (zk->io_fd != -1 && !zk_client_has_socket(zk))
        zk_io_off(zk);
}

void zk_rearm(struct zk *zk)
{
    struct timeval tv = { 0, 0 };
    int fd = -1, interest = 0, rc;
    short what = 0;
    bool kept;

    zk_io_check(zk);
    if (!zk->zh || zk->state == ZK_EXPIRED) {
        /* Nothing to watch until the restart replaces the handle. */
        zk_io_off(zk);
        evtimer_del(zk->io_timer);
        return;
    }
    /* Connected before and after: the same socket, as the client connects
     * a new one only in zookeeper_process(). */
    kept = zoo_state(zk->zh) == ZOO_CONNECTED_STATE;
    rc = zookeeper_interest(zk->zh, &fd, &interest, &tv);
    if (rc != ZOK) {
        /* A failed connect attempt or a connection timed out (its fd is
         * closed): the client tries the next host when called again. */
        fd = -1;
        tv.tv_sec = 0;
        tv.tv_usec = 100 * 1000;
    }
    zk_io_check(zk);
    kept = kept && zoo_state(zk->zh) == ZOO_CONNECTED_STATE;
    if (fd != -1) {
        if (interest & ZOOKEEPER_READ)
            what |= EV_READ;
        if (interest & ZOOKEEPER_WRITE)
            what |= EV_WRITE;
    }
    /*
     * The same connected socket with the same interest: io stays as it is
     * (no epoll_ctl), only the timer moves. Otherwise add it again, even
     * for the same number: while connecting, a socket the client closed
     * (a refused connect) is followed by one that usually gets its number.
     */
    if (fd == -1 || what == 0) {
        zk_io_off(zk);
    } else if (!kept || fd != zk->io_fd || what != zk->io_what) {
        zk_io_off(zk);
        event_assign(zk->io, zk->base, fd, what | EV_PERSIST, on_io, zk);
        if (event_add(zk->io, NULL) == 0) {
            zk->io_fd = fd;
            zk->io_what = what;
        } else {
            log_error("zk: cannot watch the ZooKeeper client's socket (fd %d)", fd);
        }
    }
    evtimer_add(zk->io_timer, &tv);

    /* A socket but no session yet: time the handshake (see on_stalled,
     * zk_session.c). */
    if (zk->state == ZK_CONNECTING && fd != -1) {
        if (!evtimer_pending(zk->stalled, NULL)) {
            int limit = zk_handshake_limit_ms(zk);
            struct timeval lt = { limit / 1000, (limit % 1000) * 1000 };
            evtimer_add(zk->stalled, &lt);
        }
    } else {
        evtimer_del(zk->stalled);
    }
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    int events = 0;

    zk->before_io(zk);            /* before anything read now is believed */
    /* A request sent just now may have closed the socket (zk_kick took io
     * off it): what epoll said was about that one. */
    if (fd != zk->io_fd)
        what &= ~(EV_READ | EV_WRITE);
    /* A connect has ended. Connected, the client sends its handshake in this
     * zookeeper_process(): a session it makes begins after now (confirmed_at
     * of a new session). Refused or unreachable (no peer), the client goes on
     * to the next server at once, and no stall will say why: the down report
     * does, unless a stall said more. */
    if ((what & EV_WRITE) && zk->state == ZK_CONNECTING &&
        zoo_state(zk->zh) == ZOO_CONNECTING_STATE) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof(peer);

        zk->conn_started_ms = locks_mono_ms();
        if (getpeername((int)fd, (struct sockaddr *)&peer, &peer_len) != 0 && !zk->stall_cause)
            zk->stall_cause = ZK_CAUSE_REFUSED;
    }
    if (what & EV_READ)
        events |= ZOOKEEPER_READ;
    if (what & EV_WRITE)
        events |= ZOOKEEPER_WRITE;
    zk->in_process = true;
    zookeeper_process(zk->zh, events);
    zk_io_check(zk);
    /* The client handles one reply per call; take the others already in
     * the socket now rather than after another trip through epoll (while
     * fd is still the client's socket). */
    if (events & ZOOKEEPER_READ) {
        char c;
        for (int i = 0; i < 64 && zk->io_fd == fd && zk->state == ZK_CONNECTED &&
                        recv((int)fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1; i++) {
            zookeeper_process(zk->zh, ZOOKEEPER_READ);
            zk_io_check(zk);
        }
    }
    zk->in_process = false;
    /* Writes queued by the replies just handled go out as one multi. */
    TELL(zk, flush);
    zk_rearm(zk);
}

/* The time zookeeper_interest() gave has come: the client pings, gives up
 * a silent connection, or connects again. */
static void on_io_timer(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;

    on_io(zk->io_fd, EV_TIMEOUT, zk);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;

    zk->kicked = false;
    TELL(zk, flush);
    zk_rearm(zk);
}

void zk_kick(struct zk *zk)
{
    /* A request whose send failed has closed the socket: io leaves it
     * now, before the loop runs anything that could get its number. */
    zk_io_check(zk);
    if (zk->in_process || zk->kicked)
        return;              /* on_io re-arms after zookeeper_process */
    zk->kicked = true;
    event_active(zk->kick, 0, 0);
}

int zk_loop_init(struct zk *zk, void (*before_io)(struct zk *zk))
{
    zk->before_io = before_io;
    zk->io = event_new(zk->base, -1, 0, on_io, zk);
    zk->io_fd = -1;
    zk->io_timer = evtimer_new(zk->base, on_io_timer, zk);
    zk->kick = event_new(zk->base, -1, 0, on_kick, zk);
    if (!zk->io || !zk->io_timer || !zk->kick)
        return -1;
    return 0;
}

void zk_loop_free(struct zk *zk)
{
    if (zk->io)
        event_free(zk->io);
    if (zk->io_timer)
        event_free(zk->io_timer);
    if (zk->kick)
        event_free(zk->kick);
}
