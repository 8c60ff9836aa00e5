/*
 * zk_query.c - distributed mode: what ZooKeeper says about lock names
 * across all daemons. Read-only. STATUS: a getChildren of the name's
 * parent, then a getData of its first node. HOLDERS: a getChildren of
 * <root>/locks, one of each matching name's parent, a getData of each node.
 */
#include "config.h"
#include "zk_recipes.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztoken.h"

/* ------------------------------------------------------- STATUS queries */

struct backend_query {
    struct zk *zk;
    backend_query_cb cb;       /* NULL once cancelled */
    void *arg;
    struct backend_queue_info info;
    bool nonfair;              /* the name is non-fair: one fixed node */
    bool parked;               /* in zk->queries, nothing sent yet */
    TAILQ_ENTRY(backend_query) in_parked;
    char parent[512];
    char first[256];           /* the node whose data is read (its name) */
};

static void query_finish(struct backend_query *q, bool ok)
{
    q->zk->outstanding--;
    q->info.ok = ok;
    if (q->cb)
        q->cb(q->arg, &q->info);
    free(q);
}

/* What a lock node's data says: "daemon=<id> client=<addr>[ label=<label>]
 * [ token=<token>][ deadline=<ms>]...", as zl_format_data (zk_node.c) writes
 * it. Fields are words without spaces: a label has none. */
struct node_data {
    bool ours;                 /* written by a daemon ("daemon=..."): the rest is read */
    char daemon[128], client[128], label[128];
    int64_t lease_ms;          /* a lease's time left by this daemon's clock, or -1 */
    uint64_t token;            /* its holder's fencing token, 0: not written (yet) */
};

/* At most this many bytes of a foreign node's data name its holder. */
#define FOREIGN_DATA_MAX 64

/*
 * "foreign/<what its data says>" for a node no daemon wrote (a ZooKeeper
 * recipe's: Curator writes the client's address, kazoo the identifier it
 * was given): printable ASCII but space (0x21-0x7e) as it is, any other
 * byte as '?', at most FOREIGN_DATA_MAX bytes; without data, the node's
 * name (child, when known) likewise.
 */
static void foreign_holder(const char *child, const char *value, int len, char *out,
                           size_t size)
{
    size_t n = 0;
    const char *from = value;

    if (!value || len <= 0) {
        from = child ? child : "-";
        len = (int)strlen(from);
    }
    n = (size_t)snprintf(out, size, "foreign/");
    for (int i = 0; i < len && i < FOREIGN_DATA_MAX && n + 1 < size; i++) {
        unsigned char c = (unsigned char)from[i];

        out[n++] = c >= 0x21 && c <= 0x7e ? (char)c : '?';
    }
    out[n] = '\0';
}

static void parse_node_data(const char *value, int len, const struct Stat *stat,
                            struct node_data *d)
{
    char buf[512];
    const char *label, *token, *deadline;

    snprintf(d->daemon, sizeof(d->daemon), "-");
    snprintf(d->client, sizeof(d->client), "-");
    d->label[0] = '\0';
    d->lease_ms = -1;
    d->token = 0;
    d->ours = value && len > 7 && memcmp(value, "daemon=", 7) == 0;
    if (!d->ours)
        return;
    snprintf(buf, sizeof(buf), "%.*s", len, value);
    sscanf(buf, "daemon=%127s client=%127s", d->daemon, d->client);
    if ((label = strstr(buf, " label=")))
        sscanf(label, " label=%127s", d->label);
    /* Written by the holding daemon after the grant; "mzxid": this data's
     * own write made it (a non-fair node, zk_nonfair.c). */
    if ((token = strstr(buf, " token=")) && strncmp(token + 7, "mzxid", 5) == 0)
        ztoken_of_zxid(stat->mzxid, &d->token);
    else if (token)
        d->token = strtoull(token + 7, NULL, 10);
    if ((deadline = strstr(buf, " deadline="))) {     /* a lease (zk_lease_lock.c) */
        long long t = strtoll(deadline + 10, NULL, 10);

        d->lease_ms = t > zk_now_ms() ? t - zk_now_ms() : 0;
        /* Its token is its node's czxid's, as zk_lease_lock.c granted it. */
        if (!token)
            ztoken_of_zxid(stat->czxid, &d->token);
    }
}

/* The first holder among a name's nodes in the order: a lease node
 * wherever it sits (zk_lease_lock.c), else the first node with a
 * sequence; NULL when there is none. */
static const char *first_holder(const struct String_vector *children)
{
    const char *first = NULL;

    for (int pass = 0; pass < 2 && !first; pass++)
        for (int i = 0; i < children->count; i++) {
            struct zkind k = zk_kind_of(children->data[i]);

            if (!k.unordered && (pass == 1 || k.lease) &&
                (!first || zk_seq_of(children->data[i]) < zk_seq_of(first)))
                first = children->data[i];
        }
    return first;
}

/*
 * Which nodes hold the name, by the rules of zk_fair.c (zk_view.c): the
 * first holder in the order (first_holder, NULL when none) decides the
 * mode; exclusive - it alone; shared - the shared nodes before the first
 * that is not; limit=n - the first n of its class; and in all, a lease
 * node of the class wherever it sits. A node without a sequence holds
 * outside the order (a kazoo Semaphore's lease): it holds, and beside it
 * only lease nodes and a semaphore's holders, counting it in the limit. Sets
 * held[i] for children->data[i] (held may be NULL) and returns how many
 * hold; *mode and *limit are the first holder's; *shown the node whose
 * holder STATUS names: the first holder if it holds, else the first
 * unordered node by name.
 */
static unsigned mark_holders(const struct String_vector *children, const char *first,
                             enum lock_mode *mode, unsigned *limit, bool *held,
                             const char **shown)
{
    static const struct zkind none = { LOCK_EXCLUSIVE, 0, false, 0, false, false };
    struct zkind k = first ? zk_kind_of(first) : none;
    long long bound = -1;      /* shared: the first non-shared node's sequence */
    unsigned n = 0, unordered = 0;
    const char *first_unordered = NULL;

    *mode = k.mode;
    *limit = k.limit;
    *shown = first;
    for (int i = 0; i < children->count; i++) {
        long long seq = zk_seq_of(children->data[i]);
        struct zkind ck = zk_kind_of(children->data[i]);

        if (ck.unordered) {
            unordered++;
            if (!first_unordered || strcmp(children->data[i], first_unordered) < 0)
                first_unordered = children->data[i];
        } else if (k.mode == LOCK_SHARED && ck.mode != LOCK_SHARED &&
                   (bound < 0 || seq < bound)) {
            bound = seq;
        }
    }
    for (int i = 0; i < children->count; i++) {
        const char *child = children->data[i];
        bool h;

        struct zkind ck = zk_kind_of(child);

        /* A lease node of the class holds wherever it sits (zk_view.c):
         * behind a writer, past the limit's count. */
        if (ck.unordered) {
            h = true;
        } else if (k.mode == LOCK_EXCLUSIVE) {
            h = child == first && (unordered == 0 || ck.lease);
        } else if (k.mode == LOCK_SHARED) {
            h = (unordered == 0 && (bound < 0 || zk_seq_of(child) < bound)) ||
                (ck.lease && ck.mode == LOCK_SHARED);
        } else {
            /* As zk_view_may_hold: fewer than n nodes before it, lease nodes
             * after it and unordered ones. */
            unsigned ahead = unordered;

            h = zk_same_class(ck, k);
            for (int j = 0; h && !ck.lease && j < children->count; j++) {
                struct zkind o = zk_kind_of(children->data[j]);
                long long d = zk_seq_of(children->data[j]) - zk_seq_of(child);

                ahead += !o.unordered && zk_same_class(o, k) && (d < 0 || (d > 0 && o.lease));
            }
            h = h && (ck.lease || ahead < k.limit);
        }
        if (held)
            held[i] = h;
        if (child == first && !h && first_unordered)
            *shown = first_unordered;
        n += h;
    }
    if (!first)
        *shown = first_unordered;
    return n;
}

void zk_queue_info(const struct String_vector *children, struct backend_queue_info *info,
                   const char **first)
{
    *first = NULL;
    info->ok = true;
    info->queue = 0;
    info->holders = 0;
    if (!children || children->count == 0)
        return;
    info->queue = (unsigned)children->count;
    info->holders = mark_holders(children, first_holder(children), &info->mode, &info->limit,
                                 NULL, first);
}

void zk_queue_holder(const char *child, const char *value, int len, const struct Stat *stat,
                     struct backend_queue_info *info)
{
    struct node_data d;

    if ((!value || len <= 0) && !child)
        return;
    parse_node_data(value, len, stat, &d);
    if (!d.ours) {
        /* A recipe's node (or anyone's): held by "foreign/<its data>",
         * with no token or label we could know. */
        foreign_holder(child, value, len, info->holder, sizeof(info->holder));
        info->label[0] = '\0';
        info->token = 0;
        info->lease_ms = -1;
        info->since_ms = stat->ctime;
        return;
    }
    if (info->mode == LOCK_EXCLUSIVE && strcmp(d.client, "-") == 0) {
        /* Nobody holds it: a released lock's node, kept idle or about
         * to be deleted (zk_handoff.c); the next in line gets it then. */
        info->holders = 0;
        info->queue--;
        return;
    }
    snprintf(info->label, sizeof(info->label), "%s", d.label);
    info->token = d.token;
    info->lease_ms = d.lease_ms;
    snprintf(info->holder, sizeof(info->holder), "%s/%s", d.daemon, d.client);
    info->since_ms = stat->ctime;
}

static void on_query_data(int rc, const char *value, int len, const struct Stat *stat,
                          const void *data)
{
    struct backend_query *q = (struct backend_query *)data;

    if (rc == ZOK)
        zk_queue_holder(q->first, value, len, stat, &q->info);
    /* ZNONODE: the holder left between the two reads; report what we saw. */
    query_finish(q, rc == ZOK || rc == ZNONODE);
}

/* A non-fair name's node: it holds the name while it exists. */
static void on_nonfair_data(int rc, const char *value, int len, const struct Stat *stat,
                            const void *data)
{
    struct backend_query *q = (struct backend_query *)data;

    if (rc == ZOK) {
        q->info.queue = q->info.holders = 1;
        zk_queue_holder(NULL, value, len, stat, &q->info);
    }
    query_finish(q, rc == ZOK || rc == ZNONODE);
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
    zk_queue_info(children, &q->info, &first);
    snprintf(q->first, sizeof(q->first), "%s", first);
    snprintf(path, sizeof(path), "%s/%s", q->parent, first);
    /* The request's count carries over to the getData. */
    if (zoo_aget(q->zk->zh, path, 0, on_query_data, q) != ZOK)
        query_finish(q, false);
}

/* Sends q's first read; false when it could not go. */
static bool query_send(struct backend_query *q)
{
    struct zk *zk = q->zk;
    int rc = q->nonfair ? zoo_aget(zk->zh, q->parent, 0, on_nonfair_data, q)
                        : zoo_aget_children(zk->zh, q->parent, 0, on_query_children, q);

    if (rc != ZOK)
        return false;
    zk->outstanding++;
    zk_kick(zk);
    return true;
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
    if ((!zk_reachable(zk) && !zk->attaching) || !(q = calloc(1, sizeof(*q))))
        return NULL;
    q->zk = zk;
    q->cb = cb;
    q->arg = arg;
    q->info = unavailable;
    q->nonfair = settings_globs_match(zk->settings->zk_nonfair, name);
    /* zk_nonfair.c: one fixed node, held while it exists */
    snprintf(q->parent, sizeof(q->parent), "%s/%s/%s", zk->root,
             q->nonfair ? "nonfair" : "locks", name);
    zk_interop_parent(zk, name, q->parent, sizeof(q->parent));
    if (q->nonfair)
        q->info.mode = LOCK_EXCLUSIVE;
    if (!zk_reachable(zk)) {     /* attaching: sent once attached (queries_serving) */
        q->parked = true;
        TAILQ_INSERT_TAIL(&zk->queries->queries, q, in_parked);
        return q;
    }
    if (!query_send(q)) {
        free(q);
        return NULL;
    }
    return q;
}

void zk_query_cancel(void *impl, struct backend_query *q)
{
    struct zk *zk = impl;

    if (q->parked) {         /* nothing in flight: freed now */
        TAILQ_REMOVE(&zk->queries->queries, q, in_parked);
        free(q);
        return;
    }
    q->cb = NULL;   /* freed by its completion */
}

/* ------------------------------------------------------------- HOLDERS */

/* Names whose nodes are listed at once; ZooKeeper answers one session's
 * requests in order, so more in flight would only cost memory. */
#define LIST_WINDOW 32

struct list_row {
    size_t name;               /* index in names */
    bool held;
    bool skip;                 /* an idle node (nobody holds it), or gone before its read */
    struct zkind kind;         /* what its request asked for */
    int64_t since_ms;          /* the node's creation, wall-clock ms */
    int64_t lease_ms;
    uint64_t token;            /* as its node says; 0: not written (yet) */
    char holder[256];
    char label[128];
};

struct backend_list {
    struct zk *zk;
    backend_list_cb cb;        /* NULL once cancelled */
    void *arg;
    bool parked;               /* in zk->queries, nothing sent yet */
    TAILQ_ENTRY(backend_list) in_parked;
    backend_name_filter may;
    char glob[256];
    char **names;              /* the matching names (fair ones sorted, then the
                                * non-fair ones); owned */
    size_t nnames, next;       /* next: the first whose nodes are not asked for yet */
    bool nonfair_asked;        /* <root>/nonfair is being (or was) listed too */
    unsigned inflight;         /* ZooKeeper requests sent and not answered */
    struct list_row *rows;     /* in name order, then queue order; owned */
    size_t nrows, cap, more;
    bool failed;
};

/* Context of one request: the listing and a name's or a row's index. */
struct list_call {
    struct backend_list *l;
    size_t index;
};

static void list_free(struct backend_list *l)
{
    for (size_t i = 0; i < l->nnames; i++)
        free(l->names[i]);
    free(l->names);
    free(l->rows);
    free(l);
}

static bool list_ask_nonfair(struct backend_list *l);

/* qsort() has no context argument: the listing whose rows are sorted. */
static const struct backend_list *sort_list;

/* By name, then in the order they were listed (a name's queue order). */
static int by_row_name(const void *a, const void *b)
{
    const struct list_row *x = *(const struct list_row *const *)a;
    const struct list_row *y = *(const struct list_row *const *)b;
    int c = strcmp(sort_list->names[x->name], sort_list->names[y->name]);

    return c ? c : (x > y) - (x < y);
}

/* Answers, once nothing is in flight and nothing more is to be asked:
 * the fair names' nodes, then the non-fair ones (zk_nonfair.c), merged. */
static void list_maybe_finish(struct backend_list *l)
{
    struct backend_holder *out;
    const struct list_row **order;
    size_t n = 0;

    if (l->inflight > 0 || (l->cb && !l->failed && l->next < l->nnames))
        return;
    if (l->cb && !l->failed && !l->nonfair_asked && list_ask_nonfair(l))
        return;
    order = calloc(l->nrows + 1, sizeof(*order));
    if (l->cb && !l->failed && order && (out = calloc(l->nrows + 1, sizeof(*out)))) {
        for (size_t i = 0; i < l->nrows; i++)
            order[i] = &l->rows[i];
        sort_list = l;
        qsort(order, l->nrows, sizeof(*order), by_row_name);
        for (size_t i = 0; i < l->nrows; i++) {
            const struct list_row *r = order[i];

            if (r->skip)
                continue;
            out[n++] = (struct backend_holder){
                .name = l->names[r->name], .mode = r->kind.mode, .limit = r->kind.limit,
                .held = r->held, .holder = r->holder, .label = r->label,
                .token = r->held ? r->token : 0, .since_ms = r->since_ms,
                .lease_ms = r->lease_ms,
            };
        }
        l->cb(l->arg, true, out, n, l->more);
        free(out);
    } else if (l->cb) {
        l->cb(l->arg, false, NULL, 0, 0);
    }
    free(order);
    list_free(l);
}

/* Sends one request with a list_call context; false when it could not go. */
static bool list_send(struct backend_list *l, size_t index, const char *path, bool data);

/* A list request was answered: frees its context; returns its listing and
 * (index, unless NULL) the row or name it was for. */
static struct backend_list *list_call_done(const void *data, size_t *index)
{
    struct list_call *call = (struct list_call *)data;
    struct backend_list *l = call->l;

    if (index)
        *index = call->index;
    free(call);
    l->inflight--;
    l->zk->outstanding--;
    return l;
}

/* list_call_done() for a listing: one that found no node (ZNONODE) lists
 * nothing; any other error fails the whole listing. */
static struct backend_list *list_listing_done(const void *data, int rc, size_t *index)
{
    struct backend_list *l = list_call_done(data, index);

    if (rc != ZOK && rc != ZNONODE)
        l->failed = true;
    return l;
}

static void on_list_data(int rc, const char *value, int len, const struct Stat *stat,
                         const void *data)
{
    size_t row;
    struct backend_list *l = list_call_done(data, &row);
    struct list_row *r = &l->rows[row];
    struct node_data d;

    if (rc == ZOK) {
        parse_node_data(value, len, stat, &d);
        /* A released exclusive lock's node, kept idle (zk_handoff.c): nobody's. */
        r->skip = d.ours && r->kind.mode == LOCK_EXCLUSIVE && strcmp(d.client, "-") == 0;
        /* Not ours: its row keeps "foreign/<name>" (list_add_row) unless
         * its data says more. */
        if (!d.ours && value && len > 0)
            foreign_holder(NULL, value, len, r->holder, sizeof(r->holder));
        else if (d.ours)
            snprintf(r->holder, sizeof(r->holder), "%s/%s", d.daemon, d.client);
        snprintf(r->label, sizeof(r->label), "%s", d.label);
        r->lease_ms = d.lease_ms;
        r->token = d.token;
        r->since_ms = stat->ctime;
    } else if (rc == ZNONODE) {
        r->skip = true;           /* it left between the two reads */
    } else {
        l->failed = true;
    }
    list_maybe_finish(l);
}

static int by_string(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* qsort() has no context argument: the vector being sorted, by by_seq. */
static const struct String_vector *sort_children;

static int by_seq(const void *a, const void *b)
{
    long long x = zk_seq_of(sort_children->data[*(const int *)a]);
    long long y = zk_seq_of(sort_children->data[*(const int *)b]);

    return x < y ? -1 : x > y;
}

/* Asks for the nodes of the next names, up to LIST_WINDOW in flight. */
static void list_pump(struct backend_list *l)
{
    char path[768];

    while (l->cb && !l->failed && l->next < l->nnames && l->inflight < LIST_WINDOW) {
        snprintf(path, sizeof(path), "%s/locks/%s", l->zk->root, l->names[l->next]);
        if (!list_send(l, l->next, path, false))
            l->failed = true;
        l->next++;
    }
}

/* A row for the node at path, and the read of its data (on_list_data
 * fills in the rest); past HOLDERS_LINES_MAX only counted. */
static void list_add_row(struct backend_list *l, size_t name, bool held, struct zkind kind,
                         const char *path)
{
    if (l->nrows == HOLDERS_LINES_MAX) {
        l->more++;
        return;
    }
    if (l->nrows == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        struct list_row *rows = realloc(l->rows, cap * sizeof(*rows));

        if (!rows) {
            l->failed = true;
            return;
        }
        l->rows = rows;
        l->cap = cap;
    }
    l->rows[l->nrows] = (struct list_row){ .name = name, .held = held, .kind = kind,
                                           .lease_ms = -1, .since_ms = -1 };
    foreign_holder(strrchr(path, '/') + 1, NULL, 0, l->rows[l->nrows].holder,
                   sizeof(l->rows[l->nrows].holder));
    if (!list_send(l, l->nrows, path, true))
        l->failed = true;
    l->nrows++;
}

/* Adds the children that match the glob and the user's names to l->names.
 * Returns the index of the first one added. */
static size_t list_take_names(struct backend_list *l, const struct String_vector *children)
{
    size_t first = l->nnames;
    char **names;

    if (children->count == 0)
        return first;
    if (!(names = realloc(l->names, (l->nnames + (size_t)children->count) * sizeof(*names)))) {
        l->failed = true;
        return first;
    }
    l->names = names;
    for (int i = 0; i < children->count && !l->failed; i++) {
        const char *name = children->data[i];

        if (fnmatch(l->glob, name, 0) != 0 || !l->may(l->arg, name))
            continue;
        if (!(l->names[l->nnames] = strdup(name)))
            l->failed = true;
        else
            l->nnames++;
    }
    return first;
}

/* One name's nodes: a row each, in queue order, then a read of each. */
static void on_list_nodes(int rc, const struct String_vector *children, const void *data)
{
    size_t name;
    struct backend_list *l = list_listing_done(data, rc, &name);
    char path[1024];
    bool *held = NULL;
    int *order = NULL;

    if (rc == ZOK && children->count > 0 && l->cb && !l->failed) {
        enum lock_mode mode;
        unsigned limit;
        const char *shown;

        held = calloc((size_t)children->count, sizeof(*held));
        order = calloc((size_t)children->count, sizeof(*order));
        if (!held || !order) {
            l->failed = true;
            goto out;
        }
        mark_holders(children, first_holder(children), &mode, &limit, held, &shown);
        for (int i = 0; i < children->count; i++)
            order[i] = i;
        sort_children = children;
        qsort(order, (size_t)children->count, sizeof(*order), by_seq);
        for (int k = 0; k < children->count && !l->failed; k++) {
            int i = order[k];

            snprintf(path, sizeof(path), "%s/locks/%s/%s", l->zk->root, l->names[name],
                     children->data[i]);
            list_add_row(l, name, held[i], zk_kind_of(children->data[i]), path);
        }
    }
out:
    free(held);
    free(order);
    list_pump(l);
    list_maybe_finish(l);
}

/* <root>/nonfair's children: the non-fair names held now. */
static void on_list_nonfair(int rc, const struct String_vector *children, const void *data)
{
    struct backend_list *l = list_listing_done(data, rc, NULL);

    if (rc == ZOK && l->cb && !l->failed) {
        static const struct zkind exclusive = { .mode = LOCK_EXCLUSIVE };
        char path[768];

        /* Each one held, by whoever its node's data names (zk_nonfair.c). */
        for (size_t n = list_take_names(l, children); n < l->nnames && !l->failed; n++) {
            snprintf(path, sizeof(path), "%s/nonfair/%s", l->zk->root, l->names[n]);
            list_add_row(l, n, true, exclusive, path);
        }
    }
    l->next = l->nnames;       /* nothing for list_pump */
    list_maybe_finish(l);
}

/* A context for a list request about row or name index; NULL when out
 * of memory. */
static struct list_call *list_call_new(struct backend_list *l, size_t index)
{
    struct list_call *call = malloc(sizeof(*call));

    if (call)
        *call = (struct list_call){ l, index };
    return call;
}

/* After the zoo_a* call that got call, with its rc: counts the request,
 * or frees call when it did not go. Returns whether it went. */
static bool list_call_sent(struct backend_list *l, struct list_call *call, int rc)
{
    if (rc != ZOK) {
        free(call);
        return false;
    }
    l->inflight++;
    l->zk->outstanding++;
    zk_kick(l->zk);
    return true;
}

/* Lists <root>/<dir> (the names under it) for done; false when it could
 * not be sent. */
static bool list_ask_names(struct backend_list *l, const char *dir, strings_completion_t done)
{
    struct list_call *call = list_call_new(l, 0);
    char path[512];

    if (!call)
        return false;
    snprintf(path, sizeof(path), "%s/%s", l->zk->root, dir);
    return list_call_sent(l, call, zoo_aget_children(l->zk->zh, path, 0, done, call));
}

/* Lists <root>/nonfair once the fair names are done; false when nothing
 * was sent (the listing then ends). */
static bool list_ask_nonfair(struct backend_list *l)
{
    l->nonfair_asked = true;
    if (list_ask_names(l, "nonfair", on_list_nonfair))
        return true;
    l->failed = true;
    return false;
}

static void on_list_names(int rc, const struct String_vector *children, const void *data)
{
    struct backend_list *l = list_listing_done(data, rc, NULL);

    if (rc == ZOK && l->cb && !l->failed) {
        list_take_names(l, children);
        qsort(l->names, l->nnames, sizeof(*l->names), by_string);
    }
    list_pump(l);
    list_maybe_finish(l);
}

static bool list_send(struct backend_list *l, size_t index, const char *path, bool data)
{
    struct list_call *call = list_call_new(l, index);

    if (!call)
        return false;
    return list_call_sent(l, call, data ? zoo_aget(l->zk->zh, path, 0, on_list_data, call)
                                        : zoo_aget_children(l->zk->zh, path, 0, on_list_nodes,
                                                            call));
}

struct backend_list *zk_list(void *impl, const char *glob, backend_name_filter may,
                             backend_list_cb cb, void *arg)
{
    struct zk *zk = impl;
    struct backend_list *l;

    if ((!zk_reachable(zk) && !zk->attaching) || !(l = calloc(1, sizeof(*l))))
        return NULL;
    *l = (struct backend_list){ .zk = zk, .cb = cb, .arg = arg, .may = may };
    snprintf(l->glob, sizeof(l->glob), "%s", glob);
    if (!zk_reachable(zk)) {     /* attaching: asked once attached (queries_serving) */
        l->parked = true;
        TAILQ_INSERT_TAIL(&zk->queries->lists, l, in_parked);
        return l;
    }
    if (!list_ask_names(l, "locks", on_list_names)) {
        free(l);
        return NULL;
    }
    return l;
}

void zk_list_cancel(void *impl, struct backend_list *l)
{
    struct zk *zk = impl;

    if (l->parked) {         /* nothing in flight: freed now */
        TAILQ_REMOVE(&zk->queries->lists, l, in_parked);
        list_free(l);
        return;
    }
    l->cb = NULL;   /* freed once its requests are answered */
}

/* ------------------------------------------- what waits for an attach */

/* Sends what waited for a handover's successor to attach, once it serves;
 * answers it unavailable once it cannot be waited for (the attach failed). */
static void queries_unpark(struct zk *zk)
{
    static const struct backend_queue_info unavailable = {
        .ok = false, .global = true, .holder = "-", .since_ms = -1, .lease_ms = -1
    };
    struct backend_query *q;
    struct backend_list *l;

    if (!zk_reachable(zk) && zk->attaching)
        return;
    while ((q = TAILQ_FIRST(&zk->queries->queries))) {
        TAILQ_REMOVE(&zk->queries->queries, q, in_parked);
        q->parked = false;
        if (!zk_reachable(zk) || !query_send(q)) {
            if (q->cb)
                q->cb(q->arg, &unavailable);
            free(q);
        }
    }
    while ((l = TAILQ_FIRST(&zk->queries->lists))) {
        TAILQ_REMOVE(&zk->queries->lists, l, in_parked);
        l->parked = false;
        if (!zk_reachable(zk) || !list_ask_names(l, "locks", on_list_names)) {
            if (l->cb)
                l->cb(l->arg, false, NULL, 0, 0);
            list_free(l);
        }
    }
}

static void queries_serving(void *arg)
{
    queries_unpark(arg);
}

static void queries_lost(void *arg, const char *reason)
{
    queries_unpark(arg);
}

int zk_query_init(struct zk *zk)
{
    static const struct zk_listener listener = {
        .serving = queries_serving, .lost = queries_lost,
    };

    if (!(zk->queries = calloc(1, sizeof(*zk->queries))))
        return -1;
    TAILQ_INIT(&zk->queries->queries);
    TAILQ_INIT(&zk->queries->lists);
    return zk_session_listen(zk, &listener, zk);
}

void zk_query_free(struct zk *zk)
{
    struct backend_query *q;
    struct backend_list *l;

    if (!zk->queries)
        return;
    while ((q = TAILQ_FIRST(&zk->queries->queries))) {
        TAILQ_REMOVE(&zk->queries->queries, q, in_parked);
        free(q);
    }
    while ((l = TAILQ_FIRST(&zk->queries->lists))) {
        TAILQ_REMOVE(&zk->queries->lists, l, in_parked);
        list_free(l);
    }
    free(zk->queries);
    zk->queries = NULL;
}
