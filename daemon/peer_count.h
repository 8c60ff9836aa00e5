/*
 * peer_count.h - connections and TLS handshakes in progress per source
 * address, for [server] max_clients_per_address and [tls]
 * max_handshakes_per_address (server.c checks them at accept; conn.c
 * counts).
 *
 * Addresses are the keys auth_budget_addr() makes ("1.2.3.4", "::1").
 * Pure code: no libevent, no logging, so that it is unit-tested alone. An
 * address is forgotten once nothing of it is counted: the table holds at
 * most one record per open connection.
 */
#ifndef LOCKBROKER_PEER_COUNT_H
#define LOCKBROKER_PEER_COUNT_H

struct peer_count;

/* What one address has open now. */
struct peer_counts {
    unsigned conns;        /* connections, handshakes included */
    unsigned handshakes;   /* TLS connections whose handshake has not ended */
};

/* An empty table, owned by the caller (peer_count_free), or NULL. */
struct peer_count *peer_count_new(void);
void peer_count_free(struct peer_count *t);   /* NULL is fine */

/* addr's counts now (zeros for an address not in the table). */
struct peer_counts peer_count_get(const struct peer_count *t, const char *addr);

/* Adds conns and handshakes (each -1, 0 or 1) to addr's counts; a count
 * never goes below 0. Returns 0, or -1 when out of memory (nothing added). */
int peer_count_add(struct peer_count *t, const char *addr, int conns, int handshakes);

#endif
