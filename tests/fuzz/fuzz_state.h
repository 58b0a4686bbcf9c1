/*
 * fuzz_state.h — what the sources of fuzz_state share (internal to the
 * harness): the model of docs/SPEC.md §5 (fuzz_state_model.c), the checks
 * of the library against it (fuzz_state_check.c), and the step buffers'
 * shape an append decodes; the program and its decoding are fuzz_state.c's.
 */
#ifndef KVE_FUZZ_STATE_H
#define KVE_FUZZ_STATE_H

#include "fuzz_common.h"

#define MAX_ROWS 4u
#define MAX_TABLES 6u
#define MAX_SLOTS 64u

/* One row of the model: its sequence, counts and slot tables. */
typedef struct {
    int active;
    uint64_t seq_id;
    uint32_t prompt, capacity, n_tokens, round, free_left;
    uint32_t call_pos0; /* first position of the last append (placement v1) */
    uint64_t digest;    /* the running digest (SPEC §11) */
    int one_by_one;     /* the history rebuild assumes without steps: linear fill, then
                         * one token per append once the tables are full */
    int32_t table[MAX_TABLES][MAX_SLOTS]; /* the model's slot tables */
} model_row;

/* The state's desc, its tables (tl layers x th heads) and every row. */
typedef struct {
    kve_state_desc desc;
    uint32_t tl, th, tables;
    model_row rows[MAX_ROWS];
} model;

/* The step buffers' shape beyond the mapping: move lists or not, their
 * rows and pairs (sometimes one pair short of what the call's rounds need),
 * and the mapping's tokens per layer (the call's, a few more, or one short). */
typedef struct {
    int32_t *moves;
    uint32_t *n_moves, max_rows, max_moves, max_tokens;
    uint32_t need;    /* pairs a list needs: r per round of the call's busiest row */
    int short_tokens; /* max_tokens one below the call's tokens */
    int null_out;     /* no buffers at all: out = NULL when there is no mapping either */
} step_shape;

/* fuzz_state_model.c: the schedule, a row's placement and rounds. */
uint32_t model_capacity(const model *m, uint32_t prompt);
void model_append_one(const model *m, model_row *r);
uint32_t model_rounds_due(const model *m, const model_row *r, uint32_t n);
void model_open(const model *m, model_row *r, uint64_t seq_id, uint32_t prompt);
uint64_t model_pool_free(const model *m, uint32_t row);
/* The slot of @p pos in @p table's first @p n slots, or -1. */
int32_t find_pos(const int32_t *table, uint32_t n, int32_t pos);

/* fuzz_state_check.c: the library's rows, rounds_due and move lists. */
void check_all(const model *m, kve_state *st);
void check_rounds_due(const model *m, kve_state *st, uint32_t n_rows, const uint32_t *rows,
                      const uint32_t *n_new, int bad);
void check_moves(const model *m, kve_state *st, uint32_t n_rows, const uint32_t *rows,
                 const uint32_t *n_new, const int32_t (*before)[MAX_TABLES * MAX_SLOTS],
                 const step_shape *sh, const int64_t *map);

#endif
