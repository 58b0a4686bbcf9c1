/* kve_cpu_threads.h — how the CPU backend spreads work over its threads. */
#ifndef KVE_CPU_THREADS_H
#define KVE_CPU_THREADS_H

#include <stddef.h>

/* One thread's share of items [lo, hi) of a kve_cpu_parallel call, on
 * thread `thread` (0 .. threads-1, each with its own scratch); returns
 * nonzero to report a problem. */
typedef int (*kve_cpu_range_fn)(void *arg, size_t lo, size_t hi, int thread);

/* Items [0, n) split into contiguous ranges in ascending order, one a
 * thread (OpenMP's static schedule, so results cannot depend on the thread
 * count), on at most `threads` threads; the OR of the calls' results.
 * One thread, or one item, runs on the caller without entering OpenMP:
 * libgomp makes a futex system call for every parallel region, even of one
 * thread, and a decode step's call is that small. */
int kve_cpu_parallel(int threads, size_t n, kve_cpu_range_fn fn, void *arg);

#endif
