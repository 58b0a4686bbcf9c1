/*
 * compact_body.h — kve_compact() on the device, written once for CUDA, HIP
 * and the host emulator (kve_thread.h). Two kernels, in stream order:
 *
 *   move   one block per (head, cache): the kept entries, in slot order, to
 *          entries 0..kept-1, in 16-, 4- or 1-byte units
 *   slots  one block per head: slot_pos the same way, then -1 after
 *
 * Both walk a head's slots in tiles of one slot per thread; a prefix scan
 * gives each kept slot its destination. In place, entry j moves from slot
 * kept[j] >= j, so a chunk is read whole before a barrier and written
 * after it, chunks in ascending order: no chunk overwrites what a later one
 * still has to read. Each block first checks what the host could not
 * (the evicted lists and slot_pos are device memory) and skips a head
 * that fails, raising an error record.
 */
#ifndef KVE_COMPACT_BODY_H
#define KVE_COMPACT_BODY_H

#include "kve_thread.h"
#include "kvevict.h"
#include "placement_body.h" /* kve_slots_lower */

/* The public desc as given (device pointers), plus the glue's plan. */
typedef struct kve_compact_args {
    kve_compact_desc d; /* dst[] all NULL: in place */
    uint64_t heads;
    uint32_t unit;  /* bytes per load/store: 16, 4 or 1 */
    uint32_t units; /* entry_bytes / unit */
    uint32_t in_place;
    uint64_t *errors; /* [KVE_DEV_ERR_KINDS] */
} kve_compact_args;

#define KVE_COMPACT_MAX_THREADS 1024u
#define KVE_MOVE_REGS 4 /* units each thread holds per chunk */

typedef struct kve_compact_smem {
    uint64_t wsum[KVE_MAX_WARPS];
    uint32_t map[KVE_COMPACT_MAX_THREADS]; /* source slot of each kept entry of a tile */
    uint32_t ev_range, ev_order, slot_range;
    uint32_t ne; /* n_evicted[h], read once: it decides who reaches the barriers */
} kve_compact_smem;

/* Whether slot t is in the ascending list ev[0..ne). */
KVE_FN int kve_is_evicted(const int32_t *ev, uint32_t ne, uint32_t t)
{
    uint32_t lo = kve_slots_lower(ev, 0, ne, t);
    return lo < ne && (uint32_t)ev[lo] == t;
}

/* The checks of kve_validate_compact_contents() for head h; 0 (and an error
 * record) when the head must be skipped. *ne gets its evicted count. */
KVE_FN int kve_compact_check(kve_tc *tc, kve_compact_smem *sm, const kve_compact_args *a,
                             uint64_t h, uint32_t *ne_out)
{
    const kve_compact_desc *d = &a->d;
    /* One thread reads the count and the block takes its value: a count that
     * each thread read for itself could differ between threads (the caller's
     * memory, written while this runs), and threads that returned here would
     * leave the others waiting at a barrier forever. */
    if (tc->tid == 0) {
        sm->ne = d->n_evicted[h];
        sm->ev_range = sm->ev_order = sm->slot_range = KVE_DEV_ERR_NONE >> 32;
    }
    kve_sync(tc);
    uint32_t n = d->n_slots, ne = sm->ne;
    if (ne > n || ne > d->evicted_stride) {
        if (tc->tid == 0)
            kve_raise(a->errors, KVE_DEV_ERR_NEVICTED, h, ne);
        return 0;
    }
    const int32_t *ev = d->evicted + h * d->evicted_stride;
    const int32_t *row = d->slot_pos + h * d->slot_pos_stride;
    uint32_t er = ~0u, eo = ~0u, sr = ~0u;
    for (uint32_t k = tc->tid; k < ne; k += tc->nt) {
        int32_t e = ev[k];
        if (e < 0 || (uint32_t)e >= n)
            er = k < er ? k : er;
        else if ((k && e <= ev[k - 1]) || row[e] < 0)
            eo = k < eo ? k : eo;
    }
    for (uint32_t t = tc->tid; t < n; t += tc->nt)
        if (row[t] < -1)
            sr = t < sr ? t : sr;
    kve_atomic_min_u32(&sm->ev_range, er);
    kve_atomic_min_u32(&sm->ev_order, eo);
    kve_atomic_min_u32(&sm->slot_range, sr);
    kve_sync(tc);
    er = sm->ev_range;
    eo = sm->ev_order;
    sr = sm->slot_range;
    if ((er & eo & sr) == ~0u) {
        *ne_out = ne;
        return 1;
    }
    if (tc->tid == 0) {
        if (er != ~0u)
            kve_raise(a->errors, KVE_DEV_ERR_EV_RANGE, h, er);
        if (eo != ~0u)
            kve_raise(a->errors, KVE_DEV_ERR_EV_ORDER, h, eo);
        if (sr != ~0u)
            kve_raise(a->errors, KVE_DEV_ERR_CSLOT_RANGE, h, sr);
    }
    return 0;
}

/* One tile of slots [t0, t0 + nt): *v = this thread's slot position when it
 * is kept (else -1), *at = its index among the tile's kept slots. Returns
 * the tile's kept count. The slot is read before the scan's barriers. */
KVE_FN uint32_t kve_compact_tile(kve_tc *tc, kve_compact_smem *sm, const int32_t *row,
                                 const int32_t *ev, uint32_t ne, uint32_t n, uint32_t t0,
                                 int32_t *v, uint32_t *at)
{
    uint32_t t = t0 + tc->tid;
    int32_t p = t < n ? row[t] : -1;
    int keep = p >= 0 && !kve_is_evicted(ev, ne, t);
    uint64_t total;
    *at = (uint32_t)kve_block_exscan(tc, sm->wsum, (uint64_t)keep, &total);
    *v = keep ? p : -1;
    return (uint32_t)total;
}

/* Move entries first..first+count-1 of one head from their source slots
 * map[0..count) (skipping those already in place), in units of T. */
#define KVE_DEFINE_MOVE(name, T, ZERO)                                                           \
    KVE_FN void name(kve_tc *tc, const kve_compact_args *a, const unsigned char *src, size_t ss, \
                     unsigned char *dst, size_t ds, const uint32_t *map, uint32_t first,         \
                     uint32_t count)                                                             \
    {                                                                                            \
        const T zero = ZERO;                                                                     \
        uint32_t units = a->units, chunk = tc->nt * KVE_MOVE_REGS;                               \
        uint32_t step_j = chunk / units, step_off = chunk % units;                               \
        uint32_t j[KVE_MOVE_REGS], off[KVE_MOVE_REGS];                                           \
        for (int i = 0; i < KVE_MOVE_REGS; i++) {                                                \
            uint32_t u = (uint32_t)i * tc->nt + tc->tid;                                         \
            j[i] = u / units;                                                                    \
            off[i] = u % units;                                                                  \
        }                                                                                        \
        for (uint64_t u0 = 0; u0 < (uint64_t)count * units; u0 += chunk) {                       \
            T r[KVE_MOVE_REGS];                                                                  \
            int go[KVE_MOVE_REGS];                                                               \
            for (int i = 0; i < KVE_MOVE_REGS; i++) {                                            \
                go[i] = j[i] < count && !(a->in_place && map[j[i]] == first + j[i]);             \
                r[i] = go[i] ? ((const T *)(src + (size_t)map[j[i]] * ss))[off[i]] : zero;       \
            }                                                                                    \
            if (a->in_place)                                                                     \
                kve_sync(tc);                                                                    \
            for (int i = 0; i < KVE_MOVE_REGS; i++) {                                            \
                if (go[i])                                                                       \
                    ((T *)(dst + (size_t)(first + j[i]) * ds))[off[i]] = r[i];                   \
                off[i] += step_off;                                                              \
                j[i] += step_j + (off[i] >= units);                                              \
                off[i] -= off[i] >= units ? units : 0;                                           \
            }                                                                                    \
        }                                                                                        \
    }
KVE_DEFINE_MOVE(kve_move_v16, kve_vec16, kve_vec16_zero())
KVE_DEFINE_MOVE(kve_move_u32, uint32_t, 0)
KVE_DEFINE_MOVE(kve_move_u8, uint8_t, 0)

/* Where head h's slot 0 lies in a cache view. */
KVE_FN unsigned char *kve_view_base(const kve_cache_view *v, const kve_compact_desc *d, uint64_t h)
{
    uint64_t s = h / ((uint64_t)d->n_layers * d->n_heads);
    uint64_t l = (h / d->n_heads) % d->n_layers, hh = h % d->n_heads;
    return (unsigned char *)v->base + s * v->stride_seq + l * v->stride_layer + hh * v->stride_head;
}

/* views[c] by value, through constant indices only. A run-time index into
 * the kernel's parameters makes AMD's compiler copy the whole argument
 * struct (744 bytes) to per-lane scratch memory; a select over constant
 * indices stays in registers. */
KVE_FN kve_cache_view kve_view_pick(const kve_cache_view *views, uint32_t c)
{
    kve_cache_view v = views[0];
    KVE_UNROLL
    for (uint32_t i = 1; i < KVE_MAX_CACHES; i++)
        if (i == c)
            v = views[i];
    return v;
}

/* Kernel "move": grid-stride over (head, cache) pairs. */
KVE_FN void kve_compact_move_grid(kve_tc *tc, kve_compact_smem *sm, const kve_compact_args *a)
{
    const kve_compact_desc *d = &a->d;
    for (uint64_t w = tc->bid; w < a->heads * d->n_caches; w += tc->nb) {
        uint64_t h = w / d->n_caches;
        uint32_t c = (uint32_t)(w % d->n_caches);
        kve_cache_view sv = kve_view_pick(d->src, c);
        kve_cache_view dv = a->in_place ? sv : kve_view_pick(d->dst, c);
        uint32_t ne, n = d->n_slots;
        if (kve_compact_check(tc, sm, a, h, &ne)) {
            const int32_t *row = d->slot_pos + h * d->slot_pos_stride;
            const int32_t *ev = d->evicted + h * d->evicted_stride;
            const unsigned char *src = kve_view_base(&sv, d, h);
            unsigned char *dst = kve_view_base(&dv, d, h);
            size_t ss = sv.stride_slot, ds = dv.stride_slot;
            uint32_t done = 0;
            for (uint32_t t0 = 0; t0 < n; t0 += tc->nt) {
                int32_t v;
                uint32_t at, count = kve_compact_tile(tc, sm, row, ev, ne, n, t0, &v, &at);
                if (v >= 0)
                    sm->map[at] = t0 + tc->tid;
                kve_sync(tc);
                if (a->unit == 16)
                    kve_move_v16(tc, a, src, ss, dst, ds, sm->map, done, count);
                else if (a->unit == 4)
                    kve_move_u32(tc, a, src, ss, dst, ds, sm->map, done, count);
                else
                    kve_move_u8(tc, a, src, ss, dst, ds, sm->map, done, count);
                done += count;
            }
        }
        kve_sync(tc); /* shared memory is reused by the next pair */
    }
}

/* Kernel "slots", after "move": kept positions to the front, -1 after. */
KVE_FN void kve_compact_slots_grid(kve_tc *tc, kve_compact_smem *sm, const kve_compact_args *a)
{
    const kve_compact_desc *d = &a->d;
    for (uint64_t h = tc->bid; h < a->heads; h += tc->nb) {
        uint32_t ne, n = d->n_slots;
        if (kve_compact_check(tc, sm, a, h, &ne)) {
            int32_t *row = d->slot_pos + h * d->slot_pos_stride;
            const int32_t *ev = d->evicted + h * d->evicted_stride;
            uint32_t done = 0;
            for (uint32_t t0 = 0; t0 < n; t0 += tc->nt) {
                int32_t v;
                uint32_t at, count = kve_compact_tile(tc, sm, row, ev, ne, n, t0, &v, &at);
                if (v >= 0)
                    row[done + at] = v;
                done += count;
            }
            for (uint32_t t = done + tc->tid; t < n; t += tc->nt)
                row[t] = -1;
        }
        kve_sync(tc);
    }
}

#endif /* KVE_COMPACT_BODY_H */
