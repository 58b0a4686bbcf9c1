/*
 * gpu_bench.cu — what bench/gpu_check.sh measures on a GPU, through the
 * public API on a stream of our own, timed with device events:
 *
 *   G2 eviction   one round = 64 layers x 8 KV heads, 2112 slots each
 *   G3 eviction   128 sequences of G1 (36 x 8 heads) in one call
 *   compaction    K and V (256-byte entries) of a G2 round, out of place and
 *                 in place, against a device-to-device copy of the same bytes
 *   decode step   G2 at 128 sequences, every row in a round: the cache state's
 *                 append, then 64 layers of moves and writes (bench_step.h)
 *   scored step   G1, TriAttention: 36 kve_state_score_device launches and
 *                 the planned append, a CUDA graph, against the host API
 *   scoring       one G1 round of K-norm and of TriAttention (36 kve_score
 *                 calls), its key bytes over its time against the device's
 *                 bandwidth measured as a device-to-device copy
 *
 * plus the digest of each eviction against the CPU backend's. Lines starting
 * with "RESULT" are for the script: RESULT <name> <value>.
 * Built as CUDA here and as HIP by kernels_hip/ (kve_hip_vendor.h). The
 * decode steps are gpu_bench_step.cuh, the scoring gpu_bench_score.cuh.
 *
 * usage: kvevict_gpu_bench [cuda|hip] [--quick]
 */
#if defined(KVE_GPU_HIP)
#include "kve_hip_vendor.h"
#else
#include <cuda_runtime.h>
#define KVE_GPU_NAME "cuda"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KVE_EXPERIMENTAL /* the scored step's kve_state_score_device */
#include "kvevict.h"
#include "bench_step.h"

#define KVE_B_CHECK(call)                                                                        \
    do {                                                                                         \
        kve_status st_ = (call);                                                                 \
        if (st_ != KVE_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,                   \
                    kve_status_string(st_), kve_last_error());                                   \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

#define KVE_B_RT(call)                                                                           \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

/* The paper's shape: P = 1024, B = 2048, W = 64; at eviction a head holds
 * 2112 slots: 1024 prompt, 1024 candidates, 64 window; it evicts 64. */
enum { KVE_P = 1024, KVE_B = 2048, KVE_W = 64, KVE_SLOTS = 2112, KVE_ENTRY = 256 };

typedef struct kve_bench {
    kve_context *gpu, *cpu;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    int quick;
} kve_bench;

/* Device time of @p launch between two events, in microseconds. */
template <typename F> static double kve_time_us(kve_bench *b, F launch)
{
    KVE_B_RT(cudaEventRecord(b->start, b->stream));
    launch();
    KVE_B_RT(cudaEventRecord(b->stop, b->stream));
    KVE_B_RT(cudaEventSynchronize(b->stop));
    float ms = 0;
    KVE_B_RT(cudaEventElapsedTime(&ms, b->start, b->stop));
    return ms * 1000.0;
}

static void *kve_dev(kve_bench *b, const void *host, size_t bytes)
{
    void *d = NULL;
    KVE_B_CHECK(kve_alloc(b->gpu, bytes, &d));
    if (host)
        KVE_B_CHECK(kve_copy(b->gpu, d, host, bytes, KVE_COPY_HOST_TO_BACKEND));
    return d;
}

/* A batch of n_seqs x layers x 8 heads in the paper's shape, on the device
 * (dev) and on the host (host), with output rows for both. */
typedef struct kve_problem {
    kve_batch host, dev;
    kve_evict_out host_out, dev_out;
    size_t heads;
    kve_seq *seqs;
    int32_t *slots;
} kve_problem;

static void kve_problem_make(kve_bench *b, kve_problem *p, uint32_t n_seqs, uint32_t layers)
{
    memset(p, 0, sizeof *p);
    p->heads = (size_t)n_seqs * layers * 8;
    size_t rows = p->heads * KVE_SLOTS, ev_stride = KVE_SLOTS - KVE_B;
    p->seqs = (kve_seq *)malloc(n_seqs * sizeof *p->seqs);
    p->slots = (int32_t *)malloc(rows * 4);
    if (!p->seqs || !p->slots)
        exit(1);
    for (uint32_t s = 0; s < n_seqs; s++)
        p->seqs[s] = (kve_seq){0x1000u + s, KVE_P, s % 4};
    for (size_t i = 0; i < rows; i++) /* slot reuse: positions scattered over slots */
        p->slots[i] = (int32_t)((i % KVE_SLOTS) * 1031 % KVE_SLOTS);
    p->host = (kve_batch){2609, 0, n_seqs, p->seqs, layers, 8, 0, 0, KVE_SLOTS, KVE_B, KVE_W,
                          p->slots, KVE_SLOTS, NULL, 0};
    p->dev = p->host;
    p->dev.seqs = (const kve_seq *)kve_dev(b, p->seqs, n_seqs * sizeof *p->seqs);
    p->dev.slot_pos = (const int32_t *)kve_dev(b, p->slots, rows * 4);
    p->host_out.evicted_stride = p->dev_out.evicted_stride = ev_stride;
    p->host_out.evicted = (int32_t *)malloc(p->heads * ev_stride * 4);
    p->host_out.n_evicted = (uint32_t *)malloc(p->heads * 4);
    p->host_out.n_kept = (uint32_t *)malloc(p->heads * 4);
    if (!p->host_out.evicted || !p->host_out.n_evicted || !p->host_out.n_kept)
        exit(1);
    p->dev_out.evicted = (int32_t *)kve_dev(b, NULL, p->heads * ev_stride * 4);
    p->dev_out.n_evicted = (uint32_t *)kve_dev(b, NULL, p->heads * 4);
    p->dev_out.n_kept = (uint32_t *)kve_dev(b, NULL, p->heads * 4);
}

static void kve_problem_free(kve_bench *b, kve_problem *p)
{
    kve_free(b->gpu, (void *)p->dev.seqs);
    kve_free(b->gpu, (void *)p->dev.slot_pos);
    kve_free(b->gpu, p->dev_out.evicted);
    kve_free(b->gpu, p->dev_out.n_evicted);
    kve_free(b->gpu, p->dev_out.n_kept);
    free(p->host_out.evicted);
    free(p->host_out.n_evicted);
    free(p->host_out.n_kept);
    free(p->seqs);
    free(p->slots);
}

/* Mean device time of one eviction call, and whether its digest matches
 * the CPU backend's. */
static double kve_bench_evict(kve_bench *b, const char *name, uint32_t n_seqs, uint32_t layers)
{
    kve_problem p;
    kve_problem_make(b, &p, n_seqs, layers);
    size_t ws_bytes = 0;
    void *ws = NULL;
    KVE_B_CHECK(kve_evict_workspace_size(b->gpu, &p.dev, &ws_bytes));
    if (ws_bytes)
        ws = kve_dev(b, NULL, ws_bytes);
    int warm = 10, rounds = b->quick ? 20 : n_seqs > 1 ? 50 : 2000;
    for (int i = 0; i < warm; i++)
        KVE_B_CHECK(kve_evict(b->gpu, &p.dev, &p.dev_out, ws, ws_bytes));
    KVE_B_CHECK(kve_context_synchronize(b->gpu));
    double us = kve_time_us(b, [&] {
        for (int i = 0; i < rounds; i++)
            KVE_B_CHECK(kve_evict(b->gpu, &p.dev, &p.dev_out, ws, ws_bytes));
    }) / rounds;
    KVE_B_CHECK(kve_context_synchronize(b->gpu));
    uint64_t d_gpu = 0, d_cpu = 1;
    KVE_B_CHECK(kve_digest(b->gpu, &p.dev, &p.dev_out, &d_gpu));
    KVE_B_CHECK(kve_evict(b->cpu, &p.host, &p.host_out, NULL, 0));
    KVE_B_CHECK(kve_digest(b->cpu, &p.host, &p.host_out, &d_cpu));
    double keys = (double)p.heads * (KVE_SLOTS - KVE_P - KVE_W); /* candidates scored */
    printf("%s: %zu heads x %d slots: %.2f us per round, %.3g keys/s, digest 0x%016llx "
           "(CPU 0x%016llx)\n",
           name, p.heads, KVE_SLOTS, us, keys / (us * 1e-6), (unsigned long long)d_gpu,
           (unsigned long long)d_cpu);
    printf("RESULT %s_us %.3f\nRESULT %s_keys_per_s %.6g\nRESULT %s_identical %d\n", name, us,
           name, keys / (us * 1e-6), name, d_gpu == d_cpu);
    kve_free(b->gpu, ws);
    kve_problem_free(b, &p);
    return us;
}

/* Compaction's two modes, as the benchmark reports them. */
enum { KVE_OUT_OF_PLACE = 0, KVE_IN_PLACE = 1, KVE_COMPACT_MODES = 2 };

/* The bytes each mode moves after the evictions of @p p: every kept entry
 * out of place; in place, the kept entries behind the first evicted slot
 * (K and V each). */
static void kve_compact_moved(const kve_problem *p, size_t moved[KVE_COMPACT_MODES])
{
    moved[KVE_OUT_OF_PLACE] = moved[KVE_IN_PLACE] = 0;
    for (size_t h = 0; h < p->heads; h++) {
        uint32_t ne = p->host_out.n_evicted[h];
        int32_t first = ne ? p->host_out.evicted[h * p->host_out.evicted_stride] : KVE_SLOTS;
        moved[KVE_OUT_OF_PLACE] += (size_t)(KVE_SLOTS - ne) * KVE_ENTRY * 2;
        moved[KVE_IN_PLACE] += (size_t)(KVE_SLOTS - first - ne) * KVE_ENTRY * 2;
    }
}

/* Device buffers of the compaction benchmark: K and V (HND, 64 layers x 8
 * heads x KVE_SLOTS entries), their out-of-place destinations, and the
 * slot tables compaction rewrites. */
typedef struct kve_compact_bufs {
    unsigned char *k, *v, *k2, *v2;
    int32_t *slots;
    size_t cache_bytes, rows_bytes;
} kve_compact_bufs;

static void kve_compact_bufs_make(kve_bench *b, const kve_problem *p, kve_compact_bufs *u)
{
    u->cache_bytes = p->heads * KVE_SLOTS * KVE_ENTRY;
    u->rows_bytes = p->heads * KVE_SLOTS * 4;
    u->k = (unsigned char *)kve_dev(b, NULL, u->cache_bytes);
    u->v = (unsigned char *)kve_dev(b, NULL, u->cache_bytes);
    u->k2 = (unsigned char *)kve_dev(b, NULL, u->cache_bytes);
    u->v2 = (unsigned char *)kve_dev(b, NULL, u->cache_bytes);
    KVE_B_RT(cudaMemsetAsync(u->k, 1, u->cache_bytes, b->stream));
    KVE_B_RT(cudaMemsetAsync(u->v, 2, u->cache_bytes, b->stream));
    u->slots = (int32_t *)kve_dev(b, NULL, u->rows_bytes);
}

static void kve_compact_bufs_free(kve_bench *b, kve_compact_bufs *u)
{
    kve_free(b->gpu, u->k);
    kve_free(b->gpu, u->v);
    kve_free(b->gpu, u->k2);
    kve_free(b->gpu, u->v2);
    kve_free(b->gpu, u->slots);
}

/* The compaction of @p p's evictions over @p u, in @p mode. */
static kve_compact_desc kve_compact_bench_desc(const kve_problem *p, const kve_compact_bufs *u,
                                               int mode)
{
    kve_compact_desc d;
    memset(&d, 0, sizeof d);
    d.n_seqs = 1;
    d.n_layers = 64;
    d.n_heads = 8;
    d.n_slots = KVE_SLOTS;
    d.slot_pos = u->slots;
    d.slot_pos_stride = KVE_SLOTS;
    d.evicted = p->dev_out.evicted;
    d.evicted_stride = p->dev_out.evicted_stride;
    d.n_evicted = p->dev_out.n_evicted;
    d.entry_bytes = KVE_ENTRY;
    d.n_caches = 2;
    kve_cache_view hnd = {u->k, 0, (size_t)8 * KVE_SLOTS * KVE_ENTRY,
                          (size_t)KVE_SLOTS * KVE_ENTRY, KVE_ENTRY};
    d.src[0] = d.src[1] = d.dst[0] = d.dst[1] = hnd;
    d.src[1].base = u->v;
    d.dst[0].base = mode == KVE_IN_PLACE ? NULL : u->k2;
    d.dst[1].base = mode == KVE_IN_PLACE ? NULL : u->v2;
    return d;
}

/* Mean device time of one compaction in @p mode over @p iters calls (after
 * two warm-up calls), slot_pos restored untimed before each. */
static double kve_compact_us(kve_bench *b, const kve_problem *p, const kve_compact_bufs *u,
                             int mode, int iters)
{
    kve_compact_desc d = kve_compact_bench_desc(p, u, mode);
    double us = 0;
    for (int i = 0; i < iters + 2; i++) {
        KVE_B_RT(cudaMemcpyAsync(u->slots, p->dev.slot_pos, u->rows_bytes,
                                 cudaMemcpyDeviceToDevice, b->stream));
        double t = kve_time_us(b, [&] { KVE_B_CHECK(kve_compact(b->gpu, &d)); });
        us += i >= 2 ? t : 0;
    }
    KVE_B_CHECK(kve_context_synchronize(b->gpu));
    return us / iters;
}

/* Mean device time of copying @p bytes, half from K and half from V, like
 * the compaction. */
static double kve_copy_us(kve_bench *b, const kve_compact_bufs *u, size_t bytes, int iters)
{
    auto copy = [&] {
        KVE_B_RT(cudaMemcpyAsync(u->k2, u->k, bytes / 2, cudaMemcpyDeviceToDevice, b->stream));
        KVE_B_RT(cudaMemcpyAsync(u->v2, u->v, bytes / 2, cudaMemcpyDeviceToDevice, b->stream));
    };
    copy();
    return kve_time_us(b, [&] {
               for (int i = 0; i < iters; i++)
                   copy();
           }) /
           iters;
}

/* Compaction of a G2 round's K and V, out of place and in place, against
 * a device-to-device copy of the bytes each one moves. */
static void kve_bench_compact(kve_bench *b)
{
    static const char *const names[KVE_COMPACT_MODES] = {"compact_out", "compact_in"}; /* by mode */
    kve_problem p;
    kve_problem_make(b, &p, 1, 64);
    KVE_B_CHECK(kve_evict(b->gpu, &p.dev, &p.dev_out, NULL, 0));
    KVE_B_CHECK(kve_evict(b->cpu, &p.host, &p.host_out, NULL, 0));
    KVE_B_CHECK(kve_context_synchronize(b->gpu));
    size_t moved[KVE_COMPACT_MODES];
    kve_compact_moved(&p, moved);
    kve_compact_bufs u;
    kve_compact_bufs_make(b, &p, &u);
    int iters = b->quick ? 5 : 30;
    double us[KVE_COMPACT_MODES], copy_us[KVE_COMPACT_MODES];
    for (int mode = 0; mode < KVE_COMPACT_MODES; mode++)
        us[mode] = kve_compact_us(b, &p, &u, mode, iters);
    for (int mode = 0; mode < KVE_COMPACT_MODES; mode++)
        copy_us[mode] = kve_copy_us(b, &u, moved[mode], iters);
    for (int mode = 0; mode < KVE_COMPACT_MODES; mode++) {
        double gbs = moved[mode] / (us[mode] * 1e3), copy_gbs = moved[mode] / (copy_us[mode] * 1e3);
        printf("%s: %.1f MB in %.1f us = %.0f GB/s; device copy of the same bytes %.0f GB/s "
               "(ratio %.2f)\n",
               names[mode], moved[mode] / 1e6, us[mode], gbs, copy_gbs, gbs / copy_gbs);
        printf("RESULT %s_gbs %.1f\nRESULT %s_copy_gbs %.1f\nRESULT %s_ratio %.3f\n", names[mode],
               gbs, names[mode], copy_gbs, names[mode], gbs / copy_gbs);
    }
    kve_compact_bufs_free(b, &u);
    kve_problem_free(b, &p);
}

static int kve_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#include "gpu_bench_step.cuh"  /* decode steps, cache writes, the captured step */
#include "gpu_bench_score.cuh" /* the scorers' G1 round, the scored step */

int main(int argc, char **argv)
{
    kve_bench b;
    memset(&b, 0, sizeof b);
    const char *backend = KVE_GPU_NAME;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            b.quick = 1;
        else
            backend = argv[i];
    }
    kve_backend kind;
    int available = 0;
    KVE_B_CHECK(kve_backend_from_name(backend, &kind));
    KVE_B_CHECK(kve_backend_available(kind, &available));
    if (!available) {
        printf("skipped: no %s device here\n", backend);
        return 77;
    }
    KVE_B_CHECK(kve_context_create(kind, &b.gpu));
    KVE_B_CHECK(kve_context_create(KVE_BACKEND_CPU, &b.cpu));
    KVE_B_RT(cudaStreamCreate(&b.stream));
    KVE_B_RT(cudaEventCreate(&b.start));
    KVE_B_RT(cudaEventCreate(&b.stop));
    KVE_B_CHECK(kve_context_set_stream(b.gpu, b.stream));
    kve_bench_evict(&b, "g2", 1, 64);
    kve_bench_evict(&b, "g3", 128, 36);
    kve_bench_compact(&b);
    kve_bench_step(&b);
    kve_bench_score(&b);
    for (uint32_t rows : {1u, 32u})
        kve_bench_scored_step(&b, rows, b.quick ? 3 : 11);
    KVE_B_RT(cudaEventDestroy(b.start));
    KVE_B_RT(cudaEventDestroy(b.stop));
    KVE_B_CHECK(kve_context_destroy(b.gpu));
    KVE_B_RT(cudaStreamDestroy(b.stream));
    kve_context_destroy(b.cpu);
    return 0;
}
