/*
 * score_window.c — a table's candidates for the CPU's kve_score, apart from
 * the streaming pass over their keys (score_cpu.c). The bound is the one of
 * common/score_body.h's kve_score_bound_seq (the (W+1)-th largest
 * generated position, plus one; P when W or fewer are generated), found by
 * one pass over the table that gathers the generated positions, then a
 * radix select over those alone whose digits fit their range (2048 bins a
 * level: one level when the generated positions span fewer), so a table
 * costs about two passes instead of four full ones.
 */
#include <string.h>

#include "kve_cpu_kernels.h"

/* Bins of a level of the select: a range this narrow (a head's last 2048
 * positions) is done in one pass, each bin one position. */
#define KVE_WINDOW_BINS 2048u

/* The @p k-th largest (1-based, with multiplicity) of v[0..n), all in
 * [lo, hi]; reads v, and narrows into tmp (n values). */
static uint32_t kve_kth_largest(const uint32_t *v, uint32_t n, uint32_t k, uint32_t lo, uint32_t hi,
                                uint32_t *tmp)
{
    uint32_t hist[KVE_WINDOW_BINS];
    for (;;) {
        if (lo == hi)
            return hi;
        uint32_t range = hi - lo, sh = 0;
        while ((range >> sh) >= KVE_WINDOW_BINS)
            sh++;
        memset(hist, 0, ((range >> sh) + 1) * sizeof *hist);
        for (uint32_t i = 0; i < n; i++)
            hist[(hi - v[i]) >> sh]++; /* bin 0 holds the largest */
        uint32_t b = 0;
        while (hist[b] < k)
            k -= hist[b++];
        if (sh == 0)
            return hi - b;
        /* the bin's values: hi - (b << sh) down to hi - ((b + 1) << sh) + 1 */
        uint32_t m = 0, nlo = UINT32_MAX, nhi = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t x = v[i];
            tmp[m] = x;
            int in = ((hi - x) >> sh) == b;
            m += (uint32_t)in;
            nlo = in && x < nlo ? x : nlo;
            nhi = in && x > nhi ? x : nhi;
        }
        v = tmp;
        n = m;
        lo = nlo;
        hi = nhi;
    }
}

uint32_t kve_score_window_bound(const uint32_t *gen_pos, uint32_t n, uint32_t window, uint32_t lo,
                                uint32_t hi, uint32_t *tmp)
{
    return kve_kth_largest(gen_pos, n, window + 1, lo, hi, tmp) + 1;
}

uint32_t kve_score_window_cands(const int32_t *tab, const kve_score_row *r, uint32_t *gen_pos,
                                uint32_t *cand, uint32_t *tmp)
{
    uint32_t p = r->prompt_len, gen = 0, lo = UINT32_MAX, hi = 0;
    for (uint32_t s = 0; s < r->n_slots; s++) {
        int32_t pos = tab[s];
        uint32_t u = (uint32_t)pos;
        int g = pos >= 0 && u >= p;
        gen_pos[gen] = u;
        cand[gen] = s;
        gen += (uint32_t)g;
        lo = g && u < lo ? u : lo;
        hi = g && u > hi ? u : hi;
    }
    if (gen <= r->window)
        return 0;
    uint32_t x = kve_score_window_bound(gen_pos, gen, r->window, lo, hi, tmp);
    uint32_t n = 0;
    for (uint32_t i = 0; i < gen; i++) { /* in place: n <= i */
        cand[n] = cand[i];
        n += (uint32_t)(gen_pos[i] < x);
    }
    return n;
}
