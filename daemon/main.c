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
#include "conn.h"
#include "lease.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "server.h"
#include "settings.h"
#include "users.h"
#include "zk/zk.h"

/* Descriptors beyond max_clients: listeners, log, the ZooKeeper socket. */
#define FD_RESERVE 32

/* Where the settings came from, kept for SIGHUP. */
struct options {
    const char *conf_file;     /* -c, or NULL */
    const char *listen;        /* -l, or NULL */
    const char *zk_hosts;      /* -z, or NULL */
    bool verbose;              /* -v */
};

struct daemon {
    struct options opt;
    struct settings s;         /* live settings; the server and the table read them */
    struct event_base *base;
    struct server srv;
    struct locks *locks;
    struct leases *leases;
    struct users *users;       /* from [server] users_file, or NULL; the server borrows it */
    struct metrics *metrics;   /* NULL unless metrics_listen is set */
    char id[96];               /* server_make_daemon_id() */
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
            "Signals: TERM or INT stop the daemon; HUP reloads the log level, the limits\n"
            "and the users file.\n",
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

/* SIGHUP: re-read the users file; a broken one leaves the running users. */
static void reload_users(struct daemon *d)
{
    struct users *old = d->users, *fresh;
    char err[512];

    if (!d->s.users_file)
        return;
    if (!(fresh = users_load_file(d->s.users_file, err, sizeof(err)))) {
        log_error("reload: keeping the %zu users loaded before: %s", users_count(old), err);
        return;
    }
    d->users = fresh;
    server_set_users(&d->srv, fresh);
    users_free(old);
    log_info("reload: %zu users from %s", users_count(fresh), d->s.users_file);
}

/* SIGHUP: re-read the file; apply what can change while running. */
static void reload(struct daemon *d)
{
    struct settings n;
    char buf[512];

    if (settings_load(&n, &d->opt, buf, sizeof(buf)) < 0) {
        log_error("reload failed, keeping the running settings: %s", buf);
        return;
    }
    settings_reload(&d->s, &n, warn_restart, NULL);
    settings_free(&n);
    reload_users(d);
    /* What start-up applied once from these values is applied again. */
    log_set_level(d->s.log_level);
    raise_fd_limit(&d->s);
    locks_set_max_per_client(d->locks, d->s.max_locks_per_client);
    leases_set_max(d->leases, d->s.max_leases);
    conn_settings_changed(&d->srv);
    settings_format_reloadable(&d->s, buf, sizeof(buf));
    log_info("reloaded: %s", buf);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct daemon *d = arg;

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

int main(int argc, char **argv)
{
    static const int signals[] = { SIGTERM, SIGINT, SIGHUP };
    struct event *sig_ev[3] = { NULL, NULL, NULL };
    struct daemon d;
    struct backend *backend = NULL;
    struct event_config *cfg;
    bool check_only = false, started = false;
    char err[512], zk_auth[SETTINGS_ZK_AUTH_MAX + 2] = "";
    int opt, rc = 1;

    memset(&d, 0, sizeof(d));
    log_detect_journal();
    static const struct option longopts[] = {
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };

    while ((opt = getopt_long(argc, argv, "c:l:z:tvhV", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': d.opt.conf_file = optarg; break;
        case 'l': d.opt.listen = optarg; break;
        case 'z':
            /* `-z $ZK` with $ZK unset must not start a daemon of its own. */
            if (!optarg[strspn(optarg, " \t")]) {
                fprintf(stderr, "lockbrokerd: -z: empty ZooKeeper hosts; give host:port[,...] "
                        "or leave -z out for embedded mode\n");
                return 2;
            }
            d.opt.zk_hosts = optarg;
            break;
        case 't': check_only = true; break;
        case 'v': d.opt.verbose = true; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("lockbrokerd %s\n", PACKAGE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "lockbrokerd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (settings_load(&d.s, &d.opt, err, sizeof(err)) < 0) {
        fprintf(stderr, "lockbrokerd: %s\n", err);
        return 1;
    }
    /* Read once: a changed file takes a restart, as the other [zookeeper] settings. */
    if (d.s.zk_auth && settings_read_zk_auth(d.s.zk_auth, zk_auth, sizeof(zk_auth), err,
                                             sizeof(err)) < 0) {
        fprintf(stderr, "lockbrokerd: [zookeeper] auth: %s\n", err);
        settings_free(&d.s);
        return 1;
    }
    log_set_level(d.s.log_level);
    if ((d.s.users_file && !(d.users = users_load_file(d.s.users_file, err, sizeof(err)))) ||
        server_check_exposure(&d.s, err, sizeof(err)) < 0) {
        fprintf(stderr, "lockbrokerd: %s\n", err);
        users_free(d.users);
        settings_free(&d.s);
        return 1;
    }
    if (check_only) {
        explicit_bzero(zk_auth, sizeof(zk_auth));
        printf("lockbrokerd: configuration OK\n");
        users_free(d.users);
        settings_free(&d.s);
        return 0;
    }

    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(&d.s);

    /* Precise timers: with libevent's default coarse clock (4 ms steps
     * here) a wait could end a few ms before its wait-ms had passed, which
     * PROTOCOL.md rules out (found by `make soak`, docs/SOAK.md); locks.c
     * also counts each wait from the current time, not the loop's cache. */
    if ((cfg = event_config_new()))
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    d.base = cfg ? event_base_new_with_config(cfg) : NULL;
    if (cfg)
        event_config_free(cfg);
    if (!d.base) {
        log_error("cannot create the event loop");
        goto out;
    }
    server_make_daemon_id(d.id, sizeof(d.id));
    backend = d.s.zk_hosts ? zk_backend_new(d.base, &d.s, d.id, zk_auth[0] ? zk_auth : NULL)
                           : backend_embedded_new();
    explicit_bzero(zk_auth, sizeof(zk_auth));
    if (!backend || !(d.locks = locks_new(d.base, backend, d.s.max_locks_per_client)) ||
        !(d.leases = leases_new(d.base, d.locks, backend, d.s.max_leases))) {
        log_error("out of memory");
        goto out;
    }
    if (server_start(&d.srv, d.base, &d.s, d.locks, d.leases, backend, d.users, d.id) < 0)
        goto out;
    started = true;
    if (d.s.metrics_listen && !(d.metrics = metrics_start(&d.srv, d.s.metrics_listen)))
        goto out;
    for (int i = 0; i < 3; i++) {
        sig_ev[i] = evsignal_new(d.base, signals[i], on_signal, &d);
        if (!sig_ev[i] || evsignal_add(sig_ev[i], NULL) < 0) {
            log_error("cannot install signal handlers");
            goto out;
        }
    }

    log_info("daemon id %s", d.id);
    if (d.users)
        log_info("%zu users from %s: AUTH required", users_count(d.users), d.s.users_file);
    log_info("lockbrokerd %s ready: %s mode, listening on %s%s%s", PACKAGE_VERSION,
             backend->ops->name, d.srv.listen_addr, d.s.unix_socket ? " and " : "",
             d.s.unix_socket ? d.s.unix_socket : "");
#ifdef HAVE_LIBSYSTEMD
    sd_notifyf(0, "READY=1\nSTATUS=%s mode, listening on %s", backend->ops->name,
               d.srv.listen_addr);
#endif
    event_base_dispatch(d.base);
    log_info("stopped");
    rc = 0;
out:
    metrics_stop(d.metrics);
    if (started) {
        locks_shutdown(d.locks);
        server_stop(&d.srv);
        /* Deferred bufferevent callbacks of closed connections hold their
         * last references: let them run (their callbacks are unset). */
        event_base_loop(d.base, EVLOOP_NONBLOCK);
    }
    for (int i = 0; i < 3; i++)
        if (sig_ev[i])
            event_free(sig_ev[i]);
    locks_free(d.locks);
    leases_free(d.leases);
    if (backend)
        backend->ops->free(backend->impl);
    if (d.base)
        event_base_free(d.base);
    users_free(d.users);
    settings_free(&d.s);
    return rc;
}
