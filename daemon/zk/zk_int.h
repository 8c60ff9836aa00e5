/*
 * zk_int.h - the state of distributed mode (struct zk), which its files
 * share; nothing outside daemon/zk/ includes it. Each group of fields says
 * which file owns it (zk.h draws the layers; each layer's functions are in
 * its own header). Functions are never declared here.
 *
 * Only the files of daemon/zk/ include zookeeper.h. Everything runs on the
 * event loop thread; completions and watchers run inside
 * zookeeper_process().
 */
#ifndef LOCKBROKER_ZK_INT_H
#define LOCKBROKER_ZK_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <event2/util.h>
#include <sys/time.h>
#include <zookeeper/zookeeper.h>

#include "backend.h"
#include "settings.h"
#include "histogram.h"

struct event;
struct event_base;
struct settings;
struct zlock;
struct zcall;
struct zwrite;
struct zk_listener;
struct zl_hooks;

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
    struct event *down_report;         /* says, calmly, that ZooKeeper is unreachable */
    int64_t down_since_ms;             /* monotonic ms since not connected; 0 when connected */
    unsigned down_reports;             /* reports of the current outage so far */
    bool unresolved;                   /* the last handle could not be made (no host resolves) */
    bool in_process;                   /* inside zookeeper_process(): re-arm after it */
    bool kicked;
    int64_t heard_ms;                  /* monotonic ms when the server last spoke (0: never) */
    bool barrier;                      /* after a stall: resume nothing until a sync returns */
    struct event *confirm;             /* sends a confirmation read now and then (CHECK) */
    bool confirming;                   /* one is in flight */
    int64_t confirmed_ms;              /* monotonic ms when a request was sent that the
                                        * server of this session has answered since; the
                                        * session cannot expire before this + its timeout.
                                        * 0: none yet in this session */
    int negotiated_ms;
    int64_t session_id;
    struct {                           /* the layers above, in registration order */
        const struct zk_listener *l;   /* borrowed */
        void *arg;
    } listeners[8];                    /* ZK_LISTENERS_MAX (session.h) */
    unsigned nlisteners;
    const struct zl_hooks *zl_hooks;   /* the layer above the node machinery's (node.h) */
    /* zlock.c's bookkeeping */
    void *by_id;                       /* tsearch tree of struct zlock by id */
    TAILQ_HEAD(, zlock) zlocks;
    TAILQ_HEAD(, zcall) watches;       /* watch contexts registered with zh */
    uint64_t next_id;
    unsigned nzlocks;
    /* handoff.c's bookkeeping */
    void *idle_by_parent;              /* tsearch tree of idle struct zlock by parent path */
    TAILQ_HEAD(, zlock) idle;          /* idle zlocks, oldest first (see keep_idle_ms) */
    unsigned nidle;
    uint64_t idle_reuses;              /* LOCKs that took an idle node over */
    struct event *idle_timer;          /* ends the oldest idle zlock's keep */
    /* batch.c's bookkeeping */
    TAILQ_HEAD(, zwrite) wq;           /* writes waiting for a multi, oldest first */
    unsigned wq_len;
    unsigned batches_inflight;         /* multis sent and not answered */
    uint64_t batches, batched_ops;     /* multis sent; writes they carried (re-sends too) */
    uint64_t batch_failures;           /* multis that failed (an operation, or the connection) */
    uint64_t batch_resent;             /* writes sent again after another one failed */
    /* lease.c's bookkeeping */
    void *lease_nodes;                 /* tsearch tree of tracked lease nodes by path */
    bool swept;                        /* the start-up sweep ran */
    uint64_t leases_removed;           /* expired lease nodes this daemon removed */
    /* counters of every layer, for STATS (backend.c) */
    uint64_t sessions, reconnects, outstanding;
    uint64_t session_delays;           /* lock-delays begun because a holder's session ended (fair.c) */
    struct histogram request_hist;     /* the lock recipe's requests, sent to completed */
    struct histogram batch_hist;       /* writes per multi sent (batch.c) */
    char daemon_id[96];                /* "<host>-<pid>-<random>", unique per daemon run */
    char root[256];
    /* Who may change our nodes. Every create passes acl: the open ACL, or,
     * with [zookeeper] auth, read for anyone and all rights for the
     * session's digest identity (acl_entries). */
    const struct ACL_vector *acl;
    struct ACL acl_entries[2];
    struct ACL_vector acl_auth;
    char auth[SETTINGS_ZK_AUTH_MAX + 1];  /* "user:password", or "" without auth */
    bool auth_failed;                  /* the server refused it: retried slowly */
    bool chroot_checked;               /* the chroot in hosts was found */
    bool chroot_missing;               /* hosts names a chroot not found (yet): no lock,
                                        * lease or STATUS request is sent (zk_serving) */
    int64_t chroot_missing_since_ms;   /* monotonic ms, while chroot_missing */
    bool chroot_reported;              /* its absence is in the log, this time */
    struct event *chroot_timer;        /* looks for it again every CHROOT_RECHECK_MS */
    const char *stall_cause;           /* why the last handshake failed, or NULL; static */
    bool stall_reported;               /* that cause is in the log, in this outage */
    int64_t noauth_reported_ms;        /* when a ZNOAUTH was last explained in the log */
};

/* Lock, lease and STATUS requests can go out: a session, and its chroot exists. */
static inline bool zk_serving(const struct zk *zk)
{
    return zk->state == ZK_CONNECTED && !zk->chroot_missing;
}

#endif
