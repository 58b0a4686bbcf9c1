/*
 * state_jobs_cpu.c — the CPU's kernel of the state_update op (common/kve_jobs.h;
 * the op is backends/cpu.c's): it runs the jobs by the device's own
 * interpreter (common/state_body.h: kve_state_job_run, or its items one by
 * one, kve_state_item_run, where the CPU prefetches), so the CPU and the
 * GPUs place tokens by one implementation (evict over rows and state_plan
 * are the driver's, backends/cpu.c and backends/cpu_state.c). Arguments
 * arrive from the state's own plan;
 * threads across jobs (kve_cpu_parallel), each element written by exactly
 * one thread.
 */
#include "kve_cpu_kernels.h"
#include "kve_cpu_threads.h"
#include "kve_error.h"
#include "state_body.h"

/* Items ahead of the one running whose first lines are prefetched: a
 * ROUND's freed list (KVE_AHEAD_LIST items ahead, far enough for DRAM),
 * then the holes it names and the table's top (KVE_AHEAD_SLOTS ahead, the
 * list cached by then); the slot of a LINEAR of one token a table. The
 * pool of tables is far larger than the caches, and each item touches a
 * few lines of its own table: a decode step's rounds waited on DRAM line
 * by line. */
#define KVE_AHEAD_LIST 8u
#define KVE_AHEAD_SLOTS 4u

static void kve_state_prefetch(const kve_state_update *u, const kve_state_job *j, uint64_t e,
                               uint64_t items, int holes)
{
    if (e >= items)
        return;
    if (j->kind == KVE_JOB_LINEAR) { /* one token a table (longer runs stay in their table) */
        __builtin_prefetch(u->slot_pos + j->base + e * j->stride + j->first, 1);
        return;
    }
    if (j->kind != KVE_JOB_ROUND || j->first > j->stride || j->count > j->first)
        return;
    const int32_t *ev = u->freed + j->base + e * j->stride;
    int32_t *sp = u->slot_pos + j->base + e * j->stride;
    if (!holes) {
        for (uint32_t k = 0; k < j->count; k += 16)
            __builtin_prefetch(ev + k);
        return;
    }
    for (uint32_t k = 0; k < j->count; k++)
        if (ev[k] >= 0 && (uint32_t)ev[k] < j->first)
            __builtin_prefetch(sp + ev[k], 1);
    for (uint32_t k = j->first - j->count; k < j->first; k += 16)
        __builtin_prefetch(sp + k, 1);
}

/* Jobs [lo, hi), item by item (kve_state_job_run's order), prefetching. */
static int kve_state_jobs(void *arg, size_t lo, size_t hi, int thread)
{
    (void)thread;
    const kve_state_update *u = (const kve_state_update *)arg;
    int bad = 0;
    for (size_t i = lo; i < hi; i++) {
        const kve_state_job *j = &u->jobs[i];
        uint64_t items = kve_state_job_items(u, j);
        if (j->kind != KVE_JOB_ROUND && !(j->kind == KVE_JOB_LINEAR && j->count == 1)) {
            bad |= kve_state_job_run(u, j, 0, 1, NULL) != 0;
            continue;
        }
        for (uint64_t e = 0; e < KVE_AHEAD_LIST; e++)
            kve_state_prefetch(u, j, e, items, 0);
        for (uint64_t e = 0; e < items; e++) {
            kve_state_prefetch(u, j, e + KVE_AHEAD_LIST, items, 0);
            kve_state_prefetch(u, j, e + KVE_AHEAD_SLOTS, items, 1);
            bad |= kve_state_item_run(u, j, e);
        }
    }
    return bad;
}

kve_status kve_cpu_state_jobs(const kve_state_update *u, int threads)
{
    /* Decode steps bring one small job per sequence; threads only pay off
     * for big batches. A table that fails the body's checks cannot come
     * from the state's own jobs: it is an internal error. */
    int bad = kve_cpu_parallel(u->n_jobs >= 64 ? threads : 1, u->n_jobs, kve_state_jobs, (void *)u);
    return bad ? kve_error_set(KVE_ERR_INTERNAL, "state_update: a job's table does not fit")
               : KVE_OK;
}
