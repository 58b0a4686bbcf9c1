/*
 * state_rows_body.h — what a cache state's row does with a call's tokens,
 * written once for the host (state_append.c, score.c), the planner
 * (state_body.h) and the scorer's device row list (score_body.h): the
 * rounds it runs, whether a scored state's rules allow them, and the
 * scoring row of its round.
 */
#ifndef KVE_STATE_ROWS_BODY_H
#define KVE_STATE_ROWS_BODY_H

#include "kve_device.h"
#include "kve_jobs.h"

/* Rounds a row holding @p n_valid of @p capacity slots runs for @p n_new
 * more tokens: one once it is full, then one every @p interval tokens. */
KVE_HD_FN uint32_t kve_rounds_for(uint32_t capacity, uint32_t n_valid, uint32_t n_new,
                                  uint32_t interval)
{
    uint32_t room = capacity - n_valid;
    return n_new <= room ? 0 : (uint32_t)(((uint64_t)n_new - room + interval - 1) / interval);
}

/* A KVE_SCORED state's rules for row @p r taking @p n_new tokens: at most
 * one round, and at most @p window of the tokens before it (every candidate
 * is then cached before the call). */
KVE_HD_FN int kve_scored_fits(const kve_state_row *r, uint32_t n_new, uint32_t window,
                              uint32_t interval)
{
    uint32_t k = kve_rounds_for(r->capacity, r->n_valid, n_new, interval);
    return k == 0 || (k == 1 && r->capacity - r->n_valid <= window);
}

/*
 * The scoring row of a round that runs when row @p r (@p tables tables, of
 * which @p table_heads a layer) takes @p n_new tokens, for table layer
 * @p tl: its tables as they are before the call, its candidates the
 * round's (the window less the call's tokens before the round, which are
 * the newest), t0 the position of the token that triggers it; output at
 * @p scores_offset (the call row's) plus the layer's tables. Returns 1; 0
 * (nothing written) when no round runs or the scored rules do not hold.
 */
KVE_HD_FN int kve_state_score_row_of(const kve_state_row *r, uint32_t n_new, uint32_t window,
                                     uint32_t interval, uint64_t tables, uint32_t table_heads,
                                     uint32_t tl, uint64_t scores_offset, size_t stride_table,
                                     int32_t cache_row, kve_score_row *out)
{
    if (kve_rounds_for(r->capacity, r->n_valid, n_new, interval) != 1 ||
        !kve_scored_fits(r, n_new, window, interval))
        return 0;
    uint32_t before = r->capacity - r->n_valid;
    out->table_offset = r->off * tables + (uint64_t)tl * table_heads * r->capacity;
    out->scores_offset = scores_offset + (uint64_t)tl * table_heads * stride_table;
    out->n_slots = r->capacity;
    out->table_stride = r->capacity;
    out->prompt_len = r->prompt;
    out->window = window - before;
    out->round_start = r->n_tokens + before;
    out->cache_row = cache_row;
    return 1;
}

/* Call row @p i of a scorer's device row list (kve_score_list: the call's
 * rows and counts, the rows' bookkeeping), its tables @p table_heads a
 * layer, outputs @p stride_table apart: its scoring row, key cache row i.
 * Returns 0 when it has nothing to score: padding (rows[i] is not read), a
 * row out of range or free, no round, or a call the scored rules refuse. */
KVE_HD_FN int kve_score_list_row(const kve_score_list *l, uint32_t i, uint32_t table_heads,
                                 size_t stride_table, kve_score_row *out)
{
    uint32_t n = l->n_new[i], row = n ? l->rows[i] : 0;
    if (!n || row >= l->max_seqs || !l->state[row].active)
        return 0;
    return kve_state_score_row_of(&l->state[row], n, l->window, l->interval, l->tables,
                                  table_heads, l->table_layer, (uint64_t)i * l->stride_row,
                                  stride_table, (int32_t)i, out);
}

#endif /* KVE_STATE_ROWS_BODY_H */
