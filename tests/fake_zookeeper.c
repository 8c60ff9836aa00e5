/*
 * fake_zookeeper.c - the ZooKeeper client's calls that take a handle,
 * recording requests for the test to answer (fake_zookeeper.h says how).
 * They stand in for libzookeeper_st's own: the test links this file ahead
 * of the library, whose other symbols (constants, zerror, the multi's op
 * initialisers) it still uses.
 */
#include "fake_zookeeper.h"

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

struct fake_zookeeper fz;

/* The handle the fake hands out: never dereferenced. */
#define FZ_HANDLE ((zhandle_t *)&fz)

void fz_reset(void)
{
    memset(&fz, 0, sizeof(fz));
}

static struct fz_call *record(enum fz_kind kind, const char *path, const void *data)
{
    struct fz_call *c;

    ck_assert_uint_lt(fz.ncalls, FZ_CALLS);
    c = &fz.calls[fz.ncalls++];
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    snprintf(c->path, sizeof(c->path), "%s", path ? path : "");
    c->data = data;
    return c;
}

struct fz_call *fz_next(enum fz_kind kind, const char *path)
{
    for (unsigned i = 0; i < fz.ncalls; i++) {
        struct fz_call *c = &fz.calls[i];

        if (!c->answered && c->kind == kind && (!path || strcmp(c->path, path) == 0))
            return c;
    }
    return NULL;
}

unsigned fz_pending(enum fz_kind kind)
{
    unsigned n = 0;

    for (unsigned i = 0; i < fz.ncalls; i++)
        n += !fz.calls[i].answered && fz.calls[i].kind == kind;
    return n;
}

void fz_connect(int64_t session_id, int timeout_ms)
{
    ck_assert_ptr_nonnull(fz.watcher);
    fz.state = ZOO_CONNECTED_STATE;
    fz.id.client_id = session_id;
    fz.timeout_ms = timeout_ms;
    fz.watcher(FZ_HANDLE, ZOO_SESSION_EVENT, ZOO_CONNECTED_STATE, NULL, fz.context);
}

/* Marks c answered before its completion runs: that may send more. */
static void answering(struct fz_call *c, enum fz_kind kind)
{
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->kind, kind);
    ck_assert(!c->answered);
    c->answered = true;
}

void fz_answer_void(struct fz_call *c, int rc)
{
    answering(c, c->kind);
    ck_assert_int_eq(c->kind, FZ_DELETE);
    c->done.v(rc, c->data);
}

void fz_answer_string(struct fz_call *c, int rc, const char *value)
{
    answering(c, c->kind);
    ck_assert(c->kind == FZ_CREATE || c->kind == FZ_SYNC);
    c->done.string(rc, rc == ZOK ? value : NULL, c->data);
}

void fz_answer_stat(struct fz_call *c, int rc, const struct Stat *stat)
{
    answering(c, c->kind);
    ck_assert(c->kind == FZ_SET || c->kind == FZ_EXISTS);
    c->done.stat(rc, rc == ZOK ? stat : NULL, c->data);
}

void fz_answer_data(struct fz_call *c, int rc, const char *value, const struct Stat *stat)
{
    answering(c, FZ_GET);
    c->done.data(rc, rc == ZOK ? value : NULL, value && rc == ZOK ? (int)strlen(value) : -1,
                 rc == ZOK ? stat : NULL, c->data);
}

void fz_answer_children(struct fz_call *c, int rc, const char *const *names, int n,
                        const struct Stat *stat)
{
    struct String_vector v = { n, (char **)names };

    answering(c, FZ_CHILDREN);
    if (c->with_stat)
        c->done.strings_stat(rc, rc == ZOK ? &v : NULL, rc == ZOK ? stat : NULL, c->data);
    else
        c->done.strings(rc, rc == ZOK ? &v : NULL, c->data);
}

void fz_answer_multi(struct fz_call *c, int rc, const struct fz_result *res)
{
    answering(c, FZ_MULTI);
    for (int i = 0; i < c->nops; i++) {
        struct fz_op *op = &c->ops[i];

        c->results[i].err = res[i].err;
        if (res[i].err != ZOK)
            continue;
        if (op->type == ZOO_CREATE_OP && res[i].created) {
            snprintf(op->buf, (size_t)op->buflen, "%s", res[i].created);
            c->results[i].value = op->buf;
            c->results[i].valuelen = (int)strlen(op->buf);
        } else if (op->type == ZOO_SETDATA_OP) {
            *op->stat = res[i].stat;
            c->results[i].stat = op->stat;
        }
    }
    c->done.v(rc, c->data);
}

void fz_fire(struct fz_call *c, int type)
{
    ck_assert_ptr_nonnull(c->watcher);
    c->watcher(FZ_HANDLE, type, ZOO_CONNECTED_STATE, c->path, c->watcher_ctx);
}

/* ------------------------------------------------------------ the handle */

zhandle_t *zookeeper_init(const char *host, watcher_fn fn, int recv_timeout,
                          const clientid_t *clientid, void *context, int flags)
{
    fz.watcher = fn;
    fz.context = context;
    fz.state = ZOO_CONNECTING_STATE;
    fz.inits++;
    return FZ_HANDLE;
}

/* As the real client: what is still pending completes with ZCLOSING. */
int zookeeper_close(zhandle_t *zh)
{
    fz.closes++;
    fz.state = 0;
    for (unsigned i = 0; i < fz.ncalls; i++) {
        struct fz_call *c = &fz.calls[i];

        if (c->answered)
            continue;
        switch (c->kind) {
        case FZ_CREATE:
        case FZ_SYNC:
            fz_answer_string(c, ZCLOSING, NULL);
            break;
        case FZ_DELETE:
            fz_answer_void(c, ZCLOSING);
            break;
        case FZ_SET:
        case FZ_EXISTS:
            fz_answer_stat(c, ZCLOSING, NULL);
            break;
        case FZ_GET:
            fz_answer_data(c, ZCLOSING, NULL, NULL);
            break;
        case FZ_CHILDREN:
            fz_answer_children(c, ZCLOSING, NULL, 0, NULL);
            break;
        case FZ_MULTI:
            /* Results left unset: the multi failed as a whole. */
            c->answered = true;
            c->done.v(ZCLOSING, c->data);
            break;
        }
    }
    return ZOK;
}

/* No socket: only the timer, far enough not to fire during a test. */
int zookeeper_interest(zhandle_t *zh, int *fd, int *interest, struct timeval *tv)
{
    *fd = -1;
    *interest = 0;
    tv->tv_sec = 60;
    tv->tv_usec = 0;
    return ZOK;
}

int zookeeper_process(zhandle_t *zh, int events)
{
    return ZOK;
}

int zoo_state(zhandle_t *zh)
{
    return fz.state;
}

const clientid_t *zoo_client_id(zhandle_t *zh)
{
    return &fz.id;
}

int zoo_recv_timeout(zhandle_t *zh)
{
    return fz.timeout_ms;
}

int zoo_set_servers_resolution_delay(zhandle_t *zh, int delay_ms)
{
    return ZOK;
}

int zoo_add_auth(zhandle_t *zh, const char *scheme, const char *cert, int certLen,
                 void_completion_t completion, const void *data)
{
    return ZOK;
}

/* ------------------------------------------------------------- requests */

int zoo_acreate(zhandle_t *zh, const char *path, const char *value, int valuelen,
                const struct ACL_vector *acl, int mode, string_completion_t completion,
                const void *data)
{
    struct fz_call *c = record(FZ_CREATE, path, data);

    c->flags = mode;
    c->done.string = completion;
    return ZOK;
}

int zoo_adelete(zhandle_t *zh, const char *path, int version, void_completion_t completion,
                const void *data)
{
    record(FZ_DELETE, path, data)->done.v = completion;
    return ZOK;
}

int zoo_aset(zhandle_t *zh, const char *path, const char *buffer, int buflen, int version,
             stat_completion_t completion, const void *data)
{
    record(FZ_SET, path, data)->done.stat = completion;
    return ZOK;
}

int zoo_awexists(zhandle_t *zh, const char *path, watcher_fn watcher, void *watcherCtx,
                 stat_completion_t completion, const void *data)
{
    struct fz_call *c = record(FZ_EXISTS, path, data);

    c->watcher = watcher;
    c->watcher_ctx = watcherCtx;
    c->done.stat = completion;
    return ZOK;
}

int zoo_aexists(zhandle_t *zh, const char *path, int watch, stat_completion_t completion,
                const void *data)
{
    return zoo_awexists(zh, path, NULL, NULL, completion, data);
}

int zoo_awget(zhandle_t *zh, const char *path, watcher_fn watcher, void *watcherCtx,
              data_completion_t completion, const void *data)
{
    struct fz_call *c = record(FZ_GET, path, data);

    c->watcher = watcher;
    c->watcher_ctx = watcherCtx;
    c->done.data = completion;
    return ZOK;
}

int zoo_aget(zhandle_t *zh, const char *path, int watch, data_completion_t completion,
             const void *data)
{
    return zoo_awget(zh, path, NULL, NULL, completion, data);
}

int zoo_awget_children(zhandle_t *zh, const char *path, watcher_fn watcher, void *watcherCtx,
                       strings_completion_t completion, const void *data)
{
    struct fz_call *c = record(FZ_CHILDREN, path, data);

    c->watcher = watcher;
    c->watcher_ctx = watcherCtx;
    c->done.strings = completion;
    return ZOK;
}

int zoo_aget_children(zhandle_t *zh, const char *path, int watch,
                      strings_completion_t completion, const void *data)
{
    return zoo_awget_children(zh, path, NULL, NULL, completion, data);
}

int zoo_awget_children2(zhandle_t *zh, const char *path, watcher_fn watcher, void *watcherCtx,
                        strings_stat_completion_t completion, const void *data)
{
    struct fz_call *c = record(FZ_CHILDREN, path, data);

    c->with_stat = true;
    c->watcher = watcher;
    c->watcher_ctx = watcherCtx;
    c->done.strings_stat = completion;
    return ZOK;
}

int zoo_aget_children2(zhandle_t *zh, const char *path, int watch,
                       strings_stat_completion_t completion, const void *data)
{
    return zoo_awget_children2(zh, path, NULL, NULL, completion, data);
}

int zoo_async(zhandle_t *zh, const char *path, string_completion_t completion, const void *data)
{
    record(FZ_SYNC, path, data)->done.string = completion;
    return ZOK;
}

int zoo_amulti(zhandle_t *zh, int count, const zoo_op_t *ops, zoo_op_result_t *results,
               void_completion_t completion, const void *data)
{
    struct fz_call *c;

    ck_assert_int_gt(count, 0);
    ck_assert_int_le(count, FZ_OPS);
    c = record(FZ_MULTI, NULL, data);
    c->done.v = completion;
    c->results = results;
    c->nops = count;
    for (int i = 0; i < count; i++) {
        struct fz_op *op = &c->ops[i];
        const char *path;

        op->type = ops[i].type;
        if (op->type == ZOO_CREATE_OP) {
            path = ops[i].create_op.path;
            op->flags = ops[i].create_op.flags;
            op->buf = ops[i].create_op.buf;
            op->buflen = ops[i].create_op.buflen;
        } else if (op->type == ZOO_SETDATA_OP) {
            path = ops[i].set_op.path;
            op->stat = ops[i].set_op.stat;
        } else {
            path = ops[i].delete_op.path;
        }
        snprintf(op->path, sizeof(op->path), "%s", path);
    }
    snprintf(c->path, sizeof(c->path), "%s", c->ops[0].path);
    return ZOK;
}
