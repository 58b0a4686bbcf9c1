/* kve_state_impl.h — the cache state's insides, shared by the files of the
 * state: state.c, state_pool.c, state_append.c, state_scored.c,
 * state_rebuild.c and the scorer's state path in score.c. */
#ifndef KVE_STATE_IMPL_H
#define KVE_STATE_IMPL_H

#include "kve_backend.h"

/* A run of free pool slots. */
typedef struct kve_pool_run {
    uint64_t start, len;
} kve_pool_run;

/* Parts of the state's backend memory, in order (kve_state.offsets). */
enum kve_state_part {
    KVE_PART_SLOT_POS,  /* the slot tables of the pool */
    KVE_PART_FREED,     /* freed-slot lists, laid out as the tables */
    KVE_PART_JOBS,      /* the wave's jobs (dev_jobs) */
    KVE_PART_COUNTS,    /* n_evicted then n_kept, by call row */
    KVE_PART_WORKSPACE, /* the eviction's workspace */
    KVE_PART_DIGESTS,   /* running digests, one a row */
    KVE_PART_ROWS,      /* the planner's: rows, work, call rows, n_new, bases, marks, refusal */
    KVE_PART_SCORE,     /* the scorer's scratch (backends without host memory) */
    KVE_STATE_PARTS
};

struct kve_state {
    kve_context *ctx;
    kve_state_desc d;
    uint32_t table_layers, table_heads; /* 1 when shared (KVE_SHARED_LAYERS, _HEADS) */
    size_t tables, row_elems;
    uint64_t pool; /* slots per table in the pool */
    size_t offsets[KVE_STATE_PARTS], memory_bytes, workspace_bytes;
    void *memory;
    int owned;
    /* backend memory */
    int32_t *slot_pos, *freed;
    kve_state_job *dev_jobs;      /* [KVE_STATE_JOB_SETS * max_seqs]: the wave's jobs */
    uint32_t *n_evicted, *n_kept; /* [max_seqs][tables] each, by call row */
    uint64_t *run_digest; /* [max_seqs], SPEC §11, added to by the eviction kernels */
    void *workspace;
    kve_state_row *dev_rows;   /* [max_seqs]: the rows' bookkeeping the planner advances */
    kve_state_work *dev_work;  /* [max_seqs] */
    uint32_t *call_rows, *call_new, *call_base, *marks; /* [max_seqs] each */
    uint32_t *refused;         /* [1] */
    /* The host's mirror of dev_rows (rows, below). Once a call was planned
     * with kve_state_append_device, a graph may replay it without the
     * library seeing it: from then on every host path reads it back. */
    int device_planned;
    /* host memory, max_seqs each (one allocation, host), jobs
     * KVE_STATE_JOB_SETS * max_seqs; rows is the host's mirror of dev_rows,
     * or dev_rows itself on a host-memory backend (the CPU: one copy, one
     * planner run) */
    kve_state_row *rows;
    kve_state_work *work;
    kve_state_job *jobs;
    uint32_t *host_call; /* [3 * max_seqs]: a call's rows, n_new (uploaded), the mirror's bases */
    /* [max_seqs] each: the scoring calls' due rows (kve_score's host rows)
     * and kve_state_score's rows seen, so no scoring call allocates */
    kve_score_row *score_rows;
    uint8_t *score_seen;
    void *host;          /* the one host allocation behind rows (at first), jobs, work, host_call */
    kve_pool_run *free_runs; /* [max_seqs + 1], by start */
    uint32_t n_runs;
    uint64_t digest_weight; /* KV heads one table stands for (SPEC §11) */
    /* The scorer's scratch (KVE_PART_SCORE of the state's memory, sized at
     * creation for score_group; NULL on host memory): score_raw_bytes of
     * rows and raw scores (kve_score_scratch_bytes), then the counters
     * (zeros between calls). score_group: desc.score_group, 0 resolved. */
    void *score_scratch;
    size_t score_raw_bytes;
    uint32_t score_group;
    kve_handle handle; /* live or destroyed; its place in ctx's ring (kve_handle.h) */
};

/* The host mirror of the rows, read back from backend memory once appends
 * are planned on the device (waits for the stream); every host path that
 * reads s->rows calls it first. */
kve_status kve_state_mirror(const kve_state *s);
/* The host mirror's rows sent to backend memory (stream-ordered), after a
 * host path changed them (admit, retire, rebuild, the pool's compaction). */
kve_status kve_state_push_rows(kve_state *s);
/* An append (or a draft) as the planner sees it: its rows and counts in
 * backend memory (the caller's, or the state's after an upload), its shape,
 * and whether the shape's untaken mapping entries are set to -1. */
typedef struct kve_state_call {
    const uint32_t *rows, *n_new;
    uint32_t n_rows, max_new;
    int pad;
} kve_state_call;
/* The plan of wave @p k of @p waves of call @p c over the state's backend
 * memory, with @p out's mapping and move lists (state_append.c). */
kve_state_plan kve_state_plan_of(const kve_state *s, const kve_state_call *c, uint32_t k,
                                 uint32_t waves, const kve_step_buffers *out);
/* A job of @p kind on row @p row (its place in the pool filled in). */
kve_state_job kve_state_job_make(const kve_state *s, uint32_t kind, uint32_t row, uint32_t first,
                                 uint32_t count, uint32_t pos, uint32_t token);

/* The batch of a wave's eviction over @p n_rows call rows (kve_state_evict.b). */
kve_batch kve_state_batch(const kve_state *s, uint32_t n_rows);
/* Copy s->jobs[0 .. n_jobs) to the backend's job buffer (stream-ordered). */
kve_status kve_state_upload(kve_state *s, uint32_t n_jobs);
/* Run uploaded jobs [first, first + n_jobs) through the backend in one
 * launch sized for @p work items, with the call's outputs (NULL: none). */
kve_status kve_state_launch(kve_state *s, uint32_t first, uint32_t n_jobs, uint64_t work,
                            const kve_step_buffers *out);
/* kve_state_launch of uploaded ROUND jobs (kve_state_update.rounds: a
 * block per table on a GPU). */
kve_status kve_state_launch_round(kve_state *s, uint32_t first, uint32_t n_jobs, uint64_t work,
                                  const kve_step_buffers *out);
/* kve_state_upload, then kve_state_launch of them all. */
kve_status kve_state_run(kve_state *s, uint32_t n_jobs, uint64_t work, const kve_step_buffers *out);
/* Capacity of @p prompt_len; KVE_ERR_RANGE when it exceeds max_slots. */
kve_status kve_state_check_prompt(const kve_state *s, uint32_t prompt_len, uint32_t *capacity);
/* Room for @p n output spans in ctx's list of kve_score's checks
 * (frontend/score.c): a state reserves its calls' largest at creation. */
kve_status kve_score_spans_reserve(kve_context *ctx, size_t n);
/* Give row @p row's pool slots back (state_pool.c). */
void kve_pool_release(kve_state *s, uint32_t row);
/* Take @p capacity pool slots for row @p row (state_pool.c). */
kve_status kve_pool_take(kve_state *s, uint32_t row, uint32_t prompt_len, uint32_t capacity);
/* KVE_OK when kve_pool_take of @p capacity slots for @p row would succeed
 * once the row's own slots (if it holds any) are given back; else its
 * error, with nothing changed. */
kve_status kve_pool_check(const kve_state *s, uint32_t row, uint32_t prompt_len, uint32_t capacity);
/* Free row @p row and give its pool slots back (state.c). */
void kve_state_close_row(kve_state *s, uint32_t row);
/* Reset row @p row's tables and bookkeeping to an admitted, empty sequence
 * (its pool slots given back first, then @p capacity taken; state.c). */
kve_status kve_state_open_row(kve_state *s, uint32_t row, uint64_t seq_id, uint32_t prompt_len,
                              uint32_t capacity);
/* Rounds a row holding @p n_valid of @p capacity slots runs for @p n_new
 * more tokens (state.c). */
uint32_t kve_state_rounds_for(const kve_state *s, uint32_t capacity, uint32_t n_valid,
                              uint32_t n_new);
/* KVE_SCORED states: the restrictions of kve_state_append (one round per
 * row, at most W tokens before it), the scores' pointer and strides, and on
 * host memory no NaN at a candidate; KVE_OK for other states. */
kve_status kve_state_check_scored(const kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                  const uint32_t *n_new, const kve_step_buffers *out);
/* KVE_SCORED states, kve_state_append_device: scores given, laid out for
 * any row of the state (scores_stride_table >= max_slots), since which rows
 * evict is known on the device only; a NaN at a candidate of a round the
 * planner runs is the planner's refusal (KVE_PLAN_NAN), on every backend. */
kve_status kve_state_check_scored_shape(const kve_state *s, uint32_t n_rows,
                                        const kve_step_buffers *out);
/* The mapping and move lists of @p out (NULL, or none: KVE_OK): moves and
 * n_moves together, max_rows >= n_rows, and every span @p s's tables give
 * within size_t bytes, else KVE_ERR_OVERFLOW (state_append.c). */
kve_status kve_state_check_move_lists(const kve_state *s, const kve_step_buffers *out,
                                      uint32_t n_rows);
/* kve_state_append after its checks. */
kve_status kve_state_append_rows(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                 const uint32_t *n_new, const kve_step_buffers *out);

#endif
