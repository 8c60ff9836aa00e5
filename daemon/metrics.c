/*
 * metrics.c - GET /metrics and /healthz over libevent's HTTP server (see
 * metrics.h).
 *
 * /metrics is built from the same walk as STATS (stats.c): a table below
 * gives the known statistics their Prometheus names, types and help; a
 * statistic it does not know yet, if its value is a number, is exported
 * as lockbroker_<name> of type untyped, so that nothing STATS shows is
 * missing here. No metric has a per-lock-name label: the number of names
 * is unbounded, and so would the number of series be.
 */
#include "config.h"
#include "metrics.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "accept_pause.h"
#include "backend.h"
#include "histogram.h"
#include "live_page.h"
#include "locks.h"
#include "log.h"
#include "server.h"
#include "settings.h"
#include "stats.h"

/* Request line and headers together: a scraper sends a few hundred bytes. */
#define HTTP_MAX_HEADERS 8192
/* GET needs no body; a small one is read so that a POST gets its 405. */
#define HTTP_MAX_BODY 1024
/* An HTTP connection idle this long (reading a request or keeping alive) is closed. */
#define HTTP_TIMEOUT_S 10
/* libevent's timeout above counts from the last byte read: a client sending
 * a byte every few seconds would keep its connection for ever. Each whole
 * request must arrive within this many seconds of the accept or of the
 * reply before (a scraper sends its few hundred bytes at once). */
#define HTTP_REQUEST_DEADLINE_S 10
/* HTTP connections at once; the listener accepts no more until one closes
 * (the rest wait in its backlog). A scraper or two and a health check need
 * a few; 16 fit in the descriptors kept beyond max_clients (FD_RESERVE in
 * main.c: 32, of which the daemon uses about a dozen itself). */
#define HTTP_MAX_CONNECTIONS 16
#define LISTEN_BACKLOG 64

#define PREFIX "lockbroker_"

/*
 * One HTTP connection, from its accept (libevent asks for its bufferevent,
 * http_new_bev) to its close (libevent's close callback, http_closed).
 * libevent 2.1 says nothing of a connection until its first request is
 * read, so the connection object is found through its bufferevent on the
 * next turn of the loop (http_timer). Until then the bufferevent holds a
 * reference of ours, so that it outlives a connection libevent closed at
 * once (a client that connected and left): it closes its socket itself
 * (BEV_OPT_CLOSE_ON_FREE), when the last reference goes, so that the
 * descriptor is not reused while its events are still registered.
 */
struct http_conn {
    struct metrics *m;                  /* borrowed */
    struct bufferevent *bev;            /* our reference until attached; NULL after */
    struct evhttp_connection *evcon;    /* libevent's; NULL until attached */
    struct event *timer;                /* owned: the attach, then the request deadline */
    TAILQ_ENTRY(http_conn) link;        /* in metrics.conns */
};

struct metrics {
    const struct server *srv;      /* borrowed */
    struct live_page *page;        /* owned: the live page's state */
    struct evhttp *http;           /* owned; frees its connections */
    struct evconnlistener *listener; /* owned by http */
    char addr[64];                 /* bound address, port resolved */
    int fd;                        /* the listening socket; the listener owns it */
    TAILQ_HEAD(, http_conn) conns; /* every HTTP connection open */
    unsigned nconns;               /* their number, at most HTTP_MAX_CONNECTIONS */
    bool stopping;                 /* metrics_stop() is freeing the connections */
};

/* ------------------------------------------------------ the exposition */

/* How a STATS value becomes a sample. */
struct metric_row {
    const char *stat;     /* the STATS name; ending in '_', a prefix whose rest is `label` */
    const char *name;     /* family name after PREFIX, with its unit */
    const char *type;     /* "counter" or "gauge" */
    const char *label;    /* prefix rows: the label the rest of the name goes in */
    unsigned divisor;     /* the value is divided by it (1000: ms to seconds); 0: 1 */
    const char *help;
};

static const struct metric_row rows[] = {
    { "uptime", "uptime_seconds", "gauge", NULL, 0, "Seconds since the daemon started." },
    { "curr_connections", "connections", "gauge", NULL, 0, "Client connections open now." },
    { "total_connections", "connections_accepted_total", "counter", NULL, 0,
      "Client connections accepted since start." },
    { "rejected_connections", "connections_rejected_total", "counter", NULL, 0,
      "Client connections refused because max_clients were open." },
    { "rejected_per_address", "connections_rejected_per_address_total", "counter", NULL, 0,
      "Client connections refused because their address had max_clients_per_address "
      "connections or [tls] max_handshakes_per_address handshakes open." },
    { "login_timeouts", "login_timeouts_total", "counter", NULL, 0,
      "Connections closed because they did not log in within login_timeout_ms." },
    { "accept_pauses", "accept_pauses_total", "counter", NULL, 0,
      "Times every listener stopped accepting for a moment because accept() failed "
      "(the open file limit reached, say), since this process started." },
    { "handovers", "handovers_total", "counter", NULL, 0,
      "Handovers to a successor this daemon's line took over (SIGUSR2, systemd's store)." },
    { "handovers_given_up", "handovers_given_up_total", "counter", NULL, 0,
      "Handovers asked for (SIGUSR2, SIGTERM into systemd's store) that did not happen: "
      "refused or given up, since this process started." },
    { "reloads", "reloads_total", "counter", NULL, 0,
      "SIGHUP reloads asked for since this process started, failed ones too." },
    { "last_reload_ok", "last_reload_ok", "gauge", NULL, 0,
      "1 when the latest SIGHUP reload applied (or none was asked for), 0 when it failed." },
    { "reload_failures", "reload_failures_total", "counter", NULL, 0,
      "SIGHUP reloads whose settings file, users file or TLS files did not all load (then "
      "nothing of it applies), since this process started." },
    { "tls_handshake_failures", "tls_handshake_failures_total", "counter", NULL, 0,
      "TLS connections closed before their handshake ended (failed, cut off, or not done "
      "within its deadline), since this process started." },
    { "tls_cert_expiry", "tls_certificate_expiry_seconds", "gauge", NULL, 0,
      "Seconds until the notAfter of the [tls] certificate served to new connections "
      "(negative once past)." },
    { "locks_held", "locks_held", "gauge", NULL, 0, "Holds granted on this daemon now." },
    { "oldest_hold_ms", "oldest_hold_seconds", "gauge", NULL, 1000,
      "How long the oldest hold granted on this daemon (kept ones included) has been held; "
      "0 when none." },
    { "longest_wait_ms", "longest_wait_seconds", "gauge", NULL, 1000,
      "How long the longest-waiting lock request on this daemon (queued or being acquired) "
      "has waited; 0 when none." },
    { "waiters", "lock_waiters", "gauge", NULL, 0,
      "Lock requests queued or being acquired on this daemon now." },
    { "grants", "grants_total", "counter", NULL, 0,
      "Locks granted since start (re-entrant grants excluded)." },
    { "grants_", "mode_grants_total", "counter", "mode", 0,
      "Locks granted since start, by mode; they add up to lockbroker_grants_total." },
    { "timeouts", "lock_timeouts_total", "counter", NULL, 0,
      "Lock waits that ended without a grant (TIMEOUT) since start." },
    { "lost", "locks_lost_total", "counter", NULL, 0,
      "Holds lost (LOST lines pushed; distributed mode) since start." },
    { "local_handoffs", "local_handoffs_total", "counter", NULL, 0,
      "Exclusive holds passed to the next waiter on this daemon without a trip through "
      "ZooKeeper since start." },
    { "lock_delays", "lock_delays_total", "counter", NULL, 0,
      "Holds that ended without a release and kept their name for their lock-delay, "
      "since start." },
    { "locks_delayed", "locks_delayed", "gauge", NULL, 0,
      "Holds keeping their name now, for a lock-delay or after UNLOCK keep=." },
    { "locks_kept", "locks_kept_total", "counter", NULL, 0,
      "Holds released with UNLOCK keep= (kept for that time) since start." },
    { "locks_broken", "locks_broken_total", "counter", NULL, 0,
      "Holds ended by BREAK since start (counted in locks_lost_total too)." },
    { "locks_keepable", "locks_keepable", "gauge", NULL, 0,
      "Holds that may outlive their client now: with a lock-delay (held or awaited), or "
      "kept (counted against max_kept_holds)." },
    { "keep_refused", "keep_refused_total", "counter", NULL, 0,
      "LOCK, TRYLOCK and UNLOCK keep= answered ERR LIMIT for max_kept_holds or "
      "max_kept_holds_per_user, since start." },
    { "errors", "errors_total", "counter", NULL, 0, "ERR replies sent since start." },
    { "auth_failures", "auth_failures_total", "counter", NULL, 0,
      "Failed authentications since start." },
    { "auth_checks", "auth_checks_total", "counter", NULL, 0,
      "AUTH passwords hashed off the event loop since start, unknown users included." },
    { "auth_busy", "auth_busy_total", "counter", NULL, 0,
      "AUTH requests answered ERR LIMIT (too many being checked) since start." },
    { "auth_backoffs", "auth_backoffs_total", "counter", NULL, 0,
      "AUTH requests refused unchecked because their address was backing off, since start." },
    { "cmd_", "commands_total", "counter", "command", 0,
      "Requests received since start, by command." },
    { "leases", "leases", "gauge", NULL, 0,
      "Leases held or awaited through this daemon now (counted against max_leases)." },
    { "leases_granted", "leases_granted_total", "counter", NULL, 0,
      "Leases granted through this daemon since start." },
    { "leases_released", "leases_released_total", "counter", NULL, 0,
      "Leases ended by UNLOCK <name> <token> through this daemon since start." },
    { "leases_expired", "leases_expired_total", "counter", NULL, 0,
      "Leases ended by their ttl on this daemon since start (embedded mode)." },
    { "sessions", "sessions", "gauge", NULL, 0,
      "Sessions (GRACE) open through this daemon now, attached or detached (counted "
      "against max_sessions)." },
    { "sessions_detached", "sessions_detached", "gauge", NULL, 0,
      "Sessions whose connection ended, their holds kept for their grace, now." },
    { "sessions_resumed", "sessions_resumed_total", "counter", NULL, 0,
      "Sessions taken back by RESUME on this daemon since start." },
    { "sessions_expired", "sessions_expired_total", "counter", NULL, 0,
      "Sessions whose grace ran out, their holds abandoned, since start." },
    { "zk_session_timeout_ms", "zk_session_timeout_seconds", "gauge", NULL, 1000,
      "The negotiated ZooKeeper session timeout." },
    { "zk_sessions", "zk_sessions_total", "counter", NULL, 0,
      "ZooKeeper sessions established since start." },
    { "zk_reconnects", "zk_reconnects_total", "counter", NULL, 0,
      "Reconnections to ZooKeeper within a session since start." },
    { "zk_window_probes", "zk_window_probes_total", "counter", NULL, 0,
      "Probe rounds (a sync, then a write) sent to confirm the ZooKeeper session through "
      "the leader, since start." },
    { "zk_window_confirms", "zk_window_confirms_total", "counter", NULL, 0,
      "Probe rounds that moved the time the session is known to live from, since start." },
    { "zk_window_age_ms", "zk_window_age_seconds", "gauge", NULL, 1000,
      "Time since the latest request whose session touch a ZooKeeper leader certainly "
      "received: the session lives at least its timeout minus this (-1: no session)." },
    { "zk_session_confirmed", "zk_session_confirmed", "gauge", NULL, 0,
      "1 while the ZooKeeper session is confirmed through the leader and locks may be "
      "granted; 0 while connecting, attaching after a handover, presumed lost or expired "
      "(LOCK waits stay queued, TRYLOCK answers ERR UNAVAILABLE)." },
    { "zk_outstanding", "zk_outstanding_requests", "gauge", NULL, 0,
      "ZooKeeper requests sent and not yet answered." },
    { "zk_requests", "zk_lock_operations", "gauge", NULL, 0,
      "Lock acquisitions and releases in progress in ZooKeeper." },
    { "zk_leases_removed", "zk_leases_removed_total", "counter", NULL, 0,
      "Expired lease nodes this daemon removed from ZooKeeper since start." },
    { "zk_session_delays", "zk_session_lock_delays_total", "counter", NULL, 0,
      "Lock-delays this daemon waited because the holder before one of its requests ended "
      "with its daemon's ZooKeeper session, since start." },
    { "zk_idle_nodes", "zk_idle_nodes", "gauge", NULL, 0,
      "Released exclusive locks whose ZooKeeper node is kept for a LOCK on this daemon "
      "(keep_idle_ms)." },
    { "zk_idle_reuses", "zk_idle_reuses_total", "counter", NULL, 0,
      "LOCKs granted by taking a kept idle node over, since start." },
    { "zk_grants_unlisted", "zk_grants_unlisted_total", "counter", NULL, 0,
      "Grants of a name's first use through this daemon whose create found its node alone, "
      "made without listing the children, since start." },
    { "zk_token_writes_due", "zk_token_writes_due", "gauge", NULL, 0,
      "Grants whose fencing token waits to be written to their ZooKeeper node." },
    { "zk_token_writes_spared", "zk_token_writes_spared_total", "counter", NULL, 0,
      "Token writes never sent by themselves (the hold ended, or another write of the node "
      "carried the token first), since start." },
    { "zk_nonfair_races_won", "zk_nonfair_races_won_total", "counter", NULL, 0,
      "Creates of a non-fair name's node, sent after its holder's node went, that got it, "
      "since start." },
    { "zk_nonfair_races_lost", "zk_nonfair_races_lost_total", "counter", NULL, 0,
      "Creates of a non-fair name's node, sent after its holder's node went, that found it "
      "taken again, since start." },
    { "zk_batches", "zk_batches_total", "counter", NULL, 0,
      "ZooKeeper multis (one transaction each) sent since start." },
    { "zk_batched_ops", "zk_batched_ops_total", "counter", NULL, 0,
      "Creates and deletes of lock nodes carried by ZooKeeper multis (sent again after a "
      "failure: counted again), since start." },
    { "zk_batch_failures", "zk_batch_failures_total", "counter", NULL, 0,
      "ZooKeeper multis that failed (one of their operations, or the connection), since "
      "start." },
    { "zk_batch_resent", "zk_batch_resent_total", "counter", NULL, 0,
      "Operations sent again because another one of their multi failed, since start." },
    { "zk_batches_inflight", "zk_batches_inflight", "gauge", NULL, 0,
      "ZooKeeper multis sent and not yet answered (at most 2)." },
    { "zk_write_queue", "zk_write_queue_length", "gauge", NULL, 0,
      "Creates and deletes of lock nodes waiting for the next multi." },
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

/* Statistics that are words, not numbers: exported in their own way below. */
static const char *const word_stats[] = { "version", "mode", "zk_state", "zk_session_id" };

/* The ZooKeeper session states STATS says (zk/zk_session.c), one series each. */
static const char *const zk_states[] = { "connected", "connecting", "expired" };

#define STATS_MAX 256
#define STAT_TEXT 64

/* One STATS walk, kept for the families to pick from. */
struct collected {
    unsigned n;
    struct {
        char name[STAT_TEXT];
        char value[STAT_TEXT];
        bool used;
    } s[STATS_MAX];
};

static void collect_stat(void *cookie, const char *name, const char *value)
{
    struct collected *c = cookie;

    if (c->n == STATS_MAX) {
        log_error("metrics: more than %d statistics; %s left out", STATS_MAX, name);
        return;
    }
    snprintf(c->s[c->n].name, STAT_TEXT, "%s", name);
    snprintf(c->s[c->n].value, STAT_TEXT, "%s", value);
    c->s[c->n].used = false;
    c->n++;
}

static const char *collected_value(const struct collected *c, const char *name)
{
    for (unsigned i = 0; i < c->n; i++)
        if (strcmp(c->s[i].name, name) == 0)
            return c->s[i].value;
    return NULL;
}

/* A decimal integer, perhaps negative (-1: none; a certificate's expiry past). */
static bool is_number(const char *v)
{
    if (v[0] == '-')
        v++;
    return v[0] && strspn(v, "0123456789") == strlen(v);
}

static bool is_word_stat(const char *name)
{
    for (size_t i = 0; i < sizeof(word_stats) / sizeof(word_stats[0]); i++)
        if (strcmp(name, word_stats[i]) == 0)
            return true;
    return false;
}

/* A label value with \, " and newlines escaped, as the format wants. */
static void add_label_value(struct evbuffer *out, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            evbuffer_add_printf(out, "\\%c", *v);
        else if (*v == '\n')
            evbuffer_add(out, "\\n", 2);
        else
            evbuffer_add(out, v, 1);
    }
}

static void add_header(struct evbuffer *out, const char *name, const char *type,
                       const char *help)
{
    evbuffer_add_printf(out, "# HELP " PREFIX "%s %s\n# TYPE " PREFIX "%s %s\n", name, help,
                        name, type);
}

/* Microseconds as decimal seconds, without trailing zeros: "0.000512", "2". */
static void add_seconds(struct evbuffer *out, uint64_t us)
{
    char frac[8];
    int len;

    if (us % 1000000 == 0) {
        evbuffer_add_printf(out, "%llu", (unsigned long long)(us / 1000000));
        return;
    }
    len = snprintf(frac, sizeof(frac), "%06llu", (unsigned long long)(us % 1000000));
    while (len > 0 && frac[len - 1] == '0')
        len--;
    evbuffer_add_printf(out, "%llu.%.*s", (unsigned long long)(us / 1000000), len, frac);
}

/* A numeric STATS value, divided as its row says. */
static void add_value(struct evbuffer *out, const char *v, unsigned divisor)
{
    if (divisor <= 1 || v[0] == '-')      /* -1: none, whatever the unit */
        evbuffer_add_printf(out, "%s\n", v);
    else
        evbuffer_add_printf(out, "%.3f\n", strtod(v, NULL) / divisor);
}

/* The family of one table row, if any statistic matches it. */
static void add_row(struct evbuffer *out, const struct metric_row *r, struct collected *c)
{
    size_t plen = strlen(r->stat);
    bool prefix = r->label != NULL, started = false;

    for (unsigned i = 0; i < c->n; i++) {
        const char *name = c->s[i].name;

        if (c->s[i].used || !is_number(c->s[i].value) ||
            (prefix ? strncmp(name, r->stat, plen) != 0 || !name[plen]
                    : strcmp(name, r->stat) != 0))
            continue;
        c->s[i].used = true;
        if (!started)
            add_header(out, r->name, r->type, r->help);
        started = true;
        evbuffer_add_printf(out, PREFIX "%s", r->name);
        if (prefix) {
            evbuffer_add_printf(out, "{%s=\"", r->label);
            add_label_value(out, name + plen);
            evbuffer_add_printf(out, "\"}");
        }
        evbuffer_add(out, " ", 1);
        add_value(out, c->s[i].value, r->divisor);
    }
}

/* version and mode as labels of a constant 1, the usual "info" metric. */
static void add_info(struct evbuffer *out, const struct collected *c)
{
    const char *version = collected_value(c, "version"), *mode = collected_value(c, "mode");

    add_header(out, "info", "gauge", "Always 1; the labels say the daemon's version and mode.");
    evbuffer_add_printf(out, PREFIX "info{version=\"");
    add_label_value(out, version ? version : "");
    evbuffer_add_printf(out, "\",mode=\"");
    add_label_value(out, mode ? mode : "");
    evbuffer_add_printf(out, "\"} 1\n");
}

/* Distributed mode: 1 for the state the session is in, 0 for the others. */
static void add_zk_state(struct evbuffer *out, const struct collected *c)
{
    const char *state = collected_value(c, "zk_state");
    bool known = false;

    if (!state)
        return;
    add_header(out, "zk_session_state", "gauge",
               "1 for the state the daemon's ZooKeeper session is in, 0 for the others.");
    for (size_t i = 0; i < sizeof(zk_states) / sizeof(zk_states[0]); i++) {
        known |= strcmp(state, zk_states[i]) == 0;
        evbuffer_add_printf(out, PREFIX "zk_session_state{state=\"%s\"} %d\n", zk_states[i],
                            strcmp(state, zk_states[i]) == 0);
    }
    if (!known) {
        evbuffer_add_printf(out, PREFIX "zk_session_state{state=\"");
        add_label_value(out, state);
        evbuffer_add_printf(out, "\"} 1\n");
    }
}

/* A numeric statistic the table does not know yet. */
static void add_unknown(struct evbuffer *out, const char *name, const char *value)
{
    char help[STAT_TEXT + 64];

    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return;          /* not a valid metric name: leave it to STATS */
    snprintf(help, sizeof(help), "The STATS value %s (see PROTOCOL.md).", name);
    add_header(out, name, "untyped", help);
    evbuffer_add_printf(out, PREFIX "%s %s\n", name, value);
}

/* Buckets exported for a histogram of counts (not durations): 1 to 1024. */
#define COUNT_BUCKETS 11

static void add_bound(struct evbuffer *out, uint64_t v, bool seconds)
{
    if (seconds)
        add_seconds(out, v);
    else
        evbuffer_add_printf(out, "%llu", (unsigned long long)v);
}

static void add_histogram(struct evbuffer *out, const char *name, const char *help,
                          const struct histogram *h, bool seconds)
{
    uint64_t cumulative = 0;
    unsigned n = seconds ? HISTOGRAM_BUCKETS : COUNT_BUCKETS;

    add_header(out, name, "histogram", help);
    for (unsigned i = 0; i < n; i++) {
        cumulative += h->counts[i];
        evbuffer_add_printf(out, PREFIX "%s_bucket{le=\"", name);
        add_bound(out, histogram_bound_us(i), seconds);
        evbuffer_add_printf(out, "\"} %llu\n", (unsigned long long)cumulative);
    }
    evbuffer_add_printf(out, PREFIX "%s_bucket{le=\"+Inf\"} %llu\n", name,
                        (unsigned long long)h->count);
    evbuffer_add_printf(out, PREFIX "%s_sum ", name);
    add_bound(out, h->sum_us, seconds);
    evbuffer_add_printf(out, "\n" PREFIX "%s_count %llu\n", name, (unsigned long long)h->count);
}

static void add_backend_histogram(void *cookie, const char *name, const char *help,
                                  const struct histogram *h, bool seconds)
{
    add_histogram(cookie, name, help, h, seconds);
}

static bool health_check(const struct server *srv, char *text, size_t len);

static void metrics_write(const struct server *srv, struct evbuffer *out)
{
    const struct locks_histograms *lh = locks_get_histograms(srv->locks);
    struct collected *c = calloc(1, sizeof(*c));   /* 32 KiB: not on the stack */

    if (!c) {
        log_error("metrics: out of memory");
        return;
    }
    stats_each(srv, collect_stat, c);
    add_info(out, c);
    add_header(out, "healthy", "gauge",
               "1 while /healthz answers 200 (requests can be served), 0 while it answers 503.");
    evbuffer_add_printf(out, PREFIX "healthy %d\n", health_check(srv, NULL, 0));
    for (size_t i = 0; i < NROWS; i++)
        add_row(out, &rows[i], c);
    add_zk_state(out, c);
    for (unsigned i = 0; i < c->n; i++)
        if (!c->s[i].used && !is_word_stat(c->s[i].name) && is_number(c->s[i].value))
            add_unknown(out, c->s[i].name, c->s[i].value);
    add_histogram(out, "lock_wait_seconds",
                  "Time from a lock request to its grant (0 when granted at once); granted "
                  "requests only.", &lh->wait, true);
    add_histogram(out, "lock_hold_seconds",
                  "Time from a grant to the end of the hold (released, lost or passed on).",
                  &lh->hold, true);
    srv->backend->ops->histograms(srv->backend->impl, add_backend_histogram, out);
    free(c);
}

/* ------------------------------------------------ HTTP connections */

static void http_forget(struct http_conn *hc)
{
    struct metrics *m = hc->m;

    TAILQ_REMOVE(&m->conns, hc, link);
    m->nconns--;
    event_free(hc->timer);
    if (hc->bev)
        bufferevent_decref(hc->bev);
    free(hc);
    if (m->stopping)
        return;
    if (m->nconns < HTTP_MAX_CONNECTIONS)
        accept_pause_hold(m->srv->accept_pause, m->listener, ACCEPT_HOLD_BUDGET, false);
    accept_pause_wake(m->srv->accept_pause);   /* a descriptor is free again */
}

static void http_closed(struct evhttp_connection *evcon, void *arg)
{
    http_forget(arg);
}

static void http_deadline_from_now(struct http_conn *hc)
{
    struct timeval tv = { HTTP_REQUEST_DEADLINE_S, 0 };

    evtimer_add(hc->timer, &tv);
}

/* The timer: first the attach, then the deadline of the request. */
static void http_timer(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *hc = arg;
    bufferevent_event_cb eventcb = NULL;
    void *cbarg = NULL;
    char *host = NULL;
    ev_uint16_t port = 0;

    if (hc->evcon) {
        evhttp_connection_get_peer(hc->evcon, &host, &port);
        log_info("metrics: %s:%u sent no whole request within %d s; closing", host ? host : "?",
                 port, HTTP_REQUEST_DEADLINE_S);
        evhttp_connection_free(hc->evcon);   /* calls http_closed */
        return;
    }
    /* libevent 2.1 makes the connection the bufferevent's callback argument. */
    bufferevent_getcb(hc->bev, NULL, NULL, &eventcb, &cbarg);
    if (!eventcb || !cbarg ||
        evhttp_connection_get_bufferevent(cbarg) != hc->bev) {
        if (eventcb)          /* a libevent that does not work this way: never capped */
            log_error("metrics: cannot follow an HTTP connection; its request has no deadline");
        http_forget(hc);      /* or libevent closed it at once */
        return;
    }
    hc->evcon = cbarg;
    evhttp_connection_set_closecb(hc->evcon, http_closed, hc);
    bufferevent_decref(hc->bev);
    hc->bev = NULL;
    http_deadline_from_now(hc);
}

/* libevent asks for the bufferevent of a connection it just accepted. */
static struct bufferevent *http_new_bev(struct event_base *base, void *arg)
{
    struct metrics *m = arg;
    struct http_conn *hc = calloc(1, sizeof(*hc));
    static const struct timeval now = { 0, 0 };

    if (!hc || !(hc->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE)) ||
        !(hc->timer = evtimer_new(base, http_timer, hc))) {
        if (hc && hc->bev)
            bufferevent_free(hc->bev);
        free(hc);
        log_error("metrics: out of memory; an HTTP connection is served without a deadline");
        return NULL;          /* libevent makes its own */
    }
    hc->m = m;
    bufferevent_incref(hc->bev);   /* ours, until attached; libevent's is the first */
    TAILQ_INSERT_TAIL(&m->conns, hc, link);
    if (++m->nconns >= HTTP_MAX_CONNECTIONS)
        accept_pause_hold(m->srv->accept_pause, m->listener, ACCEPT_HOLD_BUDGET, true);
    evtimer_add(hc->timer, &now);
    return hc->bev;
}

/* The connection of a request that was read whole, or NULL. */
static struct http_conn *http_conn_of(struct metrics *m, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct http_conn *hc;

    TAILQ_FOREACH(hc, &m->conns, link)
        if (hc->evcon && hc->evcon == evcon)
            return hc;
    return NULL;
}

/* ------------------------------------------------------------- HTTP */

/*
 * Sends body (NULL: none) with code. libevent 2.1 sends a HEAD reply's body
 * and leaves its Content-Length out, which desynchronises a client that
 * keeps the connection: the length is given here and the body kept back.
 */
static void send_reply(struct evhttp_request *req, int code, const char *reason,
                       struct evbuffer *body)
{
    char len[24];

    if (evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
        evhttp_send_reply(req, code, reason, body);
        return;
    }
    snprintf(len, sizeof(len), "%zu", body ? evbuffer_get_length(body) : (size_t)0);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Length", len);
    evhttp_send_reply(req, code, reason, NULL);
}

static void send_text(struct evhttp_request *req, int code, const char *reason,
                      const char *text)
{
    struct evbuffer *body = evbuffer_new();

    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; charset=utf-8");
    if (body)
        evbuffer_add(body, text, strlen(text));
    send_reply(req, code, reason, body);
    if (body)
        evbuffer_free(body);
}

static void serve_metrics(const struct metrics *m, struct evhttp_request *req)
{
    struct evbuffer *body = evbuffer_new();

    if (!body) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    metrics_write(m->srv, body);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    send_reply(req, HTTP_OK, "OK", body);
    evbuffer_free(body);
}

/* The live page and its JSON (live_page.c). The page's script and style
 * come from here only: the policy forbids anything else, inline code too. */
static void serve_page(struct metrics *m, struct evhttp_request *req, const char *path,
                       const char *query)
{
    struct evbuffer *body = evbuffer_new();
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    const char *type = "text/plain; charset=utf-8";
    int code;

    if (!body) {
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    code = live_page_write(m->page, path, query, body, &type);
    evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "Content-Security-Policy", "default-src 'self'");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Cache-Control", "no-store");
    send_reply(req, code, code == HTTP_OK ? "OK" : "Bad Request", body);
    evbuffer_free(body);
}

/*
 * Whether the request has Content-Length headers that disagree. libevent
 * reads the body by the first one; a proxy in front may have used another,
 * and the bytes between would be taken for a request of their own.
 */
static bool lengths_conflict(struct evhttp_request *req)
{
    const struct evkeyval *h;
    const char *first = NULL;

    TAILQ_FOREACH(h, evhttp_request_get_input_headers(req), next) {
        if (evutil_ascii_strcasecmp(h->key, "Content-Length") != 0)
            continue;
        if (first && strcmp(first, h->value) != 0)
            return true;
        first = h->value;
    }
    return false;
}

/*
 * The one verdict of /healthz and of lockbroker_healthy: true while
 * requests can be served; false during a ZooKeeper outage, or while a
 * setting must change (the daemons disagree on nonfair), with why in text
 * (len bytes; NULL: not wanted).
 */
static bool health_check(const struct server *srv, char *text, size_t len)
{
    const struct backend *be = srv->backend;
    int64_t down = be->ops->unreachable_since(be->impl);
    const char *why, *fault;
    long long secs;

    if (!down)
        return true;
    if (!text)
        return false;
    why = be->ops->why_unavailable ? be->ops->why_unavailable(be->impl) : NULL;
    fault = be->ops->config_error ? be->ops->config_error(be->impl) : NULL;
    secs = (long long)((locks_mono_ms() - down) / 1000);
    if (fault)
        snprintf(text, len, "not serving for %lld s: %s; requests that need "
                 "ZooKeeper answer ERR UNAVAILABLE with this reason\n", secs, fault);
    else
        snprintf(text, len, "ZooKeeper unreachable for %lld s (%s): nothing is "
                 "granted; TRYLOCK, and a LOCK wait that ends, answer ERR UNAVAILABLE\n", secs,
                 why ? why : "unreachable");
    return false;
}

/* 200 "ok", or 503 and why (health_check). */
static void serve_healthz(const struct metrics *m, struct evhttp_request *req)
{
    char text[2048];

    if (health_check(m->srv, text, sizeof(text)))
        send_text(req, HTTP_OK, "OK", "ok\n");
    else
        send_text(req, 503, "Service Unavailable", text);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct metrics *m = arg;
    struct http_conn *hc = http_conn_of(m, req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    bool metrics = path && strcmp(path, "/metrics") == 0;
    bool healthz = path && strcmp(path, "/healthz") == 0;
    bool page = path && live_page_serves(path);

    log_debug("metrics: %s %.200s", cmd == EVHTTP_REQ_GET ? "GET" : cmd == EVHTTP_REQ_HEAD
              ? "HEAD" : "(other method)", evhttp_request_get_uri(req));
    /* The next request's deadline (the reply must be read by then, too). */
    if (hc)
        http_deadline_from_now(hc);
    if (lengths_conflict(req)) {
        /* Nothing after it on this connection can be trusted. */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        send_text(req, HTTP_BADREQUEST, "Bad Request", "conflicting Content-Length headers\n");
        return;
    }
    if (!metrics && !healthz && !page) {
        send_text(req, HTTP_NOTFOUND, "Not Found",
                  "not found: try /metrics, /healthz or / (the live page)\n");
        return;
    }
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        send_text(req, HTTP_BADMETHOD, "Method Not Allowed", "only GET and HEAD\n");
        return;
    }
    if (page)
        serve_page(m, req, path, evhttp_uri_get_query(uri));
    else if (metrics)
        serve_metrics(m, req);
    else
        serve_healthz(m, req);
}

struct metrics *metrics_start(const struct server *srv, const char *addr, int fd)
{
    struct metrics *m = calloc(1, sizeof(*m));
    struct evconnlistener *l;
    struct evhttp_bound_socket *bound;
    struct sockaddr_storage ss;
    socklen_t sl;
    int len;
    char what[96];

    if (!m || !(m->http = evhttp_new(srv->base))) {
        log_error("metrics: out of memory");
        free(m);
        return NULL;
    }
    m->srv = srv;
    TAILQ_INIT(&m->conns);
    if (!(m->page = live_page_new(srv))) {
        log_error("metrics: out of memory");
        metrics_stop(m);
        return NULL;
    }
    if (settings_listen_addr(addr, &ss, &len) < 0) {
        log_error("metrics_listen: cannot parse '%s'", addr);
        metrics_stop(m);
        return NULL;
    }
    if ((fd = server_inherited_listener("metrics_listen", fd, &ss)) >= 0)
        l = evconnlistener_new(srv->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE |
                               LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    else
        l = evconnlistener_new_bind(srv->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE |
                                    LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE,
                                    LISTEN_BACKLOG, (struct sockaddr *)&ss, len);
    if (!l) {
        log_error("metrics_listen %s: %s", addr, strerror(errno));
        metrics_stop(m);
        return NULL;
    }
    if (!(bound = evhttp_bind_listener(m->http, l))) {
        log_error("metrics_listen %s: cannot serve HTTP on it", addr);
        evconnlistener_free(l);
        metrics_stop(m);
        return NULL;
    }
    sl = sizeof(ss);
    m->listener = l;
    m->fd = evconnlistener_get_fd(l);
    getsockname(m->fd, (struct sockaddr *)&ss, &sl);
    server_format_addr((struct sockaddr *)&ss, m->addr, sizeof(m->addr));
    snprintf(what, sizeof(what), "metrics_listen %s", m->addr);
    if (accept_pause_add(srv->accept_pause, l, what) < 0) {
        metrics_stop(m);
        return NULL;
    }
    /* Bound every request, as the lock port does its lines. */
    evhttp_set_max_headers_size(m->http, HTTP_MAX_HEADERS);
    evhttp_set_max_body_size(m->http, HTTP_MAX_BODY);
    evhttp_set_timeout(m->http, HTTP_TIMEOUT_S);
    evhttp_set_bevcb(m->http, http_new_bev, m);
    /* Every method reaches on_request, which answers 405 itself (libevent
     * would answer 501 to the ones not allowed). */
    evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                               EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                               EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(m->http, on_request, m);
    log_info("metrics: serving /metrics and /healthz on http://%s", m->addr);
    return m;
}

int metrics_fd(const struct metrics *m)
{
    return m ? m->fd : -1;
}

void metrics_stop(struct metrics *m)
{
    struct http_conn *hc;

    if (!m)
        return;
    m->stopping = true;
    if (m->listener)
        accept_pause_remove(m->srv->accept_pause, m->listener);
    if (m->http)
        evhttp_free(m->http);   /* closes its listener and connections (http_closed) */
    while ((hc = TAILQ_FIRST(&m->conns)))
        http_forget(hc);        /* not attached yet */
    live_page_free(m->page);
    free(m);
}
