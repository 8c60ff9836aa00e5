/*
 * zk.h - distributed mode: a backend (see backend.h) that takes each lock in
 * ZooKeeper, on one session per daemon, driven from the libevent loop.
 */
#ifndef LOCKBROKER_ZK_H
#define LOCKBROKER_ZK_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct settings;
struct backend;

struct zk_stats {
    const char *state;        /* "connected", "connecting", "expired" */
    int64_t session_id;       /* 0 before the first session */
    int negotiated_timeout_ms;
    uint64_t sessions;        /* sessions established (1 + re-creations after expiry) */
    uint64_t reconnects;      /* connections re-established within a session */
    uint64_t outstanding;     /* requests sent and not yet answered */
    uint64_t requests;        /* acquisitions and releases this daemon is working on */
};

/*
 * Starts connecting (asynchronously) to s->zk_hosts. The daemon starts even
 * when ZooKeeper is unreachable. base and s are borrowed and must outlive the
 * backend. Returns NULL, after logging why, if the handle cannot be created.
 */
struct backend *zk_backend_new(struct event_base *base, const struct settings *s,
                               const char *daemon_id);

/* Closes the session (its ephemeral nodes go with it) and frees everything. */
void zk_backend_free(struct backend *b);

void zk_backend_stats(struct backend *b, struct zk_stats *out);

/* What ZooKeeper says about one lock name, across all daemons. */
struct zk_queue_info {
    bool ok;                 /* false: ZooKeeper could not be asked (outage) */
    unsigned queue;          /* nodes: the holder and every waiter, all daemons */
    char holder[256];        /* "<daemon>/<client>" from the first node's data, or "-" */
    int64_t since_ms;        /* the first node's creation time, or -1 */
};

struct zk_query;
typedef void (*zk_query_cb)(void *arg, const struct zk_queue_info *info);

/*
 * Asks ZooKeeper for name's queue; cb(arg, info) runs later from the loop,
 * exactly once, unless zk_query_cancel() was called first. When ZooKeeper
 * is not connected, cb runs before this returns (and NULL is returned).
 */
struct zk_query *zk_query_queue(struct backend *b, const char *name, zk_query_cb cb, void *arg);
void zk_query_cancel(struct zk_query *q);

#endif
