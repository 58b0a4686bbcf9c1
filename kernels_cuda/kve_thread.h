/*
 * kve_thread.h — a kernel body's thread context, for CUDA, HIP and the host
 * emulator (tests/emu): the launch as a kve_tc, the block's barrier, warp
 * shuffles, the block-wide prefix sum, a grid-wide fence, a 16-byte load.
 * Only the GPU grids and the emulator use it; the qualifiers, atomics,
 * 16-byte vectors and error records that the CPU's shared rules need too
 * are common/kve_device.h's.
 *
 *   CUDA (nvcc)   threadIdx/blockDim, __syncthreads, __shfl_up_sync
 *   HIP (hipcc)   the same names, __shfl_up; warpSize is 32 or 64 per target
 *   C11 (host)    the emulator of tests/emu: a block's threads are fibers
 *                 run in phases from barrier to barrier, a shuffle goes
 *                 through a shared buffer
 *
 * Bodies see their launch only through a kve_tc, and the warp width only as
 * tc->ws: nothing assumes 32 (AMD's CDNA wavefronts are 64 wide).
 */
#ifndef KVE_THREAD_H
#define KVE_THREAD_H

#include "kve_device.h"

/* Most warps in a block: 1024 threads of 32 lanes. */
#define KVE_MAX_WARPS 32u

struct kve_emu_block; /* tests/emu/emu_harness.c */

/* One thread's view of its launch. */
typedef struct kve_tc {
    uint32_t tid, nt; /* thread in the block, threads per block */
    uint32_t ws;      /* warp width, from the device (it divides nt) */
    uint32_t bid, nb; /* block in the grid, blocks in the grid */
#ifndef KVE_ON_GPU
    struct kve_emu_block *emu;
    uint32_t xturn; /* which shuffle buffer this thread uses next */
#endif
} kve_tc;

#ifdef KVE_ON_GPU

#define KVE_TC_INIT(tc)                                                                          \
    do {                                                                                         \
        (tc).tid = threadIdx.x;                                                                  \
        (tc).nt = blockDim.x;                                                                    \
        (tc).ws = (uint32_t)warpSize;                                                            \
        (tc).bid = blockIdx.x;                                                                   \
        (tc).nb = gridDim.x;                                                                     \
    } while (0)

KVE_FN void kve_sync(kve_tc *tc)
{
    (void)tc;
    __syncthreads();
}

/* Lane l gets lane l-d's value (its own when l < d); every lane calls it. */
KVE_FN uint64_t kve_shfl_up_u64(kve_tc *tc, uint64_t v, uint32_t d)
{
    (void)tc;
#if defined(__HIPCC__)
    return __shfl_up((unsigned long long)v, d);
#else
    return __shfl_up_sync(0xffffffffu, (unsigned long long)v, d);
#endif
}

/* Orders this thread's earlier writes before its later ones for every
 * block of the grid (a block publishing results to the last block). */
KVE_FN void kve_fence(void) { __threadfence(); }

/* Four int32 at p (16-byte aligned) in one load. */
KVE_FN void kve_load_i32x4(const int32_t *KVE_RESTRICT p, int32_t out[4])
{
    int4 q = *(const int4 *)p;
    out[0] = q.x;
    out[1] = q.y;
    out[2] = q.z;
    out[3] = q.w;
}

#else /* host emulation */

/* The emulator's barrier and shuffle (tests/emu/emu_harness.c). */
void kve_emu_sync(kve_tc *tc);
uint64_t kve_emu_shfl_up_u64(kve_tc *tc, uint64_t v, uint32_t d);

KVE_FN void kve_sync(kve_tc *tc) { kve_emu_sync(tc); }

KVE_FN uint64_t kve_shfl_up_u64(kve_tc *tc, uint64_t v, uint32_t d)
{
    return kve_emu_shfl_up_u64(tc, v, d);
}

KVE_FN void kve_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

KVE_FN void kve_load_i32x4(const int32_t *KVE_RESTRICT p, int32_t out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = p[i];
}

#endif

/*
 * Exclusive prefix sum of @p v over the block, in thread order; *total gets
 * the block's sum. Warp-level shuffles of width tc->ws, then the warp sums
 * through @p wsum (KVE_MAX_WARPS words of shared memory). Every thread of
 * the block calls it; nt must be a multiple of ws.
 */
KVE_FN uint64_t kve_block_exscan(kve_tc *tc, uint64_t *wsum, uint64_t v, uint64_t *total)
{
    uint32_t lane = tc->tid % tc->ws, warp = tc->tid / tc->ws, nw = tc->nt / tc->ws;
    uint64_t x = v;
    for (uint32_t d = 1; d < tc->ws; d <<= 1) {
        uint64_t y = kve_shfl_up_u64(tc, x, d);
        if (lane >= d)
            x += y;
    }
    kve_sync(tc); /* the previous scan's readers are done with wsum */
    if (lane == tc->ws - 1)
        wsum[warp] = x;
    kve_sync(tc);
    uint64_t before = 0, all = 0;
    for (uint32_t w = 0; w < nw; w++) {
        before += w < warp ? wsum[w] : 0;
        all += wsum[w];
    }
    *total = all;
    return before + x - v;
}

#endif /* KVE_THREAD_H */
