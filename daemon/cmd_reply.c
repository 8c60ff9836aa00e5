/*
 * cmd_reply.c - what the handlers share (cmd_int.h): the replies to the
 * lock table's answers, in the words PROTOCOL.md gives them, and the
 * translations between a request and the lock table's terms.
 */
#include "config.h"
#include "cmd_int.h"

#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "log.h"
#include "settings.h"

void cmd_reply_word(struct client *c, const char *word, const char *name, size_t len)
{
    char buf[PROTO_SET_REPLY_MAX];

    client_reply(c, buf, proto_fmt_word_name(buf, sizeof(buf), word, name, len));
}

void cmd_reply_unavailable(struct client *c)
{
    const struct backend *be = c->srv->backend;
    const char *fault = be->ops->config_error ? be->ops->config_error(be->impl) : NULL;
    /* Room for "ERR UNAVAILABLE " and the LF in a reply line. */
    char text[PROTO_REPLY_MAX - 24];

    if (!fault) {
        client_reply_err(c, PROTO_ERR_UNAVAILABLE,
                         "the lock service is not reachable; retry later");
        return;
    }
    /* Not an outage that ends by itself: say what the log says. A reason
     * longer than a reply (settings of hundreds of bytes) is cut, and
     * says so. */
    if ((size_t)snprintf(text, sizeof(text), "%s", fault) >= sizeof(text))
        memcpy(text + sizeof(text) - 4, "...", 4);
    client_reply_err(c, PROTO_ERR_UNAVAILABLE, text);
}

enum proto_mode cmd_proto_mode(enum lock_mode m)
{
    return m == LOCK_SHARED ? PROTO_MODE_SHARED : m == LOCK_LIMIT ? PROTO_MODE_LIMIT
                                                                   : PROTO_MODE_EXCLUSIVE;
}

/*
 * Says how the name is in use. The lock table answers a conflict at once;
 * one answered later came from the backend: another daemon's request.
 */
static void reply_conflict(struct client *c, const char *name, bool at_once)
{
    struct locks_status ls;
    char text[128];

    locks_status(c->srv->locks, name, &ls);
    if (!at_once)
        snprintf(text, sizeof(text), "the lock is held or awaited through another daemon "
                 "in another mode or with another limit");
    else if (ls.mode == LOCK_LIMIT)
        snprintf(text, sizeof(text), "the lock is in use with limit=%u; every holder and "
                 "waiter must ask for the same limit", ls.limit);
    else
        snprintf(text, sizeof(text), "the lock is in use without limit=; a semaphore needs "
                 "a name that is not in use as a lock");
    client_reply_err(c, PROTO_ERR_CONFLICT, text);
}

void cmd_reply_quota(struct client *c, enum locks_result r, const char *then)
{
    const struct settings *s = c->srv->settings;
    char text[PROTO_ACCOUNT_MAX + 128];

    if (r == LOCKS_KEEP_ACCOUNT)
        snprintf(text, sizeof(text), "%s already has %u holds with a lock-delay or keep=%s",
                 c->account, s->max_kept_holds_per_user, then);
    else if (r == LOCKS_KEEP_TOTAL)
        snprintf(text, sizeof(text), "this daemon already has %u holds with a lock-delay or "
                 "keep=%s", s->max_kept_holds, then);
    else
        snprintf(text, sizeof(text), "%s already holds or awaits %u leases through this "
                 "daemon%s", c->account, s->max_leases_per_user, then);
    client_reply_err(c, PROTO_ERR_LIMIT, text);
}

/* The refusals of a LOCK or TRYLOCK, each with its own words. */
static void reply_refused(struct client *c, const char *name, enum locks_result r, bool at_once)
{
    char buf[PROTO_REPLY_MAX];

    switch (r) {
    case LOCKS_UNAVAILABLE:
        /* Not somebody's hold: the daemon could not ask (ZooKeeper outage). */
        cmd_reply_unavailable(c);
        break;
    case LOCKS_LIMIT:
        snprintf(buf, sizeof(buf), "this connection already holds or awaits %u locks",
                 c->srv->settings->max_locks_per_client);
        client_reply_err(c, PROTO_ERR_LIMIT, buf);
        break;
    case LOCKS_KEEP_ACCOUNT:
    case LOCKS_KEEP_TOTAL:
    case LOCKS_LEASE_ACCOUNT:
        cmd_reply_quota(c, r, "");
        break;
    case LOCKS_NOMEM:
        client_reply_err(c, PROTO_ERR_INTERNAL, "out of memory");
        break;
    case LOCKS_CONFLICT:
        reply_conflict(c, name, at_once);
        break;
    case LOCKS_MODE_HELD:
        client_reply_err(c, PROTO_ERR_CONFLICT, "this connection holds that lock in another "
                         "mode; UNLOCK it first (no upgrade or downgrade)");
        break;
    case LOCKS_UNSUPPORTED:
        /* PROTOCOL.md, "Non-fair names" */
        snprintf(buf, sizeof(buf), "lock %s is non-fair ([zookeeper] nonfair): exclusive "
                 "locks without ttl= or delay= only", name);
        client_reply_err(c, PROTO_ERR_BAD_ARGS, buf);
        break;
    default:
        client_reply_err(c, PROTO_ERR_INTERNAL, "unexpected lock table answer");
        break;
    }
}

void cmd_reply_lock_result(struct client *c, enum proto_cmd cmd, const char *name,
                           enum locks_result r, uint64_t token, bool at_once)
{
    char buf[PROTO_REPLY_MAX];
    size_t len = strlen(name);

    switch (r) {
    case LOCKS_GRANTED:
        client_reply(c, buf, proto_fmt_granted(buf, sizeof(buf), name, len, token));
        break;
    case LOCKS_BUSY:
        cmd_reply_word(c, cmd == PROTO_CMD_TRYLOCK ? "BUSY" : "TIMEOUT", name, len);
        break;
    case LOCKS_TIMEOUT:
        cmd_reply_word(c, "TIMEOUT", name, len);
        break;
    default:
        reply_refused(c, name, r, at_once);
        break;
    }
}

void cmd_lock_req(const struct client *c, const struct proto_req *req, struct lock_req *lreq)
{
    lreq->mode = req->mode == PROTO_MODE_SHARED ? LOCK_SHARED
                 : req->mode == PROTO_MODE_LIMIT ? LOCK_LIMIT : LOCK_EXCLUSIVE;
    lreq->limit = req->limit;
    lreq->wait_ms = req->wait_ms;
    lreq->try = req->cmd == PROTO_CMD_TRYLOCK;
    lreq->ttl_ms = req->ttl_ms;
    lreq->delay_ms = req->delay_ms >= 0 ? req->delay_ms
                                        : (int64_t)c->srv->settings->lock_delay_ms;
    lreq->delay_default = req->delay_ms < 0;
}

const char *cmd_interop_refusal(const struct client *c, const char *name,
                                struct lock_req *lreq, char *why, size_t len)
{
    const struct interop_rule *rule = interop_match(&c->srv->settings->interop, name);
    struct interop_req q;

    if (!rule)
        return NULL;
    q.shared = lreq->mode == LOCK_SHARED;
    q.limit = lreq->mode == LOCK_LIMIT;
    q.ttl = lreq->ttl_ms > 0;
    q.delay = lreq->delay_ms > 0 && !lreq->delay_default;
    if (interop_refusal(rule, name, &q, why, len))
        return why;
    if (lreq->delay_default)
        lreq->delay_ms = 0;
    return NULL;
}

enum locks_result cmd_wait_cut(struct client *c)
{
    log_debug("conn %llu (%s): wait for %s ended by the end of input",
              (unsigned long long)c->id, c->peer, c->pending_name);
    return c->srv->backend->ops->unreachable_since(c->srv->backend->impl) ? LOCKS_UNAVAILABLE
                                                                          : LOCKS_TIMEOUT;
}
