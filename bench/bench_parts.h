/* bench_parts.h — kvevict-bench-parts: where a G1 eviction round's time goes,
 * piece by piece of the SIMD kernel (kernels_cpu/evict_simd.h), per ISA. */
#ifndef KVE_BENCH_PARTS_H
#define KVE_BENCH_PARTS_H

#include <stdint.h>

/* One round's tables: heads rows of n_slots positions (bench_fill_tables). */
typedef struct {
    const int32_t *slots;
    uint32_t heads, n_slots, prompt, budget, window;
    double min_time; /* seconds per figure at least */
} parts_input;

/* Milliseconds per round (every head once), the fastest of the repeats. */
typedef struct {
    double floor;          /* head_keys over the candidates, dense (kvevict-bench's floor) */
    double scan, scan_dups; /* the hashing pass: range check only; with the duplicate marks */
    double boundary;       /* the exact boundary among one pass's survivors */
    double head, head_dups; /* evict_head (plan, pass, boundary, outputs): trusted; checked */
} parts_times;

/* Each ISA's pieces, compiled with that ISA's kernel file (bench_parts_isa.c). */
void bench_parts_avx2(const parts_input *in, parts_times *out);
void bench_parts_avx512(const parts_input *in, parts_times *out);

#endif
