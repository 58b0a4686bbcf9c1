/*
 * state_grid.h — the grids of the cache state's backend ops on the device
 * (CUDA, HIP, the host emulator): how the jobs of common/state_body.h, a
 * wave's eviction and the planner are spread over blocks and threads. The
 * rules they run (the job interpreter, the planner's rows, a round's
 * placement) are common/'s, which the CPU runs too.
 *
 * kve_state_grid: the jobs of one call are independent and each writes its
 * own elements: a job's items go to a group of blocks, the launch's blocks
 * shared evenly among the jobs (a block takes several jobs in turn when
 * there are more jobs than blocks), and the group's threads take the items
 * in turn (common/state_body.h). kve_state_evict_grid runs kve_evict_head
 * over a wave's row list; kve_state_plan_block is the serial planner's
 * result on one block.
 */
#ifndef KVE_STATE_GRID_H
#define KVE_STATE_GRID_H

#include "evict_body.h"
#include "kve_thread.h"
#include "state_body.h"

typedef struct kve_state_args {
    kve_state_update u; /* u.n_jobs >= 1, u.jobs in backend memory */
    uint64_t *errors;   /* [KVE_DEV_ERR_KINDS] */
} kve_state_args;

/* The kernel: the launch's blocks shared among the jobs (see above). */
KVE_FN void kve_state_grid(kve_tc *tc, const kve_state_args *a)
{
    uint32_t n = a->u.n_jobs, per = tc->nb >= n ? tc->nb / n : 1, groups = tc->nb / per;
    if (tc->bid >= groups * per)
        return;
    uint64_t step = (uint64_t)per * tc->nt, first = (uint64_t)(tc->bid % per) * tc->nt + tc->tid;
    for (uint32_t j = tc->bid / per; j < n; j += groups)
        kve_state_job_run(&a->u, &a->u.jobs[j], first, step, a->errors);
}

/* Arguments of the wave's eviction kernel: scratch as kve_evict_args's,
 * sized for e.b.n_slots. */
typedef struct kve_state_evict_args {
    kve_state_evict e;
    unsigned char *scratch;
    size_t scratch_stride;
    uint64_t *errors; /* [KVE_DEV_ERR_KINDS] */
} kve_state_evict_args;

/* The wave's eviction kernel: head h is table h % tables of call row h /
 * tables, grid-stride over blocks; a row that is not due costs its blocks
 * one read. @p dyn_smem as kve_evict_grid's. */
KVE_FN void kve_state_evict_grid(kve_tc *tc, kve_evict_smem *sm, const kve_state_evict_args *sa,
                                 unsigned char *dyn_smem)
{
    const kve_state_evict *e = &sa->e;
    unsigned char *scratch =
        sa->scratch ? sa->scratch + (size_t)tc->bid * sa->scratch_stride : dyn_smem;
    uint64_t tables = (uint64_t)e->b.n_layers * e->b.n_heads, heads = tables * e->b.n_seqs;
    for (uint64_t h = tc->bid; h < heads; h += tc->nb) {
        uint32_t i = (uint32_t)(h / tables);
        const kve_state_job *j = &e->rows[i];
        if (!j->count)
            continue; /* the whole block skips: h is the block's */
        kve_evict_args a;
        kve_state_evict_row(e, i, j, &a.b, &a.o);
        a.heads = tables;
        a.scratch = NULL; /* scratch is passed on its own */
        a.scratch_stride = 0;
        a.errors = sa->errors;
        kve_evict_head(tc, sm, &a, h % tables, scratch);
        kve_sync(tc); /* shared memory is reused by the next head */
    }
}

/* The planner's shared memory: the scan's warp sums. */
typedef struct kve_plan_smem {
    uint64_t wsum[KVE_MAX_WARPS];
} kve_plan_smem;

/* The planner on one block (the devices): the serial planner's result,
 * its per-row steps (common/state_body.h) taken by the block's threads in
 * turn, a block scan for the rows' bases and a barrier between steps; the
 * refusal is raised in @p errors as KVE_DEV_ERR_STATE_CALL (the lowest call
 * row's). */
KVE_FN void kve_state_plan_block(kve_tc *tc, kve_plan_smem *sm, const kve_state_plan *p,
                                 uint64_t *errors)
{
    if (p->wave == 0) {
        if (tc->tid == 0)
            *p->refused = KVE_PLAN_OK;
        kve_sync(tc);
        uint64_t carry = 0;
        for (uint32_t c = 0; c < p->n_rows; c += tc->nt) {
            uint32_t i = c + tc->tid, n = i < p->n_rows ? p->call_new[i] : 0;
            uint64_t total, base = carry + kve_block_exscan(tc, sm->wsum, n, &total);
            carry += total;
            if (i >= p->n_rows)
                continue;
            uint32_t *mark, why = kve_plan_first(p, i, base, &mark);
            if (mark)
                kve_atomic_add_u32(mark, 1);
            if (why) {
                kve_raise(errors, KVE_DEV_ERR_STATE_CALL, i, why);
                kve_atomic_max_u32(p->refused, why);
            }
        }
        if (tc->tid == 0)
            p->call_base[p->n_rows] = kve_plan_base_of(carry);
        kve_sync(tc); /* every mark counted, the call's tokens known */
        for (uint32_t i = 0; p->scores && i < p->n_rows; i++) { /* a due row's NaN, block-wide */
            if (!kve_plan_nan(p, i, tc->tid, tc->nt))
                continue;
            kve_raise(errors, KVE_DEV_ERR_STATE_CALL, i, KVE_PLAN_NAN);
            kve_atomic_max_u32(p->refused, KVE_PLAN_NAN);
        }
        for (uint32_t i = tc->tid; i < p->n_rows; i += tc->nt)
            if (kve_plan_twice(p, i)) {
                kve_raise(errors, KVE_DEV_ERR_STATE_CALL, i, KVE_PLAN_TWICE);
                kve_atomic_max_u32(p->refused, KVE_PLAN_TWICE);
            }
        kve_sync(tc); /* every mark read, the refusal known */
        int refused = *p->refused != KVE_PLAN_OK;
        for (uint32_t i = tc->tid; i < p->n_rows; i += tc->nt)
            kve_plan_settle(p, i, refused);
        kve_sync(tc); /* work written before the rows plan */
    }
    int refused = *p->refused != KVE_PLAN_OK;
    for (uint32_t i = tc->tid; i < p->n_rows; i += tc->nt)
        kve_plan_row(p, i, refused);
}

/* The planner kernel's arguments: one block (KVE_STATE_PLAN_THREADS). */
typedef struct kve_state_plan_args {
    kve_state_plan p;
    uint64_t *errors; /* [KVE_DEV_ERR_KINDS] */
} kve_state_plan_args;

KVE_FN void kve_state_plan_run(kve_tc *tc, kve_plan_smem *sm, const kve_state_plan_args *a)
{
    if (tc->bid == 0)
        kve_state_plan_block(tc, sm, &a->p, a->errors);
}

#endif /* KVE_STATE_GRID_H */
