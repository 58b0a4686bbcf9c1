/*
 * gpu.cu — the GPU backend's driver, libkvevict_cuda.so: the context
 * (device, limits, error records), memory, streams, the launches of the
 * kernels of kernels_cuda/gpu_kernels.cuh as kernels_cuda/kve_launch.h
 * plans them, and the table of operations the core loads at run time
 * (frontend/registry.c). The context itself (state, errors, probe, create,
 * end, move to a device) is gpu_context.cuh, included below.
 *
 * Written in CUDA's names; backends/hip_backend.hip compiles this same
 * file as HIP after kve_hip_vendor.h maps the names (ggml's habit).
 *
 * The library never links the core: errors go through the core's
 * kve_host_services. The CUDA runtime is linked statically, so a machine
 * needs only the driver (libcuda.so.1); without it, or without a device,
 * the probe says "not available" and the core goes on without CUDA.
 *
 * GPU work is ordered on the context's stream and allocates nothing: the
 * eviction scratch lives in shared memory, or in the caller's workspace when
 * a head is too large for it; a cache state's jobs are uploaded by the
 * state to its own device memory. Argument checks the host cannot do (slot_pos contents,
 * evicted lists, a state's freed slots, the cache write's rows, slots and
 * pages) run in the kernels, which raise records in a small buffer of the
 * context; kve_context_synchronize() reports them.
 */
#if defined(KVE_GPU_HIP)
#include "kve_hip_vendor.h"
#else
#include <cuda_runtime.h>
#define KVE_GPU_KIND KVE_BACKEND_CUDA
#define KVE_GPU_NAME "cuda"
#define KVE_GPU_VENDOR "CUDA"
#define KVE_GPU_SMEM_ATTR cudaDevAttrMaxSharedMemoryPerBlockOptin
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_backend.h"
#include "kve_error.h" /* KVE_TRY only: kve_error_set lives in the core */
#include "gpu_kernels.cuh" /* the kernels; kve_launch.h plans their launches */

#define KVE_GPU_EXPORT extern "C" __attribute__((visibility("default")))
/* Kernel parameters: 4 KiB is the limit on every vendor and architecture. */
static_assert(sizeof(kve_state_args) <= 4096, "state arguments fit the parameters");
static_assert(sizeof(kve_state_evict_args) <= 4096, "state eviction arguments fit the parameters");
static_assert(sizeof(kve_cache_write_args) <= 4096, "cache write arguments fit the parameters");
static_assert(sizeof(kve_score_args) <= 4096, "score arguments fit the parameters");
/* The scorer's shared memory stays under the 48 KiB every device gives
 * without opting in: kve_score_smem_bytes at its worst (a KV head's group
 * x frequencies at KVE_SCORE_MAX_COEFS, the larger of the phases and the
 * per-thread sums (two doubles each), the histogram, KVE_SCORE_MAX_QHEADS
 * query heads' mean and 1/std in double), written from the same macros. */
#define KVE_SCORE_SMEM_WORST                                                                     \
    (KVE_SCORE_MAX_COEFS * 12 +                                                                   \
     (KVE_SCORE_MAX_FREQS > KVE_SCORE_THREADS ? KVE_SCORE_MAX_FREQS : KVE_SCORE_THREADS) * 16 +   \
     256 * 4 + KVE_SCORE_MAX_QHEADS * 16 + 16)
static_assert(KVE_SCORE_SMEM_WORST <= 48 * 1024,
              "score shared memory (kve_score_smem_bytes at its worst)");

static const kve_host_services *kve_host;

#define KVE_GPU_CHECK(cond, status, ...)                                                         \
    do {                                                                                         \
        if (cond)                                                                                \
            return kve_host->set_error((status), __VA_ARGS__);                                   \
    } while (0)

#include "gpu_context.cuh" /* the context: state, errors, probe, create, end, move */

/* ---- operations --------------------------------------------------------- */

static kve_status gpu_alloc(kve_context *ctx, size_t bytes, void **out)
{
    KVE_TRY(kve_gpu_enter(ctx));
    KVE_GPU_TRY(cudaMalloc(out, bytes), "malloc");
    return KVE_OK;
}

static kve_status gpu_free(kve_context *ctx, void *ptr)
{
    KVE_TRY(kve_gpu_enter(ctx));
    KVE_GPU_TRY(cudaFree(ptr), "free");
    return KVE_OK;
}

static kve_status gpu_copy(kve_context *ctx, void *dst, const void *src, size_t bytes,
                           kve_copy_kind kind)
{
    /* by kve_copy_kind: host to backend, backend to host, backend to backend */
    static const cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                           cudaMemcpyDeviceToDevice};
    KVE_TRY(kve_gpu_enter(ctx));
    KVE_GPU_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], kve_stream(ctx)), "memcpy");
    if (kind != KVE_COPY_BACKEND_TO_BACKEND) /* device to device: stream-ordered, capturable */
        KVE_GPU_TRY(cudaStreamSynchronize(kve_stream(ctx)), "stream synchronize");
    return KVE_OK;
}

/* Host to device, stream-ordered, no wait. From pageable memory the
 * driver stages the bytes before returning, so the host's array is free
 * again at once. */
static kve_status kve_gpu_upload(kve_context *ctx, void *dst, const void *src, size_t bytes,
                                 const char *what)
{
    KVE_GPU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, kve_stream(ctx)), what);
    return KVE_OK;
}

/* The state's jobs. */
static kve_status gpu_upload(kve_context *ctx, void *dst, const void *src, size_t bytes)
{
    KVE_TRY(kve_gpu_enter(ctx));
    return kve_gpu_upload(ctx, dst, src, bytes, "memcpy (state jobs)");
}

/* Wait for the stream, then report (and clear) what the kernels raised. */
static kve_status gpu_synchronize(kve_context *ctx)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    uint64_t rec[KVE_DEV_ERR_KINDS];
    KVE_GPU_TRY(
        cudaMemcpyAsync(rec, g->errors, sizeof rec, cudaMemcpyDeviceToHost, kve_stream(ctx)),
        "memcpy (error records)");
    KVE_GPU_TRY(cudaStreamSynchronize(kve_stream(ctx)), "stream synchronize");
    int raised = 0;
    for (int k = 0; k < KVE_DEV_ERR_KINDS; k++)
        raised |= rec[k] != KVE_DEV_ERR_NONE;
    if (!raised)
        return KVE_OK;
    KVE_GPU_TRY(cudaMemsetAsync(g->errors, 0xff, sizeof rec, kve_stream(ctx)),
                "memset (error records)");
    KVE_GPU_TRY(cudaStreamSynchronize(kve_stream(ctx)), "stream synchronize");
    return kve_dev_errors_status(rec, kve_host->set_error);
}

/* Launch @p kernel (one argument, by value, at @p arg) on the context's
 * stream; the status is this launch's own (see kve_gpu_fail). */
static kve_status kve_launch(kve_context *ctx, const void *kernel, uint32_t grid,
                             uint32_t threads, size_t smem, void *arg, const char *what)
{
    void *args[1] = {arg};
    cudaError_t e = cudaLaunchKernel(kernel, dim3(grid), dim3(threads), args, smem,
                                     kve_stream(ctx));
    return e == cudaSuccess ? KVE_OK : kve_gpu_fail(e, what);
}

/* kernel's argument must be the type of arg: checked by the assignment. */
#define KVE_LAUNCH(ctx, kernel, type, grid, threads, smem, arg)                                 \
    do {                                                                                         \
        void (*kve_k_)(type) = kernel;                                                           \
        type *kve_a_ = &(arg);                                                                   \
        KVE_TRY(kve_launch((ctx), (const void *)kve_k_, (grid), (threads), (smem), kve_a_,      \
                           #kernel " launch"));                                                  \
    } while (0)

static kve_status gpu_keys(kve_context *ctx, uint64_t seed, uint32_t flags, const kve_coord *coords,
                           size_t n, uint64_t *keys)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_keys_args a = {seed, flags, coords, n, keys};
    uint32_t grid = kve_keys_plan_grid(&kve_gpu_of(ctx)->limits, n, KVE_KEYS_THREADS);
    KVE_LAUNCH(ctx, kve_keys_kernel, kve_keys_args, grid, KVE_KEYS_THREADS, 0, a);
    return KVE_OK;
}

static kve_status gpu_evict_workspace_size(kve_context *ctx, const kve_batch *b, size_t *out)
{
    *out = kve_evict_plan_make(&kve_gpu_of(ctx)->limits, b).workspace_bytes;
    return KVE_OK;
}

/* A batch's heads; over rows, one launch over every call row (rows not
 * due return at once), planned as kve_evict of the same shape: the state
 * sized its workspace so (api.c checked a batch's against
 * gpu_evict_workspace_size). */
static kve_status gpu_evict(kve_context *ctx, const kve_evict_call *c)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    kve_evict_plan p = kve_evict_plan_make(&g->limits, c->b);
    if (c->rows) {
        kve_state_evict_args a = kve_state_evict_args_make(c->rows, &p, g->errors);
        KVE_LAUNCH(ctx, kve_state_evict_kernel, kve_state_evict_args, p.grid, p.threads,
                   p.dyn_smem, a);
        return KVE_OK;
    }
    kve_evict_args a = kve_evict_args_make(c->b, c->o, &p, c->workspace, g->errors);
    KVE_LAUNCH(ctx, kve_evict_kernel, kve_evict_args, p.grid, p.threads, p.dyn_smem, a);
    return KVE_OK;
}

static kve_status gpu_compact(kve_context *ctx, const kve_compact_desc *d)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    kve_compact_args a;
    KVE_TRY(kve_compact_args_make(d, g->errors, kve_host->set_error, &a));
    kve_compact_plan p = kve_compact_plan_make(&g->limits, &a);
    KVE_LAUNCH(ctx, kve_compact_move_kernel, kve_compact_args, p.move_grid, KVE_COMPACT_THREADS,
               0, a);
    KVE_LAUNCH(ctx, kve_compact_slots_kernel, kve_compact_args, p.slots_grid,
               KVE_COMPACT_THREADS, 0, a);
    return KVE_OK;
}

/* One wave's plan: one block, whatever the call's data. */
static kve_status gpu_state_plan(kve_context *ctx, const kve_state_plan *p)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_state_plan_args a = {*p, kve_gpu_of(ctx)->errors};
    KVE_LAUNCH(ctx, kve_state_plan_kernel, kve_state_plan_args, 1, KVE_STATE_PLAN_THREADS, 0, a);
    return KVE_OK;
}

/* One launch over the uploaded jobs, sized by the state's shape bound:
 * the job interpreter (a thread per item), or for a wave's rounds
 * (u->rounds) the round kernel (a block per table). */
static kve_status gpu_state_update(kve_context *ctx, const kve_state_update *u)
{
    KVE_TRY(kve_gpu_enter(ctx));
    if (!u->n_jobs)
        return KVE_OK;
    kve_gpu *g = kve_gpu_of(ctx);
    kve_state_args a = kve_state_args_make(u, g->errors);
    if (u->rounds)
        KVE_LAUNCH(ctx, kve_state_round_kernel, kve_state_args,
                   kve_state_round_plan_grid(&g->limits, u), KVE_ROUND_THREADS, 0, a);
    else
        KVE_LAUNCH(ctx, kve_state_kernel, kve_state_args,
                   kve_state_plan_grid(&g->limits, u, KVE_STATE_THREADS), KVE_STATE_THREADS, 0,
                   a);
    return KVE_OK;
}

/* *buf of at least @p need bytes (*have now), zeroed on the context's
 * stream when @p zero. cudaFree waits for the device, so no launch still
 * reads the old one. */
static kve_status kve_gpu_grow(kve_context *ctx, void **buf, size_t *have, size_t need, int zero,
                               const char *what)
{
    if (need <= *have && *buf)
        return KVE_OK;
    if (*buf)
        KVE_GPU_TRY(cudaFree(*buf), what);
    *buf = NULL;
    *have = 0;
    size_t want = need + need / 4; /* room for the next calls' growth */
    KVE_GPU_TRY(cudaMalloc(buf, want ? want : 1), what);
    *have = want;
    if (zero)
        KVE_GPU_TRY(cudaMemsetAsync(*buf, 0, want, kve_stream(ctx)), what);
    return KVE_OK;
}

/* One launch whatever n_rows (kve_score_plan), after one upload of the
 * given rows. With the state's scratch (c->scratch) nothing is allocated or
 * waited for, and a listed call uploads nothing, so a graph can capture
 * it; the context's scratch (kve_score) grows as calls need, and the
 * upload waits for the previous call's launch, which may have gone to
 * another stream. */
static kve_status gpu_score(kve_context *ctx, const kve_score_call *c)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    kve_score_plan p = kve_score_plan_make(&g->limits, c, KVE_SCORE_THREADS);
    unsigned char *scratch = (unsigned char *)c->scratch;
    uint32_t *arrived = c->arrived;
    if (!scratch) {
        KVE_GPU_CHECK(p.scratch_bytes == SIZE_MAX, KVE_ERR_NOMEM,
                      "kve_score: the raw scores of %u rows of up to %u slots exceed the address "
                      "space",
                      c->d.n_rows, p.max_slots);
        KVE_TRY(kve_gpu_grow(ctx, (void **)&g->score_scratch, &g->score_scratch_bytes,
                             p.scratch_bytes, 0, "malloc (scorer scratch)"));
        KVE_TRY(kve_gpu_grow(ctx, (void **)&g->score_arrived, &g->score_arrived_bytes,
                             p.arrived_bytes, 1, "malloc (scorer counters)"));
        KVE_GPU_TRY(cudaStreamWaitEvent(kve_stream(ctx), g->score_done, 0),
                    "stream wait (the previous scorer launch)");
        scratch = g->score_scratch;
        arrived = g->score_arrived;
    }
    if (p.rows_bytes)
        KVE_TRY(kve_gpu_upload(ctx, scratch, c->d.rows, p.rows_bytes, "memcpy (scorer rows)"));
    kve_score_args a;
    kve_score_args_make(c, &p, scratch, arrived, g->errors, &a);
    KVE_LAUNCH(ctx, kve_score_kernel, kve_score_args, p.grid, KVE_SCORE_THREADS, p.smem, a);
    if (!c->scratch)
        KVE_GPU_TRY(cudaEventRecord(g->score_done, kve_stream(ctx)), "event record (scorer)");
    return KVE_OK;
}

static kve_status gpu_cache_write(kve_context *ctx, const kve_cache_write_desc *d)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    kve_cache_write_args a;
    KVE_TRY(kve_cache_write_args_make(d, KVE_CACHE_WRITE_THREADS, g->errors, kve_host->set_error,
                                      &a));
    /* one launch: moves and writes (cache_write_body.h) */
    kve_cache_write_plan p = kve_cache_write_plan_make(&g->limits, &a, KVE_CACHE_WRITE_THREADS);
    KVE_LAUNCH(ctx, kve_cache_write_kernel, kve_cache_write_args, p.grid,
               KVE_CACHE_WRITE_THREADS, 0, a);
    return KVE_OK;
}

/* ---- the entry point the core looks up ------------------------------------- */

static const kve_backend_ops kve_gpu_ops = {
    .abi_version = KVE_BACKEND_ABI_VERSION,
    .kind = KVE_GPU_KIND,
    .name = KVE_GPU_NAME,
    .host_memory = 0,
    .probe = gpu_probe,
    .context_init = gpu_context_init,
    .context_fini = gpu_context_fini,
    .set_device = gpu_set_device,
    .alloc = gpu_alloc,
    .free = gpu_free,
    .copy = gpu_copy,
    .synchronize = gpu_synchronize,
    .keys = gpu_keys,
    .evict_workspace_size = gpu_evict_workspace_size,
    .evict = gpu_evict,
    .compact = gpu_compact,
    .state_update = gpu_state_update,
    .cache_write = gpu_cache_write,
    .upload = gpu_upload,
    .score = gpu_score,
    .state_plan = gpu_state_plan,
};

KVE_GPU_EXPORT const kve_backend_ops *kve_backend_entry_v1(const kve_host_services *host)
{
    if (!host || host->abi_version != KVE_BACKEND_ABI_VERSION || !host->set_error)
        return NULL;
    kve_host = host;
    return &kve_gpu_ops;
}
