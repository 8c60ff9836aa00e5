/*
 * interop.h - the [interop] section (interop.c): which lock names are
 * shared with the ZooKeeper lock recipes of other clients (Curator, kazoo,
 * go-zookeeper), at which ZooKeeper path, and in which recipe's node names.
 * Pure: no ZooKeeper, no event loop; the loader (settings.c) fills it, the
 * command layer asks it what to refuse, distributed mode where to queue.
 *
 *   [interop]
 *   ; GLOB = PROFILE PATH   (PATH: the lock's ZooKeeper path; '*' stands for the name)
 *   deploy   = curator /myapp/locks/deploy
 *   job-*    = kazoo /jobs/lock-*
 *
 * Rules are matched in file order; the first whose glob matches wins.
 */
#ifndef LOCKBROKER_INTEROP_H
#define LOCKBROKER_INTEROP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whose node names a rule's lock is queued with (PROTOCOL.md, "Sharing locks
 * with ZooKeeper recipes"). */
enum interop_profile {
    INTEROP_NONE,        /* not an [interop] name */
    INTEROP_CURATOR,     /* "_c_<uuid>-lock-<seq>": InterProcessMutex, go-zookeeper's Lock;
                          * exclusive only */
    INTEROP_KAZOO,       /* "<hex>__lock__<seq>", "<hex>__rlock__<seq>": kazoo's Lock,
                          * WriteLock and ReadLock */
    INTEROP_CURATOR_RW,  /* "_c_<uuid>-__WRIT__<seq>", "_c_<uuid>-__READ__<seq>":
                          * InterProcessReadWriteLock */
};

/* The longest GLOB and PATH as written, in bytes. */
#define INTEROP_GLOB_MAX 200
#define INTEROP_PATH_MAX 200
/* Rules at most. */
#define INTEROP_RULES_MAX 256

struct interop_rule {
    char *glob;                    /* malloc'd */
    enum interop_profile profile;
    char *path;                    /* malloc'd; absolute, at most one '*' */
    int line;                      /* where the file set it; 0: not from a file */
};

struct interop {
    struct interop_rule *rules;    /* malloc'd, n of them, in file order */
    unsigned n;
};

/*
 * Adds the rule "glob = value" read on line (0: not from a file). value is
 * "PROFILE PATH". Returns 0, or -1 with the reason in err (no file, no
 * line: the loader adds them) and *in unchanged: a bad glob, profile or
 * path, a glob given twice (names both lines), too many rules, no memory.
 */
int interop_add(struct interop *in, const char *glob, const char *value, int line,
                char *err, size_t errlen);
/* Frees the rules (not in itself) and empties it. */
void interop_free(struct interop *in);
/* Same rules in the same order. */
bool interop_equal(const struct interop *a, const struct interop *b);

/* The first rule whose glob matches name, or NULL (borrowed from in). */
const struct interop_rule *interop_match(const struct interop *in, const char *name);
/* The rule's path with '*' replaced by name, into buf (len bytes).
 * Returns 0, or -1 when it does not fit. */
int interop_path(const struct interop_rule *r, const char *name, char *buf, size_t len);

/* "curator", "kazoo", "curator-rw"; static. */
const char *interop_profile_name(enum interop_profile p);
/* Whether the profile has readers (LOCK ... shared). */
bool interop_profile_shared(enum interop_profile p);

/* What a request asks for, as far as [interop] cares. */
struct interop_req {
    bool shared;         /* LOCK ... shared */
    bool limit;          /* limit=<n> */
    bool ttl;            /* ttl=<ms>: a lease */
    bool delay;          /* delay=<ms> above 0, asked for (not the daemon's default) */
};
/*
 * Why r's lock cannot serve q on name, into buf (len bytes) and returned:
 * what a foreign client could not follow (ERR BAD_ARGS). NULL when it can.
 */
const char *interop_refusal(const struct interop_rule *r, const char *name,
                            const struct interop_req *q, char *buf, size_t len);

/* Whether two globs may match a common name. Conservative: true unless
 * shown otherwise (literal prefixes of which neither begins the other, or
 * a literal glob the other does not match). */
bool interop_globs_overlap(const char *a, const char *b);

/*
 * What daemons compare (the session node's data, zk_presence.c): "" for no
 * rules, else "<n>r<16 hex digits>", a hash of every rule in order. buf:
 * at least 32 bytes.
 */
void interop_digest(const struct interop *in, char *buf, size_t len);

/*
 * Checks the rules against the rest of the configuration, once it is all
 * read: a distributed mode (hosts given), no glob overlapping one of
 * nonfair's (a [zookeeper] nonfair value, or NULL), no path inside root or
 * under /zookeeper. source names the file in the message. Returns 0, or -1
 * with "SOURCE:LINE: why" in err.
 */
int interop_check(const struct interop *in, const char *hosts, const char *nonfair,
                  const char *root, const char *source, char *err, size_t errlen);

#endif
