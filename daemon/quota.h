/*
 * quota.h - counts of entries per account, for the pools a client can fill
 * (PROTOCOL.md, "Quotas"): holds that may be kept, leases, watches.
 *
 * An account is a string that names who pays for an entry: "user alice"
 * when a users file is set, "address 192.0.2.7" (the peer without its
 * port; "address unix" for every Unix-socket client) otherwise. A count
 * also keeps the total of every account, and of entries counted against no
 * account (restored by a handover, which does not carry accounts): those
 * count against the daemon-wide cap only. All calls happen on the event
 * loop thread.
 */
#ifndef LOCKBROKER_QUOTA_H
#define LOCKBROKER_QUOTA_H

#include <stdbool.h>

struct quota_acct;

struct quota {
    void *tree;          /* tsearch root of struct quota_acct * by key; owned */
    unsigned total;      /* entries counted, every account's and the account-less ones */
};

enum quota_verdict {
    QUOTA_OK,            /* room for the entries asked for */
    QUOTA_ACCOUNT,       /* the account would pass its share */
    QUOTA_TOTAL,         /* the daemon-wide cap would be passed */
};

/* Whether n more entries for key (NULL: none) fit under max_total and
 * max_per_account. Changes nothing. */
enum quota_verdict quota_check(const struct quota *q, const char *key, unsigned n,
                               unsigned max_total, unsigned max_per_account);

/* Entries counted for key now. */
unsigned quota_count(const struct quota *q, const char *key);

/*
 * Counts one entry for key (NULL: the total only), without checking the
 * caps (quota_check first). *acct: what quota_put() takes back, NULL for
 * key NULL. false when out of memory (nothing counted).
 */
bool quota_take(struct quota *q, const char *key, struct quota_acct **acct);

/* The key acct counts for ("user alice"), borrowed while it has entries; NULL for NULL. */
const char *quota_acct_key(const struct quota_acct *acct);

/* Takes back one entry counted by quota_take() (acct may be NULL). */
void quota_put(struct quota *q, struct quota_acct *acct);

/* Frees every account; the entries are forgotten. */
void quota_clear(struct quota *q);

#endif
