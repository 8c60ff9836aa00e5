/*
 * accept_pause.h - every listener stops accepting for a moment when
 * accept() fails.
 *
 * At the open-file limit (EMFILE, or the system's, ENFILE) a listener with
 * a connection waiting stays readable and accept() fails at once, again and
 * again: a loop that took a whole CPU and wrote a log line per failure. Here
 * the first failure on any listener disables all of them (the lock ports and
 * the metrics one alike: they share the descriptors) for ACCEPT_PAUSE_MS,
 * or until a connection closes, whichever comes first; the connections that
 * arrive meanwhile wait in the kernel's backlog. One log line says so, and
 * then at most one every ACCEPT_LOG_INTERVAL_S with the number of pauses
 * left unsaid.
 *
 * A listener's owner may also hold it closed for a reason of its own (a
 * handover, the metrics endpoint's connection budget): a listener accepts
 * when it is neither paused nor held.
 */
#ifndef LOCKBROKER_ACCEPT_PAUSE_H
#define LOCKBROKER_ACCEPT_PAUSE_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct evconnlistener;
struct accept_pause;

/* Long enough that a listener at the limit wakes the daemon ten times a
 * second, not thousands; short enough that a descriptor freed without a
 * connection closing (a file, a ZooKeeper socket) is used soon. */
#define ACCEPT_PAUSE_MS 100
/* One line a minute tells an operator the daemon is at its limit without
 * filling a disk. */
#define ACCEPT_LOG_INTERVAL_S 60

/* Why an owner holds a listener closed; bits, held while any is set. */
enum accept_hold {
    ACCEPT_HOLD_HANDOVER = 1,     /* a handover is under way (handover.c) */
    ACCEPT_HOLD_BUDGET = 2,       /* the metrics endpoint has its connections */
};

/*
 * A registry of listeners on base. pauses, if not NULL, is the owner's
 * counter, incremented at every pause (STATS accept_pauses); it must
 * outlive the registry. Returns NULL when out of memory.
 */
struct accept_pause *accept_pause_new(struct event_base *base, uint64_t *pauses);

/* Frees p; the listeners stay as they are (enabled or not) and are not freed. */
void accept_pause_free(struct accept_pause *p);

/*
 * Registers l, named what in the log ("listen 127.0.0.1:7411"; copied),
 * and makes it report its accept errors here (evconnlistener_set_error_cb).
 * Returns 0, or -1 when p has no room left (logged).
 */
int accept_pause_add(struct accept_pause *p, struct evconnlistener *l, const char *what);

/* Forgets l (before it is freed); nothing if it is not registered. */
void accept_pause_remove(struct accept_pause *p, struct evconnlistener *l);

/* Sets (on) or clears the reason why for l, or for every listener when l is
 * NULL, and enables or disables them to match. p may be NULL: nothing. */
void accept_pause_hold(struct accept_pause *p, struct evconnlistener *l, enum accept_hold why,
                       bool on);

/* A descriptor was freed (a connection closed): a pause ends now. p may be NULL. */
void accept_pause_wake(struct accept_pause *p);

#endif
