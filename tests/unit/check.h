/* check.h - the one assertion macro of the C unit-test programs: counts
 * passes and failures (each program prints them and exits non-zero on a
 * failure) and names the failing line. Included once per test program. */
#ifndef NP_TESTS_CHECK_H
#define NP_TESTS_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
        }                                                                                          \
    } while (0)

#endif
