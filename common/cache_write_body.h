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
 * checks its entry as frontend/cache_write.c checks host memory, skips one
 * that fails and raises a KVE_DEV_ERR_CW_* record (cache 0's group only, so
 * one record per entry).
 *
 * With desc.src_slots an entry's bytes come from another slot of its row
 * in the same cache (a speculative step's commit), copied as a move copies
 * them; the source is written by nothing in the call (the API's
 * precondition), so it reads the same whenever it is read.
 *
 * The state's moves run in the same launch (kve_cache_write_grid,
 * kernels_cuda/cache_write_grid.h): a move out of a slot the call writes is
 * made by that slot's write item just before its write, every other move by
 * a move item of its own; the grid depends on the call's shape only.
 */
#ifndef KVE_CACHE_WRITE_BODY_H
#define KVE_CACHE_WRITE_BODY_H

#include "convert_body.h"
#include "kve_device.h"
#include "kvevict.h"

typedef struct kve_cache_write_args {
    kve_cache_write_desc d; /* parts resolved (kve_cache_write_resolve) */
    uint64_t entries;       /* write items: n_caches * n_tokens * n_heads */
    uint64_t move_entries;  /* move items: kve_cache_move_entries */
    /* per cache: bytes per load/store (16, 8, 4, 2 or 1), or 0 to convert */
    uint32_t unit[KVE_MAX_CACHES];
    uint32_t units[KVE_MAX_CACHES]; /* entry bytes / unit, or elements to convert */
    /* per cache: bytes between a cache entry's consecutive units (= unit, or
     * the element size when converting, in a dense entry; dst_stride_elem
     * when the entry's elements are strided, each then a unit) */
    size_t step[KVE_MAX_CACHES];
    uint32_t group;                 /* threads per entry */
    uint64_t *errors;               /* [KVE_DEV_ERR_KINDS] */
} kve_cache_write_args;

/* Why a slot has no place in the cache (kve_cw_lookup), in the order the
 * lookup checks: the row's indptr entries first, then the slot, then its
 * page. The host names each (frontend/cache_write.c); the device raises
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
KVE_HD_FN int kve_cw_lookup(const kve_page_table *d, int32_t row, int64_t slot,
                            kve_cw_place *out)
{
    int64_t ps = d->page_size;
    out->limit = ps;
    out->page = row;
    out->in = 0;
    if (d->kind == KVE_PAGES_FLAT) {
        out->limit = (int64_t)d->n_pages * ps;
        out->page = slot >= 0 ? slot / ps : 0;
    } else if (d->kind == KVE_PAGES_BLOCK_TABLE) {
        out->limit = (int64_t)d->blocks_per_row * ps;
        if (slot >= 0 && slot < out->limit)
            out->page = d->block_table[(size_t)row * d->blocks_per_row + (size_t)(slot / ps)];
    } else if (d->kind == KVE_PAGES_INDPTR) {
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
KVE_FN int kve_cw_locate(const kve_page_table *d, int32_t row, int64_t slot,
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

/* The slot entry (t, h) is written to: desc.slots's, or -1 (skipped, as
 * padding) where desc.src_slots is set and names no source there. */
KVE_HD_FN int64_t kve_cw_slot(const kve_cache_write_desc *d, uint32_t t, uint32_t h)
{
    size_t at = (size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head;
    return d->src_slots && d->src_slots[at] == -1 ? -1 : d->slots[at];
}

/* Page and in-page slot of entry (t, h), or 0 when it is skipped: slot -1
 * (padding: the token's row is then never read), a row, slot or page the
 * desc does not allow (an error raised when @p raise), or a -1 in
 * desc.src_slots (after the same checks). */
KVE_FN int kve_cw_target(const kve_cache_write_args *a, uint32_t t, uint32_t h, int raise,
                         size_t *page_out, size_t *in_out)
{
    const kve_cache_write_desc *d = &a->d;
    size_t at = (size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head;
    int64_t slot = d->slots[at];
    if (slot == -1)
        return 0;
    int32_t row = 0;
    if (d->pages.kind != KVE_PAGES_FLAT) {
        row = d->token_row[t];
        if (row < 0 || (uint32_t)row >= d->pages.n_rows) {
            if (raise)
                kve_raise(a->errors, KVE_DEV_ERR_CW_ROW, t, 0);
            return 0;
        }
    }
    int why = 0;
    if (kve_cw_locate(&d->pages, row, slot, page_out, in_out, &why))
        return !d->src_slots || d->src_slots[at] != -1;
    if (raise)
        kve_raise(a->errors, why, t, h);
    return 0;
}

/* One group's share of an entry: units lane, lane + group, ... of type T,
 * dstep bytes apart in dst and sstep in src. */
#define KVE_DEFINE_COPY(name, T)                                                                 \
    KVE_FN void name(unsigned char *dst, size_t dstep, const unsigned char *src, size_t sstep,    \
                     uint32_t units, uint32_t lane, uint32_t group)                              \
    {                                                                                            \
        for (uint32_t u = lane; u < units; u += group)                                           \
            *(T *)(dst + u * dstep) = *(const T *)(src + u * sstep);                             \
    }
KVE_DEFINE_COPY(kve_copy_v16, kve_vec16)
KVE_DEFINE_COPY(kve_copy_u64, uint64_t)
KVE_DEFINE_COPY(kve_copy_u32, uint32_t)
KVE_DEFINE_COPY(kve_copy_u16, uint16_t)
KVE_DEFINE_COPY(kve_copy_u8, uint8_t)

/* One group's share of a raw entry of @p units loads of @p unit bytes,
 * @p dstep and @p sstep bytes apart; 0 (nothing copied) when unit is 0:
 * the entry converts. */
KVE_FN int kve_copy_entry(unsigned char *dst, size_t dstep, const unsigned char *src,
                          size_t sstep, uint32_t unit, uint32_t units, uint32_t lane, uint32_t g)
{
    switch (unit) {
    case 16: kve_copy_v16(dst, dstep, src, sstep, units, lane, g); return 1;
    case 8: kve_copy_u64(dst, dstep, src, sstep, units, lane, g); return 1;
    case 4: kve_copy_u32(dst, dstep, src, sstep, units, lane, g); return 1;
    case 2: kve_copy_u16(dst, dstep, src, sstep, units, lane, g); return 1;
    case 1: kve_copy_u8(dst, dstep, src, sstep, units, lane, g); return 1;
    default: return 0;
    }
}

/* Cache c's part of a call: by selects over constant indices, as indexing
 * the parameters with a variable makes some compilers copy them to the
 * stack (AMD's: 328 bytes of scratch a thread). */
typedef struct kve_cw_cache {
    const void *src;
    void *dst;
    const kve_cache_part *p;
    uint32_t unit, units;
    size_t step;
} kve_cw_cache;

KVE_FN kve_cw_cache kve_cw_cache_of(const kve_cache_write_args *a, uint32_t c)
{
    const kve_cache_write_desc *d = &a->d;
    kve_cw_cache k = {d->src[0], d->dst[0], &d->part[0], a->unit[0], a->units[0], a->step[0]};
    for (uint32_t q = 1; q < KVE_MAX_CACHES; q++) {
        k.src = q == c ? d->src[q] : k.src;
        k.dst = q == c ? d->dst[q] : k.dst;
        k.p = q == c ? &d->part[q] : k.p;
        k.unit = q == c ? a->unit[q] : k.unit;
        k.units = q == c ? a->units[q] : k.units;
        k.step = q == c ? a->step[q] : k.step;
    }
    return k;
}

/* One group's share of a move of cache @p k's head @p h entry from (page
 * @p sp, in-page slot @p si) to (@p dp, @p di): the stored bytes as they
 * are, lane by lane as the write of that entry takes them (a converting
 * cache in elements of its own type), so a lane that moves an entry and
 * then writes it reads only bytes it writes itself afterwards. */
KVE_FN void kve_cw_move_entry(kve_cw_cache k, uint32_t h, size_t sp, size_t si, size_t dp,
                              size_t di, uint32_t lane, uint32_t g)
{
    const kve_cache_part *p = k.p;
    unsigned char *base = (unsigned char *)k.dst + (size_t)h * p->dst_stride_head;
    uint32_t unit = k.unit ? k.unit : kve_dtype_size(p->dst_dtype);
    kve_copy_entry(base + dp * p->dst_stride_page + di * p->dst_stride_slot, k.step,
                   base + sp * p->dst_stride_page + si * p->dst_stride_slot, k.step, unit, k.units,
                   lane, g);
}

/* The page-table row of move row @p i: 0 with KVE_PAGES_FLAT (move_row is
 * not read; the lookup ignores rows there, and writes take row 0 too). */
KVE_FN int32_t kve_cw_move_row(const kve_cache_write_desc *d, uint32_t i)
{
    if (d->pages.kind == KVE_PAGES_FLAT)
        return 0;
    return d->move_row ? d->move_row[i] : (int32_t)i;
}

/* Whether this call writes slot @p s0 or slot @p s1 of row @p row in head
 * @p h (both slots of that row, the row valid): some token maps head h to
 * it, in that row (any row with KVE_PAGES_FLAT). Exactly the entries whose
 * write items write (kve_cw_target finds them): a matching slot is not -1,
 * so padding's token_row stays unread. */
KVE_FN int kve_cw_written(const kve_cache_write_desc *d, int32_t row, uint32_t h, int64_t s0,
                          int64_t s1)
{
    for (uint32_t t = 0; t < d->n_tokens; t++) {
        int64_t s = kve_cw_slot(d, t, h);
        if ((s == s0 || s == s1) && (d->pages.kind == KVE_PAGES_FLAT || d->token_row[t] == row))
            return 1;
    }
    return 0;
}

/* Before the write item of slot @p slot of row @p row, head @p h, cache
 * @p c: the move whose source that slot is, if any, and unless the call
 * writes its destination too (the write wins there). The move items skip
 * such a move (kve_cw_move_item); the lists scanned are the row's (found
 * through move_row; every list with KVE_PAGES_FLAT), each up to its count:
 * with no moves, move_row and the row's counts are all it reads. A list or
 * pair the move items refuse is refused here too, silently (they raise
 * it). */
KVE_FN void kve_cw_pre_move(const kve_cache_write_args *a, uint32_t c, int32_t row,
                            uint32_t h, int64_t slot, size_t page, size_t in, uint32_t lane)
{
    const kve_cache_write_desc *d = &a->d;
    if (!d->moves)
        return;
    uint32_t lo = 0, hi = d->n_move_rows;
    if (d->pages.kind != KVE_PAGES_FLAT && !d->move_row) {
        lo = (uint32_t)row; /* list i is row i's */
        hi = lo < hi ? lo + 1 : lo;
    }
    for (uint32_t i = lo; i < hi; i++) {
        if (kve_cw_move_row(d, i) != row)
            continue;
        size_t list = (size_t)i * d->moves_stride_row + (size_t)h * d->moves_stride_head;
        uint32_t n = d->n_moves[list];
        if (n > d->max_moves)
            continue;
        const int32_t *pair = d->moves + 2 * (size_t)list * d->max_moves;
        for (uint32_t m = 0; m < n; m++) {
            if (pair[2 * m] != slot)
                continue;
            size_t dp, di;
            int why;
            /* sources are distinct across the row's lists: this is the one */
            if (kve_cw_locate(&d->pages, row, pair[2 * m + 1], &dp, &di, &why) &&
                !kve_cw_written(d, row, h, pair[2 * m + 1], pair[2 * m + 1]))
                kve_cw_move_entry(kve_cw_cache_of(a, c), h, page, in, dp, di, lane, a->group);
            return;
        }
    }
}

/* Write item @p w (cache, token, head): the move out of its slot first
 * (kve_cw_pre_move), then the new entry. */
KVE_FN void kve_cw_write_item(const kve_cache_write_args *a, uint64_t w, uint32_t lane)
{
    const kve_cache_write_desc *d = &a->d;
    uint32_t g = a->group;
    uint64_t tokens_heads = (uint64_t)d->n_tokens * d->n_heads;
    uint32_t c = (uint32_t)(w / tokens_heads);
    uint64_t th = w % tokens_heads;
    uint32_t t = (uint32_t)(th / d->n_heads), h = (uint32_t)(th % d->n_heads);
    size_t page, in;
    if (!kve_cw_target(a, t, h, c == 0 && lane == 0, &page, &in))
        return;
    int64_t slot = d->slots[(size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head];
    int32_t row = d->pages.kind == KVE_PAGES_FLAT ? 0 : d->token_row[t];
    kve_cw_pre_move(a, c, row, h, slot, page, in, lane);
    kve_cw_cache k = kve_cw_cache_of(a, c);
    if (d->src_slots) { /* the entry's bytes from another slot of the row, as stored */
        int64_t from =
            d->src_slots[(size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head];
        size_t sp, si;
        int why = 0;
        if (kve_cw_locate(&d->pages, row, from, &sp, &si, &why))
            kve_cw_move_entry(k, h, sp, si, page, in, lane, g);
        else if (c == 0 && lane == 0)
            kve_raise(a->errors, why, t, h);
        return;
    }
    const kve_cache_part *p = k.p;
    unsigned char *dst = (unsigned char *)k.dst + page * p->dst_stride_page +
                         in * p->dst_stride_slot + (size_t)h * p->dst_stride_head;
    const unsigned char *src = (const unsigned char *)k.src + (size_t)t * p->src_stride_token +
                               (size_t)h * p->src_stride_head;
    if (!kve_copy_entry(dst, k.step, src, k.unit, k.unit, k.units, lane, g))
        kve_convert_entry(dst, k.step, p->dst_dtype, src, p->src_dtype,
                          p->scale ? p->scale + (p->scale_per_head ? h : 0) : NULL, k.units, lane,
                          g);
}

/* Pairs a list takes in the grid: max_moves, and one for max_moves = 0 so
 * that a list's count is still read (and any count past 0 raised). */
KVE_HD_FN uint32_t kve_cache_move_width(const kve_cache_write_desc *d)
{
    return d->max_moves ? d->max_moves : 1;
}

/* Move items: one per (move row, head, pair), each for every cache; none
 * without moves. A shape: the counts are never read for it. */
KVE_HD_FN uint64_t kve_cache_move_entries(const kve_cache_write_desc *d)
{
    return d->moves ? (uint64_t)d->n_move_rows * d->n_heads * kve_cache_move_width(d) : 0;
}

/* Move item @p w (move row, head, pair): pairs past the list's count are
 * idle (a count read). A move row, count or slot the desc does not allow
 * skips the pair and raises KVE_DEV_ERR_CW_MOVE (head = move row, detail =
 * cache head). A move whose source the call writes is the write item's
 * (kve_cw_pre_move); one whose destination the call writes is no move (the
 * write wins, as after the CPU's moves). */
KVE_FN void kve_cw_move_item(const kve_cache_write_args *a, uint64_t w, uint32_t lane)
{
    const kve_cache_write_desc *d = &a->d;
    uint32_t k = (uint32_t)(w % kve_cache_move_width(d));
    uint64_t ih = w / kve_cache_move_width(d);
    uint32_t h = (uint32_t)(ih % d->n_heads), i = (uint32_t)(ih / d->n_heads);
    size_t list = (size_t)i * d->moves_stride_row + (size_t)h * d->moves_stride_head;
    uint32_t n = d->n_moves[list];
    if (n > d->max_moves) {
        if (lane == 0 && k == 0)
            kve_raise(a->errors, KVE_DEV_ERR_CW_MOVE, i, h);
        return;
    }
    if (k >= n)
        return;
    int32_t row = kve_cw_move_row(d, i);
    const int32_t *pair = d->moves + 2 * ((size_t)list * d->max_moves + k);
    size_t sp, si, dp, di;
    int why = KVE_DEV_ERR_CW_SLOT;
    int row_ok = d->pages.kind == KVE_PAGES_FLAT || (row >= 0 && (uint32_t)row < d->pages.n_rows);
    if (!row_ok || !kve_cw_locate(&d->pages, row, pair[0], &sp, &si, &why) ||
        !kve_cw_locate(&d->pages, row, pair[1], &dp, &di, &why)) {
        if (lane == 0)
            kve_raise(a->errors, KVE_DEV_ERR_CW_MOVE, i, h);
        return;
    }
    if (kve_cw_written(d, row, h, pair[0], pair[1]))
        return;
    for (uint32_t c = 0; c < d->n_caches; c++) {
        kve_cw_move_entry(kve_cw_cache_of(a, c), h, sp, si, dp, di, lane, a->group);
    }
}

#endif /* KVE_CACHE_WRITE_BODY_H */
