/*
 * cmd_info.c - what the daemon knows: STATUS, LOCKS, HOLDERS, STATS, HELP.
 * Names the user may not use are left out of listings, and not counted.
 */
#include "config.h"
#include "cmd.h"

#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "server.h"
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

/* The most LOCK lines one LOCKS reply carries (its output is not bounded otherwise). */
#define LOCKS_LINES_MAX 10000

struct listing {
    struct client *c;
    unsigned lines, more;
};

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

static bool add_locks_line(void *arg, const char *name, const struct locks_status *st)
{
    struct listing *l = arg;
    char buf[PROTO_INFO_MAX];
    struct proto_info in = { .name = name, .state = PROTO_FREE, .since_ms = -1, .lease_ms = -1,
                             .mode = cmd_proto_mode(st->mode), .limit = st->limit,
                             .holders = st->holders, .waiters = st->waiters,
                             .recipe = recipe_of(l->c, name) };

    if (!listing_takes(l, name, LOCKS_LINES_MAX))
        return true;
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
    }
    client_reply_more(l->c, buf, proto_fmt_lock(buf, sizeof(buf), &in));
    return true;
}

/* LOCKS [<glob>]: what this daemon's table holds and awaits, by name. */
void cmd_locks(struct client *c, const struct proto_req *req, const char *glob)
{
    struct listing l = { c, 0, 0 };

    locks_each(c->srv->locks, glob[0] ? glob : NULL, add_locks_line, &l);
    reply_end(c, l.more);
}

/* One HOLDER line; daemon: this daemon's id when the row's holder is one
 * of its clients, NULL when it reads "<daemon>/<client>" already. */
static void add_holder_line(struct client *c, const struct backend_holder *r,
                            const char *daemon)
{
    char buf[PROTO_INFO_MAX];
    struct proto_info in = {
        .name = r->name, .state = r->held ? PROTO_HELD : PROTO_QUEUED,
        .mode = cmd_proto_mode(r->mode), .limit = r->limit, .daemon = daemon,
        .holder = r->holder, .label = r->label, .has_token = r->token != 0,
        .token = r->token, .since_ms = r->since_ms, .lease_ms = r->lease_ms,
    };

    client_reply_more(c, buf, proto_fmt_holder(buf, sizeof(buf), &in));
}

static bool add_local_holder(void *arg, const struct backend_holder *row)
{
    struct listing *l = arg;

    if (listing_takes(l, row->name, HOLDERS_LINES_MAX))
        add_holder_line(l->c, row, l->c->srv->daemon_id);
    return true;
}

static bool may_list(void *arg, const char *name)
{
    return client_may(arg, name);
}

static void on_holders(void *arg, bool ok, const struct backend_holder *rows, size_t n,
                       size_t more)
{
    struct client *c = arg;

    c->pending_op = NULL;      /* answered: nothing left to cancel */
    if (!ok) {
        cmd_reply_unavailable(c);
    } else {
        for (size_t i = 0; i < n; i++)
            add_holder_line(c, &rows[i], NULL);
        reply_end(c, more);
    }
    client_complete(c);
}

static void list_cancel(struct client *c, void *op)
{
    c->srv->backend->ops->list_cancel(c->srv->backend->impl, op);
}

static const struct pending_ops list_ops = { .what = "HOLDERS", .cancel = list_cancel };

/* HOLDERS [<glob>]: every holder and queued request, from the backend's
 * queues when it has its own (all daemons), else from the table. */
void cmd_holders(struct client *c, const struct proto_req *req, const char *glob)
{
    struct backend *be = c->srv->backend;
    struct listing l = { c, 0, 0 };
    struct backend_list *op;

    if (!be->ops->list) {
        locks_each_hold(c->srv->locks, glob[0] ? glob : NULL, add_local_holder, &l);
        reply_end(c, l.more);
        return;
    }
    op = be->ops->list(be->impl, glob[0] ? glob : "*", may_list, on_holders, c);
    if (!op)
        cmd_reply_unavailable(c);
    else
        client_suspend(c, req->cmd, &list_ops, op, NULL);
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
