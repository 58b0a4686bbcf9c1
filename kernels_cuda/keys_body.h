/*
 * keys_body.h — kve_keys(): the spec's key of each coordinate, one thread
 * per coordinate (grid-stride), written once for CUDA, HIP and the host
 * emulator (kve_thread.h).
 */
#ifndef KVE_KEYS_BODY_H
#define KVE_KEYS_BODY_H

#include "kve_thread.h"
#include "kve_key.h"
#include "kvevict.h"

typedef struct kve_keys_args {
    uint64_t seed;
    uint32_t flags;
    const kve_coord *coords;
    uint64_t n;
    uint64_t *keys;
} kve_keys_args;

KVE_FN void kve_keys_grid(kve_tc *tc, const kve_keys_args *a)
{
    uint64_t step = (uint64_t)tc->nb * tc->nt;
    for (uint64_t i = (uint64_t)tc->bid * tc->nt + tc->tid; i < a->n; i += step) {
        kve_coord c = a->coords[i];
        a->keys[i] = kve_key(kve_seq_seed(a->seed, c.seq_id), a->flags, c.layer, c.head, c.pos,
                             c.round);
    }
}

#endif /* KVE_KEYS_BODY_H */
