/*
 * state_jobs_cpu.c — the CPU backend's cache-state ops (common/kve_backend.h):
 * state_update runs the jobs by the device's own interpreter
 * (common/device/state_body.h, kve_state_job_run), so the CPU and the GPUs
 * place tokens by one implementation; state_evict evicts the due rows.
 * Arguments arrive from the state's own plan; threads across jobs
 * (kve_cpu_parallel), each element written by exactly one thread.
 */
#include "device/state_body.h"
#include "kve_backend.h"
#include "kve_cpu_threads.h"
#include "kve_cpu_kernels.h"
#include "kve_error.h"

static int kve_state_jobs(void *arg, size_t lo, size_t hi, int thread)
{
    (void)thread;
    const kve_state_update *u = (const kve_state_update *)arg;
    int bad = 0;
    for (size_t i = lo; i < hi; i++)
        bad |= kve_state_job_run(u, &u->jobs[i], 0, 1, NULL) != 0;
    return bad;
}

kve_status kve_cpu_state_update(kve_context *ctx, const kve_state_update *u)
{
    /* Decode steps bring one small job per sequence; threads only pay off
     * for big batches. A table that fails the body's checks cannot come
     * from the state's own jobs: it is an internal error. */
    int threads = u->n_jobs >= 64 ? ctx->threads : 1;
    int bad = kve_cpu_parallel(threads, u->n_jobs, kve_state_jobs, (void *)u);
    return bad ? kve_error_set(KVE_ERR_INTERNAL, "state_update: a job's table does not fit")
               : KVE_OK;
}

/* The rows that are due, one after another, each a kve_evict of its tables
 * (threads across them inside); the row list is host memory here. */
kve_status kve_cpu_state_evict(kve_context *ctx, const kve_state_evict *e)
{
    const kve_backend_ops *cpu = kve_cpu_backend_ops();
    for (uint32_t i = 0; i < e->b.n_seqs; i++) {
        if (!e->rows[i].count)
            continue;
        kve_batch b;
        kve_evict_out o;
        kve_state_evict_row(e, i, &e->rows[i], &b, &o);
        KVE_TRY(cpu->evict(ctx, &b, &o, e->workspace, e->workspace_bytes));
    }
    return KVE_OK;
}
