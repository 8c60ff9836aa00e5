/*
 * locks.c - the lock table (see locks.h).
 *
 * Each name has a struct lock with one queue of holds. When the lock is
 * LOCK_HELD, the queue's head is the holder; everything behind it waits in
 * arrival order. When it is LOCK_ACQUIRING, the backend is getting the lock
 * for the queue's head; if that head leaves, the next waiter inherits the
 * acquisition, so a departing waiter costs the backend nothing. Locks exist
 * only while their queue is non-empty. Names are found through a tsearch(3)
 * tree; every queue operation is O(1).
 */
#include "config.h"
#include "locks.h"
#include "backend.h"
#include "log.h"

#include <event2/event.h>
#include <search.h>
#include <sys/time.h>
#include <stdlib.h>
#include <string.h>

enum lock_state {
    LOCK_IDLE,       /* no holder, no acquisition: transient, inside lock_next() */
    LOCK_ACQUIRING,  /* the backend works for the queue's head */
    LOCK_HELD,       /* the queue's head holds it */
};

enum hold_state { HOLD_WAITING, HOLD_HELD };

struct hold {
    struct lock *lock;
    struct locks_client *client;
    TAILQ_ENTRY(hold) in_lock;     /* the lock's queue */
    TAILQ_ENTRY(hold) in_client;   /* the client's list */
    enum hold_state state;
    bool try;                      /* TRYLOCK or LOCK ... 0: never waits behind others */
    uint32_t count;                /* re-entrant depth, >= 1 when HELD */
    uint64_t token;                /* valid when HELD */
    int64_t since_ms;              /* wall-clock time of the grant, valid when HELD */
    struct event *timer;           /* wait deadline, or NULL */
};

struct lock {
    const char *name;              /* NUL-terminated; points at name_buf */
    struct locks *table;
    TAILQ_HEAD(, hold) queue;      /* never empty outside lock_next() */
    unsigned nqueued;              /* holds in queue */
    enum lock_state state;
    bool acquiring_try;            /* the backend acquisition was asked as try */
    void *backend_data;            /* the backend's; the table never touches it */
    char name_buf[];
};

struct locks {
    struct event_base *base;
    struct backend *backend;
    unsigned max_per_client;
    bool closing;                  /* locks_shutdown() was called: grant nothing more */
    void *tree;                    /* tsearch root of struct lock * by name */
    struct locks_stats stats;
    /* While locks_lock() waits for a backend that may answer synchronously,
     * the answer for that hold is recorded here rather than called back. */
    struct hold *sync_hold;
    enum locks_result sync_result;
    uint64_t sync_token;
};

#define MAX_DEPTH UINT32_MAX

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct lock *)a)->name, ((const struct lock *)b)->name);
}

static struct lock *lock_find(struct locks *t, const char *name)
{
    /* tfind compares with by_name, so a key needs only the name. */
    struct lock key = { .name = name };
    void *found = tfind(&key, &t->tree, by_name);

    return found ? *(struct lock **)found : NULL;
}

static struct lock *lock_create(struct locks *t, const char *name)
{
    size_t len = strlen(name);
    struct lock *l = calloc(1, sizeof(*l) + len + 1);
    void *slot;

    if (!l)
        return NULL;
    l->table = t;
    TAILQ_INIT(&l->queue);
    l->state = LOCK_IDLE;
    memcpy(l->name_buf, name, len + 1);
    l->name = l->name_buf;
    slot = tsearch(l, &t->tree, by_name);
    if (!slot) {
        free(l);
        return NULL;
    }
    return l;
}

static void lock_destroy(struct lock *l)
{
    tdelete(l, &l->table->tree, by_name);
    free(l);
}

static void hold_unlink(struct hold *h)
{
    struct locks *t = h->lock->table;

    if (h->state == HOLD_HELD)
        t->stats.held--;
    else
        t->stats.waiting--;
    TAILQ_REMOVE(&h->lock->queue, h, in_lock);
    h->lock->nqueued--;
    TAILQ_REMOVE(&h->client->holds, h, in_client);
    h->client->nholds--;
    if (h->timer)
        event_free(h->timer);
    free(h);
}

/* Reports the outcome of a waiting request, or records it for locks_lock(). */
static void hold_report(struct locks *t, bool sync, struct locks_client *c,
                        const char *name, enum locks_result r, uint64_t token)
{
    if (sync) {
        t->sync_result = r;
        t->sync_token = token;
        t->sync_hold = NULL;
        return;
    }
    c->ops->done(c, name, r, token);
}

/* The lock has no holder and no acquisition: start one for the new head, or free it. */
static void lock_next(struct lock *l)
{
    struct hold *head = TAILQ_FIRST(&l->queue);

    l->state = LOCK_IDLE;
    if (!head) {
        lock_destroy(l);
        return;
    }
    if (l->table->closing)
        return;                    /* waiters stay queued until their connections close */
    l->state = LOCK_ACQUIRING;
    l->acquiring_try = head->try;
    l->table->backend->ops->acquire(l->table->backend->impl, l, head->try);
}

/* Removes a waiting hold; keeps or cancels the backend acquisition. */
static void hold_cancel_wait(struct hold *h)
{
    struct lock *l = h->lock;
    struct locks *t = l->table;
    bool was_head = (h == TAILQ_FIRST(&l->queue));

    hold_unlink(h);
    if (l->state == LOCK_IDLE && TAILQ_EMPTY(&l->queue)) {
        lock_destroy(l);           /* only while closing do idle locks have waiters */
        return;
    }
    if (!was_head || l->state != LOCK_ACQUIRING)
        return;
    if (TAILQ_EMPTY(&l->queue) || l->acquiring_try) {
        /* No waiter can inherit it (or a try acquisition would answer busy). */
        t->backend->ops->cancel(t->backend->impl, l);
        lock_next(l);
    }
}

/* Drops a held hold entirely; the next waiter's turn begins. */
static void hold_release(struct hold *h)
{
    struct lock *l = h->lock;
    struct locks *t = l->table;

    hold_unlink(h);
    l->state = LOCK_IDLE;
    t->backend->ops->release(t->backend->impl, l);
    lock_next(l);
}

static void on_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct hold *h = arg;
    struct locks *t = h->lock->table;
    struct locks_client *c = h->client;
    char name[256];

    snprintf(name, sizeof(name), "%s", h->lock->name);
    log_debug("lock %s: wait of %s timed out", name, c->peer);
    t->stats.timeouts++;
    hold_cancel_wait(h);
    c->ops->done(c, name, LOCKS_TIMEOUT, 0);
}

struct locks *locks_new(struct event_base *base, struct backend *backend, unsigned max_per_client)
{
    struct locks *t = calloc(1, sizeof(*t));

    if (!t)
        return NULL;
    t->base = base;
    t->backend = backend;
    t->max_per_client = max_per_client;
    return t;
}

void locks_shutdown(struct locks *t)
{
    t->closing = true;
}

static void free_lock_node(void *p)
{
    struct lock *l = p;
    struct hold *h;

    while ((h = TAILQ_FIRST(&l->queue)))
        hold_unlink(h);
    free(l);
}

void locks_free(struct locks *t)
{
    if (!t)
        return;
    tdestroy(t->tree, free_lock_node);
    free(t);
}

void locks_client_init(struct locks_client *c, const struct locks_client_ops *ops, const char *peer)
{
    TAILQ_INIT(&c->holds);
    c->nholds = 0;
    c->ops = ops;
    c->peer = peer;
}

static struct hold *held_by(struct lock *l, struct locks_client *c)
{
    struct hold *head = l ? TAILQ_FIRST(&l->queue) : NULL;

    return (head && head->state == HOLD_HELD && head->client == c) ? head : NULL;
}

enum locks_result locks_lock(struct locks *t, struct locks_client *c, const char *name,
                             int64_t wait_ms, bool try, uint64_t *token)
{
    struct lock *l = lock_find(t, name);
    struct hold *h = held_by(l, c);
    bool no_wait = try || wait_ms == 0;

    if (h) {
        if (h->count == MAX_DEPTH)
            return LOCKS_LIMIT;
        h->count++;
        *token = h->token;
        return LOCKS_GRANTED;
    }
    if (l && no_wait)
        return LOCKS_BUSY;
    if (c->nholds >= t->max_per_client)
        return LOCKS_LIMIT;

    h = calloc(1, sizeof(*h));
    if (!h)
        return LOCKS_NOMEM;
    if (!l && !(l = lock_create(t, name))) {
        free(h);
        return LOCKS_NOMEM;
    }
    if (wait_ms > 0) {
        struct timeval tv = { wait_ms / 1000, (wait_ms % 1000) * 1000 };
        h->timer = event_new(t->base, -1, 0, on_wait_timeout, h);
        if (!h->timer || event_add(h->timer, &tv) < 0) {
            if (h->timer)
                event_free(h->timer);
            free(h);
            if (TAILQ_EMPTY(&l->queue))
                lock_destroy(l);
            return LOCKS_NOMEM;
        }
    }
    h->lock = l;
    h->client = c;
    h->state = HOLD_WAITING;
    h->try = no_wait;
    TAILQ_INSERT_TAIL(&l->queue, h, in_lock);
    l->nqueued++;
    TAILQ_INSERT_TAIL(&c->holds, h, in_client);
    c->nholds++;
    t->stats.waiting++;

    if (l->state == LOCK_IDLE) {
        t->sync_hold = h;
        t->sync_result = LOCKS_WAITING;
        lock_next(l);
        if (t->sync_hold == NULL) {     /* answered before acquire() returned */
            *token = t->sync_token;
            return t->sync_result;
        }
        t->sync_hold = NULL;
    }
    log_debug("lock %s: %s queued", name, c->peer);
    return LOCKS_WAITING;
}

enum locks_result locks_unlock(struct locks *t, struct locks_client *c, const char *name)
{
    struct hold *h = held_by(lock_find(t, name), c);

    if (!h)
        return LOCKS_NOT_HELD;
    if (--h->count == 0)
        hold_release(h);
    return LOCKS_RELEASED;
}

void locks_client_release_all(struct locks *t, struct locks_client *c)
{
    struct hold *h;

    while ((h = TAILQ_FIRST(&c->holds))) {
        if (h->state == HOLD_HELD)
            hold_release(h);
        else
            hold_cancel_wait(h);
    }
}

void locks_get_stats(const struct locks *t, struct locks_stats *out)
{
    *out = t->stats;
}

void locks_status(const struct locks *t, const char *name, struct locks_status *out)
{
    struct lock *l = lock_find((struct locks *)t, name);
    struct hold *head = l ? TAILQ_FIRST(&l->queue) : NULL;

    memset(out, 0, sizeof(*out));
    if (!head)
        return;
    out->held = head->state == HOLD_HELD;
    out->waiters = l->nqueued - (out->held ? 1 : 0);
    if (out->held) {
        out->holder = head->client->peer;
        out->token = head->token;
        out->since_ms = head->since_ms;
    }
}

void locks_set_max_per_client(struct locks *t, unsigned max_per_client)
{
    t->max_per_client = max_per_client;
}

const char *lock_name(const struct lock *l) { return l->name; }

const char *lock_peer(const struct lock *l)
{
    struct hold *head = TAILQ_FIRST(&l->queue);

    return head ? head->client->peer : "-";
}

void *lock_backend_data(const struct lock *l) { return l->backend_data; }
void lock_set_backend_data(struct lock *l, void *p) { l->backend_data = p; }

void locks_backend_granted(struct lock *l, uint64_t token)
{
    struct locks *t = l->table;
    struct hold *h = TAILQ_FIRST(&l->queue);

    if (l->state != LOCK_ACQUIRING || !h) {
        log_error("lock %s: backend granted a lock nobody is acquiring", l->name);
        return;
    }
    l->state = LOCK_HELD;
    h->state = HOLD_HELD;
    struct timeval now;
    gettimeofday(&now, NULL);
    h->count = 1;
    h->token = token;
    h->since_ms = (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000;
    if (h->timer) {
        event_free(h->timer);
        h->timer = NULL;
    }
    t->stats.waiting--;
    t->stats.held++;
    t->stats.grants++;
    log_debug("lock %s: granted to %s, token %llu", l->name, h->client->peer,
              (unsigned long long)token);
    hold_report(t, h == t->sync_hold, h->client, l->name, LOCKS_GRANTED, token);
}

/* busy / unavailable: the try head fails; later waiters get a fresh acquisition. */
static void backend_refused(struct lock *l, enum locks_result r)
{
    struct locks *t = l->table;
    struct hold *h = TAILQ_FIRST(&l->queue);
    struct locks_client *c;
    char name[256];

    if (l->state != LOCK_ACQUIRING || !h) {
        log_error("lock %s: backend refused a lock nobody is acquiring", l->name);
        return;
    }
    bool sync = (h == t->sync_hold);
    c = h->client;
    snprintf(name, sizeof(name), "%s", l->name);
    hold_unlink(h);
    lock_next(l);
    hold_report(t, sync, c, name, r, 0);
}

void locks_backend_busy(struct lock *l) { backend_refused(l, LOCKS_BUSY); }
void locks_backend_unavailable(struct lock *l) { backend_refused(l, LOCKS_UNAVAILABLE); }

void locks_backend_lost(struct lock *l, const char *reason)
{
    struct locks *t = l->table;
    struct hold *h = TAILQ_FIRST(&l->queue);
    struct locks_client *c;
    uint64_t token;
    char name[256];

    if (l->state != LOCK_HELD || !h) {
        log_error("lock %s: backend lost a lock nobody holds", l->name);
        return;
    }
    c = h->client;
    token = h->token;
    snprintf(name, sizeof(name), "%s", l->name);
    log_warn("lock %s: lost by %s (token %llu): %s", name, c->peer,
             (unsigned long long)token, reason);
    t->stats.lost++;
    hold_unlink(h);
    lock_next(l);
    c->ops->lost(c, name, token, reason);
}
