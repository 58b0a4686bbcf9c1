/*
 * bench_parts.c — kvevict-bench-parts: where one G1 eviction round's time
 * goes on each SIMD ISA this CPU runs, one thread, next to the hash-only
 * floor: the hashing pass (range check only, then with the duplicate
 * marks), the boundary among its survivors, the whole head (the plan, the
 * pass, the boundary, the outputs), and kve_evict through the public API.
 * Pieces are timed separately, each the fastest round of its repeats.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_parts.h"
#include "bench_util.h"
#include "kvevict.h"

#define G1_HEADS 288u /* 36 layers x 8 KV heads */

typedef struct {
    kve_context *ctx;
    kve_batch b;
    kve_seq seq;
    kve_evict_out out;
    void *ws;
    size_t ws_bytes;
} api_run;

/* kve_evict of the whole round (one call, like kvevict-bench's rows), ms. */
static double api_time(api_run *a, uint32_t flags, double min_time)
{
    double best = 1e30, start = bench_now();
    a->b.flags = flags;
    for (int i = 0; i < 3 || bench_now() - start < min_time; i++) {
        a->seq.round++;
        double t0 = bench_now();
        kve_status st = kve_evict(a->ctx, &a->b, &a->out, a->ws, a->ws_bytes);
        double t = bench_now() - t0;
        if (st != KVE_OK)
            bench_fail("kvevict-bench-parts", "kve_evict", st);
        best = t < best ? t : best;
    }
    return best * 1e3;
}

static void api_times(const parts_input *in, kve_cpu_isa isa, double *trusted, double *checked)
{
    api_run a;
    memset(&a, 0, sizeof a);
    a.seq = (kve_seq){1000, in->prompt, 0};
    a.b = (kve_batch){2609, 0, 1, &a.seq, G1_HEADS / 8, 8, 0, 0, in->n_slots, in->budget,
                      in->window, (int32_t *)in->slots, in->n_slots, NULL, 0};
    size_t ev = in->n_slots - in->budget;
    int32_t *evicted = (int32_t *)malloc(in->heads * ev * 4);
    uint32_t *n_ev = (uint32_t *)malloc(in->heads * 4), *n_kept = (uint32_t *)malloc(in->heads * 4);
    a.out = (kve_evict_out){.evicted = evicted, .evicted_stride = ev, .n_evicted = n_ev, .n_kept = n_kept};
    kve_status st = kve_context_create(KVE_BACKEND_CPU, &a.ctx);
    if (st == KVE_OK)
        st = kve_context_set_cpu_isa(a.ctx, isa);
    if (st == KVE_OK)
        st = kve_context_set_threads(a.ctx, 1);
    if (st == KVE_OK)
        st = kve_evict_workspace_size(a.ctx, &a.b, &a.ws_bytes);
    if (st == KVE_OK)
        st = kve_alloc(a.ctx, a.ws_bytes, &a.ws);
    if (st != KVE_OK)
        bench_fail("kvevict-bench-parts", "context", st);
    *trusted = api_time(&a, KVE_TRUSTED_SLOTS, in->min_time);
    *checked = api_time(&a, 0, in->min_time);
    kve_free(a.ctx, a.ws);
    kve_context_destroy(a.ctx);
    free(evicted);
    free(n_ev);
    free(n_kept);
}

int main(int argc, char **argv)
{
    double min_time = 0.5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min-time") && i + 1 < argc) {
            min_time = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: kvevict-bench-parts [--min-time S]\n"
                            "Where a G1 eviction round's time goes, per SIMD ISA, one thread: each\n"
                            "piece of the kernel the fastest round of >= S seconds (default 0.5).\n");
            return 2;
        }
    }
    const uint32_t n_slots = 2112, prompt = 1024;
    int32_t *slots = (int32_t *)malloc((size_t)G1_HEADS * n_slots * 4);
    uint64_t rng = 42;
    bench_fill_tables(slots, G1_HEADS, n_slots, prompt, &rng);
    parts_input in = {slots, G1_HEADS, n_slots, prompt, 2048, 64, min_time};
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    printf("kvevict-bench-parts: %s; G1 (288 heads, 1024 candidates, 64 evicted each), one thread,\n"
           "fastest round of >= %.2f s per piece; ms per round, and x the hash-only floor\n\n",
           cpu, min_time);
    printf("%-7s %7s | %14s %14s %14s | %14s %14s | %14s %14s\n", "isa", "floor", "pass", "pass+marks",
           "boundary", "head trusted", "head checked", "API trusted", "API checked");
    static const struct {
        kve_cpu_isa isa;
        const char *name;
        void (*run)(const parts_input *, parts_times *);
    } isas[] = {{KVE_CPU_ISA_AVX2, "avx2", bench_parts_avx2}, {KVE_CPU_ISA_AVX512, "avx512", bench_parts_avx512}};
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        int available = 0;
        if (kve_cpu_isa_available(isas[k].isa, &available) != KVE_OK || !available)
            continue;
        parts_times t;
        double api_trusted, api_checked;
        isas[k].run(&in, &t);
        api_times(&in, isas[k].isa, &api_trusted, &api_checked);
        double f = t.floor;
        printf("%-7s %7.3f | %6.3f %5.2fx  %6.3f %5.2fx  %6.3f %5.2fx | %6.3f %5.2fx  %6.3f %5.2fx | %6.3f %5.2fx  %6.3f %5.2fx\n",
               isas[k].name, f, t.scan, t.scan / f, t.scan_dups, t.scan_dups / f, t.boundary, t.boundary / f,
               t.head, t.head / f, t.head_dups, t.head_dups / f, api_trusted, api_trusted / f,
               api_checked, api_checked / f);
    }
    free(slots);
    return 0;
}
