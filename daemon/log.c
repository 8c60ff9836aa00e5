/*
 * log.c - leveled logging to stderr.
 */
#include "config.h"
#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

static enum log_level current = LOG_LVL_INFO;
static bool to_journal;

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

void log_msg(enum log_level level, const char *fmt, ...)
{
    struct timeval tv;
    struct tm tm;
    char stamp[32];
    char line[1024];
    va_list ap;

    static const int syslog_priority[] = { 3, 4, 6, 7 };   /* by enum log_level */

    if (level > current)
        return;
    if (to_journal) {
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        fprintf(stderr, "<%d>%s %s\n", syslog_priority[level], settings_log_level_name(level),
                line);
        return;
    }
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One fprintf per message, so that lines from a crash stay whole. */
    fprintf(stderr, "%s.%03ldZ %s %s\n", stamp, (long)(tv.tv_usec / 1000),
            settings_log_level_name(level), line);
}
