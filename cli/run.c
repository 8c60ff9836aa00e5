/*
 * run.c - `lockbroker run NAME -- COMMAND`: take a lock, run the command
 * while this connection holds it, release it, exit with the command's status.
 *
 * The connection is labelled first (`CLIENT user@host:pid:command`, or
 * --label), so that STATUS and LOCKS say who holds the lock. While the LOCK
 * waits, a timer in the same poll() asks once, after RUN_NOTICE_MS, who
 * holds it: on a second connection, since the first answers nothing until
 * the grant.
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
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

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

void run_default_label(char *buf, size_t cap, const char *command)
{
    char host[256], uid[32];
    const char *user = NULL, *base = strrchr(command, '/');
    struct passwd *pw = getpwuid(getuid());
    size_t i;

    if (pw && pw->pw_name && pw->pw_name[0])
        user = pw->pw_name;
    else if ((user = getenv("LOGNAME")) == NULL || user[0] == '\0') {
        snprintf(uid, sizeof(uid), "%lu", (unsigned long)getuid());
        user = uid;
    }
    if (gethostname(host, sizeof(host)) < 0 || host[0] == '\0')
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';      /* gethostname need not terminate a cut name */
    host[strcspn(host, ".")] = '\0';   /* the short name, as hostname -s prints it */
    base = base && base[1] ? base + 1 : command;
    snprintf(buf, cap, "%s@%s:%ld:%s", user, host, (long)getpid(), base);
    /* Sanitise to the protocol's label rules (PROTOCOL.md, "CLIENT and LOCKS"). */
    for (i = 0; buf[i] && i < PROTO_LABEL_MAX; i++)
        if ((unsigned char)buf[i] < 0x21 || (unsigned char)buf[i] > 0x7e)
            buf[i] = '_';
    buf[i] = '\0';
}

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

/*
 * The notice of a long wait. The LOCK's connection is blocked until the
 * grant, so a second connection asks `STATUS <name>`, once.
 */
enum notice_state {
    NOTICE_OFF,       /* not wanted, or said already */
    NOTICE_PENDING,   /* to ask at `at` */
    NOTICE_ASKING,    /* STATUS sent on c; its reply is due by `at` */
};

struct notice {
    enum notice_state state;
    int64_t at;          /* monotonic ms */
    struct client *c;    /* the STATUS connection; open only while NOTICE_ASKING */
};

static void notice_say(const struct run_opts *o, const char *detail)
{
    fprintf(stderr, "lockbroker: waiting for lock %s%s\n", o->name, detail);
}

static void notice_end(struct notice *n)
{
    client_close(n->c);
    n->state = NOTICE_OFF;
}

/* A failed STATUS: the notice still says what it waits for. */
static void notice_fail(const struct run_opts *o, struct notice *n, const char *why)
{
    char detail[RUN_REPLY_MAX + 32];

    snprintf(detail, sizeof(detail), " (holder unknown: %s)", why);
    notice_say(o, detail);
    notice_end(n);
}

/*
 * Says what a `STATUS <name> held holder=H token=T since=MS ... [holders=N]
 * [label=L]` line tells: " (held by H label=L since 2026-11-22 10:00:01, and
 * N-1 more holders)". Fields it does not know are skipped.
 */
static void notice_held(const struct run_opts *o, char *line)
{
    char detail[RUN_REPLY_MAX + 128], when[64] = "", more[64] = "";
    const char *holder = "-", *label = NULL, *state = NULL;
    char *save = NULL, *w;
    int i = 0;

    for (w = strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save), i++) {
        if (i == 2)
            state = w;
        else if (strncmp(w, "holder=", 7) == 0)
            holder = w + 7;
        else if (strncmp(w, "label=", 6) == 0 && strcmp(w + 6, "-") != 0)
            label = w + 6;
        else if (strncmp(w, "since=", 6) == 0 && w[6] >= '0' && w[6] <= '9') {
            time_t t = (time_t)(strtoll(w + 6, NULL, 10) / 1000);
            struct tm tm;

            if (localtime_r(&t, &tm))
                strftime(when, sizeof(when), " since %Y-%m-%d %H:%M:%S", &tm);
        } else if (strncmp(w, "holders=", 8) == 0) {
            long h = strtol(w + 8, NULL, 10);

            if (h > 1)
                snprintf(more, sizeof(more), ", and %ld more holder%s", h - 1, h > 2 ? "s" : "");
        }
    }
    if (state && strcmp(state, "held") == 0)
        snprintf(detail, sizeof(detail), " (held by %s%s%s%s%s)", holder,
                 label ? " label=" : "", label ? label : "", when, more);
    else if (state && strcmp(state, "free") == 0)
        snprintf(detail, sizeof(detail), " (nobody holds it at the moment)");
    else
        detail[0] = '\0';
    notice_say(o, detail);
}

/* The wait has passed RUN_NOTICE_MS: connect a second time and send STATUS. */
static void notice_ask(const struct run_opts *o, struct notice *n)
{
    char req[RUN_REPLY_MAX], err[CLIENT_ERR_MAX];
    int64_t deadline = client_now_ms() + o->io_ms;
    int len = snprintf(req, sizeof(req), "STATUS %s\n", o->name);

    if (client_connect(n->c, o->addr, deadline, err, sizeof(err)) != 0) {
        notice_fail(o, n, err);
        return;
    }
    if (client_send(n->c, req, (size_t)len, deadline, err, sizeof(err)) != CLIENT_OK) {
        notice_fail(o, n, "cannot send STATUS");
        return;
    }
    n->state = NOTICE_ASKING;
    n->at = deadline;
}

/* The STATUS connection is readable: say what its reply says, once it is there. */
static void notice_read(const struct run_opts *o, struct notice *n)
{
    char line[RUN_REPLY_MAX], err[CLIENT_ERR_MAX], want[PROTO_NAME_MAX + 16];
    enum client_status st = client_fill(n->c, err, sizeof(err));
    int got;

    snprintf(want, sizeof(want), "STATUS %s ", o->name);
    while ((got = client_pop_line(n->c, line, sizeof(line))) > 0) {
        if (strncmp(line, want, strlen(want)) == 0) {
            notice_held(o, line);
            notice_end(n);
            return;
        }
        if (strncmp(line, "ERR ", 4) == 0) {
            notice_fail(o, n, line);   /* an outage (ERR UNAVAILABLE), or an old daemon */
            return;
        }
        /* Anything else before the STATUS line is not for us. */
    }
    if (got < 0)
        notice_fail(o, n, "over-long reply to STATUS");
    else if (st == CLIENT_CLOSED)
        notice_fail(o, n, "the broker closed the connection");
    else if (st == CLIENT_ERROR)
        notice_fail(o, n, err);
}

/*
 * Like client_read_line on c, but with the notice's timer and connection
 * in the same poll().
 */
static enum client_status run_wait_reply(const struct run_opts *o, struct client *c,
                                         char *line, size_t cap, int64_t deadline,
                                         char *err, size_t errlen)
{
    static struct client status_conn;   /* 64 KiB buffer: not on the stack */
    struct notice n = { .state = o->notice ? NOTICE_PENDING : NOTICE_OFF,
                        .at = client_now_ms() + RUN_NOTICE_MS, .c = &status_conn };
    enum client_status st;

    status_conn.fd = -1;
    for (;;) {
        int r = client_pop_line(c, line, cap);
        int64_t now, next;

        if (r > 0) {
            st = CLIENT_OK;
            break;
        }
        if (r < 0) {
            snprintf(err, errlen, "reply line longer than %zu bytes", cap - 1);
            st = CLIENT_ERROR;
            break;
        }
        if ((st = client_fill(c, err, errlen)) != CLIENT_OK)
            break;
        if (memchr(c->buf, '\n', c->len))
            continue;
        now = client_now_ms();
        if (deadline >= 0 && now >= deadline) {
            st = CLIENT_TIMEOUT;
            break;
        }
        if (n.state == NOTICE_PENDING && now >= n.at) {
            notice_ask(o, &n);
            continue;
        }
        if (n.state == NOTICE_ASKING && now >= n.at) {
            notice_fail(o, &n, "no reply to STATUS in time");
            continue;
        }

        /* Sleep until the reply, the STATUS reply, the deadline or the notice's time. */
        next = deadline;
        if (n.state != NOTICE_OFF && (next < 0 || n.at < next))
            next = n.at;
        struct pollfd p[2] = {
            { .fd = c->fd, .events = POLLIN },
            { .fd = n.state == NOTICE_ASKING ? n.c->fd : -1, .events = POLLIN },
        };
        int64_t left = next < 0 ? -1 : next - now;

        if (poll(p, 2, left < 0 ? -1 : left > 1000000 ? 1000000 : (int)left) < 0 &&
            errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            st = CLIENT_ERROR;
            break;
        }
        if (n.state == NOTICE_ASKING && p[1].revents)
            notice_read(o, &n);
    }
    client_close(n.c);   /* granted (or failed) before STATUS answered: never mind */
    return st;
}

/* The reply to CLIENT: OK, or ERR BAD_COMMAND from a daemon that predates it. */
static int run_client_reply(const struct run_opts *o, const char *line)
{
    if (strcmp(line, "OK") == 0 ||
        (strncmp(line, "ERR BAD_COMMAND", 15) == 0 && (line[15] == ' ' || line[15] == '\0')))
        return 0;
    if (strncmp(line, "ERR ", 4) == 0) {
        fprintf(stderr, "lockbroker: %s refused CLIENT %s: %s\n", o->addr->spec, o->label, line);
        return client_err_exit(line);
    }
    fprintf(stderr, "lockbroker: unexpected reply to CLIENT %s: %s\n", o->label, line);
    return CLI_EXIT_PROTOCOL;
}

int run_lock(const struct run_opts *o, struct client *c, char *token, size_t tokcap)
{
    char req[RUN_REPLY_MAX], line[RUN_REPLY_MAX], err[CLIENT_ERR_MAX], mode[32], wait[32], ttl[32];
    int64_t deadline;
    enum client_status st;
    int n = 0, rc;

    if ((rc = client_connect(c, o->addr, client_now_ms() + o->io_ms, err, sizeof(err))) != 0) {
        fprintf(stderr, "lockbroker: %s\n", err);
        return rc;
    }
    run_mode_option(o, mode, sizeof(mode));
    wait[0] = ttl[0] = '\0';
    if (o->wait_ms >= 0)
        snprintf(wait, sizeof(wait), " %" PRId64, o->wait_ms);
    if (o->ttl_ms > 0)
        snprintf(ttl, sizeof(ttl), " ttl=%" PRId64, o->ttl_ms);
    /* CLIENT and LOCK in one write: the label is set before the LOCK is parsed. */
    if (o->label)
        n = snprintf(req, sizeof(req), "CLIENT %s\n", o->label);
    n += snprintf(req + n, sizeof(req) - (size_t)n, "LOCK %s%s%s%s%s\n", o->name, wait,
                  mode[0] ? " " : "", mode, ttl);
    st = client_send(c, req, (size_t)n, client_now_ms() + o->io_ms, err, sizeof(err));
    if (st == CLIENT_ERROR) {
        fprintf(stderr, "lockbroker: %s: %s\n", o->addr->spec, err);
        return CLI_EXIT_UNAVAILABLE;
    }
    if (st == CLIENT_OK && o->label) {
        st = client_read_line(c, line, sizeof(line), client_now_ms() + o->io_ms, err,
                              sizeof(err));
        if (st == CLIENT_OK && (rc = run_client_reply(o, line)) != 0)
            return rc;
    }
    if (st == CLIENT_OK) {
        /* The broker answers TIMEOUT after wait_ms; allow io_ms on top for the round trip. */
        deadline = o->wait_ms >= 0 ? client_now_ms() + o->wait_ms + o->io_ms : -1;
        st = run_wait_reply(o, c, line, sizeof(line), deadline, err, sizeof(err));
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
