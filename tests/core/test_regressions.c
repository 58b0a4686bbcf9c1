/* test_regressions.c — the defects outside fuzzing found (issue 9), each
 * as its reproducer: a run of positions crossing INT32_MAX, kve_alloc's
 * rounding, a descending indptr, empty rows without memory, and what
 * KVE_ERR_NOMEM says. Run under the sanitize preset too: there the empty
 * rows and the indptr case fail on the old code as UBSan / ASan reports. */
#include <stdint.h>
#include <stdio.h>

#include "kve_suite.h"
#include "kve_test_util.h"

/* One sequence, one layer, one head over @p slots. */
static kve_batch one_head(const kve_seq *seq, const int32_t *slots, uint32_t n, uint32_t budget,
                          uint32_t window)
{
    kve_batch b = {7, 0, 1, seq, 1, 1, 0, 0, n, budget, window, slots, n, NULL, 0};
    return b;
}

/* A CPU context running @p isa, or NULL when this CPU cannot. */
static kve_context *isa_context(int isa)
{
    int avail = 0;
    KT_OK(kve_cpu_isa_available((kve_cpu_isa)isa, &avail));
    if (!avail)
        return NULL;
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    KT_OK(kve_context_set_cpu_isa(ctx, (kve_cpu_isa)isa));
    return ctx;
}

/* kve_evict on every ISA this CPU runs: @p st and a message starting with
 * @p want (or KVE_OK). */
static void expect_every_isa(const kve_batch *b, kve_status st, const char *want)
{
    for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
        kve_context *ctx = isa_context(isa);
        if (!ctx)
            continue;
        kt_out o;
        kve_status got = kt_evict(ctx, b, &o);
        ck_assert_msg(got == st, "%s: %s (%s), expected %s", kve_cpu_isa_name((kve_cpu_isa)isa),
                      kve_status_string(got), kve_last_error(), kve_status_string(st));
        ck_assert_msg(st == KVE_OK || !strncmp(kve_last_error(), want, strlen(want)),
                      "%s: \"%s\", expected \"%s...\"", kve_cpu_isa_name((kve_cpu_isa)isa),
                      kve_last_error(), want);
        kt_out_free(&o);
        kve_context_destroy(ctx);
    }
}

START_TEST(run_crossing_int32_max)
{
    kve_seq seq = {3, 0, 0};
    int32_t s[200];
    /* The first table: 0x7ffffffd, 0x7ffffffe, INT32_MAX, then the
     * positions a 32-bit add wraps to. */
    for (uint32_t t = 0; t < 32; t++)
        s[t] = (int32_t)(uint32_t)(0x7ffffffdu + t);
    kve_batch b = one_head(&seq, s, 32, 4, 2);
    expect_every_isa(&b, KVE_ERR_RANGE, "batch.slot_pos[head 0][slot 3] = -2147483648:");
    /* Its second: 32 such slots and then INT32_MAX again. */
    for (uint32_t t = 0; t < 32; t++)
        s[t] = (int32_t)(uint32_t)(0x7ffffff0u + t);
    s[32] = INT32_MAX;
    b = one_head(&seq, s, 33, 4, 2);
    expect_every_isa(&b, KVE_ERR_RANGE, "batch.slot_pos[head 0][slot 16] = -2147483648:");
    /* A run up to INT32_MAX, then a repeat of it: no negative value to see. */
    for (uint32_t t = 0; t < 16; t++)
        s[t] = INT32_MAX - 15 + (int32_t)t;
    s[16] = INT32_MAX - 10;
    b = one_head(&seq, s, 17, 4, 2);
    expect_every_isa(&b, KVE_ERR_DUPLICATE, "batch.slot_pos[head 0][slot 16] = 2147483637:");
    /* A long run ending exactly at INT32_MAX is fine, at every block edge. */
    for (uint32_t n = 1; n <= 200; n += 7) {
        for (uint32_t t = 0; t < n; t++)
            s[t] = INT32_MAX - (int32_t)(n - 1) + (int32_t)t;
        b = one_head(&seq, s, n, 4, 2);
        expect_every_isa(&b, KVE_OK, "");
    }
}
END_TEST

START_TEST(alloc_rounding_overflows)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    const size_t sizes[] = {SIZE_MAX - 100, SIZE_MAX - 64, SIZE_MAX - 63, SIZE_MAX, SIZE_MAX - 254};
    for (size_t i = 0; i < KVE_COUNT(sizes); i++) {
        void *p = (void *)&sizes;
        char want[64];
        snprintf(want, sizeof want, "bytes = %zu", sizes[i]);
        EXPECT_ERR(kve_alloc(ctx, sizes[i], &p), KVE_ERR_OVERFLOW, want);
        ck_assert_ptr_null(p);
    }
    /* The largest request that rounds without wrapping: no memory for it,
     * and the message says how much was asked. */
    void *p = NULL;
    char want[64];
    snprintf(want, sizeof want, "%zu bytes", SIZE_MAX - 255);
    EXPECT_ERR(kve_alloc(ctx, SIZE_MAX - 255, &p), KVE_ERR_NOMEM, want);
    ck_assert_ptr_null(p);
    KT_OK(kve_alloc(ctx, 1, &p)); /* the context still works */
    KT_OK(kve_free(ctx, p));
    kve_context_destroy(ctx);
}
END_TEST

START_TEST(cache_write_indptr_checked)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    unsigned char src[4], k[8 * 4];
    int64_t slots[1] = {4};
    /* The case: indices has indptr[n_rows] = 3 entries; the page ids
     * past them are valid ones, so reading there would pass unnoticed. */
    int32_t token_row[1] = {0}, indptr[3] = {0, 5, 3}, indices[8] = {0, 1, 2, 3, 4, 5, 6, 7},
            last[2] = {1, 1};
    kve_cache_write_desc d = {.n_tokens = 1,
                              .n_heads = 1,
                              .entry_bytes = 4,
                              .n_caches = 1,
                              .src = {src},
                              .dst = {k},
                              .layout = KVE_LAYOUT_NHD,
                              .pages.page_size = 1,
                              .pages.n_pages = 8,
                              .slots = slots,
                              .slots_stride_token = 1,
                              .token_row = token_row,
                              .pages.n_rows = 2,
                              .pages.kind = KVE_PAGES_INDPTR,
                              .pages.indptr = indptr,
                              .pages.indices = indices,
                              .pages.last_page_len = last};
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE,
               "desc.pages.indptr[1] = 5, indptr[2] = 3: row 0 ends past indptr[n_rows]");
    token_row[0] = 1; /* row 1 = indptr[1..2]: ends before it starts */
    slots[0] = 0;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE,
               "desc.pages.indptr[1] = 5, indptr[2] = 3: row 1 ends before it starts");
    token_row[0] = 0;
    indptr[0] = 1; /* rows must start at indices[0] */
    indptr[1] = 2;
    EXPECT_ERR(kve_cache_write(ctx, &d), KVE_ERR_RANGE, "desc.pages.indptr[0] = 1: must be 0");
    indptr[0] = 0;
    indptr[1] = 5;
    indptr[2] = 5;
    slots[0] = 4;
    KT_OK(kve_cache_write(ctx, &d));
    kve_context_destroy(ctx);
}
END_TEST

/* Rows of no slots: slot_pos NULL and every stride huge; nothing may form
 * an offset from them (UBSan in the sanitize preset). */
START_TEST(empty_rows_without_memory)
{
    kve_seq seqs[2] = {{1, 0, 0}, {2, 5, 1}};
    for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
        kve_context *ctx = isa_context(isa);
        if (!ctx)
            continue;
        kve_batch b = {9, 0, 2, seqs, 2, 3, 0, 0, 0, 4, 2, NULL, SIZE_MAX / 2, NULL, 0};
        int32_t evicted[1], kept[1];
        uint32_t n_ev[12], n_kept[12];
        uint8_t flags[12];
        memset(n_ev, 0xff, sizeof n_ev);
        memset(n_kept, 0xff, sizeof n_kept);
        memset(flags, 0xff, sizeof flags);
        kve_evict_out o = {.evicted = evicted, .evicted_stride = SIZE_MAX / 2, .n_evicted = n_ev,
                           .n_kept = n_kept, .head_flags = flags, .kept = kept,
                           .kept_stride = SIZE_MAX / 3};
        KT_OK(kve_evict(ctx, &b, &o, NULL, 0));
        for (int i = 0; i < 12; i++)
            ck_assert(n_ev[i] == 0 && n_kept[i] == 0 && flags[i] == 0);
        uint64_t with_lists = 0, without = 1;
        KT_OK(kve_digest(ctx, &b, &o, &with_lists));
        KT_OK(kve_digest(ctx, &b, NULL, &without));
        ck_assert_uint_eq(with_lists, without);
        /* Budget below n_slots = 0 is the same: no list to write. */
        b.budget = 0;
        KT_OK(kve_evict(ctx, &b, &o, NULL, 0));
        kve_context_destroy(ctx);
    }
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(regressions, run_crossing_int32_max),
        KVE_TEST(regressions, alloc_rounding_overflows),
        KVE_TEST(regressions, cache_write_indptr_checked),
        KVE_TEST(regressions, empty_rows_without_memory),
    };
    const kve_suite_spec spec = {"regressions", 120, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
