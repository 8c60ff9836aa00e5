/*
 * locks.c - the lock table (see locks.h).
 *
 * Each name has a struct lock with two lists: `admitted`, the requests let
 * through locally (HOLD_ACQUIRING while the backend works for them,
 * HOLD_HELD once granted), and `waiters`, the rest in arrival order.
 * lock_settle() is the one place that decides who goes through: it moves the
 * head of the waiters to `admitted` while it fits beside what is there
 * (lock_fits), and asks the backend for each. When an acquiring request
 * leaves and the next waiter wants the same mode, that waiter takes over
 * its acquisition, so a departing waiter costs the backend nothing and the
 * next keeps its place in line. Locks exist only while a list is non-empty.
 * Names are found through an ordered tree (name_tree.h); queue operations
 * are O(1).
 */
#include "config.h"
#include "locks.h"
#include "backend.h"
#include "histogram.h"
#include "locks_int.h"
#include "log.h"
#include "name_tree.h"

#include <event2/event.h>
#include <fnmatch.h>
#include <limits.h>
#include <sys/time.h>
#include <time.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH UINT32_MAX

static const char *const mode_names[LOCK_MODE_COUNT] = { "exclusive", "shared", "limit" };

int64_t locks_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t locks_mono_ms(void)
{
    return locks_mono_us() / 1000;
}

const char *lock_mode_name(enum lock_mode m)
{
    return (unsigned)m < LOCK_MODE_COUNT ? mode_names[m] : "?";
}

/* " (shared)" for log lines; exclusive lines keep their v1 form. */
static const char *mode_suffix(enum lock_mode m)
{
    static const char *const suffixes[LOCK_MODE_COUNT] = { "", " (shared)", " (limit)" };

    return (unsigned)m < LOCK_MODE_COUNT ? suffixes[m] : "";
}

/* How a granted hold ended, for its log line (hold_log_end). */
enum hold_end {
    HOLD_END_RELEASED,   /* its owner released it: UNLOCK, QUIT, a lease's UNLOCK <token> */
    HOLD_END_ABANDONED,  /* its owner went without a release: a connection closed, a
                          * lease expired (lock_owner_ops.abandoned_as names it) */
    HOLD_END_KEPT,       /* kept after its owner let go (a lock-delay, keep=): time over */
    HOLD_END_BROKEN,     /* BREAK */
    HOLD_END_LOST,       /* the backend lost it (ZooKeeper) */
    HOLD_END_ENDED,      /* the backend ended it as agreed elsewhere (a lease, through
                          * another daemon) */
};

static const char *const hold_end_names[] = {
    [HOLD_END_RELEASED] = "released", [HOLD_END_ABANDONED] = "abandoned",
    [HOLD_END_KEPT] = "kept", [HOLD_END_BROKEN] = "broken", [HOLD_END_LOST] = "lost",
    [HOLD_END_ENDED] = "ended",
};

/* The user an account names ("user alice": "alice"; quota.h), or "-". */
static const char *account_user(const char *account)
{
    return account && strncmp(account, "user ", 5) == 0 ? account + 5 : "-";
}

/*
 * The one line per ended hold (README.md, "Running the daemon"), written as h, still
 * granted, ends: before anything of it changes. how: why; reason: the
 * backend's word for a lost or ended hold, else NULL. One call site, so
 * one budget of [log] rate_limit lines a second (log.h): beyond it the
 * lines are counted in a "suppressed" line, not dropped unsaid. Not
 * written while the daemon stops: a stop ends every hold at once (its
 * "stopped" line says so), and a handover ends none.
 */
static void hold_log_end(const struct hold *h, enum hold_end how, const char *reason)
{
    const struct locks *t = h->lock->table;
    bool kept = h->owner == &t->abandoned;
    const char *end = hold_end_names[how];
    int64_t now_us, let_go_us, held_us, waited_us;
    char tail[128] = "";
    int n = 0;

    if (!t->log_holds || t->closing)
        return;
    if (how == HOLD_END_ABANDONED && h->owner->ops->abandoned_as)
        end = h->owner->ops->abandoned_as;
    now_us = locks_mono_us();
    /* A kept hold was held until its owner let go, then kept until now. */
    let_go_us = kept ? (h->delay_end_ms - h->kept_ms) * 1000 : now_us;
    if (let_go_us < h->granted_us)
        let_go_us = h->granted_us;
    held_us = let_go_us - h->granted_us;
    waited_us = h->granted_us > h->asked_us ? h->granted_us - h->asked_us : 0;
    /* The rare parts, formatted only when there. */
    if (kept)
        n = snprintf(tail, sizeof(tail), " after=%s kept=%lld.%03llds",
                     h->let_go ? h->let_go : h->kept_by_release ? "released" : "abandoned",
                     (long long)((now_us - let_go_us) / 1000000),
                     (long long)((now_us - let_go_us) / 1000 % 1000));
    if (reason && n >= 0 && (size_t)n < sizeof(tail))
        snprintf(tail + n, sizeof(tail) - (size_t)n, " reason=%s", reason);
    log_info("lock %s: hold ended: end=%s holder=%s user=%s label=%s token=%llu mode=%s "
             "waited=%lld.%03llds held=%lld.%03llds%s",
             h->lock->name, end, hold_owner_desc(h),
             account_user(kept ? quota_acct_key(h->acct) : h->owner->account),
             hold_label(h) ? hold_label(h) : "-", (unsigned long long)h->token,
             lock_mode_name(h->mode),
             (long long)(waited_us / 1000000), (long long)(waited_us / 1000 % 1000),
             (long long)(held_us / 1000000), (long long)(held_us / 1000 % 1000), tail);
}

struct lock *lock_of_node(const struct name_node *n)
{
    return (struct lock *)((char *)n - offsetof(struct lock, node));
}

struct lock *lock_find(const struct locks *t, const char *name)
{
    struct name_node *n = name_tree_find(t->tree, name);

    return n ? lock_of_node(n) : NULL;
}

struct lock *lock_create(struct locks *t, const char *name, const struct lock_req *req)
{
    size_t len = strlen(name);
    struct lock *l = calloc(1, sizeof(*l) + len + 1);

    if (!l)
        return NULL;
    l->table = t;
    TAILQ_INIT(&l->admitted);
    TAILQ_INIT(&l->waiters);
    l->semaphore = req->mode == LOCK_LIMIT;
    l->limit = l->semaphore ? req->limit : 0;
    memcpy(l->name_buf, name, len + 1);
    l->name = l->name_buf;
    l->node.name = l->name;
    if (name_tree_insert(&t->tree, &l->node) != &l->node) {   /* there already */
        free(l);
        return NULL;
    }
    return l;
}

bool lock_empty(const struct lock *l)
{
    return TAILQ_EMPTY(&l->admitted) && TAILQ_EMPTY(&l->waiters);
}

static void lock_destroy(struct lock *l)
{
    name_tree_remove(&l->table->tree, &l->node);
    free(l);
}

/* A request in this mode would disagree with the name's current requests. */
static bool lock_conflicts(const struct lock *l, const struct lock_req *req)
{
    if (req->mode == LOCK_LIMIT)
        return !l->semaphore || l->limit != req->limit;
    return l->semaphore;
}

/* A request of this mode and weight can go through beside the admitted ones. */
static bool lock_fits(const struct lock *l, enum lock_mode mode, unsigned weight)
{
    const struct hold *first = TAILQ_FIRST(&l->admitted);

    switch (mode) {
    case LOCK_EXCLUSIVE:
        return first == NULL;
    case LOCK_SHARED:
        /* Admitted holds are one exclusive, or shared ones only. */
        return first == NULL || first->mode == LOCK_SHARED;
    case LOCK_LIMIT:
        return l->weight + weight <= l->limit;
    case LOCK_MODE_COUNT:
        break;
    }
    return false;
}

/*
 * Distributed mode (backend.h, early_places): h does not fit beside the
 * admitted holds, but it takes its place in the backend's queue now,
 * where the backend makes it wait its turn: a writer behind readers here,
 * or a reader behind a writer that already waits there. Otherwise a
 * reader arriving through another daemon would be queued ahead of it.
 * Semaphores and a writer behind a writer keep the local queue (and its
 * local handoffs).
 */
static bool lock_takes_place(const struct lock *l, const struct hold *h)
{
    const struct hold *first = TAILQ_FIRST(&l->admitted);
    const struct hold *last = TAILQ_LAST(&l->admitted, hold_list);

    if (!l->table->backend->ops->early_places || l->semaphore || !first || h->try)
        return false;
    return first->mode == LOCK_SHARED ||
           (h->mode == LOCK_SHARED && last->state == HOLD_ACQUIRING);
}

/* A name's holds changed: tell the observer (WATCH). */
static void lock_changed(const struct lock *l)
{
    if (l->table->changed)
        l->table->changed(l->table->changed_arg, l->name);
}

bool hold_count_keepable(struct locks *t, struct hold *h, const char *key)
{
    if (!quota_take(&t->keep, key, &h->acct))
        return false;
    h->keepable = true;
    t->stats.keepable++;
    return true;
}

static void hold_uncount_keepable(struct locks *t, struct hold *h)
{
    if (!h->keepable)
        return;
    quota_put(&t->keep, h->acct);
    h->acct = NULL;
    h->keepable = false;
    t->stats.keepable--;
}

/* Whether n more holds that may be kept fit for o: LOCKS_RELEASED, or which quota is full. */
static enum locks_result keep_verdict(struct locks *t, const struct lock_owner *o, unsigned n)
{
    switch (quota_check(&t->keep, o->account, n, t->keep_max, t->keep_max_per_account)) {
    case QUOTA_OK:
        return LOCKS_RELEASED;
    case QUOTA_ACCOUNT:
        t->stats.keep_refused++;
        return LOCKS_KEEP_ACCOUNT;
    case QUOTA_TOTAL:
        break;
    }
    t->stats.keep_refused++;
    return LOCKS_KEEP_TOTAL;
}

/* Takes h out of its lists and the counters, and frees it. */
static void hold_unlink(struct hold *h)
{
    struct lock *l = h->lock;
    struct locks *t = l->table;

    if (h->state == HOLD_HELD)
        lock_changed(l);
    if (h->state == HOLD_HELD)
        TAILQ_REMOVE(&t->held_by_age, h, by_age);
    else
        TAILQ_REMOVE(&t->waiting_by_age, h, by_age);
    switch (h->state) {
    case HOLD_WAITING:
        TAILQ_REMOVE(&l->waiters, h, in_lock);
        l->nwaiters--;
        t->stats.waiting--;
        break;
    case HOLD_ACQUIRING:
    case HOLD_HELD:
        TAILQ_REMOVE(&l->admitted, h, in_lock);
        l->nadmitted--;
        l->weight -= h->weight;
        if (h->state == HOLD_HELD) {
            l->nheld--;
            t->stats.held--;
            histogram_observe(&t->hist.hold, locks_mono_us() - h->granted_us);
        } else {
            t->stats.waiting--;
        }
        break;
    }
    TAILQ_REMOVE(&h->owner->holds, h, in_owner);
    h->owner->nholds--;
    if (h->owner == &t->abandoned)
        t->stats.delayed--;
    hold_uncount_keepable(t, h);
    if (h->timer)
        event_free(h->timer);
    free(h->gone_desc);
    free(h->gone_label);
    free(h);
}

/* Moves a waiting hold into `admitted`. */
static void hold_admit(struct hold *h)
{
    struct lock *l = h->lock;

    TAILQ_REMOVE(&l->waiters, h, in_lock);
    l->nwaiters--;
    TAILQ_INSERT_TAIL(&l->admitted, h, in_lock);
    l->nadmitted++;
    l->weight += h->weight;
    h->state = HOLD_ACQUIRING;
}

static void hold_grant(struct hold *h, uint64_t token)
{
    struct locks *t = h->lock->table;
    struct timeval now;

    gettimeofday(&now, NULL);
    h->granted_us = locks_mono_us();
    histogram_observe(&t->hist.wait, h->granted_us - h->asked_us);
    TAILQ_REMOVE(&t->waiting_by_age, h, by_age);
    h->state = HOLD_HELD;
    TAILQ_INSERT_TAIL(&t->held_by_age, h, by_age);   /* granted_us is now: the newest */
    h->lock->nheld++;
    h->count = 1;
    h->token = token;
    h->since_ms = (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000;
    if (h->timer) {
        event_free(h->timer);
        h->timer = NULL;
    }
    t->stats.waiting--;
    t->stats.held++;
    t->stats.grants++;
    t->stats.grants_by_mode[h->mode]++;
    lock_changed(h->lock);
    log_debug("lock %s: granted to %s, token %llu%s", h->lock->name, h->owner->desc,
              (unsigned long long)token, mode_suffix(h->mode));
}

/*
 * The one place that decides who may go ahead: admits the waiters at the
 * head while the next one fits, asking the backend for each, then frees the
 * lock if nothing is left. Outcomes go to the owners' done(), except self's
 * (the request locks_lock() is answering), which lands in *self_r and
 * *self_token. The caller must not use l afterwards.
 */
static void lock_settle(struct lock *l, struct hold *self, enum locks_result *self_r,
                        uint64_t *self_token)
{
    struct locks *t = l->table;
    struct hold *h;

    while (!t->closing && (h = TAILQ_FIRST(&l->waiters)) &&
           (lock_fits(l, h->mode, h->weight) || lock_takes_place(l, h))) {
        struct lock_owner *o = h->owner;
        uint64_t token = 0;
        enum locks_result r;

        hold_admit(h);
        r = t->backend->ops->acquire(t->backend->impl, h, &token);
        if (r == LOCKS_WAITING)
            continue;
        if (r == LOCKS_GRANTED)
            hold_grant(h, token);
        else
            hold_unlink(h);   /* refused at once: the next waiter may fit now */
        if (h == self) {
            *self_r = r;
            *self_token = token;
        } else {
            o->ops->done(o, l->name, r, token);
        }
    }
    if (lock_empty(l))
        lock_destroy(l);
}

/* A waiting or acquiring request leaves (timeout, owner gone). */
static void hold_cancel(struct hold *h)
{
    struct lock *l = h->lock;
    struct locks *t = l->table;
    struct hold *next = TAILQ_FIRST(&l->waiters);

    if (h->state == HOLD_ACQUIRING) {
        if (!h->try && next && next->mode == h->mode && next->weight == h->weight &&
            next->ttl_ms == h->ttl_ms && next->delay_ms == h->delay_ms && !t->closing) {
            /* The next waiter takes over the acquisition and its place in line. */
            hold_admit(next);
            TAILQ_REMOVE(&l->admitted, next, in_lock);
            TAILQ_INSERT_AFTER(&l->admitted, h, next, in_lock);
            next->backend_data = h->backend_data;
            h->backend_data = NULL;
            hold_unlink(h);
            t->backend->ops->reassign(t->backend->impl, next);
            return;
        }
        t->backend->ops->cancel(t->backend->impl, h);
    }
    hold_unlink(h);
    lock_settle(l, NULL, NULL, NULL);
}

/* A granted hold ends for good (how: for its log line): the backend lets go,
 * the next waiters' turn begins. */
static void hold_release(struct hold *h, enum hold_end how)
{
    struct lock *l = h->lock;
    struct locks *t = l->table;
    struct hold *next = TAILQ_FIRST(&l->waiters);
    uint64_t token = 0;
    enum locks_result r;

    hold_log_end(h, how, NULL);

    /* The next waiter here may take an exclusive hold over (local handoff). */
    /* A backend may name the lock-delay in what it keeps (distributed mode's
     * node name): the next one passes through it only with the same one. */
    if (next && !t->closing && h->mode == LOCK_EXCLUSIVE && next->mode == LOCK_EXCLUSIVE &&
        h->ttl_ms == 0 && next->ttl_ms == 0 && h->delay_ms == next->delay_ms &&
        ((r = t->backend->ops->pass_on(t->backend->impl, h, next, &token)) == LOCKS_WAITING ||
         r == LOCKS_GRANTED)) {
        struct lock_owner *o = next->owner;

        hold_admit(next);
        hold_unlink(h);
        t->stats.handoffs++;
        if (r == LOCKS_GRANTED) {
            hold_grant(next, token);
            o->ops->done(o, l->name, LOCKS_GRANTED, token);
        }
        return;
    }
    t->backend->ops->release(t->backend->impl, h);
    hold_unlink(h);
    lock_settle(l, NULL, NULL, NULL);
}

void hold_on_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct hold *h = arg;
    struct locks *t = h->lock->table;
    struct lock_owner *o = h->owner;
    /* Unreachable as the wait ends, whenever that began: an outage. Who
     * holds the lock cannot be known, so it is not "somebody's hold". */
    enum locks_result r = t->backend->ops->unreachable_since(t->backend->impl) ?
                          LOCKS_UNAVAILABLE : LOCKS_TIMEOUT;
    char name[NAME_COPY];

    snprintf(name, sizeof(name), "%s", h->lock->name);
    log_debug("lock %s: wait of %s timed out%s", name, o->desc,
              r == LOCKS_UNAVAILABLE ? " (the lock service is unreachable)" : "");
    t->stats.timeouts++;
    hold_cancel(h);
    o->ops->done(o, name, r, 0);
}

/* The owner of abandoned holds hears nothing: nobody is there. */
static void abandoned_done(struct lock_owner *o, const char *name, enum locks_result r,
                           uint64_t token)
{
}

static void abandoned_lost(struct lock_owner *o, const char *name, uint64_t token,
                           const char *reason)
{
}

static const struct lock_owner_ops abandoned_ops = {
    .done = abandoned_done,
    .lost = abandoned_lost,
};

/* A kept hold's time is over (a lock-delay, or UNLOCK keep=): it ends as if released. */
void hold_on_delay_over(evutil_socket_t fd, short what, void *arg)
{
    struct hold *h = arg;

    log_info("lock %s: %s of %lld ms after %s %s (token %llu) is over", h->lock->name,
             h->kept_by_release ? "keep=" : "lock-delay", (long long)h->kept_ms,
             h->gone_desc ? h->gone_desc : "?", h->kept_by_release ? "released" : "ended",
             (unsigned long long)h->token);
    hold_release(h, HOLD_END_KEPT);
}

/*
 * Keeps h, granted and ended by its owner, for ms: it moves to the table's
 * own owner, and a timer releases it. released: UNLOCK keep= asked for it;
 * otherwise the owner abandoned the hold and ms is its lock-delay. false when
 * that cannot be done (no time, the daemon is stopping, out of memory):
 * release it.
 */
static bool hold_keep(struct hold *h, int64_t ms, bool released)
{
    struct locks *t = h->lock->table;
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    char *desc, *label = NULL;

    if (ms <= 0 || t->closing || h->state != HOLD_HELD)
        return false;
    /* A hold without a lock-delay counts from now (the caller checked the
     * quota); one with a lock-delay has counted since its request. */
    if (!h->keepable && !hold_count_keepable(t, h, h->owner->account))
        return false;
    event_base_update_cache_time(t->base);
    /* Its desc and label go on naming it in STATUS, LOCKS and WATCH. */
    if (!(desc = strdup(h->owner->desc ? h->owner->desc : "?")) ||
        (h->owner->label && !(label = strdup(h->owner->label))) ||
        !(h->timer = evtimer_new(t->base, hold_on_delay_over, h)) || evtimer_add(h->timer, &tv) < 0) {
        if (h->timer)
            event_free(h->timer);
        h->timer = NULL;
        free(desc);
        free(label);
        if (h->delay_ms == 0)
            hold_uncount_keepable(t, h);
        return false;
    }
    h->gone_desc = desc;
    h->gone_label = label;
    h->kept_ms = ms;
    h->kept_by_release = released;
    h->let_go = released ? "released" : h->owner->ops->abandoned_as ? h->owner->ops->abandoned_as
                                                                    : "abandoned";
    h->delay_end_ms = locks_mono_ms() + ms;
    TAILQ_REMOVE(&h->owner->holds, h, in_owner);
    h->owner->nholds--;
    h->owner = &t->abandoned;
    TAILQ_INSERT_TAIL(&t->abandoned.holds, h, in_owner);
    t->abandoned.nholds++;
    lock_changed(h->lock);
    if (released)
        t->stats.keeps++;
    else
        t->stats.delays++;
    t->stats.delayed++;
    if (released)
        log_info("lock %s: %s released it with keep= (token %llu): nobody else is granted it "
                 "for %lld ms", h->lock->name, desc, (unsigned long long)h->token,
                 (long long)ms);
    else
        log_info("lock %s: %s ended without a release (token %llu): nobody else is granted it "
                 "for its lock-delay of %lld ms", h->lock->name, desc,
                 (unsigned long long)h->token, (long long)ms);
    return true;
}

struct locks *locks_new(struct event_base *base, struct backend *backend, unsigned max_per_client)
{
    struct locks *t = calloc(1, sizeof(*t));

    if (!t)
        return NULL;
    lock_owner_init(&t->abandoned, &abandoned_ops, "lock-delay");
    TAILQ_INIT(&t->held_by_age);
    TAILQ_INIT(&t->waiting_by_age);
    t->base = base;
    t->backend = backend;
    t->max_per_client = max_per_client;
    t->keep_max = UINT_MAX;
    t->keep_max_per_account = UINT_MAX;
    t->log_holds = true;
    return t;
}

void locks_shutdown(struct locks *t)
{
    t->closing = true;
}

static void free_lock_node(struct name_node *n)
{
    struct lock *l = lock_of_node(n);
    struct hold *h;

    while ((h = TAILQ_FIRST(&l->admitted)) || (h = TAILQ_FIRST(&l->waiters)))
        hold_unlink(h);
    free(l);
}

void locks_free(struct locks *t)
{
    if (!t)
        return;
    name_tree_destroy(t->tree, free_lock_node);
    quota_clear(&t->keep);
    free(t);
}

void lock_owner_init(struct lock_owner *o, const struct lock_owner_ops *ops, const char *desc)
{
    TAILQ_INIT(&o->holds);
    o->nholds = 0;
    o->ops = ops;
    o->desc = desc;
    o->label = NULL;
    o->account = NULL;
}

/* o's request for l, if any: at most max_locks_per_client holds to look at. */
static struct hold *owned_hold(const struct lock *l, const struct lock_owner *o)
{
    struct hold *h;

    TAILQ_FOREACH(h, &o->holds, in_owner)
        if (h->lock == l)
            return h;
    return NULL;
}

/* Starts the wait deadline of h, if it has one. Returns -1 when out of memory. */
static int hold_arm_timer(struct locks *t, struct hold *h, int64_t wait_ms)
{
    struct timeval tv = { wait_ms / 1000, (wait_ms % 1000) * 1000 };

    if (wait_ms <= 0)
        return 0;
    /* The loop's cached time may be from before this request arrived (a busy
     * iteration): a deadline counted from it would end the wait early. */
    event_base_update_cache_time(t->base);
    h->deadline_us = locks_mono_us() + wait_ms * 1000;
    h->timer = event_new(t->base, -1, 0, hold_on_wait_timeout, h);
    if (!h->timer || event_add(h->timer, &tv) < 0) {
        if (h->timer)
            event_free(h->timer);
        h->timer = NULL;
        return -1;
    }
    return 0;
}

enum locks_result locks_lock(struct locks *t, struct lock_owner *o, const char *name,
                             const struct lock_req *req, uint64_t *token)
{
    struct lock *l = lock_find(t, name);
    struct hold *h = l ? owned_hold(l, o) : NULL;
    bool no_wait = req->try || req->wait_ms == 0;
    enum locks_result r = LOCKS_WAITING;

    if (t->backend->ops->refuses && t->backend->ops->refuses(t->backend->impl, name, req))
        return LOCKS_UNSUPPORTED;
    if (h) {
        /* Re-entrant in the same mode; anything else could deadlock an upgrade. */
        if (h->mode != req->mode || lock_conflicts(l, req))
            return LOCKS_MODE_HELD;
        if (h->state != HOLD_HELD)
            return LOCKS_CONFLICT;
        if (h->count == MAX_DEPTH)
            return LOCKS_LIMIT;
        h->count++;
        *token = h->token;
        return LOCKS_GRANTED;
    }
    if (l && lock_conflicts(l, req))
        return LOCKS_CONFLICT;
    /* A request that does not wait never jumps the queue. */
    if (l && no_wait && (!TAILQ_EMPTY(&l->waiters) || !lock_fits(l, req->mode, 1)))
        return LOCKS_BUSY;
    if (o->nholds >= t->max_per_client)
        return LOCKS_LIMIT;
    /* A lock-delay may keep it after its owner is gone: refused now rather
     * than dropped then (PROTOCOL.md, "Quotas"). */
    if (req->delay_ms > 0 && (r = keep_verdict(t, o, 1)) != LOCKS_RELEASED)
        return r;
    r = LOCKS_WAITING;

    h = calloc(1, sizeof(*h));
    if (!h)
        return LOCKS_NOMEM;
    if (req->delay_ms > 0 && !hold_count_keepable(t, h, o->account)) {
        free(h);
        return LOCKS_NOMEM;
    }
    if (!l && !(l = lock_create(t, name, req))) {
        hold_uncount_keepable(t, h);
        free(h);
        return LOCKS_NOMEM;
    }
    if (hold_arm_timer(t, h, req->wait_ms) < 0) {
        hold_uncount_keepable(t, h);
        free(h);
        if (lock_empty(l))
            lock_destroy(l);
        return LOCKS_NOMEM;
    }
    h->lock = l;
    h->owner = o;
    h->state = HOLD_WAITING;
    h->mode = req->mode;
    h->weight = 1;
    h->try = no_wait;
    h->ttl_ms = req->ttl_ms;
    h->delay_ms = req->delay_ms > 0 ? req->delay_ms : 0;
    h->asked_us = locks_mono_us();
    TAILQ_INSERT_TAIL(&t->waiting_by_age, h, by_age);   /* asked now: the newest */
    TAILQ_INSERT_TAIL(&l->waiters, h, in_lock);
    l->nwaiters++;
    TAILQ_INSERT_TAIL(&o->holds, h, in_owner);
    o->nholds++;
    t->stats.waiting++;

    lock_settle(l, h, &r, token);
    if (r == LOCKS_WAITING)
        log_debug("lock %s: %s queued%s", name, o->desc, mode_suffix(req->mode));
    return r;
}

bool locks_owner_token(const struct locks *t, const struct lock_owner *o, const char *name,
                       uint64_t *token)
{
    struct lock *l = lock_find(t, name);
    struct hold *h = l ? owned_hold(l, o) : NULL;

    if (!h || h->state != HOLD_HELD)
        return false;
    *token = h->token;
    return true;
}

bool locks_owner_waiting(const struct locks *t, const struct lock_owner *o, const char *name)
{
    struct lock *l = lock_find(t, name);
    struct hold *h = l ? owned_hold(l, o) : NULL;

    return h && h->state != HOLD_HELD;
}

bool locks_owner_check(const struct locks *t, const struct lock_owner *o, const char *name,
                       uint64_t *token, int64_t *delay_ms, int64_t *backend_ms)
{
    struct lock *l = lock_find(t, name);
    struct hold *h = l ? owned_hold(l, o) : NULL;

    if (!h || h->state != HOLD_HELD)
        return false;
    *token = h->token;
    *delay_ms = h->delay_ms;
    *backend_ms = t->backend->ops->window_ms(t->backend->impl, h);
    return true;
}

bool locks_cancel_wait(struct locks *t, struct lock_owner *o, const char *name)
{
    struct lock *l = lock_find(t, name);
    struct hold *h = l ? owned_hold(l, o) : NULL;

    if (!h || h->state == HOLD_HELD)
        return false;
    hold_cancel(h);
    return true;
}

enum locks_result locks_unlock(struct locks *t, struct lock_owner *o, const char *name)
{
    return locks_unlock_keep(t, o, name, 0);
}

enum locks_result locks_unlock_keep(struct locks *t, struct lock_owner *o, const char *name,
                                    int64_t keep_ms)
{
    struct lock *l = lock_find(t, name);
    struct hold *h = l ? owned_hold(l, o) : NULL;
    enum locks_result r;

    if (!h || h->state != HOLD_HELD)
        return LOCKS_NOT_HELD;
    /* Refused before anything changes: the hold stays as it was. */
    if (h->count == 1 && keep_ms > 0 && !h->keepable && !t->closing &&
        (r = keep_verdict(t, o, 1)) != LOCKS_RELEASED)
        return r;
    if (--h->count == 0 && !hold_keep(h, keep_ms, true))
        hold_release(h, HOLD_END_RELEASED);
    return LOCKS_RELEASED;
}

/* Two optional strings are the same (both NULL, or equal). */
static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

unsigned locks_owner_move_held(struct locks *t, struct lock_owner *from, struct lock_owner *to)
{
    struct hold *h;
    unsigned moved = 0;

    /* The waits go first; a cancel settles only its own lock, whose next
     * waiters are other owners', so from's list changes by that hold only. */
    for (;;) {
        TAILQ_FOREACH(h, &from->holds, in_owner)
            if (h->state != HOLD_HELD)
                break;
        if (!h)
            break;
        hold_cancel(h);
    }
    while ((h = TAILQ_FIRST(&from->holds))) {
        TAILQ_REMOVE(&from->holds, h, in_owner);
        from->nholds--;
        h->owner = to;
        TAILQ_INSERT_TAIL(&to->holds, h, in_owner);
        to->nholds++;
        moved++;
        log_debug("lock %s: hold (token %llu) moved from %s to %s", h->lock->name,
                  (unsigned long long)h->token, from->desc ? from->desc : "?",
                  to->desc ? to->desc : "?");
        /* Renamed (RESUME on a new connection): the backend names the
         * holder elsewhere too (distributed mode: its node's data). */
        if (!same_str(from->desc, to->desc) || !same_str(from->label, to->label))
            t->backend->ops->reassign(t->backend->impl, h);
    }
    return moved;
}

void locks_owner_release_all(struct locks *t, struct lock_owner *o)
{
    struct hold *h;

    while ((h = TAILQ_FIRST(&o->holds))) {
        if (h->state == HOLD_HELD)
            hold_release(h, HOLD_END_RELEASED);
        else
            hold_cancel(h);
    }
}

void locks_owner_abandon_all(struct locks *t, struct lock_owner *o)
{
    struct hold *h;

    while ((h = TAILQ_FIRST(&o->holds))) {
        if (h->state != HOLD_HELD)
            hold_cancel(h);
        else if (!hold_keep(h, h->delay_ms, false))
            hold_release(h, HOLD_END_ABANDONED);
    }
}

unsigned locks_break(struct locks *t, const char *name, uint64_t token, const char *by)
{
    struct lock *l = lock_find(t, name);
    uint64_t *tokens;
    unsigned n = 0, ended = 0;
    struct hold *h;
    char copy[NAME_COPY];

    if (!l || !l->nheld || !(tokens = calloc(l->nheld, sizeof(*tokens))))
        return 0;
    /* The tokens first: releasing one may grant the next waiter, who is
     * not to be broken too. */
    TAILQ_FOREACH(h, &l->admitted, in_lock)
        if (h->state == HOLD_HELD && (!token || h->token == token) && n < l->nheld)
            tokens[n++] = h->token;
    snprintf(copy, sizeof(copy), "%s", name);
    for (unsigned i = 0; i < n; i++) {
        struct lock_owner *o;

        if (!(l = lock_find(t, copy)))
            break;
        TAILQ_FOREACH(h, &l->admitted, in_lock)
            if (h->state == HOLD_HELD && h->token == tokens[i])
                break;
        if (!h)
            continue;
        o = h->owner;
        log_warn("lock %s: broken by %s: %s loses it (token %llu)", copy, by, o->desc,
                 (unsigned long long)tokens[i]);
        t->stats.lost++;
        t->stats.broken++;
        h->count = 0;
        hold_release(h, HOLD_END_BROKEN);  /* as UNLOCK: no lock-delay, the next one goes on */
        o->ops->lost(o, copy, tokens[i], "broken");
        ended++;
    }
    free(tokens);
    return ended;
}

void locks_get_stats(const struct locks *t, struct locks_stats *out)
{
    *out = t->stats;
}

const struct locks_histograms *locks_get_histograms(const struct locks *t)
{
    return &t->hist;
}

void locks_ages(const struct locks *t, int64_t now_us, int64_t *oldest_hold_us,
                int64_t *longest_wait_us)
{
    const struct hold *held = TAILQ_FIRST(&t->held_by_age);
    const struct hold *waiting = TAILQ_FIRST(&t->waiting_by_age);

    *oldest_hold_us = held && now_us > held->granted_us ? now_us - held->granted_us : 0;
    *longest_wait_us = waiting && now_us > waiting->asked_us ? now_us - waiting->asked_us : 0;
}

void hold_age_append(struct locks *t, struct hold *h)
{
    if (h->state == HOLD_HELD)
        TAILQ_INSERT_TAIL(&t->held_by_age, h, by_age);
    else
        TAILQ_INSERT_TAIL(&t->waiting_by_age, h, by_age);
}

/* The time a hold's place on its age list goes by. */
static int64_t age_key(const struct hold *h)
{
    return h->state == HOLD_HELD ? h->granted_us : h->asked_us;
}

struct age_entry {
    int64_t key;
    struct hold *h;
};

static int age_entry_cmp(const void *a, const void *b)
{
    const struct age_entry *x = a, *y = b;

    return x->key < y->key ? -1 : x->key > y->key;
}

/*
 * Sorts one age list through an array of (time, hold) pairs: the holds
 * are read once, then the sort runs in contiguous memory (a merge sort
 * through the list's own pointers took seconds at a million holds, a cache
 * miss per step). -1 when out of memory (the list is left as it was).
 */
static int sort_age_list(struct hold_age_list *list)
{
    struct age_entry *a;
    struct hold *h;
    size_t n = 0, i = 0;

    TAILQ_FOREACH(h, list, by_age)
        n++;
    if (n < 2)
        return 0;
    if (!(a = malloc(n * sizeof(*a))))
        return -1;
    TAILQ_FOREACH(h, list, by_age) {
        a[i].key = age_key(h);
        a[i++].h = h;
    }
    qsort(a, n, sizeof(*a), age_entry_cmp);
    TAILQ_INIT(list);
    for (i = 0; i < n; i++)
        TAILQ_INSERT_TAIL(list, a[i].h, by_age);
    free(a);
    return 0;
}

int locks_sort_ages(struct locks *t)
{
    return sort_age_list(&t->held_by_age) < 0 || sort_age_list(&t->waiting_by_age) < 0 ? -1 : 0;
}

void locks_status(const struct locks *t, const char *name, struct locks_status *out)
{
    struct lock *l = lock_find(t, name);
    struct hold *h, *first;
    int64_t asked_us = -1;

    memset(out, 0, sizeof(*out));
    out->lease_ms = -1;
    out->detached_ms = -1;
    out->waited_ms = -1;
    if (!l)
        return;
    first = TAILQ_FIRST(&l->admitted) ? TAILQ_FIRST(&l->admitted) : TAILQ_FIRST(&l->waiters);
    out->mode = first->mode;
    out->limit = l->limit;
    out->holders = l->nheld;
    out->waiters = l->nwaiters + l->nadmitted - l->nheld;
    /* The queue's head asked first; an admitted request still being
     * acquired (distributed mode) may have asked earlier. */
    if ((h = TAILQ_FIRST(&l->waiters)))
        asked_us = h->asked_us;
    TAILQ_FOREACH(h, &l->admitted, in_lock) {
        if (h->state == HOLD_ACQUIRING && (asked_us < 0 || h->asked_us < asked_us))
            asked_us = h->asked_us;
        if (h->state == HOLD_HELD && !out->held) {
            out->held = true;
            out->holder = hold_owner_desc(h);
            out->label = hold_label(h);
            out->token = h->token;
            out->since_ms = h->since_ms;
            out->mode = h->mode;
            if (h->owner->ops->ends_in_ms)
                out->lease_ms = h->owner->ops->ends_in_ms(h->owner);
            if (h->owner->ops->detached_ms)
                out->detached_ms = h->owner->ops->detached_ms(h->owner);
        }
        if (h->owner == &t->abandoned) {
            int64_t left = h->delay_end_ms - locks_mono_ms();
            if (left < 1)
                left = 1;           /* its timer is due: still in force until it runs */
            if (left > out->delay_ms)
                out->delay_ms = left;
        }
    }
    if (asked_us >= 0 && out->waiters)
        out->waited_ms = (locks_mono_us() - asked_us) / 1000;
}

/* How much of glob is literal: a name that matches starts with these bytes.
 * fnmatch's special characters end it (a backslash too: kept short, the
 * prefix is still a necessary condition). */
static size_t glob_prefix_len(const char *glob)
{
    return glob ? strcspn(glob, "*?[\\") : 0;
}

const char *locks_next(const struct locks *t, const char *glob, const char *after)
{
    size_t plen = glob_prefix_len(glob);
    struct name_node *n;

    /* Names with the prefix are one run in name order: start at its first. */
    if (plen && (!after || strncmp(after, glob, plen) < 0)) {
        char prefix[NAME_COPY];

        if (plen >= sizeof(prefix))
            plen = sizeof(prefix) - 1;
        memcpy(prefix, glob, plen);
        prefix[plen] = '\0';
        n = name_tree_from(t->tree, prefix);
    } else {
        n = name_tree_after(t->tree, after);
    }
    for (; n; n = name_tree_after(t->tree, n->name)) {
        if (plen && strncmp(n->name, glob, plen) != 0)
            return NULL;            /* past the run */
        if (!glob || fnmatch(glob, n->name, 0) == 0)
            return n->name;
    }
    return NULL;
}

typedef bool (*hold_cb)(void *arg, const struct backend_holder *row);

/* Tells cb(arg, row) of one hold or queued request of l. */
static bool visit_hold(hold_cb cb, void *arg, const struct lock *l, const struct hold *h)
{
    struct backend_holder row = {
        .name = l->name, .mode = h->mode, .limit = h->mode == LOCK_LIMIT ? l->limit : 0,
        .held = h->state == HOLD_HELD, .holder = hold_owner_desc(h), .label = hold_label(h),
        .token = h->state == HOLD_HELD ? h->token : 0, .lease_ms = -1, .kept = hold_kept(h),
    };
    struct timeval now;

    if (row.held) {
        row.since_ms = h->since_ms;
        if (h->owner->ops->ends_in_ms)
            row.lease_ms = h->owner->ops->ends_in_ms(h->owner);
    } else {
        gettimeofday(&now, NULL);
        row.since_ms = (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000 -
                       (locks_mono_us() - h->asked_us) / 1000;
    }
    return cb(arg, &row);
}

void locks_each_hold_of(const struct locks *t, const char *name, hold_cb cb, void *arg)
{
    const struct lock *l = lock_find(t, name);
    const struct hold *h;

    if (!l)
        return;
    TAILQ_FOREACH(h, &l->admitted, in_lock)
        if (!visit_hold(cb, arg, l, h))
            return;
    TAILQ_FOREACH(h, &l->waiters, in_lock)
        if (!visit_hold(cb, arg, l, h))
            return;
}

void locks_set_observer(struct locks *t, void (*changed)(void *arg, const char *name),
                        void *arg)
{
    t->changed = changed;
    t->changed_arg = arg;
}

void locks_set_log_holds(struct locks *t, bool on)
{
    t->log_holds = on;
}

void locks_set_max_per_client(struct locks *t, unsigned max_per_client)
{
    t->max_per_client = max_per_client;
}

void locks_set_keep_max(struct locks *t, unsigned max_total, unsigned max_per_account)
{
    t->keep_max = max_total;
    t->keep_max_per_account = max_per_account;
}

enum locks_result locks_keep_room(struct locks *t, const struct lock_owner *o,
                                  const char *const *names, unsigned n, int64_t keep_ms)
{
    unsigned fresh = 0;

    if (keep_ms <= 0 || t->closing)
        return LOCKS_RELEASED;
    for (unsigned i = 0; i < n; i++) {
        struct lock *l = lock_find(t, names[i]);
        struct hold *h = l ? owned_hold(l, o) : NULL;

        fresh += h && h->state == HOLD_HELD && h->count == 1 && !h->keepable;
    }
    return fresh ? keep_verdict(t, o, fresh) : LOCKS_RELEASED;
}

/* ------------------------------------------------------------ for backends */

const char *hold_name(const struct hold *h) { return h->lock->name; }
const char *hold_owner_desc(const struct hold *h)
{
    return h->gone_desc ? h->gone_desc : h->owner->desc;
}
int64_t hold_delay_ms(const struct hold *h) { return h->delay_ms; }
bool hold_kept(const struct hold *h) { return h->owner == &h->lock->table->abandoned; }
const char *hold_label(const struct hold *h)
{
    return h->gone_desc ? h->gone_label : h->owner->label;
}
enum lock_mode hold_mode(const struct hold *h) { return h->mode; }
unsigned hold_limit(const struct hold *h) { return h->mode == LOCK_LIMIT ? h->lock->limit : 0; }
bool hold_try(const struct hold *h) { return h->try; }
int64_t hold_ttl_ms(const struct hold *h) { return h->ttl_ms; }
void *hold_backend_data(const struct hold *h) { return h->backend_data; }
void hold_set_backend_data(struct hold *h, void *p) { h->backend_data = p; }

void locks_backend_granted(struct hold *h, uint64_t token)
{
    struct lock_owner *o = h->owner;

    if (h->state != HOLD_ACQUIRING) {
        log_error("lock %s: backend granted a request that is not acquiring", h->lock->name);
        return;
    }
    hold_grant(h, token);
    o->ops->done(o, h->lock->name, LOCKS_GRANTED, token);
}

void locks_backend_refused(struct hold *h, enum locks_result r)
{
    struct lock *l = h->lock;
    struct lock_owner *o = h->owner;
    char name[NAME_COPY];

    if (h->state != HOLD_ACQUIRING) {
        log_error("lock %s: backend refused a request that is not acquiring", l->name);
        return;
    }
    snprintf(name, sizeof(name), "%s", l->name);
    hold_unlink(h);
    lock_settle(l, NULL, NULL, NULL);
    o->ops->done(o, name, r, 0);
}

/* The backend ended a held hold: lost (counted, a warning) or ended as agreed. */
static void backend_ended(struct hold *h, const char *reason, bool lost)
{
    struct lock *l = h->lock;
    struct locks *t = l->table;
    struct lock_owner *o = h->owner;
    uint64_t token = h->token;
    char name[NAME_COPY];

    if (h->state != HOLD_HELD) {
        log_error("lock %s: backend ended a lock that is not held", l->name);
        return;
    }
    snprintf(name, sizeof(name), "%s", l->name);
    if (lost) {
        log_warn("lock %s: lost by %s (token %llu): %s", name, o->desc,
                 (unsigned long long)token, reason);
        t->stats.lost++;
    } else {
        log_debug("lock %s: %s ended (token %llu): %s", name, o->desc,
                  (unsigned long long)token, reason);
    }
    hold_log_end(h, lost ? HOLD_END_LOST : HOLD_END_ENDED, reason);
    hold_unlink(h);
    lock_settle(l, NULL, NULL, NULL);
    o->ops->lost(o, name, token, reason);
}

void locks_backend_lost(struct hold *h, const char *reason)
{
    backend_ended(h, reason, true);
}

void locks_backend_ended(struct hold *h, const char *reason)
{
    backend_ended(h, reason, false);
}
