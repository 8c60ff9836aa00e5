/*
 * check_lease.c - leases (daemon/lease.c) over the lock table, without sockets.
 *
 * A minimal fake backend in the style of tests/check_locks.c: it grants at
 * once with its own counter (FAKE_GRANT) or leaves each acquisition to the
 * test (FAKE_MANUAL), leaves leases to lease.c's timers (ends_leases false)
 * and answers every lease_op NOT_HELD, as the embedded backend does. Fake
 * requesters record done() and lost(). Expiry timers run on a real
 * event_base driven with EVLOOP_ONCE until the awaited event fires, with a
 * guard timer so that a bug fails rather than hangs.
 */
#include "locks.h"
#include "lease.h"
#include "backend.h"
#include "fake_backend_stubs.h"
#include "log.h"

#include <check.h>
#include <event2/event.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_CAP 64
#define MAX_ACQ 32
#define MAX_RECS 16
#define MAX_LEASES 8       /* the set's cap unless a test sets another */
#define GUARD_MS 5000      /* the longest any awaited timer may take */

/* ------------------------------------------------------------ fake backend */

enum fake_mode {
    FAKE_GRANT,        /* acquire() grants before returning, tokens 1, 2, ... */
    FAKE_MANUAL,       /* acquire() returns WAITING; the test answers later */
};

struct acq {
    struct hold *hold;         /* valid only while the table keeps the hold */
    char name[NAME_CAP];
    char owner[NAME_CAP];      /* the hold's owner desc at acquire time */
    int64_t ttl_ms;
};

struct fake {
    struct backend be;
    enum fake_mode mode;
    uint64_t next_token;
    struct acq acqs[MAX_ACQ];
    int nacqs;
    int ncancels, nreleases;
    int nlease_ops;            /* lease_op calls: lease.c did not know the lease */
};

static enum locks_result fake_acquire(void *impl, struct hold *h, uint64_t *token)
{
    struct fake *f = impl;
    struct acq *a;

    ck_assert_int_lt(f->nacqs, MAX_ACQ);
    a = &f->acqs[f->nacqs++];
    a->hold = h;
    a->ttl_ms = hold_ttl_ms(h);
    snprintf(a->name, sizeof(a->name), "%s", hold_name(h));
    snprintf(a->owner, sizeof(a->owner), "%s", hold_owner_desc(h));
    if (f->mode == FAKE_MANUAL)
        return LOCKS_WAITING;
    *token = ++f->next_token;
    return LOCKS_GRANTED;
}

static void fake_reassign(void *impl, struct hold *h) { }
static void fake_cancel(void *impl, struct hold *h) { ((struct fake *)impl)->ncancels++; }
static void fake_release(void *impl, struct hold *h) { ((struct fake *)impl)->nreleases++; }

/* Like the embedded backend: a lease lease.c does not know is not held. */
static enum locks_result fake_lease_op(void *impl, const char *name, uint64_t token,
                                       int64_t ttl_ms, backend_lease_cb cb, void *arg,
                                       struct backend_lease_op **pending)
{
    ((struct fake *)impl)->nlease_ops++;
    return LOCKS_NOT_HELD;
}

static void fake_lease_op_cancel(void *impl, struct backend_lease_op *op)
{
    ck_abort_msg("nothing is ever pending");
}


static const struct backend_ops fake_ops = {
    .name = "fake",
    .acquire = fake_acquire,
    .reassign = fake_reassign,
    .cancel = fake_cancel,
    .release = fake_release,
    .stats = fake_stats,
    .histograms = fake_histograms,
    .query = fake_query,
    .query_cancel = fake_query_cancel,
    .ends_leases = false,
    .lease_op = fake_lease_op,
    .lease_op_cancel = fake_lease_op_cancel,
    .unreachable_since = fake_unreachable_since,
    .window_ms = fake_window_ms,
    .pass_on = fake_pass_on,
    .free = fake_free,
};

/* ------------------------------------------------------------ fake requesters */

enum rec_kind { REC_DONE, REC_LOST };

struct rec {
    enum rec_kind kind;
    char name[NAME_CAP];
    enum locks_result result;
    uint64_t token;
};

struct fclient {
    struct lock_owner c;        /* first: the callbacks cast back */
    struct rec recs[MAX_RECS];
    int nrecs;
};

static struct rec *client_record(struct lock_owner *c, enum rec_kind kind, const char *name)
{
    struct fclient *fc = (struct fclient *)c;
    struct rec *r;

    ck_assert_int_lt(fc->nrecs, MAX_RECS);
    r = &fc->recs[fc->nrecs++];
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    snprintf(r->name, sizeof(r->name), "%s", name);
    return r;
}

static void client_done(struct lock_owner *c, const char *name, enum locks_result res,
                        uint64_t token)
{
    struct rec *r = client_record(c, REC_DONE, name);

    r->result = res;
    r->token = token;
}

static void client_lost(struct lock_owner *c, const char *name, uint64_t token,
                        const char *reason)
{
    client_record(c, REC_LOST, name)->token = token;
}

static const struct lock_owner_ops client_ops = { .done = client_done, .lost = client_lost };

/* ------------------------------------------------------------ fixtures */

static struct event_base *base;
static struct fake fake;
static struct locks *t;
static struct leases *ls;
static struct fclient c1, c2, c3, c4;

static void setup(void)
{
    struct fclient *all[] = { &c1, &c2, &c3, &c4 };
    static const char *const peers[] = { "c1", "c2", "c3", "c4" };

    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    memset(&fake, 0, sizeof(fake));
    fake.be.ops = &fake_ops;
    fake.be.impl = &fake;
    fake.mode = FAKE_GRANT;
    t = locks_new(base, &fake.be, 4);
    ck_assert_ptr_nonnull(t);
    ls = leases_new(base, t, &fake.be, MAX_LEASES);
    ck_assert_ptr_nonnull(ls);
    for (int i = 0; i < 4; i++) {
        memset(all[i], 0, sizeof(*all[i]));
        lock_owner_init(&all[i]->c, &client_ops, peers[i]);
    }
}

static void setup_manual(void)
{
    setup();
    fake.mode = FAKE_MANUAL;
}

/* The daemon's order (daemon/main.c): the table first, then the leases. */
static void teardown(void)
{
    locks_free(t);
    t = NULL;
    leases_free(ls);
    ls = NULL;
    event_base_free(base);
    base = NULL;
}

/* ------------------------------------------------------------ helpers */

static struct leases_stats lstats(void)
{
    struct leases_stats st;

    leases_get_stats(ls, &st);
    return st;
}

static struct locks_stats tstats(void)
{
    struct locks_stats st;

    locks_get_stats(t, &st);
    return st;
}

static struct locks_status status(const char *name)
{
    struct locks_status st;

    locks_status(t, name, &st);
    return st;
}

/* Asks for name as a lease in mode m (limit: LOCK_LIMIT's n, else 0). */
static enum locks_result lease_as(struct fclient *c, const char *name, enum lock_mode m,
                                  unsigned limit, int64_t wait_ms, bool try, int64_t ttl_ms,
                                  uint64_t *token, struct lease **pending)
{
    struct lock_req req = { .mode = m, .limit = limit, .wait_ms = wait_ms, .try = try,
                            .ttl_ms = ttl_ms };
    uint64_t dummy_token = 0;
    struct lease *dummy_pending = NULL;

    return leases_lock(ls, &c->c, name, &req, token ? token : &dummy_token,
                       pending ? pending : &dummy_pending);
}

/* LOCK name ttl=ttl_ms (exclusive, waits for ever). */
static enum locks_result lease(struct fclient *c, const char *name, int64_t ttl_ms,
                               uint64_t *token, struct lease **pending)
{
    return lease_as(c, name, LOCK_EXCLUSIVE, 0, -1, false, ttl_ms, token, pending);
}

/* A connection's own lock (not a lease). */
static enum locks_result lock(struct fclient *c, const char *name, int64_t wait_ms,
                              uint64_t *token)
{
    struct lock_req req = { .mode = LOCK_EXCLUSIVE, .wait_ms = wait_ms };
    uint64_t dummy;

    return locks_lock(t, &c->c, name, &req, token ? token : &dummy);
}

static enum locks_result trylock(struct fclient *c, const char *name)
{
    struct lock_req req = { .mode = LOCK_EXCLUSIVE, .wait_ms = -1, .try = true };
    uint64_t dummy;

    return locks_lock(t, &c->c, name, &req, &dummy);
}

/* The callback of a lease_op that lease.c answers at once: must not run. */
static void op_cb(void *arg, enum locks_result r, int64_t left_ms)
{
    ck_abort_msg("lease_op answered later (%d)", r);
}

/* UNLOCK name token (ttl_ms 0), RENEW name token ttl_ms, or a check (LEASE_CHECK). */
static enum locks_result op(const char *name, uint64_t token, int64_t ttl_ms)
{
    struct backend_lease_op *pending = NULL;
    int64_t left_ms = -1;
    enum locks_result r = leases_op(ls, name, token, ttl_ms, op_cb, NULL, &pending, &left_ms);

    ck_assert_ptr_null(pending);
    return r;
}

static void ck_done(const struct fclient *c, int i, const char *name, enum locks_result r)
{
    ck_assert_int_gt(c->nrecs, i);
    ck_assert_int_eq(c->recs[i].kind, REC_DONE);
    ck_assert_str_eq(c->recs[i].name, name);
    ck_assert_int_eq(c->recs[i].result, r);
}

static void on_sentinel(evutil_socket_t fd, short what, void *arg) { *(bool *)arg = true; }

/*
 * Runs the loop until cond(arg) holds or a timer of guard_ms fired, and
 * returns cond(arg). Each EVLOOP_ONCE blocks until some timer is due, so
 * this waits on the timers themselves, never sleeps.
 */
static bool run_until(bool (*cond)(const void *arg), const void *arg, int guard_ms)
{
    bool fired = false;
    struct event *ev = evtimer_new(base, on_sentinel, &fired);
    struct timeval tv = { guard_ms / 1000, (guard_ms % 1000) * 1000 };

    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(evtimer_add(ev, &tv), 0);
    while (!cond(arg) && !fired)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(ev);
    return cond(arg);
}

static bool never(const void *arg) { return false; }

/* Runs every timer due within ms: one that did not fire by then did not
 * fire early. */
static void run_past_ms(int ms)
{
    run_until(never, NULL, ms);
}

static bool expired_reaches(const void *arg)
{
    return lstats().expired >= *(const uint64_t *)arg;
}

/* Runs the loop until n leases expired in all (within GUARD_MS). */
static void run_until_expired(uint64_t n)
{
    ck_assert_msg(run_until(expired_reaches, &n, GUARD_MS), "%llu expiries awaited, %llu seen",
                  (unsigned long long)n, (unsigned long long)lstats().expired);
}

struct recs_wanted {
    const struct fclient *c;
    int n;
};

static bool client_has_recs(const void *arg)
{
    const struct recs_wanted *w = arg;

    return w->c->nrecs >= w->n;
}

/* Runs the loop until c has n records (within GUARD_MS). */
static void run_until_recs(struct fclient *c, int n)
{
    struct recs_wanted w = { c, n };

    ck_assert_msg(run_until(client_has_recs, &w, GUARD_MS), "%d records awaited, %d seen", n,
                  c->nrecs);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ granting */

START_TEST(granted_at_once_findable_by_token)
{
    uint64_t token = 0;
    struct lease *pending = NULL;
    struct locks_status st;

    ck_assert_int_eq(lease(&c1, "a", 10000, &token, &pending), LOCKS_GRANTED);
    ck_assert_uint_eq(token, 1);
    ck_assert_ptr_null(pending);
    ck_assert_int_eq(c1.nrecs, 0);          /* answered by the return value only */
    ck_assert_uint_eq(c1.c.nholds, 0);      /* the hold is the lease's, not the requester's */
    ck_assert_int_eq(fake.nacqs, 1);
    ck_assert_str_eq(fake.acqs[0].owner, "lease:c1");
    ck_assert_int_eq(fake.acqs[0].ttl_ms, 10000);

    st = status("a");
    ck_assert(st.held);
    ck_assert_str_eq(st.holder, "lease:c1");
    ck_assert_uint_eq(st.token, token);
    ck_assert_uint_eq(lstats().current, 1);
    ck_assert_uint_eq(lstats().granted, 1);
    ck_assert_uint_eq(lstats().released, 0);
    ck_assert_uint_eq(lstats().expired, 0);
    ck_assert_uint_eq(tstats().held, 1);

    /* The requester has no hold to unlock; another owner finds it busy. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_NOT_HELD);
    ck_assert_int_eq(trylock(&c2, "a"), LOCKS_BUSY);

    /* Found by (name, token) without asking the backend: renewed. */
    ck_assert_int_eq(op("a", token, 20000), LOCKS_RELEASED);
    ck_assert_int_eq(fake.nlease_ops, 0);
    ck_assert_uint_eq(lstats().current, 1);
    ck_assert(status("a").held);
}
END_TEST

START_TEST(not_reentrant)
{
    uint64_t t1 = 0, t2 = 0;
    struct lease *p2 = NULL;

    /* A second lease of a held name, even by the same requester, waits like anyone. */
    ck_assert_int_eq(lease(&c1, "a", 10000, &t1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c1, "a", LOCK_EXCLUSIVE, 0, -1, true, 10000, &t2, NULL),
                     LOCKS_BUSY);
    ck_assert_int_eq(lease_as(&c1, "a", LOCK_EXCLUSIVE, 0, 0, false, 10000, &t2, NULL),
                     LOCKS_BUSY);
    ck_assert_uint_eq(lstats().current, 1);    /* the refused ones were freed */
    ck_assert_int_eq(lease(&c1, "a", 10000, &t2, &p2), LOCKS_WAITING);
    ck_assert_ptr_nonnull(p2);
    ck_assert_uint_eq(lstats().current, 2);
    ck_assert_uint_eq(lstats().granted, 1);

    ck_assert_int_eq(op("a", t1, 0), LOCKS_RELEASED);
    ck_done(&c1, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_gt(c1.recs[0].token, t1);
    ck_assert_int_eq(op("a", c1.recs[0].token, 0), LOCKS_RELEASED);
    ck_assert_uint_eq(lstats().current, 0);
}
END_TEST

/* ------------------------------------------------------------ UNLOCK by token */

START_TEST(release_by_token_grants_next)
{
    uint64_t t1 = 0, t3 = 0;
    struct lease *p3 = NULL;

    ck_assert_int_eq(lease(&c1, "a", 10000, &t1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lease(&c3, "a", 10000, &t3, &p3), LOCKS_WAITING);
    ck_assert_ptr_nonnull(p3);
    ck_assert_uint_eq(lstats().current, 2);       /* awaited leases count */
    ck_assert_uint_eq(tstats().waiting, 2);

    /* Released by token: the next waiter (a connection's request) is granted. */
    ck_assert_int_eq(op("a", t1, 0), LOCKS_RELEASED);
    ck_assert_int_eq(fake.nreleases, 1);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_gt(c2.recs[0].token, t1);
    ck_assert_int_eq(c3.nrecs, 0);
    ck_assert_uint_eq(lstats().released, 1);
    ck_assert_uint_eq(lstats().current, 1);
    ck_assert_str_eq(status("a").holder, "c2");

    /* Then the waiting lease: its requester hears the token, which then finds it. */
    ck_assert_int_eq(locks_unlock(t, &c2.c, "a"), LOCKS_RELEASED);
    ck_done(&c3, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_gt(c3.recs[0].token, c2.recs[0].token);
    ck_assert_uint_eq(c3.c.nholds, 0);
    ck_assert_str_eq(status("a").holder, "lease:c3");
    ck_assert_uint_eq(lstats().granted, 2);
    ck_assert_int_eq(op("a", c3.recs[0].token, 0), LOCKS_RELEASED);
    ck_assert(!status("a").held);
    ck_assert_uint_eq(status("a").waiters, 0);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(lstats().released, 2);
    ck_assert_uint_eq(tstats().held, 0);
    ck_assert_int_eq(fake.nlease_ops, 0);
}
END_TEST

START_TEST(wrong_token_not_held)
{
    uint64_t ta = 0, tb = 0;

    ck_assert_int_eq(lease(&c1, "a", 10000, &ta, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c1, "b", 10000, &tb, NULL), LOCKS_GRANTED);

    /* Unknown here: the backend is asked, and says not held. */
    ck_assert_int_eq(op("a", ta + 100, 0), LOCKS_NOT_HELD);
    ck_assert_int_eq(op("a", ta - 1, 0), LOCKS_NOT_HELD);
    ck_assert_int_eq(op("a", 0, 0), LOCKS_NOT_HELD);
    ck_assert_int_eq(op("a", tb, 0), LOCKS_NOT_HELD);       /* b's token, a's name */
    ck_assert_int_eq(op("c", ta, 0), LOCKS_NOT_HELD);       /* a name nobody holds */
    ck_assert_int_eq(op("a", ta + 100, 5000), LOCKS_NOT_HELD);
    ck_assert_int_eq(fake.nlease_ops, 6);

    /* Nothing changed. */
    ck_assert_uint_eq(lstats().current, 2);
    ck_assert_uint_eq(lstats().released, 0);
    ck_assert_int_eq(trylock(&c2, "a"), LOCKS_BUSY);
    ck_assert_int_eq(trylock(&c2, "b"), LOCKS_BUSY);

    /* A lease already ended is not held any more, for UNLOCK or RENEW. */
    ck_assert_int_eq(op("a", ta, 0), LOCKS_RELEASED);
    ck_assert_int_eq(op("a", ta, 0), LOCKS_NOT_HELD);
    ck_assert_int_eq(op("a", ta, 5000), LOCKS_NOT_HELD);
    ck_assert_uint_eq(lstats().released, 1);
    ck_assert_int_eq(op("b", tb, 0), LOCKS_RELEASED);
}
END_TEST

START_TEST(same_token_two_names)
{
    uint64_t token = 0;
    struct lease *pa = NULL, *pb = NULL;

    /* Tokens are per name: a backend may grant equal ones for two names. */
    ck_assert_int_eq(lease(&c1, "a", 10000, &token, &pa), LOCKS_WAITING);
    ck_assert_int_eq(lease(&c2, "b", 10000, &token, &pb), LOCKS_WAITING);
    ck_assert_int_eq(fake.nacqs, 2);
    locks_backend_granted(fake.acqs[0].hold, 7);
    locks_backend_granted(fake.acqs[1].hold, 7);
    ck_done(&c1, 0, "a", LOCKS_GRANTED);
    ck_done(&c2, 0, "b", LOCKS_GRANTED);
    ck_assert_uint_eq(c1.recs[0].token, 7);
    ck_assert_uint_eq(c2.recs[0].token, 7);

    ck_assert_int_eq(op("b", 7, 0), LOCKS_RELEASED);
    ck_assert(status("a").held);
    ck_assert(!status("b").held);
    ck_assert_int_eq(op("b", 7, 0), LOCKS_NOT_HELD);
    ck_assert_int_eq(op("a", 7, 5000), LOCKS_RELEASED);
    ck_assert_int_eq(op("a", 7, 0), LOCKS_RELEASED);
    ck_assert_uint_eq(lstats().current, 0);
}
END_TEST

/* ------------------------------------------------------------ expiry and RENEW */

START_TEST(expiry_releases_and_counts)
{
    uint64_t t1 = 0, t3 = 0;
    struct lease *p3 = NULL;
    int64_t start = now_ms();

    ck_assert_int_eq(lease(&c1, "a", 50, &t1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lease(&c3, "a", 10000, &t3, &p3), LOCKS_WAITING);

    run_until_expired(1);
    ck_assert_int_ge(now_ms() - start, 45);
    ck_assert_uint_eq(lstats().expired, 1);
    ck_assert_uint_eq(lstats().released, 0);
    ck_assert_uint_eq(lstats().current, 1);       /* c3's, awaited */
    ck_assert_int_eq(c1.nrecs, 0);                /* not announced */
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_gt(c2.recs[0].token, t1);
    ck_assert_int_eq(c3.nrecs, 0);
    ck_assert_int_eq(fake.nreleases, 1);

    /* The ended lease's token finds nothing. */
    ck_assert_int_eq(op("a", t1, 0), LOCKS_NOT_HELD);
    ck_assert_int_eq(op("a", t1, 1000), LOCKS_NOT_HELD);
    ck_assert_uint_eq(lstats().expired, 1);
}
END_TEST

START_TEST(expiry_of_lone_lease_frees_the_name)
{
    uint64_t t1 = 0, t2 = 0;

    ck_assert_int_eq(lease(&c1, "a", 50, &t1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c2, "b", 100, &t2, NULL), LOCKS_GRANTED);
    run_until_expired(2);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(lstats().granted, 2);
    ck_assert_uint_eq(tstats().held, 0);
    ck_assert(!status("a").held);
    ck_assert(!status("b").held);
    ck_assert_int_eq(trylock(&c3, "a"), LOCKS_GRANTED);
    ck_assert_int_eq(trylock(&c3, "b"), LOCKS_GRANTED);
}
END_TEST

START_TEST(expired_waiter_lease_granted_then_expires_too)
{
    uint64_t t1 = 0;
    struct lease *p2 = NULL;

    /* The lease granted on expiry starts its own ttl then. */
    ck_assert_int_eq(lease(&c1, "a", 50, &t1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c2, "a", 60, NULL, &p2), LOCKS_WAITING);
    run_until_expired(1);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_gt(c2.recs[0].token, t1);
    ck_assert_str_eq(status("a").holder, "lease:c2");
    run_until_expired(2);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(lstats().granted, 2);
    ck_assert(!status("a").held);
    ck_assert_int_eq(c2.nrecs, 1);
}
END_TEST

START_TEST(renew_rearms)
{
    uint64_t token = 0;
    int64_t start = now_ms();

    ck_assert_int_eq(lease(&c1, "a", 50, &token, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(op("a", token, 300), LOCKS_RELEASED);
    ck_assert_int_eq(fake.nlease_ops, 0);

    /* Well past the first ttl: still held. */
    run_past_ms(150);
    ck_assert_uint_eq(lstats().expired, 0);
    ck_assert_uint_eq(lstats().current, 1);
    ck_assert_int_eq(trylock(&c2, "a"), LOCKS_BUSY);

    /* It ends at the renewed time. */
    run_until_expired(1);
    ck_assert_int_ge(now_ms() - start, 290);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_int_eq(trylock(&c2, "a"), LOCKS_GRANTED);
    ck_assert_int_eq(op("a", token, 300), LOCKS_NOT_HELD);
}
END_TEST

START_TEST(renew_shortens)
{
    uint64_t token = 0;

    /* A long lease renewed with a short ttl ends at the short one: the guard
     * (GUARD_MS) is shorter than the original ttl. */
    ck_assert_int_eq(lease(&c1, "a", 600000, &token, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(op("a", token, 50), LOCKS_RELEASED);
    run_until_expired(1);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(lstats().released, 0);
}
END_TEST

START_TEST(release_disarms_expiry)
{
    uint64_t token = 0;

    ck_assert_int_eq(lease(&c1, "a", 50, &token, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(op("a", token, 0), LOCKS_RELEASED);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_GRANTED);
    run_past_ms(150);
    ck_assert_uint_eq(lstats().expired, 0);
    ck_assert_uint_eq(lstats().released, 1);
    ck_assert_str_eq(status("a").holder, "c2");
}
END_TEST

/* ------------------------------------------------------------ waiting lease requests */

START_TEST(cancel_while_waiting)
{
    struct lease *p2 = NULL;
    uint64_t token = 0;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c2, "a", 10000, &token, &p2), LOCKS_WAITING);
    ck_assert_ptr_nonnull(p2);
    ck_assert_int_eq(lock(&c3, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_uint_eq(lstats().current, 1);
    ck_assert_uint_eq(status("a").waiters, 2);

    /* Its requester left: the wait leaves the queue, the lease is freed. */
    leases_cancel(ls, p2);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(lstats().granted, 0);
    ck_assert_uint_eq(status("a").waiters, 1);
    ck_assert_uint_eq(tstats().waiting, 1);
    ck_assert_int_eq(c2.nrecs, 0);

    /* The next waiter behind it is granted at the release. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c3, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(c2.nrecs, 0);
    ck_assert_str_eq(status("a").holder, "c3");
}
END_TEST

START_TEST(cancel_while_acquiring)
{
    struct lease *p1 = NULL;

    /* The backend works for it: cancelled there too, and no answer is expected. */
    ck_assert_int_eq(lease(&c1, "a", 10000, NULL, &p1), LOCKS_WAITING);
    ck_assert_int_eq(fake.nacqs, 1);
    leases_cancel(ls, p1);
    ck_assert_int_eq(fake.ncancels, 1);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(tstats().waiting, 0);
    ck_assert_int_eq(c1.nrecs, 0);
}
END_TEST

START_TEST(wait_timeout_frees_the_lease)
{
    struct lease *p2 = NULL;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c2, "a", LOCK_EXCLUSIVE, 0, 50, false, 10000, NULL, &p2),
                     LOCKS_WAITING);
    ck_assert_uint_eq(lstats().current, 1);
    run_until_recs(&c2, 1);
    ck_done(&c2, 0, "a", LOCKS_TIMEOUT);
    ck_assert_uint_eq(c2.recs[0].token, 0);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(lstats().granted, 0);
    ck_assert_uint_eq(lstats().expired, 0);
    ck_assert_uint_eq(status("a").waiters, 0);
}
END_TEST

START_TEST(backend_answers_later)
{
    struct lease *p1 = NULL, *p2 = NULL;

    ck_assert_int_eq(lease(&c1, "a", 50, NULL, &p1), LOCKS_WAITING);
    ck_assert_int_eq(lease(&c2, "b", 10000, NULL, &p2), LOCKS_WAITING);
    ck_assert_int_eq(fake.nacqs, 2);
    ck_assert_int_eq(fake.acqs[0].ttl_ms, 50);
    ck_assert_str_eq(fake.acqs[1].owner, "lease:c2");

    /* Granted later: the requester hears the token, the ttl starts then. */
    locks_backend_granted(fake.acqs[0].hold, 42);
    ck_done(&c1, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_eq(c1.recs[0].token, 42);
    ck_assert_uint_eq(lstats().granted, 1);

    /* Refused: the requester hears it and the lease is gone. */
    locks_backend_refused(fake.acqs[1].hold, LOCKS_UNAVAILABLE);
    ck_done(&c2, 0, "b", LOCKS_UNAVAILABLE);
    ck_assert_uint_eq(lstats().current, 1);
    ck_assert_uint_eq(status("b").waiters, 0);

    run_until_expired(1);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_int_eq(fake.nreleases, 1);
    ck_assert_int_eq(c1.nrecs, 1);
}
END_TEST

START_TEST(backend_loses_a_lease)
{
    struct lease *p1 = NULL;

    ck_assert_int_eq(lease(&c1, "a", 10000, NULL, &p1), LOCKS_WAITING);
    locks_backend_granted(fake.acqs[0].hold, 9);
    ck_done(&c1, 0, "a", LOCKS_GRANTED);
    /* Lost: nobody is told (the taker may be long gone), the record is freed. */
    locks_backend_lost(fake.acqs[0].hold, "session expired");
    ck_assert_int_eq(c1.nrecs, 1);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(lstats().expired, 0);
    ck_assert_uint_eq(lstats().released, 0);
    ck_assert(!status("a").held);
    ck_assert_int_eq(op("a", 9, 0), LOCKS_NOT_HELD);
}
END_TEST

/* ------------------------------------------------------------ modes */

START_TEST(shared_and_limit_leases)
{
    uint64_t s1 = 0, s2 = 0, l1 = 0, l2 = 0;
    struct lease *p3 = NULL;

    /* Shared leases hold together, each with its own token. */
    ck_assert_int_eq(lease_as(&c1, "s", LOCK_SHARED, 0, -1, false, 10000, &s1, NULL),
                     LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c1, "s", LOCK_SHARED, 0, -1, true, 10000, &s2, NULL),
                     LOCKS_GRANTED);
    ck_assert_uint_ne(s1, s2);
    ck_assert_uint_eq(status("s").holders, 2);
    ck_assert_int_eq(trylock(&c2, "s"), LOCKS_BUSY);
    ck_assert_int_eq(op("s", s1, 0), LOCKS_RELEASED);
    ck_assert_uint_eq(status("s").holders, 1);
    ck_assert_int_eq(op("s", s2, 0), LOCKS_RELEASED);
    ck_assert_int_eq(trylock(&c2, "s"), LOCKS_GRANTED);

    /* A limit=2 lease pool: the third waits for a slot. */
    ck_assert_int_eq(lease_as(&c1, "p", LOCK_LIMIT, 2, -1, false, 10000, &l1, NULL),
                     LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c2, "p", LOCK_LIMIT, 2, -1, false, 10000, &l2, NULL),
                     LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c3, "p", LOCK_LIMIT, 2, -1, true, 10000, NULL, NULL),
                     LOCKS_BUSY);
    ck_assert_int_eq(lease_as(&c3, "p", LOCK_LIMIT, 3, -1, false, 10000, NULL, NULL),
                     LOCKS_CONFLICT);
    ck_assert_int_eq(lease_as(&c3, "p", LOCK_LIMIT, 2, -1, false, 10000, NULL, &p3),
                     LOCKS_WAITING);
    ck_assert_uint_eq(lstats().current, 3);
    ck_assert_int_eq(op("p", l2, 0), LOCKS_RELEASED);
    ck_done(&c3, 0, "p", LOCKS_GRANTED);
    ck_assert_uint_gt(c3.recs[0].token, l2);
    ck_assert_uint_eq(status("p").holders, 2);
    ck_assert_int_eq(op("p", c3.recs[0].token, 0), LOCKS_RELEASED);
    ck_assert_int_eq(op("p", l1, 0), LOCKS_RELEASED);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_uint_eq(lstats().granted, 5);
}
END_TEST

START_TEST(shared_leases_expire_separately)
{
    uint64_t s1 = 0, s2 = 0;

    ck_assert_int_eq(lease_as(&c1, "s", LOCK_SHARED, 0, -1, false, 50, &s1, NULL),
                     LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c2, "s", LOCK_SHARED, 0, -1, false, 10000, &s2, NULL),
                     LOCKS_GRANTED);
    run_until_expired(1);
    ck_assert_uint_eq(status("s").holders, 1);
    ck_assert_uint_eq(status("s").token, s2);
    ck_assert_int_eq(op("s", s1, 0), LOCKS_NOT_HELD);
    ck_assert_int_eq(op("s", s2, 0), LOCKS_RELEASED);
}
END_TEST

/* ------------------------------------------------------------ the cap */

START_TEST(max_leases)
{
    uint64_t t1 = 0, t3 = 0, t4 = 0;
    struct lease *p2 = NULL;
    struct locks_stats before;

    leases_set_max(ls, 2, UINT_MAX);
    ck_assert_int_eq(lease(&c1, "a", 10000, &t1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c2, "a", 10000, NULL, &p2), LOCKS_WAITING);

    /* Held and awaited count; the refusal changes nothing. */
    before = tstats();
    ck_assert_int_eq(lease(&c3, "b", 10000, &t3, NULL), LOCKS_LIMIT);
    ck_assert_int_eq(lease_as(&c3, "b", LOCK_EXCLUSIVE, 0, -1, true, 10000, NULL, NULL),
                     LOCKS_LIMIT);
    ck_assert_int_eq(fake.nacqs, 1);
    ck_assert_uint_eq(tstats().held, before.held);
    ck_assert_uint_eq(tstats().waiting, before.waiting);
    ck_assert(!status("b").held);
    ck_assert_uint_eq(lstats().current, 2);
    ck_assert_int_eq(c3.nrecs, 0);
    /* Connections' own locks are not leases. */
    ck_assert_int_eq(lock(&c3, "b", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock(t, &c3.c, "b"), LOCKS_RELEASED);

    /* A higher cap lets the next in. */
    leases_set_max(ls, 3, UINT_MAX);
    ck_assert_int_eq(lease(&c3, "b", 10000, &t3, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c4, "c", 10000, &t4, NULL), LOCKS_LIMIT);

    /* A lower one keeps what exists and refuses until enough ended. */
    leases_set_max(ls, 1, UINT_MAX);
    ck_assert_uint_eq(lstats().current, 3);
    ck_assert_int_eq(op("a", t1, 0), LOCKS_RELEASED);      /* c2's lease is granted */
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c4, "c", 10000, &t4, NULL), LOCKS_LIMIT);
    ck_assert_int_eq(op("b", t3, 0), LOCKS_RELEASED);
    ck_assert_int_eq(lease(&c4, "c", 10000, &t4, NULL), LOCKS_LIMIT);
    ck_assert_int_eq(op("a", c2.recs[0].token, 0), LOCKS_RELEASED);
    ck_assert_uint_eq(lstats().current, 0);
    ck_assert_int_eq(lease(&c4, "c", 10000, &t4, NULL), LOCKS_GRANTED);
}
END_TEST

START_TEST(max_leases_per_account)
{
    uint64_t t1 = 0, t2 = 0, t3 = 0;
    struct lease *p = NULL;

    /* c1 and c2 are one user, c3 another; c4 has no account (the daemon's cap only). */
    c1.c.account = c2.c.account = "user alice";
    c3.c.account = "user bob";
    leases_set_max(ls, 5, 2);
    ck_assert_int_eq(lease(&c1, "a", 10000, &t1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c2, "a", 10000, NULL, &p), LOCKS_WAITING);   /* awaited counts */
    ck_assert_int_eq(lease(&c1, "b", 10000, NULL, NULL), LOCKS_LEASE_ACCOUNT);
    ck_assert_int_eq(fake.nacqs, 1);
    ck_assert_uint_eq(lstats().current, 2);
    ck_assert_int_eq(lease(&c3, "b", 10000, &t3, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c4, "c", 10000, NULL, NULL), LOCKS_GRANTED);
    /* A lease that ends gives its place back; a lower share refuses, ends nothing. */
    leases_cancel(ls, p);
    ck_assert_int_eq(lease(&c2, "d", 10000, &t2, NULL), LOCKS_GRANTED);
    leases_set_max(ls, 5, 1);
    ck_assert_int_eq(lease(&c3, "e", 10000, NULL, NULL), LOCKS_LEASE_ACCOUNT);
    ck_assert_uint_eq(lstats().current, 4);
    ck_assert_int_eq(op("a", t1, 0), LOCKS_RELEASED);
    ck_assert_int_eq(op("d", t2, 0), LOCKS_RELEASED);
    leases_set_max(ls, 5, 2);
    ck_assert_int_eq(lease(&c1, "a", 10000, &t1, NULL), LOCKS_GRANTED);
}
END_TEST

START_TEST(max_leases_freed_by_refusals_and_expiry)
{
    uint64_t t1 = 0;

    /* Requests that end without a lease give their place back. */
    leases_set_max(ls, 2, UINT_MAX);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(lease_as(&c2, "a", LOCK_EXCLUSIVE, 0, -1, true, 10000, NULL, NULL),
                         LOCKS_BUSY);
    ck_assert_int_eq(lease_as(&c2, "a", LOCK_EXCLUSIVE, 0, 30, false, 10000, NULL, NULL),
                     LOCKS_WAITING);
    run_until_recs(&c2, 1);
    ck_done(&c2, 0, "a", LOCKS_TIMEOUT);
    ck_assert_uint_eq(lstats().current, 0);

    ck_assert_int_eq(lease(&c3, "b", 50, &t1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c3, "c", 50, NULL, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c3, "d", 10000, NULL, NULL), LOCKS_LIMIT);
    run_until_expired(2);
    ck_assert_int_eq(lease(&c3, "d", 10000, NULL, NULL), LOCKS_GRANTED);
    ck_assert_uint_eq(lstats().current, 1);
}
END_TEST

/* ------------------------------------------------------------ freeing */

START_TEST(free_with_live_leases)
{
    struct lease *p = NULL;

    /* Granted with armed timers, awaited behind them, and a shared pair:
     * the teardown (locks_free, leases_free) frees them all (valgrind). */
    ck_assert_int_eq(lease(&c1, "a", 10000, NULL, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lease(&c2, "a", 10000, NULL, &p), LOCKS_WAITING);
    ck_assert_int_eq(lease(&c3, "a", 10000, NULL, &p), LOCKS_WAITING);
    ck_assert_int_eq(lease_as(&c1, "s", LOCK_SHARED, 0, -1, false, 50, NULL, NULL),
                     LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c2, "s", LOCK_SHARED, 0, -1, false, 60000, NULL, NULL),
                     LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c3, "w", LOCK_EXCLUSIVE, 0, 60000, false, 60000, NULL, NULL),
                     LOCKS_GRANTED);
    ck_assert_int_eq(lease_as(&c4, "w", LOCK_EXCLUSIVE, 0, 60000, false, 60000, NULL, &p),
                     LOCKS_WAITING);               /* with a wait timer */
    ck_assert_int_eq(lock(&c4, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_uint_eq(lstats().current, 7);
}
END_TEST

START_TEST(free_with_acquiring_leases)
{
    struct lease *p = NULL;

    ck_assert_int_eq(lease(&c1, "a", 10000, NULL, &p), LOCKS_WAITING);
    ck_assert_int_eq(lease(&c2, "b", 10000, NULL, &p), LOCKS_WAITING);
    locks_backend_granted(fake.acqs[1].hold, 3);
    ck_assert_uint_eq(lstats().current, 2);
}
END_TEST

START_TEST(free_empty_and_null)
{
    leases_free(NULL);
    ck_assert_uint_eq(lstats().current, 0);
}
END_TEST

static Suite *lease_suite(void)
{
    Suite *s = suite_create("lease");
    TCase *tc;

    tc = tcase_create("grant");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, granted_at_once_findable_by_token);
    tcase_add_test(tc, not_reentrant);
    tcase_add_test(tc, release_by_token_grants_next);
    tcase_add_test(tc, wrong_token_not_held);
    tcase_add_test(tc, expiry_releases_and_counts);
    tcase_add_test(tc, expiry_of_lone_lease_frees_the_name);
    tcase_add_test(tc, expired_waiter_lease_granted_then_expires_too);
    tcase_add_test(tc, renew_rearms);
    tcase_add_test(tc, renew_shortens);
    tcase_add_test(tc, release_disarms_expiry);
    tcase_add_test(tc, cancel_while_waiting);
    tcase_add_test(tc, wait_timeout_frees_the_lease);
    tcase_add_test(tc, shared_and_limit_leases);
    tcase_add_test(tc, shared_leases_expire_separately);
    tcase_add_test(tc, max_leases);
    tcase_add_test(tc, max_leases_per_account);
    tcase_add_test(tc, max_leases_freed_by_refusals_and_expiry);
    tcase_add_test(tc, free_with_live_leases);
    tcase_add_test(tc, free_empty_and_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("manual");
    tcase_add_checked_fixture(tc, setup_manual, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, same_token_two_names);
    tcase_add_test(tc, cancel_while_acquiring);
    tcase_add_test(tc, backend_answers_later);
    tcase_add_test(tc, backend_loses_a_lease);
    tcase_add_test(tc, free_with_acquiring_leases);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(lease_suite());
    int failed;

    /* Expiries and the lost lease log at info and warn. */
    log_set_level(LOG_LVL_ERROR);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
