/*
 * gpu_bench_step.cuh — gpu_bench.cu's decode steps (bench_step.h on the
 * device): the append alone and with 64 layers of writes, the fused cache
 * write against a plain write kernel, the planned step captured in a CUDA
 * graph against its eager launch. A part of gpu_bench.cu, included once
 * there (its kve_bench, KVE_B_CHECK, kve_cmp_double).
 */

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
