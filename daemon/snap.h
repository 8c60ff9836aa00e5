/*
 * snap.h - the handover snapshot's records (handover.h uses them).
 *
 * A snapshot is text: a header line, one record per line, and a last line
 * with a checksum of everything before it:
 *
 *   lockbrokerd-snapshot <format> <package version>
 *   <kind> <field> <field> ...
 *   ...
 *   end <records> <fnv-1a 64 of every byte above, hex>
 *
 * Fields are separated by one space. Numbers are decimal. Strings and byte
 * strings are written as they are, except that '%', bytes below '!' and
 * above '~' are written %XX; NULL is "-", the empty string ".", and a
 * string that is exactly "-" or "." has its byte escaped. A reader that
 * finds another format number, a missing or wrong end line, or a field it
 * cannot read refuses the whole snapshot (r->err says why): nothing
 * of a half-read snapshot is ever used.
 *
 * Pure: no sockets, no event loop; tests/check_snap.c runs it.
 */
#ifndef LOCKBROKER_SNAP_H
#define LOCKBROKER_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The format this build writes, and the oldest it reads. Bumped by any
 * change to a record. Format 2 added the "session" record (session.c):
 * a format 1 snapshot is a format 2 one without sessions, so a daemon of
 * the previous format can hand over to this one, not back. */
#define SNAP_FORMAT 2
#define SNAP_FORMAT_OLDEST 1

/* The largest snapshot written or read (PROTOCOL.md, Handover). */
#define SNAP_MAX_BYTES (256u * 1024 * 1024)

struct snap_w {
    char *buf;          /* owned */
    size_t len, cap;
    size_t max;         /* bound on len */
    bool failed;        /* out of memory or past max: snap_w_finish fails */
    bool in_record;
    uint64_t records;
};

/* Starts a snapshot of at most max bytes (header written). */
void snap_w_init(struct snap_w *w, size_t max);
/* Starts a record of this kind (a word of [a-z_]). */
void snap_w_rec(struct snap_w *w, const char *kind);
void snap_w_u64(struct snap_w *w, uint64_t v);
void snap_w_i64(struct snap_w *w, int64_t v);
void snap_w_bool(struct snap_w *w, bool v);
/* s NUL-terminated, or NULL. */
void snap_w_str(struct snap_w *w, const char *s);
void snap_w_bytes(struct snap_w *w, const void *p, size_t len);
/* Ends the last record and adds the end line. Returns 0 with *buf (the
 * caller owns it) and *len, or -1 (out of memory or past max; freed). */
int snap_w_finish(struct snap_w *w, char **buf, size_t *len);
/* Frees an unfinished snapshot. */
void snap_w_free(struct snap_w *w);

struct snap_r {
    char *p, *end;      /* the records not read yet; in the caller's buffer */
    char *field;        /* the current record's next field, or NULL at its end */
    char kind[32];      /* the current record's kind */
    char err[160];      /* "": no error so far */
};

/*
 * Checks buf[0..len) (which it decodes in place, so it must stay) as a whole:
 * header, format, end line, checksum. Returns 0 and readies r for the
 * records, or -1 with the reason in r->err.
 */
int snap_r_open(struct snap_r *r, char *buf, size_t len);
/* The next record: its kind, or NULL at the end (or after an error). */
const char *snap_r_next(struct snap_r *r);
/* The current record's next field; on a missing or bad one, r->err is set
 * and 0, false or NULL returned. Every field must be read. */
uint64_t snap_r_u64(struct snap_r *r);
int64_t snap_r_i64(struct snap_r *r);
bool snap_r_bool(struct snap_r *r);
/* Decoded in place; NULL for "-" (not an error). *len may be NULL. */
const char *snap_r_str(struct snap_r *r, size_t *len);
/* As snap_r_str, copied into out (cap bytes with its NUL); too long: error. */
bool snap_r_str_copy(struct snap_r *r, char *out, size_t cap);
/* The record had no field left unread; sets the error otherwise. */
bool snap_r_done(struct snap_r *r);
/* Sets the error (printf-style), unless one is set already. Returns false. */
bool snap_r_fail(struct snap_r *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline bool snap_r_ok(const struct snap_r *r) { return r->err[0] == 0; }

#endif
