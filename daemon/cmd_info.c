/*
 * cmd_info.c - what the daemon knows: STATUS, LOCKS, HOLDERS, STATS, HELP.
 * Names the user may not use are left out of listings, and not counted.
 */
#include "config.h"
#include "cmd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "snap.h"
#include "stats.h"

/* The name's recipe when the backend has another than the usual one, or NULL. */
static const char *recipe_of(const struct client *c, const char *name)
{
    const struct backend *b = c->srv->backend;

    return b->ops->recipe ? b->ops->recipe(b->impl, name) : NULL;
}

/* One STATUS line from this daemon's table and what the backend knows beyond it. */
static void reply_status(struct client *c, const char *name, const struct backend_queue_info *zi)
{
    char buf[PROTO_INFO_MAX];
    struct proto_info in = { .name = name, .state = PROTO_FREE, .since_ms = -1 };
    struct locks_status ls;
    bool remote = zi->global && zi->holders > 0;      /* held, as ZooKeeper sees it */
    bool first_remote = zi->global && zi->queue > 0;  /* the queue's first is known there */

    if (!zi->ok) {
        cmd_reply_unavailable(c);
        return;
    }
    locks_status(c->srv->locks, name, &ls);
    in.queue = zi->global ? zi->queue : ls.holders + ls.waiters;
    in.holders = zi->global ? zi->holders : ls.holders;
    in.waiters = ls.waiters;
    /* The mode of whoever is first, here or across daemons. */
    in.mode = cmd_proto_mode(first_remote ? zi->mode : ls.mode);
    in.limit = first_remote ? zi->limit : ls.limit;
    /* An abandoned hold keeps the name for its lock-delay: how much longer. */
    in.delay_ms = ls.delay_ms;
    /* A lease holds it: the time left before it ends by itself. */
    in.lease_ms = ls.lease_ms >= 0 ? ls.lease_ms : remote ? zi->lease_ms : -1;
    /* A session's hold whose connection ended: the grace left to take it back. */
    in.detached_ms = ls.held ? ls.detached_ms : -1;
    /* A name with a recipe of its own says which (PROTOCOL.md, STATUS). */
    in.recipe = recipe_of(c, name);
    /* The holder's CLIENT label, when it has one. */
    in.label = ls.held ? ls.label : remote && zi->label[0] ? zi->label : NULL;
    if (ls.held) {
        in.state = PROTO_HELD;
        in.daemon = c->srv->daemon_id;
        in.holder = ls.holder;
        in.has_token = 1;
        in.token = ls.token;
        in.since_ms = ls.since_ms;
    } else if (remote) {
        /* Held through another daemon (or about to be ours): the token its
         * daemon wrote to the holder's node, once written. */
        in.state = PROTO_HELD;
        in.holder = zi->holder;
        in.has_token = zi->token != 0;
        in.token = zi->token;
        in.since_ms = zi->since_ms;
    }
    client_reply(c, buf, proto_fmt_status(buf, sizeof(buf), &in));
}

static void on_queue_info(void *arg, const struct backend_queue_info *info)
{
    struct client *c = arg;

    c->pending_op = NULL;      /* answered: nothing left to cancel */
    reply_status(c, c->pending_name, info);
    client_complete(c);
}

static void query_cancel(struct client *c, void *op)
{
    c->srv->backend->ops->query_cancel(c->srv->backend->impl, op);
}

static const struct pending_ops query_ops = { .what = "STATUS", .cancel = query_cancel };

/* STATUS: the backend may have to ask around (ZooKeeper); later lines wait. */
void cmd_status(struct client *c, const struct proto_req *req, const char *name)
{
    struct backend *be = c->srv->backend;
    struct backend_queue_info now;
    struct backend_query *q;

    q = be->ops->query(be->impl, name, &now, on_queue_info, c);
    if (!q)
        reply_status(c, name, &now);
    else
        client_suspend(c, req->cmd, &query_ops, q, name);
}

/* The end of a LOCKS or HOLDERS reply: how many lines were left out, END. */
static void reply_end(struct client *c, size_t more)
{
    char buf[48];

    if (more)
        client_reply_more(c, buf, proto_fmt_more(buf, sizeof(buf), more));
    client_reply(c, buf, proto_fmt_word(buf, sizeof(buf), "END"));
}

/* The most LOCK lines one LOCKS reply carries (PROTOCOL.md). */
#define LOCKS_LINES_MAX 10000
/* The most HOLDERS listings from the backend's queues (ZooKeeper) in flight
 * daemon-wide, each up to HOLDERS_LINES_MAX rows held in memory from the
 * request until its last line is queued: about 3.5 MB each at most. */
#define HOLDERS_GATHERED_MAX 8

/*
 * A LOCKS or HOLDERS reply being written. Its lines are queued as the
 * client reads them: while the client's unread output is under the
 * transport's bound (client_io.backed_up), the next names are listed, and
 * the rest wait in the client's pending slot for its output to drain. The
 * cursor is the last name listed: the table may change between two steps,
 * and the walk resumes after that name (locks_next).
 *
 * A HOLDERS reply gathered by the backend (distributed mode) arrives whole:
 * its lines are formatted into gathered and queued from there the same way.
 */
struct listing {
    struct client *c;
    enum proto_cmd cmd;            /* PROTO_CMD_LOCKS or PROTO_CMD_HOLDERS */
    char glob[PROTO_NAME_MAX + 1]; /* "": every name */
    char after[PROTO_NAME_MAX + 1];/* the last name listed; valid when started */
    bool started;
    unsigned lines, more;          /* lines listed; lines left out past the most */
    struct backend_list *op;       /* the backend's gathering, while it runs; owned
                                    * by the backend, cancelled through it */
    bool gathering;                /* counts in srv->holders_gathered */
    char *gathered;                /* the backend's rows as lines, or NULL; owned */
    size_t gathered_len, gathered_off; /* its length, and how much is queued */
};

static bool listing_restore(struct client *c, struct snap_r *r, struct restart_in *in);

static struct listing *listing_new(struct client *c, enum proto_cmd cmd, const char *glob)
{
    struct listing *l = calloc(1, sizeof(*l));

    if (!l)
        return NULL;
    l->c = c;
    l->cmd = cmd;
    snprintf(l->glob, sizeof(l->glob), "%s", glob);
    return l;
}

static void listing_free(struct listing *l)
{
    if (l->gathering)
        l->c->srv->holders_gathered--;
    free(l->gathered);
    free(l);
}

/* Whether the listing shows one more line (the user may use the name, and
 * the reply has room); lines left out for room are counted in more. */
static bool listing_takes(struct listing *l, const char *name, unsigned max)
{
    if (!client_may(l->c, name))
        return false;
    if (l->lines == max) {
        l->more++;
        return false;
    }
    l->lines++;
    return true;
}

static void add_locks_line(struct listing *l, const char *name, const struct locks_status *st)
{
    char buf[PROTO_INFO_MAX];
    struct proto_info in = { .name = name, .state = PROTO_FREE, .since_ms = -1, .lease_ms = -1,
                             .mode = cmd_proto_mode(st->mode), .limit = st->limit,
                             .holders = st->holders, .waiters = st->waiters,
                             .has_waited = st->waited_ms >= 0, .waited_ms = st->waited_ms,
                             .recipe = recipe_of(l->c, name) };

    if (!listing_takes(l, name, LOCKS_LINES_MAX))
        return;
    if (st->held) {
        in.state = PROTO_HELD;
        in.daemon = l->c->srv->daemon_id;
        in.holder = st->holder;
        in.label = st->label;
        in.has_token = 1;
        in.token = st->token;
        in.since_ms = st->since_ms;
        in.delay_ms = st->delay_ms;
        in.lease_ms = st->lease_ms;
        in.detached_ms = st->detached_ms;
    }
    client_reply_more(l->c, buf, proto_fmt_lock(buf, sizeof(buf), &in));
}

/* One HOLDER line into buf; daemon: this daemon's id when the row's holder
 * is one of its clients, NULL when it reads "<daemon>/<client>" already. */
static int fmt_holder_line(char *buf, size_t size, const struct backend_holder *r,
                           const char *daemon)
{
    struct proto_info in = {
        .name = r->name, .state = r->held ? PROTO_HELD : PROTO_QUEUED,
        .mode = cmd_proto_mode(r->mode), .limit = r->limit, .daemon = daemon,
        .holder = r->holder, .label = r->label, .has_token = r->token != 0,
        .token = r->token, .since_ms = r->since_ms, .lease_ms = r->lease_ms,
    };

    return proto_fmt_holder(buf, size, &in);
}

static bool add_local_holder(void *arg, const struct backend_holder *row)
{
    struct listing *l = arg;
    char buf[PROTO_INFO_MAX];

    if (listing_takes(l, row->name, HOLDERS_LINES_MAX))
        client_reply_more(l->c, buf, fmt_holder_line(buf, sizeof(buf), row,
                                                     l->c->srv->daemon_id));
    return true;
}

/* Queues the gathered lines while the client's output has room. */
static bool listing_fill_gathered(struct listing *l)
{
    struct client *c = l->c;

    while (l->gathered_off < l->gathered_len && !c->io->backed_up(c)) {
        const char *line = l->gathered + l->gathered_off;
        const char *lf = memchr(line, '\n', l->gathered_len - l->gathered_off);
        size_t len = (size_t)(lf - line) + 1;

        client_reply_more(c, line, (int)len);
        l->gathered_off += len;
    }
    if (l->gathered_off < l->gathered_len)
        return false;
    reply_end(c, l->more);
    return true;
}

/*
 * Queues the next lines while the client's output has room (a name's
 * lines all at once); true when the reply is whole, END included. Past the
 * most lines a reply carries, the rest of the names are only counted.
 */
static bool listing_fill(struct listing *l)
{
    struct client *c = l->c;
    const struct locks *t = c->srv->locks;
    const char *glob = l->glob[0] ? l->glob : NULL;
    const char *name;

    if (l->gathered)
        return listing_fill_gathered(l);
    while (!c->io->backed_up(c)) {
        if (!(name = locks_next(t, glob, l->started ? l->after : NULL))) {
            reply_end(c, l->more);
            return true;
        }
        snprintf(l->after, sizeof(l->after), "%s", name);
        l->started = true;
        if (l->cmd == PROTO_CMD_LOCKS) {
            struct locks_status st;

            locks_status(t, l->after, &st);
            add_locks_line(l, l->after, &st);
        } else {
            locks_each_hold_of(t, l->after, add_local_holder, l);
        }
    }
    return false;
}

/* Lists what fits now; the rest waits in the pending slot for the client
 * to read (listing_drained). Takes l. */
static void listing_run(struct listing *l, bool parked)
{
    struct client *c = l->c;

    if (listing_fill(l)) {
        listing_free(l);
        if (parked)
            client_complete(c);
        return;
    }
    if (!parked)
        client_suspend(c, l->cmd, &cmd_listing_ops, l, NULL);
}

/* The client read its output: the next lines. */
static void listing_drained(struct client *c, void *op)
{
    struct listing *l = op;

    if (!l->op)                    /* not while the backend gathers */
        listing_run(l, true);
}

static void listing_cancel(struct client *c, void *op)
{
    struct listing *l = op;

    if (l->op)
        c->srv->backend->ops->list_cancel(c->srv->backend->impl, l->op);
    listing_free(l);
}

/* Handover: a listing is carried over between two steps, not while the
 * backend gathers; the successor goes on after the same name. */
static bool listing_ready(const struct client *c, void *op)
{
    return ((struct listing *)op)->op == NULL;
}

static void listing_save(const struct client *c, void *op, struct snap_w *w)
{
    const struct listing *l = op;

    snap_w_str(w, l->glob);
    snap_w_str(w, l->started ? l->after : NULL);
    snap_w_u64(w, l->lines);
    snap_w_u64(w, l->more);
    snap_w_bytes(w, l->gathered ? l->gathered + l->gathered_off : "",
                 l->gathered ? l->gathered_len - l->gathered_off : 0);
}

const struct pending_ops cmd_listing_ops = {
    .what = "listing", .cancel = listing_cancel, .drained = listing_drained,
    .snap_kind = "list", .snap_ready = listing_ready, .save = listing_save,
    .restore = listing_restore,
};

/* Handover: "pending <conn> list <cmd> <name> <glob> <after> <lines> <more>
 * <gathered>", the common fields read. */
static bool listing_restore(struct client *c, struct snap_r *r, struct restart_in *in)
{
    struct listing *l;
    const char *rest;
    size_t len;

    if (!client_restore_cmd(c, r, PROTO_CMD_LOCKS, PROTO_CMD_HOLDERS))
        return false;
    if (!(l = listing_new(c, c->pending_cmd, "")))
        return snap_r_fail(r, "out of memory");
    snap_r_str_copy(r, l->glob, sizeof(l->glob));
    snap_r_str_copy(r, l->after, sizeof(l->after));
    l->started = l->after[0] != '\0';
    l->lines = (unsigned)snap_r_u64(r);
    l->more = (unsigned)snap_r_u64(r);
    rest = snap_r_str(r, &len);
    if (snap_r_done(r) && len && (!(l->gathered = malloc(len)) ||
                                  !memcpy(l->gathered, rest, len)))
        snap_r_fail(r, "out of memory");
    if (!snap_r_ok(r)) {
        listing_free(l);
        return false;
    }
    l->gathered_len = len;
    if (len) {                     /* a distributed HOLDERS reply: counted again */
        l->gathering = true;
        c->srv->holders_gathered++;
    }
    if (len && l->gathered[len - 1] != '\n') {
        listing_free(l);
        return snap_r_fail(r, "conn %llu: a listing's lines do not end a line",
                           (unsigned long long)c->id);
    }
    /* What fits goes now; the rest once the client reads. When it all fits,
     * the connection goes on as one restored with nothing pending. */
    if (listing_fill(l))
        listing_free(l);
    else
        client_suspend(c, l->cmd, &cmd_listing_ops, l, NULL);
    return true;
}

/* LOCKS [<glob>]: what this daemon's table holds and awaits, by name. */
void cmd_locks(struct client *c, const struct proto_req *req, const char *glob)
{
    struct listing *l = listing_new(c, req->cmd, glob);

    if (!l) {
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        return;
    }
    listing_run(l, false);
}

static bool may_list(void *arg, const char *name)
{
    return client_may(((struct listing *)arg)->c, name);
}

static void on_holders(void *arg, bool ok, const struct backend_holder *rows, size_t n,
                       size_t more)
{
    struct listing *l = arg;
    struct client *c = l->c;
    char line[PROTO_INFO_MAX];
    size_t cap = 0;

    l->op = NULL;              /* answered: nothing left to cancel */
    if (!ok) {
        listing_free(l);
        cmd_reply_unavailable(c);
        client_complete(c);
        return;
    }
    /* The rows live for this call only: kept as the lines they make. */
    for (size_t i = 0; i < n; i++) {
        int len = fmt_holder_line(line, sizeof(line), &rows[i], NULL);

        if (len < 0)
            continue;
        if (l->gathered_len + (size_t)len > cap) {
            size_t want = cap ? cap * 2 : 64 * 1024;
            char *p;

            while (want < l->gathered_len + (size_t)len)
                want *= 2;
            if (!(p = realloc(l->gathered, want))) {
                listing_free(l);
                client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
                client_complete(c);
                return;
            }
            l->gathered = p;
            cap = want;
        }
        memcpy(l->gathered + l->gathered_len, line, (size_t)len);
        l->gathered_len += (size_t)len;
    }
    if (!l->gathered && !(l->gathered = malloc(1))) {
        listing_free(l);
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        client_complete(c);
        return;
    }
    l->more = (unsigned)more;
    listing_run(l, true);
}

/* HOLDERS [<glob>]: every holder and queued request, from the backend's
 * queues when it has its own (all daemons), else from the table. */
void cmd_holders(struct client *c, const struct proto_req *req, const char *glob)
{
    struct backend *be = c->srv->backend;
    struct listing *l = listing_new(c, req->cmd, glob);
    char text[96];

    if (!l) {
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        return;
    }
    if (!be->ops->list) {
        listing_run(l, false);
        return;
    }
    if (c->srv->holders_gathered >= HOLDERS_GATHERED_MAX) {
        free(l);
        snprintf(text, sizeof(text), "at most %u HOLDERS replies are gathered at a time; "
                 "try again", HOLDERS_GATHERED_MAX);
        client_reply_err(c, PROTO_ERR_LIMIT, text);
        return;
    }
    l->gathering = true;
    c->srv->holders_gathered++;
    l->op = be->ops->list(be->impl, glob[0] ? glob : "*", may_list, on_holders, l);
    if (!l->op) {
        listing_free(l);
        cmd_reply_unavailable(c);
        return;
    }
    client_suspend(c, req->cmd, &cmd_listing_ops, l, NULL);
}

/* A statistic as a STAT line. */
static void add_stat_line(void *arg, const char *name, const char *value)
{
    char buf[PROTO_REPLY_MAX];

    client_reply_more(arg, buf, proto_fmt_stat(buf, sizeof(buf), name, value));
}

/* STATS: STAT lines, memcached style, then END. */
void cmd_stats(struct client *c, const struct proto_req *req, const char *name)
{
    char buf[8];

    stats_each(c->srv, add_stat_line, c);
    client_reply(c, buf, proto_fmt_word(buf, sizeof(buf), "END"));
}

/* HELP: a line per command of the table, then END. */
void cmd_help(struct client *c, const struct proto_req *req, const char *name)
{
    char buf[PROTO_REPLY_MAX];

    for (int i = 0; i < PROTO_CMD_COUNT; i++)
        client_reply_more(c, buf, proto_fmt_help(buf, sizeof(buf), (enum proto_cmd)i));
    client_reply(c, buf, proto_fmt_word(buf, sizeof(buf), "END"));
}
