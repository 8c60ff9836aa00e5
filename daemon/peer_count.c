/*
 * peer_count.c - counts per source address (see peer_count.h): a hash
 * table of the addresses that have a connection open.
 */
#include "config.h"
#include "peer_count.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth_budget.h"

#define NBUCKETS 4096

struct peer_rec {
    struct peer_rec *next;           /* in its bucket */
    char addr[AUTH_BUDGET_ADDR_MAX];
    struct peer_counts n;            /* never both 0: such a record is freed */
};

struct peer_count {
    struct peer_rec *buckets[NBUCKETS];
};

struct peer_count *peer_count_new(void)
{
    return calloc(1, sizeof(struct peer_count));
}

void peer_count_free(struct peer_count *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < NBUCKETS; i++)
        while (t->buckets[i]) {
            struct peer_rec *r = t->buckets[i];

            t->buckets[i] = r->next;
            free(r);
        }
    free(t);
}

static unsigned bucket_of(const char *addr)
{
    uint32_t h = 2166136261u;                   /* FNV-1a */

    for (; *addr; addr++)
        h = (h ^ (unsigned char)*addr) * 16777619u;
    return h % NBUCKETS;
}

/* addr's record, or NULL; *link: where it is linked (or where to link it). */
static struct peer_rec *find(struct peer_count *t, const char *addr, struct peer_rec ***link)
{
    struct peer_rec **l = &t->buckets[bucket_of(addr)];

    for (; *l; l = &(*l)->next)
        if (strcmp((*l)->addr, addr) == 0)
            break;
    *link = l;
    return *l;
}

struct peer_counts peer_count_get(const struct peer_count *t, const char *addr)
{
    const struct peer_rec *r = t->buckets[bucket_of(addr)];

    while (r && strcmp(r->addr, addr) != 0)
        r = r->next;
    return r ? r->n : (struct peer_counts){ 0, 0 };
}

/* v + delta, never below 0. */
static unsigned add_to(unsigned v, int delta)
{
    return delta < 0 && v == 0 ? 0 : (unsigned)((int)v + delta);
}

int peer_count_add(struct peer_count *t, const char *addr, int conns, int handshakes)
{
    struct peer_rec **link, *r = find(t, addr, &link);

    if (!r) {
        if (conns <= 0 && handshakes <= 0)
            return 0;
        if (!(r = calloc(1, sizeof(*r))))
            return -1;
        strncpy(r->addr, addr, sizeof(r->addr) - 1);
        *link = r;
    }
    r->n.conns = add_to(r->n.conns, conns);
    r->n.handshakes = add_to(r->n.handshakes, handshakes);
    if (r->n.conns == 0 && r->n.handshakes == 0) {
        *link = r->next;
        free(r);
    }
    return 0;
}
