/*
 * stats.c - the daemon's statistics in one walk (see stats.h).
 */
#include "config.h"
#include "stats.h"

#include <stdio.h>
#include <time.h>

#include "context.h"
#include "lease.h"
#include "session.h"
#include "locks.h"
#include "proto.h"
#include "restart.h"
#include "snap.h"

static void add_u64(backend_stat_fn add, void *cookie, const char *name, uint64_t v)
{
    char buf[24];

    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    add(cookie, name, buf);
}

void stats_each(const struct server *srv, backend_stat_fn add, void *cookie)
{
    struct locks_stats ls;
    struct leases_stats lst;
    struct sessions_stats sst = { 0 };
    int64_t oldest_us, longest_us;
    char name[32];

    locks_get_stats(srv->locks, &ls);
    add(cookie, "version", PACKAGE_VERSION);
    add(cookie, "mode", srv->backend->ops->name);
    snprintf(name, sizeof(name), "%lld", (long long)(time(NULL) - srv->started));
    add(cookie, "uptime", name);
    add_u64(add, cookie, "curr_connections", srv->nconns);
    add_u64(add, cookie, "total_connections", srv->stats.conns_total);
    add_u64(add, cookie, "rejected_connections", srv->stats.conns_rejected);
    add_u64(add, cookie, "rejected_per_address", srv->stats.conns_rejected_address);
    add_u64(add, cookie, "login_timeouts", srv->stats.login_timeouts);
    add_u64(add, cookie, "accept_pauses", srv->stats.accept_pauses);
    add_u64(add, cookie, "handovers", srv->handovers);
    add_u64(add, cookie, "reloads", srv->stats.reloads);
    add_u64(add, cookie, "last_reload_ok", !srv->stats.last_reload_failed);
    add_u64(add, cookie, "handovers_given_up", srv->stats.handovers_given_up);
    add_u64(add, cookie, "reload_failures", srv->stats.reload_failures);
    if (srv->tls) {
        add_u64(add, cookie, "tls_handshake_failures", srv->stats.tls_handshake_failures);
        snprintf(name, sizeof(name), "%lld", (long long)(srv->tls_not_after - time(NULL)));
        add(cookie, "tls_cert_expiry", name);
    }
    add_u64(add, cookie, "locks_held", ls.held);
    add_u64(add, cookie, "waiters", ls.waiting);
    locks_ages(srv->locks, locks_mono_us(), &oldest_us, &longest_us);
    add_u64(add, cookie, "oldest_hold_ms", (uint64_t)(oldest_us / 1000));
    add_u64(add, cookie, "longest_wait_ms", (uint64_t)(longest_us / 1000));
    add_u64(add, cookie, "grants", ls.grants);
    for (int m = 0; m < LOCK_MODE_COUNT; m++) {
        snprintf(name, sizeof(name), "grants_%s", lock_mode_name((enum lock_mode)m));
        add_u64(add, cookie, name, ls.grants_by_mode[m]);
    }
    add_u64(add, cookie, "timeouts", ls.timeouts);
    add_u64(add, cookie, "lost", ls.lost);
    add_u64(add, cookie, "local_handoffs", ls.handoffs);
    add_u64(add, cookie, "lock_delays", ls.delays);
    add_u64(add, cookie, "locks_delayed", ls.delayed);
    add_u64(add, cookie, "locks_kept", ls.keeps);
    add_u64(add, cookie, "locks_broken", ls.broken);
    add_u64(add, cookie, "locks_keepable", ls.keepable);
    add_u64(add, cookie, "keep_refused", ls.keep_refused);
    add_u64(add, cookie, "errors", srv->stats.errors);
    add_u64(add, cookie, "auth_failures", srv->stats.auth_failures);
    add_u64(add, cookie, "auth_checks", srv->stats.auth_checks);
    add_u64(add, cookie, "auth_busy", srv->stats.auth_busy);
    add_u64(add, cookie, "auth_backoffs", srv->stats.auth_backoffs);
    for (int i = 0; i < PROTO_CMD_COUNT; i++) {
        /* cmd_lock, cmd_trylock...: the command's word in lower case */
        int n = snprintf(name, sizeof(name), "cmd_%s", proto_cmd_word((enum proto_cmd)i));
        for (char *p = name + 4; p < name + n && *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        add_u64(add, cookie, name, srv->stats.cmds[i]);
    }
    leases_get_stats(srv->leases, &lst);
    add_u64(add, cookie, "leases", lst.current);
    add_u64(add, cookie, "leases_granted", lst.granted);
    add_u64(add, cookie, "leases_released", lst.released);
    add_u64(add, cookie, "leases_expired", lst.expired);
    sessions_get_stats(srv->sessions, &sst);
    add_u64(add, cookie, "sessions", sst.current);
    add_u64(add, cookie, "sessions_detached", sst.detached);
    add_u64(add, cookie, "sessions_resumed", sst.resumed);
    add_u64(add, cookie, "sessions_expired", sst.expired);
    srv->backend->ops->stats(srv->backend->impl, add, cookie);
}

/*
 * The restart's part (restart.h): the counters since start go on across
 * a handover, as uptime does. data: the struct server.
 */
static void stats_save(void *data, struct snap_w *w)
{
    const struct server *srv = data;

    snap_w_rec(w, "server_stats");
    snap_w_u64(w, srv->stats.conns_rejected);
    snap_w_u64(w, srv->stats.errors);
    snap_w_u64(w, srv->stats.auth_failures);
    snap_w_u64(w, PROTO_CMD_COUNT);
    for (int i = 0; i < PROTO_CMD_COUNT; i++)
        snap_w_u64(w, srv->stats.cmds[i]);
}

static bool stats_restore(void *data, struct snap_r *r, struct restart_in *in)
{
    struct server *srv = data;
    uint64_t n;

    srv->stats.conns_rejected = snap_r_u64(r);
    srv->stats.errors = snap_r_u64(r);
    srv->stats.auth_failures = snap_r_u64(r);
    n = snap_r_u64(r);
    /* Another build may have more or fewer commands: those known are kept. */
    for (uint64_t i = 0; i < n && snap_r_ok(r); i++) {
        uint64_t v = snap_r_u64(r);

        if (i < PROTO_CMD_COUNT)
            srv->stats.cmds[i] = v;
    }
    return snap_r_done(r);
}

const struct restart_part stats_restart_part = {
    .name = "server statistics",
    .kinds = (const struct restart_kind[]){ { "server_stats", stats_restore }, { NULL } },
    .save = stats_save,
};
