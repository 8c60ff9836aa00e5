/*
 * lb_run.h - `lockbroker run`: hold a lock while a command runs; run_lock()
 * also takes the leases of `lockbroker lease`.
 */
#ifndef LOCKBROKER_CLI_RUN_H
#define LOCKBROKER_CLI_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "lb_client.h"

struct run_opts {
    const struct lb_addr *addr;  /* the broker */
    const char *name;                /* lock name, already checked with proto_name_valid */
    int64_t wait_ms;                 /* -w: LOCK <name> <wait_ms>; -1 to wait for ever */
    int64_t grace_ms;                /* -g: SIGTERM -> SIGKILL delay after a loss; 0: SIGKILL at once */
    int64_t io_ms;                   /* -t: connect and reply timeout (not the wait for the lock) */
    int shared;                      /* -s: ask for the lock in shared mode; never with limit */
    unsigned limit;                  /* -n: 1..PROTO_LIMIT_MAX, a semaphore with that many
                                        slots; 0: not a semaphore */
    int64_t ttl_ms;                  /* lease: ttl=<ms>, PROTO_TTL_MIN..PROTO_TTL_MAX;
                                        0 for run (the connection holds the lock) */
    char **argv;                     /* run: the command, NULL-terminated, argv[0] != NULL */
    const char *label;               /* CLIENT <label> sent before LOCK (1..PROTO_LABEL_MAX
                                        bytes 0x21-0x7e); NULL: no CLIENT */
    int timeout_exit;                /* -E: the exit status when the wait runs out; -1: 124 */
    int notice;                      /* say on stderr who holds the lock once the wait
                                        passes RUN_NOTICE_MS (-v, or stderr is a terminal) */
    int quiet;                       /* -q: a lock not granted within wait_ms (a skip)
                                        is not said on stderr; errors still are */
    int64_t min_hold_ms;             /* run --min-hold: released no sooner than this after
                                        the grant (UNLOCK keep=); 0: at once */
    int release_on_failure;          /* run --release-on-failure: a failed command
                                        releases at once despite min_hold_ms */
    int64_t session_grace_ms;        /* run --session-grace: `GRACE <ms>` before LOCK, and
                                        a dropped connection is taken back (RESUME) within
                                        it; 0: no GRACE (a drop loses the lock) */
};

#define RUN_NOTICE_MS 1000   /* a wait longer than this is worth a word on stderr */

/*
 * The default CLIENT label, `user@host:pid:command`: the user of getuid()
 * (else $LOGNAME, else the uid), the short host name, lockbroker's pid and
 * the basename of command, with every byte outside 0x21-0x7e replaced by
 * '_', cut to PROTO_LABEL_MAX bytes. buf holds at least PROTO_LABEL_MAX + 1.
 */
void run_default_label(char *buf, size_t cap, const char *command);

/*
 * Connects to o->addr and sends `CLIENT <label>` (if o->label; an older
 * daemon's ERR BAD_COMMAND to it is ignored), then `LOCK <name> [<wait_ms>]
 * [shared|limit=<n>] [ttl=<ttl_ms>]` (o->grace_ms, o->argv and
 * o->session_grace_ms are not used: no GRACE). With o->notice, a wait that
 * passes RUN_NOTICE_MS is reported on stderr once, with the holder a STATUS
 * on a second connection names; a TIMEOUT is said with the holder a STATUS
 * on c names (-w 0: "is held by"). Returns 0 once granted, with the
 * decimal token copied to token (tokcap bytes) and c still connected;
 * otherwise a CLI_EXIT_* status, having printed a one-line reason on
 * stderr. The caller closes c in both cases. Used by run and by
 * `lockbroker lease`.
 */
int run_lock(const struct run_opts *o, struct lb_conn *c, char *token, size_t tokcap);

/*
 * Takes the lock, runs the command in its own process group with
 * LOCKBROKER_NAME, LOCKBROKER_TOKEN and LOCKBROKER_ADDR in its environment,
 * releases the lock when it exits. With o->session_grace_ms, a dropped
 * connection does not stop the command: it is made again and the lock
 * taken back (RESUME) within that time, counted from the send of the last
 * request answered (else the command is stopped by then). A grant whose first CHECK window is too
 * short to start in is released and the lock asked for again, within
 * o->wait_ms (CLI_EXIT_TIMEOUT when it runs out). Returns the exit status for lockbroker:
 * the command's (128+N if signal N killed it) or a CLI_EXIT_* code, having
 * printed a one-line reason on stderr for the latter.
 */
int run_command(const struct run_opts *o);

#endif
