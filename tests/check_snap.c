/*
 * check_snap.c - the handover snapshot's text format (daemon/snap.c): every
 * field type written and read back, record kinds, and every way a reader
 * must refuse a snapshot (another format, truncated anywhere, a changed
 * byte, a wrong record count, not a snapshot at all, a missing or bad
 * field).
 *
 * Snapshots the reader must refuse are handed to it at the very end of a
 * page followed by an inaccessible one: a read past the given length
 * crashes the test (Check forks each test) instead of passing unnoticed.
 * Snapshots that must be accepted with a forged end line carry a checksum
 * computed here, independently of snap.c.
 */
#include "config.h"
#include "snap.h"

#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

/* FNV-1a 64, as snap.h specifies it. */
static uint64_t fnv1a64(const char *p, size_t len)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/*
 * body (header and records, each line ending in "\n") with an end line
 * saying `records` and the right checksum. Returns a malloc'd string.
 */
static char *forge(const char *body, unsigned records)
{
    size_t blen = strlen(body);
    char *out = malloc(blen + 64);

    ck_assert_ptr_nonnull(out);
    memcpy(out, body, blen);
    snprintf(out + blen, 64, "end %u %016" PRIx64 "\n", records, fnv1a64(body, blen));
    return out;
}

/* A copy of p[0..len) that ends where an inaccessible page begins. */
struct guarded {
    char *map;
    size_t map_len;
    char *buf;
};

static void guarded_copy(struct guarded *g, const char *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = (len + page - 1) / page + 1;

    g->map_len = pages * page;
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(g->map, MAP_FAILED);
    ck_assert_int_eq(mprotect(g->map + g->map_len - page, page, PROT_NONE), 0);
    g->buf = g->map + g->map_len - page - len;
    memcpy(g->buf, p, len);
}

static void guarded_free(struct guarded *g)
{
    munmap(g->map, g->map_len);
}

/* Opens p[0..len) (copied, guarded); returns snap_r_open's result, r filled. */
static int open_copy(struct snap_r *r, struct guarded *g, const char *p, size_t len)
{
    guarded_copy(g, p, len);
    return snap_r_open(r, g->buf, len);
}

/* p[0..len) must be refused with an error containing `want` (NULL: any). */
#define ck_refused(p, len, want)                                                   \
    do {                                                                           \
        struct snap_r r_;                                                          \
        struct guarded g_;                                                         \
        ck_assert_int_eq(open_copy(&r_, &g_, (p), (len)), -1);                     \
        ck_assert_msg(r_.err[0] != '\0', "refused without a reason");              \
        if ((want) != NULL)                                                        \
            ck_assert_msg(strstr(r_.err, (want)) != NULL,                          \
                          "error '%s' does not say '%s'", r_.err, (const char *)(want)); \
        ck_assert_ptr_null(snap_r_next(&r_));                                      \
        guarded_free(&g_);                                                         \
    } while (0)

/* A string literal must be refused with an error containing `want`. */
#define ck_refused_lit(lit, want) ck_refused((lit), strlen(lit), (want))

/* A finished snapshot from w, NUL-terminated for strstr (len excludes it). */
static char *finish(struct snap_w *w, size_t *len)
{
    char *buf = NULL, *out;

    ck_assert_int_eq(snap_w_finish(w, &buf, len), 0);
    ck_assert_ptr_nonnull(buf);
    out = malloc(*len + 1);
    ck_assert_ptr_nonnull(out);
    memcpy(out, buf, *len);
    out[*len] = '\0';
    free(buf);
    return out;
}

/* A small snapshot with a field of every type and three records. */
static char *small_snapshot(size_t *len)
{
    struct snap_w w;

    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "daemon");
    snap_w_str(&w, "host-1-abc");
    snap_w_u64(&w, 42);
    snap_w_i64(&w, -7);
    snap_w_bool(&w, true);
    snap_w_rec(&w, "conn");
    snap_w_str(&w, "a b%c");
    snap_w_str(&w, NULL);
    snap_w_rec(&w, "lock");
    snap_w_str(&w, "");
    return finish(&w, len);
}

/* ------------------------------------------------------------ round trips */

START_TEST(numbers_round_trip)
{
    static const uint64_t us[] = { 0, 1, 9, 10, 4294967295ULL, 4294967296ULL, UINT64_MAX };
    static const int64_t is[] = { INT64_MIN, -1, 0, 1, 1795315654736114539LL, INT64_MAX };
    struct snap_w w;
    struct snap_r r;
    size_t len;
    char *text;

    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "numbers");
    for (size_t i = 0; i < sizeof(us) / sizeof(us[0]); i++)
        snap_w_u64(&w, us[i]);
    for (size_t i = 0; i < sizeof(is) / sizeof(is[0]); i++)
        snap_w_i64(&w, is[i]);
    snap_w_bool(&w, true);
    snap_w_bool(&w, false);
    text = finish(&w, &len);
    /* Decimal, one space apart. */
    ck_assert_ptr_nonnull(strstr(text, "\nnumbers 0 1 9 10 4294967295 4294967296 "
                                       "18446744073709551615 -9223372036854775808 -1 0 1 "
                                       "1795315654736114539 9223372036854775807 1 0\n"));

    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    ck_assert_str_eq(snap_r_next(&r), "numbers");
    for (size_t i = 0; i < sizeof(us) / sizeof(us[0]); i++)
        ck_assert_uint_eq(snap_r_u64(&r), us[i]);
    for (size_t i = 0; i < sizeof(is) / sizeof(is[0]); i++)
        ck_assert_int_eq(snap_r_i64(&r), is[i]);
    ck_assert(snap_r_bool(&r) == true);
    ck_assert(snap_r_bool(&r) == false);
    ck_assert(snap_r_done(&r));
    ck_assert_ptr_null(snap_r_next(&r));
    ck_assert_msg(snap_r_ok(&r), "error after a clean read: %s", r.err);
    free(text);
}
END_TEST

/* Strings that need care: NULL, empty, the two markers, separators, '%'. */
static const char *const tricky[] = {
    "plain", "", "-", ".", "--", "..", "-x", ".x", "a b", " ", "  lead", "trail ",
    "%", "50%", "%2D", "line\nnext", "\r\n", "tab\there", "\x01\x7f", "\xff\xfe", "~!",
    "caf\xc3\xa9",
};

START_TEST(strings_round_trip)
{
    size_t n = sizeof(tricky) / sizeof(tricky[0]);
    struct snap_w w;
    struct snap_r r;
    size_t len, got_len;
    char *text, *eol;
    const char *s;
    char copy[16];

    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "strings");
    snap_w_str(&w, NULL);
    for (size_t i = 0; i < n; i++)
        snap_w_str(&w, tricky[i]);
    snap_w_str(&w, "short");
    text = finish(&w, &len);
    /* One line: no byte of a field may end it or split it. */
    s = strstr(text, "\nstrings ");
    ck_assert_ptr_nonnull(s);
    eol = strchr(s + 1, '\n');
    ck_assert_ptr_nonnull(eol);
    ck_assert_ptr_eq(strstr(eol + 1, "end "), eol + 1);
    /* The spellings snap.h promises for the markers and escapes. */
    ck_assert_ptr_nonnull(strstr(s, "strings - plain . %2D %2E -- .. -x .x a%20b %20 "
                                    "%20%20lead trail%20 %25 50%25 %252D line%0Anext "
                                    "%0D%0A tab%09here %01%7F %FF%FE ~! caf%C3%A9 short\n"));

    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    ck_assert_str_eq(snap_r_next(&r), "strings");
    ck_assert_ptr_null(snap_r_str(&r, &got_len));
    ck_assert_uint_eq(got_len, 0);
    ck_assert(snap_r_ok(&r));
    for (size_t i = 0; i < n; i++) {
        s = snap_r_str(&r, &got_len);
        ck_assert_msg(s != NULL, "string %zu read as NULL (%s)", i, r.err);
        ck_assert_uint_eq(got_len, strlen(tricky[i]));
        ck_assert_str_eq(s, tricky[i]);
    }
    ck_assert(snap_r_str_copy(&r, copy, sizeof(copy)));
    ck_assert_str_eq(copy, "short");
    ck_assert(snap_r_done(&r));
    ck_assert_ptr_null(snap_r_next(&r));
    ck_assert(snap_r_ok(&r));
    free(text);
}
END_TEST

START_TEST(bytes_round_trip)
{
    static const unsigned char all[] = { 0x00, 'a', 0xff, 0x00, ' ', '%', '\n', 0x80, 0x00 };
    unsigned char every[256];
    struct snap_w w;
    struct snap_r r;
    size_t len, got_len;
    const char *s;
    char *text;

    for (int i = 0; i < 256; i++)
        every[i] = (unsigned char)i;
    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "bytes");
    snap_w_bytes(&w, all, sizeof(all));
    snap_w_bytes(&w, every, sizeof(every));
    snap_w_bytes(&w, "", 0);
    snap_w_bytes(&w, "\0", 1);
    snap_w_bytes(&w, "-", 1);
    snap_w_bytes(&w, ".", 1);
    snap_w_bytes(&w, "\xff", 1);
    text = finish(&w, &len);
    ck_assert_ptr_nonnull(strstr(text, "\nbytes %00a%FF%00%20%25%0A%80%00 "));
    ck_assert_ptr_nonnull(strstr(text, " . %00 %2D %2E %FF\nend 1 "));

    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    ck_assert_str_eq(snap_r_next(&r), "bytes");
    s = snap_r_str(&r, &got_len);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(got_len, sizeof(all));
    ck_assert_mem_eq(s, all, sizeof(all));
    s = snap_r_str(&r, &got_len);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(got_len, sizeof(every));
    ck_assert_mem_eq(s, every, sizeof(every));
    s = snap_r_str(&r, &got_len);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(got_len, 0);
    s = snap_r_str(&r, &got_len);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(got_len, 1);
    ck_assert_int_eq(s[0], 0);
    s = snap_r_str(&r, &got_len);
    ck_assert_uint_eq(got_len, 1);
    ck_assert_str_eq(s, "-");
    s = snap_r_str(&r, &got_len);
    ck_assert_uint_eq(got_len, 1);
    ck_assert_str_eq(s, ".");
    s = snap_r_str(&r, &got_len);
    ck_assert_uint_eq(got_len, 1);
    ck_assert_int_eq((unsigned char)s[0], 0xff);
    ck_assert(snap_r_done(&r));
    ck_assert(snap_r_ok(&r));
    free(text);
}
END_TEST

/* str_copy: a string that fits; one a byte too long; one with a NUL inside. */
START_TEST(str_copy_bounds)
{
    struct snap_w w;
    struct snap_r r;
    char out[4];
    size_t len;
    char *text;

    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "fits");
    snap_w_str(&w, "abc");
    snap_w_str(&w, NULL);
    snap_w_str(&w, "");
    snap_w_rec(&w, "long");
    snap_w_str(&w, "abcd");
    text = finish(&w, &len);
    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    ck_assert_str_eq(snap_r_next(&r), "fits");
    ck_assert(snap_r_str_copy(&r, out, sizeof(out)));
    ck_assert_str_eq(out, "abc");
    strcpy(out, "xyz");
    ck_assert(snap_r_str_copy(&r, out, sizeof(out)));      /* NULL: "" */
    ck_assert_str_eq(out, "");
    strcpy(out, "xyz");
    ck_assert(snap_r_str_copy(&r, out, sizeof(out)));
    ck_assert_str_eq(out, "");
    ck_assert(snap_r_done(&r));
    ck_assert_str_eq(snap_r_next(&r), "long");
    ck_assert(!snap_r_str_copy(&r, out, sizeof(out)));
    ck_assert(!snap_r_ok(&r));
    ck_assert_ptr_nonnull(strstr(r.err, "a string of 4 bytes, at most 3"));
    free(text);

    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "nul");
    snap_w_bytes(&w, "a\0b", 3);
    text = finish(&w, &len);
    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    ck_assert_str_eq(snap_r_next(&r), "nul");
    ck_assert(!snap_r_str_copy(&r, out, sizeof(out)));
    ck_assert(!snap_r_ok(&r));
    free(text);
}
END_TEST

/* ------------------------------------------------------------ records */

START_TEST(record_kinds_in_order)
{
    static const char *const kinds[] = { "daemon", "backend_embedded", "leases", "conn",
                                         "lock", "hold", "hold", "pending", "watch", "x" };
    size_t n = sizeof(kinds) / sizeof(kinds[0]);
    struct snap_w w;
    struct snap_r r;
    size_t len;
    char *text, want_end[32];
    const char *k;

    snap_w_init(&w, SNAP_MAX_BYTES);
    for (size_t i = 0; i < n; i++) {
        snap_w_rec(&w, kinds[i]);
        if (i % 2)                  /* every other record has no field */
            snap_w_u64(&w, i);
    }
    text = finish(&w, &len);
    ck_assert_int_eq(strncmp(text, "lockbrokerd-snapshot 2 " PACKAGE_VERSION "\n",
                             strlen("lockbrokerd-snapshot 2 " PACKAGE_VERSION "\n")), 0);
    snprintf(want_end, sizeof(want_end), "\nend %zu ", n);
    ck_assert_ptr_nonnull(strstr(text, want_end));
    ck_assert_uint_eq(w.records, n);

    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    for (size_t i = 0; i < n; i++) {
        k = snap_r_next(&r);
        ck_assert_msg(k != NULL, "record %zu missing: %s", i, r.err);
        ck_assert_str_eq(k, kinds[i]);
        if (i % 2)
            ck_assert_uint_eq(snap_r_u64(&r), i);
        ck_assert(snap_r_done(&r));
    }
    ck_assert_ptr_null(snap_r_next(&r));
    ck_assert_ptr_null(snap_r_next(&r));       /* and stays at the end */
    ck_assert_msg(snap_r_ok(&r), "%s", r.err);
    free(text);
}
END_TEST

START_TEST(no_records)
{
    struct snap_w w;
    struct snap_r r;
    size_t len;
    char *text;

    snap_w_init(&w, SNAP_MAX_BYTES);
    text = finish(&w, &len);
    ck_assert_ptr_nonnull(strstr(text, "\nend 0 "));
    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    ck_assert_ptr_null(snap_r_next(&r));
    ck_assert(snap_r_ok(&r));
    free(text);
}
END_TEST

START_TEST(leftover_fields)
{
    struct snap_w w;
    struct snap_r r;
    size_t len;
    char *text;

    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "two");
    snap_w_u64(&w, 1);
    snap_w_u64(&w, 2);
    snap_w_rec(&w, "next");
    text = finish(&w, &len);

    /* snap_r_done with a field unread. */
    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    ck_assert_str_eq(snap_r_next(&r), "two");
    ck_assert_uint_eq(snap_r_u64(&r), 1);
    ck_assert(!snap_r_done(&r));
    ck_assert(!snap_r_ok(&r));
    ck_assert_str_eq(r.err, "record two has fields left over");
    ck_assert_ptr_null(snap_r_next(&r));       /* nothing more is read */
    free(text);

    /* snap_r_next with a field unread. */
    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "two");
    snap_w_u64(&w, 1);
    snap_w_u64(&w, 2);
    snap_w_rec(&w, "next");
    text = finish(&w, &len);
    ck_assert_int_eq(snap_r_open(&r, text, len), 0);
    ck_assert_str_eq(snap_r_next(&r), "two");
    ck_assert_uint_eq(snap_r_u64(&r), 1);
    ck_assert_ptr_null(snap_r_next(&r));
    ck_assert_str_eq(r.err, "record two has fields left over");
    free(text);
}
END_TEST

/* Reading past the last field: each type says what it lacked. */
START_TEST(missing_fields)
{
    static const char *const lacks[] = { "number", "number", "flag", "string", "string" };
    struct snap_w w;
    struct snap_r r;
    size_t len, slen = 99;
    char *text, out[8] = "x", want[64];

    for (int t = 0; t < 5; t++) {
        snap_w_init(&w, SNAP_MAX_BYTES);
        snap_w_rec(&w, "short");
        snap_w_u64(&w, 5);
        snap_w_rec(&w, "after");
        text = finish(&w, &len);
        ck_assert_int_eq(snap_r_open(&r, text, len), 0);
        ck_assert_str_eq(snap_r_next(&r), "short");
        ck_assert_uint_eq(snap_r_u64(&r), 5);
        switch (t) {
        case 0: ck_assert_uint_eq(snap_r_u64(&r), 0); break;
        case 1: ck_assert_int_eq(snap_r_i64(&r), 0); break;
        case 2: ck_assert(!snap_r_bool(&r)); break;
        case 3:
            ck_assert_ptr_null(snap_r_str(&r, &slen));
            ck_assert_uint_eq(slen, 0);
            break;
        case 4:
            ck_assert(!snap_r_str_copy(&r, out, sizeof(out)));
            ck_assert_str_eq(out, "");
            break;
        }
        ck_assert(!snap_r_ok(&r));
        snprintf(want, sizeof(want), "record short lacks its %s", lacks[t]);
        ck_assert_str_eq(r.err, want);
        ck_assert(!snap_r_done(&r));
        ck_assert_ptr_null(snap_r_next(&r));   /* "after" is never reached */
        free(text);
    }
}
END_TEST

/* Fields that are there but cannot be read as what is asked. */
START_TEST(bad_fields)
{
    static const struct { const char *field; int type; const char *err; } cases[] = {
        { "abc", 0, "record r: 'abc' is not a number" },
        { "-1", 0, "record r: '-1' is not a number" },
        { "+1", 0, "record r: '+1' is not a number" },
        { "12x", 0, "record r: '12x' is not a number" },
        { "x", 1, "record r: 'x' is not a number" },
        { "-", 1, "record r: '-' is not a number" },
        { "3.5", 1, "record r: '3.5' is not a number" },
        { "2", 2, "record r: '2' is not 0 or 1" },
        { "10", 2, "record r: '10' is not 0 or 1" },
        { "-", 2, "record r: '-' is not 0 or 1" },
        { "%G0", 3, "record r: a bad % escape" },
        { "a%4", 3, "record r: a bad % escape" },
        { "a%", 3, "record r: a bad % escape" },
    };
    struct snap_r r;
    char body[128], *text;
    size_t len;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(body, sizeof(body), "lockbrokerd-snapshot 1 test\nr %s\n", cases[i].field);
        text = forge(body, 1);
        len = strlen(text);
        ck_assert_int_eq(snap_r_open(&r, text, len), 0);
        ck_assert_str_eq(snap_r_next(&r), "r");
        switch (cases[i].type) {
        case 0: ck_assert_uint_eq(snap_r_u64(&r), 0); break;
        case 1: ck_assert_int_eq(snap_r_i64(&r), 0); break;
        case 2: ck_assert(!snap_r_bool(&r)); break;
        case 3: ck_assert_ptr_null(snap_r_str(&r, NULL)); break;
        }
        ck_assert_msg(!snap_r_ok(&r), "field '%s' accepted", cases[i].field);
        ck_assert_str_eq(r.err, cases[i].err);
        free(text);
    }
}
END_TEST

/* The first error is the one kept; snap_r_fail returns false. */
START_TEST(first_error_sticks)
{
    struct snap_r r;
    char *text = forge("lockbrokerd-snapshot 1 test\nr 1\ns 2\n", 2);

    ck_assert_int_eq(snap_r_open(&r, text, strlen(text)), 0);
    ck_assert_str_eq(snap_r_next(&r), "r");
    ck_assert(!snap_r_fail(&r, "first %d", 1));
    ck_assert(!snap_r_fail(&r, "second %d", 2));
    ck_assert_str_eq(r.err, "first 1");
    ck_assert_ptr_null(snap_r_next(&r));
    free(text);
}
END_TEST

/* Hand-written snapshots as the daemon would read them. */
START_TEST(forged_snapshot_is_read)
{
    struct snap_r r;
    char *text = forge("lockbrokerd-snapshot 1 9.9\ndaemon id%20x 7\nkindonly\n", 2);

    ck_assert_int_eq(snap_r_open(&r, text, strlen(text)), 0);
    ck_assert_str_eq(snap_r_next(&r), "daemon");
    ck_assert_str_eq(snap_r_str(&r, NULL), "id x");
    ck_assert_uint_eq(snap_r_u64(&r), 7);
    ck_assert(snap_r_done(&r));
    ck_assert_str_eq(snap_r_next(&r), "kindonly");
    ck_assert(snap_r_done(&r));
    ck_assert_ptr_null(snap_r_next(&r));
    ck_assert(snap_r_ok(&r));
    free(text);
}
END_TEST

/* ------------------------------------------------------------ refusals */

START_TEST(other_format)
{
    size_t len, blen;
    char *good = small_snapshot(&len), *body, *text;
    const size_t digit = strlen("lockbrokerd-snapshot ");

    /* The same records under format 3, with a checksum that matches. */
    blen = (size_t)(strstr(good, "\nend ") + 1 - good);
    body = malloc(blen + 1);
    ck_assert_ptr_nonnull(body);
    memcpy(body, good, blen);
    body[blen] = '\0';
    ck_assert_int_eq(body[digit], '2');
    body[digit] = '3';
    text = forge(body, 3);
    ck_refused(text, strlen(text), "its format is 3; this lockbrokerd reads formats 1 to 2 only");
    free(text);
    body[digit] = '0';
    text = forge(body, 3);
    ck_refused(text, strlen(text), "its format is 0; this lockbrokerd reads formats 1 to 2 only");
    free(text);
    /* ... and the unchanged body under format 1 (no session records: the
     * previous format) is read: only the number differs. */
    body[digit] = '1';
    text = forge(body, 3);
    {
        struct snap_r r;
        struct guarded g;

        ck_assert_int_eq(open_copy(&r, &g, text, strlen(text)), 0);
        ck_assert_str_eq(snap_r_next(&r), "daemon");
        guarded_free(&g);
    }
    free(text);
    free(body);

    ck_refused_lit("lockbrokerd-snapshot 0 x\nend 0 0\n", "its format is 0; this lockbrokerd");
    ck_refused_lit("lockbrokerd-snapshot 12 x\n", "its format is 12; this lockbrokerd");
    ck_refused_lit("lockbrokerd-snapshot -1 x\n", "its format is -1; this lockbrokerd");
    ck_refused_lit("lockbrokerd-snapshot x 1\n", "its header has no format number");
    free(good);
}
END_TEST

/* Every prefix of a good snapshot is refused, and none is read past its end. */
START_TEST(every_truncation)
{
    size_t len;
    char *good = small_snapshot(&len);
    struct snap_r r;
    struct guarded g;

    ck_assert_int_eq(open_copy(&r, &g, good, len), 0);      /* the whole one is good */
    guarded_free(&g);
    for (size_t cut = 0; cut < len; cut++) {
        ck_assert_msg(open_copy(&r, &g, good, cut) == -1, "a prefix of %zu of %zu bytes "
                      "was accepted", cut, len);
        ck_assert_msg(r.err[0], "prefix %zu refused without a reason", cut);
        ck_assert_ptr_null(snap_r_next(&r));
        guarded_free(&g);
    }
    /* What the reasons say at a few telling points. */
    ck_refused(good, len - 1, "it is truncated (no end line)");
    ck_refused(good, (size_t)(strstr(good, "\nend ") + 1 - good), "it is truncated (no end line)");
    ck_refused(good, (size_t)(strstr(good, "\nconn ") + 1 - good), "it is truncated (no end line)");
    ck_refused(good, 10, "it is not a lockbrokerd snapshot");
    ck_refused(good, 0, "it is not a lockbrokerd snapshot");
    free(good);
}
END_TEST

/* A changed byte anywhere is refused; inside a record, by the checksum. */
START_TEST(every_changed_byte)
{
    size_t len;
    char *good = small_snapshot(&len), *bad = malloc(len);
    size_t rec = (size_t)(strstr(good, "\nconn ") + 6 - good);
    struct snap_r r;
    struct guarded g;

    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(bad, good, len);
            bad[i] ^= (char)(1 << bit);
            ck_assert_msg(open_copy(&r, &g, bad, len) == -1, "byte %zu ('%c') with bit %d "
                          "flipped was accepted", i, good[i], bit);
            ck_assert(r.err[0]);
            guarded_free(&g);
        }
    }
    memcpy(bad, good, len);
    bad[rec] = bad[rec] == 'z' ? 'y' : 'z';
    ck_refused(bad, len, "its checksum does not match: it is corrupt");
    free(bad);
    free(good);
}
END_TEST

START_TEST(wrong_record_count)
{
    static const char body[] = "lockbrokerd-snapshot 1 x\na 1\nb\nc 3\n";
    char *text;

    text = forge(body, 2);
    ck_refused(text, strlen(text), "it has 3 records, its end line says 2");
    free(text);
    text = forge(body, 4);
    ck_refused(text, strlen(text), "it has 3 records, its end line says 4");
    free(text);
    text = forge("lockbrokerd-snapshot 1 x\n", 1);
    ck_refused(text, strlen(text), "it has 0 records, its end line says 1");
    free(text);
    text = forge(body, 3);                        /* the right count: read */
    {
        struct snap_r r;
        struct guarded g;

        ck_assert_int_eq(open_copy(&r, &g, text, strlen(text)), 0);
        ck_assert_str_eq(snap_r_next(&r), "a");
        guarded_free(&g);
    }
    free(text);
}
END_TEST

START_TEST(damaged_end_line)
{
    static const char body[] = "lockbrokerd-snapshot 1 x\na 1\n";
    char line[80], text[160];
    uint64_t h = fnv1a64(body, strlen(body));
    /* Each means 1 record and the right checksum, but is not spelt as written. */
    static const char *const spellings[] = {
        "end 01 %016" PRIx64 "\n", "end  1 %016" PRIx64 "\n", "end1 %016" PRIx64 "\n",
        "end 1 %016" PRIx64 " \n", "end 1 %016" PRIx64 "x\n", "end 1  %016" PRIx64 "\n",
    };

    for (size_t i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
        snprintf(line, sizeof(line), spellings[i], h);
        snprintf(text, sizeof(text), "%s%s", body, line);
        ck_refused(text, strlen(text), "its end line is damaged: it is corrupt");
    }
    /* As written, it is read. */
    snprintf(text, sizeof(text), "%send 1 %016" PRIx64 "\n", body, h);
    {
        struct snap_r r;
        struct guarded g;

        ck_assert_int_eq(open_copy(&r, &g, text, strlen(text)), 0);
        guarded_free(&g);
    }
}
END_TEST

START_TEST(not_a_snapshot)
{
    static const char *const texts[] = {
        "", "\n", "hello\n", "lockbrokerd-snapshot", "lockbrokerd-snapshot\n",
        "lockbrokerd-snapshots 1 x\nend 0 0\n", "LOCKBROKERD-SNAPSHOT 1 x\nend 0 0\n",
        " lockbrokerd-snapshot 1 x\nend 0 0\n", "LOCK a\nUNLOCK a\n",
    };
    size_t len;
    char *good = small_snapshot(&len), *nul;

    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        ck_refused(texts[i], strlen(texts[i]), "it is not a lockbrokerd snapshot");
    /* A good snapshot with a NUL byte in a record. */
    nul = malloc(len);
    memcpy(nul, good, len);
    nul[strstr(good, "\nconn ") + 2 - good] = '\0';
    ck_refused(nul, len, "it has a NUL byte");
    /* No newline after the end line's hash. */
    ck_refused_lit("lockbrokerd-snapshot 1 x\nend 0 0", "it is truncated (no end line)");
    /* No end line at all, but a last line. */
    ck_refused_lit("lockbrokerd-snapshot 1 x\na 1\n", "it is truncated (no end line)");
    /* Only a header line. */
    ck_refused_lit("lockbrokerd-snapshot 1 x\n", "it is truncated (no end line)");
    free(nul);
    free(good);
}
END_TEST

START_TEST(record_without_kind)
{
    struct snap_r r;
    char *text = forge("lockbrokerd-snapshot 1 x\na 1\n 2\n", 2);

    ck_assert_int_eq(snap_r_open(&r, text, strlen(text)), 0);
    ck_assert_str_eq(snap_r_next(&r), "a");
    ck_assert_uint_eq(snap_r_u64(&r), 1);
    ck_assert_ptr_null(snap_r_next(&r));
    ck_assert_str_eq(r.err, "a record has no kind");
    free(text);
}
END_TEST

/* The writer's bound: past max, snap_w_finish fails (and frees). */
START_TEST(writer_bound)
{
    struct snap_w w;
    char *buf = (char *)1;
    size_t len = 7, fits;
    char *text;

    snap_w_init(&w, 64);
    snap_w_rec(&w, "r");
    snap_w_str(&w, "0123456789012345678901234567890123456789012345678901234567890123");
    ck_assert(w.failed);
    ck_assert_int_eq(snap_w_finish(&w, &buf, &len), -1);
    ck_assert_ptr_eq(buf, (char *)1);           /* untouched */

    /* The smallest bound that takes a snapshot takes it whole. */
    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "r");
    snap_w_u64(&w, 1);
    text = finish(&w, &fits);
    free(text);
    snap_w_init(&w, fits);
    snap_w_rec(&w, "r");
    snap_w_u64(&w, 1);
    ck_assert_int_eq(snap_w_finish(&w, &buf, &len), 0);
    ck_assert_uint_eq(len, fits);
    free(buf);
    snap_w_init(&w, fits - 1);
    snap_w_rec(&w, "r");
    snap_w_u64(&w, 1);
    ck_assert_int_eq(snap_w_finish(&w, &buf, &len), -1);

    /* snap_w_free of an unfinished one (valgrind: no leak). */
    snap_w_init(&w, SNAP_MAX_BYTES);
    snap_w_rec(&w, "r");
    snap_w_free(&w);
    ck_assert_ptr_null(w.buf);
}
END_TEST

static Suite *snap_suite(void)
{
    Suite *s = suite_create("snap");
    TCase *tc;

    tc = tcase_create("round trips");
    tcase_add_test(tc, numbers_round_trip);
    tcase_add_test(tc, strings_round_trip);
    tcase_add_test(tc, bytes_round_trip);
    tcase_add_test(tc, str_copy_bounds);
    suite_add_tcase(s, tc);

    tc = tcase_create("records");
    tcase_add_test(tc, record_kinds_in_order);
    tcase_add_test(tc, no_records);
    tcase_add_test(tc, leftover_fields);
    tcase_add_test(tc, missing_fields);
    tcase_add_test(tc, bad_fields);
    tcase_add_test(tc, first_error_sticks);
    tcase_add_test(tc, forged_snapshot_is_read);
    tcase_add_test(tc, record_without_kind);
    tcase_add_test(tc, writer_bound);
    suite_add_tcase(s, tc);

    tc = tcase_create("refusals");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, other_format);
    tcase_add_test(tc, every_truncation);
    tcase_add_test(tc, every_changed_byte);
    tcase_add_test(tc, wrong_record_count);
    tcase_add_test(tc, damaged_end_line);
    tcase_add_test(tc, not_a_snapshot);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(snap_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
