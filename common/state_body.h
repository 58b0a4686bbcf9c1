/*
 * state_body.h — the rules of the backend op state_update
 * (common/kve_jobs.h) every backend runs alike: the one job interpreter
 * (kve_state_job_run: the CPU backend's kernels_cpu/state_jobs_cpu.c, the
 * GPU's and the emulator's kve_state_grid of kernels_cuda/state_grid.h),
 * a wave's eviction row (kve_state_evict_row) and the planner
 * (kve_state_plan_serial; the devices' one-block form is state_grid.h's).
 * A round's placement is common/placement_body.h's.
 *
 * Each item of a job (one per table and token, table and slot, or table)
 * writes slots, mapping entries and move lists that no other item touches,
 * so the result does not depend on how items are spread or on the order
 * threads run in. A round (ROUND) and a call's final mapping (FINAL) are
 * one item per table, run in order by one thread: they touch at most
 * C + count elements of that table.
 *
 * The jobs are read from backend memory (the state uploads them, stream-
 * ordered): a launch's arguments are pointers and counts that depend on the
 * call's shape only.
 *
 * Slots read from device memory (freed lists) and the job's sizes are
 * bounds-checked: a table they do not fit is left alone and raises
 * KVE_DEV_ERR_STATE_SLOT.
 */
#ifndef KVE_STATE_BODY_H
#define KVE_STATE_BODY_H

#include "kve_device.h"
#include "kve_jobs.h"
#include "kve_key.h" /* kve_score_is_nan */
#include "placement_body.h" /* kve_round_table, kve_final_table */
#include "state_rows_body.h"

/* Items of one job: its elements over every table (SEQ: one; EVICT, and
 * ROUND and FINAL of count 0: none). */
KVE_HD_FN uint64_t kve_state_job_items(const kve_state_update *u, const kve_state_job *j)
{
    uint64_t tables = (uint64_t)u->table_layers * u->table_heads;
    switch (j->kind) {
    case KVE_JOB_SEQ: return 1;
    case KVE_JOB_RESET: return tables * j->stride;
    case KVE_JOB_LINEAR: return tables * j->count;
    case KVE_JOB_FINAL: return u->mapping && j->count ? tables : 0;
    case KVE_JOB_DRAFT: return u->mapping ? tables * j->count : 0;
    case KVE_JOB_MOVES_CLEAR: return u->moves ? tables : 0;
    case KVE_JOB_ROUND: return j->count ? tables : 0;
    default: return 0; /* EVICT: data of kve_state_evict */
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
    uint64_t per = j->kind == KVE_JOB_RESET                               ? j->stride
                   : j->kind == KVE_JOB_LINEAR || j->kind == KVE_JOB_DRAFT ? j->count
                                                                            : 1;
    uint64_t t = e / per;
    uint32_t i = (uint32_t)(e % per);
    int32_t *sp = u->slot_pos + j->base + (size_t)t * j->stride;
    int64_t *map = 0;
    if (u->mapping &&
        (j->kind == KVE_JOB_LINEAR || j->kind == KVE_JOB_FINAL || j->kind == KVE_JOB_DRAFT))
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
    case KVE_JOB_DRAFT: *map = (int64_t)j->first + i; return 0;
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

/* The one job interpreter (the device grid, state_grid.h, and the CPU backend's
 * state_update): items first, first + step, ... of job @p j. Returns how
 * many of them had to leave their table alone, each raised as
 * KVE_DEV_ERR_STATE_SLOT in @p errors when that is not NULL. */
KVE_FN uint64_t kve_state_job_run(const kve_state_update *u, const kve_state_job *j,
                                  uint64_t first, uint64_t step, uint64_t *errors)
{
    uint64_t items = kve_state_job_items(u, j), bad = 0;
    for (uint64_t e = first; e < items; e += step) {
        if (!kve_state_item_run(u, j, e))
            continue;
        bad++;
        if (errors) {
            uint64_t each = j->kind == KVE_JOB_LINEAR || j->kind == KVE_JOB_DRAFT ? j->count : 1;
            kve_raise(errors, KVE_DEV_ERR_STATE_SLOT, j->row, (uint32_t)(e / each));
        }
    }
    return bad;
}

/* kve_evict's batch and outputs for call row @p i of @p e, whose list
 * entry is @p j: one sequence, its tables as heads. */
KVE_HD_FN void kve_state_evict_row(const kve_state_evict *e, uint32_t i, const kve_state_job *j,
                                   kve_batch *b, kve_evict_out *o)
{
    size_t tables = (size_t)e->b.n_layers * e->b.n_heads;
    *b = e->b;
    b->n_seqs = 1;
    b->seqs = &j->seq;
    b->n_slots = j->stride;
    b->slot_pos = e->b.slot_pos + j->base;
    b->slot_pos_stride = j->stride;
    b->scores = e->scores ? e->scores + (size_t)i * e->scores_stride_row : NULL;
    b->scores_stride = e->scores_stride_table;
    kve_evict_out out = {e->freed + j->base, j->stride, e->n_evicted + i * tables,
                         e->n_kept + i * tables, NULL, NULL, 0, NULL, e->run_digest + j->row,
                         e->run_digest_weight};
    *o = out;
}

/* ---- the planner (kve_state_plan, kve_jobs.h) ------------------------------ */

/* A job of @p kind on state row @p row whose bookkeeping is @p r (NULL: a
 * no-op's, nowhere in the pool); the host's kve_state_job_make too. */
KVE_HD_FN kve_state_job kve_job_of(const kve_state_row *r, uint64_t tables, uint32_t kind,
                                   uint32_t row, uint32_t first, uint32_t count, uint32_t pos,
                                   uint32_t token)
{
    kve_state_job j = {r ? r->off * tables : 0, r ? r->capacity : 0, kind, row, first, count, pos,
                       token, 0, {0, 0, 0}};
    return j;
}

/* Call row @p i's refusal, without the rows-twice and token-count checks
 * (kve_plan_refusal; KVE_PLAN_OK for padding). */
KVE_HD_FN uint32_t kve_plan_check(const kve_state_plan *p, uint32_t i)
{
    uint32_t n = p->call_new[i], row = p->call_rows[i];
    if (!n)
        return KVE_PLAN_OK;
    if (row >= p->max_seqs)
        return KVE_PLAN_ROW_RANGE;
    const kve_state_row *r = &p->rows[row];
    if (!r->active)
        return KVE_PLAN_INACTIVE;
    if (n > p->max_new)
        return KVE_PLAN_TOO_MANY;
    if ((uint64_t)r->n_tokens + n > 0x7fffffffu)
        return KVE_PLAN_POSITION;
    if (p->scored && !p->draft && !kve_scored_fits(r, n, p->window, p->interval))
        return KVE_PLAN_SCORED;
    return KVE_PLAN_OK;
}

/* Call row @p i, which passed its checks: 1 when its round runs in the call
 * and its candidates' scores are checked (kve_state_plan.scores). */
KVE_HD_FN int kve_plan_nan_due(const kve_state_plan *p, uint32_t i)
{
    const kve_state_row *r = &p->rows[p->call_rows[i]];
    return p->scores && !p->draft && p->call_new[i] &&
           kve_rounds_for(r->capacity, r->n_valid, p->call_new[i], p->interval) == 1;
}

/* Elements @p first, first + @p step, ... of call row @p i's tables (table
 * by table, slot by slot), a due row: 1 + the first that is a candidate
 * of its round with a NaN score, else 0. A candidate is a generated position older than
 * the round's window, which is the row's newest W - before positions (the
 * call's @p before tokens ahead of the round are newer still); the tables
 * as they are before the call. */
KVE_HD_FN uint64_t kve_plan_nan_scan(const kve_state_plan *p, uint32_t i, uint64_t first,
                                     uint64_t step)
{
    const kve_state_row *r = &p->rows[p->call_rows[i]];
    uint64_t cap = r->capacity, n = p->tables * cap;
    uint64_t wc = (uint64_t)p->window - (r->capacity - r->n_valid); /* fits: before <= W */
    const int32_t *sp = p->slot_pos + r->off * p->tables;
    const float *sc = p->scores + (size_t)i * p->scores_stride_row;
    for (uint64_t e = first; e < n; e += step) {
        uint64_t t = e / cap, s = e % cap;
        int32_t pos = sp[e];
        if (pos >= 0 && (uint32_t)pos >= r->prompt && (uint64_t)pos + wc < r->n_tokens &&
            kve_score_is_nan(kve_score_bits(sc[(size_t)t * p->scores_stride_table + s])))
            return e + 1;
    }
    return 0;
}

/* Wave 0's start of call row @p i, which passed its checks: its work. */
KVE_HD_FN void kve_plan_start(const kve_state_plan *p, uint32_t i)
{
    uint32_t row = p->call_rows[i];
    kve_state_work w = {p->call_new[i], 0, p->call_base[i], p->rows[row].n_tokens, i, 0, 0, 0};
    p->work[row] = w;
}

/* The planner's wave 0 runs three steps per call row; kve_state_plan_serial
 * takes the rows in order on one thread, kve_state_plan_block
 * (kernels_cuda/state_grid.h) spreads them over a block's threads, with a
 * scan for the bases and barriers between the steps. Each loop owns only
 * its iteration and how it gathers the refusal. */

/* A call's token count as call_base holds it (saturated). */
KVE_HD_FN uint32_t kve_plan_base_of(uint64_t base)
{
    return base < 0xffffffffu ? (uint32_t)base : 0xffffffffu;
}

/* Step 1 of call row @p i, whose tokens start at @p base in the call: its
 * base, and its refusal without the rows-twice check. When it passes with
 * tokens, *@p mark is its row's mark, to count once (a block counts
 * atomically); else NULL (and when p->marks is NULL). */
KVE_HD_FN uint32_t kve_plan_first(const kve_state_plan *p, uint32_t i, uint64_t base,
                                  uint32_t **mark)
{
    uint32_t n = p->call_new[i], why = kve_plan_check(p, i);
    p->call_base[i] = kve_plan_base_of(base);
    if (!why && base + n > p->max_tokens)
        why = KVE_PLAN_TOKENS;
    *mark = !why && n && p->marks ? &p->marks[p->call_rows[i]] : NULL;
    return why;
}

/* Step 1b, the call's tokens known: whether call row @p i, valid and in the
 * call's tokens, runs a round with a NaN score at a candidate (KVE_PLAN_NAN),
 * its tables scanned by lanes @p lane, lane + @p lanes, ... (a block's
 * threads, or one). */
KVE_HD_FN int kve_plan_nan(const kve_state_plan *p, uint32_t i, uint32_t lane, uint32_t lanes)
{
    uint32_t n = p->call_new[i];
    return p->scores && n && !kve_plan_check(p, i) &&
           (uint64_t)p->call_base[i] + n <= p->max_tokens && kve_plan_nan_due(p, i) &&
           kve_plan_nan_scan(p, i, lane, lanes);
}

/* Step 2, every mark counted: whether call row @p i lists a row another
 * call row lists too (KVE_PLAN_TWICE). */
KVE_HD_FN int kve_plan_twice(const kve_state_plan *p, uint32_t i)
{
    return p->marks && p->call_new[i] && !kve_plan_check(p, i) && p->marks[p->call_rows[i]] > 1;
}

/* Step 3, every mark read and the call's refusal known (@p refused): call
 * row @p i's mark back to 0 (a row twice: both write 0) and, unless the
 * call is refused or a draft, its work started. */
KVE_HD_FN void kve_plan_settle(const kve_state_plan *p, uint32_t i, int refused)
{
    if (!p->call_new[i] || p->call_rows[i] >= p->max_seqs)
        return;
    if (p->marks)
        p->marks[p->call_rows[i]] = 0;
    if (!refused && !p->draft && !kve_plan_check(p, i))
        kve_plan_start(p, i);
}

/* Call row @p i's jobs of wave p->wave (kve_state_plan): its row list entry
 * (due when it still has tokens and is full), its round (a no-op when not
 * due), its next run of tokens at its first free slot; the move lists'
 * clearing in wave 0, the final mapping in the last wave. A refused call
 * (@p refused) or a padding row plans no-ops, and a refused call's tokens
 * map to -1 (as far as max_tokens holds them), planned in every wave: the
 * CPU, which returns the refusal in wave 0, writes them there. */
KVE_HD_FN void kve_plan_row(const kve_state_plan *p, uint32_t i, int refused)
{
    uint32_t nr = p->n_rows, n = p->call_new[i], row = p->call_rows[i];
    kve_state_job *j = p->jobs + i; /* set k at j[k * nr] */
    if (p->wave == 0 && p->clear)
        j[KVE_SET_MOVES_CLEAR * nr] = kve_job_of(NULL, 0, KVE_JOB_MOVES_CLEAR, 0, 0, 0, 0, i);
    if (p->wave == 0 && p->final && p->pad) { /* call row i's share of the mapping no token takes */
        uint64_t shape = (uint64_t)nr * p->max_new, end = shape < p->max_tokens ? shape : p->max_tokens;
        uint64_t first = (uint64_t)p->call_base[nr] + (uint64_t)i * p->max_new;
        uint64_t last = first + p->max_new < end ? first + p->max_new : end;
        j[KVE_SET_PAD * nr] = kve_job_of(NULL, 0, KVE_JOB_FINAL, 0, 0,
                                         last > first ? (uint32_t)(last - first) : 0, 0,
                                         first < 0xffffffffu ? (uint32_t)first : 0);
    }
    /* waves = 0 (max_new 0, or on the CPU a call of padding): every row is
     * padding or refused, and plans its FINAL (a refusal's -1s) below */
    int last = p->wave + 1 >= p->waves;
    if (p->draft && n && !refused) { /* drafts: mapping entries only, nothing advances */
        const kve_state_row *r = &p->rows[row];
        j[KVE_SET_EVICT * nr] = kve_job_of(NULL, 0, KVE_JOB_EVICT, 0, 0, 0, 0, i);
        j[KVE_SET_ROUND * nr] = kve_job_of(NULL, 0, KVE_JOB_ROUND, 0, 0, 0, 0, i);
        j[KVE_SET_RUN * nr] = kve_job_of(NULL, 0, KVE_JOB_LINEAR, 0, 0, 0, 0, 0);
        j[KVE_SET_FINAL * nr] = kve_job_of(r, p->tables, KVE_JOB_DRAFT, row, r->capacity,
                                           p->final ? n : 0, r->n_tokens, p->call_base[i]);
        return;
    }
    if (!n || refused) {
        j[KVE_SET_EVICT * nr] = kve_job_of(NULL, 0, KVE_JOB_EVICT, 0, 0, 0, 0, i);
        j[KVE_SET_ROUND * nr] = kve_job_of(NULL, 0, KVE_JOB_ROUND, 0, 0, 0, 0, i);
        j[KVE_SET_RUN * nr] = kve_job_of(NULL, 0, KVE_JOB_LINEAR, 0, 0, 0, 0, 0);
        if ((last || refused) && p->final) { /* refused: in wave 0 too (the CPU stops there) */
            uint32_t base = p->call_base[i], room = base < p->max_tokens ? p->max_tokens - base : 0;
            uint32_t count = refused ? (n < room ? n : room) : 0;
            j[KVE_SET_FINAL * nr] = kve_job_of(NULL, 0, KVE_JOB_FINAL, 0, 0, count, 0, base);
        }
        return;
    }
    kve_state_row *r = &p->rows[row];
    kve_state_work *w = &p->work[row];
    uint32_t r_slots = p->interval;
    w->evict = w->left && r->n_valid == r->capacity;
    j[KVE_SET_EVICT * nr] = kve_job_of(r, p->tables, KVE_JOB_EVICT, row, 0, w->evict, 0, i);
    kve_seq seq = {r->seq_id, r->prompt, r->round};
    j[KVE_SET_EVICT * nr].seq = seq;
    j[KVE_SET_ROUND * nr] = kve_job_of(r, p->tables, KVE_JOB_ROUND, row, r->capacity,
                                       w->evict ? r_slots : 0, w->pos0, i);
    if (w->evict) {
        r->n_valid = r->capacity - r_slots;
        r->round++;
        w->rounds = 1;
    }
    uint32_t room = r->capacity - r->n_valid, count = w->left < room ? w->left : room;
    j[KVE_SET_RUN * nr] = kve_job_of(r, p->tables, KVE_JOB_LINEAR, row, r->n_valid, count,
                                     r->n_tokens, w->base + w->done);
    r->n_valid += count;
    r->n_tokens += count;
    w->done += count;
    w->left -= count;
    if (last && p->final) /* a row left with tokens cannot happen: waves cover max_new */
        j[KVE_SET_FINAL * nr] = kve_job_of(r, p->tables, KVE_JOB_FINAL, row, r->n_valid,
                                           w->rounds ? w->done : 0, w->pos0, w->base);
}

/* The planner on one thread (the CPU backend; the host's mirror of the
 * rows): returns the call's refusal, the lowest call row's, in *@p at. */
KVE_HD_FN uint32_t kve_state_plan_serial(const kve_state_plan *p, uint32_t *at)
{
    uint32_t refusal = KVE_PLAN_OK;
    if (p->wave == 0) {
        uint64_t base = 0;
        for (uint32_t i = 0; i < p->n_rows; i++) {
            uint32_t *mark, why = kve_plan_first(p, i, base, &mark);
            if (mark)
                ++*mark;
            if (!why && kve_plan_nan(p, i, 0, 1))
                why = KVE_PLAN_NAN;
            if (why && !refusal) {
                refusal = why;
                *at = i;
            }
            base += p->call_new[i];
        }
        p->call_base[p->n_rows] = kve_plan_base_of(base);
        for (uint32_t i = 0; i < p->n_rows && (!refusal || i < *at); i++)
            if (kve_plan_twice(p, i)) {
                refusal = KVE_PLAN_TWICE; /* the lowest call row of a row listed twice */
                *at = i;
                break;
            }
        for (uint32_t i = 0; i < p->n_rows; i++)
            kve_plan_settle(p, i, refusal != KVE_PLAN_OK);
        if (p->refused)
            *p->refused = refusal;
    } else if (p->refused) {
        refusal = *p->refused;
    }
    for (uint32_t i = 0; i < p->n_rows; i++)
        kve_plan_row(p, i, refusal != KVE_PLAN_OK);
    return refusal;
}

#endif /* KVE_STATE_BODY_H */
