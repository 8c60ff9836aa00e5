/*
 * backend_embedded.c - embedded mode: this daemon is the only authority, so
 * a request the lock table lets through is granted at once.
 */
#include "config.h"
#include "backend.h"
#include "locks.h"
#include "restart.h"
#include "snap.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct embedded {
    struct backend be;
    uint64_t last_token;
};

uint64_t token_next(uint64_t *last)
{
    struct timespec ts;
    uint64_t now;

    /* Wall-clock nanoseconds give a floor that a restarted daemon has
     * already passed; +1 keeps tokens strictly increasing within a run. */
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    *last = now > *last ? now : *last + 1;
    return *last;
}

static enum locks_result embedded_acquire(void *impl, struct hold *h, uint64_t *token)
{
    struct embedded *e = impl;

    *token = token_next(&e->last_token);
    return LOCKS_GRANTED;
}

/* The table's own release and grant are already immediate. */
static enum locks_result embedded_pass_on(void *impl, struct hold *from, struct hold *to,
                                          uint64_t *token)
{
    return LOCKS_BUSY;
}

/* Nothing is ever pending or held outside the lock table. */
static void embedded_forget(void *impl, struct hold *h) { }

static void embedded_stats(void *impl, backend_stat_fn add, void *cookie) { }

/* Nothing can be lost behind the daemon's back. */
static void embedded_before_request(void *impl) { }

static int64_t embedded_unreachable_since(void *impl)
{
    return 0;
}

/* The lock table is the whole truth: STATUS needs nothing more. */
static struct backend_query *embedded_query(void *impl, const char *name,
                                            struct backend_queue_info *now,
                                            backend_query_cb cb, void *arg)
{
    *now = (struct backend_queue_info){ .ok = true, .global = false, .holder = "-",
                                        .since_ms = -1, .lease_ms = -1 };
    return NULL;
}

static void embedded_query_cancel(void *impl, struct backend_query *q) { }

/* Every lease lives in lease.c: one it does not know is not held. */
static enum locks_result embedded_lease_op(void *impl, const char *name, uint64_t token,
                                           int64_t ttl_ms, backend_lease_cb cb, void *arg,
                                           struct backend_lease_op **pending)
{
    return LOCKS_NOT_HELD;
}

static void embedded_lease_op_cancel(void *impl, struct backend_lease_op *op) { }

/* Embedded mode waits for nothing outside the table: no histograms of its own. */
static void embedded_histograms(void *impl, backend_hist_fn add, void *cookie) { }

static void embedded_free(void *impl)
{
    free(impl);
}

/* Only this daemon ends holds, and it is the one answering. */
static int64_t embedded_window_ms(void *impl, struct hold *h)
{
    return INT64_MAX;
}

/* Handover: the last token, so that the successor's only go up from it. */
static void embedded_save(void *data, struct snap_w *w)
{
    const struct embedded *e = data;

    snap_w_rec(w, "backend_embedded");
    snap_w_u64(w, e->last_token);
}

static bool embedded_restore(void *data, struct snap_r *r, struct restart_in *in)
{
    struct embedded *e = data;

    e->last_token = snap_r_u64(r);
    return snap_r_done(r);
}

static const struct restart_part embedded_restart = {
    .name = "embedded backend",
    .kinds = (const struct restart_kind[]){ { "backend_embedded", embedded_restore }, { NULL } },
    .save = embedded_save,
};

static const struct backend_ops embedded_ops = {
    .name = "embedded",
    .acquire = embedded_acquire,
    .reassign = embedded_forget,
    .cancel = embedded_forget,
    .pass_on = embedded_pass_on,
    .release = embedded_forget,
    .stats = embedded_stats,
    .histograms = embedded_histograms,
    .query = embedded_query,
    .query_cancel = embedded_query_cancel,
    .ends_leases = false,
    .lease_op = embedded_lease_op,
    .lease_op_cancel = embedded_lease_op_cancel,
    .before_request = embedded_before_request,
    .unreachable_since = embedded_unreachable_since,
    .window_ms = embedded_window_ms,
    .restart = &embedded_restart,
    .free = embedded_free,
};

struct backend *backend_embedded_new(void)
{
    struct embedded *e = calloc(1, sizeof(*e));

    if (!e)
        return NULL;
    e->be.ops = &embedded_ops;
    e->be.impl = e;
    return &e->be;
}
