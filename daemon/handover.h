/*
 * handover.h - restarting without dropping a lock: the daemon passes its
 * listening sockets, every client connection and the state of every lock
 * to its successor (PROTOCOL.md, "Handover"; README, "Restarting and
 * upgrading without dropping locks").
 *
 * The old daemon (handover_begin, on SIGUSR2):
 *   1. checks the successor: `<exe> --check-handover <its arguments>` must
 *      accept the settings and read this snapshot format; otherwise the
 *      handover is refused and the daemon serves on, nothing lost;
 *   2. stops accepting and parsing, and waits (at most HANDOVER_QUIET_MS)
 *      until every parked request is one a snapshot carries (a queued
 *      wait, a set's step, a lease being waited for);
 *   3. writes the snapshot (snap.h) into a memfd, and executes <exe> in
 *      its own process, the descriptors inherited, LOCKBROKERD_HANDOVER
 *      naming the snapshot's descriptor. If the exec fails, it serves on.
 *   Under systemd (LOCKBROKERD_FDSTORE=1 in the unit), SIGTERM instead
 *   passes the same descriptors to systemd's file descriptor store and
 *   exits; the next start takes them from LISTEN_FDS.
 *
 * What the snapshot holds is the restart parts' (restart.h): handover.c
 * writes the head and walks the parts. The successor's side is its
 * sibling takeover.h.
 */
#ifndef LOCKBROKER_HANDOVER_H
#define LOCKBROKER_HANDOVER_H

#include <stdbool.h>

struct event_base;
struct server;
struct locks;
struct backend;
struct metrics;
struct restart;

/* How long the old daemon waits for parked requests to settle. */
#define HANDOVER_QUIET_MS 3000
/* How long the successor's check may take. */
#define HANDOVER_CHECK_MS 10000

/* What the old daemon's side needs; all borrowed, owned by main.c. */
struct handover_ctx {
    struct event_base *base;
    struct server *srv;
    struct locks *locks;       /* for the log line's counts */
    struct backend *backend;
    struct metrics *metrics;
    struct restart *restart;   /* the parts, registered */
    char *const *argv;         /* the daemon's arguments, argv[0] included */
    const char *exe;           /* the binary executed for the successor */
};

/* SIGUSR2: starts a handover (a second one while one runs is ignored). */
void handover_begin(struct handover_ctx *p);

/* SIGTERM under systemd with the store enabled: whether to hand over into it
 * rather than stop (then the caller stops the loop without closing). */
bool handover_to_fdstore_wanted(void);
/* Writes the snapshot and passes everything to the store. 0, or -1 (logged). */
int handover_to_fdstore(struct handover_ctx *p);

/* --check-handover: the line the old daemon looks for. */
void handover_print_format(void);

#endif
