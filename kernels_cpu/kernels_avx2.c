/*
 * kernels_avx2.c — the AVX2 entries of kve_cpu_kernels: keys 4 lanes at a
 * time (keys_avx2.h), the eviction plan of evict_simd.h on 8 slots at a time (the content
 * checks fused into its hashing pass), wide entry copies, the content
 * checks' row passes. Built with this file's own target flags; reached only
 * through the ISA table after cpu_isa.c has seen AVX2 in cpuid and the OS
 * state in xgetbv.
 *
 * AVX2 has no mask registers, no compress and only signed 64-bit compares:
 * compress is a permutation from a 256-entry table, and unsigned compares
 * flip the sign bit of both sides.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "copy_simd.h"
#define KVE_ISA_FUSED_CHECK 1 /* kve2_scan checks the table as it hashes */
#define KVE_ISA_SCAN_SHI 0
#include "evict_simd.h"

#define KVE_INLINE static inline __attribute__((always_inline))

#include "keys_avx2.h" /* the keys */

/* ---- compress and masks --------------------------------------------------------- */

/* kve2_lut[m]: the indices of m's set bits, one per byte, lowest first. */
static uint64_t kve2_lut[256];
static pthread_once_t kve2_lut_once = PTHREAD_ONCE_INIT;

static void kve2_lut_init(void)
{
    for (uint32_t m = 0; m < 256; m++) {
        uint64_t v = 0;
        for (uint32_t i = 0, k = 0; i < 8; i++)
            if (m >> i & 1)
                v |= (uint64_t)i << (8 * k++);
        kve2_lut[m] = v;
    }
}

KVE_INLINE __m256i kve2_compress(__m256i v, uint32_t m)
{
    __m256i perm = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)kve2_lut[m]));
    return _mm256_permutevar8x32_epi32(v, perm);
}

#define KVE2_IOTA _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)

/* Writes the lanes of m (8 bits) of @p lanes, at most room of them. */
KVE_INLINE uint32_t kve2_emit(int32_t *out, uint32_t room, uint32_t m, __m256i lanes)
{
    uint32_t pc = (uint32_t)_mm_popcnt_u32(m);
    pc = pc < room ? pc : room;
    __m256i first = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)pc), KVE2_IOTA);
    _mm256_maskstore_epi32(out, first, kve2_compress(lanes, m));
    return pc;
}

KVE_INLINE uint32_t kve2_bits32(__m256i m) { return (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m)); }
KVE_INLINE uint32_t kve2_bits64(__m256i m) { return (uint32_t)_mm256_movemask_pd(_mm256_castsi256_pd(m)); }

KVE_INLINE __m256i kve2_load_slots(const int32_t *sp, uint32_t t, uint32_t n)
{
    if (t + 8 <= n)
        return _mm256_loadu_si256((const __m256i *)(const void *)(sp + t));
    __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - t)), KVE2_IOTA);
    __m256i v = _mm256_maskload_epi32(sp + t, in);
    return _mm256_or_si256(v, _mm256_andnot_si256(in, _mm256_set1_epi32(-1)));
}


typedef struct {
    uint32_t nv, ng, nc;
} kve2_cnt;

typedef struct {
    __m256i pm1, wm1; /* prompt - 1, win_lo - 1 */
    int prompt_skip;  /* prompt >= 1 */
} kve2_bounds;

static kve2_bounds kve2_bounds_of(int32_t prompt, uint32_t win_lo)
{
    kve2_bounds b = {_mm256_set1_epi32(prompt - 1), _mm256_set1_epi32((int)(win_lo - 1)), prompt >= 1};
    return b;
}

/* At a 32-slot boundary, 32 slots of prompt (0 <= pos < prompt): counted as
 * valid, *t moved to their last block (the loop adds 8), never hashed. */
KVE_INLINE int kve2_skip_prompt(const int32_t *sp, uint32_t *t, uint32_t n, const kve2_bounds *b,
                                uint32_t *nv)
{
    if (!b->prompt_skip || *t + 32 > n || (*t & 31))
        return 0;
    const __m256i *p = (const __m256i *)(const void *)(sp + *t);
    __m256i m = _mm256_max_epu32(_mm256_max_epu32(_mm256_loadu_si256(p), _mm256_loadu_si256(p + 1)),
                                 _mm256_max_epu32(_mm256_loadu_si256(p + 2), _mm256_loadu_si256(p + 3)));
    if (kve2_bits32(_mm256_cmpeq_epi32(_mm256_max_epu32(m, b->pm1), b->pm1)) != 0xFF)
        return 0;
    *nv += 32;
    *t += 24;
    return 1;
}

/* Counts of one block; returns the candidate bits. */
KVE_INLINE uint32_t kve2_classify(__m256i v, const kve2_bounds *b, kve2_cnt *a)
{
    __m256i gen = _mm256_cmpgt_epi32(v, b->pm1);
    uint32_t kg = kve2_bits32(gen);
    if (kg == 0xFF) {
        a->nv += 8;
        a->ng += 8;
    } else {
        a->nv += (uint32_t)_mm_popcnt_u32(kve2_bits32(_mm256_cmpgt_epi32(v, _mm256_set1_epi32(-1))));
        a->ng += (uint32_t)_mm_popcnt_u32(kg);
    }
    uint32_t kc = kve2_bits32(_mm256_andnot_si256(_mm256_cmpgt_epi32(v, b->wm1), gen));
    a->nc += (uint32_t)_mm_popcnt_u32(kc);
    return kc;
}

/* The 8 lanes' signed min, signed max and unsigned min. */
#define KVE2_REDUCE(name, type, op)                                                            \
    KVE_INLINE type name(__m256i v)                                                            \
    {                                                                                          \
        __m128i m = op(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));             \
        m = op(m, _mm_shuffle_epi32(m, 0x4E));                                                 \
        return (type)_mm_cvtsi128_si32(op(m, _mm_shuffle_epi32(m, 0xB1)));                     \
    }
KVE2_REDUCE(kve2_reduce_min, int32_t, _mm_min_epi32)
KVE2_REDUCE(kve2_reduce_max, int32_t, _mm_max_epi32)
KVE2_REDUCE(kve2_reduce_umin, uint32_t, _mm_min_epu32)

/* ---- slot passes ------------------------------------------------------------ */

static void kve_isa_count(const int32_t *sp, uint32_t n, int32_t prompt, kve_counts *c, int32_t *max_pos)
{
    const kve2_bounds b = kve2_bounds_of(prompt, 0);
    __m256i vmax = _mm256_set1_epi32(-1);
    uint32_t nv = 0, ng = 0;
    for (uint32_t t = 0; t < n; t += 8) {
        if (kve2_skip_prompt(sp, &t, n, &b, &nv))
            continue;
        __m256i v = kve2_load_slots(sp, t, n);
        vmax = _mm256_max_epi32(vmax, v);
        nv += (uint32_t)_mm_popcnt_u32(kve2_bits32(_mm256_cmpgt_epi32(v, _mm256_set1_epi32(-1))));
        ng += (uint32_t)_mm_popcnt_u32(kve2_bits32(_mm256_cmpgt_epi32(v, b.pm1)));
    }
    c->n_valid = nv;
    c->n_gen = ng;
    c->n_cand = 0;
    *max_pos = kve2_reduce_max(vmax);
}

/* Unsigned 64-bit k >= t (top) or k <= t, as 4 bits; tb = t with its sign flipped. */
KVE_INLINE uint32_t kve2_side(__m256i k, __m256i tb, int top)
{
    __m256i kb = _mm256_xor_si256(k, _mm256_set1_epi64x((long long)0x8000000000000000ull));
    return 0xF & ~kve2_bits64(top ? _mm256_cmpgt_epi64(tb, kb) : _mm256_cmpgt_epi64(kb, tb));
}

/* The same for unsigned 32-bit lanes, as 8 bits. */
KVE_INLINE uint32_t kve2_side32(__m256i k, __m256i tb, int top)
{
    __m256i kb = _mm256_xor_si256(k, _mm256_set1_epi32((int)0x80000000u));
    return 0xFF & ~kve2_bits32(top ? _mm256_cmpgt_epi32(tb, kb) : _mm256_cmpgt_epi32(kb, tb));
}

/* What a checking scan tracks besides its counts (kve_scan_facts). */
typedef struct {
    __m256i min, max, umin;
    uint32_t run_len;
} kve2_chk;

/* Slots past the run (n of them at src, loaded in v): their largest value,
 * their smallest as unsigned, and their marks (kve_simd_mark). */
KVE_INLINE void kve2_check_marks(kve2_chk *q, unsigned char *map, __m256i v, uint32_t n,
                                 const int32_t *src)
{
    q->max = _mm256_max_epi32(q->max, v);
    q->umin = _mm256_min_epu32(q->umin, v);
    kve_simd_mark(map, src, n);
}

/* 32 slots of prompt at t: either the next of the leading run (slot t + i
 * holds position t + i), or marked. */
KVE_INLINE void kve2_check_prompt(kve2_chk *q, unsigned char *map, const int32_t *sp, uint32_t t)
{
    const __m256i *p = (const __m256i *)(const void *)(sp + t);
    if (q->run_len == t) {
        __m256i e = _mm256_add_epi32(KVE2_IOTA, _mm256_set1_epi32((int)t)), eq = _mm256_set1_epi32(-1);
        for (int b = 0; b < 4; b++, e = _mm256_add_epi32(e, _mm256_set1_epi32(8)))
            eq = _mm256_and_si256(eq, _mm256_cmpeq_epi32(_mm256_loadu_si256(p + b), e));
        if (kve2_bits32(eq) == 0xFF) {
            q->run_len += 32;
            return;
        }
    }
    for (int b = 0; b < 4; b++)
        kve2_check_marks(q, map, _mm256_loadu_si256(p + b), 8, sp + t + 8 * b);
}

/* The survivors among one hashed block's candidates kc (high halves hi,
 * slots t ..): their slots at surv + ns; returns the new count. */
KVE_INLINE uint32_t kve2_survivors(int32_t *surv, uint32_t ns, __m256i hi, uint32_t kc, uint32_t t,
                                   __m256i tb, int top)
{
    uint32_t sv = kc & kve2_side32(hi, tb, top);
    __m256i slots = _mm256_add_epi32(KVE2_IOTA, _mm256_set1_epi32((int)t));
    _mm256_storeu_si256((__m256i *)(void *)(surv + ns), kve2_compress(slots, sv));
    return ns + (uint32_t)_mm_popcnt_u32(sv);
}

/* chk: 0, KVE_JOB_CHECK_RANGE, or that and KVE_JOB_CHECK_DUPS (a constant
 * in each instance). */
KVE_INLINE uint32_t kve2_scan(const kve_scan *s, kve_counts *c, int top, uint32_t chk)
{
    const kve2_hc h = kve2_hc_of(s->hc);
    const kve2_bounds b = kve2_bounds_of(s->prompt, s->win_lo);
    /* T's low half is 0 (top) or ~0: the keys' high halves decide. */
    const __m256i tb = _mm256_set1_epi32((int)((uint32_t)(s->T >> 32) ^ 0x80000000u));
    const __m256i lo32 = _mm256_set1_epi64x(0xffffffff);
    const int32_t *sp = s->sp;
    const uint32_t n = s->n;
    const int dups = (chk & KVE_JOB_CHECK_DUPS) != 0;
    unsigned char *const map = s->map;
    kve2_chk q = {_mm256_set1_epi32(-1), _mm256_set1_epi32(-1), _mm256_set1_epi32(-1), 0};
    kve2_cnt a = {0, 0, 0};
    uint32_t ns = 0;
    /* Each hashed block's survivors are compressed after the next block is
     * hashed: their compress waits on the whole hash, and issued at once it
     * held up the reorder window (on Zen 3 this took trusted G1 to 0.84x
     * its time; docs/BENCHMARKS.md, "issue 15, eleventh step"). */
    __m256i pend_hi = _mm256_setzero_si256();
    uint32_t pend_kc = 0, pend_t = 0;
    for (uint32_t t = 0; t < n; t += 8) {
        uint32_t t0 = t;
        if (kve2_skip_prompt(sp, &t, n, &b, &a.nv)) {
            if (dups)
                kve2_check_prompt(&q, map, sp, t0);
            continue;
        }
        __m256i v = kve2_load_slots(sp, t, n);
        if (chk)
            q.min = _mm256_min_epi32(q.min, v);
        if (dups)
            kve2_check_marks(&q, map, v, n - t < 8 ? n - t : 8, sp + t); /* not the lanes past n */
        uint32_t kc = kve2_classify(v, &b, &a);
        if (!kc)
            continue;
        /* The even slots' x zero-extended in 64-bit lanes, and the odd ones';
         * slot 2i's high half is k0's dword 2i + 1, moved down; slot 2i + 1's
         * is k1's dword 2i + 1, in place. */
        __m256i x = _mm256_xor_si256(v, h.pos_mask);
        __m256i k0 = kve2_avalanche_hi(kve2_head_acc(_mm256_and_si256(x, lo32), &h));
        __m256i k1 = kve2_avalanche_hi(kve2_head_acc(_mm256_srli_epi64(x, 32), &h));
        __m256i hi = _mm256_blend_epi32(_mm256_srli_epi64(k0, 32), k1, 0xAA);
        _mm256_storeu_si256((__m256i *)(void *)(s->khi + t), hi);
        ns = kve2_survivors(s->surv, ns, pend_hi, pend_kc, pend_t, tb, top);
        pend_hi = hi;
        pend_kc = kc;
        pend_t = t;
    }
    ns = kve2_survivors(s->surv, ns, pend_hi, pend_kc, pend_t, tb, top);
    c->n_valid = a.nv;
    c->n_gen = a.ng;
    c->n_cand = a.nc;
    if (chk)
        *s->facts = (kve_scan_facts){kve2_reduce_min(q.min), kve2_reduce_max(q.max),
                                     kve2_reduce_umin(q.umin), q.run_len};
    return ns;
}

static uint32_t kve_isa_scan(const kve_scan *s, kve_counts *c)
{
    enum { R = KVE_JOB_CHECK_RANGE, RD = KVE_JOB_CHECK_RANGE | KVE_JOB_CHECK_DUPS };
    pthread_once(&kve2_lut_once, kve2_lut_init);
    if (s->check & KVE_JOB_CHECK_DUPS)
        return s->top ? kve2_scan(s, c, 1, RD) : kve2_scan(s, c, 0, RD);
    if (s->check)
        return s->top ? kve2_scan(s, c, 1, R) : kve2_scan(s, c, 0, R);
    return s->top ? kve2_scan(s, c, 1, 0) : kve2_scan(s, c, 0, 0);
}

static uint32_t kve_isa_take_marks(unsigned char *map, size_t n)
{
    uint32_t count = 0;
    size_t i = 0;
    const __m256i zero = _mm256_setzero_si256();
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(map + i));
        count += 32 - (uint32_t)_mm_popcnt_u32((uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, zero)));
        _mm256_storeu_si256((__m256i *)(void *)(map + i), zero);
    }
    for (; i < n; i++) {
        count += map[i] != 0;
        map[i] = 0;
    }
    return count;
}

static uint32_t kve_isa_cand(const int32_t *sp, uint32_t n, int32_t prompt, uint32_t win_lo,
                             const uint64_t *keys, const uint32_t *khi, uint64_t lo, uint64_t hi,
                             int32_t *out, uint32_t cap, kve_counts *c)
{
    pthread_once(&kve2_lut_once, kve2_lut_init);
    const kve2_bounds b = kve2_bounds_of(prompt, win_lo);
    const __m256i lob = _mm256_set1_epi64x((long long)(lo ^ 0x8000000000000000ull));
    const __m256i hib = _mm256_set1_epi64x((long long)(hi ^ 0x8000000000000000ull));
    const __m256i lob32 = _mm256_set1_epi32((int)((uint32_t)lo ^ 0x80000000u));
    const __m256i hib32 = _mm256_set1_epi32((int)((uint32_t)hi ^ 0x80000000u));
    kve2_cnt a = {0, 0, 0};
    uint32_t cnt = 0;
    for (uint32_t t = 0; t < n; t += 8) {
        if (kve2_skip_prompt(sp, &t, n, &b, &a.nv))
            continue;
        uint32_t kc = kve2_classify(kve2_load_slots(sp, t, n), &b, &a);
        if (!kc)
            continue;
        if (keys) {
            __m256i k0 = _mm256_loadu_si256((const __m256i *)(const void *)(keys + t));
            __m256i k1 = _mm256_loadu_si256((const __m256i *)(const void *)(keys + t + 4));
            kc &= (kve2_side(k0, lob, 1) & kve2_side(k0, hib, 0)) |
                  (kve2_side(k1, lob, 1) & kve2_side(k1, hib, 0)) << 4;
        } else if (khi) {
            __m256i k = _mm256_loadu_si256((const __m256i *)(const void *)(khi + t));
            kc &= kve2_side32(k, lob32, 1) & kve2_side32(k, hib32, 0);
        }
        cnt += kve2_emit(out + cnt, cap - cnt, kc, _mm256_add_epi32(KVE2_IOTA, _mm256_set1_epi32((int)t)));
    }
    if (c) {
        c->n_valid = a.nv;
        c->n_gen = a.ng;
        c->n_cand = a.nc;
    }
    return cnt;
}

static uint32_t kve_isa_kept_slots(const int32_t *sp, uint32_t n, const uint64_t *ev_bits,
                                   int32_t *out, uint32_t cap)
{
    pthread_once(&kve2_lut_once, kve2_lut_init);
    const uint8_t *bits = (const uint8_t *)(const void *)ev_bits;
    uint32_t cnt = 0;
    for (uint32_t t = 0; t < n; t += 8) {
        uint32_t kv = kve2_bits32(_mm256_cmpgt_epi32(kve2_load_slots(sp, t, n), _mm256_set1_epi32(-1)));
        if (bits)
            kv &= ~(uint32_t)bits[t / 8];
        cnt += kve2_emit(out + cnt, cap - cnt, kv, _mm256_add_epi32(KVE2_IOTA, _mm256_set1_epi32((int)t)));
    }
    return cnt;
}

static void kve_isa_count3_ge32(const uint32_t *k, uint32_t m, const uint32_t t[3], uint32_t c[3])
{
    __m256i tb[3];
    for (int j = 0; j < 3; j++)
        tb[j] = _mm256_set1_epi32((int)(t[j] ^ 0x80000000u));
    uint32_t n[3] = {0, 0, 0}, i = 0;
    for (; i + 8 <= m; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(k + i));
        for (int j = 0; j < 3; j++)
            n[j] += (uint32_t)_mm_popcnt_u32(kve2_side32(v, tb[j], 1));
    }
    for (; i < m; i++)
        for (int j = 0; j < 3; j++)
            n[j] += k[i] >= t[j];
    c[0] = n[0];
    c[1] = n[1];
    c[2] = n[2];
}

static uint32_t kve_isa_split32(const uint32_t *k, uint32_t m, uint32_t a, uint32_t b, uint32_t *out,
                                uint32_t *above)
{
    pthread_once(&kve2_lut_once, kve2_lut_init);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    const __m256i vam1 = _mm256_set1_epi32((int)((a - 1) ^ 0x80000000u));
    const __m256i vb = _mm256_set1_epi32((int)(b ^ 0x80000000u));
    uint32_t in = 0, over = 0, i = 0;
    for (; i + 8 <= m; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(k + i));
        __m256i x = _mm256_xor_si256(v, sign);
        uint32_t gt = kve2_bits32(_mm256_cmpgt_epi32(x, vb));
        uint32_t ge = a ? kve2_bits32(_mm256_cmpgt_epi32(x, vam1)) : 0xFF;
        ge &= ~gt;
        over += (uint32_t)_mm_popcnt_u32(gt);
        if (in + (uint32_t)_mm_popcnt_u32(ge) <= KVE_BRACKET)
            kve2_emit((int32_t *)(void *)(out + in), KVE_BRACKET - in, ge, v);
        in += (uint32_t)_mm_popcnt_u32(ge);
    }
    for (; i < m; i++) {
        uint32_t g = k[i] > b, e = !g && k[i] >= a;
        over += g;
        if (e && in < KVE_BRACKET)
            out[in] = k[i];
        in += e;
    }
    *above = over;
    return in;
}

static int kve_isa_rank32(const uint32_t *v, uint32_t n, uint32_t r, uint32_t *t)
{
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    uint32_t pad[KVE_BRACKET] __attribute__((aligned(32)));
    for (uint32_t i = 0; i < KVE_BRACKET; i++)
        pad[i] = i < n ? v[i] : 0; /* 0 is never larger than another value */
    __m256i a[4], g[4];
    for (int q = 0; q < 4; q++) {
        a[q] = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(const void *)(pad + 8 * q)), sign);
        g[q] = _mm256_setzero_si256();
    }
    for (uint32_t j = 0; j < n; j++) {
        __m256i x = _mm256_set1_epi32((int)(v[j] ^ 0x80000000u));
        for (int q = 0; q < 4; q++) /* g: how many v[j] are below it */
            g[q] = _mm256_sub_epi32(g[q], _mm256_cmpgt_epi32(a[q], x));
    }
    const __m256i want = _mm256_set1_epi32((int)(n - r)); /* r of them >= it */
    uint32_t hits = 0, at = 0;
    for (int q = 0; q < 4; q++) {
        uint32_t h = kve2_bits32(_mm256_cmpeq_epi32(g[q], want));
        h &= 8 * (uint32_t)q >= n ? 0 : n - 8 * (uint32_t)q >= 8 ? 0xFF : (1u << (n - 8 * q)) - 1;
        if (h && !hits)
            at = 8 * (uint32_t)q + (uint32_t)__builtin_ctz(h);
        hits += (uint32_t)_mm_popcnt_u32(h);
    }
    if (!hits)
        return 0;
    *t = v[at];
    return 1;
}

static uint32_t kve_isa_filter_ge32(const uint32_t *k, const int32_t *slots, uint32_t m, uint32_t t,
                                    int32_t *out, uint32_t cap)
{
    pthread_once(&kve2_lut_once, kve2_lut_init);
    const __m256i tb = _mm256_set1_epi32((int)(t ^ 0x80000000u));
    uint32_t cnt = 0, i = 0;
    for (; i + 8 <= m; i += 8) {
        uint32_t ge = kve2_side32(_mm256_loadu_si256((const __m256i *)(const void *)(k + i)), tb, 1);
        cnt += kve2_emit(out + cnt, cap - cnt, ge,
                         _mm256_loadu_si256((const __m256i *)(const void *)(slots + i)));
    }
    for (; i < m && cnt < cap; i++)
        if (k[i] >= t)
            out[cnt++] = slots[i];
    return cnt;
}

/* ---- content checks (kve_check_rows.h) ---------------------------------------- */

static void kve2_row_facts(const int32_t *row, uint32_t n, kve_row_facts *s)
{
    __m256i mn = _mm256_set1_epi32(INT32_MAX), hi = _mm256_set1_epi32(-1), lo = hi;
    const __m256i m1 = _mm256_set1_epi32(-1);
    uint32_t valid = 0, bad = 0, t = 0;
    for (; t + 9 <= n; t += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(row + t));
        __m256i next = _mm256_loadu_si256((const __m256i *)(const void *)(row + t + 1));
        mn = _mm256_min_epi32(mn, v);
        hi = _mm256_max_epi32(hi, v);
        lo = _mm256_min_epu32(lo, v);
        __m256i neg = _mm256_cmpgt_epi32(_mm256_setzero_si256(), v);
        valid += 8 - (uint32_t)_mm_popcnt_u32(kve2_bits32(neg));
        __m256i out = _mm256_or_si256(neg, _mm256_xor_si256(_mm256_cmpgt_epi32(next, v), m1));
        out = _mm256_andnot_si256(_mm256_cmpeq_epi32(next, m1), out);
        bad += (uint32_t)_mm_popcnt_u32(kve2_bits32(out));
    }
    int32_t a[8], b[8];
    uint32_t c[8];
    _mm256_storeu_si256((__m256i *)(void *)a, mn);
    _mm256_storeu_si256((__m256i *)(void *)b, hi);
    _mm256_storeu_si256((__m256i *)(void *)c, lo);
    *s = (kve_row_facts){INT32_MAX, -1, UINT32_MAX, valid, bad};
    for (int k = 0; k < 8; k++) {
        s->min = a[k] < s->min ? a[k] : s->min;
        s->hi = b[k] > s->hi ? b[k] : s->hi;
        s->lo = c[k] < s->lo ? c[k] : s->lo;
    }
    kve_row_facts_tail(row, t, n, s);
}

static uint32_t kve2_row_run(const int32_t *row, uint32_t n)
{
    if (row[0] < 0)
        return 0;
    __m256i expect = _mm256_add_epi32(KVE2_IOTA, _mm256_set1_epi32(row[0]));
    uint32_t t = 0, lanes = kve_row_run_room(row[0], n);
    for (; t + 8 <= lanes; t += 8, expect = _mm256_add_epi32(expect, _mm256_set1_epi32(8))) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(row + t));
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(v, expect)) != -1)
            break;
    }
    return kve_row_run_tail(row, t, n);
}

/* ---- the table ------------------------------------------------------------------- */

static void kve2_evict_head(kve_head_job *j, void *scratch) { kve_simd_evict_head(j, scratch); }

const kve_cpu_kernels kve_cpu_kernels_avx2 = {
    .isa = KVE_CPU_ISA_AVX2,
    .evict_scratch_bytes = kve_simd_scratch_bytes,
    .evict_head = kve2_evict_head,
    .keys = kve2_keys,
    .head_keys = kve2_floor_keys,
    .copy_runs = kve_simd_copy_runs,
    .copy_runs_stream = kve_simd_copy_runs_stream,
    .row_facts = kve2_row_facts,
    .row_run = kve2_row_run,
    .row_distinct = kve_row_distinct_scalar, /* no scatter in AVX2 */
    .row_map_bytes = 1,
    .boundary32 = kve_simd_boundary,
    .fused_checks = 1,
};
