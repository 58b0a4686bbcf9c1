/*
 * kve_launch.h — host-side planning shared by the CUDA and HIP glue and by
 * the host emulator, so all three launch the bodies with the same
 * arguments: kernel arguments from the public structs, block and grid
 * sizes, the copy units of compaction and the cache write, and the
 * device's error records as a kve_status.
 */
#ifndef KVE_LAUNCH_H
#define KVE_LAUNCH_H

#include <stdint.h>
#include <stdio.h>

#include "cache_write_body.h"
#include "compact_body.h"
#include "evict_body.h"
#include "keys_body.h"
#include "score_body.h"
#include "state_body.h"

#define KVE_HOST_FN static inline

typedef kve_status (*kve_set_error_fn)(kve_status status, const char *fmt, ...);

/* Blocks for @p work items, @p per_block each: at least 1, at most @p cap
 * (grid-stride kernels do the rest). */
KVE_HOST_FN uint32_t kve_launch_grid(uint64_t work, uint32_t per_block, uint32_t cap)
{
    uint64_t blocks = (work + per_block - 1) / per_block;
    return blocks < cap ? (uint32_t)(blocks ? blocks : 1) : cap;
}

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

/* Arguments of state_update's one launch (none when u->n_jobs = 0), on
 * kve_launch_grid(u->work, threads, cap) blocks: sized by the call's shape,
 * never by the jobs, which only the device reads. */
KVE_HOST_FN kve_state_args kve_state_args_make(const kve_state_update *u, uint64_t *errors)
{
    kve_state_args a = {*u, errors};
    return a;
}

#define KVE_CACHE_WRITE_THREADS 256u

/* Arguments of the cache write for a validated desc @p d with resolved
 * parts, on blocks of @p threads; KVE_ERR_RANGE when an entry has more
 * than 2^32-1 units. */
KVE_HOST_FN kve_status kve_cache_write_args_make(const kve_cache_write_desc *d, uint32_t threads,
                                                 uint64_t *errors, kve_set_error_fn set_error,
                                                 kve_cache_write_args *a)
{
    a->d = *d;
    uint32_t most = 1;
    for (uint32_t c = 0; c < KVE_MAX_CACHES; c++) {
        a->unit[c] = a->units[c] = 0;
        if (c >= d->n_caches)
            continue;
        const kve_cache_part *p = &d->part[c];
        size_t bytes = (size_t)p->dim * kve_dtype_size(p->dst_dtype);
        if (p->convert) {
            a->units[c] = p->dim; /* unit 0: one element a lane */
        } else {
            /* The widest power of two dividing the entry size, bases and strides. */
            uintptr_t all = bytes | p->src_stride_token | p->src_stride_head |
                            p->dst_stride_page | p->dst_stride_slot | p->dst_stride_head |
                            (uintptr_t)d->src[c] | (uintptr_t)d->dst[c] | 16;
            a->unit[c] = (uint32_t)(all & (~all + 1));
            if (bytes / a->unit[c] > 0xffffffffu)
                return set_error(KVE_ERR_RANGE,
                                 "desc: cache %u's entry of %zu bytes is too large for the "
                                 "device kernels",
                                 c, bytes);
            a->units[c] = (uint32_t)(bytes / a->unit[c]);
        }
        most = a->units[c] > most ? a->units[c] : most;
    }
    a->group = 1;
    while (a->group < most && threads % (a->group * 2) == 0)
        a->group *= 2; /* a power of two dividing the block */
    a->entries = (uint64_t)d->n_caches * d->n_tokens * d->n_heads;
    a->errors = errors;
    return KVE_OK;
}

#define KVE_SCORE_THREADS 256u

/* Launches kve_score needs for @p d's rows. */
KVE_HOST_FN uint32_t kve_score_launches(const kve_score_desc *d)
{
    return (d->n_rows + KVE_SCORE_ROWS_PER_LAUNCH - 1) / KVE_SCORE_ROWS_PER_LAUNCH;
}

/* Arguments of launch @p k of kve_score for a validated desc with resolved
 * strides: its rows travel in the parameters. Returns its work items
 * (rows x tables, one block each). */
KVE_HOST_FN uint32_t kve_score_args_make(const kve_score_desc *d, uint32_t k, uint64_t *errors,
                                         kve_score_args *a)
{
    kve_score_args_init(a, d, errors);
    uint32_t first = k * KVE_SCORE_ROWS_PER_LAUNCH, n = d->n_rows - first;
    n = n < KVE_SCORE_ROWS_PER_LAUNCH ? n : KVE_SCORE_ROWS_PER_LAUNCH;
    for (uint32_t i = 0; i < KVE_SCORE_ROWS_PER_LAUNCH; i++)
        a->row[i] = i < n ? d->rows[first + i] : d->rows[first];
    a->d.rows = NULL;
    a->n_rows = n;
    a->first_row = first;
    return n * a->n_tables;
}

/* How the host ranks error records: kinds in the order of the host checks
 * (common/validate.c, common/cache_write.c), each in the group of the
 * call that raises it; a rank below which the detail orders too. */
typedef struct kve_dev_err_rank {
    int kind, call, by_detail;
} kve_dev_err_rank;

/*
 * The device's error records as a status and message (KVE_OK when none):
 * eviction's first, then compaction's, the state's, the cache write's;
 * within a call the lowest head (token, for the cache write), then the
 * order of the host checks.
 */
KVE_HOST_FN kve_status kve_dev_errors_status(const uint64_t *rec, kve_set_error_fn set_error)
{
    static const kve_dev_err_rank order[KVE_DEV_ERR_KINDS] = {
        {KVE_DEV_ERR_SLOT_RANGE, 0, 0}, {KVE_DEV_ERR_DUPLICATE, 0, 0},
        {KVE_DEV_ERR_SCORE_NAN, 0, 0},  {KVE_DEV_ERR_NEVICTED, 1, 0},   {KVE_DEV_ERR_EV_RANGE, 1, 1},
        {KVE_DEV_ERR_EV_ORDER, 1, 1},   {KVE_DEV_ERR_CSLOT_RANGE, 1, 0},
        {KVE_DEV_ERR_STATE_SLOT, 2, 0}, {KVE_DEV_ERR_CW_ROW, 3, 1},
        {KVE_DEV_ERR_CW_SLOT, 3, 1},    {KVE_DEV_ERR_CW_PAGE, 3, 1},
        {KVE_DEV_ERR_SC_KEY, 4, 1}};
    int best = -1;
    for (int i = 0; i < KVE_DEV_ERR_KINDS; i++) {
        int k = order[i].kind;
        if (rec[k] == KVE_DEV_ERR_NONE)
            continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const kve_dev_err_rank *b = &order[best];
        int by_detail = order[i].by_detail && b->by_detail;
        /* a lower head wins within a call; so does a lower detail where it orders */
        if (order[i].call == b->call &&
            ((rec[k] >> 32) < (rec[b->kind] >> 32) || (by_detail && rec[k] < rec[b->kind])))
            best = i;
    }
    if (best < 0)
        return KVE_OK;
    unsigned long long head = rec[order[best].kind] >> 32;
    unsigned detail = (unsigned)rec[order[best].kind];
    switch (order[best].kind) {
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
    case KVE_DEV_ERR_SCORE_NAN:
        return set_error(KVE_ERR_INVALID,
                         "batch.scores[head %llu][slot %u] is NaN: a candidate's score must be a "
                         "number (+-inf allowed) (checked on the device)",
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
    case KVE_DEV_ERR_CSLOT_RANGE:
        return set_error(KVE_ERR_RANGE,
                         "desc.slot_pos[head %llu][slot %u] < -1: must be >= -1 (checked on the "
                         "device)",
                         head, detail);
    case KVE_DEV_ERR_STATE_SLOT:
        return set_error(KVE_ERR_INTERNAL,
                         "cache state row %llu, table %u: a freed slot or a slot_mapping entry "
                         "lies outside the table, skipped (checked on the device); rebuild the "
                         "row with kve_state_rebuild",
                         head, detail);
    case KVE_DEV_ERR_CW_ROW:
        return set_error(KVE_ERR_RANGE,
                         "desc.token_row[%llu]: must be 0..n_rows-1 (checked on the device)",
                         head);
    case KVE_DEV_ERR_CW_SLOT:
        return set_error(KVE_ERR_RANGE,
                         "desc.slots[token %llu][head %u]: must be -1 or a slot of the token's "
                         "row (below page_size, blocks_per_row * page_size, the length given "
                         "by indptr and last_page_len, which must be ascending and "
                         "1..page_size, or n_pages * page_size for flat slots) (checked on the "
                         "device)",
                         head, detail);
    case KVE_DEV_ERR_SC_KEY:
        return set_error(KVE_ERR_RANGE,
                         "kve_score: row %llu, slot %u: a candidate's slot or its page lies "
                         "outside desc.keys (its page table, page_size, n_pages) (checked on the "
                         "device; its score is 0)",
                         head, detail);
    default:
        return set_error(KVE_ERR_RANGE,
                         "desc.slots[token %llu][head %u]: its page (desc.block_table or "
                         "desc.indices) must be 0..n_pages-1 (checked on the device)",
                         head, detail);
    }
}

#endif /* KVE_LAUNCH_H */
