/*
 * test_emu.c — the device kernel bodies (kernels_cuda/), compiled as C and
 * run on the fiber emulator (emu_harness.h), against the scalar CPU reference (the public
 * API, KVE_CPU_ISA_SCALAR), for block sizes 32..256 and warp widths 32 and
 * 64 (the HIP build's CDNA width), grids smaller and larger than the batch,
 * and scratch in shared or global memory.
 *
 * $KVE_EMU_CASES sets the number of random eviction cases (default 2000;
 * ctest passes 2000, or 500 in a sanitized build).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_kernels.h"
#include "emu_suite.h"
#include "golden_vectors.h"
#include "kve_cases.h"

START_TEST(test_keys_golden)
{
    kve_coord c;
    uint64_t key;
    for (size_t s = 0; s < KVE_N_SHAPES; s++)
        for (size_t i = 0; i < KVE_GOLDEN_N_KEYS; i++) {
            const kve_golden_key *g = &kve_golden_keys[i];
            c = (kve_coord){g->seq_id, g->layer, g->head, g->pos, g->round};
            key = 0;
            ck_assert_int_eq(kve_emu_keys(kve_pools[s], 1, g->seed, g->flags, &c, 1, &key), 0);
            ck_assert_msg(key == g->key, "golden key %zu: 0x%016llx, want 0x%016llx", i,
                          (unsigned long long)key, (unsigned long long)g->key);
        }
}
END_TEST

START_TEST(test_keys_random)
{
    uint64_t rng = 11;
    kve_context *ref = kve_reference();
    enum { N = 3001 };
    kve_coord *c = malloc(N * sizeof *c);
    uint64_t *want = malloc(N * 8), *got = malloc(N * 8);
    ck_assert(c && want && got);
    for (int round = 0; round < 8; round++) {
        uint64_t seed = kve_splitmix64(&rng);
        uint32_t flags = kve_rand_below(&rng, 8);
        for (int i = 0; i < N; i++)
            c[i] =
                (kve_coord){kve_splitmix64(&rng) % 5, (uint32_t)kve_splitmix64(&rng), (uint32_t)kve_splitmix64(&rng),
                            (uint32_t)kve_splitmix64(&rng), kve_rand_below(&rng, 4)};
        ck_assert_int_eq(kve_keys(ref, seed, flags, c, N, want), KVE_OK);
        size_t s = kve_pick_shape(&rng);
        ck_assert_int_eq(
            kve_emu_keys(kve_pools[s], 1 + kve_rand_below(&rng, 7), seed, flags, c, N, got), 0);
        ck_assert_int_eq(memcmp(want, got, N * 8), 0);
    }
    free(c);
    free(want);
    free(got);
    kve_context_destroy(ref);
}
END_TEST

START_TEST(test_evict_golden)
{
    for (size_t i = 0; i < KVE_GOLDEN_N_CASES; i++) {
        const kve_golden_case *g = &kve_golden_cases[i];
        kve_seq seq = {g->seq_id, g->prompt, g->round};
        kve_batch b = {g->seed, g->flags, 1, &seq, 1, 1, g->layer, g->head, g->n_slots,
                       g->budget, g->window, g->slot_pos, g->n_slots, NULL, 0};
        int32_t ev[64], kept[64];
        uint32_t ne = 99, nk = 99;
        uint8_t fl = 99;
        kve_evict_out o = {.evicted = ev, .evicted_stride = 64, .n_evicted = &ne, .n_kept = &nk,
                           .head_flags = &fl, .kept = kept, .kept_stride = 64};
        kve_emu_errors e;
        kve_emu_errors_reset(&e);
        size_t s = i % KVE_N_SHAPES;
        ck_assert_int_eq(kve_emu_evict(kve_pools[s], 1, (int)(i & 1), &b, &o, &e), 0);
        char msg[512];
        ck_assert_int_eq(kve_emu_errors_status(&e, msg, sizeof msg), KVE_OK);
        ck_assert_msg(ne == g->n_evicted && nk == g->n_kept, "%s: n_evicted %u n_kept %u",
                      g->name, ne, nk);
        ck_assert_int_eq(memcmp(ev, g->evicted, ne * 4), 0);
        ck_assert_int_eq(memcmp(kept, g->kept, nk * 4), 0);
        ck_assert_int_eq(fl, g->over_budget ? KVE_HEAD_OVER_BUDGET : 0);
    }
}
END_TEST

/* One case through the reference and the emulator, on a random block
 * shape, grid and scratch placement: same status and outputs. */
static void kve_check_case(const kve_case *c, kve_context *ref, uint64_t *rng, int expect_error)
{
    kve_case_bufs want, got;
    ck_assert_int_eq(kve_case_host_copy(c, &want), 0);
    ck_assert_int_eq(kve_case_host_copy(c, &got), 0);
    kve_status st_ref = kve_case_run(ref, c, &want, NULL, 0);
    char ref_msg[512], msg[512], why[1280];
    snprintf(ref_msg, sizeof ref_msg, "%s", kve_last_error());
    ck_assert_msg(expect_error || st_ref == KVE_OK, "%s: %s", c->label, ref_msg);
    size_t s = kve_pick_shape(rng);
    uint32_t work = (uint32_t)c->heads * (c->is_compact ? c->desc.n_caches : 1);
    uint32_t grid = 1 + kve_rand_below(rng, work + 2), unit = 0;
    int global = (int)kve_rand_below(rng, 2);
    kve_emu_errors e;
    kve_emu_errors_reset(&e);
    kve_emu_track_case(c, &got, 1);
    kve_emu_track(&e, sizeof e);
    ck_assert_int_eq(kve_emu_run_case(kve_pools[s], grid, global, c, &got, &e, &unit), 0);
    kve_emu_untrack(&e);
    kve_emu_track_case(c, &got, 0);
    kve_status st = kve_emu_errors_status(&e, msg, sizeof msg);
    ck_assert_msg(!kve_case_verdict(c, st, msg, &got, st_ref, ref_msg, &want, why, sizeof why),
                  "%s [block %u, warp %u, grid %u, %s scratch, unit %u]: emulated vs CPU: %s",
                  c->label, kve_shapes[s][0], kve_shapes[s][1], grid, global ? "global" : "shared",
                  unit, why);
    kve_case_host_free(c, &want);
    kve_case_host_free(c, &got);
}

/* @p n random evictions from @p seed (every 50th with up to 2,500 slots,
 * past 2,048: when @p big), each against the reference. */
static void kve_evict_cases(uint64_t seed, unsigned n, kve_case_limits lim, int big)
{
    uint64_t rng = seed;
    kve_context *ref = kve_reference();
    uint32_t max_slots = lim.max_slots;
    for (unsigned i = 0; i < n; i++) {
        kve_case c;
        lim.max_slots = big && i % 50 == 49 ? 2500 : max_slots;
        ck_assert_int_eq(kve_case_evict(&c, &rng, &lim), 0);
        kve_check_case(&c, ref, &rng, lim.errors);
        kve_case_free(&c);
    }
    kve_context_destroy(ref);
}

START_TEST(test_evict_random)
{
    kve_case_limits lim = {700, 3, 0};
    kve_evict_cases(0x5eed0001, kve_env_count("KVE_EMU_CASES", 2000), lim, 1);
}
END_TEST

START_TEST(test_evict_errors)
{
    kve_case_limits lim = {300, 3, 1};
    kve_evict_cases(0x5eed0002, 200, lim, 0);
}
END_TEST

/* KVE_TRUSTED_SLOTS with a broken promise: the keep-set is unspecified, but
 * the kernel stays inside its rows (ASan watches in the sanitized build)
 * and the counts inside their bounds. */
START_TEST(test_evict_trusted_duplicates)
{
    uint64_t rng = 0x5eed0006;
    kve_case_limits lim = {300, 3, 1};
    for (unsigned i = 0; i < 150; i++) {
        kve_case c;
        ck_assert_int_eq(kve_case_evict(&c, &rng, &lim), 0);
        c.batch.flags |= KVE_TRUSTED_SLOTS;
        kve_case_bufs got;
        kve_batch b;
        kve_evict_out o;
        ck_assert_int_eq(kve_case_host_copy(&c, &got), 0);
        kve_case_bind_evict(&c, &got, &b, &o);
        kve_emu_errors e;
        kve_emu_errors_reset(&e);
        size_t s = kve_pick_shape(&rng);
        ck_assert_int_eq(kve_emu_evict(kve_pools[s], 1 + kve_rand_below(&rng, 4), (int)(i & 1),
                                       &b, &o, &e),
                         0);
        uint32_t cap = b.n_slots > b.budget ? b.n_slots - b.budget : 0;
        /* no range error raised */
        for (size_t h = 0; h < c.heads && e.rec[KVE_DEV_ERR_SLOT_RANGE] == KVE_DEV_ERR_NONE; h++)
            ck_assert_msg(o.n_evicted[h] <= cap && o.n_kept[h] <= b.n_slots, "%s: head %zu",
                          c.label, h);
        kve_case_host_free(&c, &got);
        kve_case_free(&c);
    }
}
END_TEST

static void kve_compact_cases(uint64_t seed, unsigned n, int errors)
{
    uint64_t rng = seed;
    kve_context *ref = kve_reference();
    kve_case_limits lim = {400, 2, 0}, clim = {400, 2, errors};
    for (unsigned i = 0; i < n; i++) {
        kve_case ev, c;
        ck_assert_int_eq(kve_case_evict(&ev, &rng, &lim), 0);
        ck_assert_int_eq(kve_case_compact(&c, &ev, ref, &rng, &clim), 0);
        kve_check_case(&c, ref, &rng, errors);
        kve_case_free(&c);
        kve_case_free(&ev);
    }
    kve_context_destroy(ref);
}

START_TEST(test_compact_random) { kve_compact_cases(0x5eed0003, 400, 0); }
END_TEST

START_TEST(test_compact_errors) { kve_compact_cases(0x5eed0004, 100, 1); }
END_TEST

/* Every 16-byte-aligned layout takes the vectorized path. */
START_TEST(test_compact_unit)
{
    uint64_t rng = 0x5eed0005;
    kve_context *ref = kve_reference();
    kve_case_limits lim = {64, 2, 0};
    int seen[17] = {0};
    for (int i = 0; i < 60; i++) {
        kve_case ev, c;
        ck_assert_int_eq(kve_case_evict(&ev, &rng, &lim), 0);
        ck_assert_int_eq(kve_case_compact(&c, &ev, ref, &rng, &lim), 0);
        kve_case_bufs got;
        kve_compact_desc d;
        ck_assert_int_eq(kve_case_host_copy(&c, &got), 0);
        kve_case_bind_compact(&c, &got, &d);
        kve_emu_errors e;
        uint32_t unit = 0;
        kve_emu_errors_reset(&e);
        ck_assert_int_eq(kve_emu_compact(kve_pools[0], 3, &d, &e, &unit), 0);
        int aligned16 = d.entry_bytes % 16 == 0 && d.src[0].stride_slot % 16 == 0 &&
                        (uintptr_t)d.src[0].base % 16 == 0 && d.n_caches == 1 && !d.dst[0].base &&
                        d.src[0].stride_head % 16 == 0;
        ck_assert(!aligned16 || unit == 16);
        seen[unit]++;
        kve_case_host_free(&c, &got);
        kve_case_free(&c);
        kve_case_free(&ev);
    }
    ck_assert(seen[16] && seen[4] && seen[1]);
    kve_context_destroy(ref);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(keys, test_keys_golden),
        KVE_TEST(keys, test_keys_random),
        KVE_TEST(keys, test_evict_golden),
        KVE_TEST(evict, test_evict_random),
        KVE_TEST(errors, test_evict_errors),
        KVE_TEST(errors, test_compact_errors),
        KVE_TEST(errors, test_evict_trusted_duplicates),
        KVE_TEST(compact, test_compact_random),
        KVE_TEST(compact, test_compact_unit),
    };
    const kve_suite_spec spec = {"emu", 1200, 0, kve_pools_setup, kve_pools_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
