/*
 * lock.c - distributed mode: the lock recipe.
 *
 * The lock table keeps each name's local holders and FIFO of waiters and
 * asks this backend for the lock on behalf of each request it lets through.
 * Each such acquisition is a struct zlock: an EPHEMERAL_SEQUENTIAL node
 * <root>/locks/<name>/<daemon>-<id>-NNNNNNNNNN. The node whose 10-digit
 * suffix is lowest holds the lock; every other node watches (with a data
 * watch, which a vanished node cannot leave behind) only the node just
 * before it. The fencing token is made (ztoken.h) from the parent's pzxid
 * in the getChildren reply that showed our node first.
 *
 * Creates and deletes go out in multis (batch.c). The getChildren that
 * confirms a new node is sent right behind the multi that creates it,
 * without waiting for its reply: ZooKeeper answers one session's requests
 * in order, so it sees the node, and an uncontended grant costs one round
 * trip.
 *
 * A zlock outlives the table's interest in it ("detached", hold == NULL)
 * until its node is known to be gone: a create whose reply was lost is
 * looked for by name after reconnecting, and deletes are retried until they
 * succeed, the node is gone, or the session is.
 */
#include "config.h"
#include "batch.h"

#include <event2/event.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#include "log.h"
#include "ztoken.h"

/* How often ancestors may be re-created for one acquisition before we wait
 * for the retry timer (a container parent can vanish between two calls). */
#define CREATE_ATTEMPTS 5

enum zl_step {
    ZL_IDLE,       /* nothing in flight: waiting for a connection or the retry timer */
    ZL_CREATING,   /* create sent */
    ZL_FINDING,    /* getChildren sent to find a node whose create reply was lost */
    ZL_LISTING,    /* getChildren sent: is our node first? */
    ZL_WATCHING,   /* getData watch on our predecessor sent or set */
    ZL_ASKING,     /* our predecessor with a lock-delay vanished: did its session end? */
    ZL_DELAYING,   /* it did: its lock-delay runs (delay_timer) before we look again */
    ZL_HELD,       /* our node is first and the lock table has the grant */
    ZL_DELETING,   /* delete sent */
    /* leases (see "leases" below) */
    ZL_CONVERTING, /* our ephemeral node holds while a lease node replaces it */
    ZL_CHECKING,   /* getData watch on our lease node sent */
    ZL_LEASED,     /* our lease node exists and is watched; the table has the grant */
};

struct zlock {
    struct zk *zk;
    struct hold *hold;         /* the table's request; NULL once it let go (detached) */
    TAILQ_ENTRY(zlock) link;   /* zk->zlocks, in creation order */
    uint64_t id;               /* unique within this daemon; part of the node name */
    unsigned gen;              /* bumped by every request; older replies are stale */
    enum zl_step step;
    bool try;                  /* answer busy instead of waiting */
    enum lock_mode mode;       /* what the request asks for; part of the node name */
    unsigned limit;            /* LOCK_LIMIT only */
    bool data_stale;           /* the node's data names an owner that left (handover) */
    bool data_writing;         /* a write of the node's data is in flight */
    bool create_uncertain;     /* a create was sent and its reply lost */
    bool listing_sent;         /* a getChildren went out right behind the create's multi */
    unsigned create_attempts;
    int64_t ttl_ms;            /* > 0: the request is for a lease */
    int64_t delay_ms;          /* the request's lock-delay; part of the node name */
    int64_t pred_delay_ms;     /* ZL_WATCHING: the predecessor's lock-delay */
    int64_t pred_session;      /* ZL_WATCHING: its ephemeral owner, once read; 0: none */
    struct event *delay_timer; /* ZL_DELAYING: ends the predecessor's lock-delay; owned */
    bool lease;                /* our node is (to be) a persistent lease node */
    bool create_sent;          /* lease: its node is created once, never again */
    bool granted;              /* lease: the table has the grant */
    uint64_t ephemeral_id;     /* lease: the zlock whose node holds until ours exists */
    unsigned handoffs;         /* grants passed on locally since `token`'s zxid */
    uint64_t token;            /* the last token granted with our node */
    unsigned epoch;            /* bumped whenever `node` changes: a turn's setData names one */
    bool awaiting_token;       /* passed on at a turn's end: the hold waits (step HELD) */
    bool idle;                 /* released, our node kept for a local LOCK (zk->idle) */
    bool child_watched;        /* a child watch on the parent is set (idle nodes) */
    bool contended;            /* that watch fired: another daemon may wait */
    int64_t idle_until_us;     /* idle: locks_mono_us() when the node goes */
    TAILQ_ENTRY(zlock) idle_link;
    char *parent;              /* <root>/locks/<name>; malloc'd */
    char *node;                /* our node's full path once known; malloc'd */
};

/* Context of one request, or of one watch; freed by its completion / event. */
struct zcall {
    struct zk *zk;
    uint64_t id;               /* the zlock's id, looked up again on completion */
    unsigned gen;
    int64_t sent_us;           /* locks_mono_us() when the request was sent */
    struct zcall *watch;       /* getData only: the watch's context, freed here if unset */
    TAILQ_ENTRY(zcall) link;   /* zk->watches, for watch contexts only */
};

static void zl_start(struct zlock *zl);
static void zl_node_gone(struct zlock *zl);
static void zl_list(struct zlock *zl);
static void zl_list_watching(struct zlock *zl);
static void zl_delete(struct zlock *zl);
static void zl_lease_check(struct zlock *zl);
static void zl_idle_end(struct zlock *zl);

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
    /* The conversion this lease zlock was for holds nothing any more. */
    if (zl->ephemeral_id) {
        struct zlock *eph = zl_find(zk, zl->ephemeral_id);
        if (eph && eph->step == ZL_CONVERTING) {
            eph->step = ZL_IDLE;
            zk_arm_retry(zk);
        }
    }
    zl_idle_end(zl);
    if (zl->delay_timer)
        event_free(zl->delay_timer);
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

/* A context for a second request of the current step, sent before the
 * first is answered (the listing behind a create): same generation. */
static struct zcall *zcall_also(struct zlock *zl)
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
static struct zlock *zcall_done(const void *data)
{
    struct zcall *c = (struct zcall *)data;
    struct zk *zk = c->zk;
    struct zlock *zl = zl_find(zk, c->id);
    unsigned gen = c->gen;

    zk->outstanding--;
    zk_request_done(zk, c->sent_us);
    free(c);
    if (zk->state == ZK_EXPIRED || !zl || zl->gen != gen)
        return NULL;
    return zl;
}

static void watch_forget(struct zk *zk, struct zcall *w)
{
    TAILQ_REMOVE(&zk->watches, w, link);
    free(w);
}

/* zcall_done() for a watched request: without ZOK no watch was
 * registered, and its context is freed too. */
static struct zlock *zcall_done_watched(const void *data, int rc)
{
    const struct zcall *c = data;

    if (rc != ZOK && c->watch)
        watch_forget(c->zk, c->watch);
    return zcall_done(data);
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

/*
 * Starts a request step that also sets a watch: the request's context,
 * whose `watch` is the watch's own context (registered in zk->watches), or
 * NULL (parked, retried later) when out of memory.
 */
static struct zcall *zl_begin_watched(struct zlock *zl, enum zl_step step)
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
    TAILQ_INSERT_TAIL(&zl->zk->watches, w, link);
    return c;
}

/* zk_sent() for a watched request: an unsent request sets no watch. */
static void zl_sent_watched(struct zlock *zl, struct zcall *c, int rc, const char *what)
{
    struct zcall *w = c->watch;

    if (!zk_sent(zl, c, rc, what))
        watch_forget(zl->zk, w);
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

static const char *basename_of(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

/* The sequence number ZooKeeper appended: the last 10 characters. */
long long zk_seq_of(const char *child)
{
    size_t len = strlen(child);

    return len >= 10 ? strtoll(child + len - 10, NULL, 10) : -1;
}

/*
 * "<daemon>-<id>-<tag>-<seq>": tag "shared", "limit<n>" or "excl", followed
 * by ".lease" on a lease's persistent node, then by ".d<ms>" when the
 * request has a lock-delay (PROTOCOL.md, Lock-delay). Nodes
 * of daemons older than lock modes have no tag (the field before the
 * sequence is their numeric id): they are exclusive, as is anything
 * unknown, which can only make this daemon wait longer, never grant more.
 */
struct zkind zk_kind_of(const char *child)
{
    struct zkind k = { LOCK_EXCLUSIVE, 0, false, 0 };
    size_t len = strlen(child);
    const char *end, *tag, *d;
    char *stop;
    unsigned long n;

    if (len < 12 || child[len - 11] != '-')
        return k;
    end = child + len - 11;
    for (tag = end; tag > child && tag[-1] != '-'; tag--)
        ;
    /* ".d<ms>" last: digits only, up to the bound of delay=. */
    for (d = end; d > tag && d[-1] >= '0' && d[-1] <= '9'; d--)
        ;
    if (d < end && d - tag >= 2 && d[-1] == 'd' && d[-2] == '.') {
        n = strtoul(d, &stop, 10);
        if (stop == end && n <= 60000) {
            k.delay_ms = (int64_t)n;
            end = d - 2;
        }
    }
    if (end - tag > 6 && strncmp(end - 6, ".lease", 6) == 0) {
        k.lease = true;
        end -= 6;
    }
    if (end - tag == 6 && strncmp(tag, "shared", 6) == 0) {
        k.mode = LOCK_SHARED;
    } else if (end - tag > 5 && strncmp(tag, "limit", 5) == 0 && tag[5] >= '1' &&
               tag[5] <= '9') {
        n = strtoul(tag + 5, &stop, 10);
        if (stop == end && n <= LOCK_LIMIT_MAX) {
            k.mode = LOCK_LIMIT;
            k.limit = (unsigned)n;
        }
    }
    return k;
}

/* Semaphores of one limit are one class, read/write locks the other:
 * requests of different classes never hold a name together. */
bool zk_same_class(struct zkind a, struct zkind b)
{
    if ((a.mode == LOCK_LIMIT) != (b.mode == LOCK_LIMIT))
        return false;
    return a.mode != LOCK_LIMIT || a.limit == b.limit;
}

/* Context of a write to our node outside the request steps (its data, a
 * turn's token): names the node by the zlock's id and epoch. */
struct nodecall {
    struct zk *zk;
    uint64_t id;
    unsigned epoch;
};

/* A nodecall for zl's current node; NULL when out of memory. */
static struct nodecall *nodecall_new(const struct zlock *zl)
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
static struct zlock *nodecall_done(struct nodecall *n)
{
    struct zk *zk = n->zk;
    struct zlock *zl = zl_find(zk, n->id);
    bool current = zl && zl->epoch == n->epoch;

    zk->outstanding--;
    free(n);
    return current ? zl : NULL;
}

static void zl_write_data(struct zlock *zl);

/* Completion of a write of our node's data, which nothing waits for. */
static void on_data_written(int rc, const struct Stat *stat, const void *data)
{
    struct zlock *zl = nodecall_done((struct nodecall *)data);

    if (rc != ZOK && rc != ZNONODE)
        log_debug("zk: writing a node's data: %s", zerror(rc));
    if (!zl)
        return;
    zl->data_writing = false;
    if (rc != ZOK && rc != ZNONODE)
        zl->data_stale = true;    /* written again once connected (zl_start) */
    else if (zl->data_stale && (zl->hold || zl->idle))
        zl_write_data(zl);        /* the owner changed meanwhile */
}

/* "daemon=<id> client=<owner>": who a node is for, read by STATUS. */
static void zl_format_data(const struct zlock *zl, char *buf, size_t len)
{
    const char *label = zl->hold ? hold_label(zl->hold) : NULL;
    int n = snprintf(buf, len, "daemon=%s client=%s%s%s", zl->zk->daemon_id,
                     zl->hold ? hold_owner_desc(zl->hold) : "-", label ? " label=" : "",
                     label ? label : "");

    /* A lease's end, as wall-clock ms: what any daemon may remove it by. */
    if (zl->lease && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " deadline=%lld",
                 (long long)(zk_now_ms() + zl->ttl_ms));
}

/*
 * Rewrites our node's data with the current owner. A data watch on the
 * node fires, so this also wakes the waiter behind it, which is how a
 * semaphore's next waiter learns that it is now the first one. Sent
 * without a zcall: nothing waits for the reply, and the zlock's
 * generation (which keeps a pending watch valid) must not change.
 */
/*
 * Queues a write of our node's current data (batch.c: it may share a
 * multi's zxid with other writes); done gets a nodecall. Returns ZOK, or
 * the error with nothing sent.
 */
static int zl_send_data(struct zlock *zl, stat_completion_t done)
{
    struct zk *zk = zl->zk;
    struct nodecall *n = nodecall_new(zl);
    char data[512];
    int rc;

    if (!n)
        return ZSYSTEMERROR;
    zl_format_data(zl, data, sizeof(data));
    if ((rc = zk_batch_set(zk, zl->node, data, (int)strlen(data), -1, done, n)) != ZOK) {
        free(n);
        return rc;
    }
    zl->data_stale = false;
    zl->data_writing = true;
    zk->outstanding++;
    zk_kick(zk);
    return ZOK;
}

static void zl_write_data(struct zlock *zl)
{
    zl->data_stale = true;
    /* One write at a time: its completion sends the newest owner, so a lock
     * passed on locally many times meanwhile costs one more write, not one
     * per handoff. No token depends on its zxid. */
    if (zl->node && zl->zk->state == ZK_CONNECTED && !zl->data_writing)
        zl_send_data(zl, on_data_written);
}

/*
 * The grant's token, made from zxid into zl->token (ztoken.h). A zxid too
 * large for a token is refused rather than wrapped: the request gets
 * UNAVAILABLE and our node goes. Returns false then (zl is detached).
 */
static bool zl_take_token(struct zlock *zl, int64_t zxid)
{
    struct hold *h;

    if (ztoken_of_zxid(zxid, &zl->token))
        return true;
    log_error("zk: zxid %lld is beyond what a fencing token can carry (2^56); "
              "not granting %s", (long long)zxid, zl->parent);
    h = zl_detach(zl);
    zl_delete(zl);
    if (h)
        locks_backend_refused(h, LOCKS_UNAVAILABLE);
    return false;
}

/* ---------------------------------------------------------------- create */

static void on_ancestor_created(int rc, const char *value, const void *data)
{
    struct zk *zk = (struct zk *)data;

    zk->outstanding--;
    /* A ZNOAUTH comes again for the node created under it, which says why. */
    if (rc != ZOK && rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZCLOSING &&
        rc != ZSESSIONEXPIRED && rc != ZOPERATIONTIMEOUT && rc != ZNOAUTH)
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
        if (zoo_acreate(zk->zh, path, NULL, -1, zk->acl, flags,
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
        if (zl->data_stale)
            zl_write_data(zl);
        if (zl->listing_sent && zl->hold && !zl->lease) {
            zl->listing_sent = false;
            zl->step = ZL_LISTING;   /* its reply comes next: on_listed */
            break;
        }
        zl_start(zl);            /* a new request makes that listing stale */
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

static void on_listed(int rc, const struct String_vector *children, const struct Stat *stat,
                      const void *data);

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

static void zl_create(struct zlock *zl)
{
    struct zk *zk = zl->zk;
    char prefix[512], data[512];
    struct zcall *c = zl_begin(zl, ZL_CREATING);

    if (!c)
        return;
    char tag[24];

    if (zl->mode == LOCK_LIMIT)
        snprintf(tag, sizeof(tag), "limit%u%s", zl->limit, zl->lease ? ".lease" : "");
    else
        snprintf(tag, sizeof(tag), "%s%s", zl->mode == LOCK_SHARED ? "shared" : "excl",
                 zl->lease ? ".lease" : "");
    if (zl->delay_ms > 0)
        snprintf(tag + strlen(tag), sizeof(tag) - strlen(tag), ".d%lld",
                 (long long)zl->delay_ms);
    /* The daemon id and request id make the node findable if the reply is
     * lost; the tag tells every daemon what the node asks for. */
    snprintf(prefix, sizeof(prefix), "%s/%s-%llu-%s-", zl->parent, zk->daemon_id,
             (unsigned long long)zl->id, tag);
    zl->data_stale = false;
    zl_format_data(zl, data, sizeof(data));
    zl->create_attempts++;
    zl->create_sent = true;
    zl->listing_sent = false;
    /* A lease outlives this daemon's session: its node is persistent. */
    zk_sent(zl, c,
            zk_batch_create(zk, prefix, data, (int)strlen(data), zk->acl,
                            zl->lease ? ZOO_PERSISTENT_SEQUENTIAL : ZOO_EPHEMERAL_SEQUENTIAL,
                            on_created, zl->lease ? NULL : on_create_sent, c),
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
            if (zl->data_stale)
                zl_write_data(zl);
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

/*
 * Lock-delay across daemons (PROTOCOL.md, Lock-delay). A node whose request
 * has a lock-delay says so in its name (".d<ms>"). When such a node we
 * wait behind vanishes, its daemon either deleted it (a release, or the
 * end of a lock-delay it kept itself) or its session ended. ZooKeeper
 * deletes a session's ephemeral nodes in one transaction, its session
 * node (session.c) among them: if that node is gone too, the holder
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
        zl_start(zl);        /* lists again, or deletes a node nobody wants */
}

static void zl_begin_delay(struct zlock *zl)
{
    struct timeval tv = { zl->pred_delay_ms / 1000, (zl->pred_delay_ms % 1000) * 1000 };

    if (!zl->delay_timer && !(zl->delay_timer = evtimer_new(zl->zk->base, on_delay_over, zl))) {
        zl_list(zl);         /* out of memory: cannot wait, a fencing token still orders */
        return;
    }
    zl->gen++;               /* nothing in flight is ours any more */
    zl->step = ZL_DELAYING;
    zl->zk->session_delays++;
    log_info("zk: the holder before %s in %s ended with its daemon's session, without a "
             "release: waiting its lock-delay of %lld ms", zl->node, zl->parent,
             (long long)zl->pred_delay_ms);
    evtimer_add(zl->delay_timer, &tv);
}

static void on_session_asked(int rc, const struct Stat *stat, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl || zl->step != ZL_ASKING)
        return;
    if (!zl->hold) {
        zl_start(zl);
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

/*
 * A watch event reached the watch context ctx (a zcall in zk->watches).
 * Session events reach every registered watcher and do not remove it:
 * NULL. Otherwise the watch fired once and its context is freed; returns
 * its zlock if still there (or NULL), and *gen the context's gen.
 */
static struct zlock *watch_fired(void *ctx, int type, unsigned *gen)
{
    struct zcall *w = ctx;
    struct zk *zk = w->zk;
    struct zlock *zl;

    if (type == ZOO_SESSION_EVENT)
        return NULL;
    zl = zl_find(zk, w->id);
    *gen = w->gen;
    TAILQ_REMOVE(&zk->watches, w, link);
    free(w);
    return zl;
}

static void on_watch_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    unsigned gen;
    struct zlock *zl = watch_fired(ctx, type, &gen);

    if (zl && zl->gen == gen && zl->step == ZL_LEASED) {
        zl_lease_check(zl);  /* renewed, or gone */
    } else if (zl && zl->gen == gen && zl->step == ZL_WATCHING && type == ZOO_DELETED_EVENT &&
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

/* What one listing of the parent says about our node. */
struct zview {
    bool found;                /* our node is among the children */
    bool first_other_class;    /* the first holder is of another class than ours */
    unsigned below;            /* nodes before ours */
    unsigned after;            /* nodes after ours */
    unsigned leases_after;     /* lease nodes after ours */
    const char *pred;          /* the node just before ours, or NULL */
    const char *blocker;       /* the last node before ours that is not shared, or NULL */
    const char *lease;         /* the first lease node, or NULL */
    const char *lease_blocker; /* the first lease node that is not shared, or NULL */
};

/*
 * Reads one listing of the parent. A lease node is a holder wherever it
 * sits: it replaced an ephemeral node that was first in line when it was
 * created (zl_convert), so waiters queued behind that one may come before
 * it. Every lease node seen is handed to the janitor (lease.c).
 */
static void zl_view(const struct zlock *zl, const struct String_vector *children,
                    struct zview *v)
{
    const char *mine = basename_of(zl->node), *lowest = NULL;
    long long my_seq = zk_seq_of(mine), pred_seq = -1, blocker_seq = -1;
    struct zkind me = { zl->mode, zl->limit, false, 0 };
    char path[512];

    memset(v, 0, sizeof(*v));
    /* Order by the sequence suffix alone: prefixes differ between daemons. */
    for (int i = 0; i < children->count; i++) {
        const char *child = children->data[i];
        long long seq = zk_seq_of(child);
        struct zkind k = zk_kind_of(child);

        if (!lowest || seq < zk_seq_of(lowest))
            lowest = child;
        if (k.lease && strcmp(child, mine) != 0) {
            if (!v->lease || seq < zk_seq_of(v->lease))
                v->lease = child;
            if (k.mode != LOCK_SHARED && (!v->lease_blocker || seq < zk_seq_of(v->lease_blocker)))
                v->lease_blocker = child;
            v->leases_after += seq > my_seq;
            snprintf(path, sizeof(path), "%s/%s", zl->parent, child);
            zk_lease_track(zl->zk, path);
        }
        if (strcmp(child, mine) == 0) {
            v->found = true;
        } else if (seq > my_seq) {
            v->after++;
        } else {
            v->below++;
            if (seq > pred_seq) {
                pred_seq = seq;
                v->pred = child;
            }
            if (seq > blocker_seq && k.mode != LOCK_SHARED) {
                blocker_seq = seq;
                v->blocker = child;
            }
        }
    }
    /* The class of the name is its first holder's: a lease if any. */
    if (v->lease)
        lowest = v->lease;
    v->first_other_class = lowest && strcmp(lowest, mine) != 0 &&
                           !zk_same_class(zk_kind_of(lowest), me);
}

/*
 * Who may hold, over every node before ours whatever its class, and every
 * lease node: exclusive - no node before it and no lease; shared - no node
 * before it but shared ones, no lease but shared ones; limit=n - fewer than
 * n nodes before it and leases after it. A node whose first holder is of
 * another class is refused (CONFLICT), so classes never hold together.
 */
static bool zl_may_hold(const struct zlock *zl, const struct zview *v)
{
    switch (zl->mode) {
    case LOCK_SHARED:
        return v->blocker == NULL && v->lease_blocker == NULL;
    case LOCK_LIMIT:
        return v->below + v->leases_after < zl->limit;
    default:
        return v->below == 0 && v->lease == NULL;
    }
}

/* Waits for the one change that can let us in (no herd): the node just
 * before ours goes (exclusive), the last non-shared one before ours goes
 * (shared), then the leases that still hold; for a semaphore's first
 * waiter, any holder goes. */
static void zl_wait(struct zlock *zl, const struct zview *v, bool children_watched)
{
    if (zl->mode == LOCK_LIMIT && (v->below + v->leases_after == zl->limit ||
                                   v->leases_after > 0)) {
        /* First in line (or behind leases, which may sit anywhere): any
         * holder's departure may let us in. The listing that showed this
         * must itself have set the watch, or a departure between the two
         * would go unnoticed. */
        if (children_watched) {
            zl->step = ZL_WATCHING;
            log_debug("zk: %s waits for one of %u holders", zl->node, zl->limit);
        } else {
            zl_list_watching(zl);
        }
        return;
    }
    /* A later semaphore waiter watches its predecessor, which rewrites its
     * own data once granted (see zl_write_data): then this one is first. */
    if (zl->mode == LOCK_SHARED)
        zl_watch(zl, v->blocker ? v->blocker : v->lease_blocker);
    else
        zl_watch(zl, v->pred ? v->pred : v->lease);
}

static void zl_convert(struct zlock *zl);

static void on_listed(int rc, const struct String_vector *children, const struct Stat *stat,
                      const void *data)
{
    /* A listing that set a child watch (zl_list_watching) succeeded. */
    bool children_watched = rc == ZOK && ((const struct zcall *)data)->watch;
    struct zlock *zl = zcall_done_watched(data, rc);
    struct zview v;
    struct hold *h;

    /* A listing sent behind a create that failed or is sent again: the
     * create's own reply decides (on_created). */
    if (!zl || zl->step != ZL_LISTING)
        return;
    if (rc == ZNONODE) {     /* the parent, and so our node, is gone */
        zl_node_gone(zl);
        zl_start(zl);
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
        zl_start(zl);
        return;
    }
    if (!zl->hold) {
        zl_delete(zl);
        return;
    }
    if (v.first_other_class) {    /* another daemon uses the name in another mode */
        h = zl_detach(zl);
        zl_delete(zl);
        locks_backend_refused(h, LOCKS_CONFLICT);
        return;
    }
    if (zl_may_hold(zl, &v) && zl->ttl_ms > 0) {
        zl_convert(zl);      /* a lease: a persistent node takes over from ours */
        return;
    }
    if (zl_may_hold(zl, &v)) {
        if (!zl_take_token(zl, stat->pzxid))
            return;
        zl->step = ZL_HELD;
        zl->create_attempts = 0;
        zl->handoffs = 0;
        log_debug("zk: %s holds %s, token %llu", zl->node, zl->parent,
                  (unsigned long long)zl->token);
        /* The semaphore waiter after ours may have seen this node waiting
         * and watch it: tell it that it may be first now. Whoever lists
         * after this listing sees this node holding and needs no word. */
        if (zl->mode == LOCK_LIMIT && v.after > 0)
            zl_write_data(zl);
        locks_backend_granted(zl->hold, zl->token);
        return;
    }
    if (zl->try) {           /* not first: give the place back, answer busy */
        h = zl_detach(zl);
        zl_delete(zl);
        locks_backend_refused(h, LOCKS_BUSY);
        return;
    }
    zl_wait(zl, &v, children_watched);
}

static void zl_list(struct zlock *zl)
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

/* ---------------------------------------------------------------- delete */

static void on_deleted(int rc, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl)
        return;
    if (rc == ZOK || rc == ZNONODE) {
        zl_node_gone(zl);
        zl_start(zl);
        return;
    }
    if (rc == ZSESSIONEXPIRED && !zl->lease) {   /* the node went with the session */
        zl_node_gone(zl);
    }
    zl_park(zl, rc);
}

/* Our node goes now, or, while not connected, once connected (zl_start
 * deletes a node nobody holds); a pending reply or watch is made stale. */
static void zl_delete_when_connected(struct zlock *zl)
{
    if (zl->zk->state == ZK_CONNECTED) {
        zl_delete(zl);
    } else {
        zl->gen++;
        zl->step = ZL_IDLE;
    }
}

static void zl_delete(struct zlock *zl)
{
    struct zcall *c;

    zl_idle_end(zl);
    c = zl_begin(zl, ZL_DELETING);

    if (!c)
        return;
    log_debug("zk: deleting %s", zl->node);
    zk_sent(zl, c, zk_batch_delete(zl->zk, zl->node, -1, on_deleted, c), "delete");
}

/* ---------------------------------------------------------------- leases */

/*
 * A lease must outlive this daemon's session, so it cannot be an ephemeral
 * node. A lease request queues like any other, with an ephemeral node; once
 * that node may hold, zl_convert() hands the hold to a new zlock that
 * creates a persistent lease node ("...<tag>.lease-<seq>", its deadline in
 * its data) and deletes the ephemeral node only once the lease node
 * exists. A lease node holds wherever it sits (zl_view), so nobody gets
 * in between. The token is made from the lease node's czxid: created after the
 * grant, it exceeds every earlier token, and a later grant happens after
 * its delete. The lease node is created once: if that create's outcome is
 * lost and the node is not found afterwards, the request fails rather
 * than create a lease that no longer follows a holding node.
 */

static struct zlock *zl_new(struct zk *zk, struct hold *h, const char *parent);

/* The ephemeral node that held for the conversion is no longer needed. */
static void zl_release_ephemeral(struct zlock *zl)
{
    struct zlock *eph = zl->ephemeral_id ? zl_find(zl->zk, zl->ephemeral_id) : NULL;

    zl->ephemeral_id = 0;
    if (eph && eph->step == ZL_CONVERTING)
        zl_start(eph);       /* detached: deletes its node */
}

static void zl_convert(struct zlock *zl)
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
    zl_start(lz);
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
        if (!zl_take_token(zl, stat->czxid))
            return;
        zl->granted = true;
        log_debug("zk: lease %s holds %s, token %llu", zl->node, zl->parent,
                  (unsigned long long)zl->token);
        locks_backend_granted(zl->hold, zl->token);
    }
}

/* Reads our lease node (its czxid makes the token) and watches it. */
static void zl_lease_check(struct zlock *zl)
{
    struct zcall *c = zl_begin_watched(zl, ZL_CHECKING);

    if (c)
        zl_sent_watched(zl, c, zoo_awget(zl->zk->zh, zl->node, on_watch_event, c->watch,
                                         on_lease_read, c), "getData");
}

/* zl_start() for a lease zlock. */
static void zl_lease_start(struct zlock *zl)
{
    if (zl->node) {
        if (zl->hold)
            zl_lease_check(zl);
        else
            zl_delete(zl);
    } else if (zl->create_uncertain) {
        zl_find_lost_create(zl);
    } else if (zl->hold && !zl->create_sent) {
        zl_create(zl);
    } else {
        zl_lease_gone(zl, "lease-ended");
    }
}

/* --------------------------------------------------------- local handoff */

/*
 * A holder releases and the next waiter is a client of this daemon: our
 * node stays first in line and the lock passes on, at most local_handoff
 * times in a row; then the node goes back to the queue (below). The new
 * holder's token is the last one plus 1 (ztoken.h): the last one was made
 * from a zxid read or written after our node became first, and any later
 * holder elsewhere is granted after our node's delete, whose zxid is
 * greater, so its token exceeds ours by at least 2^8 - local_handoff. A
 * handoff writes nothing to ZooKeeper but the new owner's name, for STATUS
 * elsewhere, and that write is not waited for.
 */

static void zl_node_gone(struct zlock *zl)
{
    zl_idle_end(zl);
    free(zl->node);
    zl->node = NULL;
    zl->epoch++;             /* writes and watches for the old node are stale */
    zl->child_watched = false;
    zl->contended = false;
    zl->data_writing = false;
    zl->handoffs = 0;
    zl->awaiting_token = false;  /* a waiting holder queues again with a new node */
}

/* Grants the holder waiting at a turn's end the token of zxid, passed on. */
static void zl_grant_turn(struct zlock *zl, int64_t zxid)
{
    zl->awaiting_token = false;
    zl->handoffs = 0;
    if (!zl_take_token(zl, zxid))
        return;
    log_debug("zk: %s passed on, new turn, token %llu", zl->node,
              (unsigned long long)zl->token);
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

static void zl_check_turn(struct zlock *zl)
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

    if (!zl || zl->lease || zl->step != ZL_HELD || zl->awaiting_token ||
        zk->state != ZK_CONNECTED || !zk->settings->zk_local_handoff)
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
 */

/* Idle nodes kept at once, at most; the oldest goes first. */
#define IDLE_MAX 1024

static int by_parent(const void *a, const void *b)
{
    return strcmp(((const struct zlock *)a)->parent, ((const struct zlock *)b)->parent);
}

static void zl_idle_end(struct zlock *zl)
{
    struct zk *zk = zl->zk;

    if (!zl->idle)
        return;
    zl->idle = false;
    tdelete(zl, &zk->idle_by_parent, by_parent);
    TAILQ_REMOVE(&zk->idle, zl, idle_link);
    zk->nidle--;
}

/* The idle node goes now, or once connected. */
static void zl_idle_drop(struct zlock *zl)
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

/* The child watch: its context is a zcall in zk->watches whose gen holds
 * the epoch of the node it was set for. */
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
    TAILQ_INSERT_TAIL(&zk->watches, w, link);
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
    struct zlock *zl = TAILQ_FIRST(&zk->idle);
    int64_t wait_us;
    struct timeval tv;

    if (!zl)
        return;
    wait_us = zl->idle_until_us - locks_mono_us();
    if (wait_us < 0)
        wait_us = 0;
    tv.tv_sec = wait_us / 1000000;
    tv.tv_usec = wait_us % 1000000;
    evtimer_add(zk->idle_timer, &tv);
}

void zk_idle_expire(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    int64_t now = locks_mono_us();
    struct zlock *zl;

    while ((zl = TAILQ_FIRST(&zk->idle)) && zl->idle_until_us <= now)
        zl_idle_drop(zl);
    zk_idle_arm(zk);
}

/* zl's holder released it and nobody here waits: keep the node? */
static bool zl_idle_begin(struct zlock *zl)
{
    struct zk *zk = zl->zk;
    const struct settings *s = zk->settings;
    void *slot;

    if (!s->zk_keep_idle_ms || zl->handoffs >= s->zk_local_handoff || zl->lease ||
        zl->mode != LOCK_EXCLUSIVE || zl->step != ZL_HELD || zl->awaiting_token ||
        zl->contended || !zl->node || zk->state != ZK_CONNECTED)
        return false;
    if (zk->nidle >= IDLE_MAX)
        zl_idle_drop(TAILQ_FIRST(&zk->idle));
    /* One node per name: another would be a second acquisition, not idle. */
    if (!(slot = tsearch(zl, &zk->idle_by_parent, by_parent)) || *(struct zlock **)slot != zl)
        return false;
    zl->idle = true;
    zl->idle_until_us = locks_mono_us() + (int64_t)s->zk_keep_idle_ms * 1000;
    TAILQ_INSERT_TAIL(&zk->idle, zl, idle_link);
    zk->nidle++;
    if (!evtimer_pending(zk->idle_timer, NULL))
        zk_idle_arm(zk);
    zl_write_data(zl);       /* "client=-": STATUS anywhere says free */
    if (!zl->child_watched)
        zl_watch_children(zl);
    return true;
}

/* A LOCK of the name of an idle node: takes it over, or returns false (the
 * caller drops the node and queues as usual). */
static bool zl_idle_adopt(struct zlock *zl, struct hold *h, uint64_t *token)
{
    struct zk *zk = zl->zk;

    if (hold_mode(h) != LOCK_EXCLUSIVE || hold_ttl_ms(h) > 0 || zl->contended ||
        hold_delay_ms(h) != zl->delay_ms ||
        zl->step != ZL_HELD || zk->state != ZK_CONNECTED ||
        zl->handoffs >= zk->settings->zk_local_handoff)
        return false;
    zl_idle_end(zl);
    zl->hold = h;
    zl->try = hold_try(h);
    hold_set_backend_data(h, zl);
    /* As a local handoff: local_handoff <= ZTOKEN_HANDOFFS_MAX, no carry. */
    zl->handoffs++;
    *token = ++zl->token;
    zk->idle_reuses++;
    zl_write_data(zl);
    log_debug("zk: %s taken over while idle, token %llu", zl->node, (unsigned long long)*token);
    return true;
}

/* Looks up the idle node of a name (its parent path), or NULL. */
static struct zlock *zl_idle_find(struct zk *zk, const char *parent)
{
    struct zlock key = { .parent = (char *)parent };
    void *found = tfind(&key, &zk->idle_by_parent, by_parent);

    return found ? *(struct zlock **)found : NULL;
}

/* Decides the next request from what is known, whatever happened before. */
static void zl_start(struct zlock *zl)
{
    zl->step = ZL_IDLE;
    if (zk_serving(zl->zk) && zl->lease) {
        zl_lease_start(zl);
        return;
    }
    if (!zk_serving(zl->zk)) {
        zl_try_unavailable(zl);
        if (!zl->hold && !zl->node && !zl->create_uncertain)
            zl_free(zl);     /* nothing of it in ZooKeeper */
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
        zl_create(zl);
    } else {
        zl_free(zl);
    }
}

void zk_locks_resume(struct zk *zk)
{
    struct zlock *zl, *next;

    if (zk->barrier)
        return;
    for (zl = TAILQ_FIRST(&zk->zlocks); zl; zl = next) {
        next = TAILQ_NEXT(zl, link);
        if (zl->step == ZL_IDLE)
            zl_start(zl);
    }
}

void zk_locks_forget_reads(struct zk *zk)
{
    struct zlock *zl;

    /* Writes stay in flight: their outcome says where our nodes are. A
     * listing sent behind a create is not believed: on_created lists again. */
    TAILQ_FOREACH(zl, &zk->zlocks, link)
        if (zl->step == ZL_LISTING || zl->step == ZL_WATCHING || zl->step == ZL_CHECKING ||
            zl->step == ZL_LEASED) {
            zl->gen++;
            zl->step = ZL_IDLE;
        } else if (zl->step == ZL_CREATING) {
            zl->listing_sent = false;
        }
}

/* ------------------------------------------------------- backend calls */

/* A zlock for h, in h's backend slot; parent is copied. NULL when out of memory. */
static struct zlock *zl_new(struct zk *zk, struct hold *h, const char *parent)
{
    struct zlock *zl = calloc(1, sizeof(*zl));

    if (!zl || !(zl->parent = strdup(parent))) {
        free(zl);
        log_error("zk: out of memory acquiring %s", hold_name(h));
        return NULL;
    }
    zl->zk = zk;
    zl->hold = h;
    zl->id = ++zk->next_id;
    zl->try = hold_try(h);
    zl->mode = hold_mode(h);
    zl->limit = hold_limit(h);
    zl->ttl_ms = hold_ttl_ms(h);
    zl->delay_ms = hold_delay_ms(h);
    if (!tsearch(zl, &zk->by_id, by_id)) {
        free(zl->parent);
        free(zl);
        return NULL;
    }
    TAILQ_INSERT_TAIL(&zk->zlocks, zl, link);
    zk->nzlocks++;
    hold_set_backend_data(h, zl);
    return zl;
}

enum locks_result zk_lock_acquire(void *impl, struct hold *h, uint64_t *token)
{
    struct zk *zk = impl;
    struct zlock *zl;
    char parent[512];

    /* A try cannot be answered without ZooKeeper: say so now. */
    if (hold_try(h) && !zk_serving(zk))
        return LOCKS_UNAVAILABLE;
    snprintf(parent, sizeof(parent), "%s/locks/%s", zk->root, hold_name(h));
    if ((zl = zl_idle_find(zk, parent))) {
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

/* The acquisition now serves h (the table moved it into h's slot). */
void zk_lock_handover(void *impl, struct hold *h)
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

/* Watch contexts still registered with a handle that went away: no event will come. */
static void zk_free_watches(struct zk *zk)
{
    struct zcall *w;

    while ((w = TAILQ_FIRST(&zk->watches))) {
        TAILQ_REMOVE(&zk->watches, w, link);
        free(w);
    }
}

void zk_locks_drop_held(struct zk *zk, const char *reason)
{
    struct zlock *zl, *next;

    for (zl = TAILQ_FIRST(&zk->zlocks); zl; zl = next) {
        next = TAILQ_NEXT(zl, link);
        if (zl->step == ZL_HELD && zl->hold && !zl->awaiting_token) {
            struct hold *h = zl_detach(zl);
            zl->step = ZL_IDLE;          /* node deleted once connected, if it survived */
            locks_backend_lost(h, reason);
        } else if (zl->idle) {
            zl_idle_drop(zl);            /* not trusted any more either */
        }
    }
}

void zk_locks_handle_closed(struct zk *zk, bool session_gone)
{
    struct zlock *zl, *next;

    zk_free_watches(zk);
    for (zl = TAILQ_FIRST(&zk->zlocks); zl; zl = next) {
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

    zk_free_watches(zk);
    while ((zl = TAILQ_FIRST(&zk->zlocks)))
        zl_free(zl);
}
