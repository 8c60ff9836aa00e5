/*
 * zk_watch.c - distributed mode: WATCH (a recipe-level reader, beside zk_query.c). One entry per name this daemon
 * watches, however many of its clients watch it: a child watch on the
 * name's parent (an exists watch while it has none) and a data watch on
 * its first holder's node, which a local handoff or an idle node rewrites.
 * When one fires, the entry reads the name again (as STATUS does) and
 * reports; changes seen while a read is in flight make one more read.
 *
 * ZooKeeper keeps a watch's context until the watch fires or its handle
 * closes, so an entry stays until then: a cancelled entry is freed when
 * its last watch has fired or the handle is closed, and a WATCH of the
 * same name meanwhile takes it up again. `armed` counts the watches set
 * (counted when the reply that set one arrives, which ZooKeeper delivers
 * before the watch's event). A watch set again on the same path before
 * it fired is one watch to the client but counted twice: such an entry
 * waits for the handle to close, never the other way round.
 */
#include "config.h"
#include "zk_recipes.h"
#include "zk_session.h"
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct backend_watch {
    struct zk *zk;
    TAILQ_ENTRY(backend_watch) link;   /* zk->watches->all */
    backend_watch_cb cb;               /* NULL once cancelled */
    void *arg;
    unsigned armed;                    /* watches registered with the handle, not fired */
    bool reading;                      /* a getChildren or getData is in flight */
    bool again;                        /* a change came meanwhile: read once more */
    struct backend_queue_info info;    /* being read */
    bool nonfair;                      /* parent is a non-fair name's node (zk_nonfair.c) */
    char name[PROTO_NAME_MAX + 1];
    char parent[512];
    char first[256];                   /* the node whose data is read (its name) */
};

/* zk_watch.c's state (zk->watches): every entry, cancelled ones too until
 * their ZooKeeper watches are gone. */
struct zk_watches {
    TAILQ_HEAD(, backend_watch) all;
};

static void zw_read(struct backend_watch *w);

static void zw_free_if_done(struct backend_watch *w)
{
    if (w->cb || w->armed > 0 || w->reading)
        return;
    TAILQ_REMOVE(&w->zk->watches->all, w, link);
    free(w);
}

static void zw_report(struct backend_watch *w, bool ok)
{
    w->info.ok = ok;
    if (w->cb)
        w->cb(w->arg, &w->info);
}

/* A read is over: report, then read again if something changed meanwhile. */
static void zw_read_done(struct backend_watch *w, bool ok)
{
    w->reading = false;
    w->zk->outstanding--;
    if (w->cb && !w->again)
        zw_report(w, ok);
    if (w->cb && w->again && zk_reachable(w->zk)) {
        zw_read(w);
        return;
    }
    zw_free_if_done(w);
}

/* Every watch of ours on the name: a change, or a session event. */
static void on_zw_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct backend_watch *w = ctx;

    /* Session events come to every watcher and leave its watches set;
     * the session itself says when to read again (watches_serving). */
    if (type == ZOO_SESSION_EVENT)
        return;
    if (w->armed > 0)
        w->armed--;
    if (!w->cb) {
        zw_free_if_done(w);
        return;
    }
    if (w->reading)
        w->again = true;
    else if (zk_reachable(w->zk))
        zw_read(w);
}

static void on_zw_data(int rc, const char *value, int len, const struct Stat *stat,
                       const void *data)
{
    struct backend_watch *w = (struct backend_watch *)data;

    if (rc == ZOK) {
        w->armed++;            /* the data watch is set */
        zk_queue_holder(w->first, value, len, stat, &w->info);
    } else if (rc == ZNONODE)
        w->again = true;       /* the holder left between the two reads */
    zw_read_done(w, rc == ZOK || rc == ZNONODE);
}

static void on_zw_exists(int rc, const struct Stat *stat, const void *data)
{
    struct backend_watch *w = (struct backend_watch *)data;

    if (rc == ZOK || rc == ZNONODE)
        w->armed++;            /* the exists watch is set either way */
    if (rc == ZOK)
        w->again = true;       /* created since the listing: list it */
    zw_read_done(w, rc == ZOK || rc == ZNONODE);
}

static void on_zw_children(int rc, const struct String_vector *children, const void *data)
{
    struct backend_watch *w = (struct backend_watch *)data;
    const char *first = NULL;
    char path[768];
    int sent;

    if (rc == ZOK)
        w->armed++;            /* the child watch is set */
    if (rc == ZNONODE) {
        /* No parent: free, and an exists watch says when it comes. */
        zk_queue_info(NULL, &w->info, &first);
        if (zoo_awexists(w->zk->zh, w->parent, on_zw_event, w, on_zw_exists, w) == ZOK)
            return;            /* the read goes on */
        zw_read_done(w, false);
        return;
    }
    if (rc != ZOK || !w->cb) {
        zw_read_done(w, rc == ZOK);
        return;
    }
    zk_queue_info(children, &w->info, &first);
    if (!first) {
        zw_read_done(w, true);
        return;
    }
    snprintf(w->first, sizeof(w->first), "%s", first);
    snprintf(path, sizeof(path), "%s/%s", w->parent, first);
    sent = zoo_awget(w->zk->zh, path, on_zw_event, w, on_zw_data, w);
    if (sent != ZOK)
        zw_read_done(w, false);
}

/* A non-fair name: its node's data, once it was found (no watch: the
 * exists watch fires on its changes too). */
static void on_zw_nf_data(int rc, const char *value, int len, const struct Stat *stat,
                          const void *data)
{
    struct backend_watch *w = (struct backend_watch *)data;

    if (rc == ZOK)
        zk_queue_holder(NULL, value, len, stat, &w->info);
    else if (rc == ZNONODE)
        w->again = true;       /* gone between the two reads */
    zw_read_done(w, rc == ZOK || rc == ZNONODE);
}

/* A non-fair name: one exists watch on its node, which holds it. */
static void on_zw_nf_exists(int rc, const struct Stat *stat, const void *data)
{
    struct backend_watch *w = (struct backend_watch *)data;

    if (rc == ZOK || rc == ZNONODE)
        w->armed++;            /* the exists watch is set either way */
    w->info.ok = true;
    if (rc != ZOK || !w->cb) {
        zw_read_done(w, rc == ZOK || rc == ZNONODE);
        return;
    }
    w->info.queue = w->info.holders = 1;
    w->info.mode = LOCK_EXCLUSIVE;
    if (zoo_aget(w->zk->zh, w->parent, 0, on_zw_nf_data, w) != ZOK)
        zw_read_done(w, false);
}

static void zw_read(struct backend_watch *w)
{
    static const struct backend_queue_info empty = {
        .global = true, .holder = "-", .since_ms = -1, .lease_ms = -1
    };
    int rc;

    w->info = empty;
    w->again = false;
    /* A non-fair name is its one node (exists); a fair one, its queue. */
    rc = w->nonfair ? zoo_awexists(w->zk->zh, w->parent, on_zw_event, w, on_zw_nf_exists, w)
                    : zoo_awget_children(w->zk->zh, w->parent, on_zw_event, w, on_zw_children,
                                         w);
    if (rc != ZOK) {
        zw_report(w, false);
        return;
    }
    w->reading = true;
    w->zk->outstanding++;
    zk_kick(w->zk);
}

struct backend_watch *zk_watch(void *impl, const char *name, backend_watch_cb cb, void *arg)
{
    struct zk *zk = impl;
    struct backend_watch *w;

    TAILQ_FOREACH(w, &zk->watches->all, link)
        if (!w->cb && strcmp(w->name, name) == 0)
            break;
    if (!w) {
        if (!(w = calloc(1, sizeof(*w))))
            return NULL;
        w->zk = zk;
        snprintf(w->name, sizeof(w->name), "%s", name);
        w->nonfair = settings_globs_match(zk->settings->zk_nonfair, name);
        snprintf(w->parent, sizeof(w->parent), "%s/%s/%s", zk->root,
                 w->nonfair ? "nonfair" : "locks", name);
        zk_interop_parent(zk, name, w->parent, sizeof(w->parent));
        TAILQ_INSERT_TAIL(&zk->watches->all, w, link);
    }
    w->cb = cb;
    w->arg = arg;
    if (w->reading)
        w->again = true;
    else if (zk_reachable(zk))
        zw_read(w);
    else if (!zk->attaching)    /* a handover: read once attached (or told when lost) */
        zw_report(w, false);
    return w;
}

void zk_watch_cancel(void *impl, struct backend_watch *w)
{
    w->cb = NULL;
    zw_free_if_done(w);
}

/* The session serves again (a new session, or the same after a
 * reconnection): every watched name is read again. */
static void watches_serving(void *arg)
{
    struct zk *zk = arg;
    struct backend_watch *w;

    TAILQ_FOREACH(w, &zk->watches->all, link)
        if (w->cb && !w->reading)
            zw_read(w);
}

/*
 * Holds are presumed lost (the session is not confirmed through a leader
 * for 2/3 of its timeout, or it ended): what this daemon last read of a
 * name is not known to be true any more, so every watcher is told
 * `unavailable` (PROTOCOL.md, WATCH). The reads when it serves again
 * (watches_serving) tell the state as it is then.
 */
static void watches_lost(void *arg, const char *reason)
{
    struct zk *zk = arg;
    struct backend_watch *w;

    TAILQ_FOREACH(w, &zk->watches->all, link)
        if (w->cb)
            zw_report(w, false);
}

/* The handle was closed: its watchers cannot run any more. */
static void watches_closed(void *arg, bool session_gone)
{
    struct zk *zk = arg;
    struct backend_watch *w, *next;

    for (w = TAILQ_FIRST(&zk->watches->all); w; w = next) {
        next = TAILQ_NEXT(w, link);
        w->armed = 0;
        w->reading = false;    /* its completion ran, with ZCLOSING */
        if (w->cb)
            zw_report(w, false);
        else
            zw_free_if_done(w);
    }
}

int zk_watch_init(struct zk *zk)
{
    static const struct zk_listener listener = {
        .serving = watches_serving, .lost = watches_lost, .closed = watches_closed,
    };

    if (!(zk->watches = calloc(1, sizeof(*zk->watches))))
        return -1;
    TAILQ_INIT(&zk->watches->all);
    return zk_session_listen(zk, &listener, zk);
}

void zk_watch_free(struct zk *zk)
{
    struct backend_watch *w;

    if (!zk->watches)
        return;
    while ((w = TAILQ_FIRST(&zk->watches->all))) {
        TAILQ_REMOVE(&zk->watches->all, w, link);
        free(w);
    }
    free(zk->watches);
    zk->watches = NULL;
}
