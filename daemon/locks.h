/*
 * locks.h - the lock table: per name, the holder and a FIFO of waiters.
 *
 * The table owns every lock and every hold. Clients (connections, or test
 * fakes) own a struct locks_client that lists their holds; the table never
 * keeps a pointer to a client that called locks_client_release_all(). All
 * calls happen on the event loop thread.
 */
#ifndef LOCKBROKER_LOCKS_H
#define LOCKBROKER_LOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct event_base;
struct backend;
struct lock;
struct hold;
struct locks;

enum locks_result {
    LOCKS_GRANTED,      /* token is set */
    LOCKS_WAITING,      /* queued; the client's done() reports the outcome later */
    LOCKS_BUSY,         /* try: held or awaited by someone else */
    LOCKS_TIMEOUT,      /* the wait elapsed first */
    LOCKS_UNAVAILABLE,  /* try: the backend cannot answer now (ZooKeeper outage) */
    LOCKS_LIMIT,        /* the client already has max_locks_per_client holds */
    LOCKS_RELEASED,     /* unlock: done (or one re-entrant hold dropped) */
    LOCKS_NOT_HELD,     /* unlock: this client does not hold it */
    LOCKS_NOMEM,
};

struct locks_client;

struct locks_client_ops {
    /* A LOCKS_WAITING request finished: GRANTED, TIMEOUT, BUSY or UNAVAILABLE.
     * Called from the event loop; must not call back into the table. */
    void (*done)(struct locks_client *c, const char *name, enum locks_result r, uint64_t token);
    /* The backend lost a held lock; the hold is already gone. Same rule. */
    void (*lost)(struct locks_client *c, const char *name, uint64_t token, const char *reason);
};

struct locks_client {
    TAILQ_HEAD(, hold) holds;            /* held and awaited; managed by the table */
    unsigned nholds;                     /* entries in holds */
    const struct locks_client_ops *ops;
    const char *peer;                    /* "127.0.0.1:5678", borrowed; for logs and backends */
};

struct locks_stats {
    uint64_t held;        /* locks currently held */
    uint64_t waiting;     /* waits currently queued */
    uint64_t grants;      /* total grants, re-entrant ones excluded */
    uint64_t timeouts;
    uint64_t lost;
};

/* base and backend are borrowed and must outlive the table. NULL when out of memory. */
struct locks *locks_new(struct event_base *base, struct backend *backend,
                        unsigned max_per_client);
/* The daemon is stopping: locks released from now on are not handed to the
 * next waiter (whose connection is about to close anyway). */
void locks_shutdown(struct locks *t);

/* Frees every lock and hold without calling back any client. */
void locks_free(struct locks *t);

void locks_client_init(struct locks_client *c, const struct locks_client_ops *ops,
                       const char *peer);

/*
 * Takes `name` (NUL-terminated, already validated) for c. wait_ms: -1 waits
 * for ever, 0 does not wait (answer BUSY, never WAITING unless the backend
 * must be asked first), >0 waits that long. try: TRYLOCK. A lock c already
 * holds is granted again at once with the same token (re-entrant).
 */
enum locks_result locks_lock(struct locks *t, struct locks_client *c, const char *name,
                             int64_t wait_ms, bool try, uint64_t *token);

/* Drops one hold of name by c: LOCKS_RELEASED or LOCKS_NOT_HELD. */
enum locks_result locks_unlock(struct locks *t, struct locks_client *c, const char *name);

/* Releases every hold and cancels every wait of c, without calling c back. */
void locks_client_release_all(struct locks *t, struct locks_client *c);

void locks_get_stats(const struct locks *t, struct locks_stats *out);

struct locks_status {
    bool held;            /* a client of this daemon holds it */
    const char *holder;   /* its address, borrowed until the table changes; NULL if not held */
    uint64_t token;       /* valid when held */
    int64_t since_ms;     /* wall-clock ms of the grant, valid when held */
    unsigned waiters;     /* local requests queued behind the holder (or acquiring) */
};

/* What this daemon knows about name (NUL-terminated). */
void locks_status(const struct locks *t, const char *name, struct locks_status *out);

/* New limit for later requests; holds beyond it are kept. */
void locks_set_max_per_client(struct locks *t, unsigned max_per_client);

/* For backends. */
const char *lock_name(const struct lock *l);          /* NUL-terminated, lives as long as l */
const char *lock_peer(const struct lock *l);          /* address of the queue's head client */
void *lock_backend_data(const struct lock *l);        /* the backend's slot, NULL at first */
void lock_set_backend_data(struct lock *l, void *p);
void locks_backend_granted(struct lock *l, uint64_t token);
void locks_backend_busy(struct lock *l);
void locks_backend_unavailable(struct lock *l);
void locks_backend_lost(struct lock *l, const char *reason);

#endif
