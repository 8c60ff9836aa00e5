/*
 * auth_budget.h - what AUTH may cost per source address: how many of its
 * requests may be checked at once, and a back-off after repeated failures.
 *
 * The per-connection rule (one AUTH at a time, a failure answered after
 * 1000 ms: cmd_session.c) does not stop many connections from one host:
 * this table does, by the connections' address without the port. Every
 * Unix socket client is one address, "unix". Pure code: no libevent, no
 * clock (callers pass the time), no logging, so that it is unit-tested
 * alone. The table forgets an address once nothing of it is counted; it
 * keeps at most AUTH_BUDGET_ADDRS addresses.
 */
#ifndef LOCKBROKER_AUTH_BUDGET_H
#define LOCKBROKER_AUTH_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

/* Addresses remembered at once (~100 bytes each): more are answered BUSY. */
#define AUTH_BUDGET_ADDRS 65536
/* The longest address key, NUL included: an IPv6 address in text. */
#define AUTH_BUDGET_ADDR_MAX 48

struct auth_budget;

/* The limits, read from the settings at each call (SIGHUP may change them). */
struct auth_limits {
    unsigned max_pending;   /* AUTHs of one address being checked at once */
    unsigned fail_limit;    /* failures within backoff_ms that start a back-off; 0: none */
    unsigned backoff_ms;    /* the window failures are counted in, and the back-off */
};

enum auth_admit {
    AUTH_ADMIT_OK,          /* check it: counted until auth_budget_done() */
    AUTH_ADMIT_BUSY,        /* the address has max_pending being checked (or the table is full) */
    AUTH_ADMIT_BACKOFF,     /* the address is backing off: refuse without checking */
};

/* An empty table, owned by the caller (auth_budget_free), or NULL. */
struct auth_budget *auth_budget_new(void);
void auth_budget_free(struct auth_budget *b);   /* NULL is fine */

/* The address part of a peer as conn.c writes it ("1.2.3.4:5", "[::1]:5",
 * "unix") into out (AUTH_BUDGET_ADDR_MAX bytes): "1.2.3.4", "::1", "unix". */
void auth_budget_addr(const char *peer, char *out);

/* May addr have one more AUTH checked at now_ms (a monotonic clock)? */
enum auth_admit auth_budget_admit(struct auth_budget *b, const char *addr,
                                  const struct auth_limits *lim, int64_t now_ms);

/* An AUTH admitted for addr is checked (or was dropped). */
void auth_budget_done(struct auth_budget *b, const char *addr, int64_t now_ms);

/* A failure of addr is answered at now_ms. Returns true when it starts a
 * back-off: addr's AUTHs are refused until now_ms + lim->backoff_ms. */
bool auth_budget_failed(struct auth_budget *b, const char *addr, const struct auth_limits *lim,
                        int64_t now_ms);

/* Addresses remembered now. */
unsigned auth_budget_count(const struct auth_budget *b);

#endif
