/* demo_scored.h — the scored arms of `kvevict demo` (TriAttention, K-norm):
 * before an append that runs a round, the scores of the row's slots from the
 * K cache (kve_state_score, one call per layer), where the state reads them. */
#ifndef KVE_DEMO_SCORED_H
#define KVE_DEMO_SCORED_H

#include "demo.h"

#define KVE_DEMO_GROUP 4 /* query heads per KV head (Qwen3's GQA) in the TriAttention arm */

typedef struct kve_demo_scorer {
    kve_context *ctx;
    kve_arm_kind kind;
    const void *k_cache;    /* the demo's [slot][layer][head][entry] page, bf16 keys */
    uint32_t capacity;      /* slots of the page */
    size_t tables;          /* slot tables of the row */
    float *q_mean, *q_abs;  /* TriAttention's synthetic calibration, backend memory */
    float *scores;          /* [tables][capacity], backend memory */
} kve_demo_scorer;

/* Whether @p ctx's backend scores (kve_score); *why says why not. */
int kve_demo_scored_available(kve_context *ctx, const char **why);

/* Buffers and the synthetic calibration of a scored arm (kve_demo_scorer_free). */
kve_status kve_demo_scorer_init(kve_demo_scorer *s, kve_context *ctx, const kve_demo_opts *o,
                                kve_arm_kind kind, const void *k_cache, uint32_t capacity,
                                size_t tables);
void kve_demo_scorer_free(kve_demo_scorer *s);

/* Before an append of @p n_new tokens to row 0: when it runs a round, score
 * the row's slots and point @p step at the scores. */
kve_status kve_demo_score_due(kve_demo_scorer *s, kve_state *state, const kve_demo_opts *o,
                              kve_step_buffers *step, uint32_t n_new);

#endif
