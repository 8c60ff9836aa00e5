/*
 * takeover.h - the successor's side of a handover (handover.h is the old
 * daemon's): the snapshot and descriptors received, checked whole, then
 * rebuilt by the restart parts (restart.h).
 *
 * takeover_receive, first thing in main, reads and checks the whole
 * snapshot before anything starts; a snapshot it refuses closes every
 * descriptor it came with (clients see their connections end) and the
 * daemon starts afresh, saying why in one log line. takeover_restore then
 * gives every record to the part that reads its kind; if that fails half
 * way, the daemon executes itself afresh, so no half state ever serves.
 */
#ifndef LOCKBROKER_TAKEOVER_H
#define LOCKBROKER_TAKEOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "restart.h"
#include "server.h"

/* A snapshot received: NULL members are not set. */
struct takeover_in {
    char *buf;                 /* owned: the snapshot, decoded in place */
    size_t len;
    struct snap_r *r;          /* owned; positioned after the head record */
    struct restart_head head;  /* its head; listeners: see fds and metrics_fd */
    struct server_fds fds;     /* listeners passed on, -1: none */
    int metrics_fd;
    bool fdstore;              /* came through systemd's store (LISTEN_FDS) */
};

/*
 * Before anything is opened: a snapshot passed on (LOCKBROKERD_HANDOVER or
 * LISTEN_FDS) is read, checked and its head read into *in. Returns 1 with
 * *in to restore, 0 when there is none (or it was refused: logged, its
 * descriptors closed).
 */
int takeover_receive(struct takeover_in *in);

/* What the successor rebuilds: borrowed, owned by main.c. */
struct takeover_ctx {
    struct server *srv;
    const char *mode;          /* this daemon's backend's name */
    struct restart *restart;   /* the parts, registered */
    char *const *argv;         /* to execute the daemon afresh */
    const char *exe;
};

/*
 * Rebuilds connections, leases, locks, parked requests and watches from
 * in, the backend, table and server started. Returns 0; on failure, logs
 * why and executes the daemon afresh, never returning.
 */
int takeover_restore(struct takeover_in *in, const struct takeover_ctx *p);

/* Frees what takeover_receive kept. */
void takeover_in_free(struct takeover_in *in);

#endif
