/*
 * run.h - `lockbroker run`: hold a lock while a command runs.
 */
#ifndef LOCKBROKER_CLI_RUN_H
#define LOCKBROKER_CLI_RUN_H

#include <stdint.h>

#include "client.h"

struct run_opts {
    const struct client_addr *addr;  /* the broker */
    const char *name;                /* lock name, already checked with proto_name_valid */
    int64_t wait_ms;                 /* -w: LOCK <name> <wait_ms>; -1 to wait for ever */
    int64_t grace_ms;                /* -g: SIGTERM -> SIGKILL delay after a loss; 0: SIGKILL at once */
    int64_t io_ms;                   /* -t: connect and reply timeout (not the wait for the lock) */
    int shared;                      /* -s: ask for the lock in shared mode; never with limit */
    unsigned limit;                  /* -n: 1..PROTO_LIMIT_MAX, a semaphore with that many
                                        slots; 0: not a semaphore */
    char **argv;                     /* the command, NULL-terminated, argv[0] != NULL */
};

/*
 * Takes the lock, runs the command in its own process group with
 * LOCKBROKER_NAME, LOCKBROKER_TOKEN and LOCKBROKER_ADDR in its environment,
 * releases the lock when it exits. Returns the exit status for lockbroker:
 * the command's (128+N if signal N killed it) or a CLI_EXIT_* code, having
 * printed a one-line reason on stderr for the latter.
 */
int run_command(const struct run_opts *o);

#endif
