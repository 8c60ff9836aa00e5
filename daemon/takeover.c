/*
 * takeover.c - the successor's side of a handover (takeover.h): the
 * snapshot and descriptors received, checked whole, then rebuilt.
 */
#include "config.h"
#include "takeover.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "locks.h"
#include "log.h"
#include "snap.h"

extern char **environ;

/* Descriptors passed by systemd (LISTEN_FDS): name to descriptor. */
struct fdnames {
    char **names;
    int first, n;
};

static struct fdnames stored;

/* The connections that came inside the store's "conns" socket, by id. */
struct passed_conn {
    uint64_t id;
    int fd;                    /* -1 once taken */
};

static struct passed_conn *pconns;
static size_t npconns;

static int by_conn_id(const void *a, const void *b)
{
    const struct passed_conn *x = a, *y = b;

    return x->id < y->id ? -1 : x->id > y->id;
}

/* Reads every connection queued on the "conns" socket. 0, or -1. */
static int receive_conns(int sock)
{
    size_t cap = 0;

    for (;;) {
        uint64_t ids[CONNS_PER_MSG];
        char ctl[CMSG_SPACE(sizeof(int) * CONNS_PER_MSG)];
        struct iovec iov = { ids, sizeof(ids) };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                            .msg_controllen = sizeof(ctl) };
        struct cmsghdr *cm;
        ssize_t n = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        size_t nfds = 0;
        int *fds;

        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        cm = CMSG_FIRSTHDR(&m);
        if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
            nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        fds = nfds ? (int *)CMSG_DATA(cm) : NULL;
        if (npconns + nfds > cap) {
            struct passed_conn *more;

            cap = (npconns + nfds) * 2;
            if (!(more = realloc(pconns, cap * sizeof(*more)))) {
                for (size_t i = 0; i < nfds; i++)
                    close(fds[i]);
                return -1;
            }
            pconns = more;
        }
        for (size_t i = 0; i < nfds; i++)
            pconns[npconns++] = (struct passed_conn){ ids[i], fds[i] };
        if ((m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || (size_t)n != nfds * sizeof(uint64_t))
            return -1;
    }
}

/* A connection that came through the store: its descriptor, taken, or -1. */
static int take_passed_conn(uint64_t id)
{
    struct passed_conn key = { id, -1 }, *pc;
    int fd;

    if (!npconns || !(pc = bsearch(&key, pconns, npconns, sizeof(*pconns), by_conn_id)))
        return -1;
    fd = pc->fd;
    pc->fd = -1;
    return fd;
}

static void free_passed_conns(void)
{
    for (size_t i = 0; i < npconns; i++)
        if (pconns[i].fd >= 0)
            close(pconns[i].fd);
    free(pconns);
    pconns = NULL;
    npconns = 0;
}

static int passed_fd(const char *name)
{
    for (int i = 0; i < stored.n; i++)
        if (stored.names[i] && strcmp(stored.names[i], name) == 0)
            return stored.first + i;
    return -1;
}

/* LISTEN_FDS for this process with a "snapshot" among LISTEN_FDNAMES: its fd. */
static int fdstore_snapshot(void)
{
    const char *pid = getenv("LISTEN_PID"), *nfds = getenv("LISTEN_FDS");
    const char *names = getenv("LISTEN_FDNAMES");
    char *copy, *save = NULL, *tok;
    int n;

    if (!pid || !nfds || !names || atol(pid) != (long)getpid() || (n = atoi(nfds)) <= 0)
        return -1;
    if (!(copy = strdup(names)) || !(stored.names = calloc((size_t)n, sizeof(char *)))) {
        free(copy);
        return -1;
    }
    stored.first = 3;      /* SD_LISTEN_FDS_START */
    stored.n = n;
    for (tok = strtok_r(copy, ":", &save); tok && n > 0; tok = strtok_r(NULL, ":", &save))
        stored.names[stored.n - n--] = strdup(tok);
    free(copy);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    if (passed_fd("conns") >= 0) {
        if (receive_conns(passed_fd("conns")) < 0)
            return -2;
        qsort(pconns, npconns, sizeof(*pconns), by_conn_id);
    }
    return passed_fd("snapshot");
}

static int read_all(int fd, char **buf, size_t *len)
{
    struct stat st;
    size_t off = 0;

    if (fstat(fd, &st) < 0 || st.st_size < 0 || (uint64_t)st.st_size > SNAP_MAX_BYTES ||
        !(*buf = malloc((size_t)st.st_size + 1)))
        return -1;
    while (off < (size_t)st.st_size) {
        ssize_t n = pread(fd, *buf + off, (size_t)st.st_size - off, (off_t)off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    *len = off;
    (*buf)[off] = '\0';
    return 0;
}

static void fdstore_forget(void);

/* The listeners systemd passed by name, in restart_listener_names' order. */
static void passed_listeners(int fds[RESTART_LISTENERS])
{
    for (int i = 0; i < RESTART_LISTENERS; i++)
        fds[i] = passed_fd(restart_listener_names[i]);
}

/* in's listeners, from fds in restart_listener_names' order. */
static void take_listeners(struct takeover_in *in, const int fds[RESTART_LISTENERS])
{
    in->fds.tcp = fds[RESTART_TCP];
    in->fds.unix_fd = fds[RESTART_UNIX];
    in->fds.tls = fds[RESTART_TLS];
    in->metrics_fd = fds[RESTART_METRICS];
}

/* The snapshot cannot be used: every descriptor it came with is closed. */
static void refuse(struct takeover_in *in, const char *why)
{
    int keep[RESTART_LISTENERS];

    fdstore_forget();
    log_error("handover: refusing the snapshot passed on: %s; closing the connections it "
              "carried (their locks end, as in a crash) and starting afresh", why);
    if (!stored.n) {
        close_range(3, ~0U, 0);
        takeover_in_free(in);
        return;
    }
    /* From systemd's store the listeners are known by name: listening on
     * them goes on (binding anew could race the store's copies closing). */
    passed_listeners(keep);
    take_listeners(in, keep);
    for (int i = 0; i < stored.n; i++) {
        int fd = stored.first + i, k = 0;

        while (k < RESTART_LISTENERS && keep[k] != fd)
            k++;
        if (k == RESTART_LISTENERS)
            close(fd);
    }
    takeover_in_free(in);
}

static bool read_head(struct takeover_in *in, struct snap_r *r)
{
    int fds[RESTART_LISTENERS];

    if (!restart_head_read(r, &in->head))
        return false;
    memcpy(fds, in->head.listeners, sizeof(fds));
    /* From systemd's store the names say which is which; after an exec the
     * numbers are the same. */
    if (in->fdstore)
        passed_listeners(fds);
    take_listeners(in, fds);
    return true;
}

int takeover_receive(struct takeover_in *in)
{
    const char *env = getenv(HANDOVER_ENV);
    int fd = -1;
    char *end;

    memset(in, 0, sizeof(*in));
    in->fds = (struct server_fds){ -1, -1, -1 };
    in->metrics_fd = -1;
    if (env) {
        fd = (int)strtol(env, &end, 10);
        if (*end || fd < 3)
            fd = -1;
        unsetenv(HANDOVER_ENV);
    } else if ((fd = fdstore_snapshot()) >= 0) {
        in->fdstore = true;
    }
    if (fd < 0) {
        if (env || stored.n)
            refuse(in, fd == -2 ? "the connections it carried could not be read"
                                : "no snapshot descriptor came with it");
        return 0;
    }
    if (read_all(fd, &in->buf, &in->len) < 0) {
        refuse(in, "it cannot be read");
        return 0;
    }
    close(fd);
    if (!(in->r = calloc(1, sizeof(*in->r)))) {
        refuse(in, "out of memory");
        return 0;
    }
    if (snap_r_open(in->r, in->buf, in->len) < 0 || !read_head(in, in->r)) {
        char why[sizeof(in->r->err)];

        snprintf(why, sizeof(why), "%s", in->r->err);
        refuse(in, why);
        return 0;
    }
    return 1;
}

void takeover_in_free(struct takeover_in *in)
{
    free(in->buf);
    free(in->r);
    in->buf = NULL;
    in->r = NULL;
    for (int i = 0; i < stored.n; i++)
        free(stored.names[i]);
    free(stored.names);
    stored.names = NULL;
    stored.n = 0;
    free_passed_conns();       /* any not taken over are closed */
}

/* The successor's descriptor for a connection the old daemon named. */
static int conn_fd_of(void *arg, int64_t old_fd, uint64_t id)
{
    struct takeover_in *in = arg;

    if (in->fdstore)
        return take_passed_conn(id);
    if (old_fd < 3 || old_fd > INT32_MAX || fcntl((int)old_fd, F_GETFD) < 0)
        return -1;
    return (int)old_fd;
}

/*
 * Taken from systemd's store: the store lets go of its copies, or a client's
 * close would never end the connection (the store's copy keeps it open), and
 * the next restart would find stale ones.
 */
static void fdstore_forget(void)
{
#ifdef HAVE_LIBSYSTEMD
    char msg[300];

    for (int i = 0; i < stored.n; i++) {
        if (!stored.names[i])
            continue;
        snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", stored.names[i]);
        sd_notify(0, msg);
    }
#endif
}

/* Restoring failed half way: nothing of it may serve. Start afresh. */
static void restart_afresh(const struct takeover_ctx *p, const char *why)
{
    log_error("handover: the snapshot passed on does not add up: %s; closing the connections "
              "it carried (their locks end, as in a crash) and starting afresh", why);
    fdstore_forget();
    close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    unsetenv(HANDOVER_ENV);
    execve(p->exe, p->argv, environ);
    log_error("handover: cannot execute %s: %s", p->exe, strerror(errno));
    _exit(1);
}

int takeover_restore(struct takeover_in *in, const struct takeover_ctx *p)
{
    struct restart_in rin = { .fd_of = conn_fd_of, .fd_arg = in };
    struct snap_r *r = in->r;
    char why[200];

    if (strcmp(in->head.mode, p->mode) != 0)
        snap_r_fail(r, "it is of %s mode, and this daemon runs in %s mode", in->head.mode,
                    p->mode);
    if (!restart_restore(p->restart, r, &rin)) {
        snprintf(why, sizeof(why), "record %s: %s", r->kind, r->err);
        restart_afresh(p, why);
    }
    if (in->fdstore)
        fdstore_forget();
    p->srv->handovers = in->head.handovers + 1;
    p->srv->started = (time_t)in->head.started;
    p->srv->stats.conns_total = in->head.conns_total;
    restart_resume(p->restart, true);
    log_info("handover: took over %llu connections, %llu holds and waits, %llu leases and "
             "%llu watches %s; %lld ms after the daemon before stopped parsing",
             (unsigned long long)restart_records(p->restart, "conn"),
             (unsigned long long)restart_records(p->restart, "hold"),
             (unsigned long long)restart_records(p->restart, "lease"),
             (unsigned long long)restart_records(p->restart, "watch"),
             in->fdstore ? "from systemd's file descriptor store" : "from the daemon before",
             (long long)(locks_mono_us() - in->head.stopped_us) / 1000);
    takeover_in_free(in);
    return 0;
}
