/* test_state_planned.c — the planned calls (kve_state_append_device,
 * kve_state_draft) on the CPU backend as a device runs them (issue 47):
 * a refused call writes the outputs a device writes (its tokens and the
 * shape's padding -1, its move lists emptied); the work follows the
 * tokens, not max_new; a padding call row's move row is not read by
 * kve_cache_write. */
#include "kve_state_test.h"

/* A state (one layer, two heads, r = @p interval) with rows 0 and 1
 * admitted (row 1 holding five tokens), step buffers of 8 tokens, 3 rows
 * and max_new 8. */
static kve_state *planned_state(kve_context *ctx, uint32_t interval, ks_step *step)
{
    kve_state_desc d = ks_desc(0, 3, 1, 2, 8, 2, interval, 20);
    d.max_draft = 4;
    kve_state *st = NULL;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &st));
    KT_OK(kve_state_admit(st, 0, 11, 0));
    KT_OK(kve_state_admit(st, 1, 12, 0));
    uint32_t row = 1, five = 5;
    KT_OK(kve_state_append(st, 1, &row, &five, NULL));
    ks_step_init(step, st, 8, 3, 8);
    return st;
}

/* Stale outputs, as a previous step left them. */
static void planned_stale(ks_step *s)
{
    for (size_t i = 0; i < (size_t)s->tl * s->b.max_tokens * s->th; i++)
        s->b.slot_mapping[i] = 5;
    for (size_t i = 0; i < (size_t)s->tl * s->b.max_rows * s->th; i++)
        s->b.n_moves[i] = 1;
}

/* Mapping entries [0, n) of every table are -1; the move lists of call
 * rows [0, rows) are empty. */
static void planned_expect_refused(const ks_step *s, uint32_t n, uint32_t rows, const char *what)
{
    for (uint32_t t = 0; t < s->tl * s->th; t++)
        for (uint32_t k = 0; k < n; k++)
            ck_assert_msg(ks_map_at(s, t, k) == -1, "%s: table %u token %u maps to %lld, not -1",
                          what, t, k, (long long)ks_map_at(s, t, k));
    for (uint32_t l = 0; l < s->tl; l++)
        for (uint32_t i = 0; i < rows * s->th; i++)
            ck_assert_msg(s->b.n_moves[(size_t)l * s->b.max_rows * s->th + i] == 0,
                          "%s: move list %u of layer %u holds %u pairs, not 0", what, i, l,
                          s->b.n_moves[(size_t)l * s->b.max_rows * s->th + i]);
}

/* Issue 47 item 1: a refused planned call maps its tokens (and the shape's
 * padding) to -1 and empties its move lists on the CPU as on a device,
 * and still returns its error; the state stays as it was. */
START_TEST(planned_refused_outputs)
{
    kve_context *ctx = ks_context();
    ks_step step;
    kve_state *st = planned_state(ctx, 4, &step);
    kve_state_seq_info before[2], after[2];
    for (uint32_t r = 0; r < 2; r++)
        KT_OK(kve_state_get_seq(st, r, &before[r]));
    static const struct {
        uint32_t rows[2], n_new[2], max_new, draft, tokens;
        kve_status want;
        const char *msg;
    } cases[] = {
        /* an inactive row; one wave */
        {{0, 2}, {1, 1}, 1, 0, 2, KVE_ERR_INVALID, "rows[1] = 2 (n_new[1] = 1) holds no sequence"},
        /* a row twice; padding of the shape past the tokens */
        {{1, 1}, {1, 1}, 3, 0, 6, KVE_ERR_INVALID, "listed twice"},
        /* too many tokens in a call of two waves (max_new 4 > r = 4 - 1) */
        {{0, 1}, {1, 9}, 4, 0, 8, KVE_ERR_RANGE, "n_new[1] = 9) has n_new[i] > max_new"},
        /* max_new 0: no wave, the refused token still -1 (found by fuzz_state) */
        {{0, 1}, {1, 0}, 0, 0, 1, KVE_ERR_RANGE, "n_new[0] = 1) has n_new[i] > max_new"},
        /* past max_tokens */
        {{0, 1}, {4, 5}, 8, 0, 8, KVE_ERR_RANGE, "max_tokens"},
        /* drafts: an inactive row, a row twice, too many drafts */
        {{2, 0}, {1, 2}, 2, 1, 4, KVE_ERR_INVALID, "holds no sequence"},
        {{0, 0}, {1, 1}, 1, 1, 2, KVE_ERR_INVALID, "listed twice"},
        {{0, 1}, {1, 3}, 2, 1, 4, KVE_ERR_RANGE, "has n_draft[i] > max_draft"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        planned_stale(&step);
        kve_status got =
            cases[k].draft
                ? kve_state_draft(st, 2, cases[k].rows, cases[k].n_new, cases[k].max_new, &step.b)
                : kve_state_append_device(st, 2, cases[k].rows, cases[k].n_new, cases[k].max_new,
                                          &step.b);
        ck_assert_msg(got == cases[k].want, "case %zu: status %d, want %d (%s)", k, got,
                      cases[k].want, kve_last_error());
        ck_assert_msg(strstr(kve_last_error(), cases[k].msg), "case %zu: '%s' lacks '%s'", k,
                      kve_last_error(), cases[k].msg);
        char what[32];
        snprintf(what, sizeof what, "case %zu", k);
        planned_expect_refused(&step, cases[k].tokens, 2, what);
        for (uint32_t r = 0; r < 2; r++) {
            KT_OK(kve_state_get_seq(st, r, &after[r]));
            ck_assert(!memcmp(&before[r], &after[r], sizeof before[r]));
        }
    }
    /* the control: accepted, a real mapping */
    uint32_t rows[2] = {0, 1}, n_new[2] = {1, 1};
    planned_stale(&step);
    KT_OK(kve_state_append_device(st, 2, rows, n_new, 1, &step.b));
    ck_assert_int_eq(ks_map_at(&step, 0, 0), 0);
    ck_assert_int_eq(ks_map_at(&step, 0, 1), 5);
    ks_step_free(&step);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Issue 47 item 3: one token appended with max_new = 2^31-1 (no move lists,
 * r = 1: as many waves as max_new says, were the work to follow it, over
 * every padding row of the call) completes at once, the same as with
 * max_new = 1; the suite's timeout is the check. */
START_TEST(planned_max_new_follows_tokens)
{
    kve_context *ctx = ks_context();
    enum { ROWS = 64 };
    kve_state_desc d = ks_desc(0, ROWS, 1, 2, 8, 2, 1, 20);
    kve_state *a = NULL, *b = NULL;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &a));
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &b));
    uint32_t rows[ROWS], n_new[ROWS] = {0};
    for (uint32_t i = 0; i < ROWS; i++)
        rows[i] = 0xffffffffu; /* padding: not read */
    rows[0] = 0;
    KT_OK(kve_state_admit(a, 0, 7, 3));
    KT_OK(kve_state_admit(b, 0, 7, 3));
    ks_step sa, sb;
    ks_step_init(&sa, a, 4, ROWS, 1);
    ks_step_init(&sb, b, 4, ROWS, 1);
    kve_step_buffers ma = sa.b, mb = sb.b;
    ma.moves = mb.moves = NULL;
    ma.n_moves = mb.n_moves = NULL;
    for (uint32_t step = 0; step < 20; step++) {
        n_new[0] = step ? 1 : 3;
        KT_OK(kve_state_append_device(a, ROWS, rows, n_new, 0x7fffffffu,
                                      step % 2 ? &ma : NULL));
        KT_OK(kve_state_append_device(b, ROWS, rows, n_new, 3, step % 2 ? &mb : NULL));
        if (step % 2)
            for (uint32_t t = 0; t < 2; t++)
                ck_assert_int_eq(ks_map_at(&sa, t, 0), ks_map_at(&sb, t, 0));
        ks_expect_same(a, 0, b, 0);
    }
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(a, 0, &info));
    ck_assert_uint_eq(info.n_tokens, 22);
    ck_assert_uint_gt(info.round, 5);
    ks_step_free(&sa);
    ks_step_free(&sb);
    kve_state_destroy(a);
    kve_state_destroy(b);
    kve_context_destroy(ctx);
}
END_TEST

/* Issue 47 item 2: with move_row = the call's rows (docs/INTEGRATION.md
 * "CUDA graphs"), a padding call row (n_new 0, rows[i] not read) holding
 * no page-table row does not fail the layer's kve_cache_write: its move
 * lists are empty, so its row is not checked. A move row whose lists are
 * not empty is still checked. */
START_TEST(cache_write_padding_move_row)
{
    kve_context *ctx = ks_context();
    ks_step step;
    kve_state *st = planned_state(ctx, 4, &step);
    uint32_t rows[3] = {1, 0xffffffffu, 0}, n_new[3] = {4, 0, 1}, seven = 7;
    KT_OK(kve_state_append(st, 1, rows, &seven, NULL)); /* row 1 full: the next token rounds */
    planned_stale(&step);
    KT_OK(kve_state_append_device(st, 3, rows, n_new, 4, &step.b));
    enum { PS = 32, H = 2, N_ROWS = 2 };
    static uint16_t cache[N_ROWS][PS][H], src[8][H];
    int32_t token_row[5] = {1, 1, 1, 1, 0};
    kve_cache_write_desc d;
    memset(&d, 0, sizeof d);
    d.n_tokens = 5;
    d.n_heads = H;
    d.n_caches = 1;
    d.src[0] = src;
    d.dst[0] = cache;
    d.entry_bytes = 2;
    d.layout = KVE_LAYOUT_NHD;
    d.pages.page_size = PS;
    d.pages.n_pages = N_ROWS;
    d.slots = step.b.slot_mapping;
    d.slots_stride_token = H;
    d.slots_stride_head = 1;
    d.token_row = token_row;
    d.pages.n_rows = N_ROWS;
    d.pages.kind = KVE_PAGES_NONE;
    d.moves = step.b.moves;
    d.n_moves = step.b.n_moves;
    d.n_move_rows = 3;
    d.move_row = (const int32_t *)rows;
    d.max_moves = step.b.max_moves;
    d.moves_stride_row = H;
    d.moves_stride_head = 1;
    for (uint32_t h = 0; h < H; h++)
        ck_assert_uint_eq(step.b.n_moves[H + h], 0); /* the padding row's lists: emptied */
    ck_assert_uint_gt(step.b.n_moves[0], 0);         /* row 1's round moved entries */
    KT_OK(kve_cache_write(ctx, &d));
    step.b.n_moves[H + 1] = 1; /* a list that is not empty: its row is checked */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.move_row[1] = -1");
    ks_step_free(&step);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(planned, planned_refused_outputs),
        KVE_TEST(planned, planned_max_new_follows_tokens),
        KVE_TEST(planned, cache_write_padding_move_row),
    };
    const kve_suite_spec spec = {"state_planned", 60, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
