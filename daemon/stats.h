/*
 * stats.h - the daemon's statistics as name/value pairs: what STATS prints
 * as STAT lines and what /metrics (metrics.c) exports, from one walk.
 */
#ifndef LOCKBROKER_STATS_H
#define LOCKBROKER_STATS_H

#include "backend.h"

struct server;
struct restart_part;

/*
 * Calls add(cookie, name, value) for every statistic, in STATS order: the
 * server's, the lock table's, the leases', then the backend's own. name is
 * lower case without a prefix; value is the text STATS shows (a decimal
 * number for every counter and gauge). Both strings live only during the call.
 */
void stats_each(const struct server *srv, backend_stat_fn add, void *cookie);

/* The restart's part (restart.h) for the server's counters; data: the
 * struct server. */
extern const struct restart_part stats_restart_part;

#endif
