/*
 * zk_int.h - what the parts of distributed mode share; nothing else
 * in the daemon includes it.
 *
 *   zk_session.c  the backend object, the libevent adapter that drives the
 *                 single-threaded C client, and the session's lifecycle
 *   zk_lock.c     the lock recipe: one ZooKeeper node per request
 *   zk_query.c    read-only queries for STATUS and HOLDERS
 *   zk_watch.c    WATCH: a name's nodes watched for changes
 *   zk_lease.c    leases: persistent nodes, the janitor
 *   zk_batch.c    group commit: lock nodes' creates and deletes as multis
 *
 * Only these files include zookeeper.h. Everything runs on the event loop
 * thread; completions and watchers run inside zookeeper_process().
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
    /* zk_lock.c's bookkeeping */
    void *by_id;                       /* tsearch tree of struct zlock by id */
    TAILQ_HEAD(, zlock) zlocks;
    TAILQ_HEAD(, zcall) watches;       /* watch contexts registered with zh */
    TAILQ_HEAD(, backend_watch) watched; /* zk_watch.c: WATCHed names, cancelled ones too
                                        * until their ZooKeeper watches are gone */
    uint64_t next_id;
    unsigned nzlocks;
    void *idle_by_parent;              /* tsearch tree of idle struct zlock by parent path */
    TAILQ_HEAD(, zlock) idle;          /* idle zlocks, oldest first (see keep_idle_ms) */
    unsigned nidle;
    uint64_t idle_reuses;              /* LOCKs that took an idle node over */
    struct event *idle_timer;          /* ends the oldest idle zlock's keep */
    /* zk_batch.c's bookkeeping */
    TAILQ_HEAD(, zwrite) wq;           /* writes waiting for a multi, oldest first */
    unsigned wq_len;
    unsigned batches_inflight;         /* multis sent and not answered */
    uint64_t batches, batched_ops;     /* multis sent; writes they carried (re-sends too) */
    uint64_t batch_failures;           /* multis that failed (an operation, or the connection) */
    uint64_t batch_resent;             /* writes sent again after another one failed */
    /* zk_lease.c's bookkeeping */
    void *lease_nodes;                 /* tsearch tree of tracked lease nodes by path */
    bool swept;                        /* the start-up sweep ran */
    uint64_t leases_removed;           /* expired lease nodes this daemon removed */
    uint64_t sessions, reconnects, outstanding;
    uint64_t session_delays;           /* lock-delays begun because a holder's session ended */
    struct histogram request_hist;     /* the lock recipe's requests, sent to completed */
    struct histogram batch_hist;       /* writes per multi sent (zk_batch.c) */
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

/* zk_session.c */
/* Requests were queued: make sure the loop wants to write them. */
void zk_kick(struct zk *zk);
/* Something failed: run zk_locks_resume() after a back-off. */
void zk_arm_retry(struct zk *zk);
/* ZooKeeper answered ZNOAUTH for a change to path: says why, at most once
 * a minute. */
void zk_report_noauth(struct zk *zk, const char *path);
/* A request sent at sent_us (locks_mono_us()) completed: for /metrics. */
void zk_request_done(struct zk *zk, int64_t sent_us);
/* The path of the node that exists while session `id` lives (lock-delay,
 * zk_lock.c): <root>/sessions/<id in hex>. */
void zk_session_path(const struct zk *zk, int64_t id, char *buf, size_t len);

/* zk_lock.c: the backend ops for acquisitions (see backend.h). */
enum locks_result zk_lock_acquire(void *impl, struct hold *h, uint64_t *token);
void zk_lock_handover(void *impl, struct hold *h);
void zk_lock_let_go(void *impl, struct hold *h);
enum locks_result zk_lock_pass_on(void *impl, struct hold *from, struct hold *to,
                                  uint64_t *token);
/* Restarts every request that waits for the connection or a retry
 * (nothing while zk->barrier is set). */
void zk_locks_resume(struct zk *zk);
/* The event loop stalled: replies to reads in flight may be stale. Makes
 * them ignored and their requests wait for zk_locks_resume(). */
void zk_locks_forget_reads(struct zk *zk);
/* Every held lock is given up with reason; the waiters keep waiting. */
void zk_locks_drop_held(struct zk *zk, const char *reason);
/* The handle was closed. session_gone: with its session, so every node
 * went with it; otherwise the session lives on and only watches are gone. */
void zk_locks_handle_closed(struct zk *zk, bool session_gone);
/* Frees every request without calling the table (the daemon is stopping). */
void zk_locks_free_all(struct zk *zk);
/* The idle_timer's callback: deletes the idle nodes whose keep is over. */
void zk_idle_expire(evutil_socket_t fd, short what, void *arg);
/* The sequence number ZooKeeper appended to child: its last 10 digits. */
long long zk_seq_of(const char *child);
/* What a lock node asks for, from the tag in its name. */
struct zkind {
    enum lock_mode mode;
    unsigned limit;            /* LOCK_LIMIT only */
    bool lease;                /* a lease's persistent node (tag has ".lease") */
    int64_t delay_ms;          /* its request's lock-delay (tag ends in ".d<ms>"), or 0 */
};
struct zkind zk_kind_of(const char *child);
/* Semaphores of one limit are one class, read/write locks the other:
 * requests of different classes never hold a name together. */
bool zk_same_class(struct zkind a, struct zkind b);

/* Wall-clock milliseconds since the epoch: what lease deadlines are in. */
int64_t zk_now_ms(void);

/* zk_lease.c: leases in ZooKeeper (see the comment there). */
/* Makes sure the lease node at path is removed once it has expired
 * (lease_skew_ms after its deadline), unless it is renewed or removed
 * first. path is copied. */
void zk_lease_track(struct zk *zk, const char *path);
/* The backend op (backend.h): release or renew a lease by its token. */
enum locks_result zk_lease_op(void *impl, const char *name, uint64_t token, int64_t ttl_ms,
                              backend_lease_cb cb, void *arg, struct backend_lease_op **pending);
void zk_lease_op_cancel(void *impl, struct backend_lease_op *op);
/* A new session: look for expired leases under the root, once per daemon run. */
void zk_lease_sweep(struct zk *zk);
/* Frees the lease bookkeeping (the daemon is stopping). */
void zk_lease_free_all(struct zk *zk);

/* zk_batch.c: group commit (see the comment there). */
/* Told, with the write's arg, right after a multi carrying it was sent:
 * requests sent now are answered after that multi. */
typedef void (*zk_batch_sent_fn)(const void *arg);
/* Queue a create or a delete, as zoo_acreate / zoo_adelete would send it
 * (path and data are copied; acl is borrowed until it is sent). done runs
 * once with the outcome, later, on the loop thread. Returns ZOK, or
 * ZSYSTEMERROR (out of memory: nothing queued, done never runs). */
int zk_batch_create(struct zk *zk, const char *path, const char *data, int datalen,
                    const struct ACL_vector *acl, int flags, string_completion_t done,
                    zk_batch_sent_fn sent, const void *arg);
int zk_batch_delete(struct zk *zk, const char *path, int version, void_completion_t done,
                    const void *arg);
/* Queue a setData of a node, as zoo_aset would send it (data is copied).
 * Its zxid may be shared with the other writes of its multi. */
int zk_batch_set(struct zk *zk, const char *path, const char *data, int datalen, int version,
                 stat_completion_t done, const void *arg);
/* Sends queued writes while fewer than the window of multis are in flight
 * (connected only). Called after each pass of zookeeper_process() and from
 * the kick; not from inside a completion. */
void zk_batch_flush(struct zk *zk);
/* Every queued (unsent) write completes with rc: the connection or the
 * handle went away. */
void zk_batch_fail_queued(struct zk *zk, int rc);

/* zk_query.c: the backend ops for STATUS (see backend.h). */
struct backend_query *zk_query(void *impl, const char *name, struct backend_queue_info *now,
                               backend_query_cb cb, void *arg);
void zk_query_cancel(void *impl, struct backend_query *q);
/* zk_query.c: the backend ops for HOLDERS (see backend.h). */
struct backend_list *zk_list(void *impl, const char *glob, backend_name_filter may,
                             backend_list_cb cb, void *arg);
void zk_list_cancel(void *impl, struct backend_list *l);
/* zk_query.c: the state of one name as STATUS has it, from its node list
 * (children) and its first holder's data (NULL before it is read). */
void zk_queue_info(const struct String_vector *children, struct backend_queue_info *info,
                   const char **first);
void zk_queue_holder(const char *value, int len, const struct Stat *stat,
                     struct backend_queue_info *info);

/* zk_watch.c: the backend ops for WATCH (see backend.h), and what the
 * session tells them: connected (read every watched name again), handle
 * closed (every watch of that handle is gone). */
struct backend_watch *zk_watch(void *impl, const char *name, backend_watch_cb cb, void *arg);
void zk_watch_cancel(void *impl, struct backend_watch *w);
void zk_watches_connected(struct zk *zk);
void zk_watches_closed(struct zk *zk);
void zk_watches_free_all(struct zk *zk);   /* the backend is being freed */

#endif
