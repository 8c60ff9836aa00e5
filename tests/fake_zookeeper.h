/*
 * fake_zookeeper.h - a ZooKeeper client that talks to no server, for
 * tests/check_zk.c. tests/fake_zookeeper.c defines every zoo_* call of
 * daemon/zk/ that takes a handle: a request is recorded (struct fz_call)
 * and answered when the test says so (fz_answer_*), the way the real
 * client runs a completion when the server's reply comes; a watch set
 * with a request fires when the test fires it. Only the library's
 * constants and helpers that need no handle (zerror, zoo_create_op_init,
 * ...) come from libzookeeper_st.
 *
 * One fake per process: its state is the global fz, which fz_reset()
 * clears. Everything runs on the test's thread.
 */
#ifndef LOCKBROKER_FAKE_ZOOKEEPER_H
#define LOCKBROKER_FAKE_ZOOKEEPER_H

#include <stdbool.h>
#include <stdint.h>
#include <zookeeper/zookeeper.h>

#define FZ_PATH 512
#define FZ_OPS 8                /* operations of one multi */
#define FZ_CALLS 256            /* requests of one test */

enum fz_kind {
    FZ_CREATE,                  /* zoo_acreate: fz_answer_string */
    FZ_DELETE,                  /* zoo_adelete: fz_answer_void */
    FZ_SET,                     /* zoo_aset: fz_answer_stat */
    FZ_EXISTS,                  /* zoo_a(w)exists: fz_answer_stat */
    FZ_GET,                     /* zoo_a(w)get: fz_answer_data */
    FZ_CHILDREN,                /* zoo_a(w)get_children(2): fz_answer_children */
    FZ_SYNC,                    /* zoo_async: fz_answer_string */
    FZ_MULTI,                   /* zoo_amulti: fz_answer_multi */
};

/* One operation of a multi, as sent: buf and stat are the caller's, where
 * the reply goes (they live until the completion). */
struct fz_op {
    int type;                   /* ZOO_CREATE_OP, ZOO_DELETE_OP, ZOO_SETDATA_OP */
    char path[FZ_PATH];
    int flags;                  /* create */
    char *buf;                  /* create: the created node's path goes here */
    int buflen;
    struct Stat *stat;          /* setData: the node's Stat goes here */
};

/* One request. Its strings are copies; done and data are the caller's. */
struct fz_call {
    enum fz_kind kind;
    char path[FZ_PATH];         /* a multi: its first operation's */
    int flags;                  /* create: ZOO_EPHEMERAL, ... */
    bool with_stat;             /* children: the getChildren2 form */
    watcher_fn watcher;         /* a watch set with the request, or NULL */
    void *watcher_ctx;
    union {
        string_completion_t string;
        void_completion_t v;
        stat_completion_t stat;
        data_completion_t data;
        strings_completion_t strings;
        strings_stat_completion_t strings_stat;
    } done;
    const void *data;
    int nops;                   /* a multi's */
    struct fz_op ops[FZ_OPS];
    zoo_op_result_t *results;   /* the caller's, nops of them */
    bool answered;              /* its completion ran */
};

/* A reply to one operation of a multi. */
struct fz_result {
    int err;
    const char *created;        /* create, ZOK: the node's path */
    struct Stat stat;           /* setData, ZOK */
};

struct fake_zookeeper {
    watcher_fn watcher;         /* zookeeper_init's global watcher, and its context */
    void *context;
    unsigned inits, closes;
    int state;                  /* what zoo_state() says */
    clientid_t id;              /* what zoo_client_id() says */
    int timeout_ms;             /* what zoo_recv_timeout() says */
    struct fz_call calls[FZ_CALLS];
    unsigned ncalls;
};

extern struct fake_zookeeper fz;

void fz_reset(void);
/* The oldest request of kind not answered yet whose path is path (any
 * path: NULL), or NULL. */
struct fz_call *fz_next(enum fz_kind kind, const char *path);
/* How many requests of kind wait for an answer. */
unsigned fz_pending(enum fz_kind kind);
/* The handle connects with session id (zoo_client_id) and a negotiated
 * timeout: the global watcher hears ZOO_CONNECTED_STATE. */
void fz_connect(int64_t session_id, int timeout_ms);

/* Answers c: its completion runs now, with rc. */
void fz_answer_void(struct fz_call *c, int rc);
void fz_answer_string(struct fz_call *c, int rc, const char *value);
void fz_answer_stat(struct fz_call *c, int rc, const struct Stat *stat);
void fz_answer_data(struct fz_call *c, int rc, const char *value, const struct Stat *stat);
/* names: n children (count n, strings borrowed for the call). */
void fz_answer_children(struct fz_call *c, int rc, const char *const *names, int n,
                        const struct Stat *stat);
/* res: one per operation of the multi (c->nops). */
void fz_answer_multi(struct fz_call *c, int rc, const struct fz_result *res);
/* The watch set with c fires: an event of type (ZOO_DELETED_EVENT, ...). */
void fz_fire(struct fz_call *c, int type);

#endif
