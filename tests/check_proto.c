/*
 * check_proto.c - the request parser and the reply formatters, with plain
 * strings: every command, every separator rule and every error code.
 */
#include "proto.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* String literals may hold NUL bytes: their length comes from sizeof. */
#define PARSE(lit, req) proto_parse((lit), sizeof(lit) - 1, (req))

/* Parses a literal that must be a valid request for `cmd`. */
#define ck_request(lit, cmd_)                                          \
    do {                                                               \
        ck_assert_int_eq(PARSE(lit, &req), PROTO_REQUEST);             \
        ck_assert_int_eq(req.cmd, cmd_);                               \
    } while (0)

/* Parses a literal that must fail with error `code`. */
#define ck_error(lit, code)                                            \
    do {                                                               \
        ck_assert_int_eq(PARSE(lit, &req), PROTO_ERROR);               \
        ck_assert_int_eq(req.err, code);                               \
        ck_assert_ptr_nonnull(req.errmsg);                             \
        ck_assert_uint_gt(strlen(req.errmsg), 0);                      \
    } while (0)

/* Parses a literal that must fail with error `code` and message `msg`. */
#define ck_error_msg(lit, code, msg)                                   \
    do {                                                               \
        ck_error(lit, code);                                           \
        ck_assert_str_eq(req.errmsg, msg);                             \
    } while (0)

/* The messages of the option errors (PROTOCOL.md, "Options"). */
#define MSG_TOO_MANY "too many arguments"
#define MSG_UNKNOWN "unknown option"
#define MSG_TWICE "option given twice"
#define MSG_BOTH "shared and limit= cannot be combined"
#define MSG_LIMIT "limit must be an integer from 1 to 65535"
#define MSG_WAIT "wait-ms must be an integer from 0 to 2147483647"
#define MSG_TTL "ttl must be an integer from 100 to 86400000"
#define MSG_TTL_MS "ttl-ms must be an integer from 100 to 86400000"
#define MSG_TOKEN "token must be an unsigned 64-bit integer"

/* A formatter call must return the length of `want` and write exactly it. */
#define ck_fmt(call, want)                                             \
    do {                                                               \
        ck_assert_int_eq((call), (int)strlen(want));                   \
        ck_assert_str_eq(buf, want);                                   \
    } while (0)

/* name/name_len must be exactly `want`. */
#define ck_name(want)                                                  \
    do {                                                               \
        ck_assert_uint_eq(req.name_len, strlen(want));                 \
        ck_assert_mem_eq(req.name, want, strlen(want));                \
    } while (0)

/* ------------------------------------------------------------ commands */

START_TEST(lock_without_wait)
{
    struct proto_req req;

    ck_request("LOCK backup", PROTO_CMD_LOCK);
    ck_name("backup");
    ck_assert_int_eq(req.wait_ms, -1);   /* for ever */
}
END_TEST

START_TEST(lock_with_wait)
{
    struct proto_req req;

    ck_request("LOCK backup 1500", PROTO_CMD_LOCK);
    ck_name("backup");
    ck_assert_int_eq(req.wait_ms, 1500);
}
END_TEST

START_TEST(lock_wait_zero)
{
    struct proto_req req;

    ck_request("LOCK a 0", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, 0);
}
END_TEST

START_TEST(lock_wait_max)
{
    struct proto_req req;

    ck_request("LOCK a 2147483647", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, PROTO_WAIT_MAX);
}
END_TEST

START_TEST(lock_wait_over_max)
{
    struct proto_req req;

    ck_error("LOCK a 2147483648", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a 9999999999", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a 99999999999999999999999", PROTO_ERR_BAD_ARGS);
}
END_TEST

START_TEST(lock_wait_not_digits)
{
    struct proto_req req;

    ck_error("LOCK a +5", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a -5", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a -1", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a 5x", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a 0x10", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a 1.5", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a ten", PROTO_ERR_BAD_ARGS);
}
END_TEST

START_TEST(trylock)
{
    struct proto_req req;

    ck_request("TRYLOCK jobs:42", PROTO_CMD_TRYLOCK);
    ck_name("jobs:42");
    ck_assert_int_eq(req.wait_ms, -1);   /* untouched default */
}
END_TEST

START_TEST(unlock)
{
    struct proto_req req;

    ck_request("UNLOCK jobs:42", PROTO_CMD_UNLOCK);
    ck_name("jobs:42");
}
END_TEST

START_TEST(ping_quit)
{
    struct proto_req req;

    ck_request("PING", PROTO_CMD_PING);
    ck_assert_ptr_null(req.name);
    ck_assert_uint_eq(req.name_len, 0);
    ck_request("QUIT", PROTO_CMD_QUIT);
    ck_assert_ptr_null(req.name);
    ck_request("STATS", PROTO_CMD_STATS);
    ck_request("HELP\r", PROTO_CMD_HELP);
    ck_assert_ptr_null(req.name);
}
END_TEST

START_TEST(words_case_insensitive)
{
    struct proto_req req;

    ck_request("lock a", PROTO_CMD_LOCK);
    ck_request("LoCk a 1", PROTO_CMD_LOCK);
    ck_request("trylock a", PROTO_CMD_TRYLOCK);
    ck_request("Unlock a", PROTO_CMD_UNLOCK);
    ck_request("ping", PROTO_CMD_PING);
    ck_request("qUiT", PROTO_CMD_QUIT);
    ck_request("stats", PROTO_CMD_STATS);
    ck_request("Help", PROTO_CMD_HELP);
}
END_TEST

START_TEST(names_case_sensitive)
{
    struct proto_req req;

    /* The command word is folded, the name is not. */
    ck_request("lock MixedCase", PROTO_CMD_LOCK);
    ck_name("MixedCase");
}
END_TEST

/* ------------------------------------------------------------ separators */

START_TEST(spaces_and_tabs)
{
    struct proto_req req;

    ck_request("  \tLOCK\t\t a \t 250 \t ", PROTO_CMD_LOCK);
    ck_name("a");
    ck_assert_int_eq(req.wait_ms, 250);
    ck_request("\tPING\t", PROTO_CMD_PING);
}
END_TEST

START_TEST(trailing_cr)
{
    struct proto_req req;

    ck_request("PING\r", PROTO_CMD_PING);
    ck_request("UNLOCK a\r", PROTO_CMD_UNLOCK);
    ck_name("a");                        /* the CR is not part of the name */
    ck_request("LOCK a 7\r", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, 7);
    ck_request("LOCK a 7 \r", PROTO_CMD_LOCK);
}
END_TEST

START_TEST(cr_elsewhere_is_data)
{
    struct proto_req req;

    /* Only one CR right before the (stripped) LF is ignored. */
    ck_error("PING\r\r", PROTO_ERR_BAD_COMMAND);
    ck_error("LOCK a\r 5", PROTO_ERR_BAD_NAME);
}
END_TEST

START_TEST(other_whitespace_is_data)
{
    struct proto_req req;

    ck_error("LOCK\va", PROTO_ERR_BAD_COMMAND);
    ck_error("LOCK a\f", PROTO_ERR_BAD_NAME);
}
END_TEST

START_TEST(blank_lines)
{
    struct proto_req req;

    ck_assert_int_eq(proto_parse("", 0, &req), PROTO_BLANK);
    ck_assert_int_eq(PARSE(" ", &req), PROTO_BLANK);
    ck_assert_int_eq(PARSE("\t \t", &req), PROTO_BLANK);
    ck_assert_int_eq(PARSE("\r", &req), PROTO_BLANK);
    ck_assert_int_eq(PARSE("  \t\r", &req), PROTO_BLANK);
}
END_TEST

START_TEST(len_bounds_the_line)
{
    struct proto_req req;

    /* Bytes beyond len are not looked at, and no NUL is needed. */
    ck_assert_int_eq(proto_parse("PING PONG", 4, &req), PROTO_REQUEST);
    ck_assert_int_eq(req.cmd, PROTO_CMD_PING);
    ck_assert_int_eq(proto_parse("LOCK abc 10", 7, &req), PROTO_REQUEST);
    ck_name("ab");
    ck_assert_int_eq(req.wait_ms, -1);
}
END_TEST

/* ------------------------------------------------------------ errors */

START_TEST(bad_command)
{
    struct proto_req req;

    /* The message says where the commands are (PROTOCOL.md, Errors). */
    ck_error_msg("HELLO", PROTO_ERR_BAD_COMMAND, "unknown command (HELP lists them)");
    ck_error("LOCKED a", PROTO_ERR_BAD_COMMAND);   /* LOCKS is a command: a word matches whole */
    ck_error("LOC a", PROTO_ERR_BAD_COMMAND);
    ck_error("PINGPING", PROTO_ERR_BAD_COMMAND);
    ck_error("\xc3\xa9", PROTO_ERR_BAD_COMMAND);
    /* The word is checked before the arguments. */
    ck_error("FROB a b c d e", PROTO_ERR_BAD_COMMAND);
}
END_TEST

START_TEST(nul_in_command_word)
{
    struct proto_req req;

    ck_error("PI\0NG", PROTO_ERR_BAD_COMMAND);
    ck_error("PING\0", PROTO_ERR_BAD_COMMAND);
    ck_error("LOCK\0 a", PROTO_ERR_BAD_COMMAND);
}
END_TEST

START_TEST(missing_args)
{
    struct proto_req req;

    ck_error("LOCK", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK   \t", PROTO_ERR_BAD_ARGS);
    ck_error("TRYLOCK", PROTO_ERR_BAD_ARGS);
    ck_error("UNLOCK\r", PROTO_ERR_BAD_ARGS);
    ck_assert_str_eq(req.errmsg, "missing argument");
}
END_TEST

START_TEST(too_many_args)
{
    struct proto_req req;

    ck_error("LOCK a 1 2", PROTO_ERR_BAD_ARGS);
    ck_error("LOCK a 1 2 3 4 5 6", PROTO_ERR_BAD_ARGS);
    ck_error("TRYLOCK a 1", PROTO_ERR_BAD_ARGS);
    ck_error("UNLOCK a b", PROTO_ERR_BAD_ARGS);
    ck_error("PING x", PROTO_ERR_BAD_ARGS);
    ck_error("QUIT now", PROTO_ERR_BAD_ARGS);
    ck_error("STATS all", PROTO_ERR_BAD_ARGS);
    ck_error("HELP LOCK", PROTO_ERR_BAD_ARGS);
    ck_assert_str_eq(req.errmsg, "too many arguments");
}
END_TEST

START_TEST(name_lengths)
{
    struct proto_req req;
    char line[16 + PROTO_NAME_MAX + 2];
    char name[PROTO_NAME_MAX + 2];
    size_t n;

    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    /* Exactly 200 bytes: accepted, all of it. */
    n = (size_t)snprintf(line, sizeof(line), "LOCK %.*s 5", PROTO_NAME_MAX, name);
    ck_assert_int_eq(proto_parse(line, n, &req), PROTO_REQUEST);
    ck_assert_uint_eq(req.name_len, PROTO_NAME_MAX);
    ck_assert_int_eq(req.wait_ms, 5);
    /* 201 bytes: rejected. */
    n = (size_t)snprintf(line, sizeof(line), "LOCK %.*s 5", PROTO_NAME_MAX + 1, name);
    ck_assert_int_eq(proto_parse(line, n, &req), PROTO_ERROR);
    ck_assert_int_eq(req.err, PROTO_ERR_BAD_NAME);
    n = (size_t)snprintf(line, sizeof(line), "UNLOCK %.*s", PROTO_NAME_MAX + 1, name);
    ck_assert_int_eq(proto_parse(line, n, &req), PROTO_ERROR);
    ck_assert_int_eq(req.err, PROTO_ERR_BAD_NAME);
    /* A 1-byte name is the shortest. */
    ck_request("TRYLOCK z", PROTO_CMD_TRYLOCK);
    ck_name("z");
}
END_TEST

START_TEST(name_punctuation)
{
    struct proto_req req;

    ck_request("LOCK a.b_c:d@e-f", PROTO_CMD_LOCK);
    ck_name("a.b_c:d@e-f");
    ck_request("LOCK ._:@- 3", PROTO_CMD_LOCK);
    ck_name("._:@-");
    ck_request("LOCK ...", PROTO_CMD_LOCK);      /* only "." and ".." are special */
    ck_name("...");
    ck_request("LOCK .a", PROTO_CMD_LOCK);
    ck_request("LOCK AZaz09", PROTO_CMD_LOCK);
    ck_name("AZaz09");
}
END_TEST

START_TEST(name_dots)
{
    struct proto_req req;

    ck_error("LOCK .", PROTO_ERR_BAD_NAME);
    ck_error("LOCK ..", PROTO_ERR_BAD_NAME);
    ck_error("TRYLOCK .", PROTO_ERR_BAD_NAME);
    ck_error("UNLOCK ..", PROTO_ERR_BAD_NAME);
    ck_error("LOCK .. 10", PROTO_ERR_BAD_NAME);
}
END_TEST

START_TEST(name_bad_bytes)
{
    struct proto_req req;

    ck_error("LOCK a/b", PROTO_ERR_BAD_NAME);
    ck_error("LOCK /", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a\0b", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a\0", PROTO_ERR_BAD_NAME);
    ck_error("LOCK caf\xc3\xa9", PROTO_ERR_BAD_NAME);
    ck_error("LOCK \x80", PROTO_ERR_BAD_NAME);
    ck_error("LOCK \xff", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a*b", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a,b/c", PROTO_ERR_BAD_NAME);   /* a set's names are names */
    ck_error("STATUS a,b", PROTO_ERR_BAD_NAME);   /* only LOCK, TRYLOCK, UNLOCK take sets */
    ck_error("CHECK a,b", PROTO_ERR_BAD_NAME);
    ck_error("RENEW a,b 1 1000", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a=b", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a\\b", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a~b", PROTO_ERR_BAD_NAME);
    ck_error("LOCK \x01", PROTO_ERR_BAD_NAME);
}
END_TEST

START_TEST(name_checked_before_wait)
{
    struct proto_req req;

    ck_error("LOCK a/b 5", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a/b x", PROTO_ERR_BAD_NAME);
    ck_error("LOCK ok x", PROTO_ERR_BAD_ARGS);
}
END_TEST

START_TEST(name_valid_direct)
{
    /* An empty name cannot come out of the tokenizer; check it directly. */
    ck_assert_int_eq(proto_name_valid("", 0), 0);
    ck_assert_int_eq(proto_name_valid("a", 0), 0);
    ck_assert_int_eq(proto_name_valid("a", 1), 1);
    ck_assert_int_eq(proto_name_valid("a/", 1), 1);    /* len bounds the check */
    ck_assert_int_eq(proto_name_valid("a/", 2), 0);
    ck_assert_int_eq(proto_name_valid("..", 2), 0);
    ck_assert_int_eq(proto_name_valid("..", 1), 0);
    ck_assert_int_eq(proto_name_valid("a b", 3), 0);
    ck_assert_int_eq(proto_name_valid("a\tb", 3), 0);
}
END_TEST

START_TEST(name_points_into_line)
{
    struct proto_req req;
    static const char line[] = "  LOCK\t  some.lock  99\r";

    ck_assert_int_eq(proto_parse(line, sizeof(line) - 1, &req), PROTO_REQUEST);
    ck_assert_ptr_eq(req.name, line + 9);
    ck_assert_uint_eq(req.name_len, 9);
    ck_assert_int_eq(req.wait_ms, 99);
}
END_TEST

START_TEST(req_reset_between_parses)
{
    struct proto_req req;

    /* A struct reused from an earlier request must not leak its fields. */
    ck_request("LOCK a 5", PROTO_CMD_LOCK);
    ck_request("LOCK b", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, -1);
    ck_request("PING", PROTO_CMD_PING);
    ck_assert_ptr_null(req.name);
    ck_assert_uint_eq(req.name_len, 0);
}
END_TEST

/* ------------------------------------------------------------ options */

START_TEST(mode_default_exclusive)
{
    struct proto_req req;

    ck_request("LOCK a", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
    ck_assert_uint_eq(req.limit, 0);
    ck_request("LOCK a 5", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
    ck_request("TRYLOCK a", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
    ck_assert_uint_eq(req.limit, 0);
}
END_TEST

START_TEST(lock_shared)
{
    struct proto_req req;

    ck_request("LOCK a shared", PROTO_CMD_LOCK);
    ck_name("a");
    ck_assert_int_eq(req.wait_ms, -1);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_assert_uint_eq(req.limit, 0);
    ck_request("LOCK a 1500 shared", PROTO_CMD_LOCK);
    ck_name("a");
    ck_assert_int_eq(req.wait_ms, 1500);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_request("LOCK a 0 shared", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, 0);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
}
END_TEST

START_TEST(lock_limit)
{
    struct proto_req req;

    ck_request("LOCK a limit=3", PROTO_CMD_LOCK);
    ck_name("a");
    ck_assert_int_eq(req.wait_ms, -1);
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 3);
    ck_request("LOCK a 250 limit=3", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, 250);
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 3);
    ck_request("LOCK a limit=007", PROTO_CMD_LOCK);    /* digits only, like wait-ms */
    ck_assert_uint_eq(req.limit, 7);
}
END_TEST

START_TEST(trylock_options)
{
    struct proto_req req;

    ck_request("TRYLOCK a shared", PROTO_CMD_TRYLOCK);
    ck_name("a");
    ck_assert_int_eq(req.wait_ms, -1);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_request("TRYLOCK jobs:42 limit=2", PROTO_CMD_TRYLOCK);
    ck_name("jobs:42");
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 2);
}
END_TEST

START_TEST(options_case_insensitive)
{
    struct proto_req req;

    ck_request("LOCK a SHARED", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_request("lock a 5 Shared", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_request("TRYLOCK a sHaReD", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_request("LOCK a LIMIT=4", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 4);
    ck_request("trylock a Limit=9", PROTO_CMD_TRYLOCK);
    ck_assert_uint_eq(req.limit, 9);
    /* The name stays case-sensitive: "SHARED" in its place is a name. */
    ck_request("LOCK SHARED shared", PROTO_CMD_LOCK);
    ck_name("SHARED");
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
}
END_TEST

START_TEST(options_separators)
{
    struct proto_req req;

    ck_request("  LOCK\ta \t 10\t\tshared \t\r", PROTO_CMD_LOCK);
    ck_name("a");
    ck_assert_int_eq(req.wait_ms, 10);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_request("TRYLOCK a limit=5\r", PROTO_CMD_TRYLOCK);
    ck_assert_uint_eq(req.limit, 5);              /* the CR is not part of the value */
    ck_error_msg("TRYLOCK a limit=5\r\r", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a shared\0", PROTO_ERR_BAD_ARGS, MSG_WAIT);
    ck_error_msg("LOCK a 1 shared\0", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    /* len bounds the line: the option past it is not seen. */
    ck_assert_int_eq(proto_parse("LOCK a shared", 6, &req), PROTO_REQUEST);
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
}
END_TEST

START_TEST(limit_bounds)
{
    struct proto_req req;

    ck_request("LOCK a limit=1", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 1);
    ck_request("LOCK a limit=65535", PROTO_CMD_LOCK);
    ck_assert_uint_eq(req.limit, PROTO_LIMIT_MAX);
    ck_assert_uint_eq(req.limit, 65535);
    ck_error_msg("LOCK a limit=0", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=00", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=65536", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("TRYLOCK a limit=655350", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=4294967297", PROTO_ERR_BAD_ARGS, MSG_LIMIT);      /* 2^32 + 1 */
    ck_error_msg("LOCK a limit=18446744073709551617", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=99999999999999999999999999", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
}
END_TEST

START_TEST(limit_malformed)
{
    struct proto_req req;

    ck_error_msg("LOCK a limit=", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=+5", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=-5", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=5x", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=0x10", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=1.5", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit= 5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);  /* "5" is no option */
    ck_error_msg("LOCK a limit==5", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a limit=5=5", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a 5 limit=five", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("TRYLOCK a limit=", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
}
END_TEST

START_TEST(option_unknown)
{
    struct proto_req req;

    ck_error_msg("LOCK a 5 exclusive", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    ck_error_msg("LOCK a 5 x", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    ck_error_msg("TRYLOCK a bogus", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    ck_error_msg("TRYLOCK a shared=1", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    ck_error_msg("TRYLOCK a sharedx", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    ck_error_msg("TRYLOCK a limits=2", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    ck_error_msg("TRYLOCK a ttl=5", PROTO_ERR_BAD_ARGS, MSG_TTL);   /* an option now */
    ck_error_msg("LOCK a 5 shared bogus", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
}
END_TEST

START_TEST(wait_slot_word_is_bad_wait)
{
    struct proto_req req;

    /* Right after the name of a LOCK, a word that is no option is a bad
     * wait-ms, as it was before options existed. */
    ck_error_msg("LOCK ok x", PROTO_ERR_BAD_ARGS, MSG_WAIT);
    ck_error_msg("LOCK a ten", PROTO_ERR_BAD_ARGS, MSG_WAIT);
    ck_error_msg("LOCK a exclusive", PROTO_ERR_BAD_ARGS, MSG_WAIT);
    ck_error_msg("LOCK a shared=1", PROTO_ERR_BAD_ARGS, MSG_WAIT);
    ck_error_msg("LOCK a 5x shared", PROTO_ERR_BAD_ARGS, MSG_WAIT);
}
END_TEST

START_TEST(option_twice)
{
    struct proto_req req;

    ck_error_msg("LOCK a shared shared", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("LOCK a 5 shared SHARED", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("TRYLOCK a limit=2 limit=2", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("LOCK a limit=2 limit=3", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("LOCK a limit=2 limit=0", PROTO_ERR_BAD_ARGS, MSG_TWICE);
}
END_TEST

START_TEST(shared_with_limit)
{
    struct proto_req req;

    ck_error_msg("LOCK a shared limit=2", PROTO_ERR_BAD_ARGS, MSG_BOTH);
    ck_error_msg("LOCK a limit=2 shared", PROTO_ERR_BAD_ARGS, MSG_BOTH);
    ck_error_msg("LOCK a 10 shared limit=2", PROTO_ERR_BAD_ARGS, MSG_BOTH);
    ck_error_msg("TRYLOCK a LIMIT=2 Shared", PROTO_ERR_BAD_ARGS, MSG_BOTH);
    /* Left to right: the first bad option is reported. */
    ck_error_msg("LOCK a shared limit=0", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
}
END_TEST

START_TEST(number_where_option_expected)
{
    struct proto_req req;

    /* The messages these had before options existed. */
    ck_error_msg("TRYLOCK a 5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("TRYLOCK a 1", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("LOCK a 1 2", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("LOCK a 1 2 3 4 5 6", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    /* wait-ms only right after the name. */
    ck_error_msg("LOCK a shared 5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("LOCK a 1 shared 2", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("TRYLOCK a shared 5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    /* Anything that does not start with a letter. */
    ck_error_msg("LOCK a 1 +shared", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("TRYLOCK a =5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("TRYLOCK a \xc3\xa9", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    /* The shape is checked before the arguments, as before options. */
    ck_error_msg("LOCK a/b 1 2", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("TRYLOCK a/b 5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("LOCK a 5x 2", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
}
END_TEST

START_TEST(options_checked_after_name_and_wait)
{
    struct proto_req req;

    ck_error("LOCK a/b shared", PROTO_ERR_BAD_NAME);
    ck_error("LOCK a/b 5 bogus", PROTO_ERR_BAD_NAME);
    ck_error("TRYLOCK . limit=0", PROTO_ERR_BAD_NAME);
    ck_error_msg("LOCK a 2147483648 limit=0", PROTO_ERR_BAD_ARGS, MSG_WAIT);
}
END_TEST

START_TEST(options_not_taken)
{
    struct proto_req req;

    /* Commands without options answer as they did before options existed. */
    /* UNLOCK's second argument is a token, so these are bad tokens. */
    ck_error_msg("UNLOCK a shared", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a limit=2", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("STATUS a shared", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("PING shared", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("QUIT limit=1", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("STATS shared", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("HELP shared", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error("UNLOCK a/b shared", PROTO_ERR_BAD_NAME);    /* the shape fits: name first */
    ck_error_msg("RENEW a 1 100 shared", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    /* "shared" where the name goes is a name. */
    ck_request("UNLOCK shared", PROTO_CMD_UNLOCK);
    ck_name("shared");
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
    ck_request("LOCK shared", PROTO_CMD_LOCK);
    ck_name("shared");
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
}
END_TEST

START_TEST(options_bounded)
{
    struct proto_req req;
    char line[4096];
    int n;

    /* At most 4 options; beyond that, too many arguments before any is read. */
    ck_error_msg("LOCK a shared x x x x", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("LOCK a 5 shared x x x x", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("TRYLOCK a shared shared shared shared shared", PROTO_ERR_BAD_ARGS,
                 MSG_TOO_MANY);
    /* Up to 4, they are read left to right. */
    ck_error_msg("TRYLOCK a shared x x x", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    ck_error_msg("LOCK a 5 shared shared x x", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    /* A long line of options is cut short. */
    n = snprintf(line, sizeof(line), "LOCK a");
    while (n + 8 < (int)sizeof(line))
        n += snprintf(line + n, sizeof(line) - (size_t)n, " shared");
    ck_assert_int_eq(proto_parse(line, (size_t)n, &req), PROTO_ERROR);
    ck_assert_int_eq(req.err, PROTO_ERR_BAD_ARGS);
    ck_assert_str_eq(req.errmsg, MSG_TOO_MANY);
}
END_TEST

START_TEST(options_reset_between_parses)
{
    struct proto_req req;

    ck_request("LOCK a limit=5", PROTO_CMD_LOCK);
    ck_request("LOCK b", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
    ck_assert_uint_eq(req.limit, 0);
    ck_request("TRYLOCK a shared", PROTO_CMD_TRYLOCK);
    ck_request("LOCK a limit=2", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 2);
    ck_request("TRYLOCK a shared", PROTO_CMD_TRYLOCK);
    ck_assert_uint_eq(req.limit, 0);
}
END_TEST

/* ------------------------------------------------------------ leases */

START_TEST(ttl_none_by_default)
{
    struct proto_req req;

    ck_request("LOCK a", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.ttl_ms, 0);
    ck_assert_int_eq(req.has_token, 0);
    ck_request("LOCK a 5 shared", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.ttl_ms, 0);
    ck_request("TRYLOCK a limit=2", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.ttl_ms, 0);
}
END_TEST

START_TEST(ttl_option)
{
    struct proto_req req;

    ck_request("LOCK a ttl=30000", PROTO_CMD_LOCK);
    ck_name("a");
    ck_assert_int_eq(req.wait_ms, -1);           /* an option in wait-ms's place */
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
    ck_assert_int_eq(req.ttl_ms, 30000);
    ck_assert_int_eq(req.has_token, 0);
    ck_request("LOCK a 0 ttl=500", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, 0);
    ck_assert_int_eq(req.ttl_ms, 500);
    ck_request("TRYLOCK jobs:42 ttl=1000", PROTO_CMD_TRYLOCK);
    ck_name("jobs:42");
    ck_assert_int_eq(req.ttl_ms, 1000);
    ck_request("lock a TTL=200", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.ttl_ms, 200);
    ck_request("TRYLOCK a Ttl=00300\r", PROTO_CMD_TRYLOCK);   /* digits only, like limit= */
    ck_assert_int_eq(req.ttl_ms, 300);
    /* "ttl" where the name goes is a name. */
    ck_request("LOCK ttl ttl=100", PROTO_CMD_LOCK);
    ck_name("ttl");
    ck_assert_int_eq(req.ttl_ms, 100);
}
END_TEST

START_TEST(ttl_bounds)
{
    struct proto_req req;

    ck_error_msg("LOCK a ttl=99", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_request("LOCK a ttl=100", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.ttl_ms, PROTO_TTL_MIN);
    ck_assert_int_eq(req.ttl_ms, 100);
    ck_request("LOCK a ttl=86400000", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.ttl_ms, PROTO_TTL_MAX);
    ck_assert_int_eq(req.ttl_ms, 86400000);
    ck_error_msg("LOCK a ttl=86400001", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("TRYLOCK a ttl=99", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_request("TRYLOCK a ttl=100", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.ttl_ms, 100);
    ck_request("TRYLOCK a ttl=86400000", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.ttl_ms, 86400000);
    ck_error_msg("TRYLOCK a ttl=86400001", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=0", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=4294967396", PROTO_ERR_BAD_ARGS, MSG_TTL);     /* 2^32 + 100 */
    ck_error_msg("LOCK a ttl=18446744073709551716", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=99999999999999999999999999", PROTO_ERR_BAD_ARGS, MSG_TTL);
}
END_TEST

START_TEST(ttl_malformed)
{
    struct proto_req req;

    ck_error_msg("LOCK a ttl=", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a 5 ttl=", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("TRYLOCK a ttl=", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=1e3", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=+100", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=-100", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=100ms", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=0x100", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=100.5", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl==100", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl= 100", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);  /* "100" is no option */
    ck_error_msg("LOCK a ttls=100", PROTO_ERR_BAD_ARGS, MSG_WAIT);      /* no option: wait-ms */
    ck_error_msg("LOCK a 5 ttls=100", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    ck_error_msg("TRYLOCK a ttl=100\r\r", PROTO_ERR_BAD_ARGS, MSG_TTL);
}
END_TEST

START_TEST(ttl_with_mode)
{
    struct proto_req req;

    /* ttl= combines with shared or limit=, in either order. */
    ck_request("LOCK a shared ttl=1000", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_assert_int_eq(req.ttl_ms, 1000);
    ck_request("LOCK a ttl=1000 shared", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, -1);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_assert_int_eq(req.ttl_ms, 1000);
    ck_request("LOCK a limit=3 ttl=2000", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 3);
    ck_assert_int_eq(req.ttl_ms, 2000);
    ck_request("LOCK a ttl=2000 limit=3", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 3);
    ck_assert_int_eq(req.ttl_ms, 2000);
    ck_request("LOCK a 250 ttl=100 shared", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.wait_ms, 250);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_assert_int_eq(req.ttl_ms, 100);
    ck_request("TRYLOCK a shared ttl=100", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_assert_int_eq(req.ttl_ms, 100);
    ck_request("TRYLOCK a ttl=86400000 limit=65535", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.mode, PROTO_MODE_LIMIT);
    ck_assert_uint_eq(req.limit, 65535);
    ck_assert_int_eq(req.ttl_ms, 86400000);
    /* ttl= does not lift the rule that shared and limit= exclude each other. */
    ck_error_msg("LOCK a shared ttl=100 limit=2", PROTO_ERR_BAD_ARGS, MSG_BOTH);
    ck_error_msg("LOCK a ttl=100 limit=2 shared", PROTO_ERR_BAD_ARGS, MSG_BOTH);
    /* Left to right: the first bad option is reported. */
    ck_error_msg("LOCK a ttl=99 limit=0", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a limit=0 ttl=99", PROTO_ERR_BAD_ARGS, MSG_LIMIT);
    ck_error_msg("LOCK a shared ttl=1 bogus", PROTO_ERR_BAD_ARGS, MSG_TTL);
    ck_error_msg("LOCK a ttl=100 bogus", PROTO_ERR_BAD_ARGS, MSG_UNKNOWN);
    /* Still at most 4 options, and a number after them is too many. */
    ck_error_msg("LOCK a 5 shared ttl=100 x x x", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("LOCK a ttl=100 5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
}
END_TEST

START_TEST(ttl_twice)
{
    struct proto_req req;

    ck_error_msg("LOCK a ttl=100 ttl=100", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("LOCK a ttl=100 ttl=200", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("LOCK a ttl=100 ttl=5", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("TRYLOCK a ttl=100 shared TTL=100", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("LOCK a 5 limit=2 ttl=100 ttl=100", PROTO_ERR_BAD_ARGS, MSG_TWICE);
}
END_TEST

START_TEST(unlock_token)
{
    struct proto_req req;

    ck_request("UNLOCK a", PROTO_CMD_UNLOCK);
    ck_assert_int_eq(req.has_token, 0);
    ck_assert_uint_eq(req.token, 0);
    ck_request("UNLOCK a 0", PROTO_CMD_UNLOCK);
    ck_name("a");
    ck_assert_int_eq(req.has_token, 1);
    ck_assert_uint_eq(req.token, 0);
    ck_request("UNLOCK backup 1795315654736114539", PROTO_CMD_UNLOCK);
    ck_name("backup");
    ck_assert_int_eq(req.has_token, 1);
    ck_assert_uint_eq(req.token, 1795315654736114539ULL);
    ck_request("UNLOCK a 18446744073709551615", PROTO_CMD_UNLOCK);
    ck_assert_int_eq(req.has_token, 1);
    ck_assert_uint_eq(req.token, UINT64_MAX);
    ck_request("UNLOCK a 00000000000000000042", PROTO_CMD_UNLOCK);     /* 20 digits */
    ck_assert_uint_eq(req.token, 42);
    ck_request("unlock a\t7\r", PROTO_CMD_UNLOCK);
    ck_assert_uint_eq(req.token, 7);
    ck_assert_int_eq(req.ttl_ms, 0);
    ck_assert_int_eq(req.wait_ms, -1);
}
END_TEST

START_TEST(unlock_token_bad)
{
    struct proto_req req;

    ck_error_msg("UNLOCK a 18446744073709551616", PROTO_ERR_BAD_ARGS, MSG_TOKEN);  /* 2^64 */
    ck_error_msg("UNLOCK a 18446744073709551619", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a 99999999999999999999", PROTO_ERR_BAD_ARGS, MSG_TOKEN);  /* 20 digits */
    ck_error_msg("UNLOCK a 000000000000000000042", PROTO_ERR_BAD_ARGS, MSG_TOKEN); /* 21 digits */
    ck_error_msg("UNLOCK a 100000000000000000000", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a b", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a -1", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a +1", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a 1x", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a 0x10", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a 1.0", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a 1\0", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("UNLOCK a 1\r\r", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    /* Still too many beyond the token, checked before the arguments. */
    ck_error_msg("UNLOCK a b c", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("UNLOCK a 1 2", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("UNLOCK a/b 1 2", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("UNLOCK a 1 shared", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("UNLOCK a keep=1 ttl=5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("UNLOCK a 1 keep=1 2", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    /* Left to right: the name first. */
    ck_error("UNLOCK a/b 5", PROTO_ERR_BAD_NAME);
    ck_error("UNLOCK a/b x", PROTO_ERR_BAD_NAME);
}
END_TEST

START_TEST(unlock_keep)
{
    struct proto_req req;

    ck_assert_int_eq(proto_parse("UNLOCK a", 8, &req), PROTO_REQUEST);
    ck_assert_int_eq(req.keep_ms, 0);
    ck_assert_int_eq(proto_parse("UNLOCK a keep=60000", 19, &req), PROTO_REQUEST);
    ck_assert_int_eq(req.keep_ms, 60000);
    ck_assert_int_eq(req.has_token, 0);
    ck_assert_int_eq(proto_parse("UNLOCK a 17 KEEP=86400000", 25, &req), PROTO_REQUEST);
    ck_assert_int_eq(req.keep_ms, 86400000);
    ck_assert(req.has_token && req.token == 17);
    ck_assert_int_eq(proto_parse("unlock a,b keep=0", 17, &req), PROTO_REQUEST);
    ck_assert_int_eq(req.nnames, 2);
    ck_assert_int_eq(req.keep_ms, 0);
    ck_error_msg("UNLOCK a keep=86400001", PROTO_ERR_BAD_ARGS,
                 "keep must be an integer from 0 to 86400000");
    ck_error_msg("UNLOCK a keep", PROTO_ERR_BAD_ARGS, "keep must be an integer from 0 to 86400000");
    ck_error_msg("UNLOCK a keep=-1", PROTO_ERR_BAD_ARGS,
                 "keep must be an integer from 0 to 86400000");
    ck_error_msg("UNLOCK a keep=1 keep=2", PROTO_ERR_BAD_ARGS, "option given twice");
    /* Only UNLOCK takes it. */
    ck_error_msg("LOCK a 5 keep=5", PROTO_ERR_BAD_ARGS, "unknown option");
    ck_error_msg("TRYLOCK a keep=5", PROTO_ERR_BAD_ARGS, "unknown option");
    ck_error_msg("RENEW a 5 100 keep=5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
}
END_TEST

START_TEST(renew)
{
    struct proto_req req;

    ck_request("RENEW a 5 100", PROTO_CMD_RENEW);
    ck_name("a");
    ck_assert_int_eq(req.has_token, 1);
    ck_assert_uint_eq(req.token, 5);
    ck_assert_int_eq(req.ttl_ms, 100);
    ck_assert_int_eq(req.wait_ms, -1);
    ck_assert_int_eq(req.mode, PROTO_MODE_EXCLUSIVE);
    ck_request("RENEW jobs:42 0 86400000", PROTO_CMD_RENEW);
    ck_name("jobs:42");
    ck_assert_uint_eq(req.token, 0);
    ck_assert_int_eq(req.ttl_ms, 86400000);
    ck_request("RENEW a 18446744073709551615 30000\r", PROTO_CMD_RENEW);
    ck_assert_uint_eq(req.token, UINT64_MAX);
    ck_assert_int_eq(req.ttl_ms, 30000);
    ck_request("renew a 1 100", PROTO_CMD_RENEW);
    ck_request("ReNeW\ta \t1\t 0100 ", PROTO_CMD_RENEW);
    ck_assert_int_eq(req.ttl_ms, 100);
}
END_TEST

START_TEST(renew_bad)
{
    struct proto_req req;

    ck_error_msg("RENEW", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_error_msg("RENEW a", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_error_msg("RENEW a 5", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_error_msg("RENEW a/b 5", PROTO_ERR_BAD_ARGS, "missing argument");  /* shape first */
    ck_error_msg("RENEW a 5 100 200", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("RENEW a/b 5 100 200", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error("RENEW a/b 5 100", PROTO_ERR_BAD_NAME);
    ck_error("RENEW . x 1", PROTO_ERR_BAD_NAME);
    ck_error_msg("RENEW a x 100", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("RENEW a x 99", PROTO_ERR_BAD_ARGS, MSG_TOKEN);          /* left to right */
    ck_error_msg("RENEW a -5 100", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("RENEW a 18446744073709551616 100", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("RENEW a 000000000000000000005 100", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("RENEW a 5 99", PROTO_ERR_BAD_ARGS, MSG_TTL_MS);
    ck_error_msg("RENEW a 5 0", PROTO_ERR_BAD_ARGS, MSG_TTL_MS);
    ck_error_msg("RENEW a 5 86400001", PROTO_ERR_BAD_ARGS, MSG_TTL_MS);
    ck_error_msg("RENEW a 5 99999999999999999999999", PROTO_ERR_BAD_ARGS, MSG_TTL_MS);
    ck_error_msg("RENEW a 5 1e3", PROTO_ERR_BAD_ARGS, MSG_TTL_MS);
    ck_error_msg("RENEW a 5 +100", PROTO_ERR_BAD_ARGS, MSG_TTL_MS);
    ck_error_msg("RENEW a 5 ttl=100", PROTO_ERR_BAD_ARGS, MSG_TTL_MS);    /* no options */
    ck_error_msg("RENEW a 5 shared", PROTO_ERR_BAD_ARGS, MSG_TTL_MS);
    ck_error_msg("RENEW a 5 100 shared", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("RENEW a 5 100 ttl=100", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error("RENEWS a 5 100", PROTO_ERR_BAD_COMMAND);
    ck_error("RENE a 5 100", PROTO_ERR_BAD_COMMAND);
}
END_TEST

/* ------------------------------------------------- CHECK and lock-delay */

#define MSG_DELAY "delay must be an integer from 0 to 60000"

START_TEST(check)
{
    struct proto_req req;

    ck_request("CHECK a", PROTO_CMD_CHECK);
    ck_name("a");
    ck_assert_int_eq(req.has_token, 0);
    ck_request("check jobs:42 18446744073709551615\r", PROTO_CMD_CHECK);
    ck_name("jobs:42");
    ck_assert_int_eq(req.has_token, 1);
    ck_assert_uint_eq(req.token, UINT64_MAX);
    ck_error_msg("CHECK", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_error("CHECK a/b", PROTO_ERR_BAD_NAME);
    ck_error_msg("CHECK a x", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("CHECK a 18446744073709551616", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_error_msg("CHECK a 5 6", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("CHECK a 5 delay=5", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);  /* no options */
}
END_TEST

START_TEST(delay_option)
{
    struct proto_req req;

    ck_request("LOCK a", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.delay_ms, -1);                  /* not given: the daemon's default */
    ck_request("LOCK a delay=0", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.delay_ms, 0);
    ck_assert_int_eq(req.wait_ms, -1);
    ck_request("LOCK a 500 shared ttl=1000 DELAY=60000", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.delay_ms, PROTO_DELAY_MAX);
    ck_assert_int_eq(req.wait_ms, 500);
    ck_assert_int_eq(req.ttl_ms, 1000);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);
    ck_request("TRYLOCK a delay=15000 limit=3", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.delay_ms, 15000);
    ck_assert_int_eq(req.limit, 3);
    ck_error_msg("LOCK a delay=60001", PROTO_ERR_BAD_ARGS, MSG_DELAY);
    ck_error_msg("LOCK a delay=", PROTO_ERR_BAD_ARGS, MSG_DELAY);
    ck_error_msg("LOCK a delay", PROTO_ERR_BAD_ARGS, MSG_DELAY);
    ck_error_msg("LOCK a delay=-1", PROTO_ERR_BAD_ARGS, MSG_DELAY);
    ck_error_msg("LOCK a delay=1s", PROTO_ERR_BAD_ARGS, MSG_DELAY);
    ck_error_msg("LOCK a delay=5 delay=5", PROTO_ERR_BAD_ARGS, MSG_TWICE);
    ck_error_msg("UNLOCK a delay=5", PROTO_ERR_BAD_ARGS, MSG_TOKEN);
    ck_request("LOCK a delay=1", PROTO_CMD_LOCK);
    ck_request("PING", PROTO_CMD_PING);
    ck_assert_int_eq(req.delay_ms, -1);                  /* reset between parses */
}
END_TEST

START_TEST(lease_fields_reset_between_parses)
{
    struct proto_req req;

    ck_request("RENEW a 5 1000", PROTO_CMD_RENEW);
    ck_request("UNLOCK a", PROTO_CMD_UNLOCK);
    ck_assert_int_eq(req.has_token, 0);
    ck_assert_uint_eq(req.token, 0);
    ck_assert_int_eq(req.ttl_ms, 0);
    ck_request("LOCK a ttl=500", PROTO_CMD_LOCK);
    ck_request("LOCK a", PROTO_CMD_LOCK);
    ck_assert_int_eq(req.ttl_ms, 0);
    ck_request("UNLOCK a 9", PROTO_CMD_UNLOCK);
    ck_request("TRYLOCK a", PROTO_CMD_TRYLOCK);
    ck_assert_int_eq(req.has_token, 0);
    ck_assert_uint_eq(req.token, 0);
    /* A token or ttl-ms that fails is not stored. */
    ck_error("UNLOCK a 18446744073709551616", PROTO_ERR_BAD_ARGS);
    ck_assert_int_eq(req.has_token, 0);
    ck_error("RENEW a 5 99", PROTO_ERR_BAD_ARGS);
    ck_assert_int_eq(req.ttl_ms, 0);
}
END_TEST

/* ------------------------------------------------------------ tables */

START_TEST(cmd_words)
{
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_LOCK), "LOCK");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_TRYLOCK), "TRYLOCK");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_UNLOCK), "UNLOCK");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_RENEW), "RENEW");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_PING), "PING");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_QUIT), "QUIT");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_STATS), "STATS");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_HELP), "HELP");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_AUTH), "AUTH");
    ck_assert_str_eq(proto_cmd_word(PROTO_CMD_COUNT), "?");
}
END_TEST

START_TEST(cmd_usage_and_help)
{
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_LOCK),
                     "LOCK <name>[,<name>...] [<wait-ms>] [shared|limit=<n>] [ttl=<ms>] "
                     "[delay=<ms>]");
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_TRYLOCK),
                     "TRYLOCK <name>[,<name>...] [shared|limit=<n>] [ttl=<ms>] [delay=<ms>]");
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_CHECK), "CHECK <name> [<token>]");
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_UNLOCK),
                     "UNLOCK <name>[,<name>...] [<token>] [keep=<ms>]");
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_RENEW), "RENEW <name> <token> <ttl-ms>");
    ck_assert_str_eq(proto_cmd_help(PROTO_CMD_RENEW),
                     "extend a lease: it now ends ttl-ms from now");
    /* HELP lists RENEW right after UNLOCK. */
    ck_assert_int_eq(PROTO_CMD_RENEW, PROTO_CMD_UNLOCK + 1);
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_PING), "PING");
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_COUNT), "?");
    ck_assert_str_eq(proto_cmd_help(PROTO_CMD_COUNT), "?");
    /* HELP lists every command: each usage starts with its word and has text. */
    for (int i = 0; i < PROTO_CMD_COUNT; i++) {
        const char *word = proto_cmd_word((enum proto_cmd)i);

        ck_assert_int_eq(strncmp(proto_cmd_usage((enum proto_cmd)i), word, strlen(word)), 0);
        ck_assert_uint_gt(strlen(proto_cmd_help((enum proto_cmd)i)), 0);
    }
}
END_TEST

START_TEST(client_label)
{
    struct proto_req req;
    static const char label[] = "ops@db1:4242:pg_dump";
    char longest[160];

    ck_request("CLIENT ops@db1:4242:pg_dump", PROTO_CMD_CLIENT);
    ck_assert_uint_eq(req.label_len, strlen(label));
    ck_assert_int_eq(memcmp(req.label, label, req.label_len), 0);
    ck_request("client x", PROTO_CMD_CLIENT);
    snprintf(longest, sizeof(longest), "CLIENT %0100d", 7);       /* 100 bytes */
    ck_assert_int_eq(proto_parse(longest, strlen(longest), &req), PROTO_REQUEST);
    ck_assert_uint_eq(req.label_len, 100);
    snprintf(longest, sizeof(longest), "CLIENT %0101d", 7);       /* 101 bytes */
    ck_assert_int_eq(proto_parse(longest, strlen(longest), &req), PROTO_ERROR);
    ck_assert_str_eq(req.errmsg, "a label is 1-100 printable bytes without spaces");
    ck_error_msg("CLIENT", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_error_msg("CLIENT a b", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("CLIENT caf\xc3\xa9", PROTO_ERR_BAD_ARGS,
                 "a label is 1-100 printable bytes without spaces");
    ck_assert_int_eq(proto_parse("CLIENT a\0b", 10, &req), PROTO_ERROR);
}
END_TEST

START_TEST(locks_glob)
{
    struct proto_req req;

    ck_request("LOCKS", PROTO_CMD_LOCKS);
    ck_assert_uint_eq(req.name_len, 0);
    ck_request("LOCKS deploy-*", PROTO_CMD_LOCKS);
    ck_assert_uint_eq(req.name_len, 8);
    ck_request("locks job[0-9]?.x", PROTO_CMD_LOCKS);
    ck_request("LOCKS [!a]*", PROTO_CMD_LOCKS);
    ck_error("LOCKS a/b", PROTO_ERR_BAD_ARGS);
    ck_error("LOCKS a b", PROTO_ERR_BAD_ARGS);
    ck_assert_int_eq(proto_parse("LOCKS a\0*", 9, &req), PROTO_ERROR);
    /* Sets must be closed: fnmatch() would take a lone '[' or ']' literally
     * and match no name, silently. */
    ck_request("LOCKS a[]]", PROTO_CMD_LOCKS);       /* ']' first is a member */
    ck_request("LOCKS a[!]x]", PROTO_CMD_LOCKS);
    ck_request("LOCKS [a][b]*", PROTO_CMD_LOCKS);
    ck_error_msg("LOCKS a[", PROTO_ERR_BAD_ARGS, "a '[' in the pattern has no ']' after it "
                 "(a set is [...] or [!...])");
    ck_error("LOCKS a[]", PROTO_ERR_BAD_ARGS);
    ck_error("LOCKS a[!]", PROTO_ERR_BAD_ARGS);
    ck_error("LOCKS [a]x[b", PROTO_ERR_BAD_ARGS);
    ck_error_msg("LOCKS a]", PROTO_ERR_BAD_ARGS, "a ']' in the pattern has no '[' before it "
                 "(a set is [...] or [!...])");
    ck_error("LOCKS [a]]", PROTO_ERR_BAD_ARGS);
    ck_error("HOLDERS job-[0-9", PROTO_ERR_BAD_ARGS);
    /* HOLDERS takes the same pattern. */
    ck_request("HOLDERS", PROTO_CMD_HOLDERS);
    ck_assert_uint_eq(req.name_len, 0);
    ck_request("holders deploy-*", PROTO_CMD_HOLDERS);
    ck_assert_uint_eq(req.name_len, 8);
    ck_error("HOLDERS a/b", PROTO_ERR_BAD_ARGS);
    ck_error("HOLDERS a b", PROTO_ERR_BAD_ARGS);
    ck_error("HOLDER a", PROTO_ERR_BAD_COMMAND);
}
END_TEST

START_TEST(watch)
{
    struct proto_req req;

    ck_request("WATCH leader", PROTO_CMD_WATCH);
    ck_assert_uint_eq(req.name_len, 6);
    ck_request("unwatch leader", PROTO_CMD_UNWATCH);
    ck_error("WATCH", PROTO_ERR_BAD_ARGS);
    ck_error("WATCH a b", PROTO_ERR_BAD_ARGS);
    ck_error("WATCH a*", PROTO_ERR_BAD_NAME);
    ck_error("UNWATCH", PROTO_ERR_BAD_ARGS);
    ck_request("BREAK deploy", PROTO_CMD_BREAK);
    ck_assert(!req.has_token);
    ck_request("BREAK deploy 1795534720850", PROTO_CMD_BREAK);
    ck_assert(req.has_token && req.token == 1795534720850ULL);
    ck_error("BREAK", PROTO_ERR_BAD_ARGS);
    ck_error("BREAK deploy x", PROTO_ERR_BAD_ARGS);
}
END_TEST

START_TEST(auth)
{
    struct proto_req req;
    char longest[300];

    ck_request("AUTH alice s3cr3t!", PROTO_CMD_AUTH);
    ck_assert_uint_eq(req.user_len, 5);
    ck_assert_mem_eq(req.user, "alice", 5);
    ck_assert_uint_eq(req.password_len, 7);
    ck_assert_mem_eq(req.password, "s3cr3t!", 7);
    ck_assert_ptr_null(req.name);
    ck_request("auth ops.bot@db-1_x p:w=\"[]~", PROTO_CMD_AUTH);
    ck_assert_uint_eq(req.password_len, 8);
    ck_request("AUTH\ta\t\tb\r", PROTO_CMD_AUTH);
    ck_assert_uint_eq(req.password_len, 1);
    /* The longest user and password: the line fits the smallest max_line, 256. */
    snprintf(longest, sizeof(longest), "AUTH %064d %0128d", 1, 2);
    ck_assert_uint_le(strlen(longest), 256);
    ck_assert_int_eq(proto_parse(longest, strlen(longest), &req), PROTO_REQUEST);
    ck_assert_uint_eq(req.user_len, 64);
    ck_assert_uint_eq(req.password_len, 128);
    snprintf(longest, sizeof(longest), "AUTH %065d x", 1);
    ck_assert_int_eq(proto_parse(longest, strlen(longest), &req), PROTO_ERROR);
    ck_assert_str_eq(req.errmsg, "a user name is 1-64 bytes of A-Z a-z 0-9 . _ @ -");
    snprintf(longest, sizeof(longest), "AUTH a %0129d", 1);
    ck_assert_int_eq(proto_parse(longest, strlen(longest), &req), PROTO_ERROR);
    ck_assert_str_eq(req.errmsg, "a password is 1-128 printable bytes without spaces");
    ck_error_msg("AUTH", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_error_msg("AUTH alice", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_error_msg("AUTH alice pass word", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    ck_error_msg("AUTH a:b pw", PROTO_ERR_BAD_ARGS,
                 "a user name is 1-64 bytes of A-Z a-z 0-9 . _ @ -");
    ck_error_msg("AUTH a/b pw", PROTO_ERR_BAD_ARGS,
                 "a user name is 1-64 bytes of A-Z a-z 0-9 . _ @ -");
    ck_error_msg("AUTH alice caf\xc3\xa9", PROTO_ERR_BAD_ARGS,
                 "a password is 1-128 printable bytes without spaces");
    ck_assert_int_eq(proto_parse("AUTH a p\0w", 10, &req), PROTO_ERROR);
    ck_assert_str_eq(req.errmsg, "a password is 1-128 printable bytes without spaces");
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_AUTH), "AUTH <user> <password>");
}
END_TEST

START_TEST(grace_and_resume)
{
    struct proto_req req;
    char line[128];

    ck_request("GRACE 5000", PROTO_CMD_GRACE);
    ck_assert_int_eq(req.grace_ms, 5000);
    ck_request("grace 100", PROTO_CMD_GRACE);
    ck_assert_int_eq(req.grace_ms, 100);
    /* The daemon's bound is a setting: the handler answers these. */
    ck_request("GRACE 99", PROTO_CMD_GRACE);
    ck_assert_int_eq(req.grace_ms, 99);
    ck_request("GRACE 3600001", PROTO_CMD_GRACE);
    ck_assert_int_eq(req.grace_ms, 3600001);
    ck_request("GRACE 3600002", PROTO_CMD_GRACE);
    ck_assert_int_eq(req.grace_ms, -1);
    ck_request("GRACE 99999999999999999999999", PROTO_CMD_GRACE);
    ck_assert_int_eq(req.grace_ms, -1);
    ck_request("GRACE 5s", PROTO_CMD_GRACE);
    ck_assert_int_eq(req.grace_ms, -1);
    ck_request("GRACE -1", PROTO_CMD_GRACE);
    ck_assert_int_eq(req.grace_ms, -1);
    ck_error_msg("GRACE", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_error_msg("GRACE 1 2", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);

    snprintf(line, sizeof(line), "RESUME 0123456789abcdef %s", "00112233445566778899aabbccddeeff");
    ck_assert_int_eq(proto_parse(line, strlen(line), &req), PROTO_REQUEST);
    ck_assert_int_eq(req.cmd, PROTO_CMD_RESUME);
    ck_assert_mem_eq(req.session, "0123456789abcdef", 16);
    ck_assert_mem_eq(req.secret, "00112233445566778899aabbccddeeff", 32);
    ck_error_msg("RESUME 0123456789ABCDEF 00112233445566778899aabbccddeeff", PROTO_ERR_BAD_ARGS,
                 "a session is 16 lower-case hex digits");
    ck_error_msg("RESUME 0123456789abcde 00112233445566778899aabbccddeeff", PROTO_ERR_BAD_ARGS,
                 "a session is 16 lower-case hex digits");
    ck_error_msg("RESUME 0123456789abcdef 00112233445566778899aabbccddeef", PROTO_ERR_BAD_ARGS,
                 "a secret is 32 lower-case hex digits");
    ck_error_msg("RESUME 0123456789abcdef 00112233445566778899aabbccddeefg", PROTO_ERR_BAD_ARGS,
                 "a secret is 32 lower-case hex digits");
    ck_error_msg("RESUME 0123456789abcdef", PROTO_ERR_BAD_ARGS, "missing argument");
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_GRACE), "GRACE <ms>");
    ck_assert_str_eq(proto_cmd_usage(PROTO_CMD_RESUME), "RESUME <session> <secret>");
    {
        char buf[64];

        ck_fmt(proto_fmt_ok2(buf, sizeof(buf), "0123456789abcdef", "2"),
               "OK 0123456789abcdef 2\n");
    }
}
END_TEST

START_TEST(user_valid)
{
    ck_assert_int_eq(proto_user_valid("alice", 5), 1);
    ck_assert_int_eq(proto_user_valid("a.b_c@d-e", 9), 1);
    ck_assert_int_eq(proto_user_valid("", 0), 0);
    ck_assert_int_eq(proto_user_valid("a:b", 3), 0);
    ck_assert_int_eq(proto_user_valid("a b", 3), 0);
    ck_assert_int_eq(proto_user_valid("a\0b", 3), 0);
}
END_TEST

START_TEST(cmd_words_parse_back)
{
    /* Every word in the table parses as its own command, with its minimum
     * number of arguments. */
    static const char *const args[] = { "", " x", " x 1", " x 1 100" };
    static const unsigned min_args[PROTO_CMD_COUNT] = {
#define X(id, word, mina, maxa, flags, usage, help) [PROTO_CMD_##id] = mina,
        PROTO_COMMANDS(X)
#undef X
    };

    for (int i = 0; i < PROTO_CMD_COUNT; i++) {
        struct proto_req req;
        char line[80];
        /* RESUME's arguments are hex of fixed lengths. */
        int n = snprintf(line, sizeof(line), "%s%s", proto_cmd_word((enum proto_cmd)i),
                         i == PROTO_CMD_RESUME ? " 0123456789abcdef "
                                                 "0123456789abcdef0123456789abcdef"
                                               : args[min_args[i]]);

        ck_assert_int_eq(proto_parse(line, (size_t)n, &req), PROTO_REQUEST);
        ck_assert_int_eq(req.cmd, i);
    }
}
END_TEST

START_TEST(err_codes)
{
    ck_assert_str_eq(proto_err_code(PROTO_ERR_BAD_COMMAND), "BAD_COMMAND");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_BAD_ARGS), "BAD_ARGS");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_BAD_NAME), "BAD_NAME");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_LINE_TOO_LONG), "LINE_TOO_LONG");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_NOT_HELD), "NOT_HELD");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_LIMIT), "LIMIT");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_UNAVAILABLE), "UNAVAILABLE");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_INTERNAL), "INTERNAL");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_CONFLICT), "CONFLICT");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_NOAUTH), "NOAUTH");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_AUTH_FAILED), "AUTH_FAILED");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_DENIED), "DENIED");
    ck_assert_str_eq(proto_err_code(PROTO_ERR_COUNT), "INTERNAL");
}
END_TEST

/* ------------------------------------------------------------ replies */

START_TEST(fmt_granted)
{
    char buf[PROTO_REPLY_MAX];
    static const char line[] = "backupXXX";

    ck_fmt(proto_fmt_granted(buf, sizeof(buf), line, 6, 1795315654736114539ULL),
           "OK backup 1795315654736114539\n");
    ck_fmt(proto_fmt_granted(buf, sizeof(buf), "a", 1, 0), "OK a 0\n");
    ck_fmt(proto_fmt_granted(buf, sizeof(buf), "a", 1, UINT64_MAX), "OK a 18446744073709551615\n");
}
END_TEST

START_TEST(fmt_word_name)
{
    char buf[PROTO_REPLY_MAX];

    ck_fmt(proto_fmt_word_name(buf, sizeof(buf), "OK", "backup", 6), "OK backup\n");
    ck_fmt(proto_fmt_word_name(buf, sizeof(buf), "BUSY", "a:b", 3), "BUSY a:b\n");
    /* The length, not a NUL, ends the name. */
    ck_fmt(proto_fmt_word_name(buf, sizeof(buf), "TIMEOUT", "abc def", 3), "TIMEOUT abc\n");
}
END_TEST

START_TEST(fmt_err)
{
    char buf[PROTO_REPLY_MAX];

    ck_fmt(proto_fmt_err(buf, sizeof(buf), PROTO_ERR_NOT_HELD,
                         "this connection does not hold that lock"),
           "ERR NOT_HELD this connection does not hold that lock\n");
    ck_fmt(proto_fmt_err(buf, sizeof(buf), PROTO_ERR_LINE_TOO_LONG, "x"), "ERR LINE_TOO_LONG x\n");
    ck_fmt(proto_fmt_err(buf, sizeof(buf), PROTO_ERR_CONFLICT, "x"), "ERR CONFLICT x\n");
}
END_TEST

START_TEST(fmt_err_from_parse)
{
    struct proto_req req;
    char buf[PROTO_REPLY_MAX];

    /* The example of PROTOCOL.md, end to end through the formatter. */
    ck_error("lock bad/name", PROTO_ERR_BAD_NAME);
    ck_fmt(proto_fmt_err(buf, sizeof(buf), req.err, req.errmsg),
           "ERR BAD_NAME names are 1-200 bytes of A-Z a-z 0-9 . _ : @ -, not . or ..\n");
}
END_TEST

START_TEST(fmt_lost)
{
    char buf[PROTO_REPLY_MAX];

    ck_fmt(proto_fmt_lost(buf, sizeof(buf), "backup", 42, "session-expired"),
           "LOST backup 42 session-expired\n");
}
END_TEST

START_TEST(fmt_checked)
{
    char buf[PROTO_REPLY_MAX];

    ck_fmt(proto_fmt_checked(buf, sizeof(buf), "backup", 6, 42, 8999),
           "OK backup 42 8999\n");
    ck_fmt(proto_fmt_checked(buf, sizeof(buf), "b", 1, UINT64_MAX, PROTO_SAFE_MAX),
           "OK b 18446744073709551615 86400000\n");
    ck_assert_int_eq(proto_fmt_checked(buf, 10, "a", 1, 1, 0), 9);    /* "OK a 1 0\n" */
    ck_assert_int_eq(proto_fmt_checked(buf, 9, "a", 1, 1, 0), -1);
}
END_TEST

START_TEST(fmt_too_small)
{
    char buf[32];

    /* "OK a 7\n" is 7 bytes and needs 8 with its NUL. */
    ck_assert_int_eq(proto_fmt_granted(buf, 8, "a", 1, 7), 7);
    ck_assert_str_eq(buf, "OK a 7\n");
    ck_assert_int_eq(proto_fmt_granted(buf, 7, "a", 1, 7), -1);
    ck_assert_int_eq(proto_fmt_granted(buf, 0, "a", 1, 7), -1);
    /* "BUSY a\n" */
    ck_assert_int_eq(proto_fmt_word_name(buf, 8, "BUSY", "a", 1), 7);
    ck_assert_int_eq(proto_fmt_word_name(buf, 7, "BUSY", "a", 1), -1);
    /* "ERR LIMIT x\n" */
    ck_assert_int_eq(proto_fmt_err(buf, 13, PROTO_ERR_LIMIT, "x"), 12);
    ck_assert_int_eq(proto_fmt_err(buf, 12, PROTO_ERR_LIMIT, "x"), -1);
    /* "LOST a 1 r\n" */
    ck_assert_int_eq(proto_fmt_lost(buf, 12, "a", 1, "r"), 11);
    ck_assert_int_eq(proto_fmt_lost(buf, 11, "a", 1, "r"), -1);
}
END_TEST

START_TEST(fmt_longest_reply_fits)
{
    char buf[PROTO_REPLY_MAX];
    char name[PROTO_NAME_MAX];
    int n;

    /* PROTO_REPLY_MAX must hold any reply with a maximal name and token. */
    memset(name, 'n', sizeof(name));
    n = proto_fmt_granted(buf, sizeof(buf), name, sizeof(name), UINT64_MAX);
    ck_assert_int_eq(n, 3 + PROTO_NAME_MAX + 1 + 20 + 1);
    ck_assert_int_eq(buf[n - 1], '\n');
    ck_assert_int_gt(proto_fmt_word_name(buf, sizeof(buf), "TIMEOUT", name, sizeof(name)), 0);
}
END_TEST

/* ------------------------------------------------------------ sets */

/* names[i] of the last parse must be exactly `want`. */
#define ck_set_name(i, want)                                           \
    do {                                                               \
        ck_assert_uint_eq(req.names[i].len, strlen(want));             \
        ck_assert_mem_eq(req.names[i].p, want, strlen(want));          \
    } while (0)

START_TEST(set_lock)
{
    struct proto_req req;

    ck_request("LOCK c,a,b 1500 shared", PROTO_CMD_LOCK);
    ck_name("c,a,b");                  /* the list as given, for the replies */
    ck_assert_uint_eq(req.nnames, 3);
    ck_set_name(0, "c");               /* in the order given */
    ck_set_name(1, "a");
    ck_set_name(2, "b");
    ck_assert_int_eq(req.wait_ms, 1500);
    ck_assert_int_eq(req.mode, PROTO_MODE_SHARED);

    ck_request("TRYLOCK x.1,x.2 limit=3 delay=10", PROTO_CMD_TRYLOCK);
    ck_assert_uint_eq(req.nnames, 2);
    ck_set_name(1, "x.2");
    ck_assert_uint_eq(req.limit, 3);
    ck_assert_int_eq(req.delay_ms, 10);

    ck_request("UNLOCK a,b", PROTO_CMD_UNLOCK);
    ck_assert_uint_eq(req.nnames, 2);
    ck_assert_int_eq(req.has_token, 0);
}
END_TEST

START_TEST(set_single_name)
{
    struct proto_req req;

    /* One name is a set of one: names[0] is the name. */
    ck_request("LOCK backup", PROTO_CMD_LOCK);
    ck_assert_uint_eq(req.nnames, 1);
    ck_set_name(0, "backup");
    ck_request("UNLOCK backup 7", PROTO_CMD_UNLOCK);
    ck_assert_uint_eq(req.nnames, 1);
    ck_request("STATUS backup", PROTO_CMD_STATUS);
    ck_assert_uint_eq(req.nnames, 0);  /* not a set command */
    ck_request("PING", PROTO_CMD_PING);
    ck_assert_uint_eq(req.nnames, 0);
}
END_TEST

START_TEST(set_bounds)
{
    struct proto_req req;

    ck_request("LOCK a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p", PROTO_CMD_LOCK);
    ck_assert_uint_eq(req.nnames, PROTO_SET_MAX);
    ck_set_name(15, "p");
    ck_error_msg("LOCK a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", PROTO_ERR_BAD_ARGS,
                 "a set has at most 16 names");
}
END_TEST

START_TEST(set_bad)
{
    struct proto_req req;

    ck_error_msg("LOCK a,b,a", PROTO_ERR_BAD_ARGS, "a name is given twice in the set");
    ck_error_msg("UNLOCK a,a", PROTO_ERR_BAD_ARGS, "a name is given twice in the set");
    ck_error_msg("LOCK a,,b", PROTO_ERR_BAD_ARGS, "a set of names has no empty element");
    ck_error_msg("LOCK a,", PROTO_ERR_BAD_ARGS, "a set of names has no empty element");
    ck_error_msg("LOCK ,a", PROTO_ERR_BAD_ARGS, "a set of names has no empty element");
    ck_error_msg("LOCK ,", PROTO_ERR_BAD_ARGS, "a set of names has no empty element");
    ck_error("LOCK a,..", PROTO_ERR_BAD_NAME);
    ck_error_msg("LOCK a,b ttl=1000", PROTO_ERR_BAD_ARGS,
                 "a set of locks cannot be a lease (ttl=)");
    ck_error_msg("TRYLOCK a,b ttl=1000", PROTO_ERR_BAD_ARGS,
                 "a set of locks cannot be a lease (ttl=)");
    ck_error_msg("UNLOCK a,b 5", PROTO_ERR_BAD_ARGS, "UNLOCK of a set takes no token");
    /* The shape is checked first, as for one name. */
    ck_error_msg("UNLOCK a,b 5 6", PROTO_ERR_BAD_ARGS, MSG_TOO_MANY);
    /* One name keeps its lease and its token. */
    ck_request("LOCK a ttl=1000", PROTO_CMD_LOCK);
    ck_request("UNLOCK a 5", PROTO_CMD_UNLOCK);
}
END_TEST

START_TEST(set_reset_between_parses)
{
    struct proto_req req;

    ck_request("LOCK a,b,c", PROTO_CMD_LOCK);
    ck_request("LOCK d", PROTO_CMD_LOCK);
    ck_assert_uint_eq(req.nnames, 1);
    ck_set_name(0, "d");
}
END_TEST

START_TEST(fmt_granted_set)
{
    char buf[PROTO_REPLY_MAX];
    uint64_t tokens[] = { 7, 0, UINT64_MAX };

    ck_fmt(proto_fmt_granted_set(buf, sizeof(buf), "c,a,bb", 6, tokens, 3),
           "OK c,a,bb 7,0,18446744073709551615\n");
    ck_assert_int_eq(proto_fmt_granted_set(buf, 10, "c,a,bb", 6, tokens, 3), -1);
}
END_TEST

START_TEST(fmt_longest_set_reply_fits)
{
    static char buf[PROTO_SET_REPLY_MAX], list[PROTO_SET_MAX * (PROTO_NAME_MAX + 1)];
    uint64_t tokens[PROTO_SET_MAX];
    int n;

    /* PROTO_SET_REPLY_MAX holds 16 maximal names and tokens. */
    memset(list, 'n', sizeof(list));
    for (unsigned i = 0; i < PROTO_SET_MAX; i++) {
        tokens[i] = UINT64_MAX;
        if (i)
            list[i * (PROTO_NAME_MAX + 1) - 1] = ',';
    }
    n = proto_fmt_granted_set(buf, sizeof(buf), list, sizeof(list) - 1, tokens, PROTO_SET_MAX);
    ck_assert_int_eq(n, 3 + (int)sizeof(list) - 1 + 1 + PROTO_SET_MAX * 21 - 1 + 1);
    ck_assert_int_eq(buf[n - 1], '\n');
    ck_assert_int_gt(proto_fmt_word_name(buf, sizeof(buf), "TIMEOUT", list, sizeof(list) - 1), 0);
}
END_TEST

START_TEST(fmt_one_word_lines)
{
    char buf[PROTO_REPLY_MAX];

    ck_fmt(proto_fmt_word(buf, sizeof(buf), "PONG"), "PONG\n");
    ck_fmt(proto_fmt_word(buf, sizeof(buf), "END"), "END\n");
    ck_fmt(proto_fmt_more(buf, sizeof(buf), 12), "MORE 12\n");
    ck_fmt(proto_fmt_stat(buf, sizeof(buf), "grants", "7"), "STAT grants 7\n");
    ck_fmt(proto_fmt_help(buf, sizeof(buf), PROTO_CMD_PING), "HELP PING - answer PONG\n");
    ck_assert_int_eq(proto_fmt_word(buf, 5, "PONG"), -1);
}
END_TEST

START_TEST(fmt_help_every_command)
{
    char buf[PROTO_REPLY_MAX];

    for (int i = 0; i < PROTO_CMD_COUNT; i++) {
        int n = proto_fmt_help(buf, sizeof(buf), (enum proto_cmd)i);

        ck_assert_int_gt(n, 0);
        ck_assert_int_eq(strncmp(buf, "HELP ", 5), 0);
        ck_assert_int_eq(buf[n - 1], '\n');
    }
}
END_TEST

START_TEST(fmt_status_lines)
{
    char buf[PROTO_INFO_MAX];
    struct proto_info in = { .name = "db", .state = PROTO_HELD, .daemon = "h-1-ab",
                             .holder = "127.0.0.1:5", .has_token = 1, .token = 9,
                             .since_ms = 1700, .waiters = 2, .queue = 3, .lease_ms = -1 };

    ck_fmt(proto_fmt_status(buf, sizeof(buf), &in),
           "STATUS db held holder=h-1-ab/127.0.0.1:5 token=9 since=1700 waiters=2 queue=3\n");
    in.mode = PROTO_MODE_LIMIT;
    in.limit = 4;
    in.holders = 2;
    in.delay_ms = 30;
    in.lease_ms = 500;
    in.recipe = "nonfair";
    in.label = "deploy";
    ck_fmt(proto_fmt_status(buf, sizeof(buf), &in),
           "STATUS db held holder=h-1-ab/127.0.0.1:5 token=9 since=1700 waiters=2 queue=3 "
           "mode=limit limit=4 holders=2 delay=30 lease=500 recipe=nonfair label=deploy\n");
    /* A session's detached hold: its grace left, after lease= and before recipe=. */
    in.detached_ms = 4200;
    ck_fmt(proto_fmt_status(buf, sizeof(buf), &in),
           "STATUS db held holder=h-1-ab/127.0.0.1:5 token=9 since=1700 waiters=2 queue=3 "
           "mode=limit limit=4 holders=2 delay=30 lease=500 detached=4200 recipe=nonfair "
           "label=deploy\n");
    /* Held through another daemon: its token is not known here. */
    in = (struct proto_info){ .name = "db", .state = PROTO_HELD, .holder = "d2/c", .since_ms = -1,
                              .mode = PROTO_MODE_SHARED, .holders = 3, .queue = 3,
                              .lease_ms = -1 };
    ck_fmt(proto_fmt_status(buf, sizeof(buf), &in),
           "STATUS db held holder=d2/c token=- since=- waiters=0 queue=3 mode=shared "
           "holders=3\n");
    in = (struct proto_info){ .name = "db", .state = PROTO_FREE, .holder = "x", .has_token = 1,
                              .since_ms = 5, .waiters = 1, .queue = 1, .lease_ms = -1 };
    ck_fmt(proto_fmt_status(buf, sizeof(buf), &in),
           "STATUS db free holder=- token=- since=- waiters=1 queue=1\n");
    ck_assert_int_eq(proto_fmt_status(buf, 20, &in), -1);
}
END_TEST

START_TEST(fmt_lock_and_holder_lines)
{
    char buf[PROTO_INFO_MAX];
    struct proto_info in = { .name = "db", .state = PROTO_HELD, .mode = PROTO_MODE_SHARED,
                             .daemon = "h-1-ab", .holder = "unix", .label = "web",
                             .has_token = 1, .token = 9, .since_ms = 1700, .holders = 2,
                             .waiters = 1, .lease_ms = 250 };

    ck_fmt(proto_fmt_lock(buf, sizeof(buf), &in),
           "LOCK db shared holder=h-1-ab/unix label=web token=9 since=1700 holders=2 waiters=1 "
           "lease=250\n");
    ck_fmt(proto_fmt_holder(buf, sizeof(buf), &in),
           "HOLDER db shared held holder=h-1-ab/unix label=web token=9 since=1700 lease=250\n");
    /* An abandoned hold kept for its lock-delay: delay= before lease=, as in STATUS. */
    in.delay_ms = 1500;
    ck_fmt(proto_fmt_lock(buf, sizeof(buf), &in),
           "LOCK db shared holder=h-1-ab/unix label=web token=9 since=1700 holders=2 waiters=1 "
           "delay=1500 lease=250\n");
    in.detached_ms = 900;
    ck_fmt(proto_fmt_lock(buf, sizeof(buf), &in),
           "LOCK db shared holder=h-1-ab/unix label=web token=9 since=1700 holders=2 waiters=1 "
           "delay=1500 lease=250 detached=900\n");
    in.detached_ms = 0;
    in = (struct proto_info){ .name = "db", .state = PROTO_FREE, .mode = PROTO_MODE_LIMIT,
                              .limit = 3, .since_ms = -1, .waiters = 4, .lease_ms = -1,
                              .recipe = "nonfair" };
    ck_fmt(proto_fmt_lock(buf, sizeof(buf), &in),
           "LOCK db limit=3 holder=- label=- token=- since=- holders=0 waiters=4 "
           "recipe=nonfair\n");
    /* The longest wait of its waiters, right after waiters= (0 ms is a wait too). */
    in.has_waited = 1;
    ck_fmt(proto_fmt_lock(buf, sizeof(buf), &in),
           "LOCK db limit=3 holder=- label=- token=- since=- holders=0 waiters=4 waited=0 "
           "recipe=nonfair\n");
    in.waited_ms = 61000;
    in.delay_ms = 20;
    ck_fmt(proto_fmt_lock(buf, sizeof(buf), &in),
           "LOCK db limit=3 holder=- label=- token=- since=- holders=0 waiters=4 waited=61000 "
           "delay=20 recipe=nonfair\n");
    in = (struct proto_info){ .name = "db", .state = PROTO_QUEUED, .holder = "d2/c",
                              .label = "", .since_ms = 12, .lease_ms = -1 };
    ck_fmt(proto_fmt_holder(buf, sizeof(buf), &in),
           "HOLDER db exclusive queued holder=d2/c label=- token=- since=12\n");
}
END_TEST

START_TEST(fmt_event_lines)
{
    char buf[PROTO_INFO_MAX];
    struct proto_info in = { .name = "db", .state = PROTO_FREE };

    ck_fmt(proto_fmt_event(buf, sizeof(buf), &in), "EVENT db free\n");
    in.state = PROTO_UNAVAILABLE;
    ck_fmt(proto_fmt_event(buf, sizeof(buf), &in), "EVENT db unavailable\n");
    in = (struct proto_info){ .name = "db", .state = PROTO_HELD, .daemon = "h-1", .holder = "c",
                              .has_token = 1, .token = 4, .holders = 1 };
    ck_fmt(proto_fmt_event(buf, sizeof(buf), &in),
           "EVENT db held 4 holders=1 label=- holder=h-1/c mode=exclusive\n");
    in = (struct proto_info){ .name = "db", .state = PROTO_HELD, .holder = "h-2/c",
                              .label = "web", .holders = 2, .mode = PROTO_MODE_LIMIT,
                              .limit = 5 };
    ck_fmt(proto_fmt_event(buf, sizeof(buf), &in),
           "EVENT db held - holders=2 label=web holder=h-2/c mode=limit=5\n");
}
END_TEST

START_TEST(cmd_flags)
{
    /* Before AUTH: PING, HELP, QUIT and AUTH, nothing else. */
    for (int i = 0; i < PROTO_CMD_COUNT; i++) {
        enum proto_cmd c = (enum proto_cmd)i;
        int anon = c == PROTO_CMD_PING || c == PROTO_CMD_HELP || c == PROTO_CMD_QUIT ||
                   c == PROTO_CMD_AUTH;
        unsigned f = proto_cmd_flags(c);

        ck_assert_int_eq(!!(f & PROTO_F_ANON), anon);
        /* A name check needs a name; listing ones filter by glob. */
        if (f & (PROTO_F_NAMES | PROTO_F_BREAK))
            ck_assert(proto_cmd_takes(c, PROTO_ARG_NAME) || proto_cmd_takes(c, PROTO_ARG_NAMES));
        if (f & PROTO_F_LISTS)
            ck_assert(proto_cmd_takes(c, PROTO_ARG_GLOB));
        if (f & PROTO_F_OWN)
            ck_assert(proto_cmd_takes(c, PROTO_ARG_TOKEN));
    }
    ck_assert_uint_eq(proto_cmd_flags(PROTO_CMD_BREAK), PROTO_F_BREAK);
    ck_assert_uint_eq(proto_cmd_flags(PROTO_CMD_UNLOCK), PROTO_F_NAMES | PROTO_F_OWN);
    ck_assert(proto_cmd_takes(PROTO_CMD_LOCK, PROTO_ARG_OPTIONS));
    ck_assert(!proto_cmd_takes(PROTO_CMD_PING, PROTO_ARG_NAME));
    ck_assert_uint_eq(proto_cmd_flags(PROTO_CMD_COUNT), 0);
    ck_assert_int_eq(proto_cmd_args(PROTO_CMD_COUNT)[0], PROTO_ARG_END);
}
END_TEST

static Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *tc;

    tc = tcase_create("commands");
    tcase_add_test(tc, lock_without_wait);
    tcase_add_test(tc, lock_with_wait);
    tcase_add_test(tc, lock_wait_zero);
    tcase_add_test(tc, lock_wait_max);
    tcase_add_test(tc, lock_wait_over_max);
    tcase_add_test(tc, lock_wait_not_digits);
    tcase_add_test(tc, trylock);
    tcase_add_test(tc, unlock);
    tcase_add_test(tc, ping_quit);
    tcase_add_test(tc, words_case_insensitive);
    tcase_add_test(tc, names_case_sensitive);
    suite_add_tcase(s, tc);

    tc = tcase_create("separators");
    tcase_add_test(tc, spaces_and_tabs);
    tcase_add_test(tc, trailing_cr);
    tcase_add_test(tc, cr_elsewhere_is_data);
    tcase_add_test(tc, other_whitespace_is_data);
    tcase_add_test(tc, blank_lines);
    tcase_add_test(tc, len_bounds_the_line);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, bad_command);
    tcase_add_test(tc, nul_in_command_word);
    tcase_add_test(tc, missing_args);
    tcase_add_test(tc, too_many_args);
    tcase_add_test(tc, name_lengths);
    tcase_add_test(tc, name_punctuation);
    tcase_add_test(tc, name_dots);
    tcase_add_test(tc, name_bad_bytes);
    tcase_add_test(tc, name_checked_before_wait);
    tcase_add_test(tc, name_valid_direct);
    tcase_add_test(tc, name_points_into_line);
    tcase_add_test(tc, req_reset_between_parses);
    suite_add_tcase(s, tc);

    tc = tcase_create("options");
    tcase_add_test(tc, mode_default_exclusive);
    tcase_add_test(tc, lock_shared);
    tcase_add_test(tc, lock_limit);
    tcase_add_test(tc, trylock_options);
    tcase_add_test(tc, options_case_insensitive);
    tcase_add_test(tc, options_separators);
    tcase_add_test(tc, limit_bounds);
    tcase_add_test(tc, limit_malformed);
    tcase_add_test(tc, option_unknown);
    tcase_add_test(tc, wait_slot_word_is_bad_wait);
    tcase_add_test(tc, option_twice);
    tcase_add_test(tc, shared_with_limit);
    tcase_add_test(tc, number_where_option_expected);
    tcase_add_test(tc, options_checked_after_name_and_wait);
    tcase_add_test(tc, options_not_taken);
    tcase_add_test(tc, options_bounded);
    tcase_add_test(tc, options_reset_between_parses);
    suite_add_tcase(s, tc);

    tc = tcase_create("leases");
    tcase_add_test(tc, ttl_none_by_default);
    tcase_add_test(tc, ttl_option);
    tcase_add_test(tc, ttl_bounds);
    tcase_add_test(tc, ttl_malformed);
    tcase_add_test(tc, ttl_with_mode);
    tcase_add_test(tc, ttl_twice);
    tcase_add_test(tc, unlock_token);
    tcase_add_test(tc, unlock_token_bad);
    tcase_add_test(tc, unlock_keep);
    tcase_add_test(tc, renew);
    tcase_add_test(tc, renew_bad);
    tcase_add_test(tc, lease_fields_reset_between_parses);
    tcase_add_test(tc, check);
    tcase_add_test(tc, delay_option);
    suite_add_tcase(s, tc);

    tc = tcase_create("tables");
    tcase_add_test(tc, cmd_words);
    tcase_add_test(tc, cmd_usage_and_help);
    tcase_add_test(tc, cmd_words_parse_back);
    tcase_add_test(tc, client_label);
    tcase_add_test(tc, locks_glob);
    tcase_add_test(tc, watch);
    tcase_add_test(tc, auth);
    tcase_add_test(tc, grace_and_resume);
    tcase_add_test(tc, user_valid);
    tcase_add_test(tc, err_codes);
    tcase_add_test(tc, cmd_flags);
    suite_add_tcase(s, tc);

    tc = tcase_create("replies");
    tcase_add_test(tc, fmt_checked);
    tcase_add_test(tc, fmt_granted);
    tcase_add_test(tc, fmt_word_name);
    tcase_add_test(tc, fmt_err);
    tcase_add_test(tc, fmt_err_from_parse);
    tcase_add_test(tc, fmt_lost);
    tcase_add_test(tc, fmt_too_small);
    tcase_add_test(tc, fmt_longest_reply_fits);
    tcase_add_test(tc, fmt_granted_set);
    tcase_add_test(tc, fmt_longest_set_reply_fits);
    tcase_add_test(tc, fmt_one_word_lines);
    tcase_add_test(tc, fmt_help_every_command);
    tcase_add_test(tc, fmt_status_lines);
    tcase_add_test(tc, fmt_lock_and_holder_lines);
    tcase_add_test(tc, fmt_event_lines);
    suite_add_tcase(s, tc);

    tc = tcase_create("sets");
    tcase_add_test(tc, set_lock);
    tcase_add_test(tc, set_single_name);
    tcase_add_test(tc, set_bounds);
    tcase_add_test(tc, set_bad);
    tcase_add_test(tc, set_reset_between_parses);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(proto_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
