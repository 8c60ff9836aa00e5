/*
 * zk_names.c - distributed mode, node machinery: what a lock node's name
 * says. Every daemon reads the others' nodes by these rules (zk_fair.c,
 * zk_lease.c, zk_query.c), so they change only with the node names themselves.
 * The ZooKeeper recipes' nodes are read by the same rules, from the marker
 * each recipe puts before the sequence (kazoo's recipe/lock.py, Curator's
 * StandardLockInternalsDriver and InterProcessReadWriteLock, go-zookeeper's
 * lock.go).
 */
#include "config.h"
#include "zk_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ZooKeeper appends a sequence of 10 digits ("%010d") to a prefix. */
#define SEQ_DIGITS 10

static bool is_alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*
 * The sequence number ZooKeeper appended: the last 10 characters, digits.
 * Every recipe's prefix ends in a separator ('-' for ours, Curator's mutex
 * and go-zookeeper's, '_' for kazoo's and Curator's read/write lock), so
 * 10 digits right after a letter or a digit are not a sequence: the tail
 * of a kazoo Semaphore's lease, a 32-digit hex uuid, would otherwise pass
 * for one about once in a hundred.
 */
long long zk_seq_of(const char *child)
{
    size_t len = strlen(child);

    if (len < SEQ_DIGITS || (len > SEQ_DIGITS && is_alnum(child[len - SEQ_DIGITS - 1])))
        return -1;
    for (size_t i = len - SEQ_DIGITS; i < len; i++)
        if (child[i] < '0' || child[i] > '9')
            return -1;
    return strtoll(child + len - SEQ_DIGITS, NULL, 10);
}

/*
 * Each recipe finds its contenders by the marker right before the
 * sequence: kazoo's regular expression "(?:__lock__|...)(-?\d{10})$",
 * Curator's lastIndexOf(lockName) (its mutex's lockName is "lock-", after
 * the "-" that ends its protected prefix; go-zookeeper names its nodes
 * the same way). Our own tags (excl, shared, limit<n>) never end in one.
 */
const struct zk_marker zk_markers[ZK_MARKERS] = {
    { "__lock__", LOCK_EXCLUSIVE, "kazoo Lock, WriteLock" },
    { "__rlock__", LOCK_SHARED, "kazoo ReadLock" },
    { "-lock-", LOCK_EXCLUSIVE, "Curator InterProcessMutex, go-zookeeper Lock" },
    { "__WRIT__", LOCK_EXCLUSIVE, "Curator InterProcessReadWriteLock write lock" },
    { "__READ__", LOCK_SHARED, "Curator InterProcessReadWriteLock read lock" },
};

const struct zk_marker *zk_marker_of(const char *child)
{
    size_t len = strlen(child);

    if (zk_seq_of(child) < 0)
        return NULL;
    for (size_t i = 0; i < ZK_MARKERS; i++) {
        size_t m = strlen(zk_markers[i].text);

        if (len >= SEQ_DIGITS + m &&
            memcmp(child + len - SEQ_DIGITS - m, zk_markers[i].text, m) == 0)
            return &zk_markers[i];
    }
    return NULL;
}

bool zk_has_marker(const char *s, size_t len)
{
    for (size_t i = 0; i < ZK_MARKERS; i++) {
        size_t m = strlen(zk_markers[i].text);

        for (size_t at = 0; at + m <= len; at++)
            if (memcmp(s + at, zk_markers[i].text, m) == 0)
                return true;
    }
    return false;
}

/*
 * A recipe's node: its marker says exclusive or shared. A name without a
 * sequence is none of ours (a kazoo Semaphore's lease, a uuid): it holds
 * outside the order. Ours,
 * "<daemon>-<id>-<tag>-<seq>": tag "shared", "limit<n>" or "excl", followed
 * by ".lease" on a lease's persistent node, then by ".d<ms>" when the
 * request has a lock-delay (PROTOCOL.md, Lock-delay). Nodes
 * of daemons older than lock modes have no tag (the field before the
 * sequence is their numeric id): they are exclusive, as is anything
 * unknown, which can only make this daemon wait longer, never grant more.
 */
struct zkind zk_kind_of(const char *child)
{
    struct zkind k = { LOCK_EXCLUSIVE, 0, false, 0, false, false };
    const struct zk_marker *m = zk_marker_of(child);
    size_t len = strlen(child);
    const char *end, *tag, *d;
    char *stop;
    unsigned long n;

    if (m) {
        k.mode = m->mode;
        k.recipe = true;
        return k;
    }
    if (zk_seq_of(child) < 0) {
        k.unordered = true;
        return k;
    }
    if (len < 12 || child[len - 11] != '-')
        return k;
    end = child + len - 11;
    for (tag = end; tag > child && tag[-1] != '-'; tag--)
        ;
    /* ".d<ms>" last: digits only, up to the bound of delay=. */
    for (d = end; d > tag && d[-1] >= '0' && d[-1] <= '9'; d--)
        ;
    if (d < end && d - tag >= 2 && d[-1] == 'd' && d[-2] == '.') {
        n = strtoul(d, &stop, 10);
        if (stop == end && n <= 60000) {
            k.delay_ms = (int64_t)n;
            end = d - 2;
        }
    }
    if (end - tag > 6 && strncmp(end - 6, ".lease", 6) == 0) {
        k.lease = true;
        end -= 6;
    }
    if (end - tag == 6 && strncmp(tag, "shared", 6) == 0) {
        k.mode = LOCK_SHARED;
    } else if (end - tag > 5 && strncmp(tag, "limit", 5) == 0 && tag[5] >= '1' &&
               tag[5] <= '9') {
        n = strtoul(tag + 5, &stop, 10);
        if (stop == end && n <= LOCK_LIMIT_MAX) {
            k.mode = LOCK_LIMIT;
            k.limit = (unsigned)n;
        }
    }
    return k;
}

/* Semaphores of one limit are one class, read/write locks the other:
 * requests of different classes never hold a name together. */
bool zk_same_class(struct zkind a, struct zkind b)
{
    if ((a.mode == LOCK_LIMIT) != (b.mode == LOCK_LIMIT))
        return false;
    return a.mode != LOCK_LIMIT || a.limit == b.limit;
}

/* ------------------------------------------------ [interop] node names */

uint64_t zk_daemon_tag(const char *daemon_id)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (const char *p = daemon_id; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 0x100000001b3ULL;
    }
    return h;
}

void zk_interop_prefix(enum interop_profile p, enum lock_mode mode, uint64_t tag, uint64_t id,
                       char *buf, size_t len)
{
    bool shared = mode == LOCK_SHARED;

    if (p == INTEROP_KAZOO) {
        snprintf(buf, len, "%016llx%016llx%s", (unsigned long long)tag,
                 (unsigned long long)id, shared ? "__rlock__" : "__lock__");
        return;
    }
    /* Curator's protected prefix: "_c_", a UUID as Java writes it, '-'. */
    snprintf(buf, len, "_c_%08llx-%04llx-%04llx-%04llx-%012llx-%s",
             (unsigned long long)(tag >> 32), (unsigned long long)((tag >> 16) & 0xffff),
             (unsigned long long)(tag & 0xffff), (unsigned long long)(id >> 48),
             (unsigned long long)(id & 0xffffffffffffULL),
             p == INTEROP_CURATOR ? "lock-" : shared ? "__READ__" : "__WRIT__");
}

/* n lower-case hex digits at s into *v (shifted in); false if not. */
static bool hex_in(const char *s, size_t n, uint64_t *v)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];

        if (c >= '0' && c <= '9')
            *v = *v << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            *v = *v << 4 | (uint64_t)(c - 'a' + 10);
        else
            return false;
    }
    return true;
}

bool zk_interop_parse(const char *child, uint64_t *tag, uint64_t *id)
{
    static const char *const kazoo[] = { "__lock__", "__rlock__" };
    static const char *const curator[] = { "lock-", "__READ__", "__WRIT__" };
    /* Where each group of the uuid starts in "_c_" + uuid, and its length. */
    static const unsigned at[] = { 3, 12, 17, 22, 27 }, n[] = { 8, 4, 4, 4, 12 };
    uint64_t v = 0;
    const char *rest;

    if (strncmp(child, "_c_", 3) == 0) {
        for (unsigned g = 0; g < 5; g++)
            if (!hex_in(child + at[g], n[g], &v) || child[at[g] + n[g]] != '-')
                return false;
        /* v holds the last 64 bits; the first 64 again: */
        *id = v;
        v = 0;
        if (!hex_in(child + 3, 8, &v) || !hex_in(child + 12, 4, &v) || !hex_in(child + 17, 4, &v))
            return false;
        *tag = v;
        rest = child + 40;
        for (unsigned i = 0; i < 3; i++)
            if (strncmp(rest, curator[i], strlen(curator[i])) == 0 &&
                strlen(rest) == strlen(curator[i]) + 10)
                return true;
        return false;
    }
    if (!hex_in(child, 16, &v))
        return false;
    *tag = v;
    v = 0;
    if (!hex_in(child + 16, 16, &v))
        return false;
    *id = v;
    rest = child + 32;
    for (unsigned i = 0; i < 2; i++)
        if (strncmp(rest, kazoo[i], strlen(kazoo[i])) == 0 &&
            strlen(rest) == strlen(kazoo[i]) + 10)
            return true;
    return false;
}

enum interop_profile zk_interop_profile_of(const char *child)
{
    uint64_t tag, id;

    if (!zk_interop_parse(child, &tag, &id))
        return INTEROP_NONE;
    if (child[0] != '_')
        return INTEROP_KAZOO;
    return strncmp(child + 40, "lock-", 5) == 0 ? INTEROP_CURATOR : INTEROP_CURATOR_RW;
}
