/*
 * zk_recipes.h - distributed mode, the recipes and what sits beside them (zk.h
 * draws the layers), on the node machinery (zk_node.h):
 *
 *   zk_fair.c        the fair queue: list, watch the node before ours, grant
 *   zk_view.c        its rules, from one listing: who may hold, whom a
 *                 waiter watches (zk_view.h; pure)
 *   zk_lease_lock.c  a granted request held as a lease: a persistent node
 *   zk_lease.c       leases made by any daemon: the janitor, release and
 *                 renewal by token, the start-up sweep
 *   zk_nonfair.c     non-fair names: one fixed node, no queue
 *   zk_handoff.c     local handoff and idle nodes
 *   zk_query.c       read-only queries for STATUS
 *
 * Within the layer, calls go one way: zk_fair.c -> zk_lease_lock.c -> zk_lease.c.
 */
#ifndef LOCKBROKER_ZK_RECIPES_H
#define LOCKBROKER_ZK_RECIPES_H

#include <sys/queue.h>

#include "backend.h"
#include "zk_node.h"

/* zk_handoff.c's state (zk->idle). */
struct zk_idle {
    void *by_parent;                   /* tsearch tree of idle struct zlock by parent path */
    TAILQ_HEAD(, zlock) idle;          /* idle zlocks, oldest first (see keep_idle_ms) */
    unsigned nidle;
    uint64_t idle_reuses;              /* LOCKs that took an idle node over */
    struct event *idle_timer;          /* ends the oldest idle zlock's keep */
};

/* zk_lease.c's state (zk->leases). */
struct zk_leases {
    void *lease_nodes;                 /* tsearch tree of tracked lease nodes by path */
    TAILQ_HEAD(, backend_lease_op) parked;  /* ops asked while a handover's successor
                                        * attaches: sent once it serves (zk_lease.c) */
    bool swept;                        /* the start-up sweep ran */
    uint64_t leases_removed;           /* expired lease nodes this daemon removed */
};

/* zk_fair.c */
/* Creates zl's node and lists the parent right behind the multi. */
void zl_fair_create(struct zlock *zl);
/* Lists the parent: may our node hold? Grants, waits or refuses. */
void zl_list(struct zlock *zl);
/* Handover: a zlock carried in ZL_DELAYING waits out what is left of its
 * predecessor's lock-delay (delay_until_ms). false: out of memory. */
bool zl_resume_delay(struct zlock *zl);

/* zk_nonfair.c: non-fair names (zl->nonfair), one fixed node each. */
/* zl_start() for a non-fair zlock: creates, watches, takes the token,
 * deletes or frees, from what is known. */
void zl_nonfair_start(struct zlock *zl);
/* The table let go of a waiting non-fair zlock (step ZL_WATCHING). */
void zl_nonfair_let_go(struct zlock *zl);

/* zk_lease_lock.c */
/* zl may hold and is for a lease: a new zlock, holding a persistent
 * node, takes its request over; zl's node holds until that node exists. */
void zl_convert(struct zlock *zl);
/* zl_start() for a lease zlock (zl->lease). */
void zl_lease_start(struct zlock *zl);
/* zl is about to be freed: the ephemeral node it was converted from, if
 * any, is let go. */
void zl_lease_freeing(struct zlock *zl);

/* zk_lease.c: leases in ZooKeeper (see the comment there). */
/* Makes zk->leases and registers the start-up sweep with the session.
 * Returns 0 or -1; zk_lease_free_all() frees them. */
int zk_lease_init(struct zk *zk);
/* Makes sure the lease node at path is removed once it has expired
 * (lease_skew_ms after its deadline), unless it is renewed or removed
 * first. path is copied. */
void zk_lease_track(struct zk *zk, const char *path);
/* The backend op (backend.h): release or renew a lease by its token. */
enum locks_result zk_lease_op(void *impl, const char *name, uint64_t token, int64_t ttl_ms,
                              backend_lease_cb cb, void *arg, struct backend_lease_op **pending);
void zk_lease_op_cancel(void *impl, struct backend_lease_op *op);
/* Frees the lease bookkeeping (the daemon is stopping). */
void zk_lease_free_all(struct zk *zk);

/* zk_handoff.c */
/* Makes zk->idle and its timer. Returns 0 or -1; zk_idle_free() frees them. */
int zk_idle_init(struct zk *zk);
void zk_idle_free(struct zk *zk);
/* The backend op (backend.h): passes a held lock on to a local waiter. */
enum locks_result zk_lock_pass_on(void *impl, struct hold *from, struct hold *to,
                                  uint64_t *token);
/* Passed on at the end of a turn: is another daemon waiting? */
void zl_check_turn(struct zlock *zl);
/* zl's holder released it and nobody here waits: keeps the node idle for
 * a while (true), or not (false). */
bool zl_idle_begin(struct zlock *zl);
/* Looks up the idle node of a name (its parent path), or NULL. */
struct zlock *zl_idle_find(struct zk *zk, const char *parent);
/* A LOCK of the name of an idle node: takes it over (true, *token set),
 * or false. */
bool zl_idle_adopt(struct zlock *zl, struct hold *h, uint64_t *token);
/* Stops keeping zl's node idle (if it was). */
void zl_idle_end(struct zlock *zl);
/* The idle node goes now, or once connected. */
void zl_idle_drop(struct zlock *zl);

/* zk_query.c: STATUS and HOLDERS asked while a handover's successor attaches
 * wait for it; registers with the session (serving: sent; lost: answered
 * unavailable). Returns 0 or -1; zk_query_free() frees what waits. */
struct zk_queries {
    TAILQ_HEAD(, backend_query) queries;
    TAILQ_HEAD(, backend_list) lists;
};
int zk_query_init(struct zk *zk);
void zk_query_free(struct zk *zk);
/* zk_query.c: the backend ops for STATUS (see backend.h). */
struct backend_query *zk_query(void *impl, const char *name, struct backend_queue_info *now,
                               backend_query_cb cb, void *arg);
void zk_query_cancel(void *impl, struct backend_query *q);
/* zk_query.c: the backend ops for HOLDERS (see backend.h). */
struct backend_list *zk_list(void *impl, const char *glob, backend_name_filter may,
                             backend_list_cb cb, void *arg);
void zk_list_cancel(void *impl, struct backend_list *l);
/* zk_query.c: the state of one name as STATUS has it, from its node list
 * (children, borrowed) and the data of the node it names (*first, pointing
 * into children, NULL when none: zk_queue_holder). child is that node's
 * name (borrowed; NULL for a non-fair name's node): a node no daemon wrote
 * is held by "foreign/<its data, or else child>". */
void zk_queue_info(const struct String_vector *children, struct backend_queue_info *info,
                   const char **first);
void zk_queue_holder(const char *child, const char *value, int len, const struct Stat *stat,
                     struct backend_queue_info *info);

/* zk_watch.c: WATCH (see backend.h): a name's nodes watched for changes, one
 * entry per name; registers with the session (serving: read again;
 * closed: its watches are gone). */
int zk_watch_init(struct zk *zk);
void zk_watch_free(struct zk *zk);
struct backend_watch *zk_watch(void *impl, const char *name, backend_watch_cb cb, void *arg);
void zk_watch_cancel(void *impl, struct backend_watch *w);

/* zk_acquire.c: the backend ops for acquisitions (see backend.h). */
/* Registers the node machinery's hooks and the session's listener.
 * Returns 0 or -1. */
int zk_locks_init(struct zk *zk);
enum locks_result zk_lock_acquire(void *impl, struct hold *h, uint64_t *token);
/* Whether name is non-fair and req something a non-fair name does not
 * serve (shared, limit=, ttl=, an explicit delay=; lock_delay_ms applies
 * only on this daemon, see PROTOCOL.md "Non-fair names"). */
bool zk_lock_refuses(void *impl, const char *name, const struct lock_req *req);
/* "nonfair" for a non-fair name, an [interop] name's profile ("curator",
 * "kazoo", "curator-rw"), else NULL (the backend op recipe). */
const char *zk_lock_recipe(void *impl, const char *name);
void zk_lock_reassign(void *impl, struct hold *h);
void zk_lock_let_go(void *impl, struct hold *h);
/* Frees every request without calling the table, and zk->nodes (the
 * daemon is stopping; the handle is closed). */
void zk_locks_free_all(struct zk *zk);

/* zk_handover.c: the backend's handover operations (backend.h) and its
 * restart part (restart.h). */
struct restart_part;
bool zk_handover_possible(void *impl, char *why, size_t len);
extern const struct restart_part zk_restart_part;
void zk_handover_save_hold(void *impl, const struct hold *h, struct snap_w *w);
bool zk_handover_restore_hold(void *impl, struct hold *h, struct snap_r *r);

#endif
