/*
 * state_draft.c — kve_state_draft: a speculative step's draft tokens,
 * tentative, in each row's draft slots (capacity + i) outside its tables
 * (docs/SPEC.md "Speculative steps"). Planned on the backend by the
 * append's planner in its draft mode (kve_state_plan.draft: the same
 * checks, then mapping entries only; the shape's entries no draft takes
 * -1, as kve_state_append_device pads), so a captured step replays as an
 * eager one runs; the commit is an ordinary append of the accepted tokens.
 */
#include <stdint.h>

#include "kve_error.h"
#include "kve_state_impl.h"
#include "kve_util.h"

kve_status kve_state_draft(kve_state *s, uint32_t n_rows, const uint32_t *rows,
                           const uint32_t *n_draft, uint32_t max_draft,
                           const kve_step_buffers *out)
{
    KVE_CHECK_STATE(s);
    KVE_RETURN_ERROR_IF(s->d.max_draft == 0, KVE_ERR_INVALID,
                        "kve_state_draft: the state was created with desc.max_draft = 0 (no "
                        "draft slots)");
    KVE_RETURN_ERROR_IF(max_draft > s->d.max_draft, KVE_ERR_RANGE,
                        "max_draft = %u: more than desc.max_draft = %u, the draft slots a row has",
                        max_draft, s->d.max_draft);
    KVE_RETURN_ERROR_IF(n_rows > s->d.max_seqs, KVE_ERR_RANGE,
                        "n_rows = %u: more than max_seqs = %u", n_rows, s->d.max_seqs);
    KVE_RETURN_ERROR_IF(n_rows && !rows, KVE_ERR_NULL, "rows is NULL (n_rows = %u)", n_rows);
    KVE_RETURN_ERROR_IF(n_rows && !n_draft, KVE_ERR_NULL, "n_draft is NULL (n_rows = %u)",
                        n_rows);
    KVE_TRY(kve_state_check_move_lists(s, out, n_rows));
    /* One wave of the planner in draft mode over the caller's rows and
     * n_draft: wave 0's checks (n_draft[i] <= max_draft as n_new[i] <=
     * max_new), each row's mapping entries in set FINAL. */
    kve_state_call c = {rows, n_draft, n_rows, max_draft, 1}; /* padded as appends are */
    kve_state_plan p = kve_state_plan_of(s, &c, 0, 1, out);
    p.draft = 1;
    /* a refusal returned on host memory: its outputs written first, as on a device */
    kve_status refused = s->ctx->ops->state_plan(s->ctx, &p);
    if (refused != KVE_OK && !s->ctx->ops->host_memory)
        return refused;
    uint64_t per_row = (uint64_t)n_rows * s->tables;
    if (p.clear)
        KVE_TRY(kve_state_launch(s, KVE_SET_MOVES_CLEAR * n_rows, n_rows, per_row, out));
    if (p.pad)
        KVE_TRY(kve_state_launch(s, KVE_SET_PAD * n_rows, n_rows, per_row, out));
    if (p.final) /* a refused row's -1s are one item per table, a draft's one per token */
        KVE_TRY(kve_state_launch(s, KVE_SET_FINAL * n_rows, n_rows,
                                 per_row * (max_draft ? max_draft : 1), out));
    return refused;
}
