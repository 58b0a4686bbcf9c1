/*
 * bench_score.c — kvevict-bench's scoring figures: one G1 round of
 * TriAttention and of K-norm scoring (36 layers x 8 KV heads, 32 query
 * heads, head_dim 128, bf16 keys in a vLLM-style paged NHD cache, one
 * sequence of 2112 slots, P = 1024, W = 64: 1024 candidates a head), one
 * kve_score call per layer, z-normalized; next to the PyTorch reference
 * scorer of bench/score_peers.py measured in the same run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define SC_LAYERS 36
#define SC_HEADS 8
#define SC_GROUP 4
#define SC_DIM 128
#define SC_SLOTS 2112
#define SC_PROMPT 1024
#define SC_WINDOW 64
#define SC_PAGE 16
#define SC_PAGES (SC_SLOTS / SC_PAGE)

typedef struct {
    kve_context *ctx;
    kve_score_desc d[SC_LAYERS];
} score_run;

static void score_once(void *arg)
{
    score_run *s = (score_run *)arg;
    for (int l = 0; l < SC_LAYERS; l++) {
        kve_status st = kve_score(s->ctx, &s->d[l]);
        if (st != KVE_OK)
            die("kve_score", st);
    }
}

static uint32_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*x >> 33);
}

/* A bf16 of a small random float. */
static uint16_t bf16_rand(uint64_t *x) { return (uint16_t)(0x3c00u + (lcg(x) & 0x7ff)) ^ (uint16_t)((lcg(x) & 1) << 15); }

/* One G1 round's inputs: keys, tables (slot s holds position s), stats. */
typedef struct {
    uint16_t *keys;
    int32_t *tables, *block_table;
    float *q_mean, *q_abs, *scores;
    kve_score_row row;
} score_inputs;

static void score_inputs_make(score_inputs *in)
{
    uint64_t x = 42;
    size_t per_layer = (size_t)SC_PAGES * SC_PAGE * SC_HEADS * SC_DIM;
    size_t nq = (size_t)SC_HEADS * SC_GROUP * (SC_DIM / 2);
    in->keys = (uint16_t *)malloc(per_layer * SC_LAYERS * 2);
    in->tables = (int32_t *)malloc(SC_HEADS * SC_SLOTS * 4);
    in->block_table = (int32_t *)malloc(SC_PAGES * 4);
    in->q_mean = (float *)malloc(nq * 2 * SC_LAYERS * 4);
    in->q_abs = (float *)malloc(nq * SC_LAYERS * 4);
    in->scores = (float *)calloc(SC_HEADS * SC_SLOTS, 4);
    if (!in->keys || !in->tables || !in->block_table || !in->q_mean || !in->q_abs || !in->scores)
        die("malloc", KVE_ERR_NOMEM);
    for (size_t i = 0; i < per_layer * SC_LAYERS; i++)
        in->keys[i] = bf16_rand(&x);
    for (int h = 0; h < SC_HEADS; h++)
        for (int s = 0; s < SC_SLOTS; s++)
            in->tables[h * SC_SLOTS + s] = s;
    for (int p = 0; p < SC_PAGES; p++)
        in->block_table[p] = (p * 37) % SC_PAGES; /* scattered pages */
    for (size_t i = 0; i < nq * SC_LAYERS; i++) {
        in->q_mean[2 * i] = (float)(lcg(&x) % 1000) / 500.0f - 1.0f;
        in->q_mean[2 * i + 1] = (float)(lcg(&x) % 1000) / 500.0f - 1.0f;
        in->q_abs[i] = 1.5f + (float)(lcg(&x) % 1000) / 1000.0f;
    }
    in->row = (kve_score_row){0, 0, SC_SLOTS, SC_PROMPT, SC_WINDOW, SC_SLOTS, 0, SC_SLOTS};
}

static void score_inputs_free(score_inputs *in)
{
    free(in->keys);
    free(in->tables);
    free(in->block_table);
    free(in->q_mean);
    free(in->q_abs);
    free(in->scores);
}

static void score_desc_fill(score_run *s, score_inputs *in, kve_scorer scorer)
{
    size_t per_layer = (size_t)SC_PAGES * SC_PAGE * SC_HEADS * SC_DIM;
    size_t nq = (size_t)SC_HEADS * SC_GROUP * (SC_DIM / 2);
    for (int l = 0; l < SC_LAYERS; l++) {
        kve_score_desc *d = &s->d[l];
        memset(d, 0, sizeof *d);
        d->scorer = scorer;
        d->flags = KVE_SCORE_ZNORM;
        d->keys = (kve_key_cache){in->keys + per_layer * l, KVE_DTYPE_BF16, SC_DIM, SC_HEADS,
                                  KVE_LAYOUT_NHD, 0, 0, 0,
                                  {KVE_PAGES_BLOCK_TABLE, SC_PAGE, SC_PAGES, 1, in->block_table,
                                   SC_PAGES, NULL, NULL, NULL}};
        d->tri.group = SC_GROUP;
        d->tri.q_mean = in->q_mean + nq * 2 * l;
        d->tri.q_abs_mean = in->q_abs + nq * l;
        d->tri.rope_theta = 1e6;
        d->n_rows = 1;
        d->rows = &in->row;
        d->slot_pos = in->tables;
        d->scores = in->scores;
        d->scores_stride_table = SC_SLOTS;
    }
}

/* Runs bench/score_peers.py: its PEER lines' median (or, with --stat min,
 * fastest) ms per round, by scorer. */
static void score_peers(const char *python, const char *script, double min_time, double out[2])
{
    char cmd[4096], line[512], name[32];
    double med, low;
    out[0] = out[1] = -1;
    snprintf(cmd, sizeof cmd, "%s %s --min-seconds %.2f", python, script, min_time * 2);
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        fputs(line, stderr);
        if (sscanf(line, "PEER %31s median_ms=%lf min_ms=%lf", name, &med, &low) == 3)
            out[strcmp(name, "torch-triattention") == 0 ? 0 : 1] = g_use_min ? low : med;
    }
    pclose(f);
}

double bench_score_round(kve_scorer scorer, int isa, int threads, double min_time)
{
    score_inputs in;
    score_inputs_make(&in);
    score_run s = {cpu_context(isa, threads), {{0}}};
    score_desc_fill(&s, &in, scorer);
    double t = time_median(min_time, NULL, score_once, &s);
    kve_context_destroy(s.ctx);
    score_inputs_free(&in);
    return t;
}

void bench_score(const int *isas, int n_isas, const int *threads, int n_threads, double min_time,
                 const char *python, const char *script)
{
    static const char *const isa_names[] = {"auto", "scalar", "avx2", "avx512"};
    double peer[2] = {-1, -1};
    if (python)
        score_peers(python, script, min_time, peer);
    printf("\nscoring, one G1 round = 36 kve_score calls (8 KV heads x 4 query heads, head_dim "
           "128, bf16, 2112 slots, 1024 candidates a head, z-normalized)\n");
    printf("%-12s %-7s %3s | %10s %10s | %8s\n", "scorer", "isa", "thr", "ms/round",
           "ns/cand/qh", "x torch");
    for (int k = 0; k < 2; k++) {
        kve_scorer sc = k == 0 ? KVE_SCORER_TRIATTENTION : KVE_SCORER_KNORM;
        double cands = (double)SC_LAYERS * SC_HEADS * (SC_SLOTS - SC_PROMPT - SC_WINDOW) *
                       (k == 0 ? SC_GROUP : 1);
        for (int i = 0; i < n_isas; i++)
            for (int t = 0; t < n_threads; t++) {
                double r = bench_score_round(sc, isas[i], threads[t], min_time);
                printf("%-12s %-7s %3d | %10.3f %10.2f |", k == 0 ? "triattention" : "knorm",
                       isa_names[isas[i]], threads[t], r * 1e3, r * 1e9 / cands);
                if (peer[k] > 0)
                    printf(" %8.1f\n", peer[k] / (r * 1e3));
                else
                    printf(" %8s\n", "-");
                fflush(stdout);
            }
    }
    if (peer[0] > 0 || peer[1] > 0)
        printf("peers, PyTorch 1 thread, one G1 round (%s): triattention %.1f ms, knorm %.1f ms\n",
               g_use_min ? "fastest" : "median", peer[0], peer[1]);
}
