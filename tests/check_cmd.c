/*
 * check_cmd.c - the command handlers without sockets.
 *
 * Requests go through cmd_dispatch() as the transport sends them; a fake
 * transport (struct client_io) keeps each client's replies as text. The
 * lock table runs on the embedded backend, with STATUS answered later by a
 * deferring query so that a parked STATUS can be cancelled. Timers run on
 * a real event_base, driven with EVLOOP_ONCE in bounded loops.
 */
#include "client.h"
#include "cmd.h"
#include "backend.h"
#include "lease.h"
#include "locks.h"
#include "log.h"
#include "context.h"
#include "settings.h"
#include "users.h"
#include "auth_budget.h"
#include "auth_pool.h"
#include "watch.h"
#include "session.h"

#include <check.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `openssl passwd -5 -salt ab secret` */
#define SHA256_SECRET "$5$ab$uBQPK5nh89waaCXDSRwBxzVzl.pS5fPkZnKN7HXbvj6"

/* ------------------------------------------------------------ fake transport */

struct fclient {
    struct client cl;          /* first: the io callbacks cast back */
    char out[65536];           /* replies not yet looked at */
    size_t len;
    unsigned suspends, resumes, quits, cuts;
    bool backed_up;
};

static struct fclient *fc(const struct client *c) { return (struct fclient *)c; }

static void fio_write(struct client *c, const char *line, size_t len, bool more)
{
    struct fclient *f = fc(c);

    ck_assert_uint_lt(f->len + len, sizeof(f->out));
    ck_assert_int_eq(line[len - 1], '\n');
    memcpy(f->out + f->len, line, len);
    f->len += len;
    f->out[f->len] = '\0';
}

static bool fio_backed_up(const struct client *c) { return fc(c)->backed_up; }
static void fio_suspend(struct client *c) { fc(c)->suspends++; }
static void fio_resume(struct client *c) { fc(c)->resumes++; }
static void fio_quit(struct client *c) { fc(c)->quits++; }

/* RESUME took this client's session: the transport detaches it and closes. */
static void fio_cut(struct client *c)
{
    fc(c)->cuts++;
    session_client_lost(c);
}

static const struct client_io fio = {
    .write = fio_write, .backed_up = fio_backed_up, .suspend = fio_suspend,
    .resume = fio_resume, .quit = fio_quit, .cut = fio_cut,
};

/* ------------------------------------------------------------ deferring STATUS */

struct fake_query {
    backend_query_cb cb;
    void *arg;
    bool cancelled;
};

static struct fake_query fq;
static struct backend_ops deferring_ops;
static const struct backend_ops *embedded_ops;

static struct backend_query *deferring_query(void *impl, const char *name,
                                             struct backend_queue_info *now,
                                             backend_query_cb cb, void *arg)
{
    fq = (struct fake_query){ cb, arg, false };
    return (struct backend_query *)&fq;
}

static void deferring_query_cancel(void *impl, struct backend_query *q)
{
    ((struct fake_query *)q)->cancelled = true;
}

/* ------------------------------------------------------------ fixtures */

static struct event_base *base;
static struct settings settings;
static struct backend *embedded;
static struct backend be;
static struct locks *t;
static struct leases *leases;
static struct users *users;
static struct server srv;
static struct fclient a, b;

static void client_start(struct fclient *f, uint64_t id, const char *peer)
{
    memset(f, 0, sizeof(*f));
    client_init(&f->cl, &srv, &fio, &cmd_owner_ops, id, peer);
}

static void setup(void)
{
    log_set_level(LOG_LVL_ERROR);
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    ck_assert_int_eq(settings_init(&settings), 0);
    embedded = backend_embedded_new();
    ck_assert_ptr_nonnull(embedded);
    embedded_ops = embedded->ops;
    deferring_ops = *embedded->ops;
    be = (struct backend){ embedded->ops, embedded->impl };
    t = locks_new(base, &be, settings.max_locks_per_client);
    ck_assert_ptr_nonnull(t);
    leases = leases_new(base, t, &be, settings.max_leases);
    ck_assert_ptr_nonnull(leases);
    memset(&srv, 0, sizeof(srv));
    srv.base = base;
    srv.settings = &settings;
    srv.locks = t;
    srv.leases = leases;
    srv.backend = &be;
    srv.daemon_id = "test-1-ab";
    TAILQ_INIT(&srv.conns);
    srv.watches = watches_new(base, t, &be, srv.daemon_id);
    ck_assert_ptr_nonnull(srv.watches);
    locks_set_observer(t, watches_lock_changed, srv.watches);
    srv.sessions = sessions_new(base, t);
    ck_assert_ptr_nonnull(srv.sessions);
    client_start(&a, 1, "127.0.0.1:1001");
    client_start(&b, 2, "127.0.0.1:1002");
}

static void teardown(void)
{
    sessions_free(srv.sessions);            /* the clients forget theirs */
    client_release_all(&a.cl, false);
    client_release_all(&b.cl, false);
    client_destroy(&a.cl);
    client_destroy(&b.cl);
    auth_pool_free(srv.auth_pool);          /* after the clients, which forgot their jobs */
    auth_budget_free(srv.auth_budget);
    locks_set_observer(t, NULL, NULL);
    watches_free(srv.watches);
    locks_free(t);
    leases_free(leases);
    embedded->ops->free(embedded->impl);
    users_free(users);
    users = NULL;
    settings_free(&settings);
    event_base_free(base);
}

/* With a users file: "ops" may use job-* and break deploy-*; "dev" dev-*. */
static void setup_users(void)
{
    static const char text[] = "ops:" SHA256_SECRET ":job-*, deploy-*, break=deploy-*\n"
                               "dev:" SHA256_SECRET ":dev-*\n";
    char err[256];

    setup();
    users = users_parse(text, strlen(text), "users", err, sizeof(err));
    ck_assert_msg(users != NULL, "%s", err);
    srv.users = users;
    srv.auth_pool = auth_pool_new(base, 1);
    ck_assert_ptr_nonnull(srv.auth_pool);
    srv.auth_budget = auth_budget_new();
    ck_assert_ptr_nonnull(srv.auth_budget);
}

/* ------------------------------------------------------------ helpers */

/* Sends one request line as the transport would: only while nothing is parked. */
static void send_line(struct fclient *f, const char *line)
{
    struct proto_req req;

    ck_assert_msg(!f->cl.pending, "%s sent while %s waits", line, f->cl.pending_cmd ?
                  proto_cmd_word(f->cl.pending_cmd) : "LOCK");
    ck_assert_int_eq(proto_parse(line, strlen(line), &req), PROTO_REQUEST);
    cmd_dispatch(&f->cl, &req);
}

/* The replies so far must be exactly want; they are then forgotten. */
static void ck_out(struct fclient *f, const char *want)
{
    ck_assert_str_eq(f->out, want);
    f->len = 0;
    f->out[0] = '\0';
}

/* The replies so far must start with prefix; returns the number after it. */
static uint64_t ck_out_num(struct fclient *f, const char *prefix)
{
    uint64_t v;
    char *end;

    ck_assert_msg(strncmp(f->out, prefix, strlen(prefix)) == 0, "'%s' does not start with '%s'",
                  f->out, prefix);
    v = strtoull(f->out + strlen(prefix), &end, 10);
    ck_assert_msg(end != f->out + strlen(prefix), "no number after '%s' in '%s'", prefix, f->out);
    f->len = 0;
    f->out[0] = '\0';
    return v;
}

static void on_sentinel(evutil_socket_t fd, short what, void *arg) { *(bool *)arg = true; }

/* Runs the loop until f has a reply, or 3 s passed (then fails). */
static void run_until_reply(struct fclient *f)
{
    bool fired = false;
    struct event *ev = evtimer_new(base, on_sentinel, &fired);
    struct timeval tv = { 3, 0 };

    ck_assert_int_eq(evtimer_add(ev, &tv), 0);
    while (!fired && f->len == 0)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(ev);
    ck_assert_msg(f->len > 0, "no reply came");
}

/* Runs the loop until a timer of ms fired: whatever was due earlier ran. */
static void run_past_ms(int ms)
{
    bool fired = false;
    struct event *ev = evtimer_new(base, on_sentinel, &fired);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

    ck_assert_int_eq(evtimer_add(ev, &tv), 0);
    while (!fired)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(ev);
}

static unsigned lines(const char *s, const char *prefix)
{
    unsigned n = 0;

    for (const char *p = s; *p; p = strchr(p, '\n') + 1) {
        n += strncmp(p, prefix, strlen(prefix)) == 0;
        if (!strchr(p, '\n'))
            break;
    }
    return n;
}

/* ------------------------------------------------------------ tests */

START_TEST(ping_help_quit)
{
    send_line(&a, "PING");
    ck_out(&a, "PONG\n");
    send_line(&a, "HELP");
    ck_assert_uint_eq(lines(a.out, "HELP "), PROTO_CMD_COUNT);
    ck_assert_ptr_nonnull(strstr(a.out, "HELP PING - answer PONG\nHELP QUIT"));
    ck_assert_str_eq(a.out + a.len - 4, "END\n");
    a.len = 0;
    send_line(&a, "QUIT");
    ck_out(&a, "BYE\n");
    ck_assert_uint_eq(a.quits, 1);
}
END_TEST

START_TEST(stats_count_commands)
{
    send_line(&a, "PING");
    send_line(&a, "PING");
    send_line(&a, "UNLOCK x");
    a.len = 0;
    send_line(&a, "STATS");
    ck_assert_ptr_nonnull(strstr(a.out, "STAT cmd_ping 2\n"));
    ck_assert_ptr_nonnull(strstr(a.out, "STAT cmd_unlock 1\n"));
    ck_assert_ptr_nonnull(strstr(a.out, "STAT cmd_stats 1\n"));
    ck_assert_ptr_nonnull(strstr(a.out, "STAT errors 1\n"));
    ck_assert_str_eq(a.out + a.len - 4, "END\n");
}
END_TEST

START_TEST(lock_wait_grant)
{
    uint64_t t1, t2;

    send_line(&a, "LOCK db");
    t1 = ck_out_num(&a, "OK db ");
    send_line(&b, "TRYLOCK db");
    ck_out(&b, "BUSY db\n");
    send_line(&b, "LOCK db");
    ck_out(&b, "");
    ck_assert(b.cl.pending != NULL);
    ck_assert_uint_eq(b.suspends, 1);
    ck_assert_str_eq(b.cl.pending_name, "db");
    send_line(&a, "UNLOCK db");
    ck_out(&a, "OK db\n");
    run_until_reply(&b);
    t2 = ck_out_num(&b, "OK db ");
    ck_assert_uint_gt(t2, t1);
    ck_assert(b.cl.pending == NULL);
    ck_assert_uint_eq(b.resumes, 1);
}
END_TEST

START_TEST(lock_wait_timeout)
{
    send_line(&a, "LOCK db");
    ck_out_num(&a, "OK db ");
    send_line(&b, "LOCK db 50");
    ck_out(&b, "");
    run_until_reply(&b);
    ck_out(&b, "TIMEOUT db\n");
    ck_assert(b.cl.pending == NULL);
}
END_TEST

START_TEST(unlock_and_check_own_hold)
{
    uint64_t tok;
    char line[64];

    send_line(&a, "UNLOCK db");
    ck_out(&a, "ERR NOT_HELD this connection does not hold that lock\n");
    send_line(&a, "CHECK db");
    ck_out(&a, "ERR NOT_HELD this connection does not hold that lock\n");
    send_line(&a, "LOCK db");
    tok = ck_out_num(&a, "OK db ");
    snprintf(line, sizeof(line), "CHECK db %" PRIu64, tok);
    send_line(&a, line);
    snprintf(line, sizeof(line), "OK db %" PRIu64 " ", tok);
    ck_assert_uint_gt(ck_out_num(&a, line), 0);
    /* Another token is not this hold: a lease of that token, which there is not. */
    send_line(&a, "UNLOCK db 1");
    ck_out(&a, "ERR NOT_HELD no lease of that name with that token: the token is wrong, "
               "or the lease ended\n");
    snprintf(line, sizeof(line), "UNLOCK db %" PRIu64, tok);
    send_line(&a, line);
    ck_out(&a, "OK db\n");
}
END_TEST

START_TEST(lease_outlives_client)
{
    uint64_t tok;
    char line[64];

    send_line(&a, "LOCK job ttl=60000");
    tok = ck_out_num(&a, "OK job ");
    client_release_all(&a.cl, true);
    /* The lease is nobody's connection: another client ends it by token. */
    snprintf(line, sizeof(line), "RENEW job %" PRIu64 " 1000", tok);
    send_line(&b, line);
    ck_out(&b, "OK job\n");
    snprintf(line, sizeof(line), "UNLOCK job %" PRIu64, tok);
    send_line(&b, line);
    ck_out(&b, "OK job\n");
    send_line(&b, line);
    ck_out(&b, "ERR NOT_HELD no lease of that name with that token: the token is wrong, "
               "or the lease ended\n");
}
END_TEST

START_TEST(mode_conflicts)
{
    send_line(&a, "LOCK db shared");
    ck_out_num(&a, "OK db ");
    send_line(&a, "LOCK db");
    ck_out(&a, "ERR CONFLICT this connection holds that lock in another mode; UNLOCK it "
               "first (no upgrade or downgrade)\n");
    send_line(&b, "TRYLOCK db limit=2");
    ck_out(&b, "ERR CONFLICT the lock is in use without limit=; a semaphore needs a name "
               "that is not in use as a lock\n");
}
END_TEST

START_TEST(status_locks_holders)
{
    send_line(&a, "CLIENT web");
    ck_out(&a, "OK\n");
    send_line(&a, "LOCK db");
    ck_out_num(&a, "OK db ");
    send_line(&b, "LOCK db 60000");
    send_line(&a, "STATUS db");
    ck_assert_ptr_nonnull(strstr(a.out, "STATUS db held holder=test-1-ab/127.0.0.1:1001 "));
    ck_assert_ptr_nonnull(strstr(a.out, " waiters=1 queue=2 label=web\n"));
    a.len = 0;
    send_line(&a, "STATUS free1");
    ck_out(&a, "STATUS free1 free holder=- token=- since=- waiters=0 queue=0\n");
    send_line(&a, "LOCKS");
    ck_assert_ptr_nonnull(strstr(a.out, "LOCK db exclusive holder=test-1-ab/127.0.0.1:1001 "
                                        "label=web token="));
    ck_assert_ptr_nonnull(strstr(a.out, " holders=1 waiters=1 waited="));  /* then ms */
    a.len = 0;
    send_line(&a, "HOLDERS d*");
    ck_assert_uint_eq(lines(a.out, "HOLDER db exclusive held holder=test-1-ab/127.0.0.1:1001 "
                                   "label=web token="), 1);
    ck_assert_uint_eq(lines(a.out, "HOLDER db exclusive queued holder=test-1-ab/127.0.0.1:1002 "
                                   "label=- token=- since="), 1);
    ck_assert_str_eq(a.out + a.len - 4, "END\n");
    a.len = 0;
    send_line(&a, "LOCKS x*");
    ck_out(&a, "END\n");
}
END_TEST

START_TEST(status_parked_and_cancelled)
{
    deferring_ops.query = deferring_query;
    deferring_ops.query_cancel = deferring_query_cancel;
    be.ops = &deferring_ops;
    send_line(&a, "STATUS db");
    ck_out(&a, "");
    ck_assert(a.cl.pending != NULL);
    ck_assert_uint_eq(a.cl.pending_cmd, PROTO_CMD_STATUS);
    /* The answer comes: the line, then the client reads on. */
    fq.cb(fq.arg, &(struct backend_queue_info){ .ok = true, .holder = "-", .since_ms = -1,
                                                 .lease_ms = -1 });
    ck_out(&a, "STATUS db free holder=- token=- since=- waiters=0 queue=0\n");
    ck_assert(a.cl.pending == NULL);
    ck_assert_uint_eq(a.resumes, 1);
    /* Parked again, then the client goes: the query is cancelled, in one place. */
    send_line(&a, "STATUS db");
    ck_assert(!fq.cancelled);
    client_release_all(&a.cl, true);
    ck_assert(fq.cancelled);
    ck_assert(a.cl.pending == NULL);
    be.ops = embedded_ops;
}
END_TEST

static const char *config_error_text;

static const char *fake_config_error(void *impl)
{
    return config_error_text;
}

START_TEST(unavailable_status)
{
    char longer[1000], want[PROTO_REPLY_MAX];

    deferring_ops.query = deferring_query;
    deferring_ops.config_error = fake_config_error;
    be.ops = &deferring_ops;
    config_error_text = NULL;
    send_line(&a, "STATUS db");
    fq.cb(fq.arg, &(struct backend_queue_info){ .ok = false });
    ck_out(&a, "ERR UNAVAILABLE the lock service is not reachable; retry later\n");
    /* Not an outage but a setting to change: the client is told which. */
    config_error_text = "[zookeeper] nonfair is 'a*' here but 'b*' on daemon d2; change it";
    send_line(&a, "STATUS db");
    fq.cb(fq.arg, &(struct backend_queue_info){ .ok = false });
    ck_out(&a, "ERR UNAVAILABLE [zookeeper] nonfair is 'a*' here but 'b*' on daemon d2; "
               "change it\n");
    /* A reason longer than a reply line is cut, and says so. */
    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    config_error_text = longer;
    send_line(&a, "STATUS db");
    fq.cb(fq.arg, &(struct backend_queue_info){ .ok = false });
    snprintf(want, sizeof(want), "ERR UNAVAILABLE %.*s...\n", PROTO_REPLY_MAX - 28, longer);
    ck_out(&a, want);
    config_error_text = NULL;
    be.ops = embedded_ops;
}
END_TEST

START_TEST(close_cancels_parked_lock)
{
    send_line(&a, "LOCK db");
    ck_out_num(&a, "OK db ");
    send_line(&b, "LOCK db");
    ck_assert(b.cl.pending != NULL);
    client_release_all(&b.cl, true);
    ck_assert(b.cl.pending == NULL);
    send_line(&a, "STATUS db");
    ck_assert_ptr_nonnull(strstr(a.out, " waiters=0 queue=1\n"));
    a.len = 0;
    send_line(&a, "UNLOCK db");
    ck_out(&a, "OK db\n");
    run_past_ms(20);
    ck_out(&b, "");
}
END_TEST

START_TEST(end_of_input_ends_lock_wait)
{
    send_line(&a, "LOCK db");
    ck_out_num(&a, "OK db ");
    send_line(&b, "LOCK db");
    b.cl.input_ended = true;
    client_input_ended(&b.cl);
    ck_out(&b, "TIMEOUT db\n");
    ck_assert(b.cl.pending == NULL);
    /* A LOCK sent after the end of input (it came before it) ends at once too. */
    send_line(&b, "LOCK db");
    ck_out(&b, "TIMEOUT db\n");
    ck_assert(b.cl.pending == NULL);
    ck_assert_uint_eq(b.suspends, 2);
    ck_assert_uint_eq(b.resumes, 2);
}
END_TEST

START_TEST(set_steps_in_order)
{
    send_line(&a, "LOCK b");
    ck_out_num(&a, "OK b ");
    /* c,a,b is taken as a, b, c: a now, b after a's UNLOCK, then c. */
    send_line(&b, "LOCK c,a,b");
    ck_out(&b, "");
    ck_assert_str_eq(b.cl.pending_name, "b");
    send_line(&a, "STATUS a");
    ck_assert_ptr_nonnull(strstr(a.out, "STATUS a held holder=test-1-ab/127.0.0.1:1002 "));
    a.len = 0;
    send_line(&a, "STATUS c");
    ck_assert_ptr_nonnull(strstr(a.out, "STATUS c free "));
    a.len = 0;
    send_line(&a, "UNLOCK b");
    ck_out(&a, "OK b\n");
    run_until_reply(&b);
    ck_out_num(&b, "OK c,a,b ");
    ck_assert(b.cl.pending == NULL);
    send_line(&b, "UNLOCK a,b,c");
    ck_out(&b, "OK a,b,c\n");
}
END_TEST

START_TEST(set_unwinds)
{
    send_line(&a, "LOCK b");
    ck_out_num(&a, "OK b ");
    send_line(&b, "TRYLOCK a,b,c");
    ck_out(&b, "BUSY a,b,c\n");
    send_line(&b, "LOCK a,b,c 30");
    ck_out(&b, "");
    run_until_reply(&b);
    ck_out(&b, "TIMEOUT a,b,c\n");
    /* a, taken before b's wait, was given back each time. */
    send_line(&a, "STATUS a");
    ck_out(&a, "STATUS a free holder=- token=- since=- waiters=0 queue=0\n");
    send_line(&b, "UNLOCK a,b");
    ck_out(&b, "ERR NOT_HELD this connection does not hold a; nothing was released\n");
}
END_TEST

START_TEST(set_cancelled_by_close)
{
    send_line(&a, "LOCK b");
    ck_out_num(&a, "OK b ");
    send_line(&b, "LOCK a,b");
    ck_assert(b.cl.pending == &lockset_ops);
    client_release_all(&b.cl, true);
    ck_assert(b.cl.pending == NULL);
    send_line(&a, "STATUS a");
    ck_out(&a, "STATUS a free holder=- token=- since=- waiters=0 queue=0\n");
}
END_TEST

START_TEST(set_end_of_input)
{
    send_line(&a, "LOCK b");
    ck_out_num(&a, "OK b ");
    send_line(&b, "LOCK a,b");
    b.cl.input_ended = true;
    client_input_ended(&b.cl);
    ck_out(&b, "TIMEOUT a,b\n");
    ck_assert(b.cl.pending == NULL);
    send_line(&a, "STATUS a");
    ck_out(&a, "STATUS a free holder=- token=- since=- waiters=0 queue=0\n");
}
END_TEST

START_TEST(watch_events)
{
    send_line(&a, "WATCH db");
    ck_out(&a, "OK db\n");
    run_until_reply(&a);
    ck_out(&a, "EVENT db free\n");
    send_line(&b, "CLIENT job");
    ck_out(&b, "OK\n");
    send_line(&b, "LOCK db");
    ck_out_num(&b, "OK db ");
    run_until_reply(&a);
    ck_out_num(&a, "EVENT db held ");
    /* Backed up: the latest line waits for client_drained(). */
    a.backed_up = true;
    send_line(&b, "UNLOCK db");
    run_past_ms(20);
    ck_out(&a, "");
    a.backed_up = false;
    client_drained(&a.cl);
    ck_out(&a, "EVENT db free\n");
    send_line(&a, "UNWATCH db");
    ck_out(&a, "OK db\n");
    send_line(&a, "UNWATCH db");
    ck_out(&a, "OK db\n");
}
END_TEST

/* A hold kept for its lock-delay after its client went: LOCKS says how
 * long is left (delay=), and STATUS, LOCKS and WATCH go on naming it by
 * its label rather than "-" (issue 29, item 5). */
START_TEST(abandoned_hold_keeps_label)
{
    char want[256];
    uint64_t token;

    send_line(&a, "WATCH db");
    ck_out(&a, "OK db\n");
    run_until_reply(&a);
    ck_out(&a, "EVENT db free\n");
    send_line(&b, "CLIENT job@h:7:backup");
    ck_out(&b, "OK\n");
    send_line(&b, "LOCK db delay=60000");
    token = ck_out_num(&b, "OK db ");
    run_until_reply(&a);
    snprintf(want, sizeof(want), "EVENT db held %" PRIu64 " holders=1 label=job@h:7:backup "
             "holder=test-1-ab/127.0.0.1:1002 mode=exclusive\n", token);
    ck_out(&a, want);
    client_release_all(&b.cl, true);          /* the connection dropped */
    run_past_ms(20);
    ck_out(&a, "");                           /* the same holder, the same line */
    send_line(&a, "LOCKS");
    snprintf(want, sizeof(want), "LOCK db exclusive holder=test-1-ab/127.0.0.1:1002 "
             "label=job@h:7:backup token=%" PRIu64 " since=", token);
    ck_assert_msg(strncmp(a.out, want, strlen(want)) == 0, "%s", a.out);
    ck_assert_msg(strstr(a.out, " holders=1 waiters=0 delay=") != NULL, "%s", a.out);
    ck_assert_str_eq(a.out + a.len - 5, "\nEND\n");
    a.len = 0;
    send_line(&a, "STATUS db");
    ck_assert_msg(strstr(a.out, " waiters=0 queue=1 delay=") != NULL, "%s", a.out);
    ck_assert_str_eq(a.out + a.len - strlen(" label=job@h:7:backup\n"), " label=job@h:7:backup\n");
    a.len = 0;
}
END_TEST

START_TEST(break_others_hold)
{
    send_line(&a, "LOCK db");
    ck_out_num(&a, "OK db ");
    send_line(&b, "BREAK db");
    ck_out(&b, "OK db\n");
    ck_out_num(&a, "LOST db ");
    send_line(&b, "BREAK db");
    ck_out(&b, "ERR NOT_HELD no hold of db through this daemon (a hold through another "
               "daemon is broken there: STATUS and HOLDERS name it)\n");
}
END_TEST

START_TEST(auth_flags)
{
    /* Before AUTH: PING, HELP and QUIT. */
    send_line(&a, "PING");
    ck_out(&a, "PONG\n");
    send_line(&a, "STATS");
    ck_out(&a, "ERR NOAUTH log in first with AUTH <user> <password> (only PING, HELP and "
               "QUIT work before)\n");
    send_line(&a, "LOCK job-1");
    ck_out(&a, "ERR NOAUTH log in first with AUTH <user> <password> (only PING, HELP and "
               "QUIT work before)\n");
    send_line(&a, "AUTH ops secret");
    ck_out(&a, "");                           /* hashed off the loop */
    run_until_reply(&a);
    ck_out(&a, "OK ops\n");
    /* Names: every name of a set. */
    send_line(&a, "LOCK job-1");
    ck_out_num(&a, "OK job-1 ");
    send_line(&a, "LOCK job-2,dev-1");
    ck_out(&a, "ERR DENIED user ops may not use lock dev-1\n");
    send_line(&a, "STATUS dev-1");
    ck_out(&a, "ERR DENIED user ops may not use lock dev-1\n");
    /* A plain UNLOCK touches only the client's own hold: no pattern needed. */
    send_line(&a, "UNLOCK dev-1");
    ck_out(&a, "ERR NOT_HELD this connection does not hold that lock\n");
    send_line(&a, "UNLOCK dev-1 5");
    ck_out(&a, "ERR DENIED user ops may not use lock dev-1\n");
    /* BREAK needs break=, even for a name the user may use. */
    send_line(&a, "BREAK job-1");
    ck_out(&a, "ERR DENIED user ops may not break lock job-1 (no break= pattern for it)\n");
    send_line(&a, "BREAK deploy-x");
    ck_assert_ptr_nonnull(strstr(a.out, "ERR NOT_HELD no hold of deploy-x"));
    a.len = 0;
    /* Listings leave out what the user may not use. */
    send_line(&b, "AUTH dev secret");
    run_until_reply(&b);
    ck_out(&b, "OK dev\n");
    send_line(&b, "LOCK dev-1");
    ck_out_num(&b, "OK dev-1 ");
    send_line(&a, "LOCKS");
    ck_assert_uint_eq(lines(a.out, "LOCK job-1 "), 1);
    ck_assert_uint_eq(lines(a.out, "LOCK dev-1 "), 0);
    a.len = 0;
    send_line(&a, "HOLDERS");
    ck_assert_uint_eq(lines(a.out, "HOLDER "), 1);
}
END_TEST

START_TEST(auth_failure_is_delayed)
{
    send_line(&a, "AUTH ops wrong");
    ck_out(&a, "");
    ck_assert(a.cl.pending != NULL);
    ck_assert_uint_eq(a.cl.pending_cmd, PROTO_CMD_AUTH);
    run_until_reply(&a);
    ck_out(&a, "ERR AUTH_FAILED wrong user name or password\n");
    ck_assert(a.cl.pending == NULL);
    ck_assert(a.cl.user == NULL);
    /* A parked failure is cancelled by the close. */
    send_line(&a, "AUTH nobody x");
    client_release_all(&a.cl, true);
    ck_assert(a.cl.pending == NULL);
    ck_assert_uint_eq(auth_pool_jobs(srv.auth_pool), 0);     /* its job was forgotten */
    run_past_ms(1100);
    ck_out(&a, "");
    /* 127.0.0.1 is remembered for its one failure, not for the dropped check. */
    ck_assert_uint_eq(auth_budget_count(srv.auth_budget), 1);
}
END_TEST

/* An unknown user's password is hashed like a known one's (the dummy
 * hash), and the budgets answer before any hashing. */
START_TEST(auth_budgets)
{
    settings.auth_fail_limit = 2;
    send_line(&a, "AUTH nobody x");
    run_until_reply(&a);
    ck_out(&a, "ERR AUTH_FAILED wrong user name or password\n");
    ck_assert_uint_eq(srv.stats.auth_checks, 1);
    ck_assert_uint_eq(srv.stats.auth_failures, 1);
    /* Daemon-wide: b's AUTH waits for the pool, a's is one too many. */
    settings.auth_max_pending = 1;
    send_line(&b, "AUTH ops wrong");
    send_line(&a, "AUTH ops secret");
    ck_out(&a, "ERR LIMIT too many AUTH requests being checked (at most 1): try again later\n");
    run_until_reply(&b);
    ck_out(&b, "ERR AUTH_FAILED wrong user name or password\n");
    /* Two failures from 127.0.0.1 now: with a limit of 2, a back-off. */
    settings.auth_max_pending = 64;
    send_line(&a, "AUTH ops secret");
    run_until_reply(&a);
    ck_out(&a, "ERR AUTH_FAILED too many failed logins from this address: try again later\n");
    ck_assert_uint_eq(srv.stats.auth_backoffs, 1);
    ck_assert_uint_eq(srv.stats.auth_checks, 2);              /* not hashed */
    ck_assert_uint_eq(srv.stats.auth_busy, 1);
}
END_TEST

START_TEST(auth_budget_table)
{
    struct auth_budget *bu = auth_budget_new();
    struct auth_limits lim = { 2, 3, 1000 };
    char addr[AUTH_BUDGET_ADDR_MAX];

    auth_budget_addr("10.1.2.3:4567", addr);
    ck_assert_str_eq(addr, "10.1.2.3");
    auth_budget_addr("[::1]:7411", addr);
    ck_assert_str_eq(addr, "::1");
    auth_budget_addr("unix", addr);
    ck_assert_str_eq(addr, "unix");
    /* Checks at once. */
    ck_assert_int_eq(auth_budget_admit(bu, "a", &lim, 0), AUTH_ADMIT_OK);
    ck_assert_int_eq(auth_budget_admit(bu, "a", &lim, 0), AUTH_ADMIT_OK);
    ck_assert_int_eq(auth_budget_admit(bu, "a", &lim, 0), AUTH_ADMIT_BUSY);
    ck_assert_int_eq(auth_budget_admit(bu, "b", &lim, 0), AUTH_ADMIT_OK);
    auth_budget_done(bu, "a", 0);
    auth_budget_done(bu, "a", 0);
    auth_budget_done(bu, "b", 0);
    ck_assert_uint_eq(auth_budget_count(bu), 0);
    /* Failures within the window start a back-off; older ones do not count. */
    ck_assert(!auth_budget_failed(bu, "a", &lim, 0));
    ck_assert(!auth_budget_failed(bu, "a", &lim, 500));
    ck_assert(!auth_budget_failed(bu, "a", &lim, 1000));     /* a new window */
    ck_assert(!auth_budget_failed(bu, "a", &lim, 1100));
    ck_assert(auth_budget_failed(bu, "a", &lim, 1200));
    ck_assert_int_eq(auth_budget_admit(bu, "a", &lim, 2199), AUTH_ADMIT_BACKOFF);
    ck_assert_int_eq(auth_budget_admit(bu, "b", &lim, 2199), AUTH_ADMIT_OK);
    ck_assert_int_eq(auth_budget_admit(bu, "a", &lim, 2200), AUTH_ADMIT_OK);
    auth_budget_done(bu, "a", 2200);
    auth_budget_done(bu, "b", 2200);
    ck_assert_uint_eq(auth_budget_count(bu), 0);
    /* 0: no back-off. */
    lim.fail_limit = 0;
    for (int i = 0; i < 10; i++)
        ck_assert(!auth_budget_failed(bu, "a", &lim, 3000));
    auth_budget_free(bu);
}
END_TEST

START_TEST(auth_without_users)
{
    send_line(&a, "AUTH ops secret");
    ck_out(&a, "ERR AUTH_FAILED this daemon has no users_file: AUTH is not used\n");
}
END_TEST

START_TEST(limit_per_client)
{
    settings.max_locks_per_client = 2;
    locks_set_max_per_client(t, 2);
    send_line(&a, "LOCK a");
    ck_out_num(&a, "OK a ");
    send_line(&a, "LOCK x,y");
    ck_out(&a, "ERR LIMIT this connection already holds or awaits 2 locks\n");
    send_line(&a, "LOCK b");
    ck_out_num(&a, "OK b ");
    send_line(&a, "LOCK c");
    ck_out(&a, "ERR LIMIT this connection already holds or awaits 2 locks\n");
}
END_TEST

START_TEST(unlock_keep)
{
    uint64_t t1, t2;

    send_line(&a, "LOCK db");
    t1 = ck_out_num(&a, "OK db ");
    send_line(&a, "UNLOCK db keep=150");
    ck_out(&a, "OK db\n");
    /* Released by the client, held by the daemon: nobody is granted it. */
    send_line(&a, "CHECK db");
    ck_out(&a, "ERR NOT_HELD this connection does not hold that lock\n");
    send_line(&b, "TRYLOCK db");
    ck_out(&b, "BUSY db\n");
    send_line(&b, "STATUS db");
    ck_assert_ptr_nonnull(strstr(b.out, "STATUS db held holder=test-1-ab/127.0.0.1:1001 "));
    ck_assert_ptr_nonnull(strstr(b.out, " delay="));
    b.len = 0;
    send_line(&b, "LOCK db");
    run_until_reply(&b);
    t2 = ck_out_num(&b, "OK db ");
    ck_assert_uint_gt(t2, t1);
    send_line(&b, "STATS");
    ck_assert_ptr_nonnull(strstr(b.out, "STAT locks_kept 1\n"));
    b.len = 0;
    /* keep=0 releases at once; a re-entered hold stays the client's. */
    send_line(&b, "UNLOCK db keep=0");
    ck_out(&b, "OK db\n");
    send_line(&a, "TRYLOCK db");
    ck_out_num(&a, "OK db ");
    send_line(&a, "LOCK db");
    ck_out_num(&a, "OK db ");
    send_line(&a, "UNLOCK db keep=60000");
    ck_out(&a, "OK db\n");
    send_line(&a, "CHECK db");
    ck_out_num(&a, "OK db ");
}
END_TEST

START_TEST(unlock_keep_not_for_leases)
{
    uint64_t tok;
    char line[64];

    send_line(&a, "LOCK job ttl=60000");
    tok = ck_out_num(&a, "OK job ");
    snprintf(line, sizeof(line), "UNLOCK job %" PRIu64 " keep=100", tok);
    send_line(&a, line);
    ck_out(&a, "ERR BAD_ARGS keep= releases this connection's own hold later; a lease is kept "
               "longer with RENEW\n");
    snprintf(line, sizeof(line), "UNLOCK job %" PRIu64, tok);
    send_line(&a, line);
    ck_out(&a, "OK job\n");
}
END_TEST

START_TEST(set_unlock_keep)
{
    send_line(&a, "LOCK x,y");
    ck_out_num(&a, "OK x,y ");
    send_line(&a, "UNLOCK x,y keep=60000");
    ck_out(&a, "OK x,y\n");
    send_line(&b, "TRYLOCK y");
    ck_out(&b, "BUSY y\n");
    send_line(&b, "TRYLOCK x");
    ck_out(&b, "BUSY x\n");
}
END_TEST

/* ------------------------------------------------------------ the table */

/* Every command has a handler, and a set handler exactly when it takes a
 * set: cmd_dispatch calls them without looking. */
START_TEST(table_has_every_handler)
{
    for (int cmd = 0; cmd < PROTO_CMD_COUNT; cmd++) {
        bool sets = proto_cmd_takes((enum proto_cmd)cmd, PROTO_ARG_NAMES);

        ck_assert_msg(cmd_table[cmd].handler != NULL, "%s has no handler",
                      proto_cmd_word((enum proto_cmd)cmd));
        ck_assert_msg((cmd_table[cmd].set_handler != NULL) == sets, "%s: %s",
                      proto_cmd_word((enum proto_cmd)cmd),
                      sets ? "takes a set but has no set handler"
                           : "has a set handler but takes no set");
    }
}
END_TEST

/* GRACE on f: fills id and secret from its reply. */
static void grace(struct fclient *f, const char *line, char *id, char *secret)
{
    send_line(f, line);
    ck_assert_int_eq(sscanf(f->out, "OK %16s %32s\n", id, secret), 2);
    ck_assert_uint_eq(strlen(id), 16);
    ck_assert_uint_eq(strlen(secret), 32);
    ck_assert_uint_eq(strlen(f->out), 3 + 16 + 1 + 32 + 1);
    f->len = 0;
    f->out[0] = '\0';
}

static struct sessions_stats session_stats(void)
{
    struct sessions_stats st;

    sessions_get_stats(srv.sessions, &st);
    return st;
}

START_TEST(session_detach_resume_expire)
{
    char id[17], secret[33], line[128], want[128];
    struct fclient c, d;
    uint64_t token, window, plain;

    client_start(&c, 3, "127.0.0.1:1003");
    client_start(&d, 4, "127.0.0.1:1004");
    send_line(&a, "GRACE 99");
    ck_out(&a, "ERR BAD_ARGS grace must be an integer from 100 to 60000\n");
    grace(&a, "GRACE 200", id, secret);
    send_line(&a, "GRACE 200");
    ck_out(&a, "ERR CONFLICT this connection already has a session\n");
    send_line(&a, "CLIENT job");
    ck_out(&a, "OK\n");
    send_line(&a, "LOCK x");
    token = ck_out_num(&a, "OK x ");
    send_line(&a, "LOCK x");
    ck_out_num(&a, "OK x ");
    send_line(&a, "CHECK x");
    snprintf(want, sizeof(want), "OK x %" PRIu64 " ", token);
    window = ck_out_num(&a, want);
    send_line(&d, "LOCK p");
    plain = ck_out_num(&d, "OK p ");
    send_line(&d, "CHECK p");
    snprintf(want, sizeof(want), "OK p %" PRIu64 " ", plain);
    plain = ck_out_num(&d, want);
    ck_assert_uint_gt(window, plain);          /* the grace counts */
    send_line(&b, "LOCK x");
    ck_assert_ptr_nonnull(b.cl.pending);

    /* The connection drops: its holds are the session's, b still waits. */
    session_client_lost(&a.cl);
    ck_assert_ptr_null(a.cl.session);
    ck_assert_uint_eq(a.cl.owner.nholds, 0);
    ck_assert_uint_eq(session_stats().detached, 1);
    send_line(&c, "STATUS x");
    ck_assert_msg(strstr(c.out, " detached=") && strstr(c.out, " label=job\n"), "%s", c.out);
    c.len = 0;
    ck_assert_ptr_nonnull(b.cl.pending);

    /* RESUME on c: the same token, still held twice. */
    snprintf(line, sizeof(line), "RESUME %s %032x", id, 7);
    send_line(&c, line);
    ck_out(&c, "ERR NOT_HELD no session with that id and secret on this daemon (its grace ran "
               "out, it ended, or the secret is wrong)\n");
    snprintf(line, sizeof(line), "RESUME %s %s", id, secret);
    send_line(&c, line);
    snprintf(want, sizeof(want), "OK %s 1\n", id);
    ck_out(&c, want);
    send_line(&c, "UNLOCK x");
    ck_out(&c, "OK x\n");
    send_line(&c, "CHECK x");
    snprintf(want, sizeof(want), "OK x %" PRIu64 " ", token);
    ck_out_num(&c, want);
    ck_assert_uint_eq(session_stats().resumed, 1);

    /* RESUME while attached: c is cut, d has the holds. */
    snprintf(line, sizeof(line), "RESUME %s %s", id, secret);
    send_line(&d, line);
    snprintf(want, sizeof(want), "ERR CONFLICT this connection holds or awaits locks or has a "
                                 "session; RESUME on a new connection\n");
    ck_out(&d, want);
    send_line(&d, "UNLOCK p");
    ck_out(&d, "OK p\n");
    send_line(&d, line);
    snprintf(want, sizeof(want), "OK %s 1\n", id);
    ck_out(&d, want);
    ck_assert_uint_eq(c.cuts, 1);
    ck_assert_uint_eq(c.len, 0);               /* no reply to the cut one */
    ck_assert_ptr_null(c.cl.session);
    ck_assert_ptr_nonnull(d.cl.session);

    /* Dropped again, never back: b is granted once the grace is over. */
    session_client_lost(&d.cl);
    ck_assert_uint_eq(b.len, 0);
    run_until_reply(&b);
    ck_assert_uint_ne(ck_out_num(&b, "OK x "), token);
    ck_assert_uint_eq(session_stats().expired, 1);
    ck_assert_uint_eq(session_stats().current, 0);
    send_line(&c, line);
    ck_out(&c, "ERR NOT_HELD no session with that id and secret on this daemon (its grace ran "
               "out, it ended, or the secret is wrong)\n");
    client_release_all(&c.cl, false);
    client_release_all(&d.cl, false);
    client_destroy(&c.cl);
    client_destroy(&d.cl);
}
END_TEST

/* A set being taken at the drop: its names taken so far are released, not
 * detached; a session left holding nothing ends. */
START_TEST(session_drop_during_a_set)
{
    char id[17], secret[33];

    send_line(&b, "LOCK s2");
    ck_out_num(&b, "OK s2 ");
    grace(&a, "GRACE 60000", id, secret);
    send_line(&a, "LOCK s1,s2");
    ck_assert_ptr_nonnull(a.cl.pending);
    session_client_lost(&a.cl);
    ck_assert_uint_eq(a.cl.owner.nholds, 0);
    ck_assert_uint_eq(session_stats().current, 0);   /* it held nothing */
    send_line(&b, "STATUS s1");
    ck_assert_msg(strncmp(b.out, "STATUS s1 free ", 15) == 0, "%s", b.out);
}
END_TEST

static Suite *cmd_suite(void)
{
    Suite *s = suite_create("cmd");
    TCase *tc = tcase_create("handlers");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, ping_help_quit);
    tcase_add_test(tc, stats_count_commands);
    tcase_add_test(tc, lock_wait_grant);
    tcase_add_test(tc, lock_wait_timeout);
    tcase_add_test(tc, unlock_and_check_own_hold);
    tcase_add_test(tc, lease_outlives_client);
    tcase_add_test(tc, mode_conflicts);
    tcase_add_test(tc, status_locks_holders);
    tcase_add_test(tc, status_parked_and_cancelled);
    tcase_add_test(tc, unavailable_status);
    tcase_add_test(tc, close_cancels_parked_lock);
    tcase_add_test(tc, end_of_input_ends_lock_wait);
    tcase_add_test(tc, watch_events);
    tcase_add_test(tc, abandoned_hold_keeps_label);
    tcase_add_test(tc, break_others_hold);
    tcase_add_test(tc, auth_without_users);
    tcase_add_test(tc, limit_per_client);
    tcase_add_test(tc, unlock_keep);
    tcase_add_test(tc, unlock_keep_not_for_leases);
    tcase_add_test(tc, session_detach_resume_expire);
    tcase_add_test(tc, session_drop_during_a_set);
    suite_add_tcase(s, tc);

    tc = tcase_create("sets");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, set_steps_in_order);
    tcase_add_test(tc, set_unwinds);
    tcase_add_test(tc, set_cancelled_by_close);
    tcase_add_test(tc, set_end_of_input);
    tcase_add_test(tc, set_unlock_keep);
    suite_add_tcase(s, tc);

    tc = tcase_create("permissions");
    tcase_add_checked_fixture(tc, setup_users, teardown);
    tcase_add_test(tc, auth_flags);
    tcase_add_test(tc, auth_failure_is_delayed);
    tcase_add_test(tc, auth_budgets);
    tcase_add_test(tc, auth_budget_table);
    suite_add_tcase(s, tc);

    tc = tcase_create("table");
    tcase_add_test(tc, table_has_every_handler);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cmd_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
