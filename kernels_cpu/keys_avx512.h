/*
 * keys_avx512.h — the AVX-512 key kernels: XXH3 of the coordinates (common/kve_key.h),
 * 8 lanes at a time, for kve_keys, the hash-only floor and kve512_scan.
 * Included once, by kernels_avx512.c, after KVE_INLINE and
 * evict_simd.h, and compiled with that file's target flags.
 */
#ifndef KVE_KEYS_AVX512_H
#define KVE_KEYS_AVX512_H

/* ---- keys ----------------------------------------------------------------- */

typedef struct {
    __m512i mul_lo, mul_hi, acc_base, cross_lo, high_base, pos_mask;
} kve512_hc;

static kve512_hc kve512_hc_of(const kve_hconst *h)
{
    kve512_hc v = {_mm512_set1_epi64((long long)h->mul_lo),  _mm512_set1_epi64((long long)h->mul_hi),
                   _mm512_set1_epi64((long long)h->acc_base),   _mm512_set1_epi64((long long)h->cross_lo),
                   _mm512_set1_epi64((long long)h->high_base), _mm512_set1_epi32((int)h->pos_mask)};
    return v;
}

/* XXH3's avalanche of the 16-byte path, then the key's finisher
 * (kve_key_finish) but for its last x ^= x >> 32, which leaves the high half
 * as it is: the key's high half is this value's. */
KVE_INLINE __m512i kve512_avalanche_hi(__m512i acc)
{
    acc = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 37));
    acc = _mm512_mullo_epi64(acc, _mm512_set1_epi64((long long)KVE_XXH3_PRIME_MX1));
    acc = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 32));
    return _mm512_mullo_epi64(acc, _mm512_set1_epi64((long long)KVE_KEY_FINISH_MUL));
}

KVE_INLINE __m512i kve512_avalanche(__m512i acc)
{
    acc = kve512_avalanche_hi(acc);
    return _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 32));
}

/* acc of 8 lanes x = pos ^ pos_mask (zero-extended) for one head (kve_hconst). */
KVE_INLINE __m512i kve512_head_acc(__m512i x, const kve512_hc *h)
{
    __m512i lolo = _mm512_mul_epu32(x, h->mul_lo), hilo = _mm512_mul_epu32(x, h->mul_hi);
    __m512i cross = _mm512_add_epi64(_mm512_add_epi64(hilo, _mm512_srli_epi64(lolo, 32)), h->cross_lo);
    __m512i high = _mm512_add_epi64(_mm512_srli_epi64(cross, 32), h->high_base);
    /* low 64 bits: cross's low half over lolo's low half */
    __m512i low = _mm512_mask_shuffle_epi32(lolo, 0xAAAA, cross, _MM_PERM_CCAA);
    return _mm512_add_epi64(_mm512_add_epi64(x, h->acc_base), _mm512_xor_si512(low, high));
}

/* Keys of 8 lanes x for one head. */
KVE_INLINE __m512i kve512_head_keys(__m512i x, const kve512_hc *h)
{
    return kve512_avalanche(kve512_head_acc(x, h));
}

/* The key, XXH3_64bits_withSeed(LE64(lo) || LE64(hi), 16, seed) finished, in 8 lanes, every
 * input varying: the 128-bit product from four 32x32->64 multiplies. */
KVE_INLINE __m512i kve512_xxh3_len16(__m512i lo, __m512i hi, __m512i seed)
{
    const __m512i m32 = _mm512_set1_epi64(0xffffffffu);
    __m512i a = _mm512_xor_si512(
        lo, _mm512_add_epi64(seed, _mm512_set1_epi64((long long)(KVE_XXH3_S24 ^ KVE_XXH3_S32))));
    __m512i b = _mm512_xor_si512(
        hi, _mm512_sub_epi64(_mm512_set1_epi64((long long)(KVE_XXH3_S40 ^ KVE_XXH3_S48)), seed));
    __m512i a_hi = _mm512_srli_epi64(a, 32), b_hi = _mm512_srli_epi64(b, 32);
    __m512i lolo = _mm512_mul_epu32(a, b), hilo = _mm512_mul_epu32(a_hi, b);
    __m512i lohi = _mm512_mul_epu32(a, b_hi), hihi = _mm512_mul_epu32(a_hi, b_hi);
    __m512i cross = _mm512_add_epi64(
        _mm512_add_epi64(_mm512_srli_epi64(lolo, 32), _mm512_and_si512(hilo, m32)), lohi);
    __m512i high = _mm512_add_epi64(
        _mm512_add_epi64(_mm512_srli_epi64(hilo, 32), _mm512_srli_epi64(cross, 32)), hihi);
    __m512i low = _mm512_mask_shuffle_epi32(lolo, 0xAAAA, cross, _MM_PERM_CCAA);
    const __m512i rev = _mm512_set_epi8(
        56, 57, 58, 59, 60, 61, 62, 63, 48, 49, 50, 51, 52, 53, 54, 55, 40, 41, 42, 43, 44, 45, 46,
        47, 32, 33, 34, 35, 36, 37, 38, 39, 24, 25, 26, 27, 28, 29, 30, 31, 16, 17, 18, 19, 20, 21,
        22, 23, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    __m512i acc = _mm512_add_epi64(_mm512_set1_epi64(16), _mm512_shuffle_epi8(a, rev));
    acc = _mm512_add_epi64(_mm512_add_epi64(acc, b), _mm512_xor_si512(low, high));
    return kve512_avalanche(acc);
}

/* XXH3_64bits_withSeed(LE64(v), 8, seed) in 8 lanes. */
KVE_INLINE __m512i kve512_xxh3_len8(__m512i v, uint64_t seed)
{
    uint64_t s = seed ^ ((uint64_t)kve_bswap32((uint32_t)seed) << 32);
    const __m512i mx2 = _mm512_set1_epi64((long long)KVE_XXH3_PRIME_MX2);
    __m512i x = _mm512_xor_si512(_mm512_rol_epi64(v, 32),
                                 _mm512_set1_epi64((long long)((KVE_XXH3_S8 ^ KVE_XXH3_S16) - s)));
    x = _mm512_ternarylogic_epi64(x, _mm512_rol_epi64(x, 49), _mm512_rol_epi64(x, 24), 0x96);
    x = _mm512_mullo_epi64(x, mx2);
    x = _mm512_xor_si512(x, _mm512_add_epi64(_mm512_srli_epi64(x, 35), _mm512_set1_epi64(8)));
    x = _mm512_mullo_epi64(x, mx2);
    return _mm512_xor_si512(x, _mm512_srli_epi64(x, 28));
}

static void kve512_keys(uint64_t seed, uint32_t flags, const kve_coord *c, size_t n, uint64_t *keys)
{
    /* The two 8-byte words of kve_coord after seq_id are the hashed words. */
    const __m512i lo_set = _mm512_set1_epi64((long long)kve_key_word_lo(flags, 0, 0));
    const __m512i hi_set = _mm512_set1_epi64((long long)kve_key_word_hi(flags, 0, 0));
    const __m512i idx = _mm512_setr_epi64(0, 3, 6, 9, 12, 15, 18, 21);
    const __m512i one = _mm512_set1_epi64(1);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const long long *base = (const long long *)(const void *)(c + i);
        __m512i id = _mm512_i64gather_epi64(idx, base, 8);
        __m512i lo = _mm512_i64gather_epi64(_mm512_add_epi64(idx, one), base, 8);
        __m512i hi = _mm512_i64gather_epi64(_mm512_add_epi64(idx, _mm512_add_epi64(one, one)), base, 8);
        __m512i key = kve512_xxh3_len16(_mm512_or_si512(lo, lo_set), _mm512_or_si512(hi, hi_set),
                                        kve512_xxh3_len8(id, seed));
        _mm512_storeu_si512(keys + i, key);
    }
    for (; i < n; i++)
        keys[i] = kve_key(kve_seq_seed(seed, c[i].seq_id), flags, c[i].layer, c[i].head, c[i].pos,
                          c[i].round);
}

static void kve512_floor_keys(const kve_head_job *j, const int32_t *pos, uint32_t n, uint64_t *keys)
{
    kve_hconst hc = kve_hconst_make(kve_seq_seed(j->seed, j->seq_id), j->key_flags, j->layer,
                                    j->head, j->round);
    const kve512_hc h = kve512_hc_of(&hc);
    const __m512i lo32 = _mm512_set1_epi64(0xffffffff);
    uint32_t i = 0;
    /* Whole blocks as the scan hashes them: the even positions' keys, then the odd ones'. */
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_xor_si512(_mm512_loadu_si512(pos + i), h.pos_mask);
        _mm512_storeu_si512(keys + i, kve512_head_keys(_mm512_and_si512(x, lo32), &h));
        _mm512_storeu_si512(keys + i + 8, kve512_head_keys(_mm512_srli_epi64(x, 32), &h));
    }
    for (; i < n; i += 16) { /* the tail in order */
        __mmask16 m = kve512_tail16(n - i);
        __m512i x = _mm512_xor_si512(_mm512_maskz_loadu_epi32(m, pos + i), h.pos_mask);
        _mm512_mask_storeu_epi64(keys + i, (__mmask8)m,
                                 kve512_head_keys(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(x)), &h));
        _mm512_mask_storeu_epi64(keys + i + 8, (__mmask8)(m >> 8),
                                 kve512_head_keys(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(x, 1)), &h));
    }
}

#endif
