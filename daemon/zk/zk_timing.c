/*
 * zk_timing.c - the session's times (see zk_timing.h).
 */
#include "config.h"
#include "zk_timing.h"

#include "zk_int.h"

int zk_timeout_ms(const struct zk *zk)
{
    return zk->negotiated_ms > 0 ? zk->negotiated_ms : (int)zk->settings->zk_session_timeout_ms;
}

/* W (zk_presence.c): the longest a leader goes between two pings, half a
 * tick, and a quarter tick for its ping loop to be late. */
int64_t zk_ping_wait_ms(const struct zk *zk)
{
    return zk_tick_ping_wait_ms(zk->settings->zk_tick_ms);
}

int64_t zk_tick_ping_wait_ms(unsigned tick_ms)
{
    return (int64_t)tick_ms * 3 / 4;
}

/* P with a session timeout of timeout_ms (zk_probe_period_ms). */
int zk_probe_period_for_ms(const struct zk *zk, int timeout_ms)
{
    int ms = timeout_ms / 10;

    /* ZK_PROBES answered probes (two a round) cover W. */
    if (ms < zk_ping_wait_ms(zk) / 8)
        ms = (int)(zk_ping_wait_ms(zk) / 8);
    return ms < 100 ? 100 : ms;
}

int zk_probe_period_ms(const struct zk *zk)
{
    return zk_probe_period_for_ms(zk, zk_timeout_ms(zk));
}

/* How long a handshake may take: short enough that several attempts fit
 * in the 2/3 of the session timeout after which holds are presumed lost. */
int zk_handshake_limit_ms(const struct zk *zk)
{
    int limit = zk_timeout_ms(zk) / 8;

    return limit < 1000 ? 1000 : limit;
}


/* The window's probes need W (3/4 of tick_ms) and up to two periods
 * before they move confirmed_at; past half the timeout, holds would be presumed lost
 * without a fault. */
bool zk_window_fits(const struct zk *zk, int timeout_ms)
{
    return 2 * (zk_ping_wait_ms(zk) + 2 * zk_probe_period_for_ms(zk, timeout_ms)) < timeout_ms;
}

bool zk_handover_fits(int64_t w, int timeout_ms)
{
    return 3 * w < timeout_ms;
}
