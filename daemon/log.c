/*
 * log.c - leveled logging to stderr, with a budget per kind of line.
 *
 * A kind is a call site's format string (the pointer: one per call site).
 * Lines at info, warn and error beyond the budget of their kind in one
 * second are counted instead of written, and one line says how many were
 * (log_report_suppressed). A client that repeats one request 70,000 times
 * a second otherwise writes 12 MB of log a second (issue 41).
 */
#include "config.h"
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

/* Kinds tracked at once; a line whose kind finds no slot is written. */
#define LOG_KINDS 256
#define LOG_PROBE 8
/* A kind still being suppressed is reported at least this often. */
#define LOG_REPORT_MS 10000
/* A kind whose suppressed lines stopped this long ago is reported. */
#define LOG_QUIET_MS 1000
/* How much of a format the report quotes. */
#define LOG_QUOTE_MAX 80

static enum log_level current = LOG_LVL_INFO;
static bool to_journal;
static unsigned rate_limit = 1000;    /* [log] rate_limit (conf/settings.c) */

struct log_kind {
    const char *fmt;        /* the call site's format; NULL: a free slot */
    int64_t window_ms;      /* start of its current one-second window */
    unsigned in_window;     /* lines of it written in that window */
    uint64_t suppressed;    /* lines not written since first_ms; 0: none */
    int64_t first_ms;       /* when the first of them came */
    int64_t last_ms;        /* when the latest of them came */
    enum log_level level;   /* the most severe of them */
};

/* The auth threads (auth_pool.c) log too. */
static pthread_mutex_t kinds_lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_kind kinds[LOG_KINDS];

void log_detect_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;

    to_journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
                 (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_level(enum log_level level) { current = level; }
enum log_level log_get_level(void) { return current; }
void log_set_rate_limit(unsigned lines_per_s) { rate_limit = lines_per_s; }

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes one finished line (no newline) at level. */
static void log_write(enum log_level level, const char *line)
{
    static const int syslog_priority[] = { 3, 4, 6, 7 };   /* by enum log_level */
    struct timeval tv;
    struct tm tm;
    char stamp[32];

    if (to_journal) {
        fprintf(stderr, "<%d>%s %s\n", syslog_priority[level], settings_log_level_name(level),
                line);
        return;
    }
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf per message, so that lines from a crash stay whole. */
    fprintf(stderr, "%s.%03ldZ %s %s\n", stamp, (long)(tv.tv_usec / 1000),
            settings_log_level_name(level), line);
}

/* The slot of fmt, taking a free or finished one if it has none; NULL if all are busy. */
static struct log_kind *kind_of(const char *fmt, int64_t now)
{
    size_t h = (size_t)(((uintptr_t)fmt >> 3) * 0x9e3779b97f4a7c15ull % LOG_KINDS);
    struct log_kind *spare = NULL;

    for (size_t i = 0; i < LOG_PROBE; i++) {
        struct log_kind *k = &kinds[(h + i) % LOG_KINDS];

        if (k->fmt == fmt)
            return k;
        /* A kind with nothing to report and no line this second can go. */
        if (!spare && (!k->fmt || (!k->suppressed && now - k->window_ms >= 1000)))
            spare = k;
    }
    if (spare) {
        memset(spare, 0, sizeof(*spare));
        spare->fmt = fmt;
        spare->window_ms = now;
    }
    return spare;
}

/* Says how many lines of k were suppressed, if it is time (or all). Under kinds_lock. */
static void kind_report(struct log_kind *k, int64_t now, bool all)
{
    char line[256];
    int64_t s;
    size_t n;

    if (!k->suppressed)
        return;
    if (!all && now - k->first_ms < LOG_REPORT_MS && now - k->last_ms < LOG_QUIET_MS)
        return;
    s = (now - k->first_ms + 999) / 1000;
    n = strlen(k->fmt);
    snprintf(line, sizeof(line), "log: %llu lines like \"%.*s%s\" suppressed in the last %lld s "
             "([log] rate_limit %u a second)", (unsigned long long)k->suppressed,
             (int)(n > LOG_QUOTE_MAX ? LOG_QUOTE_MAX : n), k->fmt,
             n > LOG_QUOTE_MAX ? "..." : "", (long long)(s ? s : 1), rate_limit);
    log_write(k->level, line);
    k->suppressed = 0;
}

/* Whether a line of fmt at level is within its kind's budget (else it is counted). */
static bool within_budget(enum log_level level, const char *fmt)
{
    struct log_kind *k;
    bool ok = true;
    int64_t now;

    if (level == LOG_LVL_DEBUG || !rate_limit)
        return true;
    now = mono_ms();
    pthread_mutex_lock(&kinds_lock);
    if ((k = kind_of(fmt, now))) {
        if (now - k->window_ms >= 1000) {
            k->window_ms = now;
            k->in_window = 0;
        }
        if (k->in_window >= rate_limit) {
            if (!k->suppressed++) {
                k->first_ms = now;
                k->level = level;
            }
            k->last_ms = now;
            if (level < k->level)
                k->level = level;
            ok = false;
        } else {
            k->in_window++;
            kind_report(k, now, false);
        }
    }
    pthread_mutex_unlock(&kinds_lock);
    return ok;
}

void log_report_suppressed(bool all)
{
    int64_t now = mono_ms();

    pthread_mutex_lock(&kinds_lock);
    for (size_t i = 0; i < LOG_KINDS; i++)
        if (kinds[i].fmt)
            kind_report(&kinds[i], now, all);
    pthread_mutex_unlock(&kinds_lock);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    if (level > current || !within_budget(level, fmt))
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    log_write(level, line);
}
