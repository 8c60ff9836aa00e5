/*
 * lb_view.c - STATUS, LOCKS and HOLDERS lines as a table for people (lockbroker status
 * and locks on a terminal, or with --human). The protocol's lines stay the
 * interface for programs (--raw, or stdout not a terminal; --json).
 */
#include "config.h"

#include "lb_view.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CELL_MAX 128

/* The columns; each view shows those its lines have something for. */
enum col {
    COL_NAME, COL_STATE, COL_MODE, COL_HOLDER, COL_LABEL, COL_TOKEN, COL_HELD_FOR,
    COL_WAITED,      /* locks: a queued request's wait, or the longest of a name's here */
    COL_HOLDERS, COL_WAITERS,
    COL_QUEUE,       /* status: the holder and every waiter, across daemons */
    COL_LEASE_LEFT,
    COL_KEEP_LEFT,   /* delay=: kept after its holder let go (keep=, --min-hold, lock-delay) */
    COLS
};

static const char *const header[COLS] = {
    "NAME", "STATE", "MODE", "HOLDER", "LABEL", "TOKEN", "HELD FOR", "WAITED", "HOLDERS",
    "WAITERS", "QUEUE", "LEASE LEFT", "KEEP LEFT",
};

/* STATUS has no wait on the wire; LOCKS and HOLDERS have no queue. */
static const bool in_locks[COLS] = {
    [COL_NAME] = 1, [COL_STATE] = 1, [COL_MODE] = 1, [COL_HOLDER] = 1, [COL_LABEL] = 1,
    [COL_TOKEN] = 1, [COL_HELD_FOR] = 1, [COL_WAITED] = 1, [COL_HOLDERS] = 1,
    [COL_WAITERS] = 1, [COL_LEASE_LEFT] = 1, [COL_KEEP_LEFT] = 1,
};
static const bool in_status[COLS] = {
    [COL_NAME] = 1, [COL_STATE] = 1, [COL_MODE] = 1, [COL_HOLDER] = 1, [COL_LABEL] = 1,
    [COL_TOKEN] = 1, [COL_HELD_FOR] = 1, [COL_HOLDERS] = 1, [COL_WAITERS] = 1,
    [COL_QUEUE] = 1, [COL_LEASE_LEFT] = 1, [COL_KEEP_LEFT] = 1,
};

void view_duration(char *buf, size_t cap, int64_t ms)
{
    int64_t s = ms / 1000;

    if (ms < 0)
        snprintf(buf, cap, "-");
    else if (ms < 1000)
        snprintf(buf, cap, "%" PRId64 "ms", ms);
    else if (s < 60)
        snprintf(buf, cap, "%" PRId64 "s", s);
    else if (s < 3600)
        snprintf(buf, cap, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, cap, "%" PRId64 "h%02" PRId64 "m", s / 3600, s / 60 % 60);
    else
        snprintf(buf, cap, "%" PRId64 "d%02" PRId64 "h", s / 86400, s / 3600 % 24);
}

/* The value of key among the words " k=v k=v ...", copied to out, or "-". */
static void field(const char *words, const char *key, char *out, size_t cap)
{
    size_t klen = strlen(key);

    for (const char *p = words; p && *p; p = strchr(p, ' ')) {
        if (*p == ' ')
            p++;
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t vlen = strcspn(p + klen + 1, " ");

            snprintf(out, cap, "%.*s", (int)(vlen < cap ? vlen : cap - 1), p + klen + 1);
            return;
        }
    }
    snprintf(out, cap, "-");
}

/* A field that is a number of ms, as a duration; "-" when absent. */
static void field_duration(const char *words, const char *key, char *out, size_t cap)
{
    char v[32];

    field(words, key, v, sizeof(v));
    if (strcmp(v, "-") == 0)
        snprintf(out, cap, "-");
    else
        view_duration(out, cap, strtoll(v, NULL, 10));
}

/* One row from the words after "<name> <state-or-mode>". */
static void fill_row(char row[COLS][CELL_MAX], const char *name, const char *state,
                     const char *mode, const char *words, int64_t now_ms)
{
    char since[32], holders[16];

    bool has_since;

    snprintf(row[COL_NAME], CELL_MAX, "%s", name);
    snprintf(row[COL_STATE], CELL_MAX, "%s", state);
    snprintf(row[COL_MODE], CELL_MAX, "%s", mode);
    field(words, "holder", row[COL_HOLDER], CELL_MAX);
    field(words, "label", row[COL_LABEL], CELL_MAX);
    field(words, "token", row[COL_TOKEN], CELL_MAX);
    field(words, "since", since, sizeof(since));
    has_since = strcmp(since, "-") != 0;
    if (has_since && strcmp(state, "held") == 0)
        view_duration(row[COL_HELD_FOR], CELL_MAX, now_ms - strtoll(since, NULL, 10));
    else
        snprintf(row[COL_HELD_FOR], CELL_MAX, "-");
    /* A HOLDER queued row's since is when it was queued; a LOCK row says
     * how long the earliest of the name's waiters here has waited. */
    if (has_since && strcmp(state, "queued") == 0)
        view_duration(row[COL_WAITED], CELL_MAX, now_ms - strtoll(since, NULL, 10));
    else
        field_duration(words, "waited", row[COL_WAITED], CELL_MAX);
    field(words, "holders", holders, sizeof(holders));
    snprintf(row[COL_HOLDERS], CELL_MAX, "%s",
             strcmp(holders, "-") == 0 && strcmp(state, "held") == 0 ? "1" : holders);
    field(words, "waiters", row[COL_WAITERS], CELL_MAX);
    field(words, "queue", row[COL_QUEUE], CELL_MAX);
    field_duration(words, "lease", row[COL_LEASE_LEFT], CELL_MAX);
    field_duration(words, "delay", row[COL_KEEP_LEFT], CELL_MAX);
}

/* One line of the columns the view shows: cells[c] is column c's text. */
static void print_line(FILE *f, const bool *shown, const size_t *width,
                       const char *const cells[COLS])
{
    int last = COLS - 1;

    while (last > 0 && !shown[last])
        last--;
    for (int c = 0; c <= last; c++)
        if (shown[c])
            fprintf(f, "%-*s%s", c < last ? (int)width[c] : 0, cells[c], c < last ? "  " : "\n");
}

static void print_rows(FILE *f, const bool *shown, char (*rows)[COLS][CELL_MAX], size_t n)
{
    size_t width[COLS];
    const char *cells[COLS];

    for (int c = 0; c < COLS; c++) {
        width[c] = strlen(header[c]);
        for (size_t r = 0; r < n; r++)
            if (strlen(rows[r][c]) > width[c])
                width[c] = strlen(rows[r][c]);
    }
    print_line(f, shown, width, header);
    for (size_t r = 0; r < n; r++) {
        for (int c = 0; c < COLS; c++)
            cells[c] = rows[r][c];
        print_line(f, shown, width, cells);
    }
}

void view_locks(FILE *f, char **lines, size_t n, int64_t now_ms)
{
    char (*rows)[COLS][CELL_MAX] = calloc(n ? n : 1, sizeof(*rows));
    size_t nrows = 0;

    if (!rows) {
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%s\n", lines[i]);     /* no memory for a table: the lines */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char name[256], mode[32];
        int used = 0;

        char state[16];

        /* HOLDER <name> <mode> held|queued k=v ... (one holder or request) */
        if (sscanf(lines[i], "HOLDER %255s %31s %15s%n", name, mode, state, &used) == 3 &&
            used > 0) {
            fill_row(rows[nrows++], name, state, mode, lines[i] + used, now_ms);
            continue;
        }
        /* LOCK <name> <mode> k=v ... */
        if (sscanf(lines[i], "LOCK %255s %31s%n", name, mode, &used) == 2 && used > 0) {
            char token[32];

            field(lines[i] + used, "token", token, sizeof(token));
            fill_row(rows[nrows++], name, strcmp(token, "-") ? "held" : "awaited",
                     mode, lines[i] + used, now_ms);
        }
    }
    print_rows(f, in_locks, rows, nrows);
    for (size_t i = 0; i < n; i++)
        if (strncmp(lines[i], "LOCK ", 5) != 0 && strncmp(lines[i], "HOLDER ", 7) != 0)
            fprintf(f, "%s\n", lines[i]);     /* MORE <n>, or a later version's line */
    free(rows);
}

void view_status(FILE *f, const char *line, int64_t now_ms)
{
    char rows[1][COLS][CELL_MAX], name[256], state[16], mode[32];
    int used = 0;

    /* STATUS <name> held|free k=v ... */
    if (sscanf(line, "STATUS %255s %15s%n", name, state, &used) != 2 || used == 0) {
        fprintf(f, "%s\n", line);
        return;
    }
    field(line + used, "mode", mode, sizeof(mode));
    if (strcmp(mode, "-") == 0)
        snprintf(mode, sizeof(mode), "exclusive");
    else if (strcmp(mode, "limit") == 0) {
        char limit[16];

        field(line + used, "limit", limit, sizeof(limit));
        snprintf(mode, sizeof(mode), "limit=%s", limit);
    }
    fill_row(rows[0], name, state, strcmp(state, "free") ? mode : "-", line + used, now_ms);
    print_rows(f, in_status, rows, 1);
}
