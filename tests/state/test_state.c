/* test_state.c — the cache state against a plain reference of the schedule
 * and the placement (one-token and multi-token appends, a model cache
 * driven by the moves and writes), rebuild against the live state after
 * thousands of steps (fresh and persistent keys, every sharing mode, rows
 * admitted and retired at different times, the appends' history given),
 * keep-sets independent of the grouping, persistent bottom-k. */
#include "golden_vectors.h"
#include "kve_state_rebuild.h"
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

/* Appends of 1 token, and now and then of 2..12 (across rounds, and past
 * the window: some of a call's own tokens evicted within it), each checked
 * against the reference: tables, mapping, placement, and the model cache
 * the moves and writes keep. */
START_TEST(matches_reference)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(kModes[_i], 2, 2, 3, 20, 3, 5, 40);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    size_t tables = (size_t)lay.table_layers * lay.table_heads;
    ks_step step;
    ks_step_init(&step, st, 64, 1, 64);
    ks_cache cache;
    ks_cache_init(&cache, 2, (uint32_t)tables, lay.max_slots);
    uint64_t rng = 11 + _i;
    for (size_t pi = 0; pi < 4; pi++) {
        uint32_t row = (uint32_t)(pi & 1), P = kPrompts[pi];
        ks_ref ref;
        ks_ref_init(&ref, &d, 1000 + pi, P);
        KT_OK(kve_state_admit(st, row, 1000 + pi, P));
        int64_t want[6 * 64];
        for (uint32_t call = 0; call < 400; call++) {
            uint32_t k = call == 0 ? P : kt_below(&rng, 6) == 0 ? 2 + kt_below(&rng, 11) : 1;
            uint32_t pos0 = ref.n;
            ks_ref_call(ctx, &ref, k, want);
            KT_OK(kve_state_append(st, 1, &row, &k, &step.b));
            for (size_t t = 0; t < tables; t++)
                for (uint32_t i = 0; i < k; i++)
                    ck_assert_msg(ks_map_at(&step, t, i) == want[t * k + i],
                                  "P %u call %u token %u table %zu: slot %lld, want %lld", P, call,
                                  i, t, (long long)ks_map_at(&step, t, i),
                                  (long long)want[t * k + i]);
            ks_apply(&cache, &step, 1, &row, &k, &pos0);
            ks_expect_row(st, row, &ref);
            ks_expect_placement(st, row, pos0, &cache);
            kve_state_seq_info info;
            KT_OK(kve_state_get_seq(st, row, &info));
            ck_assert_uint_eq(info.n_valid, ref.nv);
        }
        KT_OK(kve_state_retire(st, row));
        ks_ref_free(&ref);
    }
    ks_cache_free(&cache);
    ks_step_free(&step);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* One step of rows 0 .. live-1 at random: an idle row may be admitted (its
 * model cache filled with another request's bytes, its prompt the step's
 * prefill), a live one retired, the others take one token or a few. Returns
 * the step's rows and n_new. */
static uint32_t random_step(kve_state *st, ks_cache *cache, uint32_t live, uint64_t *rng,
                            uint64_t *next_id, int *active, uint32_t *hist_n, uint32_t *rows,
                            uint32_t *n_new)
{
    size_t per_row = (size_t)cache->tables * cache->slots;
    uint32_t n = 0;
    for (uint32_t r = 0; r < live; r++) {
        if (!active[r] && kt_below(rng, 20) == 0) {
            uint32_t prompt = kPrompts[kt_below(rng, 4)];
            KT_OK(kve_state_admit(st, r, (*next_id)++ * 0x9E3779B97F4A7C15ULL, prompt));
            active[r] = 1;
            hist_n[r] = 0;
            for (size_t i = 0; i < per_row; i++)
                cache->pos[(size_t)r * per_row + i] = KS_FOREIGN;
            rows[n] = r;
            n_new[n++] = prompt;
        } else if (active[r] && kt_below(rng, 1500) == 0) {
            KT_OK(kve_state_retire(st, r));
            active[r] = 0;
        } else if (active[r]) {
            rows[n] = r;
            n_new[n++] = kt_below(rng, 10) == 0 ? 1 + kt_below(rng, 12) : 1;
        }
    }
    return n;
}

/* Thousands of steps over rows admitted and retired at random times, with
 * multi-token appends driving a model cache; rebuilds of live rows (given
 * their appends) into spare rows must equal them, also after more appends
 * to both, and a rebuild's mapping names every valid slot once. */
START_TEST(rebuild_equals_live)
{
    kve_context *ctx = ks_context();
    enum { ROWS = 5, LIVE = 3, SPARE = 4 };
    kve_state_desc d = ks_desc(kModes[_i], ROWS, 2, 3, 20, 3, 5, 40);
    d.pool_slots = 4 * 34 + 3; /* 4 rows of the largest capacity: rows move about the pool */
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    size_t tables = (size_t)lay.table_layers * lay.table_heads;
    ks_step step;
    ks_step_init(&step, st, 64, ROWS, 26);
    ks_cache cache;
    ks_cache_init(&cache, ROWS, (uint32_t)tables, lay.max_slots);
    uint64_t rng = 77 + _i;
    uint64_t next_id = 1;
    int active[LIVE] = {0};
    uint32_t rebuilds = 0, hist_n[LIVE] = {0};
    rb_history hist = {(uint32_t *)malloc((size_t)LIVE * RB_HIST * 4), hist_n};
    int64_t *map = (int64_t *)malloc(8192 * tables * 8);
    int32_t *tab = (int32_t *)malloc(lay.row_elems * 4);
    for (uint32_t s = 0; s < 3000; s++) {
        uint32_t rows[LIVE], n_new[LIVE], pos0[LIVE];
        uint32_t n = random_step(st, &cache, LIVE, &rng, &next_id, active, hist_n, rows, n_new);
        for (uint32_t i = 0; i < n; i++) {
            kve_state_seq_info info;
            KT_OK(kve_state_get_seq(st, rows[i], &info));
            pos0[i] = info.n_tokens;
            rb_record(&hist, rows[i], n_new[i]);
        }
        KT_OK(kve_state_append(st, n, rows, n_new, &step.b));
        ks_apply(&cache, &step, n, rows, n_new, pos0);
        for (uint32_t i = 0; i < n; i++)
            ks_expect_placement(st, rows[i], pos0[i], &cache);
        if (s % 150 != 149 || n == 0)
            continue;
        /* Rebuild one live row into the spare, compare, advance both, compare. */
        uint32_t r = rows[kt_below(&rng, n)];
        if (hist_n[r] > RB_HIST)
            continue;
        expect_rebuild_follows(st, &lay, r, SPARE, &hist, &rng, map, 8192 * tables, tab);
        rebuilds++;
        /* the model cache of r no longer follows (appends without outputs): refill it */
        KT_OK(kve_state_read_slots(st, r, tab, lay.row_elems));
        memcpy(cache.pos + (size_t)r * tables * lay.max_slots, tab, lay.row_elems * 4);
    }
    ck_assert_uint_ge(rebuilds, 15);
    expect_live_rows_rebuild(st, active, LIVE, SPARE, &hist);
    free(tab);
    free(hist.steps);
    free(map);
    ks_cache_free(&cache);
    ks_step_free(&step);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* One row fed in random chunks keeps, in every head, the same positions as
 * the same row fed token by token (the keep-sets never depend on the
 * grouping); a rebuild with no history is the token-by-token row. */
START_TEST(append_grouping)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(kModes[_i], 3, 2, 2, 16, 2, 6, 40);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    size_t tables = (size_t)lay.table_layers * lay.table_heads;
    uint64_t rng = 5 + _i;
    KT_OK(kve_state_admit(st, 0, 42, 5));
    KT_OK(kve_state_admit(st, 1, 42, 5));
    int32_t *a = (int32_t *)malloc(lay.row_elems * 4), *b = (int32_t *)malloc(lay.row_elems * 4);
    uint32_t one = 1, row0 = 0, row1 = 1, five = 5;
    KT_OK(kve_state_append(st, 1, &row0, &five, NULL));
    KT_OK(kve_state_append(st, 1, &row1, &five, NULL));
    for (uint32_t done = 5; done < 1500;) {
        uint32_t k = 1 + kt_below(&rng, 40);
        KT_OK(kve_state_append(st, 1, &row0, &k, NULL));
        for (uint32_t i = 0; i < k; i++)
            KT_OK(kve_state_append(st, 1, &row1, &one, NULL));
        done += k;
        KT_OK(kve_state_read_slots(st, 0, a, lay.row_elems));
        KT_OK(kve_state_read_slots(st, 1, b, lay.row_elems));
        for (size_t t = 0; t < tables; t++) {
            qsort(a + t * lay.max_slots, lay.max_slots, 4, kve_test_cmp_i32);
            qsort(b + t * lay.max_slots, lay.max_slots, 4, kve_test_cmp_i32);
        }
        ck_assert(!memcmp(a, b, lay.row_elems * 4));
        if (done % 7 == 0) {
            KT_OK(kve_state_rebuild(st, 2, 42, 5, done, NULL, 0, NULL, 0));
            ks_expect_same(st, 1, st, 2);
        }
    }
    free(a);
    free(b);
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
    KT_OK(kve_state_rebuild(st, 0, 99, P, N, NULL, 0, map, (size_t)N * tables));
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, 0, &info));
    uint32_t t_last = info.capacity + (info.round - 1) * R, scored = t_last - W - P;
    uint32_t k = B - P - W;
    int32_t *tab = (int32_t *)malloc(lay.row_elems * 4);
    KT_OK(kve_state_read_slots(st, 0, tab, lay.row_elems));
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
    KT_OK(kve_state_append(a, 1, &r2, &n, NULL));
    KT_OK(kve_state_append(b, 1, &r0, &n, NULL));
    ks_expect_same(a, 2, b, 0);
    KT_OK(kve_state_destroy(a));
    KT_OK(kve_state_destroy(b));
    KT_OK(kve_state_destroy(NULL));
    KT_OK(kve_free(ctx, mem));
    kve_context_destroy(ctx);
    kve_context_destroy(ctx2);
}
END_TEST

static int cmp_pair_dst(const void *a, const void *b)
{
    const int32_t *x = (const int32_t *)a, *y = (const int32_t *)b;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The golden placement cases of docs/SPEC.md: the state's table, moves and
 * mapping after each case's appends, and a rebuild from the history. */
START_TEST(golden_placement)
{
    kve_context *ctx = ks_context();
    const kve_golden_placement *g = &kve_golden_placements[_i];
    kve_state_desc d = {{42, g->flags, g->budget, g->window, g->interval}, 2, 1, 1, 2, 1,
                        g->n_slots, 0, 0, 0};
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    KT_OK(kve_state_admit(st, 0, 7, g->prompt));
    ks_step step;
    ks_step_init(&step, st, 64, 1, 64);
    uint32_t row = 0;
    for (uint32_t i = 0; i < g->n_steps; i++)
        KT_OK(kve_state_append(st, 1, &row, &g->steps[i], &step.b));
    int32_t tab[64];
    KT_OK(kve_state_read_slots(st, 0, tab, 64));
    for (uint32_t s = 0; s < lay.max_slots; s++)
        ck_assert_msg(tab[s] == (s < g->n_slots ? g->slot_pos[s] : -1), "%s: slot %u = %d, want %d",
                      g->name, s, tab[s], g->slot_pos[s]);
    ck_assert_uint_eq(step.b.n_moves[0], g->n_moves);
    qsort(step.b.moves, g->n_moves, 8, cmp_pair_dst);
    for (uint32_t k = 0; k < 2 * g->n_moves; k++)
        ck_assert_int_eq(step.b.moves[k], g->moves[k]);
    for (uint32_t k = 0; k < g->n_mapped; k++)
        ck_assert_int_eq(ks_map_at(&step, 0, k), g->mapping[k]);
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, 0, &info));
    ck_assert_uint_eq(info.round, g->rounds);
    KT_OK(kve_state_rebuild(st, 1, 7, g->prompt, info.n_tokens, g->steps, g->n_steps, NULL, 0));
    ks_expect_same(st, 0, st, 1);
    ks_step_free(&step);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* Rows take their capacity from the pool at admission and give it back at
 * retirement; a prompt that finds no free run is refused, naming the sizes;
 * freed runs merge again. */
START_TEST(pool_admission)
{
    kve_context *ctx = ks_context();
    kve_state_desc d = ks_desc(0, 4, 2, 2, 16, 4, 4, 48);
    d.pool_slots = 100; /* capacities: P = 0 -> 20, P = 20 -> 28, P = 40 -> 48 */
    size_t bytes, full;
    KT_OK(kve_state_memory_size(ctx, &d, &bytes));
    kve_state_desc all = d;
    all.pool_slots = 0;
    KT_OK(kve_state_memory_size(ctx, &all, &full));
    ck_assert_uint_lt(bytes + 2 * 4 * 4 * (4 * 48 - 100) / 2, full + 1); /* tables, freed lists */
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    ck_assert_uint_eq(lay.pool_slots, 100);
    KT_OK(kve_state_admit(st, 0, 1, 40));
    KT_OK(kve_state_admit(st, 1, 2, 20));
    EXPECT_ERR(kve_state_admit(st, 2, 3, 20), KVE_ERR_RANGE, "the pool of 100 has 24 free");
    KT_OK(kve_state_admit(st, 2, 3, 0));
    KT_OK(kve_state_retire(st, 1));
    KT_OK(kve_state_admit(st, 3, 4, 20)); /* into the run row 1 gave back */
    kve_state_seq_info info;
    KT_OK(kve_state_get_seq(st, 3, &info));
    ck_assert_uint_eq(info.table_offset, (uint64_t)48 * 4);
    uint32_t rows[3] = {0, 2, 3}, n_new[3] = {300, 300, 300};
    KT_OK(kve_state_append(st, 3, rows, n_new, NULL));
    for (uint32_t i = 0; i < 3; i++)
        ks_expect_placement(st, rows[i], 0, NULL);
    for (uint32_t r = 0; r < 4; r++)
        if (r != 1)
            KT_OK(kve_state_retire(st, r));
    KT_OK(kve_state_admit(st, 1, 5, 40)); /* the runs merged back into one */
    KT_OK(kve_state_admit(st, 2, 6, 40));
    KT_OK(kve_state_rebuild(st, 2, 7, 0, 30, NULL, 0, NULL, 0)); /* 48 back, 20 taken */
    EXPECT_ERR(kve_state_rebuild(st, 0, 8, 40, 41, NULL, 0, NULL, 0), KVE_ERR_RANGE,
               "has 32 free, at most 32 in one run");
    /* Fragmented: 20 + 28 + 20 held with holes; a 48 fits only once they move. */
    KT_OK(kve_state_retire(st, 1));
    KT_OK(kve_state_retire(st, 2));
    KT_OK(kve_state_admit(st, 0, 9, 0));  /* [0, 20) */
    KT_OK(kve_state_admit(st, 1, 10, 20)); /* [20, 48) */
    KT_OK(kve_state_admit(st, 2, 11, 0));  /* [48, 68) */
    uint32_t r1 = 1, k = 200;
    KT_OK(kve_state_append(st, 1, &r1, &k, NULL));
    int32_t before[4 * 48], after[4 * 48];
    KT_OK(kve_state_read_slots(st, 1, before, 4 * 48));
    KT_OK(kve_state_retire(st, 0)); /* free: [0, 20) and [68, 100) */
    KT_OK(kve_state_admit(st, 3, 12, 40)); /* 48: the pool compacts */
    KT_OK(kve_state_get_seq(st, 1, &info));
    ck_assert_uint_eq(info.table_offset, 0);
    KT_OK(kve_state_read_slots(st, 1, after, 4 * 48));
    ck_assert(!memcmp(before, after, sizeof before));
    KT_OK(kve_state_append(st, 1, &r1, &k, NULL));
    ks_expect_placement(st, 1, 200, NULL);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

/* What a stock kernel sees after each append (docs/SPEC.md "Placement"):
 * given n_valid and a bottom-right causal mask, query j of a t-token append
 * attends to slots 0 .. n_valid - t + j. Whenever a head holds every token
 * of the append, those slots hold exactly its kept tokens up to query j's
 * position; an append of at most W + 1 generated tokens always holds them
 * all (the rounds inside it find them in the window), and a longer one may
 * evict some of its own (mapping -1), which the engine then sees. */
START_TEST(bottom_right_mask)
{
    kve_context *ctx = ks_context();
    uint64_t rng = 0xb0770b + (uint64_t)_i;
    uint32_t flags = _i == 0 ? 0 : _i == 1 ? KVE_PERSISTENT : KVE_SHARED_HEADS;
    uint32_t held_rounds = 0, self_evicted = 0;
    for (int rep = 0; rep < 40; rep++) {
        uint32_t W = 1 + kt_below(&rng, 5), r = 1 + kt_below(&rng, 6), B = 4 + kt_below(&rng, 12);
        uint32_t P = kt_below(&rng, 6);
        kve_state_desc d = ks_desc(flags, 1, 2, 2, B, W, r, 0);
        KT_OK(kve_schedule_capacity(&d.schedule, P, &d.max_slots));
        kve_state_layout lay;
        kve_state *st = ks_create(ctx, &d, &lay);
        KT_OK(kve_state_admit(st, 0, 40 + (uint64_t)rep, P));
        ks_step step;
        ks_step_init(&step, st, 64, 1, 64);
        int32_t *tab = (int32_t *)malloc(lay.row_elems * 4);
        uint32_t row = 0, n_tokens = 0;
        for (int k = 0; k < 30; k++) {
            uint32_t t = k == 0 && P ? P : 1 + kt_below(&rng, kt_below(&rng, 2) ? W + 1 : 3 * W + 4);
            kve_state_seq_info before, info;
            KT_OK(kve_state_get_seq(st, 0, &before));
            KT_OK(kve_state_append(st, 1, &row, &t, &step.b));
            KT_OK(kve_state_get_seq(st, 0, &info));
            KT_OK(kve_state_read_slots(st, 0, tab, lay.row_elems));
            uint32_t pos0 = n_tokens, gen = pos0 + t > P ? pos0 + t - (pos0 > P ? pos0 : P) : 0;
            n_tokens += t;
            size_t tables = (size_t)lay.table_layers * lay.table_heads;
            for (size_t tb = 0; tb < tables; tb++) {
                const int32_t *sp = tab + tb * lay.max_slots;
                int all_held = 1;
                for (uint32_t j = 0; j < t; j++)
                    all_held &= ks_map_at(&step, tb, j) >= 0;
                if (gen <= W + 1)
                    ck_assert_msg(all_held, "W %u: an append of %u generated tokens lost one", W, gen);
                if (!all_held) {
                    self_evicted++;
                    continue;
                }
                held_rounds += info.round > before.round;
                for (uint32_t j = 0; j < t; j++) {
                    int64_t last = (int64_t)info.n_valid - t + j; /* query j sees 0 .. last */
                    uint32_t seen = 0, want = 0;
                    for (int64_t s = 0; s <= last; s++) {
                        ck_assert_msg(sp[s] >= 0 && sp[s] <= (int32_t)(pos0 + j),
                                      "query %u (pos %u) sees slot %lld = %d", j, pos0 + j,
                                      (long long)s, sp[s]);
                        seen++;
                    }
                    for (uint32_t s = 0; s < info.n_valid; s++)
                        want += sp[s] <= (int32_t)(pos0 + j);
                    ck_assert_msg(seen == want, "query %u (pos %u) sees %u slots of its %u kept tokens",
                                  j, pos0 + j, seen, want);
                }
            }
        }
        free(tab);
        ks_step_free(&step);
        kve_state_destroy(st);
    }
    /* both kinds of append were met: rounds inside appends that held
     * their tokens, and appends that evicted some of their own */
    ck_assert_uint_gt(held_rounds, 50);
    ck_assert_uint_gt(self_evicted, 5);
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(state, pool_admission),
        KVE_LOOP_TEST(state, golden_placement, 0, KVE_GOLDEN_N_PLACEMENTS),
        KVE_LOOP_TEST(state, matches_reference, 0, N_MODES),
        KVE_LOOP_TEST(state, rebuild_equals_live, 0, N_MODES),
        KVE_LOOP_TEST(state, append_grouping, 0, N_MODES),
        KVE_LOOP_TEST(state, persistent_bottom_k, 0, 2),
        KVE_TEST(state, caller_memory),
        KVE_LOOP_TEST(state, bottom_right_mask, 0, 3),
    };
    const kve_suite_spec spec = {"state", 120, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
