/*
 * cache_write_body.h — kve_cache_write() on the device (vLLM's
 * reshape_and_cache_flash under slot reuse), written once for CUDA, HIP and
 * the host emulator (kve_device.h).
 *
 * Work is one entry per (cache, token, head). A group of `group` threads
 * (a power of two dividing the block, independent of the warp width) copies
 * one entry in units of 16, 8, 4, 2 or 1 bytes, the widest that divides the
 * entry size, every base and every stride; groups take entries in turn
 * (grid-stride). Consecutive groups take consecutive heads, then tokens, so
 * a dense source is read in order. Every destination byte is written by one
 * thread (the API's precondition: no two entries share a destination), so
 * the result does not depend on the launch.
 *
 * Row, slot and page ids are device memory the host never saw: each group
 * checks its entry as backends/cache_write.c checks host memory, skips one
 * that fails and raises a KVE_DEV_ERR_CW_* record (cache 0's group only, so
 * one record per entry).
 */
#ifndef KVE_CACHE_WRITE_BODY_H
#define KVE_CACHE_WRITE_BODY_H

#include "kve_device.h"
#include "kvevict.h"

typedef struct kve_cache_write_args {
    kve_cache_write_desc d; /* strides resolved (kve_cache_write_resolve) */
    uint64_t entries;       /* n_caches * n_tokens * n_heads */
    uint32_t unit;          /* bytes per load/store: 16, 8, 4, 2 or 1 */
    uint32_t units;         /* entry_bytes / unit */
    uint32_t group;         /* threads per entry */
    uint64_t *errors;       /* [KVE_DEV_ERR_KINDS] */
} kve_cache_write_args;

/* The byte offset of entry (t, h) in every destination cache, or 0 when it
 * is skipped: slot -1, or a row, slot or page the desc does not allow (an
 * error raised when @p raise). */
KVE_FN int kve_cw_target(const kve_cache_write_args *a, uint32_t t, uint32_t h, int raise,
                         size_t *off)
{
    const kve_cache_write_desc *d = &a->d;
    int32_t row = d->token_row[t];
    if (row < 0 || (uint32_t)row >= d->n_rows) {
        if (raise && h == 0)
            kve_raise(a->errors, KVE_DEV_ERR_CW_ROW, t, 0);
        return 0;
    }
    int64_t slot = d->slots[(size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head];
    if (slot == -1)
        return 0;
    int64_t ps = d->page_size, limit = ps, page = row;
    if (d->page_table == KVE_PAGES_BLOCK_TABLE) {
        limit = (int64_t)d->blocks_per_row * ps;
        if (slot >= 0 && slot < limit)
            page = d->block_table[(size_t)row * d->blocks_per_row + (size_t)(slot / ps)];
    } else if (d->page_table == KVE_PAGES_INDPTR) {
        int32_t lo = d->indptr[row], hi = d->indptr[row + 1], last = d->last_page_len[row];
        /* the host's rule: indptr[0] = 0, and the row within indices */
        int ok = d->indptr[0] == 0 && lo >= 0 && hi >= lo && hi <= d->indptr[d->n_rows] &&
                 (hi == lo || (last >= 1 && last <= ps));
        limit = ok && hi > lo ? (int64_t)(hi - lo - 1) * ps + last : 0;
        if (slot >= 0 && slot < limit)
            page = d->indices[(size_t)lo + (size_t)(slot / ps)];
    }
    if (slot < 0 || slot >= limit) {
        if (raise)
            kve_raise(a->errors, KVE_DEV_ERR_CW_SLOT, t, h);
        return 0;
    }
    if (page < 0 || page >= d->n_pages) {
        if (raise)
            kve_raise(a->errors, KVE_DEV_ERR_CW_PAGE, t, h);
        return 0;
    }
    *off = (size_t)page * d->dst_stride_page + (size_t)(slot % ps) * d->dst_stride_slot +
           (size_t)h * d->dst_stride_head;
    return 1;
}

/* One group's share of an entry: units lane, lane + group, ... of type T. */
#define KVE_DEFINE_COPY(name, T)                                                                 \
    KVE_FN void name(unsigned char *dst, const unsigned char *src, uint32_t units, uint32_t lane, \
                     uint32_t group)                                                             \
    {                                                                                            \
        for (uint32_t u = lane; u < units; u += group)                                           \
            ((T *)dst)[u] = ((const T *)src)[u];                                                 \
    }
KVE_DEFINE_COPY(kve_copy_v16, kve_vec16)
KVE_DEFINE_COPY(kve_copy_u64, uint64_t)
KVE_DEFINE_COPY(kve_copy_u32, uint32_t)
KVE_DEFINE_COPY(kve_copy_u16, uint16_t)
KVE_DEFINE_COPY(kve_copy_u8, uint8_t)

/* The kernel: every entry of @p a, one group each, grid-stride. */
KVE_FN void kve_cache_write_grid(kve_tc *tc, const kve_cache_write_args *a)
{
    const kve_cache_write_desc *d = &a->d;
    uint32_t g = a->group, per_block = tc->nt / g, lane = tc->tid % g;
    uint64_t tokens_heads = (uint64_t)d->n_tokens * d->n_heads;
    uint64_t step = (uint64_t)tc->nb * per_block;
    for (uint64_t w = (uint64_t)tc->bid * per_block + tc->tid / g; w < a->entries; w += step) {
        uint32_t c = (uint32_t)(w / tokens_heads);
        uint64_t th = w % tokens_heads;
        uint32_t t = (uint32_t)(th / d->n_heads), h = (uint32_t)(th % d->n_heads);
        size_t off;
        if (!kve_cw_target(a, t, h, c == 0 && lane == 0, &off))
            continue;
        /* cache c's pointers by selects over constant indices: indexing the
         * parameters with a variable makes some compilers copy them to the
         * stack (AMD's: 328 bytes of scratch a thread) */
        const void *src_c = d->src[0];
        void *dst_c = d->dst[0];
        for (uint32_t k = 1; k < KVE_MAX_CACHES; k++) {
            src_c = k == c ? d->src[k] : src_c;
            dst_c = k == c ? d->dst[k] : dst_c;
        }
        unsigned char *dst = (unsigned char *)dst_c + off;
        const unsigned char *src = (const unsigned char *)src_c + (size_t)t * d->src_stride_token +
                                   (size_t)h * d->src_stride_head;
        switch (a->unit) {
        case 16: kve_copy_v16(dst, src, a->units, lane, g); break;
        case 8: kve_copy_u64(dst, src, a->units, lane, g); break;
        case 4: kve_copy_u32(dst, src, a->units, lane, g); break;
        case 2: kve_copy_u16(dst, src, a->units, lane, g); break;
        default: kve_copy_u8(dst, src, a->units, lane, g); break;
        }
    }
}

#endif /* KVE_CACHE_WRITE_BODY_H */
