/*
 * lb_view.c - STATUS, LOCKS and HOLDERS lines as a table for people (lockbroker status
 * and locks on a terminal, or with --human). The protocol's lines stay the
 * interface for programs (--raw, or stdout not a terminal; --json).
 */
#include "config.h"

#include "lb_view.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define COLS 11
#define CELL_MAX 128

static const char *const header[COLS] = {
    "NAME", "STATE", "MODE", "HOLDER", "LABEL", "TOKEN", "HELD FOR", "HOLDERS", "WAITERS",
    "LEASE LEFT", "DELAY LEFT",
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

    snprintf(row[0], CELL_MAX, "%s", name);
    snprintf(row[1], CELL_MAX, "%s", state);
    snprintf(row[2], CELL_MAX, "%s", mode);
    field(words, "holder", row[3], CELL_MAX);
    field(words, "label", row[4], CELL_MAX);
    field(words, "token", row[5], CELL_MAX);
    field(words, "since", since, sizeof(since));
    if (strcmp(since, "-") == 0 || strcmp(state, "held") != 0)
        snprintf(row[6], CELL_MAX, "-");
    else
        view_duration(row[6], CELL_MAX, now_ms - strtoll(since, NULL, 10));
    field(words, "holders", holders, sizeof(holders));
    snprintf(row[7], CELL_MAX, "%s", strcmp(holders, "-") == 0 && strcmp(state, "held") == 0
                                     ? "1" : holders);
    field(words, "waiters", row[8], CELL_MAX);
    field_duration(words, "lease", row[9], CELL_MAX);
    field_duration(words, "delay", row[10], CELL_MAX);
}

static void print_rows(FILE *f, char (*rows)[COLS][CELL_MAX], size_t n)
{
    size_t width[COLS];

    for (int c = 0; c < COLS; c++) {
        width[c] = strlen(header[c]);
        for (size_t r = 0; r < n; r++)
            if (strlen(rows[r][c]) > width[c])
                width[c] = strlen(rows[r][c]);
    }
    for (int c = 0; c < COLS; c++)
        fprintf(f, "%-*s%s", c + 1 < COLS ? (int)width[c] : 0, header[c],
                c + 1 < COLS ? "  " : "\n");
    for (size_t r = 0; r < n; r++)
        for (int c = 0; c < COLS; c++)
            fprintf(f, "%-*s%s", c + 1 < COLS ? (int)width[c] : 0, rows[r][c],
                    c + 1 < COLS ? "  " : "\n");
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
    print_rows(f, rows, nrows);
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
    print_rows(f, rows, 1);
}
