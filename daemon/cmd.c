/*
 * cmd.c - the command table: one row per command of proto.h's list, and
 * the one function that counts a request, checks it against its row's
 * flags and calls its handler (redis's processCommand does the same).
 */
#include "config.h"
#include "cmd.h"

#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "cmd_int.h"
#include "context.h"
#include "snap.h"
#include "users.h"

/*
 * A row per command of proto.h's list, by its enum. Only a command that
 * takes PROTO_ARG_NAMES can be given a set "a,b,c" (req->nnames > 1): its
 * row names the set's handler too.
 */
const struct cmd_row cmd_table[] = {
    [PROTO_CMD_LOCK] = { cmd_lock, cmd_lockset },
    [PROTO_CMD_TRYLOCK] = { cmd_lock, cmd_lockset },
    [PROTO_CMD_UNLOCK] = { cmd_unlock, cmd_lockset },
    [PROTO_CMD_RENEW] = { cmd_renew, NULL },
    [PROTO_CMD_CHECK] = { cmd_check, NULL },
    [PROTO_CMD_PING] = { cmd_ping, NULL },
    [PROTO_CMD_QUIT] = { cmd_quit, NULL },
    [PROTO_CMD_STATUS] = { cmd_status, NULL },
    [PROTO_CMD_LOCKS] = { cmd_locks, NULL },
    [PROTO_CMD_HOLDERS] = { cmd_holders, NULL },
    [PROTO_CMD_BREAK] = { cmd_break, NULL },
    [PROTO_CMD_WATCH] = { cmd_watch, NULL },
    [PROTO_CMD_UNWATCH] = { cmd_unwatch, NULL },
    [PROTO_CMD_CLIENT] = { cmd_client, NULL },
    [PROTO_CMD_STATS] = { cmd_stats, NULL },
    [PROTO_CMD_HELP] = { cmd_help, NULL },
    [PROTO_CMD_AUTH] = { cmd_auth, NULL },
    [PROTO_CMD_GRACE] = { cmd_grace, NULL },
    [PROTO_CMD_RESUME] = { cmd_resume, NULL },
};
/* Sized by its rows: a command added at the end of proto.h's list without a
 * row does not build. One left out in the middle is a NULL row, which
 * tests/check_cmd.c finds. */
_Static_assert(sizeof(cmd_table) / sizeof(cmd_table[0]) == PROTO_CMD_COUNT,
               "cmd_table needs a row for every command of PROTO_COMMANDS");

/* Copies a name of the request, NUL-terminated (n.len <= PROTO_NAME_MAX). */
static void name_copy(char *dst, struct proto_name n)
{
    memcpy(dst, n.p, n.len);
    dst[n.len] = '\0';
}

/* The user may break name: or ERR DENIED is sent. */
static bool may_break(struct client *c, const struct proto_req *req)
{
    char text[PROTO_NAME_MAX + PROTO_USER_MAX + 64], name[PROTO_NAME_MAX + 1];

    name_copy(name, (struct proto_name){ req->name, req->name_len });
    if (user_may_break(c->user, name))
        return true;
    snprintf(text, sizeof(text), "user %s may not break lock %s (no break= pattern for it)",
             c->user_name, name);
    client_reply_err(c, PROTO_ERR_DENIED, text);
    return false;
}

/* The user may use every name of the request (each of a set): or ERR DENIED is sent. */
static bool may_use_names(struct client *c, const struct proto_req *req)
{
    char text[PROTO_NAME_MAX + PROTO_USER_MAX + 64], name[PROTO_NAME_MAX + 1];
    unsigned n = req->nnames ? req->nnames : 1;

    for (unsigned i = 0; i < n; i++) {
        name_copy(name, req->nnames ? req->names[i]
                                    : (struct proto_name){ req->name, req->name_len });
        if (user_may(c->user, name))
            continue;
        snprintf(text, sizeof(text), "user %s may not use lock %s", c->user_name, name);
        client_reply_err(c, PROTO_ERR_DENIED, text);
        return false;
    }
    return true;
}

/*
 * With a users file: whether the request may go ahead, from its row's
 * flags; otherwise its ERR NOAUTH or ERR DENIED answer is sent. A command
 * marked PROTO_F_OWN, given no token, touches only the client's own hold
 * and needs no name pattern. Listing commands filter their lines instead.
 */
static bool cmd_allowed(struct client *c, const struct proto_req *req)
{
    unsigned flags = proto_cmd_flags(req->cmd);

    if (!c->srv->users || (flags & PROTO_F_ANON))
        return true;
    if (!c->user) {
        client_reply_err(c, PROTO_ERR_NOAUTH, "log in first with AUTH <user> <password> "
                         "(only PING, HELP and QUIT work before)");
        return false;
    }
    if (flags & PROTO_F_BREAK)
        return may_break(c, req);
    if (!(flags & PROTO_F_NAMES) || ((flags & PROTO_F_OWN) && !req->has_token))
        return true;
    return may_use_names(c, req);
}

void cmd_dispatch(struct client *c, const struct proto_req *req)
{
    char name[PROTO_NAME_MAX + 1] = "";
    struct backend *be = c->srv->backend;

    c->srv->stats.cmds[req->cmd]++;
    be->ops->before_request(be->impl);
    if (!cmd_allowed(c, req))
        return;
    if (req->nnames > 1) {
        cmd_table[req->cmd].set_handler(c, req, name);     /* the set's names are in req */
        return;
    }
    if (req->name)
        name_copy(name, (struct proto_name){ req->name, req->name_len });
    cmd_table[req->cmd].handler(c, req, name);
}

/* Handover: every kind of parked request a snapshot carries. */
const struct pending_ops *const cmd_pending_kinds[] = {
    &cmd_lock_wait_ops, &cmd_lease_wait_ops, &lockset_ops, &cmd_listing_ops, NULL,
};
