/* kve_check_rows.h — kve_evict's content checks of one head's slot_pos row
 * (values >= -1; unless KVE_TRUSTED_SLOTS, no position twice), run by the
 * CPU backend's evict on each head just before its eviction, while the row
 * is in L1, when the ISA's kernel cannot check it in its own pass
 * (kve_head_job.check), and after a fused check that found a maybe, to
 * name the first problem or clear the head. The vector passes are per-ISA entries of kve_cpu_kernels
 * (row_facts, row_run, row_distinct); kernels_cpu/check_rows.c holds the
 * scalar ones and the driver, so every ISA reports the same first problem. */
#ifndef KVE_CHECK_ROWS_H
#define KVE_CHECK_ROWS_H

#include <stddef.h>
#include <stdint.h>

/* One pass's facts: the smallest value (below -1: a bad one), the smallest
 * (as unsigned: -1 never is) and largest valid position, the valid slots,
 * and the adjacent pairs breaking "strictly ascending positions, then only
 * empty slots" (0: sorted, hence distinct). */
typedef struct kve_row_facts {
    int32_t min, hi;
    uint32_t lo, valid, unordered;
} kve_row_facts;

/* A head's first problem: slot and value; duplicate 0: value < -1, 1: a
 * position an earlier slot (or, sparse, another slot) holds. */
typedef struct kve_slot_problem {
    uint32_t slot;
    int32_t value;
    int duplicate;
} kve_slot_problem;

/* Bytes of the presence map row_distinct may use (callers give this + 16). */
#define KVE_CHECK_MAP_BYTES 32768

struct kve_cpu_kernels;

/* 1 and *p when the row of @p n slots has a problem, else 0. @p map holds
 * KVE_CHECK_MAP_BYTES + 16 bytes, @p scratch n 64-bit words (the head's
 * eviction scratch, free until its eviction starts). The first problem:
 * the first value < -1; else, positions within 64 x n of each other, the
 * first slot holding a position an earlier slot holds; else the second
 * slot of the smallest repeated position. */
int kve_row_check(const struct kve_cpu_kernels *k, const int32_t *row, uint32_t n, int check_dups,
                  void *map, uint64_t *scratch, kve_slot_problem *p);

/* The scalar passes (the reference the ISA passes are tested against), and
 * the tails the ISA passes finish with. */
void kve_row_facts_scalar(const int32_t *row, uint32_t n, kve_row_facts *out);
void kve_row_facts_tail(const int32_t *row, uint32_t t, uint32_t n, kve_row_facts *s);
/* Slots at the start holding row[0], row[0] + 1, ...: a prompt in order. */
uint32_t kve_row_run_scalar(const int32_t *row, uint32_t n);
uint32_t kve_row_run_tail(const int32_t *row, uint32_t t, uint32_t n);
/* Slots a run from @p first can span before its next position would pass
 * INT32_MAX: vector passes build expected positions with 32-bit adds, which
 * must not wrap into negative values (a run crossing INT32_MAX would hide
 * them, and the duplicates after them, from every check). */
uint32_t kve_row_run_room(int32_t first, uint32_t n);
/* Whether the @p valid valid positions of row[0..n), all in [lo, lo + span),
 * are distinct: a byte map of plain stores, then its bytes counted. */
int kve_row_distinct_scalar(const int32_t *row, uint32_t n, int32_t lo, size_t span, uint32_t valid,
                            void *map);

#endif
