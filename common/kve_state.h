/*
 * kve_state.h — what the cache state (common/state.c) asks of a backend:
 * one operation running a list of small jobs on the state's tables, and the
 * cache write. Both are ops of kve_backend_ops; the CPU ones are in
 * kernels_cpu/cache_write_cpu.c.
 */
#ifndef KVE_STATE_H
#define KVE_STATE_H

#include "kvevict.h"

/* Job kinds. "Table t" runs over the row's tables, t = tl * table_heads + th;
 * a token's mapping entry is mapping[tl * map_layer_stride + token * table_heads + th]. */
typedef enum kve_state_job_kind {
    /* Tokens i < count, position pos + i, go to slot first + i of every table. */
    KVE_JOB_LINEAR = 0,
    /* Tokens i < count go to slot freed[t][first + i] of table t. */
    KVE_JOB_FREED = 1,
    /* After an eviction: slot_pos[t][freed[t][i]] = -1 for i < count. */
    KVE_JOB_CLEAR = 2,
    /* seqs[row] = seq (read by the eviction that follows). */
    KVE_JOB_SEQ = 3,
    /* Tokens i < count of the mapping whose slot no longer holds pos + i
     * (evicted within the same append) get -1. */
    KVE_JOB_VERIFY = 4,
    /* Every slot of every table of the row = -1. */
    KVE_JOB_RESET = 5
} kve_state_job_kind;

typedef struct kve_state_job {
    uint32_t kind;
    uint32_t row;
    uint32_t first; /* LINEAR: first slot; FREED: first index into the freed lists */
    uint32_t count; /* tokens (LINEAR, FREED, VERIFY) or freed slots (CLEAR) */
    uint32_t pos;   /* position of the first token */
    uint32_t token; /* mapping index of the first token */
    kve_seq seq;    /* SEQ */
} kve_state_job;

/* One call: jobs in host memory, everything else backend memory. The jobs of
 * one call are independent (no job reads or writes what another writes), so
 * a backend may run them in any order or all at once. LINEAR and FREED write
 * the mapping only when mapping != NULL. */
typedef struct kve_state_update {
    uint32_t table_layers, table_heads;
    int32_t *slot_pos;
    size_t row_stride, table_stride; /* elements: per row, per table (= max_slots) */
    const int32_t *freed;
    size_t freed_row_stride, freed_table_stride;
    kve_seq *seqs; /* [max_seqs] */
    int64_t *mapping;
    size_t map_layer_stride; /* elements between table layers: n_total * table_heads */
    uint32_t n_jobs;
    const kve_state_job *jobs;
} kve_state_update;

/* The CPU backend's implementations (kernels_cpu/cache_write_cpu.c). */
kve_status kve_cpu_state_update(kve_context *ctx, const kve_state_update *u);
kve_status kve_cpu_cache_write(kve_context *ctx, const kve_cache_write_desc *d);

/* kve_cache_write_desc with every 0 stride replaced by its dense value. */
void kve_cache_write_resolve(const kve_cache_write_desc *in, kve_cache_write_desc *out);

#endif
