/*
 * fuzz_common.h — what every libFuzzer harness of tests/fuzz shares: a
 * decoder that turns the fuzzer's bytes into bounded, adversarial values,
 * exact-size allocations (so ASan pins any out-of-bounds access on the
 * library), one CPU context per ISA, and the failure report.
 */
#ifndef KVE_FUZZ_COMMON_H
#define KVE_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_test_base.h"
#include "kvevict.h"

/* Bytes in; values out. Past the end every read is 0, so short inputs are
 * still whole programs. */
typedef struct {
    const uint8_t *p;
    size_t n;
} fz_bytes;

static inline uint8_t fz_u8(fz_bytes *b)
{
    if (!b->n)
        return 0;
    b->n--;
    return *b->p++;
}

static inline uint32_t fz_u32(fz_bytes *b)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)fz_u8(b) << (8 * i);
    return v;
}

static inline uint64_t fz_u64(fz_bytes *b)
{
    uint64_t lo = fz_u32(b);
    return lo | (uint64_t)fz_u32(b) << 32;
}

/* 0 .. n-1 (0 when n == 0). */
static inline uint32_t fz_below(fz_bytes *b, uint32_t n)
{
    if (n <= 1)
        return 0;
    uint32_t v = n <= 256 ? fz_u8(b) : fz_u32(b);
    return v % n;
}

/* A u32 that is usually small (below @p small) and sometimes an edge value:
 * 2^31-1, 2^31, 2^32-1 or raw bytes. */
static inline uint32_t fz_count(fz_bytes *b, uint32_t small)
{
    uint8_t sel = fz_u8(b);
    if (sel < 240)
        return fz_below(b, small);
    static const uint32_t edges[] = {0x7fffffffu, 0x80000000u, 0xffffffffu, 0x7ffffffeu};
    if (sel < 252)
        return edges[sel & 3];
    return fz_u32(b);
}

/* A splitmix64 step: bulk bytes (cache contents, tables) that need not
 * cost the fuzzer's input. */
static inline uint64_t fz_mix(uint64_t *s) { return kve_splitmix64(s); }

static inline int fz_cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* Exactly @p bytes of heap (the pointer of malloc(0) when 0), filled with
 * @p fill: a canary to see what the library wrote. NULL only when the size
 * is absurd: callers then skip the input. */
static inline void *fz_alloc(size_t bytes, int fill)
{
    if (bytes > ((size_t)1 << 28))
        return NULL;
    void *p = malloc(bytes); /* malloc(0): a pointer with zero usable bytes */
    if (p)
        memset(p, fill, bytes);
    return p;
}

/* Strides near SIZE_MAX (issue 36): products with them pass SIZE_MAX. */
static inline size_t fz_huge_stride(uint32_t k)
{
    static const size_t huge[4] = {(size_t)1 << 63, ((size_t)1 << 62) + 1, SIZE_MAX / 8 + 1,
                                   SIZE_MAX};
    return huge[k & 3];
}

/* Elements of a view of @p rows x @p cols elements (strides @p rs, @p cs),
 * in exact arithmetic: the harnesses' model of a strided view's size,
 * apart from the library's kve_rows_span. */
static inline unsigned __int128 fz_span128(size_t rows, size_t rs, size_t cols, size_t cs)
{
    return rows && cols ? (unsigned __int128)(rows - 1) * rs + (unsigned __int128)(cols - 1) * cs + 1
                        : 0;
}

/* fz_alloc's block at a 256-byte boundary (kve_alloc's alignment), @p bytes
 * rounded up to it for aligned_alloc: what lies past @p bytes is fill. */
static inline void *fz_alloc_aligned(size_t bytes, int fill)
{
    if (bytes > ((size_t)1 << 28))
        return NULL;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    void *p = aligned_alloc(256, rounded ? rounded : 256);
    if (p)
        memset(p, fill, rounded);
    return p;
}

/* A copy of @p bytes at @p src (for "errors change nothing"). */
static inline void *fz_dup(const void *src, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p && bytes)
        memcpy(p, src, bytes);
    return p;
}

#define FZ_FAIL(...)                                                                             \
    do {                                                                                         \
        fprintf(stderr, "FUZZ CHECK FAILED at %s:%d: ", __FILE__, __LINE__);                    \
        fprintf(stderr, __VA_ARGS__);                                                            \
        fprintf(stderr, "\n  kve_last_error: %s\n", kve_last_error());                          \
        abort();                                                                                 \
    } while (0)

#define FZ_CHECK(cond, ...)                                                                      \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "FUZZ CHECK FAILED: %s\n", #cond);                                   \
            FZ_FAIL(__VA_ARGS__);                                                                \
        }                                                                                        \
    } while (0)

/* An error status must come with a message. */
#define FZ_CHECK_ERROR_MESSAGE(st)                                                               \
    FZ_CHECK(kve_last_error()[0] != '\0', "%s without a message", kve_status_string(st))

/* One CPU context per ISA this machine runs (scalar, AVX2, AVX-512), one
 * thread each (the fuzzer is single-threaded; threads are tests/tsan's). The
 * input's byte picks one, so every ISA's checks and kernels are fuzzed. */
static inline kve_context *fz_context(fz_bytes *b)
{
    static kve_context *ctx[3];
    static int n_ctx = -1;
    if (n_ctx < 0) {
        n_ctx = 0;
        static const kve_cpu_isa isas[3] = {KVE_CPU_ISA_SCALAR, KVE_CPU_ISA_AVX2,
                                            KVE_CPU_ISA_AVX512};
        for (int i = 0; i < 3; i++) {
            int ok = 0;
            kve_context *c;
            if (kve_cpu_isa_available(isas[i], &ok) != KVE_OK || !ok)
                continue;
            if (kve_context_create(KVE_BACKEND_CPU, &c) != KVE_OK)
                FZ_FAIL("kve_context_create");
            if (kve_context_set_cpu_isa(c, isas[i]) != KVE_OK || kve_context_set_threads(c, 1) != KVE_OK)
                FZ_FAIL("context setup");
            ctx[n_ctx++] = c;
        }
        if (!n_ctx)
            FZ_FAIL("no CPU context");
    }
    return ctx[fz_below(b, (uint32_t)n_ctx)];
}

#endif
