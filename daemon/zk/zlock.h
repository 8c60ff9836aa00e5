/*
 * zlock.h - the acquisition object of the node machinery (zlock.c; zk_node.h
 * says what the machinery is, zk.h draws the layers): one request's node,
 * its request and watch contexts, and the hooks through which the layer
 * above decides what happens next.
 */
#ifndef LOCKBROKER_ZK_ZLOCK_H
#define LOCKBROKER_ZK_ZLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include <sys/queue.h>

#include "zk_batch.h"
#include "histogram.h"
#include "interop.h"
#include "locks.h"

struct event;
struct zl_hooks;

/* A lock parent known to exist (zk_node.c's list, zl_parent_known). */
struct known_parent {
    TAILQ_ENTRY(known_parent) link;    /* zk->nodes->known, oldest first */
    const char *path;                  /* buf, or a lookup's key */
    char buf[];
};

/* zlock.c's state (zk->nodes). */
struct zk_nodes {
    const struct zl_hooks *hooks;      /* the layer above's (borrowed) */
    void *by_id;                       /* tsearch tree of struct zlock by id */
    TAILQ_HEAD(, zlock) zlocks;
    TAILQ_HEAD(, zcall) watches;       /* watch contexts registered with zh */
    uint64_t next_id;
    unsigned nzlocks;
    struct histogram request_hist;     /* requests of the lock recipe, sent to completed */
    /* zk_node.c: lock parents known to exist, oldest first (zl_parent_known) */
    void *known_by_path;               /* tsearch tree of struct known_parent */
    TAILQ_HEAD(, known_parent) known;
    unsigned nknown;
    /* zk_node.c: grants' token writes put off (zl_write_token), oldest first */
    TAILQ_HEAD(, zlock) tokens_due;
    unsigned ntokens_due;
    struct event *token_timer;         /* sends them once due; owned, made on first use */
    uint64_t token_writes_spared;      /* since start: put off, and then not needed */
};

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
    TAILQ_ENTRY(zlock) link;   /* zk->nodes->zlocks, in creation order */
    uint64_t id;               /* unique within this daemon; part of the node name */
    unsigned gen;              /* bumped by every request; older replies are stale */
    enum zl_step step;
    bool try;                  /* answer busy instead of waiting */
    enum lock_mode mode;       /* what the request asks for; part of the node name */
    unsigned limit;            /* LOCK_LIMIT only */
    bool data_stale;           /* the node's data is behind: it names an owner that left
                                * (handover), or lacks the token of a grant (zk_node.c) */
    bool data_writing;         /* a write of the node's data is in flight */
    bool token_put_off;        /* on zk->nodes->tokens_due: the grant's token waits to be
                                * written (data_stale is set meanwhile) */
    int64_t token_due_us;      /* then: locks_mono_us() when it goes by itself */
    TAILQ_ENTRY(zlock) token_link;
    bool create_uncertain;     /* a create was sent and its reply lost */
    bool listing_sent;         /* a getChildren went out right behind the create's multi,
                                * or a setData of the parent rides in it (zl_create) */
    bool first_use;            /* the parent was not known when the node was created */
    unsigned create_attempts;
    int64_t ttl_ms;            /* > 0: the request is for a lease */
    int64_t delay_ms;          /* the request's lock-delay; part of the node name */
    int64_t pred_delay_ms;     /* ZL_WATCHING: the predecessor's lock-delay */
    int64_t pred_session;      /* ZL_WATCHING: its ephemeral owner, once read; 0: none */
    struct event *delay_timer; /* ZL_DELAYING: ends the predecessor's lock-delay; owned */
    int64_t delay_until_ms;    /* ZL_DELAYING: monotonic ms when it ends (a handover
                                * carries it) */
    int64_t keep_until_ms;     /* monotonic ms: a hold presumed lost keeps our node until
                                * the last CHECK window it may have been given ends */
    struct event *keep_timer;  /* runs zl_start then (zk_acquire.c); owned */
    enum interop_profile interop; /* an [interop] name's (conf/interop.h), or INTEROP_NONE:
                                * parent is its rule's path, our node is named as that
                                * recipe names its own (zk_names.h), no parent is a
                                * container or written, no local handoff, no idle node */
    bool nonfair;              /* a non-fair name (zk_nonfair.c): parent is the one fixed
                                * node's path, node the same once it is ours */
    bool raced;                /* nonfair: this create follows the holder's end */
    bool lease;                /* our node is (to be) a persistent lease node */
    bool create_sent;          /* lease: its node is created once, never again */
    bool granted;              /* lease: the table has the grant */
    uint64_t ephemeral_id;     /* lease: the zlock whose node holds until ours exists */
    unsigned handoffs;         /* grants passed on locally since `token`'s zxid */
    uint64_t token;            /* the last token granted with our node */
    unsigned epoch;            /* bumped whenever `node` changes: a turn's setData names one */
    bool awaiting_token;       /* passed on at a turn's end: the hold waits (step HELD) */
    bool idle;                 /* released, our node kept for a local LOCK (zk->idle->idle) */
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
    TAILQ_ENTRY(zcall) link;   /* zk->nodes->watches, for watch contexts only */
};

/* Context of a write to our node outside the request steps (its data, a
 * turn's token): names the node by the zlock's id and epoch. */
struct nodecall {
    struct zk *zk;
    uint64_t id;
    unsigned epoch;
};

/* What the node machinery tells the layer above (zk_acquire.c registers it
 * with zl_nodes_init): never called by name. */
struct zl_hooks {
    /* Decides zl's next request from what is known (after a create, a
     * find or a delete was answered, a lock-delay ended, ...). */
    void (*next)(struct zlock *zl);
    /* zl's node is going (a delete is sent) or gone: nothing may keep it. */
    void (*node_going)(struct zlock *zl);
    /* zl is about to be freed. */
    void (*freeing)(struct zlock *zl);
};

/* Makes zk->nodes, with the layer above's hooks (borrowed, must outlive
 * zk). Returns 0 or -1; zl_nodes_free() frees it, once no zlock is left
 * and the parents known are forgotten (zk_node.h). */
int zl_nodes_init(struct zk *zk, const struct zl_hooks *hooks);
void zl_nodes_free(struct zk *zk);
/* Runs the `next` hook: decides zl's next request. */
void zl_next(struct zlock *zl);
/* A zlock for h, in h's backend slot; parent is copied. NULL when out of
 * memory. Freed by zl_free(). */
struct zlock *zl_new(struct zk *zk, struct hold *h, const char *parent);
/* Handover (zk_handover.c): a zlock of the daemon before, with its id, no
 * hold and nothing else set yet. NULL when out of memory or id is taken. */
struct zlock *zl_restore(struct zk *zk, uint64_t id, const char *parent);
/* Looks a zlock up by id: NULL once it was freed. */
struct zlock *zl_find(struct zk *zk, uint64_t id);
/* Frees zl (its node is gone or left to the session's end). */
void zl_free(struct zlock *zl);
/* zl's token write put off (zk_node.c's list) is not needed: its node or
 * zl goes. zl_token_unqueue takes it off the list; true if it was on it;
 * zl_token_spared also counts it spared. */
bool zl_token_unqueue(struct zlock *zl);
void zl_token_spared(struct zlock *zl);
/* The table lets go of the request; the zlock cleans up after itself.
 * Returns the hold it served, or NULL. */
struct hold *zl_detach(struct zlock *zl);
/* A context for a second request of the current step, sent before the
 * first is answered (the listing behind a create): same generation.
 * malloc'd; NULL when out of memory. */
struct zcall *zcall_also(struct zlock *zl);
/* Frees a request context; returns its zlock if the reply is still wanted. */
struct zlock *zcall_done(const void *data);
/* zcall_done() for a watched request: without ZOK no watch was
 * registered, and its context is freed too. */
struct zlock *zcall_done_watched(const void *data, int rc);
/* Unregisters and frees a watch context that will never fire. */
void watch_forget(struct zk *zk, struct zcall *w);
/* A watch event reached the watch context ctx. Session events: NULL (the
 * watch stays). Otherwise frees ctx; returns its zlock if still there, and
 * *gen the context's gen. */
struct zlock *watch_fired(void *ctx, int type, unsigned *gen);
/* Frees the watch contexts of a handle that went away. */
void zl_free_watches(struct zk *zk);
/* Starts a request step: its context (to pass to zk_sent), or NULL
 * (parked, retried later) when out of memory. */
struct zcall *zl_begin(struct zlock *zl, enum zl_step step);
/* Called after every zoo_a* call with its rc: counts it, or frees c and
 * parks the zlock if it failed. Returns whether it was sent. */
bool zk_sent(struct zlock *zl, struct zcall *c, int rc, const char *what);
/* zl_begin() for a request that also sets a watch: c->watch is the
 * watch's own context (registered in zk->nodes->watches). */
struct zcall *zl_begin_watched(struct zlock *zl, enum zl_step step);
/* zk_sent() for a watched request: an unsent request sets no watch. */
void zl_sent_watched(struct zlock *zl, struct zcall *c, int rc, const char *what);
/* Arms timer for the monotonic instant at_us (locks_mono_us), at once
 * when that has passed. */
void zl_timer_at(struct event *timer, int64_t at_us);
/* A try acquisition cannot be answered now: report it, keep cleaning up. */
void zl_try_unavailable(struct zlock *zl);
/* Called where zl's request would be granted: true when no grant may be
 * made now (zk_may_grant): zl then waits, keeping its node, and what the
 * session tells next (`resume`, `serving`) decides again (zl_next). */
bool zl_grant_held_back(struct zlock *zl);
/* The reply says the connection or session is gone (or another error):
 * park until it is back, or for the retry timer. */
void zl_park(struct zlock *zl, int rc);
/* A nodecall for zl's current node; malloc'd, NULL when out of memory. */
struct nodecall *nodecall_new(const struct zlock *zl);
/* Frees n; returns its zlock if it still has the node n was sent for. */
struct zlock *nodecall_done(struct nodecall *n);

#endif
