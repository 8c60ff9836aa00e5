/*
 * zk_timing.h - the session's times, from its timeout and [zookeeper]
 * tick_ms (zk_timing.c): pure arithmetic, no request, no clock.
 */
#ifndef LOCKBROKER_ZK_TIMING_H
#define LOCKBROKER_ZK_TIMING_H

#include <stdbool.h>
#include <stdint.h>

struct zk;

/* The session timeout in force: negotiated, or else the one we asked for. */
int zk_timeout_ms(const struct zk *zk);
/* W, 3/4 of [zookeeper] tick_ms: a leader pings each follower at least this
 * often (CHECK's window, zk_presence.c). */
int64_t zk_ping_wait_ms(const struct zk *zk);
/* The same for [zookeeper] tick_ms tick_ms, for settings not in use
 * (--check-handover). */
int64_t zk_tick_ping_wait_ms(unsigned tick_ms);
/* How often zk_presence.c sends a probe round: a tenth of the timeout, at
 * least W/8 and 100 ms. */
int zk_probe_period_ms(const struct zk *zk);
/* How long a handshake may take before zk->stalled reopens
 * the handle. */
int zk_handshake_limit_ms(const struct zk *zk);
/* P for a session timeout of timeout_ms (zk_probe_period_ms for the one in
 * force). */
int zk_probe_period_for_ms(const struct zk *zk, int timeout_ms);
/* Whether CHECK's window fits a session timeout of timeout_ms: its probes
 * need W and up to two periods before they move confirmed_at. */
bool zk_window_fits(const struct zk *zk, int timeout_ms);
/* Whether a session timeout of timeout_ms leaves room for a handover with
 * W = w: 3w < timeout_ms (zk_handover.c argues it). */
bool zk_handover_fits(int64_t w, int timeout_ms);

#endif
