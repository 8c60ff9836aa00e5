/*
 * zk_raw_bench.c - the ceiling for a ZooKeeper-backed lock on this machine.
 *
 * C logical clients each run a create(EPHEMERAL_SEQUENTIAL) + delete loop
 * under one parent node: create, and as soon as its reply names the node,
 * delete it; when the delete is answered, create again. A lock cycle in any
 * ZooKeeper recipe needs at least these two writes, in this order, so pairs
 * per second bounds every such lock's cycles per second.
 *
 * The clients share -S sessions (1: all on one session, pipelined the way
 * lockbrokerd pipelines; 0: one session each).
 *
 * --recipe: each client runs the ZooKeeper lock recipe instead, what a
 * program using ZooKeeper directly pays per uncontended lock cycle: create
 * EPHEMERAL_SEQUENTIAL under a parent of its own, getChildren2 of the
 * parent (is the node first? its pzxid is the fencing token), delete.
 * Cycles per second, and the grant latency (create sent to getChildren2
 * answered), compare with lockbrokerd's distinct-names rows.
 *
 * --recipe --cold: every cycle locks a name never used before, as a program
 * that locks by job id does: the node goes under a new parent,
 * <parent>/k<client>-<cycle>, which does not exist yet. The create fails
 * with ZNONODE; the parent is created as a container (the server removes
 * it once it is empty again) and the create is sent again, as Curator's
 * creatingParentContainersIfNeeded() does; then getChildren2 and delete as
 * above. The parents are left to the server, as Curator leaves them.
 * (Curator's ZKPaths.mkdirs also asks exists() of every ancestor before
 * creating it; we skip those reads, which makes this peer, if anything,
 * faster than Curator.) Peer of lockbroker-bench -W cold.
 *
 * The single-threaded C client
 * (libzookeeper_st, async calls only) is driven from one libevent loop
 * through zookeeper_interest() / zookeeper_process(), as the daemon does.
 */
#include "config.h"

#include <event2/event.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "bench_util.h"

/* Bytes of node data: about what lockbrokerd writes (daemon id and client address). */
#define NODE_DATA "bench-host-12345-0123456789abcdef 127.0.0.1:40000"

struct rb;

struct session {
    struct rb *rb;
    zhandle_t *zh;
    struct event *io;
    bool connected;
    bool in_process;      /* completions run inside zookeeper_process: re-arm after it */
    bool dirty;           /* requests issued outside process: re-arm soon */
    bool armed;           /* io is assigned to fd / what */
    int fd;
    short what;
};

struct client {
    struct rb *rb;
    struct session *s;
    uint64_t t_create;    /* when this pair's create went out */
    bool busy;            /* a request is out */
    char parent[160];     /* --recipe: this client's lock parent; --cold: this cycle's */
    char node[192];       /* --recipe: the node created, until deleted */
    unsigned idx;
    unsigned cycle;       /* --cold: cycles begun, which names the next parent */
    bool parent_tried;    /* --cold: this cycle created its parent already */
};

struct rb {
    /* options */
    const char *hosts;
    unsigned nclients, nsessions;
    double duration, warmup;
    int resolve_delay_ms;  /* zoo_set_servers_resolution_delay(); 0 is the library's default */
    bool lean;             /* fewer system calls per reply; see session_rearm() */
    bool recipe;           /* create + getChildren2 + delete per cycle */
    bool cold;             /* --recipe under a new parent per cycle, made when missing */
    pid_t zk_pid;
    enum out_mode out;

    struct event_base *base;
    struct event *timer, *kick;
    struct session *sessions;
    struct client *clients;
    char parent[128];
    unsigned connected, busy;
    bool running, stopping, measuring;
    const char *failure;

    uint64_t t0, t1, pairs, errors, zxid0, zxid1;
    uint64_t zu0, zs0, zu1, zs1;
    bool have_zxid, have_zcpu;
    struct rusage ru0, ru1;
    struct histo pair_lat, create_lat, grant_lat;
    int first_rc;
    unsigned parents_made;      /* --recipe: client parents created so far */
    uint64_t not_first;         /* --recipe: a listing did not show our node first */
    uint64_t cold_nonode;       /* --cold: creates that found no parent */
    uint64_t cold_parents;      /* --cold: parents created (not found existing) */
};

static void client_create(struct client *c);
static int client_send_create(struct client *c);
static void rb_stop(struct rb *rb);

/* (Re)starts the one timer; it may still be pending. */
static void rb_timer(struct rb *rb, double secs, event_callback_fn cb, void *arg)
{
    struct timeval tv = { (time_t)secs, (suseconds_t)((secs - (time_t)secs) * 1e6) };

    event_del(rb->timer);
    evtimer_assign(rb->timer, rb->base, cb, arg);
    evtimer_add(rb->timer, &tv);
}

/* ------------------------------------------------------------ event loop glue */

static void on_io(evutil_socket_t fd, short what, void *arg);

/*
 * Points the session's one event at the handle's fd and timeout. The plain
 * way (as in STYLE.md) deletes and re-adds the event every time: two
 * epoll_ctl calls per zookeeper_process(). With --lean the event is re-added
 * only when the fd or the interest changed; otherwise event_add() merely
 * moves the timeout, which costs no system call.
 */
static void session_rearm(struct session *s)
{
    struct timeval tv = { 0, 0 };
    int fd = -1, interest = 0;
    short what = 0;

    if (zookeeper_interest(s->zh, &fd, &interest, &tv) != ZOK) {
        /* Between connection attempts: try again shortly. */
        fd = -1;
        tv.tv_sec = 0;
        tv.tv_usec = 100 * 1000;
    }
    if (fd != -1) {
        if (interest & ZOOKEEPER_READ)
            what |= EV_READ;
        if (interest & ZOOKEEPER_WRITE)
            what |= EV_WRITE;
    }
    s->dirty = false;
    if (s->rb->lean && s->armed && fd == s->fd && what == s->what) {
        event_add(s->io, &tv);
        return;
    }
    event_del(s->io);
    event_assign(s->io, s->rb->base, fd, what, on_io, s);
    event_add(s->io, &tv);
    s->fd = fd;
    s->what = what;
    s->armed = true;
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;
    int events = 0;

    if (what & EV_READ)
        events |= ZOOKEEPER_READ;
    if (what & EV_WRITE)
        events |= ZOOKEEPER_WRITE;
    s->in_process = true;
    /* zookeeper_process() reads at most one reply per call; with --lean,
     * keep calling it while replies wait in the socket, instead of going
     * back through epoll_wait() for each one. */
    if (zookeeper_process(s->zh, events) == ZOK && s->rb->lean && (what & EV_READ)) {
        for (unsigned i = 0; i < 1024; i++) {
            int avail = 0;
            if (ioctl(fd, FIONREAD, &avail) < 0 || avail <= 0 ||
                zookeeper_process(s->zh, ZOOKEEPER_READ) != ZOK)
                break;
        }
    }
    s->in_process = false;
    session_rearm(s);
}

/* Re-arms the sessions that got requests outside zookeeper_process(). */
static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct rb *rb = arg;

    for (unsigned i = 0; i < rb->nsessions; i++)
        if (rb->sessions[i].dirty)
            session_rearm(&rb->sessions[i]);
}

static void session_sent(struct session *s)
{
    if (s->in_process || s->dirty)
        return;
    s->dirty = true;
    event_active(s->rb->kick, 0, 0);
}

/* ------------------------------------------------------------ the loop */

static void note_rc(struct rb *rb, int rc)
{
    if (rb->measuring)
        rb->errors++;
    if (!rb->first_rc)
        rb->first_rc = rc;
}

static void client_idle(struct client *c)
{
    struct rb *rb = c->rb;

    c->busy = false;
    if (--rb->busy == 0 && rb->stopping)
        rb_stop(rb);
}

static void on_deleted(int rc, const void *data)
{
    struct client *c = (struct client *)data;
    struct rb *rb = c->rb;

    if (rc == ZOK) {
        if (rb->measuring) {
            uint64_t now = bench_now_ns();
            rb->pairs++;
            histo_record(&rb->pair_lat, now - c->t_create);
        }
    } else {
        note_rc(rb, rc);
    }
    client_idle(c);
    if (rb->running)
        client_create(c);
}

/* --recipe: the listing that grants the lock; then the release. */
static void on_listed(int rc, const struct String_vector *children, const struct Stat *stat,
                      const void *data)
{
    struct client *c = (struct client *)data;
    struct rb *rb = c->rb;
    const char *mine = strrchr(c->node, '/') + 1;
    int r;

    if (rc == ZOK) {
        /* Lowest sequence number holds: only our node is under our parent. */
        for (int i = 0; i < children->count; i++)
            if (strcmp(children->data[i], mine) < 0 && rb->measuring)
                rb->not_first++;
        if (rb->measuring)
            histo_record(&rb->grant_lat, bench_now_ns() - c->t_create);
    } else {
        note_rc(rb, rc);
    }
    r = zoo_adelete(c->s->zh, c->node, -1, on_deleted, c);
    if (r != ZOK) {
        note_rc(rb, r);
        client_idle(c);
        return;
    }
    session_sent(c->s);
}

/* --cold: the parent exists now (or another client made it): the create again. */
static void on_cold_parent_created(int rc, const char *value, const void *data)
{
    struct client *c = (struct client *)data;
    struct rb *rb = c->rb;

    if (rc == ZOK && rb->measuring)
        rb->cold_parents++;
    if (rc != ZOK && rc != ZNODEEXISTS) {
        note_rc(rb, rc);
        client_idle(c);
        if (rb->running)
            client_create(c);
        return;
    }
    /* Even when stopping: the create's reply leads to the delete. The
     * client stays busy. */
    client_send_create(c);
}

/* --cold: the create found no parent; make it, a container, as Curator does. */
static void cold_create_parent(struct client *c)
{
    struct rb *rb = c->rb;
    int r;

    if (rb->measuring)
        rb->cold_nonode++;
    c->parent_tried = true;
    r = zoo_acreate(c->s->zh, c->parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER,
                    on_cold_parent_created, c);
    if (r != ZOK) {
        note_rc(rb, r);
        client_idle(c);
        return;
    }
    session_sent(c->s);
}

static void on_created(int rc, const char *value, const void *data)
{
    struct client *c = (struct client *)data;
    struct rb *rb = c->rb;
    int r;

    if (rc == ZNONODE && rb->cold && !c->parent_tried) {
        cold_create_parent(c);
        return;
    }
    if (rc != ZOK) {
        note_rc(rb, rc);
        client_idle(c);
        if (rb->running)
            client_create(c);
        return;
    }
    if (rb->measuring)
        histo_record(&rb->create_lat, bench_now_ns() - c->t_create);
    if (rb->recipe) {
        /* Is our node first? The recipe's grant (even when stopping: the
         * delete follows the listing). */
        snprintf(c->node, sizeof(c->node), "%s", value);
        r = zoo_aget_children2(c->s->zh, c->parent, 0, on_listed, c);
        if (r != ZOK) {
            note_rc(rb, r);
            client_idle(c);
            return;
        }
        session_sent(c->s);
        return;
    }
    /* Delete at once, even when stopping: the node must not outlive us. */
    r = zoo_adelete(c->s->zh, value, -1, on_deleted, c);
    if (r != ZOK) {
        note_rc(rb, r);
        client_idle(c);
        return;
    }
    session_sent(c->s);
}

/* A new cycle: its start time and, with --cold, its new parent. */
static void client_create(struct client *c)
{
    struct rb *rb = c->rb;

    if (rb->cold) {
        snprintf(c->parent, sizeof(c->parent), "%s/k%u-%u", rb->parent, c->idx, c->cycle++);
        c->parent_tried = false;
    }
    c->t_create = bench_now_ns();
    if (client_send_create(c) < 0)
        return;
    c->busy = true;
    rb->busy++;
}

/* Sends the cycle's create; -1 (and the run stops) when it cannot. */
static int client_send_create(struct client *c)
{
    struct rb *rb = c->rb;
    char prefix[200];
    int r;

    snprintf(prefix, sizeof(prefix), "%s/n-", rb->recipe ? c->parent : rb->parent);
    r = zoo_acreate(c->s->zh, prefix, NODE_DATA, (int)strlen(NODE_DATA), &ZOO_OPEN_ACL_UNSAFE,
                    ZOO_EPHEMERAL_SEQUENTIAL, on_created, c);
    if (r != ZOK) {
        note_rc(rb, r);
        rb->failure = "zoo_acreate failed";
        event_base_loopbreak(rb->base);
        return -1;
    }
    session_sent(c->s);
    return 0;
}

/* ------------------------------------------------------------ phases */

static void on_parent_deleted(int rc, const void *data)
{
    struct rb *rb = (struct rb *)data;

    event_base_loopbreak(rb->base);
}

/* The client needs a completion; the common parent's delete says it all. */
static void on_client_parent_deleted(int rc, const void *data)
{
}

static void rb_stop(struct rb *rb)
{
    struct session *s = &rb->sessions[0];

    /* Every client is idle: remove the parents (one session answers in
     * order: the clients' before the common one), then leave. */
    for (unsigned i = 0; rb->recipe && i < rb->parents_made; i++)
        zoo_adelete(s->zh, rb->clients[i].parent, -1, on_client_parent_deleted, rb);
    if (zoo_adelete(s->zh, rb->parent, -1, on_parent_deleted, rb) != ZOK)
        event_base_loopbreak(rb->base);
    else
        session_sent(s);
}

static void on_give_up(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(arg);
}

static void on_measure_end(evutil_socket_t fd, short what, void *arg)
{
    struct rb *rb = arg;

    rb->t1 = bench_now_ns();
    rb->measuring = false;
    getrusage(RUSAGE_SELF, &rb->ru1);
    if (rb->have_zcpu && proc_cpu_us(rb->zk_pid, &rb->zu1, &rb->zs1) < 0)
        rb->have_zcpu = false;
    if (rb->have_zxid && zk_srvr_zxid(rb->hosts, &rb->zxid1) < 0)
        rb->have_zxid = false;
    rb->running = false;
    rb->stopping = true;
    if (rb->busy == 0)
        rb_stop(rb);
    /* Do not wait for ever for the clean-up. */
    rb_timer(rb, 5, on_give_up, rb->base);
}

static void on_warmup_end(evutil_socket_t fd, short what, void *arg)
{
    struct rb *rb = arg;

    histo_reset(&rb->pair_lat);
    histo_reset(&rb->create_lat);
    histo_reset(&rb->grant_lat);
    rb->pairs = rb->errors = rb->not_first = 0;
    rb->have_zcpu = rb->zk_pid > 0 && proc_cpu_us(rb->zk_pid, &rb->zu0, &rb->zs0) == 0;
    rb->have_zxid = zk_srvr_zxid(rb->hosts, &rb->zxid0) == 0;
    getrusage(RUSAGE_SELF, &rb->ru0);
    rb->t0 = bench_now_ns();
    rb->measuring = true;
    rb_timer(rb, rb->duration, on_measure_end, rb);
}

static void rb_start(struct rb *rb)
{
    rb->running = true;
    for (unsigned i = 0; i < rb->nclients; i++)
        client_create(&rb->clients[i]);
    rb_timer(rb, rb->warmup, on_warmup_end, rb);
}

/* --recipe: every client's parent exists: start. */
static void on_client_parent_created(int rc, const char *value, const void *data)
{
    struct rb *rb = (struct rb *)data;

    if (rc != ZOK && rc != ZNODEEXISTS) {
        rb->failure = "cannot create a client's parent node";
        rb->first_rc = rc;
        event_base_loopbreak(rb->base);
        return;
    }
    if (++rb->parents_made == rb->nclients)
        rb_start(rb);
}

static void on_parent_created(int rc, const char *value, const void *data)
{
    struct rb *rb = (struct rb *)data;
    struct session *s0 = &rb->sessions[0];

    if (rc != ZOK && rc != ZNODEEXISTS) {
        rb->failure = "cannot create the parent node";
        rb->first_rc = rc;
        event_base_loopbreak(rb->base);
        return;
    }
    if (rb->recipe && !rb->cold) {
        for (unsigned i = 0; i < rb->nclients; i++) {
            struct client *c = &rb->clients[i];
            snprintf(c->parent, sizeof(c->parent), "%s/c%u", rb->parent, i);
            if (zoo_acreate(s0->zh, c->parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
                            on_client_parent_created, rb) != ZOK) {
                rb->failure = "cannot create a client's parent node";
                event_base_loopbreak(rb->base);
                return;
            }
        }
        session_sent(s0);
        return;
    }
    rb_start(rb);
}

static void on_session_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct session *s = (struct session *)zoo_get_context(zh);
    struct rb *rb = s->rb;

    if (type != ZOO_SESSION_EVENT)
        return;
    if (state == ZOO_CONNECTED_STATE && !s->connected) {
        s->connected = true;
        if (++rb->connected == rb->nsessions) {
            struct session *s0 = &rb->sessions[0];
            /* --cold leaves the parents under it to the server: a container
             * goes with them. */
            if (zoo_acreate(s0->zh, rb->parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                            rb->cold ? ZOO_CONTAINER : 0, on_parent_created, rb) != ZOK) {
                rb->failure = "cannot create the parent node";
                event_base_loopbreak(rb->base);
            }
            session_sent(s0);
        }
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        rb->failure = "session expired";
        event_base_loopbreak(rb->base);
    } else if (state != ZOO_CONNECTED_STATE && s->connected && rb->running) {
        /* A connection loss in a benchmark spoils the figures: say so. */
        rb->failure = "lost the connection to ZooKeeper";
        event_base_loopbreak(rb->base);
    }
}

static void on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct rb *rb = arg;

    rb->failure = "could not connect every session within 20 s";
    event_base_loopbreak(rb->base);
}

/* ------------------------------------------------------------ main */

static void report(struct rb *rb)
{
    double secs = (double)(rb->t1 - rb->t0) / 1e9, p = (double)rb->pairs;
    double client_us = (rb->ru1.ru_utime.tv_sec - rb->ru0.ru_utime.tv_sec) * 1e6 +
                       (rb->ru1.ru_utime.tv_usec - rb->ru0.ru_utime.tv_usec) +
                       (rb->ru1.ru_stime.tv_sec - rb->ru0.ru_stime.tv_sec) * 1e6 +
                       (rb->ru1.ru_stime.tv_usec - rb->ru0.ru_stime.tv_usec);

    out_begin(rb->out);
    out_str("tool", "zk_raw_bench");
    out_str("zk", rb->hosts);
    out_u64("clients", rb->nclients);
    out_u64("sessions", rb->nsessions);
    out_dbl("resolve_delay_ms", rb->resolve_delay_ms, 0);
    out_str("loop", rb->lean ? "lean" : "plain");
    out_dbl("seconds", secs, 2);
    if (rb->recipe) {
        /* A pair is a lock cycle here: create, getChildren2, delete. */
        out_str("mode", rb->cold ? "recipe-cold" : "recipe");
        out_u64("cycles", rb->pairs);
        out_dbl("cycles_per_s", p / secs, 0);
        out_histo("grant", &rb->grant_lat);
        out_histo("cycle", &rb->pair_lat);
        out_u64("not_first", rb->not_first);
        if (rb->cold) {
            /* Parents the server removes later, once a minute by default. */
            out_u64("parents_created", rb->cold_parents);
            out_dbl("nonode_per_cycle", p > 0 ? (double)rb->cold_nonode / p : 0, 2);
        }
    } else {
        out_u64("pairs", rb->pairs);
        out_dbl("pairs_per_s", p / secs, 0);
        out_histo("pair", &rb->pair_lat);
    }
    out_histo("create", &rb->create_lat);
    out_u64("errors", rb->errors);
    if (rb->first_rc)
        out_str("first_error", zerror(rb->first_rc));
    if (rb->have_zxid) {
        out_u64("zk_writes", rb->zxid1 - rb->zxid0);
        out_dbl(rb->recipe ? "zk_writes_per_cycle" : "zk_writes_per_pair",
                p > 0 ? (double)(rb->zxid1 - rb->zxid0) / p : 0, 2);
    }
    if (rb->have_zcpu) {
        uint64_t d = rb->zu1 + rb->zs1 - rb->zu0 - rb->zs0;
        out_dbl(rb->recipe ? "zk_cpu_us_per_cycle" : "zk_cpu_us_per_pair",
                p > 0 ? (double)d / p : 0, 2);
        out_dbl("zk_cpu_pct", (double)d / (secs * 1e4), 1);
    }
    out_dbl("client_cpu_pct", client_us / (secs * 1e4), 1);
    out_dbl(rb->recipe ? "client_cpu_us_per_cycle" : "client_cpu_us_per_pair",
            p > 0 ? client_us / p : 0, 2);
    out_end();
}

static void usage(FILE *f)
{
    fprintf(f,
"Usage: zk_raw_bench --zk HOSTS [options]\n"
"  --zk HOSTS     ZooKeeper connect string (host:port[,host:port...])\n"
"  -c N           concurrent clients (default 64), each: create + delete, repeat\n"
"  --recipe       each client runs the lock recipe instead: create\n"
"                 EPHEMERAL_SEQUENTIAL + getChildren2 + delete, under a parent\n"
"                 of its own (distinct names); reports cycles and grant latency\n"
"  --cold         with --recipe: each cycle under a new parent, which the\n"
"                 create finds missing (ZNONODE); the parent is created as a\n"
"                 container and the create sent again, as Curator's\n"
"                 creatingParentContainersIfNeeded() does (names used once)\n"
"  -S N           sessions shared by the clients round-robin (default 1;\n"
"                 0: one session per client)\n"
"  -d SECONDS     measured duration (default 10)\n"
"  -w SECONDS     warm-up (default 2)\n"
"  --zk-pid PID   the ZooKeeper server's pid: report its CPU time per pair\n"
"  --resolve-delay MS  zoo_set_servers_resolution_delay() (default -1: no\n"
"                 routine re-resolution; 0: the library default, a getaddrinfo()\n"
"                 on every zookeeper_interest() call)\n"
"  --plain        drive the handle the plain way: delete and re-add the event\n"
"                 after every zookeeper_process(), one reply per wake-up\n"
"  --lean         (default) re-add the event only when the fd or interest\n"
"                 changed; read every waiting reply per wake-up\n"
"  -o FORMAT      table (default) or json\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "zk", required_argument, NULL, 'Z' },
        { "zk-pid", required_argument, NULL, 'Q' },
        { "resolve-delay", required_argument, NULL, 'R' },
        { "lean", no_argument, NULL, 'L' },
        { "plain", no_argument, NULL, 'N' },
        { "recipe", no_argument, NULL, 'C' },
        { "cold", no_argument, NULL, 'K' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct rb *rb = calloc(1, sizeof(*rb));
    int opt;
    long v;
    char *end;

    if (!rb)
        return 1;
    rb->nclients = 64;
    rb->nsessions = 1;
    rb->duration = 10;
    rb->warmup = 2;
    rb->resolve_delay_ms = -1;
    rb->lean = true;
    rb->out = OUT_TABLE;
    while ((opt = getopt_long(argc, argv, "c:S:d:w:o:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'Z': rb->hosts = optarg; break;
        case 'L': rb->lean = true; break;
        case 'N': rb->lean = false; break;
        case 'C': rb->recipe = true; break;
        case 'K': rb->cold = true; break;
        case 'R':
            rb->resolve_delay_ms = (int)strtol(optarg, &end, 10);
            if (!*optarg || *end || rb->resolve_delay_ms < -1)
                goto bad;
            break;
        case 'c':
        case 'S':
        case 'Q':
            v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < (opt == 'c') || v > 100000)
                goto bad;
            if (opt == 'c')
                rb->nclients = (unsigned)v;
            else if (opt == 'S')
                rb->nsessions = (unsigned)v;
            else
                rb->zk_pid = (pid_t)v;
            break;
        case 'd':
        case 'w': {
            double x = strtod(optarg, &end);
            if (!*optarg || *end || !(x >= 0) || x > 86400 || (opt == 'd' && x == 0))
                goto bad;
            if (opt == 'd')
                rb->duration = x;
            else
                rb->warmup = x;
            break;
        }
        case 'o':
            if (out_parse_mode(optarg, &rb->out) < 0)
                goto bad;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !rb->hosts || (rb->cold && !rb->recipe)) {
bad:
        usage(stderr);
        return 2;
    }
    if (rb->nsessions == 0 || rb->nsessions > rb->nclients)
        rb->nsessions = rb->nclients;
    raise_nofile(rb->nsessions + 64);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    snprintf(rb->parent, sizeof(rb->parent), "/zk-raw-bench-%d", (int)getpid());

    if (!(rb->base = event_base_new()) || !(rb->timer = evtimer_new(rb->base, NULL, NULL)) ||
        !(rb->kick = event_new(rb->base, -1, 0, on_kick, rb)) ||
        !(rb->sessions = calloc(rb->nsessions, sizeof(*rb->sessions))) ||
        !(rb->clients = calloc(rb->nclients, sizeof(*rb->clients)))) {
        fprintf(stderr, "zk_raw_bench: out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < rb->nsessions; i++) {
        struct session *s = &rb->sessions[i];
        s->rb = rb;
        if (!(s->io = event_new(rb->base, -1, 0, on_io, s)) ||
            !(s->zh = zookeeper_init(rb->hosts, on_session_event, 30000, NULL, s, 0))) {
            fprintf(stderr, "zk_raw_bench: cannot start a ZooKeeper session\n");
            return 1;
        }
        /* By default the client resolves the host names again on every
         * zookeeper_interest() call: a getaddrinfo() per loop iteration. */
        zoo_set_servers_resolution_delay(s->zh, rb->resolve_delay_ms);
        session_rearm(s);
    }
    for (unsigned i = 0; i < rb->nclients; i++) {
        rb->clients[i].rb = rb;
        rb->clients[i].idx = i;
        rb->clients[i].s = &rb->sessions[i % rb->nsessions];
    }
    rb_timer(rb, 20, on_connect_timeout, rb);
    event_base_dispatch(rb->base);

    for (unsigned i = 0; i < rb->nsessions; i++) {
        event_free(rb->sessions[i].io);
        zookeeper_close(rb->sessions[i].zh);
    }
    if (rb->failure) {
        fprintf(stderr, "zk_raw_bench: %s%s%s\n", rb->failure, rb->first_rc ? ": " : "",
                rb->first_rc ? zerror(rb->first_rc) : "");
        return 1;
    }
    report(rb);
    return 0;
}
