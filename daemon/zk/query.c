/*
 * query.c - distributed mode: what ZooKeeper says about one lock name
 * across all daemons, for STATUS. Read-only: a getChildren of the name's
 * parent, then a getData of its first node.
 */
#include "config.h"
#include "recipes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- STATUS queries */

struct backend_query {
    struct zk *zk;
    backend_query_cb cb;       /* NULL once cancelled */
    void *arg;
    struct backend_queue_info info;
    char parent[512];
};

static void query_finish(struct backend_query *q, bool ok)
{
    q->zk->outstanding--;
    q->info.ok = ok;
    if (q->cb)
        q->cb(q->arg, &q->info);
    free(q);
}

static void on_query_data(int rc, const char *value, int len, const struct Stat *stat,
                          const void *data)
{
    struct backend_query *q = (struct backend_query *)data;
    char buf[512], daemon[128] = "-", client[128] = "-";
    const char *label, *deadline;

    if (rc == ZOK && value && len > 0) {
        /* "daemon=<id> client=<addr>[ label=<label>]...", as zl_format_data writes it */
        snprintf(buf, sizeof(buf), "%.*s", len, value);
        sscanf(buf, "daemon=%127s client=%127s", daemon, client);
        if (q->info.mode == LOCK_EXCLUSIVE && strcmp(client, "-") == 0) {
            /* Nobody holds it: a released lock's node, kept idle or about
             * to be deleted (handoff.c); the next in line gets it then. */
            q->info.holders = 0;
            q->info.queue--;
            query_finish(q, true);
            return;
        }
        if ((label = strstr(buf, " label=")))
            sscanf(label, " label=%127s", q->info.label);
        if ((deadline = strstr(buf, " deadline="))) {     /* a lease (lease_lock.c) */
            long long d = strtoll(deadline + 10, NULL, 10);

            q->info.lease_ms = d > zk_now_ms() ? d - zk_now_ms() : 0;
        }
        snprintf(q->info.holder, sizeof(q->info.holder), "%s/%s", daemon, client);
        q->info.since_ms = stat->ctime;
    }
    /* ZNONODE: the holder left between the two reads; report what we saw. */
    query_finish(q, rc == ZOK || rc == ZNONODE);
}

/*
 * How many nodes hold the name, by the rules of fair.c: the first node
 * decides the mode; exclusive - the first; shared - the shared nodes before
 * the first that is not; limit=n - the first n of its class. *mode and
 * *limit are the first node's.
 */
static unsigned holders_of(const struct String_vector *children, const char *first,
                           enum lock_mode *mode, unsigned *limit)
{
    struct zkind k = zk_kind_of(first);
    long long bound = -1;      /* shared: the first non-shared node's sequence */
    unsigned n = 0;

    *mode = k.mode;
    *limit = k.limit;
    if (k.mode == LOCK_EXCLUSIVE)
        return 1;
    for (int i = 0; i < children->count; i++) {
        long long seq = zk_seq_of(children->data[i]);
        if (k.mode == LOCK_SHARED && zk_kind_of(children->data[i]).mode != LOCK_SHARED &&
            (bound < 0 || seq < bound))
            bound = seq;
    }
    for (int i = 0; i < children->count; i++) {
        struct zkind c = zk_kind_of(children->data[i]);
        if (k.mode == LOCK_SHARED)
            n += bound < 0 || zk_seq_of(children->data[i]) < bound;
        else
            n += zk_same_class(c, k);
    }
    return k.mode == LOCK_LIMIT && n > k.limit ? k.limit : n;
}

static void on_query_children(int rc, const struct String_vector *children, const void *data)
{
    struct backend_query *q = (struct backend_query *)data;
    const char *first = NULL;
    char path[768];

    if (rc == ZNONODE || (rc == ZOK && children->count == 0)) {
        query_finish(q, true);
        return;
    }
    if (rc != ZOK || !q->cb) {
        query_finish(q, rc == ZOK);
        return;
    }
    q->info.queue = (unsigned)children->count;
    /* The first holder: a lease node wherever it sits (fair.c), else the first node. */
    for (int pass = 0; pass < 2 && !first; pass++)
        for (int i = 0; i < children->count; i++)
            if ((pass == 1 || zk_kind_of(children->data[i]).lease) &&
                (!first || zk_seq_of(children->data[i]) < zk_seq_of(first)))
                first = children->data[i];
    q->info.holders = holders_of(children, first, &q->info.mode, &q->info.limit);
    snprintf(path, sizeof(path), "%s/%s", q->parent, first);
    /* The request's count carries over to the getData. */
    if (zoo_aget(q->zk->zh, path, 0, on_query_data, q) != ZOK)
        query_finish(q, false);
}

struct backend_query *zk_query(void *impl, const char *name,
                                      struct backend_queue_info *now, backend_query_cb cb,
                                      void *arg)
{
    static const struct backend_queue_info unavailable = {
        .ok = false, .global = true, .holder = "-", .since_ms = -1, .lease_ms = -1
    };
    struct zk *zk = impl;
    struct backend_query *q;

    *now = unavailable;
    if (!zk_serving(zk) || !(q = calloc(1, sizeof(*q))))
        return NULL;
    q->zk = zk;
    q->cb = cb;
    q->arg = arg;
    q->info = unavailable;
    snprintf(q->parent, sizeof(q->parent), "%s/locks/%s", zk->root, name);
    if (zoo_aget_children(zk->zh, q->parent, 0, on_query_children, q) != ZOK) {
        free(q);
        return NULL;
    }
    zk->outstanding++;
    zk_kick(zk);
    return q;
}

void zk_query_cancel(void *impl, struct backend_query *q)
{
    q->cb = NULL;   /* freed by its completion */
}
