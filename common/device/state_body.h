/*
 * state_body.h — the backend op state_update (common/kve_state.h) on the
 * device, written once for CUDA, HIP and the host emulator (kve_device.h).
 *
 * The jobs of one call are independent and each writes its own elements,
 * so the body flattens them: job j owns items [end[j-1], end[j]) (one per
 * table and token, table and freed slot, or table and slot), and every
 * thread of the grid takes items in turn (grid-stride). Each item writes
 * at most one slot and one mapping entry that no other item touches, so
 * the result does not depend on the launch or on the order threads run in.
 *
 * The jobs travel in the launch's parameters (the host reuses its job array
 * as soon as the call returns, and staging them through memory would need a
 * copy the host waits for): at most KVE_STATE_JOBS_PER_LAUNCH per launch,
 * the glue launching as many times as a call needs, in stream order.
 *
 * Slots read from device memory (freed lists; the mapping, read back by
 * VERIFY) are bounds-checked: one outside its table is skipped and raises
 * KVE_DEV_ERR_STATE_SLOT.
 */
#ifndef KVE_STATE_BODY_H
#define KVE_STATE_BODY_H

#include "kve_device.h"
#include "kve_state.h"

/* Jobs per launch: the arguments stay within 4 KiB, every vendor's limit
 * for kernel parameters. */
#define KVE_STATE_JOBS_PER_LAUNCH 64u

typedef struct kve_state_args {
    kve_state_update u; /* u.n_jobs: jobs in this launch (>= 1); u.jobs unused */
    uint64_t *errors;   /* [KVE_DEV_ERR_KINDS] */
    uint64_t end[KVE_STATE_JOBS_PER_LAUNCH]; /* items of jobs 0..j, cumulated */
    kve_state_job job[KVE_STATE_JOBS_PER_LAUNCH];
} kve_state_args;

/* Items of one job: its elements over every table (SEQ: one). */
KVE_HD_FN uint64_t kve_state_job_items(const kve_state_update *u, const kve_state_job *j)
{
    uint64_t tables = (uint64_t)u->table_layers * u->table_heads;
    switch (j->kind) {
    case KVE_JOB_SEQ: return 1;
    case KVE_JOB_RESET: return tables * u->table_stride;
    case KVE_JOB_VERIFY: return u->mapping ? tables * j->count : 0;
    default: return tables * j->count;
    }
}

/* Write position @p pos to slot @p slot of table @p t (and the mapping),
 * or raise when the slot is outside the table. */
KVE_FN void kve_state_place(const kve_state_args *a, const kve_state_job *j, uint64_t t,
                            int32_t *sp, int64_t slot, int32_t pos, int64_t *map)
{
    if (slot < 0 || (uint64_t)slot >= a->u.table_stride) {
        kve_raise(a->errors, KVE_DEV_ERR_STATE_SLOT, j->row, (uint32_t)t);
        return;
    }
    sp[slot] = pos;
    if (map)
        *map = slot;
}

/* The freed list of table @p t of the job's row. */
KVE_FN const int32_t *kve_freed(const kve_state_update *u, const kve_state_job *j, uint64_t t)
{
    return u->freed + (size_t)j->row * u->freed_row_stride + (size_t)t * u->freed_table_stride;
}

/* Item @p e of job @p j (the CPU's kve_job_run, one element at a time). */
KVE_FN void kve_state_item(const kve_state_args *a, const kve_state_job *j, uint64_t e)
{
    const kve_state_update *u = &a->u;
    if (j->kind == KVE_JOB_SEQ) {
        u->seqs[j->row] = j->seq;
        return;
    }
    uint64_t per = j->kind == KVE_JOB_RESET ? u->table_stride : j->count;
    uint64_t t = e / per;
    uint32_t i = (uint32_t)(e % per);
    int32_t *sp = u->slot_pos + (size_t)j->row * u->row_stride + (size_t)t * u->table_stride;
    int64_t *map = 0;
    if (u->mapping)
        map = u->mapping + (size_t)(t / u->table_heads) * u->map_layer_stride +
              (size_t)(j->token + i) * u->table_heads + t % u->table_heads;
    int32_t pos = (int32_t)(j->pos + i);
    switch (j->kind) {
    case KVE_JOB_RESET: sp[i] = -1; break;
    case KVE_JOB_LINEAR: kve_state_place(a, j, t, sp, (int64_t)j->first + i, pos, map); break;
    case KVE_JOB_FREED:
        kve_state_place(a, j, t, sp, kve_freed(u, j, t)[j->first + i], pos, map);
        break;
    case KVE_JOB_CLEAR: kve_state_place(a, j, t, sp, kve_freed(u, j, t)[i], -1, 0); break;
    case KVE_JOB_VERIFY: {
        int64_t m = *map;
        if (m < 0)
            break;
        if ((uint64_t)m >= u->table_stride)
            kve_raise(a->errors, KVE_DEV_ERR_STATE_SLOT, j->row, (uint32_t)t);
        else if (sp[m] != pos)
            *map = -1; /* evicted again within the same append */
        break;
    }
    default: break;
    }
}

/* The kernel: items of every job of @p a, grid-stride. */
KVE_FN void kve_state_grid(kve_tc *tc, const kve_state_args *a)
{
    uint64_t total = a->end[a->u.n_jobs - 1], step = (uint64_t)tc->nb * tc->nt;
    uint32_t j = 0;
    for (uint64_t w = (uint64_t)tc->bid * tc->nt + tc->tid; w < total; w += step) {
        while (w >= a->end[j]) /* w only grows: j moves forward */
            j++;
        kve_state_item(a, &a->job[j], w - (j ? a->end[j - 1] : 0));
    }
}

#endif /* KVE_STATE_BODY_H */
