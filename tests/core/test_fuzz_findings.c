/* test_fuzz_findings.c — what an outside fuzzer found in API 1.3 (issue
 * 36), each as its reproducer: stride products past SIZE_MAX (slots, move
 * lists, a scored state's scores), misaligned state memory, the checks the
 * header promises when nothing is written, and the messages and limits it
 * found wrong. Under the sanitize preset the stride cases were UBSan
 * reports on the old code; a release build returned KVE_OK. */
#include <stdint.h>
#include <stdlib.h>

#include "kve_cw_case.h"
#include "kve_suite.h"
#include "kve_test_state.h"

/* Move lists on @p d: @p rows rows of one list per head (2 heads). */
static void with_moves(kve_cache_write_desc *d, const int32_t *mv, const uint32_t *n_mv,
                       uint32_t rows, uint32_t max_moves)
{
    d->moves = mv;
    d->n_moves = n_mv;
    d->n_move_rows = rows;
    d->max_moves = max_moves;
    d->moves_stride_row = 2;
    d->moves_stride_head = 1;
}

/* Item 1: slots_stride_token = 2^63 wrapped token 1's slots back onto token
 * 0's; moves_stride_row = 2^63 did the same to move row 1's list. */
START_TEST(cache_write_stride_products_overflow)
{
    kve_context *ctx = ks_context();
    cw_bad_case c;
    cw_bad_case_init(&c);
    KT_OK(kve_cache_write(ctx, &c.ok));
    kve_cache_write_desc d = c.ok;
    d.slots_stride_token = (size_t)1 << 63;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_OVERFLOW, "desc.slots_stride_token = 9223372036854775808");
    d = c.ok;
    d.slots_stride_token = SIZE_MAX / 8; /* fits as elements, not as bytes */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_OVERFLOW, "desc.slots_stride_token");
    d = c.ok;
    d.slots_stride_head = ((size_t)1 << 62) + 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_OVERFLOW, "desc.slots_stride_head");
    int32_t mv[2 * 2 * 2] = {0};
    uint32_t n_mv[4] = {0, 0, 0, 0};
    d = c.ok;
    with_moves(&d, mv, n_mv, 2, 1);
    KT_OK(kve_cache_write(ctx, &d));
    d.moves_stride_row = (size_t)1 << 63;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_OVERFLOW, "desc.moves_stride_row = 9223372036854775808");
    d.moves_stride_row = SIZE_MAX / 8; /* the lists fit, their pairs do not */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_OVERFLOW, "desc.moves_stride_row");
    d.moves_stride_row = 2;
    d.moves_stride_head = (size_t)1 << 63;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_OVERFLOW, "desc.moves_stride_head");
    kve_context_destroy(ctx);
}
END_TEST

/* Item 1: a scored state's scores_stride_row of 2^63 (or 2^62 + 1) with two
 * rows due wrapped row 1's scores around the address space. */
START_TEST(scored_stride_row_overflow)
{
    enum { B = 12, W = 4, R = 4 };
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(KVE_SCORED, 2, 1, 1, B, W, R, 64);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    uint32_t rows[2] = {0, 1}, full[2] = {16, 16}, one[2] = {1, 1}, due[2] = {0, 0};
    KT_OK(kve_state_admit(st, 0, 7, 2)); /* capacity max(12, 2 + 4) + 4 = 16 */
    KT_OK(kve_state_admit(st, 1, 8, 2));
    KT_OK(kve_state_append(st, 2, rows, full, NULL));
    KT_OK(kve_state_rounds_due(st, 2, rows, one, due));
    ck_assert(due[0] == 1 && due[1] == 1);
    float sc[2 * 16];
    for (int i = 0; i < 32; i++)
        sc[i] = (float)i;
    kve_step_buffers out;
    memset(&out, 0, sizeof out);
    out.scores = sc;
    out.scores_stride_table = 16;
    const size_t bad[2] = {(size_t)1 << 63, ((size_t)1 << 62) + 1};
    for (int i = 0; i < 2; i++) {
        out.scores_stride_row = bad[i];
        EXPECT_ERR(kve_state_append(st, 2, rows, one, &out), KVE_ERR_OVERFLOW,
                   "out->scores_stride_row");
    }
    out.scores_stride_row = 16;
    KT_OK(kve_state_append(st, 2, rows, one, &out));
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Item 3: caller memory 1 or 4 bytes past an aligned address was taken,
 * and the next append read misaligned structs. */
START_TEST(state_memory_misaligned)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(0, 2, 1, 2, 12, 4, 4, 64);
    size_t bytes;
    KT_OK(kve_state_memory_size(ctx, &d, &bytes));
    char *mem;
    KT_OK(kve_alloc(ctx, bytes + 256, (void **)&mem));
    kve_state *st = NULL;
    const size_t offsets[3] = {1, 4, 8};
    for (int i = 0; i < 3; i++) {
        EXPECT_ERR(kve_state_create(ctx, &d, mem + offsets[i], bytes, &st), KVE_ERR_INVALID,
                   "must be 256-byte aligned");
        ck_assert_ptr_null(st);
    }
    KT_OK(kve_state_create(ctx, &d, mem + 256, bytes, &st));
    uint32_t row = 0, n = 20;
    KT_OK(kve_state_admit(st, 0, 7, 2));
    KT_OK(kve_state_append(st, 1, &row, &n, NULL));
    kve_state_destroy(st);
    KT_OK(kve_free(ctx, mem));
    kve_context_destroy(ctx);
}
END_TEST

/* Item 4: indptr is checked whole, and strides are checked, even when no
 * slot reads the broken part or every token is padding. */
START_TEST(checks_when_nothing_written)
{
    kve_context *ctx = ks_context();
    cw_bad_case c;
    cw_bad_case_init(&c);
    kve_cache_write_desc d = c.ok;
    d.pages.kind = KVE_PAGES_INDPTR;
    d.pages.n_rows = 3;
    d.pages.indptr = c.ip;
    d.pages.indices = c.bt;
    d.pages.last_page_len = c.last;
    const int32_t ip[4] = {0, 2, 2, 3}; /* row 0: 2 pages, row 1: none, row 2: 1 */
    memcpy(c.ip, ip, sizeof ip);
    c.token_row[1] = 0; /* both tokens in row 0, slots 0..3 */
    KT_OK(kve_cache_write(ctx, &d));
    c.ip[2] = 1; /* {0, 2, 1, 3}: row 0 is consistent, row 1 decreases */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE,
               "desc.pages.indptr[1] = 2, indptr[2] = 1: indptr must not decrease");
    c.ip[2] = 2;
    for (int i = 0; i < 4; i++)
        c.slots[i] = -1; /* every token padding, no moves */
    c.ip[0] = 1;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.pages.indptr[0] = 1: must be 0");
    c.ip[0] = 0;
    KT_OK(kve_cache_write(ctx, &d));
    d.dst_stride_slot = 4; /* two heads of 4 bytes in 4 */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.dst_stride_slot = 4");
    d.n_tokens = 0; /* nothing at all to write: the desc is still checked */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.dst_stride_slot = 4");
    d.dst_stride_slot = 0;
    KT_OK(kve_cache_write(ctx, &d));
    c.ip[1] = 5;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "indptr[1] = 5, indptr[2] = 2");
    kve_context_destroy(ctx);
}
END_TEST

/* Item 5: a stride the caller left 0 is named as such, with the dense value
 * it took; interleaved strides are named as interleaving. */
START_TEST(alias_names_the_field)
{
    kve_context *ctx = ks_context();
    unsigned char src[2 * 2], k[6 * 2 * 2];
    int64_t slots[2] = {0, 4};
    kve_cache_write_desc d = {.n_tokens = 2,
                              .n_heads = 1,
                              .entry_bytes = 2,
                              .n_caches = 1,
                              .src = {src},
                              .dst = {k},
                              .layout = KVE_LAYOUT_NHD,
                              .dst_stride_slot = 4, /* slots at 0, 4, 8; pages 6 apart */
                              .pages.page_size = 3,
                              .pages.n_pages = 2,
                              .slots = slots,
                              .slots_stride_token = 1,
                              .pages.kind = KVE_PAGES_FLAT};
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS,
               "desc.dst_stride_page = 0 (the dense 6 bytes of cache 0) and desc.dst_stride_slot "
               "= 4 interleave");
    d.part[0].dst_stride_page = 6;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_ALIAS, "desc.part[0].dst_stride_page = 6");
    d.part[0].dst_stride_page = 12;
    KT_OK(kve_cache_write(ctx, &d));
    kve_context_destroy(ctx);
}
END_TEST

/* Item 5: moves in a FLAT page table (rows unused; the message once said
 * 0..4294967295), and max_moves = 0, what kve_state_max_moves gives for a
 * step of no tokens. */
START_TEST(moves_limits)
{
    kve_context *ctx = ks_context();
    cw_bad_case c;
    cw_bad_case_init(&c);
    int32_t mv[2 * 2] = {2, 0, 3, 1}; /* head 0: slot 2 -> 0; head 1: 3 -> 1 */
    uint32_t n_mv[2] = {1, 1};
    kve_cache_write_desc d = c.ok;
    d.pages.kind = KVE_PAGES_FLAT;
    d.pages.n_rows = 0;
    d.n_tokens = 0;
    with_moves(&d, mv, n_mv, 1, 1);
    for (int i = 0; i < (int)sizeof c.k; i++)
        c.k[i] = (unsigned char)i;
    KT_OK(kve_cache_write(ctx, &d));
    /* flat slot s of head h: byte s * 8 + h * 4 */
    ck_assert_uint_eq(c.k[0], 16);
    ck_assert_uint_eq(c.k[12], 28);
    d.max_moves = 0; /* no pair fits: every count must be 0 */
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "exceeds max_moves = 0");
    n_mv[0] = n_mv[1] = 0;
    KT_OK(kve_cache_write(ctx, &d));
    d.pages.kind = KVE_PAGES_BLOCK_TABLE;
    d.pages.n_rows = 2;
    KT_OK(kve_cache_write(ctx, &d));
    /* a state's step of no new tokens: kve_state_max_moves says 0 */
    kve_state_desc sd = ks_desc(0, 1, 1, 2, 12, 4, 4, 64);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &sd, &lay);
    uint32_t moves_for = 9, row = 0, none = 0;
    KT_OK(kve_state_max_moves(st, 0, &moves_for));
    ck_assert_uint_eq(moves_for, 0);
    KT_OK(kve_state_admit(st, 0, 7, 2));
    int64_t map[2];
    int32_t smv[2];
    uint32_t sn[2] = {5, 5};
    kve_step_buffers out = {map, 1, smv, sn, 1, moves_for, NULL, 0, 0};
    KT_OK(kve_state_append(st, 1, &row, &none, &out));
    with_moves(&d, smv, sn, 1, moves_for);
    KT_OK(kve_cache_write(ctx, &d));
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Issue 47 item 4: with desc.src_slots, an entry whose source is -1 is not
 * written, but its token_row, slot and page are checked as without
 * src_slots (they returned KVE_OK). */
START_TEST(src_slots_entries_checked)
{
    kve_context *ctx = ks_context();
    cw_bad_case c;
    cw_bad_case_init(&c);
    const int64_t none[4] = {-1, -1, -1, -1};
    kve_cache_write_desc d = c.ok;
    d.src[0] = d.src[1] = NULL;
    d.src_slots = none;
    KT_OK(kve_cache_write(ctx, &d));
    const struct {
        int at;       /* slots index, or -1 for token_row[1] */
        int64_t value;
        const char *needle;
    } bad[] = {
        {1, -5, "desc.slots[token 0][head 1] = -5: must be -1 or 0..3"},
        {2, 999, "desc.slots[token 1][head 0] = 999: must be -1 or 0..3"},
        {-1, -1, "desc.token_row[1] = -1: must be 0..1"},
        {-1, 7, "desc.token_row[1] = 7: must be 0..1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int with_src = 0; with_src < 2; with_src++) {
            cw_bad_case_init(&c);
            d = c.ok;
            if (with_src) {
                d.src[0] = d.src[1] = NULL;
                d.src_slots = none;
            }
            if (bad[i].at >= 0)
                c.slots[bad[i].at] = bad[i].value;
            else
                c.token_row[1] = (int32_t)bad[i].value;
            EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, bad[i].needle);
        }
    }
    /* every slot -1 is padding still: token_row is not read */
    cw_bad_case_init(&c);
    d = c.ok;
    d.src_slots = none;
    c.slots[2] = c.slots[3] = -1;
    c.token_row[1] = 7;
    KT_OK(kve_cache_write(ctx, &d));
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(fuzz_findings, cache_write_stride_products_overflow),
        KVE_TEST(fuzz_findings, scored_stride_row_overflow),
        KVE_TEST(fuzz_findings, state_memory_misaligned),
        KVE_TEST(fuzz_findings, checks_when_nothing_written),
        KVE_TEST(fuzz_findings, alias_names_the_field),
        KVE_TEST(fuzz_findings, moves_limits),
        KVE_TEST(fuzz_findings, src_slots_entries_checked),
    };
    const kve_suite_spec spec = {"fuzz_findings", 60, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
