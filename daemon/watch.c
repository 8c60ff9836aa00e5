/*
 * watch.c - WATCH: see watch.h.
 */
#include "config.h"
#include "watch.h"

#include <event2/event.h>
#include <inttypes.h>
#include <limits.h>
#include <search.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "backend.h"
#include "locks.h"
#include "log.h"
#include "proto.h"

/* An EVENT line: name, holder, label and a few words. */
#define EVENT_MAX (3 * PROTO_NAME_MAX + PROTO_LABEL_MAX + 128)

struct watched {
    struct watches *ws;
    TAILQ_HEAD(, watch_sub) subs;
    struct backend_watch *bw;          /* the backend's (distributed mode), or NULL */
    struct backend_queue_info zi;      /* what it said last */
    bool known;                        /* its state is known: the backend has answered */
    bool dirty;                        /* in ws->dirty: work the state out again */
    TAILQ_ENTRY(watched) dirty_link;
    uint64_t gen;                      /* bumped with each new line */
    size_t len;                        /* of line; 0: none yet */
    char line[EVENT_MAX];
    char name[PROTO_NAME_MAX + 1];
};

struct watch_sub {
    struct watched *w;
    TAILQ_ENTRY(watch_sub) link;       /* w->subs */
    watch_deliver_fn fn;
    void *arg;
    uint64_t gen;                      /* of the last line fn took; 0: none */
    struct quota_acct *acct;           /* the account it counts against, or NULL */
};

struct watches {
    struct event_base *base;
    struct locks *locks;
    struct backend *backend;
    const char *daemon_id;
    void *tree;                        /* struct watched by name (tsearch) */
    TAILQ_HEAD(, watched) dirty;
    struct event *tick;                /* works the dirty ones out, from the loop */
    unsigned nsubs;
    struct quota accounts;             /* subscriptions per account (quota.h) */
    unsigned max_per_account;
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct watched *)a)->name, ((const struct watched *)b)->name);
}

static struct watched *watched_find(struct watches *ws, const char *name)
{
    struct watched key;
    void *found;

    snprintf(key.name, sizeof(key.name), "%s", name);
    found = tfind(&key, &ws->tree, by_name);
    return found ? *(struct watched **)found : NULL;
}

static void mark_dirty(struct watched *w)
{
    if (w->dirty)
        return;
    w->dirty = true;
    TAILQ_INSERT_TAIL(&w->ws->dirty, w, dirty_link);
    event_active(w->ws->tick, 0, 0);
}

static enum proto_mode proto_mode_of(enum lock_mode m)
{
    return m == LOCK_SHARED ? PROTO_MODE_SHARED : m == LOCK_LIMIT ? PROTO_MODE_LIMIT
                                                                   : PROTO_MODE_EXCLUSIVE;
}

/*
 * The name's state as one line. Embedded mode: the table's earliest
 * holder, with its token. Distributed mode: ZooKeeper's view, the same on
 * every daemon, with the token the holding daemon wrote to its node after
 * the grant (token - until then).
 */
static size_t format_event(const struct watches *ws, const struct watched *w, char *buf,
                           size_t cap)
{
    struct proto_info in = { .name = w->name, .state = PROTO_FREE, .since_ms = -1,
                             .lease_ms = -1 };
    struct locks_status ls;
    int n;

    if (w->bw) {
        const struct backend_queue_info *zi = &w->zi;

        if (!zi->ok) {
            in.state = PROTO_UNAVAILABLE;
        } else if (zi->holders > 0) {
            in.state = PROTO_HELD;
            in.mode = proto_mode_of(zi->mode);
            in.limit = zi->limit;
            in.holders = zi->holders;
            in.label = zi->label;
            in.holder = zi->holder;
            in.has_token = zi->token != 0;
            in.token = zi->token;
        }
    } else {
        locks_status(ws->locks, w->name, &ls);
        if (ls.held) {
            in.state = PROTO_HELD;
            in.mode = proto_mode_of(ls.mode);
            in.limit = ls.limit;
            in.holders = ls.holders;
            in.label = ls.label;
            in.daemon = ws->daemon_id;
            in.holder = ls.holder;
            in.has_token = 1;
            in.token = ls.token;
        }
    }
    n = proto_fmt_event(buf, cap, &in);
    return n > 0 ? (size_t)n : 0;
}

static void offer(struct watch_sub *s)
{
    struct watched *w = s->w;

    if (w->len && s->gen != w->gen && s->fn(s->arg, w->line, w->len))
        s->gen = w->gen;
}

/* Works the state out; the line goes to every subscriber that can take it
 * and has not yet. */
static void watched_update(struct watched *w)
{
    char line[EVENT_MAX];
    size_t len = format_event(w->ws, w, line, sizeof(line));
    struct watch_sub *s, *next;

    if (len && (len != w->len || memcmp(line, w->line, len) != 0)) {
        memcpy(w->line, line, len);
        w->len = len;
        w->gen++;
    }
    /* Subscribers that have not taken it: all of them when it is new, a
     * new subscriber otherwise. */
    for (s = TAILQ_FIRST(&w->subs); s; s = next) {
        next = TAILQ_NEXT(s, link);
        offer(s);
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct watches *ws = arg;
    struct watched *w;

    while ((w = TAILQ_FIRST(&ws->dirty))) {
        TAILQ_REMOVE(&ws->dirty, w, dirty_link);
        w->dirty = false;
        if (w->known)
            watched_update(w);
    }
}

static void on_backend(void *arg, const struct backend_queue_info *info)
{
    struct watched *w = arg;

    w->zi = *info;
    w->known = true;
    mark_dirty(w);
}

struct watches *watches_new(struct event_base *base, struct locks *locks,
                            struct backend *backend, const char *daemon_id)
{
    struct watches *ws = calloc(1, sizeof(*ws));

    if (!ws)
        return NULL;
    *ws = (struct watches){ .base = base, .locks = locks, .backend = backend,
                            .daemon_id = daemon_id, .max_per_account = UINT_MAX };
    TAILQ_INIT(&ws->dirty);
    if (!(ws->tick = event_new(base, -1, 0, on_tick, ws))) {
        free(ws);
        return NULL;
    }
    return ws;
}

void watches_free(struct watches *ws)
{
    if (!ws)
        return;
    event_free(ws->tick);
    quota_clear(&ws->accounts);
    free(ws);
}

void watches_set_max_per_account(struct watches *ws, unsigned max)
{
    ws->max_per_account = max;
}

/* watch_add; checked: the account's share is enforced too (not on a handover). */
static struct watch_sub *sub_add(struct watches *ws, const char *name, watch_deliver_fn fn,
                                 void *arg, const char *account, bool checked,
                                 enum quota_verdict *why)
{
    struct backend *be = ws->backend;
    struct watched *w = watched_find(ws, name);
    struct watch_sub *s;

    *why = quota_check(&ws->accounts, checked ? account : NULL, 1, WATCHES_MAX,
                       ws->max_per_account);
    if (*why != QUOTA_OK || !(s = calloc(1, sizeof(*s))))
        return NULL;
    if (!quota_take(&ws->accounts, account, &s->acct)) {
        free(s);
        return NULL;
    }
    if (!w) {
        if (!(w = calloc(1, sizeof(*w)))) {
            quota_put(&ws->accounts, s->acct);
            free(s);
            return NULL;
        }
        w->ws = ws;
        TAILQ_INIT(&w->subs);
        snprintf(w->name, sizeof(w->name), "%s", name);
        if (!tsearch(w, &ws->tree, by_name)) {
            free(w);
            quota_put(&ws->accounts, s->acct);
            free(s);
            return NULL;
        }
        w->known = !be->ops->watch;
        if (be->ops->watch && !(w->bw = be->ops->watch(be->impl, w->name, on_backend, w))) {
            tdelete(w, &ws->tree, by_name);
            free(w);
            quota_put(&ws->accounts, s->acct);
            free(s);
            return NULL;
        }
        log_debug("watch %s: watched", name);
    }
    s->w = w;
    s->fn = fn;
    s->arg = arg;
    TAILQ_INSERT_TAIL(&w->subs, s, link);
    ws->nsubs++;
    /* Its first line: the current one, offered from the loop. */
    mark_dirty(w);
    return s;
}

struct watch_sub *watch_add(struct watches *ws, const char *name, watch_deliver_fn fn,
                            void *arg, const char *account, enum quota_verdict *why)
{
    return sub_add(ws, name, fn, arg, account, true, why);
}

void watch_remove(struct watch_sub *s)
{
    struct watched *w = s->w;
    struct watches *ws = w->ws;
    struct backend *be = ws->backend;

    TAILQ_REMOVE(&w->subs, s, link);
    ws->nsubs--;
    quota_put(&ws->accounts, s->acct);
    free(s);
    if (!TAILQ_EMPTY(&w->subs))
        return;
    if (w->bw)
        be->ops->watch_cancel(be->impl, w->bw);
    if (w->dirty)
        TAILQ_REMOVE(&ws->dirty, w, dirty_link);
    tdelete(w, &ws->tree, by_name);
    log_debug("watch %s: no longer watched", w->name);
    free(w);
}

const char *watch_sub_name(const struct watch_sub *s)
{
    return s->w->name;
}

void watch_flush(struct watch_sub *s)
{
    offer(s);
}

void watches_lock_changed(void *arg, const char *name)
{
    struct watches *ws = arg;
    struct watched *w;

    /* Distributed mode: ZooKeeper's watch sees every change, here or not. */
    if (ws->nsubs == 0 || ws->backend->ops->watch || !(w = watched_find(ws, name)))
        return;
    mark_dirty(w);
}

void watch_sub_state(const struct watch_sub *s, const char **line, size_t *len, bool *taken)
{
    *line = s->w->line;
    *len = s->w->len;
    *taken = s->w->len && s->gen == s->w->gen;
}

struct watch_sub *watch_restore(struct watches *ws, const char *name, watch_deliver_fn fn,
                                void *arg, const char *account, const char *line, size_t len,
                                bool taken)
{
    enum quota_verdict why;
    struct watch_sub *s = sub_add(ws, name, fn, arg, account, false, &why);
    struct watched *w;

    if (!s || len == 0 || len > EVENT_MAX)
        return s;
    w = s->w;
    /* The first subscriber restored brings its name's line; the others agree. */
    if (w->len == 0) {
        memcpy(w->line, line, len);
        w->len = len;
        w->gen = 1;
    }
    if (taken && w->len == len && memcmp(w->line, line, len) == 0)
        s->gen = w->gen;
    return s;
}
