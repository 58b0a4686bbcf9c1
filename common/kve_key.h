/*
 * kve_key.h — the spec's key (docs/SPEC.md "Key"), as one header that
 * compiles as C11 on the host and as CUDA or HIP device code.
 *
 * This is an independent port of XXH3-64's 4–8 and 9–16 byte paths (the
 * only lengths the spec hashes) and the key's finisher (keep-set v2). The
 * scalar CPU reference calls libxxhash instead; tests hold this port
 * bit-exact against it.
 */
#ifndef KVE_KEY_H
#define KVE_KEY_H

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVE_HD static inline __host__ __device__
#else
#define KVE_HD static inline
#endif

/* Replacement value of a field switched off by a mode flag. */
#define KVE_KEY_ALL_ONES 0xFFFFFFFFu

/* Little-endian 64-bit words of XXH3's default secret at byte offsets
 * 8, 16, 24, 32, 40 and 48: the only ones lengths 8 and 16 read. */
#define KVE_XXH3_S8 0x1cad21f72c81017cULL
#define KVE_XXH3_S16 0xdb979083e96dd4deULL
#define KVE_XXH3_S24 0x1f67b3b7a4a44072ULL
#define KVE_XXH3_S32 0x78e5c0cc4ee679cbULL
#define KVE_XXH3_S40 0x2172ffcc7dd05a82ULL
#define KVE_XXH3_S48 0x8e2443f7744608b8ULL
#define KVE_XXH3_PRIME_MX1 0x165667919E3779F9ULL
#define KVE_XXH3_PRIME_MX2 0x9FB21C651E98DF25ULL
/* The finisher's multiplier: xxHash's PRIME32_1, a 32-bit odd constant
 * (one 64x32 multiply: two 32x32 products in SIMD, two IMADs on a GPU). */
#define KVE_KEY_FINISH_MUL 0x9E3779B1ULL

/* The spec's order of candidates (SPEC "One head's eviction", step 5):
 * by key, then by position; every (key, pos) pair type compares by it. */
KVE_HD int kve_key_pos_less(uint64_t key_a, uint32_t pos_a, uint64_t key_b, uint32_t pos_b)
{
    return key_a < key_b || (key_a == key_b && pos_a < pos_b);
}

KVE_HD uint64_t kve_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

KVE_HD uint32_t kve_bswap32(uint32_t x)
{
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}

KVE_HD uint64_t kve_bswap64(uint64_t x)
{
    return ((uint64_t)kve_bswap32((uint32_t)x) << 32) | kve_bswap32((uint32_t)(x >> 32));
}

/* Low 64 bits of a*b xor its high 64 bits. */
KVE_HD uint64_t kve_mul128_fold64(uint64_t a, uint64_t b)
{
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return (a * b) ^ __umul64hi(a, b);
#elif defined(__SIZEOF_INT128__)
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
#else
    /* Schoolbook from four 32x32->64 products (what SIMD ports do too). */
    uint64_t lo_lo = (a & 0xffffffffu) * (b & 0xffffffffu);
    uint64_t hi_lo = (a >> 32) * (b & 0xffffffffu);
    uint64_t lo_hi = (a & 0xffffffffu) * (b >> 32);
    uint64_t hi_hi = (a >> 32) * (b >> 32);
    uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
    uint64_t upper = (hi_lo >> 32) + (cross >> 32) + hi_hi;
    uint64_t lower = (cross << 32) | (lo_lo & 0xffffffffu);
    return lower ^ upper;
#endif
}

/* XXH3_64bits_withSeed(LE64(v), 8, seed). */
KVE_HD uint64_t kve_xxh3_len8(uint64_t v, uint64_t seed)
{
    uint64_t s = seed ^ ((uint64_t)kve_bswap32((uint32_t)seed) << 32);
    uint64_t bitflip = (KVE_XXH3_S8 ^ KVE_XXH3_S16) - s;
    uint64_t x = ((v >> 32) + (v << 32)) ^ bitflip;
    x ^= kve_rotl64(x, 49) ^ kve_rotl64(x, 24);
    x *= KVE_XXH3_PRIME_MX2;
    x ^= (x >> 35) + 8;
    x *= KVE_XXH3_PRIME_MX2;
    return x ^ (x >> 28);
}

/* XXH3_64bits_withSeed(LE64(lo) ‖ LE64(hi), 16, seed). */
KVE_HD uint64_t kve_xxh3_len16(uint64_t lo, uint64_t hi, uint64_t seed)
{
    uint64_t in_lo = lo ^ ((KVE_XXH3_S24 ^ KVE_XXH3_S32) + seed);
    uint64_t in_hi = hi ^ ((KVE_XXH3_S40 ^ KVE_XXH3_S48) - seed);
    uint64_t acc = 16 + kve_bswap64(in_lo) + in_hi + kve_mul128_fold64(in_lo, in_hi);
    acc ^= acc >> 37;
    acc *= KVE_XXH3_PRIME_MX1;
    return acc ^ (acc >> 32);
}

/* Keep-set v2's finisher of the 16-byte hash (docs/SPEC.md §2):
 * m = x * 0x9E3779B1 mod 2^64, key = m ^ (m >> 32). */
KVE_HD uint64_t kve_key_finish(uint64_t x)
{
    x *= KVE_KEY_FINISH_MUL;
    return x ^ (x >> 32);
}

/* seq_seed of the spec: XXH3(LE64(seq_id), seed). */
KVE_HD uint64_t kve_seq_seed(uint64_t seed, uint64_t seq_id) { return kve_xxh3_len8(seq_id, seed); }

/* The 16 hashed bytes as two LE64 words, with the mode switches applied. */
KVE_HD uint64_t kve_key_word_lo(uint32_t flags, uint32_t layer, uint32_t head)
{
    if (flags & 4u) /* KVE_SHARED_LAYERS */
        layer = KVE_KEY_ALL_ONES;
    if (flags & 2u) /* KVE_SHARED_HEADS */
        head = KVE_KEY_ALL_ONES;
    return (uint64_t)layer | ((uint64_t)head << 32);
}

KVE_HD uint64_t kve_key_word_hi(uint32_t flags, uint32_t pos, uint32_t round)
{
    if (flags & 1u) /* KVE_PERSISTENT */
        round = KVE_KEY_ALL_ONES;
    return (uint64_t)pos | ((uint64_t)round << 32);
}

/* The spec's key, from a precomputed seq_seed. */
KVE_HD uint64_t kve_key(uint64_t seq_seed, uint32_t flags, uint32_t layer, uint32_t head,
                        uint32_t pos, uint32_t round)
{
    return kve_key_finish(kve_xxh3_len16(kve_key_word_lo(flags, layer, head),
                                         kve_key_word_hi(flags, pos, round), seq_seed));
}

/* ---- Scored selection (docs/SPEC.md "Scored selection") ---------------- */

/* The bits of a float score (a union: defined in C11, supported by nvcc/hipcc). */
KVE_HD uint32_t kve_score_bits(float f)
{
    union {
        float f;
        uint32_t u;
    } x;
    x.f = f;
    return x.u;
}

/* Whether score bits @p u are a NaN (refused at a candidate). */
KVE_HD int kve_score_is_nan(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* The u64 key of a scored candidate: ascending key order is descending
 * score, then ascending position. The high half is the complement of the
 * float's monotone u32 (-0.0 read as +0.0), the low half the position; so
 * keys are distinct within a head and every bottom-k of the random path
 * applies unchanged. */
KVE_HD uint64_t kve_score_key(uint32_t u, uint32_t pos)
{
    u = u == 0x80000000u ? 0u : u;
    uint32_t m = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)~m << 32) | pos;
}

#endif /* KVE_KEY_H */
