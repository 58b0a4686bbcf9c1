/*
 * evict_body.h — docs/SPEC.md "One head's eviction" for one block, written
 * once for CUDA, HIP and the host emulator (kve_thread.h).
 *
 * One block evicts one head at a time (grid-stride over the batch, so one
 * launch covers a whole batch). Nothing that decides the output depends on
 * the order threads run in: counts and histograms use atomics (sums are
 * order-free), thresholds come from a block-wide radix select over exact
 * values, and outputs are placed by a block-wide prefix scan. So results
 * are the same for every block size, warp width and grid size.
 *
 * Per head:
 *   A  load slot_pos, count valid/generated, check values >= -1 and (unless
 *      trusted) duplicates through a hash table of positions
 *   B  window threshold: radix select over generated positions
 *   C  keys of the candidates, then the (key, pos) threshold of the n_keep
 *      smallest, by radix select over the 96-bit pair
 *   D  outputs in ascending slot order via one exclusive scan
 */
#ifndef KVE_EVICT_BODY_H
#define KVE_EVICT_BODY_H

#include "kve_thread.h"
#include "kve_key.h"
#include "kvevict.h"

/* The public structs as given (device pointers), plus what the launch plan
 * adds (kve_evict_args_make, kve_launch.h). */
typedef struct kve_evict_args {
    kve_batch b;
    kve_evict_out o;
    uint64_t heads; /* n_seqs x n_layers x n_heads */
    /* Per-block scratch of kve_evict_scratch_bytes(n_slots): the workspace at
     * scratch + block * scratch_stride, or dynamic shared memory when NULL. */
    unsigned char *scratch;
    size_t scratch_stride;
    uint64_t *errors; /* [KVE_DEV_ERR_KINDS] */
} kve_evict_args;

/* Fixed shared memory of the eviction kernel. */
typedef struct kve_evict_smem {
    uint64_t wsum[KVE_MAX_WARPS];
    uint32_t hist[256];
    uint32_t n_valid, n_gen, gen_min, gen_max;
    uint32_t bad_slot, dup_pos; /* smallest offender, all ones when none */
    uint32_t nan_slot;          /* KVE_SCORED: smallest candidate slot with a NaN score */
    uint32_t sel_bin, sel_below, sel_count; /* the boundary bin of a select pass */
} kve_evict_smem;

/* Scratch per block: keys u64[n] (the duplicate table, u32[2n], shares
 * those bytes before keys exist), then a copy of the slot table i32[n]. */
KVE_HD_FN size_t kve_evict_scratch_bytes(uint32_t n_slots) { return (size_t)n_slots * 12u; }

#define KVE_NONE32 0xffffffffu
#define KVE_SEL_DIGITS 12u /* 8-bit digits of the 96-bit (key, pos) pair */

/* A 96-bit value: hi = key, lo = pos (lexicographic order). */
typedef struct kve_u96 {
    uint64_t hi;
    uint32_t lo;
} kve_u96;

KVE_FN int kve_u96_le(uint64_t hi, uint32_t lo, kve_u96 t)
{
    return hi < t.hi || (hi == t.hi && lo <= t.lo);
}

KVE_FN uint32_t kve_digit(uint64_t hi, uint32_t lo, uint32_t d)
{
    return d < 8 ? (uint32_t)(hi >> (56 - 8 * d)) & 0xffu : (lo >> (24 - 8 * (d - 8))) & 0xffu;
}

/* The head being evicted, as every phase sees it. */
typedef struct kve_head {
    const int32_t *pos; /* scratch copy of slot_pos */
    const uint64_t *keys;
    uint32_t n, prompt;
    int has_cand;     /* some generated slot is outside the window */
    uint32_t win_thr; /* candidates: prompt <= pos <= win_thr */
    int keys_ready;   /* keys[] hold the candidates' keys */
} kve_head;

enum { KVE_MEMBER_GENERATED, KVE_MEMBER_CANDIDATE };

/* Whether slot t belongs to the selection, and its value. */
KVE_FN int kve_member(const kve_head *hd, int kind, uint32_t t, uint64_t *hi, uint32_t *lo)
{
    int32_t v = hd->pos[t];
    if (v < 0 || (uint32_t)v < hd->prompt)
        return 0;
    *lo = (uint32_t)v;
    *hi = 0;
    if (kind == KVE_MEMBER_GENERATED)
        return 1;
    if (!hd->has_cand || (uint32_t)v > hd->win_thr)
        return 0;
    *hi = hd->keys[t];
    return 1;
}

/*
 * The threshold thr such that exactly @p need members are <= thr (values are
 * distinct; 1 <= need < members). Digits before @p start are already known:
 * every member equals @p thr on them. One histogram pass per 8-bit digit,
 * stopping as soon as the boundary bin is kept whole; digits below the last
 * one decided are filled with ones.
 */
KVE_FN kve_u96 kve_block_select(kve_tc *tc, kve_evict_smem *sm, const kve_head *hd, int kind,
                                uint32_t start, uint32_t need, kve_u96 thr)
{
    uint64_t mhi = start >= 8 ? ~0ull : start ? ~0ull << (64 - 8 * start) : 0;
    uint32_t mlo = start <= 8 ? 0 : ~0u << (32 - 8 * (start - 8));
    thr.hi &= mhi;
    thr.lo &= mlo;
    uint32_t bpt = (256 + tc->nt - 1) / tc->nt, b0 = tc->tid * bpt;
    for (uint32_t d = start; d < KVE_SEL_DIGITS; d++) {
        for (uint32_t b = tc->tid; b < 256; b += tc->nt)
            sm->hist[b] = 0;
        kve_sync(tc);
        for (uint32_t t = tc->tid; t < hd->n; t += tc->nt) {
            uint64_t hi;
            uint32_t lo;
            if (kve_member(hd, kind, t, &hi, &lo) && (hi & mhi) == thr.hi && (lo & mlo) == thr.lo)
                kve_atomic_add_u32(&sm->hist[kve_digit(hi, lo, d)], 1);
        }
        kve_sync(tc);
        uint32_t local = 0;
        for (uint32_t b = b0; b < b0 + bpt && b < 256; b++)
            local += sm->hist[b];
        uint64_t total;
        uint32_t below = (uint32_t)kve_block_exscan(tc, sm->wsum, local, &total);
        for (uint32_t b = b0; b < b0 + bpt && b < 256; b++) {
            uint32_t h = sm->hist[b];
            if (below < need && need <= below + h) {
                sm->sel_bin = b;
                sm->sel_below = below;
                sm->sel_count = h;
            }
            below += h;
        }
        kve_sync(tc);
        /* sel_* are rewritten only after the next pass's barriers. */
        uint32_t bin = sm->sel_bin, count = sm->sel_count;
        need -= sm->sel_below;
        if (d < 8) {
            thr.hi |= (uint64_t)bin << (56 - 8 * d);
            mhi |= 0xffull << (56 - 8 * d);
        } else {
            thr.lo |= bin << (24 - 8 * (d - 8));
            mlo |= 0xffu << (24 - 8 * (d - 8));
        }
        if (need == count)
            break;
    }
    thr.hi |= ~mhi;
    thr.lo |= ~mlo;
    return thr;
}

/* Insert position v into the open-addressing table; 1 if already there. */
KVE_FN int kve_table_insert(uint32_t *table, uint32_t cap, uint32_t v)
{
    uint32_t i = (uint32_t)(((uint64_t)(v * 0x9e3779b1u) * cap) >> 32);
    for (;;) {
        uint32_t old = kve_atomic_cas_u32(&table[i], KVE_NONE32, v);
        if (old == KVE_NONE32)
            return 0;
        if (old == v)
            return 1;
        i = i + 1 == cap ? 0 : i + 1;
    }
}

/* 0: empty, 1: kept, 2: evicted. */
KVE_FN int kve_slot_fate(const kve_head *hd, uint32_t t, uint32_t n_keep, kve_u96 thr)
{
    int32_t v = hd->pos[t];
    if (v < 0)
        return 0;
    uint64_t hi;
    uint32_t lo;
    if (!kve_member(hd, KVE_MEMBER_CANDIDATE, t, &hi, &lo))
        return 1;
    if (n_keep == 0)
        return 2;
    return !hd->keys_ready || kve_u96_le(hi, lo, thr) ? 1 : 2;
}

/* Phase D: canonical outputs of head @p h. Each thread owns a run of
 * consecutive slots; one scan of (evicted | kept << 32) places them. The
 * slots are staged in scratch (evicted, then kept) and written out by
 * consecutive threads to consecutive entries, so the global stores
 * coalesce. Each thread's fates go into its own entries of the position
 * copy @p fate (no one else reads them), and once the scan's barriers are
 * passed nobody reads the keys again: their bytes (8 per slot) become the
 * stage (4 per slot). */
KVE_FN void kve_evict_write(kve_tc *tc, kve_evict_smem *sm, const kve_evict_args *a, uint64_t h,
                            const kve_head *hd, int32_t *fate, int32_t *stage, uint32_t n_keep,
                            kve_u96 thr, int over_budget)
{
    uint32_t n = hd->n, per = (n + tc->nt - 1) / tc->nt;
    uint32_t t0 = tc->tid * per < n ? tc->tid * per : n, t1 = t0 + per < n ? t0 + per : n;
    uint32_t ne = 0, nk = 0;
    /* SPEC §11: the running digest's elements of the evicted tokens, summed
     * (wrapping, so order-free) when asked for, while the positions are
     * still there; a->o is uniform, so is the second scan's barrier. */
    const kve_batch *b = &a->b;
    const kve_seq *seq = &b->seqs[h / ((uint64_t)b->n_layers * b->n_heads)];
    int want_digest = a->o.round_digest || a->o.run_digest;
    uint64_t dseed = want_digest ? kve_seq_seed(b->seed ^ KVE_RUN_DIGEST_TWEAK, seq->seq_id) : 0;
    uint32_t dflags = b->flags & KVE_KEY_FLAGS & ~(uint32_t)KVE_PERSISTENT;
    uint32_t layer = b->layer_offset + (uint32_t)((h / b->n_heads) % b->n_layers);
    uint32_t head = b->head_offset + (uint32_t)(h % b->n_heads);
    uint64_t dsum = 0;
    for (uint32_t t = t0; t < t1; t++) {
        int f = kve_slot_fate(hd, t, n_keep, thr);
        if (f == 2 && want_digest)
            dsum += kve_key(dseed, dflags, layer, head, (uint32_t)hd->pos[t], seq->round);
        fate[t] = f;
        ne += f == 2;
        nk += f == 1;
    }
    uint64_t total, at = kve_block_exscan(tc, sm->wsum, ne | (uint64_t)nk << 32, &total);
    if (want_digest) {
        uint64_t dtotal;
        kve_block_exscan(tc, sm->wsum, dsum, &dtotal);
        if (tc->tid == 0 && a->o.round_digest)
            a->o.round_digest[h] = dtotal;
        if (tc->tid == 0 && a->o.run_digest)
            kve_atomic_add_u64(&a->o.run_digest[h / ((uint64_t)b->n_layers * b->n_heads)],
                               (a->o.run_digest_weight ? a->o.run_digest_weight : 1) * dtotal);
    }
    uint32_t tot_ev = (uint32_t)total, tot_kp = (uint32_t)(total >> 32);
    uint32_t ei = (uint32_t)at, ki = tot_ev + (uint32_t)(at >> 32);
    for (uint32_t t = t0; t < t1; t++) {
        if (fate[t] == 2)
            stage[ei++] = (int32_t)t;
        else if (fate[t] == 1)
            stage[ki++] = (int32_t)t;
    }
    kve_sync(tc);
    /* A head evicts at most n_slots - budget slots (SPEC); the bound only
     * matters for a trusted table that broke its promise. */
    uint32_t cap = a->b.n_slots > a->b.budget ? a->b.n_slots - a->b.budget : 0;
    uint32_t n_ev = tot_ev < cap ? tot_ev : cap;
    int32_t *ev = a->o.evicted + h * a->o.evicted_stride;
    for (uint32_t i = tc->tid; i < n_ev; i += tc->nt)
        ev[i] = stage[i];
    if (a->o.kept) {
        int32_t *kp = a->o.kept + h * a->o.kept_stride;
        for (uint32_t i = tc->tid; i < tot_kp; i += tc->nt)
            kp[i] = stage[tot_ev + i];
    }
    if (tc->tid == 0) {
        a->o.n_evicted[h] = n_ev;
        a->o.n_kept[h] = tot_kp;
        if (a->o.head_flags)
            a->o.head_flags[h] = over_budget ? KVE_HEAD_OVER_BUDGET : 0;
    }
}

/* What one thread has seen of a head's slot table in phase A. */
typedef struct kve_load_acc {
    uint32_t valid, gen, gmin, gmax, bad, dup;
} kve_load_acc;

/* Phase A for slot t holding position v: @p acc updated, by value (through
 * a pointer, hipcc keeps the accumulator in per-lane scratch memory). */
KVE_FN kve_load_acc kve_load_slot(kve_load_acc acc, int32_t *KVE_RESTRICT pos, uint32_t *table,
                                  uint32_t cap, int check_dups, uint32_t prompt, uint32_t t,
                                  int32_t v)
{
    pos[t] = v;
    if (v < -1) {
        acc.bad = t < acc.bad ? t : acc.bad;
        return acc;
    }
    if (v < 0)
        return acc;
    acc.valid++;
    if ((uint32_t)v >= prompt) {
        acc.gen++;
        acc.gmin = (uint32_t)v < acc.gmin ? (uint32_t)v : acc.gmin;
        acc.gmax = (uint32_t)v > acc.gmax ? (uint32_t)v : acc.gmax;
    }
    if (check_dups && kve_table_insert(table, cap, (uint32_t)v))
        acc.dup = (uint32_t)v < acc.dup ? (uint32_t)v : acc.dup;
    return acc;
}

/* Phase A; returns 0 when the head's table is invalid (error raised).
 * The slot table is read 16 bytes per thread (consecutive threads read
 * consecutive groups of 4) when the row is 16-byte aligned, so each thread
 * has four independent loads in flight; the tail and unaligned rows go one
 * slot at a time. */
KVE_FN int kve_evict_load(kve_tc *tc, kve_evict_smem *sm, const kve_evict_args *a, uint64_t h,
                          unsigned char *scratch, int32_t *KVE_RESTRICT pos, uint32_t prompt)
{
    uint32_t n = a->b.n_slots, cap = 2 * n;
    int check_dups = !(a->b.flags & KVE_TRUSTED_SLOTS);
    uint32_t *table = (uint32_t *)scratch;
    if (tc->tid == 0) {
        sm->n_valid = sm->n_gen = 0;
        sm->gen_min = KVE_NONE32;
        sm->gen_max = 0;
        sm->bad_slot = sm->dup_pos = sm->nan_slot = KVE_NONE32;
    }
    if (check_dups)
        for (uint32_t i = tc->tid; i < cap; i += tc->nt)
            table[i] = KVE_NONE32;
    kve_sync(tc);
    const int32_t *KVE_RESTRICT row = a->b.slot_pos + h * a->b.slot_pos_stride;
    kve_load_acc acc = {0, 0, KVE_NONE32, 0, KVE_NONE32, KVE_NONE32};
    uint32_t groups = (uintptr_t)row % 16 == 0 ? n / 4 : 0;
    for (uint32_t g = tc->tid; g < groups; g += tc->nt) {
        int32_t v[4];
        kve_load_i32x4(row + 4 * (size_t)g, v);
        /* Written out: a loop here (unrolled or not) costs nvcc spills under
         * the kernel's 40-register cap (docs/GPU.md "Registers"). */
        acc = kve_load_slot(acc, pos, table, cap, check_dups, prompt, 4 * g + 0, v[0]);
        acc = kve_load_slot(acc, pos, table, cap, check_dups, prompt, 4 * g + 1, v[1]);
        acc = kve_load_slot(acc, pos, table, cap, check_dups, prompt, 4 * g + 2, v[2]);
        acc = kve_load_slot(acc, pos, table, cap, check_dups, prompt, 4 * g + 3, v[3]);
    }
    for (uint32_t t = 4 * groups + tc->tid; t < n; t += tc->nt)
        acc = kve_load_slot(acc, pos, table, cap, check_dups, prompt, t, row[t]);
    kve_atomic_add_u32(&sm->n_valid, acc.valid);
    kve_atomic_add_u32(&sm->n_gen, acc.gen);
    kve_atomic_min_u32(&sm->gen_min, acc.gmin);
    kve_atomic_max_u32(&sm->gen_max, acc.gmax);
    kve_atomic_min_u32(&sm->bad_slot, acc.bad);
    kve_atomic_min_u32(&sm->dup_pos, acc.dup);
    kve_sync(tc);
    if (sm->bad_slot == KVE_NONE32 && sm->dup_pos == KVE_NONE32)
        return 1;
    if (tc->tid == 0) {
        if (sm->bad_slot != KVE_NONE32)
            kve_raise(a->errors, KVE_DEV_ERR_SLOT_RANGE, h, sm->bad_slot);
        if (sm->dup_pos != KVE_NONE32)
            kve_raise(a->errors, KVE_DEV_ERR_DUPLICATE, h, sm->dup_pos);
    }
    return 0;
}

/* The first 8-bit digit (of the 12) where a and b differ; 12 when equal. */
KVE_FN uint32_t kve_first_diff_digit(uint32_t a, uint32_t b)
{
    uint32_t d = 8;
    while (d < KVE_SEL_DIGITS && kve_digit(0, a, d) == kve_digit(0, b, d))
        d++;
    return d;
}

/* Phase C with KVE_SCORED (docs/SPEC.md "Scored selection"): each
 * candidate's key from its score (distinct keys, ascending = descending
 * score, then ascending position), and the device's NaN check, reported
 * through the error records. A NaN is raised and then ranked as -inf (the
 * first evicted, by position among equals), so the head's eviction still
 * completes: in a cache state the round that follows finds r evicted slots
 * from the candidates, never a protected token, and the state stays
 * whole. */
KVE_FN void kve_scored_keys(kve_tc *tc, kve_evict_smem *sm, const kve_evict_args *a, uint64_t h,
                           kve_head *hd, uint64_t *keys)
{
    const float *row = a->b.scores + h * a->b.scores_stride;
    uint32_t nan_slot = KVE_NONE32;
    for (uint32_t t = tc->tid; t < hd->n; t += tc->nt) {
        uint64_t hi;
        uint32_t lo;
        if (kve_member(hd, KVE_MEMBER_GENERATED, t, &hi, &lo) && lo <= hd->win_thr) {
            uint32_t u = kve_score_bits(row[t]);
            if (kve_score_is_nan(u)) {
                nan_slot = t < nan_slot ? t : nan_slot;
                u = 0xff800000u; /* -inf */
            }
            keys[t] = kve_score_key(u, lo);
        }
    }
    /* Its own field: phase A's last reads of bad_slot may still be running. */
    kve_atomic_min_u32(&sm->nan_slot, nan_slot);
    kve_sync(tc);
    if (sm->nan_slot != KVE_NONE32 && tc->tid == 0)
        kve_raise(a->errors, KVE_DEV_ERR_SCORE_NAN, h, sm->nan_slot);
    hd->keys_ready = 1;
}

/* One head, phases A to D. */
KVE_FN void kve_evict_head(kve_tc *tc, kve_evict_smem *sm, const kve_evict_args *a, uint64_t h,
                           unsigned char *scratch)
{
    const kve_batch *b = &a->b;
    uint32_t n = b->n_slots;
    const kve_seq *seq = &b->seqs[h / ((uint64_t)b->n_layers * b->n_heads)];
    uint32_t prompt = seq->prompt_len;
    uint64_t *keys = (uint64_t *)scratch;
    int32_t *pos = (int32_t *)(scratch + (size_t)n * 8u);
    if (!kve_evict_load(tc, sm, a, h, scratch, pos, prompt))
        return;

    kve_head hd = {pos, keys, n, prompt, 0, 0, 0};
    uint32_t n_valid = sm->n_valid, n_gen = sm->n_gen, n_keep = 0;
    uint32_t gmin = sm->gen_min, gmax = sm->gen_max;
    int over_budget = 0;
    kve_u96 thr = {0, 0};
    if (n_valid > b->budget) {
        /* B: the window is the wc largest generated positions. */
        uint32_t wc = b->window < n_gen ? b->window : n_gen, n_cand = n_gen - wc;
        hd.has_cand = n_cand > 0;
        hd.win_thr = KVE_NONE32;
        if (n_cand > 0 && wc > 0) {
            kve_u96 known = {0, gmin};
            hd.win_thr = kve_block_select(tc, sm, &hd, KVE_MEMBER_GENERATED,
                                          kve_first_diff_digit(gmin, gmax), n_cand, known)
                             .lo;
        }
        uint32_t protect = (n_valid - n_gen) + wc;
        int64_t nk = (int64_t)b->budget - protect;
        n_keep = nk < 0 ? 0 : nk > n_cand ? n_cand : (uint32_t)nk;
        over_budget = protect > b->budget;
        /* C: keys, then the (key, pos) threshold, when the choice is real.
         * Scored: keys from the scores of every candidate (each is checked). */
        if ((b->flags & KVE_SCORED) && n_cand > 0) {
            kve_scored_keys(tc, sm, a, h, &hd, keys);
            kve_u96 none = {0, 0};
            if (n_keep > 0 && n_keep < n_cand)
                thr = kve_block_select(tc, sm, &hd, KVE_MEMBER_CANDIDATE, 0, n_keep, none);
        } else if (n_keep > 0 && n_keep < n_cand) {
            uint64_t seq_seed = kve_seq_seed(b->seed, seq->seq_id);
            uint32_t layer = b->layer_offset + (uint32_t)((h / b->n_heads) % b->n_layers);
            uint32_t head = b->head_offset + (uint32_t)(h % b->n_heads);
            uint32_t flags = b->flags & KVE_KEY_FLAGS;
            for (uint32_t t = tc->tid; t < n; t += tc->nt) {
                uint64_t hi;
                uint32_t lo;
                if (kve_member(&hd, KVE_MEMBER_GENERATED, t, &hi, &lo) && lo <= hd.win_thr)
                    keys[t] = kve_key(seq_seed, flags, layer, head, lo, seq->round);
            }
            kve_sync(tc);
            hd.keys_ready = 1;
            kve_u96 none = {0, 0};
            thr = kve_block_select(tc, sm, &hd, KVE_MEMBER_CANDIDATE, 0, n_keep, none);
        }
    }
    kve_evict_write(tc, sm, a, h, &hd, pos, (int32_t *)scratch, n_keep, thr, over_budget);
}

/* The kernel: every head of the batch, grid-stride over blocks.
 * @p dyn_smem is the block's dynamic shared memory (used when
 * a->scratch is NULL). */
KVE_FN void kve_evict_grid(kve_tc *tc, kve_evict_smem *sm, const kve_evict_args *a,
                           unsigned char *dyn_smem)
{
    unsigned char *scratch =
        a->scratch ? a->scratch + (size_t)tc->bid * a->scratch_stride : dyn_smem;
    for (uint64_t h = tc->bid; h < a->heads; h += tc->nb) {
        kve_evict_head(tc, sm, a, h, scratch);
        kve_sync(tc); /* shared memory is reused by the next head */
    }
}

#endif /* KVE_EVICT_BODY_H */
