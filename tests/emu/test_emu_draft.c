/* test_emu_draft.c — speculative steps on the emulated device (issue 38,
 * deliverable 5): kve_state_draft planned by the planner kernel, commits
 * through kve_state_append_device and kve_state_append, and the commit's
 * kve_cache_write (src_slots and the round's moves in one launch) through
 * kernels_cuda/'s bodies; the same run as the CPU's
 * (tests/state/kve_state_draft.h). A draft launches the same kernels on
 * the same grids whatever its data, and a refusal maps its tokens to -1
 * and surfaces at kve_context_synchronize. */
#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_state_draft.h"

/* Commits eager (_i = 0) and planned on the device (_i = 1); two modes. */
START_TEST(test_draft_commit)
{
    kve_emu_context_use(kve_serial_pools[0], 5, kve_pools[0]);
    kd_counts seen = kd_run(kve_emu, _i < 2 ? 0 : KVE_SHARED_HEADS, 0xe3d + (uint64_t)_i, _i % 2, 120);
    ck_assert_uint_gt(seen.drafts_past_room, 20);
    ck_assert_uint_gt(seen.commits_round, 20);
}
END_TEST

/* The launches of a draft: the planner, the move lists' clearing and the
 * mapping, on grids of the call's shape alone; a refused call (a row
 * twice, an inactive row, too many drafts) maps -1 and is reported. */
START_TEST(test_draft_launches_and_refusals)
{
    kve_emu_context_use(kve_serial_pools[0], 5, kve_pools[0]);
    kve_state_desc d = ks_desc(0, 3, 2, 2, 8, 2, 4, 20);
    d.max_draft = 5;
    kve_state *st = NULL;
    KT_OK(kve_state_create(kve_emu, &d, NULL, 0, &st));
    KT_OK(kve_state_admit(st, 0, 1, 3));
    KT_OK(kve_state_admit(st, 1, 2, 0));
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(st, &lay));
    kd_step s;
    kd_step_init(kve_emu, &s, st, lay.table_layers, lay.table_heads, 16, 5);
    uint32_t *call = (uint32_t *)kd_dev(kve_emu, 6 * 4, NULL);
    static const uint32_t data[4][6] = {
        {0, 1, 0, 5, 1, 0}, {1, 0, 0, 0, 2, 0}, {0, 0, 0, 2, 3, 0}, {0, 2, 0, 1, 1, 0}};
    static const kve_status want[4] = {KVE_OK, KVE_OK, KVE_ERR_INVALID, KVE_ERR_INVALID};
    kve_emu_launch_rec first[16], log[16];
    uint32_t n_first = 0;
    kve_state_seq_info before, after;
    KT_OK(kve_state_get_seq(st, 0, &before));
    for (int k = 0; k < 4; k++) {
        kd_up(kve_emu, call, data[k], sizeof data[k]);
        kve_emu_log_start(k ? log : first, 16);
        KT_OK(kve_state_draft(st, 3, call, call + 3, 5, &s.b));
        uint32_t n = kve_emu_log_stop();
        ck_assert_uint_eq(kve_context_synchronize(kve_emu), want[k]);
        kd_step_read(kve_emu, &s);
        if (!k) {
            static const char *const names[] = {"kve_state_plan_kernel", "kve_state_kernel",
                                                "kve_state_kernel"};
            ck_assert_uint_eq(n, 3); /* no upload: planner, clear, mapping */
            for (uint32_t q = 0; q < n; q++)
                ck_assert_str_eq(first[q].what, names[q]);
            n_first = n;
        } else {
            ck_assert_uint_eq(n, n_first);
            for (uint32_t q = 0; q < n; q++) {
                ck_assert_str_eq(log[q].what, first[q].what);
                ck_assert_uint_eq(log[q].grid, first[q].grid);
            }
        }
        uint32_t tokens = data[k][3] + data[k][4] + data[k][5];
        for (uint32_t t = 0, i = 0, row = 0; t < tokens; t++, i++) {
            while (i >= data[k][3 + row]) {
                row++;
                i = 0;
            }
            kve_state_seq_info info;
            KT_OK(kve_state_get_seq(st, data[k][row], &info));
            for (size_t e = 0; e < lay.table_layers * lay.table_heads; e++) {
                int64_t m = s.map[((e / lay.table_heads) * 16 + t) * lay.table_heads +
                                  e % lay.table_heads];
                ck_assert_int_eq(m, want[k] ? -1 : (int64_t)info.capacity + i);
            }
        }
        for (size_t l = 0; l < s.lists; l++)
            ck_assert_uint_eq(s.n_moves[l], 0);
    }
    KT_OK(kve_state_get_seq(st, 0, &after));
    ck_assert(!memcmp(&before, &after, sizeof before));
    KT_OK(kve_free(kve_emu, call));
    kd_step_free(kve_emu, &s);
    kve_state_destroy(st);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(draft, test_draft_commit, 0, 4),
        KVE_TEST(draft, test_draft_launches_and_refusals),
    };
    const kve_suite_spec spec = {"emu_draft", 1200, 0, kve_emu_fixture_setup,
                                  kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
