/* validate_scores.c — the scored batch's content check (docs/SPEC.md
 * "Scored selection"): that no candidate's score is a NaN (host memory: the
 * CPU backend's evict per head, the cache state per call). Scores are read
 * at candidates only. Its fields are checked by the front end
 * (frontend/validate.c, kve_validate_batch_scores). */
#include <stdint.h>
#include <stdlib.h>

#include "kve_error.h"
#include "kve_key.h"
#include "kve_scores_check.h"

static int kve_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The window is guessed as the last wc positions (a decode's), verified by
 * its count, else found exactly by sorting the generated positions. */
uint32_t kve_scores_head_nan_slot(const kve_batch *b, size_t i, uint32_t *tmp)
{
    const int32_t *sp = b->slot_pos + i * b->slot_pos_stride;
    const float *sc = b->scores + i * b->scores_stride;
    uint32_t n = b->n_slots, prompt = b->seqs[i / ((size_t)b->n_layers * b->n_heads)].prompt_len;
    uint32_t n_valid = 0, n_gen = 0, max_pos = 0;
    for (uint32_t t = 0; t < n; t++)
        if (sp[t] >= 0) {
            n_valid++;
            if ((uint32_t)sp[t] >= prompt) {
                n_gen++;
                max_pos = (uint32_t)sp[t] > max_pos ? (uint32_t)sp[t] : max_pos;
            }
        }
    uint32_t wc = b->window < n_gen ? b->window : n_gen;
    if (n_valid <= b->budget || wc == n_gen)
        return UINT32_MAX; /* no candidate: no score is read */
    uint64_t win_lo = wc ? (uint64_t)max_pos - wc + 1 : (uint64_t)1 << 32;
    /* One pass checks the guess and the candidates it implies. */
    uint32_t in_window = 0, first = UINT32_MAX;
    for (uint32_t t = 0; t < n; t++) {
        int gen = sp[t] >= 0 && (uint32_t)sp[t] >= prompt;
        int cand = gen && (uint64_t)sp[t] < win_lo;
        in_window += gen && !cand;
        if (cand && first == UINT32_MAX && kve_score_is_nan(kve_score_bits(sc[t])))
            first = t;
    }
    if (in_window == wc)
        return first;
    uint32_t m = 0;
    for (uint32_t t = 0; t < n; t++)
        if (sp[t] >= 0 && (uint32_t)sp[t] >= prompt)
            tmp[m++] = (uint32_t)sp[t];
    qsort(tmp, m, sizeof *tmp, kve_cmp_u32);
    win_lo = tmp[m - wc];
    for (uint32_t t = 0; t < n; t++)
        if (sp[t] >= 0 && (uint32_t)sp[t] >= prompt && (uint64_t)sp[t] < win_lo &&
            kve_score_is_nan(kve_score_bits(sc[t])))
            return t;
    return UINT32_MAX;
}

kve_status kve_scores_first_nan(const kve_batch *b, size_t heads, size_t *out_head,
                                uint32_t *out_slot)
{
    *out_head = SIZE_MAX;
    *out_slot = UINT32_MAX;
    if (!(b->flags & KVE_SCORED) || !heads || !b->n_slots)
        return KVE_OK;
    uint32_t *tmp = (uint32_t *)malloc((size_t)b->n_slots * sizeof *tmp);
    KVE_RETURN_ERROR_IF(!tmp, KVE_ERR_NOMEM, "cannot allocate %zu bytes to check the scores",
                        (size_t)b->n_slots * sizeof *tmp);
    for (size_t i = 0; i < heads && *out_head == SIZE_MAX; i++) {
        uint32_t t = kve_scores_head_nan_slot(b, i, tmp);
        if (t != UINT32_MAX) {
            *out_head = i;
            *out_slot = t;
        }
    }
    free(tmp);
    return KVE_OK;
}
