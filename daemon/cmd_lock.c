/*
 * cmd_lock.c - LOCK, TRYLOCK, UNLOCK, RENEW and CHECK of one name, and the
 * lock table's callbacks for a client's holds. Sets of names are in
 * cmd_lockset.c; the replies to the lock table's answers, which sets and
 * single names share, in cmd_reply.c.
 *
 * A LOCK that must wait parks in the client's pending slot; the lock
 * table's done() answers it. After the end of input, a LOCK waiting for
 * the client ends at once with TIMEOUT: a lock bound to the connection
 * would be released at the close that follows, and the client may be gone
 * (a full close looks the same), so no wait stays queued for it - a
 * lease's included. While the backend is unreachable it ends with
 * ERR UNAVAILABLE, as any wait would then.
 */
#include "config.h"
#include "cmd_int.h"

#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "lease.h"
#include "log.h"
#include "session.h"
#include "snap.h"
#include "settings.h"

/* A wait cut short by the end of input: TIMEOUT, or ERR UNAVAILABLE in an outage. */
static void reply_wait_cut(struct client *c)
{
    cmd_reply_lock_result(c, c->pending_cmd, c->pending_name, cmd_wait_cut(c), 0, true);
    client_complete(c);
}

static void lock_wait_input_ended(struct client *c, void *op)
{
    if (locks_cancel_wait(c->srv->locks, &c->owner, c->pending_name))
        reply_wait_cut(c);
}

/* Handover: a wait still queued (not being acquired, not answered). */
static bool lock_wait_ready(const struct client *c, void *op)
{
    return locks_owner_waiting(c->srv->locks, &c->owner, c->pending_name);
}

/* Handover: the wait is queued again as it was, the lock table's hold
 * restored already (le: the lease it waits for, or NULL). */
static bool wait_restore(struct client *c, struct snap_r *r, struct lease *le);

static bool lock_wait_restore(struct client *c, struct snap_r *r, struct restart_in *in)
{
    return wait_restore(c, r, NULL);
}

/* A LOCK waiting in the table: the owner's release at the close ends the wait. */
const struct pending_ops cmd_lock_wait_ops = {
    .what = "lock wait", .cancel = NULL, .input_ended = lock_wait_input_ended,
    .snap_kind = "lock", .snap_ready = lock_wait_ready, .restore = lock_wait_restore,
};

static void lease_wait_cancel(struct client *c, void *op)
{
    leases_cancel(c->srv->leases, op);
}

static void lease_wait_input_ended(struct client *c, void *op)
{
    leases_cancel(c->srv->leases, op);
    reply_wait_cut(c);
}

static bool lease_wait_ready(const struct client *c, void *op)
{
    return locks_owner_waiting(c->srv->locks, leases_owner(op), c->pending_name);
}

/* Handover: the lease by its number in the snapshot. */
static void lease_wait_save(const struct client *c, void *op, struct snap_w *w)
{
    uint64_t n = 0;

    leases_owner_number(leases_owner(op), &n);
    snap_w_u64(w, n);
}

static bool lease_wait_restore(struct client *c, struct snap_r *r, struct restart_in *in)
{
    uint64_t n = snap_r_u64(r);
    struct lease *le;

    if (!snap_r_ok(r))
        return false;
    if (!(le = leases_restored(in, n)) || !leases_restore_requester(le, &c->owner))
        return snap_r_fail(r, "conn %llu waits for lease %llu, which is not waiting",
                           (unsigned long long)c->id, (unsigned long long)n);
    return wait_restore(c, r, le);
}

/* A LOCK ... ttl= being acquired: the lease is the client's until granted. */
const struct pending_ops cmd_lease_wait_ops = {
    .what = "lease wait", .cancel = lease_wait_cancel, .input_ended = lease_wait_input_ended,
    .snap_kind = "lease", .snap_ready = lease_wait_ready, .save = lease_wait_save,
    .restore = lease_wait_restore,
};

static bool wait_restore(struct client *c, struct snap_r *r, struct lease *le)
{
    char name[PROTO_NAME_MAX + 1];

    if (!client_restore_cmd(c, r, PROTO_CMD_LOCK, PROTO_CMD_TRYLOCK) || !snap_r_done(r))
        return false;
    if (!locks_owner_waiting(c->srv->locks, le ? leases_owner(le) : &c->owner, c->pending_name))
        return snap_r_fail(r, "conn %llu waits for %s, which it does not wait for",
                           (unsigned long long)c->id, c->pending_name);
    snprintf(name, sizeof(name), "%s", c->pending_name);
    client_suspend(c, c->pending_cmd, le ? &cmd_lease_wait_ops : &cmd_lock_wait_ops, le, name);
    return true;
}

/* LOCK and TRYLOCK of one name, as a hold of the client or as a lease (ttl=). */
void cmd_lock(struct client *c, const struct proto_req *req, const char *name)
{
    struct lease *lease = NULL;
    struct lock_req lreq;
    enum locks_result r;
    uint64_t token = 0;
    char text[96];

    cmd_lock_req(c, req, &lreq);
    if (lreq.ttl_ms > 0)
        r = leases_lock(c->srv->leases, &c->owner, name, &lreq, &token, &lease);
    else
        r = locks_lock(c->srv->locks, &c->owner, name, &lreq, &token);
    if (r == LOCKS_WAITING) {
        client_suspend(c, req->cmd, lease ? &cmd_lease_wait_ops : &cmd_lock_wait_ops, lease, name);
    } else if (r == LOCKS_LIMIT && lreq.ttl_ms > 0) {
        snprintf(text, sizeof(text), "%u leases are held or awaited through this daemon",
                 c->srv->settings->max_leases);
        client_reply_err(c, PROTO_ERR_LIMIT, text);
    } else {
        cmd_reply_lock_result(c, req->cmd, name, r, token, true);
    }
}

/*
 * CHECK's <safe-ms> (PROTOCOL.md, CHECK) from what is left, in ms, before
 * another holder could be granted: less a tenth for clocks that do not run
 * at quite the same rate, rounded down, at most PROTO_SAFE_MAX.
 */
static int64_t safe_ms_of(int64_t left_ms)
{
    if (left_ms <= 0)
        return 0;
    if (left_ms > PROTO_SAFE_MAX)
        left_ms = PROTO_SAFE_MAX;
    return left_ms - (left_ms + 9) / 10;
}

/* UNLOCK <name> <token> of a lease, RENEW, or CHECK <name> <token> of a lease. */
static void reply_lease_op(struct client *c, enum proto_cmd cmd, const char *name,
                           enum locks_result r, uint64_t token, int64_t left_ms)
{
    char buf[PROTO_REPLY_MAX];

    switch (r) {
    case LOCKS_RELEASED:
        if (cmd == PROTO_CMD_CHECK)
            client_reply(c, buf, proto_fmt_checked(buf, sizeof(buf), name, strlen(name), token,
                                                   safe_ms_of(left_ms)));
        else
            cmd_reply_word(c, "OK", name, strlen(name));
        break;
    case LOCKS_NOT_HELD:
        client_reply_err(c, PROTO_ERR_NOT_HELD, "no lease of that name with that token: the "
                         "token is wrong, or the lease ended");
        break;
    case LOCKS_UNAVAILABLE:
        cmd_reply_unavailable(c);
        break;
    default:
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        break;
    }
}

static void lease_op_cancel(struct client *c, void *op)
{
    leases_op_cancel(c->srv->leases, op);
}

/* A lease operation the backend answers later. */
static const struct pending_ops lease_op_ops = { .what = "lease", .cancel = lease_op_cancel };

static void on_lease_op(void *arg, enum locks_result r, int64_t left_ms)
{
    struct client *c = arg;

    c->pending_op = NULL;      /* answered: nothing left to cancel */
    if (r == LOCKS_RELEASED && c->pending_cmd == PROTO_CMD_UNLOCK)
        leases_note_released(c->srv->leases);
    reply_lease_op(c, c->pending_cmd, c->pending_name, r, c->pending_token, left_ms);
    client_complete(c);
}

/* UNLOCK, RENEW or CHECK of the lease with req's token. */
static void lease_op(struct client *c, const struct proto_req *req, const char *name)
{
    struct backend_lease_op *op = NULL;
    int64_t left_ms = 0;
    enum locks_result r;

    r = leases_op(c->srv->leases, name, req->token,
                  req->cmd == PROTO_CMD_RENEW ? req->ttl_ms
                  : req->cmd == PROTO_CMD_CHECK ? LEASE_CHECK : 0,
                  on_lease_op, c, &op, &left_ms);
    if (r != LOCKS_WAITING) {
        reply_lease_op(c, req->cmd, name, r, req->token, left_ms);
        return;
    }
    c->pending_token = req->token;
    client_suspend(c, req->cmd, &lease_op_ops, op, name);
}

/* Whether req is about the client's own hold of name: no token, or its token. */
static bool own_hold(struct client *c, const struct proto_req *req, const char *name)
{
    uint64_t token;

    return !req->has_token ||
           (locks_owner_token(c->srv->locks, &c->owner, name, &token) && token == req->token);
}

/* UNLOCK: the client's own hold (with its token, if given; kept keep= ms
 * more if asked), else a lease. */
void cmd_unlock(struct client *c, const struct proto_req *req, const char *name)
{
    if (!own_hold(c, req, name) && req->keep_ms > 0) {
        client_reply_err(c, PROTO_ERR_BAD_ARGS, "keep= releases this connection's own hold "
                         "later; a lease is kept longer with RENEW");
    } else if (!own_hold(c, req, name)) {
        lease_op(c, req, name);
    } else {
        enum locks_result r = locks_unlock_keep(c->srv->locks, &c->owner, name, req->keep_ms);

        if (r == LOCKS_RELEASED)
            cmd_reply_word(c, "OK", name, req->name_len);
        else if (r == LOCKS_KEEP_ACCOUNT || r == LOCKS_KEEP_TOTAL)
            cmd_reply_quota(c, r, "; the lock is still held");   /* nothing changed */
        else
            client_reply_err(c, PROTO_ERR_NOT_HELD, "this connection does not hold that lock");
    }
}

void cmd_renew(struct client *c, const struct proto_req *req, const char *name)
{
    lease_op(c, req, name);
}

/*
 * How long, from now, this daemon keeps serving a connection whose client
 * went silent: over TCP, the keepalive probes or the user timeout end it
 * no sooner than this after the last byte came in (the CHECK itself), and
 * a close is an abandonment, followed by the hold's lock-delay. Over the
 * Unix socket only the client's own end closes it.
 */
static int64_t conn_window_ms(const struct client *c)
{
    const struct settings *s = c->srv->settings;
    int64_t ka = ((int64_t)s->tcp_keepalive_idle_s +
                  (int64_t)s->tcp_keepalive_interval_s * s->tcp_keepalive_count) * 1000;

    if (strcmp(c->peer, "unix") == 0)
        return INT64_MAX;
    if (s->tcp_user_timeout_ms > 0 && s->tcp_user_timeout_ms < ka)
        return s->tcp_user_timeout_ms;
    return ka;
}

/* CHECK <name> [<token>] of the client's own hold. */
static void check_own(struct client *c, const char *name)
{
    char buf[PROTO_REPLY_MAX];
    int64_t delay_ms, backend_ms, left;
    uint64_t token;

    if (!locks_owner_check(c->srv->locks, &c->owner, name, &token, &delay_ms, &backend_ms)) {
        client_reply_err(c, PROTO_ERR_NOT_HELD, "this connection does not hold that lock");
        return;
    }
    left = conn_window_ms(c);
    /* With a session the hold outlives the connection by its grace. */
    if (c->session && left < INT64_MAX - session_grace_ms(c->session))
        left += session_grace_ms(c->session);
    if (left < INT64_MAX - delay_ms)
        left += delay_ms;
    if (backend_ms < left)
        left = backend_ms;
    client_reply(c, buf, proto_fmt_checked(buf, sizeof(buf), name, strlen(name), token,
                                           safe_ms_of(left)));
}

/* CHECK: without a token, or with its own hold's, the client's hold; else a lease. */
void cmd_check(struct client *c, const struct proto_req *req, const char *name)
{
    if (own_hold(c, req, name))
        check_own(c, name);
    else
        lease_op(c, req, name);
}

/* The lock table's answer to a wait: queue the reply, then read on. */
static void on_lock_done(struct lock_owner *o, const char *name, enum locks_result r,
                         uint64_t token)
{
    struct client *c = client_of_owner(o);

    if (!c->pending) {
        log_error("conn %llu: lock answer while no request waits", (unsigned long long)c->id);
        return;
    }
    if (c->pending->lock_answer) {
        /* Not the request's reply: the kind goes on from it (a set's next step). */
        c->pending->lock_answer(c, c->pending_op, r, token);
        return;
    }
    c->pending_op = NULL;      /* answered: a granted lease is on its own now */
    cmd_reply_lock_result(c, c->pending_cmd, name, r, token, false);
    client_complete(c);
}

static void on_lock_lost(struct lock_owner *o, const char *name, uint64_t token,
                         const char *reason)
{
    struct client *c = client_of_owner(o);
    char buf[PROTO_REPLY_MAX];

    client_reply(c, buf, proto_fmt_lost(buf, sizeof(buf), name, token, reason));
}

const struct lock_owner_ops cmd_owner_ops = {
    .done = on_lock_done,
    .lost = on_lock_lost,
    .restart_key = client_restart_key,
};
