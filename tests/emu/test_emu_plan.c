/*
 * test_emu_plan.c — the launch plan of kernels_cuda/kve_launch.h, the one
 * the GPU driver (backends/gpu.cu) launches with, on the emulated device:
 *
 *   plan       kve_evict_plan_make and the other launches' grids against
 *              answers worked out by hand: block sizes at each step, the
 *              shared-memory / workspace boundary, grid caps, alignment
 *   sides      random evictions through the public API of an emulated
 *              context whose shared memory holds the scratch or not (and
 *              exactly at the boundary), with the caller's workspace or
 *              the library's: outputs and statuses as the scalar CPU's
 *   state      cache-state programs whose eviction waves run on the
 *              emulated device in its shared memory or in the state's
 *              workspace, against the CPU
 *
 * $KVE_EMU_CASES scales the random evictions (default 2000: a fifth).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_launch.h"
#include "kve_scenario.h"

/* ---- the plan against worked answers ---------------------------------------- */

static kve_batch kve_shape(uint32_t n_seqs, uint32_t n_layers, uint32_t n_heads, uint32_t n_slots)
{
    kve_batch b;
    memset(&b, 0, sizeof b);
    b.n_seqs = n_seqs;
    b.n_layers = n_layers;
    b.n_heads = n_heads;
    b.n_slots = n_slots;
    return b;
}

typedef struct {
    uint32_t n_slots, threads;
    size_t stride; /* kve_evict_scratch_stride: 12 bytes a slot, up to 256 */
} kve_plan_step;

START_TEST(test_plan_threads_and_stride)
{
    static const kve_plan_step steps[] = {
        {1, 64, 256},       {21, 64, 256},      {22, 64, 512},     {256, 64, 3072},
        {257, 128, 3328},   {1024, 128, 12288}, {1025, 256, 12544}, {4096, 256, 49152},
        {4097, 512, 49408}, {20000, 512, 240128}};
    for (size_t i = 0; i < KVE_COUNT(steps); i++) {
        ck_assert_uint_eq(kve_evict_threads(steps[i].n_slots), steps[i].threads);
        ck_assert_uint_eq(kve_evict_scratch_stride(steps[i].n_slots), steps[i].stride);
        ck_assert_uint_eq(kve_evict_threads(steps[i].n_slots) % 64, 0);
        ck_assert_uint_le(kve_evict_threads(steps[i].n_slots), KVE_EVICT_MAX_THREADS);
    }
}
END_TEST

START_TEST(test_plan_shared_or_workspace)
{
    /* an H100-like device: 132 SMs, 227 KiB less 1 KiB of static state */
    kve_launch_limits lim = kve_launch_limits_of(132, 226 * 1024);
    ck_assert_uint_eq(lim.max_grid, 132 * 32);
    ck_assert_uint_eq(lim.max_grid_workspace, 132 * 2);
    ck_assert_uint_eq(lim.evict_smem_max, 226 * 1024);

    /* 2,112 slots (G2): 25,344 bytes, shared; 4 x 8 x 32 heads, under the cap */
    kve_batch b = kve_shape(4, 8, 32, 2112);
    kve_evict_plan p = kve_evict_plan_make(&lim, &b);
    ck_assert_int_eq(p.place, KVE_SCRATCH_SHARED);
    ck_assert_uint_eq(p.threads, 256);
    ck_assert_uint_eq(p.grid, 1024);
    ck_assert_uint_eq(p.dyn_smem, 25344);
    ck_assert_uint_eq(p.scratch_stride, 0);
    ck_assert_uint_eq(p.workspace_bytes, 0);
    ck_assert_ptr_null(kve_evict_plan_scratch(&p, (void *)(uintptr_t)0x1001));

    /* 19,300 slots: 231,600 bytes, up to 231,680 > 226 KiB (231,424): the
     * workspace, 264 blocks of 231,680 bytes, + 256 to align the pointer */
    b = kve_shape(1, 40, 8, 19300);
    p = kve_evict_plan_make(&lim, &b);
    ck_assert_int_eq(p.place, KVE_SCRATCH_WORKSPACE);
    ck_assert_uint_eq(p.threads, 512);
    ck_assert_uint_eq(p.grid, 264);
    ck_assert_uint_eq(p.dyn_smem, 0);
    ck_assert_uint_eq(p.scratch_stride, 231680);
    ck_assert_uint_eq(p.workspace_bytes, (size_t)264 * 231680 + 256);
    ck_assert_ptr_eq(kve_evict_plan_scratch(&p, (void *)(uintptr_t)0x1001),
                     (void *)(uintptr_t)0x1100);
    ck_assert_ptr_eq(kve_evict_plan_scratch(&p, (void *)(uintptr_t)0x1100),
                     (void *)(uintptr_t)0x1100);

    /* 19,285 slots: 231,420 bytes, up to 231,424, exactly the limit: shared */
    b = kve_shape(1, 40, 8, 19285);
    p = kve_evict_plan_make(&lim, &b);
    ck_assert_int_eq(p.place, KVE_SCRATCH_SHARED);
    ck_assert_uint_eq(p.dyn_smem, 231424);
    ck_assert_uint_eq(p.grid, 320);

    /* at the boundary: a stride equal to the limit is shared, one byte
     * more is not; fewer heads than the cap give one block per head */
    b = kve_shape(1, 1, 3, 256);
    lim.evict_smem_max = 3072;
    p = kve_evict_plan_make(&lim, &b);
    ck_assert_int_eq(p.place, KVE_SCRATCH_SHARED);
    ck_assert_uint_eq(p.grid, 3);
    lim.evict_smem_max = 3071;
    p = kve_evict_plan_make(&lim, &b);
    ck_assert_int_eq(p.place, KVE_SCRATCH_WORKSPACE);
    ck_assert_uint_eq(p.grid, 3);
    ck_assert_uint_eq(p.workspace_bytes, 3 * 3072 + 256);

    /* no heads: one block, no workspace beyond the alignment room */
    b = kve_shape(0, 1, 1, 256);
    p = kve_evict_plan_make(&lim, &b);
    ck_assert_uint_eq(p.grid, 1);
    ck_assert_uint_eq(p.workspace_bytes, 3072 + 256);
}
END_TEST

START_TEST(test_plan_other_launches)
{
    kve_launch_limits lim = kve_launch_limits_of(2, 0); /* grids of at most 64 blocks */
    ck_assert_uint_eq(kve_launch_grid(0, 256, lim.max_grid), 1);
    ck_assert_uint_eq(kve_launch_grid(257, 256, lim.max_grid), 2);
    ck_assert_uint_eq(kve_launch_grid(1u << 20, 256, lim.max_grid), 64);
    ck_assert_uint_eq(kve_keys_plan_grid(&lim, 3001, KVE_KEYS_THREADS), 12);

    kve_compact_args ca;
    memset(&ca, 0, sizeof ca);
    ca.heads = 40;
    ca.d.n_caches = 2;
    kve_compact_plan cp = kve_compact_plan_make(&lim, &ca);
    ck_assert_uint_eq(cp.move_grid, 64); /* 80 (head, cache) pairs, capped */
    ck_assert_uint_eq(cp.slots_grid, 40);

    kve_state_update u;
    memset(&u, 0, sizeof u);
    u.work = 1000;
    ck_assert_uint_eq(kve_state_plan_grid(&lim, &u, KVE_STATE_THREADS), 4);

    /* 100 entries of 4 lanes each on 256 threads: 64 entries a block; 60
     * move items more take one block more, in the same launch */
    kve_cache_write_args wa;
    memset(&wa, 0, sizeof wa);
    wa.group = 4;
    wa.entries = 100;
    kve_cache_write_plan wp = kve_cache_write_plan_make(&lim, &wa, KVE_CACHE_WRITE_THREADS);
    ck_assert_uint_eq(wp.items, 100);
    ck_assert_uint_eq(wp.grid, 2);
    wa.move_entries = 60;
    wp = kve_cache_write_plan_make(&lim, &wa, KVE_CACHE_WRITE_THREADS);
    ck_assert_uint_eq(wp.items, 160);
    ck_assert_uint_eq(wp.grid, 3);
}
END_TEST

/* ---- both sides through the public API ------------------------------------------ */

/* The emulated device's shared-memory limit for a case of @p n_slots:
 * none, one byte short of its scratch, exactly it, or everything. */
static size_t kve_pick_smem(uint64_t *rng, uint32_t n_slots)
{
    size_t stride = kve_evict_scratch_stride(n_slots);
    switch (kve_rand_below(rng, 4)) {
    case 0:
        return 0;
    case 1:
        return stride - 1;
    case 2:
        return stride;
    default:
        return SIZE_MAX;
    }
}

/* One eviction on the reference and on the emulated device under the
 * current limits: the same status and outputs, and the launch the plan
 * says. Returns the placement it ran with. */
static kve_scratch_place kve_check_sides(const kve_case *c, uint64_t *rng)
{
    kve_case_bufs want, got;
    kve_batch b;
    kve_evict_out o;
    ck_assert_int_eq(kve_case_host_copy(c, &want), 0);
    ck_assert_int_eq(kve_case_host_copy(c, &got), 0);
    kve_status st_ref = kve_case_run(kve_ref, c, &want, NULL, 0);
    char ref_msg[512], why[1280];
    snprintf(ref_msg, sizeof ref_msg, "%s", kve_last_error());

    kve_case_bind_evict(c, &got, &b, &o);
    kve_launch_limits lim = kve_emu_context_limits();
    kve_evict_plan p = kve_evict_plan_make(&lim, &b);
    size_t ws_bytes = 0;
    ck_assert_int_eq(kve_evict_workspace_size(kve_emu, &b, &ws_bytes), KVE_OK);
    ck_assert_uint_ge(ws_bytes, p.workspace_bytes);
    /* the caller's workspace, garbage-filled, or none (the library's) */
    int own = kve_chance(rng, 50);
    unsigned char *ws = own && ws_bytes ? malloc(ws_bytes) : NULL;
    if (ws)
        memset(ws, 0x5a, ws_bytes);
    kve_emu_launch_rec log[8];
    kve_emu_log_start(log, KVE_COUNT(log));
    kve_emu_track_case(c, &got, 1);
    kve_status st = kve_case_run(kve_emu, c, &got, ws, ws ? ws_bytes : 0);
    kve_emu_track_case(c, &got, 0);
    uint32_t n_log = kve_emu_log_stop();
    if (st == KVE_OK)
        st = kve_context_synchronize(kve_emu);
    const char *msg = kve_emu_context_message();
    ck_assert_msg(!kve_case_verdict(c, st, msg, &got, st_ref, ref_msg, &want, why, sizeof why),
                  "%s [%s scratch, grid %u, %s workspace]: emulated vs CPU: %s", c->label,
                  p.place == KVE_SCRATCH_SHARED ? "shared" : "workspace", p.grid,
                  ws ? "caller's" : "library's", why);
    int launched = 0;
    for (uint32_t k = 0; k < n_log && k < KVE_COUNT(log); k++) {
        if (strcmp(log[k].what, "kve_evict_kernel"))
            continue;
        launched++;
        ck_assert_uint_eq(log[k].grid, p.grid);
        ck_assert_uint_eq(log[k].threads, p.threads);
        ck_assert_uint_eq(log[k].bytes, p.dyn_smem);
        ck_assert_uint_eq(log[k].scratch_stride, p.scratch_stride);
    }
    ck_assert_int_eq(launched, 1);
    free(ws);
    kve_case_host_free(c, &want);
    kve_case_host_free(c, &got);
    return p.place;
}

static void kve_sides(uint64_t seed, unsigned n, int errors)
{
    uint64_t rng = seed;
    kve_case_limits lim = {700, 3, errors};
    unsigned seen[2] = {0, 0};
    for (unsigned i = 0; i < n; i++) {
        kve_case c;
        ck_assert_int_eq(kve_case_evict(&c, &rng, &lim), 0);
        uint32_t max_grid = 1 + kve_rand_below(&rng, 8);
        kve_emu_context_use(kve_serial_pools[0], max_grid, kve_pools[kve_pick_shape(&rng)]);
        kve_emu_context_evict_limits(kve_pick_smem(&rng, c.batch.n_slots),
                                     1 + kve_rand_below(&rng, max_grid));
        seen[kve_check_sides(&c, &rng)]++;
        kve_case_free(&c);
    }
    ck_assert_uint_gt(seen[KVE_SCRATCH_SHARED], 0);
    ck_assert_uint_gt(seen[KVE_SCRATCH_WORKSPACE], 0);
}

START_TEST(test_sides_random)
{
    kve_sides(0x91a40001, kve_env_count("KVE_EMU_CASES", 2000) / 5, 0);
}
END_TEST

START_TEST(test_sides_errors) { kve_sides(0x91a40002, 120, 1); }
END_TEST

/* ---- a cache state's eviction waves on both sides ------------------------------- */

/* Before program @p i: the eviction on the emulated device (a threaded
 * pool), its scratch in shared memory for even programs and in the
 * state's workspace for odd ones. */
static const char *kve_state_side(unsigned i, void *arg)
{
    uint64_t *rng = (uint64_t *)arg;
    uint32_t max_grid = 1 + kve_rand_below(rng, 6);
    kve_emu_context_use(kve_serial_pools[kve_pick_shape(rng)], max_grid, kve_pools[0]);
    kve_emu_context_evict_limits(i & 1 ? 0 : SIZE_MAX, 1 + kve_rand_below(rng, max_grid));
    return i & 1 ? "eviction scratch in the workspace" : "eviction scratch in shared memory";
}

START_TEST(test_state_sides)
{
    uint64_t rng = 0x91a40003;
    char why[2048];
    int rc = kve_scenarios_run(0x91a40004, 24, KVE_SCENARIO_SMALL, kve_ref, kve_emu,
                               kve_state_side, &rng, why, sizeof why);
    ck_assert_msg(!rc, "%s %s", why, kve_emu_context_message());
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(plan, test_plan_threads_and_stride),
        KVE_TEST(plan, test_plan_shared_or_workspace),
        KVE_TEST(plan, test_plan_other_launches),
        KVE_TEST(plan_sides, test_sides_random),
        KVE_TEST(plan_sides, test_sides_errors),
        KVE_TEST(plan_state, test_state_sides),
    };
    const kve_suite_spec spec = {"emu_plan", 1200, 0, kve_emu_fixture_setup,
                                  kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
