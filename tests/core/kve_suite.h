/*
 * kve_suite.h — the one way every Check suite of tests/ registers its tests,
 * so that none can silently drop out of the run.
 *
 * A suite lists its tests once, in its main(), one per line:
 *
 *     const kve_suite_test tests[] = {
 *         KVE_TEST(group, test_name),
 *         KVE_LOOP_TEST(group, test_name, 0, 3),   (runs _i = 0, 1, 2)
 *     };
 *     return kve_suite_main(&spec, tests, KVE_COUNT(tests));
 *
 * tests/CMakeLists.txt's kve_add_check_suite() reads the same lines from the
 * source and registers one ctest test per group, telling the runner how
 * many runs it read for that group (KVE_SUITE_GROUP, KVE_SUITE_EXPECT). The
 * runner fails when a group lists no test, when what it compiled differs
 * from what CMake read, when Check ran fewer tests than listed (a filter
 * such as CK_RUN_CASE or CK_EXCLUDE_CASE, a missed registration), or when a
 * test exits the process early. A START_TEST missing from the list does not
 * build (-Werror: its TTest pointer is unused).
 */
#ifndef KVE_SUITE_H
#define KVE_SUITE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct {
    const char *group; /* the Check TCase, one ctest test */
    const TTest *test;
    int lo, hi; /* loop range [lo, hi); one run is [0, 1) */
} kve_suite_test;

#define KVE_TEST(group, fn) {#group, fn, 0, 1}
#define KVE_LOOP_TEST(group, fn, lo, hi) {#group, fn, lo, hi}
#define KVE_COUNT(array) (sizeof(array) / sizeof((array)[0]))

typedef struct {
    const char *name; /* the Suite */
    int timeout;      /* seconds per test */
    int fork;         /* run each test in a child (Check's default) */
    SFun setup, teardown; /* unchecked fixture of every group, or NULL */
} kve_suite_spec;

/* Set while the listed tests run: a test that calls exit() (in a process
 * without fork) would otherwise end the run with status 0. */
static int kve_suite_running;
static pid_t kve_suite_pid; /* Check's forked children exit normally after each test */

static void kve_suite_at_exit(void)
{
    if (kve_suite_running && getpid() == kve_suite_pid) {
        fprintf(stderr, "kve_suite: a test exited the process before the suite finished\n");
        _exit(1);
    }
}

static int kve_suite_fail(const char *name, const char *why, const char *group, long a, long b)
{
    fprintf(stderr, "kve_suite %s: %s (group \"%s\": %ld vs %ld)\n", name, why, group, a, b);
    return EXIT_FAILURE;
}

/* Runs the group $KVE_SUITE_GROUP of @p tests (every group when unset) and
 * checks the counts; the process's exit status. */
static inline int kve_suite_main(const kve_suite_spec *spec, const kve_suite_test *tests, size_t n)
{
    const char *group = getenv("KVE_SUITE_GROUP");
    const char *expect = getenv("KVE_SUITE_EXPECT");
    if (group && !*group)
        group = NULL;
    long listed = 0;
    for (size_t k = 0; k < n; k++) {
        if (tests[k].hi <= tests[k].lo)
            return kve_suite_fail(spec->name, "an empty loop range", tests[k].group, tests[k].lo,
                                  tests[k].hi);
        if (!group || !strcmp(group, tests[k].group))
            listed += tests[k].hi - tests[k].lo;
    }
    if (listed == 0)
        return kve_suite_fail(spec->name, "no test listed", group ? group : "*", 0, 0);
    if (group && expect && strtol(expect, NULL, 10) != listed)
        return kve_suite_fail(spec->name, "CMake read a different list than was compiled", group,
                              strtol(expect, NULL, 10), listed);
    /* One TCase per group, in the order the groups first appear. */
    Suite *s = suite_create(spec->name);
    for (size_t i = 0; i < n; i++) {
        size_t first = 0;
        while (strcmp(tests[first].group, tests[i].group))
            first++;
        if (first < i)
            continue;
        TCase *tc = tcase_create(tests[i].group);
        tcase_set_timeout(tc, spec->timeout);
        if (spec->setup || spec->teardown)
            tcase_add_unchecked_fixture(tc, spec->setup, spec->teardown);
        for (size_t k = i; k < n; k++)
            if (!strcmp(tests[k].group, tests[i].group))
                tcase_add_loop_test(tc, tests[k].test, tests[k].lo, tests[k].hi);
        suite_add_tcase(s, tc);
    }
    SRunner *sr = srunner_create(s);
    if (!spec->fork)
        srunner_set_fork_status(sr, CK_NOFORK);
    kve_suite_pid = getpid();
    atexit(kve_suite_at_exit);
    kve_suite_running = 1;
    srunner_run(sr, NULL, group, CK_NORMAL);
    kve_suite_running = 0;
    long ran = srunner_ntests_run(sr);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (ran != listed)
        return kve_suite_fail(spec->name, "ran a different number of tests than listed",
                              group ? group : "*", ran, listed);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
