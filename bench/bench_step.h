/*
 * bench_step.h — one decode step of a cache state, as an engine runs it,
 * for the CPU bench (bench_state.c) and the GPU one (gpu_bench.cu)
 * alike: public API only, every buffer backend memory.
 *
 * G2 (64 layers x 8 KV heads), P = 1024, B = 2048, W = r = 64, @p rows
 * sequences, each full (2112 slots a head) before the step: the step's
 * kve_state_append of one token a row runs a round in every row, then each
 * layer's kve_cache_write runs its moves and writes the new K and V (128 x
 * bf16, 256 bytes an entry) into vLLM-style NHD pages of 16 slots through a
 * block table. One layer's K/V buffers serve every layer (the bytes moved
 * and written are the same; 64 layers of them would not fit a CPU host).
 * Written in the common subset of C11 and C++17.
 */
#ifndef KVE_BENCH_STEP_H
#define KVE_BENCH_STEP_H

#include <stdlib.h>
#include <string.h>

#include "kvevict.h"

enum {
    KVE_ST_LAYERS = 64,
    KVE_ST_HEADS = 8,
    KVE_ST_PROMPT = 1024,
    KVE_ST_BUDGET = 2048,
    KVE_ST_WR = 64,
    KVE_ST_CAP = KVE_ST_BUDGET + KVE_ST_WR, /* 2112 */
    KVE_ST_ENTRY = 256,
    KVE_ST_PAGE = 16,
    KVE_ST_BPR = (KVE_ST_CAP + KVE_ST_PAGE - 1) / KVE_ST_PAGE
};

typedef struct kve_step_bench {
    kve_context *ctx;
    kve_state *st;
    uint32_t rows;
    uint32_t *row_ids, *ones, *refill; /* host: 0..rows-1, 1 each, r - 1 each */
    uint32_t *dev_rows, *dev_ones;     /* backend: row_ids and ones, for the planned step */
    void *kv, *src;                    /* backend: K then V pages; the step's new K, V */
    int32_t *block_table, *token_row;  /* backend */
    kve_step_buffers out;              /* backend */
    size_t cache_bytes;                /* one cache (K or V) */
} kve_step_bench;

static inline kve_status kve_step_alloc(kve_step_bench *b, size_t bytes, void **p)
{
    return kve_alloc(b->ctx, bytes, p);
}

/* Host copy of @p bytes at @p host into new backend memory at *p. */
static inline kve_status kve_step_upload(kve_step_bench *b, const void *host, size_t bytes,
                                         void **p)
{
    kve_status st = kve_step_alloc(b, bytes, p);
    return st != KVE_OK ? st : kve_copy(b->ctx, *p, host, bytes, KVE_COPY_HOST_TO_BACKEND);
}

/* Every row back to full capacity (the next append runs a round), untimed:
 * the first time the whole sequence, later the r - 1 tokens since. */
static inline kve_status kve_step_bench_fill(kve_step_bench *b, int first)
{
    if (first) {
        uint32_t all = KVE_ST_CAP;
        for (uint32_t i = 0; i < b->rows; i++) {
            kve_status st = kve_state_append(b->st, 1, &b->row_ids[i], &all, NULL);
            if (st != KVE_OK)
                return st;
        }
        return KVE_OK;
    }
    return kve_state_append(b->st, b->rows, b->row_ids, b->refill, NULL);
}

/* The state, its rows admitted and full, and the step's buffers. */
static inline kve_status kve_step_bench_init(kve_step_bench *b, kve_context *ctx, uint32_t rows)
{
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->rows = rows;
    kve_state_desc d;
    memset(&d, 0, sizeof d);
    d.schedule.seed = 2609;
    d.schedule.budget = KVE_ST_BUDGET;
    d.schedule.window = KVE_ST_WR;
    d.schedule.interval = KVE_ST_WR;
    d.max_seqs = rows;
    d.n_layers = KVE_ST_LAYERS;
    d.n_heads = KVE_ST_HEADS;
    d.max_slots = KVE_ST_CAP;
    kve_status st = kve_state_create(ctx, &d, NULL, 0, &b->st);
    size_t n_pages = (size_t)rows * KVE_ST_BPR, lists = (size_t)KVE_ST_LAYERS * rows * KVE_ST_HEADS;
    b->cache_bytes = n_pages * KVE_ST_PAGE * KVE_ST_HEADS * KVE_ST_ENTRY;
    b->row_ids = (uint32_t *)malloc(3 * rows * sizeof(uint32_t));
    int32_t *bt = (int32_t *)malloc(n_pages * 4);
    if (!b->row_ids || !bt) {
        free(bt);
        return KVE_ERR_NOMEM;
    }
    b->ones = b->row_ids + rows;
    b->refill = b->ones + rows;
    for (uint32_t i = 0; i < rows; i++) {
        b->row_ids[i] = i;
        b->ones[i] = 1;
        b->refill[i] = KVE_ST_WR - 1;
    }
    for (size_t i = 0; i < n_pages; i++) /* pages scattered over the cache */
        bt[i] = (int32_t)((i * 7919u) % n_pages);
    for (uint32_t i = 0; st == KVE_OK && i < rows; i++)
        st = kve_state_admit(b->st, i, 1000 + i, KVE_ST_PROMPT);
    if (st == KVE_OK)
        st = kve_step_upload(b, bt, n_pages * 4, (void **)&b->block_table);
    if (st == KVE_OK)
        st = kve_step_upload(b, b->row_ids, rows * 4, (void **)&b->token_row);
    if (st == KVE_OK)
        st = kve_step_upload(b, b->row_ids, rows * 4, (void **)&b->dev_rows);
    if (st == KVE_OK)
        st = kve_step_upload(b, b->ones, rows * 4, (void **)&b->dev_ones);
    free(bt);
    if (st == KVE_OK)
        st = kve_step_alloc(b, 2 * b->cache_bytes, &b->kv);
    if (st == KVE_OK)
        st = kve_step_alloc(b, (size_t)2 * rows * KVE_ST_HEADS * KVE_ST_ENTRY, &b->src);
    b->out.max_tokens = b->out.max_rows = rows;
    b->out.max_moves = KVE_ST_WR;
    if (st == KVE_OK)
        st = kve_step_alloc(b, (size_t)KVE_ST_LAYERS * rows * KVE_ST_HEADS * 8,
                            (void **)&b->out.slot_mapping);
    if (st == KVE_OK)
        st = kve_step_alloc(b, lists * KVE_ST_WR * 8, (void **)&b->out.moves);
    if (st == KVE_OK)
        st = kve_step_alloc(b, lists * 4, (void **)&b->out.n_moves);
    return st == KVE_OK ? kve_step_bench_fill(b, 1) : st;
}

/* Layer @p l's cache write of the step: its moves, then one token a row. */
static inline kve_status kve_step_write(kve_step_bench *b, uint32_t l)
{
    kve_cache_write_desc d;
    memset(&d, 0, sizeof d);
    size_t lists = (size_t)b->rows * KVE_ST_HEADS, per_cache = lists * KVE_ST_ENTRY;
    d.n_tokens = b->rows;
    d.n_heads = KVE_ST_HEADS;
    d.entry_bytes = KVE_ST_ENTRY;
    d.n_caches = 2;
    d.src[0] = b->src;
    d.src[1] = (char *)b->src + per_cache;
    d.dst[0] = b->kv;
    d.dst[1] = (char *)b->kv + b->cache_bytes;
    d.layout = KVE_LAYOUT_NHD;
    d.pages.page_size = KVE_ST_PAGE;
    d.pages.n_pages = b->rows * KVE_ST_BPR;
    d.slots = b->out.slot_mapping + (size_t)l * lists;
    d.slots_stride_token = KVE_ST_HEADS;
    d.slots_stride_head = 1;
    d.token_row = b->token_row;
    d.pages.n_rows = b->rows;
    d.pages.kind = KVE_PAGES_BLOCK_TABLE;
    d.pages.block_table = b->block_table;
    d.pages.blocks_per_row = KVE_ST_BPR;
    d.moves = b->out.moves + (size_t)l * lists * KVE_ST_WR * 2;
    d.n_moves = b->out.n_moves + (size_t)l * lists;
    d.n_move_rows = b->rows;
    d.max_moves = KVE_ST_WR;
    d.moves_stride_row = KVE_ST_HEADS;
    d.moves_stride_head = 1;
    return kve_cache_write(b->ctx, &d);
}

/* The step: the append (every row runs a round), then every layer's write. */
static inline kve_status kve_step_bench_run(kve_step_bench *b)
{
    kve_status st = kve_state_append(b->st, b->rows, b->row_ids, b->ones, &b->out);
    for (uint32_t l = 0; st == KVE_OK && l < KVE_ST_LAYERS; l++)
        st = kve_step_write(b, l);
    return st;
}

/* The step as an engine captures it in a graph: the append planned on the
 * device (kve_state_append_device: rows and counts in backend memory,
 * launches that depend on the shape alone), then every layer's write. */
static inline kve_status kve_step_bench_run_device(kve_step_bench *b)
{
    kve_status st = kve_state_append_device(b->st, b->rows, b->dev_rows, b->dev_ones, 1, &b->out);
    for (uint32_t l = 0; st == KVE_OK && l < KVE_ST_LAYERS; l++)
        st = kve_step_write(b, l);
    return st;
}

/* What the next one-token step does in each row (issue 38's step rows). */
typedef enum kve_step_mode {
    KVE_STEP_ROUND_ALL = 0, /* every row full: every row runs a round */
    KVE_STEP_ROUND_NONE,    /* every row has room: no round */
    KVE_STEP_STAGGERED      /* row i is i mod r tokens short of full: rows / r rows round a step */
} kve_step_mode;

static const char *const kve_step_mode_names[] = {"round", "none", "staggered"};

/* Tokens that take a row holding @p v of @p cap valid slots to holding
 * @p t (cap - r < t <= cap): up to full, then past a round (r freed). */
static inline uint32_t kve_step_tokens_to(uint32_t v, uint32_t cap, uint32_t t)
{
    return v <= t ? t - v : (cap - v) + (t - (cap - KVE_ST_WR));
}

/* The rows brought, untimed, to where the next step runs @p mode (one
 * append of a few tokens a row; none when they are there already). */
static inline kve_status kve_step_bench_prepare(kve_step_bench *b, kve_step_mode mode)
{
    uint32_t *n = b->refill; /* scratch: rows entries */
    int any = 0;
    for (uint32_t i = 0; i < b->rows; i++) {
        kve_state_seq_info info;
        kve_status st = kve_state_get_seq(b->st, b->row_ids[i], &info);
        if (st != KVE_OK)
            return st;
        uint32_t cap = info.capacity, v = info.n_valid;
        uint32_t t = mode == KVE_STEP_ROUND_ALL ? cap
                     : mode == KVE_STEP_ROUND_NONE ? (v < cap ? v : cap - KVE_ST_WR + 1)
                                                   : cap - i % KVE_ST_WR;
        n[i] = kve_step_tokens_to(v, cap, t);
        any |= n[i] != 0;
    }
    kve_status st = any ? kve_state_append(b->st, b->rows, b->row_ids, n, NULL) : KVE_OK;
    for (uint32_t i = 0; i < b->rows; i++)
        b->refill[i] = KVE_ST_WR - 1; /* kve_step_bench_fill's counts again */
    return st;
}

static inline void kve_step_bench_free(kve_step_bench *b)
{
    kve_free(b->ctx, b->kv);
    kve_free(b->ctx, b->src);
    kve_free(b->ctx, b->block_table);
    kve_free(b->ctx, b->token_row);
    kve_free(b->ctx, b->dev_rows);
    kve_free(b->ctx, b->dev_ones);
    kve_free(b->ctx, b->out.slot_mapping);
    kve_free(b->ctx, b->out.moves);
    kve_free(b->ctx, b->out.n_moves);
    kve_state_destroy(b->st);
    free(b->row_ids);
}

#endif
