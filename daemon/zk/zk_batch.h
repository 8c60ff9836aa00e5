/*
 * zk_batch.h - group commit (zk_batch.c), the layer on the session: writes of
 * lock nodes queued and sent as multis. It hears the session through a
 * listener (flush after each loop pass, fail what is queued when the
 * connection goes) and calls nothing above it.
 */
#ifndef LOCKBROKER_ZK_BATCH_H
#define LOCKBROKER_ZK_BATCH_H

#include <sys/queue.h>

#include "histogram.h"
#include "zk_session.h"

struct zwrite;

/* zk_batch.c's state (zk->batch). */
struct zk_batch {
    TAILQ_HEAD(zwq, zwrite) wq;        /* writes waiting for a multi, oldest first */
    unsigned wq_len;
    unsigned batches_inflight;         /* multis sent and not answered */
    uint64_t batches, batched_ops;     /* multis sent; writes they carried (re-sends too) */
    uint64_t batch_failures;           /* multis that failed (an operation, or the connection) */
    uint64_t batch_resent;             /* writes sent again after another one failed */
    struct histogram batch_hist;       /* writes per multi sent */
};

/* Told, with the write's arg, right after a multi carrying it was sent:
 * requests sent now are answered after that multi. */
typedef void (*zk_batch_sent_fn)(const void *arg);
/* Makes zk->batch and registers group commit with zk's session. Returns 0
 * or -1; zk_batch_free() frees it (after the handle is closed). */
int zk_batch_init(struct zk *zk);
void zk_batch_free(struct zk *zk);
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
/* zk_batch_set() tied to the write queued just before it (call it right
 * after that one): it always goes in the same multi, right behind it, and
 * is never sent without it. When that write fails, done gets
 * ZRUNTIMEINCONSISTENCY and nothing is sent again; when it fails itself,
 * that write fails with ZRUNTIMEINCONSISTENCY too. */
int zk_batch_set_tied(struct zk *zk, const char *path, const char *data, int datalen,
                      int version, stat_completion_t done, const void *arg);

#endif
