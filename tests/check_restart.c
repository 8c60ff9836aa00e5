/*
 * check_restart.c - the registry of restart parts (daemon/restart.c): the
 * head record, parts written in the order they were registered, each
 * record read by the part that reads its kind, objects found by key
 * across parts, and a snapshot refused for an unknown kind, a part's
 * failure, a key kept twice or a part's last check.
 *
 * The parts are fakes: two of them, an "owner" part that keeps objects
 * under keys and a "user" part whose records name them.
 */
#include "config.h"
#include "restart.h"
#include "snap.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- the fakes */

struct owners {
    int objs[4];            /* what is kept, under 'o' and its index */
    unsigned n;             /* objects written */
    unsigned read;          /* "owner" records read */
    char log[128];          /* hooks called, in order */
};

struct users {
    int *found[4];          /* what the "use" records named */
    unsigned n;
    bool fail_restored;     /* restored() fails */
    char log[128];
};

static void note(char *log, const char *what)
{
    strncat(log, what, 127 - strlen(log));
}

static void owners_save(void *data, struct snap_w *w)
{
    struct owners *o = data;

    snap_w_rec(w, "owners");
    snap_w_u64(w, o->n);
    for (unsigned i = 0; i < o->n; i++) {
        snap_w_rec(w, "owner");
        snap_w_u64(w, i);
    }
    note(o->log, "save ");
}

static bool owners_head(void *data, struct snap_r *r, struct restart_in *in)
{
    struct owners *o = data;

    o->n = (unsigned)snap_r_u64(r);
    return snap_r_done(r);
}

static bool owner_restore(void *data, struct snap_r *r, struct restart_in *in)
{
    struct owners *o = data;
    uint64_t i = snap_r_u64(r);

    if (!snap_r_done(r))
        return false;
    if (i >= 4)
        return snap_r_fail(r, "owner %llu", (unsigned long long)i);
    o->read++;
    return restart_keep(in, r, 'o', i, &o->objs[i]);
}

static unsigned owners_shed(void *data)
{
    note(((struct owners *)data)->log, "shed ");
    return 2;
}

static bool owners_ready(void *data, char *why, size_t len)
{
    note(((struct owners *)data)->log, "ready ");
    return true;
}

static void owners_each_fd(void *data, void (*fn)(void *arg, int fd, uint64_t id), void *arg)
{
    fn(arg, 7, 1);
    fn(arg, 9, 2);
}

static void owners_resume(void *data, bool taken_over)
{
    note(((struct owners *)data)->log, taken_over ? "resume-taken " : "resume-given-up ");
}

static const struct restart_part owners_part = {
    .name = "owners",
    .kinds = (const struct restart_kind[]){
        { "owners", owners_head }, { "owner", owner_restore }, { NULL } },
    .save = owners_save,
    .shed = owners_shed,
    .ready = owners_ready,
    .each_fd = owners_each_fd,
    .resume = owners_resume,
};

static void users_save(void *data, struct snap_w *w)
{
    struct users *u = data;

    for (unsigned i = 0; i < u->n; i++) {
        snap_w_rec(w, "use");
        snap_w_u64(w, i);
    }
    note(u->log, "save ");
}

static bool use_restore(void *data, struct snap_r *r, struct restart_in *in)
{
    struct users *u = data;
    uint64_t i = snap_r_u64(r);

    if (!snap_r_done(r))
        return false;
    if (!(u->found[u->n] = restart_find(in, 'o', i)))
        return snap_r_fail(r, "use of o%llu, which is not there", (unsigned long long)i);
    u->n++;
    return true;
}

static bool users_ready(void *data, char *why, size_t len)
{
    snprintf(why, len, "a user is busy");
    return false;
}

static bool users_restored(void *data, struct snap_r *r, struct restart_in *in)
{
    struct users *u = data;

    note(u->log, "restored ");
    return !u->fail_restored || snap_r_fail(r, "the users do not add up");
}

static const struct restart_part users_part = {
    .name = "users",
    .kinds = (const struct restart_kind[]){ { "use", use_restore }, { NULL } },
    .save = users_save,
    .ready = users_ready,
    .restored = users_restored,
};

/* ----------------------------------------------------------- helpers */

/* A snapshot of the head and parts as registered in reg; malloc'd. */
static char *write_all(struct restart *reg, const struct restart_head *head, size_t *len)
{
    struct snap_w w;
    char *buf;

    snap_w_init(&w, 1 << 20);
    restart_head_save(&w, head);
    restart_save(reg, &w);
    ck_assert_int_eq(snap_w_finish(&w, &buf, len), 0);
    return buf;
}

static void add_fd(void *arg, int fd, uint64_t id)
{
    char *s = arg;

    snprintf(s + strlen(s), 64 - strlen(s), "%d:%llu ", fd, (unsigned long long)id);
}

/* A snapshot body with the given records after a head, its end line forged
 * by snap.c itself (snap_w): kinds the fakes may not write. */
static char *forge(const char *const *recs, size_t n, size_t *len)
{
    struct restart_head head = { .daemon_id = "d", .mode = "fake" };
    struct snap_w w;
    char *buf;

    snap_w_init(&w, 1 << 20);
    restart_head_save(&w, &head);
    for (size_t i = 0; i < n; i++) {
        char kind[32];
        unsigned long long v;

        ck_assert_int_eq(sscanf(recs[i], "%31s %llu", kind, &v), 2);
        snap_w_rec(&w, kind);
        snap_w_u64(&w, v);
    }
    ck_assert_int_eq(snap_w_finish(&w, &buf, len), 0);
    return buf;
}

/* Opens buf and reads its head; r is ready for restart_restore. */
static void open_snapshot(struct snap_r *r, char *buf, size_t len, struct restart_head *head)
{
    ck_assert_int_eq(snap_r_open(r, buf, len), 0);
    ck_assert_msg(restart_head_read(r, head), "%s", r->err);
}

/* ------------------------------------------------------------- tests */

START_TEST(head_round_trip)
{
    struct restart reg = { 0 };
    struct restart_head in = { .daemon_id = "host-1-ab", .mode = "embedded",
                               .stopped_us = 12345, .started = 1700000000, .handovers = 3,
                               .conns_total = 99, .listeners = { 3, -1, 5, 6 } }, out;
    struct snap_r r;
    size_t len;
    char *buf = write_all(&reg, &in, &len);

    open_snapshot(&r, buf, len, &out);
    ck_assert_str_eq(out.daemon_id, "host-1-ab");
    ck_assert_str_eq(out.mode, "embedded");
    ck_assert_int_eq(out.stopped_us, 12345);
    ck_assert_int_eq(out.started, 1700000000);
    ck_assert_uint_eq(out.handovers, 3);
    ck_assert_uint_eq(out.conns_total, 99);
    ck_assert_int_eq(out.listeners[RESTART_TCP], 3);
    ck_assert_int_eq(out.listeners[RESTART_UNIX], -1);
    ck_assert_int_eq(out.listeners[RESTART_TLS], 5);
    ck_assert_int_eq(out.listeners[RESTART_METRICS], 6);
    ck_assert_ptr_null(snap_r_next(&r));
    ck_assert(snap_r_ok(&r));
    free(buf);
}
END_TEST

START_TEST(parts_written_in_order_and_read_by_kind)
{
    struct owners o = { .n = 3 }, o2 = { 0 };
    struct users u = { .n = 2 }, u2 = { 0 };
    struct restart reg = { 0 }, reg2 = { 0 };
    struct restart_head head = { .daemon_id = "d", .mode = "fake" };
    struct restart_in in = { 0 };
    struct snap_r r;
    size_t len;
    char *buf;

    restart_register(&reg, &owners_part, &o);
    restart_register(&reg, &users_part, &u);
    buf = write_all(&reg, &head, &len);
    ck_assert_str_eq(o.log, "save ");
    ck_assert_str_eq(u.log, "save ");
    /* The owners' records come first: the users' name them. */
    ck_assert_ptr_nonnull(strstr(buf, "\nowners 3\nowner 0\nowner 1\nowner 2\nuse 0\nuse 1\n"));

    restart_register(&reg2, &owners_part, &o2);
    restart_register(&reg2, &users_part, &u2);
    open_snapshot(&r, buf, len, &head);
    ck_assert_msg(restart_restore(&reg2, &r, &in), "%s", r.err);
    ck_assert_ptr_null(in.keys);
    ck_assert_uint_eq(o2.n, 3);
    ck_assert_uint_eq(o2.read, 3);
    ck_assert_uint_eq(u2.n, 2);
    ck_assert_ptr_eq(u2.found[0], &o2.objs[0]);
    ck_assert_ptr_eq(u2.found[1], &o2.objs[1]);
    ck_assert_str_eq(u2.log, "restored ");
    ck_assert_uint_eq(restart_records(&reg2, "owner"), 3);
    ck_assert_uint_eq(restart_records(&reg2, "owners"), 1);
    ck_assert_uint_eq(restart_records(&reg2, "use"), 2);
    ck_assert_uint_eq(restart_records(&reg2, "nothing"), 0);
    free(buf);
}
END_TEST

START_TEST(hooks_walk_every_part)
{
    struct owners o = { 0 };
    struct users u = { 0 };
    struct restart reg = { 0 };
    char why[64] = "", fds[64] = "";

    restart_register(&reg, &owners_part, &o);
    restart_register(&reg, &users_part, &u);
    ck_assert_uint_eq(restart_shed(&reg), 2);
    ck_assert(!restart_ready(&reg, why, sizeof(why)));
    ck_assert_str_eq(why, "a user is busy");
    restart_each_fd(&reg, add_fd, fds);
    ck_assert_str_eq(fds, "7:1 9:2 ");
    restart_resume(&reg, false);
    restart_resume(&reg, true);
    ck_assert_str_eq(o.log, "shed ready resume-given-up resume-taken ");
}
END_TEST

/* Restores recs after a head with the fake parts; returns r's error. */
static const char *restore_fails(const char *const *recs, size_t n, bool fail_restored,
                                 char *err, size_t errlen)
{
    struct owners o = { 0 };
    struct users u = { .fail_restored = fail_restored };
    struct restart reg = { 0 };
    struct restart_head head;
    struct restart_in in = { 0 };
    struct snap_r r;
    size_t len;
    char *buf = forge(recs, n, &len);
    bool ok;

    restart_register(&reg, &owners_part, &o);
    restart_register(&reg, &users_part, &u);
    open_snapshot(&r, buf, len, &head);
    ok = restart_restore(&reg, &r, &in);
    ck_assert_ptr_null(in.keys);                /* freed either way */
    snprintf(err, errlen, "%s", ok ? "" : r.err);
    free(buf);
    return err;
}

START_TEST(refusals)
{
    char err[160];

    {
        const char *recs[] = { "owner 0", "mystery 1" };
        ck_assert_str_eq(restore_fails(recs, 2, false, err, sizeof(err)),
                         "an unknown record mystery");
    }
    {
        const char *recs[] = { "owner 1", "owner 1" };
        ck_assert_str_eq(restore_fails(recs, 2, false, err, sizeof(err)), "o1 is there twice");
    }
    {
        const char *recs[] = { "owner 0", "use 1" };
        ck_assert_str_eq(restore_fails(recs, 2, false, err, sizeof(err)),
                         "use of o1, which is not there");
    }
    {
        const char *recs[] = { "owner 9" };
        ck_assert_str_eq(restore_fails(recs, 1, false, err, sizeof(err)), "owner 9");
    }
    {
        const char *recs[] = { "owner 0", "use 0" };
        ck_assert_str_eq(restore_fails(recs, 2, false, err, sizeof(err)), "");
        ck_assert_str_eq(restore_fails(recs, 2, true, err, sizeof(err)),
                         "the users do not add up");
    }
}
END_TEST

START_TEST(a_head_that_is_not_there)
{
    struct restart_head head;
    struct snap_w w;
    struct snap_r r;
    size_t len;
    char *buf;

    snap_w_init(&w, 1 << 20);
    snap_w_rec(&w, "owner");
    snap_w_u64(&w, 0);
    ck_assert_int_eq(snap_w_finish(&w, &buf, &len), 0);
    ck_assert_int_eq(snap_r_open(&r, buf, len), 0);
    ck_assert(!restart_head_read(&r, &head));
    ck_assert_str_eq(r.err, "it does not begin with the daemon's record");
    free(buf);
}
END_TEST

static Suite *restart_suite(void)
{
    Suite *s = suite_create("restart");
    TCase *tc = tcase_create("registry");

    tcase_add_test(tc, head_round_trip);
    tcase_add_test(tc, parts_written_in_order_and_read_by_kind);
    tcase_add_test(tc, hooks_walk_every_part);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, a_head_that_is_not_there);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(restart_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
