/*
 * settings.c - the table of settings, validation and the inih-based loader.
 */
#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <event2/util.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "secret.h"

static const char *const level_names[] = { "error", "warn", "info", "debug" };

/* SETTING_BOOL words: false at even indexes, true at odd ones. */
static const char *const bool_words[] = { "no", "yes", "false", "true", "off", "on", "0", "1" };

/* SETTING_CLIENT_CERTS words, by enum tls_client_certs. */
static const char *const client_certs_words[] = { "none", "optional", "required" };

const char *settings_log_level_name(enum log_level l)
{
    return (unsigned)l < sizeof(level_names) / sizeof(level_names[0]) ? level_names[l] : "?";
}

const char *settings_client_certs_name(enum tls_client_certs c)
{
    return (unsigned)c < sizeof(client_certs_words) / sizeof(client_certs_words[0])
               ? client_certs_words[c] : "?";
}

static int replace_str(char **dst, const char *src)
{
    char *copy = NULL;

    if (src && !(copy = strdup(src)))
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

/* Unsigned decimal in [min, max]; the whole string must be digits. */
static int parse_uint(const char *v, unsigned min, unsigned max, unsigned *out)
{
    char *end;
    unsigned long n;

    if (*v < '0' || *v > '9')
        return -1;
    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno || *end || n < min || n > max)
        return -1;
    *out = (unsigned)n;
    return 0;
}

int settings_listen_addr(const char *listen, struct sockaddr_storage *ss, int *len)
{
    const char *colon = strrchr(listen, ':');
    char copy[128];
    bool port0;

    /* Numeric only: no DNS at start-up, no surprise about which address is bound. */
    if (!colon || colon[1] == '\0' || strlen(listen) >= sizeof(copy) - 1 ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return -1;
    /* libevent reads "::1:7411" as address ::1:7411 without a port, and
     * its atoi() wraps 4294967297 to port 1: insist on brackets and check
     * the port here. */
    if (listen[0] != '[' && memchr(listen, ':', (size_t)(colon - listen)))
        return -1;
    if (strtoul(colon + 1, NULL, 10) > 65535)
        return -1;
    /* libevent refuses port 0, which asks the kernel for a free port: parse
     * with port 1 and put the 0 back. */
    port0 = strtoul(colon + 1, NULL, 10) == 0;
    snprintf(copy, sizeof(copy), "%.*s:%s", (int)(colon - listen), listen,
             port0 ? "1" : colon + 1);
    *len = sizeof(*ss);
    if (evutil_parse_sockaddr_port(copy, (struct sockaddr *)ss, len) < 0)
        return -1;
    if (port0 && ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = 0;
    else if (port0)
        ((struct sockaddr_in6 *)ss)->sin6_port = 0;
    return 0;
}

static int valid_listen(const char *v)
{
    struct sockaddr_storage ss;
    int len;

    return settings_listen_addr(v, &ss, &len) == 0;
}

/* A host name and a valid port, such as "localhost:7411": what
 * settings_listen_addr() refuses because it looks up no names. Sets *port. */
static bool is_name_and_port(const char *v, unsigned *port)
{
    const char *colon = strrchr(v, ':');
    bool letter = false;

    if (!colon || colon == v)
        return false;
    for (const char *p = v; p < colon; p++) {
        if (isalpha((unsigned char)*p))
            letter = true;
        else if (!isdigit((unsigned char)*p) && *p != '.' && *p != '-')
            return false;
    }
    return letter && parse_uint(colon + 1, 0, 65535, port) == 0;
}

static int valid_zk_root(const char *v);

/* "host:port[,host:port...][/chroot]": what zookeeper_init takes. The
 * client reads everything from the first '/' as the chroot, which every
 * path of this session is then relative to (the node must exist). Names
 * are resolved when connecting. */
static int valid_zk_hosts(const char *v)
{
    const char *p = v, *chroot = strchr(v, '/');
    size_t end = chroot ? (size_t)(chroot - v) : strlen(v);

    if (!*v || strlen(v) > 1024 || (chroot && !valid_zk_root(chroot)))
        return 0;
    while (p < v + end) {
        size_t hostlen = strcspn(p, ",/");
        const char *colon = NULL;
        unsigned port;
        char portbuf[8];

        for (const char *q = p; q < p + hostlen; q++)
            if (*q == ':')
                colon = q;
        if (!colon || colon == p || (size_t)(p + hostlen - colon - 1) >= sizeof(portbuf))
            return 0;
        for (const char *q = p; q < colon; q++)
            if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
                  (*q >= '0' && *q <= '9') || strchr(".-_:[]", *q)))
                return 0;
        snprintf(portbuf, sizeof(portbuf), "%.*s", (int)(p + hostlen - colon - 1), colon + 1);
        if (parse_uint(portbuf, 1, 65535, &port) < 0)
            return 0;
        p += hostlen;
        if (*p == ',' && (*++p == '\0' || *p == '/'))
            return 0;
    }
    return end > 0;
}

/* A ZooKeeper path prefix: "/a/b", no trailing slash, no empty or dot segments. */
static int valid_zk_root(const char *v)
{
    size_t len = strlen(v);

    if (len < 2 || len > 200 || v[0] != '/' || v[len - 1] == '/' || strstr(v, "//"))
        return 0;
    if (strstr(v, "/./") || strstr(v, "/../") ||
        (len >= 2 && strcmp(v + len - 2, "/.") == 0) ||
        (len >= 3 && strcmp(v + len - 3, "/..") == 0))
        return 0;
    for (const char *p = v; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || strchr("/._-", *p)))
            return 0;
    return 1;
}

#define SET_ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)

#define GLOBS_MAX 64
#define GLOB_LEN_MAX 200

/* A SETTING_GLOBS value: 1..GLOBS_MAX patterns, each 1..GLOB_LEN_MAX bytes
 * of lock-name characters and glob characters, separated by commas. 0 and
 * a message in err, or -1. */
static int check_globs(const char *key, const char *v, char *err, size_t errlen)
{
    unsigned n = 0;

    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");

        if (len == 0 || len > GLOB_LEN_MAX)
            return SET_ERR("%s: '%s': each pattern must be 1 to %d bytes, separated by single "
                           "commas", key, v, GLOB_LEN_MAX);
        if (++n > GLOBS_MAX)
            return SET_ERR("%s: more than %d patterns", key, GLOBS_MAX);
        for (size_t i = 0; i < len; i++)
            if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
                  (p[i] >= '0' && p[i] <= '9') || strchr("._:@-*?[]!", p[i])))
                return SET_ERR("%s: '%.*s': a pattern may hold A-Z a-z 0-9 . _ : @ - and "
                               "* ? [ ] ! only", key, (int)len, p);
        p += len;
        if (!*p)
            return 0;
    }
}

int settings_globs_match(const char *globs, const char *name)
{
    char pat[GLOB_LEN_MAX + 1];

    for (const char *p = globs; p && *p;) {
        size_t len = strcspn(p, ",");

        if (len <= GLOB_LEN_MAX) {
            memcpy(pat, p, len);
            pat[len] = '\0';
            if (fnmatch(pat, name, 0) == 0)
                return 1;
        }
        p += len;
        if (*p)
            p++;
    }
    return 0;
}

/* A row's type and the offset of its field. The pointer comparison, never
 * evaluated, makes a field of another C type than the type implies a
 * compiler warning ("comparison of distinct pointer types"). */
#define FIELD(f, ctype) \
    (offsetof(struct settings, f) + 0 * sizeof(&((struct settings *)0)->f == (ctype *)0))
#define UINT(f)      SETTING_UINT, FIELD(f, unsigned)
#define MODE(f)      SETTING_MODE, FIELD(f, unsigned)
#define LOG_LEVEL(f) SETTING_LOG_LEVEL, FIELD(f, enum log_level)
#define LISTEN(f)    SETTING_LISTEN, FIELD(f, char *)
#define PATH(f)      SETTING_PATH, FIELD(f, char *)
#define ZK_HOSTS(f)  SETTING_ZK_HOSTS, FIELD(f, char *)
#define ZK_ROOT(f)   SETTING_ZK_ROOT, FIELD(f, char *)
#define BOOL(f)      SETTING_BOOL, FIELD(f, unsigned)
#define CLIENT_CERTS(f) SETTING_CLIENT_CERTS, FIELD(f, enum tls_client_certs)
#define GROUP(f)     SETTING_GROUP, FIELD(f, char *)
#define GLOBS(f)     SETTING_GLOBS, FIELD(f, char *)

/* struct setting.restart: NULL, or the name a reload warning gives a group. */
#define ON_SIGHUP    NULL
#define RESTART_UNIX "unix_socket or its mode"
#define RESTART_ZK   "[zookeeper] settings"
#define RESTART_TLS  "[tls] settings (SIGHUP re-reads the files themselves)"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/*
 * Every setting, once. A default is written as in the file and goes through
 * the same checks as a value read from it. [log] comes first because the
 * "reloaded:" log line lists rows in this order and has always begun with
 * the log level.
 */
static const struct setting rows[] = {
    /* section, key, type and field, default, min, max, restart, help */
    { "log", "level", LOG_LEVEL(log_level), "info", 0, 0, ON_SIGHUP,
      "error, warn, info or debug (-v means debug)" },
    { "server", "listen", LISTEN(listen), SETTINGS_LISTEN_DEFAULT, 0, 0, "listen",
      "TCP address, numeric IP:PORT or [IPv6]:PORT; port 0 picks a free one" },
    { "server", "unix_socket", PATH(unix_socket), "", 0, SUN_PATH_MAX, RESTART_UNIX,
      "also listen on this Unix socket; empty: none" },
    /* owner and group; widen it in the file if needed */
    { "server", "unix_socket_mode", MODE(unix_socket_mode), "0660", 0, 0777, RESTART_UNIX,
      "permission bits of the Unix socket, in octal" },
    /* 32: the longest group name useradd(8) allows */
    { "server", "unix_socket_group", GROUP(unix_socket_group), "", 0, 32, "unix_socket_group",
      "group of the Unix socket (name or number); empty: the daemon's" },
    /* Turning AUTH on or off changes every connection's rules: a restart.
     * SIGHUP re-reads the file itself. */
    { "server", "users_file", PATH(users_file), "", 0, 4096, "users_file",
      "users who may connect (name:hash:patterns lines); empty: no AUTH" },
    { "server", "allow_anonymous", BOOL(allow_anonymous), "no", 0, 1, "allow_anonymous",
      "yes: listen on a non-loopback address even without users_file" },
    /* a few MB of buffers at most; raise with ulimit -n */
    { "server", "max_clients", UINT(max_clients), "4096", 1, 1000000, ON_SIGHUP,
      "connections served at once; one more is refused with ERR LIMIT" },
    /* the longest valid request is ~225 bytes */
    { "server", "max_line", UINT(max_line), "1024", 256, 1048576, ON_SIGHUP,
      "longest request line in bytes, LF excluded" },
    /* bounds table memory to ~max_clients * 256 holds */
    { "server", "max_locks_per_client", UINT(max_locks_per_client), "256", 1, 1000000,
      ON_SIGHUP, "locks one connection may hold or wait for at once" },
    /* a lease costs well under 1 KB: ~10 MB at most */
    { "server", "max_leases", UINT(max_leases), "10000", 1, 1000000, ON_SIGHUP,
      "leases (LOCK ... ttl=) held or awaited through this daemon, all clients together" },
    /* a tenth of max_leases: one user (or address) cannot take them all */
    { "server", "max_leases_per_user", UINT(max_leases_per_user), "1000", 1, 1000000,
      ON_SIGHUP, "leases held or awaited by one user (without users_file: one client address)" },
    /* a kept hold costs ~500 bytes and a log line, and outlives its client:
     * ~5 MB at most, as max_leases */
    { "server", "max_kept_holds", UINT(max_kept_holds), "10000", 1, 1000000, ON_SIGHUP,
      "holds that may outlive their client: with a lock-delay (held or awaited), or kept "
      "after UNLOCK keep=; all clients together" },
    /* a tenth of max_kept_holds, and above max_locks_per_client: one
     * connection may keep all its holds, one user cannot take them all */
    { "server", "max_kept_holds_per_user", UINT(max_kept_holds_per_user), "1000", 1, 1000000,
      ON_SIGHUP, "of max_kept_holds, those of one user (without users_file: one client "
      "address)" },
    /* a minute: past a restart or a network blip, short of keeping a dead
     * client's locks for long; an hour at most */
    { "server", "max_grace_ms", UINT(max_grace_ms), "60000", 100, 3600000, ON_SIGHUP,
      "the longest GRACE a client may ask: how long its holds outlive its connection" },
    /* a session costs a few hundred bytes and a timer, as a lease */
    { "server", "max_sessions", UINT(max_sessions), "10000", 1, 1000000, ON_SIGHUP,
      "sessions (GRACE) open through this daemon, attached or detached, all clients" },
    /* a tenth of max_sessions, as max_leases_per_user */
    { "server", "max_sessions_per_user", UINT(max_sessions_per_user), "1000", 1, 1000000,
      ON_SIGHUP, "sessions of one user (without users_file: one client address)" },
    /* a tenth of the daemon's 10000 watches, as max_leases_per_user */
    { "server", "max_watches_per_user", UINT(max_watches_per_user), "1000", 1, 1000000,
      ON_SIGHUP, "WATCH subscriptions of one user (without users_file: one client address), "
      "all its connections together" },
    /* 0: opt-in per request (delay=), so a client that dies does not hold
     * up the next one unless it asked; 60 s as Consul's upper bound */
    { "server", "lock_delay_ms", UINT(lock_delay_ms), "0", 0, 60000, ON_SIGHUP,
      "lock-delay of a LOCK or TRYLOCK without delay=: how long a hold that ends without "
      "a release keeps the name" },
    /* Hashing uses at most one core, so that the event loop keeps another
     * one on a small machine: 50 yescrypt or ~1000 sha512crypt checks a second. */
    { "server", "auth_threads", UINT(auth_threads), "1", 1, 64, "auth_threads",
      "threads that check AUTH passwords, off the event loop" },
    /* 64 yescrypt checks are ~1.3 s of one thread's work: a login behind a
     * full queue is answered within about that. */
    { "server", "auth_max_pending", UINT(auth_max_pending), "64", 1, 100000, ON_SIGHUP,
      "AUTH requests queued or being checked at once, all clients; one more is answered "
      "ERR LIMIT" },
    /* A client logs in once per connection: a few connections of one host
     * starting together, while one host cannot fill the queue. */
    { "server", "auth_max_pending_per_address", UINT(auth_max_pending_per_address), "4", 1,
      100000, ON_SIGHUP, "AUTH requests of one source address queued or being checked at "
      "once; one more is answered ERR LIMIT" },
    /* More wrong passwords in a minute than a person types: at most ~14,400
     * guesses a day from one address. */
    { "server", "auth_fail_limit", UINT(auth_fail_limit), "10", 0, 1000000, ON_SIGHUP,
      "failed AUTHs of one source address within auth_backoff_ms after which its AUTHs "
      "are refused for auth_backoff_ms; 0: no back-off" },
    /* 1000 at least: the delay of a failure's answer */
    { "server", "auth_backoff_ms", UINT(auth_backoff_ms), "60000", 1000, 86400000, ON_SIGHUP,
      "window in which auth_fail_limit failures are counted, and the back-off they start" },
    /* As the TLS handshake's 10 s (daemon/tls.h): a client that means to log
     * in does so in its first round trips; the one that does not holds a
     * slot of max_clients that a remote client could use. */
    { "server", "login_timeout_ms", UINT(login_timeout_ms), "10000", 0, 86400000, ON_SIGHUP,
      "with users_file: ms a connection may stay without a login before it is closed "
      "with ERR NOAUTH; 0: no deadline" },
    /* 0: many clients share an address (NAT, every local client on 127.0.0.1),
     * so no count suits every site; set it where clients come from many hosts */
    { "server", "max_clients_per_address", UINT(max_clients_per_address), "0", 0, 1000000,
      ON_SIGHUP, "TCP connections (plain and TLS) of one source address at once; one more "
      "is refused with ERR LIMIT; 0: no cap" },
    /* A client host that dies sends no FIN: without probes its locks would
     * stay held for the kernel's 2 h + 9 * 75 s. 30 + 3 * 10 s: within a minute. */
    { "server", "tcp_keepalive_idle_s", UINT(tcp_keepalive_idle_s), "30", 1, 32767, ON_SIGHUP,
      "seconds a TCP client may be silent before the kernel probes it" },
    { "server", "tcp_keepalive_interval_s", UINT(tcp_keepalive_interval_s), "10", 1, 32767,
      ON_SIGHUP, "seconds between unanswered keepalive probes" },
    { "server", "tcp_keepalive_count", UINT(tcp_keepalive_count), "3", 1, 127, ON_SIGHUP,
      "unanswered keepalive probes after which the connection is closed" },
    /* Keepalive probes only a connection with nothing in flight; a reply left
     * unacknowledged would be retransmitted for ~15 min. When it is not 0, Linux
     * ends a probed connection by this instead of by the count (at the first
     * probe this long after the peer was last heard): it matches idle +
     * interval * count. */
    { "server", "tcp_user_timeout_ms", UINT(tcp_user_timeout_ms), "60000", 0, 86400000,
      ON_SIGHUP, "ms sent data may stay unacknowledged before the connection is closed; "
      "0: the kernel's default" },
    /* No authentication on it: loopback (or a network only Prometheus reaches) */
    { "server", "metrics_listen", LISTEN(metrics_listen), "", 0, 0, "metrics_listen",
      "HTTP address of /metrics and /healthz, numeric IP:PORT or [IPv6]:PORT; empty: off" },
    /* Off by default: README.md, "Serving other machines" */
    { "tls", "listen", LISTEN(tls_listen), "", 0, 0, RESTART_TLS,
      "TLS address of the same protocol, numeric IP:PORT or [IPv6]:PORT; empty: off" },
    { "tls", "cert_file", PATH(tls_cert_file), "", 0, 4096, RESTART_TLS,
      "PEM certificate chain of the TLS listener (SIGHUP re-reads it)" },
    { "tls", "key_file", PATH(tls_key_file), "", 0, 4096, RESTART_TLS,
      "PEM private key of cert_file, readable by the daemon only (SIGHUP re-reads it)" },
    { "tls", "ca_file", PATH(tls_ca_file), "", 0, 4096, RESTART_TLS,
      "PEM CA certificates that sign client certificates (SIGHUP re-reads it)" },
    { "tls", "crl_file", PATH(tls_crl_file), "", 0, 4096, RESTART_TLS,
      "PEM certificate revocation lists, one of each CA in ca_file: a client certificate "
      "they list is refused (SIGHUP re-reads it)" },
    { "tls", "client_certs", CLIENT_CERTS(tls_client_certs), "none", 0, 0, RESTART_TLS,
      "none, optional or required: a client certificate signed by ca_file; its common "
      "name logs in as that user of users_file" },
    /* A handshake takes a few ms: 32 at once is a host opening a pool of
     * connections, more is a flood that keeps other hosts' handshakes out */
    { "tls", "max_handshakes_per_address", UINT(tls_max_handshakes_per_address), "32", 0,
      1000000, ON_SIGHUP, "TLS handshakes of one source address in progress at once; one "
      "more is closed at once; 0: no cap" },
    { "zookeeper", "hosts", ZK_HOSTS(zk_hosts), "", 0, 0, RESTART_ZK,
      "ZooKeeper ensemble, host:port[,host:port...]; empty: embedded mode" },
    { "zookeeper", "root", ZK_ROOT(zk_root), "/lockbroker", 0, 0, RESTART_ZK,
      "znode under which lock nodes live" },
    /* a dead daemon's locks go within ~10 s */
    { "zookeeper", "session_timeout_ms", UINT(zk_session_timeout_ms), "10000", 1000, 600000,
      RESTART_ZK, "session timeout asked of ZooKeeper, in ms" },
    /* ZooKeeper's sample and Debian's zoo.cfg: the daemon cannot ask the
     * ensemble (PROTOCOL.md, CHECK: how c is established) */
    { "zookeeper", "tick_ms", UINT(zk_tick_ms), "2000", 10, 60000, RESTART_ZK,
      "the ensemble's tickTime in ms, or more: CHECK's window waits for a leader's ping "
      "(3/4 of it) before it counts a session touch" },
    /* see docs/PERFORMANCE.md, "Local handoff": most of the gain, a bounded wait elsewhere;
     * at most 255: the handoffs since a zxid fit in a token's low 8 bits (daemon/ztoken.h) */
    { "zookeeper", "local_handoff", UINT(zk_local_handoff), "32", 0, 255, RESTART_ZK,
      "grants of one lock passed among this daemon's clients before its node goes back "
      "to the queue; 0: every grant through ZooKeeper" },
    /* see docs/PERFORMANCE.md, "Idle nodes": a loop of LOCK/UNLOCK needs no ZooKeeper */
    { "zookeeper", "keep_idle_ms", UINT(zk_keep_idle_ms), "500", 0, 60000, RESTART_ZK,
      "how long a released exclusive lock keeps its ZooKeeper node, for a LOCK of it on "
      "this daemon, while no other daemon waits; 0: the node goes at once" },
    /* open ACLs by default, as before: see README.md, "Distributed mode" */
    { "zookeeper", "auth", PATH(zk_auth), "", 0, 4096, RESTART_ZK,
      "file holding user:password for ZooKeeper's digest scheme; empty: open ACLs" },
    /* NTP keeps clocks within milliseconds; a second covers a VM's hiccups */
    { "zookeeper", "lease_skew_ms", UINT(zk_lease_skew_ms), "1000", 0, 3600000, RESTART_ZK,
      "how far daemons' clocks may disagree: a lease is removed by another daemon only "
      "this long after its end" },
    /* see PROTOCOL.md, "Non-fair names": every daemon of a root must agree */
    { "zookeeper", "nonfair", GLOBS(zk_nonfair), "", 0, 0, RESTART_ZK,
      "names (LOCKS-style patterns, comma-separated) taken with one fixed node, no queue; "
      "empty: none" },
    /* Last: the "reloaded:" line had ended with the [server] rows.
     * ~200 KB of log a second at most per kind; a mass event (every lock
     * lost with a ZooKeeper session) still logs its first thousand names. */
    { "log", "rate_limit", UINT(log_rate_limit), "1000", 0, 1000000, ON_SIGHUP,
      "lines of one kind (one message, whatever its values) written per second at info, "
      "warn and error; one line counts the rest; debug lines are never limited; 0: no limit" },
    /* On: who held what and how long is what people ask the log first; a
     * busy daemon's lines beyond rate_limit a second are counted, not written */
    { "log", "holds", BOOL(log_holds), "yes", 0, 1, ON_SIGHUP,
      "yes: one info line per ended hold (name, how it ended, holder, user, label, token, "
      "waited, held); no: none" },
};

#define NROWS (sizeof(rows) / sizeof(rows[0]))

const struct setting *settings_row(size_t i)
{
    return i < NROWS ? &rows[i] : NULL;
}

/* How a row's field is stored, whatever its file syntax. */
enum storage { STORE_UINT, STORE_LEVEL, STORE_CERTS, STORE_STR };

static enum storage storage_of(enum setting_type t)
{
    switch (t) {
    case SETTING_UINT:
    case SETTING_MODE:
    case SETTING_BOOL:
        return STORE_UINT;
    case SETTING_LOG_LEVEL:
        return STORE_LEVEL;
    case SETTING_CLIENT_CERTS:
        return STORE_CERTS;
    case SETTING_LISTEN:
    case SETTING_PATH:
    case SETTING_ZK_HOSTS:
    case SETTING_ZK_ROOT:
    case SETTING_GROUP:
    case SETTING_GLOBS:
        break;
    }
    return STORE_STR;
}

static void *field_of(struct settings *s, const struct setting *r)
{
    return (char *)s + r->offset;
}

static const void *const_field_of(const struct settings *s, const struct setting *r)
{
    return (const char *)s + r->offset;
}

/* Checks v against the row and stores it. On error *s is unchanged. */
static int set_row(struct settings *s, const struct setting *r, const char *v, char *err,
                   size_t errlen)
{
    void *field = field_of(s, r);
    unsigned u;

    switch (r->type) {
    case SETTING_UINT:
        if (parse_uint(v, r->min, r->max, &u) < 0)
            return SET_ERR("%s: '%s' is not an integer from %u to %u", r->key, v, r->min, r->max);
        *(unsigned *)field = u;
        return 0;
    case SETTING_MODE: {
        char *end;
        unsigned long m = strtoul(v, &end, 8);

        if (*v < '0' || *v > '7' || *end || m < r->min || m > r->max)
            return SET_ERR("%s: '%s' is not an octal mode like 0660", r->key, v);
        *(unsigned *)field = (unsigned)m;
        return 0;
    }
    case SETTING_LOG_LEVEL:
        for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
            if (strcasecmp(v, level_names[i]) == 0) {
                *(enum log_level *)field = (enum log_level)i;
                return 0;
            }
        return SET_ERR("%s: '%s' is not one of error, warn, info, debug", r->key, v);
    case SETTING_LISTEN:
        /* A listener that is off by default may be turned off again. */
        if (valid_listen(v) || (!*v && !*r->def))
            break;
        if (is_name_and_port(v, &u) && strncasecmp(v, "localhost:", 10) == 0)
            return SET_ERR("%s: '%s': host names are not accepted; use 127.0.0.1:%u or "
                           "[::1]:%u", r->key, v, u, u);
        if (is_name_and_port(v, &u))
            return SET_ERR("%s: '%s': host names are not accepted; use a numeric IP:PORT "
                           "or [IPv6]:PORT", r->key, v);
        return SET_ERR("%s: '%s' is not IP:PORT or [IPv6]:PORT", r->key, v);
    case SETTING_PATH:
        if (strlen(v) > r->max)
            return SET_ERR("%s: path longer than %u bytes", r->key, r->max);
        break;
    case SETTING_ZK_HOSTS:
        if (*v && !valid_zk_hosts(v))
            return SET_ERR("%s: '%s' is not host:port[,host:port...][/chroot]", r->key, v);
        break;
    case SETTING_ZK_ROOT:
        if (!valid_zk_root(v))
            return SET_ERR("%s: '%s' is not an absolute ZooKeeper path like /lockbroker",
                           r->key, v);
        break;
    case SETTING_CLIENT_CERTS:
        for (unsigned i = 0; i < sizeof(client_certs_words) / sizeof(client_certs_words[0]); i++)
            if (strcasecmp(v, client_certs_words[i]) == 0) {
                *(enum tls_client_certs *)field = (enum tls_client_certs)i;
                return 0;
            }
        return SET_ERR("%s: '%s' is not one of none, optional, required", r->key, v);
    case SETTING_BOOL:
        for (unsigned i = 0; i < sizeof(bool_words) / sizeof(bool_words[0]); i++)
            if (strcasecmp(v, bool_words[i]) == 0) {
                *(unsigned *)field = i % 2;
                return 0;
            }
        return SET_ERR("%s: '%s' is not yes or no", r->key, v);
    case SETTING_GROUP:
        if (strlen(v) > r->max || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789._-") != strlen(v) || v[0] == '-')
            return SET_ERR("%s: '%s' is not a group name or number", r->key, v);
        break;
    case SETTING_GLOBS:
        if (*v && check_globs(r->key, v, err, errlen) < 0)
            return -1;
        break;
    }
    /* A string type that accepts an empty value means "none" by it. */
    return replace_str(field, *v ? v : NULL) < 0 ? SET_ERR("out of memory") : 0;
}

int settings_init(struct settings *s)
{
    char err[256];

    memset(s, 0, sizeof(*s));
    for (size_t i = 0; i < NROWS; i++)
        if (set_row(s, &rows[i], rows[i].def, err, sizeof(err)) < 0) {
            settings_free(s);
            return -1;      /* out of memory: tests/check_conf.c checks every default */
        }
    return 0;
}

void settings_free(struct settings *s)
{
    for (size_t i = 0; i < NROWS; i++)
        if (storage_of(rows[i].type) == STORE_STR)
            free(*(char **)field_of(s, &rows[i]));
    memset(s, 0, sizeof(*s));
}

/* The index of the row of section and key, or NROWS. */
static size_t row_index(const char *section, const char *key)
{
    size_t i;

    for (i = 0; i < NROWS; i++)
        if (strcmp(rows[i].section, section) == 0 && strcmp(rows[i].key, key) == 0)
            break;
    return i;
}

int settings_set(struct settings *s, const char *section, const char *key,
                 const char *value, char *err, size_t errlen)
{
    bool section_known = false;

    for (size_t i = 0; i < NROWS; i++) {
        if (strcmp(rows[i].section, section) != 0)
            continue;
        section_known = true;
        if (strcmp(rows[i].key, key) == 0)
            return set_row(s, &rows[i], value, err, errlen);
    }
    if (!section_known)
        return SET_ERR("unknown section [%s]", section);
    return SET_ERR("unknown key '%s' in [%s]", key, section);
}

static bool row_equal(const struct setting *r, const struct settings *a, const struct settings *b)
{
    const void *fa = const_field_of(a, r), *fb = const_field_of(b, r);
    const char *sa, *sb;

    switch (storage_of(r->type)) {
    case STORE_UINT:
        return *(const unsigned *)fa == *(const unsigned *)fb;
    case STORE_LEVEL:
        return *(const enum log_level *)fa == *(const enum log_level *)fb;
    case STORE_CERTS:
        return *(const enum tls_client_certs *)fa == *(const enum tls_client_certs *)fb;
    case STORE_STR:
        break;
    }
    sa = *(char *const *)fa;
    sb = *(char *const *)fb;
    return sa == sb || (sa && sb && strcmp(sa, sb) == 0);
}

/* Exchanges the row's values: a string changes owner without a copy. */
static void row_swap(const struct setting *r, struct settings *a, struct settings *b)
{
    void *fa = field_of(a, r), *fb = field_of(b, r);

    switch (storage_of(r->type)) {
    case STORE_UINT: {
        unsigned t = *(unsigned *)fa;
        *(unsigned *)fa = *(unsigned *)fb;
        *(unsigned *)fb = t;
        return;
    }
    case STORE_LEVEL: {
        enum log_level t = *(enum log_level *)fa;
        *(enum log_level *)fa = *(enum log_level *)fb;
        *(enum log_level *)fb = t;
        return;
    }
    case STORE_CERTS: {
        enum tls_client_certs t = *(enum tls_client_certs *)fa;
        *(enum tls_client_certs *)fa = *(enum tls_client_certs *)fb;
        *(enum tls_client_certs *)fb = t;
        return;
    }
    case STORE_STR: {
        char *t = *(char **)fa;
        *(char **)fa = *(char **)fb;
        *(char **)fb = t;
        return;
    }
    }
}

void settings_reload(struct settings *live, struct settings *fresh,
                     void (*needs_restart)(const char *what, void *arg), void *arg)
{
    for (size_t i = 0; i < NROWS; i++) {
        const struct setting *r = &rows[i];
        bool warned = false;

        if (row_equal(r, live, fresh))
            continue;
        if (!r->restart) {
            row_swap(r, live, fresh);
            continue;
        }
        /* One warning per group: an earlier changed row of it gave it. */
        for (size_t j = 0; j < i && !warned; j++)
            warned = rows[j].restart && strcmp(rows[j].restart, r->restart) == 0 &&
                     !row_equal(&rows[j], live, fresh);
        if (!warned)
            needs_restart(r->restart, arg);
    }
}

void settings_format_reloadable(const struct settings *s, char *buf, size_t len)
{
    size_t used = 0;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < NROWS && used < len; i++) {
        const struct setting *r = &rows[i];
        const void *f = const_field_of(s, r);
        bool bare = strcmp(r->section, "server") == 0;
        char value[32];
        const char *v = value;
        int n;

        if (r->restart)
            continue;
        /* The value as the file would write it. */
        switch (r->type) {
        case SETTING_UINT:
            snprintf(value, sizeof(value), "%u", *(const unsigned *)f);
            break;
        case SETTING_MODE:
            snprintf(value, sizeof(value), "0%03o", *(const unsigned *)f);
            break;
        case SETTING_BOOL:
            v = *(const unsigned *)f ? "yes" : "no";
            break;
        case SETTING_LOG_LEVEL:
            v = settings_log_level_name(*(const enum log_level *)f);
            break;
        case SETTING_CLIENT_CERTS:
            v = settings_client_certs_name(*(const enum tls_client_certs *)f);
            break;
        case SETTING_LISTEN:
        case SETTING_PATH:
        case SETTING_ZK_HOSTS:
        case SETTING_ZK_ROOT:
        case SETTING_GROUP:
        case SETTING_GLOBS:
            v = *(char *const *)f ? *(char *const *)f : "(none)";
            break;
        }
        n = snprintf(buf + used, len - used, "%s%s%s%s %s", used ? ", " : "",
                     bare ? "" : r->section, bare ? "" : " ", r->key, v);
        used += n > 0 ? (size_t)n : 0;
    }
}

/*
 * inih returns the line of the first error, a syntax error or a value the
 * handler refused, but does not tell the handler its line. The loader
 * reads the input itself and counts lines (inih counts one per reader
 * call), so that a value error is reported only with its own line.
 */
struct load_ctx {
    struct settings *s;
    FILE *f;            /* the input: a file, or else... */
    const char *rest;   /* ...what is left of a string */
    int read_errno;     /* why reading the file failed, or 0 */
    int line;           /* lines handed to inih so far */
    bool after_key;     /* a "key = value" line since the last section line:
                         * inih then takes an indented line as more value */
    bool more_value;    /* the line handed to inih is more value for the key above */
    int set_on[NROWS];  /* the line each row was set on, 0 if not yet: a key
                         * given twice is an error, not a silent last-wins */
    int err_line;       /* the line of msg */
    char msg[256];      /* the first value error, without location */
};

/* The first of chars in s, or the start of an inline comment (';' after a
 * space or tab), or the end of s: where inih's own search stops. */
static const char *find_or_comment(const char *s, const char *chars)
{
    bool was_space = false;

    while (*s && !strchr(chars, *s) && !(was_space && *s == ';')) {
        was_space = isspace((unsigned char)*s);
        s++;
    }
    return s;
}

/*
 * Looks at a line as inih's ini_parse_stream() will, far enough to find one
 * that is neither blank, a comment, a section, more value for the key above
 * (indented), nor "key = value". inih calls that a syntax error, or splits
 * "listen 127.0.0.1:7411" at the ':' into the unknown key "listen
 * 127.0.0.1": this says that '=' is missing instead. Returns false for
 * such a line, with the message in ctx.
 */
static bool check_line(struct load_ctx *ctx, const char *line)
{
    const char *start = line, *end;

    if (ctx->line == 1 && strncmp(start, "\xEF\xBB\xBF", 3) == 0)
        start += 3;                     /* a UTF-8 byte order mark */
    while (isspace((unsigned char)*start))
        start++;
    if (!*start || *start == ';' || *start == '#')
        return true;
    if (ctx->after_key && start > line) {
        ctx->more_value = true;
        return true;
    }
    if (*start == '[') {
        if (*find_or_comment(start + 1, "]") == ']')
            ctx->after_key = false;
        return true;                    /* without ']' inih says syntax error */
    }
    end = find_or_comment(start, "=");
    if (*end == '=') {
        ctx->after_key = true;
        return true;
    }
    while (end > start && isspace((unsigned char)end[-1]))
        end--;
    if (!ctx->msg[0]) {
        snprintf(ctx->msg, sizeof(ctx->msg), "'%.*s' has no '=' (write key = value)",
                 (int)(end - start), start);
        ctx->err_line = ctx->line;
    }
    return false;
}

/* fgets()-like reader for ini_parse_stream(). A line longer than inih's
 * buffer would be split in two silently, and inih would read a line only up
 * to a NUL byte in it: both are reported as errors instead. */
static char *read_line(char *buf, int size, void *stream)
{
    struct load_ctx *ctx = stream;
    bool too_long = false, nul = false;

    if (size < 2)
        return NULL;
    if (ctx->f) {
        size_t n = 0;
        int ch = EOF;

        /* getc(), not fgets(): strlen() would stop at a NUL byte and take
         * what follows it for the next line. */
        while (n < (size_t)size - 1 && (ch = getc(ctx->f)) != EOF) {
            buf[n++] = (char)ch;
            nul = nul || ch == '\0';
            if (ch == '\n')
                break;
        }
        if (ferror(ctx->f)) {
            ctx->read_errno = errno ? errno : EIO;
            return NULL;                /* inih takes either for the end */
        }
        if (n == 0)
            return NULL;
        buf[n] = '\0';
        if (n == (size_t)size - 1 && buf[n - 1] != '\n' && (ch = getc(ctx->f)) != EOF) {
            too_long = true;
            while (ch != EOF && ch != '\n')    /* skip the rest of that line */
                ch = getc(ctx->f);
        }
    } else {
        size_t n = strcspn(ctx->rest, "\n");

        if (!*ctx->rest)
            return NULL;
        /* The line and its LF must fit with the NUL, as with fgets(). */
        too_long = n + (ctx->rest[n] == '\n') > (size_t)size - 1;
        if (ctx->rest[n] == '\n')
            n++;                        /* keep the LF, as fgets() does */
        if (too_long) {
            ctx->rest += n;
        } else {
            memcpy(buf, ctx->rest, n);
            buf[n] = '\0';
            ctx->rest += n;
        }
    }
    ctx->line++;
    ctx->more_value = false;
    if ((too_long || nul) && !ctx->msg[0]) {
        if (too_long)
            snprintf(ctx->msg, sizeof(ctx->msg), "line longer than %d bytes", size - 2);
        else
            snprintf(ctx->msg, sizeof(ctx->msg), "NUL byte in the line (not a text file?)");
        ctx->err_line = ctx->line;
    }
    if (too_long || nul || !check_line(ctx, buf))
        snprintf(buf, (size_t)size, "[\n");   /* a syntax error on this line */
    return buf;
}

/* inih handler: returns 0 on error so that ini_parse reports the line. */
static int on_ini_value(void *user, const char *section, const char *key, const char *value)
{
    struct load_ctx *ctx = user;
    size_t i = row_index(section, key);
    char msg[256];

    /* inih hands an indented line on as the same key again: not a repeat. */
    if (i < NROWS && ctx->set_on[i] && !ctx->more_value) {
        snprintf(msg, sizeof(msg), "'%s' in [%s] is set twice (lines %d and %d); keep one",
                 key, section, ctx->set_on[i], ctx->line);
    } else if (settings_set(ctx->s, section, key, value, msg, sizeof(msg)) == 0) {
        if (i < NROWS && !ctx->set_on[i])
            ctx->set_on[i] = ctx->line;
        return 1;
    }
    if (!ctx->msg[0]) {
        snprintf(ctx->msg, sizeof(ctx->msg), "%s", msg);
        ctx->err_line = ctx->line;
    }
    return 0;
}

static int report(int rc, const struct load_ctx *ctx, const char *source, char *err, size_t errlen)
{
    if (ctx->read_errno)            /* the rest of the file was never seen */
        return SET_ERR("%s: cannot read: %s", source, strerror(ctx->read_errno));
    if (rc == 0)
        return 0;
    if (rc == -2)
        return SET_ERR("%s: out of memory", source);
    return SET_ERR("%s:%d: %s", source, rc,
                   ctx->msg[0] && ctx->err_line == rc ? ctx->msg : "syntax error");
}

/* Opens path for reading if it is a regular file. Returns the stream, or
 * NULL with "PATH: why" in err. */
static FILE *open_regular(const char *path, char *err, size_t errlen)
{
    struct stat st;
    FILE *f;
    int fd, e;

    /* O_NONBLOCK: a FIFO is refused below, not waited on for a writer. A
     * directory opens, and reads as an empty file, with no settings. */
    if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
        e = errno;
        if (fd >= 0)
            close(fd);
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "%s: %s", path,
                 S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
        return NULL;
    }
    if (!(f = fdopen(fd, "r"))) {
        e = errno;
        close(fd);
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
    }
    return f;
}

/* What is wrong with the n bytes of an auth file in buf (NUL-terminated),
 * or NULL after cutting buf to the secret. more: bytes beyond buf's room. */
static const char *zk_auth_problem(char *buf, size_t n, size_t max, bool more)
{
    size_t line = strcspn(buf, "\n");
    char *colon;

    if (memchr(buf, '\0', n))
        return "it holds a NUL byte";
    if (line > max || (more && line == n))
        return "too long";
    if (more || line + 1 < n)
        return "more than one line; write only user:password";
    if (line > 0 && buf[line - 1] == '\r')
        line--;
    buf[line] = '\0';
    colon = strchr(buf, ':');
    if (!colon || colon == buf || colon[1] == '\0')
        return "not user:password (a user name, ':', a password)";
    return NULL;
}

int settings_read_zk_auth(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
    struct stat st;
    FILE *f = open_regular(path, err, errlen);
    const char *why;
    size_t n;
    bool more;

    if (!f)
        return -1;
    if (fstat(fileno(f), &st) == 0 && secret_file_check(path, st.st_mode, err, errlen) < 0) {
        fclose(f);
        return -1;
    }
    n = len > 2 ? fread(buf, 1, len - 1, f) : 0;
    more = n == len - 1 && getc(f) != EOF;
    why = ferror(f) ? "cannot read it" : len < 3 ? "no room" : NULL;
    fclose(f);
    if (!why) {
        buf[n] = '\0';
        why = zk_auth_problem(buf, n, len - 2, more);
    }
    if (!why)
        return 0;
    explicit_bzero(buf, len);
    if (strcmp(why, "too long") == 0)
        return SET_ERR("%s: longer than %zu bytes", path, len - 2);
    return SET_ERR("%s: %s", path, why);
}

int settings_load_file(struct settings *s, const char *path, char *err, size_t errlen)
{
    struct load_ctx ctx = { .s = s };
    int rc;

    if (!(ctx.f = open_regular(path, err, errlen)))
        return -1;
    rc = ini_parse_stream(read_line, &ctx, on_ini_value, &ctx);
    fclose(ctx.f);
    return report(rc, &ctx, path, err, errlen);
}

int settings_load_string(struct settings *s, const char *text, const char *source,
                         char *err, size_t errlen)
{
    struct load_ctx ctx = { .s = s, .rest = text };

    return report(ini_parse_stream(read_line, &ctx, on_ini_value, &ctx), &ctx, source,
                  err, errlen);
}
