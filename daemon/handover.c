/*
 * handover.c - the old daemon's side of a handover (handover.h): the
 * successor checked, requests settled, the snapshot written, everything
 * passed on (takeover.c is the successor's side).
 */
#include "config.h"
#include "handover.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "accept_pause.h"
#include "backend.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "restart.h"
#include "server.h"
#include "snap.h"

extern char **environ;

/* How often the old daemon looks whether every parked request can go. */
#define QUIET_POLL_MS 5

/* The old daemon's handover under way, or NULL. */
struct handover_out {
    struct handover_ctx *p;
    bool to_fdstore;               /* SIGTERM under systemd: into the store, then exit */
    pid_t check_pid;
    int check_fd;                  /* the check's stdout, read to its end */
    struct event *check_ev, *timer;
    char check_out[512];
    size_t check_len;
    int64_t stopped_us;            /* monotonic: parsing stopped */
    char why[512];                 /* what the last look found not ready */
    unsigned dropped;              /* connections closed when parsing stopped */
};

static struct handover_out *current;

static int64_t mono_us(void)
{
    return locks_mono_us();
}

/* ------------------------------------------------------- the snapshot out */

static int listener_fd(struct evconnlistener *l)
{
    return l ? evconnlistener_get_fd(l) : -1;
}

/* The daemon's listening sockets, in restart_listener_names' order; -1: none. */
static void carried_listeners(const struct handover_ctx *p, int fds[RESTART_LISTENERS])
{
    fds[RESTART_TCP] = listener_fd(p->srv->tcp);
    fds[RESTART_UNIX] = listener_fd(p->srv->unix_sock);
    fds[RESTART_TLS] = listener_fd(p->srv->tls_sock);
    fds[RESTART_METRICS] = metrics_fd(p->metrics);
}

/* The head, then every part's records, in the order they were registered. */
static int snapshot_write(struct handover_out *h, char **buf, size_t *len)
{
    struct handover_ctx *p = h->p;
    struct server *srv = p->srv;
    struct restart_head head = {
        .stopped_us = h->stopped_us, .started = (int64_t)srv->started,
        .handovers = srv->handovers, .conns_total = srv->stats.conns_total,
    };
    struct snap_w w;

    snprintf(head.daemon_id, sizeof(head.daemon_id), "%s", srv->daemon_id);
    snprintf(head.mode, sizeof(head.mode), "%s", p->backend->ops->name);
    carried_listeners(p, head.listeners);
    snap_w_init(&w, SNAP_MAX_BYTES);
    restart_head_save(&w, &head);
    restart_save(p->restart, &w);
    return snap_w_finish(&w, buf, len);
}

/* The snapshot in a memfd, read from its start. -1 (logged) on failure. */
static int snapshot_fd(const char *buf, size_t len)
{
    int fd = memfd_create("lockbrokerd-snapshot", 0);
    size_t off = 0;

    if (fd < 0) {
        log_error("handover: memfd_create: %s", strerror(errno));
        return -1;
    }
    while (off < len) {
        ssize_t n = write(fd, buf + off, len - off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            log_error("handover: writing the snapshot: %s", strerror(errno));
            close(fd);
            return -1;
        }
        off += (size_t)n;
    }
    lseek(fd, 0, SEEK_SET);
    return fd;
}

static void keep_fd(int fd)
{
    if (fd >= 0)
        fcntl(fd, F_SETFD, 0);
}

static void keep_conn_fd(void *arg, int fd, uint64_t id)
{
    keep_fd(fd);
}

/* ------------------------------------------------------ giving up or done */

static void handover_end(void)
{
    struct handover_out *h = current;

    if (!h)
        return;
    if (h->check_ev)
        event_free(h->check_ev);
    if (h->timer)
        event_free(h->timer);
    if (h->check_fd >= 0)
        close(h->check_fd);
    if (h->check_pid > 0) {
        kill(h->check_pid, SIGKILL);
        waitpid(h->check_pid, NULL, 0);
    }
    free(h);
    current = NULL;
}

/* The lock ports (not the metrics one), through the registry that also
 * pauses them when accept() fails, so that a pause does not end a hold. */
static void listeners_enable(struct server *srv, bool on)
{
    struct evconnlistener *ls[] = { srv->tcp, srv->unix_sock, srv->tls_sock };

    for (size_t i = 0; i < sizeof(ls) / sizeof(ls[0]); i++)
        if (ls[i])
            accept_pause_hold(srv->accept_pause, ls[i], ACCEPT_HOLD_HANDOVER, !on);
}

/* The handover did not happen: serve on as before, or, asked to stop
 * (SIGTERM into systemd's store), stop as usual. */
static void handover_give_up(const char *fmt, const char *why)
{
    struct server *srv = current->p->srv;
    struct event_base *base = current->p->base;
    bool stop = current->to_fdstore;
    char msg[768];

    snprintf(msg, sizeof(msg), fmt, why);
    srv->stats.handovers_given_up++;       /* /metrics: for an alert */
    log_error("%s; %s", msg, stop ? "stopping as usual (the connections close, their locks end)"
                                  : "serving on, nothing lost");
    if (srv->handing_over) {
        srv->handing_over = false;
        listeners_enable(srv, true);
        restart_resume(current->p->restart, false);
    }
    handover_end();
    if (stop)
        event_base_loopbreak(base);
}

#ifdef HAVE_LIBSYSTEMD
/* One descriptor into systemd's store under name. */
static int fdstore_put(int fd, const char *name)
{
    char msg[300];

    snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
    return sd_pid_notify_with_fds(0, 0, msg, &fd, 1) > 0 ? 0 : -1;
}

/*
 * The connections go to the store inside one socket: systemd passes a
 * start every stored name in one environment string (at most 128 KiB) and
 * compares each new descriptor with every stored one, so thousands of them
 * would not go through. They are queued, CONNS_PER_MSG at a time with their
 * ids, on a datagram socket pair whose reading end is stored as "conns".
 */
struct conn_batch {
    int sock;                  /* the writing end */
    int fds[CONNS_PER_MSG];
    uint64_t ids[CONNS_PER_MSG];
    unsigned n;
    bool failed;
};

static void batch_send(struct conn_batch *b)
{
    char ctl[CMSG_SPACE(sizeof(int) * CONNS_PER_MSG)];
    struct iovec iov = { b->ids, b->n * sizeof(uint64_t) };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * b->n) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

    if (b->n == 0 || b->failed)
        return;
    memset(ctl, 0, sizeof(ctl));
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * b->n);
    memcpy(CMSG_DATA(cm), b->fds, sizeof(int) * b->n);
    if (sendmsg(b->sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        log_error("handover: queueing connections for systemd's store: %s", strerror(errno));
        b->failed = true;
    }
    b->n = 0;
}

static void batch_conn(void *arg, int fd, uint64_t id)
{
    struct conn_batch *b = arg;

    b->fds[b->n] = fd;
    b->ids[b->n++] = id;
    if (b->n == CONNS_PER_MSG)
        batch_send(b);
}

/* The reading end of a socket queueing every connection, or -1 (logged). */
static int conns_socket(struct restart *reg)
{
    struct conn_batch b = { .sock = -1 };
    int sv[2], size = 8 << 20;

    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0) {
        log_error("handover: socketpair: %s", strerror(errno));
        return -1;
    }
    /* Room for every batch (the kernel caps it at wmem_max and rmem_max). */
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    b.sock = sv[0];
    restart_each_fd(reg, batch_conn, &b);
    batch_send(&b);
    close(sv[0]);
    if (b.failed) {
        close(sv[1]);
        return -1;
    }
    return sv[1];
}
#endif

/* Passes everything to systemd's store; 0, or -1 (logged). */
static int pass_to_fdstore(struct handover_out *h, int snap)
{
#ifdef HAVE_LIBSYSTEMD
    int listeners[RESTART_LISTENERS], failed = 0, conns = conns_socket(h->p->restart);

    carried_listeners(h->p, listeners);
    for (int i = 0; i < RESTART_LISTENERS; i++)
        if (listeners[i] >= 0 && fdstore_put(listeners[i], restart_listener_names[i]) < 0)
            failed = 1;
    if (conns < 0 || fdstore_put(conns, "conns") < 0)
        failed = 1;
    /* Last: a successor that finds the snapshot finds everything else too. */
    if (failed || fdstore_put(snap, "snapshot") < 0) {
        log_error("handover: systemd refused a descriptor (FileDescriptorStoreMax= too small, "
                  "or not run by systemd)");
        return -1;
    }
    return 0;
#else
    log_error("handover: built without libsystemd: no file descriptor store");
    return -1;
#endif
}

/* Every parked request can be carried: write the snapshot and go. */
static void handover_go(struct handover_out *h)
{
    struct handover_ctx *p = h->p;
    struct server *srv = p->srv;
    struct locks_stats st;
    unsigned dropped = h->dropped;
    int listeners[RESTART_LISTENERS];
    char *buf = NULL, fdnum[16];
    size_t len = 0;
    int fd, err;

    if (snapshot_write(h, &buf, &len) < 0) {
        handover_give_up("handover: given up: %s", "the snapshot would be larger than "
                         "256 MiB, or out of memory");
        return;
    }
    fd = snapshot_fd(buf, len);
    free(buf);
    if (fd < 0) {
        handover_give_up("handover: given up: %s", "the snapshot could not be written");
        return;
    }
    locks_get_stats(p->locks, &st);
    log_info("handover: %u connections, %llu holds, %llu waits; snapshot of %zu bytes, %lld ms "
             "after parsing stopped (%u TLS or ended connections closed); %s %s", srv->nconns,
             (unsigned long long)st.held, (unsigned long long)st.waiting, len,
             (long long)(mono_us() - h->stopped_us) / 1000, dropped,
             h->to_fdstore ? "passing them to systemd's file descriptor store for" :
                             "executing", h->to_fdstore ? "the next start" : p->exe);
    if (h->to_fdstore) {
        if (pass_to_fdstore(h, fd) < 0) {
            close(fd);
            handover_give_up("handover: given up: %s", "systemd's store refused a descriptor");
            return;
        }
        /* Nothing of ours may end now: not the connections, not the session. */
        _exit(0);
    }
    /* Only what the successor takes crosses the exec. */
    if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
        for (int i = 3; i < 65536 + 64; i++)
            fcntl(i, F_SETFD, FD_CLOEXEC);
    }
    keep_fd(fd);
    carried_listeners(p, listeners);
    for (int i = 0; i < RESTART_LISTENERS; i++)
        keep_fd(listeners[i]);
    restart_each_fd(p->restart, keep_conn_fd, NULL);
    snprintf(fdnum, sizeof(fdnum), "%d", fd);
    setenv(HANDOVER_ENV, fdnum, 1);
    execve(p->exe, p->argv, environ);
    err = errno;
    unsetenv(HANDOVER_ENV);
    close(fd);
    handover_give_up("handover: given up: cannot execute the successor: %s",
                     strerror(err));
}

static void on_quiet_poll(evutil_socket_t fd, short what, void *arg)
{
    struct handover_out *h = arg;
    /* Connections that ended meanwhile (lingering) go first: nothing of
     * theirs is held any more; then whatever is left must be at rest. */
    h->dropped += restart_shed(h->p->restart);
    if (restart_ready(h->p->restart, h->why, sizeof(h->why))) {
        handover_go(h);
        return;
    }
    if (mono_us() - h->stopped_us > (int64_t)HANDOVER_QUIET_MS * 1000) {
        char why[sizeof(h->why) + 64];

        snprintf(why, sizeof(why), "after %d ms %s", HANDOVER_QUIET_MS, h->why);
        handover_give_up("handover: given up: %s", why);
    }
}

/* The successor accepts: stop parsing and wait for parked requests to settle. */
static void handover_quiesce(struct handover_out *h)
{
    struct timeval tv = { 0, QUIET_POLL_MS * 1000 };
    struct server *srv = h->p->srv;

    srv->handing_over = true;
    listeners_enable(srv, false);
    h->stopped_us = mono_us();
    /* TLS connections cannot be carried: closed first, so that what their
     * holds' ends set off (a grant, a ZooKeeper delete) settles before the
     * snapshot like anything else in flight. */
    h->dropped = restart_shed(h->p->restart);
    if (!(h->timer = event_new(h->p->base, -1, EV_PERSIST, on_quiet_poll, h)) ||
        event_add(h->timer, &tv) < 0) {
        handover_give_up("handover: given up: %s", "out of memory");
        return;
    }
    on_quiet_poll(-1, 0, h);
}

/* ------------------------------------------------- checking the successor */

static void check_finished(struct handover_out *h)
{
    char line[64];
    int status = 0;

    h->check_out[h->check_len] = '\0';
    waitpid(h->check_pid, &status, 0);
    h->check_pid = 0;
    snprintf(line, sizeof(line), "snapshot format %d\n", SNAP_FORMAT);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(h->check_out, line)) {
        handover_quiesce(h);
        return;
    }
    for (char *q = h->check_out; *q; q++)
        if (*q == '\n')
            *q = ' ';
    snprintf(h->why, sizeof(h->why), "%s", h->check_out[0] ? h->check_out :
             "it printed nothing");
    handover_give_up(h->to_fdstore ? "handover: refused: the next start would not accept "
                     "the settings or this snapshot format: %s" : "handover: refused: the "
                     "successor does not accept the settings or this snapshot format: %s",
                     h->why);
}

static void on_check_output(evutil_socket_t fd, short what, void *arg)
{
    struct handover_out *h = arg;
    ssize_t n;

    if (what & EV_TIMEOUT) {
        snprintf(h->check_out, sizeof(h->check_out), "no answer within %d ms",
                 HANDOVER_CHECK_MS);
        h->check_len = strlen(h->check_out);
        kill(h->check_pid, SIGKILL);
        check_finished(h);
        return;
    }
    n = read(fd, h->check_out + h->check_len, sizeof(h->check_out) - 1 - h->check_len);
    if (n > 0) {
        h->check_len += (size_t)n;
        if (h->check_len < sizeof(h->check_out) - 1)
            return;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    event_del(h->check_ev);
    close(h->check_fd);
    h->check_fd = -1;
    check_finished(h);
}

/* Runs `<exe> --check-handover <the daemon's arguments>`, its stdout and stderr piped. */
static int check_start(struct handover_out *h)
{
    struct handover_ctx *p = h->p;
    struct timeval tv = { HANDOVER_CHECK_MS / 1000, 0 };
    posix_spawn_file_actions_t fa;
    char **args;
    int pfd[2], argc = 0, rc;

    while (p->argv[argc])
        argc++;
    if (!(args = calloc((size_t)argc + 2, sizeof(*args))) || pipe2(pfd, O_CLOEXEC) < 0) {
        free(args);
        return -1;
    }
    args[0] = p->argv[0];
    args[1] = "--check-handover";
    for (int i = 1; i < argc; i++)
        args[i + 1] = p->argv[i];
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    rc = posix_spawn(&h->check_pid, p->exe, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    free(args);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        h->check_pid = 0;
        errno = rc;
        return -1;
    }
    h->check_fd = pfd[0];
    evutil_make_socket_nonblocking(h->check_fd);
    if (!(h->check_ev = event_new(p->base, h->check_fd, EV_READ | EV_PERSIST, on_check_output,
                                  h)) || event_add(h->check_ev, &tv) < 0)
        return -1;
    return 0;
}

static void handover_start(struct handover_ctx *p, bool to_fdstore)
{
    struct handover_out *h;
    char why[512];

    if (current) {
        log_info("handover: one is under way already");
        return;
    }
    if (!p->backend->ops->restart) {
        p->srv->stats.handovers_given_up++;
        log_error("handover: %s mode cannot hand over; %s", p->backend->ops->name,
                  to_fdstore ? "stopping as usual" : "serving on");
        if (to_fdstore)
            event_base_loopbreak(p->base);
        return;
    }
    /* Settings that allow none: said at once, nothing stopped (a wait
     * for readiness that cannot come would stop every client for
     * HANDOVER_QUIET_MS). */
    if (p->backend->ops->handover_possible &&
        !p->backend->ops->handover_possible(p->backend->impl, why, sizeof(why))) {
        p->srv->stats.handovers_given_up++;
        log_error("handover: refused: %s; %s", why, to_fdstore
                  ? "stopping as usual (the connections close, their locks end)"
                  : "serving on, nothing lost");
        if (to_fdstore)
            event_base_loopbreak(p->base);
        return;
    }
    if (!(h = calloc(1, sizeof(*h)))) {
        p->srv->stats.handovers_given_up++;
        log_error("handover: out of memory; serving on");
        return;
    }
    h->p = p;
    h->to_fdstore = to_fdstore;
    h->check_fd = -1;
    current = h;
    log_info("handover: checking the successor: %s --check-handover", p->exe);
    if (check_start(h) < 0)
        handover_give_up("handover: refused: cannot run the successor's check: %s",
                         strerror(errno));
}

void handover_begin(struct handover_ctx *p)
{
    handover_start(p, false);
}

bool handover_to_fdstore_wanted(void)
{
    const char *e = getenv(FDSTORE_ENV);

    return e && strcmp(e, "1") == 0 && getenv("NOTIFY_SOCKET");
}

int handover_to_fdstore(struct handover_ctx *p)
{
    handover_start(p, true);
    return 0;
}

/* One line per format it reads: the old daemon looks for its own. */
void handover_print_format(void)
{
    for (int f = SNAP_FORMAT; f >= SNAP_FORMAT_OLDEST; f--)
        printf("lockbrokerd %s: snapshot format %d\n", PACKAGE_VERSION, f);
}
