/*
 * restart.c - the registry of restart parts and the snapshot's head (see
 * restart.h).
 */
#include "config.h"
#include "restart.h"

#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "snap.h"

const char *const restart_listener_names[RESTART_LISTENERS] = {
    [RESTART_TCP] = "tcp", [RESTART_UNIX] = "unix", [RESTART_TLS] = "tls",
    [RESTART_METRICS] = "metrics",
};

/* ----------------------------------------------------------- the head */

void restart_head_save(struct snap_w *w, const struct restart_head *h)
{
    snap_w_rec(w, "daemon");
    snap_w_str(w, h->daemon_id);
    snap_w_str(w, h->mode);
    snap_w_i64(w, h->stopped_us);
    snap_w_i64(w, h->started);
    snap_w_u64(w, h->handovers);
    snap_w_u64(w, h->conns_total);
    for (int i = 0; i < RESTART_LISTENERS; i++)
        snap_w_i64(w, h->listeners[i]);
}

bool restart_head_read(struct snap_r *r, struct restart_head *h)
{
    const char *kind = snap_r_next(r);

    if (!kind || strcmp(kind, "daemon") != 0)
        return snap_r_fail(r, "it does not begin with the daemon's record");
    snap_r_str_copy(r, h->daemon_id, sizeof(h->daemon_id));
    snap_r_str_copy(r, h->mode, sizeof(h->mode));
    h->stopped_us = snap_r_i64(r);
    h->started = snap_r_i64(r);
    h->handovers = snap_r_u64(r);
    h->conns_total = snap_r_u64(r);
    for (int i = 0; i < RESTART_LISTENERS; i++)
        h->listeners[i] = (int)snap_r_i64(r);
    return snap_r_done(r);
}

/* ------------------------------------------------------- the registry */

void restart_register(struct restart *reg, const struct restart_part *part, void *data)
{
    /* A fixed set, registered once at start: more is a programming error. */
    if (reg->n == RESTART_PARTS_MAX)
        abort();
    reg->parts[reg->n].part = part;
    reg->parts[reg->n].data = data;
    reg->n++;
}

unsigned restart_shed(struct restart *reg)
{
    unsigned n = 0;

    for (unsigned i = 0; i < reg->n; i++)
        if (reg->parts[i].part->shed)
            n += reg->parts[i].part->shed(reg->parts[i].data);
    return n;
}

bool restart_ready(struct restart *reg, char *why, size_t len)
{
    for (unsigned i = 0; i < reg->n; i++)
        if (reg->parts[i].part->ready && !reg->parts[i].part->ready(reg->parts[i].data, why, len))
            return false;
    return true;
}

void restart_save(struct restart *reg, struct snap_w *w)
{
    for (unsigned i = 0; i < reg->n; i++)
        reg->parts[i].part->save(reg->parts[i].data, w);
}

void restart_each_fd(struct restart *reg, void (*fn)(void *arg, int fd, uint64_t id), void *arg)
{
    for (unsigned i = 0; i < reg->n; i++)
        if (reg->parts[i].part->each_fd)
            reg->parts[i].part->each_fd(reg->parts[i].data, fn, arg);
}

void restart_resume(struct restart *reg, bool taken_over)
{
    for (unsigned i = 0; i < reg->n; i++)
        if (reg->parts[i].part->resume)
            reg->parts[i].part->resume(reg->parts[i].data, taken_over);
}

/* ------------------------------------------------------- the successor */

/* An object kept under its key while restoring. */
struct kept {
    char letter;
    uint64_t n;
    void *obj;
};

static int by_key(const void *a, const void *b)
{
    const struct kept *x = a, *y = b;

    if (x->letter != y->letter)
        return x->letter < y->letter ? -1 : 1;
    return x->n < y->n ? -1 : x->n > y->n;
}

bool restart_keep(struct restart_in *in, struct snap_r *r, char letter, uint64_t n, void *obj)
{
    struct kept *k = malloc(sizeof(*k)), **found;

    if (!k)
        return snap_r_fail(r, "out of memory");
    *k = (struct kept){ letter, n, obj };
    if (!(found = tsearch(k, &in->keys, by_key))) {
        free(k);
        return snap_r_fail(r, "out of memory");
    }
    if (*found != k) {
        free(k);
        return snap_r_fail(r, "%c%llu is there twice", letter, (unsigned long long)n);
    }
    return true;
}

void *restart_find(const struct restart_in *in, char letter, uint64_t n)
{
    struct kept key = { letter, n, NULL }, *const *found = tfind(&key, &in->keys, by_key);

    return found ? (*found)->obj : NULL;
}

/* The part and kind that read records of kind, or false. */
static bool kind_of(const struct restart *reg, const char *kind, unsigned *part, unsigned *k)
{
    for (unsigned i = 0; i < reg->n; i++) {
        const struct restart_kind *kinds = reg->parts[i].part->kinds;

        for (unsigned j = 0; kinds && kinds[j].kind; j++)
            if (strcmp(kinds[j].kind, kind) == 0) {
                *part = i;
                *k = j;
                return true;
            }
    }
    return false;
}

bool restart_restore(struct restart *reg, struct snap_r *r, struct restart_in *in)
{
    const char *kind;
    unsigned i, k;

    while ((kind = snap_r_next(r))) {
        if (!kind_of(reg, kind, &i, &k)) {
            snap_r_fail(r, "an unknown record %s", kind);
            break;
        }
        if (!reg->parts[i].part->kinds[k].restore(reg->parts[i].data, r, in)) {
            if (snap_r_ok(r))
                snap_r_fail(r, "record %s could not be read", kind);
            break;
        }
        if (k < sizeof(reg->parts[i].read) / sizeof(reg->parts[i].read[0]))
            reg->parts[i].read[k]++;
    }
    for (i = 0; i < reg->n && snap_r_ok(r); i++)
        if (reg->parts[i].part->restored)
            reg->parts[i].part->restored(reg->parts[i].data, r, in);
    tdestroy(in->keys, free);
    in->keys = NULL;
    return snap_r_ok(r);
}

uint64_t restart_records(const struct restart *reg, const char *kind)
{
    unsigned i, k;

    if (!kind_of(reg, kind, &i, &k) || k >= sizeof(reg->parts[i].read) /
                                           sizeof(reg->parts[i].read[0]))
        return 0;
    return reg->parts[i].read[k];
}
