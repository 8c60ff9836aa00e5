/*
 * log.h - leveled logging to stderr ("2026-11-22T10:00:00.123Z info ...").
 *
 * Every line at info, warn or error counts against the budget of its kind
 * (its format string: one call site) of log_set_rate_limit() lines a
 * second; the lines beyond it are counted, not written, and one line
 * "log: N lines like "FORMAT" suppressed in the last S s" says how many.
 * Debug lines (-v, for diagnosis) are never suppressed. Thread-safe.
 */
#ifndef LOCKBROKER_LOG_H
#define LOCKBROKER_LOG_H

#include <stdbool.h>

#include "settings.h"

void log_set_level(enum log_level level);
/*
 * When stderr is the journal's stream (systemd sets JOURNAL_STREAM to its
 * device:inode), lines become "<N>level message": journald takes N as the
 * priority (3 error, 4 warning, 6 info, 7 debug) and adds its own time, so
 * none is written. Call once, at start.
 */
void log_detect_journal(void);
enum log_level log_get_level(void);
/* Lines of one kind written per second, at info or above; 0: no limit. */
void log_set_rate_limit(unsigned lines_per_s);
/*
 * Writes the "suppressed" line of every kind whose suppressed lines are
 * due: those of a kind that has been quiet for a second, or suppressed for
 * 10 s; all of them when `all` (at exit). Call about once a second.
 */
void log_report_suppressed(bool all);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) \
    do { if (log_get_level() >= LOG_LVL_DEBUG) log_msg(LOG_LVL_DEBUG, __VA_ARGS__); } while (0)

#endif
