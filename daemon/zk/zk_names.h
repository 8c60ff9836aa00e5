/*
 * zk_names.h - what a lock node's name says (zk_names.c), read by every layer
 * from the node machinery up (zk.h draws the layers).
 */
#ifndef LOCKBROKER_ZK_NAMES_H
#define LOCKBROKER_ZK_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "interop.h"
#include "locks.h"

/* The sequence number ZooKeeper appended to child: its last 10 digits,
 * right after a character that is neither a letter nor a digit (or the
 * whole name); -1 for a name without one (zk_kind_of: unordered). */
long long zk_seq_of(const char *child);

/* A ZooKeeper recipe's marker, the text right before its nodes' sequence
 * (PROTOCOL.md, Sharing locks with ZooKeeper recipes). */
struct zk_marker {
    const char *text;          /* "__lock__", "-lock-", ... */
    enum lock_mode mode;       /* LOCK_EXCLUSIVE or LOCK_SHARED */
    const char *recipes;       /* who writes it, for logs and docs */
};
/* The markers read on every name: ZK_MARKERS of them. */
#define ZK_MARKERS 5
extern const struct zk_marker zk_markers[ZK_MARKERS];
/* The marker right before child's sequence, or NULL (ours, or unknown). */
const struct zk_marker *zk_marker_of(const char *child);
/* Whether the len bytes at s hold any marker: a prefix of a node this
 * daemon writes in a recipe's format must hold none before its own. */
bool zk_has_marker(const char *s, size_t len);

/* What a lock node asks for, from the tag in its name. */
struct zkind {
    enum lock_mode mode;
    unsigned limit;            /* LOCK_LIMIT only */
    bool lease;                /* a lease's persistent node (tag has ".lease") */
    int64_t delay_ms;          /* its request's lock-delay (tag ends in ".d<ms>"), or 0 */
    bool recipe;               /* a recipe's marker says mode (zk_marker_of) */
    bool unordered;            /* no sequence (a kazoo Semaphore's lease): it holds
                                * outside the order while it exists (zk_view.c) */
};
/* Every name has a kind: a marker's, our tag's, no sequence (unordered),
 * or else exclusive. */
struct zkind zk_kind_of(const char *child);
/* Semaphores of one limit are one class, read/write locks the other:
 * requests of different classes never hold a name together. */
bool zk_same_class(struct zkind a, struct zkind b);

/* ------------------------------------------------ [interop] node names */
/*
 * On an [interop] name (conf/interop.h) our nodes are named as the foreign
 * recipe names its own, so that it queues behind them and they behind it:
 *
 *   curator     _c_<uuid>-lock-<seq>                 (Curator's protected mode)
 *   curator-rw  _c_<uuid>-__WRIT__<seq>, _c_<uuid>-__READ__<seq>
 *   kazoo       <32 hex>__lock__<seq>, <32 hex>__rlock__<seq>   (kazoo's uuid4().hex)
 *
 * where the 32 hex digits (the uuid's, without its dashes) are
 * zk_daemon_tag(daemon id) then our request id, 16 each: what finds our
 * node again when a create's reply is lost. None of the five markers
 * (__lock__, __rlock__, -lock-, __WRIT__, __READ__) can occur in them.
 */
/* A daemon's 64 bits in its interop node names (FNV-1a of its id). */
uint64_t zk_daemon_tag(const char *daemon_id);
/* The name of our node before ZooKeeper's 10 digits, for profile p (not
 * INTEROP_NONE) and mode (LOCK_EXCLUSIVE or LOCK_SHARED), into buf (at
 * least 64 bytes). */
void zk_interop_prefix(enum interop_profile p, enum lock_mode mode, uint64_t tag, uint64_t id,
                       char *buf, size_t len);
/* Whether child is a node named by zk_interop_prefix, of any profile and
 * daemon: true with its tag and request id. */
bool zk_interop_parse(const char *child, uint64_t *tag, uint64_t *id);
/* The profile of a node zk_interop_parse() takes, else INTEROP_NONE. */
enum interop_profile zk_interop_profile_of(const char *child);

#endif
