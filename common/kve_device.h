/*
 * kve_device.h — the qualifiers every shared rule (common/) is written with,
 * for CUDA (nvcc), HIP (hipcc) and C11 (the CPU, the front end, the host
 * emulator of tests/emu): KVE_FN, KVE_HD_FN, KVE_ON_GPU, KVE_UNROLL,
 * KVE_RESTRICT; the relaxed atomics and the error records (kve_raise) that
 * the job interpreter raises on the CPU too; the 16-byte vector of the
 * cache write's copies. A kernel's thread context (kve_tc, barriers,
 * shuffles, the block scan) is kernels_cuda/kve_thread.h's: nothing in
 * common/ takes one.
 */
#ifndef KVE_DEVICE_H
#define KVE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVE_ON_GPU 1
#endif

#ifdef KVE_ON_GPU

#define KVE_FN static __device__ __forceinline__
#define KVE_UNROLL _Pragma("unroll") /* loops over constant trip counts */
#define KVE_HD_FN static __host__ __device__ __forceinline__ /* sizes both sides use */

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

#define KVE_RESTRICT __restrict__

#else /* host emulation */

#define KVE_FN static inline
#define KVE_HD_FN static inline
#define KVE_UNROLL

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

#define KVE_RESTRICT restrict

#endif

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
