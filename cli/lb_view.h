/*
 * lb_view.h - STATUS and LOCKS lines as an operator reads them: a table with
 * durations ("12s", "3m05s") instead of epoch milliseconds.
 */
#ifndef LOCKBROKER_CLI_VIEW_H
#define LOCKBROKER_CLI_VIEW_H

#include <stdint.h>
#include <stdio.h>

/* "850ms", "12s", "3m05s", "2h01m", "3d04h"; ms < 0: "-". buf holds 16 bytes. */
void view_duration(char *buf, size_t cap, int64_t ms);

/*
 * Prints lines (n of them, each "LOCK <name> <mode> k=v ..." or "MORE <n>";
 * borrowed) as a table with a header, to f. now_ms: the wall clock, for
 * "held for". Lines of another shape are printed as they are, after it.
 */
void view_locks(FILE *f, char **lines, size_t n, int64_t now_ms);

/* One STATUS line as the same kind of table (one row). */
void view_status(FILE *f, const char *line, int64_t now_ms);

#endif
