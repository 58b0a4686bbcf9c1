/*
 * score_avx512.c — kve_score's per-slot kernels on AVX-512: 16 frequencies
 * a vector (masked tails), fused multiply-adds, one horizontal sum per
 * query head; bf16 and f16 keys widened 16 at a time. Sums split across
 * lanes, so results differ from the scalar order by float rounding only.
 */
#include <immintrin.h>

#include "device/score_body.h"
#include "kve_cpu_kernels.h"

static void kve512_score_load(const unsigned char *key, uint32_t dtype, uint32_t dim, float *out)
{
    uint32_t e = 0;
    if (dtype == KVE_DTYPE_F32) {
        for (; e + 16 <= dim; e += 16)
            _mm512_storeu_ps(out + e, _mm512_loadu_ps((const float *)key + e));
    } else if (dtype == KVE_DTYPE_BF16) {
        for (; e + 16 <= dim; e += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)key + e));
            __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
            _mm512_storeu_ps(out + e, _mm512_castsi512_ps(w));
        }
    } else {
        for (; e + 16 <= dim; e += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)key + e));
            _mm512_storeu_ps(out + e, _mm512_cvtph_ps(h));
        }
    }
    for (; e < dim; e++)
        out[e] = kve_score_elem(key, dtype, e);
}

static void kve512_score_group(const float *coef, const float *key, float *mag, uint32_t nf,
                               uint32_t group, float *raw)
{
    for (uint32_t f = 0; f < nf; f += 16) {
        __mmask16 m = nf - f >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nf - f)) - 1);
        __m512 kr = _mm512_maskz_loadu_ps(m, key + f), ki = _mm512_maskz_loadu_ps(m, key + nf + f);
        __m512 s = _mm512_sqrt_ps(_mm512_fmadd_ps(kr, kr, _mm512_mul_ps(ki, ki)));
        _mm512_mask_storeu_ps(mag + f, m, s);
    }
    for (uint32_t j = 0; j < group; j++) {
        const float *re = coef + (size_t)j * 3 * nf, *im = re + nf, *b = im + nf;
        __m512 acc = _mm512_setzero_ps();
        for (uint32_t f = 0; f < nf; f += 16) {
            __mmask16 m = nf - f >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nf - f)) - 1);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, re + f),
                                  _mm512_maskz_loadu_ps(m, key + f), acc);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, im + f),
                                  _mm512_maskz_loadu_ps(m, key + nf + f), acc);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, b + f),
                                  _mm512_maskz_loadu_ps(m, mag + f), acc);
        }
        raw[j] = _mm512_reduce_add_ps(acc);
    }
}

static float kve512_score_knorm(const float *key, uint32_t dim)
{
    __m512 acc = _mm512_setzero_ps();
    for (uint32_t e = 0; e < dim; e += 16) {
        __mmask16 m = dim - e >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (dim - e)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, key + e);
        acc = _mm512_fmadd_ps(x, x, acc);
    }
    return -sqrtf(_mm512_reduce_add_ps(acc));
}

/* Keys this far ahead of the one being scored are prefetched, every line:
 * they lie wherever the page table put them. */
#define KVE512_AHEAD 8u

static void kve512_prefetch(const unsigned char *const *keys, size_t off, uint32_t c, uint32_t n,
                            size_t bytes)
{
    if (c + KVE512_AHEAD < n)
        for (size_t b = 0; b < bytes; b += 64)
            _mm_prefetch((const char *)(keys[c + KVE512_AHEAD] + off + b), _MM_HINT_T0);
}

/* Elements e .. e + 15 of a key (lanes off @p m zero), as load writes them. */
static __m512 kve512_elems(const unsigned char *key, uint32_t dtype, uint32_t e, __mmask16 m)
{
    if (dtype == KVE_DTYPE_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)key + e);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)key + e);
    if (dtype == KVE_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* knorm(load(key)) with the key in registers: the same lanes, order and
 * reduction. */
static void kve512_score_knorm_keys(const unsigned char *const *keys, size_t off, uint32_t n,
                                    uint32_t dtype, uint32_t dim, float *raw, uint32_t stride)
{
    size_t bytes = (size_t)dim * (dtype == KVE_DTYPE_F32 ? 4 : 2);
    for (uint32_t c = 0; c < n; c++) {
        kve512_prefetch(keys, off, c, n, bytes);
        const unsigned char *key = keys[c] + off;
        __m512 acc = _mm512_setzero_ps();
        for (uint32_t e = 0; e < dim; e += 16) {
            __mmask16 m = dim - e >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (dim - e)) - 1);
            __m512 x = kve512_elems(key, dtype, e, m);
            acc = _mm512_fmadd_ps(x, x, acc);
        }
        raw[(size_t)c * stride] = -sqrtf(_mm512_reduce_add_ps(acc));
    }
}

static void kve512_score_group_keys(const float *coef, const unsigned char *const *keys,
                                    size_t off, uint32_t n, uint32_t dtype, uint32_t nf,
                                    uint32_t group, float *key, float *mag, float *raw,
                                    uint32_t stride)
{
    size_t bytes = (size_t)nf * 2 * (dtype == KVE_DTYPE_F32 ? 4 : 2);
    for (uint32_t c = 0; c < n; c++) {
        kve512_prefetch(keys, off, c, n, bytes);
        kve512_score_load(keys[c] + off, dtype, 2 * nf, key);
        kve512_score_group(coef, key, mag, nf, group, raw + (size_t)c * stride);
    }
}

const kve_score_kernels kve_score_kernels_avx512 = {
    .isa = KVE_CPU_ISA_AVX512,
    .load = kve512_score_load,
    .group = kve512_score_group,
    .knorm = kve512_score_knorm,
    .knorm_keys = kve512_score_knorm_keys,
    .group_keys = kve512_score_group_keys,
};
