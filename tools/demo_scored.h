/* demo_scored.h — the scored arms of `kvevict demo` (TriAttention, K-norm):
 * the state flag they add and the scores a due round reads. */
#ifndef KVE_DEMO_SCORED_H
#define KVE_DEMO_SCORED_H

#include "demo.h"

/* The schedule flag of a scored state (KVE_SCORED), 0 when this build has
 * no scored selection. */
uint32_t kve_demo_scored_flag(void);

/* Before an append of @p n_new tokens to row 0 of a scored state: when the
 * call runs a round, score the row's slots from the K cache @p k_cache
 * (the demo's [slot][layer][head][entry] page of @p capacity slots) with
 * arm @p kind's scorer into @p scores, and point @p step at them. */
kve_status kve_demo_score_due(kve_state *state, kve_arm_kind kind, const void *k_cache,
                              uint32_t capacity, const kve_demo_opts *o, float *scores,
                              kve_step_buffers *step, uint32_t n_new);

#endif
