/*
 * cmd.h - the command table and the handlers of the request path
 * (client.h draws the path). A command answered at once is a row in
 * proto.h's PROTO_COMMANDS (word, arguments, flags, usage, help), a row in
 * cmd.c's table and a handler here.
 */
#ifndef LOCKBROKER_CMD_H
#define LOCKBROKER_CMD_H

#include "client.h"
#include "proto.h"

/*
 * Answers one parsed request, now or later through the client's pending
 * slot: counts it, checks it against its row's flags (login, the user's
 * name patterns, break=) and calls its handler. req borrows from the line,
 * which the caller keeps until this returns.
 */
void cmd_dispatch(struct client *c, const struct proto_req *req);

/* The lock table's callbacks for a client's holds (cmd_lock.c). */
extern const struct lock_owner_ops cmd_owner_ops;

/*
 * Handlers: req is the parsed request; name is req's name (or glob) as a
 * NUL-terminated copy, "" when it has none. Each queues its reply through
 * the client, or parks the request with client_suspend().
 */
typedef void cmd_handler(struct client *c, const struct proto_req *req, const char *name);

/* cmd_lock.c: locks, leases, CHECK */
cmd_handler cmd_lock, cmd_unlock, cmd_renew, cmd_check;
/* cmd_lockset.c: LOCK, TRYLOCK and UNLOCK of a set "a,b,c" (req->nnames > 1) */
cmd_handler cmd_lockset;
/* cmd_info.c: what the daemon knows */
cmd_handler cmd_status, cmd_locks, cmd_holders, cmd_stats, cmd_help;
/* cmd_session.c: the connection itself */
cmd_handler cmd_ping, cmd_quit, cmd_client, cmd_auth, cmd_watch, cmd_unwatch, cmd_break;

/* Shared by the handlers. */
/* ERR UNAVAILABLE: the backend (ZooKeeper) could not be asked. */
void cmd_reply_unavailable(struct client *c);
/* ERR LIMIT for a quota (PROTOCOL.md, "Quotas"): r is LOCKS_KEEP_ACCOUNT,
 * LOCKS_KEEP_TOTAL or LOCKS_LEASE_ACCOUNT; then ends the text ("" or "; ..."). */
void cmd_reply_quota(struct client *c, enum locks_result r, const char *then);
/* The answer to a LOCK or TRYLOCK of name from the lock table; at_once: the
 * table answered the request itself, not a callback later. */
void cmd_reply_lock_result(struct client *c, enum proto_cmd cmd, const char *name,
                           enum locks_result r, uint64_t token, bool at_once);
/* A set being taken, parked (cmd_lockset.c). */
extern const struct pending_ops lockset_ops;
/* A lock table answer to a set's step (cmd_lockset.c), from the owner's done(). */
void lockset_done(struct client *c, enum locks_result r, uint64_t token);
/* A LOCK wait (c's pending one) cut short by the end of input: logged, and
 * LOCKS_UNAVAILABLE in an outage, else LOCKS_TIMEOUT, for the reply. */
enum locks_result cmd_wait_cut(struct client *c);
/* The lock table's request for a LOCK or TRYLOCK. */
void cmd_lock_req(const struct client *c, const struct proto_req *req, struct lock_req *lreq);
/* "OK <name>" and the like; name may be a set's list. */
void cmd_reply_word(struct client *c, const char *word, const char *name, size_t len);
/* The protocol's mode of the lock table's. */
enum proto_mode cmd_proto_mode(enum lock_mode m);

/*
 * Handover (restart.h): the kinds of parked request carried over, for
 * client.h's client_pending_part (NULL-ended), each reading its own
 * fields back (pending_ops.restore); and the part that carries watches
 * (cmd_session.c; data: the struct server).
 */
extern const struct pending_ops *const cmd_pending_kinds[];
extern const struct pending_ops cmd_lock_wait_ops, cmd_lease_wait_ops;   /* cmd_lock.c */
extern const struct pending_ops cmd_listing_ops;                        /* cmd_info.c */
extern const struct restart_part cmd_watch_part;

#endif
