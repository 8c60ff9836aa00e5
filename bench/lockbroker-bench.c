/*
 * lockbroker-bench.c - load generator for lockbrokerd.
 *
 * One process, one libevent loop, N TCP connections (bufferevents) to a
 * daemon. Each connection runs LOCK/UNLOCK cycles on the names its workload
 * picks; after the warm-up the tool measures for a fixed time and prints one
 * record: cycles per second, grant latency percentiles (LOCK sent -> OK
 * received, from a log-linear histogram), fairness, errors, and, given the
 * daemon's pid and the ZooKeeper hosts, the daemon's CPU time and the
 * ZooKeeper writes per cycle. With -m, every LOCK and TRYLOCK asks for a
 * lock mode (shared, or limit=N) instead of an exclusive lock.
 *
 * Replies on a connection come in request order, so each connection keeps a
 * ring of the requests it has outstanding and matches every reply line with
 * the oldest one. Requests produced while handling one batch of input are
 * staged and sent with one send(2) at the end; their "sent" time is taken
 * right before that send, which keeps send timestamps (and so the fairness
 * figure) in the order the daemon sees them.
 *
 * Two more modes measure the daemon rather than throughput:
 *   waiters  queue c waiters on one name behind a holder; report the daemon's
 *            CPU per grant (the holder passes the lock on) and per cancel (a
 *            random waiter disconnects and a new one queues), net of the cost
 *            of a bare connect/PING/close.
 *   idle     open c idle connections; report the daemon's RSS and anonymous
 *            memory growth per connection.
 *   handshake connect, PING, close, c connections at a time, to the plain
 *            port and then over TLS; report the daemon's CPU per TLS
 *            connection net of a plain one: the cost of a handshake.
 *
 * With --tls-ca every connection speaks TLS (bufferevent_openssl) and
 * checks the server's certificate against that CA and the name it
 * connected to. A connection is ready once its handshake and a PING are
 * done, so in the load workloads handshakes happen before the warm-up and
 * are never measured. Over TLS every byte goes through the bufferevent
 * (plain connections write to the socket directly when they can).
 */
#include "config.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/util.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench_util.h"

/* Connections being set up at once; more would overflow the listen backlog. */
#define CONNECT_WINDOW 128
/* Longest line we format: command, prefix and a name well under 200 bytes. */
#define LINE_MAX_BYTES 256
/* Pause before reading /proc so the daemon has handled everything we sent. */
#define SETTLE_MS 300
/* Connections not all ready by then (or, in handshake mode, a pause that
 * long with connections in flight): the run fails instead of hanging. */
#define SETUP_TIMEOUT_S 60
#define STR_(x) #x
#define STR(x) STR_(x)

enum workload { WL_DISTINCT, WL_COLD, WL_HOT, WL_ZIPF, WL_TRYLOCK, WL_WAITERS, WL_IDLE,
                WL_HANDSHAKE };
static const char *const workload_names[] = {
    "distinct", "cold", "hot", "zipf", "trylock", "waiters", "idle", "handshake",
};

enum req_kind { REQ_PING, REQ_LOCK, REQ_TRYLOCK, REQ_UNLOCK };

/* One request awaiting its reply. */
struct req {
    uint64_t t_sent;           /* 0 until the staged bytes went out */
    uint32_t slot;
    uint8_t kind;
};

/* One cycle in flight on a connection (a pipelining slot). */
struct slot {
    unsigned name;             /* index of the name this cycle works on; cold: the
                                  connection's cycle number, which makes the name */
    bool held;                 /* shared and limit modes: granted, UNLOCK not sent yet */
};

enum bc_state {
    BC_IDLE,        /* not connected yet */
    BC_CONNECTING,  /* connect sent, or PING sent and PONG not back */
    BC_READY,       /* PONG received; waiting for the workload to start */
    BC_RUNNING,     /* in the workload */
    BC_QUEUED,      /* waiters mode: its LOCK is queued (PONG came back) */
    BC_HOLDER,      /* waiters mode: holds the lock */
    BC_CLOSED,      /* gone (error, or closed on purpose) */
};

struct bench;

struct bconn {
    struct bench *b;
    struct bufferevent *bev;
    unsigned idx;
    enum bc_state state;
    struct req *ring;          /* outstanding requests, oldest at head */
    unsigned ring_cap, head, count;
    unsigned unsent;           /* newest `unsent` ring entries are staged, not sent */
    struct slot *slots;
    char *obuf;                /* staged request bytes */
    size_t olen, ocap;
    bool waiting;              /* fairness: a LOCK on the shared name is out */
    uint64_t wait_since;       /* fairness: when that LOCK went out */
    uint64_t bypassed;         /* fairness: later LOCKs granted before ours */
    unsigned cold_next;        /* cold: cycles begun, so the next name's number */
    bool tls;                  /* bev is a bufferevent_openssl (owns its SSL) */
    uint64_t t_connect;        /* handshake mode: when the connect began */
};

/* Per shared name: who holds it as far as the replies tell. */
struct name_state {
    int holder;                /* connection index + 1, 0 when free */
    unsigned depth;            /* re-entrant holds by holder */
    uint64_t last_token;       /* of the latest grant, by last_holder */
    int last_holder;
    unsigned holders;          /* shared and limit modes: connections holding it */
};

struct bench {
    /* options */
    enum workload wl;
    char *host;
    int port;
    unsigned nconns, pipeline, nnames;
    double zipf_s;
    double duration, warmup;
    pid_t pid, zk_pid;
    const char *zk_hosts;
    enum out_mode out;
    char prefix[64];
    char run_id[24];           /* cold: in every name, so no two runs share one */
    char mode[16];             /* "exclusive", "shared" or "limit=N", for the record */
    char mode_word[16];        /* appended to LOCK / TRYLOCK: "" (exclusive), " shared",
                                  " limit=N" */
    unsigned max_holders;      /* connections that may hold a name at once; 0: any */
    SSL_CTX *tls;              /* --tls-ca: connect over TLS with it; NULL: plain */
    const char *tls_name;      /* the name the server's certificate must carry */
    bool tls_name_is_ip;       /* ... as an IP address SAN */
    char tls_desc[96];         /* protocol and cipher of the first handshake */

    struct event_base *base;
    struct sockaddr_storage addr;
    int addrlen;
    const char *hostport;      /* -H */
    struct sockaddr_storage plain_addr;   /* handshake mode: --plain */
    int plain_addrlen;
    const char *plain_hostport;
    struct bconn *conns;
    struct zipf zipf;
    uint64_t rng;
    unsigned next_connect, connecting, ready;
    struct name_state *names;  /* shared-name workloads: nnames entries */
    struct event *timer;
    struct event *setup_timer; /* load and idle modes: armed until all are ready */
    const char *failure;       /* set when the run cannot go on */

    /* measurement */
    bool measuring;
    uint64_t t0, t1;
    uint64_t cpu_user0, cpu_sys0, cpu_user1, cpu_sys1;
    uint64_t zcpu_user0, zcpu_sys0, zcpu_user1, zcpu_sys1;
    bool have_cpu, have_zcpu, have_zxid, have_batches;
    uint64_t zxid0, zxid1;
    uint64_t batches0[2], batches1[2];   /* the daemon's zk_batches, zk_batched_ops */
    struct rusage ru0, ru1;
    struct histo lat;          /* LOCK / TRYLOCK sent -> OK */
    struct histo unlock_lat;   /* UNLOCK sent -> OK */
    uint64_t cycles, busy, errors, lost, violations, regressions, max_bypass;
    uint64_t errors_total;
    char first_error[128];

    /* waiters mode */
    enum { WP_SETUP, WP_GRANT, WP_GRANT_SETTLE, WP_CANCEL, WP_CANCEL_SETTLE,
           WP_CHURN, WP_CHURN_SETTLE, WP_DONE } phase;
    unsigned queued;           /* waiters whose LOCK is known to be queued */
    uint64_t phase_cpu0;       /* daemon CPU (us) at the phase's start */
    uint64_t ops;
    struct { uint64_t ops, cpu_us, ns; } grant, cancel, churn;
    struct bconn *spare;       /* churn mode: temporary connections */
    unsigned nspare;

    /* handshake mode: [0] plain connections, [1] TLS */
    enum { HS_WARMUP, HS_WARMUP_SETTLE, HS_PLAIN, HS_PLAIN_SETTLE, HS_TLS, HS_TLS_SETTLE,
           HS_DONE } hs_phase;
    bool hs_use_tls;           /* new connections of the phase speak TLS */
    int hs_counting;           /* 0 or 1: which kind's PONGs count now; -1: none */
    unsigned hs_waits;         /* pauses extended in a row */
    struct {
        uint64_t ops, cpu_us, ns, client_us;
        struct histo lat;      /* connect -> PONG (TLS: handshake included) */
    } hs[2];
};

static void bc_connect(struct bench *b, struct bconn *c);
static void on_read(struct bufferevent *bev, void *arg);
static void on_event(struct bufferevent *bev, short what, void *arg);
static void wl_start_conn(struct bconn *c);
static void waiters_on_pong(struct bconn *c);
static void waiters_on_reply(struct bconn *c, const struct req *r, const char *line, size_t ll);
static bool is_spare(const struct bench *b, const struct bconn *c);
static void idle_on_ready(struct bench *b);
static void hs_on_pong(struct bconn *c);

/* ------------------------------------------------------------ helpers */

static void fail(struct bench *b, const char *why)
{
    if (!b->failure)
        b->failure = why;
    event_base_loopbreak(b->base);
}

static void note_error(struct bench *b, const char *line, size_t len)
{
    b->errors_total++;
    if (b->measuring)
        b->errors++;
    if (!b->first_error[0])
        snprintf(b->first_error, sizeof(b->first_error), "%.*s", (int)(len > 100 ? 100 : len),
                 line);
}

static uint64_t cpu_total(uint64_t u, uint64_t s) { return u + s; }

static bool shared_names(const struct bench *b)
{
    return b->wl == WL_HOT || b->wl == WL_ZIPF || b->wl == WL_TRYLOCK;
}

static int name_fmt(const struct bench *b, const struct bconn *c, unsigned slot,
                    unsigned name, char *buf, size_t len)
{
    switch (b->wl) {
    case WL_DISTINCT:
        return snprintf(buf, len, "%sd%u_%u", b->prefix, c->idx, slot);
    case WL_COLD:
        /* The counter is per connection, so slots never collide. */
        return snprintf(buf, len, "%sc%s.%u.%u", b->prefix, b->run_id, c->idx, name);
    case WL_HOT:
        return snprintf(buf, len, "%shot", b->prefix);
    case WL_ZIPF:
        return snprintf(buf, len, "%sz%u", b->prefix, name);
    case WL_TRYLOCK:
        return snprintf(buf, len, "%st%u", b->prefix, name);
    default:
        return snprintf(buf, len, "%sw", b->prefix);
    }
}

/* ------------------------------------------------------------ sending */

static void bc_stage(struct bconn *c, enum req_kind kind, unsigned slot)
{
    static const char *const words[] = { "PING", "LOCK", "TRYLOCK", "UNLOCK" };
    char name[LINE_MAX_BYTES];
    struct req *r;
    int n;

    if (c->count == c->ring_cap) {
        /* Cannot happen: each slot has one request out, plus PING. */
        fail(c->b, "request ring overflow");
        return;
    }
    if (c->olen + LINE_MAX_BYTES > c->ocap) {
        size_t cap = c->ocap ? c->ocap * 2 : 1024;
        char *p = realloc(c->obuf, cap);
        if (!p) {
            fail(c->b, "out of memory");
            return;
        }
        c->obuf = p;
        c->ocap = cap;
    }
    if (kind == REQ_PING) {
        n = snprintf(c->obuf + c->olen, LINE_MAX_BYTES, "PING\n");
    } else {
        name_fmt(c->b, c, slot, c->slots[slot].name, name, sizeof(name));
        n = snprintf(c->obuf + c->olen, LINE_MAX_BYTES, "%s %s%s\n", words[kind], name,
                     kind == REQ_UNLOCK ? "" : c->b->mode_word);
    }
    c->olen += (size_t)n;
    r = &c->ring[(c->head + c->count) % c->ring_cap];
    r->t_sent = 0;
    r->slot = slot;
    r->kind = (uint8_t)kind;
    c->count++;
    c->unsent++;
}

/* Sends what was staged: straight to the socket when nothing is queued in
 * the bufferevent, the rest through it; over TLS all through it. */
static void bc_flush(struct bconn *c)
{
    struct bench *b = c->b;
    struct evbuffer *out;
    uint64_t now;
    size_t off = 0;

    if (!c->olen || c->state == BC_CLOSED)
        return;
    now = bench_now_ns();
    for (unsigned k = c->count - c->unsent; k < c->count; k++) {
        struct req *r = &c->ring[(c->head + k) % c->ring_cap];
        r->t_sent = now;
        if (b->wl == WL_HOT && r->kind == REQ_LOCK) {
            c->waiting = true;
            c->wait_since = now;
        }
    }
    c->unsent = 0;
    out = bufferevent_get_output(c->bev);
    if (!c->tls && evbuffer_get_length(out) == 0) {
        ssize_t n = send(bufferevent_getfd(c->bev), c->obuf, c->olen, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
            off = (size_t)n;
    }
    if (off < c->olen && bufferevent_write(c->bev, c->obuf + off, c->olen - off) < 0)
        fail(b, "cannot queue output");
    c->olen = 0;
}

/* ------------------------------------------------------------ workloads */

static unsigned pick_name(struct bench *b)
{
    switch (b->wl) {
    case WL_ZIPF:
        return zipf_next(&b->zipf, &b->rng);
    case WL_TRYLOCK:
        return b->nnames > 1 ? (unsigned)(rng_next(&b->rng) % b->nnames) : 0;
    default:
        return 0;
    }
}

static void slot_begin(struct bconn *c, unsigned slot)
{
    c->slots[slot].name = c->b->wl == WL_COLD ? c->cold_next++ : pick_name(c->b);
    bc_stage(c, c->b->wl == WL_TRYLOCK ? REQ_TRYLOCK : REQ_LOCK, slot);
}

static void wl_start_conn(struct bconn *c)
{
    c->state = BC_RUNNING;
    for (unsigned s = 0; s < c->b->pipeline; s++)
        slot_begin(c, s);
    bc_flush(c);
}

/* Fairness: every waiter whose LOCK went out before the granted one's was bypassed. */
static void fairness_on_grant(struct bench *b, struct bconn *g, uint64_t g_sent)
{
    if (b->measuring) {
        for (unsigned i = 0; i < b->nconns; i++) {
            struct bconn *w = &b->conns[i];
            if (w != g && w->waiting && w->wait_since < g_sent)
                w->bypassed++;
        }
        if (g->bypassed > b->max_bypass)
            b->max_bypass = g->bypassed;
    }
    g->waiting = false;
    g->bypassed = 0;
}

/* Mutual exclusion and token order, as far as one client can see them. A
 * connection that pipelines may be granted again (re-entrantly, same token)
 * before the daemon reads the UNLOCK we already sent. */
static void check_grant(struct bench *b, struct bconn *c, unsigned name, uint64_t token)
{
    struct name_state *ns = &b->names[name];
    int me = (int)c->idx + 1;

    if (ns->holder != 0 && ns->holder != me)
        b->violations++;
    if (ns->last_holder != 0 &&
        (token < ns->last_token || (token == ns->last_token && ns->last_holder != me)))
        b->regressions++;
    ns->last_token = token;
    ns->last_holder = me;
    if (ns->holder == me) {
        ns->depth++;
    } else {
        ns->holder = me;
        ns->depth = 1;
    }
}

static void check_unlock_sent(struct bench *b, struct bconn *c, unsigned name)
{
    struct name_state *ns = &b->names[name];

    if (ns->holder == (int)c->idx + 1 && --ns->depth == 0)
        ns->holder = 0;
}

/* How many of c's slots hold name: a pipelining connection may hold a name
 * through several slots (re-entrant grants), and counts as one holder. */
static unsigned slots_holding(const struct bconn *c, unsigned name)
{
    unsigned n = 0;

    for (unsigned s = 0; s < c->b->pipeline; s++)
        if (c->slots[s].held && c->slots[s].name == name)
            n++;
    return n;
}

/* Shared and limit modes: several connections hold a name together, at most
 * max_holders of them (any number when shared). Holds that share a name may get
 * equal tokens, in any order (proto/PROTOCOL.md, "Fencing tokens"), so
 * tokens are not checked here. */
static void check_grant_shared(struct bench *b, struct bconn *c, unsigned slot, unsigned name)
{
    struct name_state *ns = &b->names[name];

    if (slots_holding(c, name) == 0 && ++ns->holders > b->max_holders && b->max_holders)
        b->violations++;
    c->slots[slot].held = true;
}

static void check_unlock_sent_shared(struct bench *b, struct bconn *c, unsigned slot,
                                     unsigned name)
{
    c->slots[slot].held = false;
    if (slots_holding(c, name) == 0)
        b->names[name].holders--;
}

static uint64_t parse_token(const char *line, size_t len)
{
    const char *sp = memrchr(line, ' ', len);
    uint64_t v = 0;

    if (!sp)
        return 0;
    for (const char *p = sp + 1; p < line + len && *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    return v;
}

static bool starts(const char *line, size_t len, const char *word)
{
    size_t n = strlen(word);

    return len >= n && memcmp(line, word, n) == 0 && (len == n || line[n] == ' ');
}

/* A reply to one of the load workloads' requests. */
static void wl_reply(struct bconn *c, const struct req *r, const char *line, size_t len,
                     uint64_t now)
{
    struct bench *b = c->b;
    unsigned slot = r->slot, name = c->slots[slot].name;

    switch (r->kind) {
    case REQ_LOCK:
    case REQ_TRYLOCK:
        if (starts(line, len, "OK")) {
            if (b->measuring)
                histo_record(&b->lat, now - r->t_sent);
            if (b->wl == WL_HOT)
                fairness_on_grant(b, c, r->t_sent);
            if (shared_names(b) && !b->mode_word[0]) {
                check_grant(b, c, name, parse_token(line, len));
                check_unlock_sent(b, c, name);   /* the UNLOCK goes out in this batch */
            } else if (shared_names(b)) {
                check_grant_shared(b, c, slot, name);
                check_unlock_sent_shared(b, c, slot, name);
            }
            bc_stage(c, REQ_UNLOCK, slot);
        } else if (r->kind == REQ_TRYLOCK && starts(line, len, "BUSY")) {
            if (b->measuring)
                b->busy++;
            slot_begin(c, slot);
        } else {
            note_error(b, line, len);
            if (b->wl == WL_HOT)
                c->waiting = false;
            slot_begin(c, slot);
        }
        break;
    case REQ_UNLOCK:
        if (starts(line, len, "OK")) {
            if (b->measuring) {
                b->cycles++;
                histo_record(&b->unlock_lat, now - r->t_sent);
            }
        } else {
            note_error(b, line, len);
        }
        slot_begin(c, slot);
        break;
    default:
        note_error(b, line, len);
        break;
    }
}

/* ------------------------------------------------------------ measurement */

/* Distributed mode: the daemon's multis and the writes they carried. */
static const char *const batch_stats[2] = { "zk_batches", "zk_batched_ops" };

static void snap_begin(struct bench *b)
{
    b->have_cpu = b->pid > 0 && proc_cpu_us(b->pid, &b->cpu_user0, &b->cpu_sys0) == 0;
    b->have_zcpu = b->zk_pid > 0 && proc_cpu_us(b->zk_pid, &b->zcpu_user0, &b->zcpu_sys0) == 0;
    b->have_zxid = b->zk_hosts && zk_srvr_zxid(b->zk_hosts, &b->zxid0) == 0;
    /* STATS is asked in plain text: not on a TLS port. */
    b->have_batches = b->zk_hosts && !b->tls &&
                      lb_stats(b->host, b->port, batch_stats, b->batches0, 2) == 0;
    getrusage(RUSAGE_SELF, &b->ru0);
    b->t0 = bench_now_ns();
}

static void snap_end(struct bench *b)
{
    b->t1 = bench_now_ns();
    getrusage(RUSAGE_SELF, &b->ru1);
    if (b->have_cpu && proc_cpu_us(b->pid, &b->cpu_user1, &b->cpu_sys1) < 0)
        b->have_cpu = false;
    if (b->have_zcpu && proc_cpu_us(b->zk_pid, &b->zcpu_user1, &b->zcpu_sys1) < 0)
        b->have_zcpu = false;
    if (b->have_zxid && zk_srvr_zxid(b->zk_hosts, &b->zxid1) < 0)
        b->have_zxid = false;
    if (b->have_batches && lb_stats(b->host, b->port, batch_stats, b->batches1, 2) < 0)
        b->have_batches = false;
}

static double tv_us(const struct timeval *tv) { return tv->tv_sec * 1e6 + tv->tv_usec; }

static void on_measure_end(evutil_socket_t fd, short what, void *arg)
{
    struct bench *b = arg;

    snap_end(b);
    b->measuring = false;
    /* Waiters still queued at the end were bypassed too. */
    for (unsigned i = 0; i < b->nconns; i++)
        if (b->conns[i].waiting && b->conns[i].bypassed > b->max_bypass)
            b->max_bypass = b->conns[i].bypassed;
    event_base_loopbreak(b->base);
}

static void on_warmup_end(evutil_socket_t fd, short what, void *arg)
{
    struct bench *b = arg;
    struct timeval tv = { (time_t)b->duration,
                          (suseconds_t)((b->duration - (time_t)b->duration) * 1e6) };

    histo_reset(&b->lat);
    histo_reset(&b->unlock_lat);
    b->cycles = b->busy = b->errors = b->lost = b->violations = b->regressions = 0;
    b->max_bypass = 0;
    for (unsigned i = 0; i < b->nconns; i++)
        b->conns[i].bypassed = 0;
    snap_begin(b);
    b->measuring = true;
    evtimer_assign(b->timer, b->base, on_measure_end, b);
    evtimer_add(b->timer, &tv);
}

static void load_on_ready(struct bench *b)
{
    struct timeval tv = { (time_t)b->warmup, (suseconds_t)((b->warmup - (time_t)b->warmup) * 1e6) };

    for (unsigned i = 0; i < b->nconns; i++)
        wl_start_conn(&b->conns[i]);
    evtimer_assign(b->timer, b->base, on_warmup_end, b);
    evtimer_add(b->timer, &tv);
}

static void report_load(struct bench *b)
{
    double secs = (double)(b->t1 - b->t0) / 1e9;
    double cyc = (double)b->cycles;
    double client_us = tv_us(&b->ru1.ru_utime) - tv_us(&b->ru0.ru_utime) +
                       tv_us(&b->ru1.ru_stime) - tv_us(&b->ru0.ru_stime);
    char target[300];
    uint64_t cold_names = 0;

    snprintf(target, sizeof(target), "%s:%d", b->host, b->port);
    for (unsigned i = 0; i < b->nconns; i++)
        cold_names += b->conns[i].cold_next;
    out_begin(b->out);
    out_str("tool", "lockbroker-bench");
    out_str("workload", workload_names[b->wl]);
    out_str("target", target);
    out_str("mode", b->mode);
    if (b->tls)
        out_str("tls", b->tls_desc);
    out_u64("conns", b->nconns);
    out_u64("pipeline", b->pipeline);
    /* cold: every name the run used, warm-up included */
    out_u64("names", b->wl == WL_DISTINCT ? (uint64_t)b->nconns * b->pipeline
                     : b->wl == WL_COLD ? cold_names
                     : b->wl == WL_HOT ? 1 : b->nnames);
    out_dbl("seconds", secs, 2);
    out_u64("cycles", b->cycles);
    out_dbl("cycles_per_s", cyc / secs, 0);
    out_histo("grant", &b->lat);
    out_histo("unlock", &b->unlock_lat);
    if (b->wl == WL_TRYLOCK)
        out_u64("busy", b->busy);
    if (b->wl == WL_HOT)
        out_u64("max_bypass", b->max_bypass);
    if (shared_names(b)) {
        out_u64("mutex_violations", b->violations);
        if (!b->mode_word[0])
            out_u64("token_regressions", b->regressions);
    }
    out_u64("errors", b->errors);
    out_u64("lost", b->lost);
    if (b->have_cpu) {
        uint64_t d = cpu_total(b->cpu_user1, b->cpu_sys1) - cpu_total(b->cpu_user0, b->cpu_sys0);
        out_dbl("daemon_cpu_us_per_cycle", cyc > 0 ? (double)d / cyc : 0, 2);
        out_dbl("daemon_cpu_pct", (double)d / (secs * 1e4), 1);
        out_dbl("daemon_user_pct", (double)(b->cpu_user1 - b->cpu_user0) / (secs * 1e4), 1);
    }
    if (b->have_zxid) {
        uint64_t w = b->zxid1 - b->zxid0;
        out_u64("zk_writes", w);
        out_dbl("zk_writes_per_cycle", cyc > 0 ? (double)w / cyc : 0, 2);
    }
    if (b->have_batches) {
        uint64_t n = b->batches1[0] - b->batches0[0], ops = b->batches1[1] - b->batches0[1];
        out_u64("zk_batches", n);
        out_dbl("zk_batch_ops_mean", n > 0 ? (double)ops / (double)n : 0, 2);
    }
    if (b->have_zcpu) {
        uint64_t d = cpu_total(b->zcpu_user1, b->zcpu_sys1) - cpu_total(b->zcpu_user0, b->zcpu_sys0);
        out_dbl("zk_cpu_us_per_cycle", cyc > 0 ? (double)d / cyc : 0, 2);
        out_dbl("zk_cpu_pct", (double)d / (secs * 1e4), 1);
    }
    out_dbl("client_cpu_pct", client_us / (secs * 1e4), 1);
    out_dbl("client_cpu_us_per_cycle", cyc > 0 ? client_us / cyc : 0, 2);
    if (b->first_error[0])
        out_str("first_error", b->first_error);
    out_end();
}

/* ------------------------------------------------------------ TLS */

/* Prints OpenSSL's reason for what failed on path. */
static void tls_perror(const char *what, const char *path)
{
    char reason[256] = "unknown error";
    unsigned long e = ERR_get_error();

    if (e)
        ERR_error_string_n(e, reason, sizeof(reason));
    ERR_clear_error();
    fprintf(stderr, "lockbroker-bench: %s %s: %s\n", what, path, reason);
}

/*
 * The client context: TLS 1.2 or 1.3, the server's certificate verified
 * against ca, and our own certificate when given. Sessions are not kept,
 * so every connection makes a full handshake. NULL after a message.
 */
static SSL_CTX *tls_ctx_new(const char *ca, const char *cert, const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (!ctx) {
        tls_perror("TLS context", "");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
        tls_perror("--tls-ca", ca);
    else if (cert && SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        tls_perror("--tls-cert", cert);
    else if (key && (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
                     SSL_CTX_check_private_key(ctx) != 1))
        tls_perror("--tls-key", key);
    else
        return ctx;
    SSL_CTX_free(ctx);
    return NULL;
}

static bool name_is_ip(const char *name)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

/* ------------------------------------------------------------ connections */

static int bc_alloc(struct bench *b, struct bconn *c, unsigned idx)
{
    unsigned slots = b->pipeline ? b->pipeline : 1;

    memset(c, 0, sizeof(*c));
    c->b = b;
    c->idx = idx;
    c->ring_cap = slots + 2;
    c->ring = calloc(c->ring_cap, sizeof(*c->ring));
    c->slots = calloc(slots, sizeof(*c->slots));
    return c->ring && c->slots ? 0 : -1;
}

/* Closes a connection; with rst, by a reset (no TIME_WAIT on our side). */
static void bc_close(struct bconn *c, bool rst)
{
    if (c->bev) {
        if (rst) {
            struct linger lg = { 1, 0 };
            setsockopt(bufferevent_getfd(c->bev), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    c->state = BC_CLOSED;
    c->tls = false;
    c->head = c->count = c->unsent = 0;
    c->olen = 0;
    c->waiting = false;
}

static void connect_more(struct bench *b)
{
    while (b->connecting < CONNECT_WINDOW && b->next_connect < b->nconns)
        bc_connect(b, &b->conns[b->next_connect++]);
}

/* A client-side SSL for one connection, checking the server's name; NULL on failure. */
static SSL *tls_ssl_new(struct bench *b)
{
    SSL *ssl = SSL_new(b->tls);
    int ok;

    if (!ssl)
        return NULL;
    if (b->tls_name_is_ip)
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), b->tls_name);
    else
        ok = SSL_set_tlsext_host_name(ssl, b->tls_name) == 1 &&
             SSL_set1_host(ssl, b->tls_name) == 1;
    if (!ok) {
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

/* Connects c: over TLS when there is a context (in handshake mode, when the
 * phase says so), else in plain text; to --plain in a plain handshake phase. */
static void bc_connect(struct bench *b, struct bconn *c)
{
    bool tls = b->tls && (b->wl != WL_HANDSHAKE || b->hs_use_tls);
    bool to_plain = b->wl == WL_HANDSHAKE && !tls;
    const struct sockaddr *sa = (const struct sockaddr *)(to_plain ? &b->plain_addr : &b->addr);
    int salen = to_plain ? b->plain_addrlen : b->addrlen;

    if (tls) {
        SSL *ssl = tls_ssl_new(b);
        if (!ssl) {
            fail(b, "cannot create an SSL");
            return;
        }
        /* On failure the SSL is not freed: libevent may have taken it, and
         * the run ends here anyway. */
        c->bev = bufferevent_openssl_socket_new(b->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                BEV_OPT_CLOSE_ON_FREE);
    } else {
        c->bev = bufferevent_socket_new(b->base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!c->bev) {
        fail(b, "cannot create a bufferevent");
        return;
    }
    c->tls = tls;
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    c->state = BC_CONNECTING;
    c->head = c->count = c->unsent = 0;
    c->t_connect = bench_now_ns();
    b->connecting++;
    if (bufferevent_socket_connect(c->bev, sa, salen) < 0) {
        fail(b, "connect failed");
        return;
    }
    bufferevent_enable(c->bev, EV_READ);
}

/* The first PONG: the daemon has accepted this connection. */
static void bc_on_pong(struct bconn *c)
{
    struct bench *b = c->b;

    if (c->state != BC_CONNECTING)
        return;
    if (b->wl == WL_HANDSHAKE) {
        hs_on_pong(c);
        return;
    }
    c->state = BC_READY;
    b->connecting--;
    b->ready++;
    if (b->wl == WL_WAITERS) {
        waiters_on_pong(c);
        return;
    }
    connect_more(b);
    if (b->ready == b->nconns) {
        evtimer_del(b->setup_timer);
        if (b->wl == WL_IDLE)
            idle_on_ready(b);
        else
            load_on_ready(b);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct bconn *c = arg;
    struct bench *b = c->b;

    if (what & BEV_EVENT_CONNECTED) {
        int one = 1;
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        /* TLS: the handshake is done (the event comes after it). */
        if (c->tls && !b->tls_desc[0]) {
            SSL *ssl = bufferevent_openssl_get_ssl(bev);
            snprintf(b->tls_desc, sizeof(b->tls_desc), "%s %s", SSL_get_version(ssl),
                     SSL_get_cipher_name(ssl));
        }
        bc_stage(c, REQ_PING, 0);
        if (b->wl == WL_WAITERS && c->idx != 0 && !is_spare(b, c))
            bc_stage(c, REQ_LOCK, 0);     /* queued by the time PONG is back */
        bc_flush(c);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        bool was_connecting = (c->state == BC_CONNECTING);
        /* handshake mode: plain connections go to --plain */
        const char *target = b->wl == WL_HANDSHAKE && !c->tls ? b->plain_hostport : b->hostport;
        unsigned long ssl_err = c->tls ? bufferevent_get_openssl_error(bev) : 0;
        char why[160], reason[120];

        if (ssl_err) {
            /* libevent reports an I/O failure inside OpenSSL as SSL_get_error()'s
             * code, which is no OpenSSL error (its library number is 0). */
            if (ERR_GET_LIB(ssl_err) == 0)
                snprintf(reason, sizeof(reason), "closed or reset (SSL_get_error %lu)", ssl_err);
            else
                ERR_error_string_n(ssl_err, reason, sizeof(reason));
            snprintf(why, sizeof(why), "TLS connection to %s failed: %s", target, reason);
            while (bufferevent_get_openssl_error(bev))
                ;
        } else if (what & BEV_EVENT_ERROR) {
            snprintf(why, sizeof(why), "connection to %s failed: %s", target,
                     evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        } else {
            snprintf(why, sizeof(why), "connection closed by the daemon");
        }
        note_error(b, why, strlen(why));
        bc_close(c, false);
        if (was_connecting && b->phase == WP_SETUP)
            fail(b, "a connection failed during set-up (daemon down, or its max_clients too low?)");
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct bconn *c = arg;
    struct bench *b = c->b;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len = evbuffer_get_length(in), used = 0;
    const char *buf = (const char *)evbuffer_pullup(in, -1);
    uint64_t now = bench_now_ns();

    while (used < len && c->state != BC_CLOSED) {
        const char *line = buf + used, *nl = memchr(line, '\n', len - used);
        size_t ll;
        struct req r;

        if (!nl)
            break;
        ll = (size_t)(nl - line);
        used += ll + 1;
        if (starts(line, ll, "LOST")) {
            if (b->measuring)
                b->lost++;
            continue;
        }
        if (c->count == 0 || c->unsent == c->count) {
            note_error(b, line, ll);
            continue;
        }
        r = c->ring[c->head];
        c->head = (c->head + 1) % c->ring_cap;
        c->count--;
        if (r.kind == REQ_PING) {
            if (ll == 4 && memcmp(line, "PONG", 4) == 0)
                bc_on_pong(c);
            else
                note_error(b, line, ll);
        } else if (b->wl == WL_WAITERS) {
            waiters_on_reply(c, &r, line, ll);
        } else {
            wl_reply(c, &r, line, ll, now);
        }
    }
    if (c->state != BC_CLOSED) {
        evbuffer_drain(in, used);
        bc_flush(c);
    }
}

/* ------------------------------------------------------------ waiters mode */

/*
 * Connection 0 takes the lock; then connections 1..c connect and queue
 * behind it, each sending "PING\nLOCK name\n" at once (both lines arrive
 * together, so its PONG proves the LOCK is queued). Then three phases of
 * `duration` seconds each, every one followed by a pause:
 *   grant   the holder sends "UNLOCK\nLOCK" (requeues at the tail); the head
 *           waiter is granted and does the same: one grant per step, the
 *           queue stays c long.
 *   cancel  the holder keeps the lock; a random queued connection is reset
 *           and a fresh one queues in its place: one cancel + one enqueue
 *           + one connect/close per step.
 *   churn   connect / PING / reset without any lock: the baseline to
 *           subtract from cancel.
 * The daemon's CPU time per step comes from /proc before the phase and
 * after the pause, so work still in flight at the phase's end is counted
 * with the steps it belongs to.
 */
#define WAITERS_INFLIGHT 8

static void waiters_phase(evutil_socket_t fd, short what, void *arg);

static bool is_spare(const struct bench *b, const struct bconn *c)
{
    return c->idx >= b->nconns;
}

static void waiters_timer(struct bench *b, double secs)
{
    struct timeval tv = { (time_t)secs, (suseconds_t)((secs - (time_t)secs) * 1e6) };

    evtimer_assign(b->timer, b->base, waiters_phase, b);
    evtimer_add(b->timer, &tv);
}

static uint64_t waiters_cpu(struct bench *b)
{
    uint64_t u = 0, s = 0;

    if (proc_cpu_us(b->pid, &u, &s) < 0)
        fail(b, "cannot read the daemon's /proc/PID/stat");
    return u + s;
}

static struct bconn *waiters_holder(struct bench *b)
{
    for (unsigned i = 0; i < b->nconns; i++)
        if (b->conns[i].state == BC_HOLDER)
            return &b->conns[i];
    return NULL;
}

/* Starts one cancel (or churn) step. */
static void waiters_next_op(struct bench *b)
{
    struct bconn *c = NULL;

    if (b->phase == WP_CANCEL) {
        /* A random queued waiter leaves; a fresh connection takes its place. */
        for (unsigned tries = 0; tries < 1000; tries++) {
            struct bconn *x = &b->conns[1 + rng_next(&b->rng) % (b->nconns - 1)];
            if (x->state == BC_QUEUED) {
                c = x;
                break;
            }
        }
        if (!c)
            return;
        bc_close(c, true);
        b->queued--;
    } else if (b->phase == WP_CHURN) {
        for (unsigned i = 0; i < b->nspare && !c; i++)
            if (b->spare[i].state == BC_IDLE || b->spare[i].state == BC_CLOSED)
                c = &b->spare[i];
        if (!c)
            return;
    } else {
        return;
    }
    bc_connect(b, c);
}

/* Starts a measured phase: CPU now, and the timer for its end. */
static void waiters_begin(struct bench *b, unsigned phase)
{
    b->phase = phase;
    b->ops = 0;
    b->t0 = bench_now_ns();
    b->phase_cpu0 = waiters_cpu(b);
    waiters_timer(b, b->duration);
}

/* Ends a phase: no new steps; the pause lets the daemon finish. */
static void waiters_settle(struct bench *b, uint64_t *ns)
{
    *ns = bench_now_ns() - b->t0;
    b->phase++;
    waiters_timer(b, SETTLE_MS / 1000.0);
}

static void waiters_phase(evutil_socket_t fd, short what, void *arg)
{
    struct bench *b = arg;
    struct bconn *h;

    switch (b->phase) {
    case WP_SETUP:
        /* Everyone queued and settled: start passing the lock along. */
        if (!(h = waiters_holder(b))) {
            fail(b, "no holder after set-up");
            return;
        }
        waiters_begin(b, WP_GRANT);
        h->state = BC_QUEUED;
        bc_stage(h, REQ_UNLOCK, 0);
        bc_stage(h, REQ_LOCK, 0);
        bc_flush(h);
        break;
    case WP_GRANT:
        waiters_settle(b, &b->grant.ns);
        break;
    case WP_GRANT_SETTLE:
        b->grant.ops = b->ops;
        b->grant.cpu_us = waiters_cpu(b) - b->phase_cpu0;
        if (!waiters_holder(b)) {
            fail(b, "no holder after the grant phase");
            return;
        }
        waiters_begin(b, WP_CANCEL);
        for (unsigned k = 0; k < WAITERS_INFLIGHT; k++)
            waiters_next_op(b);
        break;
    case WP_CANCEL:
        waiters_settle(b, &b->cancel.ns);
        break;
    case WP_CANCEL_SETTLE:
        b->cancel.ops = b->ops;
        b->cancel.cpu_us = waiters_cpu(b) - b->phase_cpu0;
        waiters_begin(b, WP_CHURN);
        for (unsigned k = 0; k < WAITERS_INFLIGHT; k++)
            waiters_next_op(b);
        break;
    case WP_CHURN:
        waiters_settle(b, &b->churn.ns);
        break;
    case WP_CHURN_SETTLE:
        b->churn.ops = b->ops;
        b->churn.cpu_us = waiters_cpu(b) - b->phase_cpu0;
        b->phase = WP_DONE;
        event_base_loopbreak(b->base);
        break;
    default:
        break;
    }
}

/* A PONG in waiters mode. */
static void waiters_on_pong(struct bconn *c)
{
    struct bench *b = c->b;

    if (is_spare(b, c)) {
        /* A churn step is complete. */
        bc_close(c, true);
        b->ops++;
        waiters_next_op(b);
        return;
    }
    if (c->idx == 0 && b->phase == WP_SETUP) {
        bc_stage(c, REQ_LOCK, 0);     /* granted at once: nobody else is connected */
        bc_flush(c);
        return;
    }
    /* A waiter connected, and its LOCK is queued. */
    c->state = BC_QUEUED;
    b->queued++;
    if (b->phase == WP_SETUP) {
        connect_more(b);
        if (b->queued == b->nconns - 1)
            waiters_timer(b, SETTLE_MS / 1000.0);
    } else {
        b->ops++;
        waiters_next_op(b);
    }
}

/* A reply other than PONG in waiters mode: grants, and the UNLOCKs' OKs. */
static void waiters_on_reply(struct bconn *c, const struct req *r, const char *line, size_t ll)
{
    struct bench *b = c->b;

    if (r->kind == REQ_UNLOCK && starts(line, ll, "OK"))
        return;
    if (r->kind != REQ_LOCK || !starts(line, ll, "OK")) {
        note_error(b, line, ll);
        return;
    }
    switch (b->phase) {
    case WP_SETUP:
        c->state = BC_HOLDER;
        b->next_connect = 1;
        connect_more(b);
        break;
    case WP_GRANT:
        b->ops++;
        bc_stage(c, REQ_UNLOCK, 0);
        bc_stage(c, REQ_LOCK, 0);
        break;
    case WP_GRANT_SETTLE:
        b->ops++;
        c->state = BC_HOLDER;         /* keeps it from now on */
        break;
    default:
        note_error(b, line, ll);
        break;
    }
}

static int run_waiters(struct bench *b)
{
    b->nspare = WAITERS_INFLIGHT;
    if (!(b->spare = calloc(b->nspare, sizeof(*b->spare))))
        return -1;
    for (unsigned i = 0; i < b->nspare; i++)
        if (bc_alloc(b, &b->spare[i], b->nconns + i) < 0)
            return -1;
    b->phase = WP_SETUP;
    b->next_connect = 1;              /* the holder alone first */
    bc_connect(b, &b->conns[0]);
    event_base_dispatch(b->base);
    return b->failure ? -1 : 0;
}

static void report_waiters(struct bench *b)
{
    double g = b->grant.ops ? (double)b->grant.cpu_us / (double)b->grant.ops : 0;
    double ca = b->cancel.ops ? (double)b->cancel.cpu_us / (double)b->cancel.ops : 0;
    double ch = b->churn.ops ? (double)b->churn.cpu_us / (double)b->churn.ops : 0;

    out_begin(b->out);
    out_str("tool", "lockbroker-bench");
    out_str("workload", "waiters");
    out_u64("waiters", b->nconns - 1);
    out_u64("grants", b->grant.ops);
    out_dbl("grants_per_s", (double)b->grant.ops / ((double)b->grant.ns / 1e9), 0);
    out_dbl("daemon_cpu_us_per_grant", g, 2);
    out_u64("cancels", b->cancel.ops);
    out_dbl("daemon_cpu_us_per_cancel", ca, 2);
    out_u64("churns", b->churn.ops);
    out_dbl("daemon_cpu_us_per_connect_close", ch, 2);
    out_dbl("daemon_cpu_us_per_cancel_net", ca - ch, 2);
    out_u64("errors", b->errors_total);
    if (b->first_error[0])
        out_str("first_error", b->first_error);
    out_end();
}

/* ------------------------------------------------------------ handshake mode */

/*
 * -c connections at a time each connect, send PING and, once PONG is back,
 * close (over TLS, with close_notify first), and connect again. First over
 * TLS, unmeasured, for the warm-up; then `duration` seconds to the plain
 * address (--plain, the same daemon's plain listener) and `duration`
 * seconds over TLS, each phase followed by a pause in which no connection
 * begins, SETTLE_MS and longer while one is in flight. The daemon's CPU per
 * connection of each kind comes from /proc before the phase and after its
 * pause; the difference between the two is what a TLS connection costs
 * beyond a plain one: the full handshake (the client keeps no session, so
 * none is resumed) and the record layer on PING, PONG and close_notify.
 * Connections end with a reset, as in waiters mode, or tens of thousands
 * would sit in TIME_WAIT.
 */
static void hs_phase(evutil_socket_t fd, short what, void *arg);

static void hs_timer(struct bench *b, double secs)
{
    struct timeval tv = { (time_t)secs, (suseconds_t)((secs - (time_t)secs) * 1e6) };

    evtimer_assign(b->timer, b->base, hs_phase, b);
    evtimer_add(b->timer, &tv);
}

static uint64_t client_cpu_us(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(tv_us(&ru.ru_utime) + tv_us(&ru.ru_stime));
}

/* Every connection not in flight connects (with the phase's kind). */
static void hs_connect_all(struct bench *b)
{
    for (unsigned i = 0; i < b->nconns && !b->failure; i++)
        if (b->conns[i].state == BC_IDLE || b->conns[i].state == BC_CLOSED)
            bc_connect(b, &b->conns[i]);
}

static void hs_begin(struct bench *b, int kind)
{
    b->hs_phase = kind ? HS_TLS : HS_PLAIN;
    b->hs_use_tls = kind;
    b->hs_counting = kind;
    b->t0 = bench_now_ns();
    b->phase_cpu0 = waiters_cpu(b);
    b->hs[kind].client_us = client_cpu_us();
    hs_connect_all(b);
    hs_timer(b, b->duration);
}

/* A phase's pause is over: everything it began has been answered. */
static void hs_end(struct bench *b, int kind)
{
    b->hs[kind].cpu_us = waiters_cpu(b) - b->phase_cpu0;
    b->hs[kind].client_us = client_cpu_us() - b->hs[kind].client_us;
    b->hs_counting = -1;
}

static void hs_phase(evutil_socket_t fd, short what, void *arg)
{
    struct bench *b = arg;

    /* A pause ends once no connection is in flight (a loaded machine can
     * take longer than SETTLE_MS over a handshake). */
    if ((b->hs_phase == HS_WARMUP_SETTLE || b->hs_phase == HS_PLAIN_SETTLE ||
         b->hs_phase == HS_TLS_SETTLE) && b->connecting > 0) {
        if (++b->hs_waits * SETTLE_MS > SETUP_TIMEOUT_S * 1000) {
            fail(b, "connections still in flight " STR(SETUP_TIMEOUT_S) " s after a phase");
            return;
        }
        hs_timer(b, SETTLE_MS / 1000.0);
        return;
    }
    b->hs_waits = 0;
    switch (b->hs_phase) {
    case HS_WARMUP:
    case HS_PLAIN:
    case HS_TLS:
        if (b->hs_phase != HS_WARMUP)
            b->hs[b->hs_phase == HS_TLS].ns = bench_now_ns() - b->t0;
        b->hs_phase++;
        hs_timer(b, SETTLE_MS / 1000.0);
        break;
    case HS_WARMUP_SETTLE:
        hs_begin(b, 0);
        break;
    case HS_PLAIN_SETTLE:
        hs_end(b, 0);
        hs_begin(b, 1);
        break;
    case HS_TLS_SETTLE:
        hs_end(b, 1);
        b->hs_phase = HS_DONE;
        event_base_loopbreak(b->base);
        break;
    default:
        break;
    }
}

/* PONG: one connection done; close it, and begin the next one unless pausing. */
static void hs_on_pong(struct bconn *c)
{
    struct bench *b = c->b;
    int kind = c->tls;

    b->connecting--;
    if (b->hs_counting == kind) {
        b->hs[kind].ops++;
        histo_record(&b->hs[kind].lat, bench_now_ns() - c->t_connect);
    }
    if (c->tls) {
        SSL_shutdown(bufferevent_openssl_get_ssl(c->bev));   /* close_notify, as clients do */
        ERR_clear_error();
    }
    bc_close(c, true);
    if (b->hs_phase == HS_WARMUP || b->hs_phase == HS_PLAIN || b->hs_phase == HS_TLS)
        bc_connect(b, c);
}

static int run_handshake(struct bench *b)
{
    b->hs_phase = HS_WARMUP;
    b->hs_use_tls = true;
    b->hs_counting = -1;
    histo_reset(&b->hs[0].lat);
    histo_reset(&b->hs[1].lat);
    hs_connect_all(b);
    hs_timer(b, b->warmup);
    event_base_dispatch(b->base);
    return b->failure ? -1 : 0;
}

static void report_handshake(struct bench *b)
{
    static const char *const kinds[2] = { "plain", "tls" };
    double per[2];
    char key[64], target[300];

    snprintf(target, sizeof(target), "%s:%d", b->host, b->port);
    out_begin(b->out);
    out_str("tool", "lockbroker-bench");
    out_str("workload", "handshake");
    out_str("target", target);
    out_str("plain_target", b->plain_hostport);
    out_str("tls", b->tls_desc);
    out_u64("conns", b->nconns);
    for (int k = 0; k < 2; k++) {
        double n = (double)b->hs[k].ops;

        per[k] = n > 0 ? (double)b->hs[k].cpu_us / n : 0;
        snprintf(key, sizeof(key), "%s_connects", kinds[k]);
        out_u64(key, b->hs[k].ops);
        snprintf(key, sizeof(key), "%s_connects_per_s", kinds[k]);
        out_dbl(key, b->hs[k].ns ? n / ((double)b->hs[k].ns / 1e9) : 0, 0);
        snprintf(key, sizeof(key), "daemon_cpu_us_per_%s_connect", kinds[k]);
        out_dbl(key, per[k], 2);
        snprintf(key, sizeof(key), "client_cpu_us_per_%s_connect", kinds[k]);
        out_dbl(key, n > 0 ? (double)b->hs[k].client_us / n : 0, 2);
        snprintf(key, sizeof(key), "%s_connect", kinds[k]);
        out_histo(key, &b->hs[k].lat);
    }
    out_dbl("daemon_cpu_us_per_handshake", per[1] - per[0], 2);
    out_u64("errors", b->errors_total);
    if (b->first_error[0])
        out_str("first_error", b->first_error);
    out_end();
}

/* ------------------------------------------------------------ idle mode */

struct mem { uint64_t rss, anon, data; };

static int mem_read(pid_t pid, struct mem *m)
{
    return proc_status_bytes(pid, "VmRSS", &m->rss) < 0 ||
           proc_status_bytes(pid, "RssAnon", &m->anon) < 0 ||
           proc_status_bytes(pid, "VmData", &m->data) < 0 ? -1 : 0;
}

static struct mem idle_before, idle_open, idle_after;

static void idle_on_closed(evutil_socket_t fd, short what, void *arg)
{
    struct bench *b = arg;

    mem_read(b->pid, &idle_after);
    event_base_loopbreak(b->base);
}

static void idle_on_settled(evutil_socket_t fd, short what, void *arg)
{
    struct bench *b = arg;
    struct timeval tv = { 0, SETTLE_MS * 1000 * 3 };

    if (mem_read(b->pid, &idle_open) < 0) {
        fail(b, "cannot read the daemon's /proc/PID/status");
        return;
    }
    for (unsigned i = 0; i < b->nconns; i++)
        bc_close(&b->conns[i], false);
    evtimer_assign(b->timer, b->base, idle_on_closed, b);
    evtimer_add(b->timer, &tv);
}

static void idle_on_ready(struct bench *b)
{
    struct timeval tv = { 0, SETTLE_MS * 1000 * 3 };

    evtimer_assign(b->timer, b->base, idle_on_settled, b);
    evtimer_add(b->timer, &tv);
}

static void report_idle(struct bench *b)
{
    double n = b->nconns;

    out_begin(b->out);
    out_str("tool", "lockbroker-bench");
    out_str("workload", "idle");
    out_u64("conns", b->nconns);
    out_u64("rss_before_kb", idle_before.rss / 1024);
    out_u64("rss_open_kb", idle_open.rss / 1024);
    out_u64("rss_after_close_kb", idle_after.rss / 1024);
    out_dbl("rss_bytes_per_conn", ((double)idle_open.rss - (double)idle_before.rss) / n, 0);
    out_dbl("anon_bytes_per_conn", ((double)idle_open.anon - (double)idle_before.anon) / n, 0);
    out_dbl("vmdata_bytes_per_conn", ((double)idle_open.data - (double)idle_before.data) / n, 0);
    out_u64("errors", b->errors_total);
    if (b->first_error[0])
        out_str("first_error", b->first_error);
    out_end();
}

/* ------------------------------------------------------------ main */

static void on_setup_timeout(evutil_socket_t fd, short what, void *arg)
{
    fail(arg, "connections still not ready after " STR(SETUP_TIMEOUT_S) " s");
}

static void usage(FILE *f)
{
    fprintf(f,
"Usage: lockbroker-bench [options]\n"
"  -H HOST:PORT   lockbrokerd address (default 127.0.0.1:7411)\n"
"  -W WORKLOAD    distinct | cold | hot | zipf | trylock | waiters | idle |\n"
"                 handshake (default distinct)\n"
"                   distinct  each connection cycles LOCK/UNLOCK on names of its own\n"
"                   cold      as distinct, but every LOCK is on a name never used\n"
"                             before (in this run or any other): a job id per lock\n"
"                   hot       every connection cycles LOCK/UNLOCK on one name\n"
"                   zipf      each cycle picks one of -n names, Zipf(s)-distributed\n"
"                   trylock   TRYLOCK/UNLOCK storm over -n names (default 1);\n"
"                             BUSY answers are counted and retried at once\n"
"                   waiters   -c waiters queued on one name: daemon CPU per grant\n"
"                             and per cancel (needs --pid)\n"
"                   idle      -c idle connections: daemon memory per connection\n"
"                             (needs --pid)\n"
"                   handshake -c at a time (default 8): connect, PING, close; -d\n"
"                             seconds to --plain, then -d seconds over TLS to -H:\n"
"                             daemon CPU per TLS connection net of a plain one\n"
"                             (needs --pid, --tls-ca and --plain)\n"
"  -m MODE        exclusive (default), shared, or limit=N (N from 1 to 65535):\n"
"                 the lock mode every LOCK and TRYLOCK asks for (distinct, cold,\n"
"                 hot, zipf, trylock). mutex_violations counts grants that left more\n"
"                 connections holding a name than the mode allows (1, any, N);\n"
"                 token_regressions is checked in exclusive mode only.\n"
"  -c N           connections (default 50)\n"
"  -d SECONDS     measured duration (default 10; per phase in waiters mode)\n"
"  -w SECONDS     warm-up before measuring (default 2)\n"
"  -n N           names for zipf (default 1000) and trylock (default 1)\n"
"  -s S           Zipf exponent (default 1.0)\n"
"  -p DEPTH       pipelining depth (default 1). distinct: each connection owns\n"
"                 DEPTH names and keeps DEPTH LOCK/UNLOCK cycles in flight, all\n"
"                 on the one connection; cold: DEPTH cycles in flight, each on\n"
"                 a new name; trylock: DEPTH TRYLOCKs in flight.\n"
"                 hot and zipf refuse DEPTH > 1 (a queued LOCK holds back the\n"
"                 connection's later requests, so shared names could deadlock).\n"
"  --zk HOSTS     ZooKeeper connect string: report ZooKeeper writes per cycle\n"
"                 (zxid from `srvr` on the first host, before and after) and\n"
"                 the daemon's multis and their mean size (STATS zk_batches,\n"
"                 zk_batched_ops, before and after)\n"
"  --pid PID      the daemon's pid: report its CPU time per cycle (/proc)\n"
"  --zk-pid PID   the ZooKeeper server's pid: report its CPU time per cycle\n"
"  --prefix P     lock name prefix (default lb<pid>-; cold adds the start time)\n"
"  --tls-ca FILE  connect over TLS (to the daemon's [tls] listen address) and\n"
"                 verify its certificate against the CA in FILE and the host of\n"
"                 -H (an IP address SAN when -H is numeric); handshakes are done\n"
"                 before the warm-up\n"
"  --tls-cert FILE, --tls-key FILE\n"
"                 a client certificate and its key, for client_certs\n"
"  --tls-name NAME the name the server's certificate must carry, if not -H's host\n"
"  --plain HOST:PORT  handshake mode: the same daemon's plain address\n"
"  -o FORMAT      table (default) or json (one line)\n"
"  -h             this help\n");
}

/* Wall-clock microseconds and our pid, in hex: no earlier run, and no
 * run started with another --prefix, made the same names. */
static void cold_run_id(struct bench *b)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    snprintf(b->run_id, sizeof(b->run_id), "%llx-%x",
             (unsigned long long)tv.tv_sec * 1000000ull + (unsigned long long)tv.tv_usec,
             (unsigned)getpid());
}

static int parse_uint(const char *s, unsigned *v, unsigned min)
{
    char *end;
    unsigned long x = strtoul(s, &end, 10);

    if (!*s || *end || x < min || x > 10000000)
        return -1;
    *v = (unsigned)x;
    return 0;
}

/* -m MODE: sets the mode's name, its option word and how many may hold a name. */
static int parse_mode(struct bench *b, const char *s)
{
    unsigned n;

    if (strcmp(s, "exclusive") == 0) {
        b->mode_word[0] = '\0';
        b->max_holders = 1;
    } else if (strcmp(s, "shared") == 0) {
        snprintf(b->mode_word, sizeof(b->mode_word), " shared");
        b->max_holders = 0;
    } else if (strncmp(s, "limit=", 6) == 0 && s[6] >= '0' && s[6] <= '9' &&
               parse_uint(s + 6, &n, 1) == 0 && n <= 65535) {
        snprintf(b->mode_word, sizeof(b->mode_word), " limit=%u", n);
        b->max_holders = n;
    } else {
        return -1;
    }
    snprintf(b->mode, sizeof(b->mode), "%s", b->mode_word[0] ? b->mode_word + 1 : s);
    return 0;
}

static int parse_secs(const char *s, double *v)
{
    char *end;
    double x = strtod(s, &end);

    if (!*s || *end || !(x >= 0) || x > 86400)
        return -1;
    *v = x;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "zk", required_argument, NULL, 'Z' },
        { "pid", required_argument, NULL, 'P' },
        { "zk-pid", required_argument, NULL, 'Q' },
        { "prefix", required_argument, NULL, 'X' },
        { "tls-ca", required_argument, NULL, 'A' },
        { "tls-cert", required_argument, NULL, 'C' },
        { "tls-key", required_argument, NULL, 'K' },
        { "tls-name", required_argument, NULL, 'N' },
        { "plain", required_argument, NULL, 'L' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct bench *b = calloc(1, sizeof(*b));
    const char *tls_ca = NULL, *tls_cert = NULL, *tls_key = NULL;
    bool names_set = false, conns_set = false;
    struct timeval setup_tv = { SETUP_TIMEOUT_S, 0 };
    unsigned v;
    int opt, rc = 1;

    if (!b)
        return 1;
    b->hostport = "127.0.0.1:7411";
    b->wl = WL_DISTINCT;
    b->nconns = 50;
    b->pipeline = 1;
    b->duration = 10;
    b->warmup = 2;
    b->zipf_s = 1.0;
    b->out = OUT_TABLE;
    snprintf(b->prefix, sizeof(b->prefix), "lb%d-", (int)getpid());
    cold_run_id(b);
    parse_mode(b, "exclusive");

    while ((opt = getopt_long(argc, argv, "H:W:m:c:d:w:n:s:p:o:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'H': b->hostport = optarg; break;
        case 'W': {
            unsigned i;
            for (i = 0; i < sizeof(workload_names) / sizeof(workload_names[0]); i++)
                if (strcmp(optarg, workload_names[i]) == 0)
                    break;
            if (i == sizeof(workload_names) / sizeof(workload_names[0])) {
                fprintf(stderr, "lockbroker-bench: unknown workload '%s'\n", optarg);
                return 2;
            }
            b->wl = (enum workload)i;
            break;
        }
        case 'm':
            if (parse_mode(b, optarg) < 0)
                goto bad;
            break;
        case 'c':
            if (parse_uint(optarg, &b->nconns, 1) < 0)
                goto bad;
            conns_set = true;
            break;
        case 'd':
            if (parse_secs(optarg, &b->duration) < 0 || b->duration <= 0)
                goto bad;
            break;
        case 'w':
            if (parse_secs(optarg, &b->warmup) < 0)
                goto bad;
            break;
        case 'n':
            if (parse_uint(optarg, &b->nnames, 1) < 0)
                goto bad;
            names_set = true;
            break;
        case 's': {
            char *end;
            b->zipf_s = strtod(optarg, &end);
            if (!*optarg || *end || !(b->zipf_s >= 0) || b->zipf_s > 10)
                goto bad;
            break;
        }
        case 'p':
            if (parse_uint(optarg, &b->pipeline, 1) < 0 || b->pipeline > 256)
                goto bad;
            break;
        case 'o':
            if (out_parse_mode(optarg, &b->out) < 0)
                goto bad;
            break;
        case 'Z': b->zk_hosts = optarg; break;
        case 'P':
        case 'Q':
            if (parse_uint(optarg, &v, 1) < 0)
                goto bad;
            if (opt == 'P')
                b->pid = (pid_t)v;
            else
                b->zk_pid = (pid_t)v;
            break;
        case 'X':
            snprintf(b->prefix, sizeof(b->prefix), "%s", optarg);
            break;
        case 'A': tls_ca = optarg; break;
        case 'C': tls_cert = optarg; break;
        case 'K': tls_key = optarg; break;
        case 'N': b->tls_name = optarg; break;
        case 'L': b->plain_hostport = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
bad:
        fprintf(stderr, "lockbroker-bench: bad argument%s%s\n", optind <= argc && optarg ? ": " : "",
                optind <= argc && optarg ? optarg : "");
        usage(stderr);
        return 2;
    }
    if (!names_set)
        b->nnames = b->wl == WL_ZIPF ? 1000 : 1;
    if (b->wl == WL_HOT)
        b->nnames = 1;
    if (b->pipeline > 1 && !(b->wl == WL_DISTINCT || b->wl == WL_COLD || b->wl == WL_TRYLOCK)) {
        fprintf(stderr, "lockbroker-bench: -p > 1 only for distinct, cold and trylock\n");
        return 2;
    }
    if (b->wl == WL_WAITERS || b->wl == WL_IDLE) {
        if (b->mode_word[0]) {
            fprintf(stderr, "lockbroker-bench: -m only for distinct, cold, hot, zipf and "
                    "trylock\n");
            return 2;
        }
        b->pipeline = 1;
        if (b->pid <= 0) {
            fprintf(stderr, "lockbroker-bench: -W %s needs --pid\n", workload_names[b->wl]);
            return 2;
        }
    }
    if (b->wl == WL_HANDSHAKE) {
        if (b->mode_word[0] || b->pid <= 0 || !tls_ca || !b->plain_hostport) {
            fprintf(stderr, "lockbroker-bench: -W handshake needs --pid, --tls-ca and --plain, "
                    "and takes no -m\n");
            return 2;
        }
        b->pipeline = 1;
        if (!conns_set)
            b->nconns = 8;
        b->plain_addrlen = sizeof(b->plain_addr);
        if (evutil_parse_sockaddr_port(b->plain_hostport, (struct sockaddr *)&b->plain_addr,
                                       &b->plain_addrlen) < 0) {
            fprintf(stderr, "lockbroker-bench: '%s' is not a numeric address\n",
                    b->plain_hostport);
            return 2;
        }
    }
    if (!tls_ca && (tls_cert || tls_key || b->tls_name)) {
        fprintf(stderr, "lockbroker-bench: --tls-cert, --tls-key and --tls-name need --tls-ca\n");
        return 2;
    }
    if (!tls_cert != !tls_key) {
        fprintf(stderr, "lockbroker-bench: --tls-cert and --tls-key go together\n");
        return 2;
    }
    if (b->wl == WL_WAITERS)
        b->nconns++;       /* the holder, plus c waiters */
    if (split_host_port(b->hostport, &b->host, &b->port) < 0) {
        fprintf(stderr, "lockbroker-bench: bad address '%s'\n", b->hostport);
        return 2;
    }
    b->addrlen = sizeof(b->addr);
    if (evutil_parse_sockaddr_port(b->hostport, (struct sockaddr *)&b->addr, &b->addrlen) < 0) {
        fprintf(stderr, "lockbroker-bench: '%s' is not a numeric address\n", b->hostport);
        return 2;
    }
    if (tls_ca) {
        if (!b->tls_name)
            b->tls_name = b->host;
        if (!(b->tls = tls_ctx_new(tls_ca, tls_cert, tls_key)))
            return 1;
        b->tls_name_is_ip = name_is_ip(b->tls_name);
    }
    if (raise_nofile((uint64_t)b->nconns + WAITERS_INFLIGHT + 64) <
        (uint64_t)b->nconns + WAITERS_INFLIGHT + 16) {
        fprintf(stderr, "lockbroker-bench: the open file limit is too low for %u connections\n",
                b->nconns);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    b->rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^ bench_now_ns();
    if (b->rng == 0)
        b->rng = 1;
    if (b->wl == WL_ZIPF && zipf_init(&b->zipf, b->nnames, b->zipf_s) < 0)
        goto out;
    histo_reset(&b->lat);
    histo_reset(&b->unlock_lat);
    if (!(b->base = event_base_new()) || !(b->timer = evtimer_new(b->base, NULL, NULL)) ||
        !(b->setup_timer = evtimer_new(b->base, on_setup_timeout, b)) ||
        !(b->conns = calloc(b->nconns, sizeof(*b->conns))) ||
        !(b->names = calloc(b->nnames, sizeof(*b->names)))) {
        fprintf(stderr, "lockbroker-bench: out of memory\n");
        goto out;
    }
    for (unsigned i = 0; i < b->nconns; i++)
        if (bc_alloc(b, &b->conns[i], i) < 0) {
            fprintf(stderr, "lockbroker-bench: out of memory\n");
            goto out;
        }

    if (b->wl == WL_WAITERS) {
        if (run_waiters(b) < 0)
            goto failed;
        report_waiters(b);
        rc = 0;
        goto out;
    }
    if (b->wl == WL_HANDSHAKE) {
        if (run_handshake(b) < 0)
            goto failed;
        report_handshake(b);
        rc = 0;
        goto out;
    }
    if (b->wl == WL_IDLE && mem_read(b->pid, &idle_before) < 0) {
        fprintf(stderr, "lockbroker-bench: cannot read /proc/%d/status\n", (int)b->pid);
        goto out;
    }
    evtimer_add(b->setup_timer, &setup_tv);
    connect_more(b);
    event_base_dispatch(b->base);
failed:
    if (b->failure) {
        fprintf(stderr, "lockbroker-bench: %s (%u of %u connections ready)%s%s\n", b->failure,
                b->ready, b->nconns, b->first_error[0] ? "; first error: " : "", b->first_error);
        goto out;
    }
    if (b->wl == WL_IDLE)
        report_idle(b);
    else
        report_load(b);
    rc = 0;
out:
    return rc;
}
