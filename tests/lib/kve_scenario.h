/*
 * kve_scenario.h — a random program of cache-state calls (admit, append in
 * any grouping, retire, rebuild) with the end-to-end cache write an engine
 * makes from each append's slot mapping, run in lockstep on two contexts:
 * a reference (the CPU) and a subject (the emulated device, or a GPU).
 * Shared by tests/emu and tests/gpu.
 */
#ifndef KVE_SCENARIO_H
#define KVE_SCENARIO_H

#include "kve_cases.h"

typedef enum kve_scenario_kind {
    KVE_SCENARIO_SMALL,     /* a few rows, tiny budgets: many rounds, every mode */
    KVE_SCENARIO_MANY_ROWS, /* 65..140 rows: calls with more jobs than one launch carries */
    KVE_SCENARIO_LARGE      /* 8 rows of 4 layers x 8 heads, budget 256 */
} kve_scenario_kind;

typedef struct kve_scenario {
    kve_state_desc desc;
    kve_scenario_kind kind;
    uint32_t steps;
    uint32_t max_prompt, max_new; /* prompt lengths; tokens of a multi-token append */
    uint32_t entry_bytes;         /* cache entry of the end-to-end write; 0: no write */
    uint64_t seed;                /* the program */
    char label[200];
} kve_scenario;

void kve_scenario_make(kve_scenario *s, uint64_t *rng, kve_scenario_kind kind);

/* Run @p s on both contexts: every status, mapping, table, row and cache
 * byte must agree, and the subject's kve_context_synchronize() must find
 * nothing. 0 when so; else 1 with the first difference in @p why. */
int kve_scenario_run(const kve_scenario *s, kve_context *ref, kve_context *sub, char *why,
                     size_t why_bytes);

/* @p n programs of @p kind from @p seed, each after @p before(i, arg) (may
 * be NULL; returns a note for a failure message). 0, or 1 with the failing
 * program and its difference in @p why. */
int kve_scenarios_run(uint64_t seed, unsigned n, kve_scenario_kind kind, kve_context *ref,
                      kve_context *sub, const char *(*before)(unsigned i, void *arg), void *arg,
                      char *why, size_t why_bytes);

#endif
