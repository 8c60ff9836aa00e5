/*
 * lb_json.h - the little JSON that `lockbroker stats --json` and `status --json`
 * print: protocol words and numbers, written straight to a stream.
 */
#ifndef LOCKBROKER_JSON_H
#define LOCKBROKER_JSON_H

#include <stdbool.h>
#include <stdio.h>

/* s (len bytes) as a quoted JSON string; control characters and bytes
 * above 0x7e are escaped as \u00XX. */
void json_write_string(FILE *f, const char *s, size_t len);

/* A protocol value: 1 to 15 decimal digits as a number, "-" as null, anything
 * else as a string. Longer numbers (fencing tokens go past 2^53, which
 * parsers that read numbers as doubles would round) stay strings. */
void json_write_value(FILE *f, const char *v, size_t len);

/*
 * A STATUS line ("STATUS <name> held|free key=value...") as one JSON object
 * and a newline: name, held, then every key=value in line order (token as
 * a string, whatever its size, or null), with
 * "mode" ("exclusive" when the line has none), "holders" (for an exclusive
 * lock, 1 when held), "limit" and "label" (null when absent) always there.
 * Returns false (writing nothing) when the line is not a STATUS line for name.
 */
bool json_write_status(FILE *f, const char *name, const char *line);

/*
 * One line of LOCKS or HOLDERS as one JSON object on a line: "LOCK <name>
 * <mode> k=v..." -> {"name":..,"mode":..,"holder":..,...} (a token as a
 * string, "-" as null); "HOLDER <name> <mode> <state> k=v..." likewise with
 * "state"; "MORE <n>" -> {"more":n}; anything else -> {"line":"..."}.
 */
void json_write_lock(FILE *f, const char *line);

#endif
