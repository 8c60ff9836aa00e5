/*
 * zk_names.c - distributed mode, node machinery: what a lock node's name
 * says. Every daemon reads the others' nodes by these rules (zk_fair.c,
 * zk_lease.c, zk_query.c), so they change only with the node names themselves.
 */
#include "config.h"
#include "zk_names.h"

#include <stdlib.h>
#include <string.h>

/* The sequence number ZooKeeper appended: the last 10 characters. */
long long zk_seq_of(const char *child)
{
    size_t len = strlen(child);

    return len >= 10 ? strtoll(child + len - 10, NULL, 10) : -1;
}

/*
 * "<daemon>-<id>-<tag>-<seq>": tag "shared", "limit<n>" or "excl", followed
 * by ".lease" on a lease's persistent node, then by ".d<ms>" when the
 * request has a lock-delay (PROTOCOL.md, Lock-delay). Nodes
 * of daemons older than lock modes have no tag (the field before the
 * sequence is their numeric id): they are exclusive, as is anything
 * unknown, which can only make this daemon wait longer, never grant more.
 */
struct zkind zk_kind_of(const char *child)
{
    struct zkind k = { LOCK_EXCLUSIVE, 0, false, 0 };
    size_t len = strlen(child);
    const char *end, *tag, *d;
    char *stop;
    unsigned long n;

    if (len < 12 || child[len - 11] != '-')
        return k;
    end = child + len - 11;
    for (tag = end; tag > child && tag[-1] != '-'; tag--)
        ;
    /* ".d<ms>" last: digits only, up to the bound of delay=. */
    for (d = end; d > tag && d[-1] >= '0' && d[-1] <= '9'; d--)
        ;
    if (d < end && d - tag >= 2 && d[-1] == 'd' && d[-2] == '.') {
        n = strtoul(d, &stop, 10);
        if (stop == end && n <= 60000) {
            k.delay_ms = (int64_t)n;
            end = d - 2;
        }
    }
    if (end - tag > 6 && strncmp(end - 6, ".lease", 6) == 0) {
        k.lease = true;
        end -= 6;
    }
    if (end - tag == 6 && strncmp(tag, "shared", 6) == 0) {
        k.mode = LOCK_SHARED;
    } else if (end - tag > 5 && strncmp(tag, "limit", 5) == 0 && tag[5] >= '1' &&
               tag[5] <= '9') {
        n = strtoul(tag + 5, &stop, 10);
        if (stop == end && n <= LOCK_LIMIT_MAX) {
            k.mode = LOCK_LIMIT;
            k.limit = (unsigned)n;
        }
    }
    return k;
}

/* Semaphores of one limit are one class, read/write locks the other:
 * requests of different classes never hold a name together. */
bool zk_same_class(struct zkind a, struct zkind b)
{
    if ((a.mode == LOCK_LIMIT) != (b.mode == LOCK_LIMIT))
        return false;
    return a.mode != LOCK_LIMIT || a.limit == b.limit;
}
