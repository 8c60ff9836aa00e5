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
#include "zk_loop.h"
#include "zk_timing.h"
#include "zk_vouch.h"


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
int zk_session_reattach(struct zk *zk, int64_t id, const char *passwd, size_t passwd_len,
                        int negotiated_ms, int64_t confirmed_at_ms, int64_t lost_told_ms,
                        bool presumed_lost);

/*
 * Within the bottom layer only (zk_session.c, zk_loop.c, zk_vouch.c): the
 * layers above never call these.
 */





#endif
