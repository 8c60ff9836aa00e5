/*
 * accept_pause.c - listeners that back off when accept() fails (see
 * accept_pause.h).
 */
#include "config.h"
#include "accept_pause.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "locks.h"
#include "log.h"

/* The plain, TLS and Unix listeners and the metrics one, with room to spare. */
#define ACCEPT_LISTENERS_MAX 8

struct accept_listener {
    struct evconnlistener *l;    /* borrowed; NULL: a free slot */
    unsigned held;               /* enum accept_hold bits */
    char what[80];
};

struct accept_pause {
    struct event_base *base;     /* borrowed */
    struct event *timer;         /* owned: ends a pause */
    bool paused;                 /* every listener is disabled until the timer or a wake */
    uint64_t *pauses;            /* borrowed: the owner's counter, or NULL */
    int64_t logged_ms;           /* monotonic time of the last line; 0: none yet */
    uint64_t unlogged;           /* pauses since that line, not logged */
    struct accept_listener ls[ACCEPT_LISTENERS_MAX];
    struct accept_pause *next;   /* in `registries` */
};

/*
 * Every registry alive. libevent hands an error callback only the
 * listener's user data, which for the metrics listener is libevent's own
 * evhttp: the callback finds the registry of its listener here.
 */
static struct accept_pause *registries;

static struct accept_listener *find(struct accept_pause *p, const struct evconnlistener *l)
{
    for (size_t i = 0; i < ACCEPT_LISTENERS_MAX; i++)
        if (p->ls[i].l && p->ls[i].l == l)
            return &p->ls[i];
    return NULL;
}

/* Enables or disables one listener as its pause and holds say. */
static void apply(struct accept_pause *p, struct accept_listener *al)
{
    if (p->paused || al->held)
        evconnlistener_disable(al->l);
    else
        evconnlistener_enable(al->l);
}

static void apply_all(struct accept_pause *p)
{
    for (size_t i = 0; i < ACCEPT_LISTENERS_MAX; i++)
        if (p->ls[i].l)
            apply(p, &p->ls[i]);
}

static void resume(struct accept_pause *p)
{
    p->paused = false;
    evtimer_del(p->timer);
    apply_all(p);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    resume(arg);
}

/* The open-file limit, for the log line; 0 if unknown. */
static unsigned long long nofile_limit(void)
{
    struct rlimit rl;

    return getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (unsigned long long)rl.rlim_cur : 0;
}

static void log_pause(struct accept_pause *p, const struct accept_listener *al, int err)
{
    int64_t now = locks_mono_ms();
    char unsaid[96] = "";

    if (p->logged_ms && now - p->logged_ms < ACCEPT_LOG_INTERVAL_S * 1000) {
        p->unlogged++;
        return;
    }
    if (p->unlogged)
        snprintf(unsaid, sizeof(unsaid), "; %llu more pauses in the %lld s before, not logged",
                 (unsigned long long)p->unlogged, (long long)((now - p->logged_ms) / 1000));
    if (err == EMFILE || err == ENFILE)
        log_warn("accept on %s: %s (open file limit %llu): accepting on no port for %d ms, "
                 "or until a connection closes%s", al->what, strerror(err), nofile_limit(),
                 ACCEPT_PAUSE_MS, unsaid);
    else
        log_warn("accept on %s: %s: accepting on no port for %d ms, or until a connection "
                 "closes%s", al->what, strerror(err), ACCEPT_PAUSE_MS, unsaid);
    p->logged_ms = now;
    p->unlogged = 0;
}

/*
 * libevent calls this for an accept() error it does not retry at once
 * (EAGAIN, EINTR and ECONNABORTED it retries itself): EMFILE, ENFILE,
 * ENOBUFS, ENOMEM, or a firewall's EPERM. Each of them would come back
 * at once, so every one pauses.
 */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval tv = { ACCEPT_PAUSE_MS / 1000, (ACCEPT_PAUSE_MS % 1000) * 1000 };
    struct accept_listener *al = NULL;
    struct accept_pause *p;

    for (p = registries; p && !(al = find(p, l)); p = p->next)
        ;
    if (!al) {       /* not registered: cannot happen; keep the loop from spinning */
        log_error("accept: %s; an unknown listener, disabled", strerror(err));
        evconnlistener_disable(l);
        return;
    }
    if (p->pauses)
        (*p->pauses)++;
    log_pause(p, al, err);
    p->paused = true;
    apply_all(p);
    evtimer_add(p->timer, &tv);
}

struct accept_pause *accept_pause_new(struct event_base *base, uint64_t *pauses)
{
    struct accept_pause *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    if (!(p->timer = evtimer_new(base, on_timer, p))) {
        free(p);
        return NULL;
    }
    p->base = base;
    p->pauses = pauses;
    p->next = registries;
    registries = p;
    return p;
}

void accept_pause_free(struct accept_pause *p)
{
    struct accept_pause **pp;

    if (!p)
        return;
    for (pp = &registries; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    event_free(p->timer);
    free(p);
}

int accept_pause_add(struct accept_pause *p, struct evconnlistener *l, const char *what)
{
    for (size_t i = 0; i < ACCEPT_LISTENERS_MAX; i++) {
        if (p->ls[i].l)
            continue;
        p->ls[i].l = l;
        p->ls[i].held = 0;
        snprintf(p->ls[i].what, sizeof(p->ls[i].what), "%s", what);
        evconnlistener_set_error_cb(l, on_accept_error);
        apply(p, &p->ls[i]);
        return 0;
    }
    log_error("%s: more than %d listeners", what, ACCEPT_LISTENERS_MAX);
    return -1;
}

void accept_pause_remove(struct accept_pause *p, struct evconnlistener *l)
{
    struct accept_listener *al = p ? find(p, l) : NULL;

    if (al) {
        evconnlistener_set_error_cb(l, NULL);
        al->l = NULL;
    }
}

void accept_pause_hold(struct accept_pause *p, struct evconnlistener *l, enum accept_hold why,
                       bool on)
{
    if (!p)
        return;
    for (size_t i = 0; i < ACCEPT_LISTENERS_MAX; i++) {
        struct accept_listener *al = &p->ls[i];

        if (!al->l || (l && al->l != l))
            continue;
        if (on)
            al->held |= (unsigned)why;
        else
            al->held &= ~(unsigned)why;
        apply(p, al);
    }
}

void accept_pause_wake(struct accept_pause *p)
{
    if (p && p->paused)
        resume(p);
}
