/*
 * copy_simd.h — the copy body of the AVX2 and AVX-512 tables' copy_runs,
 * written once and compiled into each ISA's file with its target flags.
 * 256-bit moves in both: on the AMD Zen 4 this was measured on, 512-bit
 * moves copied compaction's runs more slowly (docs/BENCHMARKS.md). The
 * streaming variant (copy_runs_stream) stores around the caches, loading
 * its source KVE_STREAM_AHEAD bytes ahead (kve_cpu_kernels.h).
 */
#ifndef KVE_COPY_SIMD_H
#define KVE_COPY_SIMD_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kve_cpu_kernels.h"

/* 128 bytes from s to d, loaded before they are stored; stream (a constant
 * in each caller): non-temporal stores, d 32-byte aligned. */
static inline __attribute__((always_inline)) void kve_simd_block128(char *d, const char *s,
                                                                    int stream)
{
    const __m256i *p = (const __m256i *)(const void *)s;
    __m256i v[4] = {_mm256_loadu_si256(p), _mm256_loadu_si256(p + 1), _mm256_loadu_si256(p + 2),
                    _mm256_loadu_si256(p + 3)};
    __m256i *q = (__m256i *)(void *)d;
    for (int i = 0; i < 4; i++) {
        if (stream)
            _mm256_stream_si256(q + i, v[i]);
        else
            _mm256_storeu_si256(q + i, v[i]);
    }
}

/* bytes from s to d, forward, each block loaded before it is stored: d may
 * overlap s from below (a run moving down), never from above. */
static inline __attribute__((always_inline)) void kve_simd_copy(char *d, const char *s,
                                                                size_t bytes)
{
    size_t o = 0;
    for (; o + 128 <= bytes; o += 128)
        kve_simd_block128(d + o, s + o, 0);
    for (; o + 32 <= bytes; o += 32)
        _mm256_storeu_si256((__m256i *)(void *)(d + o),
                            _mm256_loadu_si256((const __m256i *)(const void *)(s + o)));
    if (o < bytes)
        memmove(d + o, s + o, bytes - o);
}

/* kve_simd_copy's contract with non-temporal stores: plain ones up to the
 * destination's first 32-byte boundary and past its last 128-byte block
 * (kve_simd_copy), each part before the next, so the order of a forward
 * copy stays. The caller fences. */
static inline __attribute__((always_inline)) void kve_simd_stream(char *d, const char *s,
                                                                  size_t bytes)
{
    size_t o = (32 - ((uintptr_t)d & 31)) & 31;
    if (o + 128 > bytes) {
        kve_simd_copy(d, s, bytes);
        return;
    }
    kve_simd_copy(d, s, o);
    for (; o + 128 <= bytes; o += 128) {
        uintptr_t ahead = (uintptr_t)(s + o) + KVE_STREAM_AHEAD; /* may lie past s's object */
        _mm_prefetch((const char *)ahead, _MM_HINT_T0);
        _mm_prefetch((const char *)(ahead + 64), _MM_HINT_T0);
        kve_simd_block128(d + o, s + o, 1);
    }
    kve_simd_copy(d + o, s + o, bytes - o);
}

/* The table's copy_runs_stream: stores visible to every thread on return. */
static void kve_simd_copy_runs_stream(char *const *dst, const char *const *src, const size_t *bytes,
                                      uint32_t count)
{
    for (uint32_t i = 0; i < count; i++)
        kve_simd_stream(dst[i], src[i], bytes[i]);
    _mm_sfence();
}

/* The table's copy_runs (kve_cpu_kernels.h). */
static void kve_simd_copy_runs(char *const *dst, const char *const *src, const size_t *bytes,
                               uint32_t count)
{
    for (uint32_t i = 0; i < count; i++)
        kve_simd_copy(dst[i], src[i], bytes[i]);
}

#endif
