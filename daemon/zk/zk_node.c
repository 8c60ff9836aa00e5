/*
 * zk_node.c - distributed mode, node machinery: one acquisition's node in
 * ZooKeeper (zk_node.h).
 *
 * Each acquisition has an EPHEMERAL_SEQUENTIAL node
 * <root>/locks/<name>/<daemon>-<id>-<tag>-NNNNNNNNNN (a lease's is
 * persistent, zk_lease_lock.c); on an [interop] name, under its rule's
 * path and named as its recipe names its own (zk_names.h). Creates, deletes and writes of the node's
 * data go out in multis (zk_batch.c). A create whose reply was lost is looked
 * for by name after reconnecting, and deletes are retried until they
 * succeed, the node is gone, or the session is. Once a create, a find or
 * a delete is answered, zl_next() lets the layer above decide.
 */
#include "config.h"
#include "zk_node.h"

#include <event2/event.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#include "log.h"
#include "ztoken.h"

/* How often ancestors may be re-created for one acquisition before we wait
 * for the retry timer (a container parent can vanish between two calls). */
#define CREATE_ATTEMPTS 5

/* ---------------------------------------------------------- the node's data */


/* Completion of a write of our node's data, which nothing waits for. */
static void on_data_written(int rc, const struct Stat *stat, const void *data)
{
    struct zlock *zl = nodecall_done((struct nodecall *)data);

    if (rc != ZOK && rc != ZNONODE)
        log_debug("zk: writing a node's data: %s", zerror(rc));
    if (!zl)
        return;
    zl->data_writing = false;
    if (rc != ZOK && rc != ZNONODE)
        zl->data_stale = true;    /* written again once connected (zl_start) */
    else if (zl->data_stale && (zl->hold || zl->idle))
        zl_write_data(zl);        /* the owner changed meanwhile */
}

/*
 * "daemon=<id> client=<owner>[ label=<label>][ token=<token>][ deadline=<ms>]":
 * who a node is for, read by STATUS, HOLDERS and WATCH on every daemon
 * (zk_query.c). token=: the token its holder was given, once granted (the
 * same hold, token and state as locks_drop_held's "held"); a lease's is
 * not written, readers make it from the lease node's czxid as the grant
 * did (zk_lease_lock.c). by_write: this very write's zxid makes the grant's
 * token (a non-fair node's setData, zk_nonfair.c): "token=mzxid".
 */
static void format_data(const struct zlock *zl, bool by_write, char *buf, size_t len)
{
    const char *label = zl->hold ? hold_label(zl->hold) : NULL;
    bool granted = zl->hold && zl->step == ZL_HELD && !zl->awaiting_token && !zl->lease;
    int n = snprintf(buf, len, "daemon=%s client=%s%s%s", zl->zk->daemon_id,
                     zl->hold ? hold_owner_desc(zl->hold) : "-", label ? " label=" : "",
                     label ? label : "");

    if (n > 0 && (size_t)n < len && (granted || (by_write && zl->hold)))
        n += snprintf(buf + n, len - (size_t)n, by_write ? " token=mzxid" : " token=%llu",
                      (unsigned long long)zl->token);
    /* A lease's end, as wall-clock ms: what any daemon may remove it by. */
    if (zl->lease && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " deadline=%lld",
                 (long long)(zk_now_ms() + zl->ttl_ms));
}

void zl_format_data(const struct zlock *zl, char *buf, size_t len)
{
    format_data(zl, false, buf, len);
}

void zl_format_token_data(const struct zlock *zl, char *buf, size_t len)
{
    format_data(zl, true, buf, len);
}

/*
 * Queues a write of our node's current data (zk_batch.c: it may share a
 * multi's zxid with other writes); done gets a nodecall. Returns ZOK, or
 * the error with nothing sent. It carries a token write put off.
 */
int zl_send_data(struct zlock *zl, stat_completion_t done)
{
    struct zk *zk = zl->zk;
    struct nodecall *n = nodecall_new(zl);
    char data[512];
    int rc;

    if (!n)
        return ZSYSTEMERROR;
    zl_format_data(zl, data, sizeof(data));
    if ((rc = zk_batch_set(zk, zl->node, data, (int)strlen(data), -1, done, n)) != ZOK) {
        free(n);
        return rc;
    }
    zl_token_unqueue(zl);
    zl->data_stale = false;
    zl->data_writing = true;
    zk->outstanding++;
    zk_kick(zk);
    return ZOK;
}

/*
 * Rewrites our node's data with the current owner. A data watch on the
 * node fires, so this also wakes the waiter behind it, which is how a
 * semaphore's next waiter learns that it is now the first one. Sent
 * without a zcall: nothing waits for the reply, and the zlock's
 * generation (which keeps a pending watch valid) must not change.
 */
void zl_write_data(struct zlock *zl)
{
    zl->data_stale = true;
    /* One write at a time: its completion sends the newest owner, so a lock
     * passed on locally many times meanwhile costs one more write, not one
     * per handoff. No token depends on its zxid. */
    if (zl->node && zl->zk->state == ZK_CONNECTED && !zl->data_writing)
        zl_send_data(zl, on_data_written);
}

/* ------------------------------------------------------ the grant's token */

/*
 * A grant through the queue writes the holder's token to its node, for
 * STATUS, HOLDERS and WATCH on other daemons: a transaction (fsync'd) of
 * its own when no other write goes with it. Most holds of a busy lock end
 * sooner than this: the write waits as long, and a hold that ends first
 * (its node deleted, or kept idle, a write of its own) never pays for it.
 * Other daemons' views lag the grant by as much more (PROTOCOL.md, What
 * other daemons see); no token and no grant depends on the write.
 */
#define TOKEN_WRITE_DELAY_MS 50

/* The timer, for the oldest write put off (all wait as long: the first
 * one is due first). */
static void token_arm(struct zk *zk)
{
    struct zlock *zl = TAILQ_FIRST(&zk->nodes->tokens_due);

    if (zl)
        zl_timer_at(zk->nodes->token_timer, zl->token_due_us);
}

/* Writes zl's token now, if it still holds with it. */
static void token_write(struct zlock *zl)
{
    zl_token_unqueue(zl);
    if (zl->hold && zl->step == ZL_HELD && !zl->awaiting_token)
        zl_write_data(zl);
    else
        zl->zk->nodes->token_writes_spared++;   /* whatever comes next rewrites or deletes */
}

static void on_token_due(evutil_socket_t fd, short what, void *arg)
{
    struct zk *zk = arg;
    int64_t now = locks_mono_us();
    struct zlock *zl;

    while ((zl = TAILQ_FIRST(&zk->nodes->tokens_due)) && zl->token_due_us <= now)
        token_write(zl);
    token_arm(zk);
}

void zl_write_token(struct zlock *zl)
{
    struct zk_nodes *n = zl->zk->nodes;

    zl->data_stale = true;   /* a write that goes meanwhile carries it */
    if (zl->token_put_off)
        return;
    if (!n->token_timer && !(n->token_timer = evtimer_new(zl->zk->base, on_token_due, zl->zk))) {
        zl_write_data(zl);   /* cannot wait: write it now */
        return;
    }
    zl->token_put_off = true;
    zl->token_due_us = locks_mono_us() + TOKEN_WRITE_DELAY_MS * 1000;
    TAILQ_INSERT_TAIL(&n->tokens_due, zl, token_link);
    n->ntokens_due++;
    if (!evtimer_pending(n->token_timer, NULL))
        token_arm(zl->zk);
}

void zl_write_tokens_now(struct zk *zk)
{
    struct zlock *zl;

    while ((zl = TAILQ_FIRST(&zk->nodes->tokens_due)))
        token_write(zl);
}

/*
 * The grant's token, made from zxid into zl->token (ztoken.h). A zxid too
 * large for a token is refused rather than wrapped: the request gets
 * UNAVAILABLE and our node goes. Returns false then (zl is detached).
 */
bool zl_take_token(struct zlock *zl, int64_t zxid)
{
    struct hold *h;

    if (ztoken_of_zxid(zxid, &zl->token))
        return true;
    log_error("zk: zxid %lld is beyond what a fencing token can carry (2^56); "
              "not granting %s", (long long)zxid, zl->parent);
    h = zl_detach(zl);
    zl_delete(zl);
    if (h)
        locks_backend_refused(h, LOCKS_UNAVAILABLE);
    return false;
}

/* ----------------------------------------------------- parents known */

/* Parents remembered as existing; a forgotten one costs one failed multi
 * (its create finds it there) the next time, nothing worse. */
#define KNOWN_PARENTS 65536

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct known_parent *)a)->path,
                  ((const struct known_parent *)b)->path);
}

/* A lookup on every create: its key lives on the stack. */
static struct known_parent *known_find(struct zk *zk, const char *parent)
{
    struct known_parent key = { .path = parent };
    void *found = tfind(&key, &zk->nodes->known_by_path, by_path);

    return found ? *(struct known_parent **)found : NULL;
}

static void known_drop(struct zk *zk, struct known_parent *k)
{
    tdelete(k, &zk->nodes->known_by_path, by_path);
    TAILQ_REMOVE(&zk->nodes->known, k, link);
    zk->nodes->nknown--;
    free(k);
}

bool zl_parent_is_known(struct zk *zk, const char *parent)
{
    return known_find(zk, parent) != NULL;
}

void zl_parent_known(struct zk *zk, const char *parent, bool known)
{
    struct known_parent *k = known_find(zk, parent);
    size_t len;

    if (!known) {
        if (k)
            known_drop(zk, k);
        return;
    }
    if (k)
        return;
    if (zk->nodes->nknown >= KNOWN_PARENTS)
        known_drop(zk, TAILQ_FIRST(&zk->nodes->known));
    len = strlen(parent) + 1;
    if (!(k = malloc(sizeof(*k) + len)))
        return;               /* not remembered: a create of it goes again */
    memcpy(k->buf, parent, len);
    k->path = k->buf;
    if (!tsearch(k, &zk->nodes->known_by_path, by_path)) {
        free(k);
        return;
    }
    TAILQ_INSERT_TAIL(&zk->nodes->known, k, link);
    zk->nodes->nknown++;
}

void zl_parents_forget_all(struct zk *zk)
{
    struct known_parent *k;

    while ((k = TAILQ_FIRST(&zk->nodes->known)))
        known_drop(zk, k);
}

enum interop_profile zk_interop_parent(const struct zk *zk, const char *name, char *buf,
                                       size_t len)
{
    const struct interop_rule *rule = interop_match(&zk->settings->interop, name);
    char path[512];

    if (!rule || interop_path(rule, name, path, sizeof(path)) < 0 || strlen(path) >= len)
        return INTEROP_NONE;
    memcpy(buf, path, strlen(path) + 1);
    return rule->profile;
}

/* Context of a parent's create sent right before a first node's. */
struct parent_call {
    struct zk *zk;
    char path[];
};

/* It exists now, made by us (ZOK) or by someone before (ZNODEEXISTS); any
 * other answer leaves it unknown, and the node's create says what to do. */
static void on_parent_made(int rc, const char *value, const void *data)
{
    struct parent_call *pc = (struct parent_call *)data;

    pc->zk->outstanding--;
    zl_parent_known(pc->zk, pc->path, rc == ZOK || rc == ZNODEEXISTS);
    free(pc);
}

/*
 * A lock taken for the first time (in a while) through this daemon: its
 * parent is created (a container; persistent on an [interop] name, where
 * a foreign recipe goes on using it) right away, ahead of the multi that will
 * carry the node's create, rather than that create failing for the missing
 * parent and failing with it every write of its multi. Not in the multi
 * itself: a parent that exists would fail it all the same (and the C
 * client cannot read a container's create in a multi's reply). It is
 * taken as known at once, so that the other requests of the name queued
 * meanwhile do not create it again.
 */
static void zl_make_parent(struct zk *zk, const char *parent, bool persistent)
{
    size_t len = strlen(parent) + 1;
    struct parent_call *pc = malloc(sizeof(*pc) + len);

    if (!pc)
        return;               /* the node's create finds it missing: ZNONODE */
    pc->zk = zk;
    memcpy(pc->path, parent, len);
    if (zoo_acreate(zk->zh, parent, NULL, -1, zk->acl, persistent ? 0 : ZOO_CONTAINER,
                    on_parent_made, pc) != ZOK) {
        free(pc);
        return;
    }
    zk->outstanding++;
    zl_parent_known(zk, parent, true);
}

/* ---------------------------------------------------------------- create */

static void on_ancestor_created(int rc, const char *value, const void *data)
{
    struct parent_call *pc = (struct parent_call *)data;
    struct zk *zk = pc->zk;

    zk->outstanding--;
    /* ZNONODE is the normal course on a new root: only the name's parent
     * was sent, <root>/locks is missing too, and the next failed create
     * sends the whole chain (zk_create_ancestors). A ZNOAUTH is said: the
     * node's own create then fails with ZNONODE, which says nothing of
     * why (an [interop] path whose owner's ACL keeps us out). */
    if (rc == ZNONODE)
        log_debug("zk: creating a parent node: %s; its ancestors follow", zerror(rc));
    else if (rc == ZNOAUTH)
        zk_report_noauth(zk, pc->path);
    else if (rc != ZOK && rc != ZNODEEXISTS && rc != ZCONNECTIONLOSS && rc != ZCLOSING &&
             rc != ZSESSIONEXPIRED && rc != ZOPERATIONTIMEOUT)
        log_warn("zk: creating a parent node: %s", zerror(rc));
    free(pc);
}

/* Sends creates for the lock's parent (a container, so that the server
 * removes it once empty) and, with all, first for <root> and <root>/locks
 * (persistent). Their replies do not matter: the create of our node that
 * follows them says it all. A name used once finds <root>/locks there:
 * only its parent is created (a create that fails is a transaction too),
 * and the whole chain only when the create failed again. persistent: the
 * parent too (an [interop] path: kazoo and Curator keep using a parent
 * they made once, and fail with NoNode if the server reaps it). */
static void zk_create_ancestors(struct zk *zk, const char *parent, bool all, bool persistent)
{
    for (const char *p = all ? strchr(parent + 1, '/') : NULL;; p = strchr(p + 1, '/')) {
        size_t len = p ? (size_t)(p - parent) : strlen(parent);
        int flags = p || persistent ? 0 : ZOO_CONTAINER;

        struct parent_call *pc = malloc(sizeof(*pc) + len + 1);

        if (pc) {
            pc->zk = zk;
            snprintf(pc->path, len + 1, "%.*s", (int)len, parent);
            if (zoo_acreate(zk->zh, pc->path, NULL, -1, zk->acl, flags, on_ancestor_created,
                            pc) == ZOK)
                zk->outstanding++;
            else
                free(pc);
        }
        if (!p)
            break;
    }
}

static void on_created(int rc, const char *value, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl)
        return;
    switch (rc) {
    case ZOK:
        zl_parent_known(zl->zk, zl->parent, true);
        zl->node = strdup(value);
        zl->create_uncertain = false;
        if (!zl->node) {   /* cannot track it: let the session's end remove it */
            log_error("zk: out of memory tracking %s", value);
            zl_try_unavailable(zl);
            zl->step = ZL_IDLE;
            return;
        }
        log_debug("zk: created %s", zl->node);
        if (zl->data_stale)
            zl_write_data(zl);
        if (zl->listing_sent && zl->hold && !zl->lease) {
            zl->listing_sent = false;
            zl->step = ZL_LISTING;   /* its reply comes next: on_listed */
            break;
        }
        zl_next(zl);             /* a new request makes that listing stale */
        break;
    default:
        /* The parent is missing (never made, or an empty container removed). */
        if (zl_create_failed(zl, rc, CREATE_ATTEMPTS)) {
            /* An [interop] path may be deep and new: the whole chain at once. */
            zk_create_ancestors(zl->zk, zl->parent, zl->create_attempts > 1 || zl->interop,
                                zl->interop != INTEROP_NONE);
            zl_parent_known(zl->zk, zl->parent, true);   /* sent ahead of the retry */
            zl_next(zl);
        }
        break;
    }
}

bool zl_create_failed(struct zlock *zl, int rc, unsigned max_attempts)
{
    switch (rc) {
    case ZNONODE:
        zl->create_uncertain = false;
        zl->step = ZL_IDLE;
        if (zl->create_attempts < max_attempts)
            return true;
        zl->create_attempts = 0;
        break;
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZCLOSING:           /* the handle was reopened: whether it went out is unknown */
        /* The node may exist: look for it by name once connected again. */
        zl->create_uncertain = true;
        break;
    default:
        zl->create_uncertain = false;   /* session gone: so is any node */
        break;
    }
    zl_park(zl, rc);
    return false;
}

void zl_create(struct zlock *zl, zk_batch_sent_fn sent)
{
    struct zk *zk = zl->zk;
    char prefix[512], data[512], tag[24];
    struct zcall *c = zl_begin(zl, ZL_CREATING);
    int rc;

    if (!c)
        return;

    if (zl->mode == LOCK_LIMIT)
        snprintf(tag, sizeof(tag), "limit%u%s", zl->limit, zl->lease ? ".lease" : "");
    else
        snprintf(tag, sizeof(tag), "%s%s", zl->mode == LOCK_SHARED ? "shared" : "excl",
                 zl->lease ? ".lease" : "");
    if (zl->delay_ms > 0)
        snprintf(tag + strlen(tag), sizeof(tag) - strlen(tag), ".d%lld",
                 (long long)zl->delay_ms);
    /* The daemon id and request id make the node findable if the reply is
     * lost; the tag tells every daemon what the node asks for. On an
     * [interop] name, the foreign recipe's own name carries the same ids
     * (zk_names.h) and the mode; no ttl=, limit= or delay= reaches here. */
    if (zl->interop) {
        char name[80];

        zk_interop_prefix(zl->interop, zl->mode, zk_daemon_tag(zk->daemon_id), zl->id, name,
                          sizeof(name));
        snprintf(prefix, sizeof(prefix), "%s/%s", zl->parent, name);
    } else {
        snprintf(prefix, sizeof(prefix), "%s/%s-%llu-%s-", zl->parent, zk->daemon_id,
                 (unsigned long long)zl->id, tag);
    }
    zl->data_stale = false;
    zl_format_data(zl, data, sizeof(data));
    if (!zl_parent_is_known(zk, zl->parent)) {
        zl->first_use = true;
        zl_make_parent(zk, zl->parent, zl->interop != INTEROP_NONE);
    }
    zl->create_attempts++;
    zl->create_sent = true;
    zl->listing_sent = false;
    /* A lease outlives this daemon's session: its node is persistent. */
    rc = zk_batch_create(zk, prefix, data, (int)strlen(data), zk->acl,
                         zl->lease ? ZOO_PERSISTENT_SEQUENTIAL : ZOO_EPHEMERAL_SEQUENTIAL,
                         on_created, sent, c);
    zk_sent(zl, c, rc, "create");
}

/* ------------------------------------------------ find a lost create's node */

static void on_found(int rc, const struct String_vector *children, const void *data)
{
    struct zlock *zl = zcall_done(data);
    char prefix[128];

    if (!zl)
        return;
    if (rc != ZOK && rc != ZNONODE) {
        zl_park(zl, rc);
        return;
    }
    zl->create_uncertain = false;
    snprintf(prefix, sizeof(prefix), "%s-%llu-", zl->zk->daemon_id, (unsigned long long)zl->id);
    for (int i = 0; rc == ZOK && i < children->count; i++) {
        uint64_t tag, id;

        /* Ours in either naming: a handover's successor may not know which. */
        if (strncmp(children->data[i], prefix, strlen(prefix)) == 0 ||
            (zk_interop_parse(children->data[i], &tag, &id) && id == zl->id &&
             tag == zk_daemon_tag(zl->zk->daemon_id))) {
            size_t len = strlen(zl->parent) + strlen(children->data[i]) + 2;
            if ((zl->node = malloc(len)))
                snprintf(zl->node, len, "%s/%s", zl->parent, children->data[i]);
            log_info("zk: found %s, whose create reply was lost", zl->node);
            if (zl->data_stale)
                zl_write_data(zl);
            break;
        }
    }
    zl_next(zl);
}

void zl_find_lost_create(struct zlock *zl)
{
    struct zcall *c = zl_begin(zl, ZL_FINDING);

    if (c)
        zk_sent(zl, c, zoo_aget_children(zl->zk->zh, zl->parent, 0, on_found, c),
                "getChildren");
}

/* ---------------------------------------------------------------- delete */

static void on_deleted(int rc, const void *data)
{
    struct zlock *zl = zcall_done(data);

    if (!zl)
        return;
    if (rc == ZOK || rc == ZNONODE) {
        zl_node_gone(zl);
        zl_next(zl);
        return;
    }
    if (rc == ZSESSIONEXPIRED && !zl->lease) {   /* the node went with the session */
        zl_node_gone(zl);
    }
    zl_park(zl, rc);
}

/* Our node goes now, or, while not connected, once connected (zl_start
 * deletes a node nobody holds); a pending reply or watch is made stale. */
void zl_delete_when_connected(struct zlock *zl)
{
    if (zl->zk->state == ZK_CONNECTED) {
        zl_delete(zl);
    } else {
        zl->gen++;
        zl->step = ZL_IDLE;
    }
}

void zl_delete(struct zlock *zl)
{
    struct zcall *c;

    zl_token_spared(zl);     /* nobody will see this grant's token */
    zl->zk->nodes->hooks->node_going(zl);   /* an idle node is no more */
    c = zl_begin(zl, ZL_DELETING);

    if (!c)
        return;
    log_debug("zk: deleting %s", zl->node);
    zk_sent(zl, c, zk_batch_delete(zl->zk, zl->node, -1, on_deleted, c), "delete");
}

void zl_node_gone(struct zlock *zl)
{
    zl_token_spared(zl);
    zl->zk->nodes->hooks->node_going(zl);
    free(zl->node);
    zl->node = NULL;
    zl->epoch++;             /* writes and watches for the old node are stale */
    zl->child_watched = false;
    zl->contended = false;
    zl->data_writing = false;
    zl->handoffs = 0;
    zl->awaiting_token = false;  /* a waiting holder queues again with a new node */
}
