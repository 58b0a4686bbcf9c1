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
 * Built as CUDA here and as HIP by kernels_hip/ (kve_hip_vendor.h).
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

/* Median device time of @p n decode steps of @p s in @p mode (its rows
 * prepared, untimed, before each; staggered rows once, then they stay
 * staggered): the append alone, or with the 64 layers' writes. */
static double kve_step_us(kve_bench *b, kve_step_bench *s, kve_step_mode mode, int n, int writes)
{
    double us[32];
    if (mode == KVE_STEP_STAGGERED)
        KVE_B_CHECK(kve_step_bench_prepare(s, mode));
    for (int k = 0; k < n; k++) {
        if (mode != KVE_STEP_STAGGERED)
            KVE_B_CHECK(kve_step_bench_prepare(s, mode));
        us[k] = kve_time_us(b, [&] {
            KVE_B_CHECK(writes ? kve_step_bench_run(s)
                               : kve_state_append(s->st, s->rows, s->row_ids, s->ones, &s->out));
        });
    }
    qsort(us, (size_t)n, sizeof us[0], kve_cmp_double);
    return us[n / 2];
}

/* vLLM's reshape_and_cache_flash at its plainest, the floor of issue 38's
 * cache write: entry (cache, token, head) of the step's K and V to its slot
 * of a paged NHD cache through the token's row of the block table, 16
 * bytes a thread, -1 skipped. The bytes kve_step_write writes, no moves. */
__global__ void kve_plain_write_kernel(const uint4 *src, uint4 *kv, size_t cache_vecs,
                                       const int64_t *slots, const int32_t *token_row,
                                       const int32_t *bt, uint32_t n_tokens)
{
    const uint32_t vec = KVE_ST_ENTRY / 16;
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t per_cache = (uint64_t)n_tokens * KVE_ST_HEADS * vec;
    if (i >= 2 * per_cache)
        return;
    uint32_t c = (uint32_t)(i / per_cache), v = (uint32_t)(i % vec);
    uint64_t e = (i % per_cache) / vec, t = e / KVE_ST_HEADS;
    uint32_t h = (uint32_t)(e % KVE_ST_HEADS);
    int64_t slot = slots[t * KVE_ST_HEADS + h];
    if (slot < 0)
        return;
    int32_t page = bt[(size_t)token_row[t] * KVE_ST_BPR + (size_t)(slot / KVE_ST_PAGE)];
    size_t at = (((size_t)page * KVE_ST_PAGE + (size_t)(slot % KVE_ST_PAGE)) * KVE_ST_HEADS + h) * vec;
    kv[c * cache_vecs + at + v] = src[i];
}

/* Layer calls of the step, @p s prepared with no round (no moves): device
 * time per call of kve_cache_write and of the plain kernel, 64 calls each,
 * medians of @p n; RESULT cw_<rows>_us, cw_<rows>_plain_us, cw_<rows>_ratio
 * (issue 38's goals: <= 3 us a call, <= 1.2x the plain kernel). */
static void kve_bench_write_vs_plain(kve_bench *b, kve_step_bench *s, int n)
{
    double us[32], plain[32];
    size_t lists = (size_t)s->rows * KVE_ST_HEADS;
    uint64_t threads = 2ull * lists * (KVE_ST_ENTRY / 16);
    uint32_t grid = (uint32_t)((threads + 255) / 256);
    KVE_B_CHECK(kve_step_bench_prepare(s, KVE_STEP_ROUND_NONE));
    KVE_B_CHECK(kve_state_append(s->st, s->rows, s->row_ids, s->ones, &s->out));
    for (int k = 0; k < n; k++) {
        us[k] = kve_time_us(b, [&] {
            for (uint32_t l = 0; l < KVE_ST_LAYERS; l++)
                KVE_B_CHECK(kve_step_write(s, l));
        }) / KVE_ST_LAYERS;
        plain[k] = kve_time_us(b, [&] {
            for (uint32_t l = 0; l < KVE_ST_LAYERS; l++)
                kve_plain_write_kernel<<<grid, 256, 0, b->stream>>>(
                    (const uint4 *)s->src, (uint4 *)s->kv, s->cache_bytes / 16,
                    s->out.slot_mapping + (size_t)l * lists, s->token_row, s->block_table,
                    s->rows);
            KVE_B_RT(cudaGetLastError());
        }) / KVE_ST_LAYERS;
    }
    qsort(us, (size_t)n, sizeof us[0], kve_cmp_double);
    qsort(plain, (size_t)n, sizeof plain[0], kve_cmp_double);
    double a = us[n / 2], p = plain[n / 2];
    printf("G2 cache write, %u tokens a layer call: kvevict %.2f us, plain write kernel %.2f us, "
           "ratio %.2f (goals: <= 3 us, <= 1.2x)\n",
           s->rows, a, p, a / p);
    printf("RESULT cw_%u_us %.3f\nRESULT cw_%u_plain_us %.3f\nRESULT cw_%u_ratio %.3f\n", s->rows,
           a, s->rows, p, s->rows, a / p);
}

/* The step captured once in a CUDA graph (kve_step_bench_run_device) and
 * replayed, @p s prepared for @p mode before each replay: median replay
 * time against the same planned step launched eagerly. */
static void kve_bench_step_graph(kve_bench *b, kve_step_bench *s, kve_step_mode mode, int n)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    KVE_B_CHECK(kve_context_synchronize(b->gpu));
    KVE_B_RT(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    kve_status captured = kve_step_bench_run_device(s);
    KVE_B_RT(cudaStreamEndCapture(b->stream, &graph));
    KVE_B_CHECK(captured);
    KVE_B_RT(cudaGraphInstantiateWithFlags(&exec, graph, 0));
    double replay[32], eager[32];
    if (mode == KVE_STEP_STAGGERED)
        KVE_B_CHECK(kve_step_bench_prepare(s, mode));
    for (int k = 0; k < n; k++) {
        if (mode != KVE_STEP_STAGGERED)
            KVE_B_CHECK(kve_step_bench_prepare(s, mode));
        replay[k] = kve_time_us(b, [&] { KVE_B_RT(cudaGraphLaunch(exec, b->stream)); });
        if (mode != KVE_STEP_STAGGERED)
            KVE_B_CHECK(kve_step_bench_prepare(s, mode));
        eager[k] = kve_time_us(b, [&] { KVE_B_CHECK(kve_step_bench_run_device(s)); });
    }
    KVE_B_CHECK(kve_context_synchronize(b->gpu)); /* no refusal, no device error */
    KVE_B_RT(cudaGraphExecDestroy(exec));
    KVE_B_RT(cudaGraphDestroy(graph));
    qsort(replay, (size_t)n, sizeof replay[0], kve_cmp_double);
    qsort(eager, (size_t)n, sizeof eager[0], kve_cmp_double);
    const char *name = kve_step_mode_names[mode];
    printf("G2 decode step, %u rows, %s, planned on the device: graph replay %.1f us, eager "
           "%.1f us (ratio %.2f)\n",
           s->rows, name, replay[n / 2], eager[n / 2], replay[n / 2] / eager[n / 2]);
    printf("RESULT step_%u_%s_graph_us %.2f\nRESULT step_%u_%s_planned_us %.2f\n", s->rows, name,
           replay[n / 2], s->rows, name, eager[n / 2]);
}

/* G2 decode steps at 1, 8, 32 and 128 rows, a round in every row and in
 * none, and staggered at 128 rows (rows / r round a step): RESULT
 * step_<rows>_<mode>_append_us and step_<rows>_<mode>_us (with 64 layers of
 * writes); step_g2_append_us and step_g2_us stay the 128-row round's. */
static void kve_bench_step(kve_bench *b)
{
    static const uint32_t rows[] = {1, 8, 32, 128};
    int n = b->quick ? 3 : 11;
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        kve_step_bench s;
        KVE_B_CHECK(kve_step_bench_init(&s, b->gpu, rows[k]));
        KVE_B_CHECK(kve_step_bench_run(&s)); /* warm-up */
        for (int m = KVE_STEP_ROUND_ALL; m <= KVE_STEP_STAGGERED; m++) {
            if (m == KVE_STEP_STAGGERED && rows[k] < KVE_ST_WR)
                continue;
            kve_step_mode mode = (kve_step_mode)m;
            double append = kve_step_us(b, &s, mode, n, 0), step = kve_step_us(b, &s, mode, n, 1);
            const char *name = kve_step_mode_names[m];
            printf("G2 decode step, %u rows, %s: append %.1f us, with 64 layers of moves and "
                   "writes %.1f us (median of %d)\n",
                   rows[k], name, append, step, n);
            printf("RESULT step_%u_%s_append_us %.2f\nRESULT step_%u_%s_us %.2f\n", rows[k], name,
                   append, rows[k], name, step);
            if (rows[k] == 128 && mode == KVE_STEP_ROUND_ALL)
                printf("RESULT step_g2_append_us %.2f\nRESULT step_g2_us %.2f\n", append, step);
            kve_bench_step_graph(b, &s, mode, n);
        }
        kve_bench_write_vs_plain(b, &s, n);
        kve_step_bench_free(&s);
    }
}

/* ---- scoring: one G1 round ------------------------------------------------- */

/* bench/bench_score.c's round on the device: 36 layers (a K cache each, so
 * the round reads its keys from memory, not from the L2) x 8 KV heads x 4
 * query heads, head_dim 128, bf16 keys in a paged NHD cache (scattered
 * pages of 16 slots), one sequence of 2112 slots, P = 1024, W = 64: 1024
 * candidates a head, one kve_score call a layer, z-normalized. */
enum { SC_LAYERS = 36, SC_HEADS = 8, SC_GROUP = 4, SC_DIM = 128, SC_PAGE = 16,
       SC_PAGES = KVE_SLOTS / SC_PAGE };

typedef struct kve_score_bufs {
    uint16_t *keys;
    int32_t *tables, *block_table;
    float *q_mean, *q_abs, *scores;
    size_t key_bytes; /* one layer's cache */
} kve_score_bufs;

static void kve_score_bufs_make(kve_bench *b, kve_score_bufs *u)
{
    size_t nq = (size_t)SC_HEADS * SC_GROUP * (SC_DIM / 2);
    u->key_bytes = (size_t)SC_PAGES * SC_PAGE * SC_HEADS * SC_DIM * 2;
    int32_t *tab = (int32_t *)malloc(SC_HEADS * KVE_SLOTS * 4), *bt = (int32_t *)malloc(SC_PAGES * 4);
    float *qm = (float *)malloc(nq * 2 * SC_LAYERS * 4), *qa = (float *)malloc(nq * SC_LAYERS * 4);
    if (!tab || !bt || !qm || !qa)
        exit(1);
    for (size_t i = 0; i < (size_t)SC_HEADS * KVE_SLOTS; i++) /* positions scattered over slots */
        tab[i] = (int32_t)((i % KVE_SLOTS) * 1031 % KVE_SLOTS);
    for (int p = 0; p < SC_PAGES; p++)
        bt[p] = (p * 37) % SC_PAGES;
    for (size_t i = 0; i < nq * SC_LAYERS; i++) {
        qm[2 * i] = (float)(i * 7 % 1000) / 500.0f - 1.0f;
        qm[2 * i + 1] = (float)(i * 13 % 1000) / 500.0f - 1.0f;
        qa[i] = 1.5f + (float)(i * 11 % 1000) / 1000.0f;
    }
    u->keys = (uint16_t *)kve_dev(b, NULL, u->key_bytes * SC_LAYERS);
    KVE_B_RT(cudaMemsetAsync(u->keys, 0x3c, u->key_bytes * SC_LAYERS, b->stream)); /* bf16 0.0115 */
    u->tables = (int32_t *)kve_dev(b, tab, SC_HEADS * KVE_SLOTS * 4);
    u->block_table = (int32_t *)kve_dev(b, bt, SC_PAGES * 4);
    u->q_mean = (float *)kve_dev(b, qm, nq * 2 * SC_LAYERS * 4);
    u->q_abs = (float *)kve_dev(b, qa, nq * SC_LAYERS * 4);
    u->scores = (float *)kve_dev(b, NULL, SC_HEADS * KVE_SLOTS * 4);
    free(tab);
    free(bt);
    free(qm);
    free(qa);
}

static void kve_score_bufs_free(kve_bench *b, kve_score_bufs *u)
{
    kve_free(b->gpu, u->keys);
    kve_free(b->gpu, u->tables);
    kve_free(b->gpu, u->block_table);
    kve_free(b->gpu, u->q_mean);
    kve_free(b->gpu, u->q_abs);
    kve_free(b->gpu, u->scores);
}

/* Median device time of one round of @p scorer over @p iters rounds. */
static double kve_score_round_us(kve_bench *b, const kve_score_bufs *u, kve_scorer scorer,
                                 int iters)
{
    size_t nq = (size_t)SC_HEADS * SC_GROUP * (SC_DIM / 2);
    static kve_score_row row = {0, 0, KVE_SLOTS, KVE_P, KVE_W, KVE_SLOTS, 0, KVE_SLOTS};
    kve_score_desc d[SC_LAYERS];
    for (int l = 0; l < SC_LAYERS; l++) {
        memset(&d[l], 0, sizeof d[l]);
        d[l].scorer = scorer;
        d[l].flags = KVE_SCORE_ZNORM;
        d[l].keys = (kve_key_cache){(const unsigned char *)u->keys + u->key_bytes * l,
                                    KVE_DTYPE_BF16, SC_DIM, SC_HEADS, KVE_LAYOUT_NHD, 0, 0, 0,
                                    SC_PAGE, SC_PAGES, KVE_PAGES_BLOCK_TABLE, 1, u->block_table,
                                    SC_PAGES, NULL, NULL, NULL};
        d[l].tri.group = SC_GROUP;
        d[l].tri.q_mean = u->q_mean + nq * 2 * l;
        d[l].tri.q_abs_mean = u->q_abs + nq * l;
        d[l].tri.rope_theta = 1e6;
        d[l].n_rows = 1;
        d[l].rows = &row;
        d[l].slot_pos = u->tables;
        d[l].scores = u->scores;
        d[l].scores_stride_table = KVE_SLOTS;
    }
    auto round = [&] {
        for (int l = 0; l < SC_LAYERS; l++)
            KVE_B_CHECK(kve_score(b->gpu, &d[l]));
    };
    round(); /* warm-up: the scorer's scratch is allocated here */
    double us[64];
    for (int i = 0; i < iters; i++)
        us[i] = kve_time_us(b, round);
    KVE_B_CHECK(kve_context_synchronize(b->gpu));
    qsort(us, iters, sizeof us[0], kve_cmp_double);
    return us[iters / 2];
}

/* Both scorers' G1 round: time, the candidates' key bytes (each read once)
 * over that time, and its fraction of the device's bandwidth measured in
 * the same run as a device-to-device copy of as many bytes (read + written
 * over its time). Unmeasured on an H200 when this was written. */
static void kve_bench_score(kve_bench *b)
{
    kve_score_bufs u;
    kve_score_bufs_make(b, &u);
    int iters = b->quick ? 5 : 31;
    double key_bytes = (double)SC_LAYERS * SC_HEADS * (KVE_SLOTS - KVE_P - KVE_W) * SC_DIM * 2;
    size_t half = u.key_bytes * SC_LAYERS / 2;
    auto copy = [&] {
        KVE_B_RT(cudaMemcpyAsync((unsigned char *)u.keys + half, u.keys, half,
                                 cudaMemcpyDeviceToDevice, b->stream));
    };
    copy();
    double copy_us = kve_time_us(b, [&] {
                         for (int i = 0; i < iters; i++)
                             copy();
                     }) /
                     iters;
    KVE_B_RT(cudaMemsetAsync(u.keys, 0x3c, u.key_bytes * SC_LAYERS, b->stream));
    double dev_gbs = 2.0 * half / (copy_us * 1e3);
    static const char *const names[] = {"knorm", "triattention"};
    static const kve_scorer scorers[] = {KVE_SCORER_KNORM, KVE_SCORER_TRIATTENTION};
    for (int k = 0; k < 2; k++) {
        double us = kve_score_round_us(b, &u, scorers[k], iters), gbs = key_bytes / (us * 1e3);
        printf("score %s: one G1 round (36 kve_score calls) %.3f ms; candidates' keys %.1f MB "
               "read once = %.0f GB/s, %.0f%% of the device's %.0f GB/s (device-to-device copy, "
               "bytes read + written)\n",
               names[k], us / 1e3, key_bytes / 1e6, gbs, 100.0 * gbs / dev_gbs, dev_gbs);
        printf("RESULT score_%s_ms %.4f\nRESULT score_%s_gbs %.1f\nRESULT score_%s_bw_fraction "
               "%.3f\n",
               names[k], us / 1e3, names[k], gbs, names[k], gbs / dev_gbs);
    }
    kve_score_bufs_free(b, &u);
}

/* Issue 39: a scored G1 decode step planned on the device, at @p rows
 * rows, every row due (full before the step): 36 kve_state_score_device
 * calls (TriAttention, z-normalized: one launch a layer over every row)
 * then the planned scored append, captured once in a CUDA graph and
 * replayed, against the same step made eagerly through the host API (36
 * kve_state_score calls, each uploading its row list, then
 * kve_state_append). A key cache a layer (rows x 132 pages of 16 slots).
 * RESULT scored_step_<rows>_graph_us, _planned_us, _eager_us, _score_us
 * (the 36 planned scorer launches alone). */
static void kve_bench_scored_step(kve_bench *b, uint32_t rows, int n)
{
    const uint32_t bpr = (KVE_SLOTS + SC_PAGE - 1) / SC_PAGE, pages = rows * bpr;
    size_t nq = (size_t)SC_HEADS * SC_GROUP * (SC_DIM / 2);
    size_t layer_bytes = (size_t)pages * SC_PAGE * SC_HEADS * SC_DIM * 2;
    size_t stride_row = (size_t)SC_LAYERS * SC_HEADS * KVE_SLOTS;
    kve_state_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.schedule = (kve_schedule){2609, KVE_SCORED, KVE_B, KVE_W, KVE_W};
    sd.max_seqs = rows;
    sd.n_layers = SC_LAYERS;
    sd.n_heads = SC_HEADS;
    sd.max_slots = KVE_SLOTS;
    sd.score_group = SC_GROUP; /* TriAttention's group: the scorer's scratch sized at creation */
    kve_state *st = NULL;
    KVE_B_CHECK(kve_state_create(b->gpu, &sd, NULL, 0, &st));
    uint32_t *ids = (uint32_t *)malloc(rows * 12), *ones = ids + rows, *refill = ones + rows;
    int32_t *bt = (int32_t *)malloc(pages * 4);
    float *qm = (float *)malloc(nq * 2 * 4), *qa = (float *)malloc(nq * 4);
    if (!ids || !bt || !qm || !qa)
        exit(1);
    for (uint32_t i = 0; i < rows; i++) {
        ids[i] = i;
        ones[i] = 1;
        refill[i] = KVE_W - 1;
        KVE_B_CHECK(kve_state_admit(st, i, 500 + i, KVE_P));
        uint32_t all = KVE_SLOTS;
        KVE_B_CHECK(kve_state_append(st, 1, &ids[i], &all, NULL));
    }
    for (uint32_t p = 0; p < pages; p++)
        bt[p] = (int32_t)((p * 37u) % pages);
    for (size_t i = 0; i < nq; i++) {
        qm[2 * i] = (float)(i * 7 % 1000) / 500.0f - 1.0f;
        qm[2 * i + 1] = (float)(i * 13 % 1000) / 500.0f - 1.0f;
        qa[i] = 1.5f + (float)(i * 11 % 1000) / 1000.0f;
    }
    void *keys = kve_dev(b, NULL, layer_bytes * SC_LAYERS);
    KVE_B_RT(cudaMemsetAsync(keys, 0x3c, layer_bytes * SC_LAYERS, b->stream));
    int32_t *dbt = (int32_t *)kve_dev(b, bt, pages * 4);
    float *dqm = (float *)kve_dev(b, qm, nq * 2 * 4), *dqa = (float *)kve_dev(b, qa, nq * 4);
    uint32_t *drows = (uint32_t *)kve_dev(b, ids, rows * 4), *dones = (uint32_t *)kve_dev(b, ones, rows * 4);
    float *scores = (float *)kve_dev(b, NULL, stride_row * rows * 4);
    kve_step_buffers out;
    memset(&out, 0, sizeof out);
    out.scores = scores;
    out.scores_stride_row = stride_row;
    out.scores_stride_table = KVE_SLOTS;
    kve_score_desc d[SC_LAYERS];
    for (int l = 0; l < SC_LAYERS; l++) {
        memset(&d[l], 0, sizeof d[l]);
        d[l].scorer = KVE_SCORER_TRIATTENTION;
        d[l].flags = KVE_SCORE_ZNORM;
        d[l].keys = (kve_key_cache){(const unsigned char *)keys + layer_bytes * l, KVE_DTYPE_BF16,
                                    SC_DIM, SC_HEADS, KVE_LAYOUT_NHD, 0, 0, 0, SC_PAGE, pages,
                                    KVE_PAGES_BLOCK_TABLE, rows, dbt, bpr, NULL, NULL, NULL};
        d[l].tri.group = SC_GROUP;
        d[l].tri.q_mean = dqm;
        d[l].tri.q_abs_mean = dqa;
        d[l].tri.rope_theta = 1e6;
    }
    auto scores_planned = [&] {
        for (int l = 0; l < SC_LAYERS; l++)
            KVE_B_CHECK(kve_state_score_device(st, rows, drows, dones, (uint32_t)l, &d[l], scores,
                                               stride_row, KVE_SLOTS));
    };
    auto planned = [&] {
        scores_planned();
        KVE_B_CHECK(kve_state_append_device(st, rows, drows, dones, 1, &out));
    };
    auto eager = [&] {
        for (int l = 0; l < SC_LAYERS; l++)
            KVE_B_CHECK(kve_state_score(st, rows, ids, ones, (uint32_t)l, &d[l], scores, stride_row,
                                        KVE_SLOTS));
        KVE_B_CHECK(kve_state_append(st, rows, ids, ones, &out));
    };
    auto refill_rows = [&] { KVE_B_CHECK(kve_state_append(st, rows, ids, refill, NULL)); };
    scores_planned(); /* warm-up: the state's scoring scratch is taken here */
    eager();          /* and the context's */
    refill_rows();
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    KVE_B_CHECK(kve_context_synchronize(b->gpu));
    KVE_B_RT(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    planned();
    KVE_B_RT(cudaStreamEndCapture(b->stream, &graph));
    KVE_B_RT(cudaGraphInstantiateWithFlags(&exec, graph, 0));
    double t_graph[32], t_planned[32], t_eager[32], t_score[32];
    for (int k = 0; k < n; k++) {
        t_graph[k] = kve_time_us(b, [&] { KVE_B_RT(cudaGraphLaunch(exec, b->stream)); });
        refill_rows();
        t_planned[k] = kve_time_us(b, planned);
        refill_rows();
        t_eager[k] = kve_time_us(b, eager);
        refill_rows();
        t_score[k] = kve_time_us(b, scores_planned);
    }
    KVE_B_CHECK(kve_context_synchronize(b->gpu)); /* no refusal, no device error */
    KVE_B_RT(cudaGraphExecDestroy(exec));
    KVE_B_RT(cudaGraphDestroy(graph));
    qsort(t_graph, (size_t)n, sizeof(double), kve_cmp_double);
    qsort(t_planned, (size_t)n, sizeof(double), kve_cmp_double);
    qsort(t_eager, (size_t)n, sizeof(double), kve_cmp_double);
    qsort(t_score, (size_t)n, sizeof(double), kve_cmp_double);
    printf("G1 scored step (TriAttention), %u rows, every row due: graph replay %.1f us, planned "
           "eager %.1f us, host API %.1f us; its 36 scorer launches %.1f us\n",
           rows, t_graph[n / 2], t_planned[n / 2], t_eager[n / 2], t_score[n / 2]);
    printf("RESULT scored_step_%u_graph_us %.2f\nRESULT scored_step_%u_planned_us %.2f\n"
           "RESULT scored_step_%u_eager_us %.2f\nRESULT scored_step_%u_score_us %.2f\n",
           rows, t_graph[n / 2], rows, t_planned[n / 2], rows, t_eager[n / 2], rows,
           t_score[n / 2]);
    void *bufs[] = {keys, dbt, dqm, dqa, drows, dones, scores};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        kve_free(b->gpu, bufs[i]);
    kve_state_destroy(st);
    free(ids);
    free(bt);
    free(qm);
    free(qa);
}

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
