/* test_state_draft.c — speculative steps on the CPU backend (issue 38,
 * deliverable 5): drafts of random lengths and acceptance committed by an
 * append equal, bit for bit, a state that only saw the accepted appends,
 * also where the drafts reached a round (kve_state_draft.h); the drafts'
 * mapping is capacity + i; kve_cache_write's src_slots; every refusal. */
#include "kve_state_draft.h"

static const uint32_t kDraftModes[] = {
    0,
    KVE_PERSISTENT,
    KVE_SHARED_HEADS,
    KVE_SHARED_LAYERS | KVE_PERSISTENT,
    KVE_SHARED_HEADS | KVE_SHARED_LAYERS,
};
#define N_DRAFT_MODES (sizeof kDraftModes / sizeof kDraftModes[0])

/* Every mode, commits eager (even _i) and planned on the device (odd). */
START_TEST(draft_commit_equals_accepted)
{
    kve_context *ctx = ks_context();
    kd_counts seen = kd_run(ctx, kDraftModes[_i / 2], 0xd7a + (uint64_t)_i, _i % 2, 300);
    ck_assert_uint_gt(seen.drafts_past_room, 20);
    ck_assert_uint_gt(seen.commits_round, 20);
    ck_assert_uint_gt(seen.rejected, 50);
    kve_context_destroy(ctx);
}
END_TEST

/* A state with draft slots, rows 0 and 1 admitted (1 with 5 tokens). */
static kve_state *draft_state(kve_context *ctx, uint32_t max_draft, ks_step *step)
{
    kve_state_desc d = ks_desc(0, 3, 1, 2, 8, 2, 4, 20);
    d.max_draft = max_draft;
    kve_state *st = NULL;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));
    KT_OK(kve_state_admit(st, 0, 11, 0));
    KT_OK(kve_state_admit(st, 1, 12, 0));
    uint32_t row = 1, five = 5;
    KT_OK(kve_state_append(st, 1, &row, &five, NULL));
    ks_step_init(step, st, 8, 3, 4);
    return st;
}

/* A KVE_SCORED state's drafts run no round, so the scored rules (one round,
 * at most W tokens before it) do not apply: a full row drafts more than r
 * tokens, and nothing changes (review of issue 39: reason 7 refused it). */
START_TEST(draft_on_scored_state)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(KVE_SCORED, 3, 1, 2, 8, 2, 2, 20);
    d.max_draft = 6;
    kve_state *st = NULL;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));
    KT_OK(kve_state_admit(st, 0, 11, 3));
    kve_state_seq_info before, after;
    KT_OK(kve_state_get_seq(st, 0, &before));
    uint32_t row = 0, fill = before.capacity, six = 6;
    KT_OK(kve_state_append(st, 1, &row, &fill, NULL)); /* full: the next token rounds */
    KT_OK(kve_state_get_seq(st, 0, &before));
    ck_assert_uint_eq(before.n_valid, before.capacity);
    ks_step step;
    ks_step_init(&step, st, 8, 3, 4);
    KT_OK(kve_state_draft(st, 1, &row, &six, 6, &step.b));
    KT_OK(kve_state_get_seq(st, 0, &after));
    ck_assert_mem_eq(&before, &after, sizeof before);
    kve_state_destroy(st);
    ks_step_free(&step);
    kve_context_destroy(ctx);
}
END_TEST

/* Issue 46 item 2: drafts are padded as kve_state_append_device pads its
 * shape: every entry of the captured shape (n_rows x max_draft) that
 * carries no draft maps to -1, so a captured write of the whole shape
 * skips it. */
START_TEST(draft_padding)
{
    kve_context *ctx = ks_context();
    ks_step step;
    kve_state *st = draft_state(ctx, 3, &step);
    uint32_t rows[2] = {1, 0}, n[2] = {1, 0};
    for (size_t i = 0; i < 8 * 2; i++)
        step.b.slot_mapping[i] = 7;
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, 1, &info));
    KT_OK(kve_state_draft(st, 2, rows, n, 3, &step.b));
    for (uint32_t h = 0; h < 2; h++) {
        ck_assert_int_eq(ks_map_at(&step, h, 0), (int64_t)info.capacity);
        for (uint32_t t = 1; t < 6; t++)
            ck_assert_msg(ks_map_at(&step, h, t) == -1, "head %u token %u maps to %lld, not -1",
                          h, t, (long long)ks_map_at(&step, h, t));
        for (uint32_t t = 6; t < 8; t++) /* past the shape: untouched */
            ck_assert_int_eq(ks_map_at(&step, h, t), 7);
    }
    ks_step_free(&step);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(draft_refusals)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(0, 3, 1, 2, 8, 2, 4, 20);
    kve_state *st = NULL;
    d.max_draft = 0x7fffffffu - 19;
    EXPECT_ERR(kve_state_create(ctx, &d, NULL, 0, &st), KVE_ERR_RANGE, "desc.max_draft");
    ks_step step;
    st = draft_state(ctx, 0, &step);
    uint32_t rows[3] = {0, 1, 2}, n[3] = {1, 2, 0};
    EXPECT_ERR(kve_state_draft(st, 2, rows, n, 0, &step.b), KVE_ERR_INVALID, "max_draft = 0");
    kve_state_destroy(st);
    ks_step_free(&step);
    st = draft_state(ctx, 4, &step);
    EXPECT_ERR(kve_state_draft(NULL, 2, rows, n, 4, &step.b), KVE_ERR_NULL, "state");
    EXPECT_ERR(kve_state_draft(st, 2, rows, n, 5, &step.b), KVE_ERR_RANGE, "max_draft = 5");
    EXPECT_ERR(kve_state_draft(st, 4, rows, n, 4, &step.b), KVE_ERR_RANGE, "n_rows = 4");
    EXPECT_ERR(kve_state_draft(st, 2, NULL, n, 4, &step.b), KVE_ERR_NULL, "rows");
    EXPECT_ERR(kve_state_draft(st, 2, rows, NULL, 4, &step.b), KVE_ERR_NULL, "n_draft");
    step.b.max_rows = 1;
    EXPECT_ERR(kve_state_draft(st, 2, rows, n, 4, &step.b), KVE_ERR_RANGE, "out->max_rows");
    step.b.max_rows = 3;
    /* data checks (the planner's): inactive row, too many drafts, a row
     * twice, past max_tokens; each leaves the state as it was */
    kve_state_seq_info before, after;
    KT_OK(kve_state_get_seq(st, 1, &before));
    n[2] = 1;
    EXPECT_ERR(kve_state_draft(st, 3, rows, n, 4, &step.b), KVE_ERR_INVALID,
               "rows[2] = 2 (n_draft[2] = 1) holds no sequence");
    n[2] = 0;
    n[1] = 3;
    EXPECT_ERR(kve_state_draft(st, 2, rows, n, 2, &step.b), KVE_ERR_RANGE,
               "n_draft[1] = 3) has n_draft[i] > max_draft");
    uint32_t twice[2] = {1, 1};
    EXPECT_ERR(kve_state_draft(st, 2, twice, n, 4, &step.b), KVE_ERR_INVALID, "listed twice");
    step.b.max_tokens = 3;
    EXPECT_ERR(kve_state_draft(st, 2, rows, n, 4, &step.b), KVE_ERR_RANGE, "max_tokens");
    step.b.max_tokens = 8;
    KT_OK(kve_state_get_seq(st, 1, &after));
    ck_assert(!memcmp(&before, &after, sizeof before));
    /* accepted: mapping capacity + i, move lists emptied, padding allowed */
    for (size_t i = 0; i < 8 * 2; i++)
        step.b.slot_mapping[i] = 99;
    for (size_t i = 0; i < 3 * 2; i++)
        step.b.n_moves[i] = 77;
    n[0] = 0;
    n[1] = 4;
    rows[0] = 12345; /* padding: not read */
    KT_OK(kve_state_draft(st, 2, rows, n, 4, &step.b));
    for (uint32_t i = 0; i < 4; i++)
        for (uint32_t h = 0; h < 2; h++)
            ck_assert_int_eq(ks_map_at(&step, h, i), (int64_t)before.capacity + i);
    ck_assert_int_eq(step.b.slot_mapping[8], -1); /* the shape's padding (row 0): -1 */
    for (size_t i = 0; i < 2 * 2; i++)
        ck_assert_uint_eq(step.b.n_moves[i], 0);
    KT_OK(kve_state_get_seq(st, 1, &after));
    ck_assert(!memcmp(&before, &after, sizeof before));
    ck_assert_uint_eq(after.draft_first, after.capacity);
    ck_assert_uint_eq(after.max_draft, 4);
    /* no outputs at all: a no-op that still checks */
    rows[0] = 0;
    n[1] = 3;
    KT_OK(kve_state_draft(st, 2, rows, n, 4, NULL));
    EXPECT_ERR(kve_state_draft(st, 2, rows, n, 2, NULL), KVE_ERR_RANGE, "max_draft");
    ks_step_free(&step);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* kve_cache_write's src_slots: entries copied from other slots of their
 * row, as stored, -1 skipped, no source tensor needed; bad source slots
 * refused naming desc.src_slots. */
START_TEST(cache_write_src_slots)
{
    kve_context *ctx = ks_context();
    enum { PS = 8, H = 2, ROWS = 2 };
    uint16_t cache[ROWS][PS][H];
    for (uint32_t r = 0; r < ROWS; r++)
        for (uint32_t s = 0; s < PS; s++)
            for (uint32_t h = 0; h < H; h++)
                cache[r][s][h] = (uint16_t)(r * 1000 + s * 10 + h);
    int64_t slots[3][H] = {{0, 1}, {2, 3}, {4, -1}};
    int64_t from[3][H] = {{6, 7}, {-1, 5}, {7, 6}};
    int32_t token_row[3] = {0, 1, 1};
    /* moves in the same call: row 1, head 0 moves slot 1 to slot 0 */
    int32_t moves[ROWS][H][1][2] = {{{{0, 0}}, {{0, 0}}}, {{{1, 0}}, {{0, 0}}}};
    uint32_t n_moves[ROWS][H] = {{0, 0}, {1, 0}};
    kve_cache_write_desc d;
    memset(&d, 0, sizeof d);
    d.n_tokens = 3;
    d.n_heads = H;
    d.n_caches = 1;
    d.dst[0] = cache;
    d.part[0].src_dtype = d.part[0].dst_dtype = KVE_DTYPE_F16;
    d.part[0].dim = 1; /* converting parts copy stored bytes too: no conversion here */
    d.layout = KVE_LAYOUT_NHD;
    d.pages.page_size = PS;
    d.pages.n_pages = ROWS;
    d.slots = &slots[0][0];
    d.slots_stride_token = H;
    d.slots_stride_head = 1;
    d.token_row = token_row;
    d.pages.n_rows = ROWS;
    d.pages.kind = KVE_PAGES_NONE;
    d.moves = &moves[0][0][0][0];
    d.n_moves = &n_moves[0][0];
    d.n_move_rows = ROWS;
    d.max_moves = 1;
    d.moves_stride_row = H;
    d.moves_stride_head = 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_NULL, "desc.src[0] is NULL");
    d.src_slots = &from[0][0];
    from[2][0] = PS;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.src_slots[token 2][head 0] = 8");
    from[2][0] = 7;
    KT_OK(kve_cache_write(ctx, &d));
    ck_assert_uint_eq(cache[0][0][0], 6 * 10 + 0);
    ck_assert_uint_eq(cache[0][1][1], 7 * 10 + 1);
    ck_assert_uint_eq(cache[1][2][0], 1000 + 2 * 10 + 0); /* -1: skipped */
    ck_assert_uint_eq(cache[1][3][1], 1000 + 5 * 10 + 1);
    ck_assert_uint_eq(cache[1][4][0], 1000 + 7 * 10 + 0);
    ck_assert_uint_eq(cache[1][4][1], 1000 + 4 * 10 + 1); /* slot -1: skipped */
    ck_assert_uint_eq(cache[1][0][0], 1000 + 1 * 10 + 0); /* the move ran */
    ck_assert_uint_eq(cache[0][2][0], 2 * 10 + 0);        /* untouched */
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(draft, draft_commit_equals_accepted, 0, 2 * N_DRAFT_MODES),
        KVE_TEST(draft, draft_refusals),
        KVE_TEST(draft, draft_padding),
        KVE_TEST(draft, draft_on_scored_state),
        KVE_TEST(draft, cache_write_src_slots),
    };
    const kve_suite_spec spec = {"state_draft", 120, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
