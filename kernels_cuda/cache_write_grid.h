/*
 * cache_write_grid.h — kve_cache_write()'s grid on the device (CUDA, HIP,
 * the host emulator): the write and move items of common/cache_write_body.h
 * spread over groups of threads.
 */
#ifndef KVE_CACHE_WRITE_GRID_H
#define KVE_CACHE_WRITE_GRID_H

#include "cache_write_body.h"
#include "kve_thread.h"

/*
 * The kernel, one launch per call: a->entries write items (cache, token,
 * head), then a->move_entries move items (move row, head, pair), one group
 * each, grid-stride. Consecutive groups take consecutive heads, then
 * tokens (pairs), so a dense source is read in order.
 *
 * Order without a grid-wide barrier: every move reads the cache as it was
 * before the call, and a write may land in a slot a move reads (a round
 * frees the top slots, moves the kept entries above the bound down into
 * holes, and the step's tokens are written into freed slots). So a move
 * out of a slot the call writes is made by that slot's write item, by the
 * same lanes that then overwrite it, each lane first reading the bytes it
 * writes later; every other move is made by its move item, which reads and
 * writes slots no write item touches. Moves share no slot among
 * themselves (the API's precondition), and no two writes share one, so
 * each destination byte has one writer and the result is the CPU's moves
 * then writes, whatever the launch.
 */
KVE_FN void kve_cache_write_grid(kve_tc *tc, const kve_cache_write_args *a)
{
    uint32_t g = a->group, per_block = tc->nt / g, lane = tc->tid % g;
    uint64_t step = (uint64_t)tc->nb * per_block, total = a->entries + a->move_entries;
    for (uint64_t w = (uint64_t)tc->bid * per_block + tc->tid / g; w < total; w += step) {
        if (w < a->entries)
            kve_cw_write_item(a, w, lane);
        else
            kve_cw_move_item(a, w - a->entries, lane);
    }
}

#endif /* KVE_CACHE_WRITE_GRID_H */
