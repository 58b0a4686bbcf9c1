/*
 * cpu_state.c — the CPU backend's state_plan op (backends/kve_backend.h):
 * the planner (common/state_body.h) on one thread, its refusal's status and
 * words those of kve_plan_refusal_status and _text (common/kve_jobs.h).
 * (state_update runs the job kernel, kernels_cpu/state_jobs_cpu.c;
 * evict over rows the driver's own, backends/cpu.c.)
 */
#include <stdio.h>

#include "kve_backend.h"
#include "kve_error.h"
#include "state_body.h"

/* The planner on one thread, over host memory: a refusal is returned at
 * once (wave 0, before anything changed). */
kve_status kve_cpu_state_plan(kve_context *ctx, const kve_state_plan *p)
{
    (void)ctx;
    uint32_t at = 0, why = kve_state_plan_serial(p, &at);
    if (p->wave != 0 || why == KVE_PLAN_OK)
        return KVE_OK;
    char where[64] = "";
    if (why == KVE_PLAN_NAN) { /* which table and slot (the rows' counts not advanced) */
        uint64_t e = kve_plan_nan_scan(p, at, 0, 1) - 1, cap = p->rows[p->call_rows[at]].capacity;
        (void)snprintf(where, sizeof where, ": table %llu, slot %llu",
                       (unsigned long long)(e / cap), (unsigned long long)(e % cap));
    }
    return kve_error_set(kve_plan_refusal_status(why), "%s: rows[%u] = %u (%s[%u] = %u) %s%s",
                         p->draft ? "kve_state_draft" : "kve_state_append_device", at,
                         p->call_rows[at], p->draft ? "n_draft" : "n_new", at, p->call_new[at],
                         kve_plan_refusal_text(why, p->draft ? 1 : 0), where);
}
