/*
 * locks.h - the lock table: per name, a set of holders and a FIFO of waiters.
 *
 * A request has a mode (exclusive, shared, or one of at most `limit`
 * holders of a counting semaphore) and a weight. One function decides who
 * can be granted: it walks the waiters from the head while the next one fits
 * beside the holders, and stops at the first that does not (FIFO, so a
 * shared request behind a waiting exclusive one waits too).
 *
 * Requests belong to owners: a struct lock_owner is anything that can be
 * told "granted / timed out / lost" (a connection today; a lease record
 * later). The table owns every lock and every hold; it never keeps a pointer
 * to an owner after locks_owner_release_all(). All calls happen on the event
 * loop thread.
 */
#ifndef LOCKBROKER_LOCKS_H
#define LOCKBROKER_LOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "histogram.h"

struct event_base;
struct backend;
struct lock;
struct hold;
struct locks;

enum lock_mode {
    LOCK_EXCLUSIVE,    /* one holder */
    LOCK_SHARED,       /* any number of shared holders, no exclusive one */
    LOCK_LIMIT,        /* a counting semaphore: holders' weights sum to at most limit */
    LOCK_MODE_COUNT
};

#define LOCK_LIMIT_MAX 65535

/* What a request asks for. */
struct lock_req {
    enum lock_mode mode;
    unsigned limit;       /* LOCK_LIMIT: 1..LOCK_LIMIT_MAX; otherwise 0 */
    int64_t wait_ms;      /* -1 waits for ever, 0 never waits, >0 waits that long */
    bool try;             /* TRYLOCK: busy rather than wait (also implied by wait_ms 0) */
    int64_t ttl_ms;       /* > 0: a lease (see lease.h), ending ttl_ms after its grant */
    int64_t delay_ms;     /* lock-delay: a hold that ends without a release (its owner
                           * abandoned it) keeps the name this long; 0: none */
    bool delay_default;   /* delay_ms is the daemon's lock_delay_ms, not asked for */
};

enum locks_result {
    LOCKS_GRANTED,      /* token is set */
    LOCKS_WAITING,      /* queued; the owner's done() reports the outcome later */
    LOCKS_BUSY,         /* try: held or awaited by someone else */
    LOCKS_TIMEOUT,      /* the wait elapsed first */
    LOCKS_UNAVAILABLE,  /* the backend cannot answer now (ZooKeeper outage) */
    LOCKS_CONFLICT,     /* the request's mode or limit disagrees with the name's holders */
    LOCKS_MODE_HELD,    /* the owner holds the name in another mode (no upgrades) */
    LOCKS_LIMIT,        /* the owner already has max_locks_per_client holds */
    LOCKS_RELEASED,     /* unlock: done (or one re-entrant hold dropped) */
    LOCKS_NOT_HELD,     /* unlock: this owner does not hold it */
    LOCKS_NOMEM,
    LOCKS_UNSUPPORTED,  /* the backend serves no such request on this name (non-fair) */
    LOCKS_KEEP_ACCOUNT, /* the owner's account has its share of holds that may be kept */
    LOCKS_KEEP_TOTAL,   /* the table has max_kept_holds holds that may be kept */
    LOCKS_LEASE_ACCOUNT,/* leases: the requester's account has its share of leases */
};

struct lock_owner;

struct lock_owner_ops {
    /* A LOCKS_WAITING request finished: GRANTED, TIMEOUT, BUSY, UNAVAILABLE,
     * CONFLICT or NOMEM. Called from the event loop; must not call back into
     * the table. */
    void (*done)(struct lock_owner *o, const char *name, enum locks_result r, uint64_t token);
    /* The backend lost a held lock; the hold is already gone. Same rule. */
    void (*lost)(struct lock_owner *o, const char *name, uint64_t token, const char *reason);
    /* Optional (leases): ms until o's holds end by themselves, or -1 if
     * unknown here. For STATUS and LOCKS; must not change anything. */
    int64_t (*ends_in_ms)(const struct lock_owner *o);
    /* Handover (restart.h): the owner's key in its holds' records, a
     * letter and a number (restart_keep). Owners that hold nothing across
     * a handover may leave it NULL. */
    void (*restart_key)(const struct lock_owner *o, char *letter, uint64_t *n);
    /* Optional: what the log line of a hold that ended without a release
     * (locks_owner_abandon_all) calls that end, static ("expired" for a
     * lease); NULL: "abandoned". */
    const char *abandoned_as;
    /* Optional (sessions, session.h): ms left of the grace of an owner that
     * keeps the holds of a connection gone, or -1 while it is attached.
     * For STATUS and LOCKS (detached=); must not change anything. */
    int64_t (*detached_ms)(const struct lock_owner *o);
};

struct lock_owner {
    TAILQ_HEAD(, hold) holds;            /* held and awaited; managed by the table */
    unsigned nholds;                     /* entries in holds */
    const struct lock_owner_ops *ops;
    const char *desc;                    /* "127.0.0.1:5678": names the owner in logs,
                                          * STATUS and ZooKeeper; borrowed */
    const char *label;                   /* CLIENT <label> for requests made from now
                                          * on, or NULL; borrowed */
    const char *account;                 /* who pays for its holds that may be kept
                                          * (quota.h): "user alice", "address ::1";
                                          * NULL: the daemon-wide cap only; borrowed */
};

struct locks_stats {
    uint64_t held;        /* holds currently granted */
    uint64_t waiting;     /* requests currently queued or being acquired */
    uint64_t grants;      /* total grants, re-entrant ones excluded */
    uint64_t grants_by_mode[LOCK_MODE_COUNT];
    uint64_t timeouts;
    uint64_t lost;
    uint64_t handoffs;    /* holds passed to the next local waiter (distributed mode) */
    uint64_t delays;      /* abandoned holds kept for their lock-delay, since start */
    uint64_t delayed;     /* such holds now, and holds kept after UNLOCK keep= */
    uint64_t keeps;       /* holds released with UNLOCK keep=, since start */
    uint64_t broken;      /* holds ended by BREAK, since start (in lost too) */
    uint64_t keepable;    /* holds that may be kept now: with a lock-delay, held or
                           * awaited, and kept ones (counted against max_kept_holds) */
    uint64_t keep_refused;/* LOCK, TRYLOCK or UNLOCK keep= refused for that quota */
};

/* Durations on the lock path, for /metrics. Re-entrant grants are not
 * counted: they neither waited nor start a hold of their own. */
struct locks_histograms {
    struct histogram wait;   /* request to grant (0 for a grant at once), every grant */
    struct histogram hold;   /* grant to the end of the hold: released, lost or passed on */
};

/* base and backend are borrowed and must outlive the table. NULL when out of memory. */
struct locks *locks_new(struct event_base *base, struct backend *backend,
                        unsigned max_per_client);
/* The daemon is stopping: locks released from now on are not handed to the
 * next waiter (whose connection is about to close anyway). */
void locks_shutdown(struct locks *t);

/* Frees every lock and hold without calling back any owner. */
void locks_free(struct locks *t);

void lock_owner_init(struct lock_owner *o, const struct lock_owner_ops *ops, const char *desc);

/* Microseconds, milliseconds on the monotonic clock. */
int64_t locks_mono_us(void);
int64_t locks_mono_ms(void);

/* "exclusive", "shared", "limit"; static. */
const char *lock_mode_name(enum lock_mode m);

/*
 * Takes `name` (NUL-terminated, already validated) for o as *req says.
 * A lock o already holds in the same mode (and limit) is granted again at
 * once with the same token (re-entrant); in another mode it is
 * LOCKS_MODE_HELD. A request whose mode or limit disagrees with the name's
 * current holders and waiters is LOCKS_CONFLICT. Only LOCKS_WAITING is
 * answered later, through o's done().
 */
enum locks_result locks_lock(struct locks *t, struct lock_owner *o, const char *name,
                             const struct lock_req *req, uint64_t *token);

/* The token of o's granted hold of name: true and *token, or false. */
bool locks_owner_token(const struct locks *t, const struct lock_owner *o, const char *name,
                       uint64_t *token);

/* Whether o's request for name waits: queued in this table, or admitted
 * and being acquired from the backend (distributed mode); not granted. */
bool locks_owner_waiting(const struct locks *t, const struct lock_owner *o, const char *name);

/*
 * For CHECK: o's granted hold of name. true with *token, *delay_ms (its
 * lock-delay) and *backend_ms: how long from now the backend promises that
 * no other holder excluding this one can be granted while the hold lasts
 * (backend.h, window_ms); false when o holds no such lock.
 */
bool locks_owner_check(const struct locks *t, const struct lock_owner *o, const char *name,
                       uint64_t *token, int64_t *delay_ms, int64_t *backend_ms);

/* Cancels o's request for name that is still waiting (or being acquired),
 * without calling o back. false when o has none. */
bool locks_cancel_wait(struct locks *t, struct lock_owner *o, const char *name);

/* Drops one hold of name by o: LOCKS_RELEASED or LOCKS_NOT_HELD. */
enum locks_result locks_unlock(struct locks *t, struct lock_owner *o, const char *name);

/*
 * As locks_unlock(), but when that ends o's hold, the table keeps it for
 * keep_ms more (PROTOCOL.md, "Releasing later: keep="): held by nobody, with
 * its token, shown as a lock-delay, then released. keep_ms 0: at once.
 * LOCKS_KEEP_ACCOUNT or LOCKS_KEEP_TOTAL: keeping it would pass a quota
 * (locks_set_keep_max); nothing changed, o still holds it.
 */
enum locks_result locks_unlock_keep(struct locks *t, struct lock_owner *o, const char *name,
                                    int64_t keep_ms);

/*
 * Sessions (session.h): moves every granted hold of from to to, as they
 * are - token, mode, re-entry count, lock-delay, quota accounting and the
 * backend's slot (in distributed mode its ZooKeeper node) - so that
 * nothing is released and nobody else can be granted them meanwhile; the
 * name's watchers hear nothing (the hold did not end). When to's desc or
 * label differs from from's, the backend hears of each hold (reassign). from's waits are
 * cancelled without calling from back. to must hold and await nothing
 * (a detached session's owner, or a connection that has nothing).
 * Returns how many holds moved.
 */
unsigned locks_owner_move_held(struct locks *t, struct lock_owner *from, struct lock_owner *to);

/* Releases every hold and cancels every wait of o, without calling o back. */
void locks_owner_release_all(struct locks *t, struct lock_owner *o);

/*
 * Like locks_owner_release_all(), for an owner that ends without releasing
 * (a connection closed or dropped, a lease that expired): a hold with a
 * lock-delay stays with the table, held by nobody, for delay_ms before it
 * is released (PROTOCOL.md, Lock-delay). Waits are cancelled as usual.
 */
void locks_owner_abandon_all(struct locks *t, struct lock_owner *o);

void locks_get_stats(const struct locks *t, struct locks_stats *out);
/* The table's histograms; they live as long as t. */
const struct locks_histograms *locks_get_histograms(const struct locks *t);

/*
 * The gauges of /metrics: how long the oldest hold granted in this table
 * (kept ones included, as locks_held counts them) has been held, and how
 * long the longest-waiting request (queued, or being acquired from the
 * backend) has waited, in microseconds at now_us (locks_mono_us); 0 when
 * there is none. O(1): the heads of the table's age lists.
 */
void locks_ages(const struct locks *t, int64_t now_us, int64_t *oldest_hold_us,
                int64_t *longest_wait_us);

struct locks_status {
    bool held;            /* an owner of this daemon holds it */
    const char *holder;   /* the earliest holder's desc, borrowed until the table changes */
    const char *label;    /* its label, or NULL; borrowed likewise */
    uint64_t token;       /* its token, valid when held */
    int64_t since_ms;     /* wall-clock ms of its grant, valid when held */
    enum lock_mode mode;  /* valid when held or awaited */
    unsigned limit;       /* LOCK_LIMIT only */
    unsigned holders;     /* holds granted here */
    unsigned waiters;     /* requests queued here or being acquired */
    int64_t delay_ms;     /* > 0: an abandoned hold keeps the name this much longer */
    int64_t lease_ms;     /* >= 0: the earliest holder is a lease ending in this many ms;
                           * -1: it is not, or only the backend knows (distributed mode) */
    int64_t detached_ms;  /* >= 0: the earliest holder is detached (a session whose
                           * connection ended), its grace ending in this many ms; else -1 */
    int64_t waited_ms;    /* waiters > 0: ms since the earliest of them asked; else -1 */
};

/* What this daemon knows about name (NUL-terminated). */
void locks_status(const struct locks *t, const char *name, struct locks_status *out);

/*
 * A walk that may pause, for a listing written as its client reads it:
 * the first name after `after` (NULL: the first of all), in strcmp order,
 * that matches glob (fnmatch; NULL: any), or NULL when there is none. A glob's
 * literal prefix (`deploy-*`: "deploy-") is found in the tree, not by a
 * walk of every name. The name is borrowed: copy it before the table
 * changes. Between two calls the table may change; the walk goes on after
 * the copied name wherever the tree puts it.
 */
const char *locks_next(const struct locks *t, const char *glob, const char *after);

/*
 * HOLDERS in embedded mode, one name at a time (locks_next): calls cb(arg,
 * row) for every hold and queued request of the lock `name` (none: no
 * call), its holds before its waiters, until cb returns false.
 * row->holder is the owner's desc without a daemon id; the row is borrowed
 * for the call. The table must not change meanwhile.
 */
struct backend_holder;
void locks_each_hold_of(const struct locks *t, const char *name,
                        bool (*cb)(void *arg, const struct backend_holder *row), void *arg);

/* changed(arg, name) runs whenever a name's holds change: granted,
 * released, ended, abandoned (for WATCH). It must not change the table. */
void locks_set_observer(struct locks *t, void (*changed)(void *arg, const char *name),
                        void *arg);

/*
 * BREAK: ends every hold of name granted on this table (only the one with
 * token, when token is not 0) as if its owner had released it (no
 * lock-delay; the next in line goes on), then tells each owner it is lost
 * with reason "broken". by names who broke them, for the log. Returns how
 * many ended.
 */
unsigned locks_break(struct locks *t, const char *name, uint64_t token, const char *by);

/*
 * Whether every granted hold that ends writes one info line (README.md,
 * "Running the daemon"; on until set): "lock <name>: hold ended: end=<how>
 * holder=<desc> user=<user> label=<label> token=<n> mode=<mode>
 * waited=<s> held=<s>", then " after=<how its owner let go> kept=<s>" for a
 * hold kept after its owner let go, " reason=<word>" for one the backend
 * ended. <how>: released, abandoned (or the owner's abandoned_as), kept,
 * broken, lost, ended. Holds that end because the daemon stops are not
 * logged.
 */
void locks_set_log_holds(struct locks *t, bool on);

/* New limit for later requests; holds beyond it are kept. */
void locks_set_max_per_client(struct locks *t, unsigned max_per_client);

/*
 * Holds that may be kept after their owner let go of them (PROTOCOL.md,
 * "Quotas"): a hold with a lock-delay counts from its request until it
 * ends (its lock-delay included), one kept by UNLOCK keep= from then on.
 * At most max_total in the table and max_per_account per owner's account;
 * a request beyond is refused (LOCKS_KEEP_ACCOUNT or LOCKS_KEEP_TOTAL),
 * never a hold ended. New caps apply to later requests (UINT_MAX both
 * until set).
 */
void locks_set_keep_max(struct locks *t, unsigned max_total, unsigned max_per_account);

/*
 * Whether o could UNLOCK each of names[0..n) with keep_ms at once (a set):
 * LOCKS_RELEASED, or LOCKS_KEEP_ACCOUNT / LOCKS_KEEP_TOTAL (counted then
 * in keep_refused). Names o does not hold are skipped.
 */
enum locks_result locks_keep_room(struct locks *t, const struct lock_owner *o,
                                  const char *const *names, unsigned n, int64_t keep_ms);

/*
 * For backends. A backend acquires and releases on behalf of one hold at a
 * time (see backend.h); these read what it needs and keep its slot.
 */
const char *hold_name(const struct hold *h);          /* the lock's name; lives as long as h */
const char *hold_owner_desc(const struct hold *h);    /* the owner's desc; borrowed */
int64_t hold_delay_ms(const struct hold *h);          /* its lock-delay, 0: none */
const char *hold_label(const struct hold *h);         /* its owner's label then (of the owner
                                                       * that abandoned it), or NULL */
enum lock_mode hold_mode(const struct hold *h);
unsigned hold_limit(const struct hold *h);            /* LOCK_LIMIT only, else 0 */
bool hold_try(const struct hold *h);                  /* answer busy rather than wait */
bool hold_kept(const struct hold *h);                 /* kept after its owner let go of it (a
                                                       * lock-delay, UNLOCK keep=): nobody's */
int64_t hold_ttl_ms(const struct hold *h);            /* > 0: a lease's time to live */
void *hold_backend_data(const struct hold *h);        /* the backend's slot, NULL at first */
void hold_set_backend_data(struct hold *h, void *p);

/* Answers to an acquisition the backend left pending, and news of a hold. */
void locks_backend_granted(struct hold *h, uint64_t token);
/* r: LOCKS_BUSY, LOCKS_UNAVAILABLE, LOCKS_CONFLICT or LOCKS_NOMEM. */
void locks_backend_refused(struct hold *h, enum locks_result r);
void locks_backend_lost(struct hold *h, const char *reason);
/* A hold that ended as agreed elsewhere (a lease released or expired through
 * another daemon): like lost, but not counted or warned about. */
void locks_backend_ended(struct hold *h, const char *reason);

/*
 * Handover: locks_restart_part (restart.h; data: the table; locks_snap.c)
 * writes the table as records: a "locks" record, then per name a "lock"
 * record and its "hold" records, each naming its owner by the key the
 * owner gives (lock_owner_ops.restart_key; none: a hold kept after its
 * owner left). The successor reads them back in that order, the owners
 * restored before (restart_find). Nobody is called back and nothing is
 * granted: the holds come back as they were. A failure leaves the table
 * fit for locks_free() only.
 */
struct restart_part;
extern const struct restart_part locks_restart_part;

#endif
