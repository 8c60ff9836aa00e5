/*
 * zk_lease.c - distributed mode: leases in ZooKeeper, beyond the lock recipe.
 *
 * A lease is a persistent node "<daemon>-<id>-<tag>.lease-<seq>" whose data
 * ends in "deadline=<wall-clock ms>" (zk_lease_lock.c creates it). Because it
 * outlives the daemon that made it, any daemon may end or renew it:
 *
 * - The janitor. Every lease node a daemon sees (its own, those in a
 *   listing of a name it queues for, those found by the start-up sweep) is
 *   tracked here: its data is read, and lease_skew_ms after its deadline,
 *   by this daemon's clock, it is read again and deleted if the deadline
 *   did not move - a conditional delete (the version read), so a renewal
 *   that lands in between wins. Several daemons may race to delete one
 *   node; one succeeds, the others see it gone.
 * - Release and renewal by token (UNLOCK <name> <token>, RENEW) of a lease
 *   that this daemon's table does not hold: the name's children are
 *   listed, each lease node read, and the one whose czxid makes the token is
 *   deleted or given a new deadline, again conditionally on its version.
 *   An expired lease (deadline passed) is NOT_HELD even if its node is
 *   still there.
 *
 * Mutual exclusion with skew: a holder counts its ttl from when it sent
 * its request, which is before the daemon computed deadline = now + ttl,
 * so the holder stops believing in the lease no later than the deadline.
 * Another daemon deletes the node only when its own clock passes deadline
 * + lease_skew_ms; if the clocks disagree by less than that, this happens
 * after the deadline in real time. Fencing tokens remain the safety net.
 */
#include "config.h"
#include "zk_recipes.h"

#include <event2/event.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "log.h"
#include "settings.h"
#include "ztoken.h"

/* Back-off when a lease node cannot be read now (no connection). */
#define LEASE_RETRY_MS 1000
/* An operation by token starts over at most this often after a race. */
#define LEASE_OP_ATTEMPTS 5

/* The deadline in a lease node's data, or -1. */
static int64_t deadline_of(const char *value, int len)
{
    char buf[512];
    const char *p;

    if (!value || len <= 0)
        return -1;
    snprintf(buf, sizeof(buf), "%.*s", len, value);
    p = strstr(buf, " deadline=");
    return p ? strtoll(p + 10, NULL, 10) : -1;
}

/* ------------------------------------------------------------- janitor */

struct lease_node {
    struct zk *zk;
    struct event *timer;       /* owned: the next look at the node */
    bool busy;                 /* a request for it is in flight */
    bool gone;                 /* untracked while busy: its completion frees it */
    char path[];
};

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct lease_node *)a)->path, ((const struct lease_node *)b)->path);
}

static void ln_free(struct lease_node *ln)
{
    event_free(ln->timer);
    free(ln);
}

static void ln_untrack(struct lease_node *ln)
{
    tdelete(ln, &ln->zk->leases->lease_nodes, by_path);
    if (ln->busy)
        ln->gone = true;     /* the completion in flight frees it */
    else
        ln_free(ln);
}

static void ln_arm(struct lease_node *ln, int64_t ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

    evtimer_add(ln->timer, &tv);
}

/* Its completion: the lease node, unless it stopped being tracked meanwhile. */
static struct lease_node *ln_done(const void *data)
{
    struct lease_node *ln = (struct lease_node *)data;

    ln->zk->outstanding--;
    ln->busy = false;
    if (ln->gone) {
        ln_free(ln);
        return NULL;
    }
    return ln;
}

static void ln_look(struct lease_node *ln);

static void on_expired_deleted(int rc, const void *data)
{
    struct lease_node *ln = ln_done(data);

    if (!ln)
        return;
    if (rc == ZOK) {
        ln->zk->leases->leases_removed++;
        log_info("zk: removed expired lease %s", ln->path);
    }
    if (rc == ZNOAUTH)       /* looking again would get it again: leave it to its owners */
        zk_report_noauth(ln->zk, ln->path);
    if (rc == ZOK || rc == ZNONODE || rc == ZNOAUTH)
        ln_untrack(ln);
    else
        ln_look(ln);         /* renewed meanwhile (ZBADVERSION), or trouble: look again */
}

static void on_lease_node_read(int rc, const char *value, int len, const struct Stat *stat,
                               const void *data)
{
    struct lease_node *ln = ln_done(data);
    struct zk *zk;
    int64_t deadline, due;

    if (!ln)
        return;
    zk = ln->zk;
    if (rc == ZNONODE) {     /* released or removed already */
        ln_untrack(ln);
        return;
    }
    if (rc != ZOK) {
        ln_arm(ln, LEASE_RETRY_MS);
        return;
    }
    deadline = deadline_of(value, len);
    if (deadline < 0) {
        log_warn("zk: lease node %s has no deadline; leaving it alone", ln->path);
        ln_untrack(ln);
        return;
    }
    /* Its lock-delay (in its name) follows its end: removed that much later. */
    due = deadline + (int64_t)zk->settings->zk_lease_skew_ms +
          zk_kind_of(strrchr(ln->path, '/') ? strrchr(ln->path, '/') + 1 : ln->path).delay_ms -
          zk_now_ms();
    if (due > 0) {
        ln_arm(ln, due);
        return;
    }
    ln->busy = true;
    if (zoo_adelete(zk->zh, ln->path, stat->version, on_expired_deleted, ln) == ZOK) {
        zk->outstanding++;
        zk_kick(zk);
    } else {
        ln->busy = false;
        ln_arm(ln, LEASE_RETRY_MS);
    }
}

/* Reads the node: when is it due? */
static void ln_look(struct lease_node *ln)
{
    struct zk *zk = ln->zk;

    if (ln->busy)
        return;
    if (!zk_serving(zk)) {
        ln_arm(ln, LEASE_RETRY_MS);
        return;
    }
    ln->busy = true;
    if (zoo_aget(zk->zh, ln->path, 0, on_lease_node_read, ln) == ZOK) {
        zk->outstanding++;
        zk_kick(zk);
    } else {
        ln->busy = false;
        ln_arm(ln, LEASE_RETRY_MS);
    }
}

static void on_ln_timer(evutil_socket_t fd, short what, void *arg)
{
    ln_look(arg);
}

void zk_lease_track(struct zk *zk, const char *path)
{
    size_t len = strlen(path);
    struct lease_node *ln, *key = malloc(sizeof(*key) + len + 1);
    void *found;

    if (!key)
        return;
    memcpy(key->path, path, len + 1);
    found = tfind(key, &zk->leases->lease_nodes, by_path);
    if (found) {
        free(key);
        return;
    }
    ln = key;
    ln->zk = zk;
    ln->busy = ln->gone = false;
    if (!(ln->timer = evtimer_new(zk->base, on_ln_timer, ln)) ||
        !tsearch(ln, &zk->leases->lease_nodes, by_path)) {
        if (ln->timer)
            event_free(ln->timer);
        free(ln);
        log_error("zk: out of memory tracking lease %s", path);
        return;
    }
    log_debug("zk: tracking lease %s", path);
    ln_look(ln);
}

static void free_ln_node(void *p)
{
    struct lease_node *ln = p;

    /* A request still in flight completes with ZCLOSING before this runs
     * (zookeeper_close), so nothing refers to ln any more. */
    ln_free(ln);
}

static void leases_free_parked(struct zk *zk);

void zk_lease_free_all(struct zk *zk)
{
    if (!zk->leases)
        return;
    leases_free_parked(zk);
    tdestroy(zk->leases->lease_nodes, free_ln_node);
    free(zk->leases);
    zk->leases = NULL;
}

/* ------------------------------------------------------ start-up sweep */

static void on_sweep_name(int rc, const struct String_vector *children, const void *data)
{
    struct zk *zk = (struct zk *)((const void **)data)[0];
    char *parent = (char *)((const void **)data)[1];
    char path[768];

    zk->outstanding--;
    for (int i = 0; rc == ZOK && i < children->count; i++)
        if (zk_kind_of(children->data[i]).lease) {
            snprintf(path, sizeof(path), "%s/%s", parent, children->data[i]);
            zk_lease_track(zk, path);
        }
    free((void *)data);
}

static void on_sweep_root(int rc, const struct String_vector *children, const void *data)
{
    struct zk *zk = (struct zk *)data;

    zk->outstanding--;
    if (rc != ZOK) {
        if (rc != ZNONODE)
            zk->leases->swept = false;      /* try again with the next session */
        return;
    }
    for (int i = 0; i < children->count; i++) {
        size_t len = strlen(zk->root) + strlen(children->data[i]) + 8;
        void **ctx = malloc(2 * sizeof(void *) + len);
        char *parent = (char *)(ctx + 2);

        if (!ctx)
            break;
        snprintf(parent, len, "%s/locks/%s", zk->root, children->data[i]);
        ctx[0] = zk;
        ctx[1] = parent;
        if (zoo_aget_children(zk->zh, parent, 0, on_sweep_name, ctx) == ZOK)
            zk->outstanding++;
        else
            free(ctx);
    }
    zk_kick(zk);
}

static void zk_lease_sweep(struct zk *zk)
{
    char path[300];

    if (zk->leases->swept)
        return;
    zk->leases->swept = true;
    snprintf(path, sizeof(path), "%s/locks", zk->root);
    if (zoo_aget_children(zk->zh, path, 0, on_sweep_root, zk) == ZOK) {
        zk->outstanding++;
        zk_kick(zk);
    } else {
        zk->leases->swept = false;
    }
}

/* ------------------------------------------------ release and renew by token */

struct backend_lease_op {
    struct zk *zk;
    backend_lease_cb cb;       /* NULL once cancelled */
    void *arg;
    uint64_t token;
    int64_t ttl_ms;            /* 0: release; LEASE_CHECK: only look */
    int64_t left_ms;           /* a check that found it held: until its deadline */
    unsigned attempts;
    unsigned pending;          /* reads in flight for the current attempt */
    bool matched;              /* the current attempt found the node */
    bool writing;              /* its delete or setData is in flight */
    bool trouble;              /* a read failed for another reason than ZNONODE */
    bool parked;               /* in zk->leases->parked, nothing sent yet */
    TAILQ_ENTRY(backend_lease_op) in_parked;
    enum locks_result result;  /* when matched and not writing */
    char parent[512];
};

static void op_finish(struct backend_lease_op *op, enum locks_result r)
{
    if (op->cb)
        op->cb(op->arg, r, op->left_ms);
    free(op);
}

static void op_start(struct backend_lease_op *op);

/* The delete or setData of an op: done, gone, or changed meanwhile. */
static void on_op_written(int rc, const void *data)
{
    struct backend_lease_op *op = (struct backend_lease_op *)data;

    op->zk->outstanding--;
    op->writing = false;
    if (rc == ZOK)
        op_finish(op, LOCKS_RELEASED);
    else if (rc == ZNONODE)
        op_finish(op, LOCKS_NOT_HELD);
    else if (rc == ZNOAUTH) {  /* trying again would get it again */
        zk_report_noauth(op->zk, op->parent);
        op_finish(op, op->cb ? LOCKS_UNAVAILABLE : LOCKS_NOT_HELD);
    } else {
        op_start(op);        /* ZBADVERSION: renewed or ended in between; or trouble */
    }
}

static void on_op_set(int rc, const struct Stat *stat, const void *data)
{
    on_op_written(rc, data);
}

/* One lease node of the name, read: is it the one, and still alive? */
static void on_op_read(int rc, const char *value, int len, const struct Stat *stat,
                       const void *data)
{
    void **ctx = (void **)data;
    struct backend_lease_op *op = ctx[0];
    const char *path = (const char *)(ctx + 1);
    struct zk *zk = op->zk;
    int64_t deadline;
    char buf[512], *p;
    int wrc = ZOK;
    uint64_t token;

    zk->outstanding--;
    op->pending--;
    op->trouble |= rc != ZOK && rc != ZNONODE;
    if (rc == ZOK && ztoken_of_zxid(stat->czxid, &token) && token == op->token && !op->matched) {
        op->matched = true;
        op->result = LOCKS_NOT_HELD;
        deadline = deadline_of(value, len);
        /* Cancelled, or expired (not held any more, node or not): done. */
        if (op->cb && deadline >= 0 && deadline >= zk_now_ms() && op->ttl_ms == LEASE_CHECK) {
            /* Nobody removes it before deadline + lease_skew_ms on their
             * clocks, which are within lease_skew_ms of ours: not before
             * our clock says deadline (PROTOCOL.md, CHECK). */
            op->result = LOCKS_RELEASED;
            op->left_ms = deadline - zk_now_ms() +
                          zk_kind_of(strrchr(path, '/') ? strrchr(path, '/') + 1 : path).delay_ms;
        } else if (op->cb && deadline >= 0 && deadline >= zk_now_ms()) {
            if (op->ttl_ms == 0) {
                wrc = zoo_adelete(zk->zh, path, stat->version, on_op_written, op);
            } else {
                /* Same data, a new deadline. */
                snprintf(buf, sizeof(buf), "%.*s", len, value);
                if ((p = strstr(buf, " deadline=")))
                    *p = '\0';
                snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), " deadline=%lld",
                         (long long)(zk_now_ms() + op->ttl_ms));
                wrc = zoo_aset(zk->zh, path, buf, (int)strlen(buf), stat->version, on_op_set,
                               op);
            }
            if (wrc == ZOK) {
                op->writing = true;
                zk->outstanding++;
                zk_kick(zk);
            } else {
                op->result = LOCKS_UNAVAILABLE;
            }
        }
    }
    free(ctx);
    /* Every read is answered before the write sent after one of them. */
    if (op->pending == 0 && !op->writing)
        op_finish(op, op->matched ? op->result
                      : op->trouble ? LOCKS_UNAVAILABLE : LOCKS_NOT_HELD);
}

static void on_op_listed(int rc, const struct String_vector *children, const void *data)
{
    struct backend_lease_op *op = (struct backend_lease_op *)data;
    struct zk *zk = op->zk;

    zk->outstanding--;
    if (rc == ZNONODE) {
        op_finish(op, LOCKS_NOT_HELD);
        return;
    }
    if (rc != ZOK || !op->cb) {
        op_finish(op, op->cb ? LOCKS_UNAVAILABLE : LOCKS_NOT_HELD);
        return;
    }
    /* Read every lease node of the name: its czxid makes its token. */
    op->matched = op->trouble = false;
    op->pending = 1;         /* held until every read is sent */
    for (int i = 0; i < children->count; i++) {
        size_t len = strlen(op->parent) + strlen(children->data[i]) + 2;
        void **ctx;

        if (!zk_kind_of(children->data[i]).lease || !(ctx = malloc(sizeof(void *) + len)))
            continue;
        ctx[0] = op;
        snprintf((char *)(ctx + 1), len, "%s/%s", op->parent, children->data[i]);
        if (zoo_aget(zk->zh, (char *)(ctx + 1), 0, on_op_read, ctx) == ZOK) {
            zk->outstanding++;
            op->pending++;
        } else {
            free(ctx);
        }
    }
    zk_kick(zk);
    if (--op->pending == 0)  /* no lease node at all */
        op_finish(op, LOCKS_NOT_HELD);
}

static void op_start(struct backend_lease_op *op)
{
    struct zk *zk = op->zk;

    if (!op->cb || !zk_serving(zk) || ++op->attempts > LEASE_OP_ATTEMPTS ||
        zoo_aget_children(zk->zh, op->parent, 0, on_op_listed, op) != ZOK) {
        op_finish(op, op->cb ? LOCKS_UNAVAILABLE : LOCKS_NOT_HELD);
        return;
    }
    zk->outstanding++;
    zk_kick(zk);
}

enum locks_result zk_lease_op(void *impl, const char *name, uint64_t token, int64_t ttl_ms,
                              backend_lease_cb cb, void *arg, struct backend_lease_op **pending)
{
    struct zk *zk = impl;
    struct backend_lease_op *op;

    if (!zk_serving(zk) && !zk_waits(zk))
        return LOCKS_UNAVAILABLE;
    if (!(op = calloc(1, sizeof(*op))))
        return LOCKS_NOMEM;
    op->zk = zk;
    op->cb = cb;
    op->arg = arg;
    op->token = token;
    op->ttl_ms = ttl_ms;
    snprintf(op->parent, sizeof(op->parent), "%s/locks/%s", zk->root, name);
    if (!zk_serving(zk)) {
        /* A handover's successor attaching (or the agreement check): the
         * op waits, as a watch does (leases_serving, leases_lost). */
        op->parked = true;
        TAILQ_INSERT_TAIL(&zk->leases->parked, op, in_parked);
        *pending = op;
        return LOCKS_WAITING;
    }
    if (zoo_aget_children(zk->zh, op->parent, 0, on_op_listed, op) != ZOK) {
        free(op);
        return LOCKS_UNAVAILABLE;
    }
    op->attempts = 1;
    zk->outstanding++;
    zk_kick(zk);
    *pending = op;
    return LOCKS_WAITING;
}

void zk_lease_op_cancel(void *impl, struct backend_lease_op *op)
{
    struct zk *zk = impl;

    if (op->parked) {        /* nothing in flight: freed now */
        TAILQ_REMOVE(&zk->leases->parked, op, in_parked);
        free(op);
        return;
    }
    op->cb = NULL;           /* freed by its completions */
}

/* At the end: parked ops whose owners did not cancel them (nobody to tell). */
static void leases_free_parked(struct zk *zk)
{
    struct backend_lease_op *op;

    while ((op = TAILQ_FIRST(&zk->leases->parked))) {
        TAILQ_REMOVE(&zk->leases->parked, op, in_parked);
        free(op);
    }
}

/* Ends or sends every parked op: sent when the session serves, else
 * answered ERR UNAVAILABLE when it can no longer be waited for. */
static void leases_unpark(struct zk *zk)
{
    struct backend_lease_op *op;

    while ((op = TAILQ_FIRST(&zk->leases->parked)) && (zk_serving(zk) || !zk_waits(zk))) {
        TAILQ_REMOVE(&zk->leases->parked, op, in_parked);
        op->parked = false;
        op_start(op);        /* answers UNAVAILABLE when not serving */
    }
}

/* The session's `serving`: parked ops go; a new session may sweep (once
 * per daemon run). */
static void leases_serving(void *arg)
{
    leases_unpark(arg);
    zk_lease_sweep(arg);
}

/* `lost`: an attach that failed ends what waited for it. */
static void leases_lost(void *arg, const char *reason)
{
    leases_unpark(arg);
}

int zk_lease_init(struct zk *zk)
{
    static const struct zk_listener listener = {
        .serving = leases_serving, .lost = leases_lost,
    };

    if (!(zk->leases = calloc(1, sizeof(*zk->leases))))
        return -1;
    TAILQ_INIT(&zk->leases->parked);
    return zk_session_listen(zk, &listener, zk);
}
