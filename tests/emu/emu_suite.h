/*
 * emu_suite.h — what the emulator suites share: the block shapes they run
 * (threads per block, warp width 32 or 64), a threaded and a serial pool
 * of each, the scalar CPU reference, and case counts from the environment.
 */
#ifndef KVE_EMU_SUITE_H
#define KVE_EMU_SUITE_H

#include <check.h>

#include "emu_backend.h"
#include "emu_harness.h"
#include "kve_cases.h"
#include "kve_suite.h"
#include "kvevict.h"

#define KVE_N_SHAPES 6
extern const uint32_t kve_shapes[KVE_N_SHAPES][2];
extern kve_emu_pool *kve_pools[KVE_N_SHAPES];        /* threaded */
extern kve_emu_pool *kve_serial_pools[KVE_N_SHAPES]; /* serial, random orders */

/* Check fixtures: create and destroy every pool. */
void kve_pools_setup(void);
void kve_pools_teardown(void);

/* A random shape, weighted to the small blocks (each barrier costs every
 * thread a context switch on the host). */
size_t kve_pick_shape(uint64_t *rng);

/* The reference: a CPU context, scalar ISA, one thread. */
kve_context *kve_reference(void);

/* The fixture of the suites that drive the public API on an emulated
 * device context (emu_backend.h): every pool, the reference and the
 * emulated context. */
extern kve_context *kve_ref, *kve_emu;
void kve_emu_fixture_setup(void);
void kve_emu_fixture_teardown(void);

/* The device's outputs of a case (emu_kernels.h's order check compares
 * tracked memory only): track @p b's buffers, or stop tracking them. */
void kve_emu_track_case(const kve_case *c, const kve_case_bufs *b, int on);

/* Runs @p fn(@p arg) in a forked child, its stderr read into @p err (a
 * string); the child exits 0 when fn returns. Returns the child's wait
 * status, -1 when it could not run. For bodies that must abort the run. */
int kve_emu_in_child(void (*fn)(void *), void *arg, char *err, size_t err_bytes);

/* A planned step's launch log (kve_emu_log_start into @p first while
 * *@p n_first is 0, then into @p log): kernels only (no copy, upload or
 * synchronize), and from the second step on the first step's launches, in
 * order, with the same grids, sizes and block shapes. Sets *@p n_first at
 * the first step; @p what names the step in messages. */
void kve_emu_log_same_step(kve_emu_launch_rec *first, uint32_t *n_first,
                           const kve_emu_launch_rec *log, uint32_t n_log, int step,
                           const char *what);

/* $name as a count, or @p dflt when unset. */
unsigned kve_env_count(const char *name, unsigned dflt);

#endif
