/*
 * backend_embedded.c - embedded mode: this daemon is the only authority, so
 * the head of a local queue gets the lock at once.
 */
#include "config.h"
#include "backend.h"
#include "locks.h"

#include <stdlib.h>
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

static void embedded_acquire(void *impl, struct lock *l, bool try)
{
    struct embedded *e = impl;

    locks_backend_granted(l, token_next(&e->last_token));
}

static void embedded_cancel(void *impl, struct lock *l) { }
static void embedded_release(void *impl, struct lock *l) { }

static const struct backend_ops embedded_ops = {
    .name = "embedded",
    .acquire = embedded_acquire,
    .cancel = embedded_cancel,
    .release = embedded_release,
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

void backend_embedded_free(struct backend *b)
{
    free(b ? b->impl : NULL);
}
