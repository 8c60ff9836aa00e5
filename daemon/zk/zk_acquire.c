/*
 * zk_acquire.c - distributed mode, top layer: the backend's operations for
 * acquisitions (acquire, reassign, cancel and release; pass_on is
 * zk_handoff.c's), and what each change of the session means for them.
 *
 * zl_start() decides every zlock's next request, whatever happened
 * before: the node machinery (zk_node.h) runs it through its `next` hook, and
 * the session's `serving` and `resume` run it for every parked zlock.
 */
#include "config.h"
#include "zk_recipes.h"

#include <event2/event.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#include "log.h"

static void zl_start(struct zlock *zl);

static void on_keep_over(evutil_socket_t fd, short what, void *arg)
{
    zl_start(arg);
}

/*
 * A hold presumed lost (locks_drop_held) may have been told, by CHECK, that
 * nobody else gets the name before confirmed_at + T: its node, which alone
 * keeps the other daemons' requests waiting, stays until then, even when
 * ZooKeeper answers again sooner (PROTOCOL.md, Pushed lines). True while it
 * waits.
 */
static bool zl_kept_for_window(struct zlock *zl)
{
    int64_t left = zl->keep_until_ms - locks_mono_ms();
    struct timeval tv;

    if (left <= 0 || zl->hold || !zl->node)
        return false;
    if (!zl->keep_timer && !(zl->keep_timer = evtimer_new(zl->zk->base, on_keep_over, zl)))
        return false;        /* cannot wait: the window may be cut short */
    tv.tv_sec = left / 1000;
    tv.tv_usec = (left % 1000) * 1000;
    evtimer_add(zl->keep_timer, &tv);
    return true;
}

/* Decides the next request from what is known, whatever happened before. */
static void zl_start(struct zlock *zl)
{
    struct zk *zk = zl->zk;

    zl->step = ZL_IDLE;
    if (zl_kept_for_window(zl))
        return;
    /* Nothing is granted unless the session is vouched for (zk_may_grant):
     * a request waits, keeping its node and so its place; a try is
     * answered ERR UNAVAILABLE, as /healthz says, unless it may wait (the
     * agreement check, a handover's successor attaching). A node whose
     * request left may still go. */
    if (!zk_may_grant(zk)) {
        if (!zk_waits(zk))
            zl_try_unavailable(zl);
        if (zl->hold || !zk_serving(zk) || zl->lease || zl->nonfair || !zl->node) {
            if (!zl->hold && !zl->node && !zl->create_uncertain)
                zl_free(zl);     /* nothing of it in ZooKeeper */
            return;
        }
        zl_delete(zl);
        return;
    }
    if (zl->lease) {
        zl_lease_start(zl);
        return;
    }
    if (zl->nonfair) {
        zl_nonfair_start(zl);
        return;
    }
    if (zl->node) {
        if (zl->data_stale && zl->hold)
            zl_write_data(zl);   /* a handover while disconnected */
        if (zl->hold && zl->awaiting_token) {
            zl_check_turn(zl);   /* passed on at the end of a turn: look again */
        } else if (zl->hold) {
            zl_list(zl);
        }
        else
            zl_delete(zl);
    } else if (zl->create_uncertain) {
        zl_find_lost_create(zl);
    } else if (zl->hold) {
        zl_fair_create(zl);
    } else {
        zl_free(zl);
    }
}

/* ------------------------------------------------------- backend calls */

enum locks_result zk_lock_acquire(void *impl, struct hold *h, uint64_t *token)
{
    struct zk *zk = impl;
    enum interop_profile profile;
    struct zlock *zl;
    char parent[512];

    /* A try cannot be answered without a session vouched for: say so now,
     * unless it may wait (zk_waits). */
    if (hold_try(h) && !zk_may_grant(zk) && !zk_waits(zk))
        return LOCKS_UNAVAILABLE;
    /* Another daemon takes other names non-fair: nothing is taken here
     * until a restart (zk_presence.c). */
    if (zk->nonfair_disagrees)
        return LOCKS_UNAVAILABLE;
    if (settings_globs_match(zk->settings->zk_nonfair, hold_name(h))) {
        /* zk_nonfair.c: the node itself, flat under <root>/nonfair */
        snprintf(parent, sizeof(parent), "%s/nonfair/%s", zk->root, hold_name(h));
        if (!(zl = zl_new(zk, h, parent)))
            return LOCKS_UNAVAILABLE;
        zl->nonfair = true;
        zl_start(zl);
        return LOCKS_WAITING;
    }
    if ((profile = zk_interop_parent(zk, hold_name(h), parent, sizeof(parent)))) {
        /* The rule's path, where the foreign recipe's clients queue too;
         * never an idle node (zk_handoff.c). */
        if (!(zl = zl_new(zk, h, parent)))
            return LOCKS_UNAVAILABLE;
        zl->interop = profile;
        zl_start(zl);
        return LOCKS_WAITING;
    }
    snprintf(parent, sizeof(parent), "%s/locks/%s", zk->root, hold_name(h));
    if (zk_vouched(zk) && (zl = zl_idle_find(zk, parent))) {
        if (zl_idle_adopt(zl, h, token))
            return LOCKS_GRANTED;
        zl_idle_drop(zl);    /* it goes first; ours queues behind it */
    }
    /* Nothing would ever retry: fail the request rather than let it hang. */
    if (!(zl = zl_new(zk, h, parent)))
        return LOCKS_UNAVAILABLE;
    /* Answers come from completions, never from here: a failed send only
     * parks the zlock for the retry timer. */
    zl_start(zl);
    return LOCKS_WAITING;
}

bool zk_lock_refuses(void *impl, const char *name, const struct lock_req *req)
{
    struct zk *zk = impl;

    return settings_globs_match(zk->settings->zk_nonfair, name) &&
           (req->mode != LOCK_EXCLUSIVE || req->ttl_ms > 0 ||
            (req->delay_ms > 0 && !req->delay_default));
}

const char *zk_lock_recipe(void *impl, const char *name)
{
    struct zk *zk = impl;

    const struct interop_rule *rule;

    if (settings_globs_match(zk->settings->zk_nonfair, name))
        return "nonfair";
    /* An [interop] name: its profile, "curator", "kazoo" or "curator-rw". */
    rule = interop_match(&zk->settings->interop, name);
    return rule ? interop_profile_name(rule->profile) : NULL;
}

/* The acquisition now serves h (the table moved it into h's slot). */
void zk_lock_reassign(void *impl, struct hold *h)
{
    struct zlock *zl = hold_backend_data(h);

    if (!zl)
        return;
    zl->hold = h;
    /* The node's data names the owner that left; STATUS on every daemon
     * reads it. Rewritten now, or once the node is known. */
    zl->data_stale = true;
    zl_write_data(zl);
}

/* cancel and release: the table is done with the request; take our node back. */
void zk_lock_let_go(void *impl, struct hold *h)
{
    struct zlock *zl = hold_backend_data(h);

    if (!zl)
        return;
    zl_detach(zl);
    if (zl_idle_begin(zl))
        return;              /* kept for a while: see "idle nodes" */
    if (zl->nonfair && zl->step == ZL_WATCHING) {
        zl_nonfair_let_go(zl);
        return;
    }
    switch (zl->step) {
    case ZL_DELAYING:
        evtimer_del(zl->delay_timer);
        /* fall through */
    case ZL_HELD:
    case ZL_WATCHING:
    case ZL_LEASED:
        zl_delete_when_connected(zl);   /* the pending watch is stale either way */
        break;
    case ZL_IDLE:
        zl_start(zl);        /* deletes or frees now, or once connected */
        break;
    default:
        break;               /* the reply in flight sees hold == NULL */
    }
}

/* ------------------------------------------------ what the session tells */

/* The session's `serving` and `resume`: restarts every request that waits
 * for the connection or a retry (nothing while zk->barrier is set). */
static void locks_resume(void *arg)
{
    struct zk *zk = arg;
    struct zlock *zl, *next;

    if (zk->barrier)
        return;
    for (zl = TAILQ_FIRST(&zk->nodes->zlocks); zl; zl = next) {
        next = TAILQ_NEXT(zl, link);
        if (zl->step == ZL_IDLE)
            zl_start(zl);
    }
}

/* `stale_reads`: the event loop stalled, replies to reads in flight may
 * be stale. Makes them ignored and their requests wait for a resume. */
static void locks_forget_reads(void *arg)
{
    struct zk *zk = arg;
    struct zlock *zl;

    /* Writes stay in flight: their outcome says where our nodes are. A
     * listing sent behind a create is not believed: on_created lists again. */
    TAILQ_FOREACH(zl, &zk->nodes->zlocks, link)
        if (zl->step == ZL_LISTING || zl->step == ZL_WATCHING || zl->step == ZL_CHECKING ||
            zl->step == ZL_LEASED) {
            zl->gen++;
            zl->step = ZL_IDLE;
        } else if (zl->step == ZL_CREATING) {
            zl->listing_sent = false;
        }
}

/*
 * `lost`: every held lock is given up with reason; the waiters keep
 * waiting. A hold kept after its owner let go (UNLOCK keep=, a lock-delay)
 * is nobody's: nobody is told, and nothing is granted while the session is
 * not vouched for (zk_may_grant), so it stays, its node with it, until its
 * time is over, or the session is known to have ended (expired): then its
 * node went with it (PROTOCOL.md, keep=). A try that waited for a
 * handover's successor to attach is answered now.
 */
static void locks_drop_held(void *arg, const char *reason)
{
    struct zk *zk = arg;
    struct zlock *zl, *next;
    bool session_ended = zk->state == ZK_EXPIRED;

    for (zl = TAILQ_FIRST(&zk->nodes->zlocks); zl; zl = next) {
        next = TAILQ_NEXT(zl, link);
        if (zl->step == ZL_IDLE && zl->try && zl->hold && !zk_waits(zk)) {
            zl_try_unavailable(zl);
            zl_start(zl);                /* deletes or frees, or once connected */
        } else if (zl->step == ZL_HELD && zl->hold && !zl->awaiting_token &&
                   (session_ended || !hold_kept(zl->hold))) {
            struct hold *h = zl_detach(zl);
            zl->step = ZL_IDLE;          /* node deleted once connected, if it survived, */
            zl->keep_until_ms = zk_presence_window_end_ms(zk);   /* not sooner than this */
            locks_backend_lost(h, reason);
        } else if (zl->idle) {
            zl_idle_drop(zl);            /* not trusted any more either */
        }
    }
}

/* `closed`: the handle was closed. session_gone: with its session, so
 * every node went with it; otherwise the session lives on and only
 * watches are gone. */
static void locks_handle_closed(void *arg, bool session_gone)
{
    struct zk *zk = arg;
    struct zlock *zl, *next;

    zl_free_watches(zk);
    for (zl = TAILQ_FIRST(&zk->nodes->zlocks); zl; zl = next) {
        next = TAILQ_NEXT(zl, link);
        zl->child_watched = false;   /* watches belonged to the old handle */
        if (!session_gone) {
            /* Look again once connected; an idle node goes then. */
            if (zl->step == ZL_WATCHING || zl->step == ZL_LEASED) {
                zl->gen++;
                zl->step = ZL_IDLE;
            } else if (zl->idle) {
                zl_idle_end(zl);
                zl->gen++;
                zl->step = ZL_IDLE;   /* zl_start deletes it once connected */
            }
            continue;
        }
        zl->gen++;
        if (zl->lease) {
            /* A lease node is persistent: it is still there (or its create
             * may have gone through). Look again once connected. */
            zl->step = ZL_IDLE;
            continue;
        }
        /* Forget nodes (they went with the session); waiters will queue again. */
        zl_node_gone(zl);
        zl->create_uncertain = false;
        zl->create_attempts = 0;
        if (!zl->hold) {         /* includes the holds dropped at expiry */
            zl_free(zl);
        } else if (zl->try) {
            struct hold *h = zl_detach(zl);
            zl_free(zl);
            locks_backend_refused(h, LOCKS_UNAVAILABLE);
        } else {
            zl->step = ZL_IDLE;
        }
    }
}

void zk_locks_free_all(struct zk *zk)
{
    struct zlock *zl;

    if (!zk->nodes)
        return;
    zl_free_watches(zk);
    while ((zl = TAILQ_FIRST(&zk->nodes->zlocks)))
        zl_free(zl);
    zl_parents_forget_all(zk);
    zl_nodes_free(zk);
}

/* ------------------------------------------- what the node machinery tells */

/* The node is going: an idle node's keep ends. */
static void zl_node_going(struct zlock *zl)
{
    zl_idle_end(zl);
}

static void zl_freeing(struct zlock *zl)
{
    zl_lease_freeing(zl);
    zl_idle_end(zl);
}

int zk_locks_init(struct zk *zk)
{
    static const struct zl_hooks hooks = {
        .next = zl_start,
        .node_going = zl_node_going,
        .freeing = zl_freeing,
    };
    static const struct zk_listener listener = {
        .serving = locks_resume,
        .resume = locks_resume,
        .lost = locks_drop_held,
        .stale_reads = locks_forget_reads,
        .closed = locks_handle_closed,
    };

    if (zl_nodes_init(zk, &hooks) < 0)
        return -1;
    return zk_session_listen(zk, &listener, zk);
}
