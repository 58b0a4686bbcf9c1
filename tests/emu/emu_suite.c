/* emu_suite.c — pools, shapes and the reference of the emulator suites. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_cases.h"

const uint32_t kve_shapes[KVE_N_SHAPES][2] = {{32, 32},  {64, 32},  {64, 64},
                                              {128, 64}, {128, 32}, {256, 64}};
kve_emu_pool *kve_pools[KVE_N_SHAPES];
kve_emu_pool *kve_serial_pools[KVE_N_SHAPES];

void kve_pools_setup(void)
{
    for (size_t i = 0; i < KVE_N_SHAPES; i++) {
        kve_pools[i] = kve_emu_pool_create(kve_shapes[i][0], kve_shapes[i][1]);
        kve_serial_pools[i] = kve_emu_pool_create_serial(kve_shapes[i][0], kve_shapes[i][1], i + 1);
        ck_assert_ptr_nonnull(kve_pools[i]);
        ck_assert_ptr_nonnull(kve_serial_pools[i]);
    }
}

void kve_pools_teardown(void)
{
    for (size_t i = 0; i < KVE_N_SHAPES; i++) {
        kve_emu_pool_destroy(kve_pools[i]);
        kve_emu_pool_destroy(kve_serial_pools[i]);
    }
}

size_t kve_pick_shape(uint64_t *rng)
{
    static const size_t weighted[] = {0, 0, 0, 1, 1, 2, 2, 2, 3, 4, 5};
    return weighted[kve_rand_below(rng, sizeof weighted / sizeof weighted[0])];
}

kve_context *kve_reference(void)
{
    kve_context *ctx = NULL;
    ck_assert_int_eq(kve_context_create(KVE_BACKEND_CPU, &ctx), KVE_OK);
    ck_assert_int_eq(kve_context_set_cpu_isa(ctx, KVE_CPU_ISA_SCALAR), KVE_OK);
    ck_assert_int_eq(kve_context_set_threads(ctx, 1), KVE_OK);
    return ctx;
}

kve_context *kve_ref, *kve_emu;

void kve_emu_fixture_setup(void)
{
    kve_pools_setup();
    kve_ref = kve_reference();
    kve_emu = kve_emu_context_create();
    ck_assert_ptr_nonnull(kve_emu);
}

void kve_emu_fixture_teardown(void)
{
    kve_context_destroy(kve_emu);
    kve_context_destroy(kve_ref);
    kve_pools_teardown();
}

unsigned kve_env_count(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

void kve_emu_track_case(const kve_case *c, const kve_case_bufs *b, int on)
{
    for (int i = 0; i < c->n_bufs; i++) {
        if (on)
            kve_emu_track(b->p[i], c->bytes[i]);
        else
            kve_emu_untrack(b->p[i]);
    }
}

int kve_emu_in_child(void (*fn)(void *), void *arg, char *err, size_t err_bytes)
{
    int fd[2];
    fflush(stdout);
    fflush(stderr);
    if (pipe(fd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (pid > 0 && (r = read(fd[0], err + got, err_bytes - 1 - got)) > 0)
        got += (size_t)r;
    err[got] = '\0';
    close(fd[0]);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return st;
}

void kve_emu_log_same_step(kve_emu_launch_rec *first, uint32_t *n_first,
                           const kve_emu_launch_rec *log, uint32_t n_log, int step,
                           const char *what)
{
    const kve_emu_launch_rec *now = *n_first ? log : first;
    for (uint32_t k = 0; k < n_log; k++)
        ck_assert_msg(strstr(now[k].what, "kernel"), "step %d: %s in a %s", step, now[k].what,
                      what);
    if (!*n_first) {
        *n_first = n_log;
        return;
    }
    ck_assert_uint_eq(n_log, *n_first);
    for (uint32_t k = 0; k < n_log; k++) {
        ck_assert_str_eq(log[k].what, first[k].what);
        ck_assert_uint_eq(log[k].grid, first[k].grid);
        ck_assert_uint_eq(log[k].bytes, first[k].bytes);
        ck_assert_uint_eq(log[k].threads, first[k].threads);
    }
}
