/*
 * zk_handover.c - distributed mode's part of a handover (daemon/handover.h):
 * the session and every request's node go to the successor, which attaches
 * to the same ZooKeeper session, so no node of ours goes and no other
 * daemon is granted anything meanwhile.
 *
 * Only a backend at rest is handed over: no request in flight, nothing
 * queued for a multi, no node write pending. A lock-delay being waited out
 * is carried with its end. What the successor then knows of each request is what a
 * reconnection to the same session knows (zk_acquire.c, `closed`): its node,
 * whether it holds, and that its watches are gone; it looks again at
 * whatever it watched once connected, as after any reconnection.
 */
#include "config.h"
#include "zk_recipes.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "restart.h"
#include "settings.h"
#include "snap.h"
#include "zk.h"

/* The zookeeper.h client id's password. */
#define PASSWD_LEN 16

static const char *step_name(enum zl_step s)
{
    static const char *const names[] = {
        "idle", "creating", "finding", "listing", "watching", "asking", "delaying", "held",
        "deleting", "converting", "checking", "leased",
    };

    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* Steps at rest: no request of theirs is in flight, no timer but the keep. */
static bool at_rest(const struct zlock *zl)
{
    switch (zl->step) {
    case ZL_IDLE:
    case ZL_WATCHING:
    case ZL_LEASED:
    case ZL_DELAYING:          /* a timer only: carried with its end */
        return !zl->data_writing;
    case ZL_HELD:
        return !zl->data_writing && !zl->awaiting_token && !zl->data_stale;
    default:
        return false;
    }
}

/*
 * Which settings allow a handover at all. W is 3/4 of [zookeeper] tick_ms
 * (zk_ping_wait_ms), T the session timeout, confirmed_at the session's
 * confirmation (zk_presence.c; PROTOCOL.md, "How `confirmed_at` is
 * established").
 *
 * 1. The old daemon goes only while now - confirmed_at <= T/3
 *    (zk_handover_ready: the successor must have a third of T before the
 *    lost deadline confirmed_at + 2T/3). Once a probe round has moved
 *    confirmed_at, confirmed_at is the send time of a probe answered at
 *    least W before the sync of a round whose write has been answered since
 *    (probe_confirm): so now - confirmed_at >= W at every instant, as
 *    confirmed_at moves only when such a round ends and now - confirmed_at
 *    only grows in between.
 * 2. The successor attaches with that confirmed_at, and its holds are
 *    presumed lost at confirmed_at + 2T/3 unless a probe round confirms the
 *    session first. Only probes answered on its own connection count, and
 *    one of them must have been answered W before a later round's sync:
 *    that is after attaching + W. It attaches after the old daemon went,
 *    itself at least W after confirmed_at: so 2W < 2T/3 is needed.
 * Both say W < T/3. With W >= T/3, the old daemon waits HANDOVER_QUIET_MS
 * with parsing stopped and gives up (1), or at best (the first moments of
 * a new session, where confirmed_at is when its connection attempt began)
 * hands over a third of T, less than the W the successor needs (2): refused
 * at once, the same answer whatever the moment.
 *
 * Allowed is not prompt: right after a round that moved confirmed_at,
 * now - confirmed_at is between W and W + P (rounds every P, plus their
 * round trips), then grows by P. With W + P under T/3 (the defaults:
 * 1500 + 1000 < 3333) a handover goes within a round; nearer the limit it
 * may wait its HANDOVER_QUIET_MS.
 */
static bool handover_settings_fit(unsigned tick_ms, int timeout_ms, const char *negotiated,
                                  char *why, size_t len)
{
    int64_t w = zk_tick_ping_wait_ms(tick_ms);
    int timeout = timeout_ms;
    unsigned tick = tick_ms;

    if (zk_handover_fits(w, timeout_ms))
        return true;
    /* The nearest settings that fit, by the same test. */
    while (!zk_handover_fits(w, timeout))
        timeout++;
    while (tick > 1 && !zk_handover_fits(zk_tick_ping_wait_ms(tick), timeout_ms))
        tick--;
    snprintf(why, len, "[zookeeper] tick_ms %u and a %d ms session timeout%s allow no handover "
             "in distributed mode: 3/4 of tick_ms (%lld ms) must be under a third of the "
             "timeout (%d ms); a session timeout of at least %d ms, or tick_ms of at most %u, "
             "allows one", tick_ms, timeout_ms, negotiated, (long long)w, timeout_ms / 3, timeout,
             tick);
    return false;
}

bool zk_handover_possible(void *impl, char *why, size_t len)
{
    const struct zk *zk = impl;
    char negotiated[64] = "";

    if (zk->negotiated_ms > 0 && zk->negotiated_ms != (int)zk->settings->zk_session_timeout_ms)
        snprintf(negotiated, sizeof(negotiated), " (negotiated; session_timeout_ms is %u)",
                 zk->settings->zk_session_timeout_ms);
    return handover_settings_fit(zk->settings->zk_tick_ms, zk_timeout_ms(zk), negotiated, why,
                                 len);
}

bool zk_handover_settings_fit(const struct settings *s, char *why, size_t len)
{
    return handover_settings_fit(s->zk_tick_ms, (int)s->zk_session_timeout_ms, "", why, len);
}

static bool zk_handover_ready(void *impl, char *why, size_t len)
{
    struct zk *zk = impl;
    struct zlock *zl;
    /* A probe round's request may be left behind: its answer could only
     * move confirmed_at on, and the successor starts rounds of its own. */
    uint64_t outstanding = zk->outstanding - (zk->probing && zk->outstanding ? 1 : 0);

    if (zk->state == ZK_EXPIRED || !zk->session_id) {
        snprintf(why, len, "there is no ZooKeeper session to hand over");
        return false;
    }
    /* The successor must attach before the lost deadline: leave it at least
     * a third of the timeout (a probe round moves confirmed_at every tenth). */
    if (zk_session_lost_in_ms(zk) < zk_timeout_ms(zk) / 3) {
        snprintf(why, len, "the ZooKeeper session was last confirmed too long ago (%lld ms "
                 "left before its holds would be presumed lost; waiting for a probe round)",
                 (long long)zk_session_lost_in_ms(zk));
        return false;
    }
    /* Token writes put off go now: then they are answered like the rest. */
    zl_write_tokens_now(zk);
    if (outstanding || zk->batch->wq_len || zk->batch->batches_inflight) {
        snprintf(why, len, "%llu ZooKeeper requests are in flight",
                 (unsigned long long)(outstanding + zk->batch->wq_len));
        return false;
    }
    TAILQ_FOREACH(zl, &zk->nodes->zlocks, link)
        if (!at_rest(zl)) {
            snprintf(why, len, "the request for %s is %s%s", zl->parent, step_name(zl->step),
                     zl->data_writing || zl->data_stale ? " (writing its node)" : "");
            return false;
        }
    return true;
}

static void zk_handover_save(void *impl, struct snap_w *w)
{
    struct zk *zk = impl;
    char passwd[PASSWD_LEN];
    struct zlock *zl;
    int64_t id;

    zk_session_secret(zk, &id, passwd, sizeof(passwd));
    snap_w_rec(w, "backend_zk");
    snap_w_i64(w, id);
    snap_w_bytes(w, passwd, sizeof(passwd));
    explicit_bzero(passwd, sizeof(passwd));
    snap_w_i64(w, zk->negotiated_ms);
    snap_w_i64(w, zk->confirmed_at_ms);
    snap_w_i64(w, zk->lost_told_ms);
    snap_w_bool(w, zk->presumed_lost);
    snap_w_u64(w, zk->nodes->next_id);
    TAILQ_FOREACH(zl, &zk->nodes->zlocks, link) {
        snap_w_rec(w, "backend_zlock");
        snap_w_u64(w, zl->id);
        snap_w_bool(w, zl->hold != NULL);
        snap_w_u64(w, zl->step);
        snap_w_bool(w, zl->try);
        snap_w_u64(w, zl->mode);
        snap_w_u64(w, zl->limit);
        snap_w_bool(w, zl->create_uncertain);
        snap_w_bool(w, zl->first_use);
        snap_w_u64(w, zl->create_attempts);
        snap_w_i64(w, zl->ttl_ms);
        snap_w_i64(w, zl->delay_ms);
        snap_w_i64(w, zl->keep_until_ms);
        snap_w_i64(w, zl->delay_until_ms);
        snap_w_i64(w, zl->pred_delay_ms);
        snap_w_bool(w, zl->nonfair);
        snap_w_bool(w, zl->raced);
        snap_w_bool(w, zl->lease);
        snap_w_bool(w, zl->create_sent);
        snap_w_bool(w, zl->granted);
        snap_w_u64(w, zl->ephemeral_id);
        snap_w_u64(w, zl->handoffs);
        snap_w_u64(w, zl->token);
        snap_w_u64(w, zl->epoch);
        snap_w_str(w, zl->parent);
        snap_w_str(w, zl->node);
    }
}

static bool restore_session(void *data, struct snap_r *r, struct restart_in *in)
{
    struct zk *zk = data;
    int64_t id = snap_r_i64(r), confirmed_at_ms, lost_told_ms;
    size_t plen;
    const char *passwd = snap_r_str(r, &plen);
    char pw[PASSWD_LEN];
    int negotiated_ms;
    bool presumed_lost;

    if (passwd && plen == sizeof(pw))
        memcpy(pw, passwd, sizeof(pw));
    negotiated_ms = (int)snap_r_i64(r);
    confirmed_at_ms = snap_r_i64(r);
    lost_told_ms = snap_r_i64(r);
    presumed_lost = snap_r_bool(r);
    zk->nodes->next_id = snap_r_u64(r);
    if (!snap_r_done(r))
        return false;
    if (!passwd || plen != sizeof(pw) || id == 0 || negotiated_ms <= 0)
        return snap_r_fail(r, "the ZooKeeper session does not add up");
    if (zk_session_reattach(zk, id, pw, sizeof(pw), negotiated_ms, confirmed_at_ms, lost_told_ms,
                            presumed_lost) < 0) {
        explicit_bzero(pw, sizeof(pw));
        return snap_r_fail(r, "cannot make a ZooKeeper handle for session 0x%llx",
                           (unsigned long long)id);
    }
    explicit_bzero(pw, sizeof(pw));
    return true;
}

static bool restore_zlock(void *data, struct snap_r *r, struct restart_in *in)
{
    struct zk *zk = data;
    uint64_t id = snap_r_u64(r);
    struct zlock f = { .zk = zk };
    const char *parent, *node;
    bool held = snap_r_bool(r);

    f.step = (enum zl_step)snap_r_u64(r);
    f.try = snap_r_bool(r);
    f.mode = (enum lock_mode)snap_r_u64(r);
    f.limit = (unsigned)snap_r_u64(r);
    f.create_uncertain = snap_r_bool(r);
    f.first_use = snap_r_bool(r);
    f.create_attempts = (unsigned)snap_r_u64(r);
    f.ttl_ms = snap_r_i64(r);
    f.delay_ms = snap_r_i64(r);
    f.keep_until_ms = snap_r_i64(r);
    f.delay_until_ms = snap_r_i64(r);
    f.pred_delay_ms = snap_r_i64(r);
    f.nonfair = snap_r_bool(r);
    f.raced = snap_r_bool(r);
    f.lease = snap_r_bool(r);
    f.create_sent = snap_r_bool(r);
    f.granted = snap_r_bool(r);
    f.ephemeral_id = snap_r_u64(r);
    f.handoffs = (unsigned)snap_r_u64(r);
    f.token = snap_r_u64(r);
    f.epoch = (unsigned)snap_r_u64(r);
    parent = snap_r_str(r, NULL);
    node = snap_r_str(r, NULL);
    if (!snap_r_done(r))
        return false;
    if (!parent || !at_rest(&f) || (unsigned)f.mode >= LOCK_MODE_COUNT)
        return snap_r_fail(r, "request %llu does not add up", (unsigned long long)id);
    {
        struct zlock *zl = zl_restore(zk, id, parent);

        if (!zl || (node && !(zl->node = strdup(node)))) {
            if (zl)
                zl_free(zl);
            return snap_r_fail(r, "out of memory, or request %llu twice",
                               (unsigned long long)id);
        }
        /* The fields, then what the old handle's end means (zk_acquire.c,
         * `closed` with the session alive): watches are gone, idle nodes end. */
        f.id = zl->id;
        f.parent = zl->parent;
        f.node = zl->node;
        f.link = zl->link;
        *zl = f;
        /* An [interop] node says its profile by its name (zk_names.h). */
        zl->interop = node ? zk_interop_profile_of(strrchr(node, '/') ? strrchr(node, '/') + 1
                                                                       : node)
                           : INTEROP_NONE;
        if (zl->step == ZL_WATCHING || zl->step == ZL_LEASED || !held)
            zl->step = ZL_IDLE;      /* !held: an idle node, deleted once connected */
        if (zl->step == ZL_DELAYING && !zl_resume_delay(zl))
            return snap_r_fail(r, "out of memory");
    }
    return true;
}

/* The backend's restart part (restart.h); data: the struct zk. */
const struct restart_part zk_restart_part = {
    .name = "distributed backend",
    .kinds = (const struct restart_kind[]){
        { "backend_zk", restore_session }, { "backend_zlock", restore_zlock }, { NULL } },
    .save = zk_handover_save,
    .ready = zk_handover_ready,
};

void zk_handover_save_hold(void *impl, const struct hold *h, struct snap_w *w)
{
    const struct zlock *zl = hold_backend_data(h);
    char key[32];

    if (!zl) {
        snap_w_str(w, NULL);
        return;
    }
    snprintf(key, sizeof(key), "z%" PRIu64, zl->id);
    snap_w_str(w, key);
}

bool zk_handover_restore_hold(void *impl, struct hold *h, struct snap_r *r)
{
    struct zk *zk = impl;
    const char *key = snap_r_str(r, NULL);
    struct zlock *zl;
    char *end;
    uint64_t id;

    if (!key)
        return snap_r_ok(r);
    id = strtoull(key + 1, &end, 10);
    if (key[0] != 'z' || *end || !(zl = zl_find(zk, id)) || zl->hold)
        return snap_r_fail(r, "a hold names request %s, which is not there", key);
    zl->hold = h;
    hold_set_backend_data(h, zl);
    /* Not created yet: named by this daemon's [interop] (zk_acquire.c). */
    if (!zl->node) {
        const struct interop_rule *rule = interop_match(&zk->settings->interop, hold_name(h));

        zl->interop = rule ? rule->profile : INTEROP_NONE;
    }
    return true;
}
