/* bench.h — what bench_cpu.c (the driver) shares with bench_compact.c,
 * bench_state.c, bench_score.c and bench_scored.c. */
#ifndef KVE_BENCH_H
#define KVE_BENCH_H

#include "kvevict.h"

typedef void (*step_fn)(void *arg);

/* The standard workloads' head (docs/BENCHMARKS.md): G1 is 36 layers x 8 heads. */
#define G_LAYERS 36
#define G_HEADS 8
#define G_PROMPT 1024
#define G_BUDGET 2048
#define G_WINDOW 64
#define G_SLOTS (G_BUDGET + G_WINDOW) /* full: B + r, r = W = 64 */
#define G_CAND (G_BUDGET - G_PROMPT)  /* candidates per head: 1024 */
#define ENTRY_BYTES 256               /* 128 x bf16 */

/* Full G heads in steady state under slot reuse (bench_cpu.c), generated
 * positions g_spread apart (--spread; 1 by default). */
void fill_tables(int32_t *slots, size_t heads, uint64_t seed);
extern uint32_t g_spread;

/* Median (or least, with --stat min) seconds of body() over at least 3 runs
 * and min_time seconds, after a warm-up; setup() (untimed, may be NULL) runs
 * before each. */
double time_median(double min_time, step_fn setup, step_fn body, void *arg);
/* One of two steps time_pair times: setup() untimed (may be NULL), body(). */
typedef struct {
    step_fn setup, body;
    void *arg;
} timed_step;
/* @p a and @p b in turn (a, b, a, b, ...), at least 3 runs each and 2 x
 * min_time seconds in all, after a warm-up of each: their medians (least
 * with --stat min) in *ta and *tb, so that the ratio of the two holds
 * while the machine's speed drifts. */
void time_pair(double min_time, const timed_step *a, const timed_step *b, double *ta, double *tb);
/* --stat min given: figures are fastest runs (the peers' too). */
extern int g_use_min;
/* Exits with the library's message. */
void die(const char *what, kve_status st);
/* kve_evict, or die() with its message. */
void evict_or_die(kve_context *ctx, const kve_batch *b, const kve_evict_out *out, void *ws,
                  size_t ws_bytes);
/* A CPU context on @p isa with @p threads. */
kve_context *cpu_context(int isa, int threads);

/* bench_compact.c: the compaction table, per layout, placement, ISA
 * (named by isa_names[isa]) and thread count. */
void bench_compaction(const int *isas, int n_isas, const int *threads, int n_threads, double min_time,
                      const char *const *isa_names);

/* bench_state.c: --pages 2m given: caches and their floors' buffers on
 * 2 MiB transparent huge pages, else on 4 KiB pages. */
extern int g_huge_pages;
/* @p bytes 2 MiB aligned on the pages --pages asks for (engines' tensors
 * are at least 64-byte aligned); dies when out of memory. */
void *bench_cache_alloc(size_t bytes);
/* The pages bench_cache_alloc gives, in words. */
const char *bench_pages_name(void);

/* bench_state.c: the state's memory against the K/V it describes (G1, 256
 * rows of prompts 1K..32K), and kve_cache_write's moves against memcpy of
 * the same bytes. */
void bench_state_memory(void);
void bench_moves(int isa, int threads, double min_time);
/* bench_state.c: one G2 decode step at 128 sequences (bench_step.h). */
void bench_step(int isa, int threads, double min_time);

/* bench_score.c: seconds per G1 scoring round (36 kve_score calls) of
 * @p scorer on a CPU context (the cost-table entry), and the figure with
 * the PyTorch peer of @p script (bench/score_peers.py; python NULL: none). */
double bench_score_round(kve_scorer scorer, int isa, int threads, double min_time);
void bench_score(const int *isas, int n_isas, const int *threads, int n_threads, double min_time,
                 const char *python, const char *script);
/* bench_scored.c: a checked G1 round, random vs scored (uniform and tied
 * scores), measured alternately; one line. */
void bench_scored(int isa, int threads, double min_time, const char *isa_name);

#endif
