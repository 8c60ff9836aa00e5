/*
 * zk_lease_lock.c - distributed mode, a recipe: a granted request held as a
 * lease, on a persistent node. The fair queue hands a lease request over
 * once it may hold (zl_convert); the janitor (zk_lease.c) removes the node
 * once the lease expired, whoever made it.
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

/*
 * A lease must outlive this daemon's session, so it cannot be an ephemeral
 * node. A lease request queues like any other, with an ephemeral node; once
 * that node may hold, zl_convert() hands the hold to a new zlock that
 * creates a persistent lease node ("...<tag>.lease-<seq>", its deadline in
 * its data) and deletes the ephemeral node only once the lease node
 * exists. A lease node holds wherever it sits (zk_view.c), so nobody gets
 * in between. The token is made from the lease node's czxid: created after the
 * grant, it exceeds every earlier token, and a later grant happens after
 * its delete. The lease node is created once: if that create's outcome is
 * lost and the node is not found afterwards, the request fails rather
 * than create a lease that no longer follows a holding node.
 */

static void zl_lease_check(struct zlock *zl);

/* The ephemeral node that held for the conversion is no longer needed. */
static void zl_release_ephemeral(struct zlock *zl)
{
    struct zlock *eph = zl->ephemeral_id ? zl_find(zl->zk, zl->ephemeral_id) : NULL;

    zl->ephemeral_id = 0;
    if (eph && eph->step == ZL_CONVERTING)
        zl_next(eph);        /* detached: deletes its node */
}

void zl_convert(struct zlock *zl)
{
    struct hold *h = zl->hold;
    struct zlock *lz = zl_new(zl->zk, h, zl->parent);

    if (!lz) {               /* cannot track a lease: give the place back */
        zl_detach(zl);
        zl_delete(zl);
        locks_backend_refused(h, LOCKS_NOMEM);
        return;
    }
    lz->lease = true;
    lz->try = false;         /* decided: the ephemeral node may hold */
    lz->ephemeral_id = zl->id;
    zl->hold = NULL;         /* h's slot now holds lz */
    zl->step = ZL_CONVERTING;
    zl->gen++;
    log_debug("zk: %s holds %s for a lease", zl->node, zl->parent);
    zl_next(lz);
}

/* The lease node is gone, or could not be made: end the request. */
static void zl_lease_gone(struct zlock *zl, const char *why)
{
    struct hold *h = zl_detach(zl);
    bool granted = zl->granted;

    zl_node_gone(zl);
    zl_release_ephemeral(zl);
    zl_free(zl);
    if (h && granted)
        locks_backend_ended(h, why);   /* released or expired: what a lease does */
    else if (h)
        locks_backend_refused(h, LOCKS_UNAVAILABLE);
}

static void on_lease_read(int rc, const char *value, int len, const struct Stat *stat,
                          const void *data)
{
    struct zlock *zl = zcall_done_watched(data, rc);

    if (!zl)
        return;
    if (rc == ZNONODE) {     /* released through another daemon, or expired */
        log_debug("zk: lease %s is gone", zl->node);
        zl_lease_gone(zl, "lease-ended");
        return;
    }
    if (rc != ZOK) {
        zl_park(zl, rc);
        return;
    }
    zl->step = ZL_LEASED;    /* watching: a renewal or the node's end wakes us */
    zk_lease_track(zl->zk, zl->node);
    zl_release_ephemeral(zl);
    if (!zl->hold) {         /* its request left meanwhile */
        zl_delete(zl);
        return;
    }
    if (zl->hold && !zl->granted) {
        if (zl_grant_held_back(zl) || !zl_take_token(zl, stat->czxid))
            return;
        zl->granted = true;
        log_debug("zk: lease %s holds %s, token %llu", zl->node, zl->parent,
                  (unsigned long long)zl->token);
        locks_backend_granted(zl->hold, zl->token);
    }
}

static void on_lease_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    unsigned gen;
    struct zlock *zl = watch_fired(ctx, type, &gen);

    if (zl && zl->gen == gen && zl->step == ZL_LEASED)
        zl_lease_check(zl);  /* renewed, or gone */
}

/* Reads our lease node (its czxid makes the token) and watches it. */
static void zl_lease_check(struct zlock *zl)
{
    struct zcall *c = zl_begin_watched(zl, ZL_CHECKING);

    if (c)
        zl_sent_watched(zl, c, zoo_awget(zl->zk->zh, zl->node, on_lease_watch, c->watch,
                                         on_lease_read, c), "getData");
}

/* zl_start() (zk_acquire.c) for a lease zlock. */
void zl_lease_start(struct zlock *zl)
{
    if (zl->node) {
        if (zl->hold)
            zl_lease_check(zl);
        else
            zl_delete(zl);
    } else if (zl->create_uncertain) {
        zl_find_lost_create(zl);
    } else if (zl->hold && !zl->create_sent) {
        zl_create(zl, NULL);     /* nothing lists behind it */
    } else {
        zl_lease_gone(zl, "lease-ended");
    }
}

/* zl goes: the conversion this lease zlock was for holds nothing any more. */
void zl_lease_freeing(struct zlock *zl)
{
    struct zk *zk = zl->zk;

    if (zl->ephemeral_id) {
        struct zlock *eph = zl_find(zk, zl->ephemeral_id);
        if (eph && eph->step == ZL_CONVERTING) {
            eph->step = ZL_IDLE;
            zk_arm_retry(zk);
        }
    }
}
