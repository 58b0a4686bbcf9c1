/* kve_expect.h — the assertion of the plain (non-Check) test programs:
 * a failed condition prints where and why and counts; main() returns
 * kve_failures != 0. One translation unit per program. */
#ifndef KVE_EXPECT_H
#define KVE_EXPECT_H

#include <stdio.h>

static int kve_failures;

#define KVE_EXPECT(cond, ...)                                                                    \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                 \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                 \
            kve_failures++;                                                                      \
        }                                                                                        \
    } while (0)

#endif
