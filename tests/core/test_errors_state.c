/* test_errors_state.c — bad input of the cache state and cache-write entry
 * points (kve_state_*, kve_schedule_capacity, kve_cache_write, KVE_SCORED
 * states, kve_state_score): each case returns its status and leaves a
 * message naming the argument and value; a refused call changes nothing.
 * The core entry points' bad input is test_errors.c's. */
#include <math.h>

#include "kve_cw_case.h"
#include "kve_score_fixture.h"
#include "kve_suite.h"
#include "kve_test_state.h"

/* kve_state_append's refusals on a state whose row 0 holds an empty
 * sequence (capacity 20, r = 4); a failed call changes nothing. */
static void expect_bad_appends(kve_state *st)
{
    uint32_t rows[2] = {0, 0}, n_new[2] = {3, 3};
    int64_t map[64];
    int32_t mv[64];
    uint32_t n_mv[8];
    kve_step_buffers out = {map, 3, mv, n_mv, 2, 4, NULL, 0, 0};
    EXPECT_ERR(kve_state_append(st, 2, rows, n_new, &out), KVE_ERR_INVALID, "appears twice");
    rows[1] = 1;
    EXPECT_ERR(kve_state_append(st, 2, rows, n_new, &out), KVE_ERR_INVALID,
               "rows[1] = 1: holds no sequence");
    EXPECT_ERR(kve_state_append(st, 1, NULL, n_new, &out), KVE_ERR_NULL, "rows is NULL");
    out.max_tokens = 2;
    EXPECT_ERR(kve_state_append(st, 1, rows, n_new, &out), KVE_ERR_RANGE, "out->max_tokens = 2");
    out.max_tokens = 3;
    out.n_moves = NULL;
    EXPECT_ERR(kve_state_append(st, 1, rows, n_new, &out), KVE_ERR_NULL, "out->n_moves");
    out.n_moves = n_mv;
    out.max_rows = 0;
    EXPECT_ERR(kve_state_append(st, 1, rows, n_new, &out), KVE_ERR_RANGE, "out->max_rows = 0");
    out.max_rows = 2;
    n_new[0] = 30; /* 20 slots: 10 past a full row, 3 rounds of r = 4 */
    out.max_tokens = 30;
    EXPECT_ERR(kve_state_append(st, 1, rows, n_new, &out), KVE_ERR_RANGE, "out->max_moves = 4");
    out.max_tokens = 3;
    n_new[0] = 0x80000000u;
    EXPECT_ERR(kve_state_append(st, 1, rows, n_new, NULL), KVE_ERR_RANGE, "n_new[0] = ");
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, 0, &info));
    ck_assert_uint_eq(info.n_tokens, 0); /* failed calls changed nothing */
    n_new[0] = 3;
    KT_OK(kve_state_append(st, 1, rows, n_new, &out)); /* and the marks were cleared */
    uint32_t moves_for = 0;
    KT_OK(kve_state_max_moves(st, 9, &moves_for));
    ck_assert_uint_eq(moves_for, 12);

}

/* kve_state_rebuild's, the read calls' and kve_schedule_capacity's refusals. */
static void expect_bad_rebuilds_and_reads(kve_state *st, const kve_state_desc *d)
{
    int64_t map[64];
    EXPECT_ERR(kve_state_rebuild(st, 5, 1, 0, 10, NULL, 0, NULL, 0), KVE_ERR_RANGE, "row = 5");
    EXPECT_ERR(kve_state_rebuild(st, 1, 1, 40, 10, NULL, 0, NULL, 0), KVE_ERR_RANGE,
               "prompt_len = 40");
    EXPECT_ERR(kve_state_rebuild(st, 1, 1, 0, 10, NULL, 0, map, 5), KVE_ERR_RANGE,
               "mapping_len = 5");
    uint32_t steps[2] = {4, 5};
    EXPECT_ERR(kve_state_rebuild(st, 1, 1, 0, 10, steps, 2, NULL, 0), KVE_ERR_INVALID,
               "steps sum to 9");
    EXPECT_ERR(kve_state_rebuild(st, 1, 1, 0, 10, NULL, 2, NULL, 0), KVE_ERR_NULL, "steps is NULL");
    int32_t tab[4 * 32];
    EXPECT_ERR(kve_state_read_slots(st, 1, tab, 128), KVE_ERR_INVALID, "row = 1");
    EXPECT_ERR(kve_state_read_slots(st, 0, tab, 100), KVE_ERR_RANGE, "out_len = 100");
    EXPECT_ERR(kve_state_get_seq(st, 0, NULL), KVE_ERR_NULL, "out");
    EXPECT_ERR(kve_state_get_layout(NULL, NULL), KVE_ERR_NULL, "state");
    uint32_t cap;
    EXPECT_ERR(kve_schedule_capacity(&d->schedule, 0x7ffffffau, &cap), KVE_ERR_OVERFLOW,
               "prompt_len = 2147483642");
}

START_TEST(state_bad_input)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(0, 2, 2, 2, 16, 4, 4, 32), bad;
    kve_state *st = NULL;
    size_t bytes;
    EXPECT_ERR(kve_state_create(ctx, NULL, NULL, 0, &st), KVE_ERR_NULL, "desc");
    EXPECT_ERR(kve_state_create(NULL, &d, NULL, 0, &st), KVE_ERR_NULL, "ctx");
    EXPECT_ERR(kve_state_memory_size(ctx, &d, NULL), KVE_ERR_NULL, "out_bytes");
    bad = d;
    bad.schedule.interval = 0;
    EXPECT_ERR(kve_state_create(ctx, &bad, NULL, 0, &st), KVE_ERR_RANGE, "schedule.interval = 0");
    bad = d;
    bad.schedule.flags = 8;
    EXPECT_ERR(kve_state_create(ctx, &bad, NULL, 0, &st), KVE_ERR_INVALID, "schedule.flags = 0x8");
    bad = d;
    bad.max_slots = 19;
    EXPECT_ERR(kve_state_create(ctx, &bad, NULL, 0, &st), KVE_ERR_RANGE, "desc.max_slots = 19");
    bad = d;
    bad.n_heads = 0;
    EXPECT_ERR(kve_state_create(ctx, &bad, NULL, 0, &st), KVE_ERR_RANGE, "desc.n_heads = 0");
    bad = d;
    bad.layer_offset = UINT32_MAX;
    EXPECT_ERR(kve_state_create(ctx, &bad, NULL, 0, &st), KVE_ERR_OVERFLOW, "desc.layer_offset");
    /* A small pool but 2^21 + 1 rows of 2^40 tables: the per-row counts
     * alone pass SIZE_MAX (once reported as a wrapped size). */
    bad = ks_desc(0, (1u << 21) + 1, 1u << 20, 1u << 20, 0, 0, 1, 1);
    bad.pool_slots = 1;
    EXPECT_ERR(kve_state_memory_size(ctx, &bad, &bytes), KVE_ERR_OVERFLOW,
               "2097153 rows x 1099511627776 tables of counts overflows");
    KT_OK(kve_state_memory_size(ctx, &d, &bytes));
    char small[64];
    EXPECT_ERR(kve_state_create(ctx, &d, small, sizeof small, &st), KVE_ERR_WORKSPACE,
               "memory_bytes = 64");
    ck_assert_ptr_null(st);
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));

    EXPECT_ERR(kve_state_admit(st, 2, 1, 0), KVE_ERR_RANGE, "row = 2");
    EXPECT_ERR(kve_state_admit(st, 0, 1, 25), KVE_ERR_RANGE, "prompt_len = 25");
    EXPECT_ERR(kve_state_admit(NULL, 0, 1, 1), KVE_ERR_NULL, "state");
    KT_OK(kve_state_admit(st, 0, 1, 12)); /* max(16, 16) + 4 = 20 <= 32 */
    EXPECT_ERR(kve_state_admit(st, 0, 2, 1), KVE_ERR_INVALID, "already holds seq_id 1");
    EXPECT_ERR(kve_state_retire(st, 1), KVE_ERR_INVALID, "row = 1: holds no sequence");

    expect_bad_appends(st);
    expect_bad_rebuilds_and_reads(st, &d);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* A rebuild the pool cannot hold is refused before the row is dropped: the
 * live row keeps its sequence and its tables (it was once freed); likewise
 * a refused admission. */
START_TEST(rebuild_refused_keeps_row)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(0, 2, 1, 1, 8, 2, 2, 40);
    d.pool_slots = 40;
    kve_state *st = NULL;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));
    KT_OK(kve_state_admit(st, 0, 11, 4)); /* capacity max(8, 4 + 2) + 2 = 10 */
    KT_OK(kve_state_admit(st, 1, 12, 4)); /* 20 of the 40 pool slots taken */
    uint32_t row = 0, n = 9;
    KT_OK(kve_state_append(st, 1, &row, &n, NULL));
    kve_state_seq_info before, after;
    int32_t tab_before[40], tab_after[40];
    KT_OK(kve_state_get_seq(st, 0, &before));
    KT_OK(kve_state_read_slots(st, 0, tab_before, 40));
    /* prompt 30: capacity max(8, 30 + 2) + 2 = 34; 20 free + row 0's own 10 = 30 */
    EXPECT_ERR(kve_state_rebuild(st, 0, 11, 30, 30, NULL, 0, NULL, 0), KVE_ERR_RANGE,
               "prompt_len = 30: capacity 34 slots, but the pool of 40 has 30 free");
    KT_OK(kve_state_get_seq(st, 0, &after));
    KT_OK(kve_state_read_slots(st, 0, tab_after, 40));
    ck_assert_msg(memcmp(&before, &after, sizeof before) == 0, "row 0 changed by a refused rebuild");
    ck_assert_int_eq(memcmp(tab_before, tab_after, sizeof tab_before), 0);
    ck_assert_uint_eq(after.active, 1);
    ck_assert_uint_eq(after.n_tokens, 9);
    /* with room (prompt 20: capacity 24 <= 30) the same row rebuilds */
    KT_OK(kve_state_rebuild(st, 0, 11, 20, 20, NULL, 0, NULL, 0));
    KT_OK(kve_state_get_seq(st, 0, &after));
    ck_assert_uint_eq(after.n_tokens, 20);
    /* An admission the pool cannot hold leaves the free row as it was too
     * (it was once cleared first; found by fuzz_state with a small pool). */
    KT_OK(kve_state_retire(st, 1)); /* 40 - 24 = 16 free */
    KT_OK(kve_state_get_seq(st, 1, &before));
    EXPECT_ERR(kve_state_admit(st, 1, 13, 20), KVE_ERR_RANGE,
               "prompt_len = 20: capacity 24 slots, but the pool of 40 has 16 free");
    KT_OK(kve_state_get_seq(st, 1, &after));
    ck_assert_msg(memcmp(&before, &after, sizeof before) == 0, "row 1 changed by a refused admit");
    KT_OK(kve_state_admit(st, 1, 13, 10)); /* capacity 14 fits */
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* The descriptor's own faults: NULLs, counts, layout, aliasing caches and
 * strides. */
static void expect_bad_write_descs(kve_context *ctx, cw_bad_case *c)
{
    kve_cache_write_desc d;
    EXPECT_ERR(kve_cache_write(ctx, NULL), KVE_ERR_NULL, "desc");
    EXPECT_ERR(kve_cache_write(NULL, &c->ok), KVE_ERR_NULL, "ctx");
    d = c->ok;
    d.n_caches = 0;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.n_caches = 0");
    d = c->ok;
    d.layout = (kve_cache_layout)7;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "desc.layout = 7");
    d = c->ok;
    d.dst[1] = c->k + 8;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.dst[1]");
    d = c->ok;
    d.src[0] = c->k;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.src[0]");
    d = c->ok;
    d.dst_stride_slot = 4;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.dst_stride_");
    d = c->ok;
    d.slots_stride_token = 0;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.slots_stride_token = 0");
    d = c->ok;
    d.pages.block_table = NULL;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_NULL, "desc.pages.block_table");
}

/* Bad contents of the valid descriptor's arrays: a token's row, a slot, a
 * block table's page. */
static void expect_bad_write_contents(kve_context *ctx, cw_bad_case *c)
{
    c->token_row[1] = 2;
    EXPECT_ERR(kve_cache_write(ctx, &c->ok), KVE_ERR_RANGE, "desc.token_row[1] = 2");
    c->token_row[1] = 1;
    c->slots[3] = 4;
    EXPECT_ERR(kve_cache_write(ctx, &c->ok), KVE_ERR_RANGE, "desc.slots[token 1][head 1] = 4");
    c->slots[3] = -2;
    EXPECT_ERR(kve_cache_write(ctx, &c->ok), KVE_ERR_RANGE, "= -2");
    c->slots[3] = 3;
    c->bt[3] = 4;
    EXPECT_ERR(kve_cache_write(ctx, &c->ok), KVE_ERR_RANGE, "block_table");
    c->bt[3] = 3;
}

/* The indptr page table (@p d, valid as given): a row shorter than its
 * slot, a last page of 0, indptr not ascending. */
static void expect_bad_write_indptr(kve_context *ctx, cw_bad_case *c, const kve_cache_write_desc *d)
{
    KT_OK(kve_cache_write(ctx, d));
    c->last[1] = 1; /* row 1 is one slot long; slot 3 is past it */
    EXPECT_ERR(kve_cache_write(ctx, d), KVE_ERR_RANGE, "0..2 (the row's length");
    c->last[1] = 0;
    EXPECT_ERR(kve_cache_write(ctx, d), KVE_ERR_RANGE, "desc.pages.last_page_len[1] = 0");
    c->last[1] = 2;
    c->ip[1] = 4;
    EXPECT_ERR(kve_cache_write(ctx, d), KVE_ERR_RANGE, "desc.pages.indptr[1] = 4, indptr[2] = 3");
    c->ip[1] = 1;
}

/* Moves: a bad pair is named as the move it is (it once read as a token's
 * slot), and past an indptr row's length the message says why a round's
 * moves need the reserved pages described. @p indptr_write: the valid
 * indptr write, given moves here. */
static void expect_bad_write_moves(kve_context *ctx, cw_bad_case *c,
                                   const kve_cache_write_desc *indptr_write)
{
    int32_t mv[2 * 2 * 2] = {1, 0, 0, 0, 3, 2, 0, 0}; /* [move row][head][pair] */
    uint32_t n_mv[2] = {1, 1};
    int32_t move_row[1] = {1};
    kve_cache_write_desc desc = *indptr_write, *d = &desc;
    d->moves = mv;
    d->n_moves = n_mv;
    d->n_move_rows = 1;
    d->max_moves = 2;
    d->moves_stride_row = 2;
    d->moves_stride_head = 1;
    d->move_row = move_row;
    KT_OK(kve_cache_write(ctx, d));
    c->last[1] = 1; /* row 1 holds slots 0..2: pair 0 of head 1 reads slot 3 */
    EXPECT_ERR(kve_cache_write(ctx, d), KVE_ERR_RANGE,
               "desc.moves[move row 0][head 1][pair 0].src = 3: must be 0..2 (the row's length by "
               "indptr and last_page_len, row 1); a round moves entries from slots up to the "
               "row's capacity");
    c->last[1] = 2;
    mv[5] = -1;
    EXPECT_ERR(kve_cache_write(ctx, d), KVE_ERR_RANGE,
               "desc.moves[move row 0][head 1][pair 0].dst = -1: must be 0..3");
    mv[5] = 2;
    d->pages.kind = KVE_PAGES_BLOCK_TABLE;
    c->bt[3] = 9; /* row 1's second page, which slot 3 lies on */
    EXPECT_ERR(kve_cache_write(ctx, d), KVE_ERR_RANGE,
               "(desc.moves[move row 0][head 1][pair 0].src, from desc.pages.block_table)");
    c->bt[3] = 3;
}

START_TEST(cache_write_bad_input)
{
    kve_context *ctx = ks_context();
    cw_bad_case c;
    cw_bad_case_init(&c);
    KT_OK(kve_cache_write(ctx, &c.ok));
    expect_bad_write_descs(ctx, &c);
    expect_bad_write_contents(ctx, &c);
    kve_cache_write_desc d = c.ok;
    d.pages.kind = KVE_PAGES_INDPTR;
    d.pages.indptr = c.ip;
    d.pages.indices = c.bt;
    d.pages.last_page_len = c.last;
    expect_bad_write_indptr(ctx, &c, &d);
    expect_bad_write_moves(ctx, &c, &d);
    d = c.ok;
    d.pages.kind = KVE_PAGES_NONE;
    d.pages.n_rows = 5;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.pages.n_rows = 5");
    kve_context_destroy(ctx);
}
END_TEST

/* kve_cache_write's type and part checks: dtypes, conversion, scales, element
 * sizes and alignment. */
START_TEST(cache_write_type_errors)
{
    enum { P = 6, PS = 4, H = 2, D = 8 };
    kve_context *ctx = ks_context();
    uint16_t src[H][D], dst[P][PS][H][D];
    float scale = 1;
    int64_t slot = 0;
    int32_t row = 0;
    kve_cache_write_desc ok = {.n_tokens = 1, .n_heads = H, .entry_bytes = 2 * D, .n_caches = 1,
                               .src = {src}, .dst = {dst}, .layout = KVE_LAYOUT_NHD,
                               .pages.page_size = PS, .pages.n_pages = P, .slots = &slot,
                               .slots_stride_token = 1, .token_row = &row, .pages.n_rows = 1,
                               .pages.kind = KVE_PAGES_NONE};
    ok.part[0] = (kve_cache_part){.src_dtype = KVE_DTYPE_F16, .dst_dtype = KVE_DTYPE_F16};
    KT_OK(kve_cache_write(ctx, &ok));
    kve_cache_write_desc d = ok;
    d.part[0].dst_dtype = KVE_DTYPE_BF16;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID,
               "desc.part[0]: source type f16 and cache type bf16 differ, and convert is 0");
    d.part[0].convert = 1;
    KT_OK(kve_cache_write(ctx, &d));
    d.part[0].convert = 2;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "desc.part[0].convert = 2");
    d = ok;
    d.part[0].src_dtype = KVE_DTYPE_RAW;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "source type raw and cache type f16");
    d.part[0].convert = 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "raw bytes have no type");
    d = ok;
    d.part[0].scale = &scale;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "desc.part[0].scale: a scale needs");
    d.part[0].convert = 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "cache f16");
    d.part[0].dst_dtype = KVE_DTYPE_FP8_E4M3;
    d.part[0].dim = D;
    KT_OK(kve_cache_write(ctx, &d));
    d.part[0].scale_per_head = 3;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "desc.part[0].scale_per_head = 3");
    d = ok;
    d.part[0].dst_dtype = (kve_dtype)9;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "desc.part[0].dst_dtype = 9");
    d = ok;
    d.entry_bytes = 2 * D + 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "not a whole number of f16 elements");
    d = ok;
    d.src[0] = (const char *)src + 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "multiple of 2 bytes");
    d = ok;
    d.part[0].dst_stride_slot = 2 * H * D + 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_INVALID, "desc.dst[0]");
    d = ok;
    d.entry_bytes = 0;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.entry_bytes = 0");
    d.part[0].dim = D;
    KT_OK(kve_cache_write(ctx, &d));
    kve_context_destroy(ctx);
}
END_TEST

/* KVE_SCORED state: the flag checks, rounds_due's and the scored round's
 * arguments, a NaN candidate, and rebuild's refusal of scored rounds. */
START_TEST(scored_state_errors)
{
    enum { B = 12, W = 4, R = 4 };
    kve_context *ctx = ks_context();
    kve_schedule sch = {1, KVE_SCORED | KVE_PERSISTENT, B, W, R};
    uint32_t cap;
    EXPECT_ERR(kve_schedule_capacity(&sch, 0, &cap), KVE_ERR_INVALID, "KVE_SCORED and KVE_PERSISTENT");
    kve_state_desc d = ks_desc(KVE_SCORED | KVE_PERSISTENT, 1, 1, 1, B, W, R, 64);
    kve_state *st = NULL;
    EXPECT_ERR(kve_state_create(ctx, &d, NULL, 0, &st), KVE_ERR_INVALID, "KVE_PERSISTENT");
    d = ks_desc(KVE_SCORED | KVE_SHARED_HEADS, 1, 2, 3, B, W, R, 64);
    kve_state_layout lay;
    st = ks_create(ctx, &d, &lay);
    uint32_t row = 0, n = B, one = 1, due = 9;
    KT_OK(kve_state_admit(st, 0, 7, 2)); /* capacity max(12, 2 + 4) + 4 = 16 */
    KT_OK(kve_state_append(st, 1, &row, &n, NULL));
    EXPECT_ERR(kve_state_rounds_due(st, 1, &row, &one, NULL), KVE_ERR_NULL, "out_due");
    uint32_t bad_row = 5;
    EXPECT_ERR(kve_state_rounds_due(st, 1, &bad_row, &one, &due), KVE_ERR_RANGE, "rows[0] = 5");
    n = 4;
    KT_OK(kve_state_append(st, 1, &row, &n, NULL)); /* full, still no round */
    KT_OK(kve_state_rounds_due(st, 1, &row, &one, &due));
    ck_assert_uint_eq(due, 1);
    EXPECT_ERR(kve_state_append(st, 1, &row, &one, NULL), KVE_ERR_NULL, "rows[0] = 0 runs a scored round");
    float sc[2 * 16];
    for (int i = 0; i < 32; i++)
        sc[i] = (float)i;
    kve_step_buffers out;
    memset(&out, 0, sizeof out);
    out.scores = sc;
    out.scores_stride_table = 15;
    EXPECT_ERR(kve_state_append(st, 1, &row, &one, &out), KVE_ERR_RANGE, "scores_stride_table = 15");
    out.scores_stride_table = 16;
    uint32_t five = R + 1;
    EXPECT_ERR(kve_state_append(st, 1, &row, &five, &out), KVE_ERR_INVALID, "2 rounds");
    sc[16 + 3] = NAN; /* table 1, slot 3: a candidate */
    EXPECT_ERR(kve_state_append(st, 1, &row, &one, &out), KVE_ERR_INVALID, "table 1 (layer 1, head 0), slot 3 is NaN");
    sc[16 + 3] = 19;
    sc[0] = sc[15] = NAN; /* the prompt and the window: never read */
    KT_OK(kve_state_append(st, 1, &row, &one, &out));
    /* kept: the prompt 0, 1; the 6 highest of the candidates 2..11 (score = slot =
     * position); the window 12..15; the new token 16 */
    int32_t tab[2 * 64];
    KT_OK(kve_state_read_slots(st, 0, tab, lay.row_elems));
    const int32_t want[13] = {0, 1, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    for (uint32_t t = 0; t < 2; t++) {
        int32_t got[13];
        memcpy(got, tab + t * lay.max_slots, sizeof got);
        qsort(got, 13, 4, kve_test_cmp_i32);
        ck_assert(memcmp(got, want, sizeof want) == 0);
        ck_assert_int_eq(tab[t * lay.max_slots + 13], -1);
    }
    EXPECT_ERR(kve_state_rebuild(st, 0, 7, 2, 17, NULL, 0, NULL, 0), KVE_ERR_INVALID,
               "scored rounds depend on the cache contents");
    KT_OK(kve_state_rebuild(st, 0, 7, 2, 16, NULL, 0, NULL, 0));
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(state_score_bad_arguments)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    kve_state_desc sd = {{1, 0, 16, 4, 4}, 2, 2, 1, 0, 0, 64, 0, 0, 0};
    kve_state *s = NULL;
    ck_assert_msg(kve_state_create(ctx, &sd, NULL, 0, &s) == KVE_OK, "state: %s", kve_last_error());
    ck_assert_msg(kve_state_admit(s, 0, 9, 4) == KVE_OK, "admit");
    uint32_t rows[2] = {0, 0}, n_new[2] = {4, 1}, cap = 0;
    ck_assert_msg(kve_state_append(s, 1, rows, n_new, NULL) == KVE_OK, "append");
    kve_schedule_capacity(&sd.schedule, 4, &cap);
    float out[2 * 64];
    kve_score_desc d = base_desc();
    d.keys.pages.n_rows = 2;
    d.keys.pages.n_pages = 2;
    struct {
        uint32_t n, layer;
        const uint32_t *rows;
        size_t sr, st;
        kve_status status;
        const char *word;
    } cases[] = {
        {1, 2, rows, 128, 64, KVE_ERR_RANGE, "table_layer"},
        {2, 0, rows, 128, 64, KVE_ERR_INVALID, "listed twice"},
        {1, 0, rows + 1, 128, 64, KVE_ERR_INVALID, "not an active row"},
        {1, 0, rows, 64, 64, KVE_ERR_RANGE, "scores_stride_row"},
    };
    rows[1] = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t nn[2] = {1, 1};
        if (i == 2) {
            static const uint32_t one = 1;
            cases[i].rows = &one;
        }
        kve_status st = kve_state_score(s, cases[i].n, cases[i].rows, nn, cases[i].layer, &d, out,
                                        cases[i].sr, cases[i].st);
        ck_assert_msg(st == cases[i].status && strstr(kve_last_error(), cases[i].word),
                   "state case %zu: %s \"%s\"", i, kve_status_string(st), kve_last_error());
    }
    /* more than W tokens before the round */
    uint32_t big = cap, r0 = 0;
    kve_status st = kve_state_score(s, 1, &r0, &big, 0, &d, out, 128, 64);
    ck_assert_msg(st == KVE_ERR_INVALID && strstr(kve_last_error(), "window"),
               "too many tokens before the round: %s", kve_last_error());
    kve_state_destroy(s);
    kve_context_destroy(ctx);
}
END_TEST

/* A KVE_SCORED state of 2 rows, 2 layers of 1 head, B = 12, W = 4, r = 4,
 * max_slots 20; row 0 (prompt 2, capacity 16) full and due at its next
 * token, row 1 admitted (prompt 2) and empty. The key cache: 2 rows of one
 * 16-slot page, f32, head_dim 2. */
typedef struct {
    kve_context *ctx;
    kve_state *st;
    kve_state_layout lay;
    float keys[2][16][2];
    kve_score_desc d;
} sd_case;

static void sd_case_open(sd_case *c)
{
    memset(c, 0, sizeof *c);
    c->ctx = ks_context();
    kve_state_desc d = ks_desc(KVE_SCORED, 2, 2, 1, 12, 4, 4, 20);
    c->st = ks_create(c->ctx, &d, &c->lay);
    KT_OK(kve_state_admit(c->st, 0, 7, 2));
    KT_OK(kve_state_admit(c->st, 1, 8, 2));
    uint32_t row = 0, n = 16;
    KT_OK(kve_state_append(c->st, 1, &row, &n, NULL)); /* full, no round yet */
    for (int i = 0; i < 64; i++)
        (&c->keys[0][0][0])[i] = (float)(i % 7) - 3.0f;
    c->d = base_desc();
    c->d.keys.base = c->keys;
    c->d.keys.pages.page_size = 16;
    c->d.keys.pages.n_pages = 2;
    c->d.keys.pages.n_rows = 2;
    c->d.rows = NULL;
    c->d.n_rows = 0;
}

static void sd_case_close(sd_case *c)
{
    kve_state_destroy(c->st);
    kve_context_destroy(c->ctx);
}

/* Every row's info, tables and running digest, for "unchanged". */
typedef struct {
    kve_state_seq_info info[2];
    int32_t tab[2][2 * 20];
    uint64_t digest[2];
} sd_snap;

static void sd_snapshot(sd_case *c, sd_snap *x)
{
    memset(x, 0, sizeof *x);
    for (uint32_t r = 0; r < 2; r++) {
        KT_OK(kve_state_get_seq(c->st, r, &x->info[r]));
        KT_OK(kve_state_read_slots(c->st, r, x->tab[r], c->lay.row_elems));
        KT_OK(kve_state_read_digest(c->st, r, &x->digest[r]));
    }
}

/* kve_state_score_device's argument errors, each with its status and a
 * message naming the argument; a refused call writes no score. */
START_TEST(state_score_device_bad_arguments)
{
    sd_case c;
    sd_case_open(&c);
    enum { ST = 20, SR = 2 * ST, N = 2 * SR };
    float buf[N], was[N];
    for (int i = 0; i < N; i++)
        buf[i] = was[i] = 100.0f + (float)i;
    uint32_t rows[3] = {0, 1, 0}, n_new[3] = {1, 1, 1};
    kve_state *s = c.st;
    kve_score_desc d = c.d, bad;
#define SD_BAD(expr, status, needle)                                                              \
    do {                                                                                          \
        EXPECT_ERR(expr, status, needle);                                                         \
        ck_assert_msg(memcmp(buf, was, sizeof buf) == 0, "%s wrote scores", #expr);               \
    } while (0)
    SD_BAD(kve_state_score_device(NULL, 2, rows, n_new, 0, &d, buf, SR, ST), KVE_ERR_NULL,
           "state is NULL");
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, NULL, buf, SR, ST), KVE_ERR_NULL,
           "desc is NULL");
    SD_BAD(kve_state_score_device(s, 2, NULL, n_new, 0, &d, buf, SR, ST), KVE_ERR_NULL,
           "rows is NULL (n_rows = 2)");
    SD_BAD(kve_state_score_device(s, 2, rows, NULL, 0, &d, buf, SR, ST), KVE_ERR_NULL,
           "n_new is NULL (n_rows = 2)");
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &d, NULL, SR, ST), KVE_ERR_NULL,
           "scores is NULL");
    SD_BAD(kve_state_score_device(s, 3, rows, n_new, 0, &d, buf, SR, ST), KVE_ERR_RANGE,
           "n_rows = 3: more than max_seqs = 2");
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 2, &d, buf, SR, ST), KVE_ERR_RANGE,
           "table_layer = 2: the state has 2 table layers");
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, UINT32_MAX, &d, buf, SR, ST), KVE_ERR_RANGE,
           "table_layer = 4294967295");
    bad = d;
    bad.keys.n_heads = 2;
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &bad, buf, SR, ST), KVE_ERR_RANGE,
           "desc.keys.n_heads = 2: the state has 1 KV heads");
    int32_t cache_rows[2] = {0, 1};
    bad = d;
    bad.cache_rows = cache_rows;
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &bad, buf, SR, ST), KVE_ERR_INVALID,
           "desc.cache_rows is not NULL");
    /* a page table of one row for a call of two: call row 1 reads row 1 */
    int32_t blocks[2] = {0, 1};
    bad = d;
    bad.keys.pages.kind = KVE_PAGES_BLOCK_TABLE;
    bad.keys.pages.block_table = blocks;
    bad.keys.pages.blocks_per_row = 1;
    bad.keys.pages.n_rows = 1;
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &bad, buf, SR, ST), KVE_ERR_RANGE,
           "desc.keys.pages.n_rows = 1: call row i reads row i of the page table, and the call has "
           "n_rows = 2");
    /* the scores of any row: scores_stride_table >= max_slots (20), not
     * just the due row's capacity (16) */
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &d, buf, SR, 16), KVE_ERR_RANGE,
           "scores_stride_table = 16: below max_slots = 20");
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &d, buf, SR - 1, ST), KVE_ERR_RANGE,
           "scores_stride_row = 39: must be >= tables (2) x scores_stride_table (20)");
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &d, buf, SIZE_MAX / 2, ST),
           KVE_ERR_OVERFLOW, "the scores of 2 call rows overflow size_t bytes");
    /* tables x scores_stride_table past size_t: the stride that overflows is named */
    SD_BAD(kve_state_score_device(s, 1, rows, n_new, 0, &d, buf, 0, SIZE_MAX), KVE_ERR_OVERFLOW,
           "scores_stride_table = 18446744073709551615: the state's 2 tables of it overflow");
    bad = d;
    bad.scorer = (kve_scorer)7;
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &bad, buf, SR, ST), KVE_ERR_INVALID,
           "desc.scorer = 7: not a kve_scorer value");
    bad = d;
    bad.weight = NAN;
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &bad, buf, SR, ST), KVE_ERR_INVALID,
           "desc.weight = nan");
    bad = d;
    bad.keys.head_dim = 3;
    SD_BAD(kve_state_score_device(s, 2, rows, n_new, 0, &bad, buf, SR, ST), KVE_ERR_RANGE,
           "desc.keys.head_dim = 3");
    /* a desc that is invalid is refused even when no row is due */
    SD_BAD(kve_state_score_device(s, 0, rows, n_new, 0, &bad, buf, SR, ST), KVE_ERR_RANGE,
           "desc.keys.head_dim = 3");
#undef SD_BAD
    /* Accepted: one row (scores_stride_row unread), n_rows 0, a flat key
     * cache of fewer page-table rows than call rows (it has none). Rows
     * that are padding (their rows[i] unread), not active, not due or
     * past the scored rules are skipped: nothing written. */
    KT_OK(kve_state_score_device(s, 1, rows + 1, n_new, 0, &d, buf, 0, ST));
    KT_OK(kve_state_score_device(s, 0, NULL, NULL, 0, &d, buf, 0, ST));
    bad = d;
    bad.keys.pages.kind = KVE_PAGES_FLAT;
    bad.keys.pages.n_rows = 0;
    uint32_t skip_rows[2] = {UINT32_MAX, 1}, skip_new[2] = {0, 3};
    KT_OK(kve_state_score_device(s, 2, skip_rows, skip_new, 0, &bad, buf, SR, ST));
    uint32_t two_rounds[2] = {5, 17}; /* row 0: 2 rounds; row 1: 16 tokens before its round */
    rows[1] = 1;
    KT_OK(kve_state_score_device(s, 2, rows, two_rounds, 1, &d, buf, SR, ST));
    ck_assert_msg(memcmp(buf, was, sizeof buf) == 0, "skipped rows were written");
    /* row 0 due: its layer-1 table written, as kve_state_score writes it */
    KT_OK(kve_state_score_device(s, 2, rows, n_new, 1, &d, buf, SR, ST));
    ck_assert_msg(memcmp(buf, was, sizeof buf) != 0, "the due row was not scored");
    float ref[N];
    memcpy(ref, was, sizeof ref);
    KT_OK(kve_state_score(s, 2, rows, n_new, 1, &d, ref, SR, ST));
    ck_assert_msg(memcmp(buf, ref, sizeof buf) == 0, "differs from kve_state_score");
    sd_case_close(&c);
}
END_TEST

/* Issue 47 item 8, what the header now says: on a state without
 * KVE_SCORED created with desc.score_group >= 1, kve_state_score_device
 * scores the due rows as on a scored state (the append reads no scores
 * there); with score_group 0 it is refused naming desc.score_group;
 * n_rows = 0 checks desc and writes nothing. */
START_TEST(score_device_unscored_state)
{
    sd_case c;
    sd_case_open(&c);
    enum { ST = 20, SR = 2 * ST, N = 2 * SR };
    kve_state_desc pd = ks_desc(0, 2, 2, 1, 12, 4, 4, 20);
    kve_state_layout lay;
    kve_state *none = ks_create(c.ctx, &pd, &lay);
    pd.score_group = 1; /* 0: no scoring scratch on a state without KVE_SCORED */
    kve_state *plain = ks_create(c.ctx, &pd, &lay);
    KT_OK(kve_state_admit(plain, 0, 7, 2));
    KT_OK(kve_state_admit(plain, 1, 8, 2));
    uint32_t row = 0, fill = 16, rows[2] = {0, 1}, n_new[2] = {1, 1};
    KT_OK(kve_state_append(plain, 1, &row, &fill, NULL));
    float scored[N], unscored[N], was[N];
    for (int i = 0; i < N; i++)
        scored[i] = unscored[i] = was[i] = 100.0f + (float)i;
    KT_OK(kve_state_score_device(c.st, 2, rows, n_new, 1, &c.d, scored, SR, ST));
    KT_OK(kve_state_score_device(plain, 2, rows, n_new, 1, &c.d, unscored, SR, ST));
    ck_assert_msg(memcmp(scored, was, sizeof was) != 0, "the due row was not scored");
    ck_assert_msg(memcmp(scored, unscored, sizeof was) == 0, "the unscored state differs");
    EXPECT_ERR(kve_state_score_device(none, 2, rows, n_new, 1, &c.d, was, SR, ST),
               KVE_ERR_RANGE, "desc.score_group = 0");
    kve_state_destroy(none);
    KT_OK(kve_state_score_device(plain, 0, NULL, NULL, 0, &c.d, unscored, SR, ST));
    ck_assert_msg(memcmp(scored, unscored, sizeof was) == 0, "n_rows = 0 wrote scores");
    kve_score_desc bad = c.d;
    bad.scorer = (kve_scorer)0;
    EXPECT_ERR(kve_state_score_device(plain, 0, NULL, NULL, 0, &bad, unscored, SR, ST),
               KVE_ERR_INVALID, "desc.scorer = 0");
    kve_state_destroy(plain);
    sd_case_close(&c);
}
END_TEST

/* A KVE_SCORED state's kve_state_append_device: the scores' pointer and
 * layout for any row (max_slots), and on the CPU a row past the scored
 * rules refused with the planner's reason 7, the state unchanged. */
START_TEST(scored_append_device_errors)
{
    sd_case c;
    sd_case_open(&c);
    enum { ST = 20, SR = 2 * ST };
    float sc[2 * SR];
    for (int i = 0; i < 2 * SR; i++)
        sc[i] = (float)(i % 11);
    uint32_t rows[2] = {0, 1}, n_new[2] = {1, 1};
    kve_step_buffers out;
    memset(&out, 0, sizeof out);
    out.scores = sc;
    out.scores_stride_row = SR;
    out.scores_stride_table = ST;
    sd_snap a, b;
    sd_snapshot(&c, &a);
    EXPECT_ERR(kve_state_append_device(c.st, 2, rows, n_new, 1, NULL), KVE_ERR_NULL,
               "out is NULL");
    out.scores = NULL;
    EXPECT_ERR(kve_state_append_device(c.st, 2, rows, n_new, 1, &out), KVE_ERR_NULL,
               "out->scores is NULL");
    out.scores = sc;
    out.scores_stride_table = 16; /* row 0's capacity, but any row may be due */
    EXPECT_ERR(kve_state_append_device(c.st, 2, rows, n_new, 1, &out), KVE_ERR_RANGE,
               "out->scores_stride_table = 16: below the 20 slots");
    out.scores_stride_table = ST;
    out.scores_stride_row = SR - 1;
    EXPECT_ERR(kve_state_append_device(c.st, 2, rows, n_new, 1, &out), KVE_ERR_RANGE,
               "out->scores_stride_row = 39");
    out.scores_stride_row = SIZE_MAX / 2;
    EXPECT_ERR(kve_state_append_device(c.st, 2, rows, n_new, 1, &out), KVE_ERR_OVERFLOW,
               "overflow size_t bytes");
    out.scores_stride_row = SR;
    sd_snapshot(&c, &b);
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "a refused call changed the state");
    /* row 0 with 5 tokens runs two rounds (r = 4); row 1 with 17 tokens
     * takes 16 > W = 4 before its round: reason 7 on the CPU, at once */
    const uint32_t bad_new[2][2] = {{5, 1}, {1, 17}};
    for (int k = 0; k < 2; k++) {
        char want[160];
        snprintf(want, sizeof want, "rows[%d] = %d (n_new[%d] = %u) would run two rounds, or take "
                 "more than the window W", k, k, k, bad_new[k][k]);
        EXPECT_ERR(kve_state_append_device(c.st, 2, rows, bad_new[k], 17, &out), KVE_ERR_INVALID,
                   want);
        sd_snapshot(&c, &b);
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "refused call %d changed the state", k);
    }
    /* A NaN at a candidate of row 0's round (layer 1, slot 3): the
     * planner's refusal, on the CPU at once, before anything changed
     * (tests/core/test_refusals.c checks its outputs) */
    sc[ST + 3] = NAN;
    EXPECT_ERR(kve_state_append_device(c.st, 2, rows, n_new, 1, &out), KVE_ERR_INVALID,
               "rows[0] = 0 (n_new[0] = 1) has a NaN in out->scores at a candidate of its round, "
               "where a score must be a number (+-inf allowed): table 1, slot 3");
    sd_snapshot(&c, &b);
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "a NaN candidate's refusal changed the state");
    KT_OK(kve_context_synchronize(c.ctx));
    sc[ST + 3] = 3;
    /* the same call within the rules runs row 0's round */
    KT_OK(kve_state_append_device(c.st, 2, rows, n_new, 1, &out));
    sd_snapshot(&c, &b);
    ck_assert_uint_eq(b.info[0].round, a.info[0].round + 1);
    ck_assert_uint_eq(b.info[1].n_tokens, 1);
    sd_case_close(&c);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(errors_state, state_bad_input),
        KVE_TEST(errors_state, rebuild_refused_keeps_row),
        KVE_TEST(errors_state, cache_write_bad_input),
        KVE_TEST(errors_state, cache_write_type_errors),
        KVE_TEST(errors_state, scored_state_errors),
        KVE_TEST(errors_state, state_score_bad_arguments),
        KVE_TEST(errors_state, state_score_device_bad_arguments),
        KVE_TEST(errors_state, score_device_unscored_state),
        KVE_TEST(errors_state, scored_append_device_errors),
    };
    const kve_suite_spec spec = {"errors_state", 60, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
