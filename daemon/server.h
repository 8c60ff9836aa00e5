/*
 * server.h - the listeners: binding (or taking over) the TCP, Unix and TLS
 * sockets, accepting connections within max_clients, and what main.c
 * changes on a reload. The context they fill is in context.h.
 */
#ifndef LOCKBROKER_SERVER_H
#define LOCKBROKER_SERVER_H

#include <stddef.h>
#include <sys/socket.h>

#include "context.h"

struct event_base;
struct settings;
struct locks;
struct leases;
struct backend;
struct users;

/* Listening sockets passed on by the daemon this one takes over from; -1: none. */
struct server_fds {
    int tcp, unix_fd, tls;
};

/* Binds the listeners, or takes fds' ones (NULL: none) where the settings
 * still name them (the others are closed). users: as server.users.
 * Returns 0, or -1 after logging why. */
int server_start(struct server *srv, struct event_base *base, const struct settings *s,
                 struct locks *locks, struct leases *leases, struct backend *backend,
                 const struct users *users, const char *daemon_id,
                 const struct server_fds *fds);

/*
 * The secure default: a TCP listen address that is not loopback needs
 * users_file, or allow_anonymous; a TLS one needs either of them or
 * client certificates required. Returns 0, or -1 with the reason in err.
 */
int server_check_exposure(const struct settings *s, char *err, size_t errlen);

/*
 * SIGHUP: serve with the users of a re-read users file from now on. Open
 * connections keep their login under the new entry of their user; one whose
 * user is gone is closed (its locks released). The caller frees the old
 * table afterwards.
 */
void server_set_users(struct server *srv, const struct users *users);

/* Writes "<host>-<pid>-<random hex>" into buf: unique for each run of a daemon. */
void server_make_daemon_id(char *buf, size_t len);

/* SIGHUP: re-reads the [tls] files. 0 (logged); or -1 with why in err, and
 * the context in force stays. Without a TLS listener: 0, nothing logged. */
int server_reload_tls(struct server *srv, char *err, size_t errlen);

/* Closes the listeners and every connection (releasing their locks). */
void server_stop(struct server *srv);

/* A listening socket fd passed on at a handover, if it still listens where
 * want says (port 0: any port): fd, ready; otherwise it is closed, -1. */
int server_inherited_listener(const char *what, int fd, const struct sockaddr_storage *want);

/* Formats a socket address as "1.2.3.4:5" or "[::1]:5" into buf. */
void server_format_addr(const struct sockaddr *sa, char *buf, size_t len);

#endif
