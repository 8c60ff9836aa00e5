/*
 * fuzz_users.c - libFuzzer harness for the users file loader (conf/users.c);
 * docs/FUZZING.md says how to run it.
 *
 * The input is a users file, any bytes. users_parse() and, through a memfd,
 * users_load_file() must agree; an error names the input and one of its
 * lines; a table holds every user that a line names, found by users_find(),
 * and user_may() takes any lock name. users_verify() is left out: its cost
 * is crypt(3)'s, which the hash in the file chooses (rounds=), and it reads
 * nothing but the hash that users_parse() checked.
 */
#define _GNU_SOURCE         /* memfd_create() in fuzz_check.h */
#include "users.h"
#include "proto.h"
#include "fuzz_check.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SOURCE "fuzz.users"

/* Every line that defines a user: its name is in the table. */
static void check_table(const struct users *u, const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    size_t defined = 0;

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end, *colon;
        const struct user *user;
        char name[PROTO_NAME_MAX + 1];

        while (p < stop && (*p == ' ' || *p == '\t'))
            p++;
        while (stop > p && (stop[-1] == ' ' || stop[-1] == '\t' || stop[-1] == '\r'))
            stop--;
        if (p < stop && *p != '#') {
            defined++;
            colon = memchr(p, ':', (size_t)(stop - p));
            CHECK(colon && colon > p && (size_t)(colon - p) <= PROTO_USER_MAX);
            user = users_find(u, p, (size_t)(colon - p));
            CHECK(user && strlen(user_name(user)) == (size_t)(colon - p) &&
                  memcmp(user_name(user), p, (size_t)(colon - p)) == 0);
            /* The line's own bytes as a lock name (NUL-terminated, cut to a name's length). */
            snprintf(name, sizeof(name), "%.*s", (int)(stop - p), p);
            (void)user_may(user, name);
            (void)user_may(user, "deploy");
            (void)user_may_break(user, name);
        }
        p = nl ? nl + 1 : end;
    }
    CHECK(users_count(u) == defined && defined <= USERS_MAX);
    /* Any bytes as a name, longer than a user name too. */
    (void)users_find(u, (const char *)data, size < 200 ? size : 200);
}

static struct users *load_file(const uint8_t *data, size_t size, char *path, size_t pathlen,
                               char *err, size_t errlen)
{
    int fd = fuzz_memfd(data, size, path, pathlen);
    struct users *u;

    /* A memfd is made with mode 0777; the loader refuses a users file that
     * others may read or write (conf/secret.h). */
    CHECK(fchmod(fd, 0600) == 0);
    u = users_load_file(path, err, errlen);
    close(fd);
    return u;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);    /* exactly size bytes, for ASan */
    char err[1024], ferr[1024], path[64], fmsg[1024];
    struct users *u, *fu;
    size_t lines = 1;

    CHECK(buf);
    memcpy(buf, data, size);
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';

    err[0] = '\0';
    u = users_parse(buf, size, SOURCE, err, sizeof(err));
    if (u)
        check_table(u, data, size);
    else
        fuzz_check_error(err, SOURCE, lines);

    ferr[0] = '\0';
    fu = load_file(data, size, path, sizeof(path), ferr, sizeof(ferr));
    CHECK(!u == !fu);
    if (!u) {
        snprintf(fmsg, sizeof(fmsg), "%s%s", SOURCE, ferr + strlen(path));
        if (strcmp(err, fmsg) != 0) {
            fprintf(stderr, "buffer: %s\nfile:   %s\n", err, ferr);
            CHECK(0);
        }
    } else {
        CHECK(users_count(u) == users_count(fu));
    }
    users_free(fu);
    users_free(u);
    free(buf);
    return 0;
}
