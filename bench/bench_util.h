/*
 * bench_util.h - pieces shared by the benchmark programs: a clock, a
 * log-linear latency histogram, /proc readers, the ZooKeeper `srvr`
 * four-letter command, and one-line JSON / table output.
 *
 * Nothing here is used by the daemon. The /proc and ZooKeeper readers block:
 * call them only outside the measured window's hot path (at its start and end).
 */
#ifndef LOCKBROKER_BENCH_UTIL_H
#define LOCKBROKER_BENCH_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/*
 * A latency histogram in nanoseconds, HdrHistogram-style: values below 128
 * have their own bucket; above that, each power of two is split into 64
 * equal sub-buckets, so a reported percentile is at most 1/64 (1.6%) above
 * the true value. Values up to 2^40 ns (18 minutes) are kept; larger ones
 * count in the last bucket.
 */
#define HISTO_SUB_BITS 7
#define HISTO_MAX_SHIFT 34
#define HISTO_BUCKETS ((1 << HISTO_SUB_BITS) + HISTO_MAX_SHIFT * (1 << (HISTO_SUB_BITS - 1)))

struct histo {
    uint64_t count;
    uint64_t min, max;           /* exact; min is UINT64_MAX while empty */
    double sum;                  /* for the mean only */
    uint64_t buckets[HISTO_BUCKETS];
};

void histo_reset(struct histo *h);
void histo_record(struct histo *h, uint64_t ns);
/* Adds every sample of src to dst. */
void histo_merge(struct histo *dst, const struct histo *src);
/* The smallest value v such that at least q (0..1) of the samples are <= v,
 * rounded up to its bucket's upper bound (as HdrHistogram's "highest
 * equivalent value"), capped at max. 0 when empty. */
uint64_t histo_quantile(const struct histo *h, double q);

/* utime + stime of a process from /proc/PID/stat, in microseconds (the
 * kernel counts in clock ticks, usually 10 ms). Returns 0 or -1. */
int proc_cpu_us(pid_t pid, uint64_t *user_us, uint64_t *sys_us);
/* A "Key:   N kB" field of /proc/PID/status ("VmRSS", "RssAnon", "VmData"),
 * in bytes. Returns 0 or -1. */
int proc_status_bytes(pid_t pid, const char *key, uint64_t *bytes);

/* Sends `srvr` to the first host of a ZooKeeper connect string
 * ("h:p,h:p/chroot") and parses "Zxid: 0x...". Blocks up to ~2 s.
 * Returns 0 or -1. */
int zk_srvr_zxid(const char *hosts, uint64_t *zxid);

/* Asks lockbrokerd at host:port for STATS and fills vals[i] with the
 * value of the counter names[i]. Blocks up to ~2 s. Returns 0, or -1 if
 * the daemon could not be asked or did not report every name. */
int lb_stats(const char *host, int port, const char *const *names, uint64_t *vals, unsigned n);

/* Raises RLIMIT_NOFILE's soft limit to want (or to the hard limit).
 * Returns the resulting soft limit. */
uint64_t raise_nofile(uint64_t want);

/* Splits "host:port" / "[v6]:port" into a malloc'd host and a port.
 * Returns 0 or -1. */
int split_host_port(const char *s, char **host, int *port);

/*
 * Output: each program prints one record, as one line of flat JSON
 * ({"key": value, ...}; easy to pick apart with sed) or as an aligned
 * two-column table.
 */
enum out_mode { OUT_TABLE, OUT_JSON };
int out_parse_mode(const char *s, enum out_mode *m);
void out_begin(enum out_mode m);
void out_str(const char *key, const char *val);
void out_u64(const char *key, uint64_t val);
void out_dbl(const char *key, double val, int decimals);
/* p50 / p99 / p99.9 / max (and mean) of h in microseconds, as
 * <prefix>_p50_us and so on. */
void out_histo(const char *prefix, const struct histo *h);
void out_end(void);

/* Zipf(s) sampler over ranks 0..n-1 (rank 0 most popular). */
struct zipf {
    unsigned n;
    double *cdf;                 /* malloc'd, n entries */
};
int zipf_init(struct zipf *z, unsigned n, double s);
unsigned zipf_next(const struct zipf *z, uint64_t *rng);
void zipf_free(struct zipf *z);

/* xorshift64*: a fast per-run random stream; *state must start non-zero. */
uint64_t rng_next(uint64_t *state);

#endif
