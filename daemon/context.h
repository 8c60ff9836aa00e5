/*
 * context.h - the daemon's context: what the listener, the transport and the handlers share.
 *
 * struct server is the one context the daemon runs with: the services
 * (lock table, leases, backend, users), the open connections and the
 * counters. server.c fills it and owns the listeners in it; conn.c,
 * client.c and the handlers (cmd*.c) only read and count in it, so they
 * include this header and not server.h, the listeners' API.
 */
#ifndef LOCKBROKER_CONTEXT_H
#define LOCKBROKER_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <time.h>

#include "proto.h"

struct event_base;
struct evconnlistener;
struct settings;
struct locks;
struct leases;
struct backend;
struct conn;
struct client;
struct users;
struct watches;
struct sessions;
struct tls;
struct accept_pause;
struct auth_pool;
struct auth_budget;
struct peer_count;

struct server_stats {
    uint64_t conns_total;     /* accepted since start */
    uint64_t conns_rejected;  /* refused because of max_clients */
    uint64_t conns_rejected_address; /* refused by max_clients_per_address or [tls]
                                      * max_handshakes_per_address */
    uint64_t login_timeouts;  /* closed for no login within login_timeout_ms */
    uint64_t cmds[PROTO_CMD_COUNT];
    uint64_t errors;          /* ERR replies */
    uint64_t auth_failures;   /* AUTH with a wrong user name or password */
    uint64_t accept_pauses;   /* listeners paused after accept() failed (accept_pause.h) */
    uint64_t auth_checks;     /* AUTH passwords hashed by the pool, unknown users included */
    uint64_t auth_busy;       /* AUTH answered ERR LIMIT: too many being checked */
    uint64_t auth_backoffs;   /* AUTH refused unchecked: its address was backing off */
    uint64_t reloads;         /* SIGHUP reloads since this process started, failed too */
    bool last_reload_failed;  /* the latest reload applied nothing (main.c reload()) */
    uint64_t tls_handshake_failures; /* TLS handshakes that failed or were cut off */
    uint64_t reload_failures; /* SIGHUPs whose settings or files did not all load */
    uint64_t handovers_given_up; /* handovers begun here that did not happen */
};

struct server {
    struct event_base *base;           /* borrowed */
    const struct settings *settings;   /* borrowed */
    struct locks *locks;               /* borrowed */
    struct leases *leases;             /* borrowed */
    struct backend *backend;           /* borrowed */
    struct watches *watches;           /* owned: WATCH's registry */
    struct sessions *sessions;         /* owned: GRACE and RESUME (session.h) */
    const struct users *users;         /* borrowed; NULL: no users_file, no AUTH needed.
                                        * Change it through server_set_users() */
    struct auth_pool *auth_pool;       /* owned: AUTH's password threads; NULL without users */
    struct auth_budget *auth_budget;   /* owned: AUTH's per-address budget; NULL without users */
    struct evconnlistener *tcp;        /* owned; NULL once stopped */
    struct evconnlistener *unix_sock;  /* owned; NULL when not configured */
    struct evconnlistener *tls_sock;   /* owned; NULL when [tls] listen is not set */
    struct tls *tls;                   /* owned: the TLS listener's context, or NULL */
    int64_t tls_not_after;             /* its certificate's notAfter (epoch seconds), set
                                        * where tls is loaded; for STATS without tls.c */
    struct accept_pause *accept_pause; /* owned: pauses every listener, the metrics one
                                        * too, when accept() fails */
    TAILQ_HEAD(, conn) conns;          /* every open connection, TLS refusals included */
    LIST_HEAD(, client) clients;       /* their clients (client_init), for the restart's
                                        * parts (client.h) */
    unsigned nconns;                   /* served connections: TLS refusals not counted */
    unsigned nrefusing;                /* TLS connections accepted to be refused, in their
                                        * handshake or closing (at most TLS_REFUSALS_MAX) */
    struct peer_count *peers;          /* owned: TCP connections and handshakes per address */
    uint64_t next_conn_id;
    struct server_stats stats;
    time_t started;
    char listen_addr[64];              /* the bound TCP address, port resolved */
    char tls_addr[64];                 /* the bound TLS address, port resolved, or "" */
    const char *daemon_id;             /* borrowed; names this daemon to clients and in ZooKeeper */
    unsigned holders_gathered;         /* HOLDERS replies the backend gathers or that
                                        * wait in memory to be read (cmd_info.c) */
    bool handing_over;                 /* a handover is under way: parse nothing more */
    uint64_t handovers;                /* handovers this daemon took over, all generations */
    bool sockopt_warned;               /* a TCP option failed once: later failures log at debug */
};

#endif
