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
 * Handover: the connections' restart part (restart.h; data: the struct
 * server). It closes what cannot be carried over (TLS connections, ones
 * closing down), writes a "conn" record per connection and carries its
 * descriptor; the successor rebuilds each connection and serves them all
 * once every record is read.
 */
struct restart_part;
extern const struct restart_part conn_restart_part;

#endif
