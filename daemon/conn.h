/*
 * conn.h - one client connection: reads request lines, answers them in order.
 */
#ifndef LOCKBROKER_CONN_H
#define LOCKBROKER_CONN_H

#include <event2/util.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <openssl/ssl.h>

struct server;
struct conn;

/*
 * Starts serving fd (takes ownership of it, and of ssl). ssl: a TLS session
 * to accept on fd (the TLS listener), or NULL for plain text. peer names
 * the client in logs ("unix": a Unix socket client, not counted in
 * srv->peers); it is copied. refusal: NULL to serve the client; or, with
 * ssl, a reply line (LF included; copied) sent once the handshake is done,
 * after which the connection closes (counted in srv->nrefusing, not in
 * nconns). Returns NULL (and closes fd, frees ssl) when out of memory. The
 * connection frees itself when the client goes; the server can close it
 * earlier with conn_free().
 */
struct conn *conn_new(struct server *srv, evutil_socket_t fd, const char *peer, SSL *ssl,
                      const char *refusal);

/* Applies reloaded settings (max_line) to every open connection of srv. */
void conn_settings_changed(struct server *srv);

/* Looks up every logged-in connection's user again in srv->users (after a
 * reload); closes those whose user is gone. */
void conn_users_changed(struct server *srv);

/* Releases the connection's locks, cancels its waits, closes and frees it. */
void conn_free(struct conn *c);

/*
 * Handover (handover.h). conn_handover_drop closes what cannot be carried
 * over (TLS connections, ones closing down) and says how many.
 * conn_handover_ready: whether every other one's pending request can be.
 * conn_handover_save writes a "conn" record per connection (extras false:
 * descriptor, peer, login, label, bytes received but not parsed, replies
 * not sent), or their "pending" and "watch" records (extras true).
 * conn_handover_fds lists their descriptors.
 *
 * The successor: conn_restore reads a "conn" record (fd_of maps the
 * descriptor it names to the one this process has, or -1) and returns the
 * client, not served yet; conn_handover_resume serves them all;
 * conn_free_all closes them when the snapshot did not add up.
 * conn_handover_abort: the handover was given up, parse again.
 */
struct snap_w;
struct snap_r;
struct client;
unsigned conn_handover_drop(struct server *srv);
bool conn_handover_ready(struct server *srv, char *why, size_t len);
void conn_handover_save(struct server *srv, struct snap_w *w, bool extras);
void conn_handover_fds(struct server *srv, void (*fn)(void *arg, int fd, uint64_t id),
                       void *arg);
struct client *conn_restore(struct server *srv, struct snap_r *r,
                            int (*fd_of)(void *arg, int64_t fd, uint64_t id), void *arg);
void conn_handover_resume(struct server *srv);
void conn_handover_abort(struct server *srv);
void conn_free_all(struct server *srv);

#endif
