/*
 * backend.h - where the lock table gets its locks from.
 *
 * The lock table (locks.c) keeps each name's local FIFO of connections. When
 * the queue's head needs the lock, the table asks the backend; the backend
 * answers through the locks_backend_*() calls in locks.h, possibly before
 * acquire() returns (embedded mode does). Embedded mode grants at once;
 * distributed mode (zk.c) takes a ZooKeeper lock first. Tests use a fake.
 *
 * Contract: between acquire() and the answer (granted / busy / unavailable),
 * or cancel(), the backend owns an acquisition for the lock; between granted
 * and release() or lost, it owns a hold. After cancel(), release(), busy,
 * unavailable or lost, it must not mention the lock again: the table may
 * free it at once.
 */
#ifndef LOCKBROKER_BACKEND_H
#define LOCKBROKER_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

struct lock;

struct backend_ops {
    const char *name;  /* "embedded", "zookeeper" */
    /* Get the lock for this daemon. try: answer busy rather than wait. */
    void (*acquire)(void *impl, struct lock *l, bool try);
    /* The acquisition is no longer wanted (its waiters left). */
    void (*cancel)(void *impl, struct lock *l);
    /* The hold granted earlier is released. */
    void (*release)(void *impl, struct lock *l);
};

struct backend {
    const struct backend_ops *ops;
    void *impl;        /* owned by whoever built the backend */
};

/* Embedded mode: every acquire is granted at once with the next token. */
struct backend *backend_embedded_new(void);    /* caller frees with backend_embedded_free */
void backend_embedded_free(struct backend *b);

/* Tokens that only go up, across restarts too: max(last + 1, wall clock in ns). */
uint64_t token_next(uint64_t *last);

#endif
