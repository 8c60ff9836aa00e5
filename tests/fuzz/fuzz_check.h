/*
 * fuzz_check.h - what the libFuzzer harnesses in tests/fuzz/ share.
 */
#ifndef LOCKBROKER_FUZZ_CHECK_H
#define LOCKBROKER_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

/* A broken promise is a crash, so that libFuzzer keeps the input. */
#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                           \
        }                                                                      \
    } while (0)

#endif
