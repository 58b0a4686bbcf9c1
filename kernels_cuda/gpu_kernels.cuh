/*
 * gpu_kernels.cuh — the GPU backend's __global__ kernels: each a thin
 * wrapper that hands its thread coordinates, shared memory and arguments
 * to a body of this folder (the bodies the host emulator, tests/emu,
 * runs too). Included by backends/gpu.cu, so one source serves CUDA
 * (kernels_cuda/CMakeLists.txt) and HIP (backends/hip_backend.hip
 * includes backends/gpu.cu with KVE_GPU_HIP set, so that it takes
 * kve_hip_vendor.h's names). Block sizes and grids
 * are planned in kve_launch.h.
 */
#ifndef KVE_GPU_KERNELS_CUH
#define KVE_GPU_KERNELS_CUH

#include "kve_launch.h"

/* Blocks per SM a kernel must fit (CUDA's second __launch_bounds__
 * argument, a register cap): eviction 3 blocks of 512 threads (75%
 * occupancy on sm_90, 40 registers), compaction's "slots" kernel 8 of 256
 * (100%, 32 registers); the bodies meet both without spills (docs/GPU.md
 * "Registers and scratch"). HIP's second argument means waves per EU:
 * left out there. */
#if defined(KVE_GPU_HIP)
#define KVE_MIN_BLOCKS(n)
#else
#define KVE_MIN_BLOCKS(n) , n
#endif
#define KVE_EVICT_MIN_BLOCKS 3
#define KVE_COMPACT_SLOTS_MIN_BLOCKS 8

/* A kernel whose body takes only its thread coordinates and arguments. */
#define KVE_PLAIN_KERNEL(name, threads, args_t, body)                                            \
    __global__ void __launch_bounds__(threads) name(args_t a)                                    \
    {                                                                                            \
        kve_tc tc;                                                                               \
        KVE_TC_INIT(tc);                                                                         \
        body(&tc, &a);                                                                           \
    }

/* An eviction kernel: the block's fixed shared state, and its scratch in
 * dynamic shared memory (used when the arguments carry no workspace). */
#define KVE_EVICT_KERNEL(name, args_t, body)                                                     \
    __global__ void __launch_bounds__(KVE_EVICT_MAX_THREADS KVE_MIN_BLOCKS(KVE_EVICT_MIN_BLOCKS)) \
        name(args_t a)                                                                           \
    {                                                                                            \
        __shared__ kve_evict_smem sm;                                                            \
        extern __shared__ __align__(16) unsigned char kve_dyn_smem[];                            \
        kve_tc tc;                                                                               \
        KVE_TC_INIT(tc);                                                                         \
        body(&tc, &sm, &a, kve_dyn_smem);                                                        \
    }

/* A compaction kernel: the block's shared count and view. */
#define KVE_COMPACT_KERNEL(name, bounds, body)                                                   \
    __global__ void __launch_bounds__(bounds) name(kve_compact_args a)                           \
    {                                                                                            \
        __shared__ kve_compact_smem sm;                                                          \
        kve_tc tc;                                                                               \
        KVE_TC_INIT(tc);                                                                         \
        body(&tc, &sm, &a);                                                                      \
    }

KVE_PLAIN_KERNEL(kve_keys_kernel, KVE_KEYS_THREADS, kve_keys_args, kve_keys_grid)

KVE_EVICT_KERNEL(kve_evict_kernel, kve_evict_args, kve_evict_grid)

KVE_COMPACT_KERNEL(kve_compact_move_kernel, KVE_COMPACT_THREADS, kve_compact_move_grid)

KVE_COMPACT_KERNEL(kve_compact_slots_kernel,
                   KVE_COMPACT_THREADS KVE_MIN_BLOCKS(KVE_COMPACT_SLOTS_MIN_BLOCKS),
                   kve_compact_slots_grid)

/* A wave's eviction over a cache state's row list (state_body.h). */
KVE_EVICT_KERNEL(kve_state_evict_kernel, kve_state_evict_args, kve_state_evict_grid)

/* The jobs are in device memory (the state uploaded them, stream-ordered). */
KVE_PLAIN_KERNEL(kve_state_kernel, KVE_STATE_THREADS, kve_state_args, kve_state_grid)

/* An append's wave planned on the device: one block, its scan's warp sums
 * in shared memory. */
__global__ void __launch_bounds__(KVE_STATE_PLAN_THREADS) kve_state_plan_kernel(kve_state_plan_args a)
{
    __shared__ kve_plan_smem sm;
    kve_tc tc;
    KVE_TC_INIT(tc);
    kve_state_plan_run(&tc, &sm, &a);
}

/* A round's placement, one block per table (round_body.h). */
__global__ void __launch_bounds__(KVE_ROUND_THREADS) kve_state_round_kernel(kve_state_args a)
{
    __shared__ kve_round_smem sm;
    kve_tc tc;
    KVE_TC_INIT(tc);
    kve_state_round_grid(&tc, &sm, &a);
}

/* kve_cache_write's one launch: the state's moves and the writes
 * (cache_write_body.h). */
KVE_PLAIN_KERNEL(kve_cache_write_kernel, KVE_CACHE_WRITE_THREADS, kve_cache_write_args,
                 kve_cache_write_grid)

/* Built-in scorers: one launch a call, one block per (row, KV head, slot
 * tile), the call's rows uploaded to device memory (gpu_score); the
 * block's shared memory is all dynamic (kve_score_plan_make sizes it). */
__global__ void __launch_bounds__(KVE_SCORE_THREADS) kve_score_kernel(kve_score_args a)
{
    extern __shared__ __align__(16) unsigned char kve_dyn_smem[];
    kve_tc tc;
    KVE_TC_INIT(tc);
    kve_score_grid(&tc, kve_dyn_smem, &a);
}

#endif /* KVE_GPU_KERNELS_CUH */
