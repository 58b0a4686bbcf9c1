/*
 * kve_launch.h — host-side planning shared by the CUDA and HIP glue and by
 * the host emulator, so all three launch the bodies with the same
 * arguments: kernel arguments from the public structs, block sizes, the
 * copy unit of compaction, and the device's error records as a kve_status.
 */
#ifndef KVE_LAUNCH_H
#define KVE_LAUNCH_H

#include <stdint.h>
#include <stdio.h>

#include "compact_body.h"
#include "evict_body.h"
#include "keys_body.h"

#define KVE_HOST_FN static inline

typedef kve_status (*kve_set_error_fn)(kve_status status, const char *fmt, ...);

/* Threads per block for eviction: about 8 slots per thread, a multiple of
 * 64 (so of every warp width), at most 512. */
KVE_HOST_FN uint32_t kve_evict_threads(uint32_t n_slots)
{
    return n_slots <= 256 ? 64 : n_slots <= 1024 ? 128 : n_slots <= 4096 ? 256 : 512;
}

#define KVE_COMPACT_THREADS 256u

KVE_HOST_FN kve_evict_args kve_evict_args_make(const kve_batch *b, const kve_evict_out *o,
                                               uint64_t heads, uint64_t *errors)
{
    kve_evict_args a = {*b, *o, heads, NULL, 0, errors};
    return a;
}

KVE_HOST_FN uint32_t kve_unit_fits(uint32_t unit, uintptr_t x) { return x % unit == 0; }

/* The widest unit (16, 4 or 1 bytes) dividing the entry size, every base
 * and every stride, so each load and store is naturally aligned. */
KVE_HOST_FN uint32_t kve_compact_unit(const kve_compact_desc *d)
{
    static const uint32_t units[] = {16, 4};
    int out_of_place = d->dst[0].base != NULL;
    for (int u = 0; u < 2; u++) {
        uint32_t ok = kve_unit_fits(units[u], d->entry_bytes);
        for (uint32_t c = 0; c < d->n_caches; c++)
            for (int side = 0; side <= out_of_place; side++) {
                const kve_cache_view *v = side ? &d->dst[c] : &d->src[c];
                ok &= kve_unit_fits(units[u], (uintptr_t)v->base) &
                      kve_unit_fits(units[u], v->stride_seq) &
                      kve_unit_fits(units[u], v->stride_layer) &
                      kve_unit_fits(units[u], v->stride_head) &
                      kve_unit_fits(units[u], v->stride_slot);
            }
        if (ok)
            return units[u];
    }
    return 1;
}

/* Arguments of both compaction kernels; KVE_ERR_RANGE when an entry has
 * more than 2^32-1 units. */
KVE_HOST_FN kve_status kve_compact_args_make(const kve_compact_desc *d, uint64_t *errors,
                                             kve_set_error_fn set_error, kve_compact_args *a)
{
    a->d = *d;
    a->heads = (uint64_t)d->n_seqs * d->n_layers * d->n_heads;
    a->unit = kve_compact_unit(d);
    if (d->entry_bytes / a->unit > 0xffffffffu)
        return set_error(KVE_ERR_RANGE, "desc.entry_bytes = %zu: too large for the device kernels",
                         d->entry_bytes);
    a->units = (uint32_t)(d->entry_bytes / a->unit);
    a->in_place = d->dst[0].base == NULL;
    a->errors = errors;
    return KVE_OK;
}

/*
 * The device's error records as a status and message (KVE_OK when none):
 * eviction's first, then compaction's; the lowest head; within a head the
 * order of the host checks (common/validate.c).
 */
KVE_HOST_FN kve_status kve_dev_errors_status(const uint64_t *rec, kve_set_error_fn set_error)
{
    static const int order[] = {KVE_DEV_ERR_SLOT_RANGE, KVE_DEV_ERR_DUPLICATE,
                                KVE_DEV_ERR_NEVICTED,   KVE_DEV_ERR_EV_RANGE,
                                KVE_DEV_ERR_EV_ORDER,   KVE_DEV_ERR_CSLOT_RANGE};
    int best = -1;
    for (int i = 0; i < KVE_DEV_ERR_KINDS; i++) {
        int k = order[i];
        if (rec[k] == KVE_DEV_ERR_NONE)
            continue;
        if (best < 0) {
            best = k;
            continue;
        }
        int same_call = (k <= KVE_DEV_ERR_DUPLICATE) == (best <= KVE_DEV_ERR_DUPLICATE);
        int both_ev = (k == KVE_DEV_ERR_EV_ORDER && best == KVE_DEV_ERR_EV_RANGE);
        /* a lower head wins; so does a lower k among evicted[] problems */
        if (same_call && ((rec[k] >> 32) < (rec[best] >> 32) || (both_ev && rec[k] < rec[best])))
            best = k;
    }
    if (best < 0)
        return KVE_OK;
    unsigned long long head = rec[best] >> 32;
    unsigned detail = (unsigned)rec[best];
    switch (best) {
    case KVE_DEV_ERR_SLOT_RANGE:
        return set_error(KVE_ERR_RANGE,
                         "batch.slot_pos[head %llu][slot %u] < -1: positions must be >= 0, or -1 "
                         "for an empty slot (checked on the device)",
                         head, detail);
    case KVE_DEV_ERR_DUPLICATE:
        return set_error(KVE_ERR_DUPLICATE,
                         "batch.slot_pos[head %llu]: position %u is held by two slots (checked "
                         "on the device)",
                         head, detail);
    case KVE_DEV_ERR_NEVICTED:
        return set_error(KVE_ERR_RANGE,
                         "desc.n_evicted[%llu] = %u: exceeds n_slots or evicted_stride (checked "
                         "on the device)",
                         head, detail);
    case KVE_DEV_ERR_EV_RANGE:
        return set_error(KVE_ERR_RANGE,
                         "desc.evicted[head %llu][%u]: not a slot in 0..n_slots-1 (checked on "
                         "the device)",
                         head, detail);
    case KVE_DEV_ERR_EV_ORDER:
        return set_error(KVE_ERR_INVALID,
                         "desc.evicted[head %llu][%u]: evicted slots must be strictly ascending "
                         "and hold a position (checked on the device)",
                         head, detail);
    default:
        return set_error(KVE_ERR_RANGE,
                         "desc.slot_pos[head %llu][slot %u] < -1: must be >= -1 (checked on the "
                         "device)",
                         head, detail);
    }
}

#endif /* KVE_LAUNCH_H */
