/*
 * live_page.h - the live page on the metrics listener: GET / (and its
 * script and style sheet) and GET /locks.json, what the page polls.
 *
 * metrics.c owns the listener, its limits and its connections, and hands
 * these paths here. Everything is read-only and synchronous: a request reads
 * this daemon's lock table (locks_next, locks_status, locks_each_hold_of, as
 * LOCKS and HOLDERS do) and its statistics, and writes one reply.
 */
#ifndef LOCKBROKER_LIVE_PAGE_H
#define LOCKBROKER_LIVE_PAGE_H

#include <stdbool.h>

struct evbuffer;
struct server;

/* Whether path (the URI's path, NUL-terminated) is one of the page's. */
bool live_page_serves(const char *path);

/*
 * Writes the reply for a path that live_page_serves() into out: one of the
 * page's files, or the JSON of srv's locks and health for query (the URI's
 * query string, NULL: none; ?match=<glob>, ?limit=<n>). Returns the HTTP
 * status: 200, or 400 with a line saying why in out. *content_type is set
 * to a static string. srv is borrowed; out is the caller's.
 */
int live_page_write(const struct server *srv, const char *path, const char *query,
                    struct evbuffer *out, const char **content_type);

#endif
