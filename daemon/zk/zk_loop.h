/*
 * zk_loop.h - the libevent adapter of the session's bottom layer
 * (zk_loop.c): the ZooKeeper handle's socket and timers driven from the
 * event loop. The layers above reach it through zk_session.h.
 */
#ifndef LOCKBROKER_ZK_LOOP_H
#define LOCKBROKER_ZK_LOOP_H

#include "zk_int.h"

/* Requests were queued: make sure the loop wants to write them. Call it
 * after every request made outside zookeeper_process(): a request whose
 * send fails closes the client's socket, which the io event must leave at
 * once (zk_loop.c, zk_io_check). */
void zk_kick(struct zk *zk);

/* zk_loop.c: makes zk->io, io_timer and kick (zk_session_init; before_io: called first at every I/O event, before anything read is believed); 0, or -1
 * when one cannot be made. zk_loop_free frees those made (zk_session_free). */
int zk_loop_init(struct zk *zk, void (*before_io)(struct zk *zk));
void zk_loop_free(struct zk *zk);
/* zk_loop.c: io and its timer follow what zookeeper_interest() asks for
 * now, and the handshake of a connection attempt is timed (zk->stalled).
 * After a handle is opened, and after each pass of the loop. */
void zk_rearm(struct zk *zk);
/* zk_loop.c: takes io off its socket (before the handle is closed). */
void zk_io_off(struct zk *zk);

/* Why a connection attempt got no session (zk->stall_cause points at one
 * of these, or is NULL). */
extern const char ZK_CAUSE_SILENT[];
extern const char ZK_CAUSE_REFUSED[];

#endif
