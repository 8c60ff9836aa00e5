/*
 * zk.c - distributed mode: the ZooKeeper lock backend.
 *
 * The only module that talks to ZooKeeper. One session (one zhandle_t of the
 * single-threaded C client) serves every connection of this daemon; only the
 * zoo_a* calls are used, and completions and watchers run inside
 * zookeeper_process(), on the event loop.
 *
 * The lock table keeps each name's local FIFO and asks this backend for the
 * lock on behalf of the queue's head. Each such acquisition is a struct
 * zlock: an EPHEMERAL_SEQUENTIAL node <root>/locks/<name>/<daemon>-<id>-NNNNNNNNNN.
 * The node whose 10-digit suffix is lowest holds the lock; every other node
 * watches (with a data watch, which a vanished node cannot leave behind) only
 * the node just before it. The fencing token is the parent's pzxid from the
 * getChildren reply that showed our node first.
 *
 * A zlock outlives the table's interest in it ("detached", lock == NULL)
 * until its node is known to be gone: a create whose reply was lost is
 * looked for by name after reconnecting, and deletes are retried until they
 * succeed, the node is gone, or the session is.
 */
#include "config.h"
#include "zk.h"

#include <errno.h>
#include <event2/event.h>
#include <search.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "backend.h"
#include "locks.h"
#include "log.h"
#include "settings.h"

/* How often ancestors may be re-created for one acquisition before we wait
 * for the retry timer (a container parent can vanish between two calls). */
#define CREATE_ATTEMPTS 5
/* Back-off before retrying after an unexpected ZooKeeper error. */
#define RETRY_MS 500

enum zl_step {
    ZL_IDLE,       /* nothing in flight: waiting for a connection or the retry timer */
    ZL_CREATING,   /* create sent */
    ZL_FINDING,    /* getChildren sent to find a node whose create reply was lost */
    ZL_LISTING,    /* getChildren sent: is our node first? */
    ZL_WATCHING,   /* getData watch on our predecessor sent or set */
    ZL_HELD,       /* our node is first and the lock table has the grant */
    ZL_DELETING,   /* delete sent */
};

struct zk;

struct zlock {
    struct zk *zk;
    struct hold *hold;         /* the table's request; NULL once it let go (detached) */
    TAILQ_ENTRY(zlock) link;   /* zk->zlocks, in creation order */
    uint64_t id;               /* unique within this daemon; part of the node name */
    unsigned gen;              /* bumped by every request; older replies are stale */
    enum zl_step step;
    bool try;                  /* answer busy instead of waiting */
    bool create_uncertain;     /* a create was sent and its reply lost */
    unsigned create_attempts;
    char *parent;              /* <root>/locks/<name>; malloc'd */
    char *node;                /* our node's full path once known; malloc'd */
};

/* Context of one request, or of one watch; freed by its completion / event. */
struct zcall {
    struct zk *zk;
    uint64_t id;               /* the zlock's id, looked up again on completion */
    unsigned gen;
    struct zcall *watch;       /* getData only: the watch's context, freed here if unset */
    TAILQ_ENTRY(zcall) link;   /* zk->watches, for watch contexts only */
};

enum zk_state { ZK_CONNECTING, ZK_CONNECTED, ZK_EXPIRED };

struct zk {
    struct backend be;
    struct event_base *base;           /* borrowed */
    const struct settings *settings;   /* borrowed */
    zhandle_t *zh;                     /* owned; NULL between sessions */
    enum zk_state state;
    struct event *io;                  /* the handle's fd and timeout, re-armed after each process */
    int io_fd;                         /* what io is registered for, to skip needless re-registering */
    short io_what;
    struct event *kick;                /* re-arm once after requests issued outside process */
    struct event *lost_timer;          /* disconnected too long: holds are presumed lost */
    struct event *restart;             /* replace an expired handle, outside callbacks */
    struct event *retry;               /* back-off for zlocks parked after an error */
    struct event *stalled;             /* a connection attempt got no handshake in time */
    bool in_process;                   /* inside zookeeper_process(): re-arm after it */
    bool kicked;
    struct timeval last_heard;         /* last time the server's socket was readable */
    int negotiated_ms;
    int64_t session_id;
    void *by_id;                       /* tsearch tree of struct zlock by id */
    TAILQ_HEAD(, zlock) zlocks;
    TAILQ_HEAD(, zcall) watches;       /* watch contexts registered with zh */
    uint64_t next_id;
    uint64_t sessions, reconnects, outstanding;
    unsigned nzlocks;
    char daemon_id[96];                /* "<host>-<pid>-<random>", unique per daemon run */
    char root[256];
};

static void zl_start(struct zlock *zl);
static void zl_list(struct zlock *zl);
static void zl_delete(struct zlock *zl);
static void zk_kick(struct zk *zk);

/* ------------------------------------------------------------ bookkeeping */

static int by_id(const void *a, const void *b)
{
    uint64_t x = ((const struct zlock *)a)->id, y = ((const struct zlock *)b)->id;

    return x < y ? -1 : x > y;
}

static struct zlock *zl_find(struct zk *zk, uint64_t id)
{
    struct zlock key = { .id = id };
    void *found = tfind(&key, &zk->by_id, by_id);

    return found ? *(struct zlock **)found : NULL;
}

static void zl_free(struct zlock *zl)
{
    struct zk *zk = zl->zk;

    log_debug("zk: request %llu on %s done", (unsigned long long)zl->id, zl->parent);
    tdelete(zl, &zk->by_id, by_id);
    TAILQ_REMOVE(&zk->zlocks, zl, link);
    zk->nzlocks--;
    free(zl->parent);
    free(zl->node);
    free(zl);
}

/* The table lets go of the request; the zlock cleans up after itself. */
static struct hold *zl_detach(struct zlock *zl)
{
    struct hold *h = zl->hold;

    if (h) {
        hold_set_backend_data(h, NULL);
        zl->hold = NULL;
    }
    return h;
}

static struct zcall *zcall_new(struct zlock *zl)
{
    struct zcall *c = malloc(sizeof(*c));

    if (!c)
        return NULL;
    c->zk = zl->zk;
    c->id = zl->id;
    c->gen = ++zl->gen;
    c->watch = NULL;
    return c;
}

/* Frees a request context; returns its zlock if the reply is still wanted. */
static struct zlock *zcall_done(const void *data)
{
    struct zcall *c = (struct zcall *)data;
    struct zk *zk = c->zk;
    struct zlock *zl = zl_find(zk, c->id);
    unsigned gen = c->gen;

    zk->outstanding--;
    free(c);
    if (zk->state == ZK_EXPIRED || !zl || zl->gen != gen)
        return NULL;
    return zl;
}

static void zk_arm_retry(struct zk *zk)
{
    struct timeval tv = { 0, RETRY_MS * 1000 };

    if (!evtimer_pending(zk->retry, NULL))
        evtimer_add(zk->retry, &tv);
}

/* Starts a request step: its context, or NULL (parked, retried later) when
 * out of memory. */
static struct zcall *zl_begin(struct zlock *zl, enum zl_step step)
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
static bool zk_sent(struct zlock *zl, struct zcall *c, int rc, const char *what)
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

/* A try acquisition cannot be answered now: report it, keep cleaning up. */
static void zl_try_unavailable(struct zlock *zl)
{
    struct hold *h;

    if (zl->try && (h = zl_detach(zl)))
        locks_backend_refused(h, LOCKS_UNAVAILABLE);
}

/* The reply says the connection or session is gone: park until it is back. */
static void zl_park(struct zlock *zl, int rc)
{
    zl->step = ZL_IDLE;
    if (rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT && rc != ZSESSIONEXPIRED &&
        rc != ZCLOSING && rc != ZINVALIDSTATE && rc != ZSESSIONMOVED) {
        log_error("zk: %s: unexpected error %s; retrying", zl->node ? zl->node : zl->parent,
                  zerror(rc));
        zk_arm_retry(zl->zk);
    }
    /* Resumed by the next session event, the retry timer or a new session. */
    zl_try_unavailable(zl);
}

static const char *basename_of(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

/* The sequence number ZooKeeper appended: the last 10 characters. */
static long long seq_of(const char *child)
{
    size_t len = strlen(child);

    return len >= 10 ? strtoll(child + len - 10, NULL, 10) : -1;
}

/* ---------------------------------------------------------------- create */

static void on_ancestor_created(int rc, const char *value, const void *data)
{
    struct zk *zk = (struct zk *)data;

    zk->outstanding--;
    if (rc != ZOK && rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZCLOSING &&
        rc != ZSESSIONEXPIRED && rc != ZOPERATIONTIMEOUT)
        log_warn("zk: creating a parent node: %s", zerror(rc));
}

/* Sends creates for <root>, <root>/locks (persistent) and the lock's parent
 * (a container, so that the server removes it once empty). Their replies do
 * not matter: the create of our node that follows them says it all. */
static void zk_create_ancestors(struct zk *zk, const char *parent)
{
    char path[512];

    for (const char *p = strchr(parent + 1, '/');; p = strchr(p + 1, '/')) {
        size_t len = p ? (size_t)(p - parent) : strlen(parent);
        int flags = p ? 0 : ZOO_CONTAINER;

        snprintf(path, sizeof(path), "%.*s", (int)len, parent);
        if (zoo_acreate(zk->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, flags,
                        on_ancestor_created, zk) == ZOK)
            zk->outstanding++;
        if (!p)
            break;
    }
}

static void on_created(int rc, const char *value, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl)
        return;
    switch (rc) {
    case ZOK:
        zl->node = strdup(value);
        zl->create_uncertain = false;
        if (!zl->node) {   /* cannot track it: let the session's end remove it */
            log_error("zk: out of memory tracking %s", value);
            zl_try_unavailable(zl);
            zl->step = ZL_IDLE;
            return;
        }
        log_debug("zk: created %s", zl->node);
        zl_start(zl);
        break;
    case ZNONODE:
        /* The parent is missing (never made, or an empty container removed). */
        zl->create_uncertain = false;
        zl->step = ZL_IDLE;
        if (zl->create_attempts >= CREATE_ATTEMPTS) {
            zl->create_attempts = 0;
            zl_park(zl, rc);
            return;
        }
        zk_create_ancestors(zl->zk, zl->parent);
        zl_start(zl);
        break;
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZCLOSING:           /* the handle was reopened: whether it went out is unknown */
        /* The node may exist: look for it by name once connected again. */
        zl->create_uncertain = true;
        zl_park(zl, rc);
        break;
    default:
        zl->create_uncertain = false;   /* session gone: so is any node */
        zl_park(zl, rc);
        break;
    }
}

static void zl_create(struct zlock *zl)
{
    struct zk *zk = zl->zk;
    char prefix[512], data[256];
    struct zcall *c = zl_begin(zl, ZL_CREATING);

    if (!c)
        return;
    /* The daemon id and request id make the node findable if the reply is lost. */
    snprintf(prefix, sizeof(prefix), "%s/%s-%llu-", zl->parent, zk->daemon_id,
             (unsigned long long)zl->id);
    snprintf(data, sizeof(data), "daemon=%s client=%s", zk->daemon_id,
             zl->hold ? hold_owner_desc(zl->hold) : "-");
    zl->create_attempts++;
    zk_sent(zl, c,
            zoo_acreate(zk->zh, prefix, data, (int)strlen(data), &ZOO_OPEN_ACL_UNSAFE,
                        ZOO_EPHEMERAL_SEQUENTIAL, on_created, c),
            "create");
}

/* ------------------------------------------------ find a lost create's node */

static void on_found(int rc, const struct String_vector *children, const void *data)
{
    struct zlock *zl = zcall_done(data);
    char prefix[128];

    if (!zl)
        return;
    if (rc != ZOK && rc != ZNONODE) {
        zl_park(zl, rc);
        return;
    }
    zl->create_uncertain = false;
    snprintf(prefix, sizeof(prefix), "%s-%llu-", zl->zk->daemon_id, (unsigned long long)zl->id);
    for (int i = 0; rc == ZOK && i < children->count; i++) {
        if (strncmp(children->data[i], prefix, strlen(prefix)) == 0) {
            size_t len = strlen(zl->parent) + strlen(children->data[i]) + 2;
            if ((zl->node = malloc(len)))
                snprintf(zl->node, len, "%s/%s", zl->parent, children->data[i]);
            log_info("zk: found %s, whose create reply was lost", zl->node);
            break;
        }
    }
    zl_start(zl);
}

static void zl_find_lost_create(struct zlock *zl)
{
    struct zcall *c = zl_begin(zl, ZL_FINDING);

    if (c)
        zk_sent(zl, c, zoo_aget_children(zl->zk->zh, zl->parent, 0, on_found, c),
                "getChildren");
}

/* ------------------------------------------------------- list and watch */

static void on_watch_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct zcall *w = ctx;
    struct zk *zk = w->zk;
    struct zlock *zl;

    /* Session events reach every registered watcher and do not remove it. */
    if (type == ZOO_SESSION_EVENT)
        return;
    zl = zl_find(zk, w->id);
    TAILQ_REMOVE(&zk->watches, w, link);
    if (zl && zl->gen == w->gen && zl->step == ZL_WATCHING) {
        log_debug("zk: %s changed; %s looks again", path, zl->node);
        zl_list(zl);
    }
    free(w);
}

static void on_predecessor_read(int rc, const char *value, int len, const struct Stat *stat,
                                const void *data)
{
    struct zcall *c = (struct zcall *)data;
    struct zlock *zl;

    /* Without ZOK no watch was registered: its context is ours to free. */
    if (rc != ZOK && c->watch) {
        TAILQ_REMOVE(&c->zk->watches, c->watch, link);
        free(c->watch);
    }
    if (!(zl = zcall_done(data)))
        return;
    if (rc == ZOK)
        return;              /* watching; on_watch_event continues */
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
    struct zcall *w = malloc(sizeof(*w)), *c = w ? zl_begin(zl, ZL_WATCHING) : NULL;

    if (!c) {
        free(w);
        zl->step = ZL_IDLE;
        zk_arm_retry(zk);
        return;
    }
    *w = *c;
    c->watch = w;
    TAILQ_INSERT_TAIL(&zk->watches, w, link);
    snprintf(path, sizeof(path), "%s/%s", zl->parent, predecessor);
    log_debug("zk: %s waits for %s", zl->node, path);
    if (!zk_sent(zl, c, zoo_awget(zk->zh, path, on_watch_event, w, on_predecessor_read, c),
                 "getData")) {
        TAILQ_REMOVE(&zk->watches, w, link);
        free(w);
    }
}

static void on_listed(int rc, const struct String_vector *children, const struct Stat *stat,
                      const void *data)
{
    struct zlock *zl = zcall_done(data);
    const char *mine, *pred = NULL;
    long long my_seq, pred_seq = -1;
    bool found = false, lowest = true;
    struct hold *h;

    if (!zl)
        return;
    if (rc == ZNONODE) {     /* the parent, and so our node, is gone */
        free(zl->node);
        zl->node = NULL;
        zl_start(zl);
        return;
    }
    if (rc != ZOK) {
        zl_park(zl, rc);
        return;
    }
    /* Order by the sequence suffix alone: prefixes differ between daemons. */
    mine = basename_of(zl->node);
    my_seq = seq_of(mine);
    for (int i = 0; i < children->count; i++) {
        const char *child = children->data[i];
        long long seq = seq_of(child);
        if (strcmp(child, mine) == 0) {
            found = true;
        } else if (seq < my_seq) {
            lowest = false;
            if (seq > pred_seq) {
                pred_seq = seq;
                pred = child;
            }
        }
    }
    if (!found) {            /* our node vanished (session trouble): start over */
        log_warn("zk: %s is gone; creating a new node", zl->node);
        free(zl->node);
        zl->node = NULL;
        zl_start(zl);
        return;
    }
    if (!zl->hold) {
        zl_delete(zl);
        return;
    }
    if (lowest) {
        zl->step = ZL_HELD;
        zl->create_attempts = 0;
        log_debug("zk: %s holds %s, token %lld", zl->node, zl->parent, (long long)stat->pzxid);
        locks_backend_granted(zl->hold, (uint64_t)stat->pzxid);
        return;
    }
    if (zl->try) {           /* not first: give the place back, answer busy */
        h = zl_detach(zl);
        zl_delete(zl);
        locks_backend_refused(h, LOCKS_BUSY);
        return;
    }
    zl_watch(zl, pred);
}

static void zl_list(struct zlock *zl)
{
    struct zcall *c = zl_begin(zl, ZL_LISTING);

    if (c)
        zk_sent(zl, c, zoo_aget_children2(zl->zk->zh, zl->parent, 0, on_listed, c),
                "getChildren");
}

/* ---------------------------------------------------------------- delete */

static void on_deleted(int rc, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl)
        return;
    if (rc == ZOK || rc == ZNONODE) {
        free(zl->node);
        zl->node = NULL;
        zl_start(zl);
        return;
    }
    if (rc == ZSESSIONEXPIRED) {   /* the node went with the session */
        free(zl->node);
        zl->node = NULL;
    }
    zl_park(zl, rc);
}

static void zl_delete(struct zlock *zl)
{
    struct zcall *c = zl_begin(zl, ZL_DELETING);

    if (!c)
        return;
    log_debug("zk: deleting %s", zl->node);
    zk_sent(zl, c, zoo_adelete(zl->zk->zh, zl->node, -1, on_deleted, c), "delete");
}

/* Decides the next request from what is known, whatever happened before. */
static void zl_start(struct zlock *zl)
{
    zl->step = ZL_IDLE;
    if (zl->zk->state != ZK_CONNECTED) {
        zl_try_unavailable(zl);
        if (!zl->hold && !zl->node && !zl->create_uncertain)
            zl_free(zl);     /* nothing of it in ZooKeeper */
        return;
    }
    if (zl->node) {
        if (zl->hold)
            zl_list(zl);
        else
            zl_delete(zl);
    } else if (zl->create_uncertain) {
        zl_find_lost_create(zl);
    } else if (zl->hold) {
        zl_create(zl);
    } else {
        zl_free(zl);
    }
}

/* Restarts every zlock that waits for the connection or a retry. */
static void zk_resume_all(struct zk *zk)
{
    struct zlock *zl, *next;

    for (zl = TAILQ_FIRST(&zk->zlocks); zl; zl = next) {
        next = TAILQ_NEXT(zl, link);
        if (zl->step == ZL_IDLE)
            zl_start(zl);
    }
}

/* -------------------------------------------------------- backend calls */

static enum locks_result zk_acquire(void *impl, struct hold *h, uint64_t *token)
{
    struct zk *zk = impl;
    struct zlock *zl;
    size_t plen = strlen(zk->root) + strlen("/locks/") + strlen(hold_name(h)) + 1;

    /* A try cannot be answered without ZooKeeper: say so now. */
    if (hold_try(h) && zk->state != ZK_CONNECTED)
        return LOCKS_UNAVAILABLE;
    if (!(zl = calloc(1, sizeof(*zl))) || !(zl->parent = malloc(plen))) {
        free(zl);
        log_error("zk: out of memory acquiring %s", hold_name(h));
        /* Nothing would ever retry: fail the request rather than let it hang. */
        return LOCKS_UNAVAILABLE;
    }
    snprintf(zl->parent, plen, "%s/locks/%s", zk->root, hold_name(h));
    zl->zk = zk;
    zl->hold = h;
    zl->id = ++zk->next_id;
    zl->try = hold_try(h);
    tsearch(zl, &zk->by_id, by_id);
    TAILQ_INSERT_TAIL(&zk->zlocks, zl, link);
    zk->nzlocks++;
    hold_set_backend_data(h, zl);
    /* Answers come from completions, never from here: a failed send only
     * parks the zlock for the retry timer. */
    zl_start(zl);
    return LOCKS_WAITING;
}

/* The acquisition now serves h (the table moved it into h's slot). */
static void zk_handover(void *impl, struct hold *h)
{
    struct zlock *zl = hold_backend_data(h);

    if (zl)
        zl->hold = h;
}

/* cancel and release: the table is done with the request; take our node back. */
static void zk_let_go(void *impl, struct hold *h)
{
    struct zlock *zl = hold_backend_data(h);

    if (!zl)
        return;
    zl_detach(zl);
    switch (zl->step) {
    case ZL_HELD:
    case ZL_WATCHING:
        if (zl->zk->state == ZK_CONNECTED) {
            zl_delete(zl);   /* also makes the pending watch stale */
        } else {
            zl->gen++;
            zl->step = ZL_IDLE;   /* deleted on reconnection */
        }
        break;
    case ZL_IDLE:
        zl_start(zl);        /* deletes or frees now, or once connected */
        break;
    default:
        break;               /* the reply in flight sees hold == NULL */
    }
}

static void zk_stats(void *impl, backend_stat_fn add, void *cookie);
static struct backend_query *zk_query(void *impl, const char *name,
                                      struct backend_queue_info *now, backend_query_cb cb,
                                      void *arg);
static void zk_query_cancel(void *impl, struct backend_query *q);
static void zk_free(void *impl);

static const struct backend_ops zk_ops = {
    .name = "distributed",
    .acquire = zk_acquire,
    .handover = zk_handover,
    .cancel = zk_let_go,
    .release = zk_let_go,
    .stats = zk_stats,
    .query = zk_query,
    .query_cancel = zk_query_cancel,
    .free = zk_free,
};

/* ------------------------------------------------ session and event loop */

static void on_io(evutil_socket_t fd, short what, void *arg);

/* The session timeout in force: negotiated, or else the one we asked for. */
static int zk_timeout_ms(const struct zk *zk)
{
    return zk->negotiated_ms > 0 ? zk->negotiated_ms : (int)zk->settings->zk_session_timeout_ms;
}

/* How long a handshake may take: short enough that several attempts fit
 * in the 2/3 of the session timeout after which holds are presumed lost. */
static int zk_handshake_limit_ms(const struct zk *zk)
{
    int limit = zk_timeout_ms(zk) / 8;

    return limit < 1000 ? 1000 : limit;
}

static void zk_rearm(struct zk *zk)
{
    struct timeval tv = { 0, 0 };
    int fd = -1, interest = 0, rc;
    short what = 0;

    if (!zk->zh || zk->state == ZK_EXPIRED)
        return;
    rc = zookeeper_interest(zk->zh, &fd, &interest, &tv);
    if (rc != ZOK) {
        /* A failed connect attempt: the client tries the next host when called again. */
        fd = -1;
        tv.tv_sec = 0;
        tv.tv_usec = 100 * 1000;
    }
    if (fd != -1) {
        if (interest & ZOOKEEPER_READ)
            what |= EV_READ;
        if (interest & ZOOKEEPER_WRITE)
            what |= EV_WRITE;
    }
    /* The fd changes on every reconnect and the interest often; when
     * neither did, only the timeout is renewed (no epoll_ctl). */
    if (fd != zk->io_fd || what != zk->io_what ||
        !event_pending(zk->io, EV_READ | EV_WRITE | EV_TIMEOUT, NULL)) {
        event_del(zk->io);
        event_assign(zk->io, zk->base, fd, what | EV_PERSIST, on_io, zk);
        zk->io_fd = fd;
        zk->io_what = what;
    }
    event_add(zk->io, &tv);

    /* A socket but no session yet: time the handshake (see on_stalled). */
    if (zk->state == ZK_CONNECTING && fd != -1) {
        if (!evtimer_pending(zk->stalled, NULL)) {
            int limit = zk_handshake_limit_ms(zk);
            struct timeval lt = { limit / 1000, (limit % 1000) * 1000 };
            evtimer_add(zk->stalled, &lt);
        }
    } else {
        evtimer_del(zk->stalled);
    }
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    struct timeval now;
    int events = 0;

    gettimeofday(&now, NULL);
    if (what & EV_READ)
        events |= ZOOKEEPER_READ;
    if (what & EV_WRITE)
        events |= ZOOKEEPER_WRITE;
    zk->in_process = true;
    zookeeper_process(zk->zh, events);
    /* The client handles one reply per call; take the others already in
     * the socket now rather than after another trip through epoll. */
    if (events & ZOOKEEPER_READ) {
        char c;
        for (int i = 0; i < 64 && zk->zh && zk->state == ZK_CONNECTED &&
                        recv((int)fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1; i++)
            zookeeper_process(zk->zh, ZOOKEEPER_READ);
    }
    zk->in_process = false;
    /* Readable and still connected: the server spoke (an EOF would have
     * disconnected us), so the session was alive at `now`. */
    if ((what & EV_READ) && zk->state == ZK_CONNECTED)
        zk->last_heard = now;
    zk_rearm(zk);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;

    zk->kicked = false;
    zk_rearm(zk);
}

/* Requests were queued: make sure the loop wants to write them. */
static void zk_kick(struct zk *zk)
{
    if (zk->in_process || zk->kicked)
        return;              /* on_io re-arms after zookeeper_process */
    zk->kicked = true;
    event_active(zk->kick, 0, 0);
}

/* Every held lock is given up with reason; the waiters keep waiting. */
static void zk_drop_holds(struct zk *zk, const char *reason)
{
    struct zlock *zl, *next;

    for (zl = TAILQ_FIRST(&zk->zlocks); zl; zl = next) {
        next = TAILQ_NEXT(zl, link);
        if (zl->step == ZL_HELD && zl->hold) {
            struct hold *h = zl_detach(zl);
            zl->step = ZL_IDLE;          /* node deleted once connected, if it survived */
            locks_backend_lost(h, reason);
        }
    }
}

static void on_lost_timer(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;

    log_warn("zk: no contact with ZooKeeper for 2/3 of the %d ms session timeout; "
             "presuming the session lost", zk->negotiated_ms);
    zk_drop_holds(zk, "zk-disconnected");
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;

    if (zk->state == ZK_CONNECTED)
        zk_resume_all(zk);
}

/* Frees the watch contexts still registered with a handle that is going away. */
static void zk_close_handle(struct zk *zk)
{
    struct zcall *w;

    if (!zk->zh)
        return;
    event_del(zk->io);
    zookeeper_close(zk->zh);   /* calls pending completions with ZCLOSING */
    zk->zh = NULL;
    while ((w = TAILQ_FIRST(&zk->watches))) {
        TAILQ_REMOVE(&zk->watches, w, link);
        free(w);
    }
}

static void on_session_event(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/*
 * Opens a handle: a new session, or the session `id` again. When the handle
 * cannot even be made (no host name resolves), the restart timer tries a new
 * session in a second, as in any other outage.
 */
static void zk_open(struct zk *zk, const clientid_t *id)
{
    struct timeval tv = { 1, 0 };

    zk->state = ZK_CONNECTING;
    zk->zh = zookeeper_init(zk->settings->zk_hosts, on_session_event,
                            id ? zk_timeout_ms(zk) : (int)zk->settings->zk_session_timeout_ms,
                            id, zk, 0);
    if (!zk->zh) {
        log_error("zk: cannot start a session with '%s': %s; retrying",
                  zk->settings->zk_hosts, strerror(errno));
        zk->state = ZK_EXPIRED;
        evtimer_add(zk->restart, &tv);
        return;
    }
    /* Resolve host names when connecting, not on every zookeeper_interest()
     * (the default), which costs several system calls per request. */
    zoo_set_servers_resolution_delay(zk->zh, -1);
    zk_rearm(zk);
}

/*
 * A server that accepts connections before it can serve (ZooKeeper does so
 * while starting) may never answer the handshake; the C client would wait
 * 2/3 of the session timeout, exactly when we must presume our holds lost.
 * Instead, reopen the handle with the same session id and password: the
 * session and its nodes survive (zookeeper_close sends no close request
 * unless connected), and the client tries the next server or this one again.
 */
static void on_stalled(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    clientid_t id;
    bool resume = zk->session_id != 0;
    struct zlock *zl;

    if (zk->state != ZK_CONNECTING || !zk->zh)
        return;
    log_warn("zk: no session handshake within %d ms; reconnecting", zk_handshake_limit_ms(zk));
    if (resume)
        id = *zoo_client_id(zk->zh);
    zk_close_handle(zk);      /* pending requests complete with ZCLOSING */
    zk->outstanding = 0;
    /* Watches belonged to the old handle: look again once connected. */
    TAILQ_FOREACH(zl, &zk->zlocks, link)
        if (zl->step == ZL_WATCHING) {
            zl->gen++;
            zl->step = ZL_IDLE;
        }
    zk_open(zk, resume ? &id : NULL);
}

/* The session expired: everything it owned in ZooKeeper is gone. */
static void on_restart(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    struct zlock *zl, *next;

    zk_close_handle(zk);
    /* Forget nodes (they went with the session); waiters will queue again. */
    for (zl = TAILQ_FIRST(&zk->zlocks); zl; zl = next) {
        next = TAILQ_NEXT(zl, link);
        zl->gen++;
        free(zl->node);
        zl->node = NULL;
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
    zk->outstanding = 0;
    zk_open(zk, NULL);
}

static void on_session_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct zk *zk = ctx;

    if (type != ZOO_SESSION_EVENT)
        return;
    if (state == ZOO_CONNECTED_STATE) {
        const clientid_t *id = zoo_client_id(zh);
        bool same = zk->session_id == id->client_id;
        zk->state = ZK_CONNECTED;
        zk->negotiated_ms = zoo_recv_timeout(zh);
        gettimeofday(&zk->last_heard, NULL);
        evtimer_del(zk->lost_timer);
        if (same) {
            zk->reconnects++;
        } else {
            zk->sessions++;
            zk->session_id = id->client_id;
        }
        log_info("zk: %s session 0x%llx, timeout %d ms", same ? "reconnected to" : "new",
                 (unsigned long long)id->client_id, zk->negotiated_ms);
        zk_resume_all(zk);
    } else if (state == ZOO_CONNECTING_STATE) {
        struct timeval now, deadline, tv = { 0, 0 };
        long ms = (long)zk->negotiated_ms * 2 / 3;
        if (zk->state == ZK_CONNECTED)
            log_warn("zk: disconnected from ZooKeeper; reconnecting");
        zk->state = ZK_CONNECTING;
        /* The server expires the session a full timeout after it last heard
         * from us; we presume it lost 2/3 of a timeout after we last heard
         * from the server, leaving a third for delays on either side. */
        if (zk->session_id && !evtimer_pending(zk->lost_timer, NULL)) {
            gettimeofday(&now, NULL);
            deadline = zk->last_heard;
            deadline.tv_sec += ms / 1000;
            deadline.tv_usec += (ms % 1000) * 1000;
            if (deadline.tv_usec >= 1000000) {
                deadline.tv_sec++;
                deadline.tv_usec -= 1000000;
            }
            if (timercmp(&deadline, &now, >))
                timersub(&deadline, &now, &tv);
            evtimer_add(zk->lost_timer, &tv);
        }
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        log_warn("zk: session 0x%llx %s", (unsigned long long)zk->session_id,
                 state == ZOO_EXPIRED_SESSION_STATE ? "expired" : "failed authentication");
        zk->state = ZK_EXPIRED;
        evtimer_del(zk->lost_timer);
        zk_drop_holds(zk, "session-expired");
        event_active(zk->restart, 0, 0);   /* zookeeper_close may not run in a callback */
    }
}

/* ------------------------------------------------------- STATUS queries */

struct backend_query {
    struct zk *zk;
    backend_query_cb cb;       /* NULL once cancelled */
    void *arg;
    struct backend_queue_info info;
    char parent[512];
};

static void query_finish(struct backend_query *q, bool ok)
{
    q->zk->outstanding--;
    q->info.ok = ok;
    if (q->cb)
        q->cb(q->arg, &q->info);
    free(q);
}

static void on_query_data(int rc, const char *value, int len, const struct Stat *stat,
                          const void *data)
{
    struct backend_query *q = (struct backend_query *)data;
    char buf[256], daemon[128] = "-", client[128] = "-";

    if (rc == ZOK && value && len > 0) {
        /* "daemon=<id> client=<addr>", as zl_create writes it */
        snprintf(buf, sizeof(buf), "%.*s", len, value);
        sscanf(buf, "daemon=%127s client=%127s", daemon, client);
        snprintf(q->info.holder, sizeof(q->info.holder), "%s/%s", daemon, client);
        q->info.since_ms = stat->ctime;
    }
    /* ZNONODE: the holder left between the two reads; report what we saw. */
    query_finish(q, rc == ZOK || rc == ZNONODE);
}

static void on_query_children(int rc, const struct String_vector *children, const void *data)
{
    struct backend_query *q = (struct backend_query *)data;
    const char *first = NULL;
    char path[768];

    if (rc == ZNONODE || (rc == ZOK && children->count == 0)) {
        query_finish(q, true);
        return;
    }
    if (rc != ZOK || !q->cb) {
        query_finish(q, rc == ZOK);
        return;
    }
    q->info.queue = (unsigned)children->count;
    q->info.holders = 1;
    for (int i = 0; i < children->count; i++)
        if (!first || seq_of(children->data[i]) < seq_of(first))
            first = children->data[i];
    snprintf(path, sizeof(path), "%s/%s", q->parent, first);
    /* The request's count carries over to the getData. */
    if (zoo_aget(q->zk->zh, path, 0, on_query_data, q) != ZOK)
        query_finish(q, false);
}

static struct backend_query *zk_query(void *impl, const char *name,
                                      struct backend_queue_info *now, backend_query_cb cb,
                                      void *arg)
{
    static const struct backend_queue_info unavailable = {
        .ok = false, .global = true, .holder = "-", .since_ms = -1
    };
    struct zk *zk = impl;
    struct backend_query *q;

    *now = unavailable;
    if (zk->state != ZK_CONNECTED || !(q = calloc(1, sizeof(*q))))
        return NULL;
    q->zk = zk;
    q->cb = cb;
    q->arg = arg;
    q->info = unavailable;
    snprintf(q->parent, sizeof(q->parent), "%s/locks/%s", zk->root, name);
    if (zoo_aget_children(zk->zh, q->parent, 0, on_query_children, q) != ZOK) {
        free(q);
        return NULL;
    }
    zk->outstanding++;
    zk_kick(zk);
    return q;
}

static void zk_query_cancel(void *impl, struct backend_query *q)
{
    q->cb = NULL;   /* freed by its completion */
}

/* ------------------------------------------------------------- lifecycle */

struct backend *zk_backend_new(struct event_base *base, const struct settings *s,
                               const char *daemon_id)
{
    struct zk *zk = calloc(1, sizeof(*zk));

    if (!zk)
        return NULL;
    zk->be.ops = &zk_ops;
    zk->be.impl = zk;
    zk->base = base;
    zk->settings = s;
    TAILQ_INIT(&zk->zlocks);
    TAILQ_INIT(&zk->watches);
    snprintf(zk->root, sizeof(zk->root), "%s", s->zk_root);
    snprintf(zk->daemon_id, sizeof(zk->daemon_id), "%s", daemon_id);

    /* The client logs every failed connect attempt, several a second during
     * an outage; our own log reports state changes, so it speaks only in -v. */
    zoo_set_log_stream(stderr);
    zoo_set_debug_level(log_get_level() >= LOG_LVL_DEBUG ? ZOO_LOG_LEVEL_WARN : 0);
    zk->io = event_new(base, -1, 0, on_io, zk);
    zk->io_fd = -1;
    zk->kick = event_new(base, -1, 0, on_kick, zk);
    zk->lost_timer = evtimer_new(base, on_lost_timer, zk);
    zk->restart = evtimer_new(base, on_restart, zk);
    zk->retry = evtimer_new(base, on_retry, zk);
    zk->stalled = evtimer_new(base, on_stalled, zk);
    if (!zk->io || !zk->kick || !zk->lost_timer || !zk->restart || !zk->retry || !zk->stalled) {
        zk_free(zk);
        return NULL;
    }
    zk_open(zk, NULL);
    log_info("zk: daemon id %s, connecting to %s, root %s", zk->daemon_id, s->zk_hosts,
             zk->root);
    return &zk->be;
}

static void zk_free(void *impl)
{
    struct zk *zk = impl;
    struct zlock *zl;

    zk->state = ZK_EXPIRED;    /* completions run by zookeeper_close are ignored */
    zk_close_handle(zk);       /* closing the session removes our ephemeral nodes */
    while ((zl = TAILQ_FIRST(&zk->zlocks)))
        zl_free(zl);
    if (zk->io)
        event_free(zk->io);
    if (zk->kick)
        event_free(zk->kick);
    if (zk->lost_timer)
        event_free(zk->lost_timer);
    if (zk->restart)
        event_free(zk->restart);
    if (zk->retry)
        event_free(zk->retry);
    if (zk->stalled)
        event_free(zk->stalled);
    free(zk);
}

/* STAT lines: zk_state, zk_session_id, ...; zk_requests counts the
 * acquisitions and releases this daemon is working on. */
static void zk_stats(void *impl, backend_stat_fn add, void *cookie)
{
    struct zk *zk = impl;
    char v[32];

    add(cookie, "zk_state", zk->state == ZK_CONNECTED ? "connected"
                            : zk->state == ZK_CONNECTING ? "connecting" : "expired");
    snprintf(v, sizeof(v), "0x%llx", (unsigned long long)zk->session_id);
    add(cookie, "zk_session_id", v);
    snprintf(v, sizeof(v), "%d", zk->negotiated_ms);
    add(cookie, "zk_session_timeout_ms", v);
    snprintf(v, sizeof(v), "%llu", (unsigned long long)zk->sessions);
    add(cookie, "zk_sessions", v);
    snprintf(v, sizeof(v), "%llu", (unsigned long long)zk->reconnects);
    add(cookie, "zk_reconnects", v);
    snprintf(v, sizeof(v), "%llu", (unsigned long long)zk->outstanding);
    add(cookie, "zk_outstanding", v);
    snprintf(v, sizeof(v), "%u", zk->nzlocks);
    add(cookie, "zk_requests", v);
}
