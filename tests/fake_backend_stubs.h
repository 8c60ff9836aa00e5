/*
 * fake_backend_stubs.h - the backend ops that the unit suites' fake
 * backends (check_locks.c, check_lease.c) answer alike: no STATUS beyond
 * the table, no statistics, never unreachable, no local handoff. Each
 * suite keeps its own acquire / cancel / release, which is what it tests.
 * Include after backend.h; every function is static.
 */
#ifndef LOCKBROKER_FAKE_BACKEND_STUBS_H
#define LOCKBROKER_FAKE_BACKEND_STUBS_H

#include <stddef.h>
#include <stdint.h>

static void fake_stats(void *impl, backend_stat_fn add, void *cookie) { }
static void fake_histograms(void *impl, backend_hist_fn add, void *cookie) { }

static struct backend_query *fake_query(void *impl, const char *name,
                                        struct backend_queue_info *now, backend_query_cb cb,
                                        void *arg)
{
    return NULL;
}

static void fake_query_cancel(void *impl, struct backend_query *q) { }
static void fake_free(void *impl) { }
static int64_t fake_unreachable_since(void *impl) { return 0; }
static int64_t fake_window_ms(void *impl, struct hold *h) { return INT64_MAX; }

static enum locks_result fake_pass_on(void *impl, struct hold *from, struct hold *to,
                                      uint64_t *token)
{
    return LOCKS_BUSY;       /* release and grant through acquire */
}

#endif
