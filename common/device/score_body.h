/*
 * score_body.h — the built-in scorers (kve_score, docs/SCORERS.md), written
 * once: the per-slot math and the window's selection are shared by the CPU
 * backend (kernels_cpu/score_cpu.c) and the device grid below (CUDA, HIP,
 * the host emulator).
 *
 * TriAttention's score of a key is a mean over offsets of cosines whose
 * phase holds the key's position twice, once through the inverse rotation
 * and once through the distance to t0; the two cancel exactly
 * (docs/SCORERS.md "Phase identity"), so per (row, query head, frequency)
 * one complex coefficient a_f = s_f^2 q_f e^{i w_f t0} mean_d e^{i w_f d}
 * and one real b_f = s_f^2 (A_f - |q_f|) make the score a dot product with
 * the post-RoPE key plus sum b_f |k_f|. Coefficients are computed in
 * double, everything per slot in float with a fixed order over f.
 *
 * A work item is one (row, table): its candidates are SPEC §3's (the
 * window's bound found by a radix select over the generated positions),
 * every query head is z-normalized over them (sums in double), the max over
 * the table's query heads is written, times the weight.
 */
#ifndef KVE_SCORE_BODY_H
#define KVE_SCORE_BODY_H

#include "cache_write_body.h"
#include "convert_body.h"
#include "kve_device.h"
#include "kve_util.h"
#include "kvevict.h"

#include <string.h>
#ifndef KVE_ON_GPU
#include <math.h>
#endif

/* Rows one device launch carries in its parameters. */
#define KVE_SCORE_ROWS_PER_LAUNCH 32u
/* Most (query heads of a table) x frequencies: the coefficients live in
 * shared memory (12 bytes each), all of it under 48 KiB a block. */
#define KVE_SCORE_MAX_COEFS 3072u
#define KVE_SCORE_MAX_QHEADS 256u /* query heads (K-norm: KV heads) of one table */
#define KVE_SCORE_STD_MIN 1e-6f
#define KVE_SCORE_TWO_PI 6.283185307179586

typedef struct kve_score_args {
    kve_score_desc d;        /* validated; d.rows unused on the device */
    kve_cache_write_desc pg; /* the key cache's page table, for kve_cw_locate */
    size_t stride_page, stride_slot, stride_head; /* resolved byte strides */
    uint32_t nf;             /* frequencies, head_dim / 2 */
    uint32_t hpt;            /* KV heads per table */
    uint32_t n_tables;       /* tables per row */
    uint32_t nq;             /* query heads of a table (TriAttention: hpt * group; K-norm: hpt) */
    uint32_t n_rows;         /* rows in this launch */
    uint32_t first_row;      /* index in the call of row[0] (error records) */
    kve_score_row row[KVE_SCORE_ROWS_PER_LAUNCH];
    uint64_t *errors;
} kve_score_args;

KVE_HD_FN float kve_score_f32(uint32_t bits)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.u = bits;
    return c.f;
}

/* Element @p e of a key of type @p t as a float. */
KVE_FN float kve_score_elem(const unsigned char *key, uint32_t t, uint32_t e)
{
    if (t == KVE_DTYPE_F32)
        return ((const float *)key)[e];
    uint32_t v = ((const uint16_t *)key)[e];
    if (t == KVE_DTYPE_BF16)
        return kve_score_f32(v << 16);
    return kve_score_f32(kve_small_to_f32(v, kve_fmt_of(KVE_DTYPE_F16)));
}

/* The key of slot @p slot of row @p r in KV head @p h, or NULL (*why set)
 * when the slot or its page is outside the cache. */
KVE_FN const unsigned char *kve_score_locate_key(const kve_score_args *a, const kve_score_row *r,
                                          uint32_t slot, uint32_t h, int *why)
{
    int64_t s = slot;
    if (a->pg.page_table == KVE_PAGES_FLAT)
        s += (int64_t)r->cache_row * a->pg.page_size;
    size_t page, in;
    if (!kve_cw_locate(&a->pg, r->cache_row, s, &page, &in, why))
        return NULL;
    return (const unsigned char *)a->d.keys.base + page * a->stride_page + in * a->stride_slot +
           (size_t)h * a->stride_head;
}

/* omega_f of the call. */
KVE_FN double kve_score_omega(const kve_score_args *a, uint32_t f)
{
    const kve_triattention_params *t = &a->d.tri;
    if (t->omega)
        return (double)t->omega[f];
    return pow(t->rope_theta, -2.0 * (double)f / (double)(2 * a->nf));
}

/* e^{i w t0} * mean over the offsets of e^{i w d}, for frequency @p f of a
 * row starting its round at @p t0 (out[0] real, out[1] imaginary). */
KVE_FN void kve_score_phase(const kve_score_args *a, uint32_t f, uint32_t t0, double out[2])
{
    const kve_triattention_params *t = &a->d.tri;
    double w = kve_score_omega(a, f), cr = 0, ci = 0;
    uint32_t n = t->offsets ? t->n_offsets : 17;
    for (uint32_t k = 0; k < n; k++) {
        double d = t->offsets ? (double)t->offsets[k] : (double)(1u << k);
        double ph = fmod(w * d, KVE_SCORE_TWO_PI);
        cr += cos(ph);
        ci += sin(ph);
    }
    cr /= n;
    ci /= n;
    double p0 = fmod(w * (double)t0, KVE_SCORE_TWO_PI), er = cos(p0), ei = sin(p0);
    out[0] = er * cr - ei * ci;
    out[1] = er * ci + ei * cr;
}

/* Coefficients (a_re, a_im, b) of frequency @p f for query head @p j of
 * table @p table, from the phase factor @p ph of kve_score_phase. */
KVE_FN void kve_score_coef(const kve_score_args *a, uint32_t table, uint32_t j, uint32_t f,
                           const double ph[2], float out[3])
{
    const kve_triattention_params *t = &a->d.tri;
    size_t q = (size_t)table * a->nq + j, nf = a->nf;
    double qr = t->q_mean[(q * nf + f) * 2], qi = t->q_mean[(q * nf + f) * 2 + 1];
    double s2 = t->freq_scale_sq ? (double)t->freq_scale_sq[f] : 1.0;
    out[0] = (float)(s2 * (qr * ph[0] - qi * ph[1]));
    out[1] = (float)(s2 * (qr * ph[1] + qi * ph[0]));
    out[2] = (float)(s2 * ((double)t->q_abs_mean[q * nf + f] - sqrt(qr * qr + qi * qi)));
}

/* Raw TriAttention score of one key for one query head: coef[3f..3f+2]
 * against the pairs (key[f], key[f + nf]), f ascending. */
KVE_FN float kve_score_tri_raw(const float *coef, const unsigned char *key, uint32_t t,
                               uint32_t nf)
{
    float acc = 0.0f;
    for (uint32_t f = 0; f < nf; f++) {
        float kr = kve_score_elem(key, t, f), ki = kve_score_elem(key, t, f + nf);
        float m = sqrtf(kr * kr + ki * ki);
        acc += coef[3 * f] * kr + coef[3 * f + 1] * ki + coef[3 * f + 2] * m;
    }
    return acc;
}

/* K-norm's raw score: -||key||, elements ascending. */
KVE_FN float kve_score_knorm_raw(const unsigned char *key, uint32_t t, uint32_t dim)
{
    float acc = 0.0f;
    for (uint32_t e = 0; e < dim; e++) {
        float x = kve_score_elem(key, t, e);
        acc += x * x;
    }
    return -sqrtf(acc);
}

/* Elements between row @p r's tables. */
KVE_HD_FN size_t kve_score_table_stride(const kve_score_desc *d, const kve_score_row *r)
{
    return r->table_stride ? r->table_stride : d->slot_pos_stride_table;
}

/* Whether a slot holding @p pos is a candidate of a table with bound @p x
 * (the window starts at x) and prompt @p p. */
KVE_HD_FN int kve_score_candidate(int32_t pos, uint32_t p, uint32_t x)
{
    return pos >= 0 && (uint32_t)pos >= p && (uint32_t)pos < x;
}

/* Radix select, step @p pass (0..3, most significant byte first): with
 * @p hist the 256-bin histogram of byte 3 - pass of the generated
 * positions matching *prefix in the bytes above, moves *prefix and *k (the
 * rank from the top still sought) to the bin holding the k-th largest. */
KVE_HD_FN void kve_score_digit(const uint32_t *hist, uint32_t pass, uint32_t *prefix,
                               uint32_t *k)
{
    uint32_t above = 0, b = 255;
    for (;; b--) {
        if (above + hist[b] >= *k || b == 0)
            break;
        above += hist[b];
    }
    *k -= above;
    *prefix |= b << (8 * (3 - pass));
}

/* Whether @p pos (generated: >= p) matches @p prefix in the bytes above
 * byte 3 - pass. */
KVE_HD_FN int kve_score_in_prefix(uint32_t pos, uint32_t pass, uint32_t prefix)
{
    uint32_t shift = 8 * (4 - pass);
    return pass == 0 || (pos >> shift) == (prefix >> shift);
}

/* The window's bound of table @p tab (kve_score_candidate's x), one thread. */
KVE_FN uint32_t kve_score_bound_seq(const int32_t *tab, const kve_score_row *r)
{
    uint32_t hist[256], k = r->window + 1, prefix = 0, gen = 0;
    for (uint32_t p = 0; p < 4; p++) {
        for (uint32_t b = 0; b < 256; b++)
            hist[b] = 0;
        for (uint32_t s = 0; s < r->n_slots; s++) {
            int32_t pos = tab[s];
            if (pos >= 0 && (uint32_t)pos >= r->prompt_len &&
                kve_score_in_prefix((uint32_t)pos, p, prefix))
                hist[((uint32_t)pos >> (8 * (3 - p))) & 255u]++;
        }
        if (p == 0) {
            for (uint32_t b = 0; b < 256; b++)
                gen += hist[b];
            if (gen <= r->window)
                return r->prompt_len;
        }
        kve_score_digit(hist, p, &prefix, &k);
    }
    return prefix + 1;
}

/* Weighted output of a candidate's score. */
KVE_FN void kve_score_put(const kve_score_args *a, float *out, float v)
{
    float w = a->d.weight != 0.0f ? a->d.weight : 1.0f;
    if (a->d.flags & KVE_SCORE_ACCUMULATE)
        *out += w * v;
    else
        *out = w * v;
}

/* Raw score of query head @p j (TriAttention) or KV head @p j (K-norm) of
 * table @p table at slot @p slot; *bad = 1 when its key is outside. */
KVE_FN float kve_score_raw_one(const kve_score_args *a, const kve_score_row *r, uint32_t table,
                               uint32_t j, const float *coef, uint32_t slot, int *bad)
{
    const kve_score_desc *d = &a->d;
    uint32_t group = d->scorer == KVE_SCORER_TRIATTENTION ? d->tri.group : 1;
    uint32_t h = table * a->hpt + j / group;
    int why = 0;
    const unsigned char *key = kve_score_locate_key(a, r, slot, h, &why);
    if (!key) {
        *bad = 1;
        return 0.0f;
    }
    if (d->scorer == KVE_SCORER_KNORM)
        return kve_score_knorm_raw(key, d->keys.dtype, d->keys.head_dim);
    return kve_score_tri_raw(coef + (size_t)j * 3 * a->nf, key, d->keys.dtype, a->nf);
}

/* The launch-independent part of the arguments for a validated desc with
 * resolved strides (host code); rows are the caller's to fill (the device's) or read
 * from d->rows (the CPU's). */
static inline void kve_score_args_init(kve_score_args *a, const kve_score_desc *d,
                                       uint64_t *errors)
{
    const kve_key_cache *k = &d->keys;
    a->d = *d;
    kve_cache_write_desc pg;
    memset(&pg, 0, sizeof pg);
    pg.page_size = k->page_size;
    pg.n_pages = k->n_pages;
    pg.page_table = k->page_table;
    pg.n_rows = k->n_rows;
    pg.block_table = k->block_table;
    pg.blocks_per_row = k->blocks_per_row;
    pg.indptr = k->indptr;
    pg.indices = k->indices;
    pg.last_page_len = k->last_page_len;
    a->pg = pg;
    a->stride_page = k->stride_page;
    a->stride_slot = k->stride_slot;
    a->stride_head = k->stride_head;
    a->nf = k->head_dim / 2;
    a->hpt = d->heads_per_table ? d->heads_per_table : 1;
    a->n_tables = k->n_heads / a->hpt;
    a->nq = a->hpt * (d->scorer == KVE_SCORER_TRIATTENTION ? d->tri.group : 1);
    a->n_rows = 0;
    a->first_row = 0;
    a->errors = errors;
}

/* ---- the device grid --------------------------------------------------------- */


/* Dynamic shared memory of a block of @p nt threads: coefficients, phase
 * factors, histogram, per-thread sums, per-head mean and scale. */
KVE_HD_FN size_t kve_score_smem_bytes(uint32_t nq, uint32_t nf, uint32_t nt)
{
    return KVE_ALIGN_UP((size_t)nq * nf * 3 * 4, 16) + KVE_ALIGN_UP((size_t)nf * 16, 16) +
           256 * 4 + (size_t)nt * 24 + KVE_ALIGN_UP((size_t)nq * 8, 16);
}

typedef struct kve_score_smem {
    float *coef;
    double *phase;
    uint32_t *hist;
    double *sums;
    float *stats;
} kve_score_smem;

KVE_FN kve_score_smem kve_score_smem_at(unsigned char *p, uint32_t nq, uint32_t nf, uint32_t nt)
{
    kve_score_smem s;
    s.coef = (float *)p;
    p += KVE_ALIGN_UP((size_t)nq * nf * 3 * 4, 16);
    s.phase = (double *)p;
    p += KVE_ALIGN_UP((size_t)nf * 16, 16);
    s.sums = (double *)p;
    p += (size_t)nt * 24;
    s.hist = (uint32_t *)p;
    p += 256 * 4;
    s.stats = (float *)p;
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

/* Mean and 1/std over @p n values from sums @p s1, @p s2 (double). */
KVE_HD_FN void kve_score_moments(double s1, double s2, double n, float *mean_out, float *inv_out)
{
    double mean = n > 0 ? s1 / n : 0.0, var = n > 0 ? s2 / n - mean * mean : 1.0;
    float sd = (float)sqrt(var > 0 ? var : 0.0);
    *mean_out = (float)mean;
    *inv_out = 1.0f / (sd > KVE_SCORE_STD_MIN ? sd : KVE_SCORE_STD_MIN);
}

/* Mean and 1/std of query head @p j over the candidates, into sm->stats;
 * per-thread sums added by thread 0 in thread order. */
KVE_FN void kve_score_stats_block(kve_tc *tc, const kve_score_smem *sm, const kve_score_args *a,
                                  const kve_score_row *r, uint32_t table, uint32_t j,
                                  const int32_t *tab, uint32_t x, int *bad)
{
    double s1 = 0, s2 = 0, n = 0;
    for (uint32_t s = tc->tid; s < r->n_slots; s += tc->nt) {
        if (!kve_score_candidate(tab[s], r->prompt_len, x))
            continue;
        double v = kve_score_raw_one(a, r, table, j, sm->coef, s, bad);
        s1 += v;
        s2 += v * v;
        n += 1;
    }
    sm->sums[3 * tc->tid] = s1;
    sm->sums[3 * tc->tid + 1] = s2;
    sm->sums[3 * tc->tid + 2] = n;
    kve_sync(tc);
    if (tc->tid == 0) {
        double t1 = 0, t2 = 0, cnt = 0;
        for (uint32_t i = 0; i < tc->nt; i++) {
            t1 += sm->sums[3 * i];
            t2 += sm->sums[3 * i + 1];
            cnt += sm->sums[3 * i + 2];
        }
        kve_score_moments(t1, t2, cnt, &sm->stats[2 * j], &sm->stats[2 * j + 1]);
    }
    kve_sync(tc);
}

/* One (row, table) item on one block. */
KVE_FN void kve_score_item_block(kve_tc *tc, const kve_score_smem *sm, const kve_score_args *a,
                                 uint32_t ri, uint32_t table)
{
    const kve_score_desc *d = &a->d;
    const kve_score_row *r = &a->row[ri];
    const int32_t *tab = d->slot_pos + r->table_offset + (size_t)table * kve_score_table_stride(d, r);
    float *out = d->scores + r->scores_offset + (size_t)table * d->scores_stride_table;
    int tri = d->scorer == KVE_SCORER_TRIATTENTION, zn = (d->flags & KVE_SCORE_ZNORM) != 0;
    int bad = 0;
    kve_sync(tc); /* the previous item is done with the shared memory */
    if (tri) {
        for (uint32_t f = tc->tid; f < a->nf; f += tc->nt)
            kve_score_phase(a, f, r->round_start, sm->phase + 2 * f);
        kve_sync(tc);
        for (uint32_t i = tc->tid; i < a->nq * a->nf; i += tc->nt)
            kve_score_coef(a, table, i / a->nf, i % a->nf, sm->phase + 2 * (i % a->nf),
                           sm->coef + 3 * (size_t)i);
    }
    uint32_t x = kve_score_bound_block(tc, sm, tab, r);
    for (uint32_t j = 0; zn && j < a->nq; j++)
        kve_score_stats_block(tc, sm, a, r, table, j, tab, x, &bad);
    for (uint32_t s = tc->tid; s < r->n_slots; s += tc->nt) {
        if (!kve_score_candidate(tab[s], r->prompt_len, x)) {
            if (!(d->flags & KVE_SCORE_ACCUMULATE))
                out[s] = 0.0f;
            continue;
        }
        float best = 0.0f;
        for (uint32_t j = 0; j < a->nq; j++) {
            float v = kve_score_raw_one(a, r, table, j, sm->coef, s, &bad);
            if (zn)
                v = (v - sm->stats[2 * j]) * sm->stats[2 * j + 1];
            best = j == 0 || v > best ? v : best;
        }
        kve_score_put(a, &out[s], best);
        if (bad) {
            kve_raise(a->errors, KVE_DEV_ERR_SC_KEY, a->first_row + ri, s);
            bad = 0;
        }
    }
}

/* The kernel: items (row, table) of the launch, one block each, block-stride. */
KVE_FN void kve_score_grid(kve_tc *tc, unsigned char *smem, const kve_score_args *a)
{
    kve_score_smem sm = kve_score_smem_at(smem, a->nq, a->nf, tc->nt);
    uint32_t items = a->n_rows * a->n_tables;
    for (uint32_t w = tc->bid; w < items; w += tc->nb)
        kve_score_item_block(tc, &sm, a, w / a->n_tables, w % a->n_tables);
}

#endif /* KVE_SCORE_BODY_H */
