/*
 * zlock.c - distributed mode, node machinery: the acquisition object.
 *
 * The lock table asks this backend for the lock on behalf of each request
 * it lets through; each such acquisition is a struct zlock (zk_node.h), found
 * by id. Every request sent for it carries a context (struct zcall) with
 * the zlock's id and generation: a reply to an older generation is stale.
 * A watch has a context of its own, registered in zk->nodes->watches until it
 * fires or its handle goes. On an error the zlock parks (ZL_IDLE) until
 * the session's `resume` or `serving` (zk_acquire.c) starts it again.
 *
 * What happens next is not decided here: zl_next() runs the hook the layer
 * above registered (zl_nodes_init).
 */
#include "config.h"
#include "zlock.h"

#include <event2/event.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#include "log.h"
#include "zk_node.h"

int zl_nodes_init(struct zk *zk, const struct zl_hooks *hooks)
{
    if (!(zk->nodes = calloc(1, sizeof(*zk->nodes))))
        return -1;
    zk->nodes->hooks = hooks;
    TAILQ_INIT(&zk->nodes->zlocks);
    TAILQ_INIT(&zk->nodes->watches);
    TAILQ_INIT(&zk->nodes->known);
    TAILQ_INIT(&zk->nodes->tokens_due);
    return 0;
}

void zl_nodes_free(struct zk *zk)
{
    if (zk->nodes->token_timer)
        event_free(zk->nodes->token_timer);
    free(zk->nodes);
    zk->nodes = NULL;
}

/* A request sent at sent_us (locks_mono_us()) completed: for /metrics. */
static void zl_request_done(struct zk *zk, int64_t sent_us)
{
    histogram_observe(&zk->nodes->request_hist, locks_mono_us() - sent_us);
}

void zl_next(struct zlock *zl)
{
    zl->zk->nodes->hooks->next(zl);
}

/* ------------------------------------------------------------ bookkeeping */

static int by_id(const void *a, const void *b)
{
    uint64_t x = ((const struct zlock *)a)->id, y = ((const struct zlock *)b)->id;

    return x < y ? -1 : x > y;
}

struct zlock *zl_find(struct zk *zk, uint64_t id)
{
    struct zlock key = { .id = id };
    void *found = tfind(&key, &zk->nodes->by_id, by_id);

    return found ? *(struct zlock **)found : NULL;
}

bool zl_token_unqueue(struct zlock *zl)
{
    struct zk_nodes *n = zl->zk->nodes;

    if (!zl->token_put_off)
        return false;
    zl->token_put_off = false;
    TAILQ_REMOVE(&n->tokens_due, zl, token_link);
    n->ntokens_due--;
    return true;
}

void zl_token_spared(struct zlock *zl)
{
    if (zl_token_unqueue(zl))
        zl->zk->nodes->token_writes_spared++;
}

void zl_free(struct zlock *zl)
{
    struct zk *zk = zl->zk;

    log_debug("zk: request %llu on %s done", (unsigned long long)zl->id, zl->parent);
    zk->nodes->hooks->freeing(zl);      /* a lease's conversion, an idle node */
    zl_token_spared(zl);
    if (zl->delay_timer)
        event_free(zl->delay_timer);
    if (zl->keep_timer)
        event_free(zl->keep_timer);
    tdelete(zl, &zk->nodes->by_id, by_id);
    TAILQ_REMOVE(&zk->nodes->zlocks, zl, link);
    zk->nodes->nzlocks--;
    free(zl->parent);
    free(zl->node);
    free(zl);
}

/* The table lets go of the request; the zlock cleans up after itself. */
struct hold *zl_detach(struct zlock *zl)
{
    struct hold *h = zl->hold;

    if (h) {
        hold_set_backend_data(h, NULL);
        zl->hold = NULL;
    }
    return h;
}

/* A context for a second request of the current step, sent before the
 * first is answered (the listing behind a create): same generation. */
struct zcall *zcall_also(struct zlock *zl)
{
    struct zcall *c = malloc(sizeof(*c));

    if (!c)
        return NULL;
    c->zk = zl->zk;
    c->id = zl->id;
    c->gen = zl->gen;
    c->sent_us = locks_mono_us();   /* the request goes out right after (or is queued) */
    c->watch = NULL;
    return c;
}

/* A context for a new request: replies to earlier ones become stale. */
static struct zcall *zcall_new(struct zlock *zl)
{
    struct zcall *c = zcall_also(zl);

    if (c)
        c->gen = ++zl->gen;
    return c;
}

/* Frees a request context; returns its zlock if the reply is still wanted. */
struct zlock *zcall_done(const void *data)
{
    struct zcall *c = (struct zcall *)data;
    struct zk *zk = c->zk;
    struct zlock *zl = zl_find(zk, c->id);
    unsigned gen = c->gen;

    zk->outstanding--;
    zl_request_done(zk, c->sent_us);
    free(c);
    if (zk->state == ZK_EXPIRED || !zl || zl->gen != gen)
        return NULL;
    return zl;
}

void watch_forget(struct zk *zk, struct zcall *w)
{
    TAILQ_REMOVE(&zk->nodes->watches, w, link);
    free(w);
}

/* zcall_done() for a watched request: without ZOK no watch was
 * registered, and its context is freed too. */
struct zlock *zcall_done_watched(const void *data, int rc)
{
    const struct zcall *c = data;

    if (rc != ZOK && c->watch)
        watch_forget(c->zk, c->watch);
    return zcall_done(data);
}

/* Starts a request step: its context, or NULL (parked, retried later) when
 * out of memory. */
struct zcall *zl_begin(struct zlock *zl, enum zl_step step)
{
    struct zcall *c = zcall_new(zl);

    if (!c) {
        zl->step = ZL_IDLE;
        zk_arm_retry(zl->zk);
        return NULL;
    }
    zl->step = step;
    return c;
}

/* Called after every zoo_a* call: counts it, or parks the zlock if it failed. */
bool zk_sent(struct zlock *zl, struct zcall *c, int rc, const char *what)
{
    if (rc == ZOK) {
        zl->zk->outstanding++;
        zk_kick(zl->zk);
        return true;
    }
    free(c);
    log_warn("zk: %s %s: %s", what, zl->node ? zl->node : zl->parent, zerror(rc));
    zl->step = ZL_IDLE;
    zk_arm_retry(zl->zk);
    return false;
}

/*
 * Starts a request step that also sets a watch: the request's context,
 * whose `watch` is the watch's own context (registered in zk->nodes->watches), or
 * NULL (parked, retried later) when out of memory.
 */
struct zcall *zl_begin_watched(struct zlock *zl, enum zl_step step)
{
    struct zcall *w = malloc(sizeof(*w)), *c = w ? zl_begin(zl, step) : NULL;

    if (!c) {
        free(w);
        zl->step = ZL_IDLE;
        zk_arm_retry(zl->zk);
        return NULL;
    }
    *w = *c;
    c->watch = w;
    TAILQ_INSERT_TAIL(&zl->zk->nodes->watches, w, link);
    return c;
}

/* zk_sent() for a watched request: an unsent request sets no watch. */
void zl_sent_watched(struct zlock *zl, struct zcall *c, int rc, const char *what)
{
    struct zcall *w = c->watch;

    if (!zk_sent(zl, c, rc, what))
        watch_forget(zl->zk, w);
}

/* A try acquisition cannot be answered now: report it, keep cleaning up. */
void zl_try_unavailable(struct zlock *zl)
{
    struct hold *h;

    if (zl->try && (h = zl_detach(zl)))
        locks_backend_refused(h, LOCKS_UNAVAILABLE);
}

void zl_timer_at(struct event *timer, int64_t at_us)
{
    int64_t wait_us = at_us - locks_mono_us();
    struct timeval tv;

    if (wait_us < 0)
        wait_us = 0;
    tv.tv_sec = wait_us / 1000000;
    tv.tv_usec = wait_us % 1000000;
    evtimer_add(timer, &tv);
}

bool zl_grant_held_back(struct zlock *zl)
{
    if (zk_may_grant(zl->zk))
        return false;
    zl_next(zl);             /* parks: zl_start answers a try, keeps a wait */
    return true;
}

/* The reply says the connection or session is gone: park until it is back. */
void zl_park(struct zlock *zl, int rc)
{
    zl->step = ZL_IDLE;
    if (rc == ZNOAUTH) {
        zk_report_noauth(zl->zk, zl->node ? zl->node : zl->parent);
        zk_arm_retry(zl->zk);
    } else if (rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT && rc != ZSESSIONEXPIRED &&
               rc != ZCLOSING && rc != ZINVALIDSTATE && rc != ZSESSIONMOVED) {
        log_error("zk: %s: unexpected error %s; retrying", zl->node ? zl->node : zl->parent,
                  zerror(rc));
        zk_arm_retry(zl->zk);
    }
    /* Resumed by the next session event, the retry timer or a new session. */
    zl_try_unavailable(zl);
}

/* A nodecall for zl's current node; NULL when out of memory. */
struct nodecall *nodecall_new(const struct zlock *zl)
{
    struct nodecall *n = malloc(sizeof(*n));

    if (n) {
        n->zk = zl->zk;
        n->id = zl->id;
        n->epoch = zl->epoch;
    }
    return n;
}

/* Frees n; returns its zlock if it still has the node n was sent for. */
struct zlock *nodecall_done(struct nodecall *n)
{
    struct zk *zk = n->zk;
    struct zlock *zl = zl_find(zk, n->id);
    bool current = zl && zl->epoch == n->epoch;

    zk->outstanding--;
    free(n);
    return current ? zl : NULL;
}

/*
 * A watch event reached the watch context ctx (a zcall in zk->nodes->watches).
 * Session events reach every registered watcher and do not remove it:
 * NULL. Otherwise the watch fired once and its context is freed; returns
 * its zlock if still there (or NULL), and *gen the context's gen.
 */
struct zlock *watch_fired(void *ctx, int type, unsigned *gen)
{
    struct zcall *w = ctx;
    struct zk *zk = w->zk;
    struct zlock *zl;

    if (type == ZOO_SESSION_EVENT)
        return NULL;
    zl = zl_find(zk, w->id);
    *gen = w->gen;
    TAILQ_REMOVE(&zk->nodes->watches, w, link);
    free(w);
    return zl;
}

/* A zlock with id for parent (copied), registered, nothing else set; NULL
 * when out of memory or id is taken. */
static struct zlock *zl_make(struct zk *zk, uint64_t id, const char *parent)
{
    struct zlock *zl = zl_find(zk, id) ? NULL : calloc(1, sizeof(*zl));

    if (!zl)
        return NULL;
    zl->zk = zk;
    zl->id = id;        /* the tree's key: set first */
    if (!(zl->parent = strdup(parent)) || !tsearch(zl, &zk->nodes->by_id, by_id)) {
        free(zl->parent);
        free(zl);
        return NULL;
    }
    TAILQ_INSERT_TAIL(&zk->nodes->zlocks, zl, link);
    zk->nodes->nzlocks++;
    return zl;
}

/* A zlock for h, in h's backend slot; parent is copied. NULL when out of memory. */
struct zlock *zl_new(struct zk *zk, struct hold *h, const char *parent)
{
    struct zlock *zl = zl_make(zk, zk->nodes->next_id + 1, parent);

    if (!zl) {
        log_error("zk: out of memory acquiring %s", hold_name(h));
        return NULL;
    }
    zk->nodes->next_id++;
    zl->hold = h;
    zl->try = hold_try(h);
    zl->mode = hold_mode(h);
    zl->limit = hold_limit(h);
    zl->ttl_ms = hold_ttl_ms(h);
    zl->delay_ms = hold_delay_ms(h);
    hold_set_backend_data(h, zl);
    return zl;
}

struct zlock *zl_restore(struct zk *zk, uint64_t id, const char *parent)
{
    struct zlock *zl = zl_make(zk, id, parent);

    if (zl && zk->nodes->next_id < id)
        zk->nodes->next_id = id;
    return zl;
}

void zl_free_watches(struct zk *zk)
{
    struct zcall *w;

    while ((w = TAILQ_FIRST(&zk->nodes->watches))) {
        TAILQ_REMOVE(&zk->nodes->watches, w, link);
        free(w);
    }
}
