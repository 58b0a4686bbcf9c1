/* kve_test_state.h — a cache state on the CPU for the Check suites (tests/lib):
 * a one-thread context, a state description, a state with its layout. */
#ifndef KVE_TEST_STATE_H
#define KVE_TEST_STATE_H

#include "kve_test_util.h"

/* A CPU context on one thread: the suites' batches are tiny, and OpenMP
 * teams only slow them down on a loaded machine. Results never depend on
 * the thread count (tests/state/test_state.c's caller_memory compares two
 * counts). */
static inline kve_context *ks_context(void)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    KT_OK(kve_context_set_threads(ctx, 1));
    return ctx;
}

static inline kve_state_desc ks_desc(uint32_t flags, uint32_t max_seqs, uint32_t layers,
                                     uint32_t heads, uint32_t budget, uint32_t window,
                                     uint32_t interval, uint32_t max_slots)
{
    kve_state_desc d = {
        {0x5eed0001ULL, flags, budget, window, interval}, max_seqs, layers, heads, 3, 5, max_slots,
        0, 0, 0};
    return d;
}

/* A state on @p ctx, with its layout in @p lay. */
static inline kve_state *ks_create(kve_context *ctx, const kve_state_desc *d, kve_state_layout *lay)
{
    kve_state *st = NULL;
    KT_OK(kve_state_create(ctx, d, NULL, 0, &st));
    KT_OK(kve_state_get_layout(st, lay));
    return st;
}

#endif
