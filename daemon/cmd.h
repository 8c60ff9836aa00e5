/*
 * cmd.h - the command table of the request path, as the transport and
 * the tests see it (client.h draws the path). A command answered at once
 * is a row in proto.h's PROTO_COMMANDS (word, arguments, flags, usage,
 * help), a row in cmd.c's table and a handler declared in cmd_int.h, the
 * handlers' own header.
 */
#ifndef LOCKBROKER_CMD_H
#define LOCKBROKER_CMD_H

#include "client.h"
#include "proto.h"

/*
 * Answers one parsed request, now or later through the client's pending
 * slot: counts it, checks it against its row's flags (login, the user's
 * name patterns, break=) and calls its handler, or for a set "a,b,c" its
 * set handler. req borrows from the line, which the caller keeps until
 * this returns.
 */
void cmd_dispatch(struct client *c, const struct proto_req *req);

/* The lock table's callbacks for a client's holds (cmd_lock.c). */
extern const struct lock_owner_ops cmd_owner_ops;

/*
 * Handlers: req is the parsed request; name is req's name (or glob) as a
 * NUL-terminated copy, "" when it has none or is a set. Each queues its
 * reply through the client, or parks the request with client_suspend().
 * All three are borrowed for the call.
 */
typedef void cmd_handler(struct client *c, const struct proto_req *req, const char *name);

/* A row of the command table. */
struct cmd_row {
    cmd_handler *handler;       /* the request, of one name or none; never NULL */
    cmd_handler *set_handler;   /* the request of a set "a,b,c" (req->nnames > 1);
                                 * NULL: the command takes none (no PROTO_ARG_NAMES) */
};

/* cmd.c's table: PROTO_CMD_COUNT rows, by command (tests/check_cmd.c checks
 * every row's handlers). Declared without its size, so that cmd.c's
 * _Static_assert sees the size its rows give it. */
extern const struct cmd_row cmd_table[];

/* A set being taken, parked (cmd_lockset.c); tests/check_cmd.c tells a
 * parked set by it. */
extern const struct pending_ops lockset_ops;

/*
 * Handover (restart.h): the kinds of parked request carried over, for
 * client.h's client_pending_part (NULL-ended; cmd.c), each reading its
 * own fields back (pending_ops.restore); and the part that carries
 * watches (cmd_session.c; data: the struct server).
 */
extern const struct pending_ops *const cmd_pending_kinds[];
extern const struct restart_part cmd_watch_part;

#endif
