/* emu_backend.c — a CPU context with the emulator as its device. */
#include <stdio.h>
#include <string.h>

#include "emu_backend.h"
#include "kve_backend_impl.h"
#include "kve_launch.h"

static kve_backend_ops kve_emu_ops;
static kve_status (*kve_emu_cpu_evict)(kve_context *, const kve_batch *, const kve_evict_out *,
                                       void *, size_t);
static kve_emu_pool *kve_emu_pool_now, *kve_emu_evict_pool;
static uint32_t kve_emu_max_grid = 1;
static kve_emu_errors kve_emu_records; /* the "device" error records */
static char kve_emu_message_now[512];
static uint32_t kve_emu_unit;

void kve_emu_context_use(kve_emu_pool *pool, uint32_t max_grid, kve_emu_pool *evict_pool)
{
    kve_emu_pool_now = pool;
    kve_emu_max_grid = max_grid ? max_grid : 1;
    kve_emu_evict_pool = evict_pool;
}

const char *kve_emu_context_message(void) { return kve_emu_message_now; }

uint32_t kve_emu_context_last_unit(void) { return kve_emu_unit; }

static kve_status emu_state_update(kve_context *ctx, const kve_state_update *u)
{
    (void)ctx;
    return kve_emu_state_update(kve_emu_pool_now, kve_emu_max_grid, u, &kve_emu_records)
               ? KVE_ERR_NOMEM
               : KVE_OK;
}

static kve_status emu_cache_write(kve_context *ctx, const kve_cache_write_desc *d)
{
    (void)ctx;
    return kve_emu_cache_write(kve_emu_pool_now, kve_emu_max_grid, d, &kve_emu_records,
                               &kve_emu_unit);
}

static kve_status emu_evict(kve_context *ctx, const kve_batch *b, const kve_evict_out *o,
                            void *workspace, size_t workspace_bytes)
{
    if (!kve_emu_evict_pool)
        return kve_emu_cpu_evict(ctx, b, o, workspace, workspace_bytes);
    uint64_t heads = (uint64_t)b->n_seqs * b->n_layers * b->n_heads;
    uint32_t grid = kve_launch_grid(heads, 1, kve_emu_max_grid);
    return kve_emu_evict(kve_emu_evict_pool, grid, 0, b, o, &kve_emu_records) ? KVE_ERR_NOMEM
                                                                              : KVE_OK;
}

/* The GPU glue's synchronize: report the records, then clear them. */
static kve_status emu_synchronize(kve_context *ctx)
{
    (void)ctx;
    kve_status st =
        kve_emu_errors_status(&kve_emu_records, kve_emu_message_now, sizeof kve_emu_message_now);
    kve_emu_errors_reset(&kve_emu_records);
    return st;
}

kve_context *kve_emu_context_create(void)
{
    kve_context *ctx = NULL;
    if (kve_context_create(KVE_BACKEND_CPU, &ctx) != KVE_OK ||
        kve_context_set_cpu_isa(ctx, KVE_CPU_ISA_SCALAR) != KVE_OK ||
        kve_context_set_threads(ctx, 1) != KVE_OK) {
        kve_context_destroy(ctx);
        return NULL;
    }
    kve_emu_ops = *ctx->ops;
    kve_emu_cpu_evict = kve_emu_ops.evict;
    kve_emu_ops.host_memory = 0;
    kve_emu_ops.synchronize = emu_synchronize;
    kve_emu_ops.evict = emu_evict;
    kve_emu_ops.state_update = emu_state_update;
    kve_emu_ops.cache_write = emu_cache_write;
    kve_emu_errors_reset(&kve_emu_records);
    kve_emu_message_now[0] = '\0';
    ctx->ops = &kve_emu_ops;
    return ctx;
}
