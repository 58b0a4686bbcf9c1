/*
 * cache_write_body.h — kve_cache_write() on the device (vLLM's
 * reshape_and_cache_flash under slot reuse), written once for CUDA, HIP and
 * the host emulator (kve_device.h).
 *
 * Work is one entry per (cache, token, head). A group of `group` threads
 * (a power of two dividing the block, independent of the warp width) copies
 * one entry in units of 16, 8, 4, 2 or 1 bytes, the widest that divides the
 * cache's entry size, bases and strides, or converts it element by element
 * (convert_body.h) when its part asks; groups take entries in turn
 * (grid-stride). Consecutive groups take consecutive heads, then tokens, so
 * a dense source is read in order. Every destination byte is written by one
 * thread (the API's precondition: no two entries share a destination), so
 * the result does not depend on the launch.
 *
 * Row, slot and page ids are device memory the host never saw: each group
 * checks its entry as common/cache_write.c checks host memory, skips one
 * that fails and raises a KVE_DEV_ERR_CW_* record (cache 0's group only, so
 * one record per entry).
 *
 * The state's moves (kve_cache_move_grid) are a launch of their own before
 * the writes: a write may land in a slot a move reads, and only stream
 * order separates the two across the grid.
 */
#ifndef KVE_CACHE_WRITE_BODY_H
#define KVE_CACHE_WRITE_BODY_H

#include "convert_body.h"
#include "kve_device.h"
#include "kvevict.h"

typedef struct kve_cache_write_args {
    kve_cache_write_desc d; /* parts resolved (kve_cache_write_resolve) */
    uint64_t entries;       /* n_caches * n_tokens * n_heads */
    /* per cache: bytes per load/store (16, 8, 4, 2 or 1), or 0 to convert */
    uint32_t unit[KVE_MAX_CACHES];
    uint32_t units[KVE_MAX_CACHES]; /* entry bytes / unit, or elements to convert */
    uint32_t group;                 /* threads per entry */
    uint64_t *errors;               /* [KVE_DEV_ERR_KINDS] */
} kve_cache_write_args;

/* Why a slot has no place in the cache (kve_cw_lookup), in the order the
 * lookup checks: the row's indptr entries first, then the slot, then its
 * page. The host names each (common/cache_write.c); the device raises
 * KVE_DEV_ERR_CW_PAGE for a page, KVE_DEV_ERR_CW_SLOT for the rest. */
enum kve_cw_fault {
    KVE_CW_FOUND = 0,
    KVE_CW_INDPTR_FIRST, /* indptr[0] != 0 */
    KVE_CW_INDPTR_ORDER, /* the row ends before it starts, or starts below 0 */
    KVE_CW_INDPTR_END,   /* the row ends past indptr[n_rows] */
    KVE_CW_LAST_LEN,     /* last_page_len of a row with pages not 1..page_size */
    KVE_CW_SLOT,         /* slot < 0 or past the row's length (limit) */
    KVE_CW_PAGE          /* the slot's page is not 0..n_pages-1 */
};

/* Where a slot lies: its page and in-page slot; limit, the row's length in
 * slots, and page are set whenever the lookup got that far (for messages). */
typedef struct kve_cw_place {
    int64_t limit, page;
    size_t in;
} kve_cw_place;

/* The one page lookup of kve_cache_write (host checks, CPU writes, device
 * kernels): slot @p slot of page table row @p row (ignored with
 * KVE_PAGES_FLAT; a valid row otherwise). Returns KVE_CW_FOUND with @p out
 * filled, or the first rule the slot breaks. For indptr the row's pages are
 * read within indices: indptr[0] = 0 and lo <= hi <= indptr[n_rows]. */
KVE_HD_FN int kve_cw_lookup(const kve_cache_write_desc *d, int32_t row, int64_t slot,
                            kve_cw_place *out)
{
    int64_t ps = d->page_size;
    out->limit = ps;
    out->page = row;
    out->in = 0;
    if (d->page_table == KVE_PAGES_FLAT) {
        out->limit = (int64_t)d->n_pages * ps;
        out->page = slot >= 0 ? slot / ps : 0;
    } else if (d->page_table == KVE_PAGES_BLOCK_TABLE) {
        out->limit = (int64_t)d->blocks_per_row * ps;
        if (slot >= 0 && slot < out->limit)
            out->page = d->block_table[(size_t)row * d->blocks_per_row + (size_t)(slot / ps)];
    } else if (d->page_table == KVE_PAGES_INDPTR) {
        int32_t lo = d->indptr[row], hi = d->indptr[row + 1], last = d->last_page_len[row];
        if (d->indptr[0] != 0)
            return KVE_CW_INDPTR_FIRST;
        if (lo < 0 || hi < lo)
            return KVE_CW_INDPTR_ORDER;
        if (hi > d->indptr[d->n_rows])
            return KVE_CW_INDPTR_END;
        if (hi > lo && (last < 1 || last > ps))
            return KVE_CW_LAST_LEN;
        out->limit = hi > lo ? (int64_t)(hi - lo - 1) * ps + last : 0;
        if (slot >= 0 && slot < out->limit)
            out->page = d->indices[(size_t)lo + (size_t)(slot / ps)];
    }
    if (slot < 0 || slot >= out->limit)
        return KVE_CW_SLOT;
    if (out->page < 0 || out->page >= d->n_pages)
        return KVE_CW_PAGE;
    out->in = (size_t)(slot % ps);
    return KVE_CW_FOUND;
}

/* Page and in-page slot of slot @p slot of row @p row: 0 when the desc
 * does not allow it (*why = the device error kind), else 1. */
KVE_FN int kve_cw_locate(const kve_cache_write_desc *d, int32_t row, int64_t slot,
                         size_t *page_out, size_t *in_out, int *why)
{
    kve_cw_place at;
    int fault = kve_cw_lookup(d, row, slot, &at);
    if (fault != KVE_CW_FOUND) {
        *why = fault == KVE_CW_PAGE ? KVE_DEV_ERR_CW_PAGE : KVE_DEV_ERR_CW_SLOT;
        return 0;
    }
    *page_out = (size_t)at.page;
    *in_out = at.in;
    return 1;
}

/* Page and in-page slot of entry (t, h), or 0 when it is skipped: slot -1
 * (padding: the token's row is then never read), or a row, slot or page the
 * desc does not allow (an error raised when @p raise). */
KVE_FN int kve_cw_target(const kve_cache_write_args *a, uint32_t t, uint32_t h, int raise,
                         size_t *page_out, size_t *in_out)
{
    const kve_cache_write_desc *d = &a->d;
    int64_t slot = d->slots[(size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head];
    if (slot == -1)
        return 0;
    int32_t row = 0;
    if (d->page_table != KVE_PAGES_FLAT) {
        row = d->token_row[t];
        if (row < 0 || (uint32_t)row >= d->n_rows) {
            if (raise)
                kve_raise(a->errors, KVE_DEV_ERR_CW_ROW, t, 0);
            return 0;
        }
    }
    int why = 0;
    if (kve_cw_locate(d, row, slot, page_out, in_out, &why))
        return 1;
    if (raise)
        kve_raise(a->errors, why, t, h);
    return 0;
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

/* One group's share of a raw entry of @p units loads of @p unit bytes;
 * 0 (nothing copied) when unit is 0: the entry converts. */
KVE_FN int kve_copy_entry(unsigned char *dst, const unsigned char *src, uint32_t unit,
                          uint32_t units, uint32_t lane, uint32_t g)
{
    switch (unit) {
    case 16: kve_copy_v16(dst, src, units, lane, g); return 1;
    case 8: kve_copy_u64(dst, src, units, lane, g); return 1;
    case 4: kve_copy_u32(dst, src, units, lane, g); return 1;
    case 2: kve_copy_u16(dst, src, units, lane, g); return 1;
    case 1: kve_copy_u8(dst, src, units, lane, g); return 1;
    default: return 0;
    }
}

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
        size_t page, in;
        if (!kve_cw_target(a, t, h, c == 0 && lane == 0, &page, &in))
            continue;
        /* cache c's part by selects over constant indices: indexing the
         * parameters with a variable makes some compilers copy them to the
         * stack (AMD's: 328 bytes of scratch a thread) */
        const void *src_c = d->src[0];
        void *dst_c = d->dst[0];
        const kve_cache_part *p = &d->part[0];
        uint32_t unit = a->unit[0], units = a->units[0];
        for (uint32_t k = 1; k < KVE_MAX_CACHES; k++) {
            src_c = k == c ? d->src[k] : src_c;
            dst_c = k == c ? d->dst[k] : dst_c;
            p = k == c ? &d->part[k] : p;
            unit = k == c ? a->unit[k] : unit;
            units = k == c ? a->units[k] : units;
        }
        unsigned char *dst = (unsigned char *)dst_c + page * p->dst_stride_page +
                             in * p->dst_stride_slot + (size_t)h * p->dst_stride_head;
        const unsigned char *src = (const unsigned char *)src_c + (size_t)t * p->src_stride_token +
                                   (size_t)h * p->src_stride_head;
        if (!kve_copy_entry(dst, src, unit, units, lane, g))
            kve_convert_entry(dst, p->dst_dtype, src, p->src_dtype,
                              p->scale ? p->scale + (p->scale_per_head ? h : 0) : NULL, units,
                              lane, g);
    }
}

/* Pairs a list takes in the grid: max_moves, and one for max_moves = 0 so
 * that a list's count is still read (and any count past 0 raised). */
KVE_HD_FN uint32_t kve_cache_move_width(const kve_cache_write_desc *d)
{
    return d->max_moves ? d->max_moves : 1;
}

/* Work items of the moves: one entry per (cache, move row, head, pair). */
KVE_HD_FN uint64_t kve_cache_move_entries(const kve_cache_write_desc *d)
{
    return d->moves ? (uint64_t)d->n_caches * d->n_move_rows * d->n_heads *
                          kve_cache_move_width(d)
                    : 0;
}

/*
 * The moves kernel, launched before the writes: one group per (cache, move
 * row, head, pair), grid-stride; pairs past the list's count are idle. The
 * pairs of a list never share a slot between a source and a destination
 * (the API's precondition), so they run in any order. A move row, count or
 * slot the desc does not allow skips the pair and raises KVE_DEV_ERR_CW_MOVE
 * (head = move row, detail = cache head).
 */
KVE_FN void kve_cache_move_grid(kve_tc *tc, const kve_cache_write_args *a)
{
    const kve_cache_write_desc *d = &a->d;
    uint32_t g = a->group, per_block = tc->nt / g, lane = tc->tid % g;
    uint64_t total = kve_cache_move_entries(d), per_cache = total / d->n_caches;
    uint64_t step = (uint64_t)tc->nb * per_block;
    for (uint64_t w = (uint64_t)tc->bid * per_block + tc->tid / g; w < total; w += step) {
        uint32_t c = (uint32_t)(w / per_cache);
        uint64_t rest = w % per_cache;
        uint32_t k = (uint32_t)(rest % kve_cache_move_width(d));
        uint64_t ih = rest / kve_cache_move_width(d);
        uint32_t h = (uint32_t)(ih % d->n_heads), i = (uint32_t)(ih / d->n_heads);
        size_t list = (size_t)i * d->moves_stride_row + (size_t)h * d->moves_stride_head;
        int raise = c == 0 && lane == 0;
        uint32_t n = d->n_moves[list];
        if (n > d->max_moves) {
            if (raise && k == 0)
                kve_raise(a->errors, KVE_DEV_ERR_CW_MOVE, i, h);
            continue;
        }
        if (k >= n)
            continue;
        int32_t row = d->move_row ? d->move_row[i] : (int32_t)i;
        const int32_t *pair = d->moves + 2 * ((size_t)list * d->max_moves + k);
        size_t sp, si, dp, di;
        int why = KVE_DEV_ERR_CW_SLOT;
        int row_ok = d->page_table == KVE_PAGES_FLAT || (row >= 0 && (uint32_t)row < d->n_rows);
        if (!row_ok || !kve_cw_locate(d, row, pair[0], &sp, &si, &why) ||
            !kve_cw_locate(d, row, pair[1], &dp, &di, &why)) {
            if (raise)
                kve_raise(a->errors, KVE_DEV_ERR_CW_MOVE, i, h);
            continue;
        }
        /* cache c's part by selects over constant indices, as in the writes */
        void *dst_c = d->dst[0];
        const kve_cache_part *p = &d->part[0];
        uint32_t unit = a->unit[0], units = a->units[0];
        for (uint32_t q = 1; q < KVE_MAX_CACHES; q++) {
            dst_c = q == c ? d->dst[q] : dst_c;
            p = q == c ? &d->part[q] : p;
            unit = q == c ? a->unit[q] : unit;
            units = q == c ? a->units[q] : units;
        }
        unsigned char *base = (unsigned char *)dst_c + (size_t)h * p->dst_stride_head;
        unsigned char *dst = base + dp * p->dst_stride_page + di * p->dst_stride_slot;
        const unsigned char *src = base + sp * p->dst_stride_page + si * p->dst_stride_slot;
        /* a converting cache moves its stored bytes as they are */
        uint32_t bytes = p->dim * kve_dtype_size(p->dst_dtype);
        if (!kve_copy_entry(dst, src, unit, units, lane, g))
            kve_copy_u8(dst, src, bytes, lane, g);
    }
}

#endif /* KVE_CACHE_WRITE_BODY_H */
