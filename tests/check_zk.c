/*
 * check_zk.c - distributed mode (daemon/zk/) without a ZooKeeper server.
 *
 * Most of it calls the pure parts: what a lock node's name says
 * (zk_names.c), fencing tokens (ztoken.h), the fair queue's rules
 * (zk_view.c), what STATUS reads from a listing (zk_query.c), CHECK's
 * window arithmetic (zk_window.h), and the session's decisions on a
 * struct zk built by hand (zk_vouch.c, zk_timing.c, zk_presence.c). The
 * last cases drive one whole backend through tests/fake_zookeeper.c: the test plays
 * the server, answering each request the daemon sends.
 */
#include "locks.h"
#include "backend.h"
#include "log.h"
#include "settings.h"
#include "zk/zk.h"
#include "zk/zk_names.h"
#include "zk/zk_recipes.h"
#include "zk/zk_session.h"
#include "zk/zk_view.h"
#include "zk/zk_window.h"
#include "zk/ztoken.h"
#include "fake_zookeeper.h"

#include <check.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A listing of children, as getChildren answers it (strings borrowed). */
#define LISTING(...) listing((const char *const[]){ __VA_ARGS__ }, \
                             sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(char *))

static struct String_vector listing(const char *const *names, size_t n)
{
    return (struct String_vector){ (int32_t)n, (char **)names };
}

/* ------------------------------------------------------------ node names */

START_TEST(seq_is_the_last_ten_digits)
{
    ck_assert_int_eq(zk_seq_of("host-1-2-excl-0000000042"), 42);
    ck_assert_int_eq(zk_seq_of("d-1-shared-1234567890"), 1234567890LL);
    ck_assert_int_eq(zk_seq_of("0000000007"), 7);
    ck_assert_int_eq(zk_seq_of("123456789"), -1);      /* too short for a sequence */
}
END_TEST

START_TEST(kind_of_each_tag)
{
    struct zkind k;

    k = zk_kind_of("host-99-7-excl-0000000001");
    ck_assert_int_eq(k.mode, LOCK_EXCLUSIVE);
    ck_assert(!k.lease);
    ck_assert_int_eq(k.delay_ms, 0);

    k = zk_kind_of("host-99-7-shared-0000000001");
    ck_assert_int_eq(k.mode, LOCK_SHARED);

    k = zk_kind_of("host-99-7-limit3-0000000001");
    ck_assert_int_eq(k.mode, LOCK_LIMIT);
    ck_assert_uint_eq(k.limit, 3);

    k = zk_kind_of("host-99-7-limit65535-0000000001");
    ck_assert_int_eq(k.mode, LOCK_LIMIT);
    ck_assert_uint_eq(k.limit, LOCK_LIMIT_MAX);
}
END_TEST

START_TEST(kind_of_lease_and_delay)
{
    struct zkind k;

    k = zk_kind_of("h-1-limit2.lease-0000000004");
    ck_assert_int_eq(k.mode, LOCK_LIMIT);
    ck_assert_uint_eq(k.limit, 2);
    ck_assert(k.lease);
    ck_assert_int_eq(k.delay_ms, 0);

    k = zk_kind_of("h-1-shared.d250-0000000004");
    ck_assert_int_eq(k.mode, LOCK_SHARED);
    ck_assert(!k.lease);
    ck_assert_int_eq(k.delay_ms, 250);

    /* The delay comes last, after ".lease"; 60000 is its bound. */
    k = zk_kind_of("h-1-excl.lease.d60000-0000000004");
    ck_assert_int_eq(k.mode, LOCK_EXCLUSIVE);
    ck_assert(k.lease);
    ck_assert_int_eq(k.delay_ms, 60000);

    /* Beyond the bound it is no delay, and what is left no known tag. */
    k = zk_kind_of("h-1-shared.lease.d60001-0000000004");
    ck_assert_int_eq(k.delay_ms, 0);
    ck_assert(!k.lease);
    ck_assert_int_eq(k.mode, LOCK_EXCLUSIVE);
}
END_TEST

/* Anything unknown is exclusive: it can only make a daemon wait longer. */
START_TEST(kind_of_unknown_is_exclusive)
{
    const char *const names[] = {
        "oldhost-1234-0000000001",            /* a daemon older than modes: numeric id */
        "h-1-limit0-0000000001",              /* no semaphore of 0 */
        "h-1-limit65536-0000000001",          /* beyond LOCK_LIMIT_MAX */
        "h-1-limit3x-0000000001",
        "h-1-sharedx-0000000001",
        "h-1-shared0000000001",               /* no '-' before the sequence */
        "-0000000001",                        /* too short to have a tag */
        "",
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct zkind k = zk_kind_of(names[i]);

        ck_assert_msg(k.mode == LOCK_EXCLUSIVE, "%s", names[i]);
        ck_assert_msg(!k.lease && k.delay_ms == 0, "%s", names[i]);
    }
    /* The daemon id may say "shared": only the tag counts. */
    ck_assert_int_eq(zk_kind_of("shared-1-excl-0000000001").mode, LOCK_EXCLUSIVE);
    ck_assert_int_eq(zk_kind_of("excl-1-shared-0000000001").mode, LOCK_SHARED);
}
END_TEST

/* The recipes' nodes, named as each recipe names them (kazoo's
 * uuid4().hex + marker, Curator's and go-zookeeper's protected prefix
 * "_c_<id>-" + "lock-"): the marker right before the sequence says the
 * mode; the sequence is the 10 digits after it. */
START_TEST(kind_of_recipe_markers)
{
    static const struct {
        const char *name;
        enum lock_mode mode;
        long long seq;
    } cases[] = {
        { "9f1c2e3d4b5a69788796a5b4c3d2e1f0__lock__0000000003", LOCK_EXCLUSIVE, 3 },
        { "9f1c2e3d4b5a69788796a5b4c3d2e1f0__rlock__0000000004", LOCK_SHARED, 4 },
        { "_c_0b7e8f3a-3c1d-4e59-9a43-1f2d3c4b5a69-lock-0000000005", LOCK_EXCLUSIVE, 5 },
        { "_c_5e0a4f1b2c3d4e5f60718293a4b5c6d7-lock-0000000006", LOCK_EXCLUSIVE, 6 },
        { "_c_0b7e8f3a-3c1d-4e59-9a43-1f2d3c4b5a69-__WRIT__0000000007", LOCK_EXCLUSIVE, 7 },
        { "_c_0b7e8f3a-3c1d-4e59-9a43-1f2d3c4b5a69-__READ__0000000008", LOCK_SHARED, 8 },
        { "lock-0000000009", LOCK_EXCLUSIVE, 9 },      /* no marker: unknown, exclusive */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct zkind k = zk_kind_of(cases[i].name);

        ck_assert_msg(k.mode == cases[i].mode, "%s", cases[i].name);
        ck_assert_msg(!k.lease && k.delay_ms == 0 && !k.unordered, "%s", cases[i].name);
        ck_assert_msg(k.recipe == (i < 6), "%s", cases[i].name);
        ck_assert_int_eq(zk_seq_of(cases[i].name), cases[i].seq);
    }
    ck_assert_str_eq(zk_marker_of(cases[1].name)->text, "__rlock__");
    ck_assert_str_eq(zk_marker_of(cases[2].name)->text, "-lock-");
    /* Only right before the sequence: a host named db-lock-1 makes a
     * daemon id with "-lock-" in it, and its nodes stay ours. */
    ck_assert_ptr_null(zk_marker_of("db-lock-1-77-ab12-3-shared-0000000009"));
    ck_assert_int_eq(zk_kind_of("db-lock-1-77-ab12-3-shared-0000000009").mode, LOCK_SHARED);
    ck_assert(!zk_kind_of("db-lock-1-77-ab12-3-shared-0000000009").recipe);
    ck_assert_ptr_null(zk_marker_of("x__lock__000000001"));     /* 9 digits */
}
END_TEST

/* No sequence: not ZooKeeper's counter after a separator. A kazoo
 * Semaphore's lease is a bare uuid4().hex, which may end in ten digits. */
START_TEST(kind_of_unordered)
{
    const char *const names[] = {
        "3f2a9c0d7e6b4a58b1c2d3e41234567890",   /* hex uuid ending in 10 digits */
        "3f2a9c0d7e6b4a58b1c2d3e4f5a6b7c8",     /* hex uuid */
        "node0000000001",                       /* zkCli create -s /x/node */
        "holder",
        "",
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct zkind k = zk_kind_of(names[i]);

        ck_assert_msg(k.unordered && !k.recipe && k.mode == LOCK_EXCLUSIVE, "%s", names[i]);
        ck_assert_int_eq(zk_seq_of(names[i]), -1);
    }
    ck_assert(!zk_kind_of("0000000007").unordered);     /* zkCli create -s /x/ */
    ck_assert(!zk_kind_of("h-1-excl-0000000007").unordered);
}
END_TEST

/* What a prefix this daemon writes in a recipe's format must not hold. */
START_TEST(has_marker)
{
    const char *s = "d1-7-__rlock__x";

    ck_assert(zk_has_marker(s, strlen(s)));
    ck_assert(!zk_has_marker(s, 10));                   /* "d1-7-__rlo" */
    ck_assert(zk_has_marker("a-lock-", 7));
    ck_assert(zk_has_marker("__READ__", 8));
    ck_assert(zk_has_marker("x__WRIT__", 9));
    ck_assert(zk_has_marker("__lock__", 8));
    ck_assert(!zk_has_marker("host-1-2-3-excl-", 16));
    ck_assert(!zk_has_marker("__lock_", 7));
    ck_assert(!zk_has_marker("", 0));
}
END_TEST

START_TEST(classes)
{
    struct zkind excl = { .mode = LOCK_EXCLUSIVE }, shared = { .mode = LOCK_SHARED };
    struct zkind l3 = { .mode = LOCK_LIMIT, .limit = 3 };
    struct zkind l3lease = { .mode = LOCK_LIMIT, .limit = 3, .lease = true };
    struct zkind l4 = { .mode = LOCK_LIMIT, .limit = 4 };

    ck_assert(zk_same_class(excl, shared));
    ck_assert(zk_same_class(shared, excl));
    ck_assert(zk_same_class(l3, l3lease));
    ck_assert(!zk_same_class(l3, l4));
    ck_assert(!zk_same_class(l3, excl));
    ck_assert(!zk_same_class(shared, l3));
}
END_TEST

/* --------------------------------------------------------------- tokens */

START_TEST(token_of_zxid)
{
    uint64_t token = 7;

    ck_assert(ztoken_of_zxid(0x1234, &token));
    ck_assert_uint_eq(token, 0x123400);
    ck_assert(ztoken_of_zxid(0, &token));
    ck_assert_uint_eq(token, 0);
    ck_assert(ztoken_of_zxid((int64_t)ZTOKEN_ZXID_MAX, &token));
    ck_assert_uint_eq(token, ZTOKEN_ZXID_MAX << ZTOKEN_HANDOFF_BITS);
    ck_assert_uint_eq(token >> ZTOKEN_HANDOFF_BITS, ZTOKEN_ZXID_MAX);

    /* Refused, token untouched. */
    token = 7;
    ck_assert(!ztoken_of_zxid(-1, &token));
    ck_assert(!ztoken_of_zxid((int64_t)ZTOKEN_ZXID_MAX + 1, &token));
    ck_assert(!ztoken_of_zxid(INT64_MAX, &token));
    ck_assert_uint_eq(token, 7);
}
END_TEST

/* Local handoffs add at most ZTOKEN_HANDOFFS_MAX to a token: still below
 * the token of the next zxid. */
START_TEST(tokens_order_with_handoffs)
{
    uint64_t a, b;

    ck_assert_uint_eq(ZTOKEN_HANDOFFS_MAX, 255);
    ck_assert(ztoken_of_zxid(0x500000001LL, &a));
    ck_assert(ztoken_of_zxid(0x500000002LL, &b));
    ck_assert_uint_lt(a + ZTOKEN_HANDOFFS_MAX, b);
    ck_assert_uint_eq(a + ZTOKEN_HANDOFFS_MAX + 1, b);
}
END_TEST

/* ------------------------------------------------ the fair queue's rules */

START_TEST(view_alone)
{
    struct String_vector ch = LISTING("d1-1-excl-0000000005");
    struct zview v;

    zk_view_of(&ch, "d1-1-excl-0000000005", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(v.found);
    ck_assert_uint_eq(v.below, 0);
    ck_assert_uint_eq(v.after, 0);
    ck_assert_ptr_null(v.pred);
    ck_assert(!v.first_other_class);
    ck_assert(zk_view_may_hold(LOCK_EXCLUSIVE, 0, &v));

    zk_view_of(&ch, "d1-1-excl-0000000006", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(!v.found);                    /* our node vanished */
}
END_TEST

/* Order is the sequence's alone, whatever the listing's order and the
 * daemons' prefixes. */
START_TEST(view_exclusive_waits_for_the_node_just_before)
{
    struct String_vector ch = LISTING("aaa-9-excl-0000000009", "zzz-1-excl-0000000003",
                                      "mine-2-excl-0000000007", "bbb-3-excl-0000000005");
    struct zview v;

    zk_view_of(&ch, "mine-2-excl-0000000007", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(v.found);
    ck_assert_uint_eq(v.below, 2);
    ck_assert_uint_eq(v.after, 1);
    ck_assert_str_eq(v.pred, "bbb-3-excl-0000000005");
    ck_assert_str_eq(v.blocker, "bbb-3-excl-0000000005");
    ck_assert(!zk_view_may_hold(LOCK_EXCLUSIVE, 0, &v));
    ck_assert_str_eq(zk_view_waits_for(LOCK_EXCLUSIVE, 0, &v), "bbb-3-excl-0000000005");
}
END_TEST

START_TEST(view_shared)
{
    struct String_vector readers = LISTING("a-1-shared-0000000001", "b-1-shared-0000000002",
                                           "c-1-shared-0000000003");
    struct String_vector writer = LISTING("a-1-shared-0000000001", "w-1-excl-0000000002",
                                          "b-1-shared-0000000003", "c-1-shared-0000000004");
    struct zview v;

    /* Behind readers only: holds with them. */
    zk_view_of(&readers, "c-1-shared-0000000003", LOCK_SHARED, 0, &v);
    ck_assert_ptr_null(v.blocker);
    ck_assert(zk_view_may_hold(LOCK_SHARED, 0, &v));
    /* The same place does not do for a writer. */
    zk_view_of(&readers, "c-1-shared-0000000003", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(!zk_view_may_hold(LOCK_EXCLUSIVE, 0, &v));

    /* Behind a writer: waits for it, not for the reader just before. */
    zk_view_of(&writer, "c-1-shared-0000000004", LOCK_SHARED, 0, &v);
    ck_assert_str_eq(v.pred, "b-1-shared-0000000003");
    ck_assert_str_eq(v.blocker, "w-1-excl-0000000002");
    ck_assert(!zk_view_may_hold(LOCK_SHARED, 0, &v));
    ck_assert_str_eq(zk_view_waits_for(LOCK_SHARED, 0, &v), "w-1-excl-0000000002");
    /* The reader before the writer holds. */
    zk_view_of(&writer, "a-1-shared-0000000001", LOCK_SHARED, 0, &v);
    ck_assert(zk_view_may_hold(LOCK_SHARED, 0, &v));
}
END_TEST

/* A lease node holds wherever it sits. */
START_TEST(view_leases_hold_wherever_they_sit)
{
    struct String_vector ch = LISTING("me-1-excl-0000000002", "x-1-excl.lease-0000000008");
    struct String_vector rl = LISTING("me-1-shared-0000000002", "x-1-shared.lease-0000000008",
                                      "y-1-excl.lease-0000000009");
    struct zview v;

    zk_view_of(&ch, "me-1-excl-0000000002", LOCK_EXCLUSIVE, 0, &v);
    ck_assert_uint_eq(v.below, 0);
    ck_assert_uint_eq(v.leases_after, 1);
    ck_assert_str_eq(v.lease, "x-1-excl.lease-0000000008");
    ck_assert(!zk_view_may_hold(LOCK_EXCLUSIVE, 0, &v));
    ck_assert_str_eq(zk_view_waits_for(LOCK_EXCLUSIVE, 0, &v), "x-1-excl.lease-0000000008");

    /* A reader minds only leases that are not shared. */
    zk_view_of(&rl, "me-1-shared-0000000002", LOCK_SHARED, 0, &v);
    ck_assert_str_eq(v.lease, "x-1-shared.lease-0000000008");
    ck_assert_str_eq(v.lease_blocker, "y-1-excl.lease-0000000009");
    ck_assert(!zk_view_may_hold(LOCK_SHARED, 0, &v));
    ck_assert_str_eq(zk_view_waits_for(LOCK_SHARED, 0, &v), "y-1-excl.lease-0000000009");

    /* A writer minds shared leases too. */
    zk_view_of(&rl, "me-1-shared-0000000002", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(!zk_view_may_hold(LOCK_EXCLUSIVE, 0, &v));
    ck_assert_str_eq(zk_view_waits_for(LOCK_EXCLUSIVE, 0, &v), "x-1-shared.lease-0000000008");

    /* Our own lease node is not a lease before us. */
    zk_view_of(&ch, "x-1-excl.lease-0000000008", LOCK_EXCLUSIVE, 0, &v);
    ck_assert_ptr_null(v.lease);
    ck_assert_uint_eq(v.below, 1);
}
END_TEST

/* limit=n: fewer than n nodes before it, and leases after it. */
START_TEST(view_semaphore_counts)
{
    struct String_vector ch = LISTING("a-1-limit3-0000000001", "b-1-limit3-0000000002",
                                      "c-1-limit3-0000000003", "d-1-limit3-0000000004",
                                      "e-1-limit3-0000000005");
    struct String_vector leased = LISTING("a-1-limit2-0000000001", "b-1-limit2-0000000002",
                                          "c-1-limit2.lease-0000000003");
    struct zview v;

    zk_view_of(&ch, "c-1-limit3-0000000003", LOCK_LIMIT, 3, &v);
    ck_assert(zk_view_may_hold(LOCK_LIMIT, 3, &v));
    /* The first waiter: any holder's going lets it in. */
    zk_view_of(&ch, "d-1-limit3-0000000004", LOCK_LIMIT, 3, &v);
    ck_assert_uint_eq(v.below, 3);
    ck_assert(!zk_view_may_hold(LOCK_LIMIT, 3, &v));
    ck_assert_ptr_null(zk_view_waits_for(LOCK_LIMIT, 3, &v));
    /* A later one watches its predecessor. */
    zk_view_of(&ch, "e-1-limit3-0000000005", LOCK_LIMIT, 3, &v);
    ck_assert(!zk_view_may_hold(LOCK_LIMIT, 3, &v));
    ck_assert_str_eq(zk_view_waits_for(LOCK_LIMIT, 3, &v), "d-1-limit3-0000000004");

    /* One before it and a lease after it fill limit=2. */
    zk_view_of(&leased, "b-1-limit2-0000000002", LOCK_LIMIT, 2, &v);
    ck_assert_uint_eq(v.below, 1);
    ck_assert_uint_eq(v.leases_after, 1);
    ck_assert(!zk_view_may_hold(LOCK_LIMIT, 2, &v));
    ck_assert_ptr_null(zk_view_waits_for(LOCK_LIMIT, 2, &v));
    zk_view_of(&leased, "a-1-limit2-0000000001", LOCK_LIMIT, 2, &v);
    ck_assert(zk_view_may_hold(LOCK_LIMIT, 2, &v));
    /* Behind leases, even not first, any holder's going may let it in. */
    zk_view_of(&leased, "b-1-limit2-0000000002", LOCK_LIMIT, 1, &v);
    ck_assert_ptr_null(zk_view_waits_for(LOCK_LIMIT, 1, &v));
}
END_TEST

/* The name's class is its first holder's (a lease if any). */
START_TEST(view_other_class)
{
    struct String_vector sem = LISTING("a-1-limit2-0000000001", "me-1-shared-0000000002");
    struct String_vector rw = LISTING("a-1-shared-0000000001", "me-1-excl-0000000002");
    struct String_vector lease = LISTING("me-1-excl-0000000001", "a-1-limit2.lease-0000000005");
    struct String_vector other = LISTING("a-1-limit3-0000000001", "me-1-limit2-0000000002");
    struct zview v;

    zk_view_of(&sem, "me-1-shared-0000000002", LOCK_SHARED, 0, &v);
    ck_assert(v.first_other_class);
    zk_view_of(&rw, "me-1-excl-0000000002", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(!v.first_other_class);
    zk_view_of(&lease, "me-1-excl-0000000001", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(v.first_other_class);
    zk_view_of(&other, "me-1-limit2-0000000002", LOCK_LIMIT, 2, &v);
    ck_assert(v.first_other_class);
    zk_view_of(&other, "a-1-limit3-0000000001", LOCK_LIMIT, 3, &v);
    ck_assert(!v.first_other_class);        /* first itself */
}
END_TEST

/* A kazoo ReadLock's or Curator's read lock's node is a reader: ours hold
 * beside it, as it holds beside ours (kazoo's ReadLock minds only
 * "__lock__" before it, Curator's read lock only "__WRIT__"). */
START_TEST(view_recipe_readers_beside_ours)
{
    struct String_vector ch = LISTING("kz1__rlock__0000000001", "d1-1-shared-0000000002",
                                      "_c_77-__READ__0000000003", "d2-4-shared-0000000004");
    struct zview v;

    zk_view_of(&ch, "d2-4-shared-0000000004", LOCK_SHARED, 0, &v);
    ck_assert_uint_eq(v.below, 3);
    ck_assert_ptr_null(v.blocker);
    ck_assert(!v.first_other_class);
    ck_assert(zk_view_may_hold(LOCK_SHARED, 0, &v));
    /* A writer of ours waits for the reader just before it. */
    zk_view_of(&ch, "d2-4-shared-0000000004", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(!zk_view_may_hold(LOCK_EXCLUSIVE, 0, &v));
    ck_assert_str_eq(zk_view_waits_for(LOCK_EXCLUSIVE, 0, &v), "_c_77-__READ__0000000003");
}
END_TEST

/* A recipe's exclusive node before ours: kazoo's Lock, Curator's mutex
 * and write lock, go-zookeeper's Lock. Ours waits for it, reader or
 * writer, and is not refused (the same class as ours). */
START_TEST(view_recipe_writer_before_us)
{
    const char *const writers[] = { "kz__lock__0000000003", "_c_9-lock-0000000003",
                                    "_c_9-__WRIT__0000000003" };
    struct zview v;

    for (size_t i = 0; i < sizeof(writers) / sizeof(writers[0]); i++) {
        struct String_vector ch = LISTING("d1-1-shared-0000000004", writers[i],
                                          "d1-2-excl-0000000005");

        zk_view_of(&ch, "d1-1-shared-0000000004", LOCK_SHARED, 0, &v);
        ck_assert(!v.first_other_class);
        ck_assert(!zk_view_may_hold(LOCK_SHARED, 0, &v));
        ck_assert_str_eq(zk_view_waits_for(LOCK_SHARED, 0, &v), writers[i]);
        zk_view_of(&ch, "d1-2-excl-0000000005", LOCK_EXCLUSIVE, 0, &v);
        ck_assert(!zk_view_may_hold(LOCK_EXCLUSIVE, 0, &v));
        ck_assert_str_eq(zk_view_waits_for(LOCK_EXCLUSIVE, 0, &v), "d1-1-shared-0000000004");
    }
}
END_TEST

/* A child without a sequence (a kazoo Semaphore's lease) holds outside
 * the order: a reader or a writer of ours first in line waits for it; a
 * semaphore counts it among its holders. */
START_TEST(view_unordered_child_holds)
{
    struct String_vector ch = LISTING("d1-1-excl-0000000004", "ffee0011223344556677889900aabbcc",
                                      "00112233445566778899aabbccddeeff");
    struct String_vector sem = LISTING("d1-1-limit3-0000000004", "d1-2-limit3-0000000005",
                                       "ffee0011223344556677889900aabbcc");
    struct zview v;

    zk_view_of(&ch, "d1-1-excl-0000000004", LOCK_EXCLUSIVE, 0, &v);
    ck_assert(v.found);
    ck_assert_uint_eq(v.below, 0);
    ck_assert_uint_eq(v.unordered_n, 2);
    ck_assert(!v.first_other_class);
    ck_assert(!zk_view_may_hold(LOCK_EXCLUSIVE, 0, &v));
    /* The first by name, whatever the listing's order. */
    ck_assert_str_eq(zk_view_waits_for(LOCK_EXCLUSIVE, 0, &v),
                     "00112233445566778899aabbccddeeff");
    zk_view_of(&ch, "d1-1-excl-0000000004", LOCK_SHARED, 0, &v);
    ck_assert(!zk_view_may_hold(LOCK_SHARED, 0, &v));
    ck_assert_str_eq(zk_view_waits_for(LOCK_SHARED, 0, &v), "00112233445566778899aabbccddeeff");

    /* limit=3: the first holds beside it, the second would be a third. */
    zk_view_of(&sem, "d1-1-limit3-0000000004", LOCK_LIMIT, 3, &v);
    ck_assert(!v.first_other_class);
    ck_assert(zk_view_may_hold(LOCK_LIMIT, 3, &v));
    zk_view_of(&sem, "d1-2-limit3-0000000005", LOCK_LIMIT, 3, &v);
    ck_assert(zk_view_may_hold(LOCK_LIMIT, 3, &v));
    zk_view_of(&sem, "d1-2-limit3-0000000005", LOCK_LIMIT, 2, &v);
    ck_assert(!zk_view_may_hold(LOCK_LIMIT, 2, &v));
    ck_assert_ptr_null(zk_view_waits_for(LOCK_LIMIT, 2, &v));   /* any holder's going */
}
END_TEST

/* ----------------------------------------------------- STATUS, read off */

START_TEST(queue_info_modes)
{
    struct String_vector none = { 0, NULL };
    struct String_vector excl = LISTING("c-1-excl-0000000003", "a-1-excl-0000000001",
                                        "b-1-excl-0000000002");
    struct String_vector shared = LISTING("a-1-shared-0000000001", "b-1-shared-0000000002",
                                          "w-1-excl-0000000003", "c-1-shared-0000000004");
    struct String_vector sem = LISTING("a-1-limit2-0000000001", "b-1-limit2-0000000002",
                                       "c-1-limit2-0000000003");
    struct String_vector lease = LISTING("a-1-excl-0000000001", "b-1-excl.lease-0000000004");
    struct backend_queue_info info;
    const char *first;

    zk_queue_info(&none, &info, &first);
    ck_assert(info.ok);
    ck_assert_uint_eq(info.queue, 0);
    ck_assert_uint_eq(info.holders, 0);
    ck_assert_ptr_null(first);

    zk_queue_info(&excl, &info, &first);
    ck_assert_uint_eq(info.queue, 3);
    ck_assert_uint_eq(info.holders, 1);
    ck_assert_int_eq(info.mode, LOCK_EXCLUSIVE);
    ck_assert_str_eq(first, "a-1-excl-0000000001");

    zk_queue_info(&shared, &info, &first);
    ck_assert_uint_eq(info.queue, 4);
    ck_assert_uint_eq(info.holders, 2);      /* the readers before the writer */
    ck_assert_int_eq(info.mode, LOCK_SHARED);

    zk_queue_info(&sem, &info, &first);
    ck_assert_uint_eq(info.holders, 2);
    ck_assert_int_eq(info.mode, LOCK_LIMIT);
    ck_assert_uint_eq(info.limit, 2);

    /* A lease node is the first holder wherever it sits. */
    zk_queue_info(&lease, &info, &first);
    ck_assert_str_eq(first, "b-1-excl.lease-0000000004");
    ck_assert_uint_eq(info.holders, 1);
}
END_TEST

/* A lease node holds wherever it sits, behind a writer or past the limit's
 * count: STATUS counts it, as the fair queue lets it hold (zk_view.c). */
START_TEST(queue_info_counts_leases_behind_others)
{
    struct String_vector shared = LISTING("a-1-shared-0000000001", "b-1-excl-0000000002",
                                          "c-1-shared.lease-0000000003");
    struct String_vector sem = LISTING("a-1-limit2-0000000001", "b-1-limit2-0000000003",
                                       "c-1-limit2.lease-0000000004");
    struct backend_queue_info info;
    const char *first;

    zk_queue_info(&shared, &info, &first);
    ck_assert_int_eq(info.mode, LOCK_SHARED);
    ck_assert_uint_eq(info.holders, 2);     /* the reader first in line and the lease */

    zk_queue_info(&sem, &info, &first);
    ck_assert_int_eq(info.mode, LOCK_LIMIT);
    ck_assert_uint_eq(info.holders, 2);     /* the first node and the lease, not the second */
}
END_TEST

START_TEST(queue_holder_data)
{
    struct backend_queue_info info;
    struct Stat st = { 0 };
    const char *d;

    memset(&info, 0, sizeof(info));
    info.mode = LOCK_EXCLUSIVE;
    info.queue = info.holders = 1;
    st.ctime = 1700000000000LL;
    d = "daemon=d1 client=10.0.0.1:5000 label=job-7 token=4660";
    zk_queue_holder("d1-1-excl-0000000001", d, (int)strlen(d), &st, &info);
    ck_assert_str_eq(info.holder, "d1/10.0.0.1:5000");
    ck_assert_str_eq(info.label, "job-7");
    ck_assert_uint_eq(info.token, 4660);
    ck_assert_int_eq(info.lease_ms, -1);
    ck_assert_int_eq(info.since_ms, 1700000000000LL);

    /* A non-fair node's token is its own write's: the node's mzxid. */
    memset(&info, 0, sizeof(info));
    info.mode = LOCK_EXCLUSIVE;
    st.mzxid = 0x77;
    d = "daemon=d2 client=c token=mzxid";
    zk_queue_holder("d1-1-excl-0000000001", d, (int)strlen(d), &st, &info);
    ck_assert_uint_eq(info.token, 0x7700);
    ck_assert_str_eq(info.label, "");

    /* Released, kept idle: nobody holds it, the queue is shorter by it. */
    memset(&info, 0, sizeof(info));
    info.mode = LOCK_EXCLUSIVE;
    info.queue = 2;
    info.holders = 1;
    d = "daemon=d1 client=-";
    zk_queue_holder("d1-1-excl-0000000001", d, (int)strlen(d), &st, &info);
    ck_assert_uint_eq(info.holders, 0);
    ck_assert_uint_eq(info.queue, 1);
}
END_TEST

/* STATUS over recipes' nodes: readers hold together, ours and theirs; a
 * child without a sequence holds and is the one named. */
START_TEST(queue_info_recipes)
{
    struct String_vector readers = LISTING("d1-1-shared-0000000002", "kz__rlock__0000000001",
                                           "kz__lock__0000000003", "d1-2-shared-0000000004");
    struct String_vector lease = LISTING("d1-1-excl-0000000002", "ffee0011223344556677889900aabbcc",
                                         "00112233445566778899aabbccddeeff");
    struct String_vector alone = LISTING("ffee0011223344556677889900aabbcc");
    struct backend_queue_info info;
    const char *first;

    zk_queue_info(&readers, &info, &first);
    ck_assert_uint_eq(info.queue, 4);
    ck_assert_uint_eq(info.holders, 2);
    ck_assert_int_eq(info.mode, LOCK_SHARED);
    ck_assert_str_eq(first, "kz__rlock__0000000001");

    zk_queue_info(&lease, &info, &first);
    ck_assert_uint_eq(info.queue, 3);
    ck_assert_uint_eq(info.holders, 2);     /* the two leases; ours waits */
    ck_assert_int_eq(info.mode, LOCK_EXCLUSIVE);
    ck_assert_str_eq(first, "00112233445566778899aabbccddeeff");

    zk_queue_info(&alone, &info, &first);
    ck_assert_uint_eq(info.holders, 1);
    ck_assert_str_eq(first, "ffee0011223344556677889900aabbcc");
}
END_TEST

/* A node no daemon wrote is held by "foreign/<its data>": printable bytes
 * as they are, others as '?', at most 64; without data, its name. No
 * token or label can be known; it is never a released node kept idle. */
START_TEST(queue_holder_foreign)
{
    struct backend_queue_info info;
    struct Stat st = { 0 };
    char big[200];

    memset(&info, 0, sizeof(info));
    info.mode = LOCK_EXCLUSIVE;
    info.queue = info.holders = 1;
    st.ctime = 1700000000123LL;
    st.czxid = 0x99;
    zk_queue_holder("_c_1-lock-0000000001", "10.0.0.5", 8, &st, &info);
    ck_assert_str_eq(info.holder, "foreign/10.0.0.5");
    ck_assert_uint_eq(info.token, 0);
    ck_assert_str_eq(info.label, "");
    ck_assert_int_eq(info.lease_ms, -1);
    ck_assert_int_eq(info.since_ms, 1700000000123LL);
    ck_assert_uint_eq(info.holders, 1);
    ck_assert_uint_eq(info.queue, 1);

    zk_queue_holder("kz__lock__0000000002", "", 0, &st, &info);
    ck_assert_str_eq(info.holder, "foreign/kz__lock__0000000002");
    zk_queue_holder("kz__lock__0000000002", NULL, -1, &st, &info);
    ck_assert_str_eq(info.holder, "foreign/kz__lock__0000000002");

    zk_queue_holder("x", "job 7\n\xc3\xa9", 8, &st, &info);
    ck_assert_str_eq(info.holder, "foreign/job?7???");
    /* Someone else's text that only starts like ours is still foreign. */
    zk_queue_holder("x", "daemon=", 7, &st, &info);
    ck_assert_str_eq(info.holder, "foreign/daemon=");

    memset(big, 'a', sizeof(big));
    zk_queue_holder("x", big, (int)sizeof(big), &st, &info);
    ck_assert_uint_eq(strlen(info.holder), strlen("foreign/") + 64);
}
END_TEST

START_TEST(queue_holder_lease)
{
    struct backend_queue_info info;
    struct Stat st = { 0 };
    char d[200];

    memset(&info, 0, sizeof(info));
    info.mode = LOCK_EXCLUSIVE;
    st.czxid = 0x42;
    snprintf(d, sizeof(d), "daemon=d1 client=c deadline=%lld", (long long)zk_now_ms() + 60000);
    zk_queue_holder("d1-1-excl-0000000001", d, (int)strlen(d), &st, &info);
    ck_assert_int_gt(info.lease_ms, 50000);
    ck_assert_int_le(info.lease_ms, 60000);
    ck_assert_uint_eq(info.token, 0x4200);  /* its node's czxid's */

    snprintf(d, sizeof(d), "daemon=d1 client=c deadline=%lld", (long long)zk_now_ms() - 5);
    zk_queue_holder("d1-1-excl-0000000001", d, (int)strlen(d), &st, &info);
    ck_assert_int_eq(info.lease_ms, 0);     /* over: never negative */
}
END_TEST

/* ------------------------------------------------- the window, as numbers */

START_TEST(window_arithmetic)
{
    ck_assert_int_eq(zk_window_end_at(1000, 9000), 10000);
    ck_assert_int_eq(zk_window_left_ms(1000, 9000, 4000), 6000);
    ck_assert_int_eq(zk_window_left_ms(1000, 9000, 9999), 1);
    ck_assert_int_eq(zk_window_left_ms(1000, 9000, 10000), 0);
    ck_assert_int_eq(zk_window_left_ms(1000, 9000, 20000), 0);
    /* Two thirds of the timeout, a third before the session can expire. */
    ck_assert_int_eq(zk_window_lost_at(1000, 9000), 7000);
    ck_assert_int_eq(zk_window_lost_at(1000, 10000), 7666);
    ck_assert_int_eq(zk_window_lost_at(INT64_C(1) << 40, 600000), (INT64_C(1) << 40) + 400000);
}
END_TEST

/* The probe that moves confirmed_at: the latest answered at least W before the
 * round's sync was sent. */
START_TEST(window_probe_choice)
{
    const struct zk_probe probes[] = { { 100, 150 }, { 300, 350 }, { 500, 560 } };

    ck_assert_ptr_eq(zk_window_probe(probes, 3, 1500, 2000), &probes[1]);
    ck_assert_ptr_eq(zk_window_probe(probes, 3, 1500, 2060), &probes[2]);   /* exactly W */
    ck_assert_ptr_eq(zk_window_probe(probes, 3, 1500, 2059), &probes[1]);
    ck_assert_ptr_eq(zk_window_probe(probes, 3, 1500, 1650), &probes[0]);
    ck_assert_ptr_null(zk_window_probe(probes, 3, 1500, 1649));
    ck_assert_ptr_null(zk_window_probe(probes, 0, 1500, 99999));
    ck_assert_ptr_eq(zk_window_probe(probes, 2, 0, 99999), &probes[1]);      /* n counts */
}
END_TEST

/* ------------------------------------ the session's decisions, by hand */

static struct settings zs;
static struct zk hz;

/* The confirmation instant confirmed_at (zk_int.h), its member named once here. */
#define C(zk) ((zk)->confirmed_at_ms)

/* confirmed_at, ms before now. */
static void confirmed_ago(struct zk *zk, int64_t ms)
{
    C(zk) = locks_mono_ms() - ms;
}

static void hand_setup(void)
{
    ck_assert_int_eq(settings_init(&zs), 0);
    memset(&hz, 0, sizeof(hz));
    hz.settings = &zs;
    hz.state = ZK_CONNECTED;
    hz.session_id = 0x1234;
    hz.negotiated_ms = 9000;
    hz.nonfair_checked = true;
    confirmed_ago(&hz, 1000);
}

static void hand_teardown(void)
{
    settings_free(&zs);
}

START_TEST(session_timeouts)
{
    ck_assert_int_eq(zk_timeout_ms(&hz), 9000);
    hz.negotiated_ms = 0;                   /* not negotiated yet: what we asked for */
    ck_assert_int_eq(zk_timeout_ms(&hz), (int)zs.zk_session_timeout_ms);

    ck_assert_int_eq(zk_tick_ping_wait_ms(2000), 1500);
    zs.zk_tick_ms = 400;
    ck_assert_int_eq(zk_ping_wait_ms(&hz), 300);

    /* A handover needs 3W < T. */
    ck_assert(zk_handover_fits(3333, 10000));
    ck_assert(!zk_handover_fits(3334, 10000));
    ck_assert(!zk_handover_fits(3000, 9000));
}
END_TEST

/* A tenth of the timeout, at least W/8 and 100 ms. */
START_TEST(session_probe_period)
{
    zs.zk_tick_ms = 2000;
    hz.negotiated_ms = 30000;
    ck_assert_int_eq(zk_probe_period_ms(&hz), 3000);
    zs.zk_tick_ms = 60000;                  /* W = 45000 */
    ck_assert_int_eq(zk_probe_period_ms(&hz), 5625);
    zs.zk_tick_ms = 36000;                  /* W/8 = 3375, just above T/10 */
    ck_assert_int_eq(zk_probe_period_ms(&hz), 3375);
    zs.zk_tick_ms = 10;
    hz.negotiated_ms = 800;
    ck_assert_int_eq(zk_probe_period_ms(&hz), 100);
}
END_TEST

START_TEST(session_confirmed_until_two_thirds)
{
    /* T = 9000: confirmed until confirmed_at + 6000. */
    ck_assert(zk_confirmed(&hz));
    confirmed_ago(&hz, 5500);
    ck_assert(zk_confirmed(&hz));
    confirmed_ago(&hz, 6500);
    ck_assert(!zk_confirmed(&hz));

    confirmed_ago(&hz, 1000);
    hz.presumed_lost = true;
    ck_assert(!zk_confirmed(&hz));
    hz.presumed_lost = false;
    hz.state = ZK_CONNECTING;
    ck_assert(!zk_confirmed(&hz));
    hz.state = ZK_CONNECTED;
    C(&hz) = 0;
    ck_assert(!zk_confirmed(&hz));
    confirmed_ago(&hz, 1000);
    hz.session_id = 0;
    ck_assert(!zk_confirmed(&hz));
}
END_TEST

START_TEST(session_may_grant)
{
    ck_assert(zk_vouched(&hz));
    ck_assert(zk_may_grant(&hz));
    ck_assert(!hz.grants_held_back);

    /* The agreement on [zookeeper] nonfair not checked yet: vouched, but
     * nothing granted; requests wait rather than fail. */
    hz.nonfair_checked = false;
    ck_assert(zk_vouched(&hz));
    ck_assert(!zk_may_grant(&hz));
    ck_assert(zk_waits(&hz));
    hz.nonfair_checked = true;
    ck_assert(!zk_waits(&hz));

    hz.chroot_missing = true;
    ck_assert(!zk_may_grant(&hz));
    hz.chroot_missing = false;

    /* Connected but unconfirmed: held back, and noted, so that the
     * session tells `resume` once confirmed_at moves. */
    confirmed_ago(&hz, 7000);
    ck_assert(!zk_may_grant(&hz));
    ck_assert(hz.grants_held_back);

    /* Not connected: not noted (connecting again tells `serving`). */
    hz.grants_held_back = false;
    hz.state = ZK_CONNECTING;
    confirmed_ago(&hz, 1000);
    ck_assert(!zk_vouched(&hz));
    ck_assert(!hz.grants_held_back);
}
END_TEST

/* CHECK's window: confirmed_at + T - now, whatever the connection, 0 without it. */
START_TEST(session_window)
{
    int64_t w = zk_presence_window_ms(&hz);

    ck_assert_int_le(w, 8000);
    ck_assert_int_gt(w, 7500);
    ck_assert_int_eq(zk_presence_window_end_ms(&hz), C(&hz) + 9000);
    ck_assert_int_le(zk_session_lost_in_ms(&hz), 5000);
    ck_assert_int_gt(zk_session_lost_in_ms(&hz), 4500);

    /* Disconnected, the session lives on: so does the window. */
    hz.state = ZK_CONNECTING;
    ck_assert_int_gt(zk_presence_window_ms(&hz), 7500);

    confirmed_ago(&hz, 10000);
    ck_assert_int_eq(zk_presence_window_ms(&hz), 0);

    confirmed_ago(&hz, 1000);
    hz.state = ZK_EXPIRED;
    ck_assert_int_eq(zk_presence_window_ms(&hz), 0);
    ck_assert_int_eq(zk_presence_window_end_ms(&hz), 0);
    ck_assert_int_eq(zk_session_lost_in_ms(&hz), -1);

    hz.state = ZK_CONNECTED;
    C(&hz) = 0;
    ck_assert_int_eq(zk_presence_window_ms(&hz), 0);
    ck_assert_int_eq(zk_session_lost_in_ms(&hz), -1);
}
END_TEST

START_TEST(session_unreachable_since)
{
    ck_assert_int_eq(zk_session_unreachable_since(&hz), 0);
    ck_assert_ptr_null(zk_session_why_down(&hz));

    /* Connected past confirmed_at + 2/3 T: unreachable since that deadline. */
    confirmed_ago(&hz, 7000);
    ck_assert_int_eq(zk_session_unreachable_since(&hz), C(&hz) + 6000);
    ck_assert_ptr_nonnull(zk_session_why_down(&hz));

    hz.state = ZK_CONNECTING;
    hz.down_since_ms = 42;
    ck_assert_int_eq(zk_session_unreachable_since(&hz), 42);
    hz.attaching = true;                    /* a handover's successor: nothing known yet */
    ck_assert_int_eq(zk_session_unreachable_since(&hz), 0);
}
END_TEST

/* ------------------------------------ one backend on a fake ZooKeeper */

#define SESSION 0x5eedLL
#define ROOT "/lockbroker"

struct fowner {
    struct lock_owner o;        /* first: the callbacks cast back */
    unsigned done;
    enum locks_result result;
    uint64_t token;
};

static void owner_done(struct lock_owner *o, const char *name, enum locks_result r,
                       uint64_t token)
{
    struct fowner *f = (struct fowner *)o;

    f->done++;
    f->result = r;
    f->token = token;
}

static void owner_lost(struct lock_owner *o, const char *name, uint64_t token,
                       const char *reason)
{
    ck_abort_msg("lost %s: %s", name, reason);
}

static const struct lock_owner_ops owner_ops = { .done = owner_done, .lost = owner_lost };

static struct event_base *fbase;
static struct backend *fbe;
static struct locks *ft;
static struct fowner alice, bob;

/* Runs what is due on the loop now (the kicks that send queued writes). */
static void spin(void)
{
    for (int i = 0; i < 4; i++)
        event_base_loop(fbase, EVLOOP_NONBLOCK);
}

static void fake_setup(void)
{
    fz_reset();
    log_set_level(LOG_LVL_ERROR);
    ck_assert_int_eq(settings_init(&zs), 0);
    zs.zk_hosts = strdup("127.0.0.1:1");
    ck_assert_ptr_nonnull(zs.zk_hosts);
    fbase = event_base_new();
    ck_assert_ptr_nonnull(fbase);
    fbe = zk_backend_new(fbase, &zs, "d1", NULL);
    ck_assert_ptr_nonnull(fbe);
    ck_assert_uint_eq(fz.inits, 1);
    ft = locks_new(fbase, fbe, 16);
    ck_assert_ptr_nonnull(ft);
    memset(&alice, 0, sizeof(alice));
    memset(&bob, 0, sizeof(bob));
    lock_owner_init(&alice.o, &owner_ops, "alice");
    lock_owner_init(&bob.o, &owner_ops, "bob");
}

static void fake_teardown(void)
{
    locks_free(ft);
    fbe->ops->free(fbe->impl);
    ck_assert_uint_eq(fz.closes, 1);
    event_base_free(fbase);
    settings_free(&zs);
}

/* Connects, and answers what a new session asks first: its session node
 * is made, and the daemons of the root agree on [zookeeper] nonfair. */
static void fake_serve(void)
{
    char mine[32];
    const char *const sessions[] = { mine };

    fz_connect(SESSION, 9000);
    snprintf(mine, sizeof(mine), "%llx", (unsigned long long)SESSION);
    ck_assert_ptr_nonnull(fz_next(FZ_SYNC, "/"));      /* the first probe round */
    fz_answer_string(fz_next(FZ_CREATE, ROOT "/sessions/5eed"), ZOK, ROOT "/sessions/5eed");
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/sessions"), ZOK, sessions, 1, NULL);
    spin();
    ck_assert(zk_may_grant(fbe->impl));
}

static enum locks_result lock_as(struct fowner *f, const char *name, enum lock_mode mode,
                                 bool try)
{
    struct lock_req req = { .mode = mode, .wait_ms = try ? 0 : -1, .try = try };
    uint64_t token = 0;

    return locks_lock(ft, &f->o, name, &req, &token);
}

static enum locks_result lock(struct fowner *f, const char *name, bool try)
{
    return lock_as(f, name, LOCK_EXCLUSIVE, try);
}

/* The multi carrying our create, alone: nothing is written to the parent
 * (its data may be a recipe's). The node is named seq; its name says tag
 * ("excl", ...). */
static void answer_create_tagged(const char *parent, const char *tag, long seq)
{
    struct fz_call *m = fz_next(FZ_MULTI, NULL);
    struct fz_result res[1] = { { ZOK } };
    char created[FZ_PATH + 16];

    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->nops, 1);
    ck_assert_int_eq(m->ops[0].type, ZOO_CREATE_OP);
    ck_assert_int_eq(m->ops[0].flags, ZOO_EPHEMERAL_SEQUENTIAL);
    ck_assert_msg(strncmp(m->ops[0].path, parent, strlen(parent)) == 0, "%s", m->ops[0].path);
    snprintf(created, sizeof(created), "/d1-1-%s-", tag);
    ck_assert_ptr_nonnull(strstr(m->ops[0].path, created));
    snprintf(created, sizeof(created), "%s%010ld", m->ops[0].path, seq);
    res[0].created = created;
    fz_answer_multi(m, ZOK, res);
}

static void answer_create(const char *parent, long seq)
{
    answer_create_tagged(parent, "excl", seq);
}

/* A name nobody holds: the create, and the listing sent right behind it
 * that shows our node alone, grant it with the token of that pzxid. The
 * parent's create goes ahead; nothing else touches it (answer_create: the
 * multi is the create alone). */
START_TEST(fake_lock_granted_alone)
{
    const char *const one[] = { "d1-1-excl-0000000001" };
    struct Stat st = { 0 };
    struct fz_call *mk;

    fake_serve();
    ck_assert_int_eq(lock(&alice, "a", false), LOCKS_WAITING);
    /* The parent is new to this daemon: its create goes ahead of the multi. */
    mk = fz_next(FZ_CREATE, ROOT "/locks/a");
    ck_assert_ptr_nonnull(mk);
    ck_assert_uint_eq(fz_pending(FZ_MULTI), 0);
    spin();
    ck_assert_uint_eq(fz_pending(FZ_MULTI), 1);
    answer_create(ROOT "/locks/a", 1);
    ck_assert_uint_eq(alice.done, 0);
    st.pzxid = 0x1234;
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/a"), ZOK, one, 1, &st);
    ck_assert_uint_eq(alice.done, 1);
    ck_assert_int_eq(alice.result, LOCKS_GRANTED);
    ck_assert_uint_eq(alice.token, 0x123400);
    ck_assert_uint_eq(fz_pending(FZ_SET), 0);
}
END_TEST

/* Behind another daemon's node: watch it, and hold once it is gone, with
 * the token of the listing that showed ours first. */
START_TEST(fake_lock_waits_for_its_predecessor)
{
    const char *const two[] = { "d2-9-excl-0000000003", "d1-1-excl-0000000004" };
    const char *const one[] = { "d1-1-excl-0000000004" };
    struct Stat st = { 0 }, pred = { 0 };
    struct fz_call *watch;

    fake_serve();
    ck_assert_int_eq(lock(&alice, "b", false), LOCKS_WAITING);
    spin();
    answer_create(ROOT "/locks/b", 4);       /* not alone: list */
    st.pzxid = 0x2001;
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/b"), ZOK, two, 2, &st);
    ck_assert_uint_eq(alice.done, 0);
    watch = fz_next(FZ_GET, ROOT "/locks/b/d2-9-excl-0000000003");
    ck_assert_ptr_nonnull(watch);
    ck_assert_ptr_nonnull(watch->watcher);
    pred.ephemeralOwner = 0x77;
    fz_answer_data(watch, ZOK, "daemon=d2 client=x", &pred);
    ck_assert_uint_eq(alice.done, 0);

    fz_fire(watch, ZOO_DELETED_EVENT);
    st.pzxid = 0x3000;
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/b"), ZOK, one, 1, &st);
    ck_assert_uint_eq(alice.done, 1);
    ck_assert_int_eq(alice.result, LOCKS_GRANTED);
    ck_assert_uint_eq(alice.token, 0x300000);
}
END_TEST

/* The predecessor went before its watch was set: list again. */
START_TEST(fake_lock_predecessor_gone_before_its_watch)
{
    const char *const two[] = { "d2-9-excl-0000000003", "d1-1-excl-0000000004" };
    const char *const one[] = { "d1-1-excl-0000000004" };
    struct Stat st = { 0 };

    fake_serve();
    ck_assert_int_eq(lock(&alice, "e", false), LOCKS_WAITING);
    spin();
    answer_create(ROOT "/locks/e", 4);
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/e"), ZOK, two, 2, &st);
    fz_answer_data(fz_next(FZ_GET, ROOT "/locks/e/d2-9-excl-0000000003"), ZNONODE, NULL, NULL);
    st.pzxid = 0x4000;
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/e"), ZOK, one, 1, &st);
    ck_assert_uint_eq(alice.done, 1);
    ck_assert_uint_eq(alice.token, 0x400000);
}
END_TEST

/* A reader behind a writer and a reader watches the writer. */
START_TEST(fake_reader_watches_the_writer)
{
    const char *const three[] = { "d2-9-excl-0000000003", "d3-2-shared-0000000004",
                                  "d1-1-shared-0000000005" };
    struct Stat st = { 0 };

    fake_serve();
    ck_assert_int_eq(lock_as(&alice, "f", LOCK_SHARED, false), LOCKS_WAITING);
    spin();
    answer_create_tagged(ROOT "/locks/f", "shared", 5);
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/f"), ZOK, three, 3, &st);
    ck_assert_uint_eq(alice.done, 0);
    ck_assert_ptr_nonnull(fz_next(FZ_GET, ROOT "/locks/f/d2-9-excl-0000000003"));
    ck_assert_uint_eq(fz_pending(FZ_GET), 1);
}
END_TEST

/* A kazoo Semaphore's lease (no sequence: a hex uuid, here one whose tail
 * would pass for a late sequence) under the name: our request, first in
 * the order, watches it and holds once it is gone. */
START_TEST(fake_lock_waits_for_an_unordered_child)
{
    const char *const two[] = { "d1-1-excl-0000000004", "0f1e2d3c4b5a69788796a59876543210" };
    const char *const one[] = { "d1-1-excl-0000000004" };
    struct Stat st = { 0 };
    struct fz_call *watch;

    fake_serve();
    ck_assert_int_eq(lock(&alice, "u", false), LOCKS_WAITING);
    spin();
    answer_create(ROOT "/locks/u", 4);
    st.pzxid = 0x2000;
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/u"), ZOK, two, 2, &st);
    ck_assert_uint_eq(alice.done, 0);
    watch = fz_next(FZ_GET, ROOT "/locks/u/0f1e2d3c4b5a69788796a59876543210");
    ck_assert_ptr_nonnull(watch);
    ck_assert_ptr_nonnull(watch->watcher);
    fz_answer_data(watch, ZOK, "nightly", &st);
    ck_assert_uint_eq(alice.done, 0);

    fz_fire(watch, ZOO_DELETED_EVENT);
    st.pzxid = 0x3000;
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/u"), ZOK, one, 1, &st);
    ck_assert_uint_eq(alice.done, 1);
    ck_assert_int_eq(alice.result, LOCKS_GRANTED);
    ck_assert_uint_eq(alice.token, 0x300000);
}
END_TEST

/* A TRYLOCK that is not first gives its place back and is told BUSY. */
START_TEST(fake_trylock_busy)
{
    const char *const two[] = { "d2-9-excl-0000000003", "d1-1-excl-0000000004" };
    struct Stat st = { 0 };
    struct fz_call *del;

    fake_serve();
    ck_assert_int_eq(lock(&bob, "c", true), LOCKS_WAITING);
    spin();
    answer_create(ROOT "/locks/c", 4);
    fz_answer_children(fz_next(FZ_CHILDREN, ROOT "/locks/c"), ZOK, two, 2, &st);
    ck_assert_uint_eq(bob.done, 1);
    ck_assert_int_eq(bob.result, LOCKS_BUSY);
    /* Our node goes, in the next multi. */
    spin();
    del = fz_next(FZ_MULTI, NULL);
    ck_assert_ptr_nonnull(del);
    ck_assert_int_eq(del->ops[0].type, ZOO_DELETE_OP);
    ck_assert_str_eq(del->ops[0].path, ROOT "/locks/c/d1-1-excl-0000000004");
}
END_TEST

/* Before the agreement on [zookeeper] nonfair is checked nothing is
 * granted: a TRYLOCK waits for it rather than fail. */
START_TEST(fake_nothing_granted_before_serving)
{
    fz_connect(SESSION, 9000);
    ck_assert(!zk_may_grant(fbe->impl));
    ck_assert_int_eq(lock(&alice, "d", true), LOCKS_WAITING);
    spin();
    ck_assert_uint_eq(fz_pending(FZ_MULTI), 0);
    ck_assert_uint_eq(alice.done, 0);
}
END_TEST

/* ---------------------------------------------------------------- suite */

/* ------------------------------------------------ [interop] node names */

START_TEST(interop_names_round_trip)
{
    static const struct {
        enum interop_profile p;
        enum lock_mode mode;
        const char *want;
    } cases[] = {
        { INTEROP_CURATOR, LOCK_EXCLUSIVE,
          "_c_01234567-89ab-cdef-0000-00000000002a-lock-" },
        { INTEROP_CURATOR_RW, LOCK_EXCLUSIVE,
          "_c_01234567-89ab-cdef-0000-00000000002a-__WRIT__" },
        { INTEROP_CURATOR_RW, LOCK_SHARED,
          "_c_01234567-89ab-cdef-0000-00000000002a-__READ__" },
        { INTEROP_KAZOO, LOCK_EXCLUSIVE, "0123456789abcdef000000000000002a__lock__" },
        { INTEROP_KAZOO, LOCK_SHARED, "0123456789abcdef000000000000002a__rlock__" },
    };
    char buf[96], child[128];
    uint64_t tag, id;

    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        zk_interop_prefix(cases[i].p, cases[i].mode, 0x0123456789abcdefULL, 42, buf,
                          sizeof(buf));
        ck_assert_str_eq(buf, cases[i].want);
        /* ZooKeeper appends the sequence: the sequence is ours to read as
         * everybody's, and the name is ours again. */
        snprintf(child, sizeof(child), "%s0000000007", buf);
        ck_assert_int_eq(zk_seq_of(child), 7);
        ck_assert(zk_interop_parse(child, &tag, &id));
        ck_assert_uint_eq(tag, 0x0123456789abcdefULL);
        ck_assert_uint_eq(id, 42);
        ck_assert_int_eq(zk_interop_profile_of(child), cases[i].p);
        /* Without its sequence it is no node. */
        ck_assert(!zk_interop_parse(buf, &tag, &id));
    }
    /* The largest ids fit, in every group. */
    zk_interop_prefix(INTEROP_CURATOR, LOCK_EXCLUSIVE, UINT64_MAX, UINT64_MAX, buf, sizeof(buf));
    ck_assert_str_eq(buf, "_c_ffffffff-ffff-ffff-ffff-ffffffffffff-lock-");
    snprintf(child, sizeof(child), "%s0000000001", buf);
    ck_assert(zk_interop_parse(child, &tag, &id));
    ck_assert_uint_eq(tag, UINT64_MAX);
    ck_assert_uint_eq(id, UINT64_MAX);
}
END_TEST

START_TEST(interop_names_not_ours)
{
    static const char *const foreign[] = {
        "lock-0000000001",                                     /* Curator without protection */
        "_c_0f8c9f5e-1b2c-4d3e-8f90-a1b2c3d4e5f6-lock-",       /* no sequence */
        "_c_0F8C9F5E-1b2c-4d3e-8f90-a1b2c3d4e5f6-lock-0000000001", /* upper case: not ours */
        "_c_0f8c9f5e1b2c4d3e8f90a1b2c3d4e5f6-lock-0000000001", /* go-zookeeper's guid */
        "_c_0f8c9f5e-1b2c-4d3e-8f90-a1b2c3d4e5f6-lease-0000000001",
        "0f8c9f5e1b2c4d3e8f90a1b2c3d4e5f6__sem__0000000001",
        "0f8c9f5e1b2c4d3e8f90a1b2c3d4e5__lock__0000000001",     /* 30 hex digits */
        "host-1-2-excl-0000000001",                             /* ours, the usual naming */
        "",
    };
    uint64_t tag, id;

    for (unsigned i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
        ck_assert_msg(!zk_interop_parse(foreign[i], &tag, &id), "%s", foreign[i]);
        ck_assert_int_eq(zk_interop_profile_of(foreign[i]), INTEROP_NONE);
    }
    /* A real Curator node has our shape (a UUID's): only the tag tells. */
    ck_assert(zk_interop_parse("_c_0f8c9f5e-1b2c-4d3e-8f90-a1b2c3d4e5f6-lock-0000000001",
                               &tag, &id));
    ck_assert_uint_ne(tag, zk_daemon_tag("host-1-abc"));
    /* Tags are the daemon id's, stable (a handover keeps the id). */
    ck_assert_uint_eq(zk_daemon_tag("host-1-abc"), zk_daemon_tag("host-1-abc"));
    ck_assert_uint_ne(zk_daemon_tag("host-1-abc"), zk_daemon_tag("host-1-abd"));
}
END_TEST

static Suite *zk_suite(void)
{
    Suite *s = suite_create("zk");
    TCase *tc;

    tc = tcase_create("names");
    tcase_add_test(tc, seq_is_the_last_ten_digits);
    tcase_add_test(tc, kind_of_each_tag);
    tcase_add_test(tc, kind_of_lease_and_delay);
    tcase_add_test(tc, kind_of_unknown_is_exclusive);
    tcase_add_test(tc, kind_of_recipe_markers);
    tcase_add_test(tc, kind_of_unordered);
    tcase_add_test(tc, has_marker);
    tcase_add_test(tc, classes);
    suite_add_tcase(s, tc);

    tc = tcase_create("interop names");
    tcase_add_test(tc, interop_names_round_trip);
    tcase_add_test(tc, interop_names_not_ours);
    suite_add_tcase(s, tc);

    tc = tcase_create("tokens");
    tcase_add_test(tc, token_of_zxid);
    tcase_add_test(tc, tokens_order_with_handoffs);
    suite_add_tcase(s, tc);

    tc = tcase_create("fair queue");
    tcase_add_test(tc, view_alone);
    tcase_add_test(tc, view_exclusive_waits_for_the_node_just_before);
    tcase_add_test(tc, view_shared);
    tcase_add_test(tc, view_leases_hold_wherever_they_sit);
    tcase_add_test(tc, view_semaphore_counts);
    tcase_add_test(tc, view_other_class);
    tcase_add_test(tc, view_recipe_readers_beside_ours);
    tcase_add_test(tc, view_recipe_writer_before_us);
    tcase_add_test(tc, view_unordered_child_holds);
    suite_add_tcase(s, tc);

    tc = tcase_create("status");
    tcase_add_test(tc, queue_info_modes);
    tcase_add_test(tc, queue_info_counts_leases_behind_others);
    tcase_add_test(tc, queue_holder_data);
    tcase_add_test(tc, queue_info_recipes);
    tcase_add_test(tc, queue_holder_foreign);
    tcase_add_test(tc, queue_holder_lease);
    suite_add_tcase(s, tc);

    tc = tcase_create("window");
    tcase_add_test(tc, window_arithmetic);
    tcase_add_test(tc, window_probe_choice);
    suite_add_tcase(s, tc);

    tc = tcase_create("session");
    tcase_add_checked_fixture(tc, hand_setup, hand_teardown);
    tcase_add_test(tc, session_timeouts);
    tcase_add_test(tc, session_probe_period);
    tcase_add_test(tc, session_confirmed_until_two_thirds);
    tcase_add_test(tc, session_may_grant);
    tcase_add_test(tc, session_window);
    tcase_add_test(tc, session_unreachable_since);
    suite_add_tcase(s, tc);

    tc = tcase_create("fake zookeeper");
    tcase_add_checked_fixture(tc, fake_setup, fake_teardown);
    tcase_add_test(tc, fake_lock_granted_alone);
    tcase_add_test(tc, fake_lock_waits_for_its_predecessor);
    tcase_add_test(tc, fake_lock_predecessor_gone_before_its_watch);
    tcase_add_test(tc, fake_reader_watches_the_writer);
    tcase_add_test(tc, fake_lock_waits_for_an_unordered_child);
    tcase_add_test(tc, fake_trylock_busy);
    tcase_add_test(tc, fake_nothing_granted_before_serving);
    suite_add_tcase(s, tc);

    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(zk_suite());
    int failed;

    log_set_level(LOG_LVL_ERROR);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
