/*
 * run.c - `lockbroker run NAME -- COMMAND`: take a lock, run the command
 * while this connection holds it, release it, exit with the command's status.
 *
 * While the command runs, one poll() loop watches two descriptors: the
 * connection (a pushed `LOST` line, or the connection closing, means the lock
 * is gone: the command's process group gets SIGTERM, then SIGKILL after the
 * grace period) and a self-pipe fed by the signal handlers (SIGCHLD: the
 * command stopped or ended; SIGINT, SIGTERM, SIGHUP: forwarded to the
 * command's process group).
 *
 * The command runs in a process group of its own so that a loss reaches
 * everything it started. When lockbroker is the foreground job of a terminal,
 * the terminal is handed to that group, as a shell does, so the command can
 * read from it and gets ^C and ^Z directly; a stopped command stops
 * lockbroker too, and `fg` continues both.
 *
 * lockbroker is a child subreaper (Linux), so what the command leaves behind
 * becomes its child: after a loss it waits until every process of the
 * command's group has ended before it exits.
 *
 * If lockbroker itself is killed (SIGKILL, the OOM killer), the broker frees
 * the lock when the connection closes; the command gets SIGKILL through its
 * parent-death signal. That reaches the command's main process only: its
 * own children, and set-user-ID programs (the kernel clears the setting on
 * such an exec), are not covered. lockbroker(1) says so.
 */
#include "config.h"

#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_REPLY_MAX 1024   /* requests, and the replies to LOCK and UNLOCK (OK, TIMEOUT, ERR) */

/* The self-pipe: handlers write the signal number, the loop reads it. */
static int sig_pipe[2] = { -1, -1 };

static const int run_signals[] = { SIGCHLD, SIGINT, SIGTERM, SIGHUP };
#define N_RUN_SIGNALS (sizeof(run_signals) / sizeof(run_signals[0]))

enum run_state {
    RUN_HOLDING,     /* the command runs and the lock is held */
    RUN_LOST_TERM,   /* the lock is gone; SIGTERM sent, SIGKILL due at kill_at */
    RUN_LOST_KILL,   /* the lock is gone; SIGKILL sent, waiting for the exit */
};

struct run {
    const struct run_opts *o;
    struct client *conn;      /* closed (fd -1) once the lock is lost */
    char token[32];           /* decimal, as the broker sent it */
    pid_t pid;                /* the command's main process; also its process group id */
    int tty;                  /* controlling terminal handed to the command, or -1 */
    int resume;               /* lockbroker was stopped with the command: continue it */
    enum run_state state;
    int64_t kill_at;          /* RUN_LOST_TERM: monotonic ms at which to send SIGKILL */
};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;

    if (write(sig_pipe[1], &b, 1) < 0) {
        /* The pipe is full: enough wake-ups are already queued. */
    }
    errno = saved;
}

/* ------------------------------------------------------------ take the lock */

/* The LOCK option for -s or -n: "shared", "limit=<n>", or "" (exclusive). */
static void run_mode_option(const struct run_opts *o, char *buf, size_t cap)
{
    if (o->shared)
        snprintf(buf, cap, "shared");
    else if (o->limit > 0)
        snprintf(buf, cap, "limit=%u", o->limit);
    else
        buf[0] = '\0';
}

int run_lock(const struct run_opts *o, struct client *c, char *token, size_t tokcap)
{
    char req[RUN_REPLY_MAX], line[RUN_REPLY_MAX], err[CLIENT_ERR_MAX], mode[32], wait[32], ttl[32];
    int64_t deadline;
    enum client_status st;
    int n;

    if (client_connect(c, o->addr, client_now_ms() + o->io_ms, err, sizeof(err)) < 0) {
        fprintf(stderr, "lockbroker: %s\n", err);
        return CLI_EXIT_UNAVAILABLE;
    }
    run_mode_option(o, mode, sizeof(mode));
    wait[0] = ttl[0] = '\0';
    if (o->wait_ms >= 0)
        snprintf(wait, sizeof(wait), " %" PRId64, o->wait_ms);
    if (o->ttl_ms > 0)
        snprintf(ttl, sizeof(ttl), " ttl=%" PRId64, o->ttl_ms);
    n = snprintf(req, sizeof(req), "LOCK %s%s%s%s%s\n", o->name, wait, mode[0] ? " " : "", mode,
                 ttl);
    st = client_send(c, req, (size_t)n, client_now_ms() + o->io_ms, err, sizeof(err));
    if (st == CLIENT_ERROR) {
        fprintf(stderr, "lockbroker: %s: %s\n", o->addr->spec, err);
        return CLI_EXIT_UNAVAILABLE;
    }
    if (st == CLIENT_OK) {
        /* The broker answers TIMEOUT after wait_ms; allow io_ms on top for the round trip. */
        deadline = o->wait_ms >= 0 ? client_now_ms() + o->wait_ms + o->io_ms : -1;
        st = client_read_line(c, line, sizeof(line), deadline, err, sizeof(err));
    }
    switch (st) {
    case CLIENT_OK:
        break;
    case CLIENT_CLOSED:
        fprintf(stderr, "lockbroker: %s closed the connection before granting lock %s\n",
                o->addr->spec, o->name);
        return CLI_EXIT_UNAVAILABLE;
    case CLIENT_TIMEOUT:
        fprintf(stderr, "lockbroker: no reply from %s within %" PRId64 " ms\n",
                o->addr->spec, o->io_ms);
        return CLI_EXIT_UNAVAILABLE;
    default:   /* an over-long reply */
        fprintf(stderr, "lockbroker: %s: %s\n", o->addr->spec, err);
        return CLI_EXIT_PROTOCOL;
    }

    /* OK <name> <token> */
    size_t nl = strlen(o->name);

    if (strncmp(line, "OK ", 3) == 0 && strncmp(line + 3, o->name, nl) == 0 &&
        line[3 + nl] == ' ') {
        const char *t = line + 4 + nl;
        size_t tl = strspn(t, "0123456789");

        if (tl > 0 && t[tl] == '\0' && tl < tokcap) {
            memcpy(token, t, tl + 1);
            return 0;
        }
    }
    if (strncmp(line, "TIMEOUT ", 8) == 0 && strcmp(line + 8, o->name) == 0) {
        fprintf(stderr, "lockbroker: timed out after %" PRId64 " ms waiting for lock %s\n",
                o->wait_ms, o->name);
        return CLI_EXIT_TIMEOUT;
    }
    if (client_err_exit(line) == CLI_EXIT_CONFLICT) {
        /* Not a failure of the broker: the name is in use as another kind of lock. */
        fprintf(stderr, "lockbroker: lock %s is in use in another mode or with another limit; "
                "cannot take it %s%s (%s: %s)\n", o->name, o->limit > 0 ? "with " : "",
                mode[0] ? mode : "exclusively", o->addr->spec, line);
        return CLI_EXIT_CONFLICT;
    }
    if (strncmp(line, "ERR UNAVAILABLE", 15) == 0 && (line[15] == ' ' || line[15] == '\0')) {
        /* Distributed mode, ZooKeeper out of reach (for the whole of a -w wait, say):
         * an outage, not somebody holding the lock. */
        fprintf(stderr, "lockbroker: lock %s not granted: the lock service (ZooKeeper) is "
                "unreachable from the broker at %s; try again later (%s)\n", o->name,
                o->addr->spec, line);
        return CLI_EXIT_UNAVAILABLE;
    }
    if (strncmp(line, "ERR ", 4) == 0) {
        fprintf(stderr, "lockbroker: %s refused LOCK %s: %s\n", o->addr->spec, o->name, line);
        return client_err_exit(line);
    }
    fprintf(stderr, "lockbroker: unexpected reply to LOCK %s: %s\n", o->name, line);
    return CLI_EXIT_PROTOCOL;
}

/* ----------------------------------------------------------- the command */

static int install_handlers(void)
{
    struct sigaction sa;

    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;   /* no SA_NOCLDSTOP: job control needs to hear of stops */
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_RUN_SIGNALS; i++)
        if (sigaction(run_signals[i], &sa, NULL) < 0)
            return -1;
    return 0;
}

/*
 * The terminal to hand to the command: ours, when our process group is its
 * foreground group (we were started as a foreground job). Otherwise -1.
 */
static int foreground_tty(void)
{
    int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    if (tcgetpgrp(fd) != getpgrp()) {
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * In the child: die with lockbroker, own process group, the terminal,
 * default signals, exec. Never returns. parent is lockbroker's pid, taken
 * before fork().
 */
static void child_exec(const struct run *r, pid_t parent, const sigset_t *orig_mask)
{
    struct sigaction dfl;

    /*
     * If lockbroker dies (kill -9), its connection closes and the broker
     * frees the lock at once: the command must not run on without it.
     * SIGKILL, since nobody is left to enforce a grace period. A parent
     * that died before prctl() took effect is seen by getppid().
     */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
        fprintf(stderr, "lockbroker: prctl(PR_SET_PDEATHSIG): %s\n", strerror(errno));
        _exit(CLI_EXIT_USAGE);
    }
    if (getppid() != parent)
        _exit(CLI_EXIT_LOST);
    setpgid(0, 0);
    if (r->tty >= 0)
        tcsetpgrp(r->tty, getpid());   /* SIGTTOU is blocked: this works from the background */
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (size_t i = 0; i < N_RUN_SIGNALS; i++)
        sigaction(run_signals[i], &dfl, NULL);
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    execvp(r->o->argv[0], r->o->argv);
    fprintf(stderr, "lockbroker: cannot run %s: %s\n", r->o->argv[0], strerror(errno));
    _exit(errno == ENOENT || errno == ENOTDIR ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC);
}

/* The lock is gone: stop using the resource, i.e. end the command. */
static void run_lose(struct run *r, const char *why)
{
    if (r->state != RUN_HOLDING)
        return;
    fprintf(stderr, "lockbroker: lock %s lost (%s); terminating the command\n",
            r->o->name, why);
    client_close(r->conn);
    if (r->o->grace_ms > 0) {
        killpg(r->pid, SIGTERM);
        r->state = RUN_LOST_TERM;
        r->kill_at = client_now_ms() + r->o->grace_ms;
    } else {
        killpg(r->pid, SIGKILL);
        r->state = RUN_LOST_KILL;
    }
    killpg(r->pid, SIGCONT);   /* a stopped command must run to act on SIGTERM */
}

/* Handles lines pushed by the broker while the command runs. */
static void run_read_conn(struct run *r)
{
    static char line[CLIENT_LINE_MAX + 1];   /* lines unknown today may be long */
    char err[CLIENT_ERR_MAX], lost[RUN_REPLY_MAX];
    enum client_status st = client_fill(r->conn, err, sizeof(err));
    int got;

    /* Lines that arrived before an end of file still count. */
    while (r->state == RUN_HOLDING && (got = client_pop_line(r->conn, line, sizeof(line))) != 0) {
        size_t nl = strlen(r->o->name), tl = strlen(r->token);

        if (got < 0)
            break;   /* cannot happen: client_fill refuses longer lines */
        /* LOST <name> <token> <reason> */
        if (strncmp(line, "LOST ", 5) == 0 && strncmp(line + 5, r->o->name, nl) == 0 &&
            line[5 + nl] == ' ' && strncmp(line + 6 + nl, r->token, tl) == 0 &&
            line[6 + nl + tl] == ' ') {
            snprintf(lost, sizeof(lost), "%s", line + 7 + nl + tl);
            run_lose(r, lost);
            return;
        }
        fprintf(stderr, "lockbroker: ignoring unexpected line from the broker: %s\n", line);
    }
    if (r->state != RUN_HOLDING)
        return;
    if (st == CLIENT_CLOSED)
        run_lose(r, "the broker closed the connection");
    else if (st == CLIENT_ERROR) {
        snprintf(lost, sizeof(lost), "connection error: %s", err);
        run_lose(r, lost);
    }
}

/* Gives the terminal back to our process group, if the command has it. */
static void run_take_tty(struct run *r)
{
    if (r->tty >= 0 && tcgetpgrp(r->tty) == r->pid)
        tcsetpgrp(r->tty, getpgrp());
}

/*
 * SIGCHLD: looks at the command without reaping it, so that its process
 * group id stays reserved while stragglers are killed. Returns 1 with the
 * wait status once it has ended, 0 while it runs.
 */
static int run_check_child(struct run *r, int *wstatus)
{
    siginfo_t si;

    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_PID, (id_t)r->pid, &si,
                   WEXITED | WNOHANG | WNOWAIT | (r->tty >= 0 ? WSTOPPED : 0)) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "lockbroker: waitid: %s\n", strerror(errno));
            *wstatus = CLI_EXIT_USAGE << 8;   /* a wait status saying "exited 125" */
            return 1;
        }
        break;
    }
    if (si.si_pid == 0)
        return 0;
    if (si.si_code == CLD_STOPPED || si.si_code == CLD_TRAPPED) {
        /* ^Z: consume the report, take the terminal back and stop with the command. */
        waitid(P_PID, (id_t)r->pid, &si, WSTOPPED | WNOHANG);
        run_take_tty(r);
        raise(SIGTSTP);
        r->resume = 1;   /* the loop looks at the connection before continuing it */
        return 0;
    }
    if (r->state != RUN_HOLDING)
        killpg(r->pid, SIGKILL);   /* whatever it started must not outlive the lock either */
    while (waitpid(r->pid, wstatus, 0) < 0 && errno == EINTR)
        ;
    if (r->state != RUN_HOLDING) {
        /* The group's other processes are ours now (subreaper): wait until all are gone. */
        while (waitpid(-r->pid, NULL, 0) > 0 || errno == EINTR)
            ;
    }
    return 1;
}

/* Reaps orphans the command left behind (they are ours, as subreaper), not the command. */
static void run_reap_orphans(const struct run *r)
{
    siginfo_t si;

    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0 ||
            si.si_pid == r->pid)
            return;
        waitpid(si.si_pid, NULL, 0);
    }
}

/* Supervises the command until it ends. Returns its wait status. */
static int run_supervise(struct run *r)
{
    for (;;) {
        struct pollfd p[2] = {
            { .fd = r->conn->fd, .events = POLLIN },   /* -1 once lost: poll ignores it */
            { .fd = sig_pipe[0], .events = POLLIN },
        };
        int timeout = -1, wstatus;

        if (r->resume)
            timeout = 0;
        else if (r->state == RUN_LOST_TERM) {
            int64_t left = r->kill_at - client_now_ms();

            timeout = left < 0 ? 0 : (int)left;
        }
        if (poll(p, 2, timeout) < 0 && errno != EINTR) {
            fprintf(stderr, "lockbroker: poll: %s\n", strerror(errno));
            return CLI_EXIT_USAGE << 8;
        }
        /* The connection first: when a loss and the command's end arrive together, the loss counts. */
        if (r->conn->fd >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            run_read_conn(r);
        if (r->state == RUN_LOST_TERM && client_now_ms() >= r->kill_at) {
            killpg(r->pid, SIGKILL);
            r->state = RUN_LOST_KILL;
        }
        if (r->resume) {
            r->resume = 0;
            if (r->tty >= 0 && tcgetpgrp(r->tty) == getpgrp())
                tcsetpgrp(r->tty, r->pid);   /* `fg`, not `bg` */
            killpg(r->pid, SIGCONT);
        }
        if (p[1].revents & POLLIN) {
            unsigned char sigs[64];
            ssize_t n;
            int child = 0;

            while ((n = read(sig_pipe[0], sigs, sizeof(sigs))) > 0)
                for (ssize_t i = 0; i < n; i++) {
                    if (sigs[i] == SIGCHLD)
                        child = 1;
                    else
                        killpg(r->pid, sigs[i]);   /* SIGINT, SIGTERM, SIGHUP */
                }
            if (child && run_check_child(r, &wstatus))
                return wstatus;
            if (child)
                run_reap_orphans(r);
        }
    }
}

/* ----------------------------------------------------- release the lock */

/*
 * After the command ended by itself: UNLOCK and wait for `OK <name>`. A loss
 * noticed only now is reported but does not change the exit status: the
 * command finished while the lock was, as far as anyone could tell, held.
 */
static void run_unlock(struct run *r)
{
    char req[RUN_REPLY_MAX], line[RUN_REPLY_MAX], ok[RUN_REPLY_MAX], err[CLIENT_ERR_MAX];
    int64_t deadline = client_now_ms() + r->o->io_ms;
    enum client_status st;
    int n = snprintf(req, sizeof(req), "UNLOCK %s\n", r->o->name);

    snprintf(ok, sizeof(ok), "OK %s", r->o->name);
    st = client_send(r->conn, req, (size_t)n, deadline, err, sizeof(err));
    while (st == CLIENT_OK) {
        st = client_read_line(r->conn, line, sizeof(line), deadline, err, sizeof(err));
        if (st != CLIENT_OK)
            break;
        if (strcmp(line, ok) == 0)
            return;
        if (strncmp(line, "LOST ", 5) == 0) {
            fprintf(stderr, "lockbroker: warning: lock %s was lost as the command finished: %s\n",
                    r->o->name, line);
            continue;   /* the UNLOCK reply (ERR NOT_HELD) follows */
        }
        if (strncmp(line, "ERR NOT_HELD", 12) == 0)
            return;     /* the LOST line above said why */
        fprintf(stderr, "lockbroker: warning: unexpected reply to UNLOCK %s: %s\n",
                r->o->name, line);
        return;
    }
    /* Closing the connection releases the lock anyway. */
    fprintf(stderr, "lockbroker: warning: UNLOCK %s: %s\n", r->o->name,
            st == CLIENT_CLOSED ? "the broker closed the connection"
            : st == CLIENT_TIMEOUT ? "no reply" : err);
}

int run_command(const struct run_opts *o)
{
    static struct client conn;   /* 64 KiB buffer: not on the stack */
    struct run r = { .o = o, .conn = &conn, .tty = -1, .state = RUN_HOLDING };
    sigset_t block, orig, during;
    pid_t parent;
    int rc, wstatus;

    rc = run_lock(o, &conn, r.token, sizeof(r.token));
    if (rc != 0) {
        client_close(&conn);
        return rc;
    }
    if (setenv("LOCKBROKER_NAME", o->name, 1) < 0 || setenv("LOCKBROKER_TOKEN", r.token, 1) < 0 ||
        setenv("LOCKBROKER_ADDR", o->addr->spec, 1) < 0 || install_handlers() < 0) {
        fprintf(stderr, "lockbroker: %s\n", strerror(errno));
        client_close(&conn);
        return CLI_EXIT_USAGE;
    }
    r.tty = foreground_tty();
#ifdef PR_SET_CHILD_SUBREAPER
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif

    /* No handler may run between fork and exec in the child: block them across fork. */
    sigemptyset(&block);
    for (size_t i = 0; i < N_RUN_SIGNALS; i++)
        sigaddset(&block, run_signals[i]);
    sigaddset(&block, SIGTTOU);
    sigprocmask(SIG_BLOCK, &block, &orig);
    parent = getpid();
    r.pid = fork();
    if (r.pid == 0)
        child_exec(&r, parent, &orig);
    if (r.pid < 0) {
        fprintf(stderr, "lockbroker: fork: %s\n", strerror(errno));
        sigprocmask(SIG_SETMASK, &orig, NULL);
        client_close(&conn);
        return CLI_EXIT_USAGE;
    }
    /* Both sides set the group and the terminal, so neither waits for the other. */
    setpgid(r.pid, r.pid);
    if (r.tty >= 0)
        tcsetpgrp(r.tty, r.pid);
    /* SIGTTOU stays blocked: in the background we still write to and take back the terminal. */
    during = orig;
    sigaddset(&during, SIGTTOU);
    sigprocmask(SIG_SETMASK, &during, NULL);

    wstatus = run_supervise(&r);
    run_take_tty(&r);

    if (r.state == RUN_HOLDING) {
        run_unlock(&r);
        rc = WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
    } else {
        rc = CLI_EXIT_LOST;
    }
    client_close(&conn);
    if (r.tty >= 0)
        close(r.tty);
    return rc;
}
