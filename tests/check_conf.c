/*
 * check_conf.c - settings: defaults, every key through the INI loader
 * (strings and files), validation limits, error messages with their line,
 * command-line style settings_set(), the listen address parser, and the
 * table of rows with the SIGHUP helpers that walk it.
 */
#include "settings.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static struct settings s;
static char err[1024];

static void setup(void)
{
    ck_assert_int_eq(settings_init(&s), 0);
    memset(err, 0, sizeof(err));
}

static void teardown(void)
{
    settings_free(&s);
}

/* Loads `text` as source "t"; asserts success. */
static void load_ok(const char *text)
{
    int rc = settings_load_string(&s, text, "t", err, sizeof(err));

    ck_assert_msg(rc == 0, "loading \"%s\" failed: %s", text, err);
}

/* Loads `text` as source "t"; asserts failure with exactly `want`. */
#define load_fails(text, want)                                               \
    do {                                                                     \
        ck_assert_int_eq(settings_load_string(&s, (text), "t", err, sizeof(err)), -1); \
        ck_assert_str_eq(err, want);                                         \
    } while (0)

/* settings_set() must accept / refuse a value. */
#define set_ok(sec, key, val)                                                \
    ck_assert_msg(settings_set(&s, sec, key, val, err, sizeof(err)) == 0,    \
                  "%s.%s = '%s' refused: %s", sec, key, val, err)
#define set_fails(sec, key, val)                                             \
    ck_assert_msg(settings_set(&s, sec, key, val, err, sizeof(err)) == -1,   \
                  "%s.%s = '%s' accepted", sec, key, val)

/* ------------------------------------------------------------ defaults */

START_TEST(defaults)
{
    ck_assert_str_eq(s.listen, SETTINGS_LISTEN_DEFAULT);
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
    ck_assert_ptr_null(s.unix_socket);
    ck_assert_uint_eq(s.unix_socket_mode, 0660);
    ck_assert_uint_eq(s.max_clients, 4096);
    ck_assert_uint_eq(s.max_line, 1024);
    ck_assert_uint_eq(s.max_locks_per_client, 256);
    /* Sessions: a minute of grace at most, caps as the leases'. */
    ck_assert_uint_eq(s.max_grace_ms, 60000);
    ck_assert_uint_eq(s.max_sessions, 10000);
    ck_assert_uint_eq(s.max_sessions_per_user, 1000);
    /* As the TLS handshake's deadline; the per-address caps: tls only. */
    ck_assert_uint_eq(s.login_timeout_ms, 10000);
    ck_assert_uint_eq(s.max_clients_per_address, 0);
    ck_assert_uint_eq(s.tls_max_handshakes_per_address, 32);
    /* A dead client host is noticed within a minute: 30 + 3 * 10 s. */
    ck_assert_uint_eq(s.tcp_keepalive_idle_s, 30);
    ck_assert_uint_eq(s.tcp_keepalive_interval_s, 10);
    ck_assert_uint_eq(s.tcp_keepalive_count, 3);
    ck_assert_uint_eq(s.tcp_user_timeout_ms, 60000);
    ck_assert_ptr_null(s.zk_hosts);
    ck_assert_str_eq(s.zk_root, "/lockbroker");
    ck_assert_uint_eq(s.zk_session_timeout_ms, 10000);
    ck_assert_uint_eq(s.zk_tick_ms, 2000);
    ck_assert_int_eq(s.log_level, LOG_LVL_INFO);
    ck_assert_uint_eq(s.log_holds, 1);
    ck_assert_int_eq(s.tls_client_certs, TLS_CERTS_NONE);
}

START_TEST(tls_client_certs_words)
{
    ck_assert_int_eq(settings_set(&s, "tls", "client_certs", "Required", err, sizeof(err)), 0);
    ck_assert_int_eq(s.tls_client_certs, TLS_CERTS_REQUIRED);
    ck_assert_int_eq(settings_set(&s, "tls", "client_certs", "optional", err, sizeof(err)), 0);
    ck_assert_int_eq(s.tls_client_certs, TLS_CERTS_OPTIONAL);
    ck_assert_int_eq(settings_set(&s, "tls", "client_certs", "yes", err, sizeof(err)), -1);
    ck_assert_str_eq(err, "client_certs: 'yes' is not one of none, optional, required");
    ck_assert_int_eq(s.tls_client_certs, TLS_CERTS_OPTIONAL);
    ck_assert_str_eq(settings_client_certs_name((enum tls_client_certs)3), "?");
}
END_TEST

START_TEST(free_clears)
{
    settings_free(&s);
    ck_assert_ptr_null(s.listen);
    ck_assert_ptr_null(s.zk_root);
    settings_free(&s);                    /* twice is harmless */
    ck_assert_int_eq(settings_init(&s), 0);
}
END_TEST

START_TEST(log_level_names)
{
    ck_assert_str_eq(settings_log_level_name(LOG_LVL_ERROR), "error");
    ck_assert_str_eq(settings_log_level_name(LOG_LVL_WARN), "warn");
    ck_assert_str_eq(settings_log_level_name(LOG_LVL_INFO), "info");
    ck_assert_str_eq(settings_log_level_name(LOG_LVL_DEBUG), "debug");
    ck_assert_str_eq(settings_log_level_name((enum log_level)4), "?");
}
END_TEST

/* ------------------------------------------------------------ loading */

START_TEST(load_every_key)
{
    load_ok("[server]\n"
            "listen = [::1]:7500\n"
            "unix_socket = /run/lockbroker.sock\n"
            "unix_socket_mode = 0600\n"
            "max_clients = 10\n"
            "max_line = 300\n"
            "max_locks_per_client = 3\n"
            "[zookeeper]\n"
            "hosts = zk1:2181,zk2:2181\n"
            "root = /app/locks\n"
            "session_timeout_ms = 4000\n"
            "[log]\n"
            "level = debug\n");
    ck_assert_str_eq(s.listen, "[::1]:7500");
    ck_assert_str_eq(s.unix_socket, "/run/lockbroker.sock");
    ck_assert_uint_eq(s.unix_socket_mode, 0600);
    ck_assert_uint_eq(s.max_clients, 10);
    ck_assert_uint_eq(s.max_line, 300);
    ck_assert_uint_eq(s.max_locks_per_client, 3);
    ck_assert_str_eq(s.zk_hosts, "zk1:2181,zk2:2181");
    ck_assert_str_eq(s.zk_root, "/app/locks");
    ck_assert_uint_eq(s.zk_session_timeout_ms, 4000);
    ck_assert_int_eq(s.log_level, LOG_LVL_DEBUG);
}
END_TEST

START_TEST(load_empty)
{
    load_ok("");
    load_ok("; only a comment\n# another\n\n");
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
    ck_assert_uint_eq(s.max_line, 1024);
}
END_TEST

START_TEST(load_keeps_unset_defaults)
{
    load_ok("[server]\nmax_line = 2048\n");
    ck_assert_uint_eq(s.max_line, 2048);
    ck_assert_uint_eq(s.max_clients, 4096);
    ck_assert_str_eq(s.zk_root, "/lockbroker");
}
END_TEST

START_TEST(load_syntax_variants)
{
    /* Spaces around '=', inline comments, CRLF line ends, repeated sections. */
    load_ok("[server]\r\n"
            "  max_clients=7\r\n"
            "max_line   =   512   ; inline comment\r\n"
            "[log]\n"
            "level = WARN\n"
            "[server]\n"
            "max_locks_per_client = 9\n");
    ck_assert_uint_eq(s.max_clients, 7);
    ck_assert_uint_eq(s.max_line, 512);
    ck_assert_uint_eq(s.max_locks_per_client, 9);
    ck_assert_int_eq(s.log_level, LOG_LVL_WARN);
}
END_TEST

/* Documented in lockbrokerd.conf(5): a key given twice is an error naming
 * both lines (it used to be last-wins, which hid a forgotten old line). */
START_TEST(load_key_given_twice)
{
    load_fails("[server]\nmax_clients = 5\nmax_clients = 6\n",
               "t:3: 'max_clients' in [server] is set twice (lines 2 and 3); keep one");
    /* In a section given twice too. */
    load_fails("[server]\nlisten = 127.0.0.1:1\n[log]\nlevel = warn\n[server]\n"
               "listen = 127.0.0.1:2\n",
               "t:6: 'listen' in [server] is set twice (lines 2 and 6); keep one");
    /* The same value twice, or an empty one, is a repeat all the same. */
    load_fails("[zookeeper]\nhosts =\n\nhosts =\n",
               "t:4: 'hosts' in [zookeeper] is set twice (lines 2 and 4); keep one");
    /* The same key in another section is another setting. */
    load_ok("[server]\nlisten = 127.0.0.1:1\n[tls]\nlisten = 127.0.0.1:0\ncert_file = a\n");
    ck_assert_str_eq(s.listen, "127.0.0.1:1");
    /* More value for a key (an indented line) is not a repeat... */
    load_ok("[server]\nmax_clients = 5\n  6\n");
    ck_assert_uint_eq(s.max_clients, 6);
    /* ...but the key written again after it is. */
    load_fails("[server]\nmax_clients = 5\n  6\nmax_clients = 7\n",
               "t:4: 'max_clients' in [server] is set twice (lines 2 and 4); keep one");
    /* A bad first line is reported, not the repeat. */
    load_fails("[server]\nmax_clients = 0\nmax_clients = 6\n",
               "t:2: max_clients: '0' is not an integer from 1 to 1000000");
}
END_TEST

START_TEST(load_over_earlier_load)
{
    load_ok("[zookeeper]\nhosts = a:1\n[server]\nunix_socket = /tmp/x\n");
    ck_assert_str_eq(s.zk_hosts, "a:1");
    /* Empty values switch them off again (embedded mode, no Unix socket). */
    load_ok("[zookeeper]\nhosts =\n[server]\nunix_socket =\n");
    ck_assert_ptr_null(s.zk_hosts);
    ck_assert_ptr_null(s.unix_socket);
}
END_TEST

START_TEST(sample_file_is_defaults)
{
    /* conf/lockbrokerd.conf shows every key with its default. */
    const char *srcdir = getenv("LB_SRCDIR");
    struct settings d;
    char path[4096];

    snprintf(path, sizeof(path), "%s/conf/lockbrokerd.conf", srcdir ? srcdir : ".");
    ck_assert_int_eq(settings_init(&d), 0);
    s.max_line = 5000;                    /* so that the file has to set them back */
    s.tcp_user_timeout_ms = 1;
    s.log_holds = 0;
    s.max_grace_ms = 1;
    s.max_sessions = 1;
    s.max_sessions_per_user = 1;
    ck_assert_msg(settings_load_file(&s, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(s.listen, d.listen);
    ck_assert_ptr_null(s.unix_socket);
    ck_assert_uint_eq(s.unix_socket_mode, d.unix_socket_mode);
    ck_assert_ptr_null(s.unix_socket_group);
    ck_assert_ptr_null(s.users_file);
    ck_assert_uint_eq(s.allow_anonymous, d.allow_anonymous);
    ck_assert_uint_eq(s.max_clients, d.max_clients);
    ck_assert_uint_eq(s.max_line, d.max_line);
    ck_assert_uint_eq(s.max_locks_per_client, d.max_locks_per_client);
    ck_assert_uint_eq(s.max_leases, d.max_leases);
    ck_assert_uint_eq(s.max_grace_ms, d.max_grace_ms);
    ck_assert_uint_eq(s.max_sessions, d.max_sessions);
    ck_assert_uint_eq(s.max_sessions_per_user, d.max_sessions_per_user);
    ck_assert_uint_eq(s.tcp_keepalive_idle_s, d.tcp_keepalive_idle_s);
    ck_assert_uint_eq(s.tcp_keepalive_interval_s, d.tcp_keepalive_interval_s);
    ck_assert_uint_eq(s.tcp_keepalive_count, d.tcp_keepalive_count);
    ck_assert_uint_eq(s.tcp_user_timeout_ms, d.tcp_user_timeout_ms);
    ck_assert_ptr_null(s.metrics_listen);
    ck_assert_ptr_null(s.tls_listen);
    ck_assert_ptr_null(s.tls_cert_file);
    ck_assert_ptr_null(s.tls_key_file);
    ck_assert_ptr_null(s.tls_ca_file);
    ck_assert_int_eq(s.tls_client_certs, d.tls_client_certs);
    ck_assert_ptr_null(s.zk_hosts);
    ck_assert_str_eq(s.zk_root, d.zk_root);
    ck_assert_uint_eq(s.zk_session_timeout_ms, d.zk_session_timeout_ms);
    ck_assert_uint_eq(s.zk_lease_skew_ms, d.zk_lease_skew_ms);
    ck_assert_uint_eq(s.zk_local_handoff, d.zk_local_handoff);
    ck_assert_int_eq(s.log_level, d.log_level);
    ck_assert_uint_eq(s.log_holds, d.log_holds);
    settings_free(&d);
}
END_TEST

/* ------------------------------------------------------------ errors with lines */

START_TEST(unknown_section)
{
    load_fails("[server]\nmax_clients = 5\n[bogus]\nx = 1\n", "t:4: unknown section [bogus]");
}
END_TEST

START_TEST(key_before_any_section)
{
    load_fails("max_clients = 5\n", "t:1: unknown section []");
}
END_TEST

START_TEST(unknown_keys)
{
    load_fails("[server]\nport = 1\n", "t:2: unknown key 'port' in [server]");
    load_fails("\n[zookeeper]\n\nservers = a:1\n", "t:4: unknown key 'servers' in [zookeeper]");
    load_fails("[log]\nfile = /tmp/x\n", "t:2: unknown key 'file' in [log]");
    /* Keys belong to one section only. */
    load_fails("[log]\nmax_line = 300\n", "t:2: unknown key 'max_line' in [log]");
    /* Names are case-sensitive. */
    load_fails("[Server]\nmax_line = 300\n", "t:2: unknown section [Server]");
    load_fails("[server]\nMAX_LINE = 300\n", "t:2: unknown key 'MAX_LINE' in [server]");
}
END_TEST

START_TEST(bad_value_names_its_line)
{
    load_fails("[server]\n"
               "max_clients = 10\n"
               "\n"
               "; a comment\n"
               "max_line = 255\n"
               "max_locks_per_client = 2\n",
               "t:5: max_line: '255' is not an integer from 256 to 1048576");
}
END_TEST

START_TEST(first_error_reported)
{
    load_fails("[server]\nmax_clients = 0\nmax_line = 1\n",
               "t:2: max_clients: '0' is not an integer from 1 to 1000000");
}
END_TEST

START_TEST(syntax_error)
{
    load_fails("[server]\nmax_line = 300\n[log\n", "t:3: syntax error");
    load_fails("[server] x\n[log]] ; y\n[\n", "t:3: syntax error");
}
END_TEST

/* inih calls a line without '=' a syntax error, or splits it at a ':' into
 * an unknown key ("listen 127.0.0.1" for "listen 127.0.0.1:7411"). */
START_TEST(line_without_equals)
{
    load_fails("[server]\nlisten 127.0.0.1\n",
               "t:2: 'listen 127.0.0.1' has no '=' (write key = value)");
    load_fails("[server]\nmax_clients = 5\nlisten 127.0.0.1:7411\n",
               "t:3: 'listen 127.0.0.1:7411' has no '=' (write key = value)");
    load_fails("[server]\nlisten: 127.0.0.1:7411\n",
               "t:2: 'listen: 127.0.0.1:7411' has no '=' (write key = value)");
    load_fails("[server]\nthis line has no equals sign\n",
               "t:2: 'this line has no equals sign' has no '=' (write key = value)");
    /* Without the comment, the CR and the spaces around it. */
    load_fails("[server]\r\n  max_line\t ; = 300\r\n",
               "t:2: 'max_line' has no '=' (write key = value)");
    load_fails("\xEF\xBB\xBFmax_line\n", "t:1: 'max_line' has no '=' (write key = value)");
    /* Indented right after a section line: not more value for a key. */
    load_fails("[server]\nmax_line = 300\n[log]\n  level debug\n",
               "t:4: 'level debug' has no '=' (write key = value)");
    /* An '=' anywhere before a comment makes a key line. */
    load_fails("[server]\nlisten 127.0.0.1 = 7411\n",
               "t:2: unknown key 'listen 127.0.0.1' in [server]");
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
}
END_TEST

/* The first of a bad value and a line without '=' is the one reported. */
START_TEST(line_without_equals_order)
{
    load_fails("[server]\nmax_line = 5\nlisten 1\n",
               "t:2: max_line: '5' is not an integer from 256 to 1048576");
    load_fails("[server]\nlisten 1\nmax_line = 5\n",
               "t:2: 'listen 1' has no '=' (write key = value)");
    load_fails("[server\nlisten 1\n", "t:1: syntax error");
}
END_TEST

/* Blank lines, comments and more value for the key above (indented) need no '='. */
START_TEST(lines_that_need_no_equals)
{
    load_ok("\n  \n; a\n# b\n  ; c\n[server]\nmax_line = 300\n\n  ; d\n");
    ck_assert_uint_eq(s.max_line, 300);
    load_ok("[server]\nmax_clients = 5\n\n  6\n");
    ck_assert_uint_eq(s.max_clients, 6);
}
END_TEST

/* Regression: a syntax error followed by a bad value was reported with the
 * syntax error's line but the bad value's message. */
START_TEST(syntax_error_before_bad_value)
{
    load_fails("[server\nmax_line = 300\n", "t:1: syntax error");
    load_fails("[server]\n[junk\nmax_line = 5\n", "t:2: syntax error");
    load_fails("[server]\nmax_line = 5\njunk\n",
               "t:2: max_line: '5' is not an integer from 256 to 1048576");
}
END_TEST

/* inih reads 200-byte lines; a longer one must not be split silently. */
START_TEST(long_line_is_an_error)
{
    char text[600], tail[40];

    snprintf(text, sizeof(text), "[zookeeper]\nhosts = ");
    while (strlen(text) < 260)
        strcat(text, "zk.example.com:2181,");
    strcat(text, "zk.example.com:2181\n[server]\nmax_line = 300\n");
    load_fails(text, "t:2: line longer than 198 bytes");
    /* The line after it is read as a line of its own. */
    snprintf(tail, sizeof(tail), "max_line = 5\n");
    text[strlen(text) - strlen("max_line = 300\n")] = '\0';
    strcat(text, tail);
    load_fails(text, "t:2: line longer than 198 bytes");
    /* 198 bytes and the LF fit; so do 199 without one at the end. */
    memset(text, 0, sizeof(text));
    strcpy(text, "[log]\n");
    strcat(text, "level = debug");
    memset(text + strlen(text), ' ', 198 - strlen("level = debug"));
    strcat(text, "\n");
    load_ok(text);
    ck_assert_int_eq(s.log_level, LOG_LVL_DEBUG);
}
END_TEST

START_TEST(continuation_line_error)
{
    /* inih passes an indented line as another value of the same key. */
    load_fails("[server]\nmax_clients = 5\n  0x\n",
               "t:3: max_clients: '0x' is not an integer from 1 to 1000000");
}
END_TEST

START_TEST(source_names_the_input)
{
    ck_assert_int_eq(settings_load_string(&s, "[x]\na=b\n", "--config-string", err,
                                          sizeof(err)), -1);
    ck_assert_str_eq(err, "--config-string:2: unknown section [x]");
}
END_TEST

START_TEST(error_truncated_to_errlen)
{
    char small[8];

    memset(small, 'z', sizeof(small));
    ck_assert_int_eq(settings_load_string(&s, "[x]\na=b\n", "t", small, sizeof(small)), -1);
    ck_assert_str_eq(small, "t:2: un");   /* cut, but NUL-terminated */
}
END_TEST

/* ------------------------------------------------------------ value limits */

START_TEST(max_line_limits)
{
    load_fails("[server]\nmax_line = 255\n",
               "t:2: max_line: '255' is not an integer from 256 to 1048576");
    load_ok("[server]\nmax_line = 256\n");
    ck_assert_uint_eq(s.max_line, 256);
    load_ok("[server]\nmax_line = 1048576\n");
    ck_assert_uint_eq(s.max_line, 1048576);
    load_fails("[server]\nmax_line = 1048577\n",
               "t:2: max_line: '1048577' is not an integer from 256 to 1048576");
    ck_assert_uint_eq(s.max_line, 1048576);   /* a refused value changes nothing */
}
END_TEST

START_TEST(max_clients_limits)
{
    set_fails("server", "max_clients", "0");
    ck_assert_str_eq(err, "max_clients: '0' is not an integer from 1 to 1000000");
    set_ok("server", "max_clients", "1");
    ck_assert_uint_eq(s.max_clients, 1);
    set_ok("server", "max_clients", "1000000");
    ck_assert_uint_eq(s.max_clients, 1000000);
    set_fails("server", "max_clients", "1000001");
}
END_TEST

START_TEST(session_settings_limits)
{
    set_fails("server", "max_grace_ms", "99");
    ck_assert_str_eq(err, "max_grace_ms: '99' is not an integer from 100 to 3600000");
    set_ok("server", "max_grace_ms", "100");
    ck_assert_uint_eq(s.max_grace_ms, 100);
    set_ok("server", "max_grace_ms", "3600000");
    ck_assert_uint_eq(s.max_grace_ms, 3600000);
    set_fails("server", "max_grace_ms", "3600001");
    set_fails("server", "max_sessions", "0");
    set_ok("server", "max_sessions", "1000000");
    ck_assert_uint_eq(s.max_sessions, 1000000);
    set_fails("server", "max_sessions", "1000001");
    set_fails("server", "max_sessions_per_user", "0");
    set_ok("server", "max_sessions_per_user", "1");
    ck_assert_uint_eq(s.max_sessions_per_user, 1);
}
END_TEST

START_TEST(max_locks_limits)
{
    set_fails("server", "max_locks_per_client", "0");
    ck_assert_str_eq(err, "max_locks_per_client: '0' is not an integer from 1 to 1000000");
    set_ok("server", "max_locks_per_client", "1");
    ck_assert_uint_eq(s.max_locks_per_client, 1);
    set_ok("server", "max_locks_per_client", "1000000");
    set_fails("server", "max_locks_per_client", "1000001");
    ck_assert_uint_eq(s.max_locks_per_client, 1000000);
}
END_TEST

START_TEST(session_timeout_limits)
{
    set_fails("zookeeper", "session_timeout_ms", "999");
    ck_assert_str_eq(err, "session_timeout_ms: '999' is not an integer from 1000 to 600000");
    set_ok("zookeeper", "session_timeout_ms", "1000");
    ck_assert_uint_eq(s.zk_session_timeout_ms, 1000);
    set_ok("zookeeper", "session_timeout_ms", "600000");
    ck_assert_uint_eq(s.zk_session_timeout_ms, 600000);
    set_fails("zookeeper", "session_timeout_ms", "600001");
}
END_TEST

/* The ensemble's tickTime: CHECK's window waits 3/4 of it (PROTOCOL.md). */
START_TEST(tick_limits)
{
    set_fails("zookeeper", "tick_ms", "9");
    ck_assert_str_eq(err, "tick_ms: '9' is not an integer from 10 to 60000");
    set_ok("zookeeper", "tick_ms", "500");
    ck_assert_uint_eq(s.zk_tick_ms, 500);
    set_fails("zookeeper", "tick_ms", "60001");
}
END_TEST

/* A token's low 8 bits count a turn's handoffs (daemon/ztoken.h). */
START_TEST(local_handoff_limits)
{
    set_ok("zookeeper", "local_handoff", "0");
    ck_assert_uint_eq(s.zk_local_handoff, 0);
    set_ok("zookeeper", "local_handoff", "255");
    ck_assert_uint_eq(s.zk_local_handoff, 255);
    set_fails("zookeeper", "local_handoff", "256");
    ck_assert_str_eq(err, "local_handoff: '256' is not an integer from 0 to 255");
}
END_TEST

START_TEST(integers_digits_only)
{
    static const char *const bad[] = {
        "", "-1", "+5", "5x", "x5", "0x10", "1.5", "1e3", "5 6",
        "99999999999999999999999", "18446744073709551616", "4294967297",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        set_fails("server", "max_clients", bad[i]);
        set_fails("server", "max_line", bad[i]);
        set_fails("server", "max_locks_per_client", bad[i]);
        set_fails("zookeeper", "session_timeout_ms", bad[i]);
    }
    ck_assert_uint_eq(s.max_clients, 4096);
    ck_assert_uint_eq(s.max_line, 1024);
    /* Leading zeros are still decimal. */
    set_ok("server", "max_line", "0300");
    ck_assert_uint_eq(s.max_line, 300);
}
END_TEST

START_TEST(socket_mode)
{
    set_ok("server", "unix_socket_mode", "0666");
    ck_assert_uint_eq(s.unix_socket_mode, 0666);
    set_ok("server", "unix_socket_mode", "600");      /* octal even without the 0 */
    ck_assert_uint_eq(s.unix_socket_mode, 0600);
    set_ok("server", "unix_socket_mode", "0777");
    ck_assert_uint_eq(s.unix_socket_mode, 0777);
    set_ok("server", "unix_socket_mode", "0");
    ck_assert_uint_eq(s.unix_socket_mode, 0);
    set_fails("server", "unix_socket_mode", "01000");
    ck_assert_str_eq(err, "unix_socket_mode: '01000' is not an octal mode like 0660");
    set_fails("server", "unix_socket_mode", "0668");  /* 8 is not octal */
    set_fails("server", "unix_socket_mode", "rw-rw----");
    set_fails("server", "unix_socket_mode", "");
    set_fails("server", "unix_socket_mode", "-1");
    set_fails("server", "unix_socket_mode", "-0");
    set_fails("server", "unix_socket_mode", "+644");
    set_fails("server", "unix_socket_mode", " 644");
    ck_assert_uint_eq(s.unix_socket_mode, 0);
}
END_TEST

START_TEST(socket_path)
{
    char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];

    /* The longest path that fits sun_path with its NUL. */
    memset(path, 'p', sizeof(path));
    path[0] = '/';
    path[sizeof(path) - 2] = '\0';
    set_ok("server", "unix_socket", path);
    ck_assert_str_eq(s.unix_socket, path);
    path[sizeof(path) - 2] = 'p';
    path[sizeof(path) - 1] = '\0';
    set_fails("server", "unix_socket", path);
    ck_assert_msg(strstr(err, "path longer than") != NULL, "%s", err);
    ck_assert_uint_eq(strlen(s.unix_socket), sizeof(path) - 2);
}
END_TEST

static void record_restart(const char *what, void *arg);

START_TEST(auth_settings)
{
    ck_assert_ptr_null(s.users_file);
    ck_assert_uint_eq(s.allow_anonymous, 0);
    ck_assert_ptr_null(s.unix_socket_group);
    load_ok("[server]\nusers_file = /etc/lockbroker/users\nallow_anonymous = yes\n"
            "unix_socket_group = lockers\n");
    ck_assert_str_eq(s.users_file, "/etc/lockbroker/users");
    ck_assert_uint_eq(s.allow_anonymous, 1);
    ck_assert_str_eq(s.unix_socket_group, "lockers");
    set_ok("server", "allow_anonymous", "NO");
    ck_assert_uint_eq(s.allow_anonymous, 0);
    set_ok("server", "allow_anonymous", "on");
    ck_assert_uint_eq(s.allow_anonymous, 1);
    set_ok("server", "allow_anonymous", "0");
    ck_assert_uint_eq(s.allow_anonymous, 0);
    set_ok("server", "allow_anonymous", "True");
    ck_assert_uint_eq(s.allow_anonymous, 1);
    set_fails("server", "allow_anonymous", "maybe");
    ck_assert_str_eq(err, "allow_anonymous: 'maybe' is not yes or no");
    set_fails("server", "allow_anonymous", "");
    ck_assert_uint_eq(s.allow_anonymous, 1);
    set_ok("server", "unix_socket_group", "1001");
    ck_assert_str_eq(s.unix_socket_group, "1001");
    set_fails("server", "unix_socket_group", "lock ers");
    ck_assert_str_eq(err, "unix_socket_group: 'lock ers' is not a group name or number");
    set_fails("server", "unix_socket_group", "-x");
    set_fails("server", "unix_socket_group", "a23456789012345678901234567890123");
    set_ok("server", "unix_socket_group", "");
    ck_assert_ptr_null(s.unix_socket_group);
    set_ok("server", "users_file", "");
    ck_assert_ptr_null(s.users_file);
    load_fails("[server]\n\nallow_anonymous = sure\n",
               "t:3: allow_anonymous: 'sure' is not yes or no");
}
END_TEST

START_TEST(reload_users_file_needs_restart)
{
    struct settings fresh;
    char warned[256] = "";

    ck_assert_int_eq(settings_init(&fresh), 0);
    ck_assert_int_eq(settings_load_string(&fresh, "[server]\nusers_file = /u\n"
                                          "allow_anonymous = yes\nunix_socket_group = g\n",
                                          "t", err, sizeof(err)), 0);
    settings_reload(&s, &fresh, record_restart, warned);
    ck_assert_ptr_null(s.users_file);
    ck_assert_uint_eq(s.allow_anonymous, 0);
    ck_assert_ptr_null(s.unix_socket_group);
    ck_assert_str_eq(warned, "unix_socket_group|users_file|allow_anonymous|");
    settings_free(&fresh);
}
END_TEST

START_TEST(zk_root)
{
    static const char *const good[] = { "/a", "/lockbroker", "/a/b/c", "/x.y_z-1", "/a/...", "/.a" };
    static const char *const bad[] = {
        "", "/", "a", "a/b", "/a/", "//a", "/a//b", "/.", "/..", "/a/.", "/a/..",
        "/a/./b", "/a/../b", "/a b", "/a:b", "/caf\xc3\xa9",
    };

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        set_ok("zookeeper", "root", good[i]);
        ck_assert_str_eq(s.zk_root, good[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        set_fails("zookeeper", "root", bad[i]);
    ck_assert_str_eq(s.zk_root, "/.a");
    load_fails("[zookeeper]\nroot = relative\n",
               "t:2: root: 'relative' is not an absolute ZooKeeper path like /lockbroker");
}
END_TEST

START_TEST(zk_nonfair)
{
    static const char *const good[] = {
        "nf-*", "*", "a", "a*,b?,c[0-9],d[!x]", "jobs:*@host.x_y-1",
    };
    static const char *const bad[] = {
        ",", "a,", ",a", "a,,b", "a b", "a/b", "caf\xc3\xa9", "a;b", "a\\b",
    };
    char many[64 * 2 + 8], longp[203];

    ck_assert_ptr_null(s.zk_nonfair);
    ck_assert(!settings_globs_match(s.zk_nonfair, "x"));
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        set_ok("zookeeper", "nonfair", good[i]);
        ck_assert_str_eq(s.zk_nonfair, good[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        set_fails("zookeeper", "nonfair", bad[i]);
    ck_assert_str_eq(s.zk_nonfair, "jobs:*@host.x_y-1");
    /* 64 patterns, not 65 */
    many[0] = '\0';
    for (int i = 0; i < 64; i++)
        strcat(many, i ? ",a" : "a");
    set_ok("zookeeper", "nonfair", many);
    strcat(many, ",a");
    set_fails("zookeeper", "nonfair", many);
    /* 200 bytes, not 201 */
    memset(longp, 'p', sizeof(longp));
    longp[200] = '\0';
    set_ok("zookeeper", "nonfair", longp);
    longp[200] = 'p';
    longp[201] = '\0';
    set_fails("zookeeper", "nonfair", longp);
    /* empty: none again */
    set_ok("zookeeper", "nonfair", "");
    ck_assert_ptr_null(s.zk_nonfair);
    ck_assert(settings_globs_match("a*,nf-?", "nf-1"));
    ck_assert(settings_globs_match("a*,nf-?", "abc"));
    ck_assert(!settings_globs_match("a*,nf-?", "nf-12"));
    ck_assert(!settings_globs_match("a*,nf-?", "b"));
    load_fails("[zookeeper]\nnonfair = a b\n",
               "t:2: nonfair: 'a b': a pattern may hold A-Z a-z 0-9 . _ : @ - and * ? [ ] ! only");
}
END_TEST

START_TEST(zk_root_length)
{
    char root[203];

    memset(root, 'r', sizeof(root));
    root[0] = '/';
    root[200] = '\0';
    set_ok("zookeeper", "root", root);
    root[200] = 'r';
    root[201] = '\0';
    set_fails("zookeeper", "root", root);
    ck_assert_uint_eq(strlen(s.zk_root), 200);
}
END_TEST

START_TEST(zk_hosts)
{
    static const char *const good[] = {
        "127.0.0.1:2181", "zk1:2181,zk2:2181,zk3:2181", "zk-1.example.com:1", "[::1]:2181",
        "zk1:2181,zk2:2181/lockbroker", "zk1:1/a/b_c.d-e", "a:65535",
    };
    static const char *const bad[] = {
        "zk1", "zk1:", ":2181", "zk1:0", "zk1:65536", "zk1:x", "zk1:2181,", ",zk1:2181",
        "zk1:2181,,zk2:2181", "zk 1:2181", "zk1:2181;zk2:2181",
        /* a chroot is a valid root after the last host, as the C client reads it */
        "zk1:2181/", "zk1:2181/a/", "zk1:2181/a/../b", "zk1:2181/lb,zk2:2181", "/lb",
        "zk1:2181,/lb", "zk1:2181//lb",
    };

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        set_ok("zookeeper", "hosts", good[i]);
        ck_assert_str_eq(s.zk_hosts, good[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        set_fails("zookeeper", "hosts", bad[i]);
    ck_assert_str_eq(s.zk_hosts, "a:65535");
    set_ok("zookeeper", "hosts", "");          /* empty: embedded mode */
    ck_assert_ptr_null(s.zk_hosts);
    load_fails("[zookeeper]\nhosts = zk1\n", "t:2: hosts: 'zk1' is not host:port[,host:port...][/chroot]");
}
END_TEST

START_TEST(log_levels)
{
    static const char *const words[] = { "error", "warn", "info", "debug" };

    for (int i = 0; i < 4; i++) {
        set_ok("log", "level", words[i]);
        ck_assert_int_eq(s.log_level, i);
    }
    set_ok("log", "level", "ErRoR");
    ck_assert_int_eq(s.log_level, LOG_LVL_ERROR);
    set_fails("log", "level", "verbose");
    ck_assert_str_eq(err, "level: 'verbose' is not one of error, warn, info, debug");
    set_fails("log", "level", "");
    set_fails("log", "level", "warning");
    ck_assert_int_eq(s.log_level, LOG_LVL_ERROR);
    load_fails("[log]\nlevel = loud\n", "t:2: level: 'loud' is not one of error, warn, info, debug");
}
END_TEST

static void record_restart(const char *what, void *arg);

/* [log] holds: the line per ended hold (daemon/locks.h), on by default. */
START_TEST(log_holds_setting)
{
    struct settings fresh;
    char warned[64] = "";

    load_ok("[log]\nholds = no\n");
    ck_assert_uint_eq(s.log_holds, 0);
    set_ok("log", "holds", "Yes");
    ck_assert_uint_eq(s.log_holds, 1);
    set_fails("log", "holds", "some");
    ck_assert_str_eq(err, "holds: 'some' is not yes or no");
    ck_assert_uint_eq(s.log_holds, 1);
    load_fails("[server]\nholds = no\n", "t:2: unknown key 'holds' in [server]");
    /* SIGHUP applies it: no restart warning. */
    ck_assert_int_eq(settings_init(&fresh), 0);
    ck_assert_int_eq(settings_set(&fresh, "log", "holds", "off", err, sizeof(err)), 0);
    settings_reload(&s, &fresh, record_restart, warned);
    ck_assert_str_eq(warned, "");
    ck_assert_uint_eq(s.log_holds, 0);
    settings_free(&fresh);
}
END_TEST

/* ------------------------------------------------------------ listen */

START_TEST(listen_accepted)
{
    static const char *const good[] = {
        "127.0.0.1:7411", "0.0.0.0:1", "[::1]:7411", "[::]:80", "127.0.0.1:0", "[::1]:0",
        "10.1.2.3:65535",
    };

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        set_ok("server", "listen", good[i]);
        ck_assert_str_eq(s.listen, good[i]);
    }
    load_ok("[server]\nlisten = [::1]:7411\n");
    ck_assert_str_eq(s.listen, "[::1]:7411");
}
END_TEST

START_TEST(listen_rejected)
{
    static const char *const bad[] = {
        "localhost:1", "127.0.0.1", "1.2.3.4:99999", "1.2.3.4:65536", "", ":7411",
        "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:-1", "127.0.0.1:+80", "127.0.0.1: 80",
        "256.0.0.1:80", "[::1]", "[::1]:", "::1:7411]", "[localhost]:80", "1.2.3:80",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        set_fails("server", "listen", bad[i]);
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
    set_fails("server", "listen", "nonsense");
    ck_assert_str_eq(err, "listen: 'nonsense' is not IP:PORT or [IPv6]:PORT");
    set_fails("server", "listen", "localhost:99999");
    ck_assert_str_eq(err, "listen: 'localhost:99999' is not IP:PORT or [IPv6]:PORT");
    load_fails("[server]\n\nlisten = 127.0.0.1\n",
               "t:3: listen: '127.0.0.1' is not IP:PORT or [IPv6]:PORT");
}
END_TEST

/* No name is looked up for listening: say so, and what to write instead. */
START_TEST(listen_host_name)
{
    set_fails("server", "listen", "localhost:7411");
    ck_assert_str_eq(err, "listen: 'localhost:7411': host names are not accepted; "
                          "use 127.0.0.1:7411 or [::1]:7411");
    set_fails("server", "listen", "LocalHost:0");
    ck_assert_str_eq(err, "listen: 'LocalHost:0': host names are not accepted; "
                          "use 127.0.0.1:0 or [::1]:0");
    set_fails("server", "listen", "db-1.example.com:80");
    ck_assert_str_eq(err, "listen: 'db-1.example.com:80': host names are not accepted; "
                          "use a numeric IP:PORT or [IPv6]:PORT");
    load_fails("[server]\nlisten = localhost:7411\n",
               "t:2: listen: 'localhost:7411': host names are not accepted; "
               "use 127.0.0.1:7411 or [::1]:7411");
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
}
END_TEST

/* Records settings_reload()'s restart warnings (defined with the reload tests). */
static void record_restart(const char *what, void *arg);

/* Off by default; an address like listen's, or empty (off) again; a restart applies it. */
START_TEST(metrics_listen_setting)
{
    struct settings fresh;
    char warned[256] = "";

    ck_assert_ptr_null(s.metrics_listen);
    set_ok("server", "metrics_listen", "127.0.0.1:9411");
    ck_assert_str_eq(s.metrics_listen, "127.0.0.1:9411");
    set_ok("server", "metrics_listen", "");
    ck_assert_ptr_null(s.metrics_listen);
    load_ok("[server]\nmetrics_listen = [::1]:0\n");
    ck_assert_str_eq(s.metrics_listen, "[::1]:0");
    set_fails("server", "metrics_listen", "localhost:9411");
    ck_assert_str_eq(err, "metrics_listen: 'localhost:9411': host names are not accepted; "
                          "use 127.0.0.1:9411 or [::1]:9411");
    set_fails("server", "metrics_listen", "9411");
    ck_assert_str_eq(err, "metrics_listen: '9411' is not IP:PORT or [IPv6]:PORT");
    ck_assert_str_eq(s.metrics_listen, "[::1]:0");
    /* listen itself stays mandatory. */
    set_fails("server", "listen", "");

    ck_assert_int_eq(settings_init(&fresh), 0);
    settings_reload(&s, &fresh, record_restart, warned);
    ck_assert_str_eq(warned, "metrics_listen|");
    ck_assert_str_eq(s.metrics_listen, "[::1]:0");
    settings_free(&fresh);
}
END_TEST

START_TEST(listen_too_long)
{
    char v[200];

    /* Longer than any numeric address: refused before it is copied. */
    memset(v, '1', sizeof(v));
    memcpy(v, "127.0.0.1:", 10);
    v[sizeof(v) - 1] = '\0';
    set_fails("server", "listen", v);
}
END_TEST

START_TEST(listen_addr_ipv4)
{
    struct sockaddr_storage ss;
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    int len = 0;

    ck_assert_int_eq(settings_listen_addr("127.0.0.1:7411", &ss, &len), 0);
    ck_assert_int_eq(ss.ss_family, AF_INET);
    ck_assert_int_eq(len, (int)sizeof(struct sockaddr_in));
    ck_assert_uint_eq(ntohs(sin->sin_port), 7411);
    ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), 0x7f000001);
}
END_TEST

START_TEST(listen_addr_ipv6)
{
    struct sockaddr_storage ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
    int len = 0;

    ck_assert_int_eq(settings_listen_addr("[::1]:7411", &ss, &len), 0);
    ck_assert_int_eq(ss.ss_family, AF_INET6);
    ck_assert_int_eq(len, (int)sizeof(struct sockaddr_in6));
    ck_assert_uint_eq(ntohs(sin6->sin6_port), 7411);
    ck_assert(IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));
}
END_TEST

START_TEST(listen_addr_port0)
{
    struct sockaddr_storage ss;
    int len;

    /* Port 0 asks the kernel for a free port; libevent alone refuses it. */
    memset(&ss, 0xff, sizeof(ss));
    ck_assert_int_eq(settings_listen_addr("127.0.0.1:0", &ss, &len), 0);
    ck_assert_int_eq(ss.ss_family, AF_INET);
    ck_assert_uint_eq(((struct sockaddr_in *)&ss)->sin_port, 0);
    memset(&ss, 0xff, sizeof(ss));
    ck_assert_int_eq(settings_listen_addr("[::1]:0", &ss, &len), 0);
    ck_assert_int_eq(ss.ss_family, AF_INET6);
    ck_assert_uint_eq(((struct sockaddr_in6 *)&ss)->sin6_port, 0);
    ck_assert_int_eq(settings_listen_addr("[::1]:000", &ss, &len), 0);
    ck_assert_uint_eq(((struct sockaddr_in6 *)&ss)->sin6_port, 0);
}
END_TEST

START_TEST(listen_addr_rejected)
{
    struct sockaddr_storage ss;
    int len;

    ck_assert_int_eq(settings_listen_addr("localhost:1", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("127.0.0.1", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("1.2.3.4:99999", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("", &ss, &len), -1);
}
END_TEST

/* Regression: unbracketed IPv6 was taken as an address without a port
 * (so port 0, a random port), and libevent's atoi() wrapped big ports. */
START_TEST(listen_unbracketed_ipv6_rejected)
{
    struct sockaddr_storage ss;
    int len;

    ck_assert_int_eq(settings_listen_addr("::1", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("::1:7411", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("fe80::1:7411", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("::ffff:127.0.0.1:80", &ss, &len), -1);
    set_fails("server", "listen", "::1:7411");
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
    ck_assert_int_eq(settings_listen_addr("[::ffff:127.0.0.1]:80", &ss, &len), 0);
}
END_TEST

START_TEST(listen_port_range)
{
    struct sockaddr_storage ss;
    int len;

    ck_assert_int_eq(settings_listen_addr("1.2.3.4:65535", &ss, &len), 0);
    ck_assert_uint_eq(ntohs(((struct sockaddr_in *)&ss)->sin_port), 65535);
    ck_assert_int_eq(settings_listen_addr("1.2.3.4:007411", &ss, &len), 0);
    ck_assert_uint_eq(ntohs(((struct sockaddr_in *)&ss)->sin_port), 7411);
    ck_assert_int_eq(settings_listen_addr("1.2.3.4:65536", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("1.2.3.4:4294967297", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("[::1]:4294967297", &ss, &len), -1);
    ck_assert_int_eq(settings_listen_addr("1.2.3.4:18446744073709551617", &ss, &len), -1);
}
END_TEST

/* ------------------------------------------------------------ files */

/* Writes len bytes of text into a new temporary file; returns its malloc'd path. */
static char *temp_file_len(const char *text, size_t len)
{
    char *path = strdup("/tmp/check_conf.XXXXXX");
    int fd;

    ck_assert_ptr_nonnull(path);
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    ck_assert_int_eq(close(fd), 0);
    return path;
}

static char *temp_file(const char *text)
{
    return temp_file_len(text, strlen(text));
}

START_TEST(load_file)
{
    char *path = temp_file("; test\n[server]\nmax_clients = 77\n[log]\nlevel = error\n");

    ck_assert_msg(settings_load_file(&s, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(s.max_clients, 77);
    ck_assert_int_eq(s.log_level, LOG_LVL_ERROR);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(load_file_error_names_file_and_line)
{
    char *path = temp_file("[server]\nmax_clients = 77\nmax_line = 100\n");
    char want[600];

    snprintf(want, sizeof(want), "%s:3: max_line: '100' is not an integer from 256 to 1048576",
             path);
    ck_assert_int_eq(settings_load_file(&s, path, err, sizeof(err)), -1);
    ck_assert_str_eq(err, want);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(load_file_syntax_error_before_bad_value)
{
    char *path = temp_file("[server]\nmax_clients = 77\nno equals here\nmax_line = 1\n");
    char want[600];

    snprintf(want, sizeof(want), "%s:3: 'no equals here' has no '=' (write key = value)", path);
    ck_assert_int_eq(settings_load_file(&s, path, err, sizeof(err)), -1);
    ck_assert_str_eq(err, want);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(load_file_long_line)
{
    char body[400] = "[server]\nmax_line = 300\n; ";
    char *path, want[600];

    memset(body + strlen(body), 'x', 250);
    strcat(body, "\nmax_line = 5\n");
    path = temp_file(body);
    snprintf(want, sizeof(want), "%s:3: line longer than 198 bytes", path);
    ck_assert_int_eq(settings_load_file(&s, path, err, sizeof(err)), -1);
    ck_assert_str_eq(err, want);
    unlink(path);
    free(path);
}
END_TEST

/* Regression (fuzz_conf): inih reads a line only up to a NUL byte, and
 * fgets() hid where the line went on, so a NUL in a line longer than
 * inih's buffer made its rest a line of its own: here a comment set
 * max_line. A NUL byte is an error naming its line. */
START_TEST(load_file_nul_byte)
{
    static const char short_line[] = "[server]\nmax_line = 300\0junk\n";
    char long_line[400] = "[server]\n; comment";
    char *path, want[600];
    size_t len;

    path = temp_file_len(short_line, sizeof(short_line) - 1);
    snprintf(want, sizeof(want), "%s:2: NUL byte in the line (not a text file?)", path);
    ck_assert_int_eq(settings_load_file(&s, path, err, sizeof(err)), -1);
    ck_assert_str_eq(err, want);
    unlink(path);
    free(path);

    /* Line 2 fills inih's buffer (199 bytes and the NUL), then goes on. */
    len = strlen(long_line) + 1;
    memset(long_line + len, 'x', 9 + 199 - len);
    len = 9 + 199;
    memcpy(long_line + len, "max_line = 300\n", 15);
    path = temp_file_len(long_line, len + 15);
    snprintf(want, sizeof(want), "%s:2: line longer than 198 bytes", path);
    ck_assert_int_eq(settings_load_file(&s, path, err, sizeof(err)), -1);
    ck_assert_str_eq(err, want);
    ck_assert_uint_eq(s.max_line, 1024);
    unlink(path);
    free(path);
}
END_TEST

/* ------------------------------------------------- [zookeeper] auth file */

/* Writes content (len bytes) to a new file of the given mode; returns its
 * malloc'd path. */
static char *auth_file(const void *content, size_t len, mode_t mode)
{
    char *path = strdup("/tmp/check_conf_auth.XXXXXX");
    int fd;

    ck_assert_ptr_nonnull(path);
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, content, len), (ssize_t)len);
    ck_assert_int_eq(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

/* Reads an auth file holding text; returns the reader's result, the secret
 * in buf, the error in err with the path replaced by "F". */
static int read_auth(const char *text, size_t len, mode_t mode, char *buf, size_t buflen)
{
    char *path = auth_file(text, len, mode), *at;
    int rc = settings_read_zk_auth(path, buf, buflen, err, sizeof(err));

    if (rc < 0) {
        /* "PATH: why": the path appears first, and in a chmod hint */
        while ((at = strstr(err, path))) {
            size_t plen = strlen(path);
            at[0] = 'F';
            memmove(at + 1, at + plen, strlen(at + plen) + 1);
        }
    }
    unlink(path);
    free(path);
    return rc;
}

START_TEST(zk_auth_file)
{
    char buf[SETTINGS_ZK_AUTH_MAX + 2], big[400];

    ck_assert_int_eq(read_auth("lb:s3cret\n", 10, 0600, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "lb:s3cret");
    ck_assert_int_eq(read_auth("lb:s3cret", 9, 0640, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "lb:s3cret");
    ck_assert_int_eq(read_auth("lb:a:b c\r\n", 10, 0400, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "lb:a:b c");       /* the password may hold ':' and spaces */

    ck_assert_int_eq(read_auth("lb:s3cret\n", 10, 0644, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: others may read or write it (mode 0644); chmod o-rwx F");
    ck_assert_int_eq(read_auth("lb:s3cret\n", 10, 0602, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: others may read or write it (mode 0602); chmod o-rwx F");
    ck_assert_int_eq(read_auth("", 0, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: not user:password (a user name, ':', a password)");
    ck_assert_int_eq(read_auth("lb\n", 3, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: not user:password (a user name, ':', a password)");
    ck_assert_int_eq(read_auth(":pw\n", 4, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: not user:password (a user name, ':', a password)");
    ck_assert_int_eq(read_auth("lb:\n", 4, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: not user:password (a user name, ':', a password)");
    ck_assert_int_eq(read_auth("lb:pw\nx\n", 8, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: more than one line; write only user:password");
    ck_assert_int_eq(read_auth("lb:pw\n\n", 7, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: more than one line; write only user:password");
    ck_assert_int_eq(read_auth("lb:p\0w\n", 6, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: it holds a NUL byte");

    /* The longest: SETTINGS_ZK_AUTH_MAX bytes, with or without its LF. */
    memset(big, 'p', sizeof(big));
    memcpy(big, "lb:", 3);
    big[SETTINGS_ZK_AUTH_MAX] = '\n';
    ck_assert_int_eq(read_auth(big, SETTINGS_ZK_AUTH_MAX + 1, 0600, buf, sizeof(buf)), 0);
    ck_assert_uint_eq(strlen(buf), SETTINGS_ZK_AUTH_MAX);
    ck_assert_int_eq(read_auth(big, SETTINGS_ZK_AUTH_MAX, 0600, buf, sizeof(buf)), 0);
    ck_assert_uint_eq(strlen(buf), SETTINGS_ZK_AUTH_MAX);
    /* One more, with or without LF, or the longest followed by another line. */
    big[SETTINGS_ZK_AUTH_MAX] = 'p';
    big[SETTINGS_ZK_AUTH_MAX + 1] = '\n';
    ck_assert_int_eq(read_auth(big, SETTINGS_ZK_AUTH_MAX + 2, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: longer than 255 bytes");
    ck_assert_int_eq(read_auth(big, SETTINGS_ZK_AUTH_MAX + 1, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: longer than 255 bytes");
    ck_assert_int_eq(read_auth(big, sizeof(big), 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: longer than 255 bytes");
    big[SETTINGS_ZK_AUTH_MAX] = '\n';
    big[SETTINGS_ZK_AUTH_MAX + 1] = 'x';
    ck_assert_int_eq(read_auth(big, SETTINGS_ZK_AUTH_MAX + 2, 0600, buf, sizeof(buf)), -1);
    ck_assert_str_eq(err, "F: more than one line; write only user:password");

    ck_assert_int_eq(settings_read_zk_auth("/nonexistent/zk.auth", buf, sizeof(buf), err,
                                           sizeof(err)), -1);
    ck_assert_str_eq(err, "/nonexistent/zk.auth: cannot open: No such file or directory");
    ck_assert_int_eq(settings_read_zk_auth("/tmp", buf, sizeof(buf), err, sizeof(err)), -1);
    ck_assert_str_eq(err, "/tmp: is a directory");
}
END_TEST

START_TEST(zk_auth_setting)
{
    ck_assert_ptr_null(s.zk_auth);             /* default: none, open ACLs */
    load_ok("[zookeeper]\nauth = /etc/lockbrokerd/zk.auth\n");
    ck_assert_str_eq(s.zk_auth, "/etc/lockbrokerd/zk.auth");
    load_ok("[zookeeper]\nauth =\n");
    ck_assert_ptr_null(s.zk_auth);
}
END_TEST

START_TEST(load_missing_file)
{
    ck_assert_int_eq(settings_load_file(&s, "/nonexistent/lockbrokerd.conf", err, sizeof(err)),
                     -1);
    ck_assert_str_eq(err, "/nonexistent/lockbrokerd.conf: cannot open: No such file or directory");
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
}
END_TEST

/* Regression: a directory opened and read as an empty file, so
 * "lockbrokerd -t -c /tmp" said "configuration OK". */
START_TEST(load_directory)
{
    char dir[] = "/tmp/check_conf.XXXXXX", want[600];

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(want, sizeof(want), "%s: is a directory", dir);
    ck_assert_int_eq(settings_load_file(&s, dir, err, sizeof(err)), -1);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(load_not_regular_file)
{
    char dir[] = "/tmp/check_conf.XXXXXX", fifo[600], want[700];

    ck_assert_int_eq(settings_load_file(&s, "/dev/null", err, sizeof(err)), -1);
    ck_assert_str_eq(err, "/dev/null: is not a regular file");
    /* Refused without waiting for a writer. */
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(want, sizeof(want), "%s: is not a regular file", fifo);
    ck_assert_int_eq(settings_load_file(&s, fifo, err, sizeof(err)), -1);
    ck_assert_str_eq(err, want);
    unlink(fifo);
    rmdir(dir);
}
END_TEST

/* A read error is not the end of the file. */
START_TEST(load_read_error)
{
    /* A regular file whose first read fails (EIO: nothing is mapped at 0). */
    if (access("/proc/self/mem", R_OK) != 0)
        return;
    ck_assert_int_eq(settings_load_file(&s, "/proc/self/mem", err, sizeof(err)), -1);
    ck_assert_str_eq(err, "/proc/self/mem: cannot read: Input/output error");
}
END_TEST

/* ------------------------------------------------------------ flags */

START_TEST(set_like_flags)
{
    /* As main.c applies -l, -s, -z, -v over the file. */
    load_ok("[server]\nlisten = 127.0.0.1:1\nmax_line = 300\n");
    set_ok("server", "listen", "127.0.0.1:9999");
    set_ok("server", "unix_socket", "/tmp/lb.sock");
    set_ok("zookeeper", "hosts", "127.0.0.1:2181");
    set_ok("log", "level", "debug");
    ck_assert_str_eq(s.listen, "127.0.0.1:9999");
    ck_assert_str_eq(s.unix_socket, "/tmp/lb.sock");
    ck_assert_str_eq(s.zk_hosts, "127.0.0.1:2181");
    ck_assert_int_eq(s.log_level, LOG_LVL_DEBUG);
    ck_assert_uint_eq(s.max_line, 300);
}
END_TEST

START_TEST(set_errors_have_no_location)
{
    set_fails("server", "listen", "nowhere");
    ck_assert_str_eq(err, "listen: 'nowhere' is not IP:PORT or [IPv6]:PORT");
    set_fails("server", "nope", "1");
    ck_assert_str_eq(err, "unknown key 'nope' in [server]");
    set_fails("nope", "listen", "1");
    ck_assert_str_eq(err, "unknown section [nope]");
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
}
END_TEST

/* ------------------------------------------------------------ the table */

START_TEST(table_keys_unique)
{
    const struct setting *a, *b;

    for (size_t i = 0; (a = settings_row(i)); i++)
        for (size_t j = i + 1; (b = settings_row(j)); j++) {
            ck_assert_msg(strcmp(a->section, b->section) != 0 || strcmp(a->key, b->key) != 0,
                          "[%s] %s has two rows", a->section, a->key);
            ck_assert_msg(a->offset != b->offset, "%s and %s share a field", a->key, b->key);
        }
    ck_assert_ptr_nonnull(settings_row(0));
}
END_TEST

START_TEST(table_defaults_in_range)
{
    const struct setting *r;

    for (size_t i = 0; (r = settings_row(i)); i++) {
        const char *field = (const char *)&s + r->offset;

        /* The file syntax accepts the default... */
        ck_assert_msg(settings_set(&s, r->section, r->key, r->def, err, sizeof(err)) == 0,
                      "default of %s refused: %s", r->key, err);
        /* ...which lies inside the row's bounds... */
        if (r->type == SETTING_UINT || r->type == SETTING_MODE) {
            unsigned long v = strtoul(r->def, NULL, r->type == SETTING_MODE ? 8 : 10);

            ck_assert_msg(r->min <= v && v <= r->max, "default of %s out of range", r->key);
            ck_assert_uint_eq(*(const unsigned *)field, v);
        } else if (r->type == SETTING_PATH) {
            ck_assert_uint_le(strlen(r->def), r->max);
        }
        /* ...and is what settings_init() left there. */
        if (r->type == SETTING_BOOL)
            ck_assert_uint_eq(*(const unsigned *)field, strcmp(r->def, "yes") == 0);
        else if (r->type == SETTING_CLIENT_CERTS)
            ck_assert_str_eq(settings_client_certs_name(*(const enum tls_client_certs *)field),
                             r->def);
        else if (r->type != SETTING_UINT && r->type != SETTING_MODE &&
                 r->type != SETTING_LOG_LEVEL) {
            const char *v = *(char *const *)field;

            if (*r->def)
                ck_assert_str_eq(v, r->def);
            else
                ck_assert_ptr_null(v);
        }
    }
    ck_assert_int_eq(s.log_level, LOG_LVL_INFO);
}
END_TEST

START_TEST(table_help_is_one_line)
{
    const struct setting *r;

    for (size_t i = 0; (r = settings_row(i)); i++) {
        ck_assert_msg(r->help && *r->help && !strchr(r->help, '\n'), "help of %s", r->key);
        ck_assert_msg(!r->restart || *r->restart, "restart name of %s", r->key);
    }
}
END_TEST

/* Records settings_reload()'s restart warnings, separated by '|'. */
static void record_restart(const char *what, void *arg)
{
    char *log = arg;

    strcat(log, what);
    strcat(log, "|");
}

START_TEST(reload_moves_sighup_rows_only)
{
    struct settings fresh;
    char warned[256] = "";

    ck_assert_int_eq(settings_init(&fresh), 0);
    ck_assert_int_eq(settings_load_string(&fresh,
                                          "[server]\nmax_line = 300\nmax_clients = 9\n"
                                          "unix_socket = /tmp/x\nunix_socket_mode = 0600\n"
                                          "[zookeeper]\nroot = /other\nsession_timeout_ms = 5000\n"
                                          "[log]\nlevel = debug\n", "t", err, sizeof(err)), 0);
    settings_reload(&s, &fresh, record_restart, warned);
    /* Applied now. */
    ck_assert_uint_eq(s.max_line, 300);
    ck_assert_uint_eq(s.max_clients, 9);
    ck_assert_int_eq(s.log_level, LOG_LVL_DEBUG);
    /* Kept until a restart, each group named once. */
    ck_assert_ptr_null(s.unix_socket);
    ck_assert_uint_eq(s.unix_socket_mode, 0660);
    ck_assert_str_eq(s.zk_root, "/lockbroker");
    ck_assert_uint_eq(s.zk_session_timeout_ms, 10000);
    ck_assert_str_eq(warned, "unix_socket or its mode|[zookeeper] settings|");
    /* fresh got the old values and is still freed by its owner. */
    ck_assert_uint_eq(fresh.max_line, 1024);
    settings_free(&fresh);
}
END_TEST

START_TEST(reload_strings_and_no_change)
{
    struct settings fresh;
    char warned[256] = "";

    ck_assert_int_eq(settings_init(&fresh), 0);
    settings_reload(&s, &fresh, record_restart, warned);
    ck_assert_str_eq(warned, "");
    ck_assert_int_eq(settings_set(&fresh, "server", "listen", "[::1]:1", err, sizeof(err)), 0);
    ck_assert_int_eq(settings_set(&fresh, "zookeeper", "hosts", "a:1", err, sizeof(err)), 0);
    settings_reload(&s, &fresh, record_restart, warned);
    ck_assert_str_eq(warned, "listen|[zookeeper] settings|");
    ck_assert_str_eq(s.listen, "127.0.0.1:7411");
    ck_assert_ptr_null(s.zk_hosts);
    settings_free(&fresh);
}
END_TEST

START_TEST(format_reloadable)
{
    char small[12];

    settings_format_reloadable(&s, err, sizeof(err));
    ck_assert_str_eq(err, "log level info, max_clients 4096, max_line 1024, "
                          "max_locks_per_client 256, max_leases 10000, max_leases_per_user 1000, "
                          "max_kept_holds 10000, max_kept_holds_per_user 1000, "
                          "max_grace_ms 60000, max_sessions 10000, max_sessions_per_user 1000, "
                          "max_watches_per_user 1000, lock_delay_ms 0, "
                          "auth_max_pending 64, auth_max_pending_per_address 4, "
                          "auth_fail_limit 10, auth_backoff_ms 60000, "
                          "login_timeout_ms 10000, max_clients_per_address 0, "
                          "tcp_keepalive_idle_s 30, tcp_keepalive_interval_s 10, "
                          "tcp_keepalive_count 3, tcp_user_timeout_ms 60000, "
                          "tls max_handshakes_per_address 32, log rate_limit 1000, log holds yes");
    settings_format_reloadable(&s, small, sizeof(small));
    ck_assert_str_eq(small, "log level i");     /* cut, but NUL-terminated */
}
END_TEST

static Suite *conf_suite(void)
{
    Suite *su = suite_create("conf");
    TCase *tc;

    tc = tcase_create("defaults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, free_clears);
    tcase_add_test(tc, log_level_names);
    suite_add_tcase(su, tc);

    tc = tcase_create("load");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, load_every_key);
    tcase_add_test(tc, load_empty);
    tcase_add_test(tc, load_keeps_unset_defaults);
    tcase_add_test(tc, load_syntax_variants);
    tcase_add_test(tc, load_key_given_twice);
    tcase_add_test(tc, load_over_earlier_load);
    tcase_add_test(tc, sample_file_is_defaults);
    suite_add_tcase(su, tc);

    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, unknown_section);
    tcase_add_test(tc, key_before_any_section);
    tcase_add_test(tc, unknown_keys);
    tcase_add_test(tc, bad_value_names_its_line);
    tcase_add_test(tc, first_error_reported);
    tcase_add_test(tc, syntax_error);
    tcase_add_test(tc, line_without_equals);
    tcase_add_test(tc, line_without_equals_order);
    tcase_add_test(tc, lines_that_need_no_equals);
    tcase_add_test(tc, syntax_error_before_bad_value);
    tcase_add_test(tc, long_line_is_an_error);
    tcase_add_test(tc, continuation_line_error);
    tcase_add_test(tc, source_names_the_input);
    tcase_add_test(tc, error_truncated_to_errlen);
    suite_add_tcase(su, tc);

    tc = tcase_create("values");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, max_line_limits);
    tcase_add_test(tc, max_clients_limits);
    tcase_add_test(tc, max_locks_limits);
    tcase_add_test(tc, session_settings_limits);
    tcase_add_test(tc, session_timeout_limits);
    tcase_add_test(tc, tick_limits);
    tcase_add_test(tc, local_handoff_limits);
    tcase_add_test(tc, integers_digits_only);
    tcase_add_test(tc, socket_mode);
    tcase_add_test(tc, socket_path);
    tcase_add_test(tc, auth_settings);
    tcase_add_test(tc, reload_users_file_needs_restart);
    tcase_add_test(tc, zk_root);
    tcase_add_test(tc, zk_root_length);
    tcase_add_test(tc, zk_nonfair);
    tcase_add_test(tc, zk_hosts);
    tcase_add_test(tc, log_levels);
    tcase_add_test(tc, log_holds_setting);
    suite_add_tcase(su, tc);

    tc = tcase_create("listen");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, listen_accepted);
    tcase_add_test(tc, listen_rejected);
    tcase_add_test(tc, listen_host_name);
    tcase_add_test(tc, metrics_listen_setting);
    tcase_add_test(tc, listen_too_long);
    tcase_add_test(tc, listen_addr_ipv4);
    tcase_add_test(tc, listen_addr_ipv6);
    tcase_add_test(tc, listen_addr_port0);
    tcase_add_test(tc, listen_addr_rejected);
    tcase_add_test(tc, listen_unbracketed_ipv6_rejected);
    tcase_add_test(tc, listen_port_range);
    suite_add_tcase(su, tc);

    tc = tcase_create("files");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, load_file);
    tcase_add_test(tc, load_file_error_names_file_and_line);
    tcase_add_test(tc, load_file_syntax_error_before_bad_value);
    tcase_add_test(tc, load_file_long_line);
    tcase_add_test(tc, load_file_nul_byte);
    tcase_add_test(tc, load_missing_file);
    tcase_add_test(tc, load_directory);
    tcase_add_test(tc, load_not_regular_file);
    tcase_add_test(tc, load_read_error);
    tcase_add_test(tc, zk_auth_file);
    tcase_add_test(tc, zk_auth_setting);
    suite_add_tcase(su, tc);

    tc = tcase_create("flags");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, set_like_flags);
    tcase_add_test(tc, set_errors_have_no_location);
    suite_add_tcase(su, tc);

    tc = tcase_create("table");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, table_keys_unique);
    tcase_add_test(tc, table_defaults_in_range);
    tcase_add_test(tc, tls_client_certs_words);
    tcase_add_test(tc, table_help_is_one_line);
    tcase_add_test(tc, reload_moves_sighup_rows_only);
    tcase_add_test(tc, reload_strings_and_no_change);
    tcase_add_test(tc, format_reloadable);
    suite_add_tcase(su, tc);
    return su;
}

int main(void)
{
    SRunner *sr = srunner_create(conf_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
