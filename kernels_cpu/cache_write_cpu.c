/*
 * cache_write_cpu.c — the CPU backend's engine-integration ops: the cache
 * state's table jobs (common/kve_backend.h) and kve_cache_write with its
 * moves. Arguments arrive validated (common/api.c habit); OpenMP across
 * jobs, move lists or tokens, each element written by exactly one thread.
 * The per-table code is the device's (common/device/state_body.h), so the
 * CPU and the GPUs place tokens by one implementation.
 */
#include <string.h>

#include "device/convert_body.h"
#include "device/state_body.h"
#include "kve_backend.h"
#include "kve_cpu_kernels.h"
#include "kve_error.h"

kve_status kve_cpu_state_update(kve_context *ctx, const kve_state_update *u)
{
    /* Decode steps bring one small job per sequence; threads only pay off
     * for big batches. A table that fails the body's checks cannot come
     * from the state's own jobs: it is an internal error. */
    int threads = u->n_jobs >= 64 ? ctx->threads : 1, bad = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : bad)
    for (uint32_t i = 0; i < u->n_jobs; i++) {
        uint64_t items = kve_state_job_items(u, &u->jobs[i]);
        for (uint64_t e = 0; e < items; e++)
            bad |= kve_state_item_run(u, &u->jobs[i], e);
    }
    return bad ? kve_error_set(KVE_ERR_INTERNAL, "state_update: a job's table does not fit")
               : KVE_OK;
}

/* The rows that are due, one after another, each a kve_evict of its tables
 * (threads across them inside); the row list is host memory here. */
kve_status kve_cpu_state_evict(kve_context *ctx, const kve_state_evict *e)
{
    const kve_backend_ops *cpu = kve_cpu_backend_ops();
    for (uint32_t i = 0; i < e->b.n_seqs; i++) {
        if (!e->rows[i].count)
            continue;
        kve_batch b;
        kve_evict_out o;
        kve_state_evict_row(e, i, &e->rows[i], &b, &o);
        KVE_TRY(cpu->evict(ctx, &b, &o, e->workspace, e->workspace_bytes));
    }
    return KVE_OK;
}

/* The pages of page-table row @p row (NULL for KVE_PAGES_NONE and FLAT,
 * whose pages follow from the row or the slot). */
static const int32_t *kve_row_pages(const kve_cache_write_desc *d, int32_t row)
{
    switch (d->page_table) {
    case KVE_PAGES_BLOCK_TABLE: return d->block_table + (size_t)row * d->blocks_per_row;
    case KVE_PAGES_INDPTR: return d->indices + d->indptr[row];
    default: return NULL;
    }
}

/* Byte offset of @p slot of a row whose pages are @p pages (see
 * kve_row_pages; @p row for KVE_PAGES_NONE), by part @p p's strides. */
static inline size_t kve_slot_at(const kve_cache_write_desc *d, const kve_cache_part *p,
                                 const int32_t *pages, int32_t row, int64_t slot)
{
    size_t blk = (size_t)slot / d->page_size, in = (size_t)slot % d->page_size;
    size_t page = pages ? (size_t)pages[blk] : d->page_table == KVE_PAGES_FLAT ? blk : (size_t)row;
    return page * p->dst_stride_page + in * p->dst_stride_slot;
}

/* Byte offset of (row, slot, head) in cache @p c, by that cache's strides. */
static size_t kve_entry_at(const kve_cache_write_desc *d, uint32_t c, int32_t row, int64_t slot,
                           uint32_t h)
{
    const kve_cache_part *p = &d->part[c];
    return kve_slot_at(d, p, kve_row_pages(d, row), row, slot) + h * p->dst_stride_head;
}

#define KVE_MOVE_BATCH 64u /* pairs addressed and prefetched while the batch before is copied */

/* A batch of pairs ready to copy. */
typedef struct kve_move_batch {
    char *to[KVE_MOVE_BATCH];
    const char *from[KVE_MOVE_BATCH];
    uint32_t n;
    size_t bytes; /* of every entry of the batch: one cache's */
} kve_move_batch;

/* Where move row @p i's moves are walked from: a cursor over its lists. */
typedef struct kve_move_walk {
    const kve_cache_write_desc *d;
    const int32_t *pages;
    int32_t row;
    uint32_t c, k, h; /* next pair: cache c, pair k of head h's list */
    uint32_t k_end;   /* the longest of the row's lists */
    size_t i;
} kve_move_walk;

/* Address the next pairs of @p w into @p b (pairs k.. of every head's list,
 * heads inner: one slot's entries of all heads lie side by side in the
 * usual layouts), prefetching their lines; b->n = 0 when none are left.
 * A batch holds one cache's pairs. */
static void kve_move_fill(kve_move_walk *w, kve_move_batch *b)
{
    const kve_cache_write_desc *d = w->d;
    b->n = 0;
    while (w->c < d->n_caches && b->n < KVE_MOVE_BATCH) {
        const kve_cache_part *p = &d->part[w->c];
        size_t bytes = (size_t)p->dim * kve_dtype_size(p->dst_dtype);
        b->bytes = bytes;
        for (; w->h < d->n_heads && b->n < KVE_MOVE_BATCH; w->h++) {
            size_t list = w->i * d->moves_stride_row + (size_t)w->h * d->moves_stride_head;
            if (w->k >= d->n_moves[list])
                continue;
            const int32_t *pair = d->moves + 2 * (list * d->max_moves + w->k);
            char *base = (char *)d->dst[w->c] + (size_t)w->h * p->dst_stride_head;
            const char *from = base + kve_slot_at(d, p, w->pages, w->row, pair[0]);
            char *to = base + kve_slot_at(d, p, w->pages, w->row, pair[1]);
            for (size_t o = 0; o < bytes; o += 64) {
                __builtin_prefetch(from + o, 0, 0);
                __builtin_prefetch(to + o, 1, 0);
            }
            b->from[b->n] = from;
            b->to[b->n++] = to;
        }
        if (w->h < d->n_heads)
            break; /* the batch is full mid-way through the heads */
        w->h = 0;
        if (++w->k < w->k_end)
            continue;
        w->k = 0;
        w->c++;
        break;
    }
}

/* The moves: a list's sources and destinations are disjoint slots, so
 * every pair copies straight from its source; a cache's stored bytes move
 * as they are. The copies are scattered DRAM (and TLB) misses: the next
 * batch's lines are requested before the current batch is copied, so many
 * are in flight at once, and one row's heads are walked together. */
static void kve_cpu_moves(kve_context *ctx, const kve_cache_write_desc *d)
{
    const kve_cpu_kernels *k = kve_cpu_kernels_get(ctx->isa);
    int threads = (uint64_t)d->n_move_rows * d->n_heads >= 256 ? ctx->threads : 1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (uint32_t i = 0; i < d->n_move_rows; i++) {
        int32_t row = d->move_row ? d->move_row[i] : (int32_t)i;
        kve_move_walk w = {d, kve_row_pages(d, row), row, 0, 0, 0, 0, i};
        for (uint32_t h = 0; h < d->n_heads; h++) {
            uint32_t n = d->n_moves[i * d->moves_stride_row + (size_t)h * d->moves_stride_head];
            w.k_end = n > w.k_end ? n : w.k_end;
        }
        w.c = w.k_end ? 0 : d->n_caches;
        kve_move_batch b[2];
        kve_move_fill(&w, &b[0]);
        for (int cur = 0; b[cur].n; cur ^= 1) {
            kve_move_fill(&w, &b[cur ^ 1]);
            k->copy_pairs(b[cur].to, b[cur].from, b[cur].n, b[cur].bytes);
        }
    }
}

kve_status kve_cpu_cache_write(kve_context *ctx, const kve_cache_write_desc *d)
{
    if (d->moves)
        kve_cpu_moves(ctx, d);
    int threads = d->n_tokens >= 64 ? ctx->threads : 1;
    int flat = d->page_table == KVE_PAGES_FLAT;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (uint32_t t = 0; t < d->n_tokens; t++) {
        /* padding (every slot -1) never reads its row */
        for (uint32_t h = 0; h < d->n_heads; h++) {
            int64_t slot =
                d->slots[(size_t)t * d->slots_stride_token + (size_t)h * d->slots_stride_head];
            if (slot < 0)
                continue;
            int32_t row = flat ? 0 : d->token_row[t];
            for (uint32_t c = 0; c < d->n_caches; c++) {
                const kve_cache_part *p = &d->part[c];
                unsigned char *dst = (unsigned char *)d->dst[c] + kve_entry_at(d, c, row, slot, h);
                const unsigned char *src = (const unsigned char *)d->src[c] +
                                           (size_t)t * p->src_stride_token +
                                           (size_t)h * p->src_stride_head;
                if (!p->convert)
                    memcpy(dst, src, (size_t)p->dim * kve_dtype_size(p->dst_dtype));
                else
                    kve_convert_entry(dst, p->dst_dtype, src, p->src_dtype,
                                      p->scale ? p->scale + (p->scale_per_head ? h : 0) : NULL,
                                      p->dim, 0, 1);
            }
        }
    }
    return KVE_OK;
}
