/*
 * score_avx512.c — kve_score's per-slot kernels on AVX-512: 16 frequencies
 * a vector (masked tails), fused multiply-adds, one horizontal sum per
 * query head; bf16 and f16 keys widened 16 at a time. Sums split across
 * lanes, so results differ from the scalar order by float rounding only.
 */
#include <immintrin.h>

#include "kve_cpu_kernels.h"
#include "score_body.h"

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

/* The sum of v's lanes as a tree: lane i + lane i + 8, then + 4, + 2,
 * + 1, the high operand first (GCC's _mm512_reduce_add_ps, written out so
 * that kve512_hsum4 below matches it on every compiler). */
static float kve512_hsum(__m512 v)
{
    __m256 t3 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
    __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1))));
}

/* kve512_hsum of a, b, c and d at once, the same adds on the same lanes,
 * into out[0..3]: a quarter of the shuffles. */
static void kve512_hsum4(__m512 a, __m512 b, __m512 c, __m512 d, float out[4])
{
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)),
                              _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)),
                              _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)));
    __m512 t6 = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)),
                              _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)));
    __m512 t8 = _mm512_add_ps(t6, _mm512_permute_ps(t6, _MM_SHUFFLE(1, 0, 3, 2)));
    __m512 r = _mm512_add_ps(t8, _mm512_permute_ps(t8, _MM_SHUFFLE(0, 1, 0, 1)));
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(
                           _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), r)));
}

static __mmask16 kve512_tail(uint32_t n, uint32_t i)
{
    return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
}

/* |k_f| for f < nf into mag (a float key: k_f = key[f] + i key[f + nf]). */
static void kve512_mags(const float *key, float *mag, uint32_t nf)
{
    for (uint32_t f = 0; f < nf; f += 16) {
        __mmask16 m = kve512_tail(nf, f);
        __m512 kr = _mm512_maskz_loadu_ps(m, key + f), ki = _mm512_maskz_loadu_ps(m, key + nf + f);
        __m512 s = _mm512_sqrt_ps(_mm512_fmadd_ps(kr, kr, _mm512_mul_ps(ki, ki)));
        _mm512_mask_storeu_ps(mag + f, m, s);
    }
}

/* Query head j's lanes: re_j k_r + im_j k_i + b_j |k| over f, unsummed. */
static __m512 kve512_dot(const float *coef, const float *key, const float *mag, uint32_t nf)
{
    const float *re = coef, *im = re + nf, *b = im + nf;
    __m512 acc = _mm512_setzero_ps();
    for (uint32_t f = 0; f < nf; f += 16) {
        __mmask16 m = kve512_tail(nf, f);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, re + f), _mm512_maskz_loadu_ps(m, key + f),
                              acc);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, im + f),
                              _mm512_maskz_loadu_ps(m, key + nf + f), acc);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, b + f), _mm512_maskz_loadu_ps(m, mag + f),
                              acc);
    }
    return acc;
}

static void kve512_score_group(const float *coef, const float *key, float *mag, uint32_t nf,
                               uint32_t group, float *raw)
{
    kve512_mags(key, mag, nf);
    for (uint32_t j = 0; j < group; j++)
        raw[j] = kve512_hsum(kve512_dot(coef + (size_t)j * 3 * nf, key, mag, nf));
}

static float kve512_score_knorm(const float *key, uint32_t dim)
{
    __m512 acc = _mm512_setzero_ps();
    for (uint32_t e = 0; e < dim; e += 16) {
        __m512 x = _mm512_maskz_loadu_ps(kve512_tail(dim, e), key + e);
        acc = _mm512_fmadd_ps(x, x, acc);
    }
    return -sqrtf(kve512_hsum(acc));
}

/* Keys this far ahead of the one being scored are prefetched, every line:
 * they lie wherever the page table put them. */
#define KVE512_AHEAD 16u

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

/* Sum of squares of a key's elements, lanes unsummed: knorm's. */
static __m512 kve512_sumsq(const unsigned char *key, uint32_t dtype, uint32_t dim)
{
    __m512 acc = _mm512_setzero_ps();
    for (uint32_t e = 0; e < dim; e += 16) {
        __m512 x = kve512_elems(key, dtype, e, kve512_tail(dim, e));
        acc = _mm512_fmadd_ps(x, x, acc);
    }
    return acc;
}

/* knorm(load(key)) with the keys in registers, four keys' sums reduced at
 * once: the same lanes, order and tree. */
static void kve512_score_knorm_keys(const unsigned char *const *keys, size_t off, uint32_t n,
                                    uint32_t dtype, uint32_t dim, float *raw, uint32_t stride)
{
    size_t bytes = (size_t)dim * (dtype == KVE_DTYPE_F32 ? 4 : 2);
    for (uint32_t c = 0; c < n; c += 4) {
        __m512 acc[4];
        for (uint32_t k = 0; k < 4; k++) {
            kve512_prefetch(keys, off, c + k, n, bytes);
            acc[k] = c + k < n ? kve512_sumsq(keys[c + k] + off, dtype, dim) : _mm512_setzero_ps();
        }
        float s[4];
        kve512_hsum4(acc[0], acc[1], acc[2], acc[3], s);
        for (uint32_t k = 0; k < 4 && c + k < n; k++)
            raw[(size_t)(c + k) * stride] = -sqrtf(s[k]);
    }
}

/* Four query heads' kve512_dot lanes (coef, coef + 3 nf, ...) for two raw
 * keys k0 and k1 side by side, each key widened in registers and its
 * |k_f| taken on the way (kve512_mags' operations): one head's fused
 * multiply-adds depend on each other, eight chains do not, and a
 * coefficient loaded serves both keys. */
static void kve512_dot4x2(const float *coef, const unsigned char *k0, const unsigned char *k1,
                          uint32_t dtype, uint32_t nf, __m512 a0[4], __m512 a1[4])
{
    for (uint32_t k = 0; k < 4; k++)
        a0[k] = a1[k] = _mm512_setzero_ps();
    for (uint32_t f = 0; f < nf; f += 16) {
        __mmask16 m = kve512_tail(nf, f);
        __m512 r0 = kve512_elems(k0, dtype, f, m), i0 = kve512_elems(k0, dtype, nf + f, m);
        __m512 r1 = kve512_elems(k1, dtype, f, m), i1 = kve512_elems(k1, dtype, nf + f, m);
        __m512 g0 = _mm512_sqrt_ps(_mm512_fmadd_ps(r0, r0, _mm512_mul_ps(i0, i0)));
        __m512 g1 = _mm512_sqrt_ps(_mm512_fmadd_ps(r1, r1, _mm512_mul_ps(i1, i1)));
        for (uint32_t k = 0; k < 4; k++) {
            const float *re = coef + (size_t)k * 3 * nf + f, *im = re + nf, *b = im + nf;
            __m512 c = _mm512_maskz_loadu_ps(m, re);
            a0[k] = _mm512_fmadd_ps(c, r0, a0[k]);
            a1[k] = _mm512_fmadd_ps(c, r1, a1[k]);
            c = _mm512_maskz_loadu_ps(m, im);
            a0[k] = _mm512_fmadd_ps(c, i0, a0[k]);
            a1[k] = _mm512_fmadd_ps(c, i1, a1[k]);
            c = _mm512_maskz_loadu_ps(m, b);
            a0[k] = _mm512_fmadd_ps(c, g0, a0[k]);
            a1[k] = _mm512_fmadd_ps(c, g1, a1[k]);
        }
    }
}

/* group(coef, load(key)) two keys at a time, four query heads' sums
 * reduced at once (a group not a multiple of 4 ends as the per-key kernels
 * do). */
static void kve512_score_group_keys(const float *coef, const unsigned char *const *keys,
                                    size_t off, uint32_t n, uint32_t dtype, uint32_t nf,
                                    uint32_t group, float *key, float *mag, float *raw,
                                    uint32_t stride)
{
    size_t bytes = (size_t)nf * 2 * (dtype == KVE_DTYPE_F32 ? 4 : 2);
    uint32_t g4 = group & ~3u;
    for (uint32_t c = 0; c < n; c += 2) {
        kve512_prefetch(keys, off, c, n, bytes);
        kve512_prefetch(keys, off, c + 1, n, bytes);
        uint32_t two = c + 1 < n;
        const unsigned char *k0 = keys[c] + off, *k1 = keys[c + two] + off;
        for (uint32_t j = 0; j < g4; j += 4) {
            __m512 a0[4], a1[4];
            float s[8];
            kve512_dot4x2(coef + (size_t)j * 3 * nf, k0, k1, dtype, nf, a0, a1);
            kve512_hsum4(a0[0], a0[1], a0[2], a0[3], s);
            kve512_hsum4(a1[0], a1[1], a1[2], a1[3], s + 4);
            for (uint32_t t = 0; t <= two; t++)
                for (uint32_t k = 0; k < 4; k++)
                    raw[(size_t)(c + t) * stride + j + k] = s[4 * t + k];
        }
        for (uint32_t t = 0; g4 < group && t <= two; t++) {
            kve512_score_load(t ? k1 : k0, dtype, 2 * nf, key);
            kve512_mags(key, mag, nf);
            for (uint32_t j = g4; j < group; j++)
                raw[(size_t)(c + t) * stride + j] =
                    kve512_hsum(kve512_dot(coef + (size_t)j * 3 * nf, key, mag, nf));
        }
    }
}

/* kve_score_window_cands, 16 slots a step: the generated positions and
 * their slots compressed in registers, then stored whole (Zen 4 makes a
 * compress to memory microcode); the candidates likewise, in place. */
static uint32_t kve512_score_cands(const int32_t *tab, const kve_score_row *r, uint32_t *gen_pos,
                                   uint32_t *cand, uint32_t *tmp)
{
    const __m512i p = _mm512_set1_epi32((int)r->prompt_len), zero = _mm512_setzero_si512();
    const __m512i step = _mm512_set1_epi32(16);
    __m512i slot = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i lo = _mm512_set1_epi32(-1), hi = zero;
    uint32_t gen = 0, n = r->n_slots;
    for (uint32_t s = 0; s < n; s += 16, slot = _mm512_add_epi32(slot, step)) {
        __mmask16 t = n - s >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - s)) - 1);
        __m512i v = _mm512_maskz_loadu_epi32(t, tab + s);
        __mmask16 g = _mm512_mask_cmpge_epi32_mask(t, v, zero);
        g = _mm512_mask_cmpge_epu32_mask(g, v, p);
        _mm512_storeu_si512(gen_pos + gen, _mm512_maskz_compress_epi32(g, v));
        _mm512_storeu_si512(cand + gen, _mm512_maskz_compress_epi32(g, slot));
        lo = _mm512_mask_min_epu32(lo, g, lo, v);
        hi = _mm512_mask_max_epu32(hi, g, hi, v);
        gen += (uint32_t)__builtin_popcount(g);
    }
    if (gen <= r->window)
        return 0;
    uint32_t x = kve_score_window_bound(gen_pos, gen, r->window, _mm512_reduce_min_epu32(lo),
                                        _mm512_reduce_max_epu32(hi), tmp);
    const __m512i xv = _mm512_set1_epi32((int)x);
    uint32_t k = 0;
    for (uint32_t i = 0; i < gen; i += 16) {
        __mmask16 t = gen - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (gen - i)) - 1);
        __m512i c = _mm512_maskz_loadu_epi32(t, cand + i);
        __mmask16 in = _mm512_mask_cmplt_epu32_mask(t, _mm512_maskz_loadu_epi32(t, gen_pos + i), xv);
        _mm512_storeu_si512(cand + k, _mm512_maskz_compress_epi32(in, c)); /* k <= i */
        k += (uint32_t)__builtin_popcount(in);
    }
    return k;
}

const kve_score_kernels kve_score_kernels_avx512 = {
    .isa = KVE_CPU_ISA_AVX512,
    .load = kve512_score_load,
    .group = kve512_score_group,
    .knorm = kve512_score_knorm,
    .knorm_keys = kve512_score_knorm_keys,
    .group_keys = kve512_score_group_keys,
    .cands = kve512_score_cands,
};
