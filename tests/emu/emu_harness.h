/*
 * emu_harness.h — runs a kernel body of kernels_cuda/ on the host: a
 * block's threads are fibers on the calling thread (emu_harness.c), run in
 * phases that end where kve_sync() or a warp shuffle would release them, in
 * a fresh random order every phase; a shuffle goes through a shared buffer,
 * for any block size and any warp width (32 or 64) that divides it. Blocks
 * of a grid run one after another on the same fibers, each with fresh
 * (garbage-filled) shared memory. Threads of a block that do not reach the
 * same barriers (a GPU block would hang) stop the run: a message on stderr,
 * then abort().
 *
 * A serial pool runs bodies that never synchronize (no kve_sync, no
 * shuffle) on the calling thread instead: blocks in a random order, and in
 * each block the threads one after another, in a random order, each to its
 * end. Any order is a schedule a GPU may pick, and it is cheap.
 */
#ifndef KVE_EMU_HARNESS_H
#define KVE_EMU_HARNESS_H

#include <stddef.h>

#include "kve_thread.h"

typedef struct kve_emu_pool kve_emu_pool;

/* What one thread of one block runs; @p smem is the block's shared memory. */
typedef void (*kve_emu_body)(kve_tc *tc, unsigned char *smem, void *arg);

/* @p nt threads per block, warp width @p ws (nt % ws == 0); NULL on failure. */
kve_emu_pool *kve_emu_pool_create(uint32_t nt, uint32_t ws);
/* A serial pool of the same shape whose orders come from @p seed. */
kve_emu_pool *kve_emu_pool_create_serial(uint32_t nt, uint32_t ws, uint64_t seed);
/* Threads per block and warp width of @p pool. */
void kve_emu_pool_shape(const kve_emu_pool *pool, uint32_t *nt, uint32_t *ws);
void kve_emu_pool_destroy(kve_emu_pool *pool);

/* Run blocks 0..grid-1 of @p body with @p smem_bytes of shared memory each. */
int kve_emu_launch(kve_emu_pool *pool, uint32_t grid, size_t smem_bytes, kve_emu_body body,
                   void *arg);

/* The order a block's threads run in within a phase (between two barriers;
 * on a serial pool: the blocks, and each block's threads to their end). */
typedef enum kve_emu_order {
    KVE_EMU_ORDER_RANDOM = 0, /* drawn anew every phase from the pool's generator (the default) */
    KVE_EMU_ORDER_FORWARD,    /* thread 0 first (blocks 0 first) */
    KVE_EMU_ORDER_REVERSE     /* the last thread first (the last block first) */
} kve_emu_order;

#define KVE_EMU_NO_PHASE UINT32_MAX

/* The next launches run their phases in order @p mode, except phase
 * @p flip_phase of every block (0: up to the first barrier; KVE_EMU_NO_PHASE:
 * none), which runs in order @p flip_mode. */
void kve_emu_pool_order(kve_emu_pool *pool, kve_emu_order mode, uint32_t flip_phase,
                        kve_emu_order flip_mode);

/* The most phases a block of the last launch ran (1: no barrier met). */
uint32_t kve_emu_pool_phases(const kve_emu_pool *pool);

#endif
