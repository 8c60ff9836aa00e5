/*
 * zk_handoff.c - distributed mode, beside the recipes: local handoff and idle
 * nodes, which spare ZooKeeper a round trip when the next holder of a lock
 * is a client of this daemon.
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
#include "settings.h"
#include "ztoken.h"

/* --------------------------------------------------------- local handoff */

/*
 * A holder releases and the next waiter is a client of this daemon: our
 * node stays first in line and the lock passes on, at most local_handoff
 * times in a row; then the node goes back to the queue (below). The new
 * holder's token is the last one plus 1 (ztoken.h): the last one was made
 * from a zxid read or written after our node became first, and any later
 * holder elsewhere is granted after our node's delete, whose zxid is
 * greater, so its token exceeds ours by at least 2^8 - local_handoff. A
 * handoff writes nothing to ZooKeeper but the new owner's name and token,
 * for STATUS elsewhere, and that write is not waited for.
 */

/* Grants the holder waiting at a turn's end the token of zxid, passed on. */
static void zl_grant_turn(struct zlock *zl, int64_t zxid)
{
    if (zl_grant_held_back(zl))
        return;              /* the turn is checked again once it may */
    zl->awaiting_token = false;
    zl->handoffs = 0;
    if (!zl_take_token(zl, zxid))
        return;
    log_debug("zk: %s passed on, new turn, token %llu", zl->node,
              (unsigned long long)zl->token);
    zl_write_token(zl);      /* its token, for STATUS elsewhere, put off */
    locks_backend_granted(zl->hold, zl->token);
}

/* The turn's setData: its mzxid is the new turn's zxid. */
static void on_turn_written(int rc, const struct Stat *stat, const void *data)
{
    struct zlock *zl = nodecall_done((struct nodecall *)data);

    if (!zl)
        return;
    zl->data_writing = false;
    if (zl->zk->state == ZK_EXPIRED || !zl->awaiting_token || zl->step != ZL_HELD)
        return;
    if (rc != ZOK) {
        /* Node gone with the session, or no connection: the waiting holder
         * queues again, or the turn is looked at again, once connected. */
        if (rc == ZNONODE || rc == ZSESSIONEXPIRED)
            zl_node_gone(zl);
        zl_park(zl, rc);
        return;
    }
    if (!zl->hold) {
        zl->awaiting_token = false;
        zl_delete(zl);
        return;
    }
    zl_grant_turn(zl, stat->mzxid);
}

/*
 * The turn's handoffs are used up: if another daemon's node waits, ours
 * goes (delete) and the waiting holder queues again with a new node behind
 * it; if ours is the only node, nobody waits elsewhere and a new turn
 * begins with the zxid of a write to our node (which also names the new
 * owner): the parent's pzxid has not moved since our node became first.
 */
static void on_turn_checked(int rc, const struct String_vector *children, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl)
        return;
    if (rc != ZOK) {
        zl_park(zl, rc);     /* zl_start looks again once connected */
        return;
    }
    zl->step = ZL_HELD;
    if (!zl->hold || children->count != 1) {
        zl->awaiting_token = false;
        zl_delete(zl);       /* then zl_start queues the holder again, if any */
        return;
    }
    /* The data write's completion (on_turn_written) stands for any other
     * in flight: it is queued and sent after them, and answered after them.
     * It may share a multi with other writes: its zxid is still one that
     * no earlier token of the name was made from. */
    if ((rc = zl_send_data(zl, on_turn_written)) != ZOK)
        zl_park(zl, rc);
}

void zl_check_turn(struct zlock *zl)
{
    struct zcall *c = zl_begin(zl, ZL_LISTING);

    if (c)
        zk_sent(zl, c, zoo_aget_children(zl->zk->zh, zl->parent, 0, on_turn_checked, c),
                "getChildren");
}

enum locks_result zk_lock_pass_on(void *impl, struct hold *from, struct hold *to,
                                  uint64_t *token)
{
    struct zk *zk = impl;
    struct zlock *zl = hold_backend_data(from);

    /* Not on an [interop] name: a foreign waiter queued behind our node
     * comes before our next one (PROTOCOL.md, "Sharing locks with
     * ZooKeeper recipes": FIFO by sequence). */
    if (!zl || zl->lease || zl->interop || zl->step != ZL_HELD || zl->awaiting_token ||
        !zk_vouched(zk) || !zk->settings->zk_local_handoff)
        return LOCKS_BUSY;
    /* A non-fair node has no turn to end: at the limit it goes, and the
     * next waiter races for it like any other daemon's. */
    if (zl->nonfair && zl->handoffs >= zk->settings->zk_local_handoff)
        return LOCKS_BUSY;
    hold_set_backend_data(from, NULL);
    zl->hold = to;
    hold_set_backend_data(to, zl);
    if (zl->handoffs >= zk->settings->zk_local_handoff) {
        zl->awaiting_token = true;
        zl_check_turn(zl);
        return LOCKS_WAITING;
    }
    /* local_handoff <= ZTOKEN_HANDOFFS_MAX: the low bits never carry. */
    zl->handoffs++;
    *token = ++zl->token;
    zl_write_data(zl);       /* who holds it now, for STATUS elsewhere */
    log_debug("zk: %s passed on, token %llu", zl->node, (unsigned long long)*token);
    return LOCKS_GRANTED;
}

/* ------------------------------------------------------------ idle nodes */

/*
 * A client releases an exclusive lock and nobody on this daemon waits for
 * it: rather than deleting our node at once, we keep it for keep_idle_ms,
 * first in line, its data saying that nobody holds it (STATUS reports the
 * lock free). A LOCK of that name on this daemon meanwhile takes the node
 * over as a local handoff would (the previous token plus 1, no ZooKeeper
 * round trip), within the same local_handoff budget. A child watch on the
 * parent tells us when another daemon queues: then, or when the keep is
 * over, the node goes as it would have at the release. So a client that
 * takes and releases the same lock in a loop pays nothing to ZooKeeper,
 * and a waiter on another daemon waits one watch notification longer.
 *
 * Not on a name's first use: a node whose parent this daemon did not know
 * when it created it (zl->first_use: the name was not taken through this
 * daemon among the last KNOWN_PARENTS names) goes at once. A program that
 * takes every name once (job ids) would pay the keep's data write, child
 * watch and late delete on every name and never take a node over; a name
 * taken again is known by then, and its next release keeps the node.
 */

/* Idle nodes kept at once, at most; the oldest goes first. */
#define IDLE_MAX 1024

static int by_parent(const void *a, const void *b)
{
    return strcmp(((const struct zlock *)a)->parent, ((const struct zlock *)b)->parent);
}

void zl_idle_end(struct zlock *zl)
{
    struct zk *zk = zl->zk;

    if (!zl->idle)
        return;
    zl->idle = false;
    tdelete(zl, &zk->idle->by_parent, by_parent);
    TAILQ_REMOVE(&zk->idle->idle, zl, idle_link);
    zk->idle->nidle--;
}

/* The idle node goes now, or once connected. */
void zl_idle_drop(struct zlock *zl)
{
    zl_idle_end(zl);
    zl_delete_when_connected(zl);
}

/* Another daemon may have queued for the name: stop keeping the node. */
static void zl_contended(struct zlock *zl)
{
    zl->contended = true;
    if (zl->idle) {
        log_debug("zk: %s is wanted elsewhere; deleting the idle node", zl->node);
        zl_idle_drop(zl);
    }
}

/* The child watch: its context is a zcall in zk->nodes->watches whose gen
 * holds the epoch of the node it was set for. */
static void on_idle_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    unsigned epoch;
    struct zlock *zl = watch_fired(ctx, type, &epoch);

    if (zl && zl->epoch == epoch) {
        zl->child_watched = false;
        zl_contended(zl);
    }
}

static void on_idle_listed(int rc, const struct String_vector *children, const void *data)
{
    struct zcall *c = (struct zcall *)data;
    struct zk *zk = c->zk;
    struct zlock *zl = zl_find(zk, c->id);
    bool current = zl && zl->epoch == c->gen;

    zk->outstanding--;
    if (rc != ZOK)
        watch_forget(zk, c->watch);   /* no watch was set */
    free(c);
    if (!current)
        return;
    if (rc != ZOK) {
        zl->child_watched = false;
        zl_contended(zl);    /* cannot tell: as if contended */
    } else if (children->count > 1) {
        zl_contended(zl);
    }
}

/* Sets a child watch on zl's parent, and looks whether others queue already. */
static void zl_watch_children(struct zlock *zl)
{
    struct zk *zk = zl->zk;
    struct zcall *w = malloc(sizeof(*w)), *c = malloc(sizeof(*c));

    if (!w || !c) {
        free(w);
        free(c);
        zl_contended(zl);
        return;
    }
    *c = (struct zcall){ .zk = zk, .id = zl->id, .gen = zl->epoch, .watch = w };
    *w = (struct zcall){ .zk = zk, .id = zl->id, .gen = zl->epoch };
    TAILQ_INSERT_TAIL(&zk->nodes->watches, w, link);
    if (zoo_awget_children(zk->zh, zl->parent, on_idle_watch, w, on_idle_listed, c) != ZOK) {
        watch_forget(zk, w);
        free(c);
        zl_contended(zl);
        return;
    }
    zl->child_watched = true;
    zk->outstanding++;
    zk_kick(zk);
}

static void zk_idle_arm(struct zk *zk)
{
    struct zlock *zl = TAILQ_FIRST(&zk->idle->idle);

    if (zl)
        zl_timer_at(zk->idle->idle_timer, zl->idle_until_us);
}

static void zk_idle_expire(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    int64_t now = locks_mono_us();
    struct zlock *zl;

    while ((zl = TAILQ_FIRST(&zk->idle->idle)) && zl->idle_until_us <= now)
        zl_idle_drop(zl);
    zk_idle_arm(zk);
}

/* zl's holder released it and nobody here waits: keep the node? */
bool zl_idle_begin(struct zlock *zl)
{
    struct zk *zk = zl->zk;
    const struct settings *s = zk->settings;
    void *slot;

    /* Not for non-fair nodes: nothing would tell us that another daemon waits.
     * Not for [interop] ones: a foreign waiter would wait for it. */
    if (!s->zk_keep_idle_ms || zl->first_use || zl->handoffs >= s->zk_local_handoff ||
        zl->lease || zl->nonfair || zl->interop ||
        zl->mode != LOCK_EXCLUSIVE || zl->step != ZL_HELD || zl->awaiting_token ||
        zl->contended || !zl->node || zk->state != ZK_CONNECTED)
        return false;
    if (zk->idle->nidle >= IDLE_MAX)
        zl_idle_drop(TAILQ_FIRST(&zk->idle->idle));
    /* One node per name: another would be a second acquisition, not idle. */
    if (!(slot = tsearch(zl, &zk->idle->by_parent, by_parent)) || *(struct zlock **)slot != zl)
        return false;
    zl->idle = true;
    zl->idle_until_us = locks_mono_us() + (int64_t)s->zk_keep_idle_ms * 1000;
    TAILQ_INSERT_TAIL(&zk->idle->idle, zl, idle_link);
    zk->idle->nidle++;
    if (!evtimer_pending(zk->idle->idle_timer, NULL))
        zk_idle_arm(zk);
    zl_write_data(zl);       /* "client=-": STATUS anywhere says free */
    if (!zl->child_watched)
        zl_watch_children(zl);
    return true;
}

/* A LOCK of the name of an idle node: takes it over, or returns false (the
 * caller drops the node and queues as usual). */
bool zl_idle_adopt(struct zlock *zl, struct hold *h, uint64_t *token)
{
    struct zk *zk = zl->zk;

    if (hold_mode(h) != LOCK_EXCLUSIVE || hold_ttl_ms(h) > 0 || zl->contended ||
        hold_delay_ms(h) != zl->delay_ms ||
        zl->step != ZL_HELD || !zk_vouched(zk) ||
        zl->handoffs >= zk->settings->zk_local_handoff)
        return false;
    zl_idle_end(zl);
    zl->hold = h;
    zl->try = hold_try(h);
    hold_set_backend_data(h, zl);
    /* As a local handoff: local_handoff <= ZTOKEN_HANDOFFS_MAX, no carry. */
    zl->handoffs++;
    *token = ++zl->token;
    zk->idle->idle_reuses++;
    zl_write_data(zl);
    log_debug("zk: %s taken over while idle, token %llu", zl->node, (unsigned long long)*token);
    return true;
}

/* Looks up the idle node of a name (its parent path), or NULL. */
struct zlock *zl_idle_find(struct zk *zk, const char *parent)
{
    struct zlock key = { .parent = (char *)parent };
    void *found = tfind(&key, &zk->idle->by_parent, by_parent);

    return found ? *(struct zlock **)found : NULL;
}

int zk_idle_init(struct zk *zk)
{
    if (!(zk->idle = calloc(1, sizeof(*zk->idle))))
        return -1;
    TAILQ_INIT(&zk->idle->idle);
    zk->idle->idle_timer = evtimer_new(zk->base, zk_idle_expire, zk);
    return zk->idle->idle_timer ? 0 : -1;
}

void zk_idle_free(struct zk *zk)
{
    if (!zk->idle)
        return;
    if (zk->idle->idle_timer)
        event_free(zk->idle->idle_timer);
    free(zk->idle);
    zk->idle = NULL;
}
