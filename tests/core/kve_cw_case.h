/* kve_cw_case.h — the Check suites' small valid cache write (tests/core:
 * test_errors_state.c's bad input, test_fuzz_findings.c's issue 36 cases). */
#ifndef KVE_CW_CASE_H
#define KVE_CW_CASE_H

#include <string.h>

#include "kvevict.h"

/* cache_write_bad_input's valid write: 2 tokens of 2 heads into 2 caches (k,
 * v) of 4 two-slot pages, NHD, 2 rows by a block table; also an indptr page
 * table of the same rows. Each check breaks one thing, then restores it. */
typedef struct {
    unsigned char src[2 * 2 * 4], k[4 * 2 * 2 * 4], v[4 * 2 * 2 * 4];
    int64_t slots[4];
    int32_t token_row[2], bt[4], ip[4], last[3]; /* indptr: room for 3 rows */
    kve_cache_write_desc ok;
} cw_bad_case;

static inline void cw_bad_case_init(cw_bad_case *c)
{
    const int64_t slots[4] = {0, 1, 2, 3};
    const int32_t token_row[2] = {0, 1}, bt[4] = {0, 1, 2, 3}, ip[4] = {0, 1, 3, 3},
                  last[3] = {2, 2, 2};
    memcpy(c->slots, slots, sizeof slots);
    memcpy(c->token_row, token_row, sizeof token_row);
    memcpy(c->bt, bt, sizeof bt);
    memcpy(c->ip, ip, sizeof ip);
    memcpy(c->last, last, sizeof last);
    c->ok = (kve_cache_write_desc){.n_tokens = 2,
                                   .n_heads = 2,
                                   .entry_bytes = 4,
                                   .n_caches = 2,
                                   .src = {c->src, c->src},
                                   .dst = {c->k, c->v},
                                   .layout = KVE_LAYOUT_NHD,
                                   .pages.page_size = 2,
                                   .pages.n_pages = 4,
                                   .slots = c->slots,
                                   .slots_stride_token = 2,
                                   .slots_stride_head = 1,
                                   .token_row = c->token_row,
                                   .pages.n_rows = 2,
                                   .pages.kind = KVE_PAGES_BLOCK_TABLE,
                                   .pages.block_table = c->bt,
                                   .pages.blocks_per_row = 2};
}

#endif
