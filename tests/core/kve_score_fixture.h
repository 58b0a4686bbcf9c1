/* kve_score_fixture.h — the one-row K-norm problem of tests/core's scorer
 * tests (test_score.c: its exact answers; test_errors.c and test_errors_state.c: the argument
 * checks against it). */
#ifndef KVE_SCORE_FIXTURE_H
#define KVE_SCORE_FIXTURE_H

#include <string.h>

#include "kvevict.h"

/* One row, one head, head_dim 2, slots 0..7 holding positions 0..5 (slots
 * 6, 7 empty); P = 1, W = 1: positions 1..4 are the candidates. */
static float g_keys[8][2] = {{9, 9}, {3, 4}, {6, 8}, {0, 1}, {2, 0}, {7, 7}, {0, 0}, {0, 0}};
static int32_t g_tab[8] = {0, 1, 2, 3, 4, 5, -1, -1};
static float g_out[8];
static kve_score_row g_row;

static kve_score_desc base_desc(void)
{
    kve_score_desc d;
    memset(&d, 0, sizeof d);
    d.scorer = KVE_SCORER_KNORM;
    d.keys.base = g_keys;
    d.keys.dtype = KVE_DTYPE_F32;
    d.keys.head_dim = 2;
    d.keys.n_heads = 1;
    d.keys.layout = KVE_LAYOUT_HND;
    d.keys.pages.page_size = 8;
    d.keys.pages.n_pages = 1;
    d.keys.pages.kind = KVE_PAGES_NONE;
    d.keys.pages.n_rows = 1;
    g_row = (kve_score_row){0, 0, 8, 1, 1, 6, 0, 0};
    d.n_rows = 1;
    d.rows = &g_row;
    d.slot_pos = g_tab;
    d.scores = g_out;
    return d;
}

#endif
