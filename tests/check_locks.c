/*
 * check_locks.c - the lock table without sockets.
 *
 * A fake backend records acquire / cancel / release and lets each test
 * answer later through locks_backend_*(); fake clients record done() and
 * lost(). Other tests use the real embedded backend. Wait timers run on a
 * real event_base, driven with EVLOOP_ONCE in bounded loops.
 */
#include "locks.h"
#include "backend.h"
#include "fake_backend_stubs.h"
#include "locks_int.h"          /* the age lists, to check their order */
#include "log.h"
#include "name_tree.h"
#include "zk/ztoken.h"

#include <check.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_CAP 64
#define MAX_CALLS 64
#define MAX_RECS 16

/* ------------------------------------------------------------ fake backend */

enum fake_mode {
    FAKE_MANUAL,       /* acquire() returns; the test answers later */
    FAKE_GRANT,        /* acquire() grants before returning */
    FAKE_BUSY,         /* acquire() answers busy before returning */
    FAKE_UNAVAILABLE,  /* acquire() answers unavailable before returning */
};

enum call_kind { CALL_ACQUIRE, CALL_REASSIGN, CALL_CANCEL, CALL_RELEASE };

struct call {
    enum call_kind kind;
    struct hold *hold;          /* valid only while the table keeps the hold */
    char name[NAME_CAP];        /* copied: the hold may be freed after the call */
    char peer[NAME_CAP];        /* the hold's owner at the time of the call */
    bool try;
};

struct fake {
    struct backend be;
    enum fake_mode mode;
    uint64_t next_token;
    struct call calls[MAX_CALLS];
    int ncalls;
};

static void fake_record(struct fake *f, enum call_kind kind, struct hold *h)
{
    struct call *c;

    ck_assert_int_lt(f->ncalls, MAX_CALLS);
    c = &f->calls[f->ncalls++];
    c->kind = kind;
    c->hold = h;
    c->try = hold_try(h);
    snprintf(c->name, sizeof(c->name), "%s", hold_name(h));
    snprintf(c->peer, sizeof(c->peer), "%s", hold_owner_desc(h));
}

static enum locks_result fake_acquire(void *impl, struct hold *h, uint64_t *token)
{
    struct fake *f = impl;

    fake_record(f, CALL_ACQUIRE, h);
    switch (f->mode) {
    case FAKE_MANUAL:
        break;
    case FAKE_GRANT:
        *token = ++f->next_token;
        return LOCKS_GRANTED;
    case FAKE_BUSY:
        return LOCKS_BUSY;
    case FAKE_UNAVAILABLE:
        return LOCKS_UNAVAILABLE;
    }
    return LOCKS_WAITING;
}

static void fake_reassign(void *impl, struct hold *h) { fake_record(impl, CALL_REASSIGN, h); }
static void fake_cancel(void *impl, struct hold *h) { fake_record(impl, CALL_CANCEL, h); }
static void fake_release(void *impl, struct hold *h) { fake_record(impl, CALL_RELEASE, h); }

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
    .unreachable_since = fake_unreachable_since,
    .window_ms = fake_window_ms,
    .pass_on = fake_pass_on,
    .free = fake_free,
};

/* ------------------------------------------------------------ fake clients */

enum rec_kind { REC_DONE, REC_LOST };

struct rec {
    enum rec_kind kind;
    char name[NAME_CAP];
    enum locks_result result;   /* REC_DONE */
    uint64_t token;
    char reason[NAME_CAP];      /* REC_LOST */
    unsigned seq;               /* order across all clients */
};

struct fclient {
    struct lock_owner c;        /* first: the callbacks cast back */
    struct rec recs[MAX_RECS];
    int nrecs;
};

static unsigned seq;

static struct rec *client_record(struct lock_owner *c, enum rec_kind kind, const char *name)
{
    struct fclient *fc = (struct fclient *)c;
    struct rec *r;

    ck_assert_int_lt(fc->nrecs, MAX_RECS);
    r = &fc->recs[fc->nrecs++];
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    r->seq = ++seq;
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
    struct rec *r = client_record(c, REC_LOST, name);

    r->token = token;
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
}

static const struct lock_owner_ops client_ops = { .done = client_done, .lost = client_lost };

/* ------------------------------------------------------------ fixtures */

static struct event_base *base;
static struct fake fake;
static struct backend *embedded;
static struct locks *t;
static struct fclient c1, c2, c3, c4, c5, c6;

static void clients_init(void)
{
    struct fclient *all[] = { &c1, &c2, &c3, &c4, &c5, &c6 };
    static const char *const peers[] = { "c1", "c2", "c3", "c4", "c5", "c6" };

    seq = 0;
    for (int i = 0; i < 6; i++) {
        memset(all[i], 0, sizeof(*all[i]));
        lock_owner_init(&all[i]->c, &client_ops, peers[i]);
    }
}

static void setup_fake(void)
{
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    memset(&fake, 0, sizeof(fake));
    fake.be.ops = &fake_ops;
    fake.be.impl = &fake;
    t = locks_new(base, &fake.be, 4);
    ck_assert_ptr_nonnull(t);
    clients_init();
}

static void setup_embedded(void)
{
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    embedded = backend_embedded_new();
    ck_assert_ptr_nonnull(embedded);
    t = locks_new(base, embedded, 4);
    ck_assert_ptr_nonnull(t);
    clients_init();
}

static void teardown(void)
{
    locks_free(t);
    t = NULL;
    if (embedded)
        embedded->ops->free(embedded->impl);
    embedded = NULL;
    event_base_free(base);
    base = NULL;
}

/* ------------------------------------------------------------ helpers */

static const struct lock_req try_req = { .mode = LOCK_EXCLUSIVE, .wait_ms = -1, .try = true };

/* Runs the loop until c has n records; bounded, so a bug fails rather than hangs. */
static void run_until(struct fclient *c, int n)
{
    for (int i = 0; i < 1000 && c->nrecs < n; i++)
        event_base_loop(base, EVLOOP_ONCE);
    ck_assert_int_ge(c->nrecs, n);
}

static void on_sentinel(evutil_socket_t fd, short what, void *arg) { *(bool *)arg = true; }

/* Runs the loop until a timer of ms milliseconds fired: every timer due
 * earlier has fired by then, so a callback that did not happen never will. */
static void run_past_ms(int ms)
{
    bool fired = false;
    struct event *ev = evtimer_new(base, on_sentinel, &fired);
    struct timeval tv = { 0, ms * 1000 };

    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(evtimer_add(ev, &tv), 0);
    for (int i = 0; i < 1000 && !fired; i++)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(ev);
    ck_assert(fired);
}

static enum locks_result lock(struct fclient *c, const char *name, int64_t wait_ms,
                              uint64_t *token)
{
    uint64_t dummy;

    struct lock_req req = { .mode = LOCK_EXCLUSIVE, .wait_ms = wait_ms };

    return locks_lock(t, &c->c, name, &req, token ? token : &dummy);
}

static enum locks_result trylock(struct fclient *c, const char *name)
{
    uint64_t dummy;

    struct lock_req req = { .mode = LOCK_EXCLUSIVE, .wait_ms = -1, .try = true };

    return locks_lock(t, &c->c, name, &req, &dummy);
}

static void ck_done(const struct fclient *c, int i, const char *name, enum locks_result r)
{
    ck_assert_int_gt(c->nrecs, i);
    ck_assert_int_eq(c->recs[i].kind, REC_DONE);
    ck_assert_str_eq(c->recs[i].name, name);
    ck_assert_int_eq(c->recs[i].result, r);
}

static const struct call *ck_call(int i, enum call_kind kind, const char *name)
{
    ck_assert_int_gt(fake.ncalls, i);
    ck_assert_int_eq(fake.calls[i].kind, kind);
    ck_assert_str_eq(fake.calls[i].name, name);
    return &fake.calls[i];
}

static struct locks_stats stats(void)
{
    struct locks_stats st;

    locks_get_stats(t, &st);
    return st;
}

/* A request in mode m (limit: LOCK_LIMIT's n, else 0). token may be NULL. */
static enum locks_result lock_as(struct fclient *c, const char *name, enum lock_mode m,
                                 unsigned limit, int64_t wait_ms, uint64_t *token)
{
    struct lock_req req = { .mode = m, .limit = limit, .wait_ms = wait_ms };
    uint64_t dummy;

    return locks_lock(t, &c->c, name, &req, token ? token : &dummy);
}

static enum locks_result try_as(struct fclient *c, const char *name, enum lock_mode m,
                                unsigned limit, uint64_t *token)
{
    struct lock_req req = { .mode = m, .limit = limit, .wait_ms = -1, .try = true };
    uint64_t dummy;

    return locks_lock(t, &c->c, name, &req, token ? token : &dummy);
}

static struct locks_status status(const char *name)
{
    struct locks_status ls;

    locks_status(t, name, &ls);
    return ls;
}

/* Call i is kind on name for the client called peer. */
static const struct call *ck_call_by(int i, enum call_kind kind, const char *name,
                                     const char *peer)
{
    const struct call *c = ck_call(i, kind, name);

    ck_assert_str_eq(c->peer, peer);
    return c;
}

static void ck_stats_eq(const struct locks_stats *a, const struct locks_stats *b)
{
    ck_assert_uint_eq(a->held, b->held);
    ck_assert_uint_eq(a->waiting, b->waiting);
    ck_assert_uint_eq(a->grants, b->grants);
    for (int m = 0; m < LOCK_MODE_COUNT; m++)
        ck_assert_uint_eq(a->grants_by_mode[m], b->grants_by_mode[m]);
    ck_assert_uint_eq(a->timeouts, b->timeouts);
    ck_assert_uint_eq(a->lost, b->lost);
}


/* ------------------------------------------------------------ the gauges' ages */

/* locks_ages() at now_us: the oldest hold and longest wait, in us. */
static void ages_at(int64_t now_us, int64_t *hold_us, int64_t *wait_us)
{
    locks_ages(t, now_us, hold_us, wait_us);
}

START_TEST(ages_follow_holds_and_waits)
{
    int64_t before, now, o1, w1, o2, w2;

    ages_at(locks_mono_us(), &o1, &w1);
    ck_assert_int_eq(o1, 0);
    ck_assert_int_eq(w1, 0);

    before = locks_mono_us();
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", 60000, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "b", -1, NULL), LOCKS_GRANTED);
    /* A time 5 s on: no sleep needed to see them age. */
    now = locks_mono_us() + 5000000;
    ages_at(now, &o1, &w1);
    ck_assert_int_ge(o1, 5000000);
    ck_assert_int_le(o1, now - before);
    ck_assert_int_ge(w1, 5000000);
    ck_assert_int_le(w1, o1);             /* c2 asked after c1's grant */
    ck_assert_str_eq(TAILQ_FIRST(&t->held_by_age)->lock->name, "a");

    /* c1 goes: c2 is granted (the newest hold), b is the oldest now. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ages_at(now, &o2, &w2);
    ck_assert_int_eq(w2, 0);
    ck_assert_int_le(o2, o1);
    ck_assert_str_eq(TAILQ_FIRST(&t->held_by_age)->lock->name, "b");
    ck_assert_ptr_eq(TAILQ_FIRST(&t->held_by_age)->owner, &c3.c);
    ck_assert_ptr_eq(TAILQ_LAST(&t->held_by_age, hold_age_list)->owner, &c2.c);

    /* A time before the grants (a clock read early) says 0, not a negative age. */
    ages_at(before - 1, &o2, &w2);
    ck_assert_int_eq(o2, 0);

    locks_owner_release_all(t, &c2.c);
    locks_owner_release_all(t, &c3.c);
    ages_at(now, &o2, &w2);
    ck_assert_int_eq(o2, 0);
    ck_assert_int_eq(w2, 0);
}
END_TEST

/* A request the backend is still acquiring (distributed mode) waits too. */
START_TEST(fake_ages_count_acquiring_as_waiting)
{
    const struct call *call;
    int64_t now, o, w;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    call = ck_call(0, CALL_ACQUIRE, "a");
    now = locks_mono_us() + 2000000;
    ages_at(now, &o, &w);
    ck_assert_int_eq(o, 0);
    ck_assert_int_ge(w, 2000000);
    locks_backend_granted(call->hold, 42);
    ages_at(now, &o, &w);
    ck_assert_int_ge(o, 0);
    ck_assert_int_le(o, 2000000);
    ck_assert_int_eq(w, 0);
    locks_backend_lost(call->hold, "test");
    ages_at(now, &o, &w);
    ck_assert_int_eq(o, 0);
}
END_TEST

/* Checks that l is ordered by key; returns its length. */
static size_t ck_age_order(struct hold_age_list *l, bool held)
{
    const struct hold *h, *prev = NULL;
    size_t n = 0;

    TAILQ_FOREACH(h, l, by_age) {
        if (prev)
            ck_assert_int_le(held ? prev->granted_us : prev->asked_us,
                             held ? h->granted_us : h->asked_us);
        ck_assert_ptr_eq(TAILQ_NEXT(h, by_age) ? TAILQ_NEXT(h, by_age)->by_age.tqe_prev
                                               : l->tqh_last, &h->by_age.tqe_next);
        prev = h;
        n++;
    }
    return n;
}

static double seconds_since(const struct timespec *a)
{
    struct timespec b;

    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

/*
 * A handover's restore appends holds in name order and sorts once
 * (locks_sort_ages): shuffled times come out in order, lengths kept. With
 * LB_AGES_LOCKS=N (default 2000) it also prints what the gauges cost at N
 * locks against a walk of every hold (docs/PERFORMANCE.md): printed, never
 * asserted.
 */
START_TEST(ages_sorted_after_restore_and_cost)
{
    const char *env = getenv("LB_AGES_LOCKS");
    long n = env ? atol(env) : 2000;
    struct fclient *owner = &c1;
    struct hold *h;
    char name[32];
    uint64_t x = 88172645463325252ULL, sum = 0;
    int64_t o = 0, w = 0, oldest = 0;
    struct timespec ts;
    double gauge_s, walk_s, sort_s;
    const int reps = 1000;

    ck_assert_int_gt(n, 0);
    locks_set_max_per_client(t, (unsigned)n * 2 + 2);
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "n%ld", i);
        ck_assert_int_eq(lock(owner, name, -1, NULL), LOCKS_GRANTED);
    }
    /* A second owner queues behind a few of them. */
    for (long i = 0; i < n && i < 100; i++) {
        snprintf(name, sizeof(name), "n%ld", i);
        ck_assert_int_eq(lock(&c2, name, 60000, NULL), LOCKS_WAITING);
    }
    /* Times shuffled as a restore in name order would find them. */
    TAILQ_FOREACH(h, &t->held_by_age, by_age) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h->granted_us = 1000000 + (int64_t)(x % 1000000000);
    }
    TAILQ_FOREACH(h, &t->waiting_by_age, by_age) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h->asked_us = 1000000 + (int64_t)(x % 1000000000);
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ck_assert_int_eq(locks_sort_ages(t), 0);
    sort_s = seconds_since(&ts);
    ck_assert_uint_eq(ck_age_order(&t->held_by_age, true), (size_t)n);
    ck_assert_uint_eq(ck_age_order(&t->waiting_by_age, false), (size_t)(n < 100 ? n : 100));

    clock_gettime(CLOCK_MONOTONIC, &ts);
    for (int i = 0; i < reps; i++) {
        locks_ages(t, 2000000000 + i, &o, &w);
        sum += (uint64_t)o;
    }
    gauge_s = seconds_since(&ts) / reps;
    /* What a scrape would cost without the lists: a walk of every hold. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    for (int i = 0; i < 3; i++) {
        int64_t first = INT64_MAX;

        for (const char *nm = locks_next(t, NULL, NULL); nm; nm = locks_next(t, NULL, nm)) {
            const struct lock *l = lock_find(t, nm);

            TAILQ_FOREACH(h, &l->admitted, in_lock)
                if (h->state == HOLD_HELD && h->granted_us < first)
                    first = h->granted_us;
        }
        oldest = first;
    }
    walk_s = seconds_since(&ts) / 3;
    ck_assert_int_eq(o, 2000000000 + reps - 1 - oldest);
    printf("ages at %ld locks: gauges %.3f us per scrape; a walk of every hold %.1f ms; "
           "sorting after a restore %.1f ms (%llu)\n", n, gauge_s * 1e6, walk_s * 1e3,
           sort_s * 1e3, (unsigned long long)(sum & 1));
}
END_TEST

/* ------------------------------------------------------------ embedded backend */

START_TEST(grant_at_once)
{
    uint64_t token = 0;

    ck_assert_int_eq(lock(&c1, "a", -1, &token), LOCKS_GRANTED);
    ck_assert_uint_gt(token, 0);
    ck_assert_uint_eq(c1.c.nholds, 1);
    ck_assert_int_eq(c1.nrecs, 0);        /* answered by the return value only */
    ck_assert_uint_eq(stats().held, 1);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_uint_eq(stats().grants, 1);
}
END_TEST

START_TEST(grant_free_lock_without_waiting)
{
    uint64_t token = 0;

    /* wait 0 and TRYLOCK only fail when someone has it. */
    ck_assert_int_eq(lock(&c1, "a", 0, &token), LOCKS_GRANTED);
    ck_assert_uint_gt(token, 0);
    ck_assert_int_eq(locks_lock(t, &c2.c, "b", &try_req, &token), LOCKS_GRANTED);
    ck_assert_uint_eq(stats().held, 2);
}
END_TEST

START_TEST(reentrant)
{
    uint64_t t1 = 0, t2 = 0, t3 = 0;

    ck_assert_int_eq(lock(&c1, "a", -1, &t1), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "a", 0, &t2), LOCKS_GRANTED);
    ck_assert_int_eq(locks_lock(t, &c1.c, "a", &try_req, &t3), LOCKS_GRANTED);
    ck_assert_uint_eq(t2, t1);
    ck_assert_uint_eq(t3, t1);
    ck_assert_uint_eq(c1.c.nholds, 1);
    ck_assert_uint_eq(stats().grants, 1);   /* re-entrant grants excluded */
    ck_assert_uint_eq(stats().held, 1);

    /* Released only by the third unlock. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_assert_int_eq(trylock(&c2, "a"), LOCKS_BUSY);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert_uint_eq(stats().held, 0);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_NOT_HELD);
    ck_assert_int_eq(trylock(&c2, "a"), LOCKS_GRANTED);
}
END_TEST

START_TEST(not_held)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock(t, &c2.c, "a"), LOCKS_NOT_HELD);
    ck_assert_int_eq(locks_unlock(t, &c2.c, "nobody-has-this"), LOCKS_NOT_HELD);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "nobody-has-this"), LOCKS_NOT_HELD);
    /* A waiter does not hold it either, and stays queued. */
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(locks_unlock(t, &c2.c, "a"), LOCKS_NOT_HELD);
    ck_assert_uint_eq(stats().held, 1);
    ck_assert_uint_eq(stats().waiting, 1);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
}
END_TEST

START_TEST(fifo)
{
    uint64_t t1 = 0;

    ck_assert_int_eq(lock(&c1, "a", -1, &t1), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "a", 10000, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c4, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_uint_eq(stats().waiting, 3);

    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(c3.nrecs, 0);
    ck_assert_int_eq(c4.nrecs, 0);
    ck_assert_uint_gt(c2.recs[0].token, t1);

    ck_assert_int_eq(locks_unlock(t, &c2.c, "a"), LOCKS_RELEASED);
    ck_done(&c3, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(c4.nrecs, 0);
    ck_assert_uint_gt(c3.recs[0].token, c2.recs[0].token);

    ck_assert_int_eq(locks_unlock(t, &c3.c, "a"), LOCKS_RELEASED);
    ck_done(&c4, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_gt(c4.recs[0].token, c3.recs[0].token);
    ck_assert(c2.recs[0].seq < c3.recs[0].seq && c3.recs[0].seq < c4.recs[0].seq);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_uint_eq(stats().grants, 4);
}
END_TEST

START_TEST(wait_timeout)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", 5, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c4, "a", 60000, NULL), LOCKS_WAITING);

    run_until(&c2, 1);
    ck_done(&c2, 0, "a", LOCKS_TIMEOUT);
    ck_assert_uint_eq(c2.recs[0].token, 0);
    ck_assert_int_eq(c2.nrecs, 1);
    ck_assert_uint_eq(c2.c.nholds, 0);
    ck_assert_int_eq(c3.nrecs, 0);
    ck_assert_uint_eq(stats().timeouts, 1);
    ck_assert_uint_eq(stats().waiting, 2);

    /* The next waiter still gets it, in order. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c3, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(c4.nrecs, 0);
    ck_assert_int_eq(locks_unlock(t, &c3.c, "a"), LOCKS_RELEASED);
    ck_done(&c4, 0, "a", LOCKS_GRANTED);
}
END_TEST

START_TEST(several_timeouts_in_order)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", 1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "a", 20, NULL), LOCKS_WAITING);
    run_until(&c3, 1);
    ck_done(&c2, 0, "a", LOCKS_TIMEOUT);
    ck_done(&c3, 0, "a", LOCKS_TIMEOUT);
    ck_assert_uint_lt(c2.recs[0].seq, c3.recs[0].seq);
    ck_assert_uint_eq(stats().timeouts, 2);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_uint_eq(stats().held, 1);
}
END_TEST

START_TEST(granted_wait_does_not_time_out)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", 5, NULL), LOCKS_WAITING);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    /* The wait timer went with the grant. */
    run_past_ms(20);
    ck_assert_int_eq(c2.nrecs, 1);
    ck_assert_uint_eq(stats().timeouts, 0);
    ck_assert_uint_eq(stats().held, 1);
}
END_TEST

START_TEST(no_wait_on_held_lock)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(trylock(&c2, "a"), LOCKS_BUSY);
    ck_assert_uint_eq(c2.c.nholds, 0);
    ck_assert_int_eq(c2.nrecs, 0);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_uint_eq(stats().held, 1);
}
END_TEST

START_TEST(no_wait_never_jumps_the_queue)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(trylock(&c1, "a"), LOCKS_BUSY);
}
END_TEST

START_TEST(limit_per_client)
{
    /* The fixture allows 4 holds per client; waits count, re-entry does not. */
    ck_assert_int_eq(lock(&c2, "w", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "b", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "c", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "w", -1, NULL), LOCKS_WAITING);
    ck_assert_uint_eq(c1.c.nholds, 4);
    ck_assert_int_eq(lock(&c1, "d", -1, NULL), LOCKS_LIMIT);
    ck_assert_int_eq(trylock(&c1, "d"), LOCKS_LIMIT);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);   /* re-entrant */
    ck_assert_int_eq(lock(&c1, "b", 0, NULL), LOCKS_GRANTED);
    ck_assert_uint_eq(c1.c.nholds, 4);
    ck_assert_uint_eq(stats().held, 4);
    ck_assert_uint_eq(stats().waiting, 1);

    /* A re-entrant unlock frees no slot; a full one does. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_assert_int_eq(lock(&c1, "d", -1, NULL), LOCKS_LIMIT);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_assert_int_eq(lock(&c1, "d", -1, NULL), LOCKS_GRANTED);
    /* Other clients have their own count. */
    ck_assert_int_eq(lock(&c3, "e", -1, NULL), LOCKS_GRANTED);
}
END_TEST

/* A request with a lock-delay: wait_ms as lock(). */
static enum locks_result lock_delay(struct fclient *c, const char *name, int64_t wait_ms,
                                    int64_t delay_ms)
{
    struct lock_req req = { .mode = LOCK_EXCLUSIVE, .wait_ms = wait_ms, .delay_ms = delay_ms };
    uint64_t dummy;

    return locks_lock(t, &c->c, name, &req, &dummy);
}

/* Whether c holds name. */
static bool holds(struct fclient *c, const char *name)
{
    uint64_t token;

    return locks_owner_token(t, &c->c, name, &token);
}

START_TEST(keep_quota_per_account)
{
    /* c1 and c2 are one account (two connections from one address), c3 another. */
    c1.c.account = c2.c.account = "address 192.0.2.1";
    c3.c.account = "address 192.0.2.2";
    locks_set_keep_max(t, 10, 2);
    ck_assert_int_eq(lock(&c1, "x", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock_keep(t, &c1.c, "x", 60000), LOCKS_RELEASED);
    ck_assert_int_eq(lock_delay(&c2, "y", -1, 60000), LOCKS_GRANTED);
    ck_assert_uint_eq(stats().keepable, 2);

    /* UNLOCK keep= beyond the share: refused, and the hold stays as it was. */
    ck_assert_int_eq(lock(&c1, "z", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock_keep(t, &c1.c, "z", 60000), LOCKS_KEEP_ACCOUNT);
    ck_assert(holds(&c1, "z"));
    ck_assert_uint_eq(stats().held, 3);
    ck_assert_uint_eq(stats().delayed, 1);
    /* A re-entrant UNLOCK keep= keeps nothing yet: no quota asked. */
    ck_assert_int_eq(lock(&c1, "z", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock_keep(t, &c1.c, "z", 60000), LOCKS_RELEASED);
    ck_assert(holds(&c1, "z"));
    ck_assert_int_eq(locks_unlock(t, &c1.c, "z"), LOCKS_RELEASED);

    /* A lock-delay is asked for at the request: refused then, held or awaited. */
    ck_assert_int_eq(lock_delay(&c1, "w", -1, 1000), LOCKS_KEEP_ACCOUNT);
    ck_assert_int_eq(lock_delay(&c1, "y", -1, 1000), LOCKS_KEEP_ACCOUNT);
    ck_assert_int_eq(lock_delay(&c1, "w", -1, 0), LOCKS_GRANTED);   /* none asked */
    ck_assert_uint_eq(stats().keep_refused, 3);

    /* The other account has its own share; holds with a delay count while
     * awaited too. */
    ck_assert_int_eq(lock_delay(&c3, "v", -1, 1000), LOCKS_GRANTED);
    ck_assert_int_eq(lock_delay(&c3, "y", -1, 1000), LOCKS_WAITING);
    ck_assert_int_eq(lock_delay(&c3, "u", -1, 1000), LOCKS_KEEP_ACCOUNT);
    ck_assert_uint_eq(stats().keepable, 4);

    /* Abandoned holds with a lock-delay stay counted while kept... */
    locks_owner_abandon_all(t, &c2.c);
    ck_assert_uint_eq(stats().delayed, 2);
    ck_assert_uint_eq(stats().keepable, 4);
    ck_assert_int_eq(lock(&c1, "z", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock_keep(t, &c1.c, "z", 60000), LOCKS_KEEP_ACCOUNT);
    /* ... and make room once they end (BREAK, or their time is over). */
    ck_assert_uint_eq(locks_break(t, "x", 0, "test"), 1);
    ck_assert_int_eq(locks_unlock_keep(t, &c1.c, "z", 60000), LOCKS_RELEASED);
    ck_assert_uint_eq(stats().keepable, 4);
    locks_owner_release_all(t, &c3.c);    /* its wait for y and its hold of v */
    ck_assert_uint_eq(stats().keepable, 2);
}
END_TEST

START_TEST(keep_quota_total_and_lowered)
{
    const char *set[] = { "s1", "s2", "s3" };

    c1.c.account = "address 192.0.2.1";
    c3.c.account = "address 192.0.2.2";
    locks_set_keep_max(t, 3, 2);
    ck_assert_int_eq(lock_delay(&c1, "a", -1, 60000), LOCKS_GRANTED);
    ck_assert_int_eq(lock_delay(&c1, "b", -1, 60000), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c3, "s1", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c3, "s2", -1, NULL), LOCKS_GRANTED);
    /* A set counts every hold it would keep: two more than the table has room for. */
    ck_assert_int_eq(locks_keep_room(t, &c3.c, set, 3, 60000), LOCKS_KEEP_TOTAL);
    ck_assert_int_eq(locks_keep_room(t, &c3.c, set, 3, 0), LOCKS_RELEASED);
    ck_assert_int_eq(locks_keep_room(t, &c3.c, set, 1, 60000), LOCKS_RELEASED);
    ck_assert_int_eq(locks_unlock_keep(t, &c3.c, "s1", 60000), LOCKS_RELEASED);
    ck_assert_int_eq(locks_unlock_keep(t, &c3.c, "s2", 60000), LOCKS_KEEP_TOTAL);
    ck_assert(holds(&c3, "s2"));
    /* A lower cap refuses new holds and ends none. */
    locks_set_keep_max(t, 1, 1);
    locks_owner_abandon_all(t, &c1.c);
    ck_assert_uint_eq(stats().delayed, 3);
    ck_assert_uint_eq(stats().keepable, 3);
    ck_assert_int_eq(lock_delay(&c1, "c", -1, 10), LOCKS_KEEP_ACCOUNT);
    ck_assert_int_eq(lock_delay(&c3, "c", -1, 10), LOCKS_KEEP_ACCOUNT);
    c3.c.account = NULL;                   /* no account: the daemon-wide cap only */
    ck_assert_int_eq(lock_delay(&c3, "c", -1, 10), LOCKS_KEEP_TOTAL);
    locks_set_keep_max(t, 4, 1);
    ck_assert_int_eq(lock_delay(&c3, "c", -1, 10), LOCKS_GRANTED);
}
END_TEST

/* A session (session.h) keeps a connection's holds: moved as they are, and back. */
START_TEST(move_held_keeps_everything)
{
    uint64_t ta, tb, token;
    struct locks_stats before;

    c1.c.account = "address 192.0.2.1";
    c1.c.label = "job";
    ck_assert_int_eq(lock(&c1, "a", -1, &ta), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);   /* depth 2 */
    ck_assert_int_eq(lock_delay(&c1, "b", -1, 30000), LOCKS_GRANTED);
    ck_assert(locks_owner_token(t, &c1.c, "b", &tb));
    ck_assert_int_eq(lock(&c2, "w", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "w", -1, NULL), LOCKS_WAITING);  /* c1's wait */
    ck_assert_int_eq(lock(&c3, "a", -1, NULL), LOCKS_WAITING);
    before = stats();

    /* c4 plays the session: the holds are its, the wait is cancelled, nobody is told. */
    ck_assert_uint_eq(locks_owner_move_held(t, &c1.c, &c4.c), 2);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert(TAILQ_EMPTY(&c1.c.holds));
    ck_assert_uint_eq(c4.c.nholds, 2);
    ck_assert(locks_owner_token(t, &c4.c, "a", &token));
    ck_assert_uint_eq(token, ta);
    ck_assert(locks_owner_token(t, &c4.c, "b", &token));
    ck_assert_uint_eq(token, tb);
    ck_assert(!locks_owner_waiting(t, &c1.c, "w"));
    ck_assert_int_eq(c1.nrecs + c3.nrecs + c4.nrecs, 0);
    ck_assert_uint_eq(stats().held, before.held);
    ck_assert_uint_eq(stats().waiting, before.waiting - 1);
    ck_assert_uint_eq(stats().keepable, before.keepable);   /* b's still counts */
    ck_assert_str_eq(status("a").holder, "c4");
    ck_assert_int_eq(status("a").waiters, 1);
    /* Nobody else is granted a moved hold. */
    ck_assert_int_eq(trylock(&c5, "a"), LOCKS_BUSY);
    ck_assert_int_eq(trylock(&c5, "b"), LOCKS_BUSY);

    /* Back to another connection: still re-entrant twice, the same tokens. */
    ck_assert_uint_eq(locks_owner_move_held(t, &c4.c, &c6.c), 2);
    ck_assert_uint_eq(c4.c.nholds, 0);
    ck_assert(locks_owner_token(t, &c6.c, "a", &token));
    ck_assert_uint_eq(token, ta);
    ck_assert_int_eq(locks_unlock(t, &c6.c, "a"), LOCKS_RELEASED);
    ck_assert_int_eq(c3.nrecs, 0);                  /* still held once */
    ck_assert_int_eq(locks_unlock(t, &c6.c, "a"), LOCKS_RELEASED);
    ck_done(&c3, 0, "a", LOCKS_GRANTED);
    /* Abandoned by its new owner: its lock-delay applies as it would have. */
    locks_owner_abandon_all(t, &c6.c);
    ck_assert_uint_eq(stats().delayed, 1);
    ck_assert_int_eq(trylock(&c5, "b"), LOCKS_BUSY);
    ck_assert_int_eq(c1.nrecs + c4.nrecs + c6.nrecs, 0);
}
END_TEST

/* The fake backend: a moved hold keeps its slot; the backend hears of a
 * new owner's name only (reassign), not of the move itself. */
START_TEST(fake_move_held_calls_nothing)
{
    const struct call *call;
    int n;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    call = ck_call(0, CALL_ACQUIRE, "a");
    hold_set_backend_data(call->hold, &fake);
    locks_backend_granted(call->hold, 7);
    ck_assert_int_eq(lock(&c1, "b", -1, NULL), LOCKS_WAITING);   /* acquiring */
    n = fake.ncalls;
    ck_assert_uint_eq(locks_owner_move_held(t, &c1.c, &c2.c), 1);
    ck_call(n, CALL_CANCEL, "b");                 /* the wait */
    ck_call_by(n + 1, CALL_REASSIGN, "a", "c2");  /* named anew */
    ck_assert_int_eq(fake.ncalls, n + 2);
    /* Same name and label (a session takes c2's name at the drop): silent. */
    c3.c.desc = "c2";
    ck_assert_uint_eq(locks_owner_move_held(t, &c2.c, &c3.c), 1);
    ck_assert_int_eq(fake.ncalls, n + 2);
    ck_assert_uint_eq(locks_owner_move_held(t, &c3.c, &c2.c), 1);
    ck_assert_ptr_eq(hold_backend_data(call->hold), &fake);
    ck_assert_str_eq(hold_owner_desc(call->hold), "c2");
    /* Lost while moved: its new owner is told. */
    locks_backend_lost(call->hold, "test");
    ck_assert_int_eq(c2.nrecs, 1);   /* done(a) went to c1 before the move */
    ck_assert_int_eq(c2.recs[0].kind, REC_LOST);
    ck_assert_str_eq(c2.recs[0].name, "a");
    ck_assert_int_eq(c1.nrecs, 1);
}
END_TEST

START_TEST(release_all_holder)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);   /* depth 2 */
    ck_assert_int_eq(lock(&c1, "b", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "a", -1, NULL), LOCKS_WAITING);

    locks_owner_release_all(t, &c1.c);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert(TAILQ_EMPTY(&c1.c.holds));
    ck_assert_int_eq(c1.nrecs, 0);                 /* never called back */
    ck_done(&c2, 0, "a", LOCKS_GRANTED);           /* depth did not matter */
    ck_assert_int_eq(c3.nrecs, 0);
    ck_assert_uint_eq(stats().held, 1);
    ck_assert_uint_eq(stats().waiting, 1);
    ck_assert_int_eq(trylock(&c4, "b"), LOCKS_GRANTED);
}
END_TEST

START_TEST(release_all_waiter)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", 5, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "a", -1, NULL), LOCKS_WAITING);
    locks_owner_release_all(t, &c2.c);
    ck_assert_uint_eq(c2.c.nholds, 0);
    ck_assert_uint_eq(stats().waiting, 1);

    /* Its wait timer is gone: no TIMEOUT after it would have fired. */
    run_past_ms(20);
    ck_assert_int_eq(c2.nrecs, 0);
    ck_assert_uint_eq(stats().timeouts, 0);

    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c3, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(c2.nrecs, 0);
}
END_TEST

START_TEST(release_all_idle_client)
{
    locks_owner_release_all(t, &c1.c);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
}
END_TEST

START_TEST(tokens_increase)
{
    uint64_t prev = 0, token;

    /* Per name, across holders and across names. */
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(lock(&c1, (i % 3) ? "a" : "b", -1, &token), LOCKS_GRANTED);
        ck_assert_uint_gt(token, prev);
        prev = token;
        ck_assert_int_eq(locks_unlock(t, &c1.c, (i % 3) ? "a" : "b"), LOCKS_RELEASED);
    }
    ck_assert_int_eq(lock(&c1, "a", -1, &token), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_gt(c2.recs[0].token, token);
}
END_TEST

START_TEST(token_next_monotonic)
{
    uint64_t last = 0, prev, far;

    prev = token_next(&last);
    ck_assert_uint_gt(prev, 0);
    ck_assert_uint_eq(last, prev);
    for (int i = 0; i < 10000; i++) {
        uint64_t v = token_next(&last);

        ck_assert_uint_gt(v, prev);
        prev = v;
    }
    /* A last token ahead of the clock (clock set back) still goes up by one. */
    far = UINT64_MAX / 2;
    last = far;
    ck_assert_uint_eq(token_next(&last), far + 1);
    ck_assert_uint_eq(token_next(&last), far + 2);
}
END_TEST

START_TEST(stats_counters)
{
    struct locks_stats st;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "b", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", 1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "b", -1, NULL), LOCKS_WAITING);
    st = stats();
    ck_assert_uint_eq(st.held, 2);
    ck_assert_uint_eq(st.waiting, 2);
    ck_assert_uint_eq(st.grants, 2);
    ck_assert_uint_eq(st.timeouts, 0);
    ck_assert_uint_eq(st.lost, 0);

    run_until(&c2, 1);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "b"), LOCKS_RELEASED);
    st = stats();
    ck_assert_uint_eq(st.held, 2);       /* a by c1, b by c3 */
    ck_assert_uint_eq(st.waiting, 0);
    ck_assert_uint_eq(st.grants, 3);
    ck_assert_uint_eq(st.timeouts, 1);

    locks_owner_release_all(t, &c1.c);
    locks_owner_release_all(t, &c3.c);
    st = stats();
    ck_assert_uint_eq(st.held, 0);
    ck_assert_uint_eq(st.waiting, 0);
    ck_assert_uint_eq(st.grants, 3);     /* totals stay */
    ck_assert_uint_eq(st.timeouts, 1);
}
END_TEST

/* Bucket i counts durations of at most 2^i us; the last one the rest. */
START_TEST(histogram_buckets)
{
    static const struct { int64_t us; unsigned bucket; } cases[] = {
        { -5, 0 }, { 0, 0 }, { 1, 0 }, { 2, 1 }, { 3, 2 }, { 4, 2 }, { 5, 3 },
        { 1000, 10 }, { 1024, 10 }, { 1025, 11 },
        { (int64_t)1 << 35, HISTOGRAM_BUCKETS - 1 },
        { ((int64_t)1 << 35) + 1, HISTOGRAM_BUCKETS }, { INT64_MAX, HISTOGRAM_BUCKETS },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct histogram h;

        memset(&h, 0, sizeof(h));
        histogram_observe(&h, cases[i].us);
        ck_assert_uint_eq(h.count, 1);
        ck_assert_uint_eq(h.sum_us, cases[i].us > 0 ? (uint64_t)cases[i].us : 0);
        for (unsigned b = 0; b <= HISTOGRAM_BUCKETS; b++)
            ck_assert_msg(h.counts[b] == (b == cases[i].bucket),
                          "%lld us: bucket %u holds %llu", (long long)cases[i].us, b,
                          (unsigned long long)h.counts[b]);
        if (cases[i].bucket < HISTOGRAM_BUCKETS)
            ck_assert_uint_ge(histogram_bound_us(cases[i].bucket),
                              cases[i].us > 0 ? (uint64_t)cases[i].us : 0);
    }
    ck_assert_uint_eq(histogram_bound_us(0), 1);
    ck_assert_uint_eq(histogram_bound_us(HISTOGRAM_BUCKETS - 1), (uint64_t)1 << 35);
}
END_TEST

/* Every grant is a wait observed (re-entrant ones are not); every hold that
 * ends, whatever ends it, a hold time. */
START_TEST(histograms_count_grants_and_holds)
{
    const struct locks_histograms *hi = locks_get_histograms(t);

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);     /* re-entrant */
    ck_assert_uint_eq(hi->wait.count, 1);
    ck_assert_uint_eq(hi->hold.count, 0);
    ck_assert_int_eq(lock(&c2, "a", 60000, NULL), LOCKS_WAITING);
    ck_assert_int_eq(trylock(&c3, "a"), LOCKS_BUSY);
    ck_assert_uint_eq(hi->wait.count, 1);                          /* busy: no grant */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED); /* one level left */
    ck_assert_uint_eq(hi->hold.count, 0);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED); /* c2 gets it */
    ck_assert_uint_eq(hi->hold.count, 1);
    ck_assert_uint_eq(hi->wait.count, 2);
    ck_assert_int_eq(c2.nrecs, 1);
    ck_assert_int_eq(c2.recs[0].result, LOCKS_GRANTED);
    locks_owner_release_all(t, &c2.c);                             /* a close ends it too */
    ck_assert_uint_eq(hi->hold.count, 2);
    ck_assert_uint_eq(hi->wait.count, 2);
}
END_TEST

START_TEST(free_with_outstanding_holds_embedded)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c1, "b", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock(&c2, "a", 60000, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "a", -1, NULL), LOCKS_WAITING);

    locks_free(t);
    t = NULL;
    /* Every hold is gone from its client, nobody was called back. */
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert_uint_eq(c2.c.nholds, 0);
    ck_assert_uint_eq(c3.c.nholds, 0);
    ck_assert(TAILQ_EMPTY(&c1.c.holds) && TAILQ_EMPTY(&c2.c.holds) && TAILQ_EMPTY(&c3.c.holds));
    ck_assert_int_eq(c1.nrecs + c2.nrecs + c3.nrecs, 0);
    /* Nothing pending is left on the base (the wait timer was freed). */
    ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);
}
END_TEST

START_TEST(free_empty_and_null)
{
    locks_free(NULL);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    locks_free(t);
    t = NULL;
    ck_assert_uint_eq(c1.c.nholds, 0);
}
END_TEST

/* ------------------------------------------------------------ fake backend */

START_TEST(fake_async_grant)
{
    const struct call *call;
    uint64_t token = 0;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    call = ck_call(0, CALL_ACQUIRE, "a");
    ck_assert(!call->try);
    ck_assert_str_eq(call->peer, "c1");
    ck_assert_str_eq(hold_name(call->hold), "a");
    ck_assert_uint_eq(stats().waiting, 1);
    ck_assert_uint_eq(stats().held, 0);

    locks_backend_granted(call->hold, 42);
    ck_done(&c1, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_eq(c1.recs[0].token, 42);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_uint_eq(stats().held, 1);
    ck_assert_uint_eq(stats().grants, 1);

    /* Re-entry needs no backend call. */
    ck_assert_int_eq(lock(&c1, "a", -1, &token), LOCKS_GRANTED);
    ck_assert_uint_eq(token, 42);
    ck_assert_int_eq(fake.ncalls, 1);

    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_assert_int_eq(fake.ncalls, 1);    /* still held once */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_call(1, CALL_RELEASE, "a");
    ck_assert_int_eq(fake.ncalls, 2);
}
END_TEST

START_TEST(fake_sync_grant)
{
    uint64_t token = 0;

    /* The backend answers inside acquire(): the caller gets it as the result. */
    fake.mode = FAKE_GRANT;
    ck_assert_int_eq(lock(&c1, "a", 5, &token), LOCKS_GRANTED);
    ck_assert_uint_eq(token, 1);
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 1);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_RELEASED);
    ck_call(1, CALL_RELEASE, "a");
    ck_call(2, CALL_ACQUIRE, "a");
    ck_assert_str_eq(fake.calls[2].peer, "c2");
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_eq(c2.recs[0].token, 2);
    /* The synchronous grant's wait timer went with it. */
    run_past_ms(20);
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_uint_eq(stats().timeouts, 0);
}
END_TEST

START_TEST(fake_sync_busy)
{
    fake.mode = FAKE_BUSY;
    ck_assert_int_eq(trylock(&c1, "a"), LOCKS_BUSY);
    ck_assert(fake.calls[0].try);
    ck_assert_int_eq(lock(&c1, "a", 0, NULL), LOCKS_BUSY);
    ck_assert(fake.calls[1].try);
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert_uint_eq(stats().waiting, 0);
    /* The lock went away with its only waiter: a new request starts afresh. */
    fake.mode = FAKE_MANUAL;
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_call(2, CALL_ACQUIRE, "a");
    ck_assert(!fake.calls[2].try);
}
END_TEST

START_TEST(fake_sync_unavailable)
{
    fake.mode = FAKE_UNAVAILABLE;
    ck_assert_int_eq(trylock(&c1, "a"), LOCKS_UNAVAILABLE);
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert_uint_eq(stats().waiting, 0);
}
END_TEST

START_TEST(fake_trylock_awaited_lock)
{
    /* Awaited (acquiring) counts as taken for TRYLOCK and wait 0. */
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(trylock(&c2, "a"), LOCKS_BUSY);
    ck_assert_int_eq(lock(&c2, "a", 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(fake.ncalls, 1);
    ck_assert_uint_eq(stats().waiting, 1);
}
END_TEST

START_TEST(fake_head_leaves_next_inherits)
{
    struct hold *l;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "a", -1, NULL), LOCKS_WAITING);
    l = ck_call(0, CALL_ACQUIRE, "a")->hold;

    locks_owner_release_all(t, &c1.c);
    /* No cancel, no new acquire: the acquisition is handed to c2. */
    ck_assert_int_eq(fake.ncalls, 2);
    ck_assert_str_eq(ck_call(1, CALL_REASSIGN, "a")->peer, "c2");
    l = fake.calls[1].hold;
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_uint_eq(stats().waiting, 2);

    locks_backend_granted(l, 9);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_eq(c2.recs[0].token, 9);
    ck_assert_int_eq(c3.nrecs, 0);
}
END_TEST

START_TEST(fake_sole_waiter_leaves_cancels)
{
    struct hold *l;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    l = ck_call(0, CALL_ACQUIRE, "a")->hold;
    ck_assert_ptr_null(hold_backend_data(l));
    hold_set_backend_data(l, &fake);
    ck_assert_ptr_eq(hold_backend_data(l), &fake);

    locks_owner_release_all(t, &c1.c);
    ck_call(1, CALL_CANCEL, "a");
    ck_assert_ptr_eq(fake.calls[1].hold, l);
    ck_assert_int_eq(fake.ncalls, 2);
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_uint_eq(stats().waiting, 0);

    /* A later request gets a new lock, with a fresh backend slot. */
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_ptr_null(hold_backend_data(ck_call(2, CALL_ACQUIRE, "a")->hold));
}
END_TEST

START_TEST(fake_waiter_behind_leaves)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    locks_owner_release_all(t, &c2.c);
    ck_assert_int_eq(fake.ncalls, 1);
    locks_backend_granted(fake.calls[0].hold, 3);
    ck_done(&c1, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(c2.nrecs, 0);
}
END_TEST

START_TEST(fake_head_times_out_next_inherits)
{
    struct hold *l;

    ck_assert_int_eq(lock(&c1, "a", 5, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    l = fake.calls[0].hold;
    run_until(&c1, 1);
    ck_done(&c1, 0, "a", LOCKS_TIMEOUT);
    ck_assert_int_eq(fake.ncalls, 2);
    ck_assert_str_eq(ck_call(1, CALL_REASSIGN, "a")->peer, "c2");
    l = fake.calls[1].hold;
    locks_backend_granted(l, 5);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
}
END_TEST

START_TEST(fake_sole_waiter_times_out_cancels)
{
    ck_assert_int_eq(lock(&c1, "a", 5, NULL), LOCKS_WAITING);
    run_until(&c1, 1);
    ck_done(&c1, 0, "a", LOCKS_TIMEOUT);
    ck_call(1, CALL_CANCEL, "a");
    ck_assert_int_eq(fake.ncalls, 2);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_uint_eq(stats().timeouts, 1);
    ck_assert_uint_eq(c1.c.nholds, 0);
}
END_TEST

START_TEST(fake_try_busy_then_fresh_acquire)
{
    struct hold *l;

    ck_assert_int_eq(trylock(&c1, "a"), LOCKS_WAITING);
    ck_assert(ck_call(0, CALL_ACQUIRE, "a")->try);
    l = fake.calls[0].hold;
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "a", -1, NULL), LOCKS_WAITING);

    locks_backend_refused(l, LOCKS_BUSY);
    ck_done(&c1, 0, "a", LOCKS_BUSY);
    ck_assert_uint_eq(c1.c.nholds, 0);
    /* A try answer is no answer for a waiter: ask again, without try. */
    ck_call(1, CALL_ACQUIRE, "a");
    ck_assert(!fake.calls[1].try);
    ck_assert_str_eq(fake.calls[1].peer, "c2");
    ck_assert_int_eq(c2.nrecs, 0);

    locks_backend_granted(fake.calls[1].hold, 11);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_int_eq(c3.nrecs, 0);
    ck_assert_uint_eq(stats().waiting, 1);
}
END_TEST

START_TEST(fake_try_head_leaves_fresh_acquire)
{
    ck_assert_int_eq(trylock(&c1, "a"), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    locks_owner_release_all(t, &c1.c);
    /* The try acquisition could answer busy: cancel it and start over. */
    ck_call(1, CALL_CANCEL, "a");
    ck_call(2, CALL_ACQUIRE, "a");
    ck_assert(!fake.calls[2].try);
    ck_assert_str_eq(fake.calls[2].peer, "c2");
    ck_assert_int_eq(c1.nrecs, 0);
}
END_TEST

START_TEST(fake_unavailable)
{
    ck_assert_int_eq(trylock(&c1, "a"), LOCKS_WAITING);
    locks_backend_refused(fake.calls[0].hold, LOCKS_UNAVAILABLE);
    ck_done(&c1, 0, "a", LOCKS_UNAVAILABLE);
    ck_assert_uint_eq(c1.recs[0].token, 0);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_int_eq(fake.ncalls, 1);        /* nothing else to ask for */
}
END_TEST

START_TEST(fake_lost)
{
    struct hold *l;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    l = fake.calls[0].hold;
    locks_backend_granted(l, 7);
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_GRANTED);   /* depth 2 */
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);

    locks_backend_lost(l, "session-expired");
    ck_assert_int_eq(c1.nrecs, 2);
    ck_assert_int_eq(c1.recs[1].kind, REC_LOST);
    ck_assert_str_eq(c1.recs[1].name, "a");
    ck_assert_uint_eq(c1.recs[1].token, 7);
    ck_assert_str_eq(c1.recs[1].reason, "session-expired");
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "a"), LOCKS_NOT_HELD);
    ck_assert_uint_eq(stats().lost, 1);
    ck_assert_uint_eq(stats().held, 0);
    ck_assert_uint_eq(stats().waiting, 1);

    /* No release for a lost hold; the next waiter asks afresh. */
    ck_call(1, CALL_ACQUIRE, "a");
    ck_assert(!fake.calls[1].try);
    ck_assert_str_eq(fake.calls[1].peer, "c2");
    ck_assert_int_eq(fake.ncalls, 2);
    locks_backend_granted(fake.calls[1].hold, 8);
    ck_done(&c2, 0, "a", LOCKS_GRANTED);
    ck_assert_uint_eq(c2.recs[0].token, 8);
}
END_TEST

START_TEST(fake_lost_sole_holder)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    locks_backend_granted(fake.calls[0].hold, 7);
    locks_backend_lost(fake.calls[0].hold, "zk-disconnected");
    ck_assert_int_eq(c1.recs[1].kind, REC_LOST);
    ck_assert_str_eq(c1.recs[1].reason, "zk-disconnected");
    ck_assert_int_eq(fake.ncalls, 1);
    ck_assert_uint_eq(stats().held, 0);
    /* The lock is gone: a new request makes a new one. */
    ck_assert_int_eq(lock(&c2, "a", -1, NULL), LOCKS_WAITING);
    ck_call(1, CALL_ACQUIRE, "a");
}
END_TEST

START_TEST(fake_answers_out_of_turn_ignored)
{
    struct hold *l;

    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    l = fake.calls[0].hold;
    locks_backend_lost(l, "x");                 /* not held yet */
    ck_assert_int_eq(c1.nrecs, 0);
    locks_backend_granted(l, 1);
    locks_backend_granted(l, 2);                /* already held */
    locks_backend_refused(l, LOCKS_BUSY);
    locks_backend_refused(l, LOCKS_UNAVAILABLE);
    ck_assert_int_eq(c1.nrecs, 1);
    ck_assert_uint_eq(c1.recs[0].token, 1);
    ck_assert_uint_eq(stats().held, 1);
    ck_assert_uint_eq(stats().grants, 1);
}
END_TEST

/* Stopping: a released lock goes to nobody, and its waiters just leave. */
START_TEST(fake_shutdown_grants_nothing)
{
    uint64_t tok;

    ck_assert_int_eq(lock(&c1, "s", -1, &tok), LOCKS_WAITING);
    locks_backend_granted(fake.calls[0].hold, 5);
    ck_assert_int_eq(lock(&c1, "s", -1, &tok), LOCKS_GRANTED);   /* re-entrant */
    ck_assert_int_eq(lock(&c2, "s", -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "s", 50, NULL), LOCKS_WAITING);
    locks_shutdown(t);
    locks_owner_release_all(t, &c1.c);
    ck_call(1, CALL_RELEASE, "s");
    ck_assert_int_eq(fake.ncalls, 2);               /* no acquire for c2 */
    ck_assert_int_eq(stats().held, 0);
    ck_assert_int_eq(stats().waiting, 2);
    locks_owner_release_all(t, &c2.c);
    locks_owner_release_all(t, &c3.c);
    ck_assert_int_eq(stats().waiting, 0);
    run_past_ms(80);                                /* c3's deadline is gone with it */
    ck_assert_int_eq(c2.nrecs, 0);
    ck_assert_int_eq(c3.nrecs, 0);
    ck_assert_int_eq(fake.ncalls, 2);
}
END_TEST

START_TEST(fake_free_with_outstanding)
{
    ck_assert_int_eq(lock(&c1, "a", -1, NULL), LOCKS_WAITING);
    locks_backend_granted(fake.calls[0].hold, 1);
    ck_assert_int_eq(lock(&c2, "a", 60000, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock(&c3, "b", 60000, NULL), LOCKS_WAITING);   /* acquiring */
    locks_free(t);
    t = NULL;
    ck_assert_int_eq(fake.ncalls, 2);          /* the backend is not called */
    ck_assert_uint_eq(c1.c.nholds + c2.c.nholds + c3.c.nholds, 0);
    ck_assert_int_eq(c1.nrecs, 1);             /* its grant, nothing since */
    ck_assert_int_eq(c2.nrecs + c3.nrecs, 0);
    ck_assert_int_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);
}
END_TEST

/* ------------------------------------------------------------ modes (fake backend) */

/* The "modes" tests: the fake grants inside acquire(), so every decision of
 * the table is answered at once, with tokens 1, 2, 3... in grant order, and
 * each acquire / release the table asks for is recorded. */
static void setup_fake_grant(void)
{
    setup_fake();
    fake.mode = FAKE_GRANT;
}

START_TEST(modes_shared_granted_together)
{
    uint64_t t1 = 0, t2 = 0, t3 = 0;
    struct locks_status ls;

    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, &t1), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_SHARED, 0, 0, &t2), LOCKS_GRANTED);
    ck_assert_int_eq(try_as(&c3, "r", LOCK_SHARED, 0, &t3), LOCKS_GRANTED);
    ck_assert_uint_eq(t1, 1);
    ck_assert_uint_eq(t2, 2);
    ck_assert_uint_eq(t3, 3);
    ck_assert_int_eq(fake.ncalls, 3);
    ck_call_by(0, CALL_ACQUIRE, "r", "c1");
    ck_call_by(1, CALL_ACQUIRE, "r", "c2");
    ck_call_by(2, CALL_ACQUIRE, "r", "c3");
    ck_assert_int_eq(c1.nrecs + c2.nrecs + c3.nrecs, 0);   /* answered by return values */
    ls = status("r");
    ck_assert(ls.held);
    ck_assert_str_eq(ls.holder, "c1");
    ck_assert_uint_eq(ls.token, 1);
    ck_assert_int_eq(ls.mode, LOCK_SHARED);
    ck_assert_uint_eq(ls.holders, 3);
    ck_assert_uint_eq(ls.waiters, 0);
    ck_assert_int_eq(ls.waited_ms, -1);                /* nobody waits: no wait to tell */
    ck_assert_uint_eq(stats().held, 3);
    ck_assert_uint_eq(stats().grants_by_mode[LOCK_SHARED], 3);

    /* One reader leaving keeps the others; the earliest left is now named. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_RELEASED);
    ck_call_by(3, CALL_RELEASE, "r", "c1");
    ls = status("r");
    ck_assert_str_eq(ls.holder, "c2");
    ck_assert_uint_eq(ls.token, 2);
    ck_assert_uint_eq(ls.holders, 2);
    ck_assert_int_eq(try_as(&c4, "r", LOCK_EXCLUSIVE, 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(fake.ncalls, 4);
}
END_TEST

START_TEST(modes_exclusive_waits_for_all_shared)
{
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 2);                  /* not asked for the writer yet */
    ck_assert_uint_eq(status("r").waiters, 1);
    ck_assert_int_ge(status("r").waited_ms, 0);        /* the writer's, since its request */

    ck_assert_int_eq(locks_unlock(t, &c2.c, "r"), LOCKS_RELEASED);
    ck_call_by(2, CALL_RELEASE, "r", "c2");
    ck_assert_int_eq(fake.ncalls, 3);                  /* c1 still reads */
    ck_assert_int_eq(c3.nrecs, 0);

    ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_RELEASED);
    ck_call_by(3, CALL_RELEASE, "r", "c1");
    ck_call_by(4, CALL_ACQUIRE, "r", "c3");
    ck_done(&c3, 0, "r", LOCKS_GRANTED);
    ck_assert_uint_eq(c3.recs[0].token, 3);
    ck_assert_int_eq(status("r").mode, LOCK_EXCLUSIVE);
    ck_assert_int_eq(try_as(&c1, "r", LOCK_SHARED, 0, NULL), LOCKS_BUSY);
}
END_TEST

START_TEST(modes_shared_behind_waiting_exclusive_waits)
{
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    /* It would fit beside c1, but the writer came first. */
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 1);
    ck_assert_uint_eq(status("r").holders, 1);
    ck_assert_uint_eq(status("r").waiters, 2);

    ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_RELEASED);
    ck_call_by(2, CALL_ACQUIRE, "r", "c2");
    ck_done(&c2, 0, "r", LOCKS_GRANTED);
    ck_assert_int_eq(c3.nrecs, 0);
    ck_assert_int_eq(fake.ncalls, 3);

    ck_assert_int_eq(locks_unlock(t, &c2.c, "r"), LOCKS_RELEASED);
    ck_call_by(4, CALL_ACQUIRE, "r", "c3");
    ck_done(&c3, 0, "r", LOCKS_GRANTED);
    ck_assert_uint_gt(c3.recs[0].token, c2.recs[0].token);
}
END_TEST

START_TEST(modes_shared_run_granted_at_exclusive_release)
{
    uint64_t t1 = 0;

    ck_assert_int_eq(lock_as(&c1, "r", LOCK_EXCLUSIVE, 0, -1, &t1), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c4, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c5, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c6, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 1);

    /* The two readers at the head go together, and no further. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_RELEASED);
    ck_assert_int_eq(fake.ncalls, 4);
    ck_call_by(1, CALL_RELEASE, "r", "c1");
    ck_call_by(2, CALL_ACQUIRE, "r", "c2");
    ck_call_by(3, CALL_ACQUIRE, "r", "c3");
    ck_done(&c2, 0, "r", LOCKS_GRANTED);
    ck_done(&c3, 0, "r", LOCKS_GRANTED);
    ck_assert_uint_lt(c2.recs[0].seq, c3.recs[0].seq);
    ck_assert_uint_gt(c2.recs[0].token, t1);
    ck_assert_uint_gt(c3.recs[0].token, c2.recs[0].token);
    ck_assert_int_eq(c4.nrecs + c5.nrecs + c6.nrecs, 0);
    ck_assert_uint_eq(status("r").holders, 2);
    ck_assert_uint_eq(status("r").waiters, 3);

    ck_assert_int_eq(locks_unlock(t, &c3.c, "r"), LOCKS_RELEASED);
    ck_assert_int_eq(c4.nrecs, 0);
    ck_assert_int_eq(locks_unlock(t, &c2.c, "r"), LOCKS_RELEASED);
    ck_done(&c4, 0, "r", LOCKS_GRANTED);
    ck_assert_int_eq(c5.nrecs + c6.nrecs, 0);

    /* And the two readers behind the second writer, at its release. */
    ck_assert_int_eq(locks_unlock(t, &c4.c, "r"), LOCKS_RELEASED);
    ck_done(&c5, 0, "r", LOCKS_GRANTED);
    ck_done(&c6, 0, "r", LOCKS_GRANTED);
    ck_assert_uint_gt(c5.recs[0].token, c4.recs[0].token);
    ck_assert_uint_gt(c6.recs[0].token, c5.recs[0].token);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_uint_eq(stats().held, 2);
    ck_assert_uint_eq(stats().grants_by_mode[LOCK_SHARED], 4);
    ck_assert_uint_eq(stats().grants_by_mode[LOCK_EXCLUSIVE], 2);
}
END_TEST

START_TEST(modes_limit_grants_n_queues_the_next)
{
    struct locks_status ls;
    uint64_t t3 = 0;

    ck_assert_int_eq(lock_as(&c1, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "s", LOCK_LIMIT, 3, 0, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(try_as(&c3, "s", LOCK_LIMIT, 3, &t3), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c4, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c5, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 3);
    ls = status("s");
    ck_assert(ls.held);
    ck_assert_int_eq(ls.mode, LOCK_LIMIT);
    ck_assert_uint_eq(ls.limit, 3);
    ck_assert_uint_eq(ls.holders, 3);
    ck_assert_uint_eq(ls.waiters, 2);
    ck_assert_str_eq(ls.holder, "c1");

    /* One out, one in: the first waiter only. */
    ck_assert_int_eq(locks_unlock(t, &c2.c, "s"), LOCKS_RELEASED);
    ck_call_by(3, CALL_RELEASE, "s", "c2");
    ck_call_by(4, CALL_ACQUIRE, "s", "c4");
    ck_assert_int_eq(fake.ncalls, 5);
    ck_done(&c4, 0, "s", LOCKS_GRANTED);
    ck_assert_uint_gt(c4.recs[0].token, t3);
    ck_assert_int_eq(c5.nrecs, 0);
    ck_assert_uint_eq(status("s").holders, 3);

    /* Closing a holder lets the next in too. */
    locks_owner_release_all(t, &c1.c);
    ck_done(&c5, 0, "s", LOCKS_GRANTED);
    ck_assert_uint_eq(status("s").holders, 3);
    ck_assert_uint_eq(status("s").waiters, 0);
    ck_assert_uint_eq(stats().grants_by_mode[LOCK_LIMIT], 5);

    /* limit=1 is an exclusive lock by another name. */
    ck_assert_int_eq(lock_as(&c1, "one", LOCK_LIMIT, 1, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "one", LOCK_LIMIT, 1, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "one"), LOCKS_RELEASED);
    ck_done(&c2, 0, "one", LOCKS_GRANTED);
}
END_TEST

START_TEST(modes_conflicts_change_nothing)
{
    struct locks_stats before, after;
    struct locks_status s_before, s_after;
    int calls;

    ck_assert_int_eq(lock_as(&c1, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "x", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "x", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c2, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c4, "s", LOCK_LIMIT, 2, 60000, NULL), LOCKS_WAITING);
    before = stats();
    s_before = status("s");
    calls = fake.ncalls;

    /* Another limit, on a name in use as a semaphore (holders and a waiter). */
    ck_assert_int_eq(lock_as(&c3, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(lock_as(&c3, "s", LOCK_LIMIT, 1, 0, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(try_as(&c3, "s", LOCK_LIMIT, 65535, NULL), LOCKS_CONFLICT);
    /* A lock's mode on a semaphore's name. */
    ck_assert_int_eq(lock_as(&c3, "s", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(lock_as(&c3, "s", LOCK_SHARED, 0, 100, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(try_as(&c3, "s", LOCK_SHARED, 0, NULL), LOCKS_CONFLICT);
    /* A semaphore on a lock's name, held exclusively (and awaited) or shared. */
    ck_assert_int_eq(lock_as(&c3, "x", LOCK_LIMIT, 2, -1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(try_as(&c3, "x", LOCK_LIMIT, 1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_LIMIT, 1, -1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_LIMIT, 5, 0, NULL), LOCKS_CONFLICT);

    ck_assert_int_eq(fake.ncalls, calls);
    after = stats();
    ck_stats_eq(&after, &before);
    ck_assert_uint_eq(c3.c.nholds, 0);
    ck_assert(TAILQ_EMPTY(&c3.c.holds));
    ck_assert_int_eq(c1.nrecs + c2.nrecs + c3.nrecs + c4.nrecs, 0);
    s_after = status("s");
    ck_assert_uint_eq(s_after.holders, s_before.holders);
    ck_assert_uint_eq(s_after.waiters, s_before.waiters);
    ck_assert_uint_eq(s_after.limit, 2);
    ck_assert_uint_eq(status("x").waiters, 1);
    ck_assert_uint_eq(status("r").holders, 1);
    ck_assert_int_eq(status("r").mode, LOCK_SHARED);

    /* The queues are as they were: the waiters next, in order. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "s"), LOCKS_RELEASED);
    ck_done(&c4, 0, "s", LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "x"), LOCKS_RELEASED);
    ck_done(&c2, 0, "x", LOCKS_GRANTED);
    ck_assert_int_eq(c3.nrecs, 0);
    /* A refused request left no timer behind either. */
    run_past_ms(120);
    ck_assert_int_eq(c3.nrecs, 0);

    /* Once nobody uses a name, any mode and limit may have it. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_RELEASED);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_LIMIT, 5, -1, NULL), LOCKS_GRANTED);
    ck_assert_uint_eq(status("r").limit, 5);
}
END_TEST

START_TEST(modes_mode_held_for_another_mode_of_own_hold)
{
    struct locks_stats before, after;
    uint64_t tok = 0;

    ck_assert_int_eq(lock_as(&c1, "x", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_GRANTED);
    before = stats();

    /* No upgrade, no downgrade, whether it would have to wait or not. */
    ck_assert_int_eq(lock_as(&c1, "x", LOCK_SHARED, 0, -1, &tok), LOCKS_MODE_HELD);
    ck_assert_int_eq(try_as(&c1, "x", LOCK_SHARED, 0, &tok), LOCKS_MODE_HELD);
    ck_assert_int_eq(lock_as(&c1, "x", LOCK_LIMIT, 2, -1, &tok), LOCKS_MODE_HELD);
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_EXCLUSIVE, 0, -1, &tok), LOCKS_MODE_HELD);
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_EXCLUSIVE, 0, 0, &tok), LOCKS_MODE_HELD);
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_LIMIT, 1, -1, &tok), LOCKS_MODE_HELD);
    ck_assert_int_eq(lock_as(&c1, "s", LOCK_EXCLUSIVE, 0, -1, &tok), LOCKS_MODE_HELD);
    ck_assert_int_eq(lock_as(&c1, "s", LOCK_SHARED, 0, -1, &tok), LOCKS_MODE_HELD);
    /* The same mode with another limit is not a re-entry either. */
    ck_assert_int_eq(lock_as(&c1, "s", LOCK_LIMIT, 3, -1, &tok), LOCKS_MODE_HELD);

    ck_assert_int_eq(fake.ncalls, 4);
    after = stats();
    ck_stats_eq(&after, &before);
    ck_assert_uint_eq(c1.c.nholds, 3);
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_uint_eq(status("s").limit, 2);

    /* No depth was added: one UNLOCK each releases. */
    ck_assert_int_eq(locks_unlock(t, &c1.c, "x"), LOCKS_RELEASED);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_RELEASED);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "s"), LOCKS_RELEASED);
    ck_assert_int_eq(fake.ncalls, 7);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert_int_eq(try_as(&c3, "x", LOCK_EXCLUSIVE, 0, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(try_as(&c3, "s", LOCK_SHARED, 0, NULL), LOCKS_GRANTED);
}
END_TEST

START_TEST(modes_reentrant_same_mode)
{
    uint64_t tr = 0, ts = 0, tok = 0;

    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, &tr), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    /* Again, not behind the waiting writer (which would deadlock). */
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, &tok), LOCKS_GRANTED);
    ck_assert_uint_eq(tok, tr);
    tok = 0;
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, 0, &tok), LOCKS_GRANTED);
    ck_assert_uint_eq(tok, tr);
    tok = 0;
    ck_assert_int_eq(try_as(&c1, "r", LOCK_SHARED, 0, &tok), LOCKS_GRANTED);
    ck_assert_uint_eq(tok, tr);

    ck_assert_int_eq(lock_as(&c3, "s", LOCK_LIMIT, 1, -1, &ts), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c4, "s", LOCK_LIMIT, 1, -1, NULL), LOCKS_WAITING);
    tok = 0;
    ck_assert_int_eq(lock_as(&c3, "s", LOCK_LIMIT, 1, -1, &tok), LOCKS_GRANTED);
    ck_assert_uint_eq(tok, ts);

    ck_assert_int_eq(fake.ncalls, 2);
    ck_assert_uint_eq(stats().grants, 2);
    ck_assert_uint_eq(stats().grants_by_mode[LOCK_SHARED], 1);
    ck_assert_uint_eq(stats().grants_by_mode[LOCK_LIMIT], 1);
    ck_assert_uint_eq(stats().held, 2);
    ck_assert_uint_eq(c1.c.nholds, 1);
    ck_assert_uint_eq(status("r").holders, 1);

    /* Counted: four holds of r, two of s. */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_RELEASED);
    ck_assert_int_eq(c2.nrecs, 0);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_RELEASED);
    ck_done(&c2, 0, "r", LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock(t, &c3.c, "s"), LOCKS_RELEASED);
    ck_assert_int_eq(c4.nrecs, 0);
    ck_assert_int_eq(locks_unlock(t, &c3.c, "s"), LOCKS_RELEASED);
    ck_done(&c4, 0, "s", LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock(t, &c1.c, "r"), LOCKS_NOT_HELD);
}
END_TEST

START_TEST(modes_try_busy_when_not_fitting_or_awaited)
{
    struct locks_stats before, after;
    int calls;

    /* Fits and nobody waits: granted at once. */
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(try_as(&c2, "r", LOCK_SHARED, 0, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_SHARED, 0, 0, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(try_as(&c2, "s", LOCK_LIMIT, 2, NULL), LOCKS_GRANTED);
    before = stats();
    calls = fake.ncalls;

    /* Does not fit. */
    ck_assert_int_eq(try_as(&c4, "r", LOCK_EXCLUSIVE, 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(lock_as(&c4, "r", LOCK_EXCLUSIVE, 0, 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(try_as(&c4, "s", LOCK_LIMIT, 2, NULL), LOCKS_BUSY);
    ck_assert_int_eq(lock_as(&c4, "s", LOCK_LIMIT, 2, 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(fake.ncalls, calls);
    after = stats();
    ck_stats_eq(&after, &before);

    /* Fits beside the readers, but a writer waits. */
    ck_assert_int_eq(lock_as(&c5, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    before = stats();
    ck_assert_int_eq(try_as(&c4, "r", LOCK_SHARED, 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(lock_as(&c4, "r", LOCK_SHARED, 0, 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(fake.ncalls, calls);
    after = stats();
    ck_stats_eq(&after, &before);
    ck_assert_uint_eq(c4.c.nholds, 0);
    ck_assert_int_eq(c4.nrecs, 0);
    ck_assert_uint_eq(status("r").waiters, 1);
}
END_TEST

START_TEST(modes_release_all_mixed)
{
    ck_assert_int_eq(lock_as(&c4, "w", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "x", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "x", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "s", LOCK_LIMIT, 1, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "w", LOCK_EXCLUSIVE, 0, 60000, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "x", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c3, "x", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c3, "s", LOCK_LIMIT, 1, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c5, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c6, "w", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 5);
    ck_assert_uint_eq(stats().held, 5);
    ck_assert_uint_eq(stats().waiting, 6);

    locks_owner_release_all(t, &c1.c);
    ck_assert_uint_eq(c1.c.nholds, 0);
    ck_assert(TAILQ_EMPTY(&c1.c.holds));
    ck_assert_int_eq(c1.nrecs, 0);
    /* x (depth 2 did not matter): both readers at once. */
    ck_call_by(5, CALL_RELEASE, "x", "c1");
    ck_call_by(6, CALL_ACQUIRE, "x", "c2");
    ck_call_by(7, CALL_ACQUIRE, "x", "c3");
    /* r: c2 still reads, the writer waits. */
    ck_call_by(8, CALL_RELEASE, "r", "c1");
    /* s: the next holder. */
    ck_call_by(9, CALL_RELEASE, "s", "c1");
    ck_call_by(10, CALL_ACQUIRE, "s", "c3");
    /* w: the wait was only queued here, nothing to tell the backend. */
    ck_assert_int_eq(fake.ncalls, 11);
    ck_assert_int_eq(c2.nrecs, 1);
    ck_done(&c2, 0, "x", LOCKS_GRANTED);
    ck_assert_int_eq(c3.nrecs, 2);
    ck_done(&c3, 0, "x", LOCKS_GRANTED);
    ck_done(&c3, 1, "s", LOCKS_GRANTED);
    ck_assert_int_eq(c4.nrecs + c5.nrecs + c6.nrecs, 0);
    ck_assert_uint_eq(stats().held, 5);        /* w c4, r c2, x c2 c3, s c3 */
    ck_assert_uint_eq(stats().waiting, 2);     /* r c5, w c6 */
    ck_assert_uint_eq(status("w").waiters, 1);

    /* c1's cancelled wait takes nothing when w is free; its deadline is gone. */
    ck_assert_int_eq(locks_unlock(t, &c4.c, "w"), LOCKS_RELEASED);
    ck_done(&c6, 0, "w", LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock(t, &c2.c, "r"), LOCKS_RELEASED);
    ck_done(&c5, 0, "r", LOCKS_GRANTED);
    ck_assert_int_eq(c1.nrecs, 0);
    ck_assert_uint_eq(stats().waiting, 0);
}
END_TEST

START_TEST(modes_stats_grants_by_mode)
{
    struct locks_stats st;

    ck_assert_int_eq(lock_as(&c1, "x", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "x", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(try_as(&c2, "r", LOCK_SHARED, 0, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c3, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c4, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c5, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c6, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_WAITING);
    /* Refusals are no grants. */
    ck_assert_int_eq(try_as(&c2, "x", LOCK_EXCLUSIVE, 0, NULL), LOCKS_BUSY);
    ck_assert_int_eq(lock_as(&c2, "s", LOCK_LIMIT, 4, -1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_MODE_HELD);
    st = stats();
    ck_assert_uint_eq(st.grants_by_mode[LOCK_EXCLUSIVE], 1);
    ck_assert_uint_eq(st.grants_by_mode[LOCK_SHARED], 2);
    ck_assert_uint_eq(st.grants_by_mode[LOCK_LIMIT], 3);
    ck_assert_uint_eq(st.grants, 6);
    ck_assert_uint_eq(st.held, 6);
    ck_assert_uint_eq(st.waiting, 1);

    /* A waiter's grant counts when it happens. */
    ck_assert_int_eq(locks_unlock(t, &c4.c, "s"), LOCKS_RELEASED);
    ck_done(&c6, 0, "s", LOCKS_GRANTED);
    st = stats();
    ck_assert_uint_eq(st.grants_by_mode[LOCK_LIMIT], 4);
    ck_assert_uint_eq(st.grants, 7);
    ck_assert_uint_eq(st.grants, st.grants_by_mode[LOCK_EXCLUSIVE] +
                      st.grants_by_mode[LOCK_SHARED] + st.grants_by_mode[LOCK_LIMIT]);
}
END_TEST

START_TEST(modes_timed_out_writer_lets_readers_in)
{
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_GRANTED);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_EXCLUSIVE, 0, 5, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c4, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    run_until(&c2, 1);
    ck_done(&c2, 0, "r", LOCKS_TIMEOUT);
    /* The readers behind it fit beside c1 now. */
    ck_done(&c3, 0, "r", LOCKS_GRANTED);
    ck_done(&c4, 0, "r", LOCKS_GRANTED);
    ck_assert_uint_eq(status("r").holders, 3);
    ck_assert_uint_eq(stats().waiting, 0);
    ck_assert_uint_eq(stats().timeouts, 1);
}
END_TEST

/* ------------------------------------------------------------ modes, answered later */

START_TEST(fake_shared_admitted_together)
{
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c4, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    /* Asked for the three readers at once, not for the writer. */
    ck_assert_int_eq(fake.ncalls, 3);
    ck_call_by(0, CALL_ACQUIRE, "r", "c1");
    ck_call_by(1, CALL_ACQUIRE, "r", "c2");
    ck_call_by(2, CALL_ACQUIRE, "r", "c3");
    ck_assert_uint_eq(stats().waiting, 4);

    /* Answered in any order. */
    locks_backend_granted(fake.calls[1].hold, 11);
    locks_backend_granted(fake.calls[0].hold, 12);
    locks_backend_granted(fake.calls[2].hold, 13);
    ck_done(&c1, 0, "r", LOCKS_GRANTED);
    ck_done(&c2, 0, "r", LOCKS_GRANTED);
    ck_done(&c3, 0, "r", LOCKS_GRANTED);
    ck_assert_uint_eq(c2.recs[0].token, 11);
    ck_assert_int_eq(c4.nrecs, 0);
    ck_assert_uint_eq(stats().held, 3);
    ck_assert_uint_eq(stats().waiting, 1);
}
END_TEST

START_TEST(fake_conflict_with_awaited_name)
{
    /* Not held yet, only being acquired: its mode counts all the same. */
    ck_assert_int_eq(lock_as(&c1, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c2, "s", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(lock_as(&c2, "s", LOCK_LIMIT, 3, -1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(lock_as(&c1, "x", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c2, "x", LOCK_LIMIT, 1, -1, NULL), LOCKS_CONFLICT);
    ck_assert_int_eq(fake.ncalls, 2);
    ck_assert_uint_eq(c2.c.nholds, 0);
    ck_assert_uint_eq(stats().waiting, 2);
}
END_TEST

START_TEST(fake_limit_acquiring_handed_over)
{
    struct hold *h;

    ck_assert_int_eq(lock_as(&c1, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c2, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c3, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c4, "s", LOCK_LIMIT, 2, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 2);                  /* c1 and c2 are being acquired */
    locks_backend_granted(fake.calls[0].hold, 5);
    ck_done(&c1, 0, "s", LOCKS_GRANTED);
    hold_set_backend_data(fake.calls[1].hold, &fake);

    /* c2 leaves while acquiring: c3, next in line, takes over its acquisition. */
    locks_owner_release_all(t, &c2.c);
    ck_assert_int_eq(fake.ncalls, 3);
    h = ck_call_by(2, CALL_REASSIGN, "s", "c3")->hold;
    ck_assert_ptr_eq(hold_backend_data(h), &fake);
    ck_assert_int_eq(hold_limit(h), 2);
    ck_assert_int_eq(hold_mode(h), LOCK_LIMIT);
    ck_assert_int_eq(c2.nrecs + c3.nrecs + c4.nrecs, 0);
    ck_assert_uint_eq(stats().waiting, 2);
    ck_assert_uint_eq(status("s").waiters, 2);

    locks_backend_granted(h, 6);
    ck_done(&c3, 0, "s", LOCKS_GRANTED);
    ck_assert_uint_eq(c3.recs[0].token, 6);
    ck_assert_int_eq(c4.nrecs, 0);
    ck_assert_uint_eq(status("s").holders, 2);
    ck_assert_int_eq(fake.ncalls, 3);
}
END_TEST

START_TEST(fake_shared_acquiring_leaves_cancelled)
{
    /* Next in line is a writer: the reader's acquisition is cancelled and
     * the writer asked for afresh; the reader behind the writer waits. */
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 1);
    locks_owner_release_all(t, &c1.c);
    ck_call_by(1, CALL_CANCEL, "r", "c1");
    ck_call_by(2, CALL_ACQUIRE, "r", "c2");
    ck_assert_int_eq(fake.ncalls, 3);
    ck_assert_int_eq(c1.nrecs + c2.nrecs + c3.nrecs, 0);
    locks_backend_granted(fake.calls[2].hold, 7);
    ck_done(&c2, 0, "r", LOCKS_GRANTED);
    ck_assert_int_eq(c3.nrecs, 0);

    /* Another reader is being acquired beside it: cancelled, nothing else. */
    ck_assert_int_eq(lock_as(&c4, "q", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c5, "q", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c6, "q", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(fake.ncalls, 5);
    locks_owner_release_all(t, &c4.c);
    ck_call_by(5, CALL_CANCEL, "q", "c4");
    ck_assert_int_eq(fake.ncalls, 6);
    locks_backend_granted(fake.calls[4].hold, 8);
    ck_done(&c5, 0, "q", LOCKS_GRANTED);
    ck_assert_int_eq(locks_unlock(t, &c5.c, "q"), LOCKS_RELEASED);
    ck_call_by(6, CALL_RELEASE, "q", "c5");
    ck_call_by(7, CALL_ACQUIRE, "q", "c6");
}
END_TEST

START_TEST(fake_exclusive_acquiring_leaves_readers_admitted)
{
    /* A writer leaving while acquiring lets the readers behind it in, each
     * with its own acquisition (no reassign across modes). */
    ck_assert_int_eq(lock_as(&c1, "r", LOCK_EXCLUSIVE, 0, 5, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c2, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c3, "r", LOCK_SHARED, 0, -1, NULL), LOCKS_WAITING);
    ck_assert_int_eq(lock_as(&c4, "r", LOCK_EXCLUSIVE, 0, -1, NULL), LOCKS_WAITING);
    run_until(&c1, 1);
    ck_done(&c1, 0, "r", LOCKS_TIMEOUT);
    ck_call_by(1, CALL_CANCEL, "r", "c1");
    ck_call_by(2, CALL_ACQUIRE, "r", "c2");
    ck_call_by(3, CALL_ACQUIRE, "r", "c3");
    ck_assert_int_eq(fake.ncalls, 4);
    ck_assert_uint_eq(stats().waiting, 3);
}
END_TEST

/* Distributed tokens (daemon/ztoken.h): a later zxid's token exceeds every
 * token of an earlier zxid plus its handoffs; no zxid wraps around. */
START_TEST(ztoken_order_and_range)
{
    uint64_t tok = 7, tok2;

    ck_assert(ztoken_of_zxid(0, &tok));
    ck_assert_uint_eq(tok, 0);
    ck_assert(ztoken_of_zxid(0x100000002LL, &tok));        /* epoch 1, counter 2 */
    ck_assert_uint_eq(tok, 0x10000000200ULL);
    ck_assert(ztoken_of_zxid(0x100000003LL, &tok2));
    ck_assert_uint_gt(tok2, tok + ZTOKEN_HANDOFFS_MAX);
    ck_assert_uint_eq(ZTOKEN_HANDOFFS_MAX, 255);
    ck_assert(ztoken_of_zxid((int64_t)ZTOKEN_ZXID_MAX, &tok));
    ck_assert_uint_eq(tok, UINT64_MAX - ZTOKEN_HANDOFFS_MAX);
    tok = 7;
    ck_assert(!ztoken_of_zxid((int64_t)ZTOKEN_ZXID_MAX + 1, &tok));
    ck_assert(!ztoken_of_zxid(-1, &tok));
    ck_assert(!ztoken_of_zxid(INT64_MAX, &tok));
    ck_assert_uint_eq(tok, 7);                              /* untouched when refused */
}
END_TEST

/* ------------------------------------------------------------ name tree */

#define TREE_N 2000

static int tree_height_ok(const struct name_node *n, int *h)
{
    int hl, hr;

    if (!n) {
        *h = 0;
        return 1;
    }
    if (!tree_height_ok(n->left, &hl) || !tree_height_ok(n->right, &hr))
        return 0;
    if (n->left && strcmp(n->left->name, n->name) >= 0)
        return 0;
    if (n->right && strcmp(n->right->name, n->name) <= 0)
        return 0;
    *h = (hl > hr ? hl : hr) + 1;
    return n->height == *h && hl - hr <= 1 && hr - hl <= 1;
}

/* Random inserts and removes: the walk is always the names in order, the
 * tree balanced; after and from find the next name from any key. */
START_TEST(name_tree_order_and_balance)
{
    static struct name_node nodes[TREE_N];
    static char names[TREE_N][16];
    static int in[TREE_N];
    struct name_node *root = NULL, *n;
    unsigned seed = 41;
    int h, count = 0;

    for (int i = 0; i < TREE_N; i++) {
        snprintf(names[i], sizeof(names[i]), "n%05d", i);
        nodes[i].name = names[i];
    }
    for (int step = 0; step < 20000; step++) {
        int i = (int)((seed = seed * 1103515245u + 12345u) >> 8) % TREE_N;

        if (in[i]) {
            name_tree_remove(&root, &nodes[i]);
            count--;
        } else {
            ck_assert_ptr_eq(name_tree_insert(&root, &nodes[i]), &nodes[i]);
            count++;
        }
        in[i] = !in[i];
        if (step % 1000 == 0 || step == 19999) {
            int seen = 0, last = -1;

            ck_assert(tree_height_ok(root, &h));
            for (n = name_tree_after(root, NULL); n; n = name_tree_after(root, n->name)) {
                int k = (int)(n - nodes);

                ck_assert_int_gt(k, last);
                ck_assert(in[k]);
                for (int j = last + 1; j < k; j++)
                    ck_assert(!in[j]);
                last = k;
                seen++;
            }
            ck_assert_int_eq(seen, count);
        }
    }
    /* A second node under a name that is there is refused. */
    for (int i = 0; i < TREE_N; i++) {
        if (in[i]) {
            struct name_node dup = { .name = names[i] };

            ck_assert_ptr_eq(name_tree_insert(&root, &dup), &nodes[i]);
            ck_assert_ptr_eq(name_tree_find(root, names[i]), &nodes[i]);
            /* after a present name: the next present one; from: itself. */
            ck_assert_ptr_eq(name_tree_from(root, names[i]), &nodes[i]);
            n = name_tree_after(root, names[i]);
            for (int j = i + 1; j <= TREE_N; j++) {
                if (j == TREE_N) {
                    ck_assert_ptr_null(n);
                } else if (in[j]) {
                    ck_assert_ptr_eq(n, &nodes[j]);
                    break;
                }
            }
        } else {
            ck_assert_ptr_null(name_tree_find(root, names[i]));
        }
    }
    ck_assert_ptr_eq(name_tree_from(root, "n"), name_tree_after(root, NULL));
    ck_assert_ptr_null(name_tree_from(root, "o"));
}
END_TEST

static Suite *locks_suite(void)
{
    Suite *s = suite_create("locks");
    TCase *tc;

    tc = tcase_create("embedded");
    tcase_add_checked_fixture(tc, setup_embedded, teardown);
    tcase_add_test(tc, grant_at_once);
    tcase_add_test(tc, grant_free_lock_without_waiting);
    tcase_add_test(tc, reentrant);
    tcase_add_test(tc, not_held);
    tcase_add_test(tc, fifo);
    tcase_add_test(tc, wait_timeout);
    tcase_add_test(tc, several_timeouts_in_order);
    tcase_add_test(tc, granted_wait_does_not_time_out);
    tcase_add_test(tc, no_wait_on_held_lock);
    tcase_add_test(tc, no_wait_never_jumps_the_queue);
    tcase_add_test(tc, limit_per_client);
    tcase_add_test(tc, keep_quota_per_account);
    tcase_add_test(tc, keep_quota_total_and_lowered);
    tcase_add_test(tc, release_all_holder);
    tcase_add_test(tc, release_all_waiter);
    tcase_add_test(tc, release_all_idle_client);
    tcase_add_test(tc, move_held_keeps_everything);
    tcase_add_test(tc, tokens_increase);
    tcase_add_test(tc, token_next_monotonic);
    tcase_add_test(tc, stats_counters);
    tcase_add_test(tc, histogram_buckets);
    tcase_add_test(tc, histograms_count_grants_and_holds);
    tcase_add_test(tc, free_with_outstanding_holds_embedded);
    tcase_add_test(tc, free_empty_and_null);
    tcase_add_test(tc, ages_follow_holds_and_waits);
    tcase_add_test(tc, ages_sorted_after_restore_and_cost);
    suite_add_tcase(s, tc);

    tc = tcase_create("fake");
    tcase_add_checked_fixture(tc, setup_fake, teardown);
    tcase_add_test(tc, fake_async_grant);
    tcase_add_test(tc, fake_sync_grant);
    tcase_add_test(tc, fake_sync_busy);
    tcase_add_test(tc, fake_ages_count_acquiring_as_waiting);
    tcase_add_test(tc, fake_sync_unavailable);
    tcase_add_test(tc, fake_trylock_awaited_lock);
    tcase_add_test(tc, fake_head_leaves_next_inherits);
    tcase_add_test(tc, fake_sole_waiter_leaves_cancels);
    tcase_add_test(tc, fake_waiter_behind_leaves);
    tcase_add_test(tc, fake_head_times_out_next_inherits);
    tcase_add_test(tc, fake_sole_waiter_times_out_cancels);
    tcase_add_test(tc, fake_try_busy_then_fresh_acquire);
    tcase_add_test(tc, fake_try_head_leaves_fresh_acquire);
    tcase_add_test(tc, fake_unavailable);
    tcase_add_test(tc, fake_lost);
    tcase_add_test(tc, fake_move_held_calls_nothing);
    tcase_add_test(tc, fake_lost_sole_holder);
    tcase_add_test(tc, fake_answers_out_of_turn_ignored);
    tcase_add_test(tc, fake_free_with_outstanding);
    tcase_add_test(tc, fake_shutdown_grants_nothing);
    tcase_add_test(tc, fake_shared_admitted_together);
    tcase_add_test(tc, fake_conflict_with_awaited_name);
    tcase_add_test(tc, fake_limit_acquiring_handed_over);
    tcase_add_test(tc, fake_shared_acquiring_leaves_cancelled);
    tcase_add_test(tc, fake_exclusive_acquiring_leaves_readers_admitted);
    suite_add_tcase(s, tc);

    tc = tcase_create("modes");
    tcase_add_checked_fixture(tc, setup_fake_grant, teardown);
    tcase_add_test(tc, modes_shared_granted_together);
    tcase_add_test(tc, modes_exclusive_waits_for_all_shared);
    tcase_add_test(tc, modes_shared_behind_waiting_exclusive_waits);
    tcase_add_test(tc, modes_shared_run_granted_at_exclusive_release);
    tcase_add_test(tc, modes_limit_grants_n_queues_the_next);
    tcase_add_test(tc, modes_conflicts_change_nothing);
    tcase_add_test(tc, modes_mode_held_for_another_mode_of_own_hold);
    tcase_add_test(tc, modes_reentrant_same_mode);
    tcase_add_test(tc, modes_try_busy_when_not_fitting_or_awaited);
    tcase_add_test(tc, modes_release_all_mixed);
    tcase_add_test(tc, modes_stats_grants_by_mode);
    tcase_add_test(tc, modes_timed_out_writer_lets_readers_in);
    suite_add_tcase(s, tc);

    tc = tcase_create("name_tree");
    tcase_add_test(tc, name_tree_order_and_balance);
    suite_add_tcase(s, tc);

    tc = tcase_create("ztoken");
    tcase_add_test(tc, ztoken_order_and_range);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(locks_suite());
    int failed;

    /* The out-of-turn test logs errors on purpose; lost warnings are expected. */
    log_set_level(LOG_LVL_ERROR);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
