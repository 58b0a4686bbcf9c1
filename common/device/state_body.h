/*
 * state_body.h — the backend op state_update (common/kve_state.h) on the
 * device, written once for CUDA, HIP and the host emulator (kve_device.h);
 * the CPU backend and the host rebuild run the same per-table functions.
 *
 * The jobs of one call are independent and each writes its own elements,
 * so the body flattens them: job j owns items [end[j-1], end[j]) (one per
 * table and token, table and slot, or table), and every thread of the grid
 * takes items in turn (grid-stride). Each item writes slots, mapping
 * entries and move lists that no other item touches, so the result does not
 * depend on the launch or on the order threads run in. A round (ROUND) and
 * a call's final mapping (FINAL) are one item per table, run in order by
 * one thread: they touch at most C + count elements of that table.
 *
 * The jobs travel in the launch's parameters (the host reuses its job array
 * as soon as the call returns, and staging them through memory would need a
 * copy the host waits for): at most KVE_STATE_JOBS_PER_LAUNCH per launch,
 * the glue launching as many times as a call needs, in stream order.
 *
 * Slots read from device memory (freed lists) and the job's sizes are
 * bounds-checked: a table they do not fit is left alone and raises
 * KVE_DEV_ERR_STATE_SLOT.
 */
#ifndef KVE_STATE_BODY_H
#define KVE_STATE_BODY_H

#include "kve_device.h"
#include "kve_state.h"

/* Jobs per launch: the arguments stay within 4 KiB, every vendor's limit
 * for kernel parameters. */
#define KVE_STATE_JOBS_PER_LAUNCH 56u

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
    case KVE_JOB_RESET: return tables * j->stride;
    case KVE_JOB_LINEAR: return tables * j->count;
    case KVE_JOB_FINAL: return u->mapping ? tables : 0;
    case KVE_JOB_MOVES_CLEAR: return u->moves ? tables : 0;
    default: return tables; /* ROUND */
    }
}

/* Compose one step of an old token into a move list (pairs src, dst, in
 * cache slots as they were before the call): the token at @p a moves to
 * @p b, or is evicted when b = -1. Returns 1 when the list is full. */
KVE_FN int kve_moves_compose(int32_t *mv, uint32_t *n, uint32_t cap, int32_t a, int32_t b)
{
    for (uint32_t k = 0; k < *n; k++) {
        if (mv[2 * k + 1] != a)
            continue;
        if (b >= 0) {
            mv[2 * k + 1] = b; /* moved before in this call: only where it ends changes */
        } else {
            --*n;
            mv[2 * k] = mv[2 * *n];
            mv[2 * k + 1] = mv[2 * *n + 1];
        }
        return 0;
    }
    if (b < 0)
        return 0; /* evicted where it was written: nothing to move */
    if (*n >= cap)
        return 1;
    mv[2 * *n] = a;
    mv[2 * *n + 1] = b;
    ++*n;
    return 0;
}

/*
 * One round's placement of one full table (docs/SPEC.md "Placement"):
 * sp[0 .. C) all valid, the tokens at positions >= pos0 (the current call's)
 * forming the top block in position order; ev[0 .. r) the evicted slots,
 * ascending. Afterwards slots 0 .. C - r - 1 are valid: the old survivors
 * below (those above fill the holes, lowest to lowest), then the call's
 * survivors in position order; slots C - r .. C - 1 are -1. When @p mv is
 * not NULL every old token that moves is composed into the list. Returns 0;
 * 1 when ev is not ascending within 0 .. C - 1 or the list overflows (the
 * table may then be partly placed).
 */
KVE_FN int kve_round_table(int32_t *sp, const int32_t *ev, uint32_t C, uint32_t r, int32_t pos0,
                           int32_t *mv, uint32_t *n_mv, uint32_t cap)
{
    for (uint32_t i = 0; i < r; i++)
        if (ev[i] < 0 || (uint32_t)ev[i] >= C || (i && ev[i] <= ev[i - 1]))
            return 1;
    uint32_t M = 0, e_old = 0, holes = 0;
    while (M < C && sp[C - 1 - M] >= pos0)
        M++;
    while (e_old < r && (uint32_t)ev[e_old] < C - M)
        e_old++;
    uint32_t bound = C - M - e_old; /* old survivors end here; the call's follow */
    while (holes < e_old && (uint32_t)ev[holes] < bound)
        holes++;
    int bad = 0;
    for (uint32_t i = 0; mv && i < e_old; i++)
        bad |= kve_moves_compose(mv, n_mv, cap, ev[i], -1);
    uint32_t j = holes, h = 0;
    for (uint32_t s = bound; s < C - M; s++) {
        if (j < e_old && (uint32_t)ev[j] == s) {
            j++;
            continue;
        }
        if (h >= holes)
            return 1;
        int32_t d = ev[h++];
        sp[d] = sp[s];
        if (mv)
            bad |= kve_moves_compose(mv, n_mv, cap, (int32_t)s, d);
    }
    /* The call's survivors move down (destination <= source, ascending). */
    uint32_t i = 0;
    for (uint32_t s = C - M; s < C; s++) {
        if (j < r && (uint32_t)ev[j] == s) {
            j++;
            continue;
        }
        sp[bound + i++] = sp[s];
    }
    for (uint32_t s = C - r; s < C; s++)
        sp[s] = -1;
    return bad;
}

/* The call's final mapping in one table (FINAL): tokens i < count at
 * positions pos0 + i, held in the top block of sp[0 .. n_valid); map entry
 * of token i at map[i * stride]. */
KVE_FN void kve_final_table(const int32_t *sp, uint32_t n_valid, int32_t pos0, uint32_t count,
                            int64_t *map, size_t stride)
{
    for (uint32_t i = 0; i < count; i++)
        map[(size_t)i * stride] = -1;
    for (uint32_t s = n_valid; s-- > 0 && sp[s] >= pos0;) {
        uint32_t i = (uint32_t)(sp[s] - pos0);
        if (i < count)
            map[(size_t)i * stride] = s;
    }
}

/* The move list of (call row @p i, table @p t) and its count. */
KVE_FN int32_t *kve_move_list(const kve_state_update *u, uint32_t i, uint64_t t, uint32_t **count)
{
    size_t l = ((size_t)(t / u->table_heads) * u->move_rows + i) * u->table_heads +
               (size_t)(t % u->table_heads);
    *count = u->n_moves + l;
    return u->moves + l * u->max_moves * 2;
}

/* Item @p e of job @p j; returns 1 when its table had to be left alone. */
KVE_FN int kve_state_item_run(const kve_state_update *u, const kve_state_job *j, uint64_t e)
{
    if (j->kind == KVE_JOB_SEQ) {
        u->seqs[j->row] = j->seq;
        return 0;
    }
    uint64_t per = j->kind == KVE_JOB_RESET    ? j->stride
                   : j->kind == KVE_JOB_LINEAR ? j->count
                                               : 1;
    uint64_t t = e / per;
    uint32_t i = (uint32_t)(e % per);
    int32_t *sp = u->slot_pos + j->base + (size_t)t * j->stride;
    int64_t *map = 0;
    if (u->mapping && (j->kind == KVE_JOB_LINEAR || j->kind == KVE_JOB_FINAL))
        map = u->mapping + (size_t)(t / u->table_heads) * u->map_layer_stride +
              (size_t)(j->token + i) * u->table_heads + t % u->table_heads;
    int32_t *mv = 0;
    uint32_t *n_mv = 0;
    if (u->moves && (j->kind == KVE_JOB_ROUND || j->kind == KVE_JOB_MOVES_CLEAR))
        mv = kve_move_list(u, j->token, t, &n_mv);
    switch (j->kind) {
    case KVE_JOB_RESET:
        sp[i] = -1;
        if (e == 0 && u->run_digest)
            u->run_digest[j->row] = 0;
        return 0;
    case KVE_JOB_LINEAR:
        if ((uint64_t)j->first + i >= j->stride)
            return 1;
        sp[j->first + i] = (int32_t)(j->pos + i);
        if (map)
            *map = (int64_t)j->first + i;
        return 0;
    case KVE_JOB_MOVES_CLEAR: *n_mv = 0; return 0;
    case KVE_JOB_ROUND: {
        if (j->first > j->stride || j->count > j->first)
            return 1;
        const int32_t *ev = u->freed + j->base + (size_t)t * j->stride;
        return kve_round_table(sp, ev, j->first, j->count, (int32_t)j->pos, mv, n_mv,
                               u->max_moves);
    }
    case KVE_JOB_FINAL:
        if (j->first > j->stride)
            return 1;
        kve_final_table(sp, j->first, (int32_t)j->pos, j->count, map, u->table_heads);
        return 0;
    default: return 0;
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
        uint64_t e = w - (j ? a->end[j - 1] : 0);
        if (kve_state_item_run(&a->u, &a->job[j], e)) {
            uint64_t per = a->job[j].kind == KVE_JOB_LINEAR ? a->job[j].count : 1;
            kve_raise(a->errors, KVE_DEV_ERR_STATE_SLOT, a->job[j].row, (uint32_t)(e / per));
        }
    }
}

#endif /* KVE_STATE_BODY_H */
