/*
 * state_append.c — kve_state_append: the host plans every wave of an
 * append (which rows evict, what each writes) from its bookkeeping, then
 * each wave runs on the backend as one upload of its jobs and launches
 * sized by the call's shape alone (docs/GPU.md "CUDA graphs").
 */
#include <string.h>

#include "kve_error.h"
#include "kve_state_impl.h"
#include "kve_util.h"

uint32_t kve_state_rounds_for(const kve_state *s, uint32_t capacity, uint32_t n_valid,
                              uint32_t n_new)
{
    uint32_t room = capacity - n_valid, r = s->d.schedule.interval;
    return n_new <= room ? 0 : (uint32_t)(((uint64_t)n_new - room + r - 1) / r);
}

kve_status kve_state_max_moves(const kve_state *s, uint32_t max_new, uint32_t *out_moves)
{
    KVE_RETURN_ERROR_IF(!s, KVE_ERR_NULL, "state is NULL");
    KVE_RETURN_ERROR_IF(!out_moves, KVE_ERR_NULL, "out_moves is NULL");
    uint64_t r = s->d.schedule.interval, m = r * ((max_new + r - 1) / r);
    *out_moves = m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
    return KVE_OK;
}

/* Rows of kve_state_append: distinct, active, positions within int32; the
 * buffers large enough for the call. */
static kve_status kve_append_check(const kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                   const uint32_t *n_new, const kve_step_buffers *out)
{
    KVE_RETURN_ERROR_IF(!s, KVE_ERR_NULL, "state is NULL");
    KVE_RETURN_ERROR_IF(n_rows > s->d.max_seqs, KVE_ERR_RANGE,
                        "n_rows = %u: more than max_seqs = %u", n_rows, s->d.max_seqs);
    KVE_RETURN_ERROR_IF(n_rows && !rows, KVE_ERR_NULL, "rows is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(n_rows && !n_new, KVE_ERR_NULL, "n_new is NULL (n_rows = %u)", n_rows);
    int with_moves = out && (out->moves || out->n_moves);
    if (with_moves) {
        KVE_RETURN_ERROR_IF(!out->moves || !out->n_moves, KVE_ERR_NULL,
                            "out->%s is NULL: moves and n_moves go together",
                            out->moves ? "n_moves" : "moves");
        KVE_RETURN_ERROR_IF(out->max_rows < n_rows, KVE_ERR_RANGE,
                            "out->max_rows = %u: the call has n_rows = %u", out->max_rows, n_rows);
    }
    uint64_t total = 0;
    uint32_t rounds = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        KVE_RETURN_ERROR_IF(rows[i] >= s->d.max_seqs, KVE_ERR_RANGE, "rows[%u] = %u: must be 0..%u",
                            i, rows[i], s->d.max_seqs - 1);
        const kve_state_row *r = &s->rows[rows[i]];
        KVE_RETURN_ERROR_IF(!r->active, KVE_ERR_INVALID, "rows[%u] = %u: holds no sequence", i,
                            rows[i]);
        KVE_RETURN_ERROR_IF(s->work[rows[i]].mark, KVE_ERR_INVALID,
                            "rows[%u] = %u: appears twice in this call", i, rows[i]);
        s->work[rows[i]].mark = 1;
        KVE_RETURN_ERROR_IF((uint64_t)r->n_tokens + n_new[i] > KVE_I32_MAX, KVE_ERR_RANGE,
                            "n_new[%u] = %u: row %u would pass position 2^31-1 (it holds %u "
                            "tokens)",
                            i, n_new[i], rows[i], r->n_tokens);
        uint32_t k = kve_state_rounds_for(s, r->capacity, r->n_valid, n_new[i]);
        rounds = k > rounds ? k : rounds;
        total += n_new[i];
    }
    KVE_RETURN_ERROR_IF(total > KVE_I32_MAX, KVE_ERR_RANGE,
                        "n_new sums to %llu tokens: at most 2^31-1 per call",
                        (unsigned long long)total);
    KVE_RETURN_ERROR_IF(out && out->slot_mapping && out->max_tokens < total, KVE_ERR_RANGE,
                        "out->max_tokens = %u: the call appends %llu tokens", out->max_tokens,
                        (unsigned long long)total);
    uint64_t need = (uint64_t)rounds * s->d.schedule.interval;
    KVE_RETURN_ERROR_IF(with_moves && out->max_moves < need, KVE_ERR_RANGE,
                        "out->max_moves = %u: a row of this call runs %u rounds, up to r = %u "
                        "moves each (%llu)",
                        out->max_moves, rounds, s->d.schedule.interval, (unsigned long long)need);
    return KVE_OK;
}

/* Waves an append whose rows take at most @p max_new tokens runs: enough
 * for any row whatever its fill (a row with room takes it first, then
 * evicts once every r tokens), so the count depends on the call's shape. */
static uint32_t kve_state_waves(const kve_state *s, uint32_t max_new)
{
    uint64_t r = s->d.schedule.interval;
    return max_new ? 1 + (uint32_t)((max_new - 1 + r - 1) / r) : 0;
}

/* Plan call row @p i's part of a wave: its row list entry (due when it
 * still has tokens and is full), its round (a no-op when not due) and its
 * next run of tokens at its first free slot, in s->jobs (sets of n_rows). */
static void kve_state_plan_row(kve_state *s, uint32_t n_rows, uint32_t i, uint32_t row)
{
    kve_state_row *r = &s->rows[row];
    kve_state_work *w = &s->work[row];
    uint32_t r_slots = s->d.schedule.interval;
    w->evict = w->left && r->n_valid == r->capacity;
    kve_state_job *j = s->jobs + i; /* set k at j[k * n_rows] */
    j[KVE_SET_EVICT * n_rows] = kve_state_job_make(s, KVE_JOB_EVICT, row, 0, w->evict, 0, i);
    j[KVE_SET_EVICT * n_rows].seq = (kve_seq){r->seq_id, r->prompt, r->round};
    j[KVE_SET_ROUND * n_rows] = kve_state_job_make(s, KVE_JOB_ROUND, row, r->capacity, w->evict ? r_slots : 0,
                                   w->pos0, i);
    if (w->evict) {
        r->n_valid = r->capacity - r_slots;
        r->round++;
        w->rounds = 1;
    }
    uint32_t room = r->capacity - r->n_valid, count = w->left < room ? w->left : room;
    j[KVE_SET_RUN * n_rows] = kve_state_job_make(s, KVE_JOB_LINEAR, row, r->n_valid, count, r->n_tokens,
                                       w->base + w->done);
    r->n_valid += count;
    r->n_tokens += count;
    w->done += count;
    w->left -= count;
}

/* Host memory: every table of a row that evicted lost exactly r slots. */
static kve_status kve_state_check_evicted(const kve_state *s, uint32_t n_rows,
                                          const uint32_t *rows)
{
    for (uint32_t i = 0; s->ctx->ops->host_memory && i < n_rows; i++)
        for (size_t t = 0; s->work[rows[i]].evict && t < s->tables; t++)
            KVE_RETURN_ERROR_IF(s->n_evicted[i * s->tables + t] != s->d.schedule.interval,
                                KVE_ERR_INTERNAL,
                                "row %u, table %zu: a full head evicted %u slots, not r = %u",
                                rows[i], t, s->n_evicted[i * s->tables + t],
                                s->d.schedule.interval);
    return KVE_OK;
}

/* One wave on the device: its jobs uploaded in one copy, then the move
 * lists cleared (the call's first wave), the due rows evicted, the rounds
 * placed, the runs written, the final mappings (its last wave). Every
 * launch and its size follow from the call's shape. */
static kve_status kve_state_wave(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                 uint64_t tokens, int first, int last, const kve_step_buffers *out)
{
    int clear = first && out && out->moves, final = last && out && out->slot_mapping;
    uint64_t n = n_rows, per_row = n * s->tables;
    uint32_t sets = clear ? KVE_SET_MOVES_CLEAR + 1 : final ? KVE_SET_FINAL + 1 : KVE_SET_RUN + 1;
    KVE_TRY(kve_state_upload(s, (uint32_t)(sets * n)));
    if (clear)
        KVE_TRY(kve_state_launch(s, KVE_SET_MOVES_CLEAR * n_rows, n_rows, per_row, out));
    kve_state_evict e = {kve_state_batch(s, n_rows),
                         s->freed,
                         s->n_evicted,
                         s->n_kept,
                         s->run_digest,
                         s->digest_weight,
                         s->dev_jobs,
                         s->workspace,
                         s->workspace_bytes,
                         NULL,
                         0,
                         0};
    if ((s->d.schedule.flags & KVE_SCORED) && out) { /* checked: scores given */
        e.scores = out->scores;
        e.scores_stride_row = out->scores_stride_row;
        e.scores_stride_table = out->scores_stride_table;
    }
    KVE_TRY(s->ctx->ops->state_evict(s->ctx, &e));
    KVE_TRY(kve_state_check_evicted(s, n_rows, rows));
    KVE_TRY(kve_state_launch(s, KVE_SET_ROUND * n_rows, n_rows, per_row, out));
    KVE_TRY(kve_state_launch(s, KVE_SET_RUN * n_rows, n_rows, tokens * s->tables, out));
    if (final)
        KVE_TRY(kve_state_launch(s, KVE_SET_FINAL * n_rows, n_rows, per_row, out));
    return KVE_OK;
}

/* The waves of an append (a fixed number for the call's shape): each wave
 * evicts the rows that are full and places their round (moving kept
 * entries down), then writes every row's next run of tokens at its first
 * free slot. Rows that went through a round get their final mapping in the
 * last wave: a later round may have moved the call's tokens down. */
kve_status kve_state_append_rows(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                 const uint32_t *n_new, const kve_step_buffers *out)
{
    uint32_t base = 0, max_new = 0;
    for (uint32_t i = 0; i < n_rows; i++) {
        kve_state_work *w = &s->work[rows[i]];
        *w = (kve_state_work){n_new[i], 0, base, s->rows[rows[i]].n_tokens, i, 0, 0, 0};
        base += n_new[i];
        max_new = n_new[i] > max_new ? n_new[i] : max_new;
    }
    uint32_t waves = kve_state_waves(s, max_new);
    if (!waves && out && out->moves) { /* every list of the call starts empty */
        for (uint32_t i = 0; i < n_rows; i++)
            s->jobs[i] = kve_state_job_make(s, KVE_JOB_MOVES_CLEAR, rows[i], 0, 0, 0, i);
        return kve_state_run(s, n_rows, (uint64_t)n_rows * s->tables, out);
    }
    for (uint32_t k = 0; k < waves; k++) {
        for (uint32_t i = 0; i < n_rows; i++)
            kve_state_plan_row(s, n_rows, i, rows[i]);
        for (uint32_t i = 0; k + 1 == waves && i < n_rows; i++) {
            const kve_state_work *w = &s->work[rows[i]];
            KVE_RETURN_ERROR_IF(w->left, KVE_ERR_INTERNAL,
                                "row %u: %u tokens left after the %u waves of the call", rows[i],
                                w->left, waves);
            s->jobs[KVE_SET_FINAL * n_rows + i] =
                kve_state_job_make(s, KVE_JOB_FINAL, rows[i], s->rows[rows[i]].n_valid,
                                   w->rounds ? w->done : 0, w->pos0, w->base);
        }
        for (uint32_t i = 0; k == 0 && i < n_rows; i++)
            s->jobs[KVE_SET_MOVES_CLEAR * n_rows + i] =
                kve_state_job_make(s, KVE_JOB_MOVES_CLEAR, rows[i], 0, 0, 0, i);
        KVE_TRY(kve_state_wave(s, n_rows, rows, base, k == 0, k + 1 == waves, out));
    }
    return KVE_OK;
}

kve_status kve_state_append(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                            const uint32_t *n_new, const kve_step_buffers *out)
{
    kve_status st = kve_append_check(s, n_rows, rows, n_new, out);
    for (uint32_t i = 0; s && rows && i < n_rows && rows[i] < s->d.max_seqs; i++)
        s->work[rows[i]].mark = 0;
    KVE_TRY(st);
    KVE_TRY(kve_state_check_scored(s, n_rows, rows, n_new, out));
    return kve_state_append_rows(s, n_rows, rows, n_new, out);
}
