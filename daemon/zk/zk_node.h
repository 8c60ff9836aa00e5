/*
 * zk_node.h - distributed mode, the node machinery (zk.h draws the layers),
 * on group commit and the session:
 *
 *   zk_names.c   what a lock node's name says (mode, limit, lease, lock-delay)
 *   zlock.c   struct zlock, one acquisition's node: bookkeeping, request
 *             and watch contexts, parking on errors
 *   zk_node.c    create (and find a create whose reply was lost), write the
 *             node's data, delete; the grant's token from a zxid
 *
 * It knows no recipe: whatever must happen next once a create, a find or a
 * delete is answered, and what a node's end means to the layers above,
 * goes through the hooks they registered (struct zl_hooks). A completion
 * or a watch carries its zlock's id, looked up again when it runs.
 */
#ifndef LOCKBROKER_ZK_NODE_H
#define LOCKBROKER_ZK_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include "zk_batch.h"
#include "zk_names.h"
#include "zlock.h"

/* ------------------------------------------------------------- zk_node.c */

/* Creates zl's node (sequential; persistent for a lease). sent, if not
 * NULL, is told with the request's context right after the multi carrying
 * the create went out. A parent this daemon does not know (a name taken
 * for the first time in a while) is created first, without data, and sets
 * zl->first_use; nothing is ever written to a parent that exists (a
 * recipe may keep its own data there: a kazoo Semaphore's lease count). */
void zl_create(struct zlock *zl, zk_batch_sent_fn sent);
/* The create of zl's node was answered rc, an error (other than a
 * non-fair node's ZNODEEXISTS). Returns true when the parent is missing
 * and the create may go again (at most max_attempts in a row): zl is
 * ZL_IDLE, and the caller makes the ancestors, then runs zl_next().
 * Otherwise parks zl (zl_park), remembering whether the node may exist
 * (a reply lost with the connection: create_uncertain). */
bool zl_create_failed(struct zlock *zl, int rc, unsigned max_attempts);
/* Lists the parent for the node whose create reply was lost. */
void zl_find_lost_create(struct zlock *zl);
/* What our node's data says now ("daemon=<id> client=<owner>[ label=..]
 * [ token=..]", zk_node.c), into buf (len bytes, truncated). */
void zl_format_data(const struct zlock *zl, char *buf, size_t len);
/* The same for a setData whose own zxid makes the grant's token (a
 * non-fair node's): "token=mzxid", which readers take from the node's
 * mzxid, so the token is there as soon as the write is. */
void zl_format_token_data(const struct zlock *zl, char *buf, size_t len);
/* Queues a write of our node's current data; done gets a nodecall.
 * Returns ZOK, or the error with nothing sent. */
int zl_send_data(struct zlock *zl, stat_completion_t done);
/* Rewrites our node's data with the current owner, once at a time. */
void zl_write_data(struct zlock *zl);
/* Writes the token of a grant just made to our node, for the views of
 * other daemons (zk_query.c), but not at once: TOKEN_WRITE_DELAY_MS later
 * (zk_node.c), and never if a write of the node's data (which carries the
 * token while it is held) or its delete goes first. */
void zl_write_token(struct zlock *zl);
/* Sends every token write put off, now (a handover waits for none). */
void zl_write_tokens_now(struct zk *zk);
/* The grant's token, made from zxid into zl->token (ztoken.h); false when
 * the zxid is too large (zl is detached, its request refused). */
bool zl_take_token(struct zlock *zl, int64_t zxid);
/* Deletes our node (its completion decides what next). */
void zl_delete(struct zlock *zl);
/* Our node goes now, or, while not connected, once connected. */
void zl_delete_when_connected(struct zlock *zl);
/* Our node is gone: forgets it (writes and watches for it become stale). */
void zl_node_gone(struct zlock *zl);
/* Whether a lock's parent (<root>/locks/<name>) is known to exist: a node
 * was created or its parent created under it lately. zl_create() sends
 * the create of a parent it does not know right before the multi that
 * carries the node's own. At most KNOWN_PARENTS are remembered, oldest forgotten. */
bool zl_parent_is_known(struct zk *zk, const char *parent);
void zl_parent_known(struct zk *zk, const char *parent, bool known);
/* Forgets them all (the node machinery is being freed). */
void zl_parents_forget_all(struct zk *zk);
/* An [interop] name (conf/interop.h): its rule's path, '*' replaced by
 * name, into buf (len bytes), and its profile. Any other name (or a path
 * that does not fit): INTEROP_NONE, buf unchanged. */
enum interop_profile zk_interop_parent(const struct zk *zk, const char *name, char *buf,
                                       size_t len);

#endif
