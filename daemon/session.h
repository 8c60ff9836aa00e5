/*
 * session.h - GRACE and RESUME: holds that outlive a connection for a grace
 * period (PROTOCOL.md, "Sessions: holds that outlive a connection").
 *
 * A session is opened by GRACE on a connection and attached to it: the
 * holds stay the connection's (its struct client's lock owner), so nothing
 * on the lock path changes. When the connection ends without QUIT, the
 * transport calls session_client_lost(): the granted holds move, as they
 * are, to the session's own lock owner (locks_owner_move_held), the
 * session is *detached* and its grace timer runs. RESUME on a new
 * connection moves them back (session_resume) and attaches the session
 * there; the grace running out abandons them (their lock-delay then), as a
 * close would have. QUIT and the closes the daemon makes on purpose end the
 * session with the connection (session_client_end), and the transport
 * releases or abandons the holds as before.
 *
 * Between these layers: the session stands on the client (client.h), the
 * lock table and quota.h; the transport (conn.c) and the handlers
 * (cmd_session.c: GRACE, RESUME) call it, and it reaches a connection it
 * must close only through client_io's cut. Everything runs on the event
 * loop thread.
 *
 * For a restart part (the handover): every session is in the table's list
 * (sessions_each). A detached one is the owner of its holds (its
 * lock_owner, session_owner(); session_grace_end_ms() says when its grace
 * ends on the monotonic clock); an attached one names its struct client
 * (session_client()), whose own lock owner has the holds. A restart part
 * would write per session its id, secret (session_secret()), grace,
 * user/account, label, desc and either the client's key or the grace's
 * end, and read them back with session_restore() (not written yet: the
 * handover carries no session today, see sessions_restart_note in
 * session.c).
 */
#ifndef LOCKBROKER_SESSION_H
#define LOCKBROKER_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "locks.h"
#include "proto.h"

struct event_base;
struct client;
struct session;
struct sessions;

struct sessions_stats {
    uint64_t current;     /* sessions open now, attached or detached */
    uint64_t detached;    /* of those, detached now */
    uint64_t resumed;     /* RESUMEs that took a session, since start */
    uint64_t expired;     /* sessions whose grace ran out, since start */
};

/* base and locks are borrowed and must outlive the table. NULL when out of memory. */
struct sessions *sessions_new(struct event_base *base, struct locks *locks);

/* Ends every session: attached ones forget their client, detached ones'
 * holds are abandoned (at shutdown the table grants nothing more), and
 * frees the table. Before locks_free(). NULL: nothing. */
void sessions_free(struct sessions *ss);

/* The caps of max_sessions and max_sessions_per_user (quota.h, as leases):
 * later GRACEs see them; open sessions stay. UINT_MAX both until set. */
void sessions_set_max(struct sessions *ss, unsigned max, unsigned max_per_account);

/* ss NULL (a daemon stopping): zeros. */
void sessions_get_stats(const struct sessions *ss, struct sessions_stats *out);

enum session_result {
    SESSION_OK,
    SESSION_LIMIT_TOTAL,    /* max_sessions reached */
    SESSION_LIMIT_ACCOUNT,  /* the client's account has max_sessions_per_user */
    SESSION_NOMEM,          /* out of memory, or no random bytes */
    SESSION_NOT_FOUND,      /* RESUME: no such id, a wrong secret or another user */
};

/*
 * GRACE: opens a session for c (which has none) with grace_ms, attached
 * to c (c->session). On SESSION_OK, id and secret are filled with its id
 * (PROTO_SESSION_LEN hex digits) and secret (PROTO_SECRET_LEN), both
 * NUL-terminated, for the reply only: the secret is kept as bytes and
 * never logged.
 */
enum session_result session_open(struct sessions *ss, struct client *c, int64_t grace_ms,
                                 char id[PROTO_SESSION_LEN + 1],
                                 char secret[PROTO_SECRET_LEN + 1]);

/*
 * RESUME: finds the session id whose secret is secret (both as the
 * request has them, hex, not NUL-terminated; compared in constant time)
 * and that c may take (with a users file, c must be logged in as the
 * session's user). If it is attached to another connection, that one is
 * cut first (client_io.cut). Then its holds become c's (c holds and awaits
 * nothing) and it is attached to c; *n is how many names c holds now.
 */
enum session_result session_resume(struct sessions *ss, struct client *c, const char *id,
                                   const char *secret, unsigned *n);

/* c's connection ended without QUIT (end of input, a reset, a timeout, a
 * write error, a cut): its session keeps the granted holds for its grace,
 * or ends now when there are none. c's parked request, waits and watches
 * end (client_release_keep). c->session is NULL after. */
void session_client_lost(struct client *c);

/* QUIT, or a close the daemon makes on purpose: c's session ends with it
 * (c->session is NULL after); the caller releases or abandons the holds. */
void session_client_end(struct client *c);

/* Its grace in ms (CHECK's window counts it). */
int64_t session_grace_ms(const struct session *s);

/* For a restart part (above): the sessions in order of opening, their
 * state, their holds' owner while detached. */
struct session *sessions_first(const struct sessions *ss);
struct session *sessions_next(const struct session *s);
const char *session_id(const struct session *s);           /* 16 hex digits; lives with s */
struct client *session_client(const struct session *s);    /* attached to, or NULL */
struct lock_owner *session_owner(struct session *s);       /* the detached holds' owner */
int64_t session_grace_end_ms(const struct session *s);     /* detached: monotonic ms */

/* The handover's part (restart.h; data: the struct sessions): for now its
 * shed ends every session (detached holds abandoned) and it writes nothing. */
struct restart_part;
extern const struct restart_part sessions_restart_part;

#endif
