/*
 * cache_write_cpu.c — the CPU's kernel of kve_cache_write with its moves
 * (the op is backends/cpu.c's).
 * Arguments arrive validated (frontend/cache_write.c); OpenMP across move
 * rows or tokens, each element written by exactly one thread. Slots find
 * their page by the device's lookup (common/cache_write_body.h), so
 * the host checks, the CPU and the GPUs place entries by one rule.
 */
#include <string.h>

#include "cache_write_body.h"
#include "kve_cpu_kernels.h"
#include "kve_cpu_threads.h"

/* Byte offset of @p slot of row @p row in part @p p (arguments validated:
 * the slot has a place), by the one page lookup (kve_cw_lookup). */
static inline size_t kve_slot_at(const kve_cache_write_desc *d, const kve_cache_part *p,
                                 int32_t row, int64_t slot)
{
    kve_cw_place at;
    kve_cw_lookup(&d->pages, row, slot, &at);
    return (size_t)at.page * p->dst_stride_page + at.in * p->dst_stride_slot;
}

/* Copy an entry of @p dim elements of @p es bytes, @p dstep bytes apart in
 * @p dst and @p sstep in @p src: one memcpy when both are dense. */
static inline void kve_copy_elems(unsigned char *dst, size_t dstep, const unsigned char *src,
                                  size_t sstep, size_t es, size_t dim)
{
    if (dstep == es && sstep == es) {
        memcpy(dst, src, dim * es);
        return;
    }
    for (size_t i = 0; i < dim; i++)
        memcpy(dst + i * dstep, src + i * sstep, es);
}

#define KVE_MOVE_BATCH 64u /* pairs addressed, then copied in one copy_runs call */

/* A batch of pairs ready to copy. */
typedef struct kve_move_batch {
    char *to[KVE_MOVE_BATCH];
    const char *from[KVE_MOVE_BATCH];
    size_t bytes[KVE_MOVE_BATCH]; /* each pair's entry bytes */
    uint32_t n;
} kve_move_batch;

/* Where move row @p i's moves are walked from: a cursor over its lists. */
typedef struct kve_move_walk {
    const kve_cache_write_desc *d;
    int32_t row;
    uint32_t c, k, h; /* next pair: cache c, pair k of head h's list */
    uint32_t k_end;   /* the longest of the row's lists */
    size_t i;
} kve_move_walk;

/* Address the next pairs of @p w into @p b (pairs k.. of every head's list,
 * heads inner: one slot's entries of all heads lie side by side in the
 * usual layouts); b->n = 0 when none are left. A cache whose entries have
 * strided elements copies its pairs here, element by element. */
static void kve_move_fill(kve_move_walk *w, kve_move_batch *b)
{
    const kve_cache_write_desc *d = w->d;
    b->n = 0;
    while (w->c < d->n_caches && b->n < KVE_MOVE_BATCH) {
        const kve_cache_part *p = &d->part[w->c];
        size_t es = kve_dtype_size(p->dst_dtype), bytes = (size_t)p->dim * es;
        for (; w->h < d->n_heads && b->n < KVE_MOVE_BATCH; w->h++) {
            size_t list = w->i * d->moves_stride_row + (size_t)w->h * d->moves_stride_head;
            if (w->k >= d->n_moves[list])
                continue;
            const int32_t *pair = d->moves + 2 * (list * d->max_moves + w->k);
            char *base = (char *)d->dst[w->c] + (size_t)w->h * p->dst_stride_head;
            const char *from = base + kve_slot_at(d, p, w->row, pair[0]);
            char *to = base + kve_slot_at(d, p, w->row, pair[1]);
            if (p->dst_stride_elem != es) { /* strided elements: copied here, one by one */
                kve_copy_elems((unsigned char *)to, p->dst_stride_elem,
                               (const unsigned char *)from, p->dst_stride_elem, es, p->dim);
                continue;
            }
            b->from[b->n] = from;
            b->bytes[b->n] = bytes;
            b->to[b->n++] = to;
        }
        if (w->h < d->n_heads)
            break; /* the batch is full mid-way through the heads */
        w->h = 0;
        if (++w->k < w->k_end)
            continue;
        w->k = 0;
        w->c++;
        if (b->n) /* else (strided caches copy as they go) go on to the next cache */
            break;
    }
}

/* One kve_cpu_cache_write call, shared by its threads. */
typedef struct {
    const kve_cpu_kernels *k;
    const kve_cache_write_desc *d;
} kve_cw_call;

/* The moves of rows [lo, hi): a list's sources and destinations are
 * disjoint slots, so every pair copies straight from its source; a cache's
 * stored bytes move as they are, one row's heads walked together. The copies are scattered
 * DRAM (and TLB) misses; software prefetching of the next batch (64 pairs,
 * or 8-32 sliding ahead) measured slower than none, which runs at the
 * floor of memcpy of the same pairs (docs/BENCHMARKS.md), so there is none. */
static int kve_cpu_moves(void *arg, size_t lo, size_t hi, int thread)
{
    (void)thread;
    const kve_cw_call *c = (const kve_cw_call *)arg;
    const kve_cache_write_desc *d = c->d;
    for (size_t i = lo; i < hi; i++) {
        int32_t row = d->move_row ? d->move_row[i] : (int32_t)i;
        kve_move_walk w = {d, row, 0, 0, 0, 0, i};
        for (uint32_t h = 0; h < d->n_heads; h++) {
            uint32_t n = d->n_moves[i * d->moves_stride_row + (size_t)h * d->moves_stride_head];
            w.k_end = n > w.k_end ? n : w.k_end;
        }
        w.c = w.k_end ? 0 : d->n_caches;
        kve_move_batch b;
        for (kve_move_fill(&w, &b); b.n; kve_move_fill(&w, &b))
            c->k->copy_runs(b.to, b.from, b.bytes, b.n);
    }
    return 0;
}

/* Tokens [lo, hi): each written head's entry into its slot of every cache. */
static int kve_cpu_writes(void *arg, size_t lo, size_t hi, int thread)
{
    (void)thread;
    const kve_cache_write_desc *d = ((const kve_cw_call *)arg)->d;
    int flat = d->pages.kind == KVE_PAGES_FLAT;
    for (size_t t = lo; t < hi; t++) {
        /* padding (every slot -1) never reads its row */
        for (uint32_t h = 0; h < d->n_heads; h++) {
            int64_t slot = kve_cw_slot(d, (uint32_t)t, h);
            if (slot < 0)
                continue;
            int32_t row = flat ? 0 : d->token_row[t];
            kve_cw_place at, from = {0, 0, 0};
            kve_cw_lookup(&d->pages, row, slot, &at); /* validated: found */
            if (d->src_slots) /* validated: found, and written by nothing in the call */
                kve_cw_lookup(&d->pages, row,
                              d->src_slots[t * d->slots_stride_token +
                                           (size_t)h * d->slots_stride_head],
                              &from);
            for (uint32_t c = 0; c < d->n_caches; c++) {
                const kve_cache_part *p = &d->part[c];
                unsigned char *dst = (unsigned char *)d->dst[c] +
                                     (size_t)at.page * p->dst_stride_page +
                                     at.in * p->dst_stride_slot + (size_t)h * p->dst_stride_head;
                size_t es = kve_dtype_size(p->dst_dtype);
                if (d->src_slots) { /* the stored bytes of another slot of the row */
                    kve_copy_elems(dst, p->dst_stride_elem,
                                   (const unsigned char *)d->dst[c] +
                                       (size_t)from.page * p->dst_stride_page +
                                       from.in * p->dst_stride_slot +
                                       (size_t)h * p->dst_stride_head,
                                   p->dst_stride_elem, es, p->dim);
                    continue;
                }
                const unsigned char *src = (const unsigned char *)d->src[c] +
                                           t * p->src_stride_token + (size_t)h * p->src_stride_head;
                if (!p->convert)
                    kve_copy_elems(dst, p->dst_stride_elem, src, es, es, p->dim);
                else
                    kve_convert_entry(dst, p->dst_stride_elem, p->dst_dtype, src, p->src_dtype,
                                      p->scale ? p->scale + (p->scale_per_head ? h : 0) : NULL,
                                      p->dim, 0, 1);
            }
        }
    }
    return 0;
}

void kve_cpu_cache_write_run(const kve_cache_write_desc *d, kve_cpu_isa isa, int threads)
{
    kve_cw_call c = {kve_cpu_kernels_get(isa), d};
    /* Threads only pay off for many moves or tokens. */
    if (d->moves)
        kve_cpu_parallel((uint64_t)d->n_move_rows * d->n_heads >= 256 ? threads : 1,
                         d->n_move_rows, kve_cpu_moves, &c);
    kve_cpu_parallel(d->n_tokens >= 64 ? threads : 1, d->n_tokens, kve_cpu_writes, &c);
}
