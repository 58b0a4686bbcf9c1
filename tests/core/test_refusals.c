/* test_refusals.c — refusals that must leave their outputs and memory as the
 * contract says (issue 60, "Contract gaps"): a NaN score's refusal of
 * kve_state_append_device maps the call to -1 and empties its move lists
 * like every other refusal; move-list views whose span passes 2^64 bytes are
 * KVE_ERR_OVERFLOW; a handle of the wrong kind is refused by name. */
#include <math.h>
#include <stdio.h>

#include "kve_suite.h"
#include "kve_test_state.h"

/* A KVE_SCORED state of 2 rows, 2 layers of 1 head, B = 12, W = 4, r = 4,
 * max_slots 20; row 0 (prompt 2, capacity 16) full and due at its next
 * token, row 1 admitted (prompt 2) and empty. */
static kve_state *nan_case(kve_context *ctx)
{
    kve_state_desc d = ks_desc(KVE_SCORED, 2, 2, 1, 12, 4, 4, 20);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    KT_OK(kve_state_admit(st, 0, 7, 2));
    KT_OK(kve_state_admit(st, 1, 8, 2));
    uint32_t row = 0, n = 16;
    KT_OK(kve_state_append(st, 1, &row, &n, NULL));
    return st;
}

/* kve_state_append_device with a NaN at a candidate of row 0's round (table
 * 1, slot 3) on the CPU: KVE_ERR_INVALID, the state unchanged, and the
 * step's outputs those of every refusal (docs/INTEGRATION.md "CUDA graphs":
 * tokens and padding -1, move lists empty), whatever the previous step
 * left in them. */
START_TEST(nan_refusal_resets_outputs)
{
    kve_context *ctx = ks_context();
    kve_state *st = nan_case(ctx);
    enum { ST = 20, SR = 2 * ST, MT = 2 }; /* MT: the shape's n_rows x max_new */
    float sc[2 * SR];
    for (int i = 0; i < 2 * SR; i++)
        sc[i] = (float)(i % 11);
    sc[ST + 3] = NAN;
    int64_t map[2 * MT];
    int32_t mv[2 * 2 * 4 * 2];
    uint32_t n_mv[2 * 2];
    for (int i = 0; i < 2 * MT; i++)
        map[i] = 77; /* the previous step's */
    for (int i = 0; i < 4; i++)
        n_mv[i] = 3;
    kve_step_buffers out = {map, MT, mv, n_mv, 2, 4, sc, SR, ST};
    kve_state_seq_info a, b;
    KT_OK(kve_state_get_seq(st, 0, &a));
    uint32_t rows[2] = {0, 1}, n_new[2] = {1, 1};
    EXPECT_ERR(kve_state_append_device(st, 2, rows, n_new, 1, &out), KVE_ERR_INVALID,
               "rows[0] = 0 (n_new[0] = 1) has a NaN in out->scores at a candidate of its round");
    KT_OK(kve_state_get_seq(st, 0, &b));
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "the NaN refusal changed row 0");
    for (int i = 0; i < 2 * MT; i++)
        ck_assert_msg(map[i] == -1, "slot_mapping[%d] = %lld after a refusal, not -1", i,
                      (long long)map[i]);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(n_mv[i] == 0, "n_moves[%d] = %u after a refusal, not 0", i, n_mv[i]);
    /* the same call without the NaN runs row 0's round */
    sc[ST + 3] = 3;
    KT_OK(kve_state_append_device(st, 2, rows, n_new, 1, &out));
    KT_OK(kve_state_get_seq(st, 0, &b));
    ck_assert_uint_eq(b.round, a.round + 1);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Issue 60 item 2: two table layers, out->max_rows = 2^31 and
 * out->max_moves = 2^31 (each within its own bound): the move lists span
 * 2 x 2^31 x 2^31 x 2 int32, past 2^64 bytes, so layer 1's lists would
 * wrap onto layer 0's. Refused as every other stride: KVE_ERR_OVERFLOW
 * naming out->max_moves, before anything is written. */
START_TEST(move_list_span_overflow)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(0, 2, 2, 1, 12, 4, 4, 20);
    d.max_draft = 2;
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    ck_assert_uint_eq(lay.table_layers, 2);
    KT_OK(kve_state_admit(st, 0, 7, 2));
    int32_t mv[4] = {9, 9, 9, 9};
    uint32_t n_mv[4] = {9, 9, 9, 9};
    kve_step_buffers out = {NULL, 0, mv, n_mv, 1u << 31, 1u << 31, NULL, 0, 0};
    uint32_t row = 0, one = 1;
    kve_state_seq_info a, b;
    KT_OK(kve_state_get_seq(st, 0, &a));
    EXPECT_ERR(kve_state_append(st, 1, &row, &one, &out), KVE_ERR_OVERFLOW,
               "out->max_moves = 2147483648: 2 tables x out->max_rows = 2147483648");
    EXPECT_ERR(kve_state_append_device(st, 1, &row, &one, 1, &out), KVE_ERR_OVERFLOW,
               "out->max_moves = 2147483648");
    EXPECT_ERR(kve_state_draft(st, 1, &row, &one, 1, &out), KVE_ERR_OVERFLOW,
               "out->max_moves = 2147483648");
    KT_OK(kve_state_get_seq(st, 0, &b));
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "a refused append changed the row");
    for (int i = 0; i < 4; i++)
        ck_assert_msg(n_mv[i] == 9 && mv[i] == 9, "a refused append wrote list %d", i);
    /* max_rows 2^30: 2^63 bytes a layer, 2^64 in all, still overflows;
     * max_rows 2 with max_moves 2^31 fits and runs */
    out.max_rows = 1u << 30;
    EXPECT_ERR(kve_state_append(st, 1, &row, &one, &out), KVE_ERR_OVERFLOW,
               "out->max_moves = 2147483648: 2 tables x out->max_rows = 1073741824");
    out.max_rows = 2;
    KT_OK(kve_state_append(st, 1, &row, &one, &out));
    /* no round: call row 0's list in each layer (n_moves 0 and 2) emptied,
     * the lists of row 1 of max_rows untouched */
    ck_assert_msg(n_mv[0] == 0 && n_mv[1] == 9 && n_mv[2] == 0 && n_mv[3] == 9,
                  "n_moves %u %u %u %u", n_mv[0], n_mv[1], n_mv[2], n_mv[3]);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Issue 60 item 4: bindings type every handle alike, so a context reaches
 * a function that takes a state (and the other way round). The check finds
 * the pointer in the registry of handles by its address: the wrong kind is
 * refused by name, and nothing is read through the pointer (before, the
 * check read the state's handle field past the context's allocation: ASan
 * heap-buffer-overflow). A pointer that is neither is refused too. */
START_TEST(handle_of_the_wrong_kind)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(0, 2, 2, 1, 12, 4, 4, 20);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    kve_state_seq_info info;
    kve_state *as_state = (kve_state *)(void *)ctx;
    char want[96];
    snprintf(want, sizeof want, "state (%p): a kve_context, not a state", (void *)ctx);
    EXPECT_ERR(kve_state_get_seq(as_state, 0, &info), KVE_ERR_INVALID, want);
    EXPECT_ERR(kve_state_destroy(as_state), KVE_ERR_INVALID, want);
    kve_backend b;
    kve_context *as_ctx = (kve_context *)(void *)st;
    snprintf(want, sizeof want, "ctx (%p): a kve_state, not a context", (void *)st);
    EXPECT_ERR(kve_context_get_backend(as_ctx, &b), KVE_ERR_INVALID, want);
    EXPECT_ERR(kve_context_destroy(as_ctx), KVE_ERR_INVALID, want);
    uint64_t junk[8] = {0};
    EXPECT_ERR(kve_state_get_seq((kve_state *)(void *)junk, 0, &info), KVE_ERR_INVALID,
               "not a live state (not made by kve_state_create");
    /* both still live */
    KT_OK(kve_state_get_seq(st, 0, &info));
    KT_OK(kve_context_get_backend(ctx, &b));
    KT_OK(kve_state_destroy(st));
    snprintf(want, sizeof want, "ctx (%p): a destroyed kve_state, not a context", (void *)st);
    EXPECT_ERR(kve_context_destroy(as_ctx), KVE_ERR_INVALID, want);
    kve_context_destroy(ctx);
}
END_TEST

/* Issue 60 item 4: desc.score_group past the query heads a scoring call
 * takes (256 a table: score_group x the KV heads a shared table holds) is
 * refused at kve_state_create and kve_state_memory_size, naming it, not
 * only at the first scoring call. */
START_TEST(score_group_refused_at_create)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(KVE_SCORED, 2, 2, 1, 12, 4, 4, 20);
    kve_state *st = NULL;
    size_t bytes = 0;
    d.score_group = 257;
    EXPECT_ERR(kve_state_create(ctx, &d, NULL, 0, &st), KVE_ERR_RANGE,
               "desc.score_group = 257: a table's query heads (257 x 1 KV heads) exceed 256");
    ck_assert_ptr_null(st);
    EXPECT_ERR(kve_state_memory_size(ctx, &d, &bytes), KVE_ERR_RANGE, "desc.score_group = 257");
    d = ks_desc(KVE_SCORED | KVE_SHARED_HEADS, 2, 2, 2, 12, 4, 4, 20); /* 2 KV heads a table */
    d.score_group = 129;
    EXPECT_ERR(kve_state_create(ctx, &d, NULL, 0, &st), KVE_ERR_RANGE,
               "desc.score_group = 129: a table's query heads (129 x 2 KV heads) exceed 256");
    d.score_group = 128; /* 256: the most */
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));
    kve_state_destroy(st);
    d = ks_desc(KVE_SCORED, 2, 2, 1, 12, 4, 4, 20);
    d.score_group = 256;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Issue 60 item 4: kve_alloc's buffers belong to their context. kve_free
 * takes a buffer only from the context that gave it, once; the buffers
 * still allocated at kve_context_destroy are freed with it (the sanitize
 * build's LeakSanitizer sees none lost), and kve_free after that is
 * refused naming the destroyed context. Before, another context's free
 * returned KVE_OK and a second free was a double free. */
START_TEST(alloc_belongs_to_its_context)
{
    kve_context *a = ks_context(), *b = ks_context();
    void *buf = NULL, *kept = NULL;
    KT_OK(kve_alloc(a, 100, &buf));
    EXPECT_ERR(kve_free(b, buf), KVE_ERR_INVALID, "not a buffer kve_alloc gave this context");
    KT_OK(kve_free(a, buf));
    EXPECT_ERR(kve_free(a, buf), KVE_ERR_INVALID, "not a buffer kve_alloc gave this context");
    KT_OK(kve_alloc(a, 64, &kept));
    memset(kept, 7, 64);
    KT_OK(kve_context_destroy(a)); /* frees kept */
    EXPECT_ERR(kve_free(a, kept), KVE_ERR_INVALID, "this context was destroyed");
    EXPECT_ERR(kve_free(b, kept), KVE_ERR_INVALID, "not a buffer kve_alloc gave this context");
    kve_context_destroy(b);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(refusals, nan_refusal_resets_outputs),
        KVE_TEST(refusals, move_list_span_overflow),
        KVE_TEST(refusals, handle_of_the_wrong_kind),
        KVE_TEST(refusals, score_group_refused_at_create),
        KVE_TEST(refusals, alloc_belongs_to_its_context),
    };
    const kve_suite_spec spec = {"refusals", 60, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
