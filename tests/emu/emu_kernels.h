/*
 * emu_kernels.h — the kernel bodies of kernels_cuda/ compiled as C and
 * launched on the emulator with the arguments the CUDA/HIP glue would pass
 * (kernels_cuda/kve_launch.h). Inputs and outputs are host memory.
 */
#ifndef KVE_EMU_KERNELS_H
#define KVE_EMU_KERNELS_H

#include "emu_harness.h"
#include "kve_cases.h"
#include "kve_backend.h"
#include "kve_launch.h"
#include "kvevict.h"

/* The device's error records after a launch. */
typedef struct kve_emu_errors {
    uint64_t rec[KVE_DEV_ERR_KINDS];
} kve_emu_errors;

void kve_emu_errors_reset(kve_emu_errors *e);

/* ---- the order check ------------------------------------------------------ *
 * Memory a launch may write, as the emulated device sees it: the emulated
 * context's allocations (emu_backend.c tracks them), its error records,
 * and whatever a test adds. */
void kve_emu_track(void *p, size_t bytes);
void kve_emu_untrack(const void *p);

/* With @p on, every launch below runs three times from the same tracked
 * memory: the threads of each block in forward, reverse and random order
 * between barriers. When the memory after one differs from the memory after
 * forward, the body's outputs depend on an order a GPU may pick: the run
 * stops (a message on stderr, then abort()) naming the kernel and the first
 * phase whose order alone changes them ("phase k": after barrier k). Eviction
 * scratch in a workspace is left out of the comparison. Returns the setting
 * it replaces. */
int kve_emu_order_check(int on);

/* Launch @p body as kernel @p kernel (the order check applies); bytes of
 * [@p scratch, + @p scratch_bytes) are scratch, not outputs. */
int kve_emu_run(kve_emu_pool *pool, const char *kernel, uint32_t grid, size_t smem,
                kve_emu_body body, void *arg, const void *scratch, size_t scratch_bytes);
/* The status the GPU backend's synchronize would return, with its message
 * copied into @p msg. */
kve_status kve_emu_errors_status(const kve_emu_errors *e, char *msg, size_t msg_bytes);

int kve_emu_keys(kve_emu_pool *pool, uint32_t grid, uint64_t seed, uint32_t flags,
                 const kve_coord *coords, size_t n, uint64_t *keys);

/* The launch limits of an emulated device with grids of at most
 * @p max_grid blocks (eviction's too) whose shared memory holds any
 * eviction scratch. */
kve_launch_limits kve_emu_limits(uint32_t max_grid);

/* kve_evict as launch plan @p p (kve_launch.h) says: its grid, its scratch
 * in the block's shared memory or in @p workspace (p->workspace_bytes);
 * the block size is the pool's. */
int kve_emu_evict_planned(kve_emu_pool *pool, const kve_evict_plan *p, const kve_batch *b,
                          const kve_evict_out *o, void *workspace, kve_emu_errors *e);

/* kve_evict on @p grid blocks (more than the heads: idle blocks); scratch
 * in "global" memory (a garbage-filled workspace) when @p global_scratch,
 * else in the block's shared memory. */
int kve_emu_evict(kve_emu_pool *pool, uint32_t grid, int global_scratch, const kve_batch *b,
                  const kve_evict_out *o, kve_emu_errors *e);

/* kve_compact: the move kernel on @p grid blocks, then the slots kernel. */
int kve_emu_compact(kve_emu_pool *pool, uint32_t grid, const kve_compact_desc *d,
                    kve_emu_errors *e, uint32_t *unit_used);

/* The backend op state_update: the GPU glue's one launch (at most
 * @p max_grid blocks; *grid_used gets its blocks, 0 when it has no jobs). */
int kve_emu_state_update(kve_emu_pool *pool, uint32_t max_grid, const kve_state_update *u,
                         kve_emu_errors *e, uint32_t *grid_used);

/* The backend op state_plan: one block. */
int kve_emu_state_plan(kve_emu_pool *pool, const kve_state_plan *p, kve_emu_errors *e);

/* The backend op state_round (ROUND jobs, a block per table) as the GPU
 * driver launches it under @p lim, on @p pool (threaded: the body has
 * barriers). */
int kve_emu_state_round(kve_emu_pool *pool, const kve_launch_limits *lim,
                        const kve_state_update *u, kve_emu_errors *e);

/* The backend op evict over rows as plan @p p says (kve_evict_plan_make of
 * se->b): scratch in shared memory or in se->workspace. */
int kve_emu_state_evict(kve_emu_pool *pool, const kve_evict_plan *p, const kve_state_evict *se,
                        kve_emu_errors *e);

/* The cache write's one launch for a desc with resolved strides, on
 * blocks of @p threads under @p lim (as the GPU driver plans it); KVE_OK,
 * or the status of a desc the device cannot take. */
kve_status kve_emu_cache_write_plan(const kve_cache_write_desc *d, uint32_t threads,
                                    const kve_launch_limits *lim, kve_cache_write_plan *p);

/* The backend op cache_write for a desc with resolved strides (at most
 * @p max_grid blocks); KVE_OK, or the status of a desc the device cannot
 * take. *unit_used gets the copy unit. */
kve_status kve_emu_cache_write(kve_emu_pool *pool, uint32_t max_grid,
                               const kve_cache_write_desc *d, kve_emu_errors *e,
                               uint32_t *unit_used);

/* The backend op score's one launch for call @p c (kve_score_call), as plan
 * @p p (kve_score_plan_make, for the pool's block size) says: a given
 * call's rows already uploaded at @p scratch's start (p->scratch_bytes of
 * device memory), the counters at @p arrived (p->arrived_bytes, zeros). */
int kve_emu_score(kve_emu_pool *pool, const kve_score_plan *p, const kve_score_call *c,
                  unsigned char *scratch, uint32_t *arrived, kve_emu_errors *e);

/* A case of kve_cases.h over @p bufs: eviction or compaction. */
int kve_emu_run_case(kve_emu_pool *pool, uint32_t grid, int global_scratch, const kve_case *c,
                     const kve_case_bufs *bufs, kve_emu_errors *e, uint32_t *unit_used);

#endif
