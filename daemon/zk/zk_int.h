/*
 * zk_int.h - the state of distributed mode (struct zk), which its files
 * share: the session's (zk_session.c, zk_loop.c, zk_vouch.c, zk_presence.c),
 * and a pointer to the state of each layer above, whose type only that
 * layer's header defines (zk.h draws the layers). Nothing outside daemon/zk/
 * includes it.
 *
 * Only the files of daemon/zk/ include zookeeper.h. Everything runs on the
 * event loop thread; completions and watchers run inside zookeeper_process().
 */
#ifndef LOCKBROKER_ZK_INT_H
#define LOCKBROKER_ZK_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <event2/util.h>
#include <sys/time.h>
#include <zookeeper/zookeeper.h>

#include "settings.h"

struct event;
struct event_base;
struct settings;
struct zk_listener;
struct zk_batch;
struct zk_nodes;
struct zk_idle;
struct zk_leases;
struct zk_watches;

enum zk_state { ZK_CONNECTING, ZK_CONNECTED, ZK_EXPIRED };

/* Listeners of one session, at most (zk_session.h). */
#define ZK_LISTENERS_MAX 8

/* A request of zk_presence.c's probe rounds that a server answered on the
 * current connection: when it was sent, and when its answer came. */
struct zk_probe {
    int64_t sent_ms, answered_ms;
};
/* Probes remembered: the rounds of at least one leader's ping interval
 * (zk_presence.c spaces rounds so that this many cover it). */
#define ZK_PROBES 40

struct zk {
    struct event_base *base;           /* borrowed */
    const struct settings *settings;   /* borrowed */
    zhandle_t *zh;                     /* owned; NULL between sessions */
    enum zk_state state;
    struct event *io;                  /* the handle's socket, no timeout; added only by zk_rearm */
    int io_fd;                         /* the fd io is added for; -1: io is not added */
    short io_what;                     /* and its EV_READ | EV_WRITE */
    struct event *io_timer;            /* the latest time zookeeper_interest() asked to be called */
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
    bool barrier;                      /* after a stall: resume nothing until a sync returns */
    /* CHECK's window (zk_presence.c, PROTOCOL.md "CHECK"): */
    struct event *confirm;             /* starts a probe round now and then */
    bool probing;                      /* a round (sync, then setData) is in flight */
    uint64_t conn_serial;              /* counts connections: a probe counts only on the one
                                        * it was sent and answered on */
    struct zk_probe probes[ZK_PROBES]; /* answered probes of this connection, oldest first */
    unsigned nprobes;
    int64_t conn_started_ms;           /* monotonic ms before the handshake of the current
                                        * connection attempt was sent */
    int64_t confirmed_at_ms;           /* `confirmed_at`: monotonic ms when a request was
                                        * sent whose session touch a legitimate ZooKeeper
                                        * leader has certainly received since; the session
                                        * cannot expire before this + its timeout.
                                        * 0: no session */
    int64_t lost_told_ms;              /* when holds were last presumed lost (the lost timer
                                        * or zk_session_check_stall), 0: never */
    bool presumed_lost;                /* holds were presumed lost and confirmed_at has not
                                        * moved past the lost deadline since (logged when
                                        * it does) */
    bool grants_held_back;             /* zk_may_grant() said no while connected: tell
                                        * `resume` once confirmed_at moves (zk_vouch.c) */
    uint64_t probe_rounds, probe_confirms; /* for STATS: rounds sent, and rounds that
                                            * moved confirmed_at */
    int negotiated_ms;
    int64_t session_id;
    bool attaching;                    /* a handover's successor attaches to the session of
                                        * the daemon before: nothing is known yet, nothing
                                        * is unavailable yet either (zk_watch.c) */
    struct {                           /* the layers above, in registration order */
        const struct zk_listener *l;   /* borrowed */
        void *arg;
    } listeners[ZK_LISTENERS_MAX];
    void (*before_io)(struct zk *zk);  /* zk_loop_init's: first at every I/O event */
    unsigned nlisteners;
    /* The layers above keep their own state; each allocates and frees it. */
    struct zk_batch *batch;            /* zk_batch.c's (zk_batch.h) */
    struct zk_nodes *nodes;            /* zlock.c's (zlock.h) */
    struct zk_idle *idle;              /* zk_handoff.c's (zk_recipes.h) */
    struct zk_leases *leases;          /* zk_lease.c's (zk_recipes.h) */
    struct zk_watches *watches;        /* zk_watch.c's (zk_recipes.h) */
    struct zk_queries *queries;        /* zk_query.c's (zk_recipes.h) */
    /* counters, for STATS (zk_backend.c) */
    uint64_t sessions, reconnects;
    uint64_t outstanding;              /* requests in flight, of every layer */
    uint64_t session_delays;           /* lock-delays begun because a holder's session
                                        * ended (zk_fair.c) */
    uint64_t nonfair_won, nonfair_lost; /* creates of a non-fair node after its holder
                                        * ended that got it, or found it taken (zk_nonfair.c) */
    bool nonfair_checked;              /* every daemon of the root was found to have our
                                        * [zookeeper] nonfair (zk_presence.c): once per run;
                                        * until then no lock is taken (zk_serving) */
    bool nonfair_disagrees;            /* another daemon of the root has another [zookeeper]
                                        * nonfair: nothing is served, for good (zk_serving) */
    int64_t nonfair_since_ms;          /* monotonic ms, once nonfair_disagrees */
    char nonfair_why[1400];            /* why, when nonfair_disagrees */
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

/* Reads (STATUS, HOLDERS, WATCH) can go out: a session, its chroot exists,
 * and the daemons of the root agree on [zookeeper] nonfair, as far as known. */
static inline bool zk_reachable(const struct zk *zk)
{
    return zk->state == ZK_CONNECTED && !zk->chroot_missing && !zk->nonfair_disagrees;
}

/* Lock and lease requests can go out: reachable, and the agreement on
 * [zookeeper] nonfair was checked (zk_presence.c). */
static inline bool zk_serving(const struct zk *zk)
{
    return zk_reachable(zk) && zk->nonfair_checked;
}

/* Only that check is pending: requests wait for it rather than fail. */
static inline bool zk_checking(const struct zk *zk)
{
    return zk_reachable(zk) && !zk->nonfair_checked;
}

/*
 * What the session tells a layer above it. Every member may be NULL; each
 * is called with the arg given to zk_session_listen(), on the loop thread,
 * often from inside zookeeper_process() (a session event, a completion): a
 * listener may send requests (zk_kick) but never closes the handle.
 */
struct zk_listener {
    /* A pass of the event loop is over (after zookeeper_process(), or the
     * kick after requests were queued outside it): send what was queued.
     * Never inside zookeeper_process() nor a completion. */
    void (*flush)(void *arg);
    /* Connected: a new session (fresh) or the same one again. */
    void (*connected)(void *arg, bool fresh);
    /* Requests may go out: just connected (after every `connected`), or
     * the chroot appeared (zk_presence.c). */
    void (*serving)(void *arg);
    /* Work parked after an error may go again: the retry timer ran or a
     * barrier returned, while connected. */
    void (*resume)(void *arg);
    /* The connection (ZCONNECTIONLOSS), the session (ZSESSIONEXPIRED) or
     * the handle (ZCLOSING: closed, its completions ran) is gone: what was
     * queued and never sent fails with rc. */
    void (*down)(void *arg, int rc);
    /* Every hold is presumed lost, with reason ("zk-disconnected",
     * "session-expired"). */
    void (*lost)(void *arg, const char *reason);
    /* After an event-loop stall: replies to reads in flight may be stale
     * (after `lost`). */
    void (*stale_reads)(void *arg);
    /* The handle was closed and a new one opened. session_gone: with its
     * session, so every ephemeral node went with it; otherwise the session
     * lives on and only watches are gone. */
    void (*closed)(void *arg, bool session_gone);
};

/* Calls member `fn` of every listener that has one, in registration order. */
#define TELL(zk, fn, ...)                                                             \
    do {                                                                              \
        for (unsigned i_ = 0; i_ < (zk)->nlisteners; i_++)                            \
            if ((zk)->listeners[i_].l->fn)                                            \
                (zk)->listeners[i_].l->fn((zk)->listeners[i_].arg, ##__VA_ARGS__);    \
    } while (0)

#endif
