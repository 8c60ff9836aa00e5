/*
 * lease.h - holds that belong to no connection: LOCK ... ttl=<ms>.
 *
 * A lease is a lock owner of its own (see locks.h) with exactly one hold.
 * The connection that asks for it waits for the answer like any LOCK;
 * once granted, the hold outlives that connection and ends on UNLOCK with
 * its token (from any connection), or when its ttl elapses without a
 * RENEW. An ending lease is not announced: its taker may be long gone.
 *
 * In embedded mode this module's timers end leases. In distributed mode
 * the backend does (backend.h, ends_leases), because a lease must outlive
 * the daemon that granted it and any daemon may renew or end it; this
 * module then keeps only the leases held through this daemon's table.
 * All calls happen on the event loop thread.
 */
#ifndef LOCKBROKER_LEASE_H
#define LOCKBROKER_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "locks.h"

struct event_base;
struct backend;
struct backend_lease_op;
struct lease;
struct leases;

struct leases_stats {
    uint64_t current;     /* leases held or being acquired through this daemon */
    uint64_t granted;     /* since start */
    uint64_t expired;     /* ended by their ttl here (embedded mode) */
    uint64_t released;    /* ended by UNLOCK <name> <token> here */
};

/* base, t and backend are borrowed and must outlive the set. NULL when out of memory. */
struct leases *leases_new(struct event_base *base, struct locks *t, struct backend *backend,
                          unsigned max);

/* Frees every lease record. Call after locks_free(): the table no longer
 * mentions them, and no owner is called back. */
void leases_free(struct leases *ls);

/* New caps for later requests, daemon-wide and per requester's account
 * (quota.h; UINT_MAX until set); leases beyond them are kept. */
void leases_set_max(struct leases *ls, unsigned max, unsigned max_per_account);

void leases_get_stats(const struct leases *ls, struct leases_stats *out);

/*
 * Asks for name (NUL-terminated, valid) as a lease; req->ttl_ms > 0.
 * LOCKS_LIMIT when max leases exist, LOCKS_LEASE_ACCOUNT when the
 * requester's account has max_per_account of them. LOCKS_WAITING: *pending is the lease
 * being acquired, and the outcome reaches requester's done() later (the
 * token of a granted lease, or a refusal); until then, if the requester
 * goes away, it must call leases_cancel(). Otherwise answers at once, like
 * locks_lock().
 */
enum locks_result leases_lock(struct leases *ls, struct lock_owner *requester, const char *name,
                              const struct lock_req *req, uint64_t *token,
                              struct lease **pending);

/* The requester of a pending lease left: its wait is cancelled, the lease freed. */
void leases_cancel(struct leases *ls, struct lease *pending);

/*
 * Ends (ttl_ms 0), checks (LEASE_CHECK) or renews for ttl_ms the lease of
 * name with token: LOCKS_RELEASED (done; checked: held, *left_ms from now
 * to its end) or LOCKS_NOT_HELD (wrong or expired token) at once, or
 * LOCKS_WAITING with *pending set while the backend asks around
 * (distributed mode); the answer then reaches cb(arg, r, left_ms) exactly
 * once, unless leases_op_cancel() is called first. left_ms is meaningful
 * for a check answered LOCKS_RELEASED only: it includes the lease's
 * lock-delay where its expiry keeps the name for it.
 */
enum locks_result leases_op(struct leases *ls, const char *name, uint64_t token, int64_t ttl_ms,
                            void (*cb)(void *arg, enum locks_result r, int64_t left_ms),
                            void *arg, struct backend_lease_op **pending, int64_t *left_ms);
/*
 * A release that leases_op() answered later, through cb, ended the lease
 * (STATS leases_released; leases_op() counts the ones it answers at once).
 */
void leases_note_released(struct leases *ls);
void leases_op_cancel(struct leases *ls, struct backend_lease_op *pending);

/*
 * Handover: leases_restart_part (restart.h; data: the struct leases)
 * writes a "leases" record and one "lease" record per lease, numbered from
 * 0 in that order, which leases_owner_number gives for an owner that is a
 * lease (false for any other owner). The successor reads them before the
 * lock table's holds; leases_restored finds a restored lease by its
 * number (NULL: none), and a lease still being acquired gets its
 * requester back through leases_restore_requester.
 */
struct restart_part;
struct restart_in;
extern const struct restart_part leases_restart_part;
bool leases_owner_number(const struct lock_owner *o, uint64_t *n);
struct lease *leases_restored(const struct restart_in *in, uint64_t n);
struct lock_owner *leases_owner(struct lease *le);
bool leases_restore_requester(struct lease *le, struct lock_owner *requester);

#endif
