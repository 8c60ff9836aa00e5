/*
 * conn.c - the connection state machine.
 *
 * Request lines are parsed straight out of the bufferevent's input buffer.
 * Replies go out strictly in request order: while a LOCK waits, later lines
 * stay unparsed in the input buffer (the way redis blocks a client on BLPOP).
 * Input is bounded by a read watermark: a client that keeps sending while its
 * replies go unread meets TCP back-pressure instead of growing our memory.
 * A waiting client is read on, so that its hang-up is seen, and one that
 * sends more than the bound behind its waiting request is closed.
 *
 * With a users file, a connection logs in with AUTH before anything but
 * PING, HELP and QUIT, and names outside its user's patterns are refused.
 * A failed AUTH is answered AUTH_FAIL_DELAY_MS after it arrived, from a
 * timer: meanwhile the connection is CONN_WAITING like a waiting LOCK, so
 * the requests behind it stay unparsed (bounded as for any wait) and one
 * connection cannot try more than one password at a time.
 *
 * A set (LOCK a,b,c) is taken one name at a time, each an ordinary hold of
 * the connection, in strcmp order whatever the order given: every client
 * on every daemon takes overlapping names in the same order, so none can
 * hold a name another waits for while waiting for one that other holds.
 * The answer goes out once all are held; a step that fails releases the
 * names taken so far (PROTOCOL.md, "Sets of locks").
 */
#include "config.h"
#include "conn.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "backend.h"
#include "locks.h"
#include "log.h"
#include "lease.h"
#include "proto.h"
#include "server.h"
#include "settings.h"
#include "users.h"
#include "stats.h"
#include "watch.h"

enum conn_state {
    CONN_READING,   /* parsing request lines as they arrive */
    CONN_WAITING,   /* a request awaits its answer; later lines wait unparsed, up to
                       conn_input_max() bytes */
    CONN_DRAINING,  /* OUTPUT_MAX bytes of replies unread: parse nothing until they go */
    CONN_CLOSING,   /* locks released, last reply queued: shut down once it is written */
    CONN_LINGER,    /* write side shut: discard input until EOF so the reply is not reset */
};

static const char *const state_names[] = {
    "reading", "waiting", "draining", "closing", "linger",
};

/* Replies a client may leave unread before we stop parsing its requests. */
#define OUTPUT_MAX (64 * 1024)
/* Input buffered beyond the longest line (see conn_input_max()). */
#define INPUT_SLACK (64 * 1024)
/* How long a closing connection may keep sending before we just close. */
#define LINGER_SECONDS 2
/* A failed AUTH is answered this long after it came (PROTOCOL.md, AUTH):
 * one guess per second per connection. */
#define AUTH_FAIL_DELAY_MS 1000

/* A set being acquired (LOCK/TRYLOCK a,b,c); see the top of the file. */
struct conn_set {
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

struct conn {
    struct server *srv;            /* borrowed */
    struct bufferevent *bev;       /* owned; closes the fd */
    struct lock_owner owner;       /* this client's holds, managed by the lock table */
    enum conn_state state;         /* change only through conn_set_state() */
    enum proto_cmd waiting_cmd;    /* LOCK, TRYLOCK, UNLOCK, RENEW, STATUS or AUTH, in CONN_WAITING */
    struct backend_query *query;   /* STATUS: the backend's answer pending, or NULL */
    struct backend_list *listing;  /* HOLDERS: the backend's answer pending, or NULL */
    struct watch_sub **watches;    /* WATCH: this connection's, owned (the array and each) */
    unsigned nwatches, watches_cap;
    struct lease *lease;           /* LOCK ... ttl=: the lease being acquired, or NULL */
    struct conn_set *set;          /* owned: LOCK a,b,c being acquired, or NULL */
    struct backend_lease_op *lease_op; /* UNLOCK/RENEW by token: the answer pending, or NULL */
    char status_name[PROTO_NAME_MAX + 1]; /* the name that query or lease_op is about */
    uint64_t check_token;          /* the token that lease_op is about */
    struct event *linger_timer;    /* owned; armed in CONN_LINGER */
    struct event *auth_timer;      /* owned, made at the first AUTH; armed while a failed
                                    * AUTH's answer is held back (CONN_WAITING) */
    const struct user *user;       /* logged in as; in srv->users; NULL: not logged in */
    char user_name[PROTO_USER_MAX + 1]; /* user's name, kept to find it after a reload */
    int send_err;                  /* errno of a failed direct send, for the close; 0: none */
    bool input_ended;              /* the client half-closed: answer what came, then close */
    unsigned released;             /* holds and waits released by conn_begin_close() */
    char lock_name[PROTO_NAME_MAX + 1]; /* the LOCK waiting in CONN_WAITING */
    uint64_t id;
    TAILQ_ENTRY(conn) link;        /* srv->conns */
    char peer[64];
    char label[PROTO_LABEL_MAX + 1]; /* CLIENT <label>; owner.label points here once set */
};

static struct conn *conn_of(struct lock_owner *o)
{
    return (struct conn *)((char *)o - offsetof(struct conn, owner));
}

/*
 * Unparsed input a connection may buffer: the longest request line with its
 * LF, plus INPUT_SLACK (PROTOCOL.md, Transport). The read watermark is one
 * byte more, so that a waiting connection that sends more is read and seen.
 */
static size_t conn_input_max(const struct server *srv)
{
    return (size_t)srv->settings->max_line + 1 + INPUT_SLACK;
}

static void conn_set_watermark(struct conn *c)
{
    bufferevent_setwatermark(c->bev, EV_READ, 0, conn_input_max(c->srv) + 1);
}

static void conn_set_state(struct conn *c, enum conn_state to)
{
    if (c->state == to)
        return;
    log_debug("conn %llu: going from %s to %s", (unsigned long long)c->id,
              state_names[c->state], state_names[to]);
    c->state = to;
}

/*
 * Queues a reply line. When nothing is queued ahead of it, it is sent at
 * once: through the bufferevent, every one-line reply would cost enabling
 * and disabling write interest and another loop iteration.
 */
static void conn_write(struct conn *c, const char *buf, int len)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    ssize_t sent = 0;

    if (len < 0) {
        log_error("conn %llu: reply too long", (unsigned long long)c->id);
        return;
    }
    if (evbuffer_get_length(out) == 0) {
        sent = send(bufferevent_getfd(c->bev), buf, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent == len)
            return;
        if (sent < 0) {
            /* EAGAIN, or an error the bufferevent will see as EOF: the send
             * took the socket's error (ETIMEDOUT...), so keep it for the log. */
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && !c->send_err)
                c->send_err = errno;
            sent = 0;
        }
    }
    if (evbuffer_add(out, buf + sent, (size_t)(len - sent)) < 0)
        log_error("conn %llu: cannot queue a reply", (unsigned long long)c->id);
}

static void reply_err(struct conn *c, enum proto_err err, const char *text)
{
    char buf[PROTO_REPLY_MAX];

    c->srv->stats.errors++;
    conn_write(c, buf, proto_fmt_err(buf, sizeof(buf), err, text));
}

/* name may be a set's list. */
static void reply_word(struct conn *c, const char *word, const char *name, size_t len)
{
    char buf[PROTO_SET_REPLY_MAX];

    conn_write(c, buf, proto_fmt_word_name(buf, sizeof(buf), word, name, len));
}

/* Cancels what the connection waits for and releases what it holds (not
 * its leases, which belong to no connection). abandon: the client ended
 * without saying so (not QUIT): holds with a lock-delay keep their names
 * for it (PROTOCOL.md, Lock-delay). */
static void conn_set_free(struct conn *c);

static void conn_release_all(struct conn *c, bool abandon)
{
    struct backend *be = c->srv->backend;

    if (c->query)
        be->ops->query_cancel(be->impl, c->query);
    c->query = NULL;
    if (c->listing)
        be->ops->list_cancel(be->impl, c->listing);
    c->listing = NULL;
    if (c->lease)
        leases_cancel(c->srv->leases, c->lease);
    c->lease = NULL;
    if (c->lease_op)
        leases_op_cancel(c->srv->leases, c->lease_op);
    c->lease_op = NULL;
    if (c->auth_timer)
        evtimer_del(c->auth_timer);
    while (c->nwatches)
        watch_remove(c->watches[--c->nwatches]);
    conn_set_free(c);               /* its holds go with the others */
    if (abandon)
        locks_owner_abandon_all(c->srv->locks, &c->owner);
    else
        locks_owner_release_all(c->srv->locks, &c->owner);
}

/* ZooKeeper (distributed mode) could not be asked. */
static void reply_unavailable(struct conn *c)
{
    reply_err(c, PROTO_ERR_UNAVAILABLE, "the lock service is not reachable; retry later");
}

/* Releases everything and queues the last reply; conn_on_write closes.
 * abandon as for conn_release_all(). */
static void conn_begin_close(struct conn *c, bool abandon)
{
    c->released += c->owner.nholds;     /* for the "closed" log line */
    conn_release_all(c, abandon);
    conn_set_state(c, CONN_CLOSING);
    /* The last reply may have gone out directly: no write will call back. */
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        bufferevent_trigger(c->bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/*
 * Says how the name is in use. The lock table answers a conflict at once;
 * one answered later came from the backend: another daemon's request.
 */
static void reply_conflict(struct conn *c, const char *name, bool at_once)
{
    struct locks_status ls;
    char text[128];

    locks_status(c->srv->locks, name, &ls);
    if (!at_once)
        snprintf(text, sizeof(text), "the lock is held or awaited through another daemon "
                 "in another mode or with another limit");
    else if (ls.mode == LOCK_LIMIT)
        snprintf(text, sizeof(text), "the lock is in use with limit=%u; every holder and "
                 "waiter must ask for the same limit", ls.limit);
    else
        snprintf(text, sizeof(text), "the lock is in use without limit=; a semaphore needs "
                 "a name that is not in use as a lock");
    reply_err(c, PROTO_ERR_CONFLICT, text);
}

/* at_once: the lock table answered the request itself, not a callback later. */
static void reply_lock_result(struct conn *c, enum proto_cmd cmd, const char *name,
                              enum locks_result r, uint64_t token, bool at_once)
{
    char buf[PROTO_REPLY_MAX];
    size_t len = strlen(name);

    switch (r) {
    case LOCKS_GRANTED:
        conn_write(c, buf, proto_fmt_granted(buf, sizeof(buf), name, len, token));
        break;
    case LOCKS_BUSY:
        reply_word(c, cmd == PROTO_CMD_TRYLOCK ? "BUSY" : "TIMEOUT", name, len);
        break;
    case LOCKS_TIMEOUT:
        reply_word(c, "TIMEOUT", name, len);
        break;
    case LOCKS_UNAVAILABLE:
        /* Not somebody's hold: the daemon could not ask (ZooKeeper outage). */
        reply_unavailable(c);
        break;
    case LOCKS_LIMIT:
        snprintf(buf, sizeof(buf), "this connection already holds or awaits %u locks",
                 c->srv->settings->max_locks_per_client);
        reply_err(c, PROTO_ERR_LIMIT, buf);
        break;
    case LOCKS_NOMEM:
        reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        break;
    case LOCKS_CONFLICT:
        reply_conflict(c, name, at_once);
        break;
    case LOCKS_MODE_HELD:
        reply_err(c, PROTO_ERR_CONFLICT, "this connection holds that lock in another mode; "
                  "UNLOCK it first (no upgrade or downgrade)");
        break;
    case LOCKS_UNSUPPORTED:
        /* PROTOCOL.md, "Non-fair names" */
        snprintf(buf, sizeof(buf), "lock %s is non-fair ([zookeeper] nonfair): exclusive "
                 "locks without ttl= or delay= only", name);
        reply_err(c, PROTO_ERR_BAD_ARGS, buf);
        break;
    case LOCKS_WAITING:
    case LOCKS_RELEASED:
    case LOCKS_NOT_HELD:
        reply_err(c, PROTO_ERR_INTERNAL, "unexpected lock table answer");
        break;
    }
}

/* A statistic as a STAT line; cookie is the output buffer. */
static void add_stat_line(void *cookie, const char *name, const char *value)
{
    evbuffer_add_printf(cookie, "STAT %s %s\n", name, value);
}

/* STAT lines, memcached style. */
static void reply_stats(struct conn *c)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);

    stats_each(c->srv, add_stat_line, out);
    evbuffer_add(out, "END\n", 4);
}

/* The name's recipe when the backend has another than the usual one, or NULL. */
static const char *conn_recipe(const struct conn *c, const char *name)
{
    const struct backend *b = c->srv->backend;

    return b->ops->recipe ? b->ops->recipe(b->impl, name) : NULL;
}

/* One STATUS line from this daemon's table and what the backend knows beyond it. */
static void reply_status(struct conn *c, const char *name, const struct backend_queue_info *zi)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    struct locks_status ls;
    char since[24] = "-", mode[48 + PROTO_LABEL_MAX + 32] = "";
    const char *label, *recipe;
    unsigned queue, holders;
    int64_t lease_ms;
    enum lock_mode m;

    if (!zi->ok) {
        reply_unavailable(c);
        return;
    }
    locks_status(c->srv->locks, name, &ls);
    queue = zi->global ? zi->queue : ls.holders + ls.waiters;
    holders = zi->global ? zi->holders : ls.holders;
    /* The mode of whoever is first, here or across daemons; exclusive
     * lines keep their v1 form, the others end in mode= and holders=. */
    m = zi->global && zi->queue > 0 ? zi->mode : ls.mode;
    if (m == LOCK_SHARED)
        snprintf(mode, sizeof(mode), " mode=shared holders=%u", holders);
    else if (m == LOCK_LIMIT)
        snprintf(mode, sizeof(mode), " mode=limit limit=%u holders=%u",
                 zi->global && zi->queue > 0 ? zi->limit : ls.limit, holders);
    /* An abandoned hold keeps the name for its lock-delay: how much longer. */
    if (ls.delay_ms > 0)
        snprintf(mode + strlen(mode), sizeof(mode) - strlen(mode), " delay=%lld",
                 (long long)ls.delay_ms);
    /* A lease holds it: the time left before it ends by itself. */
    lease_ms = ls.lease_ms >= 0 ? ls.lease_ms : zi->global && zi->holders > 0 ? zi->lease_ms : -1;
    if (lease_ms >= 0)
        snprintf(mode + strlen(mode), sizeof(mode) - strlen(mode), " lease=%lld",
                 (long long)lease_ms);
    /* A name with a recipe of its own says which (PROTOCOL.md, STATUS). */
    if ((recipe = conn_recipe(c, name)))
        snprintf(mode + strlen(mode), sizeof(mode) - strlen(mode), " recipe=%s", recipe);
    /* The holder's CLIENT label comes last, when it has one. */
    label = ls.held ? ls.label : zi->global && zi->holders > 0 && zi->label[0] ? zi->label : NULL;
    if (label)
        snprintf(mode + strlen(mode), sizeof(mode) - strlen(mode), " label=%s", label);
    if (ls.held) {
        evbuffer_add_printf(out, "STATUS %s held holder=%s/%s token=%llu since=%lld waiters=%u "
                            "queue=%u%s\n", name, c->srv->daemon_id, ls.holder,
                            (unsigned long long)ls.token, (long long)ls.since_ms, ls.waiters,
                            queue, mode);
    } else if (zi->global && zi->holders > 0) {
        /* Held through another daemon (or about to be ours): its token is its own. */
        if (zi->since_ms >= 0)
            snprintf(since, sizeof(since), "%lld", (long long)zi->since_ms);
        evbuffer_add_printf(out, "STATUS %s held holder=%s token=- since=%s waiters=%u "
                            "queue=%u%s\n", name, zi->holder, since, ls.waiters, queue, mode);
    } else {
        evbuffer_add_printf(out, "STATUS %s free holder=- token=- since=- waiters=%u queue=%u%s\n",
                            name, ls.waiters, queue, mode);
    }
}

static void conn_resume(struct conn *c);
static void conn_set_fail(struct conn *c, enum locks_result r, bool at_once);

/* Whether the connection may use lock `name`: without a users file anyone
 * may; with one, a logged-in user whose patterns match it. */
static bool conn_may(const struct conn *c, const char *name)
{
    return !c->srv->users || (c->user && user_may(c->user, name));
}

/*
 * After the end of input, a LOCK waiting for this connection ends at once
 * with TIMEOUT: a lock bound to the connection would be released at the
 * close that follows, and the client may be gone (a full close looks the
 * same), so no wait stays queued for it - a lease's included. STATUS and
 * the other waits are answered when their answer comes. While the backend
 * is unreachable it ends with ERR UNAVAILABLE, as any wait would then.
 */
static void conn_end_bound_wait(struct conn *c)
{
    if (!c->input_ended || c->state != CONN_WAITING ||
        (c->waiting_cmd != PROTO_CMD_LOCK && c->waiting_cmd != PROTO_CMD_TRYLOCK))
        return;
    if (c->lease) {
        leases_cancel(c->srv->leases, c->lease);
        c->lease = NULL;
    } else if (!locks_cancel_wait(c->srv->locks, &c->owner, c->lock_name)) {
        return;
    }
    log_debug("conn %llu (%s): wait for %s ended by the end of input",
              (unsigned long long)c->id, c->peer, c->lock_name);
    if (c->set) {
        conn_set_fail(c, c->srv->backend->ops->unreachable_since(c->srv->backend->impl) ?
                      LOCKS_UNAVAILABLE : LOCKS_TIMEOUT, true);
        return;
    }
    if (c->srv->backend->ops->unreachable_since(c->srv->backend->impl))
        reply_unavailable(c);
    else
        reply_word(c, "TIMEOUT", c->lock_name, strlen(c->lock_name));
    conn_resume(c);
}

/* The awaited answer is queued: parse the lines that waited behind it. */
static void conn_resume(struct conn *c)
{
    conn_set_state(c, CONN_READING);
    /* Deferred, because the lock table or the ZooKeeper client is on the stack. */
    bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
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

/*
 * How long, from now, this daemon keeps serving a connection whose client
 * went silent: over TCP, the keepalive probes or the user timeout end it
 * no sooner than this after the last byte came in (the CHECK itself), and
 * a close is an abandonment, followed by the hold's lock-delay. Over the
 * Unix socket only the client's own end closes it.
 */
static int64_t conn_window_ms(const struct conn *c)
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

/* CHECK <name> [<token>] of this connection's own hold. */
static void reply_check(struct conn *c, const char *name)
{
    char buf[PROTO_REPLY_MAX];
    int64_t delay_ms, backend_ms, left;
    uint64_t token;

    if (!locks_owner_check(c->srv->locks, &c->owner, name, &token, &delay_ms, &backend_ms)) {
        reply_err(c, PROTO_ERR_NOT_HELD, "this connection does not hold that lock");
        return;
    }
    left = conn_window_ms(c);
    if (left < INT64_MAX - delay_ms)
        left += delay_ms;
    if (backend_ms < left)
        left = backend_ms;
    conn_write(c, buf, proto_fmt_checked(buf, sizeof(buf), name, strlen(name), token,
                                         safe_ms_of(left)));
}

/* UNLOCK <name> <token> of a lease, RENEW, or CHECK <name> <token> of a lease. */
static void reply_lease_op(struct conn *c, enum proto_cmd cmd, const char *name,
                           enum locks_result r, uint64_t token, int64_t left_ms)
{
    char buf[PROTO_REPLY_MAX];

    switch (r) {
    case LOCKS_RELEASED:
        if (cmd == PROTO_CMD_CHECK)
            conn_write(c, buf, proto_fmt_checked(buf, sizeof(buf), name, strlen(name), token,
                                                 safe_ms_of(left_ms)));
        else
            reply_word(c, "OK", name, strlen(name));
        break;
    case LOCKS_NOT_HELD:
        reply_err(c, PROTO_ERR_NOT_HELD, "no lease of that name with that token: the token "
                  "is wrong, or the lease ended");
        break;
    case LOCKS_UNAVAILABLE:
        reply_unavailable(c);
        break;
    default:
        reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        break;
    }
}

static void conn_on_lease_op(void *arg, enum locks_result r, int64_t left_ms)
{
    struct conn *c = arg;

    c->lease_op = NULL;
    if (r == LOCKS_RELEASED && c->waiting_cmd == PROTO_CMD_UNLOCK)
        leases_note_released(c->srv->leases);
    reply_lease_op(c, c->waiting_cmd, c->status_name, r, c->check_token, left_ms);
    conn_resume(c);
}

static void conn_on_queue_info(void *arg, const struct backend_queue_info *info)
{
    struct conn *c = arg;

    c->query = NULL;
    reply_status(c, c->status_name, info);
    conn_resume(c);
}

/* The end of a LOCKS or HOLDERS reply: how many lines were left out, END. */
static void reply_end(struct conn *c, size_t more)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);

    if (more)
        evbuffer_add_printf(out, "MORE %zu\n", more);
    evbuffer_add(out, "END\n", 4);
}

/* The most LOCK lines one LOCKS reply carries (its output is not bounded otherwise). */
#define LOCKS_LINES_MAX 10000

struct locks_reply {
    struct conn *c;
    unsigned lines, more;
};

static bool add_locks_line(void *arg, const char *name, const struct locks_status *st)
{
    struct locks_reply *lr = arg;
    struct evbuffer *out = bufferevent_get_output(lr->c->bev);
    char mode[24], holder[200] = "-", token[24] = "-", since[24] = "-", lease[48] = "";
    const char *recipe = conn_recipe(lr->c, name);

    if (!conn_may(lr->c, name))
        return true;         /* names the user may not use are not shown, nor counted */
    if (lr->lines == LOCKS_LINES_MAX) {
        lr->more++;
        return true;         /* counted, not listed */
    }
    lr->lines++;
    if (st->mode == LOCK_LIMIT)
        snprintf(mode, sizeof(mode), "limit=%u", st->limit);
    else
        snprintf(mode, sizeof(mode), "%s", lock_mode_name(st->mode));
    if (st->held) {
        snprintf(holder, sizeof(holder), "%s/%s", lr->c->srv->daemon_id, st->holder);
        snprintf(token, sizeof(token), "%llu", (unsigned long long)st->token);
        snprintf(since, sizeof(since), "%lld", (long long)st->since_ms);
        if (st->lease_ms >= 0)
            snprintf(lease, sizeof(lease), " lease=%lld", (long long)st->lease_ms);
    }
    if (recipe)
        snprintf(lease + strlen(lease), sizeof(lease) - strlen(lease), " recipe=%s", recipe);
    evbuffer_add_printf(out, "LOCK %s %s holder=%s label=%s token=%s since=%s holders=%u "
                        "waiters=%u%s\n", name, mode, holder,
                        st->held && st->label ? st->label : "-", token, since, st->holders,
                        st->waiters, lease);
    return true;
}

/* LOCKS [<glob>]: what this daemon's table holds and awaits, by name. */
static void reply_locks(struct conn *c, const char *glob)
{
    struct locks_reply lr = { c, 0, 0 };

    locks_each(c->srv->locks, glob[0] ? glob : NULL, add_locks_line, &lr);
    reply_end(c, lr.more);
}

/* One HOLDER line; holder is "<daemon>/<client>" already or, with a
 * daemon id, this daemon's client. */
static void add_holder_line(struct evbuffer *out, const struct backend_holder *r,
                            const char *daemon_id)
{
    char mode[24], token[24] = "-", lease[32] = "";

    if (r->mode == LOCK_LIMIT)
        snprintf(mode, sizeof(mode), "limit=%u", r->limit);
    else
        snprintf(mode, sizeof(mode), "%s", lock_mode_name(r->mode));
    if (r->token)
        snprintf(token, sizeof(token), "%llu", (unsigned long long)r->token);
    if (r->lease_ms >= 0)
        snprintf(lease, sizeof(lease), " lease=%lld", (long long)r->lease_ms);
    evbuffer_add_printf(out, "HOLDER %s %s %s holder=%s%s%s label=%s token=%s since=%lld%s\n",
                        r->name, mode, r->held ? "held" : "queued", daemon_id ? daemon_id : "",
                        daemon_id ? "/" : "", r->holder, r->label && r->label[0] ? r->label : "-",
                        token, (long long)r->since_ms, lease);
}

static bool add_local_holder(void *arg, const struct backend_holder *row)
{
    struct locks_reply *lr = arg;

    if (!conn_may(lr->c, row->name))
        return true;
    if (lr->lines == HOLDERS_LINES_MAX) {
        lr->more++;
        return true;
    }
    lr->lines++;
    add_holder_line(bufferevent_get_output(lr->c->bev), row, lr->c->srv->daemon_id);
    return true;
}

static bool conn_may_list(void *arg, const char *name)
{
    return conn_may(arg, name);
}

static void conn_on_holders(void *arg, bool ok, const struct backend_holder *rows, size_t n,
                            size_t more)
{
    struct conn *c = arg;

    c->listing = NULL;
    if (!ok) {
        reply_unavailable(c);
    } else {
        for (size_t i = 0; i < n; i++)
            add_holder_line(bufferevent_get_output(c->bev), &rows[i], NULL);
        reply_end(c, more);
    }
    conn_resume(c);
}

/* HOLDERS [<glob>]: every holder and queued request, from the backend's
 * queues when it has its own (all daemons), else from the table. */
static void reply_holders(struct conn *c, const char *glob)
{
    struct backend *be = c->srv->backend;
    struct locks_reply lr = { c, 0, 0 };

    if (!be->ops->list) {
        locks_each_hold(c->srv->locks, glob[0] ? glob : NULL, add_local_holder, &lr);
        reply_end(c, lr.more);
        return;
    }
    c->listing = be->ops->list(be->impl, glob[0] ? glob : "*", conn_may_list,
                               conn_on_holders, c);
    if (!c->listing) {
        reply_unavailable(c);
        return;
    }
    c->waiting_cmd = PROTO_CMD_HOLDERS;
    conn_set_state(c, CONN_WAITING);
}

/* An EVENT line for this connection: false while its output is backed up
 * (the watch keeps the latest line for conn_on_write to ask for). */
static bool conn_on_watch_event(void *arg, const char *line, size_t len)
{
    struct conn *c = arg;

    if (evbuffer_get_length(bufferevent_get_output(c->bev)) >= OUTPUT_MAX)
        return false;
    evbuffer_add(bufferevent_get_output(c->bev), line, len);
    return true;
}

static int conn_find_watch(const struct conn *c, const char *name)
{
    for (unsigned i = 0; i < c->nwatches; i++)
        if (strcmp(watch_sub_name(c->watches[i]), name) == 0)
            return (int)i;
    return -1;
}

/* WATCH <name>: OK now, the EVENT lines from the loop. Watching a name
 * twice is watching it once. */
static void conn_watch(struct conn *c, const char *name, size_t len)
{
    struct watch_sub *s;
    char text[96];
    bool limit;

    if (conn_find_watch(c, name) < 0) {
        if (c->nwatches == WATCHES_PER_CONN_MAX) {
            snprintf(text, sizeof(text), "a connection watches at most %d locks",
                     WATCHES_PER_CONN_MAX);
            reply_err(c, PROTO_ERR_LIMIT, text);
            return;
        }
        if (c->nwatches == c->watches_cap) {
            unsigned cap = c->watches_cap ? 2 * c->watches_cap : 4;
            struct watch_sub **more = realloc(c->watches, cap * sizeof(*more));

            if (!more) {
                reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
                return;
            }
            c->watches = more;
            c->watches_cap = cap;
        }
        if (!(s = watch_add(c->srv->watches, name, conn_on_watch_event, c, &limit))) {
            snprintf(text, sizeof(text), "this daemon has %d watches", WATCHES_MAX);
            reply_err(c, limit ? PROTO_ERR_LIMIT : PROTO_ERR_INTERNAL,
                      limit ? text : "out of memory");
            return;
        }
        c->watches[c->nwatches++] = s;
    }
    reply_word(c, "OK", name, len);
}

/*
 * BREAK <name> [<token>]: ends the holds of name granted through this
 * daemon (the one with token), whoever holds them; each holder hears
 * LOST <name> <token> broken. Holds through other daemons are theirs.
 */
static void conn_break(struct conn *c, const struct proto_req *req, const char *name)
{
    char by[PROTO_USER_MAX + 128], text[PROTO_NAME_MAX + 160];
    unsigned n;

    snprintf(by, sizeof(by), "conn %llu (%s%s%s)", (unsigned long long)c->id, c->peer,
             c->user ? " as " : "", c->user ? c->user_name : "");
    n = locks_break(c->srv->locks, name, req->has_token ? req->token : 0, by);
    if (n > 0) {
        reply_word(c, "OK", name, req->name_len);
        return;
    }
    snprintf(text, sizeof(text), "no hold of %s%s through this daemon (a hold through "
             "another daemon is broken there: STATUS and HOLDERS name it)", name,
             req->has_token ? " with that token" : "");
    reply_err(c, PROTO_ERR_NOT_HELD, text);
}

/* UNWATCH <name>: OK whether it was watched or not. */
static void conn_unwatch(struct conn *c, const char *name, size_t len)
{
    int i = conn_find_watch(c, name);

    if (i >= 0) {
        watch_remove(c->watches[i]);
        c->watches[i] = c->watches[--c->nwatches];
    }
    reply_word(c, "OK", name, len);
}

static void reply_help(struct conn *c)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);

    for (int i = 0; i < PROTO_CMD_COUNT; i++)
        evbuffer_add_printf(out, "HELP %s - %s\n", proto_cmd_usage((enum proto_cmd)i),
                            proto_cmd_help((enum proto_cmd)i));
    evbuffer_add(out, "END\n", 4);
}

/* The answer to a failed AUTH, once its delay has passed. */
static void conn_on_auth_delay(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    reply_err(c, PROTO_ERR_AUTH_FAILED, "wrong user name or password");
    conn_resume(c);
}

/*
 * AUTH <user> <password>. The delay timer is armed before the password is
 * checked, so that a failure is answered AUTH_FAIL_DELAY_MS after the
 * request whatever the check cost (an unknown user costs none). A failure
 * leaves the connection as it was, logged in or not.
 */
static void conn_auth(struct conn *c, const struct proto_req *req)
{
    struct timeval delay = { AUTH_FAIL_DELAY_MS / 1000, (AUTH_FAIL_DELAY_MS % 1000) * 1000 };
    const struct user *user;
    char buf[PROTO_REPLY_MAX];

    if (!c->srv->users) {
        reply_err(c, PROTO_ERR_AUTH_FAILED, "this daemon has no users_file: AUTH is not used");
        return;
    }
    if ((!c->auth_timer && !(c->auth_timer = evtimer_new(c->srv->base, conn_on_auth_delay, c))) ||
        evtimer_add(c->auth_timer, &delay) < 0) {
        reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        return;
    }
    user = users_find(c->srv->users, req->user, req->user_len);
    if (user && users_verify(c->srv->users, user, req->password, req->password_len)) {
        evtimer_del(c->auth_timer);
        c->user = user;
        snprintf(c->user_name, sizeof(c->user_name), "%s", user_name(user));
        log_debug("conn %llu (%s): logged in as %s", (unsigned long long)c->id, c->peer,
                  c->user_name);
        conn_write(c, buf, snprintf(buf, sizeof(buf), "OK %s\n", c->user_name));
        return;
    }
    c->srv->stats.auth_failures++;
    log_warn("conn %llu (%s): AUTH failed: %s '%.*s'", (unsigned long long)c->id, c->peer,
             user ? "wrong password for user" : "no user", (int)req->user_len, req->user);
    c->waiting_cmd = PROTO_CMD_AUTH;
    conn_set_state(c, CONN_WAITING);
}

/*
 * With a users file: whether the request may go ahead, or its ERR NOAUTH
 * or ERR DENIED answer is sent. A plain UNLOCK <name> needs no name
 * permission: it only ever releases the connection's own hold.
 */
static bool conn_allowed(struct conn *c, const struct proto_req *req)
{
    char text[PROTO_NAME_MAX + PROTO_USER_MAX + 64], name[PROTO_NAME_MAX + 1];

    if (!c->srv->users)
        return true;
    switch (req->cmd) {
    case PROTO_CMD_PING:
    case PROTO_CMD_HELP:
    case PROTO_CMD_QUIT:
    case PROTO_CMD_AUTH:
        return true;
    default:
        break;
    }
    if (!c->user) {
        reply_err(c, PROTO_ERR_NOAUTH, "log in first with AUTH <user> <password> "
                  "(only PING, HELP and QUIT work before)");
        return false;
    }
    if (req->cmd == PROTO_CMD_BREAK) {
        memcpy(name, req->name, req->name_len);
        name[req->name_len] = '\0';
        if (user_may_break(c->user, name))
            return true;
        snprintf(text, sizeof(text), "user %s may not break lock %s (no break= pattern for it)",
                 c->user_name, name);
        reply_err(c, PROTO_ERR_DENIED, text);
        return false;
    }
    if (!req->name || req->cmd == PROTO_CMD_LOCKS || req->cmd == PROTO_CMD_HOLDERS ||
        (req->cmd == PROTO_CMD_UNLOCK && !req->has_token))
        return true;
    /* Every name of a set. */
    for (unsigned i = 0; i < (req->nnames ? req->nnames : 1); i++) {
        const struct proto_name n = req->nnames ? req->names[i]
                                                : (struct proto_name){ req->name, req->name_len };

        memcpy(name, n.p, n.len);
        name[n.len] = '\0';
        if (user_may(c->user, name))
            continue;
        snprintf(text, sizeof(text), "user %s may not use lock %s", c->user_name, name);
        reply_err(c, PROTO_ERR_DENIED, text);
        return false;
    }
    return true;
}

/* The lock table's request for a LOCK or TRYLOCK. */
static void lock_req_of(const struct conn *c, const struct proto_req *req, struct lock_req *lreq)
{
    lreq->mode = req->mode == PROTO_MODE_SHARED ? LOCK_SHARED
                 : req->mode == PROTO_MODE_LIMIT ? LOCK_LIMIT : LOCK_EXCLUSIVE;
    lreq->limit = req->limit;
    lreq->wait_ms = req->wait_ms;
    lreq->try = req->cmd == PROTO_CMD_TRYLOCK;
    lreq->ttl_ms = req->ttl_ms;
    lreq->delay_ms = req->delay_ms >= 0 ? req->delay_ms
                                        : (int64_t)c->srv->settings->lock_delay_ms;
    lreq->delay_default = req->delay_ms < 0;
}

/* Frees the set being acquired, if any, leaving its holds to the connection. */
static void conn_set_free(struct conn *c)
{
    if (!c->set)
        return;
    event_free(c->set->step);
    free(c->set);
    c->set = NULL;
}

/* The set's answer is queued: the connection reads on. */
static void conn_set_end(struct conn *c)
{
    conn_set_free(c);
    if (c->state == CONN_WAITING)
        conn_resume(c);
}

/*
 * A step failed with r (or the wait was cut short): releases the names
 * taken so far and answers as for one name, with the list.
 */
static void conn_set_fail(struct conn *c, enum locks_result r, bool at_once)
{
    struct conn_set *s = c->set;

    for (unsigned k = 0; k < s->taken; k++)
        locks_unlock(c->srv->locks, &c->owner, s->names[s->order[k]]);
    log_debug("conn %llu (%s): set %s not granted, %u of %u released",
              (unsigned long long)c->id, c->peer, s->list, s->taken, s->n);
    if (r == LOCKS_BUSY || r == LOCKS_TIMEOUT)
        reply_word(c, r == LOCKS_BUSY && s->cmd == PROTO_CMD_TRYLOCK ? "BUSY" : "TIMEOUT",
                   s->list, s->list_len);
    else
        reply_lock_result(c, s->cmd, s->names[s->order[s->taken]], r, 0, at_once);
    conn_set_end(c);
}

/*
 * Takes the set's names from order[taken] on, as long as each is granted
 * at once; a wait leaves the connection CONN_WAITING until done().
 */
static void conn_set_next(struct conn *c, bool at_once)
{
    struct conn_set *s = c->set;
    char buf[PROTO_SET_REPLY_MAX];
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
            c->waiting_cmd = s->cmd;
            snprintf(c->lock_name, sizeof(c->lock_name), "%s", name);
            conn_set_state(c, CONN_WAITING);
            conn_end_bound_wait(c);
            return;
        }
        if (r != LOCKS_GRANTED) {
            conn_set_fail(c, r, at_once);
            return;
        }
        s->tokens[s->order[s->taken++]] = token;
    }
    /* A name taken earlier may have been lost (LOST line) while the rest was awaited. */
    for (unsigned i = 0; i < s->n; i++)
        if (!locks_owner_token(c->srv->locks, &c->owner, s->names[i], &token) ||
            token != s->tokens[i]) {
            reply_err(c, PROTO_ERR_UNAVAILABLE, "a lock of the set was lost while the others "
                      "were awaited; retry later");
            for (unsigned k = 0; k < s->n; k++)
                locks_unlock(c->srv->locks, &c->owner, s->names[k]);
            conn_set_end(c);
            return;
        }
    conn_write(c, buf, proto_fmt_granted_set(buf, sizeof(buf), s->list, s->list_len,
                                             s->tokens, s->n));
    conn_set_end(c);
}

/* The step after done(): the next name, or the end of a failed set. */
static void conn_on_set_step(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    if (c->set->r == LOCKS_GRANTED)
        conn_set_next(c, false);
    else
        conn_set_fail(c, c->set->r, false);
}

/* LOCK, TRYLOCK or UNLOCK of a set "a,b,c" (req->nnames > 1). */
static void conn_set_request(struct conn *c, const struct proto_req *req)
{
    char text[PROTO_NAME_MAX + 64];
    struct conn_set *s;
    unsigned fresh = 0;
    uint64_t token;

    s = malloc(sizeof(*s) + req->name_len + 1);
    if (!s || !(s->step = event_new(c->srv->base, -1, 0, conn_on_set_step, c))) {
        free(s);
        reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        return;
    }
    s->n = req->nnames;
    for (unsigned i = 0; i < s->n; i++) {
        memcpy(s->names[i], req->names[i].p, req->names[i].len);
        s->names[i][req->names[i].len] = '\0';
        fresh += !locks_owner_token(c->srv->locks, &c->owner, s->names[i], &token);
    }
    memcpy(s->list, req->name, req->name_len);
    s->list[req->name_len] = '\0';
    s->list_len = req->name_len;
    c->set = s;

    if (req->cmd == PROTO_CMD_UNLOCK) {
        /* All or nothing: every name must be held. */
        for (unsigned i = 0; i < s->n; i++)
            if (!locks_owner_token(c->srv->locks, &c->owner, s->names[i], &token)) {
                snprintf(text, sizeof(text), "this connection does not hold %s; "
                         "nothing was released", s->names[i]);
                reply_err(c, PROTO_ERR_NOT_HELD, text);
                conn_set_free(c);
                return;
            }
        for (unsigned i = 0; i < s->n; i++)
            locks_unlock(c->srv->locks, &c->owner, s->names[i]);
        reply_word(c, "OK", s->list, s->list_len);
        conn_set_free(c);
        return;
    }

    /* Over the limit once all are held: refused before anything is taken. */
    if (c->owner.nholds + fresh > c->srv->settings->max_locks_per_client) {
        reply_lock_result(c, req->cmd, s->names[0], LOCKS_LIMIT, 0, true);
        conn_set_free(c);
        return;
    }
    /* Insertion sort: at most PROTO_SET_MAX names. */
    for (unsigned i = 0; i < s->n; i++) {
        unsigned j = i;

        for (; j > 0 && strcmp(s->names[s->order[j - 1]], s->names[i]) > 0; j--)
            s->order[j] = s->order[j - 1];
        s->order[j] = i;
    }
    s->cmd = req->cmd;
    lock_req_of(c, req, &s->lreq);
    s->deadline_ms = req->wait_ms >= 0 ? locks_mono_ms() + req->wait_ms : -1;
    s->taken = 0;
    s->r = LOCKS_GRANTED;
    log_debug("conn %llu (%s): set %s, %u names", (unsigned long long)c->id, c->peer,
              s->list, s->n);
    conn_set_next(c, true);
}

static void handle_request(struct conn *c, const struct proto_req *req)
{
    char name[PROTO_NAME_MAX + 1];
    struct backend *be = c->srv->backend;
    struct backend_queue_info now;
    struct lock_req lreq;
    enum locks_result r;
    uint64_t token = 0;
    int64_t left_ms = 0;
    char text[96];

    c->srv->stats.cmds[req->cmd]++;
    be->ops->before_request(be->impl);
    if (!conn_allowed(c, req))
        return;
    if (req->nnames > 1) {
        conn_set_request(c, req);
        return;
    }
    memcpy(name, req->name ? req->name : "", req->name_len);
    name[req->name_len] = '\0';

    switch (req->cmd) {
    case PROTO_CMD_PING:
        conn_write(c, "PONG\n", 5);
        break;
    case PROTO_CMD_QUIT:
        conn_write(c, "BYE\n", 4);
        conn_begin_close(c, false);     /* QUIT releases, as UNLOCK does */
        break;
    case PROTO_CMD_LOCK:
    case PROTO_CMD_TRYLOCK:
        lock_req_of(c, req, &lreq);
        if (lreq.ttl_ms > 0)
            r = leases_lock(c->srv->leases, &c->owner, name, &lreq, &token, &c->lease);
        else
            r = locks_lock(c->srv->locks, &c->owner, name, &lreq, &token);
        if (r == LOCKS_WAITING) {
            c->waiting_cmd = req->cmd;
            memcpy(c->lock_name, name, req->name_len + 1);
            conn_set_state(c, CONN_WAITING);
            conn_end_bound_wait(c);
        } else if (r == LOCKS_LIMIT && lreq.ttl_ms > 0) {
            snprintf(text, sizeof(text), "%u leases are held or awaited through this daemon",
                     c->srv->settings->max_leases);
            reply_err(c, PROTO_ERR_LIMIT, text);
        } else {
            reply_lock_result(c, req->cmd, name, r, token, true);
        }
        break;
    case PROTO_CMD_UNLOCK:
        /* With a token: this connection's own hold with that token, or a lease. */
        if (!req->has_token || (locks_owner_token(c->srv->locks, &c->owner, name, &token) &&
                                token == req->token)) {
            if (locks_unlock(c->srv->locks, &c->owner, name) == LOCKS_RELEASED)
                reply_word(c, "OK", name, req->name_len);
            else
                reply_err(c, PROTO_ERR_NOT_HELD, "this connection does not hold that lock");
            break;
        }
        /* fall through */
    case PROTO_CMD_RENEW:
    lease_op:
        r = leases_op(c->srv->leases, name, req->token,
                      req->cmd == PROTO_CMD_RENEW ? req->ttl_ms
                      : req->cmd == PROTO_CMD_CHECK ? LEASE_CHECK : 0,
                      conn_on_lease_op, c, &c->lease_op, &left_ms);
        if (r == LOCKS_WAITING) {
            memcpy(c->status_name, name, req->name_len + 1);
            c->waiting_cmd = req->cmd;
            c->check_token = req->token;
            conn_set_state(c, CONN_WAITING);
        } else {
            reply_lease_op(c, req->cmd, name, r, req->token, left_ms);
        }
        break;
    case PROTO_CMD_CHECK:
        /* Without a token, or with its own hold's: this connection's hold. */
        if (!req->has_token || (locks_owner_token(c->srv->locks, &c->owner, name, &token) &&
                                token == req->token)) {
            reply_check(c, name);
            break;
        }
        goto lease_op;
    case PROTO_CMD_STATUS:
        /* The backend may have to ask around (ZooKeeper); later lines wait. */
        c->query = be->ops->query(be->impl, name, &now, conn_on_queue_info, c);
        if (!c->query) {
            reply_status(c, name, &now);
            break;
        }
        memcpy(c->status_name, name, req->name_len + 1);
        c->waiting_cmd = req->cmd;
        conn_set_state(c, CONN_WAITING);
        break;
    case PROTO_CMD_STATS:
        reply_stats(c);
        break;
    case PROTO_CMD_LOCKS:
        reply_locks(c, name);
        break;
    case PROTO_CMD_HOLDERS:
        reply_holders(c, name);
        break;
    case PROTO_CMD_BREAK:
        conn_break(c, req, name);
        break;
    case PROTO_CMD_WATCH:
        conn_watch(c, name, req->name_len);
        break;
    case PROTO_CMD_UNWATCH:
        conn_unwatch(c, name, req->name_len);
        break;
    case PROTO_CMD_CLIENT:
        memcpy(c->label, req->label, req->label_len);
        c->label[req->label_len] = '\0';
        c->owner.label = c->label;
        log_debug("conn %llu (%s): label %s", (unsigned long long)c->id, c->peer, c->label);
        conn_write(c, "OK\n", 3);
        break;
    case PROTO_CMD_HELP:
        reply_help(c);
        break;
    case PROTO_CMD_AUTH:
        conn_auth(c, req);
        break;
    case PROTO_CMD_COUNT:
        break;
    }
}

/*
 * A waiting connection is read on: were it left unread, a client that hung
 * up behind more requests than the socket buffers take would never be seen
 * to go, and its locks would stay held. What it may send meanwhile is
 * bounded; past the bound it is closed, its locks released, its wait
 * cancelled. The ERR line takes the place of the waiting request's answer.
 */
static void conn_check_waiting_input(struct conn *c)
{
    size_t max = conn_input_max(c->srv);
    char text[96];

    if (c->state != CONN_WAITING || evbuffer_get_length(bufferevent_get_input(c->bev)) <= max)
        return;
    snprintf(text, sizeof(text), "requests sent behind a waiting one are limited to %zu bytes",
             max);
    log_info("conn %llu (%s): more than %zu bytes sent behind a waiting request, closing",
             (unsigned long long)c->id, c->peer, max);
    reply_err(c, PROTO_ERR_LIMIT, text);
    conn_begin_close(c, true);
}

/* Parses and answers complete lines while the state allows it. */
static void conn_process(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t max_line = c->srv->settings->max_line;

    while (c->state == CONN_READING) {
        struct evbuffer_ptr eol;
        struct proto_req req;
        size_t eol_len = 0;
        const char *line;

        if (evbuffer_get_length(out) >= OUTPUT_MAX) {
            conn_set_state(c, CONN_DRAINING);
            break;
        }
        /* Search for end of line; a line is too long before its LF arrives. */
        eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if ((eol.pos < 0 && evbuffer_get_length(in) > max_line) ||
            (eol.pos >= 0 && (size_t)eol.pos > max_line)) {
            char text[64];
            snprintf(text, sizeof(text), "request lines are limited to %zu bytes", max_line);
            log_info("conn %llu (%s): line too long, closing", (unsigned long long)c->id,
                     c->peer);
            reply_err(c, PROTO_ERR_LINE_TOO_LONG, text);
            conn_begin_close(c, true);
            break;
        }
        if (eol.pos < 0) {
            /* Everything that came before the end of input is answered. */
            if (c->input_ended)
                conn_begin_close(c, true);
            break;
        }
        line = (const char *)evbuffer_pullup(in, eol.pos + 1);
        switch (proto_parse(line, (size_t)eol.pos, &req)) {
        case PROTO_REQUEST:
            handle_request(c, &req);
            break;
        case PROTO_ERROR:
            reply_err(c, req.err, req.errmsg);
            break;
        case PROTO_BLANK:
            break;
        }
        evbuffer_drain(in, eol.pos + 1);
    }
    conn_check_waiting_input(c);
}

/* Lock table callbacks: queue the reply, then parse what waited behind it. */
static void conn_on_lock_done(struct lock_owner *o, const char *name, enum locks_result r,
                              uint64_t token)
{
    struct conn *c = conn_of(o);

    if (c->state != CONN_WAITING) {
        log_error("conn %llu: lock answer while %s", (unsigned long long)c->id,
                  state_names[c->state]);
        return;
    }
    if (c->set) {
        /* A name of a set: the next step runs from the loop. */
        c->set->r = r;
        if (r == LOCKS_GRANTED)
            c->set->tokens[c->set->order[c->set->taken++]] = token;
        event_active(c->set->step, 0, 0);
        return;
    }
    c->lease = NULL;     /* answered: a granted lease is on its own now */
    reply_lock_result(c, c->waiting_cmd, name, r, token, false);
    conn_resume(c);
}

static void conn_on_lock_lost(struct lock_owner *o, const char *name, uint64_t token,
                              const char *reason)
{
    struct conn *c = conn_of(o);
    char buf[PROTO_REPLY_MAX];

    conn_write(c, buf, proto_fmt_lost(buf, sizeof(buf), name, token, reason));
}

static const struct lock_owner_ops conn_lock_ops = {
    .done = conn_on_lock_done,
    .lost = conn_on_lock_lost,
};

static void conn_on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;

    if (c->state == CONN_LINGER) {
        struct evbuffer *in = bufferevent_get_input(bev);
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    conn_process(c);
}

static void conn_on_linger_timeout(evutil_socket_t fd, short what, void *arg)
{
    conn_free(arg);
}

static void conn_on_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct timeval tv = { LINGER_SECONDS, 0 };

    /* Drained: watches whose latest line did not fit get it now. */
    for (unsigned i = 0; i < c->nwatches; i++)
        watch_flush(c->watches[i]);
    switch (c->state) {
    case CONN_DRAINING:
        conn_set_state(c, CONN_READING);
        conn_process(c);
        break;
    case CONN_CLOSING:
        /* Half-close, then read until the client closes too: closing with
         * unread input would reset the connection and could lose the reply.
         * A client that ended its input already has nothing left to send. */
        shutdown(bufferevent_getfd(bev), SHUT_WR);
        if (c->input_ended) {
            conn_free(c);
            return;
        }
        conn_set_state(c, CONN_LINGER);
        c->linger_timer = evtimer_new(c->srv->base, conn_on_linger_timeout, c);
        if (!c->linger_timer || evtimer_add(c->linger_timer, &tv) < 0) {
            conn_free(c);
            return;
        }
        bufferevent_setwatermark(bev, EV_READ, 0, 0);
        conn_on_read(bev, c);
        break;
    default:
        break;
    }
}

/*
 * Why the kernel ended a connection, for the log. ETIMEDOUT: keepalive
 * probes or sent data went unanswered for as long as the tcp_keepalive_* and
 * tcp_user_timeout_ms settings allow. Such a timeout reports instead the
 * last ICMP error seen meanwhile (EHOSTUNREACH once ARP gave up on the host).
 */
static bool peer_stopped_answering(int err)
{
    return err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN;
}

static void conn_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    int err = EVUTIL_SOCKET_ERROR();    /* before anything else can change errno */

    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    /* End of input (a half-close, `nc -N`): answer what came, then close. */
    if (!(what & BEV_EVENT_ERROR) && !c->send_err && !c->input_ended &&
        (c->state == CONN_READING || c->state == CONN_WAITING || c->state == CONN_DRAINING)) {
        log_debug("conn %llu (%s): end of input; answering what came, then closing",
                  (unsigned long long)c->id, c->peer);
        c->input_ended = true;
        if (c->state == CONN_WAITING)
            conn_end_bound_wait(c);
        else if (c->state == CONN_READING)
            conn_process(c);
        return;
    }
    /* A failed direct send took the error: the bufferevent then reads EOF. */
    if (c->send_err) {
        err = c->send_err;
        what |= BEV_EVENT_ERROR;
    }
    if ((what & BEV_EVENT_ERROR) && peer_stopped_answering(err))
        log_info("conn %llu (%s): peer stopped answering (keepalive/user timeout), closing: %s",
                 (unsigned long long)c->id, c->peer, evutil_socket_error_to_string(err));
    else if (what & BEV_EVENT_ERROR)
        log_debug("conn %llu (%s): socket error: %s", (unsigned long long)c->id, c->peer,
                  evutil_socket_error_to_string(err));
    conn_free(c);
}

struct conn *conn_new(struct server *srv, evutil_socket_t fd, const char *peer)
{
    struct conn *c = calloc(1, sizeof(*c));

    if (!c) {
        evutil_closesocket(fd);
        return NULL;
    }
    c->bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev) {
        evutil_closesocket(fd);
        free(c);
        return NULL;
    }
    c->srv = srv;
    c->id = ++srv->next_conn_id;
    c->state = CONN_READING;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    lock_owner_init(&c->owner, &conn_lock_ops, c->peer);
    bufferevent_setcb(c->bev, conn_on_read, conn_on_write, conn_on_event, c);
    conn_set_watermark(c);
    if (bufferevent_enable(c->bev, EV_READ | EV_WRITE) < 0) {
        bufferevent_free(c->bev);
        free(c);
        return NULL;
    }
    TAILQ_INSERT_TAIL(&srv->conns, c, link);
    srv->nconns++;
    srv->stats.conns_total++;
    log_debug("conn %llu (%s): open", (unsigned long long)c->id, c->peer);
    return c;
}

void conn_settings_changed(struct server *srv)
{
    struct conn *c;

    TAILQ_FOREACH(c, &srv->conns, link) {
        if (c->state == CONN_LINGER)
            continue;
        conn_set_watermark(c);
        /* A smaller max_line may leave a waiting connection past the bound. */
        conn_check_waiting_input(c);
    }
}

void conn_users_changed(struct server *srv)
{
    struct conn *c, *next;

    for (c = TAILQ_FIRST(&srv->conns); c; c = next) {
        next = TAILQ_NEXT(c, link);
        if (!c->user)
            continue;
        c->user = srv->users ? users_find(srv->users, c->user_name, strlen(c->user_name)) : NULL;
        if (c->user || c->state == CONN_CLOSING || c->state == CONN_LINGER)
            continue;
        /* Its locks were taken under a login that no longer exists. */
        log_info("conn %llu (%s): user %s is no longer in the users file, closing",
                 (unsigned long long)c->id, c->peer, c->user_name);
        conn_begin_close(c, true);
    }
}

void conn_free(struct conn *c)
{
    unsigned held = c->owner.nholds + c->released;

    conn_release_all(c, true);
    log_debug("conn %llu (%s): closed, %u holds and waits released", (unsigned long long)c->id,
              c->peer, held);
    TAILQ_REMOVE(&c->srv->conns, c, link);
    c->srv->nconns--;
    if (c->linger_timer)
        event_free(c->linger_timer);
    if (c->auth_timer)
        event_free(c->auth_timer);
    bufferevent_free(c->bev);
    free(c->watches);
    free(c);
}
