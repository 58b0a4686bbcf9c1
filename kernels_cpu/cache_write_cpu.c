/*
 * cache_write_cpu.c — the CPU backend's engine-integration ops: the cache
 * state's table jobs (common/kve_state.h) and kve_cache_write. Arguments
 * arrive validated (backends/api.c habit); OpenMP across jobs or tokens,
 * each element written by exactly one thread.
 */
#include <string.h>

#include "device/convert_body.h"
#include "kve_backend_impl.h"

static void kve_job_run(const kve_state_update *u, const kve_state_job *j)
{
    size_t tables = (size_t)u->table_layers * u->table_heads;
    int32_t *rows = u->slot_pos + (size_t)j->row * u->row_stride;
    const int32_t *freed = u->freed ? u->freed + (size_t)j->row * u->freed_row_stride : NULL;
    if (j->kind == KVE_JOB_SEQ) {
        u->seqs[j->row] = j->seq;
        return;
    }
    for (size_t t = 0; t < tables; t++) {
        int32_t *sp = rows + t * u->table_stride;
        const int32_t *fr = freed ? freed + t * u->freed_table_stride : NULL;
        int64_t *map = u->mapping ? u->mapping + (t / u->table_heads) * u->map_layer_stride +
                                        t % u->table_heads
                                  : NULL;
        switch (j->kind) {
        case KVE_JOB_LINEAR:
        case KVE_JOB_FREED:
            for (uint32_t i = 0; i < j->count; i++) {
                uint32_t slot =
                    j->kind == KVE_JOB_LINEAR ? j->first + i : (uint32_t)fr[j->first + i];
                sp[slot] = (int32_t)(j->pos + i);
                if (map)
                    map[(size_t)(j->token + i) * u->table_heads] = slot;
            }
            break;
        case KVE_JOB_CLEAR:
            for (uint32_t i = 0; i < j->count; i++)
                sp[fr[i]] = -1;
            break;
        case KVE_JOB_VERIFY:
            for (uint32_t i = 0; i < j->count && map; i++) {
                int64_t *m = &map[(size_t)(j->token + i) * u->table_heads];
                if (*m >= 0 && sp[*m] != (int32_t)(j->pos + i))
                    *m = -1;
            }
            break;
        case KVE_JOB_RESET:
            for (size_t s = 0; s < u->table_stride; s++)
                sp[s] = -1;
            break;
        }
    }
}

kve_status kve_cpu_state_update(kve_context *ctx, const kve_state_update *u)
{
    /* Decode steps bring one small job per sequence; threads only pay off
     * for big batches. */
    int threads = u->n_jobs >= 64 ? ctx->threads : 1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (uint32_t i = 0; i < u->n_jobs; i++)
        kve_job_run(u, &u->jobs[i]);
    return KVE_OK;
}

/* Page of (row, slot) through the desc's page table (validated). */
static size_t kve_page_of(const kve_cache_write_desc *d, int32_t row, int64_t slot)
{
    size_t blk = (size_t)(slot / d->page_size);
    switch (d->page_table) {
    case KVE_PAGES_BLOCK_TABLE:
        return (size_t)d->block_table[(size_t)row * d->blocks_per_row + blk];
    case KVE_PAGES_INDPTR: return (size_t)d->indices[(size_t)d->indptr[row] + blk];
    case KVE_PAGES_FLAT: return blk;
    case KVE_PAGES_NONE: break;
    }
    return (size_t)row;
}

kve_status kve_cpu_cache_write(kve_context *ctx, const kve_cache_write_desc *d)
{
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
            size_t page = kve_page_of(d, flat ? 0 : d->token_row[t], slot);
            size_t in = (size_t)(slot % d->page_size);
            for (uint32_t c = 0; c < d->n_caches; c++) {
                const kve_cache_part *p = &d->part[c];
                unsigned char *dst = (unsigned char *)d->dst[c] + page * p->dst_stride_page +
                                     in * p->dst_stride_slot + h * p->dst_stride_head;
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
