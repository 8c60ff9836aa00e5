/*
 * zk.h - distributed mode: a backend (see backend.h) that takes each lock in
 * ZooKeeper, on one session per daemon, driven from the libevent loop.
 *
 * daemon/zk/ is a stack. Each file calls only the layers below it and
 * hears from them through what it registered with them (zk_session.h struct
 * zk_listener, zlock.h struct zl_hooks), never by name:
 *
 *   zk_backend.c  zk_acquire.c         the backend's operations     zk.h
 *   ------------------------------------------------------------------------
 *   zk_fair.c -> zk_lease_lock.c       the fair queue, leases,      zk_recipes.h
 *     -> zk_lease.c                    non-fair names (one fixed
 *   zk_nonfair.c                       node), local handoff,
 *   zk_handoff.c zk_query.c zk_watch.c STATUS and HOLDERS, WATCH
 *   zk_view.c                          the fair queue's rules       zk_view.h
 *   ------------------------------------------------------------------------
 *   zk_node.c  zlock.c  zk_names.c     create, find, delete; the    zk_node.h
 *                                      contexts of requests, watches
 *   ------------------------------------------------------------------------
 *   zk_batch.c                         group commit (multis)        zk_batch.h
 *   ------------------------------------------------------------------------
 *   zk_presence.c                      probes that move confirmed_at;
 *                                      the session node, the chroot
 *   zk_session.c                       connect, expiry, retry;      zk_session.h
 *                                      the listeners
 *     -> zk_vouch.c                    confirmed or presumed lost:  zk_vouch.h
 *                                      what may be granted
 *     -> zk_loop.c                     the libevent adapter         zk_loop.h
 *     -> zk_timing.c                   the session's times          zk_timing.h
 *
 * zk_int.h holds struct zk: the session's state, and a pointer to each
 * upper layer's own, whose type only that layer's header defines; and
 * struct zk_listener, what the session tells the layers above. Only this
 * folder includes it and zookeeper.h. The layers above include
 * zk_session.h, which brings the bottom layer's headers with it.
 */
#ifndef LOCKBROKER_ZK_H
#define LOCKBROKER_ZK_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct settings;
struct backend;

/*
 * Starts connecting (asynchronously) to s->zk_hosts. The daemon starts even
 * when ZooKeeper is unreachable. base and s are borrowed and must outlive the
 * backend. auth: "user:password" read from s->zk_auth (copied), or NULL:
 * every session then authenticates with it (digest scheme) and every node
 * is created writable by that identity only. Returns NULL if the handle
 * cannot be created. Free with b->ops->free(b->impl): it closes the session
 * (its ephemeral nodes go with it) and frees everything.
 */
struct backend *zk_backend_new(struct event_base *base, const struct settings *s,
                               const char *daemon_id, const char *auth);

/*
 * --check-handover: whether s ([zookeeper] tick_ms and session_timeout_ms)
 * allows a handover at all (zk_handover.c argues when); false with why,
 * which names the nearest settings that do.
 */
bool zk_handover_settings_fit(const struct settings *s, char *why, size_t len);

#endif
