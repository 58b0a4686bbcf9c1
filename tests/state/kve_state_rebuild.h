/*
 * kve_state_rebuild.h — test_state.c's checks of kve_state_rebuild against a
 * live row: the record of a row's appends (the steps a rebuild is given), a
 * rebuild's mapping, and a rebuilt row that follows the live one.
 */
#ifndef KVE_STATE_REBUILD_H
#define KVE_STATE_REBUILD_H

#include "kve_state_test.h"

/* A rebuild's recompute mapping @p map names each of row @p row's valid
 * slots 0 .. n_valid-1 exactly once, at the position it holds. */
static inline void expect_mapping_names_valid(kve_state *st, uint32_t row,
                                              const kve_state_layout *lay,
                                              const kve_state_seq_info *info, const int64_t *map,
                                              int32_t *tab)
{
    size_t tables = (size_t)lay->table_layers * lay->table_heads;
    KT_OK(kve_state_read_slots(st, row, tab, lay->row_elems));
    for (size_t t = 0; t < tables; t++) {
        uint32_t named = 0;
        for (uint32_t p = 0; p < info->n_tokens; p++) {
            int64_t m = map[((t / lay->table_heads) * info->n_tokens + p) * lay->table_heads +
                            t % lay->table_heads];
            ck_assert(m >= -1 && m < (int64_t)info->n_valid);
            if (m >= 0) {
                ck_assert_int_eq(tab[t * lay->max_slots + m], (int32_t)p);
                named++;
            }
        }
        ck_assert_uint_eq(named, info->n_valid);
    }
}

/* rebuild_equals_live's record of each live row's appends (n_new, call by
 * call): the steps its rebuild is given. A row past RB_HIST calls is not
 * rebuilt. */
enum { RB_HIST = 4096 };
typedef struct {
    uint32_t *steps; /* [row][RB_HIST] */
    uint32_t *n;     /* [row]: calls since admission */
} rb_history;

static inline void rb_record(rb_history *h, uint32_t row, uint32_t n_new)
{
    if (h->n[row] < RB_HIST)
        h->steps[row * RB_HIST + h->n[row]] = n_new;
    h->n[row]++;
}

/* Live row @p r rebuilt into @p spare from its history equals it, and the
 * rebuild's mapping (@p map, @p map_len) names every valid slot once; after
 * the same appends to both (recorded in r's history) they still agree. The
 * spare is retired. */
static inline void expect_rebuild_follows(kve_state *st, const kve_state_layout *lay, uint32_t r,
                                          uint32_t spare, rb_history *h, uint64_t *rng,
                                          int64_t *map, size_t map_len, int32_t *tab)
{
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, r, &info));
    KT_OK(kve_state_rebuild(st, spare, info.seq_id, info.prompt_len, info.n_tokens,
                            h->steps + r * RB_HIST, h->n[r], map, map_len));
    ks_expect_same(st, r, st, spare);
    expect_mapping_names_valid(st, spare, lay, &info, map, tab);
    for (uint32_t k = 0; k < 7; k++) {
        uint32_t both[2] = {r, spare}, cnt[2];
        cnt[0] = cnt[1] = 1 + kt_below(rng, 3);
        KT_OK(kve_state_append(st, 2, both, cnt, NULL));
        rb_record(h, r, cnt[0]);
    }
    ks_expect_same(st, r, st, spare);
    KT_OK(kve_state_retire(st, spare));
}

/* Every row still live (@p active) after a long run, past its first round,
 * rebuilt into @p spare equals it, in place. */
static inline void expect_live_rows_rebuild(kve_state *st, const int *active, uint32_t live,
                                            uint32_t spare, const rb_history *h)
{
    for (uint32_t r = 0; r < live; r++) {
        if (!active[r] || h->n[r] > RB_HIST)
            continue;
        kve_state_seq_info info;
        KT_OK(kve_state_get_seq(st, r, &info));
        ck_assert_uint_gt(info.round, 0);
        KT_OK(kve_state_rebuild(st, spare, info.seq_id, info.prompt_len, info.n_tokens,
                                h->steps + r * RB_HIST, h->n[r], NULL, 0));
        ks_expect_same(st, r, st, spare);
        KT_OK(kve_state_retire(st, spare));
    }
}

#endif
