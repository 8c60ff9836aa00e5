/*
 * fuzz_check.h - what the libFuzzer harnesses in tests/fuzz/ share.
 * Include it after defining _GNU_SOURCE (memfd_create).
 */
#ifndef LOCKBROKER_FUZZ_CHECK_H
#define LOCKBROKER_FUZZ_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A broken promise is a crash, so that libFuzzer keeps the input. */
#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* A loader's error message: "SOURCE:LINE: what" with LINE in 1..lines, or
 * "SOURCE: what" (out of memory, a read error); one line. */
static inline void fuzz_check_error(const char *err, const char *source, size_t lines)
{
    size_t n = strlen(source);
    char *end;
    unsigned long line;

    CHECK(strncmp(err, source, n) == 0 && err[n] == ':');
    CHECK(!strchr(err, '\n'));
    if (err[n + 1] == ' ')
        return;
    line = strtoul(err + n + 1, &end, 10);
    if (!(line >= 1 && line <= lines && end[0] == ':' && end[1] == ' ' && end[2]))
        fprintf(stderr, "bad message (%zu lines): %s\n", lines, err);
    CHECK(line >= 1 && line <= lines && end[0] == ':' && end[1] == ' ' && end[2]);
}

/* Puts data in an anonymous file and its name, /proc/self/fd/N, in path:
 * the loaders' file entry points read every byte, NULs included. Returns
 * the descriptor, which the caller closes. */
static inline int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    int fd = memfd_create("fuzz", MFD_CLOEXEC);

    CHECK(fd >= 0);
    CHECK(size == 0 || write(fd, data, size) == (ssize_t)size);
    snprintf(path, pathlen, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
