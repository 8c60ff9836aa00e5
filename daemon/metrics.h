/*
 * metrics.h - the HTTP endpoint for monitoring ([server] metrics_listen).
 *
 * libevent's own HTTP server answers GET (and HEAD) /metrics with every
 * STATS value and the lock table's and backend's histograms in the
 * Prometheus text exposition format 0.0.4, and /healthz with 200 "ok", or
 * 503 and a one-line reason while the backend cannot serve requests (a
 * ZooKeeper outage). / and /locks.json are the live page (live_page.h).
 * Other paths are 404, other methods 405. Nothing here
 * runs on the lock path: a scrape reads the counters the daemon keeps anyway.
 */
#ifndef LOCKBROKER_METRICS_H
#define LOCKBROKER_METRICS_H

struct server;
struct metrics;

/*
 * Listens on addr (numeric IP:PORT or [IPv6]:PORT, as settings_listen_addr()
 * takes; port 0 picks a free one) on srv's event loop and serves srv's
 * statistics. srv is borrowed and must outlive the endpoint. Returns NULL
 * after logging why.
 */
struct metrics *metrics_start(const struct server *srv, const char *addr, int fd);

/* The listening socket, for a handover; -1 for NULL. */
int metrics_fd(const struct metrics *m);

/* Closes the listener and every HTTP connection, and frees m (NULL: nothing). */
void metrics_stop(struct metrics *m);

#endif
