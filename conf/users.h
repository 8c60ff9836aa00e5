/*
 * users.h - the users file ([server] users_file): who may connect, and which
 * lock names each user may use.
 *
 * One user a line, `name:hash:patterns`: a user name as AUTH takes it
 * (proto_user_valid), a crypt(3) hash (`openssl passwd -6`, `mkpasswd`), and
 * a comma-separated list of fnmatch(3) globs of lock names (`*` for all);
 * `break=<glob>` in that list lets the user BREAK others' holds of those names.
 * Blank lines and lines starting with '#' are ignored. Pure code apart from
 * libcrypt and fnmatch: no sockets, no logging, so that the parser can be
 * unit-tested and fuzzed from a memory buffer.
 */
#ifndef LOCKBROKER_USERS_H
#define LOCKBROKER_USERS_H

#include <stddef.h>

#define USERS_FILE_MAX (1024 * 1024)   /* bytes in a users file */
#define USERS_MAX 10000                /* users in one file */
#define USERS_PATTERNS_MAX 64          /* patterns of one user */
#define USERS_HASH_MAX 256             /* bytes in one hash */

struct users;
struct user;

/*
 * Parses buf[0..len) (any bytes; it need not be NUL-terminated). Returns a
 * malloc'd table that the caller frees with users_free(), or NULL with
 * "SOURCE:LINE: what" (or "SOURCE: what") in err (errlen bytes). `source`
 * names the input in that message. An input without users gives an empty
 * table: nobody can log in.
 */
struct users *users_parse(const char *buf, size_t len, const char *source,
                          char *err, size_t errlen);

/* Reads and parses the file at path, a regular file of at most
 * USERS_FILE_MAX bytes that others may neither read nor write (secret.h).
 * Like users_parse(); errors name the path. */
struct users *users_load_file(const char *path, char *err, size_t errlen);

void users_free(struct users *u);   /* NULL is fine */

size_t users_count(const struct users *u);

/* The user called name[0..len), or NULL. Borrowed from u: valid until
 * users_free(u). */
const struct user *users_find(const struct users *u, const char *name, size_t len);

/* The user's name, NUL-terminated; borrowed like the user. */
const char *user_name(const struct user *user);

/*
 * A hash to check an unknown user's password against, so that refusing an
 * unknown user costs what refusing a known one does: the hash of the first
 * user by name (the same method, cost and salt shape as the file's users
 * if they share one method), or a fixed sha512crypt hash when u has no
 * users. Nothing hashes to it for an unknown user: the caller refuses
 * whatever the check says. Borrowed from u.
 */
const char *users_dummy_hash(const struct users *u);

/* The user's crypt(3) hash, NUL-terminated; borrowed like the user. */
const char *user_hash(const struct user *user);

/*
 * 1 if password[0..len) (any bytes; no NUL among them) hashes to the user's
 * hash, else 0 (also when crypt(3) fails, e.g. for an unsupported method).
 * The hash strings are compared in constant time. Costs one crypt(3):
 * about 1 ms for sha512crypt, 20 ms for yescrypt at its default cost.
 */
int users_verify(const struct users *u, const struct user *user, const char *password,
                 size_t len);

/*
 * 1 if password[0..len) hashes to hash (a NUL-terminated crypt(3) hash),
 * else 0; as users_verify() but with the caller's scratch space: cd, of
 * cd_size bytes, is libcrypt's struct crypt_data, wiped before returning.
 * Touches nothing else, so that threads with their own cd may call it at
 * once.
 */
int users_check_password(const char *hash, const char *password, size_t len, void *cd,
                         int cd_size);

/* 1 if the user may use lock name `name` (NUL-terminated): one of its
 * patterns matches it (fnmatch(3), no flags). */
int user_may(const struct user *user, const char *name);

/* 1 if the user may BREAK holds of lock `name`: one of its break=<glob>
 * patterns matches it. */
int user_may_break(const struct user *user, const char *name);

#endif
