/*
 * snap.c - the handover snapshot's records (see snap.h).
 */
#include "config.h"
#include "snap.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SNAP_MAGIC "lockbrokerd-snapshot"

static uint64_t fnv1a(const char *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void w_grow(struct snap_w *w, size_t more)
{
    size_t cap;
    char *nb;

    if (w->failed)
        return;
    if (w->len + more > w->max) {
        w->failed = true;
        return;
    }
    if (w->len + more <= w->cap)
        return;
    cap = w->cap ? w->cap : 4096;
    while (cap < w->len + more)
        cap *= 2;
    if (!(nb = realloc(w->buf, cap))) {
        w->failed = true;
        return;
    }
    w->buf = nb;
    w->cap = cap;
}

static void w_raw(struct snap_w *w, const char *p, size_t len)
{
    w_grow(w, len);
    if (w->failed)
        return;
    memcpy(w->buf + w->len, p, len);
    w->len += len;
}

void snap_w_init(struct snap_w *w, size_t max)
{
    char head[96];
    int n = snprintf(head, sizeof(head), SNAP_MAGIC " %d %s", SNAP_FORMAT, PACKAGE_VERSION);

    memset(w, 0, sizeof(*w));
    w->max = max;
    w_raw(w, head, (size_t)n);
}

void snap_w_rec(struct snap_w *w, const char *kind)
{
    w_raw(w, "\n", 1);
    w_raw(w, kind, strlen(kind));
    w->in_record = true;
    w->records++;
}

static void w_field(struct snap_w *w, const char *p, size_t len)
{
    w_raw(w, " ", 1);
    w_raw(w, p, len);
}

/* Decimal digits of v, written backwards from end; returns the first.
 * (snprintf took half of the time a big snapshot took to write.) */
static char *digits(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

void snap_w_u64(struct snap_w *w, uint64_t v)
{
    char buf[24], *p = digits(buf + sizeof(buf), v);

    w_field(w, p, (size_t)(buf + sizeof(buf) - p));
}

void snap_w_i64(struct snap_w *w, int64_t v)
{
    char buf[24], *p = digits(buf + sizeof(buf), v < 0 ? -(uint64_t)v : (uint64_t)v);

    if (v < 0)
        *--p = '-';
    w_field(w, p, (size_t)(buf + sizeof(buf) - p));
}

void snap_w_bool(struct snap_w *w, bool v)
{
    w_field(w, v ? "1" : "0", 1);
}

static bool needs_escape(unsigned char ch)
{
    return ch == '%' || ch < '!' || ch > '~';
}

void snap_w_bytes(struct snap_w *w, const void *p, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *s = p;
    /* A lone "-" or "." would read as NULL or as the empty string. */
    bool lone = len == 1 && (s[0] == '-' || s[0] == '.');
    size_t out = 0;

    if (len == 0) {
        w_field(w, ".", 1);
        return;
    }
    for (size_t i = 0; i < len; i++)
        out += needs_escape(s[i]) || lone ? 3 : 1;
    w_raw(w, " ", 1);
    w_grow(w, out);
    if (w->failed)
        return;
    for (size_t i = 0; i < len; i++) {
        if (needs_escape(s[i]) || lone) {
            w->buf[w->len++] = '%';
            w->buf[w->len++] = hex[s[i] >> 4];
            w->buf[w->len++] = hex[s[i] & 15];
        } else {
            w->buf[w->len++] = (char)s[i];
        }
    }
}

void snap_w_str(struct snap_w *w, const char *s)
{
    if (!s)
        w_field(w, "-", 1);
    else
        snap_w_bytes(w, s, strlen(s));
}

int snap_w_finish(struct snap_w *w, char **buf, size_t *len)
{
    char tail[80];
    uint64_t h;
    int n;

    w_raw(w, "\n", 1);
    if (w->failed) {
        snap_w_free(w);
        return -1;
    }
    h = fnv1a(w->buf, w->len);
    n = snprintf(tail, sizeof(tail), "end %" PRIu64 " %016" PRIx64 "\n", w->records, h);
    w_raw(w, tail, (size_t)n);
    if (w->failed) {
        snap_w_free(w);
        return -1;
    }
    *buf = w->buf;
    *len = w->len;
    w->buf = NULL;
    return 0;
}

void snap_w_free(struct snap_w *w)
{
    free(w->buf);
    w->buf = NULL;
    w->len = w->cap = 0;
}

bool snap_r_fail(struct snap_r *r, const char *fmt, ...)
{
    va_list ap;

    if (r->err[0])
        return false;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
    r->field = NULL;
    r->p = r->end;
    return false;
}

/*
 * p[0..len) NUL-terminated in out (at most cap - 1 bytes of it): sscanf
 * reads its input up to a NUL (glibc's measures it with strlen first), and
 * the snapshot's buffer has none after its last byte.
 */
static const char *bounded(char *out, size_t cap, const char *p, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    memcpy(out, p, len);
    out[len] = '\0';
    return out;
}

int snap_r_open(struct snap_r *r, char *buf, size_t len)
{
    char *nl, *last;
    unsigned long long records = 0, counted = 0;
    uint64_t sum;
    int format;
    char hash[17], line[64];

    memset(r, 0, sizeof(*r));
    r->p = r->end = buf;
    if (len > SNAP_MAX_BYTES)
        return snap_r_fail(r, "it is %zu bytes, more than %u", len, SNAP_MAX_BYTES), -1;
    if (len < sizeof(SNAP_MAGIC) || memcmp(buf, SNAP_MAGIC " ", sizeof(SNAP_MAGIC)) != 0)
        return snap_r_fail(r, "it is not a lockbrokerd snapshot"), -1;
    if (memchr(buf, 0, len))
        return snap_r_fail(r, "it has a NUL byte"), -1;
    if (sscanf(bounded(line, sizeof(line), buf + sizeof(SNAP_MAGIC), len - sizeof(SNAP_MAGIC)),
               "%d", &format) != 1)
        return snap_r_fail(r, "its header has no format number"), -1;
    if (format < SNAP_FORMAT_OLDEST || format > SNAP_FORMAT)
        return snap_r_fail(r, "its format is %d; this lockbrokerd reads formats %d to %d only",
                           format, SNAP_FORMAT_OLDEST, SNAP_FORMAT), -1;
    /* The end line: "end <records> <hash>\n", the last line. */
    if (buf[len - 1] != '\n')
        return snap_r_fail(r, "it is truncated (no end line)"), -1;
    for (last = buf + len - 1; last > buf && last[-1] != '\n'; last--)
        ;
    if (last == buf || sscanf(bounded(line, sizeof(line), last, (size_t)(buf + len - last)),
                              "end %llu %16[0-9a-f]", &records, hash) != 2)
        return snap_r_fail(r, "it is truncated (no end line)"), -1;
    sum = fnv1a(buf, (size_t)(last - buf));
    if (strtoull(hash, NULL, 16) != sum)
        return snap_r_fail(r, "its checksum does not match: it is corrupt"), -1;
    /* The checksum does not cover the end line: it must be spelt as written
     * (sscanf's blanks also match none, "%llu" takes leading zeros). */
    snprintf(line, sizeof(line), "end %llu %016" PRIx64 "\n", records, sum);
    if (strlen(line) != (size_t)(buf + len - last) || memcmp(line, last, strlen(line)) != 0)
        return snap_r_fail(r, "its end line is damaged: it is corrupt"), -1;
    last[-1] = '\0';
    nl = strchr(buf, '\n');
    r->p = nl && nl < last ? nl + 1 : last;
    r->end = last;
    for (char *q = r->p; q < r->end; q++)
        counted += *q == '\n';
    if (r->p < r->end)
        counted++;      /* the last record's newline is now the NUL */
    if (counted != records)
        return snap_r_fail(r, "it has %llu records, its end line says %llu", counted,
                           records), -1;
    return 0;
}

const char *snap_r_next(struct snap_r *r)
{
    char *line, *nl, *sp;
    size_t klen;

    if (r->err[0])
        return NULL;
    if (r->field)
        return snap_r_fail(r, "record %s has fields left over", r->kind), NULL;
    if (r->p >= r->end)
        return NULL;
    line = r->p;
    nl = memchr(line, '\n', (size_t)(r->end - line));
    if (nl) {
        *nl = '\0';
        r->p = nl + 1;
    } else {
        r->p = r->end;
    }
    sp = strchr(line, ' ');
    klen = sp ? (size_t)(sp - line) : strlen(line);
    if (klen == 0 || klen >= sizeof(r->kind))
        return snap_r_fail(r, "a record has no kind"), NULL;
    memcpy(r->kind, line, klen);
    r->kind[klen] = '\0';
    r->field = sp ? sp + 1 : NULL;
    return r->kind;
}

/* The next field, NUL-terminated in place. */
static char *next_field(struct snap_r *r, const char *what)
{
    char *f = r->field, *sp;

    if (!f) {
        snap_r_fail(r, "record %s lacks its %s", r->kind, what);
        return NULL;
    }
    sp = strchr(f, ' ');
    if (sp) {
        *sp = '\0';
        r->field = sp + 1;
    } else {
        r->field = NULL;
    }
    return f;
}

uint64_t snap_r_u64(struct snap_r *r)
{
    char *f = next_field(r, "number"), *end;
    unsigned long long v;

    if (!f)
        return 0;
    if (*f < '0' || *f > '9')
        return snap_r_fail(r, "record %s: '%s' is not a number", r->kind, f), 0;
    v = strtoull(f, &end, 10);
    if (*end)
        return snap_r_fail(r, "record %s: '%s' is not a number", r->kind, f), 0;
    return v;
}

int64_t snap_r_i64(struct snap_r *r)
{
    char *f = next_field(r, "number"), *end;
    long long v;

    if (!f)
        return 0;
    v = strtoll(f, &end, 10);
    if (end == f || *end)
        return snap_r_fail(r, "record %s: '%s' is not a number", r->kind, f), 0;
    return v;
}

bool snap_r_bool(struct snap_r *r)
{
    char *f = next_field(r, "flag");

    if (!f)
        return false;
    if (strcmp(f, "0") != 0 && strcmp(f, "1") != 0)
        return snap_r_fail(r, "record %s: '%s' is not 0 or 1", r->kind, f);
    return f[0] == '1';
}

static int unhex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

const char *snap_r_str(struct snap_r *r, size_t *len)
{
    char *f = next_field(r, "string"), *o;

    if (len)
        *len = 0;
    if (!f || strcmp(f, "-") == 0)
        return NULL;
    if (strcmp(f, ".") == 0)
        return "";
    o = f;
    for (char *i = f; *i; i++) {
        if (*i == '%') {
            int hi = unhex(i[1]), lo = hi < 0 ? -1 : unhex(i[2]);
            if (lo < 0)
                return snap_r_fail(r, "record %s: a bad %% escape", r->kind), NULL;
            *o++ = (char)(hi << 4 | lo);
            i += 2;
        } else {
            *o++ = *i;
        }
    }
    if (len)
        *len = (size_t)(o - f);
    /* Decoding only shrinks: a NUL after it is still inside the field. */
    *o = '\0';
    return f;
}

bool snap_r_str_copy(struct snap_r *r, char *out, size_t cap)
{
    size_t len;
    const char *s = snap_r_str(r, &len);

    out[0] = '\0';
    if (!s)
        return snap_r_ok(r);
    if (len >= cap || memchr(s, 0, len))
        return snap_r_fail(r, "record %s: a string of %zu bytes, at most %zu", r->kind, len,
                           cap - 1);
    memcpy(out, s, len + 1);
    return true;
}

bool snap_r_done(struct snap_r *r)
{
    if (r->field)
        return snap_r_fail(r, "record %s has fields left over", r->kind);
    return snap_r_ok(r);
}
