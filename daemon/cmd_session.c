/*
 * cmd_session.c - the connection itself: PING, QUIT, CLIENT, AUTH, WATCH,
 * UNWATCH, GRACE and RESUME (its session, session.h), and BREAK (which
 * acts on others' holds through this daemon).
 *
 * AUTH's password is hashed off the event loop (auth_pool.h), within the
 * budgets of auth_budget.h. A failed AUTH is answered AUTH_FAIL_DELAY_MS
 * after it arrived, from a timer: meanwhile it is the client's pending
 * request like a waiting LOCK, so the requests behind it stay unparsed
 * (bounded as for any wait) and one connection cannot try more than one
 * password at a time.
 */
#include "config.h"
#include "cmd_int.h"

#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth_budget.h"
#include "auth_pool.h"
#include "context.h"
#include "log.h"
#include "restart.h"
#include "session.h"
#include "settings.h"
#include "snap.h"
#include "users.h"
#include "watch.h"

/* A failed AUTH is answered this long after it came (PROTOCOL.md, AUTH):
 * one guess per second per connection. */
#define AUTH_FAIL_DELAY_MS 1000

void cmd_ping(struct client *c, const struct proto_req *req, const char *name)
{
    char buf[8];

    client_reply(c, buf, proto_fmt_word(buf, sizeof(buf), "PONG"));
}

/* QUIT releases, as UNLOCK does; the transport closes after BYE. */
void cmd_quit(struct client *c, const struct proto_req *req, const char *name)
{
    char buf[8];

    client_reply(c, buf, proto_fmt_word(buf, sizeof(buf), "BYE"));
    c->io->quit(c);
}

void cmd_client(struct client *c, const struct proto_req *req, const char *name)
{
    char buf[8];

    memcpy(c->label, req->label, req->label_len);
    c->label[req->label_len] = '\0';
    c->owner.label = c->label;
    log_debug("conn %llu (%s): label %s", (unsigned long long)c->id, c->peer, c->label);
    client_reply(c, buf, proto_fmt_word(buf, sizeof(buf), "OK"));
}

/* GRACE <ms>: a session for this connection (PROTOCOL.md, "Sessions"). */
void cmd_grace(struct client *c, const struct proto_req *req, const char *name)
{
    unsigned max = c->srv->settings->max_grace_ms;
    char id[PROTO_SESSION_LEN + 1], secret[PROTO_SECRET_LEN + 1];
    char text[PROTO_ACCOUNT_MAX + 96], buf[PROTO_REPLY_MAX];

    if (req->grace_ms < PROTO_GRACE_MIN || req->grace_ms > max) {
        snprintf(text, sizeof(text), "grace must be an integer from %lld to %u",
                 (long long)PROTO_GRACE_MIN, max);
        client_reply_err(c, PROTO_ERR_BAD_ARGS, text);
        return;
    }
    if (c->session) {
        client_reply_err(c, PROTO_ERR_CONFLICT, "this connection already has a session");
        return;
    }
    switch (session_open(c->srv->sessions, c, req->grace_ms, id, secret)) {
    case SESSION_OK:
        client_reply(c, buf, proto_fmt_ok2(buf, sizeof(buf), id, secret));
        explicit_bzero(secret, sizeof(secret));
        explicit_bzero(buf, sizeof(buf));
        break;
    case SESSION_LIMIT_TOTAL:
        snprintf(text, sizeof(text), "this daemon already has %u sessions",
                 c->srv->settings->max_sessions);
        client_reply_err(c, PROTO_ERR_LIMIT, text);
        break;
    case SESSION_LIMIT_ACCOUNT:
        snprintf(text, sizeof(text), "%s already has %u sessions through this daemon",
                 c->account, c->srv->settings->max_sessions_per_user);
        client_reply_err(c, PROTO_ERR_LIMIT, text);
        break;
    case SESSION_NOMEM:
    case SESSION_NOT_FOUND:
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        break;
    }
}

/* RESUME <session> <secret>: the session's holds become this connection's. */
void cmd_resume(struct client *c, const struct proto_req *req, const char *name)
{
    char id[PROTO_SESSION_LEN + 1], buf[PROTO_REPLY_MAX], n_text[16];
    unsigned n = 0;

    if (c->session || c->owner.nholds) {
        client_reply_err(c, PROTO_ERR_CONFLICT, "this connection holds or awaits locks or has "
                         "a session; RESUME on a new connection");
        return;
    }
    if (session_resume(c->srv->sessions, c, req->session, req->secret, &n) != SESSION_OK) {
        client_reply_err(c, PROTO_ERR_NOT_HELD, "no session with that id and secret on this "
                         "daemon (its grace ran out, it ended, or the secret is wrong)");
        return;
    }
    memcpy(id, req->session, PROTO_SESSION_LEN);
    id[PROTO_SESSION_LEN] = '\0';
    snprintf(n_text, sizeof(n_text), "%u", n);
    client_reply(c, buf, proto_fmt_ok2(buf, sizeof(buf), id, n_text));
}

/*
 * A parked AUTH. Its password is hashed by the pool (auth_pool.h) while
 * the delay timer runs; a failure is answered once both are over. The
 * request belongs to the client's pending slot: a close cancels it
 * (auth_cancel), which forgets the pool's job.
 */
enum auth_state {
    AUTH_CHECKING,        /* the pool hashes the password; the delay runs */
    AUTH_CHECKING_LATE,   /* the pool hashes the password; the delay is over */
    AUTH_FAILED_WAITING,  /* the password was wrong; the delay runs */
    AUTH_REFUSED_WAITING, /* the address backs off: refused unchecked once the delay is over */
};

static const char *const auth_state_names[] = {
    "checking", "checking-late", "failed-waiting", "refused-waiting",
};

struct auth_req {
    struct client *c;                 /* the client whose pending op this is */
    enum auth_state state;            /* changed through auth_set_state() only */
    struct event *timer;              /* owned: AUTH_FAIL_DELAY_MS after the request */
    struct auth_job *job;             /* the pool's, while checking; NULL after */
    char addr[AUTH_BUDGET_ADDR_MAX];  /* the client's address: its budget's key */
    char user[PROTO_USER_MAX + 1];    /* the user name asked for */
    char hash[USERS_HASH_MAX + 1];    /* the user's hash checked; "" for an unknown user */
};

static void auth_set_state(struct auth_req *r, enum auth_state to)
{
    log_debug("conn %llu (%s): AUTH going from %s to %s", (unsigned long long)r->c->id,
              r->c->peer, auth_state_names[r->state], auth_state_names[to]);
    r->state = to;
}

static int64_t auth_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct auth_limits auth_limits_of(const struct settings *s)
{
    return (struct auth_limits){ s->auth_max_pending_per_address, s->auth_fail_limit,
                                 s->auth_backoff_ms };
}

static void auth_req_free(struct auth_req *r)
{
    if (r->timer)
        event_free(r->timer);
    explicit_bzero(r->hash, sizeof(r->hash));
    free(r);
}

/* The parked AUTH's answer is queued: the client reads on. */
static void auth_finish(struct auth_req *r)
{
    struct client *c = r->c;

    auth_req_free(r);
    c->pending_op = NULL;
    client_complete(c);
}

/* A wrong password counts against the address when it is answered, or
 * when its client leaves before that. */
static void auth_count_failure(struct auth_req *r)
{
    struct server *srv = r->c->srv;
    struct auth_limits lim = auth_limits_of(srv->settings);

    if (auth_budget_failed(srv->auth_budget, r->addr, &lim, auth_now_ms()))
        log_warn("AUTH: %u failed logins from %s within %u ms: its AUTH requests are "
                 "refused for %u ms", lim.fail_limit, r->addr, lim.backoff_ms, lim.backoff_ms);
}

/* A wrong password, once its delay is over. */
static void auth_answer_failure(struct auth_req *r)
{
    auth_count_failure(r);
    client_reply_err(r->c, PROTO_ERR_AUTH_FAILED, "wrong user name or password");
    auth_finish(r);
}

static void auth_answer_refusal(struct auth_req *r)
{
    client_reply_err(r->c, PROTO_ERR_AUTH_FAILED, "too many failed logins from this "
                     "address: try again later");
    auth_finish(r);
}

/* The delay since the request is over. */
static void on_auth_delay(evutil_socket_t fd, short what, void *arg)
{
    struct auth_req *r = arg;

    switch (r->state) {
    case AUTH_CHECKING:
        auth_set_state(r, AUTH_CHECKING_LATE);
        break;
    case AUTH_FAILED_WAITING:
        auth_answer_failure(r);
        break;
    case AUTH_REFUSED_WAITING:
        auth_answer_refusal(r);
        break;
    case AUTH_CHECKING_LATE:
        break;
    }
}

/* The pool's answer. The users file may have been re-read meanwhile: the
 * login needs the user still there with the hash that was checked. */
static void on_auth_checked(void *arg, bool match)
{
    struct auth_req *r = arg;
    struct client *c = r->c;
    const struct users *users = c->srv->users;
    const struct user *user = users ? users_find(users, r->user, strlen(r->user)) : NULL;
    char buf[PROTO_REPLY_MAX];

    r->job = NULL;
    auth_budget_done(c->srv->auth_budget, r->addr, auth_now_ms());
    c->srv->stats.auth_checks++;
    if (match && r->hash[0] && user && strcmp(user_hash(user), r->hash) == 0) {
        client_login(c, user);
        log_debug("conn %llu (%s): logged in as %s", (unsigned long long)c->id, c->peer,
                  c->user_name);
        client_reply(c, buf, proto_fmt_word_name(buf, sizeof(buf), "OK", c->user_name,
                                                 strlen(c->user_name)));
        auth_finish(r);
        return;
    }
    c->srv->stats.auth_failures++;
    log_warn("conn %llu (%s): AUTH failed: %s '%s'", (unsigned long long)c->id, c->peer,
             r->hash[0] ? "wrong password for user" : "no user", r->user);
    if (r->state == AUTH_CHECKING_LATE)
        auth_answer_failure(r);
    else
        auth_set_state(r, AUTH_FAILED_WAITING);
}

static void auth_cancel(struct client *c, void *op)
{
    struct auth_req *r = op;

    if (r->job) {
        auth_pool_forget(c->srv->auth_pool, r->job);
        auth_budget_done(c->srv->auth_budget, r->addr, auth_now_ms());
    }
    /* Closing before the answer does not spare the address the failure. */
    if (r->state == AUTH_FAILED_WAITING)
        auth_count_failure(r);
    auth_req_free(r);
}

static const struct pending_ops auth_ops = { .what = "AUTH", .cancel = auth_cancel };

/* ERR LIMIT for an AUTH beyond a budget of checks at once; at once, not counted as a failure. */
static void auth_busy(struct client *c, const char *text)
{
    c->srv->stats.auth_busy++;
    log_debug("conn %llu (%s): AUTH refused: %s", (unsigned long long)c->id, c->peer, text);
    client_reply_err(c, PROTO_ERR_LIMIT, text);
}

/*
 * AUTH <user> <password>. The password is hashed off the loop, by the
 * pool, against the user's hash or, for an unknown user, against the
 * users file's dummy hash (users_dummy_hash), so that both cost the same.
 * The delay timer is armed first: a failure is answered AUTH_FAIL_DELAY_MS
 * after the request, or when the check ends if that is later. A failure
 * leaves the connection as it was, logged in or not. Budgets, before any
 * hashing: checks at once daemon-wide and per address (ERR LIMIT at once),
 * and an address's back-off after failures (refused unchecked, after the
 * delay).
 */
void cmd_auth(struct client *c, const struct proto_req *req, const char *name)
{
    struct timeval delay = { AUTH_FAIL_DELAY_MS / 1000, (AUTH_FAIL_DELAY_MS % 1000) * 1000 };
    const struct settings *s = c->srv->settings;
    struct auth_limits lim = auth_limits_of(s);
    const struct users *users = c->srv->users;
    const struct user *user;
    struct auth_req *r;
    char text[128];

    if (!users) {
        client_reply_err(c, PROTO_ERR_AUTH_FAILED, "this daemon has no users_file: AUTH is "
                         "not used");
        return;
    }
    if (auth_pool_jobs(c->srv->auth_pool) >= s->auth_max_pending) {
        snprintf(text, sizeof(text), "too many AUTH requests being checked (at most %u): "
                 "try again later", s->auth_max_pending);
        auth_busy(c, text);
        return;
    }
    if (!(r = calloc(1, sizeof(*r))) ||
        !(r->timer = evtimer_new(c->srv->base, on_auth_delay, r))) {
        free(r);
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        return;
    }
    r->c = c;
    auth_budget_addr(c->peer, r->addr);
    memcpy(r->user, req->user, req->user_len);
    r->user[req->user_len] = '\0';
    switch (auth_budget_admit(c->srv->auth_budget, r->addr, &lim, auth_now_ms())) {
    case AUTH_ADMIT_BUSY:
        auth_req_free(r);
        snprintf(text, sizeof(text), "too many AUTH requests being checked from this address "
                 "(at most %u): try again later", lim.max_pending);
        auth_busy(c, text);
        return;
    case AUTH_ADMIT_BACKOFF:
        c->srv->stats.auth_backoffs++;
        log_debug("conn %llu (%s): AUTH refused unchecked: %s backs off",
                  (unsigned long long)c->id, c->peer, r->addr);
        r->state = AUTH_REFUSED_WAITING;
        break;
    case AUTH_ADMIT_OK:
        user = users_find(users, req->user, req->user_len);
        if (user)
            snprintf(r->hash, sizeof(r->hash), "%s", user_hash(user));
        r->state = AUTH_CHECKING;
        if (!(r->job = auth_pool_submit(c->srv->auth_pool, user ? r->hash :
                                        users_dummy_hash(users), req->password,
                                        req->password_len, on_auth_checked, r))) {
            auth_budget_done(c->srv->auth_budget, r->addr, auth_now_ms());
            auth_req_free(r);
            client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
            return;
        }
        break;
    }
    if (evtimer_add(r->timer, &delay) < 0) {
        auth_cancel(c, r);
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        return;
    }
    client_suspend(c, req->cmd, &auth_ops, r, NULL);
}

/* An EVENT line for this client: false while its output is backed up (the
 * watch keeps the latest line for client_drained() to ask for). */
static bool on_watch_event(void *arg, const char *line, size_t len)
{
    struct client *c = arg;

    if (c->io->backed_up(c))
        return false;
    c->io->write(c, line, len, true);
    return true;
}

static int find_watch(const struct client *c, const char *name)
{
    for (unsigned i = 0; i < c->nwatches; i++)
        if (strcmp(watch_sub_name(c->watches[i]), name) == 0)
            return (int)i;
    return -1;
}

/* Room for one more watch of the client: or ERR sent. */
static bool watch_room(struct client *c)
{
    char text[96];

    if (c->nwatches == WATCHES_PER_CONN_MAX) {
        snprintf(text, sizeof(text), "a connection watches at most %d locks",
                 WATCHES_PER_CONN_MAX);
        client_reply_err(c, PROTO_ERR_LIMIT, text);
        return false;
    }
    if (c->nwatches == c->watches_cap) {
        unsigned cap = c->watches_cap ? 2 * c->watches_cap : 4;
        struct watch_sub **more = realloc(c->watches, cap * sizeof(*more));

        if (!more) {
            client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
            return false;
        }
        c->watches = more;
        c->watches_cap = cap;
    }
    return true;
}

/* WATCH <name>: OK now, the EVENT lines from the loop. Watching a name
 * twice is watching it once. */
void cmd_watch(struct client *c, const struct proto_req *req, const char *name)
{
    struct watch_sub *s;
    char text[PROTO_ACCOUNT_MAX + 64];
    enum quota_verdict why;

    if (find_watch(c, name) < 0) {
        if (!watch_room(c))
            return;
        if (!(s = watch_add(c->srv->watches, name, on_watch_event, c, c->account, &why))) {
            if (why == QUOTA_ACCOUNT)
                snprintf(text, sizeof(text), "%s already has %u watches in this daemon",
                         c->account, c->srv->settings->max_watches_per_user);
            else
                snprintf(text, sizeof(text), "this daemon has %d watches", WATCHES_MAX);
            client_reply_err(c, why != QUOTA_OK ? PROTO_ERR_LIMIT : PROTO_ERR_INTERNAL,
                             why != QUOTA_OK ? text : "out of memory");
            return;
        }
        c->watches[c->nwatches++] = s;
    }
    cmd_reply_word(c, "OK", name, req->name_len);
}

/* UNWATCH <name>: OK whether it was watched or not. */
void cmd_unwatch(struct client *c, const struct proto_req *req, const char *name)
{
    int i = find_watch(c, name);

    if (i >= 0) {
        watch_remove(c->watches[i]);
        c->watches[i] = c->watches[--c->nwatches];
    }
    cmd_reply_word(c, "OK", name, req->name_len);
}

/*
 * BREAK <name> [<token>]: ends the holds of name granted through this
 * daemon (the one with token), whoever holds them; each holder hears
 * LOST <name> <token> broken. Holds through other daemons are theirs.
 */
void cmd_break(struct client *c, const struct proto_req *req, const char *name)
{
    char by[PROTO_USER_MAX + 128], text[PROTO_NAME_MAX + 160];

    snprintf(by, sizeof(by), "conn %llu (%s%s%s)", (unsigned long long)c->id, c->peer,
             c->user ? " as " : "", c->user ? c->user_name : "");
    if (locks_break(c->srv->locks, name, req->has_token ? req->token : 0, by) > 0) {
        cmd_reply_word(c, "OK", name, req->name_len);
        return;
    }
    snprintf(text, sizeof(text), "no hold of %s%s through this daemon (a hold through "
             "another daemon is broken there: STATUS and HOLDERS name it)", name,
             req->has_token ? " with that token" : "");
    client_reply_err(c, PROTO_ERR_NOT_HELD, text);
}

/*
 * The restart's part for watches (cmd.h): "watch <conn> <name> <line>
 * <taken>" per watch of every client, read back after the holds, the
 * connections restored before. data: the struct server.
 */
static void watches_save(void *data, struct snap_w *w)
{
    const struct server *srv = data;
    const struct client *c;

    LIST_FOREACH(c, &srv->clients, link)
        for (unsigned i = 0; i < c->nwatches; i++) {
            const char *line;
            size_t len;
            bool taken;

            watch_sub_state(c->watches[i], &line, &len, &taken);
            snap_w_rec(w, "watch");
            snap_w_u64(w, c->id);
            snap_w_str(w, watch_sub_name(c->watches[i]));
            snap_w_bytes(w, line, len);
            snap_w_bool(w, taken);
        }
}

static bool watch_restore_one(void *data, struct snap_r *r, struct restart_in *in)
{
    struct client *c = client_restored(r, in);
    char name[PROTO_NAME_MAX + 1];
    const char *line;
    struct watch_sub *s;
    size_t len;
    bool taken;

    if (!c)
        return false;
    snap_r_str_copy(r, name, sizeof(name));
    line = snap_r_str(r, &len);
    taken = snap_r_bool(r);
    if (!snap_r_done(r))
        return false;
    if (!name[0] || find_watch(c, name) >= 0 || c->nwatches == WATCHES_PER_CONN_MAX ||
        !watch_room(c))
        return snap_r_fail(r, "conn %llu: a watch of %s that does not add up",
                           (unsigned long long)c->id, name);
    if (!(s = watch_restore(c->srv->watches, name, on_watch_event, c, c->account,
                            line ? line : "", len, taken)))
        return snap_r_fail(r, "out of memory, or more than %d watches", WATCHES_MAX);
    c->watches[c->nwatches++] = s;
    return true;
}

const struct restart_part cmd_watch_part = {
    .name = "watches",
    .kinds = (const struct restart_kind[]){ { "watch", watch_restore_one }, { NULL } },
    .save = watches_save,
};
