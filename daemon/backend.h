/*
 * backend.h - where the lock table gets its locks from.
 *
 * The lock table (locks.c) keeps each name's local holders and FIFO of
 * waiters and decides locally who may go ahead. For every request it lets
 * through, it asks the backend for the lock on that request's behalf:
 * embedded mode (backend_embedded.c) grants at once; distributed mode
 * (zk_*.c) takes a ZooKeeper lock first. Tests use a fake.
 *
 * The interface is complete: the lock table, the connections and main.c
 * never know which backend runs. Everything a mode adds (STATUS across
 * daemons, its STATS lines, closing its session) goes through these ops.
 *
 * Contract for acquisitions: acquire() answers at once through its return
 * value (LOCKS_GRANTED with *token, or a refusal), or returns LOCKS_WAITING
 * and answers later, exactly once, through locks_backend_granted() or
 * locks_backend_refused() - never from inside acquire(). From acquire() to
 * that answer, or to cancel(), the backend owns an acquisition for the
 * hold; between a grant and release() or locks_backend_lost(), it owns a
 * hold. After cancel(), release(), a refusal or lost, it must not mention
 * the hold again: the table may free it at once.
 */
#ifndef LOCKBROKER_BACKEND_H
#define LOCKBROKER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "locks.h"

struct hold;
struct snap_w;
struct restart_part;
struct snap_r;

/* What a backend knows about one name beyond this daemon, for STATUS. */
struct backend_queue_info {
    bool ok;                 /* false: the backend could not be asked (outage) */
    bool global;             /* false: nothing beyond the local table (embedded mode) */
    unsigned queue;          /* holders and waiters, all daemons */
    unsigned holders;        /* holds granted, all daemons */
    enum lock_mode mode;     /* of the earliest request, when queue > 0 */
    unsigned limit;          /* LOCK_LIMIT only */
    char holder[256];        /* "<daemon>/<owner>" of the earliest holder, or "-" */
    char label[128];         /* its CLIENT label when it asked, or "" */
    uint64_t token;          /* its fencing token, as its daemon wrote it after the
                              * grant; 0: not known (not written yet) */
    int64_t since_ms;        /* when that holder's request was queued, or -1 */
    int64_t lease_ms;        /* that holder is a lease ending in this many ms (its
                              * deadline by this daemon's clock), or -1 */
};

struct backend_query;
/* Runs exactly once for a pending query, unless it was cancelled first. */
typedef void (*backend_query_cb)(void *arg, const struct backend_queue_info *info);

/*
 * One request in a name's queue, for HOLDERS: a hold granted or a request
 * queued. The strings are borrowed for the callback that carries it.
 */
struct backend_holder {
    const char *name;
    enum lock_mode mode;
    unsigned limit;          /* LOCK_LIMIT only */
    bool held;               /* false: queued, not granted yet */
    const char *holder;      /* "<daemon>/<client>" */
    const char *label;       /* its CLIENT label when it asked, or NULL */
    uint64_t token;          /* its fencing token when held (in distributed mode as its
                              * daemon wrote it after the grant); 0: not known */
    int64_t since_ms;        /* wall-clock ms: granted (held here) or queued */
    int64_t lease_ms;        /* a lease ending in this many ms, or -1 */
    bool kept;               /* held by nobody: kept after its owner let go of it (a
                              * lock-delay, UNLOCK keep=); this daemon's table only */
};

/* The most requests one HOLDERS reply lists (PROTOCOL.md). */
#define HOLDERS_LINES_MAX 10000

struct backend_list;
/* Whether a name may be listed (the user's permissions); names it refuses
 * are neither listed nor counted. */
typedef bool (*backend_name_filter)(void *arg, const char *name);
/* Runs exactly once for a pending listing, unless it was cancelled first:
 * ok false when the backend could not be asked; else rows[0..n) in name
 * order, each name's requests in queue order, and `more` requests past
 * HOLDERS_LINES_MAX that were left out. */
typedef void (*backend_list_cb)(void *arg, bool ok, const struct backend_holder *rows,
                                size_t n, size_t more);

struct backend_watch;
/* A watched name's state across daemons, at first and after each change
 * the backend sees (info->ok false: it cannot be asked now). */
typedef void (*backend_watch_cb)(void *arg, const struct backend_queue_info *info);

struct backend_lease_op;
/* ttl_ms of a lease_op that only asks whether the lease is held (CHECK). */
#define LEASE_CHECK (-1)
/* Answer to a pending lease_op: LOCKS_RELEASED (done; for a check: held,
 * left_ms from now until its deadline) or LOCKS_NOT_HELD. */
typedef void (*backend_lease_cb)(void *arg, enum locks_result r, int64_t left_ms);

/* Receives one statistic: name (lower case, no prefix) and its value. */
typedef void (*backend_stat_fn)(void *cookie, const char *name, const char *value);

struct histogram;
/* Receives one histogram: name (lower case, no prefix, with its unit:
 * "zk_request_duration_seconds", "zk_batch_size_ops"), one line of help,
 * and h, all borrowed for the call. seconds: h counts durations in
 * microseconds, exported in seconds; false: plain counts (a batch's
 * operations), exported as they are. */
typedef void (*backend_hist_fn)(void *cookie, const char *name, const char *help,
                                const struct histogram *h, bool seconds);

struct backend_ops {
    const char *name;  /* "embedded", "distributed": the STATS mode */
    /* Get the lock for h (see the contract above). */
    enum locks_result (*acquire)(void *impl, struct hold *h, uint64_t *token);
    /* Optional: true when the backend serves no request like req on name
     * (the table answers LOCKS_UNSUPPORTED at once, queueing nothing).
     * Must not change anything. */
    bool (*refuses)(void *impl, const char *name, const struct lock_req *req);
    /* Optional: the name's recipe when it is not the usual one ("nonfair"),
     * for STATUS and LOCKS (recipe=), or NULL. Static string. */
    const char *(*recipe)(void *impl, const char *name);
    /* h's acquisition, stored in its backend slot, now serves h: the hold
     * it was started for left and h, next in line in the same mode, took
     * its place. Also called for a granted h whose owner changed name
     * (a session's holds taken back by RESUME, locks_owner_move_held):
     * whatever names the owner elsewhere (a ZooKeeper node's data) is
     * rewritten. */
    void (*reassign)(void *impl, struct hold *h);
    /* The acquisition is no longer wanted (its request left). */
    void (*cancel)(void *impl, struct hold *h);
    /*
     * Local handoff: the exclusive hold `from` is released and `to`, the
     * next waiter on this daemon, exclusive too, may take it over without
     * the backend letting go. Returns LOCKS_BUSY when the backend would
     * rather let go (then nothing changed: the table releases `from` as
     * usual); LOCKS_WAITING when it moved `from`'s backend slot to `to` and
     * answers later (locks_backend_granted, or refused); or LOCKS_GRANTED
     * with *token, likewise moved. Never calls the table back from inside.
     */
    enum locks_result (*pass_on)(void *impl, struct hold *from, struct hold *to,
                                 uint64_t *token);
    /* The hold granted earlier is released. */
    void (*release)(void *impl, struct hold *h);
    /* Reports the backend's own STATS lines through add(cookie, ...). */
    void (*stats)(void *impl, backend_stat_fn add, void *cookie);
    /* Reports the backend's histograms for /metrics through add(cookie, ...). */
    void (*histograms)(void *impl, backend_hist_fn add, void *cookie);
    /*
     * What the backend knows about name. Returns NULL after filling *now
     * when it can answer at once; otherwise a pending query whose cb(arg,
     * info) runs later from the loop, and *now is untouched.
     */
    struct backend_query *(*query)(void *impl, const char *name, struct backend_queue_info *now,
                                   backend_query_cb cb, void *arg);
    /* The query's answer is no longer wanted; cb will not run. */
    void (*query_cancel)(void *impl, struct backend_query *q);
    /*
     * HOLDERS: every request the backend's own queues hold for the names
     * that match glob (fnmatch) and pass may(arg, name), across daemons.
     * NULL (embedded mode): the lock table is the whole picture. Returns a
     * pending listing whose cb runs later from the loop, or NULL when the
     * backend cannot be asked now (an outage, out of memory).
     */
    struct backend_list *(*list)(void *impl, const char *glob, backend_name_filter may,
                                 backend_list_cb cb, void *arg);
    /* The listing is no longer wanted: neither may nor cb will run again. */
    void (*list_cancel)(void *impl, struct backend_list *l);
    /*
     * WATCH: follows name across daemons; cb(arg, info) runs from the loop
     * with its state once known and after every change seen, until
     * watch_cancel. NULL (embedded mode): the lock table is the whole
     * picture. Returns NULL when out of memory.
     */
    struct backend_watch *(*watch)(void *impl, const char *name, backend_watch_cb cb, void *arg);
    /* cb will not run again. */
    void (*watch_cancel)(void *impl, struct backend_watch *w);
    /*
     * Leases (lease.h). ends_leases: the backend ends each lease at its ttl
     * itself and every renewal goes through lease_op (distributed mode,
     * where any daemon may renew or end a lease); false: lease.c's timers
     * end them. lease_op releases (ttl_ms 0), checks (ttl_ms LEASE_CHECK,
     * lease.h: changes nothing) or renews for ttl_ms the lease
     * of name with token that lease.c does not hold here. It answers
     * LOCKS_RELEASED or LOCKS_NOT_HELD at once, or LOCKS_WAITING with
     * *pending set and later, exactly once unless cancelled, through cb.
     */
    bool ends_leases;
    enum locks_result (*lease_op)(void *impl, const char *name, uint64_t token, int64_t ttl_ms,
                                  backend_lease_cb cb, void *arg,
                                  struct backend_lease_op **pending);
    /* The lease_op's answer is no longer wanted; cb will not run. */
    void (*lease_op_cancel)(void *impl, struct backend_lease_op *op);
    /*
     * Called before each request is answered. A backend that may have lost
     * holds while the event loop did not run (a stopped process, a paused
     * VM) tells their owners now (lost), so that the first thing a holder
     * hears after such a stall is LOST, never an answer that assumes the
     * hold. Cheap: a clock read.
     */
    void (*before_request)(void *impl);
    /* Since when (monotonic ms, as locks.h's locks_mono_ms()) the backend
     * cannot serve requests (a ZooKeeper outage; from the start for a
     * daemon that never reached it), or 0 when it can. A wait that ends
     * while it cannot is UNAVAILABLE, not a timeout: who holds the lock
     * cannot be known. */
    int64_t (*unreachable_since)(void *impl);
    /* Optional: while unreachable_since() is not 0, why, in words (static). */
    const char *(*why_unavailable)(void *impl);
    /* Optional: while the backend serves nothing until a setting is changed
     * and the daemon restarted (ZooKeeper answers, but the daemons disagree
     * on [zookeeper] nonfair), what to change, in words, for ERR UNAVAILABLE
     * and /healthz; NULL otherwise (an outage says the usual words).
     * Borrowed from the backend. */
    const char *(*config_error)(void *impl);
    /*
     * For CHECK: how long from now (ms) the backend promises that nobody
     * else is granted a hold that excludes h, granted, while h is not
     * released: INT64_MAX when the backend sets no bound (embedded mode:
     * only the daemon itself could end h), 0 when it promises nothing.
     * Distributed mode: until the earliest moment the daemon's ZooKeeper
     * session can expire (PROTOCOL.md, CHECK). Cheap: a clock read.
     */
    int64_t (*window_ms)(void *impl, struct hold *h);
    /*
     * true: the backend keeps a queue of its own that orders requests
     * across daemons, and grants nothing that does not fit beside the holds
     * it knows (distributed mode). The table then asks it at once for a
     * request that cannot join this daemon's readers (a writer behind
     * them, a reader behind a writer waiting in that queue), so that its
     * place there is taken when it arrives, not when the readers here are
     * gone. false: acquire() grants whatever it is asked for (embedded).
     */
    bool early_places;
    /*
     * Handover (handover.h). All optional. handover_possible: whether the
     * settings allow a handover at all; false with why (refused at once,
     * before anything stops). restart: the backend's restart part
     * (restart.h; data: impl), whose records are of kinds starting with
     * "backend" and are read back before any hold; NULL: this mode cannot
     * hand over. save_hold writes one field for a granted or acquiring
     * hold's slot into its hold record; restore_hold reads it and takes h
     * back (its backend slot).
     */
    bool (*handover_possible)(void *impl, char *why, size_t len);
    const struct restart_part *restart;
    void (*save_hold)(void *impl, const struct hold *h, struct snap_w *w);
    bool (*restore_hold)(void *impl, struct hold *h, struct snap_r *r);
    /* Frees the backend; ends its session (and so its holds) first. */
    void (*free)(void *impl);
};

struct backend {
    const struct backend_ops *ops;
    void *impl;
};

/* Embedded mode: every acquire is granted at once with the next token.
 * NULL when out of memory; free with b->ops->free(b->impl). */
struct backend *backend_embedded_new(void);

/* Tokens that only go up, across restarts too: max(last + 1, wall clock in ns). */
uint64_t token_next(uint64_t *last);

#endif
