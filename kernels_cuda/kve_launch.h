/*
 * kve_launch.h — the launch plan, plain host C shared by the CUDA and HIP
 * driver (backends/gpu.cu) and the host emulator (tests/emu), so all three
 * launch the bodies alike: kernel arguments from the public structs, block
 * sizes and grids from the call's shape and the device's limits
 * (kve_launch_limits), eviction's scratch in shared memory or in the
 * workspace, the copy units of compaction and the cache write, and the
 * device's error records as a kve_status.
 */
#ifndef KVE_LAUNCH_H
#define KVE_LAUNCH_H

#include <stdint.h>
#include <stdio.h>

#include "cache_write_grid.h"
#include "compact_body.h"
#include "evict_body.h"
#include "keys_body.h"
#include "round_body.h"
#include "score_body.h"
#include "score_grid_body.h" /* the device grid */
#include "state_grid.h"

#define KVE_HOST_FN static inline

typedef kve_status (*kve_set_error_fn)(kve_status status, const char *fmt, ...);

/* Blocks for @p work items, @p per_block each: at least 1, at most @p cap
 * (grid-stride kernels do the rest). */
KVE_HOST_FN uint32_t kve_launch_grid(uint64_t work, uint32_t per_block, uint32_t cap)
{
    uint64_t blocks = (work + per_block - 1) / per_block;
    return blocks < cap ? (uint32_t)(blocks ? blocks : 1) : cap;
}

/* ---- the device's limits ---------------------------------------------------- */

#define KVE_KEYS_THREADS 256u
#define KVE_STATE_THREADS 256u
/* The planner of an append's wave: one block (state_grid.h). */
#define KVE_STATE_PLAN_THREADS 256u
/* A round's block (round_body.h): one table a block; a G2 round (r = 64)
 * keeps half of it busy, a larger r or a call's block of tokens all. */
#define KVE_ROUND_THREADS 128u
#define KVE_EVICT_MAX_THREADS 512u /* kve_evict_threads' largest block */
#define KVE_BLOCKS_PER_SM 32u      /* grid cap of grid-stride kernels, per SM */
/* Eviction's grid cap per SM when its scratch lives in the workspace: the
 * workspace holds one scratch per block, so few blocks keep it small. */
#define KVE_EVICT_WORKSPACE_BLOCKS_PER_SM 2u
/* The workspace's per-block scratch, and the caller's pointer, are aligned
 * to this (the workspace has room to align the pointer). */
#define KVE_EVICT_SCRATCH_ALIGN 256u

/* What a launch plan needs to know of the device (the GPU driver reads it
 * once per context; the emulator sets it). */
typedef struct kve_launch_limits {
    uint32_t max_grid;           /* blocks of a grid-stride kernel, at most */
    uint32_t max_grid_workspace; /* eviction's blocks when its scratch is in the workspace */
    size_t evict_smem_max;       /* dynamic shared memory an eviction block may take */
} kve_launch_limits;

/* The limits of a device of @p sm_count multiprocessors (compute units)
 * whose eviction kernels may take @p evict_smem_max bytes of dynamic
 * shared memory. */
KVE_HOST_FN kve_launch_limits kve_launch_limits_of(uint32_t sm_count, size_t evict_smem_max)
{
    kve_launch_limits l = {sm_count * KVE_BLOCKS_PER_SM,
                           sm_count * KVE_EVICT_WORKSPACE_BLOCKS_PER_SM, evict_smem_max};
    return l;
}

/* ---- eviction --------------------------------------------------------------- */

/* Threads per block for eviction: 64 up to 256 slots, 128 up to 1,024,
 * 256 up to 4,096, then KVE_EVICT_MAX_THREADS (at most 16 slots a thread
 * below that); a multiple of 64, so of every warp width. */
KVE_HOST_FN uint32_t kve_evict_threads(uint32_t n_slots)
{
    return n_slots <= 256 ? 64 : n_slots <= 1024 ? 128 : n_slots <= 4096 ? 256 : 512;
}

/* A block's scratch (kve_evict_scratch_bytes), rounded up to the alignment
 * each block's part of the workspace keeps. */
KVE_HOST_FN size_t kve_evict_scratch_stride(uint32_t n_slots)
{
    size_t a = KVE_EVICT_SCRATCH_ALIGN;
    return (kve_evict_scratch_bytes(n_slots) + a - 1) & ~(a - 1);
}

/* Where an eviction block keeps its scratch. */
typedef enum kve_scratch_place {
    KVE_SCRATCH_SHARED = 0, /* dynamic shared memory: no workspace */
    KVE_SCRATCH_WORKSPACE   /* the caller's workspace, one stride per block */
} kve_scratch_place;

/* How eviction (kve_evict, and a cache state's eviction wave, planned as
 * a kve_evict of the same shape) runs for a batch. */
typedef struct kve_evict_plan {
    uint32_t threads;        /* per block */
    uint32_t grid;           /* blocks; each takes heads grid-stride */
    kve_scratch_place place; /* shared memory when a block's scratch fits it */
    size_t dyn_smem;         /* dynamic shared memory per block (0 in the workspace) */
    size_t scratch_stride;   /* workspace bytes per block (0 in shared memory) */
    size_t workspace_bytes;  /* what kve_evict_workspace_size() reports (0 in shared memory) */
} kve_evict_plan;

KVE_HOST_FN kve_evict_plan kve_evict_plan_make(const kve_launch_limits *lim, const kve_batch *b)
{
    kve_evict_plan p;
    uint64_t heads = (uint64_t)b->n_seqs * b->n_layers * b->n_heads;
    size_t stride = kve_evict_scratch_stride(b->n_slots);
    p.threads = kve_evict_threads(b->n_slots);
    if (stride <= lim->evict_smem_max) {
        p.place = KVE_SCRATCH_SHARED;
        p.grid = kve_launch_grid(heads, 1, lim->max_grid);
        p.dyn_smem = stride;
        p.scratch_stride = p.workspace_bytes = 0;
    } else {
        p.place = KVE_SCRATCH_WORKSPACE;
        p.grid = kve_launch_grid(heads, 1, lim->max_grid_workspace);
        p.dyn_smem = 0;
        p.scratch_stride = stride;
        p.workspace_bytes = (size_t)p.grid * stride + KVE_EVICT_SCRATCH_ALIGN;
    }
    return p;
}

/* The scratch the kernel's arguments carry under plan @p p: NULL (shared
 * memory), or @p workspace aligned up to KVE_EVICT_SCRATCH_ALIGN. */
KVE_HOST_FN unsigned char *kve_evict_plan_scratch(const kve_evict_plan *p, void *workspace)
{
    uintptr_t a = KVE_EVICT_SCRATCH_ALIGN;
    if (p->place == KVE_SCRATCH_SHARED)
        return NULL;
    return (unsigned char *)(((uintptr_t)workspace + a - 1) & ~(a - 1));
}

KVE_HOST_FN kve_evict_args kve_evict_args_make(const kve_batch *b, const kve_evict_out *o,
                                               const kve_evict_plan *p, void *workspace,
                                               uint64_t *errors)
{
    uint64_t heads = (uint64_t)b->n_seqs * b->n_layers * b->n_heads;
    kve_evict_args a = {*b, *o, heads, kve_evict_plan_scratch(p, workspace), p->scratch_stride,
                        errors};
    return a;
}

/* Arguments of a cache state's eviction wave, planned as kve_evict of
 * e->b (the state sized e->workspace so). */
KVE_HOST_FN kve_state_evict_args kve_state_evict_args_make(const kve_state_evict *e,
                                                           const kve_evict_plan *p,
                                                           uint64_t *errors)
{
    kve_state_evict_args a = {*e, kve_evict_plan_scratch(p, e->workspace), p->scratch_stride,
                              errors};
    return a;
}

#define KVE_COMPACT_THREADS 256u

KVE_HOST_FN uint32_t kve_unit_fits(uint32_t unit, uintptr_t x) { return x % unit == 0; }

/* The widest unit (16, 4 or 1 bytes) dividing the entry size, every base
 * and every stride, so each load and store is naturally aligned. */
KVE_HOST_FN uint32_t kve_compact_unit(const kve_compact_desc *d)
{
    static const uint32_t units[] = {16, 4};
    int out_of_place = d->dst[0].base != NULL;
    for (int u = 0; u < 2; u++) {
        uint32_t ok = kve_unit_fits(units[u], d->entry_bytes);
        for (uint32_t c = 0; c < d->n_caches; c++)
            for (int side = 0; side <= out_of_place; side++) {
                const kve_cache_view *v = side ? &d->dst[c] : &d->src[c];
                ok &= kve_unit_fits(units[u], (uintptr_t)v->base) &
                      kve_unit_fits(units[u], v->stride_seq) &
                      kve_unit_fits(units[u], v->stride_layer) &
                      kve_unit_fits(units[u], v->stride_head) &
                      kve_unit_fits(units[u], v->stride_slot);
            }
        if (ok)
            return units[u];
    }
    return 1;
}

/* Arguments of both compaction kernels; KVE_ERR_RANGE when an entry has
 * more than 2^32-1 units. */
KVE_HOST_FN kve_status kve_compact_args_make(const kve_compact_desc *d, uint64_t *errors,
                                             kve_set_error_fn set_error, kve_compact_args *a)
{
    a->d = *d;
    a->heads = (uint64_t)d->n_seqs * d->n_layers * d->n_heads;
    a->unit = kve_compact_unit(d);
    if (d->entry_bytes / a->unit > 0xffffffffu)
        return set_error(KVE_ERR_RANGE, "desc.entry_bytes = %zu: too large for the device kernels",
                         d->entry_bytes);
    a->units = (uint32_t)(d->entry_bytes / a->unit);
    a->in_place = d->dst[0].base == NULL;
    a->errors = errors;
    return KVE_OK;
}

/* Grids of compaction's two launches: the move kernel one block per
 * (head, cache), then the slots kernel one per head, both capped. */
typedef struct kve_compact_plan {
    uint32_t move_grid, slots_grid;
} kve_compact_plan;

KVE_HOST_FN kve_compact_plan kve_compact_plan_make(const kve_launch_limits *lim,
                                                   const kve_compact_args *a)
{
    kve_compact_plan p = {kve_launch_grid(a->heads * a->d.n_caches, 1, lim->max_grid),
                          kve_launch_grid(a->heads, 1, lim->max_grid)};
    return p;
}

/* Arguments of state_update's one launch (none when u->n_jobs = 0), on
 * kve_launch_grid(u->work, threads, cap) blocks: sized by the call's shape,
 * never by the jobs, which only the device reads. */
KVE_HOST_FN kve_state_args kve_state_args_make(const kve_state_update *u, uint64_t *errors)
{
    kve_state_args a = {*u, errors};
    return a;
}

/* state_update's grid on blocks of @p threads: one thread per unit of the
 * call's shape bound u->work. */
KVE_HOST_FN uint32_t kve_state_plan_grid(const kve_launch_limits *lim, const kve_state_update *u,
                                         uint32_t threads)
{
    return kve_launch_grid(u->work, threads, lim->max_grid);
}

/* The round kernel's grid (state_update of a wave's rounds,
 * kve_state_round_grid: one block per table of the call's rows): u->work
 * blocks, the call's rows x tables, capped. */
KVE_HOST_FN uint32_t kve_state_round_plan_grid(const kve_launch_limits *lim,
                                               const kve_state_update *u)
{
    return kve_launch_grid(u->work, 1, lim->max_grid);
}

/* The keys kernel's grid for @p n coordinates on blocks of @p threads. */
KVE_HOST_FN uint32_t kve_keys_plan_grid(const kve_launch_limits *lim, uint64_t n, uint32_t threads)
{
    return kve_launch_grid(n, threads, lim->max_grid);
}

#define KVE_CACHE_WRITE_THREADS 256u

/* Arguments of the cache write for a validated desc @p d with resolved
 * parts, on blocks of @p threads; KVE_ERR_RANGE when an entry has more
 * than 2^32-1 units. */
KVE_HOST_FN kve_status kve_cache_write_args_make(const kve_cache_write_desc *d, uint32_t threads,
                                                 uint64_t *errors, kve_set_error_fn set_error,
                                                 kve_cache_write_args *a)
{
    a->d = *d;
    uint32_t most = 1;
    for (uint32_t c = 0; c < KVE_MAX_CACHES; c++) {
        a->unit[c] = a->units[c] = 0;
        a->step[c] = 0;
        if (c >= d->n_caches)
            continue;
        const kve_cache_part *p = &d->part[c];
        uint32_t es = kve_dtype_size(p->dst_dtype);
        size_t bytes = (size_t)p->dim * es;
        if (p->convert) {
            a->units[c] = p->dim; /* unit 0: one element a lane */
            a->step[c] = p->dst_stride_elem;
        } else if (p->dst_stride_elem != es) {
            a->unit[c] = es; /* strided elements: one element a unit */
            a->units[c] = p->dim;
            a->step[c] = p->dst_stride_elem;
        } else {
            /* The widest power of two dividing the entry size, bases and strides. */
            uintptr_t all = bytes | p->src_stride_token | p->src_stride_head |
                            p->dst_stride_page | p->dst_stride_slot | p->dst_stride_head |
                            (uintptr_t)d->src[c] | (uintptr_t)d->dst[c] | 16;
            a->unit[c] = (uint32_t)(all & (~all + 1));
            if (bytes / a->unit[c] > 0xffffffffu)
                return set_error(KVE_ERR_RANGE,
                                 "desc: cache %u's entry of %zu bytes is too large for the "
                                 "device kernels",
                                 c, bytes);
            a->units[c] = (uint32_t)(bytes / a->unit[c]);
            a->step[c] = a->unit[c];
        }
        most = a->units[c] > most ? a->units[c] : most;
    }
    a->group = 1;
    while (a->group < most && threads % (a->group * 2) == 0)
        a->group *= 2; /* a power of two dividing the block */
    a->entries = (uint64_t)d->n_caches * d->n_tokens * d->n_heads;
    a->move_entries = kve_cache_move_entries(d);
    a->errors = errors;
    return KVE_OK;
}

/* The cache write's one launch (kve_cache_write_kernel) on blocks of
 * @p threads, a->group lanes per item: its write and move items
 * (kve_cache_write_grid), so the grid depends on the call's shape alone
 * (tokens, heads, caches, move rows, max_moves), never on the counts or
 * the slots. */
typedef struct kve_cache_write_plan {
    uint64_t items;
    uint32_t grid;
} kve_cache_write_plan;

KVE_HOST_FN kve_cache_write_plan kve_cache_write_plan_make(const kve_launch_limits *lim,
                                                           const kve_cache_write_args *a,
                                                           uint32_t threads)
{
    kve_cache_write_plan p;
    p.items = a->entries + a->move_entries;
    p.grid = kve_launch_grid(p.items, threads / a->group, lim->max_grid);
    return p;
}

#define KVE_SCORE_THREADS 256u

/*
 * The op score's one launch (score_body.h's grid; kve_score_call): one
 * block of @p threads per (row, KV head, tile of @p threads slots), the
 * tiles of the longest row (a listed call: max_slots, so the launch
 * follows from the shape alone) for every row; the shared memory a block
 * takes; and the device memory the call needs: the scratch (the given rows'
 * copy, one upload a call, then the raw scores: kve_score_scratch_bytes)
 * and the counters per (row, table), zeros between calls (the tails put
 * them back).
 */
typedef struct kve_score_plan {
    uint32_t grid;
    size_t smem;
    uint32_t tiles, max_slots;
    size_t rows_bytes;     /* the given rows to upload, at the scratch's start (listed: 0) */
    size_t raw_at;         /* the raw scores' offset in the scratch */
    size_t scratch_bytes;  /* SIZE_MAX: more than the address space */
    size_t arrived_bytes;  /* the counters */
} kve_score_plan;

KVE_HOST_FN kve_score_plan kve_score_plan_make(const kve_launch_limits *lim,
                                               const kve_score_call *c, uint32_t threads)
{
    const kve_score_desc *d = &c->d;
    int listed = c->list.rows != NULL;
    kve_score_args a;
    kve_score_args_init(&a, d, NULL);
    kve_score_plan p;
    p.max_slots = listed ? c->max_slots : 0;
    for (uint32_t i = 0; !listed && i < d->n_rows; i++)
        p.max_slots = d->rows[i].n_slots > p.max_slots ? d->rows[i].n_slots : p.max_slots;
    p.tiles = p.max_slots ? (p.max_slots + threads - 1) / threads : 1;
    p.grid = kve_launch_grid((uint64_t)d->n_rows * d->keys.n_heads * p.tiles, 1, lim->max_grid);
    p.smem = kve_score_smem_bytes(a.group, a.nq, a.nf, threads);
    p.rows_bytes = listed ? 0 : (size_t)d->n_rows * sizeof(kve_score_row);
    p.scratch_bytes = kve_score_scratch_bytes(d->n_rows, a.n_tables, a.nq, p.max_slots, &p.raw_at);
    p.arrived_bytes = (size_t)d->n_rows * a.n_tables * sizeof(uint32_t);
    return p;
}

/* Arguments of the launch of plan @p p: the given rows uploaded at
 * @p scratch's start (a listed call reads its list), the raw scores after
 * them, the counters at @p arrived. */
KVE_HOST_FN void kve_score_args_make(const kve_score_call *c, const kve_score_plan *p,
                                     unsigned char *scratch, uint32_t *arrived, uint64_t *errors,
                                     kve_score_args *a)
{
    kve_score_args_init(a, &c->d, errors);
    if (!c->list.rows)
        a->d.rows = (const kve_score_row *)scratch;
    a->tiles = p->tiles;
    a->max_slots = p->max_slots;
    a->raw = (float *)(scratch + p->raw_at);
    a->arrived = arrived;
    a->list = c->list;
}

/* The call that raises an error record: records of an earlier call here
 * win over a later one's. */
typedef enum kve_dev_err_call {
    KVE_DEV_CALL_EVICT = 0,
    KVE_DEV_CALL_COMPACT,
    KVE_DEV_CALL_STATE,
    KVE_DEV_CALL_CACHE_MOVES, /* kve_cache_write's moves (they read the cache before its writes) */
    KVE_DEV_CALL_CACHE_WRITE,
    KVE_DEV_CALL_SCORE
} kve_dev_err_call;

/* How the host ranks and words an error record: kinds in the order of the
 * host checks (frontend/validate.c, frontend/cache_write.c), each with the call
 * that raises it, whether its detail orders records of the same head too,
 * and the status and message it becomes. The message takes the record's
 * head (unsigned long long), then its detail (unsigned), then a string
 * (a refusal's words; "" for other kinds). */
typedef struct kve_dev_err_rank {
    kve_dev_err_kind kind;
    kve_dev_err_call call;
    int detail_orders;
    kve_status status;
    const char *fmt;
} kve_dev_err_rank;

/* The ranks, in order; KVE_DEV_ERR_KINDS entries. */
KVE_HOST_FN const kve_dev_err_rank *kve_dev_err_ranks(void)
{
    static const kve_dev_err_rank ranks[KVE_DEV_ERR_KINDS] = {
        {KVE_DEV_ERR_SLOT_RANGE, KVE_DEV_CALL_EVICT, 0, KVE_ERR_RANGE,
         "batch.slot_pos[head %llu][slot %u] < -1: positions must be >= 0, or -1 for an empty "
         "slot (checked on the device)"},
        {KVE_DEV_ERR_DUPLICATE, KVE_DEV_CALL_EVICT, 0, KVE_ERR_DUPLICATE,
         "batch.slot_pos[head %llu]: position %u is held by two slots (checked on the device)"},
        {KVE_DEV_ERR_SCORE_NAN, KVE_DEV_CALL_EVICT, 0, KVE_ERR_INVALID,
         "batch.scores[head %llu][slot %u] is NaN: a candidate's score must be a number (+-inf "
         "allowed) (checked on the device)"},
        {KVE_DEV_ERR_NEVICTED, KVE_DEV_CALL_COMPACT, 0, KVE_ERR_RANGE,
         "desc.n_evicted[%llu] = %u: exceeds n_slots or evicted_stride (checked on the device)"},
        {KVE_DEV_ERR_EV_RANGE, KVE_DEV_CALL_COMPACT, 1, KVE_ERR_RANGE,
         "desc.evicted[head %llu][%u]: not a slot in 0..n_slots-1 (checked on the device)"},
        {KVE_DEV_ERR_EV_ORDER, KVE_DEV_CALL_COMPACT, 1, KVE_ERR_INVALID,
         "desc.evicted[head %llu][%u]: evicted slots must be strictly ascending and hold a "
         "position (checked on the device)"},
        {KVE_DEV_ERR_CSLOT_RANGE, KVE_DEV_CALL_COMPACT, 0, KVE_ERR_RANGE,
         "desc.slot_pos[head %llu][slot %u] < -1: must be >= -1 (checked on the device)"},
        {KVE_DEV_ERR_STATE_CALL, KVE_DEV_CALL_STATE, 0, KVE_ERR_INVALID, /* kve_plan_refusal_status */
         "cache state append (or draft) refused at call row %llu, reason %u: the row %s "
         "(checked on the device); the state is unchanged and the call's outputs hold no "
         "tokens"},
        {KVE_DEV_ERR_STATE_SLOT, KVE_DEV_CALL_STATE, 0, KVE_ERR_INTERNAL,
         "cache state row %llu, table %u: a freed slot or a slot_mapping entry lies outside the "
         "table, skipped (checked on the device); rebuild the row with kve_state_rebuild"},
        {KVE_DEV_ERR_CW_MOVE, KVE_DEV_CALL_CACHE_MOVES, 1, KVE_ERR_RANGE,
         "desc.moves[move row %llu][head %u]: n_moves must be <= max_moves, move_row a row, and "
         "every pair's slots within that row (as desc.slots: below page_size, blocks_per_row * "
         "page_size, the length given by indptr and last_page_len, or n_pages * page_size) on "
         "pages 0..n_pages-1 (checked on the device); a round moves entries from slots up to the "
         "row's capacity, so with indptr describe every reserved page of the row"},
        {KVE_DEV_ERR_CW_ROW, KVE_DEV_CALL_CACHE_WRITE, 1, KVE_ERR_RANGE,
         "desc.token_row[%llu]: must be 0..n_rows-1 (checked on the device)"},
        {KVE_DEV_ERR_CW_SLOT, KVE_DEV_CALL_CACHE_WRITE, 1, KVE_ERR_RANGE,
         "desc.slots[token %llu][head %u]: must be -1 or a slot of the token's row (below "
         "page_size, blocks_per_row * page_size, the length given by indptr and last_page_len, "
         "which must be ascending and 1..page_size, or n_pages * page_size for flat slots) "
         "(checked on the device; or desc.src_slots there)"},
        {KVE_DEV_ERR_CW_PAGE, KVE_DEV_CALL_CACHE_WRITE, 1, KVE_ERR_RANGE,
         "desc.slots[token %llu][head %u]: its page (desc.pages.block_table or desc.pages.indices) must be "
         "0..n_pages-1 (checked on the device; or desc.src_slots there)"},
        {KVE_DEV_ERR_SC_KEY, KVE_DEV_CALL_SCORE, 1, KVE_ERR_RANGE,
         "kve_score: row %llu, slot %u: a candidate's slot or its page lies outside desc.keys "
         "(its page table, page_size, n_pages) (checked on the device; its score is 0)"}};
    return ranks;
}

/* The rank (index into kve_dev_err_ranks) of the record that is reported,
 * -1 when none was raised: the earliest call's; within it the lowest head
 * (token, for the cache write), then the order of the host checks, except
 * that a lower detail wins where both kinds' details order. */
KVE_HOST_FN int kve_dev_errors_pick(const uint64_t *rec)
{
    const kve_dev_err_rank *r = kve_dev_err_ranks();
    int best = -1;
    for (int i = 0; i < KVE_DEV_ERR_KINDS; i++) {
        uint64_t v = rec[r[i].kind];
        if (v == KVE_DEV_ERR_NONE)
            continue;
        if (best < 0) {
            best = i;
            continue;
        }
        uint64_t w = rec[r[best].kind];
        int by_detail = r[i].detail_orders && r[best].detail_orders;
        if (r[i].call == r[best].call && ((v >> 32) < (w >> 32) || (by_detail && v < w)))
            best = i;
    }
    return best;
}

/* The device's error records as a status and message (KVE_OK when none),
 * the one kve_dev_errors_pick chooses. */
KVE_HOST_FN kve_status kve_dev_errors_status(const uint64_t *rec, kve_set_error_fn set_error)
{
    int best = kve_dev_errors_pick(rec);
    if (best < 0)
        return KVE_OK;
    const kve_dev_err_rank *r = &kve_dev_err_ranks()[best];
    unsigned detail = (unsigned)rec[r->kind];
    /* a refusal: the planner's status and words (kve_plan_refusal_status,
     * _text), as on the CPU; others take two arguments */
    kve_status status = r->kind == KVE_DEV_ERR_STATE_CALL ? kve_plan_refusal_status(detail)
                                                          : r->status;
    return set_error(status, r->fmt, (unsigned long long)(rec[r->kind] >> 32), detail,
                     r->kind == KVE_DEV_ERR_STATE_CALL ? kve_plan_refusal_text(detail, -1) : "");
}

#endif /* KVE_LAUNCH_H */
