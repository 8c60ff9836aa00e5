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
 * The successor (takeover.c; handover_receive, first thing in main): reads and checks
 * the whole snapshot before anything starts; a snapshot it refuses closes
 * every descriptor it came with (clients see their connections end) and
 * the daemon starts afresh, saying why in one log line. handover_restore
 * then rebuilds the state; if that fails half way, the daemon executes
 * itself afresh, so no half state ever serves.
 */
#ifndef LOCKBROKER_HANDOVER_H
#define LOCKBROKER_HANDOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

struct event_base;
struct locks;
struct leases;
struct backend;
struct metrics;

/* The environment: the snapshot's descriptor (exec), and the store wanted. */
#define HANDOVER_ENV "LOCKBROKERD_HANDOVER"
#define FDSTORE_ENV "LOCKBROKERD_FDSTORE"
/* Connections per message of the socket that carries them through
 * systemd's store ("conns"): the kernel's SCM_MAX_FD. */
#define CONNS_PER_MSG 253

/* The listening sockets a handover carries, in the snapshot's order, and
 * their names in systemd's store (handover_listener_names). */
enum { HANDOVER_TCP, HANDOVER_UNIX, HANDOVER_TLS, HANDOVER_METRICS, HANDOVER_LISTENERS };
extern const char *const handover_listener_names[HANDOVER_LISTENERS];

/* How long the old daemon waits for parked requests to settle. */
#define HANDOVER_QUIET_MS 3000
/* How long the successor's check may take. */
#define HANDOVER_CHECK_MS 10000

/* What the daemon is made of; all borrowed, owned by main.c. */
struct handover_parts {
    struct event_base *base;
    struct server *srv;
    struct locks *locks;
    struct leases *leases;
    struct backend *backend;
    struct metrics *metrics;
    char *const *argv;         /* the daemon's arguments, argv[0] included */
    const char *exe;           /* the binary executed for the successor */
};

/* A snapshot received: NULL members are not set. */
struct handover_in {
    char *buf;                 /* owned: the snapshot, decoded in place */
    size_t len;
    struct snap_r *r;          /* owned; positioned after the head records */
    char daemon_id[96];
    char mode[16];
    int64_t stopped_us;        /* monotonic: when the old daemon stopped reading */
    int64_t started;           /* wall-clock start of the first daemon of the line */
    uint64_t handovers;        /* before this one */
    uint64_t conns_total;
    struct server_fds fds;     /* listeners passed on, -1: none */
    int metrics_fd;
    bool fdstore;              /* came through systemd's store (LISTEN_FDS) */
};

/* SIGUSR2: starts a handover (a second one while one runs is ignored). */
void handover_begin(struct handover_parts *p);

/* SIGTERM under systemd with the store enabled: whether to hand over into it
 * rather than stop (then the caller stops the loop without closing). */
bool handover_to_fdstore_wanted(void);
/* Writes the snapshot and passes everything to the store. 0, or -1 (logged). */
int handover_to_fdstore(struct handover_parts *p);

/*
 * The successor, before anything is opened: a snapshot passed on
 * (LOCKBROKERD_HANDOVER or LISTEN_FDS) is read, checked and its head
 * records read into *in. Returns 1 with *in to restore, 0 when there is
 * none (or it was refused: logged, its descriptors closed).
 */
int handover_receive(struct handover_in *in);

/*
 * Rebuilds connections, leases, locks, parked requests and watches from
 * in, the backend, table and server started. Returns 0; on failure, logs
 * why and executes the daemon afresh (argv), never returning.
 */
int handover_restore(struct handover_in *in, struct handover_parts *p);

/* Frees what handover_receive kept. */
void handover_in_free(struct handover_in *in);

/* --check-handover: the line the old daemon looks for. */
void handover_print_format(void);

#endif
