/*
 * test_emu_score_device.c — a scored step planned on the device (issue 39):
 * kve_state_score_device scores every due row of a call for a table layer
 * in one launch, from the call's rows and counts in device memory and the
 * planner's device bookkeeping, and a KVE_SCORED state's
 * kve_state_append_device evicts with those scores.
 *
 *   random   tests/lib/kve_score_device_run.h on the emulator: random scored
 *            states (K-norm and TriAttention, z-normalized or
 *            not, GQA, shared heads, f32 and bf16 keys, contiguous and
 *            block-table caches) and random calls with padding rows, rows
 *            not due and rows the scored rules refuse: the device list's
 *            scores equal, byte for byte over the whole buffer, the eager
 *            kve_state_score of exactly the rows that are due; the planned
 *            append with them equals the CPU's host-API append with the
 *            same scores (tables, infos, digests); a call the rules refuse
 *            is refused on the device (reason 7) and changes nothing.
 *   graph    the scored step (every layer's score, then the append)
 *            captured once and replayed 150 steps equals the same step
 *            made eagerly, and the host API's eager step; its launches are
 *            the same every step (one kve_score_kernel per layer, whichever
 *            rows are due) and are kernel launches only.
 *   group    the scorer's scratch sized at creation (desc.score_group):
 *            a capture needs no warm-up, a larger group is refused and
 *            frees nothing, the graph replays as the eager call scores.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_backend.h"
#include "kve_score_device_run.h"

START_TEST(test_score_device_random)
{
    unsigned runs = kve_env_count("KVE_EMU_CASES", 2000) / 40;
    uint32_t due = 0, refusals = 0;
    uint64_t rng = 0x39d0001;
    for (unsigned k = 0; k < (runs ? runs : 1); k++) {
        /* a block shape and a small grid (blocks take several items),
         * threaded pools (the scorer syncs its blocks); the eviction too
         * (the device's own plan instead when the suite runs as the GPU
         * plans) */
        size_t shape = kve_pick_shape(&rng);
        kve_emu_context_use(kve_pools[shape], 1 + kve_rand_below(&rng, 8), kve_pools[shape]);
        sd_run(kve_emu, kve_emu_context_message, kve_ref, 0x39d0000 + k, 12, &due, &refusals);
    }
    ck_assert_uint_gt(due, runs * 3); /* the runs scored rounds, and refused calls */
    ck_assert_uint_gt(refusals, runs / 4);
}
END_TEST

/* The scored step: every layer's score from the device list, then the
 * planned append (one token a row). */
static kve_status sd_step(sd_rig *g, uint32_t table_layers)
{
    kve_score_desc d = sd_desc(g);
    kve_status st = KVE_OK;
    for (uint32_t tl = 0; st == KVE_OK && tl < table_layers; tl++)
        st = kve_state_score_device(g->st, g->c.rows, g->rows, g->n_new, tl, &d, g->scores,
                                    g->stride_row, g->stride_table);
    return st == KVE_OK ? kve_state_append_device(g->st, g->c.rows, g->rows, g->n_new, 1, &g->out)
                        : st;
}

START_TEST(test_score_device_graph)
{
    kve_emu_context_device_plan(32);
    sd_cfg c = {4, 2, 2, 8, 2, KVE_SCORE_ZNORM, KVE_SCORED, 6, 2, 2, 0, 4,
                KVE_SCORER_TRIATTENTION, KVE_DTYPE_BF16, KVE_PAGES_BLOCK_TABLE};
    kve_schedule s = {1, c.sched_flags, c.budget, c.window, c.interval};
    ck_assert_int_eq(kve_schedule_capacity(&s, c.prompt_max, &c.max_slots), KVE_OK);
    sd_rig a, b, h;
    sd_rig_init(&a, kve_emu, kve_emu_context_message, &c, 77);
    sd_rig_init(&b, kve_emu, kve_emu_context_message, &c, 77);
    sd_rig_init(&h, kve_emu, kve_emu_context_message, &c, 77);
    sd_rig *const rigs[3] = {&a, &b, &h};
    for (int k = 0; k < 3; k++)
        sd_rig_fill(rigs[k], 0x39);
    uint32_t ids[SD_ROWS_MAX] = {0, 1, 2, 3, 4, 5};
    uint32_t zeros[SD_ROWS_MAX] = {0};
    for (int k = 0; k < 2; k++) { /* an eager call first (no longer needed: issue 46.3) */
        kt_put(kve_emu, rigs[k]->rows, ids, c.rows * 4);
        kt_put(kve_emu, rigs[k]->n_new, zeros, c.rows * 4);
        kve_score_desc d = sd_desc(rigs[k]);
        ck_assert_int_eq(kve_state_score_device(rigs[k]->st, c.rows, rigs[k]->rows,
                                                rigs[k]->n_new, 0, &d, rigs[k]->scores,
                                                rigs[k]->stride_row, rigs[k]->stride_table),
                         KVE_OK);
    }
    kve_emu_graph *graph = NULL;
    kve_emu_launch_rec first[32], log[32];
    uint32_t n_first = 0, rounds = 0;
    uint64_t rng = 0x39a9, next_seq = 1;
    float *fa = (float *)malloc(a.scores_elems * 4), *fb = (float *)malloc(a.scores_elems * 4);
    for (int step = 0; step < 150; step++) {
        sd_lifecycle(&rng, rigs, 3, &next_seq);
        uint32_t n_new[SD_ROWS_MAX], active[SD_ROWS_MAX], ones[SD_ROWS_MAX], m = 0;
        for (uint32_t i = 0; i < c.rows; i++) {
            kve_state_seq_info info;
            ck_assert_int_eq(kve_state_get_seq(a.st, i, &info), KVE_OK);
            n_new[i] = info.active;
            rounds += sd_due(&info, &c, n_new[i]);
            if (info.active) {
                active[m] = i;
                ones[m++] = 1;
            }
        }
        for (int k = 0; k < 2; k++)
            kt_put(kve_emu, rigs[k]->n_new, n_new, c.rows * 4);
        kve_emu_log_start(n_first ? log : first, 32);
        ck_assert_int_eq(sd_step(&a, c.layers), KVE_OK);
        uint32_t n_log = kve_emu_log_stop();
        uint32_t scorer_launches = 0;
        for (uint32_t k = 0; k < n_log; k++)
            scorer_launches += !strcmp((n_first ? log : first)[k].what, "kve_score_kernel");
        ck_assert_uint_eq(scorer_launches, c.layers); /* one a layer, every row in it */
        kve_emu_log_same_step(first, &n_first, log, n_log, step, "planned scored step");
        if (!graph) {
            graph = kve_emu_capture_begin();
            ck_assert_int_eq(sd_step(&b, c.layers), KVE_OK);
            uint32_t nodes;
            const char *broken = kve_emu_capture_end(graph, &nodes);
            ck_assert_msg(!broken, "the captured scored step made %s", broken ? broken : "");
            ck_assert_uint_eq(nodes, n_first);
        }
        ck_assert_int_eq(kve_emu_graph_replay(kve_emu, graph), KVE_OK);
        /* H: the host API, eagerly: kve_state_score over the active rows
         * (their cache rows), then kve_state_append */
        kve_score_desc d = sd_desc(&h);
        int32_t cr[SD_ROWS_MAX];
        for (uint32_t k = 0; k < m; k++)
            cr[k] = (int32_t)active[k];
        d.cache_rows = cr;
        for (uint32_t tl = 0; tl < c.layers; tl++)
            ck_assert_msg(kve_state_score(h.st, m, active, ones, tl, &d, h.scores, h.stride_row,
                                          h.stride_table) == KVE_OK,
                          "%s", kve_last_error());
        ck_assert_msg(kve_state_append(h.st, m, active, ones, &h.out) == KVE_OK, "%s",
                      kve_last_error());
        sd_snap sa, sb, sh;
        sd_snap_take(&a, &sa);
        sd_snap_take(&b, &sb);
        sd_snap_take(&h, &sh);
        sd_snap_eq(&a, &sa, &sb, "replayed vs eager");
        sd_snap_eq(&a, &sa, &sh, "planned vs host API");
        kt_get(kve_emu, fa, a.scores, a.scores_elems * 4);
        kt_get(kve_emu, fb, b.scores, a.scores_elems * 4);
        ck_assert(!memcmp(fa, fb, a.scores_elems * 4));
        free(sa.slots);
        free(sb.slots);
        free(sh.slots);
    }
    ck_assert_uint_gt(rounds, 30);
    free(fa);
    free(fb);
    kve_emu_graph_destroy(graph);
    sd_rig_fini(&a);
    sd_rig_fini(&b);
    sd_rig_fini(&h);
    kve_emu_context_device_plan(0);
}
END_TEST

/* Issue 46 item 3: the scorer's scratch is part of the state's memory,
 * sized by desc.score_group, so a capture with no call before it holds
 * launches only; a scorer of a larger group called eagerly after the
 * capture is refused (KVE_ERR_RANGE naming desc.score_group) and allocates
 * and frees nothing, so the graph replays as the eager call scores (were
 * the scratch freed, ASan in the sanitize build would see the replay write
 * freed memory). */
START_TEST(test_score_device_group)
{
    sd_cfg c = {2, 1, 2, 8, 1, 0, KVE_SCORED, 6, 2, 2, 0, 4,
                KVE_SCORER_TRIATTENTION, KVE_DTYPE_F32, KVE_PAGES_NONE};
    kve_schedule s = {1, c.sched_flags, c.budget, c.window, c.interval};
    ck_assert_int_eq(kve_schedule_capacity(&s, c.prompt_max, &c.max_slots), KVE_OK);
    kve_emu_context_device_plan(64);
    sd_rig g;
    sd_rig_init(&g, kve_emu, kve_emu_context_message, &c, 5);
    sd_rig_fill(&g, 5);
    uint32_t due[2] = {1, 1};
    for (uint32_t r = 0; r < 2; r++) { /* full rows: the next token rounds */
        kve_state_seq_info info;
        ck_assert_int_eq(kve_state_admit(g.st, r, 40 + r, 2), KVE_OK);
        ck_assert_int_eq(kve_state_get_seq(g.st, r, &info), KVE_OK);
        uint32_t fill = info.capacity;
        ck_assert_int_eq(kve_state_append(g.st, 1, &r, &fill, NULL), KVE_OK);
    }
    uint32_t ids[2] = {0, 1};
    kt_put(kve_emu, g.rows, ids, 8);
    kt_put(kve_emu, g.n_new, due, 8);
    kve_score_desc d = sd_desc(&g);
    kve_emu_graph *graph = kve_emu_capture_begin();
    ck_assert_int_eq(kve_state_score_device(g.st, 2, g.rows, g.n_new, 0, &d, g.scores,
                                            g.stride_row, g.stride_table),
                     KVE_OK);
    uint32_t nodes;
    const char *broken = kve_emu_capture_end(graph, &nodes);
    ck_assert_msg(!broken, "the first call's capture made %s", broken ? broken : "");
    ck_assert_uint_eq(nodes, 1);
    /* a larger group, eagerly: refused, nothing taken or given back */
    kve_score_desc wide = d;
    wide.tri.group = 2;
    wide.tri.q_mean = (float *)kt_alloc(kve_emu, (size_t)c.heads * 2 * (c.dim / 2) * 2 * 4);
    wide.tri.q_abs_mean = (float *)kt_alloc(kve_emu, (size_t)c.heads * 2 * (c.dim / 2) * 4);
    ck_assert_int_eq(kve_state_score_device(g.st, 2, g.rows, g.n_new, 0, &wide, g.scores,
                                            g.stride_row, g.stride_table),
                     KVE_ERR_RANGE);
    ck_assert_msg(strstr(kve_last_error(), "desc.score_group = 1"), "%s", kve_last_error());
    /* the replay scores as an eager call does */
    sd_fill_scores(&g, -5.0f);
    ck_assert_int_eq(kve_emu_graph_replay(kve_emu, graph), KVE_OK);
    ck_assert_int_eq(kve_context_synchronize(kve_emu), KVE_OK);
    float *replayed = (float *)malloc(g.scores_elems * 4);
    float *eager = (float *)malloc(g.scores_elems * 4);
    kt_get(kve_emu, replayed, g.scores, g.scores_elems * 4);
    sd_fill_scores(&g, -5.0f);
    ck_assert_int_eq(kve_state_score_device(g.st, 2, g.rows, g.n_new, 0, &d, g.scores,
                                            g.stride_row, g.stride_table),
                     KVE_OK);
    ck_assert_int_eq(kve_context_synchronize(kve_emu), KVE_OK);
    kt_get(kve_emu, eager, g.scores, g.scores_elems * 4);
    ck_assert(!memcmp(replayed, eager, g.scores_elems * 4));
    size_t scored = 0;
    for (size_t i = 0; i < g.scores_elems; i++)
        scored += replayed[i] != -5.0f + (float)(i % 7);
    ck_assert_uint_gt(scored, 0); /* the rows were due: scored */
    free(replayed);
    free(eager);
    KT_OK(kve_free(kve_emu, (void *)wide.tri.q_mean));
    KT_OK(kve_free(kve_emu, (void *)wide.tri.q_abs_mean));
    kve_emu_graph_destroy(graph);
    sd_rig_fini(&g);
    kve_emu_context_device_plan(0);
}
END_TEST

/* A NaN at a candidate: the call refused, outputs reset, the state unchanged. */
START_TEST(test_score_device_nan)
{
    kve_emu_context_device_plan(32);
    sd_nan_run(kve_emu, kve_emu_context_message, kve_ref);
    kve_emu_context_device_plan(0);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(score_device, test_score_device_random),
        KVE_TEST(score_device_graph, test_score_device_graph),
        KVE_TEST(score_device_graph, test_score_device_group),
        KVE_TEST(score_device_graph, test_score_device_nan),
    };
    const kve_suite_spec spec = {"emu_score_device", 1800, 0, kve_emu_fixture_setup,
                                  kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
