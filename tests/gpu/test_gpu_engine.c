/*
 * test_gpu_engine.c — the engine integration on the device against the
 * CPU: kve_cache_write on every layout (the drop-in for vLLM's
 * reshape_and_cache_flash), device-found errors in rows, slots and page
 * tables, and cache-state programs (every sharing mode, admit / append /
 * retire / rebuild, the cache writes their mappings drive) whose tables,
 * mappings and caches must equal the CPU's bit for bit; and a KVE_SCORED
 * state's step planned on the device (kve_state_score_device, the scored
 * kve_state_append_device: tests/lib/kve_score_device_run.h).
 *
 * $KVE_GPU_CASES scales the random cache writes (default 10000: 3000).
 */
#include <stdio.h>
#include <string.h>

#include "kve_engine_cases.h"
#include "kve_scenario.h"
#include "kve_score_device_run.h"
#include "test_gpu.h"

/* @p n random cache writes from @p seed on the device against the CPU;
 * every tenth with up to 2,000 tokens (a prefill) when @p prefill. */
static void kve_cache_write_cases(uint64_t seed, unsigned n, kve_cw_limits lim, int prefill)
{
    uint64_t rng = seed;
    uint32_t max_tokens = lim.max_tokens;
    for (unsigned i = 0; i < n; i++) {
        kve_case c;
        lim.max_tokens = prefill && i % 10 == 9 ? 2000 : max_tokens;
        ck_assert_int_eq(kve_case_cache_write(&c, &rng, &lim), 0);
        kve_check_case(&c, 0);
        kve_case_free(&c);
    }
}

START_TEST(test_cache_write_random)
{
    kve_cw_limits lim = {200, 8, 0};
    kve_cache_write_cases(0x6e0101, kve_env_count("KVE_GPU_CASES", 10000) * 3 / 10, lim, 1);
}
END_TEST

START_TEST(test_cache_write_errors)
{
    kve_cw_limits lim = {64, 6, 1};
    kve_cache_write_cases(0x6e0102, 400, lim, 0);
    /* the records were cleared: a good call is clean again */
    kve_cw_limits ok = {16, 2, 0};
    kve_cache_write_cases(0x6e0109, 1, ok, 0);
}
END_TEST

static void kve_scenarios(uint64_t seed, unsigned n, kve_scenario_kind kind)
{
    char why[2048];
    ck_assert_msg(!kve_scenarios_run(seed, n, kind, kve_cpu, kve_gpu, NULL, NULL, why, sizeof why),
                  "%s", why);
}

START_TEST(test_state_random) { kve_scenarios(0x6e0103, 300, KVE_SCENARIO_SMALL); }
END_TEST

START_TEST(test_state_many_rows) { kve_scenarios(0x6e0104, 4, KVE_SCENARIO_MANY_ROWS); }
END_TEST

START_TEST(test_state_large) { kve_scenarios(0x6e0105, 2, KVE_SCENARIO_LARGE); }
END_TEST

/* A state in the caller's device memory, and the tables' layout. */
START_TEST(test_state_caller_memory)
{
    kve_state_desc d = {{7, 0, 32, 4, 8}, 3, 2, 4, 0, 0, 64, 0, 0, 0};
    size_t bytes = 0;
    void *mem = NULL;
    kve_state *st = NULL;
    ck_assert_int_eq(kve_state_memory_size(kve_gpu, &d, &bytes), KVE_OK);
    ck_assert_int_eq(kve_alloc(kve_gpu, bytes, &mem), KVE_OK);
    ck_assert_int_eq(kve_state_create(kve_gpu, &d, mem, bytes - 1, &st), KVE_ERR_WORKSPACE);
    ck_assert_int_eq(kve_state_create(kve_gpu, &d, mem, bytes, &st), KVE_OK);
    ck_assert_int_eq(kve_state_admit(st, 1, 99, 10), KVE_OK);
    uint32_t row = 1, n = 100;
    ck_assert_int_eq(kve_state_append(st, 1, &row, &n, NULL), KVE_OK);
    kve_state_layout lay;
    ck_assert_int_eq(kve_state_get_layout(st, &lay), KVE_OK);
    int32_t tab[8 * 64];
    ck_assert_int_eq(kve_state_read_slots(st, 1, tab, 8 * 64), KVE_OK);
    ck_assert_int_eq(kve_context_synchronize(kve_gpu), KVE_OK);
    for (int i = 0; i < 10; i++) /* the prompt is never evicted */
        ck_assert_int_eq(tab[i], i);
    kve_state_destroy(st);
    ck_assert_int_eq(kve_free(kve_gpu, mem), KVE_OK);
}
END_TEST

/* Issue 39: the scorer's device row list and the scored planned append on
 * the device, against its own eager kve_state_score and the CPU. */
START_TEST(test_state_score_device)
{
    uint32_t due = 0, refusals = 0;
    for (uint64_t k = 0; k < 40; k++)
        sd_run(kve_gpu, kve_last_error, kve_cpu, 0x39e0000 + k, 12, &due, &refusals);
    ck_assert_uint_gt(due, 100);
    ck_assert_uint_gt(refusals, 10);
    sd_nan_run(kve_gpu, kve_last_error, kve_cpu); /* a NaN: refused, nothing changed */
}
END_TEST

size_t kve_engine_tests(kve_suite_test *out, size_t room)
{
    const kve_suite_test tests[] = {
        KVE_TEST(device, test_state_caller_memory),
        KVE_TEST(device, test_cache_write_random),
        KVE_TEST(device, test_cache_write_errors),
        KVE_TEST(device, test_state_random),
        KVE_TEST(device, test_state_many_rows),
        KVE_TEST(device, test_state_large),
        KVE_TEST(device, test_state_score_device),
    };
    memcpy(out, tests, (KVE_COUNT(tests) < room ? KVE_COUNT(tests) : room) * sizeof *tests);
    return KVE_COUNT(tests);
}
