/*
 * zk_presence.c - distributed mode, bottom layer: what a connected session
 * does before anything else (zk.h draws the layers). Registered as the
 * session's first listener, on every connection it
 *
 * - sends a probe round now and then (a sync, then a write): what they
 *   prove moves `confirmed_at`, until when the session surely lives
 *   (CHECK's window, zk_presence_window_ms; the lost timer of
 *   zk_vouch.c);
 * - makes the session node, <root>/sessions/<id>, on a new session (the
 *   lock-delay of zk_fair.c looks for it);
 * - checks, once per run, that every daemon of the root has our [zookeeper]
 *   nonfair and [interop]: the session node's data says them ("daemon=<id>
 *   nonfair=<globs> interop=<digest>"),
 *   and the other session nodes are read once ours exists; until then no
 *   lock is taken, and a daemon that disagrees serves nothing, for good;
 * - looks for the chroot of [zookeeper] hosts, which ZooKeeper does not
 *   make: until it is found nothing is sent for locks, leases or STATUS
 *   (zk_serving), and once found the session tells its listeners
 *   `serving`.
 */
#include "config.h"
#include "zk_session.h"
#include "zk_window.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "locks.h"
#include "log.h"
#include "settings.h"

static void zk_register_session(struct zk *zk, bool parent_made);
static void nonfair_check(struct zk *zk);


/*
 * CHECK's window (PROTOCOL.md, CHECK, "How confirmed_at is established").
 * Only a ZooKeeper leader ends sessions: it expires ours no sooner than the
 * timeout after the last touch of it that it received (SessionTrackerImpl,
 * ExpiryQueue.update), and a new leader gives every session a full timeout
 * from its start. A server touches a session when a request of it arrives
 * (ZooKeeperServer.submitRequestNow), but a follower passes its touches on
 * only in its answers to the leader's pings (Learner.ping), which the leader
 * queues every half tick (Leader.lead) and reads in order with everything
 * else the follower sends (LearnerHandler.run). An answer from our server
 * therefore proves nothing about the leader: a follower cut off from it
 * answers reads for syncLimit ticks. So every zk_probe_period_ms a round:
 *
 *   1. a sync, which a follower forwards to the leader and answers after the
 *      leader's answer (FollowerRequestProcessor, Leader.processSync);
 *   2. once that is answered, a setData of our session node: a write, which
 *      a leader commits only with a quorum (no newer leader had started when
 *      it was sent) and reads after everything the follower sent before it.
 *
 * When the write succeeds on the connection the round began on,
 * confirmed_at moves to the send time of the latest probe answered at least
 * W (3/4 of tick_ms) before the round's sync was sent. In between, the
 * leader queued a ping ahead of its answer to the sync; the follower
 * answered it, with that probe's touch, before the sync's answer reached
 * us; and the leader read that before our write, which it committed: the
 * session lives at least until confirmed_at + timeout. A follower that
 * leaves its leader closes its client connections (Learner.shutdown), so
 * one connection means one leader.
 */
int64_t zk_presence_window_ms(const struct zk *zk)
{
    if (zk->state == ZK_EXPIRED || !zk->session_id || !zk->confirmed_at_ms)
        return 0;
    return zk_window_left_ms(zk->confirmed_at_ms, zk_timeout_ms(zk), locks_mono_ms());
}

int64_t zk_presence_window_end_ms(const struct zk *zk)
{
    return zk->confirmed_at_ms && zk->state != ZK_EXPIRED
           ? zk_window_end_at(zk->confirmed_at_ms, zk_timeout_ms(zk)) : 0;
}

struct probe_round {
    struct zk *zk;
    int64_t session_id;
    uint64_t conn;           /* zk->conn_serial when it began */
    int64_t sync_sent_ms, write_sent_ms;
};

/* Our session node's data, which a probe writes again unchanged. */
static void session_node_data(const struct zk *zk, char *buf, size_t len)
{
    const char *nf = zk->settings->zk_nonfair;
    char interop[32];

    /* interop=: a digest of [interop] (conf/interop.h), compared as nonfair=. */
    interop_digest(&zk->settings->interop, interop, sizeof(interop));
    snprintf(buf, len, "daemon=%s nonfair=%s interop=%s", zk->daemon_id, nf ? nf : "",
             interop);
}

static bool probe_current(const struct probe_round *pr, int rc)
{
    struct zk *zk = pr->zk;

    return rc == ZOK && zk->state == ZK_CONNECTED && pr->session_id == zk->session_id &&
           pr->conn == zk->conn_serial;
}

static void probe_answered(struct zk *zk, int64_t sent_ms, int64_t answered_ms)
{
    if (zk->nprobes == ZK_PROBES) {
        memmove(&zk->probes[0], &zk->probes[1], sizeof(zk->probes[0]) * (ZK_PROBES - 1));
        zk->nprobes--;
    }
    zk->probes[zk->nprobes].sent_ms = sent_ms;
    zk->probes[zk->nprobes].answered_ms = answered_ms;
    zk->nprobes++;
}

/* The round's write was committed: confirmed_at moves (see above). */
static void probe_confirm(struct zk *zk, const struct probe_round *pr)
{
    const struct zk_probe *p = zk_window_probe(zk->probes, zk->nprobes, zk_ping_wait_ms(zk),
                                               pr->sync_sent_ms);

    if (p && p->sent_ms > zk->confirmed_at_ms) {
        zk->confirmed_at_ms = p->sent_ms;
        zk->probe_confirms++;
        zk_session_confirmed(zk);
    }
}

static void on_probe_written(int rc, const struct Stat *stat, const void *data)
{
    struct probe_round *pr = (struct probe_round *)data;
    struct zk *zk = pr->zk;

    zk->outstanding--;
    if (pr->conn == zk->conn_serial)
        zk->probing = false;
    if (probe_current(pr, rc)) {
        probe_confirm(zk, pr);
        probe_answered(zk, pr->write_sent_ms, locks_mono_ms());
    } else if (rc == ZNONODE && zk_serving(zk)) {
        /* Our session node went (an operator?): made again, and the next
         * round writes it. */
        log_warn("zk: the session node of this daemon is missing; making it again");
        zk_register_session(zk, false);
    }
    free(pr);
}

static void on_probe_synced(int rc, const char *value, const void *data)
{
    struct probe_round *pr = (struct probe_round *)data;
    struct zk *zk = pr->zk;
    char path[512], buf[600];

    zk->outstanding--;
    if (!probe_current(pr, rc)) {
        if (pr->conn == zk->conn_serial)
            zk->probing = false;
        free(pr);
        return;
    }
    pr->write_sent_ms = locks_mono_ms();
    probe_answered(zk, pr->sync_sent_ms, pr->write_sent_ms);
    /* Nothing to write while the chroot is missing or the daemons of the
     * root disagree: nothing is held then either. */
    zk_session_path(zk, zk->session_id, path, sizeof(path));
    session_node_data(zk, buf, sizeof(buf));
    if (!zk_reachable(zk) ||
        zoo_aset(zk->zh, path, buf, (int)strlen(buf), -1, on_probe_written, pr) != ZOK) {
        zk->probing = false;
        free(pr);
        return;
    }
    zk->outstanding++;
    zk_kick(zk);
}

/* Starts a round: a sync, then (on its answer) a write. */
static void probe_round(struct zk *zk)
{
    struct probe_round *pr;

    if (zk->probing || zk->state != ZK_CONNECTED || !zk->zh || !(pr = calloc(1, sizeof(*pr))))
        return;
    pr->zk = zk;
    pr->session_id = zk->session_id;
    pr->conn = zk->conn_serial;
    pr->sync_sent_ms = locks_mono_ms();
    if (zoo_async(zk->zh, "/", on_probe_synced, pr) != ZOK) {
        free(pr);
        return;
    }
    zk->probing = true;
    zk->probe_rounds++;
    zk->outstanding++;
    zk_kick(zk);
}

static void on_confirm_timer(evutil_socket_t fd, short what, void *arg)
{
    probe_round(arg);
}

static void arm_confirm(struct zk *zk)
{
    int ms = zk_probe_period_ms(zk);
    struct timeval tv;

    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    event_del(zk->confirm);
    event_assign(zk->confirm, zk->base, -1, EV_PERSIST, on_confirm_timer, zk);
    event_add(zk->confirm, &tv);
}

#define CHROOT_RECHECK_MS 10000

static void on_chroot_checked(int rc, const struct Stat *stat, const void *data)
{
    struct zk *zk = (struct zk *)data;
    const char *chroot = strchr(zk->settings->zk_hosts, '/');
    struct timeval tv = { CHROOT_RECHECK_MS / 1000, 0 };

    zk->outstanding--;
    if (rc == ZNONODE) {
        /* It cannot heal by itself: said once, then looked for every 10 s. */
        if (!zk->chroot_reported)
            log_error("zk: the chroot %s of [zookeeper] hosts does not exist: requests "
                      "answer ERR UNAVAILABLE and /healthz 503 until it is created "
                      "(zkCli.sh create %s)", chroot, chroot);
        zk->chroot_reported = true;
        evtimer_add(zk->chroot_timer, &tv);
    } else if (rc == ZOK) {
        zk->chroot_checked = true;
        if (zk->chroot_missing) {
            if (zk->chroot_reported)
                log_info("zk: the chroot %s exists now", chroot);
            zk->chroot_missing = false;
            zk->chroot_reported = false;
            /* Our session node could not be made without it. */
            if (!zk->nonfair_checked && !zk->nonfair_disagrees)
                zk_register_session(zk, false);
            zk_session_serving(zk);
        }
    }
}

/* A chroot in hosts must exist: ZooKeeper does not make it. Looked for in
 * each new session until found (every path is relative to it); until then
 * nothing is sent for locks, leases or STATUS (zk_serving). */
static void zk_check_chroot(struct zk *zk)
{
    if (zk->chroot_checked || !strchr(zk->settings->zk_hosts, '/'))
        return;
    if (zoo_aexists(zk->zh, "/", 0, on_chroot_checked, zk) == ZOK) {
        zk->outstanding++;
        zk_kick(zk);
    }
}

static void on_chroot_timer(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;

    if (zk->state == ZK_CONNECTED)
        zk_check_chroot(zk);
}

/*
 * Every session has an ephemeral node of its own, <root>/sessions/<id>,
 * which ZooKeeper deletes in the same transaction as the session's lock
 * nodes when the session ends. A daemon that sees a lock node with a
 * lock-delay vanish looks for it: gone, the holder did not release the
 * lock, its session ended (zk_fair.c, lock-delay). Without it (not made
 * yet, refused) other daemons only wait longer.
 */
struct registration {
    struct zk *zk;
    int64_t session_id;
    bool parent_made;        /* the second attempt, after making the parents */
};

static void on_session_registered(int rc, const char *value, const void *data);

static void zk_register_session(struct zk *zk, bool parent_made)
{
    char path[512], data[600];
    struct registration *ctx = malloc(sizeof(*ctx));

    if (!ctx)
        return;
    ctx->zk = zk;
    ctx->session_id = zk->session_id;
    ctx->parent_made = parent_made;
    zk_session_path(zk, zk->session_id, path, sizeof(path));
    session_node_data(zk, data, sizeof(data));
    if (zoo_acreate(zk->zh, path, data, (int)strlen(data), zk->acl, ZOO_EPHEMERAL,
                    on_session_registered, ctx) != ZOK) {
        free(ctx);
        return;
    }
    zk->outstanding++;
    zk_kick(zk);
}

static void on_parent_made(int rc, const char *value, const void *data)
{
    struct zk *zk = (struct zk *)data;

    zk->outstanding--;
}

static void on_session_registered(int rc, const char *value, const void *data)
{
    struct registration *ctx = (struct registration *)data;
    struct zk *zk = ctx->zk;
    char path[512], *slash;

    zk->outstanding--;
    if (rc == ZNONODE && !ctx->parent_made && zk->state == ZK_CONNECTED &&
        ctx->session_id == zk->session_id) {
        /* <root>/sessions (or <root>) is missing: make it, then again. */
        zk_session_path(zk, ctx->session_id, path, sizeof(path));
        if ((slash = strrchr(path, '/')))
            *slash = '\0';
        if ((slash = strrchr(path, '/')) && slash != path) {
            *slash = '\0';
            if (zoo_acreate(zk->zh, path, NULL, -1, zk->acl, 0, on_parent_made, zk) == ZOK)
                zk->outstanding++;
            *slash = '/';
        }
        if (zoo_acreate(zk->zh, path, NULL, -1, zk->acl, 0, on_parent_made, zk) == ZOK)
            zk->outstanding++;
        zk_register_session(zk, true);
    } else if (rc != ZOK && rc != ZNODEEXISTS && rc != ZCLOSING && rc != ZSESSIONEXPIRED &&
               rc != ZCONNECTIONLOSS) {
        log_warn("zk: cannot create %s's session node under %s/sessions: %s; other daemons "
                 "will apply lock-delays after this daemon's releases too", zk->daemon_id,
                 zk->root, zerror(rc));
    }
    /* Ours exists (or cannot be made): now the others'. */
    if (!(rc == ZNONODE && !ctx->parent_made) && ctx->session_id == zk->session_id &&
        zk->state == ZK_CONNECTED && !zk->nonfair_checked && !zk->nonfair_disagrees)
        nonfair_check(zk);
    free(ctx);
}

/* ---------------------------------------------------- [zookeeper] nonfair */

/*
 * Every daemon of a root must take the same names non-fair: a fair and a
 * non-fair daemon would both grant one (PROTOCOL.md, "Non-fair names").
 * Ours is written into our session node first, then the others are read:
 * of two daemons started at once, the one that lists second sees the
 * first. A node without nonfair= (a daemon older than the setting) means
 * none. A daemon that disagrees serves nothing and deletes its session
 * node, so that the daemons started after it are not held up by it.
 */
struct agreement {
    struct zk *zk;
    int64_t session_id;
    unsigned pending;        /* reads in flight */
    bool failed;             /* one could not be read: looked at again next connection */
};

static void nonfair_done(struct agreement *a)
{
    struct zk *zk = a->zk;

    if (a->pending)
        return;
    if (!a->failed && !zk->nonfair_disagrees && a->session_id == zk->session_id &&
        zk->state == ZK_CONNECTED && !zk->nonfair_checked) {
        zk->nonfair_checked = true;
        log_info("zk: every daemon of root %s has [zookeeper] nonfair '%s' and %u [interop] "
                 "rules alike", zk->root,
                  zk->settings->zk_nonfair ? zk->settings->zk_nonfair : "",
                  zk->settings->interop.n);
        zk_session_serving(zk);
    }
    free(a);
}

static void on_removed(int rc, const void *data)
{
    ((struct zk *)data)->outstanding--;
}

/* The value of key= ("nonfair=") in a session node's data, or dflt. */
static void field_of(const char *value, int len, const char *key, const char *dflt,
                     char *buf, size_t buflen)
{
    char data[1024];
    size_t klen = strlen(key);

    snprintf(data, sizeof(data), "%.*s", len > 0 ? len : 0, len > 0 ? value : "");
    snprintf(buf, buflen, "%s", dflt);
    for (const char *p = data; (p = strstr(p, key)); p++)
        if (p == data || p[-1] == ' ') {
            snprintf(buf, buflen, "%.*s", (int)strcspn(p + klen, " "), p + klen);
            return;
        }
}

/* Says that nothing is served any more, and why; our session node goes,
 * so that daemons started later do not stop for it. */
static void disagree(struct zk *zk)
{
    char path[512];

    zk->nonfair_disagrees = true;
    zk->nonfair_since_ms = locks_mono_ms();
    log_error("zk: %s", zk->nonfair_why);
    zk_session_path(zk, zk->session_id, path, sizeof(path));
    if (zoo_adelete(zk->zh, path, -1, on_removed, zk) == ZOK)
        zk->outstanding++;
    zk_kick(zk);
}

/*
 * [interop] must be the same on every daemon of a root, rules and order
 * (PROTOCOL.md, "Sharing locks with ZooKeeper recipes"): a daemon that
 * queued a name at another path, or with other node names, would grant it
 * beside us. A session node without interop= (a daemon older than the
 * section) means none. Like a nonfair disagreement, nothing is served.
 */
static void interop_compare(struct zk *zk, const char *value, int len, int64_t owner)
{
    char mine[32], theirs[64], who[128];

    interop_digest(&zk->settings->interop, mine, sizeof(mine));
    field_of(value, len, "interop=", "", theirs, sizeof(theirs));
    if (strcmp(mine, theirs) == 0)
        return;
    field_of(value, len, "daemon=", "?", who, sizeof(who));
    snprintf(zk->nonfair_why, sizeof(zk->nonfair_why),
             "[interop] differs between this daemon (%u rules, digest '%s') and daemon %s "
             "(session 0x%llx, digest '%s'): every daemon of root %s must have the same "
             "[interop] rules in the same order; make them equal and restart",
             zk->settings->interop.n, mine, who, (unsigned long long)owner, theirs, zk->root);
    disagree(zk);
}

static void on_other_read(int rc, const char *value, int len, const struct Stat *stat,
                          const void *data)
{
    struct agreement *a = (struct agreement *)data;
    struct zk *zk = a->zk;
    const char *mine = zk->settings->zk_nonfair ? zk->settings->zk_nonfair : "";
    char theirs[512], who[128];

    zk->outstanding--;
    a->pending--;
    if (rc == ZNONODE || a->session_id != zk->session_id) {
        nonfair_done(a);     /* gone: its daemon stopped */
        return;
    }
    if (rc != ZOK) {
        a->failed = true;
        nonfair_done(a);
        return;
    }
    field_of(value, len, "nonfair=", "", theirs, sizeof(theirs));
    if (strcmp(theirs, mine) == 0 && !zk->nonfair_disagrees)
        interop_compare(zk, value, len, stat->ephemeralOwner);
    if (strcmp(theirs, mine) != 0 && !zk->nonfair_disagrees) {
        field_of(value, len, "daemon=", "?", who, sizeof(who));
        snprintf(zk->nonfair_why, sizeof(zk->nonfair_why),
                 "[zookeeper] nonfair is '%s' here but '%s' on daemon %s (session 0x%llx): "
                 "every daemon of root %s must have the same setting; change it and restart",
                 mine, theirs, who, (unsigned long long)stat->ephemeralOwner, zk->root);
        disagree(zk);
    }
    nonfair_done(a);
}

static void on_sessions_listed(int rc, const struct String_vector *children, const void *data)
{
    struct agreement *a = (struct agreement *)data;
    struct zk *zk = a->zk;
    char mine[32], path[512];

    zk->outstanding--;
    a->pending--;
    if (rc != ZOK || a->session_id != zk->session_id) {
        a->failed = true;
        nonfair_done(a);
        return;
    }
    snprintf(mine, sizeof(mine), "%llx", (unsigned long long)zk->session_id);
    for (int i = 0; i < children->count; i++) {
        if (strcmp(children->data[i], mine) == 0)
            continue;
        snprintf(path, sizeof(path), "%s/sessions/%s", zk->root, children->data[i]);
        if (zoo_aget(zk->zh, path, 0, on_other_read, a) != ZOK) {
            a->failed = true;
            break;
        }
        zk->outstanding++;
        a->pending++;
    }
    zk_kick(zk);
    nonfair_done(a);
}

static void nonfair_check(struct zk *zk)
{
    char path[512];
    struct agreement *a = calloc(1, sizeof(*a));

    if (!a)
        return;              /* looked at again next connection */
    a->zk = zk;
    a->session_id = zk->session_id;
    snprintf(path, sizeof(path), "%s/sessions", zk->root);
    if (zoo_aget_children(zk->zh, path, 0, on_sessions_listed, a) != ZOK) {
        free(a);
        return;
    }
    a->pending = 1;
    zk->outstanding++;
    zk_kick(zk);
}

/* The session's `connected`: before any request of the layers above. */
static void presence_connected(void *arg, bool fresh)
{
    struct zk *zk = arg;

    /* Probes count only on the connection they were answered on. confirmed_at
     * itself stays: what a leader received stays received. */
    zk->probing = false;         /* one in flight on a lost connection failed */
    zk->nprobes = 0;
    probe_round(zk);
    arm_confirm(zk);
    /* Again until the agreement on [zookeeper] nonfair was checked. */
    if ((fresh || !zk->nonfair_checked) && !zk->nonfair_disagrees)
        zk_register_session(zk, false);
    zk_check_chroot(zk);
}

int zk_presence_init(struct zk *zk)
{
    static const struct zk_listener listener = { .connected = presence_connected };

    zk->confirm = evtimer_new(zk->base, on_confirm_timer, zk);
    zk->chroot_timer = evtimer_new(zk->base, on_chroot_timer, zk);
    zk->chroot_missing = strchr(zk->settings->zk_hosts, '/') != NULL;   /* until it is found */
    zk->chroot_missing_since_ms = locks_mono_ms();
    if (!zk->confirm || !zk->chroot_timer)
        return -1;
    return zk_session_listen(zk, &listener, zk);
}

void zk_presence_free(struct zk *zk)
{
    if (zk->confirm)
        event_free(zk->confirm);
    if (zk->chroot_timer)
        event_free(zk->chroot_timer);
}
