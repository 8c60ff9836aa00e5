/*
 * histogram.h - a fixed log-scale histogram of durations, for /metrics.
 *
 * Bucket i counts the observations of at most 2^i microseconds (1 us, 2 us,
 * 4 us ... 2^35 us, about 9.5 hours); the last bucket counts the longer
 * ones. Observing is O(1) (a count-leading-zeros, three additions) and
 * never allocates, so the lock path can afford it. Not thread-safe: like
 * everything in the daemon it is used from the event loop thread only.
 */
#ifndef LOCKBROKER_HISTOGRAM_H
#define LOCKBROKER_HISTOGRAM_H

#include <stdint.h>

/* Finite buckets; counts[] has one more, for the observations above 2^35 us. */
#define HISTOGRAM_BUCKETS 36

struct histogram {
    uint64_t counts[HISTOGRAM_BUCKETS + 1];  /* per bucket, not cumulative */
    uint64_t count;                          /* observations: the sum of counts[] */
    uint64_t sum_us;                         /* their total, in microseconds */
};

/* The upper bound of finite bucket i (0 <= i < HISTOGRAM_BUCKETS), in us. */
static inline uint64_t histogram_bound_us(unsigned i)
{
    return (uint64_t)1 << i;
}

/* Counts one duration of us microseconds (a negative one, which a
 * monotonic clock never gives, counts as 0). */
static inline void histogram_observe(struct histogram *h, int64_t us)
{
    uint64_t v = us > 0 ? (uint64_t)us : 0;
    /* The smallest i with v <= 2^i: 0 for v <= 1, else the bit length of v - 1. */
    unsigned i = v <= 1 ? 0 : 64 - (unsigned)__builtin_clzll(v - 1);

    h->counts[i < HISTOGRAM_BUCKETS ? i : HISTOGRAM_BUCKETS]++;
    h->count++;
    h->sum_us += v;
}

#endif
