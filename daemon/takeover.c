/*
 * takeover.c - the successor's side of a handover (handover.h): the
 * snapshot and descriptors received, checked whole, then rebuilt.
 */
#include "config.h"
#include "handover.h"

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

#include "backend.h"
#include "client.h"
#include "cmd.h"
#include "conn.h"
#include "lease.h"
#include "locks.h"
#include "log.h"
#include "snap.h"

extern char **environ;

/* Descriptors passed by systemd (LISTEN_FDS): name to descriptor. */
struct fdnames {
    char **names;
    int first, n;
};

static struct fdnames passed;

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
    for (int i = 0; i < passed.n; i++)
        if (passed.names[i] && strcmp(passed.names[i], name) == 0)
            return passed.first + i;
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
    if (!(copy = strdup(names)) || !(passed.names = calloc((size_t)n, sizeof(char *)))) {
        free(copy);
        return -1;
    }
    passed.first = 3;      /* SD_LISTEN_FDS_START */
    passed.n = n;
    for (tok = strtok_r(copy, ":", &save); tok && n > 0; tok = strtok_r(NULL, ":", &save))
        passed.names[passed.n - n--] = strdup(tok);
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

/* The listeners systemd passed by name, in handover_listener_names' order. */
static void passed_listeners(int fds[HANDOVER_LISTENERS])
{
    for (int i = 0; i < HANDOVER_LISTENERS; i++)
        fds[i] = passed_fd(handover_listener_names[i]);
}

/* in's listeners, from fds in handover_listener_names' order. */
static void take_listeners(struct handover_in *in, const int fds[HANDOVER_LISTENERS])
{
    in->fds.tcp = fds[HANDOVER_TCP];
    in->fds.unix_fd = fds[HANDOVER_UNIX];
    in->fds.tls = fds[HANDOVER_TLS];
    in->metrics_fd = fds[HANDOVER_METRICS];
}

/* The snapshot cannot be used: every descriptor it came with is closed. */
static void refuse(struct handover_in *in, const char *why)
{
    int keep[HANDOVER_LISTENERS];

    fdstore_forget();
    log_error("handover: refusing the snapshot passed on: %s; closing the connections it "
              "carried (their locks end, as in a crash) and starting afresh", why);
    if (!passed.n) {
        close_range(3, ~0U, 0);
        handover_in_free(in);
        return;
    }
    /* From systemd's store the listeners are known by name: listening on
     * them goes on (binding anew could race the store's copies closing). */
    passed_listeners(keep);
    take_listeners(in, keep);
    for (int i = 0; i < passed.n; i++) {
        int fd = passed.first + i, k = 0;

        while (k < HANDOVER_LISTENERS && keep[k] != fd)
            k++;
        if (k == HANDOVER_LISTENERS)
            close(fd);
    }
    handover_in_free(in);
}

static bool read_head(struct handover_in *in, struct snap_r *r)
{
    const char *kind = snap_r_next(r);
    int fds[HANDOVER_LISTENERS];

    if (!kind || strcmp(kind, "daemon") != 0)
        return snap_r_fail(r, "it does not begin with the daemon's record");
    snap_r_str_copy(r, in->daemon_id, sizeof(in->daemon_id));
    snap_r_str_copy(r, in->mode, sizeof(in->mode));
    in->stopped_us = snap_r_i64(r);
    in->started = snap_r_i64(r);
    in->handovers = snap_r_u64(r);
    in->conns_total = snap_r_u64(r);
    for (int i = 0; i < HANDOVER_LISTENERS; i++)
        fds[i] = (int)snap_r_i64(r);
    if (!snap_r_done(r))
        return false;
    /* From systemd's store the names say which is which; after an exec the
     * numbers are the same. */
    if (in->fdstore)
        passed_listeners(fds);
    take_listeners(in, fds);
    return true;
}

int handover_receive(struct handover_in *in)
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
        if (env || passed.n)
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

void handover_in_free(struct handover_in *in)
{
    free(in->buf);
    free(in->r);
    in->buf = NULL;
    in->r = NULL;
    for (int i = 0; i < passed.n; i++)
        free(passed.names[i]);
    free(passed.names);
    passed.names = NULL;
    passed.n = 0;
    free_passed_conns();       /* any not taken over are closed */
}

/* What restoring has made so far, to find owners by their keys. */
struct restoring {
    struct handover_in *in;
    struct handover_parts *p;
    struct lease **leases;
    size_t nleases, leases_cap;
    struct client **clients;       /* in increasing id order, as written */
    size_t nclients, clients_cap;
    struct lock *lock;             /* the lock whose holds are being read */
    unsigned holds, watches;
};

static bool grow(void *arrp, size_t *cap, size_t n, size_t size)
{
    void **arr = arrp;
    void *more;

    if (n < *cap)
        return true;
    *cap = *cap ? *cap * 2 : 64;
    if (!(more = realloc(*arr, *cap * size)))
        return false;
    *arr = more;
    return true;
}

static struct client *client_by_id(struct restoring *rs, uint64_t id)
{
    size_t lo = 0, hi = rs->nclients;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (rs->clients[mid]->id == id)
            return rs->clients[mid];
        if (rs->clients[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int conn_fd_of(void *arg, int64_t old_fd, uint64_t id)
{
    struct restoring *rs = arg;

    if (rs->in->fdstore)
        return take_passed_conn(id);
    if (old_fd < 3 || old_fd > INT32_MAX || fcntl((int)old_fd, F_GETFD) < 0)
        return -1;
    return (int)old_fd;
}

static struct client *client_of_record(struct restoring *rs, struct snap_r *r)
{
    uint64_t id = snap_r_u64(r);
    struct client *c = snap_r_ok(r) ? client_by_id(rs, id) : NULL;

    if (!c && snap_r_ok(r))
        snap_r_fail(r, "a %s record names conn %" PRIu64 ", which is not there", r->kind, id);
    return c;
}

static bool restore_hold(struct restoring *rs, struct snap_r *r)
{
    char key[32];
    struct lock_owner *o = NULL;
    uint64_t n;
    char *end;

    snap_r_str_copy(r, key, sizeof(key));
    if (!snap_r_ok(r))
        return false;
    if (key[0]) {
        n = strtoull(key + 1, &end, 10);
        if (key[0] == 'l' && !*end && n < rs->nleases)
            o = leases_owner(rs->leases[n]);
        else if (key[0] == 'c' && !*end && client_by_id(rs, n))
            o = &client_by_id(rs, n)->owner;
        else
            return snap_r_fail(r, "a hold names owner %s, which is not there", key);
    }
    rs->holds++;
    return locks_restore_hold(rs->p->locks, rs->lock, o, r);
}

static bool restore_server_stats(struct server *srv, struct snap_r *r)
{
    uint64_t n;

    srv->stats.conns_rejected = snap_r_u64(r);
    srv->stats.errors = snap_r_u64(r);
    srv->stats.auth_failures = snap_r_u64(r);
    n = snap_r_u64(r);
    /* Another build may have more or fewer commands: those known are kept. */
    for (uint64_t i = 0; i < n && snap_r_ok(r); i++) {
        uint64_t v = snap_r_u64(r);

        if (i < PROTO_CMD_COUNT)
            srv->stats.cmds[i] = v;
    }
    return snap_r_done(r);
}

static bool restore_record(struct restoring *rs, struct snap_r *r, const char *kind)
{
    struct handover_parts *p = rs->p;
    struct backend *b = p->backend;
    struct client *c;
    struct lease *le;

    if (strcmp(kind, "server_stats") == 0)
        return restore_server_stats(p->srv, r);
    if (strncmp(kind, "backend", 7) == 0)
        return b->ops->restore && b->ops->restore(b->impl, r);
    if (strcmp(kind, "leases") == 0)
        return leases_restore_stats(p->leases, r);
    if (strcmp(kind, "lease") == 0) {
        if (!grow(&rs->leases, &rs->leases_cap, rs->nleases, sizeof(*rs->leases)))
            return snap_r_fail(r, "out of memory");
        if (!(le = leases_restore(p->leases, r)))
            return false;
        rs->leases[rs->nleases++] = le;
        return true;
    }
    if (strcmp(kind, "conn") == 0) {
        if (!grow(&rs->clients, &rs->clients_cap, rs->nclients, sizeof(*rs->clients)))
            return snap_r_fail(r, "out of memory");
        if (!(c = conn_restore(p->srv, r, conn_fd_of, rs)))
            return false;
        if (rs->nclients && rs->clients[rs->nclients - 1]->id >= c->id)
            return snap_r_fail(r, "conn %" PRIu64 " is out of order", c->id);
        rs->clients[rs->nclients++] = c;
        return true;
    }
    if (strcmp(kind, "locks") == 0)
        return locks_restore_stats(p->locks, r);
    if (strcmp(kind, "lock") == 0)
        return locks_restore_check(p->locks, rs->lock, r) &&
               locks_restore_lock(p->locks, r, &rs->lock);
    if (strcmp(kind, "hold") == 0)
        return rs->lock ? restore_hold(rs, r) : snap_r_fail(r, "a hold before any lock");
    if (strcmp(kind, "pending") == 0)
        return (c = client_of_record(rs, r)) &&
               cmd_restore_pending(c, r, rs->leases, rs->nleases);
    if (strcmp(kind, "watch") == 0) {
        rs->watches++;
        return (c = client_of_record(rs, r)) && cmd_restore_watch(c, r);
    }
    return snap_r_fail(r, "an unknown record %s", kind);
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

    for (int i = 0; i < passed.n; i++) {
        if (!passed.names[i])
            continue;
        snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", passed.names[i]);
        sd_notify(0, msg);
    }
#endif
}

/* Restoring failed half way: nothing of it may serve. Start afresh. */
static void restart_afresh(struct handover_parts *p, const char *why)
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

int handover_restore(struct handover_in *in, struct handover_parts *p)
{
    struct restoring rs = { .in = in, .p = p };
    struct snap_r *r = in->r;
    const char *kind;
    char why[200];

    if (strcmp(in->mode, p->backend->ops->name) != 0)
        snap_r_fail(r, "it is of %s mode, and this daemon runs in %s mode", in->mode,
                    p->backend->ops->name);
    while ((kind = snap_r_next(r)))
        if (!restore_record(&rs, r, kind) && snap_r_ok(r))
            snap_r_fail(r, "record %s could not be read", kind);
    if (snap_r_ok(r))
        locks_restore_check(p->locks, rs.lock, r);
    free(rs.leases);
    free(rs.clients);
    if (!snap_r_ok(r)) {
        snprintf(why, sizeof(why), "record %s: %s", r->kind, r->err);
        restart_afresh(p, why);
    }
    if (in->fdstore)
        fdstore_forget();
    p->srv->handovers = in->handovers + 1;
    p->srv->started = (time_t)in->started;
    p->srv->stats.conns_total = in->conns_total;
    conn_handover_resume(p->srv);
    log_info("handover: took over %zu connections, %u holds and waits, %zu leases and %u watches "
             "%s; %lld ms after the daemon before stopped parsing", rs.nclients, rs.holds,
             rs.nleases, rs.watches, in->fdstore ? "from systemd's file descriptor store" :
             "from the daemon before", (long long)(locks_mono_us() - in->stopped_us) / 1000);
    handover_in_free(in);
    return 0;
}
