/*
 * zk_backend.c - distributed mode, top layer: the backend object and its
 * operations (backend.h), its STATS lines and histograms (zk.h draws the
 * layers). It builds the stack bottom up, registering each layer with the
 * session, and hands every backend operation to the layer that does it.
 */
#include "config.h"
#include "zk.h"
#include "zk_recipes.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#include "log.h"
#include "settings.h"

static void zk_stats(void *impl, backend_stat_fn add, void *cookie);
static void zk_histograms(void *impl, backend_hist_fn add, void *cookie);
static void zk_free(void *impl);
static void zk_before_request(void *impl);
static int64_t zk_unreachable_since(void *impl);
static const char *zk_why_unavailable(void *impl);
static const char *zk_config_error(void *impl);
static int64_t zk_window_ms(void *impl, struct hold *h);

static const struct backend_ops zk_ops = {
    .name = "distributed",
    .acquire = zk_lock_acquire,
    .reassign = zk_lock_reassign,
    .cancel = zk_lock_let_go,
    .pass_on = zk_lock_pass_on,
    .release = zk_lock_let_go,
    .stats = zk_stats,
    .histograms = zk_histograms,
    .query = zk_query,
    .query_cancel = zk_query_cancel,
    .list = zk_list,
    .list_cancel = zk_list_cancel,
    .refuses = zk_lock_refuses,
    .recipe = zk_lock_recipe,
    .watch = zk_watch,
    .watch_cancel = zk_watch_cancel,
    .ends_leases = true,
    .early_places = true,
    .lease_op = zk_lease_op,
    .lease_op_cancel = zk_lease_op_cancel,
    .before_request = zk_before_request,
    .unreachable_since = zk_unreachable_since,
    .why_unavailable = zk_why_unavailable,
    .config_error = zk_config_error,
    .window_ms = zk_window_ms,
    .handover_possible = zk_handover_possible,
    .restart = &zk_restart_part,
    .save_hold = zk_handover_save_hold,
    .restore_hold = zk_handover_restore_hold,
    .free = zk_free,
};


static void zk_before_request(void *impl)
{
    zk_session_check_stall(impl);
}

static int64_t zk_unreachable_since(void *impl)
{
    return zk_session_unreachable_since(impl);
}

/* Why requests cannot be served now, in words (for /healthz and the log). */
static const char *zk_why_unavailable(void *impl)
{
    return zk_session_why_down(impl);
}

/* Another daemon of the root takes other names non-fair: nothing is
 * served until a restart, and the log's words say what to change
 * (zk_presence.c). */
static const char *zk_config_error(void *impl)
{
    const struct zk *zk = impl;

    return zk->nonfair_disagrees ? zk->nonfair_why : NULL;
}

/* CHECK's window (zk_presence.c). */
static int64_t zk_window_ms(void *impl, struct hold *h)
{
    return zk_presence_window_ms(impl);
}

/* ------------------------------------------------------------- lifecycle */

/* What zk_backend_new() makes: zk first, so that the ops' impl (&zk) is
 * also the whole object. */
struct zk_backend {
    struct zk zk;
    struct backend be;
};

struct backend *zk_backend_new(struct event_base *base, const struct settings *s,
                               const char *daemon_id, const char *auth)
{
    struct zk_backend *zb = calloc(1, sizeof(*zb));
    struct zk *zk;

    if (!zb)
        return NULL;
    zk = &zb->zk;
    zb->be.ops = &zk_ops;
    zb->be.impl = zk;
    /* Bottom up: each layer's listener hears the session after those below it. */
    if (zk_session_init(zk, base, s, daemon_id, auth) < 0 || zk_presence_init(zk) < 0 ||
        zk_batch_init(zk) < 0 || zk_idle_init(zk) < 0 || zk_locks_init(zk) < 0 ||
        zk_lease_init(zk) < 0 || zk_watch_init(zk) < 0 || zk_query_init(zk) < 0) {
        zk_free(zk);
        return NULL;
    }
    zk_session_open(zk);
    log_info("zk: daemon id %s, connecting to %s, root %s", zk->daemon_id, s->zk_hosts,
             zk->root);
    if (zk->auth[0])
        log_info("zk: authenticating as digest user '%.*s' (from %s); nodes are created "
                 "readable by anyone, changeable by that identity only", zk_auth_user_len(zk),
                 zk->auth, s->zk_auth);
    else
        log_info("zk: no [zookeeper] auth: nodes are created with the open ACL (anyone "
                 "who can reach ZooKeeper may delete them)");
    return &zb->be;
}

static void zk_free(void *impl)
{
    struct zk_backend *zb = impl;    /* impl is &zb->zk, its first member */
    struct zk *zk = &zb->zk;

    zk->state = ZK_EXPIRED;    /* completions run by zookeeper_close are ignored */
    zk_session_close(zk);      /* closing the session removes our ephemeral nodes */
    zk_watch_free(zk);
    zk_query_free(zk);
    zk_locks_free_all(zk);
    zk_lease_free_all(zk);
    zk_idle_free(zk);
    zk_batch_free(zk);
    zk_presence_free(zk);
    zk_session_free(zk);
    free(zb);
}

static void stat_u64(backend_stat_fn add, void *cookie, const char *name, uint64_t value)
{
    char v[24];

    snprintf(v, sizeof(v), "%llu", (unsigned long long)value);
    add(cookie, name, v);
}

/* STAT lines: zk_state, zk_session_id, ...; zk_requests counts the
 * acquisitions and releases this daemon is working on. */
static void zk_stats(void *impl, backend_stat_fn add, void *cookie)
{
    struct zk *zk = impl;
    char v[32];

    add(cookie, "zk_state", zk->state == ZK_CONNECTED ? "connected"
                            : zk->state == ZK_CONNECTING ? "connecting" : "expired");
    snprintf(v, sizeof(v), "0x%llx", (unsigned long long)zk->session_id);
    add(cookie, "zk_session_id", v);
    add(cookie, "zk_session_confirmed", zk_serving(zk) && zk_confirmed(zk) ? "1" : "0");
    snprintf(v, sizeof(v), "%d", zk->negotiated_ms);
    add(cookie, "zk_session_timeout_ms", v);
    stat_u64(add, cookie, "zk_sessions", zk->sessions);
    stat_u64(add, cookie, "zk_reconnects", zk->reconnects);
    stat_u64(add, cookie, "zk_window_probes", zk->probe_rounds);
    stat_u64(add, cookie, "zk_window_confirms", zk->probe_confirms);
    snprintf(v, sizeof(v), "%lld", zk->confirmed_at_ms && zk->state != ZK_EXPIRED
                                   ? (long long)(locks_mono_ms() - zk->confirmed_at_ms) : -1LL);
    add(cookie, "zk_window_age_ms", v);
    stat_u64(add, cookie, "zk_outstanding", zk->outstanding);
    stat_u64(add, cookie, "zk_requests", zk->nodes->nzlocks - zk->idle->nidle);
    stat_u64(add, cookie, "zk_idle_nodes", zk->idle->nidle);
    stat_u64(add, cookie, "zk_idle_reuses", zk->idle->idle_reuses);
    stat_u64(add, cookie, "zk_leases_removed", zk->leases->leases_removed);
    stat_u64(add, cookie, "zk_session_delays", zk->session_delays);
    /* Every grant lists now: a first use no longer writes the parent to
     * read its Stat (PROTOCOL.md, Fencing tokens). Kept for the scripts
     * and dashboards that read it. */
    stat_u64(add, cookie, "zk_grants_unlisted", 0);
    stat_u64(add, cookie, "zk_token_writes_due", zk->nodes->ntokens_due);
    stat_u64(add, cookie, "zk_token_writes_spared", zk->nodes->token_writes_spared);
    stat_u64(add, cookie, "zk_nonfair_races_won", zk->nonfair_won);
    stat_u64(add, cookie, "zk_nonfair_races_lost", zk->nonfair_lost);
    stat_u64(add, cookie, "zk_batches", zk->batch->batches);
    stat_u64(add, cookie, "zk_batched_ops", zk->batch->batched_ops);
    stat_u64(add, cookie, "zk_batch_failures", zk->batch->batch_failures);
    stat_u64(add, cookie, "zk_batch_resent", zk->batch->batch_resent);
    stat_u64(add, cookie, "zk_batches_inflight", zk->batch->batches_inflight);
    stat_u64(add, cookie, "zk_write_queue", zk->batch->wq_len);
}

static void zk_histograms(void *impl, backend_hist_fn add, void *cookie)
{
    struct zk *zk = impl;

    add(cookie, "zk_request_duration_seconds",
        "ZooKeeper requests of the lock recipe (create, list, read, delete), from sending to "
        "completion", &zk->nodes->request_hist, true);
    add(cookie, "zk_batch_size_ops",
        "Writes (creates and deletes of lock nodes) per ZooKeeper multi sent",
        &zk->batch->batch_hist, false);
}
