/*
 * gpu_bench_score.cuh — gpu_bench.cu's scoring: one G1 round of K-norm
 * and of TriAttention against the device's copy bandwidth, and the scored
 * decode step planned on the device (captured in a CUDA graph) against the
 * host API. A part of gpu_bench.cu, included once there.
 */

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
                                    {KVE_PAGES_BLOCK_TABLE, SC_PAGE, SC_PAGES, 1, u->block_table,
                                     SC_PAGES, NULL, NULL, NULL}};
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
                                    SC_DIM, SC_HEADS, KVE_LAYOUT_NHD, 0, 0, 0,
                                    {KVE_PAGES_BLOCK_TABLE, SC_PAGE, pages, rows, dbt, bpr, NULL,
                                     NULL, NULL}};
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
