/*
 * zk.h - distributed mode: a backend (see backend.h) that takes each lock in
 * ZooKeeper, on one session per daemon, driven from the libevent loop.
 *
 * daemon/zk/ is a stack; each file calls only the layers below it, and
 * hears from them through what it registered (session.h struct zk_listener,
 * zlock.h struct zl_hooks), never by name:
 *
 *   backend   backend.c (ops table, STATS), acquire.c (acquire, release)
 *   recipes   fair.c -> lease_lock.c -> lease.c; handoff.c; query.c   recipes.h
 *   nodes     node.c (create, find, data, delete) on zlock.c, names.c  node.h
 *   commit    batch.c (writes as multis)                             batch.h
 *   session   session.c (loop adapter, lifecycle, retry), presence.c session.h
 *
 * zk_int.h holds struct zk, the state they share; only this folder
 * includes it and zookeeper.h.
 */
#ifndef LOCKBROKER_ZK_H
#define LOCKBROKER_ZK_H

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

#endif
