/*
 * users.c - the users file: parsing, password verification, name permissions
 * (see users.h).
 */
#include "users.h"

#include <crypt.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto.h"
#include "secret.h"

struct user {
    char name[PROTO_USER_MAX + 1];
    char *hash;                 /* NUL-terminated; points into line */
    char **patterns;            /* npatterns NUL-terminated globs; point into line */
    bool *breaks;               /* breaks[i]: patterns[i] came as break=<glob> (BREAK) */
    size_t npatterns;
    unsigned lineno;            /* where it was defined, for the duplicate message */
    char *line;                 /* owned: a copy of the line, cut into fields */
};

struct users {
    struct user *v;             /* sorted by name */
    size_t n, cap;
    struct crypt_data *cd;      /* owned: crypt_rn's scratch space (~32 KiB) */
};

#define SET_ERR(...) (snprintf(err, errlen, __VA_ARGS__), (struct users *)NULL)

void users_free(struct users *u)
{
    if (!u)
        return;
    for (size_t i = 0; i < u->n; i++) {
        free(u->v[i].patterns);
        free(u->v[i].breaks);
        free(u->v[i].line);
    }
    free(u->v);
    free(u->cd);
    free(u);
}

size_t users_count(const struct users *u)
{
    return u->n;
}

const char *user_name(const struct user *user)
{
    return user->name;
}

const char *users_dummy_hash(const struct users *u)
{
    /* `openssl passwd -6 -salt lockbrokerdummy x`: any valid sha512crypt hash. */
    return u->n ? u->v[0].hash : "$6$lockbrokerdummy$Q7LCrfWRQAnqzjJ0.9ZZIFvshlg7gSSz70WuWp0vLJI1SW"
                                 "xsbbi8FI1ty/XvWGe.DJofJxxMam8VvZOxtDkKZ/";
}

const char *user_hash(const struct user *user)
{
    return user->hash;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* A pattern as LOCKS takes one: 1..PROTO_NAME_MAX bytes of name characters and * ? [ ] !. */
static bool pattern_valid(const char *p, size_t len)
{
    if (len == 0 || len > PROTO_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!strchr("*?[]!", p[i]) && !(proto_name_valid(&p[i], 1) || p[i] == '.'))
            return false;
    return true;
}

/*
 * A crypt(3) hash this system can verify and that is not a weak legacy
 * method (DES, MD5): what `openssl passwd -6` (sha512crypt), `-5`
 * (sha256crypt) or `mkpasswd` (yescrypt) print. A plain-text password is
 * refused here, since none starts with '$' and is a valid setting.
 * Returns NULL, or why not.
 */
static const char *hash_problem(const char *h)
{
    size_t len = strlen(h);

    if (h[0] != '$')
        return "is not a crypt(3) hash (plain-text passwords are not accepted); make one "
               "with openssl passwd -6 or mkpasswd";
    if (len > USERS_HASH_MAX)
        return "the hash is too long";
    for (size_t i = 0; i < len; i++)
        if (h[i] <= 0x20 || h[i] > 0x7e)
            return "the hash holds a character that no crypt(3) hash has";
    switch (crypt_checksalt(h)) {
    case CRYPT_SALT_OK:
    case CRYPT_SALT_TOO_CHEAP:
        return NULL;
    case CRYPT_SALT_METHOD_LEGACY:
        /* libxcrypt calls sha256crypt legacy; it is not weak like DES or MD5. */
        if (strncmp(h, "$5$", 3) == 0)
            return NULL;
        return "the hash method is weak (legacy); make one with openssl passwd -6 or mkpasswd";
    case CRYPT_SALT_METHOD_DISABLED:
        return "the hash method is disabled in this system's libcrypt";
    default:
        return "is not a crypt(3) hash this system's libcrypt knows";
    }
}

/* Splits the user's pattern list (in place) into u->patterns. Returns NULL, or why not. */
static const char *split_patterns(struct user *u, char *list)
{
    size_t n = 1;

    for (char *p = list; *p; p++)
        n += *p == ',';
    if (n > USERS_PATTERNS_MAX)
        return "more than 64 patterns";
    if (!(u->patterns = calloc(n, sizeof(*u->patterns))) ||
        !(u->breaks = calloc(n, sizeof(*u->breaks))))
        return "out of memory";
    for (char *p = list;; p++) {
        char *end = p + strcspn(p, ","), *last = end;
        bool more = *end == ',';

        while (is_blank(*p))
            p++;
        while (last > p && is_blank(last[-1]))
            last--;
        *last = '\0';
        /* break=<glob>: BREAK of those names (other holders' holds). */
        if ((u->breaks[u->npatterns] = strncmp(p, "break=", 6) == 0))
            p += 6;
        if (!pattern_valid(p, (size_t)(last - p)))
            return "a pattern is 1-200 bytes of lock name characters and * ? [ ] !, "
                   "break=<pattern> for BREAK (patterns are separated by commas)";
        u->patterns[u->npatterns++] = p;
        if (!more)
            break;
        p = end;
    }
    return NULL;
}

/* Cuts line (a malloc'd copy, taken over by *u) into the user's fields.
 * Returns NULL, or why not. */
static const char *parse_user(struct user *u, char *line)
{
    char *hash, *patterns;
    const char *why;
    size_t nlen;

    u->line = line;
    if (!(hash = strchr(line, ':')) || !(patterns = strchr(hash + 1, ':')))
        return "expected name:hash:patterns";
    *hash++ = '\0';
    *patterns++ = '\0';
    if (strchr(patterns, ':'))
        return "expected name:hash:patterns (a ':' too many)";
    nlen = strlen(line);
    if (!proto_user_valid(line, nlen))
        return "a user name is 1-64 bytes of A-Z a-z 0-9 . _ @ -";
    memcpy(u->name, line, nlen + 1);
    if ((why = hash_problem(hash)))
        return why;
    u->hash = hash;
    return split_patterns(u, patterns);
}

static int cmp_user(const void *a, const void *b)
{
    return strcmp(((const struct user *)a)->name, ((const struct user *)b)->name);
}

/* Makes room for one more user. Returns 0, or -1 when out of memory. */
static int grow(struct users *u)
{
    struct user *v;
    size_t cap = u->cap ? u->cap * 2 : 16;

    if (u->n < u->cap)
        return 0;
    if (!(v = realloc(u->v, cap * sizeof(*v))))
        return -1;
    u->v = v;
    u->cap = cap;
    return 0;
}

struct users *users_parse(const char *buf, size_t len, const char *source,
                          char *err, size_t errlen)
{
    struct users *u = calloc(1, sizeof(*u));
    const char *p = buf, *end = buf + len;
    unsigned lineno = 0;

    if (!u || !(u->cd = calloc(1, sizeof(*u->cd)))) {
        users_free(u);
        return SET_ERR("%s: out of memory", source);
    }
    if (len > USERS_FILE_MAX) {
        users_free(u);
        return SET_ERR("%s: larger than %d bytes", source, USERS_FILE_MAX);
    }
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *next = nl ? nl + 1 : end, *stop = nl ? nl : end;
        const char *why;
        struct user *user;
        char *line;

        lineno++;
        while (p < stop && is_blank(*p))
            p++;
        while (stop > p && (is_blank(stop[-1]) || stop[-1] == '\r'))
            stop--;
        if (p == stop || *p == '#') {
            p = next;
            continue;
        }
        if (memchr(p, '\0', (size_t)(stop - p))) {
            users_free(u);
            return SET_ERR("%s:%u: a NUL byte", source, lineno);
        }
        if (u->n == USERS_MAX) {
            users_free(u);
            return SET_ERR("%s:%u: more than %d users", source, lineno, USERS_MAX);
        }
        if (grow(u) < 0 || !(line = strndup(p, (size_t)(stop - p)))) {
            users_free(u);
            return SET_ERR("%s: out of memory", source);
        }
        user = &u->v[u->n++];
        memset(user, 0, sizeof(*user));
        user->lineno = lineno;
        if ((why = parse_user(user, line))) {
            users_free(u);
            return SET_ERR("%s:%u: %s", source, lineno, why);
        }
        p = next;
    }
    /* Sorted for bsearch; equal names end up side by side. Without users
     * u->v is NULL, which qsort() must not be given even for 0 elements. */
    if (u->n)
        qsort(u->v, u->n, sizeof(*u->v), cmp_user);
    for (size_t i = 1; i < u->n; i++)
        if (strcmp(u->v[i - 1].name, u->v[i].name) == 0) {
            const struct user *a = &u->v[i - 1], *b = &u->v[i];
            unsigned first = a->lineno < b->lineno ? a->lineno : b->lineno;
            unsigned again = a->lineno < b->lineno ? b->lineno : a->lineno;

            snprintf(err, errlen, "%s:%u: user '%s' is already defined on line %u", source,
                     again, a->name, first);
            users_free(u);
            return NULL;
        }
    return u;
}

struct users *users_load_file(const char *path, char *err, size_t errlen)
{
    struct users *u;
    struct stat st;
    char *buf;
    size_t got = 0;
    int fd, e;

    /* O_NONBLOCK: a FIFO is refused below, not waited on for a writer. */
    if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
        e = errno;
        if (fd >= 0)
            close(fd);
        return SET_ERR("%s: cannot open: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode) || st.st_size > USERS_FILE_MAX) {
        close(fd);
        if (!S_ISREG(st.st_mode))
            return SET_ERR("%s: %s", path, S_ISDIR(st.st_mode) ? "is a directory"
                                                               : "is not a regular file");
        return SET_ERR("%s: larger than %d bytes", path, USERS_FILE_MAX);
    }
    /* The hashes can be attacked offline: the ZooKeeper auth file's rule. */
    if (secret_file_check(path, st.st_mode, err, errlen) < 0) {
        close(fd);
        return NULL;
    }
    /* One byte more than allowed: a file that grew meanwhile is caught. */
    if (!(buf = malloc((size_t)USERS_FILE_MAX + 1))) {
        close(fd);
        return SET_ERR("%s: out of memory", path);
    }
    for (;;) {
        ssize_t n = read(fd, buf + got, (size_t)USERS_FILE_MAX + 1 - got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            e = errno;
            close(fd);
            free(buf);
            return SET_ERR("%s: cannot read: %s", path, strerror(e));
        }
        if (n == 0 || (got += (size_t)n) > USERS_FILE_MAX)
            break;
    }
    close(fd);
    u = users_parse(buf, got, path, err, errlen);
    free(buf);
    return u;
}

const struct user *users_find(const struct users *u, const char *name, size_t len)
{
    struct user key;

    if (len > PROTO_USER_MAX || u->n == 0)
        return NULL;        /* no users: u->v is NULL, which bsearch() must not get */
    memcpy(key.name, name, len);
    key.name[len] = '\0';
    return bsearch(&key, u->v, u->n, sizeof(*u->v), cmp_user);
}

/* Equal bytes, in a time that depends only on len. */
static bool equal_ct(const char *a, const char *b, size_t len)
{
    volatile unsigned char diff = 0;

    for (size_t i = 0; i < len; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

int users_check_password(const char *hash, const char *password, size_t len, void *cd,
                         int cd_size)
{
    char pw[PROTO_PASSWORD_MAX + 1];
    const char *out;
    size_t hlen = strlen(hash);
    int ok;

    if (len > PROTO_PASSWORD_MAX || memchr(password, '\0', len))
        return 0;
    memcpy(pw, password, len);
    pw[len] = '\0';
    out = crypt_rn(pw, hash, cd, cd_size);
    explicit_bzero(pw, sizeof(pw));
    /* Failure is NULL, or a string starting with '*' that no hash equals. */
    ok = out && strlen(out) == hlen && equal_ct(out, hash, hlen);
    explicit_bzero(cd, (size_t)cd_size);
    return ok;
}

int users_verify(const struct users *u, const struct user *user, const char *password,
                 size_t len)
{
    return users_check_password(user->hash, password, len, u->cd, (int)sizeof(*u->cd));
}

int user_may(const struct user *user, const char *name)
{
    for (size_t i = 0; i < user->npatterns; i++)
        if (!user->breaks[i] && fnmatch(user->patterns[i], name, 0) == 0)
            return 1;
    return 0;
}

int user_may_break(const struct user *user, const char *name)
{
    for (size_t i = 0; i < user->npatterns; i++)
        if (user->breaks[i] && fnmatch(user->patterns[i], name, 0) == 0)
            return 1;
    return 0;
}
