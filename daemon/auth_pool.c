/*
 * auth_pool.c - AUTH passwords checked by worker threads (see auth_pool.h).
 *
 * A job goes todo -> (a worker) -> done -> (the loop) freed. The mutex
 * guards both lists and each job's state; the eventfd counts the jobs
 * added to done since the loop last read it.
 */
#include "config.h"
#include "auth_pool.h"

#include <crypt.h>
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"
#include "proto.h"
#include "users.h"

/* How much lower than the loop's the workers' CPU priority is: a hashing
 * thread gives way to the event loop at once when both want a core. */
#define AUTH_THREAD_NICE 10

enum auth_job_state {
    AUTH_JOB_QUEUED,    /* in todo: no worker has it */
    AUTH_JOB_HASHING,   /* a worker has it, in no list */
    AUTH_JOB_DONE,      /* in done: the loop calls done and frees it */
};

struct auth_job {
    TAILQ_ENTRY(auth_job) link;            /* in todo or done */
    enum auth_job_state state;             /* under the mutex */
    bool match;                            /* the result; set by the worker */
    auth_done_cb *done;                    /* loop thread only; NULL once forgotten */
    void *arg;                             /* loop thread only */
    size_t len;
    char hash[USERS_HASH_MAX + 1];
    char password[PROTO_PASSWORD_MAX + 1]; /* not NUL-terminated; wiped once hashed */
};

TAILQ_HEAD(auth_job_list, auth_job);

struct auth_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake;                   /* todo gained a job, or stopping */
    struct auth_job_list todo, done;       /* under mu */
    bool stopping;                         /* under mu */
    unsigned jobs;                         /* loop thread only: auth_pool_jobs() */
    int efd;                               /* eventfd: workers write, the loop reads */
    struct event *ev;                      /* owned: efd readable */
    pthread_t *threads;
    unsigned nthreads;                     /* started */
};

static void free_job(struct auth_job *j)
{
    explicit_bzero(j->password, sizeof(j->password));
    free(j);
}

static void *worker_main(void *arg)
{
    struct auth_pool *p = arg;
    struct crypt_data *cd = malloc(sizeof(*cd));   /* ~32 KiB: not on the stack */
    const uint64_t one = 1;

    /* Below the loop: when cores are short, the clients' requests go first
     * (Linux applies a thread's own nice value; an error changes nothing). */
    setpriority(PRIO_PROCESS, (id_t)gettid(), AUTH_THREAD_NICE);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct auth_job *j;

        while (!p->stopping && TAILQ_EMPTY(&p->todo))
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stopping)
            break;
        j = TAILQ_FIRST(&p->todo);
        TAILQ_REMOVE(&p->todo, j, link);
        j->state = AUTH_JOB_HASHING;
        pthread_mutex_unlock(&p->mu);
        /* Without scratch space the check fails: a refusal, never a login. */
        j->match = cd && users_check_password(j->hash, j->password, j->len, cd,
                                              (int)sizeof(*cd));
        explicit_bzero(j->password, sizeof(j->password));
        pthread_mutex_lock(&p->mu);
        j->state = AUTH_JOB_DONE;
        TAILQ_INSERT_TAIL(&p->done, j, link);
        /* Only EAGAIN can fail (the counter at its maximum): it is readable anyway. */
        if (write(p->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
            log_error("auth: eventfd write: %s", strerror(errno));
    }
    pthread_mutex_unlock(&p->mu);
    free(cd);
    return NULL;
}

/* Results came: their done callbacks, on the loop. */
static void on_results(evutil_socket_t fd, short what, void *arg)
{
    struct auth_pool *p = arg;
    struct auth_job_list ready = TAILQ_HEAD_INITIALIZER(ready);
    struct auth_job *j;
    uint64_t n;

    if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        log_error("auth: eventfd read: %s", strerror(errno));
    pthread_mutex_lock(&p->mu);
    TAILQ_CONCAT(&ready, &p->done, link);
    pthread_mutex_unlock(&p->mu);
    while ((j = TAILQ_FIRST(&ready))) {
        TAILQ_REMOVE(&ready, j, link);
        if (j->done) {
            p->jobs--;
            j->done(j->arg, j->match);
        }
        free_job(j);
    }
}

struct auth_pool *auth_pool_new(struct event_base *base, unsigned threads)
{
    struct auth_pool *p = calloc(1, sizeof(*p));
    sigset_t all, old;
    int e;

    if (!p) {
        log_error("auth: out of memory");
        return NULL;
    }
    p->efd = -1;
    TAILQ_INIT(&p->todo);
    TAILQ_INIT(&p->done);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (threads == 0)
        threads = 1;
    if ((p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        log_error("auth: eventfd: %s", strerror(errno));
        auth_pool_free(p);
        return NULL;
    }
    if (!(p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, on_results, p)) ||
        event_add(p->ev, NULL) < 0 || !(p->threads = calloc(threads, sizeof(*p->threads)))) {
        log_error("auth: out of memory");
        auth_pool_free(p);
        return NULL;
    }
    /* Signals are the loop's (libevent's handlers): workers take none. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (; p->nthreads < threads; p->nthreads++)
        if ((e = pthread_create(&p->threads[p->nthreads], NULL, worker_main, p)) != 0)
            break;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (p->nthreads < threads) {
        log_error("auth: cannot start a password thread: %s", strerror(e));
        auth_pool_free(p);
        return NULL;
    }
    return p;
}

void auth_pool_free(struct auth_pool *p)
{
    struct auth_job *j;

    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    while ((j = TAILQ_FIRST(&p->todo))) {
        TAILQ_REMOVE(&p->todo, j, link);
        free_job(j);
    }
    while ((j = TAILQ_FIRST(&p->done))) {
        TAILQ_REMOVE(&p->done, j, link);
        free_job(j);
    }
    if (p->ev)
        event_free(p->ev);
    if (p->efd >= 0)
        close(p->efd);
    free(p->threads);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

struct auth_job *auth_pool_submit(struct auth_pool *p, const char *hash, const char *password,
                                  size_t len, auth_done_cb *done, void *arg)
{
    size_t hlen = strlen(hash);
    struct auth_job *j;

    if (hlen > USERS_HASH_MAX || len > PROTO_PASSWORD_MAX || !(j = calloc(1, sizeof(*j))))
        return NULL;
    memcpy(j->hash, hash, hlen + 1);
    memcpy(j->password, password, len);
    j->len = len;
    j->done = done;
    j->arg = arg;
    j->state = AUTH_JOB_QUEUED;
    pthread_mutex_lock(&p->mu);
    TAILQ_INSERT_TAIL(&p->todo, j, link);
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
    p->jobs++;
    return j;
}

void auth_pool_forget(struct auth_pool *p, struct auth_job *j)
{
    bool queued;

    p->jobs--;
    j->done = NULL;
    pthread_mutex_lock(&p->mu);
    if ((queued = j->state == AUTH_JOB_QUEUED))
        TAILQ_REMOVE(&p->todo, j, link);
    pthread_mutex_unlock(&p->mu);
    /* Hashing or done: on_results frees it once it is in done. */
    if (queued)
        free_job(j);
}

unsigned auth_pool_jobs(const struct auth_pool *p)
{
    return p->jobs;
}
