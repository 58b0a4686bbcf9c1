/* test_state.c — the cache state against a plain reference of the schedule,
 * rebuild against the live state after thousands of steps (fresh and
 * persistent keys, every sharing mode, rows admitted and retired at
 * different times), appends in any grouping, persistent bottom-k. */
#include "kve_state_test.h"

static const uint32_t kModes[] = {
    0,
    KVE_PERSISTENT,
    KVE_SHARED_HEADS,
    KVE_SHARED_HEADS | KVE_PERSISTENT,
    KVE_SHARED_LAYERS,
    KVE_SHARED_LAYERS | KVE_PERSISTENT,
    KVE_SHARED_HEADS | KVE_SHARED_LAYERS,
    KVE_SHARED_HEADS | KVE_SHARED_LAYERS | KVE_PERSISTENT,
};
#define N_MODES (sizeof kModes / sizeof kModes[0])

/* Prompts: empty, short, long, and over budget (P + W > B = 20). */
static const uint32_t kPrompts[] = {0, 3, 11, 26};

/* One token at a time, with the mapping checked against the reference. */
START_TEST(matches_reference)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(kModes[_i], 2, 2, 3, 20, 3, 5, 40);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    size_t tables = (size_t)lay.table_layers * lay.table_heads;
    for (size_t pi = 0; pi < 4; pi++) {
        uint32_t row = (uint32_t)(pi & 1), P = kPrompts[pi];
        ks_ref ref;
        ks_ref_init(&ref, &d, 1000 + pi, P);
        KT_OK(kve_state_admit(st, row, 1000 + pi, P));
        int64_t got[6], want[6];
        uint32_t one = 1;
        for (uint32_t step = 0; step < 400; step++) {
            ks_ref_append(ctx, &ref, want);
            KT_OK(kve_state_append(st, 1, &row, &one, got, tables));
            for (size_t t = 0; t < tables; t++)
                ck_assert_msg(got[t] == want[t], "P %u token %u table %zu: slot %lld, want %lld", P,
                              step, t, (long long)got[t], (long long)want[t]);
            if (step % 37 == 0 || step == 399)
                ks_expect_row(st, row, &ref);
            kve_state_seq_info info;
            KT_OK(kve_state_get_seq(st, row, &info));
            ck_assert_uint_eq(info.n_used, ref.n < ref.C ? ref.n : ref.C);
        }
        /* Every head: n_valid valid slots, all below n_used, prompt intact. */
        kve_state_seq_info info;
        KT_OK(kve_state_get_seq(st, row, &info));
        int32_t *buf = (int32_t *)malloc(lay.row_stride * 4);
        KT_OK(kve_state_read_slots(st, row, buf, lay.row_stride));
        for (size_t t = 0; t < tables; t++) {
            uint32_t valid = 0, prompt = 0;
            for (uint32_t i = 0; i < lay.max_slots; i++) {
                int32_t p = buf[t * lay.max_slots + i];
                valid += p >= 0;
                prompt += p >= 0 && (uint32_t)p < P;
                ck_assert(p < 0 || i < info.n_used);
            }
            ck_assert_uint_eq(valid, info.n_valid);
            ck_assert_uint_eq(prompt, P);
        }
        free(buf);
        KT_OK(kve_state_retire(st, row));
        ks_ref_free(&ref);
    }
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Thousands of steps over rows admitted and retired at random times, with
 * multi-token appends; rebuilds of live rows into spare rows must equal
 * them, also after more appends to both. */
START_TEST(rebuild_equals_live)
{
    kve_context *ctx = ks_context();
    enum { ROWS = 5, LIVE = 3, SPARE = 4 };
    kve_state_desc d = ks_desc(kModes[_i], ROWS, 2, 3, 20, 3, 5, 40);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    size_t tables = (size_t)lay.table_layers * lay.table_heads;
    uint64_t rng = 77 + _i;
    uint64_t next_id = 1;
    int active[LIVE] = {0};
    uint32_t rebuilds = 0, prompt[LIVE] = {0};
    int64_t *map = (int64_t *)malloc(4096 * tables * 8);
    for (uint32_t step = 0; step < 3000; step++) {
        for (uint32_t r = 0; r < LIVE; r++) {
            if (!active[r] && kt_below(&rng, 20) == 0) {
                prompt[r] = kPrompts[kt_below(&rng, 4)];
                KT_OK(kve_state_admit(st, r, next_id++ * 0x9E3779B97F4A7C15ULL, prompt[r]));
                uint32_t n = prompt[r];
                KT_OK(kve_state_append(st, 1, &r, &n, map, 4096 * tables));
                active[r] = 1;
            } else if (active[r] && kt_below(&rng, 1500) == 0) {
                KT_OK(kve_state_retire(st, r));
                active[r] = 0;
            }
        }
        uint32_t rows[LIVE], n_new[LIVE], n = 0;
        for (uint32_t r = 0; r < LIVE; r++)
            if (active[r]) {
                rows[n] = r;
                n_new[n++] = kt_below(&rng, 10) == 0 ? 1 + kt_below(&rng, 12) : 1;
            }
        KT_OK(kve_state_append(st, n, rows, n_new, map, 4096 * tables));
        if (step % 150 != 149 || n == 0)
            continue;
        /* Rebuild one live row into the spare, compare, advance both, compare. */
        uint32_t r = rows[kt_below(&rng, n)];
        kve_state_seq_info info;
        KT_OK(kve_state_get_seq(st, r, &info));
        KT_OK(kve_state_rebuild(st, SPARE, info.seq_id, info.prompt_len, info.n_tokens, NULL, 0));
        ks_expect_same(st, r, st, SPARE);
        for (uint32_t k = 0; k < 7; k++) {
            uint32_t both[2] = {r, SPARE}, cnt[2];
            cnt[0] = cnt[1] = 1 + kt_below(&rng, 3);
            KT_OK(kve_state_append(st, 2, both, cnt, NULL, 0));
        }
        ks_expect_same(st, r, st, SPARE);
        KT_OK(kve_state_retire(st, SPARE));
        rebuilds++;
    }
    ck_assert_uint_ge(rebuilds, 15);
    /* And every row still live after the whole run, in place. */
    for (uint32_t r = 0; r < LIVE; r++) {
        if (!active[r])
            continue;
        kve_state_seq_info info;
        KT_OK(kve_state_get_seq(st, r, &info));
        ck_assert_uint_gt(info.round, 0);
        KT_OK(kve_state_rebuild(st, SPARE, info.seq_id, info.prompt_len, info.n_tokens, NULL, 0));
        ks_expect_same(st, r, st, SPARE);
        KT_OK(kve_state_retire(st, SPARE));
    }
    free(map);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* One row fed in random chunks equals the same row fed token by token, and
 * each chunk's mapping says exactly which of its tokens stayed, and where. */
START_TEST(append_grouping)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(kModes[_i], 2, 2, 2, 16, 2, 6, 40);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    uint32_t tl = lay.table_layers, th = lay.table_heads;
    size_t tables = (size_t)tl * th;
    uint64_t rng = 5 + _i;
    KT_OK(kve_state_admit(st, 0, 42, 5));
    KT_OK(kve_state_admit(st, 1, 42, 5));
    int32_t *tab = (int32_t *)malloc(lay.row_stride * 4);
    int64_t *map = (int64_t *)malloc(64 * tables * 8);
    uint32_t one = 1, row1 = 1;
    for (uint32_t done = 0; done < 1500;) {
        uint32_t k = 1 + kt_below(&rng, 40), row0 = 0;
        KT_OK(kve_state_append(st, 1, &row0, &k, map, 64 * tables));
        for (uint32_t i = 0; i < k; i++)
            KT_OK(kve_state_append(st, 1, &row1, &one, NULL, 0));
        ks_expect_same(st, 0, st, 1);
        KT_OK(kve_state_read_slots(st, 0, tab, lay.row_stride));
        for (size_t t = 0; t < tables; t++) {
            const int32_t *sp = tab + t * lay.max_slots;
            uint32_t kept_here = 0;
            for (uint32_t i = 0; i < lay.max_slots; i++)
                kept_here += sp[i] >= (int32_t)done;
            for (uint32_t i = 0; i < k; i++) {
                int64_t m = map[((t / th) * k + i) * th + t % th];
                ck_assert(m >= -1 && m < (int64_t)lay.max_slots);
                if (m >= 0) {
                    ck_assert_int_eq(sp[m], (int32_t)(done + i));
                    kept_here--;
                }
            }
            ck_assert_uint_eq(kept_here, 0); /* every kept token of the chunk is mapped */
        }
        done += k;
    }
    free(tab);
    free(map);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Persistent keys: the kept candidates are the bottom-k by key of every
 * token ever scored, and the rebuild's mapping is the table inverted. */
START_TEST(persistent_bottom_k)
{
    kve_context *ctx = ks_context();
    uint32_t flags = KVE_PERSISTENT | (_i ? KVE_SHARED_HEADS : 0);
    const uint32_t P = 4, B = 24, W = 4, R = 8, N = 2001;
    kve_state_desc d = ks_desc(flags, 1, 2, 2, B, W, R, 48);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    size_t tables = (size_t)lay.table_layers * lay.table_heads;
    int64_t *map = (int64_t *)malloc((size_t)N * tables * 8);
    KT_OK(kve_state_rebuild(st, 0, 99, P, N, map, (size_t)N * tables));
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, 0, &info));
    uint32_t t_last = info.capacity + (info.round - 1) * R, scored = t_last - W - P;
    uint32_t k = B - P - W;
    int32_t *tab = (int32_t *)malloc(lay.row_stride * 4);
    KT_OK(kve_state_read_slots(st, 0, tab, lay.row_stride));
    kve_coord *c = (kve_coord *)malloc(scored * sizeof *c);
    uint64_t *keys = (uint64_t *)malloc(scored * 8), *sorted = (uint64_t *)malloc(scored * 8);
    for (size_t t = 0; t < tables; t++) {
        for (uint32_t i = 0; i < scored; i++)
            c[i] = (kve_coord){99, d.layer_offset + (uint32_t)(t / lay.table_heads),
                               d.head_offset + (uint32_t)(t % lay.table_heads), P + i, 0};
        KT_OK(kve_keys(ctx, d.schedule.seed, flags, c, scored, keys));
        memcpy(sorted, keys, scored * 8);
        qsort(sorted, scored, 8, cmp_u64);
        const int32_t *sp = tab + t * lay.max_slots;
        uint32_t held = 0;
        for (uint32_t i = 0; i < lay.max_slots; i++) {
            int32_t p = sp[i];
            if (p < 0)
                continue;
            held++;
            if ((uint32_t)p >= P && (uint32_t)p < t_last - W)
                ck_assert_msg(keys[p - P] <= sorted[k - 1], "table %zu: pos %d kept, not bottom-k",
                              t, p);
            int64_t m = map[((t / lay.table_heads) * N + (uint32_t)p) * lay.table_heads +
                            t % lay.table_heads];
            ck_assert_int_eq(m, (int64_t)i);
        }
        /* prompt + bottom-k + everything from t_last - W on */
        ck_assert_uint_eq(held, P + k + (N - (t_last - W)));
    }
    free(c);
    free(keys);
    free(sorted);
    free(tab);
    free(map);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Memory given by the caller, sized by kve_state_memory_size; a second
 * state on a context with OpenMP's default thread count agrees. */
START_TEST(caller_memory)
{
    kve_context *ctx = ks_context(), *ctx2;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx2));
    kve_state_desc d = ks_desc(0, 3, 4, 2, 32, 4, 8, 80);
    size_t bytes;
    KT_OK(kve_state_memory_size(ctx, &d, &bytes));
    ck_assert_uint_ge(bytes, (size_t)3 * 4 * 2 * 80 * 4);
    void *mem;
    KT_OK(kve_alloc(ctx, bytes, &mem));
    kve_state *a, *b;
    KT_OK(kve_state_create(ctx, &d, mem, bytes, &a));
    KT_OK(kve_state_create(ctx2, &d, NULL, 0, &b));
    KT_OK(kve_state_admit(a, 2, 7, 40));
    KT_OK(kve_state_admit(b, 0, 7, 40));
    uint32_t r2 = 2, r0 = 0, n = 500;
    KT_OK(kve_state_append(a, 1, &r2, &n, NULL, 0));
    KT_OK(kve_state_append(b, 1, &r0, &n, NULL, 0));
    ks_expect_same(a, 2, b, 0);
    KT_OK(kve_state_destroy(a));
    KT_OK(kve_state_destroy(b));
    KT_OK(kve_state_destroy(NULL));
    KT_OK(kve_free(ctx, mem));
    kve_context_destroy(ctx);
    kve_context_destroy(ctx2);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(state, matches_reference, 0, N_MODES),
        KVE_LOOP_TEST(state, rebuild_equals_live, 0, N_MODES),
        KVE_LOOP_TEST(state, append_grouping, 0, N_MODES),
        KVE_LOOP_TEST(state, persistent_bottom_k, 0, 2),
        KVE_TEST(state, caller_memory),
    };
    const kve_suite_spec spec = {"state", 120, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
