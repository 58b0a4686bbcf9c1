/*
 * state_scored.c — the cache state's scored rounds (docs/SPEC.md "Scored
 * selection", "In the cache state"): which rows are due, and the checks
 * that keep every candidate of a round among the slots cached before the
 * call, so the engine scores them from its cache.
 */
#include <stdint.h>
#include <stdio.h>

#include "kve_check.h"
#include "kve_error.h"
#include "kve_state_impl.h"
#include "kve_validate.h"
#include "state_rows_body.h"

kve_status kve_state_rounds_due(const kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                const uint32_t *n_new, uint32_t *out_due)
{
    KVE_CHECK_STATE(s);
    KVE_TRY(kve_state_mirror(s));
    if (n_rows == 0)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(!rows, KVE_ERR_NULL, "rows is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(!n_new, KVE_ERR_NULL, "n_new is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(!out_due, KVE_ERR_NULL, "out_due is NULL (n_rows = %u)", n_rows);
    for (uint32_t i = 0; i < n_rows; i++) {
        KVE_RETURN_ERROR_IF(rows[i] >= s->d.max_seqs, KVE_ERR_RANGE, "rows[%u] = %u: must be 0..%u",
                            i, rows[i], s->d.max_seqs - 1);
        KVE_RETURN_ERROR_IF(!s->rows[rows[i]].active, KVE_ERR_INVALID,
                            "rows[%u] = %u: holds no sequence", i, rows[i]);
    }
    for (uint32_t i = 0; i < n_rows; i++) {
        const kve_state_row *r = &s->rows[rows[i]];
        out_due[i] = kve_state_rounds_for(s, r->capacity, r->n_valid, n_new[i]);
    }
    return KVE_OK;
}

/* The scores of call row @p i (@p who: "rows[i] = row", or with @p planned
 * any row of a planned call) for tables of @p cap slots: pointer and
 * strides fit. */
static kve_status kve_scored_layout(const kve_state *s, uint32_t n_rows, uint32_t i, uint32_t cap,
                                    const char *who, int planned, const kve_step_buffers *out)
{
    KVE_RETURN_ERROR_IF(!out || !out->scores, KVE_ERR_NULL,
                        "out%s is NULL: %s %s a scored round in this call",
                        out ? "->scores" : "", who, planned ? "may run" : "runs");
    KVE_RETURN_ERROR_IF(out->scores_stride_table < cap, KVE_ERR_RANGE,
                        "out->scores_stride_table = %zu: below the %u slots of %s",
                        out->scores_stride_table, cap, who);
    size_t span;
    /* tables x scores_stride_table: tables rows of a full table each */
    KVE_RETURN_ERROR_IF(kve_rows_span(s->tables, out->scores_stride_table,
                                      out->scores_stride_table, 1, &span),
                        KVE_ERR_OVERFLOW, "out->scores_stride_table = %zu: %zu tables overflow",
                        out->scores_stride_table, s->tables);
    KVE_RETURN_ERROR_IF(n_rows > 1 && out->scores_stride_row < span, KVE_ERR_RANGE,
                        "out->scores_stride_row = %zu: below %zu tables x scores_stride_table "
                        "%zu",
                        out->scores_stride_row, s->tables, out->scores_stride_table);
    size_t row_span = 0;
    KVE_RETURN_ERROR_IF(kve_rows_span(s->tables, out->scores_stride_table, cap, sizeof(float),
                                      &row_span) ||
                            kve_rows_span((size_t)i + 1, out->scores_stride_row, row_span,
                                          sizeof(float), &span),
                        KVE_ERR_OVERFLOW,
                        "out->scores_stride_row = %zu: the scores of call row %u (%zu floats "
                        "each) overflow size_t bytes",
                        out->scores_stride_row, i, row_span);
    return KVE_OK;
}


/* No NaN at the round's candidates, from the tables before the call: the
 * @p before tokens the call writes first are generated and the newest, so
 * they take that many places of the round's window. */
static kve_status kve_scored_nan(const kve_state *s, uint32_t i, uint32_t row, uint32_t before,
                                 const kve_step_buffers *out)
{
    const kve_state_row *r = &s->rows[row];
    kve_seq seq = {r->seq_id, r->prompt, r->round};
    kve_batch b = kve_state_batch(s, 1);
    b.slot_pos = s->slot_pos + r->off * s->tables; /* the row's tables, in the pool */
    b.n_slots = r->capacity;
    b.slot_pos_stride = r->capacity;
    b.seqs = &seq;
    b.budget = 0; /* a full row always evicts */
    b.window = s->d.schedule.window - before;
    b.scores = out->scores + (size_t)i * out->scores_stride_row;
    b.scores_stride = out->scores_stride_table;
    size_t h;
    uint32_t t;
    KVE_TRY(kve_scores_first_nan(&b, s->tables, &h, &t));
    KVE_RETURN_ERROR_IF(h != SIZE_MAX, KVE_ERR_INVALID,
                        "out->scores of rows[%u] = %u, table %zu (layer %zu, head %zu), slot "
                        "%u is NaN: a candidate's score must be a number (+-inf allowed)",
                        i, row, h, h / s->table_heads, h % s->table_heads, t);
    return KVE_OK;
}

kve_status kve_state_check_scored_shape(const kve_state *s, uint32_t n_rows,
                                        const kve_step_buffers *out)
{
    if (n_rows == 0)
        return KVE_OK;
    return kve_scored_layout(s, n_rows, n_rows - 1, s->d.max_slots,
                             "any row of a planned call (max_slots)", 1, out);
}

kve_status kve_state_check_scored(const kve_state *s, uint32_t n_rows, const uint32_t *rows,
                                  const uint32_t *n_new, const kve_step_buffers *out)
{
    if (!(s->d.schedule.flags & KVE_SCORED))
        return KVE_OK;
    uint32_t W = s->d.schedule.window;
    for (uint32_t i = 0; i < n_rows; i++) {
        const kve_state_row *r = &s->rows[rows[i]];
        uint32_t k = kve_state_rounds_for(s, r->capacity, r->n_valid, n_new[i]);
        if (k == 0)
            continue;
        uint32_t before = r->capacity - r->n_valid;
        KVE_RETURN_ERROR_IF(k > 1, KVE_ERR_INVALID,
                            "rows[%u] = %u: n_new = %u tokens run %u rounds; a scored state runs "
                            "at most one round per row and call (window W = %u)",
                            i, rows[i], n_new[i], k, W);
        KVE_RETURN_ERROR_IF(before > W, KVE_ERR_INVALID,
                            "rows[%u] = %u: %u of its n_new = %u tokens come before its round, "
                            "more than the window W = %u: in a scored state every candidate "
                            "must be cached before the call",
                            i, rows[i], before, n_new[i], W);
        char who[48];
        (void)snprintf(who, sizeof who, "rows[%u] = %u", i, rows[i]);
        KVE_TRY(kve_scored_layout(s, n_rows, i, r->capacity, who, 0, out));
        if (s->ctx->ops->host_memory && s->slot_pos)
            KVE_TRY(kve_scored_nan(s, i, rows[i], before, out));
    }
    return KVE_OK;
}
