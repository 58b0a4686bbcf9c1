/*
 * keys_avx2.h — the AVX2 key kernels: XXH3 of the coordinates (common/kve_key.h),
 * 4 lanes at a time, for kve_keys, the hash-only floor and kve2_scan.
 * Included once, by kernels_avx2.c, after KVE_INLINE and
 * evict_simd.h, and compiled with that file's target flags.
 */
#ifndef KVE_KEYS_AVX2_H
#define KVE_KEYS_AVX2_H

/* ---- keys ----------------------------------------------------------------- */

typedef struct {
    __m256i mul_lo, mul_hi, acc_base, cross_lo, high_base, pos_mask;
} kve2_hc;

static kve2_hc kve2_hc_of(const kve_hconst *h)
{
    kve2_hc v = {_mm256_set1_epi64x((long long)h->mul_lo),  _mm256_set1_epi64x((long long)h->mul_hi),
                 _mm256_set1_epi64x((long long)h->acc_base),   _mm256_set1_epi64x((long long)h->cross_lo),
                 _mm256_set1_epi64x((long long)h->high_base), _mm256_set1_epi32((int)h->pos_mask)};
    return v;
}

/* Low 64 bits of a * m for a constant m, from three 32x32->64 multiplies. */
KVE_INLINE __m256i kve2_mul64(__m256i a, uint64_t m)
{
    const __m256i mlo = _mm256_set1_epi64x((long long)(uint32_t)m);
    const __m256i mhi = _mm256_set1_epi64x((long long)(m >> 32));
    __m256i mid = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), mlo),
                                   _mm256_mul_epu32(a, mhi));
    return _mm256_add_epi64(_mm256_mul_epu32(a, mlo), _mm256_slli_epi64(mid, 32));
}

/* XXH3's avalanche of the 16-byte path, then the key's finisher
 * (kve_key_finish) but for its last x ^= x >> 32, which leaves the high half
 * as it is: the key's high half is this value's. The finisher's constant
 * fits 32 bits, so its product is two 32x32 multiplies. */
KVE_INLINE __m256i kve2_avalanche_hi(__m256i acc)
{
    const __m256i fm = _mm256_set1_epi64x((long long)KVE_KEY_FINISH_MUL);
    acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 37));
    acc = kve2_mul64(acc, KVE_XXH3_PRIME_MX1);
    acc = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 32));
    return _mm256_add_epi64(_mm256_mul_epu32(acc, fm),
                            _mm256_slli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(acc, 32), fm), 32));
}

KVE_INLINE __m256i kve2_avalanche(__m256i acc)
{
    acc = kve2_avalanche_hi(acc);
    return _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 32));
}

/* acc of 4 lanes x = pos ^ pos_mask (zero-extended) for one head (kve_hconst). */
KVE_INLINE __m256i kve2_head_acc(__m256i x, const kve2_hc *h)
{
    __m256i lolo = _mm256_mul_epu32(x, h->mul_lo), hilo = _mm256_mul_epu32(x, h->mul_hi);
    __m256i cross = _mm256_add_epi64(_mm256_add_epi64(hilo, _mm256_srli_epi64(lolo, 32)), h->cross_lo);
    __m256i high = _mm256_add_epi64(_mm256_srli_epi64(cross, 32), h->high_base);
    __m256i low = _mm256_blend_epi32(lolo, _mm256_slli_epi64(cross, 32), 0xAA);
    return _mm256_add_epi64(_mm256_add_epi64(x, h->acc_base), _mm256_xor_si256(low, high));
}

/* Keys of 4 lanes x for one head. */
KVE_INLINE __m256i kve2_head_keys(__m256i x, const kve2_hc *h)
{
    return kve2_avalanche(kve2_head_acc(x, h));
}

/* The key, XXH3_64bits_withSeed(LE64(lo) || LE64(hi), 16, seed) finished, in 4 lanes, every
 * input varying: the 128-bit product from four 32x32->64 multiplies. */
KVE_INLINE __m256i kve2_xxh3_len16(__m256i lo, __m256i hi, __m256i seed)
{
    const __m256i m32 = _mm256_set1_epi64x(0xffffffffu);
    __m256i a = _mm256_xor_si256(
        lo, _mm256_add_epi64(seed, _mm256_set1_epi64x((long long)(KVE_XXH3_S24 ^ KVE_XXH3_S32))));
    __m256i b = _mm256_xor_si256(
        hi, _mm256_sub_epi64(_mm256_set1_epi64x((long long)(KVE_XXH3_S40 ^ KVE_XXH3_S48)), seed));
    __m256i a_hi = _mm256_srli_epi64(a, 32), b_hi = _mm256_srli_epi64(b, 32);
    __m256i lolo = _mm256_mul_epu32(a, b), hilo = _mm256_mul_epu32(a_hi, b);
    __m256i lohi = _mm256_mul_epu32(a, b_hi), hihi = _mm256_mul_epu32(a_hi, b_hi);
    __m256i cross = _mm256_add_epi64(
        _mm256_add_epi64(_mm256_srli_epi64(lolo, 32), _mm256_and_si256(hilo, m32)), lohi);
    __m256i high = _mm256_add_epi64(
        _mm256_add_epi64(_mm256_srli_epi64(hilo, 32), _mm256_srli_epi64(cross, 32)), hihi);
    __m256i low = _mm256_blend_epi32(lolo, _mm256_slli_epi64(cross, 32), 0xAA);
    const __m256i rev = _mm256_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                         5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
    __m256i acc = _mm256_add_epi64(_mm256_set1_epi64x(16), _mm256_shuffle_epi8(a, rev));
    acc = _mm256_add_epi64(_mm256_add_epi64(acc, b), _mm256_xor_si256(low, high));
    return kve2_avalanche(acc);
}

KVE_INLINE __m256i kve2_rotl(__m256i x, int r)
{
    return _mm256_or_si256(_mm256_slli_epi64(x, r), _mm256_srli_epi64(x, 64 - r));
}

/* XXH3_64bits_withSeed(LE64(v), 8, seed) in 4 lanes. */
KVE_INLINE __m256i kve2_xxh3_len8(__m256i v, uint64_t seed)
{
    uint64_t s = seed ^ ((uint64_t)kve_bswap32((uint32_t)seed) << 32);
    __m256i x = _mm256_xor_si256(_mm256_shuffle_epi32(v, 0xB1),
                                 _mm256_set1_epi64x((long long)((KVE_XXH3_S8 ^ KVE_XXH3_S16) - s)));
    x = _mm256_xor_si256(x, _mm256_xor_si256(kve2_rotl(x, 49), kve2_rotl(x, 24)));
    x = kve2_mul64(x, KVE_XXH3_PRIME_MX2);
    x = _mm256_xor_si256(x, _mm256_add_epi64(_mm256_srli_epi64(x, 35), _mm256_set1_epi64x(8)));
    x = kve2_mul64(x, KVE_XXH3_PRIME_MX2);
    return _mm256_xor_si256(x, _mm256_srli_epi64(x, 28));
}

static void kve2_keys(uint64_t seed, uint32_t flags, const kve_coord *c, size_t n, uint64_t *keys)
{
    /* The two 8-byte words of kve_coord after seq_id are the hashed words. */
    const __m256i lo_set = _mm256_set1_epi64x((long long)kve_key_word_lo(flags, 0, 0));
    const __m256i hi_set = _mm256_set1_epi64x((long long)kve_key_word_hi(flags, 0, 0));
    const __m256i idx = _mm256_setr_epi64x(0, 3, 6, 9), one = _mm256_set1_epi64x(1);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const long long *base = (const long long *)(const void *)(c + i);
        __m256i id = _mm256_i64gather_epi64(base, idx, 8);
        __m256i lo = _mm256_i64gather_epi64(base, _mm256_add_epi64(idx, one), 8);
        __m256i hi = _mm256_i64gather_epi64(base, _mm256_add_epi64(idx, _mm256_add_epi64(one, one)), 8);
        __m256i key = kve2_xxh3_len16(_mm256_or_si256(lo, lo_set), _mm256_or_si256(hi, hi_set),
                                      kve2_xxh3_len8(id, seed));
        _mm256_storeu_si256((__m256i *)(void *)(keys + i), key);
    }
    for (; i < n; i++)
        keys[i] = kve_key(kve_seq_seed(seed, c[i].seq_id), flags, c[i].layer, c[i].head, c[i].pos,
                          c[i].round);
}

static void kve2_floor_keys(const kve_head_job *j, const int32_t *pos, uint32_t n, uint64_t *keys)
{
    kve_hconst hc = kve_hconst_make(kve_seq_seed(j->seed, j->seq_id), j->key_flags, j->layer,
                                    j->head, j->round);
    const kve2_hc h = kve2_hc_of(&hc);
    const __m256i lo32 = _mm256_set1_epi64x(0xffffffff);
    uint32_t i = 0;
    /* Whole blocks as the scan hashes them: the even positions' keys, then the odd ones'. */
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(pos + i)), h.pos_mask);
        _mm256_storeu_si256((__m256i *)(void *)(keys + i), kve2_head_keys(_mm256_and_si256(x, lo32), &h));
        _mm256_storeu_si256((__m256i *)(void *)(keys + i + 4), kve2_head_keys(_mm256_srli_epi64(x, 32), &h));
    }
    for (uint64_t ss = kve_seq_seed(j->seed, j->seq_id); i < n; i++)
        keys[i] = kve_key(ss, j->key_flags, j->layer, j->head, (uint32_t)pos[i], j->round);
}

#endif
