/* kve_scored_model.h — a plain model of docs/SPEC.md "Scored selection" for
 * one head (sort the candidates by (score descending, position ascending),
 * keep the first n_keep), and random scores with ties, signed zeros and
 * infinities, NaN only where the spec never reads. Shared by the CPU, the
 * emulated-device and the state suites. */
#ifndef KVE_SCORED_MODEL_H
#define KVE_SCORED_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kve_test_util.h"

typedef struct {
    uint32_t slot;
    int32_t pos;
    float score;
} ksm_item;

/* Descending score (-0.0 == +0.0, as float comparison has it), then ascending position. */
static inline int ksm_cmp(const void *a, const void *b)
{
    const ksm_item *x = (const ksm_item *)a, *y = (const ksm_item *)b;
    if (x->score > y->score)
        return -1;
    if (x->score < y->score)
        return 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static inline int ksm_cmp_pos_desc(const void *a, const void *b)
{
    const ksm_item *x = (const ksm_item *)a, *y = (const ksm_item *)b;
    return (x->pos < y->pos) - (x->pos > y->pos);
}

/* One head: evicted slots ascending into ev (room n), 1 = candidate into
 * is_cand[n] (may be NULL); returns the count; *over = the over-budget flag. */
static inline uint32_t ksm_head(const int32_t *sp, const float *sc, uint32_t n, uint32_t P,
                                uint32_t W, uint32_t B, int32_t *ev, int *over, uint8_t *is_cand)
{
    ksm_item *gen = (ksm_item *)malloc((n + 1) * sizeof *gen);
    uint8_t *evicted = (uint8_t *)calloc(n + 1, 1);
    uint32_t n_valid = 0, n_gen = 0;
    if (is_cand)
        memset(is_cand, 0, n);
    for (uint32_t t = 0; t < n; t++)
        if (sp[t] >= 0) {
            n_valid++;
            if ((uint32_t)sp[t] >= P)
                gen[n_gen++] = (ksm_item){t, sp[t], 0.0f};
        }
    *over = 0;
    uint32_t ne = 0;
    if (n_valid > B) {
        qsort(gen, n_gen, sizeof *gen, ksm_cmp_pos_desc);
        uint32_t wc = W < n_gen ? W : n_gen, n_cand = n_gen - wc;
        ksm_item *cand = gen + wc;
        for (uint32_t i = 0; i < n_cand; i++) {
            cand[i].score = sc[cand[i].slot];
            if (is_cand)
                is_cand[cand[i].slot] = 1;
        }
        uint64_t prot = (uint64_t)(n_valid - n_gen) + wc;
        *over = prot > B;
        uint32_t nk = prot >= B ? 0 : (uint32_t)(B - prot);
        nk = nk > n_cand ? n_cand : nk;
        qsort(cand, n_cand, sizeof *cand, ksm_cmp);
        for (uint32_t i = nk; i < n_cand; i++)
            evicted[cand[i].slot] = 1;
    }
    for (uint32_t t = 0; t < n; t++)
        if (evicted[t])
            ev[ne++] = (int32_t)t;
    free(gen);
    free(evicted);
    return ne;
}

/* A random score of kind k: 0 uniform, 1 few values (ties), 2 specials
 * (+-0, +-inf, tiny, huge), 3 all equal. */
static inline float ksm_score(uint64_t *rng, int kind)
{
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, -1e-45f,
                                    3.4e38f, -3.4e38f, 1.0f, -1.0f};
    switch (kind) {
    case 0: return (float)((double)(int64_t)kt_next(rng) / 9.2e18);
    case 1: return (float)kt_below(rng, 4) - 1.5f;
    case 2: return special[kt_below(rng, 10)];
    default: return 0.25f;
    }
}

/* Scores for every slot of a row; then NaN at empty slots and at slots the
 * model says are not candidates, with probability 1/2 each (never read). */
static inline void ksm_fill(uint64_t *rng, float *sc, const int32_t *sp, uint32_t n, size_t stride,
                            int kind, const uint8_t *is_cand)
{
    for (uint32_t t = 0; t < n; t++) {
        sc[t] = ksm_score(rng, kind);
        if (is_cand && !is_cand[t] && kt_below(rng, 2))
            sc[t] = NAN;
        else if (!is_cand && sp[t] < 0 && kt_below(rng, 2))
            sc[t] = NAN;
    }
    for (size_t t = n; t < stride; t++)
        sc[t] = NAN; /* padding between rows is never read */
}

/* A random scored batch: 1-3 sequences x 1-2 layers x 1-3 heads, padded
 * strides, NaN only where never read. */
typedef struct {
    kve_seq seqs[3];
    kve_batch b;
    int32_t *slots;
    float *scores;
} ksm_batch;

static inline void ksm_batch_make(uint64_t *rng, ksm_batch *r, int iter)
{
    kve_batch *b = &r->b;
    memset(r, 0, sizeof *r);
    uint32_t S = 1 + kt_below(rng, 3), L = 1 + kt_below(rng, 2), H = 1 + kt_below(rng, 3);
    uint32_t n = iter % 50 == 0 ? 1 + kt_below(rng, 3000) : 1 + kt_below(rng, 300);
    size_t stride = n + (iter % 3 == 0 ? kt_below(rng, 9) : 0);
    size_t sstride = n + (iter % 4 == 1 ? 1 + kt_below(rng, 7) : 0);
    size_t heads = (size_t)S * L * H;
    r->slots = (int32_t *)malloc(heads * stride * 4);
    r->scores = (float *)malloc(heads * sstride * 4);
    for (uint32_t s = 0; s < S; s++)
        r->seqs[s] = (kve_seq){kt_next(rng), kt_below(rng, n + 2), kt_below(rng, 5)};
    uint32_t W = kt_below(rng, 4) == 0 ? 0 : kt_below(rng, n / 2 + 3);
    uint32_t B = kt_below(rng, 8) == 0 ? 0 : kt_below(rng, n + 1);
    uint32_t flags = KVE_SCORED | (kt_below(rng, 2) ? KVE_SHARED_HEADS : 0) |
                     (kt_below(rng, 2) ? KVE_TRUSTED_SLOTS : 0);
    *b = (kve_batch){kt_next(rng), flags, S, r->seqs, L, H, kt_below(rng, 9), kt_below(rng, 9), n,
                     B, W, r->slots, stride, r->scores, sstride};
    uint8_t *cand = (uint8_t *)malloc(n);
    int32_t *ev = (int32_t *)malloc((size_t)n * 4);
    for (size_t i = 0; i < heads; i++) {
        int32_t *row = r->slots + i * stride;
        uint32_t valid = kt_below(rng, 5) == 0 ? n : kt_below(rng, n + 1);
        uint32_t span = valid + (kt_below(rng, 2) ? kt_below(rng, 3 * n + 1) : 0);
        kt_random_table(rng, row, n, valid, span ? span : 1);
        for (size_t t = n; t < stride; t++)
            row[t] = -7; /* never read */
        int over;
        const kve_seq *q = &r->seqs[i / ((size_t)L * H)];
        ksm_head(row, r->scores + i * sstride, n, q->prompt_len, W, B, ev, &over, cand);
        ksm_fill(rng, r->scores + i * sstride, row, n, sstride, (int)kt_below(rng, 4), cand);
    }
    free(cand);
    free(ev);
}

static inline void ksm_batch_free(ksm_batch *r)
{
    free(r->slots);
    free(r->scores);
}

#endif
