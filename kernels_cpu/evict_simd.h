/*
 * evict_simd.h — one head's eviction for the SIMD kernels (docs/SPEC.md
 * "One head's eviction"), written once and compiled into each ISA's file
 * (kernels_avx2.c, kernels_avx512.c) with that file's target flags. The ISA
 * file defines the kve_isa_* primitives declared below.
 *
 * The plan, for the common shape (many candidates, keys uniform):
 *  1. Counts and the window: the window is "generated positions >= win_lo".
 *     A guess for win_lo (the previous head's, or max - wc + 1) is verified
 *     by the counts of the pass that uses it; a miss falls back to an exact
 *     quickselect and a second pass.
 *  2. One pass over the slots hashes every candidate and compresses the
 *     slots of the "survivors": keys beyond a threshold T chosen so that the
 *     smaller side (evicted or kept candidates) almost surely lies inside,
 *     with a few sigma of margin. Only the keys' high halves are computed
 *     and kept (per slot, and per survivor): T and every boundary below are
 *     multiples of 2^32, so the high halves decide every comparison.
 *  3. An exact boundary t among the survivors' high halves: count(hi >= t)
 *     == the number wanted, found by interpolation on the counts (keys are
 *     uniform; evict_simd_boundary.h). The keep-set is then {key < t << 32},
 *     exactly the spec's n_keep smallest.
 * Exact fallbacks: a threshold that misses re-extracts from the stored high
 * halves; equal high halves across the boundary (probability ~2^-22 a head)
 * run the scalar reference on the head. Outputs are written with exact
 * lengths.
 */
#ifndef KVE_EVICT_SIMD_H
#define KVE_EVICT_SIMD_H

#include <stdint.h>
#include <math.h>
#include <string.h>

#include "kve_cpu_kernels.h"
#include "kve_key.h"
#include "kve_select.h"
#include "kve_util.h"

/* Counts of one pass with a given win_lo: valid slots, generated slots
 * (position >= prompt), candidates (prompt <= position < win_lo). */
typedef struct kve_counts {
    uint32_t n_valid, n_gen, n_cand;
} kve_counts;

/* A head's key, folded for one varying u32 (pos): key = f(pos ^ pos_mask).
 * With a = the first hashed word and x = the second, XXH3's 9-16 byte path is
 * acc = 16 + bswap64(a) + x + fold64(a * x); a is fixed per head and only the
 * low half of x varies, so two of the four 32x32 products are constants. */
typedef struct kve_hconst {
    uint64_t mul_lo, mul_hi; /* the halves of a, the fixed multiplicand */
    uint64_t acc_base;       /* 16 + bswap64(a) + (x_hi << 32): acc's constant part */
    uint64_t cross_lo;       /* low half of mul_lo * x_hi, added to the cross term */
    uint64_t high_base;      /* mul_hi * x_hi + high half of mul_lo * x_hi: the high
                                half's constant part */
    uint32_t pos_mask;       /* low half of x's seed-dependent mask: x_lo = pos ^ pos_mask */
} kve_hconst;

/* The hashing pass (step 2). */
typedef struct kve_scan {
    const int32_t *sp;
    uint32_t n;
    int32_t prompt;     /* <= INT32_MAX */
    uint32_t win_lo;    /* <= 2^31 */
    const kve_hconst *hc;
    uint64_t T;         /* survivors: key >= T (top) or key <= T; T's low half is */
                        /* all zeros (top) or all ones, so key >> 32 decides */
    int top;
    uint32_t *khi;      /* [n + 16], per slot, written for candidate slots: the key's */
                        /* high half (its low half is never computed) */
    int32_t *surv;      /* [n + 32], survivor slots, ascending */
    uint32_t *shi;      /* [n + 32], their khi (written by ISAs with KVE_ISA_SCAN_SHI) */
    /* The fused checks (kve_head_job.check; an ISA with KVE_ISA_FUSED_CHECK):
     * check 0, or KVE_JOB_CHECK_* bits; map: the job's check_map. */
    uint32_t check;
    unsigned char *map;
    struct kve_scan_facts *facts; /* out when check != 0 */
} kve_scan;

/* What a checking pass saw (kve_simd_verdict reads it): the smallest value
 * (below -1: a bad one); the leading run, slots t < run holding position t
 * (distinct, so not marked); and, among the other slots, each of which
 * marked map[value & 0xffff] (an empty one, -1, marks 0xffff), the largest
 * value and the smallest as unsigned (umin: the smallest position there,
 * empty slots counting as 2^32 - 1). */
typedef struct kve_scan_facts {
    int32_t min, max;
    uint32_t umin, run;
} kve_scan_facts;

/* ---- primitives each ISA file defines --------------------------------- */

/* n_valid, n_gen and the largest valid position (-1 when none). */
static void kve_isa_count(const int32_t *sp, uint32_t n, int32_t prompt, kve_counts *c,
                          int32_t *max_pos);
/* Step 2; fills *c (and *s->facts when s->check); returns the number of
 * survivors. */
static uint32_t kve_isa_scan(const kve_scan *s, kve_counts *c);
#ifdef KVE_ISA_FUSED_CHECK
/* Nonzero bytes of map[0 .. n), all zeroed (n < 2^16), in one pass. */
static uint32_t kve_isa_take_marks(unsigned char *map, size_t n);

/* A fused duplicate check's marks of the n slots at src: the byte of each
 * value's low 16 bits (an empty slot, -1, marks 0xffff), by plain byte
 * stores; the indices come from the table again, by 16-bit loads (faster
 * than reading the loaded vector back lane by lane: kernels_avx512.c). */
static inline __attribute__((always_inline)) void kve_simd_mark(unsigned char *map, const int32_t *src,
                                                          uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        map[(uint16_t)src[i]] = 1;
}
#endif
/* Candidate slots, all of them (keys and khi NULL), or those whose key
 * (keys) or scan's high half (khi, lo and hi below 2^32) is in [lo, hi],
 * ascending; writes at most cap of them to out and returns how many it
 * wrote; fills *c when c != NULL. Called through the two below. */
static uint32_t kve_isa_cand(const int32_t *sp, uint32_t n, int32_t prompt, uint32_t win_lo,
                             const uint64_t *keys, const uint32_t *khi, uint64_t lo, uint64_t hi,
                             int32_t *out, uint32_t cap, kve_counts *c);

static inline uint32_t kve_isa_cand_slots(const int32_t *sp, uint32_t n, int32_t prompt,
                                          uint32_t win_lo, const uint64_t *keys, uint64_t lo,
                                          uint64_t hi, int32_t *out, uint32_t cap, kve_counts *c)
{
    return kve_isa_cand(sp, n, prompt, win_lo, keys, NULL, lo, hi, out, cap, c);
}

static inline uint32_t kve_isa_cand_slots_hi(const int32_t *sp, uint32_t n, int32_t prompt,
                                             uint32_t win_lo, const uint32_t *khi, uint32_t lo,
                                             uint32_t hi, int32_t *out, uint32_t cap)
{
    return kve_isa_cand(sp, n, prompt, win_lo, NULL, khi, lo, hi, out, cap, NULL);
}
/* Valid slots whose bit in ev_bits (NULL: none) is clear, ascending, at most cap. */
static uint32_t kve_isa_kept_slots(const int32_t *sp, uint32_t n, const uint64_t *ev_bits,
                                   int32_t *out, uint32_t cap);
/* c[j] = the number of k[0..m) >= t[j], j < 3, in one pass. */
static void kve_isa_count3_ge32(const uint32_t *k, uint32_t m, const uint32_t t[3], uint32_t c[3]);
/* The k[0..m) in [a, b]: how many (out, at most KVE_BRACKET of them, in
 * order), and *above = how many k > b. */
static uint32_t kve_isa_split32(const uint32_t *k, uint32_t m, uint32_t a, uint32_t b, uint32_t *out,
                                uint32_t *above);
/* Among v[0..n), n <= KVE_BRACKET, a value with exactly r of them >= it
 * (1 <= r <= n): the r-th largest when it is larger than the next; 0 when
 * there is none (the r-th and the next are equal). */
static int kve_isa_rank32(const uint32_t *v, uint32_t n, uint32_t r, uint32_t *t);
/* slots[i] for the i with k[i] >= t, in order, at most cap; returns how many. */
static uint32_t kve_isa_filter_ge32(const uint32_t *k, const int32_t *slots, uint32_t m, uint32_t t,
                                    int32_t *out, uint32_t cap);

/* ---- the plan ------------------------------------------------------------ */

#define KVE_BRACKET 32u /* values kve_isa_split32 gathers and kve_isa_rank32 ranks */


typedef struct kve_simd_ws {
    uint64_t *keys, *skeys, *bits; /* keys, skeys: the scored path's */
    uint32_t *khi;                 /* aliases keys: the random path's */
    int32_t *surv;
    uint32_t *shi;
    uint32_t *tmp; /* aliases skeys: the exact window's and the bracket's */
} kve_simd_ws;

static size_t kve_simd_ws_layout(uint32_t n, char *base, kve_simd_ws *w)
{
    size_t keys = KVE_ALIGN_UP(((size_t)n + 16) * 8, 64), surv = KVE_ALIGN_UP(((size_t)n + 32) * 4, 64);
    size_t bits = KVE_ALIGN_UP(((size_t)n / 64 + 2) * 8, 64);
    if (w) {
        w->keys = (uint64_t *)base;
        w->khi = (uint32_t *)base;
        w->skeys = (uint64_t *)(base + keys);
        w->tmp = (uint32_t *)w->skeys;
        w->surv = (int32_t *)(base + 2 * keys);
        w->shi = (uint32_t *)(base + 2 * keys + surv);
        w->bits = (uint64_t *)(base + 2 * keys + 2 * surv);
    }
    return 2 * keys + 2 * surv + bits + 64;
}

static size_t kve_simd_scratch_bytes(uint32_t n)
{
    size_t mine = kve_simd_ws_layout(n, NULL, NULL);
    size_t ref = kve_cpu_kernels_scalar.evict_scratch_bytes(n);
    return mine > ref ? mine : ref;
}

static kve_hconst kve_hconst_make(uint64_t seq_seed, uint32_t flags, uint32_t layer, uint32_t head,
                                  uint32_t round)
{
    uint64_t a = kve_key_word_lo(flags, layer, head) ^ ((KVE_XXH3_S24 ^ KVE_XXH3_S32) + seq_seed);
    uint64_t x = kve_key_word_hi(flags, 0, round) ^ ((KVE_XXH3_S40 ^ KVE_XXH3_S48) - seq_seed);
    uint64_t x_hi = x >> 32;
    kve_hconst h;
    h.mul_lo = (uint32_t)a;
    h.mul_hi = a >> 32;
    h.pos_mask = (uint32_t)x;
    h.acc_base = 16 + kve_bswap64(a) + (x_hi << 32);
    uint64_t lo_hi = h.mul_lo * x_hi;
    h.cross_lo = lo_hi & 0xffffffffu;
    h.high_base = h.mul_hi * x_hi + (lo_hi >> 32);
    return h;
}

/* The spec's steps 2-4 from the counts of a pass. */
typedef struct kve_plan {
    uint32_t n_valid, n_cand, nk, e;
    int over_budget;
} kve_plan;

static kve_plan kve_plan_of(const kve_head_job *j, const kve_counts *c)
{
    kve_plan p;
    uint64_t prot = (uint64_t)(c->n_valid - c->n_gen) + (c->n_gen - c->n_cand);
    p.n_valid = c->n_valid;
    p.n_cand = c->n_cand;
    p.nk = j->budget > prot ? (uint32_t)(j->budget - prot) : 0;
    if (p.nk > c->n_cand)
        p.nk = c->n_cand;
    p.e = c->n_cand - p.nk;
    p.over_budget = c->n_valid > j->budget && prot > j->budget;
    return p;
}

static uint32_t kve_min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* The pass found exactly the spec's window above win_lo. */
static int kve_window_ok(const kve_counts *c, uint32_t window)
{
    return c->n_gen - c->n_cand == kve_min_u32(window, c->n_gen);
}

/* In a decode the window is the last wc positions, so max - wc + 1. */
static uint32_t kve_window_guess(uint32_t n_gen, uint32_t window, int32_t max_pos, int32_t prompt)
{
    uint32_t wc = kve_min_u32(window, n_gen);
    if (wc == 0)
        return 0x80000000u;
    int64_t g = (int64_t)max_pos - wc + 1;
    return (uint32_t)(g < prompt ? prompt : g);
}

KVE_DEFINE_SELECT(kve_simd_select_u32, uint32_t, KVE_U32_LESS)

/* The exact win_lo: the (n_gen - wc)-th smallest generated position. */
static uint32_t kve_window_exact(const int32_t *sp, uint32_t n, int32_t prompt, uint32_t window,
                                 uint32_t *tmp)
{
    uint32_t m = 0;
    for (uint32_t t = 0; t < n; t++)
        if (sp[t] >= prompt)
            tmp[m++] = (uint32_t)sp[t];
    uint32_t wc = kve_min_u32(window, m);
    return wc ? kve_simd_select_u32(tmp, m, m - wc) : 0x80000000u;
}

/* Survivors are the smaller side: the e largest keys (top) or the nk
 * smallest; T leaves a margin of 3 sqrt(want) + 4 (about 3 sigma) over the
 * expected count. A shortfall (about 0.2% of heads at 64 of 1024) costs
 * kve_simd_select one more pass, over the stored high halves. */
static void kve_simd_pick(const kve_plan *p, int *top, uint64_t *T)
{
    *top = p->e <= p->nk;
    uint64_t want = *top ? p->e : p->nk;
    uint64_t m = want + 3 * (uint64_t)sqrt((double)want) + 4; /* floor(sqrt) exactly: want < 2^52 */
    if (m >= p->n_cand) {
        *T = *top ? 0 : UINT64_MAX;
        return;
    }
    uint64_t q = (uint64_t)((double)m / p->n_cand * 18446744073709551616.0);
    /* Aligned to 2^32 so that kernels may compare the keys' high halves only. */
    *T = *top ? ~q & ~0xffffffffull : q | 0xffffffffull;
}

#include "evict_simd_boundary.h" /* step 3 */

/* Step 5 from the survivors of a pass (top/T as that pass used them), on
 * the keys' high halves. 0 when only the scalar reference can answer (two
 * high halves equal across the boundary, ~2^-22 a head). */
static int kve_simd_select(kve_head_job *j, const kve_plan *p, const kve_simd_ws *w,
                           uint32_t win_lo, int top, uint64_t T, uint32_t ns)
{
    const int32_t prompt = (int32_t)j->prompt;
    const uint32_t n = j->n_slots;
    int top_x = p->e <= p->nk, fill = !KVE_ISA_SCAN_SHI;
    uint32_t need = top_x ? p->e : p->nk;
    if (top_x != top || ns < need) { /* the guess missed: re-extract from the stored halves */
        kve_simd_pick(p, &top, &T);
        ns = kve_isa_cand_slots_hi(j->slot_pos, n, prompt, win_lo, w->khi, top ? (uint32_t)(T >> 32) : 0,
                                   top ? UINT32_MAX : (uint32_t)(T >> 32), w->surv, n);
        if (ns < need) {
            T = top ? 0 : UINT64_MAX;
            ns = kve_isa_cand_slots_hi(j->slot_pos, n, prompt, win_lo, w->khi, 0, UINT32_MAX, w->surv, n);
        }
        fill = 1;
    }
    for (uint32_t i = 0; fill && i < ns; i++)
        w->shi[i] = w->khi[w->surv[i]];
    uint32_t want = top ? p->e : ns - p->nk, lo = top ? (uint32_t)(T >> 32) : 0;
    uint32_t hi = top ? UINT32_MAX : (uint32_t)(T >> 32);
    uint64_t t;
    if (!kve_simd_boundary(w->shi, ns, want, lo, hi, w->tmp, &t))
        return 0;
    if (top)
        j->n_evicted = kve_isa_filter_ge32(w->shi, w->surv, ns, (uint32_t)t, j->evicted, p->e);
    else
        j->n_evicted = kve_isa_cand_slots_hi(j->slot_pos, n, prompt, win_lo, w->khi, (uint32_t)t,
                                             UINT32_MAX, j->evicted, p->e);
    return 1;
}

/* Outputs besides the evicted row: kept slots (optional) and counts. */
static void kve_simd_finish(kve_head_job *j, const kve_plan *p, const kve_simd_ws *w)
{
    j->over_budget = p->over_budget;
    if (!j->kept) {
        j->n_kept = p->n_valid - j->n_evicted;
        return;
    }
    const uint64_t *bits = NULL;
    if (j->n_evicted) {
        memset(w->bits, 0, ((size_t)j->n_slots / 64 + 1) * 8);
        for (uint32_t i = 0; i < j->n_evicted; i++)
            w->bits[(uint32_t)j->evicted[i] >> 6] |= 1ull << (j->evicted[i] & 63);
        bits = w->bits;
    }
    j->n_kept = kve_isa_kept_slots(j->slot_pos, j->n_slots, bits, j->kept, j->n_slots);
}

static int kve_hint_fits(const kve_head_hint *h, const kve_head_job *j)
{
    return h && h->valid && h->seed == j->seed && h->seq_id == j->seq_id &&
           h->prompt == j->prompt && h->window == j->window && h->budget == j->budget &&
           h->n_slots == j->n_slots;
}

#include "evict_simd_scored.h" /* the scored path, on the pieces above */

#ifdef KVE_ISA_FUSED_CHECK
/* Marks in map[a .. a + len), len <= 2^16, wrapping past the end; cleared. */
static uint32_t kve_simd_take_marks(unsigned char *map, uint32_t a, uint32_t len)
{
    uint32_t first = len < KVE_FUSED_MAP_BYTES - a ? len : KVE_FUSED_MAP_BYTES - a;
    return kve_isa_take_marks(map + a, first) + kve_isa_take_marks(map, len - first);
}

/* The fused checks' verdict from a checking pass's facts and counts (n:
 * the table's slots); leaves the map zeroed. The m marked positions (the
 * valid slots past the run) lie in [umin, max]; when that window is
 * shorter than 2^16, their low halves differ exactly when they do, so they
 * are distinct exactly when m bytes of the window's residues are set, as
 * long as no empty slot's mark (0xffff) falls inside the window too; and
 * none may lie below the run (it would repeat a run position). Anything
 * else (a bad value, a wider window) is only a suspect, for the exact
 * search to settle. */
static int kve_simd_verdict(const kve_scan_facts *f, uint32_t n_valid, uint32_t n, unsigned char *map)
{
    int ok = f->min >= -1;
    if (!map)
        return ok ? KVE_JOB_CLEAN : KVE_JOB_SUSPECT;
    uint32_t m = n_valid - f->run, empty = n - n_valid;
    if (ok && m == 0) { /* only empty slots marked */
        map[0xffff] = 0;
        return KVE_JOB_CLEAN;
    }
    uint64_t len = ok ? (uint64_t)(uint32_t)f->max - f->umin + 1 : UINT64_MAX;
    if (len >= 0xffff) { /* a bad value, or a wide window: marks anywhere, all cleared */
        memset(map, 0, KVE_FUSED_MAP_BYTES);
        return KVE_JOB_SUSPECT;
    }
    uint32_t a = f->umin & 0xffff;
    int empty_inside = empty && (a + len > 0xffff);
    uint32_t got = kve_simd_take_marks(map, a, (uint32_t)len);
    map[0xffff] = 0;
    return !empty_inside && f->umin >= f->run && got == m ? KVE_JOB_CLEAN : KVE_JOB_SUSPECT;
}
#endif

/* Counts, window guess and seq_seed from the hint when it fits, else from a
 * counting pass. */
static uint64_t kve_simd_start(const kve_head_job *j, const kve_head_hint *h, kve_counts *c,
                               uint32_t *win_lo)
{
    if (kve_hint_fits(h, j)) {
        c->n_valid = h->n_valid;
        c->n_gen = h->n_gen;
        *win_lo = h->win_lo;
        return h->seq_seed;
    }
    int32_t max_pos;
    kve_isa_count(j->slot_pos, j->n_slots, (int32_t)j->prompt, c, &max_pos);
    *win_lo = kve_window_guess(c->n_gen, j->window, max_pos, (int32_t)j->prompt);
    return kve_seq_seed(j->seed, j->seq_id);
}

static void kve_hint_store(kve_head_hint *h, const kve_head_job *j, uint64_t seq_seed,
                           const kve_counts *x, uint32_t win_lo)
{
    *h = (kve_head_hint){.valid = 1, .seed = j->seed, .seq_id = j->seq_id, .seq_seed = seq_seed,
                         .prompt = j->prompt, .window = j->window, .budget = j->budget,
                         .n_slots = j->n_slots, .n_valid = x->n_valid, .n_gen = x->n_gen,
                         .win_lo = win_lo};
}

/* The passes until the plan is exact (the window verified, keys hashed
 * when some must be chosen), then the choice: 1 done, 0 when only the
 * scalar reference can answer, -1 when the job's fused checks cannot run
 * (its first pass would not hash: nothing written). *x: the last pass's
 * counts. */
static int kve_simd_passes(kve_head_job *j, const kve_simd_ws *w, const kve_hconst *hc,
                           kve_counts c, uint32_t *win_lo, kve_plan *p, kve_counts *x)
{
    const uint32_t n = j->n_slots, W = j->window;
    const int32_t prompt = (int32_t)j->prompt;
    uint32_t check = j->check;
    int window_known = 0;
    for (;;) {
        kve_counts est = c;
        est.n_cand = c.n_gen - kve_min_u32(W, c.n_gen);
        kve_plan pe = kve_plan_of(j, &est);
        int hashed = 0, top = 1;
        uint64_t T = 0;
        uint32_t ns;
        if (pe.n_valid <= j->budget || pe.nk == 0) { /* probably no key is needed */
            if (check)
                return -1;
            ns = kve_isa_cand_slots(j->slot_pos, n, prompt, *win_lo, NULL, 0, 0, w->surv, n, x);
        } else {
            kve_simd_pick(&pe, &top, &T);
            kve_scan_facts f;
            kve_scan s = {j->slot_pos, n, prompt, *win_lo, hc, T, top, w->khi, w->surv, w->shi,
                          check, check & KVE_JOB_CHECK_DUPS ? j->check_map : NULL, &f};
            ns = kve_isa_scan(&s, x);
            hashed = 1;
#ifdef KVE_ISA_FUSED_CHECK
            if (check)
                j->check_result = kve_simd_verdict(&f, x->n_valid, n, s.map);
#endif
            check = 0;
        }
        if (!window_known && !kve_window_ok(x, W)) {
            *win_lo = kve_window_exact(j->slot_pos, n, prompt, W, w->tmp);
            window_known = 1;
            c = *x;
            continue;
        }
        window_known = 1;
        *p = kve_plan_of(j, x);
        if (p->n_valid <= j->budget)
            return 1;
        if (p->nk == 0) { /* over budget: every candidate goes */
            if (hashed)
                ns = kve_isa_cand_slots(j->slot_pos, n, prompt, *win_lo, NULL, 0, 0, w->surv, n, NULL);
            j->n_evicted = kve_min_u32(ns, p->e);
            memcpy(j->evicted, w->surv, (size_t)j->n_evicted * 4);
            return 1;
        }
        if (!hashed) {
            c = *x; /* the window is right; now hash */
            continue;
        }
        return kve_simd_select(j, p, w, *win_lo, top, T, ns);
    }
}

static void kve_simd_evict_head(kve_head_job *j, void *scratch)
{
    j->check_result = KVE_JOB_CLEAN;
#ifndef KVE_ISA_FUSED_CHECK
    if (j->check) { /* this ISA's scan checks nothing */
        j->check_result = KVE_JOB_UNCHECKED;
        return;
    }
#endif
    if (j->prompt > 0x7fffffffu || j->scores) {
        if (j->check) { /* neither path below checks */
            j->check_result = KVE_JOB_UNCHECKED;
            return;
        }
        if (j->prompt > 0x7fffffffu) /* every position is prompt: nothing to hash */
            kve_cpu_kernels_scalar.evict_head(j, scratch);
        else /* one branch per head: the random path below is unchanged */
            kve_simd_scored_head(j, scratch);
        return;
    }
    kve_simd_ws w;
    kve_simd_ws_layout(j->n_slots, (char *)KVE_ALIGN_UP((uintptr_t)scratch, 64), &w);
    kve_head_hint local, *h = j->hint;
    if (!h) {
        memset(&local, 0, sizeof local);
        h = &local;
    }
    kve_counts c, x;
    uint32_t win_lo;
    uint64_t seq_seed = kve_simd_start(j, h, &c, &win_lo);
    kve_hconst hc = kve_hconst_make(seq_seed, j->key_flags, j->layer, j->head, j->round);
    kve_plan p;
    j->n_evicted = 0;
    int r = kve_simd_passes(j, &w, &hc, c, &win_lo, &p, &x);
    if (r < 0) {
        j->check_result = KVE_JOB_UNCHECKED;
        return;
    }
    if (r == 0) { /* equal high halves across the boundary */
        kve_cpu_kernels_scalar.evict_head(j, scratch);
        return;
    }
    kve_simd_finish(j, &p, &w);
    kve_hint_store(h, j, seq_seed, &x, win_lo);
}

#endif
