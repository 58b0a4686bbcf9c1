/*
 * round_body.h — a wave's rounds (state_update with rounds set,
 * common/kve_jobs.h) on the device: a round's placement done by a block of threads per table,
 * written once for CUDA, HIP and the host emulator (kve_thread.h). The rule
 * itself (the split of a round, where each survivor goes) is
 * common/placement_body.h's; this file holds only how a block shares it.
 *
 * kve_round_table walks a table with one thread: a chain of dependent loads
 * and stores about C + r long. Here the block shares it, calling the same
 * per-slot steps: the evicted slots go to shared memory; low (the start of
 * the call's block at the top) comes from a parallel search, the split
 * from binary searches; each thread takes slots above the bound
 * (kve_round_old_step) and, when the move list was empty before the
 * round, writes the step's pair as the list's k-th, as kve_round_table
 * appends it; the call's survivors move down (kve_round_call_step) in
 * chunks of a block, each chunk read before a barrier and written after it
 * (a destination is never above its source). The result is
 * kve_round_table's bit for bit: slots, pairs and their order, count,
 * return code.
 *
 * A list that already holds pairs (a call's later rounds compose into its
 * earlier ones) or more evicted slots than the shared buffer holds go to
 * kve_round_table, run by thread 0.
 */
#ifndef KVE_ROUND_BODY_H
#define KVE_ROUND_BODY_H

#include "placement_body.h"
#include "state_grid.h" /* kve_state_args, kve_move_list */

/* Evicted slots of a round the shared buffer holds (4 KiB); more: serial. */
#define KVE_ROUND_EV_MAX 1024u

typedef struct kve_round_smem {
    int32_t ev[KVE_ROUND_EV_MAX];
    uint32_t low;    /* 1 + the highest slot seen below pos0 (0: none yet) */
    uint32_t bad;    /* ev not ascending within the table; the serial return code */
    uint32_t serial; /* the table goes to kve_round_table */
} kve_round_smem;

/*
 * kve_round_table(sp, ev, C, r, pos0, mv, n_mv, cap), by every thread of the
 * block (each calls it with the same arguments; shared memory @p sm). Every
 * thread returns kve_round_table's return code. The caller synchronizes the
 * block before @p sm is used again.
 */
KVE_FN int kve_round_table_block(kve_tc *tc, kve_round_smem *sm, int32_t *sp, const int32_t *ev,
                                 uint32_t C, uint32_t r, int32_t pos0, int32_t *mv,
                                 uint32_t *n_mv, uint32_t cap)
{
    uint32_t t = tc->tid, nt = tc->nt;
    int big = r > KVE_ROUND_EV_MAX;
    if (t == 0) {
        sm->serial = big || (mv && *n_mv); /* *n_mv read here only: thread 0 may write it */
        sm->bad = 0;
        sm->low = 0;
    }
    for (uint32_t i = t; !big && i < r; i += nt)
        sm->ev[i] = ev[i];
    kve_sync(tc);
    if (sm->serial) {
        if (t == 0)
            sm->bad = (uint32_t)kve_round_table(sp, ev, C, r, pos0, mv, n_mv, cap);
        kve_sync(tc);
        return (int)sm->bad;
    }
    const int32_t *e = sm->ev;
    for (uint32_t i = t; i < r; i += nt)
        if (kve_round_ev_bad(e, i, C))
            sm->bad = 1; /* every writer writes 1 */
    /* low: 1 + the highest old slot, found a block at a time from the top
     * (a decode step's round finds it in the first). */
    uint32_t low = 0;
    for (uint32_t top = C;; top -= nt) {
        if (t < top && kve_round_slot_old(sp, top - 1 - t, pos0))
            kve_atomic_max_u32(&sm->low, top - t);
        kve_sync(tc);
        low = sm->low;
        int bad = (int)sm->bad;
        kve_sync(tc); /* every thread has read low before the next block's maxima */
        if (bad)
            return 1; /* nothing written, as kve_round_table */
        if (low || top <= nt)
            break;
    }
    kve_round_split p = kve_round_split_of(e, r, low, 0);
    uint32_t e_old = p.e_old, holes = p.holes;
    /* Old survivors: slots bound .. low not evicted, `holes` of them; the
     * k-th is the list's k-th pair (it was empty). */
    for (uint32_t w = t; w < e_old; w += nt) {
        uint32_t s = p.bound + w;
        uint32_t k = kve_round_old_step(sp, e, p, s, kve_slots_lower(e, holes, e_old, s));
        if (k != KVE_ROUND_EVICTED && mv && k < cap) {
            mv[2 * k] = (int32_t)s;
            mv[2 * k + 1] = e[k];
        }
    }
    if (mv && t == 0)
        *n_mv = holes < cap ? holes : cap;
    kve_sync(tc); /* the old survivors are read before the call's land there */
    /* The call's survivors, a chunk of the block's width at a time. */
    for (uint64_t b = low; b < C; b += nt) {
        uint64_t s = b + t;
        uint32_t dst = KVE_ROUND_EVICTED;
        int32_t v = 0;
        if (s < C) {
            dst = kve_round_call_step(e, r, (uint32_t)s, kve_slots_lower(e, e_old, r, (uint32_t)s));
            v = dst != KVE_ROUND_EVICTED ? sp[s] : 0;
        }
        kve_sync(tc); /* the chunk read before any of it is written */
        if (dst != KVE_ROUND_EVICTED)
            sp[dst] = v;
    }
    for (uint32_t i = t; i < r; i += nt)
        kve_round_free_step(sp, C, r, i);
    return mv && holes > cap;
}

/* The kernel: items (job, table) of the ROUND jobs of a->u, one block per
 * item, grid-stride; other kinds are not run. A table a job's sizes do not
 * fit, or whose freed list is not ascending within it, is left alone and
 * raises KVE_DEV_ERR_STATE_SLOT, as in kve_state_job_run. */
KVE_FN void kve_state_round_grid(kve_tc *tc, kve_round_smem *sm, const kve_state_args *a)
{
    const kve_state_update *u = &a->u;
    uint64_t tables = (uint64_t)u->table_layers * u->table_heads, items = tables * u->n_jobs;
    for (uint64_t w = tc->bid; w < items; w += tc->nb) {
        const kve_state_job *j = &u->jobs[w / tables];
        uint64_t t = w % tables;
        if (j->kind != KVE_JOB_ROUND || !j->count)
            continue; /* the whole block skips */
        int bad = j->first > j->stride || j->count > j->first;
        if (!bad) {
            size_t at = j->base + (size_t)t * j->stride;
            int32_t *mv = 0;
            uint32_t *n_mv = 0;
            if (u->moves)
                mv = kve_move_list(u, j->token, t, &n_mv);
            bad = kve_round_table_block(tc, sm, u->slot_pos + at, u->freed + at, j->first,
                                        j->count, (int32_t)j->pos, mv, n_mv, u->max_moves);
            kve_sync(tc); /* shared memory is reused by the next table */
        }
        if (bad && tc->tid == 0 && a->errors)
            kve_raise(a->errors, KVE_DEV_ERR_STATE_SLOT, j->row, (uint32_t)t);
    }
}

#endif /* KVE_ROUND_BODY_H */
