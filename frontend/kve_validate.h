/* kve_validate.h — argument checks done once, before any backend runs
 * (validate.c); the scores' NaN check that the CPU backend runs too is
 * common/kve_scores_check.h's. */
#ifndef KVE_VALIDATE_H
#define KVE_VALIDATE_H

#include "kve_scores_check.h"
#include "kvevict.h"

/* Shape, pointers, strides and ranges of a batch; *out_heads = its heads. */
kve_status kve_validate_batch(const kve_batch *batch, size_t *out_heads);

/* Output rows: pointers, strides, and no overlap with each other or slot_pos. */
kve_status kve_validate_evict_out(const kve_batch *batch, size_t heads, const kve_evict_out *out);

/* KVE_SCORED batches: not with KVE_PERSISTENT, scores given, stride >= n_slots. */
kve_status kve_validate_batch_scores(const kve_batch *batch, size_t heads);

/* Shape, strides (no two entries of one cache overlap) and buffers. */
kve_status kve_validate_compact(const kve_compact_desc *desc, size_t *out_heads);

/* Evicted lists (host memory): counts, ascending, in range, valid slots. */
kve_status kve_validate_compact_contents(const kve_compact_desc *desc, size_t heads);

/* Bytes from the first to one past the last byte of a strided 4-d view of
 * entries; KVE_ERR_ALIAS when two entries overlap. */
kve_status kve_view_span(const char *what, const size_t extent[4], const size_t stride[4],
                         size_t entry_bytes, size_t *out_span);

#endif
