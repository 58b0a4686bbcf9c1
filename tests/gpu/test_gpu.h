/* test_gpu.h — what test_gpu.c shares with test_gpu_engine.c: the two
 * contexts of the fixture and the case check. */
#ifndef KVE_TEST_GPU_H
#define KVE_TEST_GPU_H

#include <check.h>

#include "kve_cases.h"
#include "kve_suite.h"

extern kve_context *kve_gpu, *kve_cpu; /* the backend under test; the scalar CPU */

/* $name as a count, or @p dflt when unset. */
unsigned kve_env_count(const char *name, unsigned dflt);

/* One case on the CPU and on the device: the same status and outputs. */
void kve_check_case(const kve_case *c, int use_workspace);

/* The cache state and cache write tests (test_gpu_engine.c): this file's
 * part of the suite's list, copied to @p out (at most @p room entries);
 * returns how many it lists. */
size_t kve_engine_tests(kve_suite_test *out, size_t room);

#endif
