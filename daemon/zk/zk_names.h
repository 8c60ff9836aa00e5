/*
 * zk_names.h - what a lock node's name says (zk_names.c), read by every layer
 * from the node machinery up (zk.h draws the layers).
 */
#ifndef LOCKBROKER_ZK_NAMES_H
#define LOCKBROKER_ZK_NAMES_H

#include <stdbool.h>
#include <stdint.h>

#include "interop.h"
#include "locks.h"

/* The sequence number ZooKeeper appended to child: its last 10 digits. */
long long zk_seq_of(const char *child);
/* What a lock node asks for, from the tag in its name. */
struct zkind {
    enum lock_mode mode;
    unsigned limit;            /* LOCK_LIMIT only */
    bool lease;                /* a lease's persistent node (tag has ".lease") */
    int64_t delay_ms;          /* its request's lock-delay (tag ends in ".d<ms>"), or 0 */
};
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
