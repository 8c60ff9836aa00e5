/*
 * lease.c - holds that belong to no connection (see lease.h).
 *
 * Each lease is a struct lease: a lock owner with one hold, in `all`, and
 * once granted also in a tsearch(3) tree by (token, name), so that UNLOCK
 * and RENEW find it by what the client knows. Whatever ends a lease
 * (UNLOCK, expiry, the backend losing it, the requester leaving first)
 * goes through lease_end(), which releases the hold through the lock table
 * and frees the record.
 */
#include "config.h"
#include "lease.h"
#include "backend.h"
#include "log.h"
#include "proto.h"
#include "quota.h"
#include "restart.h"
#include "snap.h"

#include <event2/event.h>
#include <limits.h>
#include <search.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

struct lease {
    struct lock_owner owner;       /* first: owner callbacks cast back */
    struct leases *set;
    struct lock_owner *requester;  /* waits for the answer; NULL once it has it */
    TAILQ_ENTRY(lease) link;       /* set->all */
    struct event *expiry;          /* owned; embedded mode's end, armed once granted */
    bool granted;                  /* in set->by_token */
    uint64_t token;                /* valid once granted */
    int64_t ttl_ms;                /* as asked for, until the first grant */
    int64_t delay_ms;              /* its lock-delay, kept after it expires */
    int64_t ends_ms;               /* embedded mode, granted: monotonic ms of its end */
    char desc[96];                 /* "lease:<taker's address>"; the owner's desc */
    char account[PROTO_ACCOUNT_MAX + 1]; /* the taker's account (quota.h), the owner's;
                                    * "" when restored by a handover (not carried) */
    struct quota_acct *acct;       /* what it counts against in set->accounts */
    char label[PROTO_LABEL_MAX + 1]; /* the taker's CLIENT label then, or "" */
    char name[256];                /* a lock name (at most 200 bytes) */
    uint64_t number;               /* its place in the last handover snapshot */
};

struct leases {
    struct event_base *base;       /* borrowed */
    struct locks *locks;           /* borrowed */
    struct backend *backend;       /* borrowed */
    TAILQ_HEAD(, lease) all;
    void *by_token;                /* tsearch root: granted leases by (token, name) */
    unsigned max;
    struct quota accounts;         /* leases per account; every lease is counted */
    unsigned max_per_account;
    struct leases_stats stats;
    uint64_t restored;             /* "lease" records read back (a handover) */
};

static int by_token(const void *a, const void *b)
{
    const struct lease *x = a, *y = b;

    if (x->token != y->token)
        return x->token < y->token ? -1 : 1;
    return strcmp(x->name, y->name);
}

static struct lease *lease_find(struct leases *ls, const char *name, uint64_t token)
{
    struct lease key;
    void *found;

    key.token = token;
    snprintf(key.name, sizeof(key.name), "%s", name);
    found = tfind(&key, &ls->by_token, by_token);
    return found ? *(struct lease **)found : NULL;
}

/* Frees the record; the table must no longer hold anything for it. */
static void lease_free(struct lease *le)
{
    struct leases *ls = le->set;

    if (le->granted)
        tdelete(le, &ls->by_token, by_token);
    TAILQ_REMOVE(&ls->all, le, link);
    ls->stats.current--;
    quota_put(&ls->accounts, le->acct);
    if (le->expiry)
        event_free(le->expiry);
    free(le);
}

/* Ends the lease: its hold is released (the next waiters' turn) and it is freed. */
static void lease_end(struct lease *le)
{
    locks_owner_release_all(le->set->locks, &le->owner);
    lease_free(le);
}

/* Its ttl ran out without a release: the hold is abandoned (lock-delay). */
static void on_expiry(evutil_socket_t fd, short what, void *arg)
{
    struct lease *le = arg;

    log_info("lease %s (token %llu) expired", le->name, (unsigned long long)le->token);
    le->set->stats.expired++;
    locks_owner_abandon_all(le->set->locks, &le->owner);
    lease_free(le);
}

/* Embedded mode: (re)arms the end of the lease (le->expiry exists). */
static int lease_arm(struct lease *le, int64_t ttl_ms)
{
    struct timeval tv = { ttl_ms / 1000, (ttl_ms % 1000) * 1000 };

    if (le->set->backend->ops->ends_leases)
        return 0;
    event_base_update_cache_time(le->set->base);   /* from now, not the loop's start */
    le->ends_ms = locks_mono_ms() + ttl_ms;
    return evtimer_add(le->expiry, &tv);
}

/*
 * The hold is granted: the lease becomes findable by its token and starts
 * ticking. May run inside a lock table callback, so a lease that cannot be
 * kept is ended from the loop (its timer, due now), not from here.
 */
static enum locks_result lease_granted(struct lease *le, uint64_t token, int64_t ttl_ms)
{
    struct leases *ls = le->set;
    struct timeval now = { 0, 0 };

    le->token = token;
    if (lease_arm(le, ttl_ms) < 0 || !tsearch(le, &ls->by_token, by_token)) {
        log_error("lease %s: out of memory; ending it", le->name);
        evtimer_add(le->expiry, &now);
        return LOCKS_NOMEM;
    }
    le->granted = true;
    ls->stats.granted++;
    log_debug("lease %s: granted to %s, token %llu, ttl %lld ms", le->name, le->desc,
              (unsigned long long)token, (long long)ttl_ms);
    return LOCKS_GRANTED;
}

static struct lease *lease_of(struct lock_owner *o)
{
    return (struct lease *)o;
}

/* The table answers the lease's pending request: pass it to the requester. */
static void lease_on_done(struct lock_owner *o, const char *name, enum locks_result r,
                          uint64_t token)
{
    struct lease *le = lease_of(o);
    struct lock_owner *req = le->requester;

    le->requester = NULL;
    if (r == LOCKS_GRANTED) {
        r = lease_granted(le, token, le->ttl_ms);
    } else {
        lease_free(le);      /* refused or timed out: the table holds nothing for it */
    }
    if (req)
        req->ops->done(req, name, r, r == LOCKS_GRANTED ? token : 0);
}

/* The backend says the lease is gone (ended through another daemon, or
 * its node removed): nobody to tell. */
static void lease_on_lost(struct lock_owner *o, const char *name, uint64_t token,
                          const char *reason)
{
    struct lease *le = lease_of(o);

    log_info("lease %s (token %llu) ended: %s", name, (unsigned long long)token, reason);
    lease_free(le);
}

/* For STATUS and LOCKS: the time left, where lease.c's timer ends it. */
static int64_t lease_ends_in_ms(const struct lock_owner *o)
{
    const struct lease *le = (const struct lease *)o;   /* owner is its first member */
    int64_t left;

    if (!le->granted || le->set->backend->ops->ends_leases)
        return -1;
    left = le->ends_ms - locks_mono_ms();
    return left < 0 ? 0 : left;
}

/* Handover: a lease is "l<its number in the snapshot>" in hold records. */
static void lease_restart_key(const struct lock_owner *o, char *letter, uint64_t *n)
{
    *letter = 'l';
    *n = ((const struct lease *)o)->number;
}

static const struct lock_owner_ops lease_ops = {
    .done = lease_on_done,
    .lost = lease_on_lost,
    .ends_in_ms = lease_ends_in_ms,
    .restart_key = lease_restart_key,
    .abandoned_as = "expired",    /* its ttl ran out (on_expiry) */
};

struct leases *leases_new(struct event_base *base, struct locks *t, struct backend *backend,
                          unsigned max)
{
    struct leases *ls = calloc(1, sizeof(*ls));

    if (!ls)
        return NULL;
    ls->base = base;
    ls->locks = t;
    ls->backend = backend;
    ls->max = max;
    ls->max_per_account = UINT_MAX;
    TAILQ_INIT(&ls->all);
    return ls;
}

void leases_free(struct leases *ls)
{
    struct lease *le;

    if (!ls)
        return;
    while ((le = TAILQ_FIRST(&ls->all)))
        lease_free(le);
    quota_clear(&ls->accounts);
    free(ls);
}

void leases_set_max(struct leases *ls, unsigned max, unsigned max_per_account)
{
    ls->max = max;
    ls->max_per_account = max_per_account;
}

void leases_get_stats(const struct leases *ls, struct leases_stats *out)
{
    *out = ls->stats;
}

enum locks_result leases_lock(struct leases *ls, struct lock_owner *requester, const char *name,
                              const struct lock_req *req, uint64_t *token,
                              struct lease **pending)
{
    struct lease *le;
    enum locks_result r;

    if (ls->stats.current >= ls->max)
        return LOCKS_LIMIT;
    if (requester->account &&
        quota_count(&ls->accounts, requester->account) >= ls->max_per_account)
        return LOCKS_LEASE_ACCOUNT;
    if (!(le = calloc(1, sizeof(*le))))
        return LOCKS_NOMEM;
    /* Made now, so that nothing needs memory once the lease is granted. */
    if (!(le->expiry = evtimer_new(ls->base, on_expiry, le))) {
        free(le);
        return LOCKS_NOMEM;
    }
    if (!quota_take(&ls->accounts, requester->account, &le->acct)) {
        event_free(le->expiry);
        free(le);
        return LOCKS_NOMEM;
    }
    if (requester->account)
        snprintf(le->account, sizeof(le->account), "%s", requester->account);
    le->set = ls;
    snprintf(le->name, sizeof(le->name), "%s", name);
    snprintf(le->desc, sizeof(le->desc), "lease:%s", requester->desc);
    lock_owner_init(&le->owner, &lease_ops, le->desc);
    /* Its holds that may be kept count against the taker's account too. */
    if (le->account[0])
        le->owner.account = le->account;
    if (requester->label) {
        snprintf(le->label, sizeof(le->label), "%s", requester->label);
        le->owner.label = le->label;
    }
    le->ttl_ms = req->ttl_ms;
    le->delay_ms = req->delay_ms > 0 ? req->delay_ms : 0;
    TAILQ_INSERT_TAIL(&ls->all, le, link);
    ls->stats.current++;

    r = locks_lock(ls->locks, &le->owner, name, req, token);
    if (r == LOCKS_WAITING) {
        le->requester = requester;
        *pending = le;
        return r;
    }
    if (r == LOCKS_GRANTED)
        return lease_granted(le, *token, req->ttl_ms);
    lease_free(le);
    return r;
}

void leases_cancel(struct leases *ls, struct lease *pending)
{
    pending->requester = NULL;
    lease_end(pending);
}

enum locks_result leases_op(struct leases *ls, const char *name, uint64_t token, int64_t ttl_ms,
                            void (*cb)(void *arg, enum locks_result r, int64_t left_ms),
                            void *arg, struct backend_lease_op **pending, int64_t *left_ms)
{
    struct backend *be = ls->backend;
    struct lease *le = lease_find(ls, name, token);
    enum locks_result r;

    if (le && !be->ops->ends_leases) {
        if (ttl_ms == LEASE_CHECK) {
            /* Its timer ends it, then its lock-delay keeps the name. */
            *left_ms = le->ends_ms - locks_mono_ms();
            if (*left_ms < 0)
                *left_ms = 0;
            *left_ms += le->delay_ms;
            return LOCKS_RELEASED;
        }
        if (ttl_ms > 0)
            return lease_arm(le, ttl_ms) < 0 ? LOCKS_NOMEM : LOCKS_RELEASED;
        log_debug("lease %s (token %llu) released", name, (unsigned long long)token);
        lease_end(le);
        ls->stats.released++;
        return LOCKS_RELEASED;
    }
    /*
     * Granted elsewhere, or the backend ends leases: then only it knows
     * whether the lease still runs (another daemon may have renewed it, or
     * removed it at its end before our watch says so), and a release or
     * renewal is decided there. Our own copy ends when the backend tells.
     */
    r = be->ops->lease_op(be->impl, name, token, ttl_ms, cb, arg, pending);
    if (r == LOCKS_RELEASED && ttl_ms == 0)
        ls->stats.released++;
    return r;
}

void leases_note_released(struct leases *ls)
{
    ls->stats.released++;
}

void leases_op_cancel(struct leases *ls, struct backend_lease_op *pending)
{
    ls->backend->ops->lease_op_cancel(ls->backend->impl, pending);
}

/*
 * The restart's part (restart.h): one "lease" record per lease, numbered
 * in order; the lock table's hold records name them by that number
 * (lease_restart_key), a parked request waiting for one likewise
 * (leases_owner_number). data: the struct leases.
 */
static void leases_save(void *data, struct snap_w *w)
{
    struct leases *ls = data;
    struct lease *le;
    uint64_t n = 0;

    snap_w_rec(w, "leases");
    snap_w_u64(w, ls->stats.granted);
    snap_w_u64(w, ls->stats.expired);
    snap_w_u64(w, ls->stats.released);
    TAILQ_FOREACH(le, &ls->all, link) {
        le->number = n++;
        snap_w_rec(w, "lease");
        snap_w_str(w, le->name);
        snap_w_bool(w, le->granted);
        snap_w_u64(w, le->token);
        snap_w_i64(w, le->ttl_ms);
        snap_w_i64(w, le->delay_ms);
        snap_w_i64(w, le->ends_ms);
        snap_w_str(w, le->desc);
        snap_w_str(w, le->label[0] ? le->label : NULL);
    }
}

bool leases_owner_number(const struct lock_owner *o, uint64_t *n)
{
    if (o->ops != &lease_ops)
        return false;
    *n = ((const struct lease *)o)->number;
    return true;
}

static bool leases_restore_stats(void *data, struct snap_r *r, struct restart_in *in)
{
    struct leases *ls = data;

    ls->stats.granted = snap_r_u64(r);
    ls->stats.expired = snap_r_u64(r);
    ls->stats.released = snap_r_u64(r);
    return snap_r_done(r);
}

static bool leases_restore(void *data, struct snap_r *r, struct restart_in *in)
{
    struct leases *ls = data;
    struct lease *le = calloc(1, sizeof(*le));
    struct timeval tv;
    int64_t left;

    if (!le || !(le->expiry = evtimer_new(ls->base, on_expiry, le))) {
        free(le);
        return snap_r_fail(r, "out of memory");
    }
    le->set = ls;
    snap_r_str_copy(r, le->name, sizeof(le->name));
    le->granted = snap_r_bool(r);
    le->token = snap_r_u64(r);
    le->ttl_ms = snap_r_i64(r);
    le->delay_ms = snap_r_i64(r);
    le->ends_ms = snap_r_i64(r);
    snap_r_str_copy(r, le->desc, sizeof(le->desc));
    snap_r_str_copy(r, le->label, sizeof(le->label));
    lock_owner_init(&le->owner, &lease_ops, le->desc);
    if (le->label[0])
        le->owner.label = le->label;
    TAILQ_INSERT_TAIL(&ls->all, le, link);
    ls->stats.current++;
    /* The snapshot names no account: the daemon-wide cap only. */
    quota_take(&ls->accounts, NULL, &le->acct);
    if (!snap_r_done(r))
        return false;       /* in ls->all: leases_free() frees it */
    if (le->granted && !tsearch(le, &ls->by_token, by_token)) {
        le->granted = false;
        return snap_r_fail(r, "out of memory");
    }
    if (le->granted && !ls->backend->ops->ends_leases) {
        left = le->ends_ms + 1 - locks_mono_ms();     /* ends_ms was rounded down */
        left = left < 0 ? 0 : left;
        tv.tv_sec = left / 1000;
        tv.tv_usec = (left % 1000) * 1000;
        if (evtimer_add(le->expiry, &tv) < 0) {
            snap_r_fail(r, "out of memory");
            return NULL;
        }
    }
    le->number = ls->restored++;
    return restart_keep(in, r, 'l', le->number, &le->owner);
}

const struct restart_part leases_restart_part = {
    .name = "leases",
    .kinds = (const struct restart_kind[]){
        { "leases", leases_restore_stats }, { "lease", leases_restore }, { NULL } },
    .save = leases_save,
};

struct lease *leases_restored(const struct restart_in *in, uint64_t n)
{
    return restart_find(in, 'l', n);   /* the owner, the lease's first member */
}

struct lock_owner *leases_owner(struct lease *le)
{
    return &le->owner;
}

bool leases_restore_requester(struct lease *le, struct lock_owner *requester)
{
    if (le->granted || le->requester)
        return false;
    le->requester = requester;
    return true;
}
