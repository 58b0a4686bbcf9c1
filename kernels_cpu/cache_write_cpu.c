/*
 * cache_write_cpu.c — the CPU backend's engine-integration ops: the cache
 * state's table jobs (common/kve_state.h) and kve_cache_write with its
 * moves. Arguments arrive validated (backends/api.c habit); OpenMP across
 * jobs, move lists or tokens, each element written by exactly one thread.
 * The per-table code is the device's (common/device/state_body.h), so the
 * CPU and the GPUs place tokens by one implementation.
 */
#include <string.h>

#include "device/state_body.h"
#include "kve_backend_impl.h"
#include "kve_error.h"

kve_status kve_cpu_state_update(kve_context *ctx, const kve_state_update *u)
{
    /* Decode steps bring one small job per sequence; threads only pay off
     * for big batches. A table that fails the body's checks cannot come
     * from the state's own jobs: it is an internal error. */
    int threads = u->n_jobs >= 64 ? ctx->threads : 1, bad = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : bad)
    for (uint32_t i = 0; i < u->n_jobs; i++) {
        uint64_t items = kve_state_job_items(u, &u->jobs[i]);
        for (uint64_t e = 0; e < items; e++)
            bad |= kve_state_item_run(u, &u->jobs[i], e);
    }
    return bad ? kve_error_set(KVE_ERR_INTERNAL, "state_update: a job's table does not fit")
               : KVE_OK;
}

/* Page of (row, slot) through the desc's page table (validated). */
static size_t kve_page_of(const kve_cache_write_desc *d, int32_t row, int64_t slot)
{
    size_t blk = (size_t)(slot / d->page_size);
    switch (d->page_table) {
    case KVE_PAGES_BLOCK_TABLE:
        return (size_t)d->block_table[(size_t)row * d->blocks_per_row + blk];
    case KVE_PAGES_INDPTR: return (size_t)d->indices[(size_t)d->indptr[row] + blk];
    case KVE_PAGES_NONE: break;
    }
    return (size_t)row;
}

static size_t kve_entry_at(const kve_cache_write_desc *d, int32_t row, int64_t slot, uint32_t h)
{
    return kve_page_of(d, row, slot) * d->dst_stride_page +
           (size_t)(slot % d->page_size) * d->dst_stride_slot + h * d->dst_stride_head;
}

/* The moves: a list's sources and destinations are disjoint slots, so
 * every pair copies straight from its source. */
static void kve_cpu_moves(kve_context *ctx, const kve_cache_write_desc *d)
{
    uint64_t lists = (uint64_t)d->n_move_rows * d->n_heads;
    int threads = lists >= 256 ? ctx->threads : 1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (uint64_t l = 0; l < lists; l++) {
        uint32_t i = (uint32_t)(l / d->n_heads), h = (uint32_t)(l % d->n_heads);
        size_t list = (size_t)i * d->moves_stride_row + (size_t)h * d->moves_stride_head;
        int32_t row = d->move_row ? d->move_row[i] : (int32_t)i;
        const int32_t *pair = d->moves + 2 * list * d->max_moves;
        for (uint32_t k = 0; k < d->n_moves[list]; k++) {
            size_t src = kve_entry_at(d, row, pair[2 * k], h),
                   dst = kve_entry_at(d, row, pair[2 * k + 1], h);
            for (uint32_t c = 0; c < d->n_caches; c++)
                memcpy((char *)d->dst[c] + dst, (const char *)d->dst[c] + src, d->entry_bytes);
        }
    }
}

kve_status kve_cpu_cache_write(kve_context *ctx, const kve_cache_write_desc *d)
{
    if (d->moves)
        kve_cpu_moves(ctx, d);
    int threads = d->n_tokens >= 64 ? ctx->threads : 1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (uint32_t t = 0; t < d->n_tokens; t++) {
        int32_t row = d->token_row[t];
        for (uint32_t h = 0; h < d->n_heads; h++) {
            int64_t slot =
                d->slots[(size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head];
            if (slot < 0)
                continue;
            size_t off = kve_entry_at(d, row, slot, h);
            size_t src_off = (size_t)t * d->src_stride_token + (size_t)h * d->src_stride_head;
            for (uint32_t c = 0; c < d->n_caches; c++)
                memcpy((char *)d->dst[c] + off, (const char *)d->src[c] + src_off, d->entry_bytes);
        }
    }
    return KVE_OK;
}
