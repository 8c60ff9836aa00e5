/*
 * zk_session.c - distributed mode, bottom layer: the session's lifecycle
 * (zk.h draws the layers).
 *
 * One session (one zhandle_t of the single-threaded C client) serves every
 * connection of this daemon; only the zoo_a* calls are used. This file owns
 * the session's lifecycle (connect, stall, disconnect, expiry, restart, a
 * handover's attach), its timings, the outage reports and the retry timer,
 * and tells each change to the listeners the layers above registered
 * (zk_session.h), never to a layer by name. The libevent adapter that
 * drives the handle is zk_loop.c; what the session vouches for, from
 * confirmed_at, is zk_vouch.c.
 */
#include "config.h"
#include "zk_session.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "locks.h"
#include "log.h"
#include "settings.h"

/* Back-off before retrying after an unexpected ZooKeeper error. */
#define RETRY_MS 500
/* Before a new session after the server refused our credentials: the file
 * must be fixed and the daemon restarted, so retrying often is no use. */
#define AUTH_RETRY_MS 10000

/* ------------------------------------------------------------ listeners */

int zk_session_listen(struct zk *zk, const struct zk_listener *l, void *arg)
{
    if (zk->nlisteners >= ZK_LISTENERS_MAX)
        return -1;
    zk->listeners[zk->nlisteners].l = l;
    zk->listeners[zk->nlisteners].arg = arg;
    zk->nlisteners++;
    return 0;
}

/* First report of an outage after this long, then one a minute. */
#define DOWN_REPORT_FIRST_MS 5000
#define DOWN_REPORT_EVERY_MS 60000

static void arm_down_report(struct zk *zk, int ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

    evtimer_add(zk->down_report, &tv);
}

/*
 * Says once, in words, that ZooKeeper cannot be reached and what clients
 * see meanwhile, then once a minute; the C client's own per-attempt lines
 * are only shown with -v.
 */
static void on_down_report(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    long long secs = (long long)((locks_mono_ms() - zk->down_since_ms) / 1000);
    const char *why = zk_session_why_down(zk);

    if (zk->state == ZK_CONNECTED)
        return;
    if (zk->down_reports++ == 0)
        log_warn("zk: cannot reach ZooKeeper at %s (%s); LOCK waits, TRYLOCK, STATUS and a "
                 "wait that ends meanwhile answer ERR UNAVAILABLE", zk->settings->zk_hosts, why);
    else
        log_warn("zk: still cannot reach ZooKeeper at %s, for %lld s now (%s)",
                 zk->settings->zk_hosts, secs, why);
    arm_down_report(zk, DOWN_REPORT_EVERY_MS);
}

/* The connection is gone or not there yet: from now on, requests wait. */
static void zk_went_down(struct zk *zk)
{
    if (zk->down_since_ms)
        return;
    zk->down_since_ms = locks_mono_ms();
    zk->down_reports = 0;
    arm_down_report(zk, DOWN_REPORT_FIRST_MS);
}

static void zk_came_up(struct zk *zk)
{
    if (zk->down_reports)
        log_info("zk: ZooKeeper reachable again after %lld s",
                 (long long)((locks_mono_ms() - zk->down_since_ms) / 1000));
    zk->down_since_ms = 0;
    zk->down_reports = 0;
    zk->unresolved = false;
    zk->stall_cause = NULL;
    zk->stall_reported = false;
    evtimer_del(zk->down_report);
}

/* Why a connection attempt got no session, for the log and the down
 * report (zk->stall_cause points at one of these). */

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;

    if (zk->state == ZK_CONNECTED)
        TELL(zk, resume);
}

/* Closes the handle; pending completions run now, with ZCLOSING. */
static void zk_close_handle(struct zk *zk)
{
    if (!zk->zh)
        return;
    zk_io_off(zk);
    evtimer_del(zk->io_timer);
    zookeeper_close(zk->zh);
    zk->zh = NULL;
    /* Writes never sent either: whatever they were for looks again. */
    TELL(zk, down, ZCLOSING);
}

static void on_session_event(zhandle_t *zh, int type, int state, const char *path, void *ctx);

static void on_auth(int rc, const void *data)
{
    const struct zk *zk = data;

    /* A refusal also comes as ZOO_AUTH_FAILED_STATE: on_session_event says it. */
    if (rc == ZOK)
        log_debug("zk: ZooKeeper took the digest identity '%.*s'", zk_auth_user_len(zk), zk->auth);
}

/* Adds the credentials to a new handle before any request: the client
 * sends them first on every connection of the handle's session. */
static void zk_add_auth(struct zk *zk)
{
    int rc;

    if (!zk->auth[0])
        return;
    rc = zoo_add_auth(zk->zh, "digest", zk->auth, (int)strlen(zk->auth), on_auth, zk);
    if (rc != ZOK)
        log_error("zk: cannot add the [zookeeper] auth credentials to the handle: %s",
                  zerror(rc));
}

/*
 * Opens a handle: a new session, or the session `id` again. When the handle
 * cannot even be made (no host name resolves), the restart timer tries a new
 * session in a second, as in any other outage.
 */
static void zk_open(struct zk *zk, const clientid_t *id)
{
    struct timeval tv = { 1, 0 };

    zk->state = ZK_CONNECTING;
    zk_went_down(zk);
    zk->conn_started_ms = locks_mono_ms();
    zk->zh = zookeeper_init(zk->settings->zk_hosts, on_session_event,
                            id ? zk_timeout_ms(zk) : (int)zk->settings->zk_session_timeout_ms,
                            id, zk, 0);
    if (!zk->zh) {
        /* The hosts were checked at start-up: what fails is resolving
         * them (or memory). The down report says so once a minute. */
        if (!zk->unresolved)
            log_debug("zk: cannot make a handle for '%s' (no host name resolves?); "
                      "retrying every second", zk->settings->zk_hosts);
        zk->unresolved = true;
        zk->state = ZK_EXPIRED;
        evtimer_add(zk->restart, &tv);
        return;
    }
    /* Resolve host names when connecting, not on every zookeeper_interest()
     * (the default), which costs several system calls per request. */
    zoo_set_servers_resolution_delay(zk->zh, -1);
    zk_add_auth(zk);
    zk_rearm(zk);
}

/*
 * A server that accepts connections before it can serve (ZooKeeper does so
 * while starting) may never answer the handshake; the C client would wait
 * 2/3 of the session timeout, exactly when we must presume our holds lost.
 * Instead, reopen the handle with the same session id and password: the
 * session and its nodes survive (zookeeper_close sends no close request
 * unless connected), and the client tries the next server or this one again.
 */
static void on_stalled(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    clientid_t id;
    bool resume = zk->session_id != 0;

    struct sockaddr_storage peer;
    socklen_t peer_len = sizeof(peer);
    const char *cause;

    if (zk->state != ZK_CONNECTING || !zk->zh)
        return;
    /* A connection that was accepted, or none at all (refused, no route). */
    cause = zk->io_fd >= 0 && getpeername(zk->io_fd, (struct sockaddr *)&peer, &peer_len) == 0
            ? ZK_CAUSE_SILENT : ZK_CAUSE_REFUSED;
    /* Said once per cause and outage; the minute's report says it again. */
    if (!zk->stall_reported || cause != zk->stall_cause)
        log_warn("zk: %s within %d ms; trying again", cause, zk_handshake_limit_ms(zk));
    else
        log_debug("zk: %s within %d ms; trying again", cause, zk_handshake_limit_ms(zk));
    zk->stall_cause = cause;
    zk->stall_reported = true;
    if (resume)
        id = *zoo_client_id(zk->zh);
    zk_close_handle(zk);      /* pending requests complete with ZCLOSING */
    zk->outstanding = 0;
    TELL(zk, closed, false);
    zk_open(zk, resume ? &id : NULL);
}

/*
 * Handover (zk_handover.c): the daemon before had session id, with its
 * password, timeout and confirmation (confirmed_at): the handle made at
 * start-up, which has not connected yet, is replaced by one that attaches to
 * that session. Until it does, the session's confirmation ages as it would
 * have: the lost timer runs from confirmed_at, so a handover that takes too
 * long tells LOST first.
 */
int zk_session_reattach(struct zk *zk, int64_t id, const char *passwd, size_t passwd_len,
                        int negotiated_ms, int64_t confirmed_at_ms, int64_t lost_told_ms,
                        bool presumed_lost)
{
    clientid_t cid = { .client_id = id };

    if (passwd_len != sizeof(cid.passwd) || id == 0)
        return -1;
    memcpy(cid.passwd, passwd, passwd_len);
    zk_close_handle(zk);
    zk->outstanding = 0;
    zk->session_id = id;
    zk->negotiated_ms = negotiated_ms;
    zk->confirmed_at_ms = confirmed_at_ms;
    zk->lost_told_ms = lost_told_ms;
    zk->presumed_lost = presumed_lost;
    zk->sessions = 1;
    zk->attaching = true;
    zk_open(zk, &cid);
    explicit_bzero(&cid, sizeof(cid));
    if (!zk->zh)
        return -1;
    zk_session_confirmed(zk);
    /* What a CHECK answered before the handover promised ends at
     * confirmed_at + T at the earliest; the holds are given up well before
     * that, at the lost deadline. */
    log_info("zk: attaching to session 0x%llx, taken over (timeout %d ms, confirmed %lld ms "
             "ago): its holds are presumed lost unless it is attached within %lld ms",
             (unsigned long long)id, negotiated_ms,
             (long long)(confirmed_at_ms ? locks_mono_ms() - confirmed_at_ms : -1),
             (long long)(zk_lost_deadline_ms(zk) ? zk_lost_deadline_ms(zk) - locks_mono_ms()
                                                  : 0));
    return 0;
}

void zk_session_secret(const struct zk *zk, int64_t *id, char *passwd, size_t len)
{
    const clientid_t *cid = zk->zh ? zoo_client_id(zk->zh) : NULL;

    *id = cid ? cid->client_id : 0;
    memset(passwd, 0, len);
    if (cid)
        memcpy(passwd, cid->passwd, len < sizeof(cid->passwd) ? len : sizeof(cid->passwd));
}

/* The session expired: everything it owned in ZooKeeper is gone. */
static void on_restart(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;

    zk_close_handle(zk);
    TELL(zk, closed, true);
    zk->outstanding = 0;
    zk_open(zk, NULL);
}


/*
 * Said once per new session. The timeout advised is the smallest from
 * which on every one fits (P grows with it, rounded down: T - 4P drops
 * where T/10 steps up, each time to above where the step before left it,
 * so past ten in a row that fit, all do). It also allows a handover: with
 * P at least a tenth of T (rounded down), 2(W + 2P) < T gives
 * W < 0.3 T + 2, under T/3 as T is at least 1000 (settings.c). So whenever
 * handovers are refused (zk_handover.c), this warning is given, and says so.
 */
static void zk_check_window_settings(const struct zk *zk)
{
    int timeout = zk_timeout_ms(zk), advised = timeout, run = 0;

    if (zk_window_fits(zk, timeout))
        return;
    for (; run < 10; advised++)
        run = zk_window_fits(zk, advised) ? run + 1 : 0;
    advised -= 10;
    log_warn("zk: the %d ms session timeout is short for [zookeeper] tick_ms %u: CHECK "
             "windows and locks would be given up at the least delay%s; use a timeout of "
             "at least %d ms", timeout, zk->settings->zk_tick_ms,
             zk_handover_fits(zk_ping_wait_ms(zk), timeout) ? ""
                 : ", and SIGUSR2 handovers are refused", advised);
}

static void on_session_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct zk *zk = ctx;

    if (type != ZOO_SESSION_EVENT)
        return;
    if (state == ZOO_CONNECTED_STATE) {
        const clientid_t *id = zoo_client_id(zh);
        bool same = zk->session_id == id->client_id;
        zk->state = ZK_CONNECTED;
        zk->attaching = false;
        zk_came_up(zk);
        zk->negotiated_ms = zoo_recv_timeout(zh);
        zk->conn_serial++;
        if (same) {
            zk->reconnects++;
        } else {
            /* The leader began it, with a full timeout, after its request was
             * sent, which was after this connection attempt began; that
             * leader committed it, so no newer one had started (confirmed_at,
             * zk_presence.c). */
            zk->sessions++;
            zk->session_id = id->client_id;
            zk->confirmed_at_ms = zk->conn_started_ms;
            zk->lost_told_ms = 0;
            zk_check_window_settings(zk);
        }
        /* A reconnection moves nothing: confirmed_at moves once probes on this
         * connection confirm it (zk_presence.c). What waits is told
         * `serving` below, after zk_presence.c's `connected`. */
        zk->grants_held_back = false;
        zk_session_confirmed(zk);
        log_info("zk: %s session 0x%llx, timeout %d ms", same ? "reconnected to" : "new",
                 (unsigned long long)id->client_id, zk->negotiated_ms);
        zk->auth_failed = false;
        /* zk_presence.c first (a confirmation read, the session node, the
         * chroot), then the requests that waited: ZooKeeper answers a
         * session's requests in order. */
        TELL(zk, connected, !same);
        TELL(zk, serving);
    } else if (state == ZOO_CONNECTING_STATE) {
        if (zk->state == ZK_CONNECTED)
            log_warn("zk: disconnected from ZooKeeper; reconnecting");
        zk->state = ZK_CONNECTING;
        zk->conn_started_ms = locks_mono_ms();
        zk_went_down(zk);
        /* As the client fails the requests it had sent, ours that wait fail
         * too, rather than wait for a reconnection that may not come. */
        TELL(zk, down, ZCONNECTIONLOSS);
        /* The lost timer stays armed at confirmed_at + 2/3 of the timeout: a
         * third before the session can expire, for delays on either side. */
        if (!evtimer_pending(zk->lost_timer, NULL))
            zk_session_confirmed(zk);
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        struct timeval later = { AUTH_RETRY_MS / 1000, (AUTH_RETRY_MS % 1000) * 1000 };
        zk->auth_failed = state == ZOO_AUTH_FAILED_STATE;
        if (zk->auth_failed)
            log_error("zk: ZooKeeper refused the digest credentials of user '%.*s' (from %s): "
                      "this handle is unusable; a new session in %d s", zk_auth_user_len(zk),
                      zk->auth, zk->settings->zk_auth ? zk->settings->zk_auth : "?",
                      AUTH_RETRY_MS / 1000);
        else
            log_warn("zk: session 0x%llx expired", (unsigned long long)zk->session_id);
        zk->state = ZK_EXPIRED;
        zk->attaching = false;
        zk->confirmed_at_ms = 0;
        zk_went_down(zk);
        TELL(zk, down, ZSESSIONEXPIRED);
        evtimer_del(zk->lost_timer);
        TELL(zk, lost, "session-expired");
        /* zookeeper_close may not run in a callback; refused credentials
         * would be refused again at once. */
        if (zk->auth_failed)
            evtimer_add(zk->restart, &later);
        else
            event_active(zk->restart, 0, 0);
    }
}

void zk_report_noauth(struct zk *zk, const char *path)
{
    int64_t now = locks_mono_ms();

    if (zk->noauth_reported_ms && now - zk->noauth_reported_ms < 60000)
        return;
    zk->noauth_reported_ms = now;
    /* An [interop] path (conf/interop.h): outside the root, made by
     * whoever locks there. */
    if (strncmp(path, zk->root, strlen(zk->root)) != 0 || path[strlen(zk->root)] != '/')
        log_error("zk: ZooKeeper does not let %s%.*s%s write at %s: whoever made that "
                  "[interop] path (or the nodes above it) must give this daemon's identity "
                  "(its [zookeeper] auth) CREATE, DELETE and READ there",
                  zk->auth[0] ? "user '" : "this daemon", zk_auth_user_len(zk), zk->auth,
                  zk->auth[0] ? "'" : "", path);
    else if (zk->auth[0])
        log_error("zk: ZooKeeper does not let user '%.*s' change %s: its ACL is for another "
                  "identity; every daemon sharing root %s needs the same [zookeeper] auth",
                  zk_auth_user_len(zk), zk->auth, path, zk->root);
    else
        log_error("zk: ZooKeeper does not let this daemon change %s: its ACL is for a digest "
                  "identity; set [zookeeper] auth to the file the other daemons use",
                  path);
}

void zk_session_path(const struct zk *zk, int64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/sessions/%llx", zk->root, (unsigned long long)id);
}

void zk_arm_retry(struct zk *zk)
{
    struct timeval tv = { 0, RETRY_MS * 1000 };

    if (!evtimer_pending(zk->retry, NULL))
        evtimer_add(zk->retry, &tv);
}

/* ------------------------------------------------------------- lifecycle */

int zk_session_init(struct zk *zk, struct event_base *base, const struct settings *s,
                    const char *daemon_id, const char *auth)
{
    zk->base = base;
    zk->settings = s;
    snprintf(zk->root, sizeof(zk->root), "%s", s->zk_root);
    snprintf(zk->daemon_id, sizeof(zk->daemon_id), "%s", daemon_id);
    zk->acl = &ZOO_OPEN_ACL_UNSAFE;
    if (auth) {
        /* "auth" stands for the identities this session authenticated
         * with: the server stores digest:user:<hash> in each node. */
        snprintf(zk->auth, sizeof(zk->auth), "%s", auth);
        zk->acl_entries[0] = (struct ACL){ ZOO_PERM_READ, ZOO_ANYONE_ID_UNSAFE };
        zk->acl_entries[1] = (struct ACL){ ZOO_PERM_ALL, ZOO_AUTH_IDS };
        zk->acl_auth = (struct ACL_vector){ 2, zk->acl_entries };
        zk->acl = &zk->acl_auth;
    }

    /* The client logs every failed connect attempt, several a second during
     * an outage; our own log reports state changes, so it speaks only in -v. */
    zoo_set_log_stream(stderr);
    zoo_set_debug_level(log_get_level() >= LOG_LVL_DEBUG ? ZOO_LOG_LEVEL_WARN : 0);
    if (zk_loop_init(zk, zk_session_check_stall) < 0 || zk_vouch_init(zk) < 0)
        return -1;
    zk->restart = evtimer_new(base, on_restart, zk);
    zk->retry = evtimer_new(base, on_retry, zk);
    zk->stalled = evtimer_new(base, on_stalled, zk);
    zk->down_report = evtimer_new(base, on_down_report, zk);
    if (!zk->restart || !zk->retry || !zk->stalled || !zk->down_report)
        return -1;
    return 0;
}

void zk_session_serving(struct zk *zk)
{
    TELL(zk, serving);
}

void zk_session_open(struct zk *zk)
{
    zk_open(zk, NULL);
}

void zk_session_close(struct zk *zk)
{
    zk_close_handle(zk);
}

void zk_session_free(struct zk *zk)
{
    explicit_bzero(zk->auth, sizeof(zk->auth));
    zk_loop_free(zk);
    zk_vouch_free(zk);
    if (zk->restart)
        event_free(zk->restart);
    if (zk->retry)
        event_free(zk->retry);
    if (zk->stalled)
        event_free(zk->stalled);
    if (zk->down_report)
        event_free(zk->down_report);
}
