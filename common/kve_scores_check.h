/* kve_scores_check.h — the per-head NaN check of a scored batch's scores
 * (validate_scores.c), a content rule the CPU backend (per head) and the
 * cache state (per call) run alike. */
#ifndef KVE_SCORES_CHECK_H
#define KVE_SCORES_CHECK_H

#include "kvevict.h"

/* The lowest (head, slot) of a candidate with a NaN score (host memory), or
 * head SIZE_MAX; KVE_ERR_NOMEM when it cannot allocate. */
kve_status kve_scores_first_nan(const kve_batch *batch, size_t heads, size_t *out_head,
                                uint32_t *out_slot);
/* The lowest candidate slot of head @p head holding a NaN score, or
 * UINT32_MAX (host memory; slot_pos of the head checked); @p tmp: n_slots
 * words. Scores are read at candidates only, and only when the head evicts. */
uint32_t kve_scores_head_nan_slot(const kve_batch *batch, size_t head, uint32_t *tmp);

#endif
