/*
 * watch.h - WATCH: the state of watched lock names, pushed as EVENT lines
 * to the connections that watch them (PROTOCOL.md, WATCH).
 *
 * One entry per name, however many connections watch it. Its state comes
 * from the lock table in embedded mode and from the backend's watch of the
 * name across daemons in distributed mode; it is worked out from the loop,
 * after whatever changed it, and a line is pushed only when it differs
 * from the last one. A subscriber whose output is backed up is not queued
 * more lines: it gets the latest one when it drains (watch_flush).
 */
#ifndef LOCKBROKER_WATCH_H
#define LOCKBROKER_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "quota.h"

struct event_base;
struct locks;
struct backend;
struct watches;
struct watch_sub;

/* Watches per daemon (all connections) and per connection (PROTOCOL.md). */
#define WATCHES_MAX 10000
#define WATCHES_PER_CONN_MAX 100

/* Takes one EVENT line (len bytes, ending in LF) for its subscriber, or
 * returns false when it cannot now: the line stays the latest, offered
 * again by watch_flush(). */
typedef bool (*watch_deliver_fn)(void *arg, const char *line, size_t len);

/* The registry. All borrowed; daemon_id names this daemon's holders.
 * NULL when out of memory. */
struct watches *watches_new(struct event_base *base, struct locks *locks,
                            struct backend *backend, const char *daemon_id);
/* Frees it; every subscription must be removed first. */
void watches_free(struct watches *ws);

/* Watches name for fn(arg, ...), counted against account (quota.h; NULL:
 * WATCHES_MAX only): its first line comes from the loop, later. NULL when
 * WATCHES_MAX are in use (*why QUOTA_TOTAL), the account has its share
 * (QUOTA_ACCOUNT), or out of memory (QUOTA_OK). */
struct watch_sub *watch_add(struct watches *ws, const char *name, watch_deliver_fn fn,
                            void *arg, const char *account, enum quota_verdict *why);
/* Subscriptions per account from now on (initially unlimited); existing
 * ones stay. */
void watches_set_max_per_account(struct watches *ws, unsigned max);
/* Ends the subscription; fn will not run again. Frees s. */
void watch_remove(struct watch_sub *s);
/* The name s watches; lives as long as s. */
const char *watch_sub_name(const struct watch_sub *s);
/* Handover: the latest line of s's name (len 0: none yet) and whether s took it. */
void watch_sub_state(const struct watch_sub *s, const char **line, size_t *len, bool *taken);
/* Handover: as watch_add, for a subscriber that had line (len 0: none) as its
 * name's latest line, and had taken it or not: only a line that differs, or
 * one it had not taken, is offered. */
struct watch_sub *watch_restore(struct watches *ws, const char *name, watch_deliver_fn fn,
                                void *arg, const char *account, const char *line, size_t len,
                                bool taken);
/* Offers s the latest line if it has not taken it yet. */
void watch_flush(struct watch_sub *s);

/* For the lock table (locks_set_observer): name's holds changed. */
void watches_lock_changed(void *ws, const char *name);

#endif
