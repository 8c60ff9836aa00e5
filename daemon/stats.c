/*
 * stats.c - the daemon's statistics in one walk (see stats.h).
 */
#include "config.h"
#include "stats.h"

#include <stdio.h>
#include <time.h>

#include "lease.h"
#include "locks.h"
#include "proto.h"
#include "server.h"

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
    add_u64(add, cookie, "locks_held", ls.held);
    add_u64(add, cookie, "waiters", ls.waiting);
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
    srv->backend->ops->stats(srv->backend->impl, add, cookie);
}
