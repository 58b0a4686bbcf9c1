/*
 * test_gpu_runtime.cu — how the CUDA backend shares a device with the
 * application (label gpu; exit 77 without a device):
 *
 *   drain    kve_context_create does not wait for the application's work:
 *            a kernel on a blocking stream spins until the host raises a
 *            flag (or gives up after a bound); the host raises it only after
 *            the context exists. A context creation that drained the device
 *            (the legacy stream, cudaDeviceSynchronize) would wait for the
 *            kernel, which then gives up: the test reads which happened.
 *   errors   an error the application left in its runtime's last-error slot
 *            is still there after kvevict's calls, and kvevict's calls do
 *            not fail because of it.
 *   stream   kve_context_set_device to the same device keeps the stream
 *            set; to another device (when there is one) it goes back to the
 *            default stream, and a launch works there.
 *
 * Run with CUDA_MODULE_LOADING=EAGER (ctest sets it): under lazy loading
 * the first use of a kernel may wait for running kernels, which is the
 * driver's behaviour and not what "drain" tests.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "kvevict.h"

static int failures;

#define EXPECT(cond, ...)                                                                        \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                 \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fprintf(stderr, " (%s)\n", kve_last_error());                                        \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

/* Spin until *flag is set or about @p bound_ns have passed; *seen = 1 when
 * the flag came first, 2 when the bound did. */
__global__ void spin_until(volatile int *flag, int *seen, unsigned long long bound_ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
        if (*flag) {
            *seen = 1;
            return;
        }
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > bound_ns) {
            *seen = 2;
            return;
        }
    }
}

static void test_drain(void)
{
    int *flag = NULL, *seen = NULL;
    cudaStream_t app;
    if (cudaHostAlloc((void **)&flag, 2 * sizeof(int), cudaHostAllocMapped) != cudaSuccess ||
        cudaStreamCreate(&app) != cudaSuccess) {
        EXPECT(0, "drain: cannot set up");
        return;
    }
    seen = flag + 1;
    flag[0] = 0;
    seen[0] = 0;
    int *dflag, *dseen;
    cudaHostGetDevicePointer((void **)&dflag, flag, 0);
    dseen = dflag + 1;
    spin_until<<<1, 1, 0, app>>>(dflag, dseen, 5000000000ull); /* 5 s bound */
    kve_context *ctx = NULL;
    kve_status st = kve_context_create(KVE_BACKEND_CUDA, &ctx);
    *(volatile int *)flag = 1; /* only now: a draining create would still be waiting */
    cudaStreamSynchronize(app);
    EXPECT(st == KVE_OK, "drain: kve_context_create: %s", kve_status_string(st));
    EXPECT(*(volatile int *)seen == 1,
           "drain: the application's kernel %s: kve_context_create waited for it",
           *(volatile int *)seen == 2 ? "gave up waiting" : "did not finish");
    kve_context_destroy(ctx);
    cudaStreamDestroy(app);
    cudaFreeHost(flag);
}

/* Keys of a few coordinates on ctx (a launch), 0 when they match the CPU's. */
static int keys_match(kve_context *ctx)
{
    enum { N = 64 };
    kve_coord c[N];
    uint64_t cpu_keys[N], got[N];
    for (int i = 0; i < N; i++) {
        kve_coord x = {(uint64_t)i * 7919u, (uint32_t)i % 3, (uint32_t)i % 5, 1000u + i, 2};
        c[i] = x;
    }
    kve_context *cpu = NULL;
    kve_coord *dc = NULL;
    uint64_t *dk = NULL;
    int bad = kve_context_create(KVE_BACKEND_CPU, &cpu) != KVE_OK ||
              kve_keys(cpu, 2609, 0, c, N, cpu_keys) != KVE_OK ||
              kve_alloc(ctx, sizeof c, (void **)&dc) != KVE_OK ||
              kve_alloc(ctx, sizeof got, (void **)&dk) != KVE_OK ||
              kve_copy(ctx, dc, c, sizeof c, KVE_COPY_HOST_TO_BACKEND) != KVE_OK ||
              kve_keys(ctx, 2609, 0, dc, N, dk) != KVE_OK ||
              kve_copy(ctx, got, dk, sizeof got, KVE_COPY_BACKEND_TO_HOST) != KVE_OK ||
              kve_context_synchronize(ctx) != KVE_OK || memcmp(got, cpu_keys, sizeof got) != 0;
    kve_free(ctx, dc);
    kve_free(ctx, dk);
    kve_context_destroy(cpu);
    return bad;
}

static void test_errors(void)
{
    kve_context *ctx = NULL;
    EXPECT(kve_context_create(KVE_BACKEND_CUDA, &ctx) == KVE_OK, "errors: context");
    if (!ctx)
        return;
    void *huge = NULL; /* a non-sticky error of the application's own */
    cudaError_t app = cudaMalloc(&huge, (size_t)1 << 62);
    EXPECT(app != cudaSuccess, "errors: a 4 EiB cudaMalloc succeeded");
    EXPECT(keys_match(ctx) == 0, "errors: kvevict's launch failed or differs after the "
                                 "application's error");
    EXPECT(cudaPeekAtLastError() == app, "errors: the application's error was cleared: %s",
           cudaGetErrorName(cudaPeekAtLastError()));
    (void)cudaGetLastError();
    kve_context_destroy(ctx);
}

static void test_stream(int devices)
{
    kve_context *ctx = NULL;
    EXPECT(kve_context_create(KVE_BACKEND_CUDA, &ctx) == KVE_OK, "stream: context");
    if (!ctx)
        return;
    cudaStream_t s0;
    cudaSetDevice(0);
    cudaStreamCreate(&s0);
    void *got = NULL;
    EXPECT(kve_context_set_stream(ctx, s0) == KVE_OK && kve_context_set_device(ctx, 0) == KVE_OK &&
               kve_context_get_stream(ctx, &got) == KVE_OK && got == (void *)s0,
           "stream: set_device to the same device dropped the stream");
    EXPECT(keys_match(ctx) == 0, "stream: keys on the application's stream");
    if (devices > 1) {
        EXPECT(kve_context_set_device(ctx, 1) == KVE_OK, "stream: set_device(1)");
        EXPECT(kve_context_get_stream(ctx, &got) == KVE_OK && got == NULL,
               "stream: device 0's stream kept after set_device(1)");
        EXPECT(keys_match(ctx) == 0, "stream: keys on device 1");
    } else {
        printf("stream: one device: the move to another device is not exercised\n");
    }
    kve_context_destroy(ctx);
    cudaSetDevice(0);
    cudaStreamDestroy(s0);
}

int main(void)
{
    int devices = 0, avail = 0;
    kve_backend_available(KVE_BACKEND_CUDA, &avail);
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 || !avail) {
        kve_context *none = NULL;
        kve_context_create(KVE_BACKEND_CUDA, &none);
        printf("SKIP: no CUDA device for kvevict: %s\n", kve_last_error());
        return 77;
    }
    test_drain();
    test_errors();
    test_stream(devices);
    if (!failures)
        printf("CUDA runtime sharing: drain, errors, stream: ok\n");
    return failures ? 1 : 0;
}
