/*
 * zk_vouch.h - what the daemon can vouch for (zk_vouch.c): the session
 * confirmed or its holds presumed lost, what may be granted, the lost
 * timer. The layers above reach it through zk_session.h.
 */
#ifndef LOCKBROKER_ZK_VOUCH_H
#define LOCKBROKER_ZK_VOUCH_H

#include <stdbool.h>
#include <stdint.h>

#include "zk_int.h"

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

/* zk_vouch.c: makes zk->lost_timer (zk_session_init); 0 or -1.
 * zk_vouch_free frees it (zk_session_free). */
int zk_vouch_init(struct zk *zk);
void zk_vouch_free(struct zk *zk);
/* zk_vouch.c: confirmed_at + 2/3 of the session timeout, when holds are
 * presumed lost (monotonic ms); 0 without a session. */
int64_t zk_lost_deadline_ms(const struct zk *zk);

/* ms until the holds would be presumed lost (confirmed_at + 2/3 of the
 * timeout), -1: no confirmed_at. */
int64_t zk_session_lost_in_ms(const struct zk *zk);

#endif
