/* kve_util.h — small helpers every layer uses: the one align-up macro and
 * the one int32 order. Plain C (no library calls in the macro), so device
 * code (kernels_cuda/) may use KVE_ALIGN_UP too. */
#ifndef KVE_UTIL_H
#define KVE_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* @p x rounded up to a multiple of @p a (a power of two); size_t arithmetic. */
#define KVE_ALIGN_UP(x, a) (((size_t)(x) + ((size_t)(a) - 1)) & ~((size_t)(a) - 1))

/* The largest int32: positions, slots and counts the SPEC bounds by 2^31-1. */
#define KVE_I32_MAX 0x7fffffffu

/* Bytes every allocation of every backend is aligned to (kve_alloc). */
#define KVE_ALLOC_ALIGN 256

/* qsort order of int32_t, ascending. */
static inline int kve_cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

#endif
