/*
 * gpu_context.cuh — the GPU driver's context, a part of backends/gpu.cu
 * (included once, there, after the kernels and the error macros): the
 * context's state (device, limits, error records, the library's own stream,
 * the scorer's memory), runtime errors as statuses, the probe's reasons, and
 * the operations that make, move and end a context (probe, init, fini,
 * set_device). Memory, copies, launches and the table stay in gpu.cu.
 */

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

/* ---- the context's operations: probe, create, end, move ---------------- */

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
