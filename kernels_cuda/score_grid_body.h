/*
 * score_grid_body.h — the scorers' device grid (CUDA, HIP, the host
 * emulator): shared memory, the window bound, the per-slot pass over a
 * tile, the tail that z-normalizes a (row, table), and the kernel body
 * kve_score_grid. It builds on common/score_body.h (the per-slot math, the
 * CPU's too).
 */
#ifndef KVE_SCORE_GRID_BODY_H
#define KVE_SCORE_GRID_BODY_H

#include "kve_thread.h"
#include "score_body.h"

/* ---- the device grid --------------------------------------------------------- *
 *
 * One launch per call. A work item is (row, KV head h, tile of nt slots),
 * one block each, grid-stride. The block computes its row's coefficients
 * for the query heads of h (shared memory) and its table's window bound;
 * then warp w takes slots w * ws .. of the tile, a lane one slot: a
 * candidate's key is found through the page table and its bytes read once,
 * as 16-byte vectors when the cache allows it (kve_score_args.vec), every
 * query head of h scored from that read, up to KVE_SCORE_HEADS_PER_PASS at
 * a time. The per-slot math is the CPU's (same float operations in the same
 * order), so raw scores equal the scalar ISA's bit for bit. They go to the
 * scratch raw[row][table][query head][slot]. The block that finishes a
 * (row, table) last (a counter per (row, table), behind a fence) runs the
 * tail: per query head the mean, then the deviation from it, over the
 * candidates (double, each a tree in shared memory: the same order whichever
 * block it is), then per slot the max over the table's query heads' z
 * (computed in double), times the weight, and the
 * counter back to 0 for the next call.
 */

/* Query heads one read of a key scores (accumulators a thread keeps); a
 * larger group reads the key again (from the caches) per pass. */
#define KVE_SCORE_HEADS_PER_PASS 8u

/* Dynamic shared memory of a block of @p nt threads: coefficients of a KV
 * head's @p group query heads, phase factors (the coefficients' input) or
 * the tail's per-thread sums, histogram, per-head mean and scale, flag. */
KVE_HD_FN size_t kve_score_smem_bytes(uint32_t group, uint32_t nq, uint32_t nf, uint32_t nt)
{
    size_t phase = (size_t)nf * 16, sums = (size_t)nt * 16;
    return KVE_ALIGN_UP((size_t)group * nf * 12, 16) + KVE_ALIGN_UP(phase > sums ? phase : sums, 16) +
           256 * 4 + (size_t)nq * 16 + 16;
}

typedef struct kve_score_smem {
    float *coef;   /* [group][nf][3] */
    double *phase; /* [nf][2], before the coefficients */
    double *sums;  /* [nt][2], in the tail (the phase's place) */
    uint32_t *hist;
    double *stats; /* [nq][2]: mean, 1/std */
    uint32_t *last; /* this block runs the tail */
} kve_score_smem;

KVE_FN kve_score_smem kve_score_smem_at(unsigned char *p, uint32_t group, uint32_t nq, uint32_t nf,
                                        uint32_t nt)
{
    kve_score_smem s;
    size_t phase = (size_t)nf * 16, sums = (size_t)nt * 16;
    s.coef = (float *)p;
    p += KVE_ALIGN_UP((size_t)group * nf * 12, 16);
    s.phase = (double *)p;
    s.sums = (double *)p;
    p += KVE_ALIGN_UP(phase > sums ? phase : sums, 16);
    s.hist = (uint32_t *)p;
    p += 256 * 4;
    s.stats = (double *)p;
    p += (size_t)nq * 16;
    s.last = (uint32_t *)p;
    return s;
}

/* Histogram of byte 3 - @p pass of the generated positions of @p tab that
 * match @p prefix above it, every thread of the block calling. */
KVE_FN void kve_score_hist_block(kve_tc *tc, const kve_score_smem *sm, const int32_t *tab,
                                 const kve_score_row *r, uint32_t pass, uint32_t prefix)
{
    kve_sync(tc);
    for (uint32_t b = tc->tid; b < 256; b += tc->nt)
        sm->hist[b] = 0;
    kve_sync(tc);
    for (uint32_t s = tc->tid; s < r->n_slots; s += tc->nt) {
        int32_t pos = tab[s];
        if (pos >= 0 && (uint32_t)pos >= r->prompt_len &&
            kve_score_in_prefix((uint32_t)pos, pass, prefix))
            kve_atomic_add_u32(&sm->hist[((uint32_t)pos >> (8 * (3 - pass))) & 255u], 1);
    }
    kve_sync(tc);
}

/* The window's bound of a table (kve_score_candidate's x), every thread of
 * the block calling. */
KVE_FN uint32_t kve_score_bound_block(kve_tc *tc, const kve_score_smem *sm, const int32_t *tab,
                                      const kve_score_row *r)
{
    kve_score_hist_block(tc, sm, tab, r, 0, 0);
    uint32_t gen = 0;
    for (uint32_t b = 0; b < 256; b++)
        gen += sm->hist[b];
    if (gen <= r->window)
        return r->prompt_len;
    uint32_t k = r->window + 1, prefix = 0;
    for (uint32_t p = 0; p < 4; p++) {
        if (p > 0)
            kve_score_hist_block(tc, sm, tab, r, p, prefix);
        kve_score_digit(sm->hist, p, &prefix, &k);
    }
    return prefix + 1;
}

/* Elements of a key at @p p as floats into out[0..n), n returned: one
 * 16-byte vector (8 halves or 4 floats) when @p vec, else one element. */
KVE_FN uint32_t kve_score_load(const unsigned char *p, uint32_t t, uint32_t vec, float out[8])
{
    if (!vec) {
        out[0] = kve_score_elem(p, t, 0);
        return 1;
    }
    kve_vec16 v = *(const kve_vec16 *)p;
    KVE_UNROLL
    for (uint32_t i = 0; i < 4; i++) {
        uint32_t w = kve_vec16_word(v, i);
        if (t == KVE_DTYPE_F32) {
            out[i] = kve_score_f32(w);
        } else {
            out[2 * i] = kve_score_half(w & 0xffffu, t);
            out[2 * i + 1] = kve_score_half(w >> 16, t);
        }
    }
    return t == KVE_DTYPE_F32 ? 4 : 8;
}

/* Raw TriAttention scores of one key for @p n (<= KVE_SCORE_HEADS_PER_PASS)
 * query heads whose coefficients start at @p coef (3 * nf each, per f
 * (a_re, a_im, b)): acc[j] = sum over f ascending of a_re kr + a_im ki +
 * b |k_f|, the pairs (key[f], key[f + nf]) read once for all n heads. */
KVE_FN void kve_score_tri_pass(const float *coef, const unsigned char *key, uint32_t t,
                               uint32_t nf, uint32_t vec, uint32_t n,
                               float acc[KVE_SCORE_HEADS_PER_PASS])
{
    size_t es = t == KVE_DTYPE_F32 ? 4 : 2;
    KVE_UNROLL
    for (uint32_t j = 0; j < KVE_SCORE_HEADS_PER_PASS; j++)
        acc[j] = 0.0f;
    for (uint32_t f0 = 0; f0 < nf;) {
        float kr[8], ki[8];
        uint32_t m = kve_score_load(key + f0 * es, t, vec, kr);
        kve_score_load(key + (f0 + nf) * es, t, vec, ki);
        KVE_UNROLL
        for (uint32_t e = 0; e < 8; e++) {
            if (e < m) {
                const float *c = coef + 3 * (size_t)(f0 + e);
                float mag = sqrtf(kr[e] * kr[e] + ki[e] * ki[e]);
                KVE_UNROLL
                for (uint32_t j = 0; j < KVE_SCORE_HEADS_PER_PASS; j++)
                    if (j < n) {
                        const float *cj = c + (size_t)j * 3 * nf;
                        acc[j] += cj[0] * kr[e] + cj[1] * ki[e] + cj[2] * mag;
                    }
            }
        }
        f0 += m;
    }
}

/* K-norm's raw score of one key: -||key||, elements ascending. */
KVE_FN float kve_score_knorm_key(const unsigned char *key, uint32_t t, uint32_t dim, uint32_t vec)
{
    size_t es = t == KVE_DTYPE_F32 ? 4 : 2;
    float acc = 0.0f;
    for (uint32_t e0 = 0; e0 < dim;) {
        float x[8];
        uint32_t m = kve_score_load(key + e0 * es, t, vec, x);
        KVE_UNROLL
        for (uint32_t e = 0; e < 8; e++)
            if (e < m)
                acc += x[e] * x[e];
        e0 += m;
    }
    return -sqrtf(acc);
}

/* Raw scores of slot @p s of row @p ri (row @p r), KV head @p h, for its
 * group's query heads, into the scratch; a key outside the cache scores 0
 * and raises KVE_DEV_ERR_SC_KEY. */
KVE_FN void kve_score_slot_dev(const kve_score_smem *sm, const kve_score_args *a, uint32_t ri,
                           const kve_score_row *r, uint32_t h, uint32_t s)
{
    const kve_score_desc *d = &a->d;
    uint32_t g = a->group, table = h / a->hpt, t = d->keys.dtype;
    int why = 0;
    const unsigned char *key = kve_score_locate_key(a, r, s, h, &why);
    if (!key)
        kve_raise(a->errors, KVE_DEV_ERR_SC_KEY, ri, s);
    float *raw = a->raw + (((size_t)ri * a->n_tables + table) * a->nq + (size_t)(h % a->hpt) * g) *
                              a->max_slots + s;
    for (uint32_t j0 = 0; j0 < g; j0 += KVE_SCORE_HEADS_PER_PASS) {
        float acc[KVE_SCORE_HEADS_PER_PASS];
        uint32_t n = g - j0 < KVE_SCORE_HEADS_PER_PASS ? g - j0 : KVE_SCORE_HEADS_PER_PASS;
        KVE_UNROLL
        for (uint32_t j = 0; j < KVE_SCORE_HEADS_PER_PASS; j++)
            acc[j] = 0.0f;
        if (key && d->scorer == KVE_SCORER_KNORM)
            acc[0] = kve_score_knorm_key(key, t, d->keys.head_dim, a->vec);
        else if (key)
            kve_score_tri_pass(sm->coef + (size_t)j0 * 3 * a->nf, key, t, a->nf, a->vec, n, acc);
        KVE_UNROLL /* constant indices: acc stays in registers */
        for (uint32_t j = 0; j < KVE_SCORE_HEADS_PER_PASS; j++)
            if (j < n)
                raw[(size_t)(j0 + j) * a->max_slots] = acc[j];
    }
}

/* The block's totals of every thread's @p x and @p y into sm->sums[0..1],
 * every thread calling and then reading them: a tree over the threads (a
 * fixed order). */
KVE_FN void kve_score_sum_block(kve_tc *tc, const kve_score_smem *sm, double x, double y)
{
    double *me = sm->sums + 2 * (size_t)tc->tid;
    kve_sync(tc); /* every thread has read the previous totals */
    me[0] = x;
    me[1] = y;
    uint32_t k = 1;
    while (k < tc->nt)
        k <<= 1;
    for (k >>= 1; k > 0; k >>= 1) {
        kve_sync(tc);
        if (tc->tid < k && tc->tid + k < tc->nt) {
            me[0] += me[2 * (size_t)k];
            me[1] += me[2 * (size_t)k + 1];
        }
    }
    kve_sync(tc);
}

/* Mean and 1/std of query head @p j over the candidates, into sm->stats:
 * two passes (kve_score_mean, kve_score_inv_std), each per-thread sums and
 * then a tree over the threads. */
KVE_FN void kve_score_stats_block(kve_tc *tc, const kve_score_smem *sm, const kve_score_row *r,
                                  const volatile float *raw, const int32_t *tab, uint32_t x,
                                  uint32_t j)
{
    double s1 = 0, n = 0;
    for (uint32_t s = tc->tid; s < r->n_slots; s += tc->nt)
        if (kve_score_candidate(tab[s], r->prompt_len, x)) {
            s1 += raw[s];
            n += 1;
        }
    kve_score_sum_block(tc, sm, s1, n);
    n = sm->sums[1];
    double mean = kve_score_mean(sm->sums[0], n), ss = 0;
    for (uint32_t s = tc->tid; s < r->n_slots; s += tc->nt)
        if (kve_score_candidate(tab[s], r->prompt_len, x)) {
            double dv = (double)raw[s] - mean;
            ss += dv * dv;
        }
    kve_score_sum_block(tc, sm, ss, 0.0);
    if (tc->tid == 0) {
        sm->stats[2 * j] = mean;
        sm->stats[2 * j + 1] = kve_score_inv_std(sm->sums[0], n);
    }
}

/* The tail of (row @p ri, table @p table), on the block that finished it
 * last: z-normalization, the max over the table's query heads, the output. */
KVE_FN void kve_score_tail_block(kve_tc *tc, const kve_score_smem *sm, const kve_score_args *a,
                                 uint32_t ri, const kve_score_row *r, uint32_t table,
                                 const int32_t *tab, uint32_t x)
{
    const kve_score_desc *d = &a->d;
    float *out = d->scores + r->scores_offset + (size_t)table * d->scores_stride_table;
    int zn = (d->flags & KVE_SCORE_ZNORM) != 0;
    /* written by other blocks: volatile reads go past this block's cache */
    const volatile float *raw = a->raw + ((size_t)ri * a->n_tables + table) * a->nq * a->max_slots;
    for (uint32_t j = 0; zn && j < a->nq; j++)
        kve_score_stats_block(tc, sm, r, raw + (size_t)j * a->max_slots, tab, x, j);
    kve_sync(tc);
    for (uint32_t s = tc->tid; s < r->n_slots; s += tc->nt) {
        if (!kve_score_candidate(tab[s], r->prompt_len, x)) {
            if (!(d->flags & KVE_SCORE_ACCUMULATE))
                out[s] = 0.0f;
            continue;
        }
        float best = 0.0f;
        for (uint32_t j = 0; j < a->nq; j++) {
            float v = raw[(size_t)j * a->max_slots + s];
            if (zn)
                v = kve_score_z(v, sm->stats[2 * j], sm->stats[2 * j + 1]);
            best = j == 0 || v > best ? v : best;
        }
        kve_score_put(a, &out[s], best);
    }
}

/* One (row, KV head, tile) item on one block; a row with nothing to
 * score costs its blocks the row's lookup (every block of the row returns,
 * so its counter stays 0). */
KVE_FN void kve_score_item_block(kve_tc *tc, const kve_score_smem *sm, const kve_score_args *a,
                                 uint32_t ri, uint32_t h, uint32_t tile)
{
    const kve_score_desc *d = &a->d;
    kve_score_row row;
    if (!kve_score_row_get(a, ri, &row))
        return; /* the same for every thread of the block */
    const kve_score_row *r = &row;
    uint32_t table = h / a->hpt, s = tile * tc->nt + tc->tid;
    const int32_t *tab = d->slot_pos + r->table_offset + (size_t)table * kve_score_table_stride(d, r);
    kve_sync(tc); /* the previous item is done with the shared memory */
    if (d->scorer == KVE_SCORER_TRIATTENTION && tile * tc->nt < r->n_slots) {
        for (uint32_t f = tc->tid; f < a->nf; f += tc->nt)
            kve_score_phase(a, f, r->round_start, sm->phase + 2 * f);
        kve_sync(tc);
        uint32_t j0 = (h % a->hpt) * a->group;
        for (uint32_t i = tc->tid; i < a->group * a->nf; i += tc->nt)
            kve_score_coef(a, table, j0 + i / a->nf, i % a->nf, sm->phase + 2 * (i % a->nf),
                           sm->coef + 3 * (size_t)i);
    }
    uint32_t x = kve_score_bound_block(tc, sm, tab, r); /* its barriers order the coefficients */
    if (s < r->n_slots && kve_score_candidate(tab[s], r->prompt_len, x))
        kve_score_slot_dev(sm, a, ri, r, h, s);
    kve_fence(); /* this thread's raw scores, before the block counts itself done */
    kve_sync(tc);
    if (tc->tid == 0) {
        uint32_t *c = &a->arrived[(size_t)ri * a->n_tables + table];
        *sm->last = kve_atomic_add_u32(c, 1) + 1 == a->hpt * a->tiles;
        if (*sm->last)
            *c = 0; /* every block of the (row, table) has counted: ready for the next call */
        kve_fence();
    }
    kve_sync(tc);
    if (*sm->last)
        kve_score_tail_block(tc, sm, a, ri, r, table, tab, x);
}

/* The kernel: items (row, KV head, tile) of the call, one block each,
 * block-stride. */
KVE_FN void kve_score_grid(kve_tc *tc, unsigned char *smem, const kve_score_args *a)
{
    kve_score_smem sm = kve_score_smem_at(smem, a->group, a->nq, a->nf, tc->nt);
    uint64_t per_row = (uint64_t)a->d.keys.n_heads * a->tiles, items = per_row * a->d.n_rows;
    for (uint64_t w = tc->bid; w < items; w += tc->nb)
        kve_score_item_block(tc, &sm, a, (uint32_t)(w / per_row),
                             (uint32_t)(w % per_row / a->tiles), (uint32_t)(w % a->tiles));
}

#endif /* KVE_SCORE_GRID_BODY_H */
