/*
 * auth_pool.h - AUTH passwords checked off the event loop.
 *
 * A crypt(3) hash costs about 1 ms (sha512crypt) to 20 ms (yescrypt): on the
 * loop, a flood of wrong passwords would stall every client (issue 41). A
 * few worker threads take jobs from a queue, hash, and hand the results back
 * to the loop through an eventfd; the done callbacks run on the loop.
 *
 * Threads: a worker touches only the queue (under the pool's mutex) and the
 * job it took, which holds its own copies of the hash and the password. The
 * caller's side (submit, forget, done) runs on the loop thread only. The
 * caller bounds how many jobs it submits (auth_pool_jobs).
 */
#ifndef LOCKBROKER_AUTH_POOL_H
#define LOCKBROKER_AUTH_POOL_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct auth_pool;
struct auth_job;

/* A job's result, on the loop thread: match is whether the password hashes
 * to the hash. The job is freed by the pool after the call. */
typedef void auth_done_cb(void *arg, bool match);

/* Starts `threads` workers (at least 1) whose results reach base's loop.
 * Returns the pool, owned by the caller (auth_pool_free), or NULL after
 * logging why. */
struct auth_pool *auth_pool_new(struct event_base *base, unsigned threads);

/* Stops and joins the workers (a hash under way is finished first) and
 * frees every job left, without calling their done. NULL is fine. */
void auth_pool_free(struct auth_pool *p);

/*
 * Queues a check of password[0..len) against hash (a NUL-terminated crypt(3)
 * hash); both are copied. done(arg, match) runs later on the loop, never
 * inside this call. Returns the job, which belongs to the pool (the caller
 * may only pass it to auth_pool_forget before done runs), or NULL when out
 * of memory or when the hash or password is too long.
 */
struct auth_job *auth_pool_submit(struct auth_pool *p, const char *hash, const char *password,
                                  size_t len, auth_done_cb *done, void *arg);

/* The caller no longer wants j's result (its client left): done never runs.
 * A job not yet taken by a worker is dropped now, one being hashed once its
 * worker finishes. */
void auth_pool_forget(struct auth_pool *p, struct auth_job *j);

/* Jobs submitted whose done has not run and that were not forgotten before
 * a worker took them: queued or being hashed. */
unsigned auth_pool_jobs(const struct auth_pool *p);

#endif
