/*
 * state_append.c — kve_state_append and kve_state_append_device: every
 * wave of an append is planned on the backend (the planner of
 * common/state_body.h advancing the rows' bookkeeping in backend
 * memory), then runs as launches sized by the call's shape alone (docs/
 * GPU.md "CUDA graphs"). kve_state_append uploads the call's rows and
 * counts first and advances the host's mirror of the rows with the same
 * planner; kve_state_append_device reads them from the caller's backend
 * memory and uploads nothing, so a step can be captured and replayed.
 */
#include <string.h>

#include "kve_check.h"
#include "kve_error.h"
#include "kve_state_impl.h"
#include "kve_util.h"
#include "state_body.h"

kve_status kve_state_check_move_lists(const kve_state *s, const kve_step_buffers *out,
                                      uint32_t n_rows)
{
    if (!out)
        return KVE_OK;
    size_t lists, span;
    /* [table_layers][max_tokens][table_heads] int64 */
    KVE_RETURN_ERROR_IF(out->slot_mapping && kve_rows_span(s->tables, out->max_tokens,
                                                           out->max_tokens, 8, &span),
                        KVE_ERR_OVERFLOW,
                        "out->max_tokens = %u: %zu tables of that many int64 entries pass "
                        "SIZE_MAX bytes",
                        out->max_tokens, s->tables);
    if (!out->moves && !out->n_moves)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(!out->moves || !out->n_moves, KVE_ERR_NULL,
                        "out->%s is NULL: moves and n_moves go together",
                        out->moves ? "n_moves" : "moves");
    KVE_RETURN_ERROR_IF(out->max_rows < n_rows, KVE_ERR_RANGE,
                        "out->max_rows = %u: the call has n_rows = %u", out->max_rows, n_rows);
    /* n_moves [table_layers][max_rows][table_heads] uint32, moves the same
     * lists of max_moves pairs of int32 */
    size_t pairs = (size_t)out->max_moves * 2;
    KVE_RETURN_ERROR_IF(kve_rows_span(s->tables, out->max_rows, out->max_rows, 4, &lists) ||
                            kve_rows_span(lists, pairs, pairs, 4, &span),
                        KVE_ERR_OVERFLOW,
                        "out->max_moves = %u: %zu tables x out->max_rows = %u move lists of "
                        "max_moves pairs of int32 pass SIZE_MAX bytes",
                        out->max_moves, s->tables, out->max_rows);
    return KVE_OK;
}

kve_status kve_state_max_moves(const kve_state *s, uint32_t max_new, uint32_t *out_moves)
{
    KVE_CHECK_STATE(s);
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
    KVE_CHECK_STATE(s);
    KVE_RETURN_ERROR_IF(n_rows > s->d.max_seqs, KVE_ERR_RANGE,
                        "n_rows = %u: more than max_seqs = %u", n_rows, s->d.max_seqs);
    KVE_RETURN_ERROR_IF(n_rows && !rows, KVE_ERR_NULL, "rows is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(n_rows && !n_new, KVE_ERR_NULL, "n_new is NULL (n_rows = %u)", n_rows);
    int with_moves = out && (out->moves || out->n_moves);
    KVE_TRY(kve_state_check_move_lists(s, out, n_rows));
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

kve_state_plan kve_state_plan_of(const kve_state *s, const kve_state_call *c, uint32_t k,
                                        uint32_t waves, const kve_step_buffers *out)
{
    kve_state_plan p = {s->dev_rows,  s->dev_work, s->dev_jobs, c->rows,    c->n_new,
                        s->call_base, s->marks,    s->refused,  s->tables,  c->n_rows,
                        c->max_new,   s->d.max_seqs, s->d.schedule.interval, k, waves,
                        UINT32_MAX,   0,           0,           0,           0,
                        (s->d.schedule.flags & KVE_SCORED) != 0, s->d.schedule.window,
                        NULL, NULL, 0, 0};
    if (out && out->slot_mapping) {
        p.max_tokens = out->max_tokens;
        p.final = 1;
        p.pad = (uint32_t)c->pad;
    }
    p.clear = out && out->moves;
    if (c->pad && p.scored && out && out->scores) { /* kve_state_append_device: NaN refused */
        p.slot_pos = s->slot_pos;
        p.scores = out->scores;
        p.scores_stride_row = out->scores_stride_row;
        p.scores_stride_table = out->scores_stride_table;
    }
    return p;
}

/* Host memory: every table of a row that evicted lost exactly r slots. */
static kve_status kve_state_check_evicted(const kve_state *s, uint32_t n_rows)
{
    for (uint32_t i = 0; s->ctx->ops->host_memory && i < n_rows; i++) {
        const kve_state_job *j = &s->dev_jobs[KVE_SET_EVICT * n_rows + i];
        for (size_t t = 0; j->count && t < s->tables; t++)
            KVE_RETURN_ERROR_IF(s->n_evicted[i * s->tables + t] != s->d.schedule.interval,
                                KVE_ERR_INTERNAL,
                                "row %u, table %zu: a full head evicted %u slots, not r = %u",
                                j->row, t, s->n_evicted[i * s->tables + t],
                                s->d.schedule.interval);
    }
    return KVE_OK;
}

/* One wave on the device: planned there (one launch), then the move lists
 * cleared (the call's first wave), the due rows evicted, the rounds placed,
 * the runs written, the final mappings (its last wave). Every launch and
 * its size follow from the call's shape (n_rows, max_new). A backend with
 * host memory returns a refusal from the plan of wave 0: the outputs a
 * device writes for it (lists emptied, tokens and padding -1) are written
 * before the error is returned. */
static kve_status kve_state_wave(kve_state *s, const kve_state_call *c, uint32_t k,
                                 uint32_t waves, const kve_step_buffers *out)
{
    uint32_t n_rows = c->n_rows, max_new = c->max_new;
    kve_state_plan p = kve_state_plan_of(s, c, k, waves, out);
    kve_status refused = s->ctx->ops->state_plan(s->ctx, &p);
    if (refused != KVE_OK && (k != 0 || !s->ctx->ops->host_memory))
        return refused;
    uint64_t n = n_rows, per_row = n * s->tables;
    if (k == 0 && p.clear)
        KVE_TRY(kve_state_launch(s, KVE_SET_MOVES_CLEAR * n_rows, n_rows, per_row, out));
    if (k == 0 && p.pad)
        KVE_TRY(kve_state_launch(s, KVE_SET_PAD * n_rows, n_rows, per_row, out));
    if (refused != KVE_OK || !waves) { /* no-ops but a refusal's -1s (set FINAL) */
        if (p.final)
            KVE_TRY(kve_state_launch(s, KVE_SET_FINAL * n_rows, n_rows, per_row, out));
        return refused;
    }
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
    kve_evict_call call = {&e.b, NULL, e.workspace, e.workspace_bytes, &e}; /* over rows */
    KVE_TRY(s->ctx->ops->evict(s->ctx, &call));
    KVE_TRY(kve_state_check_evicted(s, n_rows));
    KVE_TRY(kve_state_launch_round(s, KVE_SET_ROUND * n_rows, n_rows, per_row, out));
    KVE_TRY(kve_state_launch(s, KVE_SET_RUN * n_rows, n_rows, per_row * max_new, out));
    if (k + 1 == waves && p.final)
        KVE_TRY(kve_state_launch(s, KVE_SET_FINAL * n_rows, n_rows, per_row, out));
    return KVE_OK;
}

/* The waves of call @p c (a fixed number for its shape): each wave evicts the rows
 * that are full and places their round (moving kept entries down), then
 * writes every row's next run of tokens at its first free slot. Rows that
 * went through a round get their final mapping in the last wave: a later
 * round may have moved the call's tokens down. On a backend with host
 * memory nothing is captured, and the counts are readable there: the
 * waves follow the call's largest row (those past it are no-ops, every
 * row's tokens placed), not max_new, so the work follows the tokens. */
static kve_status kve_state_append_waves(kve_state *s, const kve_state_call *c,
                                         const kve_step_buffers *out)
{
    uint32_t most = c->max_new;
    if (s->ctx->ops->host_memory) {
        most = 0;
        for (uint32_t i = 0; i < c->n_rows; i++)
            most = c->n_new[i] > most ? c->n_new[i] : most;
        most = most < c->max_new ? most : c->max_new; /* past it: refused in wave 0 */
    }
    uint32_t waves = kve_state_waves(s, most);
    for (uint32_t k = 0; k < (waves ? waves : 1); k++)
        KVE_TRY(kve_state_wave(s, c, k, waves, out));
    return KVE_OK;
}

/* The host mirror advanced as the planner advances the rows in backend
 * memory: the same planner over the mirror (the call checked already).
 * Nothing to do where the mirror is the backend's rows (host memory). */
static void kve_state_advance_mirror(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                     const uint32_t *n_new, uint32_t max_new)
{
    if (s->rows == s->dev_rows)
        return;
    uint32_t waves = kve_state_waves(s, max_new), at = 0;
    kve_state_plan p = {s->rows,  s->work,  s->jobs,       rows,    n_new, s->host_call + 2 * s->d.max_seqs,
                        NULL,     NULL,     s->tables,     n_rows,  max_new, s->d.max_seqs,
                        s->d.schedule.interval, 0, waves, UINT32_MAX, 0, 0, 0, 0,
                        (s->d.schedule.flags & KVE_SCORED) != 0, s->d.schedule.window,
                        NULL, NULL, 0, 0};
    for (uint32_t k = 0; k < waves; k++) {
        p.wave = k;
        (void)kve_state_plan_serial(&p, &at);
    }
}

kve_status kve_state_append_rows(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                 const uint32_t *n_new, const kve_step_buffers *out)
{
    uint32_t max_new = 0;
    for (uint32_t i = 0; i < n_rows; i++)
        max_new = n_new[i] > max_new ? n_new[i] : max_new;
    if (n_rows) { /* rows and n_new to the planner's buffers in one upload (no wait) */
        uint32_t m = s->d.max_seqs; /* call_new = call_rows + max_seqs in backend memory too */
        memcpy(s->host_call, rows, (size_t)n_rows * 4);
        memcpy(s->host_call + m, n_new, (size_t)n_rows * 4);
        KVE_TRY(s->ctx->ops->upload(s->ctx, s->call_rows, s->host_call,
                                    ((size_t)m + n_rows) * 4));
    }
    kve_state_advance_mirror(s, n_rows, rows, n_new, max_new);
    kve_state_call c = {s->call_rows, s->call_new, n_rows, max_new, 0};
    return kve_state_append_waves(s, &c, out);
}

kve_status kve_state_append(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                            const uint32_t *n_new, const kve_step_buffers *out)
{
    KVE_CHECK_STATE(s);
    KVE_TRY(kve_state_mirror(s));
    kve_status st = kve_append_check(s, n_rows, rows, n_new, out);
    for (uint32_t i = 0; s && rows && i < n_rows && rows[i] < s->d.max_seqs; i++)
        s->work[rows[i]].mark = 0;
    KVE_TRY(st);
    KVE_TRY(kve_state_check_scored(s, n_rows, rows, n_new, out));
    return kve_state_append_rows(s, n_rows, rows, n_new, out);
}

kve_status kve_state_append_device(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                   const uint32_t *n_new, uint32_t max_new,
                                   const kve_step_buffers *out)
{
    KVE_CHECK_STATE(s);
    KVE_RETURN_ERROR_IF(n_rows > s->d.max_seqs, KVE_ERR_RANGE,
                        "n_rows = %u: more than max_seqs = %u", n_rows, s->d.max_seqs);
    KVE_RETURN_ERROR_IF(n_rows && !rows, KVE_ERR_NULL, "rows is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(n_rows && !n_new, KVE_ERR_NULL, "n_new is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(max_new > KVE_I32_MAX, KVE_ERR_RANGE,
                        "max_new = %u: must be <= 2^31-1", max_new);
    KVE_TRY(kve_state_check_move_lists(s, out, n_rows));
    if (out && out->moves) {
        uint32_t need;
        KVE_TRY(kve_state_max_moves(s, max_new, &need));
        KVE_RETURN_ERROR_IF(out->max_moves < need, KVE_ERR_RANGE,
                            "out->max_moves = %u: a call of up to max_new = %u tokens a row "
                            "needs kve_state_max_moves = %u",
                            out->max_moves, max_new, need);
    }
    if (s->d.schedule.flags & KVE_SCORED)
        KVE_TRY(kve_state_check_scored_shape(s, n_rows, out));
    s->device_planned = 1; /* from here the rows may advance where the host cannot see */
    kve_state_call c = {rows, n_new, n_rows, max_new, 1}; /* the caller's buffers, read there */
    return kve_state_append_waves(s, &c, out);
}
