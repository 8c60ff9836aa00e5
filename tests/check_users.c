/*
 * check_users.c - the users file: parsing from memory and from files, every
 * error with its line, password verification with real crypt(3) hashes, and
 * name permissions.
 */
#include "users.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Made with `openssl passwd -6 -salt saltsalt hunter2`. */
#define SHA512_HUNTER2 "$6$saltsalt$8iYtNHxjWRl.NF6oNZ5tF.iKFlQREaXBLlSmZKP6dy9l5z3vsooWNW0/" \
                       "GZ6Nej73/TFug6pIPSqbJoCT6dfnj."
/* `openssl passwd -5 -salt ab secret` */
#define SHA256_SECRET "$5$ab$uBQPK5nh89waaCXDSRwBxzVzl.pS5fPkZnKN7HXbvj6"
/* yescrypt, as mkpasswd makes by default, of "secret" */
#define YESCRYPT_SECRET "$y$j9T$abcdefghijklmnop$3dL1LkYnZM.OVXuVdnnaKVDlLYT92dRwOzDZ5XiVCe."
/* `openssl passwd -1 -salt ab secret`: MD5, refused as weak */
#define MD5_SECRET "$1$ab$dslkcXxVH.x8LwW1W/oAB/"

static char err[512];

static struct users *parse(const char *text)
{
    return users_parse(text, strlen(text), "u", err, sizeof(err));
}

/* Parses text, which must fail with exactly `want`. */
#define parse_fails(text, want)                                         \
    do {                                                                \
        ck_assert_ptr_null(parse(text));                                \
        ck_assert_str_eq(err, want);                                    \
    } while (0)

static const struct user *find(const struct users *u, const char *name)
{
    return users_find(u, name, strlen(name));
}

static int verify(const struct users *u, const char *name, const char *pw)
{
    return users_verify(u, find(u, name), pw, strlen(pw));
}

START_TEST(parse_three_users)
{
    struct users *u = parse("# who may lock what\n"
                            "\n"
                            "alice:" SHA512_HUNTER2 ":*\n"
                            "  bob:" SHA256_SECRET ":deploy-*, backup.?? ,[a-c]x\r\n"
                            "carol@ops:" YESCRYPT_SECRET ":job-[!0-9]*");

    ck_assert_msg(u != NULL, "%s", err);
    ck_assert_uint_eq(users_count(u), 3);
    ck_assert_str_eq(user_name(find(u, "alice")), "alice");
    ck_assert_str_eq(user_name(find(u, "bob")), "bob");
    ck_assert_str_eq(user_name(find(u, "carol@ops")), "carol@ops");
    ck_assert_ptr_null(find(u, "dave"));
    ck_assert_ptr_null(find(u, "ali"));
    ck_assert_ptr_null(users_find(u, "alice", 4));
    users_free(u);
}
END_TEST

START_TEST(verify_passwords)
{
    struct users *u = parse("alice:" SHA512_HUNTER2 ":*\n"
                            "bob:" SHA256_SECRET ":*\n"
                            "carol:" YESCRYPT_SECRET ":*\n");

    ck_assert_msg(u != NULL, "%s", err);
    ck_assert_int_eq(verify(u, "alice", "hunter2"), 1);
    ck_assert_int_eq(verify(u, "alice", "hunter3"), 0);
    ck_assert_int_eq(verify(u, "alice", "hunter"), 0);
    ck_assert_int_eq(verify(u, "alice", "secret"), 0);
    ck_assert_int_eq(verify(u, "bob", "secret"), 1);
    ck_assert_int_eq(verify(u, "bob", "Secret"), 0);
    ck_assert_int_eq(verify(u, "carol", "secret"), 1);
    ck_assert_int_eq(verify(u, "carol", "secret "), 0);
    /* Only len bytes count; a NUL among them never matches. */
    ck_assert_int_eq(users_verify(u, find(u, "alice"), "hunter2xyz", 7), 1);
    ck_assert_int_eq(users_verify(u, find(u, "alice"), "hunter2\0", 8), 0);
    users_free(u);
}
END_TEST

START_TEST(permissions)
{
    struct users *u = parse("all:" SHA256_SECRET ":*\n"
                            "some:" SHA256_SECRET ":deploy-*,backup.??,[a-c]x,job-[!0-9]*\n");
    const struct user *all, *some;

    ck_assert_msg(u != NULL, "%s", err);
    all = find(u, "all");
    some = find(u, "some");
    ck_assert_int_eq(user_may(all, "anything.at:all"), 1);
    ck_assert_int_eq(user_may(some, "deploy-web"), 1);
    ck_assert_int_eq(user_may(some, "deploy-"), 1);
    ck_assert_int_eq(user_may(some, "deploy"), 0);
    ck_assert_int_eq(user_may(some, "backup.01"), 1);
    ck_assert_int_eq(user_may(some, "backup.1"), 0);
    ck_assert_int_eq(user_may(some, "bx"), 1);
    ck_assert_int_eq(user_may(some, "dx"), 0);
    ck_assert_int_eq(user_may(some, "job-x1"), 1);
    ck_assert_int_eq(user_may(some, "job-1x"), 0);
    ck_assert_int_eq(user_may(some, "xdeploy-1"), 0);
    ck_assert_int_eq(user_may_break(all, "deploy-web"), 0);
    users_free(u);
}
END_TEST

START_TEST(break_patterns)
{
    struct users *u = parse("ops:" SHA256_SECRET ":*, break=deploy-*\n"
                            "bad:" SHA256_SECRET ":break=\n");
    const struct user *ops;

    ck_assert(u == NULL);
    ck_assert_str_eq(err, "u:2: a pattern is 1-200 bytes of lock name characters and * ? [ ] !, "
                     "break=<pattern> for BREAK (patterns are separated by commas)");
    u = parse("ops:" SHA256_SECRET ":job-*, break=deploy-*\n");
    ck_assert_msg(u != NULL, "%s", err);
    ops = find(u, "ops");
    ck_assert_int_eq(user_may_break(ops, "deploy-web"), 1);
    ck_assert_int_eq(user_may_break(ops, "job-1"), 0);     /* using is not breaking */
    ck_assert_int_eq(user_may(ops, "deploy-web"), 0);      /* nor the other way round */
    ck_assert_int_eq(user_may(ops, "job-1"), 1);
    users_free(u);
}
END_TEST

/* Also a regression test under UBSan (fuzz_users, corpus regress-empty):
 * with no users the table passed NULL to qsort() and bsearch(). */
START_TEST(empty_input_no_users)
{
    struct users *u = parse("");

    ck_assert_ptr_nonnull(u);
    ck_assert_uint_eq(users_count(u), 0);
    ck_assert_ptr_null(find(u, "alice"));
    users_free(u);
    u = parse("# nobody yet\n\n   \n");
    ck_assert_ptr_nonnull(u);
    ck_assert_uint_eq(users_count(u), 0);
    users_free(u);
}
END_TEST

START_TEST(errors_name_the_line)
{
    parse_fails("# c\nalice\n", "u:2: expected name:hash:patterns");
    parse_fails("alice:" SHA256_SECRET "\n", "u:1: expected name:hash:patterns");
    parse_fails("alice:" SHA256_SECRET ":*:x\n",
                "u:1: expected name:hash:patterns (a ':' too many)");
    parse_fails("\n\nal ice:" SHA256_SECRET ":*\n",
                "u:3: a user name is 1-64 bytes of A-Z a-z 0-9 . _ @ -");
    parse_fails(":" SHA256_SECRET ":*\n",
                "u:1: a user name is 1-64 bytes of A-Z a-z 0-9 . _ @ -");
    parse_fails("alice:hunter2:*\n",
                "u:1: is not a crypt(3) hash (plain-text passwords are not accepted); make one "
                "with openssl passwd -6 or mkpasswd");
    parse_fails("alice::*\n",
                "u:1: is not a crypt(3) hash (plain-text passwords are not accepted); make one "
                "with openssl passwd -6 or mkpasswd");
    parse_fails("alice:abJnggxhB/yWI:*\n",
                "u:1: is not a crypt(3) hash (plain-text passwords are not accepted); make one "
                "with openssl passwd -6 or mkpasswd");
    parse_fails("alice:" MD5_SECRET ":*\n",
                "u:1: the hash method is weak (legacy); make one with openssl passwd -6 or "
                "mkpasswd");
    parse_fails("alice:$9$nope$nope:*\n",
                "u:1: is not a crypt(3) hash this system's libcrypt knows");
    parse_fails("alice:" SHA256_SECRET ":\n",
                "u:1: a pattern is 1-200 bytes of lock name characters and * ? [ ] !, "
                "break=<pattern> for BREAK (patterns are separated by commas)");
    parse_fails("alice:" SHA256_SECRET ":a,,b\n",
                "u:1: a pattern is 1-200 bytes of lock name characters and * ? [ ] !, "
                "break=<pattern> for BREAK (patterns are separated by commas)");
    parse_fails("alice:" SHA256_SECRET ":a/b\n",
                "u:1: a pattern is 1-200 bytes of lock name characters and * ? [ ] !, "
                "break=<pattern> for BREAK (patterns are separated by commas)");
    parse_fails("alice:" SHA256_SECRET ":*\nbob:" SHA256_SECRET ":*\nalice:" SHA256_SECRET
                ":x\n", "u:3: user 'alice' is already defined on line 1");
}
END_TEST

START_TEST(bounds)
{
    char *text = malloc(USERS_FILE_MAX + 2);
    struct users *u;
    char line[16384];
    size_t n = 0;
    int len;

    ck_assert_ptr_nonnull(text);
    /* 65 patterns, one too many. */
    len = snprintf(line, sizeof(line), "a:" SHA256_SECRET ":x");
    for (int i = 1; i < 65; i++)
        len += snprintf(line + len, sizeof(line) - (size_t)len, ",x%d", i);
    parse_fails(line, "u:1: more than 64 patterns");
    /* 64 patterns are fine. */
    *strrchr(line, ',') = '\0';
    u = parse(line);
    ck_assert_msg(u != NULL, "%s", err);
    users_free(u);
    /* A 65-byte user name. */
    snprintf(line, sizeof(line), "%065d:" SHA256_SECRET ":*", 1);
    parse_fails(line, "u:1: a user name is 1-64 bytes of A-Z a-z 0-9 . _ @ -");
    /* A NUL byte. */
    ck_assert_ptr_null(users_parse("a:\0b:*\n", 7, "u", err, sizeof(err)));
    ck_assert_str_eq(err, "u:1: a NUL byte");
    /* 10001 users. */
    for (int i = 0; i <= USERS_MAX; i++)
        n += (size_t)sprintf(text + n, "u%d:" SHA256_SECRET ":*\n", i);
    ck_assert_uint_le(n, USERS_FILE_MAX);
    ck_assert_ptr_null(users_parse(text, n, "u", err, sizeof(err)));
    ck_assert_str_eq(err, "u:10001: more than 10000 users");
    /* One byte over the size limit. */
    memset(text, '#', USERS_FILE_MAX + 1);
    ck_assert_ptr_null(users_parse(text, USERS_FILE_MAX + 1, "u", err, sizeof(err)));
    ck_assert_str_eq(err, "u: larger than 1048576 bytes");
    /* A lone pattern of 200 bytes is fine, 201 is not. */
    snprintf(line, sizeof(line), "a:" SHA256_SECRET ":%0200d", 0);
    u = parse(line);
    ck_assert_msg(u != NULL, "%s", err);
    users_free(u);
    snprintf(line, sizeof(line), "a:" SHA256_SECRET ":%0201d", 0);
    ck_assert_ptr_null(parse(line));
    free(text);
}
END_TEST

/* Writes text to a temporary file; returns its path (static buffer). */
static const char *temp_file(const char *text)
{
    static char path[] = "/tmp/check_users.XXXXXX";
    int fd;

    strcpy(path, "/tmp/check_users.XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (int)strlen(text));
    close(fd);
    return path;
}

START_TEST(load_file)
{
    const char *path = temp_file("alice:" SHA512_HUNTER2 ":*\n");
    struct users *u = users_load_file(path, err, sizeof(err));
    char want[600];

    ck_assert_msg(u != NULL, "%s", err);
    ck_assert_int_eq(verify(u, "alice", "hunter2"), 1);
    users_free(u);
    unlink(path);
    path = temp_file("\nbob:plain:*\n");
    ck_assert_ptr_null(users_load_file(path, err, sizeof(err)));
    snprintf(want, sizeof(want), "%s:2: is not a crypt(3) hash (plain-text passwords are not "
             "accepted); make one with openssl passwd -6 or mkpasswd", path);
    ck_assert_str_eq(err, want);
    unlink(path);
    ck_assert_ptr_null(users_load_file("/nonexistent/users", err, sizeof(err)));
    ck_assert_str_eq(err, "/nonexistent/users: cannot open: No such file or directory");
    ck_assert_ptr_null(users_load_file("/tmp", err, sizeof(err)));
    ck_assert_str_eq(err, "/tmp: is a directory");
}
END_TEST

START_TEST(load_file_unreadable)
{
    const char *path = temp_file("alice:" SHA512_HUNTER2 ":*\n");
    char want[600];

    if (geteuid() == 0) {
        unlink(path);
        return;     /* root reads any file */
    }
    chmod(path, 0);
    ck_assert_ptr_null(users_load_file(path, err, sizeof(err)));
    snprintf(want, sizeof(want), "%s: cannot open: Permission denied", path);
    ck_assert_str_eq(err, want);
    unlink(path);
}
END_TEST

/* Like the ZooKeeper auth file (check_conf.c zk_auth_file): the hashes can
 * be attacked offline, so others may neither read nor write the file. */
START_TEST(load_file_others_may_read)
{
    static const mode_t refused[] = { 0644, 0604, 0602, 0606, 0666, 0755 };
    static const mode_t accepted[] = { 0600, 0400, 0640, 0660, 0700 };
    const char *path = temp_file("alice:" SHA512_HUNTER2 ":*\n");
    struct users *u;
    char want[600];

    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        ck_assert_int_eq(chmod(path, refused[i]), 0);
        ck_assert_ptr_null(users_load_file(path, err, sizeof(err)));
        snprintf(want, sizeof(want), "%s: others may read or write it (mode %04o); "
                 "chmod o-rwx %s", path, (unsigned)refused[i], path);
        ck_assert_str_eq(err, want);
    }
    for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
        ck_assert_int_eq(chmod(path, accepted[i]), 0);
        u = users_load_file(path, err, sizeof(err));
        ck_assert_msg(u != NULL, "mode %04o: %s", (unsigned)accepted[i], err);
        ck_assert_uint_eq(users_count(u), 1);
        users_free(u);
    }
    unlink(path);
}
END_TEST

static Suite *users_suite(void)
{
    Suite *s = suite_create("users");
    TCase *tc = tcase_create("users");

    tcase_add_test(tc, parse_three_users);
    tcase_add_test(tc, verify_passwords);
    tcase_add_test(tc, permissions);
    tcase_add_test(tc, break_patterns);
    tcase_add_test(tc, empty_input_no_users);
    tcase_add_test(tc, errors_name_the_line);
    tcase_add_test(tc, bounds);
    tcase_add_test(tc, load_file);
    tcase_add_test(tc, load_file_unreadable);
    tcase_add_test(tc, load_file_others_may_read);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(users_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
