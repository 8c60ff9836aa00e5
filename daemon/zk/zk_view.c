/*
 * zk_view.c - distributed mode, the fair queue's rules (zk_fair.c), read
 * from one listing of a name's nodes and nothing else. zk_query.c reads
 * STATUS by the same rules (mark_holders).
 */
#include "config.h"
#include "zk_view.h"

#include <string.h>

/*
 * Reads one listing of the parent. A lease node is a holder wherever it
 * sits: it replaced an ephemeral node that was first in line when it was
 * created (zl_convert), so waiters queued behind that one may come before
 * it. A node without a sequence (a kazoo Semaphore's lease) holds outside
 * the order, whatever came before or after it; it has no class (kazoo's
 * semaphore counts every child as a lease, ours too).
 */
void zk_view_of(const struct String_vector *children, const char *mine, enum lock_mode mode,
                unsigned limit, struct zview *v)
{
    const char *lowest = NULL;
    long long my_seq = zk_seq_of(mine), pred_seq = -1, blocker_seq = -1;
    struct zkind me = { mode, limit, false, 0, false, false };

    memset(v, 0, sizeof(*v));
    /* Order by the sequence suffix alone: prefixes differ between daemons. */
    for (int i = 0; i < children->count; i++) {
        const char *child = children->data[i];
        long long seq = zk_seq_of(child);
        struct zkind k = zk_kind_of(child);

        if (k.unordered) {
            if (!v->unordered || strcmp(child, v->unordered) < 0)
                v->unordered = child;     /* the same one whatever the listing's order */
            v->unordered_n++;
            continue;
        }
        if (!lowest || seq < zk_seq_of(lowest))
            lowest = child;
        if (k.lease && strcmp(child, mine) != 0) {
            if (!v->lease || seq < zk_seq_of(v->lease))
                v->lease = child;
            if (k.mode != LOCK_SHARED && (!v->lease_blocker || seq < zk_seq_of(v->lease_blocker)))
                v->lease_blocker = child;
            v->leases_after += seq > my_seq;
        }
        if (strcmp(child, mine) == 0) {
            v->found = true;
        } else if (seq > my_seq) {
            v->after++;
        } else {
            v->below++;
            if (seq > pred_seq) {
                pred_seq = seq;
                v->pred = child;
            }
            if (seq > blocker_seq && k.mode != LOCK_SHARED) {
                blocker_seq = seq;
                v->blocker = child;
            }
        }
    }
    /* The class of the name is its first holder's: a lease if any. */
    if (v->lease)
        lowest = v->lease;
    v->first_other_class = lowest && strcmp(lowest, mine) != 0 &&
                           !zk_same_class(zk_kind_of(lowest), me);
}

/*
 * Who may hold, over every node before ours whatever its class, every
 * lease node and every unordered one: exclusive - no node before it, no
 * lease, none unordered; shared - no node before it but shared ones, no
 * lease but shared ones, none unordered; limit=n - fewer than n nodes
 * before it, leases after it and unordered ones. A node whose first holder is of
 * another class is refused (CONFLICT, zk_fair.c), so classes never hold
 * together.
 */
bool zk_view_may_hold(enum lock_mode mode, unsigned limit, const struct zview *v)
{
    switch (mode) {
    case LOCK_SHARED:
        return v->blocker == NULL && v->lease_blocker == NULL && v->unordered == NULL;
    case LOCK_LIMIT:
        return v->below + v->leases_after + v->unordered_n < limit;
    default:
        return v->below == 0 && v->lease == NULL && v->unordered == NULL;
    }
}

/*
 * The one change that can let us in (no herd): the node just before ours
 * goes (exclusive), the last non-shared one before ours goes (shared), then
 * the leases that still hold, then the unordered nodes (the first by
 * name). A semaphore's first waiter (or one behind leases or unordered
 * nodes, which may sit anywhere): any holder's going. A later semaphore
 * waiter watches its predecessor, which rewrites its own data at once when
 * granted (zk_fair.c, zl_decide): then this one is first.
 */
const char *zk_view_waits_for(enum lock_mode mode, unsigned limit, const struct zview *v)
{
    if (mode == LOCK_LIMIT && (v->below + v->leases_after + v->unordered_n == limit ||
                               v->leases_after > 0 || v->unordered_n > 0))
        return NULL;
    if (mode == LOCK_SHARED)
        return v->blocker ? v->blocker : v->lease_blocker ? v->lease_blocker : v->unordered;
    return v->pred ? v->pred : v->lease ? v->lease : v->unordered;
}
