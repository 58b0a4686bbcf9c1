/* bench_util.h — what kvevict-bench and kvevict-bench-arms share: the
 * clock, the sample order, the splitmix64 generator of their inputs, the
 * slot tables, the exit on a library error, the CPU's name for the headers,
 * the plain read that is a scorer's memory floor. */
#ifndef KVE_BENCH_UTIL_H
#define KVE_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "kvevict.h"

/* Seconds on the monotonic clock. */
double bench_now(void);
/* Ascending doubles, for qsort. */
int bench_cmp_double(const void *a, const void *b);
/* One splitmix64 step. */
uint64_t bench_splitmix64(uint64_t *s);
/* Full heads in steady state under slot reuse: row i of @p slots (n_slots
 * each) holds the prompt in slots 0..prompt-1 and the generated positions
 * prompt..n_slots-1 shuffled over the other slots, drawn from @p rng. */
void bench_fill_tables(int32_t *slots, size_t heads, uint32_t n_slots, uint32_t prompt,
                       uint64_t *rng);
/* Prints "@p prog: @p what: status: message" and exits with 2. */
void bench_fail(const char *prog, const char *what, kve_status st);
/* The "model name" of /proc/cpuinfo ("unknown CPU" without one). */
void bench_cpu_model(char *out, size_t size);
/* One thread's plain read of @p bytes at @p p, the memory floor of a pass
 * over them: the sum of its bytes as 64-byte vectors (AVX-512; 16-byte
 * SSE2 vectors where the CPU has no AVX-512), four sums side by side. */
uint64_t bench_read(const void *p, size_t bytes);
/* The bytes a load of bench_read takes on this CPU (64, 16; 8 off x86-64). */
int bench_read_width(void);

#endif
