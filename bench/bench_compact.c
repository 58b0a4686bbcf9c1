/*
 * bench_compact.c — kvevict-bench's compaction figures: kve_compact of G1's
 * K and V after one round, in place or into new buffers, in token rows
 * [T][L][H][E] or per-head rows [L][H][T][E], next to memcpy and memmove
 * of the same bytes (memmove timed in turn with the compaction: their ratio
 * is issue 15's target; docs/BENCHMARKS.md).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct {
    double ms, moved_mb, gbs, memcpy_gbs, memmove_gbs;
} compact_result;

typedef struct {
    kve_context *ctx;
    const kve_compact_desc *d;
    int32_t *work;
    const int32_t *slots;
    size_t slot_bytes;
    char *a, *z;
    size_t bytes;
    int threads;
} compact_run;

static void compact_reset(void *arg) /* the slot tables as kve_evict left them */
{
    compact_run *r = (compact_run *)arg;
    memcpy(r->work, r->slots, r->slot_bytes);
}

static void compact_once(void *arg)
{
    compact_run *r = (compact_run *)arg;
    kve_status st = kve_compact(r->ctx, r->d);
    if (st != KVE_OK)
        die("kve_compact", st);
}

static void memmove_once(void *arg) /* the same bytes moved in place, one 64-byte line down */
{
    compact_run *r = (compact_run *)arg;
    memmove(r->a, r->a + 64, r->bytes - 64);
}

static void memcpy_once(void *arg)
{
    compact_run *r = (compact_run *)arg;
    size_t part = (r->bytes / (size_t)r->threads + 63) & ~(size_t)63;
#pragma omp parallel for schedule(static) num_threads(r->threads)
    for (int p = 0; p < r->threads; p++) {
        size_t lo = (size_t)p * part, hi = lo + part < r->bytes ? lo + part : r->bytes;
        if (lo < hi)
            memcpy(r->z + lo, r->a + lo, hi - lo);
    }
}

/* G1 after one eviction: K and V compacted in place (or into new buffers),
 * in token-row layout [T][L][H][E] or per-head rows [L][H][T][E]. */
static compact_result bench_compact(int isa, int threads, int token_rows, int out_of_place,
                                    double min_time)
{
    size_t heads = (size_t)G_LAYERS * G_HEADS, cache = heads * G_SLOTS * ENTRY_BYTES;
    int32_t *slots = (int32_t *)malloc(heads * G_SLOTS * 4), *work = (int32_t *)malloc(heads * G_SLOTS * 4);
    fill_tables(slots, heads, 7);
    kve_seq seq = {1, G_PROMPT, 0};
    kve_batch b = {2609, KVE_TRUSTED_SLOTS, 1, &seq, G_LAYERS, G_HEADS, 0, 0, G_SLOTS, G_BUDGET,
                   G_WINDOW, slots, G_SLOTS, NULL, 0};
    size_t ev_stride = G_SLOTS - G_BUDGET;
    int32_t *evicted = (int32_t *)malloc(heads * ev_stride * 4);
    uint32_t *n_ev = (uint32_t *)malloc(heads * 4), *n_kept = (uint32_t *)malloc(heads * 4);
    kve_evict_out out = {.evicted = evicted, .evicted_stride = ev_stride, .n_evicted = n_ev,
                         .n_kept = n_kept};
    kve_context *ctx = cpu_context(isa, threads);
    kve_status st = kve_evict(ctx, &b, &out, NULL, 0);
    if (st != KVE_OK)
        die("kve_evict", st);
    size_t moved = 0; /* entries whose slot changes (out of place: every kept one) */
    for (size_t i = 0; i < heads; i++)
        for (uint32_t t = 0, j = 0, e = 0; t < G_SLOTS; t++) {
            if (e < n_ev[i] && evicted[i * ev_stride + e] == (int32_t)t) {
                e++;
                continue;
            }
            moved += j++ != t || out_of_place;
        }
    char *kv = (char *)bench_cache_alloc(2 * cache);
    char *kv_dst = out_of_place ? (char *)bench_cache_alloc(2 * cache) : NULL;
    memset(kv, 1, 2 * cache);
    if (kv_dst)
        memset(kv_dst, 0, 2 * cache);
    kve_compact_desc d;
    memset(&d, 0, sizeof d);
    d.n_seqs = 1, d.n_layers = G_LAYERS, d.n_heads = G_HEADS, d.n_slots = G_SLOTS;
    d.slot_pos = work, d.slot_pos_stride = G_SLOTS;
    d.evicted = evicted, d.evicted_stride = ev_stride, d.n_evicted = n_ev;
    d.entry_bytes = ENTRY_BYTES, d.n_caches = 2;
    for (int c = 0; c < 2; c++) {
        kve_cache_view v = token_rows
            ? (kve_cache_view){kv + c * cache, 0, G_HEADS * ENTRY_BYTES, ENTRY_BYTES, heads * ENTRY_BYTES}
            : (kve_cache_view){kv + c * cache, 0, G_HEADS * G_SLOTS * ENTRY_BYTES, G_SLOTS * ENTRY_BYTES,
                               ENTRY_BYTES};
        d.src[c] = v;
        if (kv_dst) {
            v.base = kv_dst + c * cache;
            d.dst[c] = v;
        }
    }
    compact_result r;
    compact_run run = {ctx, &d, work, slots, heads * G_SLOTS * 4, NULL, NULL, 0, threads};
    double bytes = (double)moved * ENTRY_BYTES * 2;
    run.a = (char *)bench_cache_alloc((size_t)bytes);
    run.z = (char *)bench_cache_alloc((size_t)bytes);
    run.bytes = (size_t)bytes;
    memset(run.a, 2, run.bytes);
    memset(run.z, 3, run.bytes);
    /* The compaction and memmove of the same bytes in turn (the ratio the
     * target is about); then memcpy of them, split over the same threads. */
    const timed_step compact = {compact_reset, compact_once, &run}, move = {NULL, memmove_once, &run};
    double t, tm;
    time_pair(min_time, &compact, &move, &t, &tm);
    r.ms = t * 1e3;
    r.moved_mb = bytes / 1e6;
    r.gbs = bytes / t / 1e9;
    r.memmove_gbs = bytes / tm / 1e9;
    r.memcpy_gbs = bytes / time_median(min_time, NULL, memcpy_once, &run) / 1e9;
    free(run.a);
    free(run.z);
    free(kv);
    free(kv_dst);
    kve_context_destroy(ctx);
    free(slots);
    free(work);
    free(evicted);
    free(n_ev);
    free(n_kept);
    return r;
}

void bench_compaction(const int *isas, int n_isas, const int *threads, int n_threads, double min_time,
                      const char *const *isa_names)
{
    printf("\ncompaction of G1 after a round: K and V, 256-byte entries, %s; GB/s of entries "
           "moved\n",
           bench_pages_name());
    printf("%-22s %-7s %3s | %9s %9s %8s | %11s %8s | %12s %9s\n", "layout", "isa", "thr",
           "ms/round", "moved MB", "GB/s", "memcpy GB/s", "x memcpy", "memmove GB/s", "x memmove");
    for (int mode = 0; mode < 4; mode++) /* token rows, head rows; in place, out of place */
        for (int i = 0; i < n_isas; i++)
            for (int t = 0; t < n_threads; t++) {
                int token_rows = !(mode & 1), oop = mode >> 1;
                compact_result r = bench_compact(isas[i], threads[t], token_rows, oop, min_time);
                char name[32];
                snprintf(name, sizeof name, "%s, %s", token_rows ? "TLHE rows" : "LHTE rows",
                         oop ? "to new" : "in place");
                printf("%-22s %-7s %3d | %9.3f %9.1f %8.2f | %11.2f %8.2f | %12.2f %9.2f\n", name,
                       isa_names[isas[i]], threads[t], r.ms, r.moved_mb, r.gbs, r.memcpy_gbs,
                       r.gbs / r.memcpy_gbs, r.memmove_gbs, r.gbs / r.memmove_gbs);
                fflush(stdout);
            }
}
