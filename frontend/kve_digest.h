/* kve_digest.h — the spec's digest over host copies of a batch. */
#ifndef KVE_DIGEST_H
#define KVE_DIGEST_H

#include "kvevict.h"

/* All pointers are host memory; evicted/n_evicted may be NULL. */
kve_status kve_digest_host(const kve_batch *batch, const kve_seq *seqs,
                           const int32_t *slot_pos, const int32_t *evicted, size_t evicted_stride,
                           const uint32_t *n_evicted, uint64_t *out_digest);

#endif
