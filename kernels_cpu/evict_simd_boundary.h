/*
 * evict_simd_boundary.h — step 3 of evict_simd.h's plan: the exact boundary
 * among the survivors' high halves (count(k >= t) == want), on the ISA's
 * count3_ge32, split32 and rank32. Included by evict_simd.h after those
 * declarations and compiled with each ISA's file.
 */
#ifndef KVE_EVICT_SIMD_BOUNDARY_H
#define KVE_EVICT_SIMD_BOUNDARY_H

/* A t with count(k >= t) == want, given count(k >= lo) == m and no k above
 * top; 0 when equal keys straddle the boundary (no such t). Each pass counts
 * at three thresholds: the interpolated one (keys are uniform) and one key
 * spacing either side, so the bracket usually closes in one or two passes;
 * later passes bisect, so it always ends. */
static int kve_simd_search(const uint32_t *k, uint32_t m, uint32_t want, uint64_t lo, uint64_t top,
                           uint64_t *out)
{
    uint32_t c_lo = m, c_hi = 0; /* counts at lo and above hi */
    uint64_t hi = top;           /* the answer lies in (lo, hi] */
    if (want == m) {
        *out = lo;
        return 1;
    }
    if (want == 0) {
        *out = top + 1;
        return top < UINT32_MAX;
    }
    for (int it = 0; it < 100 && lo < hi; it++) {
        uint64_t span = hi - lo, t[3];
        uint32_t t32[3];
        double keys = (double)(c_lo - c_hi + 1), x = (double)span;
        double mid = it < 6 ? x * ((c_lo - want + 0.5) / keys) : x / 2;
        double gap = it < 6 ? x / keys : 0;
        for (int j = 0; j < 3; j++) {
            double d = mid + (j - 1) * gap;
            uint64_t step = d >= x ? span : d < 1 ? 1 : (uint64_t)d;
            t[j] = lo + (step < 1 ? 1 : step);
            t32[j] = (uint32_t)t[j];
        }
        uint32_t c[3];
        kve_isa_count3_ge32(k, m, t32, c);
        for (int j = 0; j < 3; j++) { /* t[] ascending, c[] descending */
            if (c[j] == want) {
                *out = t[j];
                return 1;
            }
            if (c[j] > want && t[j] > lo) {
                lo = t[j];
                c_lo = c[j];
            }
        }
        for (int j = 2; j >= 0; j--)
            if (c[j] < want && t[j] - 1 < hi) {
                hi = t[j] - 1;
                c_hi = c[j];
            }
    }
    return 0;
}

/* The boundary of kve_simd_search in one pass when the interpolation is
 * close, as it is for uniform keys: the values in a bracket of about two
 * sigma either side of the interpolated boundary, ranked in registers.
 * 1: *out is t; 0: equal values at the boundary (no t); -1: the bracket
 * missed or held too many (the caller searches). */
static int kve_simd_bracket(const uint32_t *k, uint32_t m, uint32_t want, uint32_t lo, uint32_t top,
                            uint32_t *tmp, uint64_t *out)
{
    if (want == 0 || want >= m)
        return -1;
    /* In float, one division: the bracket's place need not be exact. */
    float x = (float)top - (float)lo + 1, inv = 1.0f / (float)(m + 1), gap = x * inv;
    float mid = gap * ((float)(m - want) + 0.5f);
    float half = gap * (2 * sqrtf((float)want * (float)(m - want) * inv) + 2);
    float da = mid - half, db = mid + half;
    uint32_t a = da <= 0 ? lo : da >= x - 1 ? top : lo + (uint32_t)da;
    uint32_t b = db >= x - 1 ? top : db <= 0 ? lo : lo + (uint32_t)db;
    uint32_t above, in = kve_isa_split32(k, m, a, b, tmp, &above);
    if (above > want || above + in < want || in > KVE_BRACKET)
        return -1;
    uint32_t r = want - above, t;
    if (r == 0) { /* count(k > b) == want */
        if (b == UINT32_MAX)
            return -1;
        *out = (uint64_t)b + 1;
        return 1;
    }
    if (r == in) { /* count(k >= a) == want */
        *out = a;
        return 1;
    }
    if (!kve_isa_rank32(tmp, in, r, &t))
        return 0;
    *out = t;
    return 1;
}

/* kve_cpu_kernels.boundary32: the bracket, else the search. */
static int kve_simd_boundary(const uint32_t *k, uint32_t m, uint32_t want, uint32_t lo, uint32_t top,
                             uint32_t *tmp, uint64_t *t)
{
    int got = kve_simd_bracket(k, m, want, lo, top, tmp, t);
    return got < 0 ? kve_simd_search(k, m, want, lo, top, t) : got;
}

#endif
