/*
 * state_jobs_cpu.c — the CPU backend's cache-state ops (common/kve_backend.h):
 * state_update runs the jobs by the device's own interpreter
 * (kernels_cuda/state_body.h: kve_state_job_run, or its items one by one,
 * kve_state_item_run, where the CPU prefetches), so the CPU and the GPUs
 * place tokens by one implementation; state_evict evicts the due rows.
 * Arguments arrive from the state's own plan; threads across jobs
 * (kve_cpu_parallel), each element written by exactly one thread.
 */
#include "kve_backend.h"
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

/* The planner on one thread, over host memory: a refusal is returned at
 * once (wave 0, before anything changed). */
kve_status kve_cpu_state_plan(kve_context *ctx, const kve_state_plan *p)
{
    (void)ctx;
    uint32_t at = 0, why = kve_state_plan_serial(p, &at);
    if (p->wave == 0 && why != KVE_PLAN_OK)
        return kve_error_set(why == KVE_PLAN_ROW_RANGE || why == KVE_PLAN_TOKENS ||
                                     why == KVE_PLAN_POSITION || why == KVE_PLAN_TOO_MANY
                                 ? KVE_ERR_RANGE
                                 : KVE_ERR_INVALID,
                             "%s: rows[%u] = %u (%s[%u] = %u) %s",
                             p->draft ? "kve_state_draft" : "kve_state_append_device", at,
                             p->call_rows[at], p->draft ? "n_draft" : "n_new", at,
                             p->call_new[at], kve_plan_refusal_text(why, p->draft ? 1 : 0));
    return KVE_OK;
}
