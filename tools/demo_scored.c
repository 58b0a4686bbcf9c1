/* demo_scored.c — the scored arms, until this build has scored selection
 * (KVE_SCORED, kve_state_score): they are reported as not available. */
#include "demo_scored.h"

int kve_demo_scored_available(const char **why)
{
    *why = "this build has no scored selection (KVE_SCORED and kve_state_score)";
    return 0;
}

uint32_t kve_demo_scored_flag(void)
{
    return 0;
}

kve_status kve_demo_score_due(kve_state *state, kve_arm_kind kind, const void *k_cache,
                              uint32_t capacity, const kve_demo_opts *o, float *scores,
                              kve_step_buffers *step, uint32_t n_new)
{
    (void)state, (void)kind, (void)k_cache, (void)capacity, (void)o, (void)scores, (void)step,
        (void)n_new;
    return KVE_ERR_UNAVAILABLE;
}
