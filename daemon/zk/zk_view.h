/*
 * zk_view.h - the fair queue's rules, pure (zk_view.c): what one listing of
 * a name's nodes says about our node, whether it may hold, and which change
 * it waits for. No ZooKeeper call: zk_fair.c lists, watches and grants.
 */
#ifndef LOCKBROKER_ZK_VIEW_H
#define LOCKBROKER_ZK_VIEW_H

#include <stdbool.h>
#include <zookeeper/zookeeper.h>

#include "zk_names.h"

/* What one listing of the parent says about our node. Node names point
 * into the listing (borrowed: valid as long as it is). */
struct zview {
    bool found;                /* our node is among the children */
    bool first_other_class;    /* the first holder is of another class than ours */
    unsigned below;            /* nodes before ours */
    unsigned after;            /* nodes after ours */
    unsigned leases_after;     /* lease nodes after ours */
    const char *pred;          /* the node just before ours, or NULL */
    const char *blocker;       /* the last node before ours that is not shared, or NULL */
    const char *lease;         /* the first lease node other than ours, or NULL */
    const char *lease_blocker; /* the first lease node that is not shared, or NULL */
    unsigned unordered_n;      /* nodes without a sequence (zk_kind_of): holders */
    const char *unordered;     /* the first of them by name, or NULL */
};

/* Reads children (borrowed) for our node, the child named mine (a name,
 * not a path), whose request asks for mode (limit: LOCK_LIMIT only). */
void zk_view_of(const struct String_vector *children, const char *mine, enum lock_mode mode,
                unsigned limit, struct zview *v);
/* Whether that node may hold, by what v says. */
bool zk_view_may_hold(enum lock_mode mode, unsigned limit, const struct zview *v);
/* For a node that may not hold: the node (one of v's) whose going can let
 * it in, or NULL when any holder's going can (a semaphore's first waiter,
 * or one behind leases): it watches the parent's children then. */
const char *zk_view_waits_for(enum lock_mode mode, unsigned limit, const struct zview *v);

#endif
