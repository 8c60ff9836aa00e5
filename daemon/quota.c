/*
 * quota.c - counts of entries per account (see quota.h). An account exists
 * while it has an entry: an address that left costs nothing.
 */
#include "config.h"
#include "quota.h"

#include <search.h>
#include <stdlib.h>
#include <string.h>

struct quota_acct {
    const char *key;     /* points at key_buf */
    unsigned n;          /* entries counted; the account is freed at 0 */
    char key_buf[];
};

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct quota_acct *)a)->key, ((const struct quota_acct *)b)->key);
}

static struct quota_acct *acct_find(const struct quota *q, const char *key)
{
    /* tfind compares with by_key, so a key needs only the string. */
    struct quota_acct k = { .key = key };
    void *found = tfind(&k, &q->tree, by_key);

    return found ? *(struct quota_acct **)found : NULL;
}

const char *quota_acct_key(const struct quota_acct *acct)
{
    return acct ? acct->key : NULL;
}

unsigned quota_count(const struct quota *q, const char *key)
{
    const struct quota_acct *a = key ? acct_find(q, key) : NULL;

    return a ? a->n : 0;
}

enum quota_verdict quota_check(const struct quota *q, const char *key, unsigned n,
                               unsigned max_total, unsigned max_per_account)
{
    if (key && quota_count(q, key) + (unsigned long long)n > max_per_account)
        return QUOTA_ACCOUNT;
    if (q->total + (unsigned long long)n > max_total)
        return QUOTA_TOTAL;
    return QUOTA_OK;
}

bool quota_take(struct quota *q, const char *key, struct quota_acct **acct)
{
    struct quota_acct *a = NULL;

    if (key && !(a = acct_find(q, key))) {
        size_t len = strlen(key);
        void *found;

        if (!(a = calloc(1, sizeof(*a) + len + 1)))
            return false;
        memcpy(a->key_buf, key, len + 1);
        a->key = a->key_buf;
        if (!(found = tsearch(a, &q->tree, by_key))) {
            free(a);
            return false;
        }
    }
    if (a)
        a->n++;
    q->total++;
    *acct = a;
    return true;
}

void quota_put(struct quota *q, struct quota_acct *a)
{
    q->total--;
    if (a && --a->n == 0) {
        tdelete(a, &q->tree, by_key);
        free(a);
    }
}

void quota_clear(struct quota *q)
{
    tdestroy(q->tree, free);
    q->tree = NULL;
    q->total = 0;
}
