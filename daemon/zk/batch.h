/*
 * batch.h - group commit (batch.c), the layer on the session: writes of
 * lock nodes queued and sent as multis. It hears the session through a
 * listener (flush after each loop pass, fail what is queued when the
 * connection goes) and calls nothing above it.
 */
#ifndef LOCKBROKER_ZK_BATCH_H
#define LOCKBROKER_ZK_BATCH_H

#include "session.h"

/* Told, with the write's arg, right after a multi carrying it was sent:
 * requests sent now are answered after that multi. */
typedef void (*zk_batch_sent_fn)(const void *arg);
/* Registers group commit with zk's session. Returns 0 or -1. */
int zk_batch_init(struct zk *zk);
/* Queue a create or a delete, as zoo_acreate / zoo_adelete would send it
 * (path and data are copied; acl is borrowed until it is sent). done runs
 * once with the outcome, later, on the loop thread. Returns ZOK, or
 * ZSYSTEMERROR (out of memory: nothing queued, done never runs). */
int zk_batch_create(struct zk *zk, const char *path, const char *data, int datalen,
                    const struct ACL_vector *acl, int flags, string_completion_t done,
                    zk_batch_sent_fn sent, const void *arg);
int zk_batch_delete(struct zk *zk, const char *path, int version, void_completion_t done,
                    const void *arg);
/* Queue a setData of a node, as zoo_aset would send it (data is copied).
 * Its zxid may be shared with the other writes of its multi. */
int zk_batch_set(struct zk *zk, const char *path, const char *data, int datalen, int version,
                 stat_completion_t done, const void *arg);

#endif
