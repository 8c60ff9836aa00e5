/*
 * cmd_int.h - the handlers' own header: the handlers cmd.c's table calls,
 * and what they share (cmd_reply.c). For cmd.c and cmd_*.c only; the
 * transport and the tests go through cmd.h.
 *
 * Every function here borrows its arguments for the call: the client, the
 * request and the names stay the caller's.
 */
#ifndef LOCKBROKER_CMD_INT_H
#define LOCKBROKER_CMD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "cmd.h"
#include "locks.h"
#include "proto.h"

/* The handlers (cmd.h's cmd_handler), by file. */
/* cmd_lock.c: locks, leases, CHECK */
cmd_handler cmd_lock, cmd_unlock, cmd_renew, cmd_check;
/* cmd_lockset.c: LOCK, TRYLOCK and UNLOCK of a set "a,b,c" (the rows' set handler) */
cmd_handler cmd_lockset;
/* cmd_info.c: what the daemon knows */
cmd_handler cmd_status, cmd_locks, cmd_holders, cmd_stats, cmd_help;
/* cmd_session.c: the connection itself */
cmd_handler cmd_ping, cmd_quit, cmd_client, cmd_auth, cmd_watch, cmd_unwatch, cmd_break,
    cmd_grace, cmd_resume;

/* cmd_reply.c: shared by the handlers. */
/* "OK <name>" and the like, of len bytes of name; name may be a set's list. */
void cmd_reply_word(struct client *c, const char *word, const char *name, size_t len);
/* ERR UNAVAILABLE: the backend (ZooKeeper) could not be asked. */
void cmd_reply_unavailable(struct client *c);
/* ERR LIMIT for a quota (PROTOCOL.md, "Quotas"): r is LOCKS_KEEP_ACCOUNT,
 * LOCKS_KEEP_TOTAL or LOCKS_LEASE_ACCOUNT; then ends the text ("" or "; ..."). */
void cmd_reply_quota(struct client *c, enum locks_result r, const char *then);
/* The answer to a LOCK or TRYLOCK of name from the lock table; at_once: the
 * table answered the request itself, not a callback later. */
void cmd_reply_lock_result(struct client *c, enum proto_cmd cmd, const char *name,
                           enum locks_result r, uint64_t token, bool at_once);
/* A LOCK wait (c's pending one) cut short by the end of input: logged, and
 * LOCKS_UNAVAILABLE in an outage, else LOCKS_TIMEOUT, for the reply. */
enum locks_result cmd_wait_cut(struct client *c);
/* Fills lreq (the caller's) with the lock table's request for a LOCK or TRYLOCK. */
void cmd_lock_req(const struct client *c, const struct proto_req *req, struct lock_req *lreq);
/* The protocol's mode of the lock table's. */
enum proto_mode cmd_proto_mode(enum lock_mode m);

/* The kinds of parked request a handover carries, beside lockset_ops
 * (cmd.c's cmd_pending_kinds lists them). */
extern const struct pending_ops cmd_lock_wait_ops, cmd_lease_wait_ops;   /* cmd_lock.c */
extern const struct pending_ops cmd_listing_ops;                        /* cmd_info.c */

#endif
