/*
 * kve_jobs.h — the plain data the front end hands a backend's operations
 * (the table, struct kve_context and the ABI are the drivers',
 * backends/kve_backend.h): what the cache state (frontend/state*.c) asks of
 * a backend — lists of small jobs on the state's tables (state_update; a
 * wave's rounds a block per table on a GPU), one call of the op evict (a
 * batch's heads, or the rows of an append that are due), a wave's plan
 * (state_plan) and its refusals, and one call of the scorers (score). The job interpreter and
 * the planner are common/state_body.h; kernels of every target read these
 * types and never see a context.
 *
 * Jobs live in backend memory (the state uploads them, stream-ordered), so
 * a launch's arguments are the same from one decode step to the next.
 */
#ifndef KVE_JOBS_H
#define KVE_JOBS_H

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
    KVE_JOB_EVICT = 6,
    /* A speculative step's drafts (kve_state_draft): tokens i < count
     * (mapping index token + i) map to slot first + i (first = the row's
     * capacity, its first draft slot) of every table; no table is touched. */
    KVE_JOB_DRAFT = 7
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

/* The bookkeeping of one row: in backend memory, where the planner
 * (kve_state_plan) advances it, and mirrored on the host. */
typedef struct kve_state_row {
    uint32_t active, prompt, capacity;
    uint32_t n_tokens;  /* positions 0 .. n_tokens-1 appended */
    uint32_t round;     /* evictions so far */
    uint32_t n_valid;   /* valid slots of every head: slots 0 .. n_valid-1 */
    uint64_t seq_id;
    uint64_t off;       /* its capacity's place in the pool (slots), while it holds one */
    uint32_t held;      /* 1 while it holds pool slots */
    uint32_t pad;
} kve_state_row;

/* Per-row scratch of one append (the planner's, by state row). */
typedef struct kve_state_work {
    uint32_t left, done; /* tokens still to place, placed */
    uint32_t base;       /* mapping index of the row's first token */
    uint32_t pos0;       /* position of the row's first token */
    uint32_t index;      /* the row's index in the call (its move lists) */
    uint8_t evict, rounds, mark; /* evicts in this wave; ran a round in this call */
} kve_state_work;

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
    /* 1: every job is a ROUND job (a wave's rounds): a GPU runs each table's
     * round with a block of threads (kernels_cuda/round_body.h) */
    uint32_t rounds;
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

/* One call of the op evict: the heads of *b into *o (kve_evict), or, with
 * rows, the due rows of an append's wave (kve_state_evict above: b =
 * &rows->b, o NULL, the workspace rows'), an eviction over rows in one
 * launch. The workspace holds evict_workspace_size(b) bytes. */
typedef struct kve_evict_call {
    const kve_batch *b;
    const kve_evict_out *o;
    void *workspace;
    size_t workspace_bytes;
    const kve_state_evict *rows;
} kve_evict_call;

/*
 * A cache state's call as its scorer reads it (kve_state_score_device): call
 * row i appends n_new[i] tokens to state row rows[i], both in backend memory
 * (the buffers the step's kve_state_append_device reads), and each row's
 * bookkeeping is the planner's, in backend memory, as before the call. Row
 * i is scored when its round runs in this call under a scored state's rules
 * (kve_state_score_row_of); every other call row (padding, a row the append
 * will refuse, a row with no round) is skipped. Its key cache row is i.
 */
typedef struct kve_score_list {
    const uint32_t *rows, *n_new; /* [n_rows]: NULL rows = the desc's host row list */
    const kve_state_row *state;   /* [max_seqs] */
    uint64_t tables;              /* tables per state row (every layer) */
    uint32_t max_seqs, window, interval, table_layer;
    size_t stride_row;            /* output elements between call rows */
} kve_score_list;

/*
 * One call of the op score (common/score_body.h's rule, every backend): d
 * validated, its key strides resolved, d.n_rows call rows, each
 *   given:  list.rows NULL, row i is d.rows[i] (host memory): kve_score, and
 *           kve_state_score's due rows, found on the host; or
 *   listed: list.rows not NULL (kve_state_score_device): row i is found where
 *           the list lies (kve_score_list_row), max_slots every row's length;
 *           only backends without host memory get these (on host memory the
 *           front end finds the rows and checks them as kve_score does).
 * scratch: NULL, the backend's own (grown as calls need; kve_score only),
 * or the state's, sized at creation and used in its stream's order, so the
 * call allocates nothing: in backend memory the given rows' copy, then the
 * raw scores (kve_score_scratch_bytes), with the counters at arrived (zeros
 * between calls); on the CPU (host memory) scratch_bytes of per-thread
 * buffers (kve_cpu_score_thread_bytes a thread, for the state's threads at
 * creation; a call runs on as many threads as fit).
 */
typedef struct kve_score_call {
    kve_score_desc d;
    kve_score_list list;
    uint32_t max_slots;
    void *scratch;
    uint32_t *arrived;
    size_t scratch_bytes;
} kve_score_call;


/* Sets of jobs a wave plans, n_rows jobs each, in this order: set k of
 * call row i is jobs[k * n_rows + i]. */
enum kve_state_job_set {
    KVE_SET_EVICT,       /* its row list entry (KVE_JOB_EVICT) */
    KVE_SET_ROUND,       /* its round's placement */
    KVE_SET_RUN,         /* its next run of tokens */
    KVE_SET_FINAL,       /* its final mapping (the call's last wave) */
    KVE_SET_MOVES_CLEAR, /* its move lists cleared (the call's first wave) */
    KVE_SET_PAD,         /* planned calls: its share of the mapping no token takes, -1 (first wave) */
    KVE_STATE_JOB_SETS
};

/* Why the planner refused a call (KVE_DEV_ERR_STATE_CALL's detail; head =
 * the call row). */
typedef enum kve_plan_refusal {
    KVE_PLAN_OK = 0,
    KVE_PLAN_ROW_RANGE,   /* rows[i] >= max_seqs */
    KVE_PLAN_INACTIVE,    /* rows[i] holds no sequence */
    KVE_PLAN_TWICE,       /* rows[i] appears twice among the rows with tokens */
    KVE_PLAN_TOO_MANY,    /* n_new[i] > max_new */
    KVE_PLAN_POSITION,    /* the row would pass position 2^31-1 */
    KVE_PLAN_TOKENS,      /* the call's tokens exceed out->max_tokens */
    KVE_PLAN_SCORED,      /* a scored state's row would run two rounds, or take more than W
                             tokens before its round */
    KVE_PLAN_NAN          /* a scored state's row whose round runs has a NaN score at a
                             candidate (kve_state_plan.scores set) */
} kve_plan_refusal;
/* A refusal's status, the same on every backend: KVE_ERR_RANGE for a
 * number past its bound, KVE_ERR_INVALID for a row in the wrong state. */
static inline kve_status kve_plan_refusal_status(uint32_t why)
{
    return why == KVE_PLAN_ROW_RANGE || why == KVE_PLAN_TOKENS || why == KVE_PLAN_POSITION ||
                   why == KVE_PLAN_TOO_MANY
               ? KVE_ERR_RANGE
               : KVE_ERR_INVALID;
}
/* A refusal in words, the one table the CPU's message and the device's
 * (KVE_DEV_ERR_STATE_CALL) read: what "rows[i] = r" does. @p draft: 1 for
 * kve_state_draft, 0 for an append, -1 when unknown (the device). */
static inline const char *kve_plan_refusal_text(uint32_t why, int draft)
{
    static const char *const text[] = {"accepted",
                                       "must be 0..max_seqs-1",
                                       "holds no sequence",
                                       "is listed twice among the call's rows with tokens",
                                       "has n_new[i] > max_new",
                                       "would pass position 2^31-1",
                                       "brings the call past out->max_tokens tokens",
                                       /* (parenthesized: one element, for clang's
                                        * -Wstring-concatenation) */
                                       ("would run two rounds, or take more than the window W "
                                        "of its tokens before its round (a KVE_SCORED state)"),
                                       ("has a NaN in out->scores at a candidate of its round, "
                                        "where a score must be a number (+-inf allowed)")};
    if (why == KVE_PLAN_TOO_MANY && draft)
        return draft > 0 ? "has n_draft[i] > max_draft"
                         : "has n_new[i] > max_new (n_draft[i] > max_draft)";
    return why < sizeof text / sizeof *text ? text[why] : "refused";
}

/*
 * One wave's plan of an append (docs/GPU.md "CUDA graphs"), all in backend
 * memory: call row i appends n_new[i] tokens to state row rows[i] (a row
 * with n_new[i] = 0 is padding: nothing is read of it, its jobs are
 * no-ops). With pad, the mapping entries the shape covers (n_rows x max_new,
 * up to max_tokens) that no token takes are set to -1 in wave 0 (KVE_SET_PAD:
 * call row i takes max_new of them), so a captured cache write of the
 * whole shape skips the padding. Wave 0 checks the call (a refusal turns every job of every wave
 * into a no-op and raises KVE_DEV_ERR_STATE_CALL) and fills each row's
 * work; every wave writes set k of call row i at jobs[k * n_rows + i]
 * (kve_state_job_set above) and advances rows[]. waves = 0
 * plans the move lists' clearing, the padding and set FINAL (a refused
 * call's -1s: every row is padding or refused then). The plan's launch and every launch
 * after it depend on n_rows, max_new and the tables alone, so a captured
 * step replays as an eager one runs.
 */
typedef struct kve_state_plan {
    kve_state_row *rows;   /* [max_seqs] */
    kve_state_work *work;  /* [max_seqs] */
    kve_state_job *jobs;   /* [KVE_STATE_JOB_SETS * n_rows] */
    const uint32_t *call_rows, *call_new; /* [n_rows] */
    uint32_t *call_base;   /* [n_rows + 1]: mapping index of call row i's first token, then the
                              call's tokens (wave 0 writes them) */
    uint32_t *marks;       /* [max_seqs], zero between calls; NULL: no check for rows twice */
    uint32_t *refused;     /* [1]: the call's kve_plan_refusal (wave 0 writes it) */
    uint64_t tables;       /* per row */
    uint32_t n_rows, max_new, max_seqs, interval;
    uint32_t wave, waves;
    uint32_t max_tokens;   /* mapping entries the call may use (UINT32_MAX: no mapping) */
    uint32_t clear;        /* 1: the move lists are cleared (MOVES_CLEAR jobs) */
    uint32_t final;        /* 1: the mapping is written (FINAL jobs) */
    uint32_t pad;          /* 1 (kve_state_append_device): the shape's untaken entries -1 (PAD) */
    /* 1: a kve_state_draft call (waves = 1, max_new = its max_draft): wave
     * 0's checks, then per call row the move lists' clearing and in set
     * FINAL a DRAFT job (a refused or padding row: FINAL's -1s); no row
     * starts work or advances, sets EVICT, ROUND and RUN are no-ops. */
    uint32_t draft;
    /* 1: a KVE_SCORED state's append: a row whose call would run two rounds,
     * or bring more than window tokens before its round, is refused
     * (KVE_PLAN_SCORED) */
    uint32_t scored, window;
    /* Set (kve_state_append_device of a KVE_SCORED state): wave 0 refuses
     * (KVE_PLAN_NAN) a call row whose round runs and has a NaN at one of its
     * candidates, read from the row's tables (slot_pos, the pool's) and
     * its scores at scores + i * scores_stride_row + table *
     * scores_stride_table. NULL: not checked (the eviction raises it). */
    const int32_t *slot_pos;
    const float *scores;
    size_t scores_stride_row, scores_stride_table;
} kve_state_plan;

#endif
