/*
 * bench_util.c - see bench_util.h.
 */
#include "config.h"
#include "bench_util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ histogram */

#define HALF (1u << (HISTO_SUB_BITS - 1))

static unsigned histo_index(uint64_t v)
{
    unsigned msb, shift;

    if (v < (1u << HISTO_SUB_BITS))
        return (unsigned)v;
    msb = 63u - (unsigned)__builtin_clzll(v);
    shift = msb - (HISTO_SUB_BITS - 1);
    if (shift > HISTO_MAX_SHIFT)
        return HISTO_BUCKETS - 1;
    return (1u << HISTO_SUB_BITS) + (shift - 1) * HALF + (unsigned)((v >> shift) - HALF);
}

static uint64_t histo_upper(unsigned idx)
{
    unsigned shift, top;

    if (idx < (1u << HISTO_SUB_BITS))
        return idx;
    shift = (idx - (1u << HISTO_SUB_BITS)) / HALF + 1;
    top = HALF + (idx - (1u << HISTO_SUB_BITS)) % HALF;
    return (((uint64_t)top + 1) << shift) - 1;
}

void histo_reset(struct histo *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

void histo_record(struct histo *h, uint64_t ns)
{
    h->buckets[histo_index(ns)]++;
    h->count++;
    h->sum += (double)ns;
    if (ns < h->min)
        h->min = ns;
    if (ns > h->max)
        h->max = ns;
}

void histo_merge(struct histo *dst, const struct histo *src)
{
    for (unsigned i = 0; i < HISTO_BUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

uint64_t histo_quantile(const struct histo *h, double q)
{
    uint64_t want, seen = 0;

    if (h->count == 0)
        return 0;
    want = (uint64_t)ceil(q * (double)h->count);
    if (want < 1)
        want = 1;
    for (unsigned i = 0; i < HISTO_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= want) {
            uint64_t v = histo_upper(i);
            return v > h->max ? h->max : v;
        }
    }
    return h->max;
}

/* ------------------------------------------------------------ /proc */

int proc_cpu_us(pid_t pid, uint64_t *user_us, uint64_t *sys_us)
{
    char path[64], buf[2048];
    unsigned long long ut, st;
    long tck = sysconf(_SC_CLK_TCK);
    const char *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: start after the last ')'. */
    if (!(p = strrchr(buf, ')')))
        return -1;
    /* Fields 3..15: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    if (tck <= 0)
        tck = 100;
    *user_us = ut * 1000000ull / (unsigned long long)tck;
    *sys_us = st * 1000000ull / (unsigned long long)tck;
    return 0;
}

int proc_status_bytes(pid_t pid, const char *key, uint64_t *bytes)
{
    char path[64], line[256];
    size_t klen = strlen(key);
    unsigned long long kb;
    int rc = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':' &&
            sscanf(line + klen + 1, "%llu", &kb) == 1) {
            *bytes = kb * 1024;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* ------------------------------------------------------------ one question */

/* Connects to host:port, sends req, and reads what comes until the peer
 * closes (or buf is full, or 2 s of silence) into buf, NUL-terminated.
 * Returns 0 or -1. */
static int ask(const char *host, int port, const char *req, char *buf, size_t cap)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
    char portstr[16];
    size_t got = 0, len = strlen(req);
    int fd = -1, rc = -1;

    snprintf(portstr, sizeof(portstr), "%d", port);
    if (getaddrinfo(host, portstr, &hints, &ai) != 0)
        goto out;
    if ((fd = socket(ai->ai_family, SOCK_STREAM, 0)) < 0 ||
        connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 || write(fd, req, len) != (ssize_t)len)
        goto out;
    for (;;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;

        if (poll(&pfd, 1, 2000) <= 0)
            goto out;
        n = read(fd, buf + got, cap - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == cap - 1)
            break;
    }
    buf[got] = '\0';
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (ai)
        freeaddrinfo(ai);
    return rc;
}

/* ------------------------------------------------------------ ZooKeeper srvr */

int zk_srvr_zxid(const char *hosts, uint64_t *zxid)
{
    char first[256], *host = NULL, buf[4096];
    size_t len = strcspn(hosts, ",/");
    int port, rc = -1;
    const char *z;

    if (len == 0 || len >= sizeof(first))
        return -1;
    memcpy(first, hosts, len);
    first[len] = '\0';
    if (split_host_port(first, &host, &port) < 0)
        return -1;
    /* The server answers and closes. */
    if (ask(host, port, "srvr", buf, sizeof(buf)) == 0 && (z = strstr(buf, "Zxid: 0x")) &&
        sscanf(z + 8, "%" SCNx64, zxid) == 1)
        rc = 0;
    free(host);
    return rc;
}

/* ------------------------------------------------------------ lockbrokerd STATS */

int lb_stats(const char *host, int port, const char *const *names, uint64_t *vals, unsigned n)
{
    char buf[16384], key[64];
    unsigned found = 0;
    unsigned long long v;

    /* QUIT: the daemon closes once it answered. */
    if (ask(host, port, "STATS\nQUIT\n", buf, sizeof(buf)) < 0)
        return -1;
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (sscanf(line, "STAT %63s %llu", key, &v) != 2)
            continue;
        for (unsigned i = 0; i < n; i++)
            if (strcmp(key, names[i]) == 0) {
                vals[i] = v;
                found++;
            }
    }
    return found == n ? 0 : -1;
}

/* ------------------------------------------------------------ misc */

uint64_t raise_nofile(uint64_t want)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 0;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

int split_host_port(const char *s, char **host, int *port)
{
    const char *colon, *h = s;
    size_t hlen;
    char *end;
    long p;

    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return -1;
        h = s + 1;
        hlen = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        if (!(colon = strrchr(s, ':')))
            return -1;
        hlen = (size_t)(colon - s);
    }
    p = strtol(colon + 1, &end, 10);
    if (hlen == 0 || *end || p <= 0 || p > 65535)
        return -1;
    if (!(*host = strndup(h, hlen)))
        return -1;
    *port = (int)p;
    return 0;
}

/* ------------------------------------------------------------ output */

static enum out_mode out_mode;
static int out_fields;

int out_parse_mode(const char *s, enum out_mode *m)
{
    if (strcmp(s, "json") == 0)
        *m = OUT_JSON;
    else if (strcmp(s, "table") == 0)
        *m = OUT_TABLE;
    else
        return -1;
    return 0;
}

void out_begin(enum out_mode m)
{
    out_mode = m;
    out_fields = 0;
    if (m == OUT_JSON)
        fputc('{', stdout);
}

static void out_key(const char *key)
{
    if (out_mode == OUT_JSON)
        printf("%s\"%s\": ", out_fields ? ", " : "", key);
    else
        printf("%-28s ", key);
    out_fields++;
}

static void out_sep(void)
{
    if (out_mode == OUT_TABLE)
        fputc('\n', stdout);
}

void out_str(const char *key, const char *val)
{
    out_key(key);
    if (out_mode == OUT_JSON) {
        fputc('"', stdout);
        for (const char *p = val; *p; p++) {
            if (*p == '"' || *p == '\\')
                fputc('\\', stdout);
            if ((unsigned char)*p >= 0x20)
                fputc(*p, stdout);
        }
        fputc('"', stdout);
    } else {
        fputs(val, stdout);
    }
    out_sep();
}

void out_u64(const char *key, uint64_t val)
{
    out_key(key);
    printf("%llu", (unsigned long long)val);
    out_sep();
}

void out_dbl(const char *key, double val, int decimals)
{
    out_key(key);
    if (isfinite(val))
        printf("%.*f", decimals, val);
    else
        fputs(out_mode == OUT_JSON ? "null" : "-", stdout);
    out_sep();
}

void out_histo(const char *prefix, const struct histo *h)
{
    static const struct { const char *name; double q; } qs[] = {
        { "p50", 0.50 }, { "p99", 0.99 }, { "p999", 0.999 },
    };
    char key[96];

    for (unsigned i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        snprintf(key, sizeof(key), "%s_%s_us", prefix, qs[i].name);
        out_dbl(key, (double)histo_quantile(h, qs[i].q) / 1000.0, 1);
    }
    snprintf(key, sizeof(key), "%s_max_us", prefix);
    out_dbl(key, h->count ? (double)h->max / 1000.0 : 0.0, 1);
    snprintf(key, sizeof(key), "%s_mean_us", prefix);
    out_dbl(key, h->count ? h->sum / (double)h->count / 1000.0 : 0.0, 1);
    snprintf(key, sizeof(key), "%s_samples", prefix);
    out_u64(key, h->count);
}

void out_end(void)
{
    if (out_mode == OUT_JSON)
        fputs("}\n", stdout);
    fflush(stdout);
}

/* ------------------------------------------------------------ zipf, rng */

int zipf_init(struct zipf *z, unsigned n, double s)
{
    double sum = 0;

    z->n = n;
    if (n == 0 || !(z->cdf = malloc(n * sizeof(double))))
        return -1;
    for (unsigned i = 0; i < n; i++) {
        sum += 1.0 / pow((double)(i + 1), s);
        z->cdf[i] = sum;
    }
    for (unsigned i = 0; i < n; i++)
        z->cdf[i] /= sum;
    return 0;
}

unsigned zipf_next(const struct zipf *z, uint64_t *rng)
{
    double u = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    unsigned lo = 0, hi = z->n - 1;

    /* First rank whose cumulative probability reaches u. */
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (z->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void zipf_free(struct zipf *z)
{
    free(z->cdf);
    z->cdf = NULL;
}

uint64_t rng_next(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}
