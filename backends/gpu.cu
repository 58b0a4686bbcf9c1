/*
 * gpu.cu — the GPU backend's driver, libkvevict_cuda.so: the context
 * (device, limits, error records), memory, streams, the launches of the
 * kernels of kernels_cuda/gpu_kernels.cuh as kernels_cuda/kve_launch.h
 * plans them, and the table of operations the core loads at run time
 * (common/registry.c).
 *
 * Written in CUDA's names; kernels_hip/hip_backend.hip compiles this same
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

/* ---- errors and context state --------------------------------------------- */

typedef struct kve_gpu {
    int device;
    uint32_t warp;            /* the device's warp width */
    kve_launch_limits limits; /* grid caps and eviction's shared memory (kve_launch.h) */
    uint64_t *errors;         /* device: KVE_DEV_ERR_KINDS records */
    /* The library's own non-blocking stream on this device, for work of its
     * own that orders after nothing of the application's (setting up the
     * error records): waiting for it never waits for other streams. */
    cudaStream_t own;
    /* kve_score's device memory (kve_score_plan): the scratch (the call's
     * rows, raw scores) and the counters (zeros between calls), grown as
     * calls need; score_done marks the last scorer launch, which the next
     * call's upload waits for, on whichever stream it comes. */
    unsigned char *score_scratch;
    uint32_t *score_arrived;
    size_t score_scratch_bytes, score_arrived_bytes;
    cudaEvent_t score_done;
} kve_gpu;

/*
 * A runtime error as KVE_ERR_DEVICE, naming the call and the error.
 *
 * The runtime keeps a "last error" per host thread. In this CUDA library
 * that slot is kvevict's own (the runtime is a static copy); in the HIP one
 * it is shared with the application (libamdhip64). kvevict never reads it
 * to learn how its own work went: every call's status is the value it
 * returned, and kernels are launched through cudaLaunchKernel /
 * hipLaunchKernel, whose return value is that launch's status. So an error
 * the application left there is neither reported by kvevict nor cleared.
 * The call that failed here was kvevict's, and its error, now the slot's
 * most recent, is taken off after it is reported, so that nobody meets it
 * again later. A sticky error (an earlier kernel's fault) makes every
 * later call fail, kvevict's included, until the process ends.
 */
static kve_status kve_gpu_fail(cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* this call's error, just recorded: not the application's */
    return kve_host->set_error(KVE_ERR_DEVICE, "%s: %s: %s (%s)", KVE_GPU_VENDOR, what,
                               cudaGetErrorName(e), cudaGetErrorString(e));
}

#define KVE_GPU_TRY(call, what)                                                                  \
    do {                                                                                         \
        cudaError_t kve_e_ = (call);                                                             \
        if (kve_e_ != cudaSuccess)                                                               \
            return kve_gpu_fail(kve_e_, what);                                                   \
    } while (0)

static kve_gpu *kve_gpu_of(kve_context *ctx) { return (kve_gpu *)ctx->impl; }

/* Whether @p s is a stream of @p device (an error reads as "no"). ROCm 5
 * and CUDA before 12.8 cannot say (no stream-to-device query): there, only
 * a stream of the context's current device is taken for one. */
static int kve_stream_on_device(kve_context *ctx, cudaStream_t s, int device)
{
#if defined(KVE_GPU_HIP) || CUDART_VERSION < 12080
    (void)s;
    return device == kve_gpu_of(ctx)->device;
#else
    (void)ctx;
    int on = -1;
    if (cudaStreamGetDevice(s, &on) != cudaSuccess) {
        (void)cudaGetLastError(); /* this call's own error */
        return 0;
    }
    return on == device;
#endif
}

#if !defined(KVE_GPU_HIP)
/* The oldest driver branch that runs a toolkit's major version. */
static int kve_min_driver(int runtime_major)
{
    return runtime_major >= 13 ? 580 : runtime_major == 12 ? 525 : 450;
}
#endif

/* Why the probe found no usable device, in words a user can act on. */
static const char *kve_probe_reason(cudaError_t e, int driver, int runtime, char *buf, size_t n)
{
#if defined(KVE_GPU_HIP)
    snprintf(buf, n, "HIP: no usable AMD GPU: hipGetDeviceCount: %s (%s); HIP runtime %d, driver %d",
             cudaGetErrorName(e), cudaGetErrorString(e), runtime, driver);
#else
    int rmaj = runtime / 1000, rmin = runtime % 1000 / 10;
    if (driver == 0)
        snprintf(buf, n,
                 "CUDA: no NVIDIA driver found (libcuda.so.1 cannot be loaded): %s; this library "
                 "was built with CUDA %d.%d and needs driver R%d or later",
                 cudaGetErrorName(e), rmaj, rmin, kve_min_driver(rmaj));
    else if (e == cudaErrorInsufficientDriver || driver < runtime)
        snprintf(buf, n,
                 "CUDA: the NVIDIA driver is too old: it supports CUDA %d.%d, this library was "
                 "built with CUDA %d.%d and needs driver R%d or later (%s; see docs/GPU.md "
                 "\"Driver and toolkit\")",
                 driver / 1000, driver % 1000 / 10, rmaj, rmin, kve_min_driver(rmaj),
                 cudaGetErrorName(e));
    else if (e == cudaErrorNoDevice)
        snprintf(buf, n, "CUDA: the NVIDIA driver (CUDA %d.%d) sees no device (%s)", driver / 1000,
                 driver % 1000 / 10, cudaGetErrorName(e));
    else
        snprintf(buf, n, "CUDA: cudaGetDeviceCount: %s (%s); driver CUDA %d.%d, runtime %d.%d",
                 cudaGetErrorName(e), cudaGetErrorString(e), driver / 1000, driver % 1000 / 10,
                 rmaj, rmin);
#endif
    return buf;
}
static cudaStream_t kve_stream(kve_context *ctx) { return (cudaStream_t)ctx->stream; }

/* Make the context's device current on this host thread. */
static kve_status kve_gpu_enter(kve_context *ctx)
{
    int current = -1;
    KVE_GPU_TRY(cudaGetDevice(&current), "get device");
    if (current != kve_gpu_of(ctx)->device)
        KVE_GPU_TRY(cudaSetDevice(kve_gpu_of(ctx)->device), "set device");
    return KVE_OK;
}

static kve_status kve_gpu_attr(int *out, cudaDeviceAttr attr, int device, const char *what)
{
    KVE_GPU_TRY(cudaDeviceGetAttribute(out, attr, device), what);
    return KVE_OK;
}

/* Set up @p g on @p device: properties, kernel limits, error records. */
static kve_status kve_gpu_open(kve_gpu *g, int device)
{
    int count = 0, sms = 0, warp = 0, smem = 0;
    KVE_GPU_TRY(cudaGetDeviceCount(&count), "device count");
    KVE_GPU_CHECK(device >= count, KVE_ERR_RANGE, "device = %d: this machine has %d %s device(s)",
                  device, count, KVE_GPU_VENDOR);
    KVE_GPU_TRY(cudaSetDevice(device), "set device");
    KVE_TRY(kve_gpu_attr(&sms, cudaDevAttrMultiProcessorCount, device, "multiprocessor count"));
    KVE_TRY(kve_gpu_attr(&warp, cudaDevAttrWarpSize, device, "warp size"));
    KVE_TRY(kve_gpu_attr(&smem, KVE_GPU_SMEM_ATTR, device, "shared memory per block"));
    /* Block sizes are multiples of 64; a warp must divide them. */
    KVE_GPU_CHECK(warp <= 0 || 64 % warp != 0, KVE_ERR_UNAVAILABLE,
                  "%s device %d: warp width %d is not supported (32 or 64)", KVE_GPU_VENDOR, device,
                  warp);
    cudaFuncAttributes fa;
    KVE_GPU_TRY(cudaFuncGetAttributes(&fa, (const void *)kve_evict_kernel),
                "kernel attributes (is this device's architecture in the build?)");
    g->device = device;
    g->warp = (uint32_t)warp;
    /* what the eviction kernels may take beyond their static shared memory */
    size_t smem_dyn_max =
        (size_t)smem > fa.sharedSizeBytes ? (size_t)smem - fa.sharedSizeBytes : 0;
    g->limits = kve_launch_limits_of((uint32_t)sms, smem_dyn_max);
#if !defined(KVE_GPU_HIP)
    KVE_GPU_TRY(cudaFuncSetAttribute((const void *)kve_evict_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem_dyn_max),
                "kernel shared memory limit");
    KVE_GPU_TRY(cudaFuncGetAttributes(&fa, (const void *)kve_state_evict_kernel),
                "kernel attributes (state eviction)");
    KVE_GPU_CHECK(fa.sharedSizeBytes > (size_t)smem - smem_dyn_max, KVE_ERR_INTERNAL,
                  "state eviction kernel: %zu bytes of static shared memory, more than the "
                  "eviction kernel's",
                  (size_t)fa.sharedSizeBytes);
    KVE_GPU_TRY(cudaFuncSetAttribute((const void *)kve_state_evict_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem_dyn_max),
                "kernel shared memory limit (state eviction)");
#endif
    /* The records start as "none raised". The memset runs on the library's
     * own non-blocking stream and only that stream is waited for: neither
     * the legacy default stream (which would wait for every blocking stream
     * of the application) nor the whole device is drained. Once the host
     * has seen the memset complete, every later launch, on any stream, sees
     * its result. */
    KVE_GPU_TRY(cudaStreamCreateWithFlags(&g->own, cudaStreamNonBlocking), "stream create");
    cudaError_t e = cudaMalloc((void **)&g->errors, KVE_DEV_ERR_KINDS * sizeof(uint64_t));
    const char *what = "malloc";
    if (e == cudaSuccess) {
        what = "memset (error records)";
        e = cudaMemsetAsync(g->errors, 0xff, KVE_DEV_ERR_KINDS * sizeof(uint64_t), g->own);
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->own);
    if (e == cudaSuccess) {
        what = "event create (scorer)";
        e = cudaEventCreateWithFlags(&g->score_done, cudaEventDisableTiming);
    }
    if (e != cudaSuccess) {
        if (g->errors)
            (void)cudaFree(g->errors);
        (void)cudaStreamDestroy(g->own);
        g->errors = NULL;
        g->own = NULL;
        return kve_gpu_fail(e, what);
    }
    return KVE_OK;
}

static void kve_gpu_close(kve_gpu *g)
{
    if (!g || cudaSetDevice(g->device) != cudaSuccess)
        return;
    if (g->errors)
        (void)cudaFree(g->errors);
    if (g->score_scratch)
        (void)cudaFree(g->score_scratch);
    if (g->score_arrived)
        (void)cudaFree(g->score_arrived);
    if (g->score_done)
        (void)cudaEventDestroy(g->score_done);
    if (g->own)
        (void)cudaStreamDestroy(g->own);
}

/* ---- operations --------------------------------------------------------- */

/*
 * Whether a device is usable. When not, the reason goes to the core through
 * set_error (KVE_ERR_UNAVAILABLE) while the probe itself returns KVE_OK:
 * the core keeps the message and names it when a context for this backend
 * is asked for (`kvevict version` prints it). The CUDA runtime is linked
 * statically, so the driver must be at least as new as the toolkit that
 * built this library (CUDA 13: R580); an older one answers
 * cudaErrorInsufficientDriver, and cudaDriverGetVersion tells which CUDA
 * version it does support (0: no driver at all).
 */
static kve_status gpu_probe(int *out_available)
{
    int count = 0, driver = 0, runtime = 0;
    cudaError_t e = cudaGetDeviceCount(&count); /* no driver or no device: an error */
    *out_available = e == cudaSuccess && count > 0;
    if (*out_available)
        return KVE_OK;
    if (e != cudaSuccess)
        (void)cudaGetLastError(); /* the probe's own error */
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    if (e == cudaSuccess)
        e = cudaErrorNoDevice; /* no error, but no device either */
    char reason[320];
    kve_host->set_error(KVE_ERR_UNAVAILABLE, "%s",
                        kve_probe_reason(e, driver, runtime, reason, sizeof reason));
    return KVE_OK;
}

static kve_status gpu_context_init(kve_context *ctx)
{
    kve_gpu *g = (kve_gpu *)calloc(1, sizeof *g);
    KVE_GPU_CHECK(!g, KVE_ERR_NOMEM, "cannot allocate a %s context (%zu bytes of host memory)",
                  KVE_GPU_VENDOR, sizeof *g);
    kve_status st = kve_gpu_open(g, ctx->device);
    if (st != KVE_OK) {
        free(g);
        return st;
    }
    ctx->impl = g;
    return KVE_OK;
}

static void gpu_context_fini(kve_context *ctx)
{
    kve_gpu_close(kve_gpu_of(ctx));
    free(ctx->impl);
    ctx->impl = NULL;
}

/* A new device gets its own records and stream. A stream the application
 * set belongs to the old device (a launch on it from the new one fails
 * with an invalid handle), so the context goes back to the default stream
 * unless the stream set is one of the new device's: set one of the new
 * device after this call (include/kvevict.h, kve_context_set_device). */
static kve_status gpu_set_device(kve_context *ctx, int device)
{
    kve_gpu fresh;
    memset(&fresh, 0, sizeof fresh);
    KVE_TRY(kve_gpu_open(&fresh, device));
    if (ctx->stream && !kve_stream_on_device(ctx, (cudaStream_t)ctx->stream, device))
        ctx->stream = NULL;
    kve_gpu_close(kve_gpu_of(ctx));
    *kve_gpu_of(ctx) = fresh;
    return KVE_OK;
}

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

static kve_status gpu_evict(kve_context *ctx, const kve_batch *b, const kve_evict_out *o,
                            void *workspace, size_t workspace_bytes)
{
    (void)workspace_bytes; /* api.c checked it against gpu_evict_workspace_size */
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    kve_evict_plan p = kve_evict_plan_make(&g->limits, b);
    kve_evict_args a = kve_evict_args_make(b, o, &p, workspace, g->errors);
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
 * the job interpreter (a thread per item), or for a wave's rounds the
 * round kernel (a block per table). */
static kve_status gpu_state_jobs(kve_context *ctx, const kve_state_update *u, int round)
{
    KVE_TRY(kve_gpu_enter(ctx));
    if (!u->n_jobs)
        return KVE_OK;
    kve_gpu *g = kve_gpu_of(ctx);
    kve_state_args a = kve_state_args_make(u, g->errors);
    if (round)
        KVE_LAUNCH(ctx, kve_state_round_kernel, kve_state_args,
                   kve_state_round_plan_grid(&g->limits, u), KVE_ROUND_THREADS, 0, a);
    else
        KVE_LAUNCH(ctx, kve_state_kernel, kve_state_args,
                   kve_state_plan_grid(&g->limits, u, KVE_STATE_THREADS), KVE_STATE_THREADS, 0,
                   a);
    return KVE_OK;
}

static kve_status gpu_state_update(kve_context *ctx, const kve_state_update *u)
{
    return gpu_state_jobs(ctx, u, 0);
}

static kve_status gpu_state_round(kve_context *ctx, const kve_state_update *u)
{
    return gpu_state_jobs(ctx, u, 1);
}

/* One launch over every call row (rows not due return at once), planned
 * as kve_evict of the same shape: the state sized its workspace so. */
static kve_status gpu_state_evict(kve_context *ctx, const kve_state_evict *e)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    kve_evict_plan p = kve_evict_plan_make(&g->limits, &e->b);
    kve_state_evict_args a = kve_state_evict_args_make(e, &p, g->errors);
    KVE_LAUNCH(ctx, kve_state_evict_kernel, kve_state_evict_args, p.grid, p.threads, p.dyn_smem, a);
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

/* One upload of the call's rows, then one launch whatever n_rows
 * (kve_score_plan). The scratch is the context's: the upload waits for the
 * previous call's launch, which may have gone to another stream. */
static kve_status gpu_score(kve_context *ctx, const kve_score_desc *d)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    kve_score_plan p = kve_score_plan_make(&g->limits, d, KVE_SCORE_THREADS);
    KVE_GPU_CHECK(p.scratch_bytes == SIZE_MAX, KVE_ERR_NOMEM,
                  "kve_score: the raw scores of %u rows of up to %u slots exceed the address space",
                  d->n_rows, p.max_slots);
    KVE_TRY(kve_gpu_grow(ctx, (void **)&g->score_scratch, &g->score_scratch_bytes,
                         p.scratch_bytes, 0, "malloc (scorer scratch)"));
    KVE_TRY(kve_gpu_grow(ctx, (void **)&g->score_arrived, &g->score_arrived_bytes,
                         p.arrived_bytes, 1, "malloc (scorer counters)"));
    KVE_GPU_TRY(cudaStreamWaitEvent(kve_stream(ctx), g->score_done, 0),
                "stream wait (the previous scorer launch)");
    KVE_TRY(kve_gpu_upload(ctx, g->score_scratch, d->rows, p.rows_bytes, "memcpy (scorer rows)"));
    kve_score_args a;
    kve_score_args_make(d, &p, g->score_scratch, g->score_arrived, g->errors, &a);
    KVE_LAUNCH(ctx, kve_score_kernel, kve_score_args, p.grid, KVE_SCORE_THREADS, p.smem, a);
    KVE_GPU_TRY(cudaEventRecord(g->score_done, kve_stream(ctx)), "event record (scorer)");
    return KVE_OK;
}

/* A state's call scored from its device row list: one launch, nothing
 * uploaded, allocated or waited for (the scratch is the state's, used in
 * its stream's order), so a graph can capture it. */
static kve_status gpu_state_score(kve_context *ctx, const kve_state_score_call *c)
{
    KVE_TRY(kve_gpu_enter(ctx));
    kve_gpu *g = kve_gpu_of(ctx);
    kve_score_plan p = kve_state_score_plan_make(&g->limits, c, KVE_SCORE_THREADS);
    kve_score_args a;
    kve_state_score_args_make(c, &p, g->errors, &a);
    KVE_LAUNCH(ctx, kve_score_kernel, kve_score_args, p.grid, KVE_SCORE_THREADS, p.smem, a);
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
    .state_evict = gpu_state_evict,
    .upload = gpu_upload,
    .state_round = gpu_state_round,
    .score = gpu_score,
    .state_plan = gpu_state_plan,
    .state_score = gpu_state_score,
};

KVE_GPU_EXPORT const kve_backend_ops *kve_backend_entry_v1(const kve_host_services *host)
{
    if (!host || host->abi_version != KVE_BACKEND_ABI_VERSION || !host->set_error)
        return NULL;
    kve_host = host;
    return &kve_gpu_ops;
}
