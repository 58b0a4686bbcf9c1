/*
 * bench_scored.c — scored selection (KVE_SCORED, docs/SPEC.md §12) against
 * random eviction on G1 (36 layers x 8 KV heads, 2112 slots, B = 2048,
 * P = 1024, W = 64, one sequence): the same tables, the same outputs, the
 * random and scored rounds measured alternately in one run (three pairs,
 * the least of each), scores random floats and tie-heavy ones.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define S_LAYERS 36
#define S_HEADS 8
#define S_PROMPT 1024
#define S_BUDGET 2048
#define S_WINDOW 64
#define S_SLOTS (S_BUDGET + S_WINDOW)

typedef struct {
    kve_context *ctx;
    kve_batch *b;
    const kve_evict_out *out;
    void *ws;
    size_t ws_bytes;
    kve_seq *seq;
} scored_run;

static void next_round(void *arg)
{
    ((scored_run *)arg)->seq->round++;
}

static void round_once(void *arg)
{
    scored_run *r = (scored_run *)arg;
    evict_or_die(r->ctx, r->b, r->out, r->ws, r->ws_bytes);
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    return z ^ (z >> 27);
}

void bench_scored(int isa, int threads, double min_time, const char *isa_name)
{
    size_t heads = (size_t)S_LAYERS * S_HEADS, ev_stride = S_SLOTS - S_BUDGET;
    int32_t *slots = (int32_t *)malloc(heads * S_SLOTS * 4);
    float *uniform = (float *)malloc(heads * S_SLOTS * 4), *ties = (float *)malloc(heads * S_SLOTS * 4);
    uint64_t rng = 11;
    for (size_t i = 0; i < heads; i++) /* the prompt first, generated positions scattered */
        for (uint32_t t = 0; t < S_SLOTS; t++) {
            slots[i * S_SLOTS + t] = (int32_t)t;
            uniform[i * S_SLOTS + t] = (float)((double)(mix(&rng) >> 11) / 9007199254740992.0);
            ties[i * S_SLOTS + t] = (float)(mix(&rng) % 8);
        }
    for (size_t i = 0; i < heads; i++)
        for (uint32_t t = S_SLOTS - 1; t > S_PROMPT; t--) {
            uint32_t j = S_PROMPT + (uint32_t)(mix(&rng) % (t - S_PROMPT + 1));
            int32_t x = slots[i * S_SLOTS + t];
            slots[i * S_SLOTS + t] = slots[i * S_SLOTS + j];
            slots[i * S_SLOTS + j] = x;
        }
    kve_seq seq = {1, S_PROMPT, 0};
    kve_batch b = {2609, 0, 1, &seq, S_LAYERS, S_HEADS, 0, 0, S_SLOTS, S_BUDGET, S_WINDOW, slots,
                   S_SLOTS, uniform, S_SLOTS};
    int32_t *evicted = (int32_t *)malloc(heads * ev_stride * 4);
    uint32_t *n_ev = (uint32_t *)malloc(heads * 4), *n_kept = (uint32_t *)malloc(heads * 4);
    kve_evict_out out = {.evicted = evicted, .evicted_stride = ev_stride, .n_evicted = n_ev,
                         .n_kept = n_kept};
    kve_context *ctx = cpu_context(isa, threads);
    size_t ws_bytes = 0;
    void *ws = NULL;
    kve_status st = kve_evict_workspace_size(ctx, &b, &ws_bytes);
    if (st == KVE_OK)
        st = kve_alloc(ctx, ws_bytes, &ws);
    if (st != KVE_OK)
        die("workspace", st);
    scored_run run = {ctx, &b, &out, ws, ws_bytes, &seq};
    double best[3] = {1e9, 1e9, 1e9}; /* random, scored uniform, scored ties */
    for (int rep = 0; rep < 3; rep++)
        for (int m = 0; m < 3; m++) {
            b.flags = m ? KVE_SCORED : 0;
            b.scores = m == 2 ? ties : uniform;
            double t = time_median(min_time / 3, next_round, round_once, &run);
            best[m] = t < best[m] ? t : best[m];
        }
    printf("G1   %-7s %3d | random %8.3f | scored %8.3f  x %.2f | ties %8.3f  x %.2f\n", isa_name,
           threads, best[0] * 1e3, best[1] * 1e3, best[1] / best[0], best[2] * 1e3,
           best[2] / best[0]);
    fflush(stdout);
    kve_free(ctx, ws);
    kve_context_destroy(ctx);
    free(slots);
    free(uniform);
    free(ties);
    free(evicted);
    free(n_ev);
    free(n_kept);
}
