/*
 * live_page.h - the live page on the metrics listener: GET / (and its
 * script and style sheet) and GET /locks.json, what the page polls.
 *
 * metrics.c owns the listener, its limits and its connections, and hands
 * these paths here. Everything is read-only, and a reply is written at once: a
 * request reads this daemon's lock table (locks_next, locks_status,
 * locks_each_hold_of, as LOCKS and HOLDERS do) and its statistics; in
 * distributed mode the queue across daemons comes from a gathering made
 * now and then (live_page.c).
 */
#ifndef LOCKBROKER_LIVE_PAGE_H
#define LOCKBROKER_LIVE_PAGE_H

#include <stdbool.h>

struct evbuffer;
struct server;

/* The page's state: the latest queue across daemons (live_page.c). */
struct live_page;

/* srv is borrowed and must outlive it. NULL when out of memory. */
struct live_page *live_page_new(const struct server *srv);
/* Cancels a gathering in flight and frees lp (NULL: nothing). */
void live_page_free(struct live_page *lp);

/* Whether path (the URI's path, NUL-terminated) is one of the page's. */
bool live_page_serves(const char *path);

/*
 * Writes the reply for a path that live_page_serves() into out: one of the
 * page's files, or the JSON of lp's server's locks and health for query (the URI's
 * query string, NULL: none; ?match=<glob>, ?limit=<n>). Returns the HTTP
 * status: 200, or 400 with a line saying why in out. *content_type is set
 * to a static string. out is the caller's. In distributed mode it may start
 * a gathering of the queue across daemons (backend.h, list), answered later
 * into lp.
 */
int live_page_write(struct live_page *lp, const char *path, const char *query,
                    struct evbuffer *out, const char **content_type);

#endif
