/*
 * secret.h - the one rule for files that hold secrets: the users file
 * (password hashes, users.c) and the ZooKeeper auth file (a password,
 * settings.c). A header of its own, inline, so that each of those files
 * still builds alone (the fuzz harnesses link one of them each).
 */
#ifndef LOCKBROKER_SECRET_H
#define LOCKBROKER_SECRET_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

/*
 * Like ssh with a private key: a secret others can read is no secret, and a
 * file others can write lets them in. Only the "others" bits count: the
 * owner and the group are trusted, so 0600 and 0640 (root:lockbroker) pass;
 * the owner is not checked. mode is st_mode from fstat() of the open file.
 * Returns 0, or -1 with "PATH: others may read or write it (mode 0644);
 * chmod o-rwx PATH" in err (errlen bytes).
 */
static inline int secret_file_check(const char *path, mode_t mode, char *err, size_t errlen)
{
    if (!(mode & (S_IROTH | S_IWOTH)))
        return 0;
    snprintf(err, errlen, "%s: others may read or write it (mode %04o); chmod o-rwx %s", path,
             (unsigned)(mode & 07777), path);
    return -1;
}

#endif
