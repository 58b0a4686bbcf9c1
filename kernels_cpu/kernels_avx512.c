/*
 * kernels_avx512.c — the AVX-512 (F/DQ/BW/VL) entries of kve_cpu_kernels:
 * keys 8 lanes at a time (keys_avx512.h), the eviction plan of
 * evict_simd.h on 16 slots at a time, wide entry copies, the content
 * checks' row passes. Built with this file's own target flags; reached
 * only through the ISA table after cpu_isa.c has seen AVX-512 in cpuid and
 * the OS state in xgetbv.
 *
 * Compress instructions always target a register, then a (masked) store:
 * vpcompressd/q to memory is microcoded and slow on Zen 4.
 */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "copy_simd.h"
#define KVE_ISA_FUSED_CHECK 1 /* kve512_scan checks the table as it hashes */
#define KVE_ISA_SCAN_SHI 1
#include "evict_simd.h"

#define KVE_INLINE static inline __attribute__((always_inline))

KVE_INLINE __mmask16 kve512_tail16(uint32_t left)
{
    return left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
}

#include "keys_avx512.h" /* the keys */

/* ---- slot passes ------------------------------------------------------------ */

#define KVE512_IOTA _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)

KVE_INLINE __m512i kve512_load_slots(const int32_t *sp, uint32_t t, uint32_t n)
{
    return _mm512_mask_loadu_epi32(_mm512_set1_epi32(-1), kve512_tail16(n - t), sp + t);
}

/* 64 slots of prompt (0 <= pos < prompt): counted, never hashed. */
KVE_INLINE int kve512_all_prompt(const int32_t *sp, uint32_t t, __m512i prompt)
{
    __m512i m = _mm512_max_epu32(_mm512_max_epu32(_mm512_loadu_si512(sp + t), _mm512_loadu_si512(sp + t + 16)),
                                 _mm512_max_epu32(_mm512_loadu_si512(sp + t + 32), _mm512_loadu_si512(sp + t + 48)));
    return _mm512_cmplt_epu32_mask(m, prompt) == 0xFFFF;
}

/* Writes the lanes of @p m of slot index t + lane, at most room of them. */
KVE_INLINE uint32_t kve512_emit(int32_t *out, uint32_t room, __mmask16 m, __m512i lanes)
{
    uint32_t pc = (uint32_t)_mm_popcnt_u32(m);
    pc = pc < room ? pc : room;
    _mm512_mask_storeu_epi32(out, (__mmask16)((1u << pc) - 1), _mm512_maskz_compress_epi32(m, lanes));
    return pc;
}

typedef struct {
    uint32_t nv, ng, nc;
} kve512_cnt;

/* Counts of one block; returns the candidate mask. */
KVE_INLINE __mmask16 kve512_classify(__m512i v, __m512i prompt, __m512i win_lo, kve512_cnt *a)
{
    __mmask16 kg = _mm512_cmpge_epi32_mask(v, prompt);
    if (kg == 0xFFFF) {
        a->nv += 16;
        a->ng += 16;
    } else {
        a->nv += (uint32_t)_mm_popcnt_u32(_mm512_cmpge_epi32_mask(v, _mm512_setzero_si512()));
        a->ng += (uint32_t)_mm_popcnt_u32(kg);
    }
    __mmask16 kc = _mm512_mask_cmplt_epu32_mask(kg, v, win_lo);
    a->nc += (uint32_t)_mm_popcnt_u32(kc);
    return kc;
}

static void kve_isa_count(const int32_t *sp, uint32_t n, int32_t prompt, kve_counts *c, int32_t *max_pos)
{
    const __m512i vp = _mm512_set1_epi32(prompt), zero = _mm512_setzero_si512();
    __m512i vmax = _mm512_set1_epi32(-1);
    uint32_t nv = 0, ng = 0, t = 0;
    for (; t + 64 <= n; t += 64) {
        if (kve512_all_prompt(sp, t, vp)) {
            nv += 64;
            continue;
        }
        for (int b = 0; b < 64; b += 16) {
            __m512i v = _mm512_loadu_si512(sp + t + b);
            vmax = _mm512_max_epi32(vmax, v);
            nv += (uint32_t)_mm_popcnt_u32(_mm512_cmpge_epi32_mask(v, zero));
            ng += (uint32_t)_mm_popcnt_u32(_mm512_cmpge_epi32_mask(v, vp));
        }
    }
    for (; t < n; t += 16) {
        __m512i v = kve512_load_slots(sp, t, n);
        vmax = _mm512_max_epi32(vmax, v);
        nv += (uint32_t)_mm_popcnt_u32(_mm512_cmpge_epi32_mask(v, zero));
        ng += (uint32_t)_mm_popcnt_u32(_mm512_cmpge_epi32_mask(v, vp));
    }
    c->n_valid = nv;
    c->n_gen = ng;
    c->n_cand = 0;
    *max_pos = _mm512_reduce_max_epi32(vmax);
}

/* Constants of the hashing pass. */
typedef struct {
    kve512_hc h;
    __m512i prompt, win_lo, t_hi, lo32, sixteen;
    int top;
} kve512_scan_c;

/* Where the hashing pass writes (kve_scan's arrays, held in registers: the
 * stores through them cannot change them). */
typedef struct {
    uint32_t *khi;
    int32_t *surv;
    uint32_t *shi;
} kve512_out;

/* One hashed block's survivors, written by kve512_emit_late when the next
 * block has been hashed: each compress waits on its block's whole hash, and
 * issued at once it held the following blocks' hashing back (compare_builds.sh,
 * checked G1 0.96x on Zen 4; docs/BENCHMARKS.md, issue 15, fourteenth step). */
typedef struct {
    __m512i slots, hi;
    __mmask16 sv;
} kve512_late;

/* Hashes the 16 slots of one block (slot index vector `slots`) whose lanes
 * kc are candidates: the keys' high halves stored per slot; returns the
 * survivors (lanes of kc beyond T) for kve512_emit_late. */
KVE_INLINE kve512_late kve512_hash_block(kve512_out o, const kve512_scan_c *k, __m512i v, __m512i slots,
                                         uint32_t t, __mmask16 kc)
{
    /* The even slots' x zero-extended in 64-bit lanes, and the odd ones'. */
    __m512i x = _mm512_xor_si512(v, k->h.pos_mask);
    __m512i k0 = kve512_avalanche_hi(kve512_head_acc(_mm512_and_si512(x, k->lo32), &k->h));
    __m512i k1 = kve512_avalanche_hi(kve512_head_acc(_mm512_srli_epi64(x, 32), &k->h));
    /* T's low half is 0 (top) or ~0: the keys' high halves decide, 16 at once
     * (slot 2i's in k0's dword 2i + 1, moved down into k1's dword 2i; slot
     * 2i + 1's in k1's dword 2i + 1). */
    __m512i hi = _mm512_mask_shuffle_epi32(k1, 0x5555, k0, _MM_PERM_DDBB);
    _mm512_storeu_si512(o.khi + t, hi);
    __mmask16 sv = k->top ? _mm512_mask_cmpge_epu32_mask(kc, hi, k->t_hi)
                          : _mm512_mask_cmple_epu32_mask(kc, hi, k->t_hi);
    return (kve512_late){slots, hi, sv};
}

/* Compresses the survivors' slots and high halves of *p to ns; returns the
 * new number of survivors; *p becomes next. */
KVE_INLINE uint32_t kve512_emit_late(kve512_out o, kve512_late *p, kve512_late next, uint32_t ns)
{
    _mm512_storeu_si512(o.surv + ns, _mm512_maskz_compress_epi32(p->sv, p->slots));
    _mm512_storeu_si512(o.shi + ns, _mm512_maskz_compress_epi32(p->sv, p->hi));
    ns += (uint32_t)_mm_popcnt_u32(p->sv);
    *p = next;
    return ns;
}

/* What a checking scan tracks besides its counts (kve_scan_facts). */
typedef struct {
    __m512i min, max, umin;
    uint32_t run_len;
} kve512_chk;

/* Slots past the run: their largest value, their smallest as unsigned
 * (empty slots, -1, count as the largest), and their marks (kve_simd_mark;
 * n: the lanes to mark; v: the n slots at src, loaded). With the indices
 * read from the table again, on Zen 5 kvevict-bench checked G1 in
 * 0.175-0.176 ms, against 0.198-0.201 ms with the vector stored to the
 * stack and read back lane by lane (on the Zen 4 measured before, 0.186
 * against 0.178 ms; docs/BENCHMARKS.md). */
KVE_INLINE void kve512_check_marks(kve512_chk *q, unsigned char *map, __m512i v, uint32_t n,
                                   const int32_t *src)
{
    q->max = _mm512_max_epi32(q->max, v);
    q->umin = _mm512_min_epu32(q->umin, v);
    kve_simd_mark(map, src, n);
}

/* 64 slots of prompt at t (v0..v3, loaded from src): either the next of
 * the leading run (slot t + i holds position t + i), or marked. */
KVE_INLINE void kve512_check_prompt(kve512_chk *q, unsigned char *map, __m512i v0, __m512i v1,
                                    __m512i v2, __m512i v3, uint32_t t, const int32_t *src)
{
    const __m512i v[4] = {v0, v1, v2, v3};
    if (q->run_len == t) {
        __m512i e = _mm512_add_epi32(KVE512_IOTA, _mm512_set1_epi32((int)t)), sixteen = _mm512_set1_epi32(16);
        __mmask16 eq = 0xFFFF;
        for (int b = 0; b < 4; b++, e = _mm512_add_epi32(e, sixteen))
            eq &= _mm512_cmpeq_epi32_mask(v[b], e);
        if (eq == 0xFFFF) {
            q->run_len += 64;
            return;
        }
    }
    for (int b = 0; b < 4; b++)
        kve512_check_marks(q, map, v[b], 16, src + 16 * b);
}

/* chk: 0, KVE_JOB_CHECK_RANGE, or that and KVE_JOB_CHECK_DUPS (a constant
 * in each instance). */
KVE_INLINE uint32_t kve512_scan(const kve_scan *s, kve_counts *c, int top, uint32_t chk)
{
    const kve512_scan_c k = {kve512_hc_of(s->hc), _mm512_set1_epi32(s->prompt),
                             _mm512_set1_epi32((int)s->win_lo), _mm512_set1_epi32((int)(s->T >> 32)),
                             _mm512_set1_epi64(0xffffffff),
                             _mm512_set1_epi32(16), top};
    const int32_t *sp = s->sp;
    const uint32_t n = s->n;
    const kve512_out o = {s->khi, s->surv, s->shi};
    unsigned char *const map = s->map;
    const int dups = (chk & KVE_JOB_CHECK_DUPS) != 0;
    kve512_chk q = {_mm512_set1_epi32(-1), _mm512_set1_epi32(-1), _mm512_set1_epi32(-1), 0};
    kve512_cnt a = {0, 0, 0};
    uint32_t ns = 0, t = 0;
    kve512_late late = {_mm512_setzero_si512(), _mm512_setzero_si512(), 0}; /* none yet */
    __m512i ncv = _mm512_setzero_si512(); /* candidates of whole generated blocks, per lane */
    for (; t + 64 <= n; t += 64) {
        const __m512i vb[4] = {_mm512_loadu_si512(sp + t), _mm512_loadu_si512(sp + t + 16),
                               _mm512_loadu_si512(sp + t + 32), _mm512_loadu_si512(sp + t + 48)};
        __m512i umax = _mm512_max_epu32(_mm512_max_epu32(vb[0], vb[1]), _mm512_max_epu32(vb[2], vb[3]));
        if (_mm512_cmplt_epu32_mask(umax, k.prompt) == 0xFFFF) { /* all prompt */
            a.nv += 64;
            if (dups)
                kve512_check_prompt(&q, map, vb[0], vb[1], vb[2], vb[3], t, sp + t);
            continue;
        }
        __m512i smin = _mm512_min_epi32(_mm512_min_epi32(vb[0], vb[1]), _mm512_min_epi32(vb[2], vb[3]));
        __m512i slots = _mm512_add_epi32(KVE512_IOTA, _mm512_set1_epi32((int)t));
        if (chk) {
            q.min = _mm512_min_epi32(q.min, smin);
            for (int b = 0; dups && b < 4; b++)
                kve512_check_marks(&q, map, vb[b], 16, sp + t + 16 * b);
        }
        if (_mm512_cmpge_epi32_mask(smin, k.prompt) == 0xFFFF) { /* all generated */
            a.nv += 64;
            a.ng += 64;
            for (uint32_t b = 0; b < 4; b++) {
                __mmask16 kc = _mm512_cmplt_epu32_mask(vb[b], k.win_lo);
                ncv = _mm512_mask_sub_epi32(ncv, kc, ncv, _mm512_set1_epi32(-1));
                ns = kve512_emit_late(o, &late, kve512_hash_block(o, &k, vb[b], slots, t + 16 * b, kc), ns);
                slots = _mm512_add_epi32(slots, k.sixteen);
            }
            continue;
        }
        for (uint32_t b = 0; b < 4; b++) {
            __mmask16 kc = kve512_classify(vb[b], k.prompt, k.win_lo, &a);
            if (kc)
                ns = kve512_emit_late(o, &late, kve512_hash_block(o, &k, vb[b], slots, t + 16 * b, kc), ns);
            slots = _mm512_add_epi32(slots, k.sixteen);
        }
    }
    for (; t < n; t += 16) {
        __m512i v = kve512_load_slots(sp, t, n);
        if (chk)
            q.min = _mm512_min_epi32(q.min, v);
        if (dups)
            kve512_check_marks(&q, map, v, n - t < 16 ? n - t : 16, sp + t); /* not the lanes past n */
        __mmask16 kc = kve512_classify(v, k.prompt, k.win_lo, &a);
        if (kc)
            ns = kve512_emit_late(
                o, &late, kve512_hash_block(o, &k, v, _mm512_add_epi32(KVE512_IOTA, _mm512_set1_epi32((int)t)), t, kc),
                ns);
    }
    ns = kve512_emit_late(o, &late, late, ns); /* the last hashed block's */
    c->n_valid = a.nv;
    c->n_gen = a.ng;
    c->n_cand = a.nc + (uint32_t)_mm512_reduce_add_epi32(ncv);
    if (chk)
        *s->facts = (kve_scan_facts){_mm512_reduce_min_epi32(q.min), _mm512_reduce_max_epi32(q.max),
                                     (uint32_t)_mm512_reduce_min_epu32(q.umin), q.run_len};
    return ns;
}

static uint32_t kve_isa_scan(const kve_scan *s, kve_counts *c)
{
    enum { R = KVE_JOB_CHECK_RANGE, RD = KVE_JOB_CHECK_RANGE | KVE_JOB_CHECK_DUPS };
    if (s->check & KVE_JOB_CHECK_DUPS)
        return s->top ? kve512_scan(s, c, 1, RD) : kve512_scan(s, c, 0, RD);
    if (s->check)
        return s->top ? kve512_scan(s, c, 1, R) : kve512_scan(s, c, 0, R);
    return s->top ? kve512_scan(s, c, 1, 0) : kve512_scan(s, c, 0, 0);
}

static uint32_t kve_isa_take_marks(unsigned char *map, size_t n)
{
    uint64_t count = 0;
    size_t i = 0;
    const __m512i zero = _mm512_setzero_si512();
    for (; i + 64 <= n; i += 64) {
        __m512i v = _mm512_loadu_si512(map + i);
        count += (uint64_t)_mm_popcnt_u64(_mm512_test_epi8_mask(v, v));
        _mm512_storeu_si512(map + i, zero);
    }
    if (i < n) {
        __mmask64 tail = (__mmask64)((1ull << (n - i)) - 1);
        __m512i v = _mm512_maskz_loadu_epi8(tail, map + i);
        count += (uint64_t)_mm_popcnt_u64(_mm512_test_epi8_mask(v, v));
        _mm512_mask_storeu_epi8(map + i, tail, zero);
    }
    return (uint32_t)count;
}

static uint32_t kve_isa_cand(const int32_t *sp, uint32_t n, int32_t prompt, uint32_t win_lo,
                             const uint64_t *keys, const uint32_t *khi, uint64_t lo, uint64_t hi,
                             int32_t *out, uint32_t cap, kve_counts *c)
{
    const __m512i vp = _mm512_set1_epi32(prompt), vw = _mm512_set1_epi32((int)win_lo);
    const __m512i vlo = _mm512_set1_epi64((long long)lo), vhi = _mm512_set1_epi64((long long)hi);
    const __m512i vlo32 = _mm512_set1_epi32((int)lo), vhi32 = _mm512_set1_epi32((int)hi);
    kve512_cnt a = {0, 0, 0};
    uint32_t cnt = 0;
    for (uint32_t t = 0; t < n; t += 16) {
        if (t + 64 <= n && !(t & 63) && kve512_all_prompt(sp, t, vp)) {
            a.nv += 64;
            t += 48;
            continue;
        }
        __mmask16 kc = kve512_classify(kve512_load_slots(sp, t, n), vp, vw, &a);
        if (!kc)
            continue;
        if (keys) {
            __m512i k0 = _mm512_loadu_si512(keys + t), k1 = _mm512_loadu_si512(keys + t + 8);
            __mmask8 m0 = _mm512_mask_cmpge_epu64_mask((__mmask8)kc, k0, vlo);
            __mmask8 m1 = _mm512_mask_cmpge_epu64_mask((__mmask8)(kc >> 8), k1, vlo);
            m0 = _mm512_mask_cmple_epu64_mask(m0, k0, vhi);
            m1 = _mm512_mask_cmple_epu64_mask(m1, k1, vhi);
            kc = _mm512_kunpackb(m1, m0);
        } else if (khi) {
            __m512i k = _mm512_loadu_si512(khi + t);
            kc = _mm512_mask_cmple_epu32_mask(_mm512_mask_cmpge_epu32_mask(kc, k, vlo32), k, vhi32);
        }
        cnt += kve512_emit(out + cnt, cap - cnt, kc, _mm512_add_epi32(KVE512_IOTA, _mm512_set1_epi32((int)t)));
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
    const uint16_t *bits = (const uint16_t *)(const void *)ev_bits;
    uint32_t cnt = 0;
    for (uint32_t t = 0; t < n; t += 16) {
        __mmask16 kv = _mm512_cmpge_epi32_mask(kve512_load_slots(sp, t, n), _mm512_setzero_si512());
        if (bits)
            kv &= (__mmask16)~bits[t / 16];
        cnt += kve512_emit(out + cnt, cap - cnt, kv, _mm512_add_epi32(KVE512_IOTA, _mm512_set1_epi32((int)t)));
    }
    return cnt;
}

static void kve_isa_count3_ge32(const uint32_t *k, uint32_t m, const uint32_t t[3], uint32_t c[3])
{
    const __m512i t0 = _mm512_set1_epi32((int)t[0]), t1 = _mm512_set1_epi32((int)t[1]);
    const __m512i t2 = _mm512_set1_epi32((int)t[2]);
    uint32_t c0 = 0, c1 = 0, c2 = 0;
    for (uint32_t i = 0; i < m; i += 16) {
        __mmask16 tm = kve512_tail16(m - i);
        __m512i v = _mm512_maskz_loadu_epi32(tm, k + i);
        c0 += (uint32_t)_mm_popcnt_u32(_mm512_mask_cmpge_epu32_mask(tm, v, t0));
        c1 += (uint32_t)_mm_popcnt_u32(_mm512_mask_cmpge_epu32_mask(tm, v, t1));
        c2 += (uint32_t)_mm_popcnt_u32(_mm512_mask_cmpge_epu32_mask(tm, v, t2));
    }
    c[0] = c0;
    c[1] = c1;
    c[2] = c2;
}

static uint32_t kve_isa_split32(const uint32_t *k, uint32_t m, uint32_t a, uint32_t b, uint32_t *out,
                                uint32_t *above)
{
    const __m512i va = _mm512_set1_epi32((int)a), vb = _mm512_set1_epi32((int)b);
    uint32_t in = 0, over = 0;
    for (uint32_t i = 0; i < m; i += 16) {
        __mmask16 tm = kve512_tail16(m - i);
        __m512i v = _mm512_maskz_loadu_epi32(tm, k + i);
        __mmask16 gt = _mm512_mask_cmpgt_epu32_mask(tm, v, vb);
        __mmask16 ge = _mm512_mask_cmpge_epu32_mask(tm, v, va) & ~gt;
        uint32_t pc = (uint32_t)_mm_popcnt_u32(ge);
        over += (uint32_t)_mm_popcnt_u32(gt);
        if (in + pc <= KVE_BRACKET)
            _mm512_mask_storeu_epi32(out + in, (__mmask16)((1u << pc) - 1), _mm512_maskz_compress_epi32(ge, v));
        in += pc;
    }
    *above = over;
    return in;
}

static int kve_isa_rank32(const uint32_t *v, uint32_t n, uint32_t r, uint32_t *t)
{
    __mmask16 m0 = kve512_tail16(n), m1 = n > 16 ? kve512_tail16(n - 16) : 0;
    __m512i a0 = _mm512_maskz_loadu_epi32(m0, v), a1 = _mm512_maskz_loadu_epi32(m1, v + 16);
    __m512i g0 = _mm512_setzero_si512(), g1 = g0; /* per lane: how many v[j] are >= it */
    const __m512i one = _mm512_set1_epi32(1);
    for (uint32_t j = 0; j < n; j++) {
        __m512i x = _mm512_set1_epi32((int)v[j]);
        g0 = _mm512_mask_add_epi32(g0, _mm512_cmpge_epu32_mask(x, a0), g0, one);
        g1 = _mm512_mask_add_epi32(g1, _mm512_cmpge_epu32_mask(x, a1), g1, one);
    }
    const __m512i want = _mm512_set1_epi32((int)r);
    __mmask16 h0 = _mm512_mask_cmpeq_epi32_mask(m0, g0, want), h1 = _mm512_mask_cmpeq_epi32_mask(m1, g1, want);
    if (!(h0 | h1))
        return 0;
    *t = h0 ? v[__builtin_ctz(h0)] : v[16 + __builtin_ctz(h1)];
    return 1;
}

static uint32_t kve_isa_filter_ge32(const uint32_t *k, const int32_t *slots, uint32_t m, uint32_t t,
                                    int32_t *out, uint32_t cap)
{
    const __m512i vt = _mm512_set1_epi32((int)t);
    uint32_t cnt = 0;
    for (uint32_t i = 0; i < m; i += 16) {
        __mmask16 tm = kve512_tail16(m - i);
        __mmask16 ge = _mm512_mask_cmpge_epu32_mask(tm, _mm512_maskz_loadu_epi32(tm, k + i), vt);
        cnt += kve512_emit(out + cnt, cap - cnt, ge, _mm512_maskz_loadu_epi32(tm, slots + i));
    }
    return cnt;
}

/* ---- content checks (kve_check_rows.h) ---------------------------------------- */

static void kve512_row_facts(const int32_t *row, uint32_t n, kve_row_facts *s)
{
    __m512i mn = _mm512_set1_epi32(INT32_MAX), hi = _mm512_set1_epi32(-1), lo = hi;
    const __m512i m1 = _mm512_set1_epi32(-1), zero = _mm512_setzero_si512();
    uint32_t valid = 0, bad = 0, t = 0;
    for (; t + 17 <= n; t += 16) {
        __m512i v = _mm512_loadu_si512(row + t), next = _mm512_loadu_si512(row + t + 1);
        mn = _mm512_min_epi32(mn, v);
        hi = _mm512_max_epi32(hi, v);
        lo = _mm512_min_epu32(lo, v);
        valid += (uint32_t)_mm_popcnt_u32(_mm512_cmpge_epi32_mask(v, zero));
        __mmask16 out = _mm512_cmplt_epi32_mask(v, zero) | _mm512_cmple_epi32_mask(next, v);
        bad += (uint32_t)_mm_popcnt_u32(_mm512_mask_cmpneq_epi32_mask(out, next, m1));
    }
    *s = (kve_row_facts){_mm512_reduce_min_epi32(mn), _mm512_reduce_max_epi32(hi),
                         (uint32_t)_mm512_reduce_min_epu32(lo), valid, bad};
    kve_row_facts_tail(row, t, n, s);
}

static uint32_t kve512_row_run(const int32_t *row, uint32_t n)
{
    if (row[0] < 0)
        return 0;
    __m512i expect = _mm512_add_epi32(KVE512_IOTA, _mm512_set1_epi32(row[0]));
    uint32_t t = 0, lanes = kve_row_run_room(row[0], n);
    for (; t + 16 <= lanes; t += 16, expect = _mm512_add_epi32(expect, _mm512_set1_epi32(16)))
        if (_mm512_cmpneq_epi32_mask(_mm512_loadu_si512(row + t), expect))
            break;
    return kve_row_run_tail(row, t, n);
}

/* kve_row_distinct_scalar's map with one dword per position, written by
 * scatters of 16 lanes. */
static int kve512_row_distinct(const int32_t *row, uint32_t n, int32_t lo, size_t span,
                               uint32_t valid, void *buf)
{
    int32_t *map = (int32_t *)buf;
    size_t padded = (span + 15) & ~(size_t)15;
    memset(map, 0, padded * 4);
    const __m512i vlo = _mm512_set1_epi32(lo), one = _mm512_set1_epi32(1);
    for (uint32_t t = 0; t < n; t += 16) {
        __mmask16 in = kve512_tail16(n - t);
        __m512i v = _mm512_maskz_loadu_epi32(in, row + t);
        __mmask16 ok = _mm512_mask_cmpge_epi32_mask(in, v, _mm512_setzero_si512());
        _mm512_mask_i32scatter_epi32(map, ok, _mm512_sub_epi32(v, vlo), one, 4);
    }
    __m512i sum = _mm512_setzero_si512();
    for (size_t i = 0; i < padded; i += 16)
        sum = _mm512_add_epi32(sum, _mm512_loadu_si512(map + i));
    return (uint32_t)_mm512_reduce_add_epi32(sum) == valid;
}

/* ---- the table ------------------------------------------------------------------- */

static void kve512_evict_head(kve_head_job *j, void *scratch) { kve_simd_evict_head(j, scratch); }

const kve_cpu_kernels kve_cpu_kernels_avx512 = {
    .isa = KVE_CPU_ISA_AVX512,
    .evict_scratch_bytes = kve_simd_scratch_bytes,
    .evict_head = kve512_evict_head,
    .keys = kve512_keys,
    .head_keys = kve512_floor_keys,
    .copy_runs = kve_simd_copy_runs,
    .copy_runs_stream = kve_simd_copy_runs_stream,
    .row_facts = kve512_row_facts,
    .row_run = kve512_row_run,
    .row_distinct = kve512_row_distinct,
    .row_map_bytes = 4,
    .fused_checks = 1,
    .boundary32 = kve_simd_boundary,
};
