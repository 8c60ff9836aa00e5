/*
 * main.c - lockbrokerd: start-up, signals, reload, shutdown.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "backend.h"
#include "client.h"
#include "cmd.h"
#include "conn.h"
#include "handover.h"
#include "lease.h"
#include "locks.h"
#include "log.h"
#include "mem_trim.h"
#include "metrics.h"
#include "restart.h"
#include "server.h"
#include "session.h"
#include "stats.h"
#include "takeover.h"
#include "tls.h"
#include "settings.h"
#include "users.h"
#include "watch.h"
#include "zk/zk.h"

/* Housekeeping: reports of suppressed log lines, and memory after a burst. */
#define HOUSEKEEPING_MS 1000
#define MEM_TRIM_EVERY 5           /* housekeeping ticks between memory checks */

/* Descriptors beyond max_clients: listeners, log, the ZooKeeper socket. */
#define FD_RESERVE 32

/* Where the settings came from, kept for SIGHUP. */
struct options {
    const char *conf_file;     /* -c, or NULL */
    const char *listen;        /* -l, or NULL */
    const char *zk_hosts;      /* -z, or NULL */
    bool verbose;              /* -v */
    bool check_handover;       /* --check-handover: -t, and the snapshot format */
};

/* The signals the daemon handles: TERM and INT stop it, HUP reloads, USR2
 * hands over to a successor (handover.h). */
static const int daemon_signals[] = { SIGTERM, SIGINT, SIGHUP, SIGUSR2 };
#define NSIGNALS (sizeof(daemon_signals) / sizeof(daemon_signals[0]))

/* Everything main starts; daemon_stop() frees what was started, NULL fields skipped. */
struct daemon {
    struct options opt;
    struct settings s;         /* live settings; the server and the table read them */
    struct event_base *base;
    struct backend *backend;   /* embedded or ZooKeeper, per [zookeeper] hosts */
    struct server srv;
    bool server_started;       /* server_start() succeeded: server_stop() before freeing */
    struct event *sig_ev[NSIGNALS];
    struct event *housekeeping; /* every HOUSEKEEPING_MS */
    unsigned ticks;            /* of housekeeping */
    struct locks *locks;
    struct leases *leases;
    struct users *users;       /* from [server] users_file, or NULL; the server borrows it */
    struct metrics *metrics;   /* NULL unless metrics_listen is set */
    char id[96];               /* server_make_daemon_id(), or the one taken over */
    struct takeover_in in;     /* a snapshot passed on, while it is restored */
    bool taking_over;          /* in holds one */
    struct restart restart;    /* the parts a handover carries (restart.h) */
    struct client_pending_kinds pending_kinds; /* the parked requests' part's */
    struct handover_ctx handover; /* for handover.c */
    char exe[4096];            /* this binary's path, executed for a handover */
    char **argv;               /* as main got them */
};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: lockbrokerd [-c FILE] [-l IP:PORT] [-z HOSTS] [-t] [-v] [-h] [-V]\n"
            "  -c FILE       read settings from FILE (INI; see lockbrokerd.conf(5))\n"
            "  -l IP:PORT    listen on this numeric address (default %s;\n"
            "                [::1]:7411 for IPv6; port 0 picks a free port)\n"
            "  -z HOSTS      ZooKeeper ensemble, host:port[,host:port...][/chroot]\n"
            "                (distributed mode)\n"
            "  -t            check the configuration and exit\n"
            "  -v            log at debug level\n"
            "  -h, --help    show this help\n"
            "  -V, --version show the version\n"
            "  --check-handover  as -t, and say which handover snapshots it reads\n"
            "                (distributed mode: exit 1 if the settings allow none)\n"
            "Signals: TERM or INT stop the daemon; HUP reloads the log level, the limits,\n"
            "the users file and the TLS certificate, key and CA; USR2 hands every\n"
            "connection and lock over to a new daemon executed from the same path.\n",
            SETTINGS_LISTEN_DEFAULT);
}

/* Defaults, then the file, then the flags. Returns 0, or -1 with err set. */
static int settings_load(struct settings *s, const struct options *o, char *err, size_t errlen)
{
    if (settings_init(s) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if ((o->conf_file && settings_load_file(s, o->conf_file, err, errlen) < 0) ||
        (o->listen && settings_set(s, "server", "listen", o->listen, err, errlen) < 0) ||
        (o->zk_hosts && settings_set(s, "zookeeper", "hosts", o->zk_hosts, err, errlen) < 0)) {
        settings_free(s);
        return -1;
    }
    if (o->verbose)
        s->log_level = LOG_LVL_DEBUG;
    return 0;
}

/* Makes room for max_clients descriptors, lowering max_clients if the hard limit says so. */
static void raise_fd_limit(struct settings *s)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)s->max_clients + FD_RESERVE;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < want) {
        unsigned fit = rl.rlim_cur > FD_RESERVE * 2 ? (unsigned)(rl.rlim_cur - FD_RESERVE) : 1;
        log_warn("open file limit is %llu: serving at most %u clients, not %u",
                 (unsigned long long)rl.rlim_cur, fit, s->max_clients);
        s->max_clients = fit;
    }
}

static void warn_restart(const char *what, void *arg)
{
    log_warn("reload: %s changed; restart the daemon to apply the change", what);
}

/* SIGHUP: the users file read again into *fresh (NULL without one). 0, or
 * -1 with why in err. */
static int reload_users_load(struct daemon *d, struct users **fresh, char *err, size_t errlen)
{
    *fresh = NULL;
    if (!d->s.users_file)
        return 0;
    return (*fresh = users_load_file(d->s.users_file, err, errlen)) ? 0 : -1;
}

/* SIGHUP: serve with fresh, read by reload_users_load(). */
static void reload_users_apply(struct daemon *d, struct users *fresh)
{
    struct users *old = d->users;

    if (!fresh)
        return;
    d->users = fresh;
    server_set_users(&d->srv, fresh);
    users_free(old);
    log_info("reload: %zu users from %s", users_count(fresh), d->s.users_file);
}

/* Limits on what clients make: later requests see them; nothing made ends.
 * And whether ended holds are logged, from the next one on. */
static void apply_quotas(struct daemon *d)
{
    locks_set_log_holds(d->locks, d->s.log_holds);
    locks_set_max_per_client(d->locks, d->s.max_locks_per_client);
    locks_set_keep_max(d->locks, d->s.max_kept_holds, d->s.max_kept_holds_per_user);
    leases_set_max(d->leases, d->s.max_leases, d->s.max_leases_per_user);
    watches_set_max_per_account(d->srv.watches, d->s.max_watches_per_user);
    sessions_set_max(d->srv.sessions, d->s.max_sessions, d->s.max_sessions_per_user);
}

/*
 * SIGHUP: re-read the file, the users file and the [tls] files; apply what
 * can change while running. All or nothing: whatever fails to load, nothing
 * is applied, and the one line that says so does not say "reloaded", so
 * that a reload's outcome is its last line (and STATS last_reload_ok).
 * The TLS context is swapped last of the loads, as nothing can fail after it.
 */
static void reload(struct daemon *d)
{
    struct settings n;
    struct users *fresh = NULL;
    char buf[1024];          /* the "reloaded:" line lists ~25 settings */
    char err[1024];

    d->srv.stats.reloads++;
    if (settings_load(&n, &d->opt, err, sizeof(err)) < 0)
        goto failed;
    if (reload_users_load(d, &fresh, err, sizeof(err)) < 0 ||
        server_reload_tls(&d->srv, err, sizeof(err)) < 0) {
        users_free(fresh);
        settings_free(&n);
        goto failed;
    }
    settings_reload(&d->s, &n, warn_restart, NULL);
    settings_free(&n);
    reload_users_apply(d, fresh);
    /* What start-up applied once from these values is applied again. */
    log_set_level(d->s.log_level);
    log_set_rate_limit(d->s.log_rate_limit);
    raise_fd_limit(&d->s);
    apply_quotas(d);
    conn_settings_changed(&d->srv);
    d->srv.stats.last_reload_failed = false;
    settings_format_reloadable(&d->s, buf, sizeof(buf));
    log_info("reloaded: %s", buf);
    return;
failed:
    d->srv.stats.last_reload_failed = true;
    d->srv.stats.reload_failures++;    /* /metrics: an alert, not only a log line */
    log_error("reload failed: %s; serving on with the settings before", err);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct daemon *d = arg;

    if (sig == SIGUSR2) {
        log_info("caught SIGUSR2, handing over to %s", d->exe);
        handover_begin(&d->handover);
        return;
    }
    if (sig == SIGTERM && handover_to_fdstore_wanted()) {
        log_info("caught SIGTERM under systemd with LOCKBROKERD_FDSTORE=1: handing over to "
                 "the next start through the file descriptor store");
        handover_to_fdstore(&d->handover);
        return;
    }
    if (sig == SIGHUP) {
        log_info("caught SIGHUP, reloading %s", d->opt.conf_file ? d->opt.conf_file : "(no file)");
#ifdef HAVE_LIBSYSTEMD
        sd_notify(0, "RELOADING=1");
#endif
        reload(d);
#ifdef HAVE_LIBSYSTEMD
        sd_notify(0, "READY=1");
#endif
        return;
    }
    log_info("caught %s, shutting down", strsignal((int)sig));
#ifdef HAVE_LIBSYSTEMD
    sd_notify(0, "STOPPING=1");
#endif
    event_base_loopbreak(d->base);
}

/*
 * The command line into o. Returns 0 to go on, or 1 with *exit_code: 0
 * after -h or -V, 2 after a usage error (reported).
 */
static int parse_args(int argc, char **argv, struct options *o, bool *check_only,
                      int *exit_code)
{
    static const struct option longopts[] = {
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { "check-handover", no_argument, NULL, 'H' },
        { NULL, 0, NULL, 0 },
    };
    int opt;

    *exit_code = 2;
    while ((opt = getopt_long(argc, argv, "c:l:z:tvhV", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': o->conf_file = optarg; break;
        case 'l': o->listen = optarg; break;
        case 'z':
            /* `-z $ZK` with $ZK unset must not start a daemon of its own. */
            if (!optarg[strspn(optarg, " \t")]) {
                fprintf(stderr, "lockbrokerd: -z: empty ZooKeeper hosts; give host:port[,...] "
                        "or leave -z out for embedded mode\n");
                return 1;
            }
            o->zk_hosts = optarg;
            break;
        case 't': *check_only = true; break;
        case 'H': *check_only = true; o->check_handover = true; break;
        case 'v': o->verbose = true; break;
        case 'h': usage(stdout); *exit_code = 0; return 1;
        case 'V': printf("lockbrokerd %s\n", PACKAGE_VERSION); *exit_code = 0; return 1;
        default: usage(stderr); return 1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "lockbrokerd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    return 0;
}

/*
 * The settings, the ZooKeeper credentials (into zk_auth, zk_cap bytes) and
 * the users file, all checked before anything starts. Returns 0, or -1
 * having said why on stderr and freed what it loaded.
 */
static int daemon_configure(struct daemon *d, char *zk_auth, size_t zk_cap)
{
    char err[512];

    if (settings_load(&d->s, &d->opt, err, sizeof(err)) < 0) {
        fprintf(stderr, "lockbrokerd: %s\n", err);
        return -1;
    }
    /* Read once: a changed file takes a restart, as the other [zookeeper] settings. */
    if (d->s.zk_auth && settings_read_zk_auth(d->s.zk_auth, zk_auth, zk_cap, err,
                                              sizeof(err)) < 0) {
        fprintf(stderr, "lockbrokerd: [zookeeper] auth: %s\n", err);
        settings_free(&d->s);
        return -1;
    }
    log_set_level(d->s.log_level);
    log_set_rate_limit(d->s.log_rate_limit);
    if ((d->s.users_file && !(d->users = users_load_file(d->s.users_file, err, sizeof(err)))) ||
        server_check_exposure(&d->s, err, sizeof(err)) < 0 ||
        tls_check(&d->s, err, sizeof(err)) < 0) {
        fprintf(stderr, "lockbrokerd: %s\n", err);
        users_free(d->users);
        d->users = NULL;
        settings_free(&d->s);
        return -1;
    }
    return 0;
}

/*
 * Precise timers: with libevent's default coarse clock (4 ms steps here) a
 * wait could end a few ms before its wait-ms had passed, which PROTOCOL.md
 * rules out (found by `make soak`, docs/SOAK.md); locks.c also counts each
 * wait from the current time, not the loop's cache. Returns NULL on failure.
 */
static struct event_base *precise_event_base(void)
{
    struct event_config *cfg = event_config_new();
    struct event_base *base;

    if (!cfg)
        return NULL;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return base;
}

/*
 * The event loop, and on it the backend (embedded, or ZooKeeper with
 * zk_auth, which is wiped once the backend has it), the lock table and the
 * leases. Returns 0, or -1 (logged).
 */
static int daemon_start_backend(struct daemon *d, char *zk_auth, size_t zk_cap)
{
    if (!(d->base = precise_event_base())) {
        log_error("cannot create the event loop");
        return -1;
    }
    if (d->taking_over)
        snprintf(d->id, sizeof(d->id), "%s", d->in.head.daemon_id);
    else
        server_make_daemon_id(d->id, sizeof(d->id));
    d->backend = d->s.zk_hosts ? zk_backend_new(d->base, &d->s, d->id,
                                                zk_auth[0] ? zk_auth : NULL)
                               : backend_embedded_new();
    explicit_bzero(zk_auth, zk_cap);
    if (!d->backend || !(d->locks = locks_new(d->base, d->backend, d->s.max_locks_per_client)) ||
        !(d->leases = leases_new(d->base, d->locks, d->backend, d->s.max_leases))) {
        log_error("out of memory");
        return -1;
    }
    return 0;
}

static void on_housekeeping(evutil_socket_t fd, short what, void *arg)
{
    struct daemon *d = arg;
    struct locks_stats ls;
    struct leases_stats lst;

    (void)fd;
    (void)what;
    log_report_suppressed(false);
    locks_get_stats(d->locks, &ls);
    leases_get_stats(d->leases, &lst);
    mem_trim_tick(d->srv.nconns + ls.held + ls.waiting + ls.delayed + lst.current,
                  ++d->ticks % MEM_TRIM_EVERY == 0);
}

/*
 * What a handover carries, in the snapshot's order: each part's records
 * are read after those of the parts before it (restart.h). The backend's
 * and the leases' come before the holds that name them, the connections'
 * too; parked requests and watches after the holds they wait for.
 */
static void register_restart_parts(struct daemon *d)
{
    const struct restart_part *backend = d->backend->ops->restart;

    d->pending_kinds = (struct client_pending_kinds){ &d->srv, cmd_pending_kinds };
    restart_register(&d->restart, &stats_restart_part, &d->srv);
    if (backend)
        restart_register(&d->restart, backend, d->backend->impl);
    restart_register(&d->restart, &leases_restart_part, d->leases);
    /* Before the connections: its shed ends the sessions first (session.h). */
    restart_register(&d->restart, &sessions_restart_part, d->srv.sessions);
    restart_register(&d->restart, &conn_restart_part, &d->srv);
    restart_register(&d->restart, &locks_restart_part, d->locks);
    restart_register(&d->restart, &client_pending_part, &d->pending_kinds);
    restart_register(&d->restart, &cmd_watch_part, &d->srv);
}

/* The listeners, the metrics endpoint if set, and the signals. Returns 0, or -1 (logged). */
static int daemon_start_server(struct daemon *d)
{
    if (server_start(&d->srv, d->base, &d->s, d->locks, d->leases, d->backend, d->users,
                     d->id, &d->in.fds) < 0)
        return -1;
    d->server_started = true;
    apply_quotas(d);
    if (!d->s.metrics_listen && d->in.metrics_fd >= 0)
        close(d->in.metrics_fd);
    if (d->s.metrics_listen &&
        !(d->metrics = metrics_start(&d->srv, d->s.metrics_listen, d->in.metrics_fd)))
        return -1;
    register_restart_parts(d);
    d->handover = (struct handover_ctx){ .base = d->base, .srv = &d->srv, .locks = d->locks,
                                         .backend = d->backend, .metrics = d->metrics,
                                         .restart = &d->restart, .argv = d->argv,
                                         .exe = d->exe };
    if (d->taking_over) {
        takeover_restore(&d->in, &(struct takeover_ctx){
            .srv = &d->srv, .mode = d->backend->ops->name, .restart = &d->restart,
            .argv = d->argv, .exe = d->exe });
        d->taking_over = false;
    }
    for (size_t i = 0; i < NSIGNALS; i++) {
        d->sig_ev[i] = evsignal_new(d->base, daemon_signals[i], on_signal, d);
        if (!d->sig_ev[i] || evsignal_add(d->sig_ev[i], NULL) < 0) {
            log_error("cannot install signal handlers");
            return -1;
        }
    }
    mem_trim_start();
    if (!(d->housekeeping = event_new(d->base, -1, EV_PERSIST, on_housekeeping, d)) ||
        event_add(d->housekeeping, &(struct timeval){ HOUSEKEEPING_MS / 1000,
                                                      HOUSEKEEPING_MS % 1000 * 1000 }) < 0) {
        log_error("out of memory");
        return -1;
    }
    return 0;
}

/* Says it is ready (log, systemd), then serves until a signal stops the loop. */
static void daemon_run(struct daemon *d)
{
    log_info("daemon id %s", d->id);
    if (d->users)
        log_info("%zu users from %s: AUTH required", users_count(d->users), d->s.users_file);
    if (d->srv.tls_addr[0])
        log_info("TLS on %s, client certificates %s", d->srv.tls_addr,
                 settings_client_certs_name(d->s.tls_client_certs));
    log_info("lockbrokerd %s ready: %s mode, listening on %s%s%s", PACKAGE_VERSION,
             d->backend->ops->name, d->srv.listen_addr, d->s.unix_socket ? " and " : "",
             d->s.unix_socket ? d->s.unix_socket : "");
#ifdef HAVE_LIBSYSTEMD
    sd_notifyf(0, "READY=1\nSTATUS=%s mode, listening on %s", d->backend->ops->name,
               d->srv.listen_addr);
#endif
    event_base_dispatch(d->base);
    log_report_suppressed(true);
    log_info("stopped");
}

/* Stops and frees whatever was started, however far the start-up got. */
static void daemon_stop(struct daemon *d)
{
    metrics_stop(d->metrics);
    if (d->server_started) {
        locks_shutdown(d->locks);
        server_stop(&d->srv);
        /* Deferred bufferevent callbacks of closed connections hold their
         * last references: let them run (their callbacks are unset). */
        event_base_loop(d->base, EVLOOP_NONBLOCK);
    }
    for (size_t i = 0; i < NSIGNALS; i++)
        if (d->sig_ev[i])
            event_free(d->sig_ev[i]);
    if (d->housekeeping)
        event_free(d->housekeeping);
    locks_free(d->locks);
    leases_free(d->leases);
    if (d->backend)
        d->backend->ops->free(d->backend->impl);
    if (d->base)
        event_base_free(d->base);
    users_free(d->users);
    settings_free(&d->s);
}

/* The path this binary was started from, executed again for a handover
 * (a new build installed over it is what runs then). */
static void this_binary(char *buf, size_t len, const char *argv0)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    const char *deleted = " (deleted)";

    if (n <= 0) {
        snprintf(buf, len, "%s", argv0);
        return;
    }
    buf[n] = '\0';
    if ((size_t)n > strlen(deleted) && strcmp(buf + n - strlen(deleted), deleted) == 0)
        buf[n - strlen(deleted)] = '\0';
}

int main(int argc, char **argv)
{
    struct daemon d;
    bool check_only = false;
    char zk_auth[SETTINGS_ZK_AUTH_MAX + 2] = "";
    int rc;

    memset(&d, 0, sizeof(d));
    d.in.fds = (struct server_fds){ -1, -1, -1 };
    d.in.metrics_fd = -1;
    /* Until the loop handles them: a reload or handover signal that comes
     * while this daemon starts (a successor, say) must not end it. */
    signal(SIGHUP, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    log_detect_journal();
    if (parse_args(argc, argv, &d.opt, &check_only, &rc) != 0)
        return rc;
    /* Before anything opens a descriptor: one refused closes all it came with. */
    if (!check_only)
        d.taking_over = takeover_receive(&d.in) == 1;
    d.argv = argv;
    this_binary(d.exe, sizeof(d.exe), argv[0]);
    if (daemon_configure(&d, zk_auth, sizeof(zk_auth)) < 0) {
        takeover_in_free(&d.in);
        return 1;
    }
    if (check_only) {
        char why[512];

        explicit_bzero(zk_auth, sizeof(zk_auth));
        /* The daemon before runs this with our arguments: settings that
         * allow no handover refuse it here too, in the words it logs. */
        if (d.opt.check_handover && d.s.zk_hosts &&
            !zk_handover_settings_fit(&d.s, why, sizeof(why))) {
            printf("lockbrokerd: %s\n", why);
            daemon_stop(&d);
            return 1;
        }
        printf("lockbrokerd: configuration OK\n");
        if (d.opt.check_handover)
            handover_print_format();
        daemon_stop(&d);   /* nothing started: frees the users and the settings */
        return 0;
    }

    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(&d.s);
    rc = 1;
    if (daemon_start_backend(&d, zk_auth, sizeof(zk_auth)) == 0 &&
        daemon_start_server(&d) == 0) {
        daemon_run(&d);
        rc = 0;
    }
    daemon_stop(&d);
    return rc;
}
