/*
 * restart.h - the restart's parts: what a daemon passes to its successor
 * (handover.h), as a registry of parts that each write and read their
 * own records, as memcached's restart_register() does.
 *
 * A part is a module's state: the server's counters (stats.c), the
 * backend's (backend.h), leases (lease.c), connections (conn.c), the lock
 * table (locks_snap.c), parked requests (client.c, each pending kind its
 * own fields) and watches (cmd_session.c). Each implements one struct
 * restart_part, its writer and its reader side by side in its own file.
 * main.c registers them in the snapshot's order; the old daemon
 * (handover.c) asks them whether they can be carried now and has them
 * write; the successor (takeover.c) gives each record to the part that
 * reads its kind. Both go through this list only.
 *
 * Parts that name each other's objects (a hold's owner, a parked
 * request's client, a lease being waited for) do it by key: the part that
 * restores an object keeps it under its key (restart_keep), the part that
 * needs it finds it there (restart_find). A key is "<letter><number>",
 * the letter the owner's (client.c: 'c', lease.c: 'l').
 *
 * Pure: no sockets, no event loop.
 */
#ifndef LOCKBROKER_RESTART_H
#define LOCKBROKER_RESTART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct snap_w;
struct snap_r;
struct restart_in;

/* The environment: the snapshot's descriptor (exec), and the store wanted. */
#define HANDOVER_ENV "LOCKBROKERD_HANDOVER"
#define FDSTORE_ENV "LOCKBROKERD_FDSTORE"
/* Connections per message of the socket that carries them through
 * systemd's store ("conns"): the kernel's SCM_MAX_FD. */
#define CONNS_PER_MSG 253

/* The listening sockets a handover carries, in the snapshot's order, and
 * their names in systemd's store (restart_listener_names). */
enum { RESTART_TCP, RESTART_UNIX, RESTART_TLS, RESTART_METRICS, RESTART_LISTENERS };
extern const char *const restart_listener_names[RESTART_LISTENERS];

/* The snapshot's first record ("daemon"): what the successor needs before
 * anything is started. */
struct restart_head {
    char daemon_id[96];
    char mode[16];               /* the backend's name: "embedded", "distributed" */
    int64_t stopped_us;          /* monotonic: when the old daemon stopped reading */
    int64_t started;             /* wall-clock start of the first daemon of the line */
    uint64_t handovers;          /* before this one */
    uint64_t conns_total;
    int listeners[RESTART_LISTENERS]; /* descriptors, -1: none */
};

/* Writes the head record; reads it (false: r's error is set). */
void restart_head_save(struct snap_w *w, const struct restart_head *h);
bool restart_head_read(struct snap_r *r, struct restart_head *h);

/* One kind of record a part reads back: the rest of the record after its
 * kind. data is the part's. false: r's error is set (or is set for it). */
struct restart_kind {
    const char *kind;
    bool (*restore)(void *data, struct snap_r *r, struct restart_in *in);
};

struct restart_part {
    const char *name;                    /* for logs: "connections" */
    const struct restart_kind *kinds;    /* what it reads; ended by { NULL } */
    /* Writes the part's records. */
    void (*save)(void *data, struct snap_w *w);
    /* Optional, before saving: closes what cannot be carried (TLS
     * connections); returns how many. */
    unsigned (*shed)(void *data);
    /* Optional: whether everything of the part can be carried now; false
     * with why (the old daemon waits a little, then gives up). */
    bool (*ready)(void *data, char *why, size_t len);
    /* Optional: the descriptors the part carries, with an id each. */
    void (*each_fd)(void *data, void (*fn)(void *arg, int fd, uint64_t id), void *arg);
    /* Optional: every record was read; false: r's error is set. */
    bool (*restored)(void *data, struct snap_r *r, struct restart_in *in);
    /* Optional: serve again: after a handover given up (taken_over false)
     * or in the successor once everything was read (true). */
    void (*resume)(void *data, bool taken_over);
};

#define RESTART_PARTS_MAX 16

/* The registry: parts in the snapshot's order. Zeroed is empty. */
struct restart {
    struct {
        const struct restart_part *part;  /* static */
        void *data;                       /* borrowed */
        uint64_t read[4];                 /* records read, per kind (first four) */
    } parts[RESTART_PARTS_MAX];
    unsigned n;
};

/* Adds a part (its records come after those of the parts added before). */
void restart_register(struct restart *reg, const struct restart_part *part, void *data);

/* The old daemon's walks, in registration order. */
unsigned restart_shed(struct restart *reg);
bool restart_ready(struct restart *reg, char *why, size_t len);
void restart_save(struct restart *reg, struct snap_w *w);
void restart_each_fd(struct restart *reg, void (*fn)(void *arg, int fd, uint64_t id),
                     void *arg);
void restart_resume(struct restart *reg, bool taken_over);

/*
 * What restoring has made so far, for the parts (restart_find). fd_of maps
 * a descriptor the old daemon named (and the connection id it carried) to
 * the one this process has, or -1.
 */
struct restart_in {
    int (*fd_of)(void *arg, int64_t fd, uint64_t id);
    void *fd_arg;
    void *keys;                  /* owned: tsearch's tree of kept objects */
};

/*
 * The successor: reads every record left in r, each by the part that
 * reads its kind, then asks each part whether what it read adds up.
 * false: r's error says why (nothing of it may serve). Frees in's keys.
 */
bool restart_restore(struct restart *reg, struct snap_r *r, struct restart_in *in);

/* Records of kind read by restart_restore. */
uint64_t restart_records(const struct restart *reg, const char *kind);

/* Keeps obj under letter and n (false: out of memory, or the key is taken:
 * r's error is set); finds it, or NULL. */
bool restart_keep(struct restart_in *in, struct snap_r *r, char letter, uint64_t n, void *obj);
void *restart_find(const struct restart_in *in, char letter, uint64_t n);

#endif
