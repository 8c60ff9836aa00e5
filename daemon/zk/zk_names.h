/*
 * zk_names.h - what a lock node's name says (zk_names.c), read by every layer
 * from the node machinery up (zk.h draws the layers).
 */
#ifndef LOCKBROKER_ZK_NAMES_H
#define LOCKBROKER_ZK_NAMES_H

#include <stdbool.h>
#include <stdint.h>

#include "locks.h"

/* The sequence number ZooKeeper appended to child: its last 10 digits. */
long long zk_seq_of(const char *child);
/* What a lock node asks for, from the tag in its name. */
struct zkind {
    enum lock_mode mode;
    unsigned limit;            /* LOCK_LIMIT only */
    bool lease;                /* a lease's persistent node (tag has ".lease") */
    int64_t delay_ms;          /* its request's lock-delay (tag ends in ".d<ms>"), or 0 */
};
struct zkind zk_kind_of(const char *child);
/* Semaphores of one limit are one class, read/write locks the other:
 * requests of different classes never hold a name together. */
bool zk_same_class(struct zkind a, struct zkind b);

#endif
