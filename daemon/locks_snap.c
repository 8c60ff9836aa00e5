/*
 * locks_snap.c - the lock table's handover records (locks.h, "Handover"):
 * written by the daemon before, read back by its successor.
 */
#include "config.h"
#include "locks.h"
#include "locks_int.h"
#include "backend.h"
#include "restart.h"
#include "snap.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Handover (handover.h): the table as records. Each lock is a "lock"
 * record followed by one "hold" record per hold, admitted ones first in
 * their order, then the waiters in theirs; times are monotonic (the same
 * clock in the successor: same boot) or wall-clock, as they are kept.
 */
struct save_ctx {
    struct snap_w *w;
    const struct locks *t;
};

/* The field that names a hold's owner: "c12" (a connection), "l3" (a
 * lease: lock_owner_ops.restart_key), NULL (kept after its owner left). */
static void save_owner(struct snap_w *w, const struct lock_owner *o)
{
    char key[32], letter = '?';
    uint64_t n = 0;

    if (o->ops->restart_key)
        o->ops->restart_key(o, &letter, &n);
    snprintf(key, sizeof(key), "%c%llu", letter, (unsigned long long)n);
    snap_w_str(w, key);
}

static void save_hold(struct save_ctx *s, const struct hold *h)
{
    const struct backend *b = s->t->backend;
    struct snap_w *w = s->w;

    snap_w_rec(w, "hold");
    if (h->owner == &s->t->abandoned)
        snap_w_str(w, NULL);
    else
        save_owner(w, h->owner);
    snap_w_u64(w, h->state);
    snap_w_u64(w, h->mode);
    snap_w_u64(w, h->weight);
    snap_w_bool(w, h->try);
    snap_w_i64(w, h->ttl_ms);
    snap_w_i64(w, h->delay_ms);
    snap_w_i64(w, h->delay_end_ms);
    snap_w_i64(w, h->kept_ms);
    snap_w_bool(w, h->kept_by_release);
    snap_w_str(w, h->gone_desc);
    snap_w_str(w, h->gone_label);
    snap_w_u64(w, h->count);
    snap_w_u64(w, h->token);
    snap_w_i64(w, h->since_ms);
    snap_w_i64(w, h->asked_us);
    snap_w_i64(w, h->granted_us);
    /* A wait's deadline, queued here or already acquiring (distributed
     * mode: waiting in ZooKeeper's queue); a kept hold's end is its own. */
    snap_w_i64(w, h->timer && h->owner != &s->t->abandoned && h->state != HOLD_HELD
                  ? h->deadline_us : -1);
    if (b->ops->save_hold && h->state != HOLD_WAITING)
        b->ops->save_hold(b->impl, h, w);
    else
        snap_w_str(w, NULL);
}

static void save_lock(struct save_ctx *s, const struct lock *l)
{
    const struct hold *h;

    snap_w_rec(s->w, "lock");
    snap_w_str(s->w, l->name);
    snap_w_bool(s->w, l->semaphore);
    snap_w_u64(s->w, l->limit);
    TAILQ_FOREACH(h, &l->admitted, in_lock)
        save_hold(s, h);
    TAILQ_FOREACH(h, &l->waiters, in_lock)
        save_hold(s, h);
}

static void locks_save(void *data, struct snap_w *w)
{
    const struct locks *t = data;
    struct save_ctx s = { w, t };

    snap_w_rec(w, "locks");
    snap_w_u64(w, t->stats.grants);
    for (int m = 0; m < LOCK_MODE_COUNT; m++)
        snap_w_u64(w, t->stats.grants_by_mode[m]);
    snap_w_u64(w, t->stats.timeouts);
    snap_w_u64(w, t->stats.lost);
    snap_w_u64(w, t->stats.handoffs);
    snap_w_u64(w, t->stats.delays);
    snap_w_u64(w, t->stats.keeps);
    snap_w_u64(w, t->stats.broken);
    for (const struct name_node *n = name_tree_after(t->tree, NULL); n;
         n = name_tree_after(t->tree, n->name))
        save_lock(&s, lock_of_node(n));
}

/* A name's last hold was read: it has one at least. */
static bool restore_check(struct locks *t, struct snap_r *r)
{
    struct lock *l = t->restoring;

    if (l && lock_empty(l))
        return snap_r_fail(r, "lock %s has no hold", l->name);
    return true;
}

static bool restore_lock(void *data, struct snap_r *r, struct restart_in *in)
{
    struct locks *t = data;
    struct lock **out = &t->restoring;
    char name[NAME_COPY];
    struct lock_req req = { .mode = LOCK_EXCLUSIVE };
    bool semaphore;

    snap_r_str_copy(r, name, sizeof(name));
    semaphore = snap_r_bool(r);
    req.limit = (unsigned)snap_r_u64(r);
    if (!snap_r_done(r))
        return false;
    if (!restore_check(t, r))
        return false;
    if (!name[0])
        return snap_r_fail(r, "a lock without a name");
    if (semaphore) {
        if (req.limit < 1 || req.limit > LOCK_LIMIT_MAX)
            return snap_r_fail(r, "lock %s: limit %u", name, req.limit);
        req.mode = LOCK_LIMIT;
    }
    /* One search of the tree: lock_create refuses a name already there. */
    if (!(*out = lock_create(t, name, &req)))
        return snap_r_fail(r, "lock %s is there twice, or out of memory", name);
    return true;
}

/* Re-arms what h's timer did: the wait's deadline or the end of its keep. */
static bool restore_timer(struct locks *t, struct hold *h, int64_t deadline_us)
{
    int64_t left_us;
    struct timeval tv;

    /* delay_end_ms was rounded down to the ms: its end is the ms after, so
     * that the keep never ends sooner than it would have. */
    if (h->owner == &t->abandoned)
        left_us = (h->delay_end_ms + 1) * 1000 - locks_mono_us();
    else if (deadline_us >= 0)
        left_us = deadline_us - locks_mono_us();
    else
        return true;
    if (left_us < 0)
        left_us = 0;
    tv.tv_sec = left_us / 1000000;
    tv.tv_usec = left_us % 1000000;
    h->deadline_us = deadline_us;
    h->timer = evtimer_new(t->base, h->owner == &t->abandoned ? hold_on_delay_over : hold_on_wait_timeout,
                           h);
    return h->timer && evtimer_add(h->timer, &tv) == 0;
}

static bool restore_hold_fields(struct snap_r *r, struct hold *h, int64_t *deadline_us)
{
    const char *s;

    h->state = (enum hold_state)snap_r_u64(r);
    h->mode = (enum lock_mode)snap_r_u64(r);
    h->weight = (unsigned)snap_r_u64(r);
    h->try = snap_r_bool(r);
    h->ttl_ms = snap_r_i64(r);
    h->delay_ms = snap_r_i64(r);
    h->delay_end_ms = snap_r_i64(r);
    h->kept_ms = snap_r_i64(r);
    h->kept_by_release = snap_r_bool(r);
    if ((s = snap_r_str(r, NULL)) && !(h->gone_desc = strdup(s)))
        return snap_r_fail(r, "out of memory");
    if ((s = snap_r_str(r, NULL)) && !(h->gone_label = strdup(s)))
        return snap_r_fail(r, "out of memory");
    h->count = (uint32_t)snap_r_u64(r);
    h->token = snap_r_u64(r);
    h->since_ms = snap_r_i64(r);
    h->asked_us = snap_r_i64(r);
    h->granted_us = snap_r_i64(r);
    *deadline_us = snap_r_i64(r);
    return snap_r_ok(r);
}

/* The owner a hold record names (restart_find), or NULL: kept after its
 * owner left. false: r's error is set. */
static bool restore_owner(struct snap_r *r, struct restart_in *in, struct lock_owner **o)
{
    char key[32], *end;
    uint64_t n;

    *o = NULL;
    if (!snap_r_str_copy(r, key, sizeof(key)))
        return false;
    if (!key[0])
        return true;
    n = strtoull(key + 1, &end, 10);
    if (key[1] < '0' || key[1] > '9' || *end || !(*o = restart_find(in, key[0], n)))
        return snap_r_fail(r, "a hold names owner %s, which is not there", key);
    return true;
}

static bool restore_hold(void *data, struct snap_r *r, struct restart_in *in)
{
    struct locks *t = data;
    struct lock *l = t->restoring;
    const struct backend *b = t->backend;
    struct lock_owner *o;
    struct hold *h;
    int64_t deadline_us = -1;
    bool kept;

    if (!l)
        return snap_r_fail(r, "a hold before any lock");
    if (!restore_owner(r, in, &o))
        return false;
    kept = o == NULL;
    if (!(h = calloc(1, sizeof(*h))))
        return snap_r_fail(r, "out of memory");
    h->lock = l;
    h->owner = kept ? &t->abandoned : o;
    if (!restore_hold_fields(r, h, &deadline_us))
        goto fail;
    if (!l || (unsigned)h->state > HOLD_HELD || (unsigned)h->mode >= LOCK_MODE_COUNT ||
        h->weight != 1 || (h->mode == LOCK_LIMIT) != l->semaphore ||
        /* A hold kept after UNLOCK keep= was released: its count is 0. */
        (!kept && (h->state == HOLD_HELD) != (h->count > 0)) ||
        (kept && (h->state != HOLD_HELD || !h->gone_desc))) {
        snap_r_fail(r, "a hold of lock %s does not add up", l ? l->name : "?");
        goto fail;
    }
    if (h->state != HOLD_WAITING && b->ops->restore_hold) {
        if (!b->ops->restore_hold(b->impl, h, r))
            goto fail;
    } else if (snap_r_str(r, NULL) || !snap_r_ok(r)) {
        snap_r_fail(r, "a hold of lock %s carries what this backend does not keep", l->name);
        goto fail;
    }
    /* The snapshot names no account: a kept hold counts against the
     * daemon-wide cap only, one with a lock-delay against its owner's
     * (restored before its holds), never refused (PROTOCOL.md, "Quotas"). */
    if (!snap_r_done(r) || !restore_timer(t, h, deadline_us) ||
        ((kept || h->delay_ms > 0) && !hold_count_keepable(t, h, kept ? NULL : o->account))) {
        snap_r_fail(r, "out of memory");
        goto fail;
    }
    if (h->state == HOLD_WAITING) {
        TAILQ_INSERT_TAIL(&l->waiters, h, in_lock);
        l->nwaiters++;
        t->stats.waiting++;
    } else {
        TAILQ_INSERT_TAIL(&l->admitted, h, in_lock);
        l->nadmitted++;
        l->weight += h->weight;
        if (h->state == HOLD_HELD) {
            l->nheld++;
            t->stats.held++;
        } else {
            t->stats.waiting++;
        }
    }
    TAILQ_INSERT_TAIL(&h->owner->holds, h, in_owner);
    h->owner->nholds++;
    hold_age_append(t, h);          /* in name order: sorted by time once all are in */
    if (kept)
        t->stats.delayed++;
    return true;
fail:
    if (h->timer)
        event_free(h->timer);
    free(h->gone_desc);
    free(h->gone_label);
    free(h);
    return false;
}

static bool restore_stats(void *data, struct snap_r *r, struct restart_in *in)
{
    struct locks *t = data;

    t->stats.grants = snap_r_u64(r);
    for (int m = 0; m < LOCK_MODE_COUNT; m++)
        t->stats.grants_by_mode[m] = snap_r_u64(r);
    t->stats.timeouts = snap_r_u64(r);
    t->stats.lost = snap_r_u64(r);
    t->stats.handoffs = snap_r_u64(r);
    t->stats.delays = snap_r_u64(r);
    t->stats.keeps = snap_r_u64(r);
    t->stats.broken = snap_r_u64(r);
    return snap_r_done(r);
}

/* Every record read: the last name has a hold too. */
static bool restored(void *data, struct snap_r *r, struct restart_in *in)
{
    struct locks *t = data;
    bool ok = restore_check(t, r);

    t->restoring = NULL;
    if (ok && locks_sort_ages(t) < 0)
        ok = snap_r_fail(r, "out of memory");
    return ok;
}

const struct restart_part locks_restart_part = {
    .name = "lock table",
    .kinds = (const struct restart_kind[]){
        { "locks", restore_stats }, { "lock", restore_lock }, { "hold", restore_hold },
        { NULL } },
    .save = locks_save,
    .restored = restored,
};
