/*
 * cmd_session.c - the connection itself: PING, QUIT, CLIENT, AUTH, WATCH,
 * UNWATCH, and BREAK (which acts on others' holds through this daemon).
 *
 * A failed AUTH is answered AUTH_FAIL_DELAY_MS after it arrived, from a
 * timer: meanwhile it is the client's pending request like a waiting LOCK,
 * so the requests behind it stay unparsed (bounded as for any wait) and
 * one connection cannot try more than one password at a time.
 */
#include "config.h"
#include "cmd.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "server.h"
#include "users.h"
#include "watch.h"
#include "snap.h"

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

/* The answer to a failed AUTH, once its delay has passed. */
static void on_auth_delay(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;

    event_free(c->pending_op);
    c->pending_op = NULL;
    client_reply_err(c, PROTO_ERR_AUTH_FAILED, "wrong user name or password");
    client_complete(c);
}

static void auth_delay_cancel(struct client *c, void *op)
{
    event_free(op);
}

static const struct pending_ops auth_delay_ops = { .what = "AUTH", .cancel = auth_delay_cancel };

/*
 * AUTH <user> <password>. The delay timer is armed before the password is
 * checked, so that a failure is answered AUTH_FAIL_DELAY_MS after the
 * request whatever the check cost (an unknown user costs none). A failure
 * leaves the connection as it was, logged in or not.
 */
void cmd_auth(struct client *c, const struct proto_req *req, const char *name)
{
    struct timeval delay = { AUTH_FAIL_DELAY_MS / 1000, (AUTH_FAIL_DELAY_MS % 1000) * 1000 };
    const struct users *users = c->srv->users;
    const struct user *user;
    struct event *timer;
    char buf[PROTO_REPLY_MAX];

    if (!users) {
        client_reply_err(c, PROTO_ERR_AUTH_FAILED, "this daemon has no users_file: AUTH is "
                         "not used");
        return;
    }
    if (!(timer = evtimer_new(c->srv->base, on_auth_delay, c)) || evtimer_add(timer, &delay) < 0) {
        if (timer)
            event_free(timer);
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        return;
    }
    user = users_find(users, req->user, req->user_len);
    if (user && users_verify(users, user, req->password, req->password_len)) {
        event_free(timer);
        client_login(c, user);
        log_debug("conn %llu (%s): logged in as %s", (unsigned long long)c->id, c->peer,
                  c->user_name);
        client_reply(c, buf, proto_fmt_word_name(buf, sizeof(buf), "OK", c->user_name,
                                                 strlen(c->user_name)));
        return;
    }
    c->srv->stats.auth_failures++;
    log_warn("conn %llu (%s): AUTH failed: %s '%.*s'", (unsigned long long)c->id, c->peer,
             user ? "wrong password for user" : "no user", (int)req->user_len, req->user);
    client_suspend(c, req->cmd, &auth_delay_ops, timer, NULL);
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
    char text[96];
    bool limit;

    if (find_watch(c, name) < 0) {
        if (!watch_room(c))
            return;
        if (!(s = watch_add(c->srv->watches, name, on_watch_event, c, &limit))) {
            snprintf(text, sizeof(text), "this daemon has %d watches", WATCHES_MAX);
            client_reply_err(c, limit ? PROTO_ERR_LIMIT : PROTO_ERR_INTERNAL,
                             limit ? text : "out of memory");
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

/* Handover: "watch <conn> <name> <line> <taken>", the conn id read. */
bool cmd_restore_watch(struct client *c, struct snap_r *r)
{
    char name[PROTO_NAME_MAX + 1];
    const char *line;
    struct watch_sub *s;
    size_t len;
    bool taken;

    snap_r_str_copy(r, name, sizeof(name));
    line = snap_r_str(r, &len);
    taken = snap_r_bool(r);
    if (!snap_r_done(r))
        return false;
    if (!name[0] || find_watch(c, name) >= 0 || c->nwatches == WATCHES_PER_CONN_MAX ||
        !watch_room(c))
        return snap_r_fail(r, "conn %llu: a watch of %s that does not add up",
                           (unsigned long long)c->id, name);
    if (!(s = watch_restore(c->srv->watches, name, on_watch_event, c, line ? line : "", len,
                            taken)))
        return snap_r_fail(r, "out of memory, or more than %d watches", WATCHES_MAX);
    c->watches[c->nwatches++] = s;
    return true;
}
