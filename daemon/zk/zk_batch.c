/*
 * zk_batch.c - distributed mode: group commit of the lock nodes' writes.
 *
 * ZooKeeper runs one session's requests strictly in order, each write as
 * its own transaction. Creates and deletes of lock nodes, and the writes of
 * their data that nothing waits for (who holds them), are queued here
 * instead and sent as one zoo_amulti (one transaction) whenever fewer than
 * BATCH_WINDOW multis are in flight: at the end of the event-loop pass
 * that queued them (zk_kick), so a lone request goes out at once and
 * batches form by themselves under load. There is no timer.
 *
 * A multi succeeds or fails as a whole. On failure its per-operation
 * results name the culprit: the operations before it were rolled back
 * (ZOK), the ones after it were not tried (ZRUNTIMEINCONSISTENCY). Those
 * go back to the head of the queue, in order, and are sent again; the
 * culprit's completion gets its own error, exactly as if it had been sent
 * alone (zk_node.c handles a missing parent, a vanished node, ...). The
 * operations before the culprit succeeded once and go again as one
 * multi; each one after it goes in a multi of its own, all at once,
 * because another may fail as well (several locks taken for the first
 * time, whose parents do not exist yet): one round trip for all of them,
 * not one per failure. When the multi fails as a whole (connection loss,
 * session expiry, closing), every operation gets that error.
 *
 * The callers' completions have the signatures of zoo_acreate, zoo_adelete
 * and zoo_aset and run on the loop thread, never inside zk_batch_create(),
 * zk_batch_delete() or zk_batch_set().
 */
#include "config.h"
#include "zk_batch.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* At most this many multis in flight: the next one waits for a reply. */
#define BATCH_WINDOW 2
/* One multi carries at most this many operations and about this many
 * bytes: far below the server's jute.maxbuffer (1 MB by default). */
#define BATCH_OPS 64
#define BATCH_BYTES (128 * 1024)
/* A result the client never filled in (the multi failed as a whole). */
#define RESULT_UNSET 1

/* One queued write: a create, a delete or a setData. Path, data and the
 * buffer for the created node's name live in buf[]. */
struct zwrite {
    TAILQ_ENTRY(zwrite) link;
    int type;                  /* ZOO_CREATE_OP, ZOO_DELETE_OP or ZOO_SETDATA_OP */
    int flags;                 /* create: ZOO_EPHEMERAL_SEQUENTIAL, ... */
    int version;               /* delete, set: expected version, -1 for any */
    const struct ACL_vector *acl;   /* create; borrowed, outlives the handle */
    string_completion_t created;
    void_completion_t deleted;
    stat_completion_t set;
    struct Stat stat;          /* set: the node's stat once written */
    zk_batch_sent_fn sent;     /* NULL, or told each time a multi carries it */
    const void *arg;           /* the caller's context, passed to all three */
    bool alone;                /* untried after a failure: in a multi of its own */
    bool tied;                 /* rides with the write before it (zk_batch_set_tied) */
    const char *path;          /* in buf */
    const char *data;          /* in buf; NULL for no data */
    int datalen;               /* -1 for no data */
    char *result;              /* create: the node's name once created; in buf */
    int resultlen;
    size_t bytes;              /* about what the operation adds to a multi */
    char buf[];
};

/* One multi in flight; freed by its completion. results[] and the
 * zwrites' result buffers must live until then. */
struct zbatch {
    struct zk *zk;
    int n;
    struct zwrite *w[BATCH_OPS];
    zoo_op_result_t res[BATCH_OPS];
};

static struct zwrite *zwrite_new(struct zk *zk, int type, const char *path, const char *data,
                                 int datalen, const void *arg)
{
    size_t plen = strlen(path) + 1, dlen = data && datalen > 0 ? (size_t)datalen : 0;
    /* A sequential node's name is the path plus 10 digits. */
    size_t rlen = type == ZOO_CREATE_OP ? plen + 16 : 0;
    struct zwrite *w = calloc(1, sizeof(*w) + plen + dlen + rlen);

    if (!w)
        return NULL;
    memcpy(w->buf, path, plen);
    w->path = w->buf;
    if (data && datalen >= 0) {
        memcpy(w->buf + plen, data, dlen);
        w->data = w->buf + plen;
        w->datalen = datalen;
    } else {
        w->datalen = -1;
    }
    if (rlen) {
        w->result = w->buf + plen + dlen;
        w->resultlen = (int)rlen;
    }
    w->type = type;
    w->arg = arg;
    /* Path and data, ACL, headers: an estimate is all a cap needs. */
    w->bytes = plen + dlen + 64;
    TAILQ_INSERT_TAIL(&zk->batch->wq, w, link);
    zk->batch->wq_len++;
    zk_kick(zk);
    return w;
}

int zk_batch_create(struct zk *zk, const char *path, const char *data, int datalen,
                    const struct ACL_vector *acl, int flags, string_completion_t done,
                    zk_batch_sent_fn sent, const void *arg)
{
    struct zwrite *w = zwrite_new(zk, ZOO_CREATE_OP, path, data, datalen, arg);

    if (!w)
        return ZSYSTEMERROR;
    w->acl = acl;
    w->flags = flags;
    w->created = done;
    w->sent = sent;
    return ZOK;
}

int zk_batch_delete(struct zk *zk, const char *path, int version, void_completion_t done,
                    const void *arg)
{
    struct zwrite *w = zwrite_new(zk, ZOO_DELETE_OP, path, NULL, -1, arg);

    if (!w)
        return ZSYSTEMERROR;
    w->version = version;
    w->deleted = done;
    return ZOK;
}

int zk_batch_set(struct zk *zk, const char *path, const char *data, int datalen, int version,
                 stat_completion_t done, const void *arg)
{
    struct zwrite *w = zwrite_new(zk, ZOO_SETDATA_OP, path, data, datalen, arg);

    if (!w)
        return ZSYSTEMERROR;
    w->version = version;
    w->set = done;
    return ZOK;
}

int zk_batch_set_tied(struct zk *zk, const char *path, const char *data, int datalen,
                      int version, stat_completion_t done, const void *arg)
{
    int rc = zk_batch_set(zk, path, data, datalen, version, done, arg);

    if (rc == ZOK)
        TAILQ_LAST(&zk->batch->wq, zwq)->tied = true;
    return rc;
}

/* Runs the write's completion with rc and frees it. */
static void zwrite_finish(struct zwrite *w, int rc)
{
    if (w->type == ZOO_CREATE_OP)
        w->created(rc, rc == ZOK ? w->result : NULL, w->arg);
    else if (w->type == ZOO_SETDATA_OP)
        w->set(rc, rc == ZOK ? &w->stat : NULL, w->arg);
    else
        w->deleted(rc, w->arg);
    free(w);
}

static void on_batch_done(int rc, const void *data);

/* Takes up to BATCH_OPS writes (and BATCH_BYTES, unless a single write is
 * larger) off the queue and sends them as one multi. */
static void batch_send(struct zk *zk)
{
    struct zbatch *b = malloc(sizeof(*b));
    zoo_op_t ops[BATCH_OPS];
    struct zwrite *w;
    size_t bytes = 0;
    int rc;

    if (!b) {
        zk_arm_retry(zk);      /* the queue waits; the retry timer kicks it */
        return;
    }
    b->zk = zk;
    b->n = 0;
    /* A write and the one tied to it go together: room for both. */
    while ((w = TAILQ_FIRST(&zk->batch->wq)) &&
           (w->tied || b->n + 1 + (TAILQ_NEXT(w, link) && TAILQ_NEXT(w, link)->tied) <= BATCH_OPS) &&
           (b->n == 0 || w->tied ||
            (bytes + w->bytes <= BATCH_BYTES && !w->alone && !b->w[0]->alone))) {
        TAILQ_REMOVE(&zk->batch->wq, w, link);
        zk->batch->wq_len--;
        bytes += w->bytes;
        if (w->type == ZOO_CREATE_OP)
            zoo_create_op_init(&ops[b->n], w->path, w->data, w->datalen, w->acl, w->flags,
                               w->result, w->resultlen);
        else if (w->type == ZOO_SETDATA_OP)
            zoo_set_op_init(&ops[b->n], w->path, w->data, w->datalen, w->version, &w->stat);
        else
            zoo_delete_op_init(&ops[b->n], w->path, w->version);
        memset(&b->res[b->n], 0, sizeof(b->res[b->n]));
        b->res[b->n].err = RESULT_UNSET;
        b->w[b->n++] = w;
    }
    /* The request is serialised now: ops[] and the paths may go; res[]
     * and the result buffers are filled in by the completion. */
    rc = zoo_amulti(zk->zh, b->n, ops, b->res, on_batch_done, b);
    if (rc != ZOK) {
        /* Not sent (the handle is in a bad state): each write fails as a
         * single request would have. */
        log_warn("zk: sending %d writes: %s", b->n, zerror(rc));
        for (int i = 0; i < b->n; i++)
            zwrite_finish(b->w[i], rc);
        free(b);
        return;
    }
    zk->batch->batches_inflight++;
    zk->batch->batches++;
    zk->batch->batched_ops += (uint64_t)b->n;
    histogram_observe(&zk->batch->batch_hist, b->n);
    /* Requests sent now reach the server after this multi. */
    for (int i = 0; i < b->n; i++)
        if (b->w[i]->sent)
            b->w[i]->sent(b->w[i]->arg);
}

/* Sends queued writes while fewer than the window of multis are in flight
 * (connected only): the session's `flush`, after each pass of
 * zookeeper_process() and from the kick; never inside a completion. */
static void batch_flush(void *arg)
{
    struct zk *zk = arg;
    struct zk_batch *zb = zk->batch;
    struct zwrite *w;

    /* Writes sent alone after a failure do not wait for the window. */
    while ((w = TAILQ_FIRST(&zb->wq)) && (w->alone || zb->batches_inflight < BATCH_WINDOW) &&
           zk->zh && zk->state == ZK_CONNECTED)
        batch_send(zk);
}

static void on_batch_done(int rc, const void *data)
{
    struct zbatch *b = (struct zbatch *)data;
    struct zk *zk = b->zk;
    struct zwrite *again[BATCH_OPS];
    int nagain = 0, nfailed = 0;

    zk->batch->batches_inflight--;
    if (rc != ZOK) {
        zk->batch->batch_failures++;
        log_debug("zk: a multi of %d writes failed: %s", b->n, zerror(rc));
    }
    for (int i = 0; i < b->n; i++) {
        int err = b->res[i].err == RESULT_UNSET ? rc : b->res[i].err;

        /* A tied pair fails together: never one of them sent again alone. */
        if (rc != ZOK && b->w[i]->tied && i > 0 &&
            (nagain == 0 || again[nagain - 1] != b->w[i - 1])) {
            zwrite_finish(b->w[i], err == ZOK || err == ZRUNTIMEINCONSISTENCY ?
                          ZRUNTIMEINCONSISTENCY : err);
            continue;
        }
        if (rc != ZOK && i + 1 < b->n && b->w[i + 1]->tied && (err == ZOK ||
            err == ZRUNTIMEINCONSISTENCY)) {
            int next = b->res[i + 1].err == RESULT_UNSET ? rc : b->res[i + 1].err;

            if (next != ZOK && next != ZRUNTIMEINCONSISTENCY) {
                nfailed++;
                zwrite_finish(b->w[i], ZRUNTIMEINCONSISTENCY);
                continue;
            }
        }
        if (rc != ZOK && (err == ZOK || err == ZRUNTIMEINCONSISTENCY)) {
            b->w[i]->alone = err != ZOK;    /* never tried: may fail too */
            again[nagain++] = b->w[i];      /* rolled back, or never tried */
            continue;
        }
        nfailed += err != ZOK;
        zwrite_finish(b->w[i], err);
    }
    /* A failure that names no operation: give it to all of them rather
     * than send the same multi for ever. */
    if (rc != ZOK && nfailed == 0) {
        for (int i = 0; i < nagain; i++)
            zwrite_finish(again[i], rc);
        nagain = 0;
    }
    /* Back to the head of the queue, in their order. */
    for (int i = nagain - 1; i >= 0; i--) {
        TAILQ_INSERT_HEAD(&zk->batch->wq, again[i], link);
        zk->batch->wq_len++;
    }
    zk->batch->batch_resent += (uint64_t)nagain;
    free(b);
    zk_kick(zk);
}

/* The session's `down`: every queued (unsent) write completes with rc, the
 * connection or the handle went away. */
static void batch_fail_queued(void *arg, int rc)
{
    struct zk *zk = arg;
    struct zwrite *w;

    if (rc == ZCLOSING)
        zk->batch->batches_inflight = 0;  /* their completions ran, with ZCLOSING */
    /* A completion may queue more: those fail too. */
    while ((w = TAILQ_FIRST(&zk->batch->wq))) {
        TAILQ_REMOVE(&zk->batch->wq, w, link);
        zk->batch->wq_len--;
        zwrite_finish(w, rc);
    }
}

int zk_batch_init(struct zk *zk)
{
    static const struct zk_listener listener = {
        .flush = batch_flush,
        .down = batch_fail_queued,
    };

    if (!(zk->batch = calloc(1, sizeof(*zk->batch))))
        return -1;
    TAILQ_INIT(&zk->batch->wq);
    return zk_session_listen(zk, &listener, zk);
}

void zk_batch_free(struct zk *zk)
{
    free(zk->batch);
    zk->batch = NULL;
}
