/*
 * zk_fair.c - distributed mode, a recipe: the fair queue.
 *
 * The node whose 10-digit suffix is lowest holds the lock (shared and
 * semaphore requests: as many as may hold together); every other node
 * watches (with a data watch, which a vanished node cannot leave behind)
 * only the node just before it, or for a semaphore's first waiter, the
 * parent's children. The fencing token is made (ztoken.h) from the
 * parent's pzxid in the getChildren reply that showed our node first.
 *
 * The getChildren that confirms a new node is sent right behind the multi
 * that creates it (zl_fair_create), without waiting for its reply:
 * ZooKeeper answers one session's requests in order, so it sees the node,
 * and an uncontended grant costs one round trip. Nothing is written to
 * the parent, on a name's first use either: its data may be a recipe's.
 *
 * A request for a lease queues here like any other; once it may hold,
 * zk_lease_lock.c takes over (zl_convert).
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
#include "zk_view.h"

static void on_listed(int rc, const struct String_vector *children, const struct Stat *stat,
                      const void *data);

static void zl_list_watching(struct zlock *zl);

static const char *basename_of(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

/* The multi carrying our create was sent: list the parent right behind it. */
static void on_create_sent(const void *data)
{
    const struct zcall *cc = data;
    struct zlock *zl = zl_find(cc->zk, cc->id);
    struct zcall *c;

    if (!zl || zl->gen != cc->gen || zl->step != ZL_CREATING || zl->lease || !zl->hold)
        return;
    /* Sent again after another write of a multi failed: the listing
     * behind the earlier attempt is answered before this multi is, while
     * the create is not known to be done, and on_listed ignores it. */
    zl->listing_sent = false;
    if (!(c = zcall_also(zl)))
        return;              /* on_created lists instead */
    if (zoo_aget_children2(zl->zk->zh, zl->parent, 0, on_listed, c) != ZOK) {
        free(c);
        return;
    }
    zl->zk->outstanding++;
    zl->listing_sent = true;
}

/* Creates zl's node and lists the parent right behind it. */
void zl_fair_create(struct zlock *zl)
{
    zl_create(zl, on_create_sent);
}

/* ------------------------------------------------------- list and watch */

/*
 * Lock-delay across daemons (PROTOCOL.md, Lock-delay). A node whose request
 * has a lock-delay says so in its name (".d<ms>"). When such a node we
 * wait behind vanishes, its daemon either deleted it (a release, or the
 * end of a lock-delay it kept itself) or its session ended. ZooKeeper
 * deletes a session's ephemeral nodes in one transaction, its session
 * node (zk_presence.c) among them: if that node is gone too, the holder
 * did not release, and nobody here goes ahead before the delay has passed
 * since we saw it go. An answer we cannot read counts as gone.
 */
static void on_delay_over(evutil_socket_t fd, short what, void *arg)
{
    struct zlock *zl = arg;

    if (zl->step != ZL_DELAYING)
        return;
    log_info("zk: lock-delay before %s is over", zl->parent);
    zl->step = ZL_IDLE;
    if (zl->zk->state == ZK_CONNECTED || !zl->hold)
        zl_next(zl);         /* lists again, or deletes a node nobody wants */
}

/* Arms the delay's timer for what is left of it. false: out of memory. */
static bool zl_arm_delay(struct zlock *zl)
{
    int64_t left = zl->delay_until_ms - locks_mono_ms();
    struct timeval tv;

    if (!zl->delay_timer && !(zl->delay_timer = evtimer_new(zl->zk->base, on_delay_over, zl)))
        return false;
    left = left < 0 ? 0 : left;
    tv.tv_sec = left / 1000;
    tv.tv_usec = (left % 1000) * 1000;
    evtimer_add(zl->delay_timer, &tv);
    return true;
}

bool zl_resume_delay(struct zlock *zl)
{
    return zl->step == ZL_DELAYING && zl_arm_delay(zl);
}

static void zl_begin_delay(struct zlock *zl)
{
    /* The ms after: a carried delay (handover) never ends sooner. */
    zl->delay_until_ms = locks_mono_ms() + zl->pred_delay_ms + 1;
    if (!zl_arm_delay(zl)) {
        zl_list(zl);         /* out of memory: cannot wait, a fencing token still orders */
        return;
    }
    zl->gen++;               /* nothing in flight is ours any more */
    zl->step = ZL_DELAYING;
    zl->zk->session_delays++;
    log_info("zk: the holder before %s in %s ended with its daemon's session, without a "
             "release: waiting its lock-delay of %lld ms", zl->node, zl->parent,
             (long long)zl->pred_delay_ms);
}

static void on_session_asked(int rc, const struct Stat *stat, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl || zl->step != ZL_ASKING)
        return;
    if (!zl->hold) {
        zl_next(zl);
        return;
    }
    if (rc == ZOK)
        zl_list(zl);         /* its session lives: it was released */
    else
        zl_begin_delay(zl);
}

static void zl_ask_session(struct zlock *zl, const char *pred_path)
{
    struct zk *zk = zl->zk;
    char path[512];
    struct zcall *c;

    /* Our own session deleted it: a release (kept for its delay if abandoned). */
    if (zl->pred_session == zk->session_id) {
        zl_list(zl);
        return;
    }
    if (!zl->pred_session) {     /* never read: a node that is not ephemeral */
        zl_list(zl);
        return;
    }
    if (!(c = zl_begin(zl, ZL_ASKING)))
        return;
    zk_session_path(zk, zl->pred_session, path, sizeof(path));
    log_debug("zk: %s (lock-delay %lld ms) is gone; is %s?", pred_path,
              (long long)zl->pred_delay_ms, path);
    zk_sent(zl, c, zoo_aexists(zk->zh, path, 0, on_session_asked, c), "exists");
}

static void on_watch_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    unsigned gen;
    struct zlock *zl = watch_fired(ctx, type, &gen);

    if (zl && zl->gen == gen && zl->step == ZL_WATCHING && type == ZOO_DELETED_EVENT &&
        zl->pred_delay_ms > 0) {
        zl_ask_session(zl, path);   /* released, or did its session end? */
    } else if (zl && zl->gen == gen && zl->step == ZL_WATCHING) {
        log_debug("zk: %s changed; %s looks again", path, zl->node);
        /* A semaphore's waiter may be first now: that listing must watch. */
        if (zl->mode == LOCK_LIMIT)
            zl_list_watching(zl);
        else
            zl_list(zl);
    }
}

static void on_predecessor_read(int rc, const char *value, int len, const struct Stat *stat,
                                const void *data)
{
    struct zlock *zl = zcall_done_watched(data, rc);

    if (!zl)
        return;
    if (rc == ZOK) {
        zl->pred_session = stat->ephemeralOwner;
        return;              /* watching; on_watch_event continues */
    }
    if (rc == ZNONODE) {
        zl_list(zl);         /* the predecessor went before we could watch it */
        return;
    }
    zl_park(zl, rc);
}

static void zl_watch(struct zlock *zl, const char *predecessor)
{
    struct zk *zk = zl->zk;
    char path[512];
    struct zcall *c = zl_begin_watched(zl, ZL_WATCHING);

    if (!c)
        return;
    snprintf(path, sizeof(path), "%s/%s", zl->parent, predecessor);
    log_debug("zk: %s waits for %s", zl->node, path);
    zl->pred_delay_ms = zk_kind_of(predecessor).delay_ms;
    zl->pred_session = 0;
    zl_sent_watched(zl, c, zoo_awget(zk->zh, path, on_watch_event, c->watch,
                                     on_predecessor_read, c), "getData");
}

/*
 * Reads one listing of the parent (zk_view.c). Every lease node seen but
 * ours is handed to the janitor (zk_lease.c).
 */
static void zl_view(const struct zlock *zl, const struct String_vector *children,
                    struct zview *v)
{
    const char *mine = basename_of(zl->node);
    char path[512];

    zk_view_of(children, mine, zl->mode, zl->limit, v);
    if (!v->lease)
        return;              /* no lease node, or only ours */
    for (int i = 0; i < children->count; i++) {
        const char *child = children->data[i];

        if (zk_kind_of(child).lease && strcmp(child, mine) != 0) {
            snprintf(path, sizeof(path), "%s/%s", zl->parent, child);
            zk_lease_track(zl->zk, path);
        }
    }
}

/* Waits for the one change that can let us in (zk_view_waits_for). */
static void zl_wait(struct zlock *zl, const struct zview *v, bool children_watched)
{
    const char *node = zk_view_waits_for(zl->mode, zl->limit, v);

    if (!node) {
        /* Any holder's departure may let us in. The listing that showed
         * this must itself have set the watch, or a departure between the
         * two would go unnoticed. */
        if (children_watched) {
            zl->step = ZL_WATCHING;
            log_debug("zk: %s waits for one of %u holders", zl->node, zl->limit);
        } else {
            zl_list_watching(zl);
        }
        return;
    }
    zl_watch(zl, node);
}

/* What one view of the parent with our node in it means for zl: hold,
 * refuse, or wait. pzxid: the parent's, as the view was taken. */
static void zl_decide(struct zlock *zl, const struct zview *v, int64_t pzxid,
                      bool children_watched)
{
    struct hold *h;

    if (!zl->hold) {
        zl_delete(zl);
        return;
    }
    if (v->first_other_class) {    /* another daemon uses the name in another mode */
        h = zl_detach(zl);
        zl_delete(zl);
        locks_backend_refused(h, LOCKS_CONFLICT);
        return;
    }
    if (zk_view_may_hold(zl->mode, zl->limit, v) && zl->ttl_ms > 0) {
        zl_convert(zl);      /* a lease: a persistent node takes over from ours */
        return;
    }
    if (zk_view_may_hold(zl->mode, zl->limit, v)) {
        if (zl_grant_held_back(zl) || !zl_take_token(zl, pzxid))
            return;
        zl->step = ZL_HELD;
        zl->create_attempts = 0;
        zl->handoffs = 0;
        log_debug("zk: %s holds %s, token %llu", zl->node, zl->parent,
                  (unsigned long long)zl->token);
        /* The token goes into our node's data, for STATUS, HOLDERS and
         * WATCH on every daemon: a write nothing waits for, put off in
         * case the hold ends first. Not for a semaphore with waiters
         * after ours: the one after it may have seen this node waiting
         * and watch it, and the write tells it that it may be first now.
         * Whoever lists after this listing sees this node holding. */
        if (zl->mode == LOCK_LIMIT && v->after > 0)
            zl_write_data(zl);
        else
            zl_write_token(zl);
        locks_backend_granted(zl->hold, zl->token);
        return;
    }
    if (zl->try) {           /* not first: give the place back, answer busy */
        h = zl_detach(zl);
        zl_delete(zl);
        locks_backend_refused(h, LOCKS_BUSY);
        return;
    }
    zl_wait(zl, v, children_watched);
}

static void on_listed(int rc, const struct String_vector *children, const struct Stat *stat,
                      const void *data)
{
    /* A listing that set a child watch (zl_list_watching) succeeded. */
    bool children_watched = rc == ZOK && ((const struct zcall *)data)->watch;
    struct zlock *zl = zcall_done_watched(data, rc);
    struct zview v;

    /* A listing sent behind a create that failed or is sent again: the
     * create's own reply decides (on_created). */
    if (!zl || zl->step != ZL_LISTING)
        return;
    if (rc == ZNONODE) {     /* the parent, and so our node, is gone */
        zl_node_gone(zl);
        zl_next(zl);
        return;
    }
    if (rc != ZOK) {
        zl_park(zl, rc);
        return;
    }
    zl_view(zl, children, &v);
    if (!v.found) {          /* our node vanished (session trouble): start over */
        log_warn("zk: %s is gone; creating a new node", zl->node);
        zl_node_gone(zl);
        zl_next(zl);
        return;
    }
    zl_decide(zl, &v, stat->pzxid, children_watched);
}

void zl_list(struct zlock *zl)
{
    struct zcall *c = zl_begin(zl, ZL_LISTING);

    if (c)
        zk_sent(zl, c, zoo_aget_children2(zl->zk->zh, zl->parent, 0, on_listed, c),
                "getChildren");
}

/* Lists with a child watch; on_listed decides whether to keep waiting on it. */
static void zl_list_watching(struct zlock *zl)
{
    struct zcall *c = zl_begin_watched(zl, ZL_LISTING);

    if (c)
        zl_sent_watched(zl, c, zoo_awget_children2(zl->zk->zh, zl->parent, on_watch_event,
                                                   c->watch, on_listed, c), "getChildren");
}
