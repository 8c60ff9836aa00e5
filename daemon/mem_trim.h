/*
 * mem_trim.h - gives the heap's free memory back to the system after a
 * burst (glibc's malloc_trim), so that RSS follows the load down.
 *
 * glibc keeps freed memory for reuse: after 100,000 kept holds come and
 * go, RSS stays at the peak (docs/PERFORMANCE.md, Memory after a burst).
 * Without glibc's malloc_trim (configure) this does nothing.
 */
#ifndef LOCKBROKER_MEM_TRIM_H
#define LOCKBROKER_MEM_TRIM_H

#include <stdbool.h>
#include <stdint.h>

/* RSS growth since the last trim below which no trim is worth its pause. */
#define MEM_TRIM_MIN_BYTES ((uint64_t)32 << 20)

/* At start-up: the RSS that later growth is measured from. */
void mem_trim_start(void);

/*
 * Call every second or so from the loop with the load: connections, holds,
 * waits, kept holds and leases, summed; `check` every few calls. Once the
 * load has fallen to a quarter of its peak since the last trim and RSS has
 * grown by MEM_TRIM_MIN_BYTES since then, malloc_trim(0) gives the free
 * pages back and one info line says how much and how long it took (a pause
 * of about 1 ms per MB given back: glibc merges the freed chunks first).
 * Otherwise its cost is reading /proc/self/statm when checking.
 */
void mem_trim_tick(uint64_t load, bool check);

#endif
