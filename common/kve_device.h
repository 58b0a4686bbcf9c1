/*
 * kve_device.h — the vendor shim every kernel body is written against. A
 * body (evict_body.h, compact_body.h, keys_body.h, state_body.h,
 * cache_write_body.h, convert_body.h, score_body.h) compiles three ways:
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
#ifndef KVE_DEVICE_H
#define KVE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVE_ON_GPU 1
#endif

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

#define KVE_FN static __device__ __forceinline__
#define KVE_UNROLL _Pragma("unroll") /* loops over constant trip counts */
#define KVE_HD_FN static __host__ __device__ __forceinline__ /* sizes both sides use */

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

KVE_FN uint32_t kve_atomic_add_u32(uint32_t *p, uint32_t v)
{
    return atomicAdd((unsigned int *)p, v);
}
/* Wrapping: sums of u64 are exact in any order, so results stay deterministic. */
KVE_FN void kve_atomic_add_u64(uint64_t *p, uint64_t v)
{
    atomicAdd((unsigned long long *)p, (unsigned long long)v);
}
KVE_FN void kve_atomic_min_u32(uint32_t *p, uint32_t v) { atomicMin((unsigned int *)p, v); }
KVE_FN void kve_atomic_max_u32(uint32_t *p, uint32_t v) { atomicMax((unsigned int *)p, v); }
KVE_FN void kve_atomic_min_u64(uint64_t *p, uint64_t v)
{
    atomicMin((unsigned long long *)p, (unsigned long long)v);
}
KVE_FN uint32_t kve_atomic_cas_u32(uint32_t *p, uint32_t expect, uint32_t desired)
{
    return atomicCAS((unsigned int *)p, expect, desired);
}

/* 16 bytes moved by one load and one store (ld/st.global.v4). */
typedef uint4 kve_vec16;
KVE_FN kve_vec16 kve_vec16_zero(void) { return make_uint4(0, 0, 0, 0); }
/* Word @p i (0..3, in memory order) of a 16-byte vector. */
KVE_FN uint32_t kve_vec16_word(kve_vec16 v, uint32_t i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* Orders this thread's earlier writes before its later ones for every
 * block of the grid (a block publishing results to the last block). */
KVE_FN void kve_fence(void) { __threadfence(); }

#define KVE_RESTRICT __restrict__

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

#define KVE_FN static inline
#define KVE_HD_FN static inline
#define KVE_UNROLL

/* The emulator's barrier and shuffle (tests/emu/emu_harness.c). */
void kve_emu_sync(kve_tc *tc);
uint64_t kve_emu_shfl_up_u64(kve_tc *tc, uint64_t v, uint32_t d);

KVE_FN void kve_sync(kve_tc *tc) { kve_emu_sync(tc); }

KVE_FN uint64_t kve_shfl_up_u64(kve_tc *tc, uint64_t v, uint32_t d)
{
    return kve_emu_shfl_up_u64(tc, v, d);
}

KVE_FN uint32_t kve_atomic_add_u32(uint32_t *p, uint32_t v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
KVE_FN void kve_atomic_add_u64(uint64_t *p, uint64_t v)
{
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

#define KVE_EMU_ATOMIC_EXTREMUM(name, type, better)                                              \
    KVE_FN void name(type *p, type v)                                                            \
    {                                                                                            \
        type old = __atomic_load_n(p, __ATOMIC_RELAXED);                                         \
        while (v better old &&                                                                   \
               !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))  \
            ;                                                                                    \
    }
KVE_EMU_ATOMIC_EXTREMUM(kve_atomic_min_u32, uint32_t, <)
KVE_EMU_ATOMIC_EXTREMUM(kve_atomic_max_u32, uint32_t, >)
KVE_EMU_ATOMIC_EXTREMUM(kve_atomic_min_u64, uint64_t, <)

KVE_FN uint32_t kve_atomic_cas_u32(uint32_t *p, uint32_t expect, uint32_t desired)
{
    __atomic_compare_exchange_n(p, &expect, desired, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return expect; /* the old value, as atomicCAS returns it */
}

typedef struct kve_vec16 {
    _Alignas(16) uint32_t w[4];
} kve_vec16;
KVE_FN kve_vec16 kve_vec16_zero(void) { return (kve_vec16){{0, 0, 0, 0}}; }
KVE_FN uint32_t kve_vec16_word(kve_vec16 v, uint32_t i) { return v.w[i]; }

KVE_FN void kve_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

#define KVE_RESTRICT restrict

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

/* Error records a kernel raises in device memory, one u64 per kind: the
 * smallest (head << 32 | detail) seen, all ones when none. The host reads
 * them at kve_context_synchronize(). */
typedef enum kve_dev_err_kind {
    KVE_DEV_ERR_SLOT_RANGE = 0, /* kve_evict: slot_pos < -1; detail = slot */
    KVE_DEV_ERR_DUPLICATE,      /* kve_evict: a position twice; detail = position */
    KVE_DEV_ERR_CSLOT_RANGE,    /* kve_compact: slot_pos < -1; detail = slot */
    KVE_DEV_ERR_NEVICTED,       /* kve_compact: n_evicted too large; detail = value */
    KVE_DEV_ERR_EV_RANGE,       /* kve_compact: evicted[k] not a slot; detail = k */
    KVE_DEV_ERR_EV_ORDER,       /* kve_compact: evicted[k] not ascending or empty; detail = k */
    KVE_DEV_ERR_STATE_SLOT,     /* state_update: slot outside a table; head = row, detail = table */
    KVE_DEV_ERR_CW_ROW,         /* kve_cache_write: token_row[t] not a row; head = t */
    KVE_DEV_ERR_CW_SLOT,        /* kve_cache_write: slot outside its row; head = t, detail = head */
    KVE_DEV_ERR_CW_PAGE,        /* kve_cache_write: page id not a page; head = t, detail = head */
    KVE_DEV_ERR_SCORE_NAN,      /* kve_evict, KVE_SCORED: a candidate's score is NaN; detail = slot */
    KVE_DEV_ERR_SC_KEY,         /* kve_score: a candidate's key outside the cache; head = row, detail = slot */
    KVE_DEV_ERR_CW_MOVE,        /* kve_cache_write: a move list the desc does not allow; head = move row, detail = head */
    KVE_DEV_ERR_STATE_CALL,     /* a cache state's append refused: head = call row, detail = kve_plan_refusal */
    KVE_DEV_ERR_KINDS
} kve_dev_err_kind;
#define KVE_DEV_ERR_NONE 0xffffffffffffffffull

KVE_FN void kve_raise(uint64_t *records, int kind, uint64_t head, uint32_t detail)
{
    uint64_t h = head < 0xffffffffull ? head : 0xffffffffull;
    kve_atomic_min_u64(&records[kind], (h << 32) | detail);
}

#endif /* KVE_DEVICE_H */
