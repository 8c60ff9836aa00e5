/*
 * client.h - a connection as the commands see it: who it is, what it
 * holds and watches, and the one request it may be waiting on.
 *
 * The request path, from the socket up:
 *   conn.c (transport: socket, framing, back-pressure, the connection's states)
 *   -> cmd.c (the command table: counts, checks the row's flags, dispatches)
 *   -> cmd_lock.c, cmd_lockset.c, cmd_info.c, cmd_session.c (handlers;
 *      cmd_reply.c holds what they share, cmd_int.h declares them)
 *   -> the lock table, leases and backend (locks.h, lease.h, backend.h)
 *   -> replies, formatted in proto/ and queued through struct client_io.
 * Handlers never see the socket: the transport under a client is reached
 * only through client_io, which the unit suite (tests/check_cmd.c) fakes.
 *
 * A request that cannot be answered at once parks in the client's one
 * pending slot (client_suspend), with the operations that know how to
 * cancel it; the transport parses nothing more until client_complete().
 * Closing a client cancels whatever is pending in one place
 * (client_release_all), whatever its kind, as redis's blocked.c does.
 */
#ifndef LOCKBROKER_CLIENT_H
#define LOCKBROKER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "locks.h"
#include "proto.h"

struct server;
struct client;
struct watch_sub;
struct snap_w;
struct snap_r;
struct lease;
struct restart_in;
struct restart_part;
struct session;

/* The transport under a client (conn.c; a fake in tests/check_cmd.c). */
struct client_io {
    /* Queues one reply line of len bytes, LF included. more: other lines of the
     * same reply follow at once (queue it; a single line may be sent at once). */
    void (*write)(struct client *c, const char *line, size_t len, bool more);
    /* True while the client leaves so many replies unread that pushed lines
     * (EVENT) must wait. */
    bool (*backed_up)(const struct client *c);
    /* A request was parked in the pending slot: parse nothing more. */
    void (*suspend)(struct client *c);
    /* The parked request's answer is queued: parse the lines behind it. */
    void (*resume)(struct client *c);
    /* QUIT: close once the last reply is out (its holds are released as UNLOCK). */
    void (*quit)(struct client *c);
    /* Optional: the client logged in (client_login); the transport's login
     * deadline ends. */
    void (*logged_in)(struct client *c);
    /* RESUME on another connection took this client's session (session.h):
     * close now, without a reply, as if the connection had ended (the
     * session detaches first). c is freed before this returns. */
    void (*cut)(struct client *c);
};

/* A kind of parked request (redis's block types). */
struct pending_ops {
    const char *what;                             /* "STATUS": for logs */
    /* The client is going: cancel op, so that its answer never comes. NULL:
     * nothing to cancel (the owner's release ends the wait). */
    void (*cancel)(struct client *c, void *op);
    /* Optional: the client goes but its session keeps its holds
     * (client_release_keep): first release what op took for itself so far
     * and never answered (a set's names); cancel runs next. */
    void (*unwind)(struct client *c, void *op);
    /* The client ended its input while the request waits. NULL: the answer is
     * awaited as usual. Otherwise it may answer and client_complete(). */
    void (*input_ended)(struct client *c, void *op);
    /* The client read its output (client_drained). NULL: nothing to do.
     * A reply written as the client reads it goes on here. */
    void (*drained)(struct client *c, void *op);
    /* The lock table answered a wait of the client's own (cmd.h's
     * cmd_owner_ops done(): GRANTED, TIMEOUT, ...) while op is parked. NULL:
     * the answer is the parked request's reply (a LOCK of one name).
     * Otherwise the kind takes it (a set's step); it runs inside the table's
     * callback, so it must not call back into the table. */
    void (*lock_answer)(struct client *c, void *op, enum locks_result r, uint64_t token);
    /* Handover (handover.h): the kind's word in the snapshot, or NULL when
     * such a request is not carried over (the handover waits for its
     * answer first). */
    const char *snap_kind;
    /* Optional: true while op can be carried over (not between two steps). */
    bool (*snap_ready)(const struct client *c, void *op);
    /* Optional: writes the kind's own fields after the common ones. */
    void (*save)(const struct client *c, void *op, struct snap_w *w);
    /* With snap_kind: reads them back in the successor and parks the
     * request again (c->pending_cmd and pending_name are read already).
     * false: r's error is set. */
    bool (*restore)(struct client *c, struct snap_r *r, struct restart_in *in);
};

struct client {
    struct server *srv;                  /* borrowed: the services handlers use */
    LIST_ENTRY(client) link;             /* srv->clients */
    const struct client_io *io;          /* borrowed */
    uint64_t id;
    char peer[64];                       /* "127.0.0.1:5678" or "unix" */
    struct lock_owner owner;             /* its holds, managed by the lock table */
    const struct user *user;             /* logged in as; in srv->users; NULL: not */
    char user_name[PROTO_USER_MAX + 1];  /* user's name, kept to find it after a reload */
    char account[PROTO_ACCOUNT_MAX + 1]; /* who pays for what it makes (quota.h): "user
                                          * <name>" once logged in, else "address <peer's
                                          * IP>" ("address unix"); owner.account points here */
    char label[PROTO_LABEL_MAX + 1];     /* CLIENT <label>; owner.label points here once set */
    struct watch_sub **watches;          /* WATCH: owned (the array and each) */
    unsigned nwatches, watches_cap;
    bool input_ended;                    /* the client half-closed (set by the transport) */
    bool user_gone;                      /* taken over logged in as a user the users file
                                          * no longer has: closed once served (handover) */
    /* The one pending request; pending is NULL when there is none. */
    const struct pending_ops *pending;
    void *pending_op;                    /* the kind's handle, cancelled through pending */
    enum proto_cmd pending_cmd;          /* the request parked */
    char pending_name[PROTO_NAME_MAX + 1]; /* the name it is about, or "" */
    uint64_t pending_token;              /* the token it is about (lease operations) */
    struct session *session;             /* GRACE or RESUME: the session it is attached
                                          * to (session.h owns it), or NULL */
};

/* Prepares c (zeroed by the caller) for srv; peer is copied. owner_ops: the
 * lock table's callbacks for this client (cmd.h's cmd_owner_ops). */
void client_init(struct client *c, struct server *srv, const struct client_io *io,
                 const struct lock_owner_ops *owner_ops, uint64_t id, const char *peer);

/* The client whose owner o is. */
struct client *client_of_owner(struct lock_owner *o);

/* Parks the request cmd about name (may be NULL) until client_complete().
 * Calling it again while parked replaces the slot (a set's next step). If
 * the client's input has ended, ops->input_ended runs now. */
void client_suspend(struct client *c, enum proto_cmd cmd, const struct pending_ops *ops,
                    void *op, const char *name);

/* The parked request is answered (its reply queued): empties the slot and
 * lets the transport read on. op is not cancelled. */
void client_complete(struct client *c);

/* The transport saw the end of input: tells the parked request, if any. */
void client_input_ended(struct client *c);

/* Cancels the parked request (its answer never comes), removes the watches,
 * and releases the holds and waits: abandon (the client vanished without
 * QUIT) keeps a lock-delay's names, as locks_owner_abandon_all(). Leases
 * are not the client's and stay. */
void client_release_all(struct client *c, bool abandon);

/* As client_release_all(), for a client whose session outlives it
 * (session.h): its granted holds move to keep, as they are
 * (locks_owner_move_held); the parked request and the waits are
 * cancelled and the watches removed all the same. Returns how many holds moved. */
unsigned client_release_keep(struct client *c, struct lock_owner *keep);

/* Frees what client_init and the commands allocated; after client_release_all. */
void client_destroy(struct client *c);

/* Queues a reply line; len -1 (did not fit) is logged and dropped. */
void client_reply(struct client *c, const char *buf, int len);
/* Queues one line of a longer reply (more lines follow). */
void client_reply_more(struct client *c, const char *buf, int len);
/* ERR <code> <text>, counted in STATS errors. */
void client_reply_err(struct client *c, enum proto_err err, const char *text);

/* Whether the client may use lock `name`: anyone without a users file; with
 * one, a logged-in user whose patterns match it. */
bool client_may(const struct client *c, const char *name);

/* Logs the client in as u (AUTH, or a TLS client certificate). */
void client_login(struct client *c, const struct user *u);

/* After a users reload: finds the client's user again; false if it is gone. */
bool client_relogin(struct client *c);

/* The transport's output drained: watches whose latest line waited get it,
 * and the pending request's drained() runs (a listing goes on). */
void client_drained(struct client *c);

/*
 * Handover (restart.h). client_restart_key is the owner key of a client's
 * holds ("c<id>"; cmd_owner_ops'); client_save_fields writes the client's
 * own fields into its transport's "conn" record (login, label), and
 * client_restore_fields reads them back and keeps the client under its key
 * (false: r's error). client_restored reads a record's conn id field and
 * finds that client (NULL: r's error is set); client_restore_cmd checks
 * that the request read back is one of two commands.
 *
 * client_pending_part (data: a struct client_pending_kinds) writes a
 * "pending" record per client whose request is parked, and is ready while
 * every one of them can be carried; the successor gives each record to
 * the kind whose snap_kind it names.
 */
struct client_pending_kinds {
    struct server *srv;                          /* borrowed */
    const struct pending_ops *const *kinds;      /* every kind carried; NULL-ended */
};
extern const struct restart_part client_pending_part;
void client_restart_key(const struct lock_owner *o, char *letter, uint64_t *n);
void client_save_fields(const struct client *c, struct snap_w *w);
bool client_restore_fields(struct client *c, struct snap_r *r, struct restart_in *in);
struct client *client_restored(struct snap_r *r, const struct restart_in *in);
bool client_restore_cmd(const struct client *c, struct snap_r *r, enum proto_cmd a,
                        enum proto_cmd b);

#endif
