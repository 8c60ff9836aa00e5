/*
 * locks_int.h - the lock table's own structures, for locks.c and
 * locks_snap.c (its handover records) only; everything else goes through
 * locks.h.
 */
#ifndef LOCKBROKER_LOCKS_INT_H
#define LOCKBROKER_LOCKS_INT_H

#include <event2/util.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "locks.h"
#include "name_tree.h"
#include "quota.h"

#define NAME_COPY 256              /* a lock name (at most 200 bytes) and its NUL */

enum hold_state {
    HOLD_WAITING,    /* in lock->waiters */
    HOLD_ACQUIRING,  /* in lock->admitted; the backend works for it */
    HOLD_HELD,       /* in lock->admitted; granted */
};

struct hold {
    struct lock *lock;
    struct lock_owner *owner;
    TAILQ_ENTRY(hold) in_lock;     /* lock->admitted or lock->waiters, by state */
    TAILQ_ENTRY(hold) in_owner;    /* the owner's list */
    TAILQ_ENTRY(hold) by_age;      /* table->held_by_age when HELD, else
                                    * table->waiting_by_age */
    enum hold_state state;
    enum lock_mode mode;
    unsigned weight;               /* share of a LOCK_LIMIT lock's limit; 1 today */
    bool try;                      /* TRYLOCK or LOCK ... 0: never waits behind others */
    int64_t ttl_ms;                /* > 0: a lease's (the owner is a lease record) */
    int64_t delay_ms;              /* lock-delay kept after an abandonment; 0: none */
    int64_t delay_end_ms;          /* abandoned: monotonic ms when the delay ends */
    int64_t kept_ms;               /* kept (a lock-delay, or UNLOCK keep=): for how long */
    bool kept_by_release;          /* kept because UNLOCK said keep=, not abandoned */
    const char *let_go;            /* kept: how its owner let go of it, for its log line
                                    * ("released", "abandoned", "expired"); static; NULL
                                    * when restored by a handover (kept_by_release says) */
    bool keepable;                 /* counted in table->keep: it has a lock-delay, or
                                    * is kept; acct is its account then */
    struct quota_acct *acct;       /* keepable: the account it counts against, or NULL */
    char *gone_desc;               /* abandoned: a copy of its owner's desc; owned */
    char *gone_label;              /* abandoned: a copy of its owner's label, or NULL; owned */
    uint32_t count;                /* re-entrant depth, >= 1 when HELD */
    uint64_t token;                /* valid when HELD */
    int64_t since_ms;              /* wall-clock time of the grant, valid when HELD */
    int64_t asked_us;              /* monotonic time of the request (locks_mono_us) */
    int64_t granted_us;            /* monotonic time of the grant, valid when HELD */
    struct event *timer;           /* wait deadline, or the end of a lock-delay, or NULL */
    int64_t deadline_us;           /* monotonic end of the wait when timer is the deadline */
    void *backend_data;            /* the backend's; the table only moves it (reassign) */
};

struct lock {
    const char *name;              /* NUL-terminated; points at name_buf */
    struct name_node node;         /* in table->tree, by name */
    struct locks *table;
    TAILQ_HEAD(hold_list, hold) admitted; /* ACQUIRING and HELD holds, in admission order
                                    * (in distributed mode one that took its place
                                    * early may sit behind holds it does not fit) */
    TAILQ_HEAD(, hold) waiters;    /* WAITING holds, in arrival order */
    unsigned nadmitted, nheld, nwaiters;
    unsigned weight;               /* sum of the admitted holds' weights */
    bool semaphore;                /* a LOCK_LIMIT lock; else exclusive and shared mix */
    unsigned limit;                /* semaphore only: the holders' weight limit */
    char name_buf[];
};

struct locks {
    struct event_base *base;
    struct backend *backend;
    unsigned max_per_client;
    bool closing;                  /* locks_shutdown() was called: grant nothing more */
    struct name_node *tree;        /* every lock, by name (struct lock's node) */
    struct locks_stats stats;
    struct locks_histograms hist;
    /* Every hold, granted ones by granted_us and the others by asked_us,
     * oldest first: the gauges' oldest hold and longest wait are the heads
     * (locks_ages), read in O(1) at a scrape. Grants and requests come in
     * clock order, so a hold joins at the tail; a handover's restore sorts
     * them once (locks_sort_ages). */
    TAILQ_HEAD(hold_age_list, hold) held_by_age, waiting_by_age;
    struct lock_owner abandoned;   /* owns the holds kept for their lock-delay */
    struct quota keep;             /* holds that may be kept, per account (locks.h,
                                    * locks_set_keep_max) */
    unsigned keep_max, keep_max_per_account;
    void (*changed)(void *arg, const char *name); /* locks_set_observer(), or NULL */
    void *changed_arg;
    bool log_holds;                /* a log line per ended hold (locks_set_log_holds) */
    struct lock *restoring;        /* a handover: the lock whose holds are read (locks_snap.c) */
};

/* locks.c, for locks_snap.c: the name's lock, or NULL; a new lock for req's
 * mode and limit (NULL: out of memory, or the name is there already);
 * whether it has no hold left; what a wait's deadline and a kept hold's end
 * run (arg: the hold). */
struct lock *lock_find(const struct locks *t, const char *name);
struct lock *lock_create(struct locks *t, const char *name, const struct lock_req *req);
bool lock_empty(const struct lock *l);
/* The lock whose tree node n is. */
struct lock *lock_of_node(const struct name_node *n);
void hold_on_wait_timeout(evutil_socket_t fd, short what, void *arg);
void hold_on_delay_over(evutil_socket_t fd, short what, void *arg);
/* Puts h on its age list (locks_int.h, struct locks) at the tail: its
 * state says which. For the restore, which then calls locks_sort_ages(). */
void hold_age_append(struct locks *t, struct hold *h);
/* Sorts both age lists by time, oldest first (after a restore). 0, or -1
 * when out of memory. */
int locks_sort_ages(struct locks *t);
/* Counts h against the quota of holds that may be kept, for key (NULL:
 * the daemon-wide cap only). false when out of memory. */
bool hold_count_keepable(struct locks *t, struct hold *h, const char *key);

#endif
