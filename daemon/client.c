/*
 * client.c - a connection as the commands see it (see client.h): the one
 * pending request, the replies, the release of everything at the close.
 */
#include "config.h"
#include "client.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "log.h"
#include "restart.h"
#include "snap.h"
#include "users.h"
#include "watch.h"

/* "user alice" once logged in, else "address 192.0.2.7" or "address [::1]":
 * the peer without its port. */
static void client_set_account(struct client *c)
{
    const char *colon = strrchr(c->peer, ':');
    int len = colon ? (int)(colon - c->peer) : (int)strlen(c->peer);

    if (c->user)
        snprintf(c->account, sizeof(c->account), "user %s", c->user_name);
    else
        snprintf(c->account, sizeof(c->account), "address %.*s", len, c->peer);
    c->owner.account = c->account;
}

void client_init(struct client *c, struct server *srv, const struct client_io *io,
                 const struct lock_owner_ops *owner_ops, uint64_t id, const char *peer)
{
    c->srv = srv;
    c->io = io;
    c->id = id;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    lock_owner_init(&c->owner, owner_ops, c->peer);
    client_set_account(c);
    LIST_INSERT_HEAD(&srv->clients, c, link);
}

struct client *client_of_owner(struct lock_owner *o)
{
    return (struct client *)((char *)o - offsetof(struct client, owner));
}

void client_suspend(struct client *c, enum proto_cmd cmd, const struct pending_ops *ops,
                    void *op, const char *name)
{
    c->pending = ops;
    c->pending_op = op;
    c->pending_cmd = cmd;
    snprintf(c->pending_name, sizeof(c->pending_name), "%s", name ? name : "");
    c->io->suspend(c);
    if (c->input_ended && ops->input_ended)
        ops->input_ended(c, op);
}

void client_complete(struct client *c)
{
    c->pending = NULL;
    c->pending_op = NULL;
    c->io->resume(c);
}

void client_input_ended(struct client *c)
{
    if (c->pending && c->pending->input_ended)
        c->pending->input_ended(c, c->pending_op);
}

/* The parked request and the watches end: what every close does first. A
 * set being taken unwinds here, so its names taken so far are released,
 * not kept: its client never had its answer. */
static void client_cancel_pending(struct client *c)
{
    const struct pending_ops *p = c->pending;

    c->pending = NULL;
    if (p && p->cancel)
        p->cancel(c, c->pending_op);
    c->pending_op = NULL;
    while (c->nwatches)
        watch_remove(c->watches[--c->nwatches]);
}

unsigned client_release_keep(struct client *c, struct lock_owner *keep)
{
    if (c->pending && c->pending->unwind)
        c->pending->unwind(c, c->pending_op);
    client_cancel_pending(c);
    return locks_owner_move_held(c->srv->locks, &c->owner, keep);
}

void client_release_all(struct client *c, bool abandon)
{
    client_cancel_pending(c);
    if (abandon)
        locks_owner_abandon_all(c->srv->locks, &c->owner);
    else
        locks_owner_release_all(c->srv->locks, &c->owner);
}

void client_destroy(struct client *c)
{
    LIST_REMOVE(c, link);
    free(c->watches);
    c->watches = NULL;
}

/* A formatted line (len -1: it did not fit) to the transport. */
static void reply_line(struct client *c, const char *buf, int len, bool more)
{
    if (len < 0) {
        log_error("conn %llu: reply too long", (unsigned long long)c->id);
        return;
    }
    c->io->write(c, buf, (size_t)len, more);
}

void client_reply(struct client *c, const char *buf, int len)
{
    reply_line(c, buf, len, false);
}

void client_reply_more(struct client *c, const char *buf, int len)
{
    reply_line(c, buf, len, true);
}

void client_reply_err(struct client *c, enum proto_err err, const char *text)
{
    char buf[PROTO_REPLY_MAX];

    c->srv->stats.errors++;
    client_reply(c, buf, proto_fmt_err(buf, sizeof(buf), err, text));
}

bool client_may(const struct client *c, const char *name)
{
    return !c->srv->users || (c->user && user_may(c->user, name));
}

void client_login(struct client *c, const struct user *u)
{
    c->user = u;
    snprintf(c->user_name, sizeof(c->user_name), "%s", user_name(u));
    client_set_account(c);
    if (c->io->logged_in)
        c->io->logged_in(c);
}

bool client_relogin(struct client *c)
{
    const struct users *u = c->srv->users;

    if (!c->user)
        return true;
    c->user = u ? users_find(u, c->user_name, strlen(c->user_name)) : NULL;
    return c->user != NULL;
}

void client_drained(struct client *c)
{
    for (unsigned i = 0; i < c->nwatches; i++)
        watch_flush(c->watches[i]);
    if (c->pending && c->pending->drained)
        c->pending->drained(c, c->pending_op);
}

/* ------------------------------------------------------------- handover */

void client_restart_key(const struct lock_owner *o, char *letter, uint64_t *n)
{
    *letter = 'c';
    *n = client_of_owner((struct lock_owner *)o)->id;
}

void client_save_fields(const struct client *c, struct snap_w *w)
{
    snap_w_str(w, c->user ? c->user_name : NULL);
    snap_w_str(w, c->owner.label ? c->label : NULL);
}

bool client_restore_fields(struct client *c, struct snap_r *r, struct restart_in *in)
{
    char user[PROTO_USER_MAX + 1];
    const struct user *u;

    snap_r_str_copy(r, user, sizeof(user));
    snap_r_str_copy(r, c->label, sizeof(c->label));
    if (!snap_r_ok(r) || !restart_keep(in, r, 'c', c->id, &c->owner))
        return false;
    if (c->label[0])
        c->owner.label = c->label;
    if (!user[0])
        return true;
    /* The users file is read again by the successor: as after a reload, a
     * user who is gone takes the connection with them (closed once served). */
    snprintf(c->user_name, sizeof(c->user_name), "%s", user);
    if (!c->srv->users || !(u = users_find(c->srv->users, user, strlen(user)))) {
        c->user_gone = true;
        return true;
    }
    client_login(c, u);
    return true;
}

bool client_restore_cmd(const struct client *c, struct snap_r *r, enum proto_cmd a,
                        enum proto_cmd b)
{
    if (c->pending_cmd == a || c->pending_cmd == b)
        return true;
    return snap_r_fail(r, "conn %llu: a pending request of command %u",
                       (unsigned long long)c->id, (unsigned)c->pending_cmd);
}

struct client *client_restored(struct snap_r *r, const struct restart_in *in)
{
    uint64_t id = snap_r_u64(r);
    struct lock_owner *o = snap_r_ok(r) ? restart_find(in, 'c', id) : NULL;

    if (!o && snap_r_ok(r))
        snap_r_fail(r, "a %s record names conn %" PRIu64 ", which is not there", r->kind, id);
    return o ? client_of_owner(o) : NULL;
}

/*
 * The "pending" records: a parked request that can be carried over is
 * "pending <conn> <kind> <cmd> <name>", then its kind's own fields
 * (pending_ops.save), read back by that kind (pending_ops.restore) once the
 * holds are restored. data: a struct client_pending_kinds.
 */
static bool pending_ready(void *data, char *why, size_t len)
{
    const struct client_pending_kinds *k = data;
    const struct client *c;

    LIST_FOREACH(c, &k->srv->clients, link) {
        const struct pending_ops *p = c->pending;

        if (p && !(p->snap_kind && (!p->snap_ready || p->snap_ready(c, c->pending_op)))) {
            snprintf(why, len, "conn %llu (%s) waits for a %s", (unsigned long long)c->id,
                     c->peer, p->what);
            return false;
        }
    }
    return true;
}

static void pending_save(void *data, struct snap_w *w)
{
    const struct client_pending_kinds *k = data;
    const struct client *c;

    LIST_FOREACH(c, &k->srv->clients, link) {
        const struct pending_ops *p = c->pending;

        if (!p)
            continue;
        snap_w_rec(w, "pending");
        snap_w_u64(w, c->id);
        snap_w_str(w, p->snap_kind);
        snap_w_u64(w, c->pending_cmd);
        snap_w_str(w, c->pending_name);
        if (p->save)
            p->save(c, c->pending_op, w);
    }
}

static bool pending_restore(void *data, struct snap_r *r, struct restart_in *in)
{
    const struct client_pending_kinds *k = data;
    struct client *c = client_restored(r, in);
    char kind[16];

    if (!c || !snap_r_str_copy(r, kind, sizeof(kind)))
        return false;
    if (c->pending)
        return snap_r_fail(r, "conn %llu has two pending requests", (unsigned long long)c->id);
    c->pending_cmd = (enum proto_cmd)snap_r_u64(r);
    snap_r_str_copy(r, c->pending_name, sizeof(c->pending_name));
    if (!snap_r_ok(r))
        return false;
    for (const struct pending_ops *const *p = k->kinds; *p; p++)
        if ((*p)->snap_kind && (*p)->restore && strcmp((*p)->snap_kind, kind) == 0)
            return (*p)->restore(c, r, in);
    return snap_r_fail(r, "conn %llu: a pending request of unknown kind %s",
                       (unsigned long long)c->id, kind);
}

const struct restart_part client_pending_part = {
    .name = "parked requests",
    .kinds = (const struct restart_kind[]){ { "pending", pending_restore }, { NULL } },
    .save = pending_save,
    .ready = pending_ready,
};
