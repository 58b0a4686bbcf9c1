/* kve_cpu_isa.h — the CPU backend's settings the front end reads: feature
 * detection and the ISA choice, the default thread count, and the size of a
 * state's scorer scratch. */
#ifndef KVE_CPU_ISA_H
#define KVE_CPU_ISA_H

#include "kvevict.h"

/* The best ISA this CPU and OS run (cpuid + xgetbv), detected once. */
kve_cpu_isa kve_cpu_isa_best(void);

/* AUTO -> $KVE_CPU_ISA (bad value: KVE_ERR_ENV) or the best; an explicit
 * ISA this CPU cannot run (or this build lacks) is KVE_ERR_UNAVAILABLE. */
kve_status kve_cpu_isa_resolve(kve_cpu_isa requested, kve_cpu_isa *out);

/* Whether this CPU copies a run whose destination lies a short way below
 * its source (KVE_NEAR_MOVE_BYTES at most, kve_cpu_kernels.h: in-place
 * compaction's per-head runs, whose destination lines were read moments
 * before) faster with plain stores than with streaming ones: AMD Zen 3
 * (family 19h, models 00h-0Fh and 20h-5Fh), where G1's per-head rows
 * compacted in place at 0.77-0.83x a memmove with plain stores for such
 * runs and 0.70-0.72x all streamed (docs/BENCHMARKS.md, "issue 15, twelfth
 * step"); not Zen 5, where streaming was faster, nor any other CPU (Zen 4
 * and Intel unmeasured).
 * Detected once; the copies' results are the same either way. */
int kve_cpu_near_moves_plain(void);

/* Tests only: 0 or 1 overrides kve_cpu_near_moves_plain's answer, -1
 * restores detection. Not for use while another thread compacts. */
void kve_cpu_near_moves_plain_force(int value);

/* OpenMP's default thread count (1 without OpenMP). */
int kve_cpu_default_threads(void);

/* The bytes of scratch in which the CPU's scorers run @p threads threads on
 * tables of up to @p nq query heads (any head_dim) and rows of up to
 * @p max_slots slots (backends/cpu.c; SIZE_MAX: past the address space):
 * what a cache state sizes at creation (kve_score_call.scratch). */
size_t kve_cpu_score_scratch_size(int threads, uint32_t nq, uint32_t max_slots);

#endif
