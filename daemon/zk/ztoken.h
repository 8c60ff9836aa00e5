/*
 * ztoken.h - distributed mode's fencing tokens (proto/PROTOCOL.md).
 *
 * A token is a ZooKeeper zxid shifted left by ZTOKEN_HANDOFF_BITS; the low
 * bits count the grants a daemon passed on locally with one node since that
 * zxid (local handoff), so a handoff needs no write to ZooKeeper for a
 * fresh token. A later zxid's token exceeds every token made from an
 * earlier one as long as a node passes the lock on at most
 * ZTOKEN_HANDOFFS_MAX times per zxid (local_handoff's upper bound).
 */
#ifndef LOCKBROKER_ZTOKEN_H
#define LOCKBROKER_ZTOKEN_H

#include <stdbool.h>
#include <stdint.h>

#define ZTOKEN_HANDOFF_BITS 8
#define ZTOKEN_HANDOFFS_MAX ((1u << ZTOKEN_HANDOFF_BITS) - 1)   /* 255 */
/* The largest zxid a token can carry: epoch 2^24 - 1, any counter. */
#define ZTOKEN_ZXID_MAX (UINT64_MAX >> ZTOKEN_HANDOFF_BITS)

/* The token of the grant made on reading or writing zxid; false (and
 * *token untouched) when zxid is negative or beyond ZTOKEN_ZXID_MAX. */
static inline bool ztoken_of_zxid(int64_t zxid, uint64_t *token)
{
    if (zxid < 0 || (uint64_t)zxid > ZTOKEN_ZXID_MAX)
        return false;
    *token = (uint64_t)zxid << ZTOKEN_HANDOFF_BITS;
    return true;
}

#endif
