/*
 * server.h - the daemon's state: listeners, connections, lock table, stats.
 */
#ifndef LOCKBROKER_SERVER_H
#define LOCKBROKER_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>

#include "proto.h"

struct event_base;
struct evconnlistener;
struct settings;
struct locks;
struct leases;
struct backend;
struct conn;

struct server_stats {
    uint64_t conns_total;     /* accepted since start */
    uint64_t conns_rejected;  /* refused because of max_clients */
    uint64_t cmds[PROTO_CMD_COUNT];
    uint64_t errors;          /* ERR replies */
};

struct server {
    struct event_base *base;           /* borrowed */
    const struct settings *settings;   /* borrowed */
    struct locks *locks;               /* borrowed */
    struct leases *leases;             /* borrowed */
    struct backend *backend;           /* borrowed */
    struct evconnlistener *tcp;        /* owned; NULL once stopped */
    struct evconnlistener *unix_sock;  /* owned; NULL when not configured */
    TAILQ_HEAD(, conn) conns;          /* every open connection */
    unsigned nconns;
    uint64_t next_conn_id;
    struct server_stats stats;
    time_t started;
    char listen_addr[64];              /* the bound TCP address, port resolved */
    const char *daemon_id;             /* borrowed; names this daemon to clients and in ZooKeeper */
    bool sockopt_warned;               /* a TCP option failed once: later failures log at debug */
};

/* Binds the listeners. Returns 0, or -1 after logging why. */
int server_start(struct server *srv, struct event_base *base, const struct settings *s,
                 struct locks *locks, struct leases *leases, struct backend *backend,
                 const char *daemon_id);

/* Writes "<host>-<pid>-<random hex>" into buf: unique for each run of a daemon. */
void server_make_daemon_id(char *buf, size_t len);

/* Closes the listeners and every connection (releasing their locks). */
void server_stop(struct server *srv);

/* Formats a socket address as "1.2.3.4:5" or "[::1]:5" into buf. */
void server_format_addr(const struct sockaddr *sa, char *buf, size_t len);

#endif
