/*
 * zk_nonfair.c - distributed mode, a recipe: non-fair names ([zookeeper]
 * nonfair; PROTOCOL.md, "Non-fair names").
 *
 * A non-fair name is held by one fixed EPHEMERAL node, <root>/nonfair/<name>:
 * whoever creates it holds it. The create goes out in a multi with a
 * setData of the same node tied to it (zk_batch.h, zk_batch_set_tied), whose
 * mzxid makes the fencing token: no read at all. The setData runs after our
 * create and before our delete, so its zxid lies between the previous
 * holder's and the next one's: tokens only go up. Its data says
 * "token=mzxid" (zk_node.c): other daemons make the token from the node's
 * mzxid as we do, with no write after the grant.
 *
 * A create that finds the node (ZNODEEXISTS) sets one exists watch on it;
 * the lock table admits only a name's first local waiter, so a daemon
 * keeps one watch per name however many of its clients wait. When the
 * node goes, the daemon creates it again: a race against the other
 * daemons' waiters (zk->nonfair_won / nonfair_lost).
 *
 * A create whose reply was lost is recognised by the node's ephemeral
 * owner: our session, and no zlock of ours has it.
 */
#include "config.h"
#include "zk_recipes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#include "log.h"

/* As zk_node.c's: ancestors re-created this often before the retry timer. */
#define NONFAIR_CREATE_ATTEMPTS 5

static void nf_watch(struct zlock *zl);
static void nf_take_token(struct zlock *zl);

/* Whether another zlock of ours has the node (holds it, or deletes it). */
static bool nf_owned_here(const struct zlock *zl)
{
    const struct zlock *o;

    TAILQ_FOREACH(o, &zl->zk->nodes->zlocks, link)
        if (o != zl && o->node && strcmp(o->node, zl->parent) == 0)
            return true;
    return false;
}

/* The setData tied to our create, or one sent alone after a lost reply:
 * its mzxid is the token. */
static void nf_on_set(int rc, const struct Stat *stat, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl || zl->step != ZL_CREATING || !zl->node)
        return;              /* stale, or the create failed (ZRUNTIMEINCONSISTENCY) */
    if (rc != ZOK) {
        zl_park(zl, rc);     /* zl_start sends the setData again, or deletes */
        return;
    }
    if (!zl->hold) {
        zl_next(zl);         /* nobody wants it any more: deleted */
        return;
    }
    if (zl->raced) {
        zl->raced = false;
        zl->zk->nonfair_won++;
    }
    if (zl_grant_held_back(zl) || !zl_take_token(zl, stat->mzxid))
        return;
    zl->step = ZL_HELD;
    zl->handoffs = 0;
    /* A write of our data sent after this one (a handover) took
     * "token=mzxid" away: write the token itself once it is answered. */
    if (zl->data_writing)
        zl->data_stale = true;
    log_debug("zk: %s held, token %llu", zl->node, (unsigned long long)zl->token);
    locks_backend_granted(zl->hold, zl->token);
}

/* Ancestors of the node, persistent: <root> and <root>/nonfair. */
static void on_nf_ancestor(int rc, const char *value, const void *data)
{
    struct zk *zk = (struct zk *)data;

    zk->outstanding--;
    if (rc != ZOK && rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZCLOSING &&
        rc != ZSESSIONEXPIRED && rc != ZOPERATIONTIMEOUT && rc != ZNOAUTH)
        log_warn("zk: creating %s/nonfair: %s", zk->root, zerror(rc));
}

static void nf_create_ancestors(struct zk *zk)
{
    char path[512];

    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s%s", zk->root, i ? "/nonfair" : "");
        if (zoo_acreate(zk->zh, path, NULL, -1, zk->acl, 0, on_nf_ancestor, zk) == ZOK)
            zk->outstanding++;
    }
}

static void nf_on_created(int rc, const char *value, const void *data)
{
    struct zlock *zl = zcall_done(data);
    struct hold *h;

    if (!zl)
        return;
    switch (rc) {
    case ZOK:
        zl->create_uncertain = false;
        zl->create_attempts = 0;
        if (!(zl->node = strdup(zl->parent))) {   /* the session's end removes it */
            log_error("zk: out of memory tracking %s", zl->parent);
            zl_try_unavailable(zl);
            zl->step = ZL_IDLE;
        } else if (!zl->listing_sent) {
            nf_take_token(zl);   /* no setData could be tied to the create */
        }
        break;               /* the tied setData's reply comes next: nf_on_set */
    case ZNODEEXISTS:
        zl->create_uncertain = false;
        zl->create_attempts = 0;
        if (zl->raced) {
            zl->raced = false;
            zl->zk->nonfair_lost++;
        }
        if (zl->hold && zl->try) {
            h = zl_detach(zl);
            zl->step = ZL_IDLE;
            zl_free(zl);
            locks_backend_refused(h, LOCKS_BUSY);
        } else if (zl->hold) {
            nf_watch(zl);
        } else {
            zl->step = ZL_IDLE;
            zl_next(zl);
        }
        break;
    default:
        /* <root>/nonfair is missing: made, then the create goes again. A
         * lost reply: nf_find looks for the node once connected. */
        if (zl_create_failed(zl, rc, NONFAIR_CREATE_ATTEMPTS)) {
            nf_create_ancestors(zl->zk);
            zl_next(zl);
        }
        break;
    }
}

/* Creates the node and, tied to it, sets its data: the token's zxid. */
static void nf_create(struct zlock *zl)
{
    struct zk *zk = zl->zk;
    char data[512];
    struct zcall *c = zl_begin(zl, ZL_CREATING), *s;
    int rc;

    if (!c)
        return;
    if (!(s = zcall_also(zl))) {
        free(c);
        zl->step = ZL_IDLE;
        zk_arm_retry(zk);
        return;
    }
    zl->data_stale = false;
    zl_format_data(zl, data, sizeof(data));
    zl->create_attempts++;
    rc = zk_batch_create(zk, zl->parent, data, (int)strlen(data), zk->acl, ZOO_EPHEMERAL,
                         nf_on_created, NULL, c);
    /* listing_sent: here, a setData rides behind the create. Its data says
     * that its own zxid is the token, so that every daemon sees the token
     * with the node, at no extra write. */
    zl->listing_sent = false;
    zl_format_token_data(zl, data, sizeof(data));
    if (rc == ZOK && zk_batch_set_tied(zk, zl->parent, data, (int)strlen(data), -1, nf_on_set,
                                       s) == ZOK) {
        zk->outstanding++;   /* the setData's; zk_sent counts the create's */
        zl->listing_sent = true;
    } else {
        free(s);             /* the create fails with ZRUNTIMEINCONSISTENCY, or never went */
    }
    zk_sent(zl, c, rc, "create");
}

/* A node of ours whose grant has no token yet (its reply was lost): a
 * setData alone gives one. */
static void nf_take_token(struct zlock *zl)
{
    struct zk *zk = zl->zk;
    char data[512];
    struct zcall *c = zl_begin(zl, ZL_CREATING);

    if (!c)
        return;
    zl_format_token_data(zl, data, sizeof(data));
    zk_sent(zl, c, zk_batch_set(zk, zl->node, data, (int)strlen(data), -1, nf_on_set, c),
            "setData");
}

/* --------------------------------------------------------------- waiting */

static void nf_on_watch_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    unsigned gen;
    struct zlock *zl = watch_fired(ctx, type, &gen);

    if (!zl || zl->gen != gen || zl->step != ZL_WATCHING)
        return;
    if (type == ZOO_DELETED_EVENT) {
        log_debug("zk: %s is gone; creating it", path);
        zl->raced = true;
        nf_create(zl);
    } else {
        nf_watch(zl);        /* its data changed (a handoff): watch on */
    }
}

static void nf_on_exists(int rc, const struct Stat *stat, const void *data)
{
    /* An exists watch is set on a missing node too: its context stays
     * registered (made stale below) until it fires or the handle goes. */
    struct zlock *zl = rc == ZNONODE ? zcall_done(data) : zcall_done_watched(data, rc);

    if (!zl)
        return;
    if (!zl->hold) {
        zl->gen++;
        zl->step = ZL_IDLE;
        zl_next(zl);
        return;
    }
    if (rc == ZNONODE) {
        zl->gen++;           /* that watch is stale */
        zl->raced = true;
        nf_create(zl);
        return;
    }
    if (rc != ZOK) {
        zl_park(zl, rc);
        return;
    }
    if (stat->ephemeralOwner == zl->zk->session_id && !nf_owned_here(zl)) {
        /* Ours, from a create whose reply was lost. */
        zl->gen++;
        if (!(zl->node = strdup(zl->parent))) {
            zl->step = ZL_IDLE;
            zk_arm_retry(zl->zk);
            return;
        }
        nf_take_token(zl);
        return;
    }
    log_debug("zk: %s is held; watching it", zl->parent);   /* nf_on_watch_event goes on */
}

/* One exists watch on the node, for this daemon's first local waiter. */
static void nf_watch(struct zlock *zl)
{
    struct zcall *c = zl_begin_watched(zl, ZL_WATCHING);

    if (c)
        zl_sent_watched(zl, c, zoo_awexists(zl->zk->zh, zl->parent, nf_on_watch_event,
                                            c->watch, nf_on_exists, c), "exists");
}

/* ------------------------------------------------- a lost create's node */

static void nf_on_found(int rc, const struct Stat *stat, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl)
        return;
    if (rc != ZOK && rc != ZNONODE) {
        zl_park(zl, rc);
        return;
    }
    zl->create_uncertain = false;
    if (rc == ZOK && stat->ephemeralOwner == zl->zk->session_id && !nf_owned_here(zl)) {
        if ((zl->node = strdup(zl->parent)))
            log_info("zk: found %s, whose create reply was lost", zl->node);
    }
    zl->step = ZL_IDLE;
    zl_next(zl);
}

static void nf_find(struct zlock *zl)
{
    struct zcall *c = zl_begin(zl, ZL_FINDING);

    if (c)
        zk_sent(zl, c, zoo_aexists(zl->zk->zh, zl->parent, 0, nf_on_found, c), "exists");
}

/* ------------------------------------------------------------ the recipe */

void zl_nonfair_start(struct zlock *zl)
{
    if (zl->node && zl->hold)
        nf_take_token(zl);   /* ours, not yet granted */
    else if (zl->node)
        zl_delete(zl);
    else if (zl->create_uncertain)
        nf_find(zl);
    else if (zl->hold && nf_owned_here(zl))
        nf_watch(zl);        /* our node is going (a turn of local handoffs
                              * ended): wait for it as the other daemons
                              * do, rather than create it again in the multi
                              * that deletes it, before any of them can */
    else if (zl->hold)
        nf_create(zl);
    else
        zl_free(zl);
}

/* Stops waiting: a watch in flight or set becomes stale. */
void zl_nonfair_let_go(struct zlock *zl)
{
    zl->gen++;
    zl->step = ZL_IDLE;
    zl_nonfair_start(zl);
}
