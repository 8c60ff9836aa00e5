/*
 * zk_session.h - the bottom layer of distributed mode (zk.h draws the stack):
 * one ZooKeeper session (zk_session.c) driven from the libevent loop
 * (zk_loop.c), what it vouches for (zk_vouch.c), and what proves it alive
 * and ready (zk_presence.c).
 *
 * The layers above never get called by name from here: each registers a
 * struct zk_listener (zk_session_listen), and the session tells every
 * registered listener, in the order they registered, what happened.
 */
#ifndef LOCKBROKER_ZK_SESSION_H
#define LOCKBROKER_ZK_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>

#include "zk_int.h"

/*
 * What the session tells a layer above it. Every member may be NULL; each
 * is called with the arg given to zk_session_listen(), on the loop thread,
 * often from inside zookeeper_process() (a session event, a completion): a
 * listener may send requests (zk_kick) but never closes the handle.
 */
struct zk_listener {
    /* A pass of the event loop is over (after zookeeper_process(), or the
     * kick after requests were queued outside it): send what was queued.
     * Never inside zookeeper_process() nor a completion. */
    void (*flush)(void *arg);
    /* Connected: a new session (fresh) or the same one again. */
    void (*connected)(void *arg, bool fresh);
    /* Requests may go out: just connected (after every `connected`), or
     * the chroot appeared (zk_presence.c). */
    void (*serving)(void *arg);
    /* Work parked after an error may go again: the retry timer ran or a
     * barrier returned, while connected. */
    void (*resume)(void *arg);
    /* The connection (ZCONNECTIONLOSS), the session (ZSESSIONEXPIRED) or
     * the handle (ZCLOSING: closed, its completions ran) is gone: what was
     * queued and never sent fails with rc. */
    void (*down)(void *arg, int rc);
    /* Every hold is presumed lost, with reason ("zk-disconnected",
     * "session-expired"). */
    void (*lost)(void *arg, const char *reason);
    /* After an event-loop stall: replies to reads in flight may be stale
     * (after `lost`). */
    void (*stale_reads)(void *arg);
    /* The handle was closed and a new one opened. session_gone: with its
     * session, so every ephemeral node went with it; otherwise the session
     * lives on and only watches are gone. */
    void (*closed)(void *arg, bool session_gone);
};

/* Registers l (borrowed, must outlive zk) with arg; returns 0, or -1 when
 * ZK_LISTENERS_MAX are registered already. Register bottom layer first. */
int zk_session_listen(struct zk *zk, const struct zk_listener *l, void *arg);

/*
 * Sets up the session part of zk (zeroed by the caller): base and s are
 * borrowed; auth "user:password" is copied (or NULL). Returns 0, or -1
 * when an event cannot be made (zk_session_free() cleans up). Nothing is
 * sent before zk_session_open().
 */
int zk_session_init(struct zk *zk, struct event_base *base, const struct settings *s,
                    const char *daemon_id, const char *auth);
/* Starts connecting (asynchronously): a new session. */
void zk_session_open(struct zk *zk);
/* Closes the handle (its pending completions run now, with ZCLOSING, and
 * the listeners hear `down` ZCLOSING). Blocks: not from a callback. */
void zk_session_close(struct zk *zk);
/* Frees the session's events and forgets the credentials (after close). */
void zk_session_free(struct zk *zk);

/* Requests were queued: make sure the loop wants to write them. Call it
 * after every request made outside zookeeper_process(): a request whose
 * send fails closes the client's socket, which the io event must leave at
 * once (zk_loop.c, zk_io_check). */
void zk_kick(struct zk *zk);
/* Something failed: the listeners' `resume` runs after a back-off. */
void zk_arm_retry(struct zk *zk);
/* Tells every listener `serving` (zk_presence.c, once the chroot is found). */
void zk_session_serving(struct zk *zk);
/* ZooKeeper answered ZNOAUTH for a change to path: says why, at most once
 * a minute. */
void zk_report_noauth(struct zk *zk, const char *path);
/* The path of the node that exists while session `id` lives (lock-delay,
 * zk_fair.c; made by zk_presence.c): <root>/sessions/<id in hex>. */
void zk_session_path(const struct zk *zk, int64_t id, char *buf, size_t len);
/* The session timeout in force: negotiated, or else the one we asked for. */
int zk_timeout_ms(const struct zk *zk);
/* W, 3/4 of [zookeeper] tick_ms: a leader pings each follower at least this
 * often (CHECK's window, zk_presence.c). */
int64_t zk_ping_wait_ms(const struct zk *zk);
/* The same for [zookeeper] tick_ms tick_ms, for settings not in use
 * (--check-handover). */
int64_t zk_tick_ping_wait_ms(unsigned tick_ms);
/* Whether a session timeout of timeout_ms leaves room for a handover with
 * W = w: 3w < timeout_ms (zk_handover.c argues it). */
bool zk_handover_fits(int64_t w, int timeout_ms);
/* How often zk_presence.c sends a probe round: a tenth of the timeout, at
 * least W/8 and 100 ms. */
int zk_probe_period_ms(const struct zk *zk);

/* Before a request is served: past confirmed_at + 2/3 of the session timeout
 * (the event loop stalled, or probes stopped confirming), holds are presumed
 * lost now (see zk_vouch.c). */
void zk_session_check_stall(struct zk *zk);
/* confirmed_at (zk->confirmed_at_ms) moved: the lost timer follows it, and
 * when that ends the presumed-lost state, what waited for it resumes. */
void zk_session_confirmed(struct zk *zk);
/*
 * Whether a grant may be made now (a waiter, a TRYLOCK, a set's step, a
 * lease, a local handoff, an idle node taken over): requests can go out
 * (zk_serving) and the session is vouched for, confirmed_at + 2/3 of the
 * timeout not passed (PROTOCOL.md, "Session states and replies"). false while
 * holds are presumed lost, until probes on the current connection move
 * confirmed_at: what asked waits, and the session tells `resume` once grants
 * may be made.
 */
bool zk_may_grant(struct zk *zk);
/* The session part of zk_may_grant(): connected and confirmed, whatever the
 * agreement check. Enough to pass a node this daemon holds on (a local
 * handoff, an idle node taken over). */
bool zk_vouched(struct zk *zk);
/* The same without noting that something waits for it (STATS). */
bool zk_confirmed(const struct zk *zk);
/* Requests that cannot be served now wait rather than fail: the agreement
 * check is pending (zk_checking), or a handover's successor attaches to
 * the session (until attached, or its holds are presumed lost). */
bool zk_waits(const struct zk *zk);
/* Monotonic ms since requests cannot be served, or 0 (backend.h). */
int64_t zk_session_unreachable_since(const struct zk *zk);
/* Why requests cannot be served now, in words, or NULL (static string). */
const char *zk_session_why_down(const struct zk *zk);

/* zk_presence.c: registers what a new connection must do first (a probe round,
 * the session node, the chroot check). Returns 0 or -1. */
int zk_presence_init(struct zk *zk);
/* CHECK's window (backend.h window_ms): how long the session surely lives. */
int64_t zk_presence_window_ms(const struct zk *zk);
/* confirmed_at + T: no CHECK window given so far ends later
 * (monotonic ms; 0: none). */
int64_t zk_presence_window_end_ms(const struct zk *zk);
void zk_presence_free(struct zk *zk);

/* The user name of the digest identity: auth up to its ':'. */
static inline int zk_auth_user_len(const struct zk *zk)
{
    return (int)strcspn(zk->auth, ":");
}

/* Wall-clock milliseconds since the epoch: what lease deadlines are in. */
static inline int64_t zk_now_ms(void)
{
    struct timeval now;

    gettimeofday(&now, NULL);
    return (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000;
}

/*
 * Handover (zk_handover.c). zk_session_secret: the session's id and
 * password (len bytes, 16), 0 without a session. zk_session_reattach:
 * replaces the start-up handle (not connected yet) by one attaching to the
 * session the daemon before had, with its timeout, confirmation and lost
 * state. Returns 0, or -1 (no handle could be made).
 */
void zk_session_secret(const struct zk *zk, int64_t *id, char *passwd, size_t len);
/* ms until the holds would be presumed lost (confirmed_at + 2/3 of the
 * timeout), -1: no confirmed_at. */
int64_t zk_session_lost_in_ms(const struct zk *zk);
int zk_session_reattach(struct zk *zk, int64_t id, const char *passwd, size_t passwd_len,
                        int negotiated_ms, int64_t confirmed_at_ms, int64_t lost_told_ms,
                        bool presumed_lost);

/*
 * Within the bottom layer only (zk_session.c, zk_loop.c, zk_vouch.c): the
 * layers above never call these.
 */

/* Calls member `fn` of every listener that has one, in registration order. */
#define TELL(zk, fn, ...)                                                             \
    do {                                                                              \
        for (unsigned i_ = 0; i_ < (zk)->nlisteners; i_++)                            \
            if ((zk)->listeners[i_].l->fn)                                            \
                (zk)->listeners[i_].l->fn((zk)->listeners[i_].arg, ##__VA_ARGS__);    \
    } while (0)

/* zk_loop.c: makes zk->io, io_timer and kick (zk_session_init); 0, or -1
 * when one cannot be made. zk_loop_free frees those made (zk_session_free). */
int zk_loop_init(struct zk *zk);
void zk_loop_free(struct zk *zk);
/* zk_loop.c: io and its timer follow what zookeeper_interest() asks for
 * now, and the handshake of a connection attempt is timed (zk->stalled).
 * After a handle is opened, and after each pass of the loop. */
void zk_rearm(struct zk *zk);
/* zk_loop.c: takes io off its socket (before the handle is closed). */
void zk_io_off(struct zk *zk);

/* zk_vouch.c: makes zk->lost_timer (zk_session_init); 0 or -1.
 * zk_vouch_free frees it (zk_session_free). */
int zk_vouch_init(struct zk *zk);
void zk_vouch_free(struct zk *zk);
/* zk_vouch.c: confirmed_at + 2/3 of the session timeout, when holds are
 * presumed lost (monotonic ms); 0 without a session. */
int64_t zk_lost_deadline_ms(const struct zk *zk);

/* zk_session.c: how long a handshake may take before zk->stalled reopens
 * the handle. */
int zk_handshake_limit_ms(const struct zk *zk);
/* zk_session.c: why a connection attempt got no session (zk->stall_cause
 * points at one of these, or is NULL). */
extern const char ZK_CAUSE_SILENT[];
extern const char ZK_CAUSE_REFUSED[];

#endif
