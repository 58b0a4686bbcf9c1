/* kve_test_base.h — the pieces of the test helper library (tests/lib) that
 * need neither Check nor the library: the splitmix64 generator every suite,
 * harness and model draws from, and the int32 order qsort needs. */
#ifndef KVE_TEST_BASE_H
#define KVE_TEST_BASE_H

#include <stdint.h>

/* One splitmix64 step: advances @p s and returns the next 64 bits. */
static inline uint64_t kve_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Ascending int32 order, for qsort. */
static inline int kve_test_cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

#endif
