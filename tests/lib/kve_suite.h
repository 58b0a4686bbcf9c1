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
 * tests/lib/kve_tests.cmake's kve_add_check_suite() reads the same lines from the
 * sources and registers one ctest test per group, telling the runner its
 * group, how many entries it read there and every group it registered
 * (KVE_SUITE_GROUP, KVE_SUITE_ENTRIES, KVE_SUITE_GROUPS). The runner fails
 * when a group lists no test, when what it compiled differs from what CMake
 * read (a group no ctest runs, another entry count), when Check ran another
 * number of runs than listed (a filter such as CK_RUN_CASE or
 * CK_EXCLUDE_CASE, a lost registration), or when a test exits the process
 * early. A START_TEST missing from the list does not build (-Werror: its
 * TTest pointer is unused).
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

/* The process running the listed tests, or 0 when none runs: a test that
 * calls exit() in a process without fork would otherwise end the run with
 * status 0. Check's forked children exit normally after each test. (A
 * function's static: this header has no file-scope variables to go unused.) */
static inline pid_t *kve_suite_runner_pid(void)
{
    static pid_t pid;
    return &pid;
}

static inline void kve_suite_at_exit(void)
{
    if (*kve_suite_runner_pid() == getpid()) {
        fprintf(stderr, "kve_suite: a test exited the process before the suite finished\n");
        _exit(1);
    }
}

static inline int kve_suite_fail(const char *name, const char *why, const char *group, long a,
                                 long b)
{
    fprintf(stderr, "kve_suite %s: %s (group \"%s\": %ld vs %ld)\n", name, why, group, a, b);
    return EXIT_FAILURE;
}

/* Whether @p g is one of the comma-separated @p groups. */
static inline int kve_suite_in(const char *groups, const char *g)
{
    size_t len = strlen(g);
    for (const char *p = groups; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, g, len) && (p[len] == ',' || p[len] == '\0'))
            return 1;
    return 0;
}

/* Runs the group $KVE_SUITE_GROUP of @p tests (every group when unset) and
 * checks the list against what CMake read ($KVE_SUITE_ENTRIES entries in
 * the group, $KVE_SUITE_GROUPS) and what ran; the exit status. */
static inline int kve_suite_main(const kve_suite_spec *spec, const kve_suite_test *tests, size_t n)
{
    const char *group = getenv("KVE_SUITE_GROUP");
    const char *entries = getenv("KVE_SUITE_ENTRIES");
    const char *groups = getenv("KVE_SUITE_GROUPS");
    if (group && !*group)
        group = NULL;
    long listed = 0, in_group = 0;
    for (size_t k = 0; k < n; k++) {
        if (tests[k].hi <= tests[k].lo)
            return kve_suite_fail(spec->name, "an empty loop range", tests[k].group, tests[k].lo,
                                  tests[k].hi);
        if (groups && !kve_suite_in(groups, tests[k].group))
            return kve_suite_fail(spec->name, "a group ctest does not run", tests[k].group, 0, 0);
        if (!group || !strcmp(group, tests[k].group)) {
            listed += tests[k].hi - tests[k].lo;
            in_group++;
        }
    }
    if (listed == 0)
        return kve_suite_fail(spec->name, "no test listed", group ? group : "*", 0, 0);
    if (group && entries && strtol(entries, NULL, 10) != in_group)
        return kve_suite_fail(spec->name, "CMake read a different list than was compiled", group,
                              strtol(entries, NULL, 10), in_group);
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
    atexit(kve_suite_at_exit);
    *kve_suite_runner_pid() = getpid();
    srunner_run(sr, NULL, group, CK_NORMAL);
    *kve_suite_runner_pid() = 0;
    long ran = srunner_ntests_run(sr);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (ran != listed)
        return kve_suite_fail(spec->name, "ran a different number of tests than listed",
                              group ? group : "*", ran, listed);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
