/*
 * bench_state.c — kvevict-bench's cache-state figures: how the state's
 * backend memory compares with the K/V bytes its tables describe, and what
 * a decode step's moves (kve_cache_write) cost next to memcpy of the same
 * bytes, and a whole G2 decode step, on the CPU.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "bench_step.h"

#define S_LAYERS 36 /* G1 */
#define S_HEADS 8
#define S_BUDGET 2048
#define S_WR 64       /* W = r = 64 */
#define S_ENTRY 256   /* 128 x bf16 */
#define S_ROWS 256
#define S_PAGE 16

/* G1 with 256 rows whose prompts are spread evenly over 1K..32K: the state
 * sized for the longest prompt in every row, and with a pool holding the
 * rows' capacities, against the K and V bytes of those capacities. */
void bench_state_memory(void)
{
    kve_context *ctx = cpu_context(0, 1);
    kve_schedule sc = {1, 0, S_BUDGET, S_WR, S_WR};
    uint32_t cmax = 0;
    uint64_t pool = 0;
    for (uint32_t i = 0; i < S_ROWS; i++) {
        uint32_t p = 1024 + (uint32_t)((uint64_t)i * (32768 - 1024) / (S_ROWS - 1)), c;
        kve_status st = kve_schedule_capacity(&sc, p, &c);
        if (st != KVE_OK)
            die("kve_schedule_capacity", st);
        pool += c;
        cmax = c > cmax ? c : cmax;
    }
    kve_state_desc d = {sc, S_ROWS, S_LAYERS, S_HEADS, 0, 0, cmax, 0, 0, 0};
    size_t every_row, pooled;
    kve_status st = kve_state_memory_size(ctx, &d, &every_row);
    d.pool_slots = pool;
    if (st == KVE_OK)
        st = kve_state_memory_size(ctx, &d, &pooled);
    if (st != KVE_OK)
        die("kve_state_memory_size", st);
    double kv = (double)pool * S_LAYERS * S_HEADS * 2 * S_ENTRY;
    printf("\nstate memory, G1 (36 x 8 heads), 256 rows, prompts 1K..32K evenly, B = 2048, "
           "W = r = 64;\nK and V of 128 x bf16 for the %llu slots a head the rows hold: %.2f GiB\n",
           (unsigned long long)pool, kv / (1u << 30));
    printf("%-34s %12s %10s\n", "state", "GiB", "x K/V");
    printf("%-34s %12.3f %9.2f%%\n", "max_slots in every row (pool 0)", every_row / 1073741824.0,
           100.0 * every_row / kv);
    printf("%-34s %12.3f %9.2f%%\n", "pool of the rows' capacities", pooled / 1073741824.0,
           100.0 * pooled / kv);
    kve_context_destroy(ctx);
}

int g_huge_pages;

void *bench_cache_alloc(size_t bytes)
{
    size_t huge = (size_t)2 << 20, rounded = (bytes + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, rounded ? rounded : huge);
    if (!p)
        die("bench_cache_alloc", KVE_ERR_NOMEM);
    /* The advice only asks: where the kernel's THP mode is "never", 2m
     * still gets 4 KiB pages (/sys/kernel/mm/transparent_hugepage). */
    madvise(p, rounded, g_huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    return p;
}

const char *bench_pages_name(void)
{
    return g_huge_pages ? "2 MiB pages (THP, madvise)" : "4 KiB pages";
}

typedef struct {
    kve_context *ctx;
    kve_cache_write_desc d;
    char *a, *z;
    size_t bytes;
    int threads;
    /* The same-pairs floor: every move's addresses, in kve_cache_write's
     * order (row by row; in a row, cache, then move k, then head). */
    char **to;
    const char **from;
    size_t pairs, per_row;
} moves_run;

/* A figure's heading line: what it measures and on how many threads. */
static void heading(const char *what, int threads)
{
    printf("\n%s, %d thread%s\n", what, threads, threads > 1 ? "s" : "");
}

static void moves_once(void *arg)
{
    moves_run *m = (moves_run *)arg;
    kve_status st = kve_cache_write(m->ctx, &m->d);
    if (st != KVE_OK)
        die("kve_cache_write", st);
}

static void copy_once(void *arg)
{
    moves_run *m = (moves_run *)arg;
    size_t part = (m->bytes + (size_t)m->threads - 1) / (size_t)m->threads;
#pragma omp parallel for schedule(static) num_threads(m->threads)
    for (int p = 0; p < m->threads; p++) {
        size_t lo = (size_t)p * part, hi = lo + part < m->bytes ? lo + part : m->bytes;
        if (lo < hi)
            memcpy(m->z + lo, m->a + lo, hi - lo);
    }
}

/* memcpy of the same pairs, one call per entry, rows split over the
 * threads as kve_cache_write splits them. */
static void pairs_once(void *arg)
{
    moves_run *m = (moves_run *)arg;
    size_t rows = m->pairs / m->per_row;
#pragma omp parallel for schedule(static) num_threads(m->threads)
    for (size_t r = 0; r < rows; r++)
        for (size_t i = r * m->per_row; i < (r + 1) * m->per_row; i++)
            memcpy(m->to[i], m->from[i], S_ENTRY);
}

enum { M_ROWS = 128, M_CAP = S_BUDGET + S_WR, M_BPR = (M_CAP + S_PAGE - 1) / S_PAGE };

/* Entry (row, slot, head) of cache c in NHD pages through block table bt. */
static char *moves_entry(const moves_run *m, const int32_t *bt, uint32_t c, uint32_t row,
                         int32_t slot, uint32_t h)
{
    size_t page = (size_t)bt[row * M_BPR + slot / S_PAGE];
    return (char *)m->d.dst[c] + (page * S_PAGE + (size_t)(slot % S_PAGE)) * S_HEADS * S_ENTRY +
           (size_t)h * S_ENTRY;
}

/* The moves' addresses for pairs_once (every list holds S_WR moves). */
static void moves_pairs(moves_run *m, const int32_t *bt, const int32_t *moves)
{
    m->per_row = (size_t)2 * S_WR * S_HEADS;
    m->pairs = M_ROWS * m->per_row;
    m->to = (char **)malloc(m->pairs * sizeof *m->to);
    m->from = (const char **)malloc(m->pairs * sizeof *m->from);
    if (!m->to || !m->from)
        die("bench_moves", KVE_ERR_NOMEM);
    size_t i = 0;
    for (uint32_t r = 0; r < M_ROWS; r++)
        for (uint32_t c = 0; c < 2; c++)
            for (uint32_t k = 0; k < S_WR; k++)
                for (uint32_t h = 0; h < S_HEADS; h++, i++) {
                    const int32_t *pair = moves + 2 * (((size_t)r * S_HEADS + h) * S_WR + k);
                    m->from[i] = moves_entry(m, bt, c, r, pair[0], h);
                    m->to[i] = moves_entry(m, bt, c, r, pair[1], h);
                }
}

/* The block table, move lists and desc of bench_moves: r = 64 moves per
 * head from the top r slots into ascending holes, about every 9th slot. */
static void moves_setup(moves_run *m, char *kv, size_t cache, int32_t *bt, int32_t *moves,
                        uint32_t *n_moves, int64_t *slot, int32_t *row0)
{
    uint64_t rng = 99;
    for (uint32_t i = 0; i < M_ROWS * M_BPR; i++) /* pages scattered over the cache */
        bt[i] = (int32_t)((i * 7919u) % (M_ROWS * M_BPR));
    for (size_t l = 0; l < (size_t)M_ROWS * S_HEADS; l++) {
        n_moves[l] = S_WR;
        uint32_t hole = 0;
        for (uint32_t k = 0; k < S_WR; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            hole += 1 + (uint32_t)(rng >> 60);
            moves[(l * S_WR + k) * 2] = (int32_t)(M_CAP - S_WR + k);
            moves[(l * S_WR + k) * 2 + 1] = (int32_t)hole;
        }
    }
    kve_cache_write_desc *d = &m->d;
    d->n_heads = S_HEADS;
    d->entry_bytes = S_ENTRY;
    d->n_caches = 2;
    d->src[0] = d->src[1] = slot; /* no token written: only the moves */
    d->dst[0] = kv;
    d->dst[1] = kv + cache;
    d->layout = KVE_LAYOUT_NHD;
    d->pages.page_size = S_PAGE;
    d->pages.n_pages = M_ROWS * M_BPR;
    d->slots = slot;
    d->slots_stride_token = 1;
    d->token_row = row0;
    d->pages.n_rows = M_ROWS;
    d->pages.kind = KVE_PAGES_BLOCK_TABLE;
    d->pages.block_table = bt;
    d->pages.blocks_per_row = M_BPR;
    d->moves = moves;
    d->n_moves = n_moves;
    d->n_move_rows = M_ROWS;
    d->max_moves = S_WR;
    d->moves_stride_row = S_HEADS;
    d->moves_stride_head = 1;
}

/* One layer of a decode step in which every one of 128 G1 rows ran a
 * round: r = 64 moves per head from the top r slots into holes below, K
 * and V in vLLM's NHD pages (16 slots) through a block table; against
 * memcpy of the same bytes contiguous, and memcpy of the same pairs. */
void bench_moves(int isa, int threads, double min_time)
{
    size_t lists = (size_t)M_ROWS * S_HEADS, page_bytes = (size_t)S_PAGE * S_HEADS * S_ENTRY;
    size_t cache = (size_t)M_ROWS * M_BPR * page_bytes;
    moves_run m;
    memset(&m, 0, sizeof m);
    m.ctx = cpu_context(isa, threads);
    m.threads = threads;
    char *kv = (char *)bench_cache_alloc(2 * cache);
    int32_t *bt = (int32_t *)malloc((size_t)M_ROWS * M_BPR * 4);
    int32_t *moves = (int32_t *)malloc(lists * S_WR * 8);
    uint32_t *n_moves = (uint32_t *)malloc(lists * 4);
    int64_t slot = -1;
    int32_t row0 = 0;
    if (!bt || !moves || !n_moves)
        die("bench_moves", KVE_ERR_NOMEM);
    memset(kv, 1, 2 * cache);
    moves_setup(&m, kv, cache, bt, moves, n_moves, &slot, &row0);
    moves_pairs(&m, bt, moves);
    m.bytes = lists * S_WR * S_ENTRY * 2;
    m.a = (char *)bench_cache_alloc(m.bytes);
    m.z = (char *)bench_cache_alloc(m.bytes);
    memset(m.a, 2, m.bytes);
    memset(m.z, 3, m.bytes);
    double t = time_median(min_time, NULL, moves_once, &m);
    double tc = time_median(min_time, NULL, copy_once, &m);
    double tp = time_median(min_time, NULL, pairs_once, &m);
    heading("moves of one layer, 128 G1 rows all in a round (64 moves a head, K and V, "
            "256-byte entries, NHD pages of 16 through a block table)", threads);
    printf("  cache on %s; %.1f MB moved; x 36 layers = %.2f ms a step\n", bench_pages_name(),
           m.bytes / 1e6, 36 * t * 1e3);
    printf("  kve_cache_write %.3f ms (%.2f GB/s); memcpy of the same bytes contiguous %.3f ms "
           "(%.2f GB/s): %.2f x; memcpy of the same pairs %.3f ms (%.2f GB/s): %.2f x\n",
           t * 1e3, m.bytes / t / 1e9, tc * 1e3, m.bytes / tc / 1e9, tc / t, tp * 1e3,
           m.bytes / tp / 1e9, tp / t);
    free(m.a);
    free(m.z);
    free(m.to);
    free(m.from);
    free(kv);
    free(bt);
    free(moves);
    free(n_moves);
    kve_context_destroy(m.ctx);
}

typedef struct {
    kve_step_bench b;
    kve_step_mode mode;
    int writes;  /* time the writes too */
    int planned; /* the append planned on the backend (kve_state_append_device) */
} step_run;

static void step_setup(void *arg)
{
    step_run *s = (step_run *)arg;
    /* staggered rows stay staggered step after step: prepared once */
    kve_status st = s->mode == KVE_STEP_STAGGERED ? KVE_OK : kve_step_bench_prepare(&s->b, s->mode);
    if (st != KVE_OK)
        die("kve_state_append (prepare)", st);
}

static void step_once(void *arg)
{
    step_run *s = (step_run *)arg;
    kve_status st = s->planned  ? kve_step_bench_run_device(&s->b)
                    : s->writes ? kve_step_bench_run(&s->b)
                                : kve_state_append(s->b.st, s->b.rows, s->b.row_ids, s->b.ones,
                                                   &s->b.out);
    if (st != KVE_OK)
        die("decode step", st);
}

/* G2 decode steps (bench_step.h) at 1, 8, 32 and 128 rows, each with a
 * round in every row and with none, and at 128 rows staggered (rows / r of
 * them round a step): the append alone, then with every layer's moves and
 * writes. bench/gpu_check.sh times the same steps on a GPU. */
void bench_step(int isa, int threads, double min_time)
{
    static const uint32_t rows[] = {1, 8, 32, 128};
    heading("decode step, G2 (64 x 8 heads), one token a row: kve_state_append, then + 64 layers "
            "of kve_cache_write (moves and K/V)",
            threads);
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        static step_run s;
        kve_status st = kve_step_bench_init(&s.b, cpu_context(isa, threads), rows[k]);
        if (st != KVE_OK)
            die("decode step setup", st);
        for (int m = KVE_STEP_ROUND_ALL; m <= KVE_STEP_STAGGERED; m++) {
            if (m == KVE_STEP_STAGGERED && rows[k] < KVE_ST_WR)
                continue; /* under r rows, a staggered step rounds in no row most steps */
            s.mode = (kve_step_mode)m;
            if (m == KVE_STEP_STAGGERED && (st = kve_step_bench_prepare(&s.b, s.mode)) != KVE_OK)
                die("kve_state_append (prepare)", st);
            s.writes = 0;
            double ta = time_median(min_time, step_setup, step_once, &s);
            s.writes = 1;
            double tw = time_median(min_time, step_setup, step_once, &s);
            s.planned = 1;
            double tp = time_median(min_time, step_setup, step_once, &s);
            s.planned = 0;
            printf("  %3u rows, %-9s: append %9.3f ms, + 64 layers of writes %9.3f ms a step; "
                   "planned (kve_state_append_device) + writes %9.3f ms\n",
                   rows[k], kve_step_mode_names[m], ta * 1e3, tw * 1e3, tp * 1e3);
        }
        kve_context *ctx = s.b.ctx;
        kve_step_bench_free(&s.b);
        kve_context_destroy(ctx);
    }
}
