/*
 * interop.c - the [interop] section: rules that map lock names to a
 * ZooKeeper path and a foreign recipe's node names (interop.h), their
 * checks, and what a name of a rule cannot serve.
 */
#include "interop.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SET_ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)

static const char *const profile_names[] = { "", "curator", "kazoo", "curator-rw" };

const char *interop_profile_name(enum interop_profile p)
{
    return (unsigned)p < sizeof(profile_names) / sizeof(profile_names[0]) ? profile_names[p]
                                                                          : "?";
}

bool interop_profile_shared(enum interop_profile p)
{
    return p == INTEROP_KAZOO || p == INTEROP_CURATOR_RW;
}

/* Lock name characters (proto_name_valid) and the glob characters of
 * [zookeeper] nonfair and LOCKS. */
static bool glob_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("._:@-*?[]!", c);
}

static int check_glob(const char *glob, const char *value, char *err, size_t errlen)
{
    size_t len = strlen(glob);

    /* inih splits a line at its first '=' or ':': "a:b* = kazoo /x" reaches
     * us as the key "a" with the value "b* = kazoo /x". */
    if (strchr(value, '=')) {
        size_t n = strcspn(value, "=");

        while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
            n--;
        return SET_ERR("[interop] '%s:%.*s': a glob cannot hold ':' here (the file's "
                       "syntax reads it as '='); write '?' in its place", glob, (int)n, value);
    }
    if (len == 0 || len > INTEROP_GLOB_MAX)
        return SET_ERR("[interop] '%s': a glob is 1 to %d bytes", glob, INTEROP_GLOB_MAX);
    for (size_t i = 0; i < len; i++)
        if (!glob_char(glob[i]))
            return SET_ERR("[interop] '%s': a glob may hold A-Z a-z 0-9 . _ @ - and "
                           "* ? [ ] ! only", glob);
    return 0;
}

/*
 * An absolute ZooKeeper path: segments of lock name characters (and one
 * '*' in all, which becomes a lock name: never "." nor ".."), none empty,
 * none "." or "..", not under /zookeeper (the server's own). So every
 * substitution is a valid path.
 */
static int check_path(const char *glob, const char *path, char *err, size_t errlen)
{
    size_t len = strlen(path);
    const char *star = strchr(path, '*');

    if (len < 2 || len > INTEROP_PATH_MAX || path[0] != '/')
        return SET_ERR("[interop] %s: '%s' is not an absolute ZooKeeper path of 2 to %d "
                       "bytes like /myapp/locks/*", glob, path, INTEROP_PATH_MAX);
    if (star && strchr(star + 1, '*'))
        return SET_ERR("[interop] %s: '%s' holds '*' more than once", glob, path);
    for (const char *seg = path + 1;; ) {
        size_t n = strcspn(seg, "/");

        if (n == 0)
            return SET_ERR("[interop] %s: '%s' has an empty segment (a '//' or a "
                           "trailing '/')", glob, path);
        if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return SET_ERR("[interop] %s: '%s' has a '.' or '..' segment", glob, path);
        for (size_t i = 0; i < n; i++)
            if (!((seg[i] >= 'a' && seg[i] <= 'z') || (seg[i] >= 'A' && seg[i] <= 'Z') ||
                  (seg[i] >= '0' && seg[i] <= '9') || strchr("._:@-*", seg[i])))
                return SET_ERR("[interop] %s: '%s': a path may hold / A-Z a-z 0-9 . _ : @ - "
                               "and one * only", glob, path);
        seg += n;
        if (!*seg++)
            break;
    }
    if (strcmp(path, "/zookeeper") == 0 || strncmp(path, "/zookeeper/", 11) == 0)
        return SET_ERR("[interop] %s: '%s' is under /zookeeper, which is ZooKeeper's own",
                       glob, path);
    return 0;
}

/* "PROFILE PATH" into *profile and path (PATH's bytes, NUL-terminated). */
static int parse_value(const char *glob, const char *value, enum interop_profile *profile,
                       char *path, size_t pathlen, char *err, size_t errlen)
{
    size_t plen = strcspn(value, " \t");
    const char *rest = value + plen;
    unsigned i;

    for (i = 1; i < sizeof(profile_names) / sizeof(profile_names[0]); i++)
        if (plen == strlen(profile_names[i]) && strncmp(value, profile_names[i], plen) == 0)
            break;
    if (i == sizeof(profile_names) / sizeof(profile_names[0]))
        return SET_ERR("[interop] %s: '%.*s' is not a profile (curator, kazoo or "
                       "curator-rw); write GLOB = PROFILE PATH", glob, (int)plen, value);
    *profile = (enum interop_profile)i;
    rest += strspn(rest, " \t");
    if (!*rest)
        return SET_ERR("[interop] %s: no path after the profile; write GLOB = PROFILE PATH",
                       glob);
    if (strcspn(rest, " \t") != strlen(rest))
        return SET_ERR("[interop] %s: '%s': one profile and one path only", glob, value);
    if (strlen(rest) >= pathlen)
        return SET_ERR("[interop] %s: path longer than %d bytes", glob, INTEROP_PATH_MAX);
    snprintf(path, pathlen, "%s", rest);
    return check_path(glob, path, err, errlen);
}

int interop_add(struct interop *in, const char *glob, const char *value, int line,
                char *err, size_t errlen)
{
    char path[INTEROP_PATH_MAX + 2];
    enum interop_profile profile;
    struct interop_rule *rules, *r;

    if (check_glob(glob, value, err, errlen) < 0 ||
        parse_value(glob, value, &profile, path, sizeof(path), err, errlen) < 0)
        return -1;
    for (unsigned i = 0; i < in->n; i++)
        if (strcmp(in->rules[i].glob, glob) == 0) {
            if (in->rules[i].line && line)
                return SET_ERR("[interop] '%s' is set twice (lines %d and %d); keep one",
                               glob, in->rules[i].line, line);
            return SET_ERR("[interop] '%s' is set twice; keep one", glob);
        }
    if (in->n >= INTEROP_RULES_MAX)
        return SET_ERR("[interop]: more than %d rules", INTEROP_RULES_MAX);
    if (!(rules = realloc(in->rules, sizeof(*rules) * (in->n + 1))))
        return SET_ERR("out of memory");
    in->rules = rules;
    r = &rules[in->n];
    r->glob = strdup(glob);
    r->path = strdup(path);
    if (!r->glob || !r->path) {
        free(r->glob);
        free(r->path);
        return SET_ERR("out of memory");
    }
    r->profile = profile;
    r->line = line;
    in->n++;
    return 0;
}

void interop_free(struct interop *in)
{
    for (unsigned i = 0; i < in->n; i++) {
        free(in->rules[i].glob);
        free(in->rules[i].path);
    }
    free(in->rules);
    in->rules = NULL;
    in->n = 0;
}

bool interop_equal(const struct interop *a, const struct interop *b)
{
    if (a->n != b->n)
        return false;
    for (unsigned i = 0; i < a->n; i++)
        if (a->rules[i].profile != b->rules[i].profile ||
            strcmp(a->rules[i].glob, b->rules[i].glob) != 0 ||
            strcmp(a->rules[i].path, b->rules[i].path) != 0)
            return false;
    return true;
}

const struct interop_rule *interop_match(const struct interop *in, const char *name)
{
    for (unsigned i = 0; i < in->n; i++)
        if (fnmatch(in->rules[i].glob, name, 0) == 0)
            return &in->rules[i];
    return NULL;
}

int interop_path(const struct interop_rule *r, const char *name, char *buf, size_t len)
{
    const char *star = strchr(r->path, '*');
    int n = star ? snprintf(buf, len, "%.*s%s%s", (int)(star - r->path), r->path, name,
                            star + 1)
                 : snprintf(buf, len, "%s", r->path);

    return n < 0 || (size_t)n >= len ? -1 : 0;
}

const char *interop_refusal(const struct interop_rule *r, const char *name,
                            const struct interop_req *q, char *buf, size_t len)
{
    const char *p = interop_profile_name(r->profile);

    if (q->limit)
        snprintf(buf, len, "limit= is not served on %s: its [interop] profile %s has no "
                 "semaphore a foreign client would count", name, p);
    else if (q->shared && !interop_profile_shared(r->profile))
        snprintf(buf, len, "shared is not served on %s: its [interop] profile %s has no "
                 "readers", name, p);
    else if (q->ttl)
        snprintf(buf, len, "ttl= is not served on %s: its [interop] profile %s has no "
                 "leases (foreign clients cannot see where one waits)", name, p);
    else if (q->delay)
        snprintf(buf, len, "delay= is not served on %s: its [interop] profile %s has no "
                 "lock-delay (foreign waiters would not honour it)", name, p);
    else
        return NULL;
    return buf;
}

/* The literal part of a glob: up to its first wildcard. */
static size_t literal_len(const char *g)
{
    return strcspn(g, "*?[");
}

bool interop_globs_overlap(const char *a, const char *b)
{
    size_t la = literal_len(a), lb = literal_len(b);

    /* A glob without wildcards is one name: exact. */
    if (!a[la])
        return fnmatch(b, a, 0) == 0;
    if (!b[lb])
        return fnmatch(a, b, 0) == 0;
    return strncmp(a, b, la < lb ? la : lb) == 0;
}

/* FNV-1a, 64 bits. */
static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void interop_digest(const struct interop *in, char *buf, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    if (!in->n) {
        snprintf(buf, len, "%s", "");
        return;
    }
    for (unsigned i = 0; i < in->n; i++) {
        const struct interop_rule *r = &in->rules[i];
        const char *p = interop_profile_name(r->profile);

        /* NUL-separated: no field can run into the next. */
        h = fnv(h, r->glob, strlen(r->glob) + 1);
        h = fnv(h, p, strlen(p) + 1);
        h = fnv(h, r->path, strlen(r->path) + 1);
    }
    snprintf(buf, len, "%ur%016llx", in->n, (unsigned long long)h);
}

/* Where a rule was set, for a message: "SOURCE:LINE" or "SOURCE". */
static void where(const char *source, int line, char *buf, size_t len)
{
    if (line)
        snprintf(buf, len, "%s:%d", source, line);
    else
        snprintf(buf, len, "%s", source);
}

int interop_check(const struct interop *in, const char *hosts, const char *nonfair,
                  const char *root, const char *source, char *err, size_t errlen)
{
    char at[256], glob[INTEROP_GLOB_MAX + 1];
    size_t rlen = root ? strlen(root) : 0;

    for (unsigned i = 0; i < in->n; i++) {
        const struct interop_rule *r = &in->rules[i];

        where(source, r->line, at, sizeof(at));
        if (!hosts)
            return SET_ERR("%s: [interop] %s: locks are shared with ZooKeeper recipes in "
                           "distributed mode only; set [zookeeper] hosts or remove "
                           "[interop]", at, r->glob);
        if (root && strncmp(r->path, root, rlen) == 0 &&
            (r->path[rlen] == '/' || r->path[rlen] == '\0'))
            return SET_ERR("%s: [interop] %s: path %s is inside [zookeeper] root %s, "
                           "which is lockbroker's own; use the path the other clients "
                           "lock", at, r->glob, r->path, root);
        for (const char *p = nonfair; p && *p;) {
            size_t len = strcspn(p, ",");

            snprintf(glob, sizeof(glob), "%.*s", (int)len, p);
            if (interop_globs_overlap(r->glob, glob))
                return SET_ERR("%s: [interop] %s overlaps [zookeeper] nonfair's %s: a name "
                               "is either non-fair or shared with ZooKeeper recipes; make "
                               "the two patterns apart", at, r->glob, glob);
            p += len;
            if (*p)
                p++;
        }
    }
    return 0;
}
