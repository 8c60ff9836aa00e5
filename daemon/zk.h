/*
 * zk.h - distributed mode: a backend (see backend.h) that takes each lock in
 * ZooKeeper, on one session per daemon, driven from the libevent loop.
 */
#ifndef LOCKBROKER_ZK_H
#define LOCKBROKER_ZK_H

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
    uint64_t nodes;           /* acquisitions and releases this daemon is working on */
};

/*
 * Starts connecting (asynchronously) to s->zk_hosts. The daemon starts even
 * when ZooKeeper is unreachable. base and s are borrowed and must outlive the
 * backend. Returns NULL, after logging why, if the handle cannot be created.
 */
struct backend *zk_backend_new(struct event_base *base, const struct settings *s);

/* Closes the session (its ephemeral nodes go with it) and frees everything. */
void zk_backend_free(struct backend *b);

void zk_backend_stats(struct backend *b, struct zk_stats *out);

#endif
