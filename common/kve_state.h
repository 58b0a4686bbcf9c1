/*
 * kve_state.h — what the cache state (backends/state.c) asks of a backend:
 * one operation running a list of small jobs on the state's tables, one
 * evicting the rows of an append that are due (a row list), and the cache
 * write (which also runs the moves the jobs list). All are ops of
 * kve_backend_ops; the CPU ones are in kernels_cpu/cache_write_cpu.c, and
 * run the per-table code of common/device/state_body.h.
 *
 * Jobs live in backend memory (the state uploads them, stream-ordered), so
 * a launch's arguments are the same from one decode step to the next.
 */
#ifndef KVE_STATE_H
#define KVE_STATE_H

#include "kvevict.h"

/* Job kinds. "Table t" runs over the row's tables, t = tl * table_heads + th,
 * at slot_pos + base + t * stride (and its freed list at freed + base + t *
 * stride), stride being the row's capacity;
 * a token's mapping entry is mapping[tl * map_layer_stride + token * table_heads + th];
 * the move list of (call row i, table t) is list (tl * move_rows + i) * table_heads + th. */
typedef enum kve_state_job_kind {
    /* Tokens i < count, position pos + i, go to slot first + i of every table. */
    KVE_JOB_LINEAR = 0,
    /* One round's placement in every table (docs/SPEC.md "Placement"): the
     * table is full (first = C valid slots), freed[t][0 .. count) are the
     * evicted slots, ascending; tokens at positions >= pos belong to the
     * current call. Old survivors fill the holes below the new length, the
     * call's survivors follow in position order, and every old token that
     * moves is composed into move list (token = call row, t). */
    KVE_JOB_ROUND = 1,
    /* Move lists (token = call row) of every table emptied. */
    KVE_JOB_MOVES_CLEAR = 2,
    /* seqs[row] = seq (read by the eviction that follows). */
    KVE_JOB_SEQ = 3,
    /* After a call whose row went through a round: the call's tokens i <
     * count (positions pos + i, mapping index token + i) get the slot that
     * now holds them among the first = n_valid slots, or -1. */
    KVE_JOB_FINAL = 4,
    /* Every slot of every table of the row = -1. */
    KVE_JOB_RESET = 5,
    /* Not run by state_update: call row token's entry of an eviction's row
     * list (kve_state_evict): count = 1 when the row evicts now (0: its heads
     * are skipped), seq its coordinates. */
    KVE_JOB_EVICT = 6
} kve_state_job_kind;

typedef struct kve_state_job {
    uint64_t base;   /* elements before the row's tables (its place in the pool) */
    uint32_t stride; /* slots per table of the row: its capacity */
    uint32_t kind;
    uint32_t row;
    uint32_t first; /* LINEAR: first slot; ROUND: the row's capacity C; FINAL: n_valid */
    /* tokens (LINEAR, FINAL) or evicted slots (ROUND, = r); 0 makes ROUND
     * and FINAL no-ops (a row without a round this wave, or this call) */
    uint32_t count;
    uint32_t pos;   /* position of the first token (ROUND: of the call's first token) */
    uint32_t token; /* mapping index of the first token; ROUND, MOVES_CLEAR, EVICT: call row */
    uint32_t pad;
    kve_seq seq; /* SEQ */
} kve_state_job;

/* One call, all in backend memory. The jobs of one call are independent (no
 * job reads or writes what another writes), so a backend may run them in
 * any order or all at once. LINEAR and FINAL write the mapping only when
 * mapping != NULL; ROUND and MOVES_CLEAR the move lists only when moves !=
 * NULL. A GPU sizes its one launch by work, a bound the state computes from
 * the call's shape alone (rows, tables, tokens), never from the jobs. */
typedef struct kve_state_update {
    uint32_t table_layers, table_heads;
    int32_t *slot_pos;    /* the pool of tables */
    const int32_t *freed; /* the pool of freed lists, laid out as slot_pos */
    kve_seq *seqs;        /* [max_seqs] */
    uint64_t *run_digest; /* [max_seqs]: RESET zeroes the row's */
    int64_t *mapping;
    size_t map_layer_stride; /* elements between table layers */
    int32_t *moves;          /* pairs (src, dst), max_moves per list */
    uint32_t *n_moves;       /* per list */
    uint32_t move_rows;      /* lists per table layer = move_rows * table_heads */
    uint32_t max_moves;
    uint32_t n_jobs;
    const kve_state_job *jobs;
    uint64_t work; /* items the launch is sized for (>= the jobs' items) */
} kve_state_update;

/*
 * The eviction of an append's wave (docs/SPEC.md "Schedule"): for call row
 * i < b.n_seqs whose rows[i] (a KVE_JOB_EVICT in backend memory) has count
 * = 1, every table t of it is one head of kve_evict, with slot_pos at
 * b.slot_pos + base + t * C (C = the job's stride), evicted slots at freed +
 * base + t * C, its
 * counts at n_evicted[i * tables + t] and n_kept, the run digest of state
 * row rows[i].row added to. Rows with count = 0 are skipped (on a GPU: their
 * blocks return at once), so the launch is the same whichever rows evict.
 * b holds the schedule and the shape: n_seqs = call rows, n_slots = the
 * state's max_slots (sizing per-block scratch), seqs unused.
 */
typedef struct kve_state_evict {
    kve_batch b;
    int32_t *freed;
    uint32_t *n_evicted, *n_kept; /* [n_seqs][tables] */
    uint64_t *run_digest;         /* [max_seqs] */
    uint64_t run_digest_weight;
    const kve_state_job *rows;    /* [n_seqs] */
    void *workspace;              /* evict_workspace_size(b) bytes */
    size_t workspace_bytes;
    /* KVE_SCORED states: call row i's table t reads its scores at scores +
     * i * scores_stride_row + t * scores_stride_table (kve_step_buffers) */
    const float *scores;
    size_t scores_stride_row, scores_stride_table;
} kve_state_evict;

/* The CPU backend's implementations (kernels_cpu/cache_write_cpu.c). */
kve_status kve_cpu_state_update(kve_context *ctx, const kve_state_update *u);
kve_status kve_cpu_state_evict(kve_context *ctx, const kve_state_evict *e);
kve_status kve_cpu_cache_write(kve_context *ctx, const kve_cache_write_desc *d);

/* kve_cache_write_desc with every 0 stride replaced by its dense value. */
void kve_cache_write_resolve(const kve_cache_write_desc *in, kve_cache_write_desc *out);

#endif
