/*
 * test_score.c — kve_score in C: a K-norm problem whose answers are exact
 * (norms 5, 10, 1, 2 among SPEC §3's candidates), the z-scores, weight,
 * accumulation and window. The scorers' argument checks and the calibration
 * loader's are test_errors.c's (score_bad_arguments, stats_file_checks) and
 * test_errors_state.c's (state_score_bad_arguments).
 */
#include <math.h>
#include <string.h>

#include "kve_score_fixture.h"
#include "kve_suite.h"
#include "kve_test_util.h"

START_TEST(knorm_known_answers)
{
    kve_context *ctx = NULL;
    KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
    kve_score_desc d = base_desc();
    for (int i = 0; i < 8; i++)
        g_out[i] = 99;
    ck_assert_msg(kve_score(ctx, &d) == KVE_OK, "raw: %s", kve_last_error());
    const float raw[8] = {0, -5, -10, -1, -2, 0, 0, 0};
    ck_assert_msg(memcmp(g_out, raw, sizeof raw) == 0, "raw K-norm: got %g %g %g %g", g_out[1],
                  g_out[2], g_out[3], g_out[4]);
    /* mean -4.5, biased std 3.5 */
    d.flags = KVE_SCORE_ZNORM;
    d.weight = 2;
    ck_assert_msg(kve_score(ctx, &d) == KVE_OK, "z: %s", kve_last_error());
    const double z[4] = {-0.5 / 3.5, -5.5 / 3.5, 3.5 / 3.5, 2.5 / 3.5};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(fabs(g_out[1 + i] - 2 * z[i]) < 1e-6, "z[%d] = %g, expected %g", i,
                      g_out[1 + i], 2 * z[i]);
    ck_assert_msg(g_out[0] == 0 && g_out[5] == 0 && g_out[6] == 0, "non-candidates not 0");
    float before = g_out[1];
    d.flags |= KVE_SCORE_ACCUMULATE;
    g_out[0] = 7;
    ck_assert_msg(kve_score(ctx, &d) == KVE_OK, "acc: %s", kve_last_error());
    ck_assert_msg(fabsf(g_out[1] - 2 * before) < 1e-6f && g_out[0] == 7,
                  "accumulate: %g (was %g), slot 0 %g", g_out[1], before, g_out[0]);
    /* the window takes the newest generated positions: W = 4 leaves only position 1 */
    g_row.window = 4;
    d = base_desc();
    g_row.window = 4;
    ck_assert_msg(kve_score(ctx, &d) == KVE_OK && g_out[1] == -5 && g_out[2] == 0,
                  "window 4: %g %g", g_out[1], g_out[2]);
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(score, knorm_known_answers),
    };
    const kve_suite_spec spec = {"score", 300, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
