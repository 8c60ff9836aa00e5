/*
 * cmd_lockset.c - LOCK, TRYLOCK and UNLOCK of a set of names "a,b,c".
 *
 * A set is taken one name at a time, each an ordinary hold of the client,
 * in strcmp order whatever the order given: every client on every daemon
 * takes overlapping names in the same order, so none can hold a name
 * another waits for while waiting for one that other holds. The answer
 * goes out once all are held; a step that fails releases the names taken
 * so far (PROTOCOL.md, "Sets of locks"). While a step waits, the set is
 * the client's pending request.
 */
#include "config.h"
#include "cmd_int.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "log.h"
#include "snap.h"
#include "settings.h"

struct lockset {
    struct client *c;              /* borrowed: the set is the client's */
    enum proto_cmd cmd;            /* LOCK or TRYLOCK */
    struct lock_req lreq;          /* for every name; wait_ms is set again at each step */
    int64_t deadline_ms;           /* monotonic end of the whole wait; -1: for ever */
    unsigned n;                    /* names, 2..PROTO_SET_MAX */
    unsigned taken;                /* names held so far: those of order[0..taken) */
    unsigned order[PROTO_SET_MAX]; /* indexes of names in strcmp order */
    enum locks_result r;           /* what done() said of order[taken]'s wait */
    struct event *step;            /* owned: done() may not call into the lock table,
                                    * so the next step runs from this event */
    uint64_t tokens[PROTO_SET_MAX];              /* by index, as given */
    char names[PROTO_SET_MAX][PROTO_NAME_MAX + 1]; /* as given */
    size_t list_len;
    char list[];                   /* "a,b,c" as given, for the replies */
};

static void set_free(struct lockset *s)
{
    event_free(s->step);
    free(s);
}

/* The set's answer is queued: frees it and, if it was parked, reads on. */
static void set_end(struct lockset *s)
{
    struct client *c = s->c;
    bool parked = c->pending == &lockset_ops && c->pending_op == s;

    set_free(s);
    if (parked)
        client_complete(c);
}

/*
 * A step failed with r (or the wait was cut short): releases the names
 * taken so far and answers as for one name, with the list.
 */
static void set_fail(struct lockset *s, enum locks_result r, bool at_once)
{
    struct client *c = s->c;

    for (unsigned k = 0; k < s->taken; k++)
        locks_unlock(c->srv->locks, &c->owner, s->names[s->order[k]]);
    log_debug("conn %llu (%s): set %s not granted, %u of %u released",
              (unsigned long long)c->id, c->peer, s->list, s->taken, s->n);
    if (r == LOCKS_BUSY || r == LOCKS_TIMEOUT)
        cmd_reply_word(c, r == LOCKS_BUSY && s->cmd == PROTO_CMD_TRYLOCK ? "BUSY" : "TIMEOUT",
                       s->list, s->list_len);
    else
        cmd_reply_lock_result(c, s->cmd, s->names[s->order[s->taken]], r, 0, at_once);
    set_end(s);
}

/* All names held: unless one taken earlier was lost (LOST line) while the
 * rest was awaited, OK with every token. */
static void set_granted(struct lockset *s)
{
    struct client *c = s->c;
    char buf[PROTO_SET_REPLY_MAX];
    uint64_t token;

    for (unsigned i = 0; i < s->n; i++)
        if (!locks_owner_token(c->srv->locks, &c->owner, s->names[i], &token) ||
            token != s->tokens[i]) {
            client_reply_err(c, PROTO_ERR_UNAVAILABLE, "a lock of the set was lost while the "
                             "others were awaited; retry later");
            for (unsigned k = 0; k < s->n; k++)
                locks_unlock(c->srv->locks, &c->owner, s->names[k]);
            set_end(s);
            return;
        }
    client_reply(c, buf, proto_fmt_granted_set(buf, sizeof(buf), s->list, s->list_len,
                                               s->tokens, s->n));
    set_end(s);
}

/*
 * Takes the set's names from order[taken] on, as long as each is granted
 * at once; a wait parks the set until done().
 */
static void set_next(struct lockset *s, bool at_once)
{
    struct client *c = s->c;
    uint64_t token = 0;
    enum locks_result r;

    while (s->taken < s->n) {
        const char *name = s->names[s->order[s->taken]];

        /* One deadline for the whole set: what is left of it. */
        if (s->deadline_ms >= 0) {
            int64_t now = locks_mono_ms();

            s->lreq.wait_ms = s->deadline_ms > now ? s->deadline_ms - now : 0;
        }
        r = locks_lock(c->srv->locks, &c->owner, name, &s->lreq, &token);
        if (r == LOCKS_WAITING) {
            client_suspend(c, s->cmd, &lockset_ops, s, name);
            return;
        }
        if (r != LOCKS_GRANTED) {
            set_fail(s, r, at_once);
            return;
        }
        s->tokens[s->order[s->taken++]] = token;
    }
    set_granted(s);
}

/* The step after done(): the next name, or the end of a failed set. */
static void on_set_step(evutil_socket_t fd, short what, void *arg)
{
    struct lockset *s = arg;

    if (s->r == LOCKS_GRANTED)
        set_next(s, false);
    else
        set_fail(s, s->r, false);
}

/* The lock table's answer to the step's wait: the next step runs from the
 * loop, as done() may not call back into the table. */
static void set_lock_answer(struct client *c, void *op, enum locks_result r, uint64_t token)
{
    struct lockset *s = op;

    s->r = r;
    if (r == LOCKS_GRANTED)
        s->tokens[s->order[s->taken++]] = token;
    event_active(s->step, 0, 0);
}

/* The client is going: its holds go with the others. */
static void set_cancel(struct client *c, void *op)
{
    set_free(op);
}

/* The client goes, its session keeps its holds: the names taken so far
 * were never answered, so they are released, not kept. */
static void set_unwind(struct client *c, void *op)
{
    struct lockset *s = op;

    for (unsigned k = 0; k < s->taken; k++)
        locks_unlock(c->srv->locks, &c->owner, s->names[s->order[k]]);
    s->taken = 0;
}

/* The end of input cuts the step's wait short, and with it the set. */
static void set_input_ended(struct client *c, void *op)
{
    struct lockset *s = op;

    if (locks_cancel_wait(c->srv->locks, &c->owner, c->pending_name))
        set_fail(s, cmd_wait_cut(c), true);
}

/* Handover: while a step waits in the table, not between two steps. */
static bool set_ready(const struct client *c, void *op)
{
    return locks_owner_waiting(c->srv->locks, &c->owner, c->pending_name);
}

/* Handover: the request and how far it got; names and order follow from the list. */
static void set_save(const struct client *c, void *op, struct snap_w *w)
{
    const struct lockset *s = op;

    snap_w_u64(w, s->lreq.mode);
    snap_w_u64(w, s->lreq.limit);
    snap_w_bool(w, s->lreq.try);
    snap_w_i64(w, s->lreq.ttl_ms);
    snap_w_i64(w, s->lreq.delay_ms);
    snap_w_bool(w, s->lreq.delay_default);
    snap_w_i64(w, s->deadline_ms);
    snap_w_u64(w, s->taken);
    snap_w_str(w, s->list);
    for (unsigned i = 0; i < s->n; i++)
        snap_w_u64(w, s->tokens[i]);
}

static bool set_restore(struct client *c, struct snap_r *r, struct restart_in *in);

const struct pending_ops lockset_ops = {
    .what = "set", .cancel = set_cancel, .unwind = set_unwind, .input_ended = set_input_ended,
    .lock_answer = set_lock_answer,
    .snap_kind = "set", .snap_ready = set_ready, .save = set_save, .restore = set_restore,
};

/* UNLOCK a,b,c [keep=<ms>]: all or nothing, every name must be held. */
static void set_unlock(struct lockset *s, int64_t keep_ms)
{
    struct client *c = s->c;
    char text[PROTO_NAME_MAX + 64];
    const char *names[PROTO_SET_MAX];
    enum locks_result r;
    uint64_t token;

    for (unsigned i = 0; i < s->n; i++)
        if (!locks_owner_token(c->srv->locks, &c->owner, s->names[i], &token)) {
            snprintf(text, sizeof(text), "this connection does not hold %s; "
                     "nothing was released", s->names[i]);
            client_reply_err(c, PROTO_ERR_NOT_HELD, text);
            set_free(s);
            return;
        }
    for (unsigned i = 0; i < s->n; i++)
        names[i] = s->names[i];
    if ((r = locks_keep_room(c->srv->locks, &c->owner, names, s->n, keep_ms)) !=
        LOCKS_RELEASED) {
        cmd_reply_quota(c, r, "; nothing was released");
        set_free(s);
        return;
    }
    for (unsigned i = 0; i < s->n; i++)
        locks_unlock_keep(c->srv->locks, &c->owner, s->names[i], keep_ms);
    cmd_reply_word(c, "OK", s->list, s->list_len);
    set_free(s);
}

/* A copy of req's set, or NULL (ERR INTERNAL sent). *fresh: names not held yet. */
static struct lockset *set_new(struct client *c, const struct proto_req *req, unsigned *fresh)
{
    struct lockset *s = malloc(sizeof(*s) + req->name_len + 1);
    uint64_t token;

    if (!s || !(s->step = event_new(c->srv->base, -1, 0, on_set_step, s))) {
        free(s);
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    s->c = c;
    s->n = req->nnames;
    memset(s->tokens, 0, sizeof(s->tokens));   /* the names not taken yet have none */
    *fresh = 0;
    for (unsigned i = 0; i < s->n; i++) {
        memcpy(s->names[i], req->names[i].p, req->names[i].len);
        s->names[i][req->names[i].len] = '\0';
        *fresh += !locks_owner_token(c->srv->locks, &c->owner, s->names[i], &token);
    }
    memcpy(s->list, req->name, req->name_len);
    s->list[req->name_len] = '\0';
    s->list_len = req->name_len;
    /* Insertion sort: at most PROTO_SET_MAX names. */
    for (unsigned i = 0; i < s->n; i++) {
        unsigned j = i;

        for (; j > 0 && strcmp(s->names[s->order[j - 1]], s->names[i]) > 0; j--)
            s->order[j] = s->order[j - 1];
        s->order[j] = i;
    }
    return s;
}

static bool set_restore(struct client *c, struct snap_r *r, struct restart_in *in)
{
    struct proto_req req = { .cmd = c->pending_cmd };
    struct lock_req lreq;
    const char *list;
    struct lockset *s;
    unsigned taken, fresh, i;
    int64_t deadline_ms;
    bool whole = false;
    size_t len;

    if (!client_restore_cmd(c, r, PROTO_CMD_LOCK, PROTO_CMD_TRYLOCK))
        return false;
    lreq.mode = (enum lock_mode)snap_r_u64(r);
    lreq.limit = (unsigned)snap_r_u64(r);
    lreq.try = snap_r_bool(r);
    lreq.ttl_ms = snap_r_i64(r);
    lreq.delay_ms = snap_r_i64(r);
    lreq.delay_default = snap_r_bool(r);
    deadline_ms = snap_r_i64(r);
    taken = (unsigned)snap_r_u64(r);
    list = snap_r_str(r, &len);
    /* The list splits as the request did: the same names, in the same order. */
    for (const char *p = list; snap_r_ok(r) && list && req.nnames < PROTO_SET_MAX; ) {
        const char *comma = memchr(p, ',', len - (size_t)(p - list));
        size_t n = comma ? (size_t)(comma - p) : len - (size_t)(p - list);

        if (n == 0 || n > PROTO_NAME_MAX)
            break;
        req.names[req.nnames].p = p;
        req.names[req.nnames++].len = n;
        if (!comma) {
            whole = true;
            break;
        }
        p = comma + 1;
    }
    if (!snap_r_ok(r) || !list || !whole || req.nnames < 2 || taken >= req.nnames ||
        strlen(list) != len || (unsigned)lreq.mode >= LOCK_MODE_COUNT)
        return snap_r_fail(r, "conn %llu: a set that does not add up", (unsigned long long)c->id);
    req.name = list;
    req.name_len = len;
    if (!(s = set_new(c, &req, &fresh)))
        return snap_r_fail(r, "out of memory");
    s->cmd = c->pending_cmd;
    s->lreq = lreq;
    s->deadline_ms = deadline_ms;
    s->taken = taken;
    s->r = LOCKS_GRANTED;
    for (i = 0; i < s->n; i++)
        s->tokens[i] = snap_r_u64(r);
    if (!snap_r_done(r) ||
        !locks_owner_waiting(c->srv->locks, &c->owner, s->names[s->order[taken]])) {
        set_free(s);
        return snap_r_fail(r, "conn %llu: a set that does not add up", (unsigned long long)c->id);
    }
    client_suspend(c, s->cmd, &lockset_ops, s, s->names[s->order[taken]]);
    return true;
}

void cmd_lockset(struct client *c, const struct proto_req *req, const char *name)
{
    struct lockset *s;
    unsigned fresh;

    if (!(s = set_new(c, req, &fresh)))
        return;
    if (req->cmd == PROTO_CMD_UNLOCK) {
        set_unlock(s, req->keep_ms);
        return;
    }
    /* Over the limit once all are held: refused before anything is taken. */
    if (c->owner.nholds + fresh > c->srv->settings->max_locks_per_client) {
        cmd_reply_lock_result(c, req->cmd, s->names[0], LOCKS_LIMIT, 0, true);
        set_free(s);
        return;
    }
    s->cmd = req->cmd;
    cmd_lock_req(c, req, &s->lreq);
    s->deadline_ms = req->wait_ms >= 0 ? locks_mono_ms() + req->wait_ms : -1;
    s->taken = 0;
    s->r = LOCKS_GRANTED;
    log_debug("conn %llu (%s): set %s, %u names", (unsigned long long)c->id, c->peer,
              s->list, s->n);
    set_next(s, true);
}
