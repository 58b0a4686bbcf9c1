/*
 * test_api_marks_exp.c — the opt-in half of test_api_marks.c: the header
 * included first without KVE_EXPERIMENTAL, then again with it (zstd.h's
 * way with ZSTD_STATIC_LINKING_ONLY): the second include declares the
 * experimental functions, with the signatures taken here.
 */
#include <kvevict.h>
#ifdef KVEVICT_H_EXPERIMENTAL
#error "include/kvevict.h opened its experimental section without KVE_EXPERIMENTAL"
#endif
#define KVE_EXPERIMENTAL
#include <kvevict.h>

int kve_marks_experimental_declared(void);

int kve_marks_experimental_declared(void)
{
    kve_status (*draft)(kve_state *, uint32_t, const uint32_t *, const uint32_t *, uint32_t,
                        const kve_step_buffers *) = kve_state_draft;
    kve_status (*score)(kve_state *, uint32_t, const uint32_t *, const uint32_t *, uint32_t,
                        const kve_score_desc *, float *, size_t, size_t) = kve_state_score_device;
    return draft != NULL && score != NULL ? 0 : 1;
}
