/*
 * zk_window.h - CHECK's window and the lost deadline as plain arithmetic:
 * from the session timeout T, the confirmation instant confirmed_at and
 * now (all monotonic ms), and which answered probe may move confirmed_at.
 * zk_presence.c argues the rules; zk_vouch.c and zk_presence.c apply them
 * to the session.
 */
#ifndef LOCKBROKER_ZK_WINDOW_H
#define LOCKBROKER_ZK_WINDOW_H

#include <stdint.h>
#include <stddef.h>

#include "zk_int.h"

/* confirmed_at + T: the session cannot expire before then; no CHECK
 * window given with this confirmed_at ends later. */
static inline int64_t zk_window_end_at(int64_t confirmed_at, int timeout_ms)
{
    return confirmed_at + timeout_ms;
}

/* CHECK's window at now: how long the session surely lives, at least 0. */
static inline int64_t zk_window_left_ms(int64_t confirmed_at, int timeout_ms, int64_t now)
{
    int64_t left = zk_window_end_at(confirmed_at, timeout_ms) - now;

    return left > 0 ? left : 0;
}

/* confirmed_at + 2/3 of T: holds are presumed lost from then on, a third
 * of the timeout before the session can expire (zk_vouch.confirmed_at). */
static inline int64_t zk_window_lost_at(int64_t confirmed_at, int timeout_ms)
{
    return confirmed_at + (int64_t)timeout_ms * 2 / 3;
}

/* A probe round's write was committed: the probe whose send time becomes
 * confirmed_at (if later than confirmed_at) is the latest of probes[0..n) (oldest first)
 * answered at least w (W, the leader's ping wait) before the round's sync
 * was sent at sync_sent_ms. NULL when none was. */
static inline const struct zk_probe *zk_window_probe(const struct zk_probe *probes, unsigned n,
                                                     int64_t w, int64_t sync_sent_ms)
{
    for (unsigned i = n; i-- > 0;)
        if (probes[i].answered_ms + w <= sync_sent_ms)
            return &probes[i];
    return NULL;
}

#endif
