/*
 * auth_budget.c - AUTH's per-address budget (see auth_budget.h): a hash
 * table of addresses, each with its checks under way and its failures.
 */
#include "config.h"
#include "auth_budget.h"

#include <stdlib.h>
#include <string.h>

#define NBUCKETS 4096

struct addr_rec {
    struct addr_rec *next;          /* in its bucket */
    char addr[AUTH_BUDGET_ADDR_MAX];
    unsigned pending;               /* admitted, not yet done */
    unsigned failures;              /* answered since window_ms */
    int64_t window_ms;              /* when the first of those failures was answered */
    unsigned window_len;            /* the backoff_ms in force then */
    int64_t backoff_until_ms;       /* refused before this; 0: never backed off */
};

struct auth_budget {
    struct addr_rec *buckets[NBUCKETS];
    unsigned count;
};

struct auth_budget *auth_budget_new(void)
{
    return calloc(1, sizeof(struct auth_budget));
}

void auth_budget_free(struct auth_budget *b)
{
    if (!b)
        return;
    for (unsigned i = 0; i < NBUCKETS; i++)
        while (b->buckets[i]) {
            struct addr_rec *r = b->buckets[i];

            b->buckets[i] = r->next;
            free(r);
        }
    free(b);
}

unsigned auth_budget_count(const struct auth_budget *b)
{
    return b->count;
}

void auth_budget_addr(const char *peer, char *out)
{
    const char *end;
    size_t len;

    if (peer[0] == '[' && (end = strchr(peer, ']')))
        peer++;                                 /* "[v6]:port" */
    else if (!(end = strrchr(peer, ':')))
        end = peer + strlen(peer);              /* "unix" */
    len = (size_t)(end - peer);
    if (len >= AUTH_BUDGET_ADDR_MAX)
        len = AUTH_BUDGET_ADDR_MAX - 1;
    memcpy(out, peer, len);
    out[len] = '\0';
}

static unsigned bucket_of(const char *addr)
{
    uint32_t h = 2166136261u;                   /* FNV-1a */

    for (; *addr; addr++)
        h = (h ^ (unsigned char)*addr) * 16777619u;
    return h % NBUCKETS;
}

/* The failures counted at now_ms: those of the window, if it is still open. */
static unsigned live_failures(const struct addr_rec *r, int64_t now_ms)
{
    return r->failures && now_ms - r->window_ms < r->window_len ? r->failures : 0;
}

/* Whether r counts nothing any more. */
static bool idle(const struct addr_rec *r, int64_t now_ms)
{
    return r->pending == 0 && now_ms >= r->backoff_until_ms && live_failures(r, now_ms) == 0;
}

/* addr's record, or NULL; *link: where it is linked (or where to link it). */
static struct addr_rec *find(struct auth_budget *b, const char *addr, struct addr_rec ***link)
{
    struct addr_rec **l = &b->buckets[bucket_of(addr)];

    for (; *l; l = &(*l)->next)
        if (strcmp((*l)->addr, addr) == 0)
            break;
    *link = l;
    return *l;
}

/* Drops the idle records of the whole table: only when it is full. */
static void sweep(struct auth_budget *b, int64_t now_ms)
{
    for (unsigned i = 0; i < NBUCKETS; i++)
        for (struct addr_rec **l = &b->buckets[i]; *l;) {
            struct addr_rec *r = *l;

            if (idle(r, now_ms)) {
                *l = r->next;
                free(r);
                b->count--;
            } else {
                l = &r->next;
            }
        }
}

/* Unlinks r if it counts nothing. */
static void forget_if_idle(struct auth_budget *b, struct addr_rec **link, int64_t now_ms)
{
    struct addr_rec *r = *link;

    if (idle(r, now_ms)) {
        *link = r->next;
        free(r);
        b->count--;
    }
}

/* addr's record, made if need be; NULL when the table is full of busy
 * addresses or out of memory. */
static struct addr_rec *get(struct auth_budget *b, const char *addr, int64_t now_ms)
{
    struct addr_rec **link, *r = find(b, addr, &link);

    if (r)
        return r;
    if (b->count >= AUTH_BUDGET_ADDRS) {
        sweep(b, now_ms);
        find(b, addr, &link);           /* the sweep may have moved the end of the chain */
    }
    if (b->count >= AUTH_BUDGET_ADDRS || !(r = calloc(1, sizeof(*r))))
        return NULL;
    strncpy(r->addr, addr, sizeof(r->addr) - 1);
    *link = r;
    b->count++;
    return r;
}

enum auth_admit auth_budget_admit(struct auth_budget *b, const char *addr,
                                  const struct auth_limits *lim, int64_t now_ms)
{
    struct addr_rec *r = get(b, addr, now_ms);

    if (!r)
        return AUTH_ADMIT_BUSY;
    if (now_ms < r->backoff_until_ms)
        return AUTH_ADMIT_BACKOFF;
    if (r->pending >= lim->max_pending)
        return AUTH_ADMIT_BUSY;
    r->pending++;
    return AUTH_ADMIT_OK;
}

void auth_budget_done(struct auth_budget *b, const char *addr, int64_t now_ms)
{
    struct addr_rec **link, *r = find(b, addr, &link);

    if (!r || r->pending == 0)
        return;
    r->pending--;
    forget_if_idle(b, link, now_ms);
}

bool auth_budget_failed(struct auth_budget *b, const char *addr, const struct auth_limits *lim,
                        int64_t now_ms)
{
    struct addr_rec *r;

    if (lim->fail_limit == 0 || !(r = get(b, addr, now_ms)))
        return false;
    if (live_failures(r, now_ms) == 0) {
        r->failures = 0;
        r->window_ms = now_ms;
        r->window_len = lim->backoff_ms;
    }
    if (++r->failures < lim->fail_limit)
        return false;
    r->failures = 0;
    r->backoff_until_ms = now_ms + lim->backoff_ms;
    return true;
}
