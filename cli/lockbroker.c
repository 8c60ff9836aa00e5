/*
 * lockbroker.c - the command-line client of lockbrokerd: options, address,
 * and the subcommands run, lease, renew, release, status, locks, elect,
 * observe, break, stats and ping, one row each in subcommands[].
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lb_client.h"
#include "lb_json.h"
#include "proto.h"
#include "lb_run.h"
#include "lb_tls.h"
#include "lb_view.h"

#define IO_TIMEOUT_DEFAULT_MS 10000   /* a daemon on the same network answers in far less */
#define GRACE_DEFAULT_MS 5000         /* time to clean up after SIGTERM, as systemd's stop timeouts go */
#define SESSION_GRACE_DEFAULT_MS 10000 /* run: a restart or a network blip is over in far less,
                                       * and a drop found late leaves 4 to 6.5 s */
#define SESSION_GRACE_MIN_MS 100      /* GRACE's bounds (PROTOCOL.md); the daemon's */
#define SESSION_GRACE_MAX_MS 3600000  /* max_grace_ms may be lower, and says so */

struct options {
    const char *host;      /* -H, or NULL */
    const char *unix_path; /* -U, or NULL */
    int64_t wait_ms;       /* -w; -1 = not given (wait for ever) */
    int64_t grace_ms;      /* -g */
    int64_t io_ms;         /* -t */
    int shared;            /* -s */
    unsigned limit;        /* -n, 1..PROTO_LIMIT_MAX; 0 = not given */
    unsigned given;        /* OPTS_* of the options given, which the subcommand checks */
    int timeout_exit;      /* -E: the status when -w runs out (run and lease); -1: 124 */
    const char *label;     /* --label (run and lease), checked; NULL: the default */
    int verbose;           /* -v (run and lease): say what a long wait waits for */
    int quiet;             /* -q (run and lease): a lock not granted within -w prints nothing */
    const char *user;      /* -a, or NULL: no AUTH */
    const char *password_file; /* --password-file, or NULL: $LOCKBROKER_PASSWORD */
    int tls;               /* --tls 1, --no-tls 0; -1: neither ($LOCKBROKER_TLS decides) */
    const char *cacert;    /* --cacert, or NULL: $LOCKBROKER_CACERT */
    const char *cert;      /* --cert, or NULL: $LOCKBROKER_CERT */
    const char *key;       /* --key, or NULL: in --cert's file ($LOCKBROKER_KEY without --cert) */
    int json;              /* --json (stats, status, locks): JSON objects */
    int human;             /* status, locks: 1 a table (--human), 0 the lines (--raw),
                            * -1 a table when stdout is a terminal */
    int cluster;           /* locks --cluster: every daemon's holders (HOLDERS) */
    int64_t min_hold_ms;   /* run --min-hold; 0: not given */
    int release_on_failure; /* run --release-on-failure */
    int64_t session_grace_ms; /* run --session-grace; 0: off */
};

/* Long options without a short form. */
enum { OPT_LABEL = 256, OPT_PASSWORD_FILE, OPT_JSON, OPT_RAW, OPT_HUMAN, OPT_CLUSTER,
       OPT_NONBLOCK, OPT_MIN_HOLD, OPT_RELEASE_ON_FAILURE, OPT_TLS, OPT_NO_TLS, OPT_CACERT,
       OPT_CERT, OPT_KEY, OPT_SESSION_GRACE };

/*
 * The options only some subcommands take, by group. -H, -U, -t, -a,
 * --password-file, the TLS ones, --human and --raw are taken by all (the
 * last two do nothing where there is no table).
 */
enum {
    OPTS_LOCK = 1 << 0,      /* -w, --nonblock, -s, -n, -E: how run and lease wait and hold */
    OPTS_GRACE = 1 << 1,     /* -g: run's grace after a loss */
    OPTS_LABEL = 1 << 2,     /* --label, -v, -q: run and lease */
    OPTS_JSON = 1 << 3,      /* --json: stats, status, locks */
    OPTS_CLUSTER = 1 << 4,   /* --cluster: locks */
    OPTS_MIN_HOLD = 1 << 5,  /* --min-hold, --release-on-failure: run */
    OPTS_SESSION = 1 << 6,   /* --session-grace: run */
};

/* --help: the subcommands' rows, then usage_options. */
static void usage(FILE *f);

static int usage_error(const char *fmt, const char *arg)
{
    fputs("lockbroker: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(" (lockbroker --help for usage)\n", stderr);
    return CLI_EXIT_USAGE;
}

/*
 * A duration: decimal digits and an optional unit, ms (the default), s, m
 * or h. "60" is 60 ms, as the protocol counts, whatever flock(1) users
 * expect; "60s" is a minute. Stores milliseconds, min_ms..max_ms, in *out
 * (max_ms must be below INT64_MAX / 10, so that no step overflows).
 * Returns 0, or -1.
 */
static int parse_duration(const char *s, int64_t min_ms, int64_t max_ms, int64_t *out)
{
    static const struct { const char *unit; int64_t ms; } units[] = {
        { "", 1 }, { "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 }, { "h", 3600 * 1000 },
    };
    const char *p = s;
    int64_t v = 0;

    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > max_ms)
            return -1;   /* too large in any unit; also stops an overflow */
    }
    if (p == s)
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(p, units[i].unit) != 0)
            continue;
        if (v > max_ms / units[i].ms)
            return -1;
        v *= units[i].ms;
        if (v < min_ms)
            return -1;
        *out = v;
        return 0;
    }
    return -1;
}

/*
 * A plain number from 1 to 999 is most likely meant as seconds (flock's
 * -w 60, timeout's 60): say once, on stderr, that it is milliseconds, and
 * how to write either. 0 and numbers of 1000 and more are clearly ms.
 */
static void warn_unitless(const char *what, const char *arg, int64_t ms)
{
    static bool warned;

    if (warned || ms < 1 || ms > 999 || arg[strspn(arg, "0123456789")] != '\0')
        return;
    warned = true;
    fprintf(stderr, "lockbroker: warning: %s %s is %s milliseconds, not seconds: write %ss "
            "(or %s000) for seconds, %sms for milliseconds without this warning\n", what, arg,
            arg, arg, arg, arg);
}

/*
 * A duration from the command line (what: "-w", "lease: TTL", ...), or a
 * usage error (reported) that gives the range and the units. A plain
 * number under 1000 is taken, with a warning (warn_unitless()).
 */
static int check_duration(const char *what, const char *arg, int64_t min_ms, int64_t max_ms,
                          int64_t *out)
{
    char msg[512];

    if (parse_duration(arg, min_ms, max_ms, out) == 0) {
        warn_unitless(what, arg, *out);
        return 0;
    }
    snprintf(msg, sizeof(msg), "%s: expected milliseconds, or a time with a unit (500ms, 60s, "
             "2m, 1h), from %lld to %lld ms; got '%s'", what, (long long)min_ms,
             (long long)max_ms, arg);
    return usage_error("%s", msg);
}

/* A fencing token: 1-20 decimal digits, at most 2^64 - 1. Returns 0, or -1. */
static int parse_token(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    if (*s == '\0' || strlen(s) > 20)
        return -1;
    for (const char *p = s; *p; p++) {
        unsigned d = (unsigned)(*p - '0');

        if (*p < '0' || *p > '9' || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* The number of holders of a semaphore, 1..PROTO_LIMIT_MAX. Returns 0, or -1. */
static int parse_limit(const char *s, unsigned *out)
{
    unsigned v = 0;

    if (*s == '\0')
        return -1;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (unsigned)(*p - '0');
        if (v > PROTO_LIMIT_MAX)
            return -1;   /* also stops an overflow */
    }
    if (v < 1)
        return -1;
    *out = v;
    return 0;
}

/*
 * Whether label is a valid CLIENT label (1-100 bytes 0x21-0x7e): the
 * protocol module parses `CLIENT <label>` as the daemon would.
 */
static bool label_valid(const char *label)
{
    char req[PROTO_LABEL_MAX + 16];
    struct proto_req r;
    size_t len = strlen(label);
    int n;

    if (len == 0 || len > PROTO_LABEL_MAX)
        return false;
    n = snprintf(req, sizeof(req), "CLIENT %s", label);
    return proto_parse(req, (size_t)n, &r) == PROTO_REQUEST && r.cmd == PROTO_CMD_CLIENT &&
           r.label_len == len;
}

/*
 * What is wrong with glob as a LOCKS pattern (1-200 name bytes and * ? [ ] !,
 * its sets closed), as the daemon would parse it: NULL when nothing; else a
 * static string, the protocol's own words for an unclosed set.
 */
static const char *glob_problem(const char *glob)
{
    static const char *const chars = "expected 1-200 characters of lock names "
                                     "(A-Z a-z 0-9 . _ : @ -) and * ? [ ] !";
    char req[PROTO_NAME_MAX + 16];
    struct proto_req r;
    size_t len = strlen(glob);
    int n;

    if (len == 0 || len > PROTO_NAME_MAX)
        return chars;
    n = snprintf(req, sizeof(req), "LOCKS %s", glob);
    if (proto_parse(req, (size_t)n, &r) == PROTO_REQUEST && r.cmd == PROTO_CMD_LOCKS &&
        r.name_len == len)
        return NULL;
    /* Every other refusal of a pattern says what a pattern is made of. */
    if (r.errmsg && strncmp(r.errmsg, "a '", 3) == 0)
        return r.errmsg;
    return chars;
}

/* How the user spelled the option getopt just complained about. */
static const char *option_name(char **argv, int opt)
{
    static char shortopt[3] = "-?";

    if (opt != 0 && strncmp(argv[optind - 1], "--", 2) != 0) {
        shortopt[1] = (char)opt;
        return shortopt;
    }
    return argv[optind - 1];
}

/*
 * -H, -U, -t, -a, --password-file, --tls, --no-tls, --cacert, --cert,
 * --key: which broker, how, and as whom. Returns 0 or a usage error.
 */
static int parse_broker_option(struct options *o, int opt, const char *arg)
{
    switch (opt) {
    case OPT_TLS:
    case OPT_NO_TLS:
        o->tls = opt == OPT_TLS;
        return 0;
    case OPT_CACERT:
        o->cacert = arg;
        return 0;
    case OPT_CERT:
        o->cert = arg;
        return 0;
    case OPT_KEY:
        o->key = arg;
        return 0;
    case 'H':
        o->host = arg;
        return 0;
    case 'U':
        o->unix_path = arg;
        return 0;
    case 't':
        return check_duration("-t", arg, 1, PROTO_WAIT_MAX, &o->io_ms);
    case 'a':
        if (!proto_user_valid(arg, strlen(arg)))
            return usage_error("-a: expected a user name of 1-64 characters "
                               "A-Z a-z 0-9 . _ @ -, got '%s'", arg);
        o->user = arg;
        return 0;
    default:   /* --password-file */
        o->password_file = arg;
        return 0;
    }
}

/*
 * -w, --nonblock, -g, -E, -s, -n, --label, -v: how run and lease take the
 * lock, noted in o->given for the subcommand to check. Returns 0 or a
 * usage error.
 */
static int parse_lock_option(struct options *o, int opt, const char *arg)
{
    char *end;
    long v;
    int rc;

    switch (opt) {
    case 'w':
        if ((rc = check_duration("-w", arg, 0, PROTO_WAIT_MAX, &o->wait_ms)))
            return rc;
        o->given |= OPTS_LOCK;
        return 0;
    case OPT_NONBLOCK:
        /* flock's spelling of -w 0 (its -n is our --limit) */
        o->wait_ms = 0;
        o->given |= OPTS_LOCK;
        return 0;
    case 'g':
        if ((rc = check_duration("-g", arg, 0, PROTO_WAIT_MAX, &o->grace_ms)))
            return rc;
        o->given |= OPTS_GRACE;
        return 0;
    case 'E':
        v = strtol(arg, &end, 10);
        if (!arg[0] || *end || v < 0 || v > 255)
            return usage_error("-E: expected an exit status from 0 to 255, got '%s'", arg);
        o->timeout_exit = (int)v;
        o->given |= OPTS_LOCK;
        return 0;
    case 's':
        o->shared = 1;
        o->given |= OPTS_LOCK;
        return 0;
    case 'n':
        if (parse_limit(arg, &o->limit) < 0)
            return usage_error("--limit: expected a number of holders from 1 to 65535, "
                               "got '%s'", arg);
        o->given |= OPTS_LOCK;
        return 0;
    case OPT_LABEL:
        if (!label_valid(arg))
            return usage_error("--label: expected 1-100 printable ASCII characters "
                               "other than space, got '%s'", arg);
        o->label = arg;
        o->given |= OPTS_LABEL;
        return 0;
    case OPT_MIN_HOLD:
        if ((rc = check_duration("--min-hold", arg, 0, PROTO_KEEP_MAX, &o->min_hold_ms)))
            return rc;
        o->given |= OPTS_MIN_HOLD;
        return 0;
    case OPT_RELEASE_ON_FAILURE:
        o->release_on_failure = 1;
        o->given |= OPTS_MIN_HOLD;
        return 0;
    case OPT_SESSION_GRACE:
        if (parse_duration(arg, 0, SESSION_GRACE_MAX_MS, &o->session_grace_ms) < 0 ||
            (o->session_grace_ms > 0 && o->session_grace_ms < SESSION_GRACE_MIN_MS))
            return usage_error("--session-grace: expected 0 (off), or a time with a unit "
                               "from 100ms to 1h (5s, 30s, 2m); got '%s'", arg);
        o->given |= OPTS_SESSION;
        return 0;
    case 'q':
        o->quiet = 1;
        o->given |= OPTS_LABEL;
        return 0;
    default:   /* -v */
        o->verbose = 1;
        o->given |= OPTS_LABEL;
        return 0;
    }
}

/* --json, --raw, --human, --cluster: what status, locks and stats print. */
static void parse_output_option(struct options *o, int opt)
{
    switch (opt) {
    case OPT_JSON:
        o->json = 1;
        o->given |= OPTS_JSON;
        break;
    case OPT_RAW:
        o->human = 0;
        break;
    case OPT_HUMAN:
        o->human = 1;
        break;
    default:   /* --cluster */
        o->cluster = 1;
        o->given |= OPTS_CLUSTER;
        break;
    }
}

/*
 * One pass of getopt over argv, stopping at the first operand. Called for
 * the options before the subcommand and again for those after it.
 * Returns 0, -1 for a usage error (reported), or 1 after --help/--version.
 */
static int parse_options(int argc, char **argv, struct options *o, int *exit_code)
{
    static const struct option longopts[] = {
        { "host", required_argument, NULL, 'H' },
        { "unix", required_argument, NULL, 'U' },
        { "wait", required_argument, NULL, 'w' },
        { "nonblock", no_argument, NULL, OPT_NONBLOCK },
        { "min-hold", required_argument, NULL, OPT_MIN_HOLD },
        { "release-on-failure", no_argument, NULL, OPT_RELEASE_ON_FAILURE },
        { "grace", required_argument, NULL, 'g' },
        { "session-grace", required_argument, NULL, OPT_SESSION_GRACE },
        { "conflict-exit-code", required_argument, NULL, 'E' },
        { "timeout", required_argument, NULL, 't' },
        { "shared", no_argument, NULL, 's' },
        { "limit", required_argument, NULL, 'n' },
        { "label", required_argument, NULL, OPT_LABEL },
        { "user", required_argument, NULL, 'a' },
        { "password-file", required_argument, NULL, OPT_PASSWORD_FILE },
        { "tls", no_argument, NULL, OPT_TLS },
        { "no-tls", no_argument, NULL, OPT_NO_TLS },
        { "cacert", required_argument, NULL, OPT_CACERT },
        { "cert", required_argument, NULL, OPT_CERT },
        { "key", required_argument, NULL, OPT_KEY },
        { "json", no_argument, NULL, OPT_JSON },
        { "raw", no_argument, NULL, OPT_RAW },
        { "human", no_argument, NULL, OPT_HUMAN },
        { "cluster", no_argument, NULL, OPT_CLUSTER },
        { "verbose", no_argument, NULL, 'v' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int opt, rc = 0;

    optind = 1;
    opterr = 0;   /* our own messages, with the usage hint */
    while ((opt = getopt_long(argc, argv, "+:H:U:w:g:E:t:sn:a:vqhV", longopts, NULL)) != -1) {
        switch (opt) {
        case 'H': case 'U': case 't': case 'a': case OPT_PASSWORD_FILE:
        case OPT_TLS: case OPT_NO_TLS: case OPT_CACERT: case OPT_CERT: case OPT_KEY:
            rc = parse_broker_option(o, opt, optarg);
            break;
        case 'w': case OPT_NONBLOCK: case 'g': case 'E': case 's': case 'n': case OPT_LABEL:
        case 'v': case 'q': case OPT_MIN_HOLD: case OPT_RELEASE_ON_FAILURE:
        case OPT_SESSION_GRACE:
            rc = parse_lock_option(o, opt, optarg);
            break;
        case OPT_JSON: case OPT_RAW: case OPT_HUMAN: case OPT_CLUSTER:
            parse_output_option(o, opt);
            break;
        case 'h':
            usage(stdout);
            *exit_code = CLI_EXIT_OK;
            return 1;
        case 'V':
            printf("lockbroker %s\n", PACKAGE_VERSION);
            *exit_code = CLI_EXIT_OK;
            return 1;
        case ':':
            *exit_code = usage_error("option %s needs an argument", option_name(argv, optopt));
            return -1;
        default:
            *exit_code = usage_error("unknown option %s", option_name(argv, optopt));
            return -1;
        }
        if (rc != 0) {
            *exit_code = rc;
            return -1;
        }
    }
    return 0;
}

/* -a's password into *auth, and the address logs in with it. Returns 0 or a usage error. */
static int resolve_auth(const struct options *o, struct lb_auth *auth, struct lb_addr *a)
{
    char err[CLIENT_ERR_MAX];
    const char *env = getenv("LOCKBROKER_PASSWORD");

    if (!o->user) {
        if (o->password_file)
            return usage_error("%s", "--password-file is the password of -a USER");
        return 0;
    }
    if (!o->password_file && !env)
        return usage_error("-a %s: no password: set LOCKBROKER_PASSWORD or give "
                           "--password-file FILE", o->user);
    snprintf(auth->user, sizeof(auth->user), "%s", o->user);
    if (lb_read_password(auth, o->password_file, env, err, sizeof(err)) < 0)
        return usage_error("%s", err);
    a->auth = auth;
    return 0;
}

/* The broker's address from -H, -U, $LOCKBROKER_ADDR or the default. */
static int resolve_addr(const struct options *o, struct lb_addr *a)
{
    char err[CLIENT_ERR_MAX];
    const char *env = getenv("LOCKBROKER_ADDR");

    if (o->host && o->unix_path)
        return usage_error("%s", "-H and -U are mutually exclusive");
    if (o->host) {
        if (lb_addr_parse(a, o->host, 1, err, sizeof(err)) < 0)
            return usage_error("-H: %s", err);
    } else if (o->unix_path) {
        if (lb_addr_unix(a, o->unix_path, err, sizeof(err)) < 0)
            return usage_error("-U: %s", err);
    } else if (env && *env) {
        if (lb_addr_parse(a, env, 0, err, sizeof(err)) < 0)
            return usage_error("LOCKBROKER_ADDR: %s", err);
    } else if (lb_addr_parse(a, CLIENT_ADDR_DEFAULT, 1, err, sizeof(err)) < 0) {
        return usage_error("%s", err);
    }
    return 0;
}

/* A LOCKBROKER_* variable's value, NULL when unset or empty. */
static const char *env_value(const char *name)
{
    const char *v = getenv(name);

    return v && *v ? v : NULL;
}

/*
 * Whether to speak TLS (*on), and with which files (*cfg): the options,
 * else the LOCKBROKER_* variables. The client certificate and its key are
 * a pair: from --cert (and --key), or else from the environment. Returns 0
 * or a usage error (reported).
 */
static int resolve_tls(const struct options *o, const struct lb_addr *a,
                       struct tls_config *cfg, bool *on)
{
    const char *env = env_value("LOCKBROKER_TLS");
    int tls = o->tls;

    *on = false;
    if (tls < 0 && env) {
        if (strcmp(env, "1") != 0 && strcmp(env, "0") != 0)
            return usage_error("LOCKBROKER_TLS: expected 1 (TLS) or 0 (plain text), got '%s'",
                               env);
        tls = env[0] == '1';
    }
    if (tls <= 0) {
        if (o->cacert || o->cert || o->key)
            return usage_error("%s", "--cacert, --cert and --key go with --tls "
                               "(or LOCKBROKER_TLS=1)");
        return 0;
    }
    if (a->kind == CLIENT_ADDR_UNIX) {
        /* The daemon's Unix socket is plain text; the variables are for TCP brokers. */
        if (o->tls == 1 || o->cacert || o->cert || o->key)
            return usage_error("%s", "--tls is for a broker's TCP port (-H HOST:PORT), not "
                               "for a Unix socket");
        return 0;
    }
    if (o->key && !o->cert)
        return usage_error("%s", "--key is the key of --cert FILE");
    cfg->cacert = o->cacert ? o->cacert : env_value("LOCKBROKER_CACERT");
    cfg->cert = o->cert ? o->cert : env_value("LOCKBROKER_CERT");
    cfg->key = o->cert ? o->key : env_value("LOCKBROKER_KEY");
    if (cfg->key && !cfg->cert)
        return usage_error("%s", "LOCKBROKER_KEY is the key of LOCKBROKER_CERT, which is "
                           "not set");
    *on = true;
    return 0;
}

/*
 * run's COMMAND is told the broker in LOCKBROKER_ADDR (lb_run.c), so that a
 * lockbroker inside it uses the same one; LOCKBROKER_TLS and the files
 * (cfg; NULL: plain text) say how to reach it, the files as absolute paths
 * since COMMAND may change directory. Returns 0, or -1 with errno.
 */
static int export_tls(const struct tls_config *cfg)
{
    const char *const names[] = { "LOCKBROKER_CACERT", "LOCKBROKER_CERT", "LOCKBROKER_KEY" };
    const char *files[3];

    if (!cfg) {
        const char *env = env_value("LOCKBROKER_TLS");

        return env && strcmp(env, "0") != 0 ? setenv("LOCKBROKER_TLS", "0", 1) : 0;
    }
    files[0] = cfg->cacert;
    files[1] = cfg->cert;
    files[2] = cfg->key;
    if (setenv("LOCKBROKER_TLS", "1", 1) < 0)
        return -1;
    for (size_t i = 0; i < 3; i++) {
        char *abs = files[i] ? realpath(files[i], NULL) : NULL;
        int rc = files[i] ? setenv(names[i], abs ? abs : files[i], 1) : unsetenv(names[i]);

        free(abs);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int check_name(const char *name)
{
    if (proto_name_valid(name, strlen(name)))
        return 0;
    fprintf(stderr, "lockbroker: invalid lock name '%s': names are 1-%d bytes of "
            "A-Z a-z 0-9 . _ : @ -, not . or ..\n", name, PROTO_NAME_MAX);
    return CLI_EXIT_BAD_NAME;
}

/* run's NAME: a name, or a set a,b,c of up to PROTO_SET_MAX (the daemon checks the rest). */
static int check_names(const char *list)
{
    char name[PROTO_NAME_MAX + 2];
    unsigned n = 0;

    for (const char *p = list;; n++) {
        size_t len = strcspn(p, ",");

        snprintf(name, sizeof(name), "%.*s", (int)(len > PROTO_NAME_MAX ? PROTO_NAME_MAX + 1
                                                                        : len), p);
        if (check_name(name) != 0)
            return CLI_EXIT_BAD_NAME;
        if (!p[len])
            break;
        p += len + 1;
    }
    if (n < PROTO_SET_MAX)
        return 0;
    fprintf(stderr, "lockbroker: a set of locks has at most %d names: '%s'\n", PROTO_SET_MAX,
            list);
    return CLI_EXIT_BAD_NAME;
}

/* ------------------------------------------------ status, stats, ping */

/* A connection for one request-reply exchange. */
struct exchange {
    const struct lb_addr *addr;
    struct lb_conn *c;
    int64_t deadline;     /* for the whole exchange */
    char err[CLIENT_ERR_MAX];
};

/* Sends req on x's connection. Returns 0 or an exit status (reported). */
static int exchange_send(struct exchange *x, const char *req)
{
    switch (lb_send(x->c, req, strlen(req), x->deadline, x->err, sizeof(x->err))) {
    case CLIENT_OK:
        return 0;
    case CLIENT_CLOSED:
        fprintf(stderr, "lockbroker: %s closed the connection\n", x->addr->spec);
        return CLI_EXIT_UNAVAILABLE;
    case CLIENT_TIMEOUT:
        fprintf(stderr, "lockbroker: %s: timed out sending\n", x->addr->spec);
        return CLI_EXIT_UNAVAILABLE;
    default:
        fprintf(stderr, "lockbroker: %s: %s\n", x->addr->spec, x->err);
        return CLI_EXIT_UNAVAILABLE;
    }
}

/* Connects and sends req. Returns 0 or an exit status (reported). */
static int exchange_start(struct exchange *x, const struct options *o,
                          const struct lb_addr *a, struct lb_conn *c, const char *req)
{
    int rc;

    x->addr = a;
    x->c = c;
    x->deadline = lb_now_ms() + o->io_ms;
    if ((rc = lb_connect(c, a, x->deadline, x->err, sizeof(x->err))) != 0) {
        fprintf(stderr, "lockbroker: %s\n", x->err);
        return rc;
    }
    return exchange_send(x, req);
}

/* The next reply line into line. Returns 0 or an exit status (reported). */
static int exchange_line(struct exchange *x, char *line, size_t cap)
{
    switch (lb_read_line(x->c, line, cap, x->deadline, x->err, sizeof(x->err))) {
    case CLIENT_OK:
        return 0;
    case CLIENT_CLOSED:
        fprintf(stderr, "lockbroker: %s closed the connection before replying\n", x->addr->spec);
        return CLI_EXIT_UNAVAILABLE;
    case CLIENT_TIMEOUT:
        fprintf(stderr, "lockbroker: no reply from %s in time\n", x->addr->spec);
        return CLI_EXIT_UNAVAILABLE;
    default:
        fprintf(stderr, "lockbroker: %s: %s\n", x->addr->spec, x->err);
        return CLI_EXIT_PROTOCOL;
    }
}

static int report_err(const struct exchange *x, const char *what, const char *line)
{
    const char *advice = lb_err_advice(line);

    if (advice)
        fprintf(stderr, "lockbroker: %s %s (refused %s: %s)\n", x->addr->spec, advice, what,
                line);
    else
        fprintf(stderr, "lockbroker: %s refused %s: %s\n", x->addr->spec, what, line);
    return lb_err_exit(line);
}

/* The STAT values `lockbroker status` (no NAME) summarises; ping looks at zk_state. */
static const char *const summary_keys[] = {
    "version", "mode", "uptime", "curr_connections", "locks_held", "waiters",
    "zk_state", "zk_session_id",
};
#define NSUMMARY (sizeof(summary_keys) / sizeof(summary_keys[0]))

static int stats_read(struct exchange *x, bool summary, char vals[][64], FILE *js,
                      bool *noauth);

/* vals[] of key, from summary_keys. */
static const char *summary_value(char vals[][64], const char *key)
{
    for (size_t i = 0; i < NSUMMARY; i++)
        if (strcmp(summary_keys[i], key) == 0)
            return vals[i];
    return "";
}

/*
 * Whether the broker reaches its lock service, from STATS: in distributed
 * mode a zk_state other than `connected` means that what needs ZooKeeper
 * answers ERR UNAVAILABLE (PROTOCOL.md, STATS). Returns CLI_EXIT_OK, or
 * CLI_EXIT_BACKEND_DOWN having said so on stderr.
 */
static int backend_state(const struct lb_addr *a, char vals[][64])
{
    const char *zk_state = summary_value(vals, "zk_state");

    if (!zk_state[0] || strcmp(zk_state, "connected") == 0)
        return CLI_EXIT_OK;
    fprintf(stderr, "lockbroker: %s answers, but cannot reach its lock service, ZooKeeper "
            "(zk_state %s)\n", a->spec, zk_state);
    return CLI_EXIT_BACKEND_DOWN;
}

/*
 * PING, then STATS on the same connection: PONG says the broker answers,
 * zk_state whether it can serve locks. A broker that wants a login for
 * STATS (ERR NOAUTH, no -a) cannot tell: PONG is all there is.
 */
static int cli_ping(const struct options *o, const struct lb_addr *a, struct lb_conn *c)
{
    struct exchange x;
    char line[CLIENT_LINE_MAX + 1], vals[NSUMMARY][64];
    bool noauth = false;
    int rc;

    if ((rc = exchange_start(&x, o, a, c, "PING\n")) || (rc = exchange_line(&x, line, sizeof(line))))
        return rc;
    if (strncmp(line, "ERR ", 4) == 0)
        return report_err(&x, "PING", line);
    if (strcmp(line, "PONG") != 0) {
        fprintf(stderr, "lockbroker: unexpected reply to PING: %s\n", line);
        return CLI_EXIT_PROTOCOL;
    }
    puts(line);
    memset(vals, 0, sizeof(vals));
    if ((rc = exchange_send(&x, "STATS\n")))
        return rc;
    rc = stats_read(&x, true, vals, NULL, &noauth);
    if (noauth) {
        /* The broker answers; a health check must know what it did not check. */
        fprintf(stderr, "lockbroker: without a login (-a USER), ping cannot tell whether "
                "%s reaches its lock service\n", a->spec);
        return CLI_EXIT_OK;
    }
    return rc != CLI_EXIT_OK ? rc : backend_state(a, vals);
}

/* break NAME [TOKEN]: BREAK, OK or the ERR line's exit status (118: nothing to break here). */
static int cli_break(const struct options *o, const struct lb_addr *a, struct lb_conn *c,
                     const char *name, const char *token)
{
    char req[PROTO_NAME_MAX + 48], ok[PROTO_NAME_MAX + 8], line[CLIENT_LINE_MAX + 1];
    struct exchange x;
    int rc;

    snprintf(req, sizeof(req), "BREAK %s%s%s\n", name, token ? " " : "", token ? token : "");
    snprintf(ok, sizeof(ok), "OK %s", name);
    if ((rc = exchange_start(&x, o, a, c, req)) || (rc = exchange_line(&x, line, sizeof(line))))
        return rc;
    if (strcmp(line, ok) == 0)
        return CLI_EXIT_OK;
    if (strncmp(line, "ERR NOT_HELD ", 13) == 0) {
        report_err(&x, "BREAK", line);
        return CLI_EXIT_NOT_HELD;
    }
    if (strncmp(line, "ERR ", 4) == 0)
        return report_err(&x, "BREAK", line);
    fprintf(stderr, "lockbroker: unexpected reply to BREAK %s: %s\n", name, line);
    return CLI_EXIT_PROTOCOL;
}

static void print_summary(const struct lb_addr *a, char vals[][64])
{
    printf("lockbrokerd %s at %s: %s mode, up %s s, %s connections, %s locks held, "
           "%s waiting", vals[0], a->spec, vals[1], vals[2], vals[3], vals[4], vals[5]);
    if (vals[6][0])
        printf(", ZooKeeper %s (session %s)", vals[6], vals[7]);
    putchar('\n');
}

/*
 * Reads the reply to STATS (sent on x) and hands each STAT on: written to
 * js as a JSON member, or else printed as it is (unless summary); the
 * summary's keys are also kept in vals. With noauth, an ERR NOAUTH is not
 * reported but sets *noauth (CLI_EXIT_DENIED).
 */
static int stats_read(struct exchange *x, bool summary, char vals[][64], FILE *js,
                      bool *noauth)
{
    char line[CLIENT_LINE_MAX + 1];
    bool first = true;
    int rc;

    for (;;) {
        if ((rc = exchange_line(x, line, sizeof(line))))
            return rc;
        if (strcmp(line, "END") == 0)
            return CLI_EXIT_OK;
        if (strncmp(line, "STAT ", 5) == 0) {
            const char *key = line + 5, *val = strchr(key, ' ');
            if (js && val) {
                fputs(first ? "" : ",", js);
                first = false;
                json_write_string(js, key, (size_t)(val - key));
                putc(':', js);
                json_write_value(js, val + 1, strlen(val + 1));
            } else if (!summary && !js) {
                puts(line);
            }
            for (size_t i = 0; val && i < NSUMMARY; i++)
                if (strlen(summary_keys[i]) == (size_t)(val - key) &&
                    strncmp(key, summary_keys[i], (size_t)(val - key)) == 0)
                    snprintf(vals[i], 64, "%s", val + 1);
            continue;
        }
        if (noauth && strncmp(line, "ERR NOAUTH", 10) == 0 && (!line[10] || line[10] == ' ')) {
            *noauth = true;
            return CLI_EXIT_DENIED;
        }
        if (strncmp(line, "ERR ", 4) == 0)
            return report_err(x, "STATS", line);
        fprintf(stderr, "lockbroker: unexpected reply to STATS: %s\n", line);
        return CLI_EXIT_PROTOCOL;
    }
}

/*
 * STATS: every STAT line, or (status: summary) one line about the daemon,
 * or (--json, either way) one JSON object of every STAT. The JSON is
 * printed once END came: a broken reply prints nothing a script could take
 * for an answer. The summary's status is CLI_EXIT_BACKEND_DOWN when the
 * daemon cannot reach ZooKeeper (backend_state), its JSON's too.
 */
static int cli_stats(const struct options *o, const struct lb_addr *a, struct lb_conn *c,
                     bool summary)
{
    char vals[NSUMMARY][64];
    char *json = NULL;
    size_t json_len = 0;
    FILE *js = NULL;
    struct exchange x;
    int rc;

    memset(vals, 0, sizeof(vals));
    if (o->json) {
        if (!(js = open_memstream(&json, &json_len))) {
            fprintf(stderr, "lockbroker: out of memory\n");
            return CLI_EXIT_USAGE;
        }
        putc('{', js);
    }
    if ((rc = exchange_start(&x, o, a, c, "STATS\n")) == CLI_EXIT_OK)
        rc = stats_read(&x, summary, vals, js, NULL);
    if (js) {
        fputs("}\n", js);
        if (fclose(js) != 0) {
            fprintf(stderr, "lockbroker: out of memory\n");
            rc = rc == CLI_EXIT_OK ? CLI_EXIT_USAGE : rc;
        } else if (rc == CLI_EXIT_OK) {
            fputs(json, stdout);
        }
        free(json);
    } else if (rc == CLI_EXIT_OK && summary) {
        print_summary(a, vals);
    }
    return rc == CLI_EXIT_OK && summary ? backend_state(a, vals) : rc;
}

/*
 * STATUS <name>: prints every line up to and including `STATUS <name> ...`
 * (--json: that line alone, as a JSON object). Exits 0 if it says `held`,
 * CLI_EXIT_FREE if `free`, so that scripts can test it.
 */
/* status and locks: a table for people (--human, or a terminal), else the lines. */
static int wants_table(const struct options *o)
{
    return o->human == 1 || (o->human == -1 && isatty(STDOUT_FILENO));
}

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int cli_status(const struct options *o, const struct lb_addr *a, struct lb_conn *c,
                      const char *name)
{
    struct exchange x;
    char req[PROTO_NAME_MAX + 16], line[CLIENT_LINE_MAX + 1];
    int rc;

    snprintf(req, sizeof(req), "STATUS %s\n", name);
    if ((rc = exchange_start(&x, o, a, c, req)))
        return rc;
    for (;;) {
        if ((rc = exchange_line(&x, line, sizeof(line))))
            return rc;
        if (strncmp(line, "ERR BAD_COMMAND", 15) == 0 && (line[15] == ' ' || line[15] == '\0')) {
            fprintf(stderr, "lockbroker: the broker at %s does not support STATUS "
                    "(it replied: %s); it needs a newer lockbrokerd\n", a->spec, line);
            return CLI_EXIT_PROTOCOL;
        }
        if (strncmp(line, "ERR ", 4) == 0)
            return report_err(&x, "STATUS", line);
        if (!o->json && !wants_table(o))
            puts(line);
        if (strncmp(line, "STATUS ", 7) == 0) {
            /* STATUS <name> held|free ... */
            size_t nl = strlen(name);
            const char *state = line + 7 + nl;
            bool ours = strncmp(line + 7, name, nl) == 0 && state[0] == ' ';
            bool held = ours && strncmp(state + 1, "held", 4) == 0 &&
                        (state[5] == ' ' || !state[5]);
            bool is_free = ours && strncmp(state + 1, "free", 4) == 0 &&
                        (state[5] == ' ' || !state[5]);

            if ((held || is_free) && (!o->json || json_write_status(stdout, name, line))) {
                if (!o->json && wants_table(o))
                    view_status(stdout, line, wall_ms());
                return held ? CLI_EXIT_OK : CLI_EXIT_FREE;
            }
            fprintf(stderr, "lockbroker: unexpected reply to STATUS %s: %s\n", name, line);
            return CLI_EXIT_PROTOCOL;
        }
    }
}

/*
 * LOCKS [<glob>] (HOLDERS with --cluster): prints every line before END
 * (the LOCK or HOLDER lines, and MORE when the daemon left some out) as it
 * comes, or keeps them for a table.
 */
/* Lines kept for a table (at most LOCKS' 10000 and a MORE). */
struct kept_lines {
    char **lines;
    size_t n, cap;
};

static int lines_keep(struct kept_lines *k, const char *line)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        char **more = realloc(k->lines, cap * sizeof(*more));

        if (!more)
            return -1;
        k->lines = more;
        k->cap = cap;
    }
    if (!(k->lines[k->n] = strdup(line)))
        return -1;
    k->n++;
    return 0;
}

static void lines_free(struct kept_lines *k)
{
    for (size_t i = 0; i < k->n; i++)
        free(k->lines[i]);
    free(k->lines);
}

static int cli_locks(const struct options *o, const struct lb_addr *a, struct lb_conn *c,
                     const char *glob)
{
    struct kept_lines kept = { NULL, 0, 0 };
    const char *cmd = o->cluster ? "HOLDERS" : "LOCKS";
    struct exchange x;
    char req[PROTO_NAME_MAX + 16], line[CLIENT_LINE_MAX + 1];
    int rc;

    snprintf(req, sizeof(req), "%s%s%s\n", cmd, glob ? " " : "", glob ? glob : "");
    if ((rc = exchange_start(&x, o, a, c, req)))
        return rc;
    for (;;) {
        if ((rc = exchange_line(&x, line, sizeof(line))))
            break;
        if (strcmp(line, "END") == 0) {
            /* Lines for programs went out as they came; a table needs them all. */
            if (!o->json && wants_table(o))
                view_locks(stdout, kept.lines, kept.n, wall_ms());
            rc = CLI_EXIT_OK;
            break;
        }
        if (strncmp(line, "ERR BAD_COMMAND", 15) == 0 && (line[15] == ' ' || line[15] == '\0')) {
            fprintf(stderr, "lockbroker: the broker at %s does not support %s "
                    "(it replied: %s); it needs a newer lockbrokerd\n", a->spec, cmd, line);
            return CLI_EXIT_PROTOCOL;
        }
        if (strncmp(line, "ERR ", 4) == 0) {
            rc = report_err(&x, cmd, line);
            break;
        }
        if (o->json)
            json_write_lock(stdout, line);
        else if (!wants_table(o))
            puts(line);
        else if (lines_keep(&kept, line) < 0) {
            fprintf(stderr, "lockbroker: out of memory\n");
            rc = CLI_EXIT_USAGE;
            break;
        }
    }
    lines_free(&kept);
    return rc;
}

/*
 * observe NAME: WATCH, then the holder's label each time it changes ("-"
 * while nobody holds it): who the leader of an election (elect) is. Runs
 * until the connection ends (121) or lockbroker is stopped.
 */
static int cli_observe(const struct options *o, const struct lb_addr *a, struct lb_conn *c,
                       const char *name)
{
    char req[PROTO_NAME_MAX + 16], ok[PROTO_NAME_MAX + 8], line[CLIENT_LINE_MAX + 1],
         last[PROTO_LABEL_MAX + 2] = "", label[PROTO_LABEL_MAX + 2];
    size_t nlen = strlen(name);
    struct exchange x;
    int rc;

    snprintf(req, sizeof(req), "WATCH %s\n", name);
    snprintf(ok, sizeof(ok), "OK %s", name);
    if ((rc = exchange_start(&x, o, a, c, req)) || (rc = exchange_line(&x, line, sizeof(line))))
        return rc;
    if (strcmp(line, ok) != 0) {
        if (strncmp(line, "ERR BAD_COMMAND", 15) == 0)
            fprintf(stderr, "lockbroker: the broker at %s does not support WATCH (it replied: "
                    "%s); it needs a newer lockbrokerd\n", a->spec, line);
        return strncmp(line, "ERR ", 4) == 0 ? report_err(&x, "WATCH", line)
                                              : CLI_EXIT_PROTOCOL;
    }
    x.deadline = -1;            /* events come when they come */
    for (;;) {
        const char *state;

        if ((rc = exchange_line(&x, line, sizeof(line))))
            return rc;
        /* EVENT <name> free | held <token> ... label=<label> ... | unavailable */
        if (strncmp(line, "EVENT ", 6) != 0 || strncmp(line + 6, name, nlen) != 0 ||
            line[6 + nlen] != ' ')
            continue;           /* a later version's line */
        state = line + 7 + nlen;
        if (strncmp(state, "unavailable", 11) == 0) {
            fprintf(stderr, "lockbroker: %s cannot reach its lock service: the leader of %s "
                    "is not known for now\n", a->spec, name);
            continue;
        }
        snprintf(label, sizeof(label), "-");
        if (strncmp(state, "held ", 5) == 0) {
            const char *l = strstr(state, " label=");

            if (l)
                snprintf(label, sizeof(label), "%.*s", (int)strcspn(l + 7, " "), l + 7);
        }
        if (strcmp(label, last) != 0) {
            snprintf(last, sizeof(last), "%s", label);
            printf("%s\n", label);
            fflush(stdout);
        }
    }
}

/* ------------------------------------------------ lease, renew, release */

/* UNLOCK <name> <token> on c, when the token could not be handed on. Returns 0 or -1. */
static int lease_abandon(struct lb_conn *c, const struct run_opts *ro, const char *token)
{
    char req[PROTO_NAME_MAX + 64], ok[PROTO_NAME_MAX + 8], line[PROTO_REPLY_MAX],
         err[CLIENT_ERR_MAX];
    int64_t deadline = lb_now_ms() + ro->io_ms;

    snprintf(req, sizeof(req), "UNLOCK %s %s\n", ro->name, token);
    snprintf(ok, sizeof(ok), "OK %s", ro->name);
    if (lb_send(c, req, strlen(req), deadline, err, sizeof(err)) != CLIENT_OK ||
        lb_read_line(c, line, sizeof(line), deadline, err, sizeof(err)) != CLIENT_OK)
        return -1;
    return strcmp(line, ok) == 0 ? 0 : -1;
}

/*
 * A lease granted after a wait began its ttl at the grant, which the
 * caller cannot see: counted from when it started lockbroker, some of it
 * (or all) looks spent. RENEW <name> <token> <ttl> on the same connection
 * gives it its whole ttl again from now. Returns 0, or a CLI_EXIT_* status
 * having said why.
 */
static int lease_renew_after_wait(struct lb_conn *c, const struct run_opts *ro,
                                  const char *token)
{
    char req[PROTO_NAME_MAX + 64], ok[PROTO_NAME_MAX + 8], line[PROTO_REPLY_MAX],
         err[CLIENT_ERR_MAX];
    int64_t deadline = lb_now_ms() + ro->io_ms;
    enum lb_status st;

    snprintf(req, sizeof(req), "RENEW %s %s %" PRId64 "\n", ro->name, token, ro->ttl_ms);
    snprintf(ok, sizeof(ok), "OK %s", ro->name);
    st = lb_send(c, req, strlen(req), deadline, err, sizeof(err));
    if (st == CLIENT_OK)
        st = lb_read_line(c, line, sizeof(line), deadline, err, sizeof(err));
    if (st != CLIENT_OK) {
        fprintf(stderr, "lockbroker: cannot renew lease %s after its wait: %s\n", ro->name,
                st == CLIENT_CLOSED ? "the broker closed the connection" :
                st == CLIENT_TIMEOUT ? "no reply" : err);
        return CLI_EXIT_UNAVAILABLE;
    }
    if (strcmp(line, ok) == 0)
        return 0;
    fprintf(stderr, "lockbroker: cannot renew lease %s after its wait: %s\n", ro->name, line);
    return strncmp(line, "ERR NOT_HELD", 12) == 0 ? CLI_EXIT_NOT_HELD : lb_err_exit(line);
}

/*
 * lease: LOCK <name> ... ttl=<ms>, then the token alone on stdout. The
 * lease outlives the connection. A grant that took more than a tenth of
 * the ttl is renewed first (lease_renew_after_wait). A token that cannot
 * be written is a lease nobody could renew or release: it is released at
 * once.
 */
static int cli_lease(const struct run_opts *ro, struct lb_conn *c)
{
    char token[32];
    int64_t asked = lb_now_ms();
    int rc, e;

    if ((rc = run_lock(ro, c, token, sizeof(token))) != 0)
        return rc == CLI_EXIT_TIMEOUT && ro->timeout_exit >= 0 ? ro->timeout_exit : rc;
    if (lb_now_ms() - asked > ro->ttl_ms / 10 &&
        (rc = lease_renew_after_wait(c, ro, token)) != 0) {
        /* Held, but for less than promised: nobody is told its token. */
        if (rc != CLI_EXIT_NOT_HELD && lease_abandon(c, ro, token) != 0)
            fprintf(stderr, "lockbroker: cannot release lease %s (token %s) either: it ends "
                    "%" PRId64 " ms after its grant\n", ro->name, token,
                    ro->ttl_ms);
        return rc;
    }
    signal(SIGPIPE, SIG_IGN);   /* a closed stdout is an error to handle, not death */
    if (printf("%s\n", token) >= 0 && fflush(stdout) == 0)
        return CLI_EXIT_OK;
    e = errno;
    if (lease_abandon(c, ro, token) == 0)
        fprintf(stderr, "lockbroker: cannot write the token to standard output: %s; "
                "lease %s released\n", strerror(e), ro->name);
    else
        fprintf(stderr, "lockbroker: cannot write the token to standard output: %s; "
                "cannot release lease %s either: it ends in %" PRId64 " ms\n",
                strerror(e), ro->name, ro->ttl_ms);
    return CLI_EXIT_USAGE;
}

/*
 * renew (ttl_ms > 0): RENEW <name> <token> <ttl_ms>; release (ttl_ms 0):
 * UNLOCK <name> <token>. Both answer `OK <name>`, or ERR NOT_HELD when no
 * lease of that name has that token.
 */
static int cli_lease_op(const struct options *o, const struct lb_addr *a, struct lb_conn *c,
                        const char *name, uint64_t token, int64_t ttl_ms)
{
    struct exchange x;
    const char *verb = ttl_ms > 0 ? "RENEW" : "UNLOCK";
    char req[PROTO_NAME_MAX + 64], ok[PROTO_NAME_MAX + 8], line[CLIENT_LINE_MAX + 1];
    int rc;

    if (ttl_ms > 0)
        snprintf(req, sizeof(req), "RENEW %s %" PRIu64 " %" PRId64 "\n", name, token, ttl_ms);
    else
        snprintf(req, sizeof(req), "UNLOCK %s %" PRIu64 "\n", name, token);
    if ((rc = exchange_start(&x, o, a, c, req)) || (rc = exchange_line(&x, line, sizeof(line))))
        return rc;
    snprintf(ok, sizeof(ok), "OK %s", name);
    if (strcmp(line, ok) == 0)
        return CLI_EXIT_OK;
    if (strncmp(line, "ERR NOT_HELD", 12) == 0 && (line[12] == ' ' || line[12] == '\0')) {
        fprintf(stderr, "lockbroker: cannot %s lease %s: it is not held with token %" PRIu64
                ": the token is wrong, or the lease expired or was released (%s: %s)\n",
                ttl_ms > 0 ? "renew" : "release", name, token, a->spec, line);
        return CLI_EXIT_NOT_HELD;
    }
    if (strncmp(line, "ERR ", 4) == 0)
        return report_err(&x, verb, line);
    fprintf(stderr, "lockbroker: unexpected reply to %s %s: %s\n", verb, name, line);
    return CLI_EXIT_PROTOCOL;
}

/* TTL from the command line, or a usage error (reported). */
static int check_ttl(const char *sub, const char *arg, int64_t *ttl_ms)
{
    char what[32];

    snprintf(what, sizeof(what), "%s: TTL", sub);
    return check_duration(what, arg, PROTO_TTL_MIN, PROTO_TTL_MAX, ttl_ms);
}

/* TOKEN from the command line, or a usage error (reported). */
static int check_token(const char *sub, const char *arg, uint64_t *token)
{
    char msg[512];

    if (parse_token(arg, token) == 0)
        return 0;
    snprintf(msg, sizeof(msg), "%s: TOKEN: expected the token `lockbroker lease` printed, "
             "an unsigned 64-bit decimal integer, got '%s'", sub, arg);
    return usage_error("%s", msg);
}

/* ------------------------------------------------------------ subcommands */

/*
 * The operands after NAME of lease, renew, release and status are numbers
 * (numbers_after_name in their rows of subcommands[]): a word there that
 * looks like an option ("-w", "--wait=1s", not "-1") was put after NAME,
 * where getopt no longer looks. Returns 0, or a usage error.
 */
static int check_no_option_after_name(const char *sub, char **rest, int nrest)
{
    char msg[512];

    for (int i = 1; i < nrest; i++) {
        const char *w = rest[i];

        if (w[0] != '-' || !(w[1] == '-' || (w[1] >= 'a' && w[1] <= 'z') ||
                             (w[1] >= 'A' && w[1] <= 'Z')))
            continue;
        snprintf(msg, sizeof(msg), "%s: option '%s' after NAME: options go before NAME",
                 sub, w);
        return usage_error("%s", msg);
    }
    return 0;
}

/* Flushes stdout; a write error (full disk, closed pipe) is a failure. */
static int finish_stdout(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "lockbroker: writing to standard output: %s\n", strerror(errno));
        return rc == CLI_EXIT_OK ? CLI_EXIT_USAGE : rc;
    }
    return rc;
}

/* What a subcommand's function gets, its operands counted already. */
struct call {
    const char *sub;             /* its name in messages (elect says run) */
    const struct options *o;     /* checked against the row's opts */
    struct lb_addr *addr;    /* the broker, with the login of -a and the TLS context */
    const struct tls_config *tls; /* the files addr->tls was made from; NULL: plain text */
    struct lb_conn *conn;         /* not connected yet; the function closes it after use */
    char **args;                 /* the operands after the options, NULL-terminated */
    int nargs;                   /* between the row's min_args and max_args */
};

/* After a request-reply subcommand: closes its connection and flushes stdout. */
static int finish_exchange(struct lb_conn *c, int rc)
{
    lb_close(c);
    return finish_stdout(rc);
}

/* The run_opts run and lease share, from the options. */
static void run_opts_from(const struct call *call, struct run_opts *ro)
{
    const struct options *o = call->o;

    *ro = (struct run_opts){ .addr = call->addr, .wait_ms = o->wait_ms, .io_ms = o->io_ms,
                             .shared = o->shared, .limit = o->limit, .label = o->label,
                             .notice = o->verbose || (!o->quiet && isatty(STDERR_FILENO)),
                             .quiet = o->quiet, .timeout_exit = o->timeout_exit };
}

/* run NAME [--] COMMAND [ARGS...], and elect, which is run. */
static int sub_run(const struct call *call)
{
    struct run_opts ro;
    char **rest = call->args + 1, label[PROTO_LABEL_MAX + 1];
    int nrest = call->nargs - 1, rc;

    run_opts_from(call, &ro);
    ro.grace_ms = call->o->grace_ms;
    ro.min_hold_ms = call->o->min_hold_ms;
    ro.release_on_failure = call->o->release_on_failure;
    ro.session_grace_ms = call->o->session_grace_ms;
    ro.name = call->args[0];
    if (ro.release_on_failure && !ro.min_hold_ms)
        return usage_error("%s", "--release-on-failure goes with --min-hold");
    if (nrest > 0 && strcmp(rest[0], "--") == 0) {
        rest++;
        nrest--;
    } else if (nrest > 0 && rest[0][0] == '-') {
        /* Most likely an option put after NAME: never run it as the command. */
        char msg[512];

        snprintf(msg, sizeof(msg), "run %s: '%s' after NAME would be run as the command: "
                 "options go before NAME, and a COMMAND that starts with '-' needs -- "
                 "before it", ro.name, rest[0]);
        return usage_error("%s", msg);
    }
    if (nrest < 1)
        return usage_error("run %s: missing COMMAND", ro.name);
    if ((rc = check_names(ro.name)) != 0)
        return rc;
    ro.argv = rest;
    if (!ro.label) {
        run_default_label(label, sizeof(label), rest[0]);
        ro.label = label;
    }
    if (export_tls(call->tls) < 0) {
        fprintf(stderr, "lockbroker: %s\n", strerror(errno));
        return CLI_EXIT_USAGE;
    }
    fflush(stdout);
    return run_command(&ro);
}

/* lease NAME TTL */
static int sub_lease(const struct call *call)
{
    struct run_opts ro;
    char label[PROTO_LABEL_MAX + 1];
    int rc;

    run_opts_from(call, &ro);
    ro.name = call->args[0];
    if ((rc = check_name(ro.name)) != 0 ||
        (rc = check_ttl(call->sub, call->args[1], &ro.ttl_ms)) != 0)
        return rc;
    if (!ro.label) {
        run_default_label(label, sizeof(label), "lease");
        ro.label = label;
    }
    rc = cli_lease(&ro, call->conn);   /* it has flushed stdout, or given up on it */
    lb_close(call->conn);
    return rc;
}

/* renew NAME TOKEN TTL (renew), release NAME TOKEN (!renew) */
static int sub_lease_op(const struct call *call, bool renew)
{
    int64_t ttl_ms = 0;
    uint64_t token = 0;
    int rc;

    if ((rc = check_name(call->args[0])) != 0 ||
        (rc = check_token(call->sub, call->args[1], &token)) != 0 ||
        (renew && (rc = check_ttl(call->sub, call->args[2], &ttl_ms)) != 0))
        return rc;
    rc = cli_lease_op(call->o, call->addr, call->conn, call->args[0], token, ttl_ms);
    return finish_exchange(call->conn, rc);
}

static int sub_renew(const struct call *call)
{
    return sub_lease_op(call, true);
}

static int sub_release(const struct call *call)
{
    return sub_lease_op(call, false);
}

/* status [NAME]: the lock's STATUS, or without NAME a summary of STATS. */
static int sub_status(const struct call *call)
{
    int rc;

    if (call->nargs == 0)
        return finish_exchange(call->conn, cli_stats(call->o, call->addr, call->conn, true));
    if ((rc = check_name(call->args[0])) != 0)
        return rc;
    return finish_exchange(call->conn, cli_status(call->o, call->addr, call->conn,
                                                  call->args[0]));
}

/* locks [GLOB] */
static int sub_locks(const struct call *call)
{
    const char *glob = call->nargs == 1 ? call->args[0] : NULL;
    const char *why = glob ? glob_problem(glob) : NULL;
    char fmt[256];

    if (why) {
        /* why is one of glob_problem()'s static strings: no '%' in it. */
        snprintf(fmt, sizeof(fmt), "locks: GLOB: %s, got '%%s'", why);
        return usage_error(fmt, glob);
    }
    return finish_exchange(call->conn, cli_locks(call->o, call->addr, call->conn, glob));
}

/* observe NAME */
static int sub_observe(const struct call *call)
{
    int rc;

    if ((rc = check_name(call->args[0])) != 0)
        return rc;
    return finish_exchange(call->conn, cli_observe(call->o, call->addr, call->conn,
                                                   call->args[0]));
}

/* break NAME [TOKEN] */
static int sub_break(const struct call *call)
{
    const char *token = call->nargs == 2 ? call->args[1] : NULL;
    uint64_t parsed = 0;   /* checked only: BREAK gets TOKEN as typed */
    int rc;

    if ((rc = check_name(call->args[0])) != 0 ||
        (token && (rc = check_token(call->sub, token, &parsed)) != 0))
        return rc;
    return finish_exchange(call->conn, cli_break(call->o, call->addr, call->conn,
                                                 call->args[0], token));
}

static int sub_stats(const struct call *call)
{
    return finish_exchange(call->conn, cli_stats(call->o, call->addr, call->conn, false));
}

static int sub_ping(const struct call *call)
{
    return finish_exchange(call->conn, cli_ping(call->o, call->addr, call->conn));
}

/* ------------------------------------------------------------------ main */

/*
 * One row per subcommand. main looks the subcommand up here, checks the
 * options and the number of operands against its row, then calls fn; --help
 * prints every row's usage and about, in this order, and so does the list
 * of "missing subcommand". A subcommand is added by a row and its function.
 */
struct subcommand {
    const char *name;
    const char *as;           /* its name in messages, if not name: elect is run */
    int (*fn)(const struct call *call);
    int min_args, max_args;   /* operands after the options; max_args -1: any number */
    const char *too_few;      /* the usage error for fewer than min_args */
    const char *too_many;     /* ... for more than max_args; NULL: unexpected argument '<it>' */
    unsigned opts;            /* OPTS_* it takes (a given other one is a usage error) */
    bool numbers_after_name;  /* its operands after NAME are numbers, never options
                               * (check_no_option_after_name) */
    const char *usage[2];     /* its usage after "lockbroker [OPTIONS] ", and a second
                               * line (indented under the first's OPTIONS) or NULL */
    const char *about;        /* its part of --help's description, wrapped by hand,
                               * or NULL; it may end mid-line, the next row's going on */
};

static const struct subcommand subcommands[] = {
    { .name = "run", .fn = sub_run, .min_args = 1, .max_args = -1,
      .too_few = "run: missing lock NAME",
      .opts = OPTS_LOCK | OPTS_GRACE | OPTS_LABEL | OPTS_MIN_HOLD | OPTS_SESSION,
      .usage = { "run [-w TIME] [-g TIME] [-s | -n N] [--label L] [-v]",
                 "[--min-hold TIME [--release-on-failure]] NAME [--] COMMAND [ARGS...]" },
      .about =
          "`run` holds lock NAME while COMMAND runs, with\n"
          "LOCKBROKER_NAME, LOCKBROKER_TOKEN (the fencing token) and LOCKBROKER_ADDR in its\n"
          "environment, and exits with its status (128+N if signal N killed it). For\n"
          "`run`, NAME may be a set a,b,c of up to 16 names, held all or none (no deadlock\n"
          "with other sets); LOCKBROKER_NAME and LOCKBROKER_TOKEN are then lists in\n"
          "that order, and losing any of the names ends COMMAND as losing the lock would.\n" },
    { .name = "lease", .fn = sub_lease, .min_args = 2, .max_args = 2,
      .too_few = "lease: expected NAME TTL", .opts = OPTS_LOCK | OPTS_LABEL,
      .numbers_after_name = true,
      .usage = { "lease [-w TIME] [-s | -n N] [--label L] [-v] NAME TTL" },
      .about =
          "`lease` takes lock NAME as a lease, which outlives lockbroker, and prints its\n"
          "TOKEN. The lease ends TTL (100ms to 24h) after the grant or the latest\n"
          "`renew`, or when `release` ends it.\n" },
    { .name = "renew", .fn = sub_renew, .min_args = 3, .max_args = 3,
      .too_few = "renew: expected NAME TOKEN TTL", .numbers_after_name = true,
      .usage = { "renew NAME TOKEN TTL" } },
    { .name = "release", .fn = sub_release, .min_args = 2, .max_args = 2,
      .too_few = "release: expected NAME TOKEN", .numbers_after_name = true,
      .usage = { "release NAME TOKEN" } },
    { .name = "status", .fn = sub_status, .min_args = 0, .max_args = 1,
      .too_many = "status: expected one lock NAME, or none", .opts = OPTS_JSON,
      .numbers_after_name = true,
      .usage = { "status [--json | --human | --raw] [NAME]" },
      .about =
          "`status NAME` prints the lock's STATUS line and exits 0 if it is held, 1 if\n"
          "it is free; `status` alone prints one line about the broker.\n" },
    { .name = "locks", .fn = sub_locks, .min_args = 0, .max_args = 1,
      .opts = OPTS_JSON | OPTS_CLUSTER,
      .usage = { "locks [--cluster] [--json | --human | --raw] [GLOB]" },
      .about =
          "`locks` lists the locks held or awaited on the broker (those\n"
          "whose name matches GLOB: * ? [...]), one LOCK line each; with --cluster,\n"
          "every holder and queued request on every daemon, one HOLDER line each.\n" },
    /* elect NAME -- COMMAND is run NAME -- COMMAND, waiting in line for as
     * long as it takes, its label naming the leader to observe. */
    { .name = "elect", .as = "run", .fn = sub_run, .min_args = 1, .max_args = -1,
      .too_few = "run: missing lock NAME",
      .opts = OPTS_LOCK | OPTS_GRACE | OPTS_LABEL | OPTS_SESSION,
      .usage = { "elect [--label L] NAME [--] COMMAND [ARGS...]" },
      .about =
          "`elect NAME -- COMMAND` is `run` for a leader election: it waits in line and\n"
          "runs COMMAND while it leads; --label names it to followers (an address).\n" },
    { .name = "observe", .fn = sub_observe, .min_args = 1, .max_args = 1,
      .too_few = "observe: expected one lock NAME", .too_many = "observe: expected one lock NAME",
      .usage = { "observe NAME" },
      .about =
          "`observe NAME` prints the holder's label each time it changes (- when none):\n"
          "who leads, until it is stopped. " },
    { .name = "break", .fn = sub_break, .min_args = 1, .max_args = 2,
      .too_few = "break: expected NAME [TOKEN]", .too_many = "break: expected NAME [TOKEN]",
      .usage = { "break NAME [TOKEN]" },
      .about =
          "`break NAME` ends every hold of NAME granted\n"
          "through this broker (TOKEN: that one), each holder told LOST ... broken.\n" },
    { .name = "stats", .fn = sub_stats, .min_args = 0, .max_args = 0, .opts = OPTS_JSON,
      .usage = { "stats [--json]" } },
    { .name = "ping", .fn = sub_ping, .min_args = 0, .max_args = 0, .usage = { "ping" },
      .about =
          "`ping` prints PONG if the broker answers. `ping` and `status` (without NAME)\n"
          "exit 115 while the broker cannot reach ZooKeeper.\n" },
};
#define NSUBCOMMANDS (sizeof(subcommands) / sizeof(subcommands[0]))

/* The name s goes by in messages. */
static const char *subcommand_as(const struct subcommand *s)
{
    return s->as ? s->as : s->name;
}

/*
 * An option a subcommand does not take, and what to say (%s: the
 * subcommand); the first rule that applies is the one reported.
 */
static const struct option_rule {
    unsigned given;      /* any of these options given... */
    unsigned needs;      /* ...needs a subcommand that takes this */
    const char *error;
} option_rules[] = {
    /* Outside run and lease, one message for all of their options. */
    { OPTS_LOCK | OPTS_GRACE, OPTS_LOCK,
      "%s: -w, -g, -s, -n and -E are options of run (-w, -s, -n and -E also of lease)" },
    { OPTS_JSON, OPTS_JSON, "%s: --json is an option of stats, status and locks" },
    { OPTS_CLUSTER, OPTS_CLUSTER, "%s: --cluster is an option of locks" },
    { OPTS_LABEL, OPTS_LABEL, "%s: --label, -v and -q are options of run and lease" },
    { OPTS_GRACE, OPTS_GRACE, "%s: -g is an option of run" },
    { OPTS_MIN_HOLD, OPTS_MIN_HOLD,
      "%s: --min-hold and --release-on-failure are options of run" },
    { OPTS_SESSION, OPTS_SESSION, "%s: --session-grace is an option of run" },
};

static void usage_signals_and_exits(FILE *f);

/* The part of --help that is not any subcommand's: times, options, exit statuses. */
static void usage_options(FILE *f)
{
    fprintf(f,
        "TIME and TTL are a number with a unit, ms, s, m or h (500ms, 60s, 2m, 1h), or\n"
        "a plain number of milliseconds: -w 60 waits 60 ms, -w 60s a minute (a plain\n"
        "number from 1 to 999 is taken with a warning on stderr).\n"
        "Options go before or after the subcommand, but before NAME. A COMMAND that\n"
        "starts with '-' needs -- before it.\n"
        "  -H, --host HOST:PORT  broker address: IPv4, [IPv6] or a host name, and a port\n"
        "                        (default 7411)\n"
        "  -U, --unix PATH       broker Unix socket\n"
        "                        (default: $LOCKBROKER_ADDR, HOST:PORT or unix:PATH or\n"
        "                        /PATH; else %s)\n"
        "  -w, --wait TIME       run, lease: give up if the lock is not granted within\n"
        "                        TIME (0 to 2147483647 ms; 0: only if it is free now;\n"
        "                        default: wait for ever), and say who holds it\n"
        "      --nonblock        run, lease: -w 0, as flock's (flock's -n is --limit)\n"
        "      --min-hold TIME   run: keep the lock until TIME (up to 24h) after the grant\n"
        "                        even if COMMAND ends sooner; the broker holds the rest,\n"
        "                        so with -w 0 COMMAND runs at most once per TIME\n"
        "      --release-on-failure\n"
        "                        run --min-hold: release at once if COMMAND fails\n"
        "  -E, --conflict-exit-code N\n"
        "                        run, lease: exit N (0-255) rather than 124 when -w runs\n"
        "                        out, so that it cannot be taken for COMMAND's own status\n"
        "                        (who holds the lock is still said: -q for silence)\n"
        "  -g, --grace TIME      run: after the lock is lost or in jeopardy, SIGKILL the\n"
        "                        command TIME after SIGTERM (default %d ms; 0: at once),\n"
        "                        but within the broker's last safe window (CHECK); also\n"
        "                        TIME after SIGINT or SIGTERM sent to lockbroker\n"
        "      --session-grace TIME\n"
        "                        run: if the connection drops (a restart of the broker,\n"
        "                        a network blip), the broker keeps the lock TIME for\n"
        "                        lockbroker to reconnect and take it back, and COMMAND\n"
        "                        runs on (default %d ms; 100ms to 1h; 0: off, a drop\n"
        "                        loses the lock)\n"
        "  -s, --shared          run, lease: take the lock shared: shared holders run\n"
        "                        together, an exclusive holder (without -s or -n) alone\n"
        "  -n, --limit N         run, lease: take one of N slots (1-65535) of a\n"
        "                        semaphore; every holder and waiter of NAME must give\n"
        "                        the same N\n"
        "      --label L         run, lease: name this client L in STATUS and LOCKS\n"
        "                        (1-100 printable characters, no spaces; default:\n"
        "                        user@host:pid:command, command `lease` for lease)\n"
        "      --json            stats, status, locks: print JSON objects (numbers as\n"
        "                        numbers, a token as a string) instead of lines\n"
        "      --cluster         locks: every holder (all of a shared or limit lock's)\n"
        "                        and queued request through every daemon of the\n"
        "                        cluster, as ZooKeeper has them (HOLDERS)\n"
        "      --human, --raw    status NAME, locks: a table with durations (the default\n"
        "                        on a terminal), or the protocol's lines (otherwise)\n"
        "  -v, --verbose         run, lease: once a wait for the lock passes 1 s, say on\n"
        "                        stderr who holds it (the default when stderr is a\n"
        "                        terminal)\n"
        "  -q, --quiet           run, lease: print nothing when the lock is not granted\n"
        "                        within -w (a skip; with -E 0, cron mails nothing);\n"
        "                        errors are still printed\n"
        "  -a, --user USER       log in as USER (AUTH) with the password from\n"
        "                        --password-file, or else $LOCKBROKER_PASSWORD\n"
        "      --password-file FILE  the password of -a: the first line of FILE\n"
        "                        (passwords are never taken on the command line)\n"
        "      --tls             speak TLS to the broker's [tls] port: its certificate\n"
        "                        must verify against the CA and be valid for -H's HOST\n"
        "                        (default: $LOCKBROKER_TLS, 1 or 0; not for -U)\n"
        "      --no-tls          plain text, whatever $LOCKBROKER_TLS says\n"
        "      --cacert FILE     --tls: the CA certificates (PEM) to verify the broker's\n"
        "                        against (default: $LOCKBROKER_CACERT, else the system's)\n"
        "      --cert FILE       --tls: show this client certificate (PEM); a broker\n"
        "                        with a users file logs in the user its CN names, no\n"
        "                        -a needed (default: $LOCKBROKER_CERT)\n"
        "      --key FILE        the private key of --cert (PEM, not encrypted; default:\n"
        "                        in --cert's FILE; $LOCKBROKER_KEY with $LOCKBROKER_CERT)\n"
        "  -t, --timeout TIME    connect and reply timeout (default %d ms)\n"
        "  -h, --help            show this help\n"
        "  -V, --version         show the version\n",
        CLIENT_ADDR_DEFAULT, GRACE_DEFAULT_MS, SESSION_GRACE_DEFAULT_MS, IO_TIMEOUT_DEFAULT_MS);
    usage_signals_and_exits(f);
}

/* The end of --help: signals, then every exit status. */
static void usage_signals_and_exits(FILE *f)
{
    fputs(
        "SIGINT, SIGTERM and SIGHUP are passed on to COMMAND's process group. After\n"
        "SIGINT or SIGTERM (or a ^C that killed COMMAND), what is left of the group\n"
        "gets SIGKILL when COMMAND ends, or all of it after -g, and the lock is\n"
        "released once the whole group is gone. If lockbroker is killed, COMMAND's\n"
        "process group gets SIGKILL, then the lock is freed (see lockbroker(1) for\n"
        "what is not covered).\n"
        "Exit status: COMMAND's (run), 0 (other subcommands), or\n"
        "    1  status NAME: the lock is free (0: it is held)\n"
        "  115  ping, status without NAME: the broker answers, but cannot reach its\n"
        "       lock service, ZooKeeper (STATS zk_state not connected); without -a, a\n"
        "       broker with users does not tell ping (it says so and exits 0)\n"
        "  116  run: jeopardy: COMMAND ran, the broker did not confirm the lock (CHECK)\n"
        "       in time, and COMMAND was terminated before anyone else could be\n"
        "       granted the lock\n"
        "  117  the broker refused the login (-a: wrong user or password, or it has no\n"
        "       users), wants one (ERR NOAUTH: give -a), or USER may not use NAME\n"
        "       (ERR DENIED)\n"
        "  118  renew, release: the lease is not held (ERR NOT_HELD): wrong TOKEN, or\n"
        "       it expired or was released; break: no such hold through this broker\n"
        "  119  run, lease: the lock is in use in another mode or with another limit\n"
        "       (ERR CONFLICT)\n"
        "  120  the lock was lost while COMMAND ran (LOST, or the connection dropped);\n"
        "       COMMAND was terminated\n"
        "  121  the broker is unreachable or unavailable (cannot connect, connection\n"
        "       closed, no reply, ERR LIMIT; --tls: a failed handshake: the broker's\n"
        "       certificate does not verify or is not for HOST, the broker refused\n"
        "       this client, or it does not speak TLS there), or it cannot reach its\n"
        "       lock service, ZooKeeper (ERR UNAVAILABLE; also when a -w wait ends in\n"
        "       an outage)\n"
        "  122  invalid lock name\n"
        "  123  unexpected reply from the broker (e.g. it does not know STATUS or\n"
        "       LOCKS)\n"
        "  124  run -w, lease -w: timed out waiting for the lock, or (run) for one\n"
        "       granted with a window (CHECK) to start COMMAND in (-E N: N instead)\n"
        "  125  usage error (also a --cacert, --cert or --key file that does not\n"
        "       load), or lockbroker itself failed\n"
        "  126  COMMAND was found but cannot be executed\n"
        "  127  COMMAND was not found\n", f);
}

static void usage(FILE *f)
{
    for (size_t i = 0; i < NSUBCOMMANDS; i++) {
        fprintf(f, "%s lockbroker [OPTIONS] %s\n", i == 0 ? "Usage:" : "      ",
                subcommands[i].usage[0]);
        if (subcommands[i].usage[1])
            fprintf(f, "                  %s\n", subcommands[i].usage[1]);
    }
    fputs("Client of lockbrokerd. ", f);
    for (size_t i = 0; i < NSUBCOMMANDS; i++)
        if (subcommands[i].about)
            fputs(subcommands[i].about, f);
    usage_options(f);
}

/* No subcommand: a usage error that lists them, "run, lease, ... or ping". */
static int usage_missing_subcommand(void)
{
    char list[512];
    size_t len = 0;

    list[0] = '\0';
    for (size_t i = 0; i < NSUBCOMMANDS && len < sizeof(list); i++)
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
                                i == 0 ? "" : i + 1 < NSUBCOMMANDS ? ", " : " or ",
                                subcommands[i].name);
    return usage_error("missing subcommand: %s", list);
}

static const struct subcommand *subcommand_find(const char *name)
{
    for (size_t i = 0; i < NSUBCOMMANDS; i++)
        if (strcmp(name, subcommands[i].name) == 0)
            return &subcommands[i];
    return NULL;
}

/* The options given against those s takes. Returns 0, or a usage error (reported). */
static int subcommand_check_options(const struct subcommand *s, const struct options *o,
                                    char **args, int nargs)
{
    int rc;

    if (s->numbers_after_name && (rc = check_no_option_after_name(subcommand_as(s), args, nargs)))
        return rc;
    for (size_t i = 0; i < sizeof(option_rules) / sizeof(option_rules[0]); i++)
        if ((o->given & option_rules[i].given) && !(s->opts & option_rules[i].needs))
            return usage_error(option_rules[i].error, subcommand_as(s));
    if (o->shared && o->limit > 0)
        return usage_error("%s", "--shared and --limit are mutually exclusive");
    return 0;
}

/* The number of operands against s's. Returns 0, or a usage error (reported). */
static int subcommand_check_args(const struct subcommand *s, char **args, int nargs)
{
    if (nargs < s->min_args)
        return usage_error("%s", s->too_few);
    if (s->max_args >= 0 && nargs > s->max_args) {
        if (s->too_many)
            return usage_error("%s", s->too_many);
        return usage_error("unexpected argument '%s'", args[s->max_args]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct lb_conn conn;   /* 64 KiB line buffer: not on the stack */
    static struct lb_auth auth;
    struct options o = { .wait_ms = -1, .grace_ms = GRACE_DEFAULT_MS, .timeout_exit = -1,
                         .human = -1, .io_ms = IO_TIMEOUT_DEFAULT_MS, .tls = -1,
                         .session_grace_ms = SESSION_GRACE_DEFAULT_MS };
    struct lb_addr addr;
    struct tls_config tls_cfg = { NULL, NULL, NULL };
    char err[CLIENT_ERR_MAX];
    const struct subcommand *s;
    bool tls;
    int rc;

    /* Options before the subcommand, then the subcommand's own (the same set). */
    if (parse_options(argc, argv, &o, &rc) != 0)
        return finish_stdout(rc);
    if (optind >= argc)
        return usage_missing_subcommand();
    argv += optind;
    argc -= optind;
    if (strcmp(argv[0], "help") == 0) {
        usage(stdout);
        return finish_stdout(CLI_EXIT_OK);
    }
    if (!(s = subcommand_find(argv[0])))
        return usage_error("unknown subcommand '%s'", argv[0]);
    if (parse_options(argc, argv, &o, &rc) != 0)
        return finish_stdout(rc);
    argv += optind;
    argc -= optind;

    /* Options and address before the operands: the errors come in that order. */
    if ((rc = subcommand_check_options(s, &o, argv, argc)) != 0 ||
        (rc = resolve_addr(&o, &addr)) != 0 || (rc = resolve_auth(&o, &auth, &addr)) != 0 ||
        (rc = resolve_tls(&o, &addr, &tls_cfg, &tls)) != 0 ||
        (rc = subcommand_check_args(s, argv, argc)) != 0)
        return rc;
    /* The files are read once, before any connection: a bad one is said at once. */
    if (tls && !(addr.tls = tls_ctx_new(&tls_cfg, err, sizeof(err)))) {
        fprintf(stderr, "lockbroker: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    rc = s->fn(&(struct call){ .sub = subcommand_as(s), .o = &o, .addr = &addr, .conn = &conn,
                               .tls = tls ? &tls_cfg : NULL, .args = argv, .nargs = argc });
    tls_ctx_free(addr.tls);
    return rc;
}
