/*
 * score_body.h — the built-in scorers (kve_score, docs/SCORERS.md), written
 * once: the per-slot math and the window's selection are shared by the CPU
 * backend (kernels_cpu/score_cpu.c) and the device grid (CUDA, HIP, the
 * host emulator) of kernels_cuda/score_grid_body.h, which kve_launch.h
 * includes right after this file.
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
 * On the device a call is one launch (kve_launch.h plans it): one block per
 * (row, KV head, tile of slots), each lane one slot whose key it reads once
 * through the page table, as 16-byte vectors when it can, scoring all query
 * heads of the KV head's group from that read; the last block of a (row,
 * table) z-normalizes and takes the max (score_grid_body.h).
 */
#ifndef KVE_SCORE_BODY_H
#define KVE_SCORE_BODY_H

#include "cache_write_body.h"
#include "convert_body.h"
#include "kve_device.h"
#include "kve_util.h"
#include "kvevict.h"
#include "state_rows_body.h"

#include <string.h>
#ifndef KVE_ON_GPU
#include <math.h>
#endif

/* Most (query heads of a table) x frequencies: a device block keeps those
 * of one KV head's group in shared memory (12 bytes each), all of it under
 * 48 KiB a block. */
#define KVE_SCORE_MAX_COEFS 3072u
#define KVE_SCORE_MAX_QHEADS 256u /* query heads (K-norm: KV heads) of one table */
#define KVE_SCORE_STD_MIN 1e-6f
#define KVE_SCORE_TWO_PI 6.283185307179586

typedef struct kve_score_args {
    kve_score_desc d;        /* validated; on the device d.rows is the uploaded copy */
    size_t stride_page, stride_slot, stride_head; /* resolved byte strides */
    uint32_t nf;             /* frequencies, head_dim / 2 */
    uint32_t hpt;            /* KV heads per table */
    uint32_t n_tables;       /* tables per row */
    uint32_t nq;             /* query heads of a table (TriAttention: hpt * group; K-norm: hpt) */
    uint32_t group;          /* query heads of a KV head (K-norm: 1) */
    uint32_t vec;            /* 1: base, strides and half a key are multiples of 16 bytes */
    /* the device grid's (kve_score_args_make): */
    uint32_t tiles;          /* slot tiles (of a block's threads) per (row, KV head) */
    uint32_t max_slots;      /* the longest row's slots: raw's stride */
    float *raw;              /* raw scores [row][table][query head][max_slots] */
    uint32_t *arrived;       /* blocks done per (row, table); 0 between calls */
    uint64_t *errors;
    /* kve_state_score_device: the rows read on the device from the state's
     * list (list.rows not NULL; d.rows unused) */
    kve_score_list list;
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

/* A 16-bit element @p v of type @p t (bf16 or f16) as a float. */
KVE_FN float kve_score_half(uint32_t v, uint32_t t)
{
    if (t == KVE_DTYPE_BF16)
        return kve_score_f32(v << 16);
    return kve_score_f32(kve_small_to_f32(v, kve_fmt_of(KVE_DTYPE_F16)));
}

/* Element @p e of a key of type @p t as a float. */
KVE_FN float kve_score_elem(const unsigned char *key, uint32_t t, uint32_t e)
{
    if (t == KVE_DTYPE_F32)
        return ((const float *)key)[e];
    return kve_score_half(((const uint16_t *)key)[e], t);
}

/* The key of slot @p slot of row @p r in KV head @p h, or NULL (*why set)
 * when the slot or its page is outside the cache. */
KVE_FN const unsigned char *kve_score_locate_key(const kve_score_args *a, const kve_score_row *r,
                                          uint32_t slot, uint32_t h, int *why)
{
    int64_t s = slot;
    if (a->d.keys.pages.kind == KVE_PAGES_FLAT)
        s += (int64_t)r->cache_row * a->d.keys.pages.page_size;
    size_t page, in;
    if (!kve_cw_locate(&a->d.keys.pages, r->cache_row, s, &page, &in, why))
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

/* The launch-independent part of the arguments for a validated desc with
 * resolved strides (host code): the CPU's all; kve_score_args_make adds
 * the device grid's. */
static inline void kve_score_args_init(kve_score_args *a, const kve_score_desc *d,
                                       uint64_t *errors)
{
    const kve_key_cache *k = &d->keys;
    a->d = *d;
    a->stride_page = k->stride_page;
    a->stride_slot = k->stride_slot;
    a->stride_head = k->stride_head;
    a->nf = k->head_dim / 2;
    a->hpt = d->heads_per_table ? d->heads_per_table : 1;
    a->n_tables = k->n_heads / a->hpt;
    a->group = d->scorer == KVE_SCORER_TRIATTENTION ? d->tri.group : 1;
    a->nq = a->hpt * a->group;
    size_t half = (size_t)a->nf * kve_dtype_size(k->dtype);
    a->vec = (((uintptr_t)k->base | k->stride_page | k->stride_slot | k->stride_head | half) %
              16) == 0;
    a->tiles = a->max_slots = 0;
    a->raw = NULL;
    a->arrived = NULL;
    a->errors = errors;
    memset(&a->list, 0, sizeof a->list);
}

/* Raw scores' floats of @p n_rows rows of @p n_tables tables, @p nq query
 * heads a table, @p max_slots slots (SIZE_MAX: past the address space). */
static inline size_t kve_score_raw_floats(uint64_t n_rows, uint64_t n_tables, uint64_t nq,
                                      uint64_t max_slots)
{
    uint64_t n;
    if (__builtin_mul_overflow(n_rows * n_tables, nq, &n) ||
        __builtin_mul_overflow(n, max_slots, &n) || n > SIZE_MAX / sizeof(float))
        return SIZE_MAX;
    return (size_t)n;
}

/* A scorer's scratch in backend memory (kve_score_call) for @p n_rows rows:
 * the given rows' copy (n_rows kve_score_row) at 0, the raw scores at
 * *@p raw_at; its bytes (SIZE_MAX: past the address space). The counters
 * (n_rows x n_tables) lie apart. */
#define KVE_SCORE_SCRATCH_ALIGN 256u
static inline size_t kve_score_scratch_bytes(uint64_t n_rows, uint64_t n_tables, uint64_t nq,
                                             uint64_t max_slots, size_t *raw_at)
{
    size_t raw = kve_score_raw_floats(n_rows, n_tables, nq, max_slots), bytes;
    *raw_at = n_rows > SIZE_MAX / 2 / sizeof(kve_score_row)
                  ? SIZE_MAX / 2
                  : KVE_ALIGN_UP(n_rows * sizeof(kve_score_row), KVE_SCORE_SCRATCH_ALIGN);
    if (raw == SIZE_MAX || __builtin_add_overflow(raw * sizeof(float), *raw_at, &bytes))
        return SIZE_MAX;
    return bytes;
}

/* Call row @p ri's scoring row: the desc's, or on a state's device list
 * (kve_score_list) its round's, its key cache row ri. Returns 0 when the
 * row has nothing to score (no slots; on the list: padding, a row that is
 * not active, no round, or a call the scored rules refuse). */
KVE_FN int kve_score_row_get(const kve_score_args *a, uint32_t ri, kve_score_row *out)
{
    const kve_score_list *l = &a->list;
    if (!l->rows) {
        *out = a->d.rows[ri];
        return out->n_slots != 0;
    }
    return kve_score_list_row(l, ri, a->n_tables, a->d.scores_stride_table, out);
}

/* z-normalization in two passes, in double: the mean of @p n values from
 * their sum @p s, then 1/std from the sum @p ss of their squared deviations
 * from that mean (no s2/n - mean^2: that cancels when the std is small
 * against the mean), and a raw score's z from both. The mean stays a
 * double: rounded to float it would move every z by up to half an ulp of
 * the mean over the std (docs/SCORERS.md "Agreement and tolerances"). */
KVE_HD_FN double kve_score_mean(double s, double n) { return n > 0 ? s / n : 0.0; }

KVE_HD_FN double kve_score_inv_std(double ss, double n)
{
    double sd = n > 0 ? sqrt(ss / n) : 1.0;
    return 1.0 / (sd > (double)KVE_SCORE_STD_MIN ? sd : (double)KVE_SCORE_STD_MIN);
}

KVE_HD_FN float kve_score_z(float v, double mean, double inv)
{
    return (float)(((double)v - mean) * inv);
}

#endif /* KVE_SCORE_BODY_H */
