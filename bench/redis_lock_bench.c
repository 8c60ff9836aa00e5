/*
 * redis_lock_bench.c - the usual Redis lock, for comparison with lockbrokerd.
 *
 * Each client (one connection each, hiredis async on the same kind of
 * libevent loop as lockbroker-bench) runs cycles of
 *     SET <name> <token> NX PX <ttl>        -> OK (granted) or nil (busy)
 *     EVALSHA <release> 1 <name> <token>    -> compare-and-delete
 * where the release script deletes the key only if it still holds our token.
 * A nil answer (someone else holds it) is retried at once, the way spin-lock
 * clients of this recipe do. Grant latency is measured from the first SET of
 * a cycle to its OK, as lockbroker-bench measures LOCK -> OK.
 *
 * Workloads: distinct (a key per client) and hot (one key for all); for hot,
 * the same bypass count as lockbroker-bench shows how unfair spinning is.
 */
#include "config.h"

#include <event2/event.h>
#include <getopt.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_util.h"

static const char release_script[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

struct rl;

struct rclient {
    struct rl *rl;
    redisAsyncContext *ac;
    unsigned idx;
    bool connected;
    uint64_t seq;              /* tokens: <pid>:<idx>:<seq> */
    char name[96];
    char token[64];
    uint64_t t_first;          /* first SET of this cycle */
    bool waiting;              /* hot fairness: a cycle's first SET has gone out */
    uint64_t bypassed;
};

struct rl {
    char *host;
    int port;
    unsigned nclients;
    bool hot;
    unsigned ttl_ms;
    double duration, warmup;
    pid_t pid;
    enum out_mode out;

    struct event_base *base;
    struct event *timer;
    struct rclient *clients;
    char sha[48];
    unsigned connected;
    bool measuring;
    const char *failure;
    char first_error[128];

    uint64_t t0, t1, cycles, busy, errors, max_bypass;
    uint64_t cu0, cs0, cu1, cs1;
    bool have_cpu;
    struct rusage ru0, ru1;
    struct histo lat;
};

static void cycle_begin(struct rclient *c);
static void send_set(struct rclient *c);

static void rl_fail(struct rl *rl, const char *why)
{
    if (!rl->failure)
        rl->failure = why;
    event_base_loopbreak(rl->base);
}

static void note_error(struct rl *rl, const redisReply *r, const char *what)
{
    if (rl->measuring)
        rl->errors++;
    if (!rl->first_error[0])
        snprintf(rl->first_error, sizeof(rl->first_error), "%s: %s", what,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
}

static void rl_timer(struct rl *rl, double secs, event_callback_fn cb)
{
    struct timeval tv = { (time_t)secs, (suseconds_t)((secs - (time_t)secs) * 1e6) };

    event_del(rl->timer);
    evtimer_assign(rl->timer, rl->base, cb, rl);
    evtimer_add(rl->timer, &tv);
}

/* Fairness, as lockbroker-bench counts it: every waiter whose cycle began
 * before the winner's was bypassed once more. */
static void fairness_on_grant(struct rl *rl, struct rclient *g)
{
    if (rl->measuring) {
        for (unsigned i = 0; i < rl->nclients; i++) {
            struct rclient *w = &rl->clients[i];
            if (w != g && w->waiting && w->t_first < g->t_first)
                w->bypassed++;
        }
        if (g->bypassed > rl->max_bypass)
            rl->max_bypass = g->bypassed;
    }
    g->waiting = false;
    g->bypassed = 0;
}

static void on_released(redisAsyncContext *ac, void *reply, void *priv)
{
    struct rclient *c = priv;
    struct rl *rl = c->rl;
    redisReply *r = reply;

    if (!r)
        return;                /* the context is going away */
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        if (rl->measuring)
            rl->cycles++;
    } else {
        note_error(rl, r, "EVALSHA");
    }
    cycle_begin(c);
}

static void on_set(redisAsyncContext *ac, void *reply, void *priv)
{
    struct rclient *c = priv;
    struct rl *rl = c->rl;
    redisReply *r = reply;

    if (!r)
        return;
    if (r->type == REDIS_REPLY_NIL) {
        /* Held by someone else: spin. */
        if (rl->measuring)
            rl->busy++;
        send_set(c);
        return;
    }
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
        note_error(rl, r, "SET");
        send_set(c);
        return;
    }
    if (rl->measuring)
        histo_record(&rl->lat, bench_now_ns() - c->t_first);
    if (rl->hot)
        fairness_on_grant(rl, c);
    if (redisAsyncCommand(c->ac, on_released, c, "EVALSHA %s 1 %s %s", rl->sha, c->name,
                          c->token) != REDIS_OK)
        rl_fail(rl, "cannot send EVALSHA");
}

static void send_set(struct rclient *c)
{
    struct rl *rl = c->rl;

    if (redisAsyncCommand(c->ac, on_set, c, "SET %s %s NX PX %u", c->name, c->token,
                          rl->ttl_ms) != REDIS_OK)
        rl_fail(rl, "cannot send SET");
}

static void cycle_begin(struct rclient *c)
{
    snprintf(c->token, sizeof(c->token), "%d:%u:%llu", (int)getpid(), c->idx,
             (unsigned long long)++c->seq);
    c->t_first = bench_now_ns();
    c->waiting = true;
    send_set(c);
}

/* ------------------------------------------------------------ phases */

static void on_measure_end(evutil_socket_t fd, short what, void *arg)
{
    struct rl *rl = arg;

    rl->t1 = bench_now_ns();
    rl->measuring = false;
    getrusage(RUSAGE_SELF, &rl->ru1);
    if (rl->have_cpu && proc_cpu_us(rl->pid, &rl->cu1, &rl->cs1) < 0)
        rl->have_cpu = false;
    for (unsigned i = 0; i < rl->nclients; i++)
        if (rl->clients[i].waiting && rl->clients[i].bypassed > rl->max_bypass)
            rl->max_bypass = rl->clients[i].bypassed;
    event_base_loopbreak(rl->base);
}

static void on_warmup_end(evutil_socket_t fd, short what, void *arg)
{
    struct rl *rl = arg;

    histo_reset(&rl->lat);
    rl->cycles = rl->busy = rl->errors = rl->max_bypass = 0;
    for (unsigned i = 0; i < rl->nclients; i++)
        rl->clients[i].bypassed = 0;
    rl->have_cpu = rl->pid > 0 && proc_cpu_us(rl->pid, &rl->cu0, &rl->cs0) == 0;
    getrusage(RUSAGE_SELF, &rl->ru0);
    rl->t0 = bench_now_ns();
    rl->measuring = true;
    rl_timer(rl, rl->duration, on_measure_end);
}

static void on_connected(const redisAsyncContext *ac, int status)
{
    struct rclient *c = ac->data;
    struct rl *rl = c->rl;

    if (status != REDIS_OK) {
        rl_fail(rl, "cannot connect to redis");
        return;
    }
    c->connected = true;
    if (++rl->connected < rl->nclients)
        return;
    for (unsigned i = 0; i < rl->nclients; i++)
        cycle_begin(&rl->clients[i]);
    rl_timer(rl, rl->warmup, on_warmup_end);
}

static void on_disconnected(const redisAsyncContext *ac, int status)
{
    struct rclient *c = ac->data;

    c->ac = NULL;
    if (status != REDIS_OK && c->rl->measuring)
        rl_fail(c->rl, "redis closed a connection");
}

/* Loads the release script (blocking, before the loop starts). */
static int load_script(struct rl *rl)
{
    struct timeval tv = { 5, 0 };
    redisContext *ctx = redisConnectWithTimeout(rl->host, rl->port, tv);
    redisReply *r;
    int rc = -1;

    if (!ctx || ctx->err) {
        fprintf(stderr, "redis_lock_bench: cannot connect to %s:%d: %s\n", rl->host, rl->port,
                ctx ? ctx->errstr : "out of memory");
        goto out;
    }
    r = redisCommand(ctx, "SCRIPT LOAD %s", release_script);
    if (r && r->type == REDIS_REPLY_STRING && r->len < (int)sizeof(rl->sha)) {
        memcpy(rl->sha, r->str, (size_t)r->len);
        rl->sha[r->len] = '\0';
        rc = 0;
    } else {
        fprintf(stderr, "redis_lock_bench: SCRIPT LOAD failed: %s\n",
                r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    if (r)
        freeReplyObject(r);
out:
    if (ctx)
        redisFree(ctx);
    return rc;
}

static void report(struct rl *rl)
{
    double secs = (double)(rl->t1 - rl->t0) / 1e9, cyc = (double)rl->cycles;
    double client_us = (rl->ru1.ru_utime.tv_sec - rl->ru0.ru_utime.tv_sec) * 1e6 +
                       (rl->ru1.ru_utime.tv_usec - rl->ru0.ru_utime.tv_usec) +
                       (rl->ru1.ru_stime.tv_sec - rl->ru0.ru_stime.tv_sec) * 1e6 +
                       (rl->ru1.ru_stime.tv_usec - rl->ru0.ru_stime.tv_usec);
    char target[300];

    snprintf(target, sizeof(target), "%s:%d", rl->host, rl->port);
    out_begin(rl->out);
    out_str("tool", "redis_lock_bench");
    out_str("workload", rl->hot ? "hot" : "distinct");
    out_str("target", target);
    out_u64("conns", rl->nclients);
    out_dbl("seconds", secs, 2);
    out_u64("cycles", rl->cycles);
    out_dbl("cycles_per_s", cyc / secs, 0);
    out_histo("grant", &rl->lat);
    out_u64("busy", rl->busy);
    if (rl->hot)
        out_u64("max_bypass", rl->max_bypass);
    out_u64("errors", rl->errors);
    if (rl->have_cpu) {
        uint64_t d = rl->cu1 + rl->cs1 - rl->cu0 - rl->cs0;
        out_dbl("daemon_cpu_us_per_cycle", cyc > 0 ? (double)d / cyc : 0, 2);
        out_dbl("daemon_cpu_pct", (double)d / (secs * 1e4), 1);
        out_dbl("daemon_user_pct", (double)(rl->cu1 - rl->cu0) / (secs * 1e4), 1);
    }
    out_dbl("client_cpu_pct", client_us / (secs * 1e4), 1);
    out_dbl("client_cpu_us_per_cycle", cyc > 0 ? client_us / cyc : 0, 2);
    if (rl->first_error[0])
        out_str("first_error", rl->first_error);
    out_end();
}

static void usage(FILE *f)
{
    fprintf(f,
"Usage: redis_lock_bench [options]\n"
"  -H HOST:PORT   redis-server address (default 127.0.0.1:6379)\n"
"  -W WORKLOAD    distinct (a key per client, default) or hot (one key)\n"
"  -c N           clients, one connection each (default 50)\n"
"  -d SECONDS     measured duration (default 10)\n"
"  -w SECONDS     warm-up (default 2)\n"
"  -t MS          lock TTL, the PX argument (default 30000)\n"
"  --pid PID      redis-server's pid: report its CPU time per cycle\n"
"  -o FORMAT      table (default) or json\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "pid", required_argument, NULL, 'P' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct rl *rl = calloc(1, sizeof(*rl));
    const char *hostport = "127.0.0.1:6379";
    char *end;
    int opt;

    if (!rl)
        return 1;
    rl->nclients = 50;
    rl->ttl_ms = 30000;
    rl->duration = 10;
    rl->warmup = 2;
    rl->out = OUT_TABLE;
    while ((opt = getopt_long(argc, argv, "H:W:c:d:w:t:o:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'H': hostport = optarg; break;
        case 'W':
            if (strcmp(optarg, "hot") == 0)
                rl->hot = true;
            else if (strcmp(optarg, "distinct") != 0)
                goto bad;
            break;
        case 'c':
        case 't':
        case 'P': {
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 1 || v > 10000000)
                goto bad;
            if (opt == 'c')
                rl->nclients = (unsigned)v;
            else if (opt == 't')
                rl->ttl_ms = (unsigned)v;
            else
                rl->pid = (pid_t)v;
            break;
        }
        case 'd':
        case 'w': {
            double x = strtod(optarg, &end);
            if (!*optarg || *end || !(x >= 0) || x > 86400 || (opt == 'd' && x == 0))
                goto bad;
            if (opt == 'd')
                rl->duration = x;
            else
                rl->warmup = x;
            break;
        }
        case 'o':
            if (out_parse_mode(optarg, &rl->out) < 0)
                goto bad;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
bad:
        usage(stderr);
        return 2;
    }
    if (split_host_port(hostport, &rl->host, &rl->port) < 0) {
        fprintf(stderr, "redis_lock_bench: bad address '%s'\n", hostport);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    raise_nofile(rl->nclients + 64);
    histo_reset(&rl->lat);
    if (load_script(rl) < 0)
        return 1;
    if (!(rl->base = event_base_new()) || !(rl->timer = evtimer_new(rl->base, NULL, NULL)) ||
        !(rl->clients = calloc(rl->nclients, sizeof(*rl->clients)))) {
        fprintf(stderr, "redis_lock_bench: out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < rl->nclients; i++) {
        struct rclient *c = &rl->clients[i];
        c->rl = rl;
        c->idx = i;
        if (rl->hot)
            snprintf(c->name, sizeof(c->name), "rl%d-hot", (int)getpid());
        else
            snprintf(c->name, sizeof(c->name), "rl%d-d%u", (int)getpid(), i);
        c->ac = redisAsyncConnect(rl->host, rl->port);
        if (!c->ac || c->ac->err) {
            fprintf(stderr, "redis_lock_bench: cannot connect: %s\n",
                    c->ac ? c->ac->errstr : "out of memory");
            return 1;
        }
        c->ac->data = c;
        redisLibeventAttach(c->ac, rl->base);
        redisAsyncSetConnectCallback(c->ac, on_connected);
        redisAsyncSetDisconnectCallback(c->ac, on_disconnected);
    }
    event_base_dispatch(rl->base);
    if (rl->failure) {
        fprintf(stderr, "redis_lock_bench: %s%s%s\n", rl->failure,
                rl->first_error[0] ? "; " : "", rl->first_error);
        return 1;
    }
    report(rl);
    return 0;      /* the connections close with the process */
}
