/*
 * main.c - lockbrokerd: start-up, signals, shutdown.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backend.h"
#include "locks.h"
#include "log.h"
#include "server.h"
#include "settings.h"
#include "zk.h"

/* Descriptors beyond max_clients: listeners, log, the ZooKeeper socket. */
#define FD_RESERVE 32

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: lockbrokerd [-c FILE] [-l HOST:PORT] [-z HOSTS] [-t] [-v] [-h] [-V]\n"
            "  -c FILE       read settings from FILE (INI; see lockbrokerd.conf)\n"
            "  -l HOST:PORT  listen on this address (default %s; [::1]:7411 for IPv6;\n"
            "                port 0 picks a free port)\n"
            "  -z HOSTS      ZooKeeper ensemble, host:port[,host:port...] (distributed mode)\n"
            "  -t            check the configuration and exit\n"
            "  -v            log at debug level\n"
            "  -h            show this help\n"
            "  -V            show the version\n",
            SETTINGS_LISTEN_DEFAULT);
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

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct event_base *base = arg;

    log_info("caught %s, shutting down", strsignal((int)sig));
    event_base_loopbreak(base);
}

int main(int argc, char **argv)
{
    struct settings s;
    struct server srv;
    struct event_base *base = NULL;
    struct event *sigterm = NULL, *sigint = NULL;
    struct backend *backend = NULL;
    struct locks *locks = NULL;
    const char *conf_file = NULL, *listen = NULL, *zk_hosts = NULL;
    bool check_only = false, verbose = false;
    char err[512];
    int opt, rc = 1;

    while ((opt = getopt(argc, argv, "c:l:z:tvhV")) != -1) {
        switch (opt) {
        case 'c': conf_file = optarg; break;
        case 'l': listen = optarg; break;
        case 'z': zk_hosts = optarg; break;
        case 't': check_only = true; break;
        case 'v': verbose = true; break;
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

    /* Defaults, then the file, then the flags. */
    if (settings_init(&s) < 0) {
        fprintf(stderr, "lockbrokerd: out of memory\n");
        return 1;
    }
    if ((conf_file && settings_load_file(&s, conf_file, err, sizeof(err)) < 0) ||
        (listen && settings_set(&s, "server", "listen", listen, err, sizeof(err)) < 0) ||
        (zk_hosts && settings_set(&s, "zookeeper", "hosts", zk_hosts, err, sizeof(err)) < 0)) {
        fprintf(stderr, "lockbrokerd: %s\n", err);
        settings_free(&s);
        return 1;
    }
    if (verbose)
        s.log_level = LOG_LVL_DEBUG;
    log_set_level(s.log_level);
    if (check_only) {
        printf("lockbrokerd: configuration OK\n");
        settings_free(&s);
        return 0;
    }

    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(&s);

    if (!(base = event_base_new())) {
        log_error("cannot create the event loop");
        goto out;
    }
    backend = s.zk_hosts ? zk_backend_new(base, &s) : backend_embedded_new();
    if (!backend || !(locks = locks_new(base, backend, s.max_locks_per_client))) {
        log_error("out of memory");
        goto out;
    }
    if (server_start(&srv, base, &s, locks, backend) < 0)
        goto out;
    sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    sigint = evsignal_new(base, SIGINT, on_signal, base);
    if (!sigterm || !sigint || evsignal_add(sigterm, NULL) < 0 || evsignal_add(sigint, NULL) < 0) {
        log_error("cannot install signal handlers");
        server_stop(&srv);
        goto out;
    }

    log_info("lockbrokerd %s ready: %s mode, listening on %s%s%s", PACKAGE_VERSION,
             backend->ops->name, srv.listen_addr, s.unix_socket ? " and " : "",
             s.unix_socket ? s.unix_socket : "");
    event_base_dispatch(base);

    server_stop(&srv);
    log_info("stopped");
    rc = 0;
out:
    if (sigterm)
        event_free(sigterm);
    if (sigint)
        event_free(sigint);
    locks_free(locks);
    if (s.zk_hosts)
        zk_backend_free(backend);
    else
        backend_embedded_free(backend);
    if (base)
        event_base_free(base);
    settings_free(&s);
    return rc;
}
