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

#endif
