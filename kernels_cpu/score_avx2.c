/*
 * score_avx2.c — kve_score's per-slot kernels on AVX2: 8 frequencies a
 * vector (scalar tails), separate multiplies and adds (AVX2 alone does not
 * promise FMA), one horizontal sum per query head; bf16 keys widened 8 at
 * a time (f16 element by element: F16C is not part of the ISA's promise).
 */
#include <immintrin.h>

#include "kve_cpu_kernels.h"
#include "score_body.h"

static float kve2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static void kve2_score_load(const unsigned char *key, uint32_t dtype, uint32_t dim, float *out)
{
    uint32_t e = 0;
    if (dtype == KVE_DTYPE_F32) {
        for (; e + 8 <= dim; e += 8)
            _mm256_storeu_ps(out + e, _mm256_loadu_ps((const float *)key + e));
    } else if (dtype == KVE_DTYPE_BF16) {
        for (; e + 8 <= dim; e += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)key + e));
            __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
            _mm256_storeu_ps(out + e, _mm256_castsi256_ps(w));
        }
    }
    for (; e < dim; e++)
        out[e] = kve_score_elem(key, dtype, e);
}

static void kve2_score_group(const float *coef, const float *key, float *mag, uint32_t nf,
                             uint32_t group, float *raw)
{
    uint32_t body = nf & ~7u;
    for (uint32_t f = 0; f < body; f += 8) {
        __m256 kr = _mm256_loadu_ps(key + f), ki = _mm256_loadu_ps(key + nf + f);
        _mm256_storeu_ps(mag + f, _mm256_sqrt_ps(_mm256_add_ps(_mm256_mul_ps(kr, kr),
                                                               _mm256_mul_ps(ki, ki))));
    }
    for (uint32_t f = body; f < nf; f++)
        mag[f] = sqrtf(key[f] * key[f] + key[f + nf] * key[f + nf]);
    for (uint32_t j = 0; j < group; j++) {
        const float *re = coef + (size_t)j * 3 * nf, *im = re + nf, *b = im + nf;
        __m256 acc = _mm256_setzero_ps();
        for (uint32_t f = 0; f < body; f += 8) {
            __m256 t = _mm256_add_ps(
                _mm256_mul_ps(_mm256_loadu_ps(re + f), _mm256_loadu_ps(key + f)),
                _mm256_mul_ps(_mm256_loadu_ps(im + f), _mm256_loadu_ps(key + nf + f)));
            t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_loadu_ps(b + f), _mm256_loadu_ps(mag + f)));
            acc = _mm256_add_ps(acc, t);
        }
        float s = kve2_hsum(acc);
        for (uint32_t f = body; f < nf; f++)
            s += re[f] * key[f] + im[f] * key[f + nf] + b[f] * mag[f];
        raw[j] = s;
    }
}

static float kve2_score_knorm(const float *key, uint32_t dim)
{
    uint32_t body = dim & ~7u;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t e = 0; e < body; e += 8) {
        __m256 x = _mm256_loadu_ps(key + e);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(x, x));
    }
    float s = kve2_hsum(acc);
    for (uint32_t e = body; e < dim; e++)
        s += key[e] * key[e];
    return -sqrtf(s);
}

const kve_score_kernels kve_score_kernels_avx2 = {
    .isa = KVE_CPU_ISA_AVX2,
    .load = kve2_score_load,
    .group = kve2_score_group,
    .knorm = kve2_score_knorm,
    .cands = kve_score_window_cands,
};
