/* test_suite_guard.c — kve_suite.h's guards, driven by ctest: this suite
 * passes as registered, and each way of losing tests (see
 * tests/core/CMakeLists.txt) must make the runner fail with its message. */
#include <stdlib.h>

#include "kve_suite.h"

START_TEST(runs)
{
    ck_assert_int_eq(1 + 1, 2);
}
END_TEST

/* Leaves the process early when asked: a run without fork must not pass. */
START_TEST(may_exit)
{
    if (getenv("KVE_GUARD_EXIT"))
        exit(0);
    ck_assert_int_ge(_i, 0);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(suite_guard, runs),
        KVE_LOOP_TEST(suite_guard, may_exit, 0, 2),
    };
    const kve_suite_spec spec = {"suite_guard", 30, 0, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
