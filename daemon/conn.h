/*
 * conn.h - one client connection: reads request lines, answers them in order.
 */
#ifndef LOCKBROKER_CONN_H
#define LOCKBROKER_CONN_H

#include <event2/util.h>
#include <openssl/ssl.h>

struct server;
struct conn;

/*
 * Starts serving fd (takes ownership of it, and of ssl). ssl: a TLS session
 * to accept on fd (the TLS listener), or NULL for plain text. peer names
 * the client in logs; it is copied. Returns NULL (and closes fd, frees
 * ssl) when out of memory. The connection frees itself when the client
 * goes; the server can close it earlier with conn_free().
 */
struct conn *conn_new(struct server *srv, evutil_socket_t fd, const char *peer, SSL *ssl);

/* Applies reloaded settings (max_line) to every open connection of srv. */
void conn_settings_changed(struct server *srv);

/* Looks up every logged-in connection's user again in srv->users (after a
 * reload); closes those whose user is gone. */
void conn_users_changed(struct server *srv);

/* Releases the connection's locks, cancels its waits, closes and frees it. */
void conn_free(struct conn *c);

#endif
