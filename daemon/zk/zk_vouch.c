/*
 * zk_vouch.c - distributed mode, bottom layer: what the session vouches
 * for (zk.h draws the layers).
 *
 * From confirmed_at (which zk_presence.c's probes move) and the
 * connection, one state decides what the daemon may answer (PROTOCOL.md,
 * "Session states and replies"): confirmed, or presumed lost from
 * confirmed_at + 2/3 of the session timeout (the lost timer, or the clock
 * before a request) until probes move confirmed_at again. This file says
 * whether a grant may be made (zk_may_grant), tells the listeners `lost`
 * and `stale_reads`, and says why requests cannot be served.
 */
#include "config.h"
#include "zk_vouch.h"

#include <event2/event.h>
#include <sys/time.h>

#include "locks.h"
#include "log.h"
#include "zk_loop.h"
#include "zk_timing.h"
#include "zk_window.h"

/* The sync presume_lost sent came back: what was read after it is fresh. */
static void on_barrier(int rc, const char *value, const void *data)
{
    struct zk *zk = (struct zk *)data;

    zk->outstanding--;
    zk->barrier = false;
    if (zk->state == ZK_CONNECTED)
        TELL(zk, resume);
}

/*
 * Holds are presumed lost 2/3 of the session timeout after confirmed_at
 * (zk_presence.c), a third before the session can expire: LOST reaches
 * clients before anyone else can be granted their locks (PROTOCOL.md, Pushed
 * lines). 0 without a session.
 */
int64_t zk_lost_deadline_ms(const struct zk *zk)
{
    if (!zk->session_id || !zk->confirmed_at_ms || zk->state == ZK_EXPIRED)
        return 0;
    return zk_window_lost_at(zk->confirmed_at_ms, zk_timeout_ms(zk));
}

static void arm_lost(struct zk *zk, int64_t at_ms)
{
    int64_t left = at_ms - locks_mono_ms();
    struct timeval tv = { 0, 0 };

    if (left > 0) {
        tv.tv_sec = left / 1000;
        tv.tv_usec = (left % 1000) * 1000;
    }
    evtimer_add(zk->lost_timer, &tv);
}

void zk_session_confirmed(struct zk *zk)
{
    int64_t at = zk_lost_deadline_ms(zk);

    /* Serving again: /healthz answers 200 from now (tests wait for this line). */
    if (zk->presumed_lost && at && locks_mono_ms() < at) {
        zk->presumed_lost = false;
        log_info("zk: session 0x%llx confirmed through the ZooKeeper leader again",
                 (unsigned long long)zk->session_id);
    }

    if (at)
        arm_lost(zk, at);
    else
        evtimer_del(zk->lost_timer);
    /* Grants held back while unconfirmed may be made now. */
    if (zk->grants_held_back && zk_may_grant(zk)) {
        zk->grants_held_back = false;
        TELL(zk, resume);
    }
}

/*
 * One state decides what the daemon may answer (PROTOCOL.md, "Session states
 * and replies"): from the moment confirmed_at + 2/3 of the timeout passes
 * until probes on the current connection move confirmed_at again, holds are
 * presumed lost (presume_lost) and nothing is granted, so that no grant falls
 * between a presumed-lost pass and the confirmation that ends it: a grant
 * made in that state would be told LOST at the next pass. The clock is read
 * here too, for the moment between the deadline and the lost timer (or the
 * check before a request) that presumes the holds lost.
 */
bool zk_confirmed(const struct zk *zk)
{
    int64_t at = zk_lost_deadline_ms(zk);

    return zk->state == ZK_CONNECTED && !zk->presumed_lost && at && locks_mono_ms() < at;
}

bool zk_vouched(struct zk *zk)
{
    if (zk_confirmed(zk))
        return true;
    if (zk->state == ZK_CONNECTED)
        zk->grants_held_back = true;
    return false;
}

bool zk_may_grant(struct zk *zk)
{
    return zk_serving(zk) && zk_vouched(zk);
}

bool zk_waits(const struct zk *zk)
{
    return zk_checking(zk) || zk->attaching;
}

/*
 * Every hold is presumed lost (LOST goes out before any reply); replies to
 * reads already in flight are not believed (they may be stale, or come from a
 * server cut off from the leader), and nothing is resumed until a sync, sent
 * now, comes back: whatever is read after it is fresh. Again a probe period
 * later while confirmed_at stays, so that a hold granted meanwhile is told
 * too.
 */
static void presume_lost(struct zk *zk, int64_t now)
{
    zk->lost_told_ms = now;
    zk->presumed_lost = true;
    zk->attaching = false;
    TELL(zk, lost, "zk-disconnected");
    TELL(zk, stale_reads);
    if (zk->zh && zk->state == ZK_CONNECTED && !zk->barrier &&
        zoo_async(zk->zh, "/", on_barrier, zk) == ZOK) {
        zk->barrier = true;
        zk->outstanding++;
        zk_kick(zk);
    }
    arm_lost(zk, now + zk_probe_period_ms(zk));
}

/*
 * Normally the lost timer presumes holds lost, but when the event loop
 * itself did not run (SIGSTOP, a paused VM), requests and replies that were
 * waiting would be handled before the timer: check the clock first.
 */
void zk_session_check_stall(struct zk *zk)
{
    int64_t now = locks_mono_ms(), at = zk_lost_deadline_ms(zk);

    if (!at || now < at || zk->lost_told_ms >= at)
        return;
    if (zk->state == ZK_CONNECTED)
        log_warn("zk: session 0x%llx not confirmed through the ZooKeeper leader for %lld ms, "
                 "past 2/3 of the %d ms session timeout (was this process stopped, or is "
                 "its server cut off from the leader?); presuming the session lost",
                 (unsigned long long)zk->session_id, (long long)(now - zk->confirmed_at_ms),
                 zk_timeout_ms(zk));
    else
        log_warn("zk: no contact with ZooKeeper for 2/3 of the %d ms session timeout; "
                 "presuming the session lost", zk_timeout_ms(zk));
    presume_lost(zk, now);
}

/* Connected, but past confirmed_at + 2/3 of the timeout: holds are presumed
 * lost and nothing our server answers is known to come through a leader. */
static bool zk_unconfirmed(const struct zk *zk)
{
    int64_t at = zk_lost_deadline_ms(zk);

    return zk->state == ZK_CONNECTED && at && locks_mono_ms() >= at;
}

int64_t zk_session_unreachable_since(const struct zk *zk)
{
    /* A handover's successor attaching: nothing is known to be down yet
     * (requests wait; a wait that ends meanwhile is a TIMEOUT). */
    if (zk->attaching)
        return 0;
    if (zk->state != ZK_CONNECTED)
        return zk->down_since_ms;
    if (zk->nonfair_disagrees)
        return zk->nonfair_since_ms;
    if (zk->chroot_missing)
        return zk->chroot_missing_since_ms;
    return zk_unconfirmed(zk) ? zk_lost_deadline_ms(zk) : 0;
}

/* Why requests cannot be served now, in words (for /healthz and the log). */
const char *zk_session_why_down(const struct zk *zk)
{
    if (zk->nonfair_disagrees)
        return zk->nonfair_why;
    if (zk->state == ZK_CONNECTED)
        return zk->chroot_missing ? "the chroot of [zookeeper] hosts does not exist"
               : zk_unconfirmed(zk) ? "connected, but no request of the session is confirmed "
                                      "through the ZooKeeper leader (is that server cut off "
                                      "from the leader?)"
               : NULL;
    return zk->auth_failed ? "ZooKeeper refuses the [zookeeper] auth credentials"
           : zk->unresolved ? "none of the [zookeeper] host names resolves"
           : zk->stall_cause ? zk->stall_cause : "no ZooKeeper server accepts a session";
}

/*
 * confirmed_at + 2/3 of the timeout (zk_lost_deadline_ms) has come: every
 * hold is presumed lost, and again every probe period while confirmed_at does
 * not move, so that a hold granted meanwhile is told too.
 */
static void on_lost_timer(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    int64_t now = locks_mono_ms(), at = zk_lost_deadline_ms(zk);

    if (!at)
        return;
    if (now < at) {
        arm_lost(zk, at);
        return;
    }
    if (zk->lost_told_ms < at) {
        if (zk->state == ZK_CONNECTED)
            log_warn("zk: session 0x%llx not confirmed through the ZooKeeper leader for "
                     "%lld ms, 2/3 of the %d ms session timeout (is its server cut off from "
                     "the leader?); presuming the session lost",
                     (unsigned long long)zk->session_id, (long long)(now - zk->confirmed_at_ms),
                     zk_timeout_ms(zk));
        else
            log_warn("zk: no contact with ZooKeeper for 2/3 of the %d ms session timeout; "
                     "presuming the session lost", zk_timeout_ms(zk));
    }
    presume_lost(zk, now);
}

int64_t zk_session_lost_in_ms(const struct zk *zk)
{
    int64_t at = zk_lost_deadline_ms(zk);

    return at ? at - locks_mono_ms() : -1;
}

int zk_vouch_init(struct zk *zk)
{
    zk->lost_timer = evtimer_new(zk->base, on_lost_timer, zk);
    if (!zk->lost_timer)
        return -1;
    return 0;
}

void zk_vouch_free(struct zk *zk)
{
    if (zk->lost_timer)
        event_free(zk->lost_timer);
}
