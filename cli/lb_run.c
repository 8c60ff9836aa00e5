/*
 * lb_run.c - `lockbroker run NAME -- COMMAND`: take a lock, run the command
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
 * SIGINT and SIGTERM also ask the command to stop, and what it started
 * must stop with it: a shell's background jobs ignore SIGINT, and would
 * run on after the release. So after either, the group gets SIGKILL once
 * the command's main process has ended (or after the grace period, if it
 * has not), and the lock is released only when every process of the group
 * is gone, as after a loss. So does a main process killed by SIGINT or
 * SIGQUIT: a terminal's ^C and ^\ reach the group directly, not through
 * lockbroker. SIGHUP is only passed on: to many daemons it means "reload".
 *
 * Jeopardy: the broker's `CHECK` answer promises the lock for <safe-ms>
 * from when the CHECK was sent (PROTOCOL.md, CHECK). One CHECK goes out
 * before the command starts, then one every quarter of the last window
 * (but at least every second and at most every 100 ms; with a session
 * also at least every quarter of its grace, below), one at a time;
 * safe_until is the furthest promise answered. If no fresh answer comes (a
 * frozen daemon, a dead network), the command gets SIGTERM a grace period
 * before safe_until and SIGKILL at safe_until, before anyone else can be
 * granted the lock. After a LOST too, SIGKILL comes no later than
 * safe_until: a grace period that does not fit is cut. A grant whose
 * first window is too short to start in is released and asked for again
 * while -w lasts (run_take()): CLI_EXIT_JEOPARDY is only for a command that
 * ran and was stopped.
 *
 * A dropped connection (--session-grace, on by default): `GRACE <ms>` goes
 * before the LOCK, so that the daemon keeps the holds of a connection that
 * ends without QUIT for that long, detached (PROTOCOL.md, GRACE). When the
 * connection ends, or a CHECK gets no reply within -t (a NAT that forgot
 * it, a half-open connection), the command runs on while lockbroker
 * connects again to the same daemon (the address the first connection
 * reached, not a new lookup of the name), with TLS, AUTH and CLIENT as
 * before, then sends RESUME and a round of CHECKs for a fresh window. A
 * failed try pauses 50 ms, doubling up to 1 s. The daemon keeps the lock
 * for the grace from when it saw the connection end, which may be well
 * before lockbroker notices (a NAT's reset that reached the daemon only),
 * but not before it answered the last request answered on it. So the
 * grace, less the protocol's tenth for clock rates, counts from that
 * request's send time: D (PROTOCOL.md, "What a client may assume after a
 * drop"). No try goes on past D, and the command is dead by D unless the
 * lock is back: SIGTERM the smaller of -g and a quarter of the grace before D (at
 * once if that has passed), SIGKILL at D, exit as jeopardy. A RESUME
 * that succeeds first cancels the stop; one that succeeds after the
 * SIGTERM does not, but lets the lock be released at once when the
 * command has ended. To leave most of the grace for the tries when only
 * the next CHECK finds the drop, CHECKs go at least every quarter of the
 * grace. RESUME or a CHECK answering ERR NOT_HELD is a loss; the last
 * window running out first is jeopardy, as ever (whichever stop comes
 * first wins). The tries are states of the same poll() loop
 * (enum run_link): signals, the command's end and jeopardy keep their
 * times. A command that ends meanwhile waits for the lock to be taken
 * back, so that it is released at once (run_settle()). Closing the
 * connection on purpose sends QUIT first, which ends the session: what it
 * still holds is released then, not kept for the grace.
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
 * If lockbroker itself is killed (SIGKILL, the OOM killer), a guardian
 * ends the command's whole process group before the broker can free the
 * lock: a small child of lockbroker (no exec) in the command's group that
 * holds a copy of the connection and blocks reading a pipe whose only
 * writer is lockbroker. End of file there means lockbroker is gone: it
 * sends SIGKILL to the group, itself included, and only its death closes
 * the connection, which frees the lock. The command's main process also
 * gets SIGKILL through its parent-death signal. Not covered: a process of
 * the command that left the group (setsid, setpgid: a daemon), and the
 * guardian killed on its own. lockbroker(1) says so. With a session the
 * close detaches the lock rather than freeing it, and nobody takes it
 * back: it is freed a grace later, never sooner. The guardian holds a copy
 * of the first connection only; a connection made after a drop has none,
 * and the grace it leaves is what covers the group's killing.
 */
#include "config.h"

#include "lb_run.h"

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
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

/* Requests, and the replies to LOCK and UNLOCK (OK, TIMEOUT, ERR), a set's included. */
#define RUN_REPLY_MAX (PROTO_SET_REPLY_MAX + 64)
#define CHECK_EVERY_MIN_MS 100    /* CHECKs at most this often, however short the window */
#define CHECK_EVERY_MAX_MS 1000   /* and at least this often, however long: a table lookup */
#define RUN_RETRY_MIN_MS 100      /* a grant without a window: ask again this much later, */
#define RUN_RETRY_MAX_MS 1000     /* doubling up to this (a daemon back from an outage
                                   * confirms its session within a few seconds) */
#define RUN_REDIAL_MIN_MS 50      /* a dropped connection: pause this long after a failed
                                   * try to take the lock back, */
#define RUN_REDIAL_MAX_MS 1000    /* doubling up to this: a restart takes about a second */

/* The self-pipe: handlers write the signal number, the loop reads it. */
static int sig_pipe[2] = { -1, -1 };

static const int run_signals[] = { SIGCHLD, SIGINT, SIGTERM, SIGHUP };
#define N_RUN_SIGNALS (sizeof(run_signals) / sizeof(run_signals[0]))

/*
 * A session (PROTOCOL.md, GRACE): what takes the holds of a dropped
 * connection back on a new one. The secret is never printed.
 */
struct run_session {
    char id[17];       /* 16 lower-case hex digits; "" while there is none */
    char secret[33];   /* 32 lower-case hex digits */
};

/*
 * The connection while the lock is held. Without a session it is always
 * LINK_UP: a drop is a loss. With one, a drop (the connection ends, or a
 * CHECK gets no reply within -t) starts tries to take the lock back on a
 * new connection to the same daemon, until D (give_up_at); the command
 * runs on meanwhile until stop_at, or the end of the last window
 * (jeopardy), whichever comes first. Stopped for either, the tries go on
 * until D (run_trying()): a lock taken back is released at once.
 */
enum run_link {
    LINK_UP,         /* connected: CHECKs go out on conn */
    LINK_PAUSE,      /* dropped; the next try starts at retry_at (conn closed) */
    LINK_DIALING,    /* a try: connect, TLS and AUTH on conn (lb_dial_step()) */
    LINK_RESUMING,   /* a try: CLIENT, RESUME and the round of CHECKs sent; RESUME's reply due */
};

enum run_state {
    RUN_HOLDING,     /* the command runs and the lock is held */
    RUN_STOPPING,    /* held; SIGINT or SIGTERM passed on; SIGKILL due at kill_at */
    RUN_STOP_KILL,   /* held; SIGKILL sent after the grace, waiting for the exit */
    RUN_LOST_TERM,   /* the lock is gone; SIGTERM sent, SIGKILL due at kill_at */
    RUN_LOST_KILL,   /* the lock is gone; SIGKILL sent, waiting for the exit */
};

struct run {
    const struct run_opts *o;
    struct lb_conn *conn;      /* closed (fd -1) once the lock is lost */
    char token[PROTO_SET_MAX * 21]; /* decimal, as the broker sent it (a set's: t1,t2,...) */
    unsigned nnames;          /* o->name split at its commas (a set: PROTOCOL.md, Sets of locks) */
    char names[PROTO_SET_MAX][PROTO_NAME_MAX + 1];
    char tokens[PROTO_SET_MAX][21];  /* token split likewise: tokens[i] is names[i]'s */
    pid_t pid;                /* the command's main process; also its process group id */
    int tty;                  /* controlling terminal handed to the command, or -1 */
    int resume;               /* lockbroker was stopped with the command: continue it */
    enum run_state state;
    int64_t kill_at;          /* RUN_STOPPING, RUN_LOST_TERM: monotonic ms at which to send
                               * SIGKILL */
    int stop_signal;          /* RUN_STOPPING, RUN_STOP_KILL: the signal that asked it */
    pid_t guardian;           /* kills the group if lockbroker dies; 0: none (or reaped) */
    int guardian_pipe;        /* its write end: lockbroker's death closes it; -1: none */
    /* Jeopardy (all times monotonic ms, on this clock). */
    int checking;             /* the broker answers CHECK (0: an older daemon) */
    int check_inflight;       /* CHECKs were sent (one per name) and their replies are due */
    unsigned check_next;      /* the name whose CHECK reply comes next */
    int64_t check_min;        /* the smallest window of this round's replies so far */
    int check_bad;            /* a reply of this round had no window */
    int64_t check_sent;       /* when it was sent */
    int64_t next_check;       /* when to send the next one */
    int64_t safe_until;       /* no other holder before this (the furthest promise) */
    int64_t window_max;       /* the largest <safe-ms> answered: the grace fits in a third */
    int jeopardy;             /* the command was ended for want of a fresh window */
    int64_t granted_at;       /* when the grant was read: no earlier than the grant */
    /* The session (--session-grace), and taking the lock back after a drop. */
    struct run_session sess;  /* id "": none (no --session-grace, or GRACE refused) */
    struct lb_peer peer;      /* where conn went: a new connection goes to the same daemon */
    enum run_link link;       /* LINK_UP unless held (or in jeopardy), with a session,
                               * after a drop */
    int64_t answered_sent;    /* the send time of the last request answered on the
                               * connection that has the session: the daemon cannot have
                               * seen that connection end before then */
    int64_t dropped_at;       /* when the last drop was noticed */
    int64_t give_up_at;       /* D: answered_sent + the grace less its tenth (drop_kept()):
                               * the daemon keeps the lock at least until then; no try goes
                               * on past it, and the command is dead by then */
    int64_t stop_at;          /* D less the smaller of -g and a quarter of the grace: SIGTERM then,
                               * unless the lock is back */
    int64_t retry_at;         /* LINK_PAUSE: when the next try starts */
    int64_t pause_ms;         /* the pause after the next failed try */
    int64_t try_until;        /* LINK_DIALING, LINK_RESUMING: this try's deadline */
    unsigned tries;           /* tries since the drop */
    struct pollfd dial_poll;  /* LINK_DIALING: what lb_dial_step() waits for */
    int resume_client;        /* LINK_RESUMING: CLIENT's reply comes before RESUME's */
    char drop_why[CLIENT_ERR_MAX];  /* why the last try failed (or the drop, before any) */
    int ended;                /* the command has ended: a loss stops nothing */
};

/* Whether the lock is still held: the command runs, or is being stopped. */
static int run_held(const struct run *r)
{
    return r->state == RUN_HOLDING || r->state == RUN_STOPPING || r->state == RUN_STOP_KILL;
}

/*
 * Whether tries to take the lock back go on: while it is held, and after a
 * stop for jeopardy (the lock may still be ours until D: taken back, it is
 * released at once once the command has ended, not at the end of the grace).
 */
static int run_trying(const struct run *r)
{
    return r->link != LINK_UP && (run_held(r) || r->jeopardy);
}

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
    struct lb_conn *c;    /* the STATUS connection; open only while NOTICE_ASKING */
};

static void notice_say(const struct run_opts *o, const char *detail)
{
    fprintf(stderr, "lockbroker: waiting for lock %s%s\n", o->name, detail);
}

static void notice_end(struct notice *n)
{
    lb_close(n->c);
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
 * What a `STATUS <name> held holder=H token=T since=MS ... [holders=N]
 * [delay=MS] [lease=MS] [label=L]` line (cut up in place) says of the
 * holder, into who: "H label=L since 2026-11-22 10:00:01, and N-1 more
 * holders", then ", kept MS ms more after its release (...)" or ", a lease
 * ending in MS ms" if so. Fields it does not know are skipped. Returns 1 (held), 0
 * (free: who is empty) or -1 (neither).
 */
static int status_holder(char *line, char *who, size_t cap)
{
    char when[64] = "", more[64] = "", delay[128] = "", lease[64] = "";
    const char *holder = "-", *label = NULL, *state = NULL;
    char *save = NULL, *w;
    int i = 0;

    who[0] = '\0';
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
        } else if (strncmp(w, "delay=", 6) == 0 && w[6] >= '0' && w[6] <= '9') {
            /* STATUS says delay= both for a keep (--min-hold, UNLOCK keep=) and for
             * the lock-delay of an abandoned hold: name neither as the other. */
            snprintf(delay, sizeof(delay), ", kept %.20s ms more after its release "
                     "(--min-hold or a lock-delay)", w + 6);
        } else if (strncmp(w, "lease=", 6) == 0 && w[6] >= '0' && w[6] <= '9') {
            snprintf(lease, sizeof(lease), ", a lease ending in %.20s ms", w + 6);
        }
    }
    if (state && strcmp(state, "held") == 0) {
        snprintf(who, cap, "%s%s%s%s%s%s%s", holder, label ? " label=" : "", label ? label : "",
                 when, more, delay, lease);
        return 1;
    }
    return state && strcmp(state, "free") == 0 ? 0 : -1;
}

/* Says what a STATUS line tells of the lock waited for: " (held by ...)". */
static void notice_held(const struct run_opts *o, char *line)
{
    char who[RUN_REPLY_MAX], detail[RUN_REPLY_MAX + 32];

    switch (status_holder(line, who, sizeof(who))) {
    case 1:
        snprintf(detail, sizeof(detail), " (held by %s)", who);
        break;
    case 0:
        snprintf(detail, sizeof(detail), " (nobody holds it at the moment)");
        break;
    default:
        detail[0] = '\0';
    }
    notice_say(o, detail);
}

/* The wait has passed RUN_NOTICE_MS: connect a second time and send STATUS. */
static void notice_ask(const struct run_opts *o, struct notice *n)
{
    char req[RUN_REPLY_MAX], err[CLIENT_ERR_MAX];
    int64_t deadline = lb_now_ms() + o->io_ms;
    int len = snprintf(req, sizeof(req), "STATUS %s\n", o->name);

    if (strchr(o->name, ',')) {
        /* A set: which name it waits for is not known here. */
        notice_say(o, "");
        notice_end(n);
        return;
    }
    if (lb_connect(n->c, o->addr, deadline, err, sizeof(err)) != 0) {
        notice_fail(o, n, err);
        return;
    }
    if (lb_send(n->c, req, (size_t)len, deadline, err, sizeof(err)) != CLIENT_OK) {
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
    enum lb_status st = lb_fill(n->c, err, sizeof(err));
    int got;

    snprintf(want, sizeof(want), "STATUS %s ", o->name);
    while ((got = lb_pop_line(n->c, line, sizeof(line))) > 0) {
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
 * Like lb_read_line on c, but with the notice's timer and connection
 * in the same poll().
 */
static enum lb_status run_wait_reply(const struct run_opts *o, struct lb_conn *c,
                                         char *line, size_t cap, int64_t deadline,
                                         char *err, size_t errlen)
{
    static struct lb_conn status_conn;   /* 64 KiB buffer: not on the stack */
    struct notice n = { .state = o->notice ? NOTICE_PENDING : NOTICE_OFF,
                        .at = lb_now_ms() + RUN_NOTICE_MS, .c = &status_conn };
    enum lb_status st;

    status_conn.fd = -1;
    for (;;) {
        int r = lb_pop_line(c, line, cap);
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
        if ((st = lb_fill(c, err, errlen)) != CLIENT_OK)
            break;
        if (memchr(c->buf, '\n', c->len))
            continue;
        now = lb_now_ms();
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
        struct pollfd p[2] = { { .fd = -1 }, { .fd = -1 } };
        int64_t left = next < 0 ? -1 : next - now;
        int ready = lb_poll_setup(c, &p[0]);

        /* Decrypted TLS input poll() cannot see: look at once. */
        if (n.state == NOTICE_ASKING && lb_poll_setup(n.c, &p[1]))
            ready = 1;
        if (ready)
            left = 0;
        if (poll(p, 2, left < 0 ? -1 : left > 1000000 ? 1000000 : (int)left) < 0 &&
            errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            st = CLIENT_ERROR;
            break;
        }
        if (n.state == NOTICE_ASKING && (p[1].revents || ready))
            notice_read(o, &n);
    }
    lb_close(n.c);   /* granted (or failed) before STATUS answered: never mind */
    return st;
}

/* The reply to CLIENT: OK, or ERR BAD_COMMAND from a daemon that predates it. */
static int run_client_reply(const struct run_opts *o, const char *line)
{
    if (strcmp(line, "OK") == 0 ||
        (strncmp(line, "ERR BAD_COMMAND", 15) == 0 && (line[15] == ' ' || line[15] == '\0')))
        return 0;
    if (strncmp(line, "ERR ", 4) == 0) {
        const char *advice = lb_err_advice(line);

        if (advice)
            fprintf(stderr, "lockbroker: %s %s (refused CLIENT %s: %s)\n", o->addr->spec, advice,
                    o->label, line);
        else
            fprintf(stderr, "lockbroker: %s refused CLIENT %s: %s\n", o->addr->spec, o->label,
                    line);
        return lb_err_exit(line);
    }
    fprintf(stderr, "lockbroker: unexpected reply to CLIENT %s: %s\n", o->label, line);
    return CLI_EXIT_PROTOCOL;
}

/* Whether s is exactly n lower-case hex digits. */
static int run_hex(const char *s, size_t n)
{
    return strspn(s, "0123456789abcdef") == n && strlen(s) == n;
}

/*
 * The reply to GRACE: `OK <session> <secret>` fills *sess. A daemon that
 * does not know GRACE (ERR BAD_COMMAND), or refuses it (ERR BAD_ARGS over
 * its max_grace_ms, ERR LIMIT), gets the command run without a session,
 * said once; a login it wants is for LOCK's refusal to say. Returns 0, or
 * CLI_EXIT_PROTOCOL for a reply that is none of these, having said so.
 */
static int run_grace_reply(const struct run_opts *o, const char *line, struct run_session *sess)
{
    static int warned;   /* run_take() may connect again: one warning is enough */
    char id[17], secret[33];

    sess->id[0] = '\0';
    if (strncmp(line, "OK ", 3) == 0 && strlen(line) == 3 + 16 + 1 + 32 &&
        line[19] == ' ') {
        snprintf(id, sizeof(id), "%.16s", line + 3);
        snprintf(secret, sizeof(secret), "%.32s", line + 20);
        if (run_hex(id, 16) && run_hex(secret, 32)) {
            memcpy(sess->id, id, sizeof(id));
            memcpy(sess->secret, secret, sizeof(secret));
            explicit_bzero(secret, sizeof(secret));
            return 0;
        }
    }
    if (strncmp(line, "ERR ", 4) != 0) {
        /* Not echoed: a garbled OK may carry most of a secret. */
        fprintf(stderr, "lockbroker: unexpected reply to GRACE %" PRId64 " from %s (not OK "
                "<session> <secret>, nor ERR)\n", o->session_grace_ms, o->addr->spec);
        return CLI_EXIT_PROTOCOL;
    }
    if (lb_err_exit(line) == CLI_EXIT_DENIED || warned++)
        return 0;
    if (strncmp(line, "ERR BAD_COMMAND", 15) == 0 && (line[15] == ' ' || line[15] == '\0'))
        fprintf(stderr, "lockbroker: warning: %s does not know GRACE (an older lockbrokerd): "
                "a dropped connection loses lock %s (--session-grace does nothing)\n",
                o->addr->spec, o->name);
    else
        fprintf(stderr, "lockbroker: warning: %s refused GRACE %" PRId64 " (%s): a dropped "
                "connection loses lock %s\n", o->addr->spec, o->session_grace_ms, line,
                o->name);
    return 0;
}

/*
 * The request run_lock sends into req: `CLIENT <label>` (when there is a
 * label), `GRACE <ms>` (when sess: --session-grace) and `LOCK <name>
 * [<wait_ms>] [<mode>] [ttl=<ttl_ms>]`, one line each (wait_ms: what is
 * left of o->wait_ms). Returns its length.
 */
static int run_lock_request(const struct run_opts *o, const char *mode, int64_t wait_ms,
                            int grace, char *req, size_t cap)
{
    char wait[32] = "", ttl[32] = "";
    int n = 0;

    if (wait_ms >= 0)
        snprintf(wait, sizeof(wait), " %" PRId64, wait_ms);
    if (o->ttl_ms > 0)
        snprintf(ttl, sizeof(ttl), " ttl=%" PRId64, o->ttl_ms);
    /* CLIENT and LOCK in one write: the label is set before the LOCK is parsed. */
    if (o->label)
        n = snprintf(req, cap, "CLIENT %s\n", o->label);
    /* GRACE before LOCK: the hold is the session's from its grant on. */
    if (grace)
        n += snprintf(req + n, cap - (size_t)n, "GRACE %" PRId64 "\n", o->session_grace_ms);
    n += snprintf(req + n, cap - (size_t)n, "LOCK %s%s%s%s%s\n", o->name, wait,
                  mode[0] ? " " : "", mode, ttl);
    return n;
}

/*
 * Connects c, sends the request (a GRACE first if sess, a LOCK waiting
 * wait_ms) and waits for the reply to LOCK, however long the lock takes,
 * into line; *sess is the session GRACE opened (id "" for none). Returns
 * 0, or a CLI_EXIT_* status having said why on stderr.
 */
static int run_lock_exchange(const struct run_opts *o, struct lb_conn *c, const char *mode,
                             int64_t wait_ms, struct run_session *sess, char *line,
                             size_t cap)
{
    char req[RUN_REPLY_MAX], err[CLIENT_ERR_MAX];
    int64_t deadline;
    enum lb_status st;
    int n, rc;

    if ((rc = lb_connect(c, o->addr, lb_now_ms() + o->io_ms, err, sizeof(err))) != 0) {
        fprintf(stderr, "lockbroker: %s\n", err);
        return rc;
    }
    n = run_lock_request(o, mode, wait_ms, sess != NULL, req, sizeof(req));
    st = lb_send(c, req, (size_t)n, lb_now_ms() + o->io_ms, err, sizeof(err));
    if (st == CLIENT_ERROR) {
        fprintf(stderr, "lockbroker: %s: %s\n", o->addr->spec, err);
        return CLI_EXIT_UNAVAILABLE;
    }
    if (st == CLIENT_OK && o->label) {
        st = lb_read_line(c, line, cap, lb_now_ms() + o->io_ms, err, sizeof(err));
        if (st == CLIENT_OK && (rc = run_client_reply(o, line)) != 0)
            return rc;
    }
    if (st == CLIENT_OK && sess) {
        st = lb_read_line(c, line, cap, lb_now_ms() + o->io_ms, err, sizeof(err));
        if (st == CLIENT_OK && (rc = run_grace_reply(o, line, sess)) != 0)
            return rc;
    }
    if (st == CLIENT_OK) {
        /* The broker answers TIMEOUT after wait_ms; allow io_ms on top for the round trip. */
        deadline = wait_ms >= 0 ? lb_now_ms() + wait_ms + o->io_ms : -1;
        st = run_wait_reply(o, c, line, cap, deadline, err, sizeof(err));
    }
    switch (st) {
    case CLIENT_OK:
        return 0;
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
}

/*
 * What the reply to LOCK says: 0 with the token copied to token (a grant),
 * or a CLI_EXIT_* status having said why on stderr (but for
 * CLI_EXIT_TIMEOUT: run_lock_timeout() says that).
 */
static int run_lock_reply(const struct run_opts *o, const char *mode, const char *line,
                          char *token, size_t tokcap)
{
    size_t nl = strlen(o->name);

    /* OK <name> <token> */
    if (strncmp(line, "OK ", 3) == 0 && strncmp(line + 3, o->name, nl) == 0 &&
        line[3 + nl] == ' ') {
        const char *t = line + 4 + nl;
        size_t tl = strspn(t, "0123456789,");   /* a set's: t1,t2,... */

        if (tl > 0 && t[tl] == '\0' && tl < tokcap) {
            memcpy(token, t, tl + 1);
            return 0;
        }
    }
    if (strncmp(line, "TIMEOUT ", 8) == 0 && strcmp(line + 8, o->name) == 0)
        return CLI_EXIT_TIMEOUT;   /* said by run_lock_timeout(), which asks who holds it */
    if (lb_err_exit(line) == CLI_EXIT_CONFLICT) {
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
        const char *advice = lb_err_advice(line);

        if (advice)
            fprintf(stderr, "lockbroker: %s %s (refused LOCK %s: %s)\n", o->addr->spec, advice,
                    o->name, line);
        else
            fprintf(stderr, "lockbroker: %s refused LOCK %s: %s\n", o->addr->spec, o->name,
                    line);
        return lb_err_exit(line);
    }
    fprintf(stderr, "lockbroker: unexpected reply to LOCK %s: %s\n", o->name, line);
    return CLI_EXIT_PROTOCOL;
}

/*
 * The reply to LOCK was TIMEOUT: says so, with who holds the lock, which
 * a STATUS on the same connection (idle again) tells, as for the notice.
 * -w 0 did not wait at all: the lock is not free, rather than "timed out".
 */
static void run_lock_timeout(const struct run_opts *o, struct lb_conn *c)
{
    char req[PROTO_NAME_MAX + 16], want[PROTO_NAME_MAX + 16], line[RUN_REPLY_MAX],
         who[RUN_REPLY_MAX], err[CLIENT_ERR_MAX];
    int64_t deadline = lb_now_ms() + o->io_ms;
    int held = -1;

    if (o->quiet)
        return;   /* -q: a skip says nothing, and asks nothing */
    /* A set: which of its names is taken is not known here. */
    if (!strchr(o->name, ',')) {
        snprintf(req, sizeof(req), "STATUS %s\n", o->name);
        snprintf(want, sizeof(want), "STATUS %s ", o->name);
        if (lb_send(c, req, strlen(req), deadline, err, sizeof(err)) == CLIENT_OK)
            while (lb_read_line(c, line, sizeof(line), deadline, err, sizeof(err)) ==
                   CLIENT_OK) {
                if (strncmp(line, want, strlen(want)) == 0) {
                    held = status_holder(line, who, sizeof(who));
                    break;
                }
                if (strncmp(line, "ERR ", 4) == 0)
                    break;   /* an outage since, an older daemon: said without the holder */
            }
    }
    if (o->wait_ms == 0 && held == 1)
        fprintf(stderr, "lockbroker: lock %s is held by %s; not waiting for it (-w 0)\n",
                o->name, who);
    else if (o->wait_ms == 0)
        fprintf(stderr, "lockbroker: lock %s is not free; not waiting for it (-w 0)\n", o->name);
    else
        fprintf(stderr, "lockbroker: timed out after %" PRId64 " ms waiting for lock %s%s%s\n",
                o->wait_ms, o->name, held == 1 ? ", held by " : "", held == 1 ? who : "");
}

/*
 * run_lock(), its LOCK waiting wait_ms: what is left of o->wait_ms
 * (run_take()); with sess, GRACE first (run_lock_exchange()).
 */
static int run_lock_wait(const struct run_opts *o, int64_t wait_ms, struct lb_conn *c,
                         struct run_session *sess, char *token, size_t tokcap)
{
    char line[RUN_REPLY_MAX], mode[32];
    int rc;

    run_mode_option(o, mode, sizeof(mode));
    if ((rc = run_lock_exchange(o, c, mode, wait_ms, sess, line, sizeof(line))) != 0)
        return rc;
    if ((rc = run_lock_reply(o, mode, line, token, tokcap)) == CLI_EXIT_TIMEOUT)
        run_lock_timeout(o, c);
    return rc;
}

int run_lock(const struct run_opts *o, struct lb_conn *c, char *token, size_t tokcap)
{
    return run_lock_wait(o, o->wait_ms, c, NULL, token, tokcap);
}

/* ------------------------------------------------------------- jeopardy */

enum check_reply {
    CHECK_WINDOW,        /* OK <name> <token> <safe-ms> */
    CHECK_NOT_HELD,      /* ERR NOT_HELD ... */
    CHECK_UNKNOWN,       /* ERR BAD_COMMAND ...: a daemon older than CHECK */
    CHECK_OTHER,         /* anything else */
};

/* The room for a round of CHECKs, one line per name of a set. */
#define CHECK_ROUND_MAX (PROTO_SET_MAX * (PROTO_NAME_MAX + 30))

/* Writes `CHECK <name> <token>`, one per name, at buf (CHECK_ROUND_MAX bytes). Returns the length. */
static int check_format(const struct run *r, char *buf)
{
    int n = 0;

    for (unsigned i = 0; i < r->nnames; i++)
        n += snprintf(buf + n, CHECK_ROUND_MAX - (size_t)n, "CHECK %s %s\n", r->names[i],
                      r->tokens[i]);
    return n;
}

/* A round of CHECKs went out at now: their replies are due. */
static void check_started(struct run *r, int64_t now)
{
    r->check_inflight = 1;
    r->check_next = 0;
    r->check_min = INT64_MAX;
    r->check_bad = 0;
    r->check_sent = now;
}

/* Sends `CHECK <name> <token>`, one per name of a set. Returns 0, or -1 if
 * the connection failed. */
static int check_send(struct run *r)
{
    char req[CHECK_ROUND_MAX], err[CLIENT_ERR_MAX];
    int64_t now = lb_now_ms();
    int n = check_format(r, req);

    if (lb_send(r->conn, req, (size_t)n, now + r->o->io_ms, err, sizeof(err)) != CLIENT_OK)
        return -1;
    check_started(r, now);
    return 0;
}

/* "LOST <name> <token> <reason>" of one of the names held: its reason, or NULL. */
static const char *lost_reason(const struct run *r, const char *line)
{
    for (unsigned i = 0; i < r->nnames && strncmp(line, "LOST ", 5) == 0; i++) {
        size_t nl = strlen(r->names[i]), tl = strlen(r->tokens[i]);

        if (strncmp(line + 5, r->names[i], nl) == 0 && line[5 + nl] == ' ' &&
            strncmp(line + 6 + nl, r->tokens[i], tl) == 0 && line[6 + nl + tl] == ' ')
            return line + 7 + nl + tl;
    }
    return NULL;
}

/* What line says as the reply to the CHECK of names[check_next]; *safe_ms
 * is set for CHECK_WINDOW. */
static enum check_reply check_parse(const struct run *r, const char *line, int64_t *safe_ms)
{
    const char *name = r->names[r->check_next], *token = r->tokens[r->check_next];
    size_t nl = strlen(name), tl = strlen(token);

    if (strncmp(line, "OK ", 3) == 0 && strncmp(line + 3, name, nl) == 0 &&
        line[3 + nl] == ' ' && strncmp(line + 4 + nl, token, tl) == 0 &&
        line[4 + nl + tl] == ' ') {
        const char *w = line + 5 + nl + tl;
        size_t digits = strspn(w, "0123456789");
        long long v;

        if (digits == 0 || digits > 9 || w[digits] != '\0')
            return CHECK_OTHER;
        v = strtoll(w, NULL, 10);
        if (v > PROTO_SAFE_MAX)
            return CHECK_OTHER;
        *safe_ms = v;
        return CHECK_WINDOW;
    }
    if (strncmp(line, "ERR NOT_HELD", 12) == 0 && (line[12] == ' ' || line[12] == '\0'))
        return CHECK_NOT_HELD;
    if (strncmp(line, "ERR BAD_COMMAND", 15) == 0 && (line[15] == ' ' || line[15] == '\0'))
        return CHECK_UNKNOWN;
    return CHECK_OTHER;
}

/* A window answered: the promise runs to check_sent + safe_ms. */
static void check_answered(struct run *r, int64_t safe_ms)
{
    int64_t every = safe_ms / 4;

    every = every < CHECK_EVERY_MIN_MS ? CHECK_EVERY_MIN_MS :
            every > CHECK_EVERY_MAX_MS ? CHECK_EVERY_MAX_MS : every;
    /* A drop only the next CHECK finds must leave most of the grace (D) for the tries. */
    if (r->sess.id[0] && every > r->o->session_grace_ms / 4)
        every = r->o->session_grace_ms / 4;

    r->check_inflight = 0;
    if (r->check_sent + safe_ms > r->safe_until)
        r->safe_until = r->check_sent + safe_ms;
    if (safe_ms > r->window_max)
        r->window_max = safe_ms;
    r->next_check = r->check_sent + every;
}

/*
 * One reply of this round of CHECKs (ok: with a window, safe_ms). The
 * round ends with the last name's: the set is as safe as its least safe
 * name; a reply without a window means none this round, ask again soon.
 */
static void check_round(struct run *r, int ok, int64_t safe_ms)
{
    r->answered_sent = r->check_sent;   /* answered: the connection was alive then */
    if (!ok)
        r->check_bad = 1;
    else if (safe_ms < r->check_min)
        r->check_min = safe_ms;
    if (++r->check_next < r->nnames)
        return;
    if (!r->check_bad) {
        check_answered(r, r->check_min);
        return;
    }
    r->check_inflight = 0;
    r->next_check = lb_now_ms() + CHECK_EVERY_MIN_MS;
}

/*
 * When the command gets SIGTERM if no fresh window has come: the grace
 * period before safe_until, but at most a third of the largest window, so
 * that CHECKs every quarter of a window that is not shrinking never get
 * there. -1: no jeopardy (an older daemon).
 */
static int64_t jeopardy_at(const struct run *r)
{
    int64_t grace = r->o->grace_ms;

    if (!r->checking)
        return -1;
    if (grace > r->window_max / 3)
        grace = r->window_max / 3;
    return r->safe_until - grace;
}

/*
 * The first CHECK, before the command starts. Returns 0 (with a window,
 * or r->checking 0 for a daemon that does not know CHECK), or a CLI_EXIT_*
 * status having said why on stderr; but CLI_EXIT_JEOPARDY, a window too
 * short to start the command in (r->check_min: 0, say, from a daemon not
 * sure of its ZooKeeper session), is said by run_take(), which asks again.
 */
static int check_first(struct run *r)
{
    char line[RUN_REPLY_MAX], err[CLIENT_ERR_MAX];
    enum lb_status st;
    int64_t safe = 0;

    r->checking = 1;
    if (r->nnames == 0 || r->nnames > PROTO_SET_MAX) {
        fprintf(stderr, "lockbroker: unexpected reply to LOCK %s: %s\n", r->o->name, r->token);
        return CLI_EXIT_PROTOCOL;
    }
    if (check_send(r) < 0) {
        fprintf(stderr, "lockbroker: %s: cannot send CHECK %s: the connection failed\n",
                r->o->addr->spec, r->o->name);
        return CLI_EXIT_UNAVAILABLE;
    }
next:
    st = lb_read_line(r->conn, line, sizeof(line), r->check_sent + r->o->io_ms, err,
                          sizeof(err));
    if (st == CLIENT_CLOSED || st == CLIENT_TIMEOUT) {
        fprintf(stderr, "lockbroker: %s %s after granting lock %s; the command was not run\n",
                r->o->addr->spec, st == CLIENT_CLOSED ? "closed the connection" :
                "did not answer CHECK", r->o->name);
        return CLI_EXIT_UNAVAILABLE;
    }
    if (st != CLIENT_OK) {
        fprintf(stderr, "lockbroker: %s: %s\n", r->o->addr->spec, err);
        return CLI_EXIT_PROTOCOL;
    }
    if (strncmp(line, "LOST ", 5) == 0) {
        fprintf(stderr, "lockbroker: lock %s lost before the command started: %s\n",
                r->o->name, line);
        return CLI_EXIT_LOST;
    }
    switch (check_parse(r, line, &safe)) {
    case CHECK_WINDOW:
        check_round(r, 1, safe);
        if (r->check_inflight && r->check_next < r->nnames)
            goto next;           /* the next name's reply */
        if (lb_now_ms() < jeopardy_at(r))
            return 0;
        return CLI_EXIT_JEOPARDY;   /* not a window to start in: run_take() */
    case CHECK_NOT_HELD:
        fprintf(stderr, "lockbroker: lock %s lost before the command started: %s\n",
                r->o->name, line);
        return CLI_EXIT_LOST;
    case CHECK_UNKNOWN:
        r->checking = 0;
        r->check_inflight = 0;
        r->answered_sent = r->check_sent;
        fprintf(stderr, "lockbroker: warning: %s does not know CHECK (an older lockbrokerd): "
                "the command runs without jeopardy, ended only by a LOST\n",
                r->o->addr->spec);
        return 0;
    default:
        fprintf(stderr, "lockbroker: unexpected reply to CHECK %s: %s\n", r->o->name, line);
        return CLI_EXIT_PROTOCOL;
    }
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

/*
 * Ends the command: SIGTERM to its group now, SIGKILL after the grace
 * period, but no later than safe_until, nor after a drop not yet made good
 * than D, when someone else may be granted the lock (a grace period that
 * does not fit is cut, and said so unless quiet: the caller said when).
 */
static void run_stop(struct run *r, int quiet)
{
    int64_t now = lb_now_ms(), grace = r->o->grace_ms, by = -1;

    if (r->checking)
        by = r->safe_until;
    if (r->give_up_at && (by < 0 || r->give_up_at < by))
        by = r->give_up_at;
    if (by >= 0 && now + grace > by) {
        grace = by > now ? by - now : 0;
        if (!quiet)
            fprintf(stderr, "lockbroker: grace period cut to %" PRId64 " ms: the lock is certain "
                    "for no longer\n", grace);
    }
    /* Already being stopped: the SIGKILL due (or sent) comes no later. */
    if (r->state == RUN_STOP_KILL)
        grace = 0;
    else if (r->state == RUN_STOPPING && r->kill_at - now < grace)
        grace = r->kill_at > now ? r->kill_at - now : 0;
    if (grace > 0) {
        killpg(r->pid, SIGTERM);
        r->state = RUN_LOST_TERM;
        r->kill_at = now + grace;
    } else {
        killpg(r->pid, SIGKILL);
        r->state = RUN_LOST_KILL;
    }
    killpg(r->pid, SIGCONT);   /* a stopped command must run to act on SIGTERM */
}

/*
 * Closes conn. quit: with a session, send QUIT first (if it fits now), so
 * that what is still held is released at once rather than kept for the
 * grace; not after a drop, whose holds are to be taken back.
 */
static void run_hangup(struct run *r, int quit)
{
    char err[CLIENT_ERR_MAX];

    if (r->conn->fd < 0)
        return;
    if (quit && r->sess.id[0] && r->conn->phase == LB_PHASE_READY) {
        /* Unread input would make close() a reset, which may beat the QUIT. */
        lb_fill(r->conn, err, sizeof(err));
        lb_send(r->conn, "QUIT\n", 5, lb_now_ms(), err, sizeof(err));
    }
    /* The guardian has a copy of the first connection: end it for both. */
    shutdown(r->conn->fd, SHUT_RDWR);
    lb_close(r->conn);
}

/*
 * The lock is gone: stop using the resource, i.e. end the command. Once
 * the command has ended there is nothing to stop: the loss is reported
 * (run_settle()).
 */
static void run_lose(struct run *r, const char *why)
{
    if (!run_held(r))
        return;
    run_hangup(r, 1);
    if (r->ended) {
        fprintf(stderr, "lockbroker: warning: lock %s was lost as the command finished (%s)\n",
                r->o->name, why);
        r->state = RUN_LOST_KILL;
        return;
    }
    fprintf(stderr, "lockbroker: lock %s lost (%s); terminating the command\n",
            r->o->name, why);
    run_stop(r, 0);
}

/* ------------------------------------------------------ taking it back */

/*
 * D: until when the daemon certainly keeps the lock of a dropped
 * connection. It keeps it for the grace from when it saw the connection
 * end, and it cannot have seen that before it answered the last request
 * answered on it, sent at answered_sent; less the tenth the protocol
 * takes off for clocks that run at different rates, as CHECK's window does
 * (PROTOCOL.md, "What a client may assume after a drop").
 */
static int64_t drop_kept(const struct run *r)
{
    int64_t grace = r->o->session_grace_ms;

    return r->answered_sent + grace - (grace + 9) / 10;
}

/* "N tries" or "1 try". */
static const char *tries_word(unsigned n)
{
    return n == 1 ? "try" : "tries";
}

/*
 * Not taken back by stop_at, or no try left that could start before D:
 * the daemon may free the lock at D, so the command is stopped as in
 * jeopardy (SIGTERM now, SIGKILL no later than D). The tries go on until D
 * all the same (run_trying()): a lock taken back is released at once.
 */
static void run_not_back(struct run *r)
{
    int64_t now = lb_now_ms();

    if (!run_held(r))
        return;
    r->jeopardy = 1;
    fprintf(stderr, "lockbroker: lock %s in jeopardy: not taken back (%u %s: %s), and %s may "
            "free it in %" PRId64 " ms; terminating the command\n", r->o->name, r->tries,
            tries_word(r->tries), r->drop_why, r->o->addr->spec,
            r->give_up_at > now ? r->give_up_at - now : 0);
    run_stop(r, 1);
}

/*
 * The connection dropped (why). Without a session the lock is lost, as it
 * always was; with one, the daemon keeps it until D at least, and the
 * tries to take it back start now; a drop noticed too late to run on
 * (stop_at has passed) stops the command at once. Called while the lock
 * is held and r->link is LINK_UP.
 */
static void run_drop(struct run *r, const char *why)
{
    int64_t now = lb_now_ms(), grace = r->o->session_grace_ms;
    int64_t term = r->o->grace_ms < grace / 4 ? r->o->grace_ms : grace / 4;
    char counts[160];

    if (!r->sess.id[0]) {
        run_lose(r, why);
        return;
    }
    run_hangup(r, 0);
    r->link = LINK_PAUSE;
    r->dropped_at = r->retry_at = now;
    r->give_up_at = drop_kept(r);
    r->stop_at = r->give_up_at - term;
    r->pause_ms = RUN_REDIAL_MIN_MS;
    r->tries = 0;
    r->check_inflight = 0;   /* its replies will never come */
    snprintf(r->drop_why, sizeof(r->drop_why), "%s", why);
    snprintf(counts, sizeof(counts), "--session-grace %" PRId64 " ms counts from the last "
             "request answered, %" PRId64 " ms ago", grace, now - r->answered_sent);
    if (r->ended || now < r->stop_at) {
        int64_t until = r->ended ? r->give_up_at : r->stop_at;

        fprintf(stderr, "lockbroker: connection to %s dropped (%s); %s while taking lock %s "
                "back (for up to %" PRId64 " ms: %s)\n", r->o->addr->spec, why,
                r->ended ? "the command has ended" : "the command runs on", r->o->name,
                until > now ? until - now : 0, counts);
        return;
    }
    fprintf(stderr, "lockbroker: connection to %s dropped (%s), too late for the command to "
            "run on while taking lock %s back (%s)\n", r->o->addr->spec, why, r->o->name,
            counts);
    if (now >= r->give_up_at)
        r->link = LINK_UP;   /* no try could be in time: conn is closed, as after any loss */
    run_not_back(r);
}

/* The try failed (why): pause and try again, or give up when no try could start before D. */
static void run_try_failed(struct run *r, const char *why)
{
    char lost[CLIENT_ERR_MAX + 128];
    int64_t now = lb_now_ms();

    snprintf(r->drop_why, sizeof(r->drop_why), "%s", why);
    run_hangup(r, 0);
    if (now + r->pause_ms >= r->give_up_at) {
        r->link = LINK_UP;   /* nothing left to try: conn is closed, as after any loss */
        if (!r->ended) {
            run_not_back(r);
            return;
        }
        snprintf(lost, sizeof(lost), "not taken back within --session-grace of the last "
                 "request answered, %u %s: %s", r->tries, tries_word(r->tries), r->drop_why);
        run_lose(r, lost);
        return;
    }
    r->link = LINK_PAUSE;
    r->retry_at = now + r->pause_ms;
    r->pause_ms = r->pause_ms * 2 > RUN_REDIAL_MAX_MS ? RUN_REDIAL_MAX_MS : r->pause_ms * 2;
}

/*
 * Connected and logged in again: `CLIENT <label>` (STATUS and LOCKS name
 * the new connection), `RESUME <session> <secret>`, and a round of CHECKs
 * for a window that counts from now, in one write. A CHECK after a failed
 * RESUME answers ERR NOT_HELD: nothing is taken that is not ours.
 */
static void run_resume_send(struct run *r)
{
    char req[PROTO_LABEL_MAX + 96 + CHECK_ROUND_MAX], err[CLIENT_ERR_MAX];
    int64_t now = lb_now_ms();
    int n = 0;

    if (r->o->label)
        n = snprintf(req, sizeof(req), "CLIENT %s\n", r->o->label);
    n += snprintf(req + n, sizeof(req) - (size_t)n, "RESUME %s %s\n", r->sess.id,
                  r->sess.secret);
    n += check_format(r, req + n);
    if (lb_send(r->conn, req, (size_t)n, r->try_until, err, sizeof(err)) != CLIENT_OK) {
        explicit_bzero(req, sizeof(req));
        run_try_failed(r, "cannot send RESUME: the connection failed");
        return;
    }
    explicit_bzero(req, sizeof(req));
    r->link = LINK_RESUMING;
    r->resume_client = r->o->label != NULL;
    check_started(r, now);
}

/* LINK_DIALING: drives the new connection on (connect, TLS, AUTH). */
static void run_dial(struct run *r)
{
    char err[CLIENT_ERR_MAX];
    int rc;

    switch (lb_dial_step(r->conn, r->o->addr, r->try_until, &r->dial_poll, &rc, err,
                         sizeof(err))) {
    case LB_DIAL_WAIT:
        return;
    case LB_DIAL_DONE:
        run_resume_send(r);
        return;
    default:
        /* A refused login or a TLS set-up that cannot work will not change in a second. */
        if (rc == CLI_EXIT_DENIED || rc == CLI_EXIT_USAGE) {
            r->link = LINK_UP;
            run_lose(r, err);
        } else {
            run_try_failed(r, err);
        }
    }
}

/* LINK_PAUSE, at retry_at: a try starts, on a new connection to the same address. */
static void run_try(struct run *r)
{
    char err[CLIENT_ERR_MAX];
    int64_t now = lb_now_ms();

    r->tries++;
    r->try_until = now + r->o->io_ms < r->give_up_at ? now + r->o->io_ms : r->give_up_at;
    if (lb_dial_start(r->conn, r->o->addr, &r->peer, err, sizeof(err)) < 0) {
        run_try_failed(r, err);
        return;
    }
    r->link = LINK_DIALING;
    run_dial(r);
}

/*
 * LINK_RESUMING: a reply before the CHECKs' (CLIENT's, whatever it says:
 * an older daemon's ERR BAD_COMMAND too; then RESUME's). `OK <session>
 * <n>`: the lock is ours again, on this connection; the CHECKs' replies
 * say whether all of it is. Anything else: RESUME took nothing, and never
 * will on this daemon (its grace ran out, a BREAK, another daemon).
 */
static void run_resume_reply(struct run *r, const char *line)
{
    char lost[RUN_REPLY_MAX + 16], want[40];

    if (r->resume_client) {
        r->resume_client = 0;
        return;
    }
    snprintf(want, sizeof(want), "OK %s ", r->sess.id);
    if (strncmp(line, want, strlen(want)) == 0) {
        r->link = LINK_UP;
        r->answered_sent = r->check_sent;   /* RESUME went out with the CHECKs */
        r->give_up_at = 0;                  /* no D: the stop at stop_at is off */
        fprintf(stderr, "lockbroker: lock %s taken back on a new connection to %s, %" PRId64
                " ms after the drop (%u %s)%s\n", r->o->name, r->o->addr->spec,
                lb_now_ms() - r->dropped_at, r->tries, tries_word(r->tries),
                run_held(r) ? "" : "; the command is being stopped all the same, and the "
                "lock is released when it has ended");
        return;
    }
    snprintf(lost, sizeof(lost), "RESUME: %.900s", line);
    r->link = LINK_UP;
    run_lose(r, lost);
}

/*
 * The connection failed (why): while LINK_UP a drop, while a try is on
 * its failure.
 */
static void run_conn_failed(struct run *r, const char *why)
{
    if (r->link == LINK_UP)
        run_drop(r, why);
    else
        run_try_failed(r, why);
}

/*
 * No fresh window came in time: the lock may be granted to someone else
 * at safe_until. The connection stays open until the command has ended, so
 * that a daemon that was only slow does not free the lock before then.
 */
static void run_jeopardy(struct run *r)
{
    int64_t now = lb_now_ms();

    if (!run_held(r))
        return;
    r->jeopardy = 1;
    fprintf(stderr, "lockbroker: lock %s in jeopardy: %s has not confirmed it (CHECK) for "
            "%" PRId64 " ms and may grant it to someone else in %" PRId64 " ms; terminating "
            "the command\n", r->o->name, r->o->addr->spec, now - r->check_sent,
            r->safe_until > now ? r->safe_until - now : 0);
    run_stop(r, 0);
}

/* Handles lines pushed by the broker while the command runs. */
static void run_read_conn(struct run *r)
{
    static char line[CLIENT_LINE_MAX + 1];   /* lines unknown today may be long */
    char err[CLIENT_ERR_MAX], lost[RUN_REPLY_MAX];
    enum lb_status st = lb_fill(r->conn, err, sizeof(err));
    int got;

    /* Lines that arrived before an end of file still count. */
    while ((run_held(r) || run_trying(r)) &&
           (got = lb_pop_line(r->conn, line, sizeof(line))) != 0) {
        const char *reason;

        if (got < 0)
            break;   /* cannot happen: lb_fill refuses longer lines */
        /* LOST <name> <token> <reason>: of a set, any name's ends the command. */
        if ((reason = lost_reason(r, line))) {
            snprintf(lost, sizeof(lost), "%s", reason);
            r->link = LINK_UP;
            run_lose(r, lost);
            return;
        }
        if (r->link == LINK_RESUMING) {
            run_resume_reply(r, line);
            continue;
        }
        if (r->check_inflight) {
            int64_t safe = 0;

            switch (check_parse(r, line, &safe)) {
            case CHECK_WINDOW:
                check_round(r, 1, safe);
                break;
            case CHECK_NOT_HELD:
                snprintf(lost, sizeof(lost), "CHECK: %.900s", line);
                run_lose(r, lost);
                return;
            default:
                /* No window this time: ask again a little later. */
                fprintf(stderr, "lockbroker: unexpected reply to CHECK %s: %s\n",
                        r->names[r->check_next], line);
                check_round(r, 0, 0);
                break;
            }
            continue;
        }
        fprintf(stderr, "lockbroker: ignoring unexpected line from the broker: %s\n", line);
    }
    if (!(run_held(r) || run_trying(r)) || r->link == LINK_PAUSE)
        return;
    if (st == CLIENT_CLOSED)
        run_conn_failed(r, "the broker closed the connection");
    else if (st == CLIENT_ERROR) {
        snprintf(lost, sizeof(lost), "connection error: %s", err);
        run_conn_failed(r, lost);
    }
}

/* Gives the terminal back to our process group, if the command has it. */
static void run_take_tty(struct run *r)
{
    if (r->tty >= 0 && tcgetpgrp(r->tty) == r->pid)
        tcsetpgrp(r->tty, getpgrp());
}

/* Whether si says the command's main process was killed by the signal of a
 * terminal's ^C or ^\, which the group's background jobs ignore. */
static int killed_by_interrupt(const siginfo_t *si)
{
    return (si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED) &&
           (si->si_status == SIGINT || si->si_status == SIGQUIT);
}

/*
 * SIGCHLD: looks at the command without reaping it, so that its process
 * group id stays reserved while stragglers are killed. Returns 1 with the
 * wait status once it has ended, 0 while it runs. Unless it ended by
 * itself, what is left of its group is killed and waited for first.
 */
static int run_check_child(struct run *r, int *wstatus)
{
    siginfo_t si;
    int end_group;

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
    end_group = r->state != RUN_HOLDING || killed_by_interrupt(&si);
    if (end_group)
        killpg(r->pid, SIGKILL);   /* whatever it started must not outlive the lock either */
    while (waitpid(r->pid, wstatus, 0) < 0 && errno == EINTR)
        ;
    if (end_group) {
        /* The group's other processes are ours now (subreaper): wait until all are gone. */
        pid_t gone;

        while ((gone = waitpid(-r->pid, NULL, 0)) > 0 || errno == EINTR)
            if (gone == r->guardian)
                r->guardian = 0;   /* killed with the group */
    }
    return 1;
}

/*
 * Reaps orphans the command left behind (they are ours, as subreaper), and
 * a guardian that was killed, not the command.
 */
static void run_reap_orphans(struct run *r)
{
    siginfo_t si;

    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0 ||
            si.si_pid == r->pid)
            return;
        waitpid(si.si_pid, NULL, 0);
        if (si.si_pid == r->guardian)
            r->guardian = 0;
    }
}

/*
 * SIGINT, SIGTERM, SIGHUP for lockbroker: passed on to the command's group.
 * The first SIGINT or SIGTERM also starts the grace period (see the top of
 * this file); SIGHUP is only passed on.
 */
static void run_pass_signal(struct run *r, int sig)
{
    killpg(r->pid, sig);
    if (r->state != RUN_HOLDING || sig == SIGHUP)
        return;
    r->state = RUN_STOPPING;
    r->stop_signal = sig;
    r->kill_at = lb_now_ms() + r->o->grace_ms;
}

/* Sleep until the earlier of a and b (-1: no time). */
static int64_t earlier(int64_t a, int64_t b)
{
    return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

/*
 * The connection's part of a poll(): sets p for conn, or for the try in
 * progress (fd -1: nothing to wait for), and *ready when input is there
 * that poll() cannot see. Returns when the link next has something to do
 * by the clock (-1: nothing).
 */
static int64_t run_link_poll(const struct run *r, struct pollfd *p, int *ready)
{
    *ready = 0;
    p->fd = -1;
    p->revents = 0;
    if (!run_held(r) && !run_trying(r))
        return -1;   /* the lock is gone: the connection no longer matters */
    switch (r->link) {
    case LINK_UP:
        *ready = lb_poll_setup(r->conn, p);
        /* With a session, a CHECK unanswered for -t is a drop (NAT, half-open connection). */
        return r->sess.id[0] && r->check_inflight ? r->check_sent + r->o->io_ms : -1;
    case LINK_PAUSE:
        return r->retry_at;
    case LINK_DIALING:
        *p = r->dial_poll;
        p->revents = 0;
        return r->try_until;
    default:
        *ready = lb_poll_setup(r->conn, p);
        return r->try_until;
    }
}

/* After the poll() of run_link_poll(): the connection's input, then its timers. */
static void run_link_events(struct run *r, const struct pollfd *p, int ready)
{
    char why[CLIENT_ERR_MAX];
    int64_t now;

    if (p->fd >= 0 && (p->revents || ready)) {
        if (r->link == LINK_DIALING)
            run_dial(r);
        else
            run_read_conn(r);
    }
    if (!run_held(r) && !run_trying(r))
        return;
    now = lb_now_ms();
    switch (r->link) {
    case LINK_UP:
        if (r->sess.id[0] && r->check_inflight && now >= r->check_sent + r->o->io_ms) {
            snprintf(why, sizeof(why), "no reply to CHECK within %" PRId64 " ms (-t)",
                     r->o->io_ms);
            run_drop(r, why);
        }
        break;
    case LINK_PAUSE:
        if (now >= r->retry_at)
            run_try(r);
        break;
    default:
        if (now >= r->try_until) {
            snprintf(why, sizeof(why), "%s: no %s in time", r->o->addr->spec,
                     r->link == LINK_DIALING ? "connection (connect, TLS, AUTH)"
                                             : "answer to RESUME");
            run_try_failed(r, why);
        }
    }
}

/* Supervises the command until it ends. Returns its wait status. */
static int run_supervise(struct run *r)
{
    for (;;) {
        struct pollfd p[2] = { { .fd = -1 }, { .fd = sig_pipe[0], .events = POLLIN } };
        int64_t wake = -1, now = lb_now_ms();
        int timeout, wstatus, ready = 0;

        /* The connection matters while the lock is held (-1: poll ignores it). Input
         * TLS has decrypted already does not show on its fd: then no waiting. */
        wake = run_link_poll(r, &p[0], &ready);
        if (r->resume || ready)
            wake = now;
        if (r->state == RUN_LOST_TERM || r->state == RUN_STOPPING)
            wake = earlier(wake, r->kill_at);
        if (run_held(r) && r->checking) {
            wake = earlier(wake, jeopardy_at(r));
            if (r->link == LINK_UP && !r->check_inflight)
                wake = earlier(wake, r->next_check);
        }
        if (run_held(r) && r->link != LINK_UP)
            wake = earlier(wake, r->stop_at);
        timeout = wake < 0 ? -1 : wake <= now ? 0 : wake - now > 1000000 ? 1000000
                                                : (int)(wake - now);
        if (poll(p, 2, timeout) < 0 && errno != EINTR) {
            fprintf(stderr, "lockbroker: poll: %s\n", strerror(errno));
            return CLI_EXIT_USAGE << 8;
        }
        /* The connection first: when a loss and the command's end arrive together, the loss counts. */
        run_link_events(r, &p[0], ready);
        now = lb_now_ms();
        if (run_held(r) && r->checking) {
            if (now >= jeopardy_at(r))
                run_jeopardy(r);
            else if (r->link == LINK_UP && !r->check_inflight && now >= r->next_check &&
                     check_send(r) < 0)
                run_drop(r, "cannot send CHECK: the connection failed");
        }
        if (run_held(r) && r->link != LINK_UP && now >= r->stop_at)
            run_not_back(r);
        if (r->state == RUN_LOST_TERM && lb_now_ms() >= r->kill_at) {
            killpg(r->pid, SIGKILL);
            r->state = RUN_LOST_KILL;
        }
        if (r->state == RUN_STOPPING && lb_now_ms() >= r->kill_at) {
            fprintf(stderr, "lockbroker: the command did not end within the grace period (-g) "
                    "after %s: killed\n", r->stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
            killpg(r->pid, SIGKILL);
            r->state = RUN_STOP_KILL;
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
                        run_pass_signal(r, sigs[i]);
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
 * The command ended by itself while the lock is held. If the connection
 * is down, take the lock back first (within the grace, as while it ran),
 * and wait for the round of CHECKs sent with RESUME, so that the release
 * below happens at once, with --min-hold's keep=, and a loss is said.
 * Returns 1 when the lock can be released on r->conn; 0 when it is gone,
 * or was not taken back (said on stderr: the broker frees it at the end
 * of the grace).
 */
static int run_settle(struct run *r)
{
    r->ended = 1;
    while (run_held(r) && (r->link != LINK_UP || (r->dropped_at && r->check_inflight))) {
        struct pollfd p;
        int64_t now = lb_now_ms(), wake;
        int ready;

        wake = run_link_poll(r, &p, &ready);
        if (ready || (wake >= 0 && wake < now))
            wake = now;
        if (poll(&p, 1, wake < 0 ? -1 : wake - now > 1000000 ? 1000000 : (int)(wake - now)) < 0
            && errno != EINTR)
            break;
        run_link_events(r, &p, ready);
    }
    return run_held(r) && r->link == LINK_UP;
}

/*
 * --min-hold: how long the broker is to keep the lock after this release
 * (UNLOCK keep=, PROTOCOL.md "Releasing later"), counted from when the
 * grant was read, so never short; 0: release at once (no --min-hold, the
 * time has passed, or the command failed with --release-on-failure).
 */
static int64_t run_keep_ms(const struct run *r, int failed)
{
    int64_t left;

    if (!r->o->min_hold_ms || (failed && r->o->release_on_failure))
        return 0;
    left = r->granted_at + r->o->min_hold_ms - lb_now_ms();
    return left > 0 ? left : 0;
}

/*
 * The broker refused to keep the lock for us (ERR LIMIT: its quota of kept
 * holds, PROTOCOL.md "Quotas"); the lock is still ours. Keeps it on this
 * connection for the rest of --min-hold, then releases it as usual. A
 * LOST line or a closed connection ends the wait: nothing is left to hold.
 * Returns 1 when the lock is still to be released, else 0.
 */
static int run_hold_here(struct run *r, int64_t keep_ms, const char *refusal)
{
    char line[RUN_REPLY_MAX], err[CLIENT_ERR_MAX];
    int64_t deadline = lb_now_ms() + keep_ms;
    enum lb_status st;

    fprintf(stderr, "lockbroker: lock %s: the broker will not keep it (%s); holding it "
            "here %lld ms more (--min-hold)\n", r->o->name, refusal, (long long)keep_ms);
    while ((st = lb_read_line(r->conn, line, sizeof(line), deadline, err, sizeof(err))) ==
           CLIENT_OK) {
        if (strncmp(line, "LOST ", 5) == 0) {
            fprintf(stderr, "lockbroker: warning: lock %s was lost during --min-hold: %s\n",
                    r->o->name, line);
            return 0;
        }
    }
    if (st == CLIENT_TIMEOUT)
        return 1;
    fprintf(stderr, "lockbroker: warning: lock %s during --min-hold: %s\n", r->o->name,
            st == CLIENT_CLOSED ? "the broker closed the connection" : err);
    return 0;
}

/*
 * After the command ended by itself: UNLOCK (keep_ms later, if not 0) and
 * wait for `OK <name>`. A loss noticed only now is reported but does not
 * change the exit status: the command finished while the lock was, as far
 * as anyone could tell, held. Also for a grant given back before the
 * command started (run_take()), with keep_ms 0 and no report of a loss.
 */
static void run_unlock(struct run *r, int64_t keep_ms)
{
    char req[RUN_REPLY_MAX], line[RUN_REPLY_MAX], ok[RUN_REPLY_MAX], err[CLIENT_ERR_MAX];
    int64_t deadline = lb_now_ms() + r->o->io_ms;
    enum lb_status st;
    int n = keep_ms > 0 ? snprintf(req, sizeof(req), "UNLOCK %s keep=%lld\n", r->o->name,
                                   (long long)keep_ms)
                        : snprintf(req, sizeof(req), "UNLOCK %s\n", r->o->name);

    snprintf(ok, sizeof(ok), "OK %s", r->o->name);
    st = lb_send(r->conn, req, (size_t)n, deadline, err, sizeof(err));
    while (st == CLIENT_OK) {
        st = lb_read_line(r->conn, line, sizeof(line), deadline, err, sizeof(err));
        if (st != CLIENT_OK)
            break;
        if (r->check_inflight && strncmp(line, "LOST ", 5) != 0) {
            /* The replies to the CHECKs sent before the UNLOCK. */
            if (++r->check_next >= r->nnames)
                r->check_inflight = 0;
            continue;
        }
        if (strcmp(line, ok) == 0) {
            if (keep_ms > 0 && r->o->notice)
                fprintf(stderr, "lockbroker: lock %s stays held %lld ms more (--min-hold), "
                        "by the broker\n", r->o->name, (long long)keep_ms);
            return;
        }
        if (strncmp(line, "LOST ", 5) == 0) {
            if (r->pid > 0)   /* else a grant given back unused (run_take()): no matter */
                fprintf(stderr, "lockbroker: warning: lock %s was lost as the command "
                        "finished: %s\n", r->o->name, line);
            continue;   /* the UNLOCK reply (ERR NOT_HELD) follows */
        }
        /* The LOST line above said why; of a set, UNLOCK released none of
         * it, and closing the connection releases the rest. */
        if (strncmp(line, "ERR NOT_HELD", 12) == 0)
            return;
        /* Nothing was released: hold it here instead, then UNLOCK. */
        if (keep_ms > 0 && strncmp(line, "ERR LIMIT ", 10) == 0) {
            if (run_hold_here(r, keep_ms, line + 10))
                run_unlock(r, 0);
            return;
        }
        fprintf(stderr, "lockbroker: warning: unexpected reply to UNLOCK %s: %s\n",
                r->o->name, line);
        return;
    }
    /* Closing the connection releases the lock anyway. */
    fprintf(stderr, "lockbroker: warning: UNLOCK %s: %s\n", r->o->name,
            st == CLIENT_CLOSED ? "the broker closed the connection"
            : st == CLIENT_TIMEOUT ? "no reply" : err);
}

/* ------------------------------------------------------------ guardian */

/*
 * Starts the guardian (see the top of this file) in the command's group.
 * Called with the signals blocked. Returns 0, or -1 with errno.
 */
static int guardian_start(struct run *r, const sigset_t *orig_mask)
{
    static const int ignored[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN,
                                   SIGTTOU, SIGPIPE };
    pid_t parent = getpid(), g;
    int p[2], e;

    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    if ((g = fork()) < 0) {
        e = errno;
        close(p[0]);
        close(p[1]);
        errno = e;
        return -1;
    }
    if (g == 0) {
        struct sigaction sa;
        char b;

        memset(&sa, 0, sizeof(sa));
        sigemptyset(&sa.sa_mask);
        sa.sa_handler = SIG_IGN;
        for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
            sigaction(ignored[i], &sa, NULL);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGCHLD, &sa, NULL);
        sigprocmask(SIG_SETMASK, orig_mask, NULL);
        close(p[1]);
        close(sig_pipe[0]);
        close(sig_pipe[1]);
        if (r->tty >= 0)
            close(r->tty);
        /* r->conn stays open here: the lock is freed only when this process is gone too. */
        setpgid(0, r->pid);
        if (getppid() == parent)
            while (read(p[0], &b, 1) < 0 && errno == EINTR)
                ;
        /* End of file (or a byte, which nobody sends): lockbroker is gone. */
        killpg(r->pid, SIGKILL);
        _exit(0);
    }
    close(p[0]);
    setpgid(g, r->pid);
    r->guardian = g;
    r->guardian_pipe = p[1];
    return 0;
}

/* lockbroker ends normally: the guardian must not kill anything. */
static void guardian_stop(struct run *r)
{
    if (r->guardian > 0) {
        kill(r->guardian, SIGKILL);
        while (waitpid(r->guardian, NULL, 0) < 0 && errno == EINTR)
            ;
        r->guardian = 0;
    }
    if (r->guardian_pipe >= 0)
        close(r->guardian_pipe);
    r->guardian_pipe = -1;
}

/* Splits the name (a set's list) and the tokens granted; nnames 0 when
 * they do not pair up (check_first() says so). */
static void run_split(struct run *r)
{
    const char *n = r->o->name, *t = r->token;

    for (r->nnames = 0; r->nnames < PROTO_SET_MAX; ) {
        size_t nl = strcspn(n, ","), tl = strcspn(t, ",");

        if (nl == 0 || nl > PROTO_NAME_MAX || tl == 0 || tl >= sizeof(r->tokens[0]))
            break;
        snprintf(r->names[r->nnames], sizeof(r->names[0]), "%.*s", (int)nl, n);
        snprintf(r->tokens[r->nnames], sizeof(r->tokens[0]), "%.*s", (int)tl, t);
        r->nnames++;
        if (!n[nl] && !t[tl])
            return;
        if (!n[nl] || !t[tl])
            break;
        n += nl + 1;
        t += tl + 1;
    }
    r->nnames = 0;
}

/*
 * Takes the lock and asks the first CHECK. A grant with no window to start
 * the command in is no answer (a daemon just back from a ZooKeeper outage
 * granted with a window of 0, then took the grant back a second later):
 * release it at once, pause, and ask again with what is left of -w, until
 * a grant with a window or the end of -w. The pause grows from
 * RUN_RETRY_MIN_MS to RUN_RETRY_MAX_MS, within the wait. Returns 0 with
 * the lock held and its first window answered (r->conn connected), or a
 * CLI_EXIT_* status having said why on stderr: the end of -w is
 * CLI_EXIT_TIMEOUT, never CLI_EXIT_JEOPARDY, which only a command that ran
 * and was stopped gets. r->conn is closed or to be closed.
 */
static int run_take(struct run *r)
{
    const struct run_opts *o = r->o;
    int64_t now = lb_now_ms(), end = o->wait_ms >= 0 ? now + o->wait_ms : -1;
    int64_t wait = o->wait_ms, pause = RUN_RETRY_MIN_MS;
    unsigned grants = 0;
    int rc;

    for (;;) {
        r->sess.id[0] = '\0';
        rc = run_lock_wait(o, wait, r->conn, o->session_grace_ms ? &r->sess : NULL, r->token,
                           sizeof(r->token));
        r->granted_at = lb_now_ms();
        if (rc != 0)
            return rc;
        /* A host name may lead to another daemon next time; the session is on this one. */
        if (r->sess.id[0])
            lb_peer_of(r->conn, o->addr, &r->peer);
        run_split(r);
        r->safe_until = r->window_max = 0;   /* a window of an earlier grant says nothing */
        if ((rc = check_first(r)) != CLI_EXIT_JEOPARDY)
            return rc;
        grants++;
        run_unlock(r, 0);
        run_hangup(r, 1);
        now = lb_now_ms();
        if (end >= 0 && now >= end)
            break;
        if (grants == 1 && o->notice)
            fprintf(stderr, "lockbroker: lock %s granted, but certain for only %" PRId64
                    " ms (CHECK): released; asking again%s\n", o->name, r->check_min,
                    end >= 0 ? " until the end of -w" : "");
        if (end >= 0 && end - now < pause)
            pause = end - now;
        poll(NULL, 0, (int)pause);
        now = lb_now_ms();
        wait = end < 0 ? -1 : end > now ? end - now : 0;
        pause = pause * 2 > RUN_RETRY_MAX_MS ? RUN_RETRY_MAX_MS : pause * 2;
    }
    if (o->quiet)
        return CLI_EXIT_TIMEOUT;   /* -q: a skip says nothing */
    if (o->wait_ms == 0)
        fprintf(stderr, "lockbroker: lock %s is certain for only %" PRId64 " ms (CHECK); not "
                "waiting for a longer window (-w 0); the command was not run\n", o->name,
                r->check_min);
    else
        fprintf(stderr, "lockbroker: timed out after %" PRId64 " ms waiting for lock %s: "
                "granted %u time%s, but certain for only %" PRId64 " ms (CHECK) the last "
                "time; the command was not run\n", o->wait_ms, o->name, grants,
                grants == 1 ? "" : "s", r->check_min);
    return CLI_EXIT_TIMEOUT;
}

int run_command(const struct run_opts *o)
{
    static struct lb_conn conn;   /* 64 KiB buffer: not on the stack */
    struct run r = { .o = o, .conn = &conn, .tty = -1, .state = RUN_HOLDING,
                     .guardian_pipe = -1 };
    sigset_t block, orig, during;
    pid_t parent;
    int rc, wstatus;

    if ((rc = run_take(&r)) != 0) {
        run_hangup(&r, 1);
        return rc == CLI_EXIT_TIMEOUT && o->timeout_exit >= 0 ? o->timeout_exit : rc;
    }
    if (setenv("LOCKBROKER_NAME", o->name, 1) < 0 || setenv("LOCKBROKER_TOKEN", r.token, 1) < 0 ||
        setenv("LOCKBROKER_ADDR", o->addr->spec, 1) < 0 || install_handlers() < 0) {
        fprintf(stderr, "lockbroker: %s\n", strerror(errno));
        run_hangup(&r, 1);
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
        run_hangup(&r, 1);
        return CLI_EXIT_USAGE;
    }
    /* Both sides set the group and the terminal, so neither waits for the other. */
    setpgid(r.pid, r.pid);
    if (r.tty >= 0)
        tcsetpgrp(r.tty, r.pid);
    if (guardian_start(&r, &orig) < 0)
        fprintf(stderr, "lockbroker: warning: cannot start the guardian (%s): if lockbroker "
                "dies, only the command's main process is killed\n", strerror(errno));
    /* SIGTTOU stays blocked: in the background we still write to and take back the terminal. */
    during = orig;
    sigaddset(&during, SIGTTOU);
    sigprocmask(SIG_SETMASK, &during, NULL);

    wstatus = run_supervise(&r);
    run_take_tty(&r);

    if (run_held(&r)) {
        rc = WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
        if (run_settle(&r))
            run_unlock(&r, run_keep_ms(&r, rc != 0));
    } else {
        rc = r.jeopardy ? CLI_EXIT_JEOPARDY : CLI_EXIT_LOST;
    }
    guardian_stop(&r);
    run_hangup(&r, 1);
    if (r.tty >= 0)
        close(r.tty);
    return rc;
}
