/*
 * evict_simd_scored.h — one head's KVE_SCORED eviction for the SIMD kernels
 * (docs/SPEC.md "Scored selection"), included by evict_simd.h after the
 * pieces it shares with the random path (the ISA's passes, the window's
 * guess and check, the plan, the outputs) and compiled with each ISA's file.
 */
#ifndef KVE_EVICT_SIMD_SCORED_H
#define KVE_EVICT_SIMD_SCORED_H

KVE_DEFINE_SELECT(kve_simd_select_u64, uint64_t, KVE_U32_LESS)

/* The k-th smallest (0-based) of n distinct keys a[0..n), which it
 * overwrites, like tmp[n]: 8-bit radix passes from the top, each keeping
 * the boundary bin (compacted without branches: scores are in no order, so
 * a comparison-based select would mispredict every other step), then a
 * quickselect of the few left. */
static uint64_t kve_simd_radix_select(uint64_t *a, uint32_t n, uint32_t k, uint64_t *tmp)
{
    uint64_t *src = a, *dst = tmp;
    for (int shift = 56; shift >= 0 && n > 48; shift -= 8) {
        uint32_t h[256];
        memset(h, 0, sizeof h);
        for (uint32_t i = 0; i < n; i++)
            h[(src[i] >> shift) & 255]++;
        uint32_t b = 0, below = 0;
        while (below + h[b] <= k)
            below += h[b++];
        if (h[b] == n)
            continue; /* every key shares this digit */
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++) {
            dst[m] = src[i];
            m += ((src[i] >> shift) & 255) == b;
        }
        k -= below;
        n = m;
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    return kve_simd_select_u64(src, n, k);
}

/* KVE_SCORED (SPEC "Scored selection"): keys come from the scores, whose
 * order is arbitrary, so the uniform-key plan above does not apply. The
 * window (guessed, verified), the candidate slots and the outputs use the
 * ISA's passes; the scored keys are distinct (their low half is the
 * position), so the evicted candidates are exactly those whose key is at
 * least the nk-th smallest one's, found by a radix select. */
static void kve_simd_scored_head(kve_head_job *j, void *scratch)
{
    const uint32_t n = j->n_slots, W = j->window;
    const int32_t prompt = (int32_t)j->prompt;
    kve_simd_ws w;
    kve_simd_ws_layout(n, (char *)KVE_ALIGN_UP((uintptr_t)scratch, 64), &w);
    kve_counts c, x;
    int32_t max_pos;
    kve_isa_count(j->slot_pos, n, prompt, &c, &max_pos);
    uint32_t win_lo = kve_window_guess(c.n_gen, W, max_pos, prompt);
    uint32_t ns = kve_isa_cand_slots(j->slot_pos, n, prompt, win_lo, NULL, 0, 0, w.surv, n, &x);
    if (!kve_window_ok(&x, W)) {
        win_lo = kve_window_exact(j->slot_pos, n, prompt, W, w.tmp);
        ns = kve_isa_cand_slots(j->slot_pos, n, prompt, win_lo, NULL, 0, 0, w.surv, n, &x);
    }
    kve_plan p = kve_plan_of(j, &x);
    j->n_evicted = 0;
    if (p.n_valid > j->budget && p.nk == 0) { /* over budget: every candidate goes */
        j->n_evicted = kve_min_u32(ns, p.e);
        memcpy(j->evicted, w.surv, (size_t)j->n_evicted * 4);
    } else if (p.n_valid > j->budget && p.e > 0) {
        for (uint32_t i = 0; i < ns; i++) {
            int32_t t = w.surv[i];
            w.keys[t] = w.skeys[i] = kve_score_key(kve_score_bits(j->scores[t]), (uint32_t)j->slot_pos[t]);
        }
        /* surv is read: its bytes (and shi's) hold ns keys */
        uint64_t t = kve_simd_radix_select(w.skeys, ns, p.nk, (uint64_t *)(void *)w.surv);
        j->n_evicted = kve_isa_cand_slots(j->slot_pos, n, prompt, win_lo, w.keys, t, UINT64_MAX,
                                          j->evicted, p.e, NULL);
    }
    kve_simd_finish(j, &p, &w);
}

#endif
