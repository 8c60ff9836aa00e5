/*
 * mem_trim.c - malloc_trim after a burst (see mem_trim.h).
 *
 * Why not mallinfo2() to see the free bytes: it walks every free chunk,
 * 10 ms and more after 100,000 holds went, on every call. The load and
 * RSS cost next to nothing.
 */
#include "config.h"
#include "mem_trim.h"

#ifdef HAVE_MALLOC_TRIM
#include <malloc.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static uint64_t peak_load;   /* since the last trim */
static uint64_t base_rss;    /* bytes resident after the last trim or at start, or the
                              * fewest seen since; 0: unknown */

/* Resident bytes, or 0 if unknown. */
static uint64_t rss_bytes(void)
{
    unsigned long long size, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f)
        return 0;
    if (fscanf(f, "%llu %llu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void mem_trim_start(void)
{
    base_rss = rss_bytes();
}

void mem_trim_tick(uint64_t load, bool check)
{
    uint64_t rss, after;
    int64_t t0;

    if (load > peak_load)
        peak_load = load;
    if (!check || !(rss = rss_bytes()))
        return;
    if (!base_rss || rss < base_rss)
        base_rss = rss;
    if (load > peak_load / 4 || rss - base_rss < MEM_TRIM_MIN_BYTES)
        return;
    t0 = now_us();
    malloc_trim(0);
    t0 = now_us() - t0;
    after = rss_bytes();
    log_info("memory: the load fell from %llu to %llu (connections, holds, waits, leases): "
             "RSS %llu MB -> %llu MB by malloc_trim in %lld ms",
             (unsigned long long)peak_load, (unsigned long long)load,
             (unsigned long long)(rss >> 20), (unsigned long long)(after >> 20),
             (long long)((t0 + 500) / 1000));
    peak_load = load;
    base_rss = after ? after : rss;
}
#else
void mem_trim_start(void)
{
}

void mem_trim_tick(uint64_t load, bool check)
{
    (void)load;
    (void)check;
}
#endif
